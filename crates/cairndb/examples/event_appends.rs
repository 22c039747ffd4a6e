//! A profiling driver for the event paths, on one thread, so `perf
//! record` and `valgrind --tool=callgrind` see one path alone:
//!
//! - `one N` (the default): the shape of `cairn bench`'s E1 row — one event
//!   per non-durable commit, cycling over 100 entity streams with exact
//!   expected versions;
//! - `load N STREAMS BATCH`: the shape of E3's loads — `N` events appended
//!   round-robin over `STREAMS` streams (one append per event, exact
//!   expected versions), `BATCH` events per non-durable commit, each event
//!   with a random id (as clients that make version-4 UUIDs give, and as
//!   the bench's events have); prints the rate per tenth of the load and
//!   the file's size;
//! - `writers T N`: the shape of E6 — `T` threads, each appending `N / T`
//!   events to its own stream, one event per non-durable commit; prints the
//!   events per second of all threads together;
//! - `tail T N ROUNDS`: the shape of E8 — `T` threads append `N` events
//!   each (one per non-durable commit) while a subscriber tails the global
//!   log; prints the append-to-delivery latency's p50 and p99 per round;
//! - `catchup N ROUNDS`: the shape of E7 — `N` events loaded over 1,000
//!   streams in commits of 10,000, then `ROUNDS` catch-up subscriptions from
//!   position 0 over all of them (the read side of the event layer), events
//!   read in place (`OWNED=1`: copied out, `next_timeout`'s way);
//!   `SLEEP_MS=` waits that long after the load first (the background
//!   spill then has applied it to the trees before the first pass).
//!
//! ```sh
//! cargo run --release -p cairndb --example event_appends -- one 100000
//! cargo run --release -p cairndb --example event_appends -- load 1000000 100 10000
//! valgrind --tool=callgrind target/release/examples/event_appends one 20000
//! ```
//!
//! Speed is measured by `cairn bench`; the printed rates only say where the
//! time went.

use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use cairndb::events::{
    EventData, EventFilter, EventStore, EventWriter, ExpectedVersion, Position, StreamVersion,
    SubscriptionMessage,
};
use cairndb::{Database, Durability};
use uuid::Uuid;

fn event(i: usize, streams: usize) -> EventData {
    let body = format!(
        "{{\"order\":{},\"item\":\"sku-{:05}\",\"qty\":{}}}",
        i % streams,
        i % 977,
        i % 7 + 1
    );
    EventData::new("ItemAdded", body.into_bytes())
}

/// A random-looking id for event `i` (splitmix64), fixed from run to run.
fn random_id(i: usize) -> Uuid {
    let mix = |mut z: u64| {
        z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    Uuid::from_u64_pair(mix(2 * i as u64), mix(2 * i as u64 + 1))
}

fn expected(version: u64) -> ExpectedVersion {
    match version {
        0 => ExpectedVersion::NoStream,
        v => ExpectedVersion::Exact(StreamVersion(v - 1)),
    }
}

/// Appends `n` events round-robin over `streams` streams, `batch` events per
/// non-durable commit; prints the rate per tenth of the load if `laps`.
fn load(
    db: &Database,
    n: usize,
    streams: usize,
    batch: usize,
    laps: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    let names: Vec<String> = (0..streams).map(|i| format!("entity-{i:06}")).collect();
    let (mut lap, mut lap_from) = (Instant::now(), 0);
    let tenth = (n / 10).max(1);
    let mut i = 0;
    while i < n {
        let hi = (i + batch).min(n);
        let txn = db.begin_write()?;
        txn.set_durability(Durability::None);
        {
            let mut w = EventWriter::new(&txn);
            for j in i..hi {
                let ev = event(j, streams).with_id(random_id(j));
                w.append(
                    &names[j % streams],
                    expected((j / streams) as u64),
                    std::slice::from_ref(&ev),
                )?;
            }
        }
        txn.commit()?;
        if laps && hi / tenth != i / tenth {
            let s = lap.elapsed().as_secs_f64();
            println!(
                "{hi:>10} events: {:.0} events/s",
                (hi - lap_from) as f64 / s
            );
            (lap, lap_from) = (Instant::now(), hi);
        }
        i = hi;
    }
    Ok(())
}

/// One catch-up subscription from position 0 until `n` events arrived, each
/// checked to come in log order and its body read (E7's shape): events read
/// in place (`Subscription::poll_borrowed`), or copied out (`next_timeout`)
/// if `owned`.
#[inline(never)]
fn catchup_pass(db: &Database, n: usize, owned: bool) -> Result<u64, Box<dyn std::error::Error>> {
    let store = EventStore::new(db);
    let mut sub = store.subscribe_all(Position(0), EventFilter::all());
    let (mut got, mut bytes) = (0u64, 0usize);
    let mut order = Ok(());
    let mut take = |position: u64, stream: &str, data: &[u8]| {
        if position != got {
            order = Err(format!("event at {position} delivered as number {got}"));
            return ControlFlow::Break(());
        }
        bytes += data.len() + stream.len();
        got += 1;
        if got as usize >= n {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    };
    let wait = Duration::from_millis(50);
    if owned {
        while let Some(SubscriptionMessage::Event(e)) = sub.next_timeout(wait)? {
            if take(e.position.0, &e.stream, &e.data).is_break() {
                break;
            }
        }
    } else {
        // A call returns after `wait` with more to come: call again until
        // the callback breaks (all `n` taken, or caught up).
        while sub
            .poll_borrowed(wait, |m| match m {
                SubscriptionMessage::Event(e) => take(e.position.0, e.stream, e.data),
                SubscriptionMessage::CaughtUp { .. } => ControlFlow::Break(()),
            })?
            .is_continue()
        {}
    }
    order?;
    std::hint::black_box(bytes);
    Ok(got)
}

/// Writer `w`'s loop: `per` events appended to its own stream, one per
/// non-durable commit with an exact expected version, `before(i)` called
/// before the `i`-th.
fn append_loop(
    db: &Database,
    w: usize,
    per: usize,
    mut before: impl FnMut(usize),
) -> Result<(), String> {
    let store = EventStore::new(db).with_durability(Durability::None);
    let name = format!("writer-{w}");
    for i in 0..per {
        before(i);
        store
            .append(&name, expected(i as u64), &[event(i, 1)])
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// E8's shape: `writers` threads append `per` events each to their own
/// stream, one per non-durable commit, as fast as they can, while a
/// subscriber tails the global log; returns the append-to-delivery latency's
/// p50 and p99 in µs.
fn tail_pass(
    db: &Database,
    writers: usize,
    per: usize,
) -> Result<(f64, f64), Box<dyn std::error::Error>> {
    use std::sync::atomic::{AtomicU64, Ordering};
    let total = writers * per;
    let sent: Vec<AtomicU64> = (0..total).map(|_| AtomicU64::new(0)).collect();
    let epoch = Instant::now();
    let recv = std::thread::scope(|s| -> Result<Vec<u64>, String> {
        let sub = s.spawn(|| -> Result<Vec<u64>, String> {
            let store = EventStore::new(db);
            let mut sub = store.subscribe_all(Position(0), EventFilter::all());
            let mut recv = vec![0u64; total];
            let mut got = 0;
            let deadline = Instant::now() + Duration::from_secs(60);
            while got < total && Instant::now() < deadline {
                let _ = sub
                    .poll_borrowed(Duration::from_millis(50), |m| {
                        if let SubscriptionMessage::Event(e) = m {
                            let now = epoch.elapsed().as_nanos() as u64;
                            let w: usize = e.stream[7..].parse().unwrap_or(0);
                            recv[w * per + e.version.0 as usize] = now;
                            got += 1;
                        }
                        ControlFlow::Continue(())
                    })
                    .map_err(|e| e.to_string())?;
            }
            Ok(recv)
        });
        let hs: Vec<_> = (0..writers)
            .map(|w| {
                let sent = &sent;
                s.spawn(move || -> Result<(), String> {
                    append_loop(db, w, per, |i| {
                        sent[w * per + i]
                            .store(epoch.elapsed().as_nanos() as u64, Ordering::Release)
                    })
                })
            })
            .collect();
        for h in hs {
            h.join().map_err(|_| "a writer panicked".to_string())??;
        }
        sub.join()
            .map_err(|_| "the subscriber panicked".to_string())?
    })?;
    let mut lat: Vec<f64> = recv
        .iter()
        .zip(&sent)
        .map(|(r, s)| r.saturating_sub(s.load(Ordering::Acquire)) as f64 / 1e3)
        .collect();
    lat.sort_by(f64::total_cmp);
    let at = |q: f64| lat[((lat.len() - 1) as f64 * q) as usize];
    Ok((at(0.5), at(0.99)))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg =
        |i: usize, default: usize| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(default);
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("events.cairn");
    let db = Database::create(&path)?;
    if args.first().map(String::as_str) == Some("load") {
        let (n, streams, batch) = (arg(1, 1_000_000), arg(2, 100).max(1), arg(3, 10_000).max(1));
        let start = Instant::now();
        load(&db, n, streams, batch, true)?;
        let s = start.elapsed().as_secs_f64();
        drop(db);
        let size = std::fs::metadata(&path)?.len();
        println!(
            "{n} events over {streams} streams, commits of {batch}: {:.0} events/s, {:.1} MiB",
            n as f64 / s,
            size as f64 / (1 << 20) as f64
        );
        return Ok(());
    }
    if args.first().map(String::as_str) == Some("catchup") {
        let (n, rounds) = (arg(1, 1_000_000), arg(2, 3).max(1));
        load(&db, n, 1_000, 10_000, false)?;
        if let Some(ms) = std::env::var("SLEEP_MS").ok().and_then(|s| s.parse().ok()) {
            // Time for the background spill of the load's overlay.
            std::thread::sleep(Duration::from_millis(ms));
        }
        for _ in 0..rounds {
            let start = Instant::now();
            let got = catchup_pass(&db, n, std::env::var_os("OWNED").is_some())?;
            let s = start.elapsed().as_secs_f64();
            println!(
                "caught up over {got} events: {:.0} events/s",
                got as f64 / s
            );
        }
        return Ok(());
    }
    if args.first().map(String::as_str) == Some("tail") {
        let (writers, per, rounds) = (arg(1, 4).max(1), arg(2, 500).max(1), arg(3, 5).max(1));
        for _ in 0..rounds {
            let dir = tempfile::tempdir()?;
            let db = Database::create(dir.path().join("tail.cairn"))?;
            let (p50, p99) = tail_pass(&db, writers, per)?;
            println!("{writers} writers × {per} events: delivery p50 {p50:.0} µs, p99 {p99:.0} µs");
        }
        return Ok(());
    }
    if args.first().map(String::as_str) == Some("writers") {
        let (threads, n) = (arg(1, 2).max(1), arg(2, 200_000));
        let per = n / threads;
        let start = Instant::now();
        std::thread::scope(|s| -> Result<(), String> {
            let hs: Vec<_> = (0..threads)
                .map(|t| {
                    let db = &db;
                    s.spawn(move || -> Result<(), String> { append_loop(db, t, per, |_| {}) })
                })
                .collect();
            for h in hs {
                h.join().map_err(|_| "a writer panicked".to_string())??;
            }
            Ok(())
        })?;
        let s = start.elapsed().as_secs_f64();
        println!(
            "{threads} writers, {} events: {:.0} events/s",
            per * threads,
            (per * threads) as f64 / s
        );
        return Ok(());
    }
    // `one N`, or just `N`.
    let n = arg(
        usize::from(args.first().map(String::as_str) == Some("one")),
        100_000,
    );
    let streams = 100usize;
    let names: Vec<String> = (0..streams).map(|i| format!("order-{i:04}")).collect();
    let events: Vec<EventData> = (0..n).map(|i| event(i, streams)).collect();
    let store = EventStore::new(&db).with_durability(Durability::None);
    let start = Instant::now();
    for (i, ev) in events.iter().enumerate() {
        let v = (i / streams) as u64;
        store.append(&names[i % streams], expected(v), std::slice::from_ref(ev))?;
    }
    let s = start.elapsed().as_secs_f64();
    println!("{n} appends: {:.2} µs/event", s * 1e6 / n as f64);
    Ok(())
}
