//! The peers run side by side with CairnDB (cargo features `peers` and
//! `rocksdb`).

#[cfg(feature = "peers")]
pub mod fjall_kv;
#[cfg(feature = "peers")]
pub mod lmdb_kv;
#[cfg(feature = "peers")]
pub mod redb_kv;
#[cfg(feature = "rocksdb")]
pub mod rocks_kv;
#[cfg(feature = "peers")]
pub mod sled_kv;
#[cfg(feature = "peers")]
pub mod sqlite_docs;
#[cfg(feature = "peers")]
pub mod sqlite_events;
#[cfg(feature = "peers")]
pub mod sqlite_kv;
