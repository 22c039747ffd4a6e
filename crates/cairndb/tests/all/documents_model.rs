//! The document layer's model and the random operations checked against
//! it, shared by every backend of the storage seam: the embedded engine's
//! suite (`documents.rs`) and cairndb-etcd's
//! (`crates/cairndb-etcd/tests/all/documents.rs`, which includes this file
//! by its path) run the same operations against the same model. A backend
//! is a [`Target`] (a collection there).
//!
//! The model is a map from `_id` to document and the list of indexes; the
//! reference for a filter is the filter's naive evaluator on the model's
//! documents (`Filter::matches_document`, itself checked against a JSON
//! reference in `query.rs`), so what is compared is the backend's planner,
//! index maintenance and storage: inserts (single and many, all or
//! nothing), upserts, replaces, deletes by `_id` and by filter, updates by
//! filter, unique (`_id` and a unique index) violations, index creation and
//! removal, and finds with sort, skip, limit and projection, counts,
//! `find_one`, `get` and `len`.

use std::collections::BTreeMap;

use cairndb::document::query::{FindOptions, UpdateOptions};
use cairndb::document::{
    Collection, Document, DocumentError, Filter, IndexInfo, IndexOptions, SortSpec, Value,
};
use serde_json::{json, Value as Json};

/// A collection of one backend, as the driver calls it (each call its own
/// transaction); errors of the document layer as [`DocumentError`].
pub trait Target {
    fn insert(&self, d: &Document) -> Result<Value, DocumentError>;
    fn insert_many(&self, ds: &[Document]) -> Result<Vec<Value>, DocumentError>;
    fn upsert(&self, d: &Document) -> Result<bool, DocumentError>;
    fn replace(&self, d: &Document) -> Result<bool, DocumentError>;
    fn delete_id(&self, id: Value) -> Result<bool, DocumentError>;
    /// `update_many`: how many matched.
    fn update_many(&self, f: Json, u: Json) -> Result<u64, DocumentError>;
    fn delete_one(&self, f: Json) -> Result<u64, DocumentError>;
    fn delete_many(&self, f: Json) -> Result<u64, DocumentError>;
    fn create_index(
        &self,
        fields: &[(&str, i8)],
        unique: bool,
        sparse: bool,
    ) -> Result<IndexInfo, DocumentError>;
    fn drop_index(&self, name: &str) -> Result<bool, DocumentError>;
    fn list_indexes(&self) -> Result<Vec<IndexInfo>, DocumentError>;
    fn find(&self, f: Json, opts: FindOptions) -> Result<Vec<Document>, DocumentError>;
    fn find_one(&self, f: Json) -> Result<Option<Document>, DocumentError>;
    fn count(&self, f: Json) -> Result<u64, DocumentError>;
    fn get(&self, id: Value) -> Result<Option<Document>, DocumentError>;
    fn len(&self) -> Result<u64, DocumentError>;
}

/// The embedded engine's collection as a target.
impl Target for Collection<'_, Document> {
    fn insert(&self, d: &Document) -> Result<Value, DocumentError> {
        Collection::insert(self, d)
    }
    fn insert_many(&self, ds: &[Document]) -> Result<Vec<Value>, DocumentError> {
        Collection::insert_many(self, ds)
    }
    fn upsert(&self, d: &Document) -> Result<bool, DocumentError> {
        Collection::upsert(self, d)
    }
    fn replace(&self, d: &Document) -> Result<bool, DocumentError> {
        Collection::replace(self, d)
    }
    fn delete_id(&self, id: Value) -> Result<bool, DocumentError> {
        Collection::delete_id(self, id)
    }
    fn update_many(&self, f: Json, u: Json) -> Result<u64, DocumentError> {
        Ok(Collection::update_many(self, f, u, UpdateOptions::default())?.matched)
    }
    fn delete_one(&self, f: Json) -> Result<u64, DocumentError> {
        Collection::delete_one(self, f)
    }
    fn delete_many(&self, f: Json) -> Result<u64, DocumentError> {
        Collection::delete_many(self, f)
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
        Collection::create_index(self, fields, opts)
    }
    fn drop_index(&self, name: &str) -> Result<bool, DocumentError> {
        Collection::drop_index(self, name)
    }
    fn list_indexes(&self) -> Result<Vec<IndexInfo>, DocumentError> {
        Collection::list_indexes(self)
    }
    fn find(&self, f: Json, opts: FindOptions) -> Result<Vec<Document>, DocumentError> {
        Collection::find_with(self, f, opts)?.collect()
    }
    fn find_one(&self, f: Json) -> Result<Option<Document>, DocumentError> {
        Collection::find_one(self, f)
    }
    fn count(&self, f: Json) -> Result<u64, DocumentError> {
        Collection::count(self, f)
    }
    fn get(&self, id: Value) -> Result<Option<Document>, DocumentError> {
        Collection::get(self, id)
    }
    fn len(&self) -> Result<u64, DocumentError> {
        Collection::len(self)
    }
}

/// The indexes the driver creates: (fields, unique, sparse). The unique
/// one is on `u`, a scalar or missing (null) in every document; no index
/// names two fields that may both hold arrays.
type IndexSpec = (&'static [(&'static str, i8)], bool, bool);

const INDEXES: [IndexSpec; 5] = [
    (&[("x", 1)], false, false),
    (&[("y", -1)], false, false),
    (&[("u", 1), ("x", -1)], false, false),
    (&[("x.x", 1)], false, true),
    (&[("u", 1)], true, false),
];

fn index_name(fields: &[(&str, i8)]) -> String {
    fields
        .iter()
        .map(|(p, o)| format!("{p}_{o}"))
        .collect::<Vec<_>>()
        .join("_")
}

fn scalar(below: &mut dyn FnMut(u64) -> u64) -> Json {
    match below(7) {
        0 => Json::Null,
        1 => json!(below(2) == 0),
        2 => json!(below(10) as i64 - 3),
        3 => json!(below(10) as f64 / 2.0),
        _ => json!(["a", "b", "ab", "abc", "c", ""][below(6) as usize]),
    }
}

fn value(below: &mut dyn FnMut(u64) -> u64, depth: u32) -> Json {
    match below(if depth > 0 { 5 } else { 8 }) {
        0..=4 => scalar(below),
        5 | 6 => Json::Array((0..below(4)).map(|_| value(below, depth + 1)).collect()),
        _ => {
            let mut m = serde_json::Map::new();
            for f in ["x", "y"] {
                if below(3) != 0 {
                    m.insert(f.into(), value(below, depth + 1));
                }
            }
            Json::Object(m)
        }
    }
}

fn document(below: &mut dyn FnMut(u64) -> u64) -> Document {
    let mut m = serde_json::Map::new();
    m.insert("_id".into(), json!(below(40) as i64));
    for f in ["x", "y"] {
        if below(5) != 0 {
            m.insert(f.into(), value(below, 0));
        }
    }
    if below(4) != 0 {
        m.insert("u".into(), json!(below(60) as i64));
    }
    match Value::from_json(Json::Object(m)) {
        Ok(Value::Object(d)) => d,
        other => panic!("not a document: {other:?}"),
    }
}

fn condition(below: &mut dyn FnMut(u64) -> u64) -> Json {
    let field = ["x", "y", "u", "x.x", "y.y", "_id"][below(6) as usize];
    let v = if field == "u" || field == "_id" {
        json!(below(60) as i64)
    } else {
        scalar(below)
    };
    let list = |below: &mut dyn FnMut(u64) -> u64| -> Json {
        Json::Array((0..1 + below(3)).map(|_| scalar(below)).collect())
    };
    let cond = match below(12) {
        0 | 1 => v,
        2 => json!({"$gt": v}),
        3 => json!({"$gte": v, "$lt": below(10) as i64}),
        4 => json!({"$lt": v}),
        5 => json!({"$lte": v}),
        6 => json!({"$ne": v}),
        7 => json!({"$in": list(below)}),
        8 => json!({"$nin": list(below)}),
        9 => json!({"$exists": below(2) == 0}),
        10 => json!({"$elemMatch": {"$gte": v}}),
        _ => {
            let ty = ["string", "number", "array", "object", "null"][below(5) as usize];
            json!({ "$type": ty })
        }
    };
    json!({ field: cond })
}

fn filter(below: &mut dyn FnMut(u64) -> u64, depth: u32) -> Json {
    match below(if depth > 0 { 6 } else { 9 }) {
        0 => json!({}),
        1..=5 => condition(below),
        6 => json!({"$and": [filter(below, depth + 1), filter(below, depth + 1)]}),
        7 => json!({"$or": [filter(below, depth + 1), filter(below, depth + 1)]}),
        _ => json!({"$nor": [filter(below, depth + 1)]}),
    }
}

/// A document as compared: JSON with every object's keys in order (field
/// order is not what the model predicts for fields an update appends).
fn canon(d: &Document) -> Json {
    fn sort(j: Json) -> Json {
        match j {
            Json::Object(m) => {
                let sorted: BTreeMap<String, Json> =
                    m.into_iter().map(|(k, v)| (k, sort(v))).collect();
                Json::Object(sorted.into_iter().collect())
            }
            Json::Array(a) => Json::Array(a.into_iter().map(sort).collect()),
            other => other,
        }
    }
    sort(Value::Object(d.clone()).to_json())
}

fn id_of(d: &Document) -> i64 {
    match d.get("_id") {
        Some(Value::Int(i)) => *i,
        other => panic!("an _id that is not an integer: {other:?}"),
    }
}

/// The model: the documents by `_id`, the indexes (name, unique) in
/// creation order (`_id_` first).
#[derive(Default)]
struct Model {
    docs: BTreeMap<i64, Document>,
    indexes: Vec<(String, bool)>,
}

impl Model {
    fn matching(&self, f: &Json) -> Vec<&Document> {
        let f = Filter::parse(f.clone()).unwrap_or_else(|e| panic!("filter {f}: {e}"));
        self.docs
            .values()
            .filter(|d| f.matches_document(d).unwrap())
            .collect()
    }

    fn unique_on_u(&self) -> bool {
        self.indexes
            .iter()
            .any(|(n, unique)| *unique && n != "_id_")
    }

    /// Whether `d` may be stored beside the documents other than
    /// `d._id`'s: no other holds its `u` (missing: null) under the unique
    /// index.
    fn unique_ok(&self, d: &Document) -> bool {
        if !self.unique_on_u() {
            return true;
        }
        let u = d.get("u").cloned().unwrap_or(Value::Null);
        !self
            .docs
            .values()
            .any(|o| id_of(o) != id_of(d) && o.get("u").cloned().unwrap_or(Value::Null) == u)
    }
}

/// What an operation refused, as compared.
#[derive(Debug, PartialEq)]
enum Refused {
    /// A duplicate key on the named index.
    Duplicate(String),
}

fn refused<T>(r: Result<T, DocumentError>, ctx: &str) -> Result<T, Refused> {
    match r {
        Ok(v) => Ok(v),
        Err(DocumentError::DuplicateKey { index, .. }) => Err(Refused::Duplicate(index)),
        Err(e) => panic!("{ctx}: unexpected error: {e}"),
    }
}

/// The update the driver applies, and the model's version of it.
fn update_of(v: i64) -> Json {
    json!({"$set": {"y": v}, "$inc": {"n": 1}})
}

fn apply_update(d: &mut Document, v: i64) {
    d.insert("y", Value::Int(v));
    let n = match d.get("n") {
        Some(Value::Int(n)) => n + 1,
        _ => 1,
    };
    d.insert("n", Value::Int(n));
}

/// Runs `ops` random operations on `t` (an empty collection), checking
/// each against the model; returns how many diverged (each printed with
/// `ctx`). `below(n)` draws from `0..n`.
pub fn run(t: &impl Target, below: &mut dyn FnMut(u64) -> u64, ops: u64, ctx: &str) -> u64 {
    let mut m = Model {
        docs: BTreeMap::new(),
        indexes: vec![("_id_".to_string(), true)],
    };
    let mut diverged = 0u64;
    let mut check = |ok: bool, what: String| {
        if !ok {
            eprintln!("{what}");
            diverged += 1;
        }
    };
    for op in 0..ops {
        let ctx = format!("{ctx} op {op}");
        match below(24) {
            0..=3 => {
                let d = document(below);
                let want = if m.docs.contains_key(&id_of(&d)) {
                    Err(Refused::Duplicate("_id".into()))
                } else if !m.unique_ok(&d) {
                    Err(Refused::Duplicate("u_1".into()))
                } else {
                    Ok(Value::Int(id_of(&d)))
                };
                let got = refused(t.insert(&d), &ctx);
                check(
                    got == want,
                    format!("{ctx}: insert {d:?}: {got:?}, model {want:?}"),
                );
                if want.is_ok() {
                    m.docs.insert(id_of(&d), d);
                }
            }
            4 | 5 => {
                let ds: Vec<Document> = (0..1 + below(3)).map(|_| document(below)).collect();
                // All or none: the first refusal decides.
                let mut after = Model {
                    docs: m.docs.clone(),
                    indexes: m.indexes.clone(),
                };
                let mut want = Ok(());
                for d in &ds {
                    if after.docs.contains_key(&id_of(d)) {
                        want = Err(Refused::Duplicate("_id".into()));
                        break;
                    }
                    if !after.unique_ok(d) {
                        want = Err(Refused::Duplicate("u_1".into()));
                        break;
                    }
                    after.docs.insert(id_of(d), d.clone());
                }
                let got = refused(t.insert_many(&ds), &ctx).map(drop);
                check(
                    got == want,
                    format!("{ctx}: insert_many: {got:?}, model {want:?}"),
                );
                if want.is_ok() {
                    m.docs = after.docs;
                }
            }
            6 | 7 => {
                let d = document(below);
                let replace = below(2) == 0;
                let exists = m.docs.contains_key(&id_of(&d));
                let writes = exists || !replace;
                let want = if writes && !m.unique_ok(&d) {
                    Err(Refused::Duplicate("u_1".into()))
                } else {
                    Ok(exists)
                };
                let got = if replace {
                    refused(t.replace(&d), &ctx)
                } else {
                    refused(t.upsert(&d), &ctx)
                };
                check(
                    got == want,
                    format!("{ctx}: replace {replace} {d:?}: {got:?}, model {want:?}"),
                );
                if want.is_ok() && writes {
                    m.docs.insert(id_of(&d), d);
                }
            }
            8 => {
                let id = below(40) as i64;
                let want = m.docs.remove(&id).is_some();
                let got = refused(t.delete_id(Value::Int(id)), &ctx);
                check(got == Ok(want), format!("{ctx}: delete_id {id}: {got:?}"));
            }
            9 | 10 => {
                let f = filter(below, 1);
                let v = below(5) as i64;
                let ids: Vec<i64> = m.matching(&f).into_iter().map(id_of).collect();
                let got = refused(t.update_many(f.clone(), update_of(v)), &ctx);
                check(
                    got == Ok(ids.len() as u64),
                    format!("{ctx}: update_many {f}: {got:?}, model {}", ids.len()),
                );
                for id in ids {
                    if let Some(d) = m.docs.get_mut(&id) {
                        apply_update(d, v);
                    }
                }
            }
            11 => {
                let f = filter(below, 1);
                let ids: Vec<i64> = m.matching(&f).into_iter().map(id_of).collect();
                if below(2) == 0 {
                    let got = refused(t.delete_many(f.clone()), &ctx);
                    check(
                        got == Ok(ids.len() as u64),
                        format!("{ctx}: delete_many {f}: {got:?}, model {}", ids.len()),
                    );
                    for id in ids {
                        m.docs.remove(&id);
                    }
                } else {
                    // Which match goes is the plan's choice: the one gone.
                    let got = refused(t.delete_one(f.clone()), &ctx);
                    let want = u64::from(!ids.is_empty());
                    check(
                        got == Ok(want),
                        format!("{ctx}: delete_one {f}: {got:?}, model {want}"),
                    );
                    let gone: Vec<i64> = ids
                        .into_iter()
                        .filter(|id| t.get(Value::Int(*id)).unwrap().is_none())
                        .collect();
                    check(
                        gone.len() as u64 == want,
                        format!("{ctx}: delete_one {f}: removed {gone:?}"),
                    );
                    for id in gone {
                        m.docs.remove(&id);
                    }
                }
            }
            12 => {
                let (fields, unique, sparse) = INDEXES[below(INDEXES.len() as u64) as usize];
                let name = index_name(fields);
                let exists = m.indexes.iter().any(|(n, _)| *n == name);
                let dup = unique && !exists && {
                    let mut seen = std::collections::BTreeSet::new();
                    !m.docs.values().all(|d| {
                        seen.insert(
                            serde_json::to_string(
                                &d.get("u").cloned().unwrap_or(Value::Null).to_json(),
                            )
                            .unwrap(),
                        )
                    })
                };
                let want = if dup {
                    Err(Refused::Duplicate(name.clone()))
                } else {
                    Ok(name.clone())
                };
                let got =
                    refused(t.create_index(fields, unique, sparse), &ctx).map(|info| info.name);
                check(
                    got == want,
                    format!("{ctx}: create_index {name}: {got:?}, model {want:?}"),
                );
                if want.is_ok() && !exists {
                    m.indexes.push((name, unique));
                }
            }
            13 => {
                let (fields, ..) = INDEXES[below(INDEXES.len() as u64) as usize];
                let name = index_name(fields);
                let want = match m.indexes.iter().position(|(n, _)| *n == name) {
                    Some(i) => {
                        m.indexes.remove(i);
                        true
                    }
                    None => false,
                };
                let got = refused(t.drop_index(&name), &ctx);
                check(
                    got == Ok(want),
                    format!("{ctx}: drop_index {name}: {got:?}"),
                );
            }
            14 | 15 => {
                let f = filter(below, 0);
                let want: Vec<Json> = m.matching(&f).into_iter().map(canon).collect();
                let mut got: Vec<Json> = refused(t.find(f.clone(), FindOptions::new()), &ctx)
                    .unwrap_or_else(|r| panic!("{ctx}: find {f}: {r:?}"))
                    .iter()
                    .map(canon)
                    .collect();
                // Unsorted: any order (the plan's).
                got.sort_by_key(|j| j["_id"].as_i64());
                check(
                    got == want,
                    format!("{ctx}: find {f}: {got:?}, model {want:?}"),
                );
            }
            16 | 17 => {
                let f = filter(below, 0);
                let spec = [json!({"x": 1}), json!({"y": -1}), json!({"u": 1, "x": -1})]
                    [below(3) as usize]
                    .clone();
                let (skip, limit) = (below(4), 1 + below(12));
                let opts = FindOptions::new()
                    .sort(spec.clone())
                    .unwrap()
                    .skip(skip)
                    .limit(limit);
                let ss = SortSpec::parse(spec.clone()).unwrap();
                let key = |d: &Document| -> Vec<Json> {
                    ss.sort_key_value(&Value::Object(d.clone()))
                        .iter()
                        .map(|v| match v.to_json() {
                            Json::Number(n) => json!(n.as_f64()),
                            other => other,
                        })
                        .collect()
                };
                let matching = m.matching(&f);
                let got = refused(t.find(f.clone(), opts), &ctx)
                    .unwrap_or_else(|r| panic!("{ctx}: find {f}: {r:?}"));
                let want_len = (matching.len() as u64).saturating_sub(skip).min(limit);
                // Ties come in any order: the sequence of sort keys, and
                // each document as the model holds it.
                let mut sorted: Vec<&Document> = matching.clone();
                sorted.sort_by(|a, b| {
                    ss.compare(&Value::Object((*a).clone()), &Value::Object((*b).clone()))
                });
                let want_keys: Vec<Vec<Json>> = sorted
                    .iter()
                    .skip(skip as usize)
                    .take(limit as usize)
                    .map(|d| key(d))
                    .collect();
                let got_keys: Vec<Vec<Json>> = got.iter().map(key).collect();
                check(
                    got.len() as u64 == want_len && got_keys == want_keys,
                    format!("{ctx}: find {f} sort {spec} skip {skip} limit {limit}: keys {got_keys:?}, model {want_keys:?}"),
                );
                for d in &got {
                    let held = m.docs.get(&id_of(d)).map(canon);
                    check(
                        held == Some(canon(d)),
                        format!("{ctx}: find {f} sorted gave {d:?}, model {held:?}"),
                    );
                }
            }
            18 => {
                let f = filter(below, 0);
                let include = below(2) == 0;
                let proj = if include {
                    json!({"x": 1})
                } else {
                    json!({"y": 0})
                };
                let opts = FindOptions::new().projection(proj.clone()).unwrap();
                let want: Vec<Json> = m
                    .matching(&f)
                    .into_iter()
                    .map(|d| {
                        let mut p = Document::new();
                        for (k, v) in d.iter() {
                            let keep = if include {
                                k == "_id" || k == "x"
                            } else {
                                k != "y"
                            };
                            if keep {
                                p.insert(k, v.clone());
                            }
                        }
                        canon(&p)
                    })
                    .collect();
                let mut got: Vec<Json> = refused(t.find(f.clone(), opts), &ctx)
                    .unwrap_or_else(|r| panic!("{ctx}: find {f}: {r:?}"))
                    .iter()
                    .map(canon)
                    .collect();
                got.sort_by_key(|j| j["_id"].as_i64());
                check(
                    got == want,
                    format!("{ctx}: find {f} projection {proj}: {got:?}, model {want:?}"),
                );
            }
            19 | 20 => {
                let f = filter(below, 0);
                let want = m.matching(&f).len() as u64;
                let got = refused(t.count(f.clone()), &ctx);
                check(
                    got == Ok(want),
                    format!("{ctx}: count {f}: {got:?}, model {want}"),
                );
            }
            21 => {
                let f = filter(below, 0);
                let matching: Vec<Json> = m.matching(&f).into_iter().map(canon).collect();
                let got = refused(t.find_one(f.clone()), &ctx)
                    .unwrap_or_else(|r| panic!("{ctx}: find_one {f}: {r:?}"));
                let ok = match &got {
                    Some(d) => matching.contains(&canon(d)),
                    None => matching.is_empty(),
                };
                check(
                    ok,
                    format!("{ctx}: find_one {f}: {got:?}, model {matching:?}"),
                );
            }
            22 => {
                let id = below(40) as i64;
                let want = m.docs.get(&id).map(canon);
                let got = refused(t.get(Value::Int(id)), &ctx)
                    .unwrap_or_else(|r| panic!("{ctx}: get: {r:?}"))
                    .map(|d| canon(&d));
                check(
                    got == want,
                    format!("{ctx}: get {id}: {got:?}, model {want:?}"),
                );
            }
            _ => {
                let names: Vec<String> = refused(t.list_indexes(), &ctx)
                    .unwrap_or_else(|r| panic!("{ctx}: list_indexes: {r:?}"))
                    .into_iter()
                    .map(|i| i.name)
                    .collect();
                let want: Vec<String> = m.indexes[1..].iter().map(|(n, _)| n.clone()).collect();
                check(
                    names == want,
                    format!("{ctx}: list_indexes {names:?}, model {want:?}"),
                );
                let len = refused(t.len(), &ctx);
                check(
                    len == Ok(m.docs.len() as u64),
                    format!("{ctx}: len {len:?}, model {}", m.docs.len()),
                );
            }
        }
    }
    // At the end: every document, in `_id` order.
    let all: Vec<Json> = t
        .find(
            json!({}),
            FindOptions::new().sort(json!({"_id": 1})).unwrap(),
        )
        .unwrap_or_else(|e| panic!("{ctx}: final find: {e}"))
        .iter()
        .map(canon)
        .collect();
    let want: Vec<Json> = m.docs.values().map(canon).collect();
    check(
        all == want,
        format!("{ctx}: at the end: {all:?}, model {want:?}"),
    );
    diverged
}
