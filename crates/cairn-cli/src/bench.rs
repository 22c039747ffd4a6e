//! `cairn bench`: the built-in benchmark.
//!
//! Runs the workloads of `BENCHMARKS.md` (suite T: the Thunder vs bbolt
//! table; suite R: the redb comparison suite; suite E, the event store, in
//! `bench/events.rs`; suite D, documents, in `bench/docs.rs`) on CairnDB and, when built with
//! `--features peers` (and `rocksdb`), on its peers side by side in the same
//! run, each engine in a fresh directory. Every write row runs in mode D
//! (durable when commit returns: a real device flush) and mode N
//! (crash-consistent, no flush). Prints the machine, the fsync floor, each
//! engine's configuration and one Markdown table per suite with CairnDB's
//! ratio to the best peer; `--json FILE` writes every figure.

mod bbolt;
mod data;
mod docs;
mod engine;
mod events;
mod peers;
mod report;
mod suites;
mod svg;
mod sysinfo;

use std::io::Write;
use std::path::PathBuf;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::json;

use engine::{EngineKind, Mode, Res};
use report::SuiteResults;
use suites::{Counts, RData, Run, TData};

/// Which KV suites to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SuiteSel {
    /// The Thunder vs bbolt table (T1–T7).
    T,
    /// The redb comparison suite (R1–R11) at `--scale`.
    R,
    /// Both.
    All,
}

/// Which durability modes the write rows run in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DurabilitySel {
    /// Durable when commit returns (a device flush).
    D,
    /// Crash-consistent, not durable (no flush).
    N,
    /// Both (the default).
    Both,
}

impl DurabilitySel {
    pub fn modes(self) -> Vec<Mode> {
        match self {
            DurabilitySel::D => vec![Mode::D],
            DurabilitySel::N => vec![Mode::N],
            DurabilitySel::Both => vec![Mode::D, Mode::N],
        }
    }
}

/// `cairn bench [kv|events|docs]`. Without a subcommand: suite T on every
/// compiled-in engine in both modes, one repeat (the quick default); flags
/// given without a subcommand are those of `bench kv`.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BenchCmd {
    #[command(subcommand)]
    pub what: Option<BenchWhat>,
    #[command(flatten)]
    pub kv: BenchArgs,
}

#[derive(Debug, clap::Subcommand)]
pub enum BenchWhat {
    /// The KV suites: T (the Thunder vs bbolt table) and R (the redb
    /// comparison suite).
    Kv(BenchArgs),
    /// The event-store suite E (the seed's RocksDB event store workloads,
    /// issue 6) on CairnDB and, with `--features peers`, SQLite.
    Events(EventArgs),
    /// The document suite D: LiteDB's write table (seed 000) and tiedot's
    /// benchmarks (seed 002) on CairnDB's document layer and, with
    /// `--features peers`, SQLite with JSON documents.
    Docs(DocArgs),
}

/// Options every suite shares.
#[derive(Debug, Clone, clap::Args)]
pub struct CommonArgs {
    /// Directory for the benchmark databases (a temporary one by default).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Engines to run, comma-separated (cairn, redb, lmdb, sqlite, fjall,
    /// sled, rocksdb, bbolt); default: every engine compiled into this
    /// build, and bbolt when `go` is available.
    #[arg(long, value_delimiter = ',')]
    pub engines: Option<Vec<String>>,
    /// Durability modes of the write rows: D (device flush per commit),
    /// N (no flush) or both.
    #[arg(long, value_enum, ignore_case = true, default_value = "both")]
    pub durability: DurabilitySel,
    /// Runs per suite; the tables show the median (the JSON also min–max).
    /// Default 3 (1 with --quick, and for `cairn bench` alone).
    #[arg(long)]
    pub repeat: Option<usize>,
    /// Suite R: N (keys in the bulk load, default 1,000,000). Suite E: the
    /// events of the catch-up row (default 1,000,000); the ReadEvents grid
    /// runs the cells whose store holds at most 10 × N events. Suite D: the
    /// documents of the tiedot bench (default 400,000; 2,000 with --quick).
    #[arg(long)]
    pub scale: Option<usize>,
    /// A fast smoke run: a tenth of the work (or less), one repeat.
    #[arg(long)]
    pub quick: bool,
    /// Write every figure (with min–max over repeats) to this JSON file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write one bar chart per suite into this directory
    /// (`suite-t.svg`, `suite-r.svg`, `suite-e.svg`, `suite-d.svg`).
    #[arg(long)]
    pub svg: Option<PathBuf>,
    /// Samples of the fsync floor.
    #[arg(long, default_value_t = 200)]
    pub fsync_samples: usize,
    /// No progress bars.
    #[arg(long)]
    pub no_progress: bool,
}

impl Default for CommonArgs {
    fn default() -> Self {
        CommonArgs {
            dir: None,
            engines: None,
            durability: DurabilitySel::Both,
            repeat: None,
            scale: None,
            quick: false,
            json: None,
            svg: None,
            fsync_samples: 200,
            no_progress: false,
        }
    }
}

/// Options of `cairn bench kv`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Which suite to run.
    #[arg(long, value_enum, ignore_case = true, default_value = "t")]
    pub suite: SuiteSel,
    /// Suite T value size in bytes: 27 (`value_%08d_padding_data`) or 100
    /// (the same, padded); both by default. Suite R always uses 150-byte
    /// values.
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(["27", "100"]))]
    pub values: Option<String>,
    /// T7 values use Thunder's `i % 256` pattern (compressible) instead of
    /// seeded random bytes.
    #[arg(long)]
    pub as_published: bool,
    /// Writer threads of T5c.
    #[arg(long, default_value_t = 8)]
    pub writers: usize,
}

impl Default for BenchArgs {
    fn default() -> Self {
        BenchArgs {
            common: CommonArgs::default(),
            suite: SuiteSel::T,
            values: None,
            as_published: false,
            writers: 8,
        }
    }
}

/// Options of `cairn bench events`.
#[derive(Debug, Clone, clap::Args)]
pub struct EventArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Writer threads beside the subscriber in the live-tail row (E8).
    #[arg(long, default_value_t = 4)]
    pub tail_writers: usize,
}

/// Which sub-suites of suite D to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DocSuiteSel {
    /// LiteDB's write table: inserts and upserts of 10, 100, 1,000 entities.
    Lite,
    /// tiedot's bench 1 and bench2 at `--scale` documents.
    Tiedot,
    /// Both (the default).
    All,
}

/// Options of `cairn bench docs`.
#[derive(Debug, Clone, clap::Args)]
pub struct DocArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Which sub-suite to run.
    #[arg(long, value_enum, ignore_case = true, default_value = "all")]
    pub suite: DocSuiteSel,
}

/// Runs `cairn bench [kv|events|docs]`.
pub fn run_cmd(cmd: BenchCmd) -> Result<(), Box<dyn std::error::Error>> {
    match cmd.what {
        Some(BenchWhat::Kv(args)) => run(args),
        Some(BenchWhat::Events(args)) => events::run(args),
        Some(BenchWhat::Docs(args)) => docs::run(args),
        None => {
            let mut args = cmd.kv;
            // The quick default: one repeat unless asked otherwise.
            args.common.repeat.get_or_insert(1);
            run(args)
        }
    }
}

/// Everything one invocation measured.
pub struct Outcome {
    pub engines: Vec<EngineKind>,
    pub machine: sysinfo::Machine,
    pub floor: sysinfo::Floor,
    /// The fsync floor measured again after the suites (drift check).
    pub floor_end: sysinfo::Floor,
    pub repeat: usize,
    pub counts: Counts,
    pub suites: Vec<(&'static str, SuiteResults)>,
    /// bbolt: the version it ran, or why it was skipped (`None`: not
    /// selected).
    pub bbolt: Option<Result<String, String>>,
}

/// Runs the benchmark.
pub fn run(args: BenchArgs) -> Result<(), Box<dyn std::error::Error>> {
    let progress = !args.common.no_progress;
    let out = execute(&args, progress).map_err(|e| -> Box<dyn std::error::Error> { e })?;
    let text = render(&out, &args);
    let stdout = std::io::stdout();
    let mut lock = stdout.lock();
    lock.write_all(text.as_bytes())?;
    lock.flush()?;
    if let Some(path) = &args.common.json {
        let j = to_json(&out, &args);
        std::fs::write(path, serde_json::to_string_pretty(&j)?)?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(dir) = &args.common.svg {
        for (name, res) in &out.suites {
            let p = svg::write_suite(
                dir,
                name,
                &suite_title(name, &out.counts),
                res,
                &out.engines,
            )
            .map_err(|e| -> Box<dyn std::error::Error> { e })?;
            eprintln!("wrote {}", p.display());
        }
    }
    Ok(())
}

fn suite_title(name: &str, c: &Counts) -> String {
    match name {
        "T" => "Suite T — the Thunder vs bbolt table".to_string(),
        _ => format!("Suite R — the redb comparison suite (N = {})", c.r_n),
    }
}

/// The directory the benchmark databases go in: `--dir` (created if
/// missing), else a fresh temporary directory named `prefix…`, removed when
/// the returned guard drops.
fn bench_dir(
    args: &CommonArgs,
    prefix: &str,
) -> Res<(Option<tempfile::TempDir>, std::path::PathBuf)> {
    match &args.dir {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            Ok((None, d.clone()))
        }
        None => {
            let tmp = tempfile::Builder::new().prefix(prefix).tempdir()?;
            let path = tmp.path().to_path_buf();
            Ok((Some(tmp), path))
        }
    }
}

/// Engines that do not run in a suite, each with the reason.
type NotRun = Vec<(EngineKind, &'static str)>;

/// The selected engines that have an adapter for a suite (`store`, e.g.
/// "event-store"), and why each other engine does not run.
fn engines_with_adapter(
    args: &CommonArgs,
    has_adapter: fn(EngineKind) -> bool,
    no_adapter: &'static str,
) -> Res<(Vec<EngineKind>, NotRun)> {
    let engines: Vec<EngineKind> = select_engines(args)?
        .into_iter()
        .filter(|&e| has_adapter(e))
        .collect();
    let not_run = EngineKind::ALL
        .into_iter()
        .filter(|e| !engines.contains(e))
        .map(|e| {
            let why = if !has_adapter(e) {
                no_adapter
            } else if !e.compiled() {
                "not compiled in: --features peers"
            } else {
                "not selected"
            };
            (e, why)
        })
        .collect();
    Ok((engines, not_run))
}

fn select_engines(args: &CommonArgs) -> Res<Vec<EngineKind>> {
    match &args.engines {
        None => Ok(EngineKind::ALL
            .into_iter()
            .filter(|e| e.compiled())
            .collect()),
        Some(list) => {
            let mut out = Vec::new();
            for name in list.iter().filter(|s| !s.trim().is_empty()) {
                let e =
                    EngineKind::parse(name).ok_or_else(|| format!("unknown engine {name:?}"))?;
                if !e.compiled() {
                    let feature = if e == EngineKind::Rocksdb {
                        "rocksdb"
                    } else {
                        "peers"
                    };
                    return Err(format!(
                        "engine {} is not in this build (build cairn-cli with --features {feature})",
                        e.name()
                    )
                    .into());
                }
                if !out.contains(&e) {
                    out.push(e);
                }
            }
            if out.is_empty() {
                return Err("no engine selected".into());
            }
            out.sort();
            Ok(out)
        }
    }
}

/// Runs the selected suites and returns every figure.
pub fn execute(args: &BenchArgs, progress: bool) -> Res<Outcome> {
    let common = &args.common;
    let engines = select_engines(common)?;
    if args.writers == 0 {
        return Err("--writers must be at least 1".into());
    }
    let repeat = common
        .repeat
        .unwrap_or(if common.quick { 1 } else { 3 })
        .max(1);
    let mut counts = if common.quick {
        Counts::quick(common.scale)
    } else {
        Counts::full(common.scale.unwrap_or(1_000_000))
    };
    counts.modes = common.durability.modes();
    if let Some(v) = &args.values {
        counts.t_values = vec![v.parse()?];
    }
    if counts.r_n < 16 {
        return Err("--scale must be at least 16".into());
    }
    counts.t5c_threads = args.writers;
    counts.t7_as_published = args.as_published;
    let (_tmp, base) = bench_dir(common, "cairn-bench-")?;
    let machine = sysinfo::machine(&base);
    let floor = sysinfo::fsync_floor(&base, common.fsync_samples.max(1))?;
    let want_t = matches!(args.suite, SuiteSel::T | SuiteSel::All);
    let want_r = matches!(args.suite, SuiteSel::R | SuiteSel::All);
    let native: Vec<EngineKind> = engines.iter().copied().filter(|e| !e.external()).collect();
    let mut suites = Vec::new();
    let mut bbolt_status = None;
    if want_t {
        let data = TData::new(&counts);
        let mut res = run_suite(
            "T",
            &native,
            repeat,
            &base,
            progress,
            suites::T_STEPS,
            |r| suites::run_t(r, &data),
        )?;
        if engines.contains(&EngineKind::Bbolt) {
            bbolt_status = Some(run_bbolt(&base, &data, repeat, progress, &mut res));
        }
        suites.push(("T", res));
    } else if engines.contains(&EngineKind::Bbolt) {
        bbolt_status = Some(Err("it runs suite T only".to_string()));
    }
    if want_r {
        let data = RData::new(&counts);
        let res = run_suite(
            "R",
            &native,
            repeat,
            &base,
            progress,
            suites::R_STEPS,
            |r| suites::run_r(r, &data),
        )?;
        suites.push(("R", res));
    }
    let floor_end = sysinfo::fsync_floor(&base, common.fsync_samples.max(1))?;
    Ok(Outcome {
        engines,
        machine,
        floor,
        floor_end,
        repeat,
        counts,
        suites,
        bbolt: bbolt_status,
    })
}

/// Builds the Go harness and runs suite T on bbolt `repeat` times; returns
/// the version it ran or why it did not.
fn run_bbolt(
    base: &std::path::Path,
    data: &TData,
    repeat: usize,
    progress: bool,
    res: &mut SuiteResults,
) -> Result<String, String> {
    let pb = if progress {
        let pb = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        if let Ok(style) =
            ProgressStyle::with_template("suite T [{elapsed_precise}] {spinner} {wide_msg}")
        {
            pb.set_style(style);
        }
        pb.enable_steady_tick(std::time::Duration::from_millis(200));
        pb
    } else {
        ProgressBar::hidden()
    };
    pb.set_message("bbolt: go build");
    let bin = bbolt::build(base);
    let mut version = Err(String::new());
    if let Ok(bin) = &bin {
        for rep in 0..repeat {
            pb.set_message(format!("bbolt (Go), repeat {}/{repeat}", rep + 1));
            match bbolt::run_t(bin, &base.join(format!("t-bbolt-{rep}")), data, res) {
                Ok(v) => version = Ok(v),
                Err(e) => {
                    res.note(
                        EngineKind::Bbolt,
                        format!("repeat {}: stopped: {e}", rep + 1),
                    );
                    break;
                }
            }
        }
        let _ = std::fs::remove_file(bin);
    }
    pb.finish_and_clear();
    match (bin, version) {
        (Err(why), _) => Err(why),
        (Ok(_), Ok(v)) => Ok(v),
        (Ok(_), Err(_)) => Err("the Go harness failed (see the notes)".to_string()),
    }
}

fn run_suite(
    name: &'static str,
    engines: &[EngineKind],
    repeat: usize,
    base: &std::path::Path,
    progress: bool,
    steps: u64,
    mut body: impl FnMut(&mut Run<'_>) -> Res<()>,
) -> Res<SuiteResults> {
    let pb = if progress {
        let pb = ProgressBar::with_draw_target(
            Some(steps * engines.len() as u64 * repeat as u64),
            ProgressDrawTarget::stderr(),
        );
        if let Ok(style) = ProgressStyle::with_template(&format!(
            "suite {name} [{{elapsed_precise}}] {{bar:30}} {{pos}}/{{len}} {{wide_msg}}"
        )) {
            pb.set_style(style);
        }
        pb
    } else {
        ProgressBar::hidden()
    };
    let mut res = SuiteResults::default();
    for rep in 0..repeat {
        for &kind in engines {
            let root = base.join(format!("{}-{}-{rep}", name.to_lowercase(), kind.name()));
            let pos = pb.position();
            let outcome = {
                let mut run = Run {
                    kind,
                    root: root.clone(),
                    res: &mut res,
                    pb: &pb,
                };
                body(&mut run)
            };
            pb.set_position(pos + steps);
            let _ = std::fs::remove_dir_all(&root);
            if let Err(e) = outcome {
                let msg = format!("repeat {}: stopped: {e}", rep + 1);
                pb.println(format!("{}: {msg}", kind.title()));
                res.note(kind, msg);
            }
        }
    }
    pb.finish_and_clear();
    Ok(res)
}

/// The machine, the fsync floor (at start and end) and the repeats.
pub fn render_header(
    s: &mut String,
    m: &sysinfo::Machine,
    floor: &sysinfo::Floor,
    floor_end: &sysinfo::Floor,
    repeat: usize,
    args: &CommonArgs,
) {
    use std::fmt::Write as _;
    let _ = writeln!(s, "- CPU: {} ({} cores)", m.cpu, m.cores);
    let _ = writeln!(s, "- RAM: {:.1} GiB; kernel {}", m.ram_gib, m.kernel);
    let _ = writeln!(
        s,
        "- Bench directory: {} on {} ({}, mounted at {})",
        args.dir.as_ref().map_or_else(
            || "a temporary directory".to_string(),
            |d| d.display().to_string()
        ),
        m.filesystem,
        m.device,
        m.mount
    );
    let _ = writeln!(
        s,
        "- fsync floor (4 KiB overwrite + fdatasync, {} samples): p50 {:.0} µs, p99 {:.0} µs \
         (≈ {:.0} flushes/s)",
        floor.samples,
        floor.p50_us,
        floor.p99_us,
        1e6 / floor.p50_us.max(1e-3)
    );
    let _ = writeln!(
        s,
        "- fsync floor again after the suites: p50 {:.0} µs, p99 {:.0} µs",
        floor_end.p50_us, floor_end.p99_us
    );
    let _ = writeln!(
        s,
        "- Repeats: {} (tables show the median){}",
        repeat,
        if args.quick {
            "; --quick (scaled-down counts)"
        } else {
            ""
        }
    );
}

/// The text report: header, configurations, one table per suite.
pub fn render(out: &Outcome, args: &BenchArgs) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let c = &out.counts;
    let _ = writeln!(s, "# cairn bench kv\n");
    render_header(
        &mut s,
        &out.machine,
        &out.floor,
        &out.floor_end,
        out.repeat,
        &args.common,
    );
    let _ = writeln!(
        s,
        "- Seeds: T3 LCG {}, T5 LCG {}, T7 bytes {:#x}{}, R data {:#x} (SplitMix64)",
        suites::SEED_T3,
        suites::SEED_T5,
        suites::SEED_T7,
        if c.t7_as_published {
            " (unused: --as-published uses i % 256)"
        } else {
            ""
        },
        suites::SEED_R
    );
    let _ = writeln!(
        s,
        "- Modes: D = durable when commit returns (a device flush); N = crash-consistent, \
         not durable (no flush). `c/f` = CairnDB commits per device flush. Reads touch each \
         value's length, one byte per 4 KiB and its last byte (zero-copy engines are not \
         charged a copy). Ratio: CairnDB ÷ best peer, >1 means CairnDB leads (for µs and MiB \
         rows, best ÷ CairnDB). {}",
        engine::SPACE_NOTE
    );
    let _ = writeln!(
        s,
        "- Ran: modes {} (--durability); suite T values of {} bytes (--values)",
        c.modes
            .iter()
            .map(|m| m.label())
            .collect::<Vec<_>>()
            .join(" and "),
        c.t_values
            .iter()
            .map(|v| v.to_string())
            .collect::<Vec<_>>()
            .join(" and ")
    );
    let _ = writeln!(s, "\n## Engines\n");
    for e in &out.engines {
        if e.external() && !matches!(out.bbolt, Some(Ok(_))) {
            continue;
        }
        let _ = writeln!(s, "- **{}**: {}", e.title(), e.config());
    }
    let missing: Vec<&str> = EngineKind::ALL
        .iter()
        .filter(|e| !out.engines.contains(e) && !e.external())
        .map(|e| e.title())
        .collect();
    if !missing.is_empty() {
        let _ = writeln!(
            s,
            "- Not run: {} (not selected or not compiled in: `--features peers`, \
             `--features rocksdb`)",
            missing.join(", ")
        );
    }
    match &out.bbolt {
        None => {
            let _ = writeln!(s, "- Not run: bbolt (not selected)");
        }
        Some(Ok(v)) => {
            let _ = writeln!(s, "- bbolt ran as {v}");
        }
        Some(Err(why)) => {
            let _ = writeln!(s, "- Not run: bbolt — {why}");
        }
    }
    for (name, res) in &out.suites {
        let title = suite_title(name, c);
        let _ = writeln!(s, "\n## {title}\n");
        if *name == "T" {
            let _ = writeln!(
                s,
                "T5: op i draws r from the LCG; r % 10 < 7 reads key_%08d of r % {} in its \
                 own read txn, else puts mixed_%08d of i → \"mixed_value\" in its own write txn. \
                 T5c splits the same ops round-robin over {} threads.\n",
                c.t_keys, c.t5c_threads
            );
        }
        s.push_str(&res.markdown(&out.engines));
        if !res.notes.is_empty() {
            let _ = writeln!(s, "\nNotes:\n");
            for (e, note) in &res.notes {
                let _ = writeln!(s, "- {}: {note}", e.title());
            }
        }
    }
    s
}

/// The machine with its fsync floor, in the JSON shape of issue 4.
pub fn machine_json(m: &sysinfo::Machine, floor: &sysinfo::Floor) -> serde_json::Value {
    let mut v = serde_json::to_value(m).unwrap_or_else(|_| json!({}));
    if let Some(o) = v.as_object_mut() {
        o.insert(
            "fsync_floor_us".into(),
            json!({"p50": floor.p50_us, "p99": floor.p99_us, "samples": floor.samples}),
        );
    }
    v
}

fn to_json(out: &Outcome, args: &BenchArgs) -> serde_json::Value {
    let suites: serde_json::Map<String, serde_json::Value> = out
        .suites
        .iter()
        .map(|(n, r)| (n.to_string(), r.json(&out.engines)))
        .collect();
    let rows: Vec<serde_json::Value> = out
        .suites
        .iter()
        .flat_map(|(n, r)| r.flat_rows(n, &out.engines))
        .collect();
    let configs: serde_json::Map<String, serde_json::Value> = out
        .engines
        .iter()
        .map(|e| (e.name().to_string(), json!(e.config())))
        .collect();
    json!({
        "machine": machine_json(&out.machine, &out.floor),
        "rows": rows,
        "fsync_floor": out.floor,
        "fsync_floor_end": out.floor_end,
        "repeat": out.repeat,
        "quick": args.common.quick,
        "counts": {
            "t_keys": out.counts.t_keys,
            "t5_ops": out.counts.t5_ops,
            "t5c_threads": out.counts.t5c_threads,
            "t6_txns": out.counts.t6_txns,
            "t6_puts": out.counts.t6_puts,
            "t7_puts": out.counts.t7_puts,
            "t7_as_published": out.counts.t7_as_published,
            "r_n": out.counts.r_n,
            "modes": out.counts.modes.iter().map(|m| m.label()).collect::<Vec<_>>(),
            "t_values": out.counts.t_values,
        },
        "seeds": {
            "t3_lcg": suites::SEED_T3,
            "t5_lcg": suites::SEED_T5,
            "t7_bytes": suites::SEED_T7,
            "r_data": suites::SEED_R,
        },
        "engines": configs,
        "bbolt": match &out.bbolt {
            None => json!({"ran": false, "why": "not selected"}),
            Some(Ok(v)) => json!({"ran": true, "version": v}),
            Some(Err(why)) => json!({"ran": false, "why": why}),
        },
        "suites": suites,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A quick T suite on CairnDB alone: every row yields a positive figure.
    #[test]
    fn quick_t_suite_on_cairn() {
        let dir = tempfile::tempdir().unwrap();
        let args = BenchArgs {
            common: CommonArgs {
                dir: Some(dir.path().to_path_buf()),
                engines: Some(vec!["cairn".into()]),
                quick: true,
                fsync_samples: 20,
                no_progress: true,
                ..CommonArgs::default()
            },
            ..BenchArgs::default()
        };
        let out = execute(&args, false).unwrap();
        let (_, t) = &out.suites[0];
        assert!(t.notes.is_empty(), "notes: {:?}", t.notes);
        assert!(t.rows.len() >= 30, "only {} rows", t.rows.len());
        for row in &t.rows {
            let v = t.median(&row.id, EngineKind::Cairn);
            assert!(
                v.is_some_and(|v| v.is_finite() && v > 0.0),
                "row {} has {v:?}",
                row.id
            );
        }
        // Durable single-commit rows flush at least once per... commit group.
        assert!(t.cpf.get("T6/D").is_some_and(|v| v[0] > 0.0));
        let text = render(&out, &args);
        assert!(text.contains("| T1 10K puts ascending"), "{text}");
    }

    #[test]
    fn engine_selection() {
        let args = CommonArgs {
            engines: Some(vec!["CairnDB".into()]),
            ..CommonArgs::default()
        };
        assert_eq!(select_engines(&args).unwrap(), vec![EngineKind::Cairn]);
        let args = CommonArgs {
            engines: Some(vec!["nope".into()]),
            ..CommonArgs::default()
        };
        assert!(select_engines(&args).is_err());
    }
}
