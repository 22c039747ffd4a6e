//! Lookups and copy-on-write changes.

use crate::ids::PageMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::node::{self, fits_inline, BranchNode, LeafNode, Node, PageView, Val, ValRef};
use super::search::Index;
use crate::error::{CoreError, Corruption, DamagedPart, Result};
use crate::ids::{PageId, TxnId};
use crate::pager::alloc::TxnAllocator;
use crate::pager::header::PageRef;
use crate::pager::pins::{PagePins, PinnedPage};
use crate::pager::{page_checksum, value_checksum, Page, Pager};

/// Value bytes handed to the table layer without copying where possible.
#[derive(Debug, Clone)]
pub(crate) enum ValueBytes<'a> {
    /// A slice (`start..end`) of a verified, cached page.
    Page(Page, usize, usize),
    /// A slice of a node owned by the open write transaction.
    Borrowed(&'a [u8]),
    /// Bytes copied out.
    Owned(Vec<u8>),
    /// A verified out-of-line value, shared with the value cache.
    Shared(Arc<[u8]>),
    /// A short key or value copied out of a cached page: cheaper than
    /// sharing the page, whose reference count would be raised and dropped
    /// (two atomic operations) per key and per value.
    Small(Inline),
}

/// Keys and values up to this length are copied out of cached pages.
const SMALL: usize = 31;

/// A short key or value's bytes and length, aligned as the other variants'
/// words are: with a byte-aligned array beside them (the length, then 30
/// bytes) the compiler moved a guard's words in byte-sized pieces, and a
/// scan's loop read them back whole — a store-forwarding stall per entry
/// (with the page's offsets as words too, a scan ran 25% faster,
/// `examples/read_path.rs`).
#[derive(Debug, Clone)]
#[repr(C, align(8))]
pub(crate) struct Inline {
    bytes: [u8; SMALL],
    len: u8,
}

impl ValueBytes<'_> {
    /// Bytes `a..b` of a cached page, shared.
    #[inline]
    fn of_page(p: &Page, a: usize, b: usize) -> Self {
        Self::small(p, a, b).unwrap_or_else(|| Self::page_slice(p.clone(), a, b))
    }

    /// `of_page` for a page reference the caller gives up.
    #[inline]
    fn of_owned_page(p: Page, a: usize, b: usize) -> Self {
        Self::small(&p, a, b).unwrap_or_else(|| Self::page_slice(p, a, b))
    }

    /// Bytes `a..b` of `p` copied out, if they are at most `SMALL` long. A
    /// fixed-size copy (the window lies inside the page) is two moves; the
    /// length says how much of it is the value.
    #[inline]
    fn small(p: &Page, a: usize, b: usize) -> Option<Self> {
        if b - a > SMALL {
            return None;
        }
        let w = p.data().get(a..a + SMALL)?;
        let mut buf = [0u8; SMALL];
        buf.copy_from_slice(w);
        Some(ValueBytes::Small(Inline {
            bytes: buf,
            len: (b - a) as u8,
        }))
    }

    #[inline]
    fn page_slice(p: Page, a: usize, b: usize) -> Self {
        ValueBytes::Page(p, a, b)
    }

    #[inline]
    pub(crate) fn as_slice(&self) -> &[u8] {
        match self {
            ValueBytes::Page(p, a, b) => p.data().get(*a..*b).unwrap_or(&[]),
            ValueBytes::Borrowed(s) => s,
            ValueBytes::Owned(v) => v,
            ValueBytes::Shared(v) => v,
            ValueBytes::Small(s) => s.bytes.get(..s.len as usize).unwrap_or(&[]),
        }
    }
}

/// A node from either the committed file (shared, verified) or the open
/// write transaction's changed nodes.
#[derive(Debug, Clone)]
pub(crate) enum NodeRef<'a> {
    Clean(Page),
    /// A committed page the read transaction pinned (`pager/pins.rs`): its
    /// bytes are borrowed for the transaction's life.
    Pinned(PinnedPage<'a>),
    Dirty(&'a Node),
}

impl<'a> NodeRef<'a> {
    /// A committed page's bytes.
    #[inline]
    fn committed(&self) -> Option<&[u8]> {
        match self {
            NodeRef::Clean(p) => Some(p.data()),
            NodeRef::Pinned(p) => Some(p.data),
            NodeRef::Dirty(_) => None,
        }
    }

    /// A committed page's bytes and search index, the index built now if
    /// this is the page's first search (a scan never needs one).
    #[inline]
    fn searchable(&self) -> Option<(&[u8], &[u8])> {
        match self {
            NodeRef::Clean(p) => Some((p.data(), p.index_or_build(super::search::build))),
            NodeRef::Pinned(p) => Some((p.data, p.index_or_build(super::search::build))),
            NodeRef::Dirty(_) => None,
        }
    }

    #[inline]
    pub(crate) fn is_leaf(&self) -> bool {
        match (self.committed(), self) {
            (Some(data), _) => PageView(data).is_leaf(),
            (None, NodeRef::Dirty(n)) => matches!(n, Node::Leaf(_)),
            (None, _) => false,
        }
    }

    /// Entries of a leaf, or keys of a branch.
    #[inline]
    pub(crate) fn count(&self) -> usize {
        match (self.committed(), self) {
            (Some(data), _) => PageView(data).count(),
            (None, NodeRef::Dirty(Node::Leaf(l))) => l.len(),
            (None, NodeRef::Dirty(Node::Branch(b))) => b.nkeys(),
            (None, _) => 0,
        }
    }

    pub(crate) fn leaf_key(&self, i: usize) -> &[u8] {
        match (self.committed(), self) {
            (Some(data), _) => PageView(data).leaf_key(i),
            (None, NodeRef::Dirty(Node::Leaf(l))) => l.key(i),
            (None, _) => &[],
        }
    }

    pub(crate) fn leaf_search(&self, key: &[u8]) -> Result<usize, usize> {
        match (self.searchable(), self) {
            (Some((data, index)), _) => {
                let v = PageView(data);
                match Index::parse(index) {
                    Some(ix) => ix.search(key, |i| v.leaf_key(i)),
                    None => v.leaf_search(key),
                }
            }
            (None, NodeRef::Dirty(Node::Leaf(l))) => l.search(key),
            (None, _) => Err(0),
        }
    }

    pub(crate) fn child_index(&self, key: &[u8]) -> usize {
        match (self.searchable(), self) {
            (Some((data, index)), _) => {
                let v = PageView(data);
                match Index::parse(index) {
                    Some(ix) => match ix.search(key, |i| v.branch_key(i)) {
                        Ok(i) => i + 1,
                        Err(i) => i,
                    },
                    None => v.child_index(key),
                }
            }
            (None, NodeRef::Dirty(Node::Branch(b))) => b.child_index(key),
            (None, _) => 0,
        }
    }

    pub(crate) fn child(&self, i: usize) -> PageRef {
        match (self.committed(), self) {
            (Some(data), _) => PageView(data).child(i),
            (None, NodeRef::Dirty(Node::Branch(b))) => {
                b.children.get(i).copied().unwrap_or_default()
            }
            (None, _) => PageRef::NONE,
        }
    }

    /// Number of children of a branch.
    pub(crate) fn children(&self) -> usize {
        self.count() + 1
    }

    /// The value of leaf entry `i`, as bytes where it is inline.
    pub(crate) fn leaf_value(&self, i: usize) -> (ValRef<'_>, Option<ValueBytes<'a>>) {
        match self {
            NodeRef::Clean(p) => {
                let (v, at) = PageView(p.data()).leaf_val(i);
                let bytes = match v {
                    ValRef::Inline(s) => Some(ValueBytes::of_page(p, at, at + s.len())),
                    ValRef::Overflow { .. } => None,
                };
                (v, bytes)
            }
            NodeRef::Pinned(p) => {
                let (v, _) = PageView(p.data).leaf_val(i);
                let bytes = match v {
                    ValRef::Inline(s) => Some(ValueBytes::Borrowed(s)),
                    ValRef::Overflow { .. } => None,
                };
                (v, bytes)
            }
            NodeRef::Dirty(Node::Leaf(l)) => match l.val(i) {
                ValRef::Inline(v) => (ValRef::Inline(v), Some(ValueBytes::Borrowed(v))),
                o => (o, None),
            },
            NodeRef::Dirty(Node::Branch(_)) => (ValRef::Inline(&[]), None),
        }
    }

    /// The key of leaf entry `i`, without copying where possible.
    pub(crate) fn leaf_key_bytes(&self, i: usize) -> ValueBytes<'a> {
        match self {
            NodeRef::Clean(p) => {
                let k = PageView(p.data()).leaf_key(i);
                let start = k.as_ptr() as usize - p.data().as_ptr() as usize;
                ValueBytes::of_page(p, start, start + k.len())
            }
            NodeRef::Pinned(p) => ValueBytes::Borrowed(PageView(p.data).leaf_key(i)),
            NodeRef::Dirty(Node::Leaf(l)) => ValueBytes::Borrowed(l.key(i)),
            NodeRef::Dirty(Node::Branch(_)) => ValueBytes::Borrowed(&[]),
        }
    }
}

/// Where nodes come from: the pager, plus the open write transaction's
/// changed nodes for the tree being read.
#[derive(Clone, Copy)]
pub(crate) struct NodeSource<'a> {
    pub pager: &'a Pager,
    pub dirty: Option<&'a PageMap<PageId, Node>>,
    /// A read transaction's pinned pages: entries read through this source
    /// borrow leaf bytes for `'a` (`pager/pins.rs`).
    pub pins: Option<&'a PagePins>,
}

pub(crate) fn tree_corruption(pager: &Pager, pid: PageId, detail: String) -> CoreError {
    Corruption {
        part: DamagedPart::TreePage,
        page: pid,
        offset: pager.offset(pid),
        detail,
    }
    .into()
}

/// Most pages a forward scan's read-ahead asks for at once (the pager cuts
/// it to `READ_AHEAD_BYTES`).
const READ_AHEAD_MAX: usize = 64;

/// Loads a tree page through the cache, validating its structure once.
pub(crate) fn load_page(pager: &Pager, r: PageRef) -> Result<Page> {
    pager.read_page(r, DamagedPart::TreePage, super::node::validate)
}

impl<'a> NodeSource<'a> {
    pub(crate) fn load(&self, r: PageRef) -> Result<NodeRef<'a>> {
        if let Some(d) = self.dirty {
            if let Some(n) = d.get(&r.page) {
                return Ok(NodeRef::Dirty(n));
            }
        }
        if let Some(p) = self.pins.and_then(|pins| pins.lookup(r.page.0)) {
            return Ok(NodeRef::Pinned(p));
        }
        Ok(self.committed_node(r, load_page(self.pager, r)?))
    }

    /// `load` for a forward scan: `r` is child `next - 1` of `parent`. On a
    /// cache miss, the parent's next children that follow `r` in the file
    /// are read with it in one read and cached, each verified against the
    /// checksum `parent` holds for it (`Pager::read_pages`; one that fails
    /// is left for its own load to report).
    pub(crate) fn load_ahead(
        &self,
        r: PageRef,
        parent: &NodeRef<'a>,
        next: usize,
    ) -> Result<NodeRef<'a>> {
        // A changed (dirty) parent's children may be pages not written
        // yet: no read-ahead below it.
        if matches!(parent, NodeRef::Dirty(_))
            || self.dirty.is_some_and(|d| d.contains_key(&r.page))
        {
            return self.load(r);
        }
        if let Some(p) = self.pins.and_then(|pins| pins.lookup(r.page.0)) {
            return Ok(NodeRef::Pinned(p));
        }
        let page = match self.pager.cached_page(r) {
            Some(p) => p,
            None => {
                let mut ahead = [PageRef::NONE; READ_AHEAD_MAX];
                let end = parent.children().min(next + READ_AHEAD_MAX);
                let mut k = 0;
                for j in next..end {
                    let c = parent.child(j);
                    // Only a run of pages adjacent in the file is read.
                    if c.page.0 != r.page.0.wrapping_add(1 + k as u64) {
                        break;
                    }
                    ahead[k] = c;
                    k += 1;
                }
                self.pager.read_pages(
                    r,
                    &ahead[..k],
                    DamagedPart::TreePage,
                    super::node::validate,
                )?
            }
        };
        Ok(self.committed_node(r, page))
    }

    /// A committed page just loaded: branches are pinned as they are
    /// reached (few, and visited by every lookup); leaves when entries are
    /// read from them (the cursor).
    fn committed_node(&self, r: PageRef, page: Page) -> NodeRef<'a> {
        if !PageView(page.data()).is_leaf() {
            if let Some(p) = self.pin(r.page.0, &page) {
                return NodeRef::Pinned(p);
            }
        }
        NodeRef::Clean(page)
    }

    /// The leaf whose range holds `key` (if anywhere), and its reference:
    /// a descent from `root` (not empty).
    #[inline]
    fn descend(&self, root: PageRef, key: &[u8]) -> Result<(PageRef, NodeRef<'a>)> {
        let mut r = root;
        let mut node = self.load(root)?;
        let mut depth = 0;
        while !node.is_leaf() {
            depth += 1;
            if depth > 64 {
                return Err(tree_corruption(
                    self.pager,
                    root.page,
                    "tree deeper than 64 levels (cycle?)".into(),
                ));
            }
            r = node.child(node.child_index(key));
            node = self.load(r)?;
        }
        Ok((r, node))
    }

    /// Finds `key`: the leaf holding it and the entry index.
    pub(crate) fn find(&self, root: PageRef, key: &[u8]) -> Result<Option<(NodeRef<'a>, usize)>> {
        if root.page.is_none() {
            return Ok(None);
        }
        let (_, node) = self.descend(root, key)?;
        Ok(match node.leaf_search(key) {
            Ok(i) => Some((node, i)),
            Err(_) => None,
        })
    }

    /// The value of `key`. With a `finger` (a read transaction's table: the
    /// page id of the leaf its previous lookup ended in) and a source that
    /// pins pages, a key between that leaf's first and last keys is searched
    /// there at once, without a descent, if the leaf is pinned: leaves hold
    /// disjoint key ranges and a snapshot's pages never change, so such a key
    /// is in that leaf or nowhere. A leaf is pinned (and its values then
    /// borrowed, with no reference count or copy) when two lookups in a row
    /// end in it — lookups in key order — and the pin budget allows; lookups
    /// in random order leave the pins alone.
    #[inline]
    pub(crate) fn get(
        &self,
        root: PageRef,
        key: &[u8],
        finger: Option<&AtomicU64>,
    ) -> Result<Option<ValueBytes<'a>>> {
        let finger = finger.zip(self.pins);
        let f = match finger {
            Some((finger, pins)) => {
                let f = finger.load(Ordering::Relaxed);
                if let Some(p) = pins.lookup(f).filter(|_| f != 0) {
                    // One search of the leaf says both whether the key lies
                    // in its range and where: a match, or a place strictly
                    // between two of its keys (the key is then in no other
                    // leaf: absent). A place before its first key or after
                    // its last says nothing: descend.
                    let n = PageView(p.data).count();
                    match NodeRef::Pinned(p).leaf_search(key) {
                        Ok(i) => return Ok(Some(self.pinned_entry(p.data, i)?.1)),
                        Err(i) if i > 0 && i < n => return Ok(None),
                        Err(_) => {}
                    }
                }
                f
            }
            None => 0,
        };
        if root.page.is_none() {
            return Ok(None);
        }
        let (r, node) = self.descend(root, key)?;
        let mut pinned = None;
        if let Some((finger, _)) = finger {
            // (Written only when it changes: threads sharing the table and
            // reading one leaf do not write its cache line.)
            if f != r.page.0 {
                finger.store(r.page.0, Ordering::Relaxed);
            }
            pinned = match &node {
                NodeRef::Pinned(p) => Some(*p),
                NodeRef::Clean(page) if f == r.page.0 => self.pin(r.page.0, page),
                _ => None,
            };
        }
        match pinned {
            Some(p) => self.search_pinned(p, key),
            None => match node.leaf_search(key) {
                Ok(i) => Ok(Some(self.value_of_node(node, i)?)),
                Err(_) => Ok(None),
            },
        }
    }

    /// The value of `key` in the pinned leaf `p`, borrowed.
    #[inline]
    fn search_pinned(&self, p: PinnedPage<'a>, key: &[u8]) -> Result<Option<ValueBytes<'a>>> {
        match NodeRef::Pinned(p).leaf_search(key) {
            Ok(i) => Ok(Some(self.pinned_entry(p.data, i)?.1)),
            Err(_) => Ok(None),
        }
    }

    /// Key and value of leaf entry `i` of `node` (one parse of the entry).
    #[inline]
    pub(crate) fn entry(
        &self,
        node: &NodeRef<'a>,
        i: usize,
    ) -> Result<(ValueBytes<'a>, ValueBytes<'a>)> {
        let p = match node {
            NodeRef::Clean(p) => p,
            NodeRef::Pinned(p) => return self.pinned_entry(p.data, i),
            NodeRef::Dirty(_) => return Ok((node.leaf_key_bytes(i), self.value(node, i)?)),
        };
        let (k_at, klen, v, at) = PageView(p.data()).leaf_entry(i);
        let key = ValueBytes::of_page(p, k_at, k_at + klen);
        let value = match v {
            ValRef::Inline(s) => ValueBytes::of_page(p, at, at + s.len()),
            ValRef::Overflow {
                start,
                len,
                checksum,
            } => ValueBytes::Shared(read_overflow(self.pager, start, len, checksum)?),
        };
        Ok((key, value))
    }

    /// The bytes of a clean leaf `page` (id `pid`) for `'a`, if this source
    /// pins pages and the transaction's budget allows.
    #[inline]
    pub(crate) fn pin(&self, pid: u64, page: &Page) -> Option<PinnedPage<'a>> {
        self.pins
            .and_then(|p| p.pin(pid, page, &self.pager.counters))
    }

    /// Key and value of entry `i` of the pinned leaf bytes `data`, borrowed
    /// (an out-of-line value is shared with the value cache).
    #[inline(always)]
    pub(crate) fn pinned_entry(
        &self,
        data: &'a [u8],
        i: usize,
    ) -> Result<(ValueBytes<'a>, ValueBytes<'a>)> {
        let (k_at, klen, v, _) = PageView(data).leaf_entry(i);
        let key = ValueBytes::Borrowed(data.get(k_at..k_at + klen).unwrap_or(&[]));
        match v {
            // (The leaf's own bytes: a scan's common case, kept short.)
            ValRef::Inline(s) => Ok((key, ValueBytes::Borrowed(s))),
            ValRef::Overflow {
                start,
                len,
                checksum,
            } => self.overflow_entry(key, start, len, checksum),
        }
    }

    /// `pinned_entry` of an out-of-line value, out of its way.
    #[cold]
    #[inline(never)]
    fn overflow_entry(
        &self,
        key: ValueBytes<'a>,
        start: PageId,
        len: u64,
        checksum: u64,
    ) -> Result<(ValueBytes<'a>, ValueBytes<'a>)> {
        let value = ValueBytes::Shared(read_overflow(self.pager, start, len, checksum)?);
        Ok((key, value))
    }

    /// `value`, taking the node: a clean page's inline value keeps the page
    /// the lookup already holds instead of another reference to it (two
    /// atomic operations fewer per lookup).
    #[inline]
    pub(crate) fn value_of_node(&self, node: NodeRef<'a>, i: usize) -> Result<ValueBytes<'a>> {
        if let NodeRef::Clean(p) = node {
            if let (ValRef::Inline(s), at) = PageView(p.data()).leaf_val(i) {
                let end = at + s.len();
                return Ok(ValueBytes::of_owned_page(p, at, end));
            }
            return self.value(&NodeRef::Clean(p), i);
        }
        self.value(&node, i)
    }

    /// The value bytes of leaf entry `i` of `node`, reading out-of-line
    /// values from their pages.
    pub(crate) fn value(&self, node: &NodeRef<'a>, i: usize) -> Result<ValueBytes<'a>> {
        let (v, bytes) = node.leaf_value(i);
        match (v, bytes) {
            (_, Some(b)) => Ok(b),
            (
                ValRef::Overflow {
                    start,
                    len,
                    checksum,
                },
                None,
            ) => Ok(ValueBytes::Shared(read_overflow(
                self.pager, start, len, checksum,
            )?)),
            (ValRef::Inline(s), None) => Ok(ValueBytes::Owned(s.to_vec())),
        }
    }
}

/// An out-of-line value: from the value cache, or read and verified (and
/// then kept).
pub(crate) fn read_overflow(
    pager: &Pager,
    start: PageId,
    len: u64,
    checksum: u64,
) -> Result<Arc<[u8]>> {
    if let Some(v) = pager.cached_value(start, checksum, len) {
        return Ok(v);
    }
    let v = read_overflow_file(pager, start, len, checksum)?;
    pager.cache_value(start, checksum, v.clone());
    Ok(v)
}

/// Reads an out-of-line value from the file and verifies it (bypassing the
/// value cache: the integrity walk checks what the file holds).
pub(crate) fn read_overflow_file(
    pager: &Pager,
    start: PageId,
    len: u64,
    checksum: u64,
) -> Result<Arc<[u8]>> {
    let bad = |detail: String| -> CoreError {
        Corruption {
            part: DamagedPart::OverflowValue,
            page: start,
            offset: pager.offset(start),
            detail,
        }
        .into()
    };
    if len > crate::limits::MAX_VALUE_BYTES as u64 {
        return Err(bad(format!("out-of-line value claims {len} bytes")));
    }
    let end = pager.offset(start).saturating_add(len);
    if end > pager.file_len() {
        return Err(bad("out-of-line value runs past the end of the file".into()));
    }
    // Read straight into the shared buffer (no copy afterwards).
    let mut buf: Arc<[u8]> = std::iter::repeat_n(0u8, len as usize).collect();
    let Some(b) = Arc::get_mut(&mut buf) else {
        return Err(CoreError::Internal("a new value buffer is shared".into()));
    };
    pager.read_raw(pager.offset(start), b)?;
    let sum = value_checksum(start, &buf);
    if sum != checksum {
        return Err(bad(format!(
            "value checksum mismatch: expected {checksum:016x}, found {sum:016x}"
        )));
    }
    Ok(buf)
}

/// The old value displaced by an insert or remove.
pub(crate) enum Displaced {
    Inline(Vec<u8>),
    Overflow {
        start: PageId,
        len: u64,
        checksum: u64,
    },
}

/// Puts `key → val` into `leaf` where its search (`found`) says: a new
/// value for an existing entry (returning the old) or a new entry.
fn put_in_leaf(
    leaf: &mut LeafNode,
    found: std::result::Result<usize, usize>,
    key: &[u8],
    val: ValRef<'_>,
) -> Option<Val> {
    match found {
        Ok(i) => Some(leaf.replace_val(i, val)),
        Err(i) => {
            leaf.insert_at(i, key, val);
            leaf.last_insert = Some(i);
            None
        }
    }
}

/// A changed leaf and the key range its parent gives it (`lo` inclusive,
/// `hi` exclusive; `None`: unbounded): the tree's hint for changes in key
/// order (`TreeMut::hint`).
#[derive(Debug)]
struct LeafHint {
    pid: PageId,
    lo: Option<Vec<u8>>,
    hi: Option<Vec<u8>>,
}

impl LeafHint {
    fn covers(&self, key: &[u8]) -> bool {
        self.lo.as_deref().is_none_or(|lo| key >= lo)
            && self.hi.as_deref().is_none_or(|hi| key < hi)
    }
}

/// A tree being changed by a write transaction.
#[derive(Debug, Default)]
pub(crate) struct TreeMut {
    pub root: PageRef,
    pub len: u64,
    /// Nodes changed by this transaction, by their new page ids.
    pub dirty: PageMap<PageId, Node>,
    /// Changes the table layer wrote here directly in this transaction,
    /// and the nodes they made dirty (its rule for bulk changes).
    pub direct: Scatter,
    /// Where changes arriving in key order go (a sorted load, appends, an
    /// overlay spill): the changed leaf the last one reached and its key
    /// range, so the next key inside that range goes there without a
    /// descent. Set by `insert` only after `ORDERED_RUN` inserts in a row
    /// went after the last key of their leaf, by `apply_in_order` after
    /// every change; dropped by every change that takes another path (a
    /// descent, making a node writable, a new node, a removal, a write-out),
    /// so it never names a leaf whose range has changed since.
    hint: Option<LeafHint>,
    /// Inserts in a row that went after the last key of their leaf.
    ordered: u32,
}

/// Inserts in a row after the last key of their leaf before the tree keeps
/// a hint for the next (finding it costs a second descent: keys in random
/// order rarely make such runs).
const ORDERED_RUN: u32 = 4;

/// How a transaction's changes to one tree land: all its changes and the
/// memory they would hold in the overlay, the direct ones, and the nodes
/// those copied (made dirty) or created.
#[derive(Clone, Copy, Default, Debug)]
pub(crate) struct Scatter {
    pub all: u64,
    pub bytes: u64,
    pub changes: u64,
    pub nodes: u64,
}

impl Scatter {
    /// Direct changes seen before a verdict.
    const SAMPLE: u64 = 256;

    /// Whether the changes land scattered over a tree of `len` entries,
    /// each costing a leaf copy, in a transaction small enough that the
    /// overlay (`budget` bytes) holds those of many like it: past the first
    /// [`Self::SAMPLE`] direct changes, a node made dirty for fewer than
    /// four changes on average (random keys: about one per change; appends,
    /// or appends to a few streams in turn: one per page of entries), by a
    /// transaction whose changes are under an eighth of the tree and a
    /// sixteenth of the budget. A larger one reaches most leaves many times
    /// over (or fills the overlay by itself): it writes them once, directly.
    pub(crate) fn scattered(&self, len: u64, budget: usize) -> bool {
        self.changes >= Self::SAMPLE
            && self.nodes * 4 > self.changes
            && self.all.saturating_mul(8) < len
            && self.bytes.saturating_mul(16) < budget as u64
    }
}

enum Split {
    None,
    Split(Vec<u8>, PageId),
}

enum Removed {
    NotFound,
    /// The entry was removed; the node is below a quarter page (or empty).
    Done {
        underflow: bool,
        empty: bool,
        old: Val,
    },
}

pub(crate) struct Ctx<'a> {
    pub pager: &'a Pager,
    pub alloc: &'a mut TxnAllocator,
    pub max_file_bytes: u64,
}

impl TreeMut {
    pub(crate) fn new(root: PageRef, len: u64) -> Self {
        TreeMut {
            root,
            len,
            dirty: PageMap::default(),
            direct: Scatter::default(),
            hint: None,
            ordered: 0,
        }
    }

    pub(crate) fn source<'a>(&'a self, pager: &'a Pager) -> NodeSource<'a> {
        NodeSource {
            pager,
            dirty: Some(&self.dirty),
            pins: None,
        }
    }

    pub(crate) fn is_dirty(&self) -> bool {
        !self.dirty.is_empty()
    }

    /// Makes the node at `r` writable: returns its page id in `dirty`,
    /// copying a committed page under a new id (and freeing the old one).
    fn make_dirty(&mut self, r: PageRef, ctx: &mut Ctx) -> Result<PageId> {
        // Any node made writable may be about to change shape or take a
        // page id a hinted leaf had: the insert hint goes (`TreeMut::hint`).
        self.hint = None;
        if self.dirty.contains_key(&r.page) {
            return Ok(r.page);
        }
        let page = load_page(ctx.pager, r)?;
        let node = PageView(page.data()).to_node();
        let new = ctx.alloc.alloc()?;
        ctx.alloc.free(r.page, 1);
        self.dirty.insert(new, node);
        Ok(new)
    }

    fn node_mut(&mut self, pid: PageId) -> Result<&mut Node> {
        self.dirty
            .get_mut(&pid)
            .ok_or_else(|| CoreError::Internal(format!("{pid:?} is not a changed node")))
    }

    fn new_node(&mut self, node: Node, ctx: &mut Ctx) -> Result<PageId> {
        // (The insert hint: see `TreeMut::hint`.)
        self.hint = None;
        let pid = ctx.alloc.alloc()?;
        self.dirty.insert(pid, node);
        Ok(pid)
    }

    /// Frees a node of this tree (changed or committed).
    fn drop_node(&mut self, pid: PageId, ctx: &mut Ctx) {
        self.dirty.remove(&pid);
        ctx.alloc.free(pid, 1);
    }

    /// Stores `value` for `key`, writing large values out of line. Returns the
    /// displaced value, if any.
    pub(crate) fn insert(
        &mut self,
        ctx: &mut Ctx,
        key: &[u8],
        value: &[u8],
    ) -> Result<Option<Displaced>> {
        self.insert_with(ctx, key, value, false)
    }

    /// Appends `key`, which must be greater than every key of the tree: the
    /// rightmost path is followed without searching. `Ok(false)`, with
    /// nothing changed, if it is not greater than the last key.
    pub(crate) fn append(&mut self, ctx: &mut Ctx, key: &[u8], value: &[u8]) -> Result<bool> {
        // The hinted leaf, when its range has no upper bound, is the last
        // leaf: a key after its last key is after every key, no descent.
        let past_hinted_last = self.hint.as_ref().is_some_and(|h| {
            h.hi.is_none()
                && matches!(self.dirty.get(&h.pid),
                    Some(Node::Leaf(l)) if !l.is_empty() && l.key(l.len() - 1) < key)
        });
        if !past_hinted_last && !self.last_key_below(ctx.pager, key)? {
            return Ok(false);
        }
        self.insert_with(ctx, key, value, true)?;
        Ok(true)
    }

    /// Whether every key of the tree is less than `key` (one descent along
    /// the rightmost path, through changed nodes or cached pages).
    fn last_key_below(&self, pager: &Pager, key: &[u8]) -> Result<bool> {
        let src = self.source(pager);
        let mut r = self.root;
        if r.page.is_none() {
            return Ok(true);
        }
        for _ in 0..64 {
            let n = src.load(r)?;
            if n.is_leaf() {
                let c = n.count();
                return Ok(c == 0 || n.leaf_key(c - 1) < key);
            }
            r = n.child(n.children() - 1);
        }
        Err(tree_corruption(
            pager,
            self.root.page,
            "tree deeper than 64 levels (cycle?)".into(),
        ))
    }

    fn insert_with(
        &mut self,
        ctx: &mut Ctx,
        key: &[u8],
        value: &[u8],
        append: bool,
    ) -> Result<Option<Displaced>> {
        let page_size = ctx.pager.page_size();
        if let Some(out) = self.insert_hinted(key, value, page_size) {
            return Ok(out);
        }
        self.hint = None;
        let out = self.insert_descending(ctx, key, value, append)?;
        if self.ordered >= ORDERED_RUN {
            self.hint = self.leaf_hint(key);
        }
        Ok(out)
    }

    /// An insert into the hinted leaf (see `TreeMut::hint`) when the key lies
    /// in its range and the leaf takes it inline without a split; `None`
    /// otherwise (nothing changed). (In line: the hot step of a sorted
    /// load and of a spill.)
    #[inline(always)]
    fn insert_hinted(
        &mut self,
        key: &[u8],
        value: &[u8],
        page_size: usize,
    ) -> Option<Option<Displaced>> {
        let h = self.hint.as_ref().filter(|h| h.covers(key))?;
        if !fits_inline(key.len(), value.len(), page_size) {
            return None;
        }
        let Some(Node::Leaf(leaf)) = self.dirty.get_mut(&h.pid) else {
            return None;
        };
        if leaf.bytes + node::leaf_entry_bytes(key.len(), value.len()) > page_size {
            return None;
        }
        let old = put_in_leaf(leaf, leaf.search(key), key, ValRef::Inline(value));
        Some(self.placed(old))
    }

    /// Counts an insert that went after the last key of its leaf (`tail`)
    /// towards a run, or ends the run.
    fn note_order(&mut self, tail: bool) {
        self.ordered = if tail {
            self.ordered.saturating_add(1)
        } else {
            0
        };
    }

    /// Counts an entry put into a leaf directly (a new one, or the value
    /// it displaced).
    fn placed(&mut self, old: Option<Val>) -> Option<Displaced> {
        if old.is_none() {
            self.len = self.len.saturating_add(1);
        }
        old.map(|v| self.displace(v))
    }

    /// `insert_with` by a descent from the root.
    fn insert_descending(
        &mut self,
        ctx: &mut Ctx,
        key: &[u8],
        value: &[u8],
        append: bool,
    ) -> Result<Option<Displaced>> {
        let page_size = ctx.pager.page_size();
        let overflow;
        let val = if fits_inline(key.len(), value.len(), page_size) {
            ValRef::Inline(value)
        } else {
            overflow = write_overflow(ctx, value)?;
            overflow.as_ref()
        };
        if self.root.page.is_none() {
            let mut leaf = LeafNode::new();
            leaf.insert_at(0, key, val);
            let pid = self.new_node(Node::Leaf(leaf), ctx)?;
            self.root = PageRef {
                page: pid,
                checksum: 0,
            };
            self.len = 1;
            return Ok(None);
        }
        let root = self.make_dirty(self.root, ctx)?;
        self.root = PageRef {
            page: root,
            checksum: 0,
        };
        let (split, old) = self.insert_rec(ctx, root, key, val, true, append)?;
        if let Split::Split(sep, right) = split {
            let branch = BranchNode::new(
                vec![sep],
                vec![
                    PageRef {
                        page: root,
                        checksum: 0,
                    },
                    PageRef {
                        page: right,
                        checksum: 0,
                    },
                ],
            );
            let pid = self.new_node(Node::Branch(branch), ctx)?;
            self.root = PageRef {
                page: pid,
                checksum: 0,
            };
        }
        if old.is_none() {
            // Saturating: the count comes from the catalog record, which a
            // damaged file can set to anything (`check_integrity` reports it).
            self.len = self.len.saturating_add(1);
        }
        Ok(old.map(|v| self.displace(v)))
    }

    fn displace(&self, v: Val) -> Displaced {
        match v {
            Val::Inline(b) => Displaced::Inline(b),
            Val::Overflow {
                start,
                len,
                checksum,
            } => Displaced::Overflow {
                start,
                len,
                checksum,
            },
        }
    }

    fn insert_rec(
        &mut self,
        ctx: &mut Ctx,
        pid: PageId,
        key: &[u8],
        val: ValRef<'_>,
        rightmost: bool,
        append: bool,
    ) -> Result<(Split, Option<Val>)> {
        let page_size = ctx.pager.page_size();
        let (child_ref, ci, rightmost_child) = match self.node_mut(pid)? {
            Node::Leaf(leaf) => {
                // Appending: the key goes after the last one (checked by
                // `append` before any change).
                let found = match append {
                    true => Err(leaf.len()),
                    false => leaf.search(key),
                };
                let tail = matches!(found, Err(i) if i == leaf.len());
                let (old, at, seq) = match found {
                    Ok(i) => (Some(leaf.replace_val(i, val)), i, false),
                    Err(i) => {
                        // Right after this node's previous insert.
                        let seq = i > 0 && leaf.last_insert == Some(i - 1);
                        leaf.insert_at(i, key, val);
                        leaf.last_insert = Some(i);
                        (None, i, seq)
                    }
                };
                if leaf.bytes <= page_size {
                    self.note_order(tail);
                    return Ok((Split::None, old));
                }
                // Where keys arrive in order — after every key of the leaf
                // (an ascending load), or right after the previous insert
                // (one key range growing at its end inside a leaf that holds
                // the next range too: a stream's events, interleaved with
                // other streams') — the split goes right after the new key,
                // as LMDB's and InnoDB's do, so the finished part stays full
                // instead of half empty. Otherwise the halves are equal.
                let at_end = at + 1 == leaf.len();
                let half = (leaf.bytes - node::H) / 2 + node::H;
                let point = if at_end {
                    leaf.len() - 1
                } else if seq && (half..=page_size).contains(&leaf.prefix_bytes(at + 1)) {
                    at + 1
                } else {
                    leaf.split_point()
                };
                let right = leaf.split_off(point);
                let sep = right.key(0).to_vec();
                self.note_order(tail);
                let rpid = self.new_node(Node::Leaf(right), ctx)?;
                return Ok((Split::Split(sep, rpid), old));
            }
            Node::Branch(b) => {
                let ci = match append {
                    true => b.children.len() - 1,
                    false => b.child_index(key),
                };
                (b.children[ci], ci, rightmost && ci + 1 == b.children.len())
            }
        };
        let child = self.make_dirty(child_ref, ctx)?;
        if let Node::Branch(b) = self.node_mut(pid)? {
            b.children[ci] = PageRef {
                page: child,
                checksum: 0,
            };
        }
        let (split, old) = self.insert_rec(ctx, child, key, val, rightmost_child, append)?;
        let Split::Split(sep, right) = split else {
            return Ok((Split::None, old));
        };
        let Node::Branch(b) = self.node_mut(pid)? else {
            return Ok((Split::None, old));
        };
        b.insert_at(
            ci,
            sep,
            PageRef {
                page: right,
                checksum: 0,
            },
        );
        if b.bytes <= page_size {
            return Ok((Split::None, old));
        }
        let at_end = rightmost && ci + 2 == b.children.len();
        let m = if at_end {
            b.nkeys() - 1
        } else {
            b.split_point()
        };
        let (sep, rnode) = b.split_at(m);
        let rpid = self.new_node(Node::Branch(rnode), ctx)?;
        Ok((Split::Split(sep, rpid), old))
    }

    /// Stores `key → value` (`None`: removes `key`) where keys come in
    /// ascending order (an overlay spill): through the tree's hint (see
    /// `TreeMut::hint`), which a spill keeps after every change whatever the
    /// run so far, a key inside the range of the leaf the previous one
    /// reached goes into that leaf directly, with no descent, when the leaf
    /// needs no split or merge for it; any other change takes the normal
    /// path. Returns the displaced value, as `insert`/`remove` do.
    pub(crate) fn apply_in_order(
        &mut self,
        ctx: &mut Ctx,
        key: &[u8],
        value: Option<&[u8]>,
    ) -> Result<Option<Displaced>> {
        let page_size = ctx.pager.page_size();
        let hinted = match value {
            Some(v) => self.insert_hinted(key, v, page_size),
            None => self.remove_hinted(key, page_size),
        };
        if let Some(out) = hinted {
            return Ok(out);
        }
        let out = match value {
            Some(v) => self.insert(ctx, key, v)?,
            None => self.remove(ctx, key)?,
        };
        // (An insert that continued a run set the hint already.)
        if self.hint.is_none() {
            self.hint = self.leaf_hint(key);
        }
        Ok(out)
    }

    /// A removal from the hinted leaf (see `TreeMut::hint`) when the key lies
    /// in its range and the leaf stays at least a quarter full without it
    /// (or does not hold it: nothing to do); `None` otherwise (nothing
    /// changed).
    fn remove_hinted(&mut self, key: &[u8], page_size: usize) -> Option<Option<Displaced>> {
        let h = self.hint.as_ref().filter(|h| h.covers(key))?;
        let Some(Node::Leaf(leaf)) = self.dirty.get_mut(&h.pid) else {
            return None;
        };
        match leaf.search(key) {
            Ok(i) if leaf.bytes - leaf.entry_bytes(i) >= page_size / 4 => {
                let (_, old) = leaf.remove_at(i);
                self.len = self.len.saturating_sub(1);
                Some(Some(self.displace(old)))
            }
            Ok(_) => None,
            Err(_) => Some(None),
        }
    }

    /// The changed leaf `key` belongs in and the key range it covers, if
    /// every node on the way is changed (so its page id is stable until the
    /// next split or merge).
    fn leaf_hint(&self, key: &[u8]) -> Option<LeafHint> {
        let (mut lo, mut hi): (Option<&[u8]>, Option<&[u8]>) = (None, None);
        let mut r = self.root;
        for _ in 0..64 {
            match self.dirty.get(&r.page)? {
                Node::Branch(b) => {
                    let ci = b.child_index(key);
                    if ci > 0 {
                        lo = Some(b.key(ci - 1));
                    }
                    if ci < b.nkeys() {
                        hi = Some(b.key(ci));
                    }
                    r = *b.children.get(ci)?;
                }
                Node::Leaf(_) => {
                    return Some(LeafHint {
                        pid: r.page,
                        lo: lo.map(<[u8]>::to_vec),
                        hi: hi.map(<[u8]>::to_vec),
                    })
                }
            }
        }
        None
    }

    /// Removes `key`; returns the removed value.
    pub(crate) fn remove(&mut self, ctx: &mut Ctx, key: &[u8]) -> Result<Option<Displaced>> {
        // (The insert hint: see `TreeMut::hint`.)
        self.hint = None;
        if self.root.page.is_none() {
            return Ok(None);
        }
        // Look first so a miss copies no pages. Nodes this transaction
        // already copied cost nothing to visit again (a miss there changes
        // nothing), so the read-only look starts at the first clean node.
        let mut r = self.root;
        for depth in 0..=64 {
            if depth == 64 {
                return Err(tree_corruption(
                    ctx.pager,
                    self.root.page,
                    "tree deeper than 64 levels (cycle?)".into(),
                ));
            }
            match self.dirty.get(&r.page) {
                Some(Node::Branch(b)) => {
                    r = b
                        .children
                        .get(b.child_index(key))
                        .copied()
                        .unwrap_or_default();
                }
                Some(Node::Leaf(_)) => break,
                None => {
                    if self.source(ctx.pager).find(r, key)?.is_none() {
                        return Ok(None);
                    }
                    break;
                }
            }
        }
        let root = self.make_dirty(self.root, ctx)?;
        self.root = PageRef {
            page: root,
            checksum: 0,
        };
        let old = match self.remove_rec(ctx, root, key)? {
            Removed::NotFound => return Ok(None),
            Removed::Done { old, .. } => old,
        };
        self.len = self.len.saturating_sub(1);
        // Collapse the root: an empty leaf means an empty tree; a branch with
        // one child is replaced by that child.
        loop {
            let pid = self.root.page;
            let next = match self.dirty.get(&pid) {
                Some(Node::Leaf(l)) if l.is_empty() => PageRef::NONE,
                Some(Node::Branch(b)) if b.children.len() == 1 => b.children[0],
                _ => break,
            };
            self.drop_node(pid, ctx);
            self.root = next;
            if next.page.is_none() {
                break;
            }
        }
        Ok(Some(self.displace(old)))
    }

    fn remove_rec(&mut self, ctx: &mut Ctx, pid: PageId, key: &[u8]) -> Result<Removed> {
        let quarter = ctx.pager.page_size() / 4;
        let (child_ref, ci) = match self.node_mut(pid)? {
            Node::Leaf(leaf) => {
                return Ok(match leaf.search(key) {
                    Ok(i) => {
                        let (_, old) = leaf.remove_at(i);
                        Removed::Done {
                            underflow: leaf.bytes < quarter,
                            empty: leaf.is_empty(),
                            old,
                        }
                    }
                    Err(_) => Removed::NotFound,
                })
            }
            Node::Branch(b) => {
                let ci = b.child_index(key);
                (b.children[ci], ci)
            }
        };
        let child = self.make_dirty(child_ref, ctx)?;
        if let Node::Branch(b) = self.node_mut(pid)? {
            b.children[ci] = PageRef {
                page: child,
                checksum: 0,
            };
        }
        let (underflow, empty, old) = match self.remove_rec(ctx, child, key)? {
            Removed::NotFound => return Ok(Removed::NotFound),
            Removed::Done {
                underflow,
                empty,
                old,
            } => (underflow, empty, old),
        };
        if empty {
            self.drop_node(child, ctx);
            if let Node::Branch(b) = self.node_mut(pid)? {
                b.remove_child(ci);
            }
        } else if underflow {
            self.merge_child(ctx, pid, ci)?;
        }
        let Node::Branch(b) = self.node_mut(pid)? else {
            return Ok(Removed::NotFound);
        };
        Ok(Removed::Done {
            underflow: b.bytes < quarter || b.children.len() < 2,
            empty: b.children.is_empty(),
            old,
        })
    }

    /// Merges child `ci` of branch `pid` with a sibling if the two fit in one page.
    fn merge_child(&mut self, ctx: &mut Ctx, pid: PageId, ci: usize) -> Result<()> {
        let page_size = ctx.pager.page_size();
        let (left_i, nchildren) = match self.dirty.get(&pid) {
            Some(Node::Branch(b)) => (if ci > 0 { ci - 1 } else { ci }, b.children.len()),
            _ => return Ok(()),
        };
        if nchildren < 2 {
            return Ok(());
        }
        let (lref, rref, sep) = match self.dirty.get(&pid) {
            Some(Node::Branch(b)) => (
                b.children[left_i],
                b.children[left_i + 1],
                b.key(left_i).to_vec(),
            ),
            _ => return Ok(()),
        };
        // Check the combined size before copying the sibling.
        let (lb, leaf) = self.node_size(ctx.pager, lref)?;
        let (rb, _) = self.node_size(ctx.pager, rref)?;
        if !fits(lb, rb, leaf, sep.len(), page_size) {
            return Ok(());
        }
        let l = self.make_dirty(lref, ctx)?;
        let r = self.make_dirty(rref, ctx)?;
        let right = self.dirty.remove(&r);
        ctx.alloc.free(r, 1);
        match (self.dirty.get_mut(&l), right) {
            (Some(Node::Leaf(ln)), Some(Node::Leaf(rn))) => ln.append(rn),
            (Some(Node::Branch(ln)), Some(Node::Branch(rn))) => ln.append(sep, rn),
            _ => {
                return Err(tree_corruption(
                    ctx.pager,
                    pid,
                    "siblings at different levels".into(),
                ));
            }
        }
        if let Some(Node::Branch(b)) = self.dirty.get_mut(&pid) {
            b.children[left_i] = PageRef {
                page: l,
                checksum: 0,
            };
            b.remove_child(left_i + 1);
        }
        Ok(())
    }

    /// Serializes changed nodes bottom-up, filling in checksums; returns the
    /// pages to write. Afterwards the tree has no changed nodes.
    pub(crate) fn finalize(
        &mut self,
        pager: &Pager,
        txn: TxnId,
        out: &mut Vec<(PageId, Page)>,
    ) -> Result<()> {
        // (The insert hint: see `TreeMut::hint`.)
        self.hint = None;
        if self.root.page.is_none() || !self.dirty.contains_key(&self.root.page) {
            self.dirty.clear();
            return Ok(());
        }
        let checksum = self.finalize_rec(pager, self.root.page, txn, out, 0)?;
        self.root.checksum = checksum;
        self.dirty.clear();
        Ok(())
    }

    fn finalize_rec(
        &mut self,
        pager: &Pager,
        pid: PageId,
        txn: TxnId,
        out: &mut Vec<(PageId, Page)>,
        depth: usize,
    ) -> Result<u64> {
        let mut node = self.dirty.remove(&pid).ok_or_else(|| {
            tree_corruption(
                pager,
                pid,
                "internal: changed node missing at commit".into(),
            )
        })?;
        if depth > 64 {
            return Err(tree_corruption(
                pager,
                pid,
                "internal: tree deeper than 64 levels".into(),
            ));
        }
        if let Node::Branch(b) = &mut node {
            for c in b.children.iter_mut() {
                if self.dirty.contains_key(&c.page) {
                    c.checksum = self.finalize_rec(pager, c.page, txn, out, depth + 1)?;
                }
            }
        }
        let data = node.serialize(pager.page_size(), txn.0);
        let checksum = page_checksum(pid, &data);
        // (Its search index is built by the first search, not here.)
        out.push((pid, Page::from_box(data, checksum)));
        Ok(checksum)
    }

    /// Frees every page of the tree (used when a table is dropped).
    pub(crate) fn free_all(&mut self, ctx: &mut Ctx) -> Result<()> {
        // (The insert hint: see `TreeMut::hint`.)
        self.hint = None;
        if self.root.page.is_none() {
            return Ok(());
        }
        let mut stack = vec![self.root];
        while let Some(r) = stack.pop() {
            let node = match self.dirty.remove(&r.page) {
                Some(n) => n,
                None => PageView(load_page(ctx.pager, r)?.data()).to_node(),
            };
            match &node {
                Node::Branch(b) => stack.extend(b.children.iter().copied()),
                Node::Leaf(l) => {
                    for (_, start, len, _) in l.overflow_refs() {
                        free_overflow(ctx, start, len)?;
                    }
                }
            }
            ctx.alloc.free(r.page, 1);
        }
        self.root = PageRef::NONE;
        self.len = 0;
        Ok(())
    }
}

/// Writes a value to newly allocated contiguous pages.
pub(crate) fn write_overflow(ctx: &mut Ctx, value: &[u8]) -> Result<Val> {
    let page_size = ctx.pager.page_size() as u64;
    let n = (value.len() as u64).div_ceil(page_size).max(1);
    let start = ctx.alloc.alloc_extent(n)?;
    ctx.pager
        .ensure_len(ctx.alloc.base.page_count(), ctx.max_file_bytes)?;
    ctx.pager.write_raw(start, value)?;
    let checksum = value_checksum(start, value);
    // Values read back soon after they are written are common: keep it.
    ctx.pager.cache_value(start, checksum, Arc::from(value));
    Ok(Val::Overflow {
        start,
        len: value.len() as u64,
        checksum,
    })
}

/// Frees the pages of an out-of-line value. The reference comes from a leaf
/// and is not otherwise verified when the value is not read, so a value that
/// cannot lie in the file is reported instead of freed.
pub(crate) fn free_overflow(ctx: &mut Ctx, start: PageId, len: u64) -> Result<()> {
    let n = len.div_ceil(ctx.pager.page_size() as u64).max(1);
    let in_file = start.0 >= crate::pager::header::FIRST_DATA_PAGE
        && start
            .0
            .checked_add(n)
            .is_some_and(|end| end <= ctx.alloc.base.page_count());
    if len > crate::limits::MAX_VALUE_BYTES as u64 || !in_file {
        return Err(Corruption {
            part: DamagedPart::OverflowValue,
            page: start,
            offset: ctx.pager.offset(start),
            detail: format!("out-of-line value of {len} bytes at {start} lies outside the file"),
        }
        .into());
    }
    ctx.alloc.free(start, n);
    ctx.pager.forget_value(start);
    Ok(())
}

impl Displaced {
    /// Reads the displaced value's bytes and frees its out-of-line pages.
    pub(crate) fn take(self, ctx: &mut Ctx, want_bytes: bool) -> Result<Option<Vec<u8>>> {
        match self {
            Displaced::Inline(v) => Ok(Some(v)),
            Displaced::Overflow {
                start,
                len,
                checksum,
            } => {
                let bytes = if want_bytes {
                    Some(read_overflow(ctx.pager, start, len, checksum)?.to_vec())
                } else {
                    None
                };
                free_overflow(ctx, start, len)?;
                Ok(bytes)
            }
        }
    }
}

impl TreeMut {
    /// Copies every page of the tree that lies at or above `boundary` (and
    /// every out-of-line value starting there) to newly allocated pages, which
    /// the allocator takes lowest-first. Used by compaction.
    pub(crate) fn relocate(&mut self, ctx: &mut Ctx, boundary: u64) -> Result<()> {
        // (The insert hint: see `TreeMut::hint`.)
        self.hint = None;
        if self.root.page.is_none() {
            return Ok(());
        }
        if let Some(new) = self.relocate_rec(ctx, self.root, boundary, 0)? {
            self.root = PageRef {
                page: new,
                checksum: 0,
            };
        }
        Ok(())
    }

    fn relocate_rec(
        &mut self,
        ctx: &mut Ctx,
        r: PageRef,
        boundary: u64,
        depth: usize,
    ) -> Result<Option<PageId>> {
        if depth > 64 {
            return Err(tree_corruption(
                ctx.pager,
                r.page,
                "tree deeper than 64 levels".into(),
            ));
        }
        let node = match self.dirty.get(&r.page) {
            Some(n) => n.clone(),
            None => PageView(load_page(ctx.pager, r)?.data()).to_node(),
        };
        let mut me: Option<PageId> = self.dirty.contains_key(&r.page).then_some(r.page);
        match node {
            Node::Branch(b) => {
                for (i, c) in b.children.iter().enumerate() {
                    if let Some(new) = self.relocate_rec(ctx, *c, boundary, depth + 1)? {
                        let pid = match me {
                            Some(p) => p,
                            None => self.make_dirty(r, ctx)?,
                        };
                        me = Some(pid);
                        if let Node::Branch(b) = self.node_mut(pid)? {
                            b.children[i] = PageRef {
                                page: new,
                                checksum: 0,
                            };
                        }
                    }
                }
            }
            Node::Leaf(l) => {
                for (i, start, len, checksum) in l.overflow_refs() {
                    let pages = len.div_ceil(ctx.pager.page_size() as u64).max(1);
                    // Move a value only to a lower place, so passes never oscillate.
                    let lower = ctx.alloc.base.first_fit(pages).is_some_and(|s| s < start.0);
                    if start.0 + pages > boundary && lower {
                        let bytes = read_overflow(ctx.pager, start, len, checksum)?;
                        let nv = write_overflow(ctx, &bytes)?;
                        free_overflow(ctx, start, len)?;
                        let pid = match me {
                            Some(p) => p,
                            None => self.make_dirty(r, ctx)?,
                        };
                        me = Some(pid);
                        if let Node::Leaf(l) = self.node_mut(pid)? {
                            l.replace_val(i, nv.as_ref());
                        }
                    }
                }
            }
        }
        if me.is_none() && r.page.0 >= boundary {
            me = Some(self.make_dirty(r, ctx)?);
        }
        Ok(me)
    }
}

impl TreeMut {
    /// Compaction: merges neighbouring nodes whose entries fit in one page,
    /// and fills each leaf from its right neighbour's front, bottom-up, so a
    /// tree thinned by deletes (or filled by random inserts) takes about as
    /// many pages as its entries need. Contents and order are unchanged; a
    /// branch keeps at least two children.
    pub(crate) fn repack(&mut self, ctx: &mut Ctx) -> Result<()> {
        // (The insert hint: see `TreeMut::hint`.)
        self.hint = None;
        if self.root.page.is_none() {
            return Ok(());
        }
        if let Some(new) = self.repack_rec(ctx, self.root, 0)? {
            self.root = PageRef {
                page: new,
                checksum: 0,
            };
        }
        Ok(())
    }

    /// The serialized size of node `r` and whether it is a leaf.
    fn node_size(&self, pager: &Pager, r: PageRef) -> Result<(usize, bool)> {
        Ok(match self.dirty.get(&r.page) {
            Some(n) => (n.bytes(), matches!(n, Node::Leaf(_))),
            None => {
                let n = PageView(load_page(pager, r)?.data()).to_node();
                (n.bytes(), matches!(n, Node::Leaf(_)))
            }
        })
    }

    /// Repacks below `r`; the node's new id if it had to be copied.
    fn repack_rec(&mut self, ctx: &mut Ctx, r: PageRef, depth: usize) -> Result<Option<PageId>> {
        if depth > 64 {
            return Err(tree_corruption(
                ctx.pager,
                r.page,
                "tree deeper than 64 levels".into(),
            ));
        }
        let children: Vec<PageRef> = match self.dirty.get(&r.page) {
            Some(Node::Leaf(_)) => return Ok(None),
            Some(Node::Branch(b)) => b.children.clone(),
            None => {
                let p = load_page(ctx.pager, r)?;
                let v = PageView(p.data());
                if v.is_leaf() {
                    return Ok(None);
                }
                (0..=v.count()).map(|i| v.child(i)).collect()
            }
        };
        let mut me: Option<PageId> = self.dirty.contains_key(&r.page).then_some(r.page);
        for (i, c) in children.iter().enumerate() {
            if let Some(new) = self.repack_rec(ctx, *c, depth + 1)? {
                let pid = match me {
                    Some(p) => p,
                    None => self.make_dirty(r, ctx)?,
                };
                me = Some(pid);
                if let Some(Node::Branch(b)) = self.dirty.get_mut(&pid) {
                    if let Some(slot) = b.children.get_mut(i) {
                        *slot = PageRef {
                            page: new,
                            checksum: 0,
                        };
                    }
                }
            }
        }
        // Merge each child into its left neighbour while the two fit in a
        // page (the rule of a merge after a remove); leaves that do not fit
        // together get the left one filled from the right one's front.
        let page_size = ctx.pager.page_size();
        let mut i = 0;
        loop {
            let Some((left, right, sep_len, n)) = self.child_pair(ctx.pager, r, me, i)? else {
                return Ok(me);
            };
            if n <= 2 {
                return Ok(me);
            }
            let (lb, leaf) = self.node_size(ctx.pager, left)?;
            let (rb, _) = self.node_size(ctx.pager, right)?;
            if fits(lb, rb, leaf, sep_len, page_size) {
                let pid = match me {
                    Some(p) => p,
                    None => self.make_dirty(r, ctx)?,
                };
                me = Some(pid);
                self.merge_child(ctx, pid, i + 1)?;
                let now = match self.dirty.get(&pid) {
                    Some(Node::Branch(b)) => b.children.len(),
                    _ => n,
                };
                if now == n {
                    i += 1;
                }
            } else {
                // A left leaf within a few entries of full gains little.
                if leaf && lb + 64 < page_size {
                    self.fill_left(ctx, r, &mut me, i, left, right)?;
                }
                i += 1;
            }
        }
    }

    /// Children `i` and `i + 1` of branch `r` (its changed copy `me`, if
    /// any), the separator's length and the number of children; `None` past
    /// the last pair or if `r` is a leaf.
    fn child_pair(
        &self,
        pager: &Pager,
        r: PageRef,
        me: Option<PageId>,
        i: usize,
    ) -> Result<Option<(PageRef, PageRef, usize, usize)>> {
        Ok(match me.and_then(|p| self.dirty.get(&p)) {
            Some(Node::Branch(b)) => match (b.children.get(i), b.children.get(i + 1)) {
                (Some(&l), Some(&rr)) => Some((l, rr, b.key(i).len(), b.children.len())),
                _ => None,
            },
            Some(Node::Leaf(_)) => None,
            None => {
                let p = load_page(pager, r)?;
                let v = PageView(p.data());
                let n = v.count() + 1;
                (!v.is_leaf() && i + 1 < n)
                    .then(|| (v.child(i), v.child(i + 1), v.branch_key(i).len(), n))
            }
        })
    }
}

impl TreeMut {
    /// Moves entries from leaf `right` (child `i + 1` of branch `r`, changed
    /// copy `me`) to the end of leaf `left` (child `i`) while they fit, and
    /// makes the separator the right one's new first key. Pages are copied
    /// only if an entry moves and the branch has room for the separator.
    fn fill_left(
        &mut self,
        ctx: &mut Ctx,
        r: PageRef,
        me: &mut Option<PageId>,
        i: usize,
        left: PageRef,
        right: PageRef,
    ) -> Result<()> {
        let page_size = ctx.pager.page_size();
        let copy = |t: &TreeMut, x: PageRef| -> Result<Node> {
            Ok(match t.dirty.get(&x.page) {
                Some(n) => n.clone(),
                None => PageView(load_page(ctx.pager, x)?.data()).to_node(),
            })
        };
        let (Node::Leaf(mut ln), Node::Leaf(mut rn)) = (copy(self, left)?, copy(self, right)?)
        else {
            return Err(tree_corruption(
                ctx.pager,
                r.page,
                "siblings at different levels".into(),
            ));
        };
        if ln.take_from(&mut rn, page_size) == 0 {
            return Ok(());
        }
        let sep = rn.key(0).to_vec();
        let pid = match *me {
            Some(p) => p,
            None => self.make_dirty(r, ctx)?,
        };
        *me = Some(pid);
        let room = match self.dirty.get(&pid) {
            Some(Node::Branch(b)) => b.bytes + sep.len() <= page_size + b.key(i).len(),
            _ => false,
        };
        if !room {
            return Ok(());
        }
        let l = self.make_dirty(left, ctx)?;
        let rr = self.make_dirty(right, ctx)?;
        self.dirty.insert(l, Node::Leaf(ln));
        self.dirty.insert(rr, Node::Leaf(rn));
        if let Some(Node::Branch(b)) = self.dirty.get_mut(&pid) {
            b.children[i] = PageRef {
                page: l,
                checksum: 0,
            };
            b.children[i + 1] = PageRef {
                page: rr,
                checksum: 0,
            };
            b.set_key(i, &sep);
        }
        Ok(())
    }
}

/// Whether nodes of `lb` and `rb` bytes (leaves, or branches joined by a
/// separator of `sep_len` bytes) fit in one page together.
fn fits(lb: usize, rb: usize, leaf: bool, sep_len: usize, page_size: usize) -> bool {
    let merged = if leaf {
        lb + rb - super::node::H
    } else {
        lb + rb - super::node::H + 4 + sep_len
    };
    merged <= page_size
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Short slices are copied (no page reference), longer ones share the
    /// page; both give exactly the page's bytes, also for a short slice at
    /// the very end of the page (where the fixed-size copy window would run
    /// past it).
    #[test]
    fn page_slices_give_the_page_bytes() {
        let data: Vec<u8> = (0..512u32).map(|i| (i * 7 % 251) as u8).collect();
        let page = Page::new(&data, 1);
        for (a, b) in [
            (0, 0),
            (3, 20),
            (10, 40),
            (10, 41),
            (0, 512),
            (500, 512),
            (482, 512),
            (511, 512),
        ] {
            let v = ValueBytes::of_page(&page, a, b);
            assert_eq!(v.as_slice(), &data[a..b], "{a}..{b}");
            let small = matches!(v, ValueBytes::Small(..));
            assert_eq!(small, b - a <= SMALL && a + SMALL <= data.len(), "{a}..{b}");
        }
    }
}
