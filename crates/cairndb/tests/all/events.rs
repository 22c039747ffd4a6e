//! Event streams against an in-memory model (suite 1, docs/reliability.md, for the
//! event layer), concurrency (racing appends, a live subscriber tailing 16
//! writers), crashes (a multi-event append is all or nothing, positions stay
//! dense, a subscriber resumes from its checkpoint) and bad input.

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use cairndb::events::EventError;
use cairndb::events::{
    Direction, EventData, EventFilter, EventStore, EventWriter, ExpectedVersion, Position,
    ReadFrom, RecordedEvent, StreamMetadata, StreamVersion, SubscriptionMessage,
};
use cairndb::storage::sim::{Fault, OpFilter, SimFile, SplitMix64};
use cairndb::CoreError;
use cairndb::{Builder, Database, Durability};

use crate::events_model::{self, Target};

/// The embedded engine as a target of the shared model: a file reopened
/// now and then, writes not waiting for a flush.
struct Embedded {
    db: Option<Database>,
    path: std::path::PathBuf,
}

impl Embedded {
    fn store(&self) -> EventStore<'_> {
        let db = self.db.as_ref().expect("the database is open");
        EventStore::new(db).with_durability(Durability::None)
    }
}

impl Embedded {
    /// `owned` (a copying read's result), after checking that `borrowing`
    /// — the same read in its borrowing form on a fresh snapshot, pushing
    /// a copy of each event it is handed — hands out the same events or
    /// fails the same way.
    fn agrees(
        &self,
        what: String,
        owned: Result<Vec<RecordedEvent>, EventError>,
        borrowing: impl FnOnce(
            &cairndb::ReadTransaction,
            &mut Vec<RecordedEvent>,
        ) -> Result<(), EventError>,
    ) -> Result<Vec<RecordedEvent>, EventError> {
        let r = self
            .db
            .as_ref()
            .expect("the database is open")
            .begin_read()?;
        let mut borrowed = Vec::new();
        let done = borrowing(&r, &mut borrowed);
        assert_eq!(
            done.map(|()| borrowed).map_err(|e| e.to_string()),
            owned.as_ref().map(Vec::clone).map_err(|e| e.to_string()),
            "{what}: the borrowing read differs"
        );
        owned
    }
}

impl Target for Embedded {
    fn append(
        &self,
        s: &str,
        expected: ExpectedVersion,
        evs: &[EventData],
    ) -> Result<cairndb::events::AppendResult, EventError> {
        self.store().append(s, expected, evs)
    }
    fn delete_stream(
        &self,
        s: &str,
        expected: ExpectedVersion,
        hard: bool,
    ) -> Result<(), EventError> {
        self.store().delete_stream(s, expected, hard)
    }
    fn set_stream_metadata(&self, s: &str, meta: StreamMetadata) -> Result<(), EventError> {
        self.store().set_stream_metadata(s, meta)
    }
    fn save_snapshot(&self, s: &str, v: StreamVersion, state: &[u8]) -> Result<(), EventError> {
        self.store().save_snapshot(s, v, state)
    }
    fn load(
        &self,
        s: &str,
        version: Option<StreamVersion>,
    ) -> Result<cairndb::events::Loaded, EventError> {
        let owned = self.store().load(s, version);
        let r = self
            .db
            .as_ref()
            .expect("the database is open")
            .begin_read()?;
        let done = r.events().load_with(
            s,
            version,
            |snapshot| (snapshot.map(|(v, state)| (v, state.to_vec())), Vec::new()),
            |(_, events), e| {
                events.push(e.to_owned());
                ControlFlow::Continue(())
            },
        );
        assert_eq!(
            done.map_err(|e| e.to_string()),
            owned
                .as_ref()
                .map(|l| (l.snapshot.clone(), l.events.clone()))
                .map_err(|e| e.to_string()),
            "load_with {s} {version:?}: the borrowing read differs"
        );
        owned
    }
    fn read_stream(
        &self,
        s: &str,
        from: ReadFrom<StreamVersion>,
        dir: Direction,
        limit: usize,
    ) -> Result<Vec<RecordedEvent>, EventError> {
        let owned = self.store().read_stream(s, from, dir, limit);
        self.agrees(
            format!("read_stream_with {s} {from:?} {dir:?} {limit}"),
            owned,
            |r, out| {
                r.events().read_stream_with(s, from, dir, limit, |e| {
                    out.push(e.to_owned());
                    ControlFlow::Continue(())
                })
            },
        )
    }
    fn read_all(
        &self,
        from: ReadFrom<Position>,
        dir: Direction,
        limit: usize,
        filter: &EventFilter,
    ) -> Result<Vec<RecordedEvent>, EventError> {
        let owned = self.store().read_all(from, dir, limit, filter);
        self.agrees(
            format!("read_all_with {from:?} {dir:?} {limit} {filter:?}"),
            owned,
            |r, out| {
                r.events()
                    .read_all_with(from, dir, limit, filter, |e| {
                        out.push(e.to_owned());
                        ControlFlow::Continue(())
                    })
                    .map(|_| ())
            },
        )
    }
    fn list_streams(&self, prefix: &str) -> Result<Vec<cairndb::events::StreamInfo>, EventError> {
        self.store().list_streams(prefix)
    }
    fn next_position(&self) -> Result<Position, EventError> {
        self.store().next_position()
    }
    fn check(&self) -> Result<Vec<String>, EventError> {
        self.store().check()
    }
    fn reopen(&mut self) {
        let db = self.db.take().expect("the database is open");
        db.sync().unwrap();
        drop(db);
        self.db = Some(Database::open(&self.path).unwrap());
    }
}

/// The shared model (`events_model.rs`, also run on an etcd cluster by
/// cairndb-etcd's tests) on files of two page sizes, reopened now and then.
#[test]
fn event_store_matches_the_model() {
    let seed = crate::common::seed("events-model");
    let cases = crate::common::iters(40);
    let mut rng = SplitMix64(seed);
    let (mut ops_total, mut reopens, mut divergences) = (0u64, 0u64, 0u64);
    for case in 0..cases {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ev.cairn");
        let page = if case % 2 == 0 { 512 } else { 4096 };
        let db = Builder::new().page_size(page).create(&path).unwrap();
        let mut target = Embedded { db: Some(db), path };
        let ops = 150;
        let (d, r) = events_model::run(
            &mut target,
            &mut |n| rng.below(n),
            ops,
            &format!("seed {seed} case {case}"),
        );
        ops_total += ops;
        divergences += d;
        reopens += r;
        let db = target.db.take().unwrap();
        assert!(db.check_integrity().unwrap().is_ok());
    }
    crate::common::report(&format!(
        "events-model: cases={cases} ops={ops_total} reopens={reopens} divergences={divergences} seed={seed}"
    ));
    assert_eq!(divergences, 0);
}

/// Two appends racing with the same expected version: exactly one wins,
/// the other gets `WrongExpectedVersion` carrying the new version; no gap,
/// no duplicate. Writers on disjoint streams never conflict.
#[test]
fn racing_appends_exactly_one_wins() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::create(dir.path().join("race.cairn")).unwrap();
    let store = EventStore::new(&db).with_durability(Durability::None);
    const ROUNDS: u64 = 200;
    let wins: Vec<u64> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|t| {
                s.spawn(move || {
                    let mut won = 0;
                    // Contended stream: each thread tries to take each version.
                    for v in 0..ROUNDS {
                        let expected = if v == 0 {
                            ExpectedVersion::NoStream
                        } else {
                            ExpectedVersion::Exact(StreamVersion(v - 1))
                        };
                        let ev = EventData::new("Took", format!("{t}:{v}").into_bytes());
                        match store.append("contended", expected, &[ev]) {
                            Ok(r) => {
                                assert_eq!(r.version, Some(StreamVersion(v)));
                                won += 1;
                            }
                            Err(EventError::WrongExpectedVersion { actual, .. }) => {
                                assert!(
                                    actual.is_some_and(|a| a >= StreamVersion(v)),
                                    "actual {actual:?} at {v}"
                                );
                            }
                            Err(e) => panic!("{e}"),
                        }
                        // Wait until someone took version v.
                        while store.stream_version("contended").unwrap() < Some(StreamVersion(v)) {
                            std::thread::yield_now();
                        }
                        // Own stream: never conflicts.
                        let own = format!("own-{t}");
                        let r = store
                            .append(
                                &own,
                                ExpectedVersion::Any,
                                &[EventData::new("Mine", vec![])],
                            )
                            .unwrap();
                        assert_eq!(r.version, Some(StreamVersion(v)));
                    }
                    won
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(
        wins.iter().sum::<u64>(),
        ROUNDS,
        "exactly one winner per version"
    );
    let evs = store
        .read_stream("contended", ReadFrom::Start, Direction::Forward, 10_000)
        .unwrap();
    assert_eq!(evs.len() as u64, ROUNDS);
    assert!(evs
        .iter()
        .enumerate()
        .all(|(i, e)| e.version == StreamVersion(i as u64)));
    let all = crate::common::whole_log(&store);
    assert_eq!(all.len() as u64, ROUNDS * 5);
    assert!(all
        .iter()
        .enumerate()
        .all(|(i, e)| e.position == Position(i as u64)));
}

/// A live subscriber tailing the global log while 16 writers append 1,500
/// events each receives every event exactly once, in position order, and a
/// second subscriber resuming from a checkpoint continues without loss.
#[test]
fn live_subscriber_sees_every_event_once_in_order() {
    let writers = 16u64;
    let per = crate::common::iters(1500);
    let dir = tempfile::tempdir().unwrap();
    let db = Database::create(dir.path().join("tail.cairn")).unwrap();
    let store = EventStore::new(&db).with_durability(Durability::None);
    let total = writers * per;
    let (received, skipped, duplicates, caught_up) = std::thread::scope(|s| {
        let sub = s.spawn(|| {
            let mut sub = store.subscribe_all(Position(0), EventFilter::all());
            let mut next = 0u64;
            let (mut skipped, mut dups, mut caught_up) = (0u64, 0u64, 0u64);
            let mut per_stream: BTreeMap<String, u64> = BTreeMap::new();
            while next < total {
                match sub.next_timeout(Duration::from_secs(30)).unwrap() {
                    Some(SubscriptionMessage::Event(e)) => {
                        let p = e.position.0;
                        if p > next {
                            skipped += p - next;
                        } else if p < next {
                            dups += 1;
                        }
                        next = p + 1;
                        // Stream versions arrive in order too.
                        let v = per_stream.entry(e.stream.clone()).or_insert(0);
                        assert_eq!(e.version.0, *v, "stream {} out of order", e.stream);
                        *v += 1;
                    }
                    Some(SubscriptionMessage::CaughtUp { .. }) => caught_up += 1,
                    None => panic!("subscriber starved at {next} of {total}"),
                }
            }
            (next, skipped, dups, caught_up)
        });
        for w in 0..writers {
            let store = &store;
            s.spawn(move || {
                let stream = format!("writer-{w}");
                for i in 0..per {
                    let ev = EventData::new("Tick", i.to_le_bytes().to_vec());
                    store.append(&stream, ExpectedVersion::Any, &[ev]).unwrap();
                }
            });
        }
        sub.join().unwrap()
    });
    // Resume from a checkpoint in the middle: the rest, in order.
    let mid = total / 2;
    let mut sub = store.subscribe_all(Position(mid), EventFilter::all());
    let mut next = Position(mid);
    while let Some(SubscriptionMessage::Event(e)) =
        sub.next_timeout(Duration::from_secs(5)).unwrap()
    {
        assert_eq!(e.position, next);
        next = next.next();
    }
    assert_eq!(next, Position(total));
    assert_eq!(sub.checkpoint(), Position(total));
    crate::common::report(&format!(
        "events-tail: writers={writers} events={total} received={received} skipped={skipped} duplicates={duplicates} caught_up_msgs={caught_up}"
    ));
    assert_eq!((received, skipped, duplicates), (total, 0, 0));
}

/// Crashes (suite 2 style, on the simulated file): a multi-event append to
/// two streams is all or nothing after every crash image; positions stay
/// dense; a subscriber resumes from its checkpoint without loss.
#[test]
fn crash_multi_event_append_all_or_nothing() {
    let seed = crate::common::seed("events-crash");
    let run = |sim: &Arc<SimFile>| -> u64 {
        let Ok(db) =
            Builder::new()
                .page_size(512)
                .open_with_storage(Box::new(sim.clone()), true, false)
        else {
            return 0;
        };
        let mut acked = 0;
        for round in 0..4u64 {
            let res = (|| -> cairndb::Result<()> {
                let txn = db.begin_write()?;
                {
                    let mut w = EventWriter::new(&txn);
                    let evs: Vec<EventData> = (0..3)
                        .map(|i| EventData::new("E", vec![(round * 3 + i) as u8; 100]))
                        .collect();
                    w.append("a", ExpectedVersion::Any, &evs)?;
                    w.append("b", ExpectedVersion::Any, &evs[..2])?;
                }
                txn.commit()?;
                Ok(())
            })();
            if res.is_err() {
                return acked;
            }
            acked += 1;
        }
        acked
    };
    let clean = Arc::new(SimFile::new());
    clean.set_fault(None, OpFilter::Mutating);
    assert_eq!(run(&clean), 4);
    let total = clean.counted_ops();
    let (mut images, mut bad) = (0, 0);
    for k in 0..total {
        let sim = Arc::new(SimFile::new());
        sim.set_fault(Some(Fault::CrashAt(k)), OpFilter::Mutating);
        let acked = run(&sim);
        for img in sim.crash_images(seed ^ k) {
            images += 1;
            let Ok(db) = Builder::new().open_with_storage(
                Box::new(SimFile::from_image(img.bytes.clone())),
                false,
                false,
            ) else {
                assert_eq!(
                    acked, 0,
                    "crash at {k} ({}): acknowledged data lost",
                    img.name
                );
                continue;
            };
            let store = EventStore::new(&db);
            let a = store.stream_version("a").unwrap().map_or(0, |v| v.0 + 1);
            let b = store.stream_version("b").unwrap().map_or(0, |v| v.0 + 1);
            let rounds = a / 3;
            let all = store
                .read_all(
                    ReadFrom::Start,
                    Direction::Forward,
                    usize::MAX,
                    &EventFilter::all(),
                )
                .unwrap();
            let dense = all
                .iter()
                .enumerate()
                .all(|(i, e)| e.position == Position(i as u64));
            let ok = a.is_multiple_of(3)
                && b == rounds * 2
                && (rounds == acked || rounds == acked + 1)
                && all.len() as u64 == rounds * 5
                && dense
                && db.check_integrity().unwrap().is_ok()
                && store.check().unwrap().is_empty();
            if !ok {
                eprintln!(
                    "crash at {k} ({}): a={a} b={b} acked={acked} log={} dense={dense}",
                    img.name,
                    all.len()
                );
                bad += 1;
            }
            // A subscriber resuming from a checkpoint gets the rest.
            let from = Position((all.len() as u64) / 2);
            let mut sub = store.subscribe_all(from, EventFilter::all());
            let mut next = from;
            while let Ok(Some(SubscriptionMessage::Event(e))) = sub.next_timeout(Duration::ZERO) {
                assert_eq!(e.position, next);
                next = next.next();
            }
            assert_eq!(next, Position(all.len() as u64));
        }
    }
    crate::common::report(&format!(
        "events-crash: crash_points={total} images={images} partial_or_lost={bad} seed={seed}"
    ));
    assert_eq!(bad, 0);
}

/// Bad input gets typed errors and writes nothing.
#[test]
fn event_bad_input_is_typed() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::create(dir.path().join("bad.cairn")).unwrap();
    let store = EventStore::new(&db);
    let ok = || vec![EventData::new("T", b"x".to_vec())];
    for name in ["", "$all", "a\nb"] {
        assert!(
            matches!(
                store.append(name, ExpectedVersion::Any, &ok()),
                Err(EventError::InvalidStreamName { .. })
            ),
            "{name:?}"
        );
    }
    let long = "s".repeat(256);
    assert!(matches!(
        store.append(&long, ExpectedVersion::Any, &ok()),
        Err(EventError::InvalidStreamName { .. })
    ));
    for (ev, why) in [
        (EventData::new("", vec![]), "empty"),
        (EventData::new("t".repeat(256), vec![]), "256"),
        (
            EventData::new("T", vec![0; cairndb::limits::MAX_EVENT_DATA_BYTES + 1]),
            "payload",
        ),
        (
            EventData::new("T", vec![]).with_metadata(vec![
                0;
                cairndb::limits::MAX_EVENT_METADATA_BYTES
                    + 1
            ]),
            "metadata",
        ),
    ] {
        let e = store
            .append("s", ExpectedVersion::Any, &[ok()[0].clone(), ev])
            .unwrap_err();
        assert!(
            matches!(e, EventError::InvalidEvent { index: 1, .. }),
            "{why}: {e}"
        );
    }
    assert_eq!(
        store.next_position().unwrap(),
        Position(0),
        "nothing of a rejected append is written"
    );
    store.append("s", ExpectedVersion::NoStream, &ok()).unwrap();
    let e = store
        .append("s", ExpectedVersion::Exact(StreamVersion(5)), &ok())
        .unwrap_err();
    assert!(
        matches!(
            e,
            EventError::WrongExpectedVersion {
                actual: Some(StreamVersion(0)),
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("is at version 0"), "{e}");
    let e = store
        .read_stream("s", ReadFrom::At(StreamVersion(2)), Direction::Forward, 10)
        .unwrap_err();
    assert!(
        matches!(
            e,
            EventError::ReadPastEnd {
                from: 2,
                end: 1,
                ..
            }
        ),
        "{e}"
    );
    assert!(matches!(
        store.read_all(
            ReadFrom::At(Position(9)),
            Direction::Forward,
            10,
            &EventFilter::all()
        ),
        Err(EventError::ReadPastEnd { .. })
    ));
    assert!(matches!(
        store.read_stream("nope", ReadFrom::Start, Direction::Forward, 1),
        Err(EventError::StreamNotFound(_))
    ));
    store
        .delete_stream("s", ExpectedVersion::Exact(StreamVersion(0)), true)
        .unwrap();
    assert!(matches!(
        store.append("s", ExpectedVersion::Any, &ok()),
        Err(EventError::StreamDeleted(_))
    ));
    assert!(matches!(
        store.read_stream("s", ReadFrom::Start, Direction::Forward, 1),
        Err(EventError::StreamDeleted(_))
    ));
    // The user cannot reach the layer's tables through the KV API.
    let txn = db.begin_write().unwrap();
    assert!(matches!(
        txn.open_table(cairndb::TableDefinition::<u64, &[u8]>::new("$ev.global")),
        Err(CoreError::InvalidTableName { .. })
    ));
}

/// Typed payloads through the document encoding round-trip; a payload of
/// another shape is a typed decode error.
#[test]
fn typed_payloads_round_trip() {
    #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
    enum OrderEvent {
        Created { id: [u8; 16], customer: String },
        ItemAdded { sku: String, qty: u32 },
        Paid(f64),
    }
    let dir = tempfile::tempdir().unwrap();
    let db = Database::create(dir.path().join("typed.cairn")).unwrap();
    let store = EventStore::new(&db);
    let evs = [
        OrderEvent::Created {
            id: [7; 16],
            customer: "ada".into(),
        },
        OrderEvent::ItemAdded {
            sku: "x-1".into(),
            qty: 2,
        },
        OrderEvent::Paid(9.5),
    ];
    let data: Vec<EventData> = evs
        .iter()
        .map(|e| EventData::encode("Order", e).unwrap())
        .collect();
    store
        .append("order-9", ExpectedVersion::NoStream, &data)
        .unwrap();
    let back: Vec<OrderEvent> = store
        .read_stream("order-9", ReadFrom::Start, Direction::Forward, 10)
        .unwrap()
        .iter()
        .map(|e| e.decode().unwrap())
        .collect();
    assert_eq!(back, evs);
    let raw = store
        .read_stream("order-9", ReadFrom::Start, Direction::Forward, 1)
        .unwrap();
    assert!(matches!(
        raw[0].decode::<u64>(),
        Err(EventError::Payload(_))
    ));
}

/// A retry with `Any` or `Exists` is found by its first event's id anywhere
/// in the stream's current incarnation (`$ev.ids`, FORMAT.md "Event ids"),
/// not only at the stream's end: after other appends, after a reopen, in a
/// batch; an append repeating only some of its events is a conflict; a
/// soft-deleted incarnation's events are not repeats; `check` stays clean.
#[test]
fn retries_with_any_are_found_after_other_appends_and_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ids.cairn");
    let ev = |t: &str| EventData::new(t, t.as_bytes().to_vec());
    let (a, b, c, x) = (ev("a"), ev("b"), ev("c"), ev("x"));
    {
        let db = Database::create(&path).unwrap();
        let store = EventStore::new(&db);
        store
            .append("s", ExpectedVersion::Any, std::slice::from_ref(&a))
            .unwrap();
        store
            .append("s", ExpectedVersion::Any, &[b.clone(), c.clone()])
            .unwrap();
        for i in 0..50 {
            store
                .append("s", ExpectedVersion::Any, &[ev(&format!("n{i}"))])
                .unwrap();
        }
        let end = store.next_position().unwrap();
        for mode in [ExpectedVersion::Any, ExpectedVersion::Exists] {
            let r = store.append("s", mode, std::slice::from_ref(&a)).unwrap();
            assert_eq!(
                (r.idempotent, r.version, r.first_position),
                (true, Some(StreamVersion(0)), Some(Position(0))),
                "{mode:?}"
            );
            let r = store.append("s", mode, &[b.clone(), c.clone()]).unwrap();
            assert_eq!((r.idempotent, r.version), (true, Some(StreamVersion(2))));
        }
        assert_eq!(store.next_position().unwrap(), end, "nothing written");
        db.close().unwrap();
    }
    let db = Database::open(&path).unwrap();
    let store = EventStore::new(&db);
    let end = store.next_position().unwrap();
    let r = store
        .append("s", ExpectedVersion::Any, std::slice::from_ref(&b))
        .unwrap();
    assert_eq!((r.idempotent, r.version), (true, Some(StreamVersion(1))));
    // b then x: b is there, followed by c, not x.
    let e = store
        .append("s", ExpectedVersion::Any, &[b.clone(), x.clone()])
        .unwrap_err();
    assert!(
        matches!(
            &e,
            EventError::IdempotencyConflict {
                repeated: 1,
                count: 2,
                version: StreamVersion(1),
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(store.next_position().unwrap(), end, "nothing written");
    // Another stream's ids are its own.
    let r = store
        .append("t", ExpectedVersion::Any, std::slice::from_ref(&a))
        .unwrap();
    assert!(!r.idempotent);
    // A soft-deleted stream's old events are not repeats of the new one's.
    store
        .delete_stream("s", ExpectedVersion::Any, false)
        .unwrap();
    let r = store
        .append("s", ExpectedVersion::Any, std::slice::from_ref(&a))
        .unwrap();
    assert_eq!((r.idempotent, r.version), (false, Some(StreamVersion(53))));
    let r = store
        .append("s", ExpectedVersion::Any, std::slice::from_ref(&a))
        .unwrap();
    assert_eq!((r.idempotent, r.version), (true, Some(StreamVersion(53))));
    assert_eq!(store.check().unwrap(), Vec::<String>::new());
}

/// Idempotent appends as KurrentDB's: a retry of a written append, in every
/// expected-version mode, writes nothing and is acknowledged with the
/// original versions and positions; an append repeating only its first
/// events (by id) is `IdempotencyConflict` and writes nothing.
#[test]
fn retries_are_acknowledged_with_their_positions_in_every_mode() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::create(dir.path().join("idem.cairn")).unwrap();
    let store = EventStore::new(&db).with_durability(Durability::None);
    let ev = |t: &str| EventData::new(t, t.as_bytes().to_vec());
    store
        .append("other", ExpectedVersion::Any, &[ev("o")])
        .unwrap();
    let (a, b, c) = (ev("a"), ev("b"), ev("c"));
    let ab = [a.clone(), b.clone()];
    let first = store.append("s", ExpectedVersion::Any, &ab).unwrap();
    assert_eq!(
        (first.version, first.first_position, first.count),
        (Some(StreamVersion(1)), Some(Position(1)), 2)
    );
    let log_len = store.next_position().unwrap();
    // The retry of an append made with Any, or with any expectation that
    // held (NoStream: the stream now exists; Exists: it now ends with them).
    for mode in [
        ExpectedVersion::Any,
        ExpectedVersion::Exists,
        ExpectedVersion::NoStream,
    ] {
        let again = store.append("s", mode, &ab).unwrap();
        assert!(again.idempotent, "{mode:?}");
        assert_eq!(
            (again.version, again.first_position, again.count),
            (Some(StreamVersion(1)), Some(Position(1)), 2),
            "{mode:?}"
        );
        assert_eq!(
            again.positions().collect::<Vec<_>>(),
            [Position(1), Position(2)]
        );
    }
    assert_eq!(store.next_position().unwrap(), log_len, "nothing written");
    // Exact: the events right after the expected version, even when more
    // followed them.
    store
        .append(
            "s",
            ExpectedVersion::Exact(StreamVersion(1)),
            std::slice::from_ref(&c),
        )
        .unwrap();
    let r = store
        .append(
            "s",
            ExpectedVersion::Exact(StreamVersion(1)),
            std::slice::from_ref(&c),
        )
        .unwrap();
    assert_eq!(
        (r.idempotent, r.version, r.first_position, r.count),
        (true, Some(StreamVersion(2)), Some(Position(3)), 1)
    );
    let r = store.append("s", ExpectedVersion::NoStream, &ab).unwrap();
    assert_eq!((r.idempotent, r.version), (true, Some(StreamVersion(1))));
    let log_len = store.next_position().unwrap();
    // Partial repeats: the stream ends with c; [c, d] repeats only c.
    let d = ev("d");
    for mode in [ExpectedVersion::Any, ExpectedVersion::Exists] {
        let e = store
            .append("s", mode, &[c.clone(), d.clone()])
            .unwrap_err();
        assert!(
            matches!(
                &e,
                EventError::IdempotencyConflict {
                    repeated: 1,
                    count: 2,
                    version: StreamVersion(2),
                    ..
                }
            ),
            "{mode:?}: {e:?}"
        );
        assert!(e.to_string().contains("\"s\""), "{e}");
    }
    // Exact(0): b is at version 1, but [b, d] differs after it.
    let e = store
        .append(
            "s",
            ExpectedVersion::Exact(StreamVersion(0)),
            &[b.clone(), d.clone()],
        )
        .unwrap_err();
    assert!(
        matches!(&e, EventError::IdempotencyConflict { repeated: 1, .. }),
        "{e:?}"
    );
    // NoStream: the stream starts with a, then b, not d.
    let e = store
        .append("s", ExpectedVersion::NoStream, &[a.clone(), d.clone()])
        .unwrap_err();
    assert!(
        matches!(&e, EventError::IdempotencyConflict { repeated: 1, .. }),
        "{e:?}"
    );
    assert_eq!(store.next_position().unwrap(), log_len, "nothing written");
    // New ids after the repeated ones: a new append.
    let r = store.append("s", ExpectedVersion::Any, &[d]).unwrap();
    assert_eq!((r.idempotent, r.version), (false, Some(StreamVersion(3))));
    // Events repeated from two appends: acknowledged, positions not dense
    // (another stream's event came between them), so none reported.
    store
        .append("t", ExpectedVersion::Any, std::slice::from_ref(&a))
        .unwrap();
    store
        .append("other", ExpectedVersion::Any, &[ev("x")])
        .unwrap();
    store
        .append("t", ExpectedVersion::Any, std::slice::from_ref(&b))
        .unwrap();
    let r = store.append("t", ExpectedVersion::Any, &ab).unwrap();
    assert_eq!(
        (r.idempotent, r.version, r.first_position, r.count),
        (true, Some(StreamVersion(1)), None, 0)
    );
    // A snapshot too large names the stream and the snapshot.
    let e = store
        .save_snapshot(
            "s",
            StreamVersion(0),
            &vec![0; cairndb::limits::MAX_EVENT_DATA_BYTES + 1],
        )
        .unwrap_err();
    assert!(
        matches!(&e, EventError::SnapshotTooLarge { version: 0, .. }),
        "{e:?}"
    );
    let msg = e.to_string();
    assert!(
        msg.starts_with("cannot save a snapshot of stream \"s\" at version 0"),
        "{msg}"
    );
}

/// Drains `sub` with `next_timeout` until it is caught up: the events it
/// delivered, copied out.
fn owned_history<P>(sub: &mut cairndb::events::Subscription<'_, P>) -> Vec<RecordedEvent> {
    let mut got = Vec::new();
    loop {
        match sub.next_timeout(Duration::ZERO).unwrap() {
            Some(SubscriptionMessage::Event(e)) => got.push(e),
            Some(SubscriptionMessage::CaughtUp { .. }) | None => return got,
        }
    }
}

/// Drains `sub` through `poll_borrowed`, breaking after a varying number
/// of events (1 to 7) and starting again, until it is caught up; after
/// each break the checkpoint is past the last event delivered and at or
/// before the next one (`number`: an event's position or version, by the
/// subscription's own numbering).
fn borrowed_history<P: PartialOrd + std::fmt::Debug>(
    sub: &mut cairndb::events::Subscription<'_, P>,
    number: impl Fn(&RecordedEvent) -> P,
) -> Vec<RecordedEvent> {
    let mut got: Vec<RecordedEvent> = Vec::new();
    let mut caught_up = false;
    let mut round = 0usize;
    let mut resumed_at: Option<P> = None;
    while !caught_up {
        round += 1;
        let stop_after = 1 + round % 7;
        let mut taken = 0;
        let flow = sub
            .poll_borrowed(Duration::ZERO, |m| match m {
                SubscriptionMessage::Event(e) => {
                    assert!(taken < stop_after, "an event handed after a break");
                    let e = e.to_owned();
                    if let Some(cp) = resumed_at.take() {
                        assert!(cp <= number(&e), "resumed at {cp:?}, delivered {e:?}");
                    }
                    got.push(e);
                    taken += 1;
                    if taken == stop_after {
                        ControlFlow::Break(())
                    } else {
                        ControlFlow::Continue(())
                    }
                }
                SubscriptionMessage::CaughtUp { .. } => {
                    caught_up = true;
                    ControlFlow::Continue(())
                }
            })
            .unwrap();
        if flow.is_break() {
            let last = got.last().expect("a break follows an event");
            let cp = sub.checkpoint();
            assert!(
                cp > number(last),
                "checkpoint {cp:?} after a break at {last:?}"
            );
            resumed_at = Some(cp);
        } else if !caught_up {
            assert!(
                round < 100_000,
                "poll_borrowed returned without catching up"
            );
        }
    }
    got
}

/// The borrowing subscription form (`poll_borrowed`: events read in place)
/// delivers exactly what `next_timeout` does — global and stream targets,
/// filters, bodies inline and by reference (over 512 bytes), metadata —
/// when stopped and started again after any event, after `next_timeout`
/// buffered a batch, and live: events committed while it waits arrive
/// before its timeout.
#[test]
fn borrowed_subscriptions_deliver_what_owned_ones_do() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::create(dir.path().join("borrowed.cairn")).unwrap();
    let store = EventStore::new(&db).with_durability(Durability::None);
    let streams = [
        "order-0", "order-1", "order-2", "order-3", "cart-0", "cart-1", "cart-2",
    ];
    let event = |i: usize| {
        let len = if i % 50 == 7 { 2_000 } else { 8 + i % 40 };
        let ev = EventData::new(
            if i.is_multiple_of(3) { "B" } else { "A" },
            vec![i as u8; len],
        );
        if i.is_multiple_of(11) {
            ev.with_metadata(format!("meta-{i}").into_bytes())
        } else {
            ev
        }
    };
    let n = crate::common::iters(3_000) as usize;
    for chunk in (0..n).collect::<Vec<_>>().chunks(25) {
        let txn = db.begin_write().unwrap();
        txn.set_durability(Durability::None);
        {
            let mut w = EventWriter::new(&txn);
            for &i in chunk {
                let s = streams[(i * 5 + i / 7) % streams.len()];
                w.append(s, ExpectedVersion::Any, &[event(i)]).unwrap();
            }
        }
        txn.commit().unwrap();
    }
    let filters = [
        EventFilter::all(),
        EventFilter::stream_prefix("cart"),
        EventFilter::types(["B"]),
    ];
    for filter in &filters {
        let want = owned_history(&mut store.subscribe_all(Position(0), filter.clone()));
        assert!(want.len() > 100, "{filter:?}: {} events", want.len());
        assert!(
            want.iter().any(|e| e.data.len() > 512),
            "{filter:?}: a body by reference"
        );
        // Event p is the p-th appended (one writer).
        for e in &want {
            let appended = event(e.position.0 as usize);
            assert_eq!(
                (e.event_type.as_str(), &e.data, &e.metadata),
                (
                    appended.event_type.as_str(),
                    &appended.data,
                    &appended.metadata
                ),
                "{filter:?}: the event at {}",
                e.position.0
            );
        }
        let mut sub = store.subscribe_all(Position(0), filter.clone());
        let got = borrowed_history(&mut sub, |e| e.position);
        assert_eq!(got, want, "{filter:?}: the borrowed subscription's events");
        // From the middle, after next_timeout buffered a batch: no gap, no
        // repeat.
        let from = want[want.len() / 3].position;
        let mut sub = store.subscribe_all(from, filter.clone());
        let mut mixed = Vec::new();
        for _ in 0..3 {
            match sub.next_timeout(Duration::ZERO).unwrap() {
                Some(SubscriptionMessage::Event(e)) => mixed.push(e),
                other => panic!("{filter:?}: {other:?}"),
            }
        }
        mixed.extend(borrowed_history(&mut sub, |e| e.position));
        assert_eq!(mixed, want[want.len() / 3..], "{filter:?}: mixed forms");
    }
    for s in ["order-1", "cart-2"] {
        let want = owned_history(&mut store.subscribe_stream(s, StreamVersion(0)));
        assert!(want.len() > 100, "{s}: {} events", want.len());
        let mut sub = store.subscribe_stream(s, StreamVersion(0));
        let got = borrowed_history(&mut sub, |e| e.version);
        assert_eq!(got, want, "{s}: the borrowed stream subscription's events");
    }
    // Live: caught up, then events committed while it waits arrive.
    let mut sub = store.subscribe_all(Position(0), EventFilter::all());
    let history = borrowed_history(&mut sub, |e| e.position);
    assert_eq!(history.len(), n);
    let more = 100;
    let live = std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..more {
                std::thread::sleep(Duration::from_millis(1));
                store
                    .append("late", ExpectedVersion::Any, &[event(i)])
                    .unwrap();
            }
        });
        let mut live: Vec<RecordedEvent> = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while live.len() < more && std::time::Instant::now() < deadline {
            let _ = sub
                .poll_borrowed(Duration::from_secs(5), |m| {
                    if let SubscriptionMessage::Event(e) = m {
                        live.push(e.to_owned());
                    }
                    ControlFlow::Continue(())
                })
                .unwrap();
        }
        live
    });
    let positions: Vec<u64> = live.iter().map(|e| e.position.0).collect();
    let want: Vec<u64> = (n as u64..(n + more) as u64).collect();
    assert_eq!(positions, want, "live events, in order, once each");
    assert_eq!(sub.checkpoint(), Position((n + more) as u64));
}

/// `read_all_with`'s resume position: reading the global log in chunks of
/// a few events, each from where the last said to resume, forward and
/// backward, with and without a filter, yields the whole read once each
/// (no repeat, no gap); backward ends with `None` once position 0 was
/// looked at, and an empty log resumes nowhere backward.
#[test]
fn read_all_with_resumes_where_it_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::create(dir.path().join("resume.cairn")).unwrap();
    let store = EventStore::new(&db).with_durability(Durability::None);
    let none = db.begin_read().unwrap().events().read_all_with(
        ReadFrom::End,
        Direction::Backward,
        5,
        &EventFilter::all(),
        |_| ControlFlow::Continue(()),
    );
    assert_eq!(none.unwrap(), None, "an empty log");
    for i in 0..120u64 {
        let s = ["a-1", "b-1", "a-2"][(i % 3) as usize];
        let t = if i % 4 == 0 { "X" } else { "Y" };
        store
            .append(s, ExpectedVersion::Any, &[EventData::new(t, vec![i as u8])])
            .unwrap();
    }
    let snap = db.begin_read().unwrap();
    for filter in [
        EventFilter::all(),
        EventFilter::types(["X"]),
        EventFilter::stream_prefix("a-"),
    ] {
        for dir in [Direction::Forward, Direction::Backward] {
            let start = match dir {
                Direction::Forward => ReadFrom::Start,
                Direction::Backward => ReadFrom::End,
            };
            let whole: Vec<u64> = snap
                .events()
                .read_all(start, dir, usize::MAX, &filter)
                .unwrap()
                .iter()
                .map(|e| e.position.0)
                .collect();
            for chunk in [1usize, 7, 50] {
                let (mut got, mut from, mut reads) = (Vec::new(), start, 0);
                loop {
                    reads += 1;
                    assert!(reads < 1_000, "{filter:?} {dir:?} {chunk}: no end");
                    let mut n = 0;
                    let next = snap
                        .events()
                        .read_all_with(from, dir, chunk, &filter, |e| {
                            got.push(e.position.0);
                            n += 1;
                            ControlFlow::Continue(())
                        })
                        .unwrap();
                    match next {
                        Some(p) if n > 0 => from = ReadFrom::At(p),
                        _ => break,
                    }
                }
                assert_eq!(got, whole, "{filter:?} {dir:?} in chunks of {chunk}");
            }
        }
        // A break: the next read begins just past the event broken at.
        let mut first = None;
        let next = snap
            .events()
            .read_all_with(ReadFrom::Start, Direction::Forward, 10, &filter, |e| {
                first = Some(e.position.0);
                ControlFlow::Break(())
            })
            .unwrap();
        assert_eq!(next, first.map(|p| Position(p + 1)), "{filter:?}");
    }
    let backward_to_0 = snap.events().read_all_with(
        ReadFrom::At(Position(3)),
        Direction::Backward,
        10,
        &EventFilter::all(),
        |_| ControlFlow::Continue(()),
    );
    assert_eq!(backward_to_0.unwrap(), None, "position 0 looked at");
}

/// `run_borrowed` delivers history, then `CaughtUp`, then live events as
/// they commit, until its stop handle is used from another thread; it
/// returns the checkpoint after the last event delivered, and a
/// subscription resumed from it sees only later events. A break from the
/// callback ends it at once with the checkpoint past that event.
#[test]
fn run_borrowed_runs_until_stopped_and_resumes_from_its_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::create(dir.path().join("run.cairn")).unwrap();
    let store = EventStore::new(&db).with_durability(Durability::None);
    let ev = |i: u64| EventData::new("T", i.to_le_bytes().to_vec());
    for i in 0..50 {
        store.append("s", ExpectedVersion::Any, &[ev(i)]).unwrap();
    }
    let mut sub = store.subscribe_all(Position(0), EventFilter::all());
    let stop = sub.stop_handle();
    let (got, caught_up_at, checkpoint) = std::thread::scope(|s| {
        let runner = s.spawn(|| {
            let (mut got, mut caught_up_at) = (Vec::new(), None);
            let checkpoint = sub
                .run_borrowed(|m| {
                    match m {
                        SubscriptionMessage::Event(e) => {
                            let mut b = [0u8; 8];
                            b.copy_from_slice(e.data);
                            got.push((e.position.0, u64::from_le_bytes(b)));
                        }
                        SubscriptionMessage::CaughtUp { checkpoint } => {
                            caught_up_at = Some((checkpoint, got.len()));
                        }
                    }
                    ControlFlow::Continue(())
                })
                .unwrap();
            (got, caught_up_at, checkpoint)
        });
        for i in 50..80 {
            std::thread::sleep(Duration::from_millis(2));
            store.append("s", ExpectedVersion::Any, &[ev(i)]).unwrap();
        }
        // Until the last live event arrived, then stop.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while db.begin_read().unwrap().events().next_position().unwrap() < Position(80)
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(200));
        stop.stop();
        runner.join().unwrap()
    });
    let want: Vec<(u64, u64)> = (0..80).map(|i| (i, i)).collect();
    assert_eq!(got, want, "history, then live events, once each, in order");
    let (at, delivered) = caught_up_at.expect("CaughtUp after the history");
    assert!(
        at >= Position(50) && delivered >= 50,
        "caught up at {at:?} after {delivered}"
    );
    assert_eq!(checkpoint, Position(80));
    // Resumed from the checkpoint: only what came after.
    store.append("s", ExpectedVersion::Any, &[ev(80)]).unwrap();
    let mut sub = store.subscribe_all(checkpoint, EventFilter::all());
    let mut later = Vec::new();
    let cp = sub
        .run_borrowed(|m| match m {
            SubscriptionMessage::Event(e) => {
                later.push(e.position.0);
                ControlFlow::Break(())
            }
            SubscriptionMessage::CaughtUp { .. } => ControlFlow::Continue(()),
        })
        .unwrap();
    assert_eq!((later, cp), (vec![80], Position(81)));
}

/// Versions and positions come back as their own types: an append's
/// positions, a stream's info and snapshot, a stream subscription's
/// checkpoint; they print and serialize as the bare number.
#[test]
fn versions_and_positions_are_typed() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::create(dir.path().join("typed-ids.cairn")).unwrap();
    let store = EventStore::new(&db).with_durability(Durability::None);
    let two = || vec![EventData::new("T", vec![1]), EventData::new("T", vec![2])];
    store.append("other", ExpectedVersion::Any, &two()).unwrap();
    let r = store
        .append("s", ExpectedVersion::NoStream, &two())
        .unwrap();
    assert_eq!(r.version, Some(StreamVersion(1)));
    assert_eq!((r.first_position, r.count), (Some(Position(2)), 2));
    assert_eq!(
        r.positions().collect::<Vec<_>>(),
        [Position(2), Position(3)]
    );
    let empty = store.append("s", ExpectedVersion::Any, &[]).unwrap();
    assert_eq!((empty.first_position, empty.count), (None, 0));
    assert_eq!(empty.positions().count(), 0);
    assert_eq!(store.next_position().unwrap(), Position(4));

    // A snapshot past the stream's end says so (not "cannot read").
    let e = store
        .save_snapshot("s", StreamVersion(9), b"too far")
        .unwrap_err();
    assert!(
        matches!(
            &e,
            EventError::SnapshotPastEnd {
                version: 9,
                next: 2,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().starts_with("cannot save a snapshot"), "{e}");
    store
        .save_snapshot("s", StreamVersion(0), b"state@0")
        .unwrap();
    let loaded = store.load("s", None).unwrap();
    assert_eq!(
        loaded.snapshot,
        Some((StreamVersion(0), b"state@0".to_vec()))
    );
    assert_eq!(loaded.events.len(), 1);
    assert_eq!(loaded.events[0].version, StreamVersion(1));
    assert_eq!(loaded.events[0].position, Position(3));

    store
        .set_stream_metadata(
            "s",
            StreamMetadata {
                max_count: None,
                truncate_before: Some(StreamVersion(1)),
            },
        )
        .unwrap();
    let info = store.stream_info("s").unwrap().unwrap();
    assert_eq!(info.first_visible, StreamVersion(1));
    assert_eq!(info.metadata.truncate_before, Some(StreamVersion(1)));

    let mut sub = store.subscribe_stream("s", StreamVersion(0));
    let mut seen = Vec::new();
    loop {
        match sub.next_timeout(Duration::from_secs(5)).unwrap() {
            Some(SubscriptionMessage::Event(e)) => seen.push(e.version),
            Some(SubscriptionMessage::CaughtUp { checkpoint }) => {
                assert_eq!(checkpoint, StreamVersion(2));
                break;
            }
            None => panic!("the stream subscription never caught up"),
        }
    }
    assert_eq!(seen, [StreamVersion(1)], "truncated events are hidden");
    assert_eq!(sub.checkpoint(), StreamVersion(2));

    let e = &store
        .read_all(
            ReadFrom::At(Position(3)),
            Direction::Forward,
            1,
            &EventFilter::all(),
        )
        .unwrap()[0];
    assert_eq!(format!("{} {:?}", e.version, e.position), "1 3");
    assert_eq!(
        serde_json::to_string(&(e.version, e.position)).unwrap(),
        "[1,3]"
    );
}

/// An append through `EventStore` remembers the log's end for the commit it
/// made, and the next append starting from that commit uses it instead of
/// reading the log. A transaction that already wrote to the log (a second
/// `EventWriter` in it) or a commit in between must not use it: positions
/// stay dense and unique.
#[test]
fn remembered_log_end_is_used_only_for_the_commit_it_describes() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::create(dir.path().join("end.cairn")).unwrap();
    let store = EventStore::new(&db).with_durability(Durability::None);
    let ev = |n: &str| EventData::new(n, n.as_bytes().to_vec());
    store
        .append("a", ExpectedVersion::Any, &[ev("a0")])
        .unwrap();
    // Two writers in one transaction started from the remembered commit.
    let txn = db.begin_write().unwrap();
    EventWriter::new(&txn)
        .append("b", ExpectedVersion::Any, &[ev("b0"), ev("b1")])
        .unwrap();
    EventWriter::new(&txn)
        .append("c", ExpectedVersion::Any, &[ev("c0")])
        .unwrap();
    txn.commit().unwrap();
    // A store append after a commit it did not make, then one after its own.
    store
        .append("a", ExpectedVersion::Any, &[ev("a1")])
        .unwrap();
    store
        .append("d", ExpectedVersion::Any, &[ev("d0")])
        .unwrap();
    // A transaction that changed nothing in between.
    db.begin_write().unwrap().commit().unwrap();
    store
        .append("d", ExpectedVersion::Any, &[ev("d1")])
        .unwrap();
    let all = store
        .read_all(
            ReadFrom::Start,
            Direction::Forward,
            100,
            &EventFilter::default(),
        )
        .unwrap();
    let got: Vec<(u64, &str)> = all
        .iter()
        .map(|e| (e.position.0, e.event_type.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            (0, "a0"),
            (1, "b0"),
            (2, "b1"),
            (3, "c0"),
            (4, "a1"),
            (5, "d0"),
            (6, "d1")
        ]
    );
    // And after a reopen the log reads the same.
    drop(db);
    let db = Database::open(dir.path().join("end.cairn")).unwrap();
    let n = EventStore::new(&db)
        .read_all(
            ReadFrom::Start,
            Direction::Forward,
            100,
            &EventFilter::default(),
        )
        .unwrap()
        .len();
    assert_eq!(n, 7);
}
