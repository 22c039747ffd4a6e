//! Engine behaviour the server depends on, found by fuzzing the HTTP API
//! with schemathesis.

use std::time::Duration;

use cairndb::document::Document;
use cairndb::Database;

/// A write transaction that changes nothing, committed after the
/// background spill ran, must succeed (it failed with "internal error:
/// commit N was never written out"; every such HTTP request — an
/// update_many matching nothing, a drop of a missing index — answered 500;
/// fixed in the engine: an empty durable commit waits for the newest user
/// commit, not for a staged spill that has no log record).
#[test]
fn an_empty_commit_after_a_background_spill_succeeds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Database::create(dir.path().join("t.cairn")).expect("create");
    let c = db.collection::<Document>("c");
    let mut failures = Vec::new();
    for i in 0..10 {
        c.insert(&Document::new()).expect("insert");
        std::thread::sleep(Duration::from_millis(120));
        let txn = db.begin_write().expect("begin");
        if let Err(e) = txn.commit() {
            failures.push(format!("round {i}: {e}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
