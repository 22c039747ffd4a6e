//! Range iteration against a model: random bounds and random sequences of
//! `next`/`next_back` over tables spanning many leaves, in read transactions
//! (pinned leaves walked in place, and leaves past the pin budget) and in a
//! write transaction (its own changed nodes), with inline and out-of-line
//! values. Catches a scan that skips, repeats or runs past an end.

use std::collections::BTreeMap;
use std::ops::Bound;

use cairndb::storage::sim::SplitMix64;
use cairndb::{Database, ReadableTable, TableDefinition};

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
