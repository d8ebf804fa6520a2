//! Opening a big lab, a measurement rather than a check (so `#[ignore]`d): how long the page
//! of a lab that already holds 20,000 settled messages takes, from navigation start, until it
//! has applied the opening snapshot, drawn the counters and is no longer blocked by long tasks.
//!
//! `cargo test --release --test browser -- --ignored --nocapture open_large_lab`
//!
//! `OPEN_MESSAGES=20000` (the default) is how many messages the lab holds, a tenth of them dead
//! letters; `OPEN_RUNS=3` (the default) opens the page that many times, one after the other, in one tab;
//! `OPEN_PROFILE=1` also records a CPU profile of the first opening and prints where it went.
//! `OPEN_BASELINE_STATIC=DIR` opens, in turn with this page, the page whose `static/` files
//! are in DIR (another commit's, from `git archive`), so the two are compared side by side
//! on the same lab, server and browser.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::Engine;

use serde_json::{Value, json};

use super::cdp::Page;
use super::{PATIENCE, Server, browser};

/// Delivered, then dead-lettered: 20,000 messages in all (`OPEN_MESSAGES`), a tenth of them
/// dead letters, in bursts of at most the default limit.
const MESSAGES: u64 = 20_000;
const BURST: u64 = 2_000;

/// How many messages the lab is filled with: `(delivered, dead letters)`.
fn sizes() -> (u64, u64) {
    let total = std::env::var("OPEN_MESSAGES").ok().and_then(|n| n.parse().ok()).unwrap_or(MESSAGES).max(2);
    (total - total / 10, total / 10)
}

/// Installed before the page's own scripts: records long tasks, and on every animation frame
/// looks at what the page shows. The counters come in the page's HTML, so `drawn` waits for
/// what only the snapshot brings: the timeline's first bars and the dead-letter table's rows.
/// `smooth` is the first frame after that which came less than 50 ms after the one before it.
const RECORDER: &str = "(() => {
    const rec = { longTasks: [], drawn: null, smooth: null, last: 0, chunks: [] };
    window.__open = rec;
    // When the page asks for its event stream, and when the answer's headers come.
    const fetch = window.fetch;
    window.fetch = async function (url, init) {
        const asked = performance.now();
        const response = await fetch.call(this, url, init);
        if (String(url).endsWith('/events')) rec.stream = [asked, performance.now()];
        return response;
    };
    // Counts the text chunks the page reads, to tell how finely the snapshot arrives.
    const read = ReadableStreamDefaultReader.prototype.read;
    ReadableStreamDefaultReader.prototype.read = async function () {
        const result = await read.call(this);
        if (typeof result.value === 'string') rec.chunks.push([performance.now(), result.value.length]);
        return result;
    };
    new PerformanceObserver((list) => {
        for (const e of list.getEntries()) rec.longTasks.push([e.startTime, e.duration]);
    }).observe({ type: 'longtask', buffered: true });
    const step = () => {
        const now = performance.now();
        if (rec.drawn === null) {
            if (document.querySelector('#timeline [data-message]') && document.querySelector('#dead-body [data-dead-letter]')) rec.drawn = now;
        } else if (rec.smooth === null && now - rec.last < 50) {
            rec.smooth = now;
        }
        rec.last = now;
        if (rec.smooth === null) requestAnimationFrame(step);
    };
    requestAnimationFrame(step);
})()";

/// Where the time before the snapshot went: the page's own loading, then the event stream's
/// request, its first bytes, and its chunks.
const PHASES: &str = "(() => {
    const r = Math.round;
    const nav = performance.getEntriesByType('navigation')[0];
    const modules = performance.getEntriesByType('resource').filter((e) => e.name.includes('/static/'));
    const loaded = Math.max(...modules.map((e) => e.responseEnd));
    const chunks = window.__open.chunks;
    return `html ${r(nav.responseEnd)} ms, static files ${r(loaded)} ms, DOMContentLoaded ${r(nav.domContentLoadedEventEnd)} ms, `
        + `stream asked ${r(window.__open.stream?.[0])} ms, headers ${r(window.__open.stream?.[1])} ms, `
        + `chunks ${r(chunks[0]?.[0])}..${r(chunks[chunks.length - 1]?.[0])} ms`;
})()";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: cargo test --release --test browser -- --ignored --nocapture open_large_lab"]
async fn open_large_lab_interactive_within_1500_ms() {
    let Some(browser) = browser() else { return };
    let server = Server::start().await;
    let lab = fill_lab(&server).await;
    let asked = Instant::now();
    let bytes = server.http.get(server.url(&format!("/api/labs/{lab}"))).send().await.unwrap();
    let bytes = bytes.bytes().await.unwrap().len();
    eprintln!("GET /api/labs/{{lab}}: {bytes} bytes in {:.1?}", asked.elapsed());

    let runs: usize = std::env::var("OPEN_RUNS").ok().and_then(|r| r.parse().ok()).unwrap_or(3);
    let profile = std::env::var_os("OPEN_PROFILE").is_some();
    let mut pages = vec![Variant::Current];
    if let Some(dir) = std::env::var_os("OPEN_BASELINE_STATIC") {
        pages.insert(0, Variant::Baseline(PathBuf::from(dir)));
    }
    let page = browser.page().await;
    page.set_viewport(1280, 900).await;
    page.call("Page.addScriptToEvaluateOnNewDocument", json!({ "source": RECORDER })).await.unwrap();
    page.call("Network.enable", json!({})).await.unwrap();
    let (delivered, dead) = sizes();
    println!(
        "\nopening a lab of {} messages ({delivered} delivered, {dead} dead letters), snapshot {bytes} bytes, 1280x900",
        delivered + dead
    );
    for link in [Link::Loopback, Link::Emulated { mbps: 100.0, latency_ms: 20.0 }] {
        link.apply(&page).await;
        let mut rows: Vec<Vec<Opening>> = pages.iter().map(|_| Vec::new()).collect();
        // Baseline and current take turns, so a busy moment of the machine hits both alike.
        for run in 1..=runs {
            for (variant, rows) in pages.iter().zip(rows.iter_mut()) {
                let label = format!("{link}, {variant}, run {run}");
                let profiling = profile && run == 1;
                let url = server.url(&format!("/labs/{lab}"));
                // Both pages' static files come from disk through the same interception, so
                // they load alike and only their code differs.
                let events = page.events();
                let mut patterns = vec![json!({ "urlPattern": "*/static/*" })];
                if variant.without_preload() {
                    patterns.push(json!({ "urlPattern": "*/labs/*", "resourceType": "Document", "requestStage": "Response" }));
                }
                page.call("Fetch.enable", json!({ "patterns": patterns })).await.unwrap();
                let opened = tokio::select! {
                    never = serve_static_from(&page, variant.dir(), events) => match never {},
                    opened = open_once(&page, &url, &label, profiling) => opened,
                };
                page.call("Fetch.disable", json!({})).await.unwrap();
                rows.push(opened);
            }
        }
        for (variant, rows) in pages.iter().zip(&rows) {
            print_table(&format!("{link}, {variant}"), rows);
        }
    }
}

/// Opens the lab's page once and waits until it has drawn the snapshot and settled.
async fn open_once(page: &Page, url: &str, label: &str, profiling: bool) -> Opening {
    if profiling {
        page.call("Profiler.enable", json!({})).await.unwrap();
        page.call("Profiler.setSamplingInterval", json!({ "interval": 200 })).await.unwrap();
        page.call("Profiler.start", json!({})).await.unwrap();
    }
    let before = main_thread(page).await;
    page.navigate(url).await;
    let start = Instant::now();
    let timing = loop {
        let rec = page.eval("window.__open.smooth !== null && window.__open").await.unwrap();
        if rec.is_object() {
            break rec;
        }
        assert!(start.elapsed() < PATIENCE, "the page never drew the snapshot");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // Long tasks after the first smooth frame still count: give them time to show up.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rec = page.eval("window.__open").await.unwrap();
    let after = main_thread(page).await;
    let phases = page.eval(PHASES).await.unwrap();
    eprintln!("{label}: {phases}");
    if profiling {
        let stopped = page.call("Profiler.stop", json!({})).await.unwrap();
        print_profile(label, &stopped["profile"]);
    }
    let errors = page.console_errors();
    assert!(errors.is_empty(), "the page reported errors: {errors:?}");
    page.navigate("about:blank").await;
    let mut opened = Opening::new(&timing, &rec);
    opened.script = after.0 - before.0;
    opened.tasks = after.1 - before.1;
    opened
}

/// Seconds the page's main thread has spent running script, and running tasks of any kind
/// (script, style, layout, paint...), so far (CDP `Performance.getMetrics`).
async fn main_thread(page: &Page) -> (f64, f64) {
    page.call("Performance.enable", json!({})).await.unwrap();
    let metrics = page.call("Performance.getMetrics", json!({})).await.unwrap();
    let metric = |name: &str| {
        metrics["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == name)
            .and_then(|m| m["value"].as_f64())
    };
    (metric("ScriptDuration").unwrap_or(0.0), metric("TaskDuration").unwrap_or(0.0))
}

/// Which page is opened: this checkout's static files, or another commit's.
enum Variant {
    Current,
    /// `git archive <commit> static | tar -x -C DIR`, then `OPEN_BASELINE_STATIC=DIR/static`.
    Baseline(PathBuf),
}

impl Variant {
    /// The baseline predates the page's `modulepreload` links: its HTML is served without them.
    fn without_preload(&self) -> bool {
        matches!(self, Variant::Baseline(_))
    }

    fn dir(&self) -> &Path {
        match self {
            Variant::Current => Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/static")),
            Variant::Baseline(dir) => dir,
        }
    }
}

impl std::fmt::Display for Variant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Variant::Current => write!(f, "this page"),
            Variant::Baseline(dir) => write!(f, "baseline {}", dir.display()),
        }
    }
}

/// Answers each request the Fetch domain paused: the page's `/static/*` files with the file of
/// that name in `dir`, past the emulated network; the page's HTML, paused once the server has
/// answered, with that answer less its `modulepreload` links. Runs until dropped.
pub(super) async fn serve_static_from(
    page: &Page,
    dir: &Path,
    mut events: tokio::sync::broadcast::Receiver<(String, Value)>,
) -> std::convert::Infallible {
    loop {
        let (method, params) = match events.recv().await {
            Ok(event) => event,
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
            Err(tokio::sync::broadcast::error::RecvError::Closed) => panic!("browser went away"),
        };
        if method != "Fetch.requestPaused" {
            continue;
        }
        let request_id = params["requestId"].clone();
        if let Some(status) = params["responseStatusCode"].as_u64() {
            // The page's HTML as the server sent it, less the modulepreload links the baseline
            // did not have yet.
            let sent = page.call("Fetch.getResponseBody", json!({ "requestId": request_id })).await.unwrap();
            let engine = base64::engine::general_purpose::STANDARD;
            let html = match sent["base64Encoded"].as_bool() {
                Some(true) => {
                    String::from_utf8(engine.decode(sent["body"].as_str().unwrap()).unwrap()).unwrap()
                }
                _ => sent["body"].as_str().unwrap().to_owned(),
            };
            let html: String =
                html.lines().filter(|l| !l.contains("modulepreload")).map(|l| format!("{l}\n")).collect();
            let reply = json!({
                "requestId": request_id,
                "responseCode": status,
                "responseHeaders": params["responseHeaders"],
                "body": engine.encode(html),
            });
            page.call("Fetch.fulfillRequest", reply).await.unwrap();
            continue;
        }
        let url = params["request"]["url"].as_str().unwrap_or("");
        let name = url.rsplit('/').next().unwrap_or("").split('?').next().unwrap_or("");
        let body =
            std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{name} in {}: {e}", dir.display()));
        let kind = if name.ends_with(".css") { "text/css" } else { "text/javascript" };
        let reply = json!({
            "requestId": request_id,
            "responseCode": 200,
            "responseHeaders": [{ "name": "content-type", "value": kind }, { "name": "cache-control", "value": "no-cache" }],
            "body": base64::engine::general_purpose::STANDARD.encode(body),
        });
        page.call("Fetch.fulfillRequest", reply).await.unwrap();
    }
}

/// The network between the page and the server.
#[derive(Clone, Copy)]
enum Link {
    /// As it is: the page reads the stream in chunks of up to 2 MB.
    Loopback,
    /// Chromium's network emulation, which hands the page chunks of a few kilobytes, as a real
    /// network would.
    Emulated { mbps: f64, latency_ms: f64 },
}

impl Link {
    async fn apply(self, page: &Page) {
        let (latency, throughput) = match self {
            Link::Loopback => (0.0, -1.0),
            Link::Emulated { mbps, latency_ms } => (latency_ms, mbps * 1_000_000.0 / 8.0),
        };
        let conditions = json!({ "offline": false, "latency": latency, "downloadThroughput": throughput, "uploadThroughput": throughput });
        page.call("Network.emulateNetworkConditions", conditions).await.unwrap();
    }
}

impl std::fmt::Display for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Link::Loopback => write!(f, "loopback"),
            Link::Emulated { mbps, latency_ms } => write!(f, "emulated {mbps} Mbit/s, {latency_ms} ms"),
        }
    }
}

fn print_table(link: &str, rows: &[Opening]) {
    println!("\n{link}:");
    println!(
        "| run | chunks read | script | all tasks | snapshot drawn | first smooth frame | last long task ends | interactive | long tasks | longest | sum |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for (i, row) in rows.iter().enumerate() {
        println!("{}", row.row(&(i + 1).to_string()));
    }
    let mut interactive: Vec<f64> = rows.iter().map(|r| r.interactive).collect();
    interactive.sort_by(f64::total_cmp);
    let median = interactive[interactive.len() / 2];
    println!(
        "{link}: interactive min {:.0} ms / median {median:.0} ms / max {:.0} ms; target 1500 ms: {}",
        interactive[0],
        interactive[interactive.len() - 1],
        if median <= 1500.0 { "met" } else { "NOT met" }
    );
}

/// Creates a lab through the API and fills it: the delivered messages against a healthy
/// downstream, then the dead letters against a down one with a short policy, each burst settled before
/// the next. Returns the lab's id.
async fn fill_lab(server: &Server) -> String {
    let created: Value =
        server.http.post(server.url("/api/labs")).send().await.unwrap().json().await.unwrap();
    let lab = created["id"].as_str().unwrap().to_owned();
    server.put(&lab, "policy", r#"{"base_ms": 5, "cap_ms": 20, "timeout_ms": 2000}"#).await;
    server.put(&lab, "downstream", r#"{"mode": "healthy", "latency_ms": [0, 2]}"#).await;
    let filling = Instant::now();
    let (delivered, dead) = sizes();
    let mut sent = 0;
    for (count, mode) in [(delivered, None), (dead, Some(r#"{"mode": "down", "retry_after_s": 0}"#))] {
        if let Some(mode) = mode {
            server.put(&lab, "downstream", mode).await;
        }
        let mut left = count;
        while left > 0 {
            let burst = left.min(BURST);
            server.burst(&lab, burst).await;
            sent += burst;
            left -= burst;
            settle(server, &lab, sent).await;
        }
    }
    eprintln!("filled the lab in {:.1?}", filling.elapsed());
    lab
}

/// Waits until all `total` messages are delivered or dead letters.
async fn settle(server: &Server, lab: &str, total: u64) {
    let start = Instant::now();
    loop {
        let counters = server.snapshot(lab).await["counters"].clone();
        let settled = counters["delivered"].as_u64().unwrap() + counters["dead_letter"].as_u64().unwrap();
        if settled == total {
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(120), "the lab did not settle: {counters}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// One opening, in ms from navigation start.
struct Opening {
    /// Main-thread time from navigation until two seconds after the first smooth frame, in s.
    script: f64,
    tasks: f64,
    /// How many pieces the page's stream reader handed over, snapshot and all.
    chunks: usize,
    drawn: f64,
    smooth: f64,
    last_long_task_end: f64,
    long_tasks: usize,
    longest: f64,
    sum: f64,
    /// The later of `smooth` and the end of the last long task.
    interactive: f64,
}

impl Opening {
    fn new(timing: &Value, rec: &Value) -> Opening {
        let tasks: Vec<(f64, f64)> = serde_json::from_value(rec["longTasks"].clone()).unwrap();
        let drawn = timing["drawn"].as_f64().unwrap();
        let smooth = timing["smooth"].as_f64().unwrap();
        let chunks = rec["chunks"].as_array().unwrap().len();
        let last_long_task_end = tasks.iter().map(|(s, d)| s + d).fold(0.0, f64::max);
        Opening {
            script: 0.0,
            tasks: 0.0,
            chunks,
            drawn,
            smooth,
            last_long_task_end,
            long_tasks: tasks.len(),
            longest: tasks.iter().map(|t| t.1).fold(0.0, f64::max),
            sum: tasks.iter().map(|t| t.1).sum(),
            interactive: smooth.max(last_long_task_end),
        }
    }

    fn row(&self, label: &str) -> String {
        format!(
            "| {label} | {} | {:.0} ms | {:.0} ms | {:.0} ms | {:.0} ms | {:.0} ms | {:.0} ms | {} | {:.0} ms | {:.0} ms |",
            self.chunks,
            self.script * 1000.0,
            self.tasks * 1000.0,
            self.drawn,
            self.smooth,
            self.last_long_task_end,
            self.interactive,
            self.long_tasks,
            self.longest,
            self.sum
        )
    }
}

/// Self time per function in a CDP CPU profile, the largest first.
fn print_profile(link: &str, profile: &Value) {
    let nodes = profile["nodes"].as_array().unwrap();
    let names: HashMap<u64, String> = nodes
        .iter()
        .map(|n| {
            let frame = &n["callFrame"];
            let url = frame["url"].as_str().unwrap_or("");
            let file = url.rsplit('/').next().unwrap_or(url);
            let name = frame["functionName"].as_str().filter(|s| !s.is_empty()).unwrap_or("(anonymous)");
            (
                n["id"].as_u64().unwrap(),
                format!("{name} {file}:{}", frame["lineNumber"].as_i64().unwrap_or(0) + 1),
            )
        })
        .collect();
    let samples = profile["samples"].as_array().unwrap();
    let deltas = profile["timeDeltas"].as_array().unwrap();
    // Self time per node, then each node's total: its own plus its descendants'.
    let mut own: HashMap<u64, f64> = HashMap::new();
    for (sample, delta) in samples.iter().zip(deltas.iter().skip(1).chain([&json!(0)])) {
        *own.entry(sample.as_u64().unwrap()).or_default() += delta.as_f64().unwrap() / 1000.0;
    }
    let children: HashMap<u64, Vec<u64>> = nodes
        .iter()
        .map(|n| {
            let ids = n["children"].as_array().map(|c| c.iter().filter_map(Value::as_u64).collect());
            (n["id"].as_u64().unwrap(), ids.unwrap_or_default())
        })
        .collect();
    fn total(id: u64, own: &HashMap<u64, f64>, children: &HashMap<u64, Vec<u64>>) -> f64 {
        own.get(&id).copied().unwrap_or(0.0)
            + children[&id].iter().map(|c| total(*c, own, children)).sum::<f64>()
    }
    let mut by_name: HashMap<&str, f64> = HashMap::new();
    let mut inclusive: HashMap<&str, f64> = HashMap::new();
    for (id, name) in &names {
        *by_name.entry(name.as_str()).or_default() += own.get(id).copied().unwrap_or(0.0);
        // Only the page's own functions, and each only where it is not inside itself.
        if name.contains(".js:") {
            *inclusive.entry(name.as_str()).or_default() += total(*id, &own, &children);
        }
    }
    let mut top: Vec<_> = inclusive.into_iter().collect();
    top.sort_by(|a, b| b.1.total_cmp(&a.1));
    println!("\nCPU profile of the first opening, {link}, total time of the page's functions:");
    for (name, ms) in top.into_iter().take(30) {
        println!("{ms:>9.1} ms  {name}");
    }
    let mut top: Vec<_> = by_name.into_iter().collect();
    top.sort_by(|a, b| b.1.total_cmp(&a.1));
    println!("\nCPU profile of the first opening, {link}, self time:");
    for (name, ms) in top.into_iter().take(25) {
        println!("{ms:>9.1} ms  {name}");
    }
}
