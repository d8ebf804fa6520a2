//! `retrylab compare`: the same comparison as the `/compare` page, without a browser. It starts
//! its own server on a free loopback port with a temporary store, asks it for the comparison
//! over HTTP as the page would, shows progress on stderr while it runs, and prints the table
//! (or JSON) when every policy has drained.

use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::compare::ROWS;
use crate::compare::presets;
use crate::compare::scenario::Scenario;
use crate::config::{CompareArgs, Config};
use crate::export::{Library, read_policy};
use crate::server::serve;

/// Why `retrylab compare` stopped, in one line for the person.
#[derive(Debug)]
pub enum Failure {
    /// Input it cannot use (an unknown preset, a defence that does not parse, a request its
    /// server refused as unusable): a usage error, exit status 2 as clap's own.
    Usage(String),
    /// The comparison could not run or finish: exit status 1.
    Failed(String),
}

impl Failure {
    pub fn exit_status(&self) -> i32 {
        match self {
            Failure::Usage(_) => 2,
            Failure::Failed(_) => 1,
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Usage(line) | Failure::Failed(line) => f.write_str(line),
        }
    }
}

impl From<String> for Failure {
    fn from(line: String) -> Self {
        Failure::Failed(line)
    }
}

/// Runs a comparison from the command line; the error is what to tell the person.
pub async fn run(args: CompareArgs) -> Result<(), Failure> {
    Scenario::parse(&args.scenario).map_err(Failure::Usage)?;
    let policies: Vec<Value> =
        args.policies.iter().map(|p| policy(p)).collect::<Result<_, _>>().map_err(Failure::Usage)?;
    let names = policies.iter().map(|p| p.as_str().or_else(|| p["name"].as_str()).unwrap_or_default());
    if let Some(name) = crate::compare::duplicate_name(names) {
        return Err(Failure::Usage(crate::compare::duplicate_refusal(name)));
    }
    let defences: Vec<Value> =
        args.defences.iter().map(|d| defence(d)).collect::<Result<_, _>>().map_err(Failure::Usage)?;
    let dir = std::env::temp_dir().join(format!("retrylab-compare-{}", uuid::Uuid::new_v4()));
    let result = compare(&args, policies, defences, &dir).await;
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// A named defence, `NAME=JSON`, or `{"name": ..., "defences": {...}}`: a row of the grid as
/// the request takes it. Its settings are checked by the server, which names a bad field.
fn defence(raw: &str) -> Result<Value, String> {
    let trimmed = raw.trim_start();
    if trimmed.starts_with('{') {
        let row: Value = serde_json::from_str(raw).map_err(|e| format!("--defence {raw}: not JSON: {e}"))?;
        if !row["name"].is_string() || !row["defences"].is_object() {
            return Err(format!(
                "--defence {raw}: a defence as JSON is {{\"name\": \"...\", \"defences\": {{...}}}}"
            ));
        }
        return Ok(row);
    }
    if let Some((name, settings)) = raw.split_once('=') {
        let settings: Value = serde_json::from_str(settings)
            .map_err(|e| format!("--defence {raw}: not JSON after '=': {e}"))?;
        return Ok(json!({"name": name, "defences": settings}));
    }
    let named = crate::compare::defences::find(raw).map_err(|e| format!("--defence {raw}: {e}"))?;
    serde_json::to_value(named).map_err(|e| e.to_string())
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
    presets::changes(raw)?;
    Ok(json!(raw))
}

async fn compare(
    args: &CompareArgs,
    policies: Vec<Value>,
    defences: Vec<Value>,
    dir: &std::path::Path,
) -> Result<(), Failure> {
    let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .map_err(|e| format!("cannot listen on loopback: {e}"))?;
    let base = format!("http://{}", listener.local_addr().map_err(|e| e.to_string())?);
    let mut config = Config::new(dir.join("compare.db"));
    config.limits.control_rate_per_s = 1_000;
    // This server is the command's own and serves one comparison: every lab it asks for is its.
    config.limits.lab_create_burst = u32::MAX;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(listener, config, async {
        let _ = stopped.await;
    }));
    let http = reqwest::Client::builder().no_proxy().tls_certs_only([]).build().map_err(|e| e.to_string())?;
    let mut request = json!({"scenario": args.scenario, "burst": args.burst, "seed": args.seed, "runs": args.runs, "late_threshold_ms": args.late_threshold_ms, "policies": policies});
    if !defences.is_empty() {
        request["defences"] = json!(defences);
    }
    let created = http
        .post(format!("{base}/api/comparisons"))
        .json(&request)
        .send()
        .await
        .map_err(|e| format!("the comparison's server did not answer: {e}"))?;
    let status = created.status();
    let created: Value = created.json().await.map_err(|e| e.to_string())?;
    if !status.is_success() {
        let detail = created["detail"].as_str().unwrap_or("the comparison was refused").to_owned();
        // A request it cannot use is the person's input to fix, as a flag clap refuses is.
        let line = match created["field"].as_str() {
            Some(field) if !detail.starts_with(field) => format!("{field}: {detail}"),
            _ => detail,
        };
        return Err(if status == reqwest::StatusCode::UNPROCESSABLE_ENTITY {
            Failure::Usage(line)
        } else {
            Failure::Failed(line)
        });
    }
    let url = format!("{base}/api/comparisons/{}", created["id"].as_str().unwrap_or_default());
    let started = Instant::now();
    let limit = Duration::from_secs(args.time_limit_s);
    let mut progress = Progress::new(args.quiet);
    let report = loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let report: Value = http
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
            return Err(Failure::Failed(format!(
                "the comparison did not finish within {} s (--time-limit-s); try a smaller --burst or fewer --runs",
                args.time_limit_s
            )));
        }
    };
    progress.end();
    let _ = stop.send(());
    let _ = server.await;
    let mut out = std::io::stdout();
    let printed = if args.json {
        serde_json::to_string_pretty(&report).map(|j| j + "\n")
    } else if report["grid"].is_object() {
        Ok(grid(&report))
    } else {
        Ok(table(&report))
    };
    let _ = out.write_all(printed.map_err(|e| e.to_string())?.as_bytes());
    // The table says it too; on stderr it stands out, unless asked to be quiet.
    if let (Some(warning), false) = (report["warning"].as_str(), args.quiet) {
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

/// The run going now, and each of its policies' settled messages so far.
fn progress_line(report: &Value) -> String {
    let columns = report["columns"].as_array().cloned().unwrap_or_default();
    let runs = report["runs"].as_u64().unwrap_or(1);
    // The first run not finished (a run again, once the machine kept it late); the last once
    // all are.
    let going = columns.iter().find(|c| c["done"] != true).or(columns.last());
    let run = going.and_then(|c| c["run"].as_u64()).unwrap_or(0);
    let attempt = going.and_then(|c| c["attempt"].as_u64()).unwrap_or(0);
    let parts: Vec<String> = columns
        .iter()
        .filter(|c| c["run"].as_u64() == Some(run) && c["attempt"].as_u64() == Some(attempt))
        .map(|c| {
            let f = &c["figures"];
            let settled = f["delivered"].as_u64().unwrap_or(0) + f["dead_letter"].as_u64().unwrap_or(0);
            let of = if report["scenario"] == "metastable" {
                f["messages"].clone()
            } else {
                report["burst"].clone()
            };
            let policy = c["policy"].as_str().unwrap_or("?");
            match c["defence"].as_str() {
                Some(defence) => format!("{defence}/{policy} {settled}/{of}"),
                None => format!("{policy} {settled}/{of}"),
            }
        })
        .collect();
    let again =
        if attempt > 0 { format!(" (again, as it ran late: try {})", attempt + 1) } else { String::new() };
    format!("run {} of {runs}{again}: {}", run + 1, parts.join("  "))
}

/// The table: a row per figure the scenario has, a column per policy, each cell the median of
/// the valid runs with the least and the most in brackets. The key figures' rows come first,
/// marked `>`, and only they carry the verdict: `*` on each policy judged best.
fn table(report: &Value) -> String {
    let policies = report["policies"].as_array().cloned().unwrap_or_default();
    let names: Vec<&str> = policies.iter().map(|p| p["name"].as_str().unwrap_or("?")).collect();
    let runs = report["runs"].as_u64().unwrap_or(1);
    let load = if report["scenario"] == "metastable" {
        "steady traffic".to_owned()
    } else {
        format!("burst {}", report["burst"])
    };
    let strings = |v: &Value| -> Vec<String> {
        v.as_array().into_iter().flatten().filter_map(|s| s.as_str().map(str::to_owned)).collect()
    };
    let key = strings(&report["key_figure"]);
    let best = strings(&report["verdict"]["best"]);
    let same = strings(&report["same_for_all"]);
    let mut lines = vec![format!(
        "{} scenario, {load}, seed {}, {runs} run{} of each policy (median [least-most] of the valid runs)",
        report["scenario"].as_str().unwrap_or("?"),
        report["seed"],
        if runs == 1 { "" } else { "s" },
    )];
    let cell = |policy: &Value, row: &str| -> String {
        let median = &policy["median"][row];
        if median.is_null() {
            return "-".into();
        }
        let range = &policy["range"][row];
        if range[0] == range[1] {
            number(median)
        } else {
            format!("{} [{}-{}]", number(median), number(&range[0]), number(&range[1]))
        }
    };
    // Key figures first; then every figure some policy has a value for.
    let rows: Vec<&str> = key
        .iter()
        .map(String::as_str)
        .chain(ROWS.iter().copied().filter(|row| !key.iter().any(|k| k == row)))
        .filter(|row| policies.iter().any(|p| !p["median"][*row].is_null()))
        .collect();
    let width = policies
        .iter()
        .flat_map(|p| rows.iter().map(move |row| cell(p, row).len() + 1))
        .chain(names.iter().map(|n| n.len()))
        .max()
        .unwrap_or(0)
        .max(10)
        + 3;
    let label = |row: &str| {
        let mark = if key.iter().any(|k| k == row) { "> " } else { "  " };
        let same = if same.iter().any(|s| s == row) { " (same for all)" } else { "" };
        format!("{mark}{row}{same}")
    };
    let label_width = rows.iter().map(|r| label(r).len()).max().unwrap_or(0) + 2;
    let mut header = format!("{:<label_width$}", "");
    for name in &names {
        header += &format!("{name:>width$}");
    }
    lines.push(header);
    for row in &rows {
        let mut line = format!("{:<label_width$}", label(row));
        let keyed = key.iter().any(|k| k == row);
        for (policy, name) in policies.iter().zip(&names) {
            let mark = if keyed && best.iter().any(|b| b == name) { "*" } else { " " };
            line += &format!("{:>width$}", format!("{}{mark}", cell(policy, row)));
        }
        lines.push(line);
    }
    let verdict = &report["verdict"];
    lines.push(format!(
        "> the key figure{}: {}; * judged best by the {}",
        if key.len() == 1 { "" } else { "s, judged in order" },
        key.join(", then "),
        verdict["test"].as_str().unwrap_or("test"),
    ));
    lines.push(format!("verdict: {}", verdict["result"].as_str().unwrap_or("-")));
    if let Some(why) = report["tie_reason"].as_str() {
        lines.push(format!("why they tie: {why}"));
    }
    lines.extend(take_home(&policies, &best));
    if let Some(line) = failure_ended(&policies) {
        lines.push(line);
    }
    if runs < verdict["runs_needed"].as_u64().unwrap_or(0) {
        lines.push(format!(
            "runs needed for a verdict: {} of each policy (--runs {})",
            verdict["runs_needed"], verdict["runs_needed"]
        ));
    }
    match report["lateness_ms_p99"].as_f64() {
        Some(late) => lines.push(format!(
            "machine load: the valid runs ran {late:.1} ms behind schedule (p99; a run past {} ms is left out)",
            report["late_threshold_ms"]
        )),
        None => lines.push("machine load: not measured".into()),
    }
    if let Some(warning) = report["warning"].as_str() {
        lines.push(format!("warning: {warning}"));
    }
    lines.join("\n") + "\n"
}
/// For each policy judged best, the command that carries it home as a library's client
/// (`retrylab export`), as the comparison page's "take it home" does: by its preset's name where
/// the column ran the preset as it stands, else as the column's settings in JSON, the run's seed
/// left out.
fn take_home(policies: &[Value], best: &[String]) -> Vec<String> {
    let libraries: Vec<&str> = Library::ALL.iter().map(|l| l.id()).collect();
    let command = |name: &String| {
        let column = policies.iter().find(|p| p["name"] == name.as_str())?;
        let mut settings = column["policy"].clone();
        settings.as_object_mut()?.remove("seed");
        let json = serde_json::to_string(&settings).ok()?;
        let as_preset = matches!((read_policy(name), read_policy(&json)), (Ok(a), Ok(b)) if a == b);
        let policy = if as_preset { name.clone() } else { format!("'{json}'") };
        Some(format!(
            "take {name} home: retrylab export --policy {policy} --library LIB (LIB: {})",
            libraries.join(", ")
        ))
    };
    best.iter().filter_map(command).collect()
}

/// The grid: a row per defence, a column per policy, each cell the median [least-most] of the
/// scenario's key figure over the cell's valid runs (on metastable, marked when the cell ended
/// the failure). No cell is marked best: each row's verdict is among its policies alone.
fn grid(report: &Value) -> String {
    let grid = &report["grid"];
    let key = report["key_figure"][0].as_str().unwrap_or("?");
    let names: Vec<&str> =
        grid["policies"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    let rows = grid["rows"].as_array().cloned().unwrap_or_default();
    let cells = grid["cells"].as_array().cloned().unwrap_or_default();
    let runs = report["runs"].as_u64().unwrap_or(1);
    let load = if report["scenario"] == "metastable" {
        "steady traffic".to_owned()
    } else {
        format!("burst {}", report["burst"])
    };
    let mut lines = vec![
        format!(
            "{} scenario, {load}, seed {}, {runs} run{} of each cell",
            report["scenario"].as_str().unwrap_or("?"),
            report["seed"],
            if runs == 1 { "" } else { "s" },
        ),
        format!("{key}: median [least-most] of the valid runs, a row per defence, a column per policy"),
    ];
    let cell = |defence: &str, policy: &str| -> String {
        let Some(cell) = cells.iter().find(|c| c["defence"] == defence && c["policy"] == policy) else {
            return "-".into();
        };
        let (median, range) = (&cell["median"][key], &cell["range"][key]);
        let shown = if median.is_null() {
            "-".to_owned()
        } else if range[0] == range[1] {
            number(median)
        } else {
            format!("{} [{}-{}]", number(median), number(&range[0]), number(&range[1]))
        };
        match cell["ends_failure"].as_bool() {
            Some(true) => format!("{shown} ended"),
            Some(false) => format!("{shown} stuck"),
            None => shown,
        }
    };
    let row_names: Vec<&str> = rows.iter().filter_map(|r| r["name"].as_str()).collect();
    let width = row_names
        .iter()
        .flat_map(|d| names.iter().map(move |p| cell(d, p).len()))
        .chain(names.iter().map(|n| n.len()))
        .max()
        .unwrap_or(0)
        .max(10)
        + 3;
    let label_width = row_names.iter().map(|n| n.len()).max().unwrap_or(0).max("defence".len()) + 2;
    let mut header = format!("{:<label_width$}", "defence");
    for name in &names {
        header += &format!("{name:>width$}");
    }
    lines.push(header);
    for defence in &row_names {
        let mut line = format!("{defence:<label_width$}");
        for policy in &names {
            line += &format!("{:>width$}", cell(defence, policy));
        }
        lines.push(line);
    }
    if cells.iter().any(|c| c["ends_failure"].is_boolean()) {
        lines.push(
            "ended / stuck: half or more of the new messages of the 10 s after the trigger delivered, or not"
                .into(),
        );
    }
    for row in &rows {
        if let Some(result) = row["verdict"]["result"].as_str() {
            let best = strings(&row["verdict"]["best"]);
            let best = if best.is_empty() { String::new() } else { format!("best {} — ", best.join(", ")) };
            lines.push(format!("verdict within {}: {best}{result}", row["name"].as_str().unwrap_or("?")));
        }
    }
    lines.push(format!("no best cell: {}", grid["judged"].as_str().unwrap_or("")));
    if let Some(warning) = report["warning"].as_str() {
        lines.push(format!("warning: {warning}"));
    }
    lines.join("\n") + "\n"
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array().into_iter().flatten().filter_map(|s| s.as_str().map(str::to_owned)).collect()
}

/// On a scenario with a trigger, which policies ended the failure and which did not (each
/// policy's `ends_failure`, from its median goodput after the trigger).
fn failure_ended(policies: &[Value]) -> Option<String> {
    let which = |ended: bool| -> Vec<&str> {
        let names = policies.iter().filter(|p| p["ends_failure"].as_bool() == Some(ended));
        names.map(|p| p["name"].as_str().unwrap_or("?")).collect()
    };
    let (ended, stuck) = (which(true), which(false));
    if ended.is_empty() && stuck.is_empty() {
        return None;
    }
    let list = |names: Vec<&str>| if names.is_empty() { "none of them".to_owned() } else { names.join(", ") };
    Some(format!(
        "ended the failure (half or more of the new messages delivered in the 10 s after the trigger): {}; \
         left it stuck: {}",
        list(ended),
        list(stuck)
    ))
}

/// A figure as shown: whole numbers without decimals, others with up to two.
fn number(value: &Value) -> String {
    match value.as_f64() {
        Some(x) if x.fract() == 0.0 => format!("{x:.0}"),
        Some(x) => format!("{}", (x * 100.0).round() / 100.0),
        None => "-".into(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_grid_prints_a_row_per_defence_a_column_per_policy_and_no_best_cell() {
        let cell = |defence: &str, policy: &str, median: f64, range: [f64; 2], ended: bool| {
            json!({"defence": defence, "policy": policy, "median": {"goodput_after_trigger": median},
                "range": {"goodput_after_trigger": range}, "ends_failure": ended})
        };
        let report = json!({
            "scenario": "metastable", "seed": 1, "runs": 2, "burst": 100,
            "key_figure": ["goodput_after_trigger"],
            "grid": {
                "policies": ["no-jitter", "budget"],
                "rows": [
                    {"name": "none", "verdict": {"best": [], "result": "no verdict: too few runs"}},
                    {"name": "codel", "verdict": {"best": [], "result": "no verdict: too few runs"}}
                ],
                "cells": [
                    cell("none", "no-jitter", 0.1, [0.05, 0.15], false),
                    cell("none", "budget", 0.9, [0.9, 0.9], true),
                    cell("codel", "no-jitter", 0.85, [0.8, 0.9], true),
                    cell("codel", "budget", 0.95, [0.9, 1.0], true)
                ],
                "judged": "no test is run across rows"
            }
        });
        let printed = grid(&report);
        let lines: Vec<&str> = printed.lines().collect();
        assert!(lines[0].starts_with("metastable scenario, steady traffic, seed 1, 2 runs of each cell"));
        assert!(
            lines[2].starts_with("defence") && lines[2].contains("no-jitter") && lines[2].contains("budget")
        );
        let none = lines.iter().find(|l| l.starts_with("none ")).unwrap();
        assert!(none.contains("0.1 [0.05-0.15] stuck") && none.contains("0.9 ended"), "{none}");
        let codel = lines.iter().find(|l| l.starts_with("codel ")).unwrap();
        assert!(codel.contains("0.85 [0.8-0.9] ended") && codel.contains("0.95 [0.9-1] ended"), "{codel}");
        assert!(printed.contains("verdict within codel: no verdict"), "{printed}");
        assert!(printed.contains("no best cell: no test is run across rows"), "{printed}");
        assert!(!printed.contains('*'), "no cell marked best: {printed}");
    }

    #[test]
    fn a_defence_is_a_name_a_named_json_or_a_json_row() {
        assert_eq!(defence("codel").unwrap()["defences"]["queue"], "codel");
        let named = defence(r#"mine={"deadline": true}"#).unwrap();
        assert_eq!(named, json!({"name": "mine", "defences": {"deadline": true}}));
        let row = defence(r#"{"name": "q", "defences": {"queue": "lifo"}}"#).unwrap();
        assert_eq!(row["name"], "q");
        assert!(defence("moat").unwrap_err().contains("none, deadline, codel"));
        assert!(
            defence(r#"{"queue": "lifo"}"#).unwrap_err().contains(r#"{"name": "...", "defences": {...}}"#)
        );
    }

    #[test]
    fn the_table_says_which_policies_ended_the_failure_only_where_it_was_asked() {
        let policies = [
            json!({"name": "none", "ends_failure": false}),
            json!({"name": "budget", "ends_failure": true}),
            json!({"name": "grpc", "ends_failure": true}),
        ];
        assert_eq!(
            failure_ended(&policies).unwrap(),
            "ended the failure (half or more of the new messages delivered in the 10 s after the trigger): \
             budget, grpc; left it stuck: none"
        );
        let stuck = [json!({"name": "none", "ends_failure": false})];
        assert!(failure_ended(&stuck).unwrap().ends_with(": none of them; left it stuck: none"));
        let outage = [json!({"name": "none", "ends_failure": null}), json!({"name": "full"})];
        assert_eq!(failure_ended(&outage), None);
    }

    /// A policy judged best is carried home by name when its column ran the preset as it stands,
    /// and as its settings otherwise; the command runs as printed (the policy reads back).
    #[test]
    fn each_policy_judged_best_is_offered_home_as_a_command_that_runs() {
        let preset = serde_json::to_value(read_policy("full-jitter").unwrap()).unwrap();
        let mut tuned = preset.clone();
        tuned["base_ms"] = json!(50);
        tuned["seed"] = json!(7);
        let policies = [
            json!({"name": "full-jitter", "policy": preset}),
            json!({"name": "mine", "policy": tuned}),
            json!({"name": "no-jitter", "policy": serde_json::to_value(read_policy("no-jitter").unwrap()).unwrap()}),
        ];
        let said = take_home(&policies, &["full-jitter".to_owned(), "mine".to_owned()]);
        assert_eq!(said.len(), 2, "{said:?}");
        assert!(said[0].starts_with(
            "take full-jitter home: retrylab export --policy full-jitter --library LIB (LIB: urllib3,"
        ));
        let json = said[1].split('\'').nth(1).unwrap();
        assert!(said[1].starts_with("take mine home: retrylab export --policy '{"), "{}", said[1]);
        let read = read_policy(json).unwrap();
        assert_eq!((read.base_ms, read.seed), (50, None), "the settings, the run's seed left out");
        assert!(take_home(&policies, &[]).is_empty());
        // The table prints it under the verdict.
        let report = json!({
            "scenario": "overload", "seed": 1, "runs": 5, "burst": 30, "key_figure": ["requests_per_delivered"],
            "policies": policies, "verdict": {"best": ["full-jitter"], "result": "best on requests_per_delivered"},
        });
        let printed = table(&report);
        let after = printed.split("verdict: best").nth(1).unwrap_or_default();
        assert!(after.contains("take full-jitter home: retrylab export --policy full-jitter"), "{printed}");
        assert!(!printed.contains("take mine home"), "{printed}");
    }
}
