//! Write groups (`txn/group.rs`): one-operation commits of several threads
//! run by one of them in one transaction (event appends). Threads write at
//! once; every operation's reported outcome must be what the database holds
//! afterwards, a refused operation must leave nothing (its group's other
//! operations commit), and groups must actually have formed.

use std::collections::BTreeMap;

use cairndb::events::{
    Direction, EventData, EventError, EventStore, ExpectedVersion, ReadFrom, StreamVersion, Uuid,
};
use cairndb::{testing, Database, Durability};

/// Threads in each test (more than the two cores CI has: groups form).
const THREADS: usize = 4;

/// Threads append to shared streams with exact expected versions (so many
/// appends are refused), and repeat some appends (idempotent: nothing is
/// written). Every append told it succeeded is in its stream at its version
/// and in the log at its position; nothing else is; positions are dense.
#[test]
fn grouped_appends_are_what_each_thread_was_told() {
    // Groups form when appends meet; a round in which none did (threads
    // that happened not to overlap) is checked and run again.
    let mut rounds = 0;
    let (groups, ops, events) = loop {
        rounds += 1;
        let (groups, ops, events) = appends_round();
        if groups > 0 || rounds == 5 {
            break (groups, ops, events);
        }
    };
    assert!(groups > 0, "no write group formed in {rounds} rounds");
    crate::common::report(&format!(
        "groups-events: threads={THREADS} rounds={rounds} events={events} groups={groups} grouped_ops={ops}"
    ));
}

/// One round of `grouped_appends_are_what_each_thread_was_told`: the write
/// groups formed, their operations, and the events written.
fn appends_round() -> (u64, u64, usize) {
    const STREAMS: usize = 3;
    const TRIES: usize = 400;
    let dir = tempfile::tempdir().unwrap();
    let db = Database::create(dir.path().join("e.cairn")).unwrap();
    let store = EventStore::new(&db).with_durability(Durability::None);
    // (stream, version, position, id) of every event an append was told
    // it wrote.
    let start = std::sync::Barrier::new(THREADS);
    let told: Vec<Vec<(String, u64, u64, Uuid)>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..THREADS)
            .map(|t| {
                let (store, start) = (&store, &start);
                s.spawn(move || {
                    start.wait();
                    let mut mine = Vec::new();
                    let mut refused = 0;
                    for i in 0..TRIES {
                        let stream = format!("s-{}", (i + t) % STREAMS);
                        let expected = match store.stream_version(&stream).unwrap() {
                            None => ExpectedVersion::NoStream,
                            Some(v) => ExpectedVersion::Exact(v),
                        };
                        let evs: Vec<EventData> = (0..1 + i % 2)
                            .map(|k| EventData::new("E", format!("{t}/{i}/{k}").into_bytes()))
                            .collect();
                        match store.append(&stream, expected, &evs) {
                            Ok(r) => {
                                assert!(!r.idempotent);
                                let first = r.first_position.unwrap().0;
                                let last = r.version.unwrap().0;
                                let n = evs.len() as u64;
                                for (k, e) in evs.iter().enumerate() {
                                    let k = k as u64;
                                    mine.push((stream.clone(), last + 1 - n + k, first + k, e.id));
                                }
                                // The same append again: acknowledged, nothing
                                // written.
                                let again = store.append(&stream, expected, &evs).unwrap();
                                assert!(again.idempotent);
                                assert_eq!(again.version, r.version);
                            }
                            Err(EventError::WrongExpectedVersion { .. }) => refused += 1,
                            Err(e) => panic!("{e}"),
                        }
                        // And one to the thread's own stream (never refused).
                        let own = format!("own-{t}");
                        let e = EventData::new("Own", format!("{t}/{i}").into_bytes());
                        let r = store
                            .append(&own, ExpectedVersion::Any, std::slice::from_ref(&e))
                            .unwrap();
                        assert_eq!(r.version, Some(StreamVersion(i as u64)));
                        mine.push((own, i as u64, r.first_position.unwrap().0, e.id));
                    }
                    assert!(refused < TRIES);
                    mine
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let told: Vec<_> = told.into_iter().flatten().collect();
    let all = crate::common::whole_log(&store);
    assert_eq!(
        all.len(),
        told.len(),
        "the log holds exactly the appends told so"
    );
    for (i, e) in all.iter().enumerate() {
        assert_eq!(e.position.0, i as u64, "positions are dense");
    }
    let by_pos: BTreeMap<u64, _> = all.iter().map(|e| (e.position.0, e)).collect();
    for (stream, version, position, id) in &told {
        let e = by_pos[position];
        assert_eq!(
            (&e.stream, e.version, e.id),
            (stream, StreamVersion(*version), *id)
        );
    }
    for name in (0..STREAMS)
        .map(|s| format!("s-{s}"))
        .chain((0..THREADS).map(|t| format!("own-{t}")))
    {
        let evs = store
            .read_stream(&name, ReadFrom::Start, Direction::Forward, usize::MAX)
            .unwrap();
        assert!(evs
            .iter()
            .enumerate()
            .all(|(i, e)| e.version == StreamVersion(i as u64)));
    }
    let (groups, ops) = testing::write_groups(&db);
    (groups, ops, told.len())
}

/// Appends of both durabilities at once (they queue apart, and a leader of
/// one nudges the other's head when it lets the lock go): every append of
/// every thread is in its stream, in order, and the log is dense.
#[test]
fn appends_of_both_durabilities_at_once_all_land() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::create(dir.path().join("d.cairn")).unwrap();
    // (Durable appends each wait for a flush: fewer of them.)
    let per = |t: usize| if t == 0 { 40 } else { 300 };
    let start = std::sync::Barrier::new(THREADS);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (db, start) = (&db, &start);
            s.spawn(move || {
                let durability = if t == 0 {
                    Durability::Immediate
                } else {
                    Durability::None
                };
                let store = EventStore::new(db).with_durability(durability);
                start.wait();
                for i in 0..per(t) {
                    let e = EventData::new("E", format!("{t}/{i}").into_bytes());
                    let r = store
                        .append(&format!("w-{t}"), ExpectedVersion::Any, &[e])
                        .unwrap();
                    assert_eq!(r.version, Some(StreamVersion(i as u64)));
                }
            });
        }
    });
    let store = EventStore::new(&db);
    let all = crate::common::whole_log(&store);
    assert_eq!(all.len(), (0..THREADS).map(per).sum::<usize>());
    assert!(all
        .iter()
        .enumerate()
        .all(|(i, e)| e.position.0 == i as u64));
    for t in 0..THREADS {
        let evs = store
            .read_stream(
                &format!("w-{t}"),
                ReadFrom::Start,
                Direction::Forward,
                usize::MAX,
            )
            .unwrap();
        let bodies: Vec<String> = evs
            .iter()
            .map(|e| String::from_utf8_lossy(&e.data).into_owned())
            .collect();
        let want: Vec<String> = (0..per(t)).map(|i| format!("{t}/{i}")).collect();
        assert_eq!(bodies, want, "stream w-{t}");
    }
}
