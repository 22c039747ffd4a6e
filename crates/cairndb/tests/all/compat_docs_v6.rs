//! The document layer's format-6 fixture (`docs-v6.cairn`): indexes whose
//! entries hold the covered fields whole (FORMAT.md, "Covered values in
//! index entries"), written by the format-6 code with
//! `CAIRN_WRITE_DOCS_V6=1` (at commit e89508a, the last to write format 6);
//! `docs-v6.expected.txt` is what that code read from it. This build reads
//! those values as they are, keeps writing them for those indexes, and
//! gives new indexes shape values (format 7) beside them.
//!
//! Self-contained (only the public API, serde_json and tempfile), so that
//! the format-6 code can run `ops` and `describe` from this same file.

use std::path::{Path, PathBuf};

use cairndb::document::query::FindOptions;
use cairndb::document::{Document, IndexOptions, Value};
use cairndb::Database;
use serde_json::json;

pub const FIXTURE: &str = "docs-v6.cairn";
pub const EXPECTED: &str = "docs-v6.expected.txt";

pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn doc(j: serde_json::Value) -> Document {
    match Value::from_json(j) {
        Ok(Value::Object(d)) => d,
        other => panic!("not a document: {other:?}"),
    }
}

/// One collection with three covering indexes (single, compound over a
/// dotted path, and one multikey), over integers, equal floats, nulls,
/// missing fields, objects on the way, a long string and arrays.
pub fn ops(path: &Path) -> Database {
    let db = Database::builder()
        .page_size(4096)
        .log_size(0)
        .create(path)
        .unwrap();
    let shop = db.collection::<Document>("shop");
    shop.create_index(&[("price", 1)], IndexOptions::default())
        .unwrap();
    shop.create_index(&[("item.name", 1), ("qty", -1)], IndexOptions::default())
        .unwrap();
    shop.create_index(&[("tags", 1)], IndexOptions::default())
        .unwrap();
    let prices = [json!(5), json!(5.0), json!(null), json!(7.5), json!("n/a")];
    let names = ["pen", "ink", "pad"];
    for i in 0..40i64 {
        let mut m = serde_json::Map::new();
        if i % 7 == 3 {
            m.insert("qty".into(), json!(i));
        }
        m.insert("_id".into(), json!(i));
        if i % 6 != 5 {
            m.insert("price".into(), prices[i as usize % prices.len()].clone());
        }
        match i % 5 {
            0 => {}
            1 => {
                m.insert("item".into(), json!({"sku": i}));
            }
            2 => {
                m.insert("item".into(), json!(i));
            }
            _ => {
                m.insert(
                    "item".into(),
                    json!({"sku": i, "name": names[i as usize % 3]}),
                );
            }
        }
        if i % 7 != 3 {
            m.insert("qty".into(), json!(i % 4));
        }
        if i % 2 == 0 {
            m.insert("tags".into(), json!(["a", format!("t{}", i % 3)]));
        }
        if i == 11 {
            m.insert("price".into(), json!("p".repeat(1500)));
        }
        shop.insert(&doc(serde_json::Value::Object(m))).unwrap();
    }
    db
}

/// Covered queries (filter, projection, sort) on each covering index.
pub const QUERIES: &[(&str, &str, &str)] = &[
    (
        r#"{"price": {"$gte": 5}}"#,
        r#"{"price": 1}"#,
        r#"{"_id": 1}"#,
    ),
    (
        r#"{"price": null}"#,
        r#"{"price": 1, "_id": 0}"#,
        r#"{"price": 1}"#,
    ),
    (
        r#"{"price": {"$type": "string"}}"#,
        r#"{"price": 1}"#,
        r#"{"_id": 1}"#,
    ),
    (
        r#"{"item.name": {"$in": ["pen", null]}}"#,
        r#"{"item.name": 1, "qty": 1}"#,
        r#"{"_id": 1}"#,
    ),
    (
        r#"{"item.name": "ink", "qty": {"$gte": 0}}"#,
        r#"{"qty": 1, "item.name": 1}"#,
        r#"{"qty": -1}"#,
    ),
];

/// The options of a query of [`QUERIES`]: its projection and sort (JSON).
pub fn find_options(projection: &str, sort: &str) -> FindOptions {
    let json = |t: &str| serde_json::from_str::<serde_json::Value>(t).unwrap();
    FindOptions::new()
        .projection(json(projection))
        .unwrap()
        .sort(json(sort))
        .unwrap()
}

/// Everything the reads give, one line per call: each query's documents
/// (their exact values: `5` and `5.0` differ), whether it was covered and
/// the documents it read; the index definitions' names and fields.
pub fn describe(db: &Database) -> String {
    let c = db.collection::<Document>("shop");
    let mut out = vec![format!("shop len {:?}", c.len())];
    for idx in c.list_indexes().unwrap() {
        out.push(format!("  index {:?} {:?}", idx.name, idx.fields));
    }
    for (q, p, s) in QUERIES {
        let opts = || find_options(p, s);
        let q: serde_json::Value = serde_json::from_str(q).unwrap();
        let e = c.explain(q.clone(), opts()).unwrap();
        let docs: Vec<String> = c
            .find_with(q.clone(), opts())
            .unwrap()
            .map(|d| format!("{:?}", d.unwrap()))
            .collect();
        out.push(format!(
            "  find {q} {p} {s} -> {} covered={} docs_examined={}",
            docs.len(),
            e.covered(),
            e.docs_examined
        ));
        for d in docs {
            out.push(format!("    {}", &d[..d.len().min(200)]));
        }
    }
    out.join("\n") + "\n"
}

/// Writes the fixture: only with commit e89508a's code (format 6), so it
/// refuses to run on a build whose indexes have shape values.
#[test]
fn write_fixture_with_the_v6_code() {
    if std::env::var("CAIRN_WRITE_DOCS_V6").is_err() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let probe = ops(&dir.path().join("probe.cairn"));
    let idx = probe.collection::<Document>("shop").list_indexes().unwrap();
    assert!(
        idx.iter().all(|i| !format!("{i:?}").contains("shapes")),
        "this build writes document format 7: check out e89508a to write the v6 fixture"
    );
    let path = fixture(FIXTURE);
    let _ = std::fs::remove_file(&path);
    let db = ops(&path);
    let text = describe(&db);
    db.close().unwrap();
    let db = Database::open_read_only(&path).unwrap();
    assert_eq!(describe(&db), text, "reads the same after reopening");
    std::fs::write(fixture(EXPECTED), text).unwrap();
}
