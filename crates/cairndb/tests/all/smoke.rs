use cairndb::CoreError;
use cairndb::{Database, ReadableTable, TableDefinition};

const T: TableDefinition<u64, &[u8]> = TableDefinition::new("t");

/// A new database of 512-byte pages in `dir` with the overlay off, so that
/// every commit writes its tree pages.
fn small_db_without_overlay(dir: &tempfile::TempDir) -> Database {
    Database::builder()
        .page_size(512)
        .overlay_size(0)
        .create(dir.path().join("db"))
        .unwrap()
}

#[test]
fn insert_get_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    {
        let db = Database::builder().page_size(512).create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut t = txn.open_table(T).unwrap();
            for i in 0..5000u64 {
                t.insert(i * 7 % 5003, format!("v{i}").as_bytes()).unwrap();
            }
        }
        txn.commit().unwrap();
        let r = db.begin_read().unwrap();
        let t = r.open_table(T).unwrap();
        assert_eq!(t.len(), 5000);
        assert!(
            db.check_integrity().unwrap().is_ok(),
            "{:?}",
            db.check_integrity().unwrap().problems
        );
    }
    let db = Database::open(&path).unwrap();
    let r = db.begin_read().unwrap();
    let t = r.open_table(T).unwrap();
    assert_eq!(t.get(7).unwrap().unwrap().value(), b"v1");
    let keys: Vec<u64> = t.iter().unwrap().map(|e| e.unwrap().0.value()).collect();
    assert_eq!(keys.len(), 5000);
    assert!(keys.windows(2).all(|w| w[0] < w[1]));
    let back: Vec<u64> = t
        .iter()
        .unwrap()
        .rev()
        .map(|e| e.unwrap().0.value())
        .collect();
    assert_eq!(back.len(), 5000);
    drop(r);
    let txn = db.begin_write().unwrap();
    {
        let mut t = txn.open_table(T).unwrap();
        for i in 0..5000u64 {
            t.remove(i * 7 % 5003).unwrap();
        }
        assert_eq!(t.len(), 0);
    }
    txn.commit().unwrap();
    let rep = db.check_integrity().unwrap();
    assert!(rep.is_ok(), "{:?}", rep.problems);
    let c = db.compact().unwrap();
    assert!(c.after_bytes < c.before_bytes / 4, "{c:?}");
    let big = vec![7u8; 300_000];
    let txn = db.begin_write().unwrap();
    txn.open_table(T)
        .unwrap()
        .insert(1, big.as_slice())
        .unwrap();
    txn.commit().unwrap();
    let r = db.begin_read().unwrap();
    assert_eq!(
        r.open_table(T).unwrap().get(1).unwrap().unwrap().value(),
        big.as_slice()
    );
    drop(r);
    let rep = db.check_integrity().unwrap();
    assert!(rep.is_ok(), "{:?}", rep.problems);
    let c = db.compact().unwrap();
    assert!(c.after_bytes <= c.before_bytes, "{c:?}");
    let rep = db.check_integrity().unwrap();
    assert!(rep.is_ok(), "{:?}", rep.problems);
}

/// Pages freed by non-durable commits are reused before the next flush when
/// no recoverable commit can reach them, so a long non-durable chain does not
/// grow the file. (`stats` writes the staged chain out: after the first, the
/// version it wrote out is held until the next one, then reused.) The
/// overlay is off, so that each commit copies tree pages.
#[test]
fn non_durable_chain_reuses_space() {
    let dir = tempfile::tempdir().unwrap();
    let db = small_db_without_overlay(&dir);
    let mut counts = Vec::new();
    for round in 0..3000u64 {
        let txn = db.begin_write().unwrap();
        txn.set_durability(cairndb::Durability::None);
        {
            let mut t = txn.open_table(T).unwrap();
            for i in 0..20u64 {
                t.insert(i, round.to_le_bytes().as_slice()).unwrap();
            }
        }
        txn.commit().unwrap();
        if round % 1000 == 999 {
            counts.push(db.stats().unwrap().page_count);
        }
    }
    db.sync().unwrap();
    assert_eq!(
        counts[1], counts[2],
        "page count grew over 1,000 non-durable commits: {counts:?}"
    );
    assert!(counts[1] <= 2 * counts[0], "{counts:?}");
    assert!(db.check_integrity().unwrap().is_ok());
}

/// Creation is atomic: a new file appears only once its header and commit
/// slots are durable, and no temporary is left behind after success.
#[test]
fn create_leaves_only_the_database_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("new.cairn");
    let db = cairndb::Database::create(&path).unwrap();
    drop(db);
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec!["new.cairn".to_string()]);
    // And it opens as a database without `create`.
    cairndb::Database::open(&path).unwrap();
}

/// Creating a file in a directory that does not exist names the path asked
/// for (not the temporary creation uses).
#[test]
fn create_in_a_missing_directory_names_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no-such-dir").join("db.cairn");
    match cairndb::Database::create(&path) {
        Err(CoreError::NotFound { path: p }) => assert_eq!(p, path),
        other => panic!("expected NotFound naming {path:?}, got {other:?}"),
    }
}

/// Compaction repacks a table thinned by deletes: after removing three keys
/// in four at random, leaves are under half full; `compact` merges
/// neighbours and fills leaves from their right neighbours, so the leaf
/// count and the file follow the live entries, and every entry is still
/// there, in order, with an intact tree.
#[test]
fn compaction_repacks_a_table_thinned_by_deletes() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::create(dir.path().join("db")).unwrap();
    const R: TableDefinition<&[u8], &[u8]> = TableDefinition::new("r");
    let key = |i: u64| i.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_be_bytes();
    let n = 40_000u64;
    let txn = db.begin_write().unwrap();
    {
        let mut t = txn.open_table(R).unwrap();
        for i in 0..n {
            t.insert(key(i).as_slice(), [i as u8; 100].as_slice())
                .unwrap();
        }
    }
    txn.commit().unwrap();
    let txn = db.begin_write().unwrap();
    {
        let mut t = txn.open_table(R).unwrap();
        for i in (0..n).filter(|i| i % 4 != 0) {
            t.remove(key(i).as_slice()).unwrap();
        }
    }
    txn.commit().unwrap();
    let before = db.stats().unwrap();
    let c = db.compact().unwrap();
    let after = db.stats().unwrap();
    let leaves = |s: &cairndb::Stats| s.tables[0].tree.leaf_pages;
    // 10,000 entries of ~120 bytes fill ~300 pages; the thinned leaves
    // (merged by removes only below a quarter) hold them in over twice as
    // many; merging neighbours and filling each leaf from the next leaves
    // them over 85% full.
    assert!(
        leaves(&after) * 10 < leaves(&before) * 5,
        "leaves {} → {}",
        leaves(&before),
        leaves(&after)
    );
    assert!(
        after.fill_factor > 0.6,
        "fill after compaction {}",
        after.fill_factor
    );
    assert!(c.after_bytes * 10 < c.before_bytes * 6, "{c:?}");
    let rep = db.check_integrity().unwrap();
    assert!(rep.is_ok(), "{:?}", rep.problems);
    let r = db.begin_read().unwrap();
    let t = r.open_table(R).unwrap();
    let mut want: Vec<_> = (0..n)
        .filter(|i| i % 4 == 0)
        .map(|i| (key(i), i as u8))
        .collect();
    want.sort();
    let got: Vec<_> = t
        .iter()
        .unwrap()
        .map(|e| {
            let (k, v) = e.unwrap();
            (k.value().try_into().unwrap(), v.value()[0])
        })
        .collect();
    assert_eq!(got, want);
}

/// Key ranges that each grow at their end, interleaved (50 streams appending
/// round-robin, as an event store's `(stream, version)` keys do): leaves end
/// nearly full, because a split right after a run of sequential inserts
/// keeps the finished part whole. With halves split evenly the leaves ended
/// about 60% full.
#[test]
fn interleaved_appends_fill_their_pages() {
    const S: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("s");
    let dir = tempfile::tempdir().unwrap();
    // The overlay off: each commit writes the tree (the overlay would
    // apply these keys sorted, which fills pages anyway).
    let db = small_db_without_overlay(&dir);
    for round in 0..40u64 {
        let txn = db.begin_write().unwrap();
        txn.set_durability(cairndb::Durability::None);
        {
            let mut t = txn.open_table(S).unwrap();
            for v in round * 10..(round + 1) * 10 {
                for stream in 0..50u64 {
                    t.insert((stream, v), [v as u8; 12].as_slice()).unwrap();
                }
            }
        }
        txn.commit().unwrap();
    }
    let s = db.stats().unwrap();
    assert!(s.fill_factor > 0.85, "fill {:.2}", s.fill_factor);
    let r = db.begin_read().unwrap();
    assert_eq!(r.open_table(S).unwrap().len(), 50 * 400);
    assert!(db.check_integrity().unwrap().is_ok());
}

/// Read transactions of one commit share the table records they looked up
/// (and the Rust types checked against them). Property: each snapshot still
/// sees its own commit's table — its length, a table deleted and created
/// again with other types, a wrong type asked for after a right one — and
/// older snapshots keep theirs.
#[test]
fn opening_tables_in_read_transactions_sees_each_commits_catalog() {
    const S: TableDefinition<&str, u64> = TableDefinition::new("t");
    let dir = tempfile::tempdir().unwrap();
    let db = small_db_without_overlay(&dir);
    let put = |k: u64| {
        let w = db.begin_write().unwrap();
        w.open_table(T).unwrap().insert(k, b"v".as_slice()).unwrap();
        w.commit().unwrap();
    };
    put(1);
    let r1 = db.begin_read().unwrap();
    assert_eq!(r1.open_table(T).unwrap().len(), 1);
    // The same commit, a second reader: the cached, checked record.
    let r1b = db.begin_read().unwrap();
    assert_eq!(r1b.open_table(T).unwrap().len(), 1);
    // A wrong type after a right one is still refused.
    assert!(matches!(
        r1b.open_table(S),
        Err(CoreError::TableTypeMismatch(_))
    ));
    put(2);
    let r2 = db.begin_read().unwrap();
    assert_eq!(r2.open_table(T).unwrap().len(), 2);
    assert_eq!(r1.open_table(T).unwrap().len(), 1, "the old snapshot");
    // Deleted, then created again with other types.
    let w = db.begin_write().unwrap();
    assert!(w.delete_table("t").unwrap());
    w.commit().unwrap();
    assert!(matches!(
        db.begin_read().unwrap().open_table(T),
        Err(CoreError::TableNotFound(_))
    ));
    let w = db.begin_write().unwrap();
    w.open_table(S).unwrap().insert("a", 7).unwrap();
    w.commit().unwrap();
    let r3 = db.begin_read().unwrap();
    assert!(matches!(
        r3.open_table(T),
        Err(CoreError::TableTypeMismatch(_))
    ));
    assert_eq!(
        r3.open_table(S).unwrap().get("a").unwrap().unwrap().value(),
        7
    );
    assert_eq!(r2.open_table(T).unwrap().len(), 2, "the older snapshot");
    drop((r1, r1b, r2, r3));
    assert_eq!(db.live_readers(), 0);
}
