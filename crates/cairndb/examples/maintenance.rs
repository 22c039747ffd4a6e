//! Maintenance: statistics, an integrity check, compaction and online
//! backup.
//!
//! Run with `cargo run -p cairndb --example maintenance`.

use cairndb::{CoreError, Database, Durability, ReadableTable, TableDefinition};

const DOCS: TableDefinition<u64, &[u8]> = TableDefinition::new("docs");
const BLOBS: TableDefinition<&str, &[u8]> = TableDefinition::new("blobs");
const N: u64 = 20_000;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let db = Database::create(dir.path().join("maint.cairn"))?;

    // Fill: 20k small documents and one value large enough to be stored out
    // of line (values over a quarter page go to overflow pages).
    let txn = db.begin_write()?;
    txn.set_durability(Durability::None);
    {
        let mut t = txn.open_table(DOCS)?;
        for i in 0..N {
            t.append(i, &[b'd'; 100][..])?;
        }
        let big = vec![7u8; 64 * 1024];
        txn.open_table(BLOBS)?.insert("big", &big[..])?;
    }
    txn.commit()?;
    db.sync()?;

    let s = db.stats()?;
    println!(
        "full:      {} bytes, {} pages ({} leaf, {} branch, {} overflow, {} free), fill {:.2}, depth {}",
        s.file_bytes,
        s.page_count,
        s.leaf_pages,
        s.branch_pages,
        s.overflow_pages,
        s.free_pages,
        s.fill_factor,
        s.max_depth
    );
    assert_eq!(s.tables.len(), 2);
    let docs = s
        .tables
        .iter()
        .find(|t| t.name == "docs")
        .ok_or("no docs stats")?;
    assert_eq!(docs.tree.entries, N);
    assert!(s.overflow_pages >= 16, "the 64 KiB value is out of line");
    assert!(s.fill_factor > 0.0 && s.fill_factor <= 1.0);

    // The integrity check walks every page: checksums, structure, order,
    // out-of-line values and free-space accounting.
    let report = db.check_integrity()?;
    assert!(report.is_ok(), "problems: {:?}", report.problems);
    println!("integrity: ok at commit {}", report.txn);

    // Delete 90% of the documents and the blob. The file does not shrink by
    // itself: freed pages are reused by later commits.
    let txn = db.begin_write()?;
    {
        let mut t = txn.open_table(DOCS)?;
        let removed = t.remove_range(N / 10..)?;
        assert_eq!(removed, N - N / 10);
        let mut blobs = txn.open_table(BLOBS)?;
        assert!(blobs.remove("big")?.is_some());
    }
    txn.commit()?;
    let s = db.stats()?;
    println!(
        "deleted:   {} bytes, {} pages ({} free, {} pending)",
        s.file_bytes, s.page_count, s.free_pages, s.pending_pages
    );
    let before = s.file_bytes;

    // Compaction needs that no read transaction is alive.
    {
        let _reader = db.begin_read()?;
        match db.compact() {
            Err(CoreError::ReadersActive(1)) => println!("compact refused while a reader is alive"),
            other => return Err(format!("expected ReadersActive, got {other:?}").into()),
        }
    }
    let c = db.compact()?;
    println!("compacted: {} -> {} bytes", c.before_bytes, c.after_bytes);
    assert_eq!(c.before_bytes, before);
    assert!(
        c.after_bytes * 2 < c.before_bytes,
        "compaction should at least halve the file"
    );
    let s = db.stats()?;
    assert_eq!(s.file_bytes, c.after_bytes);
    assert!(db.check_integrity()?.is_ok());
    {
        let read = db.begin_read()?;
        let t = read.open_table(DOCS)?;
        assert_eq!(t.len(), N / 10);
        assert_eq!(t.last()?.map(|(k, _)| k.value()), Some(N / 10 - 1));
    }

    // Online backup: a consistent copy of the latest commit, taken from a
    // snapshot (writers may continue meanwhile). The target must not exist.
    let backup = dir.path().join("maint-backup.cairn");
    db.backup_to(&backup)?;
    assert!(
        db.backup_to(&backup).is_err(),
        "an existing target is refused"
    );
    // Changes after the backup are not in it.
    let txn = db.begin_write()?;
    txn.open_table(DOCS)?.insert(N, &b"after the backup"[..])?;
    txn.commit()?;

    let copy = Database::open_read_only(&backup)?;
    assert!(
        copy.recovery_report().clean,
        "a backup is a cleanly closed file"
    );
    assert!(copy.check_integrity()?.is_ok());
    let read = copy.begin_read()?;
    let t = read.open_table(DOCS)?;
    assert_eq!(t.len(), N / 10);
    assert!(t.get(N)?.is_none());
    assert_eq!(t.get(5)?.map(|v| v.value().len()), Some(100));
    println!(
        "backup:    {} bytes, {} entries",
        std::fs::metadata(&backup)?.len(),
        t.len()
    );
    println!("maintenance: ok");
    Ok(())
}
