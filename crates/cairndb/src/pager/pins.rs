//! Pages a read transaction keeps alive so that the keys and values it
//! hands out can borrow page bytes for the transaction's whole life, the way
//! LMDB hands out slices of its map: a scan then copies nothing and touches
//! no reference count per entry — one per leaf, when the leaf is pinned.
//! Point lookups in key order pin the leaf they keep returning to (the
//! table's finger, `NodeSource::get`) and borrow its values too.
//! Branch pages a transaction descends through are pinned too, and found
//! again through a small lock-free table: a lookup's root and branches cost
//! one plain load each instead of the page cache's lock and a reference
//! count (which every reader thread would contend on for the root).
//!
//! Invariants:
//! - a pinned page is only released when the `PagePins` is dropped (which
//!   takes it by value, so no borrow of its pages is left): slices returned by
//!   [`PagePins::pin`] stay valid for as long as the `&PagePins` they came
//!   through. A page's bytes live in its reference-counted allocation, which
//!   does not move when the list of pins grows;
//! - pages are immutable (copy-on-write), so the bytes a pin keeps are the
//!   bytes every reader of the snapshot sees: pinning changes memory use,
//!   never contents. Checksums were verified when the page entered the cache;
//! - memory is bounded: past `budget` bytes of pinned pages, `pin` refuses
//!   and the caller falls back to sharing the page per entry (a reference
//!   count per key or value, as before). A transaction therefore holds at
//!   most `budget` bytes of pages the page cache may already have evicted
//!   (plus the search indexes of pinned pages first searched after they were
//!   pinned: 4 bytes per key and the keys' common prefix, see
//!   `btree/search.rs`).

use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::Mutex;

use super::Page;

/// The most page bytes one read transaction may keep alive beyond the page
/// cache: 64 MiB (and at most a quarter of the cache, `Pager::pin_budget`) —
/// a scan of a table up to about that size borrows every entry; a longer one
/// shares the pages it reaches after that.
pub(crate) const PIN_BUDGET: usize = 64 << 20;

/// Slots of the direct-mapped table of recently pinned pages.
const SLOTS: usize = 64;

/// One pinned page, boxed so that its address is stable.
#[derive(Debug)]
struct Pin {
    pid: u64,
    page: Page,
}

/// A pinned page's bytes, valid for the borrow of the [`PagePins`] that
/// returned them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PinnedPage<'a> {
    /// The page's bytes.
    pub data: &'a [u8],
    /// The page, for its search index (built on the first search).
    pub page: &'a Page,
}

#[derive(Debug, Default)]
struct Inner {
    /// Boxed: `slots` point at pins, which must not move when this grows.
    #[allow(clippy::vec_box)]
    pins: Vec<Box<Pin>>,
    /// Page id → its place in `pins`: a page whose slot another page took
    /// is found here, not pinned twice.
    by_pid: crate::ids::PageMap<u64, usize>,
    bytes: usize,
}

/// The pinned pages of one read transaction.
#[derive(Debug)]
pub(crate) struct PagePins {
    inner: Mutex<Inner>,
    /// A direct-mapped table (by page id) of pages pinned here: a page
    /// visited again (a root and branches on every lookup, a leaf on
    /// consecutive entries) is found with one plain load, without the page
    /// cache's lock or a reference count. Each non-null pointer points into
    /// a box of `inner.pins`, which lives as long as `self`.
    slots: [AtomicPtr<Pin>; SLOTS],
    budget: usize,
}

// SAFETY: the raw pointers in `slots` point into boxes owned by `inner`
// (behind a mutex) that are only dropped with `self`; what they point to is
// only read (a page id and an immutable, thread-safe `Page`).
unsafe impl Send for PagePins {}
unsafe impl Sync for PagePins {}

#[inline]
fn slot_of(pid: u64) -> usize {
    (pid.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) as usize % SLOTS
}

impl<'a> PinnedPage<'a> {
    fn of(pin: &'a Pin) -> Self {
        PinnedPage {
            data: pin.page.data(),
            page: &pin.page,
        }
    }

    /// The page's search index, built by `build` on the first call
    /// ([`Page::index_or_build`]).
    #[inline]
    pub(crate) fn index_or_build(&self, build: fn(&[u8]) -> Vec<u8>) -> &'a [u8] {
        self.page.index_or_build(build)
    }
}

impl PagePins {
    pub(crate) fn new(budget: usize) -> Self {
        PagePins {
            inner: Mutex::new(Inner::default()),
            slots: std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut())),
            budget,
        }
    }

    /// Page `pid` if this transaction pinned it (and it is still in its
    /// slot of the lookup table).
    #[inline]
    pub(crate) fn lookup(&self, pid: u64) -> Option<PinnedPage<'_>> {
        let p = self.slots[slot_of(pid)].load(Ordering::Acquire);
        // SAFETY: a non-null slot points into a box of `inner.pins`, alive
        // as long as `self` (see the struct).
        let pin = unsafe { p.as_ref() }?;
        (pin.pid == pid).then(|| PinnedPage::of(pin))
    }

    /// Keeps `page` (id `pid`) alive until `self` is dropped and returns its
    /// bytes for that long; `None` once the budget is spent. `gauge` counts
    /// the pinned pages of every transaction of the handle.
    pub(crate) fn pin(&self, pid: u64, page: &Page, gauge: &AtomicU64) -> Option<PinnedPage<'_>> {
        if let Some(p) = self.lookup(pid) {
            // Pinned before: a snapshot's page id names one immutable page,
            // so these are the same bytes (and the pinned copy's, never the
            // caller's `page`, which it may drop).
            return Some(p);
        }
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&at) = inner.by_pid.get(&pid) {
            // Pinned before, its slot since taken by another page: back in
            // the slot, the same pin.
            let ptr: *mut Pin = match inner.pins.get_mut(at) {
                Some(pin) => &mut **pin,
                None => return None,
            };
            self.slots[slot_of(pid)].store(ptr, Ordering::Release);
            // SAFETY: as below — a box of `inner.pins`, dropped only with
            // `self`.
            return Some(PinnedPage::of(unsafe { &*ptr }));
        }
        let size = page.footprint();
        if inner.bytes + size > self.budget {
            return None;
        }
        inner.bytes += size;
        let mut pin = Box::new(Pin {
            pid,
            page: page.clone(),
        });
        let ptr: *mut Pin = &mut *pin;
        let at = inner.pins.len();
        inner.pins.push(pin);
        inner.by_pid.insert(pid, at);
        gauge.fetch_add(1, Ordering::Relaxed);
        self.slots[slot_of(pid)].store(ptr, Ordering::Release);
        // SAFETY: `ptr` points into the box just pushed to `inner.pins`,
        // which only drops its boxes with `self` (not while the returned
        // borrow of `self` lives); a box's contents never move, and the page
        // they hold is immutable.
        Some(PinnedPage::of(unsafe { &*ptr }))
    }

    /// Pages pinned.
    pub(crate) fn count(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pins
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinned_bytes_outlive_every_other_owner_and_the_budget_holds() {
        let gauge = AtomicU64::new(0);
        let pins = PagePins::new(3 * Page::new(&[0; 512], 0).footprint());
        let mut slices = Vec::new();
        for b in 0..5u8 {
            let page = Page::new(&[b; 512], b as u64);
            let got = pins.pin(b as u64, &page, &gauge);
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
        assert_eq!(gauge.load(Ordering::Relaxed), 3);
        // The same id again is not pinned twice, and what comes back is the
        // pinned page's bytes, not the argument's (which its caller drops).
        let page = Page::new(&[2; 512], 2);
        let caller_bytes = page.data().as_ptr();
        let again = pins.pin(2, &page, &gauge).expect("pinned before").data;
        drop(page);
        assert_eq!(pins.count(), 3);
        assert_ne!(
            again.as_ptr(),
            caller_bytes,
            "the caller's page, not the pinned one"
        );
        assert!(again.iter().all(|&x| x == 2));
        assert_eq!(pins.lookup(1).map(|p| p.data[0]), Some(1));
        assert!(pins.lookup(4).is_none(), "page 4 was never pinned");
    }

    /// A page whose lookup slot another page took is pinned once: pinning
    /// it again finds the first pin (same bytes, no budget spent).
    #[test]
    fn a_page_is_pinned_once_when_its_slot_was_taken() {
        let gauge = AtomicU64::new(0);
        let pins = PagePins::new(1 << 20);
        let a = 7u64;
        let b = (8..100_000u64)
            .find(|&p| slot_of(p) == slot_of(a))
            .expect("two ids share a slot");
        let first = pins.pin(a, &Page::new(&[1; 512], 1), &gauge).unwrap().data;
        pins.pin(b, &Page::new(&[2; 512], 2), &gauge).unwrap();
        assert!(pins.lookup(a).is_none(), "b took a's slot");
        let again = pins.pin(a, &Page::new(&[1; 512], 1), &gauge).unwrap().data;
        assert_eq!(again.as_ptr(), first.as_ptr(), "the same pin");
        assert_eq!(pins.count(), 2, "a pinned twice");
        assert_eq!(
            pins.lookup(a).map(|p| p.data[0]),
            Some(1),
            "a back in its slot"
        );
    }
}
