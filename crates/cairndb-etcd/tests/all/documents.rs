//! Property: the document layer on a cluster (`EtcdDatabase::collection`,
//! the embedded engine's document code through the storage seam) behaves
//! as the shared model says (`documents_model.rs`, the operations the
//! embedded engine's suite runs, with the same seed run on a file beside
//! it); writers on two clients inserting the same unique values leave no
//! duplicate (each loser gets the typed duplicate key error after its
//! conflicted commit ran again); the document layer's errors come back
//! named.

use std::sync::{Arc, Barrier};
use std::thread;

use cairndb::document::query::FindOptions;
use cairndb::document::{Document, DocumentError, IndexInfo, IndexOptions, Value};
use cairndb_etcd::{Error, EtcdCollection};
use serde_json::{json, Value as Json};

use crate::common::{cluster, connect, Rng};
use crate::documents_model::{self, Target};

/// The cluster's collection as a target of the shared model: errors of the
/// document layer come back as `Error::Documents`; any other is a failure.
struct OnCluster<'db>(EtcdCollection<'db, Document>);

fn layer<T>(r: cairndb_etcd::Result<T>) -> Result<T, DocumentError> {
    match r {
        Ok(v) => Ok(v),
        Err(Error::Documents(e)) => Err(*e),
        Err(other) => panic!("not a document layer error: {other}"),
    }
}

impl Target for OnCluster<'_> {
    fn insert(&self, d: &Document) -> Result<Value, DocumentError> {
        layer(self.0.insert(d))
    }
    fn insert_many(&self, ds: &[Document]) -> Result<Vec<Value>, DocumentError> {
        layer(self.0.insert_many(ds))
    }
    fn upsert(&self, d: &Document) -> Result<bool, DocumentError> {
        layer(self.0.upsert(d))
    }
    fn replace(&self, d: &Document) -> Result<bool, DocumentError> {
        layer(self.0.replace(d))
    }
    fn delete_id(&self, id: Value) -> Result<bool, DocumentError> {
        layer(self.0.delete_id(id))
    }
    fn update_many(&self, f: Json, u: Json) -> Result<u64, DocumentError> {
        layer(self.0.update_many(f, u, Default::default())).map(|r| r.matched)
    }
    fn delete_one(&self, f: Json) -> Result<u64, DocumentError> {
        layer(self.0.delete_one(f))
    }
    fn delete_many(&self, f: Json) -> Result<u64, DocumentError> {
        layer(self.0.delete_many(f))
    }
    fn create_index(
        &self,
        fields: &[(&str, i8)],
        unique: bool,
        sparse: bool,
    ) -> Result<IndexInfo, DocumentError> {
        let opts = IndexOptions {
            unique,
            sparse,
            ..Default::default()
        };
        layer(self.0.create_index(fields, opts))
    }
    fn drop_index(&self, name: &str) -> Result<bool, DocumentError> {
        layer(self.0.drop_index(name))
    }
    fn list_indexes(&self) -> Result<Vec<IndexInfo>, DocumentError> {
        layer(self.0.list_indexes())
    }
    fn find(&self, f: Json, opts: FindOptions) -> Result<Vec<Document>, DocumentError> {
        layer(self.0.find_with(f, opts))?.collect()
    }
    fn find_one(&self, f: Json) -> Result<Option<Document>, DocumentError> {
        layer(self.0.find_one(f))
    }
    fn count(&self, f: Json) -> Result<u64, DocumentError> {
        layer(self.0.count(f))
    }
    fn get(&self, id: Value) -> Result<Option<Document>, DocumentError> {
        layer(self.0.get(id))
    }
    fn len(&self) -> Result<u64, DocumentError> {
        layer(self.0.len())
    }
}

/// The shared model, the same seed on a cluster and on a file.
#[test]
fn collection_on_a_cluster_matches_the_shared_model() {
    let Some(c) = cluster("collection_on_a_cluster_matches_the_shared_model") else {
        return;
    };
    let db = connect(&c.url("docs"));
    let seed = Rng::new("documents-model").next();
    let ops = 200;
    let on_cluster = OnCluster(db.collection::<Document>("model"));
    let mut rng = Rng::with_seed(seed);
    let ctx = format!("seed {seed} cluster");
    let d = documents_model::run(&on_cluster, &mut |n| rng.below(n), ops, &ctx);
    assert_eq!(d, 0, "the cluster diverged from the model (seed {seed})");
    let dir = tempfile::tempdir().unwrap();
    let file = cairndb::Database::create(dir.path().join("m.cairn")).unwrap();
    let on_file = file.collection::<Document>("model");
    let mut rng = Rng::with_seed(seed);
    let ctx = format!("seed {seed} file");
    let d = documents_model::run(&on_file, &mut |n| rng.below(n), ops, &ctx);
    assert_eq!(d, 0, "the file diverged from the model (seed {seed})");
    // Both hold the same documents.
    let all = FindOptions::new().sort(json!({"_id": 1})).unwrap();
    let on_cluster: Vec<Document> = db
        .collection::<Document>("model")
        .find_with(json!({}), all.clone())
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let on_file: Vec<Document> = file
        .collection::<Document>("model")
        .find_with(json!({}), all)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(on_cluster, on_file);
    eprintln!("documents model: {ops} operations, seed {seed}");
}

/// Two clients insert documents whose `u` values overlap under a unique
/// index, concurrently: every value is held by exactly one document, each
/// insert either committed or got the duplicate key error (after its
/// conflicted commit ran again on the new state), and the two counts add
/// up. The index holds what the documents say.
#[test]
fn concurrent_writers_leave_no_duplicate_under_a_unique_index() {
    let Some(c) = cluster("concurrent_writers_leave_no_duplicate_under_a_unique_index") else {
        return;
    };
    let url = c.url("uniq");
    let setup = connect(&url);
    setup
        .collection::<Document>("accounts")
        .create_index(
            &[("u", 1)],
            IndexOptions {
                unique: true,
                ..Default::default()
            },
        )
        .unwrap();
    const PER_WRITER: i64 = 25;
    let barrier = Arc::new(Barrier::new(2));
    let writers: Vec<_> = (0..2i64)
        .map(|w| {
            let (url, barrier) = (url.clone(), barrier.clone());
            thread::spawn(move || {
                let db = connect(&url);
                let c = db.collection::<Document>("accounts");
                barrier.wait();
                let (mut won, mut lost, mut conflicted) = (Vec::new(), 0u64, 0u64);
                for i in 0..PER_WRITER {
                    // Both writers insert u = 0, 1, 2, … under their own _ids.
                    let d = Document::new()
                        .with("_id", w * 1000 + i)
                        .with("u", i)
                        .with("w", w);
                    match c.insert(&d) {
                        Ok(_) => won.push(i),
                        Err(Error::Documents(e)) => match *e {
                            DocumentError::DuplicateKey { index, .. } => {
                                assert_eq!(index, "u_1");
                                lost += 1;
                            }
                            other => panic!("writer {w}: {other}"),
                        },
                        // Conflicted on every attempt: the typed, retryable
                        // error, nothing written.
                        Err(e) if e.is_retryable() => conflicted += 1,
                        Err(e) => panic!("writer {w}: {e}"),
                    }
                }
                (won, lost, conflicted)
            })
        })
        .collect();
    let results: Vec<(Vec<i64>, u64, u64)> =
        writers.into_iter().map(|h| h.join().unwrap()).collect();
    let c = setup.collection::<Document>("accounts");
    let docs: Vec<Document> = c
        .find_with(json!({}), FindOptions::new().sort(json!({"u": 1})).unwrap())
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let us: Vec<i64> = docs
        .iter()
        .map(|d| match d.get("u") {
            Some(Value::Int(u)) => *u,
            other => panic!("u: {other:?}"),
        })
        .collect();
    let mut distinct = us.clone();
    distinct.dedup();
    assert_eq!(us, distinct, "a unique value held twice");
    let won: usize = results.iter().map(|(w, ..)| w.len()).sum();
    let lost: u64 = results.iter().map(|(_, l, _)| l).sum();
    let conflicted: u64 = results.iter().map(|(.., c)| c).sum();
    assert_eq!(
        us.len(),
        won,
        "every acknowledged insert is there, no other"
    );
    assert_eq!(won as u64 + lost + conflicted, 2 * PER_WRITER as u64);
    // A value neither writer holds: both conflicted on it, every attempt.
    assert!(us.len() as u64 + conflicted >= PER_WRITER as u64);
    // Each document is the winner's, and the index answers as a scan does.
    for (w, (won, ..)) in results.iter().enumerate() {
        for u in won {
            let d = c.find_one(json!({"u": u})).unwrap().unwrap();
            assert_eq!(d.get("w"), Some(&Value::Int(w as i64)), "u {u}");
        }
    }
    let hinted = c
        .find_with(
            json!({"u": {"$gte": 0}}),
            FindOptions::new().hint(json!("u_1")).unwrap(),
        )
        .unwrap()
        .count();
    assert_eq!(hinted, won);
    eprintln!("unique index: won {won}, duplicate key {lost}, conflicted out {conflicted}");
}

/// A bad filter is the document layer's error, named, on a cluster too.
#[test]
fn document_layer_errors_are_named() {
    let Some(c) = cluster("document_layer_errors_are_named") else {
        return;
    };
    let db = connect(&c.url("errors"));
    let coll = db.collection::<Document>("c");
    coll.insert(&Document::new().with("_id", 1)).unwrap();
    match coll.count(json!({"a": {"$bogus": 1}})) {
        Err(Error::Documents(e)) => assert!(e.to_string().contains("$bogus"), "{e}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(db.list_collections().unwrap(), ["c"]);
}

/// `find_one_and_update` / `_replace` / `_delete` (sort, upsert, before
/// and after), `explain_count` and `aggregate_with` on a cluster answer as
/// the embedded `Collection`'s on a file, the same calls on the same
/// documents; `check_indexes` finds nothing on both, then names the
/// collection and the index once an entry no document has is put under
/// the index's table with a raw etcd put.
#[test]
fn find_one_and_explain_count_and_check_indexes_answer_as_on_a_file() {
    use cairndb::document::query::{FindOneAndOptions, ReturnDocument};
    use cairndb::document::{AggregateOptions, SortSpec};
    let Some(c) = cluster("find_one_and_explain_count_and_check_indexes_answer_as_on_a_file")
    else {
        return;
    };
    let db = connect(&c.url("foa"));
    let on_cluster = db.collection::<Document>("jobs");
    let dir = tempfile::tempdir().unwrap();
    let file = cairndb::Database::create(dir.path().join("f.cairn")).unwrap();
    let on_file = file.collection::<Document>("jobs");
    for i in 0..12i64 {
        let d = Document::new()
            .with("_id", i)
            .with("state", if i % 3 == 0 { "done" } else { "todo" })
            .with("prio", (i * 7) % 5);
        on_cluster.insert(&d).unwrap();
        on_file.insert(&d).unwrap();
    }
    let opts = IndexOptions::default();
    on_cluster
        .create_index(&[("state", 1)], opts.clone())
        .unwrap();
    on_file.create_index(&[("state", 1)], opts).unwrap();
    let sorted = |spec: Json, after: bool, upsert: bool| FindOneAndOptions {
        sort: Some(SortSpec::parse(spec).unwrap()),
        upsert,
        return_document: if after {
            ReturnDocument::After
        } else {
            ReturnDocument::Before
        },
    };
    // Take the highest-priority "todo" job (ties by _id descending), as
    // before and as after; replace and delete by sort; upsert a missing one.
    let steps: Vec<(Option<Document>, Option<Document>)> = vec![
        (
            on_cluster
                .find_one_and_update(
                    json!({"state": "todo"}),
                    json!({"$set": {"state": "running"}}),
                    sorted(json!({"prio": -1, "_id": -1}), false, false),
                )
                .unwrap(),
            on_file
                .find_one_and_update(
                    json!({"state": "todo"}),
                    json!({"$set": {"state": "running"}}),
                    sorted(json!({"prio": -1, "_id": -1}), false, false),
                )
                .unwrap(),
        ),
        (
            on_cluster
                .find_one_and_update(
                    json!({"state": "todo"}),
                    json!({"$inc": {"prio": 10}}),
                    sorted(json!({"prio": 1, "_id": 1}), true, false),
                )
                .unwrap(),
            on_file
                .find_one_and_update(
                    json!({"state": "todo"}),
                    json!({"$inc": {"prio": 10}}),
                    sorted(json!({"prio": 1, "_id": 1}), true, false),
                )
                .unwrap(),
        ),
        (
            on_cluster
                .find_one_and_replace(
                    json!({"state": "done"}),
                    &Document::new().with("state", "archived"),
                    sorted(json!({"_id": -1}), true, false),
                )
                .unwrap(),
            on_file
                .find_one_and_replace(
                    json!({"state": "done"}),
                    &Document::new().with("state", "archived"),
                    sorted(json!({"_id": -1}), true, false),
                )
                .unwrap(),
        ),
        (
            on_cluster
                .find_one_and_delete(
                    json!({"state": "todo"}),
                    sorted(json!({"prio": -1, "_id": 1}), false, false),
                )
                .unwrap(),
            on_file
                .find_one_and_delete(
                    json!({"state": "todo"}),
                    sorted(json!({"prio": -1, "_id": 1}), false, false),
                )
                .unwrap(),
        ),
        (
            on_cluster
                .find_one_and_update(
                    json!({"_id": 99}),
                    json!({"$set": {"state": "new"}}),
                    sorted(json!({"_id": 1}), true, true),
                )
                .unwrap(),
            on_file
                .find_one_and_update(
                    json!({"_id": 99}),
                    json!({"$set": {"state": "new"}}),
                    sorted(json!({"_id": 1}), true, true),
                )
                .unwrap(),
        ),
    ];
    for (i, (a, b)) in steps.iter().enumerate() {
        assert!(a.is_some(), "step {i} found nothing");
        assert_eq!(a, b, "step {i}");
    }
    // The replacement kept its _id; the upsert returned the new document.
    assert_eq!(
        steps[2].0.as_ref().unwrap().get("_id"),
        Some(&Value::from(9))
    );
    assert_eq!(
        steps[4].0.as_ref().unwrap().get("state"),
        Some(&Value::from("new"))
    );
    // An update document is refused by find_one_and_update's rule.
    assert!(matches!(
        on_cluster.find_one_and_update(json!({}), json!({"state": "x"}), Default::default()),
        Err(Error::Documents(_))
    ));
    let all = |c: &[Document]| c.to_vec();
    let sort = FindOptions::new().sort(json!({"_id": 1})).unwrap();
    let a: Vec<Document> = on_cluster
        .find_with(json!({}), sort.clone())
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let b: Vec<Document> = on_file
        .find_with(json!({}), sort)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(all(&a), all(&b));
    // explain_count: counted from the index alone on both.
    let ea = on_cluster.explain_count(json!({"state": "todo"})).unwrap();
    let eb = on_file.explain_count(json!({"state": "todo"})).unwrap();
    // (The file's plan cache may answer its plan; the plan and the reads
    // are the same.)
    let reads = |e: &cairndb::document::query::Explain| {
        let j = e.to_json();
        (
            j["plan"].clone(),
            e.keys_examined,
            e.docs_examined,
            e.returned,
        )
    };
    assert_eq!(reads(&ea), reads(&eb));
    assert_eq!(ea.docs_examined, 0, "{}", ea.to_json());
    assert_eq!(
        ea.returned,
        on_cluster.count(json!({"state": "todo"})).unwrap()
    );
    // aggregate_with: the memory bound applies on both.
    let pipeline = json!([{"$group": {"_id": "$state", "all": {"$push": "$$ROOT"}}}]);
    let small = AggregateOptions { memory_limit: 16 };
    let ra: Result<Vec<Document>, _> = on_cluster
        .aggregate_with(pipeline.clone(), small)
        .and_then(|a| a.map(|d| d.map_err(Error::from)).collect());
    let rb: Result<Vec<Document>, _> = on_file
        .aggregate_with(pipeline.clone(), small)
        .and_then(|a| a.collect());
    assert_eq!(ra.is_err(), rb.is_err(), "{ra:?} / {rb:?}");
    assert!(rb.is_err());
    // check_indexes: consistent, then an entry no document has.
    assert_eq!(on_cluster.check_indexes().unwrap(), Vec::<String>::new());
    assert_eq!(on_file.check_indexes().unwrap(), Vec::<String>::new());
    let r = db.begin_read().unwrap();
    let tables = r.list_tables().unwrap();
    // The data table is `$docs.<collection id>`; the index's, one more
    // component.
    let index_table = tables
        .iter()
        .find(|t| t.starts_with("$docs.") && t.matches('.').count() == 2 && !t.contains("changes"))
        .unwrap_or_else(|| panic!("no index table among {tables:?}"));
    let mut key = format!("foa/t/{index_table}").into_bytes();
    key.push(0);
    key.extend_from_slice(b"\x20no such entry");
    c.raw_put(&key, b"").unwrap();
    let problems = on_cluster.check_indexes().unwrap();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].contains("collection \"jobs\", index \"state_1\"")
            && problems[0].contains("1 entries that no document has"),
        "{problems:?}"
    );
}
