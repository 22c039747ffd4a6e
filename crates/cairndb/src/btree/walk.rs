//! A verifying walk over whole trees, reading every page from the file (not
//! the cache): checksums, page structure, key order and bounds, uniform leaf
//! depth, out-of-line values, and that no page is reachable twice.

use super::node::{validate, PageView, ValRef};
use crate::error::{Corruption, DamagedPart};
use crate::ids::PageId;
use crate::pager::header::PageRef;
use crate::pager::Pager;

/// Counters for one tree.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TreeStats {
    /// Leaf pages.
    pub leaf_pages: u64,
    /// Branch pages.
    pub branch_pages: u64,
    /// Pages holding out-of-line values.
    pub overflow_pages: u64,
    /// Entries (key/value pairs).
    pub entries: u64,
    /// Levels (0 for an empty tree, 1 for a single leaf).
    pub depth: u32,
    /// Bytes of tree pages in use (headers, offsets, keys, inline values).
    pub used_bytes: u64,
    /// Bytes of out-of-line values.
    pub overflow_bytes: u64,
}

/// State of a walk over one commit.
pub(crate) struct Walk<'a> {
    pub pager: &'a Pager,
    pub page_count: u64,
    /// One bit per page: reachable so far.
    seen: Vec<u64>,
    pub problems: Vec<Corruption>,
    /// Whether to read and checksum out-of-line values too.
    pub verify_values: bool,
}

impl<'a> Walk<'a> {
    pub(crate) fn new(pager: &'a Pager, page_count: u64) -> Self {
        Walk {
            pager,
            page_count,
            seen: vec![0; page_count.div_ceil(64) as usize],
            problems: Vec::new(),
            verify_values: true,
        }
    }

    pub(crate) fn problem(&mut self, part: DamagedPart, page: PageId, detail: String) {
        self.problems.push(Corruption {
            part,
            page,
            offset: self.pager.offset(page),
            detail,
        });
    }

    pub(crate) fn is_seen(&self, p: u64) -> bool {
        self.seen
            .get((p / 64) as usize)
            .is_some_and(|w| w & (1 << (p % 64)) != 0)
    }

    /// Marks `n` pages from `start` reachable; reports pages out of the file
    /// or reachable twice.
    pub(crate) fn mark(&mut self, start: PageId, n: u64, part: DamagedPart) -> bool {
        if start.0 < crate::pager::header::FIRST_DATA_PAGE
            || start.0.saturating_add(n) > self.page_count
        {
            self.problem(
                part,
                start,
                format!(
                    "{n} page(s) at {start} lie outside the file's {} pages",
                    self.page_count
                ),
            );
            return false;
        }
        for p in start.0..start.0 + n {
            if self.is_seen(p) {
                self.problem(
                    part,
                    PageId(p),
                    "page is reachable twice (shared or cyclic pointer)".into(),
                );
                return false;
            }
            if let Some(w) = self.seen.get_mut((p / 64) as usize) {
                *w |= 1 << (p % 64);
            }
        }
        true
    }

    /// Walks the tree at `root`, calling `on_entry` for each leaf entry in
    /// key order (the table layer uses it for catalog records).
    pub(crate) fn tree(
        &mut self,
        root: PageRef,
        on_entry: &mut dyn FnMut(&mut Self, &[u8], ValRef<'_>),
    ) -> TreeStats {
        let mut st = TreeStats::default();
        if root.page.is_none() {
            return st;
        }
        let mut leaf_depth = None;
        self.node(root, None, None, 1, &mut leaf_depth, &mut st, on_entry);
        st.depth = leaf_depth.unwrap_or(0);
        st
    }

    #[allow(clippy::too_many_arguments)]
    fn node(
        &mut self,
        r: PageRef,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
        depth: u32,
        leaf_depth: &mut Option<u32>,
        st: &mut TreeStats,
        on_entry: &mut dyn FnMut(&mut Self, &[u8], ValRef<'_>),
    ) {
        if depth > 64 {
            self.problem(
                DamagedPart::TreePage,
                r.page,
                "tree deeper than 64 levels".into(),
            );
            return;
        }
        if !self.mark(r.page, 1, DamagedPart::TreePage) {
            return;
        }
        let page = match self.pager.read_verified_uncached(r, DamagedPart::TreePage) {
            Ok(p) => p,
            Err(crate::error::CoreError::Corruption(c)) => {
                self.problems.push(c);
                return;
            }
            Err(e) => {
                self.problem(DamagedPart::TreePage, r.page, format!("unreadable: {e}"));
                return;
            }
        };
        if let Err(detail) = validate(page.data()) {
            self.problem(DamagedPart::TreePage, r.page, detail);
            return;
        }
        let v = PageView(page.data());
        let n = v.count();
        let in_bounds = |k: &[u8]| lo.is_none_or(|l| k >= l) && hi.is_none_or(|h| k < h);
        if v.is_leaf() {
            match leaf_depth {
                Some(d) if *d != depth => {
                    self.problem(
                        DamagedPart::TreePage,
                        r.page,
                        format!("leaf at depth {depth}, others at {d}"),
                    );
                }
                _ => *leaf_depth = Some(depth),
            }
            st.leaf_pages += 1;
            st.entries += n as u64;
            let mut used = super::node::H;
            for i in 0..n {
                let k = v.leaf_key(i);
                if i > 0 && v.leaf_key(i - 1) >= k {
                    self.problem(
                        DamagedPart::TreePage,
                        r.page,
                        format!("leaf keys out of order at entry {i}"),
                    );
                }
                if !in_bounds(k) {
                    self.problem(
                        DamagedPart::TreePage,
                        r.page,
                        format!("leaf key {i} outside its parent's bounds"),
                    );
                }
                let (val, _) = v.leaf_val(i);
                used += super::node::leaf_entry_bytes(
                    k.len(),
                    match val {
                        ValRef::Inline(s) => s.len(),
                        ValRef::Overflow { .. } => super::node::OVERFLOW_REF,
                    },
                );
                if let ValRef::Overflow {
                    start,
                    len,
                    checksum,
                } = val
                {
                    let pages = len.div_ceil(self.pager.page_size() as u64).max(1);
                    // Saturating: `len` is unverified until the value is read.
                    st.overflow_pages = st.overflow_pages.saturating_add(pages);
                    st.overflow_bytes = st.overflow_bytes.saturating_add(len);
                    if self.mark(start, pages, DamagedPart::OverflowValue) && self.verify_values {
                        if let Err(e) =
                            super::tree::read_overflow_file(self.pager, start, len, checksum)
                        {
                            match e {
                                crate::error::CoreError::Corruption(c) => self.problems.push(c),
                                e => self.problem(
                                    DamagedPart::OverflowValue,
                                    start,
                                    format!("unreadable: {e}"),
                                ),
                            }
                        }
                    }
                }
                on_entry(self, k, val);
            }
            st.used_bytes += used as u64;
        } else {
            st.branch_pages += 1;
            st.used_bytes += (super::node::H
                + 16
                + (0..n)
                    .map(|i| super::node::branch_entry_bytes(v.branch_key(i).len()))
                    .sum::<usize>()) as u64;
            for i in 0..n {
                let k = v.branch_key(i);
                if (i > 0 && v.branch_key(i - 1) >= k) || !in_bounds(k) {
                    self.problem(
                        DamagedPart::TreePage,
                        r.page,
                        format!("branch key {i} out of order or bounds"),
                    );
                }
            }
            for i in 0..=n {
                let clo = if i == 0 {
                    lo
                } else {
                    Some(v.branch_key(i - 1))
                };
                let chi = if i == n { hi } else { Some(v.branch_key(i)) };
                self.node(v.child(i), clo, chi, depth + 1, leaf_depth, st, on_entry);
            }
        }
    }
}
