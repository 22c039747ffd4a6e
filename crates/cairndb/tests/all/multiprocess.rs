//! One writer and many readers on one file, in one process and in several
//! (FORMAT.md, "Sharing a file between processes"): readers see the
//! writer's commits, never part of one, and a snapshot stays whole while
//! the writer rewrites and frees the pages it reads.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cairndb::{CoreError, Database, ReadableTable, TableDefinition};

const DATA: TableDefinition<u64, &[u8]> = TableDefinition::new("data");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

/// The value round `round` gives key `k`: its length varies (some values out
/// of line, so commits rewrite trees and free pages rather than only log),
/// and every byte names the key and the round.
fn value(k: u64, round: u64) -> Vec<u8> {
    // Most rounds' values fit the commit log (up to 2 KiB); every third
    // round's reach past it, so that round writes trees and a slot.
    let span = if round.is_multiple_of(3) { 2600 } else { 2000 };
    let len = ((k * 131 + round * 977) % span) as usize + 8;
    let mut v = vec![(k as u8) ^ (round as u8); len];
    v[..8].copy_from_slice(&round.to_le_bytes());
    v
}

/// Writes round `round`: every key `0..keys` gets `value(k, round)`, in
/// `batches` commits, then META "round" = `round` in the last one.
fn write_round(db: &Database, keys: u64, round: u64, batches: u64) {
    let per = keys.div_ceil(batches);
    for b in 0..batches {
        let txn = db.begin_write().unwrap();
        {
            let mut t = txn.open_table(DATA).unwrap();
            for k in b * per..((b + 1) * per).min(keys) {
                t.insert(k, value(k, round).as_slice()).unwrap();
            }
            if b + 1 == batches {
                txn.open_table(META)
                    .unwrap()
                    .insert("round", &round)
                    .unwrap();
            }
        }
        txn.commit().unwrap();
    }
}

/// Checks one snapshot: the round it names is whole, every key holds that
/// round's value. Returns the round.
fn check_snapshot(db: &Database, keys: u64) -> Result<u64, String> {
    let r = db.begin_read().map_err(|e| e.to_string())?;
    let round = match r.open_table(META) {
        Ok(m) => m
            .get("round")
            .map_err(|e| e.to_string())?
            .map_or(0, |g| g.value()),
        Err(CoreError::TableNotFound(_)) => return Ok(0),
        Err(e) => return Err(e.to_string()),
    };
    if round == 0 {
        return Ok(0);
    }
    let t = r.open_table(DATA).map_err(|e| e.to_string())?;
    // Every key holds a value of `round` or, written after the snapshot's
    // last whole round began, of `round + 1` — but a snapshot is taken
    // between commits, and each round ends with the commit that names it,
    // so keys of batches after the named round's last commit may hold
    // `round + 1` only if that round is under way; check both and that the
    // bytes match their round exactly.
    let mut seen = 0;
    for item in t.iter().map_err(|e| e.to_string())? {
        let (k, v) = item.map_err(|e| e.to_string())?;
        let (k, v) = (k.value(), v.value());
        let got = u64::from_le_bytes(v[..8].try_into().map_err(|_| "short value")?);
        if got != round && got != round + 1 {
            return Err(format!(
                "key {k}: round {got} in a snapshot of round {round}"
            ));
        }
        if v != value(k, got).as_slice() {
            return Err(format!(
                "key {k}: the bytes of round {got} are wrong (torn or reused page)"
            ));
        }
        seen += 1;
    }
    if seen != keys {
        return Err(format!("{seen} keys in round {round}, {keys} expected"));
    }
    Ok(round)
}

/// Every entry of DATA in snapshot `r`.
fn entries(r: &cairndb::ReadTransaction) -> Vec<(u64, Vec<u8>)> {
    r.open_table(DATA)
        .unwrap()
        .iter()
        .unwrap()
        .map(|i| {
            let (k, v) = i.unwrap();
            (k.value(), v.value().to_vec())
        })
        .collect()
}

#[test]
fn a_read_only_handle_beside_the_writer_sees_its_commits_and_keeps_its_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.cairn");
    let keys = 300;
    let w = Database::builder().page_size(1024).create(&path).unwrap();
    write_round(&w, keys, 1, 3);
    // Before this build, a read-only open beside a writer was refused.
    let r = Database::open_read_only(&path).unwrap();
    assert_eq!(check_snapshot(&r, keys).unwrap(), 1);
    // A second writer is still refused, in this process as in any other.
    assert!(matches!(
        Database::open(&path),
        Err(CoreError::DatabaseLocked { .. })
    ));
    // A snapshot held across many rounds that rewrite and free every page
    // it reads: it must stay whole (the writer must not reuse its pages).
    let held = r.begin_read().unwrap();
    let first = entries(&held);
    for round in 2..=12 {
        write_round(&w, keys, round, 2);
        // New snapshots see the newest round.
        assert_eq!(check_snapshot(&r, keys).unwrap(), round, "round {round}");
    }
    let again = entries(&held);
    assert_eq!(first, again, "the held snapshot changed under its reader");
    drop(held);
    // With the reader gone, the writer reuses pages again: the file stops
    // growing.
    write_round(&w, keys, 13, 2);
    let grown = std::fs::metadata(&path).unwrap().len();
    // A handle that is open but reads nothing pins nothing.
    let idle = Database::open_read_only(&path).unwrap();
    for round in 14..=30 {
        write_round(&w, keys, round, 2);
    }
    let after = std::fs::metadata(&path).unwrap().len();
    assert!(
        after <= grown + grown / 2,
        "the file grew from {grown} to {after} bytes with no reader holding pages"
    );
    assert_eq!(check_snapshot(&r, keys).unwrap(), 30);
    // Compaction counts live read transactions of other handles, not
    // handles that are merely open.
    w.compact().unwrap();
    assert_eq!(check_snapshot(&idle, keys).unwrap(), 30);
    assert_eq!(check_snapshot(&r, keys).unwrap(), 30);
}

const CHILD_ENV: &str = "CAIRN_MULTIPROCESS_READER";
const TEST_NAME: &str = "multiprocess::reader_processes_check_snapshots_while_a_writer_commits";

/// A reader process: takes snapshots for `secs` seconds and checks each;
/// prints `SNAP round` per snapshot and exits 1 on a violation.
fn reader_child(path: &str, keys: u64, secs: u64) {
    let db = match Database::open_read_only(path) {
        Ok(db) => db,
        Err(e) => {
            println!("ERR open: {e}");
            std::process::exit(2);
        }
    };
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut last = 0;
    while Instant::now() < deadline {
        match check_snapshot(&db, keys) {
            Ok(round) => {
                if round < last {
                    println!("ERR round went back from {last} to {round}");
                    std::process::exit(1);
                }
                last = round;
                println!("SNAP {round}");
            }
            Err(e) => {
                println!("ERR {e}");
                std::process::exit(1);
            }
        }
    }
    std::process::exit(0);
}

/// Runs test `test` of this binary again as a child process, in the role
/// the environment variable `env` (naming the database `path`) selects;
/// its stdout is piped (and its stdin, if `stdin`).
fn spawn_child(test: &str, env: &str, path: &std::path::Path, stdin: bool) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(env, path)
        .stdin(if stdin { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Waits for a `reader_child` and checks it: a clean exit, no `ERR` line;
/// returns the rounds of its snapshots (`SNAP round` lines).
fn reader_rounds(c: &mut std::process::Child) -> Vec<u64> {
    let out = BufReader::new(c.stdout.take().unwrap());
    let lines: Vec<String> = out.lines().map_while(Result::ok).collect();
    let status = c.wait().unwrap();
    // (The child's libtest prints around its lines.)
    let errors: Vec<&String> = lines.iter().filter(|l| l.contains("ERR ")).collect();
    assert!(
        status.success() && errors.is_empty(),
        "a reader process failed ({status}): {errors:?}"
    );
    lines
        .iter()
        .filter_map(|l| l.split("SNAP ").nth(1)?.trim().parse().ok())
        .collect()
}

#[test]
fn reader_processes_check_snapshots_while_a_writer_commits() {
    let keys = 200;
    if let Ok(path) = std::env::var(CHILD_ENV) {
        reader_child(&path, keys, 3);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("procs.cairn");
    let w = Database::builder().page_size(1024).create(&path).unwrap();
    write_round(&w, keys, 1, 2);
    let spawn = || spawn_child(TEST_NAME, CHILD_ENV, &path, false);
    let mut children: Vec<_> = (0..3).map(|_| spawn()).collect();
    // One more, killed (SIGKILL) while it reads: its slot must not hold
    // pages forever.
    let mut doomed = spawn();
    let started = Instant::now();
    let mut round = 1;
    let mut killed = false;
    while started.elapsed() < Duration::from_secs(4) && round < 400 {
        round += 1;
        write_round(&w, keys, round, 2);
        if !killed && started.elapsed() > Duration::from_millis(800) {
            doomed.kill().unwrap();
            killed = true;
        }
    }
    let _ = doomed.kill();
    doomed.wait().unwrap();
    for c in children.iter_mut() {
        let rounds = reader_rounds(c);
        assert!(
            rounds.len() > 5,
            "a reader took only {} snapshots",
            rounds.len()
        );
        assert!(
            rounds.last().copied().unwrap_or(0) > 1,
            "a reader never saw a commit after it opened: {rounds:?}"
        );
    }
    // Every reader is gone: the writer reuses pages, and the file is whole.
    let grown = std::fs::metadata(&path).unwrap().len();
    for _ in 0..20 {
        round += 1;
        write_round(&w, keys, round, 2);
    }
    let after = std::fs::metadata(&path).unwrap().len();
    assert!(
        after <= grown + grown / 2,
        "the file grew from {grown} to {after} bytes after every reader left (a dead reader's slot still holds pages?)"
    );
    assert_eq!(check_snapshot(&w, keys).unwrap(), round);
    let report = w.check_integrity().unwrap();
    assert!(report.is_ok(), "{report:?}");
}

const WAITER_ENV: &str = "CAIRN_MULTIPROCESS_WAITER";
const WAITER_TEST: &str = "multiprocess::a_waiting_reader_process_wakes_when_the_writer_commits";
const STAMP: TableDefinition<&str, u64> = TableDefinition::new("stamp");

fn now_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// A waiting reader process: waits for `n` commits with `wait_for_commit`
/// and prints, for each, how long after the writer stamped it the wait
/// returned (`WOKE micros`).
fn waiter_child(path: &str, n: usize) {
    let db = Database::open_read_only(path).unwrap();
    let mut after = db.latest_commit();
    println!("READY");
    for _ in 0..n {
        let got = db.wait_for_commit(after, Duration::from_secs(20));
        let woke = now_micros();
        if got <= after {
            println!("ERR no commit within 20 s");
            std::process::exit(1);
        }
        after = got;
        let r = db.begin_read().unwrap();
        let stamp = r
            .open_table(STAMP)
            .unwrap()
            .get("t")
            .unwrap()
            .map_or(0, |g| g.value());
        println!("WOKE {}", woke.saturating_sub(stamp));
    }
    std::process::exit(0);
}

/// A reader process blocked in `wait_for_commit` is woken by the writer's
/// commit (a futex on the lock file's counter), not by its fallback poll
/// (one second): most wakeups come well within a quarter of it.
#[test]
fn a_waiting_reader_process_wakes_when_the_writer_commits() {
    let n = 10;
    if let Ok(path) = std::env::var(WAITER_ENV) {
        waiter_child(&path, n);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wake.cairn");
    let w = Database::create(&path).unwrap();
    let stamp = |w: &Database| {
        let txn = w.begin_write().unwrap();
        txn.open_table(STAMP)
            .unwrap()
            .insert("t", &now_micros())
            .unwrap();
        txn.commit().unwrap();
    };
    stamp(&w);
    let mut child = spawn_child(WAITER_TEST, WAITER_ENV, &path, false);
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    for l in lines.by_ref() {
        if l.unwrap().contains("READY") {
            break;
        }
    }
    // In lockstep: a commit, then the child's report of its wakeup, so no
    // two commits fall in one wait.
    let mut out = Vec::new();
    for _ in 0..n {
        // Let the child block in its wait first.
        std::thread::sleep(Duration::from_millis(300));
        stamp(&w);
        match lines.next() {
            Some(Ok(l)) => out.push(l),
            _ => break,
        }
    }
    let status = child.wait().unwrap();
    out.extend(lines.map_while(Result::ok));
    assert!(status.success(), "the waiter failed: {out:?}");
    let woke: Vec<u64> = out
        .iter()
        .filter_map(|l| l.split("WOKE ").nth(1)?.trim().parse().ok())
        .collect();
    assert_eq!(woke.len(), n, "{out:?}");
    let prompt = woke.iter().filter(|&&us| us < 250_000).count();
    assert!(
        prompt >= n - 2,
        "wakeups (µs after the commit): {woke:?} — the waiter waits for its poll, not the writer's wake"
    );
}

const WRITER_ENV: &str = "CAIRN_MULTIPROCESS_WRITER";
const WRITER_TEST: &str =
    "multiprocess::readers_never_see_less_than_the_writer_acknowledged_and_survive_its_kill";

/// A writer process: writes rounds until it is killed, durable ones (log
/// commits and checkpoints) acknowledged by printing `ACK round` after
/// `commit` returns; every fourth round is not durable and not acknowledged.
fn writer_child(path: &str, keys: u64) {
    let db = Database::open(path).unwrap();
    let mut round = check_snapshot(&db, keys).unwrap();
    loop {
        round += 1;
        let durable = !round.is_multiple_of(4);
        let per = keys.div_ceil(2);
        for b in 0..2 {
            let txn = db.begin_write().unwrap();
            if !durable {
                txn.set_durability(cairndb::Durability::None);
            }
            {
                let mut t = txn.open_table(DATA).unwrap();
                for k in b * per..((b + 1) * per).min(keys) {
                    t.insert(k, value(k, round).as_slice()).unwrap();
                }
                if b == 1 {
                    txn.open_table(META)
                        .unwrap()
                        .insert("round", &round)
                        .unwrap();
                }
            }
            txn.commit().unwrap();
        }
        if durable {
            println!("ACK {round}");
        }
    }
}

/// A writer process commits continuously (log commits, checkpoints and
/// non-durable commits) while reader processes check every snapshot; this
/// process reads too and checks that no snapshot it begins is older than
/// what the writer acknowledged before it began (no stale read). The writer
/// is killed with SIGKILL mid-run: readers keep reading whole snapshots
/// with no writer, see at least its last acknowledged round, and a new
/// writer recovers beside them.
#[test]
fn readers_never_see_less_than_the_writer_acknowledged_and_survive_its_kill() {
    let keys = 120;
    if let Ok(path) = std::env::var(WRITER_ENV) {
        writer_child(&path, keys);
        return;
    }
    if let Ok(path) = std::env::var(CHILD_ENV) {
        reader_child(&path, keys, 4);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("acked.cairn");
    {
        let w = Database::builder().page_size(1024).create(&path).unwrap();
        write_round(&w, keys, 1, 2);
    }
    let spawn = |env: &str| spawn_child(WRITER_TEST, env, &path, false);
    let mut writer = spawn(WRITER_ENV);
    let acked = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(1));
    let acks = {
        let acked = acked.clone();
        let out = BufReader::new(writer.stdout.take().unwrap());
        std::thread::spawn(move || {
            for l in out.lines().map_while(Result::ok) {
                if let Some(r) = l.split("ACK ").nth(1).and_then(|r| r.trim().parse().ok()) {
                    acked.store(r, std::sync::atomic::Ordering::SeqCst);
                }
            }
        })
    };
    let mut readers: Vec<_> = (0..2).map(|_| spawn(CHILD_ENV)).collect();
    // Read until the writer has written a while, then kill it mid-commit.
    let r = Database::open_read_only(&path).unwrap();
    let started = Instant::now();
    let mut looks = 0;
    while started.elapsed() < Duration::from_millis(1500) {
        let before = acked.load(std::sync::atomic::Ordering::SeqCst);
        let round = check_snapshot(&r, keys).unwrap();
        assert!(
            round >= before,
            "stale read: a snapshot begun after the writer acknowledged round {before} shows round {round}"
        );
        looks += 1;
    }
    writer.kill().unwrap();
    writer.wait().unwrap();
    acks.join().unwrap();
    let last = acked.load(std::sync::atomic::Ordering::SeqCst);
    assert!(last > 10, "the writer acknowledged only {last} rounds");
    assert!(looks > 10, "only {looks} snapshots checked");
    // No writer: snapshots are whole and hold every acknowledged round.
    let after_kill = check_snapshot(&r, keys).unwrap();
    assert!(
        after_kill >= last,
        "round {after_kill} after the kill, {last} acknowledged"
    );
    // A new writer recovers beside the readers and goes on.
    let w = Database::open(&path).unwrap();
    let recovered = check_snapshot(&w, keys).unwrap();
    assert!(
        recovered >= last,
        "recovered round {recovered}, {last} acknowledged"
    );
    for round in recovered + 1..recovered + 6 {
        write_round(&w, keys, round, 2);
        assert_eq!(check_snapshot(&r, keys).unwrap(), round);
    }
    for c in readers.iter_mut() {
        let snaps = reader_rounds(c).len();
        assert!(snaps > 5, "a reader took only {snaps} snapshots");
    }
    let report = w.check_integrity().unwrap();
    assert!(report.is_ok(), "{report:?}");
}

const PINNED_ENV: &str = "CAIRN_MULTIPROCESS_PINNED";
const PINNED_TEST: &str =
    "multiprocess::a_pinned_reader_keeps_its_snapshot_while_the_file_stops_growing";

/// A pinned reader process: takes one snapshot, prints `PINNED round`,
/// holds it until a line arrives on stdin, then checks every entry of it
/// is still byte for byte what it first read (`SAME` or `ERR`).
fn pinned_child(path: &str, keys: u64) {
    // A small page cache: the second read goes to the file, where a reused
    // page would show (as a checksum mismatch or other bytes).
    let db = Database::builder()
        .cache_size(16 * 1024)
        .open_read_only(path)
        .unwrap();
    let r = db.begin_read().unwrap();
    let first = entries(&r);
    let round = r
        .open_table(META)
        .unwrap()
        .get("round")
        .unwrap()
        .map_or(0, |g| g.value());
    if first.len() as u64 != keys {
        println!("ERR {} keys", first.len());
        std::process::exit(1);
    }
    println!("PINNED {round}");
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    if entries(&r) == first {
        println!("SAME");
    } else {
        println!("ERR the pinned snapshot changed");
        std::process::exit(1);
    }
    std::process::exit(0);
}

/// Growth of the file over `rounds` rounds after a warm-up, in bytes.
fn growth(w: &Database, path: &std::path::Path, keys: u64, from: u64, rounds: u64) -> (u64, u64) {
    for round in from..from + 10 {
        write_round(w, keys, round, 2);
    }
    let warm = std::fs::metadata(path).unwrap().len();
    for round in from + 10..from + 10 + rounds {
        write_round(w, keys, round, 2);
    }
    (warm, std::fs::metadata(path).unwrap().len())
}

/// A reader pinned on an old snapshot — in this process, then in another
/// one — keeps that snapshot whole while the writer rewrites every key
/// hundreds of times, and the file stops growing: the pages written and
/// freed after the snapshot are reused (only the snapshot's own pages are
/// held), where an oldest-reader rule would grow the file with every
/// commit.
#[test]
fn a_pinned_reader_keeps_its_snapshot_while_the_file_stops_growing() {
    let keys = 150;
    if let Ok(path) = std::env::var(PINNED_ENV) {
        pinned_child(&path, keys);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pinned.cairn");
    let w = Database::builder().page_size(1024).create(&path).unwrap();
    write_round(&w, keys, 1, 2);
    // `CAIRN_PINNED_ROUNDS` runs it longer (docs/reliability.md: 60,000
    // rounds hold a reader pinned for minutes).
    let rounds = std::env::var("CAIRN_PINNED_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(300u64);

    // In this process: an old reader, and after some rounds a newer one
    // (which holds pages the old one never saw: born after it, freed
    // after the new one began).
    // (Its page cache is small, so its reads at the end go to the file.)
    let w = {
        drop(w);
        Database::builder()
            .page_size(1024)
            .cache_size(16 * 1024)
            .open(&path)
            .unwrap()
    };
    let held0 = w.begin_read().unwrap();
    let first0 = entries(&held0);
    for round in 2..40 {
        write_round(&w, keys, round, 2);
    }
    let held1 = w.begin_read().unwrap();
    let first1 = entries(&held1);
    let (warm, after) = growth(&w, &path, keys, 40, rounds);
    assert!(
        after <= warm + warm / 2,
        "with readers pinned in this process the file grew from {warm} to {after} bytes over {rounds} rounds"
    );
    assert_eq!(entries(&held0), first0, "the old pinned snapshot changed");
    assert_eq!(entries(&held1), first1, "the newer pinned snapshot changed");
    drop(held1);

    // In another process, pinned after the old local reader: only its
    // range in the lock file keeps its pages.
    let round = check_snapshot(&w, keys).unwrap();
    let mut child = spawn_child(PINNED_TEST, PINNED_ENV, &path, true);
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let pinned = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|l| l.split("PINNED ").nth(1).map(|r| r.trim().to_string()))
        .expect("the reader process pinned nothing");
    assert_eq!(pinned, round.to_string());
    let (warm, after) = growth(&w, &path, keys, round + 1, rounds);
    use std::io::Write as _;
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "check").unwrap();
    drop(stdin);
    let out: Vec<String> = lines.map_while(Result::ok).collect();
    let status = child.wait().unwrap();
    assert!(
        status.success() && out.iter().any(|l| l.contains("SAME")),
        "the pinned reader process: {status} {out:?}"
    );
    assert!(
        after <= warm + warm / 2,
        "with a reader pinned in another process the file grew from {warm} to {after} bytes over {rounds} rounds"
    );
    assert_eq!(entries(&held0), first0, "the old pinned snapshot changed");
    drop(held0);
    let report = w.check_integrity().unwrap();
    assert!(report.is_ok(), "{report:?}");
}
