//! The event layer's model and the random operations checked against it,
//! shared by every backend of the storage seam: the embedded engine's suite
//! (`events.rs`) and cairndb-etcd's (`crates/cairndb-etcd/tests/all/events.rs`,
//! which includes this file by its path) run the same operations against
//! the same model. A backend is a [`Target`].

use std::collections::BTreeMap;

use cairndb::events::{
    AppendResult, Direction, EventData, EventError, EventFilter, ExpectedVersion, Loaded, Position,
    ReadFrom, RecordedEvent, StreamInfo, StreamMetadata, StreamState, StreamVersion, Uuid,
};

/// The event store of one backend, as the driver calls it (each call its
/// own transaction); errors of the event layer as [`EventError`].
pub trait Target {
    fn append(
        &self,
        s: &str,
        expected: ExpectedVersion,
        evs: &[EventData],
    ) -> Result<AppendResult, EventError>;
    fn delete_stream(
        &self,
        s: &str,
        expected: ExpectedVersion,
        hard: bool,
    ) -> Result<(), EventError>;
    fn set_stream_metadata(&self, s: &str, meta: StreamMetadata) -> Result<(), EventError>;
    fn save_snapshot(&self, s: &str, v: StreamVersion, state: &[u8]) -> Result<(), EventError>;
    fn load(&self, s: &str, version: Option<StreamVersion>) -> Result<Loaded, EventError>;
    fn read_stream(
        &self,
        s: &str,
        from: ReadFrom<StreamVersion>,
        dir: Direction,
        limit: usize,
    ) -> Result<Vec<RecordedEvent>, EventError>;
    fn read_all(
        &self,
        from: ReadFrom<Position>,
        dir: Direction,
        limit: usize,
        filter: &EventFilter,
    ) -> Result<Vec<RecordedEvent>, EventError>;
    fn list_streams(&self, prefix: &str) -> Result<Vec<StreamInfo>, EventError>;
    fn next_position(&self) -> Result<Position, EventError>;
    fn check(&self) -> Result<Vec<String>, EventError>;
    /// Closes and opens the database again, where that means something.
    fn reopen(&mut self) {}
}

#[derive(Clone, Debug)]
struct MEvent {
    id: Uuid,
    ty: String,
    data: Vec<u8>,
    position: u64,
}

#[derive(Clone, Debug)]
struct MStream {
    events: Vec<MEvent>,
    state: StreamState,
    truncate_before: u64,
    max_count: u64,
    created_at: u64,
    snapshots: BTreeMap<u64, Vec<u8>>,
}

impl MStream {
    fn new() -> Self {
        MStream {
            events: Vec::new(),
            state: StreamState::Live,
            truncate_before: 0,
            max_count: u64::MAX,
            created_at: 0,
            snapshots: BTreeMap::new(),
        }
    }
    fn next(&self) -> u64 {
        self.events.len() as u64
    }
    fn current(&self) -> Option<u64> {
        (self.state == StreamState::Live && self.next() > 0).then(|| self.next() - 1)
    }
    fn first_visible(&self) -> u64 {
        self.truncate_before
            .max(self.next().saturating_sub(self.max_count))
            .min(self.next())
    }
}

/// The model: streams and the global log (position -> stream, version).
#[derive(Clone, Debug, Default)]
struct Model {
    streams: BTreeMap<String, MStream>,
    log: Vec<(String, u64)>,
}

/// An event as compared: stream, version, position, id, type, data.
type Flat = (String, u64, u64, Uuid, String, Vec<u8>);

/// Error kinds compared between engine and model.
#[derive(Debug, PartialEq)]
enum Kind {
    Wrong(Option<u64>),
    /// An append repeating only its first this-many events.
    Conflict(u64),
    Deleted,
    NotFound,
    PastEnd,
}

fn kind(e: EventError) -> Kind {
    match e {
        EventError::WrongExpectedVersion { actual, .. } => Kind::Wrong(actual.map(u64::from)),
        EventError::IdempotencyConflict { repeated, .. } => Kind::Conflict(repeated),
        EventError::StreamDeleted(_) => Kind::Deleted,
        EventError::StreamNotFound(_) => Kind::NotFound,
        EventError::ReadPastEnd { .. } => Kind::PastEnd,
        other => panic!("unexpected error: {other}"),
    }
}

fn holds(expected: ExpectedVersion, current: Option<u64>) -> bool {
    match expected {
        ExpectedVersion::Any => true,
        ExpectedVersion::NoStream => current.is_none(),
        ExpectedVersion::Exists => current.is_some(),
        ExpectedVersion::Exact(v) => current == Some(v.0),
    }
}

/// A read's start as the model's bare number.
fn bare<P: Into<u64>>(from: ReadFrom<P>) -> ReadFrom<u64> {
    match from {
        ReadFrom::Start => ReadFrom::Start,
        ReadFrom::End => ReadFrom::End,
        ReadFrom::At(n) => ReadFrom::At(n.into()),
    }
}

impl Model {
    /// Returns (version after, idempotent).
    fn append(
        &mut self,
        s: &str,
        expected: ExpectedVersion,
        evs: &[EventData],
    ) -> Result<(Option<u64>, bool), Kind> {
        let st = self.streams.get(s);
        if st.is_some_and(|st| st.state == StreamState::HardDeleted) {
            return Err(Kind::Deleted);
        }
        let current = st.and_then(MStream::current);
        // KurrentDB's idempotency: where a retry of this append would find
        // its events (for Any/Exists: its first id among the stream's last
        // n events), all of them is a repeat, some of them a conflict.
        if let Some(st) = st.filter(|st| st.state == StreamState::Live) {
            let n = evs.len() as u64;
            let start = match expected {
                ExpectedVersion::NoStream if current.is_some() => Some(st.created_at),
                ExpectedVersion::Any | ExpectedVersion::Exists => evs.first().and_then(|e0| {
                    (st.next().saturating_sub(n).max(st.created_at)..st.next())
                        .find(|&v| st.events[v as usize].id == e0.id)
                }),
                ExpectedVersion::Exact(v) if current != Some(v.0) => Some(v.0 + 1),
                _ => None,
            };
            if let Some(start) = start {
                let k = evs
                    .iter()
                    .enumerate()
                    .take_while(|(i, e)| {
                        st.events
                            .get((start + *i as u64) as usize)
                            .is_some_and(|m| m.id == e.id)
                    })
                    .count() as u64;
                if k == n && n > 0 {
                    return Ok((Some(start + n - 1), true));
                }
                if k > 0 {
                    return Err(Kind::Conflict(k));
                }
            }
        }
        if !holds(expected, current) {
            return Err(Kind::Wrong(current));
        }
        if evs.is_empty() {
            return Ok((current, false));
        }
        let st = self
            .streams
            .entry(s.to_string())
            .or_insert_with(MStream::new);
        if st.state == StreamState::SoftDeleted {
            st.state = StreamState::Live;
            st.created_at = st.next();
            st.truncate_before = st.truncate_before.max(st.next());
        }
        for e in evs {
            self.log.push((s.to_string(), st.next()));
            st.events.push(MEvent {
                id: e.id,
                ty: e.event_type.clone(),
                data: e.data.clone(),
                position: self.log.len() as u64 - 1,
            });
        }
        Ok((st.current(), false))
    }

    fn delete(&mut self, s: &str, hard: bool) -> Result<(), Kind> {
        match self.streams.get_mut(s) {
            Some(st) if st.state == StreamState::HardDeleted => Err(Kind::Deleted),
            Some(st) if st.state == StreamState::SoftDeleted && !hard => Err(Kind::NotFound),
            Some(st) => {
                st.state = if hard {
                    StreamState::HardDeleted
                } else {
                    StreamState::SoftDeleted
                };
                st.truncate_before = st.next();
                Ok(())
            }
            None if hard => {
                let mut st = MStream::new();
                st.state = StreamState::HardDeleted;
                self.streams.insert(s.to_string(), st);
                Ok(())
            }
            None => Err(Kind::NotFound),
        }
    }

    fn readable(&self, s: &str) -> Result<&MStream, Kind> {
        match self.streams.get(s) {
            Some(st) if st.state == StreamState::HardDeleted => Err(Kind::Deleted),
            Some(st) if st.state == StreamState::Live => Ok(st),
            _ => Err(Kind::NotFound),
        }
    }

    fn event(&self, s: &str, v: u64) -> Flat {
        let e = &self.streams[s].events[v as usize];
        (
            s.to_string(),
            v,
            e.position,
            e.id,
            e.ty.clone(),
            e.data.clone(),
        )
    }

    fn read_stream(
        &self,
        s: &str,
        from: ReadFrom<StreamVersion>,
        dir: Direction,
        limit: usize,
    ) -> Result<Vec<Flat>, Kind> {
        let st = self.readable(s)?;
        let (vis, end) = (st.first_visible(), st.next());
        let versions: Vec<u64> = match (dir, bare(from)) {
            (Direction::Forward, ReadFrom::Start) => (vis..end).collect(),
            (Direction::Forward, ReadFrom::End) => vec![],
            (Direction::Forward, ReadFrom::At(v)) if v > end => return Err(Kind::PastEnd),
            (Direction::Forward, ReadFrom::At(v)) => (v.max(vis)..end).collect(),
            (Direction::Backward, ReadFrom::At(v)) if v >= end && !(v == 0 && end == 0) => {
                return Err(Kind::PastEnd)
            }
            (Direction::Backward, ReadFrom::At(v)) => (vis..(v + 1).min(end)).rev().collect(),
            (Direction::Backward, _) => (vis..end).rev().collect(),
        };
        Ok(versions
            .into_iter()
            .take(limit)
            .map(|v| self.event(s, v))
            .collect())
    }

    fn read_all(
        &self,
        from: ReadFrom<Position>,
        dir: Direction,
        limit: usize,
        filter: &EventFilter,
    ) -> Result<Vec<Flat>, Kind> {
        let end = self.log.len() as u64;
        let positions: Vec<u64> = match (dir, bare(from)) {
            (Direction::Forward, ReadFrom::Start) => (0..end).collect(),
            (Direction::Forward, ReadFrom::End) => vec![],
            (Direction::Forward, ReadFrom::At(p)) if p > end => return Err(Kind::PastEnd),
            (Direction::Forward, ReadFrom::At(p)) => (p..end).collect(),
            (Direction::Backward, ReadFrom::At(p)) if p >= end && !(p == 0 && end == 0) => {
                return Err(Kind::PastEnd)
            }
            (Direction::Backward, ReadFrom::At(p)) => (0..(p + 1).min(end)).rev().collect(),
            (Direction::Backward, _) => (0..end).rev().collect(),
        };
        Ok(positions
            .into_iter()
            .map(|p| {
                let (s, v) = &self.log[p as usize];
                self.event(s, *v)
            })
            .filter(|e| {
                (filter.event_types.is_empty() || filter.event_types.contains(&e.4))
                    && filter
                        .stream_prefix
                        .as_deref()
                        .is_none_or(|p| e.0.starts_with(p))
            })
            .take(limit)
            .collect())
    }
}

fn flat(v: Vec<RecordedEvent>) -> Vec<Flat> {
    v.into_iter()
        .map(|e| {
            (
                e.stream,
                e.version.0,
                e.position.0,
                e.id,
                e.event_type,
                e.data,
            )
        })
        .collect()
}

const STREAMS: [&str; 4] = ["order-1", "order-2", "user-1", "user-22"];
const TYPES: [&str; 3] = ["Created", "Updated", "Deleted"];

fn random_from<P>(below: &mut dyn FnMut(u64) -> u64, end: u64, wrap: fn(u64) -> P) -> ReadFrom<P> {
    match below(4) {
        0 => ReadFrom::Start,
        1 => ReadFrom::End,
        _ => ReadFrom::At(wrap(below(end + 3))),
    }
}

/// Runs `ops` random operations (`below(n)`: a random number below `n`)
/// on `t` and on a fresh model, each result compared; every divergence is
/// printed with `ctx` and the operation's number. Returns the divergences
/// and the reopens. Ends with the layer's own check, which must find
/// nothing.
pub fn run(
    t: &mut impl Target,
    below: &mut dyn FnMut(u64) -> u64,
    ops: u64,
    ctx: &str,
) -> (u64, u64) {
    let mut model = Model::default();
    let mut last_batch: Option<(String, ExpectedVersion, Vec<EventData>)> = None;
    let (mut divergences, mut reopens) = (0u64, 0u64);
    for op in 0..ops {
        let s = STREAMS[below(4) as usize];
        let ctx = format!("{ctx} op {op}");
        match below(20) {
            0..=7 => {
                let cur = model.streams.get(s).and_then(MStream::current);
                let expected = match below(6) {
                    0 => ExpectedVersion::Any,
                    1 => ExpectedVersion::NoStream,
                    2 => ExpectedVersion::Exists,
                    3 => ExpectedVersion::Exact(StreamVersion(below(6))),
                    _ => match cur {
                        Some(v) => ExpectedVersion::Exact(StreamVersion(v)),
                        None => ExpectedVersion::NoStream,
                    },
                };
                let evs: Vec<EventData> = (0..below(4))
                    .map(|_| {
                        let len = if below(10) == 0 { 3000 } else { below(40) };
                        EventData::new(
                            TYPES[below(3) as usize],
                            vec![below(256) as u8; len as usize],
                        )
                    })
                    .collect();
                let got = t.append(s, expected, &evs).map_err(kind);
                let want = model.append(s, expected, &evs);
                let got_v = got
                    .as_ref()
                    .map(|r| (r.version.map(u64::from), r.idempotent));
                if got_v.map_err(|k| format!("{k:?}"))
                    != want.as_ref().map(|w| *w).map_err(|k| format!("{k:?}"))
                {
                    eprintln!(
                        "{ctx}: append {s} {expected:?} x{}: got {got:?} want {want:?}",
                        evs.len()
                    );
                    divergences += 1;
                }
                if want.is_ok() && !evs.is_empty() {
                    last_batch = Some((s.to_string(), expected, evs));
                }
            }
            8 => {
                // Retry the last batch: an idempotent repeat or a typed error.
                if let Some((s, expected, evs)) = &last_batch {
                    let got = t.append(s, *expected, evs).map_err(kind);
                    let want = model.append(s, *expected, evs);
                    if got
                        .as_ref()
                        .map(|r| (r.version.map(u64::from), r.idempotent))
                        .map_err(|k| format!("{k:?}"))
                        != want.as_ref().map(|w| *w).map_err(|k| format!("{k:?}"))
                    {
                        eprintln!("{ctx}: retry {s}: got {got:?} want {want:?}");
                        divergences += 1;
                    }
                }
            }
            9 => {
                let hard = below(4) == 0;
                let got = t.delete_stream(s, ExpectedVersion::Any, hard).map_err(kind);
                let want = model.delete(s, hard);
                if got != want {
                    eprintln!("{ctx}: delete {s} hard={hard}: got {got:?} want {want:?}");
                    divergences += 1;
                }
            }
            10 => {
                let meta = StreamMetadata {
                    max_count: (below(2) == 0).then(|| below(5)),
                    truncate_before: (below(2) == 0).then(|| StreamVersion(below(8))),
                };
                let got = t.set_stream_metadata(s, meta).map_err(kind);
                let want = match model.streams.get(s) {
                    Some(st) if st.state == StreamState::HardDeleted => Err(Kind::Deleted),
                    _ => Ok(()),
                };
                if want.is_ok() {
                    let st = model
                        .streams
                        .entry(s.to_string())
                        .or_insert_with(MStream::new);
                    st.max_count = meta.max_count.unwrap_or(u64::MAX);
                    st.truncate_before = meta.truncate_before.map_or(0, u64::from).max(
                        if st.state == StreamState::SoftDeleted {
                            st.next()
                        } else {
                            st.created_at
                        },
                    );
                }
                if got != want {
                    eprintln!("{ctx}: metadata {s}: got {got:?} want {want:?}");
                    divergences += 1;
                }
            }
            11 => {
                if let Ok(st) = model.readable(s) {
                    if st.next() > 0 {
                        let v = below(st.next());
                        let state = format!("state@{v}").into_bytes();
                        t.save_snapshot(s, StreamVersion(v), &state).unwrap();
                        model.streams.get_mut(s).unwrap().snapshots.insert(v, state);
                    }
                }
            }
            12 => {
                // Load: newest snapshot at or below a version + events after.
                let version = (below(2) == 0).then(|| below(8));
                let got = t
                    .load(s, version.map(StreamVersion))
                    .map_err(kind)
                    .map(|l| (l.snapshot.map(|(v, b)| (v.0, b)), flat(l.events)));
                let want = model.readable(s).and_then(|st| {
                    let end = match version {
                        Some(v) if v >= st.next() => return Err(Kind::PastEnd),
                        Some(v) => v + 1,
                        None => st.next(),
                    };
                    let snap = st
                        .snapshots
                        .range(..end)
                        .next_back()
                        .map(|(v, b)| (*v, b.clone()));
                    let lo = snap
                        .as_ref()
                        .map(|(v, _)| v + 1)
                        .unwrap_or(st.first_visible());
                    Ok((
                        snap,
                        (lo..end).map(|v| model.event(s, v)).collect::<Vec<_>>(),
                    ))
                });
                if got != want {
                    eprintln!("{ctx}: load {s} {version:?}: got {got:?} want {want:?}");
                    divergences += 1;
                }
            }
            13..=15 => {
                let end = model.streams.get(s).map(MStream::next).unwrap_or(0);
                let from = random_from(below, end, StreamVersion);
                let dir = if below(2) == 0 {
                    Direction::Forward
                } else {
                    Direction::Backward
                };
                let limit = 1 + below(6) as usize;
                let got = t.read_stream(s, from, dir, limit).map(flat).map_err(kind);
                let want = model.read_stream(s, from, dir, limit);
                if got != want {
                    eprintln!(
                        "{ctx}: read {s} {from:?} {dir:?} {limit}: got {got:?} want {want:?}"
                    );
                    divergences += 1;
                }
            }
            16..=17 => {
                let from = random_from(below, model.log.len() as u64, Position);
                let dir = if below(2) == 0 {
                    Direction::Forward
                } else {
                    Direction::Backward
                };
                let limit = 1 + below(10) as usize;
                let filter = match below(3) {
                    0 => EventFilter::all(),
                    1 => EventFilter::types([TYPES[below(3) as usize]]),
                    _ => EventFilter::stream_prefix(if below(2) == 0 { "order" } else { "user-2" }),
                };
                let got = t
                    .read_all(from, dir, limit, &filter)
                    .map(flat)
                    .map_err(kind);
                let want = model.read_all(from, dir, limit, &filter);
                if got != want {
                    eprintln!("{ctx}: read_all {from:?} {dir:?} {limit} {filter:?}: got {got:?} want {want:?}");
                    divergences += 1;
                }
            }
            18 => {
                let got: Vec<(String, Option<u64>, StreamState)> = t
                    .list_streams("")
                    .unwrap()
                    .into_iter()
                    .map(|i| (i.name, i.version.map(u64::from), i.state))
                    .collect();
                let want: Vec<(String, Option<u64>, StreamState)> = model
                    .streams
                    .iter()
                    .map(|(n, st)| (n.clone(), st.current(), st.state))
                    .collect();
                if got != want {
                    eprintln!("{ctx}: list: got {got:?} want {want:?}");
                    divergences += 1;
                }
                assert_eq!(t.next_position().unwrap(), Position(model.log.len() as u64));
            }
            _ => {
                reopens += 1;
                t.reopen();
            }
        }
    }
    assert_eq!(
        t.check().unwrap(),
        Vec::<String>::new(),
        "{ctx}: the layer's check"
    );
    (divergences, reopens)
}
