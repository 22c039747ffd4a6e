//! The query differential test (suite 7, docs/reliability.md): random documents (nested objects,
//! arrays, mixed types, missing fields) and random filters, run through the
//! planner on a collection without indexes, through the planner on the same
//! documents with indexes (single, descending, compound, multikey, sparse),
//! and through the naive evaluator on the decoded documents: the results
//! must be equal, and in the same order when sorted. Also updates and
//! deletes by filter against the model, and `explain`.

use std::collections::BTreeMap;

use cairndb::document::filter::Filter;
use cairndb::document::query::{FindOptions, UpdateOptions};
use cairndb::document::DocumentError;
use cairndb::document::{Document, IndexOptions, SortSpec, Value};
use cairndb::storage::sim::SplitMix64;
use cairndb::Database;
use serde_json::{json, Value as Json};

fn rand_scalar(rng: &mut SplitMix64) -> Json {
    match rng.below(7) {
        0 => Json::Null,
        1 => json!(rng.below(2) == 0),
        2 => json!(rng.below(10) as i64 - 3),
        3 => json!(rng.below(10) as f64 / 2.0),
        _ => json!(["a", "b", "ab", "abc", "c", ""][rng.below(6) as usize]),
    }
}

fn rand_json(rng: &mut SplitMix64, depth: u32) -> Json {
    match rng.below(if depth > 1 { 5 } else { 8 }) {
        0..=4 => rand_scalar(rng),
        5 | 6 => Json::Array(
            (0..rng.below(4))
                .map(|_| rand_json(rng, depth + 1))
                .collect(),
        ),
        _ => {
            let mut m = serde_json::Map::new();
            for f in ["x", "y"] {
                if rng.below(3) != 0 {
                    m.insert(f.into(), rand_json(rng, depth + 1));
                }
            }
            Json::Object(m)
        }
    }
}

/// A random document; with `flat`, `x` is never an array (so no index on
/// `x.x` or `x.y` ever meets an array on the way, and not-null conditions
/// there read the index).
fn rand_doc(rng: &mut SplitMix64, id: i64, flat: bool) -> Document {
    let mut m = serde_json::Map::new();
    m.insert("_id".into(), json!(id));
    for f in ["x", "y", "z"] {
        if rng.below(5) != 0 {
            let mut v = rand_json(rng, 0);
            if let (true, "x", Json::Array(a)) = (flat, f, &v) {
                let mut o = serde_json::Map::new();
                for (k, e) in ["x", "y"].iter().zip(a) {
                    o.insert(k.to_string(), e.clone());
                }
                v = Json::Object(o);
            }
            m.insert(f.into(), v);
        }
    }
    match Value::from_json(Json::Object(m)).unwrap() {
        Value::Object(d) => d,
        _ => unreachable!(),
    }
}

const PATHS: [&str; 6] = ["x", "y", "z", "x.x", "x.y", "_id"];

fn rand_cond(rng: &mut SplitMix64) -> Json {
    let v = rand_scalar(rng);
    match rng.below(21) {
        0 => v,
        1 => json!({"$eq": v}),
        2 => json!({"$ne": v}),
        3 => json!({"$gt": v}),
        4 => json!({"$gte": v}),
        5 => json!({"$lt": v}),
        6 => json!({"$lte": v}),
        7 => json!({"$in": [v, rand_scalar(rng)]}),
        8 => json!({"$nin": [v]}),
        9 => json!({"$exists": rng.below(2) == 0}),
        10 => json!({"$size": rng.below(3)}),
        11 => {
            let p = ["a", "ab", ""][rng.below(3) as usize];
            json!({ "$prefix": p })
        }
        12 => json!({"$gte": rand_scalar(rng), "$lte": rand_scalar(rng)}),
        // Not null with another value: every key but null's, on an index
        // of a top-level path (the filter rejects the other value).
        13 => json!({"$nin": [null, v]}),
        // $all, $type, $mod, $regex (issue 18): the planner answers $all
        // with its first value's index range and an anchored regular
        // expression with its literal prefix's range.
        14 => json!({"$all": [v, rand_scalar(rng)]}),
        15 => {
            let t = [
                "string", "double", "long", "array", "null", "object", "bool", "number",
            ][rng.below(8) as usize];
            json!({ "$type": t })
        }
        16 => json!({"$mod": [2 + rng.below(2), rng.below(2)]}),
        17 => {
            let (p, o) = [
                ("^a", "s"),
                ("^ab?c", ""),
                ("b", "i"),
                ("^A", "i"),
                ("c$", ""),
                ("^a.", ""),
            ][rng.below(6) as usize];
            json!({"$regex": p, "$options": o})
        }
        18 => match rng.below(3) {
            0 => json!({"$not": {"$regex": "b"}}),
            // Not null on dotted paths: the index's keys but null's while
            // no document has an array on the way (odd cases).
            1 => json!({"$ne": null}),
            _ => json!({"$not": {"$eq": null}}),
        },
        // On `x`, the subfield conditions can use the `x.y` index.
        // (A null there matches an element lacking the field.)
        19 => json!({"$elemMatch": {"x": {"$gte": rand_scalar(rng)}, "y": rand_scalar(rng)}}),
        _ => json!({"$elemMatch": {"$gte": rand_scalar(rng)}}),
    }
}

fn rand_filter(rng: &mut SplitMix64, depth: u32) -> Json {
    match rng.below(if depth > 1 { 6 } else { 9 }) {
        0..=5 => {
            let mut m = serde_json::Map::new();
            for _ in 0..1 + rng.below(2) {
                m.insert(PATHS[rng.below(6) as usize].into(), rand_cond(rng));
            }
            Json::Object(m)
        }
        6 => json!({"$and": [rand_filter(rng, depth + 1), rand_filter(rng, depth + 1)]}),
        7 => json!({"$or": [rand_filter(rng, depth + 1), rand_filter(rng, depth + 1)]}),
        _ => json!({"$nor": [rand_filter(rng, depth + 1)]}),
    }
}

fn ids(docs: &[Document]) -> Vec<i64> {
    let mut v: Vec<i64> = docs
        .iter()
        .map(|d| d.get("_id").and_then(Value::as_i64).unwrap())
        .collect();
    v.sort();
    v
}

#[test]
fn planner_results_equal_the_naive_evaluator() {
    let seed = crate::common::seed("query-diff");
    let cases = crate::common::iters(6);
    let queries = 250;
    let mut rng = SplitMix64(seed);
    let (mut compared, mut mismatches, mut index_plans, mut rejected) = (0u64, 0u64, 0u64, 0u64);
    let mut dotted_not_null = 0u64;
    let mut plans: BTreeMap<String, u64> = BTreeMap::new();
    for case in 0..cases {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::create(dir.path().join("q.cairn")).unwrap();
        let plain = crate::common::unsynced(&db, "plain");
        let indexed = crate::common::unsynced(&db, "indexed");
        for (fields, sparse) in [
            (vec![("x", 1i8)], false),
            (vec![("y", -1)], false),
            (vec![("z", 1), ("x", -1)], false),
            (vec![("x.x", 1)], true),
            // Dotted null bounds over arrays of subdocuments.
            (vec![("x.y", 1)], false),
        ] {
            // Some documents cannot be indexed (arrays in two fields of a
            // compound index): those are rejected in both collections alike.
            indexed
                .create_index(
                    &fields,
                    IndexOptions {
                        sparse,
                        ..Default::default()
                    },
                )
                .unwrap();
        }
        let mut docs: Vec<Document> = Vec::new();
        for i in 0..120 {
            let d = rand_doc(&mut rng, i, case % 2 == 1);
            match indexed.insert(&d) {
                Ok(_) => {
                    plain.insert(&d).unwrap();
                    docs.push(d);
                }
                Err(DocumentError::IndexError { .. }) => rejected += 1,
                Err(e) => panic!("{e}"),
            }
        }
        for q in 0..queries {
            let fj = rand_filter(&mut rng, 0);
            let ctx = format!("seed {seed} case {case} query {q}: {fj}");
            let filter = match Filter::parse(fj.clone()) {
                Ok(f) => f,
                Err(e) => panic!("{ctx}: generated filter rejected: {e}"),
            };
            let naive: Vec<Document> = docs
                .iter()
                .filter(|d| filter.matches_document(d).unwrap())
                .cloned()
                .collect();
            let a: Vec<Document> = plain
                .find(fj.clone())
                .unwrap()
                .map(Result::unwrap)
                .collect();
            let b: Vec<Document> = indexed
                .find(fj.clone())
                .unwrap()
                .map(Result::unwrap)
                .collect();
            compared += 1;
            if ids(&a) != ids(&naive) || ids(&b) != ids(&naive) {
                eprintln!(
                    "{ctx}: naive {:?} plain {:?} indexed {:?}",
                    ids(&naive),
                    ids(&a),
                    ids(&b)
                );
                mismatches += 1;
            }
            if indexed.count(fj.clone()).unwrap() != naive.len() as u64 {
                eprintln!("{ctx}: count differs");
                mismatches += 1;
            }
            let e = indexed.explain(fj.clone(), FindOptions::new()).unwrap();
            let kind = e
                .plan
                .to_string()
                .split_whitespace()
                .next()
                .unwrap_or("")
                .to_string();
            *plans.entry(kind).or_default() += 1;
            if !e.plan.to_string().starts_with("full") {
                index_plans += 1;
            }
            let shown = e.plan.to_string();
            if ["x.x", "x.y"].iter().any(|p| {
                shown.contains(&format!("{p} (null, MaxKey]"))
                    || shown.contains(&format!("{p} [MinKey, MaxKey]"))
            }) {
                dotted_not_null += 1;
            }
            assert_eq!(e.returned, naive.len() as u64, "{ctx}: explain returned");
            // A hint never changes the results (the sparse index may refuse
            // a filter that does not bound it).
            let hints = [
                json!("x_1"),
                json!({"y": -1}),
                json!({"z": 1, "x": -1}),
                json!("x.y_1"),
                json!("x.x_1"),
                json!("_id_"),
                json!({"$natural": -1}),
            ];
            let hint = hints[rng.below(hints.len() as u64) as usize].clone();
            match indexed.find_with(fj.clone(), FindOptions::new().hint(hint.clone()).unwrap()) {
                Ok(r) => {
                    let got: Vec<Document> = r.map(Result::unwrap).collect();
                    if ids(&got) != ids(&naive) {
                        eprintln!("{ctx}: hint {hint}: {:?}", ids(&got));
                        mismatches += 1;
                    }
                }
                Err(DocumentError::IndexError { .. }) if hint == json!("x.x_1") => {}
                Err(e) => panic!("{ctx}: hint {hint}: {e}"),
            }
            // Sorted, with skip and limit: the same sequence of sort keys.
            if q % 5 == 0 {
                let specs = [json!({"x": 1}), json!({"y": -1}), json!({"z": 1, "x": -1})];
                let spec = specs[rng.below(3) as usize].clone();
                let opts = || {
                    FindOptions::new()
                        .sort(spec.clone())
                        .unwrap()
                        .skip(3)
                        .limit(20)
                };
                let sa: Vec<Document> = plain
                    .find_with(fj.clone(), opts())
                    .unwrap()
                    .map(Result::unwrap)
                    .collect();
                let sb: Vec<Document> = indexed
                    .find_with(fj.clone(), opts())
                    .unwrap()
                    .map(Result::unwrap)
                    .collect();
                // Ties may come in any order: compare the sort keys (1 and
                // 1.0 are equal keys, so numbers compare as f64).
                let ss = SortSpec::parse(spec.clone()).unwrap();
                let key = |d: &Document| -> Vec<Json> {
                    ss.sort_key_value(&Value::Object(d.clone()))
                        .iter()
                        .map(|v| numbers_as_f64(v.to_json()))
                        .collect()
                };
                let ka: Vec<_> = sa.iter().map(key).collect();
                let kb: Vec<_> = sb.iter().map(key).collect();
                if ka != kb || sa.len() != naive.len().saturating_sub(3).min(20) {
                    eprintln!("{ctx}: sorted by {spec}: plain {ka:?} indexed {kb:?}");
                    mismatches += 1;
                }
            }
        }
        // Updates and deletes by filter agree with the model.
        for _ in 0..30 {
            let fj = rand_filter(&mut rng, 1);
            let filter = Filter::parse(fj.clone()).unwrap();
            let upd = json!({"$set": {"w": rng.below(5)}, "$inc": {"n": 1}});
            let want: Vec<i64> = ids(&docs
                .iter()
                .filter(|d| filter.matches_document(d).unwrap())
                .cloned()
                .collect::<Vec<_>>());
            let r = indexed
                .update_many(fj.clone(), upd.clone(), UpdateOptions::default())
                .unwrap();
            plain
                .update_many(fj.clone(), upd, UpdateOptions::default())
                .unwrap();
            if r.matched != want.len() as u64 {
                eprintln!(
                    "seed {seed}: update_many {fj} matched {} want {}",
                    r.matched,
                    want.len()
                );
                mismatches += 1;
            }
            docs = plain.find(json!({})).unwrap().map(Result::unwrap).collect();
        }
        let fj = rand_filter(&mut rng, 1);
        let filter = Filter::parse(fj.clone()).unwrap();
        let gone = docs
            .iter()
            .filter(|d| filter.matches_document(d).unwrap())
            .count() as u64;
        assert_eq!(indexed.delete_many(fj.clone()).unwrap(), gone);
        assert_eq!(plain.delete_many(fj).unwrap(), gone);
        assert_eq!(indexed.len().unwrap(), plain.len().unwrap());
        assert!(indexed.check_indexes().unwrap().is_empty());
    }
    crate::common::report(&format!(
        "query-diff: cases={cases} queries={compared} index_plans={index_plans} dotted_not_null={dotted_not_null} rejected_docs={rejected} mismatches={mismatches} plans={plans:?} seed={seed}"
    ));
    assert_eq!(mismatches, 0);
    assert!(
        cases < 2 || dotted_not_null > 0,
        "no not-null plan on a dotted path: {plans:?}"
    );
    assert!(
        index_plans > compared / 10,
        "the planner rarely used an index: {plans:?}"
    );
}

/// tiedot's lookup query shape: `(eq(a) XOR eq(b)) ∪ b in [r, r+2]` over
/// indexed fields uses indexes (a union of index scans), reads far fewer
/// entries than a full scan, and returns what the naive evaluator does.
#[test]
fn lookup_query_uses_index_union_and_intersection() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::create(dir.path().join("t.cairn")).unwrap();
    let c = crate::common::unsynced(&db, "t");
    c.create_index(&[("nested.nested.int", 1)], IndexOptions::default())
        .unwrap();
    c.create_index(&[("ints", 1)], IndexOptions::default())
        .unwrap();
    let docs: Vec<Document> = (0..2000i64)
        .map(|i| {
            match Value::from_json(json!({
                "_id": i,
                "nested": {"nested": {"int": i % 97, "str": format!("s{i}")}},
                "ints": [i % 53, (i * 7) % 101],
            }))
            .unwrap()
            {
                Value::Object(d) => d,
                _ => unreachable!(),
            }
        })
        .collect();
    c.insert_many(&docs).unwrap();
    let q = json!({"$or": [
        {"nested.nested.int": 5},
        {"ints": 9},
        {"ints": {"$elemMatch": {"$gte": 20, "$lte": 22}}}
    ]});
    let e = c.explain(q.clone(), FindOptions::new()).unwrap();
    assert!(e.plan.to_string().starts_with("union"), "{}", e.plan);
    let filter = Filter::parse(q.clone()).unwrap();
    let want = docs
        .iter()
        .filter(|d| filter.matches_document(d).unwrap())
        .count() as u64;
    assert_eq!(e.returned, want);
    assert!(
        e.examined < 2 * want + 50,
        "examined {} for {want} results",
        e.examined
    );
    let and = json!({"nested.nested.int": 5, "ints": {"$lt": 30}});
    // Intersecting reads every `ints < 30` entry too: the cost-based
    // planner considers it and picks the one selective index instead.
    let e = c.explain(and.clone(), FindOptions::new()).unwrap();
    assert!(
        e.plan
            .to_string()
            .starts_with("index scan nested.nested.int_1"),
        "{}",
        e.plan
    );
    assert!(
        e.candidates
            .iter()
            .any(|c| !c.chosen && c.plan.to_string().starts_with("intersection")),
        "{:?}",
        e.candidates
    );
    let sorted = c
        .explain(
            json!({}),
            FindOptions::new()
                .sort(json!({"nested.nested.int": -1}))
                .unwrap(),
        )
        .unwrap();
    assert!(!sorted.sorted_in_memory, "{}", sorted.plan);
}

/// `1`, `1.0` and `1e0` are the same number to the sort order: map every
/// number to its f64 so tied keys compare equal whatever their spelling.
fn numbers_as_f64(v: Json) -> Json {
    match v {
        Json::Number(n) => json!(n.as_f64().unwrap_or(f64::NAN)),
        Json::Array(a) => Json::Array(a.into_iter().map(numbers_as_f64).collect()),
        Json::Object(o) => {
            Json::Object(o.into_iter().map(|(k, v)| (k, numbers_as_f64(v))).collect())
        }
        other => other,
    }
}

fn doc(j: Json) -> Document {
    match Value::from_json(j).unwrap() {
        Value::Object(d) => d,
        _ => unreachable!(),
    }
}

/// A scalar for the planner's differential test: mostly small numbers
/// (ints and floats that tie), sometimes a string, null or a bool.
fn plan_scalar(rng: &mut SplitMix64) -> Json {
    match rng.below(12) {
        0 => Json::Null,
        1 => json!(rng.below(2) == 0),
        2 | 3 => json!(["a", "b", "c"][rng.below(3) as usize]),
        4 | 5 => json!(rng.below(12) as f64 / 2.0),
        _ => json!(rng.below(8) as i64 - 1),
    }
}

fn plan_cond(rng: &mut SplitMix64) -> Json {
    let v = plan_scalar(rng);
    match rng.below(9) {
        0 => v,
        1 => json!({"$gt": v}),
        2 => json!({"$gte": v}),
        3 => json!({"$lt": v}),
        4 => json!({"$lte": v}),
        5 => json!({"$in": [v, plan_scalar(rng)]}),
        6 => json!({"$ne": v}),
        7 => match rng.below(3) {
            0 => json!({"$nin": [null, v]}),
            1 => json!({"$ne": null}),
            _ => json!({"$not": {"$eq": null}}),
        },
        _ => {
            let lo = rng.below(6) as i64 - 1;
            json!({"$gt": lo, "$lte": lo + rng.below(4) as i64})
        }
    }
}

/// The planner's bounds (both ends of a range in one scan, compound
/// equality prefix + range, index order for a sort with skip and limit,
/// `_id` ranges) never change a result: random conjunctions over single,
/// descending and compound indexes, single-key and (in odd cases)
/// multikey, against the naive evaluator and an unindexed collection;
/// sorted results carry the same sort keys in the same order, and with an
/// `_id` tie-break the same documents.
#[test]
fn planner_bounds_and_index_order_equal_the_collection_scan() {
    let seed = crate::common::seed("plan-diff");
    let cases = crate::common::iters(6);
    let mut rng = SplitMix64(seed);
    let (mut compared, mut mismatches) = (0u64, 0u64);
    let mut dotted_not_null = 0u64;
    let mut plans: BTreeMap<String, u64> = BTreeMap::new();
    for case in 0..cases {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::create(dir.path().join("p.cairn")).unwrap();
        let plain = crate::common::unsynced(&db, "plain");
        let indexed = crate::common::unsynced(&db, "indexed");
        for fields in [
            vec![("a", 1i8)],
            vec![("b", -1), ("a", 1)],
            vec![("c", 1), ("b", 1)],
            vec![("a", -1), ("c", -1)],
            // A dotted path: an array on the way (`d`) only in odd cases.
            vec![("d.e", 1)],
            vec![("c", 1), ("d.e", -1)],
        ] {
            indexed
                .create_index(&fields, IndexOptions::default())
                .unwrap();
        }
        let multikey = case % 2 == 1;
        let mut docs = Vec::new();
        for i in 0..300i64 {
            let mut m = serde_json::Map::new();
            m.insert("_id".into(), json!(i));
            for f in ["a", "b", "c"] {
                if rng.below(8) != 0 {
                    // Arrays of one value (or none) keep an index
                    // single-key; of two, multikey.
                    let v = match rng.below(12) {
                        0 if multikey && f == "a" => {
                            json!([plan_scalar(&mut rng), plan_scalar(&mut rng)])
                        }
                        1 => json!([plan_scalar(&mut rng)]),
                        2 if f != "b" => json!([]),
                        _ => plan_scalar(&mut rng),
                    };
                    m.insert(f.into(), v);
                }
            }
            let d = match rng.below(10) {
                0 => None,
                1 => Some(plan_scalar(&mut rng)),
                2 => Some(json!({})),
                3 if multikey => Some(json!([{"e": plan_scalar(&mut rng)}, {}])),
                4 if multikey => Some(json!([1, 2])),
                _ => Some(json!({"e": plan_scalar(&mut rng)})),
            };
            if let Some(d) = d {
                m.insert("d".into(), d);
            }
            let d = doc(Json::Object(m));
            indexed.insert(&d).unwrap();
            plain.insert(&d).unwrap();
            docs.push(d);
        }
        for q in 0..200 {
            let mut m = serde_json::Map::new();
            for _ in 0..1 + rng.below(3) {
                let p = ["a", "b", "c", "_id", "a", "d.e"][rng.below(6) as usize];
                let c = if p == "_id" {
                    let lo = rng.below(300) as i64;
                    match rng.below(3) {
                        0 => json!({"$gte": lo, "$lt": lo + rng.below(50) as i64}),
                        1 => json!({"$gt": lo}),
                        _ => json!({"$in": [lo, lo + 7]}),
                    }
                } else {
                    plan_cond(&mut rng)
                };
                m.insert(p.into(), c);
            }
            let fj = Json::Object(m);
            let filter = Filter::parse(fj.clone()).unwrap();
            let naive: Vec<Document> = docs
                .iter()
                .filter(|d| filter.matches_document(d).unwrap())
                .cloned()
                .collect();
            let specs = [
                json!({"a": 1}),
                json!({"a": -1}),
                json!({"b": -1, "a": 1}),
                json!({"b": 1, "a": -1}),
                json!({"c": 1, "b": 1}),
                json!({"_id": -1}),
                json!({"a": -1, "c": -1, "_id": 1}),
                json!({"b": 1}),
            ];
            let spec = specs[rng.below(specs.len() as u64) as usize].clone();
            let skip = rng.below(4);
            let limit = [None, Some(1), Some(5), Some(20)][rng.below(4) as usize];
            let opts = || {
                let o = FindOptions::new().sort(spec.clone()).unwrap().skip(skip);
                match limit {
                    Some(l) => o.limit(l),
                    None => o,
                }
            };
            let ctx = format!(
                "seed {seed} case {case} query {q}: {fj} sort {spec} skip {skip} limit {limit:?}"
            );
            let unsorted: Vec<Document> = indexed
                .find(fj.clone())
                .unwrap()
                .map(Result::unwrap)
                .collect();
            if ids(&unsorted) != ids(&naive) {
                eprintln!(
                    "{ctx}: naive {:?} indexed {:?}",
                    ids(&naive),
                    ids(&unsorted)
                );
                mismatches += 1;
            }
            let sa: Vec<Document> = plain
                .find_with(fj.clone(), opts())
                .unwrap()
                .map(Result::unwrap)
                .collect();
            let sb: Vec<Document> = indexed
                .find_with(fj.clone(), opts())
                .unwrap()
                .map(Result::unwrap)
                .collect();
            let ss = SortSpec::parse(spec.clone()).unwrap();
            let key = |d: &Document| -> Vec<Json> {
                ss.sort_key_value(&Value::Object(d.clone()))
                    .iter()
                    .map(|v| numbers_as_f64(v.to_json()))
                    .collect()
            };
            let ka: Vec<_> = sa.iter().map(key).collect();
            let kb: Vec<_> = sb.iter().map(key).collect();
            let want_len = naive
                .len()
                .saturating_sub(skip as usize)
                .min(limit.unwrap_or(u64::MAX) as usize);
            let unique_key = spec.get("_id").is_some();
            let id_seq = |v: &[Document]| -> Vec<i64> {
                v.iter()
                    .map(|d| d.get("_id").and_then(Value::as_i64).unwrap())
                    .collect()
            };
            if ka != kb
                || sb.len() != want_len
                || sa.len() != want_len
                || (unique_key && id_seq(&sa) != id_seq(&sb))
            {
                eprintln!("{ctx}: plain {ka:?} indexed {kb:?}");
                mismatches += 1;
            }
            // The same query with a hint, and inside a write transaction
            // (the planner over the transaction's view): the same keys.
            let hints = [
                json!("a_1"),
                json!({"b": -1, "a": 1}),
                json!("c_1_b_1"),
                json!({"a": -1, "c": -1}),
                json!("_id_"),
                json!({"$natural": 1}),
            ];
            let hint = hints[rng.below(hints.len() as u64) as usize].clone();
            let hinted: Vec<Document> = indexed
                .find_with(fj.clone(), opts().hint(hint.clone()).unwrap())
                .unwrap()
                .map(Result::unwrap)
                .collect();
            let kh: Vec<_> = hinted.iter().map(key).collect();
            if kh != ka || (unique_key && id_seq(&hinted) != id_seq(&sa)) {
                eprintln!("{ctx}: hint {hint}: plain {ka:?} hinted {kh:?}");
                mismatches += 1;
            }
            let txn = db.begin_write().unwrap();
            let in_txn = txn
                .collection::<Document>("indexed")
                .find_with(fj.clone(), opts())
                .unwrap();
            txn.abort();
            let kt: Vec<_> = in_txn.iter().map(key).collect();
            if kt != ka || (unique_key && id_seq(&in_txn) != id_seq(&sa)) {
                eprintln!("{ctx}: in a transaction: plain {ka:?} txn {kt:?}");
                mismatches += 1;
            }
            // And through a read snapshot's view of the collection.
            let snap = db.begin_read().unwrap();
            let in_snap: Vec<Document> = snap
                .collection::<Document>("indexed")
                .find_with(fj.clone(), opts())
                .unwrap()
                .map(Result::unwrap)
                .collect();
            let kv: Vec<_> = in_snap.iter().map(key).collect();
            if kv != ka || (unique_key && id_seq(&in_snap) != id_seq(&sa)) {
                eprintln!("{ctx}: in a snapshot view: plain {ka:?} view {kv:?}");
                mismatches += 1;
            }
            let e = indexed.explain(fj.clone(), opts()).unwrap();
            assert_eq!(e.returned, want_len as u64, "{ctx}");
            assert_eq!(e.candidates.iter().filter(|c| c.chosen).count(), 1, "{ctx}");
            let kind: String = e
                .plan
                .to_string()
                .split(' ')
                .take(2)
                .collect::<Vec<_>>()
                .join(" ");
            let whole = e.plan.to_string().contains("(all)");
            if e.plan.to_string().contains("d.e (null, MaxKey]") {
                dotted_not_null += 1;
            }
            let kind = format!(
                "{kind}{}{}",
                if whole { " (all)" } else { "" },
                if e.sorted_in_memory { "" } else { " (ordered)" }
            );
            *plans.entry(kind).or_default() += 1;
            compared += 1;
        }
        assert!(indexed.check_indexes().unwrap().is_empty());
    }
    crate::common::report(&format!(
        "plan-diff: cases={cases} queries={compared} dotted_not_null={dotted_not_null} mismatches={mismatches} plans={plans:?} seed={seed}"
    ));
    assert_eq!(mismatches, 0);
    assert!(
        cases < 2 || dotted_not_null > 0,
        "no not-null plan on a dotted path: {plans:?}"
    );
    // Every kind of bounded plan was exercised.
    for k in ["index scan", "_id range"] {
        assert!(plans.keys().any(|p| p.starts_with(k)), "{k}: {plans:?}");
    }
    // Bounded scans read in index order, not only whole-index ones.
    for k in ["index scan (ordered)", "_id range (ordered)"] {
        assert!(plans.contains_key(k), "{k}: {plans:?}");
    }
}

/// 10,000 orders: the planner's choices and the keys they examine.
#[test]
fn planner_uses_both_bounds_compound_prefixes_index_order_and_id_ranges() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::create(dir.path().join("o.cairn")).unwrap();
    let c = crate::common::unsynced(&db, "orders");
    c.create_index(&[("total", 1)], IndexOptions::default())
        .unwrap();
    c.create_index(&[("status", 1), ("created", -1)], IndexOptions::default())
        .unwrap();
    let statuses = ["paid", "shipped", "new", "cancelled"];
    let docs: Vec<Document> = (0..10_000i64)
        .map(|i| {
            doc(json!({
                "_id": i,
                "total": (i * 7919) % 2000,
                "status": statuses[(i % 4) as usize],
                "created": i,
            }))
        })
        .collect();
    c.insert_many(&docs).unwrap();
    let naive = |q: &Json| -> u64 {
        let f = Filter::parse(q.clone()).unwrap();
        docs.iter()
            .filter(|d| f.matches_document(d).unwrap())
            .count() as u64
    };

    // Both bounds of a range in one scan: keys examined = results.
    let q = json!({"total": {"$gt": 1000, "$lte": 1010}});
    let e = c.explain(q.clone(), FindOptions::new()).unwrap();
    assert_eq!(
        e.plan.to_string(),
        "index scan total_1 total > 1000 and <= 1010"
    );
    assert_eq!(e.returned, naive(&q));
    assert_eq!(e.returned, 50);
    assert_eq!(e.keys_examined, 50, "{e:?}");
    assert_eq!(e.docs_examined, 50, "{e:?}");

    // Equality prefix + range on the next field of a compound index.
    let q = json!({"status": "shipped", "created": {"$gte": 9000}});
    let e = c.explain(q.clone(), FindOptions::new()).unwrap();
    assert_eq!(
        e.plan.to_string(),
        "index scan status_1_created_-1 status = \"shipped\", created >= 9000"
    );
    assert_eq!(e.returned, naive(&q));
    assert_eq!(e.keys_examined, e.returned, "{e:?}");
    // The one candidate besides the full scan is counted too (it is
    // weighed against the full scan) and chosen.
    assert_eq!(e.candidates.len(), 2, "{e:?}");
    assert_eq!(e.candidates[0].estimate, Some(e.keys_examined), "{e:?}");
    assert!(e.candidates[0].chosen, "{e:?}");

    // The index's order for the sort after the equality prefix: top 10.
    let q = json!({"status": "paid"});
    let opts = || {
        FindOptions::new()
            .sort(json!({"created": -1}))
            .unwrap()
            .limit(10)
    };
    let e = c.explain(q.clone(), opts()).unwrap();
    assert!(!e.sorted_in_memory, "{e:?}");
    assert_eq!(e.returned, 10);
    assert_eq!(e.keys_examined, 10, "{e:?}");
    let got: Vec<i64> = c
        .find_with(q.clone(), opts())
        .unwrap()
        .map(|d| d.unwrap().get("_id").and_then(Value::as_i64).unwrap())
        .collect();
    assert_eq!(got, (0..10).map(|k| 9996 - 4 * k).collect::<Vec<i64>>());
    // Reversed, with a skip.
    let e = c
        .explain(
            q.clone(),
            FindOptions::new()
                .sort(json!({"created": 1}))
                .unwrap()
                .skip(5)
                .limit(10),
        )
        .unwrap();
    assert!(
        !e.sorted_in_memory && e.plan.to_string().ends_with("reversed"),
        "{e:?}"
    );
    assert_eq!(e.keys_examined, 15, "{e:?}");

    // `_id` ranges read the data table's key order.
    let q = json!({"_id": {"$gte": 100, "$lt": 200}});
    let e = c.explain(q.clone(), FindOptions::new()).unwrap();
    assert_eq!(e.plan.to_string(), "_id range >= 100 and < 200");
    assert_eq!(
        (e.returned, e.docs_examined, e.keys_examined),
        (100, 100, 0)
    );
    let e = c
        .explain(
            json!({}),
            FindOptions::new()
                .sort(json!({"_id": -1}))
                .unwrap()
                .limit(3),
        )
        .unwrap();
    assert!(!e.sorted_in_memory, "{e:?}");
    assert_eq!(e.docs_examined, 3, "{e:?}");

    // The candidates are listed, one chosen, the same every time.
    let q = json!({"total": {"$gt": 1000, "$lte": 1010}, "status": "paid"});
    let e = c.explain(q.clone(), FindOptions::new()).unwrap();
    assert!(e.candidates.len() >= 3, "{e:?}");
    assert_eq!(e.candidates.iter().filter(|c| c.chosen).count(), 1);
    // Planned again afresh (the plan cache emptied): the same; from the
    // cache, the same plan without the trial.
    let cached = c.explain(q.clone(), FindOptions::new()).unwrap();
    assert!(
        cached.from_plan_cache && cached.plan == e.plan,
        "{cached:?}"
    );
    c.clear_plan_cache().unwrap();
    assert_eq!(c.explain(q.clone(), FindOptions::new()).unwrap(), e);
    assert_eq!(e.returned, naive(&q));
    assert!(e.keys_examined <= 50, "{e:?}");

    // Once `total` holds an array, each bound may match another element
    // (MongoDB's semantics): the scan uses one bound and the filter.
    let arr = doc(json!({"_id": 20_000, "total": [5, 2000], "status": "new", "created": 1}));
    c.insert(&arr).unwrap();
    let q = json!({"total": {"$gt": 1000, "$lte": 1010}});
    let got: Vec<i64> = c
        .find(q.clone())
        .unwrap()
        .map(|d| d.unwrap().get("_id").and_then(Value::as_i64).unwrap())
        .collect();
    assert!(got.contains(&20_000), "{got:?}");
    assert_eq!(got.len(), 51);
    let e = c.explain(q, FindOptions::new()).unwrap();
    assert!(!e.plan.to_string().contains(" and "), "{}", e.plan);
    // Nor is a bounded scan of a multikey index read in its order.
    let q = json!({"total": {"$gte": 1990}});
    let e = c
        .explain(
            q,
            FindOptions::new()
                .sort(json!({"total": 1}))
                .unwrap()
                .limit(3),
        )
        .unwrap();
    assert!(e.sorted_in_memory, "{e:?}");
}

/// `$regex` with a literal anchored prefix (also with the `s` option, or
/// followed by more pattern) scans that prefix's index range; `$all`
/// scans its first value's entries; `$type`, `$mod` and `$expr` filter a
/// scan. Results equal the unindexed collection's.
#[test]
fn regex_prefix_and_all_use_indexes() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::create(dir.path().join("r.cairn")).unwrap();
    let c = crate::common::unsynced(&db, "c");
    let words = [
        "apple", "apricot", "banana", "Apple", "cherry", "avocado", "apex",
    ];
    let docs: Vec<Document> = (0..700)
        .map(|i| {
            match Value::from_json(
                json!({"_id": i, "w": words[i % 7], "t": [i % 5, i % 3], "n": i}),
            )
            .unwrap()
            {
                Value::Object(d) => d,
                _ => unreachable!(),
            }
        })
        .collect();
    c.insert_many(&docs).unwrap();
    let plain: Vec<(Json, usize)> = [
        (json!({"w": {"$regex": "^ap"}}), 300),
        (json!({"w": {"$regex": "^apr?i", "$options": "s"}}), 100),
        (json!({"w": {"$regex": "^AP", "$options": "i"}}), 400),
        (json!({"t": {"$all": [4, 2]}}), 46),
        (
            json!({"n": {"$mod": [7, 3]}, "w": {"$type": "string"}}),
            100,
        ),
        (json!({"$expr": {"$lt": ["$n", 10]}}), 10),
    ]
    .into_iter()
    .map(|(f, n)| {
        assert_eq!(c.count(f.clone()).unwrap(), n as u64, "{f}");
        (f, n)
    })
    .collect();
    c.create_index(&[("w", 1)], IndexOptions::default())
        .unwrap();
    c.create_index(&[("t", 1)], IndexOptions::default())
        .unwrap();
    for (f, n) in &plain {
        let e = c.explain(f.clone(), FindOptions::new()).unwrap();
        assert_eq!(e.returned, *n as u64, "{f}");
        let plan = e.plan.to_string();
        let indexed = f.get("t").is_some() || f["w"].get("$options").is_none_or(|o| o == "s");
        if f.get("$expr").is_none() && f.get("n").is_none() && indexed {
            assert!(plan.contains("index"), "{f}: {plan}");
            assert!(e.docs_examined < 700, "{f}: {e:?}");
        } else {
            assert!(plan.contains("full scan"), "{f}: {plan}");
        }
    }
}

/// `find_one_and_update` / `_replace` / `_delete` return the document
/// before or after, honour `sort` and `upsert`; `rename_collection` moves
/// documents and indexes, refuses an existing target unless told to drop
/// it, and writes nothing when it fails.
#[test]
fn find_one_and_modify_and_rename() {
    use cairndb::document::{FindOneAndOptions, ReturnDocument, SortSpec};
    let dir = tempfile::tempdir().unwrap();
    let db = Database::create(dir.path().join("f.cairn")).unwrap();
    let c = db.collection::<Document>("jobs");
    let doc = |j: Json| match Value::from_json(j).unwrap() {
        Value::Object(d) => d,
        _ => unreachable!(),
    };
    let json_of = |d: Option<Document>| d.map(|d| Value::Object(d).to_json());
    c.insert_many(&[
        doc(json!({"_id": 1, "state": "new", "pri": 2})),
        doc(json!({"_id": 2, "state": "new", "pri": 9})),
        doc(json!({"_id": 3, "state": "done", "pri": 5})),
    ])
    .unwrap();
    c.create_index(&[("state", 1)], IndexOptions::default())
        .unwrap();
    let by_pri = FindOneAndOptions {
        sort: Some(SortSpec::parse(json!({"pri": -1})).unwrap()),
        ..Default::default()
    };
    // Before (the default): the highest-priority new job, as it was.
    let got = c
        .find_one_and_update(
            json!({"state": "new"}),
            json!({"$set": {"state": "run"}}),
            by_pri.clone(),
        )
        .unwrap();
    assert_eq!(
        json_of(got),
        Some(json!({"_id": 2, "state": "new", "pri": 9}))
    );
    // After: the next one, as it is now.
    let after = FindOneAndOptions {
        return_document: ReturnDocument::After,
        ..by_pri.clone()
    };
    let got = c
        .find_one_and_update(
            json!({"state": "new"}),
            json!({"$set": {"state": "run"}}),
            after.clone(),
        )
        .unwrap();
    assert_eq!(
        json_of(got),
        Some(json!({"_id": 1, "state": "run", "pri": 2}))
    );
    // Nothing left: None, nothing written; with upsert, the inserted one.
    assert_eq!(
        c.find_one_and_update(
            json!({"state": "new"}),
            json!({"$set": {"x": 1}}),
            by_pri.clone()
        )
        .unwrap(),
        None
    );
    let up = FindOneAndOptions {
        upsert: true,
        return_document: ReturnDocument::After,
        ..Default::default()
    };
    let got = c
        .find_one_and_update(
            json!({"_id": 7, "state": "new"}),
            json!({"$set": {"pri": 1}}),
            up,
        )
        .unwrap();
    assert_eq!(
        json_of(got),
        Some(json!({"_id": 7, "state": "new", "pri": 1}))
    );
    // Replace keeps the _id; an update with a replacement is refused.
    let got = c
        .find_one_and_replace(json!({"_id": 3}), &doc(json!({"state": "archived"})), after)
        .unwrap();
    assert_eq!(json_of(got), Some(json!({"_id": 3, "state": "archived"})));
    assert!(c
        .find_one_and_update(
            json!({"_id": 3}),
            json!({"state": "x"}),
            FindOneAndOptions::default()
        )
        .is_err());
    // Delete the lowest-priority job and get it back.
    let low = FindOneAndOptions {
        sort: Some(SortSpec::parse(json!({"pri": 1})).unwrap()),
        ..Default::default()
    };
    let got = c
        .find_one_and_delete(json!({"pri": {"$gte": 0}}), low)
        .unwrap();
    assert_eq!(
        json_of(got),
        Some(json!({"_id": 7, "state": "new", "pri": 1}))
    );
    assert_eq!(c.count(json!({})).unwrap(), 3);
    assert_eq!(c.check_indexes().unwrap(), Vec::<String>::new());

    // Rename: documents and indexes move; the old name is gone.
    db.collection::<Document>("other")
        .insert(&doc(json!({"_id": 1})))
        .unwrap();
    assert!(matches!(
        db.rename_collection("jobs", "other", false),
        Err(DocumentError::CollectionExists(_))
    ));
    assert!(matches!(
        db.rename_collection("nope", "x", false),
        Err(DocumentError::CollectionNotFound(_))
    ));
    assert_eq!(db.list_collections().unwrap(), ["jobs", "other"]);
    c.rename("tasks", false).unwrap();
    assert_eq!(db.list_collections().unwrap(), ["other", "tasks"]);
    let t = db.collection::<Document>("tasks");
    assert_eq!(t.count(json!({})).unwrap(), 3);
    assert_eq!(t.list_indexes().unwrap().len(), 1);
    let e = t
        .explain(json!({"state": "run"}), FindOptions::new())
        .unwrap();
    assert!(e.plan.to_string().contains("state"), "{}", e.plan);
    assert_eq!(e.returned, 2);
    assert_eq!(c.count(json!({})).unwrap(), 0);
    // drop_target replaces the target.
    db.rename_collection("tasks", "other", true).unwrap();
    assert_eq!(db.list_collections().unwrap(), ["other"]);
    assert_eq!(
        db.collection::<Document>("other").count(json!({})).unwrap(),
        3
    );
    assert_eq!(
        db.collection::<Document>("other").check_indexes().unwrap(),
        Vec::<String>::new()
    );
}

// ---------------------------------------------------------------------------
// MongoDB's value semantics against a reference written over serde_json
// (issue 18): an evaluator that knows nothing of the engine's types, written
// from MongoDB's manual:
// - "Comparison/Sort Order" (bson-type-comparison-order): the type order
//   MinKey < Null < Numbers < Symbol/String < Object < Array < BinData <
//   ObjectId < Boolean < Date < Timestamp < RegEx < MaxKey; objects compare
//   pair by pair (field type, then name, then value; fewer pairs first);
//   arrays sort by their smallest element ascending and largest descending,
//   and "a comparison of an empty array considers the empty array as less
//   than a null value or a missing field value"; a missing field sorts as
//   null;
// - "Comparison Query Operators" and "Type Bracketing": `$gt`/`$lt`/... only
//   match values of the operand's type;
// - "Query for Null or Missing Fields": `{f: null}` matches null and missing
//   fields (and `$in: [null]` likewise); through an array of subdocuments, an
//   element lacking the field counts as missing, while scalar elements reach
//   nothing;
// - `$ne` / `$nin`: the documents the positive form does not match (`$ne`
//   over an array: no element, nor the array, equals the value).
// ---------------------------------------------------------------------------

/// MongoDB's type bracket of a JSON value (the order of the manual's list),
/// Extended JSON's `$date` (Date), `$uuid` and `$binary` (BinData) included.
fn ref_bracket(v: &Json) -> u8 {
    match v {
        Json::Null => 1,
        Json::Number(_) => 2,
        Json::String(_) => 3,
        Json::Object(_) if ref_date_ms(v).is_some() => 9,
        Json::Object(_) if ref_bin_data(v).is_some() => 6,
        Json::Object(_) => 4,
        Json::Array(_) => 5,
        Json::Bool(_) => 8,
    }
}

/// The milliseconds of an Extended JSON date, `{"$date": {"$numberLong":
/// "<ms>"}}` or `{"$date": "YYYY-MM-DDTHH:MM:SS.mmmZ"}`, the day count
/// found by walking the calendar from 1970 (obviously right, slow).
fn ref_date_ms(v: &Json) -> Option<i64> {
    let m = v.as_object()?;
    if m.len() != 1 {
        return None;
    }
    let d = m.get("$date")?;
    if let Some(n) = d.get("$numberLong") {
        return n.as_str()?.parse().ok();
    }
    let t = d.as_str()?;
    let n = |r: std::ops::Range<usize>| t[r].parse::<i64>().unwrap();
    let (y, mo, day) = (n(0..4), n(5..7), n(8..10));
    let leap = |y: i64| y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
    let mut days: i64 = (1970..y).map(|y| if leap(y) { 366 } else { 365 }).sum();
    let months = [
        31,
        if leap(y) { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    days += months[..(mo - 1) as usize].iter().sum::<i64>() + day - 1;
    Some(((days * 24 + n(11..13)) * 60 + n(14..16)) * 60_000 + n(17..19) * 1000 + n(20..23))
}

/// BinData as MongoDB compares it, (length, subtype, bytes), for the
/// Extended JSON forms the generator writes: `$uuid` (subtype 4) and
/// `$binary` (subtype 0; base64 of the few values `mixed_value` uses).
fn ref_bin_data(v: &Json) -> Option<(usize, u8, Vec<u8>)> {
    let m = v.as_object()?;
    if m.len() != 1 {
        return None;
    }
    if let Some(u) = m.get("$uuid") {
        let hex: String = u.as_str()?.chars().filter(|c| *c != '-').collect();
        let b: Vec<u8> = (0..16)
            .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
            .collect();
        return Some((16, 4, b));
    }
    let b = match m.get("$binary")?.as_str()? {
        "AAAAAAAAAAAAAAAAAAAAAA==" => vec![0u8; 16],
        "AQ==" => vec![1u8],
        "AAAAAAAAAAAAAAAAAAAAAAA=" => vec![0u8; 17],
        other => panic!("reference: unknown binary {other}"),
    };
    Some((b.len(), 0, b))
}

/// Whether `v` is an Extended JSON date or BinData: a scalar, not an object.
fn ref_special(v: &Json) -> bool {
    ref_date_ms(v).is_some() || ref_bin_data(v).is_some()
}

/// Dates and BinData for `mixed_value`, in MongoDB Extended JSON v2:
/// dates around the epoch (ISO and `$numberLong` forms), UUIDs beside
/// binaries of 1, 16 and 17 bytes (BinData compares length, then subtype).
fn special_scalar(rng: &mut SplitMix64) -> Json {
    match rng.below(8) {
        0 => json!({"$date": {"$numberLong": "-1"}}),
        1 => json!({"$date": "1970-01-01T00:00:00.000Z"}),
        2 => json!({"$date": "1970-01-01T00:00:00.001Z"}),
        3 => json!({"$date": "2024-02-29T12:00:00.500Z"}),
        4 => json!({"$uuid": "00000000-0000-0000-0000-000000000000"}),
        5 => json!({"$uuid": "00000000-0000-0000-0000-000000000001"}),
        6 => json!({"$binary": "AAAAAAAAAAAAAAAAAAAAAA=="}),
        _ => {
            let b = ["AQ==", "AAAAAAAAAAAAAAAAAAAAAAA="][rng.below(2) as usize];
            json!({ "$binary": b })
        }
    }
}

/// MongoDB's comparison of two values inside documents or arrays.
fn ref_cmp_inner(a: &Json, b: &Json) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    let (ra, rb) = (ref_bracket(a), ref_bracket(b));
    if ra != rb {
        return ra.cmp(&rb);
    }
    if ra == 9 {
        return ref_date_ms(a).cmp(&ref_date_ms(b));
    }
    if ra == 6 {
        return ref_bin_data(a).cmp(&ref_bin_data(b));
    }
    match (a, b) {
        (Json::Number(x), Json::Number(y)) => x
            .as_f64()
            .unwrap()
            .partial_cmp(&y.as_f64().unwrap())
            .unwrap(),
        (Json::String(x), Json::String(y)) => x.as_bytes().cmp(y.as_bytes()),
        (Json::Bool(x), Json::Bool(y)) => x.cmp(y),
        (Json::Array(x), Json::Array(y)) => x
            .iter()
            .zip(y)
            .map(|(p, q)| ref_cmp_inner(p, q))
            .find(|o| *o != Ordering::Equal)
            .unwrap_or_else(|| x.len().cmp(&y.len())),
        (Json::Object(x), Json::Object(y)) => x
            .iter()
            .zip(y)
            .map(|((kp, p), (kq, q))| {
                ref_bracket(p)
                    .cmp(&ref_bracket(q))
                    .then_with(|| kp.as_bytes().cmp(kq.as_bytes()))
                    .then_with(|| ref_cmp_inner(p, q))
            })
            .find(|o| *o != Ordering::Equal)
            .unwrap_or_else(|| x.len().cmp(&y.len())),
        _ => Ordering::Equal,
    }
}

/// The sort comparison of two sort-key values: an empty array is less than
/// null (the manual's "Arrays" section).
fn ref_cmp_sort(a: &Json, b: &Json) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    let empty = |v: &Json| matches!(v, Json::Array(x) if x.is_empty());
    match (empty(a), empty(b)) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
        _ => ref_cmp_inner(a, b),
    }
}

/// What `path` reaches for a query: the values at its end (`Some`), and
/// `None` where it dies in an object or at a scalar (missing).
fn ref_reach<'a>(v: &'a Json, path: &[&str], out: &mut Vec<Option<&'a Json>>) {
    let Some((seg, rest)) = path.split_first() else {
        out.push(Some(v));
        return;
    };
    match v {
        Json::Object(m) if !ref_special(v) => match m.get(*seg) {
            Some(x) => ref_reach(x, rest, out),
            None => out.push(None),
        },
        Json::Array(items) => {
            for e in items {
                if e.is_object() && !ref_special(e) {
                    ref_reach(e, path, out);
                }
            }
        }
        _ => out.push(None),
    }
}

/// Equality of a reached value (or missing) with an operand; an array
/// matches when it or one of its elements is equal.
fn ref_eq(x: Option<&Json>, operand: &Json) -> bool {
    match x {
        None => operand.is_null(),
        Some(Json::Array(items)) => {
            ref_cmp_inner(&Json::Array(items.clone()), operand).is_eq()
                || items.iter().any(|e| ref_cmp_inner(e, operand).is_eq())
        }
        Some(x) => ref_cmp_inner(x, operand).is_eq(),
    }
}

/// A range comparison within the operand's type bracket (an array: the
/// array itself or one of its elements).
fn ref_range(x: Option<&Json>, op: &str, operand: &Json) -> bool {
    let holds = |v: &Json| {
        if ref_bracket(v) != ref_bracket(operand) {
            return false;
        }
        let o = ref_cmp_inner(v, operand);
        match op {
            "$gt" => o.is_gt(),
            "$gte" => o.is_ge(),
            "$lt" => o.is_lt(),
            _ => o.is_le(),
        }
    };
    match x {
        None => operand.is_null() && matches!(op, "$gte" | "$lte"),
        Some(Json::Array(items)) => holds(&Json::Array(items.clone())) || items.iter().any(holds),
        Some(v) => holds(v),
    }
}

/// An element of an `$in`/`$nin` array against a reached value: a
/// regular expression `{"$regex": p, "$options": o}` matches a string or an
/// array holding one (MongoDB manual, "$in": "Use the $in Operator with a
/// Regular Expression"); any other element is an equality.
fn ref_in_item(x: Option<&Json>, item: &Json) -> bool {
    let Some(re) = item.get("$regex").and_then(Json::as_str) else {
        return ref_eq(x, item);
    };
    let opts = item.get("$options").and_then(Json::as_str).unwrap_or("");
    match x {
        Some(Json::String(s)) => ref_regex(re, opts, s),
        Some(Json::Array(items)) => items
            .iter()
            .any(|e| matches!(e, Json::String(s) if ref_regex(re, opts, s))),
        _ => false,
    }
}

/// The reference's regular expressions: a literal with optional `^` and
/// `$` anchors, option `i` folding case.
fn ref_regex(pattern: &str, options: &str, s: &str) -> bool {
    let fold = |t: &str| {
        if options.contains('i') {
            t.to_lowercase()
        } else {
            t.to_string()
        }
    };
    let s = fold(s);
    let (start, rest) = match pattern.strip_prefix('^') {
        Some(r) => (true, r),
        None => (false, pattern),
    };
    let (end, lit) = match rest.strip_suffix('$') {
        Some(l) => (true, l),
        None => (false, rest),
    };
    let lit = fold(lit);
    match (start, end) {
        (true, true) => s == lit,
        (true, false) => s.starts_with(&lit),
        (false, true) => s.ends_with(&lit),
        (false, false) => s.contains(&lit),
    }
}

fn ref_cond(doc: &Json, path: &[&str], op: &str, operand: &Json) -> bool {
    let mut reached = Vec::new();
    ref_reach(doc, path, &mut reached);
    let any = |f: &dyn Fn(Option<&Json>) -> bool| reached.iter().any(|x| f(*x));
    match op {
        "$eq" => any(&|x| ref_eq(x, operand)),
        "$ne" => !any(&|x| ref_eq(x, operand)),
        "$in" => any(&|x| {
            operand
                .as_array()
                .unwrap()
                .iter()
                .any(|v| ref_in_item(x, v))
        }),
        "$nin" => !any(&|x| {
            operand
                .as_array()
                .unwrap()
                .iter()
                .any(|v| ref_in_item(x, v))
        }),
        "$exists" => reached.iter().any(Option::is_some) == operand.as_bool().unwrap(),
        // MongoDB's `$not`: the documents its operator expression does
        // not select (`{$not: {$eq: null}}` is `{$ne: null}`).
        "$not" => !operand
            .as_object()
            .unwrap()
            .iter()
            .all(|(op, v)| ref_cond(doc, path, op, v)),
        _ => any(&|x| ref_range(x, op, operand)),
    }
}

fn ref_matches(doc: &Json, filter: &Json) -> bool {
    filter
        .as_object()
        .unwrap()
        .iter()
        .all(|(k, v)| match k.as_str() {
            "$or" => v.as_array().unwrap().iter().any(|f| ref_matches(doc, f)),
            "$nor" => !v.as_array().unwrap().iter().any(|f| ref_matches(doc, f)),
            "$and" => v.as_array().unwrap().iter().all(|f| ref_matches(doc, f)),
            path => {
                let segs: Vec<&str> = path.split('.').collect();
                // An Extended JSON date or BinData is a literal, not operators.
                let literal = ref_special(v);
                match v.as_object() {
                    Some(ops)
                        if !literal
                            && ops.keys().all(|o| o.starts_with('$'))
                            && !ops.is_empty() =>
                    {
                        ops.iter()
                            .all(|(op, operand)| ref_cond(doc, &segs, op, operand))
                    }
                    _ => ref_cond(doc, &segs, "$eq", v),
                }
            }
        })
}

/// The values a sort on `path` sees in `doc`: the values reached (an array
/// at the end gives its elements; an empty one, itself); none: null.
fn ref_sort_values<'a>(v: &'a Json, path: &[&str], out: &mut Vec<&'a Json>) {
    let Some((seg, rest)) = path.split_first() else {
        match v {
            Json::Array(items) if !items.is_empty() => out.extend(items.iter()),
            _ => out.push(v),
        }
        return;
    };
    match v {
        Json::Object(m) if !ref_special(v) => {
            if let Some(x) = m.get(*seg) {
                ref_sort_values(x, rest, out);
            }
        }
        Json::Array(items) => {
            for e in items {
                if e.is_object() && !ref_special(e) {
                    ref_sort_values(e, path, out);
                }
            }
        }
        _ => {}
    }
}

/// A document's sort key: per path, the smallest value ascending, the
/// largest descending.
fn ref_sort_key(doc: &Json, spec: &[(&str, i8)]) -> Vec<Json> {
    spec.iter()
        .map(|(p, dir)| {
            let segs: Vec<&str> = p.split('.').collect();
            let mut vals = Vec::new();
            ref_sort_values(doc, &segs, &mut vals);
            // An array element lacking the field sorts as null (MongoDB:
            // the sort key is taken over the index keys, which hold null
            // for it).
            if !vals.is_empty() && ref_cond(doc, &segs, "$eq", &Json::Null) {
                vals.push(&Json::Null);
            }
            vals.into_iter()
                .reduce(|best, v| {
                    let o = ref_cmp_sort(v, best);
                    if (*dir > 0 && o.is_lt()) || (*dir < 0 && o.is_gt()) {
                        v
                    } else {
                        best
                    }
                })
                .cloned()
                .unwrap_or(Json::Null)
        })
        .collect()
}

fn ref_cmp_keys(a: &[Json], b: &[Json], spec: &[(&str, i8)]) -> std::cmp::Ordering {
    a.iter()
        .zip(b)
        .zip(spec)
        .map(|((x, y), (_, dir))| {
            let o = ref_cmp_sort(x, y);
            if *dir < 0 {
                o.reverse()
            } else {
                o
            }
        })
        .find(|o| o.is_ne())
        .unwrap_or(std::cmp::Ordering::Equal)
}

/// Values of every type CairnDB and JSON share, with ties across types
/// (`1` and `1.0`), empty and nested arrays, subdocuments, and dates and
/// BinData (UUIDs and binaries) in Extended JSON.
fn mixed_value(rng: &mut SplitMix64, depth: u32) -> Json {
    let n = if depth > 1 { 11 } else { 16 };
    let r = rng.below(n);
    if r >= n - 2 {
        return special_scalar(rng);
    }
    match r {
        0 => Json::Null,
        1 => json!(rng.below(2) == 0),
        2 => json!(rng.below(5) as i64 - 1),
        3 => json!(rng.below(4) as f64),
        4 => json!(rng.below(6) as f64 / 2.0 - 1.0),
        5 | 6 => json!(["", "a", "b", "ab"][rng.below(4) as usize]),
        7 => json!([]),
        8 => json!({}),
        9 | 10 => Json::Array(
            (0..1 + rng.below(3))
                .map(|_| mixed_value(rng, depth + 1))
                .collect(),
        ),
        11 => {
            // An array of subdocuments, some lacking `b`.
            Json::Array(
                (0..1 + rng.below(3))
                    .map(|_| {
                        if rng.below(3) == 0 {
                            json!({"c": 1})
                        } else {
                            json!({ "b": mixed_value(rng, depth + 2) })
                        }
                    })
                    .collect(),
            )
        }
        _ => {
            let mut m = serde_json::Map::new();
            for f in ["b", "c"] {
                if rng.below(2) == 0 {
                    m.insert(f.into(), mixed_value(rng, depth + 1));
                }
            }
            Json::Object(m)
        }
    }
}

fn mixed_operand(rng: &mut SplitMix64) -> Json {
    match rng.below(10) {
        0..=5 => mixed_value(rng, 2),
        6 => Json::Null,
        7 => json!([]),
        8 => json!({"b": 1}),
        _ => json!(rng.below(2) == 1),
    }
}

fn mixed_filter(rng: &mut SplitMix64, depth: u32) -> Json {
    if depth < 2 && rng.below(6) == 0 {
        let op = ["$or", "$and", "$nor"][rng.below(3) as usize];
        return json!({ op: [mixed_filter(rng, depth + 1), mixed_filter(rng, depth + 1)] });
    }
    let path = ["a", "a.b", "c", "a.c"][rng.below(4) as usize];
    let v = mixed_operand(rng);
    let pattern = |rng: &mut SplitMix64| {
        let p = ["^a", "b$", "^$", "A", "^ab$"][rng.below(5) as usize];
        let o = ["", "i"][rng.below(2) as usize];
        json!({"$regex": p, "$options": o})
    };
    let cond = match rng.below(14) {
        0 => v,
        1 => json!({"$eq": v}),
        2 => json!({"$ne": v}),
        3 => json!({"$gt": v}),
        4 => json!({"$gte": v}),
        5 => json!({"$lt": v}),
        6 => json!({"$lte": v}),
        7 => json!({"$in": [v, mixed_operand(rng)]}),
        8 => json!({"$in": [null]}),
        9 => json!({"$nin": [v, Json::Null]}),
        10 => match rng.below(2) {
            0 => json!({"$ne": null}),
            _ => json!({"$not": {"$eq": null}}),
        },
        // Regular expressions inside $in and $nin.
        11 => json!({"$in": [pattern(rng), v]}),
        12 => json!({"$nin": [v, pattern(rng)]}),
        _ => json!({"$exists": rng.below(2) == 0}),
    };
    json!({ path: cond })
}

fn ids_of_json(docs: &[Json]) -> Vec<i64> {
    let mut v: Vec<i64> = docs.iter().map(|d| d["_id"].as_i64().unwrap()).collect();
    v.sort();
    v
}

/// Mixed-type documents (booleans, null and missing, empty and nested
/// arrays, arrays of subdocuments lacking a field, `1` beside `1.0`, dates
/// beside numbers, UUIDs beside 16-byte binaries) queried
/// with equality, ranges, `$ne`/`$nin`/`$in: [null]`, `$in`/`$nin` holding
/// regular expressions, and sorted across types:
/// a collection without indexes and one with indexes (single, descending,
/// compound, multikey, sparse) give exactly the reference's matches, and
/// sorted results come in the reference's order (MongoDB's).
#[test]
fn mongodb_semantics_equal_the_json_reference() {
    let seed = crate::common::seed("mongo-ref");
    let cases = crate::common::iters(4);
    let mut rng = SplitMix64(seed);
    let (mut compared, mut mismatches, mut index_plans) = (0u64, 0u64, 0u64);
    let mut dotted_not_null = 0u64;
    for case in 0..cases {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::create(dir.path().join("m.cairn")).unwrap();
        let plain = crate::common::unsynced(&db, "plain");
        let indexed = crate::common::unsynced(&db, "indexed");
        for (fields, sparse) in [
            (vec![("a", 1i8)], false),
            (vec![("a.b", -1)], false),
            (vec![("c", -1), ("a.c", 1)], false),
            (vec![("c", 1)], true),
            // Sparse on a dotted path: `$exists: true` reads it while no
            // document has an array at `a` (odd cases).
            (vec![("a.c", 1)], true),
        ] {
            indexed
                .create_index(
                    &fields,
                    IndexOptions {
                        sparse,
                        ..Default::default()
                    },
                )
                .unwrap();
        }
        let mut docs: Vec<Json> = Vec::new();
        for i in 0..150i64 {
            let mut m = serde_json::Map::new();
            m.insert("_id".into(), json!(i));
            for f in ["a", "c"] {
                if rng.below(6) != 0 {
                    let mut v = mixed_value(&mut rng, 0);
                    if case % 2 == 1 && f == "a" {
                        // No array at `a`: dotted not-null and exists
                        // conditions read the indexes on a.b and a.c.
                        if let Json::Array(items) = v {
                            v = items.into_iter().next().unwrap_or(json!({}));
                            if v.is_array() {
                                v = json!({"b": v});
                            }
                        }
                    }
                    m.insert(f.into(), v);
                }
            }
            let j = Json::Object(m);
            let d = doc(j.clone());
            match indexed.insert(&d) {
                Ok(_) => {
                    plain.insert(&d).unwrap();
                    docs.push(j);
                }
                // Arrays in both fields of the compound index.
                Err(DocumentError::IndexError { .. }) => {}
                Err(e) => panic!("{e}"),
            }
        }
        for q in 0..200 {
            let fj = mixed_filter(&mut rng, 0);
            let ctx = format!("seed {seed} case {case} query {q}: {fj}");
            let want: Vec<Json> = docs
                .iter()
                .filter(|d| ref_matches(d, &fj))
                .cloned()
                .collect();
            let got = |c: &cairndb::document::Collection<'_, Document>| -> Vec<Json> {
                c.find(fj.clone())
                    .unwrap()
                    .map(|d| Value::Object(d.unwrap()).to_json())
                    .collect()
            };
            let (a, b) = (got(&plain), got(&indexed));
            compared += 1;
            if ids_of_json(&a) != ids_of_json(&want) || ids_of_json(&b) != ids_of_json(&want) {
                eprintln!(
                    "{ctx}: reference {:?} plain {:?} indexed {:?}",
                    ids_of_json(&want),
                    ids_of_json(&a),
                    ids_of_json(&b)
                );
                mismatches += 1;
            }
            let e = indexed.explain(fj.clone(), FindOptions::new()).unwrap();
            if !e.plan.to_string().starts_with("full") {
                index_plans += 1;
            }
            let shown = e.plan.to_string();
            if shown.contains("a.b (null, MaxKey]")
                || shown.contains("a.c (null, MaxKey]")
                || shown.contains("a.c [MinKey, MaxKey]")
            {
                dotted_not_null += 1;
            }
            if q % 3 == 0 {
                let specs: [&[(&str, i8)]; 5] = [
                    &[("a", 1)],
                    &[("a", -1)],
                    &[("a.b", -1)],
                    &[("c", -1), ("a.c", 1)],
                    &[("c", 1)],
                ];
                let spec = specs[rng.below(5) as usize];
                let spec_json = Json::Array(spec.iter().map(|(p, d)| json!({ *p: d })).collect());
                let mut want_keys: Vec<Vec<Json>> =
                    want.iter().map(|d| ref_sort_key(d, spec)).collect();
                want_keys.sort_by(|x, y| ref_cmp_keys(x, y, spec));
                for (name, c) in [("plain", &plain), ("indexed", &indexed)] {
                    for limit in [None, Some(5u64)] {
                        let mut opts = FindOptions::new().sort(spec_json.clone()).unwrap();
                        if let Some(l) = limit {
                            opts = opts.limit(l);
                        }
                        let keys: Vec<Vec<Json>> = c
                            .find_with(fj.clone(), opts)
                            .unwrap()
                            .map(|d| ref_sort_key(&Value::Object(d.unwrap()).to_json(), spec))
                            .collect();
                        let n =
                            limit.map_or(want_keys.len(), |l| (l as usize).min(want_keys.len()));
                        let same = keys.len() == n
                            && keys
                                .iter()
                                .zip(&want_keys)
                                .all(|(x, y)| ref_cmp_keys(x, y, spec).is_eq());
                        if !same {
                            eprintln!(
                                "{ctx}: {name} sorted by {spec_json} limit {limit:?}: got {keys:?} want {:?}",
                                &want_keys[..n]
                            );
                            mismatches += 1;
                        }
                    }
                }
            }
        }
        assert!(indexed.check_indexes().unwrap().is_empty());
    }
    crate::common::report(&format!(
        "mongo-ref: cases={cases} queries={compared} index_plans={index_plans} dotted_not_null={dotted_not_null} mismatches={mismatches} seed={seed}"
    ));
    assert_eq!(mismatches, 0);
    assert!(index_plans > 0);
    assert!(
        cases < 2 || dotted_not_null > 0,
        "no not-null plan on a dotted path"
    );
}

/// Values longer than an index key holds whole (256 encoded bytes) are
/// indexed by their first bytes and a hash (FORMAT.md, "Long values"):
/// inserts and `create_index` over existing long values succeed; equality
/// stays exact, also for long values sharing their first 300 bytes; ranges
/// with short operands use the index and agree with a scan; a unique index
/// refuses an equal long value and accepts one sharing only a prefix.
#[test]
fn long_values_are_indexed_by_prefix_and_hash() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::create(dir.path().join("l.cairn")).unwrap();
    let c = crate::common::unsynced(&db, "long");
    let prefix = "p".repeat(300);
    let long = |tail: &str| format!("{prefix}{tail}");
    let mut values: Vec<String> = vec![
        long("a"),
        long("b"),
        long("ab"),
        long(""),
        "p".repeat(299),
        "p".repeat(254),
        "q".repeat(1000),
        "a".into(),
        "z".repeat(2000),
        "p".repeat(253) + "z",
    ];
    values.extend((0..20).map(|i| format!("{}{i:03}", "m".repeat(400))));
    // Existing documents with long values, then the index.
    for (i, v) in values.iter().enumerate() {
        c.insert(&doc(json!({"_id": i, "s": v, "n": i}))).unwrap();
    }
    c.create_index(&[("s", 1)], IndexOptions::default())
        .unwrap();
    c.create_index(&[("n", 1), ("s", -1)], IndexOptions::default())
        .unwrap();
    // And inserts after it.
    for (i, v) in values.iter().enumerate() {
        let i = i + 100;
        c.insert(&doc(json!({"_id": i, "s": [v, "x"], "n": i})))
            .unwrap();
    }
    assert!(c.check_indexes().unwrap().is_empty());
    let all: Vec<Document> = c.find(json!({})).unwrap().map(Result::unwrap).collect();
    let check = |q: Json, want_index: bool| {
        let f = Filter::parse(q.clone()).unwrap();
        let want = ids(&all
            .iter()
            .filter(|d| f.matches_document(d).unwrap())
            .cloned()
            .collect::<Vec<_>>());
        let got: Vec<Document> = c.find(q.clone()).unwrap().map(Result::unwrap).collect();
        assert_eq!(ids(&got), want, "{q}");
        let e = c.explain(q.clone(), FindOptions::new()).unwrap();
        assert_eq!(
            !e.plan.to_string().starts_with("full"),
            want_index,
            "{q}: {}",
            e.plan
        );
        want.len()
    };
    for v in &values {
        // Equality on a long value: exact (its document and the array one),
        // through the index whether whole (`0x30`, up to 253 bytes, `00 01`)
        // or cut.
        assert_eq!(check(json!({ "s": v }), true), 2, "{v:.20}");
    }
    assert_eq!(
        check(json!({"s": {"$in": [long("a"), long("zz")]}}), true),
        2
    );
    // Long `_id`s are whole keys: equality on them still finds them.
    let by_id = crate::common::unsynced(&db, "ids");
    by_id
        .insert(&doc(json!({"_id": long("id"), "s": "i"})))
        .unwrap();
    by_id.insert(&doc(json!({"_id": 3, "s": "j"}))).unwrap();
    let found = |q: Json| by_id.find(q).unwrap().count();
    assert_eq!(found(json!({"_id": {"$in": [long("id"), 3]}})), 2);
    assert_eq!(found(json!({"_id": long("id")})), 1);
    // Ranges with short operands use the index and agree with the scan.
    assert!(check(json!({"s": {"$gt": "p"}}), true) > 10);
    assert!(check(json!({"s": {"$gte": "pp", "$lt": "q"}}), true) > 10);
    assert!(check(json!({"s": {"$lt": "n"}}), true) > 10);
    assert!(check(json!({"s": {"$prefix": "ppp"}}), true) > 10);
    check(json!({"s": {"$gt": long("a")}}), false);
    check(json!({"s": {"$lte": long("ab")}}), false);
    check(json!({"n": 3, "s": {"$lt": "q"}}), true);
    // Sorted by the index: in value order, long values sharing their
    // first bytes included (the index orders those by hash; the cursor
    // sorts each such run), the same as a sort in memory, both ways, with
    // and without a limit and a skip.
    for (dir, skip, limit) in [
        (1, 0, None),
        (-1, 0, None),
        (1, 3, Some(9)),
        (-1, 12, Some(4)),
    ] {
        let run = |hint: Option<Json>| {
            let mut o = FindOptions::new()
                .sort(json!({ "s": dir }))
                .unwrap()
                .skip(skip);
            if let Some(l) = limit {
                o = o.limit(l);
            }
            if let Some(h) = hint {
                o = o.hint(h).unwrap();
            }
            let e = c.explain(json!({"n": {"$lt": 100}}), o.clone()).unwrap();
            let got: Vec<Document> = c
                .find_with(json!({"n": {"$lt": 100}}), o)
                .unwrap()
                .map(Result::unwrap)
                .collect();
            (ids(&got), e.sorted_in_memory)
        };
        let (by_index, in_memory) = run(Some(json!({"s": 1})));
        assert!(!in_memory, "the index gives the order");
        let (by_sort, in_memory) = run(Some(json!({"$natural": 1})));
        assert!(in_memory);
        assert_eq!(
            by_index, by_sort,
            "sort {dir}, skip {skip}, limit {limit:?}"
        );
        assert_eq!(run(None).0, by_sort);
    }
    // A unique index over long values: equal ones refused, ones sharing a
    // long prefix accepted.
    let u = crate::common::unsynced(&db, "unique");
    u.create_index(
        &[("k", 1)],
        IndexOptions {
            unique: true,
            ..Default::default()
        },
    )
    .unwrap();
    u.insert(&doc(json!({"_id": 1, "k": long("a")}))).unwrap();
    u.insert(&doc(json!({"_id": 2, "k": long("b")}))).unwrap();
    u.insert(&doc(json!({"_id": 3, "k": long("")}))).unwrap();
    assert!(matches!(
        u.insert(&doc(json!({"_id": 4, "k": long("a")}))),
        Err(DocumentError::DuplicateKey { .. })
    ));
    assert_eq!(u.find(json!({"k": long("b")})).unwrap().count(), 1);
    assert!(u.check_indexes().unwrap().is_empty());
}

/// Regular expressions inside `$in` and `$nin` (MongoDB manual, "$in":
/// "Use the $in Operator with a Regular Expression"): an element
/// `{"$regex": …, "$options": …}` or Extended JSON's `{"$regularExpression":
/// {"pattern", "options"}}` matches strings (and arrays holding one) beside
/// the plain values; on a collection with an index on the field too; an
/// operator object there, or a bad expression, is an error naming it.
#[test]
fn in_and_nin_accept_regular_expressions() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::create(dir.path().join("r.cairn")).unwrap();
    let plain = crate::common::unsynced(&db, "plain");
    let indexed = crate::common::unsynced(&db, "indexed");
    indexed
        .create_index(&[("x", 1)], IndexOptions::default())
        .unwrap();
    let docs = [
        json!({"_id": 1, "x": "Hello"}),
        json!({"_id": 2, "x": "hello"}),
        json!({"_id": 3, "x": ["a", "Hat"]}),
        json!({"_id": 4, "x": 5}),
        json!({"_id": 5}),
        json!({"_id": 6, "x": "cat"}),
    ];
    for d in &docs {
        plain.insert(&doc(d.clone())).unwrap();
        indexed.insert(&doc(d.clone())).unwrap();
    }
    let cases = [
        (json!({"x": {"$in": [{"$regex": "^H"}]}}), vec![1, 3]),
        (
            json!({"x": {"$in": [{"$regex": "^h", "$options": "i"}, 5]}}),
            vec![1, 2, 3, 4],
        ),
        (
            json!({"x": {"$in": [{"$regularExpression": {"pattern": "at$", "options": ""}}, null]}}),
            vec![3, 5, 6],
        ),
        (json!({"x": {"$nin": [{"$regex": "^H"}]}}), vec![2, 4, 5, 6]),
        (
            json!({"x": {"$nin": [{"$regex": "l"}, 5, null]}}),
            vec![3, 6],
        ),
        (
            json!({"x": {"$not": {"$in": [{"$regex": "^H"}]}}}),
            vec![2, 4, 5, 6],
        ),
    ];
    for (f, want) in cases {
        for c in [&plain, &indexed] {
            let got: Vec<i64> = {
                let mut v: Vec<i64> = c
                    .find(f.clone())
                    .unwrap()
                    .map(|d| d.unwrap().get("_id").unwrap().as_i64().unwrap())
                    .collect();
                v.sort();
                v
            };
            assert_eq!(got, want, "{f}");
            assert_eq!(c.count(f.clone()).unwrap(), want.len() as u64, "{f}");
        }
        // The parsed filter writes back as it reads.
        let parsed = Filter::parse(f.clone()).unwrap();
        assert_eq!(
            Filter::from_value(parsed.to_value()).unwrap(),
            parsed,
            "{f}"
        );
    }
    for (bad, says) in [
        (
            json!({"x": {"$in": [{"$gt": 1}]}}),
            "not an object of operators",
        ),
        (json!({"x": {"$in": [{"$regex": "("}]}}), "does not compile"),
        (
            json!({"x": {"$nin": [{"$regex": "a", "$options": "q"}]}}),
            "option",
        ),
        (json!({"x": {"$in": [{"$regex": 5}]}}), "$regex"),
        (
            json!({"x": {"$in": [{"$regularExpression": {"pattern": "a", "flags": "i"}}]}}),
            "flags",
        ),
    ] {
        let e = match plain.find(bad.clone()) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("{bad} was accepted"),
        };
        assert!(e.contains(says), "{bad}: {e}");
    }
}
