//! Property: change streams on a cluster (`EtcdCollection::watch`, the
//! embedded engine's `ChangeStream` over the storage seam, woken by etcd's
//! `Watch`) deliver every committed insert, update, replace and delete of
//! the collection exactly once, in commit order, whichever client wrote
//! it; a stream resumes from a resume token in a new process (a new
//! client); a stream that fell behind the log's retention gets the typed
//! `ChangeStreamHistoryLost`; drop ends a stream with `invalidate`
//! (MongoDB manual, "Change Events": drop is followed by invalidate).
//! Also: TTL indexes expire documents by the clock the test moves
//! (`EtcdCollection::delete_expired`, in bounded batches), and a
//! unique-index insert reads only the entries of its own value.

use std::collections::BTreeMap;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use cairndb::document::{
    ChangeStreamOptions, Document, DocumentError, FullDocument, IndexOptions, ManualClock,
    ResumeToken, Value,
};
use cairndb_etcd::Error;
use serde_json::json;

use crate::common::{cluster, connect};

fn int(d: &Document, path: &str) -> i64 {
    match d.get_path(path) {
        Some(Value::Int(i)) => *i,
        other => panic!("{path}: {other:?} in {d:?}"),
    }
}

fn op(d: &Document) -> String {
    match d.get("operationType") {
        Some(Value::String(s)) => s.clone(),
        other => panic!("operationType {other:?}"),
    }
}

/// Writers on several clients insert and then update their own documents
/// concurrently; one watcher on yet another client sees every write once,
/// in commit order (positions strictly increasing by one across the
/// collection's events, as no other collection writes), and each
/// document's events in the order its writer made them.
#[test]
fn concurrent_writers_on_several_clients_one_watcher_no_skip_no_repeat() {
    let Some(c) = cluster("concurrent_writers_on_several_clients_one_watcher_no_skip_no_repeat")
    else {
        return;
    };
    let url = c.url("cs");
    let setup = connect(&url);
    setup
        .collection::<Document>("orders")
        .enable_change_stream()
        .unwrap();
    let watcher_db = connect(&url);
    let mut stream = watcher_db
        .collection::<Document>("orders")
        .watch(json!([]))
        .unwrap();
    const WRITERS: i64 = 3;
    const PER_WRITER: i64 = 12;
    let barrier = Arc::new(Barrier::new(WRITERS as usize));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (url, barrier) = (url.clone(), barrier.clone());
            thread::spawn(move || {
                let db = connect(&url);
                let c = db.collection::<Document>("orders");
                barrier.wait();
                let mut acknowledged = 0u64;
                for i in 0..PER_WRITER {
                    let id = w * 1000 + i;
                    // Retry what conflicted on every attempt: the commit
                    // wrote nothing (a typed, retryable error).
                    loop {
                        match c.insert(&Document::new().with("_id", id).with("n", 0)) {
                            Ok(_) => break,
                            Err(e) if e.is_retryable() => continue,
                            Err(e) => panic!("writer {w}: {e}"),
                        }
                    }
                    acknowledged += 1;
                    loop {
                        match c.update_one(
                            json!({"_id": id}),
                            json!({"$inc": {"n": 1}}),
                            Default::default(),
                        ) {
                            Ok(r) => {
                                assert_eq!(r.modified, 1);
                                break;
                            }
                            Err(e) if e.is_retryable() => continue,
                            Err(e) => panic!("writer {w}: {e}"),
                        }
                    }
                    acknowledged += 1;
                }
                acknowledged
            })
        })
        .collect();
    let expected = (WRITERS * PER_WRITER * 2) as usize;
    let mut events: Vec<Document> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while events.len() < expected {
        assert!(
            Instant::now() < deadline,
            "only {} events of {expected}",
            events.len()
        );
        if let Some(ev) = stream.next_timeout(Duration::from_secs(2)).unwrap() {
            events.push(ev);
        }
    }
    let acknowledged: u64 = writers.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(acknowledged as usize, expected);
    // Nothing more comes (no repeat).
    assert_eq!(
        stream.next_timeout(Duration::from_millis(500)).unwrap(),
        None
    );
    // Commit order: dense, increasing positions (only this collection
    // writes the log).
    let positions: Vec<i64> = events.iter().map(|e| int(e, "clusterTime")).collect();
    for w in positions.windows(2) {
        assert_eq!(w[1], w[0] + 1, "positions {positions:?}");
    }
    // Every document: its insert, then its update, once each.
    let mut per_doc: BTreeMap<i64, Vec<String>> = BTreeMap::new();
    for e in &events {
        per_doc
            .entry(int(e, "documentKey._id"))
            .or_default()
            .push(op(e));
    }
    assert_eq!(per_doc.len(), (WRITERS * PER_WRITER) as usize);
    for (id, ops) in &per_doc {
        assert_eq!(ops, &["insert", "update"], "document {id}");
    }
    // The order is the commit order: each writer's own writes in order.
    for w in 0..WRITERS {
        let mine: Vec<(i64, String)> = events
            .iter()
            .map(|e| (int(e, "documentKey._id"), op(e)))
            .filter(|(id, _)| id / 1000 == w)
            .collect();
        let made: Vec<(i64, String)> = (0..PER_WRITER)
            .flat_map(|i| {
                let id = w * 1000 + i;
                [(id, "insert".to_string()), (id, "update".to_string())]
            })
            .collect();
        assert_eq!(mine, made, "writer {w}");
    }
    // The log's counter and its keys agree.
    let (first, last) = setup.change_log_bounds().unwrap().unwrap();
    assert_eq!((first, last), (1, expected as u64));
}

/// A stream's resume token, kept across a "restart" (a new client, the old
/// one dropped), resumes after the last event delivered: the events
/// committed meanwhile come, none twice. Update events carry the document
/// with `FullDocument::UpdateLookup`; replace and delete have their shape;
/// drop, rename and disable end a stream with `invalidate`.
#[test]
fn a_stream_resumes_from_its_token_in_a_new_client_and_drop_rename_disable_invalidate() {
    let Some(c) = cluster(
        "a_stream_resumes_from_its_token_in_a_new_client_and_drop_rename_disable_invalidate",
    ) else {
        return;
    };
    let url = c.url("resume");
    let token_text = {
        let db = connect(&url);
        let coll = db.collection::<Document>("items");
        coll.enable_change_stream().unwrap();
        assert!(coll.change_stream_enabled().unwrap());
        let mut s = coll.watch(json!([])).unwrap();
        coll.insert(&Document::new().with("_id", 1).with("v", 1))
            .unwrap();
        coll.insert(&Document::new().with("_id", 2).with("v", 1))
            .unwrap();
        let ev = s.next_timeout(Duration::from_secs(10)).unwrap().unwrap();
        assert_eq!(op(&ev), "insert");
        assert_eq!(int(&ev, "fullDocument.v"), 1);
        // The token of the first event, as an application stores it.
        let t = ResumeToken::of_event(&ev).unwrap();
        assert_eq!(t, s.resume_token());
        t.to_hex()
    };
    // Written while no stream runs.
    let db = connect(&url);
    let coll = db.collection::<Document>("items");
    coll.update_one(
        json!({"_id": 1}),
        json!({"$set": {"v": 2}}),
        Default::default(),
    )
    .unwrap();
    coll.replace(&Document::new().with("_id", 2).with("v", 9))
        .unwrap();
    coll.delete_id(1).unwrap();
    let opts = ChangeStreamOptions {
        resume_after: Some(ResumeToken::parse(&token_text).unwrap()),
        full_document: FullDocument::UpdateLookup,
        ..Default::default()
    };
    let mut s = coll.watch_with(json!([]), opts).unwrap();
    let mut got = Vec::new();
    while let Some(ev) = s.next_timeout(Duration::from_secs(5)).unwrap() {
        got.push(ev);
        if got.len() == 4 {
            break;
        }
    }
    let ops: Vec<String> = got.iter().map(op).collect();
    assert_eq!(ops, ["insert", "update", "replace", "delete"]);
    assert_eq!(int(&got[0], "documentKey._id"), 2);
    assert_eq!(int(&got[1], "fullDocument.v"), 2);
    assert_eq!(int(&got[1], "updateDescription.updatedFields.v"), 2);
    assert_eq!(int(&got[2], "fullDocument.v"), 9);
    assert_eq!(int(&got[3], "documentKey._id"), 1);
    assert_eq!(got[3].get("fullDocument"), None);
    // Woken by the watch: a commit from another client arrives while the
    // stream waits.
    let writer = {
        let url = url.clone();
        thread::spawn(move || {
            thread::sleep(Duration::from_millis(300));
            let db = connect(&url);
            db.collection::<Document>("items")
                .insert(&Document::new().with("_id", 3))
                .unwrap();
        })
    };
    let t0 = Instant::now();
    let ev = s.next_timeout(Duration::from_secs(20)).unwrap().unwrap();
    writer.join().unwrap();
    assert_eq!(int(&ev, "documentKey._id"), 3);
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    // Drop: the drop event, then invalidate, then the end.
    assert!(coll.drop().unwrap());
    let ev = s.next_timeout(Duration::from_secs(10)).unwrap().unwrap();
    assert_eq!(op(&ev), "drop");
    let ev = s.next_timeout(Duration::from_secs(10)).unwrap().unwrap();
    assert_eq!(op(&ev), "invalidate");
    assert!(s.is_ended());
    assert!(s.next().is_none());
    // Rename (MongoDB manual, "Change Events": rename, then invalidate),
    // and disable, end a stream the same way.
    let coll = db.collection::<Document>("items");
    coll.insert(&Document::new().with("_id", 10)).unwrap();
    coll.enable_change_stream().unwrap();
    let mut s = coll.watch(json!([])).unwrap();
    coll.rename("items2", false).unwrap();
    let ev = s.next_timeout(Duration::from_secs(10)).unwrap().unwrap();
    assert_eq!(op(&ev), "rename");
    assert_eq!(ev.get_path("to.coll"), Some(&Value::from("items2")));
    let inv = s.next_timeout(Duration::from_secs(10)).unwrap().unwrap();
    assert_eq!(op(&inv), "invalidate");
    assert!(s.is_ended());
    let renamed = db.collection::<Document>("items2");
    let mut s = renamed.watch(json!([])).unwrap();
    renamed.disable_change_stream().unwrap();
    assert!(!renamed.change_stream_enabled().unwrap());
    let inv = s.next_timeout(Duration::from_secs(10)).unwrap().unwrap();
    assert_eq!(op(&inv), "invalidate");
    assert!(s.next().is_none());
    // Watching a collection without its change stream is the typed error.
    match db.collection::<Document>("other").watch(json!([])) {
        Err(Error::Documents(e)) => {
            assert!(
                matches!(*e, DocumentError::ChangeStreamNotEnabled { .. }),
                "{e}"
            )
        }
        other => panic!("{other:?}"),
    }
}

/// A stream that falls behind the log's retention gets
/// `ChangeStreamHistoryLost` (MongoDB's error of the same name), and so
/// does a resume from a token the log no longer holds; positions stay
/// dense through the trimming.
#[test]
fn a_stream_behind_the_retention_gets_history_lost() {
    let Some(c) = cluster("a_stream_behind_the_retention_gets_history_lost") else {
        return;
    };
    let db = connect(&c.url("trim"));
    db.set_change_log_retention(4).unwrap();
    assert_eq!(db.change_log_retention().unwrap(), 4);
    let coll = db.collection::<Document>("t");
    coll.enable_change_stream().unwrap();
    let mut s = coll.watch(json!([])).unwrap();
    coll.insert(&Document::new().with("_id", 0)).unwrap();
    let first = s.try_next().unwrap().unwrap();
    let token = ResumeToken::of_event(&first).unwrap();
    for i in 1..=12 {
        coll.insert(&Document::new().with("_id", i)).unwrap();
    }
    let (oldest, newest) = db.change_log_bounds().unwrap().unwrap();
    assert_eq!(newest, 13);
    assert!(
        newest - oldest < 8,
        "trimmed to about 4: {oldest}..{newest}"
    );
    let lost = |r: Result<_, Error>| match r {
        Err(Error::Documents(e)) => match *e {
            DocumentError::ChangeStreamHistoryLost {
                position,
                oldest: o,
                ..
            } => {
                assert_eq!(position, 2);
                assert_eq!(o, oldest);
            }
            other => panic!("{other}"),
        },
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("read past lost history"),
    };
    lost(s.try_next().map(|_| ()));
    let opts = ChangeStreamOptions {
        resume_after: Some(token),
        ..Default::default()
    };
    lost(coll.watch_with(json!([]), opts).map(|_| ()));
    // A new stream from now runs on.
    let mut s = coll.watch(json!([])).unwrap();
    coll.insert(&Document::new().with("_id", 99)).unwrap();
    let ev = s.try_next().unwrap().unwrap();
    assert_eq!(int(&ev, "clusterTime"), 14);
}

/// TTL indexes on a cluster: with a clock the test moves, documents whose
/// date is more than `expire_after_seconds` in the past are deleted by
/// `delete_expired`, oldest first, in bounded batches (several
/// transactions, each reading a bounded part of the index); others stay;
/// the index and the change log follow.
#[test]
fn ttl_index_expires_by_the_clock_in_bounded_batches() {
    let Some(c) = cluster("ttl_index_expires_by_the_clock_in_bounded_batches") else {
        return;
    };
    let db = connect(&c.url("ttl"));
    let clock = Arc::new(ManualClock::new(1_000_000));
    let coll = db
        .collection::<Document>("sessions")
        .with_clock(clock.clone());
    // 40 sessions at t = 1_000_000 + i seconds, and one with no date.
    let docs: Vec<Document> = (0..40i64)
        .map(|i| {
            Document::new()
                .with("_id", i)
                .with("at", Value::Date(1_000_000 + i * 1000))
        })
        .collect();
    for chunk in docs.chunks(20) {
        coll.insert_many(chunk).unwrap();
    }
    coll.insert(
        &Document::new()
            .with("_id", "forever")
            .with("at", "not a date"),
    )
    .unwrap();
    let info = coll
        .create_ttl_index("at", 60, IndexOptions::default())
        .unwrap();
    assert_eq!(info.expire_after_seconds, Some(60));
    // Nothing is 60 s old yet.
    assert_eq!(coll.len().unwrap(), 41);
    coll.enable_change_stream().unwrap();
    let mut s = coll.watch(json!([])).unwrap();
    // Now 60 s after the 25th: documents 0..=24 have expired (a date
    // strictly before now - 60 s).
    clock.set(1_000_000 + 25 * 1000 + 60_000);
    assert_eq!(coll.delete_expired(10).unwrap(), 10, "bounded by max");
    assert_eq!(coll.delete_expired(1000).unwrap(), 15);
    assert_eq!(coll.delete_expired(1000).unwrap(), 0);
    let left: Vec<Value> = coll
        .find(json!({}))
        .unwrap()
        .map(|d| d.unwrap().get("_id").cloned().unwrap())
        .collect();
    let mut want: Vec<Value> = (25..40i64).map(Value::Int).collect();
    want.push(Value::String("forever".into()));
    assert_eq!(left, want);
    assert_eq!(
        coll.count(json!({"at": {"$lt": {"$date": 1_000_000 + 25 * 1000}}}))
            .unwrap(),
        0
    );
    // The deletes are in the change log, oldest first.
    let deleted: Vec<i64> = (0..25)
        .map(|_| {
            let ev = s.try_next().unwrap().unwrap();
            assert_eq!(op(&ev), "delete");
            int(&ev, "documentKey._id")
        })
        .collect();
    assert_eq!(deleted, (0..25).collect::<Vec<_>>());
    // A pass reads a bounded part of the TTL index: with 60 expired
    // entries, deleting one reads fewer keys than those 60 (about 8 index
    // entries per document it may delete, `range_head`, plus its own
    // point reads), not the whole expired range.
    let old: Vec<Document> = (100..160i64)
        .map(|i| Document::new().with("_id", i).with("at", Value::Date(i)))
        .collect();
    for chunk in old.chunks(20) {
        coll.insert_many(chunk).unwrap();
    }
    let before = db.keys_read();
    assert_eq!(coll.delete_expired(1).unwrap(), 1);
    let read = db.keys_read() - before;
    assert!(read < 60, "deleting one expired document read {read} keys");
    assert_eq!(coll.delete_expired(1000).unwrap(), 59);
    // Bad definitions are the document layer's typed errors.
    match coll.create_ttl_index("_id", 5, IndexOptions::default()) {
        Err(Error::Documents(e)) => assert!(e.to_string().contains("_id"), "{e}"),
        other => panic!("{other:?}"),
    }
}

/// A unique-index insert checks for another document with its value by
/// reading only the entries of that value: inserting the smallest value
/// before many larger ones costs no more requests than inserting the
/// largest (before the fix the check read every entry after the value, a
/// page of 128 keys per request).
#[test]
fn a_unique_insert_reads_only_its_own_value() {
    let Some(c) = cluster("a_unique_insert_reads_only_its_own_value") else {
        return;
    };
    let db = connect(&c.url("uniqread"));
    let coll = db.collection::<Document>("u");
    coll.create_index(
        &[("u", 1)],
        IndexOptions {
            unique: true,
            ..Default::default()
        },
    )
    .unwrap();
    let docs: Vec<Document> = (0..600i64)
        .map(|i| Document::new().with("_id", i).with("u", 1000 + i))
        .collect();
    for chunk in docs.chunks(40) {
        coll.insert_many(chunk).unwrap();
    }
    let cost = |d: Document| {
        let before = db.round_trips();
        coll.insert(&d).unwrap();
        db.round_trips() - before
    };
    let largest = cost(Document::new().with("_id", "last").with("u", 1_000_000));
    let smallest = cost(Document::new().with("_id", "first").with("u", 0));
    assert!(
        smallest <= largest,
        "inserting the smallest value took {smallest} requests, the largest {largest}"
    );
    // And the check still finds a duplicate.
    match coll.insert(&Document::new().with("_id", "again").with("u", 1000)) {
        Err(Error::Documents(e)) => {
            assert!(matches!(*e, DocumentError::DuplicateKey { .. }), "{e}")
        }
        other => panic!("{other:?}"),
    }
}
