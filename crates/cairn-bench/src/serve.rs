//! Suite S: `cairn serve` beside tiedot's HTTP API (BENCHMARKS.md, "Server
//! suite S").
//!
//! The server runs in this process (`cairn_server::start`) on a loopback
//! ephemeral port over a fresh database in the bench directory: one
//! collection with one index, as tiedot's HTTP benchmark has. Each row is
//! a bounded-time run of `--connections` concurrent keep-alive connections
//! (16, like tiedot's `wrk -t2 -c16 -d10s`) doing one kind of request:
//! insert a small document, get a document by id, an indexed equality
//! query with limit 1. The load generator is `wrk` when it is on the PATH
//! (the tool tiedot's figures were measured with), else a built-in one
//! (hyper's HTTP/1 client on tokio, one task per connection); the header
//! says which ran. Requests and latencies are the generator's.
//!
//! Modes: N serves with `Durability::None` (tiedot never syncs); D serves
//! with `Durability::Immediate` and runs the insert row only (reads do not
//! depend on it): every response follows a device flush, and concurrent
//! requests share flushes (group commit), which the server's `/metrics`
//! counters (commits, flushes) show as commits per flush next to the fsync
//! floor measured on the same disk.

use std::fmt::Write as _;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::args::{Generator, ServeArgs};
use crate::engine::{Mode, Res};
use crate::suite::{self, Chart, Setting, Suite};

/// The collection and the indexed field.
const COLLECTION: &str = "bench";
const FIELD: &str = "k";

/// tiedot's HTTP figures (BENCHMARKS.md, "Server suite S": tiedot's own
/// server, `wrk -t2 -c16 -d10s`, loopback, this kind of machine):
/// (row, requests/s, p50 latency in ms).
pub const TIEDOT: [(Kind, f64, f64); 3] = [
    (Kind::Insert, 10_584.0, 1.75),
    (Kind::Get, 90_264.0, 0.75),
    (Kind::Query, 72_056.0, 0.71),
];

/// The target: this many times tiedot's requests per second.
pub const TARGET_RATIO: f64 = 2.0;

/// What a row's requests do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `POST /collections/bench/documents` with a small document.
    Insert,
    /// `GET /collections/bench/documents/{id}`, a random preloaded id.
    Get,
    /// `POST /collections/bench/find`, `{"filter": {"k": x}, "limit": 1}`.
    Query,
}

impl Kind {
    pub fn id(self) -> &'static str {
        match self {
            Kind::Insert => "S1",
            Kind::Get => "S2",
            Kind::Query => "S3",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Kind::Insert => "insert a small document",
            Kind::Get => "get by id",
            Kind::Query => "indexed equality query, limit 1",
        }
    }

    fn tiedot(self) -> (f64, f64) {
        TIEDOT
            .iter()
            .find(|t| t.0 == self)
            .map_or((0.0, 0.0), |t| (t.1, t.2))
    }
}

/// One row's figures.
#[derive(Debug, Clone)]
pub struct RowResult {
    pub kind: Kind,
    pub mode: Mode,
    pub requests: u64,
    /// Responses that were not 2xx, and socket errors.
    pub errors: u64,
    pub seconds: f64,
    pub rps: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// The server's commits and device flushes during the row.
    pub commits: u64,
    pub flushes: u64,
}

/// Everything one run measured.
pub struct Outcome {
    pub setting: Setting,
    pub generator: String,
    pub rows: Vec<RowResult>,
    pub preload: usize,
    pub seconds: u64,
}

/// The generator that runs: `wrk` if asked or found, else the built-in.
fn pick_generator(g: Generator) -> Res<Option<String>> {
    let wrk = Command::new("wrk").arg("--version").output().ok().map(|o| {
        let text =
            String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
        text.lines().next().unwrap_or("wrk").trim().to_string()
    });
    match (g, wrk) {
        (Generator::Builtin, _) => Ok(None),
        (_, Some(v)) => Ok(Some(v)),
        (Generator::Wrk, None) => Err("--generator wrk: wrk is not on the PATH".into()),
        (Generator::Auto, None) => Ok(None),
    }
}

impl Suite for ServeArgs {
    type Outcome = Outcome;

    fn execute(&self, progress: bool) -> Res<Outcome> {
        let seconds = self
            .seconds
            .unwrap_or(if self.common.quick { 2 } else { 10 })
            .clamp(1, 600);
        let preload = self
            .common
            .scale
            .unwrap_or(if self.common.quick { 2_000 } else { 20_000 })
            .max(1);
        let wrk = pick_generator(self.generator)?;
        let generator = match &wrk {
            Some(v) => format!(
                "{v} (`wrk -t{} -c{} -d{seconds}s --latency`, a Lua script per row)",
                self.threads, self.connections
            ),
            None => format!(
                "built-in (hyper HTTP/1 client on tokio, {} threads, {} keep-alive connections)",
                self.threads, self.connections
            ),
        };
        let (setting, rows) =
            Setting::measure(&self.common, "cairn-bench-serve", |dir, repeat| {
                let mut rows = Vec::new();
                // N first: the comparison with tiedot (which never syncs).
                let mut modes = self.common.durability.modes();
                modes.sort_by_key(|m| *m != Mode::N);
                for mode in modes {
                    let kinds: &[Kind] = match mode {
                        Mode::N => &[Kind::Get, Kind::Query, Kind::Insert],
                        Mode::D => &[Kind::Insert],
                    };
                    let db_dir = suite::fresh_dir(dir, &format!("serve-{}", mode.label()))?;
                    let server = BenchServer::start(&db_dir, mode, preload, self.inline_reads)?;
                    for &kind in kinds {
                        let mut runs = Vec::new();
                        for _ in 0..repeat {
                            if progress {
                                eprintln!(
                                    "suite S: {} {} ({} s, {} connections)…",
                                    kind.id(),
                                    mode.label(),
                                    seconds,
                                    self.connections
                                );
                            }
                            let before = server.counters()?;
                            let mut r = match &wrk {
                                Some(_) => run_wrk(self, &server, kind, seconds, preload, dir)?,
                                None => run_builtin(self, &server, kind, seconds, preload)?,
                            };
                            let after = server.counters()?;
                            r.mode = mode;
                            r.commits = after.0.saturating_sub(before.0);
                            r.flushes = after.1.saturating_sub(before.1);
                            runs.push(r);
                        }
                        runs.sort_by(|a, b| a.rps.total_cmp(&b.rps));
                        let mid = runs.len() / 2;
                        rows.push(runs.swap_remove(mid));
                    }
                    server.stop()?;
                    let _ = std::fs::remove_dir_all(&db_dir);
                }
                Ok(rows)
            })?;
        Ok(Outcome {
            setting,
            generator,
            rows,
            preload,
            seconds,
        })
    }

    fn render(&self, out: &Outcome) -> String {
        let mut s = String::new();
        let floor = &out.setting.floor;
        let lines = vec![
            format!("Load generator: {}", out.generator),
            format!(
                "Server: `cairn serve` in this process on a loopback ephemeral port, a fresh \
                 database with one collection (`{COLLECTION}`, {} preloaded documents) and one \
                 index (`{FIELD}`); {} s per row; the median of the repeats by requests/s; {}",
                out.preload,
                out.seconds,
                if self.inline_reads {
                    "--inline-reads (gets and finds on the async workers)"
                } else {
                    "default options (every engine call on tokio's blocking pool)"
                }
            ),
            "Modes: N = the server's writes with Durability::None (crash-consistent, no \
             flush; tiedot never syncs); D = Durability::Immediate (each insert durable before \
             its response; concurrent requests share flushes), the insert row only"
                .to_string(),
            format!(
                "tiedot: its own HTTP server, `wrk -t2 -c16 -d10s`, figures from BENCHMARKS.md; \
                 target: ≥ {TARGET_RATIO}× tiedot's requests/s in mode N"
            ),
        ];
        suite::render_header(
            &mut s,
            "serve",
            &out.setting,
            &self.common,
            &lines,
            &["**cairn serve**: axum/tokio over the library; engine calls on tokio's blocking pool".to_string(),
              "**tiedot** (figures only, not run here): its HTTP API (`/insert`, `/get`, `/query`)".to_string()],
        );
        let _ = writeln!(s, "\n## Suite S — `cairn serve` beside tiedot's HTTP API\n");
        let _ = writeln!(
            s,
            "| row | request | mode | req/s | p50 ms | p99 ms | errors | tiedot req/s | tiedot p50 ms | ratio | c/f |"
        );
        let _ = writeln!(s, "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
        for r in &out.rows {
            let (t_rps, t_p50) = r.kind.tiedot();
            let cpf = if r.flushes > 0 {
                format!("{:.1}", r.commits as f64 / r.flushes as f64)
            } else {
                "–".into()
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {:.2} | {:.2} | {} | {} | {:.2} | {:.2}× | {} |",
                r.kind.id(),
                r.kind.label(),
                r.mode.label(),
                thousands(r.rps),
                r.p50_ms,
                r.p99_ms,
                r.errors,
                thousands(t_rps),
                t_p50,
                r.rps / t_rps.max(1e-9),
                cpf
            );
        }
        let _ = writeln!(
            s,
            "\nratio = cairn serve's req/s ÷ tiedot's. c/f = the server's commits per device \
             flush during the row (its `/metrics` counters)."
        );
        for r in out.rows.iter().filter(|r| r.mode == Mode::D) {
            let floor_fps = 1e6 / floor.p50_us.max(1e-3);
            let _ = writeln!(
                s,
                "\nMode D inserts: {} commits in {} device flushes ({:.1} commits per flush, \
                 {:.0} flushes/s) — the fsync floor on this disk is p50 {:.0} µs (≈ {:.0} \
                 flushes/s), so one insert per flush would give at most ≈ {:.0} req/s; \
                 {} req/s is {:.1}× that.",
                r.commits,
                r.flushes,
                r.commits as f64 / (r.flushes.max(1)) as f64,
                r.flushes as f64 / r.seconds.max(1e-9),
                floor.p50_us,
                floor_fps,
                floor_fps,
                thousands(r.rps),
                r.rps / floor_fps.max(1e-9),
            );
        }
        s
    }

    fn to_json(&self, out: &Outcome) -> Value {
        let rows = out
            .rows
            .iter()
            .map(|r| {
                let (t_rps, t_p50) = r.kind.tiedot();
                json!({
                    "suite": "S", "row": r.kind.id(), "label": r.kind.label(),
                    "mode": r.mode.label(), "requests": r.requests, "errors": r.errors,
                    "seconds": r.seconds, "rps": r.rps, "p50_ms": r.p50_ms, "p99_ms": r.p99_ms,
                    "commits": r.commits, "flushes": r.flushes,
                    "tiedot_rps": t_rps, "tiedot_p50_ms": t_p50, "ratio": r.rps / t_rps.max(1e-9),
                })
            })
            .collect();
        suite::json_report(
            &out.setting,
            &self.common,
            rows,
            json!({"generator": out.generator, "preload": out.preload, "seconds_per_row": out.seconds}),
        )
    }

    fn charts<'a>(&self, _: &'a Outcome) -> Vec<Chart<'a>> {
        Vec::new()
    }

    fn common(&self) -> &crate::args::CommonArgs {
        &self.common
    }
}

/// `12345.6` as `12,346`.
fn thousands(x: f64) -> String {
    let digits = format!("{:.0}", x.max(0.0));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The server under test, on a runtime of its own.
struct BenchServer {
    rt: tokio::runtime::Runtime,
    server: cairn_server::Server,
    addr: SocketAddr,
}

impl BenchServer {
    fn start(dir: &Path, mode: Mode, preload: usize, inline_reads: bool) -> Res<Self> {
        std::fs::create_dir_all(dir)?;
        let mut c = cairn_server::Config::new(dir.join("serve.cairn"));
        c.bind = SocketAddr::from(([127, 0, 0, 1], 0));
        c.inline_reads = inline_reads;
        c.durability = match mode {
            Mode::D => cairndb::Durability::Immediate,
            Mode::N => cairndb::Durability::None,
        };
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .thread_name("cairn-bench-server")
            .build()?;
        let server = rt.block_on(cairn_server::start(c, false))?;
        let addr = server.addr();
        let s = BenchServer { rt, server, addr };
        s.setup(preload)?;
        Ok(s)
    }

    /// One collection with one index and `preload` documents
    /// (`{"_id": i, "k": i, …}`), in one bulk request.
    fn setup(&self, preload: usize) -> Res<()> {
        let base = format!("/api/v1/collections/{COLLECTION}");
        let r = blocking_request(
            self.addr,
            "POST",
            "/api/v1/collections",
            &format!("{{\"name\":\"{COLLECTION}\"}}"),
        )?;
        expect(r, 201, "create the collection")?;
        let r = blocking_request(
            self.addr,
            "POST",
            &format!("{base}/indexes"),
            &format!("{{\"fields\":{{\"{FIELD}\":1}}}}"),
        )?;
        expect(r, 201, "create the index")?;
        let mut body = String::with_capacity(preload * 64);
        for i in 0..preload {
            let _ = writeln!(body, "{}", doc_json(i as u64, Some(i as u64)));
        }
        let r = blocking_request(
            self.addr,
            "POST",
            &format!("{base}/bulk?batch=10000"),
            &body,
        )?;
        expect(r, 200, "preload")?;
        Ok(())
    }

    /// (commits, flushes) from the server's `/metrics`.
    fn counters(&self) -> Res<(u64, u64)> {
        let (status, text) = blocking_request(self.addr, "GET", "/metrics", "")?;
        if status != 200 {
            return Err(format!("/metrics answered {status}").into());
        }
        let get = |name: &str| -> u64 {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
                .unwrap_or(0)
        };
        Ok((get("cairn_commits_total "), get("cairn_flushes_total ")))
    }

    fn stop(self) -> Res<()> {
        self.rt.block_on(self.server.shutdown())?;
        Ok(())
    }
}

fn expect((status, body): (u16, String), want: u16, what: &str) -> Res<()> {
    if status == want {
        Ok(())
    } else {
        Err(format!("{what}: HTTP {status}: {body}").into())
    }
}

/// A small document like tiedot's benchmark documents.
fn doc_json(k: u64, id: Option<u64>) -> String {
    let id = id.map_or_else(String::new, |i| format!("\"_id\":{i},"));
    format!("{{{id}\"{FIELD}\":{k},\"name\":\"user {k}\",\"tags\":[\"a\",\"b\"],\"n\":1}}")
}

/// One request on a fresh connection, for the setup (plain blocking I/O).
fn blocking_request(addr: SocketAddr, method: &str, path: &str, body: &str) -> Res<(u16, String)> {
    use std::io::Read as _;
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(120)))?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    s.write_all(body.as_bytes())?;
    let mut out = Vec::new();
    s.read_to_end(&mut out)?;
    let text = String::from_utf8_lossy(&out).to_string();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("no HTTP status in {text:?}"))?;
    let body = text.split_once("\r\n\r\n").map_or("", |b| b.1).to_string();
    Ok((status, body))
}

/// The Lua script wrk runs for a row: one request per call, random keys.
fn wrk_script(kind: Kind, preload: usize) -> String {
    let base = format!("/api/v1/collections/{COLLECTION}");
    let gen = match kind {
        Kind::Insert => format!(
            "local k = math.random(0, 1000000000)\n  \
             local body = '{{\"{FIELD}\":' .. k .. ',\"name\":\"user ' .. k .. '\",\"tags\":[\"a\",\"b\"],\"n\":1}}'\n  \
             return wrk.format('POST', '{base}/documents', headers, body)"
        ),
        Kind::Get => format!(
            "return wrk.format('GET', '{base}/documents/' .. math.random(0, {}))",
            preload - 1
        ),
        Kind::Query => format!(
            "local body = '{{\"filter\":{{\"{FIELD}\":' .. math.random(0, {}) .. '}},\"limit\":1}}'\n  \
             return wrk.format('POST', '{base}/find', headers, body)",
            preload - 1
        ),
    };
    format!(
        "-- cairn bench serve, row {}: {}\n\
         local headers = {{ ['Content-Type'] = 'application/json' }}\n\
         math.randomseed(os.time())\n\
         request = function()\n  {gen}\nend\n",
        kind.id(),
        kind.label()
    )
}

fn run_wrk(
    a: &ServeArgs,
    server: &BenchServer,
    kind: Kind,
    seconds: u64,
    preload: usize,
    dir: &Path,
) -> Res<RowResult> {
    let script = dir.join(format!("wrk-{}.lua", kind.id()));
    std::fs::write(&script, wrk_script(kind, preload))?;
    let out = Command::new("wrk")
        .arg(format!("-t{}", a.threads))
        .arg(format!("-c{}", a.connections))
        .arg(format!("-d{seconds}s"))
        .arg("--latency")
        .arg("-s")
        .arg(&script)
        .arg(format!("http://{}/", server.addr))
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    if !out.status.success() {
        return Err(format!(
            "wrk failed ({}): {text}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    parse_wrk(&text, kind).ok_or_else(|| format!("cannot read wrk's output:\n{text}").into())
}

/// A wrk latency such as `635.00us`, `2.51ms` or `1.02s`, in ms.
fn wrk_ms(s: &str) -> Option<f64> {
    let s = s.trim();
    let (num, scale) = if let Some(n) = s.strip_suffix("us") {
        (n, 1e-3)
    } else if let Some(n) = s.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1e3)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60e3)
    } else {
        return None;
    };
    num.trim().parse::<f64>().ok().map(|v| v * scale)
}

/// The figures of wrk's `--latency` report.
pub fn parse_wrk(text: &str, kind: Kind) -> Option<RowResult> {
    let mut p50 = None;
    let mut p99 = None;
    let mut rps = None;
    let mut requests = None;
    let mut seconds = None;
    let mut errors = 0u64;
    for l in text.lines() {
        let t = l.trim();
        if let Some(v) = t.strip_prefix("50%") {
            p50 = wrk_ms(v);
        } else if let Some(v) = t.strip_prefix("99%") {
            p99 = wrk_ms(v);
        } else if let Some(v) = t.strip_prefix("Requests/sec:") {
            rps = v.trim().parse::<f64>().ok();
        } else if let Some(v) = t.strip_prefix("Non-2xx or 3xx responses:") {
            errors += v.trim().parse::<u64>().unwrap_or(0);
        } else if let Some(v) = t.strip_prefix("Socket errors:") {
            // connect 0, read 0, write 0, timeout 0
            errors += v
                .split(',')
                .filter_map(|p| p.split_whitespace().nth(1)?.parse::<u64>().ok())
                .sum::<u64>();
        } else if t.contains("requests in") {
            // "123456 requests in 10.00s, 12.34MB read"
            let mut w = t.split_whitespace();
            requests = w.next().and_then(|n| n.parse::<u64>().ok());
            seconds = t
                .split("requests in")
                .nth(1)
                .and_then(|r| r.split(',').next())
                .and_then(wrk_ms)
                .map(|ms| ms / 1e3);
        }
    }
    Some(RowResult {
        kind,
        mode: Mode::N,
        requests: requests?,
        errors,
        seconds: seconds?,
        rps: rps?,
        p50_ms: p50?,
        p99_ms: p99?,
        commits: 0,
        flushes: 0,
    })
}

/// The built-in generator: `connections` keep-alive HTTP/1 connections,
/// each a task sending one request at a time until the deadline.
fn run_builtin(
    a: &ServeArgs,
    server: &BenchServer,
    kind: Kind,
    seconds: u64,
    preload: usize,
) -> Res<RowResult> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(a.threads.max(1))
        .enable_all()
        .thread_name("cairn-bench-load")
        .build()?;
    let addr = server.addr;
    let start = Instant::now();
    let deadline = start + Duration::from_secs(seconds);
    let results = rt.block_on(async move {
        let mut tasks = Vec::new();
        for c in 0..a.connections.max(1) {
            tasks.push(tokio::spawn(connection(
                addr, kind, deadline, preload, c as u64,
            )));
        }
        let mut all = Vec::new();
        for t in tasks {
            all.push(t.await);
        }
        all
    });
    let elapsed = start.elapsed().as_secs_f64();
    let mut lat: Vec<f64> = Vec::new();
    let mut errors = 0;
    for r in results {
        let (l, e) = r.map_err(|e| format!("a load task failed: {e}"))??;
        lat.extend(l);
        errors += e;
    }
    lat.sort_by(f64::total_cmp);
    let n = lat.len() as u64;
    Ok(RowResult {
        kind,
        mode: Mode::N,
        requests: n + errors,
        errors,
        seconds: elapsed,
        rps: (n + errors) as f64 / elapsed.max(1e-9),
        p50_ms: crate::sysinfo::percentile(&lat, 0.50),
        p99_ms: crate::sysinfo::percentile(&lat, 0.99),
        commits: 0,
        flushes: 0,
    })
}

/// One connection's loop: latencies in ms, and the errors.
async fn connection(
    addr: SocketAddr,
    kind: Kind,
    deadline: Instant,
    preload: usize,
    seed: u64,
) -> Res<(Vec<f64>, u64)> {
    use http_body_util::{BodyExt, Full};
    let stream = tokio::net::TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (mut send, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let mut rng = 0x9E37_79B9_7F4A_7C15u64 ^ (seed + 1).wrapping_mul(0xD1B5_4A32_D192_ED03);
    let mut next = move || {
        // xorshift64*
        rng ^= rng >> 12;
        rng ^= rng << 25;
        rng ^= rng >> 27;
        rng.wrapping_mul(0x2545_F491_4F6C_DD1D)
    };
    let base = format!("/api/v1/collections/{COLLECTION}");
    let host = addr.to_string();
    let mut lat = Vec::with_capacity(1 << 16);
    let mut errors = 0u64;
    while Instant::now() < deadline {
        let (method, path, body) = match kind {
            Kind::Insert => (
                "POST",
                format!("{base}/documents"),
                doc_json(next() % 1_000_000_000, None),
            ),
            Kind::Get => (
                "GET",
                format!("{base}/documents/{}", next() % preload as u64),
                String::new(),
            ),
            Kind::Query => (
                "POST",
                format!("{base}/find"),
                format!(
                    "{{\"filter\":{{\"{FIELD}\":{}}},\"limit\":1}}",
                    next() % preload as u64
                ),
            ),
        };
        let req = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header("host", &host)
            .header("content-type", "application/json")
            .body(Full::new(bytes::Bytes::from(body)))?;
        let t = Instant::now();
        send.ready().await?;
        let resp = send.send_request(req).await?;
        let ok = resp.status().is_success();
        resp.into_body().collect().await?;
        if ok {
            lat.push(t.elapsed().as_secs_f64() * 1e3);
        } else {
            errors += 1;
        }
    }
    Ok((lat, errors))
}

#[cfg(test)]
mod tests {
    use super::*;

    const WRK: &str = "Running 2s test @ http://127.0.0.1:41231/
  2 threads and 16 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   690.12us  400.50us  12.01ms   90.00%
    Req/Sec    11.50k     1.20k   13.00k    70.00%
  Latency Distribution
     50%  635.00us
     75%  800.00us
     90%    1.00ms
     99%    2.51ms
  45678 requests in 2.00s, 9.87MB read
  Non-2xx or 3xx responses: 3
Requests/sec:  22839.00
Transfer/sec:      4.93MB
";

    #[test]
    fn reads_wrk_output() {
        let r = parse_wrk(WRK, Kind::Get).expect("parsed");
        assert_eq!(r.requests, 45678);
        assert_eq!(r.errors, 3);
        assert!((r.rps - 22839.0).abs() < 1e-6);
        assert!((r.p50_ms - 0.635).abs() < 1e-9);
        assert!((r.p99_ms - 2.51).abs() < 1e-9);
        assert!((r.seconds - 2.0).abs() < 1e-9);
        let with_socket_errors = WRK.replace(
            "  Non-2xx or 3xx responses: 3\n",
            "  Socket errors: connect 0, read 2, write 0, timeout 5\n",
        );
        assert_eq!(
            parse_wrk(&with_socket_errors, Kind::Get)
                .expect("parsed")
                .errors,
            7
        );
        assert!(parse_wrk("garbage", Kind::Get).is_none());
    }

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0.4), "0");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(10_584.0), "10,584");
        assert_eq!(thousands(1_234_567.8), "1,234,568");
    }

    #[test]
    fn latencies_in_every_wrk_unit() {
        assert_eq!(wrk_ms("500.00us"), Some(0.5));
        assert_eq!(wrk_ms("2.50ms"), Some(2.5));
        assert_eq!(wrk_ms("1.50s"), Some(1500.0));
        assert_eq!(wrk_ms("12"), None);
    }
}
