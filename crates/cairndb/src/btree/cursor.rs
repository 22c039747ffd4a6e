//! Cursors and double-ended range iteration.

use std::ops::Bound;

use super::node::PageView;
use super::tree::{tree_corruption, NodeRef, NodeSource, ValueBytes};
use crate::error::Result;
use crate::ids::PageId;
use crate::pager::header::PageRef;

/// Levels a cursor's path holds at most: a damaged tree whose branch names
/// an ancestor (a cycle) is reported instead of walked without end.
const MAX_DEPTH: usize = 64;

/// A position in a tree: the path from the root to a leaf entry.
pub(crate) struct Cursor<'a> {
    src: NodeSource<'a>,
    /// (node, page id, index): in branches the child index, in the leaf the entry.
    stack: Vec<(NodeRef<'a>, u64, usize)>,
    /// The current leaf's bytes, pinned for `'a` (page id, bytes): entries
    /// are then borrowed, with no copy and no reference count per entry.
    pinned: Option<(u64, &'a [u8])>,
}

impl<'a> Cursor<'a> {
    fn new(src: NodeSource<'a>) -> Self {
        Cursor {
            src,
            stack: Vec::new(),
            pinned: None,
        }
    }

    /// Steps down to `n` (page `page`, at `idx`); a path deeper than
    /// [`MAX_DEPTH`] is a cycle in a damaged tree: `Corruption` naming the
    /// page.
    #[inline]
    fn push(&mut self, n: NodeRef<'a>, page: u64, idx: usize) -> Result<()> {
        if self.stack.len() >= MAX_DEPTH {
            return Err(tree_corruption(
                self.src.pager,
                PageId(page),
                format!("a scan's path is deeper than {MAX_DEPTH} levels here (a cycle?)"),
            ));
        }
        self.stack.push((n, page, idx));
        Ok(())
    }

    #[inline]
    fn valid(&self) -> bool {
        matches!(self.stack.last(), Some((n, _, i)) if n.is_leaf() && *i < n.count())
    }

    /// (leaf page id, entry index) of the current position.
    #[inline]
    fn pos(&self) -> Option<(u64, usize)> {
        self.stack.last().map(|(_, p, i)| (*p, *i))
    }

    fn key(&self) -> &[u8] {
        match self.stack.last() {
            Some((n, _, i)) => n.leaf_key(*i),
            None => &[],
        }
    }

    /// Descends from `r` to the leftmost (or rightmost) leaf entry.
    /// Going left (a forward scan's next leaf), each node is loaded with
    /// read-ahead of the parent's following children (`NodeSource::load_ahead`).
    fn descend_edge(&mut self, mut r: PageRef, right: bool) -> Result<()> {
        loop {
            let n = match (right, self.stack.last()) {
                (false, Some((parent, _, i))) => self.src.load_ahead(r, parent, *i + 1)?,
                _ => self.src.load(r)?,
            };
            let leaf = n.is_leaf();
            let idx = match (leaf, right) {
                (true, false) => 0,
                (true, true) => n.count().wrapping_sub(1),
                (false, false) => 0,
                (false, true) => n.children() - 1,
            };
            let next = if leaf { None } else { Some(n.child(idx)) };
            self.push(n, r.page.0, idx)?;
            match next {
                Some(c) => r = c,
                None => return Ok(()),
            }
        }
    }

    /// Positions at the first entry with key >= `key` (or > if `exclusive`).
    fn seek_ge(&mut self, root: PageRef, key: &[u8], exclusive: bool) -> Result<()> {
        self.stack.clear();
        if root.page.is_none() {
            return Ok(());
        }
        let mut r = root;
        loop {
            let n = self.src.load(r)?;
            if n.is_leaf() {
                let i = match n.leaf_search(key) {
                    Ok(i) if exclusive => i + 1,
                    Ok(i) => i,
                    Err(i) => i,
                };
                self.push(n, r.page.0, i)?;
                break;
            }
            let ci = n.child_index(key);
            let c = n.child(ci);
            self.push(n, r.page.0, ci)?;
            r = c;
        }
        // The leaf may be exhausted (or empty): move to the next leaf.
        if !self.valid() {
            self.stack_fixup_forward()?;
        }
        Ok(())
    }

    /// Positions at the last entry with key <= `key` (or < if `exclusive`).
    fn seek_le(&mut self, root: PageRef, key: &[u8], exclusive: bool) -> Result<()> {
        self.stack.clear();
        if root.page.is_none() {
            return Ok(());
        }
        let mut r = root;
        loop {
            let n = self.src.load(r)?;
            if n.is_leaf() {
                let i = match n.leaf_search(key) {
                    Ok(i) if exclusive => i.wrapping_sub(1),
                    Ok(i) => i,
                    Err(i) => i.wrapping_sub(1),
                };
                self.push(n, r.page.0, i)?;
                break;
            }
            let ci = n.child_index(key);
            let c = n.child(ci);
            self.push(n, r.page.0, ci)?;
            r = c;
        }
        if !self.valid() {
            self.stack_fixup_backward()?;
        }
        Ok(())
    }

    fn seek_first(&mut self, root: PageRef) -> Result<()> {
        self.stack.clear();
        if root.page.is_none() {
            return Ok(());
        }
        self.descend_edge(root, false)?;
        if !self.valid() {
            self.stack_fixup_forward()?;
        }
        Ok(())
    }

    fn seek_last(&mut self, root: PageRef) -> Result<()> {
        self.stack.clear();
        if root.page.is_none() {
            return Ok(());
        }
        self.descend_edge(root, true)?;
        if !self.valid() {
            self.stack_fixup_backward()?;
        }
        Ok(())
    }

    /// From an exhausted leaf position, moves to the first entry of the next
    /// non-empty leaf; clears the stack at the end of the tree.
    fn stack_fixup_forward(&mut self) -> Result<()> {
        loop {
            self.stack.pop();
            let Some((n, _, i)) = self.stack.last_mut() else {
                return Ok(());
            };
            if *i + 1 < n.children() {
                *i += 1;
                let c = n.child(*i);
                self.descend_edge(c, false)?;
                if self.valid() {
                    return Ok(());
                }
            }
        }
    }

    fn stack_fixup_backward(&mut self) -> Result<()> {
        loop {
            self.stack.pop();
            let Some((n, _, i)) = self.stack.last_mut() else {
                return Ok(());
            };
            if *i > 0 {
                *i -= 1;
                let c = n.child(*i);
                self.descend_edge(c, true)?;
                if self.valid() {
                    return Ok(());
                }
            }
        }
    }

    #[inline]
    fn advance(&mut self) -> Result<()> {
        if let Some((n, _, i)) = self.stack.last_mut() {
            *i += 1;
            if *i < n.count() {
                return Ok(());
            }
        }
        self.stack_fixup_forward()
    }

    #[inline]
    fn retreat(&mut self) -> Result<()> {
        if let Some((_, _, i)) = self.stack.last_mut() {
            if *i > 0 {
                *i -= 1;
                return Ok(());
            }
        }
        self.stack_fixup_backward()
    }

    /// The current leaf's pinned bytes and entry count, if the cursor
    /// stands in a leaf whose bytes are pinned for `'a` (a scan may then
    /// walk them in place).
    #[inline]
    fn pinned_leaf(&self) -> Option<(&'a [u8], usize)> {
        let (n, pid, _) = self.stack.last()?;
        let data = match n {
            NodeRef::Pinned(p) => p.data,
            NodeRef::Clean(_) => match self.pinned {
                Some((p, d)) if p == *pid => d,
                _ => return None,
            },
            _ => return None,
        };
        n.is_leaf().then(|| (data, n.count()))
    }

    /// Moves the leaf position to entry `i` of the same leaf.
    #[inline]
    fn set_leaf_index(&mut self, i: usize) {
        if let Some((_, _, at)) = self.stack.last_mut() {
            *at = i;
        }
    }

    #[inline]
    fn entry(&mut self) -> Result<(ValueBytes<'a>, ValueBytes<'a>)> {
        let Some((n, pid, i)) = self.stack.last() else {
            return Ok((ValueBytes::Borrowed(&[]), ValueBytes::Borrowed(&[])));
        };
        if let NodeRef::Clean(page) = n {
            let data = match self.pinned {
                Some((p, d)) if p == *pid => Some(d),
                _ => {
                    let d = self.src.pin(*pid, page).map(|p| p.data);
                    self.pinned = d.map(|d| (*pid, d));
                    d
                }
            };
            if let Some(d) = data {
                return self.src.pinned_entry(d, *i);
            }
        }
        // A pinned node borrows already; a dirty one, or a leaf past the
        // pin budget, the usual way.
        self.src.entry(n, *i)
    }
}

/// A double-ended iterator over the entries of a key range.
pub(crate) struct RawRange<'a> {
    front: Cursor<'a>,
    /// The back end. With an unbounded end it is positioned only when the
    /// range is first read from the back: a forward reader (`range(k..)`
    /// with `take(n)`) then pays one descent, not two.
    back: Option<Cursor<'a>>,
    root: PageRef,
    /// The front's entry was handed out and the front has not moved past it
    /// yet: it moves on the next `next`, so a reader that stops after its
    /// last entry never steps into the following leaf.
    front_taken: bool,
    done: bool,
    /// A forward scan's fast path: the rest of the front's pinned leaf,
    /// walked in place without touching the cursor (see [`LeafWindow`]).
    window: Option<LeafWindow<'a>>,
}

/// The entries `next..stop` of a pinned leaf the front cursor stands in:
/// `next` steps over them with one bounds test each. The cursor itself
/// stays on entry `next - 1` (handed out, `front_taken`) until the window
/// is given back (`RawRange::close_window`), which moves it there.
struct LeafWindow<'a> {
    data: &'a [u8],
    next: usize,
    stop: usize,
    /// `stop` is the back end's entry plus one: the range ends with it.
    ends_range: bool,
}

impl<'a> RawRange<'a> {
    pub(crate) fn new(
        src: NodeSource<'a>,
        root: PageRef,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
    ) -> Result<Self> {
        // The bounds are only needed to position the cursors: no copies.
        let mut front = Cursor::new(src);
        match start {
            Bound::Unbounded => front.seek_first(root)?,
            Bound::Included(k) => front.seek_ge(root, k, false)?,
            Bound::Excluded(k) => front.seek_ge(root, k, true)?,
        }
        let back = match end {
            Bound::Unbounded => None,
            Bound::Included(k) | Bound::Excluded(k) => {
                let mut back = Cursor::new(src);
                back.seek_le(root, k, matches!(end, Bound::Excluded(_)))?;
                Some(back)
            }
        };
        let done = !front.valid()
            || back
                .as_ref()
                .is_some_and(|b| !b.valid() || front.key() > b.key());
        Ok(RawRange {
            front,
            back,
            root,
            front_taken: false,
            done,
            window: None,
        })
    }

    /// Gives the leaf window back: the cursor moves to the last entry the
    /// window handed out (still `front_taken`). Returns whether that entry
    /// was the range's last.
    #[inline]
    fn close_window(&mut self) -> bool {
        match self.window.take() {
            Some(w) => {
                self.front.set_leaf_index(w.next - 1);
                w.ends_range && w.next == w.stop
            }
            None => false,
        }
    }

    /// After the front handed out entry `i` of its leaf (not the range's
    /// last): if the leaf's bytes are pinned, the next entries of the same
    /// leaf are read straight from them.
    #[inline]
    fn open_window(&mut self, i: usize) {
        let Some((data, count)) = self.front.pinned_leaf() else {
            return;
        };
        let (stop, ends_range) = match &self.back {
            Some(b) => match (b.pos(), self.front.pos()) {
                (Some((bp, bi)), Some((fp, _))) if bp == fp => (bi + 1, true),
                _ => (count, false),
            },
            None => (count, false),
        };
        if i + 1 < stop {
            self.window = Some(LeafWindow {
                data,
                next: i + 1,
                stop,
                ends_range,
            });
        }
    }

    /// The leaf window's next entry as borrowed key and value bytes, if the
    /// window has one and its value is inline (otherwise `None`, and `next`
    /// hands it out). The same step as `next`'s window path, without the
    /// value enum and the `Result` around it: a scan's entries are written
    /// straight into the caller's guards.
    #[inline(always)]
    pub(crate) fn next_inline(&mut self) -> Option<(&'a [u8], &'a [u8])> {
        let w = self.window.as_mut()?;
        if w.next >= w.stop {
            return None;
        }
        let e = PageView(w.data).leaf_inline(w.next)?;
        w.next += 1;
        Some(e)
    }

    #[inline]
    pub(crate) fn next(&mut self) -> Option<Result<(ValueBytes<'a>, ValueBytes<'a>)>> {
        if let Some(w) = &mut self.window {
            if w.next < w.stop {
                let i = w.next;
                w.next += 1;
                let item = self.front.src.pinned_entry(w.data, i);
                if item.is_err() {
                    self.close_window();
                    self.done = true;
                }
                return Some(item);
            }
            if self.close_window() {
                self.done = true;
                return None;
            }
        }
        if self.done {
            return None;
        }
        if self.front_taken {
            self.front_taken = false;
            if let Err(e) = self.front.advance() {
                self.done = true;
                return Some(Err(e));
            }
            if !self.front.valid() {
                self.done = true;
                return None;
            }
        }
        let item = self.front.entry();
        if self
            .back
            .as_ref()
            .is_some_and(|b| b.pos() == self.front.pos())
        {
            self.done = true;
        } else {
            self.front_taken = true;
        }
        if item.is_err() {
            self.done = true;
        } else if !self.done {
            if let Some((_, i)) = self.front.pos() {
                self.open_window(i);
            }
        }
        Some(item)
    }

    #[inline]
    pub(crate) fn next_back(&mut self) -> Option<Result<(ValueBytes<'a>, ValueBytes<'a>)>> {
        // The back end moves: the front's window (bounded by it) goes.
        if self.close_window() {
            self.done = true;
        }
        if self.done {
            return None;
        }
        let back = match &mut self.back {
            Some(b) => b,
            None => {
                // Unbounded end, first read from the back: the last entry.
                // The front is valid (not done), so it is at or before it.
                let mut b = Cursor::new(self.front.src);
                if let Err(e) = b.seek_last(self.root) {
                    self.done = true;
                    return Some(Err(e));
                }
                if !b.valid() {
                    self.done = true;
                    return None;
                }
                self.back.insert(b)
            }
        };
        // The front handed out the entry the back now stands on: met.
        if self.front_taken && self.front.pos() == back.pos() {
            self.done = true;
            return None;
        }
        let item = back.entry();
        if self.front.pos() == back.pos() {
            self.done = true;
        } else if let Err(e) = back.retreat() {
            self.done = true;
            return Some(Err(e));
        } else if !back.valid() || (self.front_taken && self.front.pos() == back.pos()) {
            // Past the start, or onto the entry the front handed out.
            self.done = true;
        }
        if item.is_err() {
            self.done = true;
        }
        Some(item)
    }
}
