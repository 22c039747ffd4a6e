//! `/metrics` in the Prometheus text format: requests and their latency by
//! route and status, and what the engine's public API tells (latest
//! commit, live readers, poisoned; commits, device flushes and page-cache
//! hits and misses from `Database::io_counters`), plus open cursors and
//! subscribers.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::state::{lock, AppState};

/// Latency bucket bounds, in seconds.
const BUCKETS: [f64; 9] = [0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0];

#[derive(Default)]
struct Series {
    count: u64,
    sum: f64,
    buckets: [u64; BUCKETS.len()],
}

/// (method, status) → route pattern → latency series: nested so that a
/// request is recorded without allocating (the route is looked up as a
/// `&str`); sorted only when `/metrics` is rendered.
type Requests = HashMap<(Method, u16), HashMap<Box<str>, Series>>;

/// The server's counters.
#[derive(Default)]
pub struct Metrics {
    requests: Mutex<Requests>,
    /// Live SSE subscriptions.
    pub subscribers: AtomicI64,
    /// The TTL sweeps' counters.
    pub ttl: crate::ttl::TtlCounters,
}

impl Metrics {
    fn record(&self, method: &Method, route: &str, status: u16, secs: f64) {
        let mut m = lock(&self.requests);
        let by_route = m.entry((method.clone(), status)).or_default();
        let s = match by_route.get_mut(route) {
            Some(s) => s,
            None => by_route.entry(route.into()).or_default(),
        };
        s.count += 1;
        s.sum += secs;
        for (i, b) in BUCKETS.iter().enumerate() {
            if secs <= *b {
                s.buckets[i] += 1;
            }
        }
    }
}

/// Counts every request by its route pattern (never the raw path, so
/// that ids do not make new series).
pub async fn track(st: &AppState, req: Request, next: Next) -> Response {
    let method = req.method().clone();
    // An Arc clone, not a copy of the text.
    let route = req.extensions().get::<MatchedPath>().cloned();
    let t = Instant::now();
    let r = next.run(req).await;
    st.metrics.record(
        &method,
        route.as_ref().map_or("unmatched", |p| p.as_str()),
        r.status().as_u16(),
        t.elapsed().as_secs_f64(),
    );
    r
}

fn esc(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Metrics in the Prometheus text format.
#[utoipa::path(get, path = "/metrics", tag = "admin",
    responses((status = 200, description = "Prometheus text format", content_type = "text/plain")))]
pub async fn metrics(State(st): State<Arc<AppState>>) -> Response {
    let mut out = String::new();
    {
        let m = lock(&st.metrics.requests);
        let m: BTreeMap<(&str, &str, u16), &Series> = m
            .iter()
            .flat_map(|((method, status), routes)| {
                routes
                    .iter()
                    .map(move |(route, s)| ((method.as_str(), &**route, *status), s))
            })
            .collect();
        out.push_str(
            "# HELP cairn_http_requests_total HTTP requests by method, route and status.\n",
        );
        out.push_str("# TYPE cairn_http_requests_total counter\n");
        for ((method, route, status), s) in m.iter() {
            let _ = writeln!(
                out,
                "cairn_http_requests_total{{method=\"{method}\",route=\"{}\",status=\"{status}\"}} {}",
                esc(route),
                s.count
            );
        }
        out.push_str("# HELP cairn_http_request_duration_seconds Time to the response head.\n");
        out.push_str("# TYPE cairn_http_request_duration_seconds histogram\n");
        for ((method, route, status), s) in m.iter() {
            let labels = format!(
                "method=\"{method}\",route=\"{}\",status=\"{status}\"",
                esc(route)
            );
            for (i, b) in BUCKETS.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "cairn_http_request_duration_seconds_bucket{{{labels},le=\"{b}\"}} {}",
                    s.buckets[i]
                );
            }
            let _ = writeln!(
                out,
                "cairn_http_request_duration_seconds_bucket{{{labels},le=\"+Inf\"}} {}",
                s.count
            );
            let _ = writeln!(
                out,
                "cairn_http_request_duration_seconds_sum{{{labels}}} {}",
                s.sum
            );
            let _ = writeln!(
                out,
                "cairn_http_request_duration_seconds_count{{{labels}}} {}",
                s.count
            );
        }
    }
    let db = &st.db;
    let io = db.io_counters();
    let gauges: [(&str, &str, String); 7] = [
        (
            "cairn_latest_commit",
            "The id of the latest commit.",
            db.latest_commit().0.to_string(),
        ),
        (
            "cairn_live_readers",
            "Live read transactions.",
            db.live_readers().to_string(),
        ),
        (
            "cairn_poisoned",
            "1 if a failed write poisoned the handle.",
            u8::from(db.is_poisoned()).to_string(),
        ),
        (
            "cairn_open_cursors",
            "Open find cursors.",
            lock(&st.cursors).len().to_string(),
        ),
        (
            "cairn_sse_subscribers",
            "Live event subscriptions.",
            st.metrics.subscribers.load(Ordering::Relaxed).to_string(),
        ),
        (
            "cairn_pinned_pages",
            "Pages open read transactions keep alive for the keys and values they hand out.",
            io.pinned_pages.to_string(),
        ),
        (
            "cairn_pinned_bytes",
            "Memory those pinned pages and their lookup tables hold, in bytes.",
            io.pinned_bytes.to_string(),
        ),
    ];
    for (name, help, v) in gauges {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
    }
    let ttl = &st.metrics.ttl;
    let counters: [(&str, &str, u64); 7] = [
        (
            "cairn_ttl_sweeps_total",
            "TTL sweeps finished (one every --ttl-interval).",
            ttl.sweeps.load(Ordering::Relaxed),
        ),
        (
            "cairn_ttl_deleted_total",
            "Expired documents the TTL sweeps deleted.",
            ttl.deleted.load(Ordering::Relaxed),
        ),
        (
            "cairn_ttl_errors_total",
            "Collections whose TTL sweep pass failed (each logged).",
            ttl.errors.load(Ordering::Relaxed),
        ),
        (
            "cairn_commits_total",
            "Commits made since the server opened the file.",
            io.commits,
        ),
        (
            "cairn_flushes_total",
            "Device flushes (fdatasync) of the file; one covers several concurrent durable commits.",
            io.syncs,
        ),
        (
            "cairn_page_cache_hits_total",
            "Page reads answered from the page cache.",
            io.cache_hits,
        ),
        (
            "cairn_page_cache_misses_total",
            "Page reads that went to the file.",
            io.cache_misses,
        ),
    ];
    for (name, help, v) in counters {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}"
        );
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}
