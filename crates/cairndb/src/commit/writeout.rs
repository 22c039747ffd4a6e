//! Write-out: writing a commit's pages, its new free list and its slot
//! (and starting a new commit log), for commits of the trees, staged
//! commits written out later, and the clean close.

use super::log::new_salt;
use super::{lock, Carry, Shared};
use crate::error::{CoreError, Result};
use crate::ids::{PageId, TxnId};
use crate::pager::alloc::Allocator;
use crate::pager::header::CommitRecord;
use crate::pager::log::{encode_write, LogRef};
use crate::pager::PageWrite;

impl Shared {
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
    /// the new chain. The caller holds the writer lock, passes the writer's
    /// state and has applied the overlay. No device flush.
    ///
    /// A commit shown to readers may have no record at all: an overlay
    /// commit published while the commit log did not describe the database
    /// (`Carry::log_ok` false) is recorded only by the slot of a later
    /// spill, and when its changes cancelled out (a key put and removed
    /// again) the spill had nothing to write. Then the latest trees, which
    /// hold everything that commit shows, are written out under its id, so
    /// that every caller (a durable commit that changed nothing, `sync`,
    /// statistics, backups, compaction, the clean close) finds a record
    /// for the newest commit it shows.
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
        let latest = self.latest();
        let shown = self.shown();
        let unrecorded = shown > latest.txn && lock(&self.io).logged_txn < shown;
        if !carry.behind && !unrecorded {
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
        let id = if unrecorded { shown } else { latest.txn };
        let new_log = keep_log && carry.log_ok;
        self.rewrite_latest(alloc, carry, id, new_log)
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
    pub(crate) fn write_out_without_log(
        &self,
        alloc: &mut Allocator,
        carry: &mut Carry,
    ) -> Result<()> {
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

    /// Writes a clean-close record (the latest commit with the clean flag,
    /// under the next transaction id) and syncs, so the next open can skip
    /// verification.
    pub(crate) fn close(&self) -> Result<()> {
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
