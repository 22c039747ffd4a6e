//! A profiling driver for the event write path: the shape of `cairn bench`'s
//! E1 row — one event per non-durable commit, cycling over 100 entity
//! streams with exact expected versions — on one thread, so `perf record`
//! and `valgrind --tool=callgrind` see the append path alone.
//!
//! ```sh
//! cargo run --release -p cairndb --example event_appends -- 100000
//! valgrind --tool=callgrind target/release/examples/event_appends 20000
//! ```
//!
//! Prints microseconds per event (speed is measured by `cairn bench`).

use std::time::Instant;

use cairndb::events::{EventData, EventStore, ExpectedVersion, StreamVersion};
use cairndb::{Database, Durability};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    let streams = 100usize;
    let names: Vec<String> = (0..streams).map(|i| format!("order-{i:04}")).collect();
    let events: Vec<EventData> = (0..n)
        .map(|i| {
            let body = format!(
                "{{\"order\":{},\"item\":\"sku-{:05}\",\"qty\":{}}}",
                i % streams,
                i % 977,
                i % 7 + 1
            );
            EventData::new("ItemAdded", body.into_bytes())
        })
        .collect();
    let dir = tempfile::tempdir()?;
    let db = Database::create(dir.path().join("events.cairn"))?;
    let store = EventStore::new(&db).with_durability(Durability::None);
    let start = Instant::now();
    for (i, ev) in events.iter().enumerate() {
        let v = (i / streams) as u64;
        let expected = if v == 0 {
            ExpectedVersion::NoStream
        } else {
            ExpectedVersion::Exact(StreamVersion(v - 1))
        };
        store.append(&names[i % streams], expected, std::slice::from_ref(ev))?;
    }
    let s = start.elapsed().as_secs_f64();
    println!("{n} appends: {:.2} µs/event", s * 1e6 / n as f64);
    Ok(())
}
