//! Crash points (RELIABILITY suite 2, first cut): for short workloads on the
//! simulated file, crash at every mutating I/O operation, build every kind of
//! crash image from the unsynced writes, recover with the real engine, and
//! check the oracle: the recovered state is the last acknowledged commit or
//! that plus the whole in-flight commit, integrity holds, and a new commit
//! works. A crash during recovery is covered because recovery writes nothing
//! (asserted below: opening a crash image issues no write).

use std::collections::BTreeMap;
use std::sync::Arc;

use cairndb::storage::sim::{Fault, OpFilter, OpKind, SimFile};
use cairndb::{Builder, Database, Durability, ReadableTable, TableDefinition};

const T: TableDefinition<&[u8], &[u8]> = TableDefinition::new("t");
type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// One step of a workload: the changes of one transaction.
#[derive(Clone)]
enum Op {
    Put(Vec<u8>, Vec<u8>),
    Del(Vec<u8>),
}

struct Workload {
    name: &'static str,
    page_size: usize,
    txns: Vec<Vec<Op>>,
    durability: Durability,
}

fn apply(m: &mut Model, ops: &[Op]) {
    for op in ops {
        match op {
            Op::Put(k, v) => {
                m.insert(k.clone(), v.clone());
            }
            Op::Del(k) => {
                m.remove(k);
            }
        }
    }
}

/// Applies one transaction's operations to the table.
fn write_ops(
    t: &mut cairndb::Table<'_, &'static [u8], &'static [u8]>,
    ops: &[Op],
) -> cairndb::Result<()> {
    for op in ops {
        match op {
            Op::Put(k, v) => {
                t.insert(k.as_slice(), v.as_slice())?;
            }
            Op::Del(k) => {
                t.remove(k.as_slice())?;
            }
        }
    }
    Ok(())
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}

fn workloads() -> Vec<Workload> {
    let puts = |r: std::ops::Range<u32>, vlen: usize| -> Vec<Op> {
        r.map(|i| Op::Put(key(i), vec![i as u8; vlen])).collect()
    };
    vec![
        Workload {
            name: "first-commit-single-put",
            page_size: 512,
            txns: vec![puts(0..1, 10)],
            durability: Durability::Immediate,
        },
        Workload {
            name: "page-split",
            page_size: 512,
            txns: vec![puts(0..10, 20), puts(10..40, 20)],
            durability: Durability::Immediate,
        },
        Workload {
            name: "delete-to-empty",
            page_size: 512,
            txns: vec![puts(0..30, 20), (0..30).map(|i| Op::Del(key(i))).collect()],
            durability: Durability::Immediate,
        },
        Workload {
            name: "large-value",
            page_size: 512,
            txns: vec![puts(0..2, 3000), vec![Op::Put(key(0), vec![9; 5000])]],
            durability: Durability::Immediate,
        },
        Workload {
            name: "free-page-reuse",
            page_size: 512,
            txns: vec![
                puts(0..20, 30),
                puts(0..20, 31),
                puts(0..20, 32),
                puts(5..25, 33),
            ],
            durability: Durability::Immediate,
        },
        Workload {
            name: "non-durable-chain-reuses-young-pages",
            page_size: 512,
            txns: (0..8u8)
                .map(|r| (0..25).map(|i| Op::Put(key(i), vec![r; 40])).collect())
                .collect(),
            durability: Durability::None,
        },
        Workload {
            name: "non-durable-suffix",
            page_size: 512,
            txns: vec![puts(0..10, 20), puts(10..20, 20), puts(0..5, 21)],
            durability: Durability::None,
        },
    ]
}

/// Runs a workload on `sim`; returns the models after each acknowledged
/// commit (index 0 = empty) and the number of commits attempted.
fn run(w: &Workload, sim: &Arc<SimFile>) -> (Vec<Model>, usize) {
    let mut acked = vec![Model::new()];
    let Ok(db) =
        Builder::new()
            .page_size(w.page_size)
            .open_with_storage(Box::new(sim.clone()), true, false)
    else {
        return (acked, 0);
    };
    let mut model = Model::new();
    for (i, ops) in w.txns.iter().enumerate() {
        let Ok(txn) = db.begin_write() else {
            return (acked, i + 1);
        };
        txn.set_durability(w.durability);
        let ok = (|| -> cairndb::Result<()> {
            let mut t = txn.open_table(T)?;
            write_ops(&mut t, ops)?;
            Ok(())
        })();
        if ok.is_err() {
            return (acked, i + 1);
        }
        if txn.commit().is_err() {
            return (acked, i + 1);
        }
        apply(&mut model, ops);
        acked.push(model.clone());
    }
    if w.durability == Durability::None && db.sync().is_err() {
        return (acked, w.txns.len());
    }
    (acked, w.txns.len())
}

fn read_all(db: &Database) -> cairndb::Result<Model> {
    let r = db.begin_read()?;
    let t = match r.open_table(T) {
        Ok(t) => t,
        Err(cairndb::Error::TableNotFound(_)) => return Ok(Model::new()),
        Err(e) => return Err(e),
    };
    let mut m = Model::new();
    for e in t.iter()? {
        let (k, v) = e?;
        m.insert(k.value().to_vec(), v.value().to_vec());
    }
    Ok(m)
}

#[test]
fn crash_at_every_io_operation() {
    let seed = crate::common::seed("crash-enum");
    let (mut points, mut images, mut lost, mut partial, mut integrity, mut panics) =
        (0, 0, 0, 0, 0, 0);
    let ws = workloads();
    for w in &ws {
        let clean = Arc::new(SimFile::new());
        clean.set_fault(None, OpFilter::Mutating);
        let (all, _) = run(w, &clean);
        assert_eq!(
            all.len(),
            w.txns.len() + 1,
            "{}: fault-free run failed",
            w.name
        );
        let total_ops = clean.counted_ops();
        for k in 0..total_ops {
            points += 1;
            let sim = Arc::new(SimFile::new());
            sim.set_fault(Some(Fault::CrashAt(k)), OpFilter::Mutating);
            let (acked, attempted) = run(w, &sim);
            // Allowed outcomes: any acknowledged state at or after the last
            // durable point, or the in-flight commit whole.
            let last = acked.len() - 1;
            let mut allowed: Vec<Model> = Vec::new();
            let first_allowed = if w.durability == Durability::None {
                0
            } else {
                last
            };
            allowed.extend(acked[first_allowed..].iter().cloned());
            if attempted > last && attempted <= w.txns.len() {
                let mut m = acked[last].clone();
                apply(&mut m, &w.txns[last]);
                allowed.push(m);
            }
            for img in sim.crash_images(seed ^ k) {
                images += 1;
                let outcome = std::panic::catch_unwind(|| {
                    let file = Arc::new(SimFile::from_image(img.bytes.clone()));
                    let writes_before = file.op_count(OpKind::Write);
                    let db = match Builder::new().open_with_storage(
                        Box::new(file.clone()),
                        false,
                        false,
                    ) {
                        Ok(db) => db,
                        // Nothing acknowledged yet: the file may not be a database.
                        Err(_) if last == 0 => return (true, true, true),
                        Err(e) => panic!(
                            "{} crash at op {k}, image {}: open failed: {e}",
                            w.name, img.name
                        ),
                    };
                    assert_eq!(
                        file.op_count(OpKind::Write),
                        writes_before,
                        "recovery must not write"
                    );
                    let state = read_all(&db);
                    let ok_state = state.as_ref().is_ok_and(|s| allowed.contains(s));
                    let not_partial = state.is_ok();
                    let ok_int = db.check_integrity().is_ok_and(|r| r.is_ok());
                    // A new commit works.
                    let txn = db.begin_write().expect("begin after recovery");
                    txn.open_table(T)
                        .expect("open")
                        .insert(b"after".as_slice(), b"x".as_slice())
                        .expect("insert");
                    txn.commit().expect("commit after recovery");
                    (ok_state, not_partial, ok_int)
                });
                match outcome {
                    Ok((s, p, i)) => {
                        if !s {
                            eprintln!(
                                "{}: crash at op {k}, image {}: state not allowed",
                                w.name, img.name
                            );
                            lost += 1;
                        }
                        if !p {
                            partial += 1;
                        }
                        if !i {
                            eprintln!(
                                "{}: crash at op {k}, image {}: integrity failure",
                                w.name, img.name
                            );
                            integrity += 1;
                        }
                    }
                    Err(_) => panics += 1,
                }
            }
        }
    }
    crate::common::report(&format!(
        "crash-enum: workloads={} crash_points={points} images={images} lost_acked={lost} partial_commit_visible={partial} integrity_failures={integrity} panics={panics}",
        ws.len()
    ));
    assert_eq!((lost, partial, integrity, panics), (0, 0, 0, 0));
}

/// Runs a workload, stopping at the first error; then checks the handle is
/// poisoned (a failed write or flush must refuse further writes). Returns
/// the acknowledged states and whether the poisoning check failed.
fn run_until_error(w: &Workload, sim: &Arc<SimFile>) -> (Vec<Model>, bool) {
    let mut acked = vec![Model::new()];
    let Ok(db) =
        Builder::new()
            .page_size(w.page_size)
            .open_with_storage(Box::new(sim.clone()), true, false)
    else {
        return (acked, false);
    };
    let mut model = Model::new();
    for ops in &w.txns {
        let res = (|| -> cairndb::Result<()> {
            let txn = db.begin_write()?;
            txn.set_durability(w.durability);
            {
                let mut t = txn.open_table(T)?;
                write_ops(&mut t, ops)?;
            }
            txn.commit()?;
            Ok(())
        })();
        if res.is_err() {
            let poisoned = matches!(
                db.begin_write().map(|_| ()),
                Err(cairndb::Error::Poisoned { .. })
            );
            return (acked, !poisoned);
        }
        apply(&mut model, ops);
        acked.push(model.clone());
    }
    (acked, false)
}

/// I/O errors (RELIABILITY suite 5): every mutating I/O operation of every
/// workload fails once, and sticky. No panic; the handle is poisoned after
/// the failure; a commit never reports success after a failed flush (its
/// state is in the durable image); reopening recovers an allowed state.
#[test]
fn io_error_at_every_operation() {
    use cairndb::storage::sim::FaultKind;
    let (mut points, mut panics, mut wrong_state, mut ok_after_failed_sync) = (0, 0, 0, 0);
    for w in &workloads() {
        let clean = Arc::new(SimFile::new());
        clean.set_fault(None, OpFilter::Mutating);
        run(w, &clean);
        let total = clean.counted_ops();
        for sticky in [false, true] {
            for k in 0..total {
                points += 1;
                let outcome = std::panic::catch_unwind(|| {
                    let sim = Arc::new(SimFile::new());
                    sim.set_fault(
                        Some(Fault::FailAt {
                            op: k,
                            kind: FaultKind::Eio,
                            sticky,
                        }),
                        OpFilter::Mutating,
                    );
                    let (acked, not_poisoned) = run_until_error(w, &sim);
                    let last = acked.len() - 1;
                    // Power loss now: only synced data survives.
                    let image = sim.durable_image();
                    if image.is_empty() {
                        return (
                            not_poisoned,
                            last > 0 && w.durability == Durability::Immediate,
                            false,
                        );
                    }
                    let file = Arc::new(SimFile::from_image(image));
                    let db = match Builder::new().open_with_storage(Box::new(file), false, false) {
                        Ok(db) => db,
                        Err(_) => {
                            return (
                                not_poisoned,
                                last > 0 && w.durability == Durability::Immediate,
                                false,
                            )
                        }
                    };
                    let state = read_all(&db).ok();
                    let durable_lost = w.durability == Durability::Immediate
                        && state.as_ref().is_none_or(|s| {
                            !acked[last..].contains(s) && {
                                let mut m = acked[last].clone();
                                last < w.txns.len() && {
                                    apply(&mut m, &w.txns[last]);
                                    &m != s
                                }
                            }
                        });
                    let integrity_bad = !db.check_integrity().is_ok_and(|r| r.is_ok());
                    (not_poisoned, durable_lost, integrity_bad)
                });
                match outcome {
                    Ok((np, lost, bad)) => {
                        if np || bad {
                            eprintln!("{}: fail op {k} sticky={sticky}: not_poisoned={np} integrity_bad={bad}", w.name);
                            wrong_state += 1;
                        }
                        if lost {
                            eprintln!(
                                "{}: fail op {k} sticky={sticky}: acknowledged commit not durable",
                                w.name
                            );
                            ok_after_failed_sync += 1;
                        }
                    }
                    Err(_) => panics += 1,
                }
            }
        }
    }
    crate::common::report(&format!(
        "ioerr: fault_points={points} panics={panics} wrong_state={wrong_state} ok_after_failed_sync={ok_after_failed_sync}"
    ));
    assert_eq!((panics, wrong_state, ok_after_failed_sync), (0, 0, 0));
}

/// Lying fsync (RELIABILITY suite 11): `sync_data` reports success but keeps
/// nothing. The engine may then lose commits, but after a power loss it must
/// never show data that was never a committed state, and never panic.
#[test]
fn lying_fsync_never_returns_wrong_data() {
    let seed = crate::common::seed("fsync-lies");
    let (mut images, mut silent_wrong, mut panics) = (0, 0, 0);
    for w in &workloads() {
        let clean = Arc::new(SimFile::new());
        clean.set_fault(None, OpFilter::Mutating);
        run(w, &clean);
        let total = clean.counted_ops();
        for k in (0..=total).step_by(2) {
            let sim = Arc::new(SimFile::new());
            sim.set_lying_sync(true);
            sim.set_fault((k < total).then_some(Fault::CrashAt(k)), OpFilter::Mutating);
            let (acked, attempted) = run(w, &sim);
            // Any committed state may show, including older ones; nothing else.
            let mut allowed = acked.clone();
            if attempted > acked.len() - 1 && attempted <= w.txns.len() {
                let mut m = acked[acked.len() - 1].clone();
                apply(&mut m, &w.txns[acked.len() - 1]);
                allowed.push(m);
            }
            for img in sim.crash_images(seed ^ k) {
                images += 1;
                let outcome = std::panic::catch_unwind(|| {
                    let file = Arc::new(SimFile::from_image(img.bytes.clone()));
                    match Builder::new().open_with_storage(Box::new(file), false, true) {
                        Ok(db) => match read_all(&db) {
                            Ok(state) => allowed.contains(&state),
                            Err(e) => e.is_corruption(),
                        },
                        Err(_) => true,
                    }
                });
                match outcome {
                    Ok(true) => {}
                    Ok(false) => {
                        eprintln!(
                            "{}: lying fsync, crash at {k}, image {}: wrong data",
                            w.name, img.name
                        );
                        silent_wrong += 1;
                    }
                    Err(_) => panics += 1,
                }
            }
        }
    }
    crate::common::report(&format!(
        "fsync-lies: images={images} silent_wrong={silent_wrong} panics={panics}"
    ));
    assert_eq!((silent_wrong, panics), (0, 0));
}

/// ENOSPC at every point where the file grows (RELIABILITY suite 9, first
/// cut): the device is full past the current size. The failing commit reports
/// an error, the previous commit stays intact, and once space returns (reopen
/// without the limit) a new commit works.
#[test]
fn no_space_at_every_growth_point() {
    let (mut points, mut corrupted, mut recovered) = (0, 0, 0);
    for w in &workloads() {
        let clean = Arc::new(SimFile::new());
        clean.set_fault(None, OpFilter::Mutating);
        run(w, &clean);
        let full = clean.current_image().len() as u64;
        // Device sizes from tiny to just short of what the workload needs.
        for cap in (0..full).step_by((w.page_size * 16).max(1)) {
            points += 1;
            let sim = Arc::new(SimFile::new());
            sim.set_fault(Some(Fault::NoSpaceAbove(cap)), OpFilter::Mutating);
            let (acked, _) = run(w, &sim);
            let last = acked.len() - 1;
            // Space returns: reopen the same file without the limit.
            let img = sim.current_image();
            if img.is_empty() {
                recovered += 1;
                continue;
            }
            let file = Arc::new(SimFile::from_image(img));
            let Ok(db) = Builder::new().open_with_storage(Box::new(file), false, false) else {
                if last > 0 {
                    corrupted += 1;
                }
                continue;
            };
            let ok_state = read_all(&db).is_ok_and(|s| {
                s == acked[last] || {
                    let mut m = acked[last].clone();
                    last < w.txns.len() && {
                        apply(&mut m, &w.txns[last]);
                        m == s
                    }
                }
            }) || w.durability == Durability::None;
            let txn = db.begin_write().unwrap();
            txn.open_table(T)
                .unwrap()
                .insert(b"after".as_slice(), b"x".as_slice())
                .unwrap();
            let committed = txn.commit().is_ok();
            if ok_state && committed && db.check_integrity().is_ok_and(|r| r.is_ok()) {
                recovered += 1;
            } else {
                eprintln!(
                    "{}: ENOSPC above {cap}: state_ok={ok_state} committed={committed}",
                    w.name
                );
                corrupted += 1;
            }
        }
    }
    crate::common::report(&format!(
        "limits: enospc_points={points} corrupted={corrupted} recovered={recovered}"
    ));
    assert_eq!(corrupted, 0);
}
