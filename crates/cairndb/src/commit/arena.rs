//! The memtable's arena: memory carved out of large blocks by bumping a
//! pointer, freed all at once when the memtable is dropped (as RocksDB's
//! memtables do), in blocks that the kernel can back with huge pages.
//!
//! A full memtable (64 MiB by default) is read and written at random: a
//! descent touches a node per level and an entry per comparison that its
//! head does not settle, and a spill walks the entries in key order,
//! scattered over the arena in insertion order. With 4 KiB pages nearly
//! every one of those touches also misses the TLB (a 64 MiB working set
//! is 16,384 pages). Blocks of [`HUGE_BLOCK`] bytes, aligned to it and
//! advised `MADV_HUGEPAGE` on Linux, are each one 2 MiB page wherever the
//! system allows transparent huge pages (`always`, or `madvise`, the usual
//! default); elsewhere the advice is ignored and they are ordinary memory.
//! The first blocks are smaller (from [`FIRST_BLOCK`], doubling) so that a
//! database with a few changes in memory holds little.
//!
//! `bumpalo` did this before; its blocks come from the global allocator
//! with no say over their alignment or advice, which is what this adds.
//!
//! Nothing allocated here is dropped: only types without drop glue (plain
//! data and atomics) may be put in it.

use std::alloc::Layout;
use std::cell::{Cell, RefCell};
use std::ptr::NonNull;
use std::sync::Mutex;

/// The first block's size.
const FIRST_BLOCK: usize = 64 << 10;

/// The largest block, and the size of a huge page on x86-64 and arm64 (with
/// 4 KiB base pages): blocks this big are aligned to it and advised.
const HUGE_BLOCK: usize = 2 << 20;

/// A huge block's layout.
const HUGE: Layout = match Layout::from_size_align(HUGE_BLOCK, HUGE_BLOCK) {
    Ok(l) => l,
    Err(_) => panic!("HUGE_BLOCK is a power of two"),
};

/// A bump allocator over a list of blocks. Not `Sync`: one thread at a time
/// allocates (the memtable keeps it under its writer lock).
pub(crate) struct Arena {
    /// The free part of the current block: `[next, end)`.
    next: Cell<usize>,
    end: Cell<usize>,
    /// Every block, to free on drop.
    blocks: RefCell<Vec<(NonNull<u8>, Layout)>>,
    /// The size of the next block.
    next_size: Cell<usize>,
    /// Where huge blocks come from and go back to.
    pool: &'static BlockPool,
}

// The blocks are owned by the arena alone; what is carved out of them is
// reached through the references `alloc` hands out, whose users (the
// memtable) do their own synchronization.
unsafe impl Send for Arena {}

impl Default for Arena {
    fn default() -> Self {
        Arena::with_pool(&POOL)
    }
}

impl Arena {
    /// An empty arena whose huge blocks come from and go back to `pool`.
    fn with_pool(pool: &'static BlockPool) -> Arena {
        pool.join();
        Arena {
            next: Cell::new(0),
            end: Cell::new(0),
            blocks: RefCell::new(Vec::new()),
            next_size: Cell::new(FIRST_BLOCK),
            pool,
        }
    }

    /// `value`, moved into the arena. `T` must not need dropping (it never
    /// will be).
    #[allow(clippy::mut_from_ref)]
    pub(crate) fn alloc<T>(&self, value: T) -> &mut T {
        const { assert!(!std::mem::needs_drop::<T>()) };
        let p = self.alloc_layout(Layout::new::<T>()).cast::<T>();
        // SAFETY: `p` is fresh memory of `T`'s size and alignment, not
        // handed out before and live as long as `self`.
        unsafe {
            p.as_ptr().write(value);
            &mut *p.as_ptr()
        }
    }

    /// Memory of `layout`, uninitialized, live until the arena is dropped.
    pub(crate) fn alloc_layout(&self, layout: Layout) -> NonNull<u8> {
        let start = self.next.get().next_multiple_of(layout.align());
        match start.checked_add(layout.size()) {
            Some(end) if end <= self.end.get() && self.end.get() != 0 => {
                self.next.set(end);
                // SAFETY: `start` is inside the current block (not null).
                unsafe { NonNull::new_unchecked(start as *mut u8) }
            }
            _ => self.alloc_in_new_block(layout),
        }
    }

    #[cold]
    #[inline(never)]
    fn alloc_in_new_block(&self, layout: Layout) -> NonNull<u8> {
        let size = self.next_size.get();
        if layout.size() > size / 4 {
            // A large allocation gets a block of its own, and the current
            // block stays in use.
            return self.new_block(layout.size(), layout.align());
        }
        self.next_size.set((size * 2).min(HUGE_BLOCK));
        let block = self.new_block(size, if size == HUGE_BLOCK { HUGE_BLOCK } else { 64 });
        let start = block.as_ptr() as usize;
        let first = start.next_multiple_of(layout.align());
        self.next.set(first + layout.size());
        self.end.set(start + size);
        // SAFETY: `first` is inside the new block (a quarter of it at most
        // past its start, plus the alignment).
        unsafe { NonNull::new_unchecked(first as *mut u8) }
    }

    /// A new block of `size` bytes aligned to `align`, recorded for `drop`.
    fn new_block(&self, size: usize, align: usize) -> NonNull<u8> {
        let layout = match Layout::from_size_align(size.max(1), align) {
            Ok(l) => l,
            // (Only for sizes near `isize::MAX`, which no entry has.)
            Err(_) => std::alloc::handle_alloc_error(Layout::new::<u8>()),
        };
        let p = match self.pool.take(layout) {
            Some(p) => p,
            None => {
                // SAFETY: `layout` has a non-zero size.
                let p = unsafe { std::alloc::alloc(layout) };
                let Some(p) = NonNull::new(p) else {
                    std::alloc::handle_alloc_error(layout)
                };
                if layout == HUGE {
                    advise_huge(p, HUGE_BLOCK);
                }
                p
            }
        };
        self.blocks.borrow_mut().push((p, layout));
        p
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // (Nothing carved out of a block is used after the arena: the
        // memtable drops it last.)
        self.pool.leave(self.blocks.get_mut().drain(..));
    }
}

/// Huge blocks of arenas dropped, kept for the next arenas (up to its
/// cap) while any arena lives. A memtable is replaced by a fresh one after
/// every spill, so without this each one would map its 64 MiB afresh and
/// the kernel would zero every page on its first touch again (measured: 10%
/// of a document update's time in `clear_page_erms`, against 6% with the
/// pool and 3% with bumpalo, whose largest chunks the allocator reused from
/// its heap). Process-wide: every database's memtables draw from it; once
/// the last arena is dropped (every database closed), it frees what it
/// kept.
struct BlockPool {
    inner: Mutex<PoolInner>,
    cap: usize,
}

struct PoolInner {
    /// Addresses of kept blocks, each `HUGE_BLOCK` bytes aligned to it.
    free: Vec<usize>,
    /// Arenas alive that draw from the pool.
    live: usize,
}

/// Huge blocks the pool keeps at most (64 MiB, the default overlay budget).
const POOL_BLOCKS: usize = 32;

static POOL: BlockPool = BlockPool::new(POOL_BLOCKS);

impl BlockPool {
    const fn new(cap: usize) -> BlockPool {
        BlockPool {
            inner: Mutex::new(PoolInner {
                free: Vec::new(),
                live: 0,
            }),
            cap,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PoolInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Notes an arena that will give its blocks back here.
    fn join(&self) {
        self.lock().live += 1;
    }

    /// A kept block for `layout` (a huge one), if there is one.
    fn take(&self, layout: Layout) -> Option<NonNull<u8>> {
        if layout != HUGE {
            return None;
        }
        let p = self.lock().free.pop()?;
        NonNull::new(p as *mut u8)
    }

    /// An arena's blocks, given up as it is dropped: huge ones kept while
    /// the pool has room, the rest freed; and once no arena is left, every
    /// kept one freed too.
    fn leave(&self, blocks: impl Iterator<Item = (NonNull<u8>, Layout)>) {
        let mut inner = self.lock();
        let mut dealloc = Vec::new();
        for (p, layout) in blocks {
            if layout == HUGE && inner.free.len() < self.cap {
                inner.free.push(p.as_ptr() as usize);
            } else {
                dealloc.push((p, layout));
            }
        }
        inner.live = inner.live.saturating_sub(1);
        if inner.live == 0 {
            dealloc.extend(
                inner
                    .free
                    .drain(..)
                    .filter_map(|p| NonNull::new(p as *mut u8))
                    .map(|p| (p, HUGE)),
            );
        }
        drop(inner);
        for (p, layout) in dealloc {
            // SAFETY: `p` was allocated with `layout` (by `Arena::new_block`)
            // and is freed once: an arena gives each block up once, and a
            // kept block is either handed out again or freed here.
            unsafe { std::alloc::dealloc(p.as_ptr(), layout) };
        }
    }

    /// Blocks kept.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().free.len()
    }
}

/// Asks the kernel to back `[p, p + len)` with huge pages (before the first
/// touch, so that the page faults allocate them directly). Advice only: a
/// failure (no THP support, `never`) changes nothing.
fn advise_huge(p: NonNull<u8>, len: usize) {
    #[cfg(target_os = "linux")]
    // SAFETY: `madvise` with `MADV_HUGEPAGE` changes no contents and only
    // applies to memory this arena owns.
    unsafe {
        libc::madvise(p.as_ptr().cast(), len, libc::MADV_HUGEPAGE);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (p, len);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocations_are_aligned_disjoint_and_keep_their_contents() {
        let a = Arena::default();
        let mut spans: Vec<(usize, usize, u8)> = Vec::new();
        // Sizes and alignments that cross blocks, and large ones that get
        // their own block, beside small ones that stay in the current one.
        let shapes = [
            (1usize, 1usize),
            (48, 8),
            (1040, 16),
            (3000, 8),
            (70_000, 64),
            (24, 8),
        ];
        for i in 0..20_000usize {
            let (size, align) = shapes[i % shapes.len()];
            let p = a.alloc_layout(Layout::from_size_align(size, align).unwrap());
            let at = p.as_ptr() as usize;
            assert_eq!(at % align, 0, "allocation {i} misaligned");
            let fill = (i % 251) as u8;
            unsafe { std::ptr::write_bytes(p.as_ptr(), fill, size) };
            spans.push((at, size, fill));
        }
        for &(at, size, fill) in &spans {
            let s = unsafe { std::slice::from_raw_parts(at as *const u8, size) };
            assert!(
                s.iter().all(|&b| b == fill),
                "an allocation was overwritten"
            );
        }
        spans.sort_unstable();
        for w in spans.windows(2) {
            assert!(w[0].0 + w[0].1 <= w[1].0, "two allocations overlap");
        }
        // Blocks grew to the huge size, and huge blocks are aligned to it.
        let blocks = a.blocks.borrow();
        assert!(blocks.iter().any(|(_, l)| l.size() == HUGE_BLOCK));
        for (p, l) in blocks.iter() {
            if l.size() == HUGE_BLOCK {
                assert_eq!(p.as_ptr() as usize % HUGE_BLOCK, 0);
            }
        }
    }

    #[test]
    fn values_moved_in_read_back() {
        let a = Arena::default();
        let refs: Vec<&mut [u64; 5]> = (0..10_000u64).map(|i| a.alloc([i; 5])).collect();
        for (i, r) in refs.iter().enumerate() {
            assert_eq!(**r, [i as u64; 5]);
        }
    }

    /// The huge blocks carry the kernel's huge-page advice: the `hg` flag
    /// of their mapping in `/proc/self/smaps` (set by `MADV_HUGEPAGE`
    /// whatever the system's THP mode, on a kernel built with THP).
    #[cfg(target_os = "linux")]
    #[test]
    fn huge_blocks_are_advised() {
        if !std::path::Path::new("/sys/kernel/mm/transparent_hugepage").exists() {
            return; // A kernel without THP refuses the advice.
        }
        let a = Arena::default();
        while a.next_size.get() < HUGE_BLOCK || a.blocks.borrow().len() < 8 {
            a.alloc_layout(Layout::from_size_align(4000, 8).unwrap());
        }
        let blocks: Vec<usize> = a
            .blocks
            .borrow()
            .iter()
            .filter(|(_, l)| l.size() == HUGE_BLOCK)
            .map(|(p, _)| p.as_ptr() as usize)
            .collect();
        assert!(!blocks.is_empty());
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        for &b in &blocks {
            let mut in_it = false;
            let mut flags = None;
            for line in smaps.lines() {
                if let Some((range, _)) = line.split_once(' ') {
                    if let Some((lo, hi)) = range.split_once('-') {
                        if let (Ok(lo), Ok(hi)) =
                            (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
                        {
                            in_it = lo <= b && b < hi;
                            continue;
                        }
                    }
                }
                if in_it {
                    if let Some(f) = line.strip_prefix("VmFlags:") {
                        flags = Some(f.split_whitespace().map(str::to_string).collect::<Vec<_>>());
                    }
                }
            }
            let flags = flags.expect("the block's mapping is in smaps");
            assert!(
                flags.iter().any(|f| f == "hg"),
                "block at {b:#x}: VmFlags {flags:?}"
            );
        }
    }

    /// Huge blocks of a dropped arena are reused by the next one (no new
    /// mapping, no zeroing by the kernel), and the pool keeps no more than
    /// its cap.
    #[test]
    fn huge_blocks_are_reused_up_to_the_cap() {
        static PRIVATE: BlockPool = BlockPool::new(3);
        let fill = |a: &Arena| {
            while a.blocks.borrow().iter().filter(|(_, l)| *l == HUGE).count() < 5 {
                a.alloc_layout(Layout::from_size_align(4000, 8).unwrap());
            }
        };
        let huge = |a: &Arena| -> Vec<usize> {
            a.blocks
                .borrow()
                .iter()
                .filter(|(_, l)| *l == HUGE)
                .map(|(p, _)| p.as_ptr() as usize)
                .collect()
        };
        // (An arena that stays, as an open database's memtable does.)
        let keeper = Arena::with_pool(&PRIVATE);
        let a = Arena::with_pool(&PRIVATE);
        fill(&a);
        let first = huge(&a);
        drop(a);
        assert_eq!(PRIVATE.len(), 3, "the pool keeps up to its cap");
        let b = Arena::with_pool(&PRIVATE);
        fill(&b);
        let second = huge(&b);
        // The three kept, last kept first; then new ones.
        assert_eq!(
            second[..3],
            [first[2], first[1], first[0]],
            "{first:x?} then {second:x?}"
        );
        assert_eq!(PRIVATE.len(), 0);
        drop(b);
        assert_eq!(PRIVATE.len(), 3);
        // The last arena gone, nothing is kept.
        drop(keeper);
        assert_eq!(PRIVATE.len(), 0);
    }
}
