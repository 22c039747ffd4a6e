//! The fixture of the current formats (`docs-v8.cairn`): document layer
//! format 8 (index shape values, null entries for array elements, the
//! prefix-array flags of dotted paths; FORMAT.md), with a unique, a
//! sparse, a TTL and a text index, a change stream, event streams with
//! their `$ev.ids` table and a snapshot, and a plain table. Written by
//! this code with `CAIRN_WRITE_DOCS_V8=1`; `docs-v8.expected.txt` is what
//! it read from it. A later build must read the same from it, keep it
//! `check`-clean through writes, and keep its event ids idempotent — the
//! guard that a format change comes with an upgrade, not a silent
//! misreading.
//!
//! Self-contained (only the public API, serde_json and tempfile), so that
//! a later build runs the same `ops` and `describe`.

use std::path::{Path, PathBuf};

use cairndb::document::query::FindOptions;
use cairndb::document::{Document, IndexOptions, TextIndexOptions, Value};
use cairndb::events::{
    Direction, EventData, EventFilter, EventStore, ExpectedVersion, ReadFrom, StreamVersion,
};
use cairndb::{Database, ReadableTable, TableDefinition};
use serde_json::json;

pub const FIXTURE: &str = "docs-v8.cairn";
pub const EXPECTED: &str = "docs-v8.expected.txt";

const KV: TableDefinition<&str, u64> = TableDefinition::new("counters");

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

/// The event id of event `i` of the fixture's streams (fixed, so a retry
/// of it after reopening is recognised).
pub fn event_id(i: u32) -> uuid::Uuid {
    uuid::Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_0000 + u128::from(i))
}

/// The operations that write the fixture.
pub fn ops(path: &Path) -> Database {
    let db = Database::builder()
        .page_size(4096)
        .log_size(0)
        .create(path)
        .unwrap();
    let c = db.collection::<Document>("orders");
    c.enable_change_stream().unwrap();
    c.create_index(&[("status", 1), ("created", -1)], IndexOptions::default())
        .unwrap();
    c.create_index(&[("customer.city", 1)], IndexOptions::default())
        .unwrap();
    c.create_index(&[("items.sku", 1)], IndexOptions::default())
        .unwrap();
    c.create_index(
        &[("ref", 1)],
        IndexOptions {
            unique: true,
            ..Default::default()
        },
    )
    .unwrap();
    c.create_index(
        &[("coupon", 1)],
        IndexOptions {
            sparse: true,
            ..Default::default()
        },
    )
    .unwrap();
    c.create_ttl_index("expires", 3600, IndexOptions::default())
        .unwrap();
    c.create_text_index(&[("note", 2), ("title", 1)], TextIndexOptions::default())
        .unwrap();
    let statuses = ["paid", "new", "shipped"];
    const NOTES: [&str; 4] = [
        "quick delivery",
        "gift wrapped",
        "fragile glass",
        "left at door",
    ];
    for i in 0..60i64 {
        let mut d = json!({
            "_id": i,
            "ref": format!("R{i:03}"),
            "status": statuses[i as usize % 3],
            "created": i * 10,
            "title": format!("order {i}"),
            "note": NOTES[i as usize % 4],
            // Far in the future: nothing expires while the fixture is read.
            "expires": {"$date": "2999-01-01T00:00:00Z"},
        });
        match i % 5 {
            0 => {}
            1 => d["customer"] = json!({"city": format!("c{}", i % 4)}),
            2 => d["customer"] = json!([{"city": "a"}, {"name": "x"}]),
            3 => d["customer"] = json!({"city": null}),
            _ => d["customer"] = json!({"city": format!("c{}", i % 7), "zip": i}),
        }
        if i % 3 == 0 {
            d["items"] = json!([{"sku": format!("S{}", i % 5), "qty": 1}, {"qty": 2}]);
        }
        if i % 4 == 0 {
            d["coupon"] = json!(format!("K{}", i % 3));
        }
        if i == 7 {
            d["status"] = json!("s".repeat(400));
        }
        c.insert(&doc(d)).unwrap();
    }
    c.update_many(
        json!({"status": "new"}),
        json!({"$set": {"status": "paid"}, "$inc": {"created": 1}}),
        Default::default(),
    )
    .unwrap();
    c.delete_one(json!({"_id": 59})).unwrap();
    let events = EventStore::new(&db);
    for i in 0..30u32 {
        let stream = format!("cart-{}", i % 3);
        let mut e = EventData::new("ItemAdded", format!("{{\"n\":{i}}}").into_bytes());
        e.id = event_id(i);
        let expected = match i / 3 {
            0 => ExpectedVersion::NoStream,
            v => ExpectedVersion::Exact(StreamVersion(u64::from(v) - 1)),
        };
        events.append(&stream, expected, &[e]).unwrap();
    }
    events
        .save_snapshot("cart-0", StreamVersion(5), b"five")
        .unwrap();
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_table(KV).unwrap();
        t.insert("orders", 60).unwrap();
        t.insert("carts", 3).unwrap();
    }
    tx.commit().unwrap();
    db
}

/// Queries on each index (filter, sort, limit).
pub const QUERIES: &[(&str, &str, Option<u64>)] = &[
    (r#"{"status": "paid"}"#, r#"{"created": -1}"#, Some(5)),
    (
        r#"{"status": {"$in": ["paid", "shipped"]}}"#,
        r#"{"created": 1}"#,
        Some(6),
    ),
    (r#"{"customer.city": null}"#, r#"{"_id": 1}"#, None),
    (r#"{"customer.city": {"$ne": null}}"#, r#"{"_id": 1}"#, None),
    (r#"{"items.sku": "S3"}"#, r#"{"_id": 1}"#, None),
    (r#"{"ref": {"$gte": "R050"}}"#, r#"{"ref": -1}"#, None),
    (r#"{"coupon": {"$exists": true}}"#, r#"{"_id": 1}"#, None),
    (
        r#"{"$text": {"$search": "gift fragile"}}"#,
        r#"{"_id": 1}"#,
        None,
    ),
    (r#"{"status": {"$regex": "^sss"}}"#, r#"{"_id": 1}"#, None),
];

/// Everything the reads give, one line per call.
pub fn describe(db: &Database) -> String {
    let c = db.collection::<Document>("orders");
    let mut out = vec![
        format!("collections {:?}", db.list_collections()),
        format!("orders len {:?}", c.len()),
    ];
    for idx in c.list_indexes().unwrap() {
        out.push(format!("  index {idx:?}"));
    }
    for (q, s, limit) in QUERIES {
        let sort: serde_json::Value = serde_json::from_str(s).unwrap();
        let mut opts = FindOptions::new().sort(sort).unwrap();
        if let Some(l) = limit {
            opts = opts.limit(*l);
        }
        let q: serde_json::Value = serde_json::from_str(q).unwrap();
        let e = c.explain(q.clone(), opts.clone()).unwrap();
        let ids: Vec<String> = c
            .find_with(q.clone(), opts)
            .unwrap()
            .map(|d| format!("{:?}", d.unwrap().get("_id").cloned()))
            .collect();
        out.push(format!(
            "  find {q} {s} {limit:?} -> {} plan={} ids={}",
            ids.len(),
            e.plan,
            ids.join(",")
        ));
    }
    let one = c.get(7i64).unwrap().map(|d| format!("{d:?}"));
    out.push(format!("  get 7 {}", one.unwrap_or_default()));
    out.push(format!("  change log {:?}", db.change_log_bounds()));
    let events = EventStore::new(db);
    for s in 0..3 {
        let stream = format!("cart-{s}");
        let evs = events
            .read_stream(&stream, ReadFrom::Start, Direction::Forward, 100)
            .unwrap();
        out.push(format!(
            "stream {stream} version {:?} snapshot {:?}",
            events.stream_version(&stream),
            events.load(&stream, None).map(|l| l.snapshot)
        ));
        for e in evs {
            out.push(format!(
                "  {} {} {} {} {}",
                e.version.0,
                e.position.0,
                e.id,
                e.event_type,
                String::from_utf8_lossy(&e.data)
            ));
        }
    }
    let all = events
        .read_all(ReadFrom::Start, Direction::Backward, 5, &EventFilter::all())
        .unwrap();
    out.push(format!(
        "all backward {:?}",
        all.iter().map(|e| e.position.0).collect::<Vec<_>>()
    ));
    let r = db.begin_read().unwrap();
    let t = r.open_table(KV).unwrap();
    let kv: Vec<(String, u64)> = t
        .iter()
        .unwrap()
        .map(|x| {
            let (k, v) = x.unwrap();
            (k.value().to_string(), v.value())
        })
        .collect();
    out.push(format!("counters {kv:?}"));
    out.join("\n") + "\n"
}

/// Writes the fixture (only when asked: it is checked in).
#[test]
fn write_fixture_with_the_v8_code() {
    if std::env::var("CAIRN_WRITE_DOCS_V8").is_err() {
        return;
    }
    let path = fixture(FIXTURE);
    let _ = std::fs::remove_file(&path);
    let db = ops(&path);
    let text = describe(&db);
    db.close().unwrap();
    let db = Database::open_read_only(&path).unwrap();
    assert_eq!(describe(&db), text, "reads the same after reopening");
    std::fs::write(fixture(EXPECTED), text).unwrap();
}
