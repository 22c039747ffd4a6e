//! The engines under test: CairnDB's adapters (`cairn_*`) and the peers run
//! side by side with it (cargo features `peers` and `rocksdb`), and the
//! factories that open them by [`EngineKind`] for each suite.

use std::path::Path;

use crate::engine::{DocEngine, EngineKind, EventEngine, Kv, Res};

pub mod cairn_docs;
pub mod cairn_events;
pub mod cairn_kv;
#[cfg(feature = "etcd")]
pub mod etcd_kv;

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

/// Opens KV engine `kind` on the fresh directory `dir`.
pub fn open(kind: EngineKind, dir: &Path) -> Res<Box<dyn Kv>> {
    std::fs::create_dir_all(dir)?;
    match kind {
        EngineKind::Cairn => Ok(Box::new(cairn_kv::Cairn::open(dir)?)),
        #[cfg(feature = "peers")]
        EngineKind::Redb => Ok(Box::new(redb_kv::RedbKv::open(dir)?)),
        #[cfg(feature = "peers")]
        EngineKind::Lmdb => Ok(Box::new(lmdb_kv::LmdbKv::open(dir)?)),
        #[cfg(feature = "peers")]
        EngineKind::Sqlite => Ok(Box::new(sqlite_kv::SqliteKv::open(dir)?)),
        #[cfg(feature = "peers")]
        EngineKind::Fjall => Ok(Box::new(fjall_kv::FjallKv::open(dir)?)),
        #[cfg(feature = "peers")]
        EngineKind::Sled => Ok(Box::new(sled_kv::SledKv::open(dir)?)),
        #[cfg(feature = "rocksdb")]
        EngineKind::Rocksdb => Ok(Box::new(rocks_kv::RocksKv::open(dir)?)),
        #[allow(unreachable_patterns)]
        other => Err(format!("engine {} is not compiled into this build", other.name()).into()),
    }
}

/// Whether suite E has an adapter for `kind`.
pub fn has_event_adapter(kind: EngineKind) -> bool {
    matches!(kind, EngineKind::Cairn | EngineKind::Sqlite)
}

/// How each event store is set up for modes D and N.
pub fn event_config(kind: EngineKind) -> &'static str {
    match kind {
        EngineKind::Cairn => {
            "cairndb::events::EventStore over a default Builder (4 KiB pages, 1 GiB cache), \
             opened through a FileStorage wrapper that counts fdatasync calls; an append is \
             `EventStore::append` with an exact expected version (NoStream for a new stream), \
             one write transaction; loading batches use one EventWriter in one transaction. \
             D = Durability::Immediate, N = Durability::None. Reads are the borrowing \
             `read_stream_with` / `load_with` of a read snapshot, each event an EventRef \
             read in place (stream name, type, id, payload, metadata, time decoded; no \
             copy, as SQLite's rows are borrowed); the subscription is `subscribe_all` \
             through `poll_borrowed` (the same), woken by the commit notification."
        }
        EngineKind::Sqlite => {
            "SQLite (rusqlite 0.41, bundled), WAL, cache_size=1 GiB (as CairnDB's and redb's default caches), prepared statements: \
             events(position INTEGER PRIMARY KEY = the rowid and global position, stream TEXT, \
             version INTEGER, id BLOB, type TEXT, data BLOB, metadata BLOB, recorded_at \
             INTEGER, UNIQUE(stream, version)), snapshots(stream, version, state) WITHOUT \
             ROWID. An append is one transaction: SELECT max(version) for the expected-version \
             check, then one INSERT per event. SQLite has one writer at a time: appends share \
             one connection behind a mutex (waiting in SQLite's busy handler is slower); reads \
             use pooled connections and borrow every column of each event. D = \
             synchronous=FULL, N = synchronous=NORMAL (as the KV peer). SQLite has no commit \
             notification: the subscription reads `position > checkpoint` 512 at a time and, \
             when caught up, sleeps on a condition variable the adapter signals after each \
             commit (what an in-process application would do)."
        }
        _ => "no event-store adapter",
    }
}

/// Opens event store `kind` on the fresh directory `dir`.
pub fn open_events(kind: EngineKind, dir: &Path) -> Res<Box<dyn EventEngine>> {
    std::fs::create_dir_all(dir)?;
    match kind {
        EngineKind::Cairn => Ok(Box::new(cairn_events::CairnEvents::open(dir)?)),
        #[cfg(feature = "peers")]
        EngineKind::Sqlite => Ok(Box::new(sqlite_events::SqliteEvents::open(dir)?)),
        other => Err(format!(
            "engine {} has no event-store adapter in this build",
            other.name()
        )
        .into()),
    }
}

/// Whether suite D has an adapter for `kind`.
pub fn has_doc_adapter(kind: EngineKind) -> bool {
    matches!(kind, EngineKind::Cairn | EngineKind::Sqlite)
}

/// How each document store is set up for modes D and N.
pub fn doc_config(kind: EngineKind) -> &'static str {
    match kind {
        EngineKind::Cairn => {
            "cairndb::document collections over a default Builder (4 KiB pages, 1 GiB \
             cache), opened through a FileStorage wrapper that counts fdatasync calls; \
             documents are the bench's serde structs (`db.collection::<T>()`, CairnDB's binary \
             codec). D = Durability::Immediate (one fdatasync per commit, shared by concurrent \
             committers), N = Durability::None. Lite: `insert` / `insert_many` / `upsert` / \
             `upsert_many` on a collection with a string `_id`. tiedot: integer `_id`, six \
             single-field ascending indexes created on the empty collection (multikey on the \
             arrays); read = `get`; update = `replace`; delete = `delete_id`; lookup = `find` \
             with the filter `{$or: [{nested.nested.int: a, ints: {$ne: b}}, {ints: b, \
             nested.nested.int: {$ne: a}}, {ints: {$elemMatch: {$gte: r, $lte: r+2}}}]}` \
             (index union), built from JSON per query, results counted as raw documents. \
             Schema worker: no collection rename exists, so it creates `foo`, copies it into \
             `bar` and drops `foo`; truncates with delete_many({}); `Database::compact` (whole \
             file; it refuses while read transactions are live, so it is retried)."
        }
        EngineKind::Sqlite => {
            "SQLite (rusqlite 0.41, bundled): journal_mode=WAL, cache_size=1 GiB (as CairnDB's and redb's default caches), prepared \
             statements, documents as JSON text (serde_json) in a column. Lite: ents(id TEXT \
             PRIMARY KEY, doc TEXT) WITHOUT ROWID; upsert = INSERT … ON CONFLICT(id) DO UPDATE. \
             tiedot: docs(id INTEGER PRIMARY KEY, doc TEXT); expression indexes on \
             json_extract(doc, '$.nested.nested.str|int|float'); the arrays strs/ints/floats \
             have no expression index possible (SQLite indexes one value per row), so each \
             gets a side table (doc_id, pos, v) WITHOUT ROWID with an index on v, kept by \
             AFTER INSERT/UPDATE/DELETE triggers through json_each — SQLite does that work \
             itself, in the same transaction. Lookup = one SELECT of ids: the two XOR arms \
             with NOT EXISTS / NOT IN, UNION the range on the ints side table. SQLite has one \
             writer at a time: writes share one connection behind a mutex (its busy handler \
             sleeps for milliseconds), reads use pooled connections. D = synchronous=FULL, \
             N = synchronous=NORMAL (WAL not synced on commit: crash-consistent, not \
             durable; as the KV peer). Schema worker: CREATE TABLE foo, ALTER TABLE … \
             RENAME TO bar, DELETE FROM bar, VACUUM (whole file), DROP TABLE bar."
        }
        _ => "no document-store adapter",
    }
}

/// Why PoloDB is not a peer (printed with the engines).
pub const POLODB_WHY: &str = "polodb_core 5.x (the current release) stores its data in RocksDB \
     through polodb-librocksdb-sys: a C++ build of RocksDB with bindgen (libclang), the same \
     ~25 min build on 2 cores that keeps the `rocksdb` peer behind its own feature. It is not \
     in `--features peers`.";

/// Opens document store `kind` on the fresh directory `dir`.
pub fn open_docs(kind: EngineKind, dir: &Path) -> Res<Box<dyn DocEngine>> {
    std::fs::create_dir_all(dir)?;
    match kind {
        EngineKind::Cairn => Ok(Box::new(cairn_docs::CairnDocs::open(dir)?)),
        #[cfg(feature = "peers")]
        EngineKind::Sqlite => Ok(Box::new(sqlite_docs::SqliteDocs::open(dir)?)),
        other => Err(format!(
            "engine {} has no document-store adapter in this build",
            other.name()
        )
        .into()),
    }
}
