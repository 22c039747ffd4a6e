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

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::ops::{Bound, RangeBounds};

use etcd_client::{Compare, CompareOp, DeleteOptions, GetOptions, TxnOp};

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

    /// The counter kept with `table` at this snapshot when valid (its mod
    /// revision is the table version key's; FORMAT.md, "etcd key layout"):
    /// both keys read in one request. `None`: no valid counter.
    pub(crate) fn counter(&self, table: &str) -> Result<Option<u64>> {
        let layout = &self.db.layout;
        let key = layout.counter(table);
        let reads = vec![
            (layout.version(table), GetOptions::new()),
            (key.clone(), GetOptions::new()),
        ];
        let (_, answers) = self.db.read_txn(reads, Some(self.revision))?;
        let mut found = answers
            .into_iter()
            .map(|a| a.kvs.into_iter().next().map(|(_, v, m)| (v, m)));
        match (found.next().flatten(), found.next().flatten()) {
            (Some((_, version_mod)), Some((value, counter_mod))) if version_mod == counter_mod => {
                parse_counter(self.db, &key, &value).map(Some)
            }
            _ => Ok(None),
        }
    }

    /// The tables whose names start with `prefix` marked as indexes being
    /// built in batches at this snapshot (FORMAT.md, "etcd key layout",
    /// `P/b/<table>`), with the mark's value.
    pub(crate) fn building_tables(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>> {
        building_tables_at(self.db, prefix, self.revision)
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

/// A valid counter's value; `Error::Format` naming the key if it is not
/// one (FORMAT.md: only this crate writes it, always canonical).
fn parse_counter(db: &EtcdDatabase, key: &[u8], value: &[u8]) -> Result<u64> {
    crate::keys::parse_counter_value(value).ok_or_else(|| Error::Format {
        prefix: db.layout.prefix().to_string(),
        detail: format!(
            "the counter key {:?} holds {:?}, not a decimal u64",
            String::from_utf8_lossy(key),
            String::from_utf8_lossy(value)
        ),
    })
}

fn building_tables_at(
    db: &EtcdDatabase,
    prefix: &str,
    revision: Revision,
) -> Result<Vec<(String, Vec<u8>)>> {
    let (start, end) = db.layout.building_range(prefix);
    let mut tables = Vec::new();
    for (key, value) in db.range_at(start, end, revision)? {
        let name = db
            .layout
            .table_of_building_key(&key)
            .ok_or_else(|| Error::Format {
                prefix: db.layout.prefix().to_string(),
                detail: format!("building mark {key:?} is not a UTF-8 table name"),
            })?;
        tables.push((name.to_string(), value));
    }
    Ok(tables)
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

/// Catalog keys a write transaction's first request reads ahead (an
/// ascending range, which etcd stops at the limit): a transaction over a
/// small catalog then opens every table without a request of its own.
pub(crate) const CATALOG_READ_AHEAD_KEYS: i64 = 64;

#[derive(Debug, Default)]
struct WriteState {
    /// Every etcd key read from the cluster and the mod revision seen (0:
    /// absent); each becomes a compare of the commit.
    reads: BTreeMap<Vec<u8>, i64>,
    /// Every key fetched at the start revision, read or read ahead: its
    /// value and mod revision (`None`: absent). A key is recorded in
    /// `reads` when it is used, so what was only read ahead is not compared.
    fetched: BTreeMap<Vec<u8>, Option<(Vec<u8>, i64)>>,
    /// The catalog keys read ahead cover `[catalog start, this)`: a catalog
    /// key before it and not in `fetched` is absent. `None`: not read yet.
    catalog_fetched_to: Option<Vec<u8>>,
    tables: BTreeMap<String, TableState>,
    /// The catalog's version key must be rewritten (a table created or deleted).
    catalog_changed: bool,
    /// Table counters set by this transaction, written at commit with the
    /// table (FORMAT.md, "etcd key layout": `P/n/<table>`).
    counters: BTreeMap<String, u64>,
    /// Building marks (`P/b/<table>`) written (`Some`) or deleted (`None`)
    /// by this transaction.
    marks: BTreeMap<String, Option<Vec<u8>>>,
}

impl WriteState {
    /// Whether the value of `key` at the start revision is known.
    fn knows(&self, key: &[u8], catalog_start: &[u8]) -> bool {
        self.fetched.contains_key(key)
            || self
                .catalog_fetched_to
                .as_deref()
                .is_some_and(|to| catalog_start <= key && key < to)
    }
}

/// A write transaction: reads at its start revision, buffered writes, one
/// atomic, serializable commit. Dropping it without committing aborts it.
pub struct WriteTransaction<'db> {
    db: &'db EtcdDatabase,
    /// The start revision: fixed by the first request (`None`: none made).
    revision: Cell<Option<Revision>>,
    state: RefCell<WriteState>,
}

impl<'db> WriteTransaction<'db> {
    /// A transaction whose start revision is fixed by its first request (a
    /// linearizable read at the cluster's newest revision).
    pub(crate) fn new(db: &'db EtcdDatabase) -> Self {
        WriteTransaction {
            db,
            revision: Cell::new(None),
            state: RefCell::new(WriteState::default()),
        }
    }

    /// The revision this transaction reads at: the one its first read was
    /// made at (a linearizable read, so it includes every commit
    /// acknowledged before that read); asked of the cluster if nothing was
    /// read yet.
    pub fn revision(&self) -> Result<Revision> {
        if let Some(r) = self.revision.get() {
            return Ok(r);
        }
        let r = self.db.current_revision()?;
        self.revision.set(Some(r));
        Ok(r)
    }

    /// Fetches, in one request at the start revision, those of `keys` not
    /// fetched yet and, on the transaction's first request, the catalog's
    /// first [`CATALOG_READ_AHEAD_KEYS`] keys. The first request fixes the
    /// start revision. Nothing is recorded for the commit yet
    /// ([`used`](Self::used) does).
    fn fetch(&self, keys: &[Vec<u8>]) -> Result<()> {
        let (catalog_start, catalog_end) = self.db.layout.catalog_range();
        let mut reads: Vec<(Vec<u8>, GetOptions)> = Vec::new();
        let read_ahead = {
            let st = self.state.borrow();
            for k in keys {
                if !st.knows(k, &catalog_start) && !reads.iter().any(|(r, _)| r == k) {
                    reads.push((k.clone(), GetOptions::new()));
                }
            }
            if reads.is_empty() {
                return Ok(());
            }
            st.catalog_fetched_to.is_none()
        };
        let point_reads = reads.len();
        if read_ahead {
            let catalog = GetOptions::new()
                .with_range(catalog_end.clone())
                .with_limit(CATALOG_READ_AHEAD_KEYS);
            reads.push((catalog_start, catalog));
        }
        let keys: Vec<Vec<u8>> = reads.iter().map(|(k, _)| k.clone()).collect();
        let (at, answers) = self.db.read_txn(reads, self.revision.get())?;
        if self.revision.get().is_none() {
            self.revision.set(Some(at));
        }
        let mut st = self.state.borrow_mut();
        for (i, (key, answer)) in keys.into_iter().zip(answers).enumerate() {
            if i < point_reads {
                let found = answer.kvs.into_iter().next().map(|(_, v, m)| (v, m));
                st.fetched.entry(key).or_insert(found);
                continue;
            }
            let to = match (answer.more, answer.kvs.last()) {
                (true, Some((last, _, _))) => crate::keys::successor(last.clone()),
                _ => catalog_end.clone(),
            };
            for (k, v, m) in answer.kvs {
                st.fetched.entry(k).or_insert(Some((v, m)));
            }
            st.catalog_fetched_to = Some(to);
        }
        Ok(())
    }

    /// The fetched value and mod revision of `key` (fetched before), now
    /// recorded for the commit's compares.
    fn used(&self, key: Vec<u8>) -> Option<(Vec<u8>, i64)> {
        let mut st = self.state.borrow_mut();
        let found = st.fetched.get(&key).cloned().flatten();
        let seen = found.as_ref().map_or(0, |(_, m)| *m);
        st.reads.entry(key).or_insert(seen);
        found
    }

    /// Reads `key` at the start revision (once per transaction) and
    /// records it for the commit's compares.
    fn read_key(&self, key: Vec<u8>) -> Result<Option<Vec<u8>>> {
        self.fetch(std::slice::from_ref(&key))?;
        Ok(self.used(key).map(|(v, _)| v))
    }

    /// The building mark of `table` in this transaction's view (its
    /// value: the last data key indexed), recorded for the commit's
    /// compares (FORMAT.md, "etcd key layout", `P/b/<table>`).
    pub(crate) fn building_mark(&self, table: &str) -> Result<Option<Vec<u8>>> {
        if let Some(m) = self.state.borrow().marks.get(table) {
            return Ok(m.clone());
        }
        self.read_key(self.db.layout.building(table))
    }

    /// Writes (`Some`) or deletes (`None`) the building mark of `table`
    /// at commit.
    pub(crate) fn set_building_mark(&self, table: &str, value: Option<Vec<u8>>) {
        self.state
            .borrow_mut()
            .marks
            .insert(table.to_string(), value);
    }

    /// The tables whose names start with `prefix` marked as being built,
    /// at the start revision (not recorded: the planner leaves them out,
    /// and a mark is added or removed only with a change of the
    /// collection's metadata, which a writer reads).
    pub(crate) fn building_tables(&self, prefix: &str) -> Result<Vec<String>> {
        let revision = self.revision()?;
        let st = self.state.borrow();
        let mut names: Vec<String> = building_tables_at(self.db, prefix, revision)?
            .into_iter()
            .map(|(t, _)| t)
            .filter(|t| !matches!(st.marks.get(t), Some(None)))
            .collect();
        for (t, m) in &st.marks {
            if m.is_some() && t.starts_with(prefix) && !names.contains(t) {
                names.push(t.clone());
            }
        }
        Ok(names)
    }

    /// Whether a table's state is loaded (its catalog key read).
    fn loaded(&self, name: &str) -> bool {
        self.state.borrow().tables.contains_key(name)
    }

    /// The counter kept with `table` in this transaction's view
    /// (FORMAT.md, "etcd key layout", `P/n/<table>`): the value this
    /// transaction set; else, while it has not changed the table, the
    /// cluster's when valid (its mod revision is the table version key's:
    /// both written by the commit that last wrote the table). Both keys
    /// are read in one request (with the catalog key on the table's first
    /// use) and compared at commit. `None`: no valid counter, the caller
    /// derives the value from the table.
    pub(crate) fn counter(&self, table: &str) -> Result<Option<u64>> {
        if let Some(&v) = self.state.borrow().counters.get(table) {
            return Ok(Some(v));
        }
        let untouched = |tx: &Self| tx.with_table(table, |t| t.existed && !t.touched);
        if self.loaded(table) && !untouched(self)? {
            return Ok(None);
        }
        let layout = &self.db.layout;
        let (counter, version) = (layout.counter(table), layout.version(table));
        let mut keys = vec![version.clone(), counter.clone()];
        if !self.loaded(table) {
            keys.push(layout.catalog(table));
        }
        self.fetch(&keys)?;
        if !untouched(self)? {
            return Ok(None);
        }
        let (Some((value, counter_mod)), Some((_, version_mod))) =
            (self.used(counter.clone()), self.used(version))
        else {
            return Ok(None);
        };
        if counter_mod != version_mod {
            return Ok(None);
        }
        parse_counter(self.db, &counter, &value).map(Some)
    }

    /// Sets the counter kept with `table`, written at commit (the caller
    /// writes the table in this transaction: otherwise the counter is
    /// written but not valid).
    pub(crate) fn set_counter(&self, table: &str, value: u64) {
        self.state
            .borrow_mut()
            .counters
            .insert(table.to_string(), value);
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
        let mut names: std::collections::BTreeSet<String> =
            list_tables_at(self.db, self.revision()?)?
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
        if !state.catalog_changed
            && state.tables.values().all(|t| !t.touched)
            && state.marks.is_empty()
        {
            return match self.revision.get() {
                Some(r) => Ok(r),
                None => self.db.current_revision(),
            };
        }
        // A transaction that read nothing has no compares: it cannot
        // conflict, and its commit names no read revision.
        let read_revision = self.revision.get().unwrap_or(Revision(0));
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
                    delete(&mut ops, layout.counter(&name), None);
                    if !state.marks.contains_key(&name) {
                        // An index dropped while being built: its mark goes.
                        delete(&mut ops, layout.building(&name), None);
                    }
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
            if let Some(&value) = state.counters.get(&name) {
                put(
                    &mut ops,
                    layout.counter(&name),
                    crate::keys::counter_value(value),
                );
            }
        }
        if state.catalog_changed {
            put(&mut ops, layout.catalog_version(), Vec::new());
        }
        for (table, mark) in state.marks {
            match mark {
                Some(value) => put(&mut ops, layout.building(&table), value),
                None => delete(&mut ops, layout.building(&table), None),
            }
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
        db.send_txn(compares, ops, read_revision)?
            .ok_or(Error::Conflict { read_revision })
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
        let data = self.tx.db.layout.data(&self.name, key);
        if !self.tx.loaded(&self.name) {
            // The table's first use: its catalog key and the entry in one
            // request.
            let catalog = self.tx.db.layout.catalog(&self.name);
            self.tx.fetch(&[catalog, data.clone()])?;
        }
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
            None => self.tx.read_key(data),
        }
    }

    /// Whether the table holds no entry in the transaction's view (see
    /// [`Table::len`]).
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    /// The number of entries in the transaction's view: the cluster's
    /// count at the start revision, corrected by the buffered writes. The
    /// table's version is recorded as a range read records it, so an entry
    /// added or removed by another commit meanwhile is a conflict.
    pub fn len(&self) -> Result<u64> {
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
        let revision = self.tx.revision()?;
        let mut n = u64::try_from(db.count_at(start, end, revision)?).unwrap_or(0);
        for (key, put) in writes {
            // Not recorded: the version key covers every entry.
            let existed = db
                .get_at(db.layout.data(&self.name, &key), revision)?
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
                db.range_page_at(start.clone(), end.clone(), self.tx.revision()?, 8, true)?;
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
    /// that cannot fit in one etcd request are refused here
    /// ([`Error::EntryTooLarge`], naming the table, the key and the size).
    pub fn insert(&self, key: &[u8], value: &[u8]) -> Result<()> {
        let db = self.tx.db;
        let size = db.layout.data_header_len(&self.name)
            + key.len()
            + value.len()
            + REQUEST_OVERHEAD_BYTES_PER_OP;
        if size > db.options.max_request_bytes {
            return Err(Error::EntryTooLarge {
                table: self.name.clone(),
                key: key.escape_ascii().to_string(),
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

    /// The first `limit` entries of `range` in the transaction's view (all
    /// if it holds fewer), read in one request of at most `limit` plus the
    /// number of this transaction's writes in the range: recorded as
    /// [`range`](Self::range) records it.
    pub(crate) fn range_head<'r>(
        &self,
        range: impl RangeBounds<&'r [u8]>,
        limit: usize,
    ) -> Result<Vec<Entry>> {
        let db = self.tx.db;
        let (start, end) = bounds(&range);
        let Some((s, e)) = db.layout.data_bounds(&self.name, start, end) else {
            return Ok(Vec::new());
        };
        let (cleared, buffered) = self.tx.with_table(&self.name, |t| {
            let n = t.writes.range::<[u8], _>((start, end)).count();
            (t.cleared || !t.exists, n)
        })?;
        let mut merged: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        // The cluster's entries after `cut` were not read.
        let mut cut: Option<Vec<u8>> = None;
        if !cleared {
            self.tx.read_key(db.layout.version(&self.name))?;
            let header = db.layout.data_header_len(&self.name);
            let want = i64::try_from(limit.saturating_add(buffered).max(1)).unwrap_or(i64::MAX);
            let (page, more) = db.range_page_at(s, e, self.tx.revision()?, want, false)?;
            for (k, v) in page {
                merged.insert(k[header..].to_vec(), v);
            }
            if more {
                cut = merged.keys().next_back().cloned();
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
        Ok(merged
            .into_iter()
            .filter(|(k, _)| cut.as_ref().is_none_or(|c| k <= c))
            .take(limit)
            .collect())
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
            for (k, v) in db.range_at(s, e, self.tx.revision()?)? {
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
