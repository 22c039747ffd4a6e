//! SQLite as an event store: one events table whose rowid is the global
//! position, UNIQUE(stream, version), WAL (suite E).

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cairndb::events::EventData;
use rusqlite::{params, Connection, OptionalExtension, Transaction};

use super::sqlite_kv::{connect, Conn};
use crate::engine::{dir_bytes, Delivered, EventEngine, Mode, Res};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS events (
    position INTEGER PRIMARY KEY,
    stream TEXT NOT NULL,
    version INTEGER NOT NULL,
    id BLOB NOT NULL,
    type TEXT NOT NULL,
    data BLOB NOT NULL,
    metadata BLOB NOT NULL,
    recorded_at INTEGER NOT NULL,
    UNIQUE (stream, version)
);
CREATE TABLE IF NOT EXISTS snapshots (
    stream TEXT NOT NULL,
    version INTEGER NOT NULL,
    state BLOB NOT NULL,
    PRIMARY KEY (stream, version)
) WITHOUT ROWID;
";

pub struct SqliteEvents {
    path: PathBuf,
    dir: PathBuf,
    writer: Mutex<Conn>,
    readers: Mutex<Vec<Connection>>,
    /// Commits so far, signalled to waiting subscribers.
    commits: Mutex<u64>,
    committed: Condvar,
}

fn now_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

/// One append inside `tx`: the expected-version check, then the inserts.
fn append_in(
    tx: &Transaction<'_>,
    stream: &str,
    expected: Option<u64>,
    events: &[EventData],
) -> Res<()> {
    let current: Option<i64> = tx
        .prepare_cached("SELECT max(version) FROM events WHERE stream = ?1")?
        .query_row(params![stream], |r| r.get(0))?;
    let current = current.map(|v| v as u64);
    if current != expected {
        return Err(format!(
            "wrong expected version on {stream}: expected {expected:?}, actual {current:?}"
        )
        .into());
    }
    let first = expected.map_or(0, |v| v + 1);
    let mut st = tx.prepare_cached(
        "INSERT INTO events (stream, version, id, type, data, metadata, recorded_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?;
    let at = now_micros();
    for (version, e) in (first..).zip(events) {
        st.execute(params![
            stream,
            version as i64,
            &e.id.as_bytes()[..],
            e.event_type,
            e.data,
            e.metadata,
            at
        ])?;
    }
    Ok(())
}

impl SqliteEvents {
    pub fn open(dir: &Path) -> Res<Self> {
        let path = dir.join("events.sqlite");
        let writer = Conn::open(&path)?;
        writer.conn.execute_batch(SCHEMA)?;
        Ok(SqliteEvents {
            path,
            dir: dir.to_path_buf(),
            writer: Mutex::new(writer),
            readers: Mutex::new(Vec::new()),
            commits: Mutex::new(0),
            committed: Condvar::new(),
        })
    }

    fn write<T>(&self, mode: Mode, f: impl FnOnce(&Transaction<'_>) -> Res<T>) -> Res<T> {
        let mut w = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        w.set_mode(mode)?;
        let tx = w.conn.transaction()?;
        let out = f(&tx)?;
        tx.commit()?;
        drop(w);
        let mut n = self.commits.lock().unwrap_or_else(|e| e.into_inner());
        *n += 1;
        self.committed.notify_all();
        Ok(out)
    }

    fn read<T>(&self, f: impl FnOnce(&mut Connection) -> Res<T>) -> Res<T> {
        let c = self.readers.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let mut c = match c {
            Some(c) => c,
            None => connect(&self.path)?,
        };
        let r = f(&mut c);
        self.readers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(c);
        r
    }
}

/// Reads every column of an events row the way an application materializes
/// an event, handing (version, data) on; returns a checksum of the rest.
fn stream_rows(
    rows: &mut rusqlite::Rows<'_>,
    f: &mut dyn FnMut(u64, &[u8]),
    n: &mut u64,
) -> Res<u64> {
    let mut sum = 0u64;
    while let Some(row) = rows.next()? {
        let version: i64 = row.get(0)?;
        let position: i64 = row.get(1)?;
        let id = row.get_ref(2)?.as_blob()?;
        let ty = row.get_ref(3)?.as_str()?;
        let meta = row.get_ref(5)?.as_blob()?;
        sum = sum
            .wrapping_add(position as u64)
            .wrapping_add((id.len() + ty.len() + meta.len()) as u64);
        f(version as u64, row.get_ref(4)?.as_blob()?);
        *n += 1;
    }
    Ok(sum)
}

impl EventEngine for SqliteEvents {
    fn append(
        &self,
        stream: &str,
        expected: Option<u64>,
        events: &[EventData],
        mode: Mode,
    ) -> Res<()> {
        self.write(mode, |tx| append_in(tx, stream, expected, events))
    }

    fn append_many(&self, appends: &[(&str, Option<u64>, &[EventData])], mode: Mode) -> Res<()> {
        self.write(mode, |tx| {
            for (stream, expected, events) in appends {
                append_in(tx, stream, *expected, events)?;
            }
            Ok(())
        })
    }

    fn read_stream(&self, stream: &str, f: &mut dyn FnMut(u64, &[u8])) -> Res<u64> {
        self.read(|c| {
            let mut st = c.prepare_cached(
                "SELECT version, position, id, type, data, metadata FROM events \
                 WHERE stream = ?1 ORDER BY version",
            )?;
            let mut rows = st.query(params![stream])?;
            let mut n = 0;
            std::hint::black_box(stream_rows(&mut rows, f, &mut n)?);
            Ok(n)
        })
    }

    fn read_last(&self, stream: &str, n: usize, f: &mut dyn FnMut(u64, &[u8])) -> Res<u64> {
        self.read(|c| {
            let mut st = c.prepare_cached(
                "SELECT version, position, id, type, data, metadata FROM events \
                 WHERE stream = ?1 ORDER BY version DESC LIMIT ?2",
            )?;
            let mut rows = st.query(params![stream, n as i64])?;
            let mut got = 0;
            std::hint::black_box(stream_rows(&mut rows, f, &mut got)?);
            Ok(got)
        })
    }

    fn save_snapshot(&self, stream: &str, version: u64, state: &[u8]) -> Res<()> {
        self.write(Mode::N, |tx| {
            tx.prepare_cached(
                "INSERT OR REPLACE INTO snapshots (stream, version, state) VALUES (?1, ?2, ?3)",
            )?
            .execute(params![stream, version as i64, state])?;
            Ok(())
        })
    }

    fn load(
        &self,
        stream: &str,
        snap: &mut dyn FnMut(u64, &[u8]),
        f: &mut dyn FnMut(u64, &[u8]),
    ) -> Res<u64> {
        self.read(|c| {
            let tx = c.transaction()?;
            let mut n = 0;
            {
                let mut st = tx.prepare_cached(
                    "SELECT version, state FROM snapshots WHERE stream = ?1 \
                     ORDER BY version DESC LIMIT 1",
                )?;
                let from = st
                    .query_row(params![stream], |r| {
                        let v: i64 = r.get(0)?;
                        snap(v as u64, r.get_ref(1)?.as_blob()?);
                        Ok(v + 1)
                    })
                    .optional()?
                    .unwrap_or(0);
                let mut st = tx.prepare_cached(
                    "SELECT version, position, id, type, data, metadata FROM events \
                     WHERE stream = ?1 AND version >= ?2 ORDER BY version",
                )?;
                let mut rows = st.query(params![stream, from])?;
                std::hint::black_box(stream_rows(&mut rows, f, &mut n)?);
            }
            tx.commit()?;
            Ok(n)
        })
    }

    fn subscribe(
        &self,
        from: u64,
        stop: &AtomicBool,
        f: &mut dyn FnMut(Delivered<'_>) -> ControlFlow<()>,
    ) -> Res<()> {
        self.read(|c| {
            // Rowids start at 1: position p is rowid p + 1.
            let mut next = from;
            while !stop.load(Ordering::Acquire) {
                let seen = *self.commits.lock().unwrap_or_else(|e| e.into_inner());
                let mut got = 0;
                {
                    let mut st = c.prepare_cached(
                        "SELECT position, stream, version, data FROM events \
                         WHERE position > ?1 ORDER BY position LIMIT 512",
                    )?;
                    let mut rows = st.query(params![next as i64])?;
                    while let Some(row) = rows.next()? {
                        let position = row.get::<_, i64>(0)? as u64 - 1;
                        let d = Delivered {
                            position,
                            stream: row.get_ref(1)?.as_str()?,
                            version: row.get::<_, i64>(2)? as u64,
                            data: row.get_ref(3)?.as_blob()?,
                        };
                        next = position + 1;
                        got += 1;
                        if f(d).is_break() {
                            return Ok(());
                        }
                    }
                }
                if got == 0 {
                    let n = self.commits.lock().unwrap_or_else(|e| e.into_inner());
                    if *n == seen {
                        let _ = self
                            .committed
                            .wait_timeout(n, Duration::from_millis(50))
                            .unwrap_or_else(|e| e.into_inner());
                    }
                }
            }
            Ok(())
        })
    }

    fn disk_bytes(&self) -> u64 {
        dir_bytes(&self.dir)
    }
}
