//! The one integration-test crate (one link step). Each module states the
//! property it checks in its opening comment. Randomized suites read `SEED`
//! and `ITERS` from the environment and print the seed on failure.

mod aggregate;
mod architecture;
mod backup;
mod bad_input;
mod changes;
mod commit_log;
mod common;
mod compat;
mod compat_docs_v6;
mod compat_docs_v8;
mod crash;
mod dates_parse;
mod documents;
mod documents_model;
mod events;
mod events_model;
mod fuzz_regressions;
mod groups;
mod kill9;
mod limits;
mod model;
mod multiprocess;
mod mvcc;
mod overlay;
mod planner;
mod query;
mod scans;
mod smoke;
mod snapshots;
mod text;
mod ttl;
mod write_behind;
