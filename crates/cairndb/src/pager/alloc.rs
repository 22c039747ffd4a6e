//! Free-space accounting and the persisted free list.
//!
//! Invariants:
//! - a page is in exactly one of: reachable from the latest commit, `free`,
//!   pending (one of three queues below), or allocated by the open write
//!   transaction;
//! - a page freed by commit `T` (it was reachable in `T-1`, not in `T`) is not
//!   reused until (a) no reader holds a snapshot older than `T` and (b) no
//!   commit that can still be recovered reaches it. For (b), with `a` the
//!   commit that allocated the page, `D` the last durable commit and `S` the
//!   newest commit whose slot was written or will be (a flush in flight or a
//!   slot waiting for one, as of `T`'s start):
//!   - `a > S` (*unslotted*, `reader_wait`): every commit that reaches the
//!     page lies in `a..T`, and none of them has or will ever get a slot (a
//!     later slot is written for a commit `>= T`). Only readers hold it. This
//!     is what lets chains of staged non-durable commits (write-behind) reuse
//!     their own pages;
//!   - `D < a <= S` (*young*, `slot_wait`): reusable once the slot has moved
//!     to `T` or later with no flush of an older commit in flight, while `a`
//!     is still after the durable commit — or once `T` is durable;
//!   - `a <= D` (`durable_wait`): reusable once a commit at or after `T` is
//!     durable.
//!
//!   The queues are ordered by `T` and released from the front, so a
//!   release is proportional to what it frees, not to what waits.
//!
//!   Condition (a) is kept exactly, not only through the oldest reader: a
//!   page allocated by `a` and freed by `T` is in the trees of commits
//!   `a..T` only, so a reader of trees `r` can reach it only if
//!   `a <= r < T`. [`Allocator::release_unread`] frees pages the oldest
//!   reader holds back but no reader can reach (their allocating commit is
//!   known: `born`), under the same durability conditions (b). So a reader
//!   pinned on an old snapshot keeps only the pages of that snapshot, and
//!   the pages written and freed after it are reused: the file stops
//!   growing instead of growing with every commit (LMDB's and SQLite WAL's
//!   long-reader problem).

use std::collections::{BTreeMap, VecDeque};

use super::header::{le_u64, PageRef, FIRST_DATA_PAGE};
use crate::error::{CoreError, Corruption, DamagedPart, Result};
use crate::ids::{PageId, TxnId};

/// In-memory free-space state; persisted as the free-list chain each commit.
#[derive(Debug, Clone, Default)]
pub struct Allocator {
    /// Free extents: start page → length in pages; never adjacent or overlapping.
    free: BTreeMap<u64, u64>,
    /// Pages freed by each commit, oldest first, that wait for a durable
    /// commit at or after their freeing commit (`durable_wait`).
    pending: VecDeque<(TxnId, Vec<PageId>)>,
    /// Young pages freed by each commit, with their allocating commit
    /// (`slot_wait`).
    slot_wait: VecDeque<(TxnId, Vec<(PageId, TxnId)>)>,
    /// Pages no slot can reach, freed by each commit (`reader_wait`).
    reader_wait: VecDeque<(TxnId, Vec<PageId>)>,
    /// `S` of the module doc for the transaction now allocating.
    slot_horizon: TxnId,
    /// Pages in `free` (kept so the per-commit statistics cost nothing).
    free_count: u64,
    /// Pages in the three pending queues.
    pending_count: u64,
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
    /// In memory only: the allocating commit of pages allocated after the
    /// oldest reader's trees (or, with no reader, after the latest trees),
    /// for [`Allocator::release_unread`]. A page missing here just waits
    /// for the oldest-reader rule.
    born: crate::ids::PageMap<u64, TxnId>,
    /// What `born` was last pruned to (entries at or below it are dropped).
    born_floor: TxnId,
    /// `release_unread`'s progress: the readers it checked against, and
    /// per queue (reader_wait, slot_wait, pending) the freeing commit up to
    /// which every group before it was checked against them (the group at
    /// it is checked again: another may have joined it).
    unread_readers: Vec<(TxnId, TxnId)>,
    unread_checked: [TxnId; 3],
    /// The page size, for errors in bytes (1 until set).
    page_bytes: u64,
    /// In memory only: the pages each commit freed, oldest first, until no
    /// reader of this process can reach them ([`Allocator::take_unreadable`]),
    /// which for pages a durable slot still reaches comes long before they
    /// can be reused.
    uncached: VecDeque<(TxnId, Vec<PageId>)>,
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
        self.free_count
    }

    /// Pages freed but not yet reusable.
    pub fn pending_pages(&self) -> u64 {
        self.pending_count
    }

    /// The counters recomputed from the sets (tests check the running ones).
    #[cfg(test)]
    fn recount(&self) -> (u64, u64) {
        let free = self.free.values().sum();
        let pending = self
            .pending
            .iter()
            .map(|(_, v)| v.len() as u64)
            .sum::<u64>()
            + self
                .slot_wait
                .iter()
                .map(|(_, v)| v.len() as u64)
                .sum::<u64>()
            + self
                .reader_wait
                .iter()
                .map(|(_, v)| v.len() as u64)
                .sum::<u64>();
        (free, pending)
    }

    /// Iterates the free extents as (start, len).
    pub fn free_extents(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.free.iter().map(|(s, l)| (*s, *l))
    }

    /// Iterates every page freed but not yet reusable.
    pub fn pending_iter(&self) -> impl Iterator<Item = PageId> + '_ {
        let durable = self.pending.iter().flat_map(|(_, v)| v.iter().copied());
        let young = self
            .slot_wait
            .iter()
            .flat_map(|(_, v)| v.iter().map(|(p, _)| *p));
        let unslotted = self.reader_wait.iter().flat_map(|(_, v)| v.iter().copied());
        durable.chain(young).chain(unslotted)
    }

    /// Sets the transaction that subsequent allocations belong to.
    pub fn set_txn(&mut self, txn: TxnId) {
        self.txn = txn;
    }

    /// Sets `S` (module doc): the newest commit that has, or will get, a
    /// commit slot, as of the start of the transaction now allocating.
    pub fn set_slot_horizon(&mut self, s: TxnId) {
        self.slot_horizon = s;
    }

    /// Whether `pid` is in the free set (neither reachable nor pending).
    pub fn is_free(&self, pid: PageId) -> bool {
        self.free
            .range(..=pid.0)
            .next_back()
            .is_some_and(|(s, l)| pid.0 < s + l)
            || pid.0 >= self.page_count
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
            slot_wait: self.slot_wait.clone(),
            reader_wait: self.reader_wait.clone(),
            slot_horizon: self.slot_horizon,
            free_count: self.free_count,
            pending_count: self.pending_count,
            page_count: self.page_count,
            limit_pages: self.limit_pages,
            young: Default::default(),
            txn: self.txn,
            young_pruned_at: self.young_pruned_at,
            page_bytes: self.page_bytes,
            // An empty queue only leaves pages cached until evicted.
            uncached: VecDeque::new(),
            // Like `young`: an empty map only delays reuse.
            born: Default::default(),
            born_floor: self.born_floor,
            unread_readers: Vec::new(),
            unread_checked: [TxnId(0); 3],
        }
    }

    fn note_young(&mut self, start: u64, n: u64) {
        for p in start..start + n {
            self.young.insert(p, self.txn);
            self.born.insert(p, self.txn);
        }
    }

    fn grow(&mut self, n: u64) -> Result<u64> {
        let start = self.page_count;
        let end = start.saturating_add(n);
        if end > self.limit_pages {
            let pb = self.page_bytes.max(1);
            return Err(CoreError::FileSizeLimit {
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
            self.free_count -= 1;
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
            self.free_count -= n;
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
                self.free_count -= len;
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
        if !self.young.is_empty() || !self.born.is_empty() {
            for p in start.0..start.0 + n {
                self.young.remove(&p);
                self.born.remove(&p);
            }
        }
        self.free_count += n;
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

    /// Records pages freed by commit `txn`, each in the queue its
    /// allocating commit decides (module doc).
    pub fn add_pending(&mut self, txn: TxnId, pages: Vec<PageId>) {
        if !pages.is_empty() {
            self.uncached.push_back((txn, pages.clone()));
        }
        let (mut durable, mut young, mut unslotted) = (Vec::new(), Vec::new(), Vec::new());
        self.pending_count += pages.len() as u64;
        for p in pages {
            match self.young.get(&p.0) {
                Some(&a) if a > self.slot_horizon => unslotted.push(p),
                Some(&a) => young.push((p, a)),
                None => durable.push(p),
            }
        }
        if !durable.is_empty() {
            Self::push_ordered(&mut self.pending, txn, durable);
        }
        if !young.is_empty() {
            self.slot_wait.push_back((txn, young));
        }
        if !unslotted.is_empty() {
            self.reader_wait.push_back((txn, unslotted));
        }
    }

    /// Adds a group to a queue ordered by freeing commit.
    fn push_ordered(q: &mut VecDeque<(TxnId, Vec<PageId>)>, txn: TxnId, pages: Vec<PageId>) {
        let at = q.partition_point(|(t, _)| *t <= txn);
        q.insert(at, (txn, pages));
    }

    /// Frees the pending pages that no reader can reach though an older
    /// reader holds their group back (module doc, condition (a) exactly),
    /// under each queue's durability conditions; call it after
    /// [`release`](Self::release) with the same `durable` and `horizon`.
    /// `readers`: the trees every live reader reads, as inclusive ranges
    /// `(lo, hi)` (a reader in another process reports the range of its
    /// read transactions). `latest`: the newest published trees (the floor
    /// of any reader to come). Each group is checked once per reader set
    /// (again when the readers change), so a long-pinned reader costs each
    /// commit only its own groups.
    pub fn release_unread(
        &mut self,
        readers: &[(TxnId, TxnId)],
        durable: TxnId,
        horizon: TxnId,
        latest: TxnId,
    ) {
        let mut readers: Vec<(TxnId, TxnId)> =
            readers.iter().map(|&(lo, hi)| (lo, hi.max(lo))).collect();
        readers.sort_unstable();
        // Pages allocated at or below the floor are reachable by the oldest
        // reader whenever it is older than their freeing commit: the
        // oldest-reader rule decides them, their birth is not needed.
        let floor = readers.first().map_or(latest, |r| r.0);
        if floor > self.born_floor {
            self.born.retain(|_, a| *a > floor);
            self.born_floor = floor;
        }
        if readers.is_empty() {
            self.unread_readers.clear();
            return;
        }
        if readers != self.unread_readers {
            self.unread_checked = [TxnId(0); 3];
            self.unread_readers = readers.clone();
        }
        // Whether some reader's trees fall in `a..t`.
        let reached = |a: TxnId, t: TxnId| readers.iter().any(|&(lo, hi)| lo < t && hi >= a);
        let born = &self.born;
        let unreached = |p: u64, t: TxnId| born.get(&p).is_some_and(|&a| !reached(a, t));
        let mut to_free = Vec::new();
        // Pages no slot reaches: readers only.
        take_unread(
            &mut self.reader_wait,
            &mut self.unread_checked[0],
            |_| true,
            |t, p| unreached(p.0, t),
            |p| *p,
            &mut to_free,
        );
        // Young pages: once the slot moved past `t` (or `t` is durable),
        // and while the durable commit does not reach them.
        take_unread(
            &mut self.slot_wait,
            &mut self.unread_checked[1],
            |t| t <= durable || t <= horizon,
            |t, (p, a)| (t <= durable || *a > durable) && unreached(p.0, t),
            |(p, _)| *p,
            &mut to_free,
        );
        // Old pages: once `t` is durable.
        take_unread(
            &mut self.pending,
            &mut self.unread_checked[2],
            |t| t <= durable,
            |t, p| unreached(p.0, t),
            |p| *p,
            &mut to_free,
        );
        self.reader_wait.retain(|(_, v)| !v.is_empty());
        self.slot_wait.retain(|(_, v)| !v.is_empty());
        self.pending.retain(|(_, v)| !v.is_empty());
        self.pending_count -= to_free.len() as u64;
        for p in to_free {
            self.free_now(p, 1);
        }
    }

    /// Pages freed by commits no reader is older than (`oldest_reader`:
    /// the oldest reader's trees, `None` with no reader), not returned
    /// before: no snapshot can reach them, though they may not be reusable
    /// yet (a durable slot may still name them, for recovery, which reads
    /// the file). The writer drops their cached copies.
    pub fn take_unreadable(&mut self, oldest_reader: Option<TxnId>) -> Vec<PageId> {
        let mut out = Vec::new();
        while let Some((t, _)) = self.uncached.front() {
            if oldest_reader.is_some_and(|r| r < *t) {
                break;
            }
            if let Some((_, pages)) = self.uncached.pop_front() {
                out.extend(pages);
            }
        }
        out
    }

    /// Moves pending pages to the free set when the rule in the module doc
    /// allows: no reader older than their freeing commit `T`, and `T <=
    /// durable`; or, for young pages still allocated after the durable
    /// commit, `T <= horizon` (the oldest commit that a present or future
    /// flush may still make durable); or, for pages no slot reaches, always.
    pub fn release(&mut self, oldest_reader: Option<TxnId>, durable: TxnId, horizon: TxnId) {
        if durable > self.young_pruned_at {
            self.young.retain(|_, a| *a > durable);
            self.young_pruned_at = durable;
        }
        let unread = |t: TxnId| oldest_reader.is_none_or(|r| r >= t);
        let mut to_free = Vec::new();
        while let Some((t, _)) = self.reader_wait.front() {
            if !unread(*t) {
                break;
            }
            if let Some((_, pages)) = self.reader_wait.pop_front() {
                to_free.extend(pages);
            }
        }
        while let Some((t, _)) = self.slot_wait.front() {
            let t = *t;
            if !unread(t) || (t > durable && t > horizon) {
                break;
            }
            let Some((_, pages)) = self.slot_wait.pop_front() else {
                break;
            };
            // A page the durable commit reached since it was freed (the
            // durable commit moved past its allocation) now waits for `T` to
            // be durable.
            let mut reached = Vec::new();
            for (p, a) in pages {
                if t <= durable || a > durable {
                    to_free.push(p);
                } else {
                    reached.push(p);
                }
            }
            if !reached.is_empty() {
                Self::push_ordered(&mut self.pending, t, reached);
                // Joined groups `release_unread` already passed: check again.
                if t < self.unread_checked[2] {
                    self.unread_checked[2] = t;
                }
            }
        }
        while let Some((t, _)) = self.pending.front() {
            if !unread(*t) || *t > durable {
                break;
            }
            if let Some((_, pages)) = self.pending.pop_front() {
                to_free.extend(pages);
            }
        }
        self.pending_count -= to_free.len() as u64;
        for p in to_free {
            self.free_now(p, 1);
        }
    }

    /// Drops free pages at the end of the file from the high-water mark.
    pub fn trim_tail(&mut self) {
        if let Some((&s, &l)) = self.free.iter().next_back() {
            if s + l == self.page_count {
                self.free.remove(&s);
                self.free_count -= l;
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
        let bad = |detail: String| -> CoreError {
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
            a.free_count += l;
        }
        let n_groups = next("the pending count")?;
        let mut seen: crate::ids::PageMap<u64, ()> = Default::default();
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
                // A page listed twice (or also free) would be handed out twice.
                if a.is_free(PageId(p)) || seen.insert(p, ()).is_some() {
                    return Err(bad(format!("pending page {p} is listed twice")));
                }
                pages.push(PageId(p));
            }
            a.pending_count += pages.len() as u64;
            a.pending.push_back((t, pages));
        }
        Ok(a)
    }

    /// Converts every pending page to free but those freed after
    /// `oldest_reader` (readers of the file in other processes).
    pub fn release_all_but(&mut self, oldest_reader: Option<TxnId>) {
        self.release(oldest_reader, TxnId(u64::MAX), TxnId(u64::MAX));
        self.young.clear();
    }
}

/// One queue's part of [`Allocator::release_unread`]: from the group at
/// `*checked` on, while `eligible` accepts the group's freeing commit,
/// moves the pages `go` picks to `out` and advances `*checked`.
fn take_unread<E>(
    q: &mut VecDeque<(TxnId, Vec<E>)>,
    checked: &mut TxnId,
    eligible: impl Fn(TxnId) -> bool,
    go: impl Fn(TxnId, &E) -> bool,
    page: impl Fn(&E) -> PageId,
    out: &mut Vec<PageId>,
) {
    for (t, entries) in q.iter_mut() {
        if *t < *checked {
            continue;
        }
        if !eligible(*t) {
            break;
        }
        entries.retain(|e| {
            let take = go(*t, e);
            if take {
                out.push(page(e));
            }
            !take
        });
        *checked = *t;
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

    /// How many pages this transaction holds allocated.
    pub fn allocated_count(&self) -> usize {
        self.allocated.len()
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
        a.set_txn(TxnId(1));
        let p = a.alloc().unwrap();
        a.release(None, TxnId(2), TxnId(2)); // commit 2 durable: 1's pages are old
        a.set_slot_horizon(TxnId(4));
        a.add_pending(TxnId(5), vec![p]);
        a.release(Some(TxnId(4)), TxnId(10), TxnId(10));
        assert_eq!(a.free_pages(), 0, "reader at 4 still sees the page");
        a.release(None, TxnId(4), TxnId(9));
        assert_eq!(a.free_pages(), 0, "commit 5 is not durable yet");
        a.release(Some(TxnId(5)), TxnId(5), TxnId(5));
        assert_eq!(a.free_pages(), 1);
        assert_eq!(a.pending_pages(), 0);
    }

    #[test]
    fn young_pages_wait_for_the_slot_to_move_past_their_freeing_commit() {
        let mut a = Allocator::new(u64::MAX);
        a.set_txn(TxnId(7)); // allocated after durable commit 6
        let p = a.alloc().unwrap();
        a.set_slot_horizon(TxnId(7)); // commit 7 has a slot (or a flush in flight)
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
        b.release(None, TxnId(6), TxnId(6));
        b.set_slot_horizon(TxnId(7));
        b.add_pending(TxnId(8), vec![q]);
        b.release(None, TxnId(6), TxnId(9));
        assert_eq!(
            b.free_pages(),
            0,
            "allocated by 3, reachable from durable commit 6"
        );
        // A young page the durable commit reaches by the time the slot moves
        // past its freeing commit waits for that commit to be durable.
        let mut c = Allocator::new(u64::MAX);
        c.set_txn(TxnId(7));
        let r = c.alloc().unwrap();
        c.set_slot_horizon(TxnId(8));
        c.add_pending(TxnId(9), vec![r]);
        c.release(None, TxnId(8), TxnId(9));
        assert_eq!(c.free_pages(), 0, "durable commit 8 reaches the page");
        assert_eq!(c.pending_pages(), 1);
        c.release(None, TxnId(9), TxnId(9));
        assert_eq!(c.free_pages(), 1);
    }

    #[test]
    fn pages_no_slot_reaches_wait_only_for_readers() {
        // Allocated by 7 while the newest slot is 6 and freed by 9: only the
        // staged commits 7 and 8 ever reached the page, and neither will get
        // a slot.
        let mut a = Allocator::new(u64::MAX);
        a.set_txn(TxnId(7));
        let p = a.alloc().unwrap();
        a.set_slot_horizon(TxnId(6));
        a.add_pending(TxnId(9), vec![p]);
        a.release(Some(TxnId(8)), TxnId(5), TxnId(6));
        assert_eq!(a.free_pages(), 0, "a reader of commit 8 sees the page");
        a.release(Some(TxnId(9)), TxnId(5), TxnId(6));
        assert_eq!(a.free_pages(), 1);
        assert!(a.is_free(p));
    }

    #[test]
    fn pages_born_after_a_pinned_reader_are_reused_once_no_reader_reaches_them() {
        let mut a = Allocator::new(u64::MAX);
        // Page `old` allocated by 2, before the reader's trees (5); pages
        // `mid` by 6 and `late` by 8, after them.
        a.set_txn(TxnId(2));
        let old = a.alloc().unwrap();
        a.set_txn(TxnId(6));
        let mid = a.alloc().unwrap();
        a.set_txn(TxnId(8));
        let late = a.alloc().unwrap();
        a.set_slot_horizon(TxnId(9));
        a.add_pending(TxnId(10), vec![old, mid, late]);
        let pinned = [(TxnId(5), TxnId(5))];
        a.release(Some(TxnId(5)), TxnId(3), TxnId(10));
        a.release_unread(&pinned, TxnId(3), TxnId(10), TxnId(10));
        // `old` is in the pinned trees; `mid` and `late` are young (after
        // durable 3) and the slot moved past 10: free.
        assert!(!a.is_free(old), "the pinned reader's trees hold it");
        assert!(a.is_free(mid) && a.is_free(late));
        assert_eq!(a.pending_pages(), 1);
        let (free, pending) = a.recount();
        assert_eq!((free, pending), (a.free_pages(), a.pending_pages()));

        // A second reader at 7 reaches `mid` (6 <= 7 < 12) but not `late2`
        // (born 9); a reader range (from another process) 8..=8 too.
        let mut b = Allocator::new(u64::MAX);
        b.set_txn(TxnId(6));
        let mid = b.alloc().unwrap();
        b.set_txn(TxnId(9));
        let late2 = b.alloc().unwrap();
        b.set_slot_horizon(TxnId(11));
        b.add_pending(TxnId(12), vec![mid, late2]);
        let readers = [(TxnId(5), TxnId(5)), (TxnId(7), TxnId(8))];
        b.release(Some(TxnId(5)), TxnId(12), TxnId(12));
        b.release_unread(&readers, TxnId(12), TxnId(12), TxnId(12));
        assert!(!b.is_free(mid), "the reader at 7 reaches it");
        assert!(b.is_free(late2), "born 9, after every reader's trees");
        // A reader of exactly the allocating commit reaches the page.
        let mut d = Allocator::new(u64::MAX);
        d.set_txn(TxnId(7));
        let q = d.alloc().unwrap();
        d.set_slot_horizon(TxnId(11));
        d.add_pending(TxnId(12), vec![q]);
        let at_birth = [(TxnId(5), TxnId(5)), (TxnId(7), TxnId(7))];
        d.release(Some(TxnId(5)), TxnId(12), TxnId(12));
        d.release_unread(&at_birth, TxnId(12), TxnId(12), TxnId(12));
        assert!(
            !d.is_free(q),
            "the reader of commit 7 reads the page 7 wrote"
        );
        // The reader at 7..=8 leaves: checked again, `mid` goes.
        b.release(Some(TxnId(5)), TxnId(12), TxnId(12));
        b.release_unread(&readers[..1], TxnId(12), TxnId(12), TxnId(12));
        assert!(b.is_free(mid));
        assert_eq!(b.pending_pages(), 0);

        // Durability still rules: an old page (born before the durable
        // commit) freed by a commit not yet durable waits.
        let mut c = Allocator::new(u64::MAX);
        c.set_txn(TxnId(6));
        let p = c.alloc().unwrap();
        c.release(Some(TxnId(5)), TxnId(7), TxnId(7)); // 7 durable: 6's page is old
        c.set_slot_horizon(TxnId(8));
        c.add_pending(TxnId(9), vec![p]);
        c.release(Some(TxnId(5)), TxnId(8), TxnId(8));
        c.release_unread(&pinned, TxnId(8), TxnId(8), TxnId(9));
        assert!(!c.is_free(p), "freed by 9, not durable yet");
        c.release(Some(TxnId(5)), TxnId(9), TxnId(9));
        c.release_unread(&pinned, TxnId(9), TxnId(9), TxnId(9));
        assert!(c.is_free(p), "9 durable, no reader in 6..9");
    }

    #[test]
    fn release_keeps_queue_order_when_pages_move() {
        let mut a = Allocator::new(u64::MAX);
        a.set_txn(TxnId(7));
        let young = a.alloc().unwrap();
        a.set_txn(TxnId(1));
        let old = a.alloc().unwrap();
        a.release(None, TxnId(2), TxnId(2));
        a.set_slot_horizon(TxnId(8));
        a.add_pending(TxnId(9), vec![young]);
        a.add_pending(TxnId(12), vec![old]);
        // Durable moves to 8 (past the young page's allocation): it joins
        // the durable queue in front of commit 12's group.
        a.release(None, TxnId(8), TxnId(10));
        assert_eq!(a.free_pages(), 0);
        a.release(None, TxnId(9), TxnId(10));
        assert!(a.is_free(young) && !a.is_free(old));
        a.release(None, TxnId(12), TxnId(12));
        assert!(a.is_free(old));
        assert_eq!(a.recount(), (a.free_pages(), a.pending_pages()));
    }

    #[test]
    fn running_counts_match_the_sets() {
        // A pseudo-random mix of every operation that moves pages between
        // the free set, the pending queues and the high-water mark.
        let mut a = Allocator::new(u64::MAX);
        let mut live: Vec<PageId> = Vec::new();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for step in 1..3000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let txn = TxnId(step);
            a.set_txn(txn);
            a.set_slot_horizon(TxnId(step.saturating_sub(1 + x % 4)));
            match x % 7 {
                0 | 1 => live.push(a.alloc().unwrap()),
                2 => {
                    let p = a.alloc_extent(1 + x % 5).unwrap();
                    live.push(p); // only the first page is tracked and freed
                }
                3 | 4 if !live.is_empty() => {
                    let p = live.swap_remove((x as usize / 7) % live.len());
                    a.add_pending(txn, vec![p]);
                }
                5 if !live.is_empty() => {
                    let p = live.swap_remove((x as usize / 7) % live.len());
                    a.free_now(p, 1);
                }
                _ => {
                    let durable = TxnId(step.saturating_sub(x % 50));
                    a.release(None, durable, TxnId(step.saturating_sub(x % 3)));
                    a.trim_tail();
                }
            }
            assert_eq!(
                a.recount(),
                (a.free_pages(), a.pending_pages()),
                "step {step}"
            );
        }
        a.release_all_but(None);
        assert_eq!(a.recount(), (a.free_pages(), a.pending_pages()));
        assert_eq!(a.pending_pages(), 0);
    }

    #[test]
    fn limit_is_enforced() {
        let mut a = Allocator::new(5);
        a.alloc().unwrap();
        a.alloc().unwrap();
        assert!(matches!(a.alloc(), Err(CoreError::FileSizeLimit { .. })));
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
