//! The event-store interface suite E drives, and CairnDB's implementation.
//!
//! Every method is one transaction of the engine (or one subscription), so
//! dynamic dispatch sits outside the per-event loops except for the callback
//! that decodes each event, which every engine pays alike.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cairndb::events::{
    Direction, EventData, EventFilter, EventStore, EventWriter, ExpectedVersion, ReadFrom,
    SubscriptionMessage,
};
use cairndb::{Database, Durability};

use crate::bench::engine::{open_counting_db, synced_dir_bytes, EngineKind, Mode, Res};

/// An event as a subscriber receives it.
#[derive(Debug, Clone, Copy)]
pub struct Delivered<'a> {
    /// Its global position, from 0.
    pub position: u64,
    pub stream: &'a str,
    pub version: u64,
    pub data: &'a [u8],
}

/// One event store under test, on its own fresh directory.
pub trait EventEngine: Send + Sync {
    /// Appends `events` to `stream` in one commit, expecting the stream's
    /// last version to be `expected` (`None`: the stream must not exist).
    fn append(
        &self,
        stream: &str,
        expected: Option<u64>,
        events: &[EventData],
        mode: Mode,
    ) -> Res<()>;
    /// Several appends (stream, expected, events) in one commit.
    fn append_many(&self, appends: &[(&str, Option<u64>, &[EventData])], mode: Mode) -> Res<()>;
    /// Reads every event of `stream` oldest first, handing (version,
    /// payload) to `f`; returns how many.
    fn read_stream(&self, stream: &str, f: &mut dyn FnMut(u64, &[u8])) -> Res<u64>;
    /// Reads the newest `n` events of `stream`, newest first.
    fn read_last(&self, stream: &str, n: usize, f: &mut dyn FnMut(u64, &[u8])) -> Res<u64>;
    /// Stores the state of `stream` at `version`.
    fn save_snapshot(&self, stream: &str, version: u64, state: &[u8]) -> Res<()>;
    /// Loads the newest snapshot of `stream` (to `snap`) and the events
    /// after it (to `f`), in one read transaction; returns the events.
    fn load(
        &self,
        stream: &str,
        snap: &mut dyn FnMut(u64, &[u8]),
        f: &mut dyn FnMut(u64, &[u8]),
    ) -> Res<u64>;
    /// Subscribes to the global log from position `from`: history, then
    /// live commits, until `f` breaks or `stop` is set.
    fn subscribe(
        &self,
        from: u64,
        stop: &AtomicBool,
        f: &mut dyn FnMut(Delivered<'_>) -> ControlFlow<()>,
    ) -> Res<()>;
    /// Device flushes so far, where the engine lets us count them.
    fn flushes(&self) -> Option<u64> {
        None
    }
    /// Bytes of every file in the engine's directory.
    fn disk_bytes(&self) -> u64;
}

/// Whether suite E has an adapter for `kind`.
pub fn has_adapter(kind: EngineKind) -> bool {
    matches!(kind, EngineKind::Cairn | EngineKind::Sqlite)
}

/// How each event store is set up for modes D and N.
pub fn config(kind: EngineKind) -> &'static str {
    match kind {
        EngineKind::Cairn => {
            "cairndb::events::EventStore over a default Builder (4 KiB pages, 1 GiB cache), \
             opened through a FileStorage wrapper that counts fdatasync calls; an append is \
             `EventStore::append` with an exact expected version (NoStream for a new stream), \
             one write transaction; loading batches use one EventWriter in one transaction. \
             D = Durability::Immediate, N = Durability::None. Reads are `read_stream` / \
             `load`, which return owned RecordedEvents (stream name, type, id, payload, \
             metadata, time); the subscription is `subscribe_all`, woken by the commit \
             notification."
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
pub fn open(kind: EngineKind, dir: &Path) -> Res<Box<dyn EventEngine>> {
    std::fs::create_dir_all(dir)?;
    match kind {
        EngineKind::Cairn => Ok(Box::new(CairnEvents::open(dir)?)),
        #[cfg(feature = "peers")]
        EngineKind::Sqlite => Ok(Box::new(
            crate::bench::peers::sqlite_events::SqliteEvents::open(dir)?,
        )),
        other => Err(format!(
            "engine {} has no event-store adapter in this build",
            other.name()
        )
        .into()),
    }
}

/// CairnDB's event store.
pub struct CairnEvents {
    db: Database,
    dir: PathBuf,
    flushes: Arc<AtomicU64>,
}

fn durability(mode: Mode) -> Durability {
    match mode {
        Mode::D => Durability::Immediate,
        Mode::N => Durability::None,
    }
}

fn expectation(expected: Option<u64>) -> ExpectedVersion {
    match expected {
        None => ExpectedVersion::NoStream,
        Some(v) => ExpectedVersion::Exact(v),
    }
}

impl CairnEvents {
    pub fn open(dir: &Path) -> Res<Self> {
        let flushes = Arc::new(AtomicU64::new(0));
        let db = open_counting_db(&dir.join("events.cairn"), &flushes)?;
        Ok(CairnEvents {
            db,
            dir: dir.to_path_buf(),
            flushes,
        })
    }

    fn store(&self, mode: Mode) -> EventStore<'_> {
        EventStore::new(&self.db).with_durability(durability(mode))
    }
}

impl EventEngine for CairnEvents {
    fn append(
        &self,
        stream: &str,
        expected: Option<u64>,
        events: &[EventData],
        mode: Mode,
    ) -> Res<()> {
        let r = self
            .store(mode)
            .append(stream, expectation(expected), events)?;
        if r.idempotent {
            return Err(format!("append to {stream} wrote nothing (idempotent repeat)").into());
        }
        Ok(())
    }

    fn append_many(&self, appends: &[(&str, Option<u64>, &[EventData])], mode: Mode) -> Res<()> {
        let txn = self.db.begin_write()?;
        txn.set_durability(durability(mode));
        {
            let mut w = EventWriter::new(&txn);
            for (stream, expected, events) in appends {
                w.append(stream, expectation(*expected), events)?;
            }
        }
        txn.commit()?;
        Ok(())
    }

    fn read_stream(&self, stream: &str, f: &mut dyn FnMut(u64, &[u8])) -> Res<u64> {
        let events = self.store(Mode::N).read_stream(
            stream,
            ReadFrom::Start,
            Direction::Forward,
            usize::MAX,
        )?;
        for e in &events {
            f(e.version, &e.data);
        }
        Ok(events.len() as u64)
    }

    fn read_last(&self, stream: &str, n: usize, f: &mut dyn FnMut(u64, &[u8])) -> Res<u64> {
        let events =
            self.store(Mode::N)
                .read_stream(stream, ReadFrom::End, Direction::Backward, n)?;
        for e in &events {
            f(e.version, &e.data);
        }
        Ok(events.len() as u64)
    }

    fn save_snapshot(&self, stream: &str, version: u64, state: &[u8]) -> Res<()> {
        self.store(Mode::N).save_snapshot(stream, version, state)?;
        Ok(())
    }

    fn load(
        &self,
        stream: &str,
        snap: &mut dyn FnMut(u64, &[u8]),
        f: &mut dyn FnMut(u64, &[u8]),
    ) -> Res<u64> {
        let loaded = self.store(Mode::N).load(stream, None)?;
        if let Some((v, state)) = &loaded.snapshot {
            snap(*v, state);
        }
        for e in &loaded.events {
            f(e.version, &e.data);
        }
        Ok(loaded.events.len() as u64)
    }

    fn subscribe(
        &self,
        from: u64,
        stop: &AtomicBool,
        f: &mut dyn FnMut(Delivered<'_>) -> ControlFlow<()>,
    ) -> Res<()> {
        let store = EventStore::new(&self.db);
        let mut sub = store.subscribe_all(from, EventFilter::all());
        while !stop.load(Ordering::Acquire) {
            if let Some(SubscriptionMessage::Event(e)) =
                sub.next_timeout(Duration::from_millis(50))?
            {
                let d = Delivered {
                    position: e.position,
                    stream: &e.stream,
                    version: e.version,
                    data: &e.data,
                };
                if f(d).is_break() {
                    break;
                }
            }
        }
        Ok(())
    }

    fn flushes(&self) -> Option<u64> {
        Some(self.flushes.load(Ordering::Relaxed))
    }

    fn disk_bytes(&self) -> u64 {
        synced_dir_bytes(&self.db, &self.dir)
    }
}
