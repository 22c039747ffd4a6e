//! The document-store interface suite D drives, and CairnDB's
//! implementation.
//!
//! Each method is one operation of the engine's public API as an application
//! calls it: a write is one transaction (a bulk write one transaction for
//! all its documents); documents go in and come out as typed serde structs,
//! so every engine pays its own mapping (CairnDB's binary codec, SQLite's
//! JSON text) inside the timed region.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairndb::document::{Collection, IndexOptions};
use cairndb::{Database, Durability};
use serde_json::json;

use super::data::{Entity, Lookup, TdDoc};
use crate::bench::engine::{open_counting_db, synced_dir_bytes, EngineKind, Mode, Res};

/// The collection (or table) of the LiteDB-shaped entities.
pub const ENTITIES: &str = "entities";
/// The collection of tiedot's documents.
pub const DOCS: &str = "docs";
/// tiedot's six indexed paths (its README says five; its code makes six).
pub const TD_INDEXES: [&str; 6] = [
    "nested.nested.str",
    "nested.nested.int",
    "nested.nested.float",
    "strs",
    "ints",
    "floats",
];

/// One document store under test, on its own fresh directory.
pub trait DocEngine: Send + Sync {
    /// Creates the entities collection, empty (untimed).
    fn lite_prepare(&self) -> Res<()>;
    /// Removes every entity (untimed, between iterations).
    fn lite_clear(&self) -> Res<()>;
    /// Inserts one entity in its own transaction.
    fn lite_insert(&self, e: &Entity, mode: Mode) -> Res<()>;
    /// Inserts every entity in one transaction.
    fn lite_insert_many(&self, es: &[Entity], mode: Mode) -> Res<()>;
    /// Inserts or replaces one entity in its own transaction.
    fn lite_upsert(&self, e: &Entity, mode: Mode) -> Res<()>;
    /// Upserts every entity in one transaction.
    fn lite_upsert_many(&self, es: &[Entity], mode: Mode) -> Res<()>;
    /// The number of entities.
    fn lite_len(&self) -> Res<u64>;
    /// Creates the documents collection with tiedot's six indexes (untimed).
    fn td_prepare(&self) -> Res<()>;
    /// Inserts one document in its own transaction.
    fn td_insert(&self, d: &TdDoc, mode: Mode) -> Res<()>;
    /// Reads and decodes the document with this id.
    fn td_get(&self, id: i64) -> Res<Option<TdDoc>>;
    /// Runs tiedot's lookup query; returns how many documents match.
    fn td_lookup(&self, q: &Lookup) -> Res<u64>;
    /// Replaces the document with `d`'s id by `d`; returns whether it
    /// existed.
    fn td_update(&self, d: &TdDoc, mode: Mode) -> Res<bool>;
    /// Deletes the document with this id; returns whether it existed.
    fn td_delete(&self, id: i64, mode: Mode) -> Res<bool>;
    /// The number of documents.
    fn td_len(&self) -> Res<u64>;
    /// bench2's schema worker: create a collection, rename it (or the
    /// nearest equivalent), truncate it, compact, drop it; returns what it
    /// did and how long each step took.
    fn schema_churn(&self, sample: &TdDoc, mode: Mode) -> Res<String>;
    /// Device flushes so far, where the engine lets us count them.
    fn flushes(&self) -> Option<u64> {
        None
    }
    /// Bytes of every file in the engine's directory.
    fn disk_bytes(&self) -> u64;
}

/// Whether suite D has an adapter for `kind`.
pub fn has_adapter(kind: EngineKind) -> bool {
    matches!(kind, EngineKind::Cairn | EngineKind::Sqlite)
}

/// How each document store is set up for modes D and N.
pub fn config(kind: EngineKind) -> &'static str {
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
pub fn open(kind: EngineKind, dir: &Path) -> Res<Box<dyn DocEngine>> {
    std::fs::create_dir_all(dir)?;
    match kind {
        EngineKind::Cairn => Ok(Box::new(CairnDocs::open(dir)?)),
        #[cfg(feature = "peers")]
        EngineKind::Sqlite => Ok(Box::new(
            crate::bench::peers::sqlite_docs::SqliteDocs::open(dir)?,
        )),
        other => Err(format!(
            "engine {} has no document-store adapter in this build",
            other.name()
        )
        .into()),
    }
}

fn durability(mode: Mode) -> Durability {
    match mode {
        Mode::D => Durability::Immediate,
        Mode::N => Durability::None,
    }
}

/// CairnDB's document layer.
pub struct CairnDocs {
    db: Database,
    dir: PathBuf,
    flushes: Arc<AtomicU64>,
}

impl CairnDocs {
    pub fn open(dir: &Path) -> Res<Self> {
        let flushes = Arc::new(AtomicU64::new(0));
        let db = open_counting_db(&dir.join("docs.cairn"), &flushes)?;
        Ok(CairnDocs {
            db,
            dir: dir.to_path_buf(),
            flushes,
        })
    }

    fn ents(&self, mode: Mode) -> Collection<'_, Entity> {
        self.db
            .collection::<Entity>(ENTITIES)
            .with_durability(durability(mode))
    }

    fn docs(&self, mode: Mode) -> Collection<'_, TdDoc> {
        self.db
            .collection::<TdDoc>(DOCS)
            .with_durability(durability(mode))
    }
}

/// The lookup as a CairnDB filter.
pub fn lookup_filter(q: &Lookup) -> serde_json::Value {
    json!({"$or": [
        {"nested.nested.int": q.a, "ints": {"$ne": q.b}},
        {"ints": q.b, "nested.nested.int": {"$ne": q.a}},
        {"ints": {"$elemMatch": {"$gte": q.r, "$lte": q.r + 2}}},
    ]})
}

fn ms(t: Instant) -> String {
    format!("{:.1} ms", t.elapsed().as_secs_f64() * 1e3)
}

impl DocEngine for CairnDocs {
    fn lite_prepare(&self) -> Res<()> {
        // A collection exists from its first write: write one, remove it.
        let mut e = super::data::entities(1, 99, 0).remove(0);
        e.key = "setup".into();
        let c = self.ents(Mode::N);
        c.insert(&e)?;
        c.delete_id("setup")?;
        Ok(())
    }

    fn lite_clear(&self) -> Res<()> {
        self.ents(Mode::N).delete_many(json!({}))?;
        Ok(())
    }

    fn lite_insert(&self, e: &Entity, mode: Mode) -> Res<()> {
        self.ents(mode).insert(e)?;
        Ok(())
    }

    fn lite_insert_many(&self, es: &[Entity], mode: Mode) -> Res<()> {
        self.ents(mode).insert_many(es)?;
        Ok(())
    }

    fn lite_upsert(&self, e: &Entity, mode: Mode) -> Res<()> {
        self.ents(mode).upsert(e)?;
        Ok(())
    }

    fn lite_upsert_many(&self, es: &[Entity], mode: Mode) -> Res<()> {
        self.ents(mode).upsert_many(es)?;
        Ok(())
    }

    fn lite_len(&self) -> Res<u64> {
        Ok(self.ents(Mode::N).len()?)
    }

    fn td_prepare(&self) -> Res<()> {
        let c = self.docs(Mode::N);
        for p in TD_INDEXES {
            c.create_index(&[(p, 1)], IndexOptions::default())?;
        }
        Ok(())
    }

    fn td_insert(&self, d: &TdDoc, mode: Mode) -> Res<()> {
        self.docs(mode).insert(d)?;
        Ok(())
    }

    fn td_get(&self, id: i64) -> Res<Option<TdDoc>> {
        Ok(self.docs(Mode::N).get(id)?)
    }

    fn td_lookup(&self, q: &Lookup) -> Res<u64> {
        let mut res = self.docs(Mode::N).find(lookup_filter(q))?;
        let mut n = 0;
        while res.next_raw()?.is_some() {
            n += 1;
        }
        Ok(n)
    }

    fn td_update(&self, d: &TdDoc, mode: Mode) -> Res<bool> {
        Ok(self.docs(mode).replace(d)?)
    }

    fn td_delete(&self, id: i64, mode: Mode) -> Res<bool> {
        Ok(self.docs(mode).delete_id(id)?)
    }

    fn td_len(&self) -> Res<u64> {
        Ok(self.docs(Mode::N).len()?)
    }

    fn schema_churn(&self, sample: &TdDoc, mode: Mode) -> Res<String> {
        let d = durability(mode);
        let mut steps = Vec::new();
        let t = Instant::now();
        let first = self.db.collection::<TdDoc>("foo").with_durability(d);
        first.insert(sample)?;
        steps.push(format!("create foo {}", ms(t)));
        // No rename in CairnDB: copy into `bar`, drop `foo`.
        let t = Instant::now();
        let all = first.all()?.collect::<Result<Vec<TdDoc>, _>>()?;
        let bar = self.db.collection::<TdDoc>("bar").with_durability(d);
        bar.insert_many(&all)?;
        first.drop()?;
        steps.push(format!(
            "rename (no rename: copy foo → bar, drop foo) {}",
            ms(t)
        ));
        let t = Instant::now();
        bar.delete_many(json!({}))?;
        steps.push(format!("truncate bar {}", ms(t)));
        let t = Instant::now();
        let mut tries = 0;
        let compacted = loop {
            tries += 1;
            match self.db.compact() {
                Ok(r) => break Some(r),
                Err(cairndb::CoreError::ReadersActive(_)) if tries < 500 => {
                    std::thread::sleep(Duration::from_millis(2));
                }
                Err(cairndb::CoreError::ReadersActive(n)) => {
                    steps.push(format!(
                        "compact: not run — {n} read transaction(s) live on each of {tries} \
                         tries over {} (Database::compact needs no live reader)",
                        ms(t)
                    ));
                    break None;
                }
                Err(e) => return Err(e.into()),
            }
        };
        if let Some(r) = compacted {
            steps.push(format!(
                "compact (whole file, try {tries}) {:.1} → {:.1} MiB {}",
                r.before_bytes as f64 / (1 << 20) as f64,
                r.after_bytes as f64 / (1 << 20) as f64,
                ms(t)
            ));
        }
        let t = Instant::now();
        bar.drop()?;
        steps.push(format!("drop bar {}", ms(t)));
        Ok(steps.join("; "))
    }

    fn flushes(&self) -> Option<u64> {
        Some(self.flushes.load(Ordering::Relaxed))
    }

    fn disk_bytes(&self) -> u64 {
        synced_dir_bytes(&self.db, &self.dir)
    }
}
