//! Live behaviour against a real server: SSE subscriptions while another
//! client appends (resumed with Last-Event-ID, nothing skipped or
//! repeated), find cursors that stay on one snapshot while another client
//! writes, and the OpenAPI document matching the routes served.

mod common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::time::{Duration, Instant};

use common::{json, TestServer};
use serde_json::{json, Value};

/// One SSE message: (event, id, data).
type Msg = (String, Option<String>, String);

/// Reads SSE messages until `stop` says so or `deadline` passes.
fn read_sse(
    r: reqwest::blocking::Response,
    deadline: Instant,
    stop: impl FnMut(&Msg) -> bool,
) -> Vec<Msg> {
    read_sse_until(r, deadline, stop).0
}

/// `read_sse`, and whether the server ended the stream (end of the body,
/// not `stop` or the deadline).
fn read_sse_until(
    r: reqwest::blocking::Response,
    deadline: Instant,
    mut stop: impl FnMut(&Msg) -> bool,
) -> (Vec<Msg>, bool) {
    let mut out = Vec::new();
    let mut lines = BufReader::new(r).lines();
    let (mut ev, mut id, mut data) = (String::new(), None, String::new());
    let mut ended = false;
    while Instant::now() < deadline {
        let Some(Ok(line)) = lines.next() else {
            ended = true;
            break;
        };
        if line.is_empty() {
            if !data.is_empty() || !ev.is_empty() {
                let m = (
                    std::mem::take(&mut ev),
                    id.take(),
                    std::mem::take(&mut data),
                );
                let done = stop(&m);
                out.push(m);
                if done {
                    break;
                }
            }
            continue;
        }
        if let Some(v) = line.strip_prefix("event:") {
            ev = v.trim().to_string();
        } else if let Some(v) = line.strip_prefix("id:") {
            id = Some(v.trim().to_string());
        } else if let Some(v) = line.strip_prefix("data:") {
            data.push_str(v.trim_start());
        }
    }
    (out, ended)
}

fn positions(msgs: &[Msg]) -> Vec<u64> {
    msgs.iter()
        .filter(|m| m.0 == "event")
        .map(|m| {
            let v: Value = serde_json::from_str(&m.2).expect("event JSON");
            let p = v["position"].as_u64().expect("position");
            assert_eq!(
                m.1.as_deref(),
                Some(p.to_string().as_str()),
                "SSE id is the position"
            );
            p
        })
        .collect()
}

const TOTAL: u64 = 60;

#[test]
fn sse_subscription_sees_concurrent_appends_and_resumes_with_last_event_id() {
    let s = TestServer::start();
    let deadline = Instant::now() + Duration::from_secs(20);
    // History before the subscription.
    json(
        s.post(
            "/streams/a/events",
            &json!([{"type": "T", "data": {"i": -1}}]),
        ),
        200,
    );
    let first = s.get("/events/subscribe");
    assert_eq!(first.status(), 200);
    assert!(first
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream")));
    // Another client appends, in batches of 1-3 events over several streams.
    let base = s.base.clone();
    let writer = std::thread::spawn(move || {
        let c = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .expect("client");
        let mut n = 1;
        let mut k = 0;
        while n < TOTAL {
            let batch = (1 + k % 3).min(TOTAL - n);
            let evs: Vec<Value> = (0..batch)
                .map(|i| json!({"type": "T", "data": {"i": n + i}}))
                .collect();
            let r = c
                .post(format!("{base}/streams/s{}/events", k % 4))
                .body(Value::Array(evs).to_string())
                .send()
                .expect("append");
            assert_eq!(r.status(), 200);
            n += batch;
            k += 1;
            std::thread::sleep(Duration::from_millis(3));
        }
    });
    // Read part of the log, then drop the connection mid-stream.
    let half = read_sse(first, deadline, |m| {
        m.0 == "event" && m.1.as_deref() == Some(&(TOTAL / 2 - 1).to_string())
    });
    assert!(half.iter().any(|m| m.0 == "caught_up") || half.len() >= (TOTAL / 2) as usize);
    let got1 = positions(&half);
    let last = *got1.last().expect("some events");
    // Resume after the last id seen.
    let second = s.get_with("/events/subscribe", "Last-Event-ID", &last.to_string());
    let rest = read_sse(second, deadline, |m| {
        m.0 == "event" && m.1.as_deref() == Some(&(TOTAL - 1).to_string())
    });
    writer.join().expect("writer");
    let got2 = positions(&rest);
    let all: Vec<u64> = got1.iter().chain(&got2).copied().collect();
    assert_eq!(
        all,
        (0..TOTAL).collect::<Vec<_>>(),
        "every position once, in order"
    );
}

#[test]
fn stream_subscription_from_a_version() {
    let s = TestServer::start();
    json(
        s.post(
            "/streams/x/events",
            &json!([{"type": "A"}, {"type": "B"}, {"type": "C"}]),
        ),
        200,
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let r = s
        .client
        .get(format!("{}/streams/x/subscribe?from=1", s.base))
        .send()
        .expect("subscribe");
    let base = s.base.clone();
    let w = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        reqwest::blocking::Client::new()
            .post(format!("{base}/streams/x/events?expected=2"))
            .body(json!([{"type": "D"}]).to_string())
            .send()
            .expect("append")
            .status()
    });
    let msgs = read_sse(r, deadline, |m| m.1.as_deref() == Some("3"));
    assert_eq!(w.join().expect("writer"), 200);
    // Resumed after version 2: only version 3.
    let r = s.get_with("/streams/x/subscribe", "Last-Event-ID", "2");
    let again = read_sse(r, deadline, |m| m.0 == "caught_up");
    let ids: Vec<Option<String>> = again.iter().map(|m| m.1.clone()).collect();
    assert_eq!(ids, [Some("3".to_string()), None]);
    let kinds: Vec<(String, Option<String>)> =
        msgs.iter().map(|m| (m.0.clone(), m.1.clone())).collect();
    assert_eq!(
        kinds,
        [
            ("event".to_string(), Some("1".to_string())),
            ("event".to_string(), Some("2".to_string())),
            ("caught_up".to_string(), None),
            ("event".to_string(), Some("3".to_string())),
        ]
    );
}

#[test]
fn cursor_pages_stay_on_one_snapshot_while_another_client_writes() {
    let s = TestServer::start();
    let lines: String = (0..30)
        .map(|i| format!("{}\n", json!({"_id": i})))
        .collect();
    json(s.post_raw("/collections/c/bulk", lines), 200);
    let mut page = json(
        s.post("/collections/c/find", &json!({"batch_size": 7})),
        200,
    );
    let mut ids = BTreeSet::new();
    let mut pages = 0;
    loop {
        pages += 1;
        assert!(pages < 20, "too many pages");
        for d in page["documents"].as_array().expect("documents") {
            assert!(ids.insert(d["_id"].as_i64().expect("id")), "repeated {d}");
        }
        if pages == 1 {
            // Another client changes the collection under the cursor.
            let more: String = (100..130)
                .map(|i| format!("{}\n", json!({"_id": i})))
                .collect();
            json(s.post_raw("/collections/c/bulk", more), 200);
            json(
                s.post(
                    "/collections/c/delete_many",
                    &json!({"filter": {"_id": {"$gte": 20, "$lt": 30}}}),
                ),
                200,
            );
        }
        let Some(c) = page["cursor"].as_str() else {
            break;
        };
        page = json(s.get(&format!("/cursors/{c}?batch_size=7")), 200);
    }
    assert_eq!(ids, (0..30).collect::<BTreeSet<_>>());
    assert_eq!(pages, 5);
    // The writes happened: a new query sees them.
    assert_eq!(
        json(s.post("/collections/c/count", &json!({})), 200)["count"],
        50
    );
}

#[test]
fn cursors_are_capped_and_expire() {
    let s = TestServer::start_with(|c| {
        c.max_cursors = 2;
        c.cursor_idle = Duration::from_millis(300);
    });
    let lines: String = (0..10)
        .map(|i| format!("{}\n", json!({"_id": i})))
        .collect();
    json(s.post_raw("/collections/c/bulk", lines), 200);
    let q = json!({"batch_size": 1});
    let a = json(s.post("/collections/c/find", &q), 200)["cursor"].clone();
    json(s.post("/collections/c/find", &q), 200);
    common::problem(s.post("/collections/c/find", &q), 429, "too_many_cursors");
    std::thread::sleep(Duration::from_millis(800));
    // Expired without any request touching the cursors: their snapshots
    // are released (compaction, which needs no live reader, runs).
    json(s.post("/compact", &json!({})), 200);
    // The cap frees up, the old id is gone.
    json(s.post("/collections/c/find", &q), 200);
    common::problem(
        s.get(&format!("/cursors/{}", a.as_str().expect("id"))),
        404,
        "cursor_not_found",
    );
}

/// A concrete URL for a templated path.
fn concrete(path: &str) -> String {
    path.replace("{name}", "c")
        .replace("{index}", "i")
        .replace("{id}", "1")
        .replace("{cursor}", "nope")
        .replace("{table}", "t")
        .replace("{key}", "k")
        .replace("{stream}", "s")
}

#[test]
fn openapi_document_matches_the_routes_served() {
    let s = TestServer::start();
    let doc = json(s.get("/openapi.json"), 200);
    assert_eq!(doc["openapi"], "3.1.0");
    let paths = doc["paths"].as_object().expect("paths");
    // Every endpoint family is there.
    for p in [
        "/api/v1/collections",
        "/api/v1/collections/{name}",
        "/api/v1/collections/{name}/indexes",
        "/api/v1/collections/{name}/indexes/{index}",
        "/api/v1/collections/{name}/documents",
        "/api/v1/collections/{name}/documents/{id}",
        "/api/v1/collections/{name}/find",
        "/api/v1/cursors/{cursor}",
        "/api/v1/collections/{name}/count",
        "/api/v1/collections/{name}/explain",
        "/api/v1/collections/{name}/update_many",
        "/api/v1/collections/{name}/delete_many",
        "/api/v1/collections/{name}/bulk",
        "/api/v1/kv",
        "/api/v1/kv/{table}/keys/{key}",
        "/api/v1/kv/{table}/range",
        "/api/v1/streams",
        "/api/v1/streams/{stream}/events",
        "/api/v1/streams/{stream}/subscribe",
        "/api/v1/events",
        "/api/v1/events/subscribe",
        "/api/v1/stats",
        "/api/v1/check",
        "/api/v1/backup",
        "/api/v1/compact",
        "/api/v1/openapi.json",
        "/metrics",
    ] {
        assert!(paths.contains_key(p), "the document lacks {p}");
    }
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .expect("client");
    let methods = ["get", "post", "put", "delete", "patch"];
    let mut checked = 0;
    for (path, ops) in paths {
        let url = format!("{}{}", s.root, concrete(path));
        for m in methods {
            let documented = ops.get(m).is_some();
            if m == "get" && (path.ends_with("/subscribe")) {
                // A live stream: the head is enough.
                let r = client.get(&url).send().expect("subscribe");
                assert_eq!(r.status(), 200, "{path}");
                checked += 1;
                continue;
            }
            let r = client
                .request(m.to_uppercase().parse().expect("method"), &url)
                .header("content-type", "application/json")
                .body("{}")
                .send()
                .expect("request");
            let status = r.status().as_u16();
            let body: Value = r.json().unwrap_or(Value::Null);
            if documented {
                // Served: whatever the answer, it is not the router's.
                assert!(
                    status != 405 && body["code"] != "no_route",
                    "{m} {path} is documented but not served: {status} {body}"
                );
                assert!(status < 500, "{m} {path}: {status} {body}");
                checked += 1;
            } else {
                assert_eq!(
                    status, 405,
                    "{m} {path} is served but not documented: {body}"
                );
            }
        }
    }
    assert!(checked >= 30, "{checked}");
}

/// The `_id`s of `change` messages, checking each SSE id is its resume
/// token.
fn change_ids(msgs: &[Msg]) -> Vec<u64> {
    msgs.iter()
        .filter(|m| m.0 == "change")
        .map(|m| {
            let v: Value = serde_json::from_str(&m.2).expect("change JSON");
            assert_eq!(
                m.1.as_deref(),
                v["_id"]["_data"].as_str(),
                "SSE id is the resume token"
            );
            assert_eq!(v["operationType"], "insert");
            assert_eq!(v["ns"], json!({"coll": "c"}));
            v["documentKey"]["_id"].as_u64().expect("documentKey")
        })
        .collect()
}

/// A collection's changes over SSE while another client inserts: the
/// stream is dropped mid-way and resumed with `Last-Event-ID` (the resume
/// token): every insert arrives once, in order.
#[test]
fn change_stream_sse_resumes_with_last_event_id_while_another_client_writes() {
    let s = TestServer::start();
    let deadline = Instant::now() + Duration::from_secs(30);
    // Off: 409 with the library's message.
    let p = common::problem(
        s.get("/collections/c/changes"),
        409,
        "change_stream_not_enabled",
    );
    assert!(p["detail"].as_str().unwrap().contains("\"c\""), "{p}");
    let on = json(
        s.put("/collections/c/change_stream", r#"{"enabled": true}"#),
        200,
    );
    assert_eq!(on["enabled"], true);
    assert_eq!(
        json(s.get("/collections/c/change_stream"), 200)["enabled"],
        true
    );
    let first = s.get("/collections/c/changes");
    assert_eq!(first.status(), 200);
    let base = s.base.clone();
    let writer = std::thread::spawn(move || {
        let c = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .expect("client");
        for i in 0..TOTAL {
            let r = c
                .post(format!("{base}/collections/c/documents"))
                .body(json!({"_id": i}).to_string())
                .send()
                .expect("insert");
            assert_eq!(r.status(), 201);
            std::thread::sleep(Duration::from_millis(3));
        }
    });
    let half = read_sse(first, deadline, |m| {
        m.0 == "change"
            && m.2
                .contains(&format!("\"documentKey\":{{\"_id\":{}}}", TOTAL / 2))
    });
    let got1 = change_ids(&half);
    assert!(!got1.is_empty(), "{half:?}");
    let last_token = half
        .iter()
        .rev()
        .find(|m| m.0 == "change")
        .and_then(|m| m.1.clone())
        .expect("a token");
    // Resume only once the writer has committed more than was read: the
    // changes in between must come from the log, not from live delivery.
    let read_upto = *got1.last().expect("some changes");
    while json(s.post("/collections/c/count", &json!({})), 200)["count"]
        .as_u64()
        .expect("count")
        < read_upto + 10
    {
        assert!(Instant::now() < deadline, "the writer stalled");
        std::thread::sleep(Duration::from_millis(5));
    }
    let second = s.get_with("/collections/c/changes", "Last-Event-ID", &last_token);
    assert_eq!(second.status(), 200);
    let rest = read_sse(second, deadline, |m| {
        m.0 == "change"
            && m.2
                .contains(&format!("\"documentKey\":{{\"_id\":{}}}", TOTAL - 1))
    });
    writer.join().expect("writer");
    let all: Vec<u64> = got1.iter().chain(&change_ids(&rest)).copied().collect();
    assert_eq!(
        all,
        (0..TOTAL).collect::<Vec<_>>(),
        "every insert once, in order"
    );
    // The same with the token as `resume_after`, and a `$match` pipeline.
    let pipeline = r#"[{"$match":{"documentKey._id":{"$gte":58}}}]"#;
    let third = s.get(&format!(
        "/collections/c/changes?resume_after={last_token}&pipeline={}",
        pipeline
            .replace('{', "%7B")
            .replace('}', "%7D")
            .replace('"', "%22")
            .replace('$', "%24")
    ));
    let tail = read_sse(third, deadline, |m| m.0 == "caught_up");
    assert_eq!(change_ids(&tail), [58, 59]);
    // Dropping the collection ends the stream with `invalidate`.
    let fourth = s.get("/collections/c/changes");
    assert_eq!(s.delete("/collections/c").status(), 204);
    let end = read_sse(fourth, deadline, |_| false);
    let ops: Vec<String> = end
        .iter()
        .filter(|m| m.0 == "change")
        .map(|m| {
            serde_json::from_str::<Value>(&m.2).unwrap()["operationType"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(ops, ["drop", "invalidate"]);
}

/// A token older than the change log's retention is 410
/// `change_stream_history_lost` before any event is sent (MongoDB:
/// ChangeStreamHistoryLost); a token of another collection is 400 naming
/// both; a malformed one 400.
#[test]
fn change_stream_history_lost_is_410_and_other_tokens_are_refused() {
    let s = TestServer::start();
    let deadline = Instant::now() + Duration::from_secs(20);
    json(
        s.put(
            "/collections/c/change_stream",
            r#"{"enabled": true, "retention": 3}"#,
        ),
        200,
    );
    json(
        s.put("/collections/other/change_stream", r#"{"enabled": true}"#),
        200,
    );
    json(s.post("/collections/c/documents", &json!({"_id": 0})), 201);
    let msgs = read_sse(
        s.get(&format!(
            "/collections/c/changes?resume_after={}",
            "0".repeat(34)
        )),
        deadline,
        |m| m.0 == "caught_up",
    );
    assert_eq!(change_ids(&msgs), [0]);
    let token = msgs[0].1.clone().expect("token");
    // Still held: resumes (nothing after it yet).
    let ok = read_sse(
        s.get_with("/collections/c/changes", "Last-Event-ID", &token),
        deadline,
        |m| m.0 == "caught_up",
    );
    assert_eq!(change_ids(&ok), Vec::<u64>::new());
    for i in 1..12 {
        json(s.post("/collections/c/documents", &json!({"_id": i})), 201);
    }
    let p = common::problem(
        s.get(&format!("/collections/c/changes?resume_after={token}")),
        410,
        "change_stream_history_lost",
    );
    assert!(
        p["detail"].as_str().unwrap().contains("no longer holds"),
        "{p}"
    );
    let p = common::problem(
        s.get(&format!("/collections/other/changes?resume_after={token}")),
        400,
        "resume_token_other_collection",
    );
    let d = p["detail"].as_str().unwrap();
    assert!(d.contains("\"c\"") && d.contains("\"other\""), "{d}");
    common::problem(
        s.get("/collections/c/changes?resume_after=zz"),
        400,
        "invalid_resume_token",
    );
    common::problem(
        s.get("/collections/c/changes?full_document=whenAvailable"),
        400,
        "invalid_request",
    );
    // Off again: the collection's change stream state says so.
    json(
        s.put("/collections/c/change_stream", r#"{"enabled": false}"#),
        200,
    );
    assert_eq!(
        json(s.get("/collections/c/change_stream"), 200)["enabled"],
        false
    );
    common::problem(
        s.put("/collections/nope/change_stream", r#"{"enabled": false}"#),
        404,
        "collection_not_found",
    );
}

/// A pipeline that removes the resume token (`{$project: {_id: 0}}`) ends
/// the stream with an `error` event, as MongoDB ends its change stream
/// (ChangeStreamFatalError; its drivers: "cannot provide resume
/// functionality when the resume token is missing"), never with a `change`
/// event without an SSE id, which would reset the browser's Last-Event-ID
/// so that a reconnect would resume from now and skip changes.
#[test]
fn change_stream_without_resume_token_ends_with_an_error_event() {
    let s = TestServer::start();
    let deadline = Instant::now() + Duration::from_secs(10);
    json(
        s.put("/collections/c/change_stream", r#"{"enabled": true}"#),
        200,
    );
    let pipeline = r#"[{"$project":{"_id":0}}]"#
        .replace('{', "%7B")
        .replace('}', "%7D")
        .replace('"', "%22")
        .replace('$', "%24");
    let r = s.get(&format!("/collections/c/changes?pipeline={pipeline}"));
    assert_eq!(r.status(), 200);
    json(s.post("/collections/c/documents", &json!({"_id": 1})), 201);
    json(s.post("/collections/c/documents", &json!({"_id": 2})), 201);
    // Read to the end of the stream: the server must end it.
    let (msgs, ended) = read_sse_until(r, deadline, |_| false);
    assert!(ended, "the stream did not end: {msgs:?}");
    let kinds: Vec<&str> = msgs.iter().map(|m| m.0.as_str()).collect();
    assert_eq!(kinds, ["caught_up", "error"], "{msgs:?}");
    let (_, id, data) = &msgs[1];
    assert_eq!(id, &None, "an error event has no id: {msgs:?}");
    let p: Value = serde_json::from_str(data).expect("a problem document");
    assert_eq!(p["code"], "change_stream_fatal", "{p}");
    let detail = p["detail"].as_str().expect("detail");
    assert!(
        detail.contains("\"c\"") && detail.contains("resume token"),
        "{p}"
    );
}
