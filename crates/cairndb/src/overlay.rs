//! Layer 4a: the overlay — small non-durable commits held in memory.
//!
//! In a write transaction set to [`Durability::None`](crate::Durability),
//! small inserts and removals go into a per-table sorted map (a [`Delta`]: a
//! persistent B-tree, `imbl::OrdMap`, so a snapshot of it is an O(1) clone)
//! instead of copying tree pages. The commit publishes the transaction's
//! deltas to readers with the commit and writes nothing; readers look in the
//! delta first, then in the tree ([`Merged`] merges the two in ranges). A
//! durable commit, `sync`, close, statistics, checks, backups and compaction
//! first *spill* the overlay (its entries are applied to the trees in key
//! order, in an ordinary commit), and so does a non-durable commit that
//! leaves more than the overlay budget in memory. Like a staged commit
//! (write-behind), an overlay commit is lost by a crash, as a whole and only
//! as part of the suffix of non-durable commits.
//!
//! Invariants: a delta's entry for a key is newer than the tree's (a table's
//! delta is spilled before any operation writes its tree directly); a delta
//! holds a removal only for a key present below it; `tree.len + delta.len` is
//! the table's length (checked when a delta is spilled).

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use imbl::OrdMap;

use crate::btree::cursor::RawRange;
use crate::btree::ValueBytes;
use crate::error::Result;

/// Shared bytes of a key or value held in a delta.
pub(crate) type Bytes = Arc<[u8]>;

/// Memory accounted per entry besides its bytes (map node share, two
/// reference-counted allocations).
const ENTRY_OVERHEAD: usize = 96;

/// Values longer than this are written to the tree directly (they would go
/// out of line there anyway, and would crowd the overlay's budget).
pub(crate) const MAX_VALUE: usize = 2048;

/// A transaction that has put this many changes into the overlay writes the
/// rest to the trees directly (spilling each table's delta before it writes
/// its tree): the overlay pays off for small commits, while a bulk change is
/// cheaper applied to the tree once than held, looked up and applied later.
pub(crate) const MAX_TXN_CHANGES: usize = 4096;

/// A Bloom filter over a delta's keys, so that a lookup of a key the delta
/// does not hold (most lookups) costs a hash and three bit tests instead of a
/// search of the map. Bits are only ever set, with atomic operations, so the
/// writer adds keys to the filter a published delta shares: a snapshot then
/// sees extra bits (false positives, which only cost a map search), never
/// fewer. It is rebuilt four times larger, for the writer's delta only, when
/// its keys outgrow it.
struct Filter {
    bits: Box<[AtomicU64]>,
    /// Keys it is sized for.
    capacity: usize,
}

/// Filter bits per key at capacity (three probes: about 0.3% false
/// positives when full).
const FILTER_BITS_PER_KEY: usize = 16;

impl Filter {
    fn new(capacity: usize) -> Filter {
        let words = (capacity * FILTER_BITS_PER_KEY)
            .div_ceil(64)
            .next_power_of_two();
        Filter {
            bits: (0..words).map(|_| AtomicU64::new(0)).collect(),
            capacity,
        }
    }

    #[inline]
    fn hash(key: &[u8]) -> u64 {
        xxhash_rust::xxh3::xxh3_64(key)
    }

    #[inline]
    fn probes(&self, h: u64) -> impl Iterator<Item = (usize, u64)> {
        let mask = (self.bits.len() * 64 - 1) as u64;
        (0..3u32).map(move |i| {
            let b = h.rotate_left(i * 21) & mask;
            ((b >> 6) as usize, 1u64 << (b & 63))
        })
    }

    fn insert(&self, h: u64) {
        for (w, bit) in self.probes(h) {
            if let Some(word) = self.bits.get(w) {
                word.fetch_or(bit, Ordering::Relaxed);
            }
        }
    }

    #[inline]
    fn may_contain(&self, h: u64) -> bool {
        self.probes(h).all(|(w, bit)| {
            self.bits
                .get(w)
                .is_none_or(|word| word.load(Ordering::Relaxed) & bit != 0)
        })
    }
}

/// One table's non-durable changes over its tree.
#[derive(Clone, Default)]
pub(crate) struct Delta {
    /// Key → new value, or `None` for a removed key.
    map: OrdMap<Bytes, Option<Bytes>>,
    /// Over the keys of `map` (`None` while it is empty).
    filter: Option<Arc<Filter>>,
    /// Entries this delta adds to the tree's count (negative if it removes
    /// more than it adds).
    pub len: i64,
    /// Memory held, roughly.
    pub bytes: usize,
}

impl Delta {
    pub(crate) fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The delta's entry for `key`: `Some(None)` means removed.
    #[inline]
    pub(crate) fn get(&self, key: &[u8]) -> Option<Option<&[u8]>> {
        let f = self.filter.as_ref()?;
        if !f.may_contain(Filter::hash(key)) {
            return None;
        }
        self.map.get(key).map(|e| e.as_deref())
    }

    /// Records `key → value` (`None`: removed); `existed` says whether the
    /// key was present before (in this delta or the tree below).
    pub(crate) fn put(&mut self, key: &[u8], value: Option<&[u8]>, existed: bool) {
        self.len += value.is_some() as i64 - existed as i64;
        let vlen = value.map_or(0, <[u8]>::len);
        match self.map.insert(Arc::from(key), value.map(Arc::from)) {
            Some(old) => {
                self.bytes = (self.bytes + vlen).saturating_sub(old.map_or(0, |o| o.len()));
            }
            None => {
                self.bytes += key.len() + vlen + ENTRY_OVERHEAD;
                match &self.filter {
                    Some(f) if self.map.len() <= f.capacity => f.insert(Filter::hash(key)),
                    _ => {
                        // New, or outgrown: a filter for four times the keys.
                        let f = Filter::new((self.map.len() * 4).max(256));
                        for k in self.map.keys() {
                            f.insert(Filter::hash(k));
                        }
                        self.filter = Some(Arc::new(f));
                    }
                }
            }
        }
    }

    /// The entries in key order (spilling).
    pub(crate) fn entries(&self) -> impl Iterator<Item = (&[u8], Option<&[u8]>)> {
        self.map.iter().map(|(k, v)| (&k[..], v.as_deref()))
    }

    fn range<'a>(&'a self, start: Bound<&[u8]>, end: Bound<&[u8]>) -> DeltaIter<'a> {
        self.map.range::<_, [u8]>((start, end))
    }
}

type DeltaIter<'a> =
    imbl::ordmap::RangedIter<'a, Bytes, Option<Bytes>, imbl::shared_ptr::DefaultSharedPtr>;

/// Every table's delta as of one commit (only tables with changes).
#[derive(Clone, Default)]
pub(crate) struct Overlay {
    pub tables: BTreeMap<String, Delta>,
}

impl Overlay {
    pub(crate) fn is_empty(&self) -> bool {
        self.tables.is_empty()
    }

    pub(crate) fn bytes(&self) -> usize {
        self.tables.values().map(|d| d.bytes).sum()
    }

    /// Entries held (changed keys, removals included).
    pub(crate) fn entries(&self) -> usize {
        self.tables.values().map(|d| d.map.len()).sum()
    }
}

type Item<'a> = (ValueBytes<'a>, ValueBytes<'a>);
type DeltaItem<'a> = (&'a Bytes, &'a Option<Bytes>);

/// A double-ended merge of a tree range and a delta range: the delta's
/// entries replace the tree's, its removals hide them.
pub(crate) struct Merged<'a> {
    tree: RawRange<'a>,
    delta: DeltaIter<'a>,
    /// Taken from the tree's front / back and not handed out yet.
    tf: Option<Item<'a>>,
    tb: Option<Item<'a>>,
    df: Option<DeltaItem<'a>>,
    db: Option<DeltaItem<'a>>,
    done: bool,
}

impl<'a> Merged<'a> {
    pub(crate) fn new(
        tree: RawRange<'a>,
        delta: &'a Delta,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
    ) -> Self {
        // An inverted or empty range yields nothing from either side (the
        // tree's range is empty then too; the map's would panic).
        let empty = match (start, end) {
            (Bound::Included(s), Bound::Included(e)) => s > e,
            (Bound::Included(s), Bound::Excluded(e))
            | (Bound::Excluded(s), Bound::Included(e))
            | (Bound::Excluded(s), Bound::Excluded(e)) => s >= e,
            _ => false,
        };
        let delta = if empty {
            delta.range(Bound::Unbounded, Bound::Unbounded)
        } else {
            delta.range(start, end)
        };
        Merged {
            tree,
            delta,
            tf: None,
            tb: None,
            df: None,
            db: None,
            done: empty,
        }
    }

    pub(crate) fn next(&mut self) -> Option<Result<Item<'a>>> {
        loop {
            if self.done {
                return None;
            }
            if self.tf.is_none() {
                match self.tree.next() {
                    Some(Ok(e)) => self.tf = Some(e),
                    Some(Err(e)) => {
                        self.done = true;
                        return Some(Err(e));
                    }
                    None => self.tf = self.tb.take(),
                }
            }
            if self.df.is_none() {
                self.df = self.delta.next().or_else(|| self.db.take());
            }
            let take_delta = match (&self.tf, &self.df) {
                (None, None) => {
                    self.done = true;
                    return None;
                }
                (Some(_), None) => false,
                (None, Some(_)) => true,
                (Some((tk, _)), Some((dk, _))) => match tk.as_slice().cmp(&dk[..]) {
                    std::cmp::Ordering::Less => false,
                    std::cmp::Ordering::Equal => {
                        // The delta's entry replaces (or removes) the tree's.
                        self.tf = None;
                        true
                    }
                    std::cmp::Ordering::Greater => true,
                },
            };
            if take_delta {
                // A removal hides the tree's entry and yields nothing.
                if let Some((k, Some(v))) = self.df.take() {
                    return Some(Ok((
                        ValueBytes::Borrowed(&k[..]),
                        ValueBytes::Borrowed(&v[..]),
                    )));
                }
            } else if let Some(e) = self.tf.take() {
                return Some(Ok(e));
            }
        }
    }

    pub(crate) fn next_back(&mut self) -> Option<Result<Item<'a>>> {
        loop {
            if self.done {
                return None;
            }
            if self.tb.is_none() {
                match self.tree.next_back() {
                    Some(Ok(e)) => self.tb = Some(e),
                    Some(Err(e)) => {
                        self.done = true;
                        return Some(Err(e));
                    }
                    None => self.tb = self.tf.take(),
                }
            }
            if self.db.is_none() {
                self.db = self.delta.next_back().or_else(|| self.df.take());
            }
            let take_delta = match (&self.tb, &self.db) {
                (None, None) => {
                    self.done = true;
                    return None;
                }
                (Some(_), None) => false,
                (None, Some(_)) => true,
                (Some((tk, _)), Some((dk, _))) => match tk.as_slice().cmp(&dk[..]) {
                    std::cmp::Ordering::Greater => false,
                    std::cmp::Ordering::Equal => {
                        self.tb = None;
                        true
                    }
                    std::cmp::Ordering::Less => true,
                },
            };
            if take_delta {
                // A removal hides the tree's entry and yields nothing.
                if let Some((k, Some(v))) = self.db.take() {
                    return Some(Ok((
                        ValueBytes::Borrowed(&k[..]),
                        ValueBytes::Borrowed(&v[..]),
                    )));
                }
            } else if let Some(e) = self.tb.take() {
                return Some(Ok(e));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u64) -> Vec<u8> {
        let x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        x.to_be_bytes()[..(3 + (i % 6) as usize)].to_vec()
    }

    /// The filter never hides a key: every key put is found, in the delta
    /// and in clones taken along the way (snapshots) while the writer's
    /// filter is shared, then rebuilt larger; absent keys are mostly
    /// answered by the filter alone.
    #[test]
    fn filter_has_no_false_negatives_across_rebuilds_and_snapshots() {
        let mut d = Delta::default();
        assert_eq!(d.get(b"x"), None);
        let mut snaps: Vec<(Delta, u64)> = Vec::new();
        for i in 0..20_000u64 {
            let v = i.to_le_bytes();
            d.put(
                &key(i),
                if i % 7 == 0 { None } else { Some(&v) },
                i % 7 == 0,
            );
            if i.is_power_of_two() || i % 3001 == 0 {
                snaps.push((d.clone(), i));
            }
        }
        for i in 0..20_000u64 {
            let want = (i % 7 != 0).then(|| i.to_le_bytes().to_vec());
            assert_eq!(d.get(&key(i)).map(|e| e.map(<[u8]>::to_vec)), Some(want));
        }
        for (s, upto) in &snaps {
            for i in 0..=*upto {
                assert!(s.get(&key(i)).is_some(), "snapshot at {upto} lost key {i}");
            }
            assert!(s.get(&key(upto + 1)).is_none());
        }
        let f = d.filter.as_ref().unwrap();
        let fp = (1_000_000..1_100_000u64)
            .filter(|&i| f.may_contain(Filter::hash(&(i << 8).to_le_bytes())))
            .count();
        assert!(fp < 2_000, "{fp} false positives in 100,000 absent keys");
        assert_eq!(d.len, 20_000 - 2 * 20_000u64.div_ceil(7) as i64);
    }
}
