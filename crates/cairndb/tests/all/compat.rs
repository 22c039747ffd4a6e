//! Format compatibility (RELIABILITY suite 12): a golden file of format
//! version 1, checked into the repository, is parsed against FORMAT.md's
//! offsets, opens, verifies and holds exactly its known contents; the same
//! operations today write the same bytes (a change means a new format
//! version). And after deleting everything, allocated pages return to the
//! baseline (no page leaks).
//!
//! Regenerate the fixture only with a format version bump:
//! `CAIRN_WRITE_GOLDEN=1 cargo test -p cairndb --test all compat`.

use std::path::PathBuf;

use cairndb::{Database, ReadableTable, TableDefinition};

const NUMS: TableDefinition<u64, &str> = TableDefinition::new("nums");
const BLOBS: TableDefinition<&str, &[u8]> = TableDefinition::new("blobs");
const PS: usize = 512;

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/format-v1.cairn")
}

/// The fixed operations that produce the golden file.
fn write_golden(path: &std::path::Path) {
    let db = Database::builder().page_size(PS).create(path).unwrap();
    let txn = db.begin_write().unwrap();
    {
        let mut n = txn.open_table(NUMS).unwrap();
        for i in 0..200u64 {
            n.insert(i, format!("n{i}").as_str()).unwrap();
        }
        let mut b = txn.open_table(BLOBS).unwrap();
        b.insert("big", vec![7u8; 2000].as_slice()).unwrap();
        b.insert("small", b"x".as_slice()).unwrap();
    }
    txn.commit().unwrap();
    let txn = db.begin_write().unwrap();
    txn.open_table(NUMS).unwrap().remove_range(50..100).unwrap();
    txn.commit().unwrap();
    db.close().unwrap();
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

#[test]
fn golden_file_v1() {
    let path = fixture();
    if std::env::var("CAIRN_WRITE_GOLDEN").is_ok() {
        let _ = std::fs::remove_file(&path);
        write_golden(&path);
    }
    let golden = std::fs::read(&path).expect("the golden file is checked in");
    let mut mismatches = 0;
    // Header (FORMAT.md, "File header").
    assert_eq!(&golden[0..8], b"\x89CAIRN\r\n");
    assert_eq!(u32_at(&golden, 8), 1, "format version");
    assert_eq!(u32_at(&golden, 12), PS as u32, "page size");
    assert_eq!(&golden[16..24], &[0; 8]);
    // Commit slots (FORMAT.md, "Commit slot"): the newest is clean.
    let slots: Vec<(u64, u64, u32, u32)> = [PS, 2 * PS]
        .iter()
        .filter(|&&o| &golden[o..o + 8] == b"CAIRNSLT")
        .map(|&o| {
            (
                u64_at(&golden, o + 8),
                u64_at(&golden, o + 16),
                u32_at(&golden, o + 56),
                u32_at(&golden, o + 60),
            )
        })
        .collect();
    let newest = slots.iter().max_by_key(|s| s.0).expect("a valid slot");
    assert_eq!(newest.2 & 1, 1, "clean flag after close");
    assert_eq!(newest.3, PS as u32, "slot repeats the page size");
    assert!(
        newest.1 * PS as u64 <= golden.len() as u64,
        "page_count within the file"
    );
    // Tree pages carry kind bytes 1 or 2 at offset 0; the catalog root is a tree page.
    let catalog_root = {
        let o = if slots.len() == 2 && slots[1].0 > slots[0].0 {
            2 * PS
        } else {
            PS
        };
        u64_at(&golden, o + 24) as usize
    };
    assert!(
        [1u8, 2].contains(&golden[catalog_root * PS]),
        "catalog root kind byte"
    );
    // It opens, verifies, and holds exactly the known contents.
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("golden.cairn");
    std::fs::copy(&path, &copy).unwrap();
    {
        let db = Database::open_read_only(&copy).unwrap();
        assert!(db.recovery_report().clean);
        assert!(db.check_integrity().unwrap().is_ok());
        let r = db.begin_read().unwrap();
        assert_eq!(r.list_tables().unwrap(), ["blobs", "nums"]);
        let n = r.open_table(NUMS).unwrap();
        let got: Vec<(u64, String)> = n
            .iter()
            .unwrap()
            .map(|e| e.map(|(k, v)| (k.value(), v.value().to_string())).unwrap())
            .collect();
        let want: Vec<(u64, String)> = (0..200u64)
            .filter(|i| !(50..100).contains(i))
            .map(|i| (i, format!("n{i}")))
            .collect();
        if got != want {
            mismatches += 1;
        }
        let b = r.open_table(BLOBS).unwrap();
        if b.get("big").unwrap().map(|g| g.value().to_vec()) != Some(vec![7u8; 2000]) {
            mismatches += 1;
        }
    }
    // Today's code writes the same bytes.
    let fresh = dir.path().join("fresh.cairn");
    write_golden(&fresh);
    if std::fs::read(&fresh).unwrap() != golden {
        eprintln!("the same operations now write different bytes: bump the format version and add a fixture");
        mismatches += 1;
    }
    let leaked = leaked_pages_after_delete_all();
    crate::common::report(&format!(
        "compat: fixtures=1 mismatches={mismatches} leaked_pages={leaked}"
    ));
    assert_eq!((mismatches, leaked), (0, 0));
}

/// Pages in use (tree, values, free-list chain) after filling a database and
/// deleting everything, minus the same count for the empty database.
fn leaked_pages_after_delete_all() -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::builder()
        .page_size(PS)
        .create(dir.path().join("leak"))
        .unwrap();
    let in_use = |db: &Database| {
        let s = db.stats().unwrap();
        s.leaf_pages + s.branch_pages + s.overflow_pages
    };
    let txn = db.begin_write().unwrap();
    txn.open_table(NUMS).unwrap();
    txn.commit().unwrap();
    let baseline = in_use(&db);
    for round in 0..3u64 {
        let txn = db.begin_write().unwrap();
        {
            let mut n = txn.open_table(NUMS).unwrap();
            for i in 0..2000u64 {
                n.insert(i * 7919 % 10007, format!("{round}-{i}").as_str())
                    .unwrap();
            }
            let mut b = txn.open_table(BLOBS).unwrap();
            b.insert(format!("b{round}").as_str(), vec![1u8; 5000].as_slice())
                .unwrap();
        }
        txn.commit().unwrap();
    }
    let txn = db.begin_write().unwrap();
    txn.open_table(NUMS)
        .unwrap()
        .remove_range::<u64>(..)
        .unwrap();
    txn.delete_table("blobs").unwrap();
    txn.commit().unwrap();
    assert!(db.check_integrity().unwrap().is_ok());
    in_use(&db).saturating_sub(baseline)
}
