//! Property: the event layer on a cluster (`EtcdDatabase::events`, the
//! embedded engine's event code through the storage seam) behaves as the
//! shared model says (`events_model.rs`, the same operations the embedded
//! engine's suite runs, with the same seed run on a file beside it); two
//! appends that read the same end of the global log cannot both commit (a
//! typed `Conflict`); concurrent appenders with expected versions get
//! dense, unique positions and lose no acknowledged event; reads longer
//! than a page of the cluster's answers page through the log both ways.

use std::collections::{BTreeMap, BTreeSet};
use std::thread;

use cairndb::events::{
    AppendResult, Direction, EventData, EventError, EventFilter, EventStore, EventWriter,
    ExpectedVersion, Loaded, Position, ReadFrom, RecordedEvent, StreamInfo, StreamMetadata,
    StreamVersion,
};
use cairndb_etcd::{Error, EtcdDatabase, EtcdEvents};

use crate::common::{cluster, connect, Rng};
use crate::events_model::{self, Target};

/// The cluster's event store as a target of the shared model: errors of
/// the event layer come back as `Error::Events`; any other is a failure.
struct OnCluster<'db>(EtcdEvents<'db>);

fn layer<T>(r: cairndb_etcd::Result<T>) -> Result<T, EventError> {
    match r {
        Ok(v) => Ok(v),
        Err(Error::Events(e)) => Err(*e),
        Err(other) => panic!("not an event layer error: {other}"),
    }
}

impl Target for OnCluster<'_> {
    fn append(
        &self,
        s: &str,
        expected: ExpectedVersion,
        evs: &[EventData],
    ) -> Result<AppendResult, EventError> {
        layer(self.0.append(s, expected, evs))
    }
    fn delete_stream(
        &self,
        s: &str,
        expected: ExpectedVersion,
        hard: bool,
    ) -> Result<(), EventError> {
        layer(self.0.delete_stream(s, expected, hard))
    }
    fn set_stream_metadata(&self, s: &str, meta: StreamMetadata) -> Result<(), EventError> {
        layer(self.0.set_stream_metadata(s, meta))
    }
    fn save_snapshot(&self, s: &str, v: StreamVersion, state: &[u8]) -> Result<(), EventError> {
        layer(self.0.save_snapshot(s, v, state))
    }
    fn load(&self, s: &str, version: Option<StreamVersion>) -> Result<Loaded, EventError> {
        layer(self.0.load(s, version))
    }
    fn read_stream(
        &self,
        s: &str,
        from: ReadFrom<StreamVersion>,
        dir: Direction,
        limit: usize,
    ) -> Result<Vec<RecordedEvent>, EventError> {
        layer(self.0.read_stream(s, from, dir, limit))
    }
    fn read_all(
        &self,
        from: ReadFrom<Position>,
        dir: Direction,
        limit: usize,
        filter: &EventFilter,
    ) -> Result<Vec<RecordedEvent>, EventError> {
        layer(self.0.read_all(from, dir, limit, filter))
    }
    fn list_streams(&self, prefix: &str) -> Result<Vec<StreamInfo>, EventError> {
        layer(self.0.list_streams(prefix))
    }
    fn next_position(&self) -> Result<Position, EventError> {
        layer(self.0.next_position())
    }
    fn check(&self) -> Result<Vec<String>, EventError> {
        layer(self.0.check())
    }
}

/// The embedded engine as a target (a file, never reopened here).
struct OnFile(cairndb::Database);

impl Target for OnFile {
    fn append(
        &self,
        s: &str,
        expected: ExpectedVersion,
        evs: &[EventData],
    ) -> Result<AppendResult, EventError> {
        EventStore::new(&self.0).append(s, expected, evs)
    }
    fn delete_stream(
        &self,
        s: &str,
        expected: ExpectedVersion,
        hard: bool,
    ) -> Result<(), EventError> {
        EventStore::new(&self.0).delete_stream(s, expected, hard)
    }
    fn set_stream_metadata(&self, s: &str, meta: StreamMetadata) -> Result<(), EventError> {
        EventStore::new(&self.0).set_stream_metadata(s, meta)
    }
    fn save_snapshot(&self, s: &str, v: StreamVersion, state: &[u8]) -> Result<(), EventError> {
        EventStore::new(&self.0).save_snapshot(s, v, state)
    }
    fn load(&self, s: &str, version: Option<StreamVersion>) -> Result<Loaded, EventError> {
        EventStore::new(&self.0).load(s, version)
    }
    fn read_stream(
        &self,
        s: &str,
        from: ReadFrom<StreamVersion>,
        dir: Direction,
        limit: usize,
    ) -> Result<Vec<RecordedEvent>, EventError> {
        EventStore::new(&self.0).read_stream(s, from, dir, limit)
    }
    fn read_all(
        &self,
        from: ReadFrom<Position>,
        dir: Direction,
        limit: usize,
        filter: &EventFilter,
    ) -> Result<Vec<RecordedEvent>, EventError> {
        EventStore::new(&self.0).read_all(from, dir, limit, filter)
    }
    fn list_streams(&self, prefix: &str) -> Result<Vec<StreamInfo>, EventError> {
        EventStore::new(&self.0).list_streams(prefix)
    }
    fn next_position(&self) -> Result<Position, EventError> {
        EventStore::new(&self.0).next_position()
    }
    fn check(&self) -> Result<Vec<String>, EventError> {
        EventStore::new(&self.0).check()
    }
}

#[test]
fn events_on_a_cluster_and_a_file_match_the_model() {
    let Some(c) = cluster("events_on_a_cluster_and_a_file_match_the_model") else {
        return;
    };
    let seed = Rng::new("events-model-etcd").next();
    let (cases, ops) = (2u64, 150u64);
    let mut divergences = 0;
    for case in 0..cases {
        let db = connect(&c.url(&format!("events{case}")));
        let mut rng = Rng::with_seed(seed ^ case);
        let (d, _) = events_model::run(
            &mut OnCluster(db.events()),
            &mut |n| rng.below(n),
            ops,
            &format!("etcd: seed {seed} case {case}"),
        );
        divergences += d;
        same_layout_as_a_file(&db);
        // The same operations (same seed) on the embedded engine.
        let dir = tempfile::tempdir().unwrap();
        let file = cairndb::Database::create(dir.path().join("ev.cairn")).unwrap();
        let mut rng = Rng::with_seed(seed ^ case);
        let (d, _) = events_model::run(
            &mut OnFile(file),
            &mut |n| rng.below(n),
            ops,
            &format!("file: seed {seed} case {case}"),
        );
        divergences += d;
    }
    eprintln!("events-model-etcd: cases={cases} ops={ops} divergences={divergences} seed={seed}");
    assert_eq!(divergences, 0, "seed {seed}");
}

/// The prefix's tables, copied byte for byte into a new file (as
/// `cairn migrate` does), are an event layer the embedded engine reads the
/// same and finds consistent: the layer's keys, values and type names are
/// the file's.
fn same_layout_as_a_file(db: &EtcdDatabase) {
    let dir = tempfile::tempdir().unwrap();
    let file = cairndb::Database::create(dir.path().join("copy.cairn")).unwrap();
    let restore = file.begin_restore().unwrap();
    let rx = db.begin_read().unwrap();
    let txn = file.begin_write().unwrap();
    for name in rx.list_tables().unwrap() {
        let (k, v) = rx.table_types(&name).unwrap().unwrap();
        let mut t = txn.open_table_for_restore(&restore, &name, &k, &v).unwrap();
        for (key, value) in rx.open_table(&name).unwrap().range(..).unwrap() {
            t.insert(key.as_slice(), value.as_slice()).unwrap();
        }
    }
    txn.commit().unwrap();
    let (cluster, copy) = (db.events(), EventStore::new(&file));
    assert_eq!(copy.check().unwrap(), Vec::<String>::new());
    let all = EventFilter::all();
    assert_eq!(
        cluster
            .read_all(ReadFrom::Start, Direction::Forward, usize::MAX, &all)
            .unwrap(),
        copy.read_all(ReadFrom::Start, Direction::Forward, usize::MAX, &all)
            .unwrap()
    );
    assert_eq!(
        cluster.list_streams("").unwrap(),
        copy.list_streams("").unwrap()
    );
    assert_eq!(
        cluster.next_position().unwrap(),
        copy.next_position().unwrap()
    );
}

fn event(ty: &str) -> EventData {
    EventData::new(ty, b"{}".to_vec())
}

/// Two write transactions appending to different existing streams read
/// the same end of the global log (and nothing else in common): the second
/// commit is a retryable `Conflict` and writes nothing; `events().append`
/// runs such a transaction again.
#[test]
fn appends_reading_the_same_log_end_conflict() {
    let Some(c) = cluster("appends_reading_the_same_log_end_conflict") else {
        return;
    };
    let db = connect(&c.url("conflict"));
    let ev = db.events();
    for s in ["a", "b"] {
        ev.append(s, ExpectedVersion::NoStream, &[event("First")])
            .unwrap();
    }
    let tx1 = db.begin_write().unwrap();
    let tx2 = db.begin_write().unwrap();
    let r1 = EventWriter::new(&tx1)
        .append("a", ExpectedVersion::Any, &[event("A")])
        .unwrap();
    let r2 = EventWriter::new(&tx2)
        .append("b", ExpectedVersion::Exact(StreamVersion(0)), &[event("B")])
        .unwrap();
    assert_eq!(r1.first_position, Some(Position(2)));
    assert_eq!(r2.first_position, Some(Position(2)), "the same end read");
    tx1.commit().unwrap();
    match tx2.commit() {
        Err(e @ Error::Conflict { .. }) => assert!(e.is_retryable()),
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(
        ev.stream_version("b").unwrap(),
        Some(StreamVersion(0)),
        "nothing written"
    );
    let r = ev
        .append("b", ExpectedVersion::Exact(StreamVersion(0)), &[event("B")])
        .unwrap();
    assert_eq!(r.first_position, Some(Position(3)));
    assert_eq!(ev.next_position().unwrap(), Position(4));
    assert!(ev.check().unwrap().is_empty());
}

/// Several appends in one transaction of the cluster (`EventWriter` over
/// its `WriteTransaction`): new streams get distinct ids (the count of
/// streams seen through the transaction's own writes), positions follow
/// each other, and the commit is all or nothing.
#[test]
fn appends_in_one_cluster_transaction_are_one_commit() {
    let Some(c) = cluster("appends_in_one_cluster_transaction_are_one_commit") else {
        return;
    };
    let db = connect(&c.url("one-txn"));
    let ev = db.events();
    ev.append("old", ExpectedVersion::NoStream, &[event("Old")])
        .unwrap();
    let tx = db.begin_write().unwrap();
    let mut w = EventWriter::new(&tx);
    for s in ["x", "y", "z"] {
        w.append(s, ExpectedVersion::NoStream, &[event(s), event(s)])
            .unwrap();
    }
    assert_eq!(
        ev.next_position().unwrap(),
        Position(1),
        "not yet committed"
    );
    tx.commit().unwrap();
    for (i, s) in ["x", "y", "z"].into_iter().enumerate() {
        let got = ev
            .read_stream(s, ReadFrom::Start, Direction::Forward, 10)
            .unwrap();
        let got: Vec<(String, u64, u64)> = got
            .into_iter()
            .map(|e| (e.event_type, e.version.0, e.position.0))
            .collect();
        let p = 1 + 2 * i as u64;
        assert_eq!(got, [(s.into(), 0, p), (s.into(), 1, p + 1)], "{s}");
    }
    assert!(ev.check().unwrap().is_empty());
}

const WRITERS: u64 = 4;
const APPENDS_PER_WRITER: u64 = 12;

/// What a writer had acknowledged: (stream, version, position, event id).
type Acked = (String, u64, u64, cairndb::events::Uuid);

/// Appends by one writer: to the shared stream with the version it last
/// read (`Exact`, read again after a `WrongExpectedVersion`), or to its
/// own stream (`Any`); a lost answer is retried with the same events.
fn writer(db: &EtcdDatabase, w: u64, rng: &mut Rng) -> (Vec<Acked>, u64) {
    let ev = db.events();
    let mut acked = Vec::new();
    let mut wrong = 0u64;
    for i in 0..APPENDS_PER_WRITER {
        let n = 1 + rng.below(3);
        let evs: Vec<EventData> = (0..n).map(|j| event(&format!("W{w}.{i}.{j}"))).collect();
        let shared = rng.below(2) == 0;
        let stream = if shared {
            "shared".to_string()
        } else {
            format!("own-{w}")
        };
        let r = loop {
            let expected = if shared {
                match ev.stream_version("shared").unwrap() {
                    Some(v) => ExpectedVersion::Exact(v),
                    None => ExpectedVersion::NoStream,
                }
            } else {
                ExpectedVersion::Any
            };
            match ev.append(&stream, expected, &evs) {
                Ok(r) => {
                    if let ExpectedVersion::Exact(v) = expected {
                        if !r.idempotent {
                            assert_eq!(r.version, Some(StreamVersion(v.0 + n)));
                        }
                    }
                    break r;
                }
                Err(Error::Events(e)) if matches!(*e, EventError::WrongExpectedVersion { .. }) => {
                    wrong += 1;
                }
                // Too many conflicts in a row, or a lost answer: the same
                // events again (an idempotent repeat if they were written).
                Err(e @ (Error::Conflict { .. } | Error::CommitIndeterminate { .. })) => {
                    eprintln!("writer {w}: {e}; retrying");
                }
                Err(e) => panic!("writer {w}: {e}"),
            }
        };
        let (Some(first), Some(last)) = (r.first_position, r.version) else {
            panic!("writer {w}: an append of {n} events acknowledged without positions: {r:?}");
        };
        assert_eq!(r.count, n);
        for (j, e) in evs.iter().enumerate() {
            let j = j as u64;
            acked.push((stream.clone(), last.0 + 1 - n + j, first.0 + j, e.id));
        }
    }
    (acked, wrong)
}

#[test]
fn concurrent_appenders_get_dense_positions_and_lose_nothing() {
    let Some(c) = cluster("concurrent_appenders_get_dense_positions_and_lose_nothing") else {
        return;
    };
    let url = c.url("concurrent");
    let seed = Rng::new("concurrent_appenders_get_dense_positions_and_lose_nothing").next();
    let handles: Vec<_> = (0..WRITERS)
        .map(|w| {
            let url = url.clone();
            thread::spawn(move || {
                let db = connect(&url);
                let mut rng = Rng::with_seed(seed ^ w.wrapping_mul(0x9E37_79B9));
                writer(&db, w, &mut rng)
            })
        })
        .collect();
    let mut acked = Vec::new();
    let mut wrong = 0;
    for h in handles {
        let (a, n) = h.join().unwrap();
        acked.extend(a);
        wrong += n;
    }
    let db = connect(&url);
    let ev = db.events();
    let all = ev
        .read_all(
            ReadFrom::Start,
            Direction::Forward,
            usize::MAX,
            &EventFilter::all(),
        )
        .unwrap();
    // Dense and unique: the log's positions are exactly 0..n.
    let positions: Vec<u64> = all.iter().map(|e| e.position.0).collect();
    assert_eq!(positions, (0..all.len() as u64).collect::<Vec<_>>());
    // Every acknowledged event is where its acknowledgement said, and
    // nothing else is in the log.
    let by_position: BTreeMap<u64, &RecordedEvent> =
        all.iter().map(|e| (e.position.0, e)).collect();
    for (stream, version, position, id) in &acked {
        let e = by_position
            .get(position)
            .unwrap_or_else(|| panic!("acknowledged position {position} is missing"));
        assert_eq!(
            (&e.stream, e.version.0, e.id),
            (stream, *version, *id),
            "position {position}"
        );
    }
    assert_eq!(acked.len(), all.len(), "no event that was not acknowledged");
    let ids: BTreeSet<_> = all.iter().map(|e| e.id).collect();
    assert_eq!(ids.len(), all.len(), "no event twice");
    // Each stream's versions are contiguous from 0.
    let mut streams: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for e in &all {
        streams.entry(&e.stream).or_default().push(e.version.0);
    }
    for (s, versions) in &streams {
        assert_eq!(
            *versions,
            (0..versions.len() as u64).collect::<Vec<_>>(),
            "{s}"
        );
    }
    assert!(ev.check().unwrap().is_empty());
    eprintln!(
        "events-concurrent-etcd: writers={WRITERS} events={} wrong_expected_version={wrong} seed={seed}",
        all.len()
    );
}

/// Reads longer than a page of the cluster's answers (128 keys) page
/// through the log from either end, and meet in the middle.
#[test]
fn long_reads_page_through_the_log_both_ways() {
    let Some(c) = cluster("long_reads_page_through_the_log_both_ways") else {
        return;
    };
    let db = connect(&c.url("paging"));
    let ev = db.events();
    let n = 300u64;
    let started = std::time::Instant::now();
    for i in 0..n / 3 {
        let evs: Vec<EventData> = (0..3).map(|j| event(&format!("E{}", i * 3 + j))).collect();
        ev.append(&format!("s-{}", i % 2), ExpectedVersion::Any, &evs)
            .unwrap();
    }
    eprintln!(
        "events-etcd: {} appends of 3 events, one client: {:.1} ms each",
        n / 3,
        started.elapsed().as_secs_f64() * 1000.0 / (n / 3) as f64
    );
    let all = |from, dir, limit| {
        ev.read_all(from, dir, limit, &EventFilter::all())
            .unwrap()
            .into_iter()
            .map(|e| e.position.0)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        all(ReadFrom::Start, Direction::Forward, usize::MAX),
        (0..n).collect::<Vec<_>>()
    );
    assert_eq!(
        all(ReadFrom::End, Direction::Backward, usize::MAX),
        (0..n).rev().collect::<Vec<_>>()
    );
    assert_eq!(
        all(ReadFrom::At(Position(250)), Direction::Backward, 200),
        (51..=250).rev().collect::<Vec<_>>()
    );
    assert_eq!(
        all(ReadFrom::At(Position(7)), Direction::Forward, 200),
        (7..207).collect::<Vec<_>>()
    );
    let stream = ev
        .read_stream("s-1", ReadFrom::End, Direction::Backward, usize::MAX)
        .unwrap();
    assert_eq!(stream.len(), 150);
    assert!(stream
        .windows(2)
        .all(|w| w[0].version.0 == w[1].version.0 + 1));
    let rx = db.begin_read().unwrap();
    let snap = cairndb::events::EventSnapshot::new(&rx);
    assert_eq!(snap.next_position().unwrap(), Position(n));
    assert!(snap.check().unwrap().is_empty());
}

/// A snapshot's range through the seam, read by a random pattern of `next`
/// and `next_back` over several pages, gives every entry once, in order
/// from each end; a write transaction's range and `last` see its writes.
#[test]
fn seam_ranges_read_from_both_ends_meet_in_the_middle() {
    use cairndb::seam::{SeamRead, SeamTable, SeamTableMut, SeamWrite};
    let Some(c) = cluster("seam_ranges_read_from_both_ends_meet_in_the_middle") else {
        return;
    };
    let db = connect(&c.url("seam"));
    const NUMS: cairndb::TableDefinition<u64, &[u8]> = cairndb::TableDefinition::new("nums");
    let n = 400u64;
    for batch in 0..n / 100 {
        let tx = db.begin_write().unwrap();
        let mut t = SeamWrite::open_table(&tx, NUMS).unwrap();
        for k in batch * 100..(batch + 1) * 100 {
            t.insert(k * 2, k.to_le_bytes().as_slice()).unwrap();
        }
        drop(t);
        tx.commit().unwrap();
    }
    let mut rng = Rng::new("seam_ranges_read_from_both_ends_meet_in_the_middle");
    let rx = db.begin_read().unwrap();
    let t = rx.open_table_if_exists(NUMS).unwrap().unwrap();
    assert_eq!(SeamTable::len(&t).unwrap(), n);
    assert_eq!(SeamTable::last(&t).unwrap().unwrap().0.value(), (n - 1) * 2);
    for _ in 0..4 {
        let (lo, hi) = (rng.below(n * 2), rng.below(n * 2));
        let want: Vec<u64> = (0..n)
            .map(|k| k * 2)
            .filter(|k| (lo..hi).contains(k))
            .collect();
        let mut range = SeamTable::range(&t, lo..hi).unwrap();
        let (mut front, mut back) = (Vec::new(), Vec::new());
        loop {
            let item = if rng.below(2) == 0 {
                range.next().map(|r| (true, r))
            } else {
                range.next_back().map(|r| (false, r))
            };
            let Some((forward, r)) = item else { break };
            let (k, v) = r.unwrap();
            assert_eq!(v.value(), (k.value() / 2).to_le_bytes().as_slice());
            if forward {
                front.push(k.value());
            } else {
                back.push(k.value());
            }
        }
        back.reverse();
        front.extend(back);
        assert_eq!(front, want, "range {lo}..{hi}");
    }
    // A write transaction sees its own writes in `last`, `len` and ranges.
    let tx = db.begin_write().unwrap();
    let mut t = SeamWrite::open_table(&tx, NUMS).unwrap();
    t.insert(n * 2, b"new".as_slice()).unwrap();
    t.remove(0).unwrap();
    assert_eq!(SeamTable::last(&t).unwrap().unwrap().0.value(), n * 2);
    assert_eq!(SeamTable::len(&t).unwrap(), n);
    let first = SeamTable::iter(&t).unwrap().next().unwrap().unwrap();
    assert_eq!(first.0.value(), 2);
    t.remove(n * 2).unwrap();
    t.remove((n - 1) * 2).unwrap();
    assert_eq!(SeamTable::last(&t).unwrap().unwrap().0.value(), (n - 2) * 2);
    assert_eq!(SeamTable::len(&t).unwrap(), n - 2);
}

/// A live subscriber on a cluster tailing concurrent writers (a `Watch`
/// between batches) gets every event once, in position order, after one
/// `CaughtUp`; a subscription resumed from a checkpoint taken midway
/// continues exactly there; a stream subscription opened before its
/// stream exists delivers the stream's versions in order.
#[test]
fn live_subscribers_on_a_cluster_see_every_event_once_in_order() {
    use cairndb::events::SubscriptionMessage;
    use std::time::Duration;
    let Some(c) = cluster("live_subscribers_on_a_cluster_see_every_event_once_in_order") else {
        return;
    };
    let url = c.url("live");
    let db = connect(&url);
    let ev = db.events();
    ev.append(
        "before",
        ExpectedVersion::Any,
        &[event("Old"), event("Old")],
    )
    .unwrap();
    let mut all = ev.subscribe_all(Position(0), EventFilter::all());
    let mut one = ev.subscribe_stream("w-1", StreamVersion(0));
    let (writers, appends) = (3u64, 20u64);
    let handles: Vec<_> = (0..writers)
        .map(|w| {
            let url = url.clone();
            thread::spawn(move || {
                let db = connect(&url);
                for i in 0..appends {
                    let evs = [event(&format!("{w}.{i}")), event(&format!("{w}.{i}"))];
                    db.events()
                        .append(&format!("w-{w}"), ExpectedVersion::Any, &evs)
                        .unwrap();
                }
            })
        })
        .collect();
    let total = 2 + writers * appends * 2;
    let mut seen = Vec::new();
    let mut caught_up = 0;
    while (seen.len() as u64) < total {
        match all.next_timeout(Duration::from_secs(20)).unwrap() {
            Some(SubscriptionMessage::Event(e)) => {
                seen.push(e.position.0);
            }
            Some(SubscriptionMessage::CaughtUp { checkpoint }) => {
                caught_up += 1;
                assert!(checkpoint.0 >= 2, "{checkpoint:?}");
            }
            None => panic!("no event within 20 s after {} of {total}", seen.len()),
        }
    }
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(
        seen,
        (0..total).collect::<Vec<_>>(),
        "every event once, in order"
    );
    assert_eq!(caught_up, 1);
    assert!(all
        .next_timeout(Duration::from_millis(300))
        .unwrap()
        .is_none());
    // A checkpoint taken after 10 events, while the rest of the batch is
    // buffered, resumes at the 11th.
    let mut first = ev.subscribe_all(Position(0), EventFilter::all());
    for p in 0..10 {
        match first.next_timeout(Duration::from_secs(5)).unwrap() {
            Some(SubscriptionMessage::Event(e)) => assert_eq!(e.position, Position(p)),
            other => panic!("expected event {p}, got {other:?}"),
        }
    }
    let from = first.checkpoint();
    assert_eq!(from, Position(10));
    let mut resumed = ev.subscribe_all(from, EventFilter::all());
    let mut rest = Vec::new();
    while let Some(SubscriptionMessage::Event(e)) =
        resumed.next_timeout(Duration::from_secs(5)).unwrap()
    {
        rest.push(e.position.0);
    }
    assert_eq!(rest, (10..total).collect::<Vec<_>>());
    // The stream subscription, opened before "w-1" had an event.
    let mut versions = Vec::new();
    while (versions.len() as u64) < appends * 2 {
        match one.next_timeout(Duration::from_secs(5)).unwrap() {
            Some(SubscriptionMessage::Event(e)) => {
                assert_eq!(e.stream, "w-1");
                versions.push(e.version.0);
            }
            Some(SubscriptionMessage::CaughtUp { .. }) => {}
            None => panic!("stream subscription stalled at {versions:?}"),
        }
    }
    assert_eq!(versions, (0..appends * 2).collect::<Vec<_>>());
}
