//! CairnDB's key-value API on an etcd cluster.
//!
//! The same shape as the embedded engine's (`begin_read`/`begin_write`,
//! `open_table`, `get`/`insert`/`remove`/`range`, `commit`), with untyped
//! byte keys and values, on a cluster reached by an
//! `etcd://host:port,host:port/prefix` URL. Read transactions are
//! snapshots at one etcd revision; write transactions are serializable and
//! optimistic: a conflict is [`Error::Conflict`], retried by
//! [`EtcdDatabase::run_in_transaction`]. The key layout is in FORMAT.md
//! ("etcd key layout"), the design in ARCHITECTURE.md ("etcd mode").
//!
//! The event layer runs on it through the storage seam
//! ([`cairndb::seam`], implemented in [`seam`]): [`EtcdDatabase::events`]
//! is the embedded engine's event code on the cluster, and
//! [`EtcdDatabase::collection`] its document code ([`EtcdCollection`]).
//! A document operation over more documents than one etcd `Txn` holds
//! (`--max-txn-ops`, `--max-request-bytes`) runs in batches, each one
//! serializable transaction: `update_many`, `delete_many` and index
//! builds (an index is *building* — maintained by writes, unused by
//! queries — until its last batch; see [`EtcdCollection`]'s module docs).
//! A cluster out of space (the NOSPACE alarm) refuses writes with
//! [`Error::QuotaExceeded`], whose message says how to free it.
//!
//! What does not carry over is listed in the README ("What carries over
//! today"); [`Error::Unsupported`] is kept for a feature refused at run
//! time (none is, today).
//!
//! The calls block; they drive a small runtime of their own. Called from
//! inside an async task (a caller's own tokio runtime), a call drives it
//! from a thread of its own and blocks the task's worker meanwhile: an
//! async caller should make them in `tokio::task::spawn_blocking`.

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod db;
mod documents;
mod error;
mod events;
mod keys;
pub mod seam;
mod txn;
mod url;

#[cfg(feature = "testing")]
pub mod testing;

pub use db::{
    EtcdDatabase, Options, Revision, DEFAULT_MAX_REQUEST_BYTES, DEFAULT_MAX_TXN_OPS,
    RANGE_PAGE_KEYS, REQUEST_OVERHEAD_BYTES_PER_OP,
};
pub use documents::{
    EtcdCollection, IndexState, SharedSnapshot, INDEX_BATCH_DOCS, MANY_BATCH_DOCS,
};
pub use error::{Error, Result};
pub use events::{EtcdEvents, EtcdSubscription, EtcdSubscriptionStop};
pub use keys::FORMAT_VERSION;
pub use txn::{Entry, ReadOnlyTable, ReadTransaction, Table, WriteTransaction};
pub use url::{EtcdUrl, DEFAULT_PREFIX};

#[cfg(test)]
mod tests {
    #[test]
    fn the_database_is_shared_between_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<crate::EtcdDatabase>();
        send_sync::<crate::Error>();
    }
}
