//! The blocking API called from inside a caller's own tokio runtime: on a
//! multi-thread runtime's worker, on a current-thread runtime and inside
//! `spawn_blocking`, connect, write, read and drop work (tokio's
//! `Runtime::block_on` panics there — "Cannot start a runtime from within
//! a runtime" — and so does dropping a runtime; the client drives its calls
//! from a thread of its own instead). Without a cluster, a connect from an
//! async task returns `Unavailable`, not a panic.

use std::time::Duration;

use cairndb_etcd::{Error, EtcdDatabase, Options};

use crate::common::{cluster, connect};

/// Connects, writes a key, reads it back and drops the handle.
fn round_trip(url: &str, key: &[u8]) {
    let db = connect(url);
    let tx = db.begin_write().unwrap();
    tx.open_table("t").unwrap().insert(key, b"v").unwrap();
    tx.commit().unwrap();
    let rx = db.begin_read().unwrap();
    assert_eq!(
        rx.open_table("t").unwrap().get(key).unwrap().as_deref(),
        Some(&b"v"[..])
    );
    drop(db);
}

#[test]
fn the_blocking_api_works_inside_a_tokio_runtime() {
    let Some(c) = cluster("the_blocking_api_works_inside_a_tokio_runtime") else {
        return;
    };
    let url = c.url("async");
    let multi = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let u = url.clone();
    multi
        .block_on(multi.spawn(async move { round_trip(&u, b"from a task") }))
        .unwrap();
    let u = url.clone();
    multi
        .block_on(multi.spawn_blocking(move || round_trip(&u, b"from spawn_blocking")))
        .unwrap();
    // A handle made outside and dropped inside an async task.
    let db = connect(&url);
    multi
        .block_on(multi.spawn(async move {
            assert!(db.begin_read().unwrap().list_tables().unwrap() == ["t"]);
            drop(db);
        }))
        .unwrap();
    let single = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    single.block_on(async { round_trip(&url, b"from a current-thread runtime") });
}

#[test]
fn a_failed_connect_inside_a_tokio_runtime_is_an_error() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let options = Options {
        connect_timeout: Duration::from_millis(200),
        request_timeout: Duration::from_millis(300),
        ..Options::default()
    };
    // Port 1 on loopback: nothing listens there.
    let got = rt.block_on(async {
        EtcdDatabase::connect_with("etcd://127.0.0.1:1/nothing", options).map(|_| ())
    });
    assert!(matches!(got, Err(Error::Unavailable { .. })), "{got:?}");
}
