//! Typed, layered errors.
//!
//! Storage errors (the device failed) are distinct from corruption (the device
//! returned bytes that fail their checksum or structure), from misuse (bad
//! input, limits), and from state errors (poisoned handle, locked file).

use std::io;
use std::path::PathBuf;

use crate::ids::PageId;

/// Result alias of the core layers.
pub type Result<T, E = CoreError> = std::result::Result<T, E>;

/// What part of the file a corruption error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DamagedPart {
    /// The fixed file header (page 0).
    FileHeader,
    /// One of the two commit slots.
    CommitSlot,
    /// A B+tree leaf or branch page.
    TreePage,
    /// A page of the persisted free-page list.
    FreeListPage,
    /// A run of pages holding an out-of-line (overflow) value.
    OverflowValue,
    /// A table record in the catalog.
    Catalog,
    /// The file is shorter than its commit record says.
    FileLength,
    /// A page of the commit log (FORMAT.md, "Commit log").
    LogPage,
}

/// A detected corruption: what is damaged, where, and how.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("corruption in {part:?} at page {page} (file offset {offset}): {detail}")]
pub struct Corruption {
    /// The kind of structure that failed verification.
    pub part: DamagedPart,
    /// The page that failed verification.
    pub page: PageId,
    /// The byte offset in the file where the damaged structure starts.
    pub offset: u64,
    /// A human-readable description of the check that failed.
    pub detail: String,
}

/// Errors from the storage device or the file system.
#[derive(Debug, thiserror::Error)]
#[error("I/O error during {op}: {source}")]
pub struct StorageError {
    /// The operation that failed (`read`, `write`, `sync`, `set_len`, ...).
    pub op: &'static str,
    /// The underlying error from the operating system or simulated file.
    #[source]
    pub source: io::Error,
}

/// A table opened with other key or value types than it was created with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("table {name:?} holds {stored_key}/{stored_value} but was opened as {requested_key}/{requested_value}")]
pub struct TypeMismatch {
    /// The table name.
    pub name: String,
    /// The key type recorded when the table was created.
    pub stored_key: String,
    /// The value type recorded when the table was created.
    pub stored_value: String,
    /// The key type it was opened with.
    pub requested_key: String,
    /// The value type it was opened with.
    pub requested_value: String,
}

/// The core family: every error of the storage engine and its key-value
/// API (storage, corruption, limits, transactions, tables). The document
/// and event layers have their own families ([`crate::document::DocumentError`],
/// [`crate::events::EventError`]), which wrap this one; [`crate::Error`]
/// joins all three.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CoreError {
    /// The device or file system failed. After a failed write or sync the
    /// handle is also poisoned (see [`CoreError::Poisoned`]).
    #[error(transparent)]
    Storage(#[from] StorageError),

    /// Bytes read from the file failed a checksum or structural check.
    #[error(transparent)]
    Corruption(#[from] Corruption),

    /// A previous write or sync failed; this handle refuses writes until the
    /// database is reopened (reopening runs recovery).
    #[error("the database handle is poisoned by an earlier failed write or sync ({cause}); reopen the database to recover")]
    Poisoned {
        /// A description of the failure that poisoned the handle.
        cause: String,
    },

    /// The file is not a CairnDB database: it does not start with the magic
    /// bytes and shows no sign of being a damaged or truncated one (those
    /// are [`CoreError::Corruption`]; FORMAT.md, "File header").
    #[error("{path} is not a CairnDB database (bad magic bytes)")]
    NotADatabase {
        /// The path that was opened.
        path: PathBuf,
    },

    /// The path could not be opened as a file: no permission, a directory,
    /// or another refusal of the operating system (named in `source`).
    #[error("cannot open {path}: {source}")]
    CannotOpen {
        /// The path given.
        path: PathBuf,
        /// Why the operating system refused.
        #[source]
        source: io::Error,
    },

    /// The file was written by a newer CairnDB with a format this build cannot read.
    #[error("{path} uses format version {found}, but this build of CairnDB reads only versions up to {supported}; upgrade CairnDB")]
    UnsupportedVersion {
        /// The path that was opened.
        path: PathBuf,
        /// The format version recorded in the file.
        found: u32,
        /// The newest format version this build supports.
        supported: u32,
    },

    /// Another handle (in any process) holds the writer lock.
    #[error("{path} is locked for writing by another process (or another open handle); close it first, or open it read-only")]
    DatabaseLocked {
        /// The path that was opened.
        path: PathBuf,
    },

    /// The path does not exist and the open mode does not create files.
    #[error("{path} does not exist")]
    NotFound {
        /// The path that was opened.
        path: PathBuf,
    },

    /// A key longer than the maximum for this page size.
    #[error("key of {len} bytes exceeds the maximum of {max} bytes for this page size")]
    KeyTooLarge {
        /// The length of the rejected key.
        len: usize,
        /// The maximum key length.
        max: usize,
    },

    /// A value longer than [`crate::limits::MAX_VALUE_BYTES`].
    #[error("value of {len} bytes exceeds the maximum of {max} bytes")]
    ValueTooLarge {
        /// The length of the rejected value.
        len: usize,
        /// The maximum value length.
        max: usize,
    },

    /// A table name that breaks the naming rules in [`crate::limits`].
    #[error("invalid table name {name:?}: {reason}")]
    InvalidTableName {
        /// The rejected name.
        name: String,
        /// Which rule it breaks.
        reason: &'static str,
    },

    /// The table does not exist.
    #[error("table {0:?} does not exist")]
    TableNotFound(String),

    /// The table exists but was created with other key or value types.
    /// (Boxed: the five names would make every `Result` of the crate larger.)
    #[error(transparent)]
    TableTypeMismatch(Box<TypeMismatch>),

    /// The table is already open in this transaction.
    #[error("table {0:?} is already open in this transaction")]
    TableAlreadyOpen(String),

    /// Growing the file would pass the configured maximum file size.
    #[error("the database file would grow to {requested} bytes, past its configured maximum of {max} bytes")]
    FileSizeLimit {
        /// The size the file would have needed.
        requested: u64,
        /// The configured maximum.
        max: u64,
    },

    /// More concurrent read transactions than [`crate::Builder::max_readers`].
    #[error("too many concurrent read transactions (the maximum is {max})")]
    TooManyReaders {
        /// The configured maximum.
        max: usize,
    },

    /// A write was attempted on a database opened read-only.
    #[error("the database is open read-only")]
    ReadOnly,

    /// [`crate::Table::append`] was given a key not greater than the table's last key.
    #[error("append out of order: the key is not greater than the table's last key")]
    AppendOutOfOrder,

    /// An operation needs that no read transaction is alive (e.g. `compact`).
    #[error("{0} read transaction(s) are still alive; end them before this operation")]
    ReadersActive(usize),

    /// A change inside this write transaction failed part-way, so it cannot be
    /// committed; nothing of it was written. Abort it (drop it) and retry.
    #[error("the write transaction cannot commit because an earlier change in it failed ({cause}); it was rolled back")]
    TransactionFailed {
        /// The error that failed the earlier change.
        cause: String,
    },

    /// The write transaction was used re-entrantly (e.g. from a callback that
    /// runs while one of its operations is in progress).
    #[error("the write transaction is busy: it was used from inside one of its own operations")]
    TransactionBusy,

    /// An internal invariant did not hold: a bug in CairnDB, reported rather
    /// than panicking. The transaction should be aborted.
    #[error("internal error (a bug in CairnDB, please report it): {0}")]
    Internal(String),

    /// A restore ([`crate::Database::begin_restore`]) needs a database that
    /// holds no table yet.
    #[error("the database already holds {tables} table(s) ({first:?} first); a restore writes only into an empty database")]
    NotEmpty {
        /// How many tables it holds.
        tables: usize,
        /// The first of them, by name.
        first: String,
    },

    /// A builder option is out of range.
    #[error("invalid option: {0}")]
    InvalidOption(String),

    /// An error of a storage backend other than the embedded engine (such
    /// as `cairndb-etcd`'s), carried through the layers above the storage
    /// seam ([`crate::seam`]); that backend's API gives it back with its
    /// own type.
    #[error(transparent)]
    Backend(Box<dyn std::error::Error + Send + Sync + 'static>),

    /// A stored value could not be decoded as the table's value type.
    #[error("stored bytes do not decode as {type_name}: {detail}")]
    Decode {
        /// The type that was expected.
        type_name: String,
        /// What was wrong.
        detail: String,
    },
}

impl CoreError {
    /// Whether this error reports corruption of the file.
    pub fn is_corruption(&self) -> bool {
        matches!(self, CoreError::Corruption(_))
    }

    pub(crate) fn io(op: &'static str, source: io::Error) -> Self {
        CoreError::Storage(StorageError { op, source })
    }
}
