//! CairnDB: an embedded, single-file, crash-safe database engine.
//!
//! One file holds named tables of ordered key-value pairs, changed in ACID
//! transactions: many concurrent readers on MVCC snapshots beside one writer.
//! The file is a copy-on-write B+tree whose every page is checksummed by its
//! parent; a durable commit costs one device flush (see `FORMAT.md`).
//!
//! # Promises
//! 1. A commit acknowledged in durable mode survives a process crash and a
//!    power loss, given a device that honours fsync.
//! 2. Every commit is atomic under any crash: after recovery the database
//!    shows the last acknowledged commit, or that plus the whole commit that
//!    was in flight, never part of one. Non-durable commits may be lost only
//!    as a suffix, each whole.
//! 3. Corruption (bit flips, torn, stale or misplaced pages, truncation) is
//!    reported as a typed error naming the page and offset. It is never
//!    returned as data and never a panic.
//! 4. After a failed write or fsync the handle refuses further writes with a
//!    distinct error ("poisoned") until it is reopened; a commit never reports
//!    success after a failed flush.
//! 5. Every limit (key, value, document size, nesting depth, names, file
//!    size, readers) is documented and enforced with a typed error.
//! 6. Upper layers keep their own invariants under the same faults: secondary
//!    indexes equal the indexes recomputed from the documents; event streams
//!    have no gaps, a multi-event append is all-or-nothing, global positions
//!    only grow and a subscriber never skips a committed event.
//!
//! The limits are in [`limits`] and, for documents,
//! [`document::MAX_DOCUMENT_BYTES`] and [`document::codec::MAX_DEPTH`]. The
//! test suites that hold the engine to each promise are described in
//! `docs/reliability.md` in the repository.
//!
//! # Example
//! ```
//! use cairndb::{Database, ReadableTable, TableDefinition};
//! const SCORES: TableDefinition<&str, u64> = TableDefinition::new("scores");
//! # let dir = tempfile::tempdir().unwrap();
//! let db = Database::create(dir.path().join("game.cairn"))?;
//! let txn = db.begin_write()?;
//! {
//!     let mut t = txn.open_table(SCORES)?;
//!     t.insert("ada", &10)?;
//!     t.insert("bob", &7)?;
//! }
//! txn.commit()?;
//! let read = db.begin_read()?;
//! let t = read.open_table(SCORES)?;
//! let all: Vec<(String, u64)> = t
//!     .iter()?
//!     .map(|e| e.map(|(k, v)| (k.value().to_string(), v.value())))
//!     .collect::<Result<_, _>>()?;
//! assert_eq!(all, [("ada".to_string(), 10), ("bob".to_string(), 7)]);
//! # Ok::<(), cairndb::Error>(())
//! ```

#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used, clippy::panic))]
#![warn(missing_docs)]

mod btree;
mod catalog;
mod commit;
mod db;
pub mod document;
pub mod error;
pub mod events;
#[cfg(any(test, feature = "testing"))]
#[doc(hidden)]
pub mod fuzzing;
mod ids;
mod integrity;
pub mod limits;
mod maintenance;
mod pager;
pub mod seam;
/// The file header's layout (FORMAT.md, "File header"), for tests that write
/// headers by hand (feature `testing`).
#[cfg(any(test, feature = "testing"))]
#[doc(hidden)]
pub mod format {
    pub use crate::pager::header::{FileHeader, FIRST_DATA_PAGE, FORMAT_VERSION, HEADER_BYTES};
}
/// Helpers the tests of this crate and of the tools share (feature
/// `testing`).
#[cfg(any(test, feature = "testing"))]
#[doc(hidden)]
pub mod testing {
    use std::collections::BTreeMap;

    use crate::{Database, ReadableTable};

    /// Writes `key → value` (or removes `key`, with `None`) in table `name`
    /// as it is, a layer's own table included: for tests that damage what
    /// a layer keeps (an index entry removed, one no document has).
    pub fn raw_put(
        db: &Database,
        name: &str,
        key: &[u8],
        value: Option<&[u8]>,
    ) -> crate::Result<()> {
        let tx = db.begin_write()?;
        {
            let mut t = tx.open_table(crate::TableDefinition::<&[u8], &[u8]>::internal(name))?;
            match value {
                Some(v) => {
                    t.insert(key, v)?;
                }
                None => {
                    t.remove(key)?;
                }
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// Entries the latest commit's overlay holds (every version), read from
    /// a snapshot: unlike [`Database::stats`], which writes a staged commit
    /// out first (spilling the overlay), this changes nothing.
    pub fn overlay_entries(db: &Database) -> crate::Result<u64> {
        Ok(db.begin_read()?.overlay.entries() as u64)
    }

    /// Write groups (`txn/group.rs`) this handle committed with more than
    /// one operation, and the operations of those groups.
    pub fn write_groups(db: &Database) -> (u64, u64) {
        db.groups.counts()
    }

    /// Every table of the latest commit, the layers' own included: name →
    /// ((key type, value type), entries in key order).
    pub type Tables = BTreeMap<String, ((String, String), Vec<(Vec<u8>, Vec<u8>)>)>;

    /// The whole contents of `db`, table by table (compares a copy with its
    /// source byte for byte).
    pub fn all_tables(db: &Database) -> crate::Result<Tables> {
        let r = db.begin_read()?;
        let mut out = Tables::new();
        for name in r.list_tables()? {
            let t = r.open_untyped_table(&name)?;
            let mut entries = Vec::new();
            for e in t.iter()? {
                let (k, v) = e?;
                entries.push((k.as_bytes().to_vec(), v.as_bytes().to_vec()));
            }
            let types = r
                .table_types(&name)?
                .ok_or_else(|| crate::CoreError::TableNotFound(name.clone()))?;
            out.insert(name, (types, entries));
        }
        Ok(out)
    }
}
pub mod storage;
mod table;
mod txn;
mod types;

pub use btree::walk::TreeStats;
pub use db::{Builder, Database, Durability, RecoveryReport};
pub use error::{CoreError, Corruption, DamagedPart, StorageError, TypeMismatch};
pub use ids::{PageId, TxnId};
pub use integrity::IntegrityReport;
pub use maintenance::{CompactReport, IoCounters, Restore, Stats, TableStats};
pub use table::{AccessGuard, Range, ReadOnlyTable, ReadableTable, Table, TableDefinition};
pub use txn::{ReadTransaction, WriteTransaction};
pub use types::{FixedKey, Key, Value};

/// The file format version this build writes, and the newest it reads
/// (FORMAT.md, "Version history"); [`Database::format_version`] is one
/// file's. A dump names its source file's (`cairn load` refuses a newer
/// one).
pub const FORMAT_VERSION: u32 = pager::header::FORMAT_VERSION;

use document::DocumentError;
use events::EventError;

/// Result alias over [`Error`], the error of every layer.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Every error CairnDB returns, by family: the core engine (storage,
/// corruption, limits, transactions, tables), documents and events. Each
/// layer's API returns its own family ([`CoreError`], [`DocumentError`],
/// [`EventError`]); `?` turns any of them into this one. A document or event
/// error that only wraps a core error becomes [`Error::Core`], so a caller
/// matches storage failures in one place.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The storage engine: I/O, corruption, limits, transactions, tables.
    #[error(transparent)]
    Core(CoreError),
    /// The document layer: bad documents, queries and updates, duplicate
    /// keys, collections and indexes.
    #[error(transparent)]
    Document(DocumentError),
    /// The event layer: expected versions, deleted or missing streams, bad
    /// events and stream names.
    #[error(transparent)]
    Event(EventError),
}

impl Error {
    /// Whether this error reports corruption of the file.
    pub fn is_corruption(&self) -> bool {
        matches!(self, Error::Core(e) if e.is_corruption())
    }

    /// The core error underneath, if this is one.
    pub fn as_core(&self) -> Option<&CoreError> {
        match self {
            Error::Core(e) => Some(e),
            _ => None,
        }
    }
}

impl From<CoreError> for Error {
    fn from(e: CoreError) -> Self {
        Error::Core(e)
    }
}

impl From<DocumentError> for Error {
    fn from(e: DocumentError) -> Self {
        match e {
            DocumentError::Core(e) => Error::Core(e),
            e => Error::Document(e),
        }
    }
}

impl From<EventError> for Error {
    fn from(e: EventError) -> Self {
        match e {
            EventError::Core(e) => Error::Core(e),
            e => Error::Event(e),
        }
    }
}
