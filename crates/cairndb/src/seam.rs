//! The storage seam: what the layers above the key-value API need from an
//! engine, as traits — a snapshot's tables ([`SeamRead`]), a write
//! transaction's tables and table management ([`SeamWrite`]), and a
//! table's reads and writes ([`SeamTable`], [`SeamTableMut`]). The event
//! layer's appends and reads, and the document layer's queries and writes,
//! are generic over them, so the same code runs on the embedded engine (implemented here, by delegation to
//! [`ReadTransaction`], [`WriteTransaction`], [`ReadOnlyTable`] and
//! [`Table`]) and on an etcd cluster (`cairndb-etcd`).
//!
//! Generic, never `dyn`: every use is monomorphized, so on the embedded
//! engine the seam compiles to the calls it replaced. Tables are typed with
//! the same [`TableDefinition`]s, [`Key`]s and [`Value`]s as the embedded
//! API (a backend stores the keys' order-preserving bytes and records the
//! type names), and reads hand out [`AccessGuard`]s (borrowed page bytes on
//! the embedded engine, owned copies elsewhere:
//! [`AccessGuard::from_owned`]).
//!
//! What every backend must give (ARCHITECTURE.md, "The storage seam"):
//! - **snapshot isolation**: every read of a [`SeamRead`], and every read
//!   of a [`SeamWrite`] of what it did not write itself, sees one
//!   committed state; a write transaction's reads see its own writes;
//! - **serializable commits**: a write transaction that commits did so as
//!   if alone, after every commit it saw — in particular, two transactions
//!   that both read a table's last key and both append after it cannot
//!   both commit (the event log's dense positions rest on this);
//! - **a typed conflict error**: a commit refused because another one got
//!   in first is an error the backend names as retryable (the embedded
//!   engine has one writer at a time and never refuses one);
//! - its own errors carried as [`CoreError::Backend`], so the layers above
//!   pass them through unchanged and the backend's API gives them back with
//!   their type.
//!
//! Beginning and committing transactions stay with each backend (the
//! embedded engine's durability and the event layer's remembered log end,
//! etcd's retry loop): the layers' code runs inside a transaction it is
//! given.

use std::borrow::Borrow;
use std::ops::RangeBounds;
use std::sync::Arc;

use crate::error::{CoreError, Result};
use crate::table::{AccessGuard, Range, ReadOnlyTable, ReadableTable, Table, TableDefinition};
use crate::txn::{ReadTransaction, WriteTransaction};
use crate::types::{Key, Value};

/// A key and value read from a table.
pub type SeamEntry<'a, K, V> = (AccessGuard<'a, K>, AccessGuard<'a, V>);

/// Methods only the layers of this crate call (the embedded engine's fast
/// paths): their token cannot be named outside it, so another backend
/// keeps the default.
mod sealed {
    /// The token of the layers' own calls.
    #[derive(Debug, Clone, Copy)]
    pub struct Layer(pub(crate) ());
}

pub(crate) use sealed::Layer;

/// The token the layers of this crate pass to the sealed methods.
pub(crate) const LAYER: Layer = Layer(());

/// A table's reads, in a snapshot or a write transaction (which sees its
/// own writes).
pub trait SeamTable<K: Key + 'static, V: Value + 'static> {
    /// The entries of a range, in key order, from either end.
    type Range<'a>: DoubleEndedIterator<Item = Result<SeamEntry<'a, K, V>>>
    where
        Self: 'a;

    /// The value stored under `key`.
    fn get<'k>(&self, key: impl Borrow<K::SelfType<'k>>) -> Result<Option<AccessGuard<'_, V>>>;

    /// The entries whose keys fall in `range`, in key order (double-ended).
    fn range<'k, KR: Borrow<K::SelfType<'k>>>(
        &self,
        range: impl RangeBounds<KR>,
    ) -> Result<Self::Range<'_>>;

    /// The first entries of `range` in key order: every entry the range
    /// holds up to the `limit`-th at least (the rest may be cut). A
    /// backend that reads a range whole (cairndb-etcd's write
    /// transactions) reads only about `limit` entries; the default is
    /// [`range`](Self::range).
    fn range_head<'k, KR: Borrow<K::SelfType<'k>>>(
        &self,
        range: impl RangeBounds<KR>,
        limit: usize,
    ) -> Result<Self::Range<'_>> {
        let _ = limit;
        self.range(range)
    }

    /// The number of entries.
    fn len(&self) -> Result<u64>;

    /// Whether the table holds no entry.
    fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Every entry, in key order.
    fn iter(&self) -> Result<Self::Range<'_>> {
        self.range::<K::SelfType<'_>>(..)
    }

    /// The entry with the largest key.
    fn last(&self) -> Result<Option<SeamEntry<'_, K, V>>> {
        self.iter()?.next_back().transpose()
    }
}

/// A table's writes in a write transaction.
pub trait SeamTableMut<K: Key + 'static, V: Value + 'static>: SeamTable<K, V> {
    /// Stores `value` under `key`.
    fn insert<'k, 'v>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
        value: impl Borrow<V::SelfType<'v>>,
    ) -> Result<()>;

    /// Removes `key` (nothing if absent).
    fn remove<'k>(&mut self, key: impl Borrow<K::SelfType<'k>>) -> Result<()>;

    /// [`insert`](Self::insert) of a key the caller knows is absent
    /// (`existed` false) or present: the embedded engine then skips reading
    /// the old value. Only this crate's layers can call it.
    #[doc(hidden)]
    fn insert_known<'k, 'v>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
        value: impl Borrow<V::SelfType<'v>>,
        existed: bool,
        _: Layer,
    ) -> Result<()> {
        let _ = existed;
        self.insert(key, value)
    }

    /// [`remove`](Self::remove) of a key the caller knows is present
    /// (`existed`) or absent: the embedded engine then skips reading the
    /// old value. Only this crate's layers can call it.
    #[doc(hidden)]
    fn remove_known<'k>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
        existed: bool,
        _: Layer,
    ) -> Result<()> {
        let _ = existed;
        self.remove(key)
    }

    /// [`insert`](Self::insert) that returns the old value's bytes (one
    /// lookup on the embedded engine). Only this crate's layers can call it.
    #[doc(hidden)]
    fn insert_old<'k, 'v>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
        value: impl Borrow<V::SelfType<'v>>,
        _: Layer,
    ) -> Result<Option<Vec<u8>>> {
        let key = key.borrow();
        let old = self.get(key)?.map(|g| g.as_bytes().to_vec());
        self.insert(key, value)?;
        Ok(old)
    }

    /// [`remove`](Self::remove) that returns the old value's bytes (one
    /// lookup on the embedded engine). Only this crate's layers can call it.
    #[doc(hidden)]
    fn remove_old<'k>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
        _: Layer,
    ) -> Result<Option<Vec<u8>>> {
        let key = key.borrow();
        let old = self.get(key)?.map(|g| g.as_bytes().to_vec());
        if old.is_some() {
            self.remove(key)?;
        }
        Ok(old)
    }
}

/// A read snapshot: every table as of one commit.
pub trait SeamRead {
    /// A table open in the snapshot.
    type Table<'a, K: Key + 'static, V: Value + 'static>: SeamTable<K, V>
    where
        Self: 'a;

    /// Opens a table; `None` if it does not exist in the snapshot,
    /// [`CoreError::TableTypeMismatch`] if it has other types.
    fn open_table_if_exists<K: Key + 'static, V: Value + 'static>(
        &self,
        def: TableDefinition<'_, K, V>,
    ) -> Result<Option<Self::Table<'_, K, V>>>;

    /// A counter the backend keeps with `table` ([`SeamWrite::set_table_counter`]),
    /// as of this snapshot: the value set by the last commit that wrote
    /// `table`, if that commit set it. `None` when the backend keeps no
    /// counters (the embedded engine: the default) or the last commit that
    /// wrote the table did not set it: the layer then derives the value
    /// from the table.
    #[inline]
    fn table_counter(&self, table: &str) -> Result<Option<u64>> {
        let _ = table;
        Ok(None)
    }

    /// The tables whose names start with `table` and a `.` (a
    /// collection's index tables, after its data table's name) that the
    /// backend marks as still being filled, in this snapshot (the embedded
    /// engine's answer allocates nothing): a layer above must not
    /// read them as complete (the document layer's planner leaves such an
    /// index out). `cairndb-etcd` marks an index it builds in several
    /// transactions; the embedded engine builds every index in one
    /// transaction and marks none (the default).
    #[inline]
    fn incomplete_tables(&self, table: &str) -> Result<Vec<String>> {
        let _ = table;
        Ok(Vec::new())
    }
}

/// A write transaction: its tables, created on first open, and their
/// management. Committing is the backend's (see the module docs).
pub trait SeamWrite {
    /// A table open in the transaction.
    type Table<'a, K: Key + 'static, V: Value + 'static>: SeamTableMut<K, V>
    where
        Self: 'a;

    /// Opens a table, creating it if it does not exist;
    /// [`CoreError::TableTypeMismatch`] if it has other types.
    fn open_table<K: Key + 'static, V: Value + 'static>(
        &self,
        def: TableDefinition<'_, K, V>,
    ) -> Result<Self::Table<'_, K, V>>;

    /// The key and value type names of a table in the transaction's view
    /// (`None`: it does not exist). Layers' `$` tables included.
    fn table_types(&self, name: &str) -> Result<Option<(String, String)>>;

    /// Deletes a table with its entries; returns whether it existed. A
    /// layer's `$` table only through its (internal) definition.
    fn delete_table<K: Key + 'static, V: Value + 'static>(
        &self,
        def: TableDefinition<'_, K, V>,
    ) -> Result<bool>;

    /// The counter kept with `table` in this transaction's view: the value
    /// this transaction set, else the one [`SeamRead::table_counter`] would
    /// give at its start while it has not written the table; `None`
    /// otherwise, or when the backend keeps no counters (the default). A
    /// layer that reads it depends on it as on a read of the table (the
    /// backend's serializable commit covers it).
    #[inline]
    fn table_counter(&self, table: &str) -> Result<Option<u64>> {
        let _ = table;
        Ok(None)
    }

    /// Sets the counter kept with `table`, in a transaction that writes
    /// `table` (the counter is the table's only while every commit that
    /// writes the table sets it). The default keeps nothing: a backend
    /// whose layers derive such values cheaply from the table itself (the
    /// embedded engine: a B-tree's last key) needs no counter. cairndb-etcd
    /// keeps one key per counter (FORMAT.md, "etcd key layout").
    #[inline]
    fn set_table_counter(&self, table: &str, value: u64) -> Result<()> {
        let _ = (table, value);
        Ok(())
    }

    /// A value an upper layer remembered for the commit this transaction
    /// started from, while `table` is untouched (the embedded engine's
    /// `Shared::memo`). Only this crate's layers can call it.
    #[doc(hidden)]
    fn base_memo(&self, key: &'static str, table: &str, _: Layer) -> Option<u64> {
        let _ = (key, table);
        None
    }

    /// The longest key a table of this transaction holds, in bytes (the
    /// document layer's limit on `_id`s and index entries): the embedded
    /// engine's is its page size's; every other backend keeps the one of
    /// a file at the default page size, so a database copied between a
    /// file and another backend (`cairn migrate`) fits both.
    #[doc(hidden)]
    fn max_key_bytes(&self, _: Layer) -> usize {
        crate::limits::max_key_bytes(crate::limits::DEFAULT_PAGE_SIZE)
    }
}

/// A borrowed snapshot reads as the snapshot.
impl<R: SeamRead + ?Sized> SeamRead for &R {
    type Table<'a, K: Key + 'static, V: Value + 'static>
        = R::Table<'a, K, V>
    where
        Self: 'a;

    #[inline]
    fn open_table_if_exists<K: Key + 'static, V: Value + 'static>(
        &self,
        def: TableDefinition<'_, K, V>,
    ) -> Result<Option<Self::Table<'_, K, V>>> {
        (**self).open_table_if_exists(def)
    }

    #[inline]
    fn table_counter(&self, table: &str) -> Result<Option<u64>> {
        (**self).table_counter(table)
    }

    #[inline]
    fn incomplete_tables(&self, table: &str) -> Result<Vec<String>> {
        (**self).incomplete_tables(table)
    }
}

/// A shared snapshot reads as the snapshot.
impl<R: SeamRead + ?Sized> SeamRead for Arc<R> {
    type Table<'a, K: Key + 'static, V: Value + 'static>
        = R::Table<'a, K, V>
    where
        Self: 'a;

    #[inline]
    fn open_table_if_exists<K: Key + 'static, V: Value + 'static>(
        &self,
        def: TableDefinition<'_, K, V>,
    ) -> Result<Option<Self::Table<'_, K, V>>> {
        (**self).open_table_if_exists(def)
    }

    #[inline]
    fn table_counter(&self, table: &str) -> Result<Option<u64>> {
        (**self).table_counter(table)
    }

    #[inline]
    fn incomplete_tables(&self, table: &str) -> Result<Vec<String>> {
        (**self).incomplete_tables(table)
    }
}

/// The embedded tables' reads: both handle types answer through
/// `ReadableTable`.
macro_rules! embedded_seam_table {
    ($($table:ident),*) => {$(
        impl<K: Key + 'static, V: Value + 'static> SeamTable<K, V> for $table<'_, K, V> {
            type Range<'a>
                = Range<'a, K, V>
            where
                Self: 'a;

            #[inline]
            fn get<'k>(
                &self,
                key: impl Borrow<K::SelfType<'k>>,
            ) -> Result<Option<AccessGuard<'_, V>>> {
                ReadableTable::get(self, key)
            }

            #[inline]
            fn range<'k, KR: Borrow<K::SelfType<'k>>>(
                &self,
                range: impl RangeBounds<KR>,
            ) -> Result<Self::Range<'_>> {
                ReadableTable::range(self, range)
            }

            #[inline]
            fn len(&self) -> Result<u64> {
                Ok(ReadableTable::len(self))
            }

            #[inline]
            fn last(&self) -> Result<Option<SeamEntry<'_, K, V>>> {
                ReadableTable::last(self)
            }
        }
    )*};
}

embedded_seam_table!(ReadOnlyTable, Table);

impl<K: Key + 'static, V: Value + 'static> SeamTableMut<K, V> for Table<'_, K, V> {
    #[inline]
    fn insert<'k, 'v>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
        value: impl Borrow<V::SelfType<'v>>,
    ) -> Result<()> {
        Table::insert(self, key, value).map(drop)
    }

    #[inline]
    fn remove<'k>(&mut self, key: impl Borrow<K::SelfType<'k>>) -> Result<()> {
        Table::remove(self, key).map(drop)
    }

    #[inline]
    fn insert_known<'k, 'v>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
        value: impl Borrow<V::SelfType<'v>>,
        existed: bool,
        _: Layer,
    ) -> Result<()> {
        Table::insert_known(self, key, value, existed)
    }

    #[inline]
    fn remove_known<'k>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
        existed: bool,
        _: Layer,
    ) -> Result<()> {
        self.put_known(K::as_bytes(key.borrow()).as_ref(), None, existed)
    }

    #[inline]
    fn insert_old<'k, 'v>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
        value: impl Borrow<V::SelfType<'v>>,
        _: Layer,
    ) -> Result<Option<Vec<u8>>> {
        Ok(Table::insert(self, key, value)?.map(|g| g.as_bytes().to_vec()))
    }

    #[inline]
    fn remove_old<'k>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
        _: Layer,
    ) -> Result<Option<Vec<u8>>> {
        Ok(Table::remove(self, key)?.map(|g| g.as_bytes().to_vec()))
    }
}

impl SeamRead for ReadTransaction {
    type Table<'a, K: Key + 'static, V: Value + 'static> = ReadOnlyTable<'a, K, V>;

    #[inline]
    fn open_table_if_exists<K: Key + 'static, V: Value + 'static>(
        &self,
        def: TableDefinition<'_, K, V>,
    ) -> Result<Option<ReadOnlyTable<'_, K, V>>> {
        match self.open_table(def) {
            Ok(t) => Ok(Some(t)),
            Err(CoreError::TableNotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// A write transaction reads as a snapshot with its own writes (the
/// document layer's queries inside a transaction); a table it does not
/// hold is not created.
impl SeamRead for WriteTransaction {
    type Table<'a, K: Key + 'static, V: Value + 'static> = Table<'a, K, V>;

    #[inline]
    fn open_table_if_exists<K: Key + 'static, V: Value + 'static>(
        &self,
        def: TableDefinition<'_, K, V>,
    ) -> Result<Option<Table<'_, K, V>>> {
        WriteTransaction::open_table_if_exists(self, def)
    }
}

impl SeamWrite for WriteTransaction {
    type Table<'a, K: Key + 'static, V: Value + 'static> = Table<'a, K, V>;

    #[inline]
    fn open_table<K: Key + 'static, V: Value + 'static>(
        &self,
        def: TableDefinition<'_, K, V>,
    ) -> Result<Table<'_, K, V>> {
        WriteTransaction::open_table(self, def)
    }

    fn table_types(&self, name: &str) -> Result<Option<(String, String)>> {
        WriteTransaction::table_types(self, name)
    }

    fn delete_table<K: Key + 'static, V: Value + 'static>(
        &self,
        def: TableDefinition<'_, K, V>,
    ) -> Result<bool> {
        def.check_name()?;
        self.delete_internal_table(def.name())
    }

    #[inline]
    fn base_memo(&self, key: &'static str, table: &str, _: Layer) -> Option<u64> {
        WriteTransaction::base_memo(self, key, table)
    }

    #[inline]
    fn max_key_bytes(&self, _: Layer) -> usize {
        crate::limits::max_key_bytes(self.shared.pager.page_size())
    }
}
