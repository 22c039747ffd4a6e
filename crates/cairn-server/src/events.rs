//! Event streams: append with an expected version, read forward or
//! backward, the global log, and live subscriptions as Server-Sent Events.
//!
//! A subscription runs on a thread of its own over the library's
//! [`Subscription`](cairndb::events::Subscription) (catch-up reads, then
//! the commit notification), so it skips and repeats nothing while writers
//! append. Each SSE event's `id` is its global position (a log
//! subscription) or its stream version (a stream subscription); a client
//! that reconnects with `Last-Event-ID` resumes right after it. After the
//! history, one `caught_up` event (without an id) marks the switch to live
//! delivery.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::sse::Event;
use axum::response::Response;
use axum::Json;
use base64::Engine;
use cairndb::events::{
    Direction, EventData, EventFilter, EventStore, ExpectedVersion, Position, ReadFrom,
    RecordedEvent, StreamState, StreamVersion, SubscriptionMessage, Uuid,
};
use serde::Deserialize;
use serde_json::{json, Map};
use utoipa::{IntoParams, ToSchema};

use crate::error::{ApiError, ApiResult};
use crate::live::{self, Step};
use crate::state::AppState;
use crate::util::{blocking, parse_body};

type St = State<Arc<AppState>>;
type JsonValue = serde_json::Value;

/// An event to append.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewEvent {
    /// The event type.
    #[serde(rename = "type")]
    event_type: String,
    /// The payload as JSON (stored as JSON text).
    #[serde(default)]
    #[schema(value_type = Object)]
    data: Option<JsonValue>,
    /// The payload as base64 bytes (instead of `data`).
    #[serde(default)]
    data_b64: Option<String>,
    /// Metadata as JSON.
    #[serde(default)]
    #[schema(value_type = Object)]
    metadata: Option<JsonValue>,
    /// Metadata as base64 bytes.
    #[serde(default)]
    metadata_b64: Option<String>,
    /// The event id (a UUID; makes a retried append idempotent).
    #[serde(default)]
    id: Option<String>,
}

fn bytes_of(json: Option<JsonValue>, b64: Option<String>, what: &str) -> ApiResult<Vec<u8>> {
    match (json, b64) {
        (Some(_), Some(_)) => Err(ApiError::bad_request(
            "invalid_event",
            format!("give either \"{what}\" or \"{what}_b64\", not both"),
        )),
        (Some(v), None) => Ok(v.to_string().into_bytes()),
        (None, Some(s)) => base64::engine::general_purpose::STANDARD
            .decode(s)
            .map_err(|e| {
                ApiError::bad_request(
                    "invalid_base64",
                    format!("\"{what}_b64\" is not base64: {e}"),
                )
            }),
        (None, None) => Ok(Vec::new()),
    }
}

fn to_event_data(i: usize, e: NewEvent) -> ApiResult<EventData> {
    let at = |err: ApiError| {
        let d = format!("event {i}: {}", err.detail);
        let mut err = err.with("index", i);
        err.detail = d;
        err
    };
    let data = bytes_of(e.data, e.data_b64, "data").map_err(at)?;
    let meta = bytes_of(e.metadata, e.metadata_b64, "metadata").map_err(at)?;
    let mut ev = EventData::new(e.event_type, data).with_metadata(meta);
    if let Some(id) = e.id {
        let id = Uuid::parse_str(&id).map_err(|err| {
            at(ApiError::bad_request(
                "invalid_event",
                format!("\"id\" is not a UUID: {err}"),
            ))
        })?;
        ev = ev.with_id(id);
    }
    Ok(ev)
}

fn put_payload(m: &mut Map<String, JsonValue>, name: &str, bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    match serde_json::from_slice::<JsonValue>(bytes) {
        Ok(v) => {
            m.insert(name.to_string(), v);
        }
        Err(_) => {
            m.insert(
                format!("{name}_b64"),
                JsonValue::String(base64::engine::general_purpose::STANDARD.encode(bytes)),
            );
        }
    }
}

/// An event as JSON (as `cairn events read` prints it).
pub fn event_json(e: &RecordedEvent) -> JsonValue {
    let mut m = Map::new();
    m.insert("stream".into(), json!(e.stream));
    m.insert("version".into(), json!(e.version.0));
    m.insert("position".into(), json!(e.position.0));
    m.insert("id".into(), json!(e.id.to_string()));
    m.insert("type".into(), json!(e.event_type));
    let t = std::time::UNIX_EPOCH + Duration::from_micros(e.recorded_at_micros);
    m.insert(
        "recorded_at".into(),
        json!(humantime::format_rfc3339_micros(t).to_string()),
    );
    m.insert("recorded_at_us".into(), json!(e.recorded_at_micros));
    put_payload(&mut m, "data", &e.data);
    put_payload(&mut m, "metadata", &e.metadata);
    JsonValue::Object(m)
}

fn parse_expected(s: Option<&str>) -> ApiResult<ExpectedVersion> {
    Ok(match s {
        None | Some("any") => ExpectedVersion::Any,
        Some("no-stream") | Some("no_stream") => ExpectedVersion::NoStream,
        Some("exists") => ExpectedVersion::Exists,
        Some(v) => ExpectedVersion::Exact(StreamVersion(v.parse().map_err(|_| {
            ApiError::bad_request(
                "invalid_request",
                format!("expected must be any, no_stream, exists or a version number, not {v:?}"),
            )
        })?)),
    })
}

#[derive(Deserialize, IntoParams)]
pub struct ListParams {
    /// Only streams whose name starts with this.
    prefix: Option<String>,
}

/// The streams, in name order.
#[utoipa::path(get, path = "/streams", tag = "events",
    params(ListParams),
    responses((status = 200, description = "`streams`: name, version, state, first_visible", body = Object)))]
pub async fn list_streams(
    State(st): St,
    Query(p): Query<ListParams>,
) -> ApiResult<Json<JsonValue>> {
    let db = st.db.clone();
    blocking(move || {
        let list = EventStore::new(&db).list_streams(p.prefix.as_deref().unwrap_or(""))?;
        let out: Vec<JsonValue> = list
            .iter()
            .map(|s| {
                json!({
                    "name": s.name,
                    "version": s.version.map(|v| v.0),
                    "state": match s.state {
                        StreamState::Live => "live",
                        StreamState::SoftDeleted => "deleted",
                        StreamState::HardDeleted => "tombstoned",
                    },
                    "first_visible": s.first_visible.0,
                })
            })
            .collect();
        Ok(Json(json!({ "streams": out })))
    })
    .await
}

#[derive(Deserialize, IntoParams)]
pub struct AppendParams {
    /// What the stream's version must be: `any` (default), `no_stream`,
    /// `exists`, or a version number.
    expected: Option<String>,
}

/// Appends events (a JSON array) to a stream in one transaction. On a
/// version conflict: 409 with `current_version`.
#[utoipa::path(post, path = "/streams/{stream}/events", tag = "events",
    params(("stream" = String, Path, description = "Stream"), AppendParams),
    request_body = Vec<NewEvent>,
    responses((status = 200, description = "`version`, `first_position`, `count`, `idempotent`", body = Object),
              (status = 409, description = "Wrong expected version (`current_version`)", body = crate::error::ProblemSchema, content_type = "application/problem+json")))]
pub async fn append(
    State(st): St,
    Path(stream): Path<String>,
    Query(p): Query<AppendParams>,
    body: Bytes,
) -> ApiResult<Json<JsonValue>> {
    st.writable()?;
    let expected = parse_expected(p.expected.as_deref())?;
    let input: Vec<NewEvent> = parse_body(&body)?;
    let events = input
        .into_iter()
        .enumerate()
        .map(|(i, e)| to_event_data(i, e))
        .collect::<ApiResult<Vec<_>>>()?;
    let db = st.db.clone();
    let dur = st.durability();
    blocking(move || {
        let r = EventStore::new(&db)
            .with_durability(dur)
            .append(&stream, expected, &events)?;
        Ok(Json(json!({
            "version": r.version.map(|v| v.0),
            "first_position": r.first_position.map(|p| p.0),
            "count": r.count,
            "idempotent": r.idempotent,
        })))
    })
    .await
}

#[derive(Deserialize, IntoParams)]
pub struct ReadParams {
    /// Start here (inclusive; default: the first, or the last backward).
    from: Option<u64>,
    /// `forward` (default) or `backward`.
    direction: Option<String>,
    /// The most events (default 100, at most 10000).
    limit: Option<usize>,
}

fn direction(s: Option<&str>) -> ApiResult<Direction> {
    match s {
        None | Some("forward") => Ok(Direction::Forward),
        Some("backward") => Ok(Direction::Backward),
        Some(d) => Err(ApiError::bad_request(
            "invalid_request",
            format!("direction must be forward or backward, not {d:?}"),
        )),
    }
}

fn next_of(dir: Direction, last: Option<u64>, full: bool) -> JsonValue {
    match (last, full, dir) {
        (Some(l), true, Direction::Forward) => json!(l + 1),
        (Some(l), true, Direction::Backward) if l > 0 => json!(l - 1),
        _ => JsonValue::Null,
    }
}

/// A page of a stream's events; `next` is where the next page starts
/// (null at the end).
#[utoipa::path(get, path = "/streams/{stream}/events", tag = "events",
    params(("stream" = String, Path, description = "Stream"), ReadParams),
    responses((status = 200, description = "`events` and `next`", body = Object),
              (status = 404, description = "No such stream", body = crate::error::ProblemSchema, content_type = "application/problem+json")))]
pub async fn read_stream(
    State(st): St,
    Path(stream): Path<String>,
    Query(p): Query<ReadParams>,
) -> ApiResult<Json<JsonValue>> {
    let dir = direction(p.direction.as_deref())?;
    let limit = p.limit.unwrap_or(100).clamp(1, 10_000);
    let from = p
        .from
        .map_or(ReadFrom::Start, |v| ReadFrom::At(StreamVersion(v)));
    let from = match (from, dir) {
        (ReadFrom::Start, Direction::Backward) => ReadFrom::End,
        (f, _) => f,
    };
    let db = st.db.clone();
    blocking(move || {
        let evs = EventStore::new(&db).read_stream(&stream, from, dir, limit)?;
        let next = next_of(dir, evs.last().map(|e| e.version.0), evs.len() == limit);
        Ok(Json(json!({
            "events": evs.iter().map(event_json).collect::<Vec<_>>(),
            "next": next,
        })))
    })
    .await
}

#[derive(Deserialize, IntoParams)]
pub struct LogParams {
    /// Start at this global position (inclusive; default: the first, or
    /// the last backward).
    from: Option<u64>,
    /// `forward` (default) or `backward`.
    direction: Option<String>,
    /// The most events (default 100, at most 10000).
    limit: Option<usize>,
    /// Only these event types (comma-separated).
    types: Option<String>,
    /// Only streams whose name starts with this.
    stream_prefix: Option<String>,
}

fn filter_of(types: Option<&str>, prefix: Option<String>) -> EventFilter {
    EventFilter {
        event_types: types
            .map(|t| {
                t.split(',')
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default(),
        stream_prefix: prefix,
    }
}

/// A page of the global log, in position order.
#[utoipa::path(get, path = "/events", tag = "events",
    params(LogParams),
    responses((status = 200, description = "`events` and `next`", body = Object)))]
pub async fn read_all(State(st): St, Query(p): Query<LogParams>) -> ApiResult<Json<JsonValue>> {
    let dir = direction(p.direction.as_deref())?;
    let limit = p.limit.unwrap_or(100).clamp(1, 10_000);
    let from = match (p.from, dir) {
        (Some(v), _) => ReadFrom::At(Position(v)),
        (None, Direction::Forward) => ReadFrom::Start,
        (None, Direction::Backward) => ReadFrom::End,
    };
    let filter = filter_of(p.types.as_deref(), p.stream_prefix);
    let db = st.db.clone();
    blocking(move || {
        let evs = EventStore::new(&db).read_all(from, dir, limit, &filter)?;
        let next = next_of(dir, evs.last().map(|e| e.position.0), evs.len() == limit);
        Ok(Json(json!({
            "events": evs.iter().map(event_json).collect::<Vec<_>>(),
            "next": next,
        })))
    })
    .await
}

/// Where a subscription starts: after `Last-Event-ID` if given, else at
/// `from`, else at 0.
fn start_at(headers: &HeaderMap, from: Option<u64>) -> ApiResult<u64> {
    match headers.get("last-event-id") {
        Some(v) => {
            let n: u64 = v
                .to_str()
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .ok_or_else(|| {
                    ApiError::bad_request(
                        "invalid_request",
                        "Last-Event-ID must be an event position or version",
                    )
                })?;
            Ok(n.saturating_add(1))
        }
        None => Ok(from.unwrap_or(0)),
    }
}

/// Runs a subscription on a thread of its own, feeding the SSE stream
/// (`live.rs`): `event` events with `id_of` as id, one `caught_up` after
/// the history; it ends when the client goes, at shutdown, or on an error
/// (sent as an `error` event).
fn sse<P: Send + 'static>(
    st: Arc<AppState>,
    open: impl for<'db> FnOnce(&'db cairndb::Database) -> cairndb::events::Subscription<'db, P>
        + Send
        + 'static,
    id_of: fn(&RecordedEvent) -> u64,
    checkpoint: fn(&P) -> u64,
) -> ApiResult<Response> {
    live::spawn(&st, "cairn-serve-sse", move |feed| {
        let db = feed.state().db.clone();
        let mut sub = open(&db);
        feed.pump(|| {
            Ok(match sub.next_timeout(live::POLL)? {
                Some(SubscriptionMessage::Event(e)) => Step::Send(
                    Event::default()
                        .id(id_of(&e).to_string())
                        .event("event")
                        .data(event_json(&e).to_string()),
                ),
                Some(SubscriptionMessage::CaughtUp { checkpoint: c }) => Step::Send(
                    Event::default()
                        .event("caught_up")
                        .data(json!({ "next": checkpoint(&c) }).to_string()),
                ),
                None => Step::Idle,
            })
        });
    })
}

#[derive(Deserialize, IntoParams)]
pub struct SubscribeAllParams {
    /// The first global position wanted (default 0; `Last-Event-ID`
    /// overrides it).
    from: Option<u64>,
    /// Only these event types (comma-separated).
    types: Option<String>,
    /// Only streams whose name starts with this.
    stream_prefix: Option<String>,
}

/// A live subscription to the global log as Server-Sent Events (`event`
/// events with the position as id, one `caught_up` after the history).
#[utoipa::path(get, path = "/events/subscribe", tag = "events",
    params(SubscribeAllParams, ("Last-Event-ID" = Option<u64>, Header, description = "Resume after this position")),
    responses((status = 200, description = "An event stream", content_type = "text/event-stream"),
              (status = 503, description = "Too many live subscriptions (`Retry-After`)", body = crate::error::ProblemSchema, content_type = "application/problem+json")))]
pub async fn subscribe_all(
    State(st): St,
    headers: HeaderMap,
    Query(p): Query<SubscribeAllParams>,
) -> ApiResult<Response> {
    let from = start_at(&headers, p.from)?;
    let filter = filter_of(p.types.as_deref(), p.stream_prefix);
    sse(
        st,
        move |db| EventStore::new(db).subscribe_all(Position(from), filter),
        |e| e.position.0,
        |p: &Position| p.0,
    )
}

#[derive(Deserialize, IntoParams)]
pub struct SubscribeStreamParams {
    /// The first version wanted (default 0; `Last-Event-ID` overrides it).
    from: Option<u64>,
}

/// A live subscription to one stream as Server-Sent Events (ids are
/// stream versions).
#[utoipa::path(get, path = "/streams/{stream}/subscribe", tag = "events",
    params(("stream" = String, Path, description = "Stream"), SubscribeStreamParams,
           ("Last-Event-ID" = Option<u64>, Header, description = "Resume after this version")),
    responses((status = 200, description = "An event stream", content_type = "text/event-stream"),
              (status = 400, description = "Bad stream name", body = crate::error::ProblemSchema, content_type = "application/problem+json"),
              (status = 503, description = "Too many live subscriptions (`Retry-After`)", body = crate::error::ProblemSchema, content_type = "application/problem+json")))]
pub async fn subscribe_stream(
    State(st): St,
    Path(stream): Path<String>,
    headers: HeaderMap,
    Query(p): Query<SubscribeStreamParams>,
) -> ApiResult<Response> {
    cairndb::events::check_stream_name(&stream)?;
    let from = start_at(&headers, p.from)?;
    sse(
        st,
        move |db| EventStore::new(db).subscribe_stream(&stream, StreamVersion(from)),
        |e| e.version.0,
        |v: &StreamVersion| v.0,
    )
}
