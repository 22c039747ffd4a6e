//! Limits (suite 9, docs/reliability.md; the parts beyond ENOSPC in `crash.rs`):
//!
//! - the configured maximum file size, hit at every growth point: the commit
//!   that would pass it fails with `CoreError::FileSizeLimit` and changes
//!   nothing, the file never grows past the maximum, the handle stays usable,
//!   and the previous commit is intact after reopening;
//! - a real child process under a small file-size rlimit (`ulimit -f`, with
//!   SIGXFSZ ignored so the kernel reports EFBIG): writes that cross the
//!   limit come back short and then fail. The child must report a typed
//!   storage error (never die by a signal or a panic), refuse further writes
//!   (poisoned), and every commit it acknowledged must be there on reopen.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;

use cairndb::storage::sim::SimFile;
use cairndb::{Builder, CoreError, Database, ReadableTable, TableDefinition};

const DATA: TableDefinition<u64, &[u8]> = TableDefinition::new("data");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

fn value(n: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| (n as usize * 31 + i) as u8).collect()
}

fn read_data(db: &Database) -> Result<BTreeMap<u64, Vec<u8>>, CoreError> {
    let r = db.begin_read()?;
    let t = match r.open_table(DATA) {
        Ok(t) => t,
        Err(CoreError::TableNotFound(_)) => return Ok(BTreeMap::new()),
        Err(e) => return Err(e),
    };
    let mut m = BTreeMap::new();
    for e in t.iter()? {
        let (k, v) = e?;
        m.insert(k.value(), v.value().to_vec());
    }
    Ok(m)
}

#[test]
fn max_file_size_at_every_growth_point() {
    const PS: usize = 512;
    let (mut points, mut wrong, mut grew_past) = (0, 0, 0);
    // Caps from a nearly empty file to one that holds a few hundred pages,
    // not page-aligned half of the time.
    for cap_pages in (8u64..400).step_by(13) {
        let cap = cap_pages * PS as u64 + if cap_pages % 2 == 0 { 100 } else { 0 };
        points += 1;
        let sim = Arc::new(SimFile::new());
        let db = match Builder::new()
            .page_size(PS)
            .max_file_size(cap)
            .open_with_storage(Box::new(sim.clone()), true, false)
        {
            Ok(db) => db,
            Err(CoreError::FileSizeLimit { .. }) => continue,
            Err(e) => panic!("create under a {cap}-byte cap: {e}"),
        };
        let mut model = BTreeMap::new();
        let mut hit = false;
        for n in 0..2000u64 {
            // Inserts with some overwrites and deletes, so pages are freed.
            let res = (|| -> Result<(), CoreError> {
                let txn = db.begin_write()?;
                {
                    let mut t = txn.open_table(DATA)?;
                    t.insert(n, value(n, 60 + (n as usize * 7) % 200).as_slice())?;
                    if n % 4 == 3 {
                        t.remove(n - 2)?;
                    }
                }
                txn.commit()?;
                Ok(())
            })();
            match res {
                Ok(()) => {
                    model.insert(n, value(n, 60 + (n as usize * 7) % 200));
                    if n % 4 == 3 {
                        model.remove(&(n - 2));
                    }
                }
                Err(CoreError::FileSizeLimit { requested, max }) => {
                    // The maximum is reported rounded down to whole pages.
                    assert!(
                        max <= cap && max + PS as u64 > cap,
                        "max {max} for cap {cap}"
                    );
                    assert!(requested > max);
                    hit = true;
                    break;
                }
                Err(e) => panic!("cap {cap}: commit {n}: expected FileSizeLimit, got {e}"),
            }
        }
        assert!(hit, "cap {cap}: the limit was never reached");
        if sim.current_image().len() as u64 > cap {
            grew_past += 1;
        }
        // The handle is not poisoned: reads work and the state is unchanged.
        let ok_state = read_data(&db).is_ok_and(|s| s == model);
        assert!(!db.is_poisoned(), "cap {cap}: a size limit must not poison");
        // Freeing space makes room again: delete half, then insert again.
        let freed = (|| -> Result<(), CoreError> {
            let txn = db.begin_write()?;
            {
                let mut t = txn.open_table(DATA)?;
                let keys: Vec<u64> = model.keys().copied().step_by(2).collect();
                for k in keys {
                    t.remove(k)?;
                }
            }
            txn.commit()?;
            Ok(())
        })();
        match freed {
            Ok(()) => {
                let keys: Vec<u64> = model.keys().copied().step_by(2).collect();
                for k in keys {
                    model.remove(&k);
                }
            }
            // The delete itself may need one more page than the cap allows.
            Err(CoreError::FileSizeLimit { .. }) => {}
            Err(e) => panic!("cap {cap}: delete after the limit: {e}"),
        }
        drop(db);
        let db = Builder::new()
            .open_with_storage(
                Box::new(SimFile::from_image(sim.current_image())),
                false,
                false,
            )
            .unwrap();
        let reopened_ok = read_data(&db).is_ok_and(|s| s == model)
            && db.check_integrity().is_ok_and(|r| r.is_ok());
        if !ok_state || !reopened_ok {
            eprintln!("cap {cap}: state_ok={ok_state} reopened_ok={reopened_ok}");
            wrong += 1;
        }
    }
    crate::common::report(&format!(
        "limits-max-size: caps={points} wrong_state={wrong} grew_past_cap={grew_past}"
    ));
    assert_eq!((wrong, grew_past), (0, 0));
}

const CHILD_ENV: &str = "CAIRN_RLIMIT_CHILD";
const TEST_NAME: &str = "limits::file_size_rlimit_in_a_child";
const CHILD_PAGE: usize = 4096;

/// The child: open the file and commit 3 KB values until something fails;
/// report each acknowledged commit, then the error and whether the handle
/// refuses writes afterwards.
fn child(path: &str) {
    let db = match Database::open(path) {
        Ok(db) => db,
        Err(e) => {
            println!("OPENERR {e}");
            return;
        }
    };
    let start = db
        .begin_read()
        .ok()
        .and_then(|r| {
            r.open_table(META)
                .ok()
                .and_then(|t| t.get("n").ok().flatten().map(|g| g.value()))
        })
        .unwrap_or(0);
    for n in start + 1..start + 5000 {
        let res = (|| -> Result<(), CoreError> {
            let txn = db.begin_write()?;
            txn.open_table(DATA)?.insert(n, value(n, 3000).as_slice())?;
            txn.open_table(META)?.insert("n", &n)?;
            txn.commit()?;
            Ok(())
        })();
        match res {
            Ok(()) => println!("ACK {n}"),
            Err(e) => {
                let storage = matches!(e, CoreError::Storage(_));
                let poisoned = matches!(
                    db.begin_write().map(|_| ()),
                    Err(CoreError::Poisoned { .. })
                );
                println!("ERR storage={storage} poisoned={poisoned} {e}");
                return;
            }
        }
    }
    println!("DONE");
}

#[test]
fn file_size_rlimit_in_a_child() {
    if let Ok(path) = std::env::var(CHILD_ENV) {
        child(&path);
        return;
    }
    let bash_ok = Command::new("bash")
        .arg("-c")
        .arg("true")
        .status()
        .is_ok_and(|s| s.success());
    if !bash_ok {
        eprintln!("limits-efbig: skipped (no bash to set the rlimit)");
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (mut runs, mut acked_total, mut lost, mut untyped, mut not_poisoned) = (0, 0, 0, 0, 0);
    // Limits in KiB relative to the file's size when the child starts:
    // below it (writes inside the file cross the limit: short writes), and
    // above it (growing the file fails), not page-aligned.
    for (i, delta_kib) in [-9i64, -3, 1, 5, 23, 70, 301].into_iter().enumerate() {
        let path = dir.path().join(format!("rlimit{i}.cairn"));
        // A starting file with some data and free space.
        {
            let db = Builder::new().page_size(CHILD_PAGE).create(&path).unwrap();
            let txn = db.begin_write().unwrap();
            {
                let mut t = txn.open_table(DATA).unwrap();
                for n in 0..150u64 {
                    t.insert(10_000 + n, value(n, 1000).as_slice()).unwrap();
                }
            }
            txn.commit().unwrap();
            let txn = db.begin_write().unwrap();
            txn.open_table(DATA)
                .unwrap()
                .remove_range(10_000..10_100)
                .unwrap();
            txn.commit().unwrap();
        }
        let size = std::fs::metadata(&path).unwrap().len() as i64;
        let limit_kib = (size / 1024 + delta_kib).max(1);
        runs += 1;
        let mut child = Command::new("bash")
            .arg("-c")
            .arg(r#"ulimit -f "$1" && trap '' XFSZ && shift && exec "$@""#)
            .arg("rlimit")
            .arg(limit_kib.to_string())
            .arg(&exe)
            .args(["--exact", TEST_NAME, "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, &path)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut last_ack = 0u64;
        let mut err_line = None;
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(n) = line.strip_prefix("ACK ") {
                last_ack = n.parse().unwrap();
                acked_total += 1;
            } else if line.starts_with("ERR ") || line.starts_with("OPENERR ") {
                err_line = Some(line);
            }
        }
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "limit {limit_kib} KiB: the child died ({:?}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let err_line =
            err_line.unwrap_or_else(|| panic!("limit {limit_kib} KiB: no error reported"));
        eprintln!("limit {limit_kib} KiB (file {size} B): acked {last_ack}; {err_line}");
        if !err_line.contains("storage=true") && !err_line.starts_with("OPENERR") {
            untyped += 1;
        }
        if err_line.contains("poisoned=false") {
            not_poisoned += 1;
        }
        // Space returns: reopen without the limit; every ACK is there.
        let db = Database::open(&path).unwrap();
        let data = read_data(&db).unwrap();
        let n = db
            .begin_read()
            .unwrap()
            .open_table(META)
            .ok()
            .and_then(|t| t.get("n").unwrap().map(|g| g.value()))
            .unwrap_or(0);
        let all_there = (1..=last_ack).all(|k| data.get(&k) == Some(&value(k, 3000)));
        if n < last_ack || !all_there || !db.check_integrity().unwrap().is_ok() {
            lost += 1;
        }
        let txn = db.begin_write().unwrap();
        txn.open_table(DATA)
            .unwrap()
            .insert(99_999, b"after".as_slice())
            .unwrap();
        txn.commit().unwrap();
    }
    crate::common::report(&format!(
        "limits-efbig: runs={runs} acked={acked_total} lost_acked={lost} untyped_errors={untyped} not_poisoned={not_poisoned} child_crashes=0"
    ));
    assert_eq!((lost, untyped, not_poisoned), (0, 0, 0));
}
