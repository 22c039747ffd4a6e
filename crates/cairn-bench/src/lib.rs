//! `cairn bench`: the built-in benchmark (the `cairn` tool includes it with
//! its cargo feature `bench`).
//!
//! Runs the workloads of `docs/benchmarks.md` (suite T: the Thunder vs bbolt
//! table and suite R: the redb comparison suite, in `kv.rs`; suite E, the
//! event store, in `events.rs`; suite D, documents, in `docs.rs`; suite S,
//! `cairn serve` beside tiedot's HTTP API, in `serve.rs`) on CairnDB
//! and, when built with `--features peers` (and `rocksdb`), on its peers
//! side by side in the same run, each engine in a fresh directory. Every
//! write row runs in mode D (durable when commit returns: a real device
//! flush) and mode N (crash-consistent, no flush). Prints the machine, the
//! fsync floor, each engine's configuration and one Markdown table per
//! suite with CairnDB's ratio to the best peer; `--json FILE` writes every
//! figure, `--svg DIR` a chart per suite. With `--backend etcd://…` (feature
//! `etcd`), `kv`, `events` and `docs` run a few bounded rows on a cluster
//! beside a CairnDB file instead (`etcd_rows.rs`, `etcd_events.rs`,
//! `etcd_docs.rs`). Layout: ARCHITECTURE.md, "The benchmark".

pub mod args;
mod data;
mod docs;
mod engine;
#[cfg(feature = "etcd")]
mod etcd_costs;
#[cfg(feature = "etcd")]
mod etcd_docs;
#[cfg(feature = "etcd")]
mod etcd_events;
#[cfg(feature = "etcd")]
mod etcd_rows;
mod events;
mod kv;
mod peers;
mod report;
mod seam_cost;
mod serve;
mod suite;
mod svg;
mod sysinfo;

pub use args::*;

/// What `--backend etcd://…` says on a build without the etcd rows.
#[cfg(not(feature = "etcd"))]
const NO_ETCD: &str = "this build has no etcd backend: build cairn with `--features bench` \
                       (cairn-bench's feature `etcd`)";

/// Runs `cairn bench [kv|events|docs|serve]`, writing the report to `w`
/// (progress bars and the files written go to standard error).
pub fn run_cmd(
    cmd: BenchCmd,
    w: &mut dyn std::io::Write,
) -> Result<(), Box<dyn std::error::Error>> {
    match cmd.what {
        Some(BenchWhat::Kv(args)) => match &args.backend {
            #[cfg(feature = "etcd")]
            Some(url) => {
                etcd_rows::run(&args, url, w).map_err(|e| -> Box<dyn std::error::Error> { e })
            }
            #[cfg(not(feature = "etcd"))]
            Some(_) => Err(NO_ETCD.into()),
            None => suite::run(&args, w),
        },
        Some(BenchWhat::Events(args)) => match &args.backend {
            #[cfg(feature = "etcd")]
            Some(url) => {
                etcd_events::run(&args, url, w).map_err(|e| -> Box<dyn std::error::Error> { e })
            }
            #[cfg(not(feature = "etcd"))]
            Some(_) => Err(NO_ETCD.into()),
            None => suite::run(&args, w),
        },
        Some(BenchWhat::Docs(args)) => match &args.backend {
            #[cfg(feature = "etcd")]
            Some(url) => {
                etcd_docs::run(&args, url, w).map_err(|e| -> Box<dyn std::error::Error> { e })
            }
            #[cfg(not(feature = "etcd"))]
            Some(_) => Err(NO_ETCD.into()),
            None => suite::run(&args, w),
        },
        Some(BenchWhat::KvReader(args)) => {
            kv::procs::run_child(&args, w).map_err(|e| -> Box<dyn std::error::Error> { e })
        }
        Some(BenchWhat::Serve(mut args)) => {
            // Each row is a timed run already: one repeat unless asked.
            args.common.repeat.get_or_insert(1);
            suite::run(&args, w)
        }
        None => {
            let mut args = cmd.kv;
            // The quick default: one repeat unless asked otherwise.
            args.common.repeat.get_or_insert(1);
            suite::run(&args, w)
        }
    }
}
