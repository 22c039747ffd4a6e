//! Change streams: every committed change of a watched collection is
//! delivered exactly once, in commit order, from now or from a resume token
//! (across a reopen of the file too), with MongoDB's event shape; nothing
//! uncommitted or undone ever appears; the change log and the documents
//! agree after a crash at any I/O operation; the log stays within its
//! retention, and a token older than it is `ChangeStreamHistoryLost`;
//! drop, rename and disable end streams with `invalidate`; a collection
//! without the option writes no change record at all.
//! (MongoDB manual, "Change Events" and "Resume a Change Stream", for the
//! event shape, `invalidate`, `resumeAfter` versus `startAfter`.)

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use cairndb::document::{
    ChangeStreamOptions, Document, DocumentError, FullDocument, ResumeToken, UpdateOptions, Value,
};
use cairndb::storage::sim::{Fault, OpFilter, SimFile};
use cairndb::{Builder, Database, Durability};
use serde_json::json;

fn db() -> (tempfile::TempDir, Database) {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::create(dir.path().join("c.cairn")).unwrap();
    (dir, db)
}

fn j(ev: &Document) -> serde_json::Value {
    Value::Object(ev.clone()).to_json()
}

fn doc(v: serde_json::Value) -> Document {
    match Value::from_json(v).unwrap() {
        Value::Object(d) => d,
        _ => unreachable!(),
    }
}

#[test]
fn watching_needs_the_option_and_says_how() {
    let (_d, db) = db();
    let c = db.collection::<Document>("plain");
    c.insert(&doc(json!({"_id": 1}))).unwrap();
    for name in ["plain", "missing"] {
        let e = db
            .collection::<Document>(name)
            .watch(json!([]))
            .unwrap_err();
        assert!(
            matches!(&e, DocumentError::ChangeStreamNotEnabled { collection } if collection == name),
            "{e}"
        );
        assert!(e.to_string().contains("enable_change_stream"), "{e}");
    }
    // A collection nobody watches writes no change record.
    assert_eq!(db.change_log_bounds().unwrap(), None);
    c.update_many(
        json!({}),
        json!({"$set": {"a": 1}}),
        UpdateOptions::default(),
    )
    .unwrap();
    c.delete_many(json!({})).unwrap();
    assert_eq!(db.change_log_bounds().unwrap(), None);
    // ... also when another collection of the file is watched.
    let w = db.collection::<Document>("watched");
    w.enable_change_stream().unwrap();
    w.insert(&doc(json!({"_id": 1}))).unwrap();
    let before = db.change_log_bounds().unwrap();
    c.insert(&doc(json!({"_id": 2}))).unwrap();
    assert_eq!(db.change_log_bounds().unwrap(), before);
    assert!(!c.change_stream_enabled().unwrap());
    assert!(w.change_stream_enabled().unwrap());
}

#[test]
fn events_have_mongodbs_shape() {
    let (_d, db) = db();
    let c = db.collection::<Document>("orders");
    c.enable_change_stream().unwrap();
    let mut s = c.watch(json!([])).unwrap();
    let mut lookup = c
        .watch_with(
            json!([{"$match": {"operationType": "update"}}]),
            ChangeStreamOptions {
                full_document: FullDocument::UpdateLookup,
                ..Default::default()
            },
        )
        .unwrap();
    assert!(s.try_next().unwrap().is_none());
    c.insert(&doc(json!({"_id": 1, "a": {"b": 1, "c": 2}, "gone": true})))
        .unwrap();
    c.update_one(
        json!({"_id": 1}),
        json!({"$set": {"a.b": 5, "n": 1}, "$unset": {"gone": ""}}),
        UpdateOptions::default(),
    )
    .unwrap();
    c.replace(&doc(json!({"_id": 1, "x": 1}))).unwrap();
    c.upsert(&doc(json!({"_id": 2}))).unwrap();
    c.delete_id(1).unwrap();
    let evs: Vec<serde_json::Value> = std::iter::from_fn(|| s.try_next().unwrap())
        .map(|e| j(&e))
        .collect();
    let ops: Vec<&str> = evs
        .iter()
        .map(|e| e["operationType"].as_str().unwrap())
        .collect();
    assert_eq!(ops, ["insert", "update", "replace", "insert", "delete"]);
    assert_eq!(
        evs[0]["fullDocument"],
        json!({"_id": 1, "a": {"b": 1, "c": 2}, "gone": true})
    );
    assert_eq!(evs[0]["documentKey"], json!({"_id": 1}));
    assert_eq!(evs[0]["ns"], json!({"coll": "orders"}));
    assert!(evs[0]["_id"]["_data"].as_str().unwrap().len() == 34);
    assert!(evs[0]["wallTime"].as_i64().unwrap() > 0);
    assert_eq!(
        evs[1]["updateDescription"],
        json!({"updatedFields": {"a.b": 5, "n": 1}, "removedFields": ["gone"], "truncatedArrays": []})
    );
    // By default an update carries no document (MongoDB: fullDocument
    // only with updateLookup).
    assert!(evs[1].get("fullDocument").is_none());
    assert_eq!(evs[2]["fullDocument"], json!({"_id": 1, "x": 1}));
    assert!(evs[4].get("fullDocument").is_none());
    assert_eq!(evs[4]["documentKey"], json!({"_id": 1}));
    // clusterTime (the log position) increases with commit order.
    let times: Vec<i64> = evs
        .iter()
        .map(|e| e["clusterTime"].as_i64().unwrap())
        .collect();
    assert!(times.windows(2).all(|w| w[0] < w[1]), "{times:?}");
    let up = j(&lookup.try_next().unwrap().unwrap());
    assert_eq!(
        up["fullDocument"],
        json!({"_id": 1, "a": {"b": 5, "c": 2}, "n": 1})
    );
    assert!(lookup.try_next().unwrap().is_none());
}

#[test]
fn pipelines_match_and_project_and_guard_the_token() {
    let (_d, db) = db();
    let c = db.collection::<Document>("p");
    c.enable_change_stream().unwrap();
    let mut s = c
        .watch(json!([
            {"$match": {"operationType": "insert", "fullDocument.k": {"$gte": 2}}},
            {"$project": {"operationType": 1, "fullDocument.k": 1}}
        ]))
        .unwrap();
    for k in 0..4 {
        c.insert(&doc(json!({"_id": k, "k": k, "other": "x"})))
            .unwrap();
    }
    c.delete_id(3).unwrap();
    let got: Vec<serde_json::Value> = std::iter::from_fn(|| s.try_next().unwrap())
        .map(|e| {
            let mut v = j(&e);
            v.as_object_mut().unwrap().remove("_id");
            v
        })
        .collect();
    assert_eq!(
        got,
        vec![
            json!({"operationType": "insert", "fullDocument": {"k": 2}}),
            json!({"operationType": "insert", "fullDocument": {"k": 3}}),
        ]
    );
    // Removing the resume token is refused (MongoDB: ChangeStreamFatalError).
    let mut bad = c.watch(json!([{"$project": {"_id": 0}}])).unwrap();
    c.insert(&doc(json!({"_id": 10}))).unwrap();
    assert!(matches!(
        bad.try_next(),
        Err(DocumentError::ChangeStreamFatal { .. })
    ));
    // Stages that are not per-event are refused, naming the stage.
    let e = c.watch(json!([{"$group": {"_id": null}}])).unwrap_err();
    assert!(
        matches!(&e, DocumentError::Pipeline { stage: 0, operator, .. } if operator == "$group"),
        "{e}"
    );
}

#[test]
fn aborted_and_undone_writes_never_appear() {
    let (_d, db) = db();
    let c = db.collection::<Document>("a");
    c.enable_change_stream().unwrap();
    let mut s = c.watch(json!([])).unwrap();
    {
        let txn = db.begin_write().unwrap();
        txn.collection::<Document>("a")
            .insert(&doc(json!({"_id": "aborted"})))
            .unwrap();
        txn.abort();
    }
    // An operation refused by a rule undoes its own records.
    c.insert(&doc(json!({"_id": 1}))).unwrap();
    let batch = [doc(json!({"_id": 2})), doc(json!({"_id": 1}))];
    assert!(c.insert_many(batch.iter()).is_err());
    {
        let txn = db.begin_write().unwrap();
        let tc = txn.collection::<Document>("a");
        tc.insert(&doc(json!({"_id": 3}))).unwrap();
        assert!(tc.insert(&doc(json!({"_id": 1}))).is_err());
        // Inside a transaction, a refused operation undoes the records it
        // wrote (here the one of _id 4) and the transaction goes on.
        let batch = [doc(json!({"_id": 4})), doc(json!({"_id": 1}))];
        assert!(tc.insert_many(batch.iter()).is_err());
        txn.commit().unwrap();
    }
    let ids: Vec<serde_json::Value> = std::iter::from_fn(|| s.try_next().unwrap())
        .map(|e| j(&e)["documentKey"]["_id"].clone())
        .collect();
    assert_eq!(ids, vec![json!(1), json!(3)]);
}

/// One writer thread's operations: inserts of ids `t*1000+i`, every third
/// one then updated, every fifth deleted; what a watcher must see of it,
/// in this order.
fn writer_ops(t: i64, n: i64) -> Vec<(String, i64)> {
    let mut want = Vec::new();
    for i in 0..n {
        let id = t * 1000 + i;
        want.push(("insert".to_string(), id));
        if i % 3 == 0 {
            want.push(("update".to_string(), id));
        }
        if i % 5 == 0 {
            want.push(("delete".to_string(), id));
        }
    }
    want
}

fn run_writer(db: &Database, t: i64, n: i64) {
    let c = db
        .collection::<Document>("hot")
        .with_durability(Durability::None);
    for i in 0..n {
        let id = t * 1000 + i;
        c.insert(&doc(json!({"_id": id, "t": t, "i": i}))).unwrap();
        if i % 3 == 0 {
            c.update_one(
                json!({"_id": id}),
                json!({"$inc": {"i": 1}}),
                UpdateOptions::default(),
            )
            .unwrap();
        }
        if i % 5 == 0 {
            assert!(c.delete_id(id).unwrap());
        }
    }
}

/// Checks a delivered sequence: positions strictly increasing, and per
/// writer exactly its operations in its order.
fn check_delivery(evs: &[serde_json::Value], writers: i64, n: i64) {
    let mut last = 0;
    let mut per: BTreeMap<i64, Vec<(String, i64)>> = BTreeMap::new();
    for e in evs {
        let pos = e["clusterTime"].as_i64().unwrap();
        assert!(pos > last, "positions out of order: {last} then {pos}");
        last = pos;
        let id = e["documentKey"]["_id"].as_i64().unwrap();
        per.entry(id / 1000)
            .or_default()
            .push((e["operationType"].as_str().unwrap().to_string(), id));
    }
    for t in 0..writers {
        assert_eq!(
            per.remove(&t).unwrap_or_default(),
            writer_ops(t, n),
            "writer {t}: events differ (missing, repeated or out of order)"
        );
    }
    assert!(per.is_empty());
}

#[test]
fn concurrent_writers_are_seen_exactly_once_in_commit_order_across_resume_and_reopen() {
    const WRITERS: i64 = 4;
    const N: i64 = 150;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hot.cairn");
    let db = Arc::new(Database::create(&path).unwrap());
    db.collection::<Document>("hot")
        .enable_change_stream()
        .unwrap();
    let start = db
        .collection::<Document>("hot")
        .watch(json!([]))
        .unwrap()
        .resume_token();
    let done = Arc::new(AtomicBool::new(false));
    let barrier = Arc::new(Barrier::new(WRITERS as usize + 1));
    let handles: Vec<_> = (0..WRITERS)
        .map(|t| {
            let (db, barrier) = (db.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                run_writer(&db, t, N);
            })
        })
        .collect();
    // The watcher follows live, and halfway drops its stream and resumes
    // from its token.
    let watcher = {
        let (db, done, barrier) = (db.clone(), done.clone(), barrier.clone());
        std::thread::spawn(move || {
            let c = db.collection::<Document>("hot");
            let mut s = c
                .watch_with(
                    json!([]),
                    ChangeStreamOptions {
                        resume_after: Some(start),
                        ..Default::default()
                    },
                )
                .unwrap();
            barrier.wait();
            let mut evs = Vec::new();
            let mut resumed = false;
            loop {
                match s.next_timeout(Duration::from_millis(20)).unwrap() {
                    Some(e) => evs.push(j(&e)),
                    None if done.load(Ordering::Acquire) => {
                        // Everything is committed: drain, then stop.
                        match s.try_next().unwrap() {
                            Some(e) => evs.push(j(&e)),
                            None => break,
                        }
                    }
                    None => {}
                }
                if !resumed && evs.len() > 200 {
                    resumed = true;
                    let token = s.resume_token();
                    drop(s);
                    s = c
                        .watch_with(
                            json!([]),
                            ChangeStreamOptions {
                                resume_after: Some(token),
                                ..Default::default()
                            },
                        )
                        .unwrap();
                }
            }
            (evs, s.resume_token())
        })
    };
    for h in handles {
        h.join().unwrap();
    }
    done.store(true, Ordering::Release);
    let (evs, token) = watcher.join().unwrap();
    check_delivery(&evs, WRITERS, N);
    // A fresh stream from the beginning sees the same sequence.
    let all: Vec<serde_json::Value> = {
        let mut s = db
            .collection::<Document>("hot")
            .watch_with(
                json!([]),
                ChangeStreamOptions {
                    resume_after: Some(start),
                    ..Default::default()
                },
            )
            .unwrap();
        std::iter::from_fn(|| s.try_next().unwrap())
            .map(|e| j(&e))
            .collect()
    };
    assert_eq!(all, evs);
    db.sync().unwrap();
    drop(db);
    // Across a reopen: resume from the token kept, write more, see only that.
    let db = Database::open(&path).unwrap();
    let c = db.collection::<Document>("hot");
    let mut s = c
        .watch_with(
            json!([]),
            ChangeStreamOptions {
                resume_after: Some(token),
                ..Default::default()
            },
        )
        .unwrap();
    assert!(s.try_next().unwrap().is_none());
    c.insert(&doc(json!({"_id": -1}))).unwrap();
    let e = j(&s.next_timeout(Duration::from_secs(5)).unwrap().unwrap());
    assert_eq!(e["documentKey"]["_id"], json!(-1));
    assert!(
        e["clusterTime"].as_i64().unwrap() > evs.last().unwrap()["clusterTime"].as_i64().unwrap()
    );
}

#[test]
fn retention_is_bounded_and_lost_history_is_typed() {
    let (_d, db) = db();
    let c = db.collection::<Document>("r");
    c.enable_change_stream().unwrap();
    let first = c.watch(json!([])).unwrap().resume_token();
    let mut slow = c.watch(json!([])).unwrap();
    c.insert(&doc(json!({"_id": 0}))).unwrap();
    assert!(slow.try_next().unwrap().is_some());
    db.set_change_log_retention(10).unwrap();
    assert_eq!(db.change_log_retention().unwrap(), 10);
    for i in 1..60 {
        c.insert(&doc(json!({"_id": i}))).unwrap();
        let (lo, hi) = db.change_log_bounds().unwrap().unwrap();
        // Trimmed by the appending writer: never more than the bound.
        assert!(hi - lo < 10, "{lo}..{hi}");
    }
    let (lo, hi) = db.change_log_bounds().unwrap().unwrap();
    assert_eq!(hi - lo + 1, 10, "{lo}..{hi}");
    let e = c
        .watch_with(
            json!([]),
            ChangeStreamOptions {
                resume_after: Some(first),
                ..Default::default()
            },
        )
        .unwrap_err();
    assert!(
        matches!(e, DocumentError::ChangeStreamHistoryLost { position, oldest, .. } if position == first.position + 1 && oldest == lo),
        "{e}"
    );
    // A live stream that fell behind gets the same error.
    assert!(matches!(
        slow.try_next(),
        Err(DocumentError::ChangeStreamHistoryLost { .. })
    ));
    // A token from the future (another file) is refused.
    let future = ResumeToken {
        position: hi + 100,
        ..first
    };
    let e = c
        .watch_with(
            json!([]),
            ChangeStreamOptions {
                resume_after: Some(future),
                ..Default::default()
            },
        )
        .unwrap_err();
    assert!(matches!(e, DocumentError::InvalidResumeToken { .. }), "{e}");
    assert!(db.set_change_log_retention(0).is_err());
}

#[test]
fn drop_rename_and_disable_end_streams_with_invalidate() {
    let (_d, db) = db();
    let c = db.collection::<Document>("d");
    c.enable_change_stream().unwrap();
    let mut s = c.watch(json!([])).unwrap();
    c.insert(&doc(json!({"_id": 1}))).unwrap();
    assert!(c.drop().unwrap());
    let ops: Vec<String> = (&mut s)
        .map(|e| {
            j(&e.unwrap())["operationType"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(ops, ["insert", "drop", "invalidate"]);
    assert!(s.is_ended());
    let inv = s.resume_token();
    assert!(inv.invalidate);
    // resume_after cannot pass an invalidate; start_after can (and watches
    // the collection now under the name).
    let e = c
        .watch_with(
            json!([]),
            ChangeStreamOptions {
                resume_after: Some(inv),
                ..Default::default()
            },
        )
        .unwrap_err();
    assert!(matches!(e, DocumentError::InvalidResumeToken { .. }), "{e}");
    c.enable_change_stream().unwrap();
    let mut again = c
        .watch_with(
            json!([]),
            ChangeStreamOptions {
                start_after: Some(inv),
                ..Default::default()
            },
        )
        .unwrap();
    c.insert(&doc(json!({"_id": 2}))).unwrap();
    db.rename_collection("d", "e", false).unwrap();
    let evs: Vec<serde_json::Value> = (&mut again).map(|e| j(&e.unwrap())).collect();
    let ops: Vec<&str> = evs
        .iter()
        .map(|e| e["operationType"].as_str().unwrap())
        .collect();
    assert_eq!(ops, ["insert", "rename", "invalidate"]);
    assert_eq!(evs[1]["to"], json!({"coll": "e"}));
    let e2 = db.collection::<Document>("e");
    let mut third = e2.watch(json!([])).unwrap();
    e2.disable_change_stream().unwrap();
    let ops: Vec<String> = (&mut third)
        .map(|e| {
            j(&e.unwrap())["operationType"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(ops, ["invalidate"]);
    assert!(matches!(
        e2.watch(json!([])),
        Err(DocumentError::ChangeStreamNotEnabled { .. })
    ));
}

/// Replays a collection's change events onto a model of its documents.
fn replay(events: &[serde_json::Value]) -> BTreeMap<String, serde_json::Value> {
    let mut m = BTreeMap::new();
    for e in events {
        let id = e["documentKey"]["_id"].to_string();
        match e["operationType"].as_str().unwrap() {
            "insert" | "replace" | "update" => {
                m.insert(id, e["fullDocument"].clone());
            }
            "delete" => {
                m.remove(&id);
            }
            other => panic!("unexpected {other}"),
        }
    }
    m
}

fn crash_workload(db: &Database) -> cairndb::Result<usize> {
    let c = db.collection::<Document>("c");
    let mut acked = 0;
    c.enable_change_stream()?;
    acked += 1;
    c.insert_many(
        [
            doc(json!({"_id": 1, "v": 1})),
            doc(json!({"_id": 2, "v": 2})),
        ]
        .iter(),
    )?;
    acked += 1;
    c.update_one(
        json!({"_id": 1}),
        json!({"$set": {"v": 10}}),
        UpdateOptions::default(),
    )?;
    acked += 1;
    c.delete_id(2)?;
    acked += 1;
    c.replace(&doc(json!({"_id": 1, "w": true})))?;
    acked += 1;
    Ok(acked)
}

#[test]
fn change_log_and_documents_agree_after_a_crash_at_every_io_operation() {
    let seed = crate::common::seed("changes-crash");
    let clean = Arc::new(SimFile::new());
    clean.set_fault(None, OpFilter::Mutating);
    {
        let db = Builder::new()
            .open_with_storage(Box::new(clean.clone()), true, false)
            .unwrap();
        assert_eq!(crash_workload(&db).unwrap(), 5);
    }
    let total = clean.counted_ops();
    let (mut images, mut checked) = (0, 0);
    for k in 0..total {
        let sim = Arc::new(SimFile::new());
        sim.set_fault(Some(Fault::CrashAt(k)), OpFilter::Mutating);
        if let Ok(db) = Builder::new().open_with_storage(Box::new(sim.clone()), true, false) {
            let _ = crash_workload(&db);
        }
        for img in sim.crash_images(seed ^ k) {
            images += 1;
            let file = Arc::new(SimFile::from_image(img.bytes.clone()));
            let Ok(db) = Builder::new().open_with_storage(Box::new(file), false, false) else {
                continue;
            };
            let c = db.collection::<Document>("c");
            if !c.change_stream_enabled().unwrap() {
                assert_eq!(c.len().unwrap(), 0, "crash at {k}, {}", img.name);
                continue;
            }
            checked += 1;
            let mut s = c
                .watch_with(
                    json!([]),
                    ChangeStreamOptions {
                        full_document: FullDocument::UpdateLookup,
                        resume_after: Some(ResumeToken {
                            position: 0,
                            collection: 0,
                            invalidate: false,
                        }),
                        ..Default::default()
                    },
                )
                .unwrap();
            let evs: Vec<serde_json::Value> = std::iter::from_fn(|| s.try_next().unwrap())
                .map(|e| j(&e))
                .collect();
            let docs: BTreeMap<String, serde_json::Value> = c
                .all()
                .unwrap()
                .map(|d| {
                    let d = j(&d.unwrap());
                    (d["_id"].to_string(), d)
                })
                .collect();
            assert_eq!(replay(&evs), docs, "crash at {k}, image {}", img.name);
            assert!(c.check_indexes().unwrap().is_empty());
        }
    }
    crate::common::report(&format!(
        "changes-crash: crash_points={total} images={images} checked={checked}"
    ));
    assert!(checked > 0);
}

/// A token of one collection's stream is refused on another's, naming both
/// (MongoDB checks the token's collection UUID against the watched one's);
/// the collection that held the name, since renamed, still resumes to its
/// `invalidate`.
#[test]
fn a_token_of_another_collection_is_refused_naming_both() {
    let (_d, db) = db();
    let a = db.collection::<Document>("a");
    let b = db.collection::<Document>("b");
    a.enable_change_stream().unwrap();
    b.enable_change_stream().unwrap();
    let mut sa = a.watch(json!([])).unwrap();
    a.insert(&doc(json!({"_id": 1}))).unwrap();
    b.insert(&doc(json!({"_id": 2}))).unwrap();
    a.insert(&doc(json!({"_id": 3}))).unwrap();
    let first = ResumeToken::of_event(&sa.try_next().unwrap().unwrap()).unwrap();
    fn resume<'db>(
        c: &cairndb::document::Collection<'db, Document>,
        t: ResumeToken,
    ) -> Result<cairndb::document::ChangeStream<'db>, DocumentError> {
        c.watch_with(
            json!([]),
            ChangeStreamOptions {
                resume_after: Some(t),
                ..Default::default()
            },
        )
    }
    let e = resume(&b, first).unwrap_err();
    match &e {
        DocumentError::ResumeTokenOtherCollection {
            collection,
            token_collection,
            ..
        } => {
            assert_eq!(collection, "b");
            assert_eq!(token_collection, "\"a\"");
        }
        other => panic!("expected ResumeTokenOtherCollection, got {other}"),
    }
    let msg = e.to_string();
    assert!(msg.contains("\"a\"") && msg.contains("\"b\""), "{msg}");
    // On its own collection the token resumes after the first insert.
    let mut again = resume(&a, first).unwrap();
    assert_eq!(
        j(&again.try_next().unwrap().unwrap())["documentKey"],
        json!({"_id": 3})
    );
    // "a" renamed to "c" and a new "a": the old token still resumes on the
    // name "a" (the log says "a" held its collection) up to the rename's
    // invalidate; on "b" it is still refused, naming "c".
    db.rename_collection("a", "c", false).unwrap();
    db.collection::<Document>("a")
        .enable_change_stream()
        .unwrap();
    let ops: Vec<String> = resume(&a, first)
        .unwrap()
        .map(|e| {
            j(&e.unwrap())["operationType"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(ops, ["insert", "rename", "invalidate"]);
    assert!(matches!(
        resume(&b, first),
        Err(DocumentError::ResumeTokenOtherCollection { token_collection, .. }) if token_collection == "\"c\""
    ));
}
