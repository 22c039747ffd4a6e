//! `cairn serve`: the HTTP/JSON server of the `cairn-server` crate.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::{CliError, Res};

/// The options of `cairn serve`.
#[derive(Args)]
pub struct ServeArgs {
    /// The database file (created if missing, unless --read-only); an
    /// etcd:// URL is refused: the server needs a file (README, "On an
    /// etcd cluster").
    db: PathBuf,
    /// The address to listen on. Anything but a loopback address needs
    /// --token-file.
    #[arg(long, default_value = "127.0.0.1:7070")]
    bind: SocketAddr,
    /// A file holding the bearer token every request must carry
    /// (`Authorization: Bearer <token>`); surrounding whitespace is ignored.
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Open the file read-only; write endpoints answer 403.
    #[arg(long)]
    read_only: bool,
    /// The largest request body accepted, in bytes (a JSON-lines bulk body
    /// is streamed: --max-bulk-body and --max-bulk-line bound it).
    #[arg(long, default_value_t = 16 << 20)]
    max_body: usize,
    /// The largest JSON-lines bulk body, in bytes.
    #[arg(long, default_value_t = 1 << 30)]
    max_bulk_body: u64,
    /// The longest line of a JSON-lines bulk body, in bytes.
    #[arg(long, default_value_t = 1 << 20)]
    max_bulk_line: usize,
    /// The most live event subscriptions (SSE) at once; past it a
    /// subscription gets 503 with Retry-After.
    #[arg(long, default_value_t = 256)]
    max_subscribers: usize,
    /// How durable a write is when its response is sent: `immediate` (a
    /// device flush, shared by concurrent requests) or `none`
    /// (crash-consistent, no flush: a crash may lose the latest writes,
    /// each whole).
    #[arg(long, value_enum, default_value = "immediate")]
    durability: DurabilityArg,
    /// Run gets by `_id` and finds on the async workers instead of tokio's
    /// blocking pool: no thread hand-off per request, but a read that
    /// misses the page cache stalls a worker for the disk read. For data
    /// that fits the page cache.
    #[arg(long)]
    inline_reads: bool,
    /// Seconds a request may take to produce its response.
    #[arg(long, default_value_t = 30)]
    request_timeout: u64,
    /// Allow cross-origin requests from this origin (CORS is off without it).
    #[arg(long)]
    cors: Option<String>,
    /// Every SECS seconds, delete the expired documents of every collection
    /// with a TTL index, in transactions of at most 500 deletions (as
    /// MongoDB's TTL monitor, every 60 s by default); 0 turns the sweep off
    /// (expired documents are then deleted only by the collections' own
    /// writes, `delete_expired` and `cairn expire`).
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    ttl_interval: u64,
}

impl ServeArgs {
    /// The database argument (a file, or the `etcd://` URL `etcd.rs`
    /// refuses).
    pub fn db(&self) -> &std::path::Path {
        &self.db
    }
}

/// `--durability`.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum DurabilityArg {
    /// Durable when the response is sent.
    Immediate,
    /// Crash-consistent, not durable.
    None,
}

/// Runs `cairn serve` until SIGTERM or Ctrl-C.
pub fn run(a: ServeArgs) -> Res {
    let token = match &a.token_file {
        Some(f) => {
            let t = std::fs::read_to_string(f).map_err(|e| {
                CliError::User(format!("cannot read the token file {}: {e}", f.display()))
            })?;
            let t = t.trim().to_string();
            if t.is_empty() {
                return Err(CliError::User(format!(
                    "the token file {} is empty",
                    f.display()
                )));
            }
            Some(t)
        }
        None => None,
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
    let mut c = cairn_server::Config::new(a.db);
    c.bind = a.bind;
    c.token = token;
    c.read_only = a.read_only;
    c.max_body = a.max_body;
    c.max_bulk_body = a.max_bulk_body;
    c.max_bulk_line = a.max_bulk_line;
    c.max_subscribers = a.max_subscribers.max(1);
    c.inline_reads = a.inline_reads;
    c.durability = match a.durability {
        DurabilityArg::Immediate => cairndb::Durability::Immediate,
        DurabilityArg::None => cairndb::Durability::None,
    };
    c.request_timeout = Duration::from_secs(a.request_timeout.max(1));
    c.cors = a.cors;
    c.ttl_interval = Duration::from_secs(a.ttl_interval);
    cairn_server::run(c).map_err(|e| match e {
        cairn_server::ServeError::Db(e) => e.into(),
        e => CliError::User(e.to_string()),
    })
}
