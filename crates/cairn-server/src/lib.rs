//! `cairn serve`: an HTTP/JSON server over one CairnDB file.
//!
//! A thin layer over the `cairndb` library's public API: documents,
//! key-value tables, event streams (with live subscriptions as Server-Sent
//! Events) and maintenance, under `/api/v1`, described by an OpenAPI 3.1
//! document generated from the handlers (`/api/v1/openapi.json`). The
//! library stays synchronous: every engine call runs on tokio's blocking
//! pool (`spawn_blocking`) or, for subscriptions and streamed reports, on a
//! thread of its own, never on the async executor.
//!
//! Security defaults: a loopback bind, a bearer token (compared in
//! constant time) required for any other bind, CORS off unless asked for,
//! and no endpoint touches any path but the served file (a backup streams
//! to the client).

#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod admin;
mod changes;
mod docs;
mod error;
mod events;
mod kv;
mod live;
mod metrics;
mod state;
mod studio;
mod ttl;
mod util;

use std::future::IntoFuture;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;
use cairndb::Database;
use tokio::net::TcpListener;
use tower_http::cors::{AllowOrigin, CorsLayer};
use tower_http::request_id::{
    MakeRequestId, PropagateRequestIdLayer, RequestId, SetRequestIdLayer,
};
use tower_http::trace::{DefaultOnResponse, TraceLayer};
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub use admin::{BACKUP_CHUNKS_QUEUED, BACKUP_CHUNK_BYTES};
pub use error::{ApiError, PROBLEM_JSON};
use state::AppState;
pub use ttl::TTL_SWEEP_BATCH;

/// How `cairn serve` runs.
#[derive(Debug, Clone)]
pub struct Config {
    /// The database file (created if missing, unless read-only).
    pub path: PathBuf,
    /// The address to listen on (port 0: any free port).
    pub bind: SocketAddr,
    /// The bearer token every request must carry (`None`: no token; only
    /// allowed on a loopback bind).
    pub token: Option<String>,
    /// Open the file read-only; write endpoints answer 403.
    pub read_only: bool,
    /// The largest request body accepted, in bytes (a streamed JSON-lines
    /// bulk body: see `max_bulk_body`).
    pub max_body: usize,
    /// The largest streamed JSON-lines bulk body, in bytes (a bulk body is
    /// never held whole in memory; one batch of lines is).
    pub max_bulk_body: u64,
    /// The longest line of a JSON-lines bulk body, in bytes.
    pub max_bulk_line: usize,
    /// How durable each write is when its response is sent: `Immediate`
    /// (the default: a device flush, shared by concurrent requests — group
    /// commit) or `None` (crash-consistent, no flush; a crash may lose the
    /// latest writes, each whole).
    pub durability: cairndb::Durability,
    /// Run gets by `_id` and finds on the async worker that received the
    /// request instead of handing each to tokio's blocking pool: no thread
    /// hand-off per request (about a third more gets per second in suite
    /// S), but a read that misses the page cache then stalls that worker —
    /// and every connection it serves — for the disk read. For data that
    /// fits the cache.
    pub inline_reads: bool,
    /// The most live SSE subscriptions at once (each holds a thread); past
    /// it a subscription gets 503 with `Retry-After`.
    pub max_subscribers: usize,
    /// How long a request may take to produce its response head.
    pub request_timeout: Duration,
    /// The origin allowed by CORS (`None`: no CORS headers).
    pub cors: Option<String>,
    /// How long open transactions and streams may take to finish after a
    /// shutdown signal.
    pub shutdown_grace: Duration,
    /// How long an idle find cursor stays open.
    pub cursor_idle: Duration,
    /// The most find cursors open at once.
    pub max_cursors: usize,
    /// How often the TTL sweep deletes the expired documents of every
    /// collection with a TTL index, in bounded batches (zero: never; a
    /// read-only server never does).
    pub ttl_interval: Duration,
}

impl Config {
    /// Defaults for serving `path` on 127.0.0.1:7070.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Config {
            path: path.into(),
            bind: SocketAddr::from(([127, 0, 0, 1], 7070)),
            token: None,
            read_only: false,
            max_body: 16 << 20,
            max_bulk_body: 1 << 30,
            max_bulk_line: 1 << 20,
            max_subscribers: 256,
            durability: cairndb::Durability::Immediate,
            inline_reads: false,
            request_timeout: Duration::from_secs(30),
            cors: None,
            shutdown_grace: Duration::from_secs(10),
            cursor_idle: Duration::from_secs(60),
            max_cursors: 64,
            ttl_interval: Duration::from_secs(60),
        }
    }
}

/// Why the server could not start or stop cleanly.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A non-loopback bind without a token.
    #[error("refusing to listen on {0} (not a loopback address) without --token-file: anyone who can reach it could read and change the database")]
    InsecureBind(SocketAddr),
    /// A bad option.
    #[error("{0}")]
    Config(String),
    /// The database.
    #[error(transparent)]
    Db(#[from] cairndb::Error),
    /// The socket.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

impl From<cairndb::CoreError> for ServeError {
    fn from(e: cairndb::CoreError) -> Self {
        ServeError::Db(e.into())
    }
}

/// The OpenAPI document's top level; the paths come from the routers.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "CairnDB HTTP API",
        description = "Documents, key-value tables, event streams and maintenance of one CairnDB file. Errors are RFC 9457 problem details (application/problem+json) with a stable `code`."
    ),
    components(schemas(error::ProblemSchema, util::Encoding)),
    tags(
        (name = "documents", description = "Collections, indexes, documents and queries"),
        (name = "kv", description = "Key-value tables"),
        (name = "events", description = "Event streams and the global log"),
        (name = "admin", description = "Statistics, checks, backup, compaction, metrics")
    )
)]
struct ApiDoc;

/// The API's routes with their OpenAPI descriptions.
fn api_routes() -> OpenApiRouter<Arc<AppState>> {
    OpenApiRouter::new()
        .routes(routes!(docs::list_collections, docs::create_collection))
        .routes(routes!(docs::drop_collection))
        .routes(routes!(docs::list_indexes, docs::create_index))
        .routes(routes!(docs::drop_index))
        .routes(routes!(docs::insert_document))
        .routes(routes!(
            docs::get_document,
            docs::replace_document,
            docs::delete_document
        ))
        .routes(routes!(docs::find))
        .routes(routes!(docs::next_page, docs::close_cursor))
        .routes(routes!(docs::count))
        .routes(routes!(docs::explain))
        .routes(routes!(docs::update_many))
        .routes(routes!(docs::delete_many))
        .routes(routes!(docs::bulk))
        .routes(routes!(docs::delete_expired))
        .routes(routes!(
            changes::change_stream_state,
            changes::set_change_stream
        ))
        .routes(routes!(changes::watch))
        .routes(routes!(kv::list_tables))
        .routes(routes!(kv::get_key, kv::put_key, kv::delete_key))
        .routes(routes!(kv::range))
        .routes(routes!(events::list_streams))
        .routes(routes!(events::append, events::read_stream))
        .routes(routes!(events::subscribe_stream))
        .routes(routes!(events::read_all))
        .routes(routes!(events::subscribe_all))
        .routes(routes!(admin::server_info))
        .routes(routes!(admin::stats))
        .routes(routes!(admin::check))
        .routes(routes!(admin::backup))
        .routes(routes!(admin::compact))
        .routes(routes!(openapi_json))
}

/// The OpenAPI 3.1 document of this API.
#[utoipa::path(get, path = "/openapi.json", tag = "admin",
    responses((status = 200, description = "The OpenAPI document", content_type = "application/json")))]
async fn openapi_json(State(st): State<Arc<AppState>>) -> Response {
    let doc = st.openapi.get().cloned().unwrap_or_default();
    ([(header::CONTENT_TYPE, "application/json")], doc).into_response()
}

/// Builds the router and its OpenAPI document.
fn build(state: Arc<AppState>) -> (Router, utoipa::openapi::OpenApi) {
    let (api, doc) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .nest("/api/v1", api_routes())
        .routes(routes!(metrics::metrics))
        .split_for_parts();
    let _ = state.openapi.set(doc.to_json().unwrap_or_default());
    let mut app = api
        .fallback(fallback)
        // One layer for the four steps every API request takes (each
        // `from_fn` layer clones its inner service per request).
        .layer(middleware::from_fn_with_state(state.clone(), gate))
        .layer(axum::extract::DefaultBodyLimit::max(state.config.max_body))
        // The studio's static files: outside the token check.
        .merge(studio::routes())
        .with_state(state.clone());
    if let Some(origin) = &state.config.cors {
        let origin = HeaderValue::from_str(origin).unwrap_or(HeaderValue::from_static("null"));
        app = app.layer(
            CorsLayer::new()
                .allow_origin(AllowOrigin::exact(origin))
                .allow_methods([Method::GET, Method::POST, Method::PUT, Method::DELETE])
                .allow_headers([
                    header::AUTHORIZATION,
                    header::CONTENT_TYPE,
                    header::HeaderName::from_static("last-event-id"),
                ]),
        );
    }
    let app = app
        .layer(PropagateRequestIdLayer::x_request_id())
        .layer(
            TraceLayer::new_for_http().make_span_with(|req: &Request<Body>| {
                let id = req
                    .extensions()
                    .get::<RequestId>()
                    .and_then(|id| id.header_value().to_str().ok())
                    .unwrap_or("-")
                    .to_string();
                tracing::info_span!("request", id = %id, method = %req.method(), uri = %req.uri())
            })
            .on_response(DefaultOnResponse::new().level(tracing::Level::INFO)),
        )
        .layer(SetRequestIdLayer::x_request_id(Counter::default()));
    (app, doc)
}

/// Request ids: a per-process counter.
#[derive(Clone, Default)]
struct Counter(Arc<std::sync::atomic::AtomicU64>);

impl MakeRequestId for Counter {
    fn make_request_id<B>(&mut self, _: &axum::http::Request<B>) -> Option<RequestId> {
        let n = self.0.fetch_add(1, Ordering::Relaxed) + 1;
        HeaderValue::from_str(&format!("req-{n}"))
            .ok()
            .map(RequestId::new)
    }
}

async fn fallback() -> ApiError {
    ApiError::not_found("no_route", "no such endpoint")
}

/// What every API request goes through, outermost first: problem bodies
/// for the router's own errors, the bearer token, the request timeout, the
/// metrics (which therefore count neither 401s nor timeouts).
async fn gate(State(st): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let r = match auth(&st, &req) {
        Some(refused) => refused,
        None => timeout(&st, metrics::track(&st, req, next)).await,
    };
    problem_bodies(r).await
}

/// `Authorization: Bearer <token>`, compared in constant time: the refusal,
/// if any.
fn auth(st: &AppState, req: &Request) -> Option<Response> {
    if let Some(token) = &st.config.token {
        if req.method() != Method::OPTIONS {
            let given = req
                .headers()
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .unwrap_or("");
            if !util::constant_time_eq(given.as_bytes(), token.as_bytes()) {
                return Some(
                    ApiError::new(
                        StatusCode::UNAUTHORIZED,
                        "unauthorized",
                        "a valid bearer token is required (Authorization: Bearer <token>)",
                    )
                    .into_response(),
                );
            }
        }
    }
    None
}

/// The request timeout: the response head must be ready in time (a
/// streamed body — a subscription, a backup — may last longer).
async fn timeout(st: &AppState, inner: impl std::future::Future<Output = Response>) -> Response {
    let limit = st.config.request_timeout;
    match tokio::time::timeout(limit, inner).await {
        Ok(r) => r,
        Err(_) => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "request_timeout",
            format!("the request took longer than {} s", limit.as_secs_f64()),
        )
        .into_response(),
    }
}

/// Error responses of the router and of layers (404, 405, 413, …) get a
/// problem+json body too.
async fn problem_bodies(r: Response) -> Response {
    let status = r.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return r;
    }
    let is_problem = r
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(PROBLEM_JSON.as_bytes()));
    if is_problem {
        return r;
    }
    let (parts, body) = r.into_parts();
    let text = axum::body::to_bytes(body, 64 << 10)
        .await
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    let text = if text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_string()
    } else {
        text
    };
    let mut out = error::for_status(status, text).into_response();
    for (k, v) in parts.headers.iter() {
        if k != header::CONTENT_TYPE && k != header::CONTENT_LENGTH {
            out.headers_mut().insert(k.clone(), v.clone());
        }
    }
    out
}

/// A running server (tests, and `cairn serve` through [`run`]).
pub struct Server {
    addr: SocketAddr,
    shutdown: Arc<tokio::sync::Notify>,
    task: tokio::task::JoinHandle<Result<(), ServeError>>,
}

impl Server {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops it as a SIGTERM would and waits: no new connections, in-flight
    /// requests finish (up to the grace period), the file is closed.
    pub async fn shutdown(self) -> Result<(), ServeError> {
        self.shutdown.notify_one();
        self.task
            .await
            .map_err(|e| ServeError::Config(format!("server task failed: {e}")))?
    }

    /// Waits until the server stops by itself (a signal).
    pub async fn wait(self) -> Result<(), ServeError> {
        self.task
            .await
            .map_err(|e| ServeError::Config(format!("server task failed: {e}")))?
    }
}

fn is_loopback(addr: &SocketAddr) -> bool {
    addr.ip().is_loopback()
}

/// Opens the database and starts listening. With `signals`, SIGTERM and
/// Ctrl-C shut it down gracefully too.
pub async fn start(config: Config, signals: bool) -> Result<Server, ServeError> {
    if config.token.is_none() && !is_loopback(&config.bind) {
        return Err(ServeError::InsecureBind(config.bind));
    }
    if config.token.as_deref().is_some_and(|t| t.is_empty()) {
        return Err(ServeError::Config("the token is empty".into()));
    }
    let path = config.path.clone();
    let read_only = config.read_only;
    let db = tokio::task::spawn_blocking(move || {
        if read_only {
            Database::open_read_only(&path)
        } else {
            Database::create(&path)
        }
    })
    .await
    .map_err(|e| ServeError::Config(format!("open failed: {e}")))??;
    let listener = TcpListener::bind(config.bind).await?;
    let addr = listener.local_addr()?;
    let grace = config.shutdown_grace;
    let state = Arc::new(AppState::new(Arc::new(db), config));
    let (app, _) = build(state.clone());
    // Idle cursors end on time even when no request touches the cursors
    // (each holds a read snapshot, which pins pages and blocks compaction).
    let reaper = Arc::downgrade(&state);
    let every =
        (state.config.cursor_idle / 2).clamp(Duration::from_millis(50), Duration::from_secs(5));
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            let Some(st) = reaper.upgrade() else { return };
            if st.stopping.load(Ordering::SeqCst) {
                return;
            }
            let st2 = st.clone();
            drop(st);
            let _ = tokio::task::spawn_blocking(move || st2.expire_cursors()).await;
        }
    });
    ttl::spawn(&state);
    let shutdown = Arc::new(tokio::sync::Notify::new());
    let notify = shutdown.clone();
    let st = state.clone();
    tracing::info!(%addr, read_only, "cairn serve listening");
    let task = tokio::spawn(async move {
        let stopping = st.clone();
        let signal = async move {
            if signals {
                tokio::select! {
                    _ = notify.notified() => {}
                    _ = os_signal() => {}
                }
            } else {
                notify.notified().await;
            }
            tracing::info!("shutting down: no new connections; finishing requests");
            // Subscriptions and streamed reports end at their next step.
            stopping.stopping.store(true, Ordering::SeqCst);
            stopping.stop.notify_waiters();
        };
        let serve = axum::serve(listener, app).with_graceful_shutdown(signal);
        let stopped = st.clone();
        let bounded = async move {
            let serve = serve.into_future();
            tokio::pin!(serve);
            tokio::select! {
                r = &mut serve => r,
                _ = async {
                    stopped.stop.notified().await;
                    tokio::time::sleep(grace).await;
                } => {
                    tracing::warn!("requests still running after the grace period; aborting them");
                    Ok(())
                }
            }
        };
        let served = bounded.await;
        let closed = close(st).await;
        served?;
        closed
    });
    Ok(Server {
        addr,
        shutdown,
        task,
    })
}

/// Closes the database once the server stopped: open cursors end, the
/// file is synced and marked cleanly closed.
async fn close(st: Arc<AppState>) -> Result<(), ServeError> {
    st.close_cursors();
    let db = st.db.clone();
    drop(st);
    tokio::task::spawn_blocking(move || {
        // Blocking tasks that outlived the grace period may still hold the
        // handle; wait for them a little, then leave the close to the last
        // of them.
        let mut db = db;
        for _ in 0..50 {
            match Arc::try_unwrap(db) {
                Ok(d) => {
                    d.close()?;
                    tracing::info!("database closed cleanly");
                    return Ok(());
                }
                Err(d) => {
                    db = d;
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
        tracing::warn!("database still in use; it closes when the last request ends");
        Ok::<(), ServeError>(())
    })
    .await
    .map_err(|e| ServeError::Config(format!("close failed: {e}")))?
}

async fn os_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}

/// Serves until SIGTERM or Ctrl-C (the whole of `cairn serve`): builds a
/// runtime, starts the server, waits, closes the file.
pub fn run(config: Config) -> Result<(), ServeError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let r = rt.block_on(async move {
        let server = start(config, true).await?;
        eprintln!("cairn: serving on http://{}/api/v1", server.addr());
        eprintln!("cairn: the studio: http://{}/", server.addr());
        server.wait().await
    });
    // Engine calls that outlived the grace period get a last bound.
    rt.shutdown_timeout(Duration::from_secs(5));
    r
}

/// The OpenAPI document as JSON (without starting a server).
pub fn openapi_document() -> String {
    OpenApiRouter::<Arc<AppState>>::with_openapi(ApiDoc::openapi())
        .nest("/api/v1", api_routes())
        .routes(routes!(metrics::metrics))
        .into_openapi()
        .to_json()
        .unwrap_or_default()
}
