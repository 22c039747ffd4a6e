//! `cairn shell` in a real pseudo-terminal: Tab completion of names,
//! methods and field paths, history recalled with the Up arrow in a later
//! session, `it` paging, Ctrl-C cancelling a line or interrupting a long
//! listing, Ctrl-D leaving, colours on a terminal.
#![cfg(unix)]

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use expectrl::{ControlCode, Expect, Session};

const PROMPT: &str = "cairn> ";

fn shell(db: &Path, home: &Path) -> expectrl::session::OsSession {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cairn"));
    cmd.arg("shell")
        .arg(db)
        .env("HOME", home)
        .env("XDG_DATA_HOME", home.join("data"))
        .env_remove("CAIRN_HISTORY")
        .env("NO_COLOR", "1")
        .env("TERM", "xterm");
    let mut s = Session::spawn(cmd).unwrap();
    s.set_expect_timeout(Some(Duration::from_secs(10)));
    s.expect(PROMPT).unwrap();
    s
}

#[test]
fn completion_history_paging_and_keys() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.cairn");
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();

    let mut s = shell(&db, &home);
    // 25 documents: the first batch is 20, `it` shows the rest.
    let docs: Vec<String> = (0..25)
        .map(|i| format!("{{_id: {i}, name: 'n{i}', address: {{city: 'c{i}'}}}}"))
        .collect();
    s.send_line(format!("db.people.insertMany([{}])", docs.join(", ")))
        .unwrap();
    s.expect("inserted 25 documents").unwrap();
    s.expect(PROMPT).unwrap();

    // Tab completes the collection name, then a method.
    s.send("db.peo\t").unwrap();
    s.expect("db.people.").unwrap();
    s.send("insertM\t").unwrap();
    s.expect("insertMany(").unwrap();
    // Ctrl-C cancels the line being typed; the shell goes on.
    s.send(ControlCode::EndOfText).unwrap();
    s.expect(PROMPT).unwrap();
    // A pasted block (bracketed paste) runs statement by statement.
    s.send("\x1b[200~db.people.countDocuments({_id: {$lt: 2}})\rshow collections\r\x1b[201~\r")
        .unwrap();
    s.expect("\r\n2\r\npeople\r\n").unwrap();
    s.expect(PROMPT).unwrap();
    // Lines typed ahead while a statement runs are kept.
    s.send(
        "db.people.countDocuments({_id: {$lt: 3}})\rdb.people.countDocuments({_id: {$lt: 4}})\r",
    )
    .unwrap();
    s.expect("\r\n3\r\n").unwrap();
    s.expect("\r\n4\r\n").unwrap();
    s.expect(PROMPT).unwrap();
    // Field paths seen in the collection: Tab completes the common part,
    // a second Tab lists the choices.
    s.send("db.people.find({addr\t").unwrap();
    s.expect("address").unwrap();
    s.send("\t").unwrap();
    s.expect("address.city").unwrap();
    s.send(".city: 'c3'})\r").unwrap();
    s.expect("\"_id\": 3").unwrap();
    s.expect(PROMPT).unwrap();

    // Paging: 20, then `it` for the last 5.
    s.send_line(".mode jsonl").unwrap();
    s.expect(PROMPT).unwrap();
    s.send_line("db.people.find()").unwrap();
    s.expect("{\"_id\":19,").unwrap();
    s.expect("Type \"it\" for more").unwrap();
    s.expect(PROMPT).unwrap();
    s.send_line("it").unwrap();
    let rest = s.expect("{\"_id\":24,").unwrap();
    let rest = String::from_utf8_lossy(rest.before()).to_string();
    assert!(rest.contains("{\"_id\":20,"), "{rest}");
    assert!(!rest.contains("{\"_id\":19,"), "{rest}");
    s.expect(PROMPT).unwrap();
    s.send_line("it").unwrap();
    s.expect("no more results").unwrap();
    s.expect(PROMPT).unwrap();

    // A statement continues until its brackets close.
    s.send_line("db.people.countDocuments({").unwrap();
    s.send_line("  _id: {$lt: 7}})").unwrap();
    s.expect("\r\n7\r\n").unwrap();
    s.expect(PROMPT).unwrap();

    // The cancelled insertMany( did not run.
    s.send_line("db.people.countDocuments()").unwrap();
    s.expect("\r\n25\r\n").unwrap();
    s.expect(PROMPT).unwrap();

    // Ctrl-D leaves.
    s.send(ControlCode::EndOfTransmission).unwrap();
    s.expect(expectrl::Eof).unwrap();

    // The history is kept in the user's data directory ...
    let hist = std::fs::read_to_string(home.join("data/cairn/history")).unwrap();
    assert!(hist.contains("db.people.countDocuments()"), "{hist}");

    // ... and the Up arrow recalls the last statement in a new session.
    let mut s = shell(&db, &home);
    s.send("\x1b[A").unwrap();
    s.expect("db.people.countDocuments()").unwrap();
    s.send("\r").unwrap();
    s.expect("\r\n25\r\n").unwrap();
    s.expect(PROMPT).unwrap();
    s.send_line(".quit").unwrap();
    s.expect(expectrl::Eof).unwrap();
}

#[test]
fn ctrl_c_interrupts_a_long_listing_and_colours_show_on_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.cairn");
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let src = dir.path().join("big.jsonl");
    let lines: Vec<String> = (0..50_000)
        .map(|i| format!("{{\"_id\":{i},\"pad\":\"{}\"}}", "x".repeat(40)))
        .collect();
    std::fs::write(&src, lines.join("\n")).unwrap();

    let mut s = shell(&db, &home);
    s.send_line(format!(".import {} big", src.display()))
        .unwrap();
    s.expect("imported 50000 documents").unwrap();
    s.expect(PROMPT).unwrap();
    s.send_line(".pagesize 0").unwrap();
    s.expect(PROMPT).unwrap();
    s.send_line(".mode jsonl").unwrap();
    s.expect(PROMPT).unwrap();
    // Every document, unpaged: the terminal's buffer fills while this test
    // does not read, so the listing is still running when Ctrl-C comes.
    s.send_line("db.big.find()").unwrap();
    s.expect("{\"_id\":100,").unwrap();
    s.send(ControlCode::EndOfText).unwrap();
    let seen = s.expect("error: interrupted").unwrap();
    let seen = String::from_utf8_lossy(seen.before()).to_string();
    assert!(
        !seen.contains("{\"_id\":49999,"),
        "the listing ran to its end"
    );
    s.expect(PROMPT).unwrap();
    // The shell goes on.
    s.send_line("db.big.countDocuments()").unwrap();
    s.expect("\r\n50000\r\n").unwrap();
    s.expect(PROMPT).unwrap();
    s.send(ControlCode::EndOfTransmission).unwrap();
    s.expect(expectrl::Eof).unwrap();

    // Without NO_COLOR, JSON on a terminal is coloured (keys in cyan).
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cairn"));
    cmd.arg("shell")
        .arg(&db)
        .env("HOME", &home)
        .env("XDG_DATA_HOME", home.join("data"))
        .env_remove("NO_COLOR")
        .env("TERM", "xterm");
    let mut s = Session::spawn(cmd).unwrap();
    s.set_expect_timeout(Some(Duration::from_secs(10)));
    s.expect(PROMPT).unwrap();
    s.send_line("db.big.findOne({_id: 7})").unwrap();
    s.expect("\x1b[36m\"_id\"\x1b[0m: \x1b[33m7\x1b[0m")
        .unwrap();
    s.expect(PROMPT).unwrap();
    s.send_line(".quit").unwrap();
    s.expect(expectrl::Eof).unwrap();
}

/// On an etcd cluster `.begin … .commit` is one optimistic etcd `Txn`:
/// when another client changes what the transaction read before
/// `.commit`, the commit writes nothing and says to run it again (the
/// other client's write stands); the shell goes on.
#[test]
fn a_conflicting_commit_on_etcd_writes_nothing_and_says_so() {
    use cairndb::document::Document;
    use serde_json::json;
    let Some(cluster) = cairndb_etcd::testing::cluster_or_skip(
        "a_conflicting_commit_on_etcd_writes_nothing_and_says_so",
    )
    .expect("start a 3-member etcd cluster") else {
        return;
    };
    let url = cluster.url("conflict");
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let mut s = shell(Path::new(&url), &home);
    s.send_line("db.c.insertOne({_id: 1, n: 0})").unwrap();
    s.expect("inserted 1 document").unwrap();
    s.send_line(".begin").unwrap();
    s.expect("transaction open").unwrap();
    s.send_line("db.c.updateOne({_id: 1}, {$inc: {n: 1}})")
        .unwrap();
    s.expect("matched 1, modified 1").unwrap();
    // Another client changes the document the transaction read.
    let other = cairndb_etcd::EtcdDatabase::connect(&url).unwrap();
    other
        .collection::<Document>("c")
        .update_one(
            json!({"_id": 1}),
            json!({"$set": {"n": 10}}),
            Default::default(),
        )
        .unwrap();
    s.send_line(".commit").unwrap();
    s.expect("the transaction was not committed").unwrap();
    s.expect("run it again").unwrap();
    s.expect(PROMPT).unwrap();
    s.send_line("db.c.countDocuments({n: 10})").unwrap();
    s.expect("\r\n1\r\n").unwrap();
    s.send(ControlCode::EndOfTransmission).unwrap();
    let doc = other
        .collection::<Document>("c")
        .find_one(json!({"_id": 1}))
        .unwrap()
        .unwrap();
    assert_eq!(doc.get("n"), Some(&cairndb::document::Value::from(10)));
}
