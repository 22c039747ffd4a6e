//! Fuzz the format (suite 6, docs/reliability.md), the part `cargo test` runs: every
//! file of the committed seed corpus (`fuzz/corpus/<target>/`) and every
//! input a fuzzer once crashed or hung on (`fuzz/regressions/<target>/`) goes
//! through the same entry points as the `cargo fuzz` targets
//! (`cairndb::fuzzing`), followed by a quick deterministic loop of random
//! mutations of those files and random bytes. No input may panic, break a
//! property (the entry point's `Err`, counted as a crash, as the fuzz targets
//! do) or take more than 5 s.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use cairndb::fuzzing::{run_target, seed_corpus, TARGETS};
use cairndb::storage::sim::SplitMix64;

/// An input slower than this counts as a timeout.
const SLOW: Duration = Duration::from_secs(5);
/// After this long the loop stops waiting for an input at all.
const WATCHDOG: Duration = Duration::from_secs(60);

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// The files of `fuzz/<kind>/<target>/`, sorted by name.
fn files(kind: &str, target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = fuzz_dir().join(kind).join(target);
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_file() && p.file_name().is_none_or(|n| n != "README.md") {
                let bytes = std::fs::read(&p).unwrap();
                out.push((
                    format!("{kind}/{target}/{}", e.file_name().to_string_lossy()),
                    bytes,
                ));
            }
        }
    }
    out.sort();
    out
}

struct Input {
    target: &'static str,
    label: String,
    data: Vec<u8>,
}

#[derive(Default)]
struct Tally {
    execs: u64,
    crashes: u64,
    timeouts: u64,
}

/// Runs every input on a worker thread, catching panics and timing each.
fn run_all(inputs: Vec<Input>) -> Tally {
    let mut tally = Tally::default();
    let (to_worker, work) = mpsc::channel::<Input>();
    let (to_main, results) = mpsc::channel::<(String, Result<(), String>)>();
    std::thread::spawn(move || {
        for input in work {
            let r = std::panic::catch_unwind(|| run_target(input.target, &input.data))
                .unwrap_or_else(|p| {
                    let msg = p
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default();
                    Err(format!("panic: {msg}"))
                });
            if to_main.send((input.label, r)).is_err() {
                return;
            }
        }
    });
    for input in inputs {
        let (label, target, data) = (input.label.clone(), input.target, input.data.clone());
        let started = Instant::now();
        to_worker.send(input).unwrap();
        tally.execs += 1;
        match results.recv_timeout(WATCHDOG) {
            Ok((_, r)) => {
                if started.elapsed() > SLOW {
                    eprintln!("fuzz-format: {label} took {:?}", started.elapsed());
                    tally.timeouts += 1;
                }
                if let Err(e) = r {
                    eprintln!("fuzz-format: {label}: {e}");
                    keep_failure(target, &data);
                    tally.crashes += 1;
                }
            }
            Err(_) => {
                // The worker is stuck; leave it and stop here.
                eprintln!("fuzz-format: {label} still running after {WATCHDOG:?}");
                tally.timeouts += 1;
                break;
            }
        }
    }
    tally
}

/// Saves a failing input where `cargo fuzz run <target> <file>` (or a copy
/// into `fuzz/regressions/<target>/`) can replay it.
fn keep_failure(target: &str, data: &[u8]) {
    let dir = std::env::temp_dir()
        .join("cairn-fuzz-failures")
        .join(target);
    let name = format!("{:016x}", xxhash_rust::xxh3::xxh3_64(data));
    if std::fs::create_dir_all(&dir).is_ok() && std::fs::write(dir.join(&name), data).is_ok() {
        eprintln!("fuzz-format: input saved as {}", dir.join(name).display());
    }
}

/// A random change to a corpus file, or random bytes.
fn mutate(rng: &mut SplitMix64, base: &[u8]) -> Vec<u8> {
    let mut d = base.to_vec();
    match rng.below(6) {
        0 => (0..rng.below(256)).map(|_| rng.next_u64() as u8).collect(),
        1 => {
            d.truncate(rng.below(d.len() as u64 + 1) as usize);
            d
        }
        _ => {
            for _ in 0..1 + rng.below(8) {
                if d.is_empty() {
                    break;
                }
                let i = rng.below(d.len() as u64) as usize;
                d[i] ^= (1 + rng.below(255)) as u8;
            }
            d
        }
    }
}

#[test]
fn fuzz_corpus_regressions_and_random_inputs() {
    let seed = crate::common::seed("fuzz-format");
    let per_target = crate::common::iters(150);
    let mut rng = SplitMix64(seed);
    let mut inputs = Vec::new();
    for target in TARGETS {
        let corpus = files("corpus", target);
        assert!(
            !corpus.is_empty(),
            "no seed corpus for {target} under {}",
            fuzz_dir().display()
        );
        let regressions = files("regressions", target);
        for (label, data) in corpus.iter().chain(&regressions) {
            inputs.push(Input {
                target,
                label: label.clone(),
                data: data.clone(),
            });
        }
        let bases: Vec<&Vec<u8>> = corpus.iter().chain(&regressions).map(|(_, d)| d).collect();
        for i in 0..per_target {
            let base = bases[rng.below(bases.len() as u64) as usize];
            inputs.push(Input {
                target,
                label: format!("{target} random input {i} (SEED={seed})"),
                data: mutate(&mut rng, base),
            });
        }
    }
    let t = run_all(inputs);
    crate::common::report(&format!(
        "fuzz-format: execs={} crashes={} timeouts={}",
        t.execs, t.crashes, t.timeouts
    ));
    assert_eq!(t.crashes, 0, "inputs crashed (SEED={seed}); see stderr");
    assert_eq!(t.timeouts, 0, "inputs hung (SEED={seed}); see stderr");
}

/// The committed seed corpus is exactly what the generator makes (so the
/// corpus and the code that defines its formats cannot drift apart).
#[test]
fn fuzz_seed_corpus_is_current() {
    for (target, name, bytes) in seed_corpus() {
        let path = fuzz_dir().join("corpus").join(target).join(&name);
        let on_disk = std::fs::read(&path).unwrap_or_default();
        assert!(
            on_disk == bytes,
            "{} is stale: regenerate with `cargo test -p cairndb --test all \
             write_fuzz_seed_corpus -- --ignored`",
            path.display()
        );
    }
}

/// Writes the seed corpus to `fuzz/corpus/<target>/`.
#[test]
#[ignore = "generator: run by hand after changing cairndb::fuzzing::seed_corpus"]
fn write_fuzz_seed_corpus() {
    for (target, name, bytes) in seed_corpus() {
        let dir = fuzz_dir().join("corpus").join(target);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(name), bytes).unwrap();
    }
}
