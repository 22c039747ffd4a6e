//! `cairn serve` as a process: the loopback rule, and SIGTERM closing the
//! file cleanly after serving requests.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn cairn() -> Command {
    Command::new(env!("CARGO_BIN_EXE_cairn"))
}

/// One HTTP/1.1 request; the status and body.
fn http(addr: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .expect("write");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read");
    let status = out
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = out.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    (status, body)
}

#[test]
fn a_non_loopback_bind_needs_a_token_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("t.cairn");
    let out = cairn()
        .args(["serve", db.to_str().expect("path"), "--bind", "0.0.0.0:0"])
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--token-file"), "{err}");
    assert!(!db.exists());
    let empty = dir.path().join("token");
    std::fs::write(&empty, "  \n").expect("write");
    let out = cairn()
        .args(["serve", db.to_str().expect("path"), "--token-file"])
        .arg(&empty)
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("empty"));
}

#[cfg(unix)]
#[test]
fn sigterm_closes_the_file_cleanly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("t.cairn");
    let mut child = cairn()
        .args(["serve", db.to_str().expect("path"), "--bind", "127.0.0.1:0"])
        .env("RUST_LOG", "warn")
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut addr = String::new();
    while Instant::now() < deadline {
        let Some(Ok(l)) = lines.next() else { break };
        if let Some(rest) = l.split("serving on http://").nth(1) {
            addr = rest.trim_end_matches("/api/v1").to_string();
            break;
        }
    }
    assert!(!addr.is_empty(), "no address printed");
    // The same binary serves the studio at its root.
    let (st, body) = http(&addr, "GET", "/", "");
    assert_eq!(st, 200, "{body}");
    assert!(body.contains("<title>CairnDB studio</title>"), "{body}");
    for (path, doc, want) in [
        (
            "/api/v1/collections/c/documents",
            r#"{"_id": 1, "a": 2}"#,
            201,
        ),
        ("/api/v1/streams/s/events", r#"[{"type": "A"}]"#, 200),
    ] {
        let (st, body) = http(&addr, "POST", path, doc);
        assert_eq!(st, want, "POST {path}: {body}");
    }
    let (st, body) = http(&addr, "GET", "/api/v1/collections/c/documents/1", "");
    assert_eq!((st, body.as_str()), (200, r#"{"_id":1,"a":2}"#));
    let kill = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(kill.success());
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        assert!(start.elapsed() < Duration::from_secs(15), "did not stop");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
    let d = cairndb::Database::open(&db).expect("open");
    assert!(d.recovery_report().clean, "{:?}", d.recovery_report());
    assert!(d.check_integrity().expect("check").is_ok());
    let c = d.collection::<cairndb::document::Document>("c");
    assert_eq!(c.len().expect("len"), 1);
}
