//! `cairn` on an etcd cluster, through the real binary against real
//! 3-member clusters on loopback (cairndb-etcd's `testing` harness): the
//! KV commands on an `etcd://` URL; `cairn migrate` file → etcd → file of a
//! database holding typed KV tables, a collection with indexes and event
//! streams, compared with `cairn dump` (every table, internal `$` tables
//! included, with its types) and with the library's views; the refusal of
//! a non-empty destination, of an existing file and of a partial
//! migration (a `cairn migrate` crashed between batches by a test hook);
//! `cairn events` and every document command on a cluster answering as
//! on a file (the same commands on both, outputs compared); `cairn watch`
//! and TTL indexes on a cluster; the refusal of the commands that need the
//! file itself.
//!
//! Without an `etcd` binary the tests are skipped with a message, unless
//! `CAIRN_REQUIRE_ETCD=1` makes that a failure.

mod common;

use std::path::Path;
use std::sync::Mutex;

use cairndb::document::{Document, IndexOptions};
use cairndb::events::{Direction, EventData, EventFilter, EventStore, ExpectedVersion, ReadFrom};
use cairndb::{Database, TableDefinition};
use cairndb_etcd::testing::{cluster_or_skip, Cluster};
use common::{cairn, fails, ok};
use serde_json::json;

static ONE_CLUSTER_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Runs `test` on a fresh 3-member cluster (one at a time), or skips it
/// with a message when etcd is not installed and not required.
fn with_cluster(test: &str, f: impl FnOnce(&Cluster)) {
    let _guard = ONE_CLUSTER_AT_A_TIME
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(cluster) = cluster_or_skip(test).expect("start a 3-member etcd cluster") {
        f(&cluster);
    }
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// Expects `cairn args` to fail with exit status 1 and `message` on stderr.
fn fails_with(args: &[&str], input: &str, message: &str) -> String {
    let o = cairn(args, input);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
    assert!(err.contains(message), "{args:?}: {err}");
    err
}

#[test]
fn kv_commands_work_on_an_etcd_url() {
    with_cluster("kv_commands_work_on_an_etcd_url", |cluster| {
        let url = cluster.url("kv");
        let url = url.as_str();
        ok(&["put", url, "users", "ann", "31"], "");
        ok(&["put", url, "users", "bob", "42"], "");
        ok(&["put", url, "users", "ann", "32"], "");
        ok(&["put", url, "other", "-k", "-v"], "");
        assert_eq!(ok(&["tables", url], ""), "other\t1\nusers\t2\n");
        assert_eq!(ok(&["get", url, "users", "ann"], ""), "32\n");
        fails_with(
            &["get", url, "users", "cy"],
            "",
            "key \"cy\" not found in table \"users\"",
        );
        fails_with(
            &["get", url, "nope", "ann"],
            "",
            "table \"nope\" does not exist",
        );
        ok(&["del", url, "users", "bob"], "");
        fails_with(&["del", url, "users", "bob"], "", "key \"bob\" not found");
        fails_with(
            &["del", url, "nope", "bob"],
            "",
            "table \"nope\" does not exist",
        );
        // A dump of the prefix, whole and one table.
        let dump = ok(&["dump", url], "");
        let lines: Vec<&str> = dump.lines().collect();
        assert_eq!(lines.len(), 6, "{dump}");
        assert!(lines[0].starts_with("{\"cairn_dump\":1"), "{dump}");
        assert_eq!(
            lines[3],
            r#"{"table":"users","key_type":"&[u8]","value_type":"&[u8]"}"#
        );
        assert_eq!(lines[4], r#"{"table":"users","key":"ann","value":"32"}"#);
        assert_eq!(
            ok(&["dump", url, "--table", "users"], ""),
            format!("{}\n{}\n", lines[3], lines[4])
        );
        // Table lines load into an empty prefix, and with --merge into one
        // that holds tables; a whole dump into an empty prefix only.
        let lines_in = "{\"table\":\"t\",\"key\":\"a\",\"value\":\"1\"}\n\
                        {\"table\":\"t\",\"key_b64\":\"AP8=\",\"value\":\"2\"}\n";
        let url2 = cluster.url("loaded");
        ok(&["load", &url2], lines_in);
        assert_eq!(ok(&["tables", &url2], ""), "t\t2\n");
        fails_with(&["load", &url2], lines_in, "pass --merge");
        ok(
            &["load", &url2, "--merge"],
            "{\"table\":\"u\",\"key\":\"x\",\"value\":\"y\"}\n",
        );
        assert_eq!(ok(&["tables", &url2], ""), "t\t2\nu\t1\n");
        fails_with(&["load", url], &dump, "is not empty");
        let url3 = cluster.url("restored");
        ok(&["load", &url3], &dump);
        assert_eq!(ok(&["dump", &url3], ""), dump);
        // A dump of the prefix loads into a file, and back.
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("from-etcd.cairn");
        ok(&["load", p(&file)], &dump);
        assert_eq!(ok(&["get", p(&file), "users", "ann"], ""), "32\n");
        // A bad line is named.
        let bad = "{\"table\":\"t\",\"key\":\"a\"}\n";
        fails_with(&["load", &cluster.url("bad")], bad, "line 1");
    });
}

#[test]
fn event_commands_work_on_an_etcd_url_as_on_a_file() {
    with_cluster(
        "event_commands_work_on_an_etcd_url_as_on_a_file",
        |cluster| {
            let url = cluster.url("ev");
            let url = url.as_str();
            let dir = tempfile::tempdir().unwrap();
            let file = dir.path().join("ev.cairn");
            let file = p(&file);
            let id = "7c8f0a52-7d0e-4a49-9a31-2b1c6f0d9e11";
            let id2 = "7c8f0a52-7d0e-4a49-9a31-2b1c6f0d9e12";
            let first = format!(
                "{{\"type\":\"Opened\",\"data\":{{\"owner\":\"ann\"}},\"id\":\"{id}\"}}\n\
                 {{\"type\":\"Deposited\",\"data\":{{\"amount\":5}},\"id\":\"{id2}\"}}\n"
            );
            // The same commands on a file and on the cluster answer alike
            // (recorded times and generated ids aside).
            for db in [file, url] {
                assert_eq!(
                    ok(
                        &["events", "append", db, "acct-1", "--expected", "no-stream"],
                        &first
                    ),
                    "appended 2 events; version 1; positions 0..=1\n",
                    "{db}"
                );
                assert_eq!(
                    ok(
                        &["events", "append", db, "acct-2"],
                        "{\"type\":\"Opened\",\"data_b64\":\"AP8=\"}\n"
                    ),
                    "appended 1 events; version 0; positions 2..=2\n"
                );
                // A retry of the first event with its id is idempotent.
                assert!(ok(
                    &["events", "append", db, "acct-1", "--expected", "no-stream"],
                    &first
                )
                .starts_with("already appended (idempotent repeat); version 1"));
                fails_with(
                    &["events", "append", db, "acct-1", "--expected", "0"],
                    "{\"type\":\"X\"}\n",
                    "version",
                );
                fails_with(
                    &["events", "append", db, "acct-1"],
                    "{\"nope\":1}\n",
                    "line 1",
                );
            }
            let strip = |out: String| -> Vec<serde_json::Value> {
                out.lines()
                    .map(|l| {
                        let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
                        let m = v.as_object_mut().unwrap();
                        m.remove("recorded_at");
                        m.remove("recorded_at_us");
                        if m["stream"] != "acct-1" {
                            m.remove("id");
                        }
                        v
                    })
                    .collect()
            };
            for args in [
                vec!["events", "read", "DB", "acct-1"],
                vec![
                    "events",
                    "read",
                    "DB",
                    "acct-1",
                    "--backward",
                    "--limit",
                    "1",
                ],
                vec!["events", "all", "DB"],
                vec!["events", "all", "DB", "--from", "1", "--type", "Opened"],
                vec!["events", "streams", "DB"],
            ] {
                let on = |db: &str| {
                    let a: Vec<&str> = args
                        .iter()
                        .map(|x| if *x == "DB" { db } else { x })
                        .collect();
                    ok(&a, "")
                };
                let (f, e) = (on(file), on(url));
                if args[1] == "streams" {
                    assert_eq!(f, e);
                    assert_eq!(e, "acct-1\t1\tlive\nacct-2\t0\tlive\n");
                } else {
                    assert_eq!(strip(f), strip(e.clone()), "{args:?}");
                    assert!(!e.is_empty(), "{args:?}");
                }
            }
            let all = strip(ok(&["events", "all", url], ""));
            assert_eq!(all.len(), 3);
            assert_eq!(all[0]["id"], id);
            assert_eq!(all[1]["data"], json!({"amount": 5}));
            assert_eq!(all[2]["data_b64"], "AP8=");
            assert_eq!(
                strip(ok(
                    &["events", "all", url, "--from", "1", "--type", "Opened"],
                    ""
                )),
                vec![
                    json!({"stream": "acct-2", "version": 0, "position": 2, "type": "Opened", "data_b64": "AP8="})
                ]
            );
        },
    );
}

/// The documents `document_commands_answer_on_etcd_as_on_a_file` imports:
/// index lines (unique, sparse, compound, text), then `n` documents with
/// explicit `_id`s (generated ones would differ between the two runs).
fn people(n: u64) -> String {
    let mut lines = vec![
        json!({"$index": {"name": "email_1", "fields": {"email": 1}, "unique": true, "sparse": true}}),
        json!({"$index": {"name": "city_1_age_-1", "fields": {"city": 1, "age": -1}, "unique": false, "sparse": false}}),
        json!({"$index": {"name": "nick_1", "fields": {"nick": 1}, "unique": false, "sparse": true}}),
        json!({"$index": {"name": "bio_text", "fields": {}, "text": {"weights": {"bio": 2}, "default_language": "english"}}}),
    ];
    let cities = ["Oslo", "Lima", "Pune", "Kyiv"];
    for i in 0..n {
        let mut d = json!({
            "_id": i,
            "name": format!("p{i:03}"),
            "email": format!("p{i}@example.org"),
            "age": 20 + (i * 7) % 45,
            "city": cities[(i % 4) as usize],
            "tags": [format!("t{}", i % 3), "all"],
            "bio": if i % 5 == 0 { "likes rivers and mountains" } else { "reads books" },
        });
        if i % 3 == 0 {
            d["nick"] = json!(format!("n{i}"));
        }
        lines.push(d);
    }
    lines.iter().map(|l| format!("{l}\n")).collect()
}

/// Runs `cairn args` (with `DB` replaced by `db`): exit status, stdout,
/// stderr.
fn run_on(db: &str, args: &[&str], input: &str) -> (Option<i32>, String, String) {
    let a: Vec<&str> = args
        .iter()
        .map(|x| if *x == "DB" { db } else { x })
        .collect();
    let o = cairn(&a, input);
    (
        o.status.code(),
        String::from_utf8(o.stdout).unwrap(),
        String::from_utf8(o.stderr).unwrap(),
    )
}

/// Every document command, on a file and on a cluster, from the same
/// input: the same exit status, the same output (and, but for the
/// message naming what holds the collections, the same errors).
#[test]
fn document_commands_answer_on_etcd_as_on_a_file() {
    with_cluster("document_commands_answer_on_etcd_as_on_a_file", |cluster| {
        let url = cluster.url("docs");
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("docs.cairn");
        let (file, url) = (p(&file), url.as_str());
        // 150 documents with 4 indexes: more than one etcd transaction
        // holds (128 operations), so the import splits its batches.
        let input = people(150);
        let dup = "{\"_id\": 1, \"name\": \"again\"}\n[1]\n{\"_id\": 500, \"email\": \"p2@example.org\"}\n{\"_id\": 501, \"name\": \"new\"}\n";
        let steps: Vec<(Vec<&str>, &str)> = vec![
            (vec!["import", "DB", "people"], input.as_str()),
            (vec!["import", "DB", "people", "--batch", "7"], "{\"_id\": 1000, \"x\": 1}\n{\"_id\": 1001, \"x\": 2}\n"),
            (vec!["import", "DB", "people", "--continue-on-error"], dup),
            (vec!["import", "DB", "people"], dup),
            (vec!["import", "DB", "people", "--upsert"], "{\"_id\": 1000, \"x\": 3}\n"),
            (vec!["import", "DB", "scratch"], "{\"_id\": \"a\", \"k\": 1}\n{\"_id\": \"b\", \"k\": 1, \"name\": \"p007\"}\n"),
            (vec!["collections", "DB"], ""),
            (vec!["index", "list", "DB", "people"], ""),
            (vec!["index", "create", "DB", "scratch", "k:-1,name"], ""),
            (vec!["index", "create", "DB", "scratch", "name", "--sparse", "--unique", "--name", "by_name"], ""),
            (vec!["index", "create", "DB", "scratch", "k", "--unique"], ""),
            (vec!["index", "create", "DB", "scratch", "body:text,k:text", "--weights", "body=3"], ""),
            (vec!["index", "list", "DB", "scratch"], ""),
            (vec!["index", "list", "DB", "people"], ""),
            (vec!["find", "DB", "people"], ""),
            (vec!["find", "DB", "people", "{\"age\": {\"$gte\": 40}, \"city\": \"Oslo\"}"], ""),
            (vec!["find", "DB", "people", "{\"tags\": \"t1\"}", "--sort", "{\"age\": -1, \"_id\": 1}", "--skip", "3", "--limit", "5", "--project", "{\"name\": 1, \"age\": 1}"], ""),
            (vec!["find", "DB", "people", "{\"city\": \"Lima\"}", "--hint", "city_1_age_-1", "--limit", "4"], ""),
            (vec!["find", "DB", "people", "{\"city\": \"Lima\"}", "--hint", "{\"$natural\": 1}", "--explain"], ""),
            (vec!["find", "DB", "people", "{\"city\": \"Pune\", \"age\": {\"$lt\": 40}}", "--explain"], ""),
            (vec!["find", "DB", "people", "{\"$text\": {\"$search\": \"rivers\"}}", "--project", "{\"name\": 1}"], ""),
            (vec!["find", "DB", "people", "{}", "--hint", "no_such_index"], ""),
            (vec!["find", "DB", "peeple"], ""),
            (vec!["find", "DB", "people", "{\"age\": {\"$bad\": 1}}"], ""),
            (vec!["count", "DB", "people"], ""),
            (vec!["count", "DB", "people", "{\"nick\": {\"$exists\": true}}"], ""),
            (vec!["distinct", "DB", "people", "city"], ""),
            (vec!["distinct", "DB", "people", "tags", "--filter", "{\"age\": {\"$gt\": 50}}"], ""),
            (vec!["aggregate", "DB", "people", "[{\"$match\": {\"age\": {\"$gte\": 30}}}, {\"$group\": {\"_id\": \"$city\", \"n\": {\"$sum\": 1}, \"avg\": {\"$avg\": \"$age\"}}}, {\"$sort\": {\"_id\": 1}}]"], ""),
            (vec!["aggregate", "DB", "people", "[{\"$match\": {\"city\": \"Kyiv\"}}, {\"$sort\": {\"age\": 1}}, {\"$limit\": 3}, {\"$project\": {\"name\": 1}}]", "--explain"], ""),
            (vec!["aggregate", "DB", "people", "[{\"$lookup\": {\"from\": \"scratch\", \"localField\": \"name\", \"foreignField\": \"_id\", \"as\": \"s\"}}, {\"$limit\": 2}]"], ""),
            (vec!["update", "DB", "people", "{\"city\": \"Oslo\"}", "{\"$inc\": {\"age\": 1}, \"$set\": {\"seen\": true}}", "--many"], ""),
            (vec!["update", "DB", "people", "{\"_id\": 3}", "{\"$push\": {\"tags\": \"x\"}}"], ""),
            (vec!["update", "DB", "people", "{\"_id\": 9999}", "{\"$set\": {\"name\": \"up\"}}", "--upsert"], ""),
            (vec!["update", "DB", "people", "{\"_id\": 4}", "{\"$set\": {\"email\": \"p5@example.org\"}}"], ""),
            (vec!["update", "DB", "people", "{\"age\": {\"$gt\": 60}}", "{\"$inc\": {\"name\": 1}}", "--many"], ""),
            (vec!["update", "DB", "nobody", "{}", "{\"$set\": {\"a\": 1}}"], ""),
            (vec!["delete", "DB", "people", "{\"city\": \"Pune\"}"], ""),
            (vec!["delete", "DB", "people", "{\"age\": {\"$lt\": 23}}", "--many"], ""),
            (vec!["index", "drop", "DB", "scratch", "by_name"], ""),
            (vec!["index", "drop", "DB", "scratch", "by_name"], ""),
            (vec!["export", "DB", "people"], ""),
            (vec!["export", "DB", "scratch", "--no-indexes"], ""),
            (vec!["export", "DB", "nothing"], ""),
            (vec!["collections", "DB"], ""),
        ];
        let mut outputs = 0;
        for (args, input) in &steps {
            let (f_code, f_out, f_err) = run_on(file, args, input);
            let (e_code, e_out, e_err) = run_on(url, args, input);
            assert_eq!(f_code, e_code, "{args:?}: file {f_err} / etcd {e_err}");
            assert_eq!(f_out, e_out, "{args:?}");
            assert_eq!(
                f_err.replace(file, "DB"),
                e_err
                    .replace(url, "DB")
                    .replace("the prefix holds", "the file holds"),
                "{args:?}"
            );
            outputs += usize::from(!f_out.is_empty());
        }
        assert!(outputs > 25, "the commands printed too little to compare");
        // What was compared is what was meant: the import, the upserts,
        // the refusals.
        assert_eq!(
            ok(&["count", url, "people", "{\"_id\": {\"$lt\": 150}}"], ""),
            "139\n"
        );
        let (code, _, err) = run_on(url, &["import", "DB", "people"], dup);
        assert_eq!(code, Some(1));
        assert!(err.contains("line 1: duplicate key"), "{err}");
        let (_, _, err) = run_on(url, &["find", "DB", "peeple"], "");
        assert!(
            err.contains("no collection \"peeple\"; the prefix holds: people, scratch"),
            "{err}"
        );
        let (_, _, err) = run_on(
            url,
            &[
                "update",
                "DB",
                "people",
                "{\"age\": {\"$gt\": 60}}",
                "{\"$inc\": {\"name\": 1}}",
                "--many",
            ],
            "",
        );
        assert!(
            err.contains("the update failed on the document with _id"),
            "{err}"
        );
        // The library reads the cluster's collection as the CLI wrote it.
        let db = cairndb_etcd::EtcdDatabase::connect(url).unwrap();
        let people = db.collection::<Document>("people");
        assert_eq!(
            people.find_one(json!({"_id": 9999})).unwrap().unwrap()["name"].as_str(),
            Some("up")
        );
        assert_eq!(
            people.find_one(json!({"_id": 1000})).unwrap().unwrap()["x"].as_i64(),
            Some(3)
        );
        let names: Vec<String> = people
            .list_indexes()
            .unwrap()
            .into_iter()
            .map(|i| i.name)
            .collect();
        assert_eq!(names, ["email_1", "city_1_age_-1", "nick_1", "bio_text"]);
        // An index over more documents than one etcd `Txn` holds is built
        // in batches on a cluster (README, "On an etcd cluster"), as the
        // file builds it in one transaction.
        let create = ["index", "create", "DB", "people", "age:-1,name"];
        assert_eq!(
            run_on(file, &create, "").1,
            "index \"age_-1_name_1\" ready
"
        );
        assert_eq!(
            run_on(url, &create, ""),
            (
                Some(0),
                "index \"age_-1_name_1\" ready\n".to_string(),
                String::new()
            )
        );
        assert_eq!(people.list_indexes().unwrap().len(), 5);
        // A build whose builder stopped between two batches: `index list`
        // says it is building; `index create` of the same spec resumes it.
        people
            .create_index_stopping_after(&[("name", 1)], IndexOptions::default(), 1)
            .unwrap();
        let list = ["index", "list", url, "people"];
        assert!(
            ok(&list, "").contains("name_1\tname:1\tbuilding\n"),
            "{}",
            ok(&list, "")
        );
        ok(&["index", "create", url, "people", "name"], "");
        assert!(
            ok(&list, "").contains("name_1\tname:1\t\n"),
            "{}",
            ok(&list, "")
        );
        // update --many and delete --many over more documents than a Txn
        // holds run in batches, with exact counts.
        let all = ok(&["count", url, "people", "{}"], "");
        let n: u64 = all.trim().parse().unwrap();
        assert!(n > 128, "{n}");
        let out = ok(
            &[
                "update",
                url,
                "people",
                "{}",
                "{\"$set\": {\"batched\": true}}",
                "--many",
            ],
            "",
        );
        assert_eq!(out, format!("matched {n}, modified {n}\n"));
        assert_eq!(
            ok(&["count", url, "people", "{\"batched\": true}"], ""),
            all
        );
        let out = ok(
            &["delete", url, "people", "{\"batched\": true}", "--many"],
            "",
        );
        assert_eq!(out, format!("deleted {n}\n"));
        assert_eq!(ok(&["count", url, "people", "{}"], ""), "0\n");
    });
}

/// A cluster out of space (its backend over `--quota-backend-bytes`, the
/// NOSPACE alarm raised): `cairn` says so and what to do, exit status 1.
#[test]
fn a_full_cluster_is_reported_with_what_to_do() {
    let _guard = ONE_CLUSTER_AT_A_TIME
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let Some(cluster) = cairndb_etcd::testing::cluster_or_skip_with(
        "a_full_cluster_is_reported_with_what_to_do",
        1,
        &["--quota-backend-bytes", "1048576"],
    )
    .expect("start a 1-member etcd cluster") else {
        return;
    };
    let url = cluster.url("full");
    let db = cairndb_etcd::EtcdDatabase::connect(&url).unwrap();
    let value = vec![7u8; 96 * 1024];
    for i in 0..64u32 {
        let tx = db.begin_write().unwrap();
        tx.open_table("fill")
            .unwrap()
            .insert(&i.to_be_bytes(), &value)
            .unwrap();
        if tx.commit().is_err() {
            break;
        }
    }
    let err = fails_with(&["put", &url, "users", "ann", "31"], "", "out of space");
    assert!(
        err.contains("etcdctl alarm disarm") && err.contains("etcdctl defrag"),
        "{err}"
    );
    fails_with(
        &["import", &url, "people"],
        "{\"_id\": 1}\n",
        "etcdctl compact",
    );
}

/// `cairn watch` and TTL indexes on a cluster: a change stream switched
/// on, followed through writes by other commands, resumed from a token;
/// a TTL index created from the command line and from an import's index
/// line.
#[test]
fn watch_and_ttl_indexes_run_on_etcd() {
    with_cluster("watch_and_ttl_indexes_run_on_etcd", |cluster| {
        let url = cluster.url("watch");
        let url = url.as_str();
        let out = ok(&["watch", url, "people", "--enable"], "");
        assert_eq!(out.trim(), "change stream of \"people\" on");
        ok(
            &["import", url, "people"],
            "{\"_id\": 1, \"n\": \"ada\"}\n{\"_id\": 2, \"n\": \"bob\"}\n",
        );
        ok(
            &[
                "update",
                url,
                "people",
                "{\"_id\": 1}",
                "{\"$set\": {\"n\": \"ada2\"}}",
            ],
            "",
        );
        ok(&["delete", url, "people", "{\"_id\": 2}"], "");
        // From the start of the change log (a token before its first
        // record; a stream without one starts at the present, as
        // MongoDB's).
        let start = "0000000000000000000000000000000000";
        let out = ok(
            &[
                "watch",
                url,
                "people",
                "--no-follow",
                "--resume-after",
                start,
            ],
            "",
        );
        let events: Vec<serde_json::Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let ops: Vec<&str> = events
            .iter()
            .map(|e| e["operationType"].as_str().unwrap())
            .collect();
        assert_eq!(ops, ["insert", "insert", "update", "delete"], "{out}");
        // Resumed after the first event: the other three.
        let token = events[0]["_id"].to_string();
        let out = ok(
            &[
                "watch",
                url,
                "people",
                "--no-follow",
                "--resume-after",
                &token,
            ],
            "",
        );
        assert_eq!(out.lines().count(), 3, "{out}");
        // --limit stops after that many.
        let out = ok(
            &[
                "watch",
                url,
                "people",
                "--no-follow",
                "--resume-after",
                start,
                "--limit",
                "1",
            ],
            "",
        );
        assert_eq!(out.lines().count(), 1, "{out}");
        // TTL indexes: from the command line and from an import's line.
        let out = ok(
            &[
                "index",
                "create",
                url,
                "people",
                "at",
                "--expire-after",
                "60",
            ],
            "",
        );
        assert!(out.contains("at_1"), "{out}");
        let ttl_line = "{\"$index\": {\"name\": \"when_1\", \"fields\": {\"when\": 1}, \"expire_after_seconds\": 60}}\n";
        ok(&["import", url, "other"], ttl_line);
        let out = ok(&["index", "list", url, "other"], "");
        assert!(out.contains("when_1") && out.contains("60"), "{out}");
    });
}

/// What does not carry over to a cluster is refused, naming it and what
/// to use instead; nothing is written.
#[test]
fn what_needs_a_file_refuses_an_etcd_url() {
    with_cluster("what_needs_a_file_refuses_an_etcd_url", |cluster| {
        let url = cluster.url("docs");
        let url = url.as_str();
        for args in [
            vec!["info", url],
            vec!["stats", url],
            vec!["compact", url],
            vec!["backup", url, "/tmp/x.cairn"],
        ] {
            let err = fails_with(&args, "", "need a database file");
            assert!(
                err.contains(&format!("`cairn {}` does not work on etcd", args[0])),
                "{err}"
            );
        }
        let err = fails_with(&["serve", url], "", "`cairn serve` does not work on etcd");
        assert!(
            err.contains("EtcdDatabase") && err.contains("cairn migrate"),
            "{err}"
        );
        // The shell's file-only dot-commands name the file too.
        for stmt in [".stats", ".backup /tmp/x.cairn", ".dump --script"] {
            let err = fails_with(&["shell", url, "-c", stmt], "", "needs a database file");
            assert!(err.contains(stmt.split(' ').next().unwrap()), "{err}");
        }
        // Nothing was written under the prefix.
        let db = cairndb_etcd::EtcdDatabase::connect(url).unwrap();
        assert!(db.begin_read().unwrap().list_tables().unwrap().is_empty());
    });
}

/// A shell script of every kind of statement the shell has, but event
/// reads (whose events carry ids and times): documents (find with sort,
/// skip, limit, projection and hint, count, distinct, aggregate, the
/// writes, findOneAnd* with sort and projection, indexes, a rename),
/// `.begin … .commit` and `.rollback`, tables, listings.
const SHELL_SCRIPT: &str = r#"
db.jobs.insertMany([{_id: 1, state: 'todo', prio: 3, tags: ['a']}, {_id: 2, state: 'todo', prio: 1, tags: ['b', 'a']}, {_id: 3, state: 'done', prio: 2}, {_id: 4, state: 'todo', prio: 5}])
db.jobs.insertOne({_id: 5, state: 'done', prio: 4})
db.jobs.createIndex({state: 1, prio: -1})
db.jobs.createIndex({prio: 1}, {unique: true, name: 'p'})
db.jobs.find({state: 'todo'}).sort({prio: -1}).skip(1).limit(2)
db.jobs.find({}, {_id: 0, prio: 1}).sort({prio: 1})
db.jobs.find({prio: {$gte: 2}}).hint('p')
db.jobs.find({state: 'todo'}).count()
db.jobs.countDocuments({prio: {$lt: 4}})
db.jobs.findOne({state: 'done'})
db.jobs.distinct('tags')
db.jobs.aggregate([{$match: {state: 'todo'}}, {$group: {_id: '$state', n: {$sum: 1}, top: {$max: '$prio'}}}])
db.jobs.updateOne({_id: 1}, {$set: {state: 'running'}})
db.jobs.updateMany({state: 'todo'}, {$inc: {prio: 10}})
db.jobs.updateOne({_id: 9}, {$set: {prio: 99}}, {upsert: true})
db.jobs.replaceOne({_id: 3}, {state: 'archived', prio: 7})
db.jobs.findOneAndUpdate({state: 'todo'}, {$set: {state: 'taken'}}, {sort: {prio: -1}, projection: {state: 1}, returnDocument: 'after'})
db.jobs.findOneAndReplace({state: 'done'}, {state: 'redone', prio: 40}, {sort: {prio: 1}})
db.jobs.findOneAndDelete({state: 'todo'}, {sort: {prio: 1}})
db.jobs.deleteOne({_id: 9})
db.jobs.getIndexes()
db.jobs.dropIndex('p')
.indexes jobs
.begin
db.jobs.insertOne({_id: 20, state: 'txn', prio: 100})
db.jobs.find({state: 'txn'})
db.jobs.findOneAndUpdate({_id: 20}, {$inc: {prio: 1}}, {returnDocument: 'after'})
db.jobs.distinct('state')
db.jobs.aggregate([{$group: {_id: null, n: {$sum: 1}}}])
put t k1 v1
get t k1
.commit
.begin
db.jobs.deleteMany({})
put t k2 v2
.rollback
db.jobs.countDocuments({})
put t k3 v3
scan t
del t k1
.tables
db.jobs.renameCollection('tasks')
show collections
db.getCollectionNames()
.collections
db.tasks.find().sort({_id: 1})
append orders placed {n: 1}
.streams
.check
"#;

/// `cairn shell etcd://…` runs every kind of statement as `cairn shell
/// FILE` does, with the same output; `-c` too; on the cluster the
/// transaction's writes are one commit (a rolled back one left nothing),
/// and `.check` checks the prefix.
#[test]
fn the_shell_runs_on_etcd_as_on_a_file() {
    with_cluster("the_shell_runs_on_etcd_as_on_a_file", |cluster| {
        let url = cluster.url("sh");
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("sh.cairn");
        let on_file = ok(&["shell", p(&file)], SHELL_SCRIPT);
        let on_etcd = ok(&["shell", &url], SHELL_SCRIPT);
        assert_eq!(on_etcd, on_file);
        // The script ran (a few of its answers).
        for want in [
            "index \"state_1_prio_-1\" ready",
            "{\"_id\":4,\"state\":\"taken\"}",
            "committed",
            "rolled back",
            "renamed collection \"jobs\" to \"tasks\"",
            "appended 1 event(s) to \"orders\"; version 0; position 0",
            "ok",
        ] {
            assert!(on_etcd.contains(want), "{want} not in:\n{on_etcd}");
        }
        // -c, and the documents as the library on the cluster sees them.
        let out = ok(
            &["shell", &url, "-c", "db.tasks.find({_id: 20}, {_id: 0})"],
            "",
        );
        assert_eq!(out.trim(), "{\"state\":\"txn\",\"prio\":101}");
        let db = cairndb_etcd::EtcdDatabase::connect(&url).unwrap();
        assert_eq!(db.collection::<Document>("tasks").len().unwrap(), 5);
        assert_eq!(
            db.begin_read()
                .unwrap()
                .open_table("t")
                .unwrap()
                .len()
                .unwrap(),
            1,
            "k1 was deleted, k2 rolled back: k3 is left"
        );
        // Event reads show the appended event.
        let out = ok(&["shell", &url, "-c", "read orders"], "");
        assert!(out.contains("\"type\":\"placed\""), "{out}");
    });
}

/// `cairn check etcd://…` prints `ok` for a sound prefix; an index entry
/// no document has, put with a raw etcd put, is reported naming the
/// collection and the index, with exit status 2, as on a file.
/// `cairn expire etcd://…` deletes the expired documents of the TTL
/// indexes in batches and names a missing collection or one without a
/// TTL index.
#[test]
fn check_and_expire_run_on_etcd() {
    with_cluster("check_and_expire_run_on_etcd", |cluster| {
        let url = cluster.url("chk");
        let url = url.as_str();
        let mut lines = String::new();
        for i in 0..70 {
            // 60 expired dates, 10 in the future.
            let at = if i < 60 {
                "2001-01-01T00:00:00Z"
            } else {
                "2999-01-01T00:00:00Z"
            };
            lines.push_str(&format!(
                "{{\"_id\": {i}, \"at\": {{\"$date\": \"{at}\"}}, \"k\": {i}}}\n"
            ));
        }
        ok(&["import", url, "sessions"], &lines);
        ok(&["index", "create", url, "sessions", "k"], "");
        assert_eq!(ok(&["check", url], "").trim(), "ok");
        fails_with(&["expire", url, "nope"], "", "no collection \"nope\"");
        fails_with(&["expire", url, "sessions"], "", "has no TTL index");
        let db = cairndb_etcd::EtcdDatabase::connect(url).unwrap();
        // The TTL index is made through the library with a clock that
        // expires nothing yet, so that `cairn expire` does the deleting.
        db.run_in_transaction(|tx| {
            Ok(
                cairndb::document::TxnCollection::<Document, _>::new(tx, "sessions")
                    .create_ttl_index("at", 60, IndexOptions::default())?,
            )
        })
        .unwrap();
        assert_eq!(ok(&["expire", url], "").trim(), "sessions\t60");
        assert_eq!(ok(&["expire", url, "sessions"], "").trim(), "sessions\t0");
        assert_eq!(ok(&["count", url, "sessions"], "").trim(), "10");
        assert_eq!(ok(&["check", url], "").trim(), "ok");
        // An index entry no document has, written past the library.
        let tables = db.begin_read().unwrap().list_tables().unwrap();
        let meta = db
            .collection::<Document>("sessions")
            .list_indexes()
            .unwrap();
        assert!(meta.iter().any(|i| i.name == "k_1"), "{meta:?}");
        let mut damaged = 0;
        for t in tables
            .iter()
            .filter(|t| t.starts_with("$docs.") && t.matches('.').count() == 2)
        {
            let mut key = format!("chk/t/{t}").into_bytes();
            key.push(0);
            key.extend_from_slice(b"\x20stray");
            cluster.raw_put(&key, b"").unwrap();
            damaged += 1;
        }
        assert_eq!(damaged, 2, "{tables:?}");
        let o = cairn(&["check", url], "");
        let out = String::from_utf8_lossy(&o.stdout);
        assert_eq!(o.status.code(), Some(2), "{out}");
        for index in ["k_1", "at_1"] {
            assert!(
                out.contains(&format!(
                    "collection \"sessions\", index \"{index}\": 0 entries missing, 1 entries that no document has"
                )),
                "{out}"
            );
        }
        // The shell's .check says the same.
        let o = cairn(&["shell", url, "-c", ".check"], "");
        assert!(String::from_utf8_lossy(&o.stdout).contains("index \"k_1\""));
        assert_ne!(o.status.code(), Some(0));
    });
}

const NUMS: TableDefinition<u64, &str> = TableDefinition::new("nums");
const BIN: TableDefinition<&[u8], &[u8]> = TableDefinition::new("bin");

/// A database with the three models; `bulk` entries make the migration
/// take several etcd transactions.
fn build(path: &Path, bulk: u64) {
    let db = Database::create(path).unwrap();
    let w = db.begin_write().unwrap();
    {
        let mut n = w.open_table(NUMS).unwrap();
        for i in 0..bulk {
            n.insert(i * 7, format!("number {i}").as_str()).unwrap();
        }
        let mut b = w.open_table(BIN).unwrap();
        b.insert(&[][..], &[0xff, 0][..]).unwrap();
        b.insert(&[0x80, 0x00][..], &b"x"[..]).unwrap();
    }
    w.commit().unwrap();
    let people = db.collection::<serde_json::Value>("people");
    people
        .create_index(
            &[("email", 1)],
            IndexOptions {
                unique: true,
                ..Default::default()
            },
        )
        .unwrap();
    people
        .create_index(&[("age", -1)], Default::default())
        .unwrap();
    for i in 0..30 {
        people
            .insert(&json!({"email": format!("p{i}@x"), "age": i % 9, "tags": ["a", i]}))
            .unwrap();
    }
    let es = EventStore::new(&db);
    for i in 0..20u64 {
        let e = EventData::new(format!("t{}", i % 3), format!("{{\"i\":{i}}}").into_bytes())
            .with_metadata(vec![i as u8]);
        es.append(
            ["acct-1", "acct-2"][i as usize % 2],
            ExpectedVersion::Any,
            &[e],
        )
        .unwrap();
    }
    es.save_snapshot("acct-1", cairndb::events::StreamVersion(3), b"state")
        .unwrap();
    db.close().unwrap();
}

#[test]
fn migrate_round_trips_a_file_through_etcd() {
    with_cluster("migrate_round_trips_a_file_through_etcd", |cluster| {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src.cairn");
        build(&src, 400);
        let url = cluster.url("app");
        let said = ok(&["migrate", p(&src), &url], "");
        assert!(said.contains("entries from "), "{said}");
        // More than one etcd transaction: the batching was exercised.
        let txns: u64 = said
            .split(" in ")
            .nth(1)
            .and_then(|s| s.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap();
        assert!(txns > 4, "{said}");
        // The KV commands see the typed tables on etcd.
        let tables = ok(&["tables", &url], "");
        assert!(tables.contains("nums\t400\n"), "{tables}");
        assert!(tables.contains("$docs"), "{tables}");
        assert!(tables.contains("$ev"), "{tables}");
        // The dump of the prefix is the dump of the file but for the
        // header (an etcd prefix has no file format).
        let file_dump = ok(&["dump", p(&src)], "");
        let etcd_dump = ok(&["dump", &url], "");
        assert_eq!(
            file_dump.lines().skip(1).collect::<Vec<_>>(),
            etcd_dump.lines().skip(1).collect::<Vec<_>>()
        );
        // Back into a new file: identical dumps, and the public views.
        let back = dir.path().join("back.cairn");
        let said = ok(&["migrate", &url, p(&back)], "");
        assert!(said.contains("to "), "{said}");
        assert_eq!(ok(&["dump", p(&back)], ""), file_dump);
        assert_eq!(ok(&["check", p(&back)], ""), "ok\n");
        let (a, b) = (
            Database::open_read_only(&src).unwrap(),
            Database::open_read_only(&back).unwrap(),
        );
        for db in [&a, &b] {
            assert_eq!(db.list_collections().unwrap(), ["people"]);
        }
        let people = |db: &Database| {
            let c = db.collection::<Document>("people");
            assert!(c.check_indexes().unwrap().is_empty());
            let docs: Vec<Document> = c
                .find(json!({"age": {"$gte": 4}}))
                .unwrap()
                .map(|d| d.unwrap())
                .collect();
            (c.list_indexes().unwrap(), docs)
        };
        assert_eq!(people(&a), people(&b));
        assert_eq!(people(&b).0.len(), 2, "email_1 and age_-1");
        let events = |db: &Database| {
            EventStore::new(db)
                .read_all(
                    ReadFrom::Start,
                    Direction::Forward,
                    usize::MAX,
                    &EventFilter::all(),
                )
                .unwrap()
        };
        assert_eq!(events(&a).len(), 20);
        assert_eq!(events(&a), events(&b));

        // Refusals: a non-empty destination, an existing file, two URLs.
        fails_with(&["migrate", p(&src), &url], "", "is not empty");
        ok(&["put", &cluster.url("used"), "t", "k", "v"], "");
        fails_with(
            &["migrate", p(&src), &cluster.url("used")],
            "",
            "is not empty",
        );
        fails_with(&["migrate", &url, p(&back)], "", "already exists");
        fails_with(
            &["migrate", &url, &cluster.url("x")],
            "",
            "one of SRC and DEST",
        );
        fails(&["migrate", p(&src), p(&back)], "", "one of SRC and DEST");
        // A prefix a client only connected to (its format record alone)
        // takes a migration.
        ok(&["tables", &cluster.url("touched")], "");
        ok(&["migrate", p(&src), &cluster.url("touched")], "");
        assert_eq!(ok(&["dump", &cluster.url("touched")], ""), etcd_dump);
    });
}

#[test]
fn a_partial_migration_is_refused() {
    with_cluster("a_partial_migration_is_refused", |cluster| {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src.cairn");
        build(&src, 400);
        let url = cluster.url("half");
        // Crash `cairn migrate` after two batches.
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_cairn"))
            .args(["migrate", p(&src), &url])
            .env("CAIRN_TEST_MIGRATE_CRASH_AFTER", "2")
            .output()
            .unwrap();
        assert!(!o.status.success());
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("crashing after 2 batches"),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        // Some tables reached etcd…
        let raw = cairndb_etcd::EtcdDatabase::connect(&cluster.url("half"));
        let e = raw.unwrap_err();
        assert!(
            matches!(e, cairndb_etcd::Error::MigrationIncomplete { .. }),
            "{e}"
        );
        // …but no command opens the prefix, and a migration into it is
        // refused as non-empty.
        for args in [
            vec!["tables", url.as_str()],
            vec!["get", &url, "nums", "0"],
            vec!["put", &url, "t", "k", "v"],
            vec!["dump", &url],
            vec!["migrate", &url, "/nonexistent-dir/x.cairn"],
        ] {
            fails_with(&args, "", "holds a migration that did not finish");
        }
        fails_with(&["migrate", p(&src), &url], "", "is not empty");
        // A truncated whole dump loaded into a prefix is partial too.
        let dump = ok(&["dump", p(&src)], "");
        let cut: String = dump.lines().take(300).map(|l| format!("{l}\n")).collect();
        let url2 = cluster.url("cut");
        fails_with(&["load", &url2], &cut, "truncated");
        fails_with(
            &["tables", &url2],
            "",
            "holds a migration that did not finish",
        );
    });
}

/// `cairn load` into a prefix reads and checks a dump as a load into a
/// file does (docs/dump-format.md): a dump of a newer dump format or of a
/// newer file format is refused at line 1 before the prefix is touched (no
/// partial migration is left behind), as it is for a file; a load that
/// fails at a line says how many entries earlier etcd transactions
/// committed, and that is what the prefix holds.
#[test]
fn load_into_etcd_checks_the_dump_and_counts_what_it_committed() {
    with_cluster(
        "load_into_etcd_checks_the_dump_and_counts_what_it_committed",
        |cluster| {
            let body = "{\"table\":\"t\",\"key_type\":\"&[u8]\",\"value_type\":\"&[u8]\"}\n\
                        {\"table\":\"t\",\"key\":\"a\",\"value\":\"1\"}\n\
                        {\"cairn_dump_end\":{\"tables\":1,\"entries\":1}}\n";
            let dir = tempfile::tempdir().unwrap();
            let cases = [
                (
                    "{\"cairn_dump\":2,\"format_version\":3,\"page_size\":4096}",
                    "line 1: dump format version 2 is newer than this cairn reads (1)",
                ),
                (
                    "{\"cairn_dump\":1,\"format_version\":99,\"page_size\":4096}",
                    "line 1: the dump comes from a file of format version 99, newer than this \
                     cairn writes",
                ),
            ];
            for (i, (header, message)) in cases.iter().enumerate() {
                let dump = format!("{header}\n{body}");
                let url = cluster.url(&format!("newer{i}"));
                fails_with(&["load", &url], &dump, message);
                // Untouched: it opens, holding nothing.
                assert_eq!(ok(&["tables", &url], ""), "");
                // A file says the same.
                let file = dir.path().join(format!("newer{i}.cairn"));
                fails_with(&["load", p(&file)], &dump, message);
                assert!(!file.exists());
            }
            // The same whole dump with this build's versions loads.
            let url = cluster.url("current");
            ok(
                &["load", &url],
                &format!("{{\"cairn_dump\":1,\"format_version\":3,\"page_size\":4096}}\n{body}"),
            );
            assert_eq!(ok(&["tables", &url], ""), "t\t1\n");

            // 300 entries, more than two etcd transactions hold at
            // --max-txn-ops 128, then a bad line.
            let mut lines: String = (0..300)
                .map(|i| format!("{{\"table\":\"t\",\"key\":\"k{i:03}\",\"value\":\"v\"}}\n"))
                .collect();
            lines.push_str("{\"table\":\"t\",\"key\":\"bad\"}\n");
            let url = cluster.url("partial");
            let err = fails_with(&["load", &url], &lines, "line 301: ");
            let committed: u64 = err
                .rsplit(" (")
                .next()
                .and_then(|s| {
                    s.strip_suffix(" entries from earlier lines were already committed)\n")
                })
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("no count of committed entries: {err}"));
            assert!((1..300).contains(&committed), "{err}");
            assert_eq!(ok(&["tables", &url], ""), format!("t\t{committed}\n"));
            // A whole dump that fails at a line leaves a partial migration,
            // and says so.
            let whole = format!(
                "{{\"cairn_dump\":1,\"format_version\":3,\"page_size\":4096}}\n\
                 {{\"table\":\"t\",\"key_type\":\"&[u8]\",\"value_type\":\"&[u8]\"}}\n{lines}"
            );
            let url = cluster.url("partial-whole");
            let err = fails_with(&["load", &url], &whole, "line 303: ");
            assert!(err.contains("holds a partial migration"), "{err}");
            assert!(
                err.contains("entries from earlier lines were already committed"),
                "{err}"
            );
            fails_with(
                &["tables", &url],
                "",
                "holds a migration that did not finish",
            );
        },
    );
}
