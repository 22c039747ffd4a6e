//! The overlay — small non-durable commits held in memory.
//!
//! In a write transaction set to [`Durability::None`](crate::Durability),
//! small inserts and removals go into the memtable (`memtable.rs`, one
//! multi-version B+tree shared by every snapshot) under the transaction's
//! id, seen through a per-table [`Delta`] (the table's number there, and the
//! commit it is read as of), instead of copying tree pages. The commit
//! publishes the transaction's deltas to readers with the commit and writes nothing; readers look in the
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

use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::memtable::{MemRange, Memtable, TableNo, ENTRY_OVERHEAD};
use crate::btree::cursor::RawRange;
use crate::btree::ValueBytes;
use crate::error::Result;
use crate::ids::TxnId;

/// Values longer than this are written to the tree directly (they would go
/// out of line there anyway, and would crowd the overlay's budget).
pub(crate) const MAX_VALUE: usize = 2048;

/// A transaction that has put this many changes into the overlay writes the
/// rest to the trees directly (spilling each table's delta before it writes
/// its tree): the overlay pays off for small commits, while a bulk change is
/// cheaper applied to the tree once than held, looked up and applied later —
/// unless its changes to a table land scattered over a much larger tree
/// (`btree::tree::Scatter`, `Table::goes_to_overlay`): those stay in the
/// overlay, where a spill writes each leaf once for many commits.
pub(crate) const MAX_TXN_CHANGES: usize = 4096;

/// A Bloom filter over a delta's keys, so that a lookup of a key the delta
/// does not hold (most lookups) costs a hash and one word's bit test instead
/// of a search of the map. It is *blocked*: a key's three bits are in one
/// 64-bit word (one cache miss per insert or test, where three bits anywhere
/// cost three). Bits are only ever set, with atomic operations, so the
/// writer adds keys to the filter a published delta shares: a snapshot then
/// sees extra bits (false positives, which only cost a map search), never
/// fewer. It is rebuilt four times larger, for the writer's delta only, when
/// its keys outgrow it.
struct Filter {
    bits: Box<[AtomicU64]>,
    /// Keys it is sized for.
    capacity: usize,
}

/// Filter bits per key at capacity (three bits in one word: about 1% false
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

    /// The word of `h` (from its high bits) and its three bits there (from
    /// three 6-bit fields of the low bits).
    #[inline]
    fn probe(&self, h: u64) -> (usize, u64) {
        let word = ((h >> 32) as usize) & (self.bits.len() - 1);
        let mask = (1u64 << (h & 63)) | (1u64 << ((h >> 6) & 63)) | (1u64 << ((h >> 12) & 63));
        (word, mask)
    }

    /// Starts loading the word of `h`.
    #[inline]
    fn prefetch(&self, h: u64) {
        let (w, _) = self.probe(h);
        if let Some(word) = self.bits.get(w) {
            super::memtable::prefetch(word.as_ptr());
        }
    }

    fn insert(&self, h: u64) {
        let (w, mask) = self.probe(h);
        if let Some(word) = self.bits.get(w) {
            word.fetch_or(mask, Ordering::Relaxed);
        }
    }

    #[inline]
    fn may_contain(&self, h: u64) -> bool {
        let (w, mask) = self.probe(h);
        self.bits
            .get(w)
            .is_none_or(|word| word.load(Ordering::Relaxed) & mask == mask)
    }
}

/// One table's changes in the memtable, as of one commit.
#[derive(Clone, Default)]
pub(crate) struct Delta {
    /// The memtable its entries are in (`None` until the first change).
    mem: Option<Arc<Memtable>>,
    /// The table's number in the memtable (0: none yet; a fresh one after
    /// each spill, so entries already in the tree are not seen again).
    table: TableNo,
    /// The commit this view is as of: reads see entries at or below it, and
    /// the writer's changes are entered under it.
    at: TxnId,
    /// Over the keys of its entries (`None` while it has none).
    filter: Option<Arc<Filter>>,
    /// Changes entered (every version).
    changes: usize,
    /// Entries this delta adds to the tree's count (negative if it removes
    /// more than it adds).
    pub len: i64,
    /// Memory its entries hold, roughly.
    pub bytes: usize,
    /// Entries went here past a transaction's bound on overlay changes
    /// because the table's direct changes came scattered: later
    /// transactions keep adding here (rather than applying the delta to the
    /// tree at their first direct change) until the delta is applied.
    pub scattered: bool,
}

impl Delta {
    pub(crate) fn is_empty(&self) -> bool {
        self.changes == 0
    }

    /// The delta's entry for `key`: `Some(None)` means removed.
    #[inline]
    pub(crate) fn get(&self, key: &[u8]) -> Option<Option<&[u8]>> {
        let f = self.filter.as_ref()?;
        if !f.may_contain(Filter::hash(key)) {
            return None;
        }
        self.mem.as_ref()?.get(self.table, key, self.at)
    }

    /// Whether transaction `txn` entered a change here (every change is
    /// entered under its transaction's id).
    pub(crate) fn written_by(&self, txn: TxnId) -> bool {
        self.at == txn && self.mem.is_some()
    }

    /// Records `key → value` (`None`: removed) in `mem` under commit
    /// `version` (the writer's id; reads of this delta see it from now on);
    /// `existed` says whether the key was present before (in this delta or
    /// the tree below). If the transaction does not commit, its entries are
    /// marked by `Memtable::abort`.
    pub(crate) fn put(
        &mut self,
        mem: &Arc<Memtable>,
        version: TxnId,
        key: &[u8],
        value: Option<&[u8]>,
        existed: bool,
    ) {
        if self.table == 0 || !self.mem.as_ref().is_some_and(|m| Arc::ptr_eq(m, mem)) {
            // A new memtable starts only once the overlay is empty, so a
            // delta that moves to one has no entries to leave behind.
            debug_assert!(self.changes == 0, "a delta with entries changed memtables");
            self.mem = Some(mem.clone());
            self.table = mem.new_table();
        }
        self.at = version;
        self.len += value.is_some() as i64 - existed as i64;
        self.bytes += key.len() + value.map_or(0, <[u8]>::len) + ENTRY_OVERHEAD;
        self.changes += 1;
        // The filter's word for the key is a cache miss in a large delta:
        // it loads while the memtable's descent runs.
        let h = Filter::hash(key);
        let fits = self.filter.as_ref().filter(|f| self.changes <= f.capacity);
        if let Some(f) = fits {
            f.prefetch(h);
        }
        mem.insert(self.table, key, value, version);
        match fits {
            Some(f) => f.insert(h),
            None => {
                // New, or outgrown: a filter for four times the changes.
                let f = Filter::new((self.changes * 4).max(256));
                let mut r = mem.range(self.table, Bound::Unbounded, Bound::Unbounded, version);
                while let Some((k, _)) = r.next() {
                    f.insert(Filter::hash(k));
                }
                self.filter = Some(Arc::new(f));
            }
        }
    }

    /// Forgets the entries (after they were applied to the tree): the next
    /// change takes a new table number.
    pub(crate) fn reset(&mut self) {
        *self = Delta {
            mem: self.mem.take(),
            at: self.at,
            ..Delta::default()
        };
    }

    /// The entries in key order as of this delta's commit (spilling).
    pub(crate) fn entries(&self) -> Entries<'_> {
        Entries(self.range(Bound::Unbounded, Bound::Unbounded))
    }

    fn range<'a>(&'a self, start: Bound<&[u8]>, end: Bound<&[u8]>) -> Option<MemRange<'a>> {
        let mem = self.mem.as_deref()?;
        (self.table != 0).then(|| mem.range(self.table, start, end, self.at))
    }
}

/// A delta's entries in key order: (key, value or `None` for a removal).
pub(crate) struct Entries<'a>(Option<MemRange<'a>>);

impl<'a> Iterator for Entries<'a> {
    type Item = (&'a [u8], Option<&'a [u8]>);
    fn next(&mut self) -> Option<Self::Item> {
        self.0.as_mut()?.next()
    }
}

/// Deltas by table name, in name order: a sorted vector. Every small
/// commit copies it (a write transaction starts from the published one),
/// takes out the deltas of the tables it opens and puts them back changed,
/// and a database has few tables with changes in memory (seven for a
/// collection with six indexes): one allocation and a binary search, where
/// a `BTreeMap` cost a node per copy and a node edit per table taken out
/// and put back (`BTreeMap::insert` alone was 4% of a document delete's
/// instructions).
#[derive(Clone, Default)]
pub(crate) struct TableDeltas(Vec<(Arc<str>, Delta)>);

impl TableDeltas {
    fn find(&self, name: &str) -> std::result::Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| (**k).cmp(name))
    }

    pub(crate) fn get(&self, name: &str) -> Option<&Delta> {
        self.find(name)
            .ok()
            .and_then(|i| self.0.get(i))
            .map(|(_, d)| d)
    }

    pub(crate) fn remove(&mut self, name: &str) -> Option<Delta> {
        let i = self.find(name).ok()?;
        Some(self.0.remove(i).1)
    }

    /// Puts `delta` under `name`; returns the one it replaces.
    pub(crate) fn insert(&mut self, name: Arc<str>, delta: Delta) -> Option<Delta> {
        match self.find(&name) {
            Ok(i) => self
                .0
                .get_mut(i)
                .map(|e| std::mem::replace(&mut e.1, delta)),
            Err(i) => {
                self.0.insert(i, (name, delta));
                None
            }
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(crate) fn keys(&self) -> impl Iterator<Item = &Arc<str>> {
        self.0.iter().map(|(k, _)| k)
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = &Delta> {
        self.0.iter().map(|(_, d)| d)
    }
}

impl FromIterator<(Arc<str>, Delta)> for TableDeltas {
    /// (A later delta for a name replaces an earlier one, as a map's would.)
    fn from_iter<I: IntoIterator<Item = (Arc<str>, Delta)>>(items: I) -> Self {
        let mut t = TableDeltas::default();
        for (name, delta) in items {
            t.insert(name, delta);
        }
        t
    }
}

impl<'a> IntoIterator for &'a TableDeltas {
    type Item = (&'a Arc<str>, &'a Delta);
    type IntoIter = std::iter::Map<
        std::slice::Iter<'a, (Arc<str>, Delta)>,
        fn(&'a (Arc<str>, Delta)) -> (&'a Arc<str>, &'a Delta),
    >;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter().map(|(k, d)| (k, d))
    }
}

/// Every table's delta as of one commit (only tables with changes), over
/// one memtable.
#[derive(Clone, Default)]
pub(crate) struct Overlay {
    /// Keyed by shared names: a transaction's copy of the map clones
    /// reference counts, not strings.
    pub tables: TableDeltas,
    /// The memtable every delta's entries are in; a fresh one each time
    /// the overlay is emptied (the old one lives on with its readers).
    pub mem: Arc<Memtable>,
}

impl Overlay {
    /// Moves the deltas out into an overlay over the same memtable (a commit
    /// publishing them); `self` keeps the memtable and no delta. Unlike
    /// `std::mem::take`, it allocates no empty memtable.
    pub(crate) fn take_tables(&mut self) -> Overlay {
        Overlay {
            tables: std::mem::take(&mut self.tables),
            mem: self.mem.clone(),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.tables.is_empty()
    }

    /// Memory the memtable holds (every version, and entries already
    /// spilled while other tables kept theirs).
    pub(crate) fn bytes(&self) -> usize {
        self.mem.bytes()
    }

    /// Entries held (every version of every changed key).
    pub(crate) fn entries(&self) -> usize {
        self.tables.values().map(|d| d.changes).sum()
    }
}

type Item<'a> = (ValueBytes<'a>, ValueBytes<'a>);
type DeltaItem<'a> = (&'a [u8], Option<&'a [u8]>);

/// A double-ended merge of a tree range and a delta range: the delta's
/// entries replace the tree's, its removals hide them.
pub(crate) struct Merged<'a> {
    tree: RawRange<'a>,
    delta: Option<MemRange<'a>>,
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
        let delta = if empty { None } else { delta.range(start, end) };
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
                self.df = self
                    .delta
                    .as_mut()
                    .and_then(MemRange::next)
                    .or_else(|| self.db.take());
            }
            let take_delta = match (&self.tf, &self.df) {
                (None, None) => {
                    self.done = true;
                    return None;
                }
                (Some(_), None) => false,
                (None, Some(_)) => true,
                (Some((tk, _)), Some((dk, _))) => match tk.as_slice().cmp(dk) {
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
                    return Some(Ok((ValueBytes::Borrowed(k), ValueBytes::Borrowed(v))));
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
                self.db = self
                    .delta
                    .as_mut()
                    .and_then(MemRange::next_back)
                    .or_else(|| self.df.take());
            }
            let take_delta = match (&self.tb, &self.db) {
                (None, None) => {
                    self.done = true;
                    return None;
                }
                (Some(_), None) => false,
                (None, Some(_)) => true,
                (Some((tk, _)), Some((dk, _))) => match tk.as_slice().cmp(dk) {
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
                    return Some(Ok((ValueBytes::Borrowed(k), ValueBytes::Borrowed(v))));
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
    use proptest::prelude::*;

    proptest! {
        /// The table map answers as a `BTreeMap` does, over a run of
        /// puts, removals and lookups of a few names sharing prefixes.
        #[test]
        fn table_deltas_match_a_map(ops in proptest::collection::vec((0u8..3, 0usize..6), 0..60)) {
            let names = ["$docs.1", "$idx.1.2", "$idx.1.10", "a", "", "$idx.1"];
            let mut t = TableDeltas::default();
            let mut m: std::collections::BTreeMap<Arc<str>, usize> = Default::default();
            for (step, (op, n)) in ops.into_iter().enumerate() {
                let name: Arc<str> = Arc::from(names[n]);
                let delta = Delta { changes: step, ..Delta::default() };
                match op {
                    0 => {
                        let old = t.insert(name.clone(), delta).map(|d| d.changes);
                        prop_assert_eq!(old, m.insert(name, step));
                    }
                    1 => prop_assert_eq!(t.remove(&name).map(|d| d.changes), m.remove(&name)),
                    _ => prop_assert_eq!(t.get(&name).map(|d| d.changes), m.get(&name).copied()),
                }
                let keys: Vec<&Arc<str>> = t.keys().collect();
                prop_assert_eq!(keys, m.keys().collect::<Vec<_>>());
                let values: Vec<usize> = t.values().map(|d| d.changes).collect();
                prop_assert_eq!(values, m.values().copied().collect::<Vec<_>>());
                prop_assert_eq!(t.is_empty(), m.is_empty());
            }
            let all: TableDeltas = m.iter().map(|(k, &c)| (k.clone(), Delta { changes: c, ..Delta::default() })).collect();
            let pairs: Vec<(String, usize)> = (&all).into_iter().map(|(k, d)| (k.to_string(), d.changes)).collect();
            prop_assert_eq!(pairs, m.iter().map(|(k, &c)| (k.to_string(), c)).collect::<Vec<_>>());
        }
    }

    fn key(i: u64) -> Vec<u8> {
        let x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        x.to_be_bytes()[..(3 + (i % 6) as usize)].to_vec()
    }

    /// The filter never hides a key: every key put is found, in the delta
    /// and in clones taken along the way (snapshots) while the writer's
    /// filter is shared, then rebuilt larger; a snapshot does not see later
    /// changes; absent keys are mostly answered by the filter alone.
    #[test]
    fn filter_has_no_false_negatives_across_rebuilds_and_snapshots() {
        let mem = Arc::new(Memtable::default());
        let mut d = Delta::default();
        assert_eq!(d.get(b"x"), None);
        let mut snaps: Vec<(Delta, u64)> = Vec::new();
        for i in 0..20_000u64 {
            let v = i.to_le_bytes();
            // Each change is its own commit (snapshots see the ones before).
            d.put(
                &mem,
                TxnId(i + 1),
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
