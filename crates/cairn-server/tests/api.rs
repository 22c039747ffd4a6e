//! The HTTP API against a real server on a loopback port: every endpoint
//! family, the problem+json errors, auth, read-only mode, CORS, metrics and
//! a clean file after a graceful shutdown.

mod common;

use std::io::Read;

use common::{json, problem, TestServer};
use serde_json::{json, Value};

#[test]
fn collections_indexes_and_documents() {
    let s = TestServer::start();
    assert_eq!(json(s.get("/collections"), 200), json!({"collections": []}));
    json(s.post("/collections", &json!({"name": "people"})), 201);
    problem(
        s.post("/collections", &json!({"name": "people"})),
        409,
        "collection_exists",
    );
    assert_eq!(
        json(s.get("/collections"), 200),
        json!({"collections": ["people"]})
    );
    // Insert with and without an _id; a taken _id is 409.
    let r = json(
        s.post(
            "/collections/people/documents",
            &json!({"_id": 1, "name": "ada", "age": 36}),
        ),
        201,
    );
    assert_eq!(r["_id"], 1);
    let gen = json(
        s.post(
            "/collections/people/documents",
            &json!({"name": "bob", "age": 25}),
        ),
        201,
    );
    assert!(gen["_id"]["$oid"].is_string(), "{gen}");
    problem(
        s.post("/collections/people/documents", &json!({"_id": 1})),
        409,
        "duplicate_key",
    );
    assert_eq!(
        json(s.get("/collections/people/documents/1"), 200),
        json!({"_id": 1, "name": "ada", "age": 36})
    );
    // An ObjectId _id in the path, as JSON.
    let oid = gen["_id"].to_string();
    let enc: String = oid.bytes().map(|b| format!("%{b:02X}")).collect();
    assert_eq!(
        json(s.get(&format!("/collections/people/documents/{enc}")), 200)["name"],
        "bob"
    );
    // A string _id.
    json(
        s.post(
            "/collections/people/documents",
            &json!({"_id": "cy", "name": "cy"}),
        ),
        201,
    );
    assert_eq!(
        json(s.get("/collections/people/documents/cy"), 200)["name"],
        "cy"
    );
    // Replace.
    json(
        s.put(
            "/collections/people/documents/1",
            json!({"name": "ada", "age": 37}).to_string(),
        ),
        200,
    );
    assert_eq!(
        json(s.get("/collections/people/documents/1"), 200)["age"],
        37
    );
    problem(
        s.put(
            "/collections/people/documents/9",
            json!({"a": 1}).to_string(),
        ),
        404,
        "document_not_found",
    );
    problem(
        s.put(
            "/collections/people/documents/1",
            json!({"_id": 2}).to_string(),
        ),
        400,
        "id_mismatch",
    );
    // Indexes.
    let idx = json(
        s.post(
            "/collections/people/indexes",
            &json!({"fields": {"age": 1}, "unique": true}),
        ),
        201,
    );
    assert_eq!(idx["name"], "age_1");
    assert_eq!(
        json(s.get("/collections/people/indexes"), 200)["indexes"][0]["fields"],
        json!({"age": 1})
    );
    problem(
        s.post("/collections/people/documents", &json!({"age": 37})),
        409,
        "duplicate_key",
    );
    problem(
        s.post(
            "/collections/people/indexes",
            &json!({"fields": {"age": 2}}),
        ),
        400,
        "invalid_index",
    );
    assert_eq!(s.delete("/collections/people/indexes/age_1").status(), 204);
    problem(
        s.delete("/collections/people/indexes/age_1"),
        404,
        "index_not_found",
    );
    // Delete a document, then the collection.
    assert_eq!(s.delete("/collections/people/documents/1").status(), 204);
    problem(
        s.get("/collections/people/documents/1"),
        404,
        "document_not_found",
    );
    problem(
        s.delete("/collections/people/documents/1"),
        404,
        "document_not_found",
    );
    assert_eq!(s.delete("/collections/people").status(), 204);
    problem(s.delete("/collections/people"), 404, "collection_not_found");
    problem(
        s.get("/collections/people/documents/cy"),
        404,
        "collection_not_found",
    );
}

fn seed(s: &TestServer, n: i64) {
    let lines: String = (0..n)
        .map(|i| {
            format!(
                "{}\n",
                json!({"_id": i, "n": i, "even": i % 2 == 0, "tag": format!("t{}", i % 3)})
            )
        })
        .collect();
    let r = json(s.post_raw("/collections/nums/bulk", lines), 200);
    assert_eq!(r["written"], n);
}

/// Dates and UUIDs cross the API as MongoDB Extended JSON v2 and come back
/// as they went in: inserted, read by a UUID `_id` in the path, found by a
/// date range, updated with `$currentDate`.
#[test]
fn dates_and_uuids_round_trip_through_the_api() {
    let s = TestServer::start();
    json(s.post("/collections", &json!({"name": "ev"})), 201);
    let uid = json!({"$uuid": "12345678-9abc-def0-1234-56789abcdef0"});
    let doc = json!({"_id": uid, "at": {"$date": "2024-01-02T03:04:05.678Z"},
                     "old": {"$date": {"$numberLong": "-1"}}});
    json(s.post("/collections/ev/documents", &doc), 201);
    json(
        s.post(
            "/collections/ev/documents",
            &json!({"_id": 2, "at": {"$date": "2025-01-01T00:00:00+01:00"}}),
        ),
        201,
    );
    let enc: String = uid
        .to_string()
        .bytes()
        .map(|b| format!("%{b:02X}"))
        .collect();
    assert_eq!(
        json(s.get(&format!("/collections/ev/documents/{enc}")), 200),
        doc
    );
    let r = json(
        s.post(
            "/collections/ev/find",
            &json!({"filter": {"at": {"$gte": {"$date": "2024-06-01T00:00:00Z"}}}}),
        ),
        200,
    );
    assert_eq!(
        r["documents"],
        json!([{"_id": 2, "at": {"$date": "2024-12-31T23:00:00.000Z"}}])
    );
    let by_type = json!({"filter": {"at": {"$type": "date"}, "_id": {"$type": "binData"}}});
    assert_eq!(
        json(s.post("/collections/ev/count", &by_type), 200)["count"],
        1
    );
    json(
        s.post(
            "/collections/ev/update_many",
            &json!({"filter": {"_id": 2}, "update": {"$currentDate": {"seen": true}}}),
        ),
        200,
    );
    let got = json(s.get("/collections/ev/documents/2"), 200);
    assert!(
        got["seen"]["$date"]
            .as_str()
            .is_some_and(|d| d.ends_with('Z')),
        "{got}"
    );
}

/// `$date` strings in request bodies: dates before 1970 and offsets read
/// as the instant they name and come back in MongoDB's relaxed form
/// (`$numberLong` before 1970, UTC ISO strings from 1970 to 9999); a
/// malformed one (an impossible day, a missing offset, a bad offset) is a
/// 400 naming the string, in a body and in a filter alike.
#[test]
fn date_strings_in_requests() {
    let s = TestServer::start();
    for (id, text, back) in [
        (1, "1969-12-31T23:59:59.999Z", json!({"$numberLong": "-1"})),
        (
            2,
            "1969-12-31T23:30:00-01:00",
            json!("1970-01-01T00:30:00.000Z"),
        ),
        (
            3,
            "2024-03-01T00:30:00+01:00",
            json!("2024-02-29T23:30:00.000Z"),
        ),
        (
            4,
            "1900-01-01T05:30:00+0530",
            json!({"$numberLong": "-2208988800000"}),
        ),
    ] {
        json(
            s.post(
                "/collections/d/documents",
                &json!({"_id": id, "at": {"$date": text}}),
            ),
            201,
        );
        let got = json(s.get(&format!("/collections/d/documents/{id}")), 200);
        assert_eq!(got["at"], json!({ "$date": back }), "{text}");
    }
    let r = json(
        s.post(
            "/collections/d/find",
            &json!({"filter": {"at": {"$lt": {"$date": "1970-01-01T01:00:00+01:00"}}}}),
        ),
        200,
    );
    let ids: Vec<&Value> = r["documents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| &d["_id"])
        .collect();
    assert_eq!(ids, [1, 4], "{r}");
    for bad in [
        "2023-02-29T00:00:00Z",
        "2024-01-02T03:04:05",
        "2024-01-02T03:04:05+24:00",
    ] {
        let p = problem(
            s.post(
                "/collections/d/documents",
                &json!({"_id": 9, "at": {"$date": bad}}),
            ),
            400,
            "invalid_json",
        );
        assert!(
            p["detail"]
                .as_str()
                .unwrap()
                .contains(&format!("$date {bad:?} is not an ISO-8601 date-time")),
            "{p}"
        );
        let p = problem(
            s.post(
                "/collections/d/find",
                &json!({"filter": {"at": {"$gte": {"$date": bad}}}}),
            ),
            400,
            "invalid_json",
        );
        assert!(p["detail"].as_str().unwrap().contains(bad), "{p}");
    }
}

#[test]
fn queries_and_query_writes() {
    let s = TestServer::start();
    seed(&s, 20);
    let r = json(
        s.post(
            "/collections/nums/find",
            &json!({"filter": {"even": true, "n": {"$gte": 10}}, "sort": {"n": -1},
                    "projection": {"n": 1, "_id": 0}, "skip": 1, "limit": 3}),
        ),
        200,
    );
    assert_eq!(r["documents"], json!([{"n": 16}, {"n": 14}, {"n": 12}]));
    assert_eq!(r["cursor"], Value::Null);
    assert_eq!(
        json(
            s.post("/collections/nums/count", &json!({"filter": {"tag": "t1"}})),
            200
        )["count"],
        7
    );
    assert_eq!(
        json(s.post("/collections/nums/count", &json!({})), 200)["count"],
        20
    );
    let e = json(
        s.post("/collections/nums/explain", &json!({"filter": {"_id": 3}})),
        200,
    );
    assert!(e["plan"].as_str().is_some_and(|p| p.contains("_id")), "{e}");
    assert_eq!(e["returned"], 1);
    let u = json(
        s.post(
            "/collections/nums/update_many",
            &json!({"filter": {"even": false}, "update": {"$inc": {"n": 100}}}),
        ),
        200,
    );
    assert_eq!(
        (u["matched"].as_u64(), u["modified"].as_u64()),
        (Some(10), Some(10))
    );
    let u = json(
        s.post(
            "/collections/nums/update_many",
            &json!({"filter": {"_id": 99}, "update": {"$set": {"x": 1}}, "upsert": true}),
        ),
        200,
    );
    assert_eq!(u["upserted_id"], 99);
    problem(
        s.post(
            "/collections/nums/update_many",
            &json!({"filter": {}, "update": {"$nope": {}}}),
        ),
        400,
        "unknown_operator",
    );
    let d = json(
        s.post(
            "/collections/nums/delete_many",
            &json!({"filter": {"n": {"$gte": 100}}}),
        ),
        200,
    );
    assert_eq!(d["deleted"], 10);
    assert_eq!(
        json(s.post("/collections/nums/count", &json!({})), 200)["count"],
        11
    );
    // A cursor can be closed early.
    let r = json(
        s.post("/collections/nums/find", &json!({"batch_size": 2})),
        200,
    );
    let c = r["cursor"].as_str().expect("cursor").to_string();
    assert_eq!(s.delete(&format!("/cursors/{c}")).status(), 204);
    problem(s.get(&format!("/cursors/{c}")), 404, "cursor_not_found");
}

#[test]
fn bulk_reports_the_bad_line_and_writes_nothing_of_its_batch() {
    let s = TestServer::start();
    // Batches of 3: lines 1-3 commit; line 5 is bad, so 4-6 do not.
    let body = "{\"_id\":1}\n{\"_id\":2}\n\n{\"_id\":3}\n{\"_id\":4}\n{\"_id\":5,\n{\"_id\":6}\n";
    let p = problem(
        s.post_raw("/collections/b/bulk?batch=3", body),
        400,
        "malformed_json",
    );
    assert_eq!(p["line"], 6, "{p}");
    assert_eq!(p["written"], 3, "{p}");
    assert!(
        p["detail"].as_str().is_some_and(|d| d.contains("line 6")),
        "{p}"
    );
    assert_eq!(
        json(s.post("/collections/b/count", &json!({})), 200)["count"],
        3
    );
    // A duplicate _id in insert mode: the whole batch holding it is undone.
    let p = problem(
        s.post_raw(
            "/collections/b/bulk?batch=10",
            "{\"_id\":10}\n{\"_id\":1}\n",
        ),
        409,
        "duplicate_key",
    );
    assert_eq!(p["line"], 2);
    assert_eq!(p["written"], 0);
    problem(
        s.get("/collections/b/documents/10"),
        404,
        "document_not_found",
    );
    // Upsert mode replaces.
    let r = json(
        s.post_raw(
            "/collections/b/bulk?mode=upsert",
            "{\"_id\":1,\"v\":2}\n{\"_id\":7}",
        ),
        200,
    );
    assert_eq!(r["written"], 2);
    assert_eq!(json(s.get("/collections/b/documents/1"), 200)["v"], 2);
    problem(
        s.post_raw("/collections/b/bulk", "[1]\n"),
        400,
        "not_an_object",
    );
}

#[test]
fn kv_tables() {
    let s = TestServer::start();
    assert_eq!(json(s.put("/kv/t/keys/a", "1"), 200)["replaced"], false);
    assert_eq!(json(s.put("/kv/t/keys/a", "one"), 200)["replaced"], true);
    json(s.put("/kv/t/keys/b", "two"), 200);
    // A binary key and value through base64 (URL-safe in the path).
    json(s.put("/kv/t/keys/_wA?encoding=base64", vec![0u8, 255]), 200);
    assert_eq!(
        json(s.get("/kv/t/keys/a"), 200),
        json!({"key": "a", "value": "one"})
    );
    assert_eq!(
        json(s.get("/kv/t/keys/_wA?encoding=base64"), 200),
        json!({"key_b64": "/wA=", "value_b64": "AP8="})
    );
    problem(s.get("/kv/t/keys/zz"), 404, "key_not_found");
    problem(s.get("/kv/none/keys/a"), 404, "table_not_found");
    let l = json(s.get("/kv"), 200);
    assert_eq!(
        l["tables"],
        json!([{"name": "t", "key_type": "&[u8]", "value_type": "&[u8]", "len": 3}])
    );
    let p1 = json(s.get("/kv/t/range?limit=2"), 200);
    assert_eq!(
        p1["entries"],
        json!([{"key": "a", "value": "one"}, {"key": "b", "value": "two"}])
    );
    assert_eq!(p1["next"]["key_b64"], "/wA=");
    let p2 = json(
        s.get("/kv/t/range?limit=2&start=%2FwA%3D&encoding=base64"),
        200,
    );
    assert_eq!(p2["entries"].as_array().map(Vec::len), Some(1));
    assert_eq!(p2["next"], Value::Null);
    assert_eq!(s.delete("/kv/t/keys/a").status(), 204);
    problem(s.delete("/kv/t/keys/a"), 404, "key_not_found");
    problem(s.put("/kv/$docs.1/keys/a", "x"), 403, "internal_table");
    problem(
        s.get("/kv/t/keys/%%%?encoding=base64"),
        400,
        "invalid_base64",
    );
}

#[test]
fn event_streams() {
    let s = TestServer::start();
    let r = json(
        s.post(
            "/streams/order-1/events?expected=no_stream",
            &json!([{"type": "Created", "data": {"n": 1}}, {"type": "Paid", "data_b64": "AAE="}]),
        ),
        200,
    );
    assert_eq!(
        r,
        json!({"version": 1, "first_position": 0, "count": 2, "idempotent": false})
    );
    // The wrong expected version: 409 with the current one.
    let p = problem(
        s.post(
            "/streams/order-1/events?expected=0",
            &json!([{"type": "X"}]),
        ),
        409,
        "wrong_expected_version",
    );
    assert_eq!(p["current_version"], 1);
    problem(
        s.post(
            "/streams/order-1/events?expected=no_stream",
            &json!([{"type": "X"}]),
        ),
        409,
        "wrong_expected_version",
    );
    // An event id makes a retry idempotent.
    let id = "0192a1b2-0000-7000-8000-000000000001";
    let ev = json!([{"type": "Shipped", "id": id, "metadata": {"by": "x"}}]);
    json(s.post("/streams/order-1/events?expected=1", &ev), 200);
    let again = json(s.post("/streams/order-1/events?expected=1", &ev), 200);
    assert_eq!(again["idempotent"], true);
    json(
        s.post("/streams/order-2/events", &json!([{"type": "Created"}])),
        200,
    );
    // Read forward and backward, in pages.
    let f = json(s.get("/streams/order-1/events?limit=2"), 200);
    let types: Vec<&str> = f["events"]
        .as_array()
        .map(|a| a.iter().filter_map(|e| e["type"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(types, ["Created", "Paid"]);
    assert_eq!(f["events"][0]["data"], json!({"n": 1}));
    assert_eq!(f["events"][1]["data_b64"], "AAE=");
    assert_eq!(f["next"], 2);
    let b = json(
        s.get("/streams/order-1/events?direction=backward&limit=1"),
        200,
    );
    assert_eq!(b["events"][0]["type"], "Shipped");
    assert_eq!(b["events"][0]["id"], id);
    assert_eq!(b["events"][0]["metadata"], json!({"by": "x"}));
    assert_eq!(b["next"], 1);
    problem(s.get("/streams/nope/events"), 404, "stream_not_found");
    // The global log, filtered.
    let all = json(s.get("/events?types=Created"), 200);
    let streams: Vec<&str> = all["events"]
        .as_array()
        .map(|a| a.iter().filter_map(|e| e["stream"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(streams, ["order-1", "order-2"]);
    let back = json(s.get("/events?direction=backward&limit=1"), 200);
    assert_eq!(back["events"][0]["position"], 3);
    let l = json(s.get("/streams?prefix=order-"), 200);
    assert_eq!(
        l["streams"][0],
        json!({"name": "order-1", "version": 2, "state": "live", "first_visible": 0})
    );
    problem(
        s.post("/streams/order-1/events?expected=soon", &json!([])),
        400,
        "invalid_request",
    );
    problem(
        s.post(
            "/streams/order-1/events",
            &json!([{"type": "A", "id": "nope"}]),
        ),
        400,
        "invalid_event",
    );
}

#[test]
fn stats_check_backup_and_compact() {
    let s = TestServer::start();
    seed(&s, 50);
    json(s.post("/streams/s/events", &json!([{"type": "A"}])), 200);
    let st = json(s.get("/stats"), 200);
    assert!(st["pages"]["total"].as_u64().is_some_and(|n| n > 3), "{st}");
    assert!(
        st["tables"].as_array().is_some_and(|t| !t.is_empty()),
        "{st}"
    );
    // The check streams one line per phase, then a summary.
    let r = s.post("/check", &json!({}));
    assert_eq!(r.status(), 200);
    let text = r.text().expect("body");
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert!(lines
        .iter()
        .any(|l| l["phase"] == "pages" && l["status"] == "done"));
    assert!(lines
        .iter()
        .any(|l| l["phase"] == "indexes" && l["collection"] == "nums"));
    assert!(lines
        .iter()
        .any(|l| l["phase"] == "events" && l["status"] == "done"));
    assert_eq!(
        lines.last(),
        Some(&json!({"done": true, "ok": true, "problems": 0}))
    );
    // The backup is a database file with the same contents.
    let mut r = s.get("/backup");
    assert_eq!(r.status(), 200);
    let mut bytes = Vec::new();
    r.read_to_end(&mut bytes).expect("backup body");
    let copy = s.dir.path().join("copy.cairn");
    std::fs::write(&copy, &bytes).expect("write copy");
    {
        let db = cairndb::Database::open_read_only(&copy).expect("open the backup");
        assert!(db.check_integrity().expect("check").is_ok());
        let c = db.collection::<cairndb::document::Document>("nums");
        assert_eq!(c.len().expect("len"), 50);
    }
    // Compaction: refused (423) while a cursor holds a snapshot.
    let f = json(
        s.post("/collections/nums/find", &json!({"batch_size": 5})),
        200,
    );
    let cur = f["cursor"].as_str().expect("cursor").to_string();
    problem(s.post("/compact", &json!({})), 423, "readers_active");
    assert_eq!(s.delete(&format!("/cursors/{cur}")).status(), 204);
    let c = json(s.post("/compact", &json!({})), 200);
    assert!(
        c["after_bytes"].as_u64() <= c["before_bytes"].as_u64(),
        "{c}"
    );
    assert_eq!(
        json(s.post("/collections/nums/count", &json!({})), 200)["count"],
        50
    );
}

#[test]
fn errors_are_problem_json() {
    let s = TestServer::start();
    json(s.post("/collections", &json!({"name": "c"})), 201);
    // Malformed JSON names the position.
    let p = problem(
        s.post_raw("/collections/c/find", "{\"filter\": {\"a\": }"),
        400,
        "malformed_json",
    );
    assert_eq!(
        (p["line"].as_u64(), p["column"].as_u64()),
        (Some(1), Some(18))
    );
    // A bad filter names the operator.
    let p = problem(
        s.post(
            "/collections/c/find",
            &json!({"filter": {"a": {"$regexx": 1}}}),
        ),
        400,
        "unknown_operator",
    );
    assert!(
        p["detail"].as_str().is_some_and(|d| d.contains("$regexx")),
        "{p}"
    );
    problem(
        s.post("/collections/c/find", &json!({"sort": {"a": 5}})),
        400,
        "invalid_sort",
    );
    problem(
        s.post("/collections/c/find", &json!({"filter": {}, "bogus": 1})),
        400,
        "invalid_request",
    );
    problem(
        s.post("/collections/c/documents", &json!([1, 2])),
        400,
        "not_an_object",
    );
    // Unknown collection.
    problem(
        s.post("/collections/nope/find", &json!({})),
        404,
        "collection_not_found",
    );
    problem(
        s.get("/collections/nope/indexes"),
        404,
        "collection_not_found",
    );
    // Over the body limit (64 KiB in these tests).
    let big = format!("{{\"x\": \"{}\"}}", "a".repeat(100 << 10));
    problem(
        s.post_raw("/collections/c/documents", big),
        413,
        "payload_too_large",
    );
    // Unknown route and method.
    problem(s.get("/nope"), 404, "no_route");
    let r = s
        .client
        .patch(format!("{}/collections", s.base))
        .send()
        .expect("PATCH");
    problem(r, 405, "method_not_allowed");
    // Every response carries a request id.
    let r = s.get("/collections");
    assert!(r.headers().get("x-request-id").is_some());
}

#[test]
fn bearer_token_is_required() {
    let s = TestServer::start_with(|c| c.token = Some("s3cret-token".into()));
    json(s.get("/collections"), 200);
    let url = format!("{}/collections", s.base);
    let r = s.client.get(&url).send().expect("GET");
    assert_eq!(
        r.headers()
            .get("www-authenticate")
            .and_then(|v| v.to_str().ok()),
        Some("Bearer")
    );
    problem(r, 401, "unauthorized");
    for bad in ["s3cret-tokeN", "s3cret-token2", "", "s3cret"] {
        let r = s.client.get(&url).bearer_auth(bad).send().expect("GET");
        problem(r, 401, "unauthorized");
    }
    let r = s
        .client
        .get(format!("{}/metrics", s.root))
        .send()
        .expect("GET");
    problem(r, 401, "unauthorized");
}

#[test]
fn a_non_loopback_bind_needs_a_token() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut c = common::config(dir.path().join("t.cairn"));
    c.bind = "0.0.0.0:0".parse().expect("addr");
    let rt = tokio::runtime::Runtime::new().expect("rt");
    match rt.block_on(cairn_server::start(c, false)) {
        Err(cairn_server::ServeError::InsecureBind(_)) => {}
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("a non-loopback bind without a token was accepted"),
    }
    // Nothing was created.
    assert!(!dir.path().join("t.cairn").exists());
}

#[test]
fn read_only_mode_refuses_writes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t.cairn");
    {
        let db = cairndb::Database::create(&path).expect("create");
        db.collection::<cairndb::document::Document>("c")
            .insert(&cairndb::document::Document::new().with("_id", 1))
            .expect("insert");
        db.close().expect("close");
    }
    let s = TestServer::start_on(dir, path, |c| c.read_only = true);
    // The studio reads the mode here to disable its editing controls.
    assert_eq!(json(s.get("/server"), 200)["read_only"], true);
    assert_eq!(json(s.get("/collections/c/documents/1"), 200)["_id"], 1);
    assert_eq!(
        json(s.post("/collections/c/count", &json!({})), 200)["count"],
        1
    );
    problem(
        s.post("/collections/c/documents", &json!({})),
        403,
        "read_only",
    );
    problem(s.delete("/collections/c/documents/1"), 403, "read_only");
    problem(
        s.post("/collections", &json!({"name": "d"})),
        403,
        "read_only",
    );
    problem(s.put("/kv/t/keys/a", "1"), 403, "read_only");
    problem(
        s.post("/streams/s/events", &json!([{"type": "A"}])),
        403,
        "read_only",
    );
    problem(s.post("/compact", &json!({})), 403, "read_only");
    problem(
        s.post(
            "/collections/c/update_many",
            &json!({"update": {"$set": {"a": 1}}}),
        ),
        403,
        "read_only",
    );
    assert_eq!(json(s.get("/collections/c/documents/1"), 200)["_id"], 1);
}

#[test]
fn cors_only_when_asked() {
    let s = TestServer::start();
    let r = s.get_with("/collections", "origin", "http://example.test");
    assert!(r.headers().get("access-control-allow-origin").is_none());
    let s = TestServer::start_with(|c| c.cors = Some("http://example.test".into()));
    let r = s.get_with("/collections", "origin", "http://example.test");
    assert_eq!(
        r.headers()
            .get("access-control-allow-origin")
            .and_then(|v| v.to_str().ok()),
        Some("http://example.test")
    );
}

#[test]
fn metrics_count_requests_by_route_and_status() {
    let s = TestServer::start();
    json(s.get("/collections"), 200);
    problem(
        s.get("/collections/x/documents/1"),
        404,
        "collection_not_found",
    );
    let text = s
        .client
        .get(format!("{}/metrics", s.root))
        .send()
        .expect("GET")
        .text()
        .expect("body");
    assert!(
        text.contains(
            r#"cairn_http_requests_total{method="GET",route="/api/v1/collections",status="200"} 1"#
        ),
        "{text}"
    );
    assert!(
        text.contains(r#"route="/api/v1/collections/{name}/documents/{id}",status="404"} 1"#),
        "{text}"
    );
    assert!(
        text.contains("cairn_http_request_duration_seconds_bucket{"),
        "{text}"
    );
    assert!(text.contains("\ncairn_latest_commit "), "{text}");
    assert!(text.contains("\ncairn_live_readers "), "{text}");
    assert!(text.contains("\ncairn_pinned_bytes "), "{text}");
    assert_eq!(json(s.get("/server"), 200)["read_only"], false);
}

/// A counter's value in a `/metrics` text.
fn counter(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {text}"))
}

/// `/metrics` has the engine's commits, device flushes and page-cache hits
/// and misses, as counters that move with the work.
#[test]
fn metrics_count_commits_flushes_and_cache_reads() {
    let s = TestServer::start();
    let scrape = || {
        s.client
            .get(format!("{}/metrics", s.root))
            .send()
            .expect("GET")
            .text()
            .expect("body")
    };
    let t0 = scrape();
    for name in [
        "cairn_commits_total",
        "cairn_flushes_total",
        "cairn_page_cache_hits_total",
        "cairn_page_cache_misses_total",
    ] {
        assert!(t0.contains(&format!("# TYPE {name} counter\n")), "{t0}");
    }
    for i in 0..5 {
        json(s.post("/collections/m/documents", &json!({"_id": i})), 201);
    }
    for i in 0..5 {
        json(s.get(&format!("/collections/m/documents/{i}")), 200);
    }
    let t1 = scrape();
    let moved = |name: &str| counter(&t1, name) - counter(&t0, name);
    assert!(moved("cairn_commits_total") >= 5, "{t1}");
    // Durable inserts (the default durability) flush the file.
    assert!(moved("cairn_flushes_total") >= 1, "{t1}");
    assert!(moved("cairn_page_cache_hits_total") >= 1, "{t1}");
}

/// A subscription past `max_subscribers` gets 503 problem+json with
/// `Retry-After`; once one ends, a new one is accepted.
#[test]
fn sse_subscribers_are_capped() {
    let s = TestServer::start_with(|c| c.max_subscribers = 2);
    let open = || {
        s.client
            .get(format!("{}/events/subscribe", s.base))
            .send()
            .expect("subscribe")
    };
    let a = open();
    let b = open();
    assert_eq!((a.status().as_u16(), b.status().as_u16()), (200, 200));
    let r = open();
    let retry = r
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let p = problem(r, 503, "too_many_subscribers");
    assert_eq!(retry.as_deref(), Some("5"), "{p}");
    assert_eq!(p["retry_after"], 5, "{p}");
    // A stream subscription counts against the same cap.
    problem(
        s.client
            .get(format!("{}/streams/x/subscribe", s.base))
            .send()
            .expect("subscribe"),
        503,
        "too_many_subscribers",
    );
    // So does a collection's change stream.
    problem(
        s.client
            .get(format!("{}/collections/c/changes", s.base))
            .send()
            .expect("watch"),
        503,
        "too_many_subscribers",
    );
    drop(a);
    // The subscription's thread notices the client left within its poll.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let r = open();
        if r.status() == 200 {
            break;
        }
        assert_eq!(r.status(), 503);
        assert!(
            std::time::Instant::now() < deadline,
            "the slot was never freed"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    drop(b);
}

/// A backup several times larger than the server's queue of chunks is
/// streamed (no Content-Length: it is not built whole first), twice the
/// same bytes, and opens as a database with every document.
#[test]
fn a_large_backup_is_streamed_and_restores() {
    let s = TestServer::start_with(|c| c.max_body = 16 << 20);
    let pad = "z".repeat(500);
    let mut body = String::new();
    for i in 0..4000 {
        body.push_str(&json!({"_id": i, "pad": pad}).to_string());
        body.push('\n');
    }
    assert_eq!(
        json(s.post_raw("/collections/big/bulk", body), 200)["written"],
        4000
    );
    let fetch = || {
        let mut r = s.get("/backup");
        assert_eq!(r.status(), 200);
        assert!(
            r.headers().get("content-length").is_none(),
            "a backup must be streamed, not built in memory first: {:?}",
            r.headers()
        );
        let mut bytes = Vec::new();
        r.read_to_end(&mut bytes).expect("backup body");
        bytes
    };
    let bytes = fetch();
    let bound = cairn_server::BACKUP_CHUNK_BYTES * cairn_server::BACKUP_CHUNKS_QUEUED;
    assert!(bytes.len() > 4 * bound, "{} bytes", bytes.len());
    assert!(fetch() == bytes, "two backups of one commit differ");
    let copy = s.dir.path().join("copy.cairn");
    std::fs::write(&copy, &bytes).expect("write copy");
    let db = cairndb::Database::open_read_only(&copy).expect("open the backup");
    assert!(db.check_integrity().expect("check").is_ok());
    let c = db.collection::<cairndb::document::Document>("big");
    assert_eq!(c.len().expect("len"), 4000);
    let d = c.get(3999).expect("get").expect("the last document");
    assert_eq!(d.get("pad").map(|v| v.to_json()), Some(json!(pad)));
}

/// Bulk bodies: a line over the per-line limit is a 413 naming the line;
/// a body over the bulk limit is a 413 naming the line it reached; the
/// batches before stay written.
#[test]
fn bulk_lines_and_bodies_have_limits() {
    let s = TestServer::start_with(|c| {
        c.max_bulk_line = 100;
        c.max_bulk_body = 2000;
    });
    let long = format!("{{\"_id\":3,\"pad\":\"{}\"}}", "x".repeat(200));
    let body = format!("{{\"_id\":1}}\n{{\"_id\":2}}\n{long}\n{{\"_id\":4}}\n");
    let p = problem(
        s.post_raw("/collections/l/bulk?batch=2", body),
        413,
        "payload_too_large",
    );
    assert_eq!(p["line"], 3, "{p}");
    assert_eq!(p["written"], 2, "{p}");
    let d = p["detail"].as_str().unwrap_or("");
    assert!(d.contains("line 3") && d.contains("100 bytes"), "{p}");
    // The last line, without a newline, is checked too.
    let p = problem(
        s.post_raw("/collections/l/bulk", long.clone()),
        413,
        "payload_too_large",
    );
    assert_eq!(p["line"], 1, "{p}");
    // Short lines (13 bytes each), too many bytes: line 154 holds byte
    // 2,001.
    let mut body = String::new();
    for i in 0..300 {
        body.push_str(&format!("{{\"_id\":{:04}}}\n", 1000 + i));
    }
    assert_eq!(body.len(), 300 * 13);
    let p = problem(
        s.post_raw("/collections/m/bulk?batch=1000", body),
        413,
        "payload_too_large",
    );
    let d = p["detail"].as_str().unwrap_or("");
    assert!(d.contains("2000 bytes"), "{p}");
    assert_eq!(p["line"], 154, "{p}");
    // Under both limits: written.
    let r = json(s.post_raw("/collections/l/bulk", "{\"_id\":9}\n"), 200);
    assert_eq!(r["written"], 1);
}

/// `If-Match` on a replace: the ETag of a GET lets one save through; a
/// save from an older version is refused with 412 and the current ETag;
/// of two saves from the same version at once, exactly one lands.
#[test]
fn replace_with_if_match_refuses_a_stale_save() {
    let s = TestServer::start();
    json(
        s.post("/collections/e/documents", &json!({"_id": 1, "v": 0})),
        201,
    );
    let etag_of = |r: &reqwest::blocking::Response| {
        r.headers()
            .get("etag")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
            .expect("an ETag")
    };
    let r = s.get("/collections/e/documents/1");
    let e0 = etag_of(&r);
    assert!(e0.starts_with('"') && e0.ends_with('"'), "{e0}");
    let put = |body: &Value, tag: &str| {
        s.client
            .put(format!("{}/collections/e/documents/1", s.base))
            .header("if-match", tag)
            .body(body.to_string())
            .send()
            .expect("PUT")
    };
    let r = put(&json!({"v": 1}), &e0);
    assert_eq!(r.status(), 200);
    let e1 = etag_of(&r);
    assert_ne!(e1, e0);
    assert_eq!(etag_of(&s.get("/collections/e/documents/1")), e1);
    // A save from the first version: refused, nothing written.
    let p = problem(put(&json!({"v": 2}), &e0), 412, "precondition_failed");
    assert_eq!(p["current_etag"], e1.as_str(), "{p}");
    assert_eq!(json(s.get("/collections/e/documents/1"), 200)["v"], 1);
    // `*` and a list with the current tag match.
    assert_eq!(put(&json!({"v": 3}), "*").status(), 200);
    let e3 = etag_of(&s.get("/collections/e/documents/1"));
    assert_eq!(
        put(&json!({"v": 4}), &format!("\"nope\", {e3}")).status(),
        200
    );
    // Without If-Match: last writer wins, as before.
    assert_eq!(
        s.put("/collections/e/documents/1", "{\"v\":5}").status(),
        200
    );
    // Two saves from the same version at the same instant, many times.
    for round in 0..20 {
        let tag = etag_of(&s.get("/collections/e/documents/1"));
        let barrier = std::sync::Barrier::new(2);
        let statuses: Vec<u16> = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..2)
                .map(|who| {
                    let (tag, barrier, s) = (&tag, &barrier, &s);
                    sc.spawn(move || {
                        let c = reqwest::blocking::Client::new();
                        let req = c
                            .put(format!("{}/collections/e/documents/1", s.base))
                            .header("if-match", tag.as_str())
                            .body(json!({"v": 100 + round * 2 + who}).to_string());
                        barrier.wait();
                        req.send().expect("PUT").status().as_u16()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().expect("thread")).collect()
        });
        let mut sorted = statuses.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, vec![200, 412], "round {round}: {statuses:?}");
    }
    // A deleted document: 412 with If-Match (it is not that version).
    assert_eq!(s.delete("/collections/e/documents/1").status(), 204);
    problem(put(&json!({"v": 9}), "*"), 412, "precondition_failed");
}

#[test]
fn graceful_shutdown_leaves_a_clean_file() {
    let mut s = TestServer::start();
    seed(&s, 100);
    json(
        s.post("/streams/s/events", &json!([{"type": "A"}, {"type": "B"}])),
        200,
    );
    json(s.put("/kv/t/keys/k", "v"), 200);
    // An open cursor and a live subscription do not hold the shutdown up.
    let f = json(
        s.post("/collections/nums/find", &json!({"batch_size": 5})),
        200,
    );
    assert!(f["cursor"].is_string());
    let sub = s
        .client
        .get(format!("{}/events/subscribe", s.base))
        .send()
        .expect("subscribe");
    assert_eq!(sub.status(), 200);
    let t = std::time::Instant::now();
    s.stop();
    assert!(
        t.elapsed() < std::time::Duration::from_secs(3),
        "{:?}",
        t.elapsed()
    );
    drop(sub);
    let db = cairndb::Database::open(&s.path).expect("reopen");
    // Closed cleanly: recovery had nothing to do.
    assert!(db.recovery_report().clean, "{:?}", db.recovery_report());
    assert!(db.recovery_report().skipped.is_empty());
    assert!(db.check_integrity().expect("check").is_ok());
    assert!(cairndb::events::EventStore::new(&db)
        .check()
        .expect("events")
        .is_empty());
    let c = db.collection::<cairndb::document::Document>("nums");
    assert_eq!(c.len().expect("len"), 100);
    assert!(c.check_indexes().expect("indexes").is_empty());
    db.close().expect("close");
}

#[test]
fn a_request_past_the_timeout_gets_a_problem() {
    use std::io::Write;
    let s = TestServer::start_with(|c| c.request_timeout = std::time::Duration::from_millis(300));
    // A body announced but never sent: the handler waits for it.
    let addr = s.root.trim_start_matches("http://").to_string();
    let mut tcp = std::net::TcpStream::connect(&addr).expect("connect");
    tcp.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .expect("timeout");
    write!(
        tcp,
        "POST /api/v1/collections/c/documents HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{"
    )
    .expect("write");
    let t = std::time::Instant::now();
    let mut buf = vec![0u8; 4096];
    let n = tcp.read(&mut buf).expect("read");
    let text = String::from_utf8_lossy(&buf[..n]);
    assert!(t.elapsed() < std::time::Duration::from_secs(5));
    assert!(text.starts_with("HTTP/1.1 503"), "{text}");
    assert!(text.contains("application/problem+json"), "{text}");
    assert!(text.contains("\"code\":\"request_timeout\""), "{text}");
}

/// A TTL index through the index route: listed with its
/// `expire_after_seconds`, expired documents deleted by
/// `delete_expired` (MongoDB manual, "TTL Indexes": dates in the past by
/// more than the expiry are removed; other values never expire).
#[test]
fn ttl_index_via_http() {
    let s = TestServer::start();
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    for (id, at) in [
        (1, json!(now_ms - 3_600_000)),
        (2, json!(now_ms)),
        (3, json!("soon")),
    ] {
        json(
            s.post("/collections/t/documents", &json!({"_id": id, "at": at})),
            201,
        );
    }
    // One ascending field only.
    problem(
        s.post(
            "/collections/t/indexes",
            &json!({"fields": {"at": 1, "b": 1}, "expire_after_seconds": 60}),
        ),
        400,
        "invalid_index",
    );
    let made = json(
        s.post(
            "/collections/t/indexes",
            &json!({"fields": {"at": 1}, "expire_after_seconds": 60}),
        ),
        201,
    );
    assert_eq!(made["expire_after_seconds"], 60, "{made}");
    let list = json(s.get("/collections/t/indexes"), 200);
    let ttl: Vec<&Value> = list["indexes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["name"] == "at_1")
        .collect();
    assert_eq!(ttl.len(), 1, "{list}");
    assert_eq!(ttl[0]["expire_after_seconds"], 60);
    // Creating the index deleted a first batch (the hour-old document).
    let ids = |s: &TestServer| -> Vec<i64> {
        let left = json(s.post("/collections/t/find", &json!({})), 200);
        left["documents"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["_id"].as_i64().unwrap())
            .collect()
    };
    assert_eq!(ids(&s), [2, 3]);
    // An auto-committed insert deletes the expired documents with it, its
    // own included: nothing is left for delete_expired.
    json(
        s.post(
            "/collections/t/documents",
            &json!({"_id": 4, "at": now_ms - 120_000}),
        ),
        201,
    );
    assert_eq!(ids(&s), [2, 3]);
    let gone = json(s.post_raw("/collections/t/delete_expired", ""), 200);
    assert_eq!(gone["deleted"], 0, "{gone}");
    // A bulk write's transactions leave expired documents to
    // delete_expired, which deletes them all (and no other).
    let lines = format!(
        "{}\n{}\n{}\n",
        json!({"_id": 5, "at": now_ms - 120_000}),
        json!({"_id": 6, "at": now_ms - 7_200_000}),
        json!({"_id": 7, "at": now_ms + 3_600_000}),
    );
    json(s.post_raw("/collections/t/bulk", lines), 200);
    assert_eq!(ids(&s), [2, 3, 5, 6, 7]);
    let gone = json(s.post_raw("/collections/t/delete_expired", ""), 200);
    assert_eq!(gone["deleted"], 2, "{gone}");
    assert_eq!(ids(&s), [2, 3, 7]);
    let gone = json(s.post_raw("/collections/t/delete_expired", ""), 200);
    assert_eq!(gone["deleted"], 0, "{gone}");
    problem(
        s.post_raw("/collections/nope/delete_expired", ""),
        404,
        "collection_not_found",
    );
    // An expiry past MongoDB's bound is refused.
    problem(
        s.post(
            "/collections/t/indexes",
            &json!({"fields": {"x": 1}, "expire_after_seconds": 1u64 << 40}),
        ),
        400,
        "index_error",
    );
}

/// An append that repeats the first events of an earlier one (same ids)
/// but not all of them is a conflict with the stream's state: 409
/// `idempotency_conflict` with the library's message, nothing written.
#[test]
fn idempotency_conflict_is_409() {
    let s = TestServer::start();
    let a = "0190d3c4-0000-7000-8000-000000000001";
    let b = "0190d3c4-0000-7000-8000-000000000002";
    let c = "0190d3c4-0000-7000-8000-000000000003";
    json(
        s.post(
            "/streams/s/events",
            &json!([{"type": "T", "id": a}, {"type": "T", "id": b}]),
        ),
        200,
    );
    let p = problem(
        s.post(
            "/streams/s/events?expected=no_stream",
            &json!([{"type": "T", "id": a}, {"type": "T", "id": c}]),
        ),
        409,
        "idempotency_conflict",
    );
    assert!(
        p["detail"]
            .as_str()
            .unwrap()
            .contains("nothing was written"),
        "{p}"
    );
    let read = json(s.get("/streams/s/events"), 200);
    assert_eq!(read["events"].as_array().unwrap().len(), 2, "{read}");
}

/// A file holding `expired` documents whose date is an hour old under a
/// TTL index of 60 s, 10 dated an hour ahead and one without a date; made
/// with a clock at 1970, so none was deleted when written.
fn ttl_file(expired: usize) -> (tempfile::TempDir, std::path::PathBuf) {
    use cairndb::document::{Document, IndexOptions, ManualClock, Value};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.cairn");
    let db = cairndb::Database::create(&path).unwrap();
    let c = db
        .collection::<Document>("t")
        .with_clock(std::sync::Arc::new(ManualClock::new(0)));
    c.create_ttl_index("at", 60, IndexOptions::default())
        .unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let mut docs: Vec<Document> = (0..expired as i64)
        .map(|i| {
            Document::new()
                .with("_id", Value::Int(i))
                .with("at", Value::Date(now - 3_600_000))
        })
        .collect();
    docs.extend((0..10).map(|i| {
        Document::new()
            .with("_id", Value::Int(-1 - i))
            .with("at", Value::Date(now + 3_600_000))
    }));
    docs.push(Document::new().with("_id", Value::String("no date".into())));
    c.insert_many(&docs).unwrap();
    // Another collection without a TTL index: never touched.
    db.collection::<Document>("plain")
        .insert(&Document::new().with("at", Value::Date(0)))
        .unwrap();
    db.close().unwrap();
    (dir, path)
}

/// The TTL sweep (MongoDB manual, "TTL Indexes": a background task removes
/// expired documents periodically, 60 s by default): documents already
/// expired when the server starts, which no request writes after, are
/// deleted on the server's timer — more of them than one batch
/// (`TTL_SWEEP_BATCH`), so in several transactions — and counted in
/// `/stats` (`ttl`) and `/metrics`; documents not expired, without a date,
/// or in a collection without a TTL index stay. With `--ttl-interval 0`
/// (or read-only) nothing is swept.
#[test]
fn ttl_sweep_deletes_expired_documents_on_a_timer() {
    let expired = cairn_server::TTL_SWEEP_BATCH + 150;
    let count = |s: &TestServer, coll: &str| -> u64 {
        json(
            s.post(&format!("/collections/{coll}/count"), &json!({})),
            200,
        )["count"]
            .as_u64()
            .unwrap()
    };
    // Off: the documents stay, the counters say so.
    let (dir, path) = ttl_file(expired);
    let s = TestServer::start_on(dir, path, |c| {
        c.ttl_interval = std::time::Duration::ZERO;
    });
    std::thread::sleep(std::time::Duration::from_millis(400));
    assert_eq!(count(&s, "t"), expired as u64 + 11);
    let st = json(s.get("/stats"), 200);
    assert_eq!(st["ttl"]["interval_seconds"], 0.0, "{st}");
    assert_eq!(st["ttl"]["sweeps"], 0, "{st}");
    drop(s);

    // On, every 100 ms: gone within a bounded time.
    let (dir, path) = ttl_file(expired);
    let s = TestServer::start_on(dir, path, |c| {
        c.ttl_interval = std::time::Duration::from_millis(100);
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while count(&s, "t") > 11 {
        assert!(
            std::time::Instant::now() < deadline,
            "the sweep left {} documents",
            count(&s, "t")
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(count(&s, "t"), 11);
    assert_eq!(count(&s, "plain"), 1);
    let st = json(s.get("/stats"), 200);
    assert_eq!(st["ttl"]["interval_seconds"], 0.1, "{st}");
    assert_eq!(st["ttl"]["deleted"], expired as u64, "{st}");
    assert!(st["ttl"]["sweeps"].as_u64().unwrap() >= 1, "{st}");
    assert_eq!(st["ttl"]["errors"], 0, "{st}");
    assert!(st["ttl"]["last_sweep_ms"].as_i64().unwrap() > 0, "{st}");
    let text = s
        .client
        .get(format!("{}/metrics", s.root))
        .send()
        .expect("GET")
        .text()
        .expect("body");
    assert_eq!(counter(&text, "cairn_ttl_deleted_total"), expired as u64);
    assert!(counter(&text, "cairn_ttl_sweeps_total") >= 1);
    assert_eq!(counter(&text, "cairn_ttl_errors_total"), 0);
    // Documents not expired stay, sweep after sweep.
    let sweeps = st["ttl"]["sweeps"].as_u64().unwrap();
    while json(s.get("/stats"), 200)["ttl"]["sweeps"]
        .as_u64()
        .unwrap()
        < sweeps + 2
    {
        assert!(std::time::Instant::now() < deadline, "no more sweeps");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(count(&s, "t"), 11);
    drop(s);

    // A read-only server never sweeps.
    let (dir, path) = ttl_file(3);
    let s = TestServer::start_on(dir, path, |c| {
        c.read_only = true;
        c.ttl_interval = std::time::Duration::from_millis(50);
    });
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(count(&s, "t"), 14);
    assert_eq!(json(s.get("/stats"), 200)["ttl"]["sweeps"], 0);
}
