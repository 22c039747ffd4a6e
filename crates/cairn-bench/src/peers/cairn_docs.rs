//! CairnDB's document layer as suite D drives it.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairndb::document::{Collection, IndexOptions};
use cairndb::Database;
use serde_json::json;

use super::cairn_kv::{durability, open_counting_db, synced_dir_bytes};
use crate::data::docs::{self as data, Entity, Lookup, TdDoc};
use crate::engine::{DocEngine, Mode, Res};

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
        let mut e = data::entities(1, 99, 0).remove(0);
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
