//! Layer 6: tables — the public, typed key-value API over the transaction
//! layer's raw trees.

use std::borrow::Borrow;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};
use std::sync::atomic::AtomicU64;

use crate::btree::cursor::RawRange;
use crate::btree::{NodeSource, TreeMut, ValueBytes};
use crate::commit::memtable::ENTRY_OVERHEAD;
use crate::commit::overlay::{Delta, Merged};
use crate::error::{CoreError, Result, TypeMismatch};
use crate::limits;
use crate::maintenance::Restore;
use crate::pager::header::PageRef;
use crate::txn::{ReadTransaction, WriteTransaction};
use crate::types::{Key, Value};

/// A table's name and its key and value types.
///
/// ```
/// use cairndb::TableDefinition;
/// const EVENTS: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("events");
/// ```
pub struct TableDefinition<'a, K: Key + 'static, V: Value + 'static> {
    name: &'a str,
    /// A layer's own table (name starting with `$`).
    internal: bool,
    _types: PhantomData<(K, V)>,
}

impl<'a, K: Key + 'static, V: Value + 'static> TableDefinition<'a, K, V> {
    /// A definition; the name is checked when the table is opened.
    pub const fn new(name: &'a str) -> Self {
        TableDefinition {
            name,
            internal: false,
            _types: PhantomData,
        }
    }

    /// A definition of one of the upper layers' own tables, whose names
    /// start with the reserved `$`.
    pub(crate) const fn internal(name: &'a str) -> Self {
        TableDefinition {
            name,
            internal: true,
            _types: PhantomData,
        }
    }

    /// Checks the name: the reserved `$` prefix only for the layers' own
    /// tables (another backend of the storage seam checks it the same way).
    pub fn check_name(&self) -> Result<()> {
        if self.internal {
            limits::check_table_name_syntax(self.name)
        } else {
            limits::check_table_name(self.name)
        }
    }

    /// The table name.
    pub fn name(&self) -> &str {
        self.name
    }
}

impl<K: Key + 'static, V: Value + 'static> Clone for TableDefinition<'_, K, V> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<K: Key + 'static, V: Value + 'static> Copy for TableDefinition<'_, K, V> {}

/// A key or value read from a table, borrowed from a cached page where that
/// is safe (no copy), or owned.
pub struct AccessGuard<'a, V: Value + 'static> {
    bytes: ValueBytes<'a>,
    _type: PhantomData<V>,
}

impl<'a, V: Value + 'static> AccessGuard<'a, V> {
    fn new(bytes: ValueBytes<'a>) -> Result<Self> {
        if !V::validate(bytes.as_slice()) {
            return Err(CoreError::Decode {
                type_name: V::type_name(),
                detail: format!(
                    "{} stored bytes are not a valid encoding",
                    bytes.as_slice().len()
                ),
            });
        }
        Ok(AccessGuard {
            bytes,
            _type: PhantomData,
        })
    }

    /// A guard over bytes a backend copied out of its store (another
    /// backend of the storage seam, [`crate::seam`]), checked to be a valid
    /// encoding of `V` ([`CoreError::Decode`] otherwise).
    pub fn from_owned(bytes: Vec<u8>) -> Result<AccessGuard<'static, V>> {
        AccessGuard::new(ValueBytes::Owned(bytes))
    }

    /// The decoded value.
    pub fn value(&self) -> V::SelfType<'_> {
        V::from_bytes(self.bytes.as_slice())
    }

    /// The stored bytes.
    pub fn as_bytes(&self) -> &[u8] {
        self.bytes.as_slice()
    }
}

impl<V: Value + 'static> std::fmt::Debug for AccessGuard<'_, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.value().fmt(f)
    }
}

fn encode_key<'k, K: Key + 'static>(key: &K::SelfType<'k>, page_size: usize) -> Result<Vec<u8>> {
    let b = K::as_bytes(key).as_ref().to_vec();
    limits::check_key_len(b.len(), page_size)?;
    Ok(b)
}

/// A range bound's key bytes: borrowed from the caller's bound where the key
/// type stores its bytes as they are (no copy per range).
fn encode_bound<'b, 'k: 'b, K: Key + 'static, KR: Borrow<K::SelfType<'k>>>(
    b: Bound<&'b KR>,
) -> Bound<K::AsBytes<'b>> {
    match b {
        Bound::Included(k) => Bound::Included(K::as_bytes(k.borrow())),
        Bound::Excluded(k) => Bound::Excluded(K::as_bytes(k.borrow())),
        Bound::Unbounded => Bound::Unbounded,
    }
}

fn as_ref_bound<B: AsRef<[u8]>>(b: &Bound<B>) -> Bound<&[u8]> {
    match b {
        Bound::Included(k) => Bound::Included(k.as_ref()),
        Bound::Excluded(k) => Bound::Excluded(k.as_ref()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// A double-ended iterator over a range of a table, in key order.
pub struct Range<'a, K: Key + 'static, V: Value + 'static> {
    raw: RangeInner<'a>,
    _types: PhantomData<(K, V)>,
}

/// A tree range, merged with the table's overlay delta if it has one.
enum RangeInner<'a> {
    Tree(RawRange<'a>),
    Merged(Box<Merged<'a>>),
}

type RawItem<'a> = Result<(ValueBytes<'a>, ValueBytes<'a>)>;

impl<'a> RangeInner<'a> {
    fn new(
        src: NodeSource<'a>,
        root: PageRef,
        delta: Option<&'a Delta>,
        s: Bound<&[u8]>,
        e: Bound<&[u8]>,
    ) -> Result<Self> {
        let raw = RawRange::new(src, root, s, e)?;
        Ok(match delta {
            Some(d) if !d.is_empty() => RangeInner::Merged(Box::new(Merged::new(raw, d, s, e))),
            _ => RangeInner::Tree(raw),
        })
    }

    #[inline]
    fn next(&mut self) -> Option<RawItem<'a>> {
        match self {
            RangeInner::Tree(r) => r.next(),
            RangeInner::Merged(m) => m.next(),
        }
    }

    #[inline]
    fn next_back(&mut self) -> Option<RawItem<'a>> {
        match self {
            RangeInner::Tree(r) => r.next_back(),
            RangeInner::Merged(m) => m.next_back(),
        }
    }
}

type Entry<'a, K, V> = (AccessGuard<'a, K>, AccessGuard<'a, V>);

impl<'a, K: Key + 'static, V: Value + 'static> Range<'a, K, V> {
    fn wrap(item: Result<(ValueBytes<'a>, ValueBytes<'a>)>) -> Result<Entry<'a, K, V>> {
        let (k, v) = item?;
        Ok((AccessGuard::new(k)?, AccessGuard::new(v)?))
    }

    #[inline(always)]
    fn wrap_borrowed(k: &'a [u8], v: &'a [u8]) -> Result<Entry<'a, K, V>> {
        Ok((
            AccessGuard::new(ValueBytes::Borrowed(k))?,
            AccessGuard::new(ValueBytes::Borrowed(v))?,
        ))
    }
}

impl<'a, K: Key + 'static, V: Value + 'static> Iterator for Range<'a, K, V> {
    type Item = Result<Entry<'a, K, V>>;
    /// In line in the caller's loop: a forward scan's step inside a pinned
    /// leaf is a few instructions whose result stays in registers (a call
    /// returned the guards through memory, and reading them back stalled
    /// on store-to-load forwarding); anything else is `next_slow`, which
    /// hands back an error boxed (see there).
    #[inline(always)]
    fn next(&mut self) -> Option<Self::Item> {
        // A forward scan inside a pinned leaf: the entry's bytes go straight
        // into the guards (no intermediate value enum or `Result` to copy).
        if let RangeInner::Tree(r) = &mut self.raw {
            if let Some((k, v)) = r.next_inline() {
                return Some(Self::wrap_borrowed(k, v));
            }
        }
        self.next_slow().map(|r| r.map_err(|e| *e))
    }
}

impl<'a, K: Key + 'static, V: Value + 'static> Range<'a, K, V> {
    /// `next` past the leaf window: the window's end, a step to the next
    /// leaf, an out-of-line value, the overlay's merge.
    ///
    /// Its error comes boxed (one word) and is unboxed in `next`, on the
    /// error path only: returned as it is, the 56-byte error made the
    /// compiler keep `next`'s result in memory on both paths, storing the
    /// inline step's guards in pieces and copying them out whole (a
    /// store-forwarding stall per entry: a scan ran at 50M entries a second
    /// where it now runs at 80M, `examples/read_path.rs`).
    #[inline(never)]
    fn next_slow(&mut self) -> Option<std::result::Result<Entry<'a, K, V>, Box<CoreError>>> {
        self.raw.next().map(|r| Self::wrap(r).map_err(Box::new))
    }
}

impl<K: Key + 'static, V: Value + 'static> DoubleEndedIterator for Range<'_, K, V> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.raw.next_back().map(Self::wrap)
    }
}

/// Read operations shared by [`Table`] and [`ReadOnlyTable`].
pub trait ReadableTable<K: Key + 'static, V: Value + 'static> {
    /// The value stored under `key`.
    fn get<'k>(&self, key: impl Borrow<K::SelfType<'k>>) -> Result<Option<AccessGuard<'_, V>>>;
    /// The entries whose keys fall in `range`, in key order (double-ended).
    fn range<'k, KR: Borrow<K::SelfType<'k>>>(
        &self,
        range: impl RangeBounds<KR>,
    ) -> Result<Range<'_, K, V>>;
    /// Number of entries, in O(1).
    fn len(&self) -> u64;

    /// Whether the table is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Every entry in key order.
    fn iter(&self) -> Result<Range<'_, K, V>> {
        self.range::<K::SelfType<'_>>(..)
    }
    /// The entry with the smallest key.
    fn first(&self) -> Result<Option<Entry<'_, K, V>>> {
        self.iter()?.next().transpose()
    }
    /// The entry with the largest key.
    fn last(&self) -> Result<Option<Entry<'_, K, V>>> {
        self.iter()?.next_back().transpose()
    }
}

/// The value of `key`: the overlay's change to it if it has one, else the
/// tree's (starting at `finger`'s leaf for a read transaction's table,
/// `NodeSource::get`).
fn get_in<'a, V: Value + 'static>(
    src: NodeSource<'a>,
    root: PageRef,
    delta: Option<&'a Delta>,
    key: &[u8],
    finger: Option<&AtomicU64>,
) -> Result<Option<AccessGuard<'a, V>>> {
    if let Some(e) = delta.and_then(|d| d.get(key)) {
        return e
            .map(|v| AccessGuard::new(ValueBytes::Borrowed(v)))
            .transpose();
    }
    src.get(root, key, finger)?
        .map(AccessGuard::new)
        .transpose()
}

/// A table open in a read transaction.
pub struct ReadOnlyTable<'txn, K: Key + 'static, V: Value + 'static> {
    txn: &'txn ReadTransaction,
    root: PageRef,
    len: u64,
    delta: Option<&'txn Delta>,
    /// The page id of the leaf the last `get` ended in (0: none), pinned by
    /// the transaction: a get of a key inside its range starts there
    /// (`NodeSource::get`).
    finger: AtomicU64,
    _types: PhantomData<(K, V)>,
}

impl ReadTransaction {
    /// Opens a table in this snapshot; [`CoreError::TableNotFound`] if it does
    /// not exist, [`CoreError::TableTypeMismatch`] if it has other types.
    pub fn open_table<K: Key + 'static, V: Value + 'static>(
        &self,
        def: TableDefinition<K, V>,
    ) -> Result<ReadOnlyTable<'_, K, V>> {
        def.check_name()?;
        let types = (std::any::TypeId::of::<K>(), std::any::TypeId::of::<V>());
        let (root, len) = self.open_cached(def.name, Some(types), |rec| {
            if rec.key_type != K::type_name() || rec.value_type != V::type_name() {
                return Err(CoreError::TableTypeMismatch(Box::new(TypeMismatch {
                    name: def.name.to_string(),
                    stored_key: rec.key_type.clone(),
                    stored_value: rec.value_type.clone(),
                    requested_key: K::type_name(),
                    requested_value: V::type_name(),
                })));
            }
            Ok(())
        })?;
        Ok(ReadOnlyTable {
            txn: self,
            root,
            len,
            delta: self.overlay.tables.get(def.name),
            finger: AtomicU64::new(0),
            _types: PhantomData,
        })
    }

    /// Opens a table as raw bytes whatever types it was created with (tools
    /// such as `cairn dump` use this). [`CoreError::TableNotFound`] if missing.
    /// The document and event layers' own tables (names starting with `$`)
    /// can be read this way, but not written.
    pub fn open_untyped_table(
        &self,
        name: &str,
    ) -> Result<ReadOnlyTable<'_, &'static [u8], &'static [u8]>> {
        limits::check_table_name_syntax(name)?;
        let (root, len) = self.open_cached(name, None, |_| Ok(()))?;
        Ok(ReadOnlyTable {
            txn: self,
            root,
            len,
            delta: self.overlay.tables.get(name),
            finger: AtomicU64::new(0),
            _types: PhantomData,
        })
    }
}

impl<K: Key + 'static, V: Value + 'static> ReadableTable<K, V> for ReadOnlyTable<'_, K, V> {
    fn get<'k>(&self, key: impl Borrow<K::SelfType<'k>>) -> Result<Option<AccessGuard<'_, V>>> {
        let k = K::as_bytes(key.borrow());
        get_in::<V>(
            self.txn.source(),
            self.root,
            self.delta,
            k.as_ref(),
            Some(&self.finger),
        )
    }

    fn range<'k, KR: Borrow<K::SelfType<'k>>>(
        &self,
        range: impl RangeBounds<KR>,
    ) -> Result<Range<'_, K, V>> {
        let (s, e) = (
            encode_bound::<K, KR>(range.start_bound()),
            encode_bound::<K, KR>(range.end_bound()),
        );
        Ok(Range {
            raw: RangeInner::new(
                self.txn.source(),
                self.root,
                self.delta,
                as_ref_bound(&s),
                as_ref_bound(&e),
            )?,
            _types: PhantomData,
        })
    }

    fn len(&self) -> u64 {
        self.len
            .saturating_add_signed(self.delta.map_or(0, |d| d.len))
    }
}

/// A table open in the write transaction. Several tables can be open at once;
/// the same table only once.
pub struct Table<'txn, K: Key + 'static, V: Value + 'static> {
    txn: &'txn WriteTransaction,
    /// Shared with the transaction's key for the table (no copy per open).
    name: std::sync::Arc<str>,
    tree: TreeMut,
    /// Non-durable changes over `tree` (`overlay.rs`).
    delta: Delta,
    _types: PhantomData<(K, V)>,
}

impl WriteTransaction {
    /// Opens a table for writing, creating it if it does not exist.
    pub fn open_table<K: Key + 'static, V: Value + 'static>(
        &self,
        def: TableDefinition<K, V>,
    ) -> Result<Table<'_, K, V>> {
        self.open_table_with(def, true)?
            .ok_or_else(|| CoreError::TableNotFound(def.name.to_string()))
    }

    /// Opens a table for writing if it exists (`None` otherwise): reads
    /// inside a write transaction (the document planner's) create nothing.
    pub(crate) fn open_table_if_exists<K: Key + 'static, V: Value + 'static>(
        &self,
        def: TableDefinition<K, V>,
    ) -> Result<Option<Table<'_, K, V>>> {
        self.open_table_with(def, false)
    }

    fn open_table_with<K: Key + 'static, V: Value + 'static>(
        &self,
        def: TableDefinition<K, V>,
        create: bool,
    ) -> Result<Option<Table<'_, K, V>>> {
        def.check_name()?;
        let types = crate::txn::Types::Typed(
            (std::any::TypeId::of::<K>(), std::any::TypeId::of::<V>()),
            || (K::type_name(), V::type_name()),
        );
        Ok(self
            .checkout_with(def.name, types, create)?
            .map(|(name, tree, delta)| Table {
                txn: self,
                name,
                tree,
                delta,
                _types: PhantomData,
            }))
    }
}

impl WriteTransaction {
    /// Opens a table as raw bytes whatever types it was created with,
    /// creating a missing table with `&[u8]` keys and values. Bytes written
    /// this way that are not valid for the table's declared types make later
    /// typed reads fail with [`CoreError::Decode`] (never a panic).
    pub fn open_untyped_table(
        &self,
        name: &str,
    ) -> Result<Table<'_, &'static [u8], &'static [u8]>> {
        self.untyped(name, None)
    }

    /// Like [`WriteTransaction::open_untyped_table`], but a missing table is
    /// created with the given key and value type names, and an existing one
    /// must have them ([`CoreError::TableTypeMismatch`] otherwise). Tools that
    /// restore a dump use it to keep each table's types.
    pub fn open_untyped_table_with_types(
        &self,
        name: &str,
        key_type: &str,
        value_type: &str,
    ) -> Result<Table<'_, &'static [u8], &'static [u8]>> {
        self.untyped(name, Some((key_type, value_type)))
    }

    /// Opens any table as raw bytes for a restore, the document and event
    /// layers' own `$` tables included: a missing table is created with the
    /// given key and value type names, an existing one must have them. Needs
    /// the [`Restore`] permission of this database
    /// ([`Database::begin_restore`](crate::Database::begin_restore); another
    /// database's is [`CoreError::InvalidOption`]).
    pub fn open_table_for_restore(
        &self,
        restore: &Restore,
        name: &str,
        key_type: &str,
        value_type: &str,
    ) -> Result<Table<'_, &'static [u8], &'static [u8]>> {
        if !restore.is_for(&self.shared) {
            return Err(CoreError::InvalidOption(
                "this restore permission was given by another database".into(),
            ));
        }
        limits::check_table_name_syntax(name)?;
        self.checkout_untyped(name, Some((key_type, value_type)))
    }

    fn untyped(
        &self,
        name: &str,
        types: Option<(&str, &str)>,
    ) -> Result<Table<'_, &'static [u8], &'static [u8]>> {
        // Raw writes never reach the layers' own `$` tables (a restore
        // does, through `open_table_for_restore`).
        limits::check_table_name(name)?;
        self.checkout_untyped(name, types)
    }

    pub(crate) fn checkout_untyped(
        &self,
        name: &str,
        types: Option<(&str, &str)>,
    ) -> Result<Table<'_, &'static [u8], &'static [u8]>> {
        let types = match types {
            Some((k, v)) => crate::txn::Types::Named(k, v),
            None => crate::txn::Types::Untyped,
        };
        let (name, tree, delta) = self
            .checkout_with(name, types, true)?
            .ok_or_else(|| CoreError::TableNotFound(name.to_string()))?;
        Ok(Table {
            txn: self,
            name,
            tree,
            delta,
            _types: PhantomData,
        })
    }
}

impl<K: Key + 'static, V: Value + 'static> Drop for Table<'_, K, V> {
    fn drop(&mut self) {
        self.txn.checkin(
            &self.name,
            std::mem::take(&mut self.tree),
            std::mem::take(&mut self.delta),
        );
    }
}

impl<'txn, K: Key + 'static, V: Value + 'static> Table<'txn, K, V> {
    fn page_size(&self) -> usize {
        self.txn.shared.pager.page_size()
    }

    fn source(&self) -> NodeSource<'_> {
        self.tree.source(&self.txn.shared.pager)
    }

    /// Whether the change of a `klen`-byte key to a value of `vlen` bytes
    /// goes to the overlay: the transaction's rule, and past its bound on
    /// changes, for a table whose changes in this transaction land
    /// scattered over a tree much larger than they are (`Scatter`: written
    /// directly, each would copy a leaf every commit; held in the overlay
    /// across commits, a spill writes each leaf once).
    #[inline]
    fn goes_to_overlay(&mut self, klen: usize, vlen: usize) -> bool {
        let s = &mut self.tree.direct;
        s.all += 1;
        s.bytes += (klen + vlen + ENTRY_OVERHEAD) as u64;
        self.overlay_rule(vlen)
    }

    /// The rule of `goes_to_overlay`, without counting a change; a table
    /// held in the overlay for its scattered changes keeps the verdict with
    /// its delta (`Delta::scattered`) for later transactions.
    #[inline]
    fn overlay_rule(&mut self, vlen: usize) -> bool {
        if self.txn.to_overlay(vlen) {
            return true;
        }
        let held = (self.delta.scattered || self.scattered()) && self.txn.may_hold_overlay(vlen);
        self.delta.scattered |= held;
        held
    }

    /// The verdict of `Scatter` on this transaction's changes so far.
    fn scattered(&self) -> bool {
        self.tree
            .direct
            .scattered(self.tree.len, self.txn.shared.overlay_bytes)
    }

    /// Counts a direct change and the nodes it made dirty.
    fn note_direct(&mut self, dirty_before: usize) {
        let nodes = self.tree.dirty.len().saturating_sub(dirty_before);
        self.tree.direct.changes += 1;
        self.tree.direct.nodes += nodes as u64;
    }

    /// Applies the table's delta to its tree, before a change that writes
    /// the tree directly (the delta must stay the newer of the two).
    fn spill(&mut self) -> Result<()> {
        if self.delta.is_empty() {
            return Ok(());
        }
        self.txn.spill(&mut self.tree, &mut self.delta)
    }

    /// The current value of `k` (overlay, then tree), copied.
    fn current(&self, k: &[u8]) -> Result<Option<Vec<u8>>> {
        if let Some(e) = self.delta.get(k) {
            return Ok(e.map(<[u8]>::to_vec));
        }
        let src = self.source();
        match src.find(self.tree.root, k)? {
            None => Ok(None),
            Some((node, i)) => Ok(Some(src.value(&node, i)?.as_slice().to_vec())),
        }
    }

    /// Records a change in the delta; spills it if it outgrew the budget.
    fn put_delta(&mut self, k: &[u8], v: Option<&[u8]>, existed: bool) -> Result<()> {
        self.delta.put(&self.txn.mem, self.txn.txn, k, v, existed);
        self.txn.overlay_changed(&self.name, k, v);
        if self.delta.bytes > self.txn.shared.overlay_bytes {
            self.spill()?;
        }
        Ok(())
    }

    /// Stores `value` under `key`; returns the previous value.
    pub fn insert<'k, 'v>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
        value: impl Borrow<V::SelfType<'v>>,
    ) -> Result<Option<AccessGuard<'static, V>>> {
        let k = encode_key::<K>(key.borrow(), self.page_size())?;
        let v = V::as_bytes(value.borrow());
        self.insert_raw(&k, v.as_ref())
    }

    fn insert_raw(&mut self, k: &[u8], v: &[u8]) -> Result<Option<AccessGuard<'static, V>>> {
        limits::check_value_len(v.len())?;
        if self.goes_to_overlay(k.len(), v.len()) {
            let old = self.current(k)?;
            self.put_delta(k, Some(v), old.is_some())?;
            return old
                .map(|b| AccessGuard::new(ValueBytes::Owned(b)))
                .transpose();
        }
        self.insert_direct(k, v)
    }

    /// `insert_raw` into the tree (its delta applied first).
    fn insert_direct(&mut self, k: &[u8], v: &[u8]) -> Result<Option<AccessGuard<'static, V>>> {
        self.spill()?;
        let before = self.tree.dirty.len();
        let old = self.txn.with_ctx(
            |ctx, tree| match tree.insert(ctx, k, v)? {
                Some(d) => d.take(ctx, true),
                None => Ok(None),
            },
            &mut self.tree,
        )?;
        self.note_direct(before);
        old.map(|b| AccessGuard::new(ValueBytes::Owned(b)))
            .transpose()
    }

    /// Stores `key → value` (`None`: removes `key`) where the caller knows
    /// whether `key` is present (`existed`), as the document layer does for
    /// index entries (a document's entries are exactly the ones its old
    /// version gave): in the overlay this skips looking up the old value —
    /// a memtable search and a tree descent per entry. A wrong claim cannot
    /// pass unseen: the table's count is checked against the tree when the
    /// delta is applied ([`CoreError::Internal`] naming the table's count).
    pub(crate) fn put_known(&mut self, k: &[u8], v: Option<&[u8]>, existed: bool) -> Result<()> {
        limits::check_key_len(k.len(), self.page_size())?;
        if let Some(v) = v {
            limits::check_value_len(v.len())?;
        }
        if self.goes_to_overlay(k.len(), v.map_or(0, <[u8]>::len)) {
            debug_assert_eq!(
                self.current(k)?.is_some(),
                existed,
                "put_known: wrong claim"
            );
            if v.is_none() && !existed {
                return Ok(());
            }
            return self.put_delta(k, v, existed);
        }
        match v {
            Some(v) => self.insert_direct(k, v).map(drop),
            None => self.remove_direct(k).map(drop),
        }
    }

    /// [`Table::insert`] of a key the caller knows is absent (`existed`
    /// false) or present, without reading the old value back: `put_known`
    /// with the typed key and value.
    pub(crate) fn insert_known<'k, 'v>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
        value: impl Borrow<V::SelfType<'v>>,
        existed: bool,
    ) -> Result<()> {
        let k = K::as_bytes(key.borrow());
        let v = V::as_bytes(value.borrow());
        self.put_known(k.as_ref(), Some(v.as_ref()), existed)
    }

    /// Appends an entry whose key is greater than every key in the table
    /// (sorted bulk loads); [`CoreError::AppendOutOfOrder`] otherwise. Ascending
    /// inserts fill pages completely.
    pub fn append<'k, 'v>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
        value: impl Borrow<V::SelfType<'v>>,
    ) -> Result<()> {
        let k = encode_key::<K>(key.borrow(), self.page_size())?;
        let v = V::as_bytes(value.borrow());
        let v = v.as_ref();
        limits::check_value_len(v.len())?;
        self.spill()?;
        let appended = self
            .txn
            .with_ctx(|ctx, tree| tree.append(ctx, &k, v), &mut self.tree)?;
        match appended {
            true => Ok(()),
            false => Err(CoreError::AppendOutOfOrder),
        }
    }

    /// Removes `key`; returns its value.
    pub fn remove<'k>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
    ) -> Result<Option<AccessGuard<'static, V>>> {
        let k = K::as_bytes(key.borrow());
        self.remove_raw(k.as_ref())
    }

    fn remove_raw(&mut self, k: &[u8]) -> Result<Option<AccessGuard<'static, V>>> {
        if self.goes_to_overlay(k.len(), 0) {
            let old = self.current(k)?;
            if old.is_some() {
                self.put_delta(k, None, true)?;
            }
            return old
                .map(|b| AccessGuard::new(ValueBytes::Owned(b)))
                .transpose();
        }
        self.remove_direct(k)
    }

    /// `remove_raw` from the tree (its delta applied first).
    fn remove_direct(&mut self, k: &[u8]) -> Result<Option<AccessGuard<'static, V>>> {
        self.spill()?;
        let before = self.tree.dirty.len();
        let old = self.txn.with_ctx(
            |ctx, tree| match tree.remove(ctx, k)? {
                Some(d) => d.take(ctx, true),
                None => Ok(None),
            },
            &mut self.tree,
        )?;
        self.note_direct(before);
        old.map(|b| AccessGuard::new(ValueBytes::Owned(b)))
            .transpose()
    }

    fn keys_in(&self, s: Bound<&[u8]>, e: Bound<&[u8]>) -> Result<Vec<Vec<u8>>> {
        let mut r = RangeInner::new(self.source(), self.tree.root, Some(&self.delta), s, e)?;
        let mut keys = Vec::new();
        while let Some(item) = r.next() {
            keys.push(item?.0.as_slice().to_vec());
        }
        Ok(keys)
    }

    /// Removes every entry in `range`; returns how many were removed.
    pub fn remove_range<'k, KR: Borrow<K::SelfType<'k>>>(
        &mut self,
        range: impl RangeBounds<KR>,
    ) -> Result<u64> {
        let (s, e) = (
            encode_bound::<K, KR>(range.start_bound()),
            encode_bound::<K, KR>(range.end_bound()),
        );
        // (Each removal below is counted by `goes_to_overlay` in `remove_raw`.)
        if self.overlay_rule(0) {
            let keys = self.keys_in(as_ref_bound(&s), as_ref_bound(&e))?;
            for k in &keys {
                self.remove_raw(k)?;
            }
            return Ok(keys.len() as u64);
        }
        self.spill()?;
        let keys = self.keys_in(as_ref_bound(&s), as_ref_bound(&e))?;
        let n = keys.len() as u64;
        self.txn.with_ctx(
            |ctx, tree| {
                for k in &keys {
                    if let Some(d) = tree.remove(ctx, k)? {
                        d.take(ctx, false)?;
                    }
                }
                Ok(())
            },
            &mut self.tree,
        )?;
        Ok(n)
    }

    /// Removes and returns every entry in `range`, in key order.
    pub fn drain<'k, KR: Borrow<K::SelfType<'k>>>(
        &mut self,
        range: impl RangeBounds<KR>,
    ) -> Result<Vec<(AccessGuard<'static, K>, AccessGuard<'static, V>)>> {
        let (s, e) = (
            encode_bound::<K, KR>(range.start_bound()),
            encode_bound::<K, KR>(range.end_bound()),
        );
        let keys = self.keys_in(as_ref_bound(&s), as_ref_bound(&e))?;
        let mut out = Vec::with_capacity(keys.len());
        for k in keys {
            if let Some(v) = self.remove_raw(&k)? {
                out.push((AccessGuard::new(ValueBytes::Owned(k))?, v));
            }
        }
        Ok(out)
    }

    /// Keeps only the entries for which `keep` returns true; returns how many
    /// were removed.
    pub fn retain(
        &mut self,
        mut keep: impl FnMut(K::SelfType<'_>, V::SelfType<'_>) -> bool,
    ) -> Result<u64> {
        let mut doomed = Vec::new();
        {
            let mut r = RangeInner::new(
                self.source(),
                self.tree.root,
                Some(&self.delta),
                Bound::Unbounded,
                Bound::Unbounded,
            )?;
            while let Some(item) = r.next() {
                let (k, v) = item?;
                let (kg, vg) = (AccessGuard::<K>::new(k)?, AccessGuard::<V>::new(v)?);
                if !keep(kg.value(), vg.value()) {
                    doomed.push(kg.as_bytes().to_vec());
                }
            }
        }
        let n = doomed.len() as u64;
        for k in doomed {
            self.remove_raw(&k)?;
        }
        Ok(n)
    }

    /// Removes and returns the entry with the smallest key.
    pub fn pop_first(
        &mut self,
    ) -> Result<Option<(AccessGuard<'static, K>, AccessGuard<'static, V>)>> {
        let k = match self.first()? {
            Some((k, _)) => k.as_bytes().to_vec(),
            None => return Ok(None),
        };
        let v = self.remove_raw(&k)?;
        v.map(|v| AccessGuard::new(ValueBytes::Owned(k)).map(|k| (k, v)))
            .transpose()
    }

    /// Removes and returns the entry with the largest key.
    pub fn pop_last(
        &mut self,
    ) -> Result<Option<(AccessGuard<'static, K>, AccessGuard<'static, V>)>> {
        let k = match self.last()? {
            Some((k, _)) => k.as_bytes().to_vec(),
            None => return Ok(None),
        };
        let v = self.remove_raw(&k)?;
        v.map(|v| AccessGuard::new(ValueBytes::Owned(k)).map(|k| (k, v)))
            .transpose()
    }
}

impl<K: Key + 'static, V: Value + 'static> ReadableTable<K, V> for Table<'_, K, V> {
    fn get<'k>(&self, key: impl Borrow<K::SelfType<'k>>) -> Result<Option<AccessGuard<'_, V>>> {
        let k = K::as_bytes(key.borrow());
        get_in::<V>(
            self.source(),
            self.tree.root,
            Some(&self.delta),
            k.as_ref(),
            None,
        )
    }

    fn range<'k, KR: Borrow<K::SelfType<'k>>>(
        &self,
        range: impl RangeBounds<KR>,
    ) -> Result<Range<'_, K, V>> {
        let (s, e) = (
            encode_bound::<K, KR>(range.start_bound()),
            encode_bound::<K, KR>(range.end_bound()),
        );
        Ok(Range {
            raw: RangeInner::new(
                self.source(),
                self.tree.root,
                Some(&self.delta),
                as_ref_bound(&s),
                as_ref_bound(&e),
            )?,
            _types: PhantomData,
        })
    }

    fn len(&self) -> u64 {
        self.tree.len.saturating_add_signed(self.delta.len)
    }
}

impl<K: Key + 'static, V: Value + 'static> std::fmt::Debug for Table<'_, K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table")
            .field("name", &self.name)
            .field("len", &self.len())
            .finish()
    }
}

impl<K: Key + 'static, V: Value + 'static> std::fmt::Debug for ReadOnlyTable<'_, K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadOnlyTable")
            .field("txn", &self.txn.txn_id())
            .field("len", &self.len)
            .finish()
    }
}
