//! Maintenance: statistics, the integrity check (streamed as NDJSON),
//! backup (a consistent copy streamed to the client; no server path is
//! ever named by a request) and compaction.

use std::io;
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use cairndb::document::Document;
use cairndb::storage::StorageFile;
use cairndb::{Database, TreeStats};
use serde_json::json;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::error::{ApiError, ApiResult};
use crate::state::{lock, AppState};
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

/// Statistics of the latest commit.
#[utoipa::path(get, path = "/stats", tag = "admin",
    responses((status = 200, description = "Pages by kind, fill factor, tables", body = Object)))]
pub async fn stats(State(st): St) -> ApiResult<Json<JsonValue>> {
    let db = st.db.clone();
    blocking(move || Ok(Json(stats_json(&db)?))).await
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

/// An in-memory file the backup is written to before it is streamed.
#[derive(Debug, Default)]
struct MemFile(Mutex<Vec<u8>>);

impl StorageFile for MemFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let v = lock(&self.0);
        let start = usize::try_from(offset).map_err(io::Error::other)?;
        let end = start
            .checked_add(buf.len())
            .filter(|&e| e <= v.len())
            .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "read past the end"))?;
        buf.copy_from_slice(&v[start..end]);
        Ok(())
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut v = lock(&self.0);
        let start = usize::try_from(offset).map_err(io::Error::other)?;
        let end = start
            .checked_add(buf.len())
            .ok_or_else(|| io::Error::other("offset overflow"))?;
        if v.len() < end {
            v.resize(end, 0);
        }
        v[start..end].copy_from_slice(buf);
        Ok(())
    }
    fn sync_data(&self) -> io::Result<()> {
        Ok(())
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        let len = usize::try_from(len).map_err(io::Error::other)?;
        lock(&self.0).resize(len, 0);
        Ok(())
    }
    fn len(&self) -> io::Result<u64> {
        Ok(lock(&self.0).len() as u64)
    }
}

/// A consistent copy of the latest commit (a database file, closed
/// cleanly), streamed as the response body. Writers continue meanwhile.
/// The copy is assembled in memory first (about the size of the live
/// data).
#[utoipa::path(get, path = "/backup", tag = "admin",
    responses((status = 200, description = "The database file", content_type = "application/octet-stream")))]
pub async fn backup(State(st): St) -> ApiResult<Response> {
    let db = st.db.clone();
    let bytes = blocking(move || {
        let f = MemFile::default();
        db.backup_to_storage(&f)?;
        let bytes = std::mem::take(&mut *lock(&f.0));
        Ok(bytes)
    })
    .await?;
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream"),
            (
                header::CONTENT_DISPOSITION,
                "attachment; filename=\"backup.cairn\"",
            ),
        ],
        Body::from(bytes),
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
