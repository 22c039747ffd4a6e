//! A sharded, memory-bounded cache of verified pages.
//!
//! Invariant: a cached page is byte-identical to what a reader of any live
//! snapshot would read from disk for that page id. Pages are immutable while
//! reachable (copy-on-write); a page id is only rewritten after it was freed
//! and released, and the writer then replaces the entry.

use std::sync::{Arc, Mutex};

type Shard = crate::ids::PageMap<u64, Arc<Page>>;

use super::Page;

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

    fn shard(&self, pid: u64) -> std::sync::MutexGuard<'_, Shard> {
        // Fibonacci hashing spreads sequential page ids over the shards.
        let i = (pid.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 60) as usize % SHARDS;
        self.shards[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn get(&self, pid: u64) -> Option<Arc<Page>> {
        self.shard(pid).get(&pid).cloned()
    }

    pub(crate) fn insert(&self, pid: u64, page: Arc<Page>) {
        let mut shard = self.shard(pid);
        if shard.len() >= self.cap_per_shard && !shard.contains_key(&pid) {
            // Evict an arbitrary entry: the hash map's iteration order is
            // effectively random, which approximates random replacement.
            if let Some(victim) = shard.keys().next().copied() {
                shard.remove(&victim);
            }
        }
        shard.insert(pid, page);
    }

    pub(crate) fn clear(&self) {
        for s in &self.shards {
            s.lock().unwrap_or_else(|e| e.into_inner()).clear();
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).len())
            .sum()
    }
}
