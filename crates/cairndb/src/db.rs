//! Layer 4a: the database handle — open and recovery, the reader registry,
//! the single-writer lock, publishing commits, durability and group commit.
//!
//! The commit protocol and its crash analysis are in FORMAT.md ("Commit
//! protocol"). In short: a commit writes its new pages, then its commit slot
//! into the slot that does *not* hold the last durable commit, then (for
//! `Durability::Immediate`) one fdatasync covers both. Slot writes never run
//! while a flush is in flight, so a flush always covers a settled slot.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::error::{CoreError, Corruption, DamagedPart, Result};
use crate::ids::{PageId, TxnId};
use crate::integrity::{check_commit, IntegrityReport};
use crate::limits;
use crate::overlay::Overlay;
use crate::pager::alloc::Allocator;
use crate::pager::header::{
    self, slot_corruption, CommitRecord, FileHeader, HeaderError, PageRef, FIRST_DATA_PAGE,
    HEADER_BYTES,
};
use crate::pager::log::{encode_write, pages_for, LogRef};
use crate::pager::{PageWrite, Pager};
use crate::storage::{FileStorage, OpenMode, StorageFile};
use crate::txn::{ReadTransaction, WriteTransaction};

/// How durable a commit is when `commit()` returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Durability {
    /// Durable when `commit()` returns: survives a process crash and a power
    /// loss (given a device that honours fsync). Concurrent committers share
    /// one device flush (group commit). The default.
    ///
    /// A transaction whose changes are all small inserts and removals (values
    /// up to 2 KiB, at most 4,096 changes, no table created or deleted) is a
    /// *log commit*: its changes go to the in-memory overlay and a record of
    /// them to the commit log, written as one run of adjacent pages with one
    /// device flush (FORMAT.md, "Commit log"). Other durable commits, and a
    /// log commit when the log is full or the overlay over its budget, write
    /// their tree pages and a commit slot (a checkpoint).
    #[default]
    Immediate,
    /// Crash-consistent but not durable: no device flush. A crash may lose a
    /// suffix of the most recent such commits, each whole, never part of one.
    /// Gives up: survival of the commit across a crash until the next durable
    /// commit or [`Database::sync`].
    ///
    /// Set it before writing: the transaction's small inserts and removals
    /// (values up to 2 KiB, its first 4,096 changes) then go to the
    /// *overlay*, a multi-version skip list held in memory beside the trees,
    /// and a commit that changed only the overlay writes nothing but its
    /// record into the commit log's buffer, written (without a flush) once
    /// 64 KiB accumulate (about 5 µs for a one-insert commit into a
    /// million-entry table, against about 25 µs for copying the tree path).
    /// The next durable commit or `sync` makes them durable with the same
    /// log write. Checkpoints, `close`, `backup_to` and `compact` apply the
    /// overlay to the trees first, and so does a non-durable commit that
    /// would leave more than [`Builder::overlay_size`] in it.
    ///
    /// Other changes of such a commit are staged (write-behind): their pages
    /// stay in memory, pinned in the page cache where readers find them, and
    /// are written to the file with the next checkpoint, `sync` (when the log
    /// does not hold every commit), `close`, `stats`, `check_integrity` or
    /// `backup_to`, or once staged pages fill a quarter of the page cache.
    /// Repeated changes to the same pages cost no I/O.
    None,
}

/// What recovery did when the database was opened.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecoveryReport {
    /// The commit slot (0 or 1) the database was opened from.
    pub slot: usize,
    /// The transaction id of the commit opened.
    pub txn: TxnId,
    /// Whether the previous handle was closed cleanly. If not, recovery
    /// synced the file and verified every page of the commit before using it.
    pub clean: bool,
    /// If a commit slot was unusable (torn, damaged, or naming pages that fail
    /// verification), why. When that slot held the newer commit, recovery used
    /// the other slot (the last durable commit): only unacknowledged or
    /// non-durable commits are lost this way.
    pub fell_back: Option<String>,
    /// What made recovery skip each unusable commit slot, naming the page
    /// and file offset: the slot's page for a damaged or torn record, the
    /// failing page for a commit that did not verify, the first missing page
    /// for a truncated file. Empty exactly when `fell_back` is `None`. A
    /// crash during a commit can leave such a slot too (the next commit
    /// rewrites it), so this is damage only where no crash happened.
    pub skipped: Vec<Corruption>,
    /// Commits replayed from the commit log onto the opened slot's trees
    /// (durable commits since the last checkpoint, and non-durable ones
    /// whose log write was in the file).
    pub log_commits: u64,
    /// A write of the commit log that was in flight at a crash and is
    /// incomplete (its last page is missing or torn), naming its first
    /// page: its commits had not been acknowledged and were discarded. Also
    /// what damage in the last flushed write looks like.
    pub log_incomplete: Option<Corruption>,
}

/// Options for creating or opening a database.
#[derive(Debug, Clone)]
pub struct Builder {
    page_size: usize,
    cache_bytes: usize,
    max_file_bytes: Option<u64>,
    max_readers: usize,
    overlay_bytes: usize,
    log_bytes: u64,
    fixed_log_salts: Option<u64>,
    background_spill: Option<Duration>,
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            page_size: limits::DEFAULT_PAGE_SIZE,
            cache_bytes: 1 << 30,
            max_file_bytes: None,
            max_readers: limits::DEFAULT_MAX_READERS,
            overlay_bytes: 64 << 20,
            log_bytes: 64 << 20,
            fixed_log_salts: None,
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
        self.page_size = bytes;
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
        self.cache_bytes = bytes;
        self
    }

    /// A maximum file size; commits that would grow the file past it fail
    /// with [`CoreError::FileSizeLimit`] and change nothing.
    pub fn max_file_size(&mut self, bytes: u64) -> &mut Self {
        self.max_file_bytes = Some(bytes);
        self
    }

    /// The maximum number of concurrent read transactions.
    pub fn max_readers(&mut self, n: usize) -> &mut Self {
        self.max_readers = n;
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
        self.overlay_bytes = bytes;
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
        self.log_bytes = bytes;
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
        self.fixed_log_salts = Some(seed);
        self
    }

    /// Opens `path` read-write, creating it if it does not exist.
    pub fn create(&self, path: impl AsRef<Path>) -> Result<Database> {
        let path = path.as_ref();
        // Check options before touching the file system, so a bad option
        // leaves no empty file behind.
        limits::check_page_size(self.page_size)?;
        self.check_options()?;
        if !crate::storage::exists(path) {
            self.create_new_file(path)?;
        }
        let f = FileStorage::open(path, OpenMode::CreateOrOpen)?;
        self.open_storage(Box::new(f), path.to_path_buf(), true, false)
    }

    /// Creates a database file at `path` (which does not exist) atomically
    /// (`storage::create_new`): the first header and commit slots are
    /// written and synced before the file appears, so a crash never leaves
    /// a half-formatted database that could not be told from a damaged one.
    /// If another process creates `path` first, its database is used.
    fn create_new_file(&self, path: &Path) -> Result<()> {
        crate::storage::create_new(path, |f| {
            let max_file_bytes = self.max_file_bytes.unwrap_or(u64::MAX);
            self.check_initial_size(max_file_bytes)?;
            let pager = Pager::new(Box::new(f), self.page_size, self.cache_bytes, false)?;
            pager.format(&initial_record(self.page_size), max_file_bytes)
        })
    }

    /// Opens an existing database read-write.
    pub fn open(&self, path: impl AsRef<Path>) -> Result<Database> {
        let path = path.as_ref();
        self.check_options()?;
        let f = FileStorage::open(path, OpenMode::Open)?;
        self.open_storage(Box::new(f), path.to_path_buf(), false, false)
    }

    /// Opens an existing database read-only (a shared lock: other read-only
    /// handles may open it too, a read-write handle may not).
    pub fn open_read_only(&self, path: impl AsRef<Path>) -> Result<Database> {
        let path = path.as_ref();
        self.check_options()?;
        let f = FileStorage::open(path, OpenMode::ReadOnly)?;
        self.open_storage(Box::new(f), path.to_path_buf(), false, true)
    }

    /// Opens a database on any storage (the simulated file in tests),
    /// creating it if the storage is empty and `create` is set.
    pub fn open_with_storage(
        &self,
        storage: Box<dyn StorageFile>,
        create: bool,
        read_only: bool,
    ) -> Result<Database> {
        self.open_storage(storage, PathBuf::from("<storage>"), create, read_only)
    }

    /// A new file needs its header page and two slots within the limit.
    fn check_initial_size(&self, max_file_bytes: u64) -> Result<()> {
        let need = FIRST_DATA_PAGE * self.page_size as u64;
        if max_file_bytes < need {
            return Err(CoreError::FileSizeLimit {
                requested: need,
                max: max_file_bytes,
            });
        }
        Ok(())
    }

    fn check_options(&self) -> Result<()> {
        if self.max_readers == 0 {
            return Err(CoreError::InvalidOption(
                "max_readers must be at least 1".into(),
            ));
        }
        Ok(())
    }

    fn open_storage(
        &self,
        storage: Box<dyn StorageFile>,
        path: PathBuf,
        create: bool,
        read_only: bool,
    ) -> Result<Database> {
        self.check_options()?;
        let len = storage.len().map_err(|e| CoreError::io("len", e))?;
        let max_file_bytes = self.max_file_bytes.unwrap_or(u64::MAX);
        let mut version = crate::pager::header::FORMAT_VERSION;
        let (page_size, fresh) = if len == 0 {
            if !create || read_only {
                return Err(CoreError::NotADatabase { path });
            }
            limits::check_page_size(self.page_size)?;
            self.check_initial_size(max_file_bytes)?;
            (self.page_size, true)
        } else {
            let mut h = vec![0u8; (HEADER_BYTES as u64).min(len) as usize];
            storage
                .read_at(&mut h, 0)
                .map_err(|e| CoreError::io("read", e))?;
            if h.len() < HEADER_BYTES {
                // Shorter than the header: a truncated database if what is
                // there is the start of the magic bytes.
                if !header::looks_like_magic(&h) {
                    return Err(CoreError::NotADatabase { path });
                }
                return Err(Corruption {
                    part: DamagedPart::FileLength,
                    page: PageId(0),
                    offset: 0,
                    detail: format!(
                        "the file is {len} bytes long, shorter than its {HEADER_BYTES}-byte header (truncated)"
                    ),
                }
                .into());
            }
            match FileHeader::decode(&h) {
                Ok(h) => {
                    version = h.version;
                    (h.page_size as usize, false)
                }
                Err(HeaderError::BadMagic) => match slot_page_size(storage.as_ref(), len)? {
                    // The header page is wrecked but the commit slots are
                    // where a page size puts them: a damaged database.
                    Some(ps) => {
                        return Err(Corruption {
                            part: DamagedPart::FileHeader,
                            page: PageId(0),
                            offset: 0,
                            detail: format!(
                                "the header's magic bytes are wrong, but commit slots for {ps}-byte pages are in place: the header page is damaged"
                            ),
                        }
                        .into())
                    }
                    None => return Err(CoreError::NotADatabase { path }),
                },
                Err(HeaderError::NewerVersion(found)) => {
                    return Err(CoreError::UnsupportedVersion {
                        path,
                        found,
                        supported: crate::pager::header::FORMAT_VERSION,
                    })
                }
                Err(HeaderError::Damaged(detail)) => {
                    return Err(Corruption {
                        part: DamagedPart::FileHeader,
                        page: PageId(0),
                        offset: 0,
                        detail,
                    }
                    .into())
                }
            }
        };
        let pager = Pager::new(storage, page_size, self.cache_bytes, read_only)?;
        let limit_pages = max_file_bytes / page_size as u64;
        if fresh {
            pager.format(&initial_record(page_size), max_file_bytes)?;
        }
        let (slot, rec, mut report, alloc, freelist_pages) =
            recover(&pager, limit_pages, read_only)?;
        pager.note_unused_tail(rec.page_count);
        // The commit log after the opened slot's trees (a clean slot's log is
        // empty: a clean close applies every commit to the trees first).
        let replayed = if rec.log.is_none() || rec.clean {
            None
        } else {
            Some(replay_log(&pager, &rec, &mut report)?)
        };
        if version < crate::pager::header::FORMAT_VERSION && !read_only {
            // Before this build writes a slot that may name a commit log, the
            // file must no longer open in a build that knows none.
            pager.upgrade_header()?;
            version = crate::pager::header::FORMAT_VERSION;
        }
        let (overlay, visible) = match replayed {
            Some(r) => (r.overlay, r.last.unwrap_or(rec.txn)),
            None => (Overlay::default(), rec.txn),
        };
        let log_max_pages = (self.log_bytes / page_size as u64).min(u32::MAX as u64);
        let shared = Shared {
            pager,
            path,
            read_only,
            format_version: version,
            max_readers: self.max_readers,
            max_file_bytes,
            overlay_bytes: self.overlay_bytes,
            log_max_pages,
            fixed_log_salts: self.fixed_log_salts,
            started: Instant::now(),
            last_write_nanos: std::sync::atomic::AtomicU64::new(0),
            background_stop: Mutex::new(false),
            background_cv: Condvar::new(),
            handle_open: AtomicBool::new(true),
            snapshots: Mutex::new(Snapshots {
                latest: rec,
                visible,
                shown: visible,
                overlay: Arc::new(overlay),
                readers: BTreeMap::new(),
                latest_readers: 0,
                count: 0,
                tables: Arc::new(TableCache::default()),
            }),
            commit_cv: Condvar::new(),
            writer: Mutex::new(WriterState {
                active: false,
                sleepers: 0,
                counts: (alloc.free_pages(), alloc.pending_pages()),
                alloc: Some(alloc),
                carry: Carry {
                    freelist_pages,
                    // The recovered log is not continued: the next durable
                    // commit checkpoints (and frees its extent).
                    log_extent: rec.log,
                    log_ok: false,
                    log_next_pages: rec
                        .log
                        .pages
                        .clamp(MIN_LOG_PAGES.min(log_max_pages), log_max_pages),
                    ..Default::default()
                },
            }),
            writer_cv: Condvar::new(),
            io: Mutex::new(IoState {
                durable_txn: rec.txn,
                durable_slot: slot,
                slot_written_txn: rec.txn,
                unslotted: None,
                flushing: false,
                flush_target: None,
                log: None,
                logged_txn: visible,
                log_durable_txn: visible,
            }),
            io_cv: Condvar::new(),
        };
        let shared = Arc::new(shared);
        let background = match self.background_spill {
            Some(idle) if !read_only && self.overlay_bytes > 0 => {
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
            recovery: report,
            background,
        })
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
            || lock(&shared.snapshots).overlay.is_empty()
        {
            continue;
        }
        if shared.spill_in_background().is_err() {
            failed_at = Some(shared.last_write_nanos.load(Ordering::Acquire));
        }
    }
}

/// A random, nonzero salt for a new commit log: the standard library's
/// randomly keyed hasher (keys from the operating system), over the commit
/// id and the time — or, for reproducible test files, derived from `fixed`
/// and the commit id.
fn new_salt(txn: TxnId, fixed: Option<u64>) -> u64 {
    use std::hash::BuildHasher;
    if let Some(seed) = fixed {
        let bytes = [seed.to_le_bytes(), txn.0.to_le_bytes()].concat();
        return xxhash_rust::xxh3::xxh3_64(&bytes) | 1;
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    std::collections::hash_map::RandomState::new().hash_one((txn.0, nanos)) | 1
}

/// The commit record a new file starts from (in both slots): no tables, an
/// empty free list.
fn initial_record(page_size: usize) -> CommitRecord {
    CommitRecord {
        txn: TxnId(1),
        page_count: FIRST_DATA_PAGE,
        catalog: PageRef::NONE,
        freelist: PageRef::NONE,
        clean: true,
        page_size: page_size as u32,
        log: LogRef::NONE,
    }
}

/// Reads the commit log named by `rec` (not clean) and replays its complete
/// writes (FORMAT.md, "Recovery", items 5 and 6).
fn replay_log(
    pager: &Pager,
    rec: &CommitRecord,
    report: &mut RecoveryReport,
) -> Result<crate::commitlog::Replayed> {
    let scan = pager.scan_log(&rec.log, true)?;
    let ps = pager.page_size() as u64;
    let at = |seq: u64| {
        let page = rec.log.page(seq);
        (page, page.0.saturating_mul(ps))
    };
    if let Some((witness, mark)) = scan.witness {
        let (page, offset) = at(scan.end);
        return Err(Corruption {
            part: DamagedPart::LogPage,
            page,
            offset,
            detail: format!(
                "commit log page {} is not valid ({}), but log page {witness} shows the first {mark} log pages were flushed: acknowledged commits there would be lost",
                scan.end,
                scan.end_reason.as_deref().unwrap_or("unreadable")
            ),
        }
        .into());
    }
    if let Some(why) = &scan.end_reason {
        // The log should go on (no end marker): a write in flight at the
        // crash, torn, or damage to the last write.
        let first = scan.incomplete.map_or(scan.end, |(first, _)| first);
        let (page, offset) = at(first);
        report.log_incomplete = Some(Corruption {
            part: DamagedPart::LogPage,
            page,
            offset,
            detail: format!(
                "the commit log ends without its end marker at log page {} ({why}): the write there, if any, was discarded (in flight at a crash, so never acknowledged — or damaged since)",
                scan.end
            ),
        });
    }
    let replayed = crate::commitlog::replay(pager, rec, &rec.log, &scan.writes)?;
    report.log_commits = replayed.commits;
    Ok(replayed)
}

type Recovered = (usize, CommitRecord, RecoveryReport, Allocator, Vec<PageId>);

/// The page size at which a commit slot's magic bytes stand at page 1 or 2,
/// if any: the sign of a database whose header page is damaged.
fn slot_page_size(storage: &dyn StorageFile, len: u64) -> Result<Option<usize>> {
    let mut ps = limits::MIN_PAGE_SIZE;
    while ps <= limits::MAX_PAGE_SIZE {
        for slot in 1..=2u64 {
            let at = slot * ps as u64;
            if at + header::SLOT_MAGIC.len() as u64 <= len {
                let mut m = [0u8; 8];
                storage
                    .read_at(&mut m, at)
                    .map_err(|e| CoreError::io("read", e))?;
                if m == header::SLOT_MAGIC {
                    return Ok(Some(ps));
                }
            }
        }
        ps *= 2;
    }
    Ok(None)
}

/// Picks the commit to open: the valid slot with the highest transaction id
/// whose trees verify (fully, if it was not closed cleanly), else the other.
fn recover(pager: &Pager, limit_pages: u64, read_only: bool) -> Result<Recovered> {
    let slots = pager.read_slots()?;
    let ps = pager.page_size() as u64;
    let mut reasons: Vec<String> = Vec::new();
    // One entry per skipped slot, naming the damaged page.
    let mut skipped: Vec<Corruption> = Vec::new();
    let mut candidates: Vec<(usize, CommitRecord)> = Vec::new();
    for (i, s) in slots.iter().enumerate() {
        match s {
            Ok(r) => candidates.push((i, *r)),
            Err(why) => {
                reasons.push(format!("slot {i}: {why}"));
                skipped.push(slot_corruption(
                    i,
                    ps as usize,
                    format!("commit slot {i}: {why}"),
                ));
            }
        }
    }
    candidates.sort_by_key(|c| std::cmp::Reverse(c.1.txn));
    let mut synced = false;
    // A read-only handle never allocates, so a damaged free list does not
    // stop it from reading (and `check` from reporting the damage).
    let matters = |c: &Corruption| !(read_only && c.part == DamagedPart::FreeListPage);
    for (slot, rec) in candidates {
        if !rec.clean && !synced {
            // What a crashed process left in the OS cache is made durable
            // before it is trusted.
            pager.sync_for_recovery()?;
            synced = true;
        }
        let damage = if rec
            .page_count
            .checked_mul(ps)
            .is_none_or(|b| b > pager.file_len())
        {
            // Name the first page that is not wholly in the file.
            let page = pager.file_len() / ps;
            Some(Corruption {
                part: DamagedPart::FileLength,
                page: PageId(page),
                offset: page * ps,
                detail: format!(
                    "commit slot {slot} (txn {}) needs {} pages but the file has {} bytes (truncated)",
                    rec.txn,
                    rec.page_count,
                    pager.file_len()
                ),
            })
        } else if !rec.clean {
            let report = check_commit(pager, &rec, true)?;
            report.problems.into_iter().find(|c| matters(c))
        } else {
            None
        };
        if let Some(c) = damage {
            reasons.push(format!("slot {slot} (txn {}): {c}", rec.txn));
            skipped.push(c);
            continue;
        }
        let alloc = match pager.read_freelist(
            rec.freelist,
            rec.page_count,
            limit_pages.max(rec.page_count),
        ) {
            Ok((chain, mut alloc)) => {
                if !read_only {
                    alloc.release_all();
                }
                Ok((chain, alloc))
            }
            Err(CoreError::Corruption(c)) if !matters(&c) => {
                Ok((Vec::new(), Allocator::new(limit_pages)))
            }
            Err(CoreError::Corruption(c)) => Err(c),
            Err(e) => return Err(e),
        };
        match alloc {
            Ok((chain, alloc)) => {
                let report = RecoveryReport {
                    slot,
                    txn: rec.txn,
                    clean: rec.clean,
                    fell_back: (!reasons.is_empty()).then(|| reasons.join("; ")),
                    skipped,
                    log_commits: 0,
                    log_incomplete: None,
                };
                return Ok((slot, rec, report, alloc, chain));
            }
            Err(c) => {
                reasons.push(format!("slot {slot} (txn {}): {c}", rec.txn));
                skipped.push(c);
            }
        }
    }
    // Name the first damaged page found, with every slot's story.
    let detail = format!("no usable commit: {}", reasons.join("; "));
    Err(match skipped.into_iter().next() {
        Some(c) => Corruption { detail, ..c },
        None => slot_corruption(0, pager.page_size(), detail),
    }
    .into())
}

pub(crate) struct Snapshots {
    /// The latest commit of the trees (what a new reader reads below the
    /// overlay, and what durability and write-outs are about).
    pub latest: CommitRecord,
    /// The newest commit id: `latest`'s, or a newer commit that changed
    /// only the overlay. The next write transaction takes the id after it.
    pub visible: TxnId,
    /// The newest commit a user's write transaction made: the id readers
    /// report and commit notifications wait for. Commits the engine makes
    /// by itself (overlay spills, write-outs of the latest commit) give the
    /// same data a new tree version and id, and leave this alone, so a
    /// reader never reports an id no user commit returned.
    pub shown: TxnId,
    /// The non-durable changes of commits up to `latest` that are not in
    /// its trees (`overlay.rs`).
    pub overlay: Arc<Overlay>,
    /// Snapshot txn id → number of live readers on it, for commits older
    /// than `latest` (the readers of `latest` are `latest_readers`).
    pub readers: BTreeMap<TxnId, usize>,
    /// Live readers of `latest` (most readers: counted without touching
    /// the map).
    pub latest_readers: usize,
    pub count: usize,
    /// Table records of `latest`'s catalog, shared by its readers.
    pub tables: Arc<TableCache>,
}

impl Snapshots {
    /// Publishes a commit of the trees (or a write-out or clean-close record
    /// of the latest one).
    pub(crate) fn set_latest(&mut self, rec: CommitRecord) {
        if rec.catalog != self.latest.catalog {
            self.tables = Arc::new(TableCache::default());
        }
        if rec.txn != self.latest.txn && self.latest_readers > 0 {
            *self.readers.entry(self.latest.txn).or_insert(0) += self.latest_readers;
            self.latest_readers = 0;
        }
        self.latest = rec;
        self.visible = self.visible.max(rec.txn);
    }

    /// The oldest commit a live reader holds.
    pub(crate) fn oldest_reader(&self) -> Option<TxnId> {
        self.readers
            .keys()
            .next()
            .copied()
            .or((self.latest_readers > 0).then_some(self.latest.txn))
    }

    /// Registers a reader of `latest`.
    pub(crate) fn add_reader(&mut self) {
        self.latest_readers += 1;
        self.count += 1;
    }

    /// Unregisters a reader of commit `txn`.
    pub(crate) fn remove_reader(&mut self, txn: TxnId) {
        if txn == self.latest.txn && self.latest_readers > 0 {
            self.latest_readers -= 1;
        } else if let Some(n) = self.readers.get_mut(&txn) {
            *n -= 1;
            if *n == 0 {
                self.readers.remove(&txn);
            }
        }
        self.count = self.count.saturating_sub(1);
    }
}

/// The tables read transactions opened in one catalog (one commit's; a
/// catalog is never changed in place), so that opening a table in the next
/// snapshot of the same commit costs a map probe rather than a catalog
/// search, a record decode and a comparison of type names.
#[derive(Default)]
pub(crate) struct TableCache {
    /// (An ordered map: a database holds few tables, and comparing a short
    /// name costs less than hashing it.)
    map: Mutex<BTreeMap<String, CachedTable>>,
}

/// A table's root and length, and the Rust (key, value) types already
/// checked against its type names (`None`: opened untyped).
#[derive(Clone, Copy)]
pub(crate) struct CachedTable {
    pub root: crate::pager::header::PageRef,
    pub len: u64,
    pub checked: Option<(std::any::TypeId, std::any::TypeId)>,
}

impl TableCache {
    pub(crate) fn get(&self, name: &str) -> Option<CachedTable> {
        lock(&self.map).get(name).copied()
    }

    pub(crate) fn put(&self, name: &str, table: CachedTable) {
        let mut m = lock(&self.map);
        // Bounded: a catalog of many tables keeps the first ones opened.
        if m.len() < 1024 || m.contains_key(name) {
            m.insert(name.to_string(), table);
        }
    }
}

pub(crate) struct WriterState {
    pub active: bool,
    /// The allocator, taken by the active write transaction.
    pub alloc: Option<Allocator>,
    /// The rest of the writer's state, taken with the allocator.
    pub carry: Carry,
    /// (free, pending) pages after the latest write transaction ended.
    pub counts: (u64, u64),
    /// Threads asleep on `writer_cv` (the writer wakes one only if some
    /// sleep: a spinning waiter needs no system call).
    pub sleepers: usize,
}

/// What one write transaction hands to the next besides the allocator.
#[derive(Debug, Clone, Default)]
pub(crate) struct Carry {
    /// Pages of the free-list chain of the newest commit that has a slot.
    pub freelist_pages: Vec<PageId>,
    /// Pages staged by non-durable commits since the last commit was written
    /// out (write-behind, FORMAT.md "Commit protocol"). May repeat an id, or
    /// name a page freed since; the write-out skips those.
    pub staged: Vec<PageId>,
    /// Whether the latest commit is staged: its pages are in memory and no
    /// slot names it yet.
    pub behind: bool,
    /// The commit log extent the newest written slot names (freed by the
    /// next written commit).
    pub log_extent: LogRef,
    /// The newest written slot names a log, and every commit since it
    /// appended its record to the log: the log and that slot's trees are
    /// the database, so a durable commit needs only a log write.
    pub log_ok: bool,
    /// Pages of the next log extent (grows when a log fills up).
    pub log_next_pages: u64,
}

/// The smallest commit log extent, in pages (also the first one's size).
pub(crate) const MIN_LOG_PAGES: u64 = 64;

/// Pages of never-written file the log zero-fills ahead of its writes.
const LOG_ZERO_AHEAD_PAGES: u64 = 256;
/// How far ahead a log write looks for never-written pages.
const LOG_ZERO_LOOK_PAGES: u64 = 16;

/// Non-durable commits' records are written (without a flush) once this
/// many bytes are buffered, which bounds the buffer.
const LOG_WRITE_BEHIND_BYTES: usize = 64 << 10;

/// The commit log the newest slot names, as its writer sees it.
#[derive(Debug)]
pub(crate) struct LogWriter {
    pub log: LogRef,
    /// Sequence of the next page to write.
    pub next: u64,
    /// Log pages `0 .. durable` are flushed.
    pub durable: u64,
    /// Records not written yet, in commit order.
    pub buf: Vec<u8>,
}

impl LogWriter {
    fn new(log: LogRef) -> Self {
        LogWriter {
            log,
            next: 0,
            durable: 0,
            buf: Vec::new(),
        }
    }

    /// Whether the buffer plus `extra` bytes fit in the rest of the extent
    /// (written as one write, followed by the end marker).
    pub(crate) fn fits(&self, extra: usize, page_size: usize) -> bool {
        self.next + pages_for(self.buf.len() + extra, page_size) < self.log.pages
    }

    /// Writes the buffered records as one write, with the end marker after
    /// it (no flush); the next write starts on the marker.
    ///
    /// Where the log reaches a part of the file that was never written (an
    /// extent at the end of a file grown by `set_len`), it first writes
    /// zeros over the next [`LOG_ZERO_AHEAD_PAGES`]: the file system then
    /// allocates those blocks in one go, instead of one journal commit in
    /// each of the next commits' flushes (measured here: a log commit's
    /// flush took ~180 µs into a hole against ~110 µs into written blocks).
    fn write(&mut self, pager: &Pager) -> Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let ps = pager.page_size();
        let bytes = encode_write(&self.log, self.next, self.durable, &self.buf, ps);
        let after = self.next + (bytes.len() / ps) as u64;
        let extent_end = self.log.pages;
        // `after`: the page after the end marker this write ends with. The
        // next few pages are looked at (not only `after`), so zeros go out
        // before the log reaches a never-written page, about once per
        // LOG_ZERO_AHEAD_PAGES pages.
        let near = LOG_ZERO_LOOK_PAGES.min(extent_end.saturating_sub(after));
        if near > 0 && pager.is_unwritten(pager.offset(self.log.page(after)), near * ps as u64) {
            let from = after;
            let upto = (from + LOG_ZERO_AHEAD_PAGES).min(extent_end);
            let zeros = vec![0u8; (upto - from) as usize * ps];
            pager.write_log(self.log.page(from), &zeros)?;
        }
        pager.write_log(self.log.page(self.next), &bytes)?;
        self.next += (bytes.len() / ps) as u64 - 1;
        self.buf.clear();
        Ok(())
    }
}

pub(crate) struct IoState {
    /// Every commit up to this one is durable.
    pub durable_txn: TxnId,
    /// The slot holding `durable_txn`'s record: never written while it is.
    pub durable_slot: usize,
    /// The newest commit whose slot has been written.
    pub slot_written_txn: TxnId,
    /// The newest commit whose slot has not been written yet (a flush was in
    /// flight when it committed).
    pub unslotted: Option<CommitRecord>,
    pub flushing: bool,
    /// The commit the in-flight flush will make durable.
    pub flush_target: Option<TxnId>,
    /// The log the newest slot (written or waiting to be) names, if any.
    pub log: Option<LogWriter>,
    /// The newest commit whose record went to the log.
    pub logged_txn: TxnId,
    /// Every commit up to this one is durable (through the log or a slot).
    pub log_durable_txn: TxnId,
}

impl IoState {
    /// Appends commit `txn`'s record to the log buffer if the log can take
    /// it; false if there is no log or no room. Past the write-behind
    /// threshold (`write_behind`) the buffer is written, without a flush.
    pub(crate) fn log_record(
        &mut self,
        pager: &Pager,
        txn: TxnId,
        ops: &crate::commitlog::OpLog,
        write_behind: bool,
    ) -> Result<bool> {
        let Some(log) = self.log.as_mut() else {
            return Ok(false);
        };
        if !log.fits(ops.record_len(), pager.page_size()) {
            return Ok(false);
        }
        ops.append_record(txn, &mut log.buf);
        self.logged_txn = txn;
        if write_behind && log.buf.len() >= LOG_WRITE_BEHIND_BYTES {
            log.write(pager)?;
        }
        Ok(true)
    }

    /// `S` of the allocator's rule (pager/alloc.rs): the newest commit that
    /// has, or will get, a commit slot.
    pub(crate) fn newest_slot(&self) -> TxnId {
        let mut s = self.slot_written_txn;
        if let Some(t) = self.flush_target {
            s = s.max(t);
        }
        if let Some(r) = &self.unslotted {
            s = s.max(r.txn);
        }
        s
    }
}

/// State shared by the database handle and its transactions.
pub(crate) struct Shared {
    pub pager: Pager,
    pub path: PathBuf,
    pub read_only: bool,
    /// The file's format version (FORMAT.md, "Version history"): this
    /// build's after a read-write open, which upgrades older files.
    pub format_version: u32,
    pub max_readers: usize,
    pub max_file_bytes: u64,
    /// The overlay's memory budget (`Builder::overlay_size`).
    pub overlay_bytes: usize,
    /// The largest commit log extent in pages (`Builder::log_size`; 0: no
    /// log).
    pub log_max_pages: u64,
    /// `Builder::fixed_log_salts` (reproducible files in tests).
    pub fixed_log_salts: Option<u64>,
    /// When this handle opened (the clock of `last_write_nanos`).
    pub started: Instant,
    /// When a write transaction last began or ended, in nanoseconds since
    /// `started` (the background spill waits for a pause).
    pub last_write_nanos: std::sync::atomic::AtomicU64,
    /// Set when the handle closes: the background spill thread ends.
    pub background_stop: Mutex<bool>,
    pub background_cv: Condvar,
    /// False once the `Database` handle is dropped: a write transaction
    /// that outlives it then spills its overlay at commit, so the clean
    /// close that follows keeps it.
    pub handle_open: AtomicBool,
    pub snapshots: Mutex<Snapshots>,
    pub commit_cv: Condvar,
    pub writer: Mutex<WriterState>,
    pub writer_cv: Condvar,
    pub io: Mutex<IoState>,
    pub io_cv: Condvar,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    /// Writes the slot of a just-written commit (unless a flush is in flight,
    /// in which case the flush's leader writes it afterwards).
    pub(crate) fn publish_slot(&self, rec: CommitRecord) -> Result<()> {
        let mut io = lock(&self.io);
        // The new slot starts a new log (or none). Records still buffered
        // for the old one are of commits this slot's trees hold; whoever
        // waits for them is covered once this slot is flushed.
        io.log = (!rec.log.is_none()).then(|| LogWriter::new(rec.log));
        if io.flushing {
            io.unslotted = Some(rec);
            return Ok(());
        }
        self.pager.write_slot(1 - io.durable_slot, &rec)?;
        io.slot_written_txn = rec.txn;
        io.unslotted = None;
        Ok(())
    }

    /// Blocks until commit `txn` is durable, flushing if no one else is.
    pub(crate) fn wait_durable(&self, txn: TxnId) -> Result<()> {
        let mut io = lock(&self.io);
        loop {
            self.pager.check_writable()?;
            if io.durable_txn >= txn || io.log_durable_txn >= txn {
                return Ok(());
            }
            if io.flushing {
                io = self.io_cv.wait(io).unwrap_or_else(|e| e.into_inner());
                continue;
            }
            // Become the flush leader for every commit written so far.
            if let Some(rec) = io.unslotted.take() {
                if let Err(e) = self.pager.write_slot(1 - io.durable_slot, &rec) {
                    self.io_cv.notify_all();
                    return Err(e);
                }
                io.slot_written_txn = rec.txn;
            }
            // Then the buffered log records, as one write after the slot
            // that names their log: one flush covers both.
            if let Some(log) = io.log.as_mut() {
                if let Err(e) = log.write(&self.pager) {
                    self.io_cv.notify_all();
                    return Err(e);
                }
            }
            let target = io.slot_written_txn;
            let log_target = io.logged_txn;
            let log_mark = io.log.as_ref().map(|l| (l.log.salt, l.next));
            io.flushing = true;
            io.flush_target = Some(target);
            drop(io);
            let res = self.pager.sync();
            io = lock(&self.io);
            io.flushing = false;
            io.flush_target = None;
            if res.is_ok() && target > io.durable_txn {
                io.durable_txn = target;
                io.durable_slot = 1 - io.durable_slot;
            }
            if res.is_ok() {
                io.log_durable_txn = io.log_durable_txn.max(log_target);
                if let (Some(log), Some((salt, next))) = (io.log.as_mut(), log_mark) {
                    if log.log.salt == salt {
                        log.durable = log.durable.max(next);
                    }
                }
                if let Some(rec) = io.unslotted.take() {
                    if let Err(e) = self.pager.write_slot(1 - io.durable_slot, &rec) {
                        self.io_cv.notify_all();
                        return Err(e);
                    }
                    io.slot_written_txn = rec.txn;
                }
            }
            self.io_cv.notify_all();
            res?;
            if io.durable_txn < txn
                && io.log_durable_txn < txn
                && io.unslotted.is_none()
                && io.slot_written_txn < txn
                && io.logged_txn < txn
            {
                // Only a commit that was written out can be flushed; callers
                // write staged commits out first.
                return Err(CoreError::Internal(format!(
                    "commit {} was never written out (newest slot: {})",
                    txn.0, io.slot_written_txn.0
                )));
            }
        }
    }

    /// Writes commit `rec` out: its own `pages`, every staged page still in
    /// use (not free in `alloc`), then its slot. Staged pages no snapshot
    /// reaches are dropped. On success `carry.staged` is empty and
    /// `carry.behind` false; on failure both are unchanged (and a failed
    /// write has poisoned the handle).
    pub(crate) fn write_commit(
        &self,
        alloc: &Allocator,
        carry: &mut Carry,
        mut pages: Vec<PageWrite>,
        rec: CommitRecord,
    ) -> Result<()> {
        let mut discard = Vec::new();
        if !carry.staged.is_empty() {
            let mut seen: crate::ids::PageMap<u64, ()> =
                pages.iter().map(|(p, _)| (p.0, ())).collect();
            for &pid in &carry.staged {
                if seen.insert(pid.0, ()).is_some() {
                    continue;
                }
                if alloc.is_free(pid) {
                    discard.push(pid);
                    continue;
                }
                // A page reused for an out-of-line value was unstaged when
                // the value was written (the file holds the value).
                if let Some(page) = self.pager.staged_page(pid) {
                    pages.push((pid, page));
                }
            }
        }
        self.pager.ensure_len(rec.page_count, self.max_file_bytes)?;
        self.pager.write_pages(&mut pages)?;
        self.publish_slot(rec)?;
        for pid in discard {
            self.pager.discard_staged(pid);
        }
        carry.staged.clear();
        carry.behind = false;
        Ok(())
    }

    /// Writes commit `rec` out with a new free-list chain: the previous
    /// chain is freed as of `rec.txn`, the new one is built from `alloc`,
    /// and `write_commit` writes it with `pages`, the staged pages and the
    /// slot. Returns the record as written (its free list and page count).
    /// On failure the caller restores `alloc` (`carry` is unchanged).
    ///
    /// The slot written starts a new commit log when `new_log` (a durable
    /// commit's checkpoint, or a write-out that keeps the log going;
    /// FORMAT.md "Commit log"): a fresh extent of
    /// `carry.log_next_pages` with a random salt; otherwise it names none.
    /// Either way the extent the previous slot named is freed as of this
    /// commit.
    pub(crate) fn write_out_commit(
        &self,
        alloc: &mut Allocator,
        carry: &mut Carry,
        mut pages: Vec<PageWrite>,
        rec: CommitRecord,
        new_log: bool,
    ) -> Result<CommitRecord> {
        alloc.add_pending(rec.txn, carry.freelist_pages.clone());
        let old = carry.log_extent;
        if !old.is_none() {
            alloc.add_pending(
                rec.txn,
                (old.start.0..old.start.0 + old.pages).map(PageId).collect(),
            );
        }
        let log = if new_log && carry.log_next_pages > 0 {
            let n = carry.log_next_pages;
            let start = alloc.alloc_extent(n)?;
            // Staged tree pages these pages held (freed since) must never
            // be written over the log.
            self.pager.forget_pages(start, n);
            let log = LogRef {
                start,
                pages: n,
                salt: new_salt(rec.txn, self.fixed_log_salts),
            };
            // The empty log's end marker, so recovery tells its proper end
            // from damage (flushed with the slot).
            self.pager
                .ensure_len(alloc.page_count(), self.max_file_bytes)?;
            self.pager.write_log(
                start,
                &encode_write(&log, 0, 0, &[], self.pager.page_size()),
            )?;
            log
        } else {
            LogRef::NONE
        };
        alloc.trim_tail();
        let (freelist, fl_pages) = self.pager.build_freelist(alloc, rec.txn)?;
        let chain: Vec<PageId> = fl_pages.iter().map(|(p, _)| *p).collect();
        pages.extend(fl_pages);
        let rec = CommitRecord {
            page_count: alloc.page_count(),
            freelist,
            log,
            ..rec
        };
        self.write_commit(alloc, carry, pages, rec)?;
        carry.freelist_pages = chain;
        carry.log_extent = log;
        carry.log_ok = !log.is_none();
        Ok(rec)
    }

    /// If the latest commit is staged, writes it out under its own
    /// transaction id (`write_out_commit`); readers then see the record with
    /// the new chain. The caller holds the writer lock and passes the
    /// writer's state. No device flush.
    ///
    /// With `keep_log`, a commit log that holds every commit since its slot
    /// goes on in a new extent named by the written slot (as a checkpoint's
    /// does), so the next durable commit is still a log commit: a
    /// statistics, check or backup call between durable commits does not
    /// turn the next one into a checkpoint. Compaction and the clean close
    /// pass `false` (they leave no log).
    pub(crate) fn write_out_latest(
        &self,
        alloc: &mut Allocator,
        carry: &mut Carry,
        keep_log: bool,
    ) -> Result<()> {
        if !carry.behind {
            return Ok(());
        }
        self.pager.check_writable()?;
        if !lock(&self.snapshots).overlay.is_empty() {
            // A slot for trees whose earlier overlay commits are not in them
            // would let a crash keep a commit and lose one before it.
            return Err(CoreError::Internal(
                "a staged commit was to be written out with the overlay not applied".into(),
            ));
        }
        let latest = self.latest();
        let new_log = keep_log && carry.log_ok;
        self.rewrite_latest(alloc, carry, latest.txn, new_log)
    }

    /// Writes the latest commit's trees out under id `txn` with a new free
    /// list, naming a new commit log if `new_log` and none otherwise
    /// (`write_out_commit`); readers then see that record. On failure
    /// `alloc` is restored.
    fn rewrite_latest(
        &self,
        alloc: &mut Allocator,
        carry: &mut Carry,
        txn: TxnId,
        new_log: bool,
    ) -> Result<()> {
        let latest = self.latest();
        let before = alloc.backup();
        alloc.set_txn(txn);
        alloc.set_slot_horizon(lock(&self.io).newest_slot());
        match self.write_out_commit(
            alloc,
            carry,
            Vec::new(),
            CommitRecord { txn, ..latest },
            new_log,
        ) {
            Ok(rec) => {
                lock(&self.snapshots).set_latest(rec);
                Ok(())
            }
            Err(e) => {
                *alloc = before;
                Err(e)
            }
        }
    }

    /// At a clean close, after the latest commit was written out: if the
    /// newest slot names a commit log, writes the latest commit out once
    /// more, under the next id, naming none (its extent is freed), so that a
    /// cleanly closed file carries no log. The overlay is empty (applied
    /// first), so the log holds nothing the trees do not.
    fn write_out_without_log(&self, alloc: &mut Allocator, carry: &mut Carry) -> Result<()> {
        if carry.log_extent.is_none() {
            return Ok(());
        }
        if !lock(&self.snapshots).overlay.is_empty() {
            return Err(CoreError::Internal(
                "the commit log was to be dropped with the overlay not applied".into(),
            ));
        }
        let next = TxnId(self.latest().txn.0 + 1);
        self.rewrite_latest(alloc, carry, next, false)
    }

    /// Takes the writer lock (waiting for an active write transaction) and
    /// runs `f` with the writer's state.
    fn with_writer<R>(&self, f: impl FnOnce(&mut Allocator, &mut Carry) -> Result<R>) -> Result<R> {
        let mut w = lock(&self.writer);
        while w.active {
            w.sleepers += 1;
            w = self.writer_cv.wait(w).unwrap_or_else(|e| e.into_inner());
            w.sleepers -= 1;
        }
        let mut alloc = w.alloc.take().unwrap_or_default();
        let mut carry = std::mem::take(&mut w.carry);
        let res = f(&mut alloc, &mut carry);
        w.counts = (alloc.free_pages(), alloc.pending_pages());
        w.alloc = Some(alloc);
        w.carry = carry;
        res
    }

    /// Runs `f` under the writer lock with the overlay applied to the trees
    /// (spilled first, and again if a non-durable commit refilled it before
    /// the lock was taken): every path that writes a commit slot goes
    /// through here or through a commit that spilled, so no slot names trees
    /// that lack an earlier commit's overlay changes.
    fn with_writer_spilled<R>(
        self: &Arc<Self>,
        mut f: impl FnMut(&mut Allocator, &mut Carry) -> Result<R>,
    ) -> Result<R> {
        loop {
            self.spill_overlay()?;
            let res = self.with_writer(|alloc, carry| {
                if !lock(&self.snapshots).overlay.is_empty() {
                    return Ok(None);
                }
                f(alloc, carry).map(Some)
            })?;
            if let Some(r) = res {
                return Ok(r);
            }
        }
    }

    /// Applies the overlay and writes the latest commit out if it is staged
    /// (no device flush).
    pub(crate) fn write_out(self: &Arc<Self>) -> Result<()> {
        if self.read_only {
            return Ok(());
        }
        self.with_writer_spilled(|alloc, carry| self.write_out_latest(alloc, carry, true))
    }

    /// A read transaction on the latest commit of the trees, written out
    /// first if it is staged, so that its record names its own free list
    /// (statistics, checks, backups). With `apply_overlay` the overlay goes
    /// into the trees first, so the record holds everything visible (a
    /// backup); without it a written latest commit is read as it is, the
    /// overlay above it (durable through the commit log, or non-durable)
    /// left alone — a check or statistics then need no free page, even in a
    /// file at its size limit.
    pub(crate) fn written_snapshot(
        self: &Arc<Self>,
        apply_overlay: bool,
    ) -> Result<ReadTransaction> {
        if self.read_only {
            return ReadTransaction::begin(self.clone());
        }
        if !apply_overlay {
            let read = self.with_writer(|_, carry| {
                if carry.behind {
                    return Ok(None);
                }
                ReadTransaction::begin(self.clone()).map(Some)
            })?;
            if let Some(read) = read {
                return Ok(read);
            }
        }
        self.with_writer_spilled(|alloc, carry| {
            self.write_out_latest(alloc, carry, true)?;
            ReadTransaction::begin(self.clone())
        })
    }

    /// Notes that a write transaction began or ended now.
    pub(crate) fn note_write(&self) {
        self.last_write_nanos
            .store(self.started.elapsed().as_nanos() as u64, Ordering::Release);
    }

    /// The background spill: the overlay into the trees in a non-durable
    /// commit that only stages pages, if no write transaction is open.
    fn spill_in_background(self: &Arc<Self>) -> Result<()> {
        match WriteTransaction::try_begin(self.clone())? {
            Some(txn) => Self::spill_in(txn, true),
            None => Ok(()),
        }
    }

    /// Applies the overlay (non-durable changes held in memory) to the
    /// trees in a non-durable commit, if it holds anything.
    pub(crate) fn spill_overlay(self: &Arc<Self>) -> Result<()> {
        if self.read_only || lock(&self.snapshots).overlay.is_empty() {
            return Ok(());
        }
        Self::spill_in(WriteTransaction::begin(self.clone())?, false)
    }

    /// Commits `txn` as a spill: the overlay into the trees, non-durable
    /// (`stage_only`: its pages stay staged whatever the stage limit).
    fn spill_in(txn: WriteTransaction, stage_only: bool) -> Result<()> {
        txn.is_spill.set(true);
        txn.stage_only.set(stage_only);
        txn.set_durability(Durability::None);
        txn.spill_all()?;
        txn.commit().map(|_| ())
    }

    pub(crate) fn latest(&self) -> CommitRecord {
        lock(&self.snapshots).latest
    }

    /// Writes a clean-close record (the latest commit with the clean flag,
    /// under the next transaction id) and syncs, so the next open can skip
    /// verification.
    fn close(&self) -> Result<()> {
        if self.read_only || self.pager.is_poisoned() {
            return Ok(());
        }
        // The overlay was applied when the handle or the last transaction
        // went (if that failed, `write_out_latest` refuses, and the file
        // keeps its last written commit: a lost non-durable suffix).
        self.with_writer(|alloc, carry| {
            self.write_out_latest(alloc, carry, false)?;
            self.write_out_without_log(alloc, carry)
        })?;
        let latest = self.latest();
        self.wait_durable(latest.txn)?;
        let rec = CommitRecord {
            txn: TxnId(latest.txn.0 + 1),
            clean: true,
            ..latest
        };
        let mut io = lock(&self.io);
        self.pager.write_slot(1 - io.durable_slot, &rec)?;
        self.pager.sync()?;
        io.durable_slot = 1 - io.durable_slot;
        io.durable_txn = rec.txn;
        io.slot_written_txn = rec.txn;
        lock(&self.snapshots).set_latest(rec);
        Ok(())
    }
}

impl Shared {
    /// Shrinks the file to the latest commit's page count while holding the
    /// writer lock (so no commit grows it meanwhile): a staged latest commit
    /// (from a non-durable writer that ran beside compaction) is written out
    /// first, and the latest commit is made durable before the cut, so
    /// neither it nor anything a reader can reach lies past the new end.
    pub(crate) fn truncate_to_latest(self: &Arc<Self>) -> Result<()> {
        self.with_writer_spilled(|alloc, carry| {
            self.write_out_latest(alloc, carry, false)?;
            let latest = self.latest();
            self.wait_durable(latest.txn)?;
            let len = latest
                .page_count
                .saturating_mul(self.pager.page_size() as u64);
            if len < self.pager.file_len() {
                self.pager.truncate(latest.page_count)?;
            }
            Ok(())
        })
    }
}

/// Writes a clean copy of commit `rec` to a new file at `path`: the header,
/// slot 0, and every page the commit reaches, at the same offsets.
pub(crate) fn backup(shared: &Shared, rec: &CommitRecord, path: &Path) -> Result<()> {
    let out = FileStorage::open(path, OpenMode::CreateOrOpen)?;
    if out.len().map_err(|e| CoreError::io("len", e))? != 0 {
        return Err(CoreError::InvalidOption(format!(
            "backup target {} already exists and is not empty",
            path.display()
        )));
    }
    backup_to_storage(shared, rec, &out)
}

/// Writes the clean copy of commit `rec` into the empty storage `out`.
///
/// Order (the crash analysis is in FORMAT.md, "Backup"): every page first,
/// then a flush, then the header page and slot 0, then a second flush. A
/// crash before the second flush leaves a file without a valid header (not
/// a database), never a header that points at pages that were not written.
pub(crate) fn backup_to_storage(
    shared: &Shared,
    rec: &CommitRecord,
    out: &dyn crate::storage::StorageFile,
) -> Result<()> {
    let pager = &shared.pager;
    let report = check_commit(pager, rec, false)?;
    if let Some(p) = report.problems.first() {
        return Err(CoreError::Corruption(p.clone()));
    }
    let ps = pager.page_size();
    let io = |op: &'static str| move |e| CoreError::io(op, e);
    out.set_len(rec.page_count * ps as u64)
        .map_err(io("set_len"))?;
    let mut walk = crate::btree::walk::Walk::new(pager, rec.page_count);
    walk.verify_values = false;
    let mark_tree = |w: &mut crate::btree::walk::Walk, root| {
        w.tree(root, &mut |_, _, _| {});
    };
    mark_tree(&mut walk, rec.catalog);
    let read = |pid: u64, buf: &mut [u8]| pager.read_raw(pid * ps as u64, buf);
    // Table roots come from the catalog of this commit.
    let src = crate::btree::NodeSource { pager, dirty: None };
    let mut r = crate::btree::cursor::RawRange::new(
        src,
        rec.catalog,
        std::ops::Bound::Unbounded,
        std::ops::Bound::Unbounded,
    )?;
    while let Some(item) = r.next() {
        let (k, v) = item?;
        let t = crate::catalog::TableRecord::decode_or_corrupt(
            v.as_slice(),
            k.as_slice(),
            rec.catalog.page,
            ps,
        )?;
        mark_tree(&mut walk, t.root);
    }
    let (chain, _) = pager.read_freelist(rec.freelist, rec.page_count, u64::MAX)?;
    for p in chain {
        walk.mark(p, 1, DamagedPart::FreeListPage);
    }
    let mut buf = vec![0u8; ps];
    for pid in FIRST_DATA_PAGE..rec.page_count {
        if walk.is_seen(pid) {
            read(pid, &mut buf)?;
            out.write_at(&buf, pid * ps as u64).map_err(io("write"))?;
        }
    }
    // The pages must be durable before a header makes the file a database.
    out.sync_data().map_err(io("sync"))?;
    let mut header = vec![0u8; 3 * ps];
    header[..HEADER_BYTES].copy_from_slice(
        &FileHeader {
            version: crate::pager::header::FORMAT_VERSION,
            page_size: ps as u32,
        }
        .encode(),
    );
    let clean = CommitRecord {
        clean: true,
        ..*rec
    };
    // Both slots, as in a new file: a zero slot is damage.
    for slot in 0..2 {
        let at = (1 + slot) * ps;
        header[at..at + crate::pager::header::SLOT_BYTES].copy_from_slice(&clean.encode(slot));
    }
    out.write_at(&header, 0).map_err(io("write"))?;
    out.sync_data().map_err(io("sync"))?;
    Ok(())
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Errors cannot be returned from drop; `Database::close` reports them.
        let _ = self.close();
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
        let writer_busy = lock(&self.shared.writer).active;
        if !writer_busy && !self.shared.pager.is_poisoned() {
            let _ = self.shared.spill_overlay();
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

    /// Makes every commit so far durable (one device flush, shared with any
    /// concurrent durable commits).
    pub fn sync(&self) -> Result<()> {
        self.shared.pager.check_writable()?;
        // When the commit log holds every commit since the newest slot, a
        // log write and one flush make them all durable.
        let visible = lock(&self.shared.snapshots).visible;
        if self.shared.with_writer(|_, carry| Ok(carry.log_ok))? {
            return self.shared.wait_durable(visible);
        }
        self.shared.write_out()?;
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
        lock(&self.shared.snapshots).shown
    }

    /// Waits until a commit newer than `after` is visible, or `timeout`
    /// passes; returns the latest commit id either way. This is the commit
    /// notification upper layers (event subscriptions) build on.
    pub fn wait_for_commit(&self, after: TxnId, timeout: Duration) -> TxnId {
        let deadline = Instant::now() + timeout;
        let mut s = lock(&self.shared.snapshots);
        while s.shown <= after {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            s = self
                .shared
                .commit_cv
                .wait_timeout(s, deadline - now)
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
        }
        s.shown
    }

    /// Whether an earlier write or sync failed (the handle then refuses writes).
    pub fn is_poisoned(&self) -> bool {
        self.shared.pager.is_poisoned()
    }

    /// Number of live read transactions.
    pub fn live_readers(&self) -> usize {
        lock(&self.shared.snapshots).count
    }

    /// Walks every page of the latest commit: checksums, structure, key
    /// order, out-of-line values, table lengths, and free-space accounting.
    pub fn check_integrity(&self) -> Result<IntegrityReport> {
        let read = self.shared.written_snapshot(false)?;
        let mut report = check_commit(&self.shared.pager, &read.record, true)?;
        // The commit log's flushed pages: the overlay above these trees is
        // durable through them. (A log opened by recovery was read whole
        // then; the one this handle writes is checked up to its flushed
        // end, which no writer touches again.)
        let flushed = {
            let io = lock(&self.shared.io);
            io.log
                .as_ref()
                .filter(|l| l.log == read.record.log)
                .map_or(0, |l| l.durable)
        };
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
        self.shared.spill_overlay()?;
        if Arc::strong_count(&self.shared) == 1 {
            let r = self.shared.close();
            drop(self);
            r
        } else {
            self.sync()
        }
    }
}
