//! Model suite. Property: under random sequences of operations the database
//! behaves exactly like a `BTreeMap<table, BTreeMap<key, value>>` model —
//! inside a write transaction (reads see the transaction's own writes), in
//! read snapshots (which see exactly the committed state they were opened
//! on), across commits (durable and not), aborts, clean reopens, process-crash
//! reopens and compaction — and `check_integrity` finds no problem after every
//! commit and reopen.
//!
//! Sequences come from a seeded generator (`SEED`, printed; `ITERS` scales
//! the number of cases; `MODEL_CASE=<i>` replays one case). A failing case is
//! shrunk by delta debugging and printed as a list of `Op`s that can be pasted
//! into a regression test (see `regressions` at the bottom). A second test
//! runs the same executor under `proptest` (seeded from the same `SEED`) for
//! its shrinking. Pages of 512 bytes make trees deep; keys run from 0 bytes to
//! `max_key_len()`; values from 0 bytes to 40 KiB (out of line). Storage is a
//! real file (tempfile) and the simulated file.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use cairndb::storage::sim::{SimFile, SplitMix64};
use cairndb::{
    CoreError, Database, Durability, ReadTransaction, ReadableTable, TableDefinition,
    WriteTransaction,
};

use crate::common;

type Bytes = Vec<u8>;
type TableModel = BTreeMap<Bytes, Bytes>;
type Model = BTreeMap<String, TableModel>;
type Def = TableDefinition<'static, &'static [u8], &'static [u8]>;

const TABLES: [&str; 3] = ["alpha", "beta", "gamma"];

fn def(t: u8) -> Def {
    TableDefinition::new(TABLES[t as usize % TABLES.len()])
}

fn name(t: u8) -> String {
    TABLES[t as usize % TABLES.len()].to_string()
}

/// A key, compactly: its bytes are the little-endian id followed by a filler
/// derived from the id, cut to `len` bytes (`u16::MAX` = the maximum length).
/// Equal ids with different lengths are prefixes of one another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct K {
    pub id: u32,
    pub len: u16,
}

/// A value, compactly: `len` bytes of a pattern seeded by `seed`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct V {
    pub len: u32,
    pub seed: u8,
}

/// A range bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum B {
    Un,
    In(K),
    Ex(K),
}

/// One step of a case. Table operations run in the open write transaction,
/// beginning one if none is open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Insert(u8, K, V),
    /// Insert a key `max_key_len() + 1 + extra` bytes long: must fail with
    /// `KeyTooLarge` and change nothing.
    InsertTooLong(u8, u16),
    Remove(u8, K),
    Get(u8, K),
    /// mode 0: forward, 1: reverse, 2: both ends alternately, 3: first/last/len.
    Range {
        t: u8,
        lo: B,
        hi: B,
        mode: u8,
    },
    RemoveRange {
        t: u8,
        lo: B,
        hi: B,
    },
    Drain {
        t: u8,
        lo: B,
        hi: B,
    },
    PopFirst(u8),
    PopLast(u8),
    /// Keep entries for which `keep(param, k, v)` holds.
    Retain(u8, u8),
    Append(u8, K, V),
    /// Insert `n` keys `base..base+n` (`klen`-byte keys) with `vlen`-byte values.
    Bulk {
        t: u8,
        base: u32,
        n: u16,
        vlen: u16,
        klen: u16,
    },
    /// Two tables open at once in the write transaction, written alternately;
    /// the same table twice must fail with `TableAlreadyOpen` (and so must
    /// deleting an open table).
    Pair(u8, u8, K, V),
    DeleteTable(u8),
    ListTables,
    /// Commit (beginning an empty transaction if none is open); `true` = durable.
    Commit(bool),
    Abort,
    /// Open a read snapshot of the committed state and keep it.
    Snapshot,
    CheckSnapshot(u8),
    DropSnapshot(u8),
    /// Drop everything, close cleanly, open again.
    Reopen,
    /// Copy the file as a crashed process leaves it (all writes, no clean
    /// close) while the handle is open, and open the copy.
    CrashReopen,
    /// Open the simulated file as a power loss leaves it (only synced
    /// writes); on a real file, the same as `CrashReopen`.
    PowerLossReopen,
    Compact,
}

use Op::*;
use B::*;

fn key_bytes(k: K, max: usize) -> Bytes {
    let len = (k.len as usize).min(max);
    let idb = k.id.to_le_bytes();
    (0..len)
        .map(|i| {
            if i < 4 {
                idb[i]
            } else {
                (k.id as u8).wrapping_mul(31).wrapping_add(i as u8)
            }
        })
        .collect()
}

fn val_bytes(v: V) -> Bytes {
    (0..v.len)
        .map(|i| {
            (v.seed as u32)
                .wrapping_mul(131)
                .wrapping_add(i.wrapping_mul(7)) as u8
                ^ (i >> 9) as u8
        })
        .collect()
}

fn bound(b: B, max: usize) -> Bound<Bytes> {
    match b {
        Un => Bound::Unbounded,
        In(k) => Bound::Included(key_bytes(k, max)),
        Ex(k) => Bound::Excluded(key_bytes(k, max)),
    }
}

fn as_ref(b: &Bound<Bytes>) -> Bound<&[u8]> {
    match b {
        Bound::Unbounded => Bound::Unbounded,
        Bound::Included(k) => Bound::Included(k.as_slice()),
        Bound::Excluded(k) => Bound::Excluded(k.as_slice()),
    }
}

fn in_range(k: &[u8], lo: &Bound<Bytes>, hi: &Bound<Bytes>) -> bool {
    let lo_ok = match lo {
        Bound::Unbounded => true,
        Bound::Included(b) => k >= b.as_slice(),
        Bound::Excluded(b) => k > b.as_slice(),
    };
    let hi_ok = match hi {
        Bound::Unbounded => true,
        Bound::Included(b) => k <= b.as_slice(),
        Bound::Excluded(b) => k < b.as_slice(),
    };
    lo_ok && hi_ok
}

/// The model's entries in a range (inverted ranges are simply empty).
fn model_range(m: &TableModel, lo: &Bound<Bytes>, hi: &Bound<Bytes>) -> Vec<(Bytes, Bytes)> {
    m.iter()
        .filter(|(k, _)| in_range(k, lo, hi))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn keep(param: u8, k: &[u8], v: &[u8]) -> bool {
    let h = k.len() * 7 + v.len() + k.first().copied().unwrap_or(0) as usize + param as usize;
    !h.is_multiple_of(3)
}

fn e(ctx: &str) -> impl Fn(CoreError) -> Failure + '_ {
    move |err| Failure::div(format!("{ctx}: unexpected error: {err}"))
}

#[derive(Debug, Clone)]
pub struct Failure {
    integrity: bool,
    msg: String,
}

impl Failure {
    fn div(msg: String) -> Self {
        Failure {
            integrity: false,
            msg,
        }
    }
}

type R<T = ()> = Result<T, Failure>;

fn check<T: PartialEq + std::fmt::Debug>(what: &str, got: T, want: T) -> R {
    if got == want {
        Ok(())
    } else {
        let g = format!("{got:?}");
        let w = format!("{want:?}");
        Err(Failure::div(format!(
            "{what}: got {} want {}",
            abbreviate(&g),
            abbreviate(&w)
        )))
    }
}

fn abbreviate(s: &str) -> String {
    if s.len() > 600 {
        format!("{}…({} chars)…{}", &s[..300], s.len(), &s[s.len() - 300..])
    } else {
        s.to_string()
    }
}

type Entry = (Bytes, Bytes);

fn collect<'a, I>(it: I) -> R<Vec<Entry>>
where
    I: Iterator<
        Item = Result<
            (
                cairndb::AccessGuard<'a, &'static [u8]>,
                cairndb::AccessGuard<'a, &'static [u8]>,
            ),
            CoreError,
        >,
    >,
{
    let mut out = Vec::new();
    for item in it {
        let (k, v) = item.map_err(e("range item"))?;
        out.push((k.value().to_vec(), v.value().to_vec()));
    }
    Ok(out)
}

/// Checks a range read of `tb` against the model in one of four ways.
fn check_range<T: ReadableTable<&'static [u8], &'static [u8]>>(
    tb: &T,
    m: &TableModel,
    lo: &Bound<Bytes>,
    hi: &Bound<Bytes>,
    mode: u8,
) -> R {
    let want = model_range(m, lo, hi);
    let range = || {
        tb.range::<&[u8]>((as_ref(lo), as_ref(hi)))
            .map_err(e("range"))
    };
    match mode % 4 {
        0 => check("range forward", collect(range()?)?, want),
        1 => {
            let mut w = want;
            w.reverse();
            check("range reverse", collect(range()?.rev())?, w)
        }
        2 => {
            // Alternate ends in a pattern until the cursors meet.
            let mut it = range()?;
            let (mut i, mut j) = (0usize, want.len());
            let mut step = 0u32;
            loop {
                let back = (step.wrapping_mul(2654435761) >> 7) & 1 == 1;
                step += 1;
                let got = if back { it.next_back() } else { it.next() };
                let got = match got {
                    None => None,
                    Some(r) => {
                        let (k, v) = r.map_err(e("range both ends"))?;
                        Some((k.value().to_vec(), v.value().to_vec()))
                    }
                };
                let exp = if i >= j {
                    None
                } else if back {
                    j -= 1;
                    Some(want[j].clone())
                } else {
                    i += 1;
                    Some(want[i - 1].clone())
                };
                let done = exp.is_none();
                check(
                    &format!(
                        "range both ends, step {step} ({})",
                        if back { "back" } else { "front" }
                    ),
                    got,
                    exp,
                )?;
                if done {
                    // Exhausted from both ends.
                    check("range exhausted next", it.next().is_none(), true)?;
                    check("range exhausted next_back", it.next_back().is_none(), true)?;
                    return Ok(());
                }
            }
        }
        _ => {
            let first = tb
                .first()
                .map_err(e("first"))?
                .map(|(k, v)| (k.value().to_vec(), v.value().to_vec()));
            check(
                "first",
                first,
                m.iter().next().map(|(k, v)| (k.clone(), v.clone())),
            )?;
            let last = tb
                .last()
                .map_err(e("last"))?
                .map(|(k, v)| (k.value().to_vec(), v.value().to_vec()));
            check(
                "last",
                last,
                m.iter().next_back().map(|(k, v)| (k.clone(), v.clone())),
            )?;
            check("len", tb.len(), m.len() as u64)?;
            check("is_empty", tb.is_empty(), m.is_empty())
        }
    }
}

/// Compares a whole table (forward, reverse, len) with the model.
fn check_table<T: ReadableTable<&'static [u8], &'static [u8]>>(
    what: &str,
    tb: &T,
    m: &TableModel,
) -> R {
    check(&format!("{what}: len"), tb.len(), m.len() as u64)?;
    let want: Vec<Entry> = m.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    let got = collect(tb.iter().map_err(e("iter"))?)?;
    if got != want {
        // Name the first difference rather than dumping both.
        let first = got
            .iter()
            .zip(want.iter())
            .position(|(a, b)| a != b)
            .unwrap_or(got.len().min(want.len()));
        let show = |v: Option<&Entry>| v.map(|(k, v)| format!("key {k:?} value {} bytes", v.len()));
        return Err(Failure::div(format!(
            "{what}: contents differ: {} entries vs model {}; first difference at {first}: db {:?}, model {:?}",
            got.len(),
            want.len(),
            show(got.get(first)),
            show(want.get(first))
        )));
    }
    let back = collect(tb.iter().map_err(e("iter"))?.rev())?;
    let mut rwant = want;
    rwant.reverse();
    check(
        &format!("{what}: reverse iteration"),
        back.len(),
        rwant.len(),
    )?;
    if back != rwant {
        return Err(Failure::div(format!("{what}: reverse iteration differs")));
    }
    // Point reads of some keys, and of keys just past them (mostly absent).
    for (k, v) in m.iter().step_by((m.len() / 24).max(1)) {
        let got = tb.get(k.as_slice()).map_err(e("get"))?;
        check(
            &format!("{what}: get {k:?}"),
            got.map(|g| g.value().to_vec()),
            Some(v.clone()),
        )?;
        let mut past = k.clone();
        past.push(0);
        let got = tb.get(past.as_slice()).map_err(e("get"))?;
        check(
            &format!("{what}: get {past:?}"),
            got.map(|g| g.value().to_vec()),
            m.get(&past).cloned(),
        )?;
    }
    Ok(())
}

/// Compares a read snapshot with a committed model: table list and contents.
fn check_snapshot(what: &str, r: &ReadTransaction, m: &Model) -> R {
    let names = r.list_tables().map_err(e("list_tables"))?;
    check(
        &format!("{what}: list_tables"),
        names,
        m.keys().cloned().collect::<Vec<_>>(),
    )?;
    for t in 0..TABLES.len() as u8 {
        match (r.open_table(def(t)), m.get(&name(t))) {
            (Ok(tb), Some(tm)) => check_table(&format!("{what}: table {}", name(t)), &tb, tm)?,
            (Err(CoreError::TableNotFound(_)), None) => {}
            (Ok(_), None) => {
                return Err(Failure::div(format!(
                    "{what}: table {} exists but the model has none",
                    name(t)
                )))
            }
            (Err(err), _) => {
                return Err(Failure::div(format!(
                    "{what}: open_table {}: {err}",
                    name(t)
                )))
            }
        }
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    Sim,
    File,
}

enum Store {
    Sim(Arc<SimFile>),
    File {
        dir: tempfile::TempDir,
        path: PathBuf,
        copies: u32,
    },
}

#[derive(Debug, Default, Clone, Copy)]
pub struct Counters {
    pub ops: u64,
    pub reopens: u64,
    pub commits: u64,
    pub integrity_checks: u64,
    pub max_depth: u32,
    pub crash_lost_commits: u64,
    pub process_crash_lost: u64,
    pub power_losses: u64,
}

struct Run {
    store: Store,
    page_size: usize,
    cache_bytes: usize,
    overlay_bytes: usize,
    max_key: usize,
    // Field order matters for drop: transactions before the database.
    snaps: Vec<(ReadTransaction, Model)>,
    wtx: Option<WriteTransaction>,
    db: Option<Database>,
    committed: Model,
    working: Model,
    /// Committed states since the last durable commit, oldest first: what a
    /// crash may recover (the first is durable).
    history: Vec<Model>,
    c: Counters,
}

impl Run {
    fn new(setup: Setup) -> R<Run> {
        let Setup {
            kind,
            page_size,
            cache_bytes,
            overlay_bytes,
        } = setup;
        let store = match kind {
            StoreKind::Sim => Store::Sim(Arc::new(SimFile::new())),
            StoreKind::File => {
                let dir = tempfile::tempdir().map_err(|x| Failure::div(format!("tempdir: {x}")))?;
                let path = dir.path().join("model.cairn");
                Store::File {
                    dir,
                    path,
                    copies: 0,
                }
            }
        };
        let mut run = Run {
            store,
            page_size,
            cache_bytes,
            overlay_bytes,
            max_key: cairndb::limits::max_key_bytes(page_size),
            snaps: Vec::new(),
            wtx: None,
            db: None,
            committed: Model::new(),
            working: Model::new(),
            history: vec![Model::new()],
            c: Counters::default(),
        };
        run.open(true)?;
        check(
            "max_key_len",
            run.db().max_key_len(),
            cairndb::limits::max_key_bytes(page_size),
        )?;
        Ok(run)
    }

    fn open(&mut self, create: bool) -> R {
        let mut b = Database::builder();
        b.page_size(self.page_size)
            .cache_size(self.cache_bytes)
            .overlay_size(self.overlay_bytes);
        let db = match &self.store {
            Store::Sim(f) => b.open_with_storage(Box::new(f.clone()), create, false),
            Store::File { path, .. } => {
                if create {
                    b.create(path)
                } else {
                    b.open(path)
                }
            }
        }
        .map_err(e("open"))?;
        check("page_size after open", db.page_size(), self.page_size)?;
        self.db = Some(db);
        Ok(())
    }

    fn db(&self) -> &Database {
        self.db.as_ref().expect("database is open")
    }

    fn ensure_wtx(&mut self) -> R {
        if self.wtx.is_none() {
            let w = self.db().begin_write().map_err(e("begin_write"))?;
            if self.overlay_bytes > 0 && !(self.c.commits + self.c.ops).is_multiple_of(3) {
                w.set_durability(Durability::None);
            }
            self.wtx = Some(w);
        }
        Ok(())
    }

    fn integrity(&mut self, when: &str) -> R {
        self.c.integrity_checks += 1;
        let rep = self.db().check_integrity().map_err(e("check_integrity"))?;
        if !rep.is_ok() {
            return Err(Failure {
                integrity: true,
                msg: format!(
                    "integrity after {when}: {} problem(s): {}",
                    rep.problems.len(),
                    rep.problems
                        .iter()
                        .take(3)
                        .map(|p| p.to_string())
                        .collect::<Vec<_>>()
                        .join(" | ")
                ),
            });
        }
        for (_, t) in &rep.tables {
            self.c.max_depth = self.c.max_depth.max(t.depth);
        }
        Ok(())
    }

    /// The committed state, through a fresh snapshot, plus integrity.
    fn verify_committed(&mut self, when: &str) -> R {
        let r = self.db().begin_read().map_err(e("begin_read"))?;
        check_snapshot(
            &format!("committed state after {when}"),
            &r,
            &self.committed,
        )?;
        drop(r);
        self.integrity(when)
    }

    fn close_all(&mut self) {
        self.snaps.clear();
        self.wtx = None;
        self.working = self.committed.clone();
        self.db = None;
    }

    fn step(&mut self, op: Op) -> R {
        self.c.ops += 1;
        let max = self.max_key;
        match op {
            Insert(t, k, v) => {
                let (kb, vb) = (key_bytes(k, max), val_bytes(v));
                self.ensure_wtx()?;
                let w = self.wtx.as_ref().expect("open");
                let mut tb = w.open_table(def(t)).map_err(e("open_table"))?;
                let old = tb
                    .insert(kb.as_slice(), vb.as_slice())
                    .map_err(e("insert"))?
                    .map(|g| g.value().to_vec());
                drop(tb);
                let want = self.working.entry(name(t)).or_default().insert(kb, vb);
                check("insert: previous value", old, want)?;
            }
            InsertTooLong(t, extra) => {
                let kb = vec![0xA5u8; max + 1 + extra as usize % 64];
                self.ensure_wtx()?;
                let w = self.wtx.as_ref().expect("open");
                let mut tb = w.open_table(def(t)).map_err(e("open_table"))?;
                let res = tb
                    .insert(kb.as_slice(), b"x".as_slice())
                    .map(|o| o.is_some());
                drop(tb);
                self.working.entry(name(t)).or_default();
                match res {
                    Err(CoreError::KeyTooLarge { len, max: m }) => {
                        check("KeyTooLarge.len", len, kb.len())?;
                        check("KeyTooLarge.max", m, max)?;
                    }
                    other => {
                        return Err(Failure::div(format!(
                        "insert of a {}-byte key (max {max}): expected KeyTooLarge, got {other:?}",
                        kb.len()
                    )))
                    }
                }
            }
            Remove(t, k) => {
                let kb = key_bytes(k, max);
                self.ensure_wtx()?;
                let w = self.wtx.as_ref().expect("open");
                let mut tb = w.open_table(def(t)).map_err(e("open_table"))?;
                let old = tb
                    .remove(kb.as_slice())
                    .map_err(e("remove"))?
                    .map(|g| g.value().to_vec());
                drop(tb);
                let want = self.working.entry(name(t)).or_default().remove(&kb);
                check("remove: previous value", old, want)?;
            }
            Get(t, k) => {
                let kb = key_bytes(k, max);
                self.ensure_wtx()?;
                let w = self.wtx.as_ref().expect("open");
                let tb = w.open_table(def(t)).map_err(e("open_table"))?;
                let got = tb
                    .get(kb.as_slice())
                    .map_err(e("get"))?
                    .map(|g| g.value().to_vec());
                drop(tb);
                let want = self.working.entry(name(t)).or_default().get(&kb).cloned();
                check("get", got, want)?;
            }
            Range { t, lo, hi, mode } => {
                let (lo, hi) = (bound(lo, max), bound(hi, max));
                self.ensure_wtx()?;
                let w = self.wtx.as_ref().expect("open");
                let tb = w.open_table(def(t)).map_err(e("open_table"))?;
                let m = self.working.entry(name(t)).or_default();
                check_range(&tb, m, &lo, &hi, mode)?;
            }
            RemoveRange { t, lo, hi } => {
                let (lo, hi) = (bound(lo, max), bound(hi, max));
                self.ensure_wtx()?;
                let w = self.wtx.as_ref().expect("open");
                let mut tb = w.open_table(def(t)).map_err(e("open_table"))?;
                let n = tb
                    .remove_range::<&[u8]>((as_ref(&lo), as_ref(&hi)))
                    .map_err(e("remove_range"))?;
                let m = self.working.entry(name(t)).or_default();
                let before = m.len();
                m.retain(|k, _| !in_range(k, &lo, &hi));
                check("remove_range count", n, (before - m.len()) as u64)?;
                check("remove_range: len", tb.len(), m.len() as u64)?;
            }
            Drain { t, lo, hi } => {
                let (lo, hi) = (bound(lo, max), bound(hi, max));
                self.ensure_wtx()?;
                let w = self.wtx.as_ref().expect("open");
                let mut tb = w.open_table(def(t)).map_err(e("open_table"))?;
                let got: Vec<Entry> = tb
                    .drain::<&[u8]>((as_ref(&lo), as_ref(&hi)))
                    .map_err(e("drain"))?
                    .into_iter()
                    .map(|(k, v)| (k.value().to_vec(), v.value().to_vec()))
                    .collect();
                let m = self.working.entry(name(t)).or_default();
                let want = model_range(m, &lo, &hi);
                m.retain(|k, _| !in_range(k, &lo, &hi));
                check("drain", got, want)?;
            }
            PopFirst(t) | PopLast(t) => {
                let first = matches!(op, PopFirst(_));
                self.ensure_wtx()?;
                let w = self.wtx.as_ref().expect("open");
                let mut tb = w.open_table(def(t)).map_err(e("open_table"))?;
                let got = if first { tb.pop_first() } else { tb.pop_last() }
                    .map_err(e("pop"))?
                    .map(|(k, v)| (k.value().to_vec(), v.value().to_vec()));
                drop(tb);
                let m = self.working.entry(name(t)).or_default();
                let want = if first { m.pop_first() } else { m.pop_last() };
                check(if first { "pop_first" } else { "pop_last" }, got, want)?;
            }
            Retain(t, param) => {
                self.ensure_wtx()?;
                let w = self.wtx.as_ref().expect("open");
                let mut tb = w.open_table(def(t)).map_err(e("open_table"))?;
                let n = tb.retain(|k, v| keep(param, k, v)).map_err(e("retain"))?;
                drop(tb);
                let m = self.working.entry(name(t)).or_default();
                let before = m.len();
                m.retain(|k, v| keep(param, k, v));
                check("retain: removed", n, (before - m.len()) as u64)?;
            }
            Append(t, k, v) => {
                let (kb, vb) = (key_bytes(k, max), val_bytes(v));
                self.ensure_wtx()?;
                let w = self.wtx.as_ref().expect("open");
                let mut tb = w.open_table(def(t)).map_err(e("open_table"))?;
                let res = tb.append(kb.as_slice(), vb.as_slice());
                drop(tb);
                let m = self.working.entry(name(t)).or_default();
                let in_order = m.keys().next_back().is_none_or(|last| *last < kb);
                match (res, in_order) {
                    (Ok(()), true) => {
                        m.insert(kb, vb);
                    }
                    (Err(CoreError::AppendOutOfOrder), false) => {}
                    (res, _) => {
                        return Err(Failure::div(format!(
                            "append of key {kb:?} (in order: {in_order}): got {res:?}"
                        )))
                    }
                }
            }
            Bulk {
                t,
                base,
                n,
                vlen,
                klen,
            } => {
                self.ensure_wtx()?;
                let w = self.wtx.as_ref().expect("open");
                let mut tb = w.open_table(def(t)).map_err(e("open_table"))?;
                let m = self.working.entry(name(t)).or_default();
                for i in 0..n as u32 {
                    let kb = key_bytes(
                        K {
                            id: base.wrapping_add(i).swap_bytes(),
                            len: klen,
                        },
                        max,
                    );
                    let vb = val_bytes(V {
                        len: vlen as u32,
                        seed: i as u8,
                    });
                    let old = tb
                        .insert(kb.as_slice(), vb.as_slice())
                        .map_err(e("bulk insert"))?
                        .map(|g| g.value().to_vec());
                    check("bulk insert: previous value", old, m.insert(kb, vb))?;
                }
                check("bulk: len", tb.len(), m.len() as u64)?;
            }
            Pair(t1, t2, k, v) => {
                self.ensure_wtx()?;
                let w = self.wtx.as_ref().expect("open");
                let (n1, n2) = (name(t1), name(t2));
                if n1 == n2 {
                    let a = w.open_table(def(t1)).map_err(e("open_table"))?;
                    let again = w.open_table(def(t1)).map(|_| ());
                    let del = w.delete_table(&n1);
                    drop(a);
                    self.working.entry(n1.clone()).or_default();
                    if !matches!(again, Err(CoreError::TableAlreadyOpen(ref n)) if *n == n1) {
                        return Err(Failure::div(format!(
                            "opening open table {n1} again: expected TableAlreadyOpen, got {again:?}"
                        )));
                    }
                    if !matches!(del, Err(CoreError::TableAlreadyOpen(_))) {
                        return Err(Failure::div(format!(
                            "deleting open table {n1}: expected TableAlreadyOpen, got {del:?}"
                        )));
                    }
                } else {
                    let mut a = w.open_table(def(t1)).map_err(e("open_table"))?;
                    let mut b = w.open_table(def(t2)).map_err(e("open_table"))?;
                    let (kb, vb) = (key_bytes(k, max), val_bytes(v));
                    let kb2 = key_bytes(K { id: k.id ^ 1, ..k }, max);
                    let vb2 = val_bytes(V {
                        seed: v.seed ^ 0x55,
                        ..v
                    });
                    let old_a = a
                        .insert(kb.as_slice(), vb.as_slice())
                        .map_err(e("insert a"))?;
                    let old_b = b
                        .insert(kb.as_slice(), vb2.as_slice())
                        .map_err(e("insert b"))?;
                    let old_a2 = a
                        .insert(kb2.as_slice(), vb2.as_slice())
                        .map_err(e("insert a"))?;
                    let got_a = a
                        .get(kb.as_slice())
                        .map_err(e("get a"))?
                        .map(|g| g.value().to_vec());
                    let got_b = b
                        .get(kb.as_slice())
                        .map_err(e("get b"))?
                        .map(|g| g.value().to_vec());
                    let (la, lb) = (a.len(), b.len());
                    let (old_a, old_b, old_a2) = (
                        old_a.map(|g| g.value().to_vec()),
                        old_b.map(|g| g.value().to_vec()),
                        old_a2.map(|g| g.value().to_vec()),
                    );
                    drop((a, b));
                    let ma = self.working.entry(n1).or_default();
                    check("pair: old a", old_a, ma.insert(kb.clone(), vb.clone()))?;
                    check("pair: old a2", old_a2, ma.insert(kb2, vb2.clone()))?;
                    let want_a = ma.get(&kb).cloned();
                    let la_want = ma.len() as u64;
                    let mb = self.working.entry(n2).or_default();
                    check("pair: old b", old_b, mb.insert(kb.clone(), vb2))?;
                    check("pair: get a", got_a, want_a)?;
                    check("pair: get b", got_b, mb.get(&kb).cloned())?;
                    check("pair: len a", la, la_want)?;
                    check("pair: len b", lb, mb.len() as u64)?;
                }
            }
            DeleteTable(t) => {
                self.ensure_wtx()?;
                let w = self.wtx.as_ref().expect("open");
                let existed = w.delete_table(&name(t)).map_err(e("delete_table"))?;
                check(
                    "delete_table existed",
                    existed,
                    self.working.remove(&name(t)).is_some(),
                )?;
            }
            ListTables => {
                self.ensure_wtx()?;
                let w = self.wtx.as_ref().expect("open");
                let got = w.list_tables().map_err(e("list_tables"))?;
                check(
                    "list_tables in write txn",
                    got,
                    self.working.keys().cloned().collect::<Vec<_>>(),
                )?;
            }
            Commit(durable) => {
                let before = self.db().latest_commit();
                let w = match self.wtx.take() {
                    Some(w) => w,
                    None => self.db().begin_write().map_err(e("begin_write"))?,
                };
                w.set_durability(if durable {
                    Durability::Immediate
                } else {
                    Durability::None
                });
                let id = w.commit().map_err(e("commit"))?;
                self.c.commits += 1;
                check(
                    "commit id is the latest commit",
                    id,
                    self.db().latest_commit(),
                )?;
                if id < before {
                    return Err(Failure::div(format!(
                        "commit id {id:?} went back from {before:?}"
                    )));
                }
                let changed = self.working != self.committed;
                self.committed = self.working.clone();
                if durable {
                    self.history = vec![self.committed.clone()];
                } else if changed {
                    self.history.push(self.committed.clone());
                }
                self.verify_committed("commit")?;
            }
            Abort => {
                if let Some(w) = self.wtx.take() {
                    w.abort();
                }
                self.working = self.committed.clone();
            }
            Snapshot => {
                if self.snaps.len() >= 4 {
                    self.snaps.remove(0);
                }
                let r = self.db().begin_read().map_err(e("begin_read"))?;
                check("snapshot txn id", r.txn_id(), self.db().latest_commit())?;
                self.snaps.push((r, self.committed.clone()));
            }
            CheckSnapshot(i) => {
                if !self.snaps.is_empty() {
                    let i = i as usize % self.snaps.len();
                    let (r, m) = &self.snaps[i];
                    check_snapshot(&format!("snapshot {i} (txn {:?})", r.txn_id()), r, m)?;
                }
            }
            DropSnapshot(i) => {
                if !self.snaps.is_empty() {
                    let i = i as usize % self.snaps.len();
                    self.snaps.remove(i);
                }
            }
            Reopen => {
                self.close_all();
                self.open(false)?;
                self.c.reopens += 1;
                let rep = self.db().recovery_report().clone();
                if !rep.clean || rep.fell_back.is_some() {
                    return Err(Failure::div(format!(
                        "reopen after a clean close: recovery report {rep:?}"
                    )));
                }
                self.history = vec![self.committed.clone()];
                self.verify_committed("reopen")?;
            }
            CrashReopen | PowerLossReopen => {
                // What a killed process leaves: every write so far (the OS
                // cache survives), no clean-close record. A power loss
                // leaves only what was synced.
                match &mut self.store {
                    Store::Sim(f) => {
                        let image = if op == PowerLossReopen {
                            f.durable_image()
                        } else {
                            f.current_image()
                        };
                        self.store = Store::Sim(Arc::new(SimFile::from_image(image)));
                    }
                    Store::File { dir, path, copies } => {
                        let image = std::fs::read(&*path)
                            .map_err(|x| Failure::div(format!("read db file: {x}")))?;
                        *copies += 1;
                        let p = dir.path().join(format!("crash{copies}.cairn"));
                        std::fs::write(&p, image)
                            .map_err(|x| Failure::div(format!("write copy: {x}")))?;
                        *path = p;
                    }
                }
                self.close_all();
                self.open(false)?;
                self.c.reopens += 1;
                // A crash may lose a suffix of non-durable commits, each whole.
                let r = self.db().begin_read().map_err(e("begin_read"))?;
                let mut matched = None;
                let mut last_err = None;
                for (i, m) in self.history.iter().enumerate().rev() {
                    match check_snapshot("crash reopen", &r, m) {
                        Ok(()) => {
                            matched = Some(i);
                            break;
                        }
                        Err(f) => {
                            if last_err.is_none() {
                                last_err = Some(f)
                            }
                        }
                    }
                }
                drop(r);
                match matched {
                    Some(i) => {
                        let lost = (self.history.len() - 1 - i) as u64;
                        self.c.crash_lost_commits += lost;
                        if op == CrashReopen && lost > 0 {
                            // Allowed (non-durable commits may be lost as a
                            // suffix), but every write reached the file:
                            // recovery passed over a complete commit.
                            self.c.process_crash_lost += lost;
                            eprintln!(
                                "model: note: a process crash lost {lost} non-durable commit(s); recovery: {:?}",
                                self.db().recovery_report()
                            );
                        }
                        self.committed = self.history[i].clone();
                        self.working = self.committed.clone();
                        self.history = vec![self.committed.clone()];
                    }
                    None => {
                        return Err(Failure::div(format!(
                            "after a crash the database matches none of the {} commits since the last durable one (recovery {:?}); vs the latest: {}",
                            self.history.len(),
                            self.db().recovery_report(),
                            last_err.map(|f| f.msg).unwrap_or_default()
                        )))
                    }
                }
                self.integrity("crash reopen")?;
                if op == PowerLossReopen && matches!(self.store, Store::Sim(_)) {
                    self.c.power_losses += 1;
                }
            }
            Compact => {
                if self.wtx.is_some() {
                    // compact() waits for the writer: it would wait forever.
                    return Ok(());
                }
                let res = self.db().compact();
                if self.snaps.is_empty() {
                    res.map_err(e("compact"))?;
                    self.history = vec![self.committed.clone()];
                    self.verify_committed("compact")?;
                    let st = self.db().stats().map_err(e("stats"))?;
                    for ts in &st.tables {
                        let want = self.committed.get(&ts.name).map(|m| m.len() as u64);
                        check(
                            &format!("stats entries of {}", ts.name),
                            Some(ts.tree.entries),
                            want,
                        )?;
                    }
                } else {
                    match res {
                        Err(CoreError::ReadersActive(n)) => {
                            check("ReadersActive count", n, self.snaps.len())?
                        }
                        other => {
                            return Err(Failure::div(format!(
                            "compact with {} live readers: expected ReadersActive, got {other:?}",
                            self.snaps.len()
                        )))
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// The end of a case: commit or abort what is open, check every snapshot,
    /// reopen and compare everything.
    fn finish(&mut self) -> R {
        self.step(CheckSnapshot(0))?;
        self.step(Commit(false))?;
        for i in 0..self.snaps.len() {
            self.step(CheckSnapshot(i as u8))?;
        }
        self.step(Reopen)
    }
}

/// Where and how a case runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setup {
    pub kind: StoreKind,
    pub page_size: usize,
    pub cache_bytes: usize,
    /// `Builder::overlay_size`; with the overlay on, two write transactions
    /// in three write in `Durability::None` mode (the commit then sets the
    /// mode the case asks for), so their small changes go to the overlay.
    pub overlay_bytes: usize,
}

/// Runs one case; a panic inside the library or the harness is a failure.
pub fn run_case(setup: Setup, ops: &[Op]) -> (Counters, R) {
    let mut counters = Counters::default();
    let res = catch_unwind(AssertUnwindSafe(|| {
        let mut run = Run::new(setup)?;
        let res = (|| {
            for (i, op) in ops.iter().enumerate() {
                run.step(*op).map_err(|f| Failure {
                    msg: format!("op #{i} {op:?}: {}", f.msg),
                    ..f
                })?;
            }
            run.finish().map_err(|f| Failure {
                msg: format!("at the end of the case: {}", f.msg),
                ..f
            })
        })();
        counters = run.c;
        res
    }));
    let res = match res {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Err(Failure::div(format!("panic: {msg}")))
        }
    };
    (counters, res)
}

// ---------------------------------------------------------------------------
// The seeded generator.

/// Generator parameters.
#[derive(Debug, Clone, Copy)]
struct Gen {
    page_size: usize,
    ops: usize,
    /// Percent of commits that are durable.
    durable_pct: u64,
    /// Bulk loads: ids in `0..bulk_ids`, up to `bulk_n` keys each.
    bulk_ids: u64,
    bulk_n: u64,
}

fn gen_key(rng: &mut SplitMix64) -> K {
    const DENSE_LENS: [u16; 8] = [0, 1, 2, 4, 4, 6, 8, u16::MAX];
    match rng.below(10) {
        // Dense: a few dozen keys, so overwrites and deletes-to-empty happen.
        0..=5 => {
            let id = rng.below(24) as u32;
            K {
                id,
                len: DENSE_LENS[id as usize % 8],
            }
        }
        // Dense ids, any length (prefixes of each other).
        6 => K {
            id: rng.below(24) as u32,
            len: rng.below(1000) as u16,
        },
        // Maximum-length keys.
        7 => K {
            id: rng.next_u64() as u32,
            len: u16::MAX,
        },
        // Sparse.
        _ => K {
            id: rng.below(5000) as u32,
            len: 4 + rng.below(12) as u16,
        },
    }
}

fn gen_val(rng: &mut SplitMix64, page_size: usize) -> V {
    // Around the largest inline entry: values that just fit in a leaf
    // entry and values that just do not (stored out of line).
    let edge = cairndb::limits::max_entry_bytes(page_size) as u64;
    let len = match rng.below(100) {
        0..=5 => 0,
        6..=9 => (edge + rng.below(60)).saturating_sub(50),
        10..=44 => 1 + rng.below(16),
        45..=69 => 16 + rng.below(200),
        70..=96 => 200 + rng.below(3900),
        _ => 20 * 1024 + rng.below(20 * 1024),
    };
    V {
        len: len as u32,
        seed: rng.next_u64() as u8,
    }
}

fn gen_bound(rng: &mut SplitMix64) -> B {
    match rng.below(4) {
        0 => Un,
        1 | 2 => In(gen_key(rng)),
        _ => Ex(gen_key(rng)),
    }
}

fn gen_op(rng: &mut SplitMix64, g: &Gen) -> Op {
    let t = rng.below(3) as u8;
    match rng.below(100) {
        0..=28 => Insert(t, gen_key(rng), gen_val(rng, g.page_size)),
        29..=38 => Remove(t, gen_key(rng)),
        39..=43 => Get(t, gen_key(rng)),
        44..=53 => Range {
            t,
            lo: gen_bound(rng),
            hi: gen_bound(rng),
            mode: rng.below(4) as u8,
        },
        54..=56 => RemoveRange {
            t,
            lo: gen_bound(rng),
            hi: gen_bound(rng),
        },
        57..=58 => Drain {
            t,
            lo: gen_bound(rng),
            hi: gen_bound(rng),
        },
        59..=61 => PopFirst(t),
        62..=64 => PopLast(t),
        65..=66 => Retain(t, rng.next_u64() as u8),
        67..=69 => Append(
            t,
            // Often past the end: large ids at the maximum length.
            if rng.below(2) == 0 {
                K {
                    id: 0xFFFF_0000 | rng.below(0x10000) as u32,
                    len: u16::MAX,
                }
            } else {
                gen_key(rng)
            },
            gen_val(rng, g.page_size),
        ),
        70..=72 => Bulk {
            t,
            base: rng.below(g.bulk_ids) as u32,
            n: (1 + rng.below(g.bulk_n)) as u16,
            vlen: match rng.below(4) {
                0 => 0,
                1 | 2 => rng.below(64) as u16,
                _ => rng.below(2000) as u16,
            },
            klen: match rng.below(4) {
                0 => u16::MAX,
                1 => rng.below(40) as u16,
                _ => 6,
            },
        },
        73 => InsertTooLong(t, rng.below(64) as u16),
        74 => DeleteTable(t),
        75 => ListTables,
        76 => Pair(
            t,
            rng.below(3) as u8,
            gen_key(rng),
            gen_val(rng, g.page_size),
        ),
        77..=86 => Commit(rng.below(100) < g.durable_pct),
        87..=89 => Abort,
        90..=92 => Snapshot,
        93..=95 => CheckSnapshot(rng.next_u64() as u8),
        96 => DropSnapshot(rng.next_u64() as u8),
        97 => match rng.below(3) {
            0 => Reopen,
            1 => CrashReopen,
            _ => PowerLossReopen,
        },
        98 => Compact,
        _ => Commit(true),
    }
}

fn gen_case(rng: &mut SplitMix64, g: &Gen) -> Vec<Op> {
    (0..g.ops).map(|_| gen_op(rng, g)).collect()
}

/// Delta debugging: the shortest op list (by removing chunks, then single
/// ops, then simplifying) that still fails.
fn shrink(setup: Setup, ops: Vec<Op>, budget: usize) -> (Vec<Op>, String) {
    let fails = |ops: &[Op]| run_case(setup, ops).1.err().map(|f| f.msg);
    let mut best = ops;
    let mut msg = fails(&best).unwrap_or_else(|| "(did not fail again: flaky)".into());
    let mut runs = 0;
    let mut chunk = best.len().div_ceil(2).max(1);
    while runs < budget {
        let mut progress = false;
        let mut start = 0;
        while start < best.len() && runs < budget {
            let end = (start + chunk).min(best.len());
            let mut cand = best.clone();
            cand.drain(start..end);
            runs += 1;
            if let Some(m) = fails(&cand) {
                best = cand;
                msg = m;
                progress = true;
            } else {
                start += chunk;
            }
        }
        if !progress {
            if chunk == 1 {
                break;
            }
            chunk = chunk.div_ceil(2);
        }
    }
    // Make values and bulk loads smaller where that still fails.
    for i in 0..best.len() {
        for _ in 0..8 {
            if runs >= budget {
                break;
            }
            let simpler = match best[i] {
                Insert(t, k, v) if v.len > 8 => Some(Insert(
                    t,
                    k,
                    V {
                        len: v.len / 4,
                        ..v
                    },
                )),
                Bulk {
                    t,
                    base,
                    n,
                    vlen,
                    klen,
                } if n > 1 => Some(Bulk {
                    t,
                    base,
                    n: n / 2,
                    vlen,
                    klen,
                }),
                Commit(true) => Some(Commit(false)),
                _ => None,
            };
            let Some(s) = simpler else { break };
            let mut cand = best.clone();
            cand[i] = s;
            runs += 1;
            match fails(&cand) {
                Some(m) => {
                    best = cand;
                    msg = m;
                }
                None => break,
            }
        }
    }
    (best, msg)
}

/// The configurations cases rotate through.
const CONFIGS: [(Setup, Gen); 5] = [
    (
        Setup {
            kind: StoreKind::Sim,
            page_size: 512,
            cache_bytes: 1 << 20,
            overlay_bytes: 0,
        },
        Gen {
            page_size: 0,
            ops: 300,
            durable_pct: 40,
            bulk_ids: 4000,
            bulk_n: 400,
        },
    ),
    (
        Setup {
            kind: StoreKind::File,
            page_size: 512,
            cache_bytes: 64 << 10,
            overlay_bytes: 4 << 10,
        },
        Gen {
            page_size: 0,
            ops: 300,
            durable_pct: 10,
            bulk_ids: 4000,
            bulk_n: 400,
        },
    ),
    (
        Setup {
            kind: StoreKind::Sim,
            page_size: 4096,
            cache_bytes: 1 << 20,
            overlay_bytes: 32 << 20,
        },
        Gen {
            page_size: 0,
            ops: 300,
            durable_pct: 40,
            bulk_ids: 4000,
            bulk_n: 400,
        },
    ),
    (
        Setup {
            kind: StoreKind::File,
            page_size: 4096,
            cache_bytes: 256 << 10,
            overlay_bytes: 64 << 10,
        },
        Gen {
            page_size: 0,
            ops: 200,
            durable_pct: 10,
            bulk_ids: 4000,
            bulk_n: 400,
        },
    ),
    // Big tables, tiny pages, a cache far smaller than the file.
    (
        Setup {
            kind: StoreKind::Sim,
            page_size: 512,
            cache_bytes: 32 << 10,
            overlay_bytes: 2 << 10,
        },
        Gen {
            page_size: 0,
            ops: 150,
            durable_pct: 30,
            bulk_ids: 40_000,
            bulk_n: 3000,
        },
    ),
];

#[test]
fn model_random_sequences() {
    let seed = common::seed("model");
    let cases = common::iters(150);
    let only: Option<u64> = std::env::var("MODEL_CASE")
        .ok()
        .and_then(|s| s.parse().ok());
    let started = Instant::now();
    let mut total = Counters::default();
    let (mut n_cases, mut divergences, mut integrity_failures) = (0u64, 0u64, 0u64);
    let mut failures = Vec::new();
    for case in 0..cases {
        if only.is_some_and(|o| o != case) {
            continue;
        }
        let (setup, mut g) = CONFIGS[case as usize % CONFIGS.len()];
        g.page_size = setup.page_size;
        let mut rng = SplitMix64(seed ^ case.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let ops = gen_case(&mut rng, &g);
        let (c, res) = run_case(setup, &ops);
        n_cases += 1;
        total.ops += c.ops;
        total.reopens += c.reopens;
        total.commits += c.commits;
        total.integrity_checks += c.integrity_checks;
        total.crash_lost_commits += c.crash_lost_commits;
        total.process_crash_lost += c.process_crash_lost;
        total.power_losses += c.power_losses;
        total.max_depth = total.max_depth.max(c.max_depth);
        if let Err(f) = res {
            if f.integrity {
                integrity_failures += 1;
            } else {
                divergences += 1;
            }
            eprintln!(
                "model: FAILED case {case} ({setup:?}) SEED={seed} MODEL_CASE={case}: {}",
                f.msg
            );
            if failures.len() < 2 {
                // Shrinking runs hundreds of failing cases: keep their panic
                // messages quiet while it runs.
                let hook = std::panic::take_hook();
                std::panic::set_hook(Box::new(|_| {}));
                let (min, msg) = shrink(setup, ops.clone(), 1500);
                std::panic::set_hook(hook);
                eprintln!(
                    "model: minimized to {} ops ({setup:?}): {msg}\n  ops: vec!{min:?}",
                    min.len()
                );
            }
            failures.push(case);
        }
    }
    eprintln!(
        "model: commits={} integrity_checks={} max_depth={} power_losses={} crash_lost_commits={} (process crash: {}) elapsed={:.1}s",
        total.commits,
        total.integrity_checks,
        total.max_depth,
        total.power_losses,
        total.crash_lost_commits,
        total.process_crash_lost,
        started.elapsed().as_secs_f64()
    );
    common::report(&format!(
        "model: cases={n_cases} ops={} reopens={} divergences={divergences} integrity_failures={integrity_failures} seed={seed}",
        total.ops, total.reopens
    ));
    assert_eq!(divergences, 0, "failing cases: {failures:?} (SEED={seed})");
    assert_eq!(
        integrity_failures, 0,
        "failing cases: {failures:?} (SEED={seed})"
    );
    if only.is_none() && cases >= CONFIGS.len() as u64 {
        assert!(
            total.max_depth >= 4,
            "trees never got deep: max depth {}",
            total.max_depth
        );
    }
}

// ---------------------------------------------------------------------------
// The same executor under proptest, for its shrinking.

mod prop {
    use super::*;
    use proptest::prelude::*;
    use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};

    fn key() -> impl Strategy<Value = K> {
        (
            0u32..24,
            prop_oneof![
                Just(0u16),
                Just(1u16),
                Just(2u16),
                Just(4u16),
                Just(8u16),
                Just(u16::MAX),
                0u16..100
            ],
        )
            .prop_map(|(id, len)| K { id, len })
    }

    fn val() -> impl Strategy<Value = V> {
        (
            prop_oneof![6 => 0u32..64, 2 => 70u32..130, 3 => 64u32..4000, 1 => 20_000u32..24_000],
            any::<u8>(),
        )
            .prop_map(|(len, seed)| V { len, seed })
    }

    fn bnd() -> impl Strategy<Value = B> {
        prop_oneof![Just(Un), key().prop_map(In), key().prop_map(Ex)]
    }

    fn op() -> impl Strategy<Value = Op> {
        let t = 0u8..2;
        prop_oneof![
            30 => (t.clone(), key(), val()).prop_map(|(t, k, v)| Insert(t, k, v)),
            10 => (t.clone(), key()).prop_map(|(t, k)| Remove(t, k)),
            8 => (t.clone(), bnd(), bnd(), 0u8..4)
                .prop_map(|(t, lo, hi, mode)| Range { t, lo, hi, mode }),
            3 => (t.clone(), bnd(), bnd()).prop_map(|(t, lo, hi)| RemoveRange { t, lo, hi }),
            2 => (t.clone(), bnd(), bnd()).prop_map(|(t, lo, hi)| Drain { t, lo, hi }),
            2 => t.clone().prop_map(PopFirst),
            2 => t.clone().prop_map(PopLast),
            2 => (t.clone(), any::<u8>()).prop_map(|(t, p)| Retain(t, p)),
            2 => (t.clone(), key(), val()).prop_map(|(t, k, v)| Append(t, k, v)),
            3 => (t.clone(), 0u32..2000, 1u16..300, 0u16..100, prop_oneof![Just(6u16), Just(u16::MAX)])
                .prop_map(|(t, base, n, vlen, klen)| Bulk { t, base, n, vlen, klen }),
            1 => (t.clone(), t.clone(), key(), val()).prop_map(|(a, b, k, v)| Pair(a, b, k, v)),
            1 => t.clone().prop_map(DeleteTable),
            8 => any::<bool>().prop_map(Commit),
            3 => Just(Abort),
            3 => Just(Snapshot),
            3 => any::<u8>().prop_map(CheckSnapshot),
            1 => Just(Reopen),
            1 => Just(CrashReopen),
            1 => Just(PowerLossReopen),
            1 => Just(Compact),
        ]
    }

    #[test]
    fn model_proptest() {
        let seed = common::seed("model(proptest)");
        let mut bytes = [0u8; 32];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = (seed.rotate_left(i as u32 * 8) as u8) ^ i as u8;
        }
        let config = Config {
            cases: common::iters(100) as u32,
            failure_persistence: None,
            max_shrink_iters: 2000,
            ..Config::default()
        };
        let mut runner =
            TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &bytes));
        let cases = std::sync::atomic::AtomicU64::new(0);
        let ops_run = std::sync::atomic::AtomicU64::new(0);
        let setup = Setup {
            kind: StoreKind::Sim,
            page_size: 512,
            cache_bytes: 64 << 10,
            overlay_bytes: 8 << 10,
        };
        let res = runner.run(&proptest::collection::vec(op(), 1..120), |ops| {
            let (c, res) = run_case(setup, &ops);
            cases.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            ops_run.fetch_add(c.ops, std::sync::atomic::Ordering::Relaxed);
            res.map_err(|f| TestCaseError::fail(f.msg))
        });
        eprintln!(
            "model(proptest): runs={} ops={} seed={seed}",
            cases.into_inner(),
            ops_run.into_inner()
        );
        if let Err(err) = res {
            panic!("model(proptest) SEED={seed}: {err}");
        }
    }
}

// ---------------------------------------------------------------------------
// Fixed cases (edge cases, and shrunk failures if any), on both storages.

fn assert_case(ops: &[Op]) {
    for kind in [StoreKind::Sim, StoreKind::File] {
        for page_size in [512, 4096] {
            let setup = Setup {
                kind,
                page_size,
                cache_bytes: 64 << 10,
                overlay_bytes: 4 << 10,
            };
            let (_, res) = run_case(setup, ops);
            if let Err(f) = res {
                panic!("{setup:?}: {}", f.msg);
            }
        }
    }
}

fn k(id: u32, len: u16) -> K {
    K { id, len }
}

fn v(len: u32) -> V {
    V { len, seed: 7 }
}

/// The empty key, the longest key, an empty value and values far larger than
/// a page, overwritten inside a transaction, across commits, snapshots,
/// reopens and crashes.
#[test]
fn model_edge_keys_and_values() {
    assert_case(&[
        Insert(0, k(0, 0), v(0)),
        Insert(0, k(1, u16::MAX), v(40_000)),
        Range {
            t: 0,
            lo: Un,
            hi: Un,
            mode: 2,
        },
        Commit(true),
        Insert(0, k(1, u16::MAX), v(20_000)),
        Insert(0, k(0, 0), v(3)),
        Snapshot,
        Commit(false),
        Insert(0, k(1, u16::MAX), v(0)),
        CheckSnapshot(0),
        Reopen,
        Remove(0, k(1, u16::MAX)),
        Remove(0, k(0, 0)),
        Commit(true),
        Insert(1, k(2, 3), v(30_000)),
        Commit(false),
        CrashReopen,
        Insert(1, k(2, 3), v(25_000)),
        Commit(false),
        PowerLossReopen,
    ]);
}

/// Inverted and empty ranges with every bound kind, in all four read modes.
#[test]
fn model_edge_ranges() {
    let mut ops = vec![Bulk {
        t: 1,
        base: 0,
        n: 600,
        vlen: 5,
        klen: 6,
    }];
    let kk = |id: u32| k(id.swap_bytes(), 6);
    for (lo, hi) in [
        (In(kk(50)), In(kk(10))),
        (In(kk(10)), Ex(kk(10))),
        (Ex(kk(10)), In(kk(10))),
        (Ex(kk(10)), Ex(kk(10))),
        (In(kk(10)), In(kk(10))),
        (Ex(kk(9)), Ex(kk(11))),
        (Un, Ex(k(0, 0))),
        (In(k(0, 0)), Un),
        (In(kk(599)), Un),
        (Ex(kk(599)), Un),
    ] {
        for mode in 0..4 {
            ops.push(Range { t: 1, lo, hi, mode });
        }
        ops.push(Commit(false));
        ops.push(Snapshot);
        ops.push(CheckSnapshot(3));
    }
    ops.extend([
        RemoveRange {
            t: 1,
            lo: In(kk(100)),
            hi: Ex(kk(400)),
        },
        Drain {
            t: 1,
            lo: Ex(k(0, 0)),
            hi: Un,
        },
        Commit(true),
        Reopen,
    ]);
    assert_case(&ops);
}

/// A deep tree of long keys, emptied from both ends and by range, then
/// compacted and reopened.
#[test]
fn model_edge_deep_tree_to_empty() {
    let mut ops = vec![
        Bulk {
            t: 2,
            base: 0,
            n: 3000,
            vlen: 20,
            klen: 6,
        },
        Bulk {
            t: 0,
            base: 0,
            n: 800,
            vlen: 0,
            klen: u16::MAX,
        },
        Commit(false),
    ];
    for _ in 0..40 {
        ops.extend([PopFirst(2), PopLast(2), PopFirst(0)]);
    }
    ops.extend([
        Commit(false),
        Retain(2, 1),
        Commit(true),
        RemoveRange {
            t: 2,
            lo: Un,
            hi: Un,
        },
        DeleteTable(0),
        Commit(false),
        Compact,
        Reopen,
    ]);
    assert_case(&ops);
}

/// A durable commit that changes nothing, after a non-durable one whose
/// only change (a long key inserted and popped again) rewrote a tree and
/// was staged: it must make that commit durable, not wait for a commit no
/// slot or log records (was "commit 4 was never written out").
#[test]
fn model_edge_durable_empty_after_undone_tree_change() {
    let ops = [
        Bulk {
            t: 2,
            base: 10008,
            n: 1,
            vlen: 34,
            klen: u16::MAX,
        },
        Commit(false),
        Insert(
            2,
            k(1_442_930_099, u16::MAX),
            V {
                len: 1676,
                seed: 60,
            },
        ),
        PopLast(2),
        Commit(false),
        Commit(true),
        Reopen,
    ];
    for kind in [StoreKind::Sim, StoreKind::File] {
        for overlay_bytes in [0, 2 << 10] {
            let setup = Setup {
                kind,
                page_size: 512,
                cache_bytes: 32 << 10,
                overlay_bytes,
            };
            let (_, res) = run_case(setup, &ops);
            if let Err(f) = res {
                panic!("{setup:?}: {}", f.msg);
            }
        }
    }
}

/// Keys in order leave the tree a hint (the leaf the next one goes to,
/// with its key range) that inserts use without a descent; every other
/// change must drop it. In one write transaction at a time: a run of
/// ascending inserts past every key (the hint is then on the last leaf),
/// removals of the keys just before the run (their leaf runs short and
/// takes entries from the hinted one, whose range shrinks), then new values
/// for the run's first keys and inserts at random places around it —
/// checked against a model after each transaction and by the integrity
/// check at the end. Fails if the hint is used for keys outside its range.
#[test]
fn ordered_runs_then_changes_around_them_in_one_transaction() {
    const T: TableDefinition<&[u8], &[u8]> = TableDefinition::new("runs");
    let dir = tempfile::tempdir().expect("tempdir");
    // No overlay: every change goes to the trees, where the hint lives.
    let db = Database::builder()
        .overlay_size(0)
        .create(dir.path().join("runs.cairn"))
        .expect("create");
    let mut rng = SplitMix64(common::seed("ordered-runs"));
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let key = |i: u64| format!("key_{i:08}").into_bytes();
    let mut next = 0u64;
    for round in 0..common::iters(60) {
        let txn = db.begin_write().expect("begin");
        {
            let mut t = txn.open_table(T).expect("open");
            let put = |t: &mut cairndb::Table<'_, &[u8], &[u8]>,
                       model: &mut BTreeMap<Vec<u8>, Vec<u8>>,
                       i: u64,
                       len: usize| {
                let v = vec![(i % 251) as u8; len];
                t.insert(key(i).as_slice(), v.as_slice()).expect("insert");
                model.insert(key(i), v);
            };
            // A run past every key: the hint follows it.
            let base = next;
            let n = 20 + rng.below(60);
            for i in base..base + n {
                put(&mut t, &mut model, i, 100 + rng.below(200) as usize);
            }
            next = base + n;
            // The keys before the run, removed from the nearest down.
            for i in (base.saturating_sub(1 + rng.below(40))..base).rev() {
                t.remove(key(i).as_slice()).expect("remove");
                model.remove(&key(i));
            }
            // New values for the run's first keys, then changes around it.
            for i in base..base + rng.below(12) {
                put(&mut t, &mut model, i, 20 + rng.below(100) as usize);
            }
            for _ in 0..20 {
                let i = base.saturating_sub(60) + rng.below(60 + n);
                if rng.below(3) == 0 {
                    t.remove(key(i).as_slice()).expect("remove");
                    model.remove(&key(i));
                } else {
                    put(&mut t, &mut model, i, 20 + rng.below(250) as usize);
                }
            }
        }
        txn.commit().expect("commit");
        let r = db.begin_read().expect("read");
        let t = r.open_table(T).expect("open");
        let got: Vec<(Vec<u8>, Vec<u8>)> = t
            .iter()
            .expect("iter")
            .map(|e| {
                let (k, v) = e.expect("entry");
                (k.value().to_vec(), v.value().to_vec())
            })
            .collect();
        let want: Vec<(Vec<u8>, Vec<u8>)> =
            model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        assert!(
            got == want,
            "round {round}: the table differs from the model"
        );
        for (k, v) in &model {
            let g = t.get(k.as_slice()).expect("get");
            assert_eq!(
                g.map(|g| g.value().to_vec()).as_ref(),
                Some(v),
                "round {round}"
            );
        }
    }
    let report = db.check_integrity().expect("check");
    assert!(report.is_ok(), "{report:?}");
}
