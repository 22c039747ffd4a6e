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
    pub(crate) fn stored_len(&self) -> usize {
        match self {
            Val::Inline(v) => v.len(),
            Val::Overflow { .. } => OVERFLOW_REF,
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

#[derive(Debug, Clone, Default)]
pub(crate) struct LeafNode {
    pub keys: Vec<Vec<u8>>,
    pub vals: Vec<Val>,
    /// Serialized size in bytes, header included.
    pub bytes: usize,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct BranchNode {
    /// `keys[i]` is the smallest key of `children[i + 1]`'s subtree (or a
    /// lower bound of it); `children.len() == keys.len() + 1`.
    pub keys: Vec<Vec<u8>>,
    pub children: Vec<PageRef>,
    pub bytes: usize,
}

#[derive(Debug, Clone)]
pub(crate) enum Node {
    Leaf(LeafNode),
    Branch(BranchNode),
}

impl LeafNode {
    pub(crate) fn new() -> Self {
        LeafNode {
            keys: Vec::new(),
            vals: Vec::new(),
            bytes: H,
        }
    }

    pub(crate) fn search(&self, key: &[u8]) -> Result<usize, usize> {
        self.keys.binary_search_by(|k| k.as_slice().cmp(key))
    }

    pub(crate) fn insert_at(&mut self, i: usize, key: Vec<u8>, val: Val) {
        self.bytes += leaf_entry_bytes(key.len(), val.stored_len());
        self.keys.insert(i, key);
        self.vals.insert(i, val);
    }

    pub(crate) fn replace_val(&mut self, i: usize, val: Val) -> Val {
        self.bytes = self.bytes + val.stored_len() - self.vals[i].stored_len();
        std::mem::replace(&mut self.vals[i], val)
    }

    pub(crate) fn remove_at(&mut self, i: usize) -> (Vec<u8>, Val) {
        let k = self.keys.remove(i);
        let v = self.vals.remove(i);
        self.bytes -= leaf_entry_bytes(k.len(), v.stored_len());
        (k, v)
    }

    /// Splits off the entries from `at` into a new right sibling.
    pub(crate) fn split_off(&mut self, at: usize) -> LeafNode {
        let keys = self.keys.split_off(at);
        let vals = self.vals.split_off(at);
        let moved: usize = keys
            .iter()
            .zip(&vals)
            .map(|(k, v)| leaf_entry_bytes(k.len(), v.stored_len()))
            .sum();
        self.bytes -= moved;
        LeafNode {
            keys,
            vals,
            bytes: H + moved,
        }
    }

    /// Moves all of `right`'s entries to the end of `self`.
    pub(crate) fn append(&mut self, right: LeafNode) {
        self.bytes += right.bytes - H;
        self.keys.extend(right.keys);
        self.vals.extend(right.vals);
    }

    /// The split point: the first index where the left part reaches half of
    /// the bytes; both parts are non-empty.
    pub(crate) fn split_point(&self) -> usize {
        let half = (self.bytes - H) / 2;
        let mut acc = 0;
        for (i, (k, v)) in self.keys.iter().zip(&self.vals).enumerate() {
            acc += leaf_entry_bytes(k.len(), v.stored_len());
            if acc >= half {
                return (i + 1).clamp(1, self.keys.len() - 1);
            }
        }
        self.keys.len() / 2
    }
}

impl BranchNode {
    pub(crate) fn new(keys: Vec<Vec<u8>>, children: Vec<PageRef>) -> Self {
        let bytes = H
            + 16
            + keys
                .iter()
                .map(|k| branch_entry_bytes(k.len()))
                .sum::<usize>();
        BranchNode {
            keys,
            children,
            bytes,
        }
    }

    /// The child whose subtree may hold `key`.
    pub(crate) fn child_index(&self, key: &[u8]) -> usize {
        match self.keys.binary_search_by(|k| k.as_slice().cmp(key)) {
            Ok(i) => i + 1,
            Err(i) => i,
        }
    }

    /// Inserts separator `key` and the child to its right at key index `i`.
    pub(crate) fn insert_at(&mut self, i: usize, key: Vec<u8>, right: PageRef) {
        self.bytes += branch_entry_bytes(key.len());
        self.keys.insert(i, key);
        self.children.insert(i + 1, right);
    }

    /// Removes child `ci` and one adjacent separator.
    pub(crate) fn remove_child(&mut self, ci: usize) {
        self.children.remove(ci);
        if !self.keys.is_empty() {
            let ki = ci.saturating_sub(1).min(self.keys.len() - 1);
            let k = self.keys.remove(ki);
            self.bytes -= branch_entry_bytes(k.len());
        } else {
            self.bytes -= 16;
        }
    }

    /// Splits around key `m`: `self` keeps keys `..m` and children `..=m`;
    /// returns the separator and the right node.
    pub(crate) fn split_at(&mut self, m: usize) -> (Vec<u8>, BranchNode) {
        let right_keys = self.keys.split_off(m + 1);
        let right_children = self.children.split_off(m + 1);
        let sep = self.keys.pop().unwrap_or_default();
        let right = BranchNode::new(right_keys, right_children);
        *self = BranchNode::new(
            std::mem::take(&mut self.keys),
            std::mem::take(&mut self.children),
        );
        (sep, right)
    }

    pub(crate) fn split_point(&self) -> usize {
        let half = (self.bytes - H) / 2;
        let mut acc = 0;
        for (i, k) in self.keys.iter().enumerate() {
            acc += branch_entry_bytes(k.len());
            if acc >= half {
                return i.min(self.keys.len() - 1);
            }
        }
        self.keys.len() / 2
    }

    /// Appends `sep` and all of `right` to `self`.
    pub(crate) fn append(&mut self, sep: Vec<u8>, right: BranchNode) {
        self.keys.push(sep);
        self.keys.extend(right.keys);
        self.children.extend(right.children);
        *self = BranchNode::new(
            std::mem::take(&mut self.keys),
            std::mem::take(&mut self.children),
        );
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
                let n = l.keys.len();
                d[0] = KIND_LEAF;
                d[2..4].copy_from_slice(&(n as u16).to_le_bytes());
                let mut at = H + 2 * n;
                for (i, (k, v)) in l.keys.iter().zip(&l.vals).enumerate() {
                    d[H + 2 * i..H + 2 * i + 2].copy_from_slice(&(at as u16).to_le_bytes());
                    d[at..at + 2].copy_from_slice(&(k.len() as u16).to_le_bytes());
                    let vlen = v.stored_len();
                    d[at + 2] = match v {
                        Val::Inline(_) => VKIND_INLINE,
                        Val::Overflow { .. } => VKIND_OVERFLOW,
                    };
                    d[at + 3..at + 7].copy_from_slice(&(vlen as u32).to_le_bytes());
                    at += ENTRY_HEADER;
                    d[at..at + k.len()].copy_from_slice(k);
                    at += k.len();
                    match v {
                        Val::Inline(v) => d[at..at + v.len()].copy_from_slice(v),
                        Val::Overflow {
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
                let n = b.keys.len();
                d[0] = KIND_BRANCH;
                d[2..4].copy_from_slice(&(n as u16).to_le_bytes());
                for (i, c) in b.children.iter().enumerate() {
                    let at = H + 16 * i;
                    d[at..at + 8].copy_from_slice(&c.page.0.to_le_bytes());
                    d[at + 8..at + 16].copy_from_slice(&c.checksum.to_le_bytes());
                }
                let offs = H + 16 * (n + 1);
                let mut at = offs + 2 * n;
                for (i, k) in b.keys.iter().enumerate() {
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
        let o = le_u16(self.0, H + 2 * i) as usize;
        let klen = le_u16(self.0, o) as usize;
        let kind = self.0.get(o + 2).copied().unwrap_or(0);
        let vlen = le_u32(self.0, o + 3) as usize;
        let at = o + ENTRY_HEADER + klen;
        if kind == VKIND_OVERFLOW {
            (
                ValRef::Overflow {
                    start: PageId(le_u64(self.0, at)),
                    len: le_u64(self.0, at + 8),
                    checksum: le_u64(self.0, at + 16),
                },
                at,
            )
        } else {
            (ValRef::Inline(self.slice(at, at + vlen)), at)
        }
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
        let n = self.count();
        if self.is_leaf() {
            let mut l = LeafNode {
                keys: Vec::with_capacity(n + 1),
                vals: Vec::with_capacity(n + 1),
                bytes: H,
            };
            for i in 0..n {
                let k = self.leaf_key(i).to_vec();
                let v = match self.leaf_val(i).0 {
                    ValRef::Inline(b) => Val::Inline(b.to_vec()),
                    ValRef::Overflow {
                        start,
                        len,
                        checksum,
                    } => Val::Overflow {
                        start,
                        len,
                        checksum,
                    },
                };
                l.insert_at(i, k, v);
            }
            Node::Leaf(l)
        } else {
            let keys = (0..n).map(|i| self.branch_key(i).to_vec()).collect();
            let children = (0..=n).map(|i| self.child(i)).collect();
            Node::Branch(BranchNode::new(keys, children))
        }
    }
}
