//! Event streams: append-only streams with optimistic concurrency, a global
//! ordered log, catch-up and live subscriptions, snapshots.
//!
//! A layer over the public KV API (tables and transactions); it never sees a
//! page. Where to start: [`EventStore`] (one call = one transaction) and
//! [`EventWriter`] (several appends in the caller's write transaction).
//!
//! The appends, reads and stream states are generic over the storage seam
//! ([`crate::seam`]): [`EventWriter`] over any [`SeamWrite`](crate::seam::SeamWrite),
//! [`EventSnapshot`] over any [`SeamRead`]. The embedded engine's are the
//! defaults; `cairndb-etcd` runs the same code on a cluster (its
//! `EtcdDatabase::events`). [`EventStore`] and subscriptions are the
//! embedded engine's.
//!
//! **Guarantees**, by construction of the single-writer core:
//! - an append of several events is one transaction: all or nothing;
//! - every event gets a *global position* when its transaction commits:
//!   positions are dense (0, 1, 2, …) and in commit order, so a reader of the
//!   global log that has seen position `p` has seen every event committed
//!   before it, and no event committed later can appear below `p`;
//! - a stream's versions are contiguous from 0.
//!
//! **Idempotent appends** (as KurrentDB's). An append whose events (by
//! event id) are already written where a retry of it finds them writes
//! nothing and is acknowledged with their versions and global positions
//! ([`AppendResult::idempotent`]), in every expected-version mode:
//! - `NoStream` and `Exact(v)`, when the expectation does not hold: the
//!   stream's events right after the expected version (from its first
//!   event, or from `v + 1`) are exactly the append's events;
//! - `Any` and `Exists`, which hold in any state: the append's events are
//!   exactly the stream's events from the version of its first event id
//!   in the stream's current incarnation, wherever that is (looked up in
//!   `$ev.ids`: FORMAT.md, "Event ids").
//!
//! An append whose first events are found that way but not all of them
//! (the stream ends with the first of them, or the others differ) is
//! neither a retry nor new events: it fails with
//! [`EventError::IdempotencyConflict`] and writes nothing. This makes a
//! retry after a lost acknowledgement safe in every mode (ids are generated
//! per `EventData` unless the caller gives them, so only a repeat of the
//! same events is caught). Events of a soft-deleted incarnation are not
//! looked for: appending them again to the recreated stream appends them.
//!
//! **Deleting.** A soft delete hides a stream; appending to it again
//! recreates it and its version numbers continue. A hard delete tombstones
//! it: reads and appends fail with [`EventError::StreamDeleted`]. Truncation
//! (`truncate_before`, `max_count`) hides old events from stream reads.
//! Hidden events stay in the global log, so a global reader never skips.

mod error;
mod ids;
mod record;
mod store;
mod subscription;

use std::any::Any;
use std::ops::ControlFlow;
use std::time::{SystemTime, UNIX_EPOCH};

pub use error::{EventError, EventResult};
pub use ids::{Position, StreamVersion};
pub use record::StreamState;
pub use store::EventWriter;
pub use subscription::{Subscription, SubscriptionMessage, SubscriptionStop};
pub use uuid::Uuid;

use crate::db::Database;
use crate::ids::TxnId;
use crate::limits::MAX_STREAM_NAME_BYTES;
use crate::seam::SeamRead;
use crate::txn::group::{self, Grouped, Op, Ran};
use crate::txn::{ReadTransaction, WriteTransaction};

/// What an append or delete expects of the stream's current version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpectedVersion {
    /// No check.
    Any,
    /// The stream must not exist (never written, or soft-deleted).
    NoStream,
    /// The stream must exist (hold at least one event).
    Exists,
    /// The stream's last event must have this version.
    Exact(StreamVersion),
}

impl std::fmt::Display for ExpectedVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExpectedVersion::Any => f.write_str("any"),
            ExpectedVersion::NoStream => f.write_str("no stream"),
            ExpectedVersion::Exists => f.write_str("an existing stream"),
            ExpectedVersion::Exact(v) => write!(f, "version {v}"),
        }
    }
}

/// An event to append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventData {
    /// Its id: supplied (for idempotent retries) or generated (UUID v7).
    pub id: Uuid,
    /// The event type name (1 ..= 255 bytes).
    pub event_type: String,
    /// The payload.
    pub data: Vec<u8>,
    /// Optional metadata (correlation ids, …); empty if none.
    pub metadata: Vec<u8>,
}

impl EventData {
    /// An event with a generated id and no metadata.
    pub fn new(event_type: impl Into<String>, data: impl Into<Vec<u8>>) -> Self {
        EventData {
            id: Uuid::now_v7(),
            event_type: event_type.into(),
            data: data.into(),
            metadata: Vec::new(),
        }
    }

    /// An event whose payload is `value` in the document layer's binary
    /// encoding (any serde type; see [`crate::document::codec`]): typed
    /// events without JSON text. Read it back with [`RecordedEvent::decode`].
    pub fn encode<T: serde::Serialize + ?Sized>(
        event_type: impl Into<String>,
        value: &T,
    ) -> EventResult<Self> {
        Ok(EventData::new(
            event_type,
            crate::document::codec::to_vec(value)?,
        ))
    }

    /// The same event with this id (for idempotent appends).
    pub fn with_id(mut self, id: Uuid) -> Self {
        self.id = id;
        self
    }

    /// The same event with this metadata.
    pub fn with_metadata(mut self, metadata: impl Into<Vec<u8>>) -> Self {
        self.metadata = metadata.into();
        self
    }
}

/// An event as stored, with where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedEvent {
    /// The stream it belongs to.
    pub stream: String,
    /// Its version within the stream (0, 1, …).
    pub version: StreamVersion,
    /// Its position in the global log.
    pub position: Position,
    /// Its id.
    pub id: Uuid,
    /// Its type name.
    pub event_type: String,
    /// Its payload.
    pub data: Vec<u8>,
    /// Its metadata (empty if none).
    pub metadata: Vec<u8>,
    /// When it was appended, in microseconds since the Unix epoch.
    pub recorded_at_micros: u64,
}

impl RecordedEvent {
    /// Decodes a payload written with [`EventData::encode`].
    pub fn decode<'a, T: serde::Deserialize<'a>>(&'a self) -> EventResult<T> {
        Ok(crate::document::codec::from_slice(&self.data)?)
    }
}

impl RecordedEvent {
    /// This event as a borrowed view (what [`EventRef::to_owned`] copies
    /// back).
    pub fn as_event_ref(&self) -> EventRef<'_> {
        EventRef {
            stream: &self.stream,
            version: self.version,
            position: self.position,
            id: self.id,
            event_type: &self.event_type,
            data: &self.data,
            metadata: &self.metadata,
            recorded_at_micros: self.recorded_at_micros,
        }
    }
}

/// An event read in place: its names and bytes borrowed from the pages of
/// the snapshot that read it, so delivering it allocates nothing (LMDB's
/// way: a slice of the map, valid while the read lasts). The borrowing
/// reads ([`EventSnapshot::read_all_with`], [`EventSnapshot::read_stream_with`],
/// [`EventSnapshot::load_with`], [`Subscription::poll_borrowed`]) hand one
/// to a callback; keep what must outlive it with [`EventRef::to_owned`].
/// (Two cases still copy: a global read of a file whose event layer is not
/// yet upgraded — layer v1, read until its first event write — looks each
/// event up and lends a copy, and a subscription lends copies of the
/// events an earlier [`Subscription::next_timeout`] buffered.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventRef<'a> {
    /// The stream it belongs to.
    pub stream: &'a str,
    /// Its version within the stream.
    pub version: StreamVersion,
    /// Its position in the global log.
    pub position: Position,
    /// Its id.
    pub id: Uuid,
    /// Its type name.
    pub event_type: &'a str,
    /// Its payload.
    pub data: &'a [u8],
    /// Its metadata (empty if none).
    pub metadata: &'a [u8],
    /// When it was appended, in microseconds since the Unix epoch.
    pub recorded_at_micros: u64,
}

impl<'a> EventRef<'a> {
    /// The event copied out of the pages it was read from.
    pub fn to_owned(&self) -> RecordedEvent {
        RecordedEvent {
            stream: self.stream.to_string(),
            version: self.version,
            position: self.position,
            id: self.id,
            event_type: self.event_type.to_string(),
            data: self.data.to_vec(),
            metadata: self.metadata.to_vec(),
            recorded_at_micros: self.recorded_at_micros,
        }
    }

    /// Decodes a payload written with [`EventData::encode`]; borrowed
    /// strings and bytes in `T` borrow the page.
    pub fn decode<T: serde::Deserialize<'a>>(&self) -> EventResult<T> {
        Ok(crate::document::codec::from_slice(self.data)?)
    }
}

/// What an append did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendResult {
    /// The stream's version after the append (its last event), if it has
    /// one; for an idempotent repeat, the version of the last of the events
    /// already written.
    pub version: Option<StreamVersion>,
    /// The global position of the first appended event; the others follow
    /// it densely. For an idempotent repeat, that of the first of the
    /// events already written. `None` if no event was written, or if the
    /// repeated events were written by several appends (their positions are
    /// not dense).
    pub first_position: Option<Position>,
    /// How many events [`first_position`](Self::first_position) covers:
    /// those written, or for an idempotent repeat those already written
    /// (0 for an empty append).
    pub count: u64,
    /// Whether the append was an idempotent repeat that wrote nothing.
    pub idempotent: bool,
}

impl AppendResult {
    /// The global positions of the appended events, in order (none if
    /// nothing was written).
    pub fn positions(&self) -> impl DoubleEndedIterator<Item = Position> {
        let (first, n) = match self.first_position {
            Some(p) => (p.0, self.count),
            None => (0, 0),
        };
        (first..first + n).map(Position)
    }
}

/// Where a read starts: in a stream, `ReadFrom<StreamVersion>`; in the
/// global log, `ReadFrom<Position>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadFrom<P> {
    /// The first (forward) or last (backward) version or position.
    Start,
    /// The end: nothing forward; the last event backward.
    End,
    /// This version or position (inclusive).
    At(P),
}

/// Which way a read goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Oldest first.
    Forward,
    /// Newest first.
    Backward,
}

/// Which events of the global log a read or subscription delivers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventFilter {
    /// Only events of these types (any type if empty).
    pub event_types: Vec<String>,
    /// Only events of streams whose name starts with this.
    pub stream_prefix: Option<String>,
}

impl EventFilter {
    /// Every event.
    pub fn all() -> Self {
        EventFilter::default()
    }

    /// Only events of these types.
    pub fn types<S: Into<String>>(types: impl IntoIterator<Item = S>) -> Self {
        EventFilter {
            event_types: types.into_iter().map(Into::into).collect(),
            stream_prefix: None,
        }
    }

    /// Only events of streams whose name starts with `prefix`.
    pub fn stream_prefix(prefix: impl Into<String>) -> Self {
        EventFilter {
            event_types: Vec::new(),
            stream_prefix: Some(prefix.into()),
        }
    }

    pub(crate) fn matches(&self, event_type: &str, stream: &str) -> bool {
        (self.event_types.is_empty() || self.event_types.iter().any(|t| t == event_type))
            && self
                .stream_prefix
                .as_deref()
                .is_none_or(|p| stream.starts_with(p))
    }
}

/// A stream's settings: how much of it reads show.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamMetadata {
    /// Show only the newest this many events.
    pub max_count: Option<u64>,
    /// Hide events below this version.
    pub truncate_before: Option<StreamVersion>,
}

/// A stream's current state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamInfo {
    /// The stream name.
    pub name: String,
    /// Its last event's version (`None`: no events, or deleted).
    pub version: Option<StreamVersion>,
    /// Live, soft-deleted or tombstoned.
    pub state: StreamState,
    /// Its settings.
    pub metadata: StreamMetadata,
    /// The first version reads show.
    pub first_visible: StreamVersion,
}

/// A loaded aggregate: the newest snapshot at or below a version, and the
/// events after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loaded {
    /// The snapshot's version and bytes, if one was saved.
    pub snapshot: Option<(StreamVersion, Vec<u8>)>,
    /// The events after the snapshot, up to the requested version.
    pub events: Vec<RecordedEvent>,
}

/// The event store of a database: each method is its own transaction
/// (appends commit durably unless the database was told otherwise).
///
/// ```
/// use cairndb::events::{
///     Direction, EventData, EventStore, ExpectedVersion, Position, ReadFrom, StreamVersion,
/// };
/// # let dir = tempfile::tempdir().unwrap();
/// let db = cairndb::Database::create(dir.path().join("app.cairn"))?;
/// let store = EventStore::new(&db);
/// store.append("order-1", ExpectedVersion::NoStream, &[EventData::new("Created", b"{}".to_vec())])?;
/// let r = store.append(
///     "order-1",
///     ExpectedVersion::Exact(StreamVersion(0)),
///     &[EventData::new("Paid", b"{}".to_vec())],
/// )?;
/// assert_eq!((r.version, r.first_position), (Some(StreamVersion(1)), Some(Position(1))));
/// let events = store.read_stream("order-1", ReadFrom::Start, Direction::Forward, 100)?;
/// assert_eq!(events.iter().map(|e| e.event_type.as_str()).collect::<Vec<_>>(), ["Created", "Paid"]);
/// # Ok::<(), cairndb::Error>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct EventStore<'db> {
    db: &'db Database,
    durability: crate::db::Durability,
}

impl<'db> EventStore<'db> {
    /// The event store of `db`.
    pub fn new(db: &'db Database) -> Self {
        EventStore {
            db,
            durability: crate::db::Durability::Immediate,
        }
    }

    /// The same store, committing its writes with `durability`.
    pub fn with_durability(mut self, durability: crate::db::Durability) -> Self {
        self.durability = durability;
        self
    }

    /// The database.
    pub fn database(&self) -> &'db Database {
        self.db
    }

    fn write<T>(&self, f: impl FnOnce(&mut EventWriter<'_>) -> EventResult<T>) -> EventResult<T> {
        let txn = self.db.begin_write()?;
        txn.set_durability(self.durability);
        let out = {
            let mut w = EventWriter::new(&txn);
            f(&mut w)?
        };
        txn.commit()?;
        Ok(out)
    }

    /// Appends `events` to `stream` atomically, if `expected` holds (see
    /// the module docs for idempotent repeats).
    pub fn append(
        &self,
        stream: &str,
        expected: ExpectedVersion,
        events: &[EventData],
    ) -> EventResult<AppendResult> {
        // In a write group (`txn/group.rs`): with other threads appending
        // at once, one of them commits the appends of all.
        let own = |txn: &WriteTransaction| grouped_append(txn, stream, expected, events);
        let to_queue = || -> Op {
            let (name, evs) = (stream.to_string(), events.to_vec());
            std::sync::Arc::new(move |txn: &WriteTransaction| {
                grouped_append(txn, &name, expected, &evs)
            })
        };
        match self.db.write_grouped(self.durability, &own, &to_queue) {
            Grouped::Done(out, commit) => {
                let (r, id) = group::unbox::<(EventResult<AppendResult>, TxnId)>(out)?;
                // (A group of more than this append: others changed the log
                // too.)
                if let (Ok(res), Some((committed, 1))) = (&r, commit) {
                    self.note_log_end(id, committed, res);
                }
                r
            }
            Grouped::CommitFailed(e) => Err(e.into()),
            Grouped::Alone => self.append_alone(stream, expected, events),
        }
    }

    /// [`EventStore::append`] in a write transaction of its own.
    fn append_alone(
        &self,
        stream: &str,
        expected: ExpectedVersion,
        events: &[EventData],
    ) -> EventResult<AppendResult> {
        // An idempotent repeat or a failed check writes nothing: skip the
        // commit (and its flush) then.
        let txn = self.db.begin_write()?;
        txn.set_durability(self.durability);
        let res = EventWriter::new(&txn).append(stream, expected, events)?;
        if res.count == 0 || res.idempotent {
            txn.abort();
        } else {
            let id = txn.txn_id();
            let committed = txn.commit()?;
            self.note_log_end(id, committed, &res);
        }
        Ok(res)
    }

    /// Records the log's end in the state of commit `committed`, whose only
    /// change to the log was `res`, made by transaction `id`: the next
    /// append starting from it needs no lookup, nor the layer's format
    /// check (`store::LOG_END`).
    fn note_log_end(&self, id: TxnId, committed: TxnId, res: &AppendResult) {
        if let (true, Some(Position(first))) = (committed == id, res.first_position) {
            self.db
                .shared
                .set_memo(store::LOG_END, id, first + res.count);
        }
    }

    /// Deletes a stream (see the module docs): soft (`hard = false`) or a
    /// tombstone (`hard = true`).
    pub fn delete_stream(
        &self,
        stream: &str,
        expected: ExpectedVersion,
        hard: bool,
    ) -> EventResult<()> {
        self.write(|w| w.delete_stream(stream, expected, hard))
    }

    /// Sets a stream's metadata (max count, truncate before).
    pub fn set_stream_metadata(&self, stream: &str, meta: StreamMetadata) -> EventResult<()> {
        self.write(|w| w.set_stream_metadata(stream, meta))
    }

    /// Saves the state of `stream` at `version` (which must exist).
    pub fn save_snapshot(
        &self,
        stream: &str,
        version: StreamVersion,
        state: &[u8],
    ) -> EventResult<()> {
        self.write(|w| w.save_snapshot(stream, version, state))
    }

    /// Reads up to `limit` events of a stream.
    pub fn read_stream(
        &self,
        stream: &str,
        from: ReadFrom<StreamVersion>,
        direction: Direction,
        limit: usize,
    ) -> EventResult<Vec<RecordedEvent>> {
        let r = self.db.begin_read()?;
        r.events().read_stream(stream, from, direction, limit)
    }

    /// Reads up to `limit` events of the global log that pass `filter`.
    pub fn read_all(
        &self,
        from: ReadFrom<Position>,
        direction: Direction,
        limit: usize,
        filter: &EventFilter,
    ) -> EventResult<Vec<RecordedEvent>> {
        let r = self.db.begin_read()?;
        r.events().read_all(from, direction, limit, filter)
    }

    /// A stream's current version (`None`: no such stream, or no events).
    pub fn stream_version(&self, stream: &str) -> EventResult<Option<StreamVersion>> {
        let r = self.db.begin_read()?;
        r.events().stream_version(stream)
    }

    /// A stream's state and settings (`None`: never written).
    pub fn stream_info(&self, stream: &str) -> EventResult<Option<StreamInfo>> {
        let r = self.db.begin_read()?;
        r.events().stream_info(stream)
    }

    /// Every stream whose name starts with `prefix`, in name order
    /// (tombstoned and soft-deleted ones too; see [`StreamInfo::state`]).
    pub fn list_streams(&self, prefix: &str) -> EventResult<Vec<StreamInfo>> {
        let r = self.db.begin_read()?;
        r.events().list_streams(prefix)
    }

    /// The position the next committed event will get (the number of events
    /// ever appended).
    pub fn next_position(&self) -> EventResult<Position> {
        let r = self.db.begin_read()?;
        r.events().next_position()
    }

    /// Checks the event layer's invariants in the latest snapshot: global
    /// positions dense from 0, every log entry naming its event, every
    /// stream's versions contiguous. Returns the problems found (empty:
    /// consistent). `cairn check` runs it after the page-level check.
    pub fn check(&self) -> EventResult<Vec<String>> {
        let r = self.db.begin_read()?;
        store::check(&r)
    }

    /// The newest snapshot of `stream` at or below `version` (all versions
    /// if `None`) and the events after it up to `version`.
    pub fn load(&self, stream: &str, version: Option<StreamVersion>) -> EventResult<Loaded> {
        let r = self.db.begin_read()?;
        r.events().load(stream, version)
    }

    /// A subscription to the global log from position `from` (a checkpoint
    /// the caller keeps: the next position it wants), delivering the events
    /// that pass `filter`: history first, then [`SubscriptionMessage::CaughtUp`],
    /// then new commits as they land.
    pub fn subscribe_all(
        &self,
        from: Position,
        filter: EventFilter,
    ) -> Subscription<'db, Position> {
        Subscription::all(self.db, from, filter)
    }

    /// A subscription to one stream from version `from`.
    pub fn subscribe_stream(
        &self,
        stream: &str,
        from: StreamVersion,
    ) -> Subscription<'db, StreamVersion> {
        Subscription::stream(self.db, stream, from)
    }
}

/// The event streams as of one read snapshot, read-only: what
/// [`ReadTransaction::events`] returns. Every read sees the same commit,
/// whatever is appended meanwhile; [`EventStore`]'s reads are these on a
/// fresh snapshot each. `R` is the snapshot's backend: the embedded
/// engine's [`ReadTransaction`] by default, or any other implementation of
/// [`SeamRead`] ([`EventSnapshot::new`]). It has no write method, so an
/// append through it does not compile:
///
/// ```compile_fail
/// use cairndb::events::{EventData, ExpectedVersion};
/// # let dir = tempfile::tempdir().unwrap();
/// # let db = cairndb::Database::create(dir.path().join("e.cairn")).unwrap();
/// let snap = db.begin_read().unwrap();
/// snap.events().append("s", ExpectedVersion::Any, &[EventData::new("T", b"".to_vec())]);
/// ```
///
/// ```
/// use cairndb::events::{Direction, EventData, EventStore, ExpectedVersion, ReadFrom};
/// # let dir = tempfile::tempdir().unwrap();
/// # let db = cairndb::Database::create(dir.path().join("e.cairn"))?;
/// let store = EventStore::new(&db);
/// store.append("s", ExpectedVersion::Any, &[EventData::new("A", b"".to_vec())])?;
/// let snap = db.begin_read()?;
/// store.append("s", ExpectedVersion::Any, &[EventData::new("B", b"".to_vec())])?;
/// let then = snap.events().read_stream("s", ReadFrom::Start, Direction::Forward, 10)?;
/// assert_eq!(then.len(), 1);
/// # Ok::<(), cairndb::Error>(())
/// ```
pub struct EventSnapshot<'r, R: SeamRead = ReadTransaction> {
    r: &'r R,
}

impl<R: SeamRead> Clone for EventSnapshot<'_, R> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<R: SeamRead> Copy for EventSnapshot<'_, R> {}

impl<R: SeamRead> std::fmt::Debug for EventSnapshot<'_, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventSnapshot").finish_non_exhaustive()
    }
}

impl ReadTransaction {
    /// The event streams as of this snapshot, read-only (see
    /// [`EventSnapshot`]).
    pub fn events(&self) -> EventSnapshot<'_> {
        EventSnapshot { r: self }
    }
}

impl<'r, R: SeamRead> EventSnapshot<'r, R> {
    /// The event streams of snapshot `r` of any backend.
    pub fn new(r: &'r R) -> Self {
        EventSnapshot { r }
    }

    /// Checks the event layer's invariants in this snapshot (see
    /// [`EventStore::check`]): the problems found (empty: consistent).
    pub fn check(&self) -> EventResult<Vec<String>> {
        store::check(self.r)
    }

    /// Reads up to `limit` events of a stream.
    pub fn read_stream(
        &self,
        stream: &str,
        from: ReadFrom<StreamVersion>,
        direction: Direction,
        limit: usize,
    ) -> EventResult<Vec<RecordedEvent>> {
        store::read_stream(self.r, stream, from, direction, limit)
    }

    /// Reads up to `limit` events of the global log that pass `filter`.
    pub fn read_all(
        &self,
        from: ReadFrom<Position>,
        direction: Direction,
        limit: usize,
        filter: &EventFilter,
    ) -> EventResult<Vec<RecordedEvent>> {
        let mut out = Vec::new();
        store::read_all(self.r, from, direction, limit, filter, u64::MAX, |e| {
            out.push(e.to_owned());
            ControlFlow::Continue(())
        })?;
        Ok(out)
    }

    /// [`EventSnapshot::read_all`] without copies: hands each event to
    /// `visit` read in place from this snapshot's pages (an [`EventRef`]),
    /// until `visit` breaks or `limit` events were handed. Returns where a
    /// next read in the same direction resumes (`ReadFrom::At`) to go on
    /// after the entries this one looked at (those `filter` skipped too):
    /// forward, the position after the last; backward, the one before it,
    /// `None` once position 0 was looked at (nothing is left below).
    ///
    /// ```
    /// use std::ops::ControlFlow;
    /// use cairndb::events::{Direction, EventData, EventFilter, EventStore, ExpectedVersion, Position, ReadFrom};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = cairndb::Database::create(dir.path().join("e.cairn"))?;
    /// let store = EventStore::new(&db);
    /// store.append("s", ExpectedVersion::Any, &[EventData::new("A", b"12".to_vec())])?;
    /// store.append("t", ExpectedVersion::Any, &[EventData::new("B", b"345".to_vec())])?;
    /// let snap = db.begin_read()?;
    /// let mut bytes = 0;
    /// let next = snap.events().read_all_with(
    ///     ReadFrom::Start,
    ///     Direction::Forward,
    ///     usize::MAX,
    ///     &EventFilter::all(),
    ///     |e| {
    ///         bytes += e.data.len();
    ///         ControlFlow::Continue(())
    ///     },
    /// )?;
    /// assert_eq!((bytes, next), (5, Some(Position(2))));
    /// # Ok::<(), cairndb::Error>(())
    /// ```
    pub fn read_all_with(
        &self,
        from: ReadFrom<Position>,
        direction: Direction,
        limit: usize,
        filter: &EventFilter,
        visit: impl FnMut(EventRef<'_>) -> ControlFlow<()>,
    ) -> EventResult<Option<Position>> {
        let cursor = store::read_all(self.r, from, direction, limit, filter, u64::MAX, visit)?;
        Ok(match direction {
            Direction::Forward => Some(Position(cursor)),
            // The cursor is the last position looked at (or the end of the
            // range, none looked at): the next is below it.
            Direction::Backward => cursor.checked_sub(1).map(Position),
        })
    }

    /// [`EventSnapshot::read_stream`] without copies: hands each event to
    /// `visit` read in place from this snapshot's pages, until `visit`
    /// breaks or `limit` events were handed.
    pub fn read_stream_with(
        &self,
        stream: &str,
        from: ReadFrom<StreamVersion>,
        direction: Direction,
        limit: usize,
        visit: impl FnMut(EventRef<'_>) -> ControlFlow<()>,
    ) -> EventResult<()> {
        store::read_stream_with(self.r, stream, from, direction, limit, visit)
    }

    /// A stream's version (`None`: no such stream, or no events).
    pub fn stream_version(&self, stream: &str) -> EventResult<Option<StreamVersion>> {
        Ok(self.stream_info(stream)?.and_then(|i| i.version))
    }

    /// A stream's state and settings (`None`: never written).
    pub fn stream_info(&self, stream: &str) -> EventResult<Option<StreamInfo>> {
        store::stream_info(self.r, stream)
    }

    /// Every stream whose name starts with `prefix`, in name order.
    pub fn list_streams(&self, prefix: &str) -> EventResult<Vec<StreamInfo>> {
        store::list_streams(self.r, prefix)
    }

    /// The position the next event committed after this snapshot gets.
    pub fn next_position(&self) -> EventResult<Position> {
        Ok(Position(store::next_position(self.r)?))
    }

    /// The newest snapshot of `stream` at or below `version` (all versions
    /// if `None`) and the events after it up to `version`.
    pub fn load(&self, stream: &str, version: Option<StreamVersion>) -> EventResult<Loaded> {
        store::load(self.r, stream, version)
    }

    /// [`EventSnapshot::load`] as a fold, without copies: `init` makes the
    /// state from the newest snapshot of `stream` at or below `version` (if
    /// one was saved), then `apply` takes each event after it up to
    /// `version`, both read in place from this snapshot's pages, until
    /// `apply` breaks; returns the state. The way an aggregate is rebuilt
    /// without materializing its history.
    ///
    /// ```
    /// use std::ops::ControlFlow;
    /// use cairndb::events::{EventData, EventStore, ExpectedVersion, StreamVersion};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = cairndb::Database::create(dir.path().join("e.cairn"))?;
    /// let store = EventStore::new(&db);
    /// for n in [3u8, 4, 5] {
    ///     store.append("acct", ExpectedVersion::Any, &[EventData::new("Deposited", vec![n])])?;
    /// }
    /// store.save_snapshot("acct", StreamVersion(0), &[3])?;
    /// let snap = db.begin_read()?;
    /// let balance = snap.events().load_with(
    ///     "acct",
    ///     None,
    ///     |snapshot| snapshot.map_or(0, |(_, state)| u32::from(state[0])),
    ///     |balance, e| {
    ///         *balance += u32::from(e.data[0]);
    ///         ControlFlow::Continue(())
    ///     },
    /// )?;
    /// assert_eq!(balance, 12);
    /// # Ok::<(), cairndb::Error>(())
    /// ```
    pub fn load_with<S>(
        &self,
        stream: &str,
        version: Option<StreamVersion>,
        init: impl FnOnce(Option<(StreamVersion, &[u8])>) -> S,
        apply: impl FnMut(&mut S, EventRef<'_>) -> ControlFlow<()>,
    ) -> EventResult<S> {
        store::load_with(self.r, stream, version, init, apply)
    }
}

/// Checks a stream name: 1 ..= [`MAX_STREAM_NAME_BYTES`] bytes of UTF-8,
/// no control characters, not starting with `$` (reserved for system
/// streams).
pub fn check_stream_name(name: &str) -> EventResult<()> {
    let bad = |reason| {
        Err(EventError::InvalidStreamName {
            name: name.to_string(),
            reason,
        })
    };
    if name.is_empty() {
        return bad("a stream name must not be empty");
    }
    if name.len() > MAX_STREAM_NAME_BYTES {
        return bad("a stream name must be at most 255 bytes of UTF-8");
    }
    if name.chars().any(char::is_control) {
        return bad("a stream name must not contain control characters");
    }
    if name.starts_with('$') {
        return bad("stream names starting with '$' are reserved");
    }
    Ok(())
}

/// Microseconds since the Unix epoch (0 if the clock is before it).
pub(crate) fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// An append as a write group runs it (`txn/group.rs`): how it ended, and
/// its outcome with the transaction's id.
fn grouped_append(
    txn: &WriteTransaction,
    stream: &str,
    expected: ExpectedVersion,
    events: &[EventData],
) -> (Ran, Box<dyn Any + Send>) {
    let r = EventWriter::new(txn).append(stream, expected, events);
    let ran = match &r {
        Ok(res) if res.count == 0 || res.idempotent => Ran::Unchanged,
        Ok(_) => Ran::Changed,
        // Failed checks, made before the append writes anything but the
        // layer's format upgrade (`before_change`: the same whichever
        // append of the group commits it).
        Err(
            EventError::WrongExpectedVersion { .. }
            | EventError::StreamDeleted(_)
            | EventError::InvalidStreamName { .. }
            | EventError::InvalidEvent { .. }
            | EventError::IdempotencyConflict { .. },
        ) if !group::is_broken(txn) => Ran::Unchanged,
        Err(_) => Ran::Broken,
    };
    (ran, Box::new((r, txn.txn_id())))
}
