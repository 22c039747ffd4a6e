//! Helpers shared by the suites: seeds, sizes, scratch databases.
#![allow(dead_code)]

use cairndb::document::{Collection, Document};
use cairndb::{Database, Durability};

/// The seed for a randomized suite: `SEED` from the environment, else a
/// fresh one. Printed so a failure can be replayed.
pub fn seed(suite: &str) -> u64 {
    let s = std::env::var("SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        });
    eprintln!("{suite}: SEED={s}");
    s
}

/// The size of a randomized suite: `default` (the CI size) times `ITERS`
/// from the environment (a multiplier, default 1; nightly runs use more).
pub fn iters(default: u64) -> u64 {
    let factor: u64 = std::env::var("ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    default.saturating_mul(factor.max(1))
}

/// Prints a suite's one-line report and, when `CAIRN_REPORT_FILE` is set (CI
/// sets it), appends it there so the line is shown even though the test
/// harness captures the output of passing tests.
pub fn report(line: &str) {
    println!("{line}");
    if let Ok(path) = std::env::var("CAIRN_REPORT_FILE") {
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = writeln!(f, "{line}");
        }
    }
}

/// The collection `name` of `db`, its writes not waiting for durability
/// (scratch databases of the query and aggregate suites).
pub fn unsynced<'a>(db: &'a Database, name: &str) -> Collection<'a, Document> {
    db.collection::<Document>(name)
        .with_durability(Durability::None)
}

/// Every event of the global log, in position order.
pub fn whole_log(store: &cairndb::events::EventStore<'_>) -> Vec<cairndb::events::RecordedEvent> {
    use cairndb::events::{Direction, EventFilter, ReadFrom};
    store
        .read_all(
            ReadFrom::Start,
            Direction::Forward,
            usize::MAX,
            &EventFilter::all(),
        )
        .unwrap()
}
