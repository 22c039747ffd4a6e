//! Cursors: query results streamed from one snapshot in batches, so large
//! results need not fit in memory. A cursor owns what it reads (a
//! [`ReadTransaction`], a shared or borrowed one, or, for the queries of a
//! write transaction, a borrowed [`WriteTransaction`](crate::WriteTransaction):
//! any [`Snapshot`]) and re-seeks after the last key it delivered for each
//! batch (no borrowed iterator is kept between batches, so no table stays
//! open between them).
use std::collections::VecDeque;
use std::marker::PhantomData;
use std::ops::Bound;

use serde::de::DeserializeOwned;

use super::codec;
use super::cover;
use super::error::DocResult;
use super::keys::{self, SortOrder};
use super::path::FieldPath;
use super::planner::Snapshot;
use super::sort::SortSpec;
use crate::seam::SeamTable;
use crate::txn::ReadTransaction;

/// Entries read per batch.
const BATCH: usize = 256;

/// A range of table keys: lower and upper bounds.
pub(crate) type KeyBounds = (Bound<Vec<u8>>, Bound<Vec<u8>>);

/// Where a cursor's documents come from.
pub(crate) enum Source {
    /// Every document, in `_id` order.
    Scan,
    /// The documents whose `_id` keys lie within byte bounds, in `_id`
    /// order (or reversed).
    Keys {
        lo: Bound<Vec<u8>>,
        hi: Bound<Vec<u8>>,
        reverse: bool,
    },
    /// An index table's entries within byte bounds, in key order (or
    /// reversed); each entry ends with the document's `_id` key, which is
    /// `id_len(entry)` bytes long.
    Index {
        table: String,
        lo: Bound<Vec<u8>>,
        hi: Bound<Vec<u8>>,
        reverse: bool,
        /// `Some` for a covered query: each entry (its key and value)
        /// stands for the document ([`Cursor::covered_docs`]); the index's
        /// paths.
        covered: Option<CoverPaths>,
    },
    /// A covered query's scan of an index table over several ranges (an
    /// `$in`, `$ne: null`), one range after the other, each in key order;
    /// each entry's value stands for the document (an empty one makes the
    /// document be read); a document found in two ranges is delivered
    /// once.
    CoveredRanges {
        table: String,
        ranges: VecDeque<KeyBounds>,
        /// The index's paths.
        paths: CoverPaths,
    },
    /// These `_id` keys, in this order (from index intersection, union or a
    /// sort done in memory).
    Ids(VecDeque<Vec<u8>>),
    /// Fully materialized documents (a sort done in memory).
    Docs(VecDeque<Vec<u8>>),
    /// Several parts read one after the other, each in its key order, a
    /// document found by two parts delivered once (an `$or` whose branches
    /// use indexes, an `$in` over an index, when no sort order is kept):
    /// results stream from the first part's first entries, as MongoDB's
    /// `OR` stage streams its children, instead of after every part was
    /// read.
    Parts(VecDeque<Part>),
    /// An index table's ranges, each a point prefix (values of an `$in`
    /// on leading fields) whose entries are in the sort's order, merged by
    /// the key bytes after each range's prefix (MongoDB's `SORT_MERGE`):
    /// the index order of the fields the sort names, with skip + limit
    /// read from each range at most.
    Merge {
        table: String,
        parts: Vec<MergePart>,
        reverse: bool,
    },
}

/// One range of a [`Source::Merge`]: its bounds, the length of the prefix
/// its keys share, the entries read ahead and where to read on.
pub(crate) struct MergePart {
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    prefix: usize,
    ahead: VecDeque<Vec<u8>>,
    resume: Option<Vec<u8>>,
    done: bool,
}

impl MergePart {
    pub(crate) fn new(lo: Bound<Vec<u8>>, hi: Bound<Vec<u8>>, prefix: usize) -> MergePart {
        MergePart {
            lo,
            hi,
            prefix,
            ahead: VecDeque::new(),
            resume: None,
            done: false,
        }
    }

    /// The front entry's key after the prefix.
    fn front(&self) -> Option<&[u8]> {
        self.ahead
            .front()
            .map(|k| k.get(self.prefix..).unwrap_or(&[]))
    }
}

/// One part of a [`Source::Parts`].
pub(crate) enum Part {
    /// An index table's entries within bounds, in key order, with the
    /// orders of the index's components (to find each entry's `_id`).
    Index {
        table: String,
        lo: Bound<Vec<u8>>,
        hi: Bound<Vec<u8>>,
        orders: Vec<SortOrder>,
    },
    /// The documents whose `_id` keys lie within bounds.
    Keys {
        lo: Bound<Vec<u8>>,
        hi: Bound<Vec<u8>>,
    },
    /// These `_id` keys (a branch planned as a whole: an intersection).
    Ids(VecDeque<Vec<u8>>),
}

/// The paths of the index a covered query reads (to rebuild documents from
/// its entries' keys and shape values).
pub(crate) type CoverPaths = std::sync::Arc<[FieldPath]>;

/// Decides whether a document (its encoded bytes) is delivered.
pub(crate) type Predicate = Box<dyn Fn(&[u8]) -> DocResult<bool> + Send>;
/// Turns a document's bytes into the bytes delivered (a projection).
pub(crate) type Mapper = Box<dyn Fn(&[u8]) -> DocResult<Vec<u8>> + Send>;

/// A stream of query results read from snapshot `S`; each item is a
/// decoded document.
pub struct Cursor<T, S = ReadTransaction> {
    txn: S,
    data_table: Option<String>,
    source: Source,
    /// The last key read from a scanned table (exclusive resume point).
    resume: Option<Vec<u8>>,
    exhausted: bool,
    buffer: VecDeque<Vec<u8>>,
    predicate: Option<Predicate>,
    mapper: Option<Mapper>,
    skip: u64,
    limit: Option<u64>,
    /// Table entries (index entries or documents) read so far.
    pub(crate) examined: u64,
    /// Index entries read so far (and `_id` keys read to plan).
    pub(crate) keys_examined: u64,
    /// Documents read so far.
    pub(crate) docs_examined: u64,
    /// Entries to read in the next batch: at first what skip + limit need
    /// (a limited query over an ordered source reads no more than that
    /// when every entry matches), doubling per batch up to [`BATCH`].
    batch: usize,
    /// `_id`s already delivered by an index source (a multikey index has
    /// several entries per document).
    seen: std::collections::HashSet<Vec<u8>>,
    /// The sort an index scan gives (set when the plan takes its order
    /// from the index): documents whose sort values the index holds cut
    /// are put in order here ([`SortSpec::cut_run`]).
    resort: Option<SortSpec>,
    /// The run of such documents read so far (their whole sort keys), and
    /// its run key.
    run: Vec<(Vec<u8>, Vec<u8>)>,
    run_key: Option<Vec<u8>>,
    /// Whether every index entry of the batch being admitted holds its
    /// values whole (`keys::is_exact`): its documents are then delivered
    /// as they come, without looking for cut sort values.
    exact_batch: bool,
    _t: PhantomData<fn() -> T>,
}

impl<T, S> std::fmt::Debug for Cursor<T, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cursor")
            .field("examined", &self.examined)
            .finish()
    }
}

/// A bound over owned bytes as one over a slice.
pub(crate) fn slice_bound(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(v) => Bound::Included(v.as_slice()),
        Bound::Excluded(v) => Bound::Excluded(v.as_slice()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// `it` forward, or backward with `reverse`.
fn directed<'a, I: DoubleEndedIterator + 'a>(
    it: I,
    reverse: bool,
) -> Box<dyn Iterator<Item = I::Item> + 'a> {
    if reverse {
        Box::new(it.rev())
    } else {
        Box::new(it)
    }
}

/// The bounds `lo..hi` after the resume key `resume` (exclusive), read
/// forward or in `reverse`.
fn resumed_after(
    lo: &Bound<Vec<u8>>,
    hi: &Bound<Vec<u8>>,
    resume: Option<&Vec<u8>>,
    reverse: bool,
) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    match resume {
        Some(k) if reverse => (lo.clone(), Bound::Excluded(k.clone())),
        Some(k) => (Bound::Excluded(k.clone()), hi.clone()),
        None => (lo.clone(), hi.clone()),
    }
}

/// The `_id` key at the end of an index entry: the entry's value
/// components (in `orders`) are self-delimiting (a cut long value has a
/// fixed length), so the `_id` is what is left after them.
pub(crate) fn split_id<'a>(entry: &'a [u8], orders: &[SortOrder]) -> DocResult<&'a [u8]> {
    let mut at = 0;
    for o in orders {
        let rest = entry.get(at..).unwrap_or(&[]);
        at += keys::component_len(rest, *o)?.0;
    }
    Ok(entry.get(at..).unwrap_or(&[]))
}

impl<T, S: Snapshot> Cursor<T, S> {
    pub(crate) fn new(txn: S, data_table: Option<String>, source: Source) -> Self {
        Cursor {
            txn,
            data_table,
            source,
            resume: None,
            exhausted: false,
            buffer: VecDeque::new(),
            predicate: None,
            mapper: None,
            skip: 0,
            limit: None,
            examined: 0,
            keys_examined: 0,
            docs_examined: 0,
            batch: 0,
            seen: std::collections::HashSet::new(),
            resort: None,
            run: Vec::new(),
            run_key: None,
            exact_batch: false,
            _t: PhantomData,
        }
    }

    /// Makes the cursor deliver its documents in `spec`'s order where the
    /// source's order (an index scan's) gives it but for cut long values
    /// (see [`SortSpec::cut_run`]).
    pub(crate) fn with_resort(mut self, spec: Option<SortSpec>) -> Self {
        self.resort = spec;
        self
    }

    /// Queues a matching document for delivery, holding back a run of
    /// documents an index may have ordered by a cut value's hash.
    fn admit(&mut self, d: Vec<u8>) -> DocResult<()> {
        let Some(spec) = &self.resort else {
            self.buffer.push_back(d);
            return Ok(());
        };
        if self.exact_batch {
            if !self.run.is_empty() {
                self.flush_run();
            }
            self.buffer.push_back(d);
            return Ok(());
        }
        match spec.cut_run(codec::value_ref(&d)?)? {
            Some((run_key, whole)) => {
                if self.run_key.as_ref() != Some(&run_key) {
                    self.flush_run();
                    self.run_key = Some(run_key);
                }
                self.run.push((whole, d));
            }
            None => {
                self.flush_run();
                self.buffer.push_back(d);
            }
        }
        Ok(())
    }

    /// Delivers the run held back, in sort order (stable: documents with
    /// equal sort values keep the index's order).
    fn flush_run(&mut self) {
        let mut run = std::mem::take(&mut self.run);
        run.sort_by(|a, b| a.0.cmp(&b.0));
        self.buffer.extend(run.into_iter().map(|(_, d)| d));
        self.run_key = None;
    }

    /// Gives back the snapshot (to build another cursor on it).
    pub(crate) fn into_txn(self) -> S {
        self.txn
    }

    pub(crate) fn with_predicate(mut self, p: Option<Predicate>) -> Self {
        self.predicate = p;
        self
    }

    pub(crate) fn with_mapper(mut self, m: Option<Mapper>) -> Self {
        self.mapper = m;
        self
    }

    pub(crate) fn with_window(mut self, skip: u64, limit: Option<u64>) -> Self {
        self.skip = skip;
        self.limit = limit;
        self
    }

    /// How many table entries (index entries and documents) the cursor has
    /// read so far.
    pub fn examined(&self) -> u64 {
        self.examined
    }

    /// Index entries read so far (as MongoDB's `totalKeysExamined`).
    pub fn keys_examined(&self) -> u64 {
        self.keys_examined
    }

    /// Documents read so far (as MongoDB's `totalDocsExamined`).
    pub fn docs_examined(&self) -> u64 {
        self.docs_examined
    }

    /// Covered entries (index key, value) of an index over `paths` (their
    /// orders `orders`) as documents: a shape value's document rebuilt
    /// from the key (FORMAT.md, "Shape values in index entries"), a
    /// format-6 value as it is (the covered fields), or, for an empty
    /// value or a key holding a cut long value, the document read from the
    /// data table.
    fn covered_docs(
        &mut self,
        entries: Vec<(Vec<u8>, Vec<u8>)>,
        orders: &[SortOrder],
        paths: &[FieldPath],
        got: &mut Vec<Vec<u8>>,
    ) -> DocResult<()> {
        for (key, v) in entries {
            match v.first() {
                None => {}
                Some(&cover::SHAPE_TAG) => {
                    if let Some(doc) = cover::rebuild(&key, orders, paths, &v)? {
                        got.push(doc);
                        continue;
                    }
                }
                Some(_) => {
                    got.push(v);
                    continue;
                }
            }
            let idk = split_id(&key, orders)?.to_vec();
            self.fetch_docs(vec![idk], got)?;
        }
        Ok(())
    }

    /// The documents with these `_id` keys (those that exist), read with
    /// the data table open once.
    fn fetch_docs(&mut self, ids: Vec<Vec<u8>>, got: &mut Vec<Vec<u8>>) -> DocResult<()> {
        let Some(data) = &self.data_table else {
            return Ok(());
        };
        if ids.is_empty() {
            return Ok(());
        }
        let Some(t) = self.txn.table(data)? else {
            return Ok(());
        };
        for idk in ids {
            self.examined += 1;
            self.docs_examined += 1;
            if let Some(g) = t.get(idk.as_slice())? {
                got.push(g.value().to_vec());
            }
        }
        Ok(())
    }

    /// The bounds of the next batch of a range source: `lo..hi` after the
    /// resume key.
    fn resumed(
        &self,
        lo: &Bound<Vec<u8>>,
        hi: &Bound<Vec<u8>>,
        reverse: bool,
    ) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
        resumed_after(lo, hi, self.resume.as_ref(), reverse)
    }

    /// Reads the next batch of candidate documents into `buffer`.
    fn fill(&mut self, index_orders: &[SortOrder]) -> DocResult<()> {
        if self.exhausted {
            return Ok(());
        }
        let mut got: Vec<Vec<u8>> = Vec::new();
        let batch = match (self.batch, self.limit) {
            (0, Some(l)) => usize::try_from(l.saturating_add(self.skip))
                .unwrap_or(BATCH)
                .clamp(1, BATCH),
            (0, None) => BATCH,
            (b, _) => (b * 2).min(BATCH),
        };
        self.batch = batch;
        self.exact_batch = false;
        match &mut self.source {
            Source::Scan | Source::Keys { .. } => {
                let (lo, hi, reverse) = match &self.source {
                    Source::Keys { lo, hi, reverse } => (lo.clone(), hi.clone(), *reverse),
                    _ => (Bound::Unbounded, Bound::Unbounded, false),
                };
                let (l, h) = self.resumed(&lo, &hi, reverse);
                let table = match &self.data_table {
                    Some(data) => self.txn.table(data)?,
                    None => None,
                };
                let Some(t) = table else {
                    self.exhausted = true;
                    return Ok(());
                };
                let range = t.range::<&[u8]>((slice_bound(&l), slice_bound(&h)))?;
                let iter = directed(range, reverse);
                for item in iter.take(batch) {
                    let (k, v) = item?;
                    self.resume = Some(k.value().to_vec());
                    got.push(v.value().to_vec());
                }
                self.examined += got.len() as u64;
                self.docs_examined += got.len() as u64;
                if got.len() < batch {
                    self.exhausted = true;
                }
            }
            Source::Index {
                table,
                lo,
                hi,
                reverse,
                covered,
            } => {
                let reverse = *reverse;
                let covered = covered.clone();
                let (l, h) = (lo.clone(), hi.clone());
                let table = table.clone();
                let (l, h) = self.resumed(&l, &h, reverse);
                let mut ids = Vec::new();
                {
                    let Some(t) = self.txn.table(&table)? else {
                        self.exhausted = true;
                        return Ok(());
                    };
                    let range = t.range::<&[u8]>((slice_bound(&l), slice_bound(&h)))?;
                    let iter = directed(range, reverse);
                    let mut read = 0;
                    let mut exact = self.resort.is_some();
                    for item in iter.take(batch) {
                        read += 1;
                        self.examined += 1;
                        self.keys_examined += 1;
                        let (k, v) = item?;
                        let k = k.value();
                        self.resume = Some(k.to_vec());
                        let idk = split_id(k, index_orders)?;
                        if exact {
                            let values = k.get(..k.len() - idk.len()).unwrap_or(&[]);
                            exact = keys::is_exact(values);
                        }
                        if self.seen.insert(idk.to_vec()) {
                            if covered.is_some() {
                                ids.push((k.to_vec(), v.value().to_vec()));
                            } else {
                                ids.push((idk.to_vec(), Vec::new()));
                            }
                        }
                    }
                    if read < batch {
                        self.exhausted = true;
                    }
                    self.exact_batch = exact;
                }
                if let Some(paths) = &covered {
                    self.covered_docs(ids, index_orders, paths, &mut got)?;
                } else {
                    let ids = ids.into_iter().map(|(k, _)| k).collect();
                    self.fetch_docs(ids, &mut got)?;
                }
            }
            Source::Ids(ids) => {
                let ids_now: Vec<Vec<u8>> = (0..batch).map_while(|_| ids.pop_front()).collect();
                if ids.is_empty() {
                    self.exhausted = true;
                }
                self.fetch_docs(ids_now, &mut got)?;
            }
            Source::CoveredRanges {
                table,
                ranges,
                paths,
            } => {
                let Some((lo, hi)) = ranges.front().cloned() else {
                    self.exhausted = true;
                    return Ok(());
                };
                let table = table.clone();
                let paths = paths.clone();
                let (l, h) = self.resumed(&lo, &hi, false);
                let mut entries = Vec::new();
                let mut read = 0;
                {
                    let Some(t) = self.txn.table(&table)? else {
                        self.exhausted = true;
                        return Ok(());
                    };
                    for item in t
                        .range::<&[u8]>((slice_bound(&l), slice_bound(&h)))?
                        .take(batch)
                    {
                        read += 1;
                        self.examined += 1;
                        self.keys_examined += 1;
                        let (k, v) = item?;
                        let k = k.value();
                        self.resume = Some(k.to_vec());
                        let idk = split_id(k, index_orders)?;
                        if self.seen.insert(idk.to_vec()) {
                            entries.push((k.to_vec(), v.value().to_vec()));
                        }
                    }
                }
                if read < batch {
                    // This range is done: the next starts from its own
                    // lower bound.
                    if let Source::CoveredRanges { ranges, .. } = &mut self.source {
                        ranges.pop_front();
                        if ranges.is_empty() {
                            self.exhausted = true;
                        }
                    }
                    self.resume = None;
                }
                self.covered_docs(entries, index_orders, &paths, &mut got)?;
            }
            Source::Docs(docs) => {
                got.extend(docs.drain(..));
                self.exhausted = true;
            }
            Source::Parts(parts) => match parts.pop_front() {
                Some(part) => self.fill_part(part, batch, &mut got)?,
                None => self.exhausted = true,
            },
            Source::Merge { .. } => self.fill_merge(batch, index_orders, &mut got)?,
        }
        for d in got {
            if let Some(p) = &self.predicate {
                if !p(&d)? {
                    continue;
                }
            }
            self.admit(d)?;
        }
        if self.exhausted {
            self.flush_run();
        }
        Ok(())
    }

    /// Reads up to `batch` entries of `part` (the front of a
    /// [`Source::Parts`], taken off it), the documents not delivered yet
    /// into `got`; puts the part back unless it is done, and the source is
    /// exhausted after its last part.
    fn fill_part(&mut self, mut part: Part, batch: usize, got: &mut Vec<Vec<u8>>) -> DocResult<()> {
        let done = match &mut part {
            Part::Ids(ids) => {
                let mut now = Vec::new();
                while now.len() < batch {
                    let Some(id) = ids.pop_front() else {
                        break;
                    };
                    if self.seen.insert(id.clone()) {
                        now.push(id);
                    }
                }
                self.fetch_docs(now, got)?;
                ids.is_empty()
            }
            Part::Keys { lo, hi } => {
                let (l, h) = self.resumed(lo, hi, false);
                let mut read = 0;
                if let Some(t) = match &self.data_table {
                    Some(data) => self.txn.table(data)?,
                    None => None,
                } {
                    for item in t
                        .range::<&[u8]>((slice_bound(&l), slice_bound(&h)))?
                        .take(batch)
                    {
                        read += 1;
                        let (k, v) = item?;
                        let k = k.value();
                        self.resume = Some(k.to_vec());
                        if self.seen.insert(k.to_vec()) {
                            got.push(v.value().to_vec());
                        }
                    }
                }
                self.examined += read as u64;
                self.docs_examined += read as u64;
                read < batch
            }
            Part::Index {
                table,
                lo,
                hi,
                orders,
            } => {
                let (l, h) = self.resumed(lo, hi, false);
                let mut ids = Vec::new();
                let mut read = 0;
                if let Some(t) = self.txn.table(table)? {
                    for item in t
                        .range::<&[u8]>((slice_bound(&l), slice_bound(&h)))?
                        .take(batch)
                    {
                        read += 1;
                        let (k, _) = item?;
                        let k = k.value();
                        self.resume = Some(k.to_vec());
                        let idk = split_id(k, orders)?;
                        if self.seen.insert(idk.to_vec()) {
                            ids.push(idk.to_vec());
                        }
                    }
                }
                self.examined += read as u64;
                self.keys_examined += read as u64;
                self.fetch_docs(ids, got)?;
                read < batch
            }
        };
        if let Source::Parts(parts) = &mut self.source {
            if done {
                // The next part starts from its own lower bound.
                self.resume = None;
                self.exhausted = parts.is_empty();
            } else {
                parts.push_front(part);
            }
        }
        Ok(())
    }

    /// Delivers the next `batch` entries of a [`Source::Merge`] in merged
    /// order (their documents into `got`), reading each range ahead as
    /// its entries run out.
    fn fill_merge(
        &mut self,
        batch: usize,
        index_orders: &[SortOrder],
        got: &mut Vec<Vec<u8>>,
    ) -> DocResult<()> {
        let (table, mut parts, reverse) = match &mut self.source {
            Source::Merge {
                table,
                parts,
                reverse,
            } => (table.clone(), std::mem::take(parts), *reverse),
            _ => return Ok(()),
        };
        let mut ids = Vec::new();
        let mut exact = self.resort.is_some();
        let result = (|| -> DocResult<()> {
            while ids.len() < batch {
                for part in parts.iter_mut().filter(|p| p.ahead.is_empty() && !p.done) {
                    self.read_ahead(&table, part, reverse, batch)?;
                }
                // The range whose next key comes first in the sort's order.
                let mut best: Option<usize> = None;
                for (i, part) in parts.iter().enumerate() {
                    let Some(k) = part.front() else {
                        continue;
                    };
                    let better = match best.and_then(|b| parts[b].front()) {
                        None => true,
                        Some(b) if reverse => k > b,
                        Some(b) => k < b,
                    };
                    if better {
                        best = Some(i);
                    }
                }
                let Some(key) = best.and_then(|b| parts[b].ahead.pop_front()) else {
                    self.exhausted = true;
                    break;
                };
                let idk = split_id(&key, index_orders)?;
                if exact {
                    exact = keys::is_exact(key.get(..key.len() - idk.len()).unwrap_or(&[]));
                }
                if self.seen.insert(idk.to_vec()) {
                    ids.push(idk.to_vec());
                }
            }
            Ok(())
        })();
        if let Source::Merge { parts: p, .. } = &mut self.source {
            *p = parts;
        }
        result?;
        self.exact_batch = exact;
        self.fetch_docs(ids, got)
    }

    /// Reads up to `n` entries of a merge's range after where it stopped.
    fn read_ahead(
        &mut self,
        table: &str,
        part: &mut MergePart,
        reverse: bool,
        n: usize,
    ) -> DocResult<()> {
        let (l, h) = resumed_after(&part.lo, &part.hi, part.resume.as_ref(), reverse);
        let Some(t) = self.txn.table(table)? else {
            part.done = true;
            return Ok(());
        };
        let range = t.range::<&[u8]>((slice_bound(&l), slice_bound(&h)))?;
        let iter = directed(range, reverse);
        let mut read = 0;
        for item in iter.take(n) {
            let (k, _) = item?;
            part.ahead.push_back(k.value().to_vec());
            read += 1;
        }
        self.examined += read as u64;
        self.keys_examined += read as u64;
        part.resume = part.ahead.back().cloned();
        part.done = read < n;
        Ok(())
    }

    /// The next result's bytes (after skip, within limit), projected.
    pub(crate) fn next_bytes(&mut self, index_orders: &[SortOrder]) -> DocResult<Option<Vec<u8>>> {
        loop {
            if self.limit == Some(0) {
                return Ok(None);
            }
            if let Some(d) = self.buffer.pop_front() {
                if self.skip > 0 {
                    self.skip -= 1;
                    continue;
                }
                if let Some(l) = &mut self.limit {
                    *l -= 1;
                }
                return Ok(Some(match &self.mapper {
                    Some(m) => m(&d)?,
                    None => d,
                }));
            }
            if self.exhausted {
                return Ok(None);
            }
            self.fill(index_orders)?;
        }
    }
}

/// Query results: a cursor over one snapshot `S` (by default a
/// [`ReadTransaction`] of its own; an `Arc<ReadTransaction>` or a
/// `&ReadTransaction` for the queries of a
/// [`SnapshotCollection`](super::SnapshotCollection)), decoding each
/// document as `T` (plus the orders of its index components, to find each
/// entry's `_id`).
pub struct Results<T, S = ReadTransaction> {
    pub(crate) cursor: Cursor<T, S>,
    pub(crate) index_orders: Vec<SortOrder>,
}

impl<T, S> std::fmt::Debug for Results<T, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.cursor.fmt(f)
    }
}

impl<T, S: Snapshot> Results<T, S> {
    /// Table entries (index entries and documents) read so far.
    pub fn examined(&self) -> u64 {
        self.cursor.examined()
    }

    /// Index entries read so far.
    pub fn keys_examined(&self) -> u64 {
        self.cursor.keys_examined()
    }

    /// Documents read so far.
    pub fn docs_examined(&self) -> u64 {
        self.cursor.docs_examined()
    }

    /// The next result as encoded bytes.
    pub fn next_raw(&mut self) -> DocResult<Option<Vec<u8>>> {
        self.cursor.next_bytes(&self.index_orders)
    }
}

impl<T: DeserializeOwned, S: Snapshot> Iterator for Results<T, S> {
    type Item = DocResult<T>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.next_raw() {
            Ok(Some(b)) => Some(codec::from_slice(&b)),
            Ok(None) => None,
            Err(e) => Some(Err(e)),
        }
    }
}
