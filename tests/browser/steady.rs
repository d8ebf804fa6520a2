//! The page under steady traffic, a measurement rather than a check (so `#[ignore]`d): whether
//! the lab page keeps drawing at the frame rate through a long run of steady arrivals with the
//! timeline following the newest messages, or slows down as the run's history grows. Frame
//! intervals come from requestAnimationFrame in headless Chromium, next to the same page idle,
//! and are reported per period (a minute by default) so a slow degradation shows, with the
//! page's JS heap and DOM size at the end of each period. At the end the page's counters must
//! equal the API's: that part is a check, and holds at any duration.
//!
//! `cargo test --release --test browser -- --ignored --nocapture steady_traffic_fps`
//!
//! `STEADY_FPS_S` (600) is how long the traffic runs, `STEADY_FPS_RATE` (50) its rate in new
//! messages per second, `STEADY_FPS_PERIOD_S` (60, or the whole run when shorter) how long
//! each reported period is. `STEADY_FPS_TRACE_S` (0), when set, records a DevTools trace that
//! long at the end of the run and prints where the page's time went. `STEADY_FPS_STATIC=DIR`
//! serves the page's `/static/*` files from DIR instead, in both tests here (another commit's:
//! `git archive <commit> static | tar -x -C DIR`, then `DIR/static`), so two versions of the
//! page are measured on the same build.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use std::path::Path;

use super::cdp::Page;
use super::open_large::serve_static_from;
use super::scale::{Frames, START_RECORDER, env_u64};
use super::{COUNTERS, Server, browser, open_new_lab, wait_for};

const IDLE: Duration = Duration::from_secs(4);

// The frame recorder is scale.rs's (`START_RECORDER`); `DRAIN` takes what it recorded so far
// and starts a new period, so a long run never holds more than one period of intervals.
const DRAIN: &str = "(() => {
    const rec = window.__frames;
    const now = performance.now();
    const out = { intervals: rec.intervals, ms: now - rec.started };
    rec.intervals = [];
    rec.started = now;
    return out;
})()";
const STOP_RECORDER: &str = "(() => { window.__frames.on = false; return true; })()";

/// What the page holds: elements in the document, load-chart bars, timeline rows drawn, the
/// messages it keeps (the filter's total), and the window on screen.
const PAGE_SIZE: &str = "({
    elements: document.getElementsByTagName('*').length,
    loadBars: document.querySelectorAll('[data-load-bar]').length,
    rows: document.querySelectorAll('#timeline .tl-row').length,
    messages: Number(document.querySelector('[data-filter-count]').dataset.total ?? 0),
    range: document.querySelector('[data-view-range]').textContent,
    following: document.querySelector('[data-follow]')?.dataset.following === 'true',
})";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: cargo test --release --test browser -- --ignored --nocapture steady_traffic_fps"]
async fn steady_traffic_fps() {
    let Some(browser) = browser() else { return };
    let run_s = env_u64("STEADY_FPS_S", 600).max(1);
    let rate = env_u64("STEADY_FPS_RATE", 50).max(1);
    let period_s = env_u64("STEADY_FPS_PERIOD_S", 60).clamp(1, run_s);
    let server = Server::start().await;
    let page = browser.page().await;
    page.set_viewport(1280, 900).await;
    with_static(&page, run(&page, &server, run_s, rate, period_s)).await;
}

/// Runs `test` on `page`, with the page's static files from `STEADY_FPS_STATIC` when it is set:
/// another commit's page in place of this one's, to compare the two on one build.
async fn with_static(page: &Page, test: impl Future<Output = ()>) {
    match std::env::var_os("STEADY_FPS_STATIC") {
        Some(dir) => {
            let events = page.events();
            page.call("Fetch.enable", json!({ "patterns": [{ "urlPattern": "*/static/*" }] })).await.unwrap();
            println!("\nthe page's static files from {}", dir.to_string_lossy());
            tokio::select! {
                never = serve_static_from(page, Path::new(&dir), events) => match never {},
                () = test => {}
            }
        }
        None => test.await,
    }
}

async fn run(page: &Page, server: &Server, run_s: u64, rate: u64, period_s: u64) {
    let lab = open_new_lab(page, server).await;
    // Healthy, answering in 20-120 ms as a real service would, with the default 2 s timeout
    // so a busy machine causes no retries.
    server.put(&lab, "policy", r#"{"timeout_ms": 2000}"#).await;
    server.put(&lab, "downstream", r#"{"mode": "healthy", "latency_ms": [20, 120]}"#).await;
    // The timeline in view, where the bars are drawn.
    page.eval("document.getElementById('timeline').scrollIntoView({ block: 'start' })").await.unwrap();

    // Baseline: the same page, nothing happening.
    page.eval(START_RECORDER).await.unwrap();
    tokio::time::sleep(IDLE).await;
    page.call("Performance.enable", json!({})).await.unwrap();
    let before = measure(page, None).await;
    let idle = Frames::from(page.eval(DRAIN).await.unwrap());
    let idle_size = measure(page, Some(&before)).await;

    server.put(&lab, "traffic", &json!({ "rate_per_s": rate, "arrivals": "poisson" }).to_string()).await;
    let started = Instant::now();
    let mut periods = Vec::new();
    let mut all = Vec::new();
    let mut elapsed = 0;
    while elapsed < run_s {
        let next = (elapsed + period_s).min(run_s);
        tokio::time::sleep_until((started + Duration::from_secs(next)).into()).await;
        let frames = Frames::from(page.eval(DRAIN).await.unwrap());
        let size =
            measure(page, Some(periods.last().map_or(&idle_size, |p: &(u64, u64, Frames, Size)| &p.3))).await;
        all.extend_from_slice(&frames.intervals);
        periods.push((elapsed, next, frames, size));
        elapsed = next;
    }
    let ran_ms = started.elapsed().as_secs_f64() * 1000.0;
    let trace_s = env_u64("STEADY_FPS_TRACE_S", 0);
    if trace_s > 0 {
        trace_top(page, Duration::from_secs(trace_s)).await;
    }
    page.eval(STOP_RECORDER).await.unwrap();
    server.put(&lab, "traffic", r#"{"rate_per_s": 0}"#).await;
    page.screenshot_viewport("steady-traffic-1280").await;

    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "\nsteady traffic, 1280x900, {rate} messages/s (Poisson) for {run_s} s, healthy 20-120 ms, follow on, timeline in view; load average {}",
        load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
    );
    println!(
        "| page | frames | over | p50 ms | p95 ms | p99 ms | max ms | fps | main thread busy | JS heap MB | messages held | elements | load bars |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    println!("{} {} |", idle.row("idle (baseline)"), idle_size.columns());
    for (from, to, frames, size) in &periods {
        println!("{} {} |", frames.row(&format!("{from}-{to} s")), size.columns());
    }
    let mut whole = Frames { intervals: all, ms: ran_ms };
    whole.intervals.sort_by(f64::total_cmp);
    // The idle baseline ended as the traffic started.
    let busy = periods.last().map_or(String::new(), |(.., last)| {
        format!("{:.0} %", (last.task_s - idle_size.task_s) / (last.at_s - idle_size.at_s) * 100.0)
    });
    let last = periods.last().map(|p| p.3.sizes()).unwrap_or_default();
    println!("{} {busy} | {last} |", whole.row(&format!("whole run, {run_s} s")));
    if let Some((.., last)) = periods.last() {
        let over = last.at_s - idle_size.at_s;
        let share = |i: usize| (last.parts[i] - idle_size.parts[i]) / over * 100.0;
        let busy = (last.task_s - idle_size.task_s) / over * 100.0;
        println!(
            "main thread over the run: {busy:.0} % busy: script {:.0} %, style {:.0} %, layout {:.0} %, the rest (paint, compositing, GC, parsing) {:.0} %",
            share(0),
            share(1),
            share(2),
            busy - share(0) - share(1) - share(2)
        );
    }
    let verdict = if whole.percentile(0.95) <= 17.5 { "met" } else { "NOT met" };
    println!("target 60 fps (frame time p95 <= 17.5 ms) over the whole run: {verdict}");

    // The check: once the lab is still, the page shows the API's counters, every one of them.
    wait_for(
        page,
        "the lab to settle",
        &format!("(c => c.queued === '0' && c.in_flight === '0' && c.backing_off === '0')({COUNTERS})"),
    )
    .await;
    let api = settled_snapshot(server, &lab).await;
    let expected: serde_json::Map<String, Value> = api["counters"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(name, value)| (name.clone(), Value::String(value.to_string())))
        .collect();
    let same = format!(
        "(want => {{ const shown = {COUNTERS}; return Object.keys(shown).every(k => !(k in want) || shown[k] === want[k]); }})({})",
        Value::Object(expected.clone())
    );
    wait_for(page, "the page's counters to match the API's", &same).await;
    let shown = page.eval(COUNTERS).await.unwrap();
    let shown = shown.as_object().unwrap();
    assert!(shown.len() >= 8, "the page shows its counters: {shown:?}");
    for (name, value) in shown {
        if let Some(want) = expected.get(name) {
            assert_eq!(value, want, "counter {name}: the page shows {value}, the API {want}");
        }
    }
    let sent = api["traffic"]["sent"].as_u64().unwrap();
    assert!(sent > 0, "the traffic sent messages: {}", api["traffic"]);
    let page_sent = page.eval("document.querySelector('[data-traffic-status]').dataset.sent").await.unwrap();
    assert_eq!(page_sent, json!(sent.to_string()), "the traffic line shows what the API says was sent");
    println!(
        "counters on the page = the API's: {sent} sent, {} delivered, {} dead letters, {} requests",
        api["counters"]["delivered"], api["counters"]["dead_letter"], api["counters"]["requests"]
    );
    let errors = page.console_errors();
    assert!(errors.is_empty(), "the page reported errors: {errors:?}");
}

/// Records a DevTools trace of the page for `span`, with the traffic still running, and prints
/// where the time went: the 30 costliest kinds of work by their total duration, each with its
/// thread (nested events count in each level, so a task's total holds its parts).
async fn trace_top(page: &Page, span: Duration) {
    let mut events = page.events();
    let categories = [
        "devtools.timeline",
        "disabled-by-default-devtools.timeline",
        "disabled-by-default-devtools.timeline.stack",
        "blink",
        "cc",
        "viz",
    ];
    let config =
        json!({ "traceConfig": { "includedCategories": categories }, "transferMode": "ReportEvents" });
    page.call("Tracing.start", config).await.unwrap();
    tokio::time::sleep(span).await;
    page.call("Tracing.end", json!({})).await.unwrap();
    let mut threads = HashMap::new();
    // Each kind of work: ms in all, and how many times.
    let mut totals: HashMap<(Value, String), (f64, u64)> = HashMap::new();
    let mut forced: HashMap<String, (f64, u64)> = HashMap::new();
    let mut restyled = (0.0, 0);
    // Paint by the element painted (its backend node id) and the size of the clip painted.
    let mut painted: HashMap<(i64, String), (f64, u64)> = HashMap::new();
    let add = |total: &mut (f64, u64), ms: f64| {
        total.0 += ms;
        total.1 += 1;
    };
    loop {
        match events.recv().await {
            Ok((method, params)) if method == "Tracing.dataCollected" => {
                for e in params["value"].as_array().into_iter().flatten() {
                    let thread = json!([e["pid"], e["tid"]]);
                    if e["ph"] == "M" && e["name"] == "thread_name" {
                        threads.insert(thread, e["args"]["name"].as_str().unwrap_or("?").to_owned());
                    } else if e["ph"] == "X" {
                        let ms = e["dur"].as_f64().unwrap_or(0.0) / 1000.0;
                        if e["name"] == "Paint" {
                            let data = &e["args"]["data"];
                            let clip = data["clip"].as_array().map_or(String::from("?"), |c| {
                                let xs: Vec<f64> = c.iter().filter_map(Value::as_f64).collect();
                                if xs.len() == 8 {
                                    format!("{:.0}x{:.0}", xs[2] - xs[0], xs[5] - xs[1])
                                } else {
                                    String::from("?")
                                }
                            });
                            add(
                                painted.entry((data["nodeId"].as_i64().unwrap_or(-1), clip)).or_default(),
                                ms,
                            );
                        }
                        if e["name"] == "UpdateLayoutTree" {
                            restyled.0 += e["args"]["elementCount"].as_f64().unwrap_or(0.0);
                            restyled.1 += 1;
                        }
                        // Style or layout forced by a script that read the layout: where from.
                        let stack = &e["args"]["beginData"]["stackTrace"];
                        let stack = if stack.is_null() { &e["args"]["data"]["stackTrace"] } else { stack };
                        if let Some(frame) = stack.get(0) {
                            let at = format!(
                                "{} {}:{}",
                                frame["functionName"].as_str().unwrap_or("?"),
                                frame["url"].as_str().unwrap_or("?").rsplit('/').next().unwrap_or("?"),
                                frame["lineNumber"]
                            );
                            let name = format!("{} from {at}", e["name"].as_str().unwrap_or("?"));
                            add(forced.entry(name).or_default(), ms);
                        }
                        add(
                            totals.entry((thread, e["name"].as_str().unwrap_or("?").to_owned())).or_default(),
                            ms,
                        );
                    }
                }
            }
            Ok((method, _)) if method == "Tracing.tracingComplete" => break,
            Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        }
    }
    let mut rows: Vec<_> = totals.into_iter().collect();
    rows.sort_by(|a, b| b.1.0.total_cmp(&a.1.0));
    println!(
        "\nwhere {:.0} s of the page's time went (ms in total, per second of the trace, and events):",
        span.as_secs_f64()
    );
    for ((thread, name), (ms, n)) in rows.into_iter().take(30) {
        let thread = threads.get(&thread).map_or("?", String::as_str);
        println!("{:>9.1} ms {:>6.1} ms/s {n:>7}  {thread:<20} {name}", ms, ms / span.as_secs_f64());
    }
    let mut forced: Vec<_> = forced.into_iter().collect();
    forced.sort_by(|a, b| b.1.0.total_cmp(&a.1.0));
    println!(
        "elements restyled: {:.0} in {} recalculations ({:.0} each)",
        restyled.0,
        restyled.1,
        restyled.0 / f64::from(restyled.1.max(1))
    );
    println!("style and layout that scripts forced, by the line that asked:");
    for (at, (ms, n)) in forced.into_iter().take(12) {
        println!("{ms:>9.1} ms {n:>7}  {at}");
    }
    let mut painted: Vec<_> = painted.into_iter().collect();
    painted.sort_by(|a, b| b.1.0.total_cmp(&a.1.0));
    println!("paint by the element painted (the layer's root) and the size painted:");
    for ((node, clip), (ms, n)) in painted.into_iter().take(12) {
        let described = page.call("DOM.describeNode", json!({ "backendNodeId": node })).await;
        let name = described.map_or(String::from("?"), |d| {
            let n = &d["node"];
            let attributes: Vec<&str> =
                n["attributes"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
            format!("{} {}", n["nodeName"].as_str().unwrap_or("?"), attributes.join(" "))
        });
        println!("{ms:>9.1} ms {n:>7}  {clip:>11}  {name}");
    }
    let parts = page.eval(ELEMENTS_BY_PART).await.unwrap();
    println!("elements by part of the page: {parts}");
}

/// Elements in each panel, and in each part of the timeline.
const ELEMENTS_BY_PART: &str = "(() => {
    const out = {};
    const count = (el) => el.getElementsByTagName('*').length;
    for (const panel of document.querySelectorAll('main > section')) {
        const h = panel.querySelector('h2');
        out[h ? h.textContent.trim().slice(0, 20) : panel.className] = count(panel);
    }
    for (const sel of ['.tl-axis', '.tl-overlay.tl-under', '.tl-overlay.tl-over', '.tl-rows', '.tl-ticks', '.tl-marks', '.tl-breaker']) {
        const el = document.querySelector(sel);
        if (el) out[sel] = count(el);
    }
    // The largest boxes in the timeline's panel: one that grows with the run shows here.
    const panel = document.getElementById('timeline').closest('section');
    out.largest = [...panel.getElementsByTagName('*')]
        .map((e) => { const r = e.getBoundingClientRect(); return [Math.round(r.width * r.height / 1e3), `${e.tagName}.${e.className}`, Math.round(r.width), Math.round(r.height)]; })
        .sort((a, b) => b[0] - a[0]).slice(0, 6);
    return out;
})()";

/// The API's snapshot once nothing is queued, in flight or backing off.
async fn settled_snapshot(server: &Server, lab: &str) -> Value {
    let start = Instant::now();
    loop {
        let snapshot = server.snapshot(lab).await;
        let c = &snapshot["counters"];
        if c["queued"] == 0 && c["in_flight"] == 0 && c["backing_off"] == 0 {
            return snapshot;
        }
        assert!(start.elapsed() < super::PATIENCE, "the lab did not settle: {c}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The page's JS heap and DOM at the end of a period, and how busy its main thread was.
struct Size {
    heap_bytes: f64,
    page: Value,
    /// Seconds the main thread has spent in tasks of any kind (script, style, layout, paint)
    /// so far, CDP `Performance.getMetrics` `TaskDuration`.
    task_s: f64,
    /// Of those, seconds in script, style and layout so far.
    parts: [f64; 3],
    /// The share of the period the main thread was busy.
    busy: f64,
    /// When it was taken, s (the metrics' own clock).
    at_s: f64,
}

impl Size {
    fn columns(&self) -> String {
        format!("{:.0} % | {}", self.busy * 100.0, self.sizes())
    }

    fn sizes(&self) -> String {
        format!(
            "{:.1} | {} | {} | {}",
            self.heap_bytes / 1e6,
            self.page["messages"],
            self.page["elements"],
            self.page["loadBars"]
        )
    }
}

/// The page now; `since` is the measure at the start of the period.
async fn measure(page: &Page, since: Option<&Size>) -> Size {
    let heap = page.call("Runtime.getHeapUsage", json!({})).await.unwrap();
    let metrics = page.call("Performance.getMetrics", json!({})).await.unwrap();
    let task_s = metrics["metrics"]
        .as_array()
        .and_then(|all| all.iter().find(|m| m["name"] == "TaskDuration"))
        .and_then(|m| m["value"].as_f64())
        .unwrap_or(0.0);
    let at_s = metrics["metrics"]
        .as_array()
        .and_then(|all| all.iter().find(|m| m["name"] == "Timestamp"))
        .and_then(|m| m["value"].as_f64())
        .unwrap_or(0.0);
    let metric = |name: &str| {
        metrics["metrics"]
            .as_array()
            .and_then(|all| all.iter().find(|m| m["name"] == name))
            .and_then(|m| m["value"].as_f64())
            .unwrap_or(0.0)
    };
    let parts = [metric("ScriptDuration"), metric("RecalcStyleDuration"), metric("LayoutDuration")];
    let sizes = page.eval(PAGE_SIZE).await.unwrap();
    let busy = match since {
        Some(s) if at_s > s.at_s => (task_s - s.task_s) / (at_s - s.at_s),
        _ => 0.0,
    };
    Size { heap_bytes: heap["usedSize"].as_f64().unwrap_or(f64::NAN), page: sizes, task_s, parts, busy, at_s }
}

/// The window on screen as the timeline has it: `--t0`, the span (track width over `--k`), and
/// every load bar drawn, as `[start, requests]`.
const LOAD_VIEW: &str = "(() => {
    const tl = document.getElementById('timeline');
    const track = tl.querySelector('.tl-scroll').clientWidth - tl.querySelector('.tl-corner').offsetWidth;
    const k = Number(tl.style.getPropertyValue('--k'));
    return {
        t0: Number(tl.style.getPropertyValue('--t0')),
        span: track / k,
        bars: [...document.querySelectorAll('[data-load-bar]')].map(b => [Number(b.dataset.t), Number(b.dataset.requests)]),
    };
})()";

/// A long run holds tens of thousands of load bins; the chart draws only the bars near the
/// window on screen (half a window either side), so a frame costs the same after an hour as
/// after a minute. Zoomed in, bars far from the window are not in the page, the ones near it
/// are, with the API's figures; back to "fit", every bin is drawn again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_chart_draws_only_the_bars_near_the_window() {
    let Some(browser) = browser() else { return };
    let server = Server::start().await;
    let page = browser.page().await;
    page.set_viewport(1280, 900).await;
    with_static(&page, load_chart_near_the_window(&page, &server)).await;
}

async fn load_chart_near_the_window(page: &Page, server: &Server) {
    let lab = open_new_lab(page, server).await;
    // One message a second for five seconds: five bins a second apart.
    for _ in 0..5 {
        server.burst(&lab, 1).await;
        tokio::time::sleep(Duration::from_millis(1000)).await;
    }
    super::wait_counter(page, "delivered", 5).await;
    let snapshot = server.snapshot(&lab).await;
    let bins: Vec<(f64, u64)> = snapshot["load"]["bins"]
        .as_array()
        .unwrap_or_else(|| panic!("load bins: {}", snapshot["load"]))
        .iter()
        .map(|b| (b["t_ms"].as_f64().unwrap(), b["requests"].as_u64().unwrap()))
        .collect();
    let mut bins = bins;
    bins.sort_by(|a, b| a.0.total_cmp(&b.0));
    let spread = bins.last().unwrap().0 - bins[0].0;
    assert!(bins.len() >= 5 && spread >= 3500.0, "five bins a second apart: {bins:?}");
    wait_for(page, "a bar for every bin, with its figures", &every_bar(&bins)).await;

    // Zoomed in 16 times: a window a few hundred ms wide in a lab five seconds long.
    for _ in 0..4 {
        page.click("[data-zoom=\"in\"]").await;
    }
    let zoomed = super::timeline(page).await;
    assert_eq!(zoomed["zoomed"], true, "{zoomed}");
    let view = page.eval(LOAD_VIEW).await.unwrap();
    let (t0, span) = (view["t0"].as_f64().unwrap(), view["span"].as_f64().unwrap());
    assert!(span < 1000.0, "zoomed in: {view}");
    let drawn = bars_of(&view);
    // One bar is 100 ms here; the chart draws from half a window before to half a window after.
    let (from, to) = (t0 - span / 2.0, t0 + span * 1.5);
    for (start, _) in &drawn {
        assert!(*start >= from - 100.0 && *start < to + 100.0, "bar {start} is far from the window: {view}");
    }
    for bin in &bins {
        if bin.0 >= from + 100.0 && bin.0 < to - 100.0 {
            assert!(drawn.contains(bin), "bin {bin:?} is near the window and has no bar: {view}");
        }
    }
    assert!(drawn.len() < bins.len(), "zoomed in, not every bar is drawn: {view}");
    // A window this narrow may fall between two bins a second apart: no bar on screen then.
    assert_bars_on_the_axis(page, 0).await;

    // Back to "fit": every bin again, with its figures.
    page.click("[data-zoom=\"fit\"]").await;
    wait_for(page, "every bar again", &every_bar(&bins)).await;
    assert_bars_on_the_axis(page, bins.len()).await;
    super::assert_no_console_errors(page);
}

/// Every load bar on screen stands where its start is on the timeline's time axis: as far
/// from a grid line of the rows as their times are apart, at the timeline's px per ms (the
/// bars are moved as one layer, the grid lines each by itself); at least `least` of them.
async fn assert_bars_on_the_axis(page: &Page, least: usize) {
    let placed = page
        .eval(
            "(() => {
                const tl = document.getElementById('timeline');
                const k = Number(tl.style.getPropertyValue('--k'));
                const line = tl.querySelector('.tl-gridline');
                const at = Number(line.style.getPropertyValue('--s'));
                const x = line.getBoundingClientRect().left;
                const plot = tl.querySelector('[data-load-plot]').getBoundingClientRect();
                return [...tl.querySelectorAll('[data-load-bar]')]
                    .map(b => [Number(b.dataset.t), b.getBoundingClientRect().left])
                    .filter(([, left]) => left >= plot.left && left < plot.right)
                    .map(([t, left]) => [t, left - (x + (t - at) * k)]);
            })()",
        )
        .await
        .unwrap();
    let placed = placed.as_array().unwrap();
    assert!(placed.len() >= least, "at least {least} bars on screen: {placed:?}");
    for bar in placed {
        assert!(
            bar[1].as_f64().unwrap().abs() <= 1.5,
            "bar at {} is {} px off its time: {placed:?}",
            bar[0],
            bar[1]
        );
    }
}

/// True once the chart draws exactly these bins, `(start, requests)`, one bar each.
fn every_bar(bins: &[(f64, u64)]) -> String {
    let want = serde_json::to_string(&bins.iter().map(|(t, n)| json!([t, n])).collect::<Vec<_>>()).unwrap();
    format!("JSON.stringify({LOAD_VIEW}.bars.sort((a, b) => a[0] - b[0])) === JSON.stringify({want})")
}

/// The bars drawn, by start, as `(start, requests)`.
fn bars_of(view: &Value) -> Vec<(f64, u64)> {
    let mut bars: Vec<(f64, u64)> = view["bars"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| (b[0].as_f64().unwrap(), b[1].as_u64().unwrap()))
        .collect();
    bars.sort_by(|a, b| a.0.total_cmp(&b.0));
    bars
}

/// Watches the trace console: how many times lines were added, how many each removal took
/// away, and the most lines it held.
const WATCH_TRACE: &str = "(() => {
    const log = document.getElementById('trace');
    const w = window.__traceWatch = { added: 0, removals: [], most: 0, lastAdded: 0, addedFrame: 0, frames: 0, started: performance.now() };
    const tick = () => { w.frames += 1; requestAnimationFrame(tick); };
    requestAnimationFrame(tick);
    new MutationObserver((records) => {
        let added = 0, removed = 0;
        for (const r of records) { added += r.addedNodes.length; removed += r.removedNodes.length; }
        if (added) { w.added += 1; w.lastAdded = performance.now(); w.addedFrame = w.frames; }
        if (removed) w.removals.push(removed);
        w.most = Math.max(w.most, log.childElementCount);
    }).observe(log, { childList: true });
    return true;
})()";
/// What `WATCH_TRACE` saw, with the lines held now, how long ago lines last came, and whether
/// the console sits at its newest line. That is read once 50 ms and two whole frames have
/// passed since lines last came: the console scrolls to new lines at the start of the next
/// frame, not in the one that drew them, and a frame's callbacks run in the order they were
/// asked for, so in the next frame this reading may come before the page's scroll (on a
/// loaded machine one long frame covers the 50 ms: it read `at_bottom: false` 69 ms after).
const TRACE_WATCHED: &str = "(async () => {
    const log = document.getElementById('trace');
    const w = window.__traceWatch;
    const frame = () => new Promise((r) => requestAnimationFrame(r));
    while (performance.now() - w.lastAdded < 50 || w.frames - w.addedFrame < 2) await frame();
    const now = performance.now();
    return { redraws_per_s: w.added / ((now - w.started) / 1000), removals: w.removals, most: w.most,
        lines: log.childElementCount, since_last_ms: now - w.lastAdded,
        at_bottom: log.scrollTop + log.clientHeight >= log.scrollHeight - 8 };
})()";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_console_keeps_up_with_steady_traffic_in_few_redraws() {
    let Some(browser) = browser() else { return };
    let server = Server::start().await;
    let page = browser.page().await;
    page.set_viewport(1280, 900).await;
    let lab = open_new_lab(&page, &server).await;
    page.eval("document.getElementById('trace').scrollIntoView({ block: 'center' })").await.unwrap();
    page.eval(WATCH_TRACE).await.unwrap();
    // A few events in every frame: each message is queued, sent and answered.
    server.put(&lab, "traffic", r#"{"rate_per_s": 100, "arrivals": "even"}"#).await;
    let watched = wait_for(
        &page,
        "the console to drop its old lines twice",
        "(w => w.removals.length >= 2 && w)(window.__traceWatch)",
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let watched = page.eval(TRACE_WATCHED).await.map_err(|e| format!("{e}: {watched}")).unwrap();
    server.put(&lab, "traffic", r#"{"rate_per_s": 0}"#).await;
    println!("the trace console under 100 messages/s: {watched}");
    // Drawn at most ten times a second (four under a stream this heavy), not in every frame,
    // and still live.
    let redraws = watched["redraws_per_s"].as_f64().unwrap();
    assert!((1.0..=12.0).contains(&redraws), "new lines drawn {redraws:.1} times a second: {watched}");
    assert!(watched["since_last_ms"].as_f64().unwrap() < 1500.0, "the console stopped: {watched}");
    assert_eq!(watched["at_bottom"], true, "the console left its newest line: {watched}");
    // Old lines go a hundred at a time: 300 lines kept, never more than 400.
    let removals: Vec<u64> =
        watched["removals"].as_array().unwrap().iter().filter_map(Value::as_u64).collect();
    assert!(removals.iter().all(|&n| n >= 100), "old lines went a few at a time: {watched}");
    let (most, lines) = (watched["most"].as_u64().unwrap(), watched["lines"].as_u64().unwrap());
    assert!(most <= 400 && (300..=400).contains(&lines), "lines held: {watched}");
    super::assert_no_console_errors(&page);
}
