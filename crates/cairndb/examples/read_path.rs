//! The read path alone, for profiling (`perf record`, `valgrind
//! --tool=callgrind`): the shape of `cairn bench`'s suite T reads — 100,000
//! keys `key_00000000`.. with 27 or 100-byte values loaded in one
//! transaction, then full scans (T4) and gets in key order (T2) in one read
//! transaction each. Speed is measured by `cairn bench`, not here; the
//! printed rates only say the run did its work.
//!
//! `cargo run --release -p cairndb --example read_path -- [scan|get|both] [rounds] [value bytes]`

use cairndb::{Database, ReadableTable, TableDefinition};
use std::time::Instant;

const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("kv");

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let what = args.get(1).map(String::as_str).unwrap_or("both");
    let rounds: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(20);
    let vsize: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(100);
    let n = 100_000usize;
    let keys: Vec<Vec<u8>> = (0..n).map(|i| format!("key_{i:08}").into_bytes()).collect();
    let vals: Vec<Vec<u8>> = (0..n)
        .map(|i| {
            let mut v = format!("value_{i:08}_padding_data").into_bytes();
            v.resize(vsize.max(v.len()), b'x');
            v
        })
        .collect();
    let dir = tempfile::tempdir()?;
    let db = Database::create(dir.path().join("read.cairn"))?;
    let txn = db.begin_write()?;
    {
        let mut t = txn.open_table(TABLE)?;
        for (k, v) in keys.iter().zip(&vals) {
            t.insert(k.as_slice(), v.as_slice())?;
        }
    }
    txn.commit()?;

    let mut sum = 0usize;
    if what == "scan" || what == "both" {
        let start = Instant::now();
        for _ in 0..rounds {
            let read = db.begin_read()?;
            let t = read.open_table(TABLE)?;
            for e in t.iter()? {
                let (k, v) = e?;
                sum += k.value().len() + v.value().len();
            }
        }
        let s = start.elapsed().as_secs_f64();
        println!("scan: {:.1}M entries/s", (rounds * n) as f64 / s / 1e6);
    }
    if what == "get" || what == "both" {
        let start = Instant::now();
        for _ in 0..rounds {
            let read = db.begin_read()?;
            let t = read.open_table(TABLE)?;
            for k in &keys {
                if let Some(v) = t.get(k.as_slice())? {
                    sum += v.value().len();
                }
            }
        }
        let s = start.elapsed().as_secs_f64();
        println!("get: {:.2}M gets/s", (rounds * n) as f64 / s / 1e6);
    }
    println!("({sum} bytes touched)");
    Ok(())
}
