//! kill -9 (suite 3, docs/reliability.md): the test binary re-runs itself as a child
//! that commits in a loop on a real file and prints `ACK n` after each
//! durable commit returns; the parent kills it (SIGKILL) at random moments —
//! some while it is still recovering at open — then reopens and checks that
//! every acknowledged commit is there, that no partial commit is visible
//! (each commit writes a key *and* a matching counter, which must agree), and
//! that integrity holds.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use cairndb::storage::sim::SplitMix64;
use cairndb::CoreError;
use cairndb::{Database, ReadableTable, TableDefinition};

const DATA: TableDefinition<u64, &[u8]> = TableDefinition::new("data");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const CHILD_ENV: &str = "CAIRN_KILL9_CHILD";
const TEST_NAME: &str = "kill9::kill9_at_random_moments";

/// The child: open (recovering if needed) and commit forever.
fn child(path: &str) {
    let Ok(db) = Database::builder().page_size(1024).create(path) else {
        std::process::exit(3);
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
    println!("READY {start}");
    let mut n = start;
    loop {
        n += 1;
        let Ok(txn) = db.begin_write() else {
            std::process::exit(4)
        };
        {
            let Ok(mut d) = txn.open_table(DATA) else {
                std::process::exit(5)
            };
            // Values of varying size, some out of line, and some deletes so
            // pages are freed and reused.
            let len = (n * 37 % 1500) as usize;
            if d.insert(n, vec![n as u8; len].as_slice()).is_err() {
                std::process::exit(6);
            }
            if n % 5 == 0 && d.remove(n - 3).is_err() {
                std::process::exit(6);
            }
            let Ok(mut m) = txn.open_table(META) else {
                std::process::exit(5)
            };
            if m.insert("n", &n).is_err() {
                std::process::exit(6);
            }
        }
        if txn.commit().is_err() {
            std::process::exit(7);
        }
        println!("ACK {n}");
    }
}

#[test]
fn kill9_at_random_moments() {
    if let Ok(path) = std::env::var(CHILD_ENV) {
        child(&path);
        return;
    }
    let seed = crate::common::seed("kill9");
    let kills = crate::common::iters(160);
    let mut rng = SplitMix64(seed);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kill9.cairn");
    let exe = std::env::current_exe().unwrap();
    let (mut acked_total, mut lost, mut partial, mut integrity_failures, mut during_recovery) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut last_acked = 0u64;
    let mut never_created = 0u64;
    for _ in 0..kills {
        let mut child = Command::new(&exe)
            .args(["--exact", TEST_NAME, "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, &path)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let recovery_kill = rng.below(10) == 0;
        if recovery_kill {
            // Kill while it opens (recovery runs before READY).
            std::thread::sleep(Duration::from_micros(rng.below(3000)));
            during_recovery += 1;
        } else {
            let want = 1 + rng.below(20);
            let mut seen = 0;
            for line in lines.by_ref() {
                let Ok(line) = line else { break };
                if let Some(n) = line.strip_prefix("ACK ") {
                    last_acked = n.parse().unwrap();
                    acked_total += 1;
                    seen += 1;
                    if seen >= want {
                        break;
                    }
                }
            }
            // And a little more time, so the kill lands mid-commit.
            std::thread::sleep(Duration::from_micros(rng.below(2000)));
        }
        child.kill().unwrap();
        // Drain what it printed before dying: acknowledgements count.
        for line in lines.map_while(Result::ok) {
            if let Some(n) = line.strip_prefix("ACK ") {
                last_acked = n.parse().unwrap();
                acked_total += 1;
            }
        }
        child.wait().unwrap();
        // Check.
        let db = match Database::open(&path) {
            Ok(db) => db,
            // Killed while creating the file: creation is atomic, so there
            // is no file (never a half-formatted one) — and nothing acked.
            Err(CoreError::NotFound { .. }) if acked_total == 0 => {
                never_created += 1;
                continue;
            }
            Err(e) => panic!("reopen after kill: {e}"),
        };
        let r = db.begin_read().unwrap();
        let n = r
            .open_table(META)
            .ok()
            .and_then(|t| t.get("n").unwrap().map(|g| g.value()))
            .unwrap_or(0);
        if n < last_acked {
            lost += 1;
        }
        if n > 0 {
            let d = r.open_table(DATA).unwrap();
            let latest = d.get(n).unwrap();
            let expect = vec![n as u8; (n * 37 % 1500) as usize];
            if latest.map(|g| g.value().to_vec()) != Some(expect) || d.get(n + 1).unwrap().is_some()
            {
                partial += 1;
            }
        }
        drop(r);
        if !db.check_integrity().unwrap().is_ok() {
            integrity_failures += 1;
        }
        last_acked = last_acked.max(n);
    }
    crate::common::report(&format!(
        "kill9: kills={kills} acked={acked_total} during_recovery={during_recovery} killed_while_creating={never_created} lost_acked={lost} partial_visible={partial} integrity_failures={integrity_failures}"
    ));
    assert_eq!((lost, partial, integrity_failures), (0, 0, 0));
}
