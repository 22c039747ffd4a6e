//! The engine interface the workloads drive, and CairnDB's implementation.
//!
//! Every operation works on a whole batch inside the engine (one transaction
//! per call), so no dynamic dispatch sits inside a timed inner loop.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use cairndb::storage::{FileStorage, OpenMode, StorageFile};
use cairndb::{Database, Durability, ReadableTable, TableDefinition};

use super::data::{Flat, Touch};

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
    /// bbolt, through the Go program in `bench/bbolt/` (suite T only).
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
                "bbolt (Go; go.etcd.io/bbolt as pinned in bench/bbolt/go.sum, built with `go build` \
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

/// Opens engine `kind` on the fresh directory `dir`.
pub fn open(kind: EngineKind, dir: &Path) -> Res<Box<dyn Kv>> {
    std::fs::create_dir_all(dir)?;
    match kind {
        EngineKind::Cairn => Ok(Box::new(Cairn::open(dir)?)),
        #[cfg(feature = "peers")]
        EngineKind::Redb => Ok(Box::new(super::peers::redb_kv::RedbKv::open(dir)?)),
        #[cfg(feature = "peers")]
        EngineKind::Lmdb => Ok(Box::new(super::peers::lmdb_kv::LmdbKv::open(dir)?)),
        #[cfg(feature = "peers")]
        EngineKind::Sqlite => Ok(Box::new(super::peers::sqlite_kv::SqliteKv::open(dir)?)),
        #[cfg(feature = "peers")]
        EngineKind::Fjall => Ok(Box::new(super::peers::fjall_kv::FjallKv::open(dir)?)),
        #[cfg(feature = "peers")]
        EngineKind::Sled => Ok(Box::new(super::peers::sled_kv::SledKv::open(dir)?)),
        #[cfg(feature = "rocksdb")]
        EngineKind::Rocksdb => Ok(Box::new(super::peers::rocks_kv::RocksKv::open(dir)?)),
        #[allow(unreachable_patterns)]
        other => Err(format!("engine {} is not compiled into this build", other.name()).into()),
    }
}

/// Total length of every file under `dir`.
/// The bytes of CairnDB's directory once everything committed is in the
/// file: non-durable commits are held in memory (the overlay, staged pages)
/// until a sync, which is not timed here.
pub fn synced_dir_bytes(db: &Database, dir: &Path) -> u64 {
    if let Err(e) = db.sync() {
        eprintln!("warning: sync before measuring the file size failed: {e}");
    }
    dir_bytes(dir)
}

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

/// A [`FileStorage`] that counts device flushes.
#[derive(Debug)]
struct CountingStorage {
    inner: FileStorage,
    flushes: Arc<AtomicU64>,
}

impl StorageFile for CountingStorage {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.inner.write_at(buf, offset)
    }
    fn sync_data(&self) -> std::io::Result<()> {
        self.flushes.fetch_add(1, Ordering::Relaxed);
        self.inner.sync_data()
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.inner.set_len(len)
    }
    fn len(&self) -> std::io::Result<u64> {
        self.inner.len()
    }
}

/// Opens (or creates) a CairnDB file with the default builder through a
/// storage wrapper that counts device flushes into `flushes`.
pub fn open_counting_db(path: &Path, flushes: &Arc<AtomicU64>) -> Res<Database> {
    let inner = FileStorage::open(path, OpenMode::CreateOrOpen)?;
    let storage = CountingStorage {
        inner,
        flushes: flushes.clone(),
    };
    Ok(cairndb::Builder::new().open_with_storage(Box::new(storage), true, false)?)
}

const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("kv");

/// CairnDB.
pub struct Cairn {
    db: Database,
    dir: PathBuf,
    flushes: Arc<AtomicU64>,
}

impl Cairn {
    pub fn open(dir: &Path) -> Res<Self> {
        let path = dir.join("bench.cairn");
        let flushes = Arc::new(AtomicU64::new(0));
        let db = Self::open_db(&path, &flushes)?;
        // Create the table up front so readers never see it missing.
        let txn = db.begin_write()?;
        txn.open_table(TABLE)?;
        txn.set_durability(Durability::None);
        txn.commit()?;
        Ok(Cairn {
            db,
            dir: dir.to_path_buf(),
            flushes,
        })
    }

    fn open_db(path: &Path, flushes: &Arc<AtomicU64>) -> Res<Database> {
        open_counting_db(path, flushes)
    }

    fn db(&self) -> &Database {
        &self.db
    }

    fn durability(mode: Mode) -> Durability {
        match mode {
            Mode::D => Durability::Immediate,
            Mode::N => Durability::None,
        }
    }
}

impl Kv for Cairn {
    fn put_batch(&self, keys: &Flat, vals: &Flat, r: Range<usize>, mode: Mode) -> Res<()> {
        let txn = self.db().begin_write()?;
        txn.set_durability(Self::durability(mode));
        {
            let mut t = txn.open_table(TABLE)?;
            for i in r {
                t.insert(keys.get(i), vals.get(i))?;
            }
        }
        txn.commit()?;
        Ok(())
    }

    fn append_sorted(&self, keys: &Flat, vals: &Flat, mode: Mode) -> Res<()> {
        let txn = self.db().begin_write()?;
        txn.set_durability(Self::durability(mode));
        {
            let mut t = txn.open_table(TABLE)?;
            for i in 0..keys.len() {
                t.append(keys.get(i), vals.get(i))?;
            }
        }
        txn.commit()?;
        Ok(())
    }

    fn delete_batch(&self, keys: &Flat, r: Range<usize>, mode: Mode) -> Res<u64> {
        let txn = self.db().begin_write()?;
        txn.set_durability(Self::durability(mode));
        let mut n = 0;
        {
            let mut t = txn.open_table(TABLE)?;
            for i in r {
                if t.remove(keys.get(i))?.is_some() {
                    n += 1;
                }
            }
        }
        txn.commit()?;
        Ok(n)
    }

    fn get_each(&self, keys: &Flat, r: Range<usize>) -> Res<Touch> {
        let read = self.db().begin_read()?;
        let t = read.open_table(TABLE)?;
        let mut touch = Touch::default();
        for i in r {
            if let Some(v) = t.get(keys.get(i))? {
                touch.add_value(v.value());
            }
        }
        Ok(touch)
    }

    fn scan(&self) -> Res<Touch> {
        let read = self.db().begin_read()?;
        let t = read.open_table(TABLE)?;
        let mut touch = Touch::default();
        for e in t.iter()? {
            let (k, v) = e?;
            touch.add(k.value(), v.value());
        }
        Ok(touch)
    }

    fn range_reads(&self, starts: &Flat, per: usize) -> Res<Touch> {
        let read = self.db().begin_read()?;
        let t = read.open_table(TABLE)?;
        let mut touch = Touch::default();
        for i in 0..starts.len() {
            let start: &[u8] = starts.get(i);
            for e in t.range(start..)?.take(per) {
                let (k, v) = e?;
                touch.add(k.value(), v.value());
            }
        }
        Ok(touch)
    }

    fn count(&self) -> Res<u64> {
        let read = self.db().begin_read()?;
        let t = read.open_table(TABLE)?;
        Ok(t.len())
    }

    fn compact(&mut self) -> Res<Option<u64>> {
        self.db().compact()?;
        Ok(Some(self.disk_bytes()))
    }

    fn disk_bytes(&self) -> u64 {
        synced_dir_bytes(self.db(), &self.dir)
    }

    fn flushes(&self) -> Option<u64> {
        Some(self.flushes.load(Ordering::Relaxed))
    }
}
