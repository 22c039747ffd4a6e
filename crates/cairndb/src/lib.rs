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
mod commitlog;
mod db;
pub mod document;
pub mod error;
pub mod events;
#[doc(hidden)]
pub mod fuzzing;
mod ids;
mod integrity;
pub mod limits;
mod maintenance;
mod overlay;
pub mod pager;
pub mod storage;
mod table;
mod txn;
mod types;

pub use btree::walk::TreeStats;
pub use db::{Builder, Database, Durability, RecoveryReport};
pub use error::{Corruption, DamagedPart, Error, Result, StorageError};
pub use ids::{PageId, TxnId};
pub use integrity::IntegrityReport;
pub use maintenance::{CompactReport, Stats, TableStats};
pub use table::{AccessGuard, Range, ReadOnlyTable, ReadableTable, Table, TableDefinition};
pub use txn::{ReadTransaction, WriteTransaction};
pub use types::{FixedKey, Key, Value};
