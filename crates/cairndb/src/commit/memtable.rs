//! The memtable: a multi-version ordered map of small changes, held in
//! memory above the trees, written by one writer and read by any number of
//! readers at once without locks.
//!
//! Every entry carries the id of the commit that wrote it (its *version*),
//! and a reader sees, for each key, the newest entry whose version is at or
//! below its snapshot's commit id. So a commit publishes its entries by
//! publishing its id: nothing is copied, and snapshots stay stable while
//! later commits add entries beside theirs. A writer inserts its entries
//! under its own (not yet published) id, so no reader can see them before
//! the commit; an aborted transaction's entries are marked and skipped by
//! everyone.
//!
//! The structure is a skip list (as in LevelDB's and RocksDB's memtables):
//! entries are ordered by (table, key) ascending, then version descending,
//! and never removed or changed once linked (but for the abort mark), so
//! readers follow plain atomic pointers. Nodes are freed only when the whole
//! memtable is dropped — after the trees hold its entries and no reader
//! holds it — so they live in an arena (as RocksDB's memtables do): a node,
//! its tower and its bytes are carved out of large blocks, which costs no
//! allocator call per entry, keeps neighbours close in memory, and gives
//! all of it back to the system at once, without leaving the allocator's
//! heap fragmented by millions of small frees.
//!
//! The overlay (`overlay.rs`) keeps its tables' changes here.

use std::cmp::Ordering as CmpOrdering;
use std::ops::Bound;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::ids::TxnId;

/// The tallest tower: with a branching factor of 4, enough for billions of
/// entries before search paths lengthen.
const MAX_HEIGHT: usize = 16;

/// Memory accounted per entry besides its key and value bytes: the node
/// (with its inline tower) in the arena.
pub(crate) const ENTRY_OVERHEAD: usize = std::mem::size_of::<Node>();

/// A table's number inside the memtable (assigned by the commit layer).
pub(crate) type TableNo = u32;

struct Node {
    /// The first 16 bytes of the table number and key, zero-padded, as one
    /// big-endian integer: most comparisons end here, without reading
    /// `data` (another cache line).
    head: u128,
    /// The table number (4 bytes, big-endian), the key, then the value:
    /// `len` bytes in the arena.
    data: *const u8,
    len: usize,
    /// Length of the table number and the key in `data`.
    key_end: usize,
    version: TxnId,
    /// A removal: the key is absent at this version.
    tombstone: bool,
    /// Written by a transaction that aborted: invisible to everyone.
    aborted: AtomicBool,
    /// The following node at level `i` (null at the end): levels below
    /// `INLINE` in the node itself (most towers), the rest beside it in
    /// the arena (`height - INLINE` links at `high`).
    low: [AtomicPtr<Node>; INLINE],
    high: *const AtomicPtr<Node>,
}

/// Tower levels kept inside the node (a tower is taller with probability
/// 4^-INLINE).
const INLINE: usize = 4;

impl Node {
    fn bytes(&self) -> &[u8] {
        // SAFETY: `data` points at `len` initialized bytes in the memtable's
        // arena, written before the node was published and never changed;
        // the arena outlives every reference to the node.
        unsafe { std::slice::from_raw_parts(self.data, self.len) }
    }

    fn table_key(&self) -> &[u8] {
        &self.bytes()[..self.key_end]
    }

    fn key(&self) -> &[u8] {
        &self.bytes()[4..self.key_end]
    }

    fn value(&self) -> Option<&[u8]> {
        (!self.tombstone).then(|| &self.bytes()[self.key_end..])
    }

    /// The link at `level`, which must be below the node's height (every
    /// caller walks levels the node was linked at).
    fn link(&self, level: usize) -> &AtomicPtr<Node> {
        match level.checked_sub(INLINE) {
            None => &self.low[level],
            // SAFETY: a node linked at `level` has a tower that tall: `high`
            // holds `height - INLINE` initialized links in the arena.
            Some(i) => unsafe { &*self.high.add(i) },
        }
    }

    fn next(&self, level: usize) -> *mut Node {
        self.link(level).load(Ordering::Acquire)
    }

    fn live(&self) -> bool {
        !self.aborted.load(Ordering::Acquire)
    }
}

/// The writer's state, held while a node is linked (so the single-writer
/// rule holds whoever calls): the random source of tower heights, and the
/// entries of the newest version inserted, which `abort` marks if that
/// version does not commit.
struct WriterState {
    rng: u64,
    pending_version: TxnId,
    pending: Vec<*const Node>,
    /// Where nodes, towers and bytes are allocated (only under the writer
    /// lock; freed with the memtable).
    arena: bumpalo::Bump,
}

// The pending pointers are nodes of this memtable (freed only with it),
// touched only under the writer lock.
unsafe impl Send for WriterState {}

/// The multi-version skip list. `Sync`: any number of readers beside one
/// writer (inserts serialize on an internal lock).
pub(crate) struct Memtable {
    /// The head tower: `head[i]` is the first node at level `i`.
    head: Box<[AtomicPtr<Node>]>,
    /// Levels in use (readers may read a stale, lower value: still correct).
    height: AtomicUsize,
    writer: Mutex<WriterState>,
    bytes: AtomicUsize,
    entries: AtomicUsize,
    /// The next table number to hand out (0 is never used).
    next_table: AtomicU32,
}

// Nodes are only ever reached through the skip list's atomic pointers, are
// fully built before they are published (Release) and read after an Acquire
// load, and are freed only in `drop`, when no reference can remain.
unsafe impl Send for Memtable {}
unsafe impl Sync for Memtable {}

impl Default for Memtable {
    fn default() -> Self {
        Memtable {
            head: (0..MAX_HEIGHT)
                .map(|_| AtomicPtr::new(ptr::null_mut()))
                .collect(),
            height: AtomicUsize::new(1),
            writer: Mutex::new(WriterState {
                rng: 0x9E37_79B9_7F4A_7C15,
                pending_version: TxnId(0),
                pending: Vec::new(),
                arena: bumpalo::Bump::new(),
            }),
            bytes: AtomicUsize::new(0),
            entries: AtomicUsize::new(0),
            next_table: AtomicU32::new(1),
        }
    }
}

fn table_key(table: TableNo, key: &[u8]) -> Vec<u8> {
    let mut tk = Vec::with_capacity(4 + key.len());
    tk.extend_from_slice(&table.to_be_bytes());
    tk.extend_from_slice(key);
    tk
}

/// The first 16 bytes of `tk`, zero-padded, big-endian: heads order as
/// their byte strings do wherever they differ.
fn head_of(tk: &[u8]) -> u128 {
    let mut b = [0u8; 16];
    let n = tk.len().min(16);
    b[..n].copy_from_slice(&tk[..n]);
    u128::from_be_bytes(b)
}

/// Asks the CPU to start loading `node`'s first cache line (a hint: no
/// effect on correctness, any address allowed).
#[inline(always)]
fn prefetch(node: *const Node) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(node.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = node;
}

/// The skip list's order: (table, key) ascending, then version descending
/// (`head` is `head_of(tk)`).
fn cmp_entry(node: &Node, tk: &[u8], head: u128, version: TxnId) -> CmpOrdering {
    node.head
        .cmp(&head)
        .then_with(|| node.table_key().cmp(tk))
        .then_with(|| version.cmp(&node.version))
}

impl Memtable {
    /// Memory held, roughly, in bytes.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Entries held (every version, aborted ones included).
    pub(crate) fn entries(&self) -> usize {
        self.entries.load(Ordering::Relaxed)
    }

    /// A table number not used in this memtable before.
    pub(crate) fn new_table(&self) -> TableNo {
        self.next_table.fetch_add(1, Ordering::Relaxed)
    }

    /// The pointer at `level` after `node` (or from the head if null).
    fn next_of(&self, node: *const Node, level: usize) -> *mut Node {
        if node.is_null() {
            self.head[level].load(Ordering::Acquire)
        } else {
            // SAFETY: non-null pointers in the list point at live nodes (see
            // the `Sync` impl).
            unsafe { (*node).next(level) }
        }
    }

    /// The last node before the first one that is not less than
    /// `(tk, version)`, at every level (`null`: the head).
    fn predecessors(&self, tk: &[u8], version: TxnId) -> [*const Node; MAX_HEIGHT] {
        self.search(tk, version).0
    }

    /// The predecessors of `(tk, version)` at every level (as
    /// `predecessors`), and the first node not less than it at level 0 as
    /// this search saw it. The writer may link new nodes after a
    /// predecessor at any time: a reader must use the successor it compared,
    /// never read the predecessor's link again (that could be a node the
    /// writer inserted since, of a key before `tk`).
    fn search(&self, tk: &[u8], version: TxnId) -> ([*const Node; MAX_HEIGHT], *const Node) {
        let mut preds = [ptr::null::<Node>(); MAX_HEIGHT];
        let head = head_of(tk);
        let mut x: *const Node = ptr::null();
        let mut succ: *const Node = ptr::null();
        let height = self.height.load(Ordering::Acquire);
        for level in (0..height).rev() {
            loop {
                let n = self.next_of(x, level);
                if level > 0 {
                    // Where the search goes if it stops here: fetched while
                    // `n` is compared (two cache misses at once, not in turn).
                    prefetch(self.next_of(x, level - 1));
                }
                // SAFETY: as in `next_of`.
                if !n.is_null() && cmp_entry(unsafe { &*n }, tk, head, version) == CmpOrdering::Less
                {
                    x = n;
                } else {
                    succ = n;
                    break;
                }
            }
            preds[level] = x;
        }
        // `height` is at least 1 (it starts there and only grows), so the
        // level-0 walk above always set `succ`.
        (preds, succ)
    }

    /// The first node not less than `(tk, version)`, or null.
    fn seek(&self, tk: &[u8], version: TxnId) -> *const Node {
        self.search(tk, version).1
    }

    /// The last node whose (table, key) is less than `tk`, or null.
    fn seek_before(&self, tk: &[u8]) -> *const Node {
        // Less than (tk, any version) = less than (tk, the highest version).
        self.predecessors(tk, TxnId(u64::MAX))[0]
    }

    /// The last node of the list, or null.
    fn last(&self) -> *const Node {
        let mut x: *const Node = ptr::null();
        for level in (0..self.height.load(Ordering::Acquire)).rev() {
            loop {
                let n = self.next_of(x, level);
                if n.is_null() {
                    break;
                }
                x = n;
            }
        }
        x
    }

    /// Adds `key → value` (`None`: a removal) of `table`, written by commit
    /// `version`; readers see it once `version` is published. An entry for
    /// a key the same version already wrote shadows the earlier one (a
    /// transaction that changes a key twice). Entries of an older version
    /// stop being pending here: that version committed (or was aborted).
    pub(crate) fn insert(&self, table: TableNo, key: &[u8], value: Option<&[u8]>, version: TxnId) {
        let mut w = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        if w.pending_version != version {
            w.pending.clear();
            w.pending_version = version;
        }
        // A tower of height h with probability 4^-(h-1).
        let mut height = 1;
        loop {
            w.rng ^= w.rng << 13;
            w.rng ^= w.rng >> 7;
            w.rng ^= w.rng << 17;
            if height >= MAX_HEIGHT || w.rng & 3 != 0 {
                break;
            }
            height += 1;
        }
        let value_bytes = value.unwrap_or(&[]);
        let key_end = 4 + key.len();
        let len = key_end + value_bytes.len();
        let data: &mut [u8] = w.arena.alloc_slice_fill_copy(len, 0u8);
        data[..4].copy_from_slice(&table.to_be_bytes());
        data[4..key_end].copy_from_slice(key);
        data[key_end..].copy_from_slice(value_bytes);
        let size = len + ENTRY_OVERHEAD + height.saturating_sub(INLINE) * 8;
        let head = head_of(&data[..key_end]);
        let data = data.as_ptr();
        let high: &mut [AtomicPtr<Node>] = w
            .arena
            .alloc_slice_fill_with(height.saturating_sub(INLINE), |_| {
                AtomicPtr::new(ptr::null_mut())
            });
        let high = high.as_ptr();
        let node: &mut Node = w.arena.alloc(Node {
            head,
            data,
            len,
            key_end,
            version,
            tombstone: value.is_none(),
            aborted: AtomicBool::new(false),
            low: Default::default(),
            high,
        });
        let raw: *mut Node = node;
        // SAFETY: `raw` was just allocated in the arena and is not linked yet.
        let preds = self.predecessors(unsafe { (*raw).table_key() }, version);
        // Link bottom-up: the node is in the level-0 list (and so found by
        // every search) before any higher level points at it.
        for (level, pred) in preds.iter().enumerate().take(height) {
            let succ = self.next_of(*pred, level);
            // SAFETY: `raw` is ours until published; `pred` is a live node or
            // the head (null).
            unsafe { (*raw).link(level).store(succ, Ordering::Relaxed) };
            let slot = if pred.is_null() {
                &self.head[level]
            } else {
                // SAFETY: as in `next_of`.
                unsafe { (**pred).link(level) }
            };
            slot.store(raw, Ordering::Release);
        }
        if height > self.height.load(Ordering::Relaxed) {
            self.height.store(height, Ordering::Release);
        }
        self.bytes.fetch_add(size, Ordering::Relaxed);
        self.entries.fetch_add(1, Ordering::Relaxed);
        w.pending.push(raw);
    }

    /// Marks every entry of `version` (a transaction that did not commit,
    /// and the newest version inserted) aborted: nobody will see them. Call
    /// it before the version can be published, or reused by the next
    /// transaction.
    pub(crate) fn abort(&self, version: TxnId) {
        let mut w = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        if w.pending_version != version {
            return;
        }
        for n in w.pending.drain(..) {
            // SAFETY: pending nodes belong to this memtable and are freed
            // only in `drop`.
            unsafe { (*n).aborted.store(true, Ordering::Release) };
        }
    }

    /// The newest live entry of `key` at or below `snapshot`, starting the
    /// scan at `n`: `None` if the key has none there.
    fn visible_from(&self, mut n: *const Node, tk: &[u8], snapshot: TxnId) -> Option<&Node> {
        while !n.is_null() {
            // SAFETY: as in `next_of`.
            let node = unsafe { &*n };
            if node.table_key() != tk {
                return None;
            }
            if node.version <= snapshot && node.live() {
                return Some(node);
            }
            n = node.next(0);
        }
        None
    }

    /// `key`'s state in `table` at `snapshot`: `Some(Some(value))`,
    /// `Some(None)` for a removal, `None` if the memtable has no entry for
    /// it at that snapshot (the tree below answers).
    pub(crate) fn get(&self, table: TableNo, key: &[u8], snapshot: TxnId) -> Option<Option<&[u8]>> {
        // The (table, key) on the stack when it fits (most keys): no
        // allocation per lookup.
        let mut buf = [0u8; 64];
        let heap;
        let tk: &[u8] = match buf.get_mut(..4 + key.len()) {
            Some(b) => {
                b[..4].copy_from_slice(&table.to_be_bytes());
                b[4..].copy_from_slice(key);
                b
            }
            None => {
                heap = table_key(table, key);
                &heap
            }
        };
        let n = self.seek(tk, snapshot);
        self.visible_from(n, tk, snapshot).map(Node::value)
    }

    /// The entries of `table` within the bounds as of `snapshot`, both ways,
    /// removals included (as `None` values).
    pub(crate) fn range<'a>(
        &'a self,
        table: TableNo,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        snapshot: TxnId,
    ) -> MemRange<'a> {
        let bound = |b: Bound<&[u8]>| match b {
            Bound::Included(k) => Bound::Included(table_key(table, k)),
            Bound::Excluded(k) => Bound::Excluded(table_key(table, k)),
            Bound::Unbounded => Bound::Unbounded,
        };
        MemRange {
            mem: self,
            table: table.to_be_bytes(),
            start: bound(start),
            end: bound(end),
            snapshot,
            front: None,
            front_node: None,
            back: None,
            done: false,
        }
    }
}

/// A double-ended range of one table's entries at one snapshot.
pub(crate) struct MemRange<'a> {
    mem: &'a Memtable,
    table: [u8; 4],
    start: Bound<Vec<u8>>,
    end: Bound<Vec<u8>>,
    snapshot: TxnId,
    /// The (table, key) last handed out from each end.
    front: Option<&'a [u8]>,
    /// The node handed out last from the front (the walk to the next key
    /// starts there).
    front_node: Option<&'a Node>,
    back: Option<&'a [u8]>,
    done: bool,
}

impl<'a> MemRange<'a> {
    fn in_table(&self, tk: &[u8]) -> bool {
        tk.starts_with(&self.table)
    }

    fn below_end(&self, tk: &[u8]) -> bool {
        match &self.end {
            Bound::Included(e) => tk <= e.as_slice(),
            Bound::Excluded(e) => tk < e.as_slice(),
            Bound::Unbounded => self.in_table(tk),
        }
    }

    fn above_start(&self, tk: &[u8]) -> bool {
        match &self.start {
            Bound::Included(s) => tk >= s.as_slice(),
            Bound::Excluded(s) => tk > s.as_slice(),
            Bound::Unbounded => self.in_table(tk),
        }
    }

    /// Whether the two ends have met at `tk`.
    fn crossed(&self, tk: &[u8], forward: bool) -> bool {
        match (forward, self.front, self.back) {
            (true, _, Some(b)) => tk >= b,
            (false, Some(f), _) => tk <= f,
            _ => false,
        }
    }

    /// The next (key, value-or-removal) from the front.
    pub(crate) fn next(&mut self) -> Option<(&'a [u8], Option<&'a [u8]>)> {
        if self.done {
            return None;
        }
        let mem = self.mem;
        // The first node past what was handed out (or at the start bound).
        let mut n = match (self.front_node, &self.start) {
            (Some(f), _) => mem.after_key_from(f),
            (None, Bound::Included(s)) => mem.seek(s, TxnId(u64::MAX)),
            (None, Bound::Excluded(s)) => mem.seek_after_key(s),
            (None, Bound::Unbounded) => mem.seek(&self.table, TxnId(u64::MAX)),
        };
        while !n.is_null() {
            // SAFETY: as in `Memtable::next_of`; nodes live as long as `mem`.
            let node: &'a Node = unsafe { &*n };
            let tk = node.table_key();
            if !self.below_end(tk) || self.crossed(tk, true) {
                break;
            }
            match mem.visible_from(n, tk, self.snapshot) {
                Some(v) => {
                    self.front = Some(v.table_key());
                    self.front_node = Some(v);
                    return Some((v.key(), v.value()));
                }
                None => n = mem.after_key_from(node),
            }
        }
        self.done = true;
        None
    }

    /// The next (key, value-or-removal) from the back.
    pub(crate) fn next_back(&mut self) -> Option<(&'a [u8], Option<&'a [u8]>)> {
        if self.done {
            return None;
        }
        let mem = self.mem;
        // The last node of the last key before what was handed out (or at
        // the end bound).
        let mut n = match (self.back, &self.end) {
            (Some(b), _) => mem.seek_before(b),
            (None, Bound::Included(e)) => mem.seek_before_or_at(e),
            (None, Bound::Excluded(e)) => mem.seek_before(e),
            (None, Bound::Unbounded) => match u32::from_be_bytes(self.table).checked_add(1) {
                Some(next_table) => mem.seek_before(&next_table.to_be_bytes()),
                None => mem.last(),
            },
        };
        while !n.is_null() {
            // SAFETY: as in `next`.
            let node: &'a Node = unsafe { &*n };
            let tk = node.table_key();
            if !self.above_start(tk) || self.crossed(tk, false) {
                break;
            }
            let first = mem.seek(tk, self.snapshot);
            match mem.visible_from(first, tk, self.snapshot) {
                Some(v) => {
                    self.back = Some(v.table_key());
                    return Some((v.key(), v.value()));
                }
                None => n = mem.seek_before(tk),
            }
        }
        self.done = true;
        None
    }
}

impl Memtable {
    /// The first node whose (table, key) is greater than `tk`.
    fn seek_after_key(&self, tk: &[u8]) -> *const Node {
        // After every version of tk = after (tk, version 0).
        let n = self.seek(tk, TxnId(0));
        let mut n = n;
        // `seek` stops at (tk, 0) itself if a version 0 exists: step past.
        while !n.is_null() {
            // SAFETY: as in `next_of`.
            let node = unsafe { &*n };
            if node.table_key() != tk {
                break;
            }
            n = node.next(0);
        }
        n
    }

    /// The first node whose (table, key) is greater than `node`'s: a few
    /// steps along level 0 (most keys have few versions), else a search.
    /// Nodes are never unlinked, so the walk from `node` is safe; nodes
    /// linked after it since are newer than any snapshot that saw `node`'s
    /// key, or of a later key (and then found in its place).
    fn after_key_from(&self, node: &Node) -> *const Node {
        let tk = node.table_key();
        let mut n = node.next(0);
        for _ in 0..8 {
            if n.is_null() {
                return n;
            }
            // SAFETY: as in `next_of`.
            if unsafe { &*n }.table_key() != tk {
                return n;
            }
            n = unsafe { &*n }.next(0);
        }
        self.seek_after_key(tk)
    }

    /// The last node whose (table, key) is at most `tk`.
    fn seek_before_or_at(&self, tk: &[u8]) -> *const Node {
        let after = self.seek_after_key(tk);
        // The predecessor of `after` at level 0: search for it.
        if after.is_null() {
            return self.last();
        }
        // SAFETY: as in `next_of`.
        let a = unsafe { &*after };
        self.predecessors(a.table_key(), a.version)[0]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    /// A model: (table, key) → versions (version, value, aborted).
    type Model = BTreeMap<(u32, Vec<u8>), Vec<(u64, Option<Vec<u8>>, bool)>>;

    fn model_get(m: &Model, table: u32, key: &[u8], snap: u64) -> Option<Option<Vec<u8>>> {
        let vs = m.get(&(table, key.to_vec()))?;
        // Pushed in version order: the last live one at or below the
        // snapshot is the newest (within a version, the last write).
        vs.iter()
            .rfind(|(v, _, aborted)| *v <= snap && !aborted)
            .map(|(_, val, _)| val.clone())
    }

    fn model_range(
        m: &Model,
        table: u32,
        lo: Bound<Vec<u8>>,
        hi: Bound<Vec<u8>>,
        snap: u64,
    ) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
        m.iter()
            .filter(|((t, k), _)| {
                *t == table
                    && match &lo {
                        Bound::Included(s) => k >= s,
                        Bound::Excluded(s) => k > s,
                        Bound::Unbounded => true,
                    }
                    && match &hi {
                        Bound::Included(e) => k <= e,
                        Bound::Excluded(e) => k < e,
                        Bound::Unbounded => true,
                    }
            })
            .filter_map(|((_, k), _)| model_get(m, table, k, snap).map(|v| (k.clone(), v)))
            .collect()
    }

    fn as_ref(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
        match b {
            Bound::Included(k) => Bound::Included(k.as_slice()),
            Bound::Excluded(k) => Bound::Excluded(k.as_slice()),
            Bound::Unbounded => Bound::Unbounded,
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        /// A commit: (table, key, value or removal) changes; aborted or not.
        Commit(Vec<(u32, Vec<u8>, Option<Vec<u8>>)>, bool),
    }

    fn key() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(prop::sample::select(vec![0u8, 1, 2, 0xff]), 0..4)
    }

    fn op() -> impl Strategy<Value = Op> {
        (
            prop::collection::vec(
                (
                    0u32..3,
                    key(),
                    prop::option::of(prop::collection::vec(any::<u8>(), 0..6)),
                ),
                1..5,
            ),
            prop::bool::weighted(0.2),
        )
            .prop_map(|(changes, aborted)| Op::Commit(changes, aborted))
    }

    fn bound() -> impl Strategy<Value = Bound<Vec<u8>>> {
        prop_oneof![
            Just(Bound::Unbounded),
            key().prop_map(Bound::Included),
            key().prop_map(Bound::Excluded),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// Point reads and both-way ranges at every snapshot equal the
        /// model: the newest live version at or below the snapshot, removals
        /// included, aborted entries never.
        #[test]
        fn reads_at_every_snapshot_equal_the_model(
            ops in prop::collection::vec(op(), 1..40),
            lo in bound(),
            hi in bound(),
            table in 0u32..3,
        ) {
            let mem = Memtable::default();
            let mut model = Model::new();
            let mut version = 0u64;
            for Op::Commit(changes, aborted) in &ops {
                version += 1;
                // A transaction may change a key more than once: the last
                // change stands.
                for (t, k, v) in changes {
                    mem.insert(*t, k, v.as_deref(), TxnId(version));
                    model.entry((*t, k.clone())).or_default().push((version, v.clone(), *aborted));
                }
                if *aborted {
                    mem.abort(TxnId(version));
                } else {
                    // The next transaction aborts before it writes: the
                    // committed entries stay visible.
                    mem.abort(TxnId(version + 1));
                }
            }
            for snap in 0..=version + 1 {
                for (t, k) in model.keys() {
                    let got = mem.get(*t, k, TxnId(snap)).map(|v| v.map(<[u8]>::to_vec));
                    prop_assert_eq!(got, model_get(&model, *t, k, snap), "get {:?} at {}", k, snap);
                }
                let want = model_range(&model, table, lo.clone(), hi.clone(), snap);
                let mut r = mem.range(table, as_ref(&lo), as_ref(&hi), TxnId(snap));
                let mut fwd = Vec::new();
                while let Some((k, v)) = r.next() {
                    fwd.push((k.to_vec(), v.map(<[u8]>::to_vec)));
                }
                prop_assert_eq!(&fwd, &want, "forward at {}", snap);
                let mut r = mem.range(table, as_ref(&lo), as_ref(&hi), TxnId(snap));
                let mut back = Vec::new();
                while let Some((k, v)) = r.next_back() {
                    back.push((k.to_vec(), v.map(<[u8]>::to_vec)));
                }
                back.reverse();
                prop_assert_eq!(&back, &want, "backward at {}", snap);
                // Both ends at once meet without repeating or skipping.
                let mut r = mem.range(table, as_ref(&lo), as_ref(&hi), TxnId(snap));
                let (mut f, mut b) = (Vec::new(), Vec::new());
                while let Some((k, v)) = r.next() {
                    f.push((k.to_vec(), v.map(<[u8]>::to_vec)));
                    match r.next_back() {
                        Some((k, v)) => b.push((k.to_vec(), v.map(<[u8]>::to_vec))),
                        None => break,
                    }
                }
                b.reverse();
                f.extend(b);
                prop_assert_eq!(&f, &want, "both ends at {}", snap);
            }
        }
    }

    /// Readers running beside the writer see, at their snapshot, exactly
    /// what the commits up to it wrote: a writer commits key `i % 64` =
    /// version bytes under increasing versions and publishes each version
    /// after inserting; readers check every key's value against the version
    /// they read at (the newest commit at or below it that wrote the key).
    #[test]
    fn readers_beside_the_writer_see_exactly_their_snapshot() {
        use std::sync::atomic::AtomicU64;
        let mem = Memtable::default();
        let published = AtomicU64::new(0);
        const COMMITS: u64 = 20_000;
        let errors = AtomicUsize::new(0);
        std::thread::scope(|s| {
            s.spawn(|| {
                for v in 1..=COMMITS {
                    let key = (v % 64).to_be_bytes();
                    mem.insert(1, &key, Some(&v.to_le_bytes()), TxnId(v));
                    if v % 97 == 0 {
                        // An aborted transaction's entry is never seen.
                        mem.abort(TxnId(v));
                    }
                    published.store(v, Ordering::Release);
                }
            });
            for _ in 0..2 {
                s.spawn(|| loop {
                    let snap = published.load(Ordering::Acquire);
                    let mut seen = 0;
                    let mut r = mem.range(1, Bound::Unbounded, Bound::Unbounded, TxnId(snap));
                    while let Some((k, v)) = r.next() {
                        seen += 1;
                        let k = u64::from_be_bytes(k.try_into().unwrap());
                        let v = u64::from_le_bytes(v.unwrap().try_into().unwrap());
                        // The newest live version ≤ snap of key k.
                        let mut want = snap - (snap + 64 - k) % 64;
                        while want.is_multiple_of(97) && want > 0 {
                            want -= 64;
                        }
                        if v != want || v > snap {
                            errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    if snap >= 64 && seen != 64 {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                    if snap == COMMITS {
                        break;
                    }
                });
            }
        });
        assert_eq!(errors.load(Ordering::Relaxed), 0);
        assert_eq!(mem.entries(), COMMITS as usize);
    }
    /// Readers beside a writer that inserts new keys between existing ones
    /// (a table filling up after a spill): every key of a snapshot is found
    /// by `get`, and by ranges both ways. A search that re-read the level-0
    /// link after it had compared the successor failed this (it could land
    /// on a newer key inserted in between, and answer "absent").
    #[test]
    fn readers_find_every_key_while_new_keys_are_inserted_between() {
        use std::sync::atomic::AtomicU64;
        const COMMITS: u64 = 40_000;
        let mem = Memtable::default();
        let published = AtomicU64::new(0);
        let errors = AtomicUsize::new(0);
        let checks = AtomicUsize::new(0);
        let started = AtomicUsize::new(0);
        // Commit v inserts key(v): distinct keys (an odd multiplier is a
        // bijection of u32) scattered between the ones before.
        let key = |v: u64| (v as u32).wrapping_mul(0x9E37_79B1).to_be_bytes();
        std::thread::scope(|s| {
            s.spawn(|| {
                while started.load(Ordering::Acquire) < 2 {
                    std::thread::yield_now();
                }
                for v in 1..=COMMITS {
                    mem.insert(1, &key(v), Some(&v.to_le_bytes()), TxnId(v));
                    // Other tables' entries before and after, as the commit
                    // of a document with indexes makes.
                    mem.insert(0, &key(v), None, TxnId(v));
                    mem.insert(2, &key(v), None, TxnId(v));
                    published.store(v, Ordering::Release);
                }
            });
            for t in 0..2u64 {
                let (mem, published, errors, checks) = (&mem, &published, &errors, &checks);
                let started = &started;
                s.spawn(move || {
                    started.fetch_add(1, Ordering::Release);
                    let mut rng = 0x2545_F491_4F6C_DD1Du64 ^ t;
                    loop {
                        let snap = published.load(Ordering::Acquire);
                        if snap % 16 == 0 {
                            let mut r =
                                mem.range(1, Bound::Unbounded, Bound::Unbounded, TxnId(snap));
                            let mut n = 0u64;
                            while if t == 0 { r.next() } else { r.next_back() }.is_some() {
                                n += 1;
                            }
                            if n != snap {
                                errors.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        for _ in 0..64 {
                            if snap == 0 {
                                break;
                            }
                            rng ^= rng << 13;
                            rng ^= rng >> 7;
                            rng ^= rng << 17;
                            let v = 1 + rng % snap;
                            let got = mem.get(1, &key(v), TxnId(snap));
                            if got != Some(Some(&v.to_le_bytes()[..])) {
                                errors.fetch_add(1, Ordering::Relaxed);
                            }
                            checks.fetch_add(1, Ordering::Relaxed);
                        }
                        if snap == COMMITS {
                            break;
                        }
                    }
                });
            }
        });
        let checks = checks.load(Ordering::Relaxed);
        assert_eq!(errors.load(Ordering::Relaxed), 0, "of {checks} checks");
    }
}
