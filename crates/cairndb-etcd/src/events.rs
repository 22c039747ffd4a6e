//! The event store on a cluster: the embedded engine's event layer — the
//! same code, generic over the storage seam ([`cairndb::seam`]) — run in
//! this crate's transactions.
//!
//! Each call is one transaction: reads a snapshot at one revision, writes
//! one optimistic transaction committed as one etcd `Txn`, run again from
//! the start while it conflicts ([`EtcdDatabase::run_in_transaction`]). An
//! append reads the global log's last position and the stream's record;
//! the commit compares the log's version key and the record's mod
//! revision, so of two appends that read the same end of the log only the
//! first commits and the other runs again on the new state: positions are
//! dense and in commit order, and an expected version is checked against
//! the state the append commits on (ARCHITECTURE.md, "The storage seam").

use cairndb::events::{
    AppendResult, Direction, EventData, EventFilter, EventSnapshot, EventWriter, ExpectedVersion,
    Loaded, Position, ReadFrom, RecordedEvent, StreamInfo, StreamMetadata, StreamVersion,
};

use crate::db::EtcdDatabase;
use crate::error::Result;
use crate::txn::{ReadTransaction, WriteTransaction};

type EventResult<T> = cairndb::events::EventResult<T>;

/// The event streams of a database on a cluster: the embedded
/// [`cairndb::events::EventStore`]'s appends and reads, each call its own
/// transaction. Errors of the event layer are [`crate::Error::Events`];
/// the cluster's are this crate's own (`Unavailable`, `CommitIndeterminate`,
/// `TooLarge`, …). An append whose answer was lost
/// (`CommitIndeterminate`) may be retried with the same event ids: the
/// retry is acknowledged without writing them twice (idempotent appends,
/// `cairndb::events`).
///
/// Not yet on a cluster: subscriptions (they will follow etcd's `Watch`).
#[derive(Debug, Clone, Copy)]
pub struct EtcdEvents<'db> {
    db: &'db EtcdDatabase,
}

impl EtcdDatabase {
    /// The event store of this database.
    pub fn events(&self) -> EtcdEvents<'_> {
        EtcdEvents { db: self }
    }
}

impl EtcdEvents<'_> {
    fn write<T>(
        &self,
        mut f: impl FnMut(&mut EventWriter<'_, WriteTransaction<'_>>) -> EventResult<T>,
    ) -> Result<T> {
        self.db.run_in_transaction(|tx| {
            let mut w = EventWriter::new(tx);
            Ok(f(&mut w)?)
        })
    }

    fn read<T>(
        &self,
        f: impl FnOnce(EventSnapshot<'_, ReadTransaction<'_>>) -> EventResult<T>,
    ) -> Result<T> {
        let r = self.db.begin_read()?;
        Ok(f(EventSnapshot::new(&r))?)
    }

    /// Appends `events` to `stream` atomically, if `expected` holds.
    pub fn append(
        &self,
        stream: &str,
        expected: ExpectedVersion,
        events: &[EventData],
    ) -> Result<AppendResult> {
        self.write(|w| w.append(stream, expected, events))
    }

    /// Deletes a stream: soft (`hard = false`) or a tombstone.
    pub fn delete_stream(&self, stream: &str, expected: ExpectedVersion, hard: bool) -> Result<()> {
        self.write(|w| w.delete_stream(stream, expected, hard))
    }

    /// Sets a stream's metadata (max count, truncate before).
    pub fn set_stream_metadata(&self, stream: &str, meta: StreamMetadata) -> Result<()> {
        self.write(|w| w.set_stream_metadata(stream, meta))
    }

    /// Saves the state of `stream` at `version` (which must exist).
    pub fn save_snapshot(&self, stream: &str, version: StreamVersion, state: &[u8]) -> Result<()> {
        self.write(|w| w.save_snapshot(stream, version, state))
    }

    /// Reads up to `limit` events of a stream.
    pub fn read_stream(
        &self,
        stream: &str,
        from: ReadFrom<StreamVersion>,
        direction: Direction,
        limit: usize,
    ) -> Result<Vec<RecordedEvent>> {
        self.read(|s| s.read_stream(stream, from, direction, limit))
    }

    /// Reads up to `limit` events of the global log that pass `filter`.
    pub fn read_all(
        &self,
        from: ReadFrom<Position>,
        direction: Direction,
        limit: usize,
        filter: &EventFilter,
    ) -> Result<Vec<RecordedEvent>> {
        self.read(|s| s.read_all(from, direction, limit, filter))
    }

    /// A stream's current version (`None`: no such stream, or no events).
    pub fn stream_version(&self, stream: &str) -> Result<Option<StreamVersion>> {
        self.read(|s| s.stream_version(stream))
    }

    /// A stream's state and settings (`None`: never written).
    pub fn stream_info(&self, stream: &str) -> Result<Option<StreamInfo>> {
        self.read(|s| s.stream_info(stream))
    }

    /// Every stream whose name starts with `prefix`, in name order.
    pub fn list_streams(&self, prefix: &str) -> Result<Vec<StreamInfo>> {
        self.read(|s| s.list_streams(prefix))
    }

    /// The position the next committed event will get.
    pub fn next_position(&self) -> Result<Position> {
        self.read(|s| s.next_position())
    }

    /// The newest snapshot of `stream` at or below `version` and the
    /// events after it.
    pub fn load(&self, stream: &str, version: Option<StreamVersion>) -> Result<Loaded> {
        self.read(|s| s.load(stream, version))
    }

    /// Checks the event layer's invariants in the newest snapshot (dense
    /// positions, every log entry naming its event, contiguous versions):
    /// the problems found (empty: consistent).
    pub fn check(&self) -> Result<Vec<String>> {
        self.read(|s| s.check())
    }
}
