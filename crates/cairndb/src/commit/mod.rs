//! Layer 4: the commit layer — what makes changes durable and visible:
//! snapshots and the reader registry, the memtable and the overlay of
//! small changes above the trees, the single-writer lock, group commit and
//! durability, the commit log (records, writer, replay), write-out, backups,
//! and open and recovery. It sits below the transactions (`txn/`), which it
//! never uses: a commit the engine makes by itself (an overlay spill) is a
//! write transaction, started from there.
//!
//! The commit protocol and its crash analysis are in FORMAT.md ("Commit
//! protocol"). In short: a commit writes its new pages, then its commit slot
//! into the slot that does *not* hold the last durable commit, then (for
//! `Durability::Immediate`) one fdatasync covers both.
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | [`Shared`], the writer lock and what one writer hands the next |
//! | `snapshots.rs` | the reader registry and the table cache of one commit |
//! | `writer.rs` | taking and handing on the writer lock; publishing a commit to readers |
//! | `memtable.rs`, `overlay.rs` | small changes held in memory above the trees |
//! | `durability.rs` | commit slots, group commit, the flush leader |
//! | `log.rs` | the commit log: records, the writer, replay |
//! | `writeout.rs` | writing a commit's pages, free list and slot; clean close |
//! | `open.rs`, `recovery.rs` | creating and opening a file; choosing the slot |
//! | `backup.rs` | a clean copy of one commit |

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use crate::error::Result;
use crate::ids::PageId;
use crate::pager::alloc::Allocator;
use crate::pager::header::CommitRecord;
use crate::pager::log::LogRef;
use crate::pager::Pager;

mod arena;
pub(crate) mod backup;
mod durability;
pub(crate) mod log;
pub(crate) mod memtable;
pub(crate) mod open;
pub(crate) mod overlay;
pub(crate) mod recovery;
pub(crate) mod snapshots;
mod writeout;
pub(crate) mod writer;

pub(crate) use durability::IoState;
pub(crate) use snapshots::{CachedTable, Snapshots, TableCache};

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
    /// commit or [`Database::sync`](crate::Database::sync).
    ///
    /// Set it before writing: the transaction's small inserts and removals
    /// (values up to 2 KiB, its first 4,096 changes) then go to the
    /// *overlay*, a multi-version B+tree held in memory beside the trees,
    /// and a commit that changed only the overlay writes nothing but its
    /// record into the commit log's buffer, written (without a flush) once
    /// 64 KiB accumulate (about 5 µs for a one-insert commit into a
    /// million-entry table, against about 25 µs for copying the tree path).
    /// The next durable commit or `sync` makes them durable with the same
    /// log write. Checkpoints, `close`, `backup_to` and `compact` apply the
    /// overlay to the trees first, and so does a non-durable commit that
    /// would leave more than [`Builder::overlay_size`](crate::Builder::overlay_size) in it.
    ///
    /// Other changes of such a commit are staged (write-behind): their pages
    /// stay in memory, pinned in the page cache where readers find them, and
    /// are written to the file with the next checkpoint, `sync` (when the log
    /// does not hold every commit), `close`, `stats`, `check_integrity` or
    /// `backup_to`, or once staged pages fill a quarter of the page cache.
    /// Repeated changes to the same pages cost no I/O.
    None,
}

/// The writer lock's state (under `Shared::writer`).
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
    /// `writer.active`, for threads that spin before they sleep on
    /// `writer_cv` (read without the mutex: only a hint).
    pub writer_busy: std::sync::atomic::AtomicBool,
    /// Threads spinning for the writer lock (at most one spins; the others
    /// sleep on `writer_cv`).
    pub writer_spinners: std::sync::atomic::AtomicU32,
    pub io: Mutex<IoState>,
    pub io_cv: Condvar,
    /// The handle's place in the lock file shared with other processes
    /// (`None` for storage that is not a file of its own, as in tests).
    pub sharing: Option<Sharing>,
    /// Values an upper layer derived from the state of one commit (the
    /// event log's end), each valid for exactly that commit (`memo`).
    pub layer_memo: Mutex<Vec<(&'static str, crate::ids::TxnId, u64)>>,
}

/// A file-backed handle's part in sharing its file with other processes
/// (FORMAT.md, "Sharing a file between processes").
pub(crate) struct Sharing {
    pub lock: Arc<crate::storage::lockfile::LockFile>,
    /// A read-only handle's reader slot (`None`: the writer).
    pub slot: Option<usize>,
    /// The commit counter when a reader last looked at the file's slots
    /// and log.
    pub seen: std::sync::atomic::AtomicU64,
    /// The last look found no writer (nothing changes until one opens).
    pub looked_without_writer: AtomicBool,
}

impl Sharing {
    pub(crate) fn new(lock: Arc<crate::storage::lockfile::LockFile>, slot: Option<usize>) -> Self {
        let seen = std::sync::atomic::AtomicU64::new(lock.counter());
        Sharing {
            lock,
            slot,
            seen,
            looked_without_writer: AtomicBool::new(false),
        }
    }
}

impl Drop for Sharing {
    fn drop(&mut self) {
        if let Some(s) = self.slot {
            self.lock.release_slot(s);
        }
    }
}

impl Shared {
    /// The value `key` an upper layer recorded for commit `at` (the state
    /// of exactly that commit), if it is the one recorded.
    pub(crate) fn memo(&self, key: &'static str, at: crate::ids::TxnId) -> Option<u64> {
        lock(&self.layer_memo)
            .iter()
            .find(|(k, t, _)| *k == key && *t == at)
            .map(|(_, _, v)| *v)
    }

    /// Records `value` as what `key` is in the state of commit `at`; an
    /// older commit's record never replaces a newer one.
    pub(crate) fn set_memo(&self, key: &'static str, at: crate::ids::TxnId, value: u64) {
        let mut m = lock(&self.layer_memo);
        match m.iter_mut().find(|(k, _, _)| *k == key) {
            Some(e) if e.1 < at => *e = (key, at, value),
            Some(_) => {}
            None => m.push((key, at, value)),
        }
    }
}

/// Spins while `busy()` holds, for up to `limit`, yielding the core now
/// and then (a thread waiting for a short critical section: cheaper than a
/// sleep and a wake-up through the kernel). Whether `busy()` ended.
pub(crate) fn spin_while(limit: std::time::Duration, mut busy: impl FnMut() -> bool) -> bool {
    let start = std::time::Instant::now();
    let mut rounds = 0u32;
    while busy() {
        rounds = rounds.wrapping_add(1);
        std::hint::spin_loop();
        if rounds.is_multiple_of(128) {
            if start.elapsed() >= limit {
                return false;
            }
            if rounds.is_multiple_of(1024) {
                std::thread::yield_now();
            }
        }
    }
    true
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    /// Takes the writer lock (waiting for an active write transaction) and
    /// runs `f` with the writer's state.
    pub(crate) fn with_writer<R>(
        &self,
        f: impl FnOnce(&mut Allocator, &mut Carry) -> Result<R>,
    ) -> Result<R> {
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

    /// Notes that a write transaction began or ended now.
    pub(crate) fn note_write(&self) {
        self.last_write_nanos
            .store(self.started.elapsed().as_nanos() as u64, Ordering::Release);
    }

    pub(crate) fn latest(&self) -> CommitRecord {
        lock(&self.snapshots).latest
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Errors cannot be returned from drop; `Database::close` reports them.
        let _ = self.close();
    }
}

impl Shared {
    /// Whether a write transaction is open.
    pub(crate) fn writer_active(&self) -> bool {
        lock(&self.writer).active
    }

    /// (free, pending) pages as of the latest write transaction's end.
    pub(crate) fn page_counts(&self) -> (u64, u64) {
        lock(&self.writer).counts
    }
}
