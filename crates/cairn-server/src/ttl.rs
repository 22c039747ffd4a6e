//! The TTL sweep: what MongoDB's TTL monitor does, on a timer of the
//! server's. Every `--ttl-interval` seconds (60 by default; 0 turns it off;
//! never on a read-only server) it visits each collection that has a TTL
//! index and deletes its expired documents in transactions of at most
//! [`TTL_SWEEP_BATCH`] deletions, so a sweep never holds the writer for
//! longer than one batch: requests' writes take turns between batches. A
//! shutdown stops it between two batches. Its counters are in `/stats`
//! (`ttl`) and `/metrics` (`cairn_ttl_*`).

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use cairndb::document::Document;
use serde_json::{json, Value};

use crate::state::AppState;

/// Expired documents one transaction of the sweep deletes at most.
pub const TTL_SWEEP_BATCH: usize = 500;

/// What the sweeps did since the server started.
#[derive(Default)]
pub struct TtlCounters {
    /// Sweeps finished.
    pub sweeps: AtomicU64,
    /// Documents they deleted.
    pub deleted: AtomicU64,
    /// Collections whose pass failed (each logged).
    pub errors: AtomicU64,
    /// When the last sweep ended, in milliseconds since the Unix epoch
    /// (0: none yet).
    pub last_sweep_ms: AtomicI64,
    /// How long the last sweep took, in microseconds.
    pub last_sweep_us: AtomicU64,
}

impl TtlCounters {
    /// The `ttl` object of `/stats`.
    pub fn to_json(&self, interval: Duration, on: bool) -> Value {
        let last = self.last_sweep_ms.load(Ordering::Relaxed);
        json!({
            "interval_seconds": if on { interval.as_secs_f64() } else { 0.0 },
            "sweeps": self.sweeps.load(Ordering::Relaxed),
            "deleted": self.deleted.load(Ordering::Relaxed),
            "errors": self.errors.load(Ordering::Relaxed),
            "last_sweep_ms": if last == 0 { Value::Null } else { json!(last) },
            "last_sweep_seconds": self.last_sweep_us.load(Ordering::Relaxed) as f64 / 1e6,
        })
    }
}

/// Whether this server sweeps (an interval, and a writable file).
pub fn enabled(st: &AppState) -> bool {
    !st.config.read_only && !st.config.ttl_interval.is_zero()
}

/// One sweep over every collection with a TTL index (blocking: run it on
/// the blocking pool). Returns the documents deleted.
pub fn sweep(st: &AppState) -> u64 {
    let started = Instant::now();
    let c = &st.metrics.ttl;
    let names = match st.db.ttl_collections() {
        Ok(n) => n,
        Err(e) => {
            c.errors.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(error = %e, "TTL sweep: cannot list the collections");
            return 0;
        }
    };
    let mut total = 0u64;
    for name in &names {
        if st.stopping.load(Ordering::SeqCst) {
            break;
        }
        let coll = st
            .db
            .collection::<Document>(name)
            .with_durability(st.durability());
        let going = || !st.stopping.load(Ordering::SeqCst);
        match coll.delete_all_expired(TTL_SWEEP_BATCH, |_| going()) {
            Ok(n) => {
                total += n;
                if n > 0 {
                    tracing::info!(collection = %name, deleted = n, "TTL sweep deleted expired documents");
                }
            }
            Err(e) => {
                c.errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(collection = %name, error = %e, "TTL sweep failed");
            }
        }
    }
    let took = started.elapsed();
    c.sweeps.fetch_add(1, Ordering::Relaxed);
    c.deleted.fetch_add(total, Ordering::Relaxed);
    c.last_sweep_us.store(
        u64::try_from(took.as_micros()).unwrap_or(u64::MAX),
        Ordering::Relaxed,
    );
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    c.last_sweep_ms.store(now_ms, Ordering::Relaxed);
    tracing::debug!(
        collections = names.len(),
        deleted = total,
        took_ms = took.as_millis() as u64,
        "TTL sweep done"
    );
    total
}

/// Starts the sweep task: a sweep every interval (the first one interval
/// after the start), until the server stops. Between sweeps it holds only
/// a weak reference to the state, so it never delays the close.
pub fn spawn(state: &Arc<AppState>) {
    if !enabled(state) {
        return;
    }
    let every = state.config.ttl_interval;
    let weak = Arc::downgrade(state);
    tracing::info!(interval_s = every.as_secs_f64(), "TTL sweep on");
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            let Some(st) = weak.upgrade() else { return };
            if st.stopping.load(Ordering::SeqCst) {
                return;
            }
            if tokio::task::spawn_blocking(move || sweep(&st))
                .await
                .is_err()
            {
                tracing::warn!("TTL sweep task failed");
            }
        }
    });
}
