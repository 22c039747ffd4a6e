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

    /// Drops every unpinned page (tests use it to force re-verification).
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
