//! B+tree page formats: read-only views over verified pages, the in-memory
//! form of pages a write transaction changes, and the conversion between them.
//! Byte layouts are in FORMAT.md ("Leaf page", "Branch page").

use crate::ids::PageId;
use crate::limits::{max_entry_bytes, PAGE_HEADER_BYTES};
use crate::pager::header::{le_u16, le_u32, le_u64, PageRef};
use crate::pager::{KIND_BRANCH, KIND_LEAF};

pub(crate) const H: usize = PAGE_HEADER_BYTES;
/// Leaf entry header: key_len u16, value kind u8, value_len u32.
pub(crate) const ENTRY_HEADER: usize = 7;
/// An out-of-line value reference: first page, length, checksum.
pub(crate) const OVERFLOW_REF: usize = 24;
pub(crate) const VKIND_INLINE: u8 = 0;
pub(crate) const VKIND_OVERFLOW: u8 = 1;

/// A value as stored in a leaf.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Val {
    Inline(Vec<u8>),
    Overflow {
        start: PageId,
        len: u64,
        checksum: u64,
    },
}

impl Val {
    /// A borrowed view of this value.
    pub(crate) fn as_ref(&self) -> ValRef<'_> {
        match self {
            Val::Inline(b) => ValRef::Inline(b),
            Val::Overflow {
                start,
                len,
                checksum,
            } => ValRef::Overflow {
                start: *start,
                len: *len,
                checksum: *checksum,
            },
        }
    }
}

/// A value reference read from a page or node (inline bytes or a pointer to
/// out-of-line pages).
#[derive(Debug, Clone, Copy)]
pub(crate) enum ValRef<'a> {
    Inline(&'a [u8]),
    Overflow {
        start: PageId,
        len: u64,
        checksum: u64,
    },
}

pub(crate) fn leaf_entry_bytes(key_len: usize, stored_val_len: usize) -> usize {
    2 + ENTRY_HEADER + key_len + stored_val_len
}

/// Whether a value of `val_len` bytes with a key of `key_len` bytes is stored inline.
pub(crate) fn fits_inline(key_len: usize, val_len: usize, page_size: usize) -> bool {
    leaf_entry_bytes(key_len, val_len) <= max_entry_bytes(page_size)
}

pub(crate) fn branch_entry_bytes(key_len: usize) -> usize {
    16 + 2 + 2 + key_len
}

/// Where a leaf entry's value is: inline bytes in the arena, or a reference
/// to out-of-line pages.
#[derive(Debug, Clone, Copy)]
enum VSlot {
    Inline {
        off: u32,
        len: u32,
    },
    Overflow {
        start: PageId,
        len: u64,
        checksum: u64,
    },
}

/// One leaf entry: its key's place in the arena and its value.
#[derive(Debug, Clone, Copy)]
struct Slot {
    koff: u32,
    klen: u32,
    v: VSlot,
}

/// A leaf a write transaction changes. Keys and inline values live in one
/// byte arena (decoding a page is one copy, not an allocation per entry);
/// `slots` keeps the entries in key order. Replaced and removed entries
/// leave garbage in the arena, dropped when it outgrows the live bytes.
#[derive(Debug, Clone)]
pub(crate) struct LeafNode {
    arena: Vec<u8>,
    slots: Vec<Slot>,
    /// Each entry's key head (see [`key_head`]), beside `slots`: a search
    /// compares heads, which sit together, and reads a key from the arena
    /// only when heads are equal.
    heads: Vec<u64>,
    /// Serialized size in bytes, header included.
    pub bytes: usize,
    /// Where the tree's last insert into this node (in this transaction)
    /// went: an insert right after it is part of a sequential run.
    pub last_insert: Option<usize>,
}

impl Default for LeafNode {
    fn default() -> Self {
        LeafNode::new()
    }
}

/// The first 8 bytes of `key`, big-endian, zero-padded. Unequal heads
/// order like their keys (at the first differing byte, either both keys
/// have a byte there or the shorter one ended — padding 0 — and the other's
/// byte is larger); equal heads say nothing.
#[inline]
fn key_head(key: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let m = key.len().min(8);
    b[..m].copy_from_slice(&key[..m]);
    u64::from_be_bytes(b)
}

/// Binary search for `key` among sorted keys (`key_at(i)`, with heads
/// `heads[i]`, see [`key_head`]) that compares heads and reads keys only
/// among equal heads: `Ok(i)` if key `i` equals it, else `Err` of the
/// insertion point. Keys arriving in order (a sorted load, a stream's
/// appends) go after the last one: checked first, one comparison instead of
/// a search whose probes would all meet equal heads when keys share their
/// first 8 bytes.
fn search_by_heads<'a>(
    heads: &[u64],
    key_at: impl Fn(usize) -> &'a [u8],
    key: &[u8],
) -> Result<usize, usize> {
    let h = key_head(key);
    let n = heads.len();
    let cmp_at = |i: usize| {
        let hi = heads.get(i).copied().unwrap_or(0);
        hi.cmp(&h).then_with(|| key_at(i).cmp(key))
    };
    if let Some(last) = n.checked_sub(1) {
        match cmp_at(last) {
            std::cmp::Ordering::Less => return Err(n),
            std::cmp::Ordering::Equal => return Ok(last),
            std::cmp::Ordering::Greater => {}
        }
    }
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = (lo + hi) / 2;
        match cmp_at(mid) {
            std::cmp::Ordering::Less => lo = mid + 1,
            std::cmp::Ordering::Greater => hi = mid,
            std::cmp::Ordering::Equal => return Ok(mid),
        }
    }
    Err(lo)
}

fn vslot_stored_len(v: &VSlot) -> usize {
    match v {
        VSlot::Inline { len, .. } => *len as usize,
        VSlot::Overflow { .. } => OVERFLOW_REF,
    }
}

impl LeafNode {
    pub(crate) fn new() -> Self {
        LeafNode {
            arena: Vec::new(),
            slots: Vec::new(),
            heads: Vec::new(),
            bytes: H,
            last_insert: None,
        }
    }

    /// The number of entries.
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    fn bytes_at(&self, off: u32, len: u32) -> &[u8] {
        self.arena
            .get(off as usize..off as usize + len as usize)
            .unwrap_or(&[])
    }

    /// Entry `i`'s key (empty if out of range).
    pub(crate) fn key(&self, i: usize) -> &[u8] {
        match self.slots.get(i) {
            Some(s) => self.bytes_at(s.koff, s.klen),
            None => &[],
        }
    }

    /// Entry `i`'s value (empty inline if out of range).
    pub(crate) fn val(&self, i: usize) -> ValRef<'_> {
        match self.slots.get(i).map(|s| s.v) {
            Some(VSlot::Inline { off, len }) => ValRef::Inline(self.bytes_at(off, len)),
            Some(VSlot::Overflow {
                start,
                len,
                checksum,
            }) => ValRef::Overflow {
                start,
                len,
                checksum,
            },
            None => ValRef::Inline(&[]),
        }
    }

    pub(crate) fn search(&self, key: &[u8]) -> Result<usize, usize> {
        search_by_heads(&self.heads, |i| self.key(i), key)
    }

    fn push(&mut self, b: &[u8]) -> u32 {
        let off = self.arena.len() as u32;
        self.arena.extend_from_slice(b);
        off
    }

    fn store_val(&mut self, val: ValRef<'_>) -> VSlot {
        match val {
            ValRef::Inline(b) => VSlot::Inline {
                off: self.push(b),
                len: b.len() as u32,
            },
            ValRef::Overflow {
                start,
                len,
                checksum,
            } => VSlot::Overflow {
                start,
                len,
                checksum,
            },
        }
    }

    fn owned(&self, v: VSlot) -> Val {
        match v {
            VSlot::Inline { off, len } => Val::Inline(self.bytes_at(off, len).to_vec()),
            VSlot::Overflow {
                start,
                len,
                checksum,
            } => Val::Overflow {
                start,
                len,
                checksum,
            },
        }
    }

    /// Drops the arena's garbage once it is larger than the live bytes.
    fn maybe_compact(&mut self) {
        if self.arena.len() > 2 * self.bytes + 1024 {
            *self = self.rebuilt(0..self.slots.len());
        }
    }

    /// A new leaf holding copies of entries `r`.
    fn rebuilt(&self, r: std::ops::Range<usize>) -> LeafNode {
        // (Its arena grows with what goes in: a compaction keeps no room.)
        self.rebuilt_in(r, 0, 0)
    }

    /// [`LeafNode::rebuilt`] into room for `bytes` of keys and values and
    /// `slots` entries.
    fn rebuilt_in(&self, r: std::ops::Range<usize>, bytes: usize, slots: usize) -> LeafNode {
        let mut out = LeafNode::new();
        out.arena.reserve(bytes);
        out.slots.reserve(slots.max(r.len() + 1));
        out.heads.reserve(slots.max(r.len() + 1));
        for i in r {
            let key = self.key(i);
            let val = self.val(i);
            out.insert_at(out.len(), key, val);
        }
        out
    }

    pub(crate) fn insert_at(&mut self, i: usize, key: &[u8], val: ValRef<'_>) {
        let koff = self.push(key);
        let v = self.store_val(val);
        self.bytes += leaf_entry_bytes(key.len(), vslot_stored_len(&v));
        self.heads.insert(i, key_head(key));
        self.slots.insert(
            i,
            Slot {
                koff,
                klen: key.len() as u32,
                v,
            },
        );
    }

    /// Replaces entry `i`'s value; returns the old one.
    pub(crate) fn replace_val(&mut self, i: usize, val: ValRef<'_>) -> Val {
        let Some(old) = self.slots.get(i).map(|s| s.v) else {
            return Val::Inline(Vec::new());
        };
        let displaced = self.owned(old);
        let v = self.store_val(val);
        self.bytes = self.bytes + vslot_stored_len(&v) - vslot_stored_len(&old);
        if let Some(s) = self.slots.get_mut(i) {
            s.v = v;
        }
        self.maybe_compact();
        displaced
    }

    /// Entry `i`'s size in the page (0 past the end).
    pub(crate) fn entry_bytes(&self, i: usize) -> usize {
        self.slots.get(i).map_or(0, |s| {
            leaf_entry_bytes(s.klen as usize, vslot_stored_len(&s.v))
        })
    }

    pub(crate) fn remove_at(&mut self, i: usize) -> (Vec<u8>, Val) {
        if i >= self.slots.len() {
            return (Vec::new(), Val::Inline(Vec::new()));
        }
        let s = self.slots.remove(i);
        self.heads.remove(i);
        let out = (self.bytes_at(s.koff, s.klen).to_vec(), self.owned(s.v));
        self.bytes -= leaf_entry_bytes(s.klen as usize, vslot_stored_len(&s.v));
        self.maybe_compact();
        out
    }

    /// Overflow references of every entry, with their index.
    pub(crate) fn overflow_refs(&self) -> Vec<(usize, PageId, u64, u64)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| match s.v {
                VSlot::Overflow {
                    start,
                    len,
                    checksum,
                } => Some((i, start, len, checksum)),
                VSlot::Inline { .. } => None,
            })
            .collect()
    }

    /// Splits off the entries from `at` into a new right sibling.
    pub(crate) fn split_off(&mut self, at: usize) -> LeafNode {
        // The new half gets room for a whole page's entries: it fills up
        // again as inserts go on (in key order it takes every insert), and
        // growing from a small buffer would copy it at each doubling. (The
        // node's serialized size, just over a page, bounds that room; its
        // arena's capacity, garbage included, could be twice as much.)
        let (bytes, slots) = (self.bytes, self.slots.len() + 1);
        let right = self.rebuilt_in(at..self.slots.len(), bytes, slots);
        // The left half is this node cut short: the moved entries' bytes
        // stay in its arena as garbage (`maybe_compact` drops them once they
        // outweigh the live ones) instead of every kept entry being copied
        // (an ascending load splits off one entry at a time).
        for s in self.slots.get(at..).unwrap_or(&[]) {
            self.bytes -= leaf_entry_bytes(s.klen as usize, vslot_stored_len(&s.v));
        }
        self.slots.truncate(at);
        self.heads.truncate(at);
        self.last_insert = None;
        self.maybe_compact();
        right
    }

    /// Moves entries from the front of `right` to the end of `self` while
    /// `self` stays within `page_size` and `right` keeps one entry; returns
    /// how many moved.
    pub(crate) fn take_from(&mut self, right: &mut LeafNode, page_size: usize) -> usize {
        let mut moved = 0;
        while right.len() > 1 {
            let Some(s) = right.slots.first() else { break };
            let add = leaf_entry_bytes(s.klen as usize, vslot_stored_len(&s.v));
            if self.bytes + add > page_size {
                break;
            }
            let (k, v) = right.remove_at(0);
            self.insert_at(self.len(), &k, v.as_ref());
            moved += 1;
        }
        moved
    }

    /// Moves all of `right`'s entries to the end of `self`.
    pub(crate) fn append(&mut self, right: LeafNode) {
        for i in 0..right.len() {
            self.insert_at(self.len(), right.key(i), right.val(i));
        }
    }

    /// Serialized size of a leaf holding entries `0..n`.
    pub(crate) fn prefix_bytes(&self, n: usize) -> usize {
        H + self
            .slots
            .iter()
            .take(n)
            .map(|s| leaf_entry_bytes(s.klen as usize, vslot_stored_len(&s.v)))
            .sum::<usize>()
    }

    /// The split point: the first index where the left part reaches half of
    /// the bytes; both parts are non-empty.
    pub(crate) fn split_point(&self) -> usize {
        let half = (self.bytes - H) / 2;
        let mut acc = 0;
        for (i, s) in self.slots.iter().enumerate() {
            acc += leaf_entry_bytes(s.klen as usize, vslot_stored_len(&s.v));
            if acc >= half {
                return (i + 1).clamp(1, self.slots.len() - 1);
            }
        }
        self.slots.len() / 2
    }

    /// Decodes a validated leaf page: the page bytes become the arena.
    fn from_page(view: &PageView<'_>) -> LeafNode {
        let n = view.count();
        // Room for a few changes before the arena reallocates.
        let mut arena = Vec::with_capacity(view.0.len() + view.0.len() / 4);
        arena.extend_from_slice(view.0);
        let mut l = LeafNode {
            arena,
            slots: Vec::with_capacity(n + 1),
            heads: Vec::with_capacity(n + 1),
            bytes: H,
            last_insert: None,
        };
        for i in 0..n {
            let k = view.leaf_key(i);
            let koff = (k.as_ptr() as usize - view.0.as_ptr() as usize) as u32;
            let (v, at) = view.leaf_val(i);
            let v = match v {
                ValRef::Inline(b) => VSlot::Inline {
                    off: at as u32,
                    len: b.len() as u32,
                },
                ValRef::Overflow {
                    start,
                    len,
                    checksum,
                } => VSlot::Overflow {
                    start,
                    len,
                    checksum,
                },
            };
            l.bytes += leaf_entry_bytes(k.len(), vslot_stored_len(&v));
            l.heads.push(key_head(k));
            l.slots.push(Slot {
                koff,
                klen: k.len() as u32,
                v,
            });
        }
        l
    }
}

/// A branch a write transaction changes. Keys live in one byte arena
/// (`kspans` gives each key's place), as in [`LeafNode`].
#[derive(Debug, Clone, Default)]
pub(crate) struct BranchNode {
    arena: Vec<u8>,
    /// Key `i` (offset, length in `arena`) is the smallest key of
    /// `children[i + 1]`'s subtree (or a lower bound of it);
    /// `children.len() == kspans.len() + 1`.
    kspans: Vec<(u32, u32)>,
    /// Each key's head ([`key_head`]), beside `kspans`: a search compares
    /// heads and reads a key from the arena only when heads are equal.
    heads: Vec<u64>,
    pub children: Vec<PageRef>,
    pub bytes: usize,
}

#[derive(Debug, Clone)]
pub(crate) enum Node {
    Leaf(LeafNode),
    Branch(BranchNode),
}

impl BranchNode {
    pub(crate) fn new(keys: Vec<Vec<u8>>, children: Vec<PageRef>) -> Self {
        let mut b = BranchNode {
            arena: Vec::new(),
            kspans: Vec::with_capacity(keys.len() + 1),
            heads: Vec::with_capacity(keys.len() + 1),
            children,
            bytes: H + 16,
        };
        for k in &keys {
            b.push_key(k);
        }
        b
    }

    fn push_key(&mut self, k: &[u8]) {
        let off = self.arena.len() as u32;
        self.arena.extend_from_slice(k);
        self.kspans.push((off, k.len() as u32));
        self.heads.push(key_head(k));
        self.bytes += branch_entry_bytes(k.len());
    }

    /// The number of keys (one less than the children).
    pub(crate) fn nkeys(&self) -> usize {
        self.kspans.len()
    }

    /// Key `i` (empty if out of range).
    pub(crate) fn key(&self, i: usize) -> &[u8] {
        match self.kspans.get(i) {
            Some(&(off, len)) => self
                .arena
                .get(off as usize..off as usize + len as usize)
                .unwrap_or(&[]),
            None => &[],
        }
    }

    /// The child whose subtree may hold `key`.
    pub(crate) fn child_index(&self, key: &[u8]) -> usize {
        match search_by_heads(&self.heads, |i| self.key(i), key) {
            Ok(i) => i + 1,
            Err(i) => i,
        }
    }

    /// Inserts separator `key` and the child to its right at key index `i`.
    pub(crate) fn insert_at(&mut self, i: usize, key: Vec<u8>, right: PageRef) {
        let off = self.arena.len() as u32;
        self.arena.extend_from_slice(&key);
        self.kspans.insert(i, (off, key.len() as u32));
        self.heads.insert(i, key_head(&key));
        self.bytes += branch_entry_bytes(key.len());
        self.children.insert(i + 1, right);
        if self.arena.len() > 2 * self.bytes + 1024 {
            *self = self.rebuilt(0..self.nkeys(), 0..self.children.len());
        }
    }

    /// A branch with copies of keys `keys` and children `children`.
    fn rebuilt(&self, keys: std::ops::Range<usize>, children: std::ops::Range<usize>) -> Self {
        let mut b = BranchNode {
            arena: Vec::new(),
            kspans: Vec::with_capacity(keys.len() + 1),
            heads: Vec::with_capacity(keys.len() + 1),
            children: self.children.get(children).unwrap_or(&[]).to_vec(),
            bytes: H + 16,
        };
        for i in keys {
            b.push_key(self.key(i));
        }
        b
    }

    /// Replaces separator `i` (its replacement must keep the order).
    pub(crate) fn set_key(&mut self, i: usize, key: &[u8]) {
        let off = self.arena.len() as u32;
        if let Some(span) = self.kspans.get_mut(i) {
            self.bytes = self.bytes + key.len() - span.1 as usize;
            *span = (off, key.len() as u32);
            self.arena.extend_from_slice(key);
            if let Some(h) = self.heads.get_mut(i) {
                *h = key_head(key);
            }
        }
    }

    /// Removes child `ci` and one adjacent separator.
    pub(crate) fn remove_child(&mut self, ci: usize) {
        self.children.remove(ci);
        if !self.kspans.is_empty() {
            let ki = ci.saturating_sub(1).min(self.kspans.len() - 1);
            let (_, len) = self.kspans.remove(ki);
            self.heads.remove(ki);
            self.bytes -= branch_entry_bytes(len as usize);
        } else {
            self.bytes -= 16;
        }
    }

    /// Splits around key `m`: `self` keeps keys `..m` and children `..=m`;
    /// returns the separator and the right node.
    pub(crate) fn split_at(&mut self, m: usize) -> (Vec<u8>, BranchNode) {
        let n = self.nkeys();
        let sep = self.key(m).to_vec();
        let right = self.rebuilt(m + 1..n, m + 1..self.children.len());
        *self = self.rebuilt(0..m, 0..m + 1);
        (sep, right)
    }

    pub(crate) fn split_point(&self) -> usize {
        let half = (self.bytes - H) / 2;
        let mut acc = 0;
        for (i, &(_, len)) in self.kspans.iter().enumerate() {
            acc += branch_entry_bytes(len as usize);
            if acc >= half {
                return i.min(self.kspans.len() - 1);
            }
        }
        self.kspans.len() / 2
    }

    /// Appends `sep` and all of `right` to `self`.
    pub(crate) fn append(&mut self, sep: Vec<u8>, right: BranchNode) {
        self.push_key(&sep);
        for i in 0..right.nkeys() {
            self.push_key(right.key(i));
        }
        self.children.extend(right.children);
    }

    /// Decodes a validated branch page: its bytes become the arena.
    fn from_page(view: &PageView<'_>) -> BranchNode {
        let n = view.count();
        let mut b = BranchNode {
            arena: view.0.to_vec(),
            kspans: Vec::with_capacity(n + 1),
            heads: Vec::with_capacity(n + 1),
            children: (0..=n).map(|i| view.child(i)).collect(),
            bytes: H + 16,
        };
        for i in 0..n {
            let k = view.branch_key(i);
            let off = (k.as_ptr() as usize - view.0.as_ptr() as usize) as u32;
            b.kspans.push((off, k.len() as u32));
            b.heads.push(key_head(k));
            b.bytes += branch_entry_bytes(k.len());
        }
        b
    }
}

impl Node {
    pub(crate) fn bytes(&self) -> usize {
        match self {
            Node::Leaf(l) => l.bytes,
            Node::Branch(b) => b.bytes,
        }
    }

    /// Serializes into a page buffer of `page_size` bytes.
    pub(crate) fn serialize(&self, page_size: usize, txn: u64) -> Box<[u8]> {
        let mut d = vec![0u8; page_size].into_boxed_slice();
        d[8..16].copy_from_slice(&txn.to_le_bytes());
        match self {
            Node::Leaf(l) => {
                let n = l.len();
                d[0] = KIND_LEAF;
                d[2..4].copy_from_slice(&(n as u16).to_le_bytes());
                let mut at = H + 2 * n;
                for i in 0..n {
                    let (k, v) = (l.key(i), l.val(i));
                    d[H + 2 * i..H + 2 * i + 2].copy_from_slice(&(at as u16).to_le_bytes());
                    d[at..at + 2].copy_from_slice(&(k.len() as u16).to_le_bytes());
                    let vlen = match v {
                        ValRef::Inline(b) => b.len(),
                        ValRef::Overflow { .. } => OVERFLOW_REF,
                    };
                    d[at + 2] = match v {
                        ValRef::Inline(_) => VKIND_INLINE,
                        ValRef::Overflow { .. } => VKIND_OVERFLOW,
                    };
                    d[at + 3..at + 7].copy_from_slice(&(vlen as u32).to_le_bytes());
                    at += ENTRY_HEADER;
                    d[at..at + k.len()].copy_from_slice(k);
                    at += k.len();
                    match v {
                        ValRef::Inline(v) => d[at..at + v.len()].copy_from_slice(v),
                        ValRef::Overflow {
                            start,
                            len,
                            checksum,
                        } => {
                            d[at..at + 8].copy_from_slice(&start.0.to_le_bytes());
                            d[at + 8..at + 16].copy_from_slice(&len.to_le_bytes());
                            d[at + 16..at + 24].copy_from_slice(&checksum.to_le_bytes());
                        }
                    }
                    at += vlen;
                }
            }
            Node::Branch(b) => {
                let n = b.nkeys();
                d[0] = KIND_BRANCH;
                d[2..4].copy_from_slice(&(n as u16).to_le_bytes());
                for (i, c) in b.children.iter().enumerate() {
                    let at = H + 16 * i;
                    d[at..at + 8].copy_from_slice(&c.page.0.to_le_bytes());
                    d[at + 8..at + 16].copy_from_slice(&c.checksum.to_le_bytes());
                }
                let offs = H + 16 * (n + 1);
                let mut at = offs + 2 * n;
                for i in 0..n {
                    let k = b.key(i);
                    d[offs + 2 * i..offs + 2 * i + 2].copy_from_slice(&(at as u16).to_le_bytes());
                    d[at..at + 2].copy_from_slice(&(k.len() as u16).to_le_bytes());
                    d[at + 2..at + 2 + k.len()].copy_from_slice(k);
                    at += 2 + k.len();
                }
            }
        }
        d
    }
}

/// Checks a tree page's structure so that the accessors below stay in bounds.
/// Called once when a page is loaded from disk.
///
/// Besides bounds, it checks what the writer guarantees and the
/// copy-on-write code relies on: the decoded node fits the page again (no
/// overlapping entries counted twice), every leaf entry is at most a quarter
/// page (`max_entry_bytes`) and every branch key at most `max_key_bytes`, so
/// that a split of an over-full node always yields two nodes that fit.
pub(crate) fn validate(d: &[u8]) -> Result<(), String> {
    let n = le_u16(d, 2) as usize;
    let p = d.len();
    let max_entry = p.saturating_sub(H) / 4;
    match d.first().copied() {
        Some(KIND_LEAF) => {
            if H + 2 * n > p {
                return Err(format!("leaf claims {n} entries, more than fit"));
            }
            let mut total = H;
            for i in 0..n {
                let o = le_u16(d, H + 2 * i) as usize;
                if o < H + 2 * n || o + ENTRY_HEADER > p {
                    return Err(format!("leaf entry {i} offset {o} out of range"));
                }
                let klen = le_u16(d, o) as usize;
                let kind = d[o + 2];
                let vlen = le_u32(d, o + 3) as usize;
                if kind > VKIND_OVERFLOW || (kind == VKIND_OVERFLOW && vlen != OVERFLOW_REF) {
                    return Err(format!("leaf entry {i} has bad value kind {kind}/{vlen}"));
                }
                if o + ENTRY_HEADER + klen + vlen > p {
                    return Err(format!("leaf entry {i} runs past the page end"));
                }
                let entry = leaf_entry_bytes(klen, vlen);
                if entry > max_entry {
                    return Err(format!(
                        "leaf entry {i} of {entry} bytes is larger than a quarter page"
                    ));
                }
                total += entry;
            }
            if total > p {
                return Err(format!(
                    "leaf entries add up to {total} bytes, more than the page (they overlap)"
                ));
            }
            Ok(())
        }
        Some(KIND_BRANCH) => {
            let offs = H + 16 * (n + 1);
            if offs + 2 * n > p {
                return Err(format!("branch claims {n} keys, more than fit"));
            }
            for i in 0..=n {
                let c = le_u64(d, H + 16 * i);
                if c == 0 {
                    return Err(format!("branch child {i} is the null page"));
                }
            }
            let max_key = max_entry.saturating_sub(crate::limits::LEAF_ENTRY_OVERHEAD_BYTES);
            let mut total = H + 16;
            for i in 0..n {
                let o = le_u16(d, offs + 2 * i) as usize;
                if o < offs + 2 * n || o + 2 > p || o + 2 + le_u16(d, o) as usize > p {
                    return Err(format!("branch key {i} out of range"));
                }
                let klen = le_u16(d, o) as usize;
                if klen > max_key {
                    return Err(format!(
                        "branch key {i} of {klen} bytes is longer than a key"
                    ));
                }
                total += branch_entry_bytes(klen);
            }
            if total > p {
                return Err(format!(
                    "branch keys add up to {total} bytes, more than the page (they overlap)"
                ));
            }
            Ok(())
        }
        other => Err(format!("not a tree page (kind byte {other:?})")),
    }
}

/// A read-only view of a validated tree page.
#[derive(Clone, Copy)]
pub(crate) struct PageView<'a>(pub &'a [u8]);

impl<'a> PageView<'a> {
    pub(crate) fn is_leaf(&self) -> bool {
        self.0.first() == Some(&KIND_LEAF)
    }
    pub(crate) fn count(&self) -> usize {
        le_u16(self.0, 2) as usize
    }
    fn slice(&self, a: usize, b: usize) -> &'a [u8] {
        self.0.get(a..b).unwrap_or(&[])
    }
    /// Leaf entry `i`'s key.
    pub(crate) fn leaf_key(&self, i: usize) -> &'a [u8] {
        let o = le_u16(self.0, H + 2 * i) as usize;
        let klen = le_u16(self.0, o) as usize;
        self.slice(o + ENTRY_HEADER, o + ENTRY_HEADER + klen)
    }
    /// Leaf entry `i`'s value, with the byte range of an inline value.
    pub(crate) fn leaf_val(&self, i: usize) -> (ValRef<'a>, usize) {
        let (_, _, v, at) = self.leaf_entry(i);
        (v, at)
    }
    /// Leaf entry `i` in one parse: key offset and length, value, and the
    /// offset where the value's stored bytes begin.
    #[inline]
    pub(crate) fn leaf_entry(&self, i: usize) -> (usize, usize, ValRef<'a>, usize) {
        let o = le_u16(self.0, H + 2 * i) as usize;
        let klen = le_u16(self.0, o) as usize;
        let kind = self.0.get(o + 2).copied().unwrap_or(0);
        let vlen = le_u32(self.0, o + 3) as usize;
        let at = o + ENTRY_HEADER + klen;
        let v = if kind == VKIND_OVERFLOW {
            ValRef::Overflow {
                start: PageId(le_u64(self.0, at)),
                len: le_u64(self.0, at + 8),
                checksum: le_u64(self.0, at + 16),
            }
        } else {
            ValRef::Inline(self.slice(at, at + vlen))
        };
        (o + ENTRY_HEADER, klen, v, at)
    }
    /// Leaf entry `i`'s key and inline value, or `None` if its value is
    /// stored out of line (a scan's hot path: one parse, no value enum).
    #[inline(always)]
    pub(crate) fn leaf_inline(&self, i: usize) -> Option<(&'a [u8], &'a [u8])> {
        let o = le_u16(self.0, H + 2 * i) as usize;
        let klen = le_u16(self.0, o) as usize;
        if self.0.get(o + 2).copied().unwrap_or(0) == VKIND_OVERFLOW {
            return None;
        }
        let vlen = le_u32(self.0, o + 3) as usize;
        let at = o + ENTRY_HEADER + klen;
        Some((self.slice(o + ENTRY_HEADER, at), self.slice(at, at + vlen)))
    }
    pub(crate) fn leaf_search(&self, key: &[u8]) -> Result<usize, usize> {
        let (mut lo, mut hi) = (0, self.count());
        while lo < hi {
            let mid = (lo + hi) / 2;
            match self.leaf_key(mid).cmp(key) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Ok(mid),
            }
        }
        Err(lo)
    }
    /// Branch child `i`.
    pub(crate) fn child(&self, i: usize) -> PageRef {
        PageRef {
            page: PageId(le_u64(self.0, H + 16 * i)),
            checksum: le_u64(self.0, H + 16 * i + 8),
        }
    }
    /// Branch key `i`.
    pub(crate) fn branch_key(&self, i: usize) -> &'a [u8] {
        let offs = H + 16 * (self.count() + 1);
        let o = le_u16(self.0, offs + 2 * i) as usize;
        let klen = le_u16(self.0, o) as usize;
        self.slice(o + 2, o + 2 + klen)
    }
    pub(crate) fn child_index(&self, key: &[u8]) -> usize {
        let (mut lo, mut hi) = (0, self.count());
        while lo < hi {
            let mid = (lo + hi) / 2;
            match self.branch_key(mid).cmp(key) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return mid + 1,
            }
        }
        lo
    }

    /// Decodes into the in-memory form (for a write transaction to change it).
    pub(crate) fn to_node(self) -> Node {
        if self.is_leaf() {
            Node::Leaf(LeafNode::from_page(&self))
        } else {
            Node::Branch(BranchNode::from_page(&self))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::PageId;
    use proptest::prelude::*;

    /// The child a plain search over the separators gives.
    fn plain_child(keys: &[Vec<u8>], key: &[u8]) -> usize {
        keys.partition_point(|k| k.as_slice() <= key)
    }

    proptest! {
        /// An owned branch's search (heads, then keys among equal heads)
        /// gives a plain search's child after every way its separators
        /// change: built, inserted into, replaced (`set_key`, compaction's
        /// refill), a child removed, split, decoded from its page.
        #[test]
        fn branch_search_matches_a_plain_search(
            mut keys in proptest::collection::btree_set(
                proptest::collection::vec(prop_oneof![Just(0u8), Just(b'k'), any::<u8>()], 0..14),
                2..40,
            ).prop_map(|s| s.into_iter().collect::<Vec<_>>()),
            extra in proptest::collection::vec(any::<u8>(), 0..14),
            probes in proptest::collection::vec(proptest::collection::vec(prop_oneof![Just(0u8), Just(b'k'), any::<u8>()], 0..14), 1..30),
            at in any::<prop::sample::Index>(),
        ) {
            let child = |i: usize| PageRef { page: PageId(i as u64 + 1), checksum: 0 };
            let mut b = BranchNode::new(keys.clone(), (0..=keys.len()).map(child).collect());
            let check = |b: &BranchNode, keys: &[Vec<u8>]| -> Result<(), TestCaseError> {
                for p in probes.iter().chain(keys) {
                    prop_assert_eq!(b.child_index(p), plain_child(keys, p), "probe {:?}", p);
                }
                Ok(())
            };
            check(&b, &keys)?;
            // A new separator where it belongs.
            if let Err(i) = keys.binary_search(&extra) {
                b.insert_at(i, extra.clone(), child(99));
                keys.insert(i, extra.clone());
                check(&b, &keys)?;
            }
            // A separator replaced by another that keeps the order.
            // (Any probe strictly between its neighbours: its head usually
            // differs from the one it replaces.)
            let (n, start) = (keys.len(), at.index(keys.len()));
            for (j, repl) in probes.iter().enumerate() {
                let i = (start + j) % n;
                let above_prev = i == 0 || keys[i - 1] < *repl;
                let below_next = keys.get(i + 1).is_none_or(|next| repl < next);
                if above_prev && below_next && keys[i] != *repl {
                    b.set_key(i, repl);
                    keys[i] = repl.clone();
                    check(&b, &keys)?;
                }
            }
            // A child removed with its separator.
            let ci = at.index(keys.len() + 1);
            b.remove_child(ci);
            keys.remove(ci.saturating_sub(1).min(keys.len() - 1));
            check(&b, &keys)?;
            // Written as a page and decoded again.
            let page = Node::Branch(b.clone()).serialize(4096, 1).to_vec();
            validate(&page).map_err(TestCaseError::fail)?;
            let Node::Branch(decoded) = PageView(&page).to_node() else {
                return Err(TestCaseError::fail("not decoded as a branch"));
            };
            check(&decoded, &keys)?;
            if keys.len() >= 3 {
                let m = keys.len() / 2;
                let (_, right) = b.split_at(m);
                check(&b, &keys[..m])?;
                check(&right, &keys[m + 1..])?;
            }
        }
    }
}
