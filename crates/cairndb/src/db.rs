//! Layer 6: the database handle and its builder — opening a file (through
//! the commit layer's `open`), the background spill thread, and the public
//! methods that begin transactions, sync, wait for commits and check.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::commit::open::{self, Options};
pub use crate::commit::recovery::RecoveryReport;
pub use crate::commit::Durability;
use crate::commit::{lock, Shared};
use crate::error::Result;
use crate::ids::TxnId;
use crate::integrity::{check_commit, IntegrityReport};
use crate::limits;
use crate::storage::lockfile::LockFile;
use crate::storage::{FileStorage, OpenMode, StorageFile};
use crate::txn::spill::{self, spill_in_background, spill_overlay};
use crate::txn::{ReadTransaction, WriteTransaction};

/// Options for creating or opening a database.
#[derive(Debug, Clone)]
pub struct Builder {
    opts: Options,
    background_spill: Option<Duration>,
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            opts: Options {
                page_size: limits::DEFAULT_PAGE_SIZE,
                cache_bytes: 1 << 30,
                max_file_bytes: None,
                max_readers: limits::DEFAULT_MAX_READERS,
                overlay_bytes: 64 << 20,
                log_bytes: 64 << 20,
                fixed_log_salts: None,
            },
            background_spill: Some(Duration::from_millis(50)),
        }
    }
}

impl Builder {
    /// Default options: 4 KiB pages, a 1 GiB page cache (a bound: it fills
    /// only with pages read or written), no file size limit.
    pub fn new() -> Self {
        Self::default()
    }

    /// The page size for a new file (a power of two, 512..=32768). Ignored
    /// when opening an existing file, which records its own.
    pub fn page_size(&mut self, bytes: usize) -> &mut Self {
        self.opts.page_size = bytes;
        self
    }

    /// The memory bound of the page cache, in bytes (default 1 GiB, like
    /// redb's; the cache holds only pages read or written, so a small
    /// database uses little of it). A cache of verified out-of-line values
    /// gets a quarter of this on top
    /// (values over a quarter of that are not kept); staged pages of
    /// non-durable commits may fill up to a quarter of the page cache. The
    /// bound counts pages; each cached tree page also carries an in-memory
    /// search index of about 4 bytes per entry (a few percent of the page).
    pub fn cache_size(&mut self, bytes: usize) -> &mut Self {
        self.opts.cache_bytes = bytes;
        self
    }

    /// A maximum file size; commits that would grow the file past it fail
    /// with [`CoreError::FileSizeLimit`](crate::CoreError::FileSizeLimit) and change nothing.
    pub fn max_file_size(&mut self, bytes: u64) -> &mut Self {
        self.opts.max_file_bytes = Some(bytes);
        self
    }

    /// The maximum number of concurrent read transactions.
    pub fn max_readers(&mut self, n: usize) -> &mut Self {
        self.opts.max_readers = n;
        self
    }

    /// The memory budget of the overlay (default 64 MiB, the size of
    /// RocksDB's default write buffer): small inserts and removals of
    /// [`Durability::None`] transactions are kept in memory, beside the
    /// trees, instead of copying tree pages per commit. A non-durable commit
    /// that would leave more than this in the overlay applies it to the
    /// trees (in key order, in that commit), as do every durable commit,
    /// [`Database::sync`] and close. A bigger budget spreads that work over
    /// more commits (more of its entries land in the same leaf) and holds
    /// more memory; a lookup of a key the overlay does not hold costs a
    /// Bloom-filter test. `0` turns the overlay off (every commit copies tree
    /// pages).
    pub fn overlay_size(&mut self, bytes: usize) -> &mut Self {
        self.opts.overlay_bytes = bytes;
        self
    }

    /// The largest commit log extent, in bytes (default 64 MiB; `0` turns
    /// the commit log off, and every durable commit then writes its tree
    /// pages and a slot). Small durable commits append a record to the log
    /// and flush once; the log is an extent of the file's pages, started at
    /// 64 pages and grown four times over (up to this) whenever it fills
    /// up, at which point the next durable commit applies the overlay to the
    /// trees and starts a new log (a checkpoint). Two extents alternate, so
    /// the file holds up to twice this.
    pub fn log_size(&mut self, bytes: u64) -> &mut Self {
        self.opts.log_bytes = bytes;
        self
    }

    /// After writes pause for this long, a background thread applies the
    /// overlay to the trees (default 50 ms; `None` turns it off). Reads then
    /// search the trees alone: a range read merges the overlay's entries
    /// into the tree's and costs about twice as much while it holds any.
    /// The spill is an ordinary non-durable commit that stages its pages in
    /// memory (no I/O); it never waits for the writer — it runs only while
    /// no write transaction is open — and a write transaction that begins
    /// meanwhile waits for it to finish.
    pub fn background_spill(&mut self, idle: Option<Duration>) -> &mut Self {
        self.background_spill = idle;
        self
    }

    /// Derives commit-log salts from `seed` and the commit id instead of
    /// drawing them at random, so that the same operations write the same
    /// bytes (golden files and the fuzz corpus). Not for real databases: a
    /// log lost in a crash and a later one at the same pages could then
    /// share a salt, and the stale pages would pass for the new log's.
    #[doc(hidden)]
    pub fn fixed_log_salts(&mut self, seed: u64) -> &mut Self {
        self.opts.fixed_log_salts = Some(seed);
        self
    }

    /// Opens `path` read-write, creating it if it does not exist.
    pub fn create(&self, path: impl AsRef<Path>) -> Result<Database> {
        let path = path.as_ref();
        // Check options before touching the file system, so a bad option
        // leaves no empty file behind.
        limits::check_page_size(self.opts.page_size)?;
        self.opts.check()?;
        if !crate::storage::exists(path) {
            self.create_new_file(path)?;
        }
        let f = FileStorage::open(path, OpenMode::CreateOrOpen)?;
        let lock = lock_file(path)?;
        self.open_storage(Box::new(f), path.to_path_buf(), true, false, lock)
    }

    /// Creates a database file at `path` (which does not exist) atomically
    /// (`storage::create_new`): the first header and commit slots are
    /// written and synced before the file appears, so a crash never leaves
    /// a half-formatted database that could not be told from a damaged one.
    /// If another process creates `path` first, its database is used.
    fn create_new_file(&self, path: &Path) -> Result<()> {
        crate::storage::create_new(path, |f| open::format_new(&self.opts, Box::new(f)))
    }

    /// Opens an existing database read-write.
    pub fn open(&self, path: impl AsRef<Path>) -> Result<Database> {
        let path = path.as_ref();
        self.opts.check()?;
        let f = FileStorage::open(path, OpenMode::Open)?;
        let lock = lock_file(path)?;
        self.open_storage(Box::new(f), path.to_path_buf(), false, false, lock)
    }

    /// Opens an existing database read-only, beside any other handles on
    /// it: read-only ones and one read-write handle, in this process or
    /// others. The handle reads the file's commits (every durable one, and
    /// the others its writer wrote out); each read transaction sees the
    /// newest of them as it begins. It registers its snapshots in the lock
    /// file `PATH-lock`, so the writer never reuses a page it can still
    /// read.
    pub fn open_read_only(&self, path: impl AsRef<Path>) -> Result<Database> {
        let path = path.as_ref();
        self.opts.check()?;
        let f = FileStorage::open(path, OpenMode::ReadOnly)?;
        let lock = lock_file(path)?;
        self.open_storage(Box::new(f), path.to_path_buf(), false, true, lock)
    }

    /// Opens a database on any storage (the simulated file in tests),
    /// creating it if the storage is empty and `create` is set.
    pub fn open_with_storage(
        &self,
        storage: Box<dyn StorageFile>,
        create: bool,
        read_only: bool,
    ) -> Result<Database> {
        self.open_storage(storage, PathBuf::from("<storage>"), create, read_only, None)
    }

    fn open_storage(
        &self,
        storage: Box<dyn StorageFile>,
        path: PathBuf,
        create: bool,
        read_only: bool,
        lock: Option<LockFile>,
    ) -> Result<Database> {
        let (shared, recovery) = open::open(
            &self.opts,
            storage,
            path,
            create,
            read_only,
            lock.map(Arc::new),
        )?;
        let background = match self.background_spill {
            Some(idle) if !read_only && self.opts.overlay_bytes > 0 => {
                let weak = Arc::downgrade(&shared);
                std::thread::Builder::new()
                    .name("cairndb-spill".into())
                    .spawn(move || background_spill_loop(weak, idle))
                    .ok()
            }
            _ => None,
        };
        Ok(Database {
            shared,
            recovery,
            background,
            groups: Default::default(),
        })
    }
}

/// The lock file through which handles in any processes share the file at
/// `path` (FORMAT.md, "Sharing a file between processes"). Linux only: the
/// protocol needs open-file-description locks; elsewhere there is none, and
/// the file's `flock` keeps one read-write handle or any number of
/// read-only ones.
fn lock_file(path: &Path) -> Result<Option<LockFile>> {
    #[cfg(target_os = "linux")]
    {
        LockFile::open(path).map(Some)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = path;
        Ok(None)
    }
}

/// The background spill (`Builder::background_spill`): every `idle`, if no
/// write transaction began or ended for that long and the overlay holds
/// anything, applies it to the trees. A spill that fails (the file size
/// limit, a poisoned handle) is not retried until something is written.
fn background_spill_loop(weak: std::sync::Weak<Shared>, idle: Duration) {
    let mut failed_at: Option<u64> = None;
    loop {
        let Some(shared) = weak.upgrade() else {
            return;
        };
        {
            // The flag is set under this lock: checked before waiting, a
            // stop that came before the wait is not missed.
            let stop = lock(&shared.background_stop);
            if *stop {
                return;
            }
            let (stop, _) = shared
                .background_cv
                .wait_timeout(stop, idle)
                .unwrap_or_else(|e| e.into_inner());
            if *stop {
                return;
            }
        }
        let last = shared.last_write_nanos.load(Ordering::Acquire);
        let now = shared.started.elapsed().as_nanos() as u64;
        if failed_at == Some(last)
            || now.saturating_sub(last) < idle.as_nanos() as u64
            || shared.overlay_is_empty()
        {
            continue;
        }
        if spill_in_background(&shared).is_err() {
            failed_at = Some(shared.last_write_nanos.load(Ordering::Acquire));
        }
    }
}

impl Database {
    /// Ends the background spill thread (waiting for a spill in progress).
    fn stop_background(&mut self) {
        if let Some(t) = self.background.take() {
            *lock(&self.shared.background_stop) = true;
            self.shared.background_cv.notify_all();
            let _ = t.join();
        }
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        self.stop_background();
        // Non-durable changes held in memory go to the trees, so that the
        // clean close (when the last handle or transaction goes) writes
        // them. Errors cannot be returned from drop; `close` reports them.
        // Not while a write transaction is open (it may be this thread's,
        // and would never end): that transaction spills the overlay itself
        // when it ends, committed or not, once the handle is gone.
        self.shared.handle_open.store(false, Ordering::SeqCst);
        let writer_busy = self.shared.writer_active();
        if !writer_busy && !self.shared.pager.is_poisoned() {
            let _ = spill_overlay(&self.shared);
        }
    }
}

/// An open database file. Cheap to share across threads by reference; all
/// methods take `&self`.
///
/// ```
/// use cairndb::{Database, ReadableTable, TableDefinition};
/// const USERS: TableDefinition<&str, u64> = TableDefinition::new("users");
/// # let dir = tempfile::tempdir().unwrap();
/// let db = Database::create(dir.path().join("app.cairn"))?;
/// let txn = db.begin_write()?;
/// txn.open_table(USERS)?.insert("ada", &1815)?;
/// txn.commit()?;
/// let read = db.begin_read()?;
/// assert_eq!(read.open_table(USERS)?.get("ada")?.map(|v| v.value()), Some(1815));
/// # Ok::<(), cairndb::Error>(())
/// ```
pub struct Database {
    pub(crate) shared: Arc<Shared>,
    recovery: RecoveryReport,
    /// The background spill thread (`Builder::background_spill`).
    background: Option<std::thread::JoinHandle<()>>,
    /// The write groups of one-operation commits (`txn/group.rs`); boxed,
    /// so that the handle stays small.
    pub(crate) groups: Box<crate::txn::group::Groups>,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database")
            .field("path", &self.shared.path)
            .finish()
    }
}

impl Database {
    /// Options for creating or opening a database.
    pub fn builder() -> Builder {
        Builder::new()
    }

    /// Opens `path` read-write with default options, creating it if missing.
    pub fn create(path: impl AsRef<Path>) -> Result<Database> {
        Builder::new().create(path)
    }

    /// Opens an existing database read-write with default options.
    pub fn open(path: impl AsRef<Path>) -> Result<Database> {
        Builder::new().open(path)
    }

    /// Opens an existing database read-only with default options.
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Database> {
        Builder::new().open_read_only(path)
    }

    /// What recovery did at open (which slot, whether it fell back and why).
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.recovery
    }

    /// The page size of the file.
    pub fn page_size(&self) -> usize {
        self.shared.pager.page_size()
    }

    /// The longest key this file accepts.
    pub fn max_key_len(&self) -> usize {
        limits::max_key_bytes(self.page_size())
    }

    /// Begins a read transaction: a snapshot of the latest commit, never
    /// blocked by the writer. It can move to another thread.
    pub fn begin_read(&self) -> Result<ReadTransaction> {
        ReadTransaction::begin(self.shared.clone())
    }

    /// Begins the write transaction, waiting while another one is open.
    pub fn begin_write(&self) -> Result<WriteTransaction> {
        WriteTransaction::begin(self.shared.clone())
    }

    /// Runs a one-operation commit in a write group (`txn/group.rs`):
    /// `own` if this thread leads, else the owned copy `to_queue` makes.
    pub(crate) fn write_grouped(
        &self,
        durability: Durability,
        own: &crate::txn::group::Run<'_>,
        to_queue: &dyn Fn() -> crate::txn::group::Op,
    ) -> crate::txn::group::Grouped {
        self.groups.run(&self.shared, durability, own, to_queue)
    }

    /// Makes every commit so far durable (one device flush, shared with any
    /// concurrent durable commits).
    pub fn sync(&self) -> Result<()> {
        self.shared.pager.check_writable()?;
        // When the commit log holds every commit since the newest slot, a
        // log write and one flush make them all durable: every user commit
        // up to the newest (read under the writer lock, so none comes in
        // between). Not up to the newest trees, which may be a spill's: it
        // changed nothing the log does not hold and has no record of its
        // own to wait for.
        let logged = self
            .shared
            .with_writer(|_, carry| Ok(carry.log_ok.then(|| self.shared.shown())))?;
        if let Some(shown) = logged {
            return self.shared.wait_durable(shown);
        }
        spill::write_out(&self.shared)?;
        let latest = self.shared.latest();
        self.shared.wait_durable(latest.txn)
    }

    /// The file's on-disk format version (FORMAT.md, "Version history"). A
    /// read-write open upgrades an older file to this build's version; a
    /// read-only open leaves it as it is.
    pub fn format_version(&self) -> u32 {
        self.shared.format_version
    }

    /// The id of the latest commit visible to new readers (the id its
    /// `commit()` returned).
    pub fn latest_commit(&self) -> TxnId {
        self.shared.shown()
    }

    /// Waits until a commit newer than `after` is visible, or `timeout`
    /// passes; returns the latest commit id either way. This is the commit
    /// notification upper layers (event subscriptions) build on.
    pub fn wait_for_commit(&self, after: TxnId, timeout: Duration) -> TxnId {
        self.shared.wait_for_commit(after, timeout)
    }

    /// Whether an earlier write or sync failed (the handle then refuses writes).
    pub fn is_poisoned(&self) -> bool {
        self.shared.pager.is_poisoned()
    }

    /// Number of live read transactions.
    pub fn live_readers(&self) -> usize {
        self.shared.live_readers()
    }

    /// Walks every page of the latest commit: checksums, structure, key
    /// order, out-of-line values, table lengths, and free-space accounting.
    pub fn check_integrity(&self) -> Result<IntegrityReport> {
        let read = spill::written_snapshot(&self.shared, false)?;
        let mut report = check_commit(&self.shared.pager, &read.record, true)?;
        // The commit log's flushed pages: the overlay above these trees is
        // durable through them. (A log opened by recovery was read whole
        // then; the one this handle writes is checked up to its flushed
        // end, which no writer touches again.)
        let flushed = self.shared.log_flushed_pages(&read.record.log);
        if let Some(c) = self
            .shared
            .pager
            .check_log_pages(&read.record.log, flushed)?
        {
            report.problems.push(c);
        }
        Ok(report)
    }

    /// Syncs, marks the file cleanly closed and closes it, reporting errors
    /// that dropping the handle would swallow. If read transactions are still
    /// alive, the file stays open until they end.
    pub fn close(mut self) -> Result<()> {
        self.stop_background();
        spill_overlay(&self.shared)?;
        if Arc::strong_count(&self.shared) == 1 {
            let r = self.shared.close();
            drop(self);
            r
        } else {
            self.sync()
        }
    }
}
