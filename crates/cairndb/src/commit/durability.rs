//! Durability and group commit: commit slots written in turn, and the
//! flush leader whose one device flush makes every commit written so far
//! durable (FORMAT.md, "Commit protocol"). Slot writes never run while a
//! flush is in flight, so a flush always covers a settled slot.

use super::log::{LogWriter, OpLog, LOG_WRITE_BEHIND_BYTES};
use super::{lock, Carry, Shared};
use crate::error::{CoreError, Result};
use crate::ids::TxnId;
use crate::pager::header::CommitRecord;
use crate::pager::log::pages_for;
use crate::pager::Pager;

/// The state of the file's commit slots, the flush in flight and the commit
/// log's writer (under `Shared::io`).
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
        ops: &OpLog,
        write_behind: bool,
    ) -> Result<bool> {
        let Some(log) = self.log.as_mut() else {
            return Ok(false);
        };
        // A record's body length is a u32 (FORMAT.md, "Commit log"): a
        // larger one (a transaction past 4 GiB of overlay changes) is never
        // logged; its commit checkpoints instead.
        if u32::try_from(ops.record_len()).is_err()
            || !log.fits(ops.record_len(), pager.page_size())
        {
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

    /// Appends durable commit `txn`'s record to the commit log's buffer
    /// (flushed by `wait_durable`); false if there is no log or no room, and
    /// then the checkpoint the caller makes instead starts a larger log:
    /// four times this one, and room for at least 16 records of this size.
    pub(crate) fn log_durable_record(
        &self,
        txn: TxnId,
        ops: &OpLog,
        carry: &mut Carry,
    ) -> Result<bool> {
        let mut io = lock(&self.io);
        if io.log_record(&self.pager, txn, ops, false)? {
            return Ok(true);
        }
        if let Some(log) = &io.log {
            let ps = self.pager.page_size();
            let need = pages_for(ops.record_len(), ps) + 1;
            carry.log_next_pages = (log.log.pages * 4)
                .max(need * 16)
                .min(self.log_max_pages)
                .max(carry.log_next_pages);
        }
        Ok(false)
    }

    /// Appends non-durable commit `txn`'s record to the commit log's buffer,
    /// written (without a flush) once it passes the write-behind threshold;
    /// false if there is no log or no room.
    pub(crate) fn log_staged_record(&self, txn: TxnId, ops: &OpLog) -> Result<bool> {
        lock(&self.io).log_record(&self.pager, txn, ops, true)
    }

    /// Pages of commit log `log` that are flushed, if it is the log this
    /// handle writes (0 otherwise: a log recovery read whole).
    pub(crate) fn log_flushed_pages(&self, log: &crate::pager::log::LogRef) -> u64 {
        let io = lock(&self.io);
        io.log
            .as_ref()
            .filter(|l| l.log == *log)
            .map_or(0, |l| l.durable)
    }
}
