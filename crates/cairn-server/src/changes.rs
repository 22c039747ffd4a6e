//! Change streams of collections: turning them on and off, and a
//! collection's changes as Server-Sent Events.
//!
//! A change stream runs on a thread of its own over the library's
//! [`ChangeStream`](cairndb::document::ChangeStream), as an event
//! subscription does (`events.rs`): it reads the change log from its
//! checkpoint and then sleeps on the commit notification, so it skips and
//! repeats nothing while writers write. Each SSE event's `id` is the
//! change's resume token (MongoDB's `_id._data`); a client that reconnects
//! with `Last-Event-ID` (or `resume_after=`) resumes right after it. The
//! stream is opened before the response head is sent, so a token the log
//! no longer holds is a 410 problem (`change_stream_history_lost`), not an
//! event. After the changes committed so far, one `caught_up` event
//! (without an id) marks the switch to live delivery; an `invalidate`
//! (drop, rename, disable) is the last event.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::sse::Event;
use axum::response::Response;
use axum::Json;
use cairndb::document::{
    ChangeStreamOptions, Document, DocumentError, FullDocument, ResumeToken, Value,
};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::oneshot;
use utoipa::{IntoParams, ToSchema};

use crate::error::{ApiError, ApiResult};
use crate::live::{self, Step};
use crate::state::AppState;
use crate::util::{blocking, no_collection, parse_body};

type St = State<Arc<AppState>>;
type JsonValue = serde_json::Value;

/// Whether a collection's change stream is on.
#[utoipa::path(get, path = "/collections/{name}/change_stream", tag = "documents",
    params(("name" = String, Path, description = "Collection")),
    responses((status = 200, description = "`enabled`, and the change log's `retention` (records, for every watched collection together)", body = Object,
        example = json!({"enabled": true, "retention": 100000})),
              (status = 404, description = "No such collection", body = crate::error::ProblemSchema, content_type = "application/problem+json")))]
pub async fn change_stream_state(
    State(st): St,
    Path(name): Path<String>,
) -> ApiResult<Json<JsonValue>> {
    let db = st.db.clone();
    blocking(move || {
        crate::docs::existing(&db, &name)?;
        let enabled = db.collection::<Document>(&name).change_stream_enabled()?;
        Ok(Json(
            json!({"enabled": enabled, "retention": db.change_log_retention()?}),
        ))
    })
    .await
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetChangeStream {
    /// Record the collection's writes for change streams (`true`, creating
    /// the collection), or stop (`false`: its open streams end with
    /// `invalidate`).
    enabled: bool,
    /// The change log's retention in records, for every watched
    /// collection of the file together (at least 1; default 100000).
    #[serde(default)]
    retention: Option<u64>,
}

/// Turns a collection's change stream on or off.
#[utoipa::path(put, path = "/collections/{name}/change_stream", tag = "documents",
    params(("name" = String, Path, description = "Collection")),
    request_body = SetChangeStream,
    responses((status = 200, description = "`enabled` and `retention`", body = Object),
              (status = 400, description = "Bad request", body = crate::error::ProblemSchema, content_type = "application/problem+json"),
              (status = 404, description = "No such collection (turning off)", body = crate::error::ProblemSchema, content_type = "application/problem+json")))]
pub async fn set_change_stream(
    State(st): St,
    Path(name): Path<String>,
    body: Bytes,
) -> ApiResult<Json<JsonValue>> {
    st.writable()?;
    let req: SetChangeStream = parse_body(&body)?;
    let db = st.db.clone();
    let dur = st.durability();
    blocking(move || {
        cairndb::document::collection::check_collection_name(&name)?;
        // Checked before anything is written: a bad retention changes
        // nothing.
        if let Some(n) = req.retention {
            if n == 0 || i64::try_from(n).is_err() {
                return Err(ApiError::bad_request(
                    "invalid_request",
                    format!(
                        "\"retention\" must be from 1 to {} records, not {n}",
                        i64::MAX
                    ),
                ));
            }
        }
        let c = db.collection::<Document>(&name).with_durability(dur);
        if req.enabled {
            c.enable_change_stream()?;
        } else {
            match c.disable_change_stream() {
                Err(cairndb::document::DocumentError::CollectionNotFound(_)) => {
                    return Err(no_collection(&name))
                }
                r => r?,
            }
        }
        if let Some(n) = req.retention {
            db.set_change_log_retention(n)?;
        }
        Ok(Json(
            json!({"enabled": req.enabled, "retention": db.change_log_retention()?}),
        ))
    })
    .await
}

#[derive(Deserialize, IntoParams)]
pub struct ChangesParams {
    /// Resume after this change (its resume token, the SSE `id`:
    /// 34 hexadecimal digits); `Last-Event-ID` overrides it. Default: from
    /// now.
    resume_after: Option<String>,
    /// Start after this token, an `invalidate`'s included (then the stream
    /// watches the collection now under the name).
    start_after: Option<String>,
    /// A pipeline over the change events, as a JSON array (`$match`,
    /// `$project`, `$addFields`, `$set`, `$unset`, `$replaceRoot`,
    /// `$replaceWith`).
    pipeline: Option<String>,
    /// `updateLookup`: update events carry the document as the update left
    /// it (`default`: only inserts and replaces carry it).
    full_document: Option<String>,
}

fn token(text: &str, what: &str) -> ApiResult<ResumeToken> {
    ResumeToken::parse(text)
        .map_err(|e| ApiError::bad_request("invalid_resume_token", format!("{what}: {e}")))
}

fn options(headers: &HeaderMap, p: &ChangesParams) -> ApiResult<ChangeStreamOptions> {
    let full_document = match p.full_document.as_deref() {
        None | Some("default") => FullDocument::Default,
        Some("updateLookup") => FullDocument::UpdateLookup,
        Some(other) => {
            return Err(ApiError::bad_request(
                "invalid_request",
                format!("full_document must be default or updateLookup, not {other:?}"),
            ))
        }
    };
    let last = match headers.get("last-event-id") {
        Some(v) => Some(token(
            v.to_str().map_err(|_| {
                ApiError::bad_request("invalid_resume_token", "Last-Event-ID is not text")
            })?,
            "Last-Event-ID",
        )?),
        None => None,
    };
    let resume_after = match (last, &p.resume_after) {
        (Some(t), _) => Some(t),
        (None, Some(s)) => Some(token(s, "resume_after")?),
        (None, None) => None,
    };
    let start_after = match &p.start_after {
        Some(s) if resume_after.is_some() => {
            return Err(ApiError::bad_request(
                "invalid_request",
                format!("give resume_after (or Last-Event-ID) or start_after {s:?}, not both"),
            ))
        }
        Some(s) => Some(token(s, "start_after")?),
        None => None,
    };
    Ok(ChangeStreamOptions {
        full_document,
        resume_after,
        start_after,
    })
}

/// The SSE event of a change of `collection`, its resume token as id. An
/// event without its resume token as `_id` (a pipeline removed it) ends
/// the stream with an error, as MongoDB's does (`ChangeStreamFatalError`):
/// an SSE event with an empty id would reset the client's `Last-Event-ID`,
/// and a reconnect would resume from now, skipping changes.
fn change_event(ev: &Document, collection: &str) -> ApiResult<Event> {
    let token = ResumeToken::of_event(ev).map_err(|_| {
        ApiError::from(DocumentError::ChangeStreamFatal {
            collection: collection.to_string(),
            reason: "cannot provide resume functionality when the resume token is missing \
                     (a pipeline must keep each event's _id, its resume token)"
                .into(),
        })
    })?;
    Ok(Event::default()
        .id(token.to_hex())
        .event("change")
        .data(Value::Object(ev.clone()).to_json().to_string()))
}

/// A collection's changes as Server-Sent Events: `change` events (the
/// change event as MongoDB shapes it; the SSE id is its resume token), one
/// `caught_up` (`{"resume_token": …}`) once the changes committed so far
/// are sent, an `error` event if the stream fails later; the stream ends
/// after an `invalidate` change.
#[utoipa::path(get, path = "/collections/{name}/changes", tag = "documents",
    params(("name" = String, Path, description = "Collection"), ChangesParams,
           ("Last-Event-ID" = Option<String>, Header, description = "Resume after this change (its resume token)")),
    responses((status = 200, description = "An event stream", content_type = "text/event-stream"),
              (status = 400, description = "Bad token, pipeline or option", body = crate::error::ProblemSchema, content_type = "application/problem+json"),
              (status = 409, description = "The collection's change stream is off (`change_stream_not_enabled`)", body = crate::error::ProblemSchema, content_type = "application/problem+json"),
              (status = 410, description = "The change log no longer holds the token's position (`change_stream_history_lost`)", body = crate::error::ProblemSchema, content_type = "application/problem+json"),
              (status = 503, description = "Too many live subscriptions (`Retry-After`)", body = crate::error::ProblemSchema, content_type = "application/problem+json")))]
pub async fn watch(
    State(st): St,
    Path(name): Path<String>,
    headers: HeaderMap,
    Query(p): Query<ChangesParams>,
) -> ApiResult<Response> {
    let opts = options(&headers, &p)?;
    let pipeline: JsonValue = match &p.pipeline {
        Some(text) => serde_json::from_str(text).map_err(|e| {
            ApiError::bad_request("invalid_request", format!("pipeline is not JSON: {e}"))
        })?,
        None => json!([]),
    };
    let (opened_tx, opened_rx) = oneshot::channel::<ApiResult<()>>();
    let response = live::spawn(&st, "cairn-serve-changes", move |feed| {
        let db = feed.state().db.clone();
        let coll = db.collection::<Document>(&name);
        let mut stream = match coll.watch_with(pipeline, opts) {
            Ok(stream) => stream,
            Err(e) => {
                let _ = opened_tx.send(Err(e.into()));
                return;
            }
        };
        if opened_tx.send(Ok(())).is_err() {
            return;
        }
        let mut caught_up = false;
        feed.pump(|| next_step(&mut stream, &name, &mut caught_up));
    })?;
    opened_rx
        .await
        .map_err(|_| ApiError::internal("the change stream thread ended before opening"))??;
    Ok(response)
}

/// The stream's next SSE event: a change; once, when the changes
/// committed so far are sent, `caught_up`; nothing for a while; or the end
/// (after `invalidate`).
fn next_step(
    stream: &mut cairndb::document::ChangeStream<'_>,
    collection: &str,
    caught_up: &mut bool,
) -> ApiResult<Step> {
    let wait = if *caught_up {
        live::POLL
    } else {
        Duration::ZERO
    };
    Ok(match stream.next_timeout(wait)? {
        Some(ev) => Step::Send(change_event(&ev, collection)?),
        None if stream.is_ended() => Step::End,
        None if !*caught_up => {
            *caught_up = true;
            Step::Send(
                Event::default()
                    .event("caught_up")
                    .data(json!({"resume_token": stream.resume_token().to_hex()}).to_string()),
            )
        }
        None => Step::Idle,
    })
}
