//! The KV suites (`cairn bench kv`): suite T, the Thunder vs bbolt table,
//! and suite R, the redb comparison suite (workloads in `kv/workloads.rs`,
//! bbolt through its Go program in `kv/bbolt.rs`).

pub mod bbolt;
pub mod procs;
pub mod workloads;

use std::borrow::Cow;

use serde_json::{json, Value};

use crate::args::{BenchArgs, SuiteSel};
use crate::engine::{EngineKind, Res};
use crate::report::SuiteResults;
use crate::suite::{
    each_engine, json_report, modes_line, progress_bar, render_header, select_engines, Chart,
    Setting, Suite,
};
use workloads::{Counts, RData, Run, TData};

/// Everything one `cairn bench kv` measured.
pub struct Outcome {
    pub engines: Vec<EngineKind>,
    pub setting: Setting,
    pub counts: Counts,
    pub suites: Vec<(&'static str, SuiteResults)>,
    /// bbolt: the version it ran, or why it was skipped (`None`: not
    /// selected).
    pub bbolt: Option<Result<String, String>>,
    /// The storage seam's cost on CairnDB (with suite T, when CairnDB runs).
    pub seam: Option<Vec<crate::seam_cost::SeamRow>>,
}

fn suite_title(name: &str, c: &Counts) -> String {
    match name {
        "T" => "Suite T — the Thunder vs bbolt table".to_string(),
        _ => format!("Suite R — the redb comparison suite (N = {})", c.r_n),
    }
}

impl Suite for BenchArgs {
    type Outcome = Outcome;

    /// Runs the selected suites and returns every figure.
    fn execute(&self, progress: bool) -> Res<Outcome> {
        let args = self;
        let common = &args.common;
        let engines = select_engines(common)?;
        if args.writers == 0 {
            return Err("--writers must be at least 1".into());
        }
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
        let (setting, (suites, bbolt, seam)) =
            Setting::measure(common, "cairn-bench-", |base, repeat| {
                let (suites, bbolt) = run_suites(args, &engines, &counts, base, repeat, progress)?;
                let with_t = matches!(args.suite, SuiteSel::T | SuiteSel::All);
                let seam = if with_t && engines.contains(&EngineKind::Cairn) {
                    let dir = base.join("seam-cost");
                    let rows = crate::seam_cost::run(&dir);
                    let _ = std::fs::remove_dir_all(&dir);
                    Some(rows?)
                } else {
                    None
                };
                Ok((suites, bbolt, seam))
            })?;
        Ok(Outcome {
            engines,
            setting,
            counts,
            suites,
            bbolt,
            seam,
        })
    }

    /// The text report: header, configurations, one table per suite.
    fn render(&self, out: &Outcome) -> String {
        let args = self;
        use std::fmt::Write as _;
        let mut s = String::new();
        let c = &out.counts;
        let seeds = format!(
            "Seeds: T3 LCG {}, T5 LCG {}, T7 bytes {:#x}{}, R data {:#x} (SplitMix64)",
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
        let modes = modes_line(
            None,
            "Reads touch each value's length, one byte per 4 KiB and its last byte (zero-copy \
             engines are not charged a copy). ",
        );
        let ran = format!(
            "Ran: modes {} (--durability); suite T values of {} bytes (--values)",
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
        let mut engines: Vec<String> = out
            .engines
            .iter()
            .filter(|e| !e.external() || matches!(out.bbolt, Some(Ok(_))))
            .map(|e| format!("**{}**: {}", e.title(), e.config()))
            .collect();
        let missing: Vec<&str> = EngineKind::ALL
            .iter()
            .filter(|e| !out.engines.contains(e) && !e.external())
            .map(|e| e.title())
            .collect();
        if !missing.is_empty() {
            engines.push(format!(
                "Not run: {} (not selected or not compiled in: `--features peers`, \
                 `--features rocksdb`)",
                missing.join(", ")
            ));
        }
        engines.push(match &out.bbolt {
            None => "Not run: bbolt (not selected)".to_string(),
            Some(Ok(v)) => format!("bbolt ran as {v}"),
            Some(Err(why)) => format!("Not run: bbolt — {why}"),
        });
        render_header(
            &mut s,
            "kv",
            &out.setting,
            &args.common,
            &[seeds, modes, ran],
            &engines,
        );
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
            s.push_str(&res.notes_markdown());
            if let (true, Some(seam)) = (*name == "T", &out.seam) {
                s.push_str(&crate::seam_cost::render(seam));
            }
        }
        s
    }

    fn to_json(&self, out: &Outcome) -> Value {
        let args = self;
        let suites: serde_json::Map<String, Value> = out
            .suites
            .iter()
            .map(|(n, r)| (n.to_string(), r.json(&out.engines)))
            .collect();
        let rows: Vec<Value> = out
            .suites
            .iter()
            .flat_map(|(n, r)| r.flat_rows(n, &out.engines))
            .collect();
        let configs: serde_json::Map<String, Value> = out
            .engines
            .iter()
            .map(|e| (e.name().to_string(), json!(e.config())))
            .collect();
        let c = &out.counts;
        let rest = json!({
            "counts": {
                "t_keys": c.t_keys,
                "t5_ops": c.t5_ops,
                "t5c_threads": c.t5c_threads,
                "t6_txns": c.t6_txns,
                "t6_puts": c.t6_puts,
                "t7_puts": c.t7_puts,
                "t7_as_published": c.t7_as_published,
                "r_n": c.r_n,
                "modes": c.modes.iter().map(|m| m.label()).collect::<Vec<_>>(),
                "t_values": c.t_values,
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
            "seam": out.seam.as_deref().map(crate::seam_cost::to_json),
        });
        json_report(&out.setting, &args.common, rows, rest)
    }

    fn charts<'a>(&self, out: &'a Outcome) -> Vec<Chart<'a>> {
        out.suites
            .iter()
            .map(|(name, res)| Chart {
                name,
                title: suite_title(name, &out.counts),
                res: Cow::Borrowed(res),
                engines: &out.engines,
            })
            .collect()
    }

    fn common(&self) -> &crate::args::CommonArgs {
        &self.common
    }
}

/// Suites T (with bbolt) and R as selected, in the bench directory `base`.
#[allow(clippy::type_complexity)]
fn run_suites(
    args: &BenchArgs,
    engines: &[EngineKind],
    counts: &Counts,
    base: &std::path::Path,
    repeat: usize,
    progress: bool,
) -> Res<(
    Vec<(&'static str, SuiteResults)>,
    Option<Result<String, String>>,
)> {
    let base = base.to_path_buf();
    let want_t = matches!(args.suite, SuiteSel::T | SuiteSel::All);
    let want_r = matches!(args.suite, SuiteSel::R | SuiteSel::All);
    let native: Vec<EngineKind> = engines.iter().copied().filter(|e| !e.external()).collect();
    let mut suites = Vec::new();
    let mut bbolt_status = None;
    if want_t {
        let data = TData::new(counts);
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
        let data = RData::new(counts);
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
    Ok((suites, bbolt_status))
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
    let pb = progress_bar(
        progress,
        None,
        "suite T [{elapsed_precise}] {spinner} {wide_msg}",
        true,
    );
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
    let pb = progress_bar(
        progress,
        Some(steps * engines.len() as u64 * repeat as u64),
        &format!("suite {name} [{{elapsed_precise}}] {{bar:30}} {{pos}}/{{len}} {{wide_msg}}"),
        false,
    );
    let mut res = SuiteResults::default();
    let prefix = name.to_lowercase();
    each_engine(
        engines,
        repeat,
        base,
        &prefix,
        "",
        &pb,
        &mut res,
        |kind, _, root, res| {
            let pos = pb.position();
            let outcome = body(&mut Run {
                kind,
                root,
                res,
                pb: &pb,
            });
            pb.set_position(pos + steps);
            outcome
        },
    );
    pb.finish_and_clear();
    Ok(res)
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
        let out = args.execute(false).unwrap();
        let (_, t) = &out.suites[0];
        assert!(t.notes.is_empty(), "notes: {:?}", t.notes);
        assert!(t.rows.len() >= 30, "only {} rows", t.rows.len());
        for row in &t.rows {
            let v = t.median(&row.id, EngineKind::Cairn);
            let floor = if row.id.ends_with("-peak-rss") {
                0.0
            } else {
                f64::MIN_POSITIVE
            };
            assert!(
                v.is_some_and(|v| v.is_finite() && v >= floor),
                "row {} has {v:?}",
                row.id
            );
        }
        // Durable single-commit rows flush at least once per... commit group.
        assert!(t.cpf.get("T6/D").is_some_and(|v| v[0] > 0.0));
        let text = args.render(&out);
        assert!(text.contains("| T1 10K puts ascending"), "{text}");
    }
}
