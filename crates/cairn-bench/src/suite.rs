//! What every suite shares: the one [`run`] that drives any [`Suite`]
//! (execute, print the report, write the JSON and the charts), the bench
//! directory and the [`Setting`] measured around the rows (machine, fsync
//! floor, repeats), the engine selection, and the opening of every report
//! and of every JSON file.

use std::borrow::Cow;
use std::error::Error;
use std::fmt::Write as _;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::{json, Value};

use crate::args::CommonArgs;
use crate::engine::{EngineKind, Mode, Res, SPACE_NOTE};
use crate::report::{Row, SuiteResults, Unit};
use crate::svg;
use crate::sysinfo;

/// One suite of `cairn bench` (kv, events, docs), as [`run`] drives it.
/// Implemented by each suite's options.
pub trait Suite {
    /// Everything one run measured.
    type Outcome;
    /// Runs the suite and returns every figure.
    fn execute(&self, progress: bool) -> Res<Self::Outcome>;
    /// The text report (Markdown).
    fn render(&self, out: &Self::Outcome) -> String;
    /// Every figure, for `--json FILE`.
    fn to_json(&self, out: &Self::Outcome) -> Value;
    /// The bar charts `--svg DIR` writes.
    fn charts<'a>(&self, out: &'a Self::Outcome) -> Vec<Chart<'a>>;
    /// The options every suite has.
    fn common(&self) -> &CommonArgs;
}

/// One chart: `suite-<name>.svg`.
pub struct Chart<'a> {
    pub name: &'static str,
    pub title: String,
    pub res: Cow<'a, SuiteResults>,
    pub engines: &'a [EngineKind],
}

/// Runs a suite: the report goes to `w`, then `--json` and `--svg` write
/// their files (each named on standard error).
pub fn run<S: Suite>(suite: &S, w: &mut dyn Write) -> Result<(), Box<dyn Error>> {
    let common = suite.common();
    let out = suite
        .execute(!common.no_progress)
        .map_err(|e| -> Box<dyn Error> { e })?;
    w.write_all(suite.render(&out).as_bytes())?;
    w.flush()?;
    if let Some(path) = &common.json {
        std::fs::write(path, serde_json::to_string_pretty(&suite.to_json(&out))?)?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(dir) = &common.svg {
        for c in suite.charts(&out) {
            let p = svg::write_suite(dir, c.name, &c.title, &c.res, c.engines)
                .map_err(|e| -> Box<dyn Error> { e })?;
            eprintln!("wrote {}", p.display());
        }
    }
    Ok(())
}

/// What every suite measures around its rows.
pub struct Setting {
    pub machine: sysinfo::Machine,
    /// The fsync floor before the rows.
    pub floor: sysinfo::Floor,
    /// The fsync floor measured again after the suites (drift check).
    pub floor_end: sysinfo::Floor,
    /// Runs per row (`--repeat`).
    pub repeat: usize,
}

impl Setting {
    /// Runs `body(directory, repeats)` in the bench directory (see
    /// [`bench_dir`]; `prefix` names a temporary one) between two
    /// measurements of the fsync floor.
    pub fn measure<T>(
        common: &CommonArgs,
        prefix: &str,
        body: impl FnOnce(&Path, usize) -> Res<T>,
    ) -> Res<(Setting, T)> {
        let repeat = common
            .repeat
            .unwrap_or(if common.quick { 1 } else { 3 })
            .max(1);
        let (_tmp, base) = bench_dir(common, prefix)?;
        let machine = sysinfo::machine(&base);
        let floor = sysinfo::fsync_floor(&base, common.fsync_samples.max(1))?;
        let t = body(&base, repeat)?;
        let floor_end = sysinfo::fsync_floor(&base, common.fsync_samples.max(1))?;
        let setting = Setting {
            machine,
            floor,
            floor_end,
            repeat,
        };
        Ok((setting, t))
    }
}

/// A progress bar on standard error in `template`'s style (hidden without
/// `progress`), redrawn every 200 ms when `tick`.
pub fn progress_bar(progress: bool, len: Option<u64>, template: &str, tick: bool) -> ProgressBar {
    if !progress {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::with_draw_target(len, ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(template) {
        pb.set_style(style);
    }
    if tick {
        pb.enable_steady_tick(Duration::from_millis(200));
    }
    pb
}

/// Runs `body(engine, repeat, directory, results)` for each repeat (from 0)
/// and each engine, in a fresh directory `base/<prefix>-<engine>-<repeat>`
/// removed afterwards. An engine that fails is noted (`<what>repeat N:
/// stopped: …`, on the progress bar too) and the others go on.
#[allow(clippy::too_many_arguments)]
pub fn each_engine(
    engines: &[EngineKind],
    repeat: usize,
    base: &Path,
    prefix: &str,
    what: &str,
    pb: &ProgressBar,
    res: &mut SuiteResults,
    mut body: impl FnMut(EngineKind, usize, PathBuf, &mut SuiteResults) -> Res<()>,
) {
    for rep in 0..repeat {
        for &kind in engines {
            let root = base.join(format!("{prefix}-{}-{rep}", kind.name()));
            let peak = sysinfo::PeakRss::start();
            let outcome = body(kind, rep, root.clone(), res);
            // The suite's id prefix: "d-tiedot" → "D-tiedot".
            let mut suite = prefix.to_string();
            if let Some(first) = suite.get_mut(..1) {
                first.make_ascii_uppercase();
            }
            record_peak(res, &suite, kind, peak);
            let _ = std::fs::remove_dir_all(&root);
            if let Err(e) = outcome {
                let msg = format!("{what}repeat {}: stopped: {e}", rep + 1);
                pb.println(format!("{}: {msg}", kind.title()));
                res.note(kind, msg);
            }
        }
    }
}

/// The row every suite ends with: how far the process's resident memory rose
/// while an engine ran its part of the suite.
/// `suite` is the id's prefix (`T`, `E`, `D-tiedot`…).
pub fn peak_rss_row(suite: &str) -> Row {
    Row {
        id: format!("{suite}-peak-rss"),
        label: "peak memory: resident set's rise during the engine's run".into(),
        unit: Unit::Mib,
        show_cpf: false,
    }
}

/// Records the rise since `peak` started (nothing where it cannot be
/// measured).
pub fn record_peak(
    res: &mut SuiteResults,
    suite: &str,
    kind: EngineKind,
    peak: Option<sysinfo::PeakRss>,
) {
    if let Some(mib) = peak.and_then(|p| p.rise_mib()) {
        res.record(&peak_rss_row(suite), kind, mib);
    }
}

/// `root/name`, emptied: the fresh directory of one engine's database.
pub fn fresh_dir(root: &Path, name: &str) -> Res<PathBuf> {
    let dir = root.join(name);
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    Ok(dir)
}

/// Closes an engine and removes its directory.
pub fn discard<E: ?Sized>(engine: Box<E>, dir: &Path) {
    drop(engine);
    let _ = std::fs::remove_dir_all(dir);
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
pub type NotRun = Vec<(EngineKind, &'static str)>;

/// The selected engines that have an adapter for a suite (`store`, e.g.
/// "event-store"), and why each other engine does not run.
pub fn engines_with_adapter(
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

pub fn select_engines(args: &CommonArgs) -> Res<Vec<EngineKind>> {
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

/// The opening of every report: `# cairn bench <name>`, the machine, the
/// fsync floor (at start and end) and the repeats, then the suite's own
/// lines (seeds, modes), then `## Engines` with a line per engine.
pub fn render_header(
    s: &mut String,
    name: &str,
    setting: &Setting,
    args: &CommonArgs,
    lines: &[String],
    engines: &[String],
) {
    let Setting {
        machine: m,
        floor,
        floor_end,
        repeat,
    } = setting;
    let _ = writeln!(s, "# cairn bench {name}\n");
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
    for line in lines {
        let _ = writeln!(s, "- {line}");
    }
    let _ = writeln!(s, "\n## Engines\n");
    for line in engines {
        let _ = writeln!(s, "- {line}");
    }
}

/// The modes line of a header: what D and N mean, which ran (`ran`), what
/// `c/f` and the ratio are, how space is measured; `reads` says how reads
/// are charged where the suite needs to.
pub fn modes_line(ran: Option<&[Mode]>, reads: &str) -> String {
    let ran = ran.map_or_else(String::new, |modes| {
        format!(
            "; ran {}",
            modes
                .iter()
                .map(|m| m.label())
                .collect::<Vec<_>>()
                .join(" and ")
        )
    });
    format!(
        "Modes: D = durable when commit returns (a device flush); N = crash-consistent, \
         not durable (no flush){ran}. `c/f` = CairnDB commits per device flush. {reads}Ratio: \
         CairnDB ÷ best peer, >1 means CairnDB leads (for µs and MiB rows, best ÷ CairnDB). \
         {SPACE_NOTE}"
    )
}

/// The engine lines of a suite that only some engines have an adapter for:
/// each engine that ran with its configuration, then each that did not and
/// why.
pub fn adapter_lines(
    engines: &[EngineKind],
    not_run: &NotRun,
    config: fn(EngineKind) -> &'static str,
) -> Vec<String> {
    let ran = engines
        .iter()
        .map(|e| format!("**{}**: {}", e.title(), config(*e)));
    let not = not_run
        .iter()
        .map(|(e, why)| format!("Not run: {} ({why})", e.title()));
    ran.chain(not).collect()
}

/// The machine with its fsync floor, in the JSON shape every suite writes.
fn machine_json(m: &sysinfo::Machine, floor: &sysinfo::Floor) -> Value {
    let mut v = serde_json::to_value(m).unwrap_or_else(|_| json!({}));
    if let Some(o) = v.as_object_mut() {
        o.insert(
            "fsync_floor_us".into(),
            json!({"p50": floor.p50_us, "p99": floor.p99_us, "samples": floor.samples}),
        );
    }
    v
}

/// A suite's JSON: the fields every suite opens with (the machine, the flat
/// `rows`, the fsync floors, the repeats, `--quick`), then the suite's own
/// (`rest`, an object).
pub fn json_report(setting: &Setting, args: &CommonArgs, rows: Vec<Value>, rest: Value) -> Value {
    let mut j = json!({
        "machine": machine_json(&setting.machine, &setting.floor),
        "rows": rows,
        "fsync_floor": setting.floor,
        "fsync_floor_end": setting.floor_end,
        "repeat": setting.repeat,
        "quick": args.quick,
    });
    if let (Some(o), Value::Object(rest)) = (j.as_object_mut(), rest) {
        o.extend(rest);
    }
    j
}

/// Engines and the reasons they did not run, as JSON.
pub fn adapters_json(
    engines: &[EngineKind],
    not_run: &NotRun,
    config: fn(EngineKind) -> &'static str,
) -> (Value, Value) {
    let configs: std::collections::BTreeMap<_, _> =
        engines.iter().map(|e| (e.name(), config(*e))).collect();
    let not_run: Vec<Value> = not_run
        .iter()
        .map(|(e, why)| json!({"engine": e.name(), "why": why}))
        .collect();
    (json!(configs), json!(not_run))
}

#[cfg(test)]
mod tests {
    use super::*;

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
