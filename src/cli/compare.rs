//! `retrylab compare`: the same comparison as the `/compare` page, without a browser. It starts
//! its own server on a free loopback port with a temporary store, asks it for the comparison
//! over HTTP as the page would, shows progress on stderr while it runs, and prints the table
//! (or JSON) when every policy has drained.

use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::compare::ROWS;
use crate::compare::scenario::{self, Scenario};
use crate::config::{CompareArgs, Config};
use crate::server::serve;

/// Runs a comparison from the command line; the error is what to tell the person.
pub async fn run(args: CompareArgs) -> Result<(), String> {
    Scenario::parse(&args.scenario)?;
    let policies: Vec<Value> = args.policies.iter().map(|p| policy(p)).collect::<Result<_, _>>()?;
    let names = policies.iter().map(|p| p.as_str().or_else(|| p["name"].as_str()).unwrap_or_default());
    if let Some(name) = crate::compare::duplicate_name(names) {
        return Err(crate::compare::duplicate_refusal(name));
    }
    let dir = std::env::temp_dir().join(format!("retrylab-compare-{}", uuid::Uuid::new_v4()));
    let result = compare(&args, policies, &dir).await;
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// A preset's name, or a custom policy given as JSON.
fn policy(raw: &str) -> Result<Value, String> {
    if raw.trim_start().starts_with('{') {
        let custom: Value =
            serde_json::from_str(raw).map_err(|e| format!("--policy {raw}: not JSON: {e}"))?;
        if !custom["name"].is_string() || !custom["policy"].is_object() {
            return Err(format!(
                "--policy {raw}: a custom policy is {{\"name\": \"...\", \"policy\": {{...}}}}"
            ));
        }
        return Ok(custom);
    }
    scenario::preset(raw)?;
    Ok(json!(raw))
}

async fn compare(args: &CompareArgs, policies: Vec<Value>, dir: &std::path::Path) -> Result<(), String> {
    let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .map_err(|e| format!("cannot listen on loopback: {e}"))?;
    let base = format!("http://{}", listener.local_addr().map_err(|e| e.to_string())?);
    let mut config = Config::new(dir.join("compare.db"));
    config.limits.control_rate_per_s = 1_000;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(listener, config, async {
        let _ = stopped.await;
    }));
    let client = reqwest::Client::builder().no_proxy().build().map_err(|e| e.to_string())?;
    let request = json!({"scenario": args.scenario, "burst": args.burst, "seed": args.seed, "runs": args.runs, "policies": policies});
    let created = client
        .post(format!("{base}/api/comparisons"))
        .json(&request)
        .send()
        .await
        .map_err(|e| format!("the comparison's server did not answer: {e}"))?;
    let status = created.status();
    let created: Value = created.json().await.map_err(|e| e.to_string())?;
    if !status.is_success() {
        return Err(created["detail"].as_str().unwrap_or("the comparison was refused").to_owned());
    }
    let url = format!("{base}/api/comparisons/{}", created["id"].as_str().unwrap_or_default());
    let started = Instant::now();
    let limit = Duration::from_secs(args.time_limit_s);
    let mut progress = Progress::new(args.quiet);
    let report = loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let report: Value = client
            .get(&url)
            .send()
            .await
            .map_err(|e| e.to_string())?
            .json()
            .await
            .map_err(|e| e.to_string())?;
        progress.show(&report, started.elapsed());
        if report["done"] == true {
            break report;
        }
        if started.elapsed() > limit {
            progress.end();
            return Err(format!(
                "the comparison did not drain within {} s (--time-limit-s); try a smaller --burst",
                args.time_limit_s
            ));
        }
    };
    progress.end();
    let _ = stop.send(());
    let _ = server.await;
    let mut out = std::io::stdout();
    let printed = if args.json {
        serde_json::to_string_pretty(&rows(&report)).map(|j| j + "\n")
    } else {
        Ok(table(&report))
    };
    let _ = out.write_all(printed.map_err(|e| e.to_string())?.as_bytes());
    // The table says it too; on stderr it stands out, unless asked to be quiet.
    if let (Some(warning), false) = (report["machine"]["warning"].as_str(), args.quiet) {
        eprintln!("warning: {warning}");
    }
    Ok(())
}

/// Progress on stderr: on a terminal one line rewritten in place; elsewhere (a log, a pipe) a
/// plain line whenever the figures move and at least once a second; nothing with `--quiet`.
struct Progress {
    quiet: bool,
    terminal: bool,
    last: String,
    last_at: Option<Duration>,
    wrote: bool,
}

impl Progress {
    fn new(quiet: bool) -> Progress {
        Progress {
            quiet,
            terminal: std::io::stderr().is_terminal(),
            last: String::new(),
            last_at: None,
            wrote: false,
        }
    }

    fn show(&mut self, report: &Value, elapsed: Duration) {
        if self.quiet {
            return;
        }
        let line = progress_line(report);
        if self.terminal {
            eprint!("\r{:>5.1} s  {line}   ", elapsed.as_secs_f64());
        } else {
            let due = self.last_at.is_none_or(|at| elapsed.saturating_sub(at) >= Duration::from_secs(1));
            if line == self.last && !due {
                return;
            }
            eprintln!("{:>5.1} s  {line}", elapsed.as_secs_f64());
            self.last_at = Some(elapsed);
        }
        self.last = line;
        self.wrote = true;
    }

    /// Ends the line rewritten in place, if there is one.
    fn end(&self) {
        if self.terminal && self.wrote {
            eprintln!();
        }
    }
}

/// Each policy's settled messages so far.
fn progress_line(report: &Value) -> String {
    let columns = report["columns"].as_array().cloned().unwrap_or_default();
    let parts: Vec<String> = columns
        .iter()
        .map(|c| {
            let f = &c["figures"];
            let settled = f["delivered"].as_u64().unwrap_or(0) + f["dead_letter"].as_u64().unwrap_or(0);
            let of = if report["scenario"] == "metastable" {
                f["messages"].clone()
            } else {
                report["burst"].clone()
            };
            format!("{} {settled}/{of}", c["policy"].as_str().unwrap_or("?"))
        })
        .collect();
    parts.join("  ")
}

/// The JSON list: one object per policy (per run of a policy, with `--runs`), then, with
/// `--runs`, one per policy with each row's median, least and most.
fn rows(report: &Value) -> Vec<Value> {
    let columns = report["columns"].as_array().cloned().unwrap_or_default();
    let mut rows: Vec<Value> = columns
        .iter()
        .map(|c| {
            let f = &c["figures"];
            json!({
                "policy": c["policy"],
                "run": c["run"],
                "messages": f["messages"],
                "requests": f["requests"],
                "requests_per_delivered": f["requests_per_delivered"],
                "delivered": f["delivered"],
                "dead_letter": f["dead_letter"],
                "dead_letter_by_cause": f["dead_letter_by_cause"],
                "drain_ms": f["drain_ms"],
                "peak_requests_per_100ms": f["peak_requests_per_100ms"],
                "wasted": f["wasted"],
                "latency_p50_ms": f["latency_p50_ms"],
                "latency_p99_ms": f["latency_p99_ms"],
                "offered": f["offered"],
                "goodput_after_trigger": f["goodput_after_trigger"],
                "applied_twice": f["applied_twice"],
            })
        })
        .collect();
    if report["runs"].as_u64().unwrap_or(1) > 1 {
        for summary in report["policies"].as_array().into_iter().flatten() {
            rows.push(
                json!({"policy": summary["policy"], "runs": summary["runs"], "spread": summary["figures"]}),
            );
        }
    }
    rows
}

/// The table: a row per figure, a column per policy, the best of each row marked: `*` when it
/// beat the others beyond their ranges, `=` on each of the policies tied for it. With several
/// runs a cell is the median and, in brackets, the least and most.
fn table(report: &Value) -> String {
    let policies = report["policies"].as_array().cloned().unwrap_or_default();
    let names: Vec<&str> = policies.iter().map(|p| p["policy"].as_str().unwrap_or("?")).collect();
    let runs = report["runs"].as_u64().unwrap_or(1);
    let load = if report["scenario"] == "metastable" {
        "steady traffic".to_owned()
    } else {
        format!("burst {}", report["burst"])
    };
    let mut lines = vec![format!(
        "{} scenario, {load}, seed {}{}",
        report["scenario"].as_str().unwrap_or("?"),
        report["seed"],
        if runs > 1 { format!(", {runs} runs each (median [min-max])") } else { String::new() }
    )];
    let cell = |spread: &Value| -> String {
        if spread.is_null() {
            return "-".into();
        }
        let (median, min, max) = (number(&spread["median"]), number(&spread["min"]), number(&spread["max"]));
        if runs > 1 { format!("{median} [{min}-{max}]") } else { median }
    };
    let width = policies
        .iter()
        .flat_map(|p| ROWS.iter().map(move |(row, _)| cell(&p["figures"][row]).len()))
        .chain(names.iter().map(|n| n.len()))
        .max()
        .unwrap_or(0)
        .max(10)
        + 3;
    let mut header = format!("{:<26}", "");
    for name in &names {
        header += &format!("{name:>width$}");
    }
    lines.push(header);
    for (row, _) in ROWS {
        let best: Vec<&str> = report["best"][row]
            .as_array()
            .map(|b| b.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut line = format!("{row:<26}");
        for (policy, name) in policies.iter().zip(&names) {
            let mark = match () {
                _ if names.len() < 2 || !best.contains(name) => " ",
                _ if best.len() == 1 => "*",
                _ => "=",
            };
            line += &format!("{:>width$}", format!("{}{mark}", cell(&policy["figures"][row])));
        }
        lines.push(line);
    }
    lines.push(format!(
        "* best on that row, beyond the others' range and by more than {:.0} %; = tied for best",
        crate::compare::BEST_TOLERANCE * 100.0
    ));
    match report["machine"]["late_ms_p99"].as_f64() {
        Some(late) => {
            lines.push(format!("machine load: steps and arrivals {late:.1} ms behind schedule (p99)"))
        }
        None => lines.push("machine load: not measured".into()),
    }
    if let Some(warning) = report["machine"]["warning"].as_str() {
        lines.push(format!("warning: {warning}"));
    }
    lines.join("\n") + "\n"
}

/// A figure as shown: whole numbers without decimals, others with up to two.
fn number(value: &Value) -> String {
    match value.as_f64() {
        Some(x) if x.fract() == 0.0 => format!("{x:.0}"),
        Some(x) => format!("{}", (x * 100.0).round() / 100.0),
        None => "-".into(),
    }
}
