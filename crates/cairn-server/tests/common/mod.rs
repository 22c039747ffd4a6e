//! A real server on an ephemeral loopback port, and a blocking HTTP client.
#![allow(dead_code)]

use std::path::PathBuf;
use std::time::Duration;

use cairn_server::{Config, Server};
use reqwest::blocking::{Client, RequestBuilder, Response};
use serde_json::Value;

pub struct TestServer {
    pub rt: tokio::runtime::Runtime,
    pub server: Option<Server>,
    pub dir: tempfile::TempDir,
    pub path: PathBuf,
    pub base: String,
    pub root: String,
    pub client: Client,
    pub token: Option<String>,
}

pub fn config(path: PathBuf) -> Config {
    let mut c = Config::new(path);
    c.bind = "127.0.0.1:0".parse().expect("addr");
    c.max_body = 64 << 10;
    c.shutdown_grace = Duration::from_secs(3);
    c
}

impl TestServer {
    pub fn start() -> Self {
        Self::start_with(|_| {})
    }

    pub fn start_with(f: impl FnOnce(&mut Config)) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("t.cairn");
        Self::start_on(dir, path, f)
    }

    pub fn start_on(dir: tempfile::TempDir, path: PathBuf, f: impl FnOnce(&mut Config)) -> Self {
        let mut c = config(path.clone());
        f(&mut c);
        let token = c.token.clone();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let server = rt.block_on(cairn_server::start(c, false)).expect("start");
        let root = format!("http://{}", server.addr());
        TestServer {
            rt,
            server: Some(server),
            dir,
            path,
            base: format!("{root}/api/v1"),
            root,
            client: Client::builder()
                .timeout(Duration::from_secs(20))
                .build()
                .expect("client"),
            token,
        }
    }

    fn auth(&self, r: RequestBuilder) -> RequestBuilder {
        match &self.token {
            Some(t) => r.bearer_auth(t),
            None => r,
        }
    }

    pub fn get(&self, p: &str) -> Response {
        self.auth(self.client.get(format!("{}{p}", self.base)))
            .send()
            .expect("GET")
    }

    /// A GET with one more header (`Origin`, `Last-Event-ID`, ...).
    pub fn get_with(&self, p: &str, name: &str, value: &str) -> Response {
        self.auth(self.client.get(format!("{}{p}", self.base)))
            .header(name, value)
            .send()
            .expect("GET")
    }

    pub fn delete(&self, p: &str) -> Response {
        self.auth(self.client.delete(format!("{}{p}", self.base)))
            .send()
            .expect("DELETE")
    }

    pub fn post(&self, p: &str, body: &Value) -> Response {
        self.post_raw(p, body.to_string())
    }

    pub fn post_raw(&self, p: &str, body: impl Into<reqwest::blocking::Body>) -> Response {
        self.auth(self.client.post(format!("{}{p}", self.base)))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .expect("POST")
    }

    pub fn put(&self, p: &str, body: impl Into<reqwest::blocking::Body>) -> Response {
        self.auth(self.client.put(format!("{}{p}", self.base)))
            .body(body)
            .send()
            .expect("PUT")
    }

    /// Stops the server gracefully (as SIGTERM does) and waits.
    pub fn stop(&mut self) {
        if let Some(s) = self.server.take() {
            self.rt.block_on(s.shutdown()).expect("clean shutdown");
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(s) = self.server.take() {
            let _ = self.rt.block_on(s.shutdown());
        }
    }
}

/// The JSON body of a response with `status`.
pub fn json(r: Response, status: u16) -> Value {
    let got = r.status().as_u16();
    let text = r.text().expect("body");
    assert_eq!(got, status, "status {got} (wanted {status}); body: {text}");
    serde_json::from_str(&text).unwrap_or(Value::Null)
}

/// A problem+json body with `status` and `code`.
pub fn problem(r: Response, status: u16, code: &str) -> Value {
    let ct = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let v = json(r, status);
    assert_eq!(ct, "application/problem+json", "content type of {v}");
    assert_eq!(v["status"], status, "{v}");
    assert_eq!(v["code"], code, "{v}");
    assert!(v["detail"].as_str().is_some_and(|d| !d.is_empty()), "{v}");
    assert!(v["title"].is_string(), "{v}");
    v
}
