//! Backup paths at the library level: `backup_to` beside a committing
//! writer gives a copy equal to one committed snapshot that passes the
//! integrity and event checks; the restore permission (`begin_restore`)
//! is refused on a database that holds tables and by another database's
//! transactions, and with it every table, internal ones included, is
//! rebuilt byte for byte; documents read back as `serde_json::Value` with
//! generated ids (`{"$oid": hex}`); `Value: From<u64>`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use cairndb::document::{ObjectId, Value};
use cairndb::events::{EventData, EventStore, EventWriter, ExpectedVersion};
use cairndb::{CoreError, Database, ReadableTable, TableDefinition};
use serde_json::json;

fn contents(db: &Database) -> cairndb::testing::Tables {
    cairndb::testing::all_tables(db).unwrap()
}

const KV: TableDefinition<u64, &[u8]> = TableDefinition::new("kv");
const GONE: TableDefinition<u64, u64> = TableDefinition::new("gone");

#[test]
fn backup_beside_a_writer_equals_a_committed_snapshot() {
    backups_beside_a_writer(false);
}

/// The same from a read-only handle beside the writer (what `cairn backup`
/// uses while `cairn serve` holds the file): its snapshot is the newest
/// commit slot's trees plus the writer's durable commits in the commit
/// log, which the copy gets applied (inserts and removals, in key-value
/// tables, collections with their indexes and event streams alike); before,
/// such a backup was refused.
#[test]
fn backup_from_a_read_only_handle_beside_a_writer_has_its_logged_commits() {
    backups_beside_a_writer(true);
}

fn backups_beside_a_writer(read_only: bool) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("src.cairn");
    let db = Arc::new(Database::create(&path).unwrap());
    db.collection::<serde_json::Value>("c")
        .create_index(&[("n", 1)], Default::default())
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    // Commits that returned: a copy holds at least those committed before
    // `backup_to` was called (it copies the latest commit, not an old one).
    let done = Arc::new(AtomicU64::new(0));
    // Each commit writes a KV entry, a document and an event: the copy's
    // three views must agree on how many commits it holds.
    let writer = {
        let (db, stop, done) = (db.clone(), stop.clone(), done.clone());
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) || i < 50 {
                let w = db.begin_write().unwrap();
                w.open_table(KV)
                    .unwrap()
                    .insert(i, [7u8; 300].as_slice())
                    .unwrap();
                // A removal in every commit: GONE holds only the last key.
                let mut g = w.open_table(GONE).unwrap();
                g.insert(i, i).unwrap();
                if i > 0 {
                    g.remove(i - 1).unwrap();
                }
                drop(g);
                w.collection::<serde_json::Value>("c")
                    .insert(&json!({"_id": i, "n": i}))
                    .unwrap();
                EventWriter::new(&w)
                    .append(
                        "s",
                        ExpectedVersion::Any,
                        &[EventData::new("t", i.to_be_bytes().to_vec())],
                    )
                    .unwrap();
                w.commit().unwrap();
                i += 1;
                done.store(i, Ordering::SeqCst);
            }
            i
        })
    };
    let mut copies = Vec::new();
    let reader = read_only.then(|| Database::open_read_only(&path).unwrap());
    let src = reader.as_ref().unwrap_or(&db);
    for k in 0..6 {
        std::thread::sleep(std::time::Duration::from_millis(15));
        let dest = dir.path().join(format!("copy{k}.cairn"));
        let before = done.load(Ordering::SeqCst);
        src.backup_to(&dest).unwrap();
        let after = done.load(Ordering::SeqCst);
        copies.push((dest, before, after));
    }
    stop.store(true, Ordering::Relaxed);
    let total = writer.join().unwrap();
    let mut sizes = Vec::new();
    for (dest, before, after) in &copies {
        let copy = Database::open_read_only(dest).unwrap();
        assert!(copy.check_integrity().unwrap().problems.is_empty());
        assert!(EventStore::new(&copy).check().unwrap().is_empty());
        assert!(copy
            .collection::<serde_json::Value>("c")
            .check_indexes()
            .unwrap()
            .is_empty());
        // One snapshot: the entries are a prefix 0..n of the writer's, and
        // the documents and events stop at the same commit.
        let r = copy.begin_read().unwrap();
        let keys: Vec<u64> = match r.open_table(KV) {
            Ok(t) => t.iter().unwrap().map(|e| e.unwrap().0.value()).collect(),
            Err(CoreError::TableNotFound(_)) => Vec::new(),
            Err(e) => panic!("{e}"),
        };
        let gone: Vec<(u64, u64)> = match r.open_table(GONE) {
            Ok(t) => t
                .iter()
                .unwrap()
                .map(|e| {
                    let (k, v) = e.unwrap();
                    (k.value(), v.value())
                })
                .collect(),
            Err(CoreError::TableNotFound(_)) => Vec::new(),
            Err(e) => panic!("{e}"),
        };
        drop(r);
        let n = keys.len() as u64;
        assert_eq!(keys, (0..n).collect::<Vec<_>>());
        let last: Vec<(u64, u64)> = n.checked_sub(1).map(|l| (l, l)).into_iter().collect();
        assert_eq!(gone, last);
        assert_eq!(copy.collection::<serde_json::Value>("c").len().unwrap(), n);
        let version = EventStore::new(&copy).stream_version("s").unwrap();
        assert_eq!(version.map_or(0, |v| v.0 + 1), n);
        assert!(
            *before <= n && n <= after + 1,
            "copy of {n} commits, {before} before the call, {after} after"
        );
        sizes.push(n);
    }
    assert!(sizes.windows(2).all(|w| w[0] <= w[1]), "{sizes:?}");
    assert!(*sizes.last().unwrap() <= total);
}

#[test]
fn restore_needs_an_empty_database_and_its_own_permission() {
    let dir = tempfile::tempdir().unwrap();
    let src = Database::create(dir.path().join("src.cairn")).unwrap();
    src.collection::<serde_json::Value>("c")
        .insert(&json!({"a": 1}))
        .unwrap();
    EventStore::new(&src)
        .append(
            "s",
            ExpectedVersion::Any,
            &[EventData::new("t", b"x".to_vec())],
        )
        .unwrap();
    // The source holds tables: no restore into it.
    match src.begin_restore() {
        Err(CoreError::NotEmpty { tables, first }) => {
            assert!(tables >= 2, "{tables}");
            assert!(first.starts_with('$'), "{first}");
        }
        other => panic!("restore into a non-empty database: {other:?}"),
    }
    // Without the permission, internal tables stay closed to raw writes.
    let dst = Database::create(dir.path().join("dst.cairn")).unwrap();
    {
        let w = dst.begin_write().unwrap();
        assert!(matches!(
            w.open_untyped_table_with_types("$docs", "&str", "&[u8]"),
            Err(CoreError::InvalidTableName { .. })
        ));
    }
    let permit = dst.begin_restore().unwrap();
    // Another database's transaction cannot use it.
    let other = Database::create(dir.path().join("other.cairn")).unwrap();
    {
        let w = other.begin_write().unwrap();
        assert!(matches!(
            w.open_table_for_restore(&permit, "$docs", "&str", "&[u8]"),
            Err(CoreError::InvalidOption(_))
        ));
    }
    // With it, every table of the source is rebuilt, in two commits.
    let want = contents(&src);
    for (i, (name, ((kt, vt), entries))) in want.iter().enumerate() {
        let w = dst.begin_write().unwrap();
        {
            let mut t = w.open_table_for_restore(&permit, name, kt, vt).unwrap();
            for (k, v) in entries {
                t.insert(k.as_slice(), v.as_slice()).unwrap();
            }
        }
        w.commit().unwrap();
        // A table's types are checked when it is opened again.
        if i == 0 {
            let w = dst.begin_write().unwrap();
            assert!(matches!(
                w.open_table_for_restore(&permit, name, "u8", "u8"),
                Err(CoreError::TableTypeMismatch(_))
            ));
        }
    }
    assert_eq!(contents(&dst), want);
    assert!(EventStore::new(&dst).check().unwrap().is_empty());
    let docs: Vec<serde_json::Value> = dst
        .collection::<serde_json::Value>("c")
        .all()
        .unwrap()
        .map(|d| d.unwrap())
        .collect();
    assert_eq!(docs.len(), 1);
    assert_eq!(docs[0]["a"], json!(1));
    // Now it holds tables: a second restore is refused.
    assert!(matches!(
        dst.begin_restore(),
        Err(CoreError::NotEmpty { .. })
    ));
}

#[test]
fn json_documents_with_generated_ids_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::create(dir.path().join("j.cairn")).unwrap();
    let c = db.collection::<serde_json::Value>("t");
    let id = c.insert(&json!({"name": "b"})).unwrap();
    let Value::Id(oid) = id else {
        panic!("generated id is not an ObjectId: {id:?}")
    };
    let found: Vec<serde_json::Value> = c
        .find(json!({}))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    // MongoDB Extended JSON, as `Value::to_json` writes ids.
    assert_eq!(
        found,
        vec![json!({"_id": {"$oid": oid.to_hex()}, "name": "b"})]
    );
    assert_eq!(c.get(id.clone()).unwrap(), Some(found[0].clone()));
    // The documents as `Value` and `ObjectId` still read their bytes.
    let d = db
        .collection::<cairndb::document::Document>("t")
        .get(id)
        .unwrap()
        .unwrap();
    assert_eq!(d.get("_id"), Some(&Value::Id(oid)));
    #[derive(serde::Serialize, serde::Deserialize)]
    struct WithId {
        _id: ObjectId,
        name: String,
    }
    let typed = db
        .collection::<WithId>("t")
        .find_one(json!({}))
        .unwrap()
        .unwrap();
    assert_eq!((typed._id, typed.name.as_str()), (oid, "b"));
    // The JSON form filters back to the same document.
    let again = c.find_one(json!({"_id": {"$oid": oid.to_hex()}})).unwrap();
    assert_eq!(again, Some(found[0].clone()));
}

#[test]
fn ids_from_wide_integers() {
    assert_eq!(Value::from(7u64), Value::Int(7));
    assert_eq!(Value::from(7usize), Value::Int(7));
    assert_eq!(Value::from(-7isize), Value::Int(-7));
    assert_eq!(Value::from(u64::MAX), Value::Float(u64::MAX as f64));
    assert_eq!(Value::from(i128::MIN), Value::Float(i128::MIN as f64));
    let dir = tempfile::tempdir().unwrap();
    let db = Database::create(dir.path().join("u.cairn")).unwrap();
    let c = db.collection::<serde_json::Value>("t");
    c.insert(&json!({"_id": 42u64, "v": 1})).unwrap();
    assert_eq!(c.get(42u64).unwrap(), Some(json!({"_id": 42, "v": 1})));
}

/// `backup_to_writer` streams exactly the bytes `backup_to` leaves in its
/// file (header first, zeros where the commit reaches no page), and the
/// stream opens as the same database; a failing writer ends it with an
/// error.
#[test]
fn a_streamed_backup_is_the_backup_file_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::create(dir.path().join("src.cairn")).unwrap();
    let c = db.collection::<serde_json::Value>("c");
    c.create_index(&[("n", 1)], Default::default()).unwrap();
    for i in 0..3000u64 {
        c.insert(&json!({"_id": i, "n": i, "pad": "x".repeat(200)}))
            .unwrap();
    }
    // Freed pages inside the file: the copy has zeros there.
    c.delete_many(json!({"n": {"$lt": 1000}})).unwrap();
    let file = dir.path().join("copy.cairn");
    db.backup_to(&file).unwrap();
    let mut streamed = Vec::new();
    let n = db.backup_to_writer(&mut streamed).unwrap();
    let on_disk = std::fs::read(&file).unwrap();
    assert_eq!(n, streamed.len() as u64);
    assert!(streamed.len() > 512 << 10, "{}", streamed.len());
    assert!(
        streamed == on_disk,
        "the stream differs from the backup file"
    );
    let copy = dir.path().join("streamed.cairn");
    std::fs::write(&copy, &streamed).unwrap();
    let restored = Database::open(&copy).unwrap();
    assert_eq!(contents(&restored), contents(&db));
    assert!(restored.check_integrity().unwrap().problems.is_empty());

    struct Fails(usize);
    impl std::io::Write for Fails {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            if self.0 < b.len() {
                return Err(std::io::Error::other("disk full"));
            }
            self.0 -= b.len();
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let err = db.backup_to_writer(&mut Fails(100 << 10)).unwrap_err();
    assert!(err.to_string().contains("disk full"), "{err}");
}

/// `io_counters`: commits count the caller's commits; durable commits
/// flush the file, a `Durability::None` commit does not; page reads are
/// hits or misses; `stats()` carries the same counters.
#[test]
fn io_counters_count_commits_flushes_and_cache_reads() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.cairn");
    {
        let db = Database::create(&path).unwrap();
        let c = db.collection::<serde_json::Value>("c");
        for i in 0..2000u64 {
            c.insert(&json!({"_id": i, "pad": "y".repeat(100)}))
                .unwrap();
        }
    }
    let db = Database::open(&path).unwrap();
    let c0 = db.io_counters();
    assert_eq!(c0.commits, 0, "{c0:?}");
    let c = db.collection::<serde_json::Value>("c");
    c.insert(&json!({"_id": "durable"})).unwrap();
    let c1 = db.io_counters();
    assert_eq!(c1.commits, c0.commits + 1, "{c1:?}");
    assert!(c1.syncs > c0.syncs, "a durable commit flushes: {c1:?}");
    db.collection::<serde_json::Value>("c")
        .with_durability(cairndb::Durability::None)
        .insert(&json!({"_id": "not durable"}))
        .unwrap();
    let c2 = db.io_counters();
    assert_eq!(c2.commits, c1.commits + 1, "{c2:?}");
    assert_eq!(c2.syncs, c1.syncs, "no flush in Durability::None: {c2:?}");
    // Reads: the first pass misses (a reopened file), the second hits.
    for i in 0..2000u64 {
        assert!(c.get(i).unwrap().is_some());
    }
    let c3 = db.io_counters();
    assert!(c3.cache_misses > c2.cache_misses, "{c3:?}");
    for i in 0..2000u64 {
        assert!(c.get(i).unwrap().is_some());
    }
    let c4 = db.io_counters();
    assert!(c4.cache_hits > c3.cache_hits + 2000, "{c4:?}");
    assert!(c4.cache_misses - c3.cache_misses < 10, "{c3:?} {c4:?}");
    let s = db.stats().unwrap();
    assert!(
        s.io.commits == c4.commits && s.io.cache_hits >= c4.cache_hits,
        "{s:?}"
    );
}
