//! The options of `cairn bench [kv|events|docs|serve]` (clap derive; the `cairn`
//! tool embeds [`BenchCmd`] as its `bench` subcommand).

use std::path::PathBuf;

use crate::engine::Mode;

/// Which KV suites to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SuiteSel {
    /// The Thunder vs bbolt table (T1–T7).
    T,
    /// The redb comparison suite (R1–R11) at `--scale`.
    R,
    /// Both.
    All,
}

/// Which durability modes the write rows run in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DurabilitySel {
    /// Durable when commit returns (a device flush).
    D,
    /// Crash-consistent, not durable (no flush).
    N,
    /// Both (the default).
    Both,
}

impl DurabilitySel {
    pub fn modes(self) -> Vec<Mode> {
        match self {
            DurabilitySel::D => vec![Mode::D],
            DurabilitySel::N => vec![Mode::N],
            DurabilitySel::Both => vec![Mode::D, Mode::N],
        }
    }
}

/// `cairn bench [kv|events|docs]`. Without a subcommand: suite T on every
/// compiled-in engine in both modes, one repeat (the quick default); flags
/// given without a subcommand are those of `bench kv`.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BenchCmd {
    #[command(subcommand)]
    pub what: Option<BenchWhat>,
    #[command(flatten)]
    pub kv: BenchArgs,
}

#[derive(Debug, clap::Subcommand)]
pub enum BenchWhat {
    /// The KV suites: T (the Thunder vs bbolt table) and R (the redb
    /// comparison suite).
    Kv(BenchArgs),
    /// The event-store suite E (the RocksDB event store workloads of seed
    /// 003) on CairnDB and, with `--features peers`, SQLite.
    Events(EventArgs),
    /// The document suite D: LiteDB's write table (seed 000) and tiedot's
    /// benchmarks (seed 002) on CairnDB's document layer and, with
    /// `--features peers`, SQLite with JSON documents.
    Docs(DocArgs),
    /// The server suite S: `cairn serve` (in this process, on a loopback
    /// port) under 16 concurrent connections, beside tiedot's HTTP API
    /// figures; `wrk` drives it when it is on the PATH.
    Serve(ServeArgs),
    /// (Internal) a reader process of row R8p.
    #[command(hide = true)]
    KvReader(KvReaderArgs),
}

/// `cairn bench kv-reader` (internal): a reader process of row R8p. Opens
/// the database read-only, reads its keys from KEYS, prints `READY`, waits
/// for a line on stdin, gets every key in one read transaction and prints
/// `DONE found seconds`.
#[derive(Debug, Clone, clap::Args)]
pub struct KvReaderArgs {
    /// `cairn`, `lmdb` or `sqlite`.
    #[arg(long)]
    pub engine: String,
    /// The database file (a directory for LMDB).
    #[arg(long)]
    pub path: PathBuf,
    /// The keys, each `key_len` bytes, concatenated.
    #[arg(long)]
    pub keys: PathBuf,
    #[arg(long, default_value_t = 24)]
    pub key_len: usize,
}

/// Options every suite shares.
#[derive(Debug, Clone, clap::Args)]
pub struct CommonArgs {
    /// Directory for the benchmark databases (a temporary one by default).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Engines to run, comma-separated (cairn, redb, lmdb, sqlite, fjall,
    /// sled, rocksdb, bbolt); default: every engine compiled into this
    /// build, and bbolt when `go` is available.
    #[arg(long, value_delimiter = ',')]
    pub engines: Option<Vec<String>>,
    /// Durability modes of the write rows: D (device flush per commit),
    /// N (no flush) or both.
    #[arg(long, value_enum, ignore_case = true, default_value = "both")]
    pub durability: DurabilitySel,
    /// Runs per suite; the tables show the median (the JSON also min–max).
    /// Default 3 (1 with --quick, and for `cairn bench` alone).
    #[arg(long)]
    pub repeat: Option<usize>,
    /// Suite R: N (keys in the bulk load, default 1,000,000). Suite E: the
    /// events of the catch-up row (default 1,000,000); the ReadEvents grid
    /// runs the cells whose store holds at most 10 × N events. Suite D: the
    /// documents of the tiedot bench (default 400,000; 2,000 with --quick).
    #[arg(long)]
    pub scale: Option<usize>,
    /// A fast smoke run: a tenth of the work (or less), one repeat.
    #[arg(long)]
    pub quick: bool,
    /// Write every figure (with min–max over repeats) to this JSON file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write one bar chart per suite into this directory
    /// (`suite-t.svg`, `suite-r.svg`, `suite-e.svg`, `suite-d.svg`).
    #[arg(long)]
    pub svg: Option<PathBuf>,
    /// Samples of the fsync floor.
    #[arg(long, default_value_t = 200)]
    pub fsync_samples: usize,
    /// No progress bars.
    #[arg(long)]
    pub no_progress: bool,
}

impl Default for CommonArgs {
    fn default() -> Self {
        CommonArgs {
            dir: None,
            engines: None,
            durability: DurabilitySel::Both,
            repeat: None,
            scale: None,
            quick: false,
            json: None,
            svg: None,
            fsync_samples: 200,
            no_progress: false,
        }
    }
}

/// Options of `cairn bench kv`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Which suite to run.
    #[arg(long, value_enum, ignore_case = true, default_value = "t")]
    pub suite: SuiteSel,
    /// Suite T value size in bytes: 27 (`value_%08d_padding_data`) or 100
    /// (the same, padded); both by default. Suite R always uses 150-byte
    /// values.
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(["27", "100"]))]
    pub values: Option<String>,
    /// T7 values use Thunder's `i % 256` pattern (compressible) instead of
    /// seeded random bytes.
    #[arg(long)]
    pub as_published: bool,
    /// Writer threads of T5c.
    #[arg(long, default_value_t = 8)]
    pub writers: usize,
    /// Run the etcd rows instead (single-key commits, gets, short ranges,
    /// a scan; seconds), on this `etcd://host:port,…/prefix` cluster
    /// beside the embedded engine. The prefix must not hold a table `kv`.
    #[arg(long)]
    pub backend: Option<String>,
}

impl Default for BenchArgs {
    fn default() -> Self {
        BenchArgs {
            common: CommonArgs::default(),
            suite: SuiteSel::T,
            values: None,
            as_published: false,
            writers: 8,
            backend: None,
        }
    }
}

/// Options of `cairn bench events`.
#[derive(Debug, Clone, clap::Args)]
pub struct EventArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Writer threads beside the subscriber in the live-tail row (E8).
    #[arg(long, default_value_t = 4)]
    pub tail_writers: usize,
    /// Run the etcd rows instead (one- and 10-event appends, a stream
    /// read, a global read, a catch-up subscription; seconds), on this
    /// `etcd://host:port,…/prefix` cluster beside the embedded engine. The
    /// run's events stay in the prefix: give it a scratch one.
    #[arg(long)]
    pub backend: Option<String>,
}

impl Default for EventArgs {
    fn default() -> Self {
        EventArgs {
            common: CommonArgs::default(),
            tail_writers: 4,
            backend: None,
        }
    }
}

/// Which sub-suites of suite D to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DocSuiteSel {
    /// LiteDB's write table: inserts and upserts of 10, 100, 1,000 entities.
    Lite,
    /// tiedot's bench 1 and bench2 at `--scale` documents.
    Tiedot,
    /// Both (the default).
    All,
}

/// Options of `cairn bench docs`.
#[derive(Debug, Clone, clap::Args)]
pub struct DocArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Which sub-suite to run.
    #[arg(long, value_enum, ignore_case = true, default_value = "all")]
    pub suite: DocSuiteSel,
    /// Run the etcd rows instead (one- and 10-document inserts, a get by
    /// `_id`, a find and a count on a secondary index, an update and a
    /// delete by `_id`, a `$group`; seconds), on this
    /// `etcd://host:port,…/prefix` cluster beside the embedded engine.
    /// `--scale` sets the documents loaded (default 1,000, at most
    /// 20,000); the run's collection is dropped at the end.
    #[arg(long)]
    pub backend: Option<String>,
}

/// The load generator of `cairn bench serve`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Generator {
    /// `wrk` if it is on the PATH, else the built-in one.
    Auto,
    /// `wrk` (the generator tiedot's figures were measured with).
    Wrk,
    /// The built-in generator (hyper's HTTP/1 client on tokio).
    Builtin,
}

/// Options of `cairn bench serve`.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Seconds per row (default 10, as tiedot's `wrk -d10s`; 2 with
    /// --quick).
    #[arg(long)]
    pub seconds: Option<u64>,
    /// Concurrent connections (tiedot's `-c16`).
    #[arg(long, default_value_t = 16)]
    pub connections: usize,
    /// Load generator threads (tiedot's `-t2`).
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Which load generator drives the server.
    #[arg(long, value_enum, ignore_case = true, default_value = "auto")]
    pub generator: Generator,
    /// Serve with `cairn serve --inline-reads` (gets and finds on the async
    /// workers, not the blocking pool).
    #[arg(long)]
    pub inline_reads: bool,
}
