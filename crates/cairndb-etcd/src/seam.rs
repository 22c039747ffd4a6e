//! The storage seam ([`cairndb::seam`]) on a cluster: what lets the event
//! layer's code — the same as the embedded engine runs — read and write
//! through this crate's transactions.
//!
//! - A table of a layer is the table of the same name (its `$` name
//!   allowed only through the layer's internal definition), created with
//!   the key and value type names of its definition, as `cairn migrate`
//!   writes them: a database migrated from a file and one written here
//!   hold the same keys.
//! - Keys are the embedded engine's order-preserving encodings, so etcd's
//!   byte order is the table's key order; values are stored as they are.
//!   What is read is copied out of the answers ([`AccessGuard::from_owned`],
//!   which checks the bytes decode as the table's type).
//! - A snapshot's ranges are read lazily, a page at a time from either end
//!   ([`PagedRange`]); a write transaction's ranges merge its writes over
//!   the cluster's entries and record the table's version, its `len` and
//!   `last` too (so a key appended after the last one by another commit
//!   is a conflict: the event log's dense positions rest on this).
//! - This crate's errors cross the layers as [`CoreError::Backend`] and
//!   come back as themselves (`impl From<CoreError> for Error`).

use std::borrow::Borrow;
use std::collections::VecDeque;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};

use cairndb::seam::{SeamEntry, SeamRead, SeamTable, SeamTableMut, SeamWrite};
use cairndb::{AccessGuard, CoreError, Key, TableDefinition, TypeMismatch, Value};

use crate::db::{EtcdDatabase, Revision, RANGE_PAGE_KEYS};
use crate::txn::{Entry, ReadOnlyTable, ReadTransaction, Table, WriteTransaction};

type CoreResult<T> = std::result::Result<T, CoreError>;

fn core(e: crate::Error) -> CoreError {
    e.into_core()
}

fn encode_bound<'k, K: Key + 'static, KR: Borrow<K::SelfType<'k>>>(
    b: Bound<&KR>,
) -> Bound<Vec<u8>> {
    match b {
        Bound::Included(k) => Bound::Included(K::as_bytes(k.borrow()).as_ref().to_vec()),
        Bound::Excluded(k) => Bound::Excluded(K::as_bytes(k.borrow()).as_ref().to_vec()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

fn as_ref_bound(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(k) => Bound::Included(k),
        Bound::Excluded(k) => Bound::Excluded(k),
        Bound::Unbounded => Bound::Unbounded,
    }
}

fn encode_range<'k, K: Key + 'static, KR: Borrow<K::SelfType<'k>>>(
    range: &impl RangeBounds<KR>,
) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    (
        encode_bound::<K, KR>(range.start_bound()),
        encode_bound::<K, KR>(range.end_bound()),
    )
}

fn entry<'a, K: Key + 'static, V: Value + 'static>(
    (k, v): Entry,
) -> CoreResult<SeamEntry<'a, K, V>> {
    Ok((AccessGuard::from_owned(k)?, AccessGuard::from_owned(v)?))
}

/// The type names recorded for a table must be its definition's.
fn check_types<K: Key + 'static, V: Value + 'static>(
    name: &str,
    (key, value): (String, String),
) -> CoreResult<()> {
    let (requested_key, requested_value) = (K::type_name(), V::type_name());
    if key == requested_key && value == requested_value {
        return Ok(());
    }
    Err(CoreError::TableTypeMismatch(Box::new(TypeMismatch {
        name: name.to_string(),
        stored_key: key,
        stored_value: value,
        requested_key,
        requested_value,
    })))
}

/// A table of a [`ReadTransaction`] through the seam.
pub struct SnapshotTable<'tx, 'db, K, V> {
    table: ReadOnlyTable<'tx, 'db>,
    _types: PhantomData<(K, V)>,
}

/// The entries of a snapshot's range, fetched a page
/// ([`RANGE_PAGE_KEYS`]) at a time from whichever end is read.
pub struct PagedRange<'a, K, V> {
    db: &'a EtcdDatabase,
    revision: Revision,
    /// The length of the table's key header, cut from every etcd key.
    header: usize,
    /// The part of the range not fetched yet: `[lo, hi)`.
    lo: Vec<u8>,
    hi: Vec<u8>,
    /// Nothing is left to fetch.
    done: bool,
    /// Fetched from the front, ascending.
    front: VecDeque<Entry>,
    /// Fetched from the back, ascending (`next_back` takes the last).
    back: VecDeque<Entry>,
    _types: PhantomData<(K, V)>,
}

impl<K: Key + 'static, V: Value + 'static> PagedRange<'_, K, V> {
    fn fetch(&mut self, descending: bool) -> CoreResult<()> {
        if self.done || self.lo >= self.hi {
            self.done = true;
            return Ok(());
        }
        let (page, more) = self
            .db
            .range_page_at(
                self.lo.clone(),
                self.hi.clone(),
                self.revision,
                RANGE_PAGE_KEYS,
                descending,
            )
            .map_err(core)?;
        match page.last() {
            None => self.done = true,
            Some((k, _)) if descending => self.hi = k.clone(),
            Some((k, _)) => self.lo = crate::keys::successor(k.clone()),
        }
        if !more {
            self.done = true;
        }
        let header = self.header;
        let cut = |(mut k, v): Entry| (k.split_off(header.min(k.len())), v);
        if descending {
            for e in page {
                self.back.push_front(cut(e));
            }
        } else {
            self.front.extend(page.into_iter().map(cut));
        }
        Ok(())
    }
}

impl<'a, K: Key + 'static, V: Value + 'static> Iterator for PagedRange<'a, K, V> {
    type Item = CoreResult<SeamEntry<'a, K, V>>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(e) = self.front.pop_front() {
                return Some(entry(e));
            }
            if self.done {
                return self.back.pop_front().map(entry);
            }
            if let Err(e) = self.fetch(false) {
                self.done = true;
                return Some(Err(e));
            }
        }
    }
}

impl<K: Key + 'static, V: Value + 'static> DoubleEndedIterator for PagedRange<'_, K, V> {
    fn next_back(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(e) = self.back.pop_back() {
                return Some(entry(e));
            }
            if self.done {
                return self.front.pop_back().map(entry);
            }
            if let Err(e) = self.fetch(true) {
                self.done = true;
                return Some(Err(e));
            }
        }
    }
}

impl<K: Key + 'static, V: Value + 'static> SeamTable<K, V> for SnapshotTable<'_, '_, K, V> {
    type Range<'a>
        = PagedRange<'a, K, V>
    where
        Self: 'a;

    fn get<'k>(&self, key: impl Borrow<K::SelfType<'k>>) -> CoreResult<Option<AccessGuard<'_, V>>> {
        let k = K::as_bytes(key.borrow());
        match self.table.get(k.as_ref()).map_err(core)? {
            Some(v) => Ok(Some(AccessGuard::from_owned(v)?)),
            None => Ok(None),
        }
    }

    fn range<'k, KR: Borrow<K::SelfType<'k>>>(
        &self,
        range: impl RangeBounds<KR>,
    ) -> CoreResult<PagedRange<'_, K, V>> {
        let (s, e) = encode_range::<K, KR>(&range);
        let tx = self.table.tx;
        let db = tx.db;
        let name = &self.table.name;
        let (lo, hi, done) = match db
            .layout
            .data_bounds(name, as_ref_bound(&s), as_ref_bound(&e))
        {
            Some((lo, hi)) => (lo, hi, false),
            None => (Vec::new(), Vec::new(), true),
        };
        Ok(PagedRange {
            db,
            revision: tx.revision,
            header: db.layout.data_header_len(name),
            lo,
            hi,
            done,
            front: VecDeque::new(),
            back: VecDeque::new(),
            _types: PhantomData,
        })
    }

    fn len(&self) -> CoreResult<u64> {
        self.table.len().map_err(core)
    }

    fn last(&self) -> CoreResult<Option<SeamEntry<'_, K, V>>> {
        self.table.last().map_err(core)?.map(entry).transpose()
    }
}

impl<'db> SeamRead for ReadTransaction<'db> {
    type Table<'a, K: Key + 'static, V: Value + 'static>
        = SnapshotTable<'a, 'db, K, V>
    where
        Self: 'a;

    fn open_table_if_exists<K: Key + 'static, V: Value + 'static>(
        &self,
        def: TableDefinition<'_, K, V>,
    ) -> CoreResult<Option<SnapshotTable<'_, 'db, K, V>>> {
        def.check_name()?;
        let name = def.name();
        let Some(types) = self.table_types(name).map_err(core)? else {
            return Ok(None);
        };
        check_types::<K, V>(name, types)?;
        Ok(Some(SnapshotTable {
            table: ReadOnlyTable {
                tx: self,
                name: name.to_string(),
            },
            _types: PhantomData,
        }))
    }

    fn table_counter(&self, table: &str) -> CoreResult<Option<u64>> {
        self.counter(table).map_err(core)
    }

    /// The index tables being built in batches (their marks `P/b/<table>`).
    fn incomplete_tables(&self, table: &str) -> CoreResult<Vec<String>> {
        Ok(self
            .building_tables(&format!("{table}."))
            .map_err(core)?
            .into_iter()
            .map(|(t, _)| t)
            .collect())
    }
}

/// A table of a [`WriteTransaction`] through the seam.
pub struct WriteTable<'tx, 'db, K, V> {
    table: Table<'tx, 'db>,
    _types: PhantomData<(K, V)>,
}

/// The entries of a write transaction's range (its writes merged over the
/// cluster's entries, read whole).
pub struct MergedRange<'a, K, V> {
    entries: std::vec::IntoIter<Entry>,
    _types: PhantomData<(&'a (), K, V)>,
}

impl<'a, K: Key + 'static, V: Value + 'static> Iterator for MergedRange<'a, K, V> {
    type Item = CoreResult<SeamEntry<'a, K, V>>;

    fn next(&mut self) -> Option<Self::Item> {
        self.entries.next().map(entry)
    }
}

impl<K: Key + 'static, V: Value + 'static> DoubleEndedIterator for MergedRange<'_, K, V> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.entries.next_back().map(entry)
    }
}

impl<K: Key + 'static, V: Value + 'static> SeamTable<K, V> for WriteTable<'_, '_, K, V> {
    type Range<'a>
        = MergedRange<'a, K, V>
    where
        Self: 'a;

    fn get<'k>(&self, key: impl Borrow<K::SelfType<'k>>) -> CoreResult<Option<AccessGuard<'_, V>>> {
        let k = K::as_bytes(key.borrow());
        match self.table.get(k.as_ref()).map_err(core)? {
            Some(v) => Ok(Some(AccessGuard::from_owned(v)?)),
            None => Ok(None),
        }
    }

    fn range<'k, KR: Borrow<K::SelfType<'k>>>(
        &self,
        range: impl RangeBounds<KR>,
    ) -> CoreResult<MergedRange<'_, K, V>> {
        let (s, e) = encode_range::<K, KR>(&range);
        let entries = self
            .table
            .range((as_ref_bound(&s), as_ref_bound(&e)))
            .map_err(core)?;
        Ok(MergedRange {
            entries: entries.into_iter(),
            _types: PhantomData,
        })
    }

    fn range_head<'k, KR: Borrow<K::SelfType<'k>>>(
        &self,
        range: impl RangeBounds<KR>,
        limit: usize,
    ) -> CoreResult<MergedRange<'_, K, V>> {
        let (s, e) = encode_range::<K, KR>(&range);
        let entries = self
            .table
            .range_head((as_ref_bound(&s), as_ref_bound(&e)), limit)
            .map_err(core)?;
        Ok(MergedRange {
            entries: entries.into_iter(),
            _types: PhantomData,
        })
    }

    fn len(&self) -> CoreResult<u64> {
        self.table.len().map_err(core)
    }

    fn last(&self) -> CoreResult<Option<SeamEntry<'_, K, V>>> {
        self.table.last().map_err(core)?.map(entry).transpose()
    }
}

impl<K: Key + 'static, V: Value + 'static> SeamTableMut<K, V> for WriteTable<'_, '_, K, V> {
    fn insert<'k, 'v>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
        value: impl Borrow<V::SelfType<'v>>,
    ) -> CoreResult<()> {
        let k = K::as_bytes(key.borrow());
        let v = V::as_bytes(value.borrow());
        self.table.insert(k.as_ref(), v.as_ref()).map_err(core)
    }

    fn remove<'k>(&mut self, key: impl Borrow<K::SelfType<'k>>) -> CoreResult<()> {
        let k = K::as_bytes(key.borrow());
        self.table.remove(k.as_ref()).map_err(core)
    }
}

/// A write transaction reads as a snapshot with its own writes (the
/// document layer's queries inside a transaction): a table it does not
/// hold is not created.
impl<'db> SeamRead for WriteTransaction<'db> {
    type Table<'a, K: Key + 'static, V: Value + 'static>
        = WriteTable<'a, 'db, K, V>
    where
        Self: 'a;

    fn open_table_if_exists<K: Key + 'static, V: Value + 'static>(
        &self,
        def: TableDefinition<'_, K, V>,
    ) -> CoreResult<Option<WriteTable<'_, 'db, K, V>>> {
        def.check_name()?;
        let name = def.name();
        let Some(types) = WriteTransaction::table_types(self, name).map_err(core)? else {
            return Ok(None);
        };
        check_types::<K, V>(name, types)?;
        let table = self.open(name, None).map_err(core)?;
        Ok(Some(WriteTable {
            table,
            _types: PhantomData,
        }))
    }

    /// The index tables being built in batches, in this transaction's view.
    fn incomplete_tables(&self, table: &str) -> CoreResult<Vec<String>> {
        self.building_tables(&format!("{table}.")).map_err(core)
    }
}

impl<'db> SeamWrite for WriteTransaction<'db> {
    type Table<'a, K: Key + 'static, V: Value + 'static>
        = WriteTable<'a, 'db, K, V>
    where
        Self: 'a;

    fn open_table<K: Key + 'static, V: Value + 'static>(
        &self,
        def: TableDefinition<'_, K, V>,
    ) -> CoreResult<WriteTable<'_, 'db, K, V>> {
        def.check_name()?;
        let (k, v) = (K::type_name(), V::type_name());
        let table = self
            .open(def.name(), Some((k.as_str(), v.as_str())))
            .map_err(core)?;
        Ok(WriteTable {
            table,
            _types: PhantomData,
        })
    }

    fn table_types(&self, name: &str) -> CoreResult<Option<(String, String)>> {
        WriteTransaction::table_types(self, name).map_err(core)
    }

    fn delete_table<K: Key + 'static, V: Value + 'static>(
        &self,
        def: TableDefinition<'_, K, V>,
    ) -> CoreResult<bool> {
        def.check_name()?;
        self.delete_unchecked(def.name()).map_err(core)
    }

    fn table_counter(&self, table: &str) -> CoreResult<Option<u64>> {
        self.counter(table).map_err(core)
    }

    fn set_table_counter(&self, table: &str, value: u64) -> CoreResult<()> {
        self.set_counter(table, value);
        Ok(())
    }
}
