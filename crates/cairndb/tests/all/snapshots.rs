//! Snapshot views. Property: a read-only view of one read snapshot — a
//! collection's (`ReadTransaction::collection`, `SnapshotCollection::new`
//! over an `Arc<ReadTransaction>`) and the event streams'
//! (`ReadTransaction::events`) — answers every read (find with sort, skip,
//! limit, projection; count, explain, aggregate with `$lookup`, distinct,
//! get, len, list_indexes; stream and global-log reads, stream info, load)
//! exactly as a fresh read did when the snapshot was taken, however many
//! commits, index creations, drops and appends follow; results that share
//! the snapshot outlive the view and can be read from other threads while
//! another thread writes. A view cannot write: that is checked at compile
//! time (the `compile_fail` examples on `SnapshotCollection` and
//! `EventSnapshot`).

use std::borrow::Borrow;
use std::sync::Arc;

use cairndb::document::{
    Document, FindOptions, IndexOptions, Results, Snapshot, SnapshotCollection, Value,
};
use cairndb::events::{
    Direction, EventData, EventFilter, EventStore, ExpectedVersion, ReadFrom, StreamVersion,
};
use cairndb::storage::sim::SplitMix64;
use cairndb::{Database, Durability, ReadTransaction};
use serde_json::{json, Value as Json};

use crate::common;

const STREAMS: [&str; 3] = ["s-0", "s-1", "s-2"];

fn scratch() -> (tempfile::TempDir, Database) {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::create(dir.path().join("snap.cairn")).unwrap();
    (dir, db)
}

fn docs_json<I: IntoIterator<Item = Result<Document, E>>, E: std::fmt::Debug>(it: I) -> String {
    let v: Vec<Json> = it.into_iter().map(|d| d.unwrap().to_json()).collect();
    Json::Array(v).to_string()
}

fn values_json(v: &[Value]) -> String {
    Json::Array(v.iter().map(Value::to_json).collect()).to_string()
}

fn find_opts(n: usize) -> FindOptions {
    match n {
        0 => FindOptions::new().sort(json!({"_id": 1})).unwrap(),
        1 => FindOptions::new()
            .sort(json!({"k": -1, "_id": 1}))
            .unwrap()
            .skip(1)
            .limit(5),
        _ => FindOptions::new().projection(json!({"k": 1})).unwrap(),
    }
}

const FILTERS: [&str; 3] = [r#"{}"#, r#"{"k": {"$gte": 3}}"#, r#"{"g": "b"}"#];

fn group_pipeline() -> Json {
    json!([
        {"$group": {"_id": "$g", "n": {"$sum": 1}, "s": {"$sum": "$k"}}},
        {"$sort": {"_id": 1}}
    ])
}

fn lookup_pipeline() -> Json {
    json!([
        {"$match": {"k": {"$lte": 2}}},
        {"$sort": {"_id": 1}},
        {"$lookup": {"from": "other", "localField": "k", "foreignField": "k", "as": "o"}},
        {"$project": {"o._id": 1}}
    ])
}

/// Every read, as text, through a snapshot view of `s`.
fn view_answers<S>(s: S) -> Vec<String>
where
    S: Snapshot + Borrow<ReadTransaction> + Clone,
{
    let c = SnapshotCollection::<S, Document>::new(s.clone(), "c");
    let mut out = Vec::new();
    for (n, f) in FILTERS.iter().enumerate() {
        let filter: Json = serde_json::from_str(f).unwrap();
        out.push(docs_json(
            c.find_with(filter.clone(), find_opts(n)).unwrap(),
        ));
        out.push(c.count(filter.clone()).unwrap().to_string());
        out.push(
            c.explain(filter, find_opts(n))
                .unwrap()
                .returned
                .to_string(),
        );
    }
    out.push(docs_json(c.aggregate(group_pipeline()).unwrap()));
    out.push(docs_json(c.aggregate(lookup_pipeline()).unwrap()));
    out.push(values_json(&c.distinct("tags", json!({})).unwrap()));
    out.push(format!(
        "{:?}",
        (0..12)
            .map(|i| c.get(i).unwrap().map(|d| d.to_json()))
            .collect::<Vec<_>>()
    ));
    out.push(c.len().unwrap().to_string());
    out.push(format!(
        "{:?}",
        c.list_indexes()
            .unwrap()
            .into_iter()
            .map(|i| i.name)
            .collect::<Vec<_>>()
    ));
    out.push(format!("{:?}", s.borrow().list_collections().unwrap()));
    let ev = s.borrow().events();
    for name in STREAMS {
        out.push(format!(
            "{:?}",
            ev.read_stream(name, ReadFrom::Start, Direction::Forward, 100)
                .map(|es| es.iter().map(|e| e.data.clone()).collect::<Vec<_>>())
        ));
        out.push(format!(
            "{:?}",
            ev.read_stream(name, ReadFrom::End, Direction::Backward, 2)
                .map(|es| es.iter().map(|e| e.version).collect::<Vec<_>>())
        ));
        out.push(format!("{:?}", ev.stream_info(name).unwrap()));
        out.push(format!("{:?}", ev.stream_version(name).unwrap()));
        out.push(format!("{:?}", ev.load(name, None).map(|l| l.events.len())));
    }
    out.push(format!(
        "{:?}",
        ev.read_all(
            ReadFrom::Start,
            Direction::Forward,
            1000,
            &EventFilter::all()
        )
        .unwrap()
        .iter()
        .map(|e| (e.position, e.stream.clone()))
        .collect::<Vec<_>>()
    ));
    out.push(format!("{:?}", ev.next_position().unwrap()));
    out.push(format!("{:?}", ev.list_streams("").unwrap()));
    out
}

/// The same reads through the ordinary API (a fresh snapshot per call).
fn fresh_answers(db: &Database) -> Vec<String> {
    let c = db.collection::<Document>("c");
    let mut out = Vec::new();
    for (n, f) in FILTERS.iter().enumerate() {
        let filter: Json = serde_json::from_str(f).unwrap();
        out.push(docs_json(
            c.find_with(filter.clone(), find_opts(n)).unwrap(),
        ));
        out.push(c.count(filter.clone()).unwrap().to_string());
        out.push(
            c.explain(filter, find_opts(n))
                .unwrap()
                .returned
                .to_string(),
        );
    }
    out.push(docs_json(c.aggregate(group_pipeline()).unwrap()));
    out.push(docs_json(c.aggregate(lookup_pipeline()).unwrap()));
    out.push(values_json(&c.distinct("tags", json!({})).unwrap()));
    out.push(format!(
        "{:?}",
        (0..12)
            .map(|i| c.get(i).unwrap().map(|d| d.to_json()))
            .collect::<Vec<_>>()
    ));
    out.push(c.len().unwrap().to_string());
    out.push(format!(
        "{:?}",
        c.list_indexes()
            .unwrap()
            .into_iter()
            .map(|i| i.name)
            .collect::<Vec<_>>()
    ));
    out.push(format!("{:?}", db.list_collections().unwrap()));
    let ev = EventStore::new(db);
    for name in STREAMS {
        out.push(format!(
            "{:?}",
            ev.read_stream(name, ReadFrom::Start, Direction::Forward, 100)
                .map(|es| es.iter().map(|e| e.data.clone()).collect::<Vec<_>>())
        ));
        out.push(format!(
            "{:?}",
            ev.read_stream(name, ReadFrom::End, Direction::Backward, 2)
                .map(|es| es.iter().map(|e| e.version).collect::<Vec<_>>())
        ));
        out.push(format!("{:?}", ev.stream_info(name).unwrap()));
        out.push(format!("{:?}", ev.stream_version(name).unwrap()));
        out.push(format!("{:?}", ev.load(name, None).map(|l| l.events.len())));
    }
    out.push(format!(
        "{:?}",
        ev.read_all(
            ReadFrom::Start,
            Direction::Forward,
            1000,
            &EventFilter::all()
        )
        .unwrap()
        .iter()
        .map(|e| (e.position, e.stream.clone()))
        .collect::<Vec<_>>()
    ));
    out.push(format!("{:?}", ev.next_position().unwrap()));
    out.push(format!("{:?}", ev.list_streams("").unwrap()));
    out
}

fn doc(rng: &mut SplitMix64, id: i64) -> Document {
    let tags: Vec<Value> = (0..rng.below(3))
        .map(|_| Value::from(["x", "y", "z"][rng.below(3) as usize]))
        .collect();
    Document::new()
        .with("_id", id)
        .with("k", rng.below(10) as i64)
        .with("g", ["a", "b", "c"][rng.below(3) as usize])
        .with("tags", Value::Array(tags))
}

/// One random write: documents, indexes, the foreign collection, streams.
fn random_write(db: &Database, rng: &mut SplitMix64, next_id: &mut i64) {
    let c = db
        .collection::<Document>("c")
        .with_durability(Durability::None);
    let other = db
        .collection::<Document>("other")
        .with_durability(Durability::None);
    let ev = EventStore::new(db).with_durability(Durability::None);
    match rng.below(12) {
        0..=2 => {
            let d = doc(rng, *next_id);
            *next_id += 1;
            c.insert(&d).unwrap();
        }
        3 => {
            let k = rng.below(10) as i64;
            c.update_many(
                json!({"k": k}),
                json!({"$inc": {"k": 1}}),
                Default::default(),
            )
            .unwrap();
        }
        4 => {
            let id = rng.below(*next_id as u64 + 1) as i64;
            c.delete_one(json!({"_id": id})).unwrap();
        }
        5 => {
            // An index the older snapshots do not have (created once).
            c.create_index(&[("g", 1)], IndexOptions::default())
                .unwrap();
        }
        6 => {
            let d = Document::new()
                .with("_id", 1000 + *next_id)
                .with("k", rng.below(4) as i64);
            *next_id += 1;
            other.insert(&d).unwrap();
        }
        7 => {
            if rng.below(4) == 0 {
                other.drop().unwrap();
            }
        }
        8 => {
            let s = STREAMS[rng.below(3) as usize];
            let _ = ev.delete_stream(s, ExpectedVersion::Any, false);
        }
        _ => {
            let s = STREAMS[rng.below(3) as usize];
            let n = 1 + rng.below(3);
            let events: Vec<EventData> = (0..n)
                .map(|i| EventData::new("T", format!("{}-{i}", rng.next_u64()).into_bytes()))
                .collect();
            ev.append(s, ExpectedVersion::Any, &events).unwrap();
        }
    }
}

#[test]
fn views_answer_as_of_their_snapshot_whatever_commits_follow() {
    let seed = common::seed("snapshot views");
    let mut rng = SplitMix64(seed);
    let (_dir, db) = scratch();
    db.collection::<Document>("c")
        .create_index(&[("k", 1)], IndexOptions::default())
        .unwrap();
    let mut next_id = 0i64;
    // Live snapshots with the answers recorded when each was taken.
    let mut live: Vec<(Arc<ReadTransaction>, Vec<String>)> = Vec::new();
    let (mut taken, mut checks) = (0u64, 0u64);
    let rounds = common::iters(300);
    for round in 0..rounds {
        random_write(&db, &mut rng, &mut next_id);
        if rng.below(6) == 0 {
            let snap = Arc::new(db.begin_read().unwrap());
            // No commit between the snapshot and these reads: the view
            // (borrowing it) and the ordinary API see the same commit.
            let fresh = fresh_answers(&db);
            let seen = view_answers(&*snap);
            assert_eq!(seen, fresh, "seed {seed} round {round}: view vs fresh read");
            live.push((snap, fresh));
            taken += 1;
            if live.len() > 6 {
                live.remove(rng.below(live.len() as u64) as usize);
            }
        }
        if !live.is_empty() {
            let (snap, want) = &live[rng.below(live.len() as u64) as usize];
            let now = view_answers(snap.clone());
            for (i, (a, b)) in now.iter().zip(want).enumerate() {
                assert_eq!(
                    a, b,
                    "seed {seed} round {round}: read {i} of a snapshot changed"
                );
            }
            checks += 1;
        }
    }
    for (snap, want) in &live {
        assert_eq!(&view_answers(snap.clone()), want, "seed {seed}: at the end");
    }
    common::report(&format!(
        "snapshot-views: writes={rounds} snapshots={taken} checks={checks} mismatches=0 seed={seed}"
    ));
}

#[test]
fn shared_results_outlive_the_view_and_read_from_other_threads_while_one_writes() {
    let (_dir, db) = scratch();
    let db = Arc::new(db);
    let c = db
        .collection::<Document>("c")
        .with_durability(Durability::None);
    c.create_index(&[("k", 1)], IndexOptions::default())
        .unwrap();
    let docs: Vec<Document> = (0..300)
        .map(|i| Document::new().with("_id", i).with("k", i % 7))
        .collect();
    c.insert_many(&docs).unwrap();
    let snap = Arc::new(db.begin_read().unwrap());
    // Results that own a share of the snapshot, the view dropped at once.
    let early: Results<Document, Arc<ReadTransaction>> = SnapshotCollection::new(snap.clone(), "c")
        .find(json!({"k": 3}))
        .unwrap();
    let want_ids: Vec<i64> = (0..300).filter(|i| i % 7 == 3).collect();
    let readers: Vec<_> = (0..3)
        .map(|t| {
            let snap = snap.clone();
            std::thread::spawn(move || {
                let view = SnapshotCollection::<_, Document>::new(snap, "c");
                for round in 0..40 {
                    assert_eq!(
                        view.count(json!({})).unwrap(),
                        300,
                        "reader {t} round {round}"
                    );
                    assert_eq!(view.len().unwrap(), 300);
                    let ks: Vec<i64> = view
                        .find_with(json!({"k": {"$gte": 6}}), FindOptions::new().limit(1000))
                        .unwrap()
                        .map(|d| d.unwrap().get("_id").and_then(Value::as_i64).unwrap())
                        .collect();
                    assert_eq!(ks, (0..300).filter(|i| i % 7 == 6).collect::<Vec<_>>());
                }
            })
        })
        .collect();
    // Meanwhile: every document rewritten, half deleted, more inserted.
    let writer = {
        let db = db.clone();
        std::thread::spawn(move || {
            let c = db
                .collection::<Document>("c")
                .with_durability(Durability::None);
            for i in 0..60 {
                c.update_many(
                    json!({"k": i % 7}),
                    json!({"$inc": {"k": 100}}),
                    Default::default(),
                )
                .unwrap();
                c.delete_one(json!({"_id": i * 2})).unwrap();
                c.insert(&Document::new().with("_id", 1000 + i).with("k", 3))
                    .unwrap();
            }
        })
    };
    writer.join().unwrap();
    for r in readers {
        r.join().unwrap();
    }
    drop(snap);
    // The early results, read last, on another thread: still the old state.
    let got: Vec<i64> = std::thread::spawn(move || {
        early
            .map(|d| d.unwrap().get("_id").and_then(Value::as_i64).unwrap())
            .collect()
    })
    .join()
    .unwrap();
    assert_eq!(got, want_ids);
    // The writes did land: 60 deleted, 60 inserted, none left at k 3
    // among the first 300 (each was moved up by 100 at least once).
    assert_eq!(c.count(json!({})).unwrap(), 300);
    assert_eq!(c.count(json!({"k": 3, "_id": {"$lt": 300}})).unwrap(), 0);
}

#[test]
fn a_view_of_a_collection_missing_from_its_snapshot_reads_empty() {
    let (_dir, db) = scratch();
    let snap = db.begin_read().unwrap();
    db.collection::<Document>("late")
        .insert(&Document::new().with("_id", 1))
        .unwrap();
    let v = snap.collection::<Document>("late");
    assert_eq!(v.count(json!({})).unwrap(), 0);
    assert_eq!(v.len().unwrap(), 0);
    assert!(v.get(1).unwrap().is_none());
    assert!(v.list_indexes().unwrap().is_empty());
    assert!(v.distinct("_id", json!({})).unwrap().is_empty());
    assert_eq!(v.aggregate(json!([{"$count": "n"}])).unwrap().count(), 0);
    assert!(snap
        .events()
        .read_stream("s", ReadFrom::Start, Direction::Forward, 1)
        .is_err());
    assert_eq!(
        snap.events().stream_version("s").unwrap(),
        None::<StreamVersion>
    );
    // A bad name is refused as by the ordinary API.
    let bad = snap.collection::<Document>("");
    assert!(bad.find(json!({})).is_err());
    assert!(bad.count(json!({})).is_err());
}
