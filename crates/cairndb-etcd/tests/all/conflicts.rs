//! Property: a write transaction whose reads were changed by another commit
//! after its snapshot — a key's value, a key's absence, a range's set of
//! keys (phantoms), a table's existence — fails with a retryable
//! `Conflict` and writes nothing; writes it did not read never conflict;
//! `run_in_transaction` retries a conflict.

use cairndb_etcd::{Error, EtcdDatabase};

use crate::common::{cluster, connect};

fn put(db: &EtcdDatabase, table: &str, k: &[u8], v: &[u8]) {
    let tx = db.begin_write().unwrap();
    tx.open_table(table).unwrap().insert(k, v).unwrap();
    tx.commit().unwrap();
}

fn assert_conflict(r: cairndb_etcd::Result<cairndb_etcd::Revision>, what: &str) {
    match r {
        Err(e @ Error::Conflict { .. }) => assert!(e.is_retryable()),
        other => panic!("{what}: expected a conflict, got {other:?}"),
    }
}

#[test]
fn changed_reads_conflict_and_blind_writes_do_not() {
    let Some(c) = cluster("changed_reads_conflict_and_blind_writes_do_not") else {
        return;
    };
    let db = connect(&c.url("conflicts"));
    put(&db, "t", b"k", b"1");

    // A key read, then changed by another commit.
    let tx = db.begin_write().unwrap();
    assert_eq!(
        tx.open_table("t").unwrap().get(b"k").unwrap(),
        Some(b"1".to_vec())
    );
    put(&db, "t", b"k", b"2");
    tx.open_table("t").unwrap().insert(b"other", b"x").unwrap();
    assert_conflict(tx.commit(), "value changed");
    let rx = db.begin_read().unwrap();
    assert_eq!(
        rx.open_table("t").unwrap().get(b"other").unwrap(),
        None,
        "nothing written"
    );

    // A key read as absent, then created.
    let tx = db.begin_write().unwrap();
    assert_eq!(tx.open_table("t").unwrap().get(b"new").unwrap(), None);
    put(&db, "t", b"new", b"1");
    tx.open_table("t").unwrap().insert(b"x", b"1").unwrap();
    assert_conflict(tx.commit(), "absent key created");

    // A key read, then removed.
    let tx = db.begin_write().unwrap();
    assert!(tx.open_table("t").unwrap().get(b"new").unwrap().is_some());
    let other = db.begin_write().unwrap();
    other.open_table("t").unwrap().remove(b"new").unwrap();
    other.commit().unwrap();
    tx.open_table("t").unwrap().insert(b"x", b"1").unwrap();
    assert_conflict(tx.commit(), "read key removed");

    // A range read, then a key inserted into it (a phantom).
    let tx = db.begin_write().unwrap();
    let before = tx.open_table("t").unwrap().range(..).unwrap();
    put(&db, "t", b"phantom", b"1");
    tx.open_table("t")
        .unwrap()
        .insert(b"sum", &[before.len() as u8])
        .unwrap();
    assert_conflict(tx.commit(), "phantom in a range read");

    // A table used, then deleted by another commit.
    let tx = db.begin_write().unwrap();
    tx.open_table("t").unwrap().insert(b"late", b"1").unwrap();
    let other = db.begin_write().unwrap();
    assert!(other.delete_table("t").unwrap());
    other.commit().unwrap();
    assert_conflict(tx.commit(), "table deleted meanwhile");
    let rx = db.begin_read().unwrap();
    assert!(matches!(
        rx.open_table("t"),
        Err(Error::TableDoesNotExist(_))
    ));

    // The table list read, then a table created.
    let tx = db.begin_write().unwrap();
    assert_eq!(tx.list_tables().unwrap(), Vec::<String>::new());
    put(&db, "u", b"k", b"1");
    tx.open_table("v").unwrap().insert(b"k", b"1").unwrap();
    assert_conflict(tx.commit(), "table created after list_tables");

    // Blind writes of the same key by two transactions: no conflict, the
    // later commit wins.
    let a = db.begin_write().unwrap();
    let b = db.begin_write().unwrap();
    a.open_table("u").unwrap().insert(b"k", b"a").unwrap();
    b.open_table("u").unwrap().insert(b"k", b"b").unwrap();
    let ra = a.commit().unwrap();
    let rb = b.commit().unwrap();
    assert!(rb > ra);
    let rx = db.begin_read().unwrap();
    assert_eq!(
        rx.open_table("u").unwrap().get(b"k").unwrap(),
        Some(b"b".to_vec())
    );

    // A transaction that only read commits at its snapshot.
    let tx = db.begin_write().unwrap();
    let at = tx.revision().unwrap();
    tx.open_table("u").unwrap().get(b"k").unwrap();
    put(&db, "u", b"k", b"c");
    assert_eq!(tx.commit().unwrap(), at);

    // run_in_transaction: the first attempt is made to conflict, the retry
    // succeeds.
    let mut attempts = 0;
    db.run_in_transaction(|tx| {
        attempts += 1;
        let t = tx.open_table("u")?;
        let v = t.get(b"k")?.unwrap_or_default();
        if attempts == 1 {
            put(&db, "u", b"k", b"interloper");
        }
        t.insert(b"k", &[v, b"+".to_vec()].concat())
    })
    .unwrap();
    assert_eq!(attempts, 2);
    let rx = db.begin_read().unwrap();
    assert_eq!(
        rx.open_table("u").unwrap().get(b"k").unwrap(),
        Some(b"interloper+".to_vec())
    );
}

#[test]
fn a_table_deleted_and_created_again_in_one_transaction_keeps_only_new_entries() {
    let Some(c) = cluster("a_table_deleted_and_created_again") else {
        return;
    };
    let db = connect(&c.url("recreate"));
    let tx = db.begin_write().unwrap();
    let t = tx.open_table("t").unwrap();
    for k in [&b"a"[..], b"b", b"c", b"d"] {
        t.insert(k, b"old").unwrap();
    }
    tx.commit().unwrap();
    let tx = db.begin_write().unwrap();
    assert!(tx.delete_table("t").unwrap());
    let t = tx.open_table("t").unwrap();
    assert_eq!(t.range(..).unwrap(), vec![]);
    t.insert(b"b", b"new").unwrap();
    t.insert(b"d", b"new").unwrap();
    t.insert(b"e", b"new").unwrap();
    t.remove(b"e").unwrap();
    tx.commit().unwrap();
    let rx = db.begin_read().unwrap();
    assert_eq!(
        rx.open_table("t").unwrap().range(..).unwrap(),
        vec![
            (b"b".to_vec(), b"new".to_vec()),
            (b"d".to_vec(), b"new".to_vec())
        ]
    );
}
