//! The single-writer lock and publication: how a write transaction takes
//! the writer's state (allocator and carried state) and what it sees of the
//! commits before it, and how a commit is published to readers and hands the
//! lock on. Every change to `Shared::writer` and `Shared::snapshots` a commit
//! makes is here; the transaction layer decides what to publish.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::overlay::Overlay;
use super::{lock, spin_while, Carry, Shared, TableCache};
use crate::error::Result;
use crate::ids::TxnId;
use crate::pager::alloc::Allocator;
use crate::pager::header::CommitRecord;

/// How long a thread that wants the writer lock spins before it sleeps.
const WRITER_SPIN: Duration = Duration::from_micros(200);

/// What a new write transaction starts from, read once the lock is held.
pub(crate) struct WriterStart {
    pub alloc: Allocator,
    pub carry: Carry,
    /// The latest commit of the trees.
    pub base: CommitRecord,
    /// The newest commit id (the transaction takes the next one).
    pub visible: TxnId,
    /// The overlay as of `visible`.
    pub overlay: Overlay,
    /// The table records of `base`'s catalog looked up so far.
    pub tables: Arc<TableCache>,
}

impl Shared {
    /// Takes the writer lock for a write transaction, waiting while another
    /// is open (or returning `None` at once if `wait` is false), and returns
    /// the writer's state with the allocator's release rule applied for the
    /// readers and durable commits of now.
    pub(crate) fn acquire_writer(&self, wait: bool) -> Result<Option<WriterStart>> {
        self.pager.check_writable()?;
        let (alloc, carry) = {
            let mut w = lock(&self.writer);
            if !wait && w.active {
                return Ok(None);
            }
            // A short write transaction (an overlay commit takes tens of
            // microseconds) ends sooner than a sleep and a wake-up through
            // the kernel, which also cost the writer a system call: spin for
            // up to `WRITER_SPIN` on `writer_busy` (a read of a shared
            // cache line, which leaves the writer's mutex alone until the
            // writer lets go), yielding now and then so a writer on the same
            // core can run, then sleep.
            // One thread spins at a time: with more threads than cores,
            // spinners would take the cores the writer needs to finish.
            if w.active && self.writer_spinners.fetch_add(1, Ordering::AcqRel) == 0 {
                drop(w);
                spin_while(WRITER_SPIN, || self.writer_busy.load(Ordering::Acquire));
                self.writer_spinners.fetch_sub(1, Ordering::AcqRel);
                w = lock(&self.writer);
            } else if w.active {
                self.writer_spinners.fetch_sub(1, Ordering::AcqRel);
            }
            while w.active {
                w.sleepers += 1;
                w = self.writer_cv.wait(w).unwrap_or_else(|e| e.into_inner());
                w.sleepers -= 1;
            }
            self.pager.check_writable()?;
            w.active = true;
            self.writer_busy.store(true, Ordering::Release);
            (
                w.alloc.take().unwrap_or_default(),
                std::mem::take(&mut w.carry),
            )
        };
        self.note_write();
        let (base, visible, overlay, oldest, mut readers, tables) = {
            let s = lock(&self.snapshots);
            (
                s.latest,
                s.visible,
                Overlay::clone(&s.overlay),
                s.oldest_reader(),
                s.reader_trees(),
                s.tables.clone(),
            )
        };
        let (durable, horizon, newest_slot) = {
            let io = lock(&self.io);
            (
                io.durable_txn,
                io.flush_target.unwrap_or(io.slot_written_txn),
                io.newest_slot(),
            )
        };
        // Readers in other processes hold their snapshots in the lock
        // file's table: the oldest of all readers bounds page reuse.
        let oldest = match &self.sharing {
            Some(sh) => {
                // (If the table cannot be read, nothing is reused.)
                let remote = match sh.lock.reader_ranges() {
                    Ok(r) => r,
                    Err(_) => vec![(1, u64::MAX)],
                };
                readers.extend(remote.iter().map(|&(lo, hi)| (TxnId(lo), TxnId(hi))));
                let remote = remote.iter().map(|r| TxnId(r.0)).min();
                match (oldest, remote) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                }
            }
            None => oldest,
        };
        let mut alloc = alloc;
        alloc.release(oldest, durable, horizon);
        alloc.release_unread(&readers, durable, horizon, base.txn);
        self.pager.forget_freed(&alloc.take_unreadable(oldest));
        alloc.set_slot_horizon(newest_slot);
        alloc.set_limit_pages(
            self.max_file_bytes / self.pager.page_size() as u64,
            self.pager.page_size() as u64,
        );
        Ok(Some(WriterStart {
            alloc,
            carry,
            base,
            visible,
            overlay,
            tables,
        }))
    }

    /// Hands the writer lock on, with the allocator and carried state the
    /// next write transaction starts from.
    pub(crate) fn release_writer(&self, alloc: Allocator, carry: Carry) {
        self.note_write();
        let mut w = lock(&self.writer);
        w.counts = (alloc.free_pages(), alloc.pending_pages());
        w.alloc = Some(alloc);
        w.carry = carry;
        w.active = false;
        self.writer_busy.store(false, Ordering::Release);
        if w.sleepers > 0 {
            self.writer_cv.notify_one();
        }
    }

    /// Publishes commit `txn`, which changed only the overlay: readers from
    /// now on see `overlay` above the same trees. `user`: a commit a caller
    /// made (not an engine-made spill), whose id readers then report.
    pub(crate) fn publish_overlay_commit(&self, txn: TxnId, overlay: Overlay, user: bool) {
        {
            let mut s = lock(&self.snapshots);
            s.overlay = fresh_memtable_if_empty(overlay);
            s.visible = txn;
            if user {
                s.shown = txn;
            }
        }
        if user {
            crate::pager::Counters::bump(&self.pager.counters.commits);
        }
        self.commit_cv.notify_all();
    }

    /// Publishes a commit of the trees (`rec`, written out or staged) with
    /// `overlay` above them (`user` as in `publish_overlay_commit`).
    pub(crate) fn publish_tree_commit(&self, rec: CommitRecord, overlay: Overlay, user: bool) {
        {
            let mut s = lock(&self.snapshots);
            s.set_latest(rec);
            if user {
                s.shown = rec.txn;
            }
            s.overlay = fresh_memtable_if_empty(overlay);
        }
        if user {
            crate::pager::Counters::bump(&self.pager.counters.commits);
        }
        self.commit_cv.notify_all();
    }

    /// The id readers report: the newest user commit.
    pub(crate) fn shown(&self) -> TxnId {
        lock(&self.snapshots).shown
    }
}

/// The overlay a commit publishes. Once it holds no table, the next changes
/// go into a fresh memtable: the old one, with entries every tree now holds,
/// is freed when its last reader ends.
fn fresh_memtable_if_empty(mut overlay: Overlay) -> Arc<Overlay> {
    if overlay.tables.is_empty() && overlay.mem.entries() > 0 {
        overlay.mem = Arc::default();
    }
    Arc::new(overlay)
}
