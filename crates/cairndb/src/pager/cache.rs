//! A sharded, memory-bounded cache of verified pages, which also holds the
//! *staged* pages of commits not yet written to the file (write-behind).
//!
//! Invariants:
//! - a cached page is byte-identical to what a reader of any live snapshot
//!   would read for that page id — from the file, or for a staged page from
//!   the commit that wrote it. Pages are immutable while reachable
//!   (copy-on-write); a page id is only rewritten after it was freed and
//!   released, and the writer then replaces the entry;
//! - a staged (pinned) entry is never evicted, never replaced by a page read
//!   from the file, and survives [`PageCache::clear`]: the file does not hold
//!   its contents yet. Only the writer unpins it, after writing it out.

use std::sync::Mutex;

use super::Page;

#[derive(Debug)]
struct Entry {
    page: Page,
    /// Staged: not yet in the file.
    pinned: bool,
}

type Shard = crate::ids::PageMap<u64, Entry>;

const SHARDS: usize = 16;

#[derive(Debug)]
pub(crate) struct PageCache {
    shards: Vec<Mutex<Shard>>,
    cap_per_shard: usize,
}

impl PageCache {
    pub(crate) fn new(capacity_bytes: usize, page_size: usize) -> Self {
        let pages = (capacity_bytes / page_size).max(SHARDS * 4);
        PageCache {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            cap_per_shard: pages / SHARDS,
        }
    }

    /// Capacity in pages.
    pub(crate) fn capacity(&self) -> usize {
        self.cap_per_shard * SHARDS
    }

    fn shard(&self, pid: u64) -> std::sync::MutexGuard<'_, Shard> {
        // Fibonacci hashing spreads sequential page ids over the shards.
        let i = (pid.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 60) as usize % SHARDS;
        self.shards[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn get(&self, pid: u64) -> Option<Page> {
        self.shard(pid).get(&pid).map(|e| e.page.clone())
    }

    /// The staged page `pid`, if it is staged.
    pub(crate) fn get_staged(&self, pid: u64) -> Option<Page> {
        self.shard(pid)
            .get(&pid)
            .filter(|e| e.pinned)
            .map(|e| e.page.clone())
    }

    fn make_room(&self, shard: &mut Shard, pid: u64) {
        if shard.len() < self.cap_per_shard || shard.contains_key(&pid) {
            return;
        }
        // Evict an arbitrary unpinned entry: the hash map's iteration order
        // is effectively random, which approximates random replacement. The
        // writer bounds staged pages to a fraction of the capacity, so a
        // victim is found within a few steps; a shard of only staged pages
        // grows past its share instead.
        let victim = shard
            .iter()
            .take(64)
            .find(|(_, e)| !e.pinned)
            .map(|(k, _)| *k);
        if let Some(victim) = victim {
            shard.remove(&victim);
        }
    }

    /// Caches a page read from (or just written to) the file. A staged entry
    /// for the same id is left alone when `replace_staged` is false (a read
    /// never replaces what the file does not hold yet).
    pub(crate) fn insert(&self, pid: u64, page: Page, replace_staged: bool) {
        let mut shard = self.shard(pid);
        if !replace_staged && shard.get(&pid).is_some_and(|e| e.pinned) {
            return;
        }
        self.make_room(&mut shard, pid);
        shard.insert(
            pid,
            Entry {
                page,
                pinned: false,
            },
        );
    }

    /// Caches a staged page: pinned until [`PageCache::unstage`].
    pub(crate) fn stage(&self, pid: u64, page: Page) {
        let mut shard = self.shard(pid);
        self.make_room(&mut shard, pid);
        shard.insert(pid, Entry { page, pinned: true });
    }

    /// Drops a staged page that no snapshot can reach any more.
    pub(crate) fn discard(&self, pid: u64) {
        self.shard(pid).remove(&pid);
    }

    /// Drops page `pid` unless it is staged.
    pub(crate) fn forget_unpinned(&self, pid: u64) {
        let mut shard = self.shard(pid);
        if shard.get(&pid).is_some_and(|e| !e.pinned) {
            shard.remove(&pid);
        }
    }

    /// Drops every unpinned page.
    pub(crate) fn clear(&self) {
        for s in &self.shards {
            s.lock()
                .unwrap_or_else(|e| e.into_inner())
                .retain(|_, e| e.pinned);
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).len())
            .sum()
    }
}

/// Verified out-of-line values by first page, so that a value written or
/// read recently is handed out shared instead of being read and verified
/// again. An entry is keyed by its first page *and* checks the value's
/// checksum and length, so a different value written later to the same
/// pages never matches an old entry (no invalidation is needed for
/// correctness; freeing a value drops its entry to save memory).
#[derive(Debug)]
pub(crate) struct ValueCache {
    inner: Mutex<ValueInner>,
    budget: usize,
}

#[derive(Debug, Default)]
struct ValueInner {
    /// First page → (checksum, generation, bytes).
    map: crate::ids::PageMap<u64, (u64, u64, std::sync::Arc<[u8]>)>,
    /// Insertion order for eviction: (first page, generation).
    order: std::collections::VecDeque<(u64, u64)>,
    bytes: usize,
    generation: u64,
}

impl ValueCache {
    pub(crate) fn new(budget: usize) -> Self {
        ValueCache {
            inner: Mutex::new(ValueInner::default()),
            budget,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ValueInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The value at `start` if it has this checksum and length.
    pub(crate) fn get(&self, start: u64, checksum: u64, len: u64) -> Option<std::sync::Arc<[u8]>> {
        let inner = self.lock();
        match inner.map.get(&start) {
            Some((c, _, v)) if *c == checksum && v.len() as u64 == len => Some(v.clone()),
            _ => None,
        }
    }

    /// Keeps a verified value (values over a quarter of the budget are not
    /// kept); the oldest entries go first.
    pub(crate) fn insert(&self, start: u64, checksum: u64, value: std::sync::Arc<[u8]>) {
        if value.len() > self.budget / 4 {
            return;
        }
        let mut inner = self.lock();
        inner.generation += 1;
        let generation = inner.generation;
        let len = value.len();
        if let Some((_, _, old)) = inner.map.insert(start, (checksum, generation, value)) {
            inner.bytes -= old.len();
        }
        inner.bytes += len;
        inner.order.push_back((start, generation));
        while inner.bytes > self.budget {
            let Some((s, g)) = inner.order.pop_front() else {
                break;
            };
            if inner.map.get(&s).is_some_and(|e| e.1 == g) {
                if let Some((_, _, old)) = inner.map.remove(&s) {
                    inner.bytes -= old.len();
                }
            }
        }
        // Entries replaced or removed leave stale order records behind:
        // compact when they dominate.
        if inner.order.len() > 2 * inner.map.len() + 64 {
            let ValueInner { map, order, .. } = &mut *inner;
            order.retain(|(s, g)| map.get(s).is_some_and(|e| e.1 == *g));
        }
    }

    /// Drops the entry for a value whose pages were freed.
    pub(crate) fn remove(&self, start: u64) {
        let mut inner = self.lock();
        if let Some((_, _, old)) = inner.map.remove(&start) {
            inner.bytes -= old.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn v(n: usize, b: u8) -> Arc<[u8]> {
        std::iter::repeat_n(b, n).collect()
    }

    #[test]
    fn value_cache_matches_checksum_and_length_only() {
        let c = ValueCache::new(1 << 20);
        c.insert(10, 0xAA, v(100, 1));
        assert_eq!(c.get(10, 0xAA, 100).as_deref(), Some(&[1u8; 100][..]));
        assert!(
            c.get(10, 0xAB, 100).is_none(),
            "another value at the same pages"
        );
        assert!(c.get(10, 0xAA, 99).is_none());
        // A new value written to the same pages replaces the entry.
        c.insert(10, 0xBB, v(100, 2));
        assert!(c.get(10, 0xAA, 100).is_none());
        assert_eq!(c.get(10, 0xBB, 100).as_deref(), Some(&[2u8; 100][..]));
        c.remove(10);
        assert!(c.get(10, 0xBB, 100).is_none());
    }

    #[test]
    fn value_cache_stays_within_its_budget() {
        let c = ValueCache::new(4000);
        assert!(c.lock().bytes == 0);
        c.insert(1, 1, v(2000, 0));
        assert!(c.get(1, 1, 2000).is_none(), "over a quarter of the budget");
        for i in 0..100u64 {
            c.insert(i, i, v(900, i as u8));
            c.insert(i, i, v(900, i as u8)); // replacing leaves stale order records
            let inner = c.lock();
            assert!(inner.bytes <= 4000);
            assert_eq!(
                inner.bytes,
                inner.map.values().map(|e| e.2.len()).sum::<usize>()
            );
            assert!(inner.order.len() <= 2 * inner.map.len() + 64 + 2);
        }
        assert!(c.get(99, 99, 900).is_some(), "the newest entry stays");
        assert!(c.get(0, 0, 900).is_none(), "the oldest went first");
    }

    #[test]
    fn staged_pages_are_never_evicted_or_replaced_by_reads() {
        let c = PageCache::new(64 * 512, 512);
        let page = |b: u8| Page::new(&[b; 512], b as u64);
        for pid in 0..16u64 {
            c.stage(pid, page(1));
        }
        for pid in 100..2000u64 {
            c.insert(pid, page(2), false);
        }
        for pid in 0..16u64 {
            assert_eq!(c.get_staged(pid).map(|p| p.checksum()), Some(1));
            c.insert(pid, page(3), false);
            assert_eq!(
                c.get(pid).map(|p| p.checksum()),
                Some(1),
                "a read replaced a staged page"
            );
        }
        c.clear();
        assert_eq!(c.len(), 16, "clear keeps staged pages");
        c.insert(5, page(4), true);
        assert!(c.get_staged(5).is_none(), "a write-out unpins");
    }
}
