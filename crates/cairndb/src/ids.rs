//! Newtypes for the identifiers that cross module boundaries.

use std::fmt;

/// The number of a page in the file: byte offset = `PageId * page_size`.
///
/// Pages 0, 1 and 2 hold the file header and the two commit slots; page 0 is
/// never a valid child pointer, so `PageId(0)` doubles as "none" on disk.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct PageId(pub u64);

impl PageId {
    /// The "no page" marker used in on-disk pointers.
    pub const NONE: PageId = PageId(0);

    /// Whether this is the "no page" marker.
    pub fn is_none(self) -> bool {
        self.0 == 0
    }
}

impl fmt::Debug for PageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "page {}", self.0)
    }
}

impl fmt::Display for PageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The identifier of a committed transaction; later commits have larger ids.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct TxnId(pub u64);

impl fmt::Debug for TxnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "txn {}", self.0)
    }
}

impl fmt::Display for TxnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Page ids (and transaction ids) are already well spread integers: a
/// multiplicative hash is enough and much cheaper than SipHash on the hot
/// paths (page cache, a transaction's changed nodes, young pages).
#[derive(Default)]
pub(crate) struct PageIdHasher(u64);

impl std::hash::Hasher for PageIdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x100_0000_01B3);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29);
    }
}

/// A hash map keyed by page ids (or other integer ids).
pub(crate) type PageMap<K, V> =
    std::collections::HashMap<K, V, std::hash::BuildHasherDefault<PageIdHasher>>;
