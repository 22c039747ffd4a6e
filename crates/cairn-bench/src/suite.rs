//! What every suite shares: the bench directory, the engine selection, the
//! header of the report (machine, fsync floor, repeats) and the machine as
//! JSON.

use crate::args::CommonArgs;
use crate::engine::{EngineKind, Res};
use crate::sysinfo;
use serde_json::json;

/// The directory the benchmark databases go in: `--dir` (created if
/// missing), else a fresh temporary directory named `prefix…`, removed when
/// the returned guard drops.
pub fn bench_dir(
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
