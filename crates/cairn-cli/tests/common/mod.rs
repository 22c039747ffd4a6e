//! Helpers shared by the CLI integration tests: run `cairn` with stdin,
//! expect success or a user error (exit status 1) naming `message`.

use std::io::Write;
use std::process::{Command, Output, Stdio};

pub fn cairn(args: &[&str], input: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

pub fn ok(args: &[&str], input: &str) -> String {
    let o = cairn(args, input);
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

pub fn fails(args: &[&str], input: &str, message: &str) {
    let o = cairn(args, input);
    assert_eq!(o.status.code(), Some(1), "{args:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(message), "{args:?}: {err}");
}
