//! bbolt through the Go program in `crates/cairn-bench/bbolt/` (suite T only).
//!
//! The program is built with `go build` into the bench directory at run
//! time (modules from the Go module proxy, pinned by the committed
//! `go.sum`), reads the workload description as JSON on standard input,
//! regenerates the same keys and values (it reports a digest of them, which
//! must equal ours), and prints one figure per row as JSON. Without `go` on
//! the PATH, or without the `bbolt` sources next to this build, the
//! engine is skipped with the reason printed.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::Deserialize;
use serde_json::json;

use super::workloads::{Counts, Op, TData, SEED_T3, SEED_T5, SEED_T7};
use crate::engine::{EngineKind, Res};
use crate::report::{Row, SuiteResults, Unit};

/// The Go sources (`crates/cairn-bench/bbolt` of the repository this binary
/// was built from).
pub fn source_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("bbolt")
}

/// Builds the Go program into `base`; `Err` holds why bbolt is skipped.
pub fn build(base: &Path) -> Result<PathBuf, String> {
    let src = source_dir();
    if !src.join("go.mod").is_file() {
        return Err(format!(
            "the Go harness sources are not at {} (crates/cairn-bench/bbolt of the repository)",
            src.display()
        ));
    }
    match Command::new("go").arg("version").output() {
        Ok(o) if o.status.success() => {}
        Ok(_) | Err(_) => return Err("`go` was not found on the PATH".into()),
    }
    let bin = base.join("bbolt-bench");
    let out = Command::new("go")
        .args(["build", "-o"])
        .arg(&bin)
        .arg(".")
        .current_dir(&src)
        .env("GOTOOLCHAIN", "local")
        .env("GOFLAGS", "-mod=readonly")
        .output()
        .map_err(|e| format!("running `go build` failed: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(6).collect();
        return Err(format!(
            "`go build` in {} failed: {}",
            src.display(),
            tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
        ));
    }
    Ok(bin)
}

#[derive(Debug, Deserialize)]
struct GoRow {
    id: String,
    label: String,
    unit: String,
    value: f64,
}

#[derive(Debug, Deserialize)]
struct GoResult {
    version: String,
    rows: Vec<GoRow>,
    data_digest: u64,
}

fn fnv(mut h: u64, b: &[u8]) -> u64 {
    for &c in b {
        h ^= c as u64;
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h
}

/// FNV-1a over the T3 keys, the T5 operations and the T7 values, as the Go
/// program computes it over its own copy.
pub fn digest(d: &TData) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for i in 0..d.random_keys.len() {
        h = fnv(h, d.random_keys.get(i));
    }
    for op in &d.ops {
        let (flag, i) = match *op {
            Op::Read(i) => (1u8, i),
            Op::Write(i) => (0u8, i),
        };
        let mut rec = [0u8; 9];
        rec[0] = flag;
        rec[1..].copy_from_slice(&(i as u64).to_le_bytes());
        h = fnv(h, &rec);
    }
    for (_, _, vals) in &d.large {
        for i in 0..vals.len() {
            h = fnv(h, vals.get(i));
        }
    }
    h
}

fn unit(s: &str) -> Option<Unit> {
    Some(match s {
        "puts/s" => Unit::PerSec("puts"),
        "gets/s" => Unit::PerSec("gets"),
        "entries/s" => Unit::PerSec("entries"),
        "ops/s" => Unit::PerSec("ops"),
        "txns/s" => Unit::PerSec("txns"),
        "MiB/s" => Unit::MibPerSec,
        "µs" => Unit::Micros,
        "×" => Unit::Factor,
        _ => return None,
    })
}

/// Runs suite T once on bbolt in the fresh directory `dir` and records its
/// figures in `res`; returns the bbolt version the program reports.
pub fn run_t(bin: &Path, dir: &Path, d: &TData, res: &mut SuiteResults) -> Res<String> {
    let c: &Counts = &d.counts;
    let workload = json!({
        "dir": dir,
        "t_keys": c.t_keys,
        "t5_ops": c.t5_ops,
        "t5c_threads": c.t5c_threads,
        "t6_txns": c.t6_txns,
        "t6_puts": c.t6_puts,
        "t7_puts": c.t7_puts,
        "t7_as_published": c.t7_as_published,
        "values": c.t_values,
        "modes": c.modes.iter().map(|m| m.label()).collect::<Vec<_>>(),
        "seed_t3": SEED_T3,
        "seed_t5": SEED_T5,
        "seed_t7": SEED_T7,
    });
    std::fs::create_dir_all(dir)?;
    let mut child = Command::new(bin)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(workload.to_string().as_bytes())?;
    }
    let out = child.wait_with_output()?;
    let _ = std::fs::remove_dir_all(dir);
    if !out.status.success() {
        return Err(format!(
            "the Go harness failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )
        .into());
    }
    let r: GoResult = serde_json::from_slice(&out.stdout)?;
    let want = digest(d);
    if r.data_digest != want {
        return Err(format!(
            "the Go harness generated different data (digest {:#x}, ours {want:#x}); \
             its figures are not comparable",
            r.data_digest
        )
        .into());
    }
    for g in &r.rows {
        let row = match res.rows.iter().find(|row| row.id == g.id) {
            Some(row) => row.clone(),
            None => Row {
                id: g.id.clone(),
                label: g.label.clone(),
                unit: unit(&g.unit).ok_or_else(|| format!("unknown unit {:?}", g.unit))?,
                show_cpf: false,
            },
        };
        res.record(&row, EngineKind::Bbolt, g.value);
    }
    Ok(r.version)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Go program runs a tiny suite T, generates the same data and
    /// reports every row the Rust engines report (skipped without `go`).
    #[test]
    fn go_harness_matches() {
        let dir = tempfile::tempdir().unwrap();
        let bin = match build(dir.path()) {
            Ok(b) => b,
            Err(why) => {
                eprintln!("bbolt skipped: {why}");
                return;
            }
        };
        let mut counts = Counts::quick(None);
        counts.t_keys = 1_000;
        counts.t5_ops = 200;
        counts.t6_txns = 10;
        counts.t7_puts = 2;
        let d = TData::new(&counts);
        let mut res = SuiteResults::default();
        run_t(&bin, &dir.path().join("t"), &d, &mut res).unwrap();
        for id in [
            "T1/27/D",
            "T3/100",
            "T5c/N/ratio",
            "T6/D",
            "T7/1048576/read",
        ] {
            let v = res.median(id, EngineKind::Bbolt);
            assert!(v.is_some_and(|v| v > 0.0), "{id}: {v:?}");
        }
        assert_eq!(res.rows.len(), 38);
    }
}
