//! SQLite through rusqlite (bundled), in WAL mode.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use rusqlite::{params, Connection, OptionalExtension};

use crate::data::{Flat, Touch};
use crate::engine::{dir_bytes, Kv, Mode, Res};

/// A connection and the `synchronous` setting it has (every SQLite adapter
/// keeps its connections so).
pub struct Conn {
    pub conn: Connection,
    mode: Option<Mode>,
}

impl Conn {
    /// A new connection (see [`connect`]), in mode D.
    pub fn open(path: &Path) -> Res<Conn> {
        Ok(Conn {
            conn: connect(path)?,
            mode: Some(Mode::D),
        })
    }

    /// Sets `synchronous` for `mode`: FULL for D, NORMAL for N (the WAL is
    /// not synced on commit: crash-consistent, not durable).
    pub fn set_mode(&mut self, mode: Mode) -> Res<()> {
        if self.mode != Some(mode) {
            self.conn.execute_batch(match mode {
                Mode::D => "PRAGMA synchronous=FULL;",
                Mode::N => "PRAGMA synchronous=NORMAL;",
            })?;
            self.mode = Some(mode);
        }
        Ok(())
    }
}

/// Opens a connection as every SQLite adapter does: WAL, a 1 GiB cache,
/// synchronous=FULL, a 60 s busy timeout.
pub fn connect(path: &Path) -> Res<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(60))?;
    conn.execute_batch(
        "PRAGMA journal_mode=WAL; PRAGMA cache_size=-1048576; PRAGMA synchronous=FULL;",
    )?;
    Ok(conn)
}

/// One connection per concurrent user, kept in a pool (a connection is not
/// `Sync`).
pub struct SqliteKv {
    path: PathBuf,
    dir: PathBuf,
    pool: Mutex<Vec<Conn>>,
}

impl SqliteKv {
    pub fn open(dir: &Path) -> Res<Self> {
        let path = dir.join("bench.sqlite");
        let kv = SqliteKv {
            path,
            dir: dir.to_path_buf(),
            pool: Mutex::new(Vec::new()),
        };
        let c = Conn::open(&kv.path)?;
        c.conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS kv (k BLOB PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID;",
        )?;
        kv.give(c);
        Ok(kv)
    }

    fn take(&self) -> Res<Conn> {
        let c = self.pool.lock().unwrap_or_else(|e| e.into_inner()).pop();
        match c {
            Some(c) => Ok(c),
            None => Conn::open(&self.path),
        }
    }

    fn give(&self, c: Conn) {
        self.pool.lock().unwrap_or_else(|e| e.into_inner()).push(c);
    }

    fn with<T>(&self, f: impl FnOnce(&mut Conn) -> Res<T>) -> Res<T> {
        let mut c = self.take()?;
        let r = f(&mut c);
        self.give(c);
        r
    }
}

impl Kv for SqliteKv {
    fn put_batch(&self, keys: &Flat, vals: &Flat, r: Range<usize>, mode: Mode) -> Res<()> {
        self.with(|c| {
            c.set_mode(mode)?;
            let tx = c.conn.transaction()?;
            {
                let mut st =
                    tx.prepare_cached("INSERT OR REPLACE INTO kv (k, v) VALUES (?1, ?2)")?;
                for i in r {
                    st.execute(params![keys.get(i), vals.get(i)])?;
                }
            }
            tx.commit()?;
            Ok(())
        })
    }

    fn delete_batch(&self, keys: &Flat, r: Range<usize>, mode: Mode) -> Res<u64> {
        self.with(|c| {
            c.set_mode(mode)?;
            let tx = c.conn.transaction()?;
            let mut n = 0;
            {
                let mut st = tx.prepare_cached("DELETE FROM kv WHERE k = ?1")?;
                for i in r {
                    n += st.execute(params![keys.get(i)])? as u64;
                }
            }
            tx.commit()?;
            Ok(n)
        })
    }

    fn get_each(&self, keys: &Flat, r: Range<usize>) -> Res<Touch> {
        self.with(|c| {
            let tx = c.conn.transaction()?;
            let mut touch = Touch::default();
            {
                let mut st = tx.prepare_cached("SELECT v FROM kv WHERE k = ?1")?;
                for i in r {
                    let hit = st
                        .query_row(params![keys.get(i)], |row| {
                            let v = row.get_ref(0)?.as_blob()?;
                            Ok(crate::data::touch(v))
                        })
                        .optional()?;
                    if let Some(sum) = hit {
                        touch.found += 1;
                        touch.sum = touch.sum.wrapping_add(sum);
                    }
                }
            }
            tx.commit()?;
            Ok(touch)
        })
    }

    fn scan(&self) -> Res<Touch> {
        self.with(|c| {
            let tx = c.conn.transaction()?;
            let mut touch = Touch::default();
            {
                let mut st = tx.prepare_cached("SELECT k, v FROM kv ORDER BY k")?;
                let mut rows = st.query([])?;
                while let Some(row) = rows.next()? {
                    touch.add(row.get_ref(0)?.as_blob()?, row.get_ref(1)?.as_blob()?);
                }
            }
            tx.commit()?;
            Ok(touch)
        })
    }

    fn range_reads(&self, starts: &Flat, per: usize) -> Res<Touch> {
        self.with(|c| {
            let tx = c.conn.transaction()?;
            let mut touch = Touch::default();
            {
                let mut st =
                    tx.prepare_cached("SELECT k, v FROM kv WHERE k >= ?1 ORDER BY k LIMIT ?2")?;
                for i in 0..starts.len() {
                    let mut rows = st.query(params![starts.get(i), per as i64])?;
                    while let Some(row) = rows.next()? {
                        touch.add(row.get_ref(0)?.as_blob()?, row.get_ref(1)?.as_blob()?);
                    }
                }
            }
            tx.commit()?;
            Ok(touch)
        })
    }

    fn count(&self) -> Res<u64> {
        self.with(|c| {
            let n: i64 = c
                .conn
                .query_row("SELECT count(*) FROM kv", [], |r| r.get(0))?;
            Ok(n as u64)
        })
    }

    fn compact(&mut self) -> Res<Option<u64>> {
        self.with(|c| {
            c.conn.execute_batch(
                "PRAGMA wal_checkpoint(TRUNCATE); VACUUM; PRAGMA wal_checkpoint(TRUNCATE);",
            )?;
            Ok(())
        })?;
        Ok(Some(self.disk_bytes()))
    }

    fn reader_spec(&self) -> Option<crate::kv::procs::ReaderSpec> {
        Some(crate::kv::procs::ReaderSpec {
            engine: "sqlite",
            path: self.path.clone(),
        })
    }

    fn disk_bytes(&self) -> u64 {
        // The database, its WAL and the shared-memory index.
        dir_bytes(&self.dir)
    }
}
