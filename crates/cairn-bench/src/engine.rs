//! The engine interfaces the workloads drive: the KV trait [`Kv`] (suites
//! T and R), [`EventEngine`] (suite E) and [`DocEngine`] (suite D), the
//! engines the bench knows ([`EngineKind`]) and how their space on disk is
//! measured. The adapters are in `peers/`; nothing here knows them.
//!
//! Every operation works on a whole batch inside the engine (one transaction
//! per call), so no dynamic dispatch sits inside a timed inner loop.

use std::ops::{ControlFlow, Range};
use std::path::Path;
use std::sync::atomic::AtomicBool;

use cairndb::events::EventData;

use crate::data::docs::{Entity, Lookup, TdDoc};
use crate::data::{Flat, Touch};

/// Errors of the benchmark (shared across threads).
pub type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// The two durability modes of every write row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mode {
    /// Durable when commit returns (a real device flush).
    D,
    /// Crash-consistent, not durable (no flush).
    N,
}

impl Mode {
    pub fn label(self) -> &'static str {
        match self {
            Mode::D => "D",
            Mode::N => "N",
        }
    }
}

/// One engine under test, opened on its own fresh directory.
pub trait Kv: Send + Sync {
    /// One write transaction putting pairs `r` (keys[i] → vals[i]), committed
    /// in `mode`.
    fn put_batch(&self, keys: &Flat, vals: &Flat, r: Range<usize>, mode: Mode) -> Res<()>;
    /// The engine's fastest path for inserting keys already in ascending
    /// order (one transaction).
    fn append_sorted(&self, keys: &Flat, vals: &Flat, mode: Mode) -> Res<()> {
        self.put_batch(keys, vals, 0..keys.len(), mode)
    }
    /// One write transaction deleting keys `r`; returns how many existed.
    fn delete_batch(&self, keys: &Flat, r: Range<usize>, mode: Mode) -> Res<u64>;
    /// One read transaction getting keys `r` in order, touching each value.
    fn get_each(&self, keys: &Flat, r: Range<usize>) -> Res<Touch>;
    /// One read transaction iterating every entry, touching keys and values.
    fn scan(&self) -> Res<Touch>;
    /// One read transaction: for each start key, read `per` entries from it.
    fn range_reads(&self, starts: &Flat, per: usize) -> Res<Touch>;
    /// The number of entries.
    fn count(&self) -> Res<u64>;
    /// Compacts (or the engine's nearest equivalent); returns the bytes
    /// on disk afterwards, or `None` when the engine has no compaction.
    fn compact(&mut self) -> Res<Option<u64>>;
    /// Bytes of every file in the engine's directory.
    fn disk_bytes(&self) -> u64;
    /// Device flushes issued so far, where the engine lets us count them.
    fn flushes(&self) -> Option<u64> {
        None
    }
    /// How a reader in another process opens this database, for engines
    /// that let processes share one (row R8p).
    fn reader_spec(&self) -> Option<crate::kv::procs::ReaderSpec> {
        None
    }
    /// Makes every commit so far reach the file, where readers in other
    /// processes see it (CairnDB's non-durable commits may still be staged
    /// in memory).
    fn publish(&self) -> Res<()> {
        Ok(())
    }
}

/// The engines `cairn bench` knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EngineKind {
    Cairn,
    Redb,
    Lmdb,
    Sqlite,
    Fjall,
    Sled,
    Rocksdb,
    /// bbolt, through the Go program in `bbolt/` (suite T only).
    Bbolt,
}

impl EngineKind {
    pub const ALL: [EngineKind; 8] = [
        EngineKind::Cairn,
        EngineKind::Redb,
        EngineKind::Lmdb,
        EngineKind::Sqlite,
        EngineKind::Fjall,
        EngineKind::Sled,
        EngineKind::Rocksdb,
        EngineKind::Bbolt,
    ];

    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Cairn => "cairn",
            EngineKind::Redb => "redb",
            EngineKind::Lmdb => "lmdb",
            EngineKind::Sqlite => "sqlite",
            EngineKind::Fjall => "fjall",
            EngineKind::Sled => "sled",
            EngineKind::Rocksdb => "rocksdb",
            EngineKind::Bbolt => "bbolt",
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            EngineKind::Cairn => "CairnDB",
            EngineKind::Redb => "redb",
            EngineKind::Lmdb => "LMDB",
            EngineKind::Sqlite => "SQLite",
            EngineKind::Fjall => "fjall",
            EngineKind::Sled => "sled",
            EngineKind::Rocksdb => "RocksDB",
            EngineKind::Bbolt => "bbolt",
        }
    }

    pub fn parse(s: &str) -> Option<EngineKind> {
        let s = s.trim().to_ascii_lowercase();
        let s = match s.as_str() {
            "cairndb" => "cairn",
            "heed" => "lmdb",
            "rusqlite" | "sqlite3" => "sqlite",
            "rocks" => "rocksdb",
            "bolt" | "boltdb" => "bbolt",
            other => other,
        };
        EngineKind::ALL.into_iter().find(|e| e.name() == s)
    }

    /// Whether this build includes the engine (bbolt: whether `go` works is
    /// found out at run time).
    pub fn compiled(self) -> bool {
        match self {
            EngineKind::Cairn | EngineKind::Bbolt => true,
            EngineKind::Rocksdb => cfg!(feature = "rocksdb"),
            _ => cfg!(feature = "peers"),
        }
    }

    /// Whether the engine runs in another process (not through [`Kv`]).
    pub fn external(self) -> bool {
        self == EngineKind::Bbolt
    }

    /// How the engine is configured for modes D and N.
    pub fn config(self) -> &'static str {
        match self {
            EngineKind::Cairn => {
                "cairndb (this build): default Builder (4 KiB pages, 1 GiB page cache), one table \
                 <&[u8], &[u8]>; D = Durability::Immediate (one fdatasync per commit, shared by \
                 concurrent committers), N = Durability::None (write-behind: \
                 pages staged in the page cache, written with the next durable commit or once \
                 they fill a quarter of the cache; no flush). \
                 The file is opened through a FileStorage wrapper that counts fdatasync calls."
            }
            EngineKind::Redb => {
                "redb 4.x: default Builder (1 GiB cache), one table <&[u8], &[u8]>; \
                 D = Durability::Immediate, N = Durability::None."
            }
            EngineKind::Lmdb => {
                "LMDB via heed 0.23 (lmdb mdb.master): 16 GiB map, default flags, unnamed db; \
                 D = default sync on commit (fdatasync of data, then of the meta page), \
                 N = MDB_NOSYNC set with mdb_env_set_flags (no flush; LMDB is then only \
                 safe against a process crash, an OS crash may corrupt it: LMDB has no \
                 flush-free crash-consistent mode). R11 uses MDB_APPEND."
            }
            EngineKind::Sqlite => {
                "SQLite (rusqlite 0.41, bundled): journal_mode=WAL, table kv(k BLOB PRIMARY KEY, \
                 v BLOB) WITHOUT ROWID, cache_size=1 GiB (as CairnDB's and redb's default caches), prepared statements, one connection \
                 per thread; D = synchronous=FULL, N = synchronous=NORMAL (WAL not synced on \
                 commit: crash-consistent, not durable)."
            }
            EngineKind::Fjall => {
                "fjall 3.x: default config, one keyspace; every transaction is a WriteBatch; \
                 D = PersistMode::SyncData (fdatasync of the journal), N = PersistMode::Buffer \
                 (journal written to the OS, no flush). R11 uses Keyspace::start_ingestion \
                 (writes tables directly, the same for D and N). R10 runs major_compact(); \
                 the directory holds journals too."
            }
            EngineKind::Sled => {
                "sled 0.34: default config; every transaction is a Batch (apply_batch); \
                 D = Db::flush() plus an fdatasync of sled's `db` file added by the bench \
                 (sled's own flush uses sync_file_range on Linux, which is not a device \
                 flush), N = nothing (sled's background flusher, every 500 ms)."
            }
            EngineKind::Rocksdb => {
                "RocksDB (rocksdb crate 0.25 = RocksDB 11.8, built without compression \
                 libraries; building needs libclang): default options, WAL on; \
                 D = WriteOptions::set_sync(true), N = set_sync(false) (WAL written, no flush)."
            }
            EngineKind::Bbolt => {
                "bbolt (Go; go.etcd.io/bbolt as pinned in crates/cairn-bench/bbolt/go.sum, built with `go build` \
                 at run time; suite T only): default options, one bucket; a transaction is \
                 DB.Update, except in T5c (D), where the writers use DB.Batch (bbolt's group \
                 commit: up to 10 ms / 1,000 calls per batch; in N its gathering delay only \
                 costs, so T5c N uses Update); D = NoSync=false (fdatasync per commit), \
                 N = NoSync=true (no flush; bbolt is then safe against a process crash only, not \
                 an OS crash or power loss). The program regenerates the keys and values from \
                 the same seeds; a digest of them is checked against the harness's."
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Suite E: event stores
//
// Every method is one transaction of the engine (or one subscription), so
// dynamic dispatch sits outside the per-event loops except for the callback
// that decodes each event, which every engine pays alike.

/// An event as a subscriber receives it.
#[derive(Debug, Clone, Copy)]
pub struct Delivered<'a> {
    /// Its global position, from 0.
    pub position: u64,
    pub stream: &'a str,
    pub version: u64,
    pub data: &'a [u8],
}

/// One event store under test, on its own fresh directory.
pub trait EventEngine: Send + Sync {
    /// Appends `events` to `stream` in one commit, expecting the stream's
    /// last version to be `expected` (`None`: the stream must not exist).
    fn append(
        &self,
        stream: &str,
        expected: Option<u64>,
        events: &[EventData],
        mode: Mode,
    ) -> Res<()>;
    /// Several appends (stream, expected, events) in one commit.
    fn append_many(&self, appends: &[(&str, Option<u64>, &[EventData])], mode: Mode) -> Res<()>;
    /// Reads every event of `stream` oldest first, handing (version,
    /// payload) to `f`; returns how many.
    fn read_stream(&self, stream: &str, f: &mut dyn FnMut(u64, &[u8])) -> Res<u64>;
    /// Reads the newest `n` events of `stream`, newest first.
    fn read_last(&self, stream: &str, n: usize, f: &mut dyn FnMut(u64, &[u8])) -> Res<u64>;
    /// Stores the state of `stream` at `version`.
    fn save_snapshot(&self, stream: &str, version: u64, state: &[u8]) -> Res<()>;
    /// Loads the newest snapshot of `stream` (to `snap`) and the events
    /// after it (to `f`), in one read transaction; returns the events.
    fn load(
        &self,
        stream: &str,
        snap: &mut dyn FnMut(u64, &[u8]),
        f: &mut dyn FnMut(u64, &[u8]),
    ) -> Res<u64>;
    /// Subscribes to the global log from position `from`: history, then
    /// live commits, until `f` breaks or `stop` is set.
    fn subscribe(
        &self,
        from: u64,
        stop: &AtomicBool,
        f: &mut dyn FnMut(Delivered<'_>) -> ControlFlow<()>,
    ) -> Res<()>;
    /// Device flushes so far, where the engine lets us count them.
    fn flushes(&self) -> Option<u64> {
        None
    }
    /// Bytes of every file in the engine's directory.
    fn disk_bytes(&self) -> u64;
}

// ---------------------------------------------------------------------------
// Suite D: document stores
//
//
// Each method is one operation of the engine's public API as an application
// calls it: a write is one transaction (a bulk write one transaction for
// all its documents); documents go in and come out as typed serde structs,
// so every engine pays its own mapping (CairnDB's binary codec, SQLite's
// JSON text) inside the timed region.

/// One document store under test, on its own fresh directory.
pub trait DocEngine: Send + Sync {
    /// Creates the entities collection, empty (untimed).
    fn lite_prepare(&self) -> Res<()>;
    /// Removes every entity (untimed, between iterations).
    fn lite_clear(&self) -> Res<()>;
    /// Inserts one entity in its own transaction.
    fn lite_insert(&self, e: &Entity, mode: Mode) -> Res<()>;
    /// Inserts every entity in one transaction.
    fn lite_insert_many(&self, es: &[Entity], mode: Mode) -> Res<()>;
    /// Inserts or replaces one entity in its own transaction.
    fn lite_upsert(&self, e: &Entity, mode: Mode) -> Res<()>;
    /// Upserts every entity in one transaction.
    fn lite_upsert_many(&self, es: &[Entity], mode: Mode) -> Res<()>;
    /// The number of entities.
    fn lite_len(&self) -> Res<u64>;
    /// Creates the documents collection with tiedot's six indexes (untimed).
    fn td_prepare(&self) -> Res<()>;
    /// Inserts one document in its own transaction.
    fn td_insert(&self, d: &TdDoc, mode: Mode) -> Res<()>;
    /// Reads and decodes the document with this id.
    fn td_get(&self, id: i64) -> Res<Option<TdDoc>>;
    /// Runs tiedot's lookup query; returns how many documents match.
    fn td_lookup(&self, q: &Lookup) -> Res<u64>;
    /// Replaces the document with `d`'s id by `d`; returns whether it
    /// existed.
    fn td_update(&self, d: &TdDoc, mode: Mode) -> Res<bool>;
    /// Deletes the document with this id; returns whether it existed.
    fn td_delete(&self, id: i64, mode: Mode) -> Res<bool>;
    /// The number of documents.
    fn td_len(&self) -> Res<u64>;
    /// bench2's schema worker: create a collection, rename it (or the
    /// nearest equivalent), truncate it, compact, drop it; returns what it
    /// did and how long each step took.
    fn schema_churn(&self, sample: &TdDoc, mode: Mode) -> Res<String>;
    /// Device flushes so far, where the engine lets us count them.
    fn flushes(&self) -> Option<u64> {
        None
    }
    /// Bytes of every file in the engine's directory.
    fn disk_bytes(&self) -> u64;
}

/// The space every file under `dir` takes on disk ([`on_disk`]).
pub fn dir_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            match e.metadata() {
                Ok(m) if m.is_dir() => total += dir_bytes(&e.path()),
                Ok(m) => total += on_disk(&m),
                Err(_) => {}
            }
        }
    }
    total
}

/// How every table's MiB rows are measured (`dir_bytes`), for the headers.
pub const SPACE_NOTE: &str = "MiB rows count the blocks allocated on disk, as `du` does \
     (space reserved but never written, a sparse file's holes, is not counted).";

/// The space a file takes on disk: its allocated blocks, as `du` counts
/// them (a file grown ahead of use with `set_len` is sparse there, and an
/// engine that reserves space it never wrote is not charged for it), for
/// every engine alike.
#[cfg(unix)]
fn on_disk(m: &std::fs::Metadata) -> u64 {
    use std::os::unix::fs::MetadataExt;
    m.blocks() * 512
}

#[cfg(not(unix))]
fn on_disk(m: &std::fs::Metadata) -> u64 {
    m.len()
}
