//! Event streams: append, read, the global log and subscriptions.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cairndb::events::{
    Direction, EventData, EventFilter, EventStore, EventWriter, ExpectedVersion, Position,
    ReadFrom, StreamInfo, StreamMetadata, StreamState, StreamVersion, SubscriptionMessage,
    SubscriptionStop, Uuid,
};
use cairndb::{Database as RsDatabase, Durability};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString, PyTuple};

use crate::db::{autocommit_with, in_txn, lock, read_in, DbShared, Fail, Reads, TxInner};
use crate::errors::{event_err, ClosedError};
use crate::wait::{self, Slice};

/// What an append did.
#[pyclass(module = "cairndb", frozen, get_all)]
pub struct AppendResult {
    /// The stream's version after the append (its last event's), or None.
    version: Option<u64>,
    /// The global position of the first appended event (for an idempotent
    /// repeat, of the first event already written; None if none was
    /// written); the others follow it densely.
    first_position: Option<u64>,
    /// How many events first_position covers: written, or already written
    /// for an idempotent repeat.
    count: u64,
    /// Whether the append repeated an earlier one (same event ids) and wrote
    /// nothing.
    idempotent: bool,
}

#[pymethods]
impl AppendResult {
    fn __repr__(&self) -> String {
        let opt = |v: Option<u64>| v.map_or_else(|| "None".to_string(), |v| v.to_string());
        format!(
            "AppendResult(version={}, first_position={}, count={}, idempotent={})",
            opt(self.version),
            opt(self.first_position),
            self.count,
            if self.idempotent { "True" } else { "False" }
        )
    }
}

/// An event as stored: `stream`, `version` (within the stream, from 0),
/// `position` (in the global log, from 0), `id` (uuid.UUID), `type`,
/// `data` and `metadata` (bytes), `recorded_at_micros` (since the Unix
/// epoch).
#[pyclass(module = "cairndb", frozen, get_all)]
pub struct RecordedEvent {
    stream: String,
    version: u64,
    position: u64,
    id: PyObject,
    #[pyo3(name = "type")]
    event_type: String,
    data: PyObject,
    metadata: PyObject,
    recorded_at_micros: u64,
}

#[pymethods]
impl RecordedEvent {
    fn __repr__(&self) -> String {
        format!(
            "RecordedEvent(stream={:?}, version={}, position={}, type={:?})",
            self.stream, self.version, self.position, self.event_type
        )
    }
}

fn recorded(py: Python<'_>, e: cairndb::events::RecordedEvent) -> PyResult<RecordedEvent> {
    let uuid = py
        .import("uuid")?
        .getattr("UUID")?
        .call1((e.id.simple().to_string(),))?;
    Ok(RecordedEvent {
        stream: e.stream,
        version: e.version.0,
        position: e.position.0,
        id: uuid.unbind(),
        event_type: e.event_type,
        data: PyBytes::new(py, &e.data).into_any().unbind(),
        metadata: PyBytes::new(py, &e.metadata).into_any().unbind(),
        recorded_at_micros: e.recorded_at_micros,
    })
}

fn recorded_all(
    py: Python<'_>,
    es: Vec<cairndb::events::RecordedEvent>,
) -> PyResult<Vec<RecordedEvent>> {
    es.into_iter().map(|e| recorded(py, e)).collect()
}

/// bytes, bytearray or str (UTF-8) as bytes.
fn payload(v: Option<Bound<'_, PyAny>>, what: &str) -> PyResult<Vec<u8>> {
    let Some(v) = v else { return Ok(Vec::new()) };
    if v.is_none() {
        return Ok(Vec::new());
    }
    if let Ok(b) = v.downcast::<PyBytes>() {
        return Ok(b.as_bytes().to_vec());
    }
    if let Ok(s) = v.downcast::<PyString>() {
        return Ok(s.to_cow()?.as_bytes().to_vec());
    }
    if let Ok(b) = v.downcast::<pyo3::types::PyByteArray>() {
        return Ok(b.to_vec());
    }
    Err(PyTypeError::new_err(format!(
        "an event's {what} must be bytes or str"
    )))
}

fn event_id(v: &Bound<'_, PyAny>) -> PyResult<Uuid> {
    if let Ok(s) = v.downcast::<PyString>() {
        return Uuid::parse_str(&s.to_cow()?)
            .map_err(|e| PyValueError::new_err(format!("bad event id: {e}")));
    }
    let b: Vec<u8> = v
        .getattr("bytes")
        .and_then(|b| b.extract())
        .map_err(|_| PyTypeError::new_err("an event id must be a uuid.UUID or str"))?;
    Uuid::from_slice(&b).map_err(|e| PyValueError::new_err(format!("bad event id: {e}")))
}

/// The events of an append: dicts or `(type, data)` tuples.
fn events_arg(events: &Bound<'_, PyAny>) -> PyResult<Vec<EventData>> {
    let mut out = Vec::new();
    for item in events.try_iter()? {
        let item = item?;
        if let Ok(d) = item.downcast::<PyDict>() {
            let t: String = d
                .get_item("type")?
                .ok_or_else(|| PyValueError::new_err("an event dict needs a \"type\""))?
                .extract()?;
            let mut e = EventData::new(t, payload(d.get_item("data")?, "data")?)
                .with_metadata(payload(d.get_item("metadata")?, "metadata")?);
            if let Some(id) = d.get_item("id")? {
                if !id.is_none() {
                    e = e.with_id(event_id(&id)?);
                }
            }
            out.push(e);
        } else if let Ok(t) = item.downcast::<PyTuple>() {
            if t.len() != 2 {
                return Err(PyValueError::new_err("an event tuple is (type, data)"));
            }
            let ty: String = t.get_item(0)?.extract()?;
            out.push(EventData::new(ty, payload(Some(t.get_item(1)?), "data")?));
        } else {
            return Err(PyTypeError::new_err(
                "events are dicts {\"type\": ..., \"data\": ...} or (type, data) tuples",
            ));
        }
    }
    Ok(out)
}

/// None / "any", "no_stream", "exists", or an int version.
fn expected_arg(v: Option<&Bound<'_, PyAny>>) -> PyResult<ExpectedVersion> {
    let Some(v) = v else {
        return Ok(ExpectedVersion::Any);
    };
    if v.is_none() {
        return Ok(ExpectedVersion::Any);
    }
    if let Ok(s) = v.downcast::<PyString>() {
        return match s.to_cow()?.as_ref() {
            "any" => Ok(ExpectedVersion::Any),
            "no_stream" => Ok(ExpectedVersion::NoStream),
            "exists" => Ok(ExpectedVersion::Exists),
            o => Err(PyValueError::new_err(format!(
                "expected_version is None, \"any\", \"no_stream\", \"exists\" or an int, not {o:?}"
            ))),
        };
    }
    let n: u64 = v.extract().map_err(|_| {
        PyTypeError::new_err(
            "expected_version is None, \"any\", \"no_stream\", \"exists\" or an int >= 0",
        )
    })?;
    Ok(ExpectedVersion::Exact(StreamVersion(n)))
}

fn append_result(r: cairndb::events::AppendResult) -> AppendResult {
    AppendResult {
        version: r.version.map(|v| v.0),
        first_position: r.first_position.map(|p| p.0),
        count: r.count,
        idempotent: r.idempotent,
    }
}

/// `Database.append`.
pub fn append(
    py: Python<'_>,
    shared: &DbShared,
    d: Durability,
    stream: String,
    events: &Bound<'_, PyAny>,
    expected: Option<&Bound<'_, PyAny>>,
) -> PyResult<AppendResult> {
    let evs = events_arg(events)?;
    let exp = expected_arg(expected)?;
    let db = shared.for_write()?;
    let r = py
        .allow_threads(move || {
            EventStore::new(&db)
                .with_durability(d)
                .append(&stream, exp, &evs)
        })
        .map_err(event_err)?;
    Ok(append_result(r))
}

/// `Transaction.append`.
pub fn append_in_txn(
    py: Python<'_>,
    tx: &TxInner,
    stream: String,
    events: &Bound<'_, PyAny>,
    expected: Option<&Bound<'_, PyAny>>,
) -> PyResult<AppendResult> {
    let evs = events_arg(events)?;
    let exp = expected_arg(expected)?;
    let r = in_txn(py, tx, move |w| {
        Ok(EventWriter::new(w).append(&stream, exp, &evs)?)
    })?;
    Ok(append_result(r))
}

/// `Database.read`.
pub fn read(
    py: Python<'_>,
    reads: &Reads,
    stream: String,
    from: Option<u64>,
    backward: bool,
    limit: Option<usize>,
) -> PyResult<Vec<RecordedEvent>> {
    let from = from.map_or(ReadFrom::Start, |v| ReadFrom::At(StreamVersion(v)));
    let dir = if backward {
        Direction::Backward
    } else {
        Direction::Forward
    };
    let es = read_in(py, reads, move |r| {
        Ok(r.events()
            .read_stream(&stream, from, dir, limit.unwrap_or(usize::MAX))?)
    })?;
    recorded_all(py, es)
}

fn filter_of(types: Option<Vec<String>>, prefix: Option<String>) -> EventFilter {
    let mut f = EventFilter::all();
    f.event_types = types.unwrap_or_default();
    f.stream_prefix = prefix;
    f
}

/// `Database.read_all`.
pub fn read_all(
    py: Python<'_>,
    reads: &Reads,
    from: Option<u64>,
    backward: bool,
    limit: Option<usize>,
    types: Option<Vec<String>>,
    prefix: Option<String>,
) -> PyResult<Vec<RecordedEvent>> {
    let from = from.map_or(ReadFrom::Start, |v| ReadFrom::At(Position(v)));
    let dir = if backward {
        Direction::Backward
    } else {
        Direction::Forward
    };
    let filter = filter_of(types, prefix);
    let es = read_in(py, reads, move |r| {
        Ok(r.events()
            .read_all(from, dir, limit.unwrap_or(usize::MAX), &filter)?)
    })?;
    recorded_all(py, es)
}

/// `Database.stream_version`.
pub fn stream_version(py: Python<'_>, reads: &Reads, stream: String) -> PyResult<Option<u64>> {
    read_in(py, reads, move |r| {
        Ok(r.events().stream_version(&stream)?.map(|v| v.0))
    })
}

/// `Database.delete_stream`.
pub fn delete_stream(
    py: Python<'_>,
    shared: &DbShared,
    d: Durability,
    stream: String,
    expected: Option<&Bound<'_, PyAny>>,
    hard: bool,
) -> PyResult<()> {
    let exp = expected_arg(expected)?;
    autocommit_with(py, shared, d, move |w| {
        Ok(EventWriter::new(w).delete_stream(&stream, exp, hard)?)
    })
}

/// A stream's state and settings as a dict: `name`, `version` (None: no
/// events), `state` ("live", "deleted", "tombstoned"), `first_visible`,
/// `max_count` and `truncate_before` (None: not set).
fn info_dict(py: Python<'_>, i: &StreamInfo) -> PyResult<PyObject> {
    let d = PyDict::new(py);
    d.set_item("name", &i.name)?;
    d.set_item("version", i.version.map(|v| v.0))?;
    d.set_item(
        "state",
        match i.state {
            StreamState::Live => "live",
            StreamState::SoftDeleted => "deleted",
            StreamState::HardDeleted => "tombstoned",
        },
    )?;
    d.set_item("first_visible", i.first_visible.0)?;
    d.set_item("max_count", i.metadata.max_count)?;
    d.set_item("truncate_before", i.metadata.truncate_before.map(|v| v.0))?;
    Ok(d.into_any().unbind())
}

/// `Database.list_streams`.
pub fn list_streams(py: Python<'_>, reads: &Reads, prefix: String) -> PyResult<Vec<PyObject>> {
    let infos = read_in(py, reads, move |r| Ok(r.events().list_streams(&prefix)?))?;
    infos.iter().map(|i| info_dict(py, i)).collect()
}

/// `Database.stream_info`.
pub fn stream_info(py: Python<'_>, reads: &Reads, stream: String) -> PyResult<Option<PyObject>> {
    let info = read_in(py, reads, move |r| Ok(r.events().stream_info(&stream)?))?;
    info.map(|i| info_dict(py, &i)).transpose()
}

/// `Database.next_position`.
pub fn next_position(py: Python<'_>, reads: &Reads) -> PyResult<u64> {
    read_in(py, reads, |r| Ok(r.events().next_position()?.0))
}

fn metadata_arg(max_count: Option<u64>, truncate_before: Option<u64>) -> StreamMetadata {
    StreamMetadata {
        max_count,
        truncate_before: truncate_before.map(StreamVersion),
    }
}

/// `Database.set_stream_metadata`.
pub fn set_stream_metadata(
    py: Python<'_>,
    shared: &DbShared,
    d: Durability,
    stream: String,
    max_count: Option<u64>,
    truncate_before: Option<u64>,
) -> PyResult<()> {
    let meta = metadata_arg(max_count, truncate_before);
    autocommit_with(py, shared, d, move |w| {
        Ok(EventWriter::new(w).set_stream_metadata(&stream, meta)?)
    })
}

/// `Transaction.set_stream_metadata`.
pub fn set_stream_metadata_in_txn(
    py: Python<'_>,
    tx: &TxInner,
    stream: String,
    max_count: Option<u64>,
    truncate_before: Option<u64>,
) -> PyResult<()> {
    let meta = metadata_arg(max_count, truncate_before);
    in_txn(py, tx, move |w| {
        Ok(EventWriter::new(w).set_stream_metadata(&stream, meta)?)
    })
}

/// `Database.save_snapshot`.
pub fn save_snapshot(
    py: Python<'_>,
    shared: &DbShared,
    d: Durability,
    stream: String,
    version: u64,
    state: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let state = snapshot_state(state)?;
    autocommit_with(py, shared, d, move |w| {
        Ok(EventWriter::new(w).save_snapshot(&stream, StreamVersion(version), &state)?)
    })
}

/// `Transaction.save_snapshot`.
pub fn save_snapshot_in_txn(
    py: Python<'_>,
    tx: &TxInner,
    stream: String,
    version: u64,
    state: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let state = snapshot_state(state)?;
    in_txn(py, tx, move |w| {
        Ok(EventWriter::new(w).save_snapshot(&stream, StreamVersion(version), &state)?)
    })
}

/// A snapshot's state: bytes, bytearray or str (stored as UTF-8).
fn snapshot_state(v: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    if v.is_none() {
        return Err(PyTypeError::new_err(
            "a snapshot's state must be bytes or str, not None",
        ));
    }
    payload(Some(v.clone()), "snapshot state")
        .map_err(|_| PyTypeError::new_err("a snapshot's state must be bytes or str"))
}

/// What `db.load(stream)` returns: the newest snapshot at or below the
/// requested version (`snapshot_version` and its `state` bytes, both None
/// if none was saved) and `events`, the stream's visible events after it
/// up to that version. `version` is the version the load reached: the one
/// asked for, else the last event's, or the snapshot's when no event
/// follows it (None for a stream without visible events or snapshot).
#[pyclass(module = "cairndb", frozen, get_all)]
pub struct LoadedStream {
    /// The stream.
    stream: String,
    /// The version of the snapshot used, or None.
    snapshot_version: Option<u64>,
    /// The snapshot's state (bytes), or None.
    state: Option<PyObject>,
    /// The events after the snapshot, oldest first.
    events: Vec<Py<RecordedEvent>>,
    /// The version reached: the one asked for, else the last event's, else
    /// the snapshot's.
    version: Option<u64>,
}

#[pymethods]
impl LoadedStream {
    fn __repr__(&self) -> String {
        let opt = |v: Option<u64>| v.map_or_else(|| "None".to_string(), |v| v.to_string());
        format!(
            "LoadedStream(stream={:?}, snapshot_version={}, events={}, version={})",
            self.stream,
            opt(self.snapshot_version),
            self.events.len(),
            opt(self.version)
        )
    }
}

/// `Database.load`.
pub fn load(
    py: Python<'_>,
    reads: &Reads,
    stream: String,
    version: Option<u64>,
) -> PyResult<LoadedStream> {
    let name = stream.clone();
    let l = read_in(py, reads, move |r| {
        Ok(r.events().load(&name, version.map(StreamVersion))?)
    })?;
    let snapshot_version = l.snapshot.as_ref().map(|(v, _)| v.0);
    // A load up to a version reached it (the engine checked that it
    // exists); a load of everything reached the last event read, else the
    // snapshot.
    let reached = version.or_else(|| l.events.last().map(|e| e.version.0).or(snapshot_version));
    let state = l
        .snapshot
        .map(|(_, s)| PyBytes::new(py, &s).into_any().unbind());
    let events = l
        .events
        .into_iter()
        .map(|e| Py::new(py, recorded(py, e)?))
        .collect::<PyResult<Vec<_>>>()?;
    Ok(LoadedStream {
        stream,
        snapshot_version,
        state,
        events,
        version: reached,
    })
}

// ---------------------------------------------------------------------------
// Subscriptions

type AllSubscription<'a> = cairndb::events::Subscription<'a, Position>;
type StreamSubscription<'a> = cairndb::events::Subscription<'a, StreamVersion>;

self_cell::self_cell!(
    /// An engine subscription to the global log together with the database
    /// handle it borrows.
    struct AllCell {
        owner: Arc<RsDatabase>,
        #[covariant]
        dependent: AllSubscription,
    }
);

self_cell::self_cell!(
    /// An engine subscription to one stream together with the database
    /// handle it borrows.
    struct StreamCell {
        owner: Arc<RsDatabase>,
        #[covariant]
        dependent: StreamSubscription,
    }
);

/// Either kind of engine subscription.
enum SubCell {
    All(AllCell),
    Stream(StreamCell),
}

/// A subscription message without its checkpoint type.
enum Msg {
    Event(cairndb::events::RecordedEvent),
    CaughtUp,
}

fn msg<P>(m: SubscriptionMessage<P>) -> Msg {
    match m {
        SubscriptionMessage::Event(e) => Msg::Event(e),
        SubscriptionMessage::CaughtUp { .. } => Msg::CaughtUp,
    }
}

impl SubCell {
    fn next_timeout(&mut self, t: Duration) -> cairndb::events::EventResult<Option<Msg>> {
        match self {
            SubCell::All(c) => c.with_dependent_mut(|_, s| s.next_timeout(t).map(|m| m.map(msg))),
            SubCell::Stream(c) => {
                c.with_dependent_mut(|_, s| s.next_timeout(t).map(|m| m.map(msg)))
            }
        }
    }

    fn checkpoint(&self) -> u64 {
        match self {
            SubCell::All(c) => c.borrow_dependent().checkpoint().0,
            SubCell::Stream(c) => c.borrow_dependent().checkpoint().0,
        }
    }

    fn stop_handle(&self) -> SubscriptionStop {
        match self {
            SubCell::All(c) => c.borrow_dependent().stop_handle(),
            SubCell::Stream(c) => c.borrow_dependent().stop_handle(),
        }
    }
}

/// A catch-up-then-live subscription to the global log
/// (`db.subscribe`) or to one stream (`db.subscribe_stream`). Iterating it
/// yields `RecordedEvent`s forever (blocking without the GIL; Ctrl-C
/// raises KeyboardInterrupt), until `close()` is called from another
/// thread. `next(timeout)` waits at most `timeout` seconds and returns None
/// if nothing came. `caught_up` turns True once every event committed when
/// it started has been delivered; `checkpoint` is the next position (or
/// stream version) it would deliver (keep it to resume later).
#[pyclass(module = "cairndb", frozen)]
pub struct Subscription {
    cell: Mutex<Option<SubCell>>,
    stop: SubscriptionStop,
    closed: AtomicBool,
    caught_up: AtomicBool,
}

impl Subscription {
    pub fn new(
        db: Arc<RsDatabase>,
        from: u64,
        types: Option<Vec<String>>,
        prefix: Option<String>,
    ) -> PyResult<Self> {
        let filter = filter_of(types, prefix);
        Ok(Self::with_cell(SubCell::All(AllCell::new(db, |db| {
            EventStore::new(db).subscribe_all(Position(from), filter)
        }))))
    }

    /// A subscription to one stream from version `from`.
    pub fn stream(db: Arc<RsDatabase>, stream: String, from: u64) -> PyResult<Self> {
        cairndb::events::check_stream_name(&stream).map_err(event_err)?;
        Ok(Self::with_cell(SubCell::Stream(StreamCell::new(
            db,
            |db| EventStore::new(db).subscribe_stream(&stream, StreamVersion(from)),
        ))))
    }

    fn with_cell(cell: SubCell) -> Self {
        let stop = cell.stop_handle();
        Subscription {
            cell: Mutex::new(Some(cell)),
            stop,
            closed: AtomicBool::new(false),
            caught_up: AtomicBool::new(false),
        }
    }

    /// The next event, waiting up to `timeout` (None: forever).
    fn next_event(
        &self,
        py: Python<'_>,
        timeout: Option<Duration>,
    ) -> PyResult<Option<RecordedEvent>> {
        let ev = wait::in_slices(py, timeout, &self.closed, |slice| {
            let mut g = lock(&self.cell);
            let Some(c) = g.as_mut() else {
                return Ok(Slice::Nothing);
            };
            Ok(
                match c.next_timeout(slice).map_err(|e| Fail::Engine(e.into()))? {
                    Some(Msg::Event(e)) => Slice::Item(e),
                    Some(Msg::CaughtUp) => {
                        self.caught_up.store(true, Ordering::Release);
                        Slice::Again
                    }
                    None => Slice::Nothing,
                },
            )
        })?;
        ev.map(|e| recorded(py, e)).transpose()
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }
}

#[pymethods]
impl Subscription {
    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<RecordedEvent>> {
        self.next_event(py, None)
    }

    /// The next event, waiting at most `timeout` seconds (None: forever);
    /// None if none came in time or the subscription was closed.
    #[pyo3(signature = (timeout=None))]
    fn next(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<RecordedEvent>> {
        let t = timeout.map(wait::timeout_arg).transpose()?;
        if self.is_closed() {
            return Err(ClosedError::new_err("the subscription is closed"));
        }
        self.next_event(py, t)
    }

    /// Stops the subscription (a `next` waiting in another thread returns
    /// within about 100 ms; iteration ends). Other Python threads run while
    /// it waits for that `next` to let go of the subscription.
    fn close(&self, py: Python<'_>) {
        self.closed.store(true, Ordering::Release);
        self.stop.stop();
        // A waiter holds the cell's lock for one slice at most; the engine
        // subscription is dropped without the GIL too.
        py.allow_threads(|| drop(lock(&self.cell).take()));
    }

    /// Whether every event committed when the subscription started has
    /// been delivered.
    #[getter]
    fn caught_up(&self) -> bool {
        self.caught_up.load(Ordering::Acquire)
    }

    /// The next global position (or, for a stream, version) this
    /// subscription would deliver.
    #[getter]
    fn checkpoint(&self) -> PyResult<u64> {
        let g = lock(&self.cell);
        match g.as_ref() {
            Some(c) => Ok(c.checkpoint()),
            None => Err(ClosedError::new_err("the subscription is closed")),
        }
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, _args: &Bound<'_, PyTuple>) -> bool {
        self.close(_args.py());
        false
    }

    /// `async for ev in sub:` waits for each event in the event loop's
    /// default executor (never blocking the loop); it ends when the
    /// subscription is closed.
    fn __aiter__(slf: &Bound<'_, Self>) -> PyResult<PyObject> {
        let py = slf.py();
        Ok(py
            .import("cairndb._aio")?
            .getattr("events")?
            .call1((slf,))?
            .unbind())
    }
}
