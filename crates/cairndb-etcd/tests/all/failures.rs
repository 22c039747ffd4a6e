//! Properties under member failures:
//! - the leader killed with SIGKILL mid-run and restarted: every commit
//!   acknowledged before, during and after is there afterwards (read
//!   through the restarted member alone), and every commit is whole (both
//!   of its keys or neither);
//! - the leader stopped (SIGSTOP) serves no stale read: a client connected to
//!   it alone gets an error or the newest value, never an older one;
//! - events appended through the leader's SIGKILL and restart (retried with
//!   the same ids when the outcome is unknown) reach a live subscriber
//!   exactly once, positions dense.
//!
//! Also prints the latency of a single-key commit and of a read
//! transaction on the loopback cluster (`--nocapture` shows it).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use cairndb_etcd::{Error, EtcdDatabase, Options};

use crate::common::{cluster, connect};

fn options(timeout_ms: u64) -> Options {
    Options {
        request_timeout: Duration::from_millis(timeout_ms),
        connect_timeout: Duration::from_millis(timeout_ms),
        ..Options::default()
    }
}

const COMMITS: u64 = 150;
const KILL_AT: u64 = 40;
const RESTART_AT: u64 = 90;

#[test]
fn a_killed_and_restarted_member_loses_no_acknowledged_commit() {
    let Some(mut c) = cluster("a_killed_and_restarted_member_loses_no_acknowledged_commit") else {
        return;
    };
    let db = EtcdDatabase::connect_with(&c.url("kill"), options(2000)).unwrap();
    let mut acknowledged = BTreeSet::new();
    let mut unknown = BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(40);
    let mut i = 0;
    let mut failures = 0;
    let mut victim = 0;
    let (mut killed, mut restarted) = (false, false);
    while i < COMMITS && Instant::now() < deadline {
        // (A refused commit is retried with the same i: kill and restart once.)
        if i == KILL_AT && !killed {
            killed = true;
            // The leader: the hardest member to lose (an election, commits in flight).
            victim = c.leader().unwrap();
            c.cluster.kill(victim).unwrap();
        }
        if i == RESTART_AT && !restarted {
            restarted = true;
            c.cluster.restart(victim).unwrap();
        }
        let tx = db.begin_write();
        let outcome = tx.and_then(|tx| {
            let t = tx.open_table("k")?;
            t.insert(format!("a{i:04}").as_bytes(), b"1")?;
            t.insert(format!("b{i:04}").as_bytes(), b"1")?;
            tx.commit()
        });
        match outcome {
            Ok(_) => {
                acknowledged.insert(i);
                i += 1;
            }
            Err(Error::CommitIndeterminate { .. }) => {
                unknown.insert(i);
                i += 1;
            }
            Err(Error::Unavailable { .. } | Error::Conflict { .. }) => {
                failures += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("commit {i}: {e}"),
        }
    }
    assert_eq!(i, COMMITS, "the run did not finish within its time");
    c.cluster.wait_healthy(Duration::from_secs(30)).unwrap();
    eprintln!(
        "kill: {} acknowledged, {} unknown, {failures} refused and retried",
        acknowledged.len(),
        unknown.len()
    );
    // Read through the restarted member alone: it has caught up.
    let member0 = EtcdDatabase::connect_with(&c.url_of(&[victim], "kill"), options(2000)).unwrap();
    let rx = member0.begin_read().unwrap();
    let keys: BTreeSet<Vec<u8>> = rx
        .open_table("k")
        .unwrap()
        .range(..)
        .unwrap()
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    for n in 0..COMMITS {
        let a = keys.contains(format!("a{n:04}").as_bytes());
        let b = keys.contains(format!("b{n:04}").as_bytes());
        assert_eq!(a, b, "commit {n} half applied");
        if acknowledged.contains(&n) {
            assert!(a, "acknowledged commit {n} lost");
        }
    }
    assert_eq!(keys.len() % 2, 0);
    assert!(keys.len() / 2 <= COMMITS as usize);
}

#[test]
fn a_stopped_member_serves_no_stale_read() {
    let Some(mut c) = cluster("a_stopped_member_serves_no_stale_read") else {
        return;
    };
    let all = connect(&c.url("stop"));
    let write = |db: &EtcdDatabase, v: &[u8]| {
        let tx = db.begin_write().unwrap();
        tx.open_table("x").unwrap().insert(b"x", v).unwrap();
        tx.commit().unwrap();
    };
    let read = |db: &EtcdDatabase| -> cairndb_etcd::Result<Option<Vec<u8>>> {
        db.begin_read()?.open_table("x")?.get(b"x")
    };
    write(&all, b"old");
    // The leader: after SIGCONT it still believes it leads until it hears
    // the new term, the moment a local read would be stale.
    let stopped = c.leader().unwrap();
    let others: Vec<usize> = (0..3).filter(|&i| i != stopped).collect();
    let lone = EtcdDatabase::connect_with(&c.url_of(&[stopped], "stop"), options(1000)).unwrap();
    assert_eq!(read(&lone).unwrap(), Some(b"old".to_vec()));

    c.cluster.stop(stopped);
    // If the stopped member led, the others elect a leader first: retry
    // (bounded) while they answer "no leader".
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut wrote = EtcdDatabase::connect(&c.url_of(&others, "stop")).and_then(|db| try_write(&db));
    while let Err(Error::Unavailable { .. } | Error::CommitIndeterminate { .. }) = &wrote {
        assert!(
            Instant::now() < deadline,
            "the majority did not elect a leader: {wrote:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
        wrote = EtcdDatabase::connect(&c.url_of(&others, "stop")).and_then(|db| try_write(&db));
    }
    wrote.unwrap();
    // Stopped: the read fails (times out) or — never here — sees "new".
    match read(&lone) {
        Err(Error::Unavailable { .. }) => {}
        Ok(v) => assert_eq!(v, Some(b"new".to_vec()), "stale read from a stopped member"),
        Err(e) => panic!("unexpected error: {e}"),
    }
    // Continued: every answer is the newest value, and one comes in time.
    c.cluster.cont(stopped);
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut answers = 0;
    while Instant::now() < deadline && answers < 20 {
        if let Ok(v) = read(&lone) {
            assert_eq!(v, Some(b"new".to_vec()), "stale read after SIGCONT");
            answers += 1;
        }
    }
    assert!(answers > 0, "the continued member never answered");
}

fn try_write(db: &EtcdDatabase) -> cairndb_etcd::Result<()> {
    let tx = db.begin_write()?;
    tx.open_table("x")?.insert(b"x", b"new")?;
    tx.commit().map(|_| ())
}

#[test]
fn latency_of_a_single_key_commit_and_a_read() {
    let Some(c) = cluster("latency_of_a_single_key_commit_and_a_read") else {
        return;
    };
    let db = connect(&c.url("latency"));
    let n = 100;
    let median = |mut v: Vec<Duration>| {
        v.sort();
        (v[v.len() / 2], v[v.len() * 9 / 10])
    };
    let mut commits = Vec::new();
    let mut reads = Vec::new();
    for i in 0..n {
        let t = Instant::now();
        let tx = db.begin_write().unwrap();
        tx.open_table("l")
            .unwrap()
            .insert(b"k", format!("{i}").as_bytes())
            .unwrap();
        tx.commit().unwrap();
        commits.push(t.elapsed());
        let t = Instant::now();
        let rx = db.begin_read().unwrap();
        assert!(rx.open_table("l").unwrap().get(b"k").unwrap().is_some());
        reads.push(t.elapsed());
    }
    let (c50, c90) = median(commits);
    let (r50, r90) = median(reads);
    eprintln!(
        "latency on a 3-member loopback cluster, {n} each: single-key write transaction \
         (begin, open_table, insert, commit) median {c50:?} p90 {c90:?}; read transaction \
         (begin, open_table, get) median {r50:?} p90 {r90:?}"
    );
}

const EVENTS: u128 = 120;
const EVENTS_KILL_AT: u128 = 30;
const EVENTS_RESTART_AT: u128 = 70;

/// The event store through the leader's SIGKILL and restart: each append
/// carries its own event id, and one whose outcome is unknown
/// (`CommitIndeterminate`) or refused is retried with the same id (with
/// `ExpectedVersion::Any`: `$ev.ids` finds it if it was written); a
/// subscriber on another client, live from position 0 through the failure
/// (subscribing again from its checkpoint when a read fails), sees every
/// event exactly once, positions dense, and nothing more.
#[test]
fn events_through_a_killed_leader_are_delivered_once_with_no_gap() {
    use cairndb::events::{
        EventData, EventFilter, ExpectedVersion, Position, SubscriptionMessage, Uuid,
    };
    let Some(mut c) = cluster("events_through_a_killed_leader_are_delivered_once_with_no_gap")
    else {
        return;
    };
    let url = c.url("evkill");
    let reader_url = url.clone();
    let reader = std::thread::spawn(move || {
        let db = EtcdDatabase::connect_with(&reader_url, options(2000)).unwrap();
        let ev = db.events();
        let mut sub = ev.subscribe_all(Position(0), EventFilter::all());
        let mut seen: Vec<(u64, Uuid)> = Vec::new();
        let mut resubscribed = 0;
        let deadline = Instant::now() + Duration::from_secs(90);
        while (seen.len() as u128) < EVENTS && Instant::now() < deadline {
            match sub.next_timeout(Duration::from_millis(500)) {
                Ok(Some(SubscriptionMessage::Event(e))) => seen.push((e.position.0, e.id)),
                Ok(_) => {}
                Err(_) => {
                    // Its checkpoint is all it needs to resume.
                    resubscribed += 1;
                    std::thread::sleep(Duration::from_millis(50));
                    sub = ev.subscribe_all(sub.checkpoint(), EventFilter::all());
                }
            }
        }
        // Nothing after the last event.
        let extra = matches!(
            sub.next_timeout(Duration::from_millis(500)),
            Ok(Some(SubscriptionMessage::Event(_)))
        );
        (seen, resubscribed, extra)
    });
    let db = EtcdDatabase::connect_with(&url, options(2000)).unwrap();
    let ev = db.events();
    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut i, mut retried, mut repeats) = (0u128, 0, 0);
    let mut victim = 0;
    let (mut killed, mut restarted) = (false, false);
    while i < EVENTS && Instant::now() < deadline {
        if i == EVENTS_KILL_AT && !killed {
            killed = true;
            victim = c.leader().unwrap();
            c.cluster.kill(victim).unwrap();
        }
        if i == EVENTS_RESTART_AT && !restarted {
            restarted = true;
            c.cluster.restart(victim).unwrap();
        }
        let e = EventData::new("Tick", i.to_le_bytes().to_vec()).with_id(Uuid::from_u128(i + 1));
        match ev.append(&format!("s-{}", i % 4), ExpectedVersion::Any, &[e]) {
            Ok(r) => {
                repeats += usize::from(r.idempotent);
                i += 1;
            }
            Err(Error::CommitIndeterminate { .. } | Error::Unavailable { .. }) => {
                // The same event again: written once whatever happened.
                retried += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("append {i}: {e}"),
        }
    }
    assert_eq!(i, EVENTS, "the run did not finish within its time");
    let (seen, resubscribed, extra) = reader.join().unwrap();
    eprintln!(
        "events kill: {retried} appends retried ({repeats} found already written), \
         {resubscribed} resubscriptions"
    );
    let positions: Vec<u64> = seen.iter().map(|(p, _)| *p).collect();
    assert_eq!(
        positions,
        (0..EVENTS as u64).collect::<Vec<_>>(),
        "dense positions, each once"
    );
    let ids: BTreeSet<u128> = seen.iter().map(|(_, id)| id.as_u128()).collect();
    assert_eq!(ids, (1..=EVENTS).collect(), "every event once");
    assert!(!extra, "no event beyond the appends");
}
