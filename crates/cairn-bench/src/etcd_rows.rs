//! `cairn bench kv --backend etcd://…` (feature `etcd`): the KV rows that
//! make sense at a cluster's speed, on the cluster and on the embedded
//! engine side by side, through the same [`Kv`] trait — single-key
//! durable commits, single-key gets (one read transaction each), a batch
//! of gets in one read transaction, short range reads and a scan of the
//! table. Small counts, so a run takes seconds. The header names the
//! cluster's endpoints and members, its fsync mode and its costs
//! (`etcd_costs.rs`: network round trips, etcd's fsync latencies).

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use serde_json::{json, Value};

use crate::args::BenchArgs;
use crate::data::{Flat, Rng};
use crate::engine::{Kv, Mode, Res};
use crate::etcd_costs::{Costs, Probe};
use crate::peers::cairn_kv::Cairn;
use crate::peers::etcd_kv::Etcd;

/// Single-key commits and single-key read transactions timed.
const OPS: usize = 100;
/// Keys in the table for the read rows (written in batches first).
const KEYS: usize = 1000;
/// Keys per loading commit (under etcd's 128 operations per `Txn`).
const LOAD_BATCH: usize = 100;
/// Range reads of [`RANGE_PER`] entries each.
const RANGES: usize = 20;
const RANGE_PER: usize = 10;

/// One row's figures on one engine: per-operation latencies in µs.
pub(crate) struct Figures {
    pub(crate) median_us: f64,
    pub(crate) p90_us: f64,
    pub(crate) ops_per_s: f64,
}

pub(crate) fn figures(mut us: Vec<f64>) -> Figures {
    us.sort_by(f64::total_cmp);
    let total: f64 = us.iter().sum();
    Figures {
        median_us: crate::sysinfo::percentile(&us, 0.5),
        p90_us: crate::sysinfo::percentile(&us, 0.9),
        ops_per_s: if total > 0.0 {
            us.len() as f64 * 1e6 / total
        } else {
            0.0
        },
    }
}

pub(crate) fn time(mut f: impl FnMut(usize) -> Res<()>, n: usize) -> Res<Figures> {
    let mut us = Vec::with_capacity(n);
    for i in 0..n {
        let t = Instant::now();
        f(i)?;
        us.push(t.elapsed().as_secs_f64() * 1e6);
    }
    Ok(figures(us))
}

/// The rows on one engine, in order.
fn rows(kv: &dyn Kv, mode: Mode) -> Res<Vec<(&'static str, Figures)>> {
    let mut rng = Rng::new(0xE7CD);
    let keys = Flat::random(&mut rng, 16, KEYS);
    let vals = Flat::random(&mut rng, 100, KEYS);
    let fresh = Flat::random(&mut rng, 16, OPS);
    let mut out = Vec::new();
    for start in (0..KEYS).step_by(LOAD_BATCH) {
        kv.put_batch(&keys, &vals, start..(start + LOAD_BATCH).min(KEYS), mode)?;
    }
    out.push((
        "single-key commit (durable, 100 B value)",
        time(|i| kv.put_batch(&fresh, &vals, i..i + 1, mode), OPS)?,
    ));
    out.push((
        "single-key get (one read transaction each)",
        time(
            |i| {
                let j = (i * 37) % KEYS;
                let t = kv.get_each(&keys, j..j + 1)?;
                if t.found != 1 {
                    return Err(format!("get of key {j} found {}", t.found).into());
                }
                Ok(())
            },
            OPS,
        )?,
    ));
    let batch = time(
        |i| {
            let j = (i * 100) % (KEYS - 100);
            kv.get_each(&keys, j..j + 100).map(|_| ())
        },
        10,
    )?;
    out.push((
        "100 gets in one read transaction (per get)",
        per(batch, 100.0),
    ));
    let mut sorted: Vec<Vec<u8>> = (0..RANGES).map(|i| keys.get(i * 41).to_vec()).collect();
    sorted.sort();
    let starts = Flat::from_fn(RANGES, |i| sorted[i].clone());
    out.push((
        "range read of 10 entries (per range)",
        per(
            time(|_| kv.range_reads(&starts, RANGE_PER).map(|_| ()), 3)?,
            RANGES as f64,
        ),
    ));
    let total = KEYS + OPS;
    out.push((
        "scan of the table, 1,100 entries (per entry)",
        per(
            time(
                |_| {
                    let t = kv.scan()?;
                    if t.found != total as u64 {
                        return Err(format!("scan found {} of {total}", t.found).into());
                    }
                    Ok(())
                },
                3,
            )?,
            total as f64,
        ),
    ));
    Ok(out)
}

/// Figures of a timed batch, per item of the batch.
fn per(f: Figures, n: f64) -> Figures {
    Figures {
        median_us: f.median_us / n,
        p90_us: f.p90_us / n,
        ops_per_s: f.ops_per_s * n,
    }
}

pub(crate) fn fmt_us(us: f64) -> String {
    if us >= 1000.0 {
        format!("{:.2} ms", us / 1000.0)
    } else {
        format!("{us:.1} µs")
    }
}

/// Runs the rows on the embedded engine (a temporary file, durable
/// commits) and on the cluster of `url`, and prints one table (and
/// `--json FILE`).
pub fn run(args: &BenchArgs, url: &str, w: &mut dyn Write) -> Res<()> {
    let dir = tempfile::tempdir()?;
    let etcd = Etcd::connect(url)?;
    let probe = Probe::start(etcd.db())?;
    let cairn = Cairn::open(dir.path())?;
    let local = rows(&cairn, Mode::D)?;
    let remote = rows(&etcd, Mode::D);
    let cleaned = etcd.clean();
    let remote = remote?;
    cleaned?;
    let costs = probe.finish();
    header(w, "kv", etcd.db(), dir.path(), &costs)?;
    writeln!(w)?;
    writeln!(
        w,
        "| row | cairn median (p90) | etcd median (p90) | cairn ops/s | etcd ops/s | etcd / cairn |"
    )?;
    writeln!(w, "|---|---|---|---|---|---|")?;
    let mut json_rows = Vec::new();
    for ((name, c), (_, e)) in local.iter().zip(&remote) {
        writeln!(
            w,
            "| {name} | {} ({}) | {} ({}) | {:.0} | {:.0} | {:.1}× slower |",
            fmt_us(c.median_us),
            fmt_us(c.p90_us),
            fmt_us(e.median_us),
            fmt_us(e.p90_us),
            c.ops_per_s,
            e.ops_per_s,
            e.median_us / c.median_us.max(1e-9)
        )?;
        json_rows.push(row_json(name, c, e, 1.0));
    }
    write_json(
        args.common.json.as_deref(),
        "kv",
        etcd.db(),
        &costs,
        json_rows,
    )
}

/// A row for `--json FILE`: each engine's figures (`per_op`: the items
/// one operation handles, for the items per second).
pub(crate) fn row_json(name: &str, cairn: &Figures, etcd: &Figures, per_op: f64) -> Value {
    let figures = |f: &Figures| {
        json!({
            "median_us": f.median_us,
            "p90_us": f.p90_us,
            "items_per_s": f.ops_per_s * per_op,
        })
    };
    json!({
        "row": name,
        "cairn": figures(cairn),
        "etcd": figures(etcd),
        "etcd_over_cairn": etcd.median_us / cairn.median_us.max(1e-9),
    })
}

/// Writes `--json FILE` of a `--backend etcd://…` run: the header's
/// figures (the cluster's costs among them) and the rows.
pub(crate) fn write_json(
    path: Option<&Path>,
    what: &str,
    db: &cairndb_etcd::EtcdDatabase,
    costs: &Costs,
    rows: Vec<Value>,
) -> Res<()> {
    let Some(path) = path else {
        return Ok(());
    };
    let report = json!({
        "bench": what,
        "backend": "etcd",
        "endpoints": db.endpoints(),
        "cluster_costs": costs.to_json(),
        "rows": rows,
    });
    std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
    Ok(())
}

/// The header of a `--backend etcd://…` run (`what`: kv, events, docs):
/// the machine, the cluster's endpoints, members, fsync mode and costs
/// (network round trips, measured before the rows; etcd's fsync and
/// commit latencies during them), the embedded engine's file.
pub(crate) fn header(
    w: &mut dyn Write,
    what: &str,
    db: &cairndb_etcd::EtcdDatabase,
    dir: &std::path::Path,
    costs: &Costs,
) -> Res<()> {
    let machine = crate::sysinfo::machine(dir);
    let members = db.members()?;
    writeln!(w, "# cairn bench {what} --backend etcd")?;
    writeln!(w)?;
    writeln!(
        w,
        "machine: {} ({} cores, {:.1} GiB RAM), kernel {}, {} on {}",
        machine.cpu,
        machine.cores,
        machine.ram_gib,
        machine.kernel,
        machine.filesystem,
        machine.device
    )?;
    writeln!(w, "etcd endpoints: {}", db.endpoints().join(", "))?;
    writeln!(
        w,
        "etcd members: {} ({})",
        members.len(),
        members
            .iter()
            .map(|(name, urls)| format!("{name} {}", urls.join(" ")))
            .collect::<Vec<_>>()
            .join(", ")
    )?;
    writeln!(
        w,
        "etcd fsync: each commit is fsynced to the WAL of a quorum before it is acknowledged \
         (etcd's default; members started with --unsafe-no-fsync skip it, which the client \
         API does not report)"
    )?;
    costs.write(w)?;
    writeln!(
        w,
        "embedded: CairnDB file in {} (durable commits: an fdatasync each)",
        dir.display()
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairndb_etcd::testing::cluster_or_skip;

    #[test]
    fn the_etcd_rows_run_beside_the_embedded_engine() {
        let Some(cluster) =
            cluster_or_skip("the_etcd_rows_run_beside_the_embedded_engine").unwrap()
        else {
            return;
        };
        let url = cluster.url("bench");
        let dir = tempfile::tempdir().unwrap();
        let json_path = dir.path().join("etcd-kv.json");
        let mut args = BenchArgs::default();
        args.common.json = Some(json_path.clone());
        let mut out = Vec::new();
        run(&args, &url, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        eprintln!("{text}");
        assert!(text.contains("etcd members: 3 ("), "{text}");
        assert!(text.contains("etcd fsync: "), "{text}");
        // The cluster's costs, in the header (before the table): the
        // network's round trips, and each member's fsyncs during the rows
        // (the harness's members serve /metrics on their client URLs).
        let table = text.find("| row |").unwrap();
        let network = text
            .find("etcd network: a get of a missing key (200 each")
            .unwrap();
        assert!(network < table, "{text}");
        for label in [
            "etcd WAL fsync during the run",
            "etcd backend commit during the run",
        ] {
            let line = text.lines().find(|l| l.starts_with(label)).unwrap();
            assert_eq!(line.matches(" mean ").count(), 3, "{line}");
            assert!(!line.contains("not reported"), "{line}");
        }
        let j: Value = serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
        let costs = &j["cluster_costs"];
        assert!(
            costs["linearizable_get"]["p99_us"].as_f64().unwrap() > 0.0,
            "{j}"
        );
        assert!(
            costs["serializable_get"]["p50_us"].as_f64().unwrap() > 0.0,
            "{j}"
        );
        let fsync = costs["fsync"].as_array().unwrap();
        assert_eq!(fsync.len(), 3, "{j}");
        for e in fsync {
            let wal = &e["etcd_disk_wal_fsync_duration_seconds"];
            assert!(wal["count"].as_f64().unwrap() > 0.0, "{j}");
            assert!(wal["mean_us"].as_f64().unwrap() > 0.0, "{j}");
        }
        assert_eq!(j["rows"].as_array().unwrap().len(), 5, "{j}");
        let endpoints = cluster.members().iter().map(|m| m.client_address());
        for e in endpoints {
            assert!(text.contains(&format!("http://{e}")), "{text}");
        }
        let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("| ")).collect();
        assert_eq!(rows.len(), 6, "{text}");
        assert!(rows[1].starts_with("| single-key commit"), "{text}");
        // The run cleans up after itself, and a second run on the same
        // prefix is accepted; a prefix holding `kv` is refused.
        let db = cairndb_etcd::EtcdDatabase::connect(&url).unwrap();
        assert!(db.begin_read().unwrap().list_tables().unwrap().is_empty());
        db.run_in_transaction(|tx| tx.open_table("kv")?.insert(b"a", b"b"))
            .unwrap();
        let e = run(&BenchArgs::default(), &url, &mut Vec::new()).unwrap_err();
        assert!(e.to_string().contains("already holds a table"), "{e}");
    }
}
