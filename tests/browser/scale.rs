//! The page at scale, a measurement rather than a check (so `#[ignore]`d): how smoothly the
//! lab page draws while a 2,000-message burst streams in, from requestAnimationFrame timings
//! in headless Chromium, next to the same page idle; and how many bytes of event stream each
//! message costs, counted off the wire by a second subscriber in the same run.
//!
//! `cargo test --release --test browser -- --ignored --nocapture scale`
//!
//! `SCALE_BURST` (2000) and `SCALE_IDLE_S` (4) make the burst and the idle baseline smaller, for
//! a quick run that only proves the measurement still works.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{Server, browser, open_new_lab, wait_for};

const BURST: u64 = 2_000;
const IDLE_S: u64 = 4;

/// A number from the environment (`SCALE_BURST`, `SCALE_IDLE_S`...), or `default`.
pub(crate) fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Records the interval between consecutive animation frames until stopped. A frame that
/// the page's own work delayed shows up as a long interval.
pub(crate) const START_RECORDER: &str = "(() => {
    const rec = { intervals: [], last: 0, on: true, started: performance.now() };
    window.__frames = rec;
    const step = (t) => {
        if (rec.last) rec.intervals.push(t - rec.last);
        rec.last = t;
        if (rec.on) requestAnimationFrame(step);
    };
    requestAnimationFrame(step);
    return true;
})()";
const STOP_RECORDER: &str = "(() => {
    const rec = window.__frames;
    rec.on = false;
    return { intervals: rec.intervals, ms: performance.now() - rec.started };
})()";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: cargo test --release --test browser -- --ignored --nocapture scale"]
async fn scale_burst_of_2000_frame_times_and_stream_bytes() {
    let Some(browser) = browser() else { return };
    let burst = env_u64("SCALE_BURST", BURST).max(1);
    let idle_for = Duration::from_secs(env_u64("SCALE_IDLE_S", IDLE_S));
    let server = Server::start().await;
    let page = browser.page().await;
    page.set_viewport(1280, 900).await;
    let lab = open_new_lab(&page, &server).await;
    // Healthy, with the default 2 s timeout so a busy machine causes no retries, and a
    // 100-300 ms latency so the 2,000 deliveries (64 at a time) stream for several seconds.
    server.put(&lab, "policy", r#"{"timeout_ms": 2000}"#).await;
    server.put(&lab, "downstream", r#"{"latency_ms": [100, 300]}"#).await;

    // Baseline: the same page, nothing happening.
    page.eval(START_RECORDER).await.unwrap();
    tokio::time::sleep(idle_for).await;
    let idle = Frames::from(page.eval(STOP_RECORDER).await.unwrap());

    let (ready, subscribed) = tokio::sync::oneshot::channel();
    let wire = tokio::spawn(count_stream(
        server.http.clone(),
        server.url(&format!("/api/labs/{lab}/events")),
        ready,
        burst,
    ));
    subscribed.await.unwrap();
    page.eval(START_RECORDER).await.unwrap();
    let sent = Instant::now();
    server.burst(&lab, burst).await;
    let shown =
        format!("document.querySelector('[data-counter=\"delivered\"]').textContent.trim() === '{burst}'");
    wait_for(&page, "the page to show the whole burst delivered", &shown).await;
    let drawn_after = sent.elapsed();
    let busy = Frames::from(page.eval(STOP_RECORDER).await.unwrap());
    let wire = tokio::time::timeout(Duration::from_secs(30), wire)
        .await
        .expect("the stream saw every delivery")
        .unwrap();
    page.screenshot("scale-2000-1280").await;

    println!(
        "\npage at scale, 1280x900, burst of {burst}, healthy 100-300 ms; delivered on the page {drawn_after:.1?} after the burst was sent"
    );
    println!("| page | frames | over | p50 ms | p95 ms | p99 ms | max ms | fps |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    println!("{}", idle.row("idle (baseline)"));
    println!("{}", busy.row(&format!("burst of {burst} streaming")));
    println!(
        "stream: {} bytes in {} events after the snapshot = {:.0} bytes per message",
        wire.bytes,
        wire.events,
        wire.bytes as f64 / burst as f64
    );
    for (kind, (events, bytes)) in &wire.by_type {
        println!(
            "  {kind:>20}: {events:>6} events, {bytes:>9} bytes, {:>5.0} bytes/event",
            *bytes as f64 / *events as f64
        );
    }
    if std::env::var_os("SCALE_EXAMPLES").is_some() {
        for (kind, example) in &wire.examples {
            println!("--- {kind}, first 600 characters:\n{example}");
        }
    }
    let verdict = if busy.percentile(0.95) <= 20.0 { "met" } else { "NOT met" };
    println!("target frame time p95 <= 20 ms while streaming: {verdict}");
    let errors = page.console_errors();
    assert!(errors.is_empty(), "the page reported errors: {errors:?}");
}

/// Frame intervals recorded in the page.
pub(crate) struct Frames {
    pub(crate) intervals: Vec<f64>,
    pub(crate) ms: f64,
}

impl From<Value> for Frames {
    fn from(recorded: Value) -> Self {
        let mut intervals: Vec<f64> = serde_json::from_value(recorded["intervals"].clone()).unwrap();
        intervals.sort_by(f64::total_cmp);
        Frames { intervals, ms: recorded["ms"].as_f64().unwrap() }
    }
}

impl Frames {
    /// Nearest-rank percentile of the frame intervals, in ms.
    pub(crate) fn percentile(&self, p: f64) -> f64 {
        let rank = ((p * self.intervals.len() as f64).ceil() as usize).clamp(1, self.intervals.len());
        self.intervals[rank - 1]
    }

    pub(crate) fn row(&self, label: &str) -> String {
        format!(
            "| {label} | {} | {:.1} s | {:.1} | {:.1} | {:.1} | {:.1} | {:.0} |",
            self.intervals.len(),
            self.ms / 1000.0,
            self.percentile(0.50),
            self.percentile(0.95),
            self.percentile(0.99),
            self.intervals.last().copied().unwrap_or(0.0),
            self.intervals.len() as f64 / (self.ms / 1000.0)
        )
    }
}

/// What the event stream carried after its opening snapshot.
struct Wire {
    bytes: usize,
    events: usize,
    /// event type -> (events, bytes)
    by_type: BTreeMap<String, (usize, usize)>,
    /// event type -> the first one seen, as sent, to show where the bytes go
    examples: BTreeMap<String, String>,
}

/// Subscribes like the page does and counts every byte after the opening snapshot until
/// an event's counters say the whole burst was delivered.
async fn count_stream(
    http: reqwest::Client,
    url: String,
    ready: tokio::sync::oneshot::Sender<()>,
    burst: u64,
) -> Wire {
    let mut response = http.get(url).header("accept", "text/event-stream").send().await.unwrap();
    assert_eq!(response.status(), 200);
    let mut ready = Some(ready);
    let mut pending = Vec::new();
    let mut wire = Wire { bytes: 0, events: 0, by_type: BTreeMap::new(), examples: BTreeMap::new() };
    while let Some(chunk) = response.chunk().await.unwrap() {
        pending.extend_from_slice(&chunk);
        // An SSE event (or keep-alive comment) ends with a blank line.
        while let Some(end) = pending.windows(2).position(|w| w == b"\n\n") {
            let event: Vec<u8> = pending.drain(..end + 2).collect();
            let text = String::from_utf8_lossy(&event);
            if ready.is_some() {
                if text.lines().any(|l| l == "event: snapshot" || l == "event:snapshot") {
                    let _ = ready.take().unwrap().send(());
                }
                continue;
            }
            let data: String =
                text.lines().filter_map(|l| l.strip_prefix("data:")).map(str::trim_start).collect();
            let parsed: Value = serde_json::from_str(&data).unwrap_or(Value::Null);
            let kind = match (&parsed["type"], text.lines().find_map(|l| l.strip_prefix("event:"))) {
                (_, Some(name)) => name.trim().to_owned(),
                (Value::String(kind), None) => kind.clone(),
                _ => "(keep-alive)".to_owned(),
            };
            wire.examples.entry(kind.clone()).or_insert_with(|| text.chars().take(600).collect());
            let entry = wire.by_type.entry(kind).or_default();
            entry.0 += 1;
            entry.1 += event.len();
            wire.bytes += event.len();
            wire.events += 1;
            if parsed["counters"]["delivered"].as_u64() == Some(burst) {
                return wire;
            }
        }
    }
    panic!("the stream ended before the burst was delivered");
}
