//! Property: etcd's limits (request size, operations per transaction),
//! compaction, an unknown format and an unreachable cluster each give their
//! own typed error, naming the limit, revision, prefix or endpoints — and
//! what fits just under a limit is accepted.

use std::time::{Duration, Instant};

use cairndb_etcd::{
    Error, EtcdDatabase, Options, DEFAULT_MAX_REQUEST_BYTES, DEFAULT_MAX_TXN_OPS,
    REQUEST_OVERHEAD_BYTES_PER_OP,
};

use crate::common::{cluster, connect};

#[test]
fn limits_compaction_and_format_are_typed_errors() {
    let Some(c) = cluster("limits_compaction_and_format_are_typed_errors") else {
        return;
    };
    let db = connect(&c.url("limits"));

    // A value just under the request limit is stored; one byte more is refused.
    let header = "limits/t/big".len() + 1;
    let fits = DEFAULT_MAX_REQUEST_BYTES - header - 1 - REQUEST_OVERHEAD_BYTES_PER_OP - 1024; // room for the table's version put in the same Txn
    let tx = db.begin_write().unwrap();
    tx.open_table("big")
        .unwrap()
        .insert(b"k", &vec![7u8; fits])
        .unwrap();
    tx.commit().unwrap();
    let rx = db.begin_read().unwrap();
    assert_eq!(
        rx.open_table("big")
            .unwrap()
            .get(b"k")
            .unwrap()
            .map(|v| v.len()),
        Some(fits)
    );
    let tx = db.begin_write().unwrap();
    // One byte over: refused at insert, naming the table, key and size.
    let e = tx
        .open_table("big")
        .unwrap()
        .insert(b"k\x01", &vec![7u8; fits + 1024])
        .unwrap_err();
    match &e {
        Error::EntryTooLarge {
            table,
            key,
            limit: "--max-request-bytes",
            size,
            max: DEFAULT_MAX_REQUEST_BYTES,
        } => {
            assert_eq!((table.as_str(), key.as_str()), ("big", "k\\x01"));
            assert_eq!(*size, DEFAULT_MAX_REQUEST_BYTES + 1);
        }
        other => panic!("expected EntryTooLarge, got {other:?}"),
    }
    assert!(e.to_string().contains("k\\x01"), "{e}");
    assert!(
        e.to_string()
            .contains(&DEFAULT_MAX_REQUEST_BYTES.to_string()),
        "{e}"
    );
    // The largest entry that fits alone is accepted at insert.
    tx.open_table("big")
        .unwrap()
        .insert(b"k\x01", &vec![7u8; fits + 1023])
        .unwrap();
    drop(tx);
    // Two values that fit alone but not together.
    let tx = db.begin_write().unwrap();
    let t = tx.open_table("big").unwrap();
    t.insert(b"a", &vec![1u8; fits]).unwrap();
    t.insert(b"b", &vec![1u8; fits]).unwrap();
    let e = tx.commit().unwrap_err();
    assert!(
        matches!(
            e,
            Error::TooLarge {
                limit: "--max-request-bytes",
                ..
            }
        ),
        "{e}"
    );

    // Operations: the table's version put counts as one.
    let tx = db.begin_write().unwrap();
    let t = tx.open_table("ops").unwrap();
    for i in 0..DEFAULT_MAX_TXN_OPS - 3 {
        t.insert(format!("{i:04}").as_bytes(), b"v").unwrap();
    }
    tx.commit().unwrap(); // + catalog, version, catalog version = 128
    let tx = db.begin_write().unwrap();
    let t = tx.open_table("ops").unwrap();
    for i in 0..DEFAULT_MAX_TXN_OPS {
        t.insert(format!("{i:04}").as_bytes(), b"w").unwrap();
    }
    let e = tx.commit().unwrap_err();
    assert!(
        matches!(
            e,
            Error::TooLarge {
                limit: "--max-txn-ops",
                size: 129,
                max: 128,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("--max-txn-ops"), "{e}");
    // Compares: one per key read.
    let tx = db.begin_write().unwrap();
    let t = tx.open_table("ops").unwrap();
    for i in 0..DEFAULT_MAX_TXN_OPS + 1 {
        t.get(format!("{i:04}").as_bytes()).unwrap();
    }
    t.insert(b"x", b"x").unwrap();
    let e = tx.commit().unwrap_err();
    assert!(e.to_string().contains("compares"), "{e}");

    // Compaction: a snapshot older than the compacted revision is gone.
    let rx = db.begin_read().unwrap();
    let old = rx.revision();
    let tx = db.begin_write().unwrap();
    tx.open_table("ops")
        .unwrap()
        .insert(b"0000", b"newer")
        .unwrap();
    let newer = tx.commit().unwrap();
    db.compact(newer).unwrap();
    match rx.open_table("ops").and_then(|t| t.get(b"0000")) {
        Err(Error::Compacted { revision }) => assert_eq!(revision, old),
        other => panic!("expected Compacted, got {other:?}"),
    }
    let e = rx.open_table("ops").err().unwrap();
    assert!(e.to_string().contains("compacted"), "{e}");

    // run_in_transaction runs a transaction whose snapshot was compacted again.
    let mut attempts = 0;
    let got = db
        .run_in_transaction(|tx| {
            attempts += 1;
            // The snapshot is fixed by the transaction's first request.
            tx.revision()?;
            if attempts == 1 {
                let other = db.begin_write()?;
                other.open_table("ops")?.insert(b"0001", b"moved on")?;
                db.compact(other.commit()?)?;
            }
            tx.open_table("ops")?.get(b"0001")
        })
        .unwrap();
    assert_eq!((attempts, got), (2, Some(b"moved on".to_vec())));

    // A prefix written by a newer format, and one that is not ours.
    drop(connect(&c.url("future"))); // writes the format record
    overwrite_meta(&c.url("future"), "future", b"cairndb-etcd format 99");
    let e = EtcdDatabase::connect(&c.url("future")).unwrap_err();
    assert!(
        matches!(e, Error::Format { .. }) && e.to_string().contains("newer"),
        "{e}"
    );
    overwrite_meta(&c.url("future"), "future", b"something else");
    let e = EtcdDatabase::connect(&c.url("future")).unwrap_err();
    assert!(
        e.to_string().contains("not a cairndb-etcd format record"),
        "{e}"
    );
}

/// Writes a prefix's metadata key through another prefix's client: the
/// layout gives no API for it, so a table-less raw write is made with the
/// etcd client directly.
fn overwrite_meta(url: &str, prefix: &str, value: &[u8]) {
    let endpoints = cairndb_etcd::EtcdUrl::parse(url).unwrap().endpoints;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut client = etcd_client::Client::connect(&endpoints, None)
            .await
            .unwrap();
        client
            .put(format!("{prefix}/meta"), value.to_vec(), None)
            .await
            .unwrap();
    });
}

#[test]
fn an_unreachable_cluster_is_unavailable_within_the_timeout() {
    // A port with no listener: bound, then released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("etcd://127.0.0.1:{port}/app");
    let options = Options {
        request_timeout: Duration::from_millis(500),
        connect_timeout: Duration::from_millis(500),
        ..Options::default()
    };
    let started = Instant::now();
    let e = EtcdDatabase::connect_with(&url, options).unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    match &e {
        Error::Unavailable { endpoints, .. } => {
            assert_eq!(endpoints, &[format!("http://127.0.0.1:{port}")]);
            assert!(e.to_string().contains(&format!("127.0.0.1:{port}")), "{e}");
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

/// etcd's backend quota: once a member's database passes
/// `--quota-backend-bytes` the cluster raises the NOSPACE alarm and
/// refuses writes with `etcdserver: mvcc: database space exceeded`; the
/// KV layer and the document layer both get [`Error::QuotaExceeded`],
/// whose message says how to recover, and reads still work.
#[test]
fn a_full_backend_is_quota_exceeded_with_what_to_do() {
    // One member with a 1 MiB quota: a few hundred KiB of values fill it.
    let Some(c) = crate::common::cluster_with(
        "a_full_backend_is_quota_exceeded_with_what_to_do",
        1,
        &["--quota-backend-bytes", "1048576"],
    ) else {
        return;
    };
    let db = connect(&c.url("quota"));
    let people = db.collection::<serde_json::Value>("people");
    people
        .insert(&serde_json::json!({"_id": 0, "name": "ada"}))
        .unwrap();
    let value = vec![7u8; 96 * 1024];
    let mut refused = None;
    for i in 0..64u32 {
        let tx = db.begin_write().unwrap();
        tx.open_table("fill")
            .unwrap()
            .insert(&i.to_be_bytes(), &value)
            .unwrap();
        match tx.commit() {
            Ok(_) => {}
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
    }
    let e = refused.expect("64 writes of 96 KiB fill a 1 MiB backend");
    assert!(matches!(e, Error::QuotaExceeded { .. }), "{e:?}");
    let message = e.to_string();
    for what in [
        "out of space",
        "database space exceeded",
        "etcdctl compact",
        "etcdctl defrag",
        "etcdctl alarm disarm",
        "--quota-backend-bytes",
    ] {
        assert!(message.contains(what), "{what:?} not in {message}");
    }
    // A document write: the same error, not a document-layer one.
    let e = people
        .insert(&serde_json::json!({"_id": 1, "name": "grace"}))
        .unwrap_err();
    assert!(matches!(e, Error::QuotaExceeded { .. }), "{e:?}");
    // Reads still work, and nothing of the refused writes is there.
    assert_eq!(people.len().unwrap(), 1);
    assert_eq!(people.get(1).unwrap(), None);
}
