//! Suite 10 — bad input (docs/reliability.md).
//!
//! Property: every bad input and every limit gives its documented typed
//! error (the exact `Error` variant, with the documented fields), on both
//! sides of the limit, never a panic, and leaves the database usable: after
//! each rejected operation a following valid insert + commit succeeds and
//! `check_integrity` finds nothing wrong; a rejected open leaves the file's
//! bytes unchanged. Error messages are actionable: they name the lengths,
//! limits, tables and paths involved.
//!
//! One table-driven test runs every case inside `catch_unwind` (a panic in
//! the library is counted, not fatal to the other cases), prints nothing for
//! a passing case, and ends with the report line
//! `bad-input: cases=<n> documented=all panics=0`.
//!
//! The cross-process locking case re-runs this test binary as a child
//! (`--exact <this test>` with `CAIRN_BAD_INPUT_LOCK_HOLDER=<db path>` in its
//! environment); the child opens the database, prints a ready token and holds the
//! lock until its stdin closes or 20 s pass.

use std::collections::BTreeMap;
use std::io::{BufRead, Read, Write};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use cairndb::format::FileHeader;
use cairndb::CoreError;
use cairndb::{
    limits, Builder, DamagedPart, Database, ReadableTable, TableDefinition, Value, WriteTransaction,
};

/// Set in the child process of the cross-process locking case.
const CHILD_ENV: &str = "CAIRN_BAD_INPUT_LOCK_HOLDER";
/// What the child prints once it holds the lock.
const READY: &str = "CAIRN-LOCK-HOLDER-READY";

type Outcome = Result<(), String>;

/// Fails the case with a message unless `cond` holds.
macro_rules! ensure {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            return Err(format!($($arg)+));
        }
    };
}

/// Expects `Err` matching the pattern; returns the error for further checks.
macro_rules! expect_err {
    ($r:expr, $what:expr, $pat:pat $(if $guard:expr)?) => {
        expect_err_with(
            $r,
            &$what,
            stringify!($pat $(if $guard)?),
            |e| matches!(e, $pat $(if $guard)?),
        )
    };
}

fn expect_err_with<T, E: std::fmt::Debug + std::fmt::Display>(
    r: Result<T, E>,
    what: &str,
    want: &str,
    pred: impl FnOnce(&E) -> bool,
) -> Result<E, String> {
    match r {
        Ok(_) => Err(format!(
            "{what}: expected {want}, got Ok(<{}>)",
            std::any::type_name::<T>()
        )),
        Err(e) if pred(&e) => Ok(e),
        Err(e) => Err(format!("{what}: expected {want}, got {e:?} ({e})")),
    }
}

/// Turns an unexpected library or I/O error into a case failure.
trait OrFail<T> {
    fn or_fail(self, what: &str) -> Result<T, String>;
}

impl<T, E: std::fmt::Debug + std::fmt::Display> OrFail<T> for Result<T, E> {
    fn or_fail(self, what: &str) -> Result<T, String> {
        self.map_err(|e| format!("{what}: unexpected error {e:?} ({e})"))
    }
}

/// The error's message mentions every one of `parts`.
fn display_has(e: &impl std::fmt::Display, parts: &[&str]) -> Outcome {
    let s = e.to_string();
    for p in parts {
        ensure!(s.contains(p), "message {s:?} does not mention {p:?}");
    }
    Ok(())
}

fn integrity_ok(db: &Database) -> Outcome {
    let rep = db.check_integrity().or_fail("check_integrity")?;
    ensure!(
        rep.is_ok(),
        "check_integrity found problems: {:?}",
        rep.problems
    );
    Ok(())
}

const PROBE: TableDefinition<u64, u64> = TableDefinition::new("probe");

/// The database still works: a valid insert + commit succeeds, reads back,
/// and the integrity check is clean.
fn usable(db: &Database) -> Outcome {
    let txn = db.begin_write().or_fail("usable: begin_write")?;
    let id = txn.txn_id().0;
    txn.open_table(PROBE)
        .or_fail("usable: open_table")?
        .insert(id, id)
        .or_fail("usable: insert")?;
    txn.commit().or_fail("usable: commit")?;
    {
        let r = db.begin_read().or_fail("usable: begin_read")?;
        let t = r.open_table(PROBE).or_fail("usable: open_table (read)")?;
        let got = t.get(id).or_fail("usable: get")?.map(|g| g.value());
        ensure!(
            got == Some(id),
            "usable: read back {got:?}, wanted Some({id})"
        );
    }
    integrity_ok(db)
}

type Snapshot = BTreeMap<String, Vec<(Vec<u8>, Vec<u8>)>>;

/// Every table's entries as raw bytes.
fn snapshot(db: &Database) -> Result<Snapshot, String> {
    let r = db.begin_read().or_fail("snapshot: begin_read")?;
    let mut out = BTreeMap::new();
    for name in r.list_tables().or_fail("snapshot: list_tables")? {
        let t = r
            .open_untyped_table(&name)
            .or_fail("snapshot: open_untyped_table")?;
        let mut rows = Vec::new();
        for e in t.iter().or_fail("snapshot: iter")? {
            let (k, v) = e.or_fail("snapshot: next")?;
            rows.push((k.value().to_vec(), v.value().to_vec()));
        }
        out.insert(name, rows);
    }
    Ok(out)
}

fn read_file(p: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(p).or_fail(&format!("read {}", p.display()))
}

fn write_file(p: &Path, bytes: &[u8]) -> Outcome {
    std::fs::write(p, bytes).or_fail(&format!("write {}", p.display()))
}

/// Overwrites `bytes` at `offset` of the file at `p`.
fn patch(p: &Path, offset: usize, bytes: &[u8]) -> Outcome {
    let mut all = read_file(p)?;
    all[offset..offset + bytes.len()].copy_from_slice(bytes);
    write_file(p, &all)
}

fn file_len(p: &Path) -> u64 {
    std::fs::metadata(p).map(|m| m.len()).unwrap_or(u64::MAX)
}

const KV: TableDefinition<&[u8], &[u8]> = TableDefinition::new("kv");

/// Creates a closed database at `p` holding a little data; returns its contents.
fn make_db(p: &Path) -> Result<Snapshot, String> {
    let db = Database::create(p).or_fail("make_db: create")?;
    let txn = db.begin_write().or_fail("make_db: begin_write")?;
    {
        let mut t = txn.open_table(KV).or_fail("make_db: open_table")?;
        for i in 0..100u32 {
            t.insert(
                format!("key{i:03}").as_bytes(),
                format!("value {i}").as_bytes(),
            )
            .or_fail("make_db: insert")?;
        }
    }
    txn.commit().or_fail("make_db: commit")?;
    let snap = snapshot(&db)?;
    db.close().or_fail("make_db: close")?;
    Ok(snap)
}

// ---------------------------------------------------------------- keys

/// The longest key works (insert, commit, reopen, read back) with values
/// on both sides of the inline/out-of-line boundary; one byte more is
/// `KeyTooLarge { len, max }` and the transaction goes on.
fn key_limit(dir: &Path, ps: usize) -> Outcome {
    let path = dir.join("db");
    let max = limits::max_key_bytes(ps);
    let db = Builder::new()
        .page_size(ps)
        .create(&path)
        .or_fail("create")?;
    ensure!(
        db.max_key_len() == max,
        "max_key_len() = {} but limits::max_key_bytes({ps}) = {max}",
        db.max_key_len()
    );
    limits::check_key_len(max, ps).or_fail("check_key_len(max)")?;
    expect_err!(
        limits::check_key_len(max + 1, ps),
        format!("check_key_len({}, {ps})", max + 1),
        CoreError::KeyTooLarge { len, max: m } if *len == max + 1 && *m == max
    )?;
    let key = |i: usize| {
        let mut k = vec![b'k'; max];
        k[max - 8..].copy_from_slice(&(i as u64).to_be_bytes());
        k
    };
    // Every value length 0..=2*page for 512-byte pages; for larger pages the
    // first 64 lengths (the inline boundary with a maximal key is at 24
    // bytes) and then a spread up to two pages.
    let n = if ps == 512 { 2 * ps + 2 } else { 200 };
    let vlen = |i: usize| {
        if i < 64 {
            i
        } else {
            64 + (i - 64) * 2 * ps / (n - 64)
        }
    };
    let val = |i: usize| -> Vec<u8> { (0..vlen(i)).map(|j| (i * 31 + j) as u8).collect() };
    let too_long = vec![b'z'; max + 1];
    {
        let txn = db.begin_write().or_fail("begin_write")?;
        {
            let mut t = txn.open_table(KV).or_fail("open_table")?;
            for i in 0..n {
                t.insert(key(i).as_slice(), val(i).as_slice())
                    .or_fail(&format!(
                        "insert {max}-byte key #{i} with a {}-byte value (page size {ps})",
                        vlen(i)
                    ))?;
            }
            let e = expect_err!(
                t.insert(too_long.as_slice(), b"v".as_slice()),
                format!("insert a {}-byte key (page size {ps})", max + 1),
                CoreError::KeyTooLarge { len, max: m } if *len == max + 1 && *m == max
            )?;
            display_has(&e, &[&(max + 1).to_string(), &max.to_string()])?;
            expect_err!(
                t.append(too_long.as_slice(), b"v".as_slice()),
                format!("append a {}-byte key (page size {ps})", max + 1),
                CoreError::KeyTooLarge { len, max: m } if *len == max + 1 && *m == max
            )?;
            // A lookup with an over-long key finds nothing (or says why).
            match t.get(too_long.as_slice()) {
                Ok(None) | Err(CoreError::KeyTooLarge { .. }) => {}
                Ok(Some(v)) => return Err(format!("get(over-long key) found {v:?}")),
                Err(e) => return Err(format!("get(over-long key): {e:?}")),
            }
            ensure!(
                t.len() == n as u64,
                "len {} after a rejected insert, wanted {n}",
                t.len()
            );
            // The rejected insert left the transaction usable.
            t.insert(b"after-error".as_slice(), b"ok".as_slice())
                .or_fail("insert after KeyTooLarge")?;
        }
        txn.commit().or_fail("commit")?;
    }
    drop(db);
    let db = Database::open(&path).or_fail("reopen")?;
    ensure!(
        db.page_size() == ps,
        "reopened page size {}",
        db.page_size()
    );
    {
        let r = db.begin_read().or_fail("begin_read")?;
        let t = r.open_table(KV).or_fail("open_table (read)")?;
        ensure!(t.len() == n as u64 + 1, "len {} after reopen", t.len());
        for i in 0..n {
            let got = t.get(key(i).as_slice()).or_fail("get")?;
            let ok = matches!(&got, Some(g) if g.value() == val(i).as_slice());
            ensure!(
                ok,
                "max-length key #{i} ({}-byte value) read back wrong after reopen",
                vlen(i)
            );
        }
        ensure!(
            t.get(too_long.as_slice()).ok().flatten().is_none(),
            "the rejected key is present"
        );
    }
    integrity_ok(&db)?;
    usable(&db)
}

// ---------------------------------------------------------------- values

/// `check_value_len` on both sides of `MAX_VALUE_BYTES` (no 2 GiB
/// allocation), and empty values (and an empty key) stored and read back
/// as present-but-empty, not as missing.
fn value_limit_and_empty_values(dir: &Path) -> Outcome {
    let max = limits::MAX_VALUE_BYTES;
    limits::check_value_len(max).or_fail("check_value_len(MAX_VALUE_BYTES)")?;
    limits::check_value_len(0).or_fail("check_value_len(0)")?;
    let e = expect_err!(
        limits::check_value_len(max + 1),
        "check_value_len(MAX_VALUE_BYTES + 1)",
        CoreError::ValueTooLarge { len, max: m } if *len == max + 1 && *m == max
    )?;
    display_has(&e, &[&(max + 1).to_string(), &max.to_string()])?;

    const S: TableDefinition<&str, &str> = TableDefinition::new("strs");
    let path = dir.join("db");
    let db = Database::create(&path).or_fail("create")?;
    let txn = db.begin_write().or_fail("begin_write")?;
    {
        let mut t = txn.open_table(KV).or_fail("open_table")?;
        t.insert(b"empty-value".as_slice(), b"".as_slice())
            .or_fail("insert empty value")?;
        t.insert(b"".as_slice(), b"empty key".as_slice())
            .or_fail("insert empty key")?;
        let mut s = txn.open_table(S).or_fail("open_table strs")?;
        s.insert("", "").or_fail("insert empty str/str")?;
        s.insert("e", "").or_fail("insert empty str value")?;
    }
    txn.commit().or_fail("commit")?;
    drop(db);
    let db = Database::open(&path).or_fail("reopen")?;
    {
        let r = db.begin_read().or_fail("begin_read")?;
        let t = r.open_table(KV).or_fail("open kv")?;
        let got = t.get(b"empty-value".as_slice()).or_fail("get")?;
        ensure!(
            matches!(&got, Some(g) if g.value().is_empty()),
            "empty value read back as {got:?}"
        );
        let got = t.get(b"".as_slice()).or_fail("get empty key")?;
        ensure!(
            matches!(&got, Some(g) if g.value() == b"empty key"),
            "empty key read back as {got:?}"
        );
        let s = r.open_table(S).or_fail("open strs")?;
        ensure!(s.len() == 2, "strs len {}", s.len());
        let got = s
            .get("")
            .or_fail("get \"\"")?
            .map(|g| g.value().to_string());
        ensure!(got.as_deref() == Some(""), "\"\" read back as {got:?}");
        let got = s.get("e").or_fail("get e")?.map(|g| g.value().to_string());
        ensure!(got.as_deref() == Some(""), "\"e\" read back as {got:?}");
    }
    // Overwriting an empty value returns it as the previous value.
    let txn = db.begin_write().or_fail("begin_write 2")?;
    {
        let mut t = txn.open_table(KV).or_fail("open_table 2")?;
        let old = t
            .insert(b"empty-value".as_slice(), b"now full".as_slice())
            .or_fail("overwrite empty value")?;
        ensure!(
            matches!(&old, Some(g) if g.value().is_empty()),
            "previous value {old:?}"
        );
    }
    txn.commit().or_fail("commit 2")?;
    integrity_ok(&db)?;
    usable(&db)
}

/// The large-value test: a real 100 MiB value (stored out of line in
/// contiguous pages) is inserted, committed, read back, reopened and read
/// back byte for byte equal; then replaced by a small one.
fn large_value_100_mib(dir: &Path) -> Outcome {
    let n: usize = 100 << 20;
    let big: Vec<u8> = (0..n as u64)
        .map(|i| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8)
        .collect();
    limits::check_value_len(big.len()).or_fail("check_value_len(100 MiB)")?;
    let path = dir.join("db");
    let db = Database::create(&path).or_fail("create")?;
    let txn = db.begin_write().or_fail("begin_write")?;
    {
        let mut t = txn.open_table(KV).or_fail("open_table")?;
        t.insert(b"big".as_slice(), big.as_slice())
            .or_fail("insert 100 MiB")?;
        t.insert(b"small".as_slice(), b"s".as_slice())
            .or_fail("insert small")?;
    }
    txn.commit().or_fail("commit 100 MiB")?;
    let check = |db: &Database, when: &str| -> Outcome {
        let r = db.begin_read().or_fail("begin_read")?;
        let t = r.open_table(KV).or_fail("open_table (read)")?;
        let got = t.get(b"big".as_slice()).or_fail("get big")?;
        let Some(g) = got else {
            return Err(format!("{when}: the 100 MiB value is missing"));
        };
        let v = g.value();
        ensure!(
            v.len() == big.len(),
            "{when}: read back {} bytes, wanted {}",
            v.len(),
            big.len()
        );
        if let Some(i) = (0..v.len()).find(|&i| v[i] != big[i]) {
            return Err(format!("{when}: first differing byte at offset {i}"));
        }
        Ok(())
    };
    check(&db, "before reopen")?;
    drop(db);
    let db = Database::open(&path).or_fail("reopen")?;
    check(&db, "after reopen")?;
    integrity_ok(&db)?;
    let txn = db.begin_write().or_fail("begin_write 2")?;
    txn.open_table(KV)
        .or_fail("open_table 2")?
        .insert(b"big".as_slice(), b"now small".as_slice())
        .or_fail("replace 100 MiB value")?;
    txn.commit().or_fail("commit replace")?;
    integrity_ok(&db)?;
    usable(&db)
}

// ---------------------------------------------------------------- tables

/// Bad names are `InvalidTableName` wherever a name is taken; 255 bytes
/// (also as multi-byte UTF-8) and unicode names work.
fn table_names(dir: &Path) -> Outcome {
    let bad: Vec<(String, &str)> = vec![
        (String::new(), "empty"),
        ("x".repeat(256), "256 ASCII bytes"),
        ("é".repeat(128), "128 chars of 2 bytes = 256 bytes"),
        ("a\nb".into(), "newline"),
        ("nul\0".into(), "NUL"),
        ("tab\there".into(), "tab"),
        ("del\u{7f}".into(), "DEL"),
        ("\u{85}next line".into(), "C1 control"),
        ("$catalog".into(), "leading $"),
        ("$".into(), "only $"),
    ];
    let good: Vec<String> = vec![
        "x".repeat(255),
        format!("{}x", "é".repeat(127)),
        "таблица".into(),
        "表".into(),
        "🪨 cairn stones".into(),
        "a$b".into(),
        "with space".into(),
    ];
    for g in &good {
        limits::check_table_name(g).or_fail(&format!("check_table_name({g:?})"))?;
    }
    let path = dir.join("db");
    let db = Database::create(&path).or_fail("create")?;
    let txn = db.begin_write().or_fail("begin_write")?;
    for (name, why) in &bad {
        let def = TableDefinition::<u64, u64>::new(name.as_str());
        let e = expect_err!(
            txn.open_table(def).map(|_| ()),
            format!("write open_table ({why})"),
            CoreError::InvalidTableName { name: n, .. } if n == name
        )?;
        display_has(&e, &["invalid table name"])?;
        expect_err!(
            txn.open_untyped_table(name).map(|_| ()),
            format!("write open_untyped_table ({why})"),
            CoreError::InvalidTableName { name: n, .. } if n == name
        )?;
        expect_err!(
            txn.delete_table(name),
            format!("delete_table ({why})"),
            CoreError::InvalidTableName { name: n, .. } if n == name
        )?;
    }
    for name in &good {
        let def = TableDefinition::<u64, u64>::new(name.as_str());
        txn.open_table(def)
            .or_fail(&format!("open_table({name:?})"))?
            .insert(1, 2)
            .or_fail("insert")?;
    }
    txn.commit().or_fail("commit")?;
    {
        let r = db.begin_read().or_fail("begin_read")?;
        for (name, why) in &bad {
            let def = TableDefinition::<u64, u64>::new(name.as_str());
            expect_err!(
                r.open_table(def).map(|_| ()),
                format!("read open_table ({why})"),
                CoreError::InvalidTableName { name: n, .. } if n == name
            )?;
        }
        let names = r.list_tables().or_fail("list_tables")?;
        for g in &good {
            ensure!(names.contains(g), "table {g:?} missing from {names:?}");
        }
        for (b, _) in &bad {
            ensure!(!names.contains(b), "bad name {b:?} listed");
        }
    }
    drop(db);
    let db = Database::open(&path).or_fail("reopen")?;
    {
        let r = db.begin_read().or_fail("begin_read 2")?;
        for name in &good {
            let def = TableDefinition::<u64, u64>::new(name.as_str());
            let t = r.open_table(def).or_fail(&format!("reopen {name:?}"))?;
            let got = t.get(1).or_fail("get")?.map(|g| g.value());
            ensure!(got == Some(2), "{name:?} read back {got:?}");
        }
    }
    usable(&db)
}

/// Type mismatch, missing table, a table open twice, deleting an open
/// table, deleting a missing table.
fn table_misuse(dir: &Path) -> Outcome {
    const TYPED: TableDefinition<u64, u64> = TableDefinition::new("typed");
    const TYPED_AS_BYTES: TableDefinition<u64, &[u8]> = TableDefinition::new("typed");
    const TYPED_AS_STR_KEY: TableDefinition<&str, u64> = TableDefinition::new("typed");
    const FRESH: TableDefinition<&str, u64> = TableDefinition::new("fresh");
    const FRESH_AS_U64: TableDefinition<u64, u64> = TableDefinition::new("fresh");
    const VICTIM: TableDefinition<u64, u64> = TableDefinition::new("victim");
    const MISSING: TableDefinition<u64, u64> = TableDefinition::new("missing");
    let u64_name = <u64 as Value>::type_name();
    let bytes_name = <&[u8] as Value>::type_name();
    let str_name = <&str as Value>::type_name();

    let db = Database::create(dir.join("db")).or_fail("create")?;
    let txn = db.begin_write().or_fail("begin_write")?;
    txn.open_table(TYPED)
        .or_fail("open typed")?
        .insert(1, 10)
        .or_fail("insert")?;
    txn.commit().or_fail("commit")?;

    let txn = db.begin_write().or_fail("begin_write 2")?;
    let e = expect_err!(
        txn.open_table(TYPED_AS_BYTES).map(|_| ()),
        "write open_table with another value type",
        CoreError::TableTypeMismatch(m) if { let cairndb::TypeMismatch { name, stored_key, stored_value, requested_key, requested_value } = &**m; name == "typed" && *stored_key == u64_name && *stored_value == u64_name
                && *requested_key == u64_name && *requested_value == bytes_name }
    )?;
    display_has(&e, &["typed", &u64_name, &bytes_name])?;
    {
        let t1 = txn.open_table(TYPED).or_fail("open typed")?;
        let e = expect_err!(
            txn.open_table(TYPED).map(|_| ()),
            "open the same table twice",
            CoreError::TableAlreadyOpen(n) if n == "typed"
        )?;
        display_has(&e, &["typed"])?;
        expect_err!(
            txn.open_untyped_table("typed").map(|_| ()),
            "open the same table twice (untyped)",
            CoreError::TableAlreadyOpen(n) if n == "typed"
        )?;
        expect_err!(
            txn.delete_table("typed"),
            "delete an open table",
            CoreError::TableAlreadyOpen(n) if n == "typed"
        )?;
        let got = t1.get(1).or_fail("get through the first handle")?;
        ensure!(
            got.map(|g| g.value()) == Some(10),
            "first handle broken after the rejected opens"
        );
    }
    {
        let t = txn.open_table(TYPED).or_fail("reopen after drop")?;
        let got = t.get(1).or_fail("get")?.map(|g| g.value());
        ensure!(got == Some(10), "typed read back {got:?}");
    }
    // A table created in this (uncommitted) transaction enforces its types too.
    txn.open_table(FRESH)
        .or_fail("open fresh")?
        .insert("a", 1)
        .or_fail("insert fresh")?;
    expect_err!(
        txn.open_table(FRESH_AS_U64).map(|_| ()),
        "reopen an uncommitted table with other types",
        CoreError::TableTypeMismatch(m) if { let cairndb::TypeMismatch { name, .. } = &**m; name == "fresh" }
    )?;
    let deleted = txn
        .delete_table("never-existed")
        .or_fail("delete missing")?;
    ensure!(!deleted, "delete_table of a missing table returned true");
    txn.open_table(VICTIM)
        .or_fail("open victim")?
        .insert(5, 5)
        .or_fail("insert victim")?;
    ensure!(
        txn.delete_table("victim").or_fail("delete victim")?,
        "delete_table of an existing table returned false"
    );
    ensure!(
        !txn.delete_table("victim").or_fail("delete victim again")?,
        "deleting a deleted table returned true"
    );
    txn.commit().or_fail("commit 2")?;

    {
        let r = db.begin_read().or_fail("begin_read")?;
        expect_err!(
            r.open_table(TYPED_AS_STR_KEY).map(|_| ()),
            "read open_table with another key type",
            CoreError::TableTypeMismatch(m) if { let cairndb::TypeMismatch { name, stored_key, requested_key, .. } = &**m; name == "typed" && *stored_key == u64_name && *requested_key == str_name }
        )?;
        let e = expect_err!(
            r.open_table(MISSING).map(|_| ()),
            "read open_table of a missing table",
            CoreError::TableNotFound(n) if n == "missing"
        )?;
        display_has(&e, &["missing"])?;
        expect_err!(
            r.open_untyped_table("missing").map(|_| ()),
            "read open_untyped_table of a missing table",
            CoreError::TableNotFound(n) if n == "missing"
        )?;
        expect_err!(
            r.open_table(VICTIM).map(|_| ()),
            "read a table deleted before commit",
            CoreError::TableNotFound(n) if n == "victim"
        )?;
        let t = r.open_table(TYPED).or_fail("read typed")?;
        ensure!(
            t.get(1).or_fail("get")?.map(|g| g.value()) == Some(10),
            "typed lost its entry"
        );
        let f = r.open_table(FRESH).or_fail("read fresh")?;
        ensure!(
            f.get("a").or_fail("get")?.map(|g| g.value()) == Some(1),
            "fresh lost its entry"
        );
    }
    // Delete a committed table, delete it again, recreate it with other types.
    let txn = db.begin_write().or_fail("begin_write 3")?;
    ensure!(
        txn.delete_table("typed").or_fail("delete typed")?,
        "delete committed table returned false"
    );
    ensure!(
        !txn.delete_table("typed").or_fail("delete typed again")?,
        "second delete returned true"
    );
    txn.open_table(TYPED_AS_BYTES)
        .or_fail("recreate typed with other types")?
        .insert(2, b"two".as_slice())
        .or_fail("insert")?;
    txn.commit().or_fail("commit 3")?;
    {
        let r = db.begin_read().or_fail("begin_read 2")?;
        expect_err!(
            r.open_table(TYPED).map(|_| ()),
            "open a recreated table with its old types",
            CoreError::TableTypeMismatch(m) if { let cairndb::TypeMismatch { name, .. } = &**m; name == "typed" }
        )?;
        let t = r.open_table(TYPED_AS_BYTES).or_fail("open recreated")?;
        ensure!(t.len() == 1, "recreated table has {} entries", t.len());
    }
    usable(&db)
}

/// Stored bytes are only decoded as the type the table was created with.
fn type_decoding(dir: &Path) -> Outcome {
    const BLOBS: TableDefinition<&str, &[u8]> = TableDefinition::new("blobs");
    const BLOBS_AS_STR: TableDefinition<&str, &str> = TableDefinition::new("blobs");
    const BLOBS_AS_STRING: TableDefinition<String, String> = TableDefinition::new("blobs");
    const WORDS: TableDefinition<&str, &str> = TableDefinition::new("words");
    const NUMS: TableDefinition<u64, u64> = TableDefinition::new("nums");
    let db = Database::create(dir.join("db")).or_fail("create")?;
    let txn = db.begin_write().or_fail("begin_write")?;
    txn.open_table(BLOBS)
        .or_fail("open blobs")?
        .insert("bad", [0xffu8, 0xfe, 0x80].as_slice())
        .or_fail("insert non-UTF-8 bytes")?;
    txn.commit().or_fail("commit")?;
    {
        let r = db.begin_read().or_fail("begin_read")?;
        let e = expect_err!(
            r.open_table(BLOBS_AS_STR).map(|_| ()),
            "read <&str, &[u8]> table as <&str, &str>",
            CoreError::TableTypeMismatch(m) if { let cairndb::TypeMismatch { name, stored_value, requested_value, .. } = &**m; name == "blobs" && stored_value == "&[u8]" && requested_value == "&str" }
        )?;
        display_has(&e, &["&[u8]", "&str"])?;
        expect_err!(
            r.open_table(BLOBS_AS_STRING).map(|_| ()),
            "read <&str, &[u8]> table as <String, String>",
            CoreError::TableTypeMismatch(_)
        )?;
    }
    let txn = db.begin_write().or_fail("begin_write 2")?;
    expect_err!(
        txn.open_table(BLOBS_AS_STR).map(|_| ()),
        "write-open <&str, &[u8]> table as <&str, &str>",
        CoreError::TableTypeMismatch(_)
    )?;
    // Untyped writes can store bytes invalid for the declared types; typed
    // reads of them are `Decode`, never a panic or a wrong value.
    txn.open_table(WORDS)
        .or_fail("open words")?
        .insert("ok", "fine")
        .or_fail("insert words")?;
    txn.open_table(NUMS)
        .or_fail("open nums")?
        .insert(1, 2)
        .or_fail("insert nums")?;
    {
        let mut w = txn.open_untyped_table("words").or_fail("untyped words")?;
        w.insert(b"zz".as_slice(), [0xffu8].as_slice())
            .or_fail("untyped insert")?;
        let mut n = txn.open_untyped_table("nums").or_fail("untyped nums")?;
        n.insert(9u64.to_be_bytes().as_slice(), [1u8, 2, 3].as_slice())
            .or_fail("untyped insert short value")?;
        n.insert(b"abc".as_slice(), 7u64.to_be_bytes().as_slice())
            .or_fail("untyped insert short key")?;
    }
    txn.commit().or_fail("commit 2")?;
    {
        let r = db.begin_read().or_fail("begin_read 2")?;
        let w = r.open_table(WORDS).or_fail("open words")?;
        expect_err!(
            w.get("zz"),
            "typed get of non-UTF-8 bytes",
            CoreError::Decode { type_name, .. } if type_name == "&str"
        )?;
        let got = w
            .get("ok")
            .or_fail("get ok")?
            .map(|g| g.value().to_string());
        ensure!(got.as_deref() == Some("fine"), "words/ok read back {got:?}");
        let errs = w
            .iter()
            .or_fail("iter words")?
            .filter(|e| matches!(e, Err(CoreError::Decode { .. })))
            .count();
        ensure!(
            errs == 1,
            "iterating words gave {errs} Decode errors, wanted 1"
        );
        let n = r.open_table(NUMS).or_fail("open nums")?;
        expect_err!(
            n.get(9),
            "typed get of a 3-byte u64",
            CoreError::Decode { type_name, .. } if type_name == "u64"
        )?;
        let errs = n
            .iter()
            .or_fail("iter nums")?
            .filter(|e| matches!(e, Err(CoreError::Decode { .. })))
            .count();
        ensure!(
            errs == 2,
            "iterating nums gave {errs} Decode errors, wanted 2"
        );
    }
    let txn = db.begin_write().or_fail("begin_write 3")?;
    {
        let mut w = txn.open_untyped_table("words").or_fail("untyped words")?;
        w.remove(b"zz".as_slice()).or_fail("untyped remove")?;
        let mut n = txn.open_untyped_table("nums").or_fail("untyped nums")?;
        n.remove(9u64.to_be_bytes().as_slice())
            .or_fail("untyped remove")?;
        n.remove(b"abc".as_slice()).or_fail("untyped remove")?;
    }
    txn.commit().or_fail("commit 3")?;
    {
        let r = db.begin_read().or_fail("begin_read 3")?;
        let n = r.open_table(NUMS).or_fail("open nums")?;
        for e in n.iter().or_fail("iter")? {
            e.or_fail("typed iteration after cleanup")?;
        }
    }
    usable(&db)
}

// ---------------------------------------------------------------- options

/// Page sizes outside 512..=32768 or not a power of two are `InvalidOption`
/// (and a valid create of the same path works afterwards); 512 and 32768
/// work; the page size is ignored when opening an existing file.
fn page_sizes(dir: &Path) -> Outcome {
    for bad in [0usize, 256, 1000, 4095, 65536, 1 << 20] {
        let p = dir.join(format!("ps{bad}"));
        let e = expect_err!(
            Builder::new().page_size(bad).create(&p),
            format!("page_size({bad})"),
            CoreError::InvalidOption(_)
        )?;
        display_has(&e, &[&bad.to_string()])?;
        let db = Database::create(&p).or_fail("create after InvalidOption")?;
        usable(&db)?;
    }
    for ok in [512usize, 32768] {
        let p = dir.join(format!("ok{ok}"));
        let db = Builder::new()
            .page_size(ok)
            .create(&p)
            .or_fail(&format!("page_size({ok})"))?;
        ensure!(db.page_size() == ok, "page_size() = {}", db.page_size());
        usable(&db)?;
        drop(db);
        let db = Builder::new()
            .page_size(1000)
            .open(&p)
            .or_fail("open an existing file with page_size(1000) (ignored)")?;
        ensure!(
            db.page_size() == ok,
            "page size after reopen {}",
            db.page_size()
        );
        usable(&db)?;
    }
    Ok(())
}

/// `cache_size(0)` is not documented as invalid: it must work (or be an
/// `InvalidOption`), never panic.
fn cache_size_zero(dir: &Path) -> Outcome {
    let p = dir.join("db");
    let db = match Builder::new().cache_size(0).page_size(512).create(&p) {
        Ok(db) => db,
        Err(CoreError::InvalidOption(_)) => return Ok(()),
        Err(e) => return Err(format!("cache_size(0): {e:?}")),
    };
    let txn = db.begin_write().or_fail("begin_write")?;
    {
        let mut t = txn.open_table(PROBE).or_fail("open_table")?;
        for i in 0..3000u64 {
            t.insert(i, i * 3).or_fail("insert")?;
        }
    }
    txn.commit().or_fail("commit")?;
    {
        let r = db.begin_read().or_fail("begin_read")?;
        let t = r.open_table(PROBE).or_fail("open_table (read)")?;
        for i in (0..3000u64).step_by(97) {
            let got = t.get(i).or_fail("get")?.map(|g| g.value());
            ensure!(got == Some(i * 3), "key {i} read back {got:?}");
        }
    }
    usable(&db)
}

/// `append` with a key not greater than the last is `AppendOutOfOrder`,
/// within a transaction and across commits; ascending appends work.
fn append_order(dir: &Path) -> Outcome {
    const LOG: TableDefinition<u64, u64> = TableDefinition::new("log");
    let db = Database::create(dir.join("db")).or_fail("create")?;
    let txn = db.begin_write().or_fail("begin_write")?;
    {
        let mut t = txn.open_table(LOG).or_fail("open_table")?;
        for k in [10u64, 20, 30] {
            t.append(k, k).or_fail(&format!("append {k}"))?;
        }
        let e = expect_err!(
            t.append(30, 0),
            "append an equal key",
            CoreError::AppendOutOfOrder
        )?;
        display_has(&e, &["append"])?;
        expect_err!(
            t.append(5, 0),
            "append a smaller key",
            CoreError::AppendOutOfOrder
        )?;
        t.append(31, 31).or_fail("append after the errors")?;
        t.insert(25, 25).or_fail("insert in the middle")?;
        expect_err!(
            t.append(29, 0),
            "append below the last key",
            CoreError::AppendOutOfOrder
        )?;
        let got = t.get(30).or_fail("get")?.map(|g| g.value());
        ensure!(got == Some(30), "rejected append overwrote 30: {got:?}");
    }
    txn.commit().or_fail("commit")?;
    let txn = db.begin_write().or_fail("begin_write 2")?;
    {
        let mut t = txn.open_table(LOG).or_fail("open_table 2")?;
        expect_err!(
            t.append(31, 0),
            "append the committed last key",
            CoreError::AppendOutOfOrder
        )?;
        t.append(40, 40).or_fail("append 40")?;
    }
    txn.commit().or_fail("commit 2")?;
    {
        let r = db.begin_read().or_fail("begin_read")?;
        let t = r.open_table(LOG).or_fail("open_table (read)")?;
        let mut rows = Vec::new();
        for e in t.iter().or_fail("iter")? {
            let (k, v) = e.or_fail("next")?;
            rows.push((k.value(), v.value()));
        }
        let want: Vec<(u64, u64)> = [10, 20, 25, 30, 31, 40].iter().map(|&k| (k, k)).collect();
        ensure!(rows == want, "log holds {rows:?}, wanted {want:?}");
    }
    usable(&db)
}

/// `max_readers(2)`: a third concurrent reader is `TooManyReaders { max: 2 }`;
/// after one ends, a new one begins. `max_readers(0)` is `InvalidOption`.
fn max_readers(dir: &Path) -> Outcome {
    let p = dir.join("db");
    let e = expect_err!(
        Builder::new().max_readers(0).create(&p),
        "max_readers(0) at create",
        CoreError::InvalidOption(_)
    )?;
    display_has(&e, &["max_readers"])?;
    let db = Builder::new()
        .max_readers(2)
        .create(&p)
        .or_fail("max_readers(2)")?;
    usable(&db)?;
    let r1 = db.begin_read().or_fail("reader 1")?;
    let r2 = db.begin_read().or_fail("reader 2")?;
    let e = expect_err!(
        db.begin_read(),
        "third reader",
        CoreError::TooManyReaders { max } if *max == 2
    )?;
    display_has(&e, &["2"])?;
    ensure!(
        db.live_readers() == 2,
        "live_readers {} after a rejected begin_read",
        db.live_readers()
    );
    // The writer is not a reader: commits go on at the cap.
    let txn = db.begin_write().or_fail("begin_write at the reader cap")?;
    txn.open_table(PROBE)
        .or_fail("open_table")?
        .insert(u64::MAX, 1)
        .or_fail("insert")?;
    let committed = txn.commit().or_fail("commit at the reader cap")?;
    drop(r1);
    let r3 = db.begin_read().or_fail("reader after one ended")?;
    ensure!(
        r3.txn_id() == committed,
        "new reader sees {:?}, wanted {committed:?}",
        r3.txn_id()
    );
    ensure!(
        r2.txn_id() < committed,
        "old reader moved to {:?}",
        r2.txn_id()
    );
    expect_err!(
        db.begin_read(),
        "third reader again",
        CoreError::TooManyReaders { max } if *max == 2
    )?;
    drop(r2);
    drop(r3);
    ensure!(db.live_readers() == 0, "live_readers {}", db.live_readers());
    usable(&db)?;
    drop(db);
    expect_err!(
        Builder::new().max_readers(0).open(&p),
        "max_readers(0) at open",
        CoreError::InvalidOption(_)
    )?;
    let db = Database::open(&p).or_fail("open after InvalidOption")?;
    usable(&db)
}

// ---------------------------------------------------------------- file size

const FILL: TableDefinition<u64, &[u8]> = TableDefinition::new("fill");

fn fill_value(i: u64) -> Vec<u8> {
    vec![(i % 251) as u8; 60]
}

fn fill_txn(txn: &WriteTransaction, first: u64, n: u64) -> Result<(), CoreError> {
    let mut t = txn.open_table(FILL)?;
    for i in first..first + n {
        t.insert(i, fill_value(i).as_slice())?;
    }
    Ok(())
}

fn read_fill(db: &Database) -> Result<BTreeMap<u64, Vec<u8>>, String> {
    let r = db.begin_read().or_fail("read_fill: begin_read")?;
    let mut out = BTreeMap::new();
    let t = match r.open_table(FILL) {
        Ok(t) => t,
        Err(CoreError::TableNotFound(_)) => return Ok(out),
        Err(e) => return Err(format!("read_fill: {e:?}")),
    };
    for e in t.iter().or_fail("read_fill: iter")? {
        let (k, v) = e.or_fail("read_fill: next")?;
        out.insert(k.value(), v.value().to_vec());
    }
    Ok(out)
}

/// Commits 8 entries per transaction until one fails; checks after create
/// and after every commit that the file is within `limit`. Returns where
/// the error came from ("insert" or "commit") and the error.
fn fill_until_error(
    db: &Database,
    p: &Path,
    limit: u64,
    model: &mut BTreeMap<u64, Vec<u8>>,
    next: &mut u64,
) -> Result<(&'static str, CoreError), String> {
    ensure!(
        file_len(p) <= limit,
        "the new file is {} bytes, past its {limit}-byte limit",
        file_len(p)
    );
    for _ in 0..100_000 {
        let txn = db.begin_write().or_fail("begin_write")?;
        if let Err(e) = fill_txn(&txn, *next, 8) {
            return Ok(("insert", e)); // the transaction is dropped: aborted
        }
        match txn.commit() {
            Ok(_) => {
                for i in *next..*next + 8 {
                    model.insert(i, fill_value(i));
                }
                *next += 8;
            }
            Err(e) => return Ok(("commit", e)),
        }
        ensure!(
            file_len(p) <= limit,
            "the file grew to {} bytes, past its {limit}-byte limit, with {next} entries",
            file_len(p)
        );
    }
    Err("never reached the file size limit".into())
}

/// Filling a database with `max_file_size(64 KiB)` ends in `FileSizeLimit`
/// (at insert or commit); the failed transaction leaves the last commit
/// intact (same handle and after reopen), the handle is not poisoned, the
/// file never exceeds the limit, and after deleting data new commits work.
fn file_size_limit(dir: &Path) -> Outcome {
    let limit = 64u64 << 10;
    let p = dir.join("db");
    let mut b = Builder::new();
    b.page_size(512).max_file_size(limit);
    let db = b.create(&p).or_fail("create")?;
    let mut model = BTreeMap::new();
    let mut next = 0u64;
    let (when, e) = fill_until_error(&db, &p, limit, &mut model, &mut next)?;
    ensure!(
        matches!(e, CoreError::FileSizeLimit { .. }),
        "at {when} time: expected FileSizeLimit, got {e:?} ({e})"
    );
    ensure!(!db.is_poisoned(), "FileSizeLimit poisoned the handle");
    ensure!(
        file_len(&p) <= limit,
        "the file is {} bytes after FileSizeLimit, past the {limit}-byte limit",
        file_len(&p)
    );
    ensure!(
        read_fill(&db)? == model,
        "after the failed transaction the handle does not show the last commit"
    );
    drop(db);
    let db = b.open(&p).or_fail("reopen after FileSizeLimit")?;
    ensure!(
        read_fill(&db)? == model,
        "after reopen the database does not hold the last commit ({} entries)",
        model.len()
    );
    integrity_ok(&db)?;
    // Deleting half the data in one transaction needs scratch pages
    // (copy-on-write paths, a longer free list), so at the limit it may
    // itself be refused with FileSizeLimit, changing nothing. Deleting in
    // small transactions always works.
    let half = next / 2;
    let txn = db.begin_write().or_fail("begin_write (bulk delete)")?;
    let removed = txn
        .open_table(FILL)
        .and_then(|mut t| t.remove_range(0..half));
    let bulk = removed.and_then(|_| txn.commit().map(|_| ()));
    match bulk {
        Ok(()) => model.retain(|k, _| *k >= half),
        Err(CoreError::FileSizeLimit { .. }) => {
            ensure!(
                !db.is_poisoned(),
                "a refused bulk delete poisoned the handle"
            );
            ensure!(
                read_fill(&db)? == model,
                "a refused bulk delete changed the data"
            );
            let mut k = 0;
            while k < half {
                let end = (k + 8).min(half);
                let txn = db.begin_write().or_fail("begin_write (delete)")?;
                txn.open_table(FILL)
                    .or_fail("open_table (delete)")?
                    .remove_range(k..end)
                    .or_fail(&format!("remove {k}..{end} at the file size limit"))?;
                txn.commit().or_fail(&format!(
                    "commit removing {k}..{end} at the file size limit"
                ))?;
                model.retain(|key, _| !(k..end).contains(key));
                k = end;
            }
        }
        Err(e) => return Err(format!("bulk delete at the limit: {e:?}")),
    }
    for round in 0..4 {
        let txn = db.begin_write().or_fail("begin_write (refill)")?;
        fill_txn(&txn, next, 8).or_fail(&format!("refill round {round} insert"))?;
        txn.commit()
            .or_fail(&format!("refill round {round} commit after deleting data"))?;
        for i in next..next + 8 {
            model.insert(i, fill_value(i));
        }
        next += 8;
    }
    ensure!(
        file_len(&p) <= limit,
        "the file is {} bytes, past the {limit}-byte limit",
        file_len(&p)
    );
    ensure!(read_fill(&db)? == model, "refilled data reads back wrong");
    usable(&db)?;
    drop(db);
    let db = b.open(&p).or_fail("final reopen")?;
    ensure!(read_fill(&db)? == model, "refilled data lost on reopen");
    integrity_ok(&db)?;
    ensure!(
        file_len(&p) <= limit,
        "the file is {} bytes at the end, past the {limit}-byte limit",
        file_len(&p)
    );
    Ok(())
}

/// `FileSizeLimit` carries byte counts, as documented ("the database file
/// would grow to {requested} bytes, past its configured maximum of {max}
/// bytes"): `max` is the configured limit and `requested` exceeds it.
fn file_size_limit_fields(dir: &Path) -> Outcome {
    let limit = 64u64 << 10;
    let p = dir.join("db");
    let db = Builder::new()
        .page_size(512)
        .max_file_size(limit)
        .create(&p)
        .or_fail("create")?;
    let (when, e) = fill_until_error(&db, &p, limit, &mut BTreeMap::new(), &mut 0)?;
    let e = expect_err_with::<(), _>(
        Err(e),
        &format!("FileSizeLimit at {when} time for max_file_size({limit})"),
        "FileSizeLimit { requested > limit, max: limit } (bytes)",
        |e| matches!(e, CoreError::FileSizeLimit { requested, max } if *max == limit && *requested > limit),
    )?;
    display_has(&e, &[&limit.to_string()])
}

/// The file never exceeds `max_file_size`, also for limits that are not a
/// multiple of the page size or smaller than the file's first growth step.
fn file_never_exceeds_limit(dir: &Path) -> Outcome {
    let mut issues = Vec::new();
    for limit in [1536u64, 4096, 10_000, (40 << 10) + 100] {
        let p = dir.join(format!("db{limit}"));
        let mut b = Builder::new();
        b.page_size(512).max_file_size(limit);
        let db = match b.create(&p) {
            Ok(db) => db,
            Err(e) => {
                issues.push(format!("max_file_size({limit}): create failed: {e:?}"));
                continue;
            }
        };
        match fill_until_error(&db, &p, limit, &mut BTreeMap::new(), &mut 0) {
            Ok((_, CoreError::FileSizeLimit { .. })) => {}
            Ok((when, e)) => issues.push(format!(
                "max_file_size({limit}): at {when} time expected FileSizeLimit, got {e:?}"
            )),
            Err(msg) => issues.push(format!("max_file_size({limit}): {msg}")),
        }
        if let Err(msg) = integrity_ok(&db) {
            issues.push(format!("max_file_size({limit}): {msg}"));
        }
    }
    if issues.is_empty() {
        Ok(())
    } else {
        Err(issues.join("; "))
    }
}

/// A maximum file size too small for the fixed pages is `FileSizeLimit`
/// at create, in bytes.
fn file_size_limit_at_create(dir: &Path) -> Outcome {
    for limit in [0u64, 1000] {
        let p = dir.join(format!("db{limit}"));
        let e = expect_err!(
            Builder::new().page_size(512).max_file_size(limit).create(&p),
            format!("max_file_size({limit}) at create"),
            CoreError::FileSizeLimit { requested, max } if *requested == 3 * 512 && *max == limit
        )?;
        display_has(&e, &["1536", &limit.to_string()])?;
        let db = Builder::new()
            .page_size(512)
            .max_file_size(64 << 10)
            .create(&p)
            .or_fail("create after FileSizeLimit")?;
        usable(&db)?;
    }
    Ok(())
}

// ---------------------------------------------------------------- files

/// A simple pseudo-random generator seeded from the clock (the bytes are
/// printed on failure).
fn random_bytes(n: usize) -> Vec<u8> {
    let mut x = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1)
        | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Files that are not databases are `NotADatabase` (in every open mode,
/// `create` included) and are left unchanged; a file that is only the start
/// of one (the magic bytes, cut short) is a truncated database, `Corruption`
/// of the `FileLength` at page 0; a missing path is `NotFound` and is not
/// created.
fn not_a_database(dir: &Path) -> Outcome {
    let mut text = Vec::new();
    for i in 0..300 {
        text.extend_from_slice(format!("name,score\nada,{i}\nbob,7\n").as_bytes());
    }
    let mut rand10 = random_bytes(10);
    if rand10[0] == 0x89 {
        rand10[0] = 0;
    }
    let files: Vec<(&str, Vec<u8>, bool)> = vec![
        // (label, bytes, also try `create`)
        ("empty file", Vec::new(), false),
        ("text file", text, true),
        ("10 random bytes", rand10, true),
        ("other magic", b"\x89PNG\r\n\x1a\n".to_vec(), true),
    ];
    for (label, bytes, try_create) in &files {
        let p = dir.join(label.replace(' ', "_"));
        write_file(&p, bytes)?;
        let what = format!("{label} {:02x?}", &bytes[..bytes.len().min(16)]);
        let e = expect_err!(
            Database::open(&p),
            format!("open({what})"),
            CoreError::NotADatabase { path } if path == &p
        )?;
        display_has(&e, &[&p.display().to_string()])?;
        expect_err!(
            Database::open_read_only(&p),
            format!("open_read_only({what})"),
            CoreError::NotADatabase { path } if path == &p
        )?;
        if *try_create {
            expect_err!(
                Database::create(&p),
                format!("create({what})"),
                CoreError::NotADatabase { path } if path == &p
            )?;
        }
        ensure!(
            read_file(&p)? == *bytes,
            "{label}: a rejected open changed the file"
        );
    }
    // The magic bytes and nothing else: a truncated database.
    let magic = dir.join("magic_only");
    write_file(&magic, b"\x89CAIRN\r\n")?;
    for (mode, r) in [
        ("open", Database::open(&magic)),
        ("open_read_only", Database::open_read_only(&magic)),
        ("create", Database::create(&magic)),
    ] {
        expect_err_with(
            r,
            &format!("{mode}(magic only)"),
            "Corruption { part: FileLength, page 0, offset 0 }",
            |e| {
                matches!(e, CoreError::Corruption(c)
                    if c.part == DamagedPart::FileLength && c.page.0 == 0 && c.offset == 0)
            },
        )?;
    }
    ensure!(
        read_file(&magic)? == b"\x89CAIRN\r\n",
        "magic only: a rejected open changed the file"
    );
    // The empty file can still become a database with `create`.
    let empty = dir.join("empty_file");
    let db = Database::create(&empty).or_fail("create on the empty file")?;
    usable(&db)?;
    drop(db);

    let missing = dir.join("missing.cairn");
    let e = expect_err!(
        Database::open(&missing),
        "open(missing path)",
        CoreError::NotFound { path } if path == &missing
    )?;
    display_has(&e, &[&missing.display().to_string()])?;
    expect_err!(
        Database::open_read_only(&missing),
        "open_read_only(missing path)",
        CoreError::NotFound { path } if path == &missing
    )?;
    ensure!(!missing.exists(), "a failed open created the missing file");

    // A directory: `CannotOpen` naming it, in every mode.
    let sub = dir.join("a_directory");
    std::fs::create_dir(&sub).or_fail("mkdir")?;
    for (mode, r) in [
        ("open", Database::open(&sub)),
        ("open_read_only", Database::open_read_only(&sub)),
        ("create", Database::create(&sub)),
    ] {
        let e = expect_err!(
            r,
            format!("{mode}(directory)"),
            CoreError::CannotOpen { path, .. } if path == &sub
        )?;
        display_has(&e, &[&sub.display().to_string(), "cannot open"])?;
    }
    Ok(())
}

/// The header layout is as documented, a newer version is
/// `UnsupportedVersion { found }`, and a damaged header is
/// `Corruption` of the `FileHeader`; a rejected open changes nothing and the
/// restored header opens with all data.
fn header_damage(dir: &Path) -> Outcome {
    let p = dir.join("db");
    let snap = make_db(&p)?;
    let original = read_file(&p)?;
    let current = cairndb::format::FORMAT_VERSION;
    let good = FileHeader {
        version: current,
        page_size: 4096,
    }
    .encode();
    ensure!(
        original[..32] == good,
        "the header on disk {:02x?} is not FileHeader {{ version: {current}, page_size: 4096 }}.encode()",
        &original[..32]
    );
    let restore_and_check = |label: &str| -> Outcome {
        write_file(&p, &original)?;
        let db = Database::open(&p).or_fail(&format!("{label}: open after restoring"))?;
        ensure!(snapshot(&db)? == snap, "{label}: data changed");
        drop(db);
        Ok(())
    };

    for version in [current + 1, u32::MAX] {
        patch(
            &p,
            0,
            &FileHeader {
                version,
                page_size: 4096,
            }
            .encode(),
        )?;
        let damaged = read_file(&p)?;
        let e = expect_err!(
            Database::open(&p),
            format!("open with header version {version}"),
            CoreError::UnsupportedVersion { path, found, supported }
                if path == &p && *found == version && *supported == current
        )?;
        display_has(
            &e,
            &[
                &version.to_string(),
                &current.to_string(),
                &p.display().to_string(),
            ],
        )?;
        expect_err!(
            Database::open_read_only(&p),
            format!("open_read_only with header version {version}"),
            CoreError::UnsupportedVersion { found, .. } if *found == version
        )?;
        expect_err!(
            Database::create(&p),
            format!("create with header version {version}"),
            CoreError::UnsupportedVersion { found, .. } if *found == version
        )?;
        ensure!(
            read_file(&p)? == damaged,
            "version {version}: a rejected open changed the file"
        );
        restore_and_check(&format!("version {version}"))?;
    }

    let is_header_corruption = |e: &CoreError| {
        matches!(e, CoreError::Corruption(c)
            if c.part == DamagedPart::FileHeader && c.page.0 == 0 && c.offset == 0)
    };
    // Flipped bytes: in the checksum, the version and the page size field,
    // and a magic byte (one or two wrong magic bytes are a damaged header).
    for at in [24usize, 31, 8, 13, 1] {
        let mut bytes = original.clone();
        bytes[at] ^= 0x40;
        write_file(&p, &bytes)?;
        for (mode, r) in [
            ("open", Database::open(&p)),
            ("open_read_only", Database::open_read_only(&p)),
            ("create", Database::create(&p)),
        ] {
            expect_err_with(
                r,
                &format!("{mode} with header byte {at} flipped"),
                "Corruption { part: FileHeader, page 0, offset 0 }",
                is_header_corruption,
            )?;
        }
        ensure!(
            read_file(&p)? == bytes,
            "byte {at}: a rejected open changed the file"
        );
        restore_and_check(&format!("byte {at}"))?;
    }
    // A header page of other bytes, commit slots in place: a damaged header.
    patch(&p, 0, &[0x55; 32])?;
    expect_err_with(
        Database::open(&p),
        "open with the header page overwritten",
        "Corruption { part: FileHeader, page 0, offset 0 }",
        is_header_corruption,
    )?;
    restore_and_check("header page overwritten")?;
    // Valid checksums over invalid fields: version 0, page size 1000.
    for (label, h) in [
        (
            "version 0",
            FileHeader {
                version: 0,
                page_size: 4096,
            },
        ),
        (
            "page size 1000",
            FileHeader {
                version: 1,
                page_size: 1000,
            },
        ),
    ] {
        patch(&p, 0, &h.encode())?;
        expect_err_with(
            Database::open(&p),
            &format!("open with {label}"),
            "Corruption { part: FileHeader }",
            is_header_corruption,
        )?;
        restore_and_check(label)?;
    }
    // A valid header naming another valid page size: the slots do not
    // verify; some corruption, never garbage or a panic.
    patch(
        &p,
        0,
        &FileHeader {
            version: 1,
            page_size: 512,
        }
        .encode(),
    )?;
    let lied = read_file(&p)?;
    expect_err!(
        Database::open(&p),
        "open with a header page size of 512 on a 4096-byte-page file",
        CoreError::Corruption(_)
    )?;
    ensure!(read_file(&p)? == lied, "a rejected open changed the file");
    restore_and_check("page size lie")?;
    // Only the header page: no commit slots.
    write_file(&p, &original[..4096])?;
    expect_err!(
        Database::open(&p),
        "open a file holding only its header page",
        CoreError::Corruption(_)
    )?;
    restore_and_check("header only")?;
    let db = Database::open(&p).or_fail("final open")?;
    usable(&db)
}

// ---------------------------------------------------------------- locks

/// A read-write handle excludes every other handle in this process; two
/// read-only handles share; the lock goes with the handle.
fn lock_same_process(dir: &Path) -> Outcome {
    let p = dir.join("db");
    let w = Database::create(&p).or_fail("create")?;
    usable(&w)?;
    let e = expect_err!(
        Database::open(&p),
        "second open while a writer holds the file",
        CoreError::DatabaseLocked { path } if path == &p
    )?;
    display_has(&e, &[&p.display().to_string()])?;
    expect_err!(
        Database::create(&p),
        "create while a writer holds the file",
        CoreError::DatabaseLocked { path } if path == &p
    )?;
    // A reader opens beside the writer (FORMAT.md, "Sharing a file
    // between processes") and sees what it committed.
    let r0 = Database::open_read_only(&p).or_fail("open_read_only beside a writer")?;
    usable(&w)?;
    let snap = snapshot(&w)?;
    ensure!(
        snapshot(&r0)? == snap,
        "a read-only handle beside the writer sees other data"
    );
    drop(w);
    drop(r0);
    let r1 = Database::open_read_only(&p).or_fail("first read-only open")?;
    let r2 = Database::open_read_only(&p).or_fail("second read-only open")?;
    ensure!(snapshot(&r1)? == snap, "read-only handle 1 sees other data");
    ensure!(snapshot(&r2)? == snap, "read-only handle 2 sees other data");
    // A writer opens beside readers; a second one is still refused.
    let w = Database::open(&p).or_fail("a read-write open beside read-only handles")?;
    expect_err!(
        Database::open(&p),
        "a second writer beside a writer and readers",
        CoreError::DatabaseLocked { path } if path == &p
    )?;
    drop(r1);
    drop(r2);
    ensure!(snapshot(&w)? == snap, "data changed");
    usable(&w)
}

/// Kills the child process when dropped (also when a check fails).
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The libtest name of the table-driven test (module path without the crate).
fn this_test_name() -> String {
    let module = module_path!();
    let module = module.split_once("::").map_or(module, |(_, m)| m);
    format!("{module}::bad_input_table")
}

/// Another process holding the lock: `DatabaseLocked` in every mode; once
/// it is killed, open works and the data is intact.
fn lock_cross_process(dir: &Path) -> Outcome {
    let p = dir.join("db");
    let snap = make_db(&p)?;
    let exe = std::env::current_exe().or_fail("current_exe")?;
    let child = Command::new(exe)
        .args([
            "--exact",
            &this_test_name(),
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &p)
        .env_remove("CAIRN_REPORT_FILE")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .or_fail("spawn the lock-holding child")?;
    let mut child = KillOnDrop(child);
    let stdout = child.0.stdout.take().ok_or("child has no stdout")?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if line.contains(READY) => break,
            Ok(line) => seen.push(line),
            Err(_) => {
                return Err(format!(
                    "the child never printed READY; its output: {seen:?}"
                ))
            }
        }
    }
    let e = expect_err!(
        Database::open(&p),
        "open while another process holds the file",
        CoreError::DatabaseLocked { path } if path == &p
    )?;
    display_has(&e, &[&p.display().to_string()])?;
    let r =
        Database::open_read_only(&p).or_fail("open_read_only beside another process's writer")?;
    ensure!(
        snapshot(&r)? == snap,
        "a reader beside another process's writer sees other data"
    );
    drop(r);
    expect_err!(
        Database::create(&p),
        "create while another process holds the file",
        CoreError::DatabaseLocked { path } if path == &p
    )?;
    child.0.kill().or_fail("kill the child")?;
    child.0.wait().or_fail("wait for the child")?;
    let db = Database::open(&p).or_fail("open after the holder was killed")?;
    ensure!(snapshot(&db)? == snap, "data changed after the holder died");
    usable(&db)
}

/// Child side of [`lock_cross_process`]: hold the lock until stdin closes
/// or 20 s pass.
fn hold_lock_as_child(path: &str) {
    let db = match Database::open(path) {
        Ok(db) => db,
        Err(e) => {
            println!("child: open failed: {e}");
            return;
        }
    };
    println!("\n{READY}");
    let _ = std::io::stdout().flush();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = std::io::stdin().read_to_end(&mut sink);
        let _ = tx.send(());
    });
    let _ = rx.recv_timeout(Duration::from_secs(20));
    drop(db);
}

/// A read-only handle refuses writes with `ReadOnly` and keeps reading.
fn read_only_handle(dir: &Path) -> Outcome {
    let p = dir.join("db");
    let snap = make_db(&p)?;
    let before = read_file(&p)?;
    let ro = Database::open_read_only(&p).or_fail("open_read_only")?;
    let e = expect_err!(
        ro.begin_write(),
        "begin_write on a read-only handle",
        CoreError::ReadOnly
    )?;
    display_has(&e, &["read-only"])?;
    expect_err!(
        ro.compact(),
        "compact on a read-only handle",
        CoreError::ReadOnly
    )?;
    match ro.sync() {
        Ok(()) | Err(CoreError::ReadOnly) => {}
        Err(e) => return Err(format!("sync on a read-only handle: {e:?}")),
    }
    ensure!(snapshot(&ro)? == snap, "read-only handle sees other data");
    integrity_ok(&ro)?;
    expect_err!(
        ro.begin_write(),
        "begin_write on a read-only handle again",
        CoreError::ReadOnly
    )?;
    ro.close().or_fail("close read-only")?;
    ensure!(
        read_file(&p)? == before,
        "a read-only handle changed the file"
    );
    let db = Database::open(&p).or_fail("open read-write afterwards")?;
    usable(&db)
}

// ---------------------------------------------------------------- driver

type CaseFn = Box<dyn Fn(&Path) -> Outcome>;

fn cases() -> Vec<(String, CaseFn)> {
    let mut v: Vec<(String, CaseFn)> = Vec::new();
    for ps in [512usize, 4096, 32768] {
        v.push((
            format!("key limit, page size {ps}"),
            Box::new(move |d| key_limit(d, ps)),
        ));
    }
    v.push((
        "value limit and empty values".into(),
        Box::new(value_limit_and_empty_values),
    ));
    v.push((
        "large value (100 MiB)".into(),
        Box::new(large_value_100_mib),
    ));
    v.push(("table names".into(), Box::new(table_names)));
    v.push(("table misuse".into(), Box::new(table_misuse)));
    v.push(("type decoding".into(), Box::new(type_decoding)));
    v.push(("page sizes".into(), Box::new(page_sizes)));
    v.push(("cache_size(0)".into(), Box::new(cache_size_zero)));
    v.push(("append order".into(), Box::new(append_order)));
    v.push(("max readers".into(), Box::new(max_readers)));
    v.push(("file size limit".into(), Box::new(file_size_limit)));
    v.push((
        "file size limit error fields".into(),
        Box::new(file_size_limit_fields),
    ));
    v.push((
        "file never exceeds its limit".into(),
        Box::new(file_never_exceeds_limit),
    ));
    v.push((
        "file size limit at create".into(),
        Box::new(file_size_limit_at_create),
    ));
    v.push(("not a database".into(), Box::new(not_a_database)));
    v.push(("header damage and versions".into(), Box::new(header_damage)));
    v.push(("lock, same process".into(), Box::new(lock_same_process)));
    v.push(("lock, another process".into(), Box::new(lock_cross_process)));
    v.push(("read-only handle".into(), Box::new(read_only_handle)));
    v
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "<non-string panic payload>".into()
    }
}

#[test]
fn bad_input_table() {
    if let Ok(path) = std::env::var(CHILD_ENV) {
        hold_lock_as_child(&path);
        return;
    }
    let cases = cases();
    let n = cases.len();
    let mut failures: Vec<String> = Vec::new();
    let mut panics = 0usize;
    for (name, run) in &cases {
        let dir = tempfile::tempdir().expect("tempdir");
        match catch_unwind(AssertUnwindSafe(|| run(dir.path()))) {
            Ok(Ok(())) => {}
            Ok(Err(msg)) => failures.push(format!("{name}: {msg}")),
            Err(payload) => {
                panics += 1;
                failures.push(format!("{name}: PANIC: {}", panic_message(&*payload)));
            }
        }
    }
    let documented = if failures.is_empty() {
        "all".to_string()
    } else {
        format!("{}/{n}", n - failures.len())
    };
    crate::common::report(&format!(
        "bad-input: cases={n} documented={documented} panics={panics}"
    ));
    for f in &failures {
        eprintln!("bad-input FAILED: {f}");
    }
    assert_eq!(panics, 0, "panics: {failures:#?}");
    assert!(failures.is_empty(), "failed cases: {failures:#?}");
}
