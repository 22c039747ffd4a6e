//! Read and write transactions and their tables.
//!
//! A read transaction reads every key at one revision. A write
//! transaction reads at its start revision too, buffers its writes, and
//! commits them as one etcd `Txn` guarded by compares (ARCHITECTURE.md,
//! "etcd mode"):
//! - every key it read from the cluster: `mod_revision == seen` (0 for a key
//!   seen absent), so a change, a deletion or a creation since fails it;
//! - every table it read a range of: the table's version key
//!   (`<prefix>/v/<table>`, rewritten by every commit that writes the
//!   table) is unchanged, so a key added to or removed from the range —
//!   a phantom — fails it;
//! - every table it used: the catalog key, so a table deleted or created
//!   meanwhile fails it; `list_tables` compares the catalog's version.
//!
//! Writes alone add no compare: blind writes commute with nothing they
//! did not read. Together this makes write transactions serializable (at
//! their commit revision), and read transactions snapshots.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ops::{Bound, RangeBounds};

use etcd_client::{Compare, CompareOp, DeleteOptions, TxnOp};

use crate::db::{EtcdDatabase, Revision, REQUEST_OVERHEAD_BYTES_PER_OP};
use crate::error::{Error, Result};

/// A key and value read from a table.
pub type Entry = (Vec<u8>, Vec<u8>);

fn check_table_name(name: &str) -> Result<()> {
    cairndb::limits::check_table_name(name)?;
    Ok(())
}

/// The table name rules without the reserved `$` prefix: the document and
/// event layers' internal tables are read by tools (dump, migrate) and
/// written by a migration.
fn check_table_name_syntax(name: &str) -> Result<()> {
    match name.strip_prefix('$') {
        // The rest of the rules are the engine's, checked on the name with
        // its `$` replaced by a letter.
        Some(rest) => check_table_name(&format!("x{rest}")),
        None => check_table_name(name),
    }
}

/// A type name goes into a catalog value between 0x00 bytes.
fn check_type_name(table: &str, type_name: &str) -> Result<()> {
    if type_name.is_empty() || type_name.contains('\0') {
        return Err(Error::Engine(cairndb::CoreError::InvalidTableName {
            name: table.to_string(),
            reason: "a key or value type name must be non-empty and hold no NUL",
        }));
    }
    Ok(())
}

fn bounds<'r, R: RangeBounds<&'r [u8]>>(range: &R) -> (Bound<&'r [u8]>, Bound<&'r [u8]>) {
    (range.start_bound().cloned(), range.end_bound().cloned())
}

/// A snapshot of the database at one etcd revision.
pub struct ReadTransaction<'db> {
    pub(crate) db: &'db EtcdDatabase,
    pub(crate) revision: Revision,
}

impl<'db> ReadTransaction<'db> {
    pub(crate) fn new(db: &'db EtcdDatabase, revision: Revision) -> Self {
        ReadTransaction { db, revision }
    }

    /// The revision every read of this transaction is made at.
    pub fn revision(&self) -> Revision {
        self.revision
    }

    /// Opens a table; [`Error::TableDoesNotExist`] when it does not exist at
    /// this snapshot.
    /// Internal `$` tables (written by a migration) open too.
    pub fn open_table(&self, name: &str) -> Result<ReadOnlyTable<'_, 'db>> {
        check_table_name_syntax(name)?;
        let catalog = self.db.layout.catalog(name);
        if self.db.get_at(catalog, self.revision)?.is_none() {
            return Err(Error::TableDoesNotExist(name.to_string()));
        }
        Ok(ReadOnlyTable {
            tx: self,
            name: name.to_string(),
        })
    }

    /// The names of the tables at this snapshot, sorted (internal `$`
    /// tables included).
    pub fn list_tables(&self) -> Result<Vec<String>> {
        list_tables_at(self.db, self.revision)
    }

    /// The key and value type names recorded for a table (`&[u8]` and
    /// `&[u8]` for a table created by [`WriteTransaction::open_table`]), or
    /// `None` when it does not exist at this snapshot.
    pub fn table_types(&self, name: &str) -> Result<Option<(String, String)>> {
        check_table_name_syntax(name)?;
        let catalog = self.db.layout.catalog(name);
        match self.db.get_at(catalog, self.revision)? {
            None => Ok(None),
            Some((value, _)) => parse_types(self.db, name, &value).map(Some),
        }
    }
}

fn parse_types(db: &EtcdDatabase, name: &str, value: &[u8]) -> Result<(String, String)> {
    crate::keys::parse_catalog_value(value).ok_or_else(|| Error::Format {
        prefix: db.layout.prefix().to_string(),
        detail: format!(
            "the catalog key of table {name:?} holds {:?}, not a table record",
            String::from_utf8_lossy(value)
        ),
    })
}

fn list_tables_at(db: &EtcdDatabase, revision: Revision) -> Result<Vec<String>> {
    let (start, end) = db.layout.catalog_range();
    let mut names = Vec::new();
    for (key, _) in db.range_at(start, end, revision)? {
        let name = db
            .layout
            .table_of_catalog_key(&key)
            .ok_or_else(|| Error::Format {
                prefix: db.layout.prefix().to_string(),
                detail: format!("catalog key {key:?} is not a UTF-8 table name"),
            })?;
        names.push(name.to_string());
    }
    Ok(names)
}

/// A table of a [`ReadTransaction`].
pub struct ReadOnlyTable<'tx, 'db> {
    pub(crate) tx: &'tx ReadTransaction<'db>,
    pub(crate) name: String,
}

impl ReadOnlyTable<'_, '_> {
    /// The table's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The entry with the largest key (the cluster sorts the table to
    /// find it: see `EtcdDatabase::range_page_at`).
    pub(crate) fn last(&self) -> Result<Option<Entry>> {
        let db = self.tx.db;
        let (start, end) = db.layout.data_range(&self.name);
        let header = db.layout.data_header_len(&self.name);
        let (page, _) = db.range_page_at(start, end, self.tx.revision, 1, true)?;
        Ok(page.into_iter().next().map(|(mut k, v)| {
            let key = k.split_off(header.min(k.len()));
            (key, v)
        }))
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let db = self.tx.db;
        Ok(db
            .get_at(db.layout.data(&self.name, key), self.tx.revision)?
            .map(|(v, _)| v))
    }

    /// The number of entries (counted by the cluster, at the snapshot).
    pub fn len(&self) -> Result<u64> {
        let db = self.tx.db;
        let (start, end) = db.layout.data_range(&self.name);
        let n = db.count_at(start, end, self.tx.revision)?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// Whether the table holds no entry.
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    /// The entries whose keys fall in `range`, in key order.
    pub fn range<'r>(&self, range: impl RangeBounds<&'r [u8]>) -> Result<Vec<Entry>> {
        let db = self.tx.db;
        let (start, end) = bounds(&range);
        let Some((s, e)) = db.layout.data_bounds(&self.name, start, end) else {
            return Ok(Vec::new());
        };
        let header = db.layout.data_header_len(&self.name);
        Ok(db
            .range_at(s, e, self.tx.revision)?
            .into_iter()
            .map(|(k, v)| (k[header..].to_vec(), v))
            .collect())
    }
}

/// What a write transaction did to one table.
#[derive(Debug, Default)]
struct TableState {
    /// The table existed at the start revision.
    existed: bool,
    /// The table exists in the transaction's view now.
    exists: bool,
    /// The table was deleted in this transaction: none of its entries at
    /// the start revision are visible any more.
    cleared: bool,
    /// The transaction changed the table (entries, creation, deletion).
    touched: bool,
    /// Buffered writes: `Some` a put, `None` a removal.
    writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    /// The key and value type names: recorded in the catalog (an existing
    /// table), or to be written there (a table this transaction creates).
    types: Option<(String, String)>,
}

#[derive(Debug, Default)]
struct WriteState {
    /// Every etcd key read from the cluster and the mod revision seen (0:
    /// absent); each becomes a compare of the commit.
    reads: BTreeMap<Vec<u8>, i64>,
    tables: BTreeMap<String, TableState>,
    /// The catalog's version key must be rewritten (a table created or deleted).
    catalog_changed: bool,
}

/// A write transaction: reads at its start revision, buffered writes, one
/// atomic, serializable commit. Dropping it without committing aborts it.
pub struct WriteTransaction<'db> {
    db: &'db EtcdDatabase,
    revision: Revision,
    state: RefCell<WriteState>,
}

impl<'db> WriteTransaction<'db> {
    pub(crate) fn new(db: &'db EtcdDatabase, revision: Revision) -> Self {
        WriteTransaction {
            db,
            revision,
            state: RefCell::new(WriteState::default()),
        }
    }

    /// The revision this transaction reads at.
    pub fn revision(&self) -> Revision {
        self.revision
    }

    /// Reads `key` at the start revision and records it for the commit's
    /// compares.
    fn read_key(&self, key: Vec<u8>) -> Result<Option<Vec<u8>>> {
        let found = self.db.get_at(key.clone(), self.revision)?;
        let seen = found.as_ref().map_or(0, |(_, m)| *m);
        self.state.borrow_mut().reads.entry(key).or_insert(seen);
        Ok(found.map(|(v, _)| v))
    }

    /// Loads a table's state (reading its catalog key) when first used.
    fn with_table<T>(&self, name: &str, f: impl FnOnce(&mut TableState) -> T) -> Result<T> {
        if !self.state.borrow().tables.contains_key(name) {
            let found = self.read_key(self.db.layout.catalog(name))?;
            let types = match &found {
                Some(value) => Some(parse_types(self.db, name, value)?),
                None => None,
            };
            self.state.borrow_mut().tables.insert(
                name.to_string(),
                TableState {
                    existed: found.is_some(),
                    exists: found.is_some(),
                    types,
                    ..TableState::default()
                },
            );
        }
        let mut state = self.state.borrow_mut();
        let table = state
            .tables
            .get_mut(name)
            .ok_or_else(|| Error::TableDoesNotExist(name.to_string()))?;
        Ok(f(table))
    }

    /// Opens a table, creating it (at commit) when it does not exist, with
    /// `&[u8]` keys and values. An existing table opens whatever the type
    /// names recorded for it.
    pub fn open_table(&self, name: &str) -> Result<Table<'_, 'db>> {
        check_table_name(name)?;
        self.open(name, None)
    }

    /// Opens a table recording the key and value type names of the
    /// embedded engine's typed tables (as `cairn load` and `cairn migrate`
    /// keep them): a missing table is created with them, an existing one
    /// must have them ([`Error::TableTypeMismatch`] otherwise). The bytes
    /// are not checked against the types. Internal `$` tables can be
    /// created only by a migration ([`EtcdDatabase::begin_migration`]).
    pub fn open_table_with_types(
        &self,
        name: &str,
        key_type: &str,
        value_type: &str,
    ) -> Result<Table<'_, 'db>> {
        if self.db.is_migrating() {
            check_table_name_syntax(name)?;
        } else {
            check_table_name(name)?;
        }
        check_type_name(name, key_type)?;
        check_type_name(name, value_type)?;
        self.open(name, Some((key_type, value_type)))
    }

    /// Opens (creates) a table without checking its name: the callers
    /// check it by their rules (the storage seam: a layer's `$` table
    /// through its internal definition).
    pub(crate) fn open(&self, name: &str, types: Option<(&str, &str)>) -> Result<Table<'_, 'db>> {
        let created = self.with_table(name, |t| {
            let created = !t.exists;
            if created {
                t.exists = true;
                t.touched = true;
                let (k, v) = types.unwrap_or((crate::keys::BYTES, crate::keys::BYTES));
                t.types = Some((k.to_string(), v.to_string()));
                return Ok(true);
            }
            match (types, &t.types) {
                (Some((k, v)), Some((fk, fv))) if (k, v) != (fk.as_str(), fv.as_str()) => {
                    Err(Error::TableTypeMismatch {
                        table: name.to_string(),
                        key: k.to_string(),
                        value: v.to_string(),
                        found_key: fk.clone(),
                        found_value: fv.clone(),
                    })
                }
                _ => Ok(false),
            }
        })??;
        if created {
            self.state.borrow_mut().catalog_changed = true;
        }
        Ok(Table {
            tx: self,
            name: name.to_string(),
        })
    }

    /// Deletes a table and its entries; `false` when it did not exist.
    pub fn delete_table(&self, name: &str) -> Result<bool> {
        check_table_name(name)?;
        self.delete_unchecked(name)
    }

    /// Deletes a table whose name its caller checked (the storage seam: a
    /// layer's `$` table through its internal definition).
    pub(crate) fn delete_unchecked(&self, name: &str) -> Result<bool> {
        let deleted = self.with_table(name, |t| {
            if !t.exists {
                return false;
            }
            t.exists = false;
            t.cleared = true;
            t.touched = true;
            t.writes.clear();
            true
        })?;
        if deleted {
            self.state.borrow_mut().catalog_changed = true;
        }
        Ok(deleted)
    }

    /// The key and value type names of a table in this transaction's view
    /// (`None`: it does not exist).
    pub fn table_types(&self, name: &str) -> Result<Option<(String, String)>> {
        check_table_name_syntax(name)?;
        self.with_table(name, |t| if t.exists { t.types.clone() } else { None })
    }

    /// The names of the tables in this transaction's view, sorted.
    pub fn list_tables(&self) -> Result<Vec<String>> {
        self.read_key(self.db.layout.catalog_version())?;
        let mut names: std::collections::BTreeSet<String> = list_tables_at(self.db, self.revision)?
            .into_iter()
            .collect();
        for (name, t) in &self.state.borrow().tables {
            if t.exists {
                names.insert(name.clone());
            } else {
                names.remove(name);
            }
        }
        Ok(names.into_iter().collect())
    }

    /// Commits: one etcd `Txn` that applies every buffered write if nothing
    /// read has changed since the start revision. Returns the commit's
    /// revision (the start revision when nothing was written: a
    /// transaction that only read committed at its snapshot).
    pub fn commit(self) -> Result<Revision> {
        let state = self.state.into_inner();
        if !state.catalog_changed && state.tables.values().all(|t| !t.touched) {
            return Ok(self.revision);
        }
        let db = self.db;
        let layout = &db.layout;
        let size = std::cell::Cell::new(0usize);
        let mut compares = Vec::with_capacity(state.reads.len());
        for (key, seen) in state.reads {
            size.set(size.get() + key.len() + REQUEST_OVERHEAD_BYTES_PER_OP);
            compares.push(Compare::mod_revision(key, CompareOp::Equal, seen));
        }
        let mut ops = Vec::new();
        let put = |ops: &mut Vec<TxnOp>, key: Vec<u8>, value: Vec<u8>| {
            size.set(size.get() + key.len() + value.len() + REQUEST_OVERHEAD_BYTES_PER_OP);
            ops.push(TxnOp::put(key, value, None));
        };
        let delete = |ops: &mut Vec<TxnOp>, start: Vec<u8>, end: Option<Vec<u8>>| {
            ops.push(TxnOp::delete(
                start,
                end.map(|e| DeleteOptions::new().with_range(e)),
            ));
        };
        for (name, t) in state.tables.into_iter().filter(|(_, t)| t.touched) {
            if !t.exists {
                if t.existed {
                    let (start, end) = layout.data_range(&name);
                    delete(&mut ops, start, Some(end));
                    delete(&mut ops, layout.catalog(&name), None);
                    delete(&mut ops, layout.version(&name), None);
                }
                continue;
            }
            if !t.existed || t.cleared {
                let (k, v) = t
                    .types
                    .clone()
                    .unwrap_or_else(|| (crate::keys::BYTES.into(), crate::keys::BYTES.into()));
                put(
                    &mut ops,
                    layout.catalog(&name),
                    crate::keys::catalog_value(&k, &v),
                );
            }
            if t.cleared && t.existed {
                // Deleted and created again: remove the old entries around
                // the new ones (etcd refuses a put inside a deleted range of
                // the same Txn).
                let (mut start, end) = layout.data_range(&name);
                for key in t.writes.iter().filter(|(_, v)| v.is_some()).map(|(k, _)| k) {
                    let data = layout.data(&name, key);
                    if start < data {
                        delete(&mut ops, start, Some(data.clone()));
                    }
                    start = crate::keys::successor(data);
                }
                if start < end {
                    delete(&mut ops, start, Some(end));
                }
            }
            for (key, value) in t.writes {
                let data = layout.data(&name, &key);
                match value {
                    Some(value) => put(&mut ops, data, value),
                    None if !t.cleared => {
                        size.set(size.get() + data.len() + REQUEST_OVERHEAD_BYTES_PER_OP);
                        delete(&mut ops, data, None);
                    }
                    None => {}
                }
            }
            put(&mut ops, layout.version(&name), Vec::new());
        }
        if state.catalog_changed {
            put(&mut ops, layout.catalog_version(), Vec::new());
        }
        let max_ops = db.options.max_txn_ops;
        for (what, n) in [
            (
                "a transaction's compares (one per key or table read)",
                compares.len(),
            ),
            (
                "a transaction's operations (one per key written)",
                ops.len(),
            ),
        ] {
            if n > max_ops {
                return Err(Error::TooLarge {
                    what,
                    limit: "--max-txn-ops",
                    size: n,
                    max: max_ops,
                });
            }
        }
        let size = size.get();
        if size > db.options.max_request_bytes {
            return Err(Error::TooLarge {
                what: "a transaction's request (keys, values and compares)",
                limit: "--max-request-bytes",
                size,
                max: db.options.max_request_bytes,
            });
        }
        db.send_txn(compares, ops, self.revision)?
            .ok_or(Error::Conflict {
                read_revision: self.revision,
            })
    }

    /// Drops the transaction without writing anything.
    pub fn abort(self) {}
}

/// A table of a [`WriteTransaction`]: reads see the transaction's own
/// writes.
pub struct Table<'tx, 'db> {
    tx: &'tx WriteTransaction<'db>,
    name: String,
}

impl Table<'_, '_> {
    /// The table's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The value of `key`: the transaction's own write if any, else the
    /// value at the start revision (recorded for the commit's compares).
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let buffered = self.tx.with_table(&self.name, |t| {
            if !t.exists {
                return Some(None);
            }
            match t.writes.get(key) {
                Some(v) => Some(v.clone()),
                None if t.cleared => Some(None),
                None => None,
            }
        })?;
        match buffered {
            Some(v) => Ok(v),
            None => self.tx.read_key(self.tx.db.layout.data(&self.name, key)),
        }
    }

    /// The number of entries in the transaction's view: the cluster's
    /// count at the start revision, corrected by the buffered writes. The
    /// table's version is recorded as a range read records it, so an entry
    /// added or removed by another commit meanwhile is a conflict.
    pub(crate) fn len(&self) -> Result<u64> {
        let db = self.tx.db;
        let (cleared, writes) = self.tx.with_table(&self.name, |t| {
            let writes: Vec<(Vec<u8>, bool)> = t
                .writes
                .iter()
                .map(|(k, v)| (k.clone(), v.is_some()))
                .collect();
            (t.cleared || !t.exists, writes)
        })?;
        let puts = writes.iter().filter(|(_, put)| *put).count() as u64;
        if cleared {
            return Ok(puts);
        }
        self.tx.read_key(db.layout.version(&self.name))?;
        let (start, end) = db.layout.data_range(&self.name);
        let mut n = u64::try_from(db.count_at(start, end, self.tx.revision)?).unwrap_or(0);
        for (key, put) in writes {
            // Not recorded: the version key covers every entry.
            let existed = db
                .get_at(db.layout.data(&self.name, &key), self.tx.revision)?
                .is_some();
            match (existed, put) {
                (false, true) => n += 1,
                (true, false) => n = n.saturating_sub(1),
                _ => {}
            }
        }
        Ok(n)
    }

    /// The entry with the largest key in the transaction's view, the
    /// table's version recorded as a range read records it (so an append
    /// after the last key by another commit is a conflict). The cluster's
    /// last keys are read newest first, skipping those this transaction
    /// wrote or removed.
    pub(crate) fn last(&self) -> Result<Option<Entry>> {
        let db = self.tx.db;
        let (cleared, buffered) = self.tx.with_table(&self.name, |t| {
            let buffered = t
                .writes
                .iter()
                .rev()
                .find_map(|(k, v)| v.as_ref().map(|v| (k.clone(), v.clone())));
            (t.cleared || !t.exists, buffered)
        })?;
        if cleared {
            return Ok(buffered);
        }
        self.tx.read_key(db.layout.version(&self.name))?;
        let header = db.layout.data_header_len(&self.name);
        let (start, mut end) = db.layout.data_range(&self.name);
        loop {
            let (page, more) =
                db.range_page_at(start.clone(), end.clone(), self.tx.revision, 8, true)?;
            let Some((smallest, _)) = page.last() else {
                return Ok(buffered);
            };
            let next_end = smallest.clone();
            for (mut k, v) in page {
                let key = k.split_off(header.min(k.len()));
                let written = self
                    .tx
                    .with_table(&self.name, |t| t.writes.contains_key(&key))?;
                if written {
                    // Its buffered value, if it has one, is in `buffered`.
                    continue;
                }
                return Ok(match buffered {
                    Some(b) if b.0 > key => Some(b),
                    _ => Some((key, v)),
                });
            }
            if !more {
                return Ok(buffered);
            }
            end = next_end;
        }
    }

    /// Sets `key` to `value` (buffered until the commit). A key and value
    /// that cannot fit in one etcd request are refused here.
    pub fn insert(&self, key: &[u8], value: &[u8]) -> Result<()> {
        let db = self.tx.db;
        let size = db.layout.data_header_len(&self.name)
            + key.len()
            + value.len()
            + REQUEST_OVERHEAD_BYTES_PER_OP;
        if size > db.options.max_request_bytes {
            return Err(Error::TooLarge {
                what: "a key and value",
                limit: "--max-request-bytes",
                size,
                max: db.options.max_request_bytes,
            });
        }
        self.write(key, Some(value.to_vec()))
    }

    /// Removes `key` (buffered until the commit); removing an absent key
    /// does nothing.
    pub fn remove(&self, key: &[u8]) -> Result<()> {
        self.write(key, None)
    }

    fn write(&self, key: &[u8], value: Option<Vec<u8>>) -> Result<()> {
        self.tx.with_table(&self.name, |t| {
            t.exists = true;
            t.touched = true;
            t.writes.insert(key.to_vec(), value);
        })
    }

    /// The entries whose keys fall in `range`, in key order: the entries at
    /// the start revision merged with the transaction's own writes. The
    /// table's version is recorded for the commit's compares, so an entry
    /// added to or removed from the table meanwhile is a conflict.
    pub fn range<'r>(&self, range: impl RangeBounds<&'r [u8]>) -> Result<Vec<Entry>> {
        let db = self.tx.db;
        let (start, end) = bounds(&range);
        // An empty range (start after end) reads nothing.
        let Some((s, e)) = db.layout.data_bounds(&self.name, start, end) else {
            return Ok(Vec::new());
        };
        let cleared = self.tx.with_table(&self.name, |t| t.cleared || !t.exists)?;
        let mut merged: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        if !cleared {
            self.tx.read_key(db.layout.version(&self.name))?;
            let header = db.layout.data_header_len(&self.name);
            for (k, v) in db.range_at(s, e, self.tx.revision)? {
                merged.insert(k[header..].to_vec(), v);
            }
        }
        self.tx.with_table(&self.name, |t| {
            for (k, v) in t.writes.range::<[u8], _>((start, end)) {
                match v {
                    Some(v) => merged.insert(k.clone(), v.clone()),
                    None => merged.remove(k),
                };
            }
        })?;
        Ok(merged.into_iter().collect())
    }
}
