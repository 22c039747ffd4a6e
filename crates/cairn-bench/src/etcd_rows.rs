//! `cairn bench kv --backend etcd://…` (feature `etcd`): the KV rows that
//! make sense at a cluster's speed, on the cluster and on the embedded
//! engine side by side, through the same [`Kv`] trait — single-key
//! durable commits, single-key gets (one read transaction each), a batch
//! of gets in one read transaction, short range reads and a scan of the
//! table. Small counts, so a run takes seconds. The header names the
//! cluster's endpoints and members and its fsync mode.

use std::io::Write;
use std::time::Instant;

use crate::args::BenchArgs;
use crate::data::{Flat, Rng};
use crate::engine::{Kv, Mode, Res};
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
/// commits) and on the cluster of `url`, and prints one table.
pub fn run(args: &BenchArgs, url: &str, w: &mut dyn Write) -> Res<()> {
    let dir = tempfile::tempdir()?;
    let etcd = Etcd::connect(url)?;
    header(w, "kv", etcd.db(), dir.path())?;
    let _ = args;
    writeln!(w)?;
    let cairn = Cairn::open(dir.path())?;
    let local = rows(&cairn, Mode::D)?;
    let remote = rows(&etcd, Mode::D);
    let cleaned = etcd.clean();
    let remote = remote?;
    cleaned?;
    writeln!(
        w,
        "| row | cairn median (p90) | etcd median (p90) | cairn ops/s | etcd ops/s | etcd / cairn |"
    )?;
    writeln!(w, "|---|---|---|---|---|---|")?;
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
    }
    Ok(())
}

/// The header of a `--backend etcd://…` run (`what`: kv, events): the
/// machine, the cluster's endpoints, members and fsync mode, the embedded
/// engine's file.
pub(crate) fn header(
    w: &mut dyn Write,
    what: &str,
    db: &cairndb_etcd::EtcdDatabase,
    dir: &std::path::Path,
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
        let mut out = Vec::new();
        run(&BenchArgs::default(), &url, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("etcd members: 3 ("), "{text}");
        assert!(text.contains("etcd fsync: "), "{text}");
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
