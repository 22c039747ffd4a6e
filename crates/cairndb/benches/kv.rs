//! Criterion micro-benchmarks for CairnDB's key-value API.
//!
//! Run with `cargo bench -p cairndb --bench kv` (add a benchmark name to
//! filter, e.g. `-- get`). Every database lives in a fresh `tempfile`
//! directory, so the figures depend on the file system behind `$TMPDIR`
//! (`commit_durable` above all: it measures that device's flush).
//!
//! The shared data set is 100,000 entries with 12-byte keys `key_%08d` and
//! 27-byte values, bulk-loaded in one non-durable transaction and then
//! synced. Random choices come from a fixed-seed xorshift generator, so runs
//! are repeatable and need no extra dependency.

use std::hint::black_box;
use std::io::Write as _;
use std::path::Path;
use std::time::Duration;

use cairndb::{Database, Durability, ReadableTable, TableDefinition};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use tempfile::TempDir;

const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("bench");
/// Entries in the table the read benchmarks use.
const ENTRIES: u64 = 100_000;
/// Entries each bulk-insert iteration writes.
const BULK: u64 = 10_000;
const KEY_LEN: usize = 12;
const VALUE_LEN: usize = 27;

/// `key_%08d`: 12 bytes, so byte order is numeric order.
fn key(i: u64) -> [u8; KEY_LEN] {
    let mut k = [0u8; KEY_LEN];
    write!(&mut k[..], "key_{i:08}").expect("a 12-byte key");
    k
}

/// `val_%08d_` followed by filler: 27 bytes.
fn value(i: u64) -> [u8; VALUE_LEN] {
    let mut v = [b'x'; VALUE_LEN];
    write!(&mut v[..], "val_{i:08}_").expect("a 27-byte value");
    v
}

/// A small deterministic PRNG (xorshift64*).
struct Rng(u64);

impl Rng {
    fn new() -> Self {
        Rng(0x9E37_79B9_7F4A_7C15)
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// `0..n` in a fixed pseudo-random order (Fisher-Yates).
fn shuffled(n: u64) -> Vec<u64> {
    let mut v: Vec<u64> = (0..n).collect();
    let mut rng = Rng::new();
    for i in (1..v.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        v.swap(i, j);
    }
    v
}

fn create(dir: &Path) -> Database {
    Database::create(dir.join("bench.cairn")).expect("create database")
}

/// A database holding `n` entries, loaded in one commit and synced.
fn populated(n: u64) -> (TempDir, Database) {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = create(dir.path());
    let txn = db.begin_write().expect("begin_write");
    txn.set_durability(Durability::None);
    {
        let mut t = txn.open_table(TABLE).expect("open_table");
        for i in 0..n {
            t.append(&key(i)[..], &value(i)[..]).expect("append");
        }
    }
    txn.commit().expect("commit");
    db.sync().expect("sync");
    (dir, db)
}

/// `get`: one random point lookup (hit) in the 100k-entry table. The read
/// transaction and the table handle are opened once and reused, so this is
/// the B+tree descent plus key compare and value validation, pages cached.
fn bench_get(c: &mut Criterion) {
    let (_dir, db) = populated(ENTRIES);
    let read = db.begin_read().expect("begin_read");
    let t = read.open_table(TABLE).expect("open_table");
    let mut rng = Rng::new();
    let mut g = c.benchmark_group("get");
    g.throughput(Throughput::Elements(1));
    g.bench_function("random_100k", |b| {
        b.iter(|| {
            let k = key(rng.below(ENTRIES));
            let v = t.get(&k[..]).expect("get").expect("present");
            black_box(v.as_bytes().len())
        })
    });
    g.finish();
}

/// `insert`: a bulk load of 10,000 entries into an empty table in one write
/// transaction, including its `Durability::None` commit (page writes, no
/// flush). Creating the fresh database is setup and is not timed; neither is
/// closing it. Variants: `insert` in ascending key order, `insert` in random
/// order (more page splits, half-full pages), and `append` (ascending, with
/// its ordering check).
fn bench_insert(c: &mut Criterion) {
    let ascending: Vec<u64> = (0..BULK).collect();
    let random = shuffled(BULK);
    let mut g = c.benchmark_group("insert");
    g.throughput(Throughput::Elements(BULK));
    // 20 samples of a ~10 ms routine need a little more than the default 3 s.
    g.measurement_time(Duration::from_secs(5));
    for (name, order, append) in [
        ("ascending_10k", &ascending, false),
        ("random_10k", &random, false),
        ("append_10k", &ascending, true),
    ] {
        g.bench_function(name, |b| {
            b.iter_batched(
                || {
                    let dir = tempfile::tempdir().expect("temp dir");
                    let db = create(dir.path());
                    (dir, db)
                },
                |(dir, db)| {
                    let txn = db.begin_write().expect("begin_write");
                    txn.set_durability(Durability::None);
                    {
                        let mut t = txn.open_table(TABLE).expect("open_table");
                        for &i in order.iter() {
                            if append {
                                t.append(&key(i)[..], &value(i)[..]).expect("append");
                            } else {
                                t.insert(&key(i)[..], &value(i)[..]).expect("insert");
                            }
                        }
                    }
                    txn.commit().expect("commit");
                    // Returned, so dropping (closing) happens outside the timing.
                    (dir, db)
                },
                BatchSize::PerIteration,
            )
        });
    }
    g.finish();
}

/// `scan`: a full forward iteration over the 100k-entry table, decoding every
/// key and value; includes beginning the read transaction and opening the
/// table (negligible next to the scan).
fn bench_scan(c: &mut Criterion) {
    let (_dir, db) = populated(ENTRIES);
    let mut g = c.benchmark_group("scan");
    g.throughput(Throughput::Elements(ENTRIES));
    g.bench_function("full_100k", |b| {
        b.iter(|| {
            let read = db.begin_read().expect("begin_read");
            let t = read.open_table(TABLE).expect("open_table");
            let mut n = 0u64;
            let mut bytes = 0usize;
            for e in t.iter().expect("iter") {
                let (k, v) = e.expect("entry");
                bytes += k.value().len() + v.value().len();
                n += 1;
            }
            assert_eq!(n, ENTRIES);
            black_box(bytes)
        })
    });
    g.finish();
}

/// One write transaction inserting one small entry (a fresh key each time,
/// into a table that grows across iterations), committed with `durability`.
fn small_commit(c: &mut Criterion, group: &str, durability: Durability) {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = create(dir.path());
    let mut i = 0u64;
    let mut g = c.benchmark_group(group);
    g.throughput(Throughput::Elements(1));
    g.bench_function("one_insert", |b| {
        b.iter(|| {
            let txn = db.begin_write().expect("begin_write");
            txn.set_durability(durability);
            txn.open_table(TABLE)
                .expect("open_table")
                .insert(&key(i)[..], &value(i)[..])
                .expect("insert");
            i += 1;
            txn.commit().expect("commit")
        })
    });
    g.finish();
}

/// `commit_durable`: one small insert and a `Durability::Immediate` commit,
/// i.e. the copy-on-write page writes, the commit slot write and one real
/// fdatasync per iteration. Dominated by the device's flush latency.
fn bench_commit_durable(c: &mut Criterion) {
    small_commit(c, "commit_durable", Durability::Immediate);
}

/// `commit_nondurable`: one small insert and a `Durability::None` commit: the
/// same page and slot writes (to the OS cache) without the flush. The fixed
/// cost of a transaction.
fn bench_commit_nondurable(c: &mut Criterion) {
    small_commit(c, "commit_nondurable", Durability::None);
}

/// `range_10`: a range read of 10 consecutive entries starting at a random
/// existing key of the 100k-entry table (read transaction reused): one
/// descent plus a short leaf walk.
fn bench_range_10(c: &mut Criterion) {
    let (_dir, db) = populated(ENTRIES);
    let read = db.begin_read().expect("begin_read");
    let t = read.open_table(TABLE).expect("open_table");
    let mut rng = Rng::new();
    let mut g = c.benchmark_group("range_10");
    g.throughput(Throughput::Elements(10));
    g.bench_function("random_start_100k", |b| {
        b.iter(|| {
            let start = key(rng.below(ENTRIES - 10));
            let mut bytes = 0usize;
            for e in t.range(&start[..]..).expect("range").take(10) {
                let (_, v) = e.expect("entry");
                bytes += v.value().len();
            }
            assert_eq!(bytes, 10 * VALUE_LEN);
            black_box(bytes)
        })
    });
    g.finish();
}

/// Modest settings, so the whole suite runs in a few minutes on two cores.
fn config() -> Criterion {
    Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
}

criterion_group! {
    name = benches;
    config = config();
    targets = bench_get, bench_insert, bench_scan, bench_commit_durable,
        bench_commit_nondurable, bench_range_10
}
criterion_main!(benches);
