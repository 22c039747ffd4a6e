//! Suite E (`cairn bench events`): the event store workloads of seed 003
//! (an event store on RocksDB; see `docs/benchmarks.md`), on CairnDB's
//! event store and, with `--features peers`, on SQLite with an events table.
//!
//! Rows (µs per event unless said):
//! - E1 WriteEvents: N events, one per commit, modes D and N;
//! - E2 the same events batched, 100 per commit;
//! - E3 ReadEvents: the grid EventCount × EntityCount, events appended
//!   round-robin over the entities; the timed part reads every event of one
//!   entity and decodes it;
//! - E4 a backward read of an entity's last 100 events; E5 a replay from a
//!   snapshot (`load`);
//! - E6 concurrent writers on disjoint streams (events/s; commits per flush);
//! - E7 a catch-up subscription from position 0 (events/s);
//! - E8 a live tail beside concurrent writers: latency from the writer's
//!   append call to delivery, p50/p99, and every event checked delivered
//!   once, in position order.
//!
//! The seed's own RocksDB figures (other hardware, no fsync) are printed
//! beside ours: RocksDB itself is only behind the `rocksdb` feature and has
//! no event-store adapter here.

pub mod mix;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use cairndb::events::EventData;
use indicatif::ProgressBar;
use serde_json::{json, Value};

use crate::args::{CommonArgs, EventArgs};
use crate::data::Rng;
use crate::engine::{Delivered, EngineKind, EventEngine, Mode, Res};
use crate::peers;
use crate::report::{n_label, Row, SuiteResults, Unit};
use crate::suite::{
    adapter_lines, adapters_json, discard, engines_with_adapter, fresh_dir, json_report,
    modes_line, progress_bar, record_peak, render_header, Chart, NotRun, Setting, Suite,
};
use crate::sysinfo::{self, percentile};
use mix::State;

/// ReadEvents grid cells: (events per entity, entities).
pub type Cells = Vec<(usize, usize)>;

/// How much work each row of suite E does.
#[derive(Debug, Clone)]
pub struct ECounts {
    /// E1: events written one per commit (100, 1,000, 10,000).
    pub write_ns: Vec<usize>,
    /// E1/E2 cycle over this many entity streams (100).
    pub write_entities: usize,
    /// E2: events (10,000) in commits of `batch` (100).
    pub batch_total: usize,
    pub batch: usize,
    /// E3: the grid.
    pub grid_events: Vec<usize>,
    pub grid_entities: Vec<usize>,
    /// E3: cells whose store would hold more events are skipped.
    pub grid_limit: usize,
    /// E3–E5: entities read per cell and repeat (16).
    pub samples: usize,
    /// Events per commit while loading the grid and catch-up stores.
    pub load_batch: usize,
    /// E6: writer threads and total events per run.
    pub threads: Vec<usize>,
    pub conc_events: usize,
    /// E7: events the subscriber catches up over (`--scale`).
    pub catchup: usize,
    /// E8: writers and events each.
    pub tail_writers: usize,
    pub tail_events: usize,
    /// The durability modes of the write rows.
    pub modes: Vec<Mode>,
}

impl ECounts {
    pub fn full(scale: usize, tail_writers: usize) -> Self {
        ECounts {
            write_ns: vec![100, 1_000, 10_000],
            write_entities: 100,
            batch_total: 10_000,
            batch: 100,
            grid_events: vec![100, 1_000, 10_000],
            grid_entities: vec![100, 1_000],
            grid_limit: scale.saturating_mul(10),
            samples: 16,
            load_batch: 10_000,
            threads: vec![1, 2, 4, 8],
            conc_events: 4_000,
            catchup: scale,
            tail_writers,
            tail_events: 500,
            modes: vec![Mode::D, Mode::N],
        }
    }

    /// A smoke run: small writes, the grid up to 100,000 events (or 10 ×
    /// `--scale`), a 10,000-event catch-up.
    pub fn quick(scale: Option<usize>, tail_writers: usize) -> Self {
        let scale = scale.unwrap_or(10_000);
        ECounts {
            write_ns: vec![100, 1_000],
            write_entities: 100,
            batch_total: 1_000,
            batch: 100,
            grid_events: vec![100, 1_000],
            grid_entities: vec![100, 1_000],
            grid_limit: scale.saturating_mul(10),
            samples: 8,
            load_batch: 10_000,
            threads: vec![1, 2, 4, 8],
            conc_events: 400,
            catchup: scale,
            tail_writers,
            tail_events: 100,
            modes: vec![Mode::D, Mode::N],
        }
    }

    fn has(&self, mode: Mode) -> bool {
        self.modes.contains(&mode)
    }

    /// The grid cells that run, and those skipped for their size.
    pub fn grid(&self) -> (Cells, Cells) {
        let mut ran = Vec::new();
        let mut skipped = Vec::new();
        for &en in &self.grid_entities {
            for &ec in &self.grid_events {
                if ec.saturating_mul(en) <= self.grid_limit {
                    ran.push((ec, en));
                } else {
                    skipped.push((ec, en));
                }
            }
        }
        (ran, skipped)
    }
}

/// Everything one `cairn bench events` measured.
pub struct EOutcome {
    pub engines: Vec<EngineKind>,
    pub not_run: NotRun,
    pub setting: Setting,
    pub counts: ECounts,
    pub res: SuiteResults,
}

/// The title of suite E's table and chart.
const TITLE: &str = "Suite E — the event store (seed 003)";

impl Suite for EventArgs {
    type Outcome = EOutcome;

    /// Runs suite E and returns every figure.
    fn execute(&self, progress: bool) -> Res<EOutcome> {
        let args = self;
        let common = &args.common;
        let (engines, not_run) =
            engines_with_adapter(common, peers::has_event_adapter, "no event-store adapter")?;
        if engines.is_empty() {
            return Err("no selected engine has an event-store adapter (cairn, sqlite)".into());
        }
        if args.tail_writers == 0 {
            return Err("--tail-writers must be at least 1".into());
        }
        let mut counts = if common.quick {
            ECounts::quick(common.scale, args.tail_writers)
        } else {
            ECounts::full(common.scale.unwrap_or(1_000_000), args.tail_writers)
        };
        if counts.catchup < 1 {
            return Err("--scale must be at least 1".into());
        }
        counts.modes = common.durability.modes();
        let (setting, res) = Setting::measure(common, "cairn-bench-events-", |base, repeat| {
            run_engines(&engines, &counts, base, repeat, progress)
        })?;
        Ok(EOutcome {
            engines,
            not_run,
            setting,
            counts,
            res,
        })
    }

    /// The text report of suite E.
    fn render(&self, out: &EOutcome) -> String {
        let args = self;
        use std::fmt::Write as _;
        let mut s = String::new();
        let c = &out.counts;
        let seed = format!(
            "Seed: event data {:#x} (every event a function of entity and version)",
            mix::SEED_E
        );
        let mut engines = adapter_lines(&out.engines, &out.not_run, peers::event_config);
        engines.push(
            "RocksDB (the seed's engine) has no event-store adapter here: the seed's own \
             figures are in the last column, from seed 003 (docs/benchmarks.md) \
             (BenchmarkDotNet on a Steam Deck, RocksDBEventStore<BinaryEventSerializer>, one \
             event per commit without fsync; mean time ÷ events). Other hardware: compare \
             ratios, not absolutes."
                .to_string(),
        );
        render_header(
            &mut s,
            "events",
            &out.setting,
            &args.common,
            &[seed, modes_line(Some(&c.modes), "")],
            &engines,
        );
        let _ = writeln!(s, "\n## {TITLE}\n");
        let _ = writeln!(
            s,
            "Event mix: per entity stream, version 0 creates the entity, then rename, add item, \
             toggle flag, add item, toggle flag, delete item, cycling (16-byte ids, short \
             strings; the bench's hand-written binary encoding, 30–50 bytes per payload). \
             E1/E2 cycle over {} entity streams with exact expected versions. E3: events \
             appended round-robin over the entities, loaded in commits of {} events (N); the \
             timed part (after one untimed pass) reads every event of {} sampled entities and \
             decodes each into the entity's state. E6: each writer its own stream. E8: {} writers × {} events, one \
             per commit, a subscriber from position 0; latency from the append call to delivery \
             (CairnDB makes a commit visible before its flush completes, so in D it can be \
             delivered before the writer's commit returns).",
            c.write_entities,
            n_label(c.load_batch),
            c.samples,
            c.tail_writers,
            n_label(c.tail_events)
        );
        let (ran, skipped) = c.grid();
        let cells = |v: &[(usize, usize)]| {
            v.iter()
                .map(|(ec, en)| format!("{} × {}", n_label(*ec), n_label(*en)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = writeln!(
            s,
            "\nReadEvents grid (events per entity × entities): ran {}.{}\n",
            if ran.is_empty() {
                "none".to_string()
            } else {
                cells(&ran)
            },
            if skipped.is_empty() {
                String::new()
            } else {
                format!(
                    " Skipped {}: stores above 10 × --scale = {} events.",
                    cells(&skipped),
                    n_label(c.grid_limit)
                )
            }
        );
        s.push_str(&out.res.markdown(&out.engines));
        s.push_str(&out.res.notes_markdown());
        s
    }

    fn to_json(&self, out: &EOutcome) -> Value {
        let args = self;
        let c = &out.counts;
        let (ran, skipped) = c.grid();
        let (engines, not_run) = adapters_json(&out.engines, &out.not_run, peers::event_config);
        let rest = json!({
            "counts": {
                "write_ns": c.write_ns,
                "write_entities": c.write_entities,
                "batch_total": c.batch_total,
                "batch": c.batch,
                "grid_ran": ran,
                "grid_skipped": skipped,
                "grid_limit": c.grid_limit,
                "samples": c.samples,
                "load_batch": c.load_batch,
                "threads": c.threads,
                "conc_events": c.conc_events,
                "catchup": c.catchup,
                "tail_writers": c.tail_writers,
                "tail_events": c.tail_events,
                "modes": c.modes.iter().map(|m| m.label()).collect::<Vec<_>>(),
            },
            "seed": mix::SEED_E,
            "engines": engines,
            "not_run": not_run,
            "suites": { "E": out.res.json(&out.engines) },
        });
        let rows = out.res.flat_rows("E", &out.engines);
        json_report(&out.setting, &args.common, rows, rest)
    }

    fn charts<'a>(&self, out: &'a EOutcome) -> Vec<Chart<'a>> {
        vec![Chart {
            name: "E",
            title: TITLE.to_string(),
            res: Cow::Borrowed(&out.res),
            engines: &out.engines,
        }]
    }

    fn common(&self) -> &CommonArgs {
        &self.common
    }
}

/// Suite E on each engine in turn, in the bench directory `base`.
fn run_engines(
    engines: &[EngineKind],
    counts: &ECounts,
    base: &Path,
    repeat: usize,
    progress: bool,
) -> Res<SuiteResults> {
    let pb = progress_bar(
        progress,
        None,
        "suite E [{elapsed_precise}] {spinner} {wide_msg}",
        true,
    );
    let mut res = SuiteResults {
        reference: Some((
            "Seed: RocksDB, no fsync (Steam Deck)".to_string(),
            seed_reference(),
        )),
        ..SuiteResults::default()
    };
    for &kind in engines {
        let root = base.join(format!("e-{}", kind.name()));
        let peak = sysinfo::PeakRss::start();
        let outcome = {
            let mut run = ERun {
                kind,
                root: root.clone(),
                res: &mut res,
                pb: &pb,
                c: counts,
                repeat,
            };
            run_engine(&mut run)
        };
        record_peak(&mut res, "E", kind, peak);
        let _ = std::fs::remove_dir_all(&root);
        if let Err(e) = outcome {
            let msg = format!("stopped: {e}");
            pb.println(format!("{}: {msg}", kind.title()));
            res.note(kind, msg);
        }
    }
    pb.finish_and_clear();
    Ok(res)
}

/// The seed's RocksDB figures (µs per event), by row id.
fn seed_reference() -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    for (n, us) in [(100, "24.2"), (1_000, "13.6"), (10_000, "12.3")] {
        m.insert(format!("E1/{n}/N"), us.to_string());
    }
    for (ec, en, us) in [
        (100, 100, "1.72"),
        (100, 1_000, "2.06"),
        (1_000, 100, "2.72"),
        (1_000, 1_000, "4.27"),
        (10_000, 100, "6.47"),
        (10_000, 1_000, "8.77"),
    ] {
        m.insert(format!("E3/{ec}/{en}"), us.to_string());
    }
    m
}

/// One engine's run of suite E.
struct ERun<'a> {
    kind: EngineKind,
    root: PathBuf,
    res: &'a mut SuiteResults,
    pb: &'a ProgressBar,
    c: &'a ECounts,
    repeat: usize,
}

impl ERun<'_> {
    fn fresh(&self, name: &str) -> Res<(Box<dyn EventEngine>, PathBuf)> {
        let dir = fresh_dir(&self.root, name)?;
        Ok((peers::open_events(self.kind, &dir)?, dir))
    }

    fn step(&self, what: &str) {
        self.pb.set_message(format!("{} {what}", self.kind.title()));
    }

    fn record(&mut self, row: &Row, v: f64) {
        self.res.record(row, self.kind, v);
    }

    fn record_cpf(&mut self, row: &Row, e: &dyn EventEngine, before: Option<u64>, commits: u64) {
        let after = e.flushes();
        self.res
            .record_flushes(row, self.kind, before, after, commits);
    }

    fn note(&mut self, note: String) {
        self.res.note(self.kind, note);
    }
}

fn row(id: String, label: String, unit: Unit, show_cpf: bool) -> Row {
    Row {
        id,
        label,
        unit,
        show_cpf,
    }
}

/// The expected version before appending version `v`.
fn before(v: u64) -> Option<u64> {
    v.checked_sub(1)
}

/// Decodes `data` into `st`, remembering the first failure.
fn apply(st: &mut State, err: &mut Option<String>, data: &[u8]) {
    if let Err(e) = st.apply_bytes(data) {
        err.get_or_insert(e);
    }
}

fn run_engine(run: &mut ERun<'_>) -> Res<()> {
    let names: Vec<String> = (0..run.c.write_entities.max(
        run.c
            .grid_entities
            .iter()
            .copied()
            .max()
            .unwrap_or(0)
            .max(1_000),
    ))
        .map(mix::stream_name)
        .collect();
    write_rows(run, &names)?;
    concurrent_rows(run)?;
    tail_rows(run)?;
    grid_rows(run, &names)?;
    catchup_row(run, &names)?;
    Ok(())
}

/// E1 (one event per commit) and E2 (batched).
fn write_rows(run: &mut ERun<'_>, names: &[String]) -> Res<()> {
    let c = run.c;
    let ents = c.write_entities;
    let max_n = c.write_ns.iter().copied().max().unwrap_or(0);
    // Event i goes to entity i % ents as its version i / ents.
    let singles: Vec<EventData> = (0..max_n)
        .map(|i| mix::event(i % ents, (i / ents) as u64))
        .collect();
    for &n in &c.write_ns {
        for mode in [Mode::D, Mode::N] {
            if !c.has(mode) {
                continue;
            }
            let m = mode.label();
            let r = row(
                format!("E1/{n}/{m}"),
                format!("E1 WriteEvents: {} events, 1 per commit ({m})", n_label(n)),
                Unit::MicrosPer("event"),
                mode == Mode::D,
            );
            run.step(&r.label);
            for rep in 0..run.repeat {
                let (e, dir) = run.fresh(&format!("e1-{n}-{m}-{rep}"))?;
                let flushes = e.flushes();
                let t = Instant::now();
                for (i, ev) in singles[..n].iter().enumerate() {
                    let v = (i / ents) as u64;
                    e.append(&names[i % ents], before(v), std::slice::from_ref(ev), mode)?;
                }
                let s = t.elapsed().as_secs_f64();
                run.record(&r, s * 1e6 / n as f64);
                if mode == Mode::D {
                    run.record_cpf(&r, e.as_ref(), flushes, n as u64);
                }
                discard(e, &dir);
            }
        }
    }
    // E2: commit k appends `batch` events to entity k % ents.
    let b = c.batch.max(1);
    let commits = c.batch_total / b;
    let batches: Vec<(usize, u64, Vec<EventData>)> = (0..commits)
        .map(|k| {
            let ent = k % ents;
            let v0 = ((k / ents) * b) as u64;
            (
                ent,
                v0,
                (0..b as u64).map(|j| mix::event(ent, v0 + j)).collect(),
            )
        })
        .collect();
    for mode in [Mode::D, Mode::N] {
        if !c.has(mode) || commits == 0 {
            continue;
        }
        let m = mode.label();
        let r = row(
            format!("E2/{m}"),
            format!(
                "E2 WriteEvents: {} events in commits of {b} ({m})",
                n_label(commits * b)
            ),
            Unit::MicrosPer("event"),
            mode == Mode::D,
        );
        run.step(&r.label);
        for rep in 0..run.repeat {
            let (e, dir) = run.fresh(&format!("e2-{m}-{rep}"))?;
            let flushes = e.flushes();
            let t = Instant::now();
            for (ent, v0, evs) in &batches {
                e.append(&names[*ent], before(*v0), evs, mode)?;
            }
            let s = t.elapsed().as_secs_f64();
            run.record(&r, s * 1e6 / (commits * b) as f64);
            if mode == Mode::D {
                run.record_cpf(&r, e.as_ref(), flushes, commits as u64);
            }
            discard(e, &dir);
        }
    }
    Ok(())
}

/// E6: writers on disjoint streams, one event per commit.
fn concurrent_rows(run: &mut ERun<'_>) -> Res<()> {
    let c = run.c;
    for mode in [Mode::D, Mode::N] {
        if !c.has(mode) {
            continue;
        }
        let m = mode.label();
        let mut single = None;
        for &threads in &c.threads {
            let per = (c.conc_events / threads).max(1);
            let r = row(
                format!("E6/{threads}/{m}"),
                format!(
                    "E6 {threads} writer(s) on disjoint streams, {} events, 1 per commit ({m})",
                    n_label(per * threads)
                ),
                Unit::PerSec("events"),
                mode == Mode::D,
            );
            run.step(&r.label);
            // Writer w appends to its own stream (entity 100,000 + w).
            let work: Vec<(String, Vec<EventData>)> = (0..threads)
                .map(|w| {
                    let ent = 100_000 + w;
                    (
                        mix::stream_name(ent),
                        (0..per as u64).map(|v| mix::event(ent, v)).collect(),
                    )
                })
                .collect();
            for rep in 0..run.repeat {
                let (e, dir) = run.fresh(&format!("e6-{threads}-{m}-{rep}"))?;
                let flushes = e.flushes();
                let eng: &dyn EventEngine = e.as_ref();
                let t = Instant::now();
                std::thread::scope(|s| -> Res<()> {
                    let hs: Vec<_> = work
                        .iter()
                        .map(|(name, evs)| {
                            s.spawn(move || -> Res<()> {
                                for (v, ev) in evs.iter().enumerate() {
                                    eng.append(
                                        name,
                                        before(v as u64),
                                        std::slice::from_ref(ev),
                                        mode,
                                    )?;
                                }
                                Ok(())
                            })
                        })
                        .collect();
                    for h in hs {
                        h.join().map_err(|_| "an E6 writer panicked")??;
                    }
                    Ok(())
                })?;
                let s = t.elapsed().as_secs_f64();
                let rate = (per * threads) as f64 / s;
                run.record(&r, rate);
                if mode == Mode::D {
                    run.record_cpf(&r, eng, flushes, (per * threads) as u64);
                }
                if threads == 1 {
                    single = Some(rate);
                }
                discard(e, &dir);
            }
            if let (Some(one), true) = (single, threads > 1) {
                if let Some(med) = run.res.median(&r.id, run.kind) {
                    let rr = row(
                        format!("E6/{threads}/{m}/ratio"),
                        format!("E6 {threads} writers ÷ 1 writer ({m})"),
                        Unit::Factor,
                        false,
                    );
                    run.record(&rr, med / one);
                }
            }
        }
    }
    Ok(())
}

/// E8: a live subscriber beside `tail_writers` writers.
fn tail_rows(run: &mut ERun<'_>) -> Res<()> {
    let c = run.c;
    let writers = c.tail_writers;
    let per = c.tail_events;
    let total = writers * per;
    let work: Vec<Vec<EventData>> = (0..writers)
        .map(|w| {
            (0..per as u64)
                .map(|v| mix::event(200_000 + w, v))
                .collect()
        })
        .collect();
    let names: Vec<String> = (0..writers).map(|w| format!("tail-{w}")).collect();
    for mode in [Mode::D, Mode::N] {
        if !c.has(mode) {
            continue;
        }
        let m = mode.label();
        let r50 = row(
            format!("E8/{m}/p50"),
            format!("E8 live tail beside {writers} writers: append → delivery p50 ({m})"),
            Unit::Micros,
            false,
        );
        let r99 = row(
            format!("E8/{m}/p99"),
            format!("E8 live tail beside {writers} writers: append → delivery p99 ({m})"),
            Unit::Micros,
            false,
        );
        run.step(&r50.label);
        let (mut all_got, mut all_missed, mut all_dups, mut all_disorder) = (0, 0, 0, 0);
        for rep in 0..run.repeat {
            let (e, dir) = run.fresh(&format!("e8-{m}-{rep}"))?;
            let eng: &dyn EventEngine = e.as_ref();
            let sent: Vec<Vec<AtomicU64>> = (0..writers)
                .map(|_| (0..per).map(|_| AtomicU64::new(0)).collect())
                .collect();
            let stop = AtomicBool::new(false);
            let epoch = Instant::now();
            let (sub_res, write_res) = std::thread::scope(|s| {
                let sub = s.spawn(|| -> Res<(Vec<Vec<u64>>, u64, u64, u64)> {
                    let mut recv = vec![vec![0u64; per]; writers];
                    let (mut got, mut dups, mut disorder) = (0u64, 0u64, 0u64);
                    let mut next_pos = 0u64;
                    let mut bad: Option<String> = None;
                    eng.subscribe(0, &stop, &mut |d: Delivered<'_>| {
                        let now = epoch.elapsed().as_nanos() as u64;
                        if d.position != next_pos {
                            disorder += 1;
                        }
                        next_pos = d.position + 1;
                        let w = d
                            .stream
                            .strip_prefix("tail-")
                            .and_then(|x| x.parse::<usize>().ok());
                        match w {
                            Some(w) if w < writers && (d.version as usize) < per => {
                                let slot = &mut recv[w][d.version as usize];
                                if *slot != 0 {
                                    dups += 1;
                                } else {
                                    *slot = now.max(1);
                                    got += 1;
                                }
                            }
                            _ => {
                                bad.get_or_insert(format!(
                                    "unexpected event {}@{}",
                                    d.stream, d.version
                                ));
                            }
                        }
                        if got as usize >= total {
                            ControlFlow::Break(())
                        } else {
                            ControlFlow::Continue(())
                        }
                    })?;
                    if let Some(b) = bad {
                        return Err(b.into());
                    }
                    Ok((recv, got, dups, disorder))
                });
                let hs: Vec<_> = (0..writers)
                    .map(|w| {
                        let (sent, evs, name) = (&sent[w], &work[w], &names[w]);
                        s.spawn(move || -> Res<()> {
                            for (v, ev) in evs.iter().enumerate() {
                                sent[v].store(epoch.elapsed().as_nanos() as u64, Ordering::Release);
                                eng.append(name, before(v as u64), std::slice::from_ref(ev), mode)?;
                            }
                            Ok(())
                        })
                    })
                    .collect();
                let mut write_res: Res<()> = Ok(());
                for h in hs {
                    let r = h
                        .join()
                        .unwrap_or_else(|_| Err("an E8 writer panicked".into()));
                    if write_res.is_ok() {
                        write_res = r;
                    }
                }
                // Give the subscriber 30 s after the last commit, then stop.
                let deadline = Instant::now() + Duration::from_secs(30);
                while !sub.is_finished() && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(5));
                }
                stop.store(true, Ordering::Release);
                let sub_res = sub
                    .join()
                    .unwrap_or_else(|_| Err("the E8 subscriber panicked".into()));
                (sub_res, write_res)
            });
            write_res?;
            let (recv, got, dups, disorder) = sub_res?;
            let mut lat = Vec::with_capacity(total);
            for w in 0..writers {
                for v in 0..per {
                    if recv[w][v] != 0 {
                        let s = sent[w][v].load(Ordering::Acquire);
                        lat.push(recv[w][v].saturating_sub(s) as f64 / 1e3);
                    }
                }
            }
            lat.sort_by(f64::total_cmp);
            let missed = total as u64 - got;
            run.record(&r50, percentile(&lat, 0.50));
            run.record(&r99, percentile(&lat, 0.99));
            discard(e, &dir);
            all_got += got;
            all_missed += missed;
            all_dups += dups;
            all_disorder += disorder;
            if missed != 0 || dups != 0 || disorder != 0 {
                return Err(format!(
                    "E8 ({m}, repeat {}): the live subscriber missed {missed}, repeated \
                     {dups} and misordered {disorder} of {total} events",
                    rep + 1
                )
                .into());
            }
        }
        run.note(format!(
            "E8 ({m}): {} repeat(s) × {} events by {writers} writers: {} delivered, \
             missed={all_missed}, duplicates={all_dups}, out of position order={all_disorder}",
            run.repeat,
            n_label(total),
            n_label(all_got as usize)
        ));
    }
    Ok(())
}

/// Loads rounds `from..to` of the round-robin store over `ents` entities
/// (round r appends version r to every entity), `batch` events per commit.
fn load_rounds(
    e: &dyn EventEngine,
    names: &[String],
    ents: usize,
    from: u64,
    to: u64,
    batch: usize,
) -> Res<()> {
    let rounds_per = (batch / ents).max(1) as u64;
    let mut r = from;
    while r < to {
        let hi = (r + rounds_per).min(to);
        let evs: Vec<EventData> = (r..hi)
            .flat_map(|v| (0..ents).map(move |ent| mix::event(ent, v)))
            .collect();
        let appends: Vec<(&str, Option<u64>, &[EventData])> = (r..hi)
            .flat_map(|v| (0..ents).map(move |ent| (v, ent)))
            .enumerate()
            .map(|(i, (v, ent))| (names[ent].as_str(), before(v), &evs[i..i + 1]))
            .collect();
        e.append_many(&appends, Mode::N)?;
        r = hi;
    }
    Ok(())
}

/// `k` distinct entities of `0..ents`, seeded.
fn sample(ents: usize, k: usize, salt: u64) -> Vec<usize> {
    let mut rng = Rng::new(mix::SEED_E ^ salt);
    let mut p: Vec<usize> = (0..ents).collect();
    let k = k.min(ents);
    for i in 0..k {
        let j = i + rng.below(ents - i);
        p.swap(i, j);
    }
    p.truncate(k);
    p
}

/// E3 (the grid), then E4 and E5 on the largest store loaded.
fn grid_rows(run: &mut ERun<'_>, names: &[String]) -> Res<()> {
    let c = run.c;
    let (cells, _) = c.grid();
    let mut last: Option<(Box<dyn EventEngine>, PathBuf, usize, usize)> = None;
    for &en in &c.grid_entities {
        let column: Vec<usize> = cells
            .iter()
            .filter(|(_, n)| *n == en)
            .map(|(ec, _)| *ec)
            .collect();
        if column.is_empty() {
            continue;
        }
        if let Some((e, dir, _, _)) = last.take() {
            discard(e, &dir);
        }
        let (e, dir) = run.fresh(&format!("e3-{en}"))?;
        let mut loaded = 0u64;
        let mut load_secs = 0.0;
        for &ec in &column {
            run.step(&format!(
                "E3 loading {} events × {} entities",
                n_label(ec),
                n_label(en)
            ));
            let t = Instant::now();
            load_rounds(e.as_ref(), names, en, loaded, ec as u64, c.load_batch)?;
            load_secs += t.elapsed().as_secs_f64();
            loaded = ec as u64;
            let r = row(
                format!("E3/{ec}/{en}"),
                format!(
                    "E3 ReadEvents: all {} events of 1 entity of {} ({} in the store), decoded",
                    n_label(ec),
                    n_label(en),
                    n_label(ec * en)
                ),
                Unit::MicrosPer("event"),
                false,
            );
            run.step(&r.label);
            let picks = sample(en, c.samples, (ec * 31 + en) as u64);
            // One untimed pass first (the seed's harness warms up too).
            for &p in &picks {
                e.read_stream(&names[p], &mut |_, d| {
                    std::hint::black_box(d);
                })?;
            }
            for _ in 0..run.repeat {
                let mut st = State::default();
                let mut err = None;
                let mut n = 0u64;
                let t = Instant::now();
                for &p in &picks {
                    let mut one = State::default();
                    let got = e.read_stream(&names[p], &mut |_, d| apply(&mut one, &mut err, d))?;
                    if got != ec as u64 || one.events != ec as u64 {
                        return Err(format!(
                            "E3: {} events read from entity {p}, expected {ec}",
                            got
                        )
                        .into());
                    }
                    n += got;
                    st.sum = st.sum.wrapping_add(one.sum);
                }
                let s = t.elapsed().as_secs_f64();
                std::hint::black_box(st);
                if let Some(err) = err {
                    return Err(format!("E3: {err}").into());
                }
                run.record(&r, s * 1e6 / n as f64);
            }
        }
        let total = loaded as usize * en;
        let rl = row(
            format!("E3/load/{en}"),
            format!(
                "E3 loading the {}-entity store: {} events, round-robin, commits of {} (N)",
                n_label(en),
                n_label(total),
                n_label(c.load_batch)
            ),
            Unit::PerSec("events"),
            false,
        );
        run.record(&rl, total as f64 / load_secs.max(1e-9));
        let rs = row(
            format!("E3/size/{en}"),
            format!(
                "E3 size of the {}-entity store ({} events)",
                n_label(en),
                n_label(total)
            ),
            Unit::Mib,
            false,
        );
        run.record(&rs, e.disk_bytes() as f64 / (1 << 20) as f64);
        last = Some((e, dir, loaded as usize, en));
    }
    let Some((e, dir, ec, en)) = last else {
        return Ok(());
    };
    let picks = sample(en, c.samples, 0xBAC4);
    // E4: the last 100 events of an entity, newest first.
    let k = ec.min(100);
    let r = row(
        "E4".into(),
        format!(
            "E4 backward read of the last {k} events of 1 entity ({} × {} store)",
            n_label(ec),
            n_label(en)
        ),
        Unit::MicrosPer("event"),
        false,
    );
    run.step(&r.label);
    for _ in 0..run.repeat {
        let mut st = State::default();
        let mut err = None;
        let mut n = 0;
        let mut order_ok = true;
        let t = Instant::now();
        for &p in &picks {
            let mut prev = u64::MAX;
            n += e.read_last(&names[p], k, &mut |v, d| {
                order_ok &= v < prev;
                prev = v;
                apply(&mut st, &mut err, d)
            })?;
        }
        let s = t.elapsed().as_secs_f64();
        if let Some(err) = err {
            return Err(format!("E4: {err}").into());
        }
        if n != (k * picks.len()) as u64 || !order_ok {
            return Err(format!("E4: read {n} events (ordered: {order_ok})").into());
        }
        run.record(&r, s * 1e6 / n as f64);
    }
    // E5: snapshot at version ec - tail - 1, then load it and the tail.
    let tail = (ec / 2).min(100);
    let sv = (ec - tail - 1) as u64;
    run.step("E5 saving snapshots");
    for &p in &picks {
        let mut st = State::default();
        let mut err = None;
        e.read_stream(&names[p], &mut |v, d| {
            if v <= sv {
                apply(&mut st, &mut err, d);
            }
        })?;
        if let Some(err) = err {
            return Err(format!("E5: {err}").into());
        }
        e.save_snapshot(&names[p], sv, &st.encode())?;
    }
    let r = row(
        "E5".into(),
        format!(
            "E5 replay from a snapshot: load it + the last {tail} of {} events, apply them",
            n_label(ec)
        ),
        Unit::MicrosPer("load"),
        false,
    );
    run.step(&r.label);
    for _ in 0..run.repeat {
        let mut err = None;
        let mut bad = None;
        let t = Instant::now();
        for &p in &picks {
            // The snapshot comes first, then the events after it.
            let st = std::cell::RefCell::new(None::<State>);
            let mut snap_v = None;
            let n = e.load(
                &names[p],
                &mut |v, b| {
                    snap_v = Some(v);
                    *st.borrow_mut() = State::decode(b);
                },
                &mut |_, d| {
                    if let Some(s) = st.borrow_mut().as_mut() {
                        apply(s, &mut err, d);
                    }
                },
            )?;
            let st = st.into_inner();
            let ok =
                snap_v == Some(sv) && n == tail as u64 && st.is_some_and(|s| s.events == ec as u64);
            if !ok {
                bad.get_or_insert(format!(
                    "entity {p}: snapshot {snap_v:?}, {n} events after it"
                ));
            }
        }
        let s = t.elapsed().as_secs_f64();
        if let Some(b) = bad.or(err) {
            return Err(format!("E5: {b}").into());
        }
        run.record(&r, s * 1e6 / picks.len() as f64);
    }
    discard(e, &dir);
    Ok(())
}

/// E7: a subscriber catching up from position 0 over `catchup` events.
fn catchup_row(run: &mut ERun<'_>, names: &[String]) -> Res<()> {
    let c = run.c;
    let n = c.catchup;
    let ents = 1_000.min(names.len()).min(n).max(1);
    let (e, dir) = run.fresh("e7")?;
    run.step(&format!("E7 loading {} events", n_label(n)));
    // Whole rounds over `ents` entities, then a partial last round.
    let rounds = (n / ents) as u64;
    load_rounds(e.as_ref(), names, ents, 0, rounds, c.load_batch)?;
    let rest = n - rounds as usize * ents;
    if rest > 0 {
        let evs: Vec<EventData> = (0..rest).map(|ent| mix::event(ent, rounds)).collect();
        let appends: Vec<(&str, Option<u64>, &[EventData])> = (0..rest)
            .map(|ent| (names[ent].as_str(), before(rounds), &evs[ent..ent + 1]))
            .collect();
        e.append_many(&appends, Mode::N)?;
    }
    let r = row(
        "E7".into(),
        format!(
            "E7 catch-up subscription from position 0 over {} events, decoded",
            n_label(n)
        ),
        Unit::PerSec("events"),
        false,
    );
    run.step(&r.label);
    for _ in 0..run.repeat {
        let stop = AtomicBool::new(false);
        let mut got = 0u64;
        let mut gaps = 0u64;
        let mut st = State::default();
        let mut err = None;
        let t = Instant::now();
        e.subscribe(0, &stop, &mut |d| {
            if d.position != got {
                gaps += 1;
            }
            got += 1;
            apply(&mut st, &mut err, d.data);
            if got as usize >= n {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })?;
        let s = t.elapsed().as_secs_f64();
        if let Some(err) = err {
            return Err(format!("E7: {err}").into());
        }
        if got != n as u64 || gaps != 0 {
            return Err(format!("E7: {got} events delivered, {gaps} out of order").into());
        }
        run.record(&r, n as f64 / s);
    }
    discard(e, &dir);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny suite E on every event engine compiled in: every row yields a
    /// positive figure and the live tail misses nothing.
    #[test]
    fn tiny_suite_e() {
        let dir = tempfile::tempdir().unwrap();
        let args = EventArgs {
            common: CommonArgs {
                dir: Some(dir.path().to_path_buf()),
                quick: true,
                scale: Some(2_000),
                fsync_samples: 5,
                no_progress: true,
                ..CommonArgs::default()
            },
            tail_writers: 2,
            backend: None,
        };
        let out = args.execute(false).unwrap();
        let bad: Vec<_> = out
            .res
            .notes
            .iter()
            .filter(|(_, n)| !n.starts_with("E8"))
            .collect();
        assert!(bad.is_empty(), "notes: {bad:?}");
        assert!(out
            .res
            .notes
            .iter()
            .any(|(_, n)| n.contains("missed=0, duplicates=0")));
        for e in &out.engines {
            for row in &out.res.rows {
                let v = out.res.median(&row.id, *e);
                let floor = if row.id.ends_with("-peak-rss") {
                    0.0
                } else {
                    f64::MIN_POSITIVE
                };
                assert!(
                    v.is_some_and(|v| v.is_finite() && v >= floor),
                    "{} row {} has {v:?}",
                    e.name(),
                    row.id
                );
            }
        }
        for id in [
            "E1/100/D",
            "E1/100/N",
            "E2/N",
            "E3/100/100",
            "E4",
            "E5",
            "E7",
        ] {
            assert!(out.res.rows.iter().any(|r| r.id == id), "no row {id}");
        }
        let text = args.render(&out);
        assert!(text.contains("Seed: RocksDB"), "{text}");
        assert!(text.contains("Skipped"), "{text}");
    }
}
