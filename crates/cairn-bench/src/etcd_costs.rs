//! The cluster's own costs, for the header of a `--backend etcd://…` run
//! (feature `etcd`):
//! - the network: [`ROUND_TRIPS`] gets of a key the prefix never holds
//!   (`EtcdDatabase::probe`), linearizable (the member confirms its read
//!   index with the leader) and serializable (the member answers alone),
//!   timed before the rows, their p50 and p99;
//! - fsync: etcd's own histograms of its WAL fsyncs and backend commits
//!   (`etcd_disk_wal_fsync_duration_seconds`,
//!   `etcd_disk_backend_commit_duration_seconds`), read from each
//!   endpoint's Prometheus `/metrics` (served on the client URL by default)
//!   before and after the rows: the mean (sum / count) and the p99
//!   interpolated in the buckets, as Prometheus' `histogram_quantile` does,
//!   of what the run added. An endpoint that does not serve them (TLS,
//!   `--listen-metrics-urls` elsewhere, an error) is "not reported".
//!
//! `/metrics` is read with one HTTP/1.0 GET over a `TcpStream` (the answer
//! is plain text; no HTTP client needed).

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use cairndb_etcd::EtcdDatabase;
use serde_json::{json, Value};

use crate::engine::Res;
use crate::etcd_rows::fmt_us;

/// Gets timed per kind (linearizable, serializable).
pub(crate) const ROUND_TRIPS: usize = 200;
/// How long a `/metrics` read may take (connect, then each read).
const METRICS_TIMEOUT: Duration = Duration::from_secs(3);
/// The largest `/metrics` answer read (etcd's is about 100 KiB).
const METRICS_BYTES_MAX: u64 = 16 << 20;
/// The histograms read, with what the header calls them.
const HISTOGRAMS: [(&str, &str); 2] = [
    ("etcd_disk_wal_fsync_duration_seconds", "WAL fsync"),
    (
        "etcd_disk_backend_commit_duration_seconds",
        "backend commit",
    ),
];

/// The p50 and p99 of a batch of round trips, in µs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Latency {
    pub(crate) p50_us: f64,
    pub(crate) p99_us: f64,
}

/// A Prometheus histogram: cumulative counts by upper bound (seconds,
/// ascending, the last `+Inf`), the sum of the observations and their count.
#[derive(Debug, Clone, Default, PartialEq)]
struct Histogram {
    buckets: Vec<(f64, f64)>,
    sum: f64,
    count: f64,
}

impl Histogram {
    /// What was observed between `before` and `self`, when both have the
    /// same buckets.
    fn since(&self, before: &Histogram) -> Option<Histogram> {
        if self.buckets.len() != before.buckets.len()
            || self
                .buckets
                .iter()
                .zip(&before.buckets)
                .any(|(a, b)| a.0 != b.0)
        {
            return None;
        }
        Some(Histogram {
            buckets: self
                .buckets
                .iter()
                .zip(&before.buckets)
                .map(|(a, b)| (a.0, a.1 - b.1))
                .collect(),
            sum: self.sum - before.sum,
            count: self.count - before.count,
        })
    }

    /// The `q` quantile in seconds, interpolated linearly inside the bucket
    /// that holds it (`histogram_quantile`); in the `+Inf` bucket, the
    /// largest finite bound. `None` without observations.
    fn quantile(&self, q: f64) -> Option<f64> {
        if self.count <= 0.0 {
            return None;
        }
        let rank = q * self.count;
        let (mut lower, mut below) = (0.0, 0.0);
        for &(le, cumulative) in &self.buckets {
            if cumulative >= rank {
                if le.is_infinite() {
                    return Some(lower);
                }
                let inside = cumulative - below;
                let share = if inside > 0.0 {
                    (rank - below) / inside
                } else {
                    1.0
                };
                return Some(lower + (le - lower) * share);
            }
            lower = le;
            below = cumulative;
        }
        Some(lower)
    }
}

/// The histograms `name` of a `/metrics` text (`None`: not in it).
fn parse_histogram(text: &str, name: &str) -> Option<Histogram> {
    let mut h = Histogram::default();
    let (mut sum, mut count) = (None, None);
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        let Some((series, value)) = rest.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        if series == "_sum" {
            sum = Some(value);
        } else if series == "_count" {
            count = Some(value);
        } else if let Some(labels) = series.strip_prefix("_bucket{") {
            let le = labels
                .split(',')
                .find_map(|l| l.trim().strip_prefix("le=\""))
                .and_then(|l| l.split('"').next());
            let bound = match le {
                Some("+Inf") => f64::INFINITY,
                Some(b) => b.parse().ok()?,
                None => continue,
            };
            h.buckets.push((bound, value));
        }
    }
    h.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    h.sum = sum?;
    h.count = count?;
    (!h.buckets.is_empty()).then_some(h)
}

/// The `/metrics` text of an `http://host:port` endpoint.
fn scrape(endpoint: &str) -> Result<String, String> {
    let authority = endpoint
        .strip_prefix("http://")
        .ok_or("not plain HTTP")?
        .trim_end_matches('/');
    let address = authority
        .to_socket_addrs()
        .map_err(|e| e.to_string())?
        .next()
        .ok_or("no address")?;
    let mut stream =
        TcpStream::connect_timeout(&address, METRICS_TIMEOUT).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(METRICS_TIMEOUT))
        .map_err(|e| e.to_string())?;
    let request =
        format!("GET /metrics HTTP/1.0\r\nHost: {authority}\r\nAccept: text/plain\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .map_err(|e| e.to_string())?;
    let mut answer = Vec::new();
    stream
        .take(METRICS_BYTES_MAX)
        .read_to_end(&mut answer)
        .map_err(|e| e.to_string())?;
    let answer = String::from_utf8_lossy(&answer);
    let (head, body) = answer.split_once("\r\n\r\n").ok_or("no HTTP answer")?;
    let status = head.lines().next().unwrap_or_default();
    if status.split(' ').nth(1) != Some("200") {
        return Err(format!("/metrics answered {status:?}"));
    }
    Ok(body.to_string())
}

/// One endpoint's histograms (each `None` when absent), or why none.
type Reading = Result<Vec<Option<Histogram>>, String>;

fn read_endpoint(endpoint: &str) -> Reading {
    let text = scrape(endpoint)?;
    Ok(HISTOGRAMS
        .iter()
        .map(|(name, _)| parse_histogram(&text, name))
        .collect())
}

/// The costs, measured: start before the rows, finish after them.
pub(crate) struct Probe {
    linearizable: Latency,
    serializable: Latency,
    before: Vec<(String, Reading)>,
}

/// What the header prints.
pub(crate) struct Costs {
    linearizable: Latency,
    serializable: Latency,
    /// Per endpoint, per histogram: what the run added, or why not reported.
    fsync: Vec<(String, Vec<Result<Histogram, String>>)>,
}

fn round_trips(db: &EtcdDatabase, serializable: bool) -> Res<Latency> {
    db.probe(serializable)?; // the connection, warmed
    let mut us = Vec::with_capacity(ROUND_TRIPS);
    for _ in 0..ROUND_TRIPS {
        let t = Instant::now();
        db.probe(serializable)?;
        us.push(t.elapsed().as_secs_f64() * 1e6);
    }
    us.sort_by(f64::total_cmp);
    Ok(Latency {
        p50_us: crate::sysinfo::percentile(&us, 0.5),
        p99_us: crate::sysinfo::percentile(&us, 0.99),
    })
}

impl Probe {
    /// Times the round trips, then reads each endpoint's histograms.
    pub(crate) fn start(db: &EtcdDatabase) -> Res<Probe> {
        let linearizable = round_trips(db, false)?;
        let serializable = round_trips(db, true)?;
        let before = db
            .endpoints()
            .iter()
            .map(|e| (e.clone(), read_endpoint(e)))
            .collect();
        Ok(Probe {
            linearizable,
            serializable,
            before,
        })
    }

    /// Reads the histograms again: what the run added.
    pub(crate) fn finish(self) -> Costs {
        let fsync = self
            .before
            .into_iter()
            .map(|(endpoint, before)| {
                let after = read_endpoint(&endpoint);
                let each = match (before, after) {
                    (Ok(b), Ok(a)) => b
                        .iter()
                        .zip(&a)
                        .map(|pair| match pair {
                            (Some(b), Some(a)) => a
                                .since(b)
                                .ok_or_else(|| "its buckets changed during the run".to_string()),
                            _ => Err("no such histogram in /metrics".to_string()),
                        })
                        .collect(),
                    (Err(e), _) | (_, Err(e)) => vec![Err(e); HISTOGRAMS.len()],
                };
                (endpoint, each)
            })
            .collect();
        Costs {
            linearizable: self.linearizable,
            serializable: self.serializable,
            fsync,
        }
    }
}

fn seconds(s: f64) -> String {
    fmt_us(s * 1e6)
}

impl Costs {
    /// The header's lines.
    pub(crate) fn write(&self, w: &mut dyn Write) -> Res<()> {
        writeln!(
            w,
            "etcd network: a get of a missing key ({ROUND_TRIPS} each, before the rows): \
             linearizable p50 {} p99 {}; serializable (one member answers) p50 {} p99 {}",
            fmt_us(self.linearizable.p50_us),
            fmt_us(self.linearizable.p99_us),
            fmt_us(self.serializable.p50_us),
            fmt_us(self.serializable.p99_us),
        )?;
        for (i, (name, label)) in HISTOGRAMS.iter().enumerate() {
            let each: Vec<String> = self
                .fsync
                .iter()
                .map(|(endpoint, hs)| match &hs[i] {
                    Ok(h) if h.count > 0.0 => format!(
                        "{endpoint} mean {} p99 {} ({} observations)",
                        seconds(h.sum / h.count),
                        h.quantile(0.99).map_or("-".into(), seconds),
                        h.count
                    ),
                    Ok(_) => format!("{endpoint} none during the run"),
                    Err(why) => format!("{endpoint} not reported ({why})"),
                })
                .collect();
            writeln!(
                w,
                "etcd {label} during the run ({name}, per endpoint): {}",
                each.join("; ")
            )?;
        }
        Ok(())
    }

    /// The same figures for `--json FILE`.
    pub(crate) fn to_json(&self) -> Value {
        let latency = |l: &Latency| json!({"p50_us": l.p50_us, "p99_us": l.p99_us});
        let fsync: Vec<Value> = self
            .fsync
            .iter()
            .map(|(endpoint, hs)| {
                let mut entry = json!({ "endpoint": endpoint });
                for ((name, _), h) in HISTOGRAMS.iter().zip(hs) {
                    entry[*name] = match h {
                        Ok(h) => json!({
                            "count": h.count,
                            "mean_us": (h.count > 0.0).then(|| h.sum / h.count * 1e6),
                            "p99_us": h.quantile(0.99).map(|s| s * 1e6),
                        }),
                        Err(why) => json!({ "not_reported": why }),
                    };
                }
                entry
            })
            .collect();
        json!({
            "round_trips": ROUND_TRIPS,
            "linearizable_get": latency(&self.linearizable),
            "serializable_get": latency(&self.serializable),
            "fsync": fsync,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
# HELP etcd_disk_wal_fsync_duration_seconds The latency distributions of fsync called by WAL.
# TYPE etcd_disk_wal_fsync_duration_seconds histogram
etcd_disk_wal_fsync_duration_seconds_bucket{le=\"0.001\"} 10
etcd_disk_wal_fsync_duration_seconds_bucket{le=\"0.002\"} 60
etcd_disk_wal_fsync_duration_seconds_bucket{le=\"0.004\"} 100
etcd_disk_wal_fsync_duration_seconds_bucket{le=\"+Inf\"} 100
etcd_disk_wal_fsync_duration_seconds_sum 0.15
etcd_disk_wal_fsync_duration_seconds_count 100
etcd_disk_backend_commit_duration_seconds_count 3
";

    #[test]
    fn a_histogram_is_parsed_and_its_quantiles_interpolated() {
        let h = parse_histogram(TEXT, "etcd_disk_wal_fsync_duration_seconds").unwrap();
        assert_eq!(h.buckets.len(), 4);
        assert_eq!((h.sum, h.count), (0.15, 100.0));
        // The 99th of 100 falls in (0.002, 0.004], 39 of its 40 in.
        let p99 = h.quantile(0.99).unwrap();
        assert!((p99 - (0.002 + 0.002 * 39.0 / 40.0)).abs() < 1e-12, "{p99}");
        // The median in (0.001, 0.002], 40 of its 50.
        let p50 = h.quantile(0.5).unwrap();
        assert!((p50 - 0.0018).abs() < 1e-12, "{p50}");
        // A histogram without buckets or sum is absent.
        assert_eq!(
            parse_histogram(TEXT, "etcd_disk_backend_commit_duration_seconds"),
            None
        );
        assert_eq!(parse_histogram(TEXT, "nothing"), None);
    }

    #[test]
    fn the_run_s_share_is_the_difference_of_two_readings() {
        let before = parse_histogram(TEXT, "etcd_disk_wal_fsync_duration_seconds").unwrap();
        let mut after = before.clone();
        after.buckets = vec![
            (0.001, 10.0),
            (0.002, 60.0),
            (0.004, 100.0),
            (f64::INFINITY, 110.0),
        ];
        after.sum = 0.35;
        after.count = 110.0;
        let run = after.since(&before).unwrap();
        assert_eq!(run.count, 10.0);
        assert!((run.sum - 0.2).abs() < 1e-12);
        // Every observation of the run was over the last finite bound.
        assert_eq!(run.quantile(0.99), Some(0.004));
        assert_eq!(Histogram::default().quantile(0.99), None);
        after.buckets.pop();
        assert_eq!(after.since(&before), None);
    }

    #[test]
    fn an_endpoint_without_metrics_is_not_reported() {
        // A listener that answers 404.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            // The whole request, so closing does not reset the connection.
            let mut request = Vec::new();
            let mut buf = [0u8; 1024];
            while !request.ends_with(b"\r\n\r\n") {
                let n = s.read(&mut buf).unwrap();
                assert!(n > 0, "the request ended early");
                request.extend_from_slice(&buf[..n]);
            }
            assert!(request.starts_with(b"GET /metrics HTTP/1.0\r\n"));
            s.write_all(b"HTTP/1.0 404 Not Found\r\n\r\nno").unwrap();
        });
        let e = read_endpoint(&format!("http://{address}")).unwrap_err();
        assert!(e.contains("404"), "{e}");
        server.join().unwrap();
        assert_eq!(
            read_endpoint("https://127.0.0.1:1").unwrap_err(),
            "not plain HTTP"
        );
    }
}
