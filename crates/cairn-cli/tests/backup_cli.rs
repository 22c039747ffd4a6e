//! Complete backup paths through the real `cairn` binary: `dump | load`
//! and `backup` round-trip a database holding all three models (key-value
//! tables with binary keys; collections with unique, sparse and compound
//! indexes; event streams with metadata, custom ids, snapshots, deletes),
//! compared exhaustively (every table's entries, internal ones included,
//! and every public view) with `cairn check` passing on the copy; the
//! error cases (a malformed line names its number, a truncated dump, a
//! target that holds tables, an existing DEST); `export` / `import` carry
//! index definitions.

mod common;

use std::path::{Path, PathBuf};

use cairndb::document::{Document, IndexInfo, IndexOptions, Value};
use cairndb::events::{
    Direction, EventData, EventFilter, EventStore, ExpectedVersion, Loaded, ReadFrom,
    RecordedEvent, StreamInfo, StreamMetadata, StreamVersion, Uuid,
};
use cairndb::{Builder, Database, TableDefinition};
use common::{cairn, fails, ok};
use serde_json::json;

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// Runs `cairn` with raw bytes on stdin; returns (status, stdout, stderr).
fn run(args: &[&str], input: &[u8]) -> (Option<i32>, Vec<u8>, String) {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    // Write from a thread: a large dump fills the pipe before `cairn`
    // answers.
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    (
        out.status.code(),
        out.stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn dump(path: &Path) -> Vec<u8> {
    let (code, out, err) = run(&["dump", p(path)], b"");
    assert_eq!(code, Some(0), "dump: {err}");
    out
}

const BIN: TableDefinition<&[u8], &[u8]> = TableDefinition::new("bin");
const NUMS: TableDefinition<u64, &str> = TableDefinition::new("nums");
const PAIRS: TableDefinition<(u64, u64), (u64, u64)> = TableDefinition::new("pairs");
const EMPTY: TableDefinition<&str, u32> = TableDefinition::new("empty");

/// A database with the three models, on a non-default page size, with
/// deletes and drops leaving gaps (ids, index numbers, positions).
fn build(path: &Path) {
    let db = Builder::new().page_size(8192).create(path).unwrap();
    let w = db.begin_write().unwrap();
    {
        let mut t = w.open_table(BIN).unwrap();
        t.insert(&[][..], &[][..]).unwrap();
        t.insert(&[0xff, 0x00, 0x80][..], &[0xc3, 0x28][..])
            .unwrap();
        t.insert(&b"plain"[..], &b"\"quoted\"\n\ttab"[..]).unwrap();
        for i in 0..300u32 {
            let k = [i.to_be_bytes().as_slice(), &[0xfe; 40]].concat();
            t.insert(
                k.as_slice(),
                vec![i as u8; (i as usize * 7) % 900].as_slice(),
            )
            .unwrap();
        }
        // An out-of-line value.
        t.insert(&b"big"[..], vec![0xab; 100_000].as_slice())
            .unwrap();
        let mut n = w.open_table(NUMS).unwrap();
        for i in 0..50u64 {
            n.insert(i * 3, format!("n{i}").as_str()).unwrap();
        }
        let mut pairs = w.open_table(PAIRS).unwrap();
        pairs.insert((1, 2), (3, 4)).unwrap();
        pairs.insert((u64::MAX, 0), (0, u64::MAX)).unwrap();
        w.open_table(EMPTY).unwrap();
    }
    w.commit().unwrap();

    let orders = db.collection::<Document>("orders");
    orders
        .create_index(
            &[("code", 1)],
            IndexOptions {
                unique: true,
                ..Default::default()
            },
        )
        .unwrap();
    orders
        .create_index(
            &[("coupon", 1)],
            IndexOptions {
                sparse: true,
                name: Some("by_coupon".into()),
                ..Default::default()
            },
        )
        .unwrap();
    orders
        .create_index(&[("tmp", 1)], Default::default())
        .unwrap();
    orders
        .create_index(&[("status", 1), ("created", -1)], Default::default())
        .unwrap();
    orders
        .create_index(&[("items.sku", 1)], Default::default())
        .unwrap();
    assert!(orders.drop_index("tmp_1").unwrap());
    for i in 0..120i64 {
        let mut d: Document = Value::from_json(json!({
            "code": format!("c{i:04}"),
            "status": (["new", "paid", "shipped"][i as usize % 3]),
            "created": 1_700_000_000 + i * 37 % 1000,
            "items": [{"sku": format!("s{}", i % 7), "n": i % 4}],
            "total": i as f64 * 1.25,
        }))
        .unwrap()
        .as_object()
        .unwrap()
        .clone();
        if i % 5 == 0 {
            d.insert("coupon", format!("k{}", i % 3));
        }
        if i % 11 == 0 {
            d.insert("blob", Value::Binary(vec![0, 1, 2, 0xff]));
        }
        orders.insert(&d).unwrap();
    }
    orders
        .delete_many(json!({"status": "new", "total": {"$lt": 30}}))
        .unwrap();
    let people = db.collection::<serde_json::Value>("people");
    for (id, name) in [(json!(1), "ada"), (json!("x"), "bob"), (json!(2.5), "cy")] {
        people.insert(&json!({"_id": id, "name": name})).unwrap();
    }
    people.insert(&json!({"name": "generated"})).unwrap();
    // A collection created then dropped leaves its number used.
    let gone = db.collection::<Document>("gone");
    gone.insert(&Document::from([("a", 1)])).unwrap();
    assert!(gone.drop().unwrap());

    let es = EventStore::new(&db);
    for i in 0..40u64 {
        let stream = ["acct-1", "acct-2", "cart-9"][i as usize % 3];
        let mut e = EventData::new(format!("t{}", i % 4), format!("{{\"i\":{i}}}").into_bytes());
        if i % 4 == 0 {
            e = e.with_metadata(vec![i as u8, 0xff]);
        }
        if i % 6 == 0 {
            e = e.with_id(Uuid::from_u128(0x1234_5678_0000 + u128::from(i)));
        }
        es.append(stream, ExpectedVersion::Any, &[e]).unwrap();
    }
    // A batch in one commit.
    es.append(
        "acct-1",
        ExpectedVersion::Any,
        &[
            EventData::new("batch", b"1".to_vec()),
            EventData::new("batch", b"2".to_vec()),
        ],
    )
    .unwrap();
    es.save_snapshot("acct-1", StreamVersion(5), b"state at 5")
        .unwrap();
    es.save_snapshot("acct-1", StreamVersion(10), b"state at 10")
        .unwrap();
    es.save_snapshot("cart-9", StreamVersion(2), &[0, 0xff])
        .unwrap();
    es.set_stream_metadata(
        "acct-2",
        StreamMetadata {
            max_count: Some(5),
            truncate_before: None,
        },
    )
    .unwrap();
    es.append(
        "gone-soft",
        ExpectedVersion::NoStream,
        &[EventData::new("x", b"".to_vec())],
    )
    .unwrap();
    es.delete_stream("gone-soft", ExpectedVersion::Any, false)
        .unwrap();
    es.append(
        "gone-hard",
        ExpectedVersion::NoStream,
        &[EventData::new("x", b"".to_vec())],
    )
    .unwrap();
    es.delete_stream("gone-hard", ExpectedVersion::Any, true)
        .unwrap();
    db.close().unwrap();
}

fn tables(db: &Database) -> cairndb::testing::Tables {
    cairndb::testing::all_tables(db).unwrap()
}

/// What the public APIs show.
#[derive(Debug, PartialEq)]
struct Views {
    page_size: usize,
    collections: Vec<(String, Vec<IndexInfo>, Vec<Document>)>,
    events: Vec<RecordedEvent>,
    streams: Vec<StreamInfo>,
    loaded: Vec<Result<Loaded, String>>,
    next_position: u64,
}

fn views(db: &Database) -> Views {
    let mut collections = Vec::new();
    for name in db.list_collections().unwrap() {
        let c = db.collection::<Document>(&name);
        assert!(c.check_indexes().unwrap().is_empty(), "{name}");
        let docs = c.all().unwrap().map(|d| d.unwrap()).collect();
        collections.push((name, c.list_indexes().unwrap(), docs));
    }
    let es = EventStore::new(db);
    let streams = es.list_streams("").unwrap();
    // A tombstoned stream cannot be loaded: the error is compared too.
    let loaded = streams
        .iter()
        .map(|s| es.load(&s.name, None).map_err(|e| e.to_string()))
        .collect();
    Views {
        page_size: db.page_size(),
        collections,
        events: es
            .read_all(
                ReadFrom::Start,
                Direction::Forward,
                usize::MAX,
                &EventFilter::all(),
            )
            .unwrap(),
        streams,
        loaded,
        next_position: es.next_position().unwrap().0,
    }
}

fn check_ok(path: &Path) {
    assert_eq!(ok(&["check", p(path)], ""), "ok\n");
}

#[test]
fn dump_and_load_round_trip_every_model_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src.cairn");
    build(&src);
    let text = dump(&src);
    let copy = dir.path().join("copy.cairn");
    let (code, _, err) = run(&["load", p(&copy)], &text);
    assert_eq!(code, Some(0), "load: {err}");
    assert!(err.contains("loaded "), "{err}");
    check_ok(&copy);
    // No temporary file is left beside the copy.
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");

    let a = Database::open_read_only(&src).unwrap();
    let b = Database::open_read_only(&copy).unwrap();
    // Every table, internal ones included, entry for entry.
    let (ta, tb) = (tables(&a), tables(&b));
    assert!(ta.keys().any(|n| n.starts_with("$docs")), "{:?}", ta.keys());
    assert!(ta.keys().any(|n| n.starts_with("$ev")), "{:?}", ta.keys());
    assert_eq!(ta.keys().collect::<Vec<_>>(), tb.keys().collect::<Vec<_>>());
    for (name, t) in &ta {
        assert!(&tb[name] == t, "table {name} differs");
    }
    // Every public view: documents, index definitions, events with their
    // positions, versions, ids, metadata and times, streams, snapshots.
    let (va, vb) = (views(&a), views(&b));
    assert_eq!(va.page_size, 8192);
    assert_eq!(va.collections.len(), 2);
    assert_eq!(va.collections[0].1.len(), 4, "{:?}", va.collections[0].1);
    assert!(va.events.len() > 40);
    assert!(va.loaded.iter().flatten().any(|l| l.snapshot.is_some()));
    assert_eq!(va, vb);
    // The dump of the copy is the same bytes.
    drop((a, b));
    assert!(dump(&copy) == text, "the copy dumps differently");

    // The copy works on: its unique index refuses a duplicate, and the next
    // event takes the next global position.
    let b = Database::open(&copy).unwrap();
    let orders = b.collection::<serde_json::Value>("orders");
    assert!(orders.insert(&json!({"code": "c0119"})).is_err());
    let r = EventStore::new(&b)
        .append(
            "acct-1",
            ExpectedVersion::Any,
            &[EventData::new("t", b"n".to_vec())],
        )
        .unwrap();
    assert_eq!(r.first_position.unwrap().0, va.next_position);
    b.close().unwrap();
    check_ok(&copy);
}

#[test]
fn backup_copies_every_model_and_keeps_dest() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src.cairn");
    build(&src);
    let dest = dir.path().join("b.cairn");
    let out = ok(&["backup", p(&src), p(&dest)], "");
    assert!(out.starts_with("backed up "), "{out}");
    check_ok(&dest);
    let (a, b) = (
        Database::open_read_only(&src).unwrap(),
        Database::open_read_only(&dest).unwrap(),
    );
    assert!(tables(&a) == tables(&b), "the backup's tables differ");
    assert_eq!(views(&a), views(&b));
    drop((a, b));
    // An existing DEST is kept unless --force.
    let before = std::fs::read(&dest).unwrap();
    fails(
        &["backup", p(&src), p(&dest)],
        "",
        "already exists; pass --force",
    );
    assert!(std::fs::read(&dest).unwrap() == before, "DEST changed");
    std::fs::write(&dest, b"not a database").unwrap();
    fails(&["backup", p(&src), p(&dest)], "", "--force");
    ok(&["backup", "--force", p(&src), p(&dest)], "");
    check_ok(&dest);
    // The database itself is not a destination.
    fails(
        &["backup", "--force", p(&src), p(&src)],
        "",
        "is the database itself",
    );
    // A missing source writes nothing.
    let nowhere = dir.path().join("nowhere.cairn");
    let none = dir.path().join("none.cairn");
    let o = cairn(&["backup", p(&nowhere), p(&none)], "");
    assert_eq!(o.status.code(), Some(1));
    assert!(!none.exists());
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "temporary files left: {names:?}");
}

/// `cairn load` of `input` into a new file must fail naming `message`
/// and leave no file.
fn load_fails(dir: &Path, input: &[u8], message: &str) -> PathBuf {
    let target = dir.join("t.cairn");
    let _ = std::fs::remove_file(&target);
    let (code, _, err) = run(&["load", p(&target)], input);
    assert_eq!(code, Some(1), "{message}: {err}");
    assert!(err.contains(message), "wanted {message:?}: {err}");
    assert!(
        !target.exists(),
        "{message}: a failed restore left the file"
    );
    assert_eq!(
        std::fs::read_dir(dir).unwrap().count(),
        0,
        "{message}: temporary files left"
    );
    target
}

#[test]
fn load_refuses_bad_dumps_and_non_empty_targets() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src.cairn");
    build(&src);
    let text = dump(&src);
    let lines: Vec<&[u8]> = text
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    let join = |ls: &[&[u8]]| {
        let mut v = Vec::new();
        for l in ls {
            v.extend_from_slice(l);
            v.push(b'\n');
        }
        v
    };
    let work = tempfile::tempdir().unwrap();
    // A malformed line names its number (line 7 here); nothing is written.
    let mut bad = lines.clone();
    bad[6] = b"{\"table\":\"$docs\",\"key\":";
    load_fails(work.path(), &join(&bad), "line 7: not a dump entry");
    let mut bad = lines.clone();
    bad[4] = b"{\"table\":\"bin\",\"key_b64\":\"@@\",\"value\":\"\"}";
    load_fails(
        work.path(),
        &join(&bad),
        "line 5: \"key_b64\" is not valid base64",
    );
    // A line past the first batch (10,000 lines) too.
    let mut big = lines.clone();
    let many: Vec<Vec<u8>> = (0..12_000)
        .map(|i| format!("{{\"table\":\"zz\",\"key\":\"{i:06}\",\"value\":\"\"}}").into_bytes())
        .collect();
    let end = big.pop().unwrap();
    big.extend(many.iter().map(Vec::as_slice));
    big.push(b"{oops");
    big.push(end);
    let n = big.len() - 1;
    load_fails(
        work.path(),
        &join(&big),
        &format!("line {n}: not a dump entry"),
    );
    // A truncated dump (no end line), and one whose end line disagrees.
    load_fails(
        work.path(),
        &join(&lines[..lines.len() - 1]),
        "ends without its end line",
    );
    load_fails(
        work.path(),
        &join(&lines[..lines.len() - 2]),
        "ends without its end line",
    );
    let mut short = lines[..lines.len() - 2].to_vec();
    short.push(lines[lines.len() - 1]);
    load_fails(work.path(), &join(&short), "the end line counts");
    // A line after the end line.
    let mut after = lines.clone();
    after.push(lines[2]);
    load_fails(
        work.path(),
        &join(&after),
        &format!("line {}: a line after the end line", lines.len() + 1),
    );
    // A header that is not first.
    let mut late = lines.clone();
    late.insert(3, lines[0]);
    load_fails(work.path(), &join(&late), "line 4: a header line");
    // A newer dump format.
    let mut newer = lines.clone();
    newer[0] = b"{\"cairn_dump\":2,\"format_version\":2,\"page_size\":8192}";
    load_fails(
        work.path(),
        &join(&newer),
        "line 1: dump format version 2 is newer",
    );
    newer[0] = b"{\"cairn_dump\":1,\"format_version\":2,\"page_size\":1000}";
    load_fails(
        work.path(),
        &join(&newer),
        "line 1: invalid option: page size 1000",
    );

    // A file that holds tables is refused, and left as it was.
    let target = work.path().join("full.cairn");
    ok(&["put", p(&target), "mine", "k", "v"], "");
    let before = dump(&target);
    let (code, _, err) = run(&["load", p(&target)], &text);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("refusing to load into"), "{err}");
    assert!(
        err.contains("already holds 1 table(s) (\"mine\" first)"),
        "{err}"
    );
    let (code, _, err) = run(&["load", "--merge", p(&target)], &text);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("a whole dump restores only into a new or empty file"),
        "{err}"
    );
    assert!(dump(&target) == before, "a refused load changed the file");
    // Internal tables never come in through table lines without a header.
    let internal: Vec<&[u8]> = lines[1..lines.len() - 1].to_vec();
    let fresh = work.path().join("fresh.cairn");
    let (code, _, err) = run(&["load", p(&fresh)], &join(&internal));
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("line 1: invalid table name \"$docs\""),
        "{err}"
    );
}

#[test]
fn export_and_import_carry_index_definitions() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src.cairn");
    build(&src);
    let exported = ok(&["export", p(&src), "orders"], "");
    let head: Vec<&str> = exported.lines().take(5).collect();
    assert_eq!(
        head[..4],
        [
            r#"{"$index":{"name":"code_1","fields":{"code":1},"unique":true,"sparse":false}}"#,
            r#"{"$index":{"name":"by_coupon","fields":{"coupon":1},"unique":false,"sparse":true}}"#,
            r#"{"$index":{"name":"status_1_created_-1","fields":{"status":1,"created":-1},"unique":false,"sparse":false}}"#,
            r#"{"$index":{"name":"items.sku_1","fields":{"items.sku":1},"unique":false,"sparse":false}}"#,
        ]
    );
    assert!(!head[4].contains("$index"), "{}", head[4]);
    // --no-indexes: the documents only.
    let docs_only = ok(&["export", "--no-indexes", p(&src), "orders"], "");
    assert_eq!(
        docs_only,
        exported
            .lines()
            .skip(4)
            .map(|l| format!("{l}\n"))
            .collect::<String>()
    );

    let copy = dir.path().join("copy.cairn");
    ok(&["import", p(&copy), "orders", "--batch", "7"], &exported);
    let (a, b) = (
        Database::open_read_only(&src).unwrap(),
        Database::open_read_only(&copy).unwrap(),
    );
    let defs = |db: &Database| -> Vec<_> {
        db.collection::<Document>("orders")
            .list_indexes()
            .unwrap()
            .into_iter()
            .map(|i| (i.name, i.fields, i.unique, i.sparse))
            .collect()
    };
    assert_eq!(defs(&a), defs(&b));
    let all = |db: &Database| -> Vec<Document> {
        db.collection::<Document>("orders")
            .all()
            .unwrap()
            .map(|d| d.unwrap())
            .collect()
    };
    assert_eq!(all(&a), all(&b));
    assert!(b
        .collection::<Document>("orders")
        .check_indexes()
        .unwrap()
        .is_empty());
    drop((a, b));
    assert_eq!(ok(&["export", p(&copy), "orders"], ""), exported);
    // The unique index holds in the copy.
    fails(
        &["import", p(&copy), "orders"],
        "{\"code\":\"c0119\"}\n",
        "duplicate",
    );
    // Importing the same definitions again is fine; another definition
    // under the same name names the line.
    ok(
        &["import", p(&copy), "orders"],
        &exported
            .lines()
            .take(4)
            .map(|l| format!("{l}\n"))
            .collect::<String>(),
    );
    fails(
        &["import", p(&copy), "orders"],
        "\n{\"$index\":{\"name\":\"code_1\",\"fields\":{\"code\":-1}}}\n",
        "line 2: the collection already has an index \"code_1\" with another definition",
    );
    fails(
        &["import", p(&copy), "orders"],
        "{\"$index\":{\"name\":\"x\",\"fields\":{\"a\":2}}}\n",
        "line 1: the order of \"a\" must be 1 or -1",
    );
    fails(
        &["import", p(&copy), "orders"],
        "{\"$index\":{\"fields\":{\"a\":1}}}\n",
        "line 1: not an index definition",
    );
    check_ok(&copy);
}

/// One HTTP/1.1 request to a `cairn serve`; its status.
fn http_status(addr: &str, method: &str, path: &str, body: &str) -> u16 {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out.split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// `cairn backup` is online across processes: while a `cairn serve`
/// process holds the file and keeps committing (each request a durable
/// commit, acknowledged), backups through a read-only handle succeed, pass
/// `cairn check`, and hold a prefix of the writer's commits that includes
/// every one acknowledged before the backup started (the documents
/// 0..n of a collection with an index, and the key-value entry the last
/// commit left after removing the one before). Before, the backup opened
/// the file read-write and failed with "locked for writing by another
/// process".
#[cfg(unix)]
#[test]
fn backup_beside_a_live_writer_process() {
    use cairndb::ReadableTable;
    use std::io::BufRead;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("live.cairn");
    /// Kills the server when the test ends, failed assertions included (a
    /// server left running would keep the test's output pipe open).
    struct KillOnDrop(std::process::Child);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut server = KillOnDrop(
        std::process::Command::new(env!("CARGO_BIN_EXE_cairn"))
            .args(["serve", p(&src), "--bind", "127.0.0.1:0"])
            .env("RUST_LOG", "warn")
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut lines = std::io::BufReader::new(server.0.stderr.take().unwrap()).lines();
    let mut addr = String::new();
    while Instant::now() < deadline {
        let Some(Ok(l)) = lines.next() else { break };
        if let Some(rest) = l.split("serving on http://").nth(1) {
            addr = rest.trim_end_matches("/api/v1").to_string();
            break;
        }
    }
    // Keep reading the server's stderr so that it never blocks on it.
    std::thread::spawn(move || for _ in lines {});
    assert!(!addr.is_empty(), "no address printed");
    assert_eq!(
        http_status(
            &addr,
            "POST",
            "/api/v1/collections/c/indexes",
            r#"{"fields":{"n":1}}"#
        ),
        201
    );
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(AtomicU64::new(0));
    let writer = {
        let (stop, acked, addr) = (stop.clone(), acked.clone(), addr.clone());
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::SeqCst) && Instant::now() < deadline {
                let body = format!(r#"{{"_id":{i},"n":{i}}}"#);
                let code = http_status(&addr, "POST", "/api/v1/collections/c/documents", &body);
                assert_eq!(code, 201, "insert {i}");
                let code = http_status(&addr, "PUT", &format!("/api/v1/kv/last/keys/{i}"), "x");
                assert!(code == 200 || code == 204, "put {i}: {code}");
                if i > 0 {
                    let code = http_status(
                        &addr,
                        "DELETE",
                        &format!("/api/v1/kv/last/keys/{}", i - 1),
                        "",
                    );
                    assert!(code == 200 || code == 204, "delete {}: {code}", i - 1);
                }
                i += 1;
                acked.store(i, Ordering::SeqCst);
            }
        })
    };
    while acked.load(Ordering::SeqCst) < 20 {
        assert!(Instant::now() < deadline, "the writer made no progress");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut sizes = Vec::new();
    for k in 0..3 {
        let dest = dir.path().join(format!("copy{k}.cairn"));
        let before = acked.load(Ordering::SeqCst);
        let out = ok(&["backup", p(&src), p(&dest)], "");
        assert!(out.starts_with("backed up"), "{out}");
        assert_eq!(ok(&["check", p(&dest)], ""), "ok\n");
        let copy = Database::open_read_only(&dest).unwrap();
        let c = copy.collection::<Document>("c");
        let mut ids: Vec<i64> = c
            .all()
            .unwrap()
            .map(|d| d.unwrap().get("_id").unwrap().as_i64().unwrap())
            .collect();
        ids.sort();
        let n = ids.len() as u64;
        assert_eq!(ids, (0..n as i64).collect::<Vec<_>>(), "not a prefix");
        // Each document is followed by its key's put and the removal of
        // the one before: the copy holds one key, the last or the one before.
        let r = copy.begin_read().unwrap();
        let t = r.open_untyped_table("last").unwrap();
        let keys: Vec<String> = t
            .iter()
            .unwrap()
            .map(|e| String::from_utf8(e.unwrap().0.value().to_vec()).unwrap())
            .collect();
        assert!(
            keys.len() <= 2 && keys.iter().all(|k| k.parse::<u64>().unwrap() + 2 >= n),
            "{keys:?} after {n} documents"
        );
        assert!(
            n >= before,
            "copy of {n} commits, {before} acknowledged before it began"
        );
        sizes.push(n);
        std::thread::sleep(Duration::from_millis(30));
    }
    stop.store(true, Ordering::SeqCst);
    writer.join().unwrap();
    drop(server);
    assert!(sizes.windows(2).all(|w| w[0] <= w[1]), "{sizes:?}");
}
