//! Suite D (`cairn bench docs`): the document-store workloads of seeds 000
//! (LiteDB's write table) and 002 (tiedot's built-in benchmarks; both in
//! `docs/benchmarks.md`),
//! on CairnDB's document layer and, with `--features peers`, on SQLite with
//! JSON documents. (The mapper micro-benchmarks of seed 001 are criterion
//! benches in `crates/cairndb/benches/mapper.rs`.)
//!
//! Sub-suite "lite" (µs per call, as BenchmarkDotNet's Mean): for N
//! entities ∈ {10, 100, 1,000}, individual inserts (one transaction each),
//! one bulk insert, individual upserts on an empty collection and over
//! existing ids, bulk upserts of new ids, of existing ids and of half new;
//! modes D and N; then the upsert ÷ insert ratios (target ≤ 1.25×).
//!
//! Sub-suite "tiedot" (ops/s): N documents (`--scale`, default 400,000)
//! with tiedot's six indexes; phases insert, read by id, lookup query,
//! update with a fresh document, delete random ids (with replacement), each
//! split over one worker per core; then bench2, every operation at once
//! from one worker per core each plus a schema worker. tiedot's own figures
//! on this kind of machine (`docs/benchmarks.md`) are printed beside ours with
//! CairnDB's ratio to them (target ≥ 3×).
//!
//! PoloDB is not a peer: see [`peers::POLODB_WHY`].

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use serde_json::{json, Value};

use crate::args::{CommonArgs, DocArgs, DocSuiteSel};
use crate::data::docs::{self as data, Entity, Lookup, TdDoc};
use crate::engine::{DocEngine, EngineKind, Mode, Res};
use crate::peers;
use crate::report::{fmt_num, n_label, Row, SuiteResults, Unit};
use crate::suite::{
    adapter_lines, adapters_json, discard, each_engine, engines_with_adapter, fresh_dir,
    json_report, modes_line, progress_bar, render_header, Chart, NotRun, Setting, Suite,
};

/// How much work each sub-suite does.
#[derive(Debug, Clone)]
pub struct DCounts {
    pub lite: bool,
    pub tiedot: bool,
    /// Lite: the entity counts (10, 100, 1,000).
    pub lite_ns: Vec<usize>,
    /// Lite: each operation runs `(lite_budget / N).clamp(lite_min,
    /// lite_max)` times per repeat; the figure is their mean.
    pub lite_budget: usize,
    pub lite_min: usize,
    pub lite_max: usize,
    /// tiedot: documents (`--scale`).
    pub td_n: usize,
    /// tiedot: workers per phase (one per core, as GOMAXPROCS).
    pub workers: usize,
    /// bench2: documents inserted before the clock starts (1,000).
    pub mixed_start: usize,
    pub modes: Vec<Mode>,
}

impl DCounts {
    pub fn full(scale: Option<usize>, workers: usize) -> Self {
        DCounts {
            lite: true,
            tiedot: true,
            lite_ns: vec![10, 100, 1_000],
            lite_budget: 3_000,
            lite_min: 5,
            lite_max: 100,
            td_n: scale.unwrap_or(400_000),
            workers,
            mixed_start: 1_000,
            modes: vec![Mode::D, Mode::N],
        }
    }

    /// A smoke run: N ∈ {10, 100}, 3 iterations; tiedot on 2,000 documents
    /// (or `--scale`).
    pub fn quick(scale: Option<usize>, workers: usize) -> Self {
        DCounts {
            lite: true,
            tiedot: true,
            lite_ns: vec![10, 100],
            lite_budget: 0,
            lite_min: 3,
            lite_max: 3,
            td_n: scale.unwrap_or(2_000),
            workers,
            mixed_start: 100,
            modes: vec![Mode::D, Mode::N],
        }
    }

    fn iters(&self, n: usize) -> usize {
        (self.lite_budget / n.max(1)).clamp(self.lite_min, self.lite_max.max(self.lite_min))
    }

    /// The mode whose run measures the read-only phases (read, lookup).
    fn read_mode(&self) -> Mode {
        if self.modes.contains(&Mode::N) {
            Mode::N
        } else {
            Mode::D
        }
    }
}

/// Everything one `cairn bench docs` measured.
pub struct DOutcome {
    pub engines: Vec<EngineKind>,
    pub not_run: NotRun,
    pub setting: Setting,
    pub counts: DCounts,
    /// The LiteDB write table (when run).
    pub lite: Option<SuiteResults>,
    /// The tiedot bench (when run).
    pub tiedot: Option<SuiteResults>,
}

/// The lite operations, in table order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LiteOp {
    IndInsert,
    BulkInsert,
    IndUpsertNew,
    IndUpsertExisting,
    BulkUpsertNew,
    BulkUpsertExisting,
    BulkUpsertHalf,
}

impl LiteOp {
    const ALL: [LiteOp; 7] = [
        LiteOp::IndInsert,
        LiteOp::BulkInsert,
        LiteOp::IndUpsertNew,
        LiteOp::IndUpsertExisting,
        LiteOp::BulkUpsertNew,
        LiteOp::BulkUpsertExisting,
        LiteOp::BulkUpsertHalf,
    ];

    fn slug(self) -> &'static str {
        match self {
            LiteOp::IndInsert => "ind-insert",
            LiteOp::BulkInsert => "bulk-insert",
            LiteOp::IndUpsertNew => "ind-upsert-new",
            LiteOp::IndUpsertExisting => "ind-upsert-existing",
            LiteOp::BulkUpsertNew => "bulk-upsert-new",
            LiteOp::BulkUpsertExisting => "bulk-upsert-existing",
            LiteOp::BulkUpsertHalf => "bulk-upsert-half",
        }
    }

    fn label(self) -> &'static str {
        match self {
            LiteOp::IndInsert => "individual inserts (1 txn each)",
            LiteOp::BulkInsert => "bulk insert (1 call)",
            LiteOp::IndUpsertNew => "individual upserts, empty collection",
            LiteOp::IndUpsertExisting => "individual upserts over existing ids",
            LiteOp::BulkUpsertNew => "bulk upsert, new ids",
            LiteOp::BulkUpsertExisting => "bulk upsert, existing ids",
            LiteOp::BulkUpsertHalf => "bulk upsert, half new",
        }
    }

    /// Entities stored before the timed call.
    fn preload(self, n: usize) -> usize {
        match self {
            LiteOp::IndUpsertExisting | LiteOp::BulkUpsertExisting => n,
            LiteOp::BulkUpsertHalf => n / 2,
            _ => 0,
        }
    }

    /// Commits the timed call makes.
    fn commits(self, n: usize) -> usize {
        match self {
            LiteOp::IndInsert | LiteOp::IndUpsertNew | LiteOp::IndUpsertExisting => n,
            _ => 1,
        }
    }
}

fn lite_id(op: LiteOp, n: usize, m: Mode) -> String {
    format!("D-lite-{}/{n}/{}", op.slug(), m.label())
}

/// tiedot's phases, in table order.
const TD_PHASES: [&str; 6] = ["insert", "read", "lookup", "update", "delete", "mixed"];

fn td_id(phase: &str, m: Option<Mode>) -> String {
    match m {
        Some(m) => format!("D-tiedot-{phase}/{}", m.label()),
        None => format!("D-tiedot-{phase}"),
    }
}

/// Whether a tiedot phase writes (so runs in every mode).
fn td_writes(phase: &str) -> bool {
    !matches!(phase, "read" | "lookup")
}

/// tiedot's own figures on a 2-core machine (`docs/benchmarks.md`), ops/s.
/// tiedot's own harness on this kind of machine (2 cores, `GOMAXPROCS=2`, no
/// fsync), ops/s per phase, at two scales (docs/benchmarks.md; the 100K
/// column is the mean of its two runs).
const TIEDOT_REFS: [(usize, [(&str, f64); 6]); 2] = [
    (
        100_000,
        [
            ("insert", 79_637.0),
            ("read", 236_636.0),
            ("lookup", 40_580.0),
            ("update", 46_828.0),
            ("delete", 157_081.0),
            ("mixed", 104_818.0),
        ],
    ),
    (
        400_000,
        [
            ("insert", 48_600.0),
            ("read", 127_000.0),
            ("lookup", 23_600.0),
            ("update", 20_800.0),
            ("delete", 89_100.0),
            ("mixed", 73_300.0),
        ],
    ),
];

/// tiedot's figures at the scale nearest to `n` documents, that scale, and
/// whether it is `n` itself (only then are the ratios like for like).
fn tiedot_ref(n: usize) -> (&'static [(&'static str, f64); 6], usize, bool) {
    let (scale, figures) = TIEDOT_REFS
        .iter()
        .min_by_key(|(scale, _)| scale.abs_diff(n))
        .map(|(scale, f)| (*scale, f))
        .unwrap_or((TIEDOT_REFS[0].0, &TIEDOT_REFS[0].1));
    (figures, scale, scale == n)
}

/// tiedot's figure for `phase` at the scale nearest to `n`.
fn tiedot_figure(n: usize, phase: &str) -> Option<f64> {
    tiedot_ref(n)
        .0
        .iter()
        .find(|(p, _)| *p == phase)
        .map(|(_, v)| *v)
}

fn tiedot_ref_title(n: usize) -> String {
    let (_, scale, same) = tiedot_ref(n);
    format!(
        "tiedot (docs/benchmarks.md: 2 cores, {} docs{}, no fsync)",
        n_label(scale),
        if same {
            ""
        } else {
            " — not this run's scale"
        }
    )
}

/// LiteDB 5.0.21's Means from seed 000 (µs per call): individual inserts,
/// bulk insert, upsert (each its own transaction), JsonSerializer rows.
const LITEDB_REF: [(usize, &str, &str, &str); 3] = [
    (10, "927.7", "332.2", "1,196.8"),
    (100, "8,166.1", "2,486.4", "12,568.6"),
    (1_000, "56,588.3", "15,170.9", "65,294.1"),
];
const LITEDB_REF_TITLE: &str = "LiteDB 5.0.21 (seed 000: i7-13800H, no fsync)";

impl Suite for DocArgs {
    type Outcome = DOutcome;

    /// Runs suite D and returns every figure.
    fn execute(&self, progress: bool) -> Res<DOutcome> {
        let args = self;
        let common = &args.common;
        let (engines, not_run) =
            engines_with_adapter(common, peers::has_doc_adapter, "no document-store adapter")?;
        if engines.is_empty() {
            return Err("no selected engine has a document-store adapter (cairn, sqlite)".into());
        }
        let workers = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        let mut counts = if common.quick {
            DCounts::quick(common.scale, workers)
        } else {
            DCounts::full(common.scale, workers)
        };
        if counts.td_n < 16 {
            return Err("--scale must be at least 16".into());
        }
        counts.modes = common.durability.modes();
        counts.lite = matches!(args.suite, DocSuiteSel::Lite | DocSuiteSel::All);
        counts.tiedot = matches!(args.suite, DocSuiteSel::Tiedot | DocSuiteSel::All);
        let (setting, (lite, tiedot)) =
            Setting::measure(common, "cairn-bench-docs-", |base, repeat| {
                run_engines(&engines, &counts, base, repeat, progress)
            })?;
        Ok(DOutcome {
            engines,
            not_run,
            setting,
            counts,
            lite,
            tiedot,
        })
    }

    /// The text report of suite D.
    fn render(&self, out: &DOutcome) -> String {
        let args = self;
        use std::fmt::Write as _;
        let mut s = String::new();
        let c = &out.counts;
        let seeds = format!(
            "Seeds: entities {:#x}, tiedot documents/ids/queries {:#x} (SplitMix64; each phase \
             and worker its own stream); all data generated before the timed regions",
            data::SEED_LITE,
            data::SEED_TIEDOT
        );
        let mut engines = adapter_lines(&out.engines, &out.not_run, peers::doc_config);
        engines.push(format!("Not run: PoloDB — {}", peers::POLODB_WHY));
        render_header(
            &mut s,
            "docs",
            &out.setting,
            &args.common,
            &[seeds, modes_line(Some(&c.modes), "")],
            &engines,
        );
        if let Some(res) = &out.lite {
            let _ = writeln!(s, "\n## Suite D — LiteDB write table (seed 000)\n");
            let _ = writeln!(
                s,
                "Entities: a save-slot key `save-01/entity-NNNNNN` as `_id`, an integer id, a \
                 transform (position, rotation quaternion, scale: 10 floats) and a properties map \
                 (health, mana: floats; level: int; name: text), mapped as serde structs. Each \
                 figure is the mean time of one call of the operation over all N entities \
                 (BenchmarkDotNet's Mean, as the seed), over {} iterations per repeat (N = 10: {}, \
                 100: {}, 1,000: {}); before each, untimed, the collection is emptied and the \
                 preload stored in the same mode (all N ids for 'existing', the first N/2 for \
                 'half new'). Upserts over existing ids write changed values. The last column: \
                 the seed's LiteDB 5.0.21 Means (JsonSerializer rows; its 'Upsert' was one \
                 transaction per entity; LiteDB does not fsync, so only the N rows have it; other \
                 hardware: compare ratios).\n",
                c.lite_ns
                    .iter()
                    .map(|&n| c.iters(n).to_string())
                    .collect::<Vec<_>>()
                    .join("/"),
                c.iters(10),
                c.iters(100),
                c.iters(1_000)
            );
            s.push_str(&res.markdown(&out.engines));
            let ratios = upsert_ratios(res, &out.engines, c);
            if !ratios.is_empty() {
                let _ = writeln!(
                    s,
                    "\nUpsert ÷ insert (medians; target ≤ {UPSERT_TARGET}×, the seed's LiteDB: \
                     upsert 3.6–5.3× bulk insert):\n"
                );
                let _ = writeln!(
                    s,
                    "| Engine | N | Mode | bulk upsert new ÷ bulk insert | bulk upsert existing ÷ \
                     bulk insert | bulk upsert half new ÷ bulk insert | upserts new ÷ inserts \
                     (individual) | upserts existing ÷ inserts (individual) |"
                );
                let _ = writeln!(s, "|---|---:|---|---:|---:|---:|---:|---:|");
                for r in &ratios {
                    let _ = writeln!(
                        s,
                        "| {} | {} | {} | {} | {} | {} | {} | {} |",
                        r.engine.title(),
                        n_label(r.n),
                        r.mode.label(),
                        opt_ratio(r.bulk_new, UPSERT_TARGET),
                        opt_ratio(r.bulk_existing, UPSERT_TARGET),
                        opt_ratio(r.bulk_half, UPSERT_TARGET),
                        opt_ratio(r.ind_new, UPSERT_TARGET),
                        opt_ratio(r.ind_existing, UPSERT_TARGET),
                    );
                }
            }
            s.push_str(&res.notes_markdown());
        }
        if let Some(res) = &out.tiedot {
            let _ = writeln!(s, "\n## Suite D — tiedot bench (seed 002)\n");
            let _ = writeln!(
                s,
                "{} documents `{{nested:{{nested:{{str,int,float}}}}, strs:[2], ints:[2], \
                 floats:[2]}}` with tiedot's random values (ints below N, floats in [0, 1), strings \
                 the text of such floats), integer ids 0..N assigned by the harness; six indexes \
                 (nested.nested.str/int/float, strs, ints, floats) created on the empty collection. \
                 Bench 1, each phase split over {} workers (one per core), one operation per \
                 call and per commit: insert; read by random id; the lookup query (eq(nested.nested.int, \
                 a) XOR eq(ints, b)) ∪ ints ∈ [r, r+2] with a, b, r random below N (tiedot's \
                 sampleQuery: 5 hash probes over 2 indexes); update of a random id with a fresh \
                 document; delete of random ids with replacement. Read and lookup run once, on the \
                 {} run's data. Bench2: {} documents first, then at once {} workers each of inserts \
                 (2N), reads (2N), queries (N), updates (N) and deletes (N) of ids that exist by \
                 then, plus a schema worker (create, rename, truncate, compact, drop a collection) \
                 once a quarter of the inserts are in; ops/s = 7N ÷ wall time. The last column is \
                 tiedot's own harness on a 2-core machine at the nearest scale it was measured at \
                 (100,000 or 400,000 documents; no fsync ever; its README's i7 figures at 400,000: \
                 120K/420K/80K/60K/140K/220K).\n",
                n_label(c.td_n),
                c.workers,
                c.read_mode().label(),
                n_label(c.mixed_start),
                c.workers
            );
            s.push_str(&res.markdown(&out.engines));
            let ratios = tiedot_ratios(res, c);
            if !ratios.is_empty() {
                let _ = writeln!(
                    s,
                    "\nCairnDB ÷ tiedot (target ≥ {TIEDOT_TARGET}×; tiedot never flushes, so the \
                     like-for-like rows are N{}):\n",
                    match tiedot_ref(c.td_n) {
                        (_, _, true) => String::new(),
                        (_, scale, false) => format!(
                            "; tiedot was measured at {} documents, not at this run's {}: the \
                             ratios are not like for like and get no verdict",
                            n_label(scale),
                            n_label(c.td_n)
                        ),
                    }
                );
                let _ = writeln!(s, "| Phase | Mode | CairnDB ops/s | tiedot ops/s | ratio |");
                let _ = writeln!(s, "|---|---|---:|---:|---:|");
                let same = tiedot_ref(c.td_n).2;
                for (phase, m, v, r) in &ratios {
                    let reference = tiedot_figure(c.td_n, phase).unwrap_or(0.0);
                    let verdict = match (same, *r >= TIEDOT_TARGET) {
                        (false, _) => "",
                        (true, true) => " ✓",
                        (true, false) => " ✗",
                    };
                    let _ = writeln!(
                        s,
                        "| {phase} | {} | {} | {} | {r:.2}×{verdict} |",
                        m.map_or("—", |m| m.label()),
                        fmt_num(*v),
                        fmt_num(reference),
                    );
                }
            }
            s.push_str(&res.notes_markdown());
        }
        s
    }

    fn to_json(&self, out: &DOutcome) -> Value {
        let args = self;
        let c = &out.counts;
        let mut rows = Vec::new();
        let mut suites = serde_json::Map::new();
        if let Some(r) = &out.lite {
            rows.extend(r.flat_rows("D", &out.engines));
            suites.insert("D-lite".into(), r.json(&out.engines));
        }
        if let Some(r) = &out.tiedot {
            rows.extend(r.flat_rows("D", &out.engines));
            suites.insert("D-tiedot".into(), r.json(&out.engines));
        }
        let upserts: Vec<serde_json::Value> = out
            .lite
            .as_ref()
            .map(|r| upsert_ratios(r, &out.engines, c))
            .unwrap_or_default()
            .iter()
            .map(|r| {
                json!({
                    "engine": r.engine.name(),
                    "n": r.n,
                    "durability": r.mode.label(),
                    "bulk_upsert_new_over_bulk_insert": r.bulk_new,
                    "bulk_upsert_existing_over_bulk_insert": r.bulk_existing,
                    "bulk_upsert_half_over_bulk_insert": r.bulk_half,
                    "upsert_new_over_insert_individual": r.ind_new,
                    "upsert_existing_over_insert_individual": r.ind_existing,
                    "target_max": UPSERT_TARGET,
                })
            })
            .collect();
        let td: Vec<serde_json::Value> = out
            .tiedot
            .as_ref()
            .map(|r| tiedot_ratios(r, c))
            .unwrap_or_default()
            .iter()
            .map(|(phase, m, v, r)| {
                json!({
                    "phase": phase,
                    "durability": m.map(|m| m.label()),
                    "cairndb_ops_per_s": v,
                    "tiedot_ops_per_s": tiedot_figure(c.td_n, phase),
                    "tiedot_documents": tiedot_ref(c.td_n).1,
                    "ratio": r,
                    "target_min": TIEDOT_TARGET,
                })
            })
            .collect();
        let (engines, not_run) = adapters_json(&out.engines, &out.not_run, peers::doc_config);
        let rest = json!({
            "counts": {
                "lite": c.lite,
                "tiedot": c.tiedot,
                "lite_ns": c.lite_ns,
                "lite_iterations": c.lite_ns.iter().map(|&n| c.iters(n)).collect::<Vec<_>>(),
                "tiedot_docs": c.td_n,
                "workers": c.workers,
                "mixed_start": c.mixed_start,
                "modes": c.modes.iter().map(|m| m.label()).collect::<Vec<_>>(),
            },
            "seeds": { "entities": data::SEED_LITE, "tiedot": data::SEED_TIEDOT },
            "engines": engines,
            "not_run": not_run,
            "polodb": {"ran": false, "why": peers::POLODB_WHY},
            "upsert_ratios": upserts,
            "tiedot_ratios": td,
            "suites": suites,
        });
        json_report(&out.setting, &args.common, rows, rest)
    }

    fn charts<'a>(&self, out: &'a DOutcome) -> Vec<Chart<'a>> {
        vec![Chart {
            name: "D",
            title: "Suite D — documents: LiteDB write table (seed 000), tiedot bench (seed 002)"
                .to_string(),
            res: Cow::Owned(merged(out)),
            engines: &out.engines,
        }]
    }

    fn common(&self) -> &CommonArgs {
        &self.common
    }
}

/// Both sub-suites in one result set (for the single chart).
fn merged(out: &DOutcome) -> SuiteResults {
    let mut m = SuiteResults::default();
    for r in [&out.lite, &out.tiedot].into_iter().flatten() {
        m.rows.extend(r.rows.iter().cloned());
        m.samples
            .extend(r.samples.iter().map(|(k, v)| (k.clone(), v.clone())));
        m.cpf
            .extend(r.cpf.iter().map(|(k, v)| (k.clone(), v.clone())));
        m.notes.extend(r.notes.iter().cloned());
    }
    m
}

/// The selected sub-suites on each engine in turn, in the bench directory
/// `base`.
fn run_engines(
    engines: &[EngineKind],
    counts: &DCounts,
    base: &Path,
    repeat: usize,
    progress: bool,
) -> Res<(Option<SuiteResults>, Option<SuiteResults>)> {
    let pb = progress_bar(
        progress,
        Some(0),
        "suite D [{elapsed_precise}] {bar:30} {pos}/{len} {wide_msg}",
        true,
    );
    let lite = if counts.lite {
        let mut res = SuiteResults {
            reference: Some((LITEDB_REF_TITLE.to_string(), litedb_reference())),
            ..SuiteResults::default()
        };
        let ents: BTreeMap<usize, (Vec<Entity>, Vec<Entity>)> = counts
            .lite_ns
            .iter()
            .map(|&n| (n, (data::entities(n, 1, 0), data::entities(n, 1, 1))))
            .collect();
        let each = |kind, rep, root, res: &mut SuiteResults| {
            let mut run = DRun {
                kind,
                rep,
                root,
                res,
                pb: &pb,
                c: counts,
            };
            lite_engine(&mut run, &ents)
        };
        each_engine(
            engines, repeat, base, "d-lite", "lite, ", &pb, &mut res, each,
        );
        Some(res)
    } else {
        None
    };
    let tiedot = if counts.tiedot {
        let mut res = SuiteResults {
            reference: Some((tiedot_ref_title(counts.td_n), tiedot_reference(counts.td_n))),
            ..SuiteResults::default()
        };
        // The rows in table order (phases, then modes).
        for phase in TD_PHASES {
            if td_writes(phase) {
                for &m in &counts.modes {
                    res.rows.push(td_row(phase, Some(m), counts));
                }
            } else {
                res.rows.push(td_row(phase, None, counts));
            }
        }
        res.rows.push(size_row(counts));
        let each = |kind, rep, root, res: &mut SuiteResults| {
            let mut run = DRun {
                kind,
                rep,
                root,
                res,
                pb: &pb,
                c: counts,
            };
            tiedot_engine(&mut run)
        };
        each_engine(
            engines, repeat, base, "d-tiedot", "tiedot, ", &pb, &mut res, each,
        );
        Some(res)
    } else {
        None
    };
    pb.finish_and_clear();
    Ok((lite, tiedot))
}

fn litedb_reference() -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    for (n, ind, bulk, upsert) in LITEDB_REF {
        m.insert(lite_id(LiteOp::IndInsert, n, Mode::N), ind.to_string());
        m.insert(lite_id(LiteOp::BulkInsert, n, Mode::N), bulk.to_string());
        m.insert(
            lite_id(LiteOp::IndUpsertNew, n, Mode::N),
            upsert.to_string(),
        );
        m.insert(
            lite_id(LiteOp::IndUpsertExisting, n, Mode::N),
            upsert.to_string(),
        );
    }
    m
}

fn tiedot_reference(n: usize) -> BTreeMap<String, String> {
    tiedot_ref(n)
        .0
        .iter()
        .map(|(phase, v)| {
            let id = if td_writes(phase) {
                td_id(phase, Some(Mode::N))
            } else {
                td_id(phase, None)
            };
            (id, fmt_num(*v))
        })
        .collect()
}

/// One engine's run of a sub-suite.
struct DRun<'a> {
    kind: EngineKind,
    /// The repeat, from 0.
    rep: usize,
    root: PathBuf,
    res: &'a mut SuiteResults,
    pb: &'a ProgressBar,
    c: &'a DCounts,
}

impl DRun<'_> {
    fn fresh(&self, name: &str) -> Res<(Box<dyn DocEngine>, PathBuf)> {
        let dir = fresh_dir(&self.root, name)?;
        Ok((peers::open_docs(self.kind, &dir)?, dir))
    }

    fn phase(&self, what: &str, len: u64) {
        self.pb.set_length(len);
        self.pb.set_position(0);
        self.pb.set_message(format!("{} {what}", self.kind.title()));
    }

    fn record(&mut self, row: &Row, v: f64) {
        self.res.record(row, self.kind, v);
    }

    fn record_cpf(&mut self, row: &Row, e: &dyn DocEngine, before: Option<u64>, commits: u64) {
        let after = e.flushes();
        self.res
            .record_flushes(row, self.kind, before, after, commits);
    }
}

// ---------------------------------------------------------------------------
// The LiteDB write table

fn lite_engine(run: &mut DRun<'_>, ents: &BTreeMap<usize, (Vec<Entity>, Vec<Entity>)>) -> Res<()> {
    let (e, dir) = run.fresh("lite")?;
    e.lite_prepare()?;
    for (&n, (orig, next)) in ents {
        let iters = run.c.iters(n);
        for &mode in &run.c.modes {
            let m = mode.label();
            for op in LiteOp::ALL {
                let r = Row {
                    id: lite_id(op, n, mode),
                    label: format!("{} entities: {} ({m})", n_label(n), op.label()),
                    unit: Unit::MicrosPer("call"),
                    show_cpf: mode == Mode::D && op.commits(n) > 1,
                };
                run.phase(&r.label, iters as u64);
                let mut total = 0.0;
                let mut flushed = 0u64;
                let mut counted = true;
                for _ in 0..iters {
                    // Untimed: empty the collection, store the preload in
                    // the same mode (so a D call flushes only its own work).
                    e.lite_clear()?;
                    let pre = op.preload(n);
                    if pre > 0 {
                        e.lite_insert_many(&orig[..pre], mode)?;
                    }
                    let f0 = e.flushes();
                    let t = Instant::now();
                    match op {
                        LiteOp::IndInsert => {
                            for x in orig {
                                e.lite_insert(x, mode)?;
                            }
                        }
                        LiteOp::BulkInsert => e.lite_insert_many(orig, mode)?,
                        LiteOp::IndUpsertNew => {
                            for x in orig {
                                e.lite_upsert(x, mode)?;
                            }
                        }
                        LiteOp::IndUpsertExisting => {
                            for x in next {
                                e.lite_upsert(x, mode)?;
                            }
                        }
                        LiteOp::BulkUpsertNew => e.lite_upsert_many(orig, mode)?,
                        LiteOp::BulkUpsertExisting | LiteOp::BulkUpsertHalf => {
                            e.lite_upsert_many(next, mode)?
                        }
                    }
                    total += t.elapsed().as_secs_f64();
                    match (f0, e.flushes()) {
                        (Some(a), Some(b)) => flushed += b - a,
                        _ => counted = false,
                    }
                    let len = e.lite_len()?;
                    if len != n as u64 {
                        return Err(
                            format!("{}: {len} entities stored, expected {n}", r.label).into()
                        );
                    }
                    run.pb.inc(1);
                }
                run.record(&r, total * 1e6 / iters as f64);
                if mode == Mode::D && counted && flushed > 0 && run.kind == EngineKind::Cairn {
                    run.res
                        .record_cpf(&r, (op.commits(n) * iters) as f64 / flushed as f64);
                }
            }
        }
    }
    discard(e, &dir);
    Ok(())
}

/// The upsert ÷ insert ratios of one engine, N and mode (medians).
#[derive(Debug, Clone)]
pub struct UpsertRatios {
    pub engine: EngineKind,
    pub n: usize,
    pub mode: Mode,
    pub bulk_new: Option<f64>,
    pub bulk_existing: Option<f64>,
    pub bulk_half: Option<f64>,
    pub ind_new: Option<f64>,
    pub ind_existing: Option<f64>,
}

/// The target of the upsert ÷ insert ratios.
pub const UPSERT_TARGET: f64 = 1.25;

pub fn upsert_ratios(res: &SuiteResults, engines: &[EngineKind], c: &DCounts) -> Vec<UpsertRatios> {
    let mut out = Vec::new();
    for &engine in engines {
        for &n in &c.lite_ns {
            for &mode in &c.modes {
                let med = |op| res.median(&lite_id(op, n, mode), engine);
                let ratio = |op, base| match (med(op), med(base)) {
                    (Some(a), Some(b)) if b > 0.0 => Some(a / b),
                    _ => None,
                };
                let r = UpsertRatios {
                    engine,
                    n,
                    mode,
                    bulk_new: ratio(LiteOp::BulkUpsertNew, LiteOp::BulkInsert),
                    bulk_existing: ratio(LiteOp::BulkUpsertExisting, LiteOp::BulkInsert),
                    bulk_half: ratio(LiteOp::BulkUpsertHalf, LiteOp::BulkInsert),
                    ind_new: ratio(LiteOp::IndUpsertNew, LiteOp::IndInsert),
                    ind_existing: ratio(LiteOp::IndUpsertExisting, LiteOp::IndInsert),
                };
                if r.bulk_new.is_some() || r.ind_new.is_some() {
                    out.push(r);
                }
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------
// The tiedot bench

fn td_row(phase: &str, m: Option<Mode>, c: &DCounts) -> Row {
    let n = n_label(c.td_n);
    let w = c.workers;
    let ml = m.map_or(String::new(), |m| format!(" ({})", m.label()));
    let label = match phase {
        "insert" => format!("insert {n} docs, 1 per commit, {w} workers{ml}"),
        "read" => format!("read by id: {n} random ids, {w} workers"),
        "lookup" => format!("lookup query: {n} queries, {w} workers"),
        "update" => format!("update {n} random ids with a fresh doc, {w} workers{ml}"),
        "delete" => format!("delete {n} random ids (with replacement), {w} workers{ml}"),
        _ => format!(
            "bench2 mixed: {} ops, 5 × {w} workers + schema worker{ml}",
            n_label(c.td_n * 7)
        ),
    };
    Row {
        id: td_id(phase, m),
        label,
        unit: Unit::PerSec("ops"),
        show_cpf: m == Some(Mode::D),
    }
}

fn size_row(c: &DCounts) -> Row {
    Row {
        id: "D-tiedot-size".into(),
        label: format!(
            "size on disk after inserting {} docs (6 indexes)",
            n_label(c.td_n)
        ),
        unit: Unit::Mib,
        show_cpf: false,
    }
}

/// Splits `n` items over `w` workers: worker k gets `ranges[k]`.
fn split(n: usize, w: usize) -> Vec<std::ops::Range<usize>> {
    let w = w.max(1);
    (0..w).map(|k| (n * k / w)..(n * (k + 1) / w)).collect()
}

/// Phase seeds.
const PH_INSERT: u64 = 1;
const PH_READ: u64 = 2;
const PH_LOOKUP: u64 = 3;
const PH_UPDATE: u64 = 4;
const PH_DELETE: u64 = 5;
const PH_MIXED: u64 = 6;

/// Runs `f` over every worker's items, one thread per worker; returns the
/// elapsed seconds and the sum of what `f` returned.
fn parallel<T: Sync>(
    work: &[Vec<T>],
    pb: &ProgressBar,
    f: impl Fn(&T) -> Res<u64> + Sync,
) -> Res<(f64, u64)> {
    let f = &f;
    let t = Instant::now();
    let sum = std::thread::scope(|s| -> Res<u64> {
        let hs: Vec<_> = work
            .iter()
            .map(|items| {
                s.spawn(move || -> Res<u64> {
                    let mut sum = 0;
                    for (i, x) in items.iter().enumerate() {
                        sum += f(x)?;
                        if i % 256 == 255 {
                            pb.inc(256);
                        }
                    }
                    Ok(sum)
                })
            })
            .collect();
        let mut total = 0;
        let mut first_err = None;
        for h in hs {
            match h.join() {
                Ok(Ok(v)) => total += v,
                Ok(Err(e)) => {
                    first_err.get_or_insert(e);
                }
                Err(_) => {
                    first_err.get_or_insert_with(|| "a worker panicked".into());
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(total),
        }
    })?;
    Ok((t.elapsed().as_secs_f64(), sum))
}

fn tiedot_engine(run: &mut DRun<'_>) -> Res<()> {
    let modes = run.c.modes.clone();
    for mode in modes {
        tiedot_phases(run, mode)?;
    }
    for mode in run.c.modes.clone() {
        tiedot_mixed(run, mode)?;
    }
    Ok(())
}

fn row_of(run: &DRun<'_>, phase: &str, m: Option<Mode>) -> Row {
    td_row(phase, m, run.c)
}

/// bench 1: insert, read, lookup, update, delete, one after the other.
fn tiedot_phases(run: &mut DRun<'_>, mode: Mode) -> Res<()> {
    let c = run.c;
    let n = c.td_n;
    let w = c.workers;
    let parts = split(n, w);
    let m = mode.label();
    let (e, dir) = run.fresh(&format!("bench1-{m}"))?;
    e.td_prepare()?;
    let eng: &dyn DocEngine = e.as_ref();

    // Insert: worker k inserts ids of its own range.
    run.phase(&format!("tiedot ({m}): generating {} docs", n_label(n)), 0);
    let work: Vec<Vec<TdDoc>> = parts
        .iter()
        .enumerate()
        .map(|(k, r)| {
            let mut rng = data::stream(PH_INSERT, k);
            r.clone()
                .map(|id| data::td_doc(&mut rng, id as i64, n))
                .collect()
        })
        .collect();
    let row = row_of(run, "insert", Some(mode));
    run.phase(&row.label, n as u64);
    let f0 = eng.flushes();
    let (secs, _) = parallel(&work, run.pb, |d| {
        eng.td_insert(d, mode)?;
        Ok(1)
    })?;
    run.record(&row, n as f64 / secs);
    if mode == Mode::D {
        run.record_cpf(&row, eng, f0, n as u64);
    }
    drop(work);
    let len = eng.td_len()?;
    if len != n as u64 {
        return Err(format!("tiedot insert: {len} documents stored, expected {n}").into());
    }

    if mode == c.read_mode() {
        let row = size_row(c);
        run.record(&row, eng.disk_bytes() as f64 / (1 << 20) as f64);
        // Read by id: every id exists.
        let work: Vec<Vec<i64>> = (0..w)
            .map(|k| {
                let mut rng = data::stream(PH_READ, k);
                parts[k].clone().map(|_| rng.below(n) as i64).collect()
            })
            .collect();
        let row = row_of(run, "read", None);
        run.phase(&row.label, n as u64);
        let (secs, found) = parallel(&work, run.pb, |&id| {
            Ok(u64::from(eng.td_get(id)?.is_some_and(|d| d.id == id)))
        })?;
        if found != n as u64 {
            return Err(format!("tiedot read: {found} of {n} ids found").into());
        }
        run.record(&row, n as f64 / secs);

        // Lookup queries.
        let work: Vec<Vec<Lookup>> = (0..w)
            .map(|k| {
                let mut rng = data::stream(PH_LOOKUP, k);
                parts[k]
                    .clone()
                    .map(|_| data::td_lookup(&mut rng, n))
                    .collect()
            })
            .collect();
        let row = row_of(run, "lookup", None);
        run.phase(&row.label, n as u64);
        let (secs, results) = parallel(&work, run.pb, |q| eng.td_lookup(q))?;
        run.record(&row, n as f64 / secs);
        run.res.note(
            run.kind,
            format!(
                "lookup: {} queries returned {} documents in all ({:.2} per query; the \
                 same data and queries for every engine, so the totals must agree)",
                n_label(n),
                n_label(results as usize),
                results as f64 / n as f64
            ),
        );
    }

    // Update random ids with a fresh document.
    let work: Vec<Vec<TdDoc>> = (0..w)
        .map(|k| {
            let mut rng = data::stream(PH_UPDATE, k);
            parts[k]
                .clone()
                .map(|_| {
                    let id = rng.below(n) as i64;
                    data::td_doc(&mut rng, id, n)
                })
                .collect()
        })
        .collect();
    let row = row_of(run, "update", Some(mode));
    run.phase(&row.label, n as u64);
    let f0 = eng.flushes();
    let (secs, hit) = parallel(&work, run.pb, |d| Ok(u64::from(eng.td_update(d, mode)?)))?;
    drop(work);
    if hit != n as u64 {
        return Err(format!("tiedot update: {hit} of {n} ids existed").into());
    }
    run.record(&row, n as f64 / secs);
    if mode == Mode::D {
        run.record_cpf(&row, eng, f0, n as u64);
    }

    // Delete random ids, with replacement (some are gone already).
    let work: Vec<Vec<i64>> = (0..w)
        .map(|k| {
            let mut rng = data::stream(PH_DELETE, k);
            parts[k].clone().map(|_| rng.below(n) as i64).collect()
        })
        .collect();
    let row = row_of(run, "delete", Some(mode));
    run.phase(&row.label, n as u64);
    let f0 = eng.flushes();
    let (secs, deleted) = parallel(&work, run.pb, |&id| Ok(u64::from(eng.td_delete(id, mode)?)))?;
    run.record(&row, n as f64 / secs);
    if mode == Mode::D {
        run.record_cpf(&row, eng, f0, n as u64);
    }
    let left = eng.td_len()?;
    if left + deleted != n as u64 {
        return Err(
            format!("tiedot delete: {deleted} deleted, {left} left, of {n} documents").into(),
        );
    }
    run.res.note(
        run.kind,
        format!(
            "delete ({m}): {} of {} random deletes found their document",
            n_label(deleted as usize),
            n_label(n)
        ),
    );
    discard(e, &dir);
    Ok(())
}

/// bench2: inserts, reads, queries, updates and deletes at once, one worker
/// per core each, plus the schema worker.
fn tiedot_mixed(run: &mut DRun<'_>, mode: Mode) -> Res<()> {
    let c = run.c;
    let n = c.td_n;
    let w = c.workers;
    let m = mode.label();
    let start = c.mixed_start;
    let (e, dir) = run.fresh(&format!("bench2-{m}"))?;
    e.td_prepare()?;
    let eng: &dyn DocEngine = e.as_ref();
    run.phase(&format!("tiedot bench2 ({m}): generating"), 0);
    let mut rng = data::stream(PH_MIXED, 99);
    for id in 0..start {
        eng.td_insert(&data::td_doc(&mut rng, id as i64, n), Mode::N)?;
    }
    let sample = data::td_doc(&mut rng, 1 << 40, n);
    // Inserts: 2N over w workers; worker k's ids follow the start docs.
    let ins_parts = split(2 * n, w);
    let inserts: Vec<Vec<TdDoc>> = ins_parts
        .iter()
        .enumerate()
        .map(|(k, r)| {
            let mut rng = data::stream(PH_MIXED, k);
            r.clone()
                .map(|j| data::td_doc(&mut rng, (start + j) as i64, n))
                .collect()
        })
        .collect();
    let picks = |salt: u64, total: usize| -> Vec<Vec<u64>> {
        split(total, w)
            .iter()
            .enumerate()
            .map(|(k, r)| {
                let mut rng = data::stream(PH_MIXED + salt, k);
                r.clone().map(|_| rng.next_u64()).collect()
            })
            .collect()
    };
    let reads = picks(10, 2 * n);
    let deletes = picks(20, n);
    let queries: Vec<Vec<Lookup>> = split(n, w)
        .iter()
        .enumerate()
        .map(|(k, r)| {
            let mut rng = data::stream(PH_MIXED + 30, k);
            r.clone().map(|_| data::td_lookup(&mut rng, n)).collect()
        })
        .collect();
    let updates: Vec<Vec<(u64, TdDoc)>> = split(n, w)
        .iter()
        .enumerate()
        .map(|(k, r)| {
            let mut rng = data::stream(PH_MIXED + 40, k);
            r.clone()
                .map(|_| (rng.next_u64(), data::td_doc(&mut rng, 0, n)))
                .collect()
        })
        .collect();
    let total_ops = 7 * n as u64;
    let row = row_of(run, "mixed", Some(mode));
    run.phase(&row.label, total_ops);
    // Inserted so far by each insert worker: readers, updaters and deleters
    // pick among the ids that exist by now.
    let progress: Vec<AtomicUsize> = (0..w).map(|_| AtomicUsize::new(0)).collect();
    let ins_starts: Vec<usize> = ins_parts.iter().map(|r| r.start).collect();
    let pick = |u: u64| -> i64 {
        let counts: Vec<usize> = progress.iter().map(|p| p.load(Ordering::Relaxed)).collect();
        let total = start + counts.iter().sum::<usize>();
        let mut r = (u % total.max(1) as u64) as usize;
        if r < start {
            return r as i64;
        }
        r -= start;
        for (k, &cnt) in counts.iter().enumerate() {
            if r < cnt {
                return (start + ins_starts[k] + r) as i64;
            }
            r -= cnt;
        }
        0
    };
    let pick = &pick;
    let progress = &progress;
    let pb = run.pb;
    let (found, updated, deleted, results) = (
        AtomicU64::new(0),
        AtomicU64::new(0),
        AtomicU64::new(0),
        AtomicU64::new(0),
    );
    let (found, updated, deleted, results) = (&found, &updated, &deleted, &results);
    let inserts_total = 2 * n;
    let f0 = eng.flushes();
    let t = Instant::now();
    let (outcome, churn) = std::thread::scope(|s| {
        let mut hs: Vec<std::thread::ScopedJoinHandle<'_, Res<()>>> = Vec::new();
        for (k, docs) in inserts.iter().enumerate() {
            hs.push(s.spawn(move || {
                for (i, d) in docs.iter().enumerate() {
                    eng.td_insert(d, mode)?;
                    progress[k].store(i + 1, Ordering::Relaxed);
                    if i % 256 == 255 {
                        pb.inc(256);
                    }
                }
                Ok(())
            }));
        }
        for us in &reads {
            hs.push(s.spawn(move || {
                for (i, &u) in us.iter().enumerate() {
                    if eng.td_get(pick(u))?.is_some() {
                        found.fetch_add(1, Ordering::Relaxed);
                    }
                    if i % 256 == 255 {
                        pb.inc(256);
                    }
                }
                Ok(())
            }));
        }
        for qs in &queries {
            hs.push(s.spawn(move || {
                for (i, q) in qs.iter().enumerate() {
                    results.fetch_add(eng.td_lookup(q)?, Ordering::Relaxed);
                    if i % 256 == 255 {
                        pb.inc(256);
                    }
                }
                Ok(())
            }));
        }
        for docs in updates {
            hs.push(s.spawn(move || {
                for (i, (u, mut d)) in docs.into_iter().enumerate() {
                    d.id = pick(u);
                    if eng.td_update(&d, mode)? {
                        updated.fetch_add(1, Ordering::Relaxed);
                    }
                    if i % 256 == 255 {
                        pb.inc(256);
                    }
                }
                Ok(())
            }));
        }
        for us in &deletes {
            hs.push(s.spawn(move || {
                for (i, &u) in us.iter().enumerate() {
                    if eng.td_delete(pick(u), mode)? {
                        deleted.fetch_add(1, Ordering::Relaxed);
                    }
                    if i % 256 == 255 {
                        pb.inc(256);
                    }
                }
                Ok(())
            }));
        }
        // The schema worker starts once a quarter of the inserts are in
        // (tiedot sleeps 2 s), so it runs among the others.
        let sample = &sample;
        let schema = s.spawn(move || -> Res<String> {
            while progress
                .iter()
                .map(|p| p.load(Ordering::Relaxed))
                .sum::<usize>()
                < inserts_total / 4
            {
                std::thread::sleep(Duration::from_millis(1));
            }
            eng.schema_churn(sample, mode)
        });
        let mut first_err: Option<Box<dyn std::error::Error + Send + Sync>> = None;
        for h in hs {
            match h.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    first_err.get_or_insert(e);
                }
                Err(_) => {
                    first_err.get_or_insert_with(|| "a bench2 worker panicked".into());
                }
            }
        }
        let churn = schema
            .join()
            .unwrap_or_else(|_| Err("the schema worker panicked".into()));
        (first_err, churn)
    });
    let secs = t.elapsed().as_secs_f64();
    if let Some(e) = outcome {
        return Err(e);
    }
    run.record(&row, total_ops as f64 / secs);
    if mode == Mode::D {
        let writes = (2 * n + n + n) as u64;
        run.record_cpf(&row, eng, f0, writes);
    }
    let churn = match churn {
        Ok(s) => s,
        Err(e) => format!("failed: {e}"),
    };
    run.res.note(
        run.kind,
        format!(
            "bench2 ({m}, repeat {}): {} reads found their document of {}, {} of {} updates and {} of {} \
             deletes found theirs, queries returned {} documents; schema worker: {churn}",
            run.rep + 1,
            n_label(found.load(Ordering::Relaxed) as usize),
            n_label(2 * n),
            n_label(updated.load(Ordering::Relaxed) as usize),
            n_label(n),
            n_label(deleted.load(Ordering::Relaxed) as usize),
            n_label(n),
            n_label(results.load(Ordering::Relaxed) as usize),
        ),
    );
    discard(e, &dir);
    Ok(())
}

/// CairnDB ÷ tiedot's figure per phase and mode.
pub fn tiedot_ratios(res: &SuiteResults, c: &DCounts) -> Vec<(String, Option<Mode>, f64, f64)> {
    let mut out = Vec::new();
    for (phase, reference) in tiedot_ref(c.td_n).0.iter().copied() {
        let modes: Vec<Option<Mode>> = if td_writes(phase) {
            c.modes.iter().copied().map(Some).collect()
        } else {
            vec![None]
        };
        for m in modes {
            if let Some(v) = res.median(&td_id(phase, m), EngineKind::Cairn) {
                out.push((phase.to_string(), m, v, v / reference));
            }
        }
    }
    out
}

/// The tiedot ratio target.
pub const TIEDOT_TARGET: f64 = 3.0;

fn opt_ratio(r: Option<f64>, target_max: f64) -> String {
    match r {
        Some(v) => format!("{v:.2}× {}", if v <= target_max { "✓" } else { "✗" }),
        None => "—".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// tiedot's figures are taken at the run's own scale when it was
    /// measured there; otherwise the nearest scale, flagged as unlike.
    #[test]
    fn tiedot_reference_is_at_the_same_scale() {
        assert_eq!(tiedot_ref(100_000).1, 100_000);
        assert!(tiedot_ref(100_000).2);
        assert_eq!(tiedot_figure(100_000, "insert"), Some(79_637.0));
        assert_eq!(tiedot_ref(400_000).1, 400_000);
        assert!(tiedot_ref(400_000).2);
        assert_eq!(tiedot_figure(400_000, "insert"), Some(48_600.0));
        assert_eq!(tiedot_ref(40_000), (&TIEDOT_REFS[0].1, 100_000, false));
        assert!(!tiedot_ref(300_000).2);
        assert!(tiedot_ref_title(40_000).contains("not this run's scale"));
    }

    /// The lookup each engine answers equals the reference predicate on a
    /// small collection, and its CairnDB plan is an index union.
    #[test]
    fn lookup_agrees_with_the_reference() {
        let dir = tempfile::tempdir().unwrap();
        let n = 300;
        let mut rng = data::stream(77, 0);
        let docs: Vec<TdDoc> = (0..n).map(|i| data::td_doc(&mut rng, i, 50)).collect();
        let mut queries: Vec<Lookup> = (0..60).map(|_| data::td_lookup(&mut rng, 50)).collect();
        // One query whose two XOR arms hit the same document.
        queries.push(Lookup {
            a: docs[3].nested.nested.i,
            b: docs[3].ints[0],
            r: 1_000,
        });
        for kind in EngineKind::ALL
            .into_iter()
            .filter(|k| peers::has_doc_adapter(*k) && k.compiled())
        {
            let e = peers::open_docs(kind, &dir.path().join(kind.name())).unwrap();
            e.td_prepare().unwrap();
            for d in &docs {
                e.td_insert(d, Mode::N).unwrap();
            }
            for q in &queries {
                let want = docs.iter().filter(|d| q.matches(d)).count() as u64;
                assert_eq!(e.td_lookup(q).unwrap(), want, "{} {q:?}", kind.name());
            }
            // serde_json parses floats to within an ulp (no float_roundtrip).
            let same = |a: &TdDoc, b: &TdDoc| {
                let close = |x: f64, y: f64| (x - y).abs() <= 1e-12 * x.abs().max(1.0);
                a.id == b.id
                    && a.strs == b.strs
                    && a.ints == b.ints
                    && a.nested.nested.s == b.nested.nested.s
                    && a.nested.nested.i == b.nested.nested.i
                    && close(a.nested.nested.f, b.nested.nested.f)
                    && a.floats.len() == b.floats.len()
                    && a.floats.iter().zip(&b.floats).all(|(x, y)| close(*x, *y))
            };
            let got = e.td_get(7).unwrap().unwrap();
            assert!(same(&got, &docs[7]), "{} {got:?}", kind.name());
            let mut d = docs[8].clone();
            d.ints = vec![1, 2];
            assert!(e.td_update(&d, Mode::N).unwrap());
            let got = e.td_get(8).unwrap().unwrap();
            assert!(same(&got, &d), "{} {got:?}", kind.name());
            assert!(e.td_get(n + 5).unwrap().is_none());
            assert!(e.td_delete(9, Mode::N).unwrap());
            assert!(!e.td_delete(9, Mode::N).unwrap());
            assert_eq!(e.td_len().unwrap(), n as u64 - 1);
        }
        let db = cairndb::Database::create(dir.path().join("plan.cairn")).unwrap();
        let c = db
            .collection::<TdDoc>(peers::cairn_docs::DOCS)
            .with_durability(cairndb::Durability::None);
        for p in peers::cairn_docs::TD_INDEXES {
            c.create_index(&[(p, 1)], Default::default()).unwrap();
        }
        c.insert_many(&docs).unwrap();
        let ex = c
            .explain(
                peers::cairn_docs::lookup_filter(&queries[0]),
                cairndb::document::FindOptions::new(),
            )
            .unwrap();
        assert!(ex.plan.to_string().starts_with("union"), "{}", ex.plan);
    }

    /// A tiny suite D: every row of both sub-suites yields a positive
    /// figure on every engine, and the lookups agree across engines.
    #[test]
    fn tiny_suite_d() {
        let dir = tempfile::tempdir().unwrap();
        let args = DocArgs {
            common: CommonArgs {
                dir: Some(dir.path().to_path_buf()),
                quick: true,
                scale: Some(400),
                fsync_samples: 5,
                no_progress: true,
                ..CommonArgs::default()
            },
            suite: DocSuiteSel::All,
            backend: None,
        };
        let out = args.execute(false).unwrap();
        for res in [out.lite.as_ref().unwrap(), out.tiedot.as_ref().unwrap()] {
            let bad: Vec<_> = res
                .notes
                .iter()
                .filter(|(_, n)| n.contains("stopped"))
                .collect();
            assert!(bad.is_empty(), "notes: {bad:?}");
            for e in &out.engines {
                for row in &res.rows {
                    let v = res.median(&row.id, *e);
                    if row.id.ends_with("-peak-rss") {
                        // Measured where Linux lets the mark be reset; a
                        // tiny run may not raise it at all.
                        assert!(v.is_none_or(|v| v.is_finite() && v >= 0.0), "{v:?}");
                        continue;
                    }
                    assert!(
                        v.is_some_and(|v| v.is_finite() && v > 0.0),
                        "{} row {} has {v:?}",
                        e.name(),
                        row.id
                    );
                }
            }
        }
        let lite = out.lite.as_ref().unwrap();
        assert_eq!(lite.rows.len(), 2 * 2 * 7 + 1);
        let td = out.tiedot.as_ref().unwrap();
        assert_eq!(td.rows.len(), 4 * 2 + 2 + 1 + 1);
        let lookups: Vec<&String> = td
            .notes
            .iter()
            .filter(|(_, n)| n.starts_with("lookup:"))
            .map(|(_, n)| n)
            .collect();
        assert_eq!(lookups.len(), out.engines.len());
        assert!(lookups.windows(2).all(|w| w[0] == w[1]), "{lookups:?}");
        let text = args.render(&out);
        assert!(text.contains("Upsert ÷ insert"), "{text}");
        assert!(text.contains("CairnDB ÷ tiedot"), "{text}");
        assert!(text.contains("PoloDB"), "{text}");
    }
}
