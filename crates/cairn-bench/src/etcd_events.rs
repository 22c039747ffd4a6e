//! `cairn bench events --backend etcd://…` (feature `etcd`): the event
//! store's rows on the cluster (`EtcdDatabase::events`, the embedded
//! engine's event code through the storage seam) and on the embedded engine
//! (`EventStore` on a temporary file) side by side — one-event and
//! 10-event durable appends, a stream read, a global-log read and a
//! catch-up subscription. Small counts, so a run takes seconds; the header
//! (shared with the KV rows) names the cluster's endpoints, members and
//! fsync mode, and the requests one append sent
//! (`EtcdDatabase::round_trips`).
//!
//! An event store is append-only: the run's events stay in the prefix, in
//! streams named after the run (`bench-<run>-one`, `bench-<run>-ten`), and
//! its reads start at the position where the run's first event went, so
//! runs on the same prefix do not see each other's streams (give the bench
//! a scratch prefix).

use std::io::Write;
use std::time::Duration;

use cairndb::events::{
    Direction, EventData, EventFilter, EventStore, ExpectedVersion, Position, ReadFrom,
    StreamVersion, SubscriptionMessage,
};
use cairndb_etcd::EtcdDatabase;

use crate::args::EventArgs;
use crate::engine::Res;
use crate::etcd_costs::Probe;
use crate::etcd_rows::{fmt_us, header, row_json, time, write_json, Figures};

/// One-event appends timed.
const ONE_EVENT_APPENDS: usize = 100;
/// 10-event appends timed.
const TEN_EVENT_APPENDS: usize = 20;
/// Reads of the one-event stream (all its events each).
const STREAM_READS: usize = 20;
/// Reads of the run's part of the global log, and catch-up subscriptions.
const LOG_READS: usize = 5;
const CATCH_UPS: usize = 3;
/// The events of the run: what a global read and a catch-up deliver.
const RUN_EVENTS: usize = ONE_EVENT_APPENDS + 10 * TEN_EVENT_APPENDS;
/// How long a subscription may wait for its next message.
const SUBSCRIPTION_WAIT: Duration = Duration::from_secs(10);

/// The event store of one engine.
trait Events {
    fn append(&self, stream: &str, events: &[EventData]) -> Res<()>;
    fn read_stream(&self, stream: &str, limit: usize) -> Res<usize>;
    fn read_all(&self, from: Position, limit: usize) -> Res<usize>;
    /// Events a subscription from `from` delivers until it is caught up.
    fn catch_up(&self, from: Position) -> Res<usize>;
    fn next_position(&self) -> Res<Position>;
}

/// Counts a subscription's events until `CaughtUp`.
fn count_until_caught_up<P>(
    mut next: impl FnMut() -> Res<Option<SubscriptionMessage<P>>>,
) -> Res<usize> {
    let mut n = 0;
    loop {
        match next()? {
            Some(SubscriptionMessage::Event(_)) => n += 1,
            Some(SubscriptionMessage::CaughtUp { .. }) => return Ok(n),
            None => {
                return Err(format!(
                    "a catch-up subscription delivered nothing for {SUBSCRIPTION_WAIT:?}"
                )
                .into())
            }
        }
    }
}

impl Events for EventStore<'_> {
    fn append(&self, stream: &str, events: &[EventData]) -> Res<()> {
        EventStore::append(self, stream, ExpectedVersion::Any, events)?;
        Ok(())
    }
    fn read_stream(&self, stream: &str, limit: usize) -> Res<usize> {
        let from = ReadFrom::At(StreamVersion(0));
        Ok(EventStore::read_stream(self, stream, from, Direction::Forward, limit)?.len())
    }
    fn read_all(&self, from: Position, limit: usize) -> Res<usize> {
        let all = EventFilter::all();
        let got = EventStore::read_all(self, ReadFrom::At(from), Direction::Forward, limit, &all)?;
        Ok(got.len())
    }
    fn catch_up(&self, from: Position) -> Res<usize> {
        let mut sub = self.subscribe_all(from, EventFilter::all());
        count_until_caught_up(|| Ok(sub.next_timeout(SUBSCRIPTION_WAIT)?))
    }
    fn next_position(&self) -> Res<Position> {
        Ok(EventStore::next_position(self)?)
    }
}

impl Events for EtcdDatabase {
    fn append(&self, stream: &str, events: &[EventData]) -> Res<()> {
        self.events().append(stream, ExpectedVersion::Any, events)?;
        Ok(())
    }
    fn read_stream(&self, stream: &str, limit: usize) -> Res<usize> {
        let from = ReadFrom::At(StreamVersion(0));
        Ok(self
            .events()
            .read_stream(stream, from, Direction::Forward, limit)?
            .len())
    }
    fn read_all(&self, from: Position, limit: usize) -> Res<usize> {
        let all = EventFilter::all();
        let got = self
            .events()
            .read_all(ReadFrom::At(from), Direction::Forward, limit, &all)?;
        Ok(got.len())
    }
    fn catch_up(&self, from: Position) -> Res<usize> {
        let mut sub = self.events().subscribe_all(from, EventFilter::all());
        count_until_caught_up(|| Ok(sub.next_timeout(SUBSCRIPTION_WAIT)?))
    }
    fn next_position(&self) -> Res<Position> {
        Ok(self.events().next_position()?)
    }
}

fn event(i: usize) -> EventData {
    EventData::new("BenchEvent", format!("{{\"n\":{i},\"pad\":\"{:064}\"}}", i))
}

/// The rows on one engine, in order: each row's figures per operation and
/// the events one operation moves.
fn rows(ev: &dyn Events, run: &str) -> Res<Vec<(&'static str, Figures, f64)>> {
    let (one, ten) = (format!("bench-{run}-one"), format!("bench-{run}-ten"));
    let start = ev.next_position()?;
    let mut out = Vec::new();
    let f = time(|i| ev.append(&one, &[event(i)]), ONE_EVENT_APPENDS)?;
    out.push(("one-event append (durable)", f, 1.0));
    let batch: Vec<Vec<EventData>> = (0..TEN_EVENT_APPENDS)
        .map(|a| (0..10).map(|i| event(a * 10 + i)).collect())
        .collect();
    let f = time(|i| ev.append(&ten, &batch[i]), TEN_EVENT_APPENDS)?;
    out.push(("10-event append (durable, per append)", f, 10.0));
    let f = time(
        |_| match ev.read_stream(&one, ONE_EVENT_APPENDS)? {
            n if n == ONE_EVENT_APPENDS => Ok(()),
            n => Err(
                format!("a read of stream {one} found {n} of {ONE_EVENT_APPENDS} events").into(),
            ),
        },
        STREAM_READS,
    )?;
    out.push((
        "read a stream, 100 events (per read)",
        f,
        ONE_EVENT_APPENDS as f64,
    ));
    let f = time(
        |_| match ev.read_all(start, RUN_EVENTS)? {
            n if n == RUN_EVENTS => Ok(()),
            n => Err(format!("a global read found {n} of {RUN_EVENTS} events").into()),
        },
        LOG_READS,
    )?;
    out.push((
        "read the global log, 300 events (per read)",
        f,
        RUN_EVENTS as f64,
    ));
    let f = time(
        |_| match ev.catch_up(start)? {
            n if n >= RUN_EVENTS => Ok(()),
            n => {
                Err(format!("a catch-up subscription delivered {n} of {RUN_EVENTS} events").into())
            }
        },
        CATCH_UPS,
    )?;
    out.push((
        "catch-up subscription over 300 events (per subscription)",
        f,
        RUN_EVENTS as f64,
    ));
    Ok(out)
}

/// Runs the rows on the embedded engine (a temporary file, durable
/// commits) and on the cluster of `url`, and prints one table.
pub fn run(args: &EventArgs, url: &str, w: &mut dyn Write) -> Res<()> {
    let dir = tempfile::tempdir()?;
    let etcd = EtcdDatabase::connect(url)?;
    let costs_probe = Probe::start(&etcd)?;
    // The header comes first but holds what the rows cost the cluster:
    // the lines after it are kept until the rows are done.
    let out = w;
    let mut body = Vec::new();
    let w: &mut dyn Write = &mut body;
    let run = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros())
        .unwrap_or(0)
        .to_string();
    // The requests of one one-event append into an existing stream.
    let stream = format!("bench-{run}-probe");
    etcd.events()
        .append(&stream, ExpectedVersion::NoStream, &[event(0)])?;
    let before = etcd.round_trips();
    etcd.events()
        .append(&stream, ExpectedVersion::Any, &[event(1)])?;
    writeln!(
        w,
        "etcd requests per one-event append: {} (into an existing stream, ExpectedVersion::Any; \
         EtcdDatabase::round_trips)",
        etcd.round_trips() - before
    )?;
    writeln!(
        w,
        "events: {}-byte payloads; the run's streams bench-{run}-one and bench-{run}-ten stay \
         in the prefix (an event store is append-only)",
        event(0).data.len()
    )?;
    writeln!(w)?;
    let file = cairndb::Database::create(dir.path().join("events.cairn"))?;
    let local = rows(&EventStore::new(&file), &run)?;
    let remote = rows(&etcd, &run)?;
    writeln!(
        w,
        "| row | cairn median (p90) | etcd median (p90) | cairn events/s | etcd events/s | etcd / cairn |"
    )?;
    writeln!(w, "|---|---|---|---|---|---|")?;
    let mut json_rows = Vec::new();
    for ((name, c, n), (_, e, _)) in local.iter().zip(&remote) {
        json_rows.push(row_json(name, c, e, *n));
        writeln!(
            w,
            "| {name} | {} ({}) | {} ({}) | {:.0} | {:.0} | {:.1}× slower |",
            fmt_us(c.median_us),
            fmt_us(c.p90_us),
            fmt_us(e.median_us),
            fmt_us(e.p90_us),
            c.ops_per_s * n,
            e.ops_per_s * n,
            e.median_us / c.median_us.max(1e-9)
        )?;
    }
    let costs = costs_probe.finish();
    header(out, "events", &etcd, dir.path(), &costs)?;
    out.write_all(&body)?;
    write_json(
        args.common.json.as_deref(),
        "events",
        &etcd,
        &costs,
        json_rows,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairndb_etcd::testing::cluster_or_skip;

    /// Parses a latency cell (`12.3 µs`, `4.56 ms`) into µs.
    fn us(cell: &str) -> f64 {
        let cell = cell.trim();
        let (n, scale) = match cell.strip_suffix(" ms") {
            Some(n) => (n, 1000.0),
            None => (cell.strip_suffix(" µs").unwrap_or(cell), 1.0),
        };
        n.parse::<f64>()
            .unwrap_or_else(|_| panic!("a latency: {cell:?}"))
            * scale
    }

    #[test]
    fn the_etcd_event_rows_run_beside_the_embedded_engine() {
        let Some(cluster) =
            cluster_or_skip("the_etcd_event_rows_run_beside_the_embedded_engine").unwrap()
        else {
            return;
        };
        let url = cluster.url("bench-events");
        for attempt in 0..2 {
            // A second run on the same prefix works (its own streams).
            let mut out = Vec::new();
            run(&EventArgs::default(), &url, &mut out).unwrap();
            let text = String::from_utf8(out).unwrap();
            // The figures, for `--nocapture` (BENCHMARKS.md has a run).
            eprintln!("{text}");
            assert!(
                text.starts_with("# cairn bench events --backend etcd"),
                "{text}"
            );
            assert!(text.contains("etcd members: 3 ("), "{text}");
            assert!(text.contains("etcd fsync: "), "{text}");
            // The cluster's costs head the report, above the lines kept
            // while the rows ran.
            let costs = text.find("etcd backend commit during the run").unwrap();
            assert!(
                costs < text.find("etcd requests per one-event append").unwrap(),
                "{text}"
            );
            assert!(
                text.contains("etcd network: a get of a missing key"),
                "{text}"
            );
            assert!(!text.contains("not reported"), "{text}");
            for m in cluster.members() {
                assert!(
                    text.contains(&format!("http://{}", m.client_address())),
                    "{text}"
                );
            }
            assert!(
                text.contains("etcd requests per one-event append: 5 "),
                "{text}"
            );
            let rows: Vec<Vec<&str>> = text
                .lines()
                .filter(|l| l.starts_with("| ") && !l.starts_with("| row"))
                .map(|l| l.trim_matches('|').split(" | ").collect())
                .collect();
            let names: Vec<&str> = rows.iter().map(|r| r[0].trim()).collect();
            assert_eq!(
                names,
                [
                    "one-event append (durable)",
                    "10-event append (durable, per append)",
                    "read a stream, 100 events (per read)",
                    "read the global log, 300 events (per read)",
                    "catch-up subscription over 300 events (per subscription)",
                ],
                "attempt {attempt}: {text}"
            );
            for r in &rows {
                // median (p90): both positive, the median not above the p90.
                for engine in [r[1], r[2]] {
                    let (median, p90) = engine.trim_end_matches(')').split_once(" (").unwrap();
                    let (median, p90) = (us(median), us(p90));
                    assert!(median > 0.0 && median <= p90, "{}: {text}", r[0]);
                    assert!(p90 < 60e6, "{}: a minute per operation: {text}", r[0]);
                }
                for rate in [r[3], r[4]] {
                    let rate: f64 = rate.trim().parse().unwrap();
                    assert!(rate > 0.0, "{}: {text}", r[0]);
                }
            }
            // A 10-event append moves more events per second than a
            // one-event one on the cluster (one commit either way).
            let rate = |i: usize| rows[i][4].trim().parse::<f64>().unwrap();
            assert!(rate(1) > rate(0), "{text}");
        }
    }
}
