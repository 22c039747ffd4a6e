//! The crate's error type: what can go wrong talking to an etcd cluster,
//! named so that a caller can tell what to do about it (retry a conflict,
//! start a newer read after a compaction, split a too-large transaction).

use crate::Revision;

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong with a database on an etcd cluster.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The `etcd://` URL could not be read.
    #[error("bad etcd URL {url:?}: {reason}")]
    Url {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// No member of the cluster answered (connection refused, timed out,
    /// no leader). Nothing was written; retrying later may work.
    #[error("etcd cluster unavailable at {}: {detail}", endpoints.join(","))]
    Unavailable {
        /// The endpoints the client was given.
        endpoints: Vec<String>,
        /// What the client saw.
        detail: String,
    },
    /// A commit was sent but its answer was lost (the connection broke or
    /// timed out): the transaction may or may not have been applied. It was
    /// applied whole or not at all, never in part.
    #[error(
        "commit outcome unknown at {}: {detail} (the transaction was applied whole or not at all)",
        endpoints.join(",")
    )]
    CommitIndeterminate {
        /// The endpoints the client was given.
        endpoints: Vec<String>,
        /// What the client saw.
        detail: String,
    },
    /// Something this transaction read was changed by another commit after
    /// the transaction's snapshot: nothing was written. Retryable (see
    /// [`EtcdDatabase::run_in_transaction`](crate::EtcdDatabase::run_in_transaction)).
    #[error("write conflict: a key read at revision {read_revision} was changed before the commit (retry the transaction)")]
    Conflict {
        /// The revision the transaction read at.
        read_revision: Revision,
    },
    /// The transaction's revision was compacted away by the cluster: its
    /// snapshot no longer exists. Start a new transaction.
    #[error("revision {revision} has been compacted by the cluster (start a new transaction)")]
    Compacted {
        /// The revision the transaction read at.
        revision: Revision,
    },
    /// A request is over one of etcd's limits (named, with the value the
    /// client was configured with). Transactions are atomic, so they are
    /// never split: write less per transaction, or raise the cluster's
    /// limit and the client's [`Options`](crate::Options) together.
    #[error("{what} is {size} but etcd's {limit} is {max}")]
    TooLarge {
        /// What was too large ("a value", "a transaction's operations").
        what: &'static str,
        /// The etcd flag that sets the limit (`--max-request-bytes`, `--max-txn-ops`).
        limit: &'static str,
        /// The size found.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// One entry (its etcd key and value) does not fit in one etcd request:
    /// values are not chunked (FORMAT.md, "etcd key layout"). Refused at
    /// `insert`, before anything is sent.
    #[error(
        "the entry {key} of table {table:?} is {size} bytes with its etcd key, \
         but etcd's {limit} is {max} (values are not chunked)"
    )]
    EntryTooLarge {
        /// The table.
        table: String,
        /// The entry's key, its bytes escaped as ASCII (`\xNN`).
        key: String,
        /// The etcd flag that sets the limit (`--max-request-bytes`).
        limit: &'static str,
        /// The entry's size in the request: etcd key, value and framing.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// The cluster is out of space: its backend reached its quota
    /// (`--quota-backend-bytes`, 2 GiB by default) and raised the NOSPACE
    /// alarm, so it refuses every write (`etcdserver: mvcc: database space
    /// exceeded`) until an operator frees space and disarms the alarm;
    /// reads still work. Nothing of the refused write was applied.
    #[error(
        "etcd cluster at {} is out of space (NOSPACE alarm: {detail}); nothing was written. \
         Free space, then disarm the alarm: compact the history (etcdctl compact <current \
         revision>), defragment every member (etcdctl defrag --cluster), then disarm \
         (etcdctl alarm disarm); or restart the members with a larger --quota-backend-bytes",
        endpoints.join(",")
    )]
    QuotaExceeded {
        /// The endpoints the client was given.
        endpoints: Vec<String>,
        /// What the cluster answered.
        detail: String,
    },
    /// A read transaction opened a table that does not exist.
    #[error("table {0:?} does not exist")]
    TableDoesNotExist(String),
    /// The prefix's metadata key names a format this client cannot use, or
    /// a key under the prefix is not in this crate's layout.
    #[error("etcd prefix {prefix:?}: {detail}")]
    Format {
        /// The key prefix.
        prefix: String,
        /// What is wrong.
        detail: String,
    },
    /// A table exists with other key and value type names than the ones
    /// it was opened with (the types recorded in its catalog key).
    #[error("table {table:?} holds {found_key}/{found_value} entries, not {key}/{value}")]
    TableTypeMismatch {
        /// The table.
        table: String,
        /// The key type asked for.
        key: String,
        /// The value type asked for.
        value: String,
        /// The key type recorded.
        found_key: String,
        /// The value type recorded.
        found_value: String,
    },
    /// A migration (or whole-dump load) into a prefix found it holding
    /// keys: it writes into an empty prefix only.
    #[error("etcd prefix {prefix:?} is not empty ({keys} key(s) under {prefix}/); a migration writes into an empty prefix only")]
    NotEmpty {
        /// The key prefix.
        prefix: String,
        /// How many keys it holds.
        keys: i64,
    },
    /// The prefix holds a migration that did not finish (its marker is
    /// still in the metadata key): its contents are partial, and no client
    /// opens it (FORMAT.md, "etcd key layout", migration).
    #[error(
        "etcd prefix {prefix:?} holds a migration that did not finish ({detail}): its contents \
         are partial; delete its keys (etcdctl del --prefix '{prefix}/') and migrate again"
    )]
    MigrationIncomplete {
        /// The key prefix.
        prefix: String,
        /// The marker: where the migration came from and when it started.
        detail: String,
    },
    /// An error of the embedded engine's rules (a table name, a stored
    /// value that does not decode as its table's type).
    #[error(transparent)]
    Engine(cairndb::CoreError),
    /// An event store call ([`EtcdDatabase::events`]) refused by the event
    /// layer's rules: a wrong expected version, a deleted stream, an
    /// invalid event, … (the same errors as the embedded engine's).
    ///
    /// [`EtcdDatabase::events`]: crate::EtcdDatabase::events
    #[error(transparent)]
    Events(Box<cairndb::events::EventError>),
    /// A document call ([`EtcdDatabase::collection`]) refused by the
    /// document layer's rules: a duplicate key, a bad filter or update, a
    /// document too large, … (the same errors as the embedded engine's).
    ///
    /// [`EtcdDatabase::collection`]: crate::EtcdDatabase::collection
    #[error(transparent)]
    Documents(Box<cairndb::document::DocumentError>),
    /// A feature of the embedded engine that does not carry over to a
    /// cluster (README, "etcd mode"): named, with why.
    #[error("{what} are not supported on an etcd cluster: {reason}")]
    Unsupported {
        /// The feature.
        what: &'static str,
        /// Why it does not carry over.
        reason: &'static str,
    },
    /// Any other error the cluster answered with (permission denied,
    /// authentication failed, an unexpected status).
    #[error("etcd error at {}: {detail}", endpoints.join(","))]
    Etcd {
        /// The endpoints the client was given.
        endpoints: Vec<String>,
        /// The status the cluster answered with.
        detail: String,
    },
}

impl Error {
    /// Whether running the same transaction again from the start (at a
    /// new revision) may succeed: a conflict, or a snapshot compacted away
    /// while the transaction ran.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Conflict { .. } | Error::Compacted { .. })
    }
}

/// A core error from the layers above the storage seam: this crate's own
/// error, if that is what it carries ([`cairndb::CoreError::Backend`]).
impl From<cairndb::CoreError> for Error {
    fn from(e: cairndb::CoreError) -> Self {
        match e {
            cairndb::CoreError::Backend(b) => match b.downcast::<Error>() {
                Ok(e) => *e,
                Err(b) => Error::Engine(cairndb::CoreError::Backend(b)),
            },
            other => Error::Engine(other),
        }
    }
}

/// An event layer error: this crate's own error where it carries one.
impl From<cairndb::events::EventError> for Error {
    fn from(e: cairndb::events::EventError) -> Self {
        match e {
            cairndb::events::EventError::Core(c) => Error::from(c),
            other => Error::Events(Box::new(other)),
        }
    }
}

/// A document layer error: this crate's own error where it carries one
/// (so a conflict inside a document write is [`Error::Conflict`], which
/// [`EtcdDatabase::run_in_transaction`](crate::EtcdDatabase::run_in_transaction)
/// retries).
impl From<cairndb::document::DocumentError> for Error {
    fn from(e: cairndb::document::DocumentError) -> Self {
        match e {
            cairndb::document::DocumentError::Core(c) => Error::from(c),
            other => Error::Documents(Box::new(other)),
        }
    }
}

impl Error {
    /// This error as the core family carries it through the layers above
    /// the storage seam: the engine's own errors as themselves (a table
    /// type mismatch as the engine's), the others boxed
    /// ([`cairndb::CoreError::Backend`]).
    pub(crate) fn into_core(self) -> cairndb::CoreError {
        match self {
            Error::Engine(c) => c,
            Error::TableTypeMismatch {
                table,
                key,
                value,
                found_key,
                found_value,
            } => cairndb::CoreError::TableTypeMismatch(Box::new(cairndb::TypeMismatch {
                name: table,
                stored_key: found_key,
                stored_value: found_value,
                requested_key: key,
                requested_value: value,
            })),
            other => cairndb::CoreError::Backend(Box::new(other)),
        }
    }
}
