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
