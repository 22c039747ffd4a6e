//! Free-space accounting and the persisted free list.
//!
//! Invariants:
//! - a page is in exactly one of: reachable from the latest commit, `free`,
//!   `pending`, or allocated by the open write transaction;
//! - a page freed by commit `T` (it was reachable in `T-1`, not in `T`) stays
//!   in `pending` until (a) no reader holds a snapshot older than `T` and (b)
//!   no commit that can still be recovered references it: either a commit at
//!   or after `T` is durable, or the page is *young* — allocated after the last
//!   durable commit `D` (so `D` does not reach it) — and the commit slot has
//!   moved to `T` or later with no flush of an older commit in flight (so no
//!   commit that reaches it can become durable any more). The second case lets
//!   chains of non-durable commits and group-commit followers reuse space.

use std::collections::{BTreeMap, VecDeque};

use super::header::{le_u64, PageRef, FIRST_DATA_PAGE};
use crate::error::{Corruption, DamagedPart, Error, Result};
use crate::ids::{PageId, TxnId};

/// In-memory free-space state; persisted as the free-list chain each commit.
#[derive(Debug, Clone, Default)]
pub struct Allocator {
    /// Free extents: start page → length in pages; never adjacent or overlapping.
    free: BTreeMap<u64, u64>,
    /// Pages freed by each commit, oldest first, not yet reusable.
    pending: VecDeque<(TxnId, Vec<PageId>)>,
    /// High-water mark: pages `0..page_count` belong to the format.
    page_count: u64,
    /// Pages `page_count..limit_pages` may be allocated (the maximum file size).
    limit_pages: u64,
    /// In memory only: pages allocated after the last durable commit known at
    /// the last prune, with the allocating transaction.
    young: crate::ids::PageMap<u64, TxnId>,
    /// The transaction now allocating (recorded in `young`).
    txn: TxnId,
    /// The durable commit `young` was last pruned for.
    young_pruned_at: TxnId,
    /// The page size, for errors in bytes (1 until set).
    page_bytes: u64,
}

impl Allocator {
    /// An allocator for a new file (only the header and slots exist).
    pub fn new(limit_pages: u64) -> Self {
        Allocator {
            page_count: FIRST_DATA_PAGE,
            limit_pages,
            ..Default::default()
        }
    }

    /// The high-water mark.
    pub fn page_count(&self) -> u64 {
        self.page_count
    }

    /// Sets the maximum number of pages (from the maximum file size) and the
    /// page size (to report the limit in bytes).
    pub fn set_limit_pages(&mut self, limit: u64, page_bytes: u64) {
        self.limit_pages = limit;
        self.page_bytes = page_bytes;
    }

    /// Pages in the free set.
    pub fn free_pages(&self) -> u64 {
        self.free.values().sum()
    }

    /// Pages waiting in `pending`.
    pub fn pending_pages(&self) -> u64 {
        self.pending.iter().map(|(_, v)| v.len() as u64).sum()
    }

    /// Iterates the free extents as (start, len).
    pub fn free_extents(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.free.iter().map(|(s, l)| (*s, *l))
    }

    /// Iterates every pending page.
    pub fn pending_iter(&self) -> impl Iterator<Item = PageId> + '_ {
        self.pending.iter().flat_map(|(_, v)| v.iter().copied())
    }

    /// Sets the transaction that subsequent allocations belong to.
    pub fn set_txn(&mut self, txn: TxnId) {
        self.txn = txn;
    }

    /// A copy to restore if a commit fails before it is published, without
    /// the `young` set (which grows with every commit of a non-durable chain
    /// and made this per-commit copy O(chain length)). An empty `young` is
    /// always safe: it only delays the early reuse of pages freed by
    /// non-durable commits until the next durable one.
    pub fn backup(&self) -> Allocator {
        Allocator {
            free: self.free.clone(),
            pending: self.pending.clone(),
            page_count: self.page_count,
            limit_pages: self.limit_pages,
            young: Default::default(),
            txn: self.txn,
            young_pruned_at: self.young_pruned_at,
            page_bytes: self.page_bytes,
        }
    }

    fn note_young(&mut self, start: u64, n: u64) {
        for p in start..start + n {
            self.young.insert(p, self.txn);
        }
    }

    fn grow(&mut self, n: u64) -> Result<u64> {
        let start = self.page_count;
        let end = start.saturating_add(n);
        if end > self.limit_pages {
            let pb = self.page_bytes.max(1);
            return Err(Error::FileSizeLimit {
                requested: end.saturating_mul(pb),
                max: self.limit_pages.saturating_mul(pb),
            });
        }
        self.page_count = end;
        Ok(start)
    }

    /// Allocates one page: the lowest free page, else a new one at the end.
    /// Lowest-first keeps live data at the front so `compact` can truncate.
    pub fn alloc(&mut self) -> Result<PageId> {
        if let Some((&start, &len)) = self.free.iter().next() {
            self.free.remove(&start);
            if len > 1 {
                self.free.insert(start + 1, len - 1);
            }
            self.note_young(start, 1);
            return Ok(PageId(start));
        }
        let p = self.grow(1)?;
        self.note_young(p, 1);
        Ok(PageId(p))
    }

    /// The first free run of at least `n` pages, without allocating it.
    pub fn first_fit(&self, n: u64) -> Option<u64> {
        self.free.iter().find(|(_, &l)| l >= n).map(|(&s, _)| s)
    }

    /// Allocates `n` contiguous pages (first fit, else at the end).
    pub fn alloc_extent(&mut self, n: u64) -> Result<PageId> {
        if n == 1 {
            return self.alloc();
        }
        let found = self
            .free
            .iter()
            .find(|(_, &l)| l >= n)
            .map(|(&s, &l)| (s, l));
        if let Some((start, len)) = found {
            self.free.remove(&start);
            if len > n {
                self.free.insert(start + n, len - n);
            }
            self.note_young(start, n);
            return Ok(PageId(start));
        }
        // Extend a free extent that ends at the high-water mark, if any.
        if let Some((&start, &len)) = self.free.iter().next_back() {
            if start + len == self.page_count {
                self.grow(n - len)?;
                self.free.remove(&start);
                self.note_young(start, n);
                return Ok(PageId(start));
            }
        }
        let p = self.grow(n)?;
        self.note_young(p, n);
        Ok(PageId(p))
    }

    /// Returns `n` pages starting at `start` to the free set immediately.
    pub fn free_now(&mut self, start: PageId, n: u64) {
        if !self.young.is_empty() {
            for p in start.0..start.0 + n {
                self.young.remove(&p);
            }
        }
        let (mut s, mut l) = (start.0, n);
        if let Some((&ps, &pl)) = self.free.range(..s).next_back() {
            if ps + pl == s {
                self.free.remove(&ps);
                s = ps;
                l += pl;
            }
        }
        if let Some(&nl) = self.free.get(&(s + l)) {
            self.free.remove(&(s + l));
            l += nl;
        }
        self.free.insert(s, l);
    }

    /// Records pages freed by commit `txn`.
    pub fn add_pending(&mut self, txn: TxnId, pages: Vec<PageId>) {
        if !pages.is_empty() {
            self.pending.push_back((txn, pages));
        }
    }

    /// Moves pending pages to the free set when the rule in the module doc
    /// allows: no reader older than their freeing commit `T`, and either
    /// `T <= durable`, or the page is young and `T <= horizon` (the oldest
    /// commit that a present or future flush may still make durable).
    pub fn release(&mut self, oldest_reader: Option<TxnId>, durable: TxnId, horizon: TxnId) {
        if durable > self.young_pruned_at {
            self.young.retain(|_, a| *a > durable);
            self.young_pruned_at = durable;
        }
        let mut i = 0;
        let mut to_free = Vec::new();
        while i < self.pending.len() {
            let t = self.pending[i].0;
            if oldest_reader.is_some_and(|r| r < t) {
                break;
            }
            if t <= durable {
                if let Some((_, pages)) = self.pending.remove(i) {
                    to_free.extend(pages);
                }
                continue;
            }
            if t <= horizon && !self.young.is_empty() {
                let young = &self.young;
                let pages = &mut self.pending[i].1;
                pages.retain(|p| {
                    if young.contains_key(&p.0) {
                        to_free.push(*p);
                        false
                    } else {
                        true
                    }
                });
                if pages.is_empty() {
                    self.pending.remove(i);
                    continue;
                }
            }
            i += 1;
        }
        for p in to_free {
            self.free_now(p, 1);
        }
    }

    /// Drops free pages at the end of the file from the high-water mark.
    pub fn trim_tail(&mut self) {
        if let Some((&s, &l)) = self.free.iter().next_back() {
            if s + l == self.page_count {
                self.free.remove(&s);
                self.page_count = s;
            }
        }
    }

    /// The free list as a stream of u64 words (see FORMAT.md, "Free list").
    /// Pending pages are written as free: they are unreachable from this
    /// commit, and recovery (no readers, a durable commit) frees them anyway.
    /// Writing them as extents, not one word each, keeps the chain small while
    /// a long reader pins many pages (the chain's own pages are pinned too, so
    /// a chain that listed every pending page would grow geometrically).
    pub fn serialize(&self) -> Vec<u64> {
        let mut all = self.free.clone();
        let mut pending: Vec<u64> = self.pending_iter().map(|p| p.0).collect();
        pending.sort_unstable();
        for p in pending {
            let (mut s, mut l) = (p, 1);
            if let Some((&ps, &pl)) = all.range(..s).next_back() {
                if ps + pl == s {
                    all.remove(&ps);
                    s = ps;
                    l += pl;
                }
            }
            if let Some(&nl) = all.get(&(s + l)) {
                all.remove(&(s + l));
                l += nl;
            }
            all.insert(s, l);
        }
        let mut w = Vec::with_capacity(2 + all.len() * 2);
        w.push(all.len() as u64);
        for (s, l) in &all {
            w.push(*s);
            w.push(*l);
        }
        w.push(0);
        w
    }

    /// Parses a free-list stream; every page must lie in
    /// `FIRST_DATA_PAGE..page_count`.
    pub fn parse(
        words: &[u64],
        page_count: u64,
        limit_pages: u64,
        at: PageRef,
        page_size: usize,
    ) -> Result<Self> {
        let bad = |detail: String| -> Error {
            Corruption {
                part: DamagedPart::FreeListPage,
                page: at.page,
                offset: at.page.0 * page_size as u64,
                detail,
            }
            .into()
        };
        let mut it = words.iter().copied();
        let mut next = |what: &str| {
            it.next()
                .ok_or_else(|| bad(format!("free list ends inside {what}")))
        };
        let in_file = |s: u64, l: u64| {
            s >= FIRST_DATA_PAGE && l > 0 && s.checked_add(l).is_some_and(|e| e <= page_count)
        };
        let mut a = Allocator {
            page_count,
            limit_pages,
            ..Default::default()
        };
        if words.is_empty() && at.page.is_none() {
            return Ok(a);
        }
        let n_free = next("the extent count")?;
        let mut prev_end = 0;
        for _ in 0..n_free {
            let (s, l) = (next("an extent")?, next("an extent")?);
            if !in_file(s, l) || s < prev_end {
                return Err(bad(format!(
                    "free extent {s}+{l} is out of order or outside the file"
                )));
            }
            prev_end = s + l;
            a.free.insert(s, l);
        }
        let n_groups = next("the pending count")?;
        for _ in 0..n_groups {
            let t = TxnId(next("a pending group")?);
            let n = next("a pending group")?;
            if n > page_count {
                return Err(bad(format!(
                    "pending group of {n} pages in a file of {page_count}"
                )));
            }
            // `n` is unverified: reserve no more than the words left.
            let mut pages = Vec::with_capacity((n as usize).min(words.len()));
            for _ in 0..n {
                let p = next("a pending page")?;
                if !in_file(p, 1) {
                    return Err(bad(format!("pending page {p} outside the file")));
                }
                pages.push(PageId(p));
            }
            a.pending.push_back((t, pages));
        }
        Ok(a)
    }

    /// Converts every pending page to free (at open: no readers, and the
    /// recovered commit is durable).
    pub fn release_all(&mut self) {
        self.release(None, TxnId(u64::MAX), TxnId(u64::MAX));
        self.young.clear();
    }
}

/// Parses words from a page payload.
pub(crate) fn words_from_bytes(b: &[u8]) -> impl Iterator<Item = u64> + '_ {
    (0..b.len() / 8).map(move |i| le_u64(b, i * 8))
}

/// The allocator as seen by one write transaction: pages it allocates, and
/// pages it frees — immediately reusable if this transaction allocated them,
/// otherwise pending until the commit is durable and unread.
#[derive(Debug, Clone)]
pub struct TxnAllocator {
    /// The shared allocator state (owned by the writer for the transaction).
    pub base: Allocator,
    /// Pages allocated by this transaction.
    allocated: std::collections::HashSet<u64>,
    /// Committed pages this transaction no longer references.
    pub freed: Vec<PageId>,
}

impl TxnAllocator {
    /// A copy to restore if the commit fails (see [`Allocator::backup`]).
    pub fn backup(&self) -> TxnAllocator {
        TxnAllocator {
            base: self.base.backup(),
            allocated: self.allocated.clone(),
            freed: self.freed.clone(),
        }
    }

    /// Starts transaction `txn`'s view of `base`.
    pub fn new(mut base: Allocator, txn: TxnId) -> Self {
        base.set_txn(txn);
        TxnAllocator {
            base,
            allocated: Default::default(),
            freed: Vec::new(),
        }
    }

    /// Allocates one page.
    pub fn alloc(&mut self) -> Result<PageId> {
        let p = self.base.alloc()?;
        self.allocated.insert(p.0);
        Ok(p)
    }

    /// Allocates `n` contiguous pages.
    pub fn alloc_extent(&mut self, n: u64) -> Result<PageId> {
        let p = self.base.alloc_extent(n)?;
        self.allocated.extend(p.0..p.0 + n);
        Ok(p)
    }

    /// Frees `n` pages starting at `start`.
    pub fn free(&mut self, start: PageId, n: u64) {
        for p in start.0..start.0 + n {
            if self.allocated.remove(&p) {
                self.base.free_now(PageId(p), 1);
            } else {
                self.freed.push(PageId(p));
            }
        }
    }

    /// Whether this transaction allocated `pid`.
    pub fn allocated_here(&self, pid: PageId) -> bool {
        self.allocated.contains(&pid.0)
    }

    /// Undoes the transaction: its pages return to the free set, and pages it
    /// freed stay where they were. Returns the shared state.
    pub fn abort(mut self) -> Allocator {
        for p in std::mem::take(&mut self.allocated) {
            self.base.free_now(PageId(p), 1);
        }
        self.base
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_lowest_first_and_coalesce() {
        let mut a = Allocator::new(u64::MAX);
        let p: Vec<_> = (0..5).map(|_| a.alloc().unwrap()).collect();
        assert_eq!(p[0], PageId(3));
        a.free_now(p[1], 1);
        a.free_now(p[3], 1);
        a.free_now(p[2], 1);
        assert_eq!(a.free_extents().collect::<Vec<_>>(), vec![(4, 3)]);
        assert_eq!(a.alloc().unwrap(), PageId(4));
        assert_eq!(a.alloc_extent(2).unwrap(), PageId(5));
        a.free_now(p[4], 1);
        a.trim_tail();
        assert_eq!(a.page_count(), 7);
    }

    #[test]
    fn backup_leaves_out_young_pages() {
        // The copy taken at every commit must not carry the young set, which
        // grows with every commit of a non-durable chain.
        let mut a = Allocator::new(u64::MAX);
        a.set_txn(TxnId(5));
        let p = a.alloc().unwrap();
        a.add_pending(TxnId(5), vec![PageId(p.0 + 100)]);
        assert!(!a.young.is_empty());
        let b = a.backup();
        assert!(b.young.is_empty());
        assert_eq!(b.page_count(), a.page_count());
        assert_eq!(b.free_pages(), a.free_pages());
        assert_eq!(b.pending_pages(), a.pending_pages());
        assert_eq!(b.serialize(), a.serialize());
    }

    #[test]
    fn pending_waits_for_readers_and_durability() {
        let mut a = Allocator::new(u64::MAX);
        let p = a.alloc().unwrap();
        a.add_pending(TxnId(5), vec![p]);
        a.release(Some(TxnId(4)), TxnId(10), TxnId(10));
        assert_eq!(a.free_pages(), 0, "reader at 4 still sees the page");
        a.young.clear(); // the page predates the durable commit
        a.release(None, TxnId(4), TxnId(9));
        assert_eq!(a.free_pages(), 0, "commit 5 is not durable yet");
        a.release(Some(TxnId(5)), TxnId(5), TxnId(5));
        assert_eq!(a.free_pages(), 1);
    }

    #[test]
    fn young_pages_wait_for_the_slot_to_move_past_their_freeing_commit() {
        let mut a = Allocator::new(u64::MAX);
        a.set_txn(TxnId(7)); // allocated after durable commit 6
        let p = a.alloc().unwrap();
        a.add_pending(TxnId(8), vec![p]);
        a.release(None, TxnId(6), TxnId(7));
        assert_eq!(
            a.free_pages(),
            0,
            "a flush of commit 7 (which reaches the page) may be in flight"
        );
        a.release(None, TxnId(6), TxnId(8));
        assert_eq!(
            a.free_pages(),
            1,
            "young page freed by 8, slot at 8: reusable"
        );
        let mut b = Allocator::new(u64::MAX);
        b.set_txn(TxnId(3));
        let q = b.alloc().unwrap();
        b.add_pending(TxnId(8), vec![q]);
        b.release(None, TxnId(6), TxnId(9));
        assert_eq!(
            b.free_pages(),
            0,
            "allocated by 3, reachable from durable commit 6"
        );
    }

    #[test]
    fn limit_is_enforced() {
        let mut a = Allocator::new(5);
        a.alloc().unwrap();
        a.alloc().unwrap();
        assert!(matches!(a.alloc(), Err(Error::FileSizeLimit { .. })));
    }

    #[test]
    fn serialize_parse_round_trip() {
        let mut a = Allocator::new(u64::MAX);
        for _ in 0..10 {
            a.alloc().unwrap();
        }
        a.free_now(PageId(4), 2);
        a.add_pending(TxnId(3), vec![PageId(9), PageId(7)]);
        let w = a.serialize();
        let b = Allocator::parse(&w, a.page_count(), u64::MAX, PageRef::NONE, 4096).unwrap();
        assert_eq!(a.serialize(), b.serialize());
        assert!(Allocator::parse(
            &w[..w.len() - 1],
            a.page_count(),
            u64::MAX,
            PageRef::NONE,
            4096
        )
        .is_err());
    }
}
