//! Durability: `Durability::Immediate` versus `Durability::None`, and
//! `Database::sync`.
//!
//! * `Immediate` (the default): when `commit()` returns, the commit is on
//!   stable storage. It survives a process crash *and* a power loss (given a
//!   device that honours fsync). Cost: one device flush (fdatasync) per
//!   commit, shared by concurrent committers (group commit). It gives up
//!   nothing but latency.
//! * `None`: the commit is written to the OS and published to readers at
//!   once, but not flushed. It is still crash-*consistent*: a crash can only
//!   lose a suffix of the most recent non-durable commits, each one whole,
//!   never half of one, and never anything an earlier durable commit or
//!   `sync()` covered. What it gives up: the guarantee that this particular
//!   commit survives a crash (power loss, kernel panic; a mere process crash
//!   usually leaves the OS cache intact) until the next durable commit or
//!   `sync()`.
//! * `sync()`: one flush that makes every commit so far durable. Batching
//!   many `None` commits and then calling `sync()` gives the throughput of
//!   unflushed commits with a durability point of your choosing.
//!
//! Run with `cargo run -p cairndb --example durability`.

use std::time::{Duration, Instant};

use cairndb::{Database, Durability, ReadableTable, TableDefinition};

const LOG: TableDefinition<u64, &str> = TableDefinition::new("log");
const COMMITS: u64 = 20;

/// Commits `COMMITS` one-entry transactions starting at key `first`, with
/// the given durability; returns the time taken.
fn commit_each(db: &Database, first: u64, d: Durability) -> cairndb::Result<Duration> {
    let start = Instant::now();
    for i in first..first + COMMITS {
        let txn = db.begin_write()?;
        txn.set_durability(d);
        txn.open_table(LOG)?.insert(i, "entry")?;
        txn.commit()?;
    }
    Ok(start.elapsed())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("durability.cairn");
    let db = Database::create(&path)?;

    // Durable commits: each waits for its own flush.
    let durable = commit_each(&db, 0, Durability::Immediate)?;
    // Non-durable commits: no flush; visible to readers all the same.
    let fast = commit_each(&db, COMMITS, Durability::None)?;
    {
        let read = db.begin_read()?;
        let t = read.open_table(LOG)?;
        assert_eq!(
            t.len(),
            2 * COMMITS,
            "non-durable commits are visible at once"
        );
        assert_eq!(t.last()?.map(|(k, _)| k.value()), Some(2 * COMMITS - 1));
    }
    // One flush makes all of them durable.
    let start = Instant::now();
    db.sync()?;
    let sync = start.elapsed();

    println!(
        "{COMMITS} Immediate commits: {durable:?} ({:?} each)",
        durable / COMMITS as u32
    );
    println!(
        "{COMMITS} None commits:      {fast:?} ({:?} each)",
        fast / COMMITS as u32
    );
    println!("then one sync():       {sync:?}");
    // No timing assertion: a RAM-backed temp dir makes flushes nearly free.

    // A commit that changes nothing writes nothing; with Immediate it still
    // returns only once everything before it is durable.
    let latest = db.latest_commit();
    let txn = db.begin_write()?;
    assert_eq!(txn.commit()?, latest, "an empty commit keeps the latest id");

    // The data outlives the handle (close syncs and marks the file clean).
    db.close()?;
    let db = Database::open(&path)?;
    let report = db.recovery_report();
    println!("reopened: {report:?}");
    assert!(
        report.clean,
        "closed cleanly, so reopened without a full check"
    );
    assert!(report.fell_back.is_none());
    let read = db.begin_read()?;
    let t = read.open_table(LOG)?;
    assert_eq!(t.len(), 2 * COMMITS);
    let keys: Vec<u64> = t
        .iter()?
        .map(|e| e.map(|(k, _)| k.value()))
        .collect::<Result<_, _>>()?;
    assert_eq!(keys, (0..2 * COMMITS).collect::<Vec<_>>());
    println!("durability: ok");
    Ok(())
}
