//! Profiling aid: single-put non-durable commits and one-event appends.
use cairndb::events::{EventData, EventStore, ExpectedVersion};
use cairndb::{Database, Durability, TableDefinition};
use std::time::Instant;

const T: TableDefinition<u64, &[u8]> = TableDefinition::new("t");

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::create(dir.path().join("p.cairn")).unwrap();
    let n = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(200_000u64);
    let t0 = Instant::now();
    for i in 0..n {
        let txn = db.begin_write().unwrap();
        txn.set_durability(Durability::None);
        txn.open_table(T)
            .unwrap()
            .insert(i, [7u8; 40].as_slice())
            .unwrap();
        txn.commit().unwrap();
    }
    let kv = t0.elapsed().as_secs_f64() * 1e6 / n as f64;
    let store = EventStore::new(&db).with_durability(Durability::None);
    let t0 = Instant::now();
    for i in 0..n {
        let s = format!("entity-{}", i % 100);
        store
            .append(
                &s,
                ExpectedVersion::Any,
                &[EventData::new("Toggled", [1u8; 40].to_vec())],
            )
            .unwrap();
    }
    let ev = t0.elapsed().as_secs_f64() * 1e6 / n as f64;
    println!("kv put N: {kv:.2} us/commit; event append N: {ev:.2} us/event");
}
