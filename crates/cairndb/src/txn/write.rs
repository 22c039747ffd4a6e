//! The write transaction: the single-writer lock, the tables it checked
//! out of the catalog, changes made in the overlay or in the trees, and the
//! commit that publishes them (FORMAT.md, "Commit protocol").

use std::any::TypeId;
use std::cell::{Cell, RefCell, RefMut};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::btree::tree::Ctx;
use crate::btree::TreeMut;
use crate::catalog::{list_catalog, lookup_table, TableRecord};
use crate::commit::log::OpLog;
use crate::commit::memtable::Memtable;
use crate::commit::overlay::{self, Delta, Overlay};
use crate::commit::snapshots::CachedRecord;
use crate::commit::writer::WriterStart;
use crate::commit::{Carry, Durability, Shared, TableCache};
use crate::error::{CoreError, Result, TypeMismatch};
use crate::ids::TxnId;
use crate::limits;
use crate::pager::alloc::TxnAllocator;
use crate::pager::header::{CommitRecord, PageRef};
use crate::pager::PageWrite;

/// A table's state inside the write transaction.
pub(crate) struct TableSlot {
    /// `None` while a `Table` handle has it checked out.
    pub tree: Option<TreeMut>,
    /// The table's overlay delta (checked out with the tree).
    pub delta: Delta,
    pub original: PageRef,
    pub original_len: u64,
    /// The record it was opened from, for its type names (shared with the
    /// catalog's cache: nothing copied per transaction).
    pub types: Arc<CachedRecord>,
    /// The Rust (key, value) types already checked against the type names
    /// in this transaction (a second open compares two ids, not strings).
    pub checked: Option<(TypeId, TypeId)>,
    pub created: bool,
}

/// The tables a transaction has opened, by name, in name order: a vector
/// searched by bisection (a transaction opens a handful of tables, and a
/// map's nodes cost an allocation per transaction and moves of whole
/// slots).
#[derive(Default)]
pub(crate) struct Slots(Vec<(Arc<str>, TableSlot)>);

impl Slots {
    fn find(&self, name: &str) -> std::result::Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| (**k).cmp(name))
    }

    pub(crate) fn contains_key(&self, name: &str) -> bool {
        self.find(name).is_ok()
    }

    pub(crate) fn get(&self, name: &str) -> Option<&TableSlot> {
        self.find(name).ok().map(|i| &self.0[i].1)
    }

    pub(crate) fn get_mut(&mut self, name: &str) -> Option<&mut TableSlot> {
        self.find(name).ok().map(|i| &mut self.0[i].1)
    }

    /// Slot `i` (a place `find` gave) with the name as the transaction
    /// keys it.
    fn named_at_mut(&mut self, i: usize) -> Option<(Arc<str>, &mut TableSlot)> {
        let (k, slot) = self.0.get_mut(i)?;
        Some((k.clone(), slot))
    }

    /// Opens `name` at `at`, the place `find` gave for it.
    fn insert_at(&mut self, at: usize, name: Arc<str>, slot: TableSlot) {
        self.0.insert(at, (name, slot));
    }

    pub(crate) fn remove(&mut self, name: &str) -> Option<TableSlot> {
        self.find(name).ok().map(|i| self.0.remove(i).1)
    }

    pub(crate) fn keys(&self) -> impl Iterator<Item = &Arc<str>> {
        self.0.iter().map(|(k, _)| k)
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = &TableSlot> {
        self.0.iter().map(|(_, s)| s)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&Arc<str>, &TableSlot)> {
        self.0.iter().map(|(k, s)| (k, s))
    }

    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (&Arc<str>, &mut TableSlot)> {
        self.0.iter_mut().map(|(k, s)| (&*k, s))
    }
}

/// What a checkout checks a table's type names against.
#[derive(Clone, Copy)]
pub(crate) enum Types<'a> {
    /// Untyped access: no check; a missing table is created as
    /// `&[u8]`/`&[u8]`.
    Untyped,
    /// These names.
    Named(&'a str, &'a str),
    /// A typed table: its Rust types' ids, and their names (computed only
    /// when the ids have not been checked in this transaction).
    Typed((TypeId, TypeId), fn() -> (String, String)),
}

pub(crate) struct WriteInner {
    pub alloc: Option<TxnAllocator>,
    pub catalog: TreeMut,
    pub tables: Slots,
    pub carry: Carry,
    /// The overlay as of the base commit, less the deltas of tables that
    /// have a slot (the slots hold those) or were deleted.
    pub overlay: Overlay,
    /// Pages of trees already serialized by `spill_all_before_commit`.
    pub finalized: Vec<PageWrite>,
}

/// The one write transaction. Changes are private until [`commit`]; dropping
/// it without committing aborts.
///
/// [`commit`]: WriteTransaction::commit
pub struct WriteTransaction {
    pub(crate) shared: Arc<Shared>,
    pub(crate) txn: TxnId,
    /// The trees' latest commit when the transaction began.
    base: CommitRecord,
    /// The table records of `base`'s catalog looked up so far (shared with
    /// the readers and writers of that commit).
    catalog_cache: Arc<TableCache>,
    pub(crate) inner: RefCell<WriteInner>,
    durability: Cell<Durability>,
    /// A delta was changed (or dropped): the commit has something to publish
    /// even if no tree changed.
    overlay_changed: Cell<bool>,
    /// Changes this transaction put into the overlay.
    overlay_changes: Cell<usize>,
    finished: Cell<bool>,
    /// Commit even if no table changed (compaction's free-list rewrite).
    force: Cell<bool>,
    /// Set when a change failed part-way (e.g. the file size limit was hit
    /// during a split): the transaction can then only be aborted.
    broken: RefCell<Option<String>>,
    /// This transaction's overlay changes as a commit-log record, and
    /// whether it changed a tree directly (then it cannot be logged).
    oplog: RefCell<OpLog>,
    /// The transaction that spills the overlay: if it fails, ending it must
    /// not start another spill (which would fail the same way, forever).
    pub(crate) is_spill: Cell<bool>,
    /// A non-durable commit that stages its pages whatever the stage limit
    /// (the background spill does no I/O; the next commit writes out).
    pub(crate) stage_only: Cell<bool>,
    /// The memtable this transaction's overlay changes go into (the base
    /// overlay's); its entries there are marked aborted unless the commit
    /// publishes them.
    pub(crate) mem: Arc<Memtable>,
}

impl std::fmt::Debug for WriteTransaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteTransaction")
            .field("txn", &self.txn)
            .finish()
    }
}

impl WriteTransaction {
    pub(crate) fn begin(shared: Arc<Shared>) -> Result<Self> {
        Self::begin_inner(shared, true)?
            .ok_or_else(|| CoreError::Internal("the writer lock was not taken".into()))
    }

    /// Begins a write transaction only if no other one is open (`None`
    /// otherwise): the background spill never waits for the writer.
    pub(crate) fn try_begin(shared: Arc<Shared>) -> Result<Option<Self>> {
        Self::begin_inner(shared, false)
    }

    fn begin_inner(shared: Arc<Shared>, wait: bool) -> Result<Option<Self>> {
        let Some(start) = shared.acquire_writer(wait)? else {
            return Ok(None);
        };
        let WriterStart {
            alloc,
            carry,
            base,
            visible,
            overlay,
            tables: catalog_cache,
        } = start;
        let txn = TxnId(visible.0 + 1);
        let mem = overlay.mem.clone();
        Ok(Some(WriteTransaction {
            txn,
            base,
            catalog_cache,
            inner: RefCell::new(WriteInner {
                alloc: Some(TxnAllocator::new(alloc, txn)),
                catalog: TreeMut::new(base.catalog, 0),
                tables: Slots::default(),
                carry,
                overlay,
                finalized: Vec::new(),
            }),
            shared,
            durability: Cell::new(Durability::Immediate),
            overlay_changed: Cell::new(false),
            overlay_changes: Cell::new(0),
            finished: Cell::new(false),
            force: Cell::new(false),
            broken: RefCell::new(None),
            oplog: RefCell::new(OpLog::default()),
            is_spill: Cell::new(false),
            stage_only: Cell::new(false),
            mem,
        }))
    }

    /// Sets the durability of this commit. Set before writing, so that
    /// small changes of a [`Durability::None`] transaction go to the overlay
    /// (see [`Builder::overlay_size`](crate::Builder::overlay_size)).
    pub fn set_durability(&self, d: Durability) {
        self.durability.set(d);
    }

    /// Whether a change with a value of `vlen` bytes goes to the overlay:
    /// small values, in a transaction that has not made many changes there
    /// yet, with the overlay on — in a non-durable transaction, or in any
    /// while the commit log is on (a durable commit of overlay changes is
    /// then a log commit).
    #[inline]
    pub(crate) fn to_overlay(&self, vlen: usize) -> bool {
        self.overlay_changes.get() < overlay::MAX_TXN_CHANGES && self.may_overlay(vlen)
    }

    /// Whether a change with a value of `vlen` bytes may go to the overlay
    /// past the bound on a transaction's changes (a table whose changes land
    /// scattered, `Table::goes_to_overlay`): in a non-durable transaction
    /// only — a durable one that wrote a tree directly is no log commit, and
    /// applies the whole overlay to the trees when it commits, so holding
    /// its changes there first would gain nothing.
    #[inline]
    pub(crate) fn may_hold_overlay(&self, vlen: usize) -> bool {
        self.durability.get() == Durability::None && self.may_overlay(vlen)
    }

    /// Whether a change with a value of `vlen` bytes may go to the overlay
    /// at all: `to_overlay` without the bound on a transaction's changes.
    #[inline]
    fn may_overlay(&self, vlen: usize) -> bool {
        (self.durability.get() == Durability::None || self.shared.log_max_pages > 0)
            && vlen <= overlay::MAX_VALUE
            && self.shared.overlay_bytes > 0
    }

    /// Notes that a delta changed: `key → value` (`None`: removed) in
    /// `table`, which also goes into the commit-log record.
    pub(crate) fn overlay_changed(&self, table: &str, key: &[u8], value: Option<&[u8]>) {
        self.overlay_changed.set(true);
        self.overlay_changes.set(self.overlay_changes.get() + 1);
        if let Ok(mut log) = self.oplog.try_borrow_mut() {
            log.put(table, key, value);
        }
    }

    /// Notes a change that is not an overlay change (a tree written
    /// directly, a table created or deleted): the commit cannot be logged.
    fn changed_directly(&self) {
        if let Ok(mut log) = self.oplog.try_borrow_mut() {
            log.direct = true;
        }
    }

    /// Applies `delta` to `tree` in key order and empties it.
    pub(crate) fn spill(&self, tree: &mut TreeMut, delta: &mut Delta) -> Result<()> {
        if delta.is_empty() {
            return Ok(());
        }
        let expected = tree.len as i64 + delta.len;
        // Moving overlay entries into the tree changes nothing logical: the
        // records of the commits that made them stand.
        self.with_ctx_inner(
            |ctx, t| {
                // In key order: most keys land in the leaf the one before
                // went to, without a descent from the root.
                for (k, v) in delta.entries() {
                    if let Some(d) = t.apply_in_order(ctx, k, v)? {
                        d.take(ctx, false)?;
                    }
                }
                Ok(())
            },
            tree,
            false,
        )?;
        if tree.len as i64 != expected {
            return Err(CoreError::Internal(format!(
                "the overlay's count for a table is off: {} entries after applying it, {expected} expected",
                tree.len
            )));
        }
        delta.reset();
        self.overlay_changed.set(true);
        Ok(())
    }

    /// Applies every table's delta to its tree.
    pub(crate) fn spill_all(&self) -> Result<()> {
        self.spill_tables(false)
    }

    /// Applies every table's delta to its tree as the last change before
    /// this transaction commits: each tree is serialized as soon as its
    /// delta is in, so the decoded nodes of one table at a time are held
    /// rather than of all of them (a spill of a full overlay touches most
    /// leaves of every index). Nothing may change a tree after this.
    pub(crate) fn spill_all_before_commit(&self) -> Result<()> {
        self.spill_tables(true)
    }

    fn spill_tables(&self, finalize: bool) -> Result<()> {
        let names: Vec<Arc<str>> = {
            let inner = self.borrow()?;
            let mut names: Vec<Arc<str>> = inner.overlay.tables.keys().cloned().collect();
            names.extend(
                inner
                    .tables
                    .iter()
                    .filter(|(_, s)| !s.delta.is_empty())
                    .map(|(n, _)| n.clone()),
            );
            names
        };
        for name in names {
            let Some((_, mut tree, mut delta)) =
                self.checkout_with(&name, Types::Untyped, false)?
            else {
                continue;
            };
            let mut res = self.spill(&mut tree, &mut delta);
            if res.is_ok() && finalize {
                res = match self.borrow() {
                    Ok(mut inner) => {
                        tree.finalize(&self.shared.pager, self.txn, &mut inner.finalized)
                    }
                    Err(e) => Err(e),
                };
            }
            self.checkin(&name, tree, delta);
            res?;
        }
        Ok(())
    }

    /// Whether the pages this transaction changed (counted by what it
    /// allocated), staged beside those already staged, would pass the stage
    /// limit, so that its commit writes out.
    fn would_pass_stage_limit(&self) -> Result<bool> {
        let inner = self.borrow()?;
        let mine = inner.alloc.as_ref().map_or(0, |a| a.allocated_count());
        // The catalog's leaf and the path above it are copied at commit.
        let catalog = 4;
        Ok(inner.carry.staged.len() + mine + catalog > self.shared.pager.stage_limit())
    }

    /// Memory the overlay would hold after this transaction.
    fn overlay_bytes(&self) -> Result<usize> {
        let inner = self.borrow()?;
        Ok(inner.overlay.bytes())
    }

    /// The id this transaction's commit will have.
    pub fn txn_id(&self) -> TxnId {
        self.txn
    }

    /// Why a change that failed part-way left this transaction unable to
    /// commit, if one did.
    pub(crate) fn broken_cause(&self) -> Option<String> {
        self.broken.try_borrow().ok().and_then(|b| b.clone())
    }

    /// The commit this transaction started from (ids are dense: the
    /// latest commit when it took the writer lock).
    pub(crate) fn base_commit(&self) -> TxnId {
        TxnId(self.txn.0.saturating_sub(1))
    }

    /// [`Shared::memo`] of the base commit, while table `name` is still
    /// exactly as there: not opened in this transaction and no table
    /// created or deleted (the catalog untouched).
    pub(crate) fn base_memo(&self, key: &'static str, name: &str) -> Option<u64> {
        let untouched = self
            .inner
            .try_borrow()
            .is_ok_and(|i| !i.catalog.is_dirty() && !i.tables.contains_key(name));
        untouched.then(|| self.shared.memo(key, self.base_commit()))?
    }

    /// Whether this transaction has changed table `name` so far: its tree,
    /// its overlay delta or its existence (created here: the slot says so;
    /// deleted: the catalog of tables has changed pages). Conservative:
    /// true whenever the catalog of tables has changed pages, and while the
    /// table is checked out; false for a table it never opened (every
    /// change goes through an opened table).
    pub(crate) fn table_changed(&self, name: &str) -> bool {
        let Ok(inner) = self.inner.try_borrow() else {
            return true;
        };
        if inner.catalog.is_dirty() {
            return true;
        }
        match inner.tables.get(name) {
            None => false,
            Some(s) => {
                s.created
                    || s.delta.written_by(self.txn)
                    || match &s.tree {
                        None => true,
                        Some(t) => t.root != s.original || t.len != s.original_len || t.is_dirty(),
                    }
            }
        }
    }

    pub(crate) fn borrow(&self) -> Result<RefMut<'_, WriteInner>> {
        self.inner
            .try_borrow_mut()
            .map_err(|_| CoreError::TransactionBusy)
    }

    /// Runs a change of `tree` directly (not through the overlay).
    pub(crate) fn with_ctx<R>(
        &self,
        f: impl FnOnce(&mut Ctx, &mut TreeMut) -> Result<R>,
        tree: &mut TreeMut,
    ) -> Result<R> {
        self.with_ctx_inner(f, tree, true)
    }

    fn with_ctx_inner<R>(
        &self,
        f: impl FnOnce(&mut Ctx, &mut TreeMut) -> Result<R>,
        tree: &mut TreeMut,
        direct: bool,
    ) -> Result<R> {
        if direct {
            self.changed_directly();
        }
        let mut inner = self.borrow()?;
        let alloc = inner.alloc.as_mut().ok_or_else(|| {
            CoreError::Internal("the write transaction has no allocator (it has ended)".into())
        })?;
        let mut ctx = Ctx {
            pager: &self.shared.pager,
            alloc,
            max_file_bytes: self.shared.max_file_bytes,
        };
        let res = f(&mut ctx, tree);
        if let Err(e) = &res {
            // A change that failed part-way may have left the tree half
            // changed: the only safe outcome now is an abort.
            if let Ok(mut b) = self.broken.try_borrow_mut() {
                b.get_or_insert_with(|| e.to_string());
            }
        }
        res
    }

    /// Checks a table out of the transaction (creating it if `create`).
    pub(crate) fn checkout(
        &self,
        name: &str,
        key_type: &str,
        value_type: &str,
        create: bool,
    ) -> Result<Option<(TreeMut, Delta)>> {
        Ok(self
            .checkout_with(name, Types::Named(key_type, value_type), create)?
            .map(|(_, t, d)| (t, d)))
    }

    /// Checks a table out, with its name as the transaction keys it.
    pub(crate) fn checkout_with(
        &self,
        name: &str,
        types: Types<'_>,
        create: bool,
    ) -> Result<Option<(Arc<str>, TreeMut, Delta)>> {
        let mut inner = self.borrow()?;
        let page_size = self.shared.pager.page_size();
        // One search of the opened tables: the place found is where a table
        // opened now goes (nothing else changes them meanwhile).
        let found = inner.tables.find(name);
        if let Err(at) = found {
            let src = inner.catalog.source(&self.shared.pager);
            let root = inner.catalog.root;
            // While this transaction has not changed the catalog, it is the
            // base commit's, whose records the cache holds.
            let unchanged = !inner.catalog.is_dirty() && root == self.base.catalog;
            let record = match unchanged.then(|| self.catalog_cache.record(name)).flatten() {
                // (A cached record's name was checked when it was created.)
                Some(rec) => Some(rec),
                // Known to be missing from this catalog (the name is
                // checked: it may be created below).
                None if unchanged && self.catalog_cache.is_absent(name) => {
                    limits::check_table_name_syntax(name)?;
                    None
                }
                None => match limits::check_table_name_syntax(name)
                    .and_then(|()| lookup_table(src, root, name, page_size))?
                {
                    Some(rec) => {
                        let key: Arc<str> = Arc::from(name);
                        let rec = CachedRecord::new(rec);
                        if unchanged {
                            self.catalog_cache.put_record(&key, &rec);
                        }
                        Some((key, rec))
                    }
                    None => {
                        if unchanged {
                            self.catalog_cache.put_absent(name);
                        }
                        None
                    }
                },
            };
            let (key, slot) = match record {
                Some((key, rec)) => {
                    let delta = inner.overlay.tables.remove(name).unwrap_or_default();
                    (
                        key,
                        TableSlot {
                            tree: Some(TreeMut::new(rec.rec.root, rec.rec.len)),
                            delta,
                            original: rec.rec.root,
                            original_len: rec.rec.len,
                            checked: rec.typed.get().copied(),
                            types: rec,
                            created: false,
                        },
                    )
                }
                None if create => {
                    let (key_type, value_type) = match types {
                        Types::Untyped => ("&[u8]".to_string(), "&[u8]".to_string()),
                        Types::Named(k, v) => (k.to_string(), v.to_string()),
                        Types::Typed(_, names) => names(),
                    };
                    limits::check_table_record_len(name, &key_type, &value_type, page_size)?;
                    self.changed_directly();
                    (
                        Arc::from(name),
                        TableSlot {
                            tree: Some(TreeMut::new(PageRef::NONE, 0)),
                            delta: Delta::default(),
                            original: PageRef::NONE,
                            original_len: 0,
                            types: CachedRecord::new(TableRecord {
                                root: PageRef::NONE,
                                len: 0,
                                key_type,
                                value_type,
                            }),
                            checked: None,
                            created: true,
                        },
                    )
                }
                None => return Ok(None),
            };
            inner.tables.insert_at(at, key, slot);
        }
        let at = found.unwrap_or_else(|at| at);
        let Some((key, slot)) = inner.tables.named_at_mut(at) else {
            return Ok(None);
        };
        let mismatch = |k: &str, v: &str| {
            CoreError::TableTypeMismatch(Box::new(TypeMismatch {
                name: name.to_string(),
                stored_key: slot.types.rec.key_type.clone(),
                stored_value: slot.types.rec.value_type.clone(),
                requested_key: k.to_string(),
                requested_value: v.to_string(),
            }))
        };
        match types {
            Types::Untyped => {}
            Types::Named(k, v) => {
                if slot.types.rec.key_type != k || slot.types.rec.value_type != v {
                    return Err(mismatch(k, v));
                }
            }
            Types::Typed(ids, names) => {
                if slot.checked != Some(ids) {
                    let (k, v) = names();
                    if slot.types.rec.key_type != k || slot.types.rec.value_type != v {
                        return Err(mismatch(&k, &v));
                    }
                    slot.checked = Some(ids);
                    let _ = slot.types.typed.set(ids);
                }
            }
        }
        match slot.tree.take() {
            Some(t) => Ok(Some((key, t, std::mem::take(&mut slot.delta)))),
            None => Err(CoreError::TableAlreadyOpen(name.to_string())),
        }
    }

    /// Returns a checked-out table.
    pub(crate) fn checkin(&self, name: &str, tree: TreeMut, delta: Delta) {
        if let Ok(mut inner) = self.inner.try_borrow_mut() {
            if let Some(slot) = inner.tables.get_mut(name) {
                slot.tree = Some(tree);
                slot.delta = delta;
            }
        }
    }

    /// Deletes a table and frees its pages. Returns whether it existed.
    pub fn delete_table(&self, name: &str) -> Result<bool> {
        limits::check_table_name(name)?;
        self.delete_table_unchecked(name)
    }

    /// Deletes a table of an upper layer (its name may start with `$`).
    pub(crate) fn delete_internal_table(&self, name: &str) -> Result<bool> {
        limits::check_table_name_syntax(name)?;
        self.delete_table_unchecked(name)
    }

    fn delete_table_unchecked(&self, name: &str) -> Result<bool> {
        let (mut tree, existed_in_catalog) = {
            let mut inner = self.borrow()?;
            if matches!(inner.tables.get(name), Some(TableSlot { tree: None, .. })) {
                return Err(CoreError::TableAlreadyOpen(name.to_string()));
            }
            if inner.overlay.tables.remove(name).is_some() {
                self.overlay_changed.set(true);
            }
            self.changed_directly();
            match inner.tables.remove(name) {
                Some(TableSlot { tree: None, .. }) => {
                    return Err(CoreError::TableAlreadyOpen(name.to_string()))
                }
                Some(TableSlot {
                    tree: Some(t),
                    created,
                    delta,
                    ..
                }) => {
                    if !delta.is_empty() {
                        self.overlay_changed.set(true);
                    }
                    (t, !created)
                }
                None => {
                    let src = inner.catalog.source(&self.shared.pager);
                    let root = inner.catalog.root;
                    match lookup_table(src, root, name, self.shared.pager.page_size())? {
                        Some(rec) => (TreeMut::new(rec.root, rec.len), true),
                        None => return Ok(false),
                    }
                }
            }
        };
        let mut catalog = std::mem::take(&mut self.borrow()?.catalog);
        let res = self.with_ctx(
            |ctx, tree| {
                tree.free_all(ctx)?;
                if existed_in_catalog {
                    if let Some(d) = catalog.remove(ctx, name.as_bytes())? {
                        d.take(ctx, false)?;
                    }
                }
                Ok(())
            },
            &mut tree,
        );
        self.borrow()?.catalog = catalog;
        res?;
        Ok(true)
    }

    /// The key and value type names a table was created with, if it exists.
    pub fn table_types(&self, name: &str) -> Result<Option<(String, String)>> {
        let inner = self
            .inner
            .try_borrow()
            .map_err(|_| CoreError::TransactionBusy)?;
        if let Some(slot) = inner.tables.get(name) {
            return Ok(Some((
                slot.types.rec.key_type.clone(),
                slot.types.rec.value_type.clone(),
            )));
        }
        // While this transaction has not changed the catalog, it is the
        // base commit's, whose lookups the cache holds (as `checkout_with`).
        let unchanged = !inner.catalog.is_dirty() && inner.catalog.root == self.base.catalog;
        if unchanged {
            if let Some((_, rec)) = self.catalog_cache.record(name) {
                return Ok(Some((rec.rec.key_type.clone(), rec.rec.value_type.clone())));
            }
            if self.catalog_cache.is_absent(name) {
                return Ok(None);
            }
        }
        let src = inner.catalog.source(&self.shared.pager);
        let found = lookup_table(src, inner.catalog.root, name, self.shared.pager.page_size())?;
        if unchanged {
            match &found {
                None => self.catalog_cache.put_absent(name),
                // (Only a valid name is remembered: `checkout_with` takes a
                // cached record's name as checked.)
                Some(rec) if limits::check_table_name_syntax(name).is_ok() => {
                    self.catalog_cache
                        .put_record(&Arc::from(name), &CachedRecord::new(rec.clone()));
                }
                Some(_) => {}
            }
        }
        Ok(found.map(|r| (r.key_type, r.value_type)))
    }

    /// Names of every table visible in this transaction, in order.
    pub fn list_tables(&self) -> Result<Vec<String>> {
        let inner = self
            .inner
            .try_borrow()
            .map_err(|_| CoreError::TransactionBusy)?;
        let src = inner.catalog.source(&self.shared.pager);
        let mut names: std::collections::BTreeSet<String> = list_catalog(src, inner.catalog.root)?
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        names.extend(inner.tables.keys().map(|k| k.to_string()));
        Ok(names.into_iter().collect())
    }

    /// Compaction: moves every page above the in-use count down into free
    /// pages (lowest first), in the catalog and every table.
    /// With `repack`, trees are first repacked (`TreeMut::repack`).
    pub(crate) fn relocate_all(&self, repack: bool) -> Result<()> {
        // The overlay goes into the trees first, so its pages move down too.
        self.spill_all()?;
        let boundary = {
            let inner = self.borrow()?;
            let a = inner.alloc.as_ref().map(|a| &a.base);
            a.map(|a| a.page_count() - a.free_pages()).unwrap_or(0)
        };
        let names: Vec<String> = {
            let inner = self.borrow()?;
            let src = inner.catalog.source(&self.shared.pager);
            list_catalog(src, inner.catalog.root)?
                .into_iter()
                .map(|(n, _)| n)
                .collect()
        };
        for name in names {
            let (kt, vt) = {
                let inner = self.borrow()?;
                let src = inner.catalog.source(&self.shared.pager);
                match lookup_table(
                    src,
                    inner.catalog.root,
                    &name,
                    self.shared.pager.page_size(),
                )? {
                    Some(r) => (r.key_type, r.value_type),
                    None => continue,
                }
            };
            if let Some((mut tree, delta)) = self.checkout(&name, &kt, &vt, false)? {
                let res = self.with_ctx(
                    |ctx, t| {
                        if repack {
                            t.repack(ctx)?;
                        }
                        t.relocate(ctx, boundary)
                    },
                    &mut tree,
                );
                self.checkin(&name, tree, delta);
                res?;
            }
        }
        let mut catalog = std::mem::take(&mut self.borrow()?.catalog);
        let res = self.with_ctx(|ctx, t| t.relocate(ctx, boundary), &mut catalog);
        self.borrow()?.catalog = catalog;
        self.force.set(true);
        res
    }

    /// Makes the commit write a new free list even if nothing else changed.
    pub(crate) fn touch_freelist(&self) -> Result<()> {
        self.force.set(true);
        self.changed_directly();
        Ok(())
    }

    /// Discards every change.
    pub fn abort(self) {
        // Drop does the work.
    }

    /// Marks this transaction's memtable entries aborted (it did not
    /// commit): nobody will see them.
    fn abort_entries(&self) {
        self.mem.abort(self.txn);
    }

    fn release_writer(&self, alloc: crate::pager::alloc::Allocator, carry: Carry) {
        self.shared.release_writer(alloc, carry);
    }

    /// Ends the transaction without publishing anything (an abort, or a
    /// commit that failed before it published): its memtable entries are
    /// marked aborted, its allocations undone, the writer lock handed on
    /// with the carried state as it was, and an orphaned overlay spilled.
    fn end_aborted(&self) {
        self.abort_entries();
        if let Ok(mut inner) = self.inner.try_borrow_mut() {
            let carry = std::mem::take(&mut inner.carry);
            if let Some(a) = inner.alloc.take() {
                drop(inner);
                self.release_writer(a.abort(), carry);
            }
        }
        self.spill_if_orphaned();
    }

    /// Commits: writes the changed pages and the commit slot, publishes the
    /// commit to new readers, and (with [`Durability::Immediate`]) returns
    /// once one device flush has made it durable. On error nothing is
    /// committed; if the error was a failed write or flush, the database
    /// handle is poisoned.
    pub fn commit(self) -> Result<TxnId> {
        self.finished.set(true);
        let published = Cell::new(false);
        let res = self.commit_inner(&published);
        if res.is_err() && !published.get() {
            // Nothing was published: the transaction's allocator (restored by
            // `commit_inner` if it had begun to change the shared state) is
            // undone like an abort, and the writer's carried state is still
            // the original (it changes only once a commit cannot fail).
            self.end_aborted();
        }
        res
    }

    /// After this transaction ended without committing: if the `Database`
    /// handle was dropped meanwhile (its drop does not spill while a write
    /// transaction is open), the overlay goes into the trees now, so that
    /// the clean close keeps it. Errors are the close's to report.
    fn spill_if_orphaned(&self) {
        if !self.is_spill.get()
            && !self.shared.handle_open.load(Ordering::SeqCst)
            && !self.shared.pager.is_poisoned()
        {
            let _ = super::spill::spill_overlay(&self.shared);
        }
    }

    /// Whether this commit can be a commit-log record: every change it made
    /// went to the overlay (FORMAT.md, "Commit log").
    fn loggable(&self) -> bool {
        !self.force.get() && self.oplog.try_borrow().is_ok_and(|l| !l.direct)
    }

    /// A durable commit of overlay changes only, as a log commit: its record
    /// goes to the log buffer, the overlay is published, and a flush (shared
    /// with concurrent committers) makes it durable. `None` if the log cannot
    /// take it (no log, or one that no longer holds every commit since its
    /// slot, no room, the overlay over its budget, trees changed by a spill
    /// in this transaction): nothing changed, and the caller checkpoints.
    fn try_log_commit(&self, published: &Cell<bool>) -> Result<Option<TxnId>> {
        let shared = &self.shared;
        if self.overlay_bytes()? > shared.overlay_bytes {
            return Ok(None);
        }
        let mut inner = self.borrow()?;
        let WriteInner {
            alloc: alloc_slot,
            catalog,
            tables,
            carry,
            overlay,
            ..
        } = &mut *inner;
        if !carry.log_ok
            || catalog.is_dirty()
            || alloc_slot.as_ref().is_none_or(|a| !a.freed.is_empty())
            || tables
                .values()
                .any(|s| s.tree.as_ref().is_none_or(TreeMut::is_dirty))
        {
            return Ok(None);
        }
        let oplog = self
            .oplog
            .try_borrow()
            .map_err(|_| CoreError::TransactionBusy)?;
        // An empty commit's id is the latest user commit's (read before the
        // writer lock is handed on, so no commit comes in between).
        let shown = shared.shown();
        let id = if oplog.is_empty() {
            // Nothing changed: wait for the user commits before it, like an
            // empty durable commit (nothing is published). Not for the
            // commit just before it, which may be a staged spill: it has no
            // log record of its own, and the log holds what it changed.
            shown
        } else {
            if !shared.log_durable_record(self.txn, &oplog, carry)? {
                return Ok(None);
            }
            self.txn
        };
        drop(oplog);
        let base = alloc_slot
            .take()
            .ok_or_else(|| {
                CoreError::Internal("the write transaction has no allocator (it has ended)".into())
            })?
            .abort();
        let carry = std::mem::take(carry);
        if id == self.txn {
            let mut new_overlay = overlay.take_tables();
            for (name, slot) in tables.iter() {
                if !slot.delta.is_empty() {
                    new_overlay.tables.insert(name.clone(), slot.delta.clone());
                }
            }
            shared.publish_overlay_commit(self.txn, new_overlay, !self.is_spill.get());
        }
        let shown = if id == self.txn { self.txn } else { shown };
        drop(inner);
        self.release_writer(base, carry);
        published.set(true);
        shared.wait_durable(id)?;
        Ok(Some(shown))
    }

    /// A non-durable commit keeps the commit log complete, so that a later
    /// durable commit or `sync` needs only a log write: its record goes to
    /// the log buffer (written, without a flush, once it is large), or, if
    /// the commit cannot be logged or the log has no room, the log no longer
    /// describes the database until the next slot.
    fn log_nondurable(&self, carry: &mut Carry, loggable: bool) -> Result<()> {
        if !carry.log_ok {
            return Ok(());
        }
        if !loggable {
            carry.log_ok = false;
            return Ok(());
        }
        let oplog = self
            .oplog
            .try_borrow()
            .map_err(|_| CoreError::TransactionBusy)?;
        if oplog.is_empty() {
            // No logical change (a spill of the overlay into the trees).
            return Ok(());
        }
        if !self.shared.log_staged_record(self.txn, &oplog)? {
            carry.log_ok = false;
        }
        Ok(())
    }

    fn commit_inner(&self, published: &Cell<bool>) -> Result<TxnId> {
        let shared = &self.shared;
        let pager = &shared.pager;
        pager.check_writable()?;
        if let Some(cause) = self.broken_cause() {
            return Err(CoreError::TransactionFailed { cause });
        }
        let immediate = self.durability.get() == Durability::Immediate;
        let loggable = self.loggable();
        if immediate && loggable {
            if let Some(id) = self.try_log_commit(published)? {
                return Ok(id);
            }
        }
        // 0. The overlay goes into the trees when this commit must be durable
        // (or compaction's), when the handle is gone (the close that follows
        // must keep it), or when it would outgrow its budget.
        // Also when its staged pages would pass the stage limit: that commit
        // is written out, and a slot must never name trees that lack an
        // earlier commit's overlay changes (a crash would keep this commit
        // and lose one before it).
        if self.durability.get() == Durability::Immediate
            || self.force.get()
            || !shared.handle_open.load(Ordering::SeqCst)
            || self.overlay_bytes()? > shared.overlay_bytes
            || self.would_pass_stage_limit()?
        {
            self.spill_all_before_commit()?;
        }
        let mut inner = self.borrow()?;
        let WriteInner {
            alloc: alloc_slot,
            catalog,
            tables,
            carry,
            overlay,
            finalized,
        } = &mut *inner;
        let no_alloc =
            || CoreError::Internal("the write transaction has no allocator (it has ended)".into());
        // The trees a spill serialized already come first.
        let mut pages: Vec<PageWrite> = std::mem::take(finalized);
        let mut changed = catalog.is_dirty();
        // 1. Tables: serialize changed trees, then record their roots. Until
        // step 2 every change goes through the transaction's allocator, so a
        // failure here is undone like an abort.
        let mut records = Vec::new();
        for (name, slot) in tables.iter_mut() {
            let Some(tree) = slot.tree.as_mut() else {
                return Err(CoreError::TableAlreadyOpen(name.to_string()));
            };
            tree.finalize(pager, self.txn, &mut pages)?;
            if slot.created || tree.root != slot.original || tree.len != slot.original_len {
                records.push((
                    name.to_string(),
                    TableRecord {
                        root: tree.root,
                        len: tree.len,
                        key_type: slot.types.rec.key_type.clone(),
                        value_type: slot.types.rec.value_type.clone(),
                    },
                ));
            }
        }
        {
            let alloc = alloc_slot.as_mut().ok_or_else(no_alloc)?;
            changed |= !records.is_empty() || !alloc.freed.is_empty() || self.force.get();
        }
        // Overlay changes alone publish only the deltas, over the same trees,
        // which is right only for a non-durable commit the log can record.
        // Otherwise the commit is made like one that changed a tree (a slot
        // over the same trees): a durable commit whose overlay changes
        // cancelled out (a key put and removed again: its spill changed no
        // tree) must still make every commit before it durable; and one the
        // log cannot record (a table created and deleted again within it:
        // no net catalog change) must get a slot under its id from the next
        // write-out, or the next durable commit would wait for a commit that
        // neither the log nor a slot records ("never written out").
        changed |= (immediate || !loggable) && self.overlay_changed.get();
        // The overlay this commit publishes: the base's, with this
        // transaction's deltas (deleted tables' are gone already).
        let mut new_overlay = overlay.take_tables();
        for (name, slot) in tables.iter() {
            if !slot.delta.is_empty() {
                new_overlay.tables.insert(name.clone(), slot.delta.clone());
            }
        }
        if !changed && self.overlay_changed.get() {
            // Only deltas changed: publish them under this transaction's id,
            // over the same trees; nothing is written (but the record).
            self.log_nondurable(carry, loggable)?;
            let base = alloc_slot.take().ok_or_else(no_alloc)?.abort();
            let carry = std::mem::take(carry);
            shared.publish_overlay_commit(self.txn, new_overlay, !self.is_spill.get());
            self.release_writer(base, carry);
            published.set(true);
            return Ok(self.txn);
        }
        if !changed {
            // Nothing to write: the transaction ends as if aborted, and an
            // Immediate commit still waits for earlier commits' durability.
            let alloc = alloc_slot.take().ok_or_else(no_alloc)?;
            let mut base = alloc.abort();
            let mut carry = std::mem::take(carry);
            let shown = shared.shown();
            let immediate = self.durability.get() == Durability::Immediate;
            let written = if immediate {
                shared.write_out_latest(&mut base, &mut carry, true)
            } else {
                Ok(())
            };
            self.release_writer(base, carry);
            published.set(true);
            written?;
            if immediate {
                // Every user commit before it must be durable: the newest
                // one it shows (the latest trees may be a spill's, which
                // changed nothing the log does not hold, and has no record
                // of its own to wait for).
                shared.wait_durable(shown)?;
            }
            // Its id is the latest commit's (read before the writer lock was
            // handed on, so no commit came in between).
            return Ok(shown);
        }
        {
            let alloc = alloc_slot.as_mut().ok_or_else(no_alloc)?;
            let mut ctx = Ctx {
                pager,
                alloc,
                max_file_bytes: shared.max_file_bytes,
            };
            for (name, rec) in &records {
                if let Some(d) = catalog.insert(&mut ctx, name.as_bytes(), &rec.encode())? {
                    d.take(&mut ctx, false)?;
                }
            }
        }
        catalog.finalize(pager, self.txn, &mut pages)?;
        // A durable commit (or one that would stage too much) writes out;
        // a non-durable one stages its pages in memory (write-behind,
        // FORMAT.md "Commit protocol").
        // (Over the stage limit with overlay entries left — the estimate
        // before the spill fell short — this commit stages, and the next
        // one spills and writes out.)
        let write_now = self.durability.get() == Durability::Immediate
            || self.force.get()
            || (carry.staged.len() + pages.len() > pager.stage_limit()
                && new_overlay.is_empty()
                && !self.stage_only.get());
        // 2. Pages freed by this commit become pending. The record names the
        // newest written commit's free-list chain until a write-out builds a
        // new one. From here the shared state changes: a write-out (which
        // can fail) keeps a copy to restore; staging cannot fail.
        let alloc = alloc_slot.take().ok_or_else(no_alloc)?;
        let backup = write_now.then(|| alloc.backup());
        let mut base = alloc.base;
        base.add_pending(self.txn, alloc.freed);
        base.trim_tail();
        let rec = CommitRecord {
            txn: self.txn,
            page_count: base.page_count(),
            catalog: catalog.root,
            freelist: self.base.freelist,
            clean: false,
            page_size: pager.page_size() as u32,
            // Like the free list: the newest written commit's, until a
            // write-out names its own.
            log: self.base.log,
        };
        // 3. Write out: the old chain is freed, the new one allocated, and
        // the pages (staged ones included) written, then the slot (ordering
        // to the device comes from the flush; see FORMAT.md). Or stage.
        let rec = if let Some(backup) = backup {
            // A durable commit that could have been a log commit starts a
            // new log (the next ones are log commits).
            let new_log = immediate && loggable && !self.force.get();
            match shared.write_out_commit(&mut base, carry, pages, rec, new_log) {
                Ok(rec) => rec,
                Err(e) => {
                    *alloc_slot = Some(backup);
                    return Err(e);
                }
            }
        } else {
            self.log_nondurable(carry, loggable)?;
            carry.staged.extend(pages.iter().map(|(p, _)| *p));
            carry.behind = true;
            pager.stage_pages(pages);
            rec
        };
        let carry = std::mem::take(carry);
        // 4. Publish to readers and hand the writer lock on.
        shared.publish_tree_commit(rec, new_overlay, !self.is_spill.get());
        self.release_writer(base, carry);
        published.set(true);
        // 5. Durability.
        if self.durability.get() == Durability::Immediate {
            shared.wait_durable(self.txn)?;
        }
        Ok(self.txn)
    }
}

impl Drop for WriteTransaction {
    fn drop(&mut self) {
        if !self.finished.get() {
            self.end_aborted();
        }
    }
}
