//! Concurrency: readers on MVCC snapshots in several threads while one
//! writer commits, and `wait_for_commit` as a commit notification.
//!
//! Two accounts start with 500 each; the writer moves money between them in
//! many small transactions. Every reader snapshot must see a total of 1000
//! (never the middle of a transfer), and each reader's snapshots must move
//! forward in time. A watcher thread sleeps in `wait_for_commit` and wakes
//! when new commits are published.
//!
//! Run with `cargo run -p cairndb --example concurrency`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use cairndb::{Database, Durability, ReadableTable, TableDefinition, TxnId};

const ACCOUNTS: TableDefinition<&str, u64> = TableDefinition::new("accounts");
const TOTAL: u64 = 1000;
const TRANSFERS: u64 = 300;
const READERS: usize = 3;

/// Reads both balances in one snapshot and checks the invariant.
fn balances(db: &Database) -> cairndb::Result<(TxnId, u64, u64)> {
    let read = db.begin_read()?;
    let t = read.open_table(ACCOUNTS)?;
    let a = t.get("alice")?.map(|v| v.value()).unwrap_or(0);
    let b = t.get("bob")?.map(|v| v.value()).unwrap_or(0);
    Ok((read.txn_id(), a, b))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let db = Database::create(dir.path().join("concurrency.cairn"))?;
    let txn = db.begin_write()?;
    {
        let mut t = txn.open_table(ACCOUNTS)?;
        t.insert("alice", &500)?;
        t.insert("bob", &500)?;
    }
    let first = txn.commit()?;

    // A snapshot taken now, moved into a thread below: it keeps showing the
    // initial balances however many commits happen meanwhile.
    let initial = db.begin_read()?;

    let done = &AtomicBool::new(false);
    let final_txn = &AtomicU64::new(0);
    let db = &db;

    let (reads, wakeups) = std::thread::scope(|s| -> cairndb::Result<(u64, u64)> {
        // The writer: one transfer per commit. `Durability::None` keeps the
        // example fast; readers see each commit as soon as it is published.
        let writer = s.spawn(|| -> cairndb::Result<()> {
            let mut last = first;
            for i in 0..TRANSFERS {
                let txn = db.begin_write()?;
                txn.set_durability(Durability::None);
                {
                    let mut t = txn.open_table(ACCOUNTS)?;
                    let (from, to) = if i % 3 == 0 {
                        ("bob", "alice")
                    } else {
                        ("alice", "bob")
                    };
                    let f = t.get(from)?.map(|v| v.value()).unwrap_or(0);
                    let amount = (i % 7 + 1).min(f);
                    t.insert(from, &(f - amount))?;
                    let g = t.get(to)?.map(|v| v.value()).unwrap_or(0);
                    t.insert(to, &(g + amount))?;
                }
                last = txn.commit()?;
                if i % 50 == 0 {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            db.sync()?;
            final_txn.store(last.0, Ordering::SeqCst);
            done.store(true, Ordering::SeqCst);
            Ok(())
        });

        // Readers: a fresh snapshot per loop, never blocked by the writer.
        let readers: Vec<_> = (0..READERS)
            .map(|_| {
                s.spawn(|| -> cairndb::Result<u64> {
                    let mut n = 0u64;
                    let mut prev = TxnId(0);
                    loop {
                        let finished = done.load(Ordering::SeqCst);
                        let (txn, a, b) = balances(db)?;
                        assert_eq!(a + b, TOTAL, "snapshot {txn:?} saw a torn transfer");
                        assert!(txn >= prev, "snapshots went back in time");
                        prev = txn;
                        n += 1;
                        if finished {
                            return Ok(n);
                        }
                    }
                })
            })
            .collect();

        // The old snapshot, checked from another thread after the writes.
        let old = s.spawn(move || -> cairndb::Result<()> {
            while !done.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
            let t = initial.open_table(ACCOUNTS)?;
            assert_eq!(t.get("alice")?.map(|v| v.value()), Some(500));
            assert_eq!(t.get("bob")?.map(|v| v.value()), Some(500));
            assert_eq!(initial.txn_id(), first);
            Ok(())
        });

        // The watcher: blocks until a commit newer than the last one it saw
        // (or a timeout), like an event subscription would. Commits that
        // land while it is awake are coalesced into one wake-up.
        let watcher = s.spawn(|| -> u64 {
            let mut seen = first;
            let mut wakeups = 0;
            loop {
                let now = db.wait_for_commit(seen, Duration::from_millis(200));
                if now > seen {
                    wakeups += 1;
                    seen = now;
                }
                let target = final_txn.load(Ordering::SeqCst);
                if target != 0 && seen.0 >= target {
                    return wakeups;
                }
            }
        });

        writer.join().expect("writer thread panicked")?;
        old.join().expect("snapshot thread panicked")?;
        let mut reads = 0;
        for r in readers {
            reads += r.join().expect("reader thread panicked")?;
        }
        let wakeups = watcher.join().expect("watcher thread panicked");
        Ok((reads, wakeups))
    })?;

    let (txn, a, b) = balances(db)?;
    println!("{TRANSFERS} transfers committed, latest commit {txn:?}: alice={a} bob={b}");
    println!("{READERS} readers took {reads} consistent snapshots meanwhile");
    println!("the watcher woke {wakeups} times for {TRANSFERS} commits");
    assert_eq!(a + b, TOTAL);
    assert_eq!(txn.0, first.0 + TRANSFERS, "one commit id per transfer");
    assert!(reads >= READERS as u64);
    assert!((1..=TRANSFERS).contains(&wakeups));
    assert_eq!(db.live_readers(), 0, "every snapshot was released");

    // With no commit, wait_for_commit returns the same id after the timeout.
    let latest = db.latest_commit();
    assert_eq!(
        db.wait_for_commit(latest, Duration::from_millis(20)),
        latest
    );
    // A commit from another thread wakes a waiter before its timeout.
    let woke = std::thread::scope(|s| -> cairndb::Result<TxnId> {
        let waiter = s.spawn(|| db.wait_for_commit(latest, Duration::from_secs(10)));
        std::thread::sleep(Duration::from_millis(20));
        let txn = db.begin_write()?;
        txn.open_table(ACCOUNTS)?.insert("carol", &0)?;
        let id = txn.commit()?;
        let woke = waiter.join().expect("waiter thread panicked");
        assert_eq!(woke, id);
        Ok(woke)
    })?;
    println!("a waiter was notified of commit {woke:?}");
    println!("concurrency: ok");
    Ok(())
}
