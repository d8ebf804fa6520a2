//! A spawned server and the calls the tests make to it.

use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use retrylab::config::{Config, Limits, Retention};
use serde_json::{Value, json};

use crate::support::{self, Serving};

pub struct TestApp {
    pub base: String,
    pub client: reqwest::Client,
}

/// A policy and downstream fast enough for tests: a 10 ms base, tiny latencies, no
/// `Retry-After` floor unless a test sets one. The timeout is far past those latencies, so a
/// busy machine does not turn a slow answer into an extra attempt the test did not plan.
pub const FAST_POLICY: &str =
    r#"{"base_ms": 10, "cap_ms": 200, "timeout_ms": 5000, "max_attempts": 4, "jitter": "equal"}"#;
pub const FAST_DOWNSTREAM: &str = r#"{"latency_ms": [1, 5], "retry_after_s": 0}"#;

impl TestApp {
    pub async fn spawn() -> Self {
        Self::spawn_with(Limits::default()).await
    }

    pub async fn spawn_with(limits: Limits) -> Self {
        Self::spawn_config(config(limits, Retention::default())).await
    }

    pub async fn spawn_config(config: Config) -> Self {
        Self::spawn_until(config, std::future::pending()).await.0
    }

    /// A server that shuts down gracefully when `stop` completes; the handle ends with it.
    pub async fn spawn_until(
        config: Config,
        stop: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> (Self, tokio::task::JoinHandle<std::io::Result<()>>) {
        let (address, server) = support::serve_until(support::any_port(), config, stop).await;
        (TestApp { base: format!("http://{address}"), client: support::http_client() }, server)
    }

    /// A server to stop gracefully (as SIGTERM does) with `Stoppable::stop`.
    pub async fn spawn_stoppable(config: Config) -> (Self, Stoppable) {
        let serving = Serving::start(support::any_port(), config).await;
        (Self::at(format!("http://{}", serving.address)), serving)
    }

    /// Talks to a server started some other way (the real binary).
    pub fn at(base: String) -> Self {
        TestApp { base, client: support::http_client() }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// A new lab with the fast test settings.
    pub async fn fast_lab(&self) -> String {
        let lab = self.new_lab().await;
        self.put(&lab, "policy", FAST_POLICY).await;
        self.put(&lab, "downstream", FAST_DOWNSTREAM).await;
        lab
    }

    pub async fn new_lab(&self) -> String {
        let response = self.client.post(self.url("/api/labs")).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::CREATED);
        let body: Value = response.json().await.unwrap();
        body["id"].as_str().unwrap().to_owned()
    }

    /// `PUT /api/labs/{lab}/{what}` with a JSON body that must be accepted.
    pub async fn put(&self, lab: &str, what: &str, body: &str) -> Value {
        let (status, body) = self.call(Method::PUT, &format!("/api/labs/{lab}/{what}"), Some(body)).await;
        assert_eq!(status, StatusCode::OK, "PUT {what}: {body}");
        body
    }

    pub async fn set_mode(&self, lab: &str, mode: &str) {
        self.put(lab, "downstream", &json!({ "mode": mode }).to_string()).await;
    }

    pub async fn burst(&self, lab: &str, count: u64) -> Vec<u64> {
        let body = json!({ "count": count }).to_string();
        let (status, body) = self.call(Method::POST, &format!("/api/labs/{lab}/bursts"), Some(&body)).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        serde_json::from_value(body["message_ids"].clone()).unwrap()
    }

    pub async fn replay(&self, lab: &str, body: &str) -> (StatusCode, Value) {
        self.call(Method::POST, &format!("/api/labs/{lab}/dead-letters/replay"), Some(body)).await
    }

    pub async fn snapshot(&self, lab: &str) -> Value {
        let response = self.client.get(self.url(&format!("/api/labs/{lab}"))).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        response.json().await.unwrap()
    }

    /// Polls the snapshot until `done` holds, failing with the last snapshot after `limit`.
    pub async fn wait_for(&self, lab: &str, limit: Duration, done: impl Fn(&Value) -> bool) -> Value {
        let start = Instant::now();
        loop {
            let snapshot = self.snapshot(lab).await;
            if done(&snapshot) {
                return snapshot;
            }
            assert!(start.elapsed() < limit, "gave up waiting; counters: {}", snapshot["counters"]);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A JSON call; returns the status and the parsed body (`Null` when empty).
    pub async fn call(&self, method: Method, path: &str, body: Option<&str>) -> (StatusCode, Value) {
        let mut request = self.client.request(method, self.url(path));
        if let Some(body) = body {
            request = request.header("content-type", "application/json").body(body.to_owned());
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        let bytes = response.bytes().await.unwrap();
        (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }
}

/// A server started by `TestApp::spawn_stoppable`: `stop` stops it gracefully and waits until it
/// has committed and let go of its store.
pub type Stoppable = Serving;

/// A configuration with its own fresh database file.
pub fn config(limits: Limits, retention: Retention) -> Config {
    Config { limits, retention, ..Config::new(fresh_db()) }
}

pub fn fresh_db() -> std::path::PathBuf {
    support::fresh_db("test")
}

/// Runs of the metastable set-up (steady traffic at 70 % of an endpoint's capacity, whose
/// feedback loop they measure), and the grades of many real clients at once (the conformance
/// matrix, the snippets), take turns: two at once on a loaded 2-core machine would measure the
/// machine. Hold it for the whole run.
pub static OPEN_SYSTEM_RUNS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Sends `{}` with `key` to the lab's endpoint, as the caller `name` (`X-Client-Name`) if any.
pub async fn post_as(app: &TestApp, lab: &str, name: Option<&str>, key: &str) -> reqwest::Response {
    let mut request = app
        .client
        .post(app.url(&format!("/labs/{lab}/downstream")))
        .header("Idempotency-Key", key)
        .header("Content-Type", "application/json")
        .body("{}");
    if let Some(name) = name {
        request = request.header("X-Client-Name", name);
    }
    request.send().await.unwrap()
}

pub fn counter(snapshot: &Value, name: &str) -> u64 {
    snapshot["counters"][name].as_u64().unwrap_or_else(|| panic!("no counter {name}"))
}

pub fn messages(snapshot: &Value) -> &Vec<Value> {
    snapshot["messages"].as_array().unwrap()
}

/// Attempts of one round of a message.
pub fn round(message: &Value, round: u64) -> Vec<&Value> {
    message["attempts"].as_array().unwrap().iter().filter(|a| a["round"] == round).collect()
}

/// The real binary, serving on a free port with the given store, SIGKILLed when dropped.
pub struct Binary {
    pub child: std::process::Child,
    pub app: TestApp,
}

impl Binary {
    pub fn start(db: &std::path::Path) -> Binary {
        Binary::start_with(db, &[])
    }

    /// Started with `args` after the address and the store.
    pub fn start_with(db: &std::path::Path, args: &[&str]) -> Binary {
        use std::io::BufRead;
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_retrylab"))
            .args(["--addr", "127.0.0.1:0", "--db"])
            .arg(db)
            .args(args)
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("the binary starts");
        let mut first_line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut first_line).unwrap();
        let url =
            first_line.split_whitespace().find(|w| w.starts_with("http://")).expect("it prints its address");
        Binary { child, app: TestApp::at(url.trim_end_matches('/').to_owned()) }
    }

    /// SIGKILL: no chance to tidy up.
    pub fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Binary {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One run of `retrylab grade --json` on `command`: its exit code, its one caller's card, and
/// what it printed (stdout and stderr).
pub fn grade(command: &[String]) -> (Option<i32>, Value, String) {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_retrylab"))
        .args(["grade", "--json", "--"])
        .args(command)
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
    let callers = report["callers"].as_array().cloned().unwrap_or_default();
    let card = if callers.len() == 1 { callers[0].clone() } else { Value::Null };
    let said =
        format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.code(), card, said)
}
