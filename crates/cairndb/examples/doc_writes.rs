//! A profiling driver for the document write path: tiedot's benchmark
//! document with its six indexes, one document per non-durable commit, on
//! one thread (so `perf record` and `valgrind --tool=callgrind` see the
//! write path alone, without the bench's workers).
//!
//! ```sh
//! cargo run --release -p cairndb --example doc_writes -- 100000 [insert|get|lookup|update|delete|all]
//! valgrind --tool=callgrind target/release/examples/doc_writes 5000 all
//! valgrind --tool=callgrind --toggle-collect='*lookups*' target/release/examples/doc_writes 20000 lookup
//! valgrind --tool=callgrind --toggle-collect='*updates*' target/release/examples/doc_writes 20000 update
//! ```
//!
//! Prints each phase's operations per second. With `THREADS=T` in the
//! environment, the insert, update and delete phases split their
//! documents over `T` threads (the bench's workers). `lookup` runs the bench's
//! tiedot lookup query (an `$or` of two equality-and-`$ne` arms and an
//! `$elemMatch` range, answered by an index union) after the inserts.

use std::time::Instant;

use cairndb::document::IndexOptions;
use cairndb::{Database, Durability};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Inner {
    #[serde(rename = "str")]
    s: String,
    #[serde(rename = "int")]
    i: i64,
    #[serde(rename = "float")]
    f: f64,
}

#[derive(Serialize, Deserialize)]
struct Outer {
    nested: Inner,
}

#[derive(Serialize, Deserialize)]
struct Doc {
    #[serde(rename = "_id")]
    id: i64,
    nested: Outer,
    strs: Vec<String>,
    ints: Vec<i64>,
    floats: Vec<f64>,
}

/// SplitMix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn doc(rng: &mut Rng, id: i64, n: u64) -> Doc {
    let f = rng.unit();
    Doc {
        id,
        nested: Outer {
            nested: Inner {
                s: rng.unit().to_string(),
                i: rng.below(n) as i64,
                f,
            },
        },
        strs: vec![rng.unit().to_string(), rng.unit().to_string()],
        ints: vec![rng.below(n) as i64, rng.below(n) as i64],
        floats: vec![f64::from(rng.unit() as f32), f64::from(rng.unit() as f32)],
    }
}

/// Reads by `_id`, each document decoded (the read phase).
#[inline(never)]
fn gets(
    c: &cairndb::document::Collection<Doc>,
    ids: &[i64],
) -> Result<u64, Box<dyn std::error::Error>> {
    let mut found = 0;
    for id in ids {
        if c.get(*id)?.is_some() {
            found += 1;
        }
    }
    Ok(found)
}

/// One replace per commit (the update phase).
#[inline(never)]
fn updates(
    c: &cairndb::document::Collection<Doc>,
    docs: &[Doc],
) -> Result<(), Box<dyn std::error::Error>> {
    for d in docs {
        c.replace(d)?;
    }
    Ok(())
}

/// One delete by `_id` per commit (the delete phase).
#[inline(never)]
fn deletes(
    c: &cairndb::document::Collection<Doc>,
    ids: &[i64],
) -> Result<(), Box<dyn std::error::Error>> {
    for id in ids {
        c.delete_id(*id)?;
    }
    Ok(())
}

/// tiedot's lookup query, as the bench's `lookup_filter` builds it; the
/// documents are counted raw (not decoded).
#[inline(never)]
fn lookups(
    c: &cairndb::document::Collection<Doc>,
    queries: &[(u64, u64, u64)],
) -> Result<u64, Box<dyn std::error::Error>> {
    let mut found = 0;
    for &(a, b, r) in queries {
        let filter = serde_json::json!({"$or": [
            {"nested.nested.int": a, "ints": {"$ne": b}},
            {"ints": b, "nested.nested.int": {"$ne": a}},
            {"ints": {"$elemMatch": {"$gte": r, "$lte": r + 2}}},
        ]});
        let mut res = c.find(filter)?;
        while res.next_raw()?.is_some() {
            found += 1;
        }
    }
    Ok(found)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let n: u64 = args
        .get(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(100_000);
    let what = args.get(2).map(String::as_str).unwrap_or("all");
    let dir = tempfile::tempdir()?;
    let mut b = Database::builder();
    if let Ok(mib) = std::env::var("OVERLAY_MIB") {
        b.overlay_size(mib.parse::<usize>()? << 20);
    }
    let db = b.create(dir.path().join("w.cairn"))?;
    let c = db
        .collection::<Doc>("docs")
        .with_durability(Durability::None);
    for p in [
        "nested.nested.str",
        "nested.nested.int",
        "nested.nested.float",
        "strs",
        "ints",
        "floats",
    ] {
        c.create_index(&[(p, 1)], IndexOptions::default())?;
    }
    let mut rng = Rng(0x5eed);
    let docs: Vec<Doc> = (0..n as i64).map(|i| doc(&mut rng, i, n)).collect();
    let threads: usize = std::env::var("THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
        .max(1);
    // Runs `f` over `items` split between the threads.
    fn split<I: Sync>(
        threads: usize,
        items: &[I],
        f: &(dyn Fn(&[I]) -> Result<(), String> + Sync),
    ) -> Result<(), String> {
        let per = items.len().div_ceil(threads).max(1);
        std::thread::scope(|s| {
            let hs: Vec<_> = items
                .chunks(per)
                .map(|part| s.spawn(move || f(part)))
                .collect();
            hs.into_iter()
                .try_for_each(|h| h.join().map_err(|_| "a thread panicked".to_string())?)
        })
    }
    let t = Instant::now();
    split(threads, &docs, &|part| {
        part.iter()
            .try_for_each(|d| c.insert(d).map(|_| ()).map_err(|e| e.to_string()))
    })?;
    let rate = |t: Instant| n as f64 / t.elapsed().as_secs_f64();
    println!("insert {n}: {:.0}/s", rate(t));
    if what == "insert" {
        // The file's size once closed (every commit written out).
        drop(c);
        db.close()?;
        let len = std::fs::metadata(dir.path().join("w.cairn"))?.len();
        println!("file after close: {:.1} MB", len as f64 / 1e6);
        return Ok(());
    }
    if what == "get" || what == "all" {
        let ids: Vec<i64> = (0..n).map(|_| rng.below(n) as i64).collect();
        let t = Instant::now();
        let found = gets(&c, &ids)?;
        println!("get {n}: {:.0}/s ({found} found)", rate(t));
    }
    if what == "lookup" || what == "all" {
        let queries: Vec<(u64, u64, u64)> = (0..n)
            .map(|_| (rng.below(n), rng.below(n), rng.below(n)))
            .collect();
        let t = Instant::now();
        let found = lookups(&c, &queries)?;
        println!("lookup {n}: {:.0}/s ({found} documents)", rate(t));
    }
    if what == "update" || what == "all" {
        let fresh: Vec<Doc> = (0..n)
            .map(|_| {
                let id = rng.below(n) as i64;
                doc(&mut rng, id, n)
            })
            .collect();
        let t = Instant::now();
        split(threads, &fresh, &|part| {
            updates(&c, part).map_err(|e| e.to_string())
        })?;
        println!("update {n}: {:.0}/s", rate(t));
    }
    if what == "delete" || what == "all" {
        let ids: Vec<i64> = (0..n).map(|_| rng.below(n) as i64).collect();
        let t = Instant::now();
        split(threads, &ids, &|part| {
            deletes(&c, part).map_err(|e| e.to_string())
        })?;
        println!("delete {n}: {:.0}/s", rate(t));
    }
    Ok(())
}
