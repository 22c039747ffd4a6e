//! `cairn events …`: append, read, follow and list event streams.
//!
//! Events are JSON lines. Input (`append`): `{"type": "Created", "data": <any
//! JSON>, "metadata": <any JSON>, "id": "<uuid>"}` — `type` is required;
//! `data_b64` / `metadata_b64` carry raw bytes instead (standard base64);
//! `id` makes a retried append idempotent. Output: one line per event with
//! `stream`, `version`, `position`, `id`, `type`, `recorded_at` (RFC 3339,
//! UTC, microseconds), `recorded_at_us` (the same instant as µs since the
//! Unix epoch), and `data` / `metadata` (as JSON when the bytes are JSON,
//! else `data_b64` / `metadata_b64`).
//!
//! Every subcommand takes a database file or an `etcd://host:port,…/prefix`
//! URL: on a cluster the same event layer runs through the storage seam
//! (`cairndb_etcd::EtcdEvents`), and `all --follow` follows the cluster's
//! commits.

use std::io::{self, BufRead, Write};
use std::path::PathBuf;
use std::time::Duration;

use base64::Engine;
use cairndb::events::{
    AppendResult, Direction, EventData, EventFilter, EventStore, ExpectedVersion, Position,
    ReadFrom, RecordedEvent, StreamInfo, StreamVersion, SubscriptionMessage, Uuid,
};
use cairndb::Database;
use cairndb_etcd::EtcdDatabase;
use clap::{Args, Subcommand};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::etcd::Backend;
use crate::{CliError, Res};

/// The `events` command group.
#[derive(Args)]
pub struct EventsArgs {
    #[command(subcommand)]
    command: EventsCommand,
}

#[derive(Subcommand)]
enum EventsCommand {
    /// Append the events on standard input (JSON lines) to a stream, all in
    /// one transaction (the file is created if missing). Prints the stream's
    /// new version and the events' global positions.
    Append {
        /// The database file (or an etcd:// URL).
        db: PathBuf,
        /// The stream name.
        stream: String,
        /// What the stream's version must be: `any`, `no-stream`, `exists`,
        /// or a version number.
        #[arg(long, default_value = "any")]
        expected: String,
    },
    /// Print a stream's events as JSON lines.
    Read {
        /// The database file (or an etcd:// URL).
        db: PathBuf,
        /// The stream name.
        stream: String,
        /// Start at this version (inclusive); default: the first (or, with
        /// --backward, the last).
        #[arg(long)]
        from: Option<u64>,
        /// Newest first.
        #[arg(long)]
        backward: bool,
        /// At most this many events.
        #[arg(long, default_value_t = u64::MAX)]
        limit: u64,
    },
    /// Print the global log as JSON lines, in position order.
    All {
        /// The database file (or an etcd:// URL).
        db: PathBuf,
        /// Start at this global position (inclusive).
        #[arg(long, default_value_t = 0)]
        from: u64,
        /// Only events of this type (repeatable).
        #[arg(long = "type")]
        types: Vec<String>,
        /// Only events of streams whose name starts with this.
        #[arg(long)]
        stream_prefix: Option<String>,
        /// Keep printing new events as they are committed (until
        /// interrupted). Other processes' commits are picked up every
        /// 200 ms, whenever no other process holds the file open for
        /// writing (a CairnDB file has one writing process at a time).
        #[arg(long)]
        follow: bool,
    },
    /// List the streams: name, version (`-` if none), state, tab-separated.
    Streams {
        /// The database file (or an etcd:// URL).
        db: PathBuf,
        /// Only streams whose name starts with this.
        #[arg(long, default_value = "")]
        prefix: String,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InputEvent {
    #[serde(rename = "type")]
    event_type: String,
    data: Option<Value>,
    data_b64: Option<String>,
    metadata: Option<Value>,
    metadata_b64: Option<String>,
    id: Option<String>,
}

fn bytes_of(json: Option<Value>, b64: Option<String>, what: &str) -> Result<Vec<u8>, CliError> {
    match (json, b64) {
        (Some(_), Some(_)) => Err(CliError::User(format!(
            "give either \"{what}\" or \"{what}_b64\", not both"
        ))),
        (Some(v), None) => Ok(serde_json::to_vec(&v).map_err(|e| CliError::User(e.to_string()))?),
        (None, Some(s)) => base64::engine::general_purpose::STANDARD
            .decode(s)
            .map_err(|e| CliError::User(format!("\"{what}_b64\" is not base64: {e}"))),
        (None, None) => Ok(Vec::new()),
    }
}

fn parse_expected(s: &str) -> Result<ExpectedVersion, CliError> {
    Ok(match s {
        "any" => ExpectedVersion::Any,
        "no-stream" => ExpectedVersion::NoStream,
        "exists" => ExpectedVersion::Exists,
        v => ExpectedVersion::Exact(StreamVersion(v.parse().map_err(|_| {
            CliError::User(format!(
                "--expected must be any, no-stream, exists or a version number, not {v:?}"
            ))
        })?)),
    })
}

fn parse_line(line: &str) -> Result<EventData, CliError> {
    let e: InputEvent =
        serde_json::from_str(line).map_err(|e| CliError::User(format!("not an event: {e}")))?;
    let mut ev = EventData::new(e.event_type, bytes_of(e.data, e.data_b64, "data")?)
        .with_metadata(bytes_of(e.metadata, e.metadata_b64, "metadata")?);
    if let Some(id) = e.id {
        ev = ev.with_id(
            Uuid::parse_str(&id)
                .map_err(|e| CliError::User(format!("\"id\" is not a UUID: {e}")))?,
        );
    }
    Ok(ev)
}

fn put_bytes(m: &mut Map<String, Value>, name: &str, bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    match serde_json::from_slice::<Value>(bytes) {
        Ok(v) => {
            m.insert(name.to_string(), v);
        }
        Err(_) => {
            m.insert(
                format!("{name}_b64"),
                Value::String(base64::engine::general_purpose::STANDARD.encode(bytes)),
            );
        }
    }
}

/// An event as the JSON object `read` prints.
pub(crate) fn event_json(e: &RecordedEvent) -> Value {
    let mut m = Map::new();
    m.insert("stream".into(), json!(e.stream));
    m.insert("version".into(), json!(e.version));
    m.insert("position".into(), json!(e.position));
    m.insert("id".into(), json!(e.id.to_string()));
    m.insert("type".into(), json!(e.event_type));
    m.insert("recorded_at".into(), json!(rfc3339(e.recorded_at_micros)));
    m.insert("recorded_at_us".into(), json!(e.recorded_at_micros));
    put_bytes(&mut m, "data", &e.data);
    put_bytes(&mut m, "metadata", &e.metadata);
    Value::Object(m)
}

/// Microseconds since the Unix epoch as an RFC 3339 UTC time with
/// microseconds (`2026-11-25T13:27:06.123456Z`).
fn rfc3339(micros: u64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_micros(micros);
    humantime::format_rfc3339_micros(t).to_string()
}

fn print_event(out: &mut impl Write, e: &RecordedEvent) -> Res {
    writeln!(out, "{}", event_json(e))?;
    Ok(())
}

/// What the subcommands need from a database: a file's event store or a
/// cluster's (one call, one transaction, in both).
trait Events {
    fn append(
        &self,
        stream: &str,
        expected: ExpectedVersion,
        events: &[EventData],
    ) -> Result<AppendResult, CliError>;
    fn read_stream(
        &self,
        stream: &str,
        from: ReadFrom<StreamVersion>,
        dir: Direction,
        limit: usize,
    ) -> Result<Vec<RecordedEvent>, CliError>;
    fn list_streams(&self, prefix: &str) -> Result<Vec<StreamInfo>, CliError>;
    /// Prints the global log from `from` (`follow`: then each new commit,
    /// until interrupted).
    fn print_all(
        &self,
        from: Position,
        filter: EventFilter,
        follow: bool,
        out: &mut dyn Write,
    ) -> Res;
}

/// The file's `EventStore` and the cluster's `EtcdEvents` have the same
/// methods (inherent ones, which these calls reach first).
macro_rules! events_for {
    ($($store:ty),*) => {$(
        impl Events for $store {
            fn append(
                &self,
                stream: &str,
                expected: ExpectedVersion,
                events: &[EventData],
            ) -> Result<AppendResult, CliError> {
                Ok(self.append(stream, expected, events)?)
            }
            fn read_stream(
                &self,
                stream: &str,
                from: ReadFrom<StreamVersion>,
                dir: Direction,
                limit: usize,
            ) -> Result<Vec<RecordedEvent>, CliError> {
                Ok(self.read_stream(stream, from, dir, limit)?)
            }
            fn list_streams(&self, prefix: &str) -> Result<Vec<StreamInfo>, CliError> {
                Ok(self.list_streams(prefix)?)
            }
            fn print_all(
                &self,
                from: Position,
                filter: EventFilter,
                follow: bool,
                out: &mut dyn Write,
            ) -> Res {
                let mut sub = self.subscribe_all(from, filter);
                print_messages(|wait| Ok(sub.next_timeout(wait)?), follow, out)
            }
        }
    )*};
}

events_for!(EventStore<'_>, cairndb_etcd::EtcdEvents<'_>);

/// One pass over what is committed; with `follow`, then every event as a
/// writer (in this process or another, or on the cluster) commits it.
fn print_messages(
    mut next: impl FnMut(Duration) -> Result<Option<SubscriptionMessage<Position>>, CliError>,
    follow: bool,
    out: &mut dyn Write,
) -> Res {
    loop {
        let wait = if follow {
            Duration::from_millis(500)
        } else {
            Duration::ZERO
        };
        match next(wait)? {
            Some(SubscriptionMessage::Event(e)) => writeln!(out, "{}", event_json(&e))?,
            Some(SubscriptionMessage::CaughtUp { .. }) => out.flush()?,
            None if follow => out.flush()?,
            None => return Ok(()),
        }
    }
}

/// Runs `f` on the event store of `db` (a file, created first with
/// `create`, else opened read-only; or an etcd URL).
fn with_events<T>(
    db: &std::path::Path,
    create: bool,
    f: impl FnOnce(&dyn Events) -> Result<T, CliError>,
) -> Result<T, CliError> {
    match Backend::of(db) {
        Backend::Etcd(url) => {
            let cluster = EtcdDatabase::connect(&url)?;
            f(&cluster.events())
        }
        Backend::File(path) => {
            let handle = if create {
                Database::create(&path)?
            } else {
                Database::open_read_only(&path)?
            };
            f(&EventStore::new(&handle))
        }
    }
}

/// Runs an `events` subcommand.
pub fn run(args: EventsArgs, out: &mut impl Write) -> Res {
    match args.command {
        EventsCommand::Append {
            db,
            stream,
            expected,
        } => {
            let expected = parse_expected(&expected)?;
            let mut events = Vec::new();
            for (i, line) in io::stdin().lock().lines().enumerate() {
                let line = line?;
                if line.trim().is_empty() {
                    continue;
                }
                events.push(parse_line(&line).map_err(|e| CliError::AtLine {
                    line: i as u64 + 1,
                    loaded: 0,
                    err: Box::new(e),
                })?);
            }
            let r = with_events(&db, true, |store| store.append(&stream, expected, &events))?;
            let version = r.version.map_or_else(|| "-".to_string(), |v| v.to_string());
            if r.idempotent {
                write!(
                    out,
                    "already appended (idempotent repeat); version {version}"
                )?;
                if let (Some(first), Some(last)) = (r.first_position, r.positions().next_back()) {
                    write!(out, "; positions {first}..={last}")?;
                }
                writeln!(out)?;
            } else if let (Some(first), Some(last)) = (r.first_position, r.positions().next_back())
            {
                writeln!(
                    out,
                    "appended {} events; version {version}; positions {first}..={last}",
                    r.count
                )?;
            } else {
                writeln!(out, "appended 0 events; version {version}")?;
            }
        }
        EventsCommand::Read {
            db,
            stream,
            from,
            backward,
            limit,
        } => {
            let dir = if backward {
                Direction::Backward
            } else {
                Direction::Forward
            };
            let mut from = from.map_or(ReadFrom::Start, |v| ReadFrom::At(StreamVersion(v)));
            let mut left = limit;
            with_events(&db, false, |store| {
                // Page through the stream so large streams need no large
                // buffer.
                while left > 0 {
                    let batch = store.read_stream(&stream, from, dir, left.min(1000) as usize)?;
                    let Some(last) = batch.last().map(|e| e.version) else {
                        break;
                    };
                    for e in &batch {
                        print_event(out, e)?;
                    }
                    left -= batch.len() as u64;
                    from = match dir {
                        Direction::Forward => ReadFrom::At(last.next()),
                        Direction::Backward if last == StreamVersion(0) => break,
                        Direction::Backward => ReadFrom::At(StreamVersion(last.0 - 1)),
                    };
                }
                Ok(())
            })?;
        }
        EventsCommand::All {
            db,
            from,
            types,
            stream_prefix,
            follow,
        } => {
            let filter = EventFilter {
                event_types: types,
                stream_prefix,
            };
            with_events(&db, false, |store| {
                store.print_all(Position(from), filter, follow, out)
            })?;
        }
        EventsCommand::Streams { db, prefix } => {
            for s in with_events(&db, false, |store| store.list_streams(&prefix))? {
                let version = s.version.map_or_else(|| "-".to_string(), |v| v.to_string());
                let state = match s.state {
                    cairndb::events::StreamState::Live => "live",
                    cairndb::events::StreamState::SoftDeleted => "deleted",
                    cairndb::events::StreamState::HardDeleted => "tombstoned",
                };
                writeln!(out, "{}\t{version}\t{state}", s.name)?;
            }
        }
    }
    Ok(())
}
