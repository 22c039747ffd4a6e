//! SQLite as a document store (suite D): JSON text in a column, JSON1
//! expression indexes for the scalar paths, and a side table per array
//! path (SQLite indexes one value per row, so a multikey index is a table of
//! (doc_id, pos, v) with an index on v), kept by triggers through
//! `json_each` so that SQLite itself maintains them in the writing
//! transaction.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

use rusqlite::{params, Connection, Transaction, TransactionBehavior};

use super::sqlite_kv::{connect, Conn};
use crate::data::docs::{Entity, Lookup, TdDoc};
use crate::engine::{dir_bytes, DocEngine, Mode, Res};

const LITE_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS ents (id TEXT PRIMARY KEY, doc TEXT NOT NULL) WITHOUT ROWID;
";

const TD_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS docs (id INTEGER PRIMARY KEY, doc TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS docs_str ON docs (json_extract(doc, '$.nested.nested.str'));
CREATE INDEX IF NOT EXISTS docs_int ON docs (json_extract(doc, '$.nested.nested.int'));
CREATE INDEX IF NOT EXISTS docs_float ON docs (json_extract(doc, '$.nested.nested.float'));
CREATE TABLE IF NOT EXISTS docs_strs (doc_id INTEGER NOT NULL, pos INTEGER NOT NULL, v,
    PRIMARY KEY (doc_id, pos)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS docs_strs_v ON docs_strs (v);
CREATE TABLE IF NOT EXISTS docs_ints (doc_id INTEGER NOT NULL, pos INTEGER NOT NULL, v,
    PRIMARY KEY (doc_id, pos)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS docs_ints_v ON docs_ints (v);
CREATE TABLE IF NOT EXISTS docs_floats (doc_id INTEGER NOT NULL, pos INTEGER NOT NULL, v,
    PRIMARY KEY (doc_id, pos)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS docs_floats_v ON docs_floats (v);
CREATE TRIGGER IF NOT EXISTS docs_ai AFTER INSERT ON docs BEGIN
    INSERT INTO docs_strs SELECT NEW.id, key, value FROM json_each(NEW.doc, '$.strs');
    INSERT INTO docs_ints SELECT NEW.id, key, value FROM json_each(NEW.doc, '$.ints');
    INSERT INTO docs_floats SELECT NEW.id, key, value FROM json_each(NEW.doc, '$.floats');
END;
CREATE TRIGGER IF NOT EXISTS docs_ad AFTER DELETE ON docs BEGIN
    DELETE FROM docs_strs WHERE doc_id = OLD.id;
    DELETE FROM docs_ints WHERE doc_id = OLD.id;
    DELETE FROM docs_floats WHERE doc_id = OLD.id;
END;
CREATE TRIGGER IF NOT EXISTS docs_au AFTER UPDATE OF doc ON docs BEGIN
    DELETE FROM docs_strs WHERE doc_id = OLD.id;
    DELETE FROM docs_ints WHERE doc_id = OLD.id;
    DELETE FROM docs_floats WHERE doc_id = OLD.id;
    INSERT INTO docs_strs SELECT NEW.id, key, value FROM json_each(NEW.doc, '$.strs');
    INSERT INTO docs_ints SELECT NEW.id, key, value FROM json_each(NEW.doc, '$.ints');
    INSERT INTO docs_floats SELECT NEW.id, key, value FROM json_each(NEW.doc, '$.floats');
END;
";

/// tiedot's lookup: (int = a XOR ints ∋ b) ∪ ints ∩ [r, r + 2] ≠ ∅.
const LOOKUP: &str = "
SELECT id FROM docs WHERE json_extract(doc, '$.nested.nested.int') = ?1
    AND NOT EXISTS (SELECT 1 FROM docs_ints WHERE doc_id = docs.id AND v = ?2)
UNION
SELECT doc_id FROM docs_ints WHERE v = ?2
    AND doc_id NOT IN (SELECT id FROM docs WHERE json_extract(doc, '$.nested.nested.int') = ?1)
UNION
SELECT doc_id FROM docs_ints WHERE v BETWEEN ?3 AND ?4
";

/// One writer connection behind a mutex, pooled reader connections.
pub struct SqliteDocs {
    path: PathBuf,
    dir: PathBuf,
    writer: Mutex<Conn>,
    readers: Mutex<Vec<Connection>>,
}

impl SqliteDocs {
    pub fn open(dir: &Path) -> Res<Self> {
        let path = dir.join("docs.sqlite");
        let writer = Conn::open(&path)?;
        Ok(SqliteDocs {
            path,
            dir: dir.to_path_buf(),
            writer: Mutex::new(writer),
            readers: Mutex::new(Vec::new()),
        })
    }

    /// Runs `f` in one write transaction committed in `mode`.
    fn write<T>(&self, mode: Mode, f: impl FnOnce(&Transaction<'_>) -> Res<T>) -> Res<T> {
        let mut w = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        w.set_mode(mode)?;
        let tx = w
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let out = f(&tx)?;
        tx.commit()?;
        Ok(out)
    }

    /// Runs `f` on the writer connection outside a transaction (DDL,
    /// VACUUM).
    fn with_writer<T>(&self, f: impl FnOnce(&Connection) -> Res<T>) -> Res<T> {
        let w = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        f(&w.conn)
    }

    fn read<T>(&self, f: impl FnOnce(&Connection) -> Res<T>) -> Res<T> {
        let c = self.readers.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let c = match c {
            Some(c) => c,
            None => connect(&self.path)?,
        };
        let r = f(&c);
        self.readers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(c);
        r
    }
}

const INSERT_ENT: &str = "INSERT INTO ents (id, doc) VALUES (?1, ?2)";
const UPSERT_ENT: &str = "INSERT INTO ents (id, doc) VALUES (?1, ?2) \
     ON CONFLICT (id) DO UPDATE SET doc = excluded.doc";

/// The JSON of each entity (serialized before the writer lock, as CairnDB
/// encodes before its transaction begins).
fn json_all(es: &[Entity]) -> Res<Vec<String>> {
    Ok(es
        .iter()
        .map(serde_json::to_string)
        .collect::<Result<Vec<_>, _>>()?)
}

impl DocEngine for SqliteDocs {
    fn lite_prepare(&self) -> Res<()> {
        self.with_writer(|c| Ok(c.execute_batch(LITE_SCHEMA)?))
    }

    fn lite_clear(&self) -> Res<()> {
        self.write(Mode::N, |tx| {
            tx.execute("DELETE FROM ents", [])?;
            Ok(())
        })
    }

    fn lite_insert(&self, e: &Entity, mode: Mode) -> Res<()> {
        let doc = serde_json::to_string(e)?;
        self.write(mode, |tx| {
            tx.prepare_cached(INSERT_ENT)?
                .execute(params![e.key, doc])?;
            Ok(())
        })
    }

    fn lite_insert_many(&self, es: &[Entity], mode: Mode) -> Res<()> {
        let docs = json_all(es)?;
        self.write(mode, |tx| {
            let mut st = tx.prepare_cached(INSERT_ENT)?;
            for (e, doc) in es.iter().zip(&docs) {
                st.execute(params![e.key, doc])?;
            }
            Ok(())
        })
    }

    fn lite_upsert(&self, e: &Entity, mode: Mode) -> Res<()> {
        let doc = serde_json::to_string(e)?;
        self.write(mode, |tx| {
            tx.prepare_cached(UPSERT_ENT)?
                .execute(params![e.key, doc])?;
            Ok(())
        })
    }

    fn lite_upsert_many(&self, es: &[Entity], mode: Mode) -> Res<()> {
        let docs = json_all(es)?;
        self.write(mode, |tx| {
            let mut st = tx.prepare_cached(UPSERT_ENT)?;
            for (e, doc) in es.iter().zip(&docs) {
                st.execute(params![e.key, doc])?;
            }
            Ok(())
        })
    }

    fn lite_len(&self) -> Res<u64> {
        self.read(|c| {
            let n: i64 = c
                .prepare_cached("SELECT count(*) FROM ents")?
                .query_row([], |r| r.get(0))?;
            Ok(n as u64)
        })
    }

    fn td_prepare(&self) -> Res<()> {
        self.with_writer(|c| Ok(c.execute_batch(TD_SCHEMA)?))
    }

    fn td_insert(&self, d: &TdDoc, mode: Mode) -> Res<()> {
        let doc = serde_json::to_string(d)?;
        self.write(mode, |tx| {
            tx.prepare_cached("INSERT INTO docs (id, doc) VALUES (?1, ?2)")?
                .execute(params![d.id, doc])?;
            Ok(())
        })
    }

    fn td_get(&self, id: i64) -> Res<Option<TdDoc>> {
        self.read(|c| {
            let mut st = c.prepare_cached("SELECT doc FROM docs WHERE id = ?1")?;
            let mut rows = st.query(params![id])?;
            match rows.next()? {
                Some(row) => Ok(Some(serde_json::from_str(row.get_ref(0)?.as_str()?)?)),
                None => Ok(None),
            }
        })
    }

    fn td_lookup(&self, q: &Lookup) -> Res<u64> {
        self.read(|c| {
            let mut st = c.prepare_cached(LOOKUP)?;
            let mut rows = st.query(params![q.a, q.b, q.r, q.r + 2])?;
            let mut n = 0;
            while let Some(row) = rows.next()? {
                std::hint::black_box(row.get::<_, i64>(0)?);
                n += 1;
            }
            Ok(n)
        })
    }

    fn td_update(&self, d: &TdDoc, mode: Mode) -> Res<bool> {
        let doc = serde_json::to_string(d)?;
        self.write(mode, |tx| {
            let n = tx
                .prepare_cached("UPDATE docs SET doc = ?2 WHERE id = ?1")?
                .execute(params![d.id, doc])?;
            Ok(n > 0)
        })
    }

    fn td_delete(&self, id: i64, mode: Mode) -> Res<bool> {
        self.write(mode, |tx| {
            let n = tx
                .prepare_cached("DELETE FROM docs WHERE id = ?1")?
                .execute(params![id])?;
            Ok(n > 0)
        })
    }

    fn td_len(&self) -> Res<u64> {
        self.read(|c| {
            let n: i64 = c
                .prepare_cached("SELECT count(*) FROM docs")?
                .query_row([], |r| r.get(0))?;
            Ok(n as u64)
        })
    }

    fn schema_churn(&self, sample: &TdDoc, mode: Mode) -> Res<String> {
        let ms = |t: Instant| format!("{:.1} ms", t.elapsed().as_secs_f64() * 1e3);
        let doc = serde_json::to_string(sample)?;
        let mut steps = Vec::new();
        let t = Instant::now();
        self.write(mode, |tx| {
            tx.execute_batch(
                "CREATE TABLE IF NOT EXISTS foo (id INTEGER PRIMARY KEY, doc TEXT NOT NULL)",
            )?;
            tx.execute(
                "INSERT INTO foo (id, doc) VALUES (?1, ?2)",
                params![sample.id, doc],
            )?;
            Ok(())
        })?;
        steps.push(format!("create foo {}", ms(t)));
        let t = Instant::now();
        self.write(mode, |tx| {
            tx.execute_batch("ALTER TABLE foo RENAME TO bar")?;
            Ok(())
        })?;
        steps.push(format!("rename foo → bar {}", ms(t)));
        let t = Instant::now();
        self.write(mode, |tx| {
            tx.execute("DELETE FROM bar", [])?;
            Ok(())
        })?;
        steps.push(format!("truncate bar {}", ms(t)));
        let t = Instant::now();
        let before = dir_bytes(&self.dir);
        self.with_writer(|c| Ok(c.execute_batch("VACUUM")?))?;
        steps.push(format!(
            "compact (VACUUM, whole file) {:.1} → {:.1} MiB {}",
            before as f64 / (1 << 20) as f64,
            dir_bytes(&self.dir) as f64 / (1 << 20) as f64,
            ms(t)
        ));
        let t = Instant::now();
        self.write(mode, |tx| {
            tx.execute_batch("DROP TABLE bar")?;
            Ok(())
        })?;
        steps.push(format!("drop bar {}", ms(t)));
        Ok(steps.join("; "))
    }

    fn disk_bytes(&self) -> u64 {
        dir_bytes(&self.dir)
    }
}
