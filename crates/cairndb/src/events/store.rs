//! Appends, deletes and reads of the event layer, over tables of one
//! transaction of any backend of the storage seam ([`crate::seam`]: the
//! embedded engine, or `cairndb-etcd`'s cluster), generic and
//! monomorphized. Positions are assigned inside the write transaction from the
//! global log's last key; because there is one writer at a time, that order
//! is the commit order and positions are dense.
//!
//! Layer format v2 (FORMAT.md, "Event streams"): `$ev.global` holds each
//! event's body under its position, so a global read is a scan; reads of a
//! v1 file (`$ev.log`, bodies looked up in `$ev.events`) are kept, and the
//! first change an [`EventWriter`] makes upgrades the file in its
//! transaction ([`upgrade_v1`]).

use std::ops::ControlFlow;

use super::error::{EventError, EventResult};
use super::record::{
    global_record, id_key, tables, EventRecord, GlobalRecord, InlineBody, LogEntry, StreamRecord,
    StreamState,
};
use super::{
    AppendResult, Direction, EventData, EventFilter, EventRef, ExpectedVersion, Loaded, Position,
    ReadFrom, RecordedEvent, StreamInfo, StreamMetadata, StreamVersion, Uuid,
};
use crate::error::CoreError;
use crate::limits;
use crate::seam::{SeamRead, SeamTable, SeamTableMut, SeamWrite, LAYER};
use crate::table::TableDefinition;
use crate::txn::WriteTransaction;
use crate::types::{Key, Value};

/// Appends and other changes inside the caller's write transaction, so
/// several streams (and other tables) change in one commit. `T` is the
/// transaction's backend: the embedded engine's [`WriteTransaction`] by
/// default, or any other implementation of [`SeamWrite`] (`cairndb-etcd`'s),
/// running the same code.
///
/// ```
/// use cairndb::events::{EventData, EventWriter, ExpectedVersion};
/// # let dir = tempfile::tempdir().unwrap();
/// # let db = cairndb::Database::create(dir.path().join("app.cairn"))?;
/// let txn = db.begin_write()?;
/// let mut w = EventWriter::new(&txn);
/// w.append("account-1", ExpectedVersion::Any, &[EventData::new("Debited", b"10".to_vec())])?;
/// w.append("account-2", ExpectedVersion::Any, &[EventData::new("Credited", b"10".to_vec())])?;
/// txn.commit()?; // both or neither
/// # Ok::<(), cairndb::Error>(())
/// ```
pub struct EventWriter<'t, T: SeamWrite = WriteTransaction> {
    txn: &'t T,
    next_position: Option<u64>,
    /// Whether this writer made sure the layer is at format v2.
    upgraded: bool,
    buf: Vec<u8>,
}

fn check_events(stream: &str, events: &[EventData]) -> EventResult<()> {
    for (index, e) in events.iter().enumerate() {
        let bad = |reason: String| {
            Err(EventError::InvalidEvent {
                stream: stream.to_string(),
                index,
                reason,
            })
        };
        if e.event_type.is_empty() {
            return bad("the event type must not be empty".into());
        }
        if e.event_type.len() > limits::MAX_EVENT_TYPE_BYTES {
            return bad(format!(
                "the event type is {} bytes, more than the limit of {}",
                e.event_type.len(),
                limits::MAX_EVENT_TYPE_BYTES
            ));
        }
        if e.event_type.chars().any(char::is_control) {
            return bad("the event type must not contain control characters".into());
        }
        if e.data.len() > limits::MAX_EVENT_DATA_BYTES {
            return bad(format!(
                "the payload is {} bytes, more than the limit of {}",
                e.data.len(),
                limits::MAX_EVENT_DATA_BYTES
            ));
        }
        if e.metadata.len() > limits::MAX_EVENT_METADATA_BYTES {
            return bad(format!(
                "the metadata is {} bytes, more than the limit of {}",
                e.metadata.len(),
                limits::MAX_EVENT_METADATA_BYTES
            ));
        }
    }
    Ok(())
}

/// The `Shared::memo` key of the global log's end (the next position).
/// Only an append records it, for the commit it made, after
/// `before_change` brought the layer up to date: its presence also says the
/// layer is current in that commit (no v1 `$ev.log`, `$ev.ids` present).
pub(crate) const LOG_END: &str = "events.log_end";

fn get_stream(
    t: &impl SeamTable<&'static str, &'static [u8]>,
    stream: &str,
) -> EventResult<Option<StreamRecord>> {
    t.get(stream)?
        .map(|g| StreamRecord::decode(g.value()))
        .transpose()
}

fn expectation_holds(expected: ExpectedVersion, current: Option<u64>) -> bool {
    match expected {
        ExpectedVersion::Any => true,
        ExpectedVersion::NoStream => current.is_none(),
        ExpectedVersion::Exists => current.is_some(),
        ExpectedVersion::Exact(v) => current == Some(v.0),
    }
}

fn wrong_version(stream: &str, expected: ExpectedVersion, actual: Option<u64>) -> EventError {
    EventError::WrongExpectedVersion {
        stream: stream.to_string(),
        expected: expected.to_string(),
        actual: actual.map(StreamVersion),
    }
}

impl<'t, T: SeamWrite> EventWriter<'t, T> {
    /// A writer over `txn`.
    pub fn new(txn: &'t T) -> Self {
        EventWriter {
            txn,
            next_position: None,
            upgraded: false,
            buf: Vec::new(),
        }
    }

    /// Before the first change: upgrades a v1 layer in this transaction,
    /// and fills `$ev.ids` for a layer written without it.
    fn before_change(&mut self) -> EventResult<()> {
        if !self.upgraded {
            // A commit an append made (its log end remembered) left the
            // layer current; table existence is the catalog's, which
            // `base_memo` requires unchanged.
            let current = self
                .txn
                .base_memo(LOG_END, tables::IDS.name(), LAYER)
                .is_some();
            if !current {
                upgrade_v1(self.txn)?;
                fill_ids(self.txn)?;
            }
            self.upgraded = true;
        }
        Ok(())
    }

    fn next_position(&mut self) -> EventResult<u64> {
        if let Some(p) = self.next_position {
            return Ok(p);
        }
        // The end an append through `EventStore` recorded for the commit
        // this transaction started from, while the log is as it left it.
        if let Some(p) = self.txn.base_memo(LOG_END, tables::GLOBAL.name(), LAYER) {
            self.next_position = Some(p);
            return Ok(p);
        }
        // A backend's counter (cairndb-etcd: one key, not a scan of the
        // log); none on the embedded engine.
        if let Some(p) = self.txn.table_counter(tables::GLOBAL.name())? {
            self.next_position = Some(p);
            return Ok(p);
        }
        let log = self.txn.open_table(tables::GLOBAL)?;
        let p = log.last()?.map(|(k, _)| k.value() + 1).unwrap_or(0);
        self.next_position = Some(p);
        Ok(p)
    }

    /// Where the events of an append would already be if it were a retry
    /// of one that was written: for `NoStream` and `Exact(v)` when they do
    /// not hold, where they would have put the events; for `Any` and
    /// `Exists`, the version `$ev.ids` gives the append's first event id,
    /// if in the stream's current incarnation. `None`: no place to look.
    /// The caller compares the events there.
    fn repeat_start(
        &self,
        rec: &StreamRecord,
        expected: ExpectedVersion,
        events: &[EventData],
    ) -> EventResult<Option<u64>> {
        let current = rec.current_version();
        Ok(match expected {
            ExpectedVersion::NoStream if current.is_some() => Some(rec.created_at),
            ExpectedVersion::Exact(v) if current != Some(v.0) => v.0.checked_add(1),
            ExpectedVersion::Any | ExpectedVersion::Exists => {
                let Some(first) = events.first() else {
                    return Ok(None);
                };
                // (`before_change` made sure the table exists and names
                // every event.)
                self.txn
                    .open_table(tables::IDS)?
                    .get(id_key(rec.id, first.id.as_bytes()).as_slice())?
                    .map(|g| g.value())
                    .filter(|&v| v >= rec.created_at && v < rec.next_version)
            }
            _ => None,
        })
    }

    /// How many of `events`, from the first, are the stream's events from
    /// version `start` (by id), and the global positions of the first and
    /// last of them.
    fn repeated(
        &self,
        rec: &StreamRecord,
        start: u64,
        events: &[EventData],
    ) -> EventResult<(u64, Option<(u64, u64)>)> {
        let t = self.txn.open_table(tables::EVENTS)?;
        let mut k = 0u64;
        let mut positions: Option<(u64, u64)> = None;
        for e in events {
            let Some(v) = start.checked_add(k).filter(|&v| v < rec.next_version) else {
                break;
            };
            let Some(g) = t.get((rec.id, v))? else {
                break;
            };
            let stored = EventRecord::decode(g.value())?;
            if stored.id != *e.id.as_bytes() {
                break;
            }
            positions = Some((positions.map_or(stored.position, |p| p.0), stored.position));
            k += 1;
        }
        Ok((k, positions))
    }

    /// Appends `events` to `stream` if `expected` holds; see the module
    /// docs for the idempotency rule. Positions are those the events will
    /// have once the transaction commits.
    pub fn append(
        &mut self,
        stream: &str,
        expected: ExpectedVersion,
        events: &[EventData],
    ) -> EventResult<AppendResult> {
        super::check_stream_name(stream)?;
        check_events(stream, events)?;
        // (First: the idempotency check below reads `$ev.ids`.)
        self.before_change()?;
        // One handle on the streams table for the whole append (nothing
        // below opens it again).
        let mut streams = self.txn.open_table(tables::STREAMS)?;
        let rec = get_stream(&streams, stream)?;
        if rec.is_some_and(|r| r.state == StreamState::HardDeleted) {
            return Err(EventError::StreamDeleted(stream.to_string()));
        }
        let current = rec.and_then(|r| r.current_version());
        // An idempotent repeat: the events are already where this append's
        // expectation would have put them (module docs). Acknowledged with
        // their versions and positions; nothing is written.
        if let Some(r) = rec.filter(|r| r.state == StreamState::Live) {
            if let Some(start) = self.repeat_start(&r, expected, events)? {
                let n = events.len() as u64;
                match self.repeated(&r, start, events)? {
                    (k, Some((first, last))) if k == n => {
                        // One append's events have dense positions; events
                        // repeated from several appends have no single
                        // first position to report.
                        let dense = last - first == n - 1;
                        return Ok(AppendResult {
                            version: Some(StreamVersion(start + n - 1)),
                            first_position: dense.then_some(Position(first)),
                            count: if dense { n } else { 0 },
                            idempotent: true,
                        });
                    }
                    (0, _) => {}
                    (k, _) => {
                        return Err(EventError::IdempotencyConflict {
                            stream: stream.to_string(),
                            repeated: k,
                            count: n,
                            version: StreamVersion(start),
                        })
                    }
                }
            }
        }
        if !expectation_holds(expected, current) {
            return Err(wrong_version(stream, expected, current));
        }
        if events.is_empty() {
            return Ok(AppendResult {
                version: current.map(StreamVersion),
                first_position: None,
                count: 0,
                idempotent: false,
            });
        }
        let mut r = match rec {
            Some(r) => r,
            None => StreamRecord {
                id: streams.len()?,
                next_version: 0,
                state: StreamState::Live,
                truncate_before: 0,
                max_count: u64::MAX,
                created_at: 0,
            },
        };
        if r.state == StreamState::SoftDeleted {
            // Recreated: numbering continues; the old events stay hidden.
            r.state = StreamState::Live;
            r.created_at = r.next_version;
            r.truncate_before = r.truncate_before.max(r.next_version);
        }
        self.before_change()?;
        let first_pos = self.next_position()?;
        let recorded_at = super::now_micros();
        let mut entry = Vec::new();
        {
            let mut ev = self.txn.open_table(tables::EVENTS)?;
            let mut log = self.txn.open_table(tables::GLOBAL)?;
            let mut ids = self.txn.open_table(tables::IDS)?;
            for (i, e) in events.iter().enumerate() {
                let version = r.next_version + i as u64;
                let position = first_pos + i as u64;
                let record = EventRecord {
                    position,
                    id: *e.id.as_bytes(),
                    recorded_at,
                    event_type: &e.event_type,
                    metadata: &e.metadata,
                    data: &e.data,
                };
                record.encode_into(&mut self.buf);
                // Both keys are new: versions from the stream's next one,
                // positions past the log's end (no old value to read).
                ev.insert_known((r.id, version), self.buf.as_slice(), false, LAYER)?;
                global_record(r.id, version, stream, &record).encode_into(&mut entry);
                log.insert_known(position, entry.as_slice(), false, LAYER)?;
                ids.insert(id_key(r.id, e.id.as_bytes()).as_slice(), version)?;
            }
        }
        let n = events.len() as u64;
        r.next_version += n;
        streams.insert_known(stream, r.encode().as_slice(), rec.is_some(), LAYER)?;
        drop(streams);
        self.next_position = Some(first_pos + n);
        self.txn
            .set_table_counter(tables::GLOBAL.name(), first_pos + n)?;
        Ok(AppendResult {
            version: Some(StreamVersion(r.next_version - 1)),
            first_position: Some(Position(first_pos)),
            count: n,
            idempotent: false,
        })
    }

    /// Deletes a stream: soft (hidden; an append recreates it and version
    /// numbers continue) or hard (a tombstone). A hard delete of a stream
    /// that was never written leaves a tombstone too.
    pub fn delete_stream(
        &mut self,
        stream: &str,
        expected: ExpectedVersion,
        hard: bool,
    ) -> EventResult<()> {
        super::check_stream_name(stream)?;
        self.before_change()?;
        let mut streams = self.txn.open_table(tables::STREAMS)?;
        let rec = get_stream(&streams, stream)?;
        if rec.is_some_and(|r| r.state == StreamState::HardDeleted) {
            return Err(EventError::StreamDeleted(stream.to_string()));
        }
        let current = rec.and_then(|r| r.current_version());
        if !expectation_holds(expected, current) {
            return Err(wrong_version(stream, expected, current));
        }
        let mut r = match rec {
            Some(r) => r,
            None if hard => StreamRecord {
                id: streams.len()?,
                next_version: 0,
                state: StreamState::Live,
                truncate_before: 0,
                max_count: u64::MAX,
                created_at: 0,
            },
            None => return Err(EventError::StreamNotFound(stream.to_string())),
        };
        if r.state == StreamState::SoftDeleted && !hard {
            return Err(EventError::StreamNotFound(stream.to_string()));
        }
        r.state = if hard {
            StreamState::HardDeleted
        } else {
            StreamState::SoftDeleted
        };
        r.truncate_before = r.next_version;
        streams.insert(stream, r.encode().as_slice())?;
        Ok(())
    }

    /// Sets how much of a stream reads show. A stream that was never
    /// written gets its settings ahead of its first event.
    pub fn set_stream_metadata(&mut self, stream: &str, meta: StreamMetadata) -> EventResult<()> {
        super::check_stream_name(stream)?;
        self.before_change()?;
        let mut streams = self.txn.open_table(tables::STREAMS)?;
        let mut r = match get_stream(&streams, stream)? {
            Some(r) if r.state == StreamState::HardDeleted => {
                return Err(EventError::StreamDeleted(stream.to_string()))
            }
            Some(r) => r,
            None => StreamRecord {
                id: streams.len()?,
                next_version: 0,
                state: StreamState::Live,
                truncate_before: 0,
                max_count: u64::MAX,
                created_at: 0,
            },
        };
        r.max_count = meta.max_count.unwrap_or(u64::MAX);
        r.truncate_before = meta
            .truncate_before
            .map_or(0, u64::from)
            .max(match r.state {
                StreamState::SoftDeleted => r.next_version,
                _ => r.created_at,
            });
        streams.insert(stream, r.encode().as_slice())?;
        Ok(())
    }

    /// Saves `state` as the snapshot of `stream` at `version` (an existing
    /// version of the live stream).
    pub fn save_snapshot(
        &mut self,
        stream: &str,
        version: StreamVersion,
        state: &[u8],
    ) -> EventResult<()> {
        super::check_stream_name(stream)?;
        let version = version.0;
        let r = match get_stream(&self.txn.open_table(tables::STREAMS)?, stream)? {
            Some(r) if r.state == StreamState::HardDeleted => {
                return Err(EventError::StreamDeleted(stream.to_string()))
            }
            Some(r) if r.state == StreamState::Live => r,
            _ => return Err(EventError::StreamNotFound(stream.to_string())),
        };
        if version >= r.next_version {
            return Err(EventError::SnapshotPastEnd {
                stream: stream.to_string(),
                version,
                next: r.next_version,
            });
        }
        if state.len() > limits::MAX_EVENT_DATA_BYTES {
            return Err(EventError::SnapshotTooLarge {
                stream: stream.to_string(),
                version,
                bytes: state.len(),
                limit: limits::MAX_EVENT_DATA_BYTES,
            });
        }
        self.before_change()?;
        self.txn
            .open_table(tables::SNAPSHOTS)?
            .insert((r.id, version), state)?;
        Ok(())
    }
}

/// How many v1 log entries the upgrade reads before writing them.
const UPGRADE_CHUNK: usize = 4096;

fn corrupt(what: &str, detail: String) -> EventError {
    EventError::Core(CoreError::Decode {
        type_name: format!("event layer {what}"),
        detail,
    })
}

/// The error for a global log entry naming an event that is not there.
fn missing_event(pos: u64, version: u64, stream: &str) -> EventError {
    corrupt(
        "global log",
        format!("position {pos} names event {version} of stream {stream:?}, which is missing"),
    )
}

/// Upgrades a layer at format v1 to v2 inside `txn` (FORMAT.md, "Layer
/// format v1 and its upgrade"): every `$ev.log` entry becomes a global
/// record under the same position, then `$ev.log` is deleted. Returns
/// whether there was anything to upgrade. On an error, what it wrote is
/// taken back: the transaction holds v1 as before (and a caller that
/// commits anyway commits v1).
pub(crate) fn upgrade_v1<T: SeamWrite>(txn: &T) -> EventResult<bool> {
    if txn.table_types(tables::LOG.name())?.is_none() {
        return Ok(false);
    }
    if txn.table_types(tables::GLOBAL.name())?.is_some() {
        return Err(corrupt(
            "global log",
            "the file holds both $ev.log (v1) and $ev.global (v2)".to_string(),
        ));
    }
    if let Err(e) = copy_v1_log(txn) {
        txn.delete_table(tables::GLOBAL)?;
        return Err(e);
    }
    txn.delete_table(tables::LOG)?;
    Ok(true)
}

/// Fills `$ev.ids` from `$ev.events` in `txn` if the layer has events but
/// no such table (written by a build before it; FORMAT.md, "Event ids"),
/// and creates it empty if the layer has none: after this the table exists
/// and names every event's id.
pub(crate) fn fill_ids<T: SeamWrite>(txn: &T) -> EventResult<()> {
    if txn.table_types(tables::IDS.name())?.is_some() {
        return Ok(());
    }
    if txn.table_types(tables::EVENTS.name())?.is_some() {
        let mut from = (0u64, 0u64);
        let mut chunk: Vec<([u8; 24], u64)> = Vec::with_capacity(UPGRADE_CHUNK);
        loop {
            // Read a chunk, then write it (as `copy_v1_log`).
            chunk.clear();
            let mut last = None;
            {
                let events = txn.open_table(tables::EVENTS)?;
                for item in events.range(from..)? {
                    let (k, v) = item?;
                    let (stream_id, version) = k.value();
                    let rec = EventRecord::decode(v.value())?;
                    chunk.push((id_key(stream_id, &rec.id), version));
                    last = Some((stream_id, version));
                    if chunk.len() >= UPGRADE_CHUNK {
                        break;
                    }
                }
            }
            let mut ids = txn.open_table(tables::IDS)?;
            for (k, version) in &chunk {
                ids.insert(k.as_slice(), *version)?;
            }
            let next = last.and_then(|(s, v)| match v.checked_add(1) {
                Some(v) => Some((s, v)),
                None => s.checked_add(1).map(|s| (s, 0)),
            });
            match next {
                Some(n) if chunk.len() >= UPGRADE_CHUNK => from = n,
                _ => break,
            }
        }
    }
    txn.open_table(tables::IDS)?;
    Ok(())
}

/// Writes a global record into `$ev.global` for every `$ev.log` entry.
fn copy_v1_log<T: SeamWrite>(txn: &T) -> EventResult<()> {
    let mut from = 0u64;
    let mut chunk: Vec<(u64, Vec<u8>)> = Vec::with_capacity(UPGRADE_CHUNK);
    loop {
        // Read a chunk, then write it: a table is not iterated while
        // another of the same transaction changes.
        chunk.clear();
        {
            let log = txn.open_table(tables::LOG)?;
            let events = txn.open_table(tables::EVENTS)?;
            for item in log.range(from..)? {
                let (k, v) = item?;
                let pos = k.value();
                let entry = LogEntry::decode(v.value()).map_err(|_| {
                    corrupt(
                        "global log",
                        format!("the v1 log entry at position {pos} is not a valid record"),
                    )
                })?;
                let g = events
                    .get((entry.stream_id, entry.version))?
                    .ok_or_else(|| missing_event(pos, entry.version, entry.stream))?;
                let rec = EventRecord::decode(g.value())?;
                if rec.position != pos {
                    return Err(corrupt(
                        "global log",
                        format!(
                            "position {pos} names event {} of stream {:?}, which records position {}",
                            entry.version, entry.stream, rec.position
                        ),
                    ));
                }
                let mut buf = Vec::new();
                global_record(entry.stream_id, entry.version, entry.stream, &rec)
                    .encode_into(&mut buf);
                chunk.push((pos, buf));
                if chunk.len() >= UPGRADE_CHUNK {
                    break;
                }
            }
        }
        let Some(&(last, _)) = chunk.last() else {
            break;
        };
        let mut global = txn.open_table(tables::GLOBAL)?;
        for (pos, buf) in &chunk {
            global.insert(*pos, buf.as_slice())?;
        }
        match last.checked_add(1) {
            Some(next) => from = next,
            None => break,
        }
    }
    // An empty v1 log still leaves an (empty) v2 one: the layout is v2.
    txn.open_table(tables::GLOBAL)?;
    Ok(())
}

/// Opens a layer table in a snapshot; `None` if nothing was ever written.
#[inline]
fn open<'r, R: SeamRead, K: Key + 'static, V: Value + 'static>(
    r: &'r R,
    def: TableDefinition<'static, K, V>,
) -> EventResult<Option<R::Table<'r, K, V>>> {
    Ok(r.open_table_if_exists(def)?)
}

fn recorded(stream: String, version: u64, bytes: &[u8]) -> EventResult<RecordedEvent> {
    // (The name is the caller's, moved in, not copied from a borrow.)
    Ok(RecordedEvent {
        stream,
        ..event_ref("", version, bytes)?.to_owned()
    })
}

/// Event `version` of `stream`, read in place from its `$ev.events` value.
fn event_ref<'a>(stream: &'a str, version: u64, bytes: &'a [u8]) -> EventResult<EventRef<'a>> {
    let e = EventRecord::decode(bytes)?;
    Ok(EventRef {
        stream,
        version: StreamVersion(version),
        position: Position(e.position),
        id: Uuid::from_bytes(e.id),
        event_type: e.event_type,
        data: e.data,
        metadata: e.metadata,
        recorded_at_micros: e.recorded_at,
    })
}

/// The live record of a readable stream, or the error for reading it.
pub(crate) fn readable_stream<R: SeamRead>(
    r: &R,
    stream: &str,
) -> EventResult<Option<StreamRecord>> {
    super::check_stream_name(stream)?;
    let Some(t) = open(r, tables::STREAMS)? else {
        return Ok(None);
    };
    match get_stream(&t, stream)? {
        Some(rec) if rec.state == StreamState::HardDeleted => {
            Err(EventError::StreamDeleted(stream.to_string()))
        }
        Some(rec) if rec.state == StreamState::Live => Ok(Some(rec)),
        _ => Ok(None),
    }
}

/// Hands `visit` up to `limit` events of the stream with record `rec`,
/// versions `lo..hi` in `direction`, each read in place, until it breaks.
pub(crate) fn visit_stream<R: SeamRead>(
    r: &R,
    stream: &str,
    rec: &StreamRecord,
    (lo, hi, direction, limit): (u64, u64, Direction, usize),
    mut visit: impl FnMut(EventRef<'_>) -> ControlFlow<()>,
) -> EventResult<()> {
    if lo >= hi || limit == 0 {
        return Ok(());
    }
    let Some(t) = open(r, tables::EVENTS)? else {
        return Ok(());
    };
    let range = t.range((rec.id, lo)..(rec.id, hi))?;
    let iter: Box<dyn Iterator<Item = _>> = match direction {
        Direction::Forward => Box::new(range),
        Direction::Backward => Box::new(range.rev()),
    };
    for (n, item) in iter.enumerate() {
        let (k, v) = item?;
        if visit(event_ref(stream, k.value().1, v.value())?).is_break() || n + 1 >= limit {
            break;
        }
    }
    Ok(())
}

/// A read's start as the bare number the records hold.
fn bare<P: Into<u64>>(from: ReadFrom<P>) -> ReadFrom<u64> {
    match from {
        ReadFrom::Start => ReadFrom::Start,
        ReadFrom::End => ReadFrom::End,
        ReadFrom::At(n) => ReadFrom::At(n.into()),
    }
}

pub(crate) fn read_stream<R: SeamRead>(
    r: &R,
    stream: &str,
    from: ReadFrom<StreamVersion>,
    direction: Direction,
    limit: usize,
) -> EventResult<Vec<RecordedEvent>> {
    let mut out = Vec::with_capacity(limit.min(64));
    read_stream_with(r, stream, from, direction, limit, |e| {
        out.push(e.to_owned());
        ControlFlow::Continue(())
    })?;
    Ok(out)
}

/// [`read_stream`], handing each event to `visit` read in place until it
/// breaks.
pub(crate) fn read_stream_with<R: SeamRead>(
    r: &R,
    stream: &str,
    from: ReadFrom<StreamVersion>,
    direction: Direction,
    limit: usize,
    visit: impl FnMut(EventRef<'_>) -> ControlFlow<()>,
) -> EventResult<()> {
    let Some(rec) = readable_stream(r, stream)? else {
        return Err(EventError::StreamNotFound(stream.to_string()));
    };
    let (vis, end) = (rec.first_visible(), rec.next_version);
    let past_end = |from| EventError::ReadPastEnd {
        what: format!("stream {stream:?}"),
        from,
        end,
    };
    let (lo, hi) = match (direction, bare(from)) {
        (Direction::Forward, ReadFrom::Start) => (vis, end),
        (Direction::Forward, ReadFrom::End) => (end, end),
        (Direction::Forward, ReadFrom::At(v)) if v > end => return Err(past_end(v)),
        (Direction::Forward, ReadFrom::At(v)) => (v.max(vis), end),
        (Direction::Backward, ReadFrom::Start | ReadFrom::End) => (vis, end),
        (Direction::Backward, ReadFrom::At(v)) if v >= end && !(v == 0 && end == 0) => {
            return Err(past_end(v))
        }
        (Direction::Backward, ReadFrom::At(v)) => (vis, v.saturating_add(1).min(end)),
    };
    visit_stream(r, stream, &rec, (lo, hi, direction, limit), visit)
}

/// A snapshot's global log (`T`, a table of the snapshot), in the layer
/// format the file is at.
enum GlobalLog<T> {
    /// `$ev.global`: bodies inline (or by reference).
    V2(T),
    /// `$ev.log` of a file not yet upgraded: every body is looked up.
    V1(T),
}

impl<T> GlobalLog<T> {
    fn table(&self) -> &T {
        match self {
            GlobalLog::V2(t) | GlobalLog::V1(t) => t,
        }
    }
}

/// A snapshot's table of the global log.
type LogTable<'r, R> = <R as SeamRead>::Table<'r, u64, &'static [u8]>;

/// The global log of `r`; `None` if no event was ever written.
fn global_log<R: SeamRead>(r: &R) -> EventResult<Option<GlobalLog<LogTable<'_, R>>>> {
    if let Some(t) = open(r, tables::GLOBAL)? {
        return Ok(Some(GlobalLog::V2(t)));
    }
    Ok(open(r, tables::LOG)?.map(GlobalLog::V1))
}

/// The global log's end: the backend's counter if it keeps one (only a v2
/// log's appends set it), else the log's last key + 1.
fn end_of<R: SeamRead>(r: &R, log: Option<&GlobalLog<LogTable<'_, R>>>) -> EventResult<u64> {
    let Some(log) = log else {
        return Ok(0);
    };
    if let GlobalLog::V2(_) = log {
        if let Some(p) = r.table_counter(tables::GLOBAL.name())? {
            return Ok(p);
        }
    }
    Ok(log.table().last()?.map(|(k, _)| k.value() + 1).unwrap_or(0))
}

pub(crate) fn next_position<R: SeamRead>(r: &R) -> EventResult<u64> {
    end_of(r, global_log(r)?.as_ref())
}

/// Hands `visit` up to `limit` global-log events passing `filter`, each
/// read in place, scanning at most `max_scan` entries, until it breaks;
/// returns the position after the last entry scanned (forward) or the last
/// one scanned (backward), for resuming (after a break: the event `visit`
/// broke at is the last scanned).
pub(crate) fn read_all<R: SeamRead>(
    r: &R,
    from: ReadFrom<Position>,
    direction: Direction,
    limit: usize,
    filter: &EventFilter,
    max_scan: u64,
    mut visit: impl FnMut(EventRef<'_>) -> ControlFlow<()>,
) -> EventResult<u64> {
    let log = global_log(r)?;
    let end = end_of(r, log.as_ref())?;
    let past_end = |from| EventError::ReadPastEnd {
        what: "the global log".to_string(),
        from,
        end,
    };
    let (lo, hi) = match (direction, bare(from)) {
        (Direction::Forward, ReadFrom::Start) => (0, end),
        (Direction::Forward, ReadFrom::End) => (end, end),
        (Direction::Forward, ReadFrom::At(p)) if p > end => return Err(past_end(p)),
        (Direction::Forward, ReadFrom::At(p)) => (p, end),
        (Direction::Backward, ReadFrom::Start | ReadFrom::End) => (0, end),
        (Direction::Backward, ReadFrom::At(p)) if p >= end && !(p == 0 && end == 0) => {
            return Err(past_end(p))
        }
        (Direction::Backward, ReadFrom::At(p)) => (0, p.saturating_add(1).min(end)),
    };
    let cursor = if direction == Direction::Forward {
        lo
    } else {
        hi
    };
    if lo >= hi || limit == 0 {
        return Ok(cursor);
    }
    let scan = Scan {
        lo,
        hi,
        direction,
        limit,
        filter,
        max_scan,
    };
    match log {
        None => Ok(cursor),
        Some(GlobalLog::V2(log)) => read_global(r, &log, scan, cursor, visit),
        Some(GlobalLog::V1(log)) => match open(r, tables::EVENTS)? {
            None => Ok(cursor),
            Some(events) => {
                let (found, cursor) = read_log_v1(&log, &events, scan, cursor)?;
                for e in &found {
                    if visit(e.as_event_ref()).is_break() {
                        return Ok(match direction {
                            Direction::Forward => e.position.0 + 1,
                            Direction::Backward => e.position.0,
                        });
                    }
                }
                Ok(cursor)
            }
        },
    }
}

/// What a global read scans: positions `lo..hi` in `direction`, up to
/// `limit` events passing `filter`, at most `max_scan` entries.
#[derive(Clone, Copy)]
struct Scan<'f> {
    lo: u64,
    hi: u64,
    direction: Direction,
    limit: usize,
    filter: &'f EventFilter,
    max_scan: u64,
}

/// A global read of a v2 log: one scan of `$ev.global`; only bodies stored
/// by reference (large ones) are looked up in `$ev.events`.
fn read_global<R: SeamRead>(
    r: &R,
    log: &impl SeamTable<u64, &'static [u8]>,
    scan: Scan<'_>,
    mut cursor: u64,
    mut visit: impl FnMut(EventRef<'_>) -> ControlFlow<()>,
) -> EventResult<u64> {
    let forward = scan.direction == Direction::Forward;
    let mut events = None;
    let (mut scanned, mut found) = (0u64, 0usize);
    // Takes one entry; `false` once the read is complete.
    let mut step = |pos: u64, bytes: &[u8]| -> EventResult<bool> {
        let g = GlobalRecord::decode(bytes, pos)?;
        cursor = if forward { pos + 1 } else { pos };
        scanned += 1;
        if scan.filter.matches(g.event_type, g.stream) {
            let flow = match g.body {
                Some(b) => visit(inline_event(pos, &g, b)),
                None => {
                    if events.is_none() {
                        events = Some(open(r, tables::EVENTS)?);
                    }
                    let t = events.as_ref().and_then(Option::as_ref);
                    by_reference(t, pos, &g, &mut visit)?
                }
            };
            found += 1;
            if found >= scan.limit || flow.is_break() {
                return Ok(false);
            }
        }
        Ok(scanned < scan.max_scan)
    };
    let range = log.range(scan.lo..scan.hi)?;
    if forward {
        for item in range {
            let (k, v) = item?;
            if !step(k.value(), v.value())? {
                break;
            }
        }
    } else {
        for item in range.rev() {
            let (k, v) = item?;
            if !step(k.value(), v.value())? {
                break;
            }
        }
    }
    Ok(cursor)
}

fn inline_event<'a>(pos: u64, g: &GlobalRecord<'a>, b: InlineBody<'a>) -> EventRef<'a> {
    EventRef {
        stream: g.stream,
        version: StreamVersion(g.version),
        position: Position(pos),
        id: Uuid::from_bytes(b.id),
        event_type: g.event_type,
        data: b.data,
        metadata: b.metadata,
        recorded_at_micros: b.recorded_at,
    }
}

/// Hands `visit` the event a global record names by reference, read in
/// place from `$ev.events`.
fn by_reference(
    events: Option<&impl SeamTable<(u64, u64), &'static [u8]>>,
    pos: u64,
    g: &GlobalRecord<'_>,
    visit: &mut impl FnMut(EventRef<'_>) -> ControlFlow<()>,
) -> EventResult<ControlFlow<()>> {
    let missing = || missing_event(pos, g.version, g.stream);
    let guard = events
        .ok_or_else(missing)?
        .get((g.stream_id, g.version))?
        .ok_or_else(missing)?;
    let e = event_ref(g.stream, g.version, guard.value())?;
    if e.position.0 != pos {
        return Err(corrupt(
            "global log",
            format!(
                "position {pos} names event {} of stream {:?}, which records position {}",
                g.version, g.stream, e.position.0
            ),
        ));
    }
    Ok(visit(e))
}

/// A global read of a v1 log (a file not yet upgraded): the log names the
/// events, which are then looked up in key order.
fn read_log_v1(
    log: &impl SeamTable<u64, &'static [u8]>,
    events: &impl SeamTable<(u64, u64), &'static [u8]>,
    scan: Scan<'_>,
    mut cursor: u64,
) -> EventResult<(Vec<RecordedEvent>, u64)> {
    let Scan {
        lo,
        hi,
        direction,
        limit,
        filter,
        max_scan,
    } = scan;
    // First the log: which events, in log order.
    let range = log.range(lo..hi)?;
    let iter: Box<dyn Iterator<Item = _>> = match direction {
        Direction::Forward => Box::new(range),
        Direction::Backward => Box::new(range.rev()),
    };
    // (stream id, version, position) and the stream's name, per event.
    let mut wanted: Vec<(u64, u64, u64)> = Vec::with_capacity(limit.min(4096));
    let mut names: Vec<String> = Vec::with_capacity(limit.min(4096));
    let mut scanned = 0u64;
    for item in iter {
        let (k, v) = item?;
        let pos = k.value();
        let entry = LogEntry::decode(v.value())?;
        cursor = if direction == Direction::Forward {
            pos + 1
        } else {
            pos
        };
        scanned += 1;
        if filter.matches(entry.event_type, entry.stream) {
            wanted.push((entry.stream_id, entry.version, pos));
            names.push(entry.stream.to_string());
            if wanted.len() >= limit {
                break;
            }
        }
        if scanned >= max_scan {
            break;
        }
    }
    // Then the events, in key order: consecutive versions of one stream
    // are one range read instead of a lookup each (a log interleaving
    // streams names each stream's events in runs).
    let mut order: Vec<usize> = (0..wanted.len()).collect();
    order.sort_unstable_by_key(|&i| (wanted[i].0, wanted[i].1));
    let mut found: Vec<Option<RecordedEvent>> = Vec::with_capacity(wanted.len());
    found.resize_with(wanted.len(), || None);
    let missing = |i: usize, names: &[String]| -> EventError {
        let (_, version, pos) = wanted[i];
        missing_event(pos, version, names.get(i).map_or("", |s| s.as_str()))
    };
    let mut at = 0;
    while at < order.len() {
        let (sid, first) = (wanted[order[at]].0, wanted[order[at]].1);
        let mut end = at + 1;
        while end < order.len()
            && wanted[order[end]].0 == sid
            && wanted[order[end]].1 == first + (end - at) as u64
        {
            end += 1;
        }
        let run = &order[at..end];
        if run.len() == 1 {
            let i = run[0];
            let g = events
                .get((sid, first))?
                .ok_or_else(|| missing(i, &names))?;
            found[i] = Some(recorded(std::mem::take(&mut names[i]), first, g.value())?);
        } else {
            // Open-ended: positioning the end of a bounded range would
            // cost a second descent; the keys are checked one by one.
            let mut it = events.range((sid, first)..)?;
            for &i in run {
                let (k, g) = it.next().transpose()?.ok_or_else(|| missing(i, &names))?;
                if k.value() != (sid, wanted[i].1) {
                    return Err(missing(i, &names));
                }
                found[i] = Some(recorded(
                    std::mem::take(&mut names[i]),
                    wanted[i].1,
                    g.value(),
                )?);
            }
        }
        at = end;
    }
    let mut out = Vec::with_capacity(found.len());
    for (i, e) in found.into_iter().enumerate() {
        out.push(e.ok_or_else(|| missing(i, &names))?);
    }
    Ok((out, cursor))
}

fn info(name: &str, rec: &StreamRecord) -> StreamInfo {
    StreamInfo {
        name: name.to_string(),
        version: rec.current_version().map(StreamVersion),
        state: rec.state,
        metadata: StreamMetadata {
            max_count: (rec.max_count != u64::MAX).then_some(rec.max_count),
            truncate_before: (rec.truncate_before > 0)
                .then_some(StreamVersion(rec.truncate_before)),
        },
        first_visible: StreamVersion(rec.first_visible()),
    }
}

pub(crate) fn stream_info<R: SeamRead>(r: &R, stream: &str) -> EventResult<Option<StreamInfo>> {
    super::check_stream_name(stream)?;
    let Some(t) = open(r, tables::STREAMS)? else {
        return Ok(None);
    };
    Ok(get_stream(&t, stream)?.map(|rec| info(stream, &rec)))
}

pub(crate) fn list_streams<R: SeamRead>(r: &R, prefix: &str) -> EventResult<Vec<StreamInfo>> {
    let Some(t) = open(r, tables::STREAMS)? else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for item in t.range(prefix..)? {
        let (k, v) = item?;
        let name = k.value();
        if !name.starts_with(prefix) {
            break;
        }
        out.push(info(name, &StreamRecord::decode(v.value())?));
    }
    Ok(out)
}

pub(crate) fn load<R: SeamRead>(
    r: &R,
    stream: &str,
    version: Option<StreamVersion>,
) -> EventResult<Loaded> {
    load_with(
        r,
        stream,
        version,
        |snapshot| Loaded {
            snapshot: snapshot.map(|(v, bytes)| (v, bytes.to_vec())),
            events: Vec::new(),
        },
        |loaded, e| {
            loaded.events.push(e.to_owned());
            ControlFlow::Continue(())
        },
    )
}

/// [`load`] as a fold: `init` makes the state from the snapshot (if any),
/// then `apply` takes each event after it, read in place, until it breaks.
pub(crate) fn load_with<R: SeamRead, S>(
    r: &R,
    stream: &str,
    version: Option<StreamVersion>,
    init: impl FnOnce(Option<(StreamVersion, &[u8])>) -> S,
    mut apply: impl FnMut(&mut S, EventRef<'_>) -> ControlFlow<()>,
) -> EventResult<S> {
    let Some(rec) = readable_stream(r, stream)? else {
        return Err(EventError::StreamNotFound(stream.to_string()));
    };
    let end = match version.map(u64::from) {
        Some(v) if v >= rec.next_version => {
            return Err(EventError::ReadPastEnd {
                what: format!("stream {stream:?}"),
                from: v,
                end: rec.next_version,
            })
        }
        Some(v) => v + 1,
        None => rec.next_version,
    };
    let snapshots = if end > 0 {
        open(r, tables::SNAPSHOTS)?
    } else {
        None
    };
    let newest = match &snapshots {
        Some(t) => t
            .range((rec.id, 0)..(rec.id, end))?
            .next_back()
            .transpose()?,
        None => None,
    };
    let (lo, mut state) = match &newest {
        Some((k, v)) => (
            k.value().1 + 1,
            init(Some((StreamVersion(k.value().1), v.value()))),
        ),
        None => (rec.first_visible(), init(None)),
    };
    visit_stream(
        r,
        stream,
        &rec,
        (lo, end, Direction::Forward, usize::MAX),
        |e| apply(&mut state, e),
    )?;
    Ok(state)
}

/// Checks the layer's invariants in one snapshot (FORMAT.md, "Event
/// streams"): global positions dense from 0; every global record names an
/// existing event holding the same position, its inline body equal to the
/// event's and its stream name that of the stream with its id; every
/// stream's events have versions `0 .. next_version`. A v1 file (not yet
/// upgraded) is checked against v1's rules. Returns the problems found
/// (empty: consistent).
pub(crate) fn check<R: SeamRead>(r: &R) -> EventResult<Vec<String>> {
    let mut problems = Vec::new();
    if let (Some(_), Some(_)) = (open(r, tables::GLOBAL)?, open(r, tables::LOG)?) {
        problems.push("both layouts: $ev.global (v2) and $ev.log (v1) are present".to_string());
    }
    let (Some(streams), Some(events), Some(log)) = (
        open(r, tables::STREAMS)?,
        open(r, tables::EVENTS)?,
        global_log(r)?,
    ) else {
        return Ok(problems);
    };
    let mut expected_pos = 0u64;
    let mut visit = |pos: u64, g: &GlobalRecord<'_>| -> EventResult<()> {
        if pos != expected_pos {
            problems.push(format!(
                "global log: position {expected_pos} is missing (next is {pos})"
            ));
        }
        expected_pos = pos + 1;
        let Some(guard) = events.get((g.stream_id, g.version))? else {
            problems.push(format!(
                "global log: position {pos} names event {} of stream {:?}, which is missing",
                g.version, g.stream
            ));
            return Ok(());
        };
        let rec = EventRecord::decode(guard.value())?;
        if rec.position != pos {
            problems.push(format!(
                "event {} of stream {:?} records position {}, but the log has it at {pos}",
                g.version, g.stream, rec.position
            ));
        }
        let same_body = g.body.is_none_or(|b| {
            (b.id, b.recorded_at, b.metadata, b.data)
                == (rec.id, rec.recorded_at, rec.metadata, rec.data)
        });
        if !same_body || g.event_type != rec.event_type {
            problems.push(format!(
                "global log: the body at position {pos} differs from event {} of stream {:?}",
                g.version, g.stream
            ));
        }
        let named = get_stream(&streams, g.stream)?.map(|s| s.id);
        if named != Some(g.stream_id) {
            problems.push(format!(
                "global log: position {pos} names stream {:?} with id {}, whose record has id {:?}",
                g.stream, g.stream_id, named
            ));
        }
        Ok(())
    };
    for item in log.table().iter()? {
        let (k, v) = item?;
        let pos = k.value();
        match &log {
            GlobalLog::V2(_) => visit(pos, &GlobalRecord::decode(v.value(), pos)?)?,
            GlobalLog::V1(_) => {
                let e = LogEntry::decode(v.value())?;
                let g = GlobalRecord {
                    stream_id: e.stream_id,
                    version: e.version,
                    event_type: e.event_type,
                    stream: e.stream,
                    body: None,
                };
                visit(pos, &g)?;
            }
        }
    }
    let log_len = log.table().len()?;
    let mut total = 0u64;
    for item in streams.iter()? {
        let (k, v) = item?;
        let name = k.value();
        let rec = StreamRecord::decode(v.value())?;
        let mut expected_version = 0u64;
        for item in events.range((rec.id, 0)..=(rec.id, u64::MAX))? {
            let (k, _) = item?;
            let version = k.value().1;
            if version != expected_version {
                problems.push(format!(
                    "stream {name:?}: version {expected_version} is missing (next is {version})"
                ));
            }
            expected_version = version + 1;
        }
        if expected_version != rec.next_version {
            problems.push(format!(
                "stream {name:?}: holds versions up to {expected_version}, its record says {}",
                rec.next_version
            ));
        }
        total += expected_version;
    }
    if let Some(ids) = open(r, tables::IDS)? {
        // Every event's id names, in its stream, a version whose event has
        // that id; every entry names such an event.
        let named = |k: &[u8], version: u64| -> EventResult<Option<String>> {
            let (Some(s), Some(id)) = (k.get(..8), k.get(8..)) else {
                return Ok(Some(format!("event ids: an entry of {} bytes", k.len())));
            };
            let stream_id = u64::from_be_bytes(s.try_into().unwrap_or_default());
            Ok(match events.get((stream_id, version))? {
                None => Some(format!(
                    "event ids: an id of stream id {stream_id} names version {version}, which is missing"
                )),
                Some(g) if EventRecord::decode(g.value())?.id[..] != *id => Some(format!(
                    "event ids: an id of stream id {stream_id} names version {version}, which has another id"
                )),
                Some(_) => None,
            })
        };
        for item in ids.iter()? {
            let (k, v) = item?;
            if let Some(p) = named(k.value(), v.value())? {
                problems.push(p);
            }
        }
        for item in events.iter()? {
            let (k, v) = item?;
            let (stream_id, version) = k.value();
            let rec = EventRecord::decode(v.value())?;
            if ids.get(id_key(stream_id, &rec.id).as_slice())?.is_none() {
                problems.push(format!(
                    "event ids: event {version} of stream id {stream_id} has no entry"
                ));
            }
        }
    }
    let records = events.len()?;
    if total != log_len || records != log_len {
        problems.push(format!(
            "{total} events in streams, {records} event records, {log_len} global log entries"
        ));
    }
    Ok(problems)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{EventStore, ExpectedVersion};
    use crate::Database;

    /// A new database (in its own directory) whose stream "s" holds three
    /// small events.
    fn db_with_stream_s() -> (tempfile::TempDir, Database) {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::create(dir.path().join("t.cairn")).unwrap();
        EventStore::new(&db)
            .append("s", ExpectedVersion::Any, &three_events())
            .unwrap();
        (dir, db)
    }

    fn three_events() -> Vec<EventData> {
        (0..3).map(|_| EventData::new("T", vec![1])).collect()
    }

    #[test]
    fn check_finds_a_missing_log_entry_and_a_version_gap() {
        let (_dir, db) = db_with_stream_s();
        let store = EventStore::new(&db);
        store
            .append("t", ExpectedVersion::Any, &three_events())
            .unwrap();
        assert!(store.check().unwrap().is_empty());
        let txn = db.begin_write().unwrap();
        txn.open_table(tables::GLOBAL).unwrap().remove(1).unwrap();
        txn.open_table(tables::EVENTS)
            .unwrap()
            .remove((1, 1))
            .unwrap();
        txn.commit().unwrap();
        let problems = store.check().unwrap();
        assert!(
            problems.iter().any(|p| p.contains("position 1 is missing")),
            "{problems:?}"
        );
        assert!(
            problems
                .iter()
                .any(|p| p.contains("names event 1 of stream \"t\"")),
            "{problems:?}"
        );
        assert!(
            problems
                .iter()
                .any(|p| p.contains("stream \"t\": version 1 is missing")),
            "{problems:?}"
        );
    }

    /// Rewrites a v2 layer as v1 (`$ev.log` entries, no `$ev.global`): what
    /// a file written before the upgrade holds.
    fn downgrade_to_v1(db: &Database) {
        let txn = db.begin_write().unwrap();
        downgrade_in(&txn);
        txn.commit().unwrap();
    }

    /// `downgrade_to_v1` inside `txn`.
    fn downgrade_in(txn: &crate::WriteTransaction) {
        let mut entries = Vec::new();
        {
            let g = txn.open_table(tables::GLOBAL).unwrap();
            for item in g.iter().unwrap() {
                let (k, v) = item.unwrap();
                let r = GlobalRecord::decode(v.value(), k.value()).unwrap();
                let mut buf = Vec::new();
                LogEntry {
                    stream_id: r.stream_id,
                    version: r.version,
                    event_type: r.event_type,
                    stream: r.stream,
                }
                .encode_into(&mut buf);
                entries.push((k.value(), buf));
            }
        }
        {
            let mut log = txn.open_table(tables::LOG).unwrap();
            for (pos, buf) in &entries {
                log.insert(*pos, buf.as_slice()).unwrap();
            }
        }
        txn.delete_internal_table(tables::GLOBAL.name()).unwrap();
    }

    /// The log-end memo (which also says the layer is current) is not used
    /// by a transaction that changed the catalog: one that made the layer
    /// v1 again (and dropped `$ev.ids`) since the remembered commit still
    /// has its first append bring the layer up to date.
    #[test]
    fn the_log_end_memo_does_not_skip_the_layer_check_after_the_catalog_changed() {
        let (_dir, db) = db_with_stream_s();
        let store = EventStore::new(&db).with_durability(crate::Durability::None);
        // This append's commit is remembered (its log end, and so the
        // layer current).
        store
            .append("t", ExpectedVersion::Any, &three_events())
            .unwrap();
        let txn = db.begin_write().unwrap();
        downgrade_in(&txn);
        txn.delete_internal_table(tables::IDS.name()).unwrap();
        EventWriter::new(&txn)
            .append("u", ExpectedVersion::Any, &three_events())
            .unwrap();
        txn.commit().unwrap();
        assert!(!has_table(&db, "$ev.log") && has_table(&db, "$ev.global"));
        assert!(store.check().unwrap().is_empty(), "{:?}", store.check());
        // Every event's id is in `$ev.ids` again: a retry of the first
        // append is recognized as one.
        let first = store
            .read_stream("s", ReadFrom::Start, Direction::Forward, 1)
            .unwrap();
        let retry = EventData::new("T", vec![1]).with_id(first[0].id);
        let again = store.append("s", ExpectedVersion::Any, &[retry]).unwrap();
        assert_eq!(again.first_position, Some(first[0].position), "{again:?}");
    }

    fn everything(store: &EventStore<'_>) -> Vec<RecordedEvent> {
        let mut all = store
            .read_all(
                ReadFrom::Start,
                Direction::Forward,
                usize::MAX,
                &EventFilter::all(),
            )
            .unwrap();
        all.extend(
            store
                .read_all(ReadFrom::End, Direction::Backward, 7, &EventFilter::all())
                .unwrap(),
        );
        for name in ["s", "t"] {
            all.extend(
                store
                    .read_stream(name, ReadFrom::Start, Direction::Forward, usize::MAX)
                    .unwrap(),
            );
        }
        all
    }

    fn has_table(db: &Database, name: &str) -> bool {
        db.begin_read()
            .unwrap()
            .table_types(name)
            .unwrap()
            .is_some()
    }

    /// A v1 layer reads the same as v2, is upgraded by the first change (in
    /// its transaction: an aborted one leaves v1), and reads the same after.
    #[test]
    fn a_v1_layer_reads_the_same_and_upgrades_on_the_first_change() {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::create(dir.path().join("v1.cairn")).unwrap();
        let store = EventStore::new(&db);
        for i in 0..40u8 {
            let name = if i % 3 == 0 { "s" } else { "t" };
            // Every fifth payload is too large to be inline.
            let size = if i % 5 == 0 { 3000 } else { 1 + i as usize };
            let e = EventData::new("T", vec![i; size]).with_metadata(vec![i]);
            store.append(name, ExpectedVersion::Any, &[e]).unwrap();
        }
        let v2 = everything(&store);
        assert_eq!(v2.len(), 40 + 7 + 40);
        downgrade_to_v1(&db);
        assert!(has_table(&db, "$ev.log") && !has_table(&db, "$ev.global"));
        assert_eq!(everything(&store), v2, "v1 reads");
        assert!(store.check().unwrap().is_empty());
        // An aborted transaction keeps v1.
        let txn = db.begin_write().unwrap();
        EventWriter::new(&txn)
            .append("u", ExpectedVersion::Any, &[EventData::new("T", vec![1])])
            .unwrap();
        txn.abort();
        assert!(has_table(&db, "$ev.log") && !has_table(&db, "$ev.global"));
        // A snapshot (no event appended) upgrades.
        store.save_snapshot("s", StreamVersion(2), b"x").unwrap();
        assert!(!has_table(&db, "$ev.log") && has_table(&db, "$ev.global"));
        assert_eq!(everything(&store), v2, "v2 reads after the upgrade");
        assert!(store.check().unwrap().is_empty());
        let r = store
            .append("t", ExpectedVersion::Any, &[EventData::new("T", vec![2])])
            .unwrap();
        assert_eq!(r.first_position, Some(Position(40)));
        assert!(store.check().unwrap().is_empty());
    }

    /// A damaged v1 log fails the upgrade with an error naming the
    /// position, and the file keeps its v1 layout.
    #[test]
    fn a_damaged_v1_log_fails_the_upgrade_and_stays_v1() {
        let (_dir, db) = db_with_stream_s();
        let store = EventStore::new(&db);
        downgrade_to_v1(&db);
        let txn = db.begin_write().unwrap();
        txn.open_table(tables::EVENTS)
            .unwrap()
            .remove((0, 1))
            .unwrap();
        txn.commit().unwrap();
        let err = store
            .append("s", ExpectedVersion::Any, &three_events()[..1])
            .unwrap_err()
            .to_string();
        assert!(err.contains("position 1 names event 1"), "{err}");
        assert!(has_table(&db, "$ev.log") && !has_table(&db, "$ev.global"));
        let txn = db.begin_write().unwrap();
        txn.open_table(tables::LOG)
            .unwrap()
            .insert(1, b"\x01".as_slice())
            .unwrap();
        txn.commit().unwrap();
        let err = store
            .delete_stream("s", ExpectedVersion::Any, false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("entry at position 1"), "{err}");
    }

    /// Damaged global records are typed errors naming their position, and
    /// `check` finds a body that differs from its event's.
    #[test]
    fn damaged_global_records_are_named() {
        let (_dir, db) = db_with_stream_s();
        let store = EventStore::new(&db);
        let good = {
            let r = db.begin_read().unwrap();
            let t = r.open_table(tables::GLOBAL).unwrap();
            let v = t.get(2).unwrap().unwrap().value().to_vec();
            v
        };
        let put = |bytes: &[u8]| {
            let txn = db.begin_write().unwrap();
            txn.open_table(tables::GLOBAL)
                .unwrap()
                .insert(2, bytes)
                .unwrap();
            txn.commit().unwrap();
        };
        let all = || store.read_all(ReadFrom::Start, Direction::Forward, 9, &EventFilter::all());
        for bad in [&good[..5], &[7u8; 30][..], &good[..good.len() - 1]] {
            put(bad);
            if bad.len() == good.len() - 1 {
                // Still parses (the data is the rest); `check` sees it.
                assert!(all().is_ok());
                let p = store.check().unwrap();
                assert!(p.iter().any(|p| p.contains("body at position 2")), "{p:?}");
                continue;
            }
            let err = all().unwrap_err().to_string();
            assert!(err.contains("position 2"), "{err}");
            assert!(store.check().is_err());
        }
        // A form-0 record with bytes after the stream name is corrupt.
        let mut by_ref = good.clone();
        by_ref[0] = 0;
        put(&by_ref);
        assert!(all().unwrap_err().to_string().contains("position 2"));
        // A form-0 record whose event is gone names it.
        let name_end = 20 + 1 + 1;
        put(&by_ref[..name_end]);
        assert_eq!(all().unwrap().len(), 3, "by reference reads the event");
        let txn = db.begin_write().unwrap();
        txn.open_table(tables::EVENTS)
            .unwrap()
            .remove((0, 2))
            .unwrap();
        txn.commit().unwrap();
        let err = all().unwrap_err().to_string();
        assert!(err.contains("position 2 names event 2"), "{err}");
    }
}
