//! CairnDB's event store as suite E drives it.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cairndb::events::{
    Direction, EventData, EventFilter, EventStore, EventWriter, ExpectedVersion, Position,
    ReadFrom, StreamVersion, SubscriptionMessage,
};
use cairndb::Database;

use super::cairn_kv::{durability, open_counting_db, synced_dir_bytes};
use crate::engine::{Delivered, EventEngine, Mode, Res};

/// CairnDB's event store.
pub struct CairnEvents {
    db: Database,
    dir: PathBuf,
    flushes: Arc<AtomicU64>,
}

fn expectation(expected: Option<u64>) -> ExpectedVersion {
    match expected {
        None => ExpectedVersion::NoStream,
        Some(v) => ExpectedVersion::Exact(StreamVersion(v)),
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

    // Reads hand the events on read in place (`EventRef`), as SQLite's
    // rows are (`get_ref`).
    fn read_stream(&self, stream: &str, f: &mut dyn FnMut(u64, &[u8])) -> Res<u64> {
        let r = self.db.begin_read()?;
        let mut n = 0;
        r.events().read_stream_with(
            stream,
            ReadFrom::Start,
            Direction::Forward,
            usize::MAX,
            |e| {
                f(e.version.0, e.data);
                n += 1;
                ControlFlow::Continue(())
            },
        )?;
        Ok(n)
    }

    fn read_last(&self, stream: &str, n: usize, f: &mut dyn FnMut(u64, &[u8])) -> Res<u64> {
        let r = self.db.begin_read()?;
        let mut got = 0;
        r.events()
            .read_stream_with(stream, ReadFrom::End, Direction::Backward, n, |e| {
                f(e.version.0, e.data);
                got += 1;
                ControlFlow::Continue(())
            })?;
        Ok(got)
    }

    fn save_snapshot(&self, stream: &str, version: u64, state: &[u8]) -> Res<()> {
        self.store(Mode::N)
            .save_snapshot(stream, StreamVersion(version), state)?;
        Ok(())
    }

    fn load(
        &self,
        stream: &str,
        snap: &mut dyn FnMut(u64, &[u8]),
        f: &mut dyn FnMut(u64, &[u8]),
    ) -> Res<u64> {
        let r = self.db.begin_read()?;
        Ok(r.events().load_with(
            stream,
            None,
            |s| {
                if let Some((v, state)) = s {
                    snap(v.0, state);
                }
                0
            },
            |n, e| {
                f(e.version.0, e.data);
                *n += 1;
                ControlFlow::Continue(())
            },
        )?)
    }

    fn subscribe(
        &self,
        from: u64,
        stop: &AtomicBool,
        f: &mut dyn FnMut(Delivered<'_>) -> ControlFlow<()>,
    ) -> Res<()> {
        let store = EventStore::new(&self.db);
        let mut sub = store.subscribe_all(Position(from), EventFilter::all());
        // Events read in place, as SQLite's rows are (`get_ref`).
        while !stop.load(Ordering::Acquire) {
            let flow = sub.poll_borrowed(Duration::from_millis(50), |m| match m {
                SubscriptionMessage::Event(e) => f(Delivered {
                    position: e.position.0,
                    stream: e.stream,
                    version: e.version.0,
                    data: e.data,
                }),
                SubscriptionMessage::CaughtUp { .. } if stop.load(Ordering::Acquire) => {
                    ControlFlow::Break(())
                }
                SubscriptionMessage::CaughtUp { .. } => ControlFlow::Continue(()),
            })?;
            if flow.is_break() {
                break;
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
