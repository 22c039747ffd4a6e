//! End-to-end tests of the `cairn` binary: exit codes and output of every
//! command on its success and failure paths.

use std::cell::Cell;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{PoisonError, RwLock, RwLockReadGuard};

use cairndb::{Database, ReadableTable, TableDefinition, Value};

const BYTES: TableDefinition<&[u8], &[u8]> = TableDefinition::new("bin");
const STRS: TableDefinition<&str, &str> = TableDefinition::new("names");
const NUMS: TableDefinition<u64, &str> = TableDefinition::new("nums");
const PAIRS: TableDefinition<(u64, u64), (u64, u64)> = TableDefinition::new("pairs");
const EMPTY: TableDefinition<(u32, &str), bool> = TableDefinition::new("empty");

/// A child forked by one test thread holds copies of every file the test
/// process has open until it execs, and a copy of a database file keeps the
/// file's lock: a `cairn` run just after a test closed its own handle could
/// find the file still locked. So no child is forked while another thread
/// holds a database open: handles ([`Db`]) hold this lock for reading, and
/// [`spawn`] takes it for writing.
static FORK: RwLock<()> = RwLock::new(());

thread_local! {
    /// How many [`Db`] handles this thread holds.
    static HELD: Cell<usize> = const { Cell::new(0) };
}

/// This thread's share of [`FORK`] while it holds a database open.
struct Held {
    _guard: Option<RwLockReadGuard<'static, ()>>,
}

impl Held {
    fn acquire() -> Held {
        let guard = (HELD.get() == 0).then(|| FORK.read().unwrap_or_else(PoisonError::into_inner));
        HELD.set(HELD.get() + 1);
        Held { _guard: guard }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        HELD.set(HELD.get() - 1);
    }
}

/// A database opened by the test process (see [`FORK`]).
struct Db {
    db: Database,
    // Dropped after `db`.
    _held: Held,
}

impl Db {
    fn with(
        open: impl FnOnce() -> cairndb::Result<Database, cairndb::CoreError>,
    ) -> cairndb::Result<Db, cairndb::CoreError> {
        let held = Held::acquire();
        Ok(Db {
            db: open()?,
            _held: held,
        })
    }

    fn create(path: &Path) -> cairndb::Result<Db, cairndb::CoreError> {
        Db::with(|| Database::create(path))
    }

    fn open(path: &Path) -> cairndb::Result<Db, cairndb::CoreError> {
        Db::with(|| Database::open(path))
    }

    fn open_read_only(path: &Path) -> cairndb::Result<Db, cairndb::CoreError> {
        Db::with(|| Database::open_read_only(path))
    }

    fn close(self) -> cairndb::Result<(), cairndb::CoreError> {
        self.db.close()
    }
}

impl std::ops::Deref for Db {
    type Target = Database;
    fn deref(&self) -> &Database {
        &self.db
    }
}

/// Starts `cmd`, with no database open in another thread (see [`FORK`]). A
/// thread that holds one itself already keeps the others from opening any.
fn spawn(cmd: &mut Command) -> Child {
    let _excl = (HELD.get() == 0).then(|| FORK.write().unwrap_or_else(PoisonError::into_inner));
    cmd.spawn().expect("spawn cairn")
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
    raw_stdout: Vec<u8>,
}

fn finish(out: Output) -> Run {
    Run {
        // A signal (e.g. an abort) has no code: -1 fails every expectation.
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        raw_stdout: out.stdout,
    }
}

fn cairn_with_input(args: &[&str], input: &[u8]) -> Run {
    let mut child = spawn(
        Command::new(env!("CARGO_BIN_EXE_cairn"))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    );
    let mut stdin = child.stdin.take().expect("stdin");
    // Write on a thread: a failing command may exit before reading it all.
    let input = input.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().expect("wait for cairn");
    writer.join().expect("writer thread");
    let run = finish(out);
    assert!(
        !run.stderr.contains("panicked"),
        "cairn panicked: {}",
        run.stderr
    );
    run
}

fn cairn(args: &[&str]) -> Run {
    cairn_with_input(args, b"")
}

fn expect(run: &Run, code: i32, what: &str) {
    assert_eq!(
        run.code, code,
        "{what}: expected exit {code}, got {}\nstdout: {}\nstderr: {}",
        run.code, run.stdout, run.stderr
    );
}

fn p(path: &Path) -> &str {
    path.to_str().expect("UTF-8 temp path")
}

fn scratch() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("test.cairn");
    (dir, path)
}

/// A database with a few `&[u8]` entries written by `cairn put`.
fn small_db() -> (tempfile::TempDir, PathBuf) {
    let (dir, path) = scratch();
    for (t, k, v) in [
        ("users", "ada", "1815"),
        ("users", "bob", "7"),
        ("cfg", "x", "y"),
    ] {
        expect(&cairn(&["put", p(&path), t, k, v]), 0, "put");
    }
    (dir, path)
}

/// A database with `n` entries of ~50-byte values in table `t`, so it
/// spans many pages.
fn big_db(n: usize) -> (tempfile::TempDir, PathBuf) {
    let (dir, path) = scratch();
    let mut input = String::new();
    for i in 0..n {
        input.push_str(&format!(
            "{{\"table\":\"t\",\"key\":\"key{i:06}\",\"value\":\"{}\"}}\n",
            "v".repeat(50)
        ));
    }
    expect(
        &cairn_with_input(&["load", p(&path)], input.as_bytes()),
        0,
        "load",
    );
    (dir, path)
}

#[test]
fn put_get_del() {
    let (_dir, path) = small_db();
    let db = p(&path);
    let r = cairn(&["get", db, "users", "ada"]);
    expect(&r, 0, "get existing");
    assert_eq!(r.stdout, "1815\n");

    // Overwrite, and values starting with '-' are values, not flags.
    expect(&cairn(&["put", db, "users", "ada", "-1"]), 0, "overwrite");
    assert_eq!(cairn(&["get", db, "users", "ada"]).stdout, "-1\n");

    let r = cairn(&["get", db, "users", "zed"]);
    expect(&r, 1, "get missing key");
    assert!(r.stderr.starts_with("cairn: "), "{}", r.stderr);
    assert!(r.stderr.contains("not found"), "{}", r.stderr);
    assert!(r.stdout.is_empty());

    let r = cairn(&["get", db, "nope", "ada"]);
    expect(&r, 1, "get missing table");
    assert!(r.stderr.contains("\"nope\" does not exist"), "{}", r.stderr);

    expect(&cairn(&["del", db, "users", "ada"]), 0, "del existing");
    expect(&cairn(&["get", db, "users", "ada"]), 1, "get deleted");
    let r = cairn(&["del", db, "users", "ada"]);
    expect(&r, 1, "del missing key");
    assert!(r.stderr.contains("not found"), "{}", r.stderr);
    expect(&cairn(&["del", db, "nope", "ada"]), 1, "del missing table");
    // The failed del did not create the table.
    let r = cairn(&["tables", db]);
    assert!(!r.stdout.contains("nope"), "{}", r.stdout);
    assert_eq!(cairn(&["get", db, "users", "bob"]).stdout, "7\n");
}

#[test]
fn key_too_large_is_a_user_error() {
    let (_dir, path) = small_db();
    let db = p(&path);
    let long = "k".repeat(5000);
    for cmd in ["put", "get", "del"] {
        let args: Vec<&str> = if cmd == "put" {
            vec![cmd, db, "users", &long, "v"]
        } else {
            vec![cmd, db, "users", &long]
        };
        let r = cairn(&args);
        expect(&r, 1, cmd);
        assert!(
            r.stderr.contains("exceeds the maximum"),
            "{cmd}: {}",
            r.stderr
        );
    }
}

#[test]
fn missing_file_exits_1_for_every_command() {
    let (_dir, path) = scratch();
    let db = p(&path);
    let cmds: [&[&str]; 9] = [
        &["info", db],
        &["stats", db],
        &["stats", db, "--json"],
        &["tables", db],
        &["check", db],
        &["compact", db],
        &["get", db, "t", "k"],
        &["del", db, "t", "k"],
        &["dump", db],
    ];
    for args in cmds {
        let r = cairn(args);
        expect(&r, 1, &args.join(" "));
        assert!(r.stderr.contains("does not exist"), "{}", r.stderr);
    }
    // None of them created the file.
    assert!(!path.exists());
}

#[test]
fn usage_errors_exit_1_and_help_exits_0() {
    expect(&cairn(&[]), 1, "no command");
    expect(&cairn(&["frobnicate"]), 1, "unknown command");
    expect(&cairn(&["get", "only-a-path"]), 1, "missing arguments");
    expect(&cairn(&["stats", "x", "--bogus"]), 1, "unknown flag");
    let r = cairn(&["--help"]);
    expect(&r, 0, "--help");
    assert!(r.stdout.contains("check"), "{}", r.stdout);
}

#[test]
fn info_stats_tables() {
    let (_dir, path) = small_db();
    let db = p(&path);

    let r = cairn(&["info", db]);
    expect(&r, 0, "info");
    for want in [
        "page size:       4096",
        "format version:  3",
        "tables:          2",
        "closed cleanly",
        "fell back:       no",
    ] {
        assert!(r.stdout.contains(want), "missing {want:?} in\n{}", r.stdout);
    }

    let r = cairn(&["stats", db]);
    expect(&r, 0, "stats");
    assert!(r.stdout.contains("fill factor"), "{}", r.stdout);
    assert!(r.stdout.contains("users"), "{}", r.stdout);

    let r = cairn(&["stats", db, "--json"]);
    expect(&r, 0, "stats --json");
    let v: serde_json::Value = serde_json::from_str(&r.stdout).expect("stats --json is JSON");
    assert_eq!(v["page_size"], 4096);
    assert!(v["file_bytes"].as_u64().unwrap_or(0) > 0);
    assert!(v["pages"]["leaf"].as_u64().unwrap_or(0) >= 2);
    let tables = v["tables"].as_array().expect("tables array");
    assert_eq!(tables.len(), 2);
    assert_eq!(tables[1]["name"], "users");
    assert_eq!(tables[1]["entries"], 2);
    assert_eq!(tables[1]["depth"], 1);

    let r = cairn(&["tables", db]);
    expect(&r, 0, "tables");
    assert_eq!(r.stdout, "cfg\t1\nusers\t2\n");
}

#[test]
fn compact_shrinks_and_reports_sizes() {
    let (_dir, path) = big_db(3000);
    let db = p(&path);
    let before = std::fs::metadata(&path).expect("metadata").len();
    let r = cairn(&["compact", db]);
    expect(&r, 0, "compact");
    let after = std::fs::metadata(&path).expect("metadata").len();
    assert!(
        r.stdout.starts_with(&format!("{before} → {after} bytes (")),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("KiB"), "{}", r.stdout);
    assert_eq!(cairn(&["check", db]).stdout, "ok\n");
    assert_eq!(cairn(&["tables", db]).stdout, "t\t3000\n");
}

#[test]
fn check_healthy_file_prints_ok() {
    let (_dir, path) = big_db(3000);
    let r = cairn(&["check", p(&path)]);
    expect(&r, 0, "check");
    assert_eq!(r.stdout, "ok\n");
}

/// Flips one bit in `path` at `offset`.
fn flip(path: &Path, offset: u64) {
    let mut bytes = std::fs::read(path).expect("read");
    bytes[offset as usize] ^= 0x10;
    std::fs::write(path, bytes).expect("write");
}

#[test]
fn check_flipped_byte_in_each_page_exits_0_or_2_and_names_the_page() {
    let (dir, path) = big_db(3000);
    let r = cairn(&["stats", p(&path), "--json"]);
    expect(&r, 0, "stats");
    let v: serde_json::Value = serde_json::from_str(&r.stdout).expect("JSON");
    let pages = v["pages"]["total"].as_u64().expect("page count");
    let page_size = v["page_size"].as_u64().expect("page size");
    assert!(pages > 40, "want a multi-page file, got {pages} pages");
    let copy = dir.path().join("flipped.cairn");
    let mut detected = 0;
    let mut named = 0;
    for page in 3..pages {
        std::fs::copy(&path, &copy).expect("copy");
        flip(&copy, page * page_size + page_size / 2);
        let r = cairn(&["check", p(&copy)]);
        assert!(
            r.code == 0 || r.code == 2,
            "page {page}: exit {}\n{}{}",
            r.code,
            r.stdout,
            r.stderr
        );
        if r.code == 2 {
            detected += 1;
            let text = format!("{}{}", r.stdout, r.stderr);
            assert!(text.contains("corruption"), "{text}");
            assert!(text.contains("file offset"), "{text}");
            if text.contains(&format!(
                "at page {page} (file offset {})",
                page * page_size
            )) {
                named += 1;
            }
        }
    }
    // Every leaf holds entries: most flips must be found, at the right page.
    assert!(detected >= pages / 2, "only {detected} of {pages} detected");
    assert!(named >= 1, "no report named the flipped page");
}

#[test]
fn check_leaf_flip_reports_problem_lines() {
    let (_dir, path) = big_db(3000);
    // Page 3 is the first data page: a leaf of the first load batch.
    flip(&path, 3 * 4096 + 2000);
    let r = cairn(&["check", p(&path)]);
    expect(&r, 2, "check flipped leaf");
    let first = r.stdout.lines().next().unwrap_or("");
    assert!(
        first.starts_with("corruption in TreePage at page 3 (file offset 12288)"),
        "{}",
        r.stdout
    );
    assert!(r.stderr.contains("problem(s) found"), "{}", r.stderr);
    // Reading commands hit the same page and exit 2 too.
    let r = cairn(&["dump", p(&path)]);
    expect(&r, 2, "dump of a corrupt table");
    assert!(r.stderr.contains("corruption"), "{}", r.stderr);
    expect(&cairn(&["stats", p(&path)]), 2, "stats of a corrupt file");
}

#[test]
fn check_damaged_header_exits_2() {
    let (_dir, path) = small_db();
    // The page-size field of the header: its checksum no longer matches.
    flip(&path, 12);
    let r = cairn(&["check", p(&path)]);
    expect(&r, 2, "damaged header");
    assert!(r.stderr.contains("FileHeader"), "{}", r.stderr);
}

#[test]
fn check_truncated_file_exits_2() {
    let (_dir, path) = big_db(3000);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("open");
    f.set_len(10 * 4096).expect("truncate");
    drop(f);
    let r = cairn(&["check", p(&path)]);
    expect(&r, 2, "truncated file");
    assert!(r.stderr.contains("corruption"), "{}", r.stderr);
}

#[test]
fn check_garbage_files_never_panic() {
    let (dir, path) = big_db(500);
    let good = std::fs::read(&path).expect("read");
    let garbage = dir.path().join("garbage");
    // A real header followed by noise; and noise of many lengths.
    let mut seed = 0x9e3779b97f4a7c15u64;
    let mut noise = |n: usize| -> Vec<u8> {
        (0..n)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect()
    };
    // (file contents, expected exit): anything with the real header is a
    // damaged database (2); noise without the magic bytes is not one (1).
    let mut cases: Vec<(Vec<u8>, i32)> = Vec::new();
    for len in [1usize, 31, 32, 4096, 3 * 4096, 8 * 4096] {
        let mut f = good[..32].to_vec();
        f.extend(noise(len));
        cases.push((f, 2));
        let mut f = good[..3 * 4096].to_vec();
        f.extend(noise(len));
        cases.push((f, 2));
        cases.push((noise(len), 1));
    }
    // Full length: real header and commit slots, every data page noise.
    let mut f = good[..3 * 4096].to_vec();
    f.extend(noise(good.len() - 3 * 4096));
    cases.push((f, 2));
    for (i, (bytes, code)) in cases.iter().enumerate() {
        std::fs::write(&garbage, bytes).expect("write");
        for cmd in ["check", "info", "dump"] {
            let r = cairn(&[cmd, p(&garbage)]);
            expect(
                &r,
                *code,
                &format!("case {i} ({} bytes), {cmd}", bytes.len()),
            );
            assert!(r.stderr.starts_with("cairn: "), "{}", r.stderr);
        }
    }
}

#[test]
fn check_damaged_magic_cut_header_and_skipped_slot_exit_2() {
    let (dir, path) = small_db();
    let good = std::fs::read(&path).expect("read");
    let copy = dir.path().join("damaged.cairn");
    // One wrong magic byte: a damaged header, not "not a database".
    let mut b = good.clone();
    b[2] ^= 0x01;
    std::fs::write(&copy, &b).expect("write");
    let r = cairn(&["check", p(&copy)]);
    expect(&r, 2, "check with a damaged magic byte");
    assert!(
        r.stderr.contains("at page 0 (file offset 0)"),
        "{}",
        r.stderr
    );
    // Cut inside the header: a truncated database.
    std::fs::write(&copy, &good[..20]).expect("write");
    let r = cairn(&["check", p(&copy)]);
    expect(&r, 2, "check of a file cut inside its header");
    assert!(r.stderr.contains("FileLength at page 0"), "{}", r.stderr);
    // The newest commit slot damaged: the file opens from the other slot,
    // but check reports the skipped slot and exits 2.
    let newest = (1..=2usize)
        .max_by_key(|&s| {
            let o = s * 4096 + 8;
            u64::from_le_bytes(good[o..o + 8].try_into().expect("8 bytes"))
        })
        .expect("a slot");
    let mut b = good.clone();
    b[newest * 4096 + 30] ^= 0x10;
    std::fs::write(&copy, &b).expect("write");
    let r = cairn(&["check", p(&copy)]);
    expect(&r, 2, "check with a damaged commit slot");
    assert!(
        r.stdout.contains(&format!(
            "CommitSlot at page {newest} (file offset {})",
            newest * 4096
        )),
        "{}",
        r.stdout
    );
    assert!(
        r.stderr.contains("recovery skipped a commit slot"),
        "{}",
        r.stderr
    );
    expect(
        &cairn(&["get", p(&copy), "users", "ada"]),
        0,
        "get after a fallback",
    );
}

#[test]
fn check_on_non_database_exits_1() {
    let (dir, _) = scratch();
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "hello, this is not a database\n".repeat(300)).expect("write");
    let r = cairn(&["check", p(&text)]);
    expect(&r, 1, "check text file");
    assert!(
        r.stderr.contains("is not a CairnDB database"),
        "{}",
        r.stderr
    );
    let empty = dir.path().join("empty");
    std::fs::write(&empty, "").expect("write");
    expect(&cairn(&["check", p(&empty)]), 1, "check empty file");
    // put refuses to write into a file that is not a database.
    expect(
        &cairn(&["put", p(&text), "t", "k", "v"]),
        1,
        "put text file",
    );
    let after = std::fs::read_to_string(&text).expect("read");
    assert!(after.starts_with("hello"));
}

#[test]
fn locked_file_exits_1_and_says_so() {
    let (_dir, path) = small_db();
    let holder = Db::create(&path).expect("open in test process");
    // A second writer is refused...
    for args in [
        vec!["put", p(&path), "users", "k", "v"],
        vec!["compact", p(&path)],
    ] {
        let r = cairn(&args);
        expect(&r, 1, &args.join(" "));
        assert!(r.stderr.contains("locked"), "{}", r.stderr);
    }
    // ...readers open beside the writer (in another process) and see its
    // commits.
    let r = cairn(&["get", p(&path), "users", "ada"]);
    expect(&r, 0, "get beside a writer");
    let r = cairn(&["check", p(&path)]);
    expect(&r, 0, "check beside a writer");
    // `info` says the file is live, not that it crashed.
    let r = cairn(&["info", p(&path)]);
    expect(&r, 0, "info beside a writer");
    assert!(
        r.stdout.contains("open for writing by another handle") && !r.stdout.contains("not closed"),
        "{}",
        r.stdout
    );
    drop(holder);
    expect(
        &cairn(&["put", p(&path), "users", "k", "v"]),
        0,
        "put after close",
    );
}

/// A database with a `&[u8]` table holding non-UTF-8 bytes, a `&str` table
/// and an empty `&str`/`&[u8]` table, written by the library.
fn mixed_db() -> (tempfile::TempDir, PathBuf) {
    let (dir, path) = scratch();
    let db = Db::create(&path).expect("create");
    let txn = db.begin_write().expect("begin");
    {
        let mut t = txn.open_table(BYTES).expect("open bin");
        t.insert(&[0xff, 0x00, 0x80][..], &[0xc3, 0x28][..])
            .expect("insert");
        t.insert(&b"plain"[..], &[0x00, 0xfe][..]).expect("insert");
        t.insert(&[0xc3, 0xa9][..], &b"\"quoted\"\n\ttab"[..])
            .expect("insert");
        t.insert(&b""[..], &b""[..]).expect("insert");
        let mut s = txn.open_table(STRS).expect("open names");
        s.insert("zoë", "ünïcödé ✓").expect("insert");
        s.insert("a", "b").expect("insert");
        txn.open_table(TableDefinition::<&str, &[u8]>::new("void"))
            .expect("open void");
    }
    txn.commit().expect("commit");
    db.close().expect("close");
    (dir, path)
}

#[test]
fn dump_load_round_trip_with_binary_data() {
    let (dir, path) = mixed_db();
    let r = cairn(&["dump", p(&path)]);
    expect(&r, 0, "dump");
    let dump = r.raw_stdout.clone();
    let lines: Vec<&str> = r.stdout.lines().collect();
    // A header, the table order, each table's schema line, then its entries
    // in key order (bytes), then the end line with the counts.
    assert_eq!(
        lines,
        [
            r#"{"cairn_dump":1,"format_version":3,"page_size":4096}"#,
            r#"{"table":"bin","key_type":"&[u8]","value_type":"&[u8]"}"#,
            r#"{"table":"bin","key":"","value":""}"#,
            r#"{"table":"bin","key":"plain","value_b64":"AP4="}"#,
            r#"{"table":"bin","key":"é","value":"\"quoted\"\n\ttab"}"#,
            r#"{"table":"bin","key_b64":"/wCA","value_b64":"wyg="}"#,
            r#"{"table":"names","key_type":"&str","value_type":"&str"}"#,
            r#"{"table":"names","key":"a","value":"b"}"#,
            r#"{"table":"names","key":"zoë","value":"ünïcödé ✓"}"#,
            r#"{"table":"void","key_type":"&str","value_type":"&[u8]"}"#,
            r#"{"cairn_dump_end":{"tables":3,"entries":6}}"#,
        ],
        "{}",
        r.stdout
    );

    let copy = dir.path().join("copy.cairn");
    let r = cairn_with_input(&["load", p(&copy)], &dump);
    expect(&r, 0, "load");
    let r = cairn(&["dump", p(&copy)]);
    expect(&r, 0, "dump of the copy");
    assert_eq!(r.raw_stdout, dump, "round trip changed the dump");

    // The bytes themselves, read back through the library.
    let db = Db::open_read_only(&copy).expect("open copy");
    let read = db.begin_read().expect("read");
    let t = read.open_table(BYTES).expect("bin table");
    let v = t
        .get(&[0xff, 0x00, 0x80][..])
        .expect("get")
        .expect("present");
    assert_eq!(v.value(), [0xc3, 0x28]);
    assert_eq!(t.len(), 4);
    // Declared types and the empty table survived.
    for (name, k, v) in [
        ("bin", "&[u8]", "&[u8]"),
        ("names", "&str", "&str"),
        ("void", "&str", "&[u8]"),
    ] {
        assert_eq!(
            read.table_types(name).expect("types"),
            Some((k.to_string(), v.to_string())),
            "{name}"
        );
    }
    assert_eq!(read.list_tables().expect("list"), ["bin", "names", "void"]);
    let names = read.open_table(STRS).expect("names keeps &str types");
    assert_eq!(
        names.get("zoë").expect("get").expect("present").value(),
        "ünïcödé ✓"
    );

    let r = cairn(&["dump", p(&path), "--table", "names"]);
    expect(&r, 0, "dump --table");
    assert_eq!(r.stdout.lines().count(), 3);
    let r = cairn(&["dump", p(&path), "--table", "void"]);
    expect(&r, 0, "dump --table of an empty table");
    assert_eq!(
        r.stdout,
        "{\"table\":\"void\",\"key_type\":\"&str\",\"value_type\":\"&[u8]\"}\n"
    );
    let r = cairn(&["dump", p(&path), "--table", "nope"]);
    expect(&r, 1, "dump --table missing");
    assert!(r.stderr.contains("does not exist"), "{}", r.stderr);
}

#[test]
fn str_tables_keep_their_types() {
    let (_dir, path) = mixed_db();
    let db = p(&path);
    let r = cairn(&["get", db, "names", "zoë"]);
    expect(&r, 0, "get from &str table");
    assert_eq!(r.stdout, "ünïcödé ✓\n");
    expect(&cairn(&["put", db, "names", "new", "value"]), 0, "put");
    expect(&cairn(&["del", db, "names", "a"]), 0, "del");
    let d = Db::open_read_only(&path).expect("open");
    let read = d.begin_read().expect("read");
    let t = read.open_table(STRS).expect("still a &str table");
    assert_eq!(
        t.get("new").expect("get").expect("present").value(),
        "value"
    );
    assert!(t.get("a").expect("get").is_none());
    // Binary keys are found by get only if given exactly; "plain" is text.
    let r = cairn(&["get", db, "bin", "plain"]);
    expect(&r, 0, "get binary value");
    assert_eq!(r.raw_stdout, [0x00, 0xfe, b'\n']);
}

/// A database with tables of non-byte types written by the library: `nums`
/// (u64/&str, 10 entries), `pairs` ((u64,u64)/(u64,u64), 3 entries),
/// `empty` ((u32,&str)/bool) and `names` (&str/&str, 1 entry).
fn typed_db() -> (tempfile::TempDir, PathBuf) {
    let (dir, path) = scratch();
    let db = Db::create(&path).expect("create");
    let txn = db.begin_write().expect("begin");
    {
        let mut t = txn.open_table(NUMS).expect("open nums");
        for i in 0..10u64 {
            t.insert(i, "x").expect("insert");
        }
        let mut t = txn.open_table(PAIRS).expect("open pairs");
        for i in 0..3u64 {
            t.insert((i, u64::MAX - i), (i * 1000, 0xff00 + i))
                .expect("insert");
        }
        txn.open_table(EMPTY).expect("open empty");
        txn.open_table(STRS)
            .expect("open names")
            .insert("k", "v")
            .expect("insert");
    }
    txn.commit().expect("commit");
    db.close().expect("close");
    (dir, path)
}

/// The bytes of the `key` or `key_b64` (`field` = "key") field of a dump
/// line.
fn dump_bytes(line: &serde_json::Value, field: &str) -> Vec<u8> {
    use base64::Engine as _;
    if let Some(s) = line[field].as_str() {
        assert!(line.get(format!("{field}_b64")).is_none(), "{line}");
        return s.as_bytes().to_vec();
    }
    let b = line[format!("{field}_b64")]
        .as_str()
        .unwrap_or_else(|| panic!("no {field} in {line}"));
    // Base64 only for bytes that are not UTF-8.
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b)
        .expect("base64");
    assert!(std::str::from_utf8(&bytes).is_err(), "{line}");
    bytes
}

#[test]
fn tables_of_other_types_are_listed_dumped_and_loaded() {
    let (dir, path) = typed_db();
    let db = p(&path);
    let r = cairn(&["tables", db]);
    expect(&r, 0, "tables");
    assert_eq!(r.stdout, "empty\t0\nnames\t1\nnums\t10\npairs\t3\n");

    let r = cairn(&["dump", db]);
    expect(&r, 0, "dump with u64 and tuple tables");
    let dump = r.raw_stdout.clone();
    let mut lines: Vec<serde_json::Value> = r
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    // Header and end lines around the tables.
    assert_eq!(lines[0]["cairn_dump"], 1, "{}", r.stdout);
    assert_eq!(
        lines.pop().expect("end line")["cairn_dump_end"],
        serde_json::json!({"tables": 4, "entries": 14})
    );
    lines.remove(0);
    assert_eq!(lines.len(), 4 + 1 + 10 + 3, "{}", r.stdout);
    let schema = |l: &serde_json::Value| {
        (
            l["table"].as_str().unwrap_or("").to_string(),
            l["key_type"].as_str().unwrap_or("").to_string(),
            l["value_type"].as_str().unwrap_or("").to_string(),
        )
    };
    let s = |t: &str, k: &str, v: &str| (t.to_string(), k.to_string(), v.to_string());
    assert_eq!(schema(&lines[0]), s("empty", "(u32,&str)", "bool"));
    assert_eq!(schema(&lines[1]), s("names", "&str", "&str"));
    assert_eq!(schema(&lines[3]), s("nums", "u64", "&str"));
    assert_eq!(schema(&lines[14]), s("pairs", "(u64,u64)", "(u64,u64)"));
    // Schema lines hold no entry.
    for i in [0, 1, 3, 14] {
        let o = lines[i].as_object().expect("object");
        assert_eq!(o.len(), 3, "{}", lines[i]);
    }
    // The stored encodings of the typed keys and values, in key order.
    for i in 0..10u64 {
        let l = &lines[4 + i as usize];
        assert_eq!(l["table"], "nums");
        assert_eq!(dump_bytes(l, "key"), <u64 as Value>::as_bytes(&i));
        assert_eq!(dump_bytes(l, "value"), b"x");
    }
    for i in 0..3u64 {
        let l = &lines[15 + i as usize];
        assert_eq!(l["table"], "pairs");
        assert_eq!(
            dump_bytes(l, "key"),
            <(u64, u64) as Value>::as_bytes(&(i, u64::MAX - i))
        );
        assert_eq!(
            dump_bytes(l, "value"),
            <(u64, u64) as Value>::as_bytes(&(i * 1000, 0xff00 + i))
        );
    }
    // Small u64s are valid UTF-8 (shown as text), large ones are not.
    assert!(lines[4]["key"].is_string(), "{}", lines[4]);
    assert!(lines[15]["key_b64"].is_string(), "{}", lines[15]);

    // Load into a new file: same types, same entries, same dump.
    let copy = dir.path().join("copy.cairn");
    expect(&cairn_with_input(&["load", p(&copy)], &dump), 0, "load");
    let r = cairn(&["dump", p(&copy)]);
    expect(&r, 0, "dump of the copy");
    assert_eq!(r.raw_stdout, dump, "round trip changed the dump");
    let d = Db::open_read_only(&copy).expect("open copy");
    let read = d.begin_read().expect("read");
    for (name, k, v) in [
        ("empty", "(u32,&str)", "bool"),
        ("names", "&str", "&str"),
        ("nums", "u64", "&str"),
        ("pairs", "(u64,u64)", "(u64,u64)"),
    ] {
        assert_eq!(
            read.table_types(name).expect("types"),
            Some((k.to_string(), v.to_string())),
            "{name}"
        );
    }
    let nums = read.open_table(NUMS).expect("typed nums");
    let all: Vec<(u64, String)> = nums
        .iter()
        .expect("iter")
        .map(|e| e.map(|(k, v)| (k.value(), v.value().to_string())))
        .collect::<Result<_, _>>()
        .expect("typed read");
    assert_eq!(
        all,
        (0..10).map(|i| (i, "x".to_string())).collect::<Vec<_>>()
    );
    let pairs = read.open_table(PAIRS).expect("typed pairs");
    let v = pairs.get((2, u64::MAX - 2)).expect("get").expect("present");
    assert_eq!(v.value(), (2000, 0xff02));
    assert!(read.open_table(EMPTY).expect("typed empty").is_empty());
}

#[test]
fn get_and_del_work_on_any_table_by_key_bytes() {
    let (_dir, path) = typed_db();
    // "12345678" is eight bytes: a valid u64 key encoding.
    let key = u64::from_be_bytes(*b"12345678");
    {
        let d = Db::open(&path).expect("open");
        let txn = d.begin_write().expect("begin");
        txn.open_table(NUMS)
            .expect("open")
            .insert(key, "found")
            .expect("insert");
        txn.commit().expect("commit");
    }
    let db = p(&path);
    let r = cairn(&["get", db, "nums", "12345678"]);
    expect(&r, 0, "get from a u64 table by key bytes");
    assert_eq!(r.stdout, "found\n");
    // "1" is one byte, not the encoding of any u64.
    let r = cairn(&["get", db, "nums", "1"]);
    expect(&r, 1, "get of a key that is not stored");
    assert!(r.stderr.contains("not found"), "{}", r.stderr);
    expect(
        &cairn(&["del", db, "nums", "12345678"]),
        0,
        "del from u64 table",
    );
    expect(&cairn(&["del", db, "nums", "12345678"]), 1, "del again");
    assert_eq!(
        cairn(&["tables", db]).stdout,
        "empty\t0\nnames\t1\nnums\t10\npairs\t3\n"
    );
    let d = Db::open_read_only(&path).expect("open");
    let read = d.begin_read().expect("read");
    let t = read.open_table(NUMS).expect("still u64/&str");
    assert!(t.get(key).expect("get").is_none());
    assert_eq!(t.len(), 10);
}

#[test]
fn put_into_a_table_of_other_types_is_refused() {
    let (_dir, path) = typed_db();
    let db = p(&path);
    for (table, types) in [
        ("nums", "u64/&str"),
        ("pairs", "(u64,u64)/(u64,u64)"),
        ("empty", "(u32,&str)/bool"),
    ] {
        let r = cairn(&["put", db, table, "1", "y"]);
        expect(&r, 1, &format!("put into {table}"));
        assert!(r.stderr.contains(types), "{}", r.stderr);
        assert!(r.stderr.contains("&[u8] or &str"), "{}", r.stderr);
    }
    // Nothing was written.
    assert_eq!(
        cairn(&["tables", db]).stdout,
        "empty\t0\nnames\t1\nnums\t10\npairs\t3\n"
    );
    // A &str table takes text.
    expect(
        &cairn(&["put", db, "names", "k2", "v2"]),
        0,
        "put into names",
    );
    let d = Db::open_read_only(&path).expect("open");
    let read = d.begin_read().expect("read");
    let t = read.open_table(STRS).expect("still &str/&str");
    assert_eq!(t.get("k2").expect("get").expect("present").value(), "v2");
}

#[test]
fn load_schema_lines_create_and_check_tables() {
    let (_dir, path) = scratch();
    let db = p(&path);
    let input = concat!(
        "{\"table\":\"s\",\"key_type\":\"&str\",\"value_type\":\"u64\"}\n",
        "{\"table\":\"s\",\"key\":\"a\",\"value_b64\":\"AAAAAAAAAAc=\"}\n",
        "{\"table\":\"e\",\"key_type\":\"u8\",\"value_type\":\"()\"}\n",
        "{\"table\":\"raw\",\"key\":\"k\",\"value\":\"v\"}\n",
        // A repeated schema line with the same types is fine.
        "{\"table\":\"raw\",\"key_type\":\"&[u8]\",\"value_type\":\"&[u8]\"}\n",
        "{\"table\":\"raw\",\"key\":\"k2\",\"value\":\"v2\"}\n",
    );
    let r = cairn_with_input(&["load", db], input.as_bytes());
    expect(&r, 0, "load with schema lines");
    assert!(
        r.stderr.contains("loaded 3 entries from 6 lines"),
        "{}",
        r.stderr
    );
    assert_eq!(cairn(&["tables", db]).stdout, "e\t0\nraw\t2\ns\t1\n");
    {
        let d = Db::open_read_only(&path).expect("open");
        let read = d.begin_read().expect("read");
        let s = read
            .open_table(TableDefinition::<&str, u64>::new("s"))
            .expect("s is &str/u64");
        assert_eq!(s.get("a").expect("get").expect("present").value(), 7);
        assert_eq!(
            read.table_types("e").expect("types"),
            Some(("u8".to_string(), "()".to_string()))
        );
    }

    // Loading again into the same file: matching schema lines are fine,
    // and entry lines go into existing tables whatever their types.
    let more = concat!(
        "{\"table\":\"e\",\"key_type\":\"u8\",\"value_type\":\"()\"}\n",
        "{\"table\":\"s\",\"key\":\"b\",\"value_b64\":\"AAAAAAAAAAg=\"}\n",
    );
    let r = cairn_with_input(&["load", db], more.as_bytes());
    expect(&r, 1, "load more without --merge");
    assert!(
        r.stderr.contains("already holds 3 table(s)"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("--merge"), "{}", r.stderr);
    expect(
        &cairn_with_input(&["load", "--merge", db], more.as_bytes()),
        0,
        "load more",
    );
    assert_eq!(cairn(&["tables", db]).stdout, "e\t0\nraw\t2\ns\t2\n");

    // A schema line whose types differ from the existing table's.
    let bad = "{\"table\":\"s\",\"key_type\":\"&[u8]\",\"value_type\":\"&[u8]\"}\n";
    let r = cairn_with_input(&["load", "--merge", db], bad.as_bytes());
    expect(&r, 1, "schema mismatch");
    assert!(r.stderr.contains("line 1: "), "{}", r.stderr);
    assert!(r.stderr.contains("&str/u64"), "{}", r.stderr);
    // ... also when the table was created by earlier lines of the same load.
    let bad = concat!(
        "{\"table\":\"new\",\"key\":\"k\",\"value\":\"v\"}\n",
        "{\"table\":\"new\",\"key_type\":\"&str\",\"value_type\":\"&str\"}\n",
    );
    let r = cairn_with_input(&["load", "--merge", db], bad.as_bytes());
    expect(&r, 1, "schema mismatch in the same load");
    assert!(r.stderr.contains("line 2: "), "{}", r.stderr);
    assert!(r.stderr.contains("&[u8]/&[u8]"), "{}", r.stderr);
    assert!(!cairn(&["tables", db]).stdout.contains("new"));

    // Keys and values of &str tables must be UTF-8.
    let bad = concat!(
        "{\"table\":\"u\",\"key_type\":\"&str\",\"value_type\":\"&[u8]\"}\n",
        "{\"table\":\"u\",\"key_b64\":\"/w==\",\"value\":\"v\"}\n",
    );
    let r = cairn_with_input(&["load", "--merge", db], bad.as_bytes());
    expect(&r, 1, "non-UTF-8 key into &str table");
    assert!(r.stderr.contains("line 2: "), "{}", r.stderr);
    assert!(r.stderr.contains("UTF-8"), "{}", r.stderr);
    expect(&cairn(&["check", db]), 0, "check");
}

#[test]
fn load_rejects_malformed_lines_with_their_number() {
    let (_dir, path) = scratch();
    let db = p(&path);
    let good = "{\"table\":\"t\",\"key\":\"a\",\"value\":\"1\"}\n";
    for (bad, why) in [
        ("not json", "not a dump entry"),
        ("{\"table\":\"t\",\"key\":\"a\"}", "needs \"value\""),
        (
            "{\"table\":\"t\",\"key\":\"a\",\"key_b64\":\"YQ==\",\"value\":\"\"}",
            "both",
        ),
        (
            "{\"table\":\"t\",\"key_b64\":\"@@\",\"value\":\"\"}",
            "base64",
        ),
        (
            "{\"table\":\"$x\",\"key\":\"a\",\"value\":\"\"}",
            "invalid table name",
        ),
        (
            "{\"table\":\"t\",\"key\":\"a\",\"value\":\"\",\"x\":1}",
            "unknown field",
        ),
        (
            "{\"table\":\"t\",\"key_type\":\"u64\"}",
            "needs both \"key_type\" and \"value_type\"",
        ),
        (
            "{\"table\":\"t\",\"key_type\":\"&[u8]\",\"value_type\":\"&[u8]\",\"key\":\"a\"}",
            "cannot hold a key or value",
        ),
        (
            "{\"table\":\"$x\",\"key_type\":\"&[u8]\",\"value_type\":\"&[u8]\"}",
            "invalid table name",
        ),
    ] {
        let input = format!("{good}\n{good}{bad}\n{good}");
        let r = cairn_with_input(&["load", db], input.as_bytes());
        expect(&r, 1, bad);
        assert!(r.stderr.contains("line 4: "), "{bad}: {}", r.stderr);
        assert!(r.stderr.contains(why), "{bad}: {}", r.stderr);
    }
    let r = cairn_with_input(&["load", db], b"{\"table\":\"t\",\"key\":\"\xff\"}\n");
    expect(&r, 1, "invalid UTF-8 line");
    assert!(r.stderr.contains("line 1: not valid UTF-8"), "{}", r.stderr);
}

#[test]
fn load_commits_in_batches_and_counts_every_line() {
    let (_dir, path) = big_db(25_001);
    let db = p(&path);
    assert_eq!(cairn(&["tables", db]).stdout, "t\t25001\n");
    let r = cairn(&["get", db, "t", "key025000"]);
    expect(&r, 0, "get last key");
    assert_eq!(r.stdout, format!("{}\n", "v".repeat(50)));
    let r = cairn(&["dump", db]);
    expect(&r, 0, "dump");
    // The header, a schema line, the entries and the end line.
    assert_eq!(r.stdout.lines().count(), 25_004);
    expect(&cairn(&["check", db]), 0, "check after load");
}

#[test]
fn load_error_after_a_batch_keeps_earlier_batches() {
    let (_dir, path) = scratch();
    let mut input = String::new();
    for i in 0..10_005 {
        input.push_str(&format!(
            "{{\"table\":\"t\",\"key\":\"{i:05}\",\"value\":\"v\"}}\n"
        ));
    }
    input.push_str("{oops\n");
    let r = cairn_with_input(&["load", p(&path)], input.as_bytes());
    expect(&r, 1, "load with a bad last line");
    assert!(r.stderr.contains("line 10006: "), "{}", r.stderr);
    assert!(r.stderr.contains("10000 entries"), "{}", r.stderr);
    assert_eq!(cairn(&["tables", p(&path)]).stdout, "t\t10000\n");
    expect(&cairn(&["check", p(&path)]), 0, "check");
}

#[test]
fn dump_to_a_closed_pipe_is_not_an_error() {
    let (_dir, path) = big_db(3000);
    let mut child = spawn(
        Command::new(env!("CARGO_BIN_EXE_cairn"))
            .args(["dump", p(&path)])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    );
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("wait");
    let r = finish(out);
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
    expect(&r, 0, "dump into a closed pipe");
}

#[test]
fn info_and_check_on_a_file_that_was_not_closed_cleanly() {
    let (dir, path) = scratch();
    let copy = dir.path().join("crashed.cairn");
    let db = Db::create(&path).expect("create");
    let txn = db.begin_write().expect("begin");
    txn.open_table(STRS)
        .expect("open")
        .insert("k", "v")
        .expect("insert");
    txn.commit().expect("commit");
    // A copy taken while the database is open looks like a crash after the
    // commit: its latest commit slot is not marked clean.
    std::fs::copy(&path, &copy).expect("copy");
    drop(db);
    let r = cairn(&["info", p(&copy)]);
    expect(&r, 0, "info");
    assert!(r.stdout.contains("not closed cleanly"), "{}", r.stdout);
    let r = cairn(&["check", p(&copy)]);
    expect(&r, 0, "check");
    assert_eq!(r.stdout, "ok\n");
    assert_eq!(cairn(&["get", p(&copy), "names", "k"]).stdout, "v\n");
}

#[test]
fn newer_format_version_is_a_user_error() {
    let (_dir, path) = small_db();
    let header = cairndb::format::FileHeader {
        version: cairndb::format::FORMAT_VERSION + 1,
        page_size: 4096,
    }
    .encode();
    let mut bytes = std::fs::read(&path).expect("read");
    bytes[..header.len()].copy_from_slice(&header);
    std::fs::write(&path, bytes).expect("write");
    for cmd in ["info", "check"] {
        let r = cairn(&[cmd, p(&path)]);
        expect(&r, 1, cmd);
        assert!(r.stderr.contains("format version 4"), "{}", r.stderr);
    }
}

#[cfg(unix)]
#[test]
fn non_utf8_arguments_are_usage_errors() {
    use std::os::unix::ffi::OsStrExt;
    let (_dir, path) = small_db();
    let out = spawn(
        Command::new(env!("CARGO_BIN_EXE_cairn"))
            .arg("put")
            .arg(&path)
            .arg("users")
            .arg(std::ffi::OsStr::from_bytes(&[0xff, 0xfe]))
            .arg("v")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    )
    .wait_with_output()
    .expect("run");
    let r = finish(out);
    expect(&r, 1, "non-UTF-8 key");
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
    assert_eq!(cairn(&["tables", p(&path)]).stdout, "cfg\t1\nusers\t2\n");
}

/// `cairn bench` is behind the `bench` feature: without it the command says
/// how to get it (exit 1); with it, a bad option is a usage error (exit 1).
/// The benchmark's own tests are in `crates/cairn-bench/tests/`.
#[test]
fn bench_says_how_to_get_it_without_the_feature() {
    if cfg!(feature = "bench") {
        // The old shape too: flags without a subcommand are those of `bench kv`.
        for args in [
            &["bench", "--suite", "nope"][..],
            &["bench", "kv", "--values", "50"],
        ] {
            expect(&cairn(args), 1, &args.join(" "));
        }
        return;
    }
    for args in [
        &["bench"][..],
        &["bench", "kv", "--quick"],
        &["bench", "--help"],
    ] {
        let r = cairn(args);
        expect(&r, 1, &args.join(" "));
        assert!(
            r.stderr.contains("built without the benchmark")
                && r.stderr.contains("--features bench"),
            "{}",
            r.stderr
        );
    }
}

/// Other processes read a file while `cairn load --merge` writes it: every
/// `cairn tables` and `cairn get` beside the load succeeds, and sees whole
/// load commits only (the load commits every 10,000 lines: a count that is
/// not 1 + a multiple of 10,000 would be part of one), never fewer than
/// before.
#[test]
fn the_cli_reads_a_file_while_load_writes_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("live.cairn");
    let out = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["put", path.to_str().unwrap(), "t", "seed", "v"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let mut load = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["load", "--merge", path.to_str().unwrap()])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = load.stdin.take().unwrap();
    let chunks = 8u64;
    let feeder = std::thread::spawn(move || {
        for c in 0..chunks {
            let mut buf = String::new();
            for i in 0..10_000u64 {
                buf.push_str(&format!(
                    "{{\"table\":\"t\",\"key\":\"k{:07}\",\"value\":\"v{i}\"}}\n",
                    c * 10_000 + i
                ));
            }
            stdin.write_all(buf.as_bytes()).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(150));
        }
    });
    let mut last = 1u64;
    let mut reads = 0;
    loop {
        let done = load.try_wait().unwrap().is_some();
        let out = Command::new(env!("CARGO_BIN_EXE_cairn"))
            .args(["tables", path.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "`cairn tables` beside the load failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let count: u64 = text
            .lines()
            .find_map(|l| l.strip_prefix("t\t"))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no count for t in {text:?}"));
        assert_eq!(
            (count - 1) % 10_000,
            0,
            "{count} entries: part of a load commit is visible"
        );
        assert!(count >= last, "the count went back from {last} to {count}");
        last = count;
        let got = Command::new(env!("CARGO_BIN_EXE_cairn"))
            .args(["get", path.to_str().unwrap(), "t", "seed"])
            .output()
            .unwrap();
        assert!(got.status.success(), "{got:?}");
        assert_eq!(String::from_utf8_lossy(&got.stdout).trim(), "v");
        reads += 1;
        if done {
            break;
        }
    }
    feeder.join().unwrap();
    let status = load.wait().unwrap();
    assert!(status.success(), "the load failed");
    assert_eq!(last, 1 + chunks * 10_000);
    assert!(reads >= 3, "only {reads} reads ran beside the load");
}

/// Every command that opens a file, given a directory, or (for the commands
/// that write) a read-only file, exits 1 with an error naming the path, not
/// a bare OS error.
#[test]
fn a_directory_or_read_only_file_is_an_error_naming_the_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().join("a-directory.cairn");
    std::fs::create_dir(&d).expect("mkdir");
    let ro = dir.path().join("read-only.cairn");
    let good = dir.path().join("good.cairn");
    expect(&cairn(&["put", p(&good), "t", "k", "v"]), 0, "put");
    expect(&cairn(&["put", p(&ro), "t", "k", "v"]), 0, "put");
    let fresh = dir.path().join("fresh.cairn");
    let fresh = p(&fresh).to_string();
    let every = |db: &str, other: &str| -> Vec<Vec<String>> {
        let cmds: Vec<Vec<&str>> = vec![
            vec!["info", db],
            vec!["stats", db],
            vec!["tables", db],
            vec!["check", db],
            vec!["compact", db],
            vec!["get", db, "t", "k"],
            vec!["put", db, "t", "k", "v"],
            vec!["del", db, "t", "k"],
            vec!["dump", db],
            vec!["load", db],
            vec!["backup", db, &fresh],
            vec!["backup", other, db, "--force"],
            vec!["import", db, "c"],
            vec!["export", db, "c"],
            vec!["collections", db],
            vec!["find", db, "c"],
            vec!["count", db, "c"],
            vec!["aggregate", db, "c", "[]"],
            vec!["distinct", db, "c", "a"],
            vec!["update", db, "c", "{}", "{\"$set\":{\"a\":1}}", "--upsert"],
            vec!["delete", db, "c", "{}"],
            vec!["index", "create", db, "c", "a"],
            vec!["index", "drop", db, "c", "a_1"],
            vec!["index", "list", db, "c"],
            vec!["events", "append", db, "s"],
            vec!["events", "read", db, "s"],
            vec!["events", "all", db],
            vec!["events", "streams", db],
            vec!["shell", db],
        ];
        cmds.into_iter()
            .map(|c| c.into_iter().map(str::to_string).collect())
            .collect()
    };
    // Input good for the command, so that only the file can be at fault.
    let input = |args: &[&str]| -> &'static [u8] {
        match args[0] {
            "load" => b"{\"table\":\"t\",\"key\":\"k\",\"value\":\"v\"}\n",
            "events" => b"{\"type\":\"T\"}\n",
            _ => b"{\"_id\":1}\n",
        }
    };
    for args in every(p(&d), p(&good)) {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let r = cairn_with_input(&args, input(&args));
        expect(&r, 1, &args.join(" "));
        assert!(
            r.stderr.contains(p(&d)),
            "{}: the error does not name the path: {}",
            args.join(" "),
            r.stderr
        );
        assert!(d.is_dir() && std::fs::read_dir(&d).unwrap().next().is_none());
    }
    // A read-only file: the commands that write to it. Root ignores file
    // permissions, so as root they run as user `nobody` (setpriv).
    let mut perms = std::fs::metadata(&ro).unwrap().permissions();
    perms.set_readonly(true);
    std::fs::set_permissions(&ro, perms).unwrap();
    let privileged = std::fs::OpenOptions::new().write(true).open(&ro).is_ok();
    let setpriv = Path::new("/usr/bin/setpriv");
    if privileged && !setpriv.exists() {
        eprintln!("root without setpriv: the read-only case cannot be checked");
        return;
    }
    if privileged {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    let run_as_user = |args: &[&str], input: &[u8]| -> Run {
        if !privileged {
            return cairn_with_input(args, input);
        }
        let mut child = spawn(
            Command::new(setpriv)
                .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                .arg(env!("CARGO_BIN_EXE_cairn"))
                .args(args)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped()),
        );
        let mut stdin = child.stdin.take().expect("stdin");
        let _ = stdin.write_all(input);
        drop(stdin);
        finish(child.wait_with_output().expect("wait for cairn"))
    };
    // The file is readable by all: reading commands work as that user.
    expect(&run_as_user(&["get", p(&ro), "t", "k"], b""), 0, "get");
    let writes = [
        "compact", "put", "del", "load", "import", "update", "delete", "create", "drop", "append",
        "shell",
    ];
    for args in every(p(&ro), p(&good)) {
        if !writes.contains(&args[0].as_str()) && !writes.contains(&args[1].as_str()) {
            continue;
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let r = run_as_user(&args, input(&args));
        expect(&r, 1, &args.join(" "));
        assert!(
            r.stderr.contains(p(&ro)),
            "{}: the error does not name the path: {}",
            args.join(" "),
            r.stderr
        );
    }
}
