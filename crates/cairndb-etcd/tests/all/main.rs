//! The etcd mode's tests, against real 3-member etcd clusters on loopback
//! (one test crate; one cluster per test, one test's cluster at a time).
//! Without an `etcd` binary they are skipped with a message, unless
//! `CAIRN_REQUIRE_ETCD=1` (set by `.ci/run`) makes that a failure.

mod async_callers;
mod auth;
mod batches;
mod change_streams;
mod common;
mod conflicts;
mod documents;
#[path = "../../../cairndb/tests/all/documents_model.rs"]
mod documents_model;
mod event_counter;
mod events;
#[path = "../../../cairndb/tests/all/events_model.rs"]
mod events_model;
mod failures;
mod history;
mod limits;
mod model;
mod serializability;
mod subscription_stop;
