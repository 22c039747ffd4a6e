//! The document planner's choices (issue 18): on 4,000 orders, each query
//! shape gets the plan it should (both bounds of a range in one scan,
//! compound equality prefix + range, index order with limit pushdown,
//! `_id` ranges, null on an index, `$elemMatch` on a multikey index,
//! hints, queries inside a write transaction) and examines exactly the
//! index keys and documents that plan needs; every result equals the
//! naive evaluator's.

use cairndb::document::filter::Filter;
use cairndb::document::query::{Explain, FindOptions};
use cairndb::document::{Collection, Document, DocumentError, IndexOptions, SortSpec, Value};
use cairndb::Database;
use serde_json::{json, Value as Json};

const N: i64 = 4000;
const STATUSES: [&str; 4] = ["paid", "shipped", "new", "cancelled"];

fn doc(j: Json) -> Document {
    match Value::from_json(j).unwrap() {
        Value::Object(d) => d,
        _ => unreachable!(),
    }
}

/// Order `i`: `total` takes each value of 0..2000 twice, `status` cycles
/// through four, `created` is `i`, the city is missing for one order in
/// 100, and two items name skus `S{i % 100}` (quantity `i % 5 + 1`) and
/// `S{(i + 1) % 100}` (quantity 1).
fn order(i: i64) -> Document {
    let mut address = json!({"street": "main"});
    if i % 100 != 0 {
        address["city"] = json!(format!("city-{}", i % 50));
    }
    doc(json!({
        "_id": i,
        "total": (i * 7919) % 2000,
        "status": STATUSES[(i % 4) as usize],
        "created": i,
        "customer": {"name": format!("c{}", i % 300), "address": address},
        "items": [
            {"sku": format!("S{}", i % 100), "qty": i % 5 + 1},
            {"sku": format!("S{}", (i + 1) % 100), "qty": 1},
        ],
    }))
}

struct Orders {
    _dir: tempfile::TempDir,
    db: Database,
    docs: Vec<Document>,
}

impl Orders {
    fn new() -> Orders {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::create(dir.path().join("o.cairn")).unwrap();
        let docs: Vec<Document> = (0..N).map(order).collect();
        {
            let c = crate::common::unsynced(&db, "orders");
            for fields in [
                vec![("total", 1i8)],
                vec![("status", 1), ("created", -1)],
                vec![("customer.address.city", 1)],
                vec![("items.sku", 1)],
            ] {
                c.create_index(&fields, IndexOptions::default()).unwrap();
            }
            c.create_index(
                &[("coupon", 1)],
                IndexOptions {
                    sparse: true,
                    ..Default::default()
                },
            )
            .unwrap();
            c.insert_many(&docs).unwrap();
        }
        Orders {
            _dir: dir,
            db,
            docs,
        }
    }

    fn c(&self) -> Collection<'_, Document> {
        crate::common::unsynced(&self.db, "orders")
    }

    /// The `_id`s the naive evaluator finds, sorted and windowed as asked.
    fn naive(&self, q: &Json, sort: Option<Json>, skip: usize, limit: Option<usize>) -> Vec<i64> {
        let f = Filter::parse(q.clone()).unwrap();
        let mut m: Vec<&Document> = self
            .docs
            .iter()
            .filter(|d| f.matches_document(d).unwrap())
            .collect();
        if let Some(s) = sort {
            let spec = SortSpec::parse(s).unwrap();
            m.sort_by(|a, b| {
                spec.compare(&Value::Object((*a).clone()), &Value::Object((*b).clone()))
            });
        }
        m.iter()
            .skip(skip)
            .take(limit.unwrap_or(usize::MAX))
            .map(|d| d.get("_id").and_then(Value::as_i64).unwrap())
            .collect()
    }

    fn found(&self, q: &Json, opts: FindOptions) -> Vec<i64> {
        self.c()
            .find_with(q.clone(), opts)
            .unwrap()
            .map(|d| d.unwrap().get("_id").and_then(Value::as_i64).unwrap())
            .collect()
    }

    fn explain(&self, q: &Json, opts: FindOptions) -> Explain {
        self.c().explain(q.clone(), opts).unwrap()
    }
}

/// Whether a plan containing `needle` was among the candidates.
fn considered(e: &Explain, needle: &str) -> bool {
    e.candidates
        .iter()
        .any(|c| c.plan.to_string().contains(needle))
}

fn counts(e: &Explain) -> (u64, u64, u64) {
    (e.keys_examined, e.docs_examined, e.returned)
}

#[test]
fn both_bounds_of_a_range_in_one_scan() {
    let o = Orders::new();
    let q = json!({"total": {"$gt": 1000, "$lte": 1010}});
    let e = o.explain(&q, FindOptions::new());
    assert_eq!(
        e.plan.to_string(),
        "index scan total_1 total > 1000 and <= 1010"
    );
    // 10 values, each twice: 20 keys, 20 documents, 20 results.
    assert_eq!(counts(&e), (20, 20, 20), "{e:?}");
    let mut got = o.found(&q, FindOptions::new());
    got.sort();
    assert_eq!(got, o.naive(&q, None, 0, None));
}

#[test]
fn compound_equality_prefix_then_range() {
    let o = Orders::new();
    let q = json!({"status": "shipped", "created": {"$gte": 3600}});
    let e = o.explain(&q, FindOptions::new());
    assert_eq!(
        e.plan.to_string(),
        "index scan status_1_created_-1 status = \"shipped\", created >= 3600"
    );
    assert_eq!(counts(&e), (100, 100, 100), "{e:?}");
    // Range on both: the compound bounds constrain both fields.
    let q = json!({"status": "new", "created": {"$gt": 100, "$lt": 200}});
    let e = o.explain(&q, FindOptions::new());
    assert_eq!(
        e.plan.to_string(),
        "index scan status_1_created_-1 status = \"new\", created > 100 and < 200"
    );
    assert_eq!(counts(&e), (25, 25, 25), "{e:?}");
}

#[test]
fn index_order_gives_the_sort_and_the_limit_stops_the_scan() {
    let o = Orders::new();
    let q = json!({"status": "paid"});
    let opts = || {
        FindOptions::new()
            .sort(json!({"created": -1}))
            .unwrap()
            .limit(10)
    };
    let e = o.explain(&q, opts());
    assert!(!e.sorted_in_memory, "{e:?}");
    assert_eq!(
        e.plan.to_string(),
        "index scan status_1_created_-1 status = \"paid\" in index order"
    );
    assert_eq!(counts(&e), (10, 10, 10), "{e:?}");
    assert_eq!(
        o.found(&q, opts()),
        o.naive(&q, Some(json!({"created": -1})), 0, Some(10))
    );
    // The whole compound order, forward and backward (mixed directions).
    for (spec, reversed) in [
        (json!({"status": 1, "created": -1}), false),
        (json!({"status": -1, "created": 1}), true),
    ] {
        let opts = FindOptions::new()
            .sort(spec.clone())
            .unwrap()
            .skip(2)
            .limit(5);
        let e = o.explain(&json!({}), opts.clone());
        assert!(!e.sorted_in_memory, "{spec}: {e:?}");
        assert_eq!(e.plan.to_string().ends_with("reversed"), reversed, "{e:?}");
        assert_eq!(counts(&e), (7, 7, 5), "{spec}: {e:?}");
        assert_eq!(
            o.found(&json!({}), opts),
            o.naive(&json!({}), Some(spec), 2, Some(5))
        );
    }
}

#[test]
fn a_sort_no_index_gives_keeps_only_the_top_k() {
    let o = Orders::new();
    // No index orders `customer.name`: every match is read, the first
    // skip + limit kept.
    let q = json!({"total": {"$gte": 1900}});
    let spec = json!({"customer.name": -1, "_id": 1});
    let opts = FindOptions::new()
        .sort(spec.clone())
        .unwrap()
        .skip(3)
        .limit(7);
    let e = o.explain(&q, opts.clone());
    assert!(e.sorted_in_memory, "{e:?}");
    assert_eq!(counts(&e), (200, 200, 7), "{e:?}");
    assert_eq!(o.found(&q, opts), o.naive(&q, Some(spec), 3, Some(7)));
}

#[test]
fn id_ranges_read_the_primary_tree() {
    let o = Orders::new();
    let q = json!({"_id": {"$gte": 1000, "$lt": 1100}});
    let e = o.explain(&q, FindOptions::new());
    assert_eq!(e.plan.to_string(), "_id range >= 1000 and < 1100");
    assert_eq!(counts(&e), (0, 100, 100), "{e:?}");
    let opts = FindOptions::new()
        .sort(json!({"_id": -1}))
        .unwrap()
        .limit(4);
    let e = o.explain(&q, opts.clone());
    assert_eq!(e.plan.to_string(), "_id range >= 1000 and < 1100 reversed");
    assert_eq!(counts(&e), (0, 4, 4), "{e:?}");
    assert_eq!(o.found(&q, opts), [1099, 1098, 1097, 1096]);
}

/// `{f: null}` matches a missing field too (MongoDB manual, "Query for
/// Null or Missing Fields"): an index holds such documents under null, a
/// sparse index does not hold them and is not used. On a dotted path null
/// gives no bounds: an array element lacking the field matches (`{"a.b":
/// null}` matches `{a: [{b: 1}, {}]}`), and the index has no null entry
/// for it (keys.rs), so the documents are scanned.
#[test]
fn null_and_missing_use_the_index_unless_it_is_sparse() {
    let o = Orders::new();
    // A dotted path: the index has null entries for array elements
    // lacking the field (format 5), so null reads its null keys.
    let q = json!({"customer.address.city": null});
    let e = o.explain(&q, FindOptions::new());
    assert!(
        e.plan
            .to_string()
            .starts_with("index scan customer.address.city_1"),
        "{e:?}"
    );
    assert_eq!(counts(&e), (40, 40, 40), "{e:?}");
    let mut got = o.found(&q, FindOptions::new());
    got.sort();
    assert_eq!(got, o.naive(&q, None, 0, None));
    let q = json!({"customer.address.city": {"$exists": false}});
    assert_eq!(o.explain(&q, FindOptions::new()).returned, 40);
    // Every order lacks `coupon`; its sparse index holds none of them.
    let q = json!({"coupon": null});
    let e = o.explain(&q, FindOptions::new());
    assert_eq!(e.plan.to_string(), "full scan", "{e:?}");
    assert_eq!(e.returned, N as u64);
    let q = json!({"coupon": {"$in": [null, 5]}});
    assert_eq!(o.explain(&q, FindOptions::new()).returned, N as u64);
}

#[test]
fn elem_match_uses_a_multikey_index_on_a_subfield() {
    let o = Orders::new();
    let q = json!({"items": {"$elemMatch": {"sku": "S7", "qty": {"$gte": 3}}}});
    let e = o.explain(&q, FindOptions::new());
    assert_eq!(
        e.plan.to_string(),
        "index scan items.sku_1 items.sku = \"S7\""
    );
    // 40 orders have S7 first (quantity 3, a match), 40 second (quantity 1).
    assert_eq!(counts(&e), (80, 80, 40), "{e:?}");
    let mut got = o.found(&q, FindOptions::new());
    got.sort();
    assert_eq!(got, o.naive(&q, None, 0, None));
    // Null inside $elemMatch reads the null keys: an element lacking the
    // field has one (format 5). No order has one here.
    let q = json!({"items": {"$elemMatch": {"sku": null}}});
    let e = o.explain(&q, FindOptions::new());
    assert!(
        e.plan.to_string().starts_with("index scan items.sku_1"),
        "{e:?}"
    );
    assert_eq!(counts(&e), (0, 0, 0), "{e:?}");
}

/// Null conditions on a dotted path through arrays of subdocuments
/// (MongoDB's "Query for Null or Missing Fields": `{"items.sku": null}`
/// matches an array element lacking `sku`) use an index on the path, whose
/// entries hold null for such elements (FORMAT.md, "Null entries for array
/// elements"), and give exactly the naive evaluator's documents, over
/// random documents with missing, null, scalar, nested-array and
/// subdocument values, through inserts, updates and deletes, in a single
/// and a compound index; unique and sparse indexes keep the older entries
/// and scan.
#[test]
fn null_on_dotted_paths_uses_the_index_and_equals_the_naive_result() {
    use cairndb::storage::sim::SplitMix64;
    let seed = 0x5eed_0018;
    let mut rng = SplitMix64(seed);
    let dir = tempfile::tempdir().unwrap();
    let db = Database::create(dir.path().join("n.cairn")).unwrap();
    let c = crate::common::unsynced(&db, "c");
    c.create_index(&[("items.sku", 1)], IndexOptions::default())
        .unwrap();
    c.create_index(&[("a.b.c", 1), ("n", -1)], IndexOptions::default())
        .unwrap();
    let leaf = |rng: &mut SplitMix64| -> Json {
        match rng.below(6) {
            0 => json!(null),
            1 => json!(rng.below(3)),
            2 => json!(["x", null]),
            3 => json!([]),
            4 => json!({"sku": 1}),
            _ => json!("s"),
        }
    };
    let elem = |rng: &mut SplitMix64, key: &str| -> Json {
        match rng.below(6) {
            0 => json!({}),
            1 => json!({ "other": 1 }),
            2 => json!(7),
            3 => json!([{ key: leaf(rng) }]),
            _ => json!({ key: leaf(rng) }),
        }
    };
    let rand_doc = |rng: &mut SplitMix64, id: i64| -> Json {
        let mut d = serde_json::Map::new();
        d.insert("_id".into(), json!(id));
        d.insert("n".into(), json!(rng.below(4)));
        match rng.below(6) {
            0 => {}
            1 => {
                d.insert("items".into(), json!(null));
            }
            2 => {
                d.insert("items".into(), elem(rng, "sku"));
            }
            _ => {
                let k = rng.below(4);
                let v: Vec<Json> = (0..k).map(|_| elem(rng, "sku")).collect();
                d.insert("items".into(), Json::Array(v));
            }
        }
        match rng.below(4) {
            0 => {}
            1 => {
                d.insert("a".into(), json!({"b": elem(rng, "c")}));
            }
            _ => {
                let k = rng.below(3);
                let v: Vec<Json> = (0..k).map(|_| json!({"b": elem(rng, "c")})).collect();
                d.insert("a".into(), Json::Array(v));
            }
        }
        Json::Object(d)
    };
    let queries = [
        json!({"items.sku": null}),
        json!({"items.sku": {"$in": [null, 1]}}),
        json!({"items.sku": {"$in": [null, "x"]}}),
        json!({"items.sku": {"$exists": false}}),
        json!({"items": {"$elemMatch": {"sku": null}}}),
        json!({"items.sku": {"$ne": null}}),
        json!({"items.sku": {"$nin": [null]}}),
        json!({"items.sku": null, "n": {"$gte": 2}}),
        json!({"a.b.c": null}),
        json!({"a.b.c": {"$in": [null, 2]}}),
        json!({"a.b.c": null, "n": 1}),
        json!({"a.b": {"$elemMatch": {"c": null}}}),
    ];
    let mut docs: std::collections::BTreeMap<i64, Json> = Default::default();
    for round in 0..6 {
        for _ in 0..60 {
            let id = rng.below(120) as i64;
            match rng.below(3) {
                0 if docs.contains_key(&id) => {
                    c.delete_id(id).unwrap();
                    docs.remove(&id);
                }
                _ => {
                    let d = rand_doc(&mut rng, id);
                    c.upsert(&doc(d.clone())).unwrap();
                    docs.insert(id, d);
                }
            }
        }
        assert!(c.check_indexes().unwrap().is_empty(), "seed {seed:#x}");
        let all: Vec<Document> = docs.values().map(|d| doc(d.clone())).collect();
        for q in &queries {
            let f = Filter::parse(q.clone()).unwrap();
            let want: Vec<i64> = all
                .iter()
                .filter(|d| f.matches_document(d).unwrap())
                .map(|d| d["_id"].as_i64().unwrap())
                .collect();
            let mut got: Vec<i64> = c
                .find(q.clone())
                .unwrap()
                .map(|d| d.unwrap()["_id"].as_i64().unwrap())
                .collect();
            got.sort();
            assert_eq!(got, want, "seed {seed:#x}, round {round}: {q}");
            // Planned afresh, the index is a candidate (the planner may
            // still prefer the collection scan when most documents match).
            c.clear_plan_cache().unwrap();
            let e = c.explain(q.clone(), FindOptions::new()).unwrap();
            let negated = q.to_string().contains("$ne") || q.to_string().contains("$nin");
            assert_eq!(
                considered(&e, "index scan"),
                !negated,
                "seed {seed:#x}: {q}: {e:?}"
            );
        }
    }
    // Unique and sparse indexes keep the older entries: no null bounds on
    // a dotted path (a scan), same results.
    let u = crate::common::unsynced(&db, "u");
    u.create_index(
        &[("items.sku", 1)],
        IndexOptions {
            unique: true,
            ..Default::default()
        },
    )
    .unwrap();
    u.insert(&doc(json!({"_id": 1, "items": [{"sku": 1}, {}]})))
        .unwrap();
    u.insert(&doc(json!({"_id": 2, "items": [{"sku": 2}, {}]})))
        .unwrap();
    assert!(!u.list_indexes().unwrap()[0].null_elements);
    let q = json!({"items.sku": null});
    assert_eq!(
        u.explain(q.clone(), FindOptions::new())
            .unwrap()
            .plan
            .to_string(),
        "full scan"
    );
    assert_eq!(u.count(q).unwrap(), 2);
    assert!(c.list_indexes().unwrap().iter().all(|i| i.null_elements));
}

#[test]
fn hints_choose_the_index_and_never_change_results() {
    let o = Orders::new();
    let q = json!({"status": "paid", "total": {"$lt": 10}});
    let want = o.naive(&q, None, 0, None);
    let e = o.explain(&q, FindOptions::new());
    assert_eq!(e.plan.to_string(), "index scan total_1 total < 10");
    // By name, by key pattern; the whole index when nothing bounds it.
    for (hint, plan, keys) in [
        (
            json!("status_1_created_-1"),
            "index scan status_1_created_-1 status = \"paid\"",
            1000,
        ),
        (json!({"total": 1}), "index scan total_1 total < 10", 20),
        (
            json!("customer.address.city_1"),
            "index scan customer.address.city_1 (all)",
            N as u64,
        ),
    ] {
        let opts = FindOptions::new().hint(hint.clone()).unwrap();
        let e = o.explain(&q, opts.clone());
        assert_eq!(e.plan.to_string(), plan, "{hint}");
        assert_eq!(e.candidates.len(), 1, "{hint}: {e:?}");
        assert_eq!(e.keys_examined, keys, "{hint}: {e:?}");
        let mut got = o.found(&q, opts);
        got.sort();
        assert_eq!(got, want, "{hint}");
    }
    let e = o.explain(&q, FindOptions::new().hint(json!("_id_")).unwrap());
    assert_eq!(e.plan.to_string(), "_id range (all)");
    assert_eq!(counts(&e), (0, N as u64, want.len() as u64));
    let e = o.explain(&q, FindOptions::new().hint(json!({"$natural": 1})).unwrap());
    assert_eq!(e.plan.to_string(), "full scan");
    // A hint naming no index is a typed error naming it and the collection.
    for bad in [json!("nope_1"), json!({"total": -1})] {
        let err = o
            .c()
            .find_with(q.clone(), FindOptions::new().hint(bad.clone()).unwrap())
            .unwrap_err();
        match err {
            DocumentError::IndexError {
                collection, index, ..
            } => {
                assert_eq!(collection, "orders");
                assert!(bad.to_string().contains(&index) || index.contains("total"));
            }
            e => panic!("{bad}: {e:?}"),
        }
    }
    // A sparse index cannot answer a filter that does not bound it.
    assert!(matches!(
        o.c().find_with(
            json!({"status": "new"}),
            FindOptions::new().hint(json!("coupon_1")).unwrap()
        ),
        Err(DocumentError::IndexError { .. })
    ));
    // Malformed hints.
    for bad in [json!(3), json!({}), json!({"a": 2}), json!({"$x": 1})] {
        assert!(matches!(
            FindOptions::new().hint(bad),
            Err(DocumentError::InvalidQuery { .. })
        ));
    }
}

#[test]
fn queries_in_a_write_transaction_use_the_planner_and_see_its_writes() {
    let o = Orders::new();
    let txn = o.db.begin_write().unwrap();
    let c = txn.collection::<Document>("orders");
    c.insert(&doc(
        json!({"_id": N, "total": 1005, "status": "new", "created": N}),
    ))
    .unwrap();
    let q = json!({"total": {"$gt": 1000, "$lte": 1010}});
    let e = c.explain(q.clone(), FindOptions::new()).unwrap();
    assert_eq!(
        e.plan.to_string(),
        "index scan total_1 total > 1000 and <= 1010"
    );
    assert_eq!(counts(&e), (21, 21, 21), "{e:?}");
    let got = c.find(q.clone()).unwrap();
    assert!(got
        .iter()
        .any(|d| d.get("_id").and_then(Value::as_i64) == Some(N)));
    // Index order with a limit, and a hint, inside the transaction.
    let opts = FindOptions::new()
        .sort(json!({"created": -1}))
        .unwrap()
        .limit(3);
    let e = c.explain(json!({"status": "new"}), opts.clone()).unwrap();
    assert!(!e.sorted_in_memory, "{e:?}");
    assert_eq!(counts(&e), (3, 3, 3), "{e:?}");
    let top: Vec<i64> = c
        .find_with(json!({"status": "new"}), opts)
        .unwrap()
        .iter()
        .map(|d| d.get("_id").and_then(Value::as_i64).unwrap())
        .collect();
    assert_eq!(top, [N, 3998, 3994]);
    assert!(matches!(
        c.find_with(json!({}), FindOptions::new().hint(json!("nope")).unwrap()),
        Err(DocumentError::IndexError { .. })
    ));
    txn.abort();
}

/// Dates on an index: a range of dates is one index scan reading exactly
/// the keys and documents in range (dates are their own type bracket, so a
/// range never reads the numbers, strings or booleans beside them), a sort
/// by date comes from the index, and `$type: "date"` and equality with a
/// number see no date.
#[test]
fn date_ranges_scan_the_index() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::create(dir.path().join("d.cairn")).unwrap();
    let c = crate::common::unsynced(&db, "ev");
    c.create_index(&[("at", 1)], IndexOptions::default())
        .unwrap();
    let day = 86_400_000i64;
    let base = 1_704_067_200_000i64; // 2024-01-01T00:00:00Z
    for i in 0..200i64 {
        c.insert(&doc(
            json!({"_id": i, "at": Value::Date(base + i * day).to_json()}),
        ))
        .unwrap();
    }
    // Beside them: numbers equal to dates' milliseconds, strings, booleans.
    for (i, v) in [json!(base + 5 * day), json!("2024-01-06"), json!(true)]
        .into_iter()
        .enumerate()
    {
        c.insert(&doc(json!({"_id": 1000 + i as i64, "at": v})))
            .unwrap();
    }
    let q = json!({"at": {"$gte": {"$date": "2024-01-11T00:00:00Z"},
                          "$lt": {"$date": "2024-01-21T00:00:00Z"}}});
    let e = c.explain(q.clone(), FindOptions::new()).unwrap();
    assert!(e.plan.to_string().starts_with("index scan at_1 at >= {\"$date\":\"2024-01-11T00:00:00.000Z\"} and < {\"$date\":\"2024-01-21T00:00:00.000Z\"}"), "{}", e.plan);
    assert_eq!(
        (e.keys_examined, e.docs_examined, e.returned),
        (10, 10, 10),
        "{e:?}"
    );
    let ids: Vec<i64> = c
        .find(q)
        .unwrap()
        .map(|d| d.unwrap()["_id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, (10..20).collect::<Vec<_>>());
    let e = c
        .explain(
            json!({"at": {"$type": "date"}}),
            FindOptions::new().sort(json!({"at": -1})).unwrap().limit(3),
        )
        .unwrap();
    assert!(!e.sorted_in_memory, "{}", e.plan);
    assert_eq!(c.count(json!({"at": {"$type": "date"}})).unwrap(), 200);
    assert_eq!(c.count(json!({"at": base + 5 * day})).unwrap(), 1);
    assert_eq!(c.count(json!({"at": {"$gt": 0}})).unwrap(), 1);
    assert!(c.check_indexes().unwrap().is_empty());
}

/// The encoded form of each result (tells `5` from `5.0`, `[x]` from `x`,
/// a missing field from null), in order.
fn exact(docs: impl IntoIterator<Item = Document>) -> Vec<String> {
    docs.into_iter().map(|d| format!("{d:?}")).collect()
}

/// Covered queries (MongoDB's manual, "Covered Queries"): a filter, sort
/// and inclusion projection naming only the paths of one single-key
/// index (and `_id`, which every entry holds) are answered from the
/// index's entries alone (`docs_examined` 0, plan `covered …`), with the
/// same documents as a query that reads them; a multikey index, a field
/// outside the index, or no projection reads the documents.
#[test]
fn covered_queries_read_no_document() {
    let o = Orders::new();
    let c = o.c();
    for (q, proj, sort, index) in [
        (
            json!({"total": {"$gte": 100, "$lt": 110}}),
            json!({"total": 1, "_id": 0}),
            None,
            "total_1",
        ),
        (
            json!({"total": {"$in": [5, 7, 1999]}}),
            json!({"total": 1}),
            None,
            "total_1",
        ),
        (
            json!({"status": "paid", "created": {"$gte": 3900}}),
            json!({"created": 1, "status": 1}),
            Some(json!({"created": -1})),
            "status_1_created_-1",
        ),
        (
            json!({"customer.address.city": {"$in": ["city-3", null]}}),
            json!({"customer.address.city": 1}),
            Some(json!({"_id": 1})),
            "customer.address.city_1",
        ),
    ] {
        let opts = || {
            let o = FindOptions::new().projection(proj.clone()).unwrap();
            match &sort {
                Some(s) => o.sort(s.clone()).unwrap(),
                None => o,
            }
        };
        let e = o.explain(&q, opts());
        assert!(e.covered(), "{q}: {e:?}");
        assert!(
            e.plan.to_string().starts_with("covered index scan"),
            "{q}: {e:?}"
        );
        assert!(e.plan.to_string().contains(index), "{q}: {e:?}");
        assert_eq!(e.docs_examined, 0, "{q}: {e:?}");
        assert_eq!(e.to_json()["covered"], json!(true));
        let want = o.naive(&q, sort.clone(), 0, None);
        assert_eq!(e.returned, want.len() as u64, "{q}");
        assert!(e.returned > 0, "{q}");
        // The same query reading its documents (a collection scan).
        let fetched: Vec<Document> = c
            .find_with(q.clone(), opts().hint(json!({"$natural": 1})).unwrap())
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let covered: Vec<Document> = c
            .find_with(q.clone(), opts())
            .unwrap()
            .map(Result::unwrap)
            .collect();
        if sort.is_some() {
            assert_eq!(exact(covered), exact(fetched), "{q}");
        } else {
            let (mut a, mut b) = (exact(covered), exact(fetched));
            a.sort();
            b.sort();
            assert_eq!(a, b, "{q}");
        }
        // A count of the same filter reads no document either.
        let e = c.explain_count(q.clone()).unwrap();
        assert!(e.covered() && e.docs_examined == 0, "{q}: {e:?}");
        assert_eq!(c.count(q.clone()).unwrap(), want.len() as u64, "{q}");
    }
    // The city is missing in one order of 100: the covered value keeps
    // the shape the projection gives ({customer: {address: {}}}).
    let got: Vec<Document> = c
        .find_with(
            json!({"customer.address.city": null}),
            FindOptions::new()
                .projection(json!({"customer.address.city": 1}))
                .unwrap()
                .limit(1),
        )
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        got,
        vec![doc(json!({"_id": 0, "customer": {"address": {}}}))]
    );
    // Not covered: a multikey index, a field the index lacks, whole
    // documents, an exclusion.
    for (q, proj) in [
        (
            json!({"items.sku": "S5"}),
            Some(json!({"items.sku": 1, "_id": 0})),
        ),
        (
            json!({"total": {"$lt": 3}}),
            Some(json!({"total": 1, "status": 1})),
        ),
        (json!({"total": {"$lt": 3}}), None),
        (json!({"total": {"$lt": 3}}), Some(json!({"customer": 0}))),
        (
            json!({"total": {"$lt": 3}, "status": "new"}),
            Some(json!({"total": 1})),
        ),
    ] {
        let opts = match &proj {
            Some(p) => FindOptions::new().projection(p.clone()).unwrap(),
            None => FindOptions::new(),
        };
        let e = o.explain(&q, opts);
        assert!(!e.covered(), "{q} {proj:?}: {e:?}");
        assert!(e.docs_examined > 0, "{q} {proj:?}: {e:?}");
    }
    let e = c.explain_count(json!({"items.sku": "S5"})).unwrap();
    assert!(!e.covered() && e.docs_examined > 0, "{e:?}");
    assert!(c.check_indexes().unwrap().is_empty());
    // Inside a write transaction: its own writes' entries hold their
    // covered values (a float total stays a float).
    let txn = o.db.begin_write().unwrap();
    let t = txn.collection::<Document>("orders");
    t.insert(&doc(
        json!({"_id": N, "total": 1005.0, "status": "new", "created": N}),
    ))
    .unwrap();
    t.update_one(
        json!({"_id": 7}),
        json!({"$set": {"total": 1006.0}}),
        Default::default(),
    )
    .unwrap();
    let q = json!({"total": {"$gt": 1004, "$lte": 1006}});
    let opts = FindOptions::new()
        .projection(json!({"total": 1}))
        .unwrap()
        .sort(json!({"_id": 1}))
        .unwrap();
    let e = t.explain(q.clone(), opts.clone()).unwrap();
    assert!(e.covered() && e.docs_examined == 0, "{e:?}");
    let got = t.find_with(q.clone(), opts.clone()).unwrap();
    let want = t
        .find_with(q, opts.hint(json!({"$natural": 1})).unwrap())
        .unwrap();
    assert_eq!(exact(got.clone()), exact(want));
    assert!(
        got.contains(&doc(json!({"_id": N, "total": 1005.0}))),
        "{got:?}"
    );
    assert!(
        got.contains(&doc(json!({"_id": 7, "total": 1006.0}))),
        "{got:?}"
    );
}

/// Covered results equal fetched ones exactly, over random documents whose
/// indexed fields are integers, equal floats, strings, null, missing,
/// one-element and empty arrays and nested objects, through inserts,
/// updates that keep an entry's key but change its value (`5` → `5.0`,
/// missing → null, `[x]` → `x`) and deletes: each query runs covered and
/// with `{"$natural": 1}` (reading every document), and `check_indexes`
/// compares every entry's value with its document's.
#[test]
fn covered_results_equal_fetched_results() {
    use cairndb::storage::sim::SplitMix64;
    let seed = crate::common::seed("covered-diff");
    let mut rng = SplitMix64(seed);
    let scalar = |rng: &mut SplitMix64| -> Json {
        match rng.below(10) {
            0 => Json::Null,
            1 | 2 => json!(rng.below(6) as i64),
            3 | 4 => json!(rng.below(6) as f64),
            5 => json!(rng.below(6) as f64 + 0.5),
            6 | 7 => json!(["x", "y", "z"][rng.below(3) as usize]),
            _ => json!(rng.below(2) == 0),
        }
    };
    // `twice`: an array of a value twice (one entry; at most one path of
    // a compound index may hold an array of several elements).
    let value = |rng: &mut SplitMix64, twice: bool| -> Option<Json> {
        Some(match rng.below(12) {
            0 => return None,
            1 => json!([scalar(rng)]),
            2 => json!([]),
            3 if twice => {
                let v = scalar(rng);
                json!([v.clone(), v])
            }
            4 => json!({"p": scalar(rng), "q": 1}),
            _ => scalar(rng),
        })
    };
    let (mut covered_runs, mut covered_unread, mut compared) = (0u64, 0u64, 0u64);
    for case in 0..crate::common::iters(4) {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::create(dir.path().join("c.cairn")).unwrap();
        let c = crate::common::unsynced(&db, "c");
        c.create_index(&[("a", 1)], IndexOptions::default())
            .unwrap();
        c.create_index(&[("b.c", 1), ("a", -1)], IndexOptions::default())
            .unwrap();
        let mut ids: Vec<i64> = Vec::new();
        let mut next = 0i64;
        let make = |rng: &mut SplitMix64, id: i64| {
            let mut m = serde_json::Map::new();
            m.insert("_id".into(), json!(id));
            if let Some(v) = value(rng, true) {
                m.insert("a".into(), v);
            }
            match rng.below(5) {
                0 => {}
                1 => {
                    m.insert("b".into(), json!(scalar(rng)));
                }
                2 => {
                    m.insert("b".into(), json!({"d": 1}));
                }
                _ => {
                    let mut b = serde_json::Map::new();
                    if rng.below(2) == 0 {
                        b.insert("e".into(), json!(1));
                    }
                    if let Some(v) = value(rng, false) {
                        b.insert("c".into(), v);
                    }
                    m.insert("b".into(), Json::Object(b));
                }
            }
            m.insert("other".into(), json!(rng.below(100)));
            doc(Json::Object(m))
        };
        for round in 0..6 {
            for _ in 0..60 {
                match rng.below(4) {
                    0 if !ids.is_empty() => {
                        let id = ids[rng.below(ids.len() as u64) as usize];
                        c.replace(&make(&mut rng, id)).unwrap();
                    }
                    1 if !ids.is_empty() => {
                        let id = ids[rng.below(ids.len() as u64) as usize];
                        let v = scalar(&mut rng);
                        c.update_one(
                            json!({"_id": id}),
                            json!({"$set": {"a": v}}),
                            Default::default(),
                        )
                        .unwrap();
                    }
                    2 if ids.len() > 20 => {
                        let i = rng.below(ids.len() as u64) as usize;
                        c.delete_id(ids.swap_remove(i)).unwrap();
                    }
                    _ => {
                        c.insert(&make(&mut rng, next)).unwrap();
                        ids.push(next);
                        next += 1;
                    }
                }
            }
            let problems = c.check_indexes().unwrap();
            assert!(
                problems.is_empty(),
                "seed {seed} case {case} round {round}: {problems:?}"
            );
            for _ in 0..40 {
                let path = ["a", "b.c"][rng.below(2) as usize];
                let v = scalar(&mut rng);
                let cond = match rng.below(8) {
                    0 => v,
                    1 => json!({"$gt": v}),
                    2 => json!({"$lte": v}),
                    3 => json!({"$in": [v, scalar(&mut rng)]}),
                    4 => json!({"$exists": rng.below(2) == 0}),
                    5 => json!({"$ne": v}),
                    6 => {
                        let t = ["double", "int", "array", "null", "object"][rng.below(5) as usize];
                        json!({"$type": t})
                    }
                    _ => json!({"$gte": 1, "$lt": 4}),
                };
                let mut q = serde_json::Map::new();
                q.insert(path.into(), cond);
                if rng.below(3) == 0 {
                    q.insert("a".into(), json!({"$ne": scalar(&mut rng)}));
                }
                let q = Json::Object(q);
                let proj = [
                    json!({"a": 1}),
                    json!({"a": 1, "_id": 0}),
                    json!({"b.c": 1, "a": 1}),
                    json!({"b": 1}),
                    json!({"b.c.p": 1, "_id": 0}),
                ][rng.below(5) as usize]
                    .clone();
                let sort =
                    [json!({"_id": 1}), json!({"a": 1, "_id": -1})][rng.below(2) as usize].clone();
                let opts = || {
                    FindOptions::new()
                        .projection(proj.clone())
                        .unwrap()
                        .sort(sort.clone())
                        .unwrap()
                };
                let ctx = format!("seed {seed} case {case} round {round}: {q} {proj} {sort}");
                let run = |o: FindOptions| -> Vec<String> {
                    exact(c.find_with(q.clone(), o).unwrap().map(Result::unwrap))
                };
                let fetched = run(opts().hint(json!({"$natural": 1})).unwrap());
                for hint in [None, Some(json!("a_1")), Some(json!("b.c_1_a_-1"))] {
                    let o = match &hint {
                        Some(h) => opts().hint(h.clone()).unwrap(),
                        None => opts(),
                    };
                    let e = c.explain(q.clone(), o.clone()).unwrap();
                    if e.covered() {
                        // A document whose entry's key cannot give its
                        // fields back (an array or object there) is read
                        // (FORMAT.md, "Shape values in index entries").
                        covered_runs += 1;
                        assert!(e.docs_examined <= e.keys_examined, "{ctx}: {e:?}");
                        if e.docs_examined == 0 && e.returned > 0 {
                            covered_unread += 1;
                        }
                    }
                    assert_eq!(run(o), fetched, "{ctx} hint {hint:?}: {e:?}");
                    compared += 1;
                }
                assert_eq!(
                    c.count(q.clone()).unwrap(),
                    fetched.len() as u64,
                    "{ctx}: count"
                );
            }
        }
    }
    crate::common::report(&format!(
        "covered-diff: compared={compared} covered={covered_runs} unread={covered_unread} seed={seed}"
    ));
    assert!(covered_runs > 0, "seed {seed}: no covered run");
    assert!(
        covered_unread > 0,
        "seed {seed}: no covered run read no document"
    );
}

/// `$ne: null` and `$nin` with null scan every key but null's (MongoDB's
/// bounds `[MinKey, null), (null, MaxKey]`) on an index of a top-level
/// path, a sparse one too (a document missing the field does not match),
/// the filter rejecting documents that also hold a null; an empty array
/// matches (MongoDB's manual, "Query for Null or Missing Fields": `{a:
/// {$ne: null}}` selects documents whose `a` exists and is not null, and
/// `[]` holds no null) and is found through its own key, below null's. On
/// a dotted path the planner scans instead: `{a: [1, 2]}` and `{a: []}`
/// reach nothing on `a.b`, so their only entry is null, yet they match.
#[test]
fn not_null_scans_every_key_but_null_on_top_level_paths() {
    let o = Orders::new();
    let every_key = "index scan total_1 total [MinKey, null) ∪ total (null, MaxKey]";
    for q in [
        json!({"total": {"$ne": null}}),
        json!({"total": {"$nin": [null, 5]}}),
    ] {
        // Every order has a total: the index is considered, and a hint
        // reads it, but a collection scan reads less (see
        // `most_documents_in_range_scan_the_collection`).
        let e = o.explain(&q, FindOptions::new());
        assert!(considered(&e, every_key), "{q}: {e:?}");
        let hinted = FindOptions::new().hint(json!("total_1")).unwrap();
        let e = o.explain(&q, hinted.clone());
        assert_eq!(e.plan.to_string(), every_key, "{q}: {e:?}");
        assert_eq!(e.keys_examined, N as u64, "{q}: {e:?}");
        let mut got = o.found(&q, hinted);
        got.sort();
        assert_eq!(got, o.naive(&q, None, 0, None), "{q}");
    }
    for (q, plan, keys) in [
        (json!({"coupon": {"$ne": null}}), "index scan coupon_1 coupon [MinKey, null) ∪ coupon (null, MaxKey]", 0),
        (
            json!({"status": "paid", "created": {"$ne": null}}),
            "index scan status_1_created_-1 status = \"paid\", created [MinKey, null) ∪ status = \"paid\", created (null, MaxKey]",
            N as u64 / 4,
        ),
    ] {
        let e = o.explain(&q, FindOptions::new());
        assert_eq!(e.plan.to_string(), plan, "{q}: {e:?}");
        assert_eq!(e.keys_examined, keys, "{q}: {e:?}");
        let mut got = o.found(&q, FindOptions::new());
        got.sort();
        assert_eq!(got, o.naive(&q, None, 0, None), "{q}");
    }
    // No order has an array on the way to the city: the index answers
    // it (see `not_null_on_dotted_paths_uses_the_index_until_an_array`),
    // but 99 % of the orders have a city, so a collection scan reads less.
    let e = o.explain(
        &json!({"customer.address.city": {"$ne": null}}),
        FindOptions::new(),
    );
    assert_eq!(e.plan.to_string(), "full scan", "{e:?}");
    assert!(
        considered(&e, "customer.address.city (null, MaxKey]"),
        "{e:?}"
    );
    // Covered: the entries' values answer it (no document read).
    let e = o.explain(
        &json!({"total": {"$ne": null}}),
        FindOptions::new().projection(json!({"total": 1})).unwrap(),
    );
    assert!(e.covered() && e.docs_examined == 0, "{e:?}");

    let dir = tempfile::tempdir().unwrap();
    let db = Database::create(dir.path().join("n.cairn")).unwrap();
    let c = crate::common::unsynced(&db, "n");
    c.create_index(&[("a", 1)], IndexOptions::default())
        .unwrap();
    c.create_index(&[("d", -1)], IndexOptions::default())
        .unwrap();
    c.create_index(&[("a.b", 1)], IndexOptions::default())
        .unwrap();
    let vals = [
        json!(null),
        json!([]),
        json!([null]),
        json!([null, 1]),
        json!(1),
        json!([[null]]),
        json!({"b": null}),
        json!([1, 2]),
        json!([{"b": 1}, {}]),
        json!([{"b": 1}]),
        json!("s"),
    ];
    let mut docs = Vec::new();
    for (i, v) in vals.iter().enumerate() {
        docs.push(doc(json!({"_id": i, "a": v, "d": v})));
    }
    docs.push(doc(json!({"_id": 100})));
    c.insert_many(&docs).unwrap();
    let ids = |q: &Json, opts: FindOptions| -> Vec<i64> {
        let mut v: Vec<i64> = c
            .find_with(q.clone(), opts)
            .unwrap()
            .map(|d| d.unwrap().get("_id").and_then(Value::as_i64).unwrap())
            .collect();
        v.sort();
        v
    };
    for q in [
        json!({"a": {"$ne": null}}),
        json!({"d": {"$ne": null}}),
        json!({"a": {"$nin": [null, 1]}}),
        json!({"d": {"$nin": [null, "s"]}}),
        json!({"a.b": {"$ne": null}}),
        json!({"a.b": {"$nin": [null]}}),
    ] {
        let scanned = ids(&q, FindOptions::new().hint(json!({"$natural": 1})).unwrap());
        let e = c.explain(q.clone(), FindOptions::new()).unwrap();
        let dotted = q.as_object().unwrap().contains_key("a.b");
        assert_eq!(considered(&e, "(null, MaxKey]"), !dotted, "{q}: {e:?}");
        assert_eq!(ids(&q, FindOptions::new()), scanned, "{q}: {e:?}");
        if !dotted {
            // [] (id 1) matches and is found; [null] and [null, 1] do not.
            assert!(scanned.contains(&1), "{q}: {scanned:?}");
            assert!(!scanned.contains(&2) && !scanned.contains(&3), "{q}");
        }
    }
    // The naive evaluator agrees with MongoDB's reading of the dotted
    // cases: [1, 2] (id 7) and [] (id 1) reach nothing on a.b and match.
    let dotted = ids(&json!({"a.b": {"$ne": null}}), FindOptions::new());
    assert!(dotted.contains(&7) && dotted.contains(&1), "{dotted:?}");
}

/// `$ne: null`, `$nin: [null]` and `$not: {$eq: null}` on a dotted path
/// read every key but null's (MongoDB's bounds `[MinKey, null), (null,
/// MaxKey]`, which MongoDB uses while the index is not multikey on the
/// path: the manual's `$ne` and "Query for Null or Missing Fields"
/// pages), and `$exists: true` every key of a sparse index, while no
/// document has had an array on the way; once one has (`{profile: [{email:
/// …}]}` or `{profile: [1, 2]}`, which reaches nothing on
/// `profile.email` yet matches `$ne: null`), the collection is scanned.
/// An aborted write leaves the flag as it was; it survives a reopen.
#[test]
fn not_null_on_dotted_paths_uses_the_index_until_an_array() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.cairn");
    let db = Database::create(&path).unwrap();
    let c = crate::common::unsynced(&db, "people");
    // One in ten has an email, one in twenty a phone; the rest have a
    // profile without them, a null email, or no profile at all.
    let person = |i: i64| {
        let mut p = json!({"name": format!("p{i}")});
        if i % 10 == 0 {
            p["email"] = json!(format!("e{i}"));
        } else if i % 10 == 1 {
            p["email"] = json!(null);
        }
        if i % 20 == 0 {
            p["phone"] = json!(i);
        } else if i % 20 == 3 {
            p["phone"] = json!(null);
        }
        if i % 7 == 6 {
            doc(json!({"_id": i, "status": i % 2}))
        } else {
            doc(json!({"_id": i, "status": i % 2, "profile": p}))
        }
    };
    // Half the documents exist when the indexes are built, half after.
    c.insert_many(&(0..1000).map(person).collect::<Vec<_>>())
        .unwrap();
    c.create_index(&[("profile.email", 1)], IndexOptions::default())
        .unwrap();
    c.create_index(
        &[("status", 1), ("profile.email", -1)],
        IndexOptions::default(),
    )
    .unwrap();
    c.create_index(
        &[("profile.phone", 1)],
        IndexOptions {
            sparse: true,
            ..Default::default()
        },
    )
    .unwrap();
    c.insert_many(&(1000..2000).map(person).collect::<Vec<_>>())
        .unwrap();
    let naive = |c: &Collection<'_, Document>, q: &Json| -> Vec<i64> {
        let f = Filter::parse(q.clone()).unwrap();
        let mut v: Vec<i64> = c
            .find_with(
                json!({}),
                FindOptions::new().hint(json!({"$natural": 1})).unwrap(),
            )
            .unwrap()
            .map(|d| d.unwrap())
            .filter(|d| f.matches_document(d).unwrap())
            .map(|d| d.get("_id").and_then(Value::as_i64).unwrap())
            .collect();
        v.sort();
        v
    };
    let found = |c: &Collection<'_, Document>, q: &Json| -> Vec<i64> {
        let mut v: Vec<i64> = c
            .find(q.clone())
            .unwrap()
            .map(|d| d.unwrap().get("_id").and_then(Value::as_i64).unwrap())
            .collect();
        v.sort();
        v
    };
    let has = |m: &[i64]| {
        (0..2000i64)
            .filter(|i| i % 7 != 6 && m.contains(&(i % 20)))
            .count() as u64
    };
    let (emails, phones) = (has(&[0, 10]), has(&[0, 3]));
    let email =
        "index scan profile.email_1 profile.email [MinKey, null) ∪ profile.email (null, MaxKey]";
    let cases = [
        (json!({"profile.email": {"$ne": null}}), email, emails),
        (json!({"profile.email": {"$nin": [null]}}), email, emails),
        (json!({"profile.email": {"$not": {"$eq": null}}}), email, emails),
        (
            json!({"status": 0, "profile.email": {"$ne": null}}),
            "index scan status_1_profile.email_-1 status = 0, profile.email [MinKey, null) ∪ status = 0, profile.email (null, MaxKey]",
            emails,
        ),
        (
            json!({"profile.phone": {"$exists": true}}),
            "index scan profile.phone_1 profile.phone [MinKey, MaxKey]",
            phones,
        ),
    ];
    for (q, plan, keys) in &cases {
        let e = c.explain(q.clone(), FindOptions::new()).unwrap();
        assert_eq!(e.plan.to_string(), *plan, "{q}: {e:?}");
        assert_eq!(e.keys_examined, *keys, "{q}: {e:?}");
        let want = naive(&c, q);
        // Every key read is a match (the null email's documents too have
        // a phone or not: `$exists` counts a null phone).
        assert_eq!(e.docs_examined, *keys, "{q}: {e:?}");
        assert_eq!(want.len() as u64, *keys, "{q}");
        assert_eq!(found(&c, q), want, "{q}");
    }
    // An array on the way inside an aborted transaction: no change.
    {
        let w = db.begin_write().unwrap();
        w.collection::<Document>("people")
            .insert(&doc(json!({"_id": 5000, "profile": [1, 2]})))
            .unwrap();
        w.abort();
    }
    let e = c.explain(cases[0].0.clone(), FindOptions::new()).unwrap();
    assert_eq!(e.plan.to_string(), email, "{e:?}");
    // An update that puts an array on the way: every such plan scans,
    // and `[1, 2]` (which reaches nothing on profile.email) matches.
    c.update_one(
        json!({"_id": 7}),
        json!({"$set": {"profile": [1, 2]}}),
        Default::default(),
    )
    .unwrap();
    c.insert(&doc(json!({"_id": 5001, "profile": [{"phone": 1}, {}]})))
        .unwrap();
    assert!(c.check_indexes().unwrap().is_empty());
    drop(c);
    drop(db);
    let db = Database::open(&path).unwrap();
    let c = crate::common::unsynced(&db, "people");
    let flags: Vec<_> = c
        .list_indexes()
        .unwrap()
        .into_iter()
        .map(|i| (i.name, i.prefix_arrays))
        .collect();
    assert!(
        flags.contains(&("profile.email_1".into(), Some(vec![true])))
            && flags.contains(&("status_1_profile.email_-1".into(), Some(vec![false, true]))),
        "{flags:?}"
    );
    for (q, _, _) in &cases {
        let e = c.explain(q.clone(), FindOptions::new()).unwrap();
        assert_eq!(e.plan.to_string(), "full scan", "{q}: {e:?}");
        assert!(!considered(&e, "MaxKey"), "{q}: {e:?}");
        assert_eq!(found(&c, q), naive(&c, q), "{q}");
    }
    assert!(found(&c, &cases[0].0).contains(&7));
    assert!(found(&c, &cases[4].0).contains(&5001));
    // An index built over a document with an array on the way records it.
    let a = crate::common::unsynced(&db, "built");
    a.insert_many(&[
        doc(json!({"_id": 1, "profile": [1, 2]})),
        doc(json!({"_id": 2, "profile": {"email": "e"}})),
        doc(json!({"_id": 3})),
    ])
    .unwrap();
    let built = a
        .create_index(&[("profile.email", 1)], IndexOptions::default())
        .unwrap();
    assert_eq!(built.prefix_arrays, Some(vec![true]));
    let e = a.explain(cases[0].0.clone(), FindOptions::new()).unwrap();
    assert_eq!(e.plan.to_string(), "full scan", "{e:?}");
    assert_eq!(found(&a, &cases[0].0), vec![1, 2]);
}

/// Every plan considered afresh for `q` (the cache emptied first).
fn fresh_explain(o: &Orders, q: &Json, opts: FindOptions) -> Explain {
    o.c().clear_plan_cache().unwrap();
    o.explain(q, opts)
}

#[test]
fn most_documents_in_range_scan_the_collection() {
    // An index plan fetches the document of each entry it reads: past
    // about 30 % of the collection a collection scan reads less (measured
    // with `planner_queries -- 200000 crossover`). Explain shows both
    // candidates with their estimates.
    let o = Orders::new();
    for q in [
        json!({"total": {"$ne": null}}),
        json!({"total": {"$gte": 100}}),
        json!({"status": {"$in": ["paid", "new"]}}),
    ] {
        let e = fresh_explain(&o, &q, FindOptions::new());
        assert_eq!(e.plan.to_string(), "full scan", "{q}: {e:?}");
        let index = e
            .candidates
            .iter()
            .find(|c| c.plan.to_string().starts_with("index scan"))
            .unwrap_or_else(|| panic!("{q}: {e:?}"));
        assert!(index.estimate.unwrap() >= N as u64 * 3 / 10, "{q}: {e:?}");
        let full = e.candidates.iter().find(|c| c.chosen).unwrap();
        assert_eq!(full.estimate, Some(N as u64), "{q}: {e:?}");
        assert_eq!(
            counts(&e),
            (0, N as u64, o.naive(&q, None, 0, None).len() as u64)
        );
        let mut got = o.found(&q, FindOptions::new());
        got.sort();
        assert_eq!(got, o.naive(&q, None, 0, None), "{q}");
    }
    // Few documents in range: the index.
    for q in [
        json!({"total": {"$lt": 100}}),
        json!({"status": "paid"}),
        json!({"total": {"$in": [1, 2, 3]}}),
    ] {
        let e = fresh_explain(&o, &q, FindOptions::new());
        assert!(e.plan.to_string().starts_with("index scan"), "{q}: {e:?}");
        let mut got = o.found(&q, FindOptions::new());
        got.sort();
        assert_eq!(got, o.naive(&q, None, 0, None), "{q}");
    }
    // A hint still forces the index; a covered query reads no document,
    // so it keeps the index; a limited scan in the sort's order stops
    // early, so it keeps it too.
    let q = json!({"total": {"$gte": 100}});
    let e = fresh_explain(
        &o,
        &q,
        FindOptions::new().hint(json!({"total": 1})).unwrap(),
    );
    assert!(
        e.plan.to_string().starts_with("index scan total_1"),
        "{e:?}"
    );
    let covered = FindOptions::new()
        .projection(json!({"total": 1, "_id": 0}))
        .unwrap();
    let e = fresh_explain(&o, &q, covered);
    assert!(e.covered() && e.docs_examined == 0, "{e:?}");
    let top = FindOptions::new()
        .sort(json!({"total": 1}))
        .unwrap()
        .limit(5);
    let e = fresh_explain(&o, &q, top);
    assert!(e.plan.to_string().contains("in index order"), "{e:?}");
}

#[test]
fn explain_says_when_a_plan_came_from_the_cache() {
    let o = Orders::new();
    let c = o.c();
    c.clear_plan_cache().unwrap();
    let q = |lo: i64| json!({"total": {"$gt": lo, "$lte": lo + 10}, "status": "paid"});
    // First of its shape: a trial over every candidate, cached.
    let first = o.explain(&q(1000), FindOptions::new());
    assert!(!first.from_plan_cache, "{first:?}");
    assert!(first.candidates.len() > 2, "{first:?}");
    assert!(
        first.candidates.iter().all(|c| c.estimate.is_some()),
        "{first:?}"
    );
    assert_eq!(c.plan_cache_len().unwrap(), 1);
    // Same shape, other values: the cached choice, bound to the values
    // (its bounds are this query's), without a trial.
    let second = o.explain(&q(10), FindOptions::new());
    assert!(second.from_plan_cache, "{second:?}");
    assert_eq!(second.plan_cache_key, first.plan_cache_key);
    assert_eq!(second.candidates.len(), 1, "{second:?}");
    assert_eq!(second.candidates[0].estimate, None);
    assert!(second.plan.to_string().contains("> 10"), "{second:?}");
    assert_eq!(
        o.found(&q(10), FindOptions::new()).len() as u64,
        second.returned
    );
    let mut got = o.found(&q(10), FindOptions::new());
    got.sort();
    assert_eq!(got, o.naive(&q(10), None, 0, None));
    // A choice read in index order (here reversed) binds to the same
    // order for other values.
    let top = || {
        FindOptions::new()
            .sort(json!({"created": 1}))
            .unwrap()
            .limit(5)
    };
    let s = |st: &str| json!({"status": st});
    assert!(!o.explain(&s("paid"), top()).from_plan_cache);
    let e = o.explain(&s("new"), top());
    assert!(e.from_plan_cache && !e.sorted_in_memory, "{e:?}");
    let want = o.naive(&s("new"), Some(json!({"created": 1})), 0, Some(5));
    assert_eq!(o.found(&s("new"), top()), want);
    // Another shape (another operator, a sort, a limit, a projection, a
    // hint): its own key, planned afresh.
    let mut keys = vec![first.plan_cache_key.clone()];
    for (q, opts) in [
        (
            json!({"total": {"$gte": 3, "$lte": 13}, "status": "paid"}),
            FindOptions::new(),
        ),
        (
            q(5),
            FindOptions::new().sort(json!({"created": -1})).unwrap(),
        ),
        (q(5), FindOptions::new().limit(3)),
        (
            q(5),
            FindOptions::new().projection(json!({"total": 1})).unwrap(),
        ),
        (q(5), FindOptions::new().hint(json!("total_1")).unwrap()),
        (
            json!({"total": {"$gt": "a", "$lte": "b"}, "status": "paid"}),
            FindOptions::new(),
        ),
    ] {
        let e = o.explain(&q, opts);
        assert!(!e.from_plan_cache, "{q}: {e:?}");
        assert!(!keys.contains(&e.plan_cache_key), "{q}: {e:?}");
        keys.push(e.plan_cache_key);
    }
    assert_eq!(c.plan_cache_len().unwrap(), 8);
    assert!(o.explain(&q(7), FindOptions::new()).to_json()["from_plan_cache"] == json!(true));
}

#[test]
fn creating_or_dropping_an_index_changes_the_cached_plan() {
    let o = Orders::new();
    let c = o.c();
    let q = |n: i64| json!({"customer.name": format!("c{n}")});
    let plan = |n: i64| {
        let e = o.explain(&q(n), FindOptions::new());
        (e.plan.to_string(), e.from_plan_cache)
    };
    assert_eq!(plan(1), ("full scan".to_string(), false));
    assert_eq!(plan(2), ("full scan".to_string(), true));
    c.create_index(&[("customer.name", 1)], IndexOptions::default())
        .unwrap();
    // The metadata changed: the cache starts empty, the new index wins.
    assert_eq!(
        plan(3),
        (
            "index scan customer.name_1 customer.name = \"c3\"".to_string(),
            false
        )
    );
    assert_eq!(
        plan(4),
        (
            "index scan customer.name_1 customer.name = \"c4\"".to_string(),
            true
        )
    );
    c.drop_index("customer.name_1").unwrap();
    assert_eq!(plan(5), ("full scan".to_string(), false));
    let mut got = o.found(&q(5), FindOptions::new());
    got.sort();
    assert_eq!(got, o.naive(&q(5), None, 0, None));
}

mod plan_cache_property {
    //! Results with the plan cache equal results planned afresh (the
    //! cache emptied), over random filters with `$or`, `$in`, ranges,
    //! null, `$ne`, sorts, limits and covered projections: the cached
    //! choice of one query bound to another's values never changes what
    //! a query finds.
    use super::*;
    use proptest::prelude::*;
    use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};

    /// One condition on an indexed (or not) path.
    fn leaf() -> impl Strategy<Value = Json> {
        let field = prop_oneof![
            2 => Just("total"),
            3 => Just("status"),
            1 => Just("created"),
            1 => Just("customer.address.city"),
            1 => Just("coupon"),
            1 => Just("items.sku"),
            1 => Just("_id"),
        ];
        let value =
            |f: &'static str| -> BoxedStrategy<Json> {
                match f {
                "status" => prop_oneof![
                    (0..4usize).prop_map(|i| json!(STATUSES[i])),
                    Just(json!(null))
                ]
                .boxed(),
                "customer.address.city" => prop_oneof![
                    (0..60i64).prop_map(|i| json!(format!("city-{i}"))),
                    Just(json!(null))
                ]
                .boxed(),
                "items.sku" => (0..110i64).prop_map(|i| json!(format!("S{i}"))).boxed(),
                _ => prop_oneof![4 => (-10..4100i64).prop_map(|i| json!(i)), 1 => Just(json!(null))]
                    .boxed(),
            }
            };
        field.prop_flat_map(move |f| {
            let v = value(f);
            let op = prop_oneof![
                4 => v.clone().prop_map(|v| json!(v)),
                2 => proptest::collection::vec(v.clone(), 1..4).prop_map(|vs| json!({"$in": vs})),
                2 => (v.clone(), v.clone()).prop_map(|(a, b)| json!({"$gte": a, "$lt": b})),
                1 => v.clone().prop_map(|v| json!({"$gt": v})),
                1 => v.clone().prop_map(|v| json!({"$lte": v})),
                1 => Just(json!({"$ne": null})),
                1 => v.prop_map(|v| json!({"$ne": v})),
            ];
            op.prop_map(move |c| json!({ f: c }))
        })
    }

    fn filter() -> impl Strategy<Value = Json> {
        prop_oneof![
            3 => leaf(),
            2 => (leaf(), leaf()).prop_map(|(a, b)| json!({"$and": [a, b]})),
            2 => proptest::collection::vec(leaf(), 2..4).prop_map(|v| json!({"$or": v})),
            1 => (leaf(), proptest::collection::vec(leaf(), 2..3))
                .prop_map(|(a, o)| json!({"$and": [a, {"$or": o}]})),
        ]
    }

    /// Options: a sort that orders every document (so a limit keeps the
    /// same ones whatever the plan), a limit only with one, a projection.
    fn options() -> impl Strategy<Value = (Option<Json>, Option<u64>, Option<Json>)> {
        let sort = prop_oneof![
            2 => Just(None),
            1 => Just(Some(json!({"total": 1, "_id": 1}))),
            1 => Just(Some(json!({"created": -1}))),
            3 => Just(Some(json!({"created": 1}))),
            1 => Just(Some(json!({"status": 1, "created": -1}))),
            1 => Just(Some(json!({"_id": -1}))),
        ];
        let proj = prop_oneof![
            3 => Just(None),
            1 => Just(Some(json!({"total": 1}))),
            1 => Just(Some(json!({"status": 1, "created": 1}))),
        ];
        (sort, proptest::option::of(1..30u64), proj).prop_map(|(s, l, p)| (s.clone(), s.and(l), p))
    }

    fn opts_of(o: &(Option<Json>, Option<u64>, Option<Json>)) -> FindOptions {
        let mut f = FindOptions::new();
        if let Some(s) = &o.0 {
            f = f.sort(s.clone()).unwrap();
        }
        if let Some(l) = o.1 {
            f = f.limit(l);
        }
        if let Some(p) = &o.2 {
            f = f.projection(p.clone()).unwrap();
        }
        f
    }

    /// The results as comparable text, in order when sorted.
    fn results(
        c: &Collection<'_, Document>,
        q: &Json,
        o: &(Option<Json>, Option<u64>, Option<Json>),
    ) -> Vec<String> {
        let mut v: Vec<String> = c
            .find_with(q.clone(), opts_of(o))
            .unwrap()
            .map(|d| Value::Object(d.unwrap()).to_json().to_string())
            .collect();
        if o.0.is_none() {
            v.sort();
        }
        v
    }

    /// `q` with other values of the same kinds (the same shape).
    fn sibling(q: &Json) -> Json {
        match q {
            Json::Number(n) => json!((n.as_i64().unwrap() * 31 + 7).rem_euclid(4100)),
            Json::String(s) => {
                if let Some(i) = STATUSES.iter().position(|x| x == s) {
                    json!(STATUSES[(i + 1) % 4])
                } else if let Some(k) = s.strip_prefix("city-") {
                    json!(format!("city-{}", (k.parse::<i64>().unwrap() + 7) % 60))
                } else if let Some(k) = s.strip_prefix('S') {
                    json!(format!("S{}", (k.parse::<i64>().unwrap() + 13) % 110))
                } else {
                    q.clone()
                }
            }
            Json::Array(v) => Json::Array(v.iter().map(sibling).collect()),
            Json::Object(m) => {
                Json::Object(m.iter().map(|(k, v)| (k.clone(), sibling(v))).collect())
            }
            other => other.clone(),
        }
    }

    #[test]
    fn results_with_the_plan_cache_equal_fresh_plans() {
        let seed = crate::common::seed("plan_cache_property");
        let mut bytes = [0u8; 32];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = (seed.rotate_left(i as u32 * 8) as u8) ^ i as u8;
        }
        let config = Config {
            cases: crate::common::iters(300) as u32,
            failure_persistence: None,
            ..Config::default()
        };
        let mut runner =
            TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &bytes));
        let o = Orders::new();
        let c = o.c();
        let hits = std::cell::Cell::new(0u32);
        // Each case: a query planned afresh (its choice cached), then one
        // of the same shape with other values, run on that choice and
        // afresh.
        let res = runner.run(&(filter(), options()), |(q, opts)| {
            c.clear_plan_cache().unwrap();
            results(&c, &q, &opts);
            let other = sibling(&q);
            let cached_plan = c.explain(other.clone(), opts_of(&opts)).unwrap();
            let with_cache = results(&c, &other, &opts);
            if cached_plan.from_plan_cache {
                hits.set(hits.get() + 1);
            }
            c.clear_plan_cache().unwrap();
            let fresh = results(&c, &other, &opts);
            prop_assert_eq!(
                &with_cache,
                &fresh,
                "{} then {} {:?}: cached plan {} ",
                q,
                other,
                opts,
                cached_plan.plan
            );
            Ok::<(), TestCaseError>(())
        });
        eprintln!(
            "plan_cache_property: {} cached plans, seed={seed}",
            hits.get()
        );
        if let Err(e) = res {
            panic!("plan_cache_property SEED={seed}: {e}");
        }
        assert!(hits.get() > 0, "no query ran on a cached plan");
    }
}

/// The matches' `_id`s in any order (a plan with no sort order).
fn as_set(mut ids: Vec<i64>) -> Vec<i64> {
    ids.sort_unstable();
    ids
}

#[test]
fn unions_and_in_lists_stream_under_a_limit() {
    // MongoDB's `OR` stage streams its children: the first results come
    // from the first branch's first entries, and a limit stops the scan.
    // (Reading every branch's `_id`s before the first result examined all
    // 280 keys here.)
    let o = Orders::new();
    let q = json!({"$or": [{"total": {"$lt": 100}}, {"customer.address.city": "city-7"}]});
    let e = o.explain(&q, FindOptions::new().limit(10));
    assert!(e.plan.to_string().starts_with("union("), "{e:?}");
    assert_eq!(counts(&e), (10, 10, 10), "{e:?}");
    let all = o.naive(&q, None, 0, None);
    assert!(all.len() > 200, "{}", all.len());
    let some = o.found(&q, FindOptions::new().limit(10));
    assert_eq!(some.len(), 10);
    assert!(some.iter().all(|id| all.contains(id)), "{some:?}");
    // Whole, a document in both branches once.
    let e = o.explain(&q, FindOptions::new());
    assert_eq!(e.returned, all.len() as u64, "{e:?}");
    assert_eq!(as_set(o.found(&q, FindOptions::new())), all);

    // An `$in` over an index: range after range, stopping at the limit.
    let q = json!({"customer.address.city": {"$in": ["city-3", "city-1", "city-2"]}});
    let e = o.explain(&q, FindOptions::new().skip(2).limit(5));
    assert!(e.plan.to_string().starts_with("index scan"), "{e:?}");
    assert_eq!(counts(&e), (7, 7, 5), "{e:?}");
    assert_eq!(
        as_set(o.found(&q, FindOptions::new())),
        o.naive(&q, None, 0, None)
    );
    // Inside a write transaction too (it sees its own writes).
    let tx = o.db.begin_write().unwrap();
    {
        let c = tx.collection::<Document>("orders");
        c.insert(&doc(json!({"_id": -1, "total": 5, "status": "new"})))
            .unwrap();
        let q = json!({"$or": [{"total": {"$lt": 10}}, {"customer.address.city": "city-7"}]});
        let got: Vec<i64> = c
            .find(q.clone())
            .unwrap()
            .iter()
            .map(|d| d.get("_id").and_then(Value::as_i64).unwrap())
            .collect();
        let mut want = o.naive(&q, None, 0, None);
        want.push(-1);
        assert_eq!(as_set(got), as_set(want));
    }
    drop(tx);
}

#[test]
fn in_with_anchored_regexes_scans_their_ranges() {
    // MongoDB bounds an `$in` holding regular expressions by each value's
    // point and each anchored expression's prefix range
    // (https://www.mongodb.com/docs/manual/reference/operator/query/in/#use-the--in-operator-with-a-regular-expression).
    let o = Orders::new();
    let q = json!({"customer.address.city": {"$in": [{"$regex": "^city-4"}, "city-7"]}});
    let want = o.naive(&q, None, 0, None);
    // city-4 and city-40..49 (11 cities) and city-7, 80 orders each.
    assert_eq!(want.len(), 12 * 80);
    let e = o.explain(&q, FindOptions::new());
    assert!(
        e.plan
            .to_string()
            .starts_with("index scan customer.address.city_1"),
        "{e:?}"
    );
    assert_eq!(counts(&e), (960, 960, 960), "{e:?}");
    assert_eq!(as_set(o.found(&q, FindOptions::new())), want);
    // Overlapping ranges deliver a document once.
    let q =
        json!({"customer.address.city": {"$in": [{"$regex": "^city-4"}, {"$regex": "^city-41"}]}});
    let want = o.naive(&q, None, 0, None);
    assert_eq!(want.len(), 11 * 80);
    assert_eq!(as_set(o.found(&q, FindOptions::new())), want);
    // An expression without a literal prefix bounds nothing: no index.
    let q = json!({"customer.address.city": {"$in": [{"$regex": "-4$"}, "city-7"]}});
    let e = o.explain(&q, FindOptions::new());
    assert_eq!(e.plan.to_string(), "full scan", "{e:?}");
    assert_eq!(
        as_set(o.found(&q, FindOptions::new())),
        o.naive(&q, None, 0, None)
    );
}

#[test]
fn in_on_a_leading_field_merges_its_ranges_for_the_sort() {
    // MongoDB's SORT_MERGE: an `$in` on the leading field of {status: 1,
    // created: -1} and a sort on `created` reads each status's range in
    // index order and merges them, so a limit stops each range early
    // instead of sorting every match in memory
    // (https://www.mongodb.com/docs/manual/tutorial/sort-results-with-indexes/).
    let o = Orders::new();
    let q = json!({"status": {"$in": ["paid", "new", "lost"]}});
    for (spec, reversed) in [
        (json!({"created": -1}), false),
        (json!({"created": 1}), true),
    ] {
        let opts = || {
            FindOptions::new()
                .sort(spec.clone())
                .unwrap()
                .skip(3)
                .limit(10)
        };
        // Twice: planned afresh, then from the plan cache.
        for round in 0..2 {
            let e = o.explain(&q, opts());
            assert!(!e.sorted_in_memory, "{spec} {round}: {e:?}");
            let text = e.plan.to_string();
            assert!(text.starts_with("index scan status_1_created_-1"), "{e:?}");
            assert!(text.contains("merged in index order"), "{e:?}");
            assert_eq!(text.ends_with("reversed"), reversed, "{e:?}");
            // At most skip + limit from each of the three ranges.
            assert!(e.keys_examined <= 3 * 13, "{spec}: {e:?}");
            assert_eq!(e.returned, 10, "{e:?}");
            assert_eq!(
                o.found(&q, opts()),
                o.naive(&q, Some(spec.clone()), 3, Some(10)),
                "{spec} {round}"
            );
        }
        // Whole, and with a range on the sort field after the prefix.
        let opts = FindOptions::new().sort(spec.clone()).unwrap();
        assert_eq!(
            o.found(&q, opts.clone()),
            o.naive(&q, Some(spec.clone()), 0, None)
        );
        let q2 = json!({"status": {"$in": ["cancelled", "shipped"]}, "created": {"$gte": 1000, "$lt": 3000}});
        let e = o.explain(&q2, opts.clone().limit(7));
        assert!(!e.sorted_in_memory, "{e:?}");
        assert!(e.keys_examined <= 14, "{e:?}");
        assert_eq!(
            o.found(&q2, opts.clone().limit(7)),
            o.naive(&q2, Some(spec.clone()), 0, Some(7))
        );
        assert_eq!(o.found(&q2, opts), o.naive(&q2, Some(spec), 0, None));
    }
}

#[test]
fn merged_and_streamed_results_equal_the_naive_ones_on_awkward_data() {
    // Nulls, missing fields, empty arrays, mixed types, descending
    // components, duplicates in `$in`, terminal ranges after the prefix,
    // and (second round) a multikey document that turns the merge off:
    // every window of every query equals the naive evaluator's.
    let dir = tempfile::tempdir().unwrap();
    let db = Database::create(dir.path().join("m.cairn")).unwrap();
    let c = crate::common::unsynced(&db, "m");
    c.create_index(&[("a", 1), ("b", 1)], IndexOptions::default())
        .unwrap();
    c.create_index(&[("x", -1), ("y", -1), ("z", 1)], IndexOptions::default())
        .unwrap();
    let a_vals = [
        json!(null),
        json!([]),
        json!(1),
        json!(2),
        json!("k"),
        json!(1.0),
    ];
    let mut docs: Vec<Document> = Vec::new();
    for i in 0..700i64 {
        let mut d = json!({"_id": i, "y": i % 3, "z": (i * 37) % 101});
        if i % 7 != 0 {
            d["a"] = a_vals[(i % 6) as usize].clone();
        }
        match i % 5 {
            0 => {}
            1 => d["b"] = json!(null),
            2 => d["b"] = json!(format!("s{}", (i * 13) % 50)),
            _ => d["b"] = json!((i * 29) % 97),
        }
        d["x"] = json!(["p", "q", "r"][(i % 3) as usize]);
        docs.push(doc(d));
    }
    c.insert_many(&docs).unwrap();
    let queries = [
        (json!({"a": {"$in": [null, 1]}}), json!({"b": 1})),
        (json!({"a": {"$in": [2, 1, 1.0, 1]}}), json!({"b": -1})),
        (json!({"a": {"$in": [[], "k", 2]}}), json!({"b": 1})),
        (
            json!({"a": {"$in": [1, 2]}, "b": {"$ne": null}}),
            json!({"b": -1}),
        ),
        (
            json!({"a": {"$in": [1, 2]}, "b": {"$in": ["s3", {"$regex": "^s1"}, 5]}}),
            json!({"b": 1}),
        ),
        (
            json!({"a": {"$in": [1, 2]}, "b": {"$gte": 10, "$lt": 60}}),
            json!({"b": 1}),
        ),
        (json!({"x": {"$in": ["p", "r"]}, "y": 1}), json!({"z": 1})),
        (
            json!({"x": {"$in": ["p", "r"]}, "y": {"$in": [0, 2]}}),
            json!({"z": -1}),
        ),
        (
            json!({"$or": [{"a": 1}, {"_id": {"$lt": 40}}, {"x": "q", "y": 2}]}),
            json!({"_id": 1}),
        ),
    ];
    for round in 0..2 {
        if round == 1 {
            // A multikey `b`: no merge on {a, b} (its order is no longer
            // the sort's), the results the same.
            let d = doc(json!({"_id": 1000, "a": 1, "b": [3, 90], "x": "p", "y": 1, "z": 5}));
            c.insert(&d).unwrap();
            docs.push(d);
        }
        for (q, s) in &queries {
            let f = Filter::parse(q.clone()).unwrap();
            let spec = SortSpec::parse(s.clone()).unwrap();
            let mut want: Vec<&Document> = docs
                .iter()
                .filter(|d| f.matches_document(d).unwrap())
                .collect();
            want.sort_by(|a, b| {
                spec.compare(&Value::Object((*a).clone()), &Value::Object((*b).clone()))
            });
            let as_value = |d: &Document| Value::Object(d.clone());
            let text = q.to_string();
            if !text.contains("[[]") && !text.contains("$or") {
                let e = c
                    .explain(q.clone(), FindOptions::new().sort(s.clone()).unwrap())
                    .unwrap();
                // Merged while every index is single-key; on {a, b} not
                // once `b` holds an array.
                let merged = round == 0 || text.contains("\"x\"");
                assert_eq!(
                    e.plan.to_string().contains("merged"),
                    merged,
                    "{round} {q}: {e:?}"
                );
                assert_eq!(e.sorted_in_memory, !merged, "{round} {q}: {e:?}");
            }
            for (skip, limit) in [(0, None), (0, Some(3)), (5, Some(7)), (250, Some(300))] {
                let mut opts = FindOptions::new().sort(s.clone()).unwrap().skip(skip);
                if let Some(l) = limit {
                    opts = opts.limit(l);
                }
                let w: Vec<&Document> = want
                    .iter()
                    .skip(skip as usize)
                    .take(limit.unwrap_or(u64::MAX) as usize)
                    .copied()
                    .collect();
                for pass in 0..2 {
                    let got: Vec<Document> = c
                        .find_with(q.clone(), opts.clone())
                        .unwrap()
                        .map(|d| d.unwrap())
                        .collect();
                    let ctx = format!("{round}/{pass} {q} {s} {skip} {limit:?}");
                    assert_eq!(got.len(), w.len(), "{ctx}");
                    // Position by position the same sort values (ties in
                    // any order: MongoDB's too).
                    for (i, (g, x)) in got.iter().zip(&w).enumerate() {
                        assert_eq!(
                            spec.compare(&as_value(g), &as_value(x)),
                            std::cmp::Ordering::Equal,
                            "{ctx} at {i}: {g:?} vs {x:?}"
                        );
                    }
                    if limit.is_none() && skip == 0 {
                        let id = |d: &Document| d.get("_id").and_then(Value::as_i64).unwrap();
                        let mut g: Vec<i64> = got.iter().map(id).collect();
                        let mut ww: Vec<i64> = w.iter().map(|d| id(d)).collect();
                        g.sort_unstable();
                        ww.sort_unstable();
                        assert_eq!(g, ww, "{ctx}");
                    }
                }
            }
        }
    }
}
