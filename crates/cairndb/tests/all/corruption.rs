//! Corruption (RELIABILITY suite 4, in-process first cut): flip every byte of
//! both commit slots, thousands of random bits elsewhere, replace a page by an
//! older copy of itself, swap two pages, truncate. The outcome must be a typed
//! corruption error (or, for a damaged commit slot, a reported fallback to
//! the other slot), or exactly the original data: never different data,
//! never a panic.

use std::collections::BTreeMap;
use std::sync::Arc;

use cairndb::storage::sim::{SimFile, SplitMix64};
use cairndb::{Builder, Database, ReadableTable, TableDefinition};

const A: TableDefinition<u64, &[u8]> = TableDefinition::new("a");
const B: TableDefinition<&str, &[u8]> = TableDefinition::new("b");
const PS: usize = 512;

type State = BTreeMap<(String, Vec<u8>), Vec<u8>>;

/// Every table's entries as raw bytes, or the first error.
fn read_all(db: &Database) -> cairndb::Result<State> {
    let r = db.begin_read()?;
    let mut out = State::new();
    for name in r.list_tables()? {
        let t = r.open_untyped_table(&name)?;
        for e in t.iter()? {
            let (k, v) = e?;
            out.insert((name.clone(), k.value().to_vec()), v.value().to_vec());
        }
    }
    Ok(out)
}

/// A file with several tables, deep trees, out-of-line values, a free list,
/// and an older copy of every page (from before the last commit).
fn build() -> (Vec<u8>, Vec<u8>, State) {
    let sim = Arc::new(SimFile::new());
    let db = Builder::new()
        .page_size(PS)
        .open_with_storage(Box::new(sim.clone()), true, false)
        .unwrap();
    for round in 0..3u64 {
        let txn = db.begin_write().unwrap();
        {
            let mut a = txn.open_table(A).unwrap();
            for i in 0..300u64 {
                a.insert(i, format!("value-{round}-{i}").as_bytes())
                    .unwrap();
            }
            a.insert(10_000, vec![round as u8; 3000].as_slice())
                .unwrap();
            let mut b = txn.open_table(B).unwrap();
            for i in 0..50u64 {
                b.insert(format!("k{i}").as_str(), vec![i as u8; 40].as_slice())
                    .unwrap();
            }
            if round == 2 {
                a.remove_range(100..150).unwrap();
            }
        }
        txn.commit().unwrap();
    }
    let older = sim.current_image();
    let txn = db.begin_write().unwrap();
    txn.open_table(A)
        .unwrap()
        .insert(5, b"last".as_slice())
        .unwrap();
    txn.commit().unwrap();
    let state = read_all(&db).unwrap();
    drop(db);
    (sim.current_image(), older, state)
}

/// Opens `img` read-only and reads everything; classifies the outcome.
fn judge(img: Vec<u8>, expected: &State) -> Outcome {
    let r = std::panic::catch_unwind(|| {
        let db =
            match Builder::new().open_with_storage(Box::new(SimFile::from_image(img)), false, true)
            {
                Ok(db) => db,
                Err(e) if e.is_corruption() => return Outcome::Detected,
                Err(cairndb::Error::NotADatabase { .. }) => return Outcome::Detected,
                Err(_) => return Outcome::OtherError,
            };
        let fell_back = db.recovery_report().fell_back.is_some();
        match read_all(&db) {
            Ok(s) if &s == expected => Outcome::Intact,
            // A reported fallback to the previous commit shows older data.
            Ok(_) if fell_back => Outcome::Detected,
            Ok(_) => Outcome::SilentWrong,
            Err(e) if e.is_corruption() => Outcome::Detected,
            Err(_) => Outcome::OtherError,
        }
    });
    r.unwrap_or(Outcome::Panic)
}

#[derive(Debug, PartialEq)]
enum Outcome {
    Intact,
    Detected,
    SilentWrong,
    OtherError,
    Panic,
}

#[test]
fn bit_flips_and_damaged_pages_are_detected() {
    let seed = crate::common::seed("bitflip");
    let flips_wanted = crate::common::iters(5000);
    let (img, older, expected) = build();
    let mut rng = SplitMix64(seed);
    let (mut flips, mut detected, mut silent, mut crashes, mut other) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut tally = |o: Outcome, what: &str| {
        flips += 1;
        match o {
            Outcome::Detected => detected += 1,
            Outcome::Intact => {}
            Outcome::SilentWrong => {
                eprintln!("silent wrong data after {what}");
                silent += 1
            }
            Outcome::OtherError => other += 1,
            Outcome::Panic => {
                eprintln!("panic after {what}");
                crashes += 1
            }
        }
    };
    // Every byte of both commit slots (pages 1 and 2, first 128 bytes).
    for slot in 1..=2usize {
        for i in 0..128 {
            let mut m = img.clone();
            m[slot * PS + i] ^= 0x5a;
            tally(judge(m, &expected), &format!("slot byte {slot}:{i}"));
        }
    }
    // Random bit flips anywhere past the header page.
    for _ in 0..flips_wanted {
        let mut m = img.clone();
        let at = PS + rng.below((m.len() - PS) as u64) as usize;
        m[at] ^= 1 << rng.below(8);
        tally(judge(m, &expected), &format!("bit flip at {at}"));
    }
    // Stale pages: each page replaced by its older copy.
    for p in 3..img.len().min(older.len()) / PS {
        let (a, b) = (p * PS, (p + 1) * PS);
        if img[a..b] != older[a..b] {
            let mut m = img.clone();
            m[a..b].copy_from_slice(&older[a..b]);
            tally(judge(m, &expected), &format!("stale page {p}"));
        }
    }
    // Swapped pages and truncations.
    let pages = img.len() / PS;
    for _ in 0..200 {
        let (x, y) = (
            3 + rng.below(pages as u64 - 3) as usize,
            3 + rng.below(pages as u64 - 3) as usize,
        );
        if x == y || img[x * PS..(x + 1) * PS] == img[y * PS..(y + 1) * PS] {
            continue;
        }
        let mut m = img.clone();
        let px = m[x * PS..(x + 1) * PS].to_vec();
        let py = m[y * PS..(y + 1) * PS].to_vec();
        m[x * PS..(x + 1) * PS].copy_from_slice(&py);
        m[y * PS..(y + 1) * PS].copy_from_slice(&px);
        tally(judge(m, &expected), &format!("swap {x}<->{y}"));
    }
    for cut in [img.len() / 2, img.len() - PS, 3 * PS, PS + 100, 10] {
        let m = img[..cut].to_vec();
        tally(judge(m, &expected), &format!("truncate to {cut}"));
    }
    crate::common::report(&format!(
        "bitflip: flips={flips} detected={detected} silent_wrong={silent} crashes={crashes} hangs=0 other_errors={other} seed={seed}"
    ));
    assert_eq!((silent, crashes, other), (0, 0, 0));
}
