//! The server's shared state: the database handle, the options, the open
//! find cursors and the metrics.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use axum::http::StatusCode;
use cairndb::document::{Document, Results};
use cairndb::Database;

use crate::error::{ApiError, ApiResult};
use crate::metrics::Metrics;
use crate::Config;

/// An open find cursor: results read from one snapshot, kept between
/// pages.
pub struct OpenCursor {
    pub results: Results<Document>,
    /// A result read ahead to tell whether another page exists.
    pub peeked: Option<Document>,
    pub last_used: Instant,
}

pub type CursorSlot = Arc<Mutex<OpenCursor>>;

/// What every handler shares.
pub struct AppState {
    pub db: Arc<Database>,
    pub config: Config,
    /// The OpenAPI document, as served.
    pub openapi: OnceLock<String>,
    pub cursors: Mutex<HashMap<String, CursorSlot>>,
    pub metrics: Metrics,
    /// Set at shutdown: subscriptions and streams end.
    pub stopping: AtomicBool,
    /// Woken at shutdown.
    pub stop: tokio::sync::Notify,
}

/// Begins a write transaction with the server's durability.
pub fn begin_write(
    db: &Database,
    durability: cairndb::Durability,
) -> Result<cairndb::WriteTransaction, cairndb::CoreError> {
    let txn = db.begin_write()?;
    txn.set_durability(durability);
    Ok(txn)
}

/// Locks a mutex whatever a panicking holder left (the data are plain
/// maps and counters).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl AppState {
    pub fn new(db: Arc<Database>, config: Config) -> Self {
        AppState {
            db,
            config,
            openapi: OnceLock::new(),
            cursors: Mutex::new(HashMap::new()),
            metrics: Metrics::default(),
            stopping: AtomicBool::new(false),
            stop: tokio::sync::Notify::new(),
        }
    }

    /// 403 in read-only mode.
    pub fn writable(&self) -> ApiResult<()> {
        if self.config.read_only {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "read_only",
                "the server was started with --read-only; this endpoint writes",
            ));
        }
        Ok(())
    }

    /// The durability of the server's writes (`--durability`).
    pub fn durability(&self) -> cairndb::Durability {
        self.config.durability
    }

    /// Ends cursors idle for longer than the expiry.
    pub fn expire_cursors(&self) {
        let idle = self.config.cursor_idle;
        let mut map = lock(&self.cursors);
        map.retain(|_, c| match c.try_lock() {
            Ok(c) => c.last_used.elapsed() < idle,
            // In use right now: not idle.
            Err(_) => true,
        });
    }

    /// Registers a cursor; returns its id.
    pub fn add_cursor(&self, c: OpenCursor) -> ApiResult<String> {
        self.expire_cursors();
        let mut map = lock(&self.cursors);
        if map.len() >= self.config.max_cursors {
            return Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_cursors",
                format!(
                    "{} cursors are open (the limit); read them to the end, delete them, or wait for them to expire",
                    map.len()
                ),
            ));
        }
        let id = crate::util::random_id();
        map.insert(id.clone(), Arc::new(Mutex::new(c)));
        Ok(id)
    }

    pub fn cursor(&self, id: &str) -> ApiResult<CursorSlot> {
        self.expire_cursors();
        lock(&self.cursors).get(id).cloned().ok_or_else(|| {
            ApiError::not_found(
                "cursor_not_found",
                format!("no open cursor {id:?} (it was read to the end, deleted, or expired)"),
            )
        })
    }

    pub fn remove_cursor(&self, id: &str) -> bool {
        lock(&self.cursors).remove(id).is_some()
    }

    pub fn close_cursors(&self) {
        lock(&self.cursors).clear();
    }
}
