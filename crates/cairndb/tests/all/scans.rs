//! Range iteration against a model: random bounds and random sequences of
//! `next`/`next_back` over tables spanning many leaves, in read transactions
//! (pinned leaves walked in place, and leaves past the pin budget) and in a
//! write transaction (its own changed nodes), with inline and out-of-line
//! values. Catches a scan that skips, repeats or runs past an end. On a
//! reopened file (an empty page cache) a forward scan reads adjacent leaves
//! ahead and loads leaves without their search index: seeks and gets into
//! those leaves still match the model, and a leaf damaged on disk inside a
//! read-ahead is reported as `Corruption` naming it, never used. Point
//! lookups that start in the leaf the previous one ended in (a read
//! transaction's finger) match the model in every order, over the gaps
//! between leaves, while a writer changes the keys.

use std::collections::BTreeMap;
use std::ops::Bound;

use cairndb::storage::sim::SplitMix64;
use cairndb::{CoreError, DamagedPart, Database, ReadableTable, TableDefinition};

use crate::common;

const T: TableDefinition<&[u8], &[u8]> = TableDefinition::new("scan");

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn key(i: u64) -> Vec<u8> {
    format!("k{i:06}").into_bytes()
}

fn value(i: u64, rng: &mut SplitMix64) -> Vec<u8> {
    // Mostly short values, some past a leaf's inline limit (out of line).
    let len = match rng.next_u64() % 20 {
        0 => 5000 + (rng.next_u64() % 3000) as usize,
        _ => (rng.next_u64() % 120) as usize,
    };
    let mut v = format!("v{i}-").into_bytes();
    v.resize(len.max(v.len()), (i % 251) as u8);
    v
}

fn bound(rng: &mut SplitMix64, n: u64) -> Bound<Vec<u8>> {
    // Keys between existing ones too (an odd suffix), and past both ends.
    let i = rng.next_u64() % (n + 20);
    let mut k = key(i.saturating_sub(10));
    if rng.next_u64().is_multiple_of(3) {
        k.push(b'!');
    }
    match rng.next_u64() % 4 {
        0 => Bound::Unbounded,
        1 => Bound::Excluded(k),
        _ => Bound::Included(k),
    }
}

fn as_ref(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Unbounded => Bound::Unbounded,
        Bound::Included(k) => Bound::Included(k.as_slice()),
        Bound::Excluded(k) => Bound::Excluded(k.as_slice()),
    }
}

/// Reads `lo..hi` of `tb` with a random pattern of both ends and checks every
/// entry and the end against the model.
fn check<TB: ReadableTable<&'static [u8], &'static [u8]>>(
    tb: &TB,
    m: &Model,
    lo: &Bound<Vec<u8>>,
    hi: &Bound<Vec<u8>>,
    rng: &mut SplitMix64,
    what: &str,
) {
    // (An inverted range, or one key with an end excluded, is empty; the
    // model's `range` refuses both.)
    let inverted = match (lo, hi) {
        (Bound::Included(a), Bound::Included(b)) => a > b,
        (Bound::Included(a) | Bound::Excluded(a), Bound::Included(b) | Bound::Excluded(b)) => {
            a >= b
        }
        _ => false,
    };
    let want: Vec<(&Vec<u8>, &Vec<u8>)> = if inverted {
        Vec::new()
    } else {
        m.range::<Vec<u8>, _>((lo.clone(), hi.clone())).collect()
    };
    let mut it = tb.range::<&[u8]>((as_ref(lo), as_ref(hi))).unwrap();
    // Pattern: mostly forward runs (the scan's fast path), back steps now
    // and then, or only one end.
    let back_pct = [0, 0, 5, 30, 100][(rng.next_u64() % 5) as usize];
    let (mut i, mut j) = (0usize, want.len());
    for step in 0..want.len() + 3 {
        let back = rng.next_u64() % 100 < back_pct;
        let got = if back { it.next_back() } else { it.next() };
        let got = got.map(|r| {
            let (k, v) = r.unwrap();
            (k.value().to_vec(), v.value().to_vec())
        });
        let exp = if i >= j {
            None
        } else if back {
            j -= 1;
            Some((want[j].0.clone(), want[j].1.clone()))
        } else {
            i += 1;
            Some((want[i - 1].0.clone(), want[i - 1].1.clone()))
        };
        assert_eq!(
            got.as_ref()
                .map(|(k, _)| String::from_utf8_lossy(k).into_owned()),
            exp.as_ref()
                .map(|(k, _)| String::from_utf8_lossy(k).into_owned()),
            "{what}: range {lo:?}..{hi:?}, step {step} ({}), back {back_pct}%",
            if back { "back" } else { "front" }
        );
        assert_eq!(got, exp, "{what}: value differs at step {step}");
        if exp.is_none() {
            assert!(it.next().is_none(), "{what}: next after the end");
            assert!(it.next_back().is_none(), "{what}: next_back after the end");
            return;
        }
    }
    panic!("{what}: range {lo:?}..{hi:?} did not end");
}

fn run(cache: usize, seed: u64) {
    let mut rng = SplitMix64(seed);
    let dir = tempfile::tempdir().unwrap();
    let db = Database::builder()
        .cache_size(cache)
        .create(dir.path().join("scan.cairn"))
        .unwrap();
    let n = 3000u64;
    let mut m = Model::new();
    let w = db.begin_write().unwrap();
    {
        let mut t = w.open_table(T).unwrap();
        for i in 0..n {
            let v = value(i, &mut rng);
            t.insert(key(i).as_slice(), v.as_slice()).unwrap();
            m.insert(key(i), v);
        }
    }
    w.commit().unwrap();
    {
        let r = db.begin_read().unwrap();
        let t = r.open_table(T).unwrap();
        for _ in 0..150 {
            let (lo, hi) = (bound(&mut rng, n), bound(&mut rng, n));
            check(&t, &m, &lo, &hi, &mut rng, "read transaction");
        }
    }
    // A write transaction: some leaves changed (its own nodes), most not.
    let w = db.begin_write().unwrap();
    {
        let mut t = w.open_table(T).unwrap();
        for _ in 0..40 {
            let i = rng.next_u64() % n;
            if rng.next_u64().is_multiple_of(2) {
                t.remove(key(i).as_slice()).unwrap();
                m.remove(&key(i));
            } else {
                let v = value(i, &mut rng);
                t.insert(key(i).as_slice(), v.as_slice()).unwrap();
                m.insert(key(i), v);
            }
        }
        for _ in 0..100 {
            let (lo, hi) = (bound(&mut rng, n), bound(&mut rng, n));
            check(&t, &m, &lo, &hi, &mut rng, "write transaction");
        }
    }
    w.commit().unwrap();
}

#[test]
fn scans_match_a_model_in_every_direction() {
    let seed = common::seed("scans");
    // A large cache (every leaf pinned: walked in place) and a small one
    // (most leaves past the pin budget).
    run(64 << 20, seed);
    run(64 << 10, seed ^ 0x5DEE_CE66);
    common::report(&format!("scans: ranges=500 seed={seed}"));
}

/// Loads `n` keys with `value` into a new file at `path` and closes it.
fn load_file(path: &std::path::Path, n: u64, cache: usize, rng: &mut SplitMix64) -> Model {
    let db = Database::builder().cache_size(cache).create(path).unwrap();
    let mut m = Model::new();
    let w = db.begin_write().unwrap();
    {
        let mut t = w.open_table(T).unwrap();
        for i in 0..n {
            let v = value(i, rng);
            t.insert(key(i).as_slice(), v.as_slice()).unwrap();
            m.insert(key(i), v);
        }
    }
    w.commit().unwrap();
    m
}

/// After a cold full scan (leaves loaded and read ahead, no search index
/// built), point lookups and range seeks into those same leaves — which
/// build the index on their first search — give the model's answers, in
/// the scan's transaction and in a later one; with a large cache (leaves
/// stay) and a small one (leaves evicted and loaded again by gets).
#[test]
fn seeks_and_gets_into_leaves_a_cold_scan_loaded_match_the_model() {
    let seed = common::seed("scans-cold");
    for (cache, salt) in [(64usize << 20, 0u64), (64 << 10, 0x9E37_79B9)] {
        let mut rng = SplitMix64(seed ^ salt);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cold.cairn");
        let n = 3000u64;
        let m = load_file(&path, n, cache, &mut rng);
        let db = Database::builder().cache_size(cache).open(&path).unwrap();
        for round in 0..2 {
            let r = db.begin_read().unwrap();
            let t = r.open_table(T).unwrap();
            if round == 0 {
                let all: Model = t
                    .iter()
                    .unwrap()
                    .map(|e| {
                        let (k, v) = e.unwrap();
                        (k.value().to_vec(), v.value().to_vec())
                    })
                    .collect();
                assert!(all == m, "cold scan differs from the model (cache {cache})");
            }
            for _ in 0..400 {
                let i = rng.next_u64() % (n + 10);
                let mut k = key(i);
                if rng.next_u64().is_multiple_of(4) {
                    k.push(b'!');
                }
                let got = t.get(k.as_slice()).unwrap().map(|v| v.value().to_vec());
                assert_eq!(
                    got.as_ref(),
                    m.get(&k),
                    "get {} after a cold scan (cache {cache}, round {round})",
                    String::from_utf8_lossy(&k)
                );
            }
            for _ in 0..60 {
                let (lo, hi) = (bound(&mut rng, n), bound(&mut rng, n));
                check(&t, &m, &lo, &hi, &mut rng, "after a cold scan");
            }
        }
    }
    common::report(&format!("scans-cold: seed={seed}"));
}

/// The numbers `i` of the values `fixed_value(i)` a page holds (found by
/// their text).
fn values_in(page: &[u8]) -> Vec<u64> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(off) = page[at..].windows(6).position(|w| w == b"value-") {
        let d = at + off + 6;
        if let Some(num) = page
            .get(d..d + 6)
            .and_then(|x| std::str::from_utf8(x).ok())
            .and_then(|x| x.parse().ok())
        {
            out.push(num);
        }
        at = d;
    }
    out
}

fn fixed_value(i: u64) -> Vec<u8> {
    format!("value-{i:06}-").repeat(3).into_bytes()
}

/// A leaf damaged on disk (one bit of a value: its structure still checks
/// out, its checksum does not) that a cold forward scan reads ahead, in the
/// same read as the leaves before it, is not used: a scan that stops before
/// it sees every entry and no error; a full scan hands out every entry
/// before it and then `Corruption` naming that page; so does a get of a key
/// in it, and a later scan. The read-ahead itself shows in the counters:
/// fewer reads of the file than leaves.
#[test]
fn a_damaged_leaf_inside_a_read_ahead_is_reported_by_page_never_used() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("damaged.cairn");
    let ps = 4096usize;
    let n = 3000u64;
    {
        let db = Database::builder().page_size(ps).create(&path).unwrap();
        let w = db.begin_write().unwrap();
        {
            let mut t = w.open_table(T).unwrap();
            for i in 0..n {
                t.insert(key(i).as_slice(), fixed_value(i).as_slice())
                    .unwrap();
            }
        }
        w.commit().unwrap();
    }
    let mut bytes = std::fs::read(&path).unwrap();
    // The leaves in key order: (first entry, page id); no entry twice.
    let mut leaves = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for (p, page) in bytes.chunks_exact(ps).enumerate() {
        let vals = values_in(page);
        let distinct: std::collections::BTreeSet<u64> = vals.iter().copied().collect();
        if let Some(&first) = distinct.first() {
            assert!(
                distinct.iter().all(|v| seen.insert(*v)),
                "page {p} repeats entries of another page (a stale copy): the test needs one copy"
            );
            leaves.push((first, p as u64));
        }
    }
    leaves.sort();
    assert_eq!(seen.len() as u64, n, "every entry in a leaf, inline");
    assert!(leaves.len() > 20, "{} leaves", leaves.len());
    // The first leaf (in key order) with the two before it adjacent in the
    // file: the load of the first of them reads it ahead (the read-ahead
    // runs over the parent's next children while their pages are adjacent).
    let bad_at = (2..leaves.len())
        .find(|&j| leaves[j].1 == leaves[j - 1].1 + 1 && leaves[j - 1].1 == leaves[j - 2].1 + 1)
        .expect("three leaves adjacent in the file");
    let (first_bad, bad_page) = leaves[bad_at];
    let page = &mut bytes[bad_page as usize * ps..(bad_page as usize + 1) * ps];
    let off = page
        .windows(12)
        .position(|w| w == &fixed_value(first_bad)[..12])
        .unwrap();
    page[off + 8] ^= 0x01; // a digit of the value's number
    std::fs::write(&path, &bytes).unwrap();

    let db = Database::open(&path).unwrap();
    let want = |i: u64| (key(i), fixed_value(i));
    let is_bad_page = |e: &CoreError| {
        matches!(e, CoreError::Corruption(c)
            if c.part == DamagedPart::TreePage && c.page.0 == bad_page && c.offset == bad_page * ps as u64)
    };
    let r = db.begin_read().unwrap();
    let t = r.open_table(T).unwrap();
    let misses = db.io_counters().cache_misses;
    // Up to the damaged leaf: every entry, no error.
    let before: Vec<(Vec<u8>, Vec<u8>)> = t
        .iter()
        .unwrap()
        .take(first_bad as usize)
        .map(|e| {
            let (k, v) = e.expect("an entry before the damaged leaf");
            (k.value().to_vec(), v.value().to_vec())
        })
        .collect();
    assert!(before == (0..first_bad).map(want).collect::<Vec<_>>());
    assert!(
        db.io_counters().cache_misses - misses < bad_at as u64,
        "the leaves were read one by one (no read-ahead): {} reads for {bad_at} leaves",
        db.io_counters().cache_misses - misses
    );
    // A full scan: the same entries, then the damaged leaf by name.
    for scan in 0..2 {
        let mut it = t.iter().unwrap();
        for i in 0..first_bad {
            let (k, v) = it.next().unwrap().unwrap();
            assert_eq!(
                (k.value().to_vec(), v.value().to_vec()),
                want(i),
                "scan {scan}"
            );
        }
        match it.next() {
            Some(Err(e)) => assert!(is_bad_page(&e), "scan {scan}: {e}"),
            Some(Ok((k, v))) => panic!(
                "scan {scan}: the damaged leaf was used: {} = {}",
                String::from_utf8_lossy(k.value()),
                String::from_utf8_lossy(v.value())
            ),
            None => panic!("scan {scan} ended early"),
        }
    }
    match t.get(key(first_bad).as_slice()) {
        Err(e) => assert!(is_bad_page(&e), "get: {e}"),
        Ok(v) => panic!(
            "get read the damaged leaf: {:?}",
            v.map(|v| v.value().to_vec())
        ),
    }
    // A key in an intact leaf after it still reads.
    let later = leaves[bad_at + 1].0;
    assert_eq!(
        t.get(key(later).as_slice())
            .unwrap()
            .map(|v| v.value().to_vec()),
        Some(fixed_value(later))
    );
}

/// Point lookups in key order start in the leaf the previous lookup ended in
/// when the key lies inside its range (a read transaction's finger, with
/// the leaf pinned on the second lookup in a row that ends in it). Every
/// pattern that could fool such a shortcut is compared with the model, in
/// one read transaction while a writer changes and removes the same keys:
/// ascending and descending runs over present keys and the gaps between
/// them (keys past a leaf's last key and before the next leaf's first),
/// keys before the first and after the last, random jumps, and a cache so
/// small that the pin budget runs out (lookups then share pages).
#[test]
fn gets_in_key_order_match_the_model_in_one_snapshot() {
    let seed = common::seed("scans-finger");
    for (cache, salt) in [(64usize << 20, 0u64), (64 << 10, 0x5DEE_CE66)] {
        let mut rng = SplitMix64(seed ^ salt);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("finger.cairn");
        let n = 3000u64;
        let m = load_file(&path, n, cache, &mut rng);
        let db = Database::builder().cache_size(cache).open(&path).unwrap();
        let r = db.begin_read().unwrap();
        let t = r.open_table(T).unwrap();
        let probe = |k: &[u8], what: &str| {
            let got = t.get(k).unwrap().map(|v| v.value().to_vec());
            assert_eq!(
                got.as_ref(),
                m.get(k),
                "{what}: get {} (cache {cache})",
                String::from_utf8_lossy(k)
            );
        };
        for pass in 0..4 {
            // A writer changes the keys under the reader's snapshot.
            let w = db.begin_write().unwrap();
            {
                let mut wt = w.open_table(T).unwrap();
                for i in (pass..n).step_by(7) {
                    if i % 2 == 0 {
                        wt.remove(key(i).as_slice()).unwrap();
                    } else {
                        wt.insert(key(i).as_slice(), b"changed".as_slice()).unwrap();
                    }
                }
            }
            w.commit().unwrap();
            // Ascending, each present key then the gap after it.
            let mut before_first = key(0);
            before_first.pop();
            probe(&before_first, "before the first key");
            for i in 0..n + 3 {
                let k = key(i);
                probe(&k, "ascending");
                let mut gap = k;
                gap.push(b'!');
                probe(&gap, "ascending gap");
            }
            // Descending.
            for i in (0..n + 3).rev() {
                probe(&key(i), "descending");
            }
            // Random jumps, each followed by a short ascending run.
            for _ in 0..200 {
                let start = rng.next_u64() % (n + 5);
                for i in start..start + 1 + rng.next_u64() % 40 {
                    probe(&key(i), "run after a jump");
                }
            }
        }
        // A new snapshot sees the writer's changes.
        let r2 = db.begin_read().unwrap();
        let t2 = r2.open_table(T).unwrap();
        for i in 0..n {
            let got = t2
                .get(key(i).as_slice())
                .unwrap()
                .map(|v| v.value().to_vec());
            // Pass p changed the keys p, p + 7, p + 14, ...
            let changed = i % 7 < 4;
            if changed {
                let expect = if i % 2 == 0 {
                    None
                } else {
                    Some(b"changed".to_vec())
                };
                assert_eq!(got, expect, "new snapshot: key {i} (cache {cache})");
            } else {
                assert_eq!(
                    got.as_ref(),
                    m.get(&key(i)),
                    "new snapshot: key {i} (cache {cache})"
                );
            }
        }
    }
}
