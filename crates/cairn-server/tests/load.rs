//! A load test of `cairn serve` on loopback: concurrent clients mixing
//! finds, document inserts and event appends while SSE subscribers follow
//! the global log. Bounded in count and time; reports p50/p99 latency by
//! operation and fails on any error or on an SSE event lost, repeated or
//! out of order.
//!
//! Size: `LOAD_CLIENTS` (default 6) clients × `LOAD_REQUESTS` (default 150)
//! requests each, `LOAD_SUBSCRIBERS` (default 2); at most 60 s of requests.
//! A bigger run: `LOAD_CLIENTS=16 LOAD_REQUESTS=2000 cargo test --release
//! -p cairn-server --test load -- --nocapture`.

mod common;

use std::io::{BufRead, BufReader};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.2}ms", d.as_secs_f64() * 1e3)
}

/// What one subscriber saw: the positions of the events, in order.
fn subscribe(base: String, ready: Arc<AtomicU64>) -> Result<Vec<u64>, String> {
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .map_err(|e| e.to_string())?;
    let r = client
        .get(format!("{base}/events/subscribe?from=0"))
        .send()
        .map_err(|e| e.to_string())?;
    if !r.status().is_success() {
        return Err(format!("subscribe: {}", r.status()));
    }
    ready.fetch_add(1, Ordering::SeqCst);
    let mut seen = Vec::new();
    let (mut id, mut kind) = (None::<u64>, String::new());
    for line in BufReader::new(r).lines() {
        let line = line.map_err(|e| e.to_string())?;
        if let Some(v) = line.strip_prefix("id:") {
            id = v.trim().parse().ok();
        } else if let Some(v) = line.strip_prefix("event:") {
            kind = v.trim().to_string();
        } else if let Some(v) = line.strip_prefix("data:") {
            if kind == "event" {
                let ev: Value = serde_json::from_str(v.trim()).map_err(|e| e.to_string())?;
                let pos = id.ok_or("an event without an id")?;
                if ev["position"].as_u64() != Some(pos) {
                    return Err(format!("id {pos} but position {}", ev["position"]));
                }
                seen.push(pos);
                if ev["type"] == "end" {
                    return Ok(seen);
                }
            } else if kind == "error" {
                return Err(format!("subscription error: {v}"));
            }
        } else if line.is_empty() {
            id = None;
            kind.clear();
        }
    }
    Err(format!("the stream ended after {} events", seen.len()))
}

#[derive(Default)]
struct Samples {
    find: Vec<Duration>,
    insert: Vec<Duration>,
    append: Vec<Duration>,
    errors: Vec<String>,
    appended: u64,
}

#[test]
fn load_mixed_clients_and_sse_subscribers_lose_nothing() {
    let clients = env("LOAD_CLIENTS", 6).clamp(1, 64);
    let requests = env("LOAD_REQUESTS", 150).clamp(1, 100_000);
    let subscribers = env("LOAD_SUBSCRIBERS", 2).clamp(1, 16);
    let s = common::TestServer::start_with(|c| c.max_body = 1 << 20);
    let base = s.base.clone();
    // A collection with an index, and some documents to find.
    assert_eq!(
        s.post("/collections", &json!({"name": "load"})).status(),
        201
    );
    let r = s.post("/collections/load/indexes", &json!({"fields": {"n": 1}}));
    assert!(r.status().is_success(), "{}", r.text().unwrap_or_default());
    let seed: String = (0..500)
        .map(|i| format!("{}\n", json!({"n": i, "name": format!("seed{i}")})))
        .collect();
    let r = s.post_raw("/collections/load/bulk", seed);
    assert!(r.status().is_success(), "{}", r.text().unwrap_or_default());

    let ready = Arc::new(AtomicU64::new(0));
    let subs: Vec<_> = (0..subscribers)
        .map(|_| {
            let (b, r) = (base.clone(), ready.clone());
            std::thread::spawn(move || subscribe(b, r))
        })
        .collect();
    let t0 = Instant::now();
    while ready.load(Ordering::SeqCst) < subscribers as u64 {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "subscribers did not connect"
        );
        std::thread::sleep(Duration::from_millis(10));
    }

    let samples = Arc::new(Mutex::new(Samples::default()));
    let deadline = Instant::now() + Duration::from_secs(60);
    let start = Instant::now();
    let workers: Vec<_> = (0..clients)
        .map(|c| {
            let (base, samples) = (base.clone(), samples.clone());
            std::thread::spawn(move || {
                let client = reqwest::blocking::Client::builder()
                    .timeout(Duration::from_secs(20))
                    .build()
                    .expect("client");
                let mut local = Samples::default();
                let mut x: u64 = 0x9E37_79B9_7F4A_7C15 ^ (c as u64 + 1);
                for i in 0..requests {
                    if Instant::now() > deadline {
                        break;
                    }
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let t = Instant::now();
                    let (kind, r) = match x % 10 {
                        0..=5 => {
                            let lo = x % 500;
                            let body =
                                json!({"filter": {"n": {"$gte": lo, "$lt": lo + 20}}, "limit": 20});
                            (
                                "find",
                                client
                                    .post(format!("{base}/collections/load/find"))
                                    .body(body.to_string())
                                    .send(),
                            )
                        }
                        6..=8 => {
                            let body = json!({"n": 1000 + i, "client": c});
                            (
                                "insert",
                                client
                                    .post(format!("{base}/collections/load/documents"))
                                    .body(body.to_string())
                                    .send(),
                            )
                        }
                        _ => {
                            let body = json!([{"type": "Tick", "data": {"client": c, "i": i}}]);
                            (
                                "append",
                                client
                                    .post(format!("{base}/streams/load-{c}/events"))
                                    .body(body.to_string())
                                    .send(),
                            )
                        }
                    };
                    let took = t.elapsed();
                    match r {
                        Ok(r) if r.status().is_success() => {
                            let _ = r.bytes();
                            match kind {
                                "find" => local.find.push(took),
                                "insert" => local.insert.push(took),
                                _ => {
                                    local.append.push(took);
                                    local.appended += 1;
                                }
                            }
                        }
                        Ok(r) => local.errors.push(format!("{kind}: {}", r.status())),
                        Err(e) => local.errors.push(format!("{kind}: {e}")),
                    }
                }
                let mut all = samples.lock().expect("samples");
                all.find.extend(local.find);
                all.insert.extend(local.insert);
                all.append.extend(local.append);
                all.errors.extend(local.errors);
                all.appended += local.appended;
            })
        })
        .collect();
    for w in workers {
        w.join().expect("client thread");
    }
    let wall = start.elapsed();
    // The last event: subscribers stop when they see it.
    let r = s.post("/streams/load-end/events", &json!([{"type": "end"}]));
    assert!(r.status().is_success());
    let end: Value = r.json().expect("json");
    let end_pos = end["first_position"].as_u64().expect("position");

    let mut all = samples.lock().expect("samples");
    let total = all.find.len() + all.insert.len() + all.append.len();
    let mut every: Vec<Duration> = all
        .find
        .iter()
        .chain(&all.insert)
        .chain(&all.append)
        .copied()
        .collect();
    every.sort();
    all.find.sort();
    all.insert.sort();
    all.append.sort();
    let line = |name: &str, v: &[Duration]| {
        format!(
            "{name} n={} p50={} p99={}",
            v.len(),
            ms(percentile(v, 0.5)),
            ms(percentile(v, 0.99))
        )
    };
    let mut sse = Vec::new();
    for h in subs {
        let seen = h
            .join()
            .expect("subscriber thread")
            .unwrap_or_else(|e| panic!("a subscriber failed: {e}"));
        // Every event, in order, once: positions are consecutive up to the end.
        let first = seen.first().copied().unwrap_or(0);
        for (i, p) in seen.iter().enumerate() {
            assert_eq!(*p, first + i as u64, "SSE positions skip or repeat");
        }
        assert_eq!(seen.last().copied(), Some(end_pos));
        sse.push(seen.len());
    }
    let expected_events = all.appended as usize + 1;
    println!(
        "load: clients={clients} requests={total} in {:.2}s ({:.0} req/s) errors={} | {} | {} | {} | {} | sse subscribers={subscribers} events={expected_events} received={sse:?}",
        wall.as_secs_f64(),
        total as f64 / wall.as_secs_f64().max(1e-9),
        all.errors.len(),
        line("all", &every),
        line("find", &all.find),
        line("insert", &all.insert),
        line("append", &all.append),
    );
    assert!(all.errors.is_empty(), "errors: {:?}", all.errors);
    for n in sse {
        assert_eq!(n, expected_events, "an SSE subscriber lost events");
    }
}
