//! Documents (suites 1 and 2 for the document layer, docs/reliability.md):
//! collections against an in-memory model with index
//! consistency after every operation (every index equals the index
//! recomputed from the documents), unique violations that write nothing,
//! typed round trips, transactions across collections, crash images of
//! document writes with their indexes, and the shared model of
//! `documents_model.rs` (also run on an etcd cluster by cairndb-etcd's
//! tests).

use std::collections::BTreeMap;
use std::sync::Arc;

use cairndb::document::DocumentError;
use cairndb::document::{Document, IndexOptions, Value};
use cairndb::storage::sim::{Fault, OpFilter, SimFile, SplitMix64};
use cairndb::{Builder, Database, Durability};

fn rand_value(rng: &mut SplitMix64, depth: u32) -> Value {
    match rng.below(if depth > 1 { 6 } else { 8 }) {
        0 => Value::Null,
        1 => Value::Bool(rng.below(2) == 0),
        2 => Value::Int(rng.below(10) as i64 - 3),
        3 => Value::Float(rng.below(10) as f64 / 2.0),
        4 | 5 => Value::String(["a", "b", "ab", "c", ""][rng.below(5) as usize].to_string()),
        6 => Value::Array(
            (0..rng.below(4))
                .map(|_| rand_value(rng, depth + 1))
                .collect(),
        ),
        _ => Value::Object(rand_doc(rng, depth + 1)),
    }
}

fn rand_doc(rng: &mut SplitMix64, depth: u32) -> Document {
    let mut d = Document::new();
    for f in ["x", "y", "z"] {
        if rng.below(4) != 0 {
            d.insert(f, rand_value(rng, depth));
        }
    }
    d
}

type Model = BTreeMap<i64, Document>;

fn check_state(db: &Database, model: &Model, ctx: &str) -> u64 {
    let c = db.collection::<Document>("c");
    let mut bad = 0;
    let problems = c.check_indexes().unwrap();
    if !problems.is_empty() {
        eprintln!("{ctx}: {problems:?}");
        bad += 1;
    }
    if c.len().unwrap() != model.len() as u64 {
        eprintln!("{ctx}: len {} vs model {}", c.len().unwrap(), model.len());
        bad += 1;
    }
    for (id, d) in model {
        if c.get(*id).unwrap().as_ref() != Some(d) {
            eprintln!("{ctx}: document {id} differs");
            bad += 1;
        }
    }
    bad
}

#[test]
fn collections_match_the_model_and_indexes_stay_consistent() {
    let seed = crate::common::seed("documents-model");
    let cases = crate::common::iters(12);
    let mut rng = SplitMix64(seed);
    let (mut ops_total, mut divergences, mut rejected) = (0u64, 0u64, 0u64);
    for case in 0..cases {
        let dir = tempfile::tempdir().unwrap();
        let db = Builder::new()
            .page_size(if case % 2 == 0 { 512 } else { 4096 })
            .create(dir.path().join("d.cairn"))
            .unwrap();
        let c = db
            .collection::<Document>("c")
            .with_durability(Durability::None);
        let mut model = Model::new();
        for op in 0..120 {
            ops_total += 1;
            let ctx = format!("seed {seed} case {case} op {op}");
            let id = rng.below(12) as i64;
            let mut doc = rand_doc(&mut rng, 0);
            let mut with_id = Document::new().with("_id", id);
            for (k, v) in std::mem::take(&mut doc) {
                with_id.insert(k, v);
            }
            let doc = with_id;
            match rng.below(10) {
                0..=2 => match c.insert(&doc) {
                    Ok(v) => {
                        assert_eq!(v, Value::Int(id));
                        if model.insert(id, doc).is_some() {
                            eprintln!("{ctx}: insert over an existing id succeeded");
                            divergences += 1;
                        }
                    }
                    Err(DocumentError::DuplicateKey { index, .. }) => {
                        rejected += 1;
                        if index == "_id" && !model.contains_key(&id) {
                            eprintln!("{ctx}: duplicate _id reported for a new id");
                            divergences += 1;
                        }
                    }
                    Err(DocumentError::IndexError { .. }) => rejected += 1,
                    Err(e) => panic!("{ctx}: {e}"),
                },
                3..=4 => match c.upsert(&doc) {
                    Ok(replaced) => {
                        if replaced != model.insert(id, doc).is_some() {
                            eprintln!("{ctx}: upsert replaced flag wrong");
                            divergences += 1;
                        }
                    }
                    Err(DocumentError::DuplicateKey { .. } | DocumentError::IndexError { .. }) => {
                        rejected += 1
                    }
                    Err(e) => panic!("{ctx}: {e}"),
                },
                5 => match c.replace(&doc) {
                    Ok(existed) => {
                        if existed != model.contains_key(&id) {
                            divergences += 1;
                        }
                        if existed {
                            model.insert(id, doc);
                        }
                    }
                    Err(DocumentError::DuplicateKey { .. } | DocumentError::IndexError { .. }) => {
                        rejected += 1
                    }
                    Err(e) => panic!("{ctx}: {e}"),
                },
                6 => {
                    let existed = c.delete_id(id).unwrap();
                    if existed != model.remove(&id).is_some() {
                        divergences += 1;
                    }
                }
                7 => {
                    // Several docs in one transaction: all or none.
                    let docs: Vec<Document> = (0..3)
                        .map(|i| {
                            let mut d = Document::new().with("_id", 100 + op * 3 + i);
                            d.insert("x", rand_value(&mut rng, 1));
                            d
                        })
                        .collect();
                    match c.insert_many(&docs) {
                        Ok(_) => {
                            for d in docs {
                                let id = d.get("_id").and_then(Value::as_i64).unwrap();
                                model.insert(id, d);
                            }
                        }
                        Err(
                            DocumentError::DuplicateKey { .. } | DocumentError::IndexError { .. },
                        ) => rejected += 1,
                        Err(e) => panic!("{ctx}: {e}"),
                    }
                }
                8 => {
                    let fields: &[(&str, i8)] = match rng.below(5) {
                        0 => &[("x", 1)],
                        1 => &[("y", -1)],
                        2 => &[("x", 1), ("z", -1)],
                        3 => &[("x.x", 1)],
                        _ => &[("z", 1)],
                    };
                    let opts = IndexOptions {
                        name: None,
                        unique: rng.below(3) == 0,
                        sparse: rng.below(2) == 0,
                    };
                    match c.create_index(fields, opts) {
                        Ok(_) => {}
                        Err(
                            DocumentError::DuplicateKey { .. } | DocumentError::IndexError { .. },
                        ) => rejected += 1,
                        Err(e) => panic!("{ctx}: {e}"),
                    }
                }
                _ => {
                    let idx = c.list_indexes().unwrap();
                    if !idx.is_empty() {
                        let name = idx[rng.below(idx.len() as u64) as usize].name.clone();
                        assert!(c.drop_index(&name).unwrap());
                    }
                }
            }
            divergences += check_state(&db, &model, &ctx);
        }
        assert!(db.check_integrity().unwrap().is_ok());
    }
    crate::common::report(&format!(
        "documents-model: cases={cases} ops={ops_total} rejected={rejected} divergences={divergences} seed={seed}"
    ));
    assert_eq!(divergences, 0);
    assert!(
        rejected > 0,
        "no operation was ever rejected: the unique paths went untested"
    );
}

#[derive(serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq)]
struct Address {
    street: String,
    city: String,
    zip: String,
}

#[derive(serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq)]
struct Complex {
    #[serde(rename = "_id")]
    id: u64,
    title: String,
    address: Address,
    tags: Vec<(String, String)>,
    created: i64,
}

#[test]
fn typed_documents_round_trip_and_unique_violations_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::create(dir.path().join("t.cairn")).unwrap();
    let c = db.collection::<Complex>("complex");
    let mk = |id: u64, city: &str| Complex {
        id,
        title: format!("t{id}"),
        address: Address {
            street: "Main".into(),
            city: city.into(),
            zip: "1".into(),
        },
        tags: vec![("k".into(), "v".into())],
        created: 1_700_000_000 + id as i64,
    };
    c.create_index(
        &[("address.city", 1)],
        IndexOptions {
            unique: true,
            ..Default::default()
        },
    )
    .unwrap();
    c.insert_many(&[mk(1, "Oslo"), mk(2, "Rome")]).unwrap();
    assert_eq!(c.get(1u64 as i64).unwrap(), Some(mk(1, "Oslo")));
    // A unique violation in a bulk insert: nothing of it is written.
    let e = c.insert_many(&[mk(3, "Paris"), mk(4, "Rome")]).unwrap_err();
    match &e {
        DocumentError::DuplicateKey { index, value, .. } => {
            assert_eq!(index, "address.city_1");
            assert_eq!(value, "\"Rome\"");
        }
        other => panic!("{other}"),
    }
    assert!(e.to_string().contains("address.city_1"), "{e}");
    assert_eq!(c.get(3i64).unwrap(), None);
    assert_eq!(c.len().unwrap(), 2);
    // Inside an explicit transaction: the failed operation leaves no trace,
    // the others commit.
    let txn = db.begin_write().unwrap();
    {
        let tc = txn.collection::<Complex>("complex");
        tc.insert(&mk(5, "Lima")).unwrap();
        assert!(matches!(
            tc.insert(&mk(6, "Oslo")),
            Err(DocumentError::DuplicateKey { .. })
        ));
        assert!(matches!(
            tc.insert(&mk(5, "Kyiv")),
            Err(DocumentError::DuplicateKey { .. })
        ));
        txn.collection::<Document>("audit")
            .insert(&Document::new().with("what", "insert 5"))
            .unwrap();
    }
    txn.commit().unwrap();
    assert_eq!(c.get(5i64).unwrap(), Some(mk(5, "Lima")));
    assert_eq!(c.get(6i64).unwrap(), None);
    assert!(c.check_indexes().unwrap().is_empty());
    assert_eq!(db.list_collections().unwrap(), ["audit", "complex"]);
    // An aborted transaction leaves nothing.
    let txn = db.begin_write().unwrap();
    txn.collection::<Complex>("complex")
        .insert(&mk(7, "Baku"))
        .unwrap();
    txn.abort();
    assert_eq!(c.get(7i64).unwrap(), None);
    // Upsert moves index entries; delete removes them.
    assert!(c.upsert(&mk(1, "Bern")).unwrap());
    c.insert(&mk(8, "Oslo")).unwrap();
    assert!(c.delete_id(8i64).unwrap());
    assert!(c.check_indexes().unwrap().is_empty());
    // Generated ids for documents without one.
    let d = db.collection::<Document>("free");
    let id = d.insert(&Document::new().with("a", 1)).unwrap();
    assert!(matches!(id, Value::Id(_)));
    assert_eq!(d.get(id.clone()).unwrap().unwrap().get("_id"), Some(&id));
    // Bad input: not an object, a non-scalar _id, a bad name.
    assert!(matches!(
        db.collection::<Vec<u8>>("x").insert(&vec![1u8]),
        Err(DocumentError::NotAnObject { found: "array" })
    ));
    assert!(matches!(
        d.insert(&Document::new().with("_id", vec![1, 2])),
        Err(DocumentError::InvalidId { found: "array" })
    ));
    assert!(matches!(
        db.collection::<Document>("$x").insert(&Document::new()),
        Err(DocumentError::InvalidCollectionName { .. })
    ));
    // A long value is indexed by its first bytes and a hash; four of them
    // in one entry exceed the key limit, and a too-long _id: typed errors,
    // nothing written.
    let long = db.collection::<Document>("long");
    long.create_index(
        &[("s", 1), ("t", 1), ("u", 1), ("v", 1)],
        IndexOptions::default(),
    )
    .unwrap();
    let mut four = Document::new().with("_id", 1);
    for f in ["s", "t", "u", "v"] {
        four.insert(f, "x".repeat(5000));
    }
    let e = long.insert(&four).unwrap_err();
    assert!(matches!(e, DocumentError::IndexError { .. }), "{e}");
    assert!(e.to_string().contains("index key can hold"), "{e}");
    assert!(matches!(
        long.insert(&Document::new().with("_id", "y".repeat(5000))),
        Err(DocumentError::IdTooLarge {
            len: 5003,
            max: 987
        })
    ));
    assert_eq!(long.len().unwrap(), 0);
    assert!(long.check_indexes().unwrap().is_empty());
    assert!(c.drop().unwrap());
    assert_eq!(c.len().unwrap(), 0);
    assert!(db.check_integrity().unwrap().is_ok());
}

/// Crash images of document writes (suite 2 style): after recovery every
/// index equals the index recomputed from the documents, and each bulk
/// write is all or nothing.
#[test]
fn crash_document_writes_keep_indexes_consistent() {
    let seed = crate::common::seed("documents-crash");
    let run = |sim: &Arc<SimFile>| -> u64 {
        let Ok(db) =
            Builder::new()
                .page_size(512)
                .open_with_storage(Box::new(sim.clone()), true, false)
        else {
            return 0;
        };
        let c = db.collection::<Document>("c");
        if c.create_index(&[("tag", 1)], IndexOptions::default())
            .is_err()
        {
            return 0;
        }
        let mut acked = 0;
        for round in 0..3i64 {
            let docs: Vec<Document> = (0..4)
                .map(|i| {
                    Document::new()
                        .with("_id", i)
                        .with("tag", format!("r{round}-{i}"))
                        .with("round", round)
                })
                .collect();
            if c.upsert_many(&docs).is_err() {
                return acked;
            }
            acked += 1;
        }
        acked
    };
    let clean = Arc::new(SimFile::new());
    clean.set_fault(None, OpFilter::Mutating);
    assert_eq!(run(&clean), 3);
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
                continue;
            };
            let c = db.collection::<Document>("c");
            let rounds: Vec<i64> = (0..4i64)
                .filter_map(|i| c.get(i).unwrap())
                .map(|d| d.get("round").and_then(Value::as_i64).unwrap())
                .collect();
            let whole =
                rounds.is_empty() || (rounds.len() == 4 && rounds.iter().all(|r| *r == rounds[0]));
            let newest = rounds.first().map_or(0, |r| r + 1) as u64;
            let ok = whole
                && (newest == acked || newest == acked + 1)
                && c.check_indexes().unwrap().is_empty()
                && db.check_integrity().unwrap().is_ok();
            if !ok {
                eprintln!(
                    "crash at {k} ({}): rounds={rounds:?} acked={acked}",
                    img.name
                );
                bad += 1;
            }
        }
    }
    crate::common::report(&format!(
        "documents-crash: crash_points={total} images={images} inconsistent={bad} seed={seed}"
    ));
    assert_eq!(bad, 0);
}

/// A document read as `serde_json::Value` (its generated id as MongoDB
/// Extended JSON, `{"$oid": hex}`) writes back as it was read: the id stays
/// an id, so `replace` finds the document. Field names the query and update
/// languages could not reach (`$` first, a `.` anywhere, at any depth) are
/// refused with the name and where it is, and nothing is written.
#[test]
fn json_documents_write_back_and_unreachable_field_names_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::create(dir.path().join("json.cairn")).unwrap();
    let c = db.collection::<serde_json::Value>("t");
    let id = c.insert(&serde_json::json!({"name": "b"})).unwrap();
    let mut doc = c.get(id.clone()).unwrap().unwrap();
    assert!(doc["_id"]["$oid"].is_string(), "{doc}");
    doc["name"] = serde_json::json!("c");
    assert!(
        c.replace(&doc).unwrap(),
        "the document read back is found by its id"
    );
    let back = db.collection::<Document>("t").get(id).unwrap().unwrap();
    assert_eq!(back.get("name"), Some(&Value::String("c".into())));
    assert!(matches!(back.get("_id"), Some(Value::Id(_))), "{back:?}");

    // A malformed {"$oid"} stays an object, and is refused like any "$".
    for (bad, name, path) in [
        (serde_json::json!({"$set": {"a": 1}}), "$set", "(top)"),
        (serde_json::json!({"a": {"b.c": 1}}), "b.c", "a"),
        (serde_json::json!({"a": [{"x": {"$y": 1}}]}), "$y", "a.x"),
        (
            serde_json::json!({"_id": {"$oid": "not hex"}}),
            "$oid",
            "_id",
        ),
    ] {
        match c.insert(&bad) {
            Err(DocumentError::InvalidFieldName {
                name: n, path: p, ..
            }) => {
                assert_eq!((n.as_str(), p.as_str()), (name, path), "{bad}")
            }
            other => panic!("{bad}: {other:?}"),
        }
    }
    assert_eq!(c.len().unwrap(), 1);
    // An update cannot create one either.
    let err = c
        .update_many(
            serde_json::json!({}),
            serde_json::json!({"$set": {"a": {"$b": 1}}}),
            Default::default(),
        )
        .unwrap_err();
    assert!(
        matches!(&err, DocumentError::InvalidFieldName { name, .. } if name == "$b"),
        "{err:?}"
    );
}

/// A single-document write computes its index entries before it takes the
/// writer lock, under the metadata its thread last wrote the collection
/// under: when the indexes change in between (created, dropped, dropped
/// and created again over another field, by this thread or another), the
/// write must use the indexes the transaction finds. `check_indexes`
/// recomputes every index from the documents.
#[test]
fn index_changes_between_writes_of_one_thread_keep_indexes_exact() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::create(dir.path().join("pre.cairn")).unwrap();
    let c = db
        .collection::<Document>("c")
        .with_durability(Durability::None);
    let doc = |i: i64| {
        let mut d = Document::new();
        d.insert("_id", i);
        d.insert("a", i % 7);
        d.insert("b", format!("b{}", i % 5));
        d
    };
    c.create_index(&[("a", 1)], IndexOptions::default())
        .unwrap();
    let mut i = 0;
    let mut step = |what: &str, c: &cairndb::document::Collection<'_, Document>| {
        for _ in 0..20 {
            i += 1;
            c.insert(&doc(i)).unwrap();
            c.upsert(&doc(i / 2)).unwrap();
            c.replace(&doc(i / 3)).unwrap();
        }
        let problems = c.check_indexes().unwrap();
        assert!(problems.is_empty(), "after {what}: {problems:?}");
    };
    step("the first index", &c);
    c.create_index(&[("b", 1)], IndexOptions::default())
        .unwrap();
    step("a second index", &c);
    c.drop_index("a_1").unwrap();
    step("a dropped index", &c);
    // Another thread changes the indexes; this thread's last metadata is
    // then stale.
    std::thread::scope(|s| {
        s.spawn(|| {
            let c = db.collection::<Document>("c");
            c.drop_index("b_1").unwrap();
            c.create_index(&[("a", -1), ("b", 1)], IndexOptions::default())
                .unwrap();
        });
    });
    step("indexes changed by another thread", &c);
    assert_eq!(c.list_indexes().unwrap().len(), 1);
}

/// The shared model (`documents_model.rs`, also run on an etcd cluster by
/// cairndb-etcd's tests) on files of two page sizes, every index checked
/// against its documents after each case.
#[test]
fn collection_matches_the_shared_model() {
    let seed = crate::common::seed("documents-model");
    let cases = crate::common::iters(12);
    let mut rng = SplitMix64(seed);
    let mut divergences = 0u64;
    for case in 0..cases {
        let dir = tempfile::tempdir().unwrap();
        let page = if case % 2 == 0 { 512 } else { 4096 };
        let db = Builder::new()
            .page_size(page)
            .create(dir.path().join("m.cairn"))
            .unwrap();
        let c = crate::common::unsynced(&db, "model");
        divergences += crate::documents_model::run(
            &c,
            &mut |n| rng.below(n),
            300,
            &format!("seed {seed} case {case}"),
        );
        assert_eq!(c.check_indexes().unwrap(), Vec::<String>::new());
    }
    crate::common::report(&format!(
        "documents-model: cases={cases} ops={} divergences={divergences} seed={seed}",
        cases * 300
    ));
    assert_eq!(divergences, 0);
}

/// A write takes its collection's metadata from the catalog stamp of the
/// commit it starts from (no catalog lookup) only while nothing changed the
/// catalog since: indexes created and dropped between writes — from
/// another thread, through another handle, by this one — and commits the
/// document layer did not make (a key-value commit) are all seen by the
/// next insert, replace and delete, whose index entries `check_indexes`
/// then finds complete. Fails if a commit that changed the catalog is
/// stamped with the stamp it started from (stale metadata: the new index
/// misses the next writes' entries).
#[test]
fn writes_see_every_catalog_change_made_between_them() {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(Database::create(dir.path().join("stamp.cairn")).unwrap());
    let c = db
        .collection::<Document>("c")
        .with_durability(Durability::None);
    let doc = |i: i64, salt: i64| {
        let mut d = Document::new();
        d.insert("_id", i);
        d.insert("x", (i + salt) % 7);
        d.insert("y", (i * 3 + salt) % 5);
        d
    };
    let mut next = 0i64;
    let mut write = |c: &cairndb::document::Collection<Document>, salt: i64| {
        for _ in 0..3 {
            c.insert(&doc(next, salt)).unwrap();
            next += 1;
        }
        // Replaces and deletes of earlier documents too.
        c.replace(&doc(next / 2, salt + 1)).unwrap();
        c.delete_id(next - 2).unwrap();
    };
    let check = |what: &str| {
        let c = db.collection::<Document>("c");
        assert_eq!(
            c.check_indexes().unwrap(),
            Vec::<String>::new(),
            "after {what}"
        );
    };
    write(&c, 0);
    write(&c, 0);
    check("plain writes");

    // An index created by another thread, through its own handle.
    let db2 = db.clone();
    std::thread::spawn(move || {
        db2.collection::<Document>("c")
            .create_index(&[("x", 1)], IndexOptions::default())
            .unwrap();
    })
    .join()
    .unwrap();
    write(&c, 1);
    write(&c, 2);
    check("an index created by another thread");

    // Dropped and another created, through another handle on this thread.
    let other = db.collection::<Document>("c");
    assert!(other.drop_index("x_1").unwrap());
    write(&c, 3);
    other
        .create_index(&[("y", -1)], IndexOptions::default())
        .unwrap();
    write(&c, 4);
    check("indexes dropped and created through another handle");

    // A key-value commit between two writes, then an index created by the
    // writing handle itself.
    {
        let t = db.begin_write().unwrap();
        t.set_durability(Durability::None);
        t.open_table(cairndb::TableDefinition::<&str, u64>::new("kv"))
            .unwrap()
            .insert("k", 1)
            .unwrap();
        t.commit().unwrap();
    }
    write(&c, 5);
    c.create_index(&[("x", 1), ("y", 1)], IndexOptions::default())
        .unwrap();
    write(&c, 6);
    write(&c, 7);
    check("a key-value commit, and an index created by the writer");

    // Another collection created between writes (its own catalog entry).
    db.collection::<Document>("d").insert(&doc(0, 0)).unwrap();
    write(&c, 8);
    check("another collection created");
}
