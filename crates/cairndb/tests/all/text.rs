//! Text indexes and `$text` (issue 18): a random collection searched with
//! random searches (terms, negations, phrases, other conditions) gives
//! exactly the documents, and the scores, of a naive reference that
//! tokenizes every document with the same tokenizer (`text::tokens`) and
//! evaluates the search directly; the text index's entries equal a
//! rebuild's (`check_indexes`) across inserts, updates, replaces,
//! deletes, aborted transactions and a reopen; the plan is the text plan
//! with the keys it reads; misuse is refused with typed errors, as MongoDB
//! refuses it (manual: "$text", "Text Indexes", "$meta").

use std::collections::{BTreeMap, BTreeSet};

use cairndb::document::query::FindOptions;
use cairndb::document::text::{fold, tokens};
use cairndb::document::{
    Document, DocumentError, IndexOptions, TextIndexOptions, UpdateOptions, Value,
};
use cairndb::storage::sim::SplitMix64;
use cairndb::Database;
use serde_json::{json, Value as Json};

/// Words with inflections, case and diacritic variants, stop words and
/// punctuation.
const WORDS: &[&str] = &[
    "coffee", "Coffees", "café", "CAFE", "cafés", "shop", "shops", "shopping", "brew", "brewing",
    "cold", "Cold", "decaf", "the", "and", "running", "run", "runs", "tea", "naïve", "naive",
    "green", "Über", "uber", "e-mail", "don't", "x1", "beans", "bean", "hot", "water",
];

fn doc(j: Json) -> Document {
    match Value::from_json(j) {
        Ok(Value::Object(d)) => d,
        other => panic!("not an object: {other:?}"),
    }
}

fn phrase_of(rng: &mut SplitMix64, n: u64) -> String {
    (0..n)
        .map(|_| WORDS[rng.below(WORDS.len() as u64) as usize])
        .collect::<Vec<_>>()
        .join(if rng.below(4) == 0 { ", " } else { " " })
}

fn rand_doc(rng: &mut SplitMix64, id: i64) -> Json {
    let mut m = serde_json::Map::new();
    m.insert("_id".into(), json!(id));
    m.insert("n".into(), json!(rng.below(10)));
    match rng.below(5) {
        0 => {}
        1 => {
            m.insert("title".into(), json!(rng.below(100)));
        }
        _ => {
            let n = 1 + rng.below(4);
            m.insert("title".into(), json!(phrase_of(rng, n)));
        }
    }
    match rng.below(4) {
        0 => {}
        1 => {
            let items: Vec<Json> = (0..rng.below(4))
                .map(|_| {
                    if rng.below(5) == 0 {
                        json!(7)
                    } else {
                        let n = 1 + rng.below(5);
                        json!(phrase_of(rng, n))
                    }
                })
                .collect();
            m.insert("body".into(), Json::Array(items));
        }
        _ => {
            let n = 1 + rng.below(8);
            m.insert("body".into(), json!(phrase_of(rng, n)));
        }
    }
    Json::Object(m)
}

/// The indexed strings of a document, in the index's order: `title`, then
/// `body` (a string, or each string element of an array), with weights.
fn strings(d: &Json) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    for (f, w) in [("title", 3.0), ("body", 1.0)] {
        match d.get(f) {
            Some(Json::String(s)) => out.push((s.clone(), w)),
            Some(Json::Array(a)) => {
                for e in a {
                    if let Json::String(s) = e {
                        out.push((s.clone(), w));
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// The reference's term scores of a document (the formula of the text
/// module's docs, computed here from the terms alone).
fn term_scores(d: &Json) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for (s, w) in strings(d) {
        let ts = tokens(&s, "english").unwrap();
        let n = ts.len() as f64;
        let mut per: BTreeMap<&str, (u32, f64)> = BTreeMap::new();
        for t in &ts {
            let e = per.entry(t.as_str()).or_insert((0, 0.0));
            e.1 += 1.0 / 2f64.powi(e.0 as i32);
            e.0 += 1;
        }
        for (t, (count, freq)) in per {
            let coeff = 0.5 * f64::from(count) / n + 0.5;
            let adj = if fold(&s) == t { 1.1 } else { 1.0 };
            *out.entry(t.to_string()).or_insert(0.0) += w * freq * coeff * adj;
        }
    }
    out
}

/// A search: words and phrases, each negated or not.
#[derive(Debug)]
struct Search {
    words: Vec<(String, bool)>,
    phrases: Vec<(String, bool)>,
}

impl Search {
    fn render(&self) -> String {
        let mut parts: Vec<String> = self
            .words
            .iter()
            .map(|(w, neg)| format!("{}{w}", if *neg { "-" } else { "" }))
            .collect();
        parts.extend(
            self.phrases
                .iter()
                .map(|(p, neg)| format!("{}\"{p}\"", if *neg { "-" } else { "" })),
        );
        parts.join(" ")
    }

    /// The reference: positive terms (words and positive phrases),
    /// negated terms, phrases as folded substrings.
    fn matches(&self, d: &Json) -> Option<f64> {
        let toks = |s: &str| tokens(s, "english").unwrap();
        let mut pos = BTreeSet::new();
        let mut neg = BTreeSet::new();
        for (w, n) in &self.words {
            if *n {
                neg.extend(toks(w))
            } else {
                pos.extend(toks(w))
            }
        }
        for (p, n) in &self.phrases {
            if !*n {
                pos.extend(toks(p));
            }
        }
        let ss = strings(d);
        let have: BTreeSet<String> = ss.iter().flat_map(|(s, _)| toks(s)).collect();
        if pos.is_empty() || pos.is_disjoint(&have) || !neg.is_disjoint(&have) {
            return None;
        }
        let contains = |p: &str| {
            let p = fold(p);
            ss.iter().any(|(s, _)| fold(s).contains(&p))
        };
        for (p, n) in &self.phrases {
            if fold(p).trim().is_empty() {
                continue;
            }
            if contains(p) == *n {
                return None;
            }
        }
        let ts = term_scores(d);
        let mut score = 0.0;
        for t in &pos {
            if let Some(s) = ts.get(t) {
                score += s;
            }
        }
        Some(score)
    }
}

fn rand_search(rng: &mut SplitMix64, docs: &[Json]) -> Search {
    let mut s = Search {
        words: Vec::new(),
        phrases: Vec::new(),
    };
    for _ in 0..1 + rng.below(3) {
        let w = WORDS[rng.below(WORDS.len() as u64) as usize].to_string();
        s.words.push((w, rng.below(4) == 0));
    }
    if rng.below(3) == 0 {
        // A phrase cut from a document (so that it often occurs), or made
        // up; negated sometimes.
        let d = &docs[rng.below(docs.len() as u64) as usize];
        let p = match strings(d).first() {
            Some((t, _)) if rng.below(3) != 0 => {
                let words: Vec<&str> = t.split(' ').collect();
                let a = rng.below(words.len() as u64) as usize;
                let b = (a + 1 + rng.below(2) as usize).min(words.len());
                words[a..b].join(" ").replace('"', "")
            }
            _ => phrase_of(rng, 2),
        };
        s.phrases.push((p, rng.below(4) == 0));
    }
    s
}

fn setup(rng: &mut SplitMix64, n: i64) -> (tempfile::TempDir, Database, Vec<Json>) {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::create(dir.path().join("t.cairn")).unwrap();
    let docs: Vec<Json> = (0..n).map(|i| rand_doc(rng, i)).collect();
    {
        let c = crate::common::unsynced(&db, "posts");
        // Half the documents before the index (built over them), half after.
        for d in &docs[..docs.len() / 2] {
            c.insert(&doc(d.clone())).unwrap();
        }
        c.create_index(&[("n", 1)], IndexOptions::default())
            .unwrap();
        c.create_text_index(&[("title", 3), ("body", 1)], TextIndexOptions::default())
            .unwrap();
        for d in &docs[docs.len() / 2..] {
            c.insert(&doc(d.clone())).unwrap();
        }
    }
    (dir, db, docs)
}

/// Runs `search` (with `extra` ANDed) and compares ids and scores with the
/// reference over `docs`.
fn compare(
    c: &cairndb::document::Collection<'_, Document>,
    docs: &[Json],
    search: &Search,
    extra: Option<u64>,
    ctx: &str,
) {
    let text = search.render();
    let mut filter = json!({"$text": {"$search": text}});
    if let Some(k) = extra {
        filter = json!({"$and": [filter, {"n": {"$gte": k}}]});
    }
    let mut want: Vec<(i64, f64)> = docs
        .iter()
        .filter(|d| extra.is_none_or(|k| d["n"].as_u64().unwrap() >= k))
        .filter_map(|d| search.matches(d).map(|s| (d["_id"].as_i64().unwrap(), s)))
        .collect();
    want.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let opts = FindOptions::new()
        .projection(json!({"score": {"$meta": "textScore"}, "_id": 1}))
        .unwrap()
        .sort(json!([{"score": {"$meta": "textScore"}}, {"_id": 1}]))
        .unwrap();
    let got: Vec<(i64, f64)> = c
        .find_with(filter.clone(), opts)
        .unwrap()
        .map(|d| {
            let d = d.unwrap();
            (
                d["_id"].as_i64().unwrap(),
                match &d["score"] {
                    Value::Float(f) => *f,
                    other => panic!("score {other:?}"),
                },
            )
        })
        .collect();
    assert_eq!(got, want, "{ctx}: search {text:?} extra {extra:?}");
    assert_eq!(c.count(filter).unwrap(), want.len() as u64, "{ctx}: count");
}

#[test]
fn text_search_equals_the_naive_reference() {
    let seed = crate::common::seed("text_search_equals_the_naive_reference");
    let mut rng = SplitMix64(seed);
    let (_dir, db, docs) = setup(&mut rng, 300);
    let c = crate::common::unsynced(&db, "posts");
    assert_eq!(c.check_indexes().unwrap(), Vec::<String>::new());
    let mut nonempty = 0;
    for i in 0..crate::common::iters(300) {
        let s = rand_search(&mut rng, &docs);
        let extra = (rng.below(3) == 0).then(|| rng.below(10));
        if docs.iter().any(|d| s.matches(d).is_some()) {
            nonempty += 1;
        }
        compare(&c, &docs, &s, extra, &format!("seed {seed} search {i}"));
    }
    assert!(nonempty > 50, "too few searches found anything: {nonempty}");
}

/// One random write to the collection and to the model.
fn random_write(
    rng: &mut SplitMix64,
    c: &cairndb::document::TxnCollection<'_, Document>,
    model: &mut BTreeMap<i64, Json>,
    next_id: &mut i64,
) {
    let id = rng.below(*next_id as u64 + 1) as i64;
    match rng.below(4) {
        0 => {
            let d = rand_doc(rng, *next_id);
            c.insert(&doc(d.clone())).unwrap();
            model.insert(*next_id, d);
            *next_id += 1;
        }
        1 => {
            let n = 1 + rng.below(3);
            let title = phrase_of(rng, n);
            let r = c
                .update_many(
                    json!({"_id": id}),
                    json!({"$set": {"title": title}}),
                    Default::default(),
                )
                .unwrap();
            if let Some(d) = model.get_mut(&id) {
                d["title"] = json!(title);
                assert_eq!(r.matched, 1);
            }
        }
        2 => {
            if model.contains_key(&id) {
                let d = rand_doc(rng, id);
                assert!(c.replace(&doc(d.clone())).unwrap());
                model.insert(id, d);
            }
        }
        _ => {
            let gone = c.delete_id(id).unwrap();
            assert_eq!(gone, model.remove(&id).is_some());
        }
    }
}

#[test]
fn text_index_entries_follow_writes_aborts_and_reopen() {
    let seed = crate::common::seed("text_index_entries_follow_writes_aborts_and_reopen");
    let mut rng = SplitMix64(seed);
    let (dir, db, docs) = setup(&mut rng, 120);
    let mut model: BTreeMap<i64, Json> = docs
        .iter()
        .map(|d| (d["_id"].as_i64().unwrap(), d.clone()))
        .collect();
    let mut next_id = docs.len() as i64;
    for round in 0..crate::common::iters(30) {
        let txn = db.begin_write().unwrap();
        let c = txn.collection::<Document>("posts");
        let abort = rng.below(4) == 0;
        let mut scratch = model.clone();
        let mut scratch_next = next_id;
        for _ in 0..1 + rng.below(8) {
            random_write(&mut rng, &c, &mut scratch, &mut scratch_next);
        }
        // The transaction sees its own changes through the text index.
        let s = rand_search(&mut rng, &docs);
        let inside: BTreeSet<i64> = c
            .find(json!({"$text": {"$search": s.render()}}))
            .unwrap()
            .into_iter()
            .map(|d| d["_id"].as_i64().unwrap())
            .collect();
        let want: BTreeSet<i64> = scratch
            .values()
            .filter(|d| s.matches(d).is_some())
            .map(|d| d["_id"].as_i64().unwrap())
            .collect();
        assert_eq!(
            inside, want,
            "seed {seed} round {round}: in the transaction"
        );
        if abort {
            txn.abort();
        } else {
            txn.commit().unwrap();
            model = scratch;
            next_id = scratch_next;
        }
        let coll = db.collection::<Document>("posts");
        assert_eq!(
            coll.check_indexes().unwrap(),
            Vec::<String>::new(),
            "seed {seed} round {round}"
        );
        let current: Vec<Json> = model.values().cloned().collect();
        let s = rand_search(&mut rng, &current);
        compare(
            &coll,
            &current,
            &s,
            None,
            &format!("seed {seed} round {round}"),
        );
    }
    drop(db);
    let db = Database::open(dir.path().join("t.cairn")).unwrap();
    let c = db.collection::<Document>("posts");
    assert_eq!(c.check_indexes().unwrap(), Vec::<String>::new());
    let current: Vec<Json> = model.values().cloned().collect();
    for i in 0..20 {
        let s = rand_search(&mut rng, &current);
        compare(
            &c,
            &current,
            &s,
            None,
            &format!("seed {seed} after reopen {i}"),
        );
    }
    // Dropping the index removes its entries; a new one is built again.
    let name = c
        .list_indexes()
        .unwrap()
        .into_iter()
        .find(|i| i.text.is_some())
        .unwrap()
        .name;
    assert_eq!(name, "title_text_body_text");
    assert!(c.drop_index(&name).unwrap());
    assert!(matches!(
        c.find(json!({"$text": {"$search": "coffee"}})),
        Err(DocumentError::TextIndexRequired { .. })
    ));
    c.create_text_index(&[("title", 3), ("body", 1)], TextIndexOptions::default())
        .unwrap();
    assert_eq!(c.check_indexes().unwrap(), Vec::<String>::new());
    compare(
        &c,
        &current,
        &Search {
            words: vec![("coffee".into(), false)],
            phrases: vec![],
        },
        None,
        "rebuilt",
    );
}

fn small() -> (tempfile::TempDir, Database) {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::create(dir.path().join("s.cairn")).unwrap();
    let c = db.collection::<Document>("posts");
    for (i, (t, b)) in [
        ("Cold brew coffee", "Steeped overnight in cold water"),
        ("Coffee shop", "A decaf espresso, please"),
        ("Green tea", "Hot water and leaves"),
        ("Café culture", "The coffee shops of Paris"),
        ("CAFE", "menu"),
    ]
    .iter()
    .enumerate()
    {
        c.insert(&doc(json!({"_id": i, "title": t, "body": b, "n": i})))
            .unwrap();
    }
    (dir, db)
}

fn ids(c: &cairndb::document::Collection<'_, Document>, filter: Json) -> Vec<i64> {
    let mut v: Vec<i64> = c
        .find(filter)
        .unwrap()
        .map(|d| d.unwrap()["_id"].as_i64().unwrap())
        .collect();
    v.sort();
    v
}

#[test]
fn text_semantics_of_the_manual() {
    let (_dir, db) = small();
    let c = db.collection::<Document>("posts");
    c.create_index(&[("n", 1)], IndexOptions::default())
        .unwrap();
    let info = c
        .create_text_index(&[("title", 10), ("body", 1)], TextIndexOptions::default())
        .unwrap();
    assert_eq!(info.name, "title_text_body_text");
    assert_eq!(
        c.list_indexes().unwrap().len(),
        2,
        "the text index beside the other"
    );
    // Terms are OR'ed, stemmed and folded; stop words are ignored.
    assert_eq!(ids(&c, json!({"$text": {"$search": "coffees"}})), [0, 1, 3]);
    assert_eq!(
        ids(&c, json!({"$text": {"$search": "cafe tea"}})),
        [2, 3, 4]
    );
    assert_eq!(
        ids(&c, json!({"$text": {"$search": "the and"}})),
        Vec::<i64>::new()
    );
    // Negation, phrases (all must appear), negated phrases.
    assert_eq!(
        ids(&c, json!({"$text": {"$search": "coffee -decaf"}})),
        [0, 3]
    );
    assert_eq!(ids(&c, json!({"$text": {"$search": "\"cold brew\""}})), [0]);
    assert_eq!(
        ids(&c, json!({"$text": {"$search": "coffee -\"cold brew\""}})),
        [1, 3]
    );
    assert_eq!(
        ids(&c, json!({"$text": {"$search": "\"coffee\" \"paris\""}})),
        [3]
    );
    // Only negations: nothing (MongoDB).
    assert_eq!(
        ids(&c, json!({"$text": {"$search": "-coffee"}})),
        Vec::<i64>::new()
    );
    // Case and diacritic sensitivity check the documents the index found.
    assert_eq!(
        ids(
            &c,
            json!({"$text": {"$search": "CAFE", "$caseSensitive": true}})
        ),
        [4]
    );
    assert_eq!(
        ids(
            &c,
            json!({"$text": {"$search": "café", "$diacriticSensitive": true}})
        ),
        [3]
    );
    // Language "none": no stemming, no stop words.
    assert_eq!(
        ids(
            &c,
            json!({"$text": {"$search": "coffees", "$language": "none"}})
        ),
        Vec::<i64>::new()
    );
    // With other conditions (AND), through the text plan.
    let f = json!({"$text": {"$search": "coffee"}, "n": {"$gte": 1}});
    assert_eq!(ids(&c, f.clone()), [1, 3]);
    let e = c.explain(f, FindOptions::new()).unwrap();
    assert_eq!(e.plan.to_string(), "text title_text_body_text \"coffe\"");
    // "coffe" has entries for documents 0, 1, 3: three keys, three documents.
    assert_eq!((e.keys_examined, e.docs_examined, e.returned), (3, 3, 2));
    assert_eq!(e.candidates.len(), 1);
    // Score: title weight 10 puts title matches first.
    let opts = FindOptions::new()
        .projection(json!({"score": {"$meta": "textScore"}, "_id": 1}))
        .unwrap()
        .sort(json!({"score": {"$meta": "textScore"}}))
        .unwrap();
    let got: Vec<Document> = c
        .find_with(json!({"$text": {"$search": "coffee"}}), opts)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let order: Vec<i64> = got.iter().map(|d| d["_id"].as_i64().unwrap()).collect();
    assert_eq!(order[2], 3, "the body-only match last: {got:?}");
    // "Coffee shop" (title, 2 terms: 10 × 1 × 0.75) and "Cold brew
    // coffee" (title, 3 terms: 10 × (0.5/3 + 0.5)).
    assert_eq!(got[0]["score"], Value::Float(10.0 * 0.75));
    // Aggregation: $text in the first $match, the score sort right after.
    let agg: Vec<Document> = c
        .aggregate(json!([
            {"$match": {"$text": {"$search": "coffee"}}},
            {"$sort": {"s": {"$meta": "textScore"}}},
            {"$project": {"_id": 1}}
        ]))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let agg_ids: Vec<i64> = agg.iter().map(|d| d["_id"].as_i64().unwrap()).collect();
    assert_eq!(agg_ids, order);
    // Updates, deletes and a write transaction's queries plan $text the same.
    let txn = db.begin_write().unwrap();
    let tc = txn.collection::<Document>("posts");
    let e = tc
        .explain(
            json!({"$text": {"$search": "tea -coffee"}}),
            FindOptions::new(),
        )
        .unwrap();
    assert_eq!(
        e.plan.to_string(),
        "text title_text_body_text \"tea\" -\"coffe\""
    );
    assert_eq!((e.keys_examined, e.returned), (1, 1));
    let r = tc
        .update_many(
            json!({"$text": {"$search": "tea"}}),
            json!({"$set": {"title": "Black coffee"}}),
            Default::default(),
        )
        .unwrap();
    assert_eq!(r.modified, 1);
    txn.commit().unwrap();
    assert_eq!(
        ids(&c, json!({"$text": {"$search": "tea"}})),
        Vec::<i64>::new()
    );
    assert_eq!(ids(&c, json!({"$text": {"$search": "black"}})), [2]);
    assert_eq!(
        c.delete_many(json!({"$text": {"$search": "coffee -black"}}))
            .unwrap(),
        3
    );
    assert_eq!(ids(&c, json!({"n": {"$gte": 0}})), [2, 4]);
    assert_eq!(c.check_indexes().unwrap(), Vec::<String>::new());
}

#[test]
fn text_misuse_is_refused() {
    let (_dir, db) = small();
    let c = db.collection::<Document>("posts");
    // No text index (MongoDB: "text index required for $text query").
    let e = c.find(json!({"$text": {"$search": "coffee"}})).unwrap_err();
    assert!(
        matches!(e, DocumentError::TextIndexRequired { ref collection } if collection == "posts"),
        "{e}"
    );
    assert!(e
        .to_string()
        .contains("text index required for $text query"));
    assert!(matches!(
        db.collection::<Document>("nothing")
            .find(json!({"$text": {"$search": "coffee"}})),
        Err(DocumentError::TextIndexRequired { ref collection }) if collection == "nothing"
    ));
    c.create_text_index(&[("title", 1)], TextIndexOptions::default())
        .unwrap();
    // The same again is fine; another text index is not (one per collection).
    c.create_text_index(&[("title", 1)], TextIndexOptions::default())
        .unwrap();
    let e = c
        .create_text_index(&[("body", 1)], TextIndexOptions::default())
        .unwrap_err();
    assert!(e.to_string().contains("at most one text index"), "{e}");
    for (spec, opts, what) in [
        (vec![("body", 0u32)], TextIndexOptions::default(), "weight"),
        (vec![], TextIndexOptions::default(), "at least one field"),
        (
            vec![("body", 1)],
            TextIndexOptions {
                default_language: Some("klingon".into()),
                ..Default::default()
            },
            "klingon",
        ),
    ] {
        let e = db
            .collection::<Document>("other")
            .create_text_index(&spec, opts)
            .unwrap_err();
        assert!(e.to_string().contains(what), "{what}: {e}");
    }
    // Where $text may not appear (MongoDB refuses these too).
    for f in [
        json!({"$or": [{"$text": {"$search": "a"}}, {"n": 1}]}),
        json!({"$nor": [{"$text": {"$search": "a"}}]}),
        json!({"items": {"$elemMatch": {"$text": {"$search": "a"}}}}),
        json!({"$and": [{"$text": {"$search": "a"}}, {"$text": {"$search": "b"}}]}),
        json!({"$text": {"$search": 5}}),
        json!({"$text": {"$language": "english"}}),
        json!({"$text": {"$search": "a", "$bogus": 1}}),
        json!({"$text": {"$search": "a", "$language": "klingon"}}),
        json!({"$text": {"$search": "a", "$caseSensitive": "yes"}}),
        json!({"n": {"$not": {"$text": {"$search": "a"}}}}),
    ] {
        let e = c.find(f.clone());
        assert!(e.is_err(), "{f} was accepted");
    }
    // $meta without $text.
    let opts = FindOptions::new()
        .projection(json!({"score": {"$meta": "textScore"}}))
        .unwrap();
    let e = c.find_with(json!({}), opts).unwrap_err();
    assert!(e.to_string().contains("text score metadata"), "{e}");
    let opts = FindOptions::new()
        .sort(json!({"score": {"$meta": "textScore"}}))
        .unwrap();
    assert!(c.find_with(json!({}), opts).is_err());
    // A hint must name the text index.
    c.create_index(&[("n", 1)], IndexOptions::default())
        .unwrap();
    let opts = FindOptions::new().hint(json!("n_1")).unwrap();
    assert!(c
        .find_with(json!({"$text": {"$search": "coffee"}}), opts)
        .is_err());
    let opts = FindOptions::new().hint(json!("title_text")).unwrap();
    assert_eq!(
        c.find_with(json!({"$text": {"$search": "coffee"}}), opts)
            .unwrap()
            .count(),
        2
    );
    // Aggregation: $text only in the first stage.
    let e = c
        .aggregate(json!([{"$match": {"n": 1}}, {"$match": {"$text": {"$search": "a"}}}]))
        .unwrap_err();
    assert!(e.to_string().contains("first stage"), "{e}");
    // A filter evaluated without the planner cannot answer $text: every
    // evaluator says so (MongoDB: "text index required"), none answers
    // "no match".
    let f = cairndb::document::Filter::parse(json!({"$text": {"$search": "coffee"}})).unwrap();
    let d = doc(json!({"title": "coffee"}));
    assert!(f
        .matches_bytes(&cairndb::document::to_vec(&d).unwrap())
        .is_err());
    for e in [
        f.matches_document(&d).unwrap_err(),
        f.matches_value(&Value::Object(d.clone())).unwrap_err(),
    ] {
        assert!(
            matches!(&e, DocumentError::InvalidQuery { reason } if reason.contains("text index")),
            "{e}"
        );
    }
}

/// A weight must be an integer in 1 ..= 99,999: MongoDB's manual,
/// `db.collection.createIndex()`, options for text indexes: "`weights` ...
/// The weight is an integer ranging from 1 to 99,999" ("Control Search
/// Results with Weights" uses it so); so 0, negative, fractional (`1.5`;
/// a whole float such as `7.0` is the integer 7) and larger weights are
/// refused naming the field. The error is typed and names the collection,
/// the index and the field.
#[test]
fn text_weights_must_be_positive_integers() {
    let (_dir, db) = small();
    let c = db.collection::<Document>("posts");
    for (spec, bad) in [
        (vec![("title", 1u32), ("body", 0)], "0"),
        (vec![("title", 100_000)], "100000"),
    ] {
        let e = c
            .create_text_index(&spec, TextIndexOptions::default())
            .unwrap_err();
        match &e {
            DocumentError::IndexError {
                collection,
                index,
                reason,
            } => {
                assert_eq!(collection, "posts");
                let field = spec.iter().find(|(_, w)| w.to_string() == bad).unwrap().0;
                let name: Vec<String> = spec.iter().map(|(p, _)| format!("{p}_text")).collect();
                assert_eq!(*index, name.join("_"));
                assert!(
                    reason.contains(&format!("{field:?} must be a positive integer"))
                        && reason.ends_with(&format!("not {bad}")),
                    "{reason}"
                );
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(c.list_indexes().unwrap().is_empty());
    // The JSON form front ends read (`weights: {"body": ...}`).
    use cairndb::document::text::weight_from_value;
    for bad in [
        json!(0),
        json!(-3),
        json!(1.5),
        json!(100_000),
        json!("2"),
        json!(null),
    ] {
        let e = weight_from_value("body", &Value::from_json(bad.clone()).unwrap()).unwrap_err();
        assert!(
            matches!(&e, DocumentError::IndexError { reason, .. }
                if reason.contains("\"body\" must be a positive integer")),
            "{bad}: {e}"
        );
    }
    for (ok, w) in [(json!(1), 1), (json!(99_999), 99_999), (json!(7.0), 7)] {
        assert_eq!(
            weight_from_value("body", &Value::from_json(ok).unwrap()).unwrap(),
            w
        );
    }
}

/// An update that leaves the indexed strings alone keeps the text entries
/// (no tokenizing); one that changes them, or changes which field holds a
/// string, moves them; the index always equals a rebuild.
#[test]
fn text_entries_move_only_when_the_indexed_strings_change() {
    let (_dir, db) = small();
    let c = db.collection::<Document>("posts");
    c.create_text_index(&[("title", 5), ("body", 1)], TextIndexOptions::default())
        .unwrap();
    let search = |s: &str| ids(&c, json!({"$text": {"$search": s}}));
    assert_eq!(search("overnight"), [0]);
    // Another field only.
    c.update_one(
        json!({"_id": 0}),
        json!({"$set": {"n": 99}}),
        UpdateOptions::default(),
    )
    .unwrap();
    assert_eq!(search("overnight"), [0]);
    assert!(c.check_indexes().unwrap().is_empty());
    // The same string moved from body to title: same strings, other
    // weights, so other scores.
    let before = c
        .find_with(
            json!({"$text": {"$search": "menu"}}),
            FindOptions::new()
                .projection(json!({"s": {"$meta": "textScore"}}))
                .unwrap(),
        )
        .unwrap()
        .next()
        .unwrap()
        .unwrap()["s"]
        .as_f64()
        .unwrap();
    c.update_one(
        json!({"_id": 4}),
        json!({"$set": {"title": "menu", "body": "CAFE"}}),
        UpdateOptions::default(),
    )
    .unwrap();
    assert!(c.check_indexes().unwrap().is_empty());
    let after = c
        .find_with(
            json!({"$text": {"$search": "menu"}}),
            FindOptions::new()
                .projection(json!({"s": {"$meta": "textScore"}}))
                .unwrap(),
        )
        .unwrap()
        .next()
        .unwrap()
        .unwrap()["s"]
        .as_f64()
        .unwrap();
    assert_eq!((before, after), (1.1, 5.5));
    // A changed indexed string.
    c.update_one(
        json!({"_id": 0}),
        json!({"$set": {"body": "iced"}}),
        UpdateOptions::default(),
    )
    .unwrap();
    assert_eq!(search("overnight"), Vec::<i64>::new());
    assert_eq!(search("iced"), [0]);
    assert!(c.check_indexes().unwrap().is_empty());
}

/// The text score in aggregation stages (manual: "$meta", "Text Search
/// in the Aggregation Pipeline"): `{"$meta": "textScore"}` is an
/// expression in `$project` (adding a field without making the projection
/// an inclusion), `$addFields`, `$group`, `$replaceRoot` and `$sort` keys
/// anywhere after a `$text` first stage, until a `$group` makes new
/// documents; elsewhere it is MongoDB's "query requires text score
/// metadata" error. The scores equal `find`'s, and a write transaction's
/// `aggregate` and `distinct` answer `$text` the same way, its own writes
/// included.
#[test]
fn text_score_in_aggregation_stages_and_transactions() {
    let (_dir, db) = small();
    let c = db.collection::<Document>("posts");
    c.create_text_index(&[("title", 5), ("body", 1)], TextIndexOptions::default())
        .unwrap();
    let scores_of = |c: &cairndb::document::Collection<'_, Document>, search: &str| {
        c.find_with(
            json!({"$text": {"$search": search}}),
            FindOptions::new()
                .projection(json!({"s": {"$meta": "textScore"}}))
                .unwrap(),
        )
        .unwrap()
        .map(|d| {
            let d = d.unwrap();
            (d["_id"].as_i64().unwrap(), d["s"].as_f64().unwrap())
        })
        .collect::<BTreeMap<i64, f64>>()
    };
    let want = scores_of(&c, "coffee");
    assert_eq!(want.len(), 3, "{want:?}");
    let run = |p: Json| -> Vec<Json> {
        c.aggregate(p.clone())
            .unwrap_or_else(|e| panic!("{p}: {e}"))
            .map(|d| Value::Object(d.unwrap()).to_json())
            .collect()
    };
    let text = json!({"$match": {"$text": {"$search": "coffee"}}});
    // $project: inclusion plus the score; the score alone keeps every
    // field; with an exclusion, the others plus the score.
    for (proj, fields) in [
        (
            json!({"title": 1, "s": {"$meta": "textScore"}}),
            vec!["_id", "title", "s"],
        ),
        (
            json!({"s": {"$meta": "textScore"}}),
            vec!["_id", "title", "body", "n", "s"],
        ),
        (
            json!({"body": 0, "s": {"$meta": "textScore"}}),
            vec!["_id", "title", "n", "s"],
        ),
        (
            json!({"_id": 0, "s": {"$meta": "textScore"}}),
            vec!["title", "body", "n", "s"],
        ),
    ] {
        let out = run(json!([text, {"$project": proj}]));
        assert_eq!(out.len(), want.len(), "{proj}");
        for d in &out {
            let keys: Vec<&str> = d.as_object().unwrap().keys().map(String::as_str).collect();
            assert_eq!(keys, fields, "{proj}");
            let id = c
                .find(json!({"title": d["title"].clone()}))
                .unwrap()
                .next()
                .unwrap()
                .unwrap()["_id"]
                .as_i64()
                .unwrap();
            assert_eq!(d["s"].as_f64(), Some(want[&id]), "{proj}: {d}");
        }
    }
    // $addFields after another stage, then an in-memory score sort.
    let out = run(json!([
        text,
        {"$addFields": {"s": {"$meta": "textScore"}, "twice": {"$multiply": [{"$meta": "textScore"}, 2]}}},
        {"$project": {"body": 0}},
        {"$sort": {"k": {"$meta": "textScore"}, "_id": 1}}
    ]));
    let mut by_score: Vec<(i64, f64)> = want.iter().map(|(k, v)| (*k, *v)).collect();
    by_score.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let got: Vec<(i64, f64, f64)> = out
        .iter()
        .map(|d| {
            (
                d["_id"].as_i64().unwrap(),
                d["s"].as_f64().unwrap(),
                d["twice"].as_f64().unwrap(),
            )
        })
        .collect();
    let expect: Vec<(i64, f64, f64)> = by_score.iter().map(|(i, s)| (*i, *s, 2.0 * s)).collect();
    assert_eq!(got, expect);
    // $group reads the scores; its output has none.
    let out = run(
        json!([text, {"$group": {"_id": null, "sum": {"$sum": {"$meta": "textScore"}}, "max": {"$max": {"$meta": "textScore"}}}}]),
    );
    let sum: f64 = want.values().sum();
    let max = want.values().cloned().fold(f64::MIN, f64::max);
    assert_eq!(out, [json!({"_id": null, "sum": sum, "max": max})]);
    for (p, stage) in [
        (
            json!([text, {"$group": {"_id": "$n"}}, {"$project": {"s": {"$meta": "textScore"}}}]),
            2,
        ),
        (
            json!([text, {"$count": "k"}, {"$sort": {"s": {"$meta": "textScore"}}}]),
            2,
        ),
        (json!([{"$project": {"s": {"$meta": "textScore"}}}]), 0),
        (
            json!([{"$match": {"n": 1}}, {"$addFields": {"s": {"$meta": "textScore"}}}]),
            1,
        ),
    ] {
        match c.aggregate(p.clone()).unwrap_err() {
            DocumentError::Pipeline {
                stage: s, reason, ..
            } => {
                assert_eq!(s, stage, "{p}");
                assert!(reason.contains("text score metadata"), "{p}: {reason}");
            }
            other => panic!("{p}: {other:?}"),
        }
    }
    let e = c
        .aggregate(json!([text, {"$project": {"s": {"$meta": "searchScore"}}}]))
        .unwrap_err();
    assert!(e.to_string().contains("textScore"), "{e}");

    // In a write transaction: the same answers, its own writes included.
    let pipeline =
        json!([text, {"$project": {"s": {"$meta": "textScore"}}}, {"$sort": {"_id": 1}}]);
    let committed = run(pipeline.clone());
    let txn = db.begin_write().unwrap();
    {
        let tc = txn.collection::<Document>("posts");
        let out: Vec<Json> = tc
            .aggregate(pipeline.clone())
            .unwrap()
            .into_iter()
            .map(|d| Value::Object(d).to_json())
            .collect();
        assert_eq!(out, committed);
        tc.insert(&doc(
            json!({"_id": 9, "title": "Coffee", "body": "coffee beans", "n": 9}),
        ))
        .unwrap();
        tc.delete_id(1).unwrap();
        let out: Vec<i64> = tc
            .aggregate(pipeline.clone())
            .unwrap()
            .into_iter()
            .map(|d| d["_id"].as_i64().unwrap())
            .collect();
        let mut expect: Vec<i64> = want.keys().copied().filter(|i| *i != 1).collect();
        expect.push(9);
        assert_eq!(out, expect);
        assert_eq!(
            tc.distinct("n", json!({"$text": {"$search": "coffee"}}))
                .unwrap(),
            expect.iter().map(|i| Value::Int(*i)).collect::<Vec<_>>()
        );
        // A collection without a text index: MongoDB's error, named.
        let other = txn.collection::<Document>("plain");
        other.insert(&doc(json!({"_id": 1}))).unwrap();
        for e in [
            other
                .aggregate(json!([{"$match": {"$text": {"$search": "x"}}}]))
                .unwrap_err(),
            other
                .distinct("a", json!({"$text": {"$search": "x"}}))
                .unwrap_err(),
        ] {
            assert!(
                matches!(&e, DocumentError::TextIndexRequired { collection } if collection == "plain"),
                "{e}"
            );
        }
    }
    txn.abort();
    assert_eq!(run(pipeline), committed);
}
