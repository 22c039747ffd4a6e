//! The in-memory search index of a cached tree page (never written to the
//! file): the keys' common prefix once, then a 4-byte *head* per key — the
//! big-endian bytes of the key right after that prefix, zero-padded. A
//! binary search compares heads, which sit together in a few cache lines,
//! and reads a key itself only when heads are equal. Without it, every probe
//! of a binary search follows a slot to its key elsewhere in the page: one
//! cache miss per probe on a page that is not in the CPU cache.
//!
//! Ordering argument: all keys of the page share the prefix (it is the
//! common prefix of the first and last key, and keys are sorted). For a
//! search key with that prefix, heads compare like the keys whenever they
//! differ: at the first differing byte both keys either have real bytes, or
//! the shorter one ended there (padding 0) and the other has a byte > 0. So
//! unequal heads decide the order, and equal heads fall back to comparing
//! the keys.
//!
//! Layout: `prefix length u16 (native) | page kind u8 | 0 u8 | prefix bytes,
//! padded to a multiple of 4 | head u32 (native) × count`.
//!
//! It is built lazily, by the first search of the page (a point lookup or
//! the seek of a range, through [`crate::pager::Page::index_or_build`]),
//! not when the page is loaded: a scan walks a leaf by its entry offsets
//! alone, so the leaves a scan loads (and those it reads ahead) are never
//! indexed unless something searches them later. Once built it lives as
//! long as the cached page.

use std::cmp::Ordering;

use super::node::PageView;

#[inline]
fn head(key: &[u8], at: usize) -> u32 {
    let rest = key.get(at..).unwrap_or(&[]);
    // Four bytes to read (the common case), or fewer zero-padded: no copy
    // of a variable length (which would be a call to memcpy), no loop.
    match *rest {
        [a, b, c, d, ..] => u32::from_be_bytes([a, b, c, d]),
        [a, b, c] => u32::from_be_bytes([a, b, c, 0]),
        [a, b] => u32::from_be_bytes([a, b, 0, 0]),
        [a] => u32::from_be_bytes([a, 0, 0, 0]),
        [] => 0,
    }
}

/// `a.cmp(b)` for byte strings, with short ones (keys of a few words, the
/// prefixes and key ends a search compares) compared eight bytes at a time
/// in line instead of through a call to `memcmp`.
#[inline(always)]
pub(crate) fn cmp_bytes(a: &[u8], b: &[u8]) -> Ordering {
    let n = a.len().min(b.len());
    if n > 24 {
        return a.cmp(b);
    }
    let (mut i, mut x, mut y) = (0, a, b);
    while i + 8 <= n {
        if let (Some(&wa), Some(&wb)) = (x.first_chunk::<8>(), y.first_chunk::<8>()) {
            let (wa, wb) = (u64::from_be_bytes(wa), u64::from_be_bytes(wb));
            if wa != wb {
                return wa.cmp(&wb);
            }
        }
        x = &x[8..];
        y = &y[8..];
        i += 8;
    }
    for (p, q) in x.iter().zip(y) {
        if p != q {
            return p.cmp(q);
        }
    }
    a.len().cmp(&b.len())
}

fn key_of<'a>(v: &PageView<'a>, i: usize) -> &'a [u8] {
    if v.is_leaf() {
        v.leaf_key(i)
    } else {
        v.branch_key(i)
    }
}

/// Builds the search index of a validated tree page (leaf keys or branch
/// separators). Empty for an empty page.
pub(crate) fn build(data: &[u8]) -> Vec<u8> {
    let v = PageView(data);
    let n = v.count();
    if n == 0 {
        return Vec::new();
    }
    let (first, last) = (key_of(&v, 0), key_of(&v, n - 1));
    let l = first
        .iter()
        .zip(last)
        .take_while(|(a, b)| a == b)
        .count()
        .min(u16::MAX as usize);
    let padded = l.div_ceil(4) * 4;
    let mut out = Vec::with_capacity(4 + padded + 4 * n);
    out.extend_from_slice(&(l as u16).to_ne_bytes());
    out.extend_from_slice(&[data.first().copied().unwrap_or(0), 0]);
    out.extend_from_slice(first.get(..l).unwrap_or(&[]));
    out.resize(4 + padded, 0);
    for i in 0..n {
        out.extend_from_slice(&head(key_of(&v, i), l).to_ne_bytes());
    }
    out
}

/// A parsed index for a page of `n` keys.
pub(crate) struct Index<'a> {
    prefix: &'a [u8],
    heads: &'a [u8],
}

impl<'a> Index<'a> {
    /// The index `idx` built for a page; `None` if there is none.
    #[inline]
    pub(crate) fn parse(idx: &'a [u8]) -> Option<Index<'a>> {
        let l = u16::from_ne_bytes([*idx.first()?, *idx.get(1)?]) as usize;
        let at = 4 + l.div_ceil(4) * 4;
        Some(Index {
            prefix: idx.get(4..4 + l)?,
            heads: idx.get(at..)?,
        })
    }

    /// Binary search for `key` among the page's sorted keys (`key_at(i)` is
    /// key `i`): `Ok(i)` if key `i` equals it, else `Err` of the insertion
    /// point — the same answer as a plain binary search over the keys.
    #[inline]
    pub(crate) fn search(
        &self,
        key: &[u8],
        key_at: impl Fn(usize) -> &'a [u8],
    ) -> Result<usize, usize> {
        let n = self.heads.len() / 4;
        let l = self.prefix.len();
        let m = key.len().min(l);
        match cmp_bytes(
            key.get(..m).unwrap_or(&[]),
            self.prefix.get(..m).unwrap_or(&[]),
        ) {
            Ordering::Less => return Err(0),
            Ordering::Greater => return Err(n),
            // A proper prefix of the common prefix sorts before every key.
            Ordering::Equal if key.len() < l => return Err(0),
            Ordering::Equal => {}
        }
        let h = head(key, l);
        // The first key whose head is not below `h`, then the first whose
        // head is above it: both searches over the heads alone, written so
        // the compiler makes each step a conditional move (a random lookup
        // mispredicts a branch at about every other step of a plain binary
        // search).
        let lo = self.first_head_at_least(h, 0, n);
        if lo == n || self.head_at(lo) != h {
            return Err(lo);
        }
        // Usually `lo` is the only key with that head.
        let hi = if lo + 1 == n || self.head_at(lo + 1) != h {
            lo + 1
        } else {
            match h.checked_add(1) {
                Some(h1) => self.first_head_at_least(h1, lo + 1, n),
                None => n,
            }
        };
        // Keys `lo..hi` share `key`'s prefix and head: compare what follows
        // them (the prefix and head bytes equal, the order is that of the
        // rests, a shorter key's empty rest first).
        let rest = |k: &'a [u8]| k.get(l + 4..).unwrap_or(&[]);
        let key_rest = key.get(l + 4..).unwrap_or(&[]);
        let (mut lo, mut hi) = (lo, hi);
        while lo < hi {
            let mid = (lo + hi) / 2;
            let k = key_at(mid);
            // Equal heads with fewer than four bytes after the prefix: the
            // padding hides the length, which the full comparison sees.
            let ord = if k.len() >= l + 4 && key.len() >= l + 4 {
                cmp_bytes(rest(k), key_rest)
            } else {
                cmp_bytes(k, key)
            };
            match ord {
                Ordering::Less => lo = mid + 1,
                Ordering::Greater => hi = mid,
                Ordering::Equal => return Ok(mid),
            }
        }
        Err(lo)
    }

    /// Head `i` (0 past the end, which the searches never read).
    #[inline(always)]
    fn head_at(&self, i: usize) -> u32 {
        match self.heads.get(4 * i..4 * i + 4) {
            Some(&[a, b, c, d]) => u32::from_ne_bytes([a, b, c, d]),
            _ => 0,
        }
    }

    /// The first index in `lo..n` whose head is at least `h` (`n` if none);
    /// heads are sorted.
    #[inline(always)]
    fn first_head_at_least(&self, h: u32, lo: usize, n: usize) -> usize {
        let (mut base, mut size) = (lo, n - lo);
        while size > 1 {
            let half = size / 2;
            let mid = base + half;
            base = if self.head_at(mid - 1) < h { mid } else { base };
            size -= half;
        }
        base + usize::from(size == 1 && self.head_at(base) < h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::btree::node::{LeafNode, Node, ValRef};
    use proptest::prelude::*;

    fn leaf_page(keys: &[Vec<u8>]) -> Vec<u8> {
        let mut l = LeafNode::default();
        for k in keys {
            l.insert_at(l.len(), k, ValRef::Inline(&[1]));
        }
        Node::Leaf(l).serialize(4096, 1).to_vec()
    }

    proptest! {
        /// The indexed search gives the plain binary search's answer for
        /// keys in the page, between them, and outside its range — with
        /// long shared prefixes, short keys and keys that are prefixes of
        /// others.
        #[test]
        fn indexed_search_matches_plain_search(
            mut keys in proptest::collection::btree_set(
                proptest::collection::vec(prop_oneof![Just(0u8), Just(1u8), Just(7u8), any::<u8>()], 0..12),
                1..60,
            ).prop_map(|s| s.into_iter().map(|k| { let mut p = b"shared/".to_vec(); p.extend(k); p }).collect::<Vec<_>>()),
            probes in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..14), 0..40),
        ) {
            keys.sort();
            let data = leaf_page(&keys);
            crate::btree::node::validate(&data).map_err(TestCaseError::fail)?;
            let idx = build(&data);
            let v = PageView(&data);
            let index = Index::parse(&idx).ok_or_else(|| TestCaseError::fail("no index"))?;
            let mut all: Vec<Vec<u8>> = probes;
            for k in &keys {
                all.push(k.clone());
                let mut longer = k.clone();
                longer.push(0);
                all.push(longer);
                all.push(k[..k.len() - 1].to_vec());
            }
            all.push(b"shared".to_vec());
            all.push(b"shared/".to_vec());
            for probe in &all {
                let plain = keys.binary_search(probe);
                prop_assert_eq!(index.search(probe, |i| v.leaf_key(i)), plain, "probe {:?}", probe);
            }
        }
    }

    proptest! {
        /// The in-line comparison orders byte strings as `Ord` does, at
        /// every length around its word and cut-over sizes.
        #[test]
        fn cmp_bytes_orders_as_slices_do(
            common in proptest::collection::vec(prop_oneof![Just(0u8), Just(255u8), any::<u8>()], 0..30),
            a in proptest::collection::vec(prop_oneof![Just(0u8), Just(255u8), any::<u8>()], 0..12),
            b in proptest::collection::vec(prop_oneof![Just(0u8), Just(255u8), any::<u8>()], 0..12),
        ) {
            let x: Vec<u8> = common.iter().chain(&a).copied().collect();
            let y: Vec<u8> = common.iter().chain(&b).copied().collect();
            prop_assert_eq!(cmp_bytes(&x, &y), x.cmp(&y));
            prop_assert_eq!(cmp_bytes(&y, &x), y.cmp(&x));
            prop_assert_eq!(cmp_bytes(&x, &x), std::cmp::Ordering::Equal);
        }
    }

    #[test]
    fn a_missing_index_is_not_used() {
        let data = leaf_page(&[b"a".to_vec(), b"b".to_vec()]);
        let idx = build(&data);
        assert!(Index::parse(&idx).is_some());
        assert!(Index::parse(&[]).is_none());
        assert!(build(&leaf_page(&[])).is_empty());
    }
}
