//! Crash points (suite 2, docs/reliability.md): for short workloads on the
//! simulated file, crash at every mutating I/O operation, build every kind of
//! crash image from the unsynced writes, recover with the real engine, and
//! check the oracle: the recovered state is the last acknowledged commit or
//! that plus the whole in-flight commit, integrity holds, and a new commit
//! works. A crash during recovery is covered because recovery writes nothing
//! (asserted below: opening a crash image issues no write).

use std::collections::BTreeMap;
use std::sync::Arc;

use cairndb::storage::sim::{Fault, OpFilter, OpKind, SimFile};
use cairndb::CoreError;
use cairndb::{Builder, Database, Durability, ReadableTable, TableDefinition};

/// The table the single-table workloads use; others name their tables.
const T: &str = "t";
/// Table name -> its entries; a table that exists but is empty is present.
type Model = BTreeMap<String, BTreeMap<Vec<u8>, Vec<u8>>>;

/// One change inside a transaction.
#[derive(Clone)]
enum Op {
    Put(&'static str, Vec<u8>, Vec<u8>),
    Del(&'static str, Vec<u8>),
    Create(&'static str),
    Drop(&'static str),
}

/// One step of a workload. Each step that returns Ok is acknowledged.
#[derive(Clone)]
enum Step {
    /// One write transaction with these changes, committed.
    Txn(Vec<Op>),
    /// The same, committed with `Durability::None` whatever the workload's
    /// durability (mixed workloads).
    TxnN(Vec<Op>),
    /// `Database::sync` (no logical change; makes everything durable).
    Sync,
    /// `Database::compact` (no logical change).
    Compact,
    /// `Database::stats` (no logical change; writes a staged commit out).
    Stats,
    /// Start holding a read transaction (pins the pages it sees).
    BeginReader,
    /// End the held read transaction (its pages become reusable).
    EndReader,
}

struct Workload {
    name: &'static str,
    page_size: usize,
    steps: Vec<Step>,
    durability: Durability,
    /// `Builder::overlay_size`: 0 makes non-durable commits stage tree pages.
    overlay: usize,
    /// `Builder::cache_size` (a quarter of it, at least 64 pages, may be
    /// staged before a non-durable commit writes out).
    cache: usize,
}

fn apply(m: &mut Model, step: &Step) {
    let (Step::Txn(ops) | Step::TxnN(ops)) = step else {
        return;
    };
    for op in ops {
        match op {
            Op::Put(t, k, v) => {
                m.entry(t.to_string())
                    .or_default()
                    .insert(k.clone(), v.clone());
            }
            Op::Del(t, k) => {
                if let Some(t) = m.get_mut(*t) {
                    t.remove(k);
                }
            }
            Op::Create(t) => {
                m.entry(t.to_string()).or_default();
            }
            Op::Drop(t) => {
                m.remove(*t);
            }
        }
    }
}

fn def(name: &str) -> TableDefinition<'_, &'static [u8], &'static [u8]> {
    TableDefinition::new(name)
}

/// Applies one transaction's operations.
fn write_ops(txn: &cairndb::WriteTransaction, ops: &[Op]) -> cairndb::Result<()> {
    for op in ops {
        match op {
            Op::Put(t, k, v) => {
                txn.open_table(def(t))?.insert(k.as_slice(), v.as_slice())?;
            }
            Op::Del(t, k) => {
                txn.open_table(def(t))?.remove(k.as_slice())?;
            }
            Op::Create(t) => {
                txn.open_table(def(t))?;
            }
            Op::Drop(t) => {
                txn.delete_table(t)?;
            }
        }
    }
    Ok(())
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}

fn puts_in(t: &'static str, r: std::ops::Range<u32>, vlen: usize) -> Vec<Op> {
    r.map(|i| Op::Put(t, key(i), vec![i as u8; vlen])).collect()
}

fn puts(r: std::ops::Range<u32>, vlen: usize) -> Step {
    Step::Txn(puts_in(T, r, vlen))
}

fn dels(r: std::ops::Range<u32>) -> Step {
    Step::Txn(r.map(|i| Op::Del(T, key(i))).collect())
}

fn workloads() -> Vec<Workload> {
    let d = Durability::Immediate;
    let w = |name, steps| Workload {
        name,
        page_size: 512,
        steps,
        durability: d,
        overlay: 32 << 20,
        cache: 1 << 30,
    };
    vec![
        w("first-commit-single-put", vec![puts(0..1, 10)]),
        w("page-split", vec![puts(0..10, 20), puts(10..40, 20)]),
        w("delete-to-empty", vec![puts(0..30, 20), dels(0..30)]),
        w(
            "merge-after-deletes",
            vec![puts(0..60, 20), dels(10..50), puts(100..103, 20)],
        ),
        w(
            "large-value",
            vec![
                puts(0..2, 3000),
                Step::Txn(vec![Op::Put(T, key(0), vec![9; 5000])]),
            ],
        ),
        w(
            "large-value-shrinks-and-deletes",
            vec![
                puts(0..2, 4000),
                Step::Txn(vec![Op::Put(T, key(0), vec![1; 10]), Op::Del(T, key(1))]),
            ],
        ),
        w(
            "free-page-reuse",
            vec![
                puts(0..20, 30),
                puts(0..20, 31),
                puts(0..20, 32),
                puts(5..25, 33),
            ],
        ),
        w(
            "free-page-reuse-after-reader-ends",
            vec![
                puts(0..20, 30),
                Step::BeginReader,
                puts(0..20, 31),
                puts(0..20, 32),
                Step::EndReader,
                puts(0..20, 33),
                puts(0..20, 34),
            ],
        ),
        w(
            "file-growth",
            // ~100 KiB of 512-byte pages: the file grows through several
            // chunks (64 pages, then by half the file).
            (0..4u32)
                .map(|r| puts(r * 250..(r + 1) * 250, 100))
                .collect(),
        ),
        w(
            "table-create-drop",
            vec![
                Step::Txn(vec![Op::Create("a"), Op::Create("b")]),
                Step::Txn(puts_in("a", 0..30, 20)),
                Step::Txn(vec![Op::Drop("a"), Op::Put("b", key(1), vec![1; 10])]),
                Step::Txn(vec![Op::Create("a"), Op::Drop("b"), Op::Create("c")]),
                Step::Txn(vec![Op::Drop("a"), Op::Drop("c")]),
            ],
        ),
        w(
            "multi-table-commit",
            vec![
                Step::Txn([puts_in("a", 0..15, 30), puts_in("b", 0..15, 30)].concat()),
                Step::Txn(
                    [
                        puts_in("a", 15..30, 30),
                        (0..10).map(|i| Op::Del("b", key(i))).collect(),
                    ]
                    .concat(),
                ),
            ],
        ),
        w(
            "compaction",
            vec![
                puts(0..200, 60),
                dels(20..190),
                Step::Compact,
                puts(500..505, 10),
            ],
        ),
        Workload {
            name: "non-durable-chain-reuses-young-pages",
            page_size: 512,
            steps: (0..8u8)
                .map(|r| Step::Txn((0..25).map(|i| Op::Put(T, key(i), vec![r; 40])).collect()))
                .collect(),
            durability: Durability::None,
            overlay: 0,
            cache: 1 << 30,
        },
        Workload {
            name: "non-durable-suffix",
            page_size: 512,
            steps: vec![puts(0..10, 20), puts(10..20, 20), puts(0..5, 21)],
            durability: Durability::None,
            overlay: 0,
            cache: 1 << 30,
        },
        // Non-durable commits in the overlay, a budget small enough that
        // some commits spill it into the trees, removals of keys that are
        // only in the overlay and of keys in the tree; `sync` at the end.
        Workload {
            name: "non-durable-overlay",
            page_size: 512,
            steps: vec![
                puts(0..12, 20),
                puts(12..30, 30),
                dels(5..15),
                puts(40..44, 20),
                dels(40..42),
                puts(0..8, 22),
            ],
            durability: Durability::None,
            overlay: 1 << 10,
            cache: 1 << 30,
        },
        // The commit log: durable log commits (one with a record over
        // several 512-byte pages), non-durable commits whose records ride in
        // the log until the next durable commit or `sync` writes them.
        w(
            "log-commits-mixed",
            vec![
                puts(0..10, 20),
                puts(10..20, 20),
                Step::TxnN(puts_in(T, 20..25, 30)),
                Step::TxnN((0..3).map(|i| Op::Del(T, key(i))).collect()),
                puts(30..34, 300),
                Step::TxnN(puts_in(T, 40..45, 10)),
                Step::Sync,
                Step::Txn(vec![Op::Put(T, key(50), vec![5; 40]), Op::Del(T, key(30))]),
            ],
        ),
        // Enough one-put durable commits to fill the first 64-page log: the
        // commit that finds it full checkpoints (the overlay goes into the
        // trees under a new slot and a larger log).
        w(
            "log-fills-and-checkpoints",
            std::iter::once(puts(0..5, 20))
                .chain((5..80).map(|i| puts(i..i + 1, 24)))
                .collect(),
        ),
        // Durable log commits with non-durable ones between that spill
        // the overlay (a 1 KiB budget) and stage their pages, each followed
        // by a statistics call that writes the staged commit out under a
        // slot naming a new log: the durable commits after it stay log
        // commits, and a crash anywhere keeps every acknowledged one.
        Workload {
            name: "log-kept-across-stats-write-outs",
            page_size: 512,
            steps: vec![
                puts(0..10, 20),
                puts(10..12, 20),
                Step::TxnN(puts_in(T, 20..40, 40)),
                Step::Stats,
                puts(12..14, 20),
                Step::TxnN((0..6).map(|i| Op::Del(T, key(i))).collect()),
                Step::TxnN(puts_in(T, 40..60, 40)),
                Step::Stats,
                Step::Txn(vec![Op::Put(T, key(70), vec![7; 30]), Op::Del(T, key(20))]),
                puts(14..15, 20),
            ],
            durability: Durability::Immediate,
            overlay: 1 << 10,
            cache: 1 << 30,
        },
        // A commit in the overlay (table "u"), then one past the overlay's
        // per-transaction change count that stages more pages than the
        // stage limit and so is written out with a slot: the slot's trees
        // must hold the earlier overlay commit (a crash may lose both, or
        // the second, never only the first).
        Workload {
            name: "overlay-then-staged-write-out",
            page_size: 512,
            steps: vec![Step::Txn(puts_in("u", 0..3, 10)), puts(0..4200, 8)],
            durability: Durability::None,
            overlay: 32 << 20,
            cache: 64 << 10,
        },
    ]
}

/// Runs one step on `db`.
fn run_step(
    db: &Database,
    step: &Step,
    durability: Durability,
    reader: &mut Option<cairndb::ReadTransaction>,
) -> cairndb::Result<()> {
    match step {
        Step::Txn(ops) | Step::TxnN(ops) => {
            let txn = db.begin_write()?;
            txn.set_durability(if matches!(step, Step::TxnN(_)) {
                Durability::None
            } else {
                durability
            });
            write_ops(&txn, ops)?;
            txn.commit()?;
        }
        Step::Sync => db.sync()?,
        Step::Compact => {
            db.compact()?;
        }
        Step::Stats => {
            db.stats()?;
        }
        Step::BeginReader => *reader = Some(db.begin_read()?),
        Step::EndReader => *reader = None,
    }
    Ok(())
}

/// Whether acknowledging `step` makes everything before it durable.
fn makes_durable(w: &Workload, step: &Step) -> bool {
    match step {
        Step::Txn(_) | Step::Compact => w.durability == Durability::Immediate,
        Step::Sync => true,
        _ => false,
    }
}

/// What a run acknowledged: the models after each acknowledged step (index
/// 0 = empty), the number of steps attempted, and the index of the last
/// acknowledged state known durable (a durable commit or a sync).
struct Ran {
    acked: Vec<Model>,
    attempted: usize,
    durable: usize,
}

/// Runs a workload on `sim`.
fn run(w: &Workload, sim: &Arc<SimFile>) -> Ran {
    let mut ran = Ran {
        acked: vec![Model::new()],
        attempted: 0,
        durable: 0,
    };
    let Ok(db) = Builder::new()
        .page_size(w.page_size)
        .overlay_size(w.overlay)
        .cache_size(w.cache)
        .open_with_storage(Box::new(sim.clone()), true, false)
    else {
        return ran;
    };
    let mut model = Model::new();
    let mut reader = None;
    for (i, step) in w.steps.iter().enumerate() {
        ran.attempted = i + 1;
        if run_step(&db, step, w.durability, &mut reader).is_err() {
            return ran;
        }
        apply(&mut model, step);
        ran.acked.push(model.clone());
        if makes_durable(w, step) {
            ran.durable = ran.acked.len() - 1;
        }
    }
    drop(reader);
    if w.durability == Durability::None && db.sync().is_ok() {
        ran.durable = ran.acked.len() - 1;
    }
    ran
}

/// Every table and its entries.
fn read_all(db: &Database) -> cairndb::Result<Model> {
    let r = db.begin_read()?;
    let mut m = Model::new();
    for name in r.list_tables()? {
        let t = r.open_untyped_table(&name)?;
        let entries = m.entry(name).or_default();
        for e in t.iter()? {
            let (k, v) = e?;
            entries.insert(k.value().to_vec(), v.value().to_vec());
        }
    }
    Ok(m)
}

/// The states allowed after a crash: any acknowledged state from the last
/// durable point on, or the in-flight step applied whole.
fn allowed_states(w: &Workload, acked: &[Model], attempted: usize, all_since: usize) -> Vec<Model> {
    let last = acked.len() - 1;
    let mut allowed: Vec<Model> = acked[all_since.min(last)..].to_vec();
    if attempted > last && last < w.steps.len() {
        let mut m = acked[last].clone();
        apply(&mut m, &w.steps[last]);
        allowed.push(m);
    }
    allowed
}

/// Commits one more change after recovery.
fn commit_after(db: &Database) -> cairndb::Result<()> {
    let txn = db.begin_write()?;
    txn.open_table(def(T))?
        .insert(b"after".as_slice(), b"x".as_slice())?;
    txn.commit()?;
    Ok(())
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
        let all = run(w, &clean).acked;
        assert_eq!(
            all.len(),
            w.steps.len() + 1,
            "{}: fault-free run failed",
            w.name
        );
        let total_ops = clean.counted_ops();
        for k in 0..total_ops {
            points += 1;
            let sim = Arc::new(SimFile::new());
            sim.set_fault(Some(Fault::CrashAt(k)), OpFilter::Mutating);
            let Ran {
                acked,
                attempted,
                durable,
            } = run(w, &sim);
            // Allowed outcomes: any acknowledged state at or after the last
            // durable point, or the in-flight commit whole.
            let last = acked.len() - 1;
            let allowed = allowed_states(w, &acked, attempted, durable);
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
                    commit_after(&db).expect("commit after recovery");
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
fn run_until_error(w: &Workload, sim: &Arc<SimFile>) -> (Vec<Model>, usize, bool) {
    let mut acked = vec![Model::new()];
    let mut durable = 0;
    let Ok(db) = Builder::new()
        .page_size(w.page_size)
        .overlay_size(w.overlay)
        .cache_size(w.cache)
        .open_with_storage(Box::new(sim.clone()), true, false)
    else {
        return (acked, durable, false);
    };
    let mut model = Model::new();
    let mut reader = None;
    for step in &w.steps {
        if run_step(&db, step, w.durability, &mut reader).is_err() {
            let poisoned = matches!(
                db.begin_write().map(|_| ()),
                Err(CoreError::Poisoned { .. })
            );
            return (acked, durable, !poisoned);
        }
        apply(&mut model, step);
        acked.push(model.clone());
        if makes_durable(w, step) {
            durable = acked.len() - 1;
        }
    }
    (acked, durable, false)
}

/// I/O errors (suite 5, docs/reliability.md): every mutating I/O operation of every
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
                    let (acked, durable, not_poisoned) = run_until_error(w, &sim);
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
                            !acked[durable..].contains(s) && {
                                let mut m = acked[last].clone();
                                last < w.steps.len() && {
                                    apply(&mut m, &w.steps[last]);
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

/// Lying fsync (suite 11, docs/reliability.md): `sync_data` reports success but keeps
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
            let Ran {
                acked, attempted, ..
            } = run(w, &sim);
            // Any committed state may show, including older ones; nothing else.
            let allowed = allowed_states(w, &acked, attempted, 0);
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

/// ENOSPC at every point where the file grows (suite 9, docs/reliability.md):
/// the device is full past the current size. The failing commit reports
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
            let Ran {
                acked,
                attempted,
                durable,
            } = run(w, &sim);
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
            let ok_state = read_all(&db)
                .is_ok_and(|s| allowed_states(w, &acked, attempted, durable).contains(&s))
                || w.durability == Durability::None;
            let committed = commit_after(&db).is_ok();
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

/// Backup under crashes (suite 2, docs/reliability.md, backup workload): the copy is
/// crashed at every I/O operation and every kind of crash image of it is
/// built. An image either is refused at open with a typed error (it never
/// became a database) or opens to exactly the source's state with integrity
/// holding: never a header pointing at pages that were not written.
#[test]
fn crash_during_backup() {
    let seed = crate::common::seed("crash-backup");
    let src = Arc::new(SimFile::new());
    let db = Builder::new()
        .page_size(512)
        .open_with_storage(Box::new(src.clone()), true, false)
        .unwrap();
    let mut reader = None;
    for step in [
        puts(0..200, 60),
        dels(50..120),
        Step::Txn(vec![Op::Put(T, key(7), vec![7; 3000])]),
        Step::Txn(puts_in("b", 0..40, 20)),
    ] {
        run_step(&db, &step, Durability::Immediate, &mut reader).unwrap();
    }
    let expected = read_all(&db).unwrap();
    let clean = Arc::new(SimFile::new());
    clean.set_fault(None, OpFilter::Mutating);
    db.backup_to_storage(&*clean).unwrap();
    let total = clean.counted_ops();
    let (mut points, mut images, mut opened, mut wrong, mut panics) = (0, 0, 0, 0, 0);
    for k in 0..=total {
        points += 1;
        let sim = Arc::new(SimFile::new());
        sim.set_fault((k < total).then_some(Fault::CrashAt(k)), OpFilter::Mutating);
        let finished = db.backup_to_storage(&*sim).is_ok();
        assert_eq!(finished, k == total, "backup result at crash point {k}");
        for img in sim.crash_images(seed ^ k) {
            images += 1;
            let outcome = std::panic::catch_unwind(|| {
                let file = SimFile::from_image(img.bytes.clone());
                match Builder::new().open_with_storage(Box::new(file), false, true) {
                    Ok(copy) => Some(
                        read_all(&copy).is_ok_and(|s| s == expected)
                            && copy.check_integrity().is_ok_and(|r| r.is_ok()),
                    ),
                    Err(e) => {
                        assert!(
                            e.is_corruption() || matches!(e, CoreError::NotADatabase { .. }),
                            "unexpected error opening a crashed backup: {e}"
                        );
                        None
                    }
                }
            });
            match outcome {
                Ok(Some(true)) => opened += 1,
                Ok(Some(false)) => {
                    eprintln!("backup crash at op {k}, image {}: wrong copy", img.name);
                    wrong += 1;
                }
                Ok(None) => {}
                Err(_) => panics += 1,
            }
        }
    }
    // The source is untouched and still works.
    assert_eq!(read_all(&db).unwrap(), expected);
    commit_after(&db).unwrap();
    crate::common::report(&format!(
        "crash-backup: crash_points={points} images={images} complete_copies={opened} wrong_copies={wrong} panics={panics}"
    ));
    assert_eq!((wrong, panics), (0, 0));
    assert!(opened > 0, "no crash image held a complete copy");
}
