//! End-to-end tests of `cairn watch` (a collection's change stream as JSON
//! lines: typed refusal without the option, `--enable`, resuming from a
//! token printed in an event, `--pipeline`, following another process's
//! writes) and of `cairn index create --expire-after` (a TTL index listed
//! with its expiry, exported and imported with it).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

mod common;
use common::{fails, ok};

fn lines(out: &str) -> Vec<serde_json::Value> {
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// The token before every position of collection 0 (the first created).
const START: &str = "0000000000000000000000000000000000";

#[test]
fn watch_enable_resume_and_pipeline() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.cairn");
    let db = p(&path);
    ok(&["import", db, "c"], "{\"_id\":0}\n");
    fails(&["watch", db, "c", "--no-follow"], "", "--enable");
    ok(&["watch", db, "c", "--enable"], "");
    ok(
        &["import", db, "c"],
        "{\"_id\":1,\"a\":1}\n{\"_id\":2,\"a\":2}\n",
    );
    ok(
        &["update", db, "c", "{\"_id\":1}", "{\"$set\":{\"a\":5}}"],
        "",
    );
    let all = lines(&ok(
        &["watch", db, "c", "--no-follow", "--resume-after", START],
        "",
    ));
    let ops: Vec<&str> = all
        .iter()
        .map(|e| e["operationType"].as_str().unwrap())
        .collect();
    assert_eq!(ops, ["insert", "insert", "update"]);
    assert_eq!(
        all[2]["updateDescription"]["updatedFields"],
        serde_json::json!({"a": 5})
    );
    // Resume after the first event, with the token as printed.
    let token = all[0]["_id"].to_string();
    let rest = lines(&ok(
        &["watch", db, "c", "--no-follow", "--resume-after", &token],
        "",
    ));
    assert_eq!(rest, all[1..]);
    let only = lines(&ok(
        &[
            "watch",
            db,
            "c",
            "--no-follow",
            "--resume-after",
            START,
            "--full-document",
            "updateLookup",
            "--pipeline",
            "[{\"$match\":{\"operationType\":\"update\"}}]",
        ],
        "",
    ));
    assert_eq!(only.len(), 1);
    assert_eq!(
        only[0]["fullDocument"],
        serde_json::json!({"_id": 1, "a": 5})
    );
    fails(
        &["watch", db, "c", "--resume-after", "xyz"],
        "",
        "invalid resume token",
    );
    fails(
        &["watch", db, "c", "--pipeline", "[{\"$sort\":{\"a\":1}}]"],
        "",
        "$sort",
    );
}

#[test]
fn watch_follows_other_processes_writes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.cairn");
    let db = p(&path);
    ok(&["watch", db, "c", "--enable"], "");
    let mut follower = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["watch", db, "c", "--resume-after", START, "--limit", "2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(follower.stdout.take().unwrap()).lines();
    ok(&["import", db, "c"], "{\"_id\":7}\n");
    let first: serde_json::Value = serde_json::from_str(&out.next().unwrap().unwrap()).unwrap();
    assert_eq!(first["documentKey"]["_id"], 7);
    ok(&["delete", db, "c", "{\"_id\":7}"], "");
    let second: serde_json::Value = serde_json::from_str(&out.next().unwrap().unwrap()).unwrap();
    assert_eq!(second["operationType"], "delete");
    assert!(follower.wait().unwrap().success());
}

#[test]
fn index_create_expire_after() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.cairn");
    let db = p(&path);
    ok(
        &["import", db, "s"],
        "{\"_id\":1,\"at\":0}\n{\"_id\":2,\"at\":\"x\"}\n",
    );
    ok(
        &["index", "create", db, "s", "at", "--expire-after", "3600"],
        "",
    );
    let listed = ok(&["index", "list", db, "s"], "");
    assert!(listed.contains("expire_after=3600"), "{listed}");
    // Creating it deleted a first batch: the document dated 1970 expired;
    // the string date never does.
    let left = ok(&["find", db, "s", "{}"], "");
    assert!(!left.contains("\"_id\":1"), "{left}");
    assert!(left.contains("\"_id\":2"), "{left}");
    fails(
        &["index", "create", db, "s", "a,b", "--expire-after", "1"],
        "",
        "one ascending path",
    );
    // The definition travels with export / import.
    let exported = ok(&["export", db, "s"], "");
    assert!(
        exported.contains("\"expire_after_seconds\":3600"),
        "{exported}"
    );
    let copy = dir.path().join("copy.cairn");
    ok(&["import", p(&copy), "s"], &exported);
    let listed = ok(&["index", "list", p(&copy), "s"], "");
    assert!(listed.contains("expire_after=3600"), "{listed}");
}

/// `--disable` on a path that holds no file fails naming it and creates
/// nothing (as every command that needs an existing file).
#[test]
fn watch_disable_on_a_missing_file_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("typo.cairn");
    fails(&["watch", p(&path), "c", "--disable"], "", p(&path));
    fails(&["watch", p(&path), "c", "--disable"], "", "does not exist");
    assert!(!path.exists());
}
