//! Opening a big lab, a measurement rather than a check (so `#[ignore]`d): how long the page
//! of a lab that already holds 20,000 settled messages takes, from navigation start, until it
//! has applied the opening snapshot, drawn the counters and is no longer blocked by long tasks.
//!
//! `cargo test --release --test browser -- --ignored --nocapture open_large_lab`
//!
//! `OPEN_RUNS=3` (the default) opens the page that many times, one after the other, in one tab;
//! `OPEN_PROFILE=1` also records a CPU profile of the first opening and prints where it went.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{PATIENCE, Server, browser};

/// Delivered, then dead-lettered: 20,000 messages in all, in bursts of the default limit.
const DELIVERED: u64 = 18_000;
const DEAD: u64 = 2_000;
const BURST: u64 = 2_000;

/// Installed before the page's own scripts: records long tasks, and on every animation frame
/// looks at what the page shows. The counters come in the page's HTML, so `drawn` waits for
/// what only the snapshot brings: the timeline's first bars and the dead-letter table's rows.
/// `smooth` is the first frame after that which came less than 50 ms after the one before it.
const RECORDER: &str = "(() => {
    const rec = { longTasks: [], drawn: null, smooth: null, last: 0, chunks: [] };
    window.__open = rec;
    // Counts the text chunks the page reads, to tell how finely the snapshot arrives.
    const read = ReadableStreamDefaultReader.prototype.read;
    ReadableStreamDefaultReader.prototype.read = async function () {
        const result = await read.call(this);
        if (typeof result.value === 'string') rec.chunks.push(result.value.length);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: cargo test --release --test browser -- --ignored --nocapture open_large_lab"]
async fn open_large_lab_interactive_within_1500_ms() {
    let Some(browser) = browser() else { return };
    let server = Server::start().await;
    let lab = fill_lab(&server).await;
    let bytes = server.http.get(server.url(&format!("/api/labs/{lab}"))).send().await.unwrap();
    let bytes = bytes.bytes().await.unwrap().len();

    let runs: usize = std::env::var("OPEN_RUNS").ok().and_then(|r| r.parse().ok()).unwrap_or(3);
    let profile = std::env::var_os("OPEN_PROFILE").is_some();
    let page = browser.page().await;
    page.set_viewport(1280, 900).await;
    page.call("Page.addScriptToEvaluateOnNewDocument", json!({ "source": RECORDER })).await.unwrap();
    page.call("Network.enable", json!({})).await.unwrap();
    println!(
        "\nopening a lab of {} messages ({DELIVERED} delivered, {DEAD} dead letters), snapshot {bytes} bytes, 1280x900",
        DELIVERED + DEAD
    );
    for link in [Link::Loopback, Link::Emulated { mbps: 100.0, latency_ms: 20.0 }] {
        link.apply(&page).await;
        let mut rows = Vec::new();
        for run in 1..=runs {
            let profiling = profile && run == 1;
            if profiling {
                page.call("Profiler.enable", json!({})).await.unwrap();
                page.call("Profiler.setSamplingInterval", json!({ "interval": 200 })).await.unwrap();
                page.call("Profiler.start", json!({})).await.unwrap();
            }
            page.navigate(&server.url(&format!("/labs/{lab}"))).await;
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
            if profiling {
                let stopped = page.call("Profiler.stop", json!({})).await.unwrap();
                print_profile(&link.to_string(), &stopped["profile"]);
            }
            let errors = page.console_errors();
            assert!(errors.is_empty(), "the page reported errors: {errors:?}");
            rows.push(Opening::new(&timing, &rec));
            page.navigate("about:blank").await;
        }
        print_table(&link.to_string(), &rows);
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
    async fn apply(self, page: &super::cdp::Page) {
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
        "| run | chunks read | snapshot drawn | first smooth frame | last long task ends | interactive | long tasks | longest | sum |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
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

/// Creates a lab through the API and fills it: `DELIVERED` messages against a healthy
/// downstream, then `DEAD` against a down one with a short policy, each burst settled before
/// the next. Returns the lab's id.
async fn fill_lab(server: &Server) -> String {
    let created: Value =
        server.http.post(server.url("/api/labs")).send().await.unwrap().json().await.unwrap();
    let lab = created["id"].as_str().unwrap().to_owned();
    server.put(&lab, "policy", r#"{"base_ms": 5, "cap_ms": 20, "timeout_ms": 2000}"#).await;
    server.put(&lab, "downstream", r#"{"mode": "healthy", "latency_ms": [0, 2]}"#).await;
    let filling = Instant::now();
    for sent in (0..DELIVERED + DEAD).step_by(BURST as usize) {
        if sent == DELIVERED {
            server.put(&lab, "downstream", r#"{"mode": "down", "retry_after_s": 0}"#).await;
        }
        let response = server
            .http
            .post(server.url(&format!("/api/labs/{lab}/bursts")))
            .json(&json!({ "count": BURST }))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 202, "{}", response.text().await.unwrap());
        settle(server, &lab, sent + BURST).await;
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
            "| {label} | {} | {:.0} ms | {:.0} ms | {:.0} ms | {:.0} ms | {} | {:.0} ms | {:.0} ms |",
            self.chunks,
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
    let mut by_name: HashMap<&str, f64> = HashMap::new();
    for (sample, delta) in samples.iter().zip(deltas.iter().skip(1).chain([&json!(0)])) {
        let name = names[&sample.as_u64().unwrap()].as_str();
        *by_name.entry(name).or_default() += delta.as_f64().unwrap() / 1000.0;
    }
    let mut top: Vec<_> = by_name.into_iter().collect();
    top.sort_by(|a, b| b.1.total_cmp(&a.1));
    println!("\nCPU profile of the first opening, {link}, self time:");
    for (name, ms) in top.into_iter().take(25) {
        println!("{ms:>9.1} ms  {name}");
    }
}
