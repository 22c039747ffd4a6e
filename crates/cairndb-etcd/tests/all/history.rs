//! Properties of concurrent clients (threads, each its own connection):
//! - single keys are linearizable: a history of reads and read-modify-write
//!   transactions on a few registers is checked by a small Wing–Gong
//!   search (as porcupine does): some order of the operations, consistent
//!   with real time, explains every value read;
//! - transactions are serializable: bank transfers between accounts keep
//!   the total constant in every snapshot, and the final balances are the
//!   initial ones plus exactly the transfers that committed (each logged in
//!   its own transaction).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use cairndb_etcd::Error;

use crate::common::{cluster, connect, Rng};

/// One operation on one register, with the times it was called and
/// answered (`None`: the outcome is unknown, so it may have taken effect
/// at any time after its call, or never).
#[derive(Debug, Clone)]
struct Op {
    call: u128,
    ret: Option<u128>,
    kind: Kind,
}

#[derive(Debug, Clone, PartialEq)]
enum Kind {
    Read(Option<u64>),
    /// Read `seen` and wrote `wrote`, atomically.
    Rmw {
        seen: Option<u64>,
        wrote: u64,
    },
}

/// Whether `ops` on a register starting at `None` is linearizable.
fn linearizable(ops: &[Op]) -> bool {
    assert!(
        ops.len() <= 128,
        "the search keeps its set of done operations in a u128"
    );
    let all_known: u128 = ops
        .iter()
        .enumerate()
        .filter(|(_, o)| o.ret.is_some())
        .fold(0, |m, (i, _)| m | 1 << i);
    let mut seen = HashSet::new();
    let mut stack = vec![(0u128, None::<u64>)];
    while let Some((done, state)) = stack.pop() {
        if done & all_known == all_known {
            return true;
        }
        if !seen.insert((done, state)) {
            continue;
        }
        // An operation may go next if none still pending returned before it was called.
        let first_ret = ops
            .iter()
            .enumerate()
            .filter(|(i, _)| done & 1 << i == 0)
            .filter_map(|(_, o)| o.ret)
            .min()
            .unwrap_or(u128::MAX);
        for (i, op) in ops.iter().enumerate() {
            if done & 1 << i != 0 || op.call > first_ret {
                continue;
            }
            let next = match op.kind {
                Kind::Read(v) if v == state => state,
                Kind::Rmw { seen, wrote } if seen == state => Some(wrote),
                _ => continue,
            };
            stack.push((done | 1 << i, next));
        }
    }
    false
}

#[test]
fn the_checker_accepts_a_linear_history_and_refuses_a_stale_read() {
    let op = |call, ret, kind| Op { call, ret, kind };
    let ok = [
        op(
            0,
            Some(10),
            Kind::Rmw {
                seen: None,
                wrote: 1,
            },
        ),
        op(5, Some(20), Kind::Read(Some(1))),
        op(5, Some(8), Kind::Read(None)), // concurrent with the write
        op(
            30,
            None,
            Kind::Rmw {
                seen: Some(1),
                wrote: 2,
            },
        ), // unknown outcome
        op(40, Some(50), Kind::Read(Some(1))),
    ];
    assert!(linearizable(&ok));
    let stale = [
        op(
            0,
            Some(10),
            Kind::Rmw {
                seen: None,
                wrote: 1,
            },
        ),
        op(11, Some(20), Kind::Read(None)), // after the write returned
    ];
    assert!(!linearizable(&stale));
    let lost_update = [
        op(
            0,
            Some(10),
            Kind::Rmw {
                seen: None,
                wrote: 1,
            },
        ),
        op(
            0,
            Some(10),
            Kind::Rmw {
                seen: None,
                wrote: 2,
            },
        ),
    ];
    assert!(!linearizable(&lost_update));
}

const THREADS: u64 = 4;
const OPS_PER_THREAD: u64 = 30;
const REGISTERS: u64 = 2;

#[test]
fn concurrent_single_key_histories_are_linearizable() {
    let Some(c) = cluster("concurrent_single_key_histories_are_linearizable") else {
        return;
    };
    let url = c.url("linear");
    let origin = Instant::now();
    let seed = Rng::new("concurrent_single_key_histories_are_linearizable").next();
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let url = url.clone();
            thread::spawn(move || {
                let db = connect(&url);
                let mut rng = Rng::with_seed(seed ^ t.wrapping_mul(0x9E37_79B9));
                let mut history = Vec::new();
                for i in 0..OPS_PER_THREAD {
                    let reg = rng.below(REGISTERS);
                    let key = format!("r{reg}");
                    let call = origin.elapsed().as_nanos();
                    let (kind, outcome) = if rng.below(2) == 0 {
                        let r = db.begin_read().and_then(|rx| match rx.open_table("reg") {
                            Ok(t) => t.get(key.as_bytes()),
                            Err(Error::TableDoesNotExist(_)) => Ok(None),
                            Err(e) => Err(e),
                        });
                        match r {
                            Ok(v) => (Kind::Read(v.map(|b| decode(&b))), Ok(())),
                            Err(e) => (Kind::Read(None), Err(e)),
                        }
                    } else {
                        let wrote = t * 1000 + i + 1;
                        let mut seen = None;
                        let r = db.begin_write().and_then(|tx| {
                            let table = tx.open_table("reg")?;
                            seen = table.get(key.as_bytes())?.map(|b| decode(&b));
                            table.insert(key.as_bytes(), &wrote.to_be_bytes())?;
                            tx.commit()
                        });
                        (Kind::Rmw { seen, wrote }, r.map(|_| ()))
                    };
                    let ret = origin.elapsed().as_nanos();
                    match outcome {
                        Ok(()) => history.push((
                            reg,
                            Op {
                                call,
                                ret: Some(ret),
                                kind,
                            },
                        )),
                        Err(Error::CommitIndeterminate { .. }) => history.push((
                            reg,
                            Op {
                                call,
                                ret: None,
                                kind,
                            },
                        )),
                        // A conflict did not happen: nothing to record.
                        Err(Error::Conflict { .. }) => {}
                        Err(e) => panic!("thread {t} op {i}: {e}"),
                    }
                }
                history
            })
        })
        .collect();
    let mut per_register: BTreeMap<u64, Vec<Op>> = BTreeMap::new();
    for h in handles {
        for (reg, op) in h.join().unwrap() {
            per_register.entry(reg).or_default().push(op);
        }
    }
    for (reg, ops) in &per_register {
        let writes = ops
            .iter()
            .filter(|o| matches!(o.kind, Kind::Rmw { .. }))
            .count();
        eprintln!(
            "register {reg}: {} operations, {writes} committed writes",
            ops.len()
        );
        assert!(
            linearizable(ops),
            "register {reg}: history not linearizable: {ops:#?}"
        );
    }
}

fn decode(b: &[u8]) -> u64 {
    u64::from_be_bytes(b.try_into().expect("an 8-byte register value"))
}

const ACCOUNTS: u64 = 5;
const INITIAL: i64 = 100;
const TRANSFERS_PER_THREAD: u64 = 25;
const TRANSFER_THREADS: u64 = 3;
const SNAPSHOTS: u64 = 40;

fn balance(v: Option<Vec<u8>>) -> i64 {
    v.map(|b| String::from_utf8(b).unwrap().parse().unwrap())
        .unwrap_or(0)
}

#[test]
fn bank_transfers_are_serializable() {
    let Some(c) = cluster("bank_transfers_are_serializable") else {
        return;
    };
    let url = c.url("bank");
    let db = connect(&url);
    let tx = db.begin_write().unwrap();
    let t = tx.open_table("acct").unwrap();
    for a in 0..ACCOUNTS {
        t.insert(a.to_string().as_bytes(), INITIAL.to_string().as_bytes())
            .unwrap();
    }
    tx.commit().unwrap();
    let seed = Rng::new("bank_transfers_are_serializable").next();
    let deadline = Instant::now() + Duration::from_secs(60);
    let conflicts = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let movers: Vec<_> = (0..TRANSFER_THREADS)
        .map(|th| {
            let url = url.clone();
            let conflicts = conflicts.clone();
            thread::spawn(move || {
                let db = connect(&url);
                let mut rng = Rng::with_seed(seed ^ (th + 1).wrapping_mul(0x9E37_79B9));
                let mut acked = Vec::new();
                for i in 0..TRANSFERS_PER_THREAD {
                    assert!(Instant::now() < deadline, "transfers took too long");
                    let from = rng.below(ACCOUNTS);
                    let to = (from + 1 + rng.below(ACCOUNTS - 1)) % ACCOUNTS;
                    let want = 1 + rng.below(30) as i64;
                    let id = format!("{th}/{i:03}");
                    let mut attempts = 0;
                    let moved = db
                        .run_in_transaction(|tx| {
                            attempts += 1;
                            let t = tx.open_table("acct")?;
                            let a = balance(t.get(from.to_string().as_bytes())?);
                            let b = balance(t.get(to.to_string().as_bytes())?);
                            let amount = want.min(a);
                            t.insert(
                                from.to_string().as_bytes(),
                                (a - amount).to_string().as_bytes(),
                            )?;
                            t.insert(
                                to.to_string().as_bytes(),
                                (b + amount).to_string().as_bytes(),
                            )?;
                            tx.open_table("log")?.insert(
                                id.as_bytes(),
                                format!("{from} {to} {amount}").as_bytes(),
                            )?;
                            Ok(amount)
                        })
                        .unwrap_or_else(|e| panic!("transfer {id}: {e}"));
                    conflicts.fetch_add(attempts - 1, std::sync::atomic::Ordering::Relaxed);
                    acked.push((id, from, to, moved));
                }
                acked
            })
        })
        .collect();
    let auditor = {
        let url = url.clone();
        thread::spawn(move || {
            let db = connect(&url);
            for s in 0..SNAPSHOTS {
                let rx = db.begin_read().unwrap();
                let t = rx.open_table("acct").unwrap();
                // One get per account: each reads at the snapshot's revision.
                let total: i64 = (0..ACCOUNTS)
                    .map(|a| balance(t.get(a.to_string().as_bytes()).unwrap()))
                    .sum();
                assert_eq!(
                    total,
                    INITIAL * ACCOUNTS as i64,
                    "snapshot {s} at {}",
                    rx.revision()
                );
                thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let mut acked = Vec::new();
    for m in movers {
        acked.extend(m.join().unwrap());
    }
    auditor.join().unwrap();

    let rx = db.begin_read().unwrap();
    let log = rx.open_table("log").unwrap().range(..).unwrap();
    assert_eq!(
        log.len(),
        acked.len(),
        "every acknowledged transfer logged once"
    );
    let mut expected = vec![INITIAL; ACCOUNTS as usize];
    for (id, from, to, amount) in &acked {
        let entry = log
            .iter()
            .find(|(k, _)| k == id.as_bytes())
            .expect("logged");
        assert_eq!(
            entry.1,
            format!("{from} {to} {amount}").into_bytes(),
            "transfer {id}"
        );
        expected[*from as usize] -= amount;
        expected[*to as usize] += amount;
    }
    let t = rx.open_table("acct").unwrap();
    let actual: Vec<i64> = (0..ACCOUNTS)
        .map(|a| balance(t.get(a.to_string().as_bytes()).unwrap()))
        .collect();
    eprintln!(
        "bank: {} transfers, {} conflicts retried, balances {actual:?}",
        acked.len(),
        conflicts.load(std::sync::atomic::Ordering::Relaxed)
    );
    assert_eq!(
        actual, expected,
        "balances are the committed transfers applied exactly once"
    );
    assert!(actual.iter().all(|b| *b >= 0));
}
