//! The read path alone, for profiling (`perf record`, `valgrind
//! --tool=callgrind`): the shape of `cairn bench`'s suite T reads — 100,000
//! keys `key_00000000`.. with 27 or 100-byte values loaded in one
//! transaction, then full scans (T4) and gets in key order (T2) in one read
//! transaction each. Speed is measured by `cairn bench`, not here; the
//! printed rates only say the run did its work.
//!
//! `cargo run --release -p cairndb --example read_path -- [scan|get|get-random|range|both|cold-scan|cold-get|cold-get-random|cold] [rounds] [value bytes]`
//!
//! `get-random` gets the same keys in a fixed shuffled order (suite R's random gets);
//! `range` reads 10 entries from each of half the keys in that order (R7).
//! With `RANDOM_KEYS=1` the keys are 24 random bytes (suite R's), loaded in
//! that order. `N=...` sets the number of keys (100,000). `WRITES=n` adds
//! n single-insert non-durable commits after the load (their changes wait in
//! the memtable, as after suite R's R4); `R_SUITE=1` makes suite R's writes
//! (R2–R4) after the load. `SLEEP_MS=n` waits that long before the reads
//! (the background spill applies the memtable to the trees after 50 ms
//! without writes); `STATS=1` prints the table's shape and the memtable's
//! size before them.
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

/// Ten entries from each of `starts`, in one read transaction.
#[inline(never)]
fn range_pass(db: &Database, starts: &[Vec<u8>]) -> Result<usize, cairndb::Error> {
    let mut sum = 0;
    let read = db.begin_read()?;
    let t = read.open_table(TABLE)?;
    for s in starts {
        for e in t.range(s.as_slice()..)?.take(10) {
            let (k, v) = e?;
            sum += k.value().len() + v.value().len();
        }
    }
    Ok(sum)
}

/// `keys` in a fixed shuffled order (xorshift), the same on every run.
fn shuffled(keys: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut order = keys.to_vec();
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for i in (1..order.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        order.swap(i, (x % (i as u64 + 1)) as usize);
    }
    order
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
    let n: usize = std::env::var("N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    // RANDOM_KEYS=1: suite R's shape instead (24 random bytes per key,
    // inserted in that random order, so leaves are partly full).
    let random_keys = std::env::var_os("RANDOM_KEYS").is_some();
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let keys: Vec<Vec<u8>> = (0..n)
        .map(|i| {
            if !random_keys {
                return format!("key_{i:08}").into_bytes();
            }
            (0..3)
                .flat_map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x.to_be_bytes()
                })
                .collect()
        })
        .collect();
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

    // WRITES=n: then n single-insert non-durable commits of fresh keys
    // (suite R's R4 before its reads: the changes wait in the memtable).
    let writes: usize = std::env::var("WRITES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let mut fresh = 0u64;
    let mut commit_fresh = |count: usize, durable: bool| -> Result<(), cairndb::Error> {
        let txn = db.begin_write()?;
        if !durable {
            txn.set_durability(cairndb::Durability::None);
        }
        {
            let mut t = txn.open_table(TABLE)?;
            for _ in 0..count {
                fresh += 1;
                let key = fresh
                    .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                    .to_be_bytes()
                    .repeat(3);
                t.insert(key.as_slice(), vals[fresh as usize % n].as_slice())?;
            }
        }
        txn.commit()?;
        Ok(())
    };
    for _ in 0..writes {
        commit_fresh(1, false)?;
    }
    // R_SUITE=1: suite R's writes before its reads at this scale: R2 (1,000
    // single-insert commits, D then N), R3 (100 commits of 1,000, D then N)
    // and R4 (50,000 single-insert commits, N).
    if std::env::var_os("R_SUITE").is_some() {
        for durable in [true, false] {
            for _ in 0..1_000 {
                commit_fresh(1, durable)?;
            }
        }
        for durable in [true, false] {
            for _ in 0..100 {
                commit_fresh(1_000, durable)?;
            }
        }
        for _ in 0..50_000 {
            commit_fresh(1, false)?;
        }
    }

    if let Some(ms) = std::env::var("SLEEP_MS").ok().and_then(|s| s.parse().ok()) {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
    if std::env::var_os("STATS").is_some() {
        let st = db.stats()?;
        eprintln!(
            "leaves {} branches {} overlay entries {} tables {:?}",
            st.leaf_pages, st.branch_pages, st.overlay_entries, st.tables
        );
    }
    let cold = what.starts_with("cold");
    let mut db = Some(db);
    let mut sum = 0usize;
    let mut run = |pass: &dyn Fn(&Database) -> Result<usize, cairndb::Error>,
                   cold: bool|
     -> Result<f64, cairndb::Error> {
        let mut secs = 0.0;
        for _ in 0..rounds {
            let db = handle(&mut db, cold, &path)?;
            let start = Instant::now();
            sum += pass(db)?;
            secs += start.elapsed().as_secs_f64();
        }
        Ok(secs)
    };
    if matches!(what, "scan" | "both" | "cold-scan" | "cold") {
        let secs = run(&scan_pass, cold)?;
        println!("scan: {:.1}M entries/s", (rounds * n) as f64 / secs / 1e6);
    }
    if what == "get-random" || what == "cold-get-random" {
        let order = shuffled(&keys);
        let secs = run(&|db| get_pass(db, &order), cold)?;
        let rate = (rounds * n) as f64 / secs / 1e6;
        println!("get-random: {rate:.2}M gets/s");
    }
    if what == "range" {
        // Suite R's R7: ranges of 10 entries from every other key of the
        // shuffled order, in one read transaction.
        let mut order = shuffled(&keys);
        order.truncate(n / 2);
        let secs = run(&|db| range_pass(db, &order), false)?;
        let rate = (rounds * order.len()) as f64 / secs / 1e6;
        println!("range: {rate:.2}M ranges/s");
    }
    if matches!(what, "get" | "both" | "cold-get" | "cold") {
        let secs = run(&|db| get_pass(db, &keys), cold)?;
        println!("get: {:.2}M gets/s", (rounds * n) as f64 / secs / 1e6);
    }
    if std::env::var_os("STATS").is_some() {
        if let Some(db) = &db {
            let io = db.io_counters();
            eprintln!(
                "after the reads: cache hits {} misses {} cached pages {}",
                io.cache_hits, io.cache_misses, io.cached_pages
            );
        }
    }
    println!("({sum} bytes touched)");
    Ok(())
}
