//! Steady traffic, measured. Two parts, one command:
//!
//! 1. **One lab.** Steady traffic (even arrivals) against a healthy 0-latency endpoint, at
//!    rising rates, each in a fresh lab for a while: how late the arrivals were against their
//!    schedule (p99), how far a 10 ms timer overshot meanwhile (p99, the baseline of what the
//!    machine's scheduler allows), and whether the lab kept up (every arrival accepted, and
//!    delivered by the end). The answer is the highest rate sustained with both p99s within
//!    10 ms.
//! 2. **Many labs.** 100 labs at 10 messages/s each, each with an open event stream read by
//!    this process: how long an event took from the lab to its reader (p99), and the RSS of
//!    the process (server and readers) now and then, beside the bytes live in it (counted by
//!    the allocator: what the process holds, apart from what the allocator keeps for reuse,
//!    and the most it held at once since the line before), the bytes of the labs' event
//!    windows and the idempotency keys held (from `/metrics`), and how many fresh snapshots
//!    the streams were sent for falling behind.
//!
//! Run: `cargo run --release --example traffic_bench` (the full run: 10 s per rate, 10 minutes
//! of many labs); `-- --quick` for CI's quick mode (small counts, a few seconds);
//! `-- --many-s N` to choose how long the many-labs part runs, `-- --many-only` to skip the first,
//! `-- --event-window-bytes N` to run with another bound on each lab's events than the default,
//! `-- --settled-window N` to keep another number of delivered messages a lab than the default,
//! `-- --server target/release/retrylab` to run that binary as the server, in a process of its
//! own, and read its RSS alone (the readers here then cost it nothing),
//! `-- --rates 4000,6000,8000` to ask the one lab for other rates than 500 to 4,000 a second.

#[path = "support/counting.rs"]
mod counting;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use retrylab::config::{Config, Limits};
use serde_json::{Value, json};

struct Plan {
    rates: Vec<f64>,
    per_rate: Duration,
    labs: usize,
    lab_rate: f64,
    many_for: Duration,
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let many_only = args.iter().any(|a| a == "--many-only");
    let many_s = args.iter().position(|a| a == "--many-s").and_then(|i| args.get(i + 1)?.parse().ok());
    let window_bytes =
        args.iter().position(|a| a == "--event-window-bytes").and_then(|i| args.get(i + 1)?.parse().ok());
    let settled_window: Option<usize> =
        args.iter().position(|a| a == "--settled-window").and_then(|i| args.get(i + 1)?.parse().ok());
    let server_bin = args.iter().position(|a| a == "--server").and_then(|i| args.get(i + 1).cloned());
    let rates: Option<Vec<f64>> = args
        .iter()
        .position(|a| a == "--rates")
        .and_then(|i| args.get(i + 1)?.split(',').map(|r| r.trim().parse().ok()).collect());
    let mut plan = if quick {
        Plan {
            rates: vec![100.0, 400.0],
            per_rate: Duration::from_secs(1),
            labs: 5,
            lab_rate: 10.0,
            many_for: Duration::from_secs(many_s.unwrap_or(3)),
        }
    } else {
        Plan {
            rates: vec![500.0, 1_000.0, 2_000.0, 3_000.0, 4_000.0],
            per_rate: Duration::from_secs(10),
            labs: 100,
            lab_rate: 10.0,
            many_for: Duration::from_secs(many_s.unwrap_or(600)),
        }
    };
    if let Some(rates) = rates {
        plan.rates = rates;
    }
    let dir = std::env::temp_dir().join(format!("retrylab-traffic-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // The server's defaults (the settled window and the event window too, unless asked for
    // others), but for creating the labs (this one client makes 100 of them at once) and the
    // control rate this process cannot trip.
    let limits = Limits {
        settled_window: settled_window.unwrap_or(Limits::default().settled_window),
        lab_create_burst: 1_000,
        lab_creates_per_hour: 10_000,
        control_rate_per_s: 10_000,
        control_burst: 10_000,
        event_window_bytes: window_bytes.unwrap_or(Limits::default().event_window_bytes),
        // Room for whatever `--rates` asks for.
        max_traffic_rate_per_s: plan
            .rates
            .iter()
            .copied()
            .fold(Limits::default().max_traffic_rate_per_s, f64::max),
        ..Limits::default()
    };
    let (base, mut server) = match &server_bin {
        Some(bin) => {
            let (base, child) = spawn_server(bin, &dir, &limits);
            (base, Some(child))
        }
        None => {
            let config = Config { limits, ..Config::new(dir.join("traffic.db")) };
            let listener =
                tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await.unwrap();
            let base = format!("http://{}", listener.local_addr().unwrap());
            tokio::spawn(retrylab::server::serve(listener, config, std::future::pending()));
            (base, None)
        }
    };
    // Whose memory is read: the server's own process when it runs apart, else this one's.
    let pid = server.as_ref().map(std::process::Child::id);
    let client = reqwest::Client::builder().no_proxy().build().unwrap();

    println!("## One lab: the highest steady rate\n");
    println!(
        "| rate/s | for | sent | refused | delivered by the end | arrivals late p99 | 10 ms timer late p99 | kept up |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |");
    let mut best = None;
    for &rate in plan.rates.iter().filter(|_| !many_only) {
        let lab = new_lab(&client, &base).await;
        put(&client, &lab, "downstream", json!({"mode": "healthy", "latency_ms": [0, 0]})).await;
        let timer = Timer::start();
        put(
            &client,
            &lab,
            "traffic",
            json!({"rate_per_s": rate, "arrivals": "even", "for_ms": plan.per_rate.as_millis() as u64}),
        )
        .await;
        let ended = wait(&client, &lab, Duration::from_secs(120), |s| {
            s["traffic"]["rate_per_s"] == 0.0
                && s["counters"]["queued"] == 0
                && s["counters"]["in_flight"] == 0
                && s["counters"]["backing_off"] == 0
        })
        .await;
        let timer_p99 = timer.stop();
        let t = &ended["traffic"];
        let (sent, refused) = (t["sent"].as_u64().unwrap(), t["refused"].as_u64().unwrap());
        let delivered = ended["counters"]["delivered"].as_u64().unwrap();
        let late = t["late_ms_p99"].as_f64().unwrap_or(f64::NAN);
        let expected = rate * plan.per_rate.as_secs_f64();
        let kept_up = refused == 0
            && delivered == sent
            && sent as f64 >= expected * 0.98
            && late <= 10.0
            && timer_p99 <= 10.0;
        if kept_up {
            best = Some(rate);
        }
        println!(
            "| {rate} | {} s | {sent} | {refused} | {delivered} | {late:.1} ms | {timer_p99:.1} ms | {} |",
            plan.per_rate.as_secs(),
            if kept_up { "yes" } else { "no" }
        );
        assert_eq!(ended["counters"]["applied_twice"], 0);
    }
    match best {
        Some(rate) => println!("\nHighest sustained: {rate} new messages/s.\n"),
        None => println!("\nNo rate sustained within 10 ms.\n"),
    }

    println!(
        "## Many labs: {} labs at {} messages/s, each with an open event stream\n",
        plan.labs, plan.lab_rate
    );
    let idle_rss = rss_mib(pid);
    let mut labs = Vec::new();
    for _ in 0..plan.labs {
        let lab = new_lab(&client, &base).await;
        put(&client, &lab, "downstream", json!({"mode": "healthy", "latency_ms": [5, 20]})).await;
        labs.push(lab);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let mut readers = Vec::new();
    for lab in &labs {
        readers.push(tokio::spawn(read_stream(client.clone(), format!("{lab}/events"), stop.clone())));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    for lab in &labs {
        put(&client, lab, "traffic", json!({"rate_per_s": plan.lab_rate})).await;
    }
    println!("| after | RSS | live bytes | event windows | keys whole / fingerprint | fresh snapshots |");
    println!("| ---: | ---: | ---: | ---: | ---: | ---: |");
    let timer = Timer::start();
    let started = Instant::now();
    let every = (plan.many_for / 10).max(Duration::from_secs(1));
    let mut rss = Vec::new();
    while started.elapsed() < plan.many_for {
        tokio::time::sleep(every.min(plan.many_for.saturating_sub(started.elapsed()))).await;
        let now = rss_mib(pid);
        rss.push(now);
        let metrics = client.get(format!("{base}/metrics")).send().await.unwrap().text().await.unwrap();
        let gauge = |name: &str| -> f64 {
            let line = metrics.lines().find(|l| l.starts_with(name));
            line.and_then(|l| l.rsplit(' ').next()?.parse().ok()).unwrap_or(f64::NAN)
        };
        // The allocator's count is this process's: not the server's when it runs apart.
        let live = match pid {
            Some(_) => "-".to_owned(),
            None => {
                let mib = |bytes: isize| bytes as f64 / 1048576.0;
                format!("{:.0} MiB (at most {:.0})", mib(counting::live()), mib(counting::peak()))
            }
        };
        println!(
            "| {:.0} s | {now:.0} MiB | {live} | {:.1} MiB | {:.0} / {:.0} | {} |",
            started.elapsed().as_secs_f64(),
            gauge("retrylab_event_window_bytes") / 1048576.0,
            gauge("retrylab_idempotency_keys{held=\"whole\"}"),
            gauge("retrylab_idempotency_keys{held=\"fingerprint\"}"),
            FRESH_SNAPSHOTS.load(Ordering::Relaxed),
        );
    }
    let timer_p99 = timer.stop();
    stop.store(true, Ordering::Relaxed);
    for lab in &labs {
        put(&client, lab, "traffic", json!({"rate_per_s": 0})).await;
    }
    let mut delays = vec![0u64; DELAY_BUCKETS];
    let mut events = 0;
    for reader in readers {
        let (n, d) = reader.await.unwrap();
        events += n;
        for (total, count) in delays.iter_mut().zip(d) {
            *total += count;
        }
    }
    let counted: u64 = delays.iter().sum();
    let p = |q: f64| {
        let rank = ((counted as f64 * q).ceil() as u64).max(1);
        let mut seen = 0;
        delays.iter().position(|&c| {
            seen += c;
            seen >= rank
        })
    };
    let shown = |bucket: Option<usize>| match bucket {
        Some(b) if b == DELAY_BUCKETS - 1 => format!("≥ {} ms", DELAY_BUCKETS - 1),
        Some(b) => format!("{b} ms"),
        None => "-".into(),
    };
    let half = rss.len() / 2;
    let growth = match (rss.get(half), rss.last()) {
        (Some(mid), Some(last)) => last - mid,
        _ => f64::NAN,
    };
    println!(
        "\n{events} events read over {:.0} s; delivery p50 {}, p99 {}, max {} (1 ms buckets); a 10 ms timer meanwhile late by {timer_p99:.1} ms at p99; RSS over the second half {:+.0} MiB; RSS per lab above the idle server ({idle_rss:.0} MiB) at the end {:.2} MiB.",
        plan.many_for.as_secs_f64(),
        shown(p(0.5)),
        shown(p(0.99)),
        shown(delays.iter().rposition(|&c| c > 0)),
        growth,
        (rss.last().copied().unwrap_or(f64::NAN) - idle_rss) / plan.labs as f64,
    );
    if let Some(server) = server.as_mut() {
        let _ = server.kill();
        let _ = server.wait();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Starts the retrylab binary `bin` on a free port with `limits`' settings that this bench
/// changes from the defaults; returns its address and the process.
fn spawn_server(bin: &str, dir: &std::path::Path, limits: &Limits) -> (String, std::process::Child) {
    use std::io::BufRead;
    let flags = [
        ("--settled-window", limits.settled_window.to_string()),
        ("--event-window-bytes", limits.event_window_bytes.to_string()),
        ("--lab-create-burst", limits.lab_create_burst.to_string()),
        ("--lab-creates-per-hour", limits.lab_creates_per_hour.to_string()),
        ("--control-rate-per-s", limits.control_rate_per_s.to_string()),
        ("--control-burst", limits.control_burst.to_string()),
        ("--max-traffic-rate-per-s", limits.max_traffic_rate_per_s.to_string()),
    ];
    let mut command = std::process::Command::new(bin);
    command.args(["--addr", "127.0.0.1:0", "--db"]).arg(dir.join("traffic.db"));
    for (flag, value) in flags {
        command.args([flag, &value]);
    }
    let mut child = command
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {bin}: {e}"));
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let at = line.find("http://").unwrap_or_else(|| panic!("{bin} said {line:?}, not its address"));
    let base: String = line[at..].chars().take_while(|c| !c.is_whitespace()).collect();
    (base.trim_end_matches('/').to_owned(), child)
}

async fn new_lab(client: &reqwest::Client, base: &str) -> String {
    let lab: Value = client.post(format!("{base}/api/labs")).send().await.unwrap().json().await.unwrap();
    let id = lab["id"].as_str().unwrap_or_else(|| panic!("creating a lab: {lab}"));
    format!("{base}/api/labs/{id}")
}

async fn put(client: &reqwest::Client, lab: &str, what: &str, body: Value) {
    let response = client.put(format!("{lab}/{what}")).json(&body).send().await.unwrap();
    assert!(response.status().is_success(), "PUT {what}: {}", response.text().await.unwrap());
}

async fn wait(client: &reqwest::Client, lab: &str, limit: Duration, done: impl Fn(&Value) -> bool) -> Value {
    let start = Instant::now();
    loop {
        let snapshot: Value = client.get(lab).send().await.unwrap().json().await.unwrap();
        if done(&snapshot) || start.elapsed() > limit {
            return snapshot;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A task that sleeps 10 ms again and again and notes how late each wake-up was: what the
/// machine allows any timer, to read the arrivals' lateness against.
struct Timer {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Vec<f64>>,
}

impl Timer {
    fn start() -> Timer {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            let mut late = Vec::new();
            while !flag.load(Ordering::Relaxed) {
                let asked = Instant::now();
                tokio::time::sleep(Duration::from_millis(10)).await;
                late.push((asked.elapsed().as_secs_f64() * 1000.0 - 10.0).max(0.0));
            }
            late
        });
        Timer { stop, task }
    }

    fn stop(self) -> f64 {
        self.stop.store(true, Ordering::Relaxed);
        let mut late = futures_block(self.task);
        late.sort_by(f64::total_cmp);
        late.get(((late.len() as f64 * 0.99).ceil() as usize).saturating_sub(1)).copied().unwrap_or(f64::NAN)
    }
}

fn futures_block<T: Send + 'static>(task: tokio::task::JoinHandle<T>) -> T {
    tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(task)).unwrap()
}

/// Delays are counted in 1 ms buckets up to this; later ones in the last bucket.
const DELAY_BUCKETS: usize = 10_000;

/// Snapshots the streams sent after their first: a reader that fell behind the lab's window is
/// sent a fresh one instead of the events it missed.
static FRESH_SNAPSHOTS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Reads one lab's event stream until told to stop: how many events, and for each event after
/// the opening snapshot, how long after its `at_ms` it arrived here, as 1 ms buckets. It reads
/// only the two numbers it needs from each event and keeps no event, so that the reader is
/// not what falls behind.
async fn read_stream(client: reqwest::Client, url: String, stop: Arc<AtomicBool>) -> (usize, Vec<u64>) {
    let mut response = client.get(&url).send().await.unwrap();
    let mut pending: Vec<u8> = Vec::new();
    let mut offset_ms: Option<f64> = None;
    let (mut events, mut delays) = (0, vec![0u64; DELAY_BUCKETS]);
    while !stop.load(Ordering::Relaxed) {
        let chunk = match tokio::time::timeout(Duration::from_millis(500), response.chunk()).await {
            Ok(Ok(Some(chunk))) => chunk,
            Ok(_) => break,
            Err(_) => continue,
        };
        let received = unix_ms();
        pending.extend_from_slice(&chunk);
        let mut start = 0;
        while let Some(end) = find(&pending[start..], b"\n\n") {
            let block = &pending[start..start + end];
            start += end + 2;
            if !block.windows(5).any(|w| w == b"data:") {
                continue; // a keep-alive comment
            }
            events += 1;
            // The lab's clock is the wall clock less its origin: the snapshot's `now_ms`,
            // read as it arrives, gives the origin (within that one delivery's delay).
            if offset_ms.is_some() && find(block, b"\"now_ms\":").is_some() {
                FRESH_SNAPSHOTS.fetch_add(1, Ordering::Relaxed);
            }
            if offset_ms.is_none() {
                if let Some(now_ms) = number_after(block, b"\"now_ms\":") {
                    offset_ms = Some(received - now_ms);
                }
            } else if let (Some(offset), Some(at_ms)) = (offset_ms, number_after(block, b"\"at_ms\":")) {
                let delay = (received - offset - at_ms).max(0.0) as usize;
                delays[delay.min(DELAY_BUCKETS - 1)] += 1;
            }
        }
        pending.drain(..start);
    }
    (events, delays)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The number that follows `key` in `block`, if any.
fn number_after(block: &[u8], key: &[u8]) -> Option<f64> {
    let at = find(block, key)? + key.len();
    let digits: Vec<u8> =
        block[at..].iter().copied().take_while(|b| b.is_ascii_digit() || *b == b'.').collect();
    std::str::from_utf8(&digits).ok()?.parse().ok()
}

fn unix_ms() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64() * 1000.0
}

/// The resident memory of process `pid`, or of this one.
fn rss_mib(pid: Option<u32>) -> f64 {
    let path = pid.map_or("/proc/self/status".to_owned(), |pid| format!("/proc/{pid}/status"));
    let status = std::fs::read_to_string(path).unwrap_or_default();
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN);
    kib / 1024.0
}
