//! The KV suites (`cairn bench kv`): suite T, the Thunder vs bbolt table,
//! and suite R, the redb comparison suite (workloads in `kv/workloads.rs`,
//! bbolt through its Go program in `kv/bbolt.rs`).

pub mod bbolt;
pub mod workloads;

use std::io::Write;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::json;

use crate::args::{BenchArgs, SuiteSel};
use crate::engine::{self, EngineKind, Res};
use crate::report::SuiteResults;
use crate::suite::{bench_dir, machine_json, render_header, select_engines};
use crate::svg;
use crate::sysinfo;
use workloads::{Counts, RData, Run, TData};

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
pub fn run(args: BenchArgs, w: &mut dyn Write) -> Result<(), Box<dyn std::error::Error>> {
    let progress = !args.common.no_progress;
    let out = execute(&args, progress).map_err(|e| -> Box<dyn std::error::Error> { e })?;
    let text = render(&out, &args);
    w.write_all(text.as_bytes())?;
    w.flush()?;
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
            workloads::T_STEPS,
            |r| workloads::run_t(r, &data),
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
            workloads::R_STEPS,
            |r| workloads::run_r(r, &data),
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
        workloads::SEED_T3,
        workloads::SEED_T5,
        workloads::SEED_T7,
        if c.t7_as_published {
            " (unused: --as-published uses i % 256)"
        } else {
            ""
        },
        workloads::SEED_R
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
            "t3_lcg": workloads::SEED_T3,
            "t5_lcg": workloads::SEED_T5,
            "t7_bytes": workloads::SEED_T7,
            "r_data": workloads::SEED_R,
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
    use crate::args::CommonArgs;

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
}
