//! Commits the engine makes by itself: spilling the overlay into the trees
//! (at a durable commit, on a budget, in the background, before a
//! checkpoint), writing out a staged commit, and the snapshots statistics,
//! checks and backups read. Each is an ordinary write transaction, or runs
//! under the writer lock with the overlay spilled first.

use std::sync::Arc;

use super::{ReadTransaction, WriteTransaction};
use crate::commit::{Carry, Durability, Shared};
use crate::error::Result;
use crate::pager::alloc::Allocator;

/// Runs `f` under the writer lock with the overlay applied to the trees
/// (spilled first, and again if a non-durable commit refilled it before
/// the lock was taken): every path that writes a commit slot goes
/// through here or through a commit that spilled, so no slot names trees
/// that lack an earlier commit's overlay changes.
fn with_writer_spilled<R>(
    shared: &Arc<Shared>,
    mut f: impl FnMut(&mut Allocator, &mut Carry) -> Result<R>,
) -> Result<R> {
    loop {
        spill_overlay(shared)?;
        let res = shared.with_writer(|alloc, carry| {
            if !shared.overlay_is_empty() {
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
pub(crate) fn write_out(shared: &Arc<Shared>) -> Result<()> {
    if shared.read_only {
        return Ok(());
    }
    with_writer_spilled(shared, |alloc, carry| {
        shared.write_out_latest(alloc, carry, true)
    })
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
    shared: &Arc<Shared>,
    apply_overlay: bool,
) -> Result<ReadTransaction> {
    if shared.read_only {
        return ReadTransaction::begin(shared.clone());
    }
    if !apply_overlay {
        let read = shared.with_writer(|_, carry| {
            if carry.behind {
                return Ok(None);
            }
            ReadTransaction::begin(shared.clone()).map(Some)
        })?;
        if let Some(read) = read {
            return Ok(read);
        }
    }
    with_writer_spilled(shared, |alloc, carry| {
        shared.write_out_latest(alloc, carry, true)?;
        ReadTransaction::begin(shared.clone())
    })
}

/// The background spill: the overlay into the trees in a non-durable
/// commit that only stages pages, if no write transaction is open.
pub(crate) fn spill_in_background(shared: &Arc<Shared>) -> Result<()> {
    match WriteTransaction::try_begin(shared.clone())? {
        Some(txn) => spill_in(txn, true),
        None => Ok(()),
    }
}

/// Applies the overlay (non-durable changes held in memory) to the
/// trees in a non-durable commit, if it holds anything.
pub(crate) fn spill_overlay(shared: &Arc<Shared>) -> Result<()> {
    if shared.read_only || shared.overlay_is_empty() {
        return Ok(());
    }
    spill_in(WriteTransaction::begin(shared.clone())?, false)
}

/// Commits `txn` as a spill: the overlay into the trees, non-durable
/// (`stage_only`: its pages stay staged whatever the stage limit).
fn spill_in(txn: WriteTransaction, stage_only: bool) -> Result<()> {
    txn.is_spill.set(true);
    txn.stage_only.set(stage_only);
    txn.set_durability(Durability::None);
    txn.spill_all_before_commit()?;
    txn.commit().map(|_| ())
}

/// Shrinks the file to the latest commit's page count while holding the
/// writer lock (so no commit grows it meanwhile): a staged latest commit
/// (from a non-durable writer that ran beside compaction) is written out
/// first, and the latest commit is made durable before the cut, so
/// neither it nor anything a reader can reach lies past the new end.
pub(crate) fn truncate_to_latest(shared: &Arc<Shared>) -> Result<()> {
    with_writer_spilled(shared, |alloc, carry| {
        shared.write_out_latest(alloc, carry, false)?;
        let latest = shared.latest();
        shared.wait_durable(latest.txn)?;
        let len = latest
            .page_count
            .saturating_mul(shared.pager.page_size() as u64);
        if len < shared.pager.file_len() {
            shared.pager.truncate(latest.page_count)?;
        }
        Ok(())
    })
}
