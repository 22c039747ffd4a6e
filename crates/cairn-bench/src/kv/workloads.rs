//! Suite T (the Thunder vs bbolt table) and suite R (the redb comparison
//! suite), as specified in docs/benchmarks.md.

use std::path::PathBuf;
use std::time::Instant;

use indicatif::ProgressBar;

use crate::data::{permutation, Flat, Lcg, Rng, Touch};
use crate::engine::{EngineKind, Kv, Mode, Res};
use crate::peers;
use crate::report::{Row, SuiteResults, Unit};
use crate::suite::{discard, fresh_dir};
use crate::sysinfo::percentile;

/// Fixed seeds (printed with the results).
pub const SEED_T3: u64 = 12345;
pub const SEED_T5: u64 = 54321;
pub const SEED_T7: u64 = 0x7_7777;
pub const SEED_R: u64 = 0x5EED_0000_0000_0001;

/// How much work each row does.
#[derive(Debug, Clone)]
pub struct Counts {
    /// T1–T4 keys (100,000).
    pub t_keys: usize,
    /// T5 operations (10,000).
    pub t5_ops: usize,
    /// T5c writer threads (8).
    pub t5c_threads: usize,
    /// T6 transactions (1,000) × puts each (100).
    pub t6_txns: usize,
    pub t6_puts: usize,
    /// T7 values per size (100).
    pub t7_puts: usize,
    /// T7 values are `i % 256` (as published) instead of random bytes.
    pub t7_as_published: bool,
    /// R suite N (1,000,000).
    pub r_n: usize,
    /// R2 single-insert transactions (1,000).
    pub r2_txns: usize,
    /// R3 transactions (100) × inserts (1,000).
    pub r3_txns: usize,
    pub r3_puts: usize,
    /// R4 non-durable single-insert commits (50,000).
    pub r4_txns: usize,
    /// The durability modes of the write rows (`--durability`).
    pub modes: Vec<Mode>,
    /// Suite T value sizes (`--values`): 27 and 100 bytes.
    pub t_values: Vec<usize>,
}

impl Counts {
    pub fn full(scale: usize) -> Self {
        Counts {
            t_keys: 100_000,
            t5_ops: 10_000,
            t5c_threads: 8,
            t6_txns: 1_000,
            t6_puts: 100,
            t7_puts: 100,
            t7_as_published: false,
            r_n: scale,
            r2_txns: 1_000,
            r3_txns: 100,
            r3_puts: 1_000,
            r4_txns: 50_000,
            modes: vec![Mode::D, Mode::N],
            t_values: vec![27, 100],
        }
    }

    /// A smoke run: a tenth of the work.
    pub fn quick(scale: Option<usize>) -> Self {
        Counts {
            t_keys: 10_000,
            t5_ops: 1_000,
            t5c_threads: 8,
            t6_txns: 100,
            t6_puts: 100,
            t7_puts: 10,
            t7_as_published: false,
            r_n: scale.unwrap_or(10_000),
            r2_txns: 100,
            r3_txns: 10,
            r3_puts: 1_000,
            r4_txns: 5_000,
            modes: vec![Mode::D, Mode::N],
            t_values: vec![27, 100],
        }
    }
}

impl Counts {
    pub fn has(&self, mode: Mode) -> bool {
        self.modes.contains(&mode)
    }

    /// The mode of the database the read rows use: D if it runs, else N.
    pub fn primary(&self) -> Mode {
        if self.has(Mode::D) {
            Mode::D
        } else {
            Mode::N
        }
    }
}

/// Row-steps per suite run (for the progress bar).
pub const T_STEPS: u64 = 34;
pub const R_STEPS: u64 = 23;

/// One engine's run of one suite in one repeat.
pub struct Run<'a> {
    pub kind: EngineKind,
    pub root: PathBuf,
    pub res: &'a mut SuiteResults,
    pub pb: &'a ProgressBar,
}

impl Run<'_> {
    fn fresh(&self, name: &str) -> Res<(Box<dyn Kv>, PathBuf)> {
        let dir = fresh_dir(&self.root, name)?;
        Ok((peers::open(self.kind, &dir)?, dir))
    }

    fn step(&self, what: &str) {
        self.pb.set_message(format!("{} {what}", self.kind.title()));
    }

    fn done(&self) {
        self.pb.inc(1);
    }

    fn record(&mut self, row: &Row, v: f64) {
        self.res.record(row, self.kind, v);
    }

    fn record_cpf(&mut self, row: &Row, kv: &dyn Kv, before: Option<u64>, commits: u64) {
        let after = kv.flushes();
        self.res
            .record_flushes(row, self.kind, before, after, commits);
    }
}

fn row(id: String, label: String, unit: Unit) -> Row {
    Row {
        id,
        label,
        unit,
        show_cpf: false,
    }
}

fn cpf_row(id: String, label: String, unit: Unit) -> Row {
    Row {
        id,
        label,
        unit,
        show_cpf: true,
    }
}

fn timed<T>(f: impl FnOnce() -> Res<T>) -> Res<(T, f64)> {
    let t = Instant::now();
    let v = f()?;
    Ok((v, t.elapsed().as_secs_f64()))
}

fn expect_found(what: &str, t: Touch, want: u64) -> Res<()> {
    if t.found != want {
        return Err(format!("{what}: found {} entries, expected {want}", t.found).into());
    }
    Ok(())
}

fn n_label(n: usize) -> String {
    if n >= 1_000_000 && n.is_multiple_of(1_000_000) {
        format!("{}M", n / 1_000_000)
    } else if n >= 1_000 && n.is_multiple_of(1_000) {
        format!("{}K", n / 1_000)
    } else {
        n.to_string()
    }
}

// ---------------------------------------------------------------- suite T

/// One T5 operation.
#[derive(Debug, Clone, Copy)]
pub enum Op {
    /// Get `key_%08d` number `i` in its own read transaction.
    Read(usize),
    /// Put `mixed_%08d` number `i` → "mixed_value" in its own write
    /// transaction, committed.
    Write(usize),
}

/// Suite T data, generated once before any timed region.
pub struct TData {
    pub counts: Counts,
    /// `key_%08d`, ascending.
    pub keys: Flat,
    /// `value_%08d_padding_data` (27 B) and its 100-byte variant.
    pub vals27: Flat,
    pub vals100: Flat,
    /// T3: keys in LCG order.
    pub random_keys: Flat,
    /// T5.
    pub ops: Vec<Op>,
    pub mixed_keys: Flat,
    pub mixed_val: Flat,
    /// T6: `batch_%06d_%03d`.
    pub batch_keys: Flat,
    pub batch_val: Flat,
    /// T7: (size, keys, values).
    pub large: Vec<(usize, Flat, Flat)>,
}

impl TData {
    pub fn new(counts: &Counts) -> TData {
        let n = counts.t_keys;
        let keys = Flat::from_fn(n, |i| format!("key_{i:08}").into_bytes());
        let vals27 = Flat::from_fn(n, |i| format!("value_{i:08}_padding_data").into_bytes());
        let vals100 = Flat::from_fn(n, |i| {
            let mut v = format!("value_{i:08}_padding_data").into_bytes();
            v.resize(100, b'x');
            v
        });
        let mut lcg = Lcg::new(SEED_T3);
        let random_keys = keys.pick((0..n).map(|_| (lcg.next_u64() % n as u64) as usize));
        let mut lcg = Lcg::new(SEED_T5);
        let mut ops = Vec::with_capacity(counts.t5_ops);
        for i in 0..counts.t5_ops {
            let r = lcg.next_u64();
            if r % 10 < 7 {
                ops.push(Op::Read((r % n as u64) as usize));
            } else {
                ops.push(Op::Write(i));
            }
        }
        // Four T5 runs (T5 and T5c, D and N) and two T6 runs each write
        // keys of their own.
        let mixed_keys = Flat::from_fn(4 * counts.t5_ops, |i| format!("mixed_{i:08}").into_bytes());
        let mixed_val = Flat::repeat(b"mixed_value", mixed_keys.len());
        let batch_keys = Flat::from_fn(2 * counts.t6_txns * counts.t6_puts, |i| {
            format!("batch_{:06}_{:03}", i / counts.t6_puts, i % counts.t6_puts).into_bytes()
        });
        let batch_val = Flat::repeat(b"batch_value", batch_keys.len());
        let mut rng = Rng::new(SEED_T7);
        let large = [1usize << 10, 10 << 10, 100 << 10, 1 << 20]
            .into_iter()
            .map(|size| {
                let k = Flat::from_fn(counts.t7_puts, |i| format!("large_{i:08}").into_bytes());
                let v = if counts.t7_as_published {
                    Flat::from_fn(counts.t7_puts, |_| {
                        (0..size).map(|j| (j % 256) as u8).collect()
                    })
                } else {
                    Flat::random(&mut rng, size, counts.t7_puts)
                };
                (size, k, v)
            })
            .collect();
        TData {
            counts: counts.clone(),
            keys,
            vals27,
            vals100,
            random_keys,
            ops,
            mixed_keys,
            mixed_val,
            batch_keys,
            batch_val,
            large,
        }
    }
}

/// Runs T5 (or T5c with `threads` > 1) as run number `run` (0..4) of the
/// suite: its writes go to `mixed_%08d` keys `run * t5_ops + i`, so no run
/// rewrites an existing entry with identical bytes (SQLite, for one, turns
/// such a commit into a no-op). Returns (seconds, commit latencies in µs,
/// entries found by the reads).
fn mixed(
    kv: &dyn Kv,
    d: &TData,
    mode: Mode,
    threads: usize,
    run: usize,
) -> Res<(f64, Vec<f64>, u64)> {
    let base = run * d.counts.t5_ops;
    let worker = |t: usize| -> Res<(Vec<f64>, u64)> {
        let mut lat = Vec::new();
        let mut found = 0;
        for op in d.ops.iter().skip(t).step_by(threads) {
            match *op {
                Op::Read(i) => found += kv.get_each(&d.keys, i..i + 1)?.found,
                Op::Write(i) => {
                    let i = base + i;
                    let s = Instant::now();
                    kv.put_batch(&d.mixed_keys, &d.mixed_val, i..i + 1, mode)?;
                    lat.push(s.elapsed().as_secs_f64() * 1e6);
                }
            }
        }
        Ok((lat, found))
    };
    let start = Instant::now();
    let parts: Vec<Res<(Vec<f64>, u64)>> = if threads == 1 {
        vec![worker(0)]
    } else {
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..threads)
                .map(|t| {
                    let w = &worker;
                    s.spawn(move || w(t))
                })
                .collect();
            hs.into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err("a T5c thread panicked".into()))
                })
                .collect()
        })
    };
    let secs = start.elapsed().as_secs_f64();
    let mut lat = Vec::new();
    let mut found = 0;
    for p in parts {
        let (l, f) = p?;
        lat.extend(l);
        found += f;
    }
    lat.sort_by(f64::total_cmp);
    Ok((secs, lat, found))
}

pub fn run_t(run: &mut Run<'_>, d: &TData) -> Res<()> {
    let c = &d.counts;
    let n = c.t_keys;
    let nl = n_label(n);
    let primary = c.primary();
    let mut kept: Option<(Box<dyn Kv>, PathBuf)> = None;
    for (vs, vals) in [(27usize, &d.vals27), (100, &d.vals100)] {
        if !c.t_values.contains(&vs) {
            continue;
        }
        // T1 in each mode; the primary mode's database (D if it runs) serves
        // the reads and, for the first value size, T5–T6.
        let mut main: Option<(Box<dyn Kv>, PathBuf)> = None;
        for mode in [Mode::D, Mode::N] {
            if !c.has(mode) {
                continue;
            }
            let m = mode.label();
            let r = row(
                format!("T1/{vs}/{m}"),
                format!("T1 {nl} puts ascending, 1 txn, {vs} B values ({m})"),
                Unit::PerSec("puts"),
            );
            run.step(&r.label);
            let (kv, dir) = run.fresh(&format!("t1-{vs}-{}", m.to_lowercase()))?;
            let (_, s) = timed(|| kv.put_batch(&d.keys, vals, 0..n, mode))?;
            run.record(&r, n as f64 / s);
            if mode == primary {
                main = Some((kv, dir));
            } else {
                discard(kv, &dir);
            }
            run.done();
        }
        let (kv, dir) = main.ok_or("T1 database missing")?;

        let r = row(
            format!("T2/{vs}"),
            format!("T2 {nl} gets in key order, 1 read txn, {vs} B"),
            Unit::PerSec("gets"),
        );
        run.step(&r.label);
        let (t, s) = timed(|| kv.get_each(&d.keys, 0..n))?;
        expect_found("T2", t, n as u64)?;
        run.record(&r, n as f64 / s);
        run.done();

        let r = row(
            format!("T3/{vs}"),
            format!("T3 {nl} gets in LCG order, 1 read txn, {vs} B"),
            Unit::PerSec("gets"),
        );
        run.step(&r.label);
        let (t, s) = timed(|| kv.get_each(&d.random_keys, 0..n))?;
        expect_found("T3", t, n as u64)?;
        run.record(&r, n as f64 / s);
        run.done();

        let r = row(
            format!("T4/{vs}"),
            format!("T4 full scan of {nl} entries, {vs} B"),
            Unit::PerSec("entries"),
        );
        run.step(&r.label);
        let (t, s) = timed(|| kv.scan())?;
        expect_found("T4", t, n as u64)?;
        run.record(&r, n as f64 / s);
        run.done();

        // T2r–T4r: the same reads right after closing and reopening the
        // database — the OS page cache hot, the engine's own caches cold, the
        // way a restarted service meets its data. Every page a reader of
        // CairnDB loads is checksummed on its first visit.
        drop(kv);
        for (id, what) in [
            (
                "T2r",
                format!("T2r {nl} gets in key order after a reopen, {vs} B"),
            ),
            (
                "T3r",
                format!("T3r {nl} gets in LCG order after a reopen, {vs} B"),
            ),
            (
                "T4r",
                format!("T4r full scan of {nl} entries after a reopen, {vs} B"),
            ),
        ] {
            let r = row(
                format!("{id}/{vs}"),
                what,
                Unit::PerSec(if id == "T4r" { "entries" } else { "gets" }),
            );
            run.step(&r.label);
            // Each row meets a cold engine: a handle of its own.
            let kv = peers::open(run.kind, &dir)?;
            let (t, s) = match id {
                "T2r" => timed(|| kv.get_each(&d.keys, 0..n))?,
                "T3r" => timed(|| kv.get_each(&d.random_keys, 0..n))?,
                _ => timed(|| kv.scan())?,
            };
            expect_found(id, t, n as u64)?;
            run.record(&r, n as f64 / s);
            drop(kv);
            run.done();
        }
        let kv = peers::open(run.kind, &dir)?;

        if kept.is_none() {
            kept = Some((kv, dir));
        } else {
            discard(kv, &dir);
        }
    }
    let (kv, dir) = kept.ok_or("T1 database missing")?;
    let reads = d.ops.iter().filter(|o| matches!(o, Op::Read(_))).count() as u64;
    let writes = d.ops.len() as u64 - reads;
    let ops = n_label(c.t5_ops);
    // T5 and T5c, in both modes.
    let mut single = [0.0f64; 2];
    for (ti, threads) in [1usize, c.t5c_threads].into_iter().enumerate() {
        for (mi, mode) in [Mode::D, Mode::N].into_iter().enumerate() {
            if !c.has(mode) {
                continue;
            }
            let name = if threads == 1 { "T5" } else { "T5c" };
            let label = if threads == 1 {
                format!("T5 mixed {ops} ops, 70% reads ({})", mode.label())
            } else {
                format!(
                    "T5c mixed {ops} ops on {threads} threads ({})",
                    mode.label()
                )
            };
            let r = cpf_row(
                format!("{name}/{}", mode.label()),
                label,
                Unit::PerSec("ops"),
            );
            run.step(&r.label);
            let before = kv.flushes();
            let (s, lat, found) = mixed(kv.as_ref(), d, mode, threads, 2 * ti + mi)?;
            if found != reads {
                return Err(format!("{name}: reads found {found} of {reads} keys").into());
            }
            let opss = d.ops.len() as f64 / s;
            run.record(&r, opss);
            if mode == Mode::D {
                run.record_cpf(&r, kv.as_ref(), before, writes);
            }
            for (q, qn) in [(0.50, "p50"), (0.99, "p99")] {
                let rq = row(
                    format!("{name}/{}/{qn}", mode.label()),
                    format!("{name} commit latency {qn} ({})", mode.label()),
                    Unit::Micros,
                );
                run.record(&rq, percentile(&lat, q));
            }
            if ti == 0 {
                single[mi] = opss;
            } else {
                let rr = row(
                    format!("T5c/{}/ratio", mode.label()),
                    format!("T5c ÷ T5 ({})", mode.label()),
                    Unit::Factor,
                );
                run.record(&rr, opss / single[mi]);
            }
            run.done();
        }
    }
    // T6 (the N run writes transactions t6_txns.. of batch_%06d_%03d).
    for (mi, mode) in [Mode::D, Mode::N].into_iter().enumerate() {
        if !c.has(mode) {
            continue;
        }
        let r = cpf_row(
            format!("T6/{}", mode.label()),
            format!(
                "T6 {} txns × {} puts, each committed ({})",
                n_label(c.t6_txns),
                c.t6_puts,
                mode.label()
            ),
            Unit::PerSec("txns"),
        );
        run.step(&r.label);
        let before = kv.flushes();
        let (_, s) = timed(|| {
            for t in mi * c.t6_txns..(mi + 1) * c.t6_txns {
                kv.put_batch(
                    &d.batch_keys,
                    &d.batch_val,
                    t * c.t6_puts..(t + 1) * c.t6_puts,
                    mode,
                )?;
            }
            Ok(())
        })?;
        run.record(&r, c.t6_txns as f64 / s);
        if mode == Mode::D {
            run.record_cpf(&r, kv.as_ref(), before, c.t6_txns as u64);
        }
        run.done();
    }
    discard(kv, &dir);
    // T7.
    for (size, keys, vals) in &d.large {
        let sl = if *size >= 1 << 20 {
            format!("{} MiB", size >> 20)
        } else {
            format!("{} KiB", size >> 10)
        };
        let mib = (keys.len() * size) as f64 / (1 << 20) as f64;
        for mode in [Mode::D, Mode::N] {
            if !c.has(mode) {
                continue;
            }
            let r = row(
                format!("T7/{size}/write/{}", mode.label()),
                format!(
                    "T7 write {} × {sl} values, 1 txn ({})",
                    keys.len(),
                    mode.label()
                ),
                Unit::MibPerSec,
            );
            run.step(&r.label);
            let (kv, dir) = run.fresh(&format!("t7-{size}-{}", mode.label()))?;
            let (_, s) = timed(|| kv.put_batch(keys, vals, 0..keys.len(), mode))?;
            run.record(&r, mib / s);
            run.done();
            if mode == primary {
                let r = row(
                    format!("T7/{size}/read"),
                    format!("T7 read back {} × {sl} values", keys.len()),
                    Unit::MibPerSec,
                );
                run.step(&r.label);
                let (t, s) = timed(|| kv.get_each(keys, 0..keys.len()))?;
                expect_found("T7 read", t, keys.len() as u64)?;
                run.record(&r, mib / s);
                run.done();
            }
            discard(kv, &dir);
        }
    }
    Ok(())
}

// ---------------------------------------------------------------- suite R

/// Suite R data: 24-byte random keys, 150-byte random values.
pub struct RData {
    pub counts: Counts,
    pub keys: Flat,
    pub vals: Flat,
    /// Fresh keys for R2 (D, N), R3 (D, N) and R4, and values for them.
    pub r2: [Flat; 2],
    pub r3: [Flat; 2],
    pub r4: Flat,
    pub xvals: Flat,
    /// R6/R8: every key in a random order.
    pub shuffled: Flat,
    /// R7: N/2 random start keys.
    pub starts: Flat,
    /// R11: N sorted 32-byte keys.
    pub sorted: Flat,
}

impl RData {
    pub fn new(counts: &Counts) -> RData {
        let n = counts.r_n;
        let mut rng = Rng::new(SEED_R);
        let keys = Flat::random(&mut rng, 24, n);
        let vals = Flat::random(&mut rng, 150, n);
        let r2 = [
            Flat::random(&mut rng, 24, counts.r2_txns),
            Flat::random(&mut rng, 24, counts.r2_txns),
        ];
        let r3n = counts.r3_txns * counts.r3_puts;
        let r3 = [
            Flat::random(&mut rng, 24, r3n),
            Flat::random(&mut rng, 24, r3n),
        ];
        let r4 = Flat::random(&mut rng, 24, counts.r4_txns);
        let xn = counts.r2_txns.max(r3n).max(counts.r4_txns);
        let xvals = Flat::random(&mut rng, 150, xn);
        let shuffled = keys.pick(permutation(&mut rng, n));
        let starts = keys.pick((0..n / 2).map(|_| rng.below(n)));
        let mut sorted = Flat::with_capacity(32, n);
        let mut k = [0u8; 32];
        for i in 0..n {
            k[..8].copy_from_slice(&(i as u64).to_be_bytes());
            rng.fill(&mut k[8..]);
            sorted.push(&k);
        }
        RData {
            counts: counts.clone(),
            keys,
            vals,
            r2,
            r3,
            r4,
            xvals,
            shuffled,
            starts,
            sorted,
        }
    }
}

pub fn run_r(run: &mut Run<'_>, d: &RData) -> Res<()> {
    let c = &d.counts;
    let n = c.r_n;
    let nl = n_label(n);
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    // R1, in each mode: the primary mode's database (D if it runs) serves
    // R2–R10; the other one only R9 in its mode.
    let primary = c.primary();
    let mut main: Option<(Box<dyn Kv>, PathBuf)> = None;
    let mut other: Option<(Box<dyn Kv>, PathBuf)> = None;
    for mode in [Mode::D, Mode::N] {
        if !c.has(mode) {
            continue;
        }
        let m = mode.label();
        let r = row(
            format!("R1/{m}"),
            format!("R1 bulk load {nl} pairs, 1 txn ({m})"),
            Unit::PerSec("puts"),
        );
        run.step(&r.label);
        let (kv, dir) = run.fresh(&format!("r1-{}", m.to_lowercase()))?;
        let (_, s) = timed(|| kv.put_batch(&d.keys, &d.vals, 0..n, mode))?;
        run.record(&r, n as f64 / s);
        if mode == primary {
            main = Some((kv, dir));
        } else {
            other = Some((kv, dir));
        }
        run.done();
    }
    let (mut kv, dir) = main.ok_or("R1 database missing")?;
    let mut total = n as u64;
    // R2.
    for (mi, mode) in [Mode::D, Mode::N].into_iter().enumerate() {
        if !c.has(mode) {
            continue;
        }
        let r = cpf_row(
            format!("R2/{}", mode.label()),
            format!(
                "R2 {} txns of 1 insert ({})",
                n_label(c.r2_txns),
                mode.label()
            ),
            Unit::PerSec("txns"),
        );
        run.step(&r.label);
        let before = kv.flushes();
        let (_, s) = timed(|| {
            for i in 0..c.r2_txns {
                kv.put_batch(&d.r2[mi], &d.xvals, i..i + 1, mode)?;
            }
            Ok(())
        })?;
        run.record(&r, c.r2_txns as f64 / s);
        total += c.r2_txns as u64;
        if mode == Mode::D {
            run.record_cpf(&r, kv.as_ref(), before, c.r2_txns as u64);
        }
        run.done();
    }
    // R3.
    for (mi, mode) in [Mode::D, Mode::N].into_iter().enumerate() {
        if !c.has(mode) {
            continue;
        }
        let r = cpf_row(
            format!("R3/{}", mode.label()),
            format!(
                "R3 {} txns × {} inserts ({})",
                c.r3_txns,
                n_label(c.r3_puts),
                mode.label()
            ),
            Unit::PerSec("inserts"),
        );
        run.step(&r.label);
        let before = kv.flushes();
        let (_, s) = timed(|| {
            for t in 0..c.r3_txns {
                kv.put_batch(
                    &d.r3[mi],
                    &d.xvals,
                    t * c.r3_puts..(t + 1) * c.r3_puts,
                    mode,
                )?;
            }
            Ok(())
        })?;
        run.record(&r, (c.r3_txns * c.r3_puts) as f64 / s);
        total += (c.r3_txns * c.r3_puts) as u64;
        if mode == Mode::D {
            run.record_cpf(&r, kv.as_ref(), before, c.r3_txns as u64);
        }
        run.done();
    }
    // R4 (an N row).
    if c.has(Mode::N) {
        let r = row(
            "R4/N".into(),
            format!("R4 {} single-insert commits (N)", n_label(c.r4_txns)),
            Unit::PerSec("txns"),
        );
        run.step(&r.label);
        let (_, s) = timed(|| {
            for i in 0..c.r4_txns {
                kv.put_batch(&d.r4, &d.xvals, i..i + 1, Mode::N)?;
            }
            Ok(())
        })?;
        run.record(&r, c.r4_txns as f64 / s);
        total += c.r4_txns as u64;
        run.done();
    }
    // R5: where a call takes microseconds one timing is mostly noise (a
    // page fault, a timer tick): the median of up to 101 calls, each its own
    // read transaction, within half a second (engines that count by
    // iterating get one or a few calls).
    let r = row(
        "R5".into(),
        "R5 len() of the table (median of ≤ 101 calls)".into(),
        Unit::Micros,
    );
    run.step(&r.label);
    let mut times = Vec::with_capacity(101);
    let started = Instant::now();
    while times.len() < 101 && (times.is_empty() || started.elapsed().as_secs_f64() < 0.5) {
        let (len, s) = timed(|| kv.count())?;
        if len != total {
            return Err(format!("R5: len() is {len}, expected {total}").into());
        }
        times.push(s);
    }
    times.sort_by(f64::total_cmp);
    run.record(&r, times[times.len() / 2] * 1e6);
    run.done();
    // R6: the middle of 3 runs.
    let r = row(
        "R6".into(),
        format!("R6 {nl} random gets, 1 read txn (middle of 3)"),
        Unit::PerSec("gets"),
    );
    run.step(&r.label);
    let mut rates = Vec::new();
    for _ in 0..3 {
        let (t, s) = timed(|| kv.get_each(&d.shuffled, 0..n))?;
        expect_found("R6", t, n as u64)?;
        rates.push(n as f64 / s);
    }
    rates.sort_by(f64::total_cmp);
    run.record(&r, rates[1]);
    run.done();
    // R7.
    let r = row(
        "R7".into(),
        format!("R7 {} range reads of 10 entries", n_label(n / 2)),
        Unit::PerSec("ranges"),
    );
    run.step(&r.label);
    let (t, s) = timed(|| kv.range_reads(&d.starts, 10))?;
    if t.found < (n / 2) as u64 {
        return Err(format!("R7: only {} entries read", t.found).into());
    }
    run.record(&r, (n / 2) as f64 / s);
    run.done();
    // R8.
    for threads in [1usize, 2, 4, 8] {
        let r = row(
            format!("R8/{threads}"),
            format!("R8 {nl} random gets on {threads} thread(s)"),
            Unit::PerSec("gets"),
        );
        run.step(&r.label);
        let per = n / threads;
        let kvr: &dyn Kv = kv.as_ref();
        let (found, s) = timed(|| {
            std::thread::scope(|sc| {
                let hs: Vec<_> = (0..threads)
                    .map(|t| sc.spawn(move || kvr.get_each(&d.shuffled, t * per..(t + 1) * per)))
                    .collect();
                let mut found = 0;
                for h in hs {
                    found += h.join().map_err(|_| "an R8 thread panicked")??.found;
                }
                Ok(found)
            })
        })?;
        if found != (per * threads) as u64 {
            return Err(format!("R8: found {found} of {}", per * threads).into());
        }
        run.record(&r, (per * threads) as f64 / s);
        run.done();
    }
    // R8p: the same gets in reader processes, while this process commits
    // (one rewritten pair per non-durable commit), for the engines whose
    // readers can live in other processes.
    if let (Some(spec), Some(exe)) = (kv.reader_spec(), super::procs::reader_exe()) {
        kv.publish()?;
        for procs in [1usize, 2, 4] {
            let r = row(
                format!("R8p/{procs}"),
                format!("R8p {nl} random gets in {procs} reader process(es) beside a writer"),
                Unit::PerSec("gets"),
            );
            run.step(&r.label);
            let kvr: &dyn Kv = kv.as_ref();
            let mut i = 0usize;
            let (found, secs, _) =
                super::procs::run_readers(&exe, &spec, &d.shuffled, procs, &run.root, || {
                    let j = i % n;
                    i += 1;
                    kvr.put_batch(&d.keys, &d.vals, j..j + 1, Mode::N)
                })?;
            let per = n / procs;
            if found != (per * procs) as u64 {
                return Err(format!("R8p: found {found} of {}", per * procs).into());
            }
            run.record(&r, found as f64 / secs);
            run.done();
        }
    }
    // R9.
    let half = n / 2;
    for mode in [Mode::D, Mode::N] {
        if !c.has(mode) {
            continue;
        }
        let r = row(
            format!("R9/{}", mode.label()),
            format!("R9 delete {} keys, 1 txn ({})", n_label(half), mode.label()),
            Unit::PerSec("deletes"),
        );
        run.step(&r.label);
        let target: &dyn Kv = match &other {
            Some((o, _)) if mode != primary => o.as_ref(),
            _ => kv.as_ref(),
        };
        let (deleted, s) = timed(|| target.delete_batch(&d.keys, 0..half, mode))?;
        if deleted != half as u64 {
            return Err(format!("R9: deleted {deleted} of {half}").into());
        }
        run.record(&r, half as f64 / s);
        run.done();
    }
    if let Some((o, dir_o)) = other {
        discard(o, &dir_o);
    }
    // R10.
    let r_before = row(
        "R10/before".into(),
        "R10 space on disk after R9, before compaction".into(),
        Unit::Mib,
    );
    let r_after = row(
        "R10/after".into(),
        "R10 space on disk after compaction".into(),
        Unit::Mib,
    );
    run.step(&r_before.label);
    run.record(&r_before, mib(kv.disk_bytes()));
    match kv.compact()? {
        Some(after) => run.record(&r_after, mib(after)),
        None => run
            .res
            .note(run.kind, "R10: no compaction available".into()),
    }
    run.done();
    discard(kv, &dir);
    // R11.
    for mode in [Mode::D, Mode::N] {
        if !c.has(mode) {
            continue;
        }
        let r = row(
            format!("R11/{}", mode.label()),
            format!(
                "R11 {nl} sorted 32 B keys, fastest sorted path ({})",
                mode.label()
            ),
            Unit::PerSec("inserts"),
        );
        run.step(&r.label);
        let (kv, dir) = run.fresh(&format!("r11-{}", mode.label()))?;
        let (_, s) = timed(|| kv.append_sorted(&d.sorted, &d.vals, mode))?;
        run.record(&r, n as f64 / s);
        let len = kv.count()?;
        if len != n as u64 {
            return Err(format!("R11: len() is {len}, expected {n}").into());
        }
        discard(kv, &dir);
        run.done();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// T5 and T5c write every `mixed_%08d` key they claim to write, on every
    /// engine compiled in.
    #[test]
    fn mixed_writes_land() {
        let counts = Counts::quick(None);
        let d = TData::new(&counts);
        let written: Vec<usize> = d
            .ops
            .iter()
            .filter_map(|o| match o {
                Op::Write(i) => Some(*i),
                Op::Read(_) => None,
            })
            .collect();
        for kind in EngineKind::ALL
            .into_iter()
            .filter(|e| e.compiled() && !e.external())
        {
            for threads in [1, 8] {
                for mode in [Mode::D, Mode::N] {
                    let dir = tempfile::tempdir().unwrap();
                    let kv = peers::open(kind, dir.path()).unwrap();
                    kv.put_batch(&d.keys, &d.vals27, 0..d.keys.len(), Mode::N)
                        .unwrap();
                    let (_, lat, _) = mixed(kv.as_ref(), &d, mode, threads, 3).unwrap();
                    assert_eq!(lat.len(), written.len());
                    let probe = d
                        .mixed_keys
                        .pick(written.iter().map(|i| 3 * counts.t5_ops + i));
                    let t = kv.get_each(&probe, 0..probe.len()).unwrap();
                    assert_eq!(
                        t.found,
                        written.len() as u64,
                        "{} threads={threads} {mode:?}",
                        kind.name()
                    );
                }
            }
        }
    }
}
