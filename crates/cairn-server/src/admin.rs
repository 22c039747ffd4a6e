//! Maintenance: statistics, the integrity check (streamed as NDJSON),
//! backup (a consistent copy streamed to the client; no server path is
//! ever named by a request) and compaction.

use std::io;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use cairndb::document::Document;
use cairndb::{Database, TreeStats};
use futures_util::StreamExt;
use serde_json::json;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use crate::util::blocking;

type St = State<Arc<AppState>>;
type JsonValue = serde_json::Value;

fn tree_json(t: &TreeStats) -> JsonValue {
    json!({
        "entries": t.entries,
        "pages": t.leaf_pages + t.branch_pages + t.overflow_pages,
        "leaf_pages": t.leaf_pages,
        "branch_pages": t.branch_pages,
        "overflow_pages": t.overflow_pages,
        "depth": t.depth,
        "used_bytes": t.used_bytes,
        "overflow_bytes": t.overflow_bytes,
    })
}

/// The statistics of `cairn stats --json`: pages by kind, fill, tables.
pub fn stats_json(db: &Database) -> ApiResult<JsonValue> {
    let s = db.stats()?;
    Ok(json!({
        "txn": s.txn,
        "page_size": s.page_size,
        "file_bytes": s.file_bytes,
        "pages": {
            "total": s.page_count,
            "header": s.header_pages,
            "leaf": s.leaf_pages,
            "branch": s.branch_pages,
            "overflow": s.overflow_pages,
            "freelist": s.freelist_pages,
            "free": s.free_pages,
            "pending": s.pending_pages,
            "log": s.log_pages,
        },
        "overlay_entries": s.overlay_entries,
        "overlay_bytes": s.overlay_bytes,
        "max_depth": s.max_depth,
        "fill_factor": s.fill_factor,
        "catalog": tree_json(&s.catalog),
        "tables": s.tables.iter().map(|t| {
            let mut j = tree_json(&t.tree);
            if let Some(m) = j.as_object_mut() {
                m.insert("name".into(), json!(t.name));
            }
            j
        }).collect::<Vec<_>>(),
    }))
}

/// What the studio needs to know about this server: whether it refuses
/// writes (`--read-only`), and its version.
#[utoipa::path(get, path = "/server", tag = "admin",
    responses((status = 200, description = "`read_only`, `version`", body = Object,
        example = json!({"read_only": false, "version": "0.1.0"}))))]
pub async fn server_info(State(st): St) -> Json<JsonValue> {
    Json(json!({
        "read_only": st.config.read_only,
        "version": env!("CARGO_PKG_VERSION"),
    }))
}

/// Statistics of the latest commit, and the TTL sweep's counters (`ttl`:
/// `interval_seconds`, 0 when off; `sweeps`, `deleted`, `errors`,
/// `last_sweep_ms`, `last_sweep_seconds`).
#[utoipa::path(get, path = "/stats", tag = "admin",
    responses((status = 200, description = "Pages by kind, fill factor, tables, TTL sweeps", body = Object)))]
pub async fn stats(State(st): St) -> ApiResult<Json<JsonValue>> {
    blocking(move || {
        let mut j = stats_json(&st.db)?;
        if let Some(m) = j.as_object_mut() {
            let ttl = st
                .metrics
                .ttl
                .to_json(st.config.ttl_interval, crate::ttl::enabled(&st));
            m.insert("ttl".into(), ttl);
        }
        Ok(Json(j))
    })
    .await
}

fn line(v: JsonValue) -> Result<Bytes, io::Error> {
    let mut s = v.to_string();
    s.push('\n');
    Ok(Bytes::from(s))
}

/// The check of `cairn check`, one phase at a time.
fn run_check(db: &Database, tx: &mpsc::Sender<Result<Bytes, io::Error>>) -> ApiResult<usize> {
    let send = |v: JsonValue| {
        let _ = tx.blocking_send(line(v));
    };
    let mut total = 0;
    let recovery = db.recovery_report();
    let mut problems: Vec<String> = recovery
        .skipped
        .iter()
        .chain(&recovery.log_incomplete)
        .map(|p| p.to_string())
        .collect();
    send(json!({"phase": "pages", "status": "running"}));
    let report = db.check_integrity()?;
    problems.extend(report.problems.iter().map(|p| p.to_string()));
    total += problems.len();
    send(
        json!({"phase": "pages", "status": "done", "txn": report.txn,
                "pages": report.page_count, "tables": report.tables.len(), "problems": problems}),
    );
    if total > 0 {
        // The upper layers' checks read the pages found damaged.
        return Ok(total);
    }
    for name in db.list_collections()? {
        send(json!({"phase": "indexes", "collection": name, "status": "running"}));
        let p = db.collection::<Document>(&name).check_indexes()?;
        total += p.len();
        send(json!({"phase": "indexes", "collection": name, "status": "done", "problems": p}));
    }
    send(json!({"phase": "events", "status": "running"}));
    let p = cairndb::events::EventStore::new(db).check()?;
    total += p.len();
    send(json!({"phase": "events", "status": "done", "problems": p}));
    Ok(total)
}

/// Checks the whole file — every page, then each collection's indexes,
/// then the event streams — streaming progress as JSON lines; the last
/// line is `{"done": true, "ok": …, "problems": n}`.
#[utoipa::path(post, path = "/check", tag = "admin",
    responses((status = 200, description = "Progress as JSON lines", content_type = "application/x-ndjson")))]
pub async fn check(State(st): St) -> ApiResult<Response> {
    let (tx, rx) = mpsc::channel(16);
    let db = st.db.clone();
    std::thread::Builder::new()
        .name("cairn-serve-check".into())
        .spawn(move || {
            let last = match run_check(&db, &tx) {
                Ok(n) => json!({"done": true, "ok": n == 0, "problems": n}),
                Err(e) => json!({"done": true, "ok": false, "error": e.body()}),
            };
            let _ = tx.blocking_send(line(last));
        })
        .map_err(|e| ApiError::internal(format!("cannot start the check: {e}")))?;
    Ok((
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(ReceiverStream::new(rx)),
    )
        .into_response())
}

/// The size of the chunks a backup is streamed in, in bytes.
pub const BACKUP_CHUNK_BYTES: usize = 64 << 10;
/// Chunks queued between the backup's thread and the socket: at most this
/// many times [`BACKUP_CHUNK_BYTES`] of a backup is in memory at once.
pub const BACKUP_CHUNKS_QUEUED: usize = 4;

type Chunk = Result<Bytes, io::Error>;

/// A `Write` that hands fixed-size chunks to the response body through a
/// bounded channel (blocking when the client reads slower than the copy
/// is made). A send to a closed channel — the client went away — is an
/// I/O error, which ends the backup.
struct ChunkWriter {
    tx: mpsc::Sender<Chunk>,
    buf: Vec<u8>,
}

impl ChunkWriter {
    fn send(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = std::mem::replace(&mut self.buf, Vec::with_capacity(BACKUP_CHUNK_BYTES));
        self.tx
            .blocking_send(Ok(Bytes::from(chunk)))
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the client went away"))
    }
}

impl io::Write for ChunkWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let room = BACKUP_CHUNK_BYTES - self.buf.len();
        let n = data.len().min(room);
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() >= BACKUP_CHUNK_BYTES {
            self.send()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send()
    }
}

/// A consistent copy of the latest commit (a database file, closed
/// cleanly), streamed as the response body while it is made, from a
/// thread of its own through a bounded queue: the server holds at most a
/// few chunks of it, whatever the file's size. Writers continue
/// meanwhile. A failure before the first chunk is a problem response; a
/// later one cuts the body short (the client sees an incomplete
/// transfer, never a complete-looking file).
#[utoipa::path(get, path = "/backup", tag = "admin",
    responses((status = 200, description = "The database file", content_type = "application/octet-stream")))]
pub async fn backup(State(st): St) -> ApiResult<Response> {
    let (tx, mut rx) = mpsc::channel::<Chunk>(BACKUP_CHUNKS_QUEUED);
    let db = st.db.clone();
    let (first_err, mut first_err_rx) = tokio::sync::oneshot::channel::<ApiError>();
    std::thread::Builder::new()
        .name("cairn-serve-backup".into())
        .spawn(move || {
            let mut w = ChunkWriter {
                tx: tx.clone(),
                buf: Vec::with_capacity(BACKUP_CHUNK_BYTES),
            };
            if let Err(e) = db.backup_to_writer(&mut w) {
                tracing::warn!(error = %e, "backup failed");
                let e = ApiError::from(e);
                let msg = e.detail.clone();
                // Before any byte: the handler answers with the problem;
                // after: the body ends with an error.
                let _ = first_err.send(e);
                let _ = tx.blocking_send(Err(io::Error::other(msg)));
            }
        })
        .map_err(|e| ApiError::internal(format!("cannot start the backup: {e}")))?;
    // The header and the walk come first: wait for the first chunk (or the
    // failure) before choosing the status.
    let first = match rx.recv().await {
        Some(Ok(b)) => b,
        Some(Err(e)) => {
            return Err(first_err_rx
                .try_recv()
                .unwrap_or_else(|_| ApiError::internal(format!("the backup failed: {e}"))))
        }
        None => return Err(ApiError::internal("the backup ended without data")),
    };
    let rest = ReceiverStream::new(rx);
    let body = futures_util::stream::once(async move { Ok::<_, io::Error>(first) }).chain(rest);
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream"),
            (
                header::CONTENT_DISPOSITION,
                "attachment; filename=\"backup.cairn\"",
            ),
        ],
        Body::from_stream(body),
    )
        .into_response())
}

/// Compacts the file (423 while read snapshots, such as open find
/// cursors, are alive).
#[utoipa::path(post, path = "/compact", tag = "admin",
    responses((status = 200, description = "`before_bytes`, `after_bytes`", body = Object),
              (status = 423, description = "Readers are active", body = crate::error::ProblemSchema, content_type = "application/problem+json")))]
pub async fn compact(State(st): St) -> ApiResult<Json<JsonValue>> {
    st.writable()?;
    let db = st.db.clone();
    blocking(move || {
        let r = db.compact()?;
        Ok(Json(
            json!({"before_bytes": r.before_bytes, "after_bytes": r.after_bytes}),
        ))
    })
    .await
}
