//! The read path alone, for profiling (`perf record`, `valgrind
//! --tool=callgrind`): the shape of `cairn bench`'s suite T reads — 100,000
//! keys `key_00000000`.. with 27 or 100-byte values loaded in one
//! transaction, then full scans (T4) and gets in key order (T2) in one read
//! transaction each. Speed is measured by `cairn bench`, not here; the
//! printed rates only say the run did its work.
//!
//! `cargo run --release -p cairndb --example read_path -- [scan|get|get-random|both|cold-scan|cold-get|cold] [rounds] [value bytes]`
//!
//! `get-random` gets the same keys in a fixed shuffled order (suite R's random gets).
//!
//! The `cold` modes are suite T's T2r–T4r: before each round the file is
//! closed and reopened, so the engine's page cache is empty (the OS page
//! cache stays hot) and every page is read, verified and indexed on its
//! first visit. Each pass over the table is its own function (`scan_pass`,
//! `get_pass`), so that callgrind can count just the reads:
//! `valgrind --tool=callgrind --toggle-collect='*read_path*scan_pass*' target/release/examples/read_path cold-scan 5 100`.

use cairndb::{Database, ReadableTable, TableDefinition};
use std::path::Path;
use std::time::Instant;

const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("kv");

/// One full scan in one read transaction; the bytes it saw.
#[inline(never)]
fn scan_pass(db: &Database) -> Result<usize, cairndb::Error> {
    let mut sum = 0;
    let read = db.begin_read()?;
    let t = read.open_table(TABLE)?;
    for e in t.iter()? {
        let (k, v) = e?;
        sum += k.value().len() + v.value().len();
    }
    Ok(sum)
}

/// A get of every key, in key order, in one read transaction.
#[inline(never)]
fn get_pass(db: &Database, keys: &[Vec<u8>]) -> Result<usize, cairndb::Error> {
    let mut sum = 0;
    let read = db.begin_read()?;
    let t = read.open_table(TABLE)?;
    for k in keys {
        if let Some(v) = t.get(k.as_slice())? {
            sum += v.value().len();
        }
    }
    Ok(sum)
}

/// The handle for the next round: for a cold round the file is closed and
/// reopened first (an empty page cache; the OS page cache stays hot).
fn handle<'a>(
    db: &'a mut Option<Database>,
    cold: bool,
    path: &Path,
) -> Result<&'a Database, cairndb::Error> {
    if cold {
        // The old handle closes (and unlocks the file) before the reopen.
        drop(db.take());
    }
    if db.is_none() {
        return Ok(db.insert(Database::open(path)?));
    }
    Ok(db.as_ref().unwrap_or_else(|| unreachable!("checked above")))
}

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
    let path = dir.path().join("read.cairn");
    let db = Database::create(&path)?;
    let txn = db.begin_write()?;
    {
        let mut t = txn.open_table(TABLE)?;
        for (k, v) in keys.iter().zip(&vals) {
            t.insert(k.as_slice(), v.as_slice())?;
        }
    }
    txn.commit()?;

    let cold = what.starts_with("cold");
    let mut db = Some(db);
    let mut sum = 0usize;
    if matches!(what, "scan" | "both" | "cold-scan" | "cold") {
        let mut secs = 0.0;
        for _ in 0..rounds {
            let db = handle(&mut db, cold, &path)?;
            let start = Instant::now();
            sum += scan_pass(db)?;
            secs += start.elapsed().as_secs_f64();
        }
        println!("scan: {:.1}M entries/s", (rounds * n) as f64 / secs / 1e6);
    }
    if what == "get-random" {
        // A fixed shuffle (xorshift), the same on every run.
        let mut order = keys.clone();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for i in (1..order.len()).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            order.swap(i, (x % (i as u64 + 1)) as usize);
        }
        let mut secs = 0.0;
        for _ in 0..rounds {
            let db = handle(&mut db, false, &path)?;
            let start = Instant::now();
            sum += get_pass(db, &order)?;
            secs += start.elapsed().as_secs_f64();
        }
        println!(
            "get-random: {:.2}M gets/s",
            (rounds * n) as f64 / secs / 1e6
        );
    }
    if matches!(what, "get" | "both" | "cold-get" | "cold") {
        let mut secs = 0.0;
        for _ in 0..rounds {
            let db = handle(&mut db, cold, &path)?;
            let start = Instant::now();
            sum += get_pass(db, &keys)?;
            secs += start.elapsed().as_secs_f64();
        }
        println!("get: {:.2}M gets/s", (rounds * n) as f64 / secs / 1e6);
    }
    println!("({sum} bytes touched)");
    Ok(())
}
