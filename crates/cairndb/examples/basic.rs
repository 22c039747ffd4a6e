//! The basics: create a database file, open tables, insert, get, range,
//! remove, commit, and read from a snapshot.
//!
//! Run with `cargo run -p cairndb --example basic`.

use cairndb::{Database, ReadableTable, TableDefinition};

/// A table of user names to ages. A definition is just a name plus the key
/// and value types; the types are recorded in the file and checked on open.
const USERS: TableDefinition<&str, u32> = TableDefinition::new("users");
/// A second table in the same file: page ids to titles.
const PAGES: TableDefinition<u64, &str> = TableDefinition::new("pages");

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("basic.cairn");
    let db = Database::create(&path)?;

    // 1. A write transaction: every change is private until commit. Tables
    //    are created on first open. Both tables change atomically.
    let txn = db.begin_write()?;
    {
        let mut users = txn.open_table(USERS)?;
        users.insert("ada", &36)?;
        users.insert("bob", &41)?;
        users.insert("cyd", &29)?;
        users.insert("dee", &52)?;
        // Inserting an existing key replaces it and returns the old value.
        let old = users.insert("bob", &42)?;
        assert_eq!(old.map(|v| v.value()), Some(41));

        let mut pages = txn.open_table(PAGES)?;
        pages.insert(1, "Home")?;
        pages.insert(2, "About")?;
    } // Table handles are dropped (checked back in) before the commit.
    let committed = txn.commit()?;
    println!("committed transaction {committed:?}");

    // 2. A read transaction is a snapshot of the latest commit.
    let read = db.begin_read()?;
    let users = read.open_table(USERS)?;
    assert_eq!(users.len(), 4);
    assert_eq!(users.get("ada")?.map(|v| v.value()), Some(36));
    assert_eq!(users.get("bob")?.map(|v| v.value()), Some(42));
    assert!(users.get("zed")?.is_none());

    // Range scans are in key order (here: byte order of the names).
    let mut names = Vec::new();
    for entry in users.range("b".."d")? {
        let (k, v) = entry?;
        println!("  {} is {}", k.value(), v.value());
        names.push(k.value().to_string());
    }
    assert_eq!(names, ["bob", "cyd"]);
    // Ranges are double-ended.
    let last = users.iter()?.next_back().transpose()?;
    assert_eq!(last.map(|(k, _)| k.value().to_string()), Some("dee".into()));
    assert_eq!(read.list_tables()?, ["pages", "users"]);

    // 3. Another write: remove one entry, change another. The snapshot taken
    //    above keeps seeing the old state, the writer never disturbs it.
    let txn = db.begin_write()?;
    {
        let mut users = txn.open_table(USERS)?;
        let removed = users.remove("cyd")?;
        assert_eq!(removed.map(|v| v.value()), Some(29));
        assert!(users.remove("nobody")?.is_none());
        users.insert("ada", &37)?;
        // Reads inside the write transaction see its own changes.
        assert_eq!(users.get("ada")?.map(|v| v.value()), Some(37));
        assert_eq!(users.len(), 3);
    }
    txn.commit()?;

    assert_eq!(users.len(), 4, "the old snapshot is unchanged");
    assert_eq!(users.get("cyd")?.map(|v| v.value()), Some(29));
    assert_eq!(users.get("ada")?.map(|v| v.value()), Some(36));
    // Ending a read transaction releases its snapshot (pages only it could
    // reach become reusable by later commits).
    drop(read);

    // A new snapshot sees the new commit.
    let read = db.begin_read()?;
    let users = read.open_table(USERS)?;
    assert_eq!(users.len(), 3);
    assert!(users.get("cyd")?.is_none());
    assert_eq!(users.get("ada")?.map(|v| v.value()), Some(37));

    // 4. Dropping a write transaction without committing aborts it.
    {
        let txn = db.begin_write()?;
        txn.open_table(USERS)?.insert("eve", &1)?;
        // no commit
    }
    let read2 = db.begin_read()?;
    assert!(read2.open_table(USERS)?.get("eve")?.is_none());
    // Snapshots must end before `close()`: a live one keeps the file open.
    drop(read);
    drop(read2);

    // 5. Close and reopen: the data is in the file.
    db.close()?;
    let db = Database::open(&path)?;
    let read = db.begin_read()?;
    let pages = read.open_table(PAGES)?;
    assert_eq!(
        pages.get(2)?.map(|v| v.value().to_string()),
        Some("About".into())
    );
    assert_eq!(read.open_table(USERS)?.len(), 3);
    println!("basic: ok");
    Ok(())
}
