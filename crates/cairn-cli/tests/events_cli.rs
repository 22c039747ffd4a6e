//! End-to-end tests of `cairn events`: append with expected versions and
//! idempotent retries, reads forward and backward, the global log with
//! filters, `--follow` picking up another process's appends, stream listing,
//! and typed errors with exit status 1.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

mod common;
use common::{cairn, fails, ok};
use std::time::{Duration, Instant};

fn lines(out: &str) -> Vec<serde_json::Value> {
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

#[test]
fn append_read_and_list() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ev.cairn");
    let db = p(&db);
    let batch = concat!(
        r#"{"type":"Created","data":{"n":1},"id":"0192a4b6-0000-7000-8000-000000000001"}"#,
        "\n",
        r#"{"type":"Renamed","data":"x","metadata":{"by":"me"},"id":"0192a4b6-0000-7000-8000-000000000002"}"#,
        "\n"
    );
    let out = ok(
        &["events", "append", db, "order-1", "--expected", "no-stream"],
        batch,
    );
    assert_eq!(out, "appended 2 events; version 1; positions 0..=1\n");
    // The same batch again is an idempotent repeat.
    let out = ok(
        &["events", "append", db, "order-1", "--expected", "no-stream"],
        batch,
    );
    assert_eq!(
        out,
        "already appended (idempotent repeat); version 1; positions 0..=1\n"
    );
    // So is it with the default expectation (any): nothing is written twice.
    let out = ok(&["events", "append", db, "order-1"], batch);
    assert_eq!(
        out,
        "already appended (idempotent repeat); version 1; positions 0..=1\n"
    );
    ok(
        &["events", "append", db, "user-1"],
        "{\"type\":\"Paid\",\"data_b64\":\"AAEC\"}\n",
    );
    fails(
        &["events", "append", db, "order-1", "--expected", "0"],
        "{\"type\":\"X\"}\n",
        "expected version 0, but the stream is at version 1",
    );
    let read = lines(&ok(&["events", "read", db, "order-1"], ""));
    // Times as RFC 3339 (UTC, microseconds), and as microseconds beside.
    for e in &read {
        let at = e["recorded_at"].as_str().unwrap();
        assert!(
            at.len() == 27 && at.as_bytes()[10] == b'T' && at.ends_with('Z'),
            "{at}"
        );
        assert!(e["recorded_at_us"].as_u64().unwrap() > 1_700_000_000_000_000);
    }
    assert_eq!(read.len(), 2);
    assert_eq!(read[0]["type"], "Created");
    assert_eq!(read[0]["data"]["n"], 1);
    assert_eq!(read[1]["metadata"]["by"], "me");
    assert_eq!(read[1]["version"], 1);
    let back = lines(&ok(
        &[
            "events",
            "read",
            db,
            "order-1",
            "--backward",
            "--limit",
            "1",
        ],
        "",
    ));
    assert_eq!(back.len(), 1);
    assert_eq!(back[0]["type"], "Renamed");
    let all = lines(&ok(&["events", "all", db], ""));
    assert_eq!(
        all.iter()
            .map(|e| e["position"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        [0, 1, 2]
    );
    assert_eq!(all[2]["data_b64"], "AAEC");
    let paid = lines(&ok(&["events", "all", db, "--type", "Paid"], ""));
    assert_eq!(paid.len(), 1);
    let orders = lines(&ok(
        &[
            "events",
            "all",
            db,
            "--stream-prefix",
            "order-",
            "--from",
            "1",
        ],
        "",
    ));
    assert_eq!(orders.len(), 1);
    assert_eq!(
        ok(&["events", "streams", db], ""),
        "order-1\t1\tlive\nuser-1\t0\tlive\n"
    );
    // Errors: exit 1 with a message.
    fails(
        &["events", "read", db, "nope"],
        "",
        "stream \"nope\" does not exist",
    );
    fails(
        &["events", "read", db, "order-1", "--from", "9"],
        "",
        "it ends at 2",
    );
    fails(
        &["events", "append", db, "s"],
        "{\"typ\":\"x\"}\n",
        "line 1: not an event",
    );
    fails(
        &["events", "append", db, "$s"],
        "{\"type\":\"x\"}\n",
        "invalid stream name",
    );
    fails(
        &["events", "append", db, "s", "--expected", "soon"],
        "",
        "--expected must be",
    );
    fails(
        &["events", "append", db, "s"],
        "{\"type\":\"x\",\"id\":\"nope\"}\n",
        "not a UUID",
    );
}

#[test]
fn follow_prints_other_processes_appends() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("follow.cairn");
    let db = p(&path);
    ok(&["events", "append", db, "s"], "{\"type\":\"First\"}\n");
    let mut follower = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["events", "all", db, "--follow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(follower.stdout.take().unwrap()).lines();
    let first: serde_json::Value = serde_json::from_str(&out.next().unwrap().unwrap()).unwrap();
    assert_eq!(first["type"], "First");
    // Another process appends while the follower runs (its open waits out
    // the follower's brief read of the file).
    let deadline = Instant::now() + Duration::from_secs(20);
    for i in 0..3 {
        loop {
            let o = cairn(
                &["events", "append", db, "s"],
                &format!("{{\"type\":\"Next{i}\"}}\n"),
            );
            if o.status.success() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "append kept failing: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    for i in 0..3 {
        let e: serde_json::Value = serde_json::from_str(&out.next().unwrap().unwrap()).unwrap();
        assert_eq!(e["type"], format!("Next{i}"));
        assert_eq!(e["position"], i + 1);
    }
    follower.kill().unwrap();
    follower.wait().unwrap();
}

/// `--follow` beside a writer that stays open (a service appending while an
/// operator watches): the follower opens read-only next to it and prints
/// each event as it is committed, without the writer closing the file.
#[test]
fn follow_beside_a_live_writer() {
    use cairndb::events::{EventData, EventStore, ExpectedVersion};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("live.cairn");
    let db = cairndb::Database::create(&path).unwrap();
    let store = EventStore::new(&db);
    store
        .append("s", ExpectedVersion::Any, &[EventData::new("First", "{}")])
        .unwrap();
    let mut follower = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["events", "all", p(&path), "--follow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Lines arrive on a thread, so a missing one fails the test in time.
    let stdout = follower.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let next = |what: &str| -> serde_json::Value {
        let line = rx
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("the follower printed no {what}"));
        serde_json::from_str(&line).unwrap()
    };
    assert_eq!(next("first event")["type"], "First");
    for i in 0..5 {
        store
            .append(
                "s",
                ExpectedVersion::Any,
                &[EventData::new(format!("Live{i}"), "{}")],
            )
            .unwrap();
        let e = next("live event");
        assert_eq!(e["type"], format!("Live{i}"));
        assert_eq!(e["position"], i + 1);
    }
    // A burst the follower cannot keep pace with event by event: 200
    // commits of 1 to 4 events, durable and not, across two streams,
    // without waiting. It must print every one, in position order, once.
    let mut last = 5u64;
    for c in 0..200u64 {
        let txn = db.begin_write().unwrap();
        if c % 3 == 0 {
            txn.set_durability(cairndb::Durability::None);
        }
        let evs: Vec<EventData> = (0..1 + c % 4)
            .map(|k| EventData::new(format!("Burst{c}.{k}"), "{}"))
            .collect();
        let stream = if c % 2 == 0 { "s" } else { "t" };
        cairndb::events::EventWriter::new(&txn)
            .append(stream, ExpectedVersion::Any, &evs)
            .unwrap();
        txn.commit().unwrap();
        last += evs.len() as u64;
    }
    for want in 6..=last {
        let e = next("burst event");
        assert_eq!(e["position"], want, "the follower skipped or repeated: {e}");
    }
    follower.kill().unwrap();
    let _ = follower.wait();
}
