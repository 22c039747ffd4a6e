//! Pages a read transaction keeps alive so that the keys and values it
//! hands out can borrow page bytes for the transaction's whole life, the way
//! LMDB hands out slices of its map: a scan then copies nothing and touches
//! no reference count per entry — one per leaf, when the leaf is pinned.
//! Point lookups in key order pin the leaf they keep returning to (the
//! table's finger, `NodeSource::get`). Branch pages a transaction descends
//! through are pinned too. Every pinned page is found again through a
//! lock-free hash table of the transaction's own, which holds what a lookup
//! needs inline (the page's bytes and, once searched, its search index): a
//! lookup's root and branches, a range's leaf visited again, cost a probe
//! of that table instead of the page cache's lock, hash map and reference
//! count (atomic read-modify-writes, which every reader thread would
//! contend on for the root) and a walk from the page to its index.
//!
//! Invariants:
//! - a pinned page is only released when the `PagePins` is dropped (which
//!   takes it by value, so no borrow of its pages is left): slices returned
//!   through [`PagePins::pin`] and [`PagePins::lookup`] (page bytes, search
//!   indexes) stay valid for as long as the `&PagePins` they came through. A page's bytes live in its reference-counted allocation, which
//!   does not move when the list of pins grows;
//! - the lookup table only grows: a pin is never removed from it, and a
//!   table replaced by a larger one stays allocated (and complete up to the
//!   moment it was replaced) until the `PagePins` is dropped, so a reader
//!   probing an old table reads valid memory and at worst misses a newer pin
//!   (and takes the slow path, which finds it under the lock). Tables are at
//!   most half full, so every probe sequence meets an empty slot;
//! - pages are immutable (copy-on-write), so the bytes a pin keeps are the
//!   bytes every reader of the snapshot sees: pinning changes memory use,
//!   never contents. Checksums were verified when the page entered the cache;
//! - memory is bounded: past `budget` bytes of pinned pages, `pin` refuses
//!   and the caller falls back to sharing the page per entry (a reference
//!   count per key or value, as before). A transaction therefore holds at
//!   most `budget` bytes of pages the page cache may already have evicted
//!   (plus the search indexes of pinned pages first searched after they were
//!   pinned: 4 bytes per key and the keys' common prefix, see
//!   `btree/search.rs`), and lookup tables: the first of 64 slots (2,560
//!   bytes on a 64-bit target), then 160 to 320 bytes per pin once it has
//!   grown — 40-byte slots, the current table between a quarter and half
//!   full, the tables it replaced together about its size (320 bytes a pin
//!   just after a doubling, 160 just before the next). Tables are not
//!   charged to `budget`.

use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::Mutex;

use super::{Counters, Page};

/// The most page bytes one read transaction may keep alive beyond the page
/// cache: 64 MiB (and at most a quarter of the cache, the pager's
/// `pin_budget`) —
/// a scan of a table up to about that size borrows every entry; a longer one
/// shares the pages it reaches after that.
pub(crate) const PIN_BUDGET: usize = 64 << 20;

/// Slots of a transaction's first lookup table (it doubles when half full).
const FIRST_SLOTS: usize = 64;

/// Pins per chunk of `Inner::pins`.
const PIN_CHUNK: usize = 64;

/// One pinned page, at a stable address (see `Inner::pins`).
#[derive(Debug)]
struct Pin {
    pid: u64,
    page: Page,
}

/// A lookup table's entry: what a lookup needs of a pin, inline, so that a
/// probe reads the table alone (a pin's box is elsewhere in memory: one
/// cache miss more per lookup). Written once, under the lock: `data`,
/// `lens` and `pin` first, then `pid` with release; a reader that
/// loads `pid` with acquire and finds its page id reads the rest as
/// written. The page's search index is recorded later, by the first search
/// through the slot (`PinnedPage::index_or_build`): its length into `lens`,
/// then `index` with release; a reader that loads a non-null `index` with
/// acquire reads the length as written. `pid` 0 is an empty slot (page 0 is
/// the file header, never a tree page, and is never pinned).
#[derive(Debug, Default)]
struct Slot {
    pid: AtomicU64,
    /// The page's bytes: its own allocation, which never moves or changes
    /// while the pin holds the page.
    data: AtomicPtr<u8>,
    /// The lengths of `data` (low half) and of the search index (high half,
    /// once `index` is set).
    lens: AtomicU64,
    /// The page's search index (null until a search through this slot
    /// recorded it): an allocation the page keeps as long as it lives.
    index: AtomicPtr<u8>,
    pin: AtomicPtr<Pin>,
}

/// A pinned page's bytes, valid for the borrow of the [`PagePins`] that
/// returned them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PinnedPage<'a> {
    /// The page's bytes.
    pub data: &'a [u8],
    /// Its slot, for the search index.
    slot: &'a Slot,
}

/// An open-addressing table (linear probing) of pins by page id; its length
/// is a power of two.
type Table = Box<[Slot]>;

#[derive(Debug, Default)]
struct Inner {
    /// The pins, in chunks of `PIN_CHUNK` that never grow past their
    /// capacity (so never move): the tables point at pins, which must stay
    /// where they are. One allocation per chunk, not per pin.
    pins: Vec<Vec<Pin>>,
    /// `PagePins::release` ran.
    released: bool,
    /// Every table published in `PagePins::table`, the current one last:
    /// readers may still probe a replaced one (see the module docs). Boxed:
    /// `PagePins::table` points at a table's (fat) slice pointer, which must
    /// not move when this grows.
    #[allow(clippy::vec_box)]
    tables: Vec<Box<Table>>,
    /// Bytes of the pinned pages (what `budget` bounds).
    bytes: usize,
}

impl Inner {
    /// Pins held (every chunk but the last is full).
    fn count(&self) -> usize {
        self.pins
            .iter()
            .last()
            .map_or(0, |last| (self.pins.len() - 1) * PIN_CHUNK + last.len())
    }

    /// Bytes of the lookup tables.
    fn table_bytes(&self) -> usize {
        self.tables.iter().map(|t| t.len()).sum::<usize>() * std::mem::size_of::<Slot>()
    }
}

/// The pinned pages of one read transaction.
#[derive(Debug)]
pub(crate) struct PagePins {
    inner: Mutex<Inner>,
    /// The current lookup table (null before the first pin). Each non-null
    /// slot points at a pin in `inner.pins`; the table itself is a box of
    /// `inner.tables`. Both live as long as `self`.
    table: AtomicPtr<Table>,
    budget: usize,
}

// SAFETY: the raw pointers in the tables (and `table` itself) point at
// pins in chunks and at tables owned by `inner` (behind a mutex), which
// never move them and drop them only with `self`; what they point to is
// only read (page bytes, a search index and the thread-safe `Page` holding
// them), but for a slot's index fields, which are atomics.
unsafe impl Send for PagePins {}
unsafe impl Sync for PagePins {}

#[inline]
fn hash(pid: u64) -> usize {
    (pid.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize
}

impl<'a> PinnedPage<'a> {
    /// The pinned page of slot `slot` (whose `pid` the caller loaded with
    /// acquire and found set).
    #[inline]
    fn of(slot: &'a Slot) -> Self {
        let data = slot.data.load(Ordering::Relaxed);
        let len = slot.lens.load(Ordering::Relaxed) as u32 as usize;
        // SAFETY: the slot's pointers were written before its `pid` (see
        // `Slot`): the bytes of the page its pin holds, alive as long as the
        // `PagePins` the table belongs to, which `'a` borrows.
        PinnedPage {
            data: unsafe { std::slice::from_raw_parts(data, len) },
            slot,
        }
    }

    /// The page's search index, built by `build` on the first call
    /// ([`Page::index_or_build`]).
    #[inline]
    pub(crate) fn index_or_build(&self, build: fn(&[u8]) -> Vec<u8>) -> &'a [u8] {
        let slot = self.slot;
        let index = slot.index.load(Ordering::Acquire);
        if !index.is_null() {
            let len = (slot.lens.load(Ordering::Relaxed) >> 32) as usize;
            // SAFETY: recorded below, from the index of the page the slot's
            // pin holds, which keeps it as long as the page (`'a`, see
            // `of`); its length was stored before the pointer.
            return unsafe { std::slice::from_raw_parts(index, len) };
        }
        // SAFETY: `pin` was written before the slot's `pid` (see `Slot`):
        // a pin in `inner.pins`, in place and alive for `'a`.
        let page = unsafe { &(*slot.pin.load(Ordering::Relaxed)).page };
        let built = page.index_or_build(build);
        if !built.is_empty() && built.len() <= u32::MAX as usize {
            // (Threads racing here store the same values: the page's one
            // index.)
            let lens = (self.data.len() as u32 as u64) | ((built.len() as u64) << 32);
            slot.lens.store(lens, Ordering::Relaxed);
            slot.index
                .store(built.as_ptr() as *mut u8, Ordering::Release);
        }
        built
    }
}

/// The slot holding `pid` in `table`, if the table holds it.
#[inline]
fn probe(table: &Table, pid: u64) -> Option<&Slot> {
    let mask = table.len() - 1;
    let mut i = hash(pid) & mask;
    loop {
        let slot = table.get(i)?;
        match slot.pid.load(Ordering::Acquire) {
            0 => return None,
            p if p == pid => return Some(slot),
            _ => i = (i + 1) & mask,
        }
    }
}

/// Puts `pin` in the first empty slot of its probe sequence (the caller
/// holds the lock and has checked that the table is less than half full).
/// The pointers are only ever read through (`*mut` is what `AtomicPtr`
/// holds).
fn place(table: &Table, pin: &Pin) {
    let mask = table.len() - 1;
    let mut i = hash(pin.pid) & mask;
    while let Some(slot) = table.get(i) {
        if slot.pid.load(Ordering::Relaxed) == 0 {
            let data = pin.page.data();
            slot.data.store(data.as_ptr() as *mut u8, Ordering::Relaxed);
            slot.lens.store(data.len() as u32 as u64, Ordering::Relaxed);
            slot.pin
                .store(pin as *const Pin as *mut Pin, Ordering::Relaxed);
            slot.pid.store(pin.pid, Ordering::Release);
            return;
        }
        i = (i + 1) & mask;
    }
    debug_assert!(false, "a table at most half full has an empty slot");
}

impl PagePins {
    pub(crate) fn new(budget: usize) -> Self {
        PagePins {
            inner: Mutex::new(Inner::default()),
            table: AtomicPtr::new(std::ptr::null_mut()),
            budget,
        }
    }

    /// Page `pid` if this transaction pinned it.
    #[inline]
    pub(crate) fn lookup(&self, pid: u64) -> Option<PinnedPage<'_>> {
        let t = self.table.load(Ordering::Acquire);
        // SAFETY: a non-null table is a box of `inner.tables`, alive as long
        // as `self` (see the struct).
        let table = unsafe { t.as_ref() }?;
        probe(table, pid).map(PinnedPage::of)
    }

    /// Keeps `page` (id `pid`) alive until `self` is dropped and returns its
    /// bytes for that long; `None` once the budget is spent (and for page 0,
    /// the file header, which is never a tree page). `gauges` count
    /// the pinned pages and their bytes over every transaction of the
    /// handle (`release` takes this transaction's back out).
    pub(crate) fn pin(&self, pid: u64, page: &Page, gauges: &Counters) -> Option<PinnedPage<'_>> {
        if pid == 0 || page.data().len() > u32::MAX as usize {
            // (Never a tree page; see `Slot`.)
            return None;
        }
        if let Some(p) = self.lookup(pid) {
            // Pinned before: a snapshot's page id names one immutable page,
            // so these are the same bytes (and the pinned copy's, never the
            // caller's `page`, which it may drop).
            return Some(p);
        }
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        // Under the lock the current table is complete (another thread may
        // have pinned `pid` since the lookup above).
        if let Some(slot) = inner.tables.last().and_then(|t| probe(t, pid)) {
            let slot: *const Slot = slot;
            // SAFETY: a slot of a box of `inner.tables`, dropped only with
            // `self`.
            return Some(PinnedPage::of(unsafe { &*slot }));
        }
        let size = page.footprint();
        if inner.bytes + size > self.budget {
            return None;
        }
        inner.bytes += size;
        let mut added = size;
        let pin = Pin {
            pid,
            page: page.clone(),
        };
        match inner.pins.last_mut() {
            // (Never past `PIN_CHUNK`, within the chunk's capacity: its
            // pins stay in place, and `Inner::count` can count on it.)
            Some(chunk) if chunk.len() < PIN_CHUNK => chunk.push(pin),
            _ => {
                let mut chunk = Vec::with_capacity(PIN_CHUNK);
                chunk.push(pin);
                inner.pins.push(chunk);
            }
        }
        let slots = inner.tables.last().map_or(0, |t| t.len());
        if 2 * inner.count() > slots {
            // Half full: a table twice as large (or the first), holding
            // every pin; the old one stays for readers probing it.
            let len = (2 * slots).max(FIRST_SLOTS);
            let table: Box<Table> = Box::new((0..len).map(|_| Slot::default()).collect());
            for p in inner.pins.iter().flatten() {
                place(&table, p);
            }
            added += len * std::mem::size_of::<Slot>();
            inner.tables.push(table);
            // (The pointer is taken after the move into `tables`: one
            // taken before would not outlive the move under Stacked
            // Borrows, which retags a moved box as unique.)
            if let Some(t) = inner.tables.last() {
                let t: *const Table = &**t;
                self.table.store(t as *mut Table, Ordering::Release);
            }
        } else if let (Some(t), Some(p)) = (
            inner.tables.last(),
            inner.pins.last().and_then(|c| c.last()),
        ) {
            place(t, p);
        }
        gauges.pinned_pages.fetch_add(1, Ordering::Relaxed);
        gauges
            .pinned_bytes
            .fetch_add(added as u64, Ordering::Relaxed);
        let slot = inner.tables.last().and_then(|t| probe(t, pid))?;
        let slot: *const Slot = slot;
        // SAFETY: a slot of a box of `inner.tables`, which only drops its
        // boxes with `self` (not while the returned borrow of `self`
        // lives); what it points at (see `Slot`) lives as long.
        Some(PinnedPage::of(unsafe { &*slot }))
    }

    /// Takes this transaction's pins out of the handle's gauges (when it
    /// ends; the pins themselves go with `self`). A second call takes
    /// nothing out.
    pub(crate) fn release(&self, gauges: &Counters) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if std::mem::replace(&mut inner.released, true) {
            return;
        }
        let (pages, bytes) = (inner.count(), inner.bytes + inner.table_bytes());
        gauges
            .pinned_pages
            .fetch_sub(pages as u64, Ordering::Relaxed);
        gauges
            .pinned_bytes
            .fetch_sub(bytes as u64, Ordering::Relaxed);
    }

    /// Pages pinned.
    #[cfg(test)]
    pub(crate) fn count(&self) -> usize {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinned_bytes_outlive_every_other_owner_and_the_budget_holds() {
        let gauge = Counters::default();
        let pins = PagePins::new(3 * Page::new(&[0; 512], 0).footprint());
        let mut slices = Vec::new();
        for b in 0..5u8 {
            let page = Page::new(&[b; 512], b as u64);
            // (Page ids from 1: page 0 is the file header, never pinned.)
            let got = pins.pin(b as u64 + 1, &page, &gauge);
            drop(page); // the pins are the only owner left
            if b < 3 {
                slices.push(got.expect("under the budget").data);
            } else {
                assert!(got.is_none(), "page {b} pinned past the budget");
            }
        }
        for (b, s) in slices.iter().enumerate() {
            assert!(s.iter().all(|&x| x == b as u8), "page {b} changed");
        }
        assert_eq!(pins.count(), 3);
        assert_eq!(gauge.pinned_pages.load(Ordering::Relaxed), 3);
        // The same id again is not pinned twice, and what comes back is the
        // pinned page's bytes, not the argument's (which its caller drops).
        let page = Page::new(&[2; 512], 2);
        let caller_bytes = page.data().as_ptr();
        let again = pins.pin(3, &page, &gauge).expect("pinned before").data;
        drop(page);
        assert_eq!(pins.count(), 3);
        assert_ne!(
            again.as_ptr(),
            caller_bytes,
            "the caller's page, not the pinned one"
        );
        assert!(again.iter().all(|&x| x == 2));
        assert_eq!(pins.lookup(2).map(|p| p.data[0]), Some(1));
        assert!(pins.lookup(5).is_none(), "page 5 was never pinned");
        assert!(pins.pin(0, &Page::new(&[0; 512], 0), &gauge).is_none());
    }

    /// Pins past the first table's size move to larger tables: every pin
    /// stays found, pinning one again returns the first pin (same bytes, no
    /// budget spent), a table replaced by a larger one still answers for the
    /// pins it held, and pages never pinned are not found.
    #[test]
    fn every_pin_is_found_across_table_growth() {
        let gauge = Counters::default();
        let pins = PagePins::new(1 << 30);
        let n = 5 * FIRST_SLOTS as u64;
        let id = |i: u64| 3 + i * 7; // spread, as a tree's pages are
        let mut first = Vec::new();
        let mut old_table = std::ptr::null_mut();
        for i in 0..n {
            let page = Page::new(&[i as u8; 512], i);
            let got = pins.pin(id(i), &page, &gauge).expect("in budget");
            first.push(got.data.as_ptr());
            if i == 10 {
                old_table = pins.table.load(Ordering::Acquire);
            }
        }
        assert_eq!(pins.count(), n as usize);
        assert_ne!(pins.table.load(Ordering::Acquire), old_table, "grew");
        for i in 0..n {
            let got = pins.lookup(id(i)).expect("pinned");
            assert_eq!(got.data.as_ptr(), first[i as usize], "page {}", id(i));
            assert!(got.data.iter().all(|&b| b == i as u8));
            let again = pins.pin(id(i), &Page::new(&[0; 512], 0), &gauge);
            assert_eq!(again.map(|p| p.data.as_ptr()), Some(first[i as usize]));
            assert!(
                pins.lookup(id(i) + 1).is_none(),
                "{} never pinned",
                id(i) + 1
            );
        }
        assert_eq!(pins.count(), n as usize, "a page pinned twice");
        assert_eq!(gauge.pinned_pages.load(Ordering::Relaxed), n);
        let bytes = gauge.pinned_bytes.load(Ordering::Relaxed) as usize;
        let pages = n as usize * Page::new(&[0; 512], 0).footprint();
        assert!(
            bytes > pages && bytes <= pages + 320 * n as usize,
            "{bytes} bytes pinned for {n} pages of {pages} bytes"
        );
        pins.release(&gauge);
        pins.release(&gauge);
        assert_eq!(gauge.pinned_pages.load(Ordering::Relaxed), 0);
        assert_eq!(gauge.pinned_bytes.load(Ordering::Relaxed), 0);
        // SAFETY: tables live as long as `pins`.
        let old = unsafe { &*old_table };
        for i in 0..=10 {
            assert!(probe(old, id(i)).is_some(), "the old table lost {}", id(i));
        }
    }

    /// A pinned page's search index is built once (by the page) and then
    /// read from the slot: the same bytes, the same allocation.
    #[test]
    fn the_search_index_is_recorded_in_the_slot() {
        let gauge = Counters::default();
        let pins = PagePins::new(1 << 20);
        let page = Page::new(&[5; 512], 5);
        let p = pins.pin(9, &page, &gauge).expect("in budget");
        let built = p.index_or_build(|d| vec![d[0], 1, 2]);
        assert_eq!(built, &[5, 1, 2]);
        let again = pins.lookup(9).expect("pinned");
        let recorded = again.index_or_build(|_| panic!("built twice"));
        assert_eq!(recorded.as_ptr(), built.as_ptr());
        assert_eq!(recorded, &[5, 1, 2]);
        assert_eq!(page.index_or_build(|_| panic!("built twice")), &[5, 1, 2]);
    }

    /// Threads sharing one transaction's pins, pinning the same pages in
    /// different orders while the table grows: each page is pinned once
    /// (every thread gets the same bytes), a page a thread pinned is found
    /// by its next lookup whatever the others do, and the count and gauge
    /// agree.
    #[test]
    fn threads_pinning_at_once_pin_each_page_once() {
        let gauge = Counters::default();
        let pins = PagePins::new(1 << 30);
        let n = 3_000u64;
        let pages: Vec<Page> = (0..n).map(|i| Page::new(&[i as u8; 64], i)).collect();
        let seen: Vec<Vec<usize>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4u64)
                .map(|t| {
                    let (pins, pages, gauge) = (&pins, &pages, &gauge);
                    s.spawn(move || {
                        let mut ptrs = vec![0usize; n as usize];
                        for k in 0..n {
                            // Each thread its own order (a stride coprime to n).
                            let i = (k * [7, 11, 13, 17][t as usize] + t * 101) % n;
                            let got = pins.pin(i + 1, &pages[i as usize], gauge).unwrap();
                            assert!(got.data.iter().all(|&b| b == i as u8));
                            let again = pins.lookup(i + 1).expect("pinned, then not found");
                            assert_eq!(again.data.as_ptr(), got.data.as_ptr());
                            ptrs[i as usize] = got.data.as_ptr() as usize;
                        }
                        ptrs
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for i in 0..n as usize {
            assert!(
                seen.iter().all(|p| p[i] == seen[0][i]),
                "page {} pinned twice",
                i + 1
            );
        }
        assert_eq!(pins.count(), n as usize);
        assert_eq!(gauge.pinned_pages.load(Ordering::Relaxed), n);
    }
}
