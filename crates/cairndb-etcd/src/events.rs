//! The event store on a cluster: the embedded engine's event layer — the
//! same code, generic over the storage seam ([`cairndb::seam`]) — run in
//! this crate's transactions.
//!
//! Each call is one transaction: reads a snapshot at one revision, writes
//! one optimistic transaction committed as one etcd `Txn`, run again from
//! the start while it conflicts ([`EtcdDatabase::run_in_transaction`]). An
//! append reads the global log's end from its counter key (FORMAT.md,
//! "etcd key layout"; the log's last key when the counter is not valid)
//! and the stream's record; the commit writes the counter and compares it,
//! the log's version key and the record's mod revision, so of two appends
//! that read the same end of the log only the
//! first commits and the other runs again on the new state: positions are
//! dense and in commit order, and an expected version is checked against
//! the state the append commits on (ARCHITECTURE.md, "The storage seam").

use std::collections::VecDeque;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairndb::events::{
    AppendResult, Direction, EventData, EventError, EventFilter, EventSnapshot, EventWriter,
    ExpectedVersion, Loaded, Position, ReadFrom, RecordedEvent, StreamInfo, StreamMetadata,
    StreamState, StreamVersion, SubscriptionMessage,
};

use crate::db::{EtcdDatabase, Revision};
use crate::error::Result;
use crate::txn::{ReadTransaction, WriteTransaction};

type EventResult<T> = cairndb::events::EventResult<T>;

/// The event layer's tables a subscription watches (FORMAT.md, "Event
/// streams"): the global log, whose version key every append rewrites, and
/// the streams' records, one key per stream.
const GLOBAL_LOG: &str = "$ev.global";
const STREAMS: &str = "$ev.streams";

/// The event streams of a database on a cluster: the embedded
/// [`cairndb::events::EventStore`]'s appends and reads, each call its own
/// transaction. Errors of the event layer are [`crate::Error::Events`];
/// the cluster's are this crate's own (`Unavailable`, `CommitIndeterminate`,
/// `TooLarge`, …). An append whose answer was lost
/// (`CommitIndeterminate`) may be retried with the same event ids: the
/// retry is acknowledged without writing them twice (idempotent appends,
/// `cairndb::events`).
///
/// Subscriptions follow the cluster's commits with etcd's `Watch`
/// ([`EtcdSubscription`]).
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

/// What a subscription follows.
#[derive(Debug)]
enum Target {
    All(EventFilter),
    Stream(String),
}

/// How long one wait for a change lasts before the deadline is looked at
/// again (well under the request timeout the wait runs within).
const WAIT_SLICE: Duration = Duration::from_millis(1000);

/// Stops an [`EtcdSubscription`] from another thread (as the embedded
/// [`cairndb::events::SubscriptionStop`]): from then on it delivers nothing
/// (its buffered events stay undelivered, so its checkpoint still names the
/// first of them), and a wait returns within about 50 ms.
#[derive(Debug, Clone, Default)]
pub struct EtcdSubscriptionStop(Arc<AtomicBool>);

impl EtcdSubscriptionStop {
    /// Asks the subscription to stop.
    pub fn stop(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// Whether [`stop`](Self::stop) was called.
    pub fn is_stopped(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// A catch-up-then-live subscription on a cluster, as the embedded
/// [`cairndb::events::Subscription`]: it pulls batches from fresh
/// snapshots (the event layer's reads, through the seam) and, once it has
/// delivered everything committed, waits for the next change with an etcd
/// `Watch` from the revision it read (the global log's version key, or the
/// stream's record: whatever is committed after its snapshot changes that
/// key after that revision), reading again at the latest a second later.
/// The watch only wakes it: what it delivers comes from snapshot reads
/// from its checkpoint, so nothing is skipped or repeated however the
/// watch behaves. Its checkpoint (the next position or version) is all it
/// needs to resume. `P` is a [`Position`] (global log) or a [`StreamVersion`].
#[derive(Debug)]
pub struct EtcdSubscription<'db, P> {
    db: &'db EtcdDatabase,
    target: Target,
    /// The next position (global log) or version (stream) to deliver.
    checkpoint: u64,
    wrap: fn(u64) -> P,
    buffer: VecDeque<RecordedEvent>,
    caught_up_sent: bool,
    stop: EtcdSubscriptionStop,
    batch: usize,
}

impl<'db> EtcdEvents<'db> {
    /// A subscription to the global log from position `from`, delivering
    /// the events that pass `filter`: history, then
    /// [`SubscriptionMessage::CaughtUp`] once, then new commits.
    pub fn subscribe_all(
        &self,
        from: Position,
        filter: EventFilter,
    ) -> EtcdSubscription<'db, Position> {
        EtcdSubscription::new(self.db, Target::All(filter), from.0, Position)
    }

    /// A subscription to one stream from version `from`.
    pub fn subscribe_stream(
        &self,
        stream: &str,
        from: StreamVersion,
    ) -> EtcdSubscription<'db, StreamVersion> {
        EtcdSubscription::new(
            self.db,
            Target::Stream(stream.to_string()),
            from.0,
            StreamVersion,
        )
    }
}

impl<'db, P> EtcdSubscription<'db, P> {
    fn new(db: &'db EtcdDatabase, target: Target, from: u64, wrap: fn(u64) -> P) -> Self {
        EtcdSubscription {
            db,
            target,
            checkpoint: from,
            wrap,
            buffer: VecDeque::new(),
            caught_up_sent: false,
            stop: EtcdSubscriptionStop::default(),
            batch: 512,
        }
    }

    /// The checkpoint to keep for resuming: the next position or version
    /// this subscription would deliver.
    pub fn checkpoint(&self) -> P {
        (self.wrap)(
            self.buffer
                .front()
                .map(|e| match self.target {
                    Target::All(_) => e.position.0,
                    Target::Stream(_) => e.version.0,
                })
                .unwrap_or(self.checkpoint),
        )
    }

    /// A handle that stops this subscription from another thread.
    pub fn stop_handle(&self) -> EtcdSubscriptionStop {
        self.stop.clone()
    }

    /// Reads the next batch into the buffer from a new snapshot; returns
    /// its revision and the key whose change means there is more.
    fn fill(&mut self) -> Result<(Revision, Vec<u8>)> {
        let r = self.db.begin_read()?;
        let snap = EventSnapshot::new(&r);
        let layout = &self.db.layout;
        match &self.target {
            Target::All(filter) => {
                let events = snap.read_all(
                    ReadFrom::At(Position(self.checkpoint)),
                    Direction::Forward,
                    self.batch,
                    filter,
                )?;
                self.checkpoint = match events.last() {
                    Some(e) if events.len() >= self.batch => e.position.0 + 1,
                    // Fewer than asked for: the read went to the log's end.
                    _ => snap.next_position()?.0,
                };
                self.buffer.extend(events);
                Ok((r.revision(), layout.version(GLOBAL_LOG)))
            }
            Target::Stream(name) => {
                let key = layout.data(STREAMS, name.as_bytes());
                let info = match snap.stream_info(name)? {
                    Some(i) if i.state == StreamState::Live => i,
                    Some(i) if i.state == StreamState::HardDeleted => {
                        return Err(EventError::StreamDeleted(name.clone()).into())
                    }
                    // Not written yet, or soft-deleted: wait for it.
                    _ => return Ok((r.revision(), key)),
                };
                let end = info.version.map_or(info.first_visible.0, |v| v.0 + 1);
                let from = self.checkpoint.max(info.first_visible.0).min(end);
                let events = snap.read_stream(
                    name,
                    ReadFrom::At(StreamVersion(from)),
                    Direction::Forward,
                    self.batch,
                )?;
                if let Some(last) = events.last() {
                    self.checkpoint = last.version.0 + 1;
                }
                self.buffer.extend(events);
                Ok((r.revision(), key))
            }
        }
    }

    /// The next message, waiting at most `timeout` for one; `Ok(None)` if
    /// none came in time or the subscription was stopped.
    pub fn next_timeout(&mut self, timeout: Duration) -> Result<Option<SubscriptionMessage<P>>> {
        if self.stop.is_stopped() {
            return Ok(None);
        }
        if let Some(e) = self.buffer.pop_front() {
            return Ok(Some(SubscriptionMessage::Event(e)));
        }
        let deadline = Instant::now() + timeout;
        loop {
            if self.stop.is_stopped() {
                return Ok(None);
            }
            let before = self.checkpoint;
            let (revision, key) = self.fill()?;
            if let Some(e) = self.buffer.pop_front() {
                return Ok(Some(SubscriptionMessage::Event(e)));
            }
            if self.checkpoint != before {
                // Scanned filtered-out entries only: keep reading.
                continue;
            }
            if !self.caught_up_sent {
                self.caught_up_sent = true;
                return Ok(Some(SubscriptionMessage::CaughtUp {
                    checkpoint: (self.wrap)(self.checkpoint),
                }));
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            let wait = (deadline - now).min(WAIT_SLICE);
            self.db.wait_for_change(key, revision, wait, &self.stop.0)?;
        }
    }

    /// Delivers messages to `f` until it returns `ControlFlow::Break`, the
    /// subscription is stopped ([`stop_handle`](Self::stop_handle)), or an
    /// error occurs. Returns the checkpoint to resume from.
    pub fn run(
        &mut self,
        mut f: impl FnMut(SubscriptionMessage<P>) -> ControlFlow<()>,
    ) -> Result<P> {
        loop {
            let flow = match self.next_timeout(WAIT_SLICE)? {
                Some(m) => f(m),
                None if self.stop.is_stopped() => ControlFlow::Break(()),
                None => ControlFlow::Continue(()),
            };
            if flow.is_break() {
                return Ok(self.checkpoint());
            }
        }
    }
}

impl<P> Iterator for EtcdSubscription<'_, P> {
    type Item = Result<SubscriptionMessage<P>>;

    /// Blocks until the next message; `None` once stopped.
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            match self.next_timeout(Duration::from_secs(3600)) {
                Ok(Some(m)) => return Some(Ok(m)),
                Ok(None) if self.stop.is_stopped() => return None,
                Ok(None) => {}
                Err(e) => return Some(Err(e)),
            }
        }
    }
}
