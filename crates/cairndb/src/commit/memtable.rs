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
//! The structure is a B+tree of entry pointers, ordered by (table, key)
//! ascending, then version descending. A node keeps the first 16 bytes of
//! each of its keys inline beside the pointers, so a search reads a few
//! adjacent cache lines per level (about four levels for a million entries)
//! where a skip list follows a pointer to a scattered node at every step;
//! that search was the largest cost of a small write. Entries never change
//! once inserted (but for the abort mark) and are never removed; nodes only
//! grow and split, and a split only moves entries to a new right sibling.
//!
//! Readers take no lock. The writer (one at a time, under `writer`) changes
//! a node in place inside a sequence lock: the node's `seq` is odd while it
//! changes, and a reader that read any part of a node checks afterwards that
//! `seq` is even and unchanged, else reads it again. Every leaf links to its
//! right sibling, and since a split moves entries only rightwards, any leaf
//! at or left of a key's place leads to it: a reader that descended through
//! a node that has split since (its copy was consistent, only older) lands
//! to the left of its target and walks right. The rest is in `seek`.
//!
//! Nodes and entries are freed only when the whole memtable is dropped —
//! after the trees hold its entries and no reader holds it — so they live
//! in an arena (as RocksDB's memtables do): carved out of large blocks at no
//! allocator call per entry, and given back to the system at once; the
//! large blocks are huge pages where the system allows (`arena.rs`).
//!
//! The overlay (`overlay.rs`) keeps its tables' changes here.

use std::cmp::Ordering as CmpOrdering;
use std::ops::Bound;
use std::ptr;
use std::sync::atomic::Ordering;
use std::sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize};
use std::sync::Mutex;

use crate::ids::TxnId;

/// Keys (entries, or separators) a node holds at most.
const CAP: usize = 32;

/// Memory accounted per entry besides its key and value bytes: the entry
/// record, and its share of a leaf (about three quarters full on average)
/// and of the inner nodes above.
pub(crate) const ENTRY_OVERHEAD: usize =
    std::mem::size_of::<Entry>() + std::mem::size_of::<Node>() * 4 / (CAP * 3);

/// A table's number inside the memtable (assigned by the commit layer).
pub(crate) type TableNo = u32;

/// One change: immutable once linked, but for `aborted`.
struct Entry {
    /// The first 16 bytes of the table number and key, zero-padded, as one
    /// big-endian integer (a copy of what nodes keep inline).
    head: u128,
    /// The table number (4 bytes, big-endian), the key, then the value:
    /// `len` bytes in the arena.
    data: *const u8,
    len: u32,
    /// Length of the table number and the key in `data`.
    key_end: u32,
    version: TxnId,
    /// A removal: the key is absent at this version.
    tombstone: bool,
    /// Written by a transaction that aborted: invisible to everyone.
    aborted: AtomicBool,
}

impl Entry {
    fn bytes(&self) -> &[u8] {
        // SAFETY: `data` points at `len` initialized bytes in the memtable's
        // arena, written before the entry was published and never changed;
        // the arena outlives every reference to the entry.
        unsafe { std::slice::from_raw_parts(self.data, self.len as usize) }
    }

    fn table_key(&self) -> &[u8] {
        &self.bytes()[..self.key_end as usize]
    }

    fn key(&self) -> &[u8] {
        &self.bytes()[4..self.key_end as usize]
    }

    fn value(&self) -> Option<&[u8]> {
        (!self.tombstone).then(|| &self.bytes()[self.key_end as usize..])
    }

    fn live(&self) -> bool {
        !self.aborted.load(Ordering::Acquire)
    }
}

/// A position in the order: (table and key, version), with the key's head.
#[derive(Clone, Copy)]
struct Target<'k> {
    head: u128,
    tk: &'k [u8],
    version: TxnId,
    /// Past every entry (`head`, `tk` and `version` unused).
    top: bool,
}

impl<'k> Target<'k> {
    fn new(tk: &'k [u8], version: TxnId) -> Self {
        Target {
            head: head_of(tk),
            tk,
            version,
            top: false,
        }
    }

    /// Past every entry.
    fn top() -> Self {
        Target {
            head: u128::MAX,
            tk: &[],
            version: TxnId(0),
            top: true,
        }
    }

    /// How `e` compares with the target: (table, key) ascending, then
    /// version descending. `head` is `e`'s head as the node holds it, so
    /// most comparisons end without reading the entry.
    #[inline]
    fn cmp_entry(&self, head: u128, e: &Entry) -> CmpOrdering {
        head.cmp(&self.head)
            .then_with(|| e.table_key().cmp(self.tk))
            .then_with(|| self.version.cmp(&e.version))
    }
}

/// A B+tree node. Leaves hold entries in order; an inner node holds `len`
/// separators and `len + 1` children, where separator `i` was the first
/// entry of child `i + 1` when it split off: every entry of child `i` is at
/// most every entry of child `i + 1`. Every field a reader looks at is an
/// atomic, read inside the sequence lock (`seq`).
///
/// In C layout, so that what a descent reads — `seq`, `len`, the heads and
/// then one child — is the node's first lines, which `prefetch_search`
/// loads together.
#[repr(C)]
struct Node {
    /// Even while stable; odd while the writer changes the node.
    seq: AtomicU64,
    /// Keys in use (entries of a leaf, separators of an inner node).
    len: AtomicUsize,
    leaf: bool,
    /// The heads of the keys, as (high, low) halves side by side (a
    /// search's probe reads one cache line).
    heads: [[AtomicU64; 2]; CAP],
    /// The children of an inner node (`len + 1` of them).
    children: [AtomicPtr<Node>; CAP + 1],
    /// The entries (leaf) or separators (inner node): never null below
    /// `len` once the node is published.
    keys: [AtomicPtr<Entry>; CAP],
    /// A leaf's right sibling (null for the last leaf).
    next: AtomicPtr<Node>,
}

impl Node {
    fn new(leaf: bool) -> Node {
        Node {
            seq: AtomicU64::new(0),
            leaf,
            len: AtomicUsize::new(0),
            heads: Default::default(),
            keys: Default::default(),
            children: std::array::from_fn(|_| AtomicPtr::new(ptr::null_mut())),
            next: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// Waits out a change in progress; returns the stable `seq` to check
    /// against with `unchanged`.
    #[inline]
    fn read_begin(&self) -> u64 {
        let mut spins = 0u32;
        loop {
            let s = self.seq.load(Ordering::Acquire);
            if s & 1 == 0 {
                return s;
            }
            spins += 1;
            if spins.is_multiple_of(64) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }

    /// Whether what was read since `read_begin` returned `s` is one state
    /// of the node (no change began or ended in between).
    #[inline]
    fn unchanged(&self, s: u64) -> bool {
        fence(Ordering::Acquire);
        self.seq.load(Ordering::Relaxed) == s
    }

    /// The number of keys, as read (at most `CAP` even if torn).
    #[inline]
    fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed).min(CAP)
    }

    #[inline]
    fn head(&self, i: usize) -> u128 {
        (u128::from(self.heads[i][0].load(Ordering::Relaxed)) << 64)
            | u128::from(self.heads[i][1].load(Ordering::Relaxed))
    }

    /// The key at `i`, or `None` if this read saw no pointer there (a torn
    /// read: the caller's check of `seq` fails).
    #[inline]
    fn key(&self, i: usize) -> Option<&Entry> {
        let p = self.keys[i].load(Ordering::Acquire);
        // SAFETY: non-null key pointers point at entries in the memtable's
        // arena, fully written before they were stored here, never freed
        // while the memtable lives.
        (!p.is_null()).then(|| unsafe { &*p })
    }

    /// How many keys are less than `t` (`None`: a torn read).
    #[inline]
    fn count_less(&self, t: &Target<'_>, len: usize) -> Option<usize> {
        if t.top {
            return Some(len);
        }
        let (mut lo, mut hi) = (0, len);
        while lo < hi {
            let mid = (lo + hi) / 2;
            let head = self.head(mid);
            let less = match head.cmp(&t.head) {
                CmpOrdering::Less => true,
                CmpOrdering::Greater => false,
                CmpOrdering::Equal => t.cmp_entry(head, self.key(mid)?) == CmpOrdering::Less,
            };
            if less {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Some(lo)
    }

    // The writer's side: only under the writer lock, inside `write_begin`
    // and `write_end`.

    fn write_begin(&self) {
        let s = self.seq.load(Ordering::Relaxed);
        self.seq.store(s + 1, Ordering::Relaxed);
        // The odd `seq` is visible before any change it guards.
        fence(Ordering::Release);
    }

    fn write_end(&self) {
        let s = self.seq.load(Ordering::Relaxed);
        self.seq.store(s + 1, Ordering::Release);
    }

    fn set_key(&self, i: usize, head: u128, e: *const Entry) {
        self.heads[i][0].store((head >> 64) as u64, Ordering::Relaxed);
        self.heads[i][1].store(head as u64, Ordering::Relaxed);
        self.keys[i].store(e.cast_mut(), Ordering::Release);
    }

    fn copy_key(&self, to: usize, from: &Node, i: usize) {
        for h in 0..2 {
            self.heads[to][h].store(from.heads[i][h].load(Ordering::Relaxed), Ordering::Relaxed);
        }
        self.keys[to].store(from.keys[i].load(Ordering::Relaxed), Ordering::Release);
    }

    fn child(&self, i: usize) -> *mut Node {
        self.children[i].load(Ordering::Acquire)
    }

    /// Starts loading every line a descent through `node` reads (its
    /// sequence, length, heads and children: the first `SEARCH_BYTES` of
    /// the node; a leaf's children are unused), so that the binary
    /// search's probes — each depending on the one before — do not wait
    /// for their lines one after another: in a memtable larger than the
    /// caches, the lower levels of a random descent miss, and there each
    /// probe was its own miss.
    #[inline(always)]
    fn prefetch_search(node: *const Node) {
        let base = node.cast::<u8>();
        let mut at = 0;
        while at < SEARCH_BYTES {
            prefetch(base.wrapping_add(at));
            at += 64;
        }
    }

    /// Starts loading the lines of leaf `node` (any pointer, null
    /// included) that a step into it reads: its sequence and length, its
    /// first keys, its link to the next leaf.
    #[inline(always)]
    fn prefetch_walk(node: *const Node) {
        let base = node.cast::<u8>();
        prefetch(base);
        prefetch(base.wrapping_add(std::mem::offset_of!(Node, keys)));
        prefetch(base.wrapping_add(std::mem::offset_of!(Node, next)));
    }
}

/// The bytes of a node a descent reads (see `Node::prefetch_search`).
const SEARCH_BYTES: usize = std::mem::offset_of!(Node, keys);

/// A place in the leaf level: key `idx` of `leaf` as of its `seq`.
#[derive(Clone, Copy)]
struct Pos {
    leaf: *const Node,
    idx: usize,
    seq: u64,
}

/// A split in progress: `right` is built (and will be published by the
/// parent, or by the leaf's `next`); `node` still holds every key until
/// `finish` leaves it the lower half, `keys` (and `kids`).
struct Split<'n> {
    node: &'n Node,
    keys: Vec<(u128, *const Entry)>,
    kids: Vec<*const Node>,
    sep_head: u128,
    sep: *const Entry,
    right: *const Node,
}

impl Split<'_> {
    fn finish(self) {
        let node = self.node;
        node.write_begin();
        if node.leaf {
            // The sibling was built before (Release: its contents first).
            node.next.store(self.right.cast_mut(), Ordering::Release);
        }
        for (j, (h, k)) in self.keys.iter().enumerate() {
            node.set_key(j, *h, *k);
        }
        for (j, c) in self.kids.iter().enumerate() {
            node.children[j].store(c.cast_mut(), Ordering::Release);
        }
        node.len.store(self.keys.len(), Ordering::Relaxed);
        node.write_end();
    }
}

/// Levels of a descent's path kept inline (see `Path`).
const PATH_INLINE: usize = 12;

/// The inner nodes a writer's descent passed, with the child index taken
/// in each: inline, with no allocation per insert, kept in the writer's
/// state (where the next insert's hint finds it). Every node but the root
/// holds at least `CAP / 2` keys, so a path of `PATH_INLINE` levels takes
/// more than 16^10 entries; a deeper one (never, in practice) goes on in a
/// vector. Its nodes are nodes of the memtable, which outlives the path.
struct Path {
    inline: [(*const Node, usize); PATH_INLINE],
    more: Vec<(*const Node, usize)>,
    len: usize,
}

impl Default for Path {
    fn default() -> Self {
        Path {
            inline: [(ptr::null(), 0); PATH_INLINE],
            more: Vec::new(),
            len: 0,
        }
    }
}

impl Path {
    fn clear(&mut self) {
        self.len = 0;
        self.more.clear();
    }

    fn push(&mut self, (node, i): (&Node, usize)) {
        match self.inline.get_mut(self.len) {
            Some(slot) => *slot = (node, i),
            None => self.more.push((node, i)),
        }
        self.len += 1;
    }

    /// The last step, taken off. (`'n`: at most the memtable's life.)
    fn pop<'n>(&mut self) -> Option<(&'n Node, usize)> {
        self.len = self.len.checked_sub(1)?;
        let (node, i) = match self.inline.get(self.len) {
            Some(&step) => step,
            None => self.more.pop()?,
        };
        // SAFETY: pushed from a node of the memtable, which outlives the
        // path and every reference taken from it here.
        Some((unsafe { &*node }, i))
    }
}

/// Where the writer's last insert went, so that the next one, if its entry
/// falls right after that one (keys inserted in order: a batch of
/// ascending keys), goes there without a descent from the root, the
/// descent's path kept beside it (`WriterState::path`). Only `link`
/// changes the tree's shape, and it drops the hint on every split, so a
/// hint always describes the tree as it is.
#[derive(Clone, Copy)]
struct Hint {
    leaf: *const Node,
    /// The last insert's index in `leaf`.
    idx: usize,
    /// The separator right of `leaf` in the nearest ancestor that has one
    /// (every entry of `leaf` is below it); null for the last leaf.
    hi: *const Entry,
    /// Inserts in a row that each went right after the one before (the
    /// hint is tried only after `HINT_RUN` of them: where inserts come in
    /// no order, or interleave tables, checking it would only cost).
    run: u32,
}

/// Inserts in a row, each right after the one before, after which the next
/// one tries the hint.
const HINT_RUN: u32 = 2;

/// The writer's state, held while an entry is linked (so the single-writer
/// rule holds whoever calls): the entries of the newest version inserted,
/// which `abort` marks if that version does not commit, and the arena.
struct WriterState {
    pending_version: TxnId,
    pending: Vec<*const Entry>,
    /// Where nodes, entries and bytes are allocated (only under the writer
    /// lock; freed with the memtable).
    arena: super::arena::Arena,
    /// Where the last insert went (`Hint`), and the path of its descent.
    hint: Option<Hint>,
    path: Path,
}

// The pending pointers are entries of this memtable (freed only with it),
// touched only under the writer lock.
unsafe impl Send for WriterState {}

/// The multi-version B+tree. `Sync`: any number of readers beside one
/// writer (inserts serialize on an internal lock).
pub(crate) struct Memtable {
    root: AtomicPtr<Node>,
    writer: Mutex<WriterState>,
    bytes: AtomicUsize,
    entries: AtomicUsize,
    /// The next table number to hand out (0 is never used).
    next_table: AtomicU32,
}

// Nodes and entries are only ever reached through atomic pointers, are
// fully built before they are published (Release) and read after an Acquire
// load, are changed only inside their node's sequence lock, and are freed
// only in `drop`, when no reference can remain.
unsafe impl Send for Memtable {}
unsafe impl Sync for Memtable {}

impl Default for Memtable {
    fn default() -> Self {
        let arena = super::arena::Arena::default();
        let root: *mut Node = arena.alloc(Node::new(true));
        Memtable {
            root: AtomicPtr::new(root),
            writer: Mutex::new(WriterState {
                pending_version: TxnId(0),
                pending: Vec::new(),
                arena,
                hint: None,
                path: Path::default(),
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

/// Asks the CPU to start loading what `p` points at (a hint: no effect on
/// correctness, any address allowed).
#[inline(always)]
pub(crate) fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// The first 16 bytes of `tk`, zero-padded, big-endian: heads order as
/// their byte strings do wherever they differ.
fn head_of(tk: &[u8]) -> u128 {
    let mut b = [0u8; 16];
    let n = tk.len().min(16);
    b[..n].copy_from_slice(&tk[..n]);
    u128::from_be_bytes(b)
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

    fn root(&self) -> &Node {
        // SAFETY: the root is a node of this memtable (see the `Sync` impl);
        // it is never null.
        unsafe { &*self.root.load(Ordering::Acquire) }
    }

    /// The leaf to start a search for `t` from: at or left of the leaf
    /// that holds the first entry not less than `t`. Each inner node is read
    /// as one consistent state; it may be older than the tree (a split since
    /// moved some of its range to a new sibling), and then the leaf reached
    /// lies left of the target, which `seek` walks right from.
    fn descend(&self, t: &Target<'_>) -> &Node {
        let mut node = self.root();
        while !node.leaf {
            let child = loop {
                let s = node.read_begin();
                let len = node.len();
                if let Some(i) = node.count_less(t, len) {
                    let c = node.child(i);
                    if !c.is_null() && node.unchanged(s) {
                        break c;
                    }
                }
            };
            Node::prefetch_search(child);
            // SAFETY: as in `root`.
            node = unsafe { &*child };
        }
        node
    }

    /// The first entry not less than `t`, as a position (`None`: past the
    /// last entry).
    fn seek(&self, t: &Target<'_>) -> Option<Pos> {
        self.walk_to(t).1
    }

    /// The last entry less than `t` (`None`: there is none).
    fn seek_before(&self, t: &Target<'_>) -> Option<Pos> {
        self.walk_to(t).0
    }

    /// The last entry less than `t` and the first one not less, as
    /// positions. Walks right from the leaf `descend` gives: every leaf at
    /// or left of the target's place leads to it through `next`, because
    /// entries move only rightwards.
    fn walk_to(&self, t: &Target<'_>) -> (Option<Pos>, Option<Pos>) {
        let mut leaf = self.descend(t);
        let mut last: Option<Pos> = None;
        loop {
            let s = leaf.read_begin();
            let len = leaf.len();
            let Some(i) = leaf.count_less(t, len) else {
                continue;
            };
            let next = leaf.next.load(Ordering::Acquire);
            if !leaf.unchanged(s) {
                continue;
            }
            let at = |idx| Pos { leaf, idx, seq: s };
            if i > 0 {
                last = Some(at(i - 1));
            }
            if i < len {
                return (last, Some(at(i)));
            }
            if next.is_null() {
                return (last, None);
            }
            // SAFETY: as in `root`.
            leaf = unsafe { &*next };
        }
    }

    /// The entry at `p` if its leaf has not changed since `p` was taken
    /// (`Err(())`: it has; seek again).
    fn at(&self, p: Pos) -> Result<&Entry, ()> {
        // SAFETY: positions hold leaves of this memtable.
        let leaf = unsafe { &*p.leaf };
        let e = leaf.key(p.idx);
        match e {
            Some(e) if leaf.unchanged(p.seq) => Ok(e),
            _ => Err(()),
        }
    }

    /// The position after `p` (`Ok(None)`: past the last entry; `Err(())`:
    /// the leaf changed since `p` was taken).
    fn step(&self, p: Pos) -> Result<Option<Pos>, ()> {
        // SAFETY: as in `at`.
        let leaf = unsafe { &*p.leaf };
        let len = leaf.len();
        let next = leaf.next.load(Ordering::Acquire);
        if !leaf.unchanged(p.seq) {
            return Err(());
        }
        if p.idx + 1 < len {
            // A scan reads the entries in key order, scattered over the
            // arena in insertion order: start loading one a few ahead.
            if p.idx + 4 < len {
                if let Some(a) = leaf.keys.get(p.idx + 4) {
                    prefetch(a.load(Ordering::Relaxed));
                }
            } else if p.idx + 4 == len {
                // Near the leaf's end: the next leaf's lines a step reads.
                Node::prefetch_walk(next);
            }
            return Ok(Some(Pos {
                idx: p.idx + 1,
                ..p
            }));
        }
        let mut n = next;
        loop {
            if n.is_null() {
                return Ok(None);
            }
            // SAFETY: as in `root`.
            let leaf = unsafe { &*n };
            let s = leaf.read_begin();
            let len = leaf.len();
            let next = leaf.next.load(Ordering::Acquire);
            if !leaf.unchanged(s) {
                continue;
            }
            if len > 0 {
                // The first entries, which the in-leaf prefetch (four
                // ahead) did not reach.
                for a in leaf.keys.iter().take(len.min(4)) {
                    prefetch(a.load(Ordering::Relaxed));
                }
                return Ok(Some(Pos {
                    leaf,
                    idx: 0,
                    seq: s,
                }));
            }
            n = next;
        }
    }

    /// The newest live entry of `tk` at or below `snapshot`: `None` if the
    /// key has none there. Its entries are adjacent, newest first; the
    /// first one not less than (tk, snapshot) is the newest at or below it.
    fn visible(&self, tk: &[u8], snapshot: TxnId) -> Option<&Entry> {
        let t = Target::new(tk, snapshot);
        'again: loop {
            let mut p = self.seek(&t)?;
            loop {
                let Ok(e) = self.at(p) else {
                    continue 'again;
                };
                if e.table_key() != tk {
                    return None;
                }
                if e.version <= snapshot && e.live() {
                    return Some(e);
                }
                match self.step(p) {
                    Ok(Some(n)) => p = n,
                    Ok(None) => return None,
                    Err(()) => continue 'again,
                }
            }
        }
    }

    /// The first entry whose (table, key) is greater than `tk`.
    fn first_after_key(&self, tk: &[u8]) -> Option<&Entry> {
        // After every version of tk = after (tk, version 0); a version-0
        // entry itself is skipped.
        let t = Target::new(tk, TxnId(0));
        'again: loop {
            let mut p = self.seek(&t)?;
            loop {
                let Ok(e) = self.at(p) else {
                    continue 'again;
                };
                if e.table_key() != tk {
                    return Some(e);
                }
                match self.step(p) {
                    Ok(Some(n)) => p = n,
                    Ok(None) => return None,
                    Err(()) => continue 'again,
                }
            }
        }
    }

    /// From `p`, the first entry whose (table, key) is not `tk`, with its
    /// position (`Ok(None)`: none; `Err(())`: a leaf changed on the way).
    fn skip_key(&self, mut p: Pos, tk: &[u8]) -> Result<Option<(Pos, &Entry)>, ()> {
        loop {
            let e = self.at(p)?;
            if e.table_key() != tk {
                return Ok(Some((p, e)));
            }
            match self.step(p)? {
                Some(n) => p = n,
                None => return Ok(None),
            }
        }
    }

    /// The first entry not less than `t`, with its position.
    fn first_pos(&self, t: &Target<'_>) -> Option<(Pos, &Entry)> {
        loop {
            let p = self.seek(t)?;
            if let Ok(e) = self.at(p) {
                return Some((p, e));
            }
        }
    }

    /// The first entry whose (table, key) is greater than `tk`, with its
    /// position.
    fn after_key_pos(&self, tk: &[u8]) -> Option<(Pos, &Entry)> {
        loop {
            let (p, _) = self.first_pos(&Target::new(tk, TxnId(0)))?;
            if let Ok(r) = self.skip_key(p, tk) {
                return r;
            }
        }
    }

    /// The last entry whose (table, key) is less than `tk`.
    fn last_before_key(&self, tk: &[u8]) -> Option<&Entry> {
        // Less than (tk, any version) = less than (tk, the highest version).
        let t = Target::new(tk, TxnId(u64::MAX));
        loop {
            let p = self.seek_before(&t)?;
            if let Ok(e) = self.at(p) {
                return Some(e);
            }
        }
    }

    /// The last entry whose (table, key) is at most `tk`.
    fn last_at_or_before_key(&self, tk: &[u8]) -> Option<&Entry> {
        match self.first_after_key(tk) {
            Some(after) => {
                let t = Target::new(after.table_key(), after.version);
                loop {
                    let p = self.seek_before(&t)?;
                    if let Ok(e) = self.at(p) {
                        return Some(e);
                    }
                }
            }
            None => self.last(),
        }
    }

    /// The last entry of the memtable.
    fn last(&self) -> Option<&Entry> {
        let t = Target::top();
        loop {
            let p = self.seek_before(&t)?;
            if let Ok(e) = self.at(p) {
                return Some(e);
            }
        }
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
        let value_bytes = value.unwrap_or(&[]);
        let key_end = 4 + key.len();
        let len = key_end + value_bytes.len();
        // The entry and its bytes in one block (one cache miss to read
        // both), the bytes right after the record.
        let header = std::mem::size_of::<Entry>();
        // (Two slices in memory cannot sum past `isize::MAX`; if they
        // could, this aborts as the allocator does when out of memory.)
        let block = match std::alloc::Layout::from_size_align(
            header + len,
            std::mem::align_of::<Entry>(),
        ) {
            Ok(l) => l,
            Err(_) => std::alloc::handle_alloc_error(std::alloc::Layout::new::<Entry>()),
        };
        let base = w.arena.alloc_layout(block).as_ptr();
        // SAFETY: `base` is a fresh block of `header + len` bytes aligned
        // for `Entry`, written once here and never again but for the atomic
        // abort mark.
        let entry: &Entry = unsafe {
            let data = base.add(header);
            std::ptr::copy_nonoverlapping(table.to_be_bytes().as_ptr(), data, 4);
            std::ptr::copy_nonoverlapping(key.as_ptr(), data.add(4), key.len());
            std::ptr::copy_nonoverlapping(
                value_bytes.as_ptr(),
                data.add(key_end),
                value_bytes.len(),
            );
            let tk = std::slice::from_raw_parts(data, key_end);
            let rec = base.cast::<Entry>();
            rec.write(Entry {
                head: head_of(tk),
                data,
                len: len as u32,
                key_end: key_end as u32,
                version,
                tombstone: value.is_none(),
                aborted: AtomicBool::new(false),
            });
            &*rec
        };
        let e: *const Entry = entry;
        self.link(&mut w, entry);
        self.bytes
            .fetch_add(len + ENTRY_OVERHEAD, Ordering::Relaxed);
        self.entries.fetch_add(1, Ordering::Relaxed);
        w.pending.push(e);
    }

    /// Hint `h` of the last insert, if target `t` goes right after that insert's
    /// entry: after it in the order, and before the entry that follows it
    /// in its leaf (or, at the leaf's end, before the leaf's upper bound):
    /// exactly where a descent would place it.
    fn hinted(&self, h: Hint, t: &Target<'_>) -> Option<Hint> {
        // SAFETY: a hint's leaf is a node of this memtable.
        let leaf = unsafe { &*h.leaf };
        if t.top {
            return None;
        }
        let prev = leaf.key(h.idx)?;
        if t.cmp_entry(leaf.head(h.idx), prev) != CmpOrdering::Less {
            return None;
        }
        let before_next = if h.idx + 1 < leaf.len() {
            t.cmp_entry(leaf.head(h.idx + 1), leaf.key(h.idx + 1)?) == CmpOrdering::Greater
        } else if h.hi.is_null() {
            true
        } else {
            // SAFETY: separators are entries of this memtable.
            let hi = unsafe { &*h.hi };
            t.cmp_entry(hi.head, hi) == CmpOrdering::Greater
        };
        before_next.then_some(h)
    }

    /// Links `entry` into the tree before every entry not less than it (so
    /// the newest write of a (key, version) comes first), splitting full
    /// nodes on the way back up.
    fn link(&self, w: &mut WriterState, entry: &Entry) {
        let t = Target::new(entry.table_key(), entry.version);
        let WriterState {
            arena, hint, path, ..
        } = w;
        let last = *hint;
        let (node, i, hi) = match last
            .filter(|h| h.run >= HINT_RUN)
            .and_then(|h| self.hinted(h, &t))
        {
            // SAFETY: a hint's leaf is a node of this memtable.
            Some(h) => (unsafe { &*h.leaf }, h.idx + 1, h.hi),
            None => {
                // The writer sees the tree as it is (nobody else changes
                // it): the descent is exact, and the entry belongs in the
                // leaf it reaches.
                path.clear();
                let mut hi: *const Entry = ptr::null();
                let mut node = self.root();
                while !node.leaf {
                    let len = node.len();
                    let i = node.count_less(&t, len).unwrap_or(0);
                    if i < len {
                        hi = node.keys[i].load(Ordering::Relaxed);
                    }
                    path.push((node, i));
                    let child = node.child(i);
                    Node::prefetch_search(child);
                    // SAFETY: the writer's view of its own tree: children
                    // below `len + 1` are set.
                    node = unsafe { &*child };
                }
                let i = node.count_less(&t, node.len()).unwrap_or(0);
                (node, i, hi)
            }
        };
        let arena: &super::arena::Arena = arena;
        let mut splits: Vec<Split<'_>> = Vec::new();
        let mut carry = self.insert_into(arena, node, i, entry.head, entry, ptr::null());
        // No split: the next insert may go right after this one.
        *hint = carry.is_none().then(|| Hint {
            leaf: node,
            idx: i,
            hi,
            run: match last {
                Some(h) if ptr::eq(h.leaf, node) && i == h.idx + 1 => h.run.saturating_add(1),
                _ => 0,
            },
        });
        // A split hands its separator and new sibling to the parent before
        // the node itself shrinks: until then the node is whole (a reader
        // through the parent may reach the sibling's keys both ways), so a
        // reader never meets an inner node that lost part of its range
        // before its parent knew where it went.
        while let Some(split) = carry.take() {
            let (sep_head, sep, right) = (split.sep_head, split.sep, split.right);
            splits.push(split);
            match path.pop() {
                Some((parent, i)) => {
                    carry = self.insert_into(arena, parent, i, sep_head, sep, right);
                }
                None => {
                    // A new root above the old one and its new sibling.
                    let old = self.root.load(Ordering::Relaxed);
                    let root: &Node = arena.alloc(Node::new(false));
                    root.set_key(0, sep_head, sep);
                    root.children[0].store(old, Ordering::Relaxed);
                    root.children[1].store(right.cast_mut(), Ordering::Relaxed);
                    root.len.store(1, Ordering::Relaxed);
                    self.root
                        .store((root as *const Node).cast_mut(), Ordering::Release);
                }
            }
        }
        // Shrink the split nodes, the highest first (each one's parent
        // already leads to its sibling).
        while let Some(split) = splits.pop() {
            split.finish();
        }
    }

    /// Inserts key `e` (with its head) at `i` of `node` — and, in an inner
    /// node, `child` right of it. A full node splits: its upper half goes
    /// to a new right sibling, built here; the node keeps its keys until
    /// `Split::finish` shrinks it.
    fn insert_into<'n>(
        &self,
        arena: &'n super::arena::Arena,
        node: &'n Node,
        i: usize,
        head: u128,
        e: *const Entry,
        child: *const Node,
    ) -> Option<Split<'n>> {
        let len = node.len();
        if len < CAP {
            node.write_begin();
            for j in (i..len).rev() {
                node.copy_key(j + 1, node, j);
                if !node.leaf {
                    let c = node.children[j + 1].load(Ordering::Relaxed);
                    node.children[j + 2].store(c, Ordering::Relaxed);
                }
            }
            node.set_key(i, head, e);
            if !node.leaf {
                node.children[i + 1].store(child.cast_mut(), Ordering::Release);
            }
            node.len.store(len + 1, Ordering::Relaxed);
            node.write_end();
            return None;
        }
        // Full: the CAP + 1 keys (and CAP + 2 children) in order, split.
        let mut keys: Vec<(u128, *const Entry)> = Vec::with_capacity(CAP + 1);
        let mut kids: Vec<*const Node> = Vec::with_capacity(CAP + 2);
        for j in 0..len {
            if j == i {
                keys.push((head, e));
            }
            keys.push((node.head(j), node.keys[j].load(Ordering::Relaxed)));
        }
        if i == len {
            keys.push((head, e));
        }
        if !node.leaf {
            for j in 0..=len {
                kids.push(node.children[j].load(Ordering::Relaxed));
                if j == i {
                    kids.push(child);
                }
            }
        }
        let right: &Node = arena.alloc(Node::new(node.leaf));
        let mid = keys.len() / 2;
        if node.leaf {
            // The right leaf holds keys[mid..]; its first is the separator.
            for (j, (h, k)) in keys[mid..].iter().enumerate() {
                right.set_key(j, *h, *k);
            }
            right.len.store(keys.len() - mid, Ordering::Relaxed);
            right
                .next
                .store(node.next.load(Ordering::Relaxed), Ordering::Relaxed);
        } else {
            // keys[mid] moves up; the right node holds the keys after it and
            // the children from mid + 1.
            for (j, (h, k)) in keys[mid + 1..].iter().enumerate() {
                right.set_key(j, *h, *k);
            }
            for (j, c) in kids[mid + 1..].iter().enumerate() {
                right.children[j].store(c.cast_mut(), Ordering::Relaxed);
            }
            right.len.store(keys.len() - mid - 1, Ordering::Relaxed);
        }
        let (sep_head, sep) = keys[mid];
        keys.truncate(mid);
        kids.truncate(if node.leaf { 0 } else { mid + 1 });
        Some(Split {
            node,
            keys,
            kids,
            sep_head,
            sep,
            right,
        })
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
        for e in w.pending.drain(..) {
            // SAFETY: pending entries belong to this memtable and are freed
            // only in `drop`.
            unsafe { (*e).aborted.store(true, Ordering::Release) };
        }
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
        self.visible(tk, snapshot).map(Entry::value)
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
            back: None,
            front_pos: None,
            done: false,
        }
    }
}

/// A key and its value (`None`: removed), as a range hands them out.
type MemItem<'a> = (&'a [u8], Option<&'a [u8]>);

/// A double-ended range of one table's entries at one snapshot.
pub(crate) struct MemRange<'a> {
    mem: &'a Memtable,
    table: [u8; 4],
    start: Bound<Vec<u8>>,
    end: Bound<Vec<u8>>,
    snapshot: TxnId,
    /// The (table, key) last handed out from each end.
    front: Option<&'a [u8]>,
    back: Option<&'a [u8]>,
    /// Where the front's entry was (the next step starts there while its
    /// leaf is unchanged, instead of searching from the root).
    front_pos: Option<Pos>,
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
        loop {
            match self.try_next() {
                Ok(r) => {
                    self.done = r.is_none();
                    return r;
                }
                // A leaf changed under the cursor: go on from the key.
                Err(()) => self.front_pos = None,
            }
        }
    }

    fn try_next(&mut self) -> Result<Option<MemItem<'a>>, ()> {
        let mem = self.mem;
        // The first entry of the first key not handed out yet.
        let mut cur = match (self.front_pos, self.front) {
            (Some(p), Some(f)) => mem.skip_key(p, f)?,
            (_, Some(f)) => mem.after_key_pos(f),
            (_, None) => match &self.start {
                Bound::Included(s) => mem.first_pos(&Target::new(s, TxnId(u64::MAX))),
                Bound::Excluded(s) => mem.after_key_pos(s),
                Bound::Unbounded => mem.first_pos(&Target::new(&self.table, TxnId(u64::MAX))),
            },
        };
        while let Some((p, e)) = cur {
            let tk = e.table_key();
            if !self.below_end(tk) || self.crossed(tk, true) {
                return Ok(None);
            }
            // The key's entries from `p`, newest first: the first live one
            // at or below the snapshot is what it shows.
            let (mut q, mut x) = (p, e);
            loop {
                if x.version <= self.snapshot && x.live() {
                    self.front = Some(x.table_key());
                    self.front_pos = Some(q);
                    return Ok(Some((x.key(), x.value())));
                }
                match mem.step(q)? {
                    None => return Ok(None),
                    Some(n) => {
                        q = n;
                        x = mem.at(q)?;
                    }
                }
                if x.table_key() != tk {
                    break;
                }
            }
            cur = Some((q, x));
        }
        Ok(None)
    }

    /// The next (key, value-or-removal) from the back.
    pub(crate) fn next_back(&mut self) -> Option<(&'a [u8], Option<&'a [u8]>)> {
        if self.done {
            return None;
        }
        let mem = self.mem;
        // The last entry of the last key before what was handed out (or at
        // the end bound).
        let mut n = match (self.back, &self.end) {
            (Some(b), _) => mem.last_before_key(b),
            (None, Bound::Included(e)) => mem.last_at_or_before_key(e),
            (None, Bound::Excluded(e)) => mem.last_before_key(e),
            (None, Bound::Unbounded) => match u32::from_be_bytes(self.table).checked_add(1) {
                Some(next_table) => mem.last_before_key(&next_table.to_be_bytes()),
                None => mem.last(),
            },
        };
        while let Some(e) = n {
            let tk = e.table_key();
            if !self.above_start(tk) || self.crossed(tk, false) {
                break;
            }
            match mem.visible(tk, self.snapshot) {
                Some(v) => {
                    self.back = Some(v.table_key());
                    return Some((v.key(), v.value()));
                }
                None => n = mem.last_before_key(tk),
            }
        }
        self.done = true;
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    /// A descent's path gives its steps back last first, past the inline
    /// levels too.
    #[test]
    fn path_pops_what_it_pushed_in_reverse() {
        let nodes: Vec<Node> = (0..3).map(|_| Node::new(false)).collect();
        for depth in [
            0,
            1,
            PATH_INLINE - 1,
            PATH_INLINE,
            PATH_INLINE + 1,
            3 * PATH_INLINE,
        ] {
            let mut p = Path::default();
            for i in 0..depth {
                p.push((&nodes[i % 3], i));
            }
            for i in (0..depth).rev() {
                let (n, at) = p.pop().expect("a step");
                assert_eq!(at, i);
                assert!(std::ptr::eq(n, &nodes[i % 3]));
            }
            assert!(p.pop().is_none());
        }
    }

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
        #![proptest_config(ProptestConfig::with_cases(24))]

        /// Inserts in ascending runs (the writer's hint places each one
        /// after the last without a descent), broken by jumps back, a key
        /// written twice in one transaction, the other table and aborted
        /// transactions, over keys sharing a 20-byte prefix (the nodes'
        /// 16-byte heads are all equal: every placement compares whole
        /// keys), in a tree several levels deep: reads at every snapshot
        /// equal the model. Fails if the hint skips its check of the entry
        /// after it (or of the leaf's upper bound).
        #[test]
        fn runs_in_order_land_where_a_descent_puts_them(
            steps in prop::collection::vec((0u8..8, 0u32..2, 0u16..500, 1u16..80), 1..40)
        ) {
            let mem = Memtable::default();
            let mut model = Model::new();
            let mut version = 1u64;
            let mut pending: Vec<(u32, Vec<u8>)> = Vec::new();
            let key = |i: u16| format!("a-shared-prefix-of-20b-{i:05}").into_bytes();
            let mut last: Option<(u32, Vec<u8>)> = None;
            let put = |t: u32, k: Vec<u8>, version: u64, model: &mut Model, pending: &mut Vec<(u32, Vec<u8>)>| {
                let v = Some(format!("{version}-{}", k.len()).into_bytes());
                mem.insert(t, &k, v.as_deref(), TxnId(version));
                model.entry((t, k.clone())).or_default().push((version, v, false));
                pending.push((t, k));
            };
            for (kind, t, at, len) in steps {
                match kind {
                    // An ascending run (most steps).
                    0..=4 => {
                        for i in at..at.saturating_add(len) {
                            put(t, key(i), version, &mut model, &mut pending);
                            last = Some((t, key(i)));
                        }
                    }
                    // The last key again, in the same transaction.
                    5 => {
                        if let Some((t, k)) = last.clone() {
                            put(t, k, version, &mut model, &mut pending);
                        }
                    }
                    // A commit, or an abort (its entries marked).
                    _ => {
                        if kind == 7 {
                            mem.abort(TxnId(version));
                            for (t, k) in pending.drain(..) {
                                if let Some(vs) = model.get_mut(&(t, k)) {
                                    for e in vs.iter_mut().filter(|e| e.0 == version) {
                                        e.2 = true;
                                    }
                                }
                            }
                        }
                        pending.clear();
                        version += 1;
                    }
                }
            }
            for snap in 0..=version {
                for table in 0..2 {
                    let want = model_range(&model, table, Bound::Unbounded, Bound::Unbounded, snap);
                    let mut r = mem.range(table, Bound::Unbounded, Bound::Unbounded, TxnId(snap));
                    let mut got = Vec::new();
                    while let Some((k, v)) = r.next() {
                        got.push((k.to_vec(), v.map(<[u8]>::to_vec)));
                    }
                    prop_assert_eq!(got, want, "table {} at {}", table, snap);
                }
            }
            for (t, k) in model.keys() {
                let got = mem.get(*t, k, TxnId(version)).map(|v| v.map(<[u8]>::to_vec));
                prop_assert_eq!(got, model_get(&model, *t, k, version));
            }
        }
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

    /// Many entries (thousands of leaves, three levels of inner nodes),
    /// with runs of one key rewritten within a version and across versions
    /// that span leaf splits: gets and ranges both ways at sampled
    /// snapshots equal the model. The newest write of a (key, version)
    /// shadows the earlier ones wherever a split falls between them.
    #[test]
    fn a_large_tree_with_rewrites_across_splits_equals_the_model() {
        let mem = Memtable::default();
        let mut model = Model::new();
        let mut rng = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let versions = 400u64;
        for version in 1..=versions {
            let aborted = version % 17 == 0;
            for _ in 0..100 {
                let r = next();
                let table = (r % 3) as u32;
                // Few distinct keys in table 0 (long runs of versions),
                // many in the others.
                let key = if table == 0 {
                    (r >> 8) % 50
                } else {
                    (r >> 8) % 20_000
                }
                .to_be_bytes()
                .to_vec();
                let value = (r % 5 != 0).then(|| version.to_le_bytes().to_vec());
                // Sometimes the same key several times in one version.
                let times = if r % 11 == 0 { 1 + (r >> 40) % 40 } else { 1 };
                for t in 0..times {
                    let v = value.as_ref().map(|v| [v.as_slice(), &[t as u8]].concat());
                    mem.insert(table, &key, v.as_deref(), TxnId(version));
                    model
                        .entry((table, key.clone()))
                        .or_default()
                        .push((version, v, aborted));
                }
            }
            if aborted {
                mem.abort(TxnId(version));
            }
        }
        for snap in [0, 1, 16, 17, 18, 200, 399, 400, 401] {
            for (t, k) in model.keys() {
                let got = mem.get(*t, k, TxnId(snap)).map(|v| v.map(<[u8]>::to_vec));
                assert_eq!(
                    got,
                    model_get(&model, *t, k, snap),
                    "get {t} {k:?} at {snap}"
                );
            }
            for table in 0..3 {
                let lo = Bound::Included(100u64.to_be_bytes().to_vec());
                let hi = Bound::Excluded(15_000u64.to_be_bytes().to_vec());
                for (lo, hi) in [
                    (Bound::Unbounded, Bound::Unbounded),
                    (lo.clone(), hi.clone()),
                ] {
                    let want = model_range(&model, table, lo.clone(), hi.clone(), snap);
                    let mut r = mem.range(table, as_ref(&lo), as_ref(&hi), TxnId(snap));
                    let mut fwd = Vec::new();
                    while let Some((k, v)) = r.next() {
                        fwd.push((k.to_vec(), v.map(<[u8]>::to_vec)));
                    }
                    assert_eq!(fwd, want, "forward, table {table} at {snap}");
                    let mut r = mem.range(table, as_ref(&lo), as_ref(&hi), TxnId(snap));
                    let mut back = Vec::new();
                    while let Some((k, v)) = r.next_back() {
                        back.push((k.to_vec(), v.map(<[u8]>::to_vec)));
                    }
                    back.reverse();
                    assert_eq!(back, want, "backward, table {table} at {snap}");
                }
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
