//! TTL indexes, under an injected clock (no real waiting): a document
//! expires exactly when its date plus `expire_after_seconds` is in the
//! past (the earliest date of an array counts; non-dates never expire —
//! MongoDB manual, "TTL Indexes"); writes and `delete_expired` delete in
//! bounded batches; an index built over existing data expires it; the
//! option shows in `list_indexes`, is checked, and deletions reach change
//! streams and leave the indexes exact.

use std::sync::Arc;
use std::time::Duration;

use cairndb::document::ttl::{EXPIRE_BATCH, MAX_EXPIRE_AFTER_SECONDS};
use cairndb::document::{Document, DocumentError, IndexOptions, ManualClock, Value};
use cairndb::Database;
use serde_json::json;

const T0: i64 = 1_700_000_000_000;

fn db() -> (tempfile::TempDir, Database) {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::create(dir.path().join("t.cairn")).unwrap();
    (dir, db)
}

fn doc(v: serde_json::Value) -> Document {
    match Value::from_json(v).unwrap() {
        Value::Object(d) => d,
        _ => unreachable!(),
    }
}

fn ids(c: &cairndb::document::Collection<'_, Document>) -> Vec<serde_json::Value> {
    c.all()
        .unwrap()
        .map(|d| d.unwrap().get("_id").unwrap().to_json())
        .collect()
}

#[test]
fn documents_expire_at_the_right_time_and_non_dates_never() {
    let (_d, db) = db();
    let clock = Arc::new(ManualClock::new(T0));
    let c = db.collection::<Document>("s").with_clock(clock.clone());
    let info = c
        .create_ttl_index("at", 60, IndexOptions::default())
        .unwrap();
    assert_eq!(info.expire_after_seconds, Some(60));
    for d in [
        json!({"_id": "fresh", "at": T0 - 30_000}),
        json!({"_id": "edge", "at": T0 - 60_000}),
        json!({"_id": "old", "at": T0 - 90_000}),
        json!({"_id": "array", "at": [T0 + 1_000_000, T0 - 61_000]}),
        json!({"_id": "future-array", "at": [T0 + 1_000_000]}),
        json!({"_id": "string", "at": "2001-01-01"}),
        // A float date (one index keys cannot tell from an integer, and
        // one they can).
        json!({"_id": "whole-float", "at": (T0 - 90_000) as f64}),
        json!({"_id": "float", "at": (T0 + 2_000_000) as f64 + 0.5}),
        json!({"_id": "null", "at": null}),
        json!({"_id": "missing"}),
    ] {
        c.insert(&doc(d)).unwrap();
    }
    // Each insert ran a pass: "old" and "array" are gone; "edge" is exactly
    // 60 s old, not more: kept.
    let left = ids(&c);
    assert!(
        !left.contains(&json!("old"))
            && !left.contains(&json!("array"))
            && !left.contains(&json!("whole-float")),
        "{left:?}"
    );
    assert!(left.contains(&json!("edge")));
    clock.advance(Duration::from_millis(1));
    assert_eq!(c.delete_expired(100).unwrap(), 1);
    assert!(!ids(&c).contains(&json!("edge")));
    clock.advance(Duration::from_secs(30));
    assert_eq!(c.delete_expired(100).unwrap(), 1);
    clock.advance(Duration::from_secs(100 * 365 * 24 * 3600));
    // Whatever the time: only numbers are dates.
    assert_eq!(c.delete_expired(100).unwrap(), 2);
    let mut left = ids(&c);
    left.sort_by_key(|v| v.to_string());
    assert_eq!(left, vec![json!("missing"), json!("null"), json!("string")]);
    assert!(c.check_indexes().unwrap().is_empty());
}

#[test]
fn batches_are_bounded() {
    let (_d, db) = db();
    let clock = Arc::new(ManualClock::new(T0));
    let c = db.collection::<Document>("b").with_clock(clock.clone());
    c.create_ttl_index("at", 0, IndexOptions::default())
        .unwrap();
    let docs: Vec<Document> = (0..200)
        .map(|i| doc(json!({"_id": i, "at": T0 + i})))
        .collect();
    c.insert_many(docs.iter()).unwrap();
    assert_eq!(c.len().unwrap(), 200);
    clock.advance(Duration::from_secs(1));
    // One write deletes one batch, oldest first.
    c.insert(&doc(json!({"_id": "w"}))).unwrap();
    assert_eq!(c.len().unwrap(), 201 - EXPIRE_BATCH as u64);
    assert!(c.get(EXPIRE_BATCH as i64 - 1).unwrap().is_none());
    assert!(c.get(EXPIRE_BATCH as i64).unwrap().is_some());
    assert_eq!(c.delete_expired(10).unwrap(), 10);
    assert_eq!(
        c.delete_expired(1000).unwrap(),
        200 - EXPIRE_BATCH as u64 - 10
    );
    assert_eq!(c.delete_expired(1000).unwrap(), 0);
    assert_eq!(ids(&c), vec![json!("w")]);
}

#[test]
fn an_index_built_over_existing_data_expires_it_and_reaches_change_streams() {
    let (_d, db) = db();
    let clock = Arc::new(ManualClock::new(T0));
    let c = db.collection::<Document>("e").with_clock(clock.clone());
    c.enable_change_stream().unwrap();
    for i in 0..10i64 {
        c.insert(&doc(json!({"_id": i, "at": T0 - i * 10_000})))
            .unwrap();
    }
    let mut s = c
        .watch(json!([{"$match": {"operationType": "delete"}}]))
        .unwrap();
    c.create_ttl_index("at", 45, IndexOptions::default())
        .unwrap();
    // Dated 50 s .. 90 s ago: five expire, deleted by the creation's pass.
    assert_eq!(c.len().unwrap(), 5);
    assert_eq!(c.delete_expired(100).unwrap(), 0);
    clock.advance(Duration::from_secs(10));
    assert_eq!(c.delete_expired(100).unwrap(), 1);
    let mut gone: Vec<i64> = std::iter::from_fn(|| s.try_next().unwrap())
        .map(|e| e.get_path("documentKey._id").unwrap().as_i64().unwrap())
        .collect();
    gone.sort();
    assert_eq!(gone, vec![4, 5, 6, 7, 8, 9]);
    assert!(c.check_indexes().unwrap().is_empty());
    let listed = c.list_indexes().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].expire_after_seconds, Some(45));
}

#[test]
fn bad_ttl_definitions_are_refused() {
    let (_d, db) = db();
    let c = db.collection::<Document>("x");
    for (field, secs) in [
        ("_id", 1),
        ("at", MAX_EXPIRE_AFTER_SECONDS + 1),
        ("a..b", 1),
    ] {
        assert!(c
            .create_ttl_index(field, secs, IndexOptions::default())
            .is_err());
    }
    c.create_ttl_index("at", 10, IndexOptions::default())
        .unwrap();
    // Same name, other expiry: refused, like other option changes.
    let e = c
        .create_ttl_index("at", 20, IndexOptions::default())
        .unwrap_err();
    assert!(matches!(e, DocumentError::IndexError { .. }), "{e}");
    // The same definition again is accepted.
    c.create_ttl_index("at", 10, IndexOptions::default())
        .unwrap();
    // A plain index of that name is another definition.
    assert!(c
        .create_index(&[("at", 1)], IndexOptions::default())
        .is_err());
    // An ordinary index has no expiry.
    let plain = c
        .create_index(&[("b", 1)], IndexOptions::default())
        .unwrap();
    assert_eq!(plain.expire_after_seconds, None);
}

/// `delete_all_expired` deletes every expired document in transactions of
/// at most `batch` deletions (so the writer lock is taken once per batch,
/// never held for the whole pass: `cairn serve`'s sweep and `cairn
/// expire`), stops when `go_on` says so, and leaves the rest;
/// `ttl_collections` names exactly the collections with a TTL index.
#[test]
fn delete_all_expired_works_in_bounded_batches() {
    let (_d, db) = db();
    let clock = Arc::new(ManualClock::new(T0));
    let c = db.collection::<Document>("s").with_clock(clock.clone());
    c.create_ttl_index("at", 60, IndexOptions::default())
        .unwrap();
    let docs: Vec<Document> = (0..25)
        .map(|i| doc(json!({"_id": i, "at": T0 + i})))
        .chain([doc(json!({"_id": "later", "at": T0 + 10_000_000}))])
        .collect();
    c.insert_many(&docs).unwrap();
    db.collection::<Document>("plain")
        .insert(&doc(json!({"at": 0})))
        .unwrap();
    db.collection::<Document>("other")
        .create_ttl_index("when", 5, IndexOptions::default())
        .unwrap();
    assert_eq!(db.ttl_collections().unwrap(), ["other", "s"]);
    // Nothing expired: one transaction, nothing deleted.
    let before = db.latest_commit();
    assert_eq!(c.delete_all_expired(10, |_| true).unwrap(), 0);
    assert!(db.latest_commit().0 - before.0 <= 1);
    clock.advance(Duration::from_secs(3600));
    // Stopped after the first batch.
    let mut asked = Vec::new();
    assert_eq!(
        c.delete_all_expired(10, |n| {
            asked.push(n);
            false
        })
        .unwrap(),
        10
    );
    assert_eq!(asked, [10]);
    assert_eq!(c.count(json!({})).unwrap(), 16);
    // The rest: 10 then 5, two transactions, one commit each.
    let before = db.latest_commit();
    assert_eq!(c.delete_all_expired(10, |_| true).unwrap(), 15);
    assert_eq!(db.latest_commit().0 - before.0, 2);
    assert_eq!(ids(&c), [json!("later")]);
    assert!(c.check_indexes().unwrap().is_empty());
}
