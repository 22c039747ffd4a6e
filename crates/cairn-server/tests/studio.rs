//! The web studio: its files are served (types, CSP, no token needed while
//! the API wants one), and an end-to-end run in headless Chromium
//! (`studio-tests/e2e.mjs`, playwright-core driving Debian's chromium)
//! against a live server with a token, writing a screenshot of each page
//! to `target/studio-screenshots/`.
//!
//! The browser test needs `node`, `studio-tests/node_modules` (`npm ci`)
//! and `/usr/bin/chromium` (or `$CAIRN_CHROMIUM`). Without them it says so
//! loudly and passes, except when `CAIRN_REQUIRE_BROWSER=1` (which `.ci/run`
//! exports, after installing them) or in CI, where it fails.

mod common;

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const TOKEN: &str = "studio-test-token";

fn required() -> bool {
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
    ci || std::env::var("CAIRN_REQUIRE_BROWSER").is_ok_and(|v| v == "1")
}

#[test]
fn studio_files_are_served_with_types_and_csp_without_the_token() {
    let s = common::TestServer::start_with(|c| c.token = Some(TOKEN.into()));
    let c = reqwest::blocking::Client::new();
    for (path, ty, needle) in [
        ("/", "text/html", "<title>CairnDB studio</title>"),
        ("/studio/app.js", "text/javascript", "function route()"),
        ("/studio/app.css", "text/css", "prefers-color-scheme: dark"),
    ] {
        let r = c.get(format!("{}{path}", s.root)).send().expect("GET");
        assert_eq!(r.status(), 200, "{path}");
        let h = r.headers().clone();
        let get = |k: &str| {
            h.get(k)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string()
        };
        assert!(get("content-type").starts_with(ty), "{path}: {h:?}");
        let csp = get("content-security-policy");
        assert!(
            csp.contains("default-src 'none'") && csp.contains("script-src 'self'"),
            "{path}: {csp}"
        );
        assert!(!csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"));
        assert_eq!(get("x-content-type-options"), "nosniff");
        let body = r.text().expect("body");
        assert!(body.contains(needle), "{path}");
    }
    // The API still wants the token.
    let r = c
        .get(format!("{}/collections", s.base))
        .send()
        .expect("GET");
    assert_eq!(r.status(), 401);
    // The page links only files the server has, on its own origin.
    let html = c.get(&s.root).send().expect("GET").text().expect("body");
    assert!(!html.contains("http://") && !html.contains("https://"));
}

fn tests_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("studio-tests")
}

/// `target/studio-screenshots`, beside the test binary's profile directory.
fn screenshot_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    // target/<profile>/deps/studio-<hash>
    match exe.ancestors().nth(3) {
        Some(target) if target.join("CACHEDIR.TAG").exists() || target.ends_with("target") => {
            target.join("studio-screenshots")
        }
        _ => std::env::temp_dir().join("cairn-studio-screenshots"),
    }
}

/// Why the browser test cannot run here, if it cannot.
fn missing() -> Option<String> {
    let node = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !node {
        return Some("no `node` on PATH".into());
    }
    if !tests_dir().join("node_modules/playwright-core").is_dir() {
        return Some(format!(
            "no playwright-core (run `npm ci` in {})",
            tests_dir().display()
        ));
    }
    let chromium = chromium();
    if !chromium.exists() {
        return Some(format!(
            "no chromium at {} (apt-get install chromium, or set CAIRN_CHROMIUM)",
            chromium.display()
        ));
    }
    None
}

fn chromium() -> PathBuf {
    std::env::var_os("CAIRN_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"))
}

#[test]
fn studio_end_to_end_in_headless_chromium() {
    if let Some(why) = missing() {
        let msg = format!("the studio's browser test did NOT run: {why}");
        assert!(!required(), "{msg}");
        eprintln!("\n!!! SKIPPED: {msg}\n");
        return;
    }
    let s = common::TestServer::start_with(|c| c.token = Some(TOKEN.into()));
    // A second server, read-only, over a file with one document.
    let ro_dir = tempfile::tempdir().expect("tempdir");
    let ro_path = ro_dir.path().join("ro.cairn");
    {
        let db = cairndb::Database::create(&ro_path).expect("create");
        db.collection::<serde_json::Value>("notes")
            .insert(&serde_json::json!({"_id": 1, "text": "hello"}))
            .expect("insert");
        db.close().expect("close");
    }
    let ro = common::TestServer::start_on(ro_dir, ro_path, |c| c.read_only = true);
    let shots = screenshot_dir();
    let _ = std::fs::remove_dir_all(&shots);
    let mut child = Command::new("node")
        .arg("e2e.mjs")
        .current_dir(tests_dir())
        .env("CAIRN_URL", format!("{}/", s.root))
        .env("CAIRN_READ_ONLY_URL", format!("{}/", ro.root))
        .env("CAIRN_TOKEN", TOKEN)
        .env("CAIRN_CHROMIUM", chromium())
        .env("SCREENSHOT_DIR", &shots)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start node");
    // Read its output on threads so a full pipe cannot stall it.
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let t_out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + Duration::from_secs(150);
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break Some(st);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let stdout = t_out.join().unwrap_or_default();
    let stderr = t_err.join().unwrap_or_default();
    println!("{stdout}");
    println!("studio screenshots: {}", shots.display());
    let status = status.unwrap_or_else(|| panic!("e2e.mjs timed out\n{stdout}\n{stderr}"));
    assert!(
        status.success(),
        "the studio's end-to-end test failed ({status}):\n{stdout}\n{stderr}"
    );
    for name in [
        "01-collections",
        "02-collection",
        "03-document-conflict",
        "04-query",
        "05-kv",
        "06-events",
        "07-stats",
        "08-stats-dark",
        "09-duplicate-id",
        "10-read-only",
    ] {
        let p = shots.join(format!("{name}.png"));
        assert!(p.exists(), "no screenshot {}", p.display());
    }
}
