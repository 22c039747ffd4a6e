//! Recovery at open: choosing the commit slot to open (the newest whose
//! trees verify), and replaying the commit log after it (FORMAT.md,
//! "Recovery").

use super::log::Replayed;
use crate::error::{CoreError, Corruption, DamagedPart, Result};
use crate::ids::{PageId, TxnId};
use crate::integrity::check_commit;
use crate::limits;
use crate::pager::alloc::Allocator;
use crate::pager::header::{self, slot_corruption, CommitRecord};
use crate::pager::Pager;
use crate::storage::StorageFile;

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
    /// Opened read-only beside a live writer (in another process or
    /// handle): the newest commit slot was taken as it stands, neither
    /// flushed nor verified (the writer keeps it whole; FORMAT.md, "Sharing
    /// a file between processes"), so `clean` says only that the writer
    /// has the file open.
    pub beside_writer: bool,
}

impl RecoveryReport {
    /// The report of opening commit `rec` from `slot` with nothing skipped
    /// and no log replayed yet.
    pub(crate) fn opened(slot: usize, rec: &CommitRecord) -> Self {
        RecoveryReport {
            slot,
            txn: rec.txn,
            clean: rec.clean,
            fell_back: None,
            skipped: Vec::new(),
            log_commits: 0,
            log_incomplete: None,
            beside_writer: false,
        }
    }
}

/// Reads the commit log named by `rec` (not clean) and replays its complete
/// writes (FORMAT.md, "Recovery", items 5 and 6). `beside_writer`: a
/// reader while a writer in another process appends to this log — the
/// first page that is not valid is simply the end (the writer may be
/// writing it, and one read of many pages may see a later page written and
/// an earlier one not yet), so no page past it is taken as a witness of
/// damage (FORMAT.md, "Sharing a file between processes", step 5).
pub(crate) fn replay_log(
    pager: &Pager,
    rec: &CommitRecord,
    report: &mut RecoveryReport,
    beside_writer: bool,
) -> Result<Replayed> {
    let scan = pager.scan_log(&rec.log, !beside_writer)?;
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
    let replayed = super::log::replay(pager, rec, &rec.log, &scan.writes)?;
    report.log_commits = replayed.commits;
    Ok(replayed)
}

pub(crate) type Recovered = (usize, CommitRecord, RecoveryReport, Allocator, Vec<PageId>);

/// The page size at which a commit slot's magic bytes stand at page 1 or 2,
/// if any: the sign of a database whose header page is damaged.
pub(crate) fn slot_page_size(storage: &dyn StorageFile, len: u64) -> Result<Option<usize>> {
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
/// `oldest_remote`: the oldest snapshot readers in other processes hold
/// (a read-write open frees no page freed after it).
/// `trust`: a reader beside a live writer (in another process) takes the
/// newest valid slot as it stands, without flushing or verifying it, and
/// without reading its free list (FORMAT.md, "Sharing a file between
/// processes", step 1).
pub(crate) fn recover(
    pager: &Pager,
    limit_pages: u64,
    read_only: bool,
    trust: bool,
    oldest_remote: Option<TxnId>,
) -> Result<Recovered> {
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
    if trust {
        if let Some((slot, rec)) = candidates.first().copied() {
            let report = RecoveryReport {
                beside_writer: true,
                ..RecoveryReport::opened(slot, &rec)
            };
            return Ok((slot, rec, report, Allocator::new(limit_pages), Vec::new()));
        }
    }
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
                    alloc.release_all_but(oldest_remote);
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
                    fell_back: (!reasons.is_empty()).then(|| reasons.join("; ")),
                    skipped,
                    ..RecoveryReport::opened(slot, &rec)
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
