//! The OpenAPI document fuzzed by schemathesis (PyPI) against a live
//! server: no 5xx, responses (and their content types) as documented.
//!
//! Needs the `st` command: `$CAIRN_SCHEMATHESIS`, or the repository's
//! `.venv` that `.ci/python-env` fills. Without it the test says so loudly
//! and passes, except in CI (`CI` set, or `CAIRN_REQUIRE_PYTHON=1`, which
//! `.ci/run` exports), where it fails.

mod common;

use std::path::PathBuf;
use std::process::Command;

fn required() -> bool {
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
    ci || std::env::var("CAIRN_REQUIRE_PYTHON").is_ok_and(|v| v == "1")
}

fn st() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("CAIRN_SCHEMATHESIS") {
        return Some(PathBuf::from(p));
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let p = root.join(".venv/bin/st");
    p.exists().then_some(p)
}

#[test]
fn schemathesis_finds_no_server_error_and_no_schema_mismatch() {
    let Some(st) = st() else {
        let msg = "schemathesis did NOT run: no .venv/bin/st (run .ci/python-env) and no $CAIRN_SCHEMATHESIS";
        assert!(!required(), "{msg}");
        eprintln!("\n!!! SKIPPED: {msg}\n");
        return;
    };
    let s = common::TestServer::start();
    let out = Command::new(&st)
        .args([
            "run",
            &format!("{}/openapi.json", s.base),
            "--checks",
            "not_a_server_error,response_schema_conformance,content_type_conformance",
            // Live event streams and change streams never end.
            "--exclude-path-regex",
            "subscribe|/changes$",
            "--phases",
            "examples,coverage,fuzzing",
            "--max-examples",
            "10",
            "--max-time",
            "25",
            "--workers",
            "1",
            "--seed",
            "1",
        ])
        .env("NO_COLOR", "1")
        // Its cache and reports go to the test's directory.
        .current_dir(s.dir.path())
        .output()
        .expect("run schemathesis");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary: String = stdout
        .lines()
        .skip_while(|l| !l.contains("SUMMARY"))
        .collect::<Vec<_>>()
        .join("\n");
    println!("schemathesis: {summary}");
    assert!(
        out.status.success(),
        "schemathesis failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
