//! Property: operations over more documents than one etcd `Txn` holds
//! (`--max-txn-ops` 128) run in batches and keep their meaning:
//! `update_many` / `delete_many` touch each document matching at their
//! start exactly once, re-check it in its batch, and count exactly what
//! they did, beside a concurrent writer; an index built in batches beside
//! writers answers queries as the model does once ready, is not used by
//! the planner while building, survives its builder stopping between two
//! batches (resumed by the next `create_index`, or removed by
//! `drop_index`), and a unique violation met mid-build drops it and names
//! the value and the document.
//!
//! MongoDB's `updateMany` / `deleteMany` are not atomic across documents
//! (MongoDB manual, "Atomicity and Transactions": "when a single write
//! operation modifies multiple documents, the modification of each
//! document is atomic, but the operation as a whole is not"), and an index
//! build does not block writers (manual, "Index Builds on Populated
//! Collections").

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use cairndb::document::query::FindOptions;
use cairndb::document::{Document, DocumentError, IndexOptions, TxnCollection, Value};
use cairndb_etcd::{Error, EtcdCollection, IndexState, DEFAULT_MAX_TXN_OPS};
use serde_json::{json, Value as Json};

use crate::common::{cluster, connect, Rng};

type Coll<'db> = EtcdCollection<'db, Json>;

/// Inserts `docs` 20 to a transaction.
fn load(c: &Coll<'_>, docs: &[Json]) {
    for chunk in docs.chunks(20) {
        c.insert_many(chunk).unwrap();
    }
}

/// The building marks under `prefix` (`<prefix>/b/…`: FORMAT.md, "etcd
/// key layout"), read with the etcd client directly (the crate gives no
/// API for raw keys).
fn marks(url: &str, prefix: &str) -> Vec<String> {
    let endpoints = cairndb_etcd::EtcdUrl::parse(url).unwrap().endpoints;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut client = etcd_client::Client::connect(&endpoints, None)
            .await
            .unwrap();
        let opts = etcd_client::GetOptions::new()
            .with_prefix()
            .with_keys_only();
        let resp = client
            .get(format!("{prefix}/b/"), Some(opts))
            .await
            .unwrap();
        resp.kvs()
            .iter()
            .map(|kv| String::from_utf8_lossy(kv.key()).into_owned())
            .collect()
    })
}

fn int(d: &Json, f: &str) -> i64 {
    d[f].as_i64().unwrap_or_else(|| panic!("{f} of {d}"))
}

fn all(c: &Coll<'_>) -> BTreeMap<i64, Json> {
    c.find(json!({}))
        .unwrap()
        .map(|d| {
            let d = d.unwrap();
            (int(&d, "_id"), d)
        })
        .collect()
}

#[test]
fn update_many_and_delete_many_run_in_batches_exactly_once() {
    let Some(c) = cluster("update_many_and_delete_many_run_in_batches_exactly_once") else {
        return;
    };
    let db = connect(&c.url("many"));
    let items: Coll<'_> = db.collection("items");
    items
        .create_index(&[("g", 1)], IndexOptions::default())
        .unwrap();
    // 600 documents, g cycling 0, 1, 2: 200 match {g: 0}, more than one
    // Txn holds (each update writes the document and two index entries).
    let originals = 600i64;
    load(
        &items,
        &(0..originals)
            .map(|i| json!({"_id": i, "g": i % 3, "n": 0}))
            .collect::<Vec<_>>(),
    );

    // update_many {g: 0} beside a writer that moves documents out of
    // g = 0 (to 1), deletes some (remembering their n), and inserts new
    // ones (g = 5, never matching).
    let stop = AtomicBool::new(false);
    let (res, (deleted, inserted, moved)) = thread::scope(|s| {
        let writer = s.spawn(|| {
            let db = connect(&c.url("many"));
            let items: Coll<'_> = db.collection("items");
            let mut rng = Rng::new("update_many writer");
            let mut deleted: BTreeMap<i64, i64> = BTreeMap::new();
            let mut moved: BTreeMap<i64, i64> = BTreeMap::new();
            let mut inserted = 0i64;
            while !stop.load(Ordering::Acquire) {
                let id = 3 * rng.below(200) as i64;
                match rng.below(3) {
                    0 => {
                        // Moved out of g = 0, remembering n as it was then.
                        let seen = db
                            .run_in_transaction(|tx| {
                                let t = TxnCollection::<Json, _>::new(tx, "items");
                                let d = t.get(id)?;
                                t.update_one(
                                    json!({"_id": id}),
                                    json!({"$set": {"g": 1}}),
                                    Default::default(),
                                )?;
                                Ok(d)
                            })
                            .unwrap();
                        if let Some(d) = seen.filter(|d| int(d, "g") == 0) {
                            moved.insert(id, int(&d, "n"));
                        }
                    }
                    1 => {
                        let gone = db
                            .run_in_transaction(|tx| {
                                let t = TxnCollection::<Json, _>::new(tx, "items");
                                let d = t.get(id)?;
                                t.delete_id(id)?;
                                Ok(d)
                            })
                            .unwrap();
                        if let Some(d) = gone {
                            deleted.insert(id, int(&d, "n"));
                        }
                    }
                    _ => {
                        items
                            .insert(&json!({"_id": 10_000 + inserted, "g": 5, "n": 0}))
                            .unwrap();
                        inserted += 1;
                    }
                }
            }
            (deleted, inserted, moved)
        });
        // Let the writer start, then update beside it.
        thread::sleep(Duration::from_millis(30));
        let res = items
            .update_many(
                json!({"g": 0}),
                json!({"$inc": {"n": 1}}),
                Default::default(),
            )
            .unwrap();
        stop.store(true, Ordering::Release);
        (res, writer.join().unwrap())
    });
    let now = all(&items);
    // Exactly once: no document was updated twice, none inserted since
    // was updated, and every original g = 0 document the writer left
    // alone was.
    for (id, d) in &now {
        let n = int(d, "n");
        assert!(n == 0 || n == 1, "{d}");
        if *id >= originals {
            assert_eq!(n, 0, "{d}");
        } else if id % 3 == 0 && int(d, "g") == 0 {
            assert_eq!(
                n, 1,
                "an original g=0 document left alone was not updated: {d}"
            );
        } else if id % 3 != 0 {
            assert_eq!(n, 0, "{d}");
        }
    }
    // Checked again in its batch: a document moved out of g = 0 before
    // its batch (n still 0 when moved) is not updated.
    for (id, n) in &moved {
        if *n == 0 {
            if let Some(d) = now.get(id) {
                assert_eq!(
                    int(d, "n"),
                    0,
                    "moved out before its batch, then updated: {d}"
                );
            }
        }
    }
    assert!(!moved.is_empty(), "the writer moved documents");
    // The counts are exact: every document updated is either still there
    // with n = 1 or was deleted by the writer after its batch.
    let updated = now.values().filter(|d| int(d, "n") == 1).count() as u64
        + deleted.values().filter(|&&n| n == 1).count() as u64;
    assert_eq!((res.matched, res.modified), (updated, updated), "{res:?}");
    assert!(res.matched > DEFAULT_MAX_TXN_OPS as u64 / 2, "{res:?}");
    assert_eq!(
        now.len() as i64,
        originals - deleted.len() as i64 + inserted,
        "writer's own writes all landed"
    );

    // delete_many {g: 1} beside a writer that moves original g = 1
    // documents to g = 2 and inserts new g = 1 ones.
    let before = all(&items);
    let ones: Vec<i64> = before
        .iter()
        .filter(|(id, d)| **id < originals && int(d, "g") == 1)
        .map(|(id, _)| *id)
        .collect();
    let stop = AtomicBool::new(false);
    let (deleted_n, (moved, new_ones)) = thread::scope(|s| {
        let writer = s.spawn(|| {
            let db = connect(&c.url("many"));
            let items: Coll<'_> = db.collection("items");
            let mut rng = Rng::new("delete_many writer");
            let mut moved = Vec::new();
            let mut new_ones = Vec::new();
            let mut next = 20_000i64;
            while !stop.load(Ordering::Acquire) {
                if rng.below(2) == 0 {
                    let id = ones[rng.below(ones.len() as u64) as usize];
                    let r = items
                        .update_one(
                            json!({"_id": id, "g": 1}),
                            json!({"$set": {"g": 2}}),
                            Default::default(),
                        )
                        .unwrap();
                    if r.modified == 1 {
                        moved.push(id);
                    }
                } else {
                    items.insert(&json!({"_id": next, "g": 1, "n": 0})).unwrap();
                    new_ones.push(next);
                    next += 1;
                }
            }
            (moved, new_ones)
        });
        thread::sleep(Duration::from_millis(30));
        let n = items.delete_many(json!({"g": 1})).unwrap();
        stop.store(true, Ordering::Release);
        (n, writer.join().unwrap())
    });
    let after = all(&items);
    for id in &ones {
        match after.get(id) {
            Some(d) => assert!(moved.contains(id) && int(d, "g") == 2, "{d}"),
            None => assert!(!moved.contains(id), "moved {id}, then deleted"),
        }
    }
    let new_gone = new_ones.iter().filter(|id| !after.contains_key(id)).count();
    assert_eq!(
        deleted_n as usize,
        ones.len() - moved.len() + new_gone,
        "delete_many's count"
    );
    assert!(deleted_n > DEFAULT_MAX_TXN_OPS as u64 / 2);

    // Inside a caller's transaction: all in one Txn, refused whole when too
    // large, naming the limit.
    let e = db
        .run_in_transaction(|tx| {
            Ok(TxnCollection::<Json, _>::new(tx, "items").update_many(
                json!({}),
                json!({"$inc": {"n": 1}}),
                Default::default(),
            )?)
        })
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::TooLarge {
                limit: "--max-txn-ops",
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(all(&items), after, "nothing of the refused transaction");
}

/// A collection of `n` documents with `k` (0..50, some in arrays) for
/// the index builds.
fn keyed(rng: &mut Rng, n: i64) -> Vec<Json> {
    (0..n)
        .map(|i| {
            let k = rng.below(50) as i64;
            if i % 7 == 0 {
                json!({"_id": i, "k": [k, (k + 1) % 50]})
            } else {
                json!({"_id": i, "k": k})
            }
        })
        .collect()
}

/// The `_id`s matching `{k: {$gte: lo, $lt: hi}}`: on an array, each
/// condition by some element, not necessarily the same one (MongoDB
/// manual, "Query an Array", "Query an Array with Compound Filter
/// Conditions on the Array Elements").
fn model_answer(model: &BTreeMap<i64, Json>, lo: i64, hi: i64) -> Vec<i64> {
    let reaches = |k: &Json| {
        let values: Vec<i64> = match k {
            Json::Array(a) => a.iter().filter_map(Json::as_i64).collect(),
            v => v.as_i64().into_iter().collect(),
        };
        values.iter().any(|v| *v >= lo) && values.iter().any(|v| *v < hi)
    };
    model
        .iter()
        .filter(|(_, d)| reaches(&d["k"]))
        .map(|(id, _)| *id)
        .collect()
}

fn query(c: &Coll<'_>, lo: i64, hi: i64) -> (Vec<i64>, String) {
    let filter = json!({"k": {"$gte": lo, "$lt": hi}});
    let mut ids: Vec<i64> = c
        .find(filter.clone())
        .unwrap()
        .map(|d| int(&d.unwrap(), "_id"))
        .collect();
    ids.sort_unstable();
    let plan = format!("{:?}", c.explain(filter, FindOptions::default()).unwrap());
    (ids, plan)
}

/// One random write of the writer beside a build, applied to `model`
/// once committed.
fn random_write(c: &Coll<'_>, rng: &mut Rng, model: &mut BTreeMap<i64, Json>, next: &mut i64) {
    match rng.below(3) {
        0 => {
            let d = json!({"_id": *next, "k": rng.below(50) as i64});
            c.insert(&d).unwrap();
            model.insert(*next, d);
            *next += 1;
        }
        1 => {
            let id = rng.below(*next as u64) as i64;
            let k = rng.below(50) as i64;
            let r = c
                .update_one(
                    json!({"_id": id}),
                    json!({"$set": {"k": k}}),
                    Default::default(),
                )
                .unwrap();
            if r.matched == 1 {
                model.insert(id, json!({"_id": id, "k": k}));
            }
        }
        _ => {
            let id = rng.below(*next as u64) as i64;
            if c.delete_id(id).unwrap() {
                model.remove(&id);
            }
        }
    }
}

#[test]
fn an_index_builds_in_batches_beside_writers() {
    let Some(c) = cluster("an_index_builds_in_batches_beside_writers") else {
        return;
    };
    let db = connect(&c.url("build"));
    let items: Coll<'_> = db.collection("items");
    let mut rng = Rng::new("an_index_builds_in_batches_beside_writers");
    let n = 3 * DEFAULT_MAX_TXN_OPS as i64 + 20;
    let docs = keyed(&mut rng, n);
    load(&items, &docs);
    let seed = rng.next();
    let stop = Arc::new(AtomicBool::new(false));
    let (info, model) = thread::scope(|s| {
        let writer = s.spawn(|| {
            let db = connect(&c.url("build"));
            let items: Coll<'_> = db.collection("items");
            let mut rng = crate::common::Rng::with_seed(seed);
            let mut model: BTreeMap<i64, Json> =
                docs.iter().map(|d| (int(d, "_id"), d.clone())).collect();
            let mut next = n;
            let mut writes = 0;
            // At least a few writes during the build, whatever its speed.
            while !stop.load(Ordering::Acquire) || writes < 20 {
                random_write(&items, &mut rng, &mut model, &mut next);
                writes += 1;
            }
            model
        });
        thread::sleep(Duration::from_millis(20));
        let info = items
            .create_index(&[("k", 1)], IndexOptions::default())
            .unwrap();
        stop.store(true, Ordering::Release);
        (info, writer.join().unwrap())
    });
    assert_eq!(info.name, "k_1");
    assert_eq!(marks(&c.url("build"), "build"), Vec::<String>::new());
    assert_eq!(
        items.list_indexes_with_state().unwrap(),
        vec![(info, IndexState::Ready)]
    );
    assert_ready_index_answers(&items, &model);
}

/// Queries by `k` answer as the model does, and an equality on `k` is
/// planned on the index (a range on a multikey index is bounded on one
/// side only, so the planner may rightly prefer a scan for it).
fn assert_ready_index_answers(items: &Coll<'_>, model: &BTreeMap<i64, Json>) {
    let plan = format!(
        "{:?}",
        items
            .explain(json!({"k": 3}), FindOptions::default())
            .unwrap()
    );
    assert!(
        plan.contains("IndexScan { index: \"k_1\""),
        "the ready index is used: {plan}"
    );
    for (lo, hi) in [(3, 4), (10, 20), (49, 60), (0, 50), (25, 26)] {
        let (ids, _) = query(items, lo, hi);
        assert_eq!(ids, model_answer(model, lo, hi), "k in [{lo}, {hi})");
    }
    for k in [0, 3, 17, 49] {
        let mut ids: Vec<i64> = items
            .find(json!({"k": k}))
            .unwrap()
            .map(|d| int(&d.unwrap(), "_id"))
            .collect();
        ids.sort_unstable();
        assert_eq!(
            ids,
            model_answer(model, k, k + 1)
                .into_iter()
                .filter(|id| {
                    match &model[id]["k"] {
                        Json::Array(a) => a.contains(&json!(k)),
                        v => *v == json!(k),
                    }
                })
                .collect::<Vec<_>>(),
            "k = {k}"
        );
    }
}

#[test]
fn a_stopped_build_is_resumed_or_dropped() {
    let Some(c) = cluster("a_stopped_build_is_resumed_or_dropped") else {
        return;
    };
    let db = connect(&c.url("resume"));
    let items: Coll<'_> = db.collection("items");
    let mut rng = Rng::new("a_stopped_build_is_resumed_or_dropped");
    let n = 3 * DEFAULT_MAX_TXN_OPS as i64 + 20;
    let docs = keyed(&mut rng, n);
    load(&items, &docs);
    let mut model: BTreeMap<i64, Json> = docs.iter().map(|d| (int(d, "_id"), d.clone())).collect();
    let mut next = n;

    // The builder stops after two batches, as one killed between them
    // (a test hook: the state is what a killed process leaves, as every
    // batch is its own committed Txn).
    let info = items
        .create_index_stopping_after(&[("k", 1)], IndexOptions::default(), 2)
        .unwrap();
    assert_eq!(
        items.list_indexes_with_state().unwrap(),
        vec![(info.clone(), IndexState::Building)]
    );
    // Building: writes maintain it, the planner does not use it, and
    // queries answer right.
    for _ in 0..30 {
        random_write(&items, &mut rng, &mut model, &mut next);
    }
    let plan = format!(
        "{:?}",
        items
            .explain(json!({"k": 3}), FindOptions::default())
            .unwrap()
    );
    assert!(
        !plan.contains("k_1"),
        "a building index is not planned: {plan}"
    );
    for (lo, hi) in [(3, 4), (10, 20)] {
        assert_eq!(query(&items, lo, hi).0, model_answer(&model, lo, hi));
    }
    let hinted = items.find_with(
        json!({"k": 3}),
        FindOptions::default().hint(json!("k_1")).unwrap(),
    );
    assert!(hinted.is_err(), "a hint cannot name a building index");

    // The next create_index of the same spec resumes it.
    let resumed = items
        .create_index(&[("k", 1)], IndexOptions::default())
        .unwrap();
    assert_eq!(resumed, info);
    assert_eq!(
        items.list_indexes_with_state().unwrap(),
        vec![(info.clone(), IndexState::Ready)]
    );
    assert_ready_index_answers(&items, &model);

    // A stopped build dropped: gone with its state; built again from
    // scratch afterwards.
    let info = items
        .create_index_stopping_after(&[("k", -1)], IndexOptions::default(), 1)
        .unwrap();
    assert!(items
        .list_indexes_with_state()
        .unwrap()
        .contains(&(info.clone(), IndexState::Building)));
    assert_eq!(marks(&c.url("resume"), "resume").len(), 1);
    assert!(items.drop_index("k_-1").unwrap());
    assert_eq!(
        marks(&c.url("resume"), "resume"),
        Vec::<String>::new(),
        "the mark goes with the index"
    );
    assert!(!items
        .list_indexes()
        .unwrap()
        .iter()
        .any(|i| i.name == "k_-1"));
    let again = items
        .create_index(&[("k", -1)], IndexOptions::default())
        .unwrap();
    assert_ne!(again.id, info.id, "a new index, not the dropped one");
    assert!(items
        .list_indexes_with_state()
        .unwrap()
        .contains(&(again, IndexState::Ready)));
}

#[test]
fn a_unique_violation_mid_build_drops_the_index() {
    let Some(c) = cluster("a_unique_violation_mid_build_drops_the_index") else {
        return;
    };
    let db = connect(&c.url("unique"));
    let people: Coll<'_> = db.collection("people");
    // 300 distinct emails but document 250 repeats document 3's: met in
    // the fourth batch, after three committed ones.
    let docs: Vec<Json> = (0..300)
        .map(|i| {
            let e = if i == 250 { 3 } else { i };
            json!({"_id": i, "email": format!("u{e}@x")})
        })
        .collect();
    load(&people, &docs);
    let e = people
        .create_index(
            &[("email", 1)],
            IndexOptions {
                unique: true,
                ..IndexOptions::default()
            },
        )
        .unwrap_err();
    match &e {
        Error::Documents(d) => match &**d {
            DocumentError::DuplicateKey {
                index,
                value,
                document,
                ..
            } => {
                assert_eq!(index, "email_1");
                assert_eq!(value, "\"u3@x\"");
                assert_eq!(document.as_deref(), Some("250"));
            }
            other => panic!("expected DuplicateKey, got {other}"),
        },
        other => panic!("expected a document error, got {other}"),
    }
    assert!(
        e.to_string().contains("u3@x") && e.to_string().contains("250"),
        "{e}"
    );
    assert_eq!(people.list_indexes_with_state().unwrap(), vec![]);
    assert_eq!(marks(&c.url("unique"), "unique"), Vec::<String>::new());
    // Fixed, it builds (a fresh build, unique).
    people
        .update_one(
            json!({"_id": 250}),
            json!({"$set": {"email": "u250@x"}}),
            Default::default(),
        )
        .unwrap();
    let info = people
        .create_index(
            &[("email", 1)],
            IndexOptions {
                unique: true,
                ..IndexOptions::default()
            },
        )
        .unwrap();
    assert_eq!(
        people.list_indexes_with_state().unwrap(),
        vec![(info, IndexState::Ready)]
    );
    let dup = people
        .insert(&json!({"_id": 999, "email": "u7@x"}))
        .unwrap_err();
    assert!(dup.to_string().contains("u7@x"), "{dup}");

    // A TTL index over more documents than a Txn holds: built in batches,
    // then its first pass deletes the expired ones.
    let events = db.collection::<Document>("events");
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let docs: Vec<Document> = (0..300i64)
        .map(|i| {
            let at = if i % 2 == 0 {
                now_ms - 7_200_000
            } else {
                now_ms
            };
            Document::new().with("_id", i).with("at", Value::Date(at))
        })
        .collect();
    for chunk in docs.chunks(20) {
        events.insert_many(chunk).unwrap();
    }
    let ttl = events
        .create_ttl_index("at", 3600, IndexOptions::default())
        .unwrap();
    assert_eq!(ttl.expire_after_seconds, Some(3600));
    assert_eq!(
        events.list_indexes_with_state().unwrap(),
        vec![(ttl, IndexState::Ready)]
    );
    events.delete_expired(1000).unwrap();
    assert_eq!(events.len().unwrap(), 150);
}
