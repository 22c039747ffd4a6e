//! Runs the Python package's pytest suite (`tests/test_*.py` beside this
//! file) with the repository's virtualenv `.venv`, which `.ci/python-env`
//! creates and fills (maturin, pytest, hypothesis, and the extension built
//! by `maturin develop`).
//!
//! Without that virtualenv the suite cannot run: outside CI this test says
//! so loudly and passes; in CI (`CI` set, or `CAIRN_REQUIRE_PYTHON=1`, which
//! `.ci/run` exports) it fails, and so does a stale extension (older than
//! the Rust sources it is built from).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

fn required() -> bool {
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
    ci || std::env::var("CAIRN_REQUIRE_PYTHON").is_ok_and(|v| v == "1")
}

/// Fails in CI, shouts and passes elsewhere.
fn cannot_run(why: &str) {
    let msg = format!(
        "the Python package's tests did NOT run: {why}.\n\
         Set up the virtualenv with `.ci/python-env` (creates .venv, installs maturin, pytest \
         and hypothesis, runs `maturin develop`), then run `cargo test -p cairndb-python` again."
    );
    if required() {
        panic!("{msg}");
    }
    // Straight to the process's stderr: the test harness captures
    // `eprintln!` of passing tests.
    let bar = "!".repeat(72);
    let _ = writeln!(std::io::stderr(), "\n{bar}\n!!! SKIPPED: {msg}\n{bar}\n");
}

/// The newest modification time of the `.rs` files under `dir`.
fn newest_source(dir: &Path) -> SystemTime {
    let mut newest = SystemTime::UNIX_EPOCH;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                if let Ok(t) = e.metadata().and_then(|m| m.modified()) {
                    newest = newest.max(t);
                }
            }
        }
    }
    newest
}

/// The extension module `maturin develop` put into the package directory.
fn built_extension(pkg: &Path) -> Option<PathBuf> {
    std::fs::read_dir(pkg)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                n.starts_with("_native") && (n.ends_with(".so") || n.ends_with(".pyd"))
            })
        })
}

#[test]
fn pytest_suite() {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = here.join("../..");
    let python = root.join(".venv/bin/python");
    if !python.exists() {
        return cannot_run(&format!("no virtualenv at {}", python.display()));
    }
    let imports = Command::new(&python)
        .args(["-c", "import cairndb, pytest, hypothesis"])
        .status();
    if !imports.is_ok_and(|s| s.success()) {
        return cannot_run("the virtualenv cannot import cairndb, pytest and hypothesis");
    }
    if let Some(so) = built_extension(&here.join("python/cairndb")) {
        let built = so
            .metadata()
            .and_then(|m| m.modified())
            .unwrap_or(SystemTime::UNIX_EPOCH);
        let src =
            newest_source(&here.join("src")).max(newest_source(&root.join("crates/cairndb/src")));
        if built < src {
            return cannot_run(&format!(
                "the built extension {} is older than the Rust sources (run `.ci/python-env` to rebuild)",
                so.display()
            ));
        }
    }
    let status = Command::new(&python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"])
        .current_dir(here)
        .status()
        .expect("run pytest");
    assert!(status.success(), "the pytest suite failed ({status})");
}
