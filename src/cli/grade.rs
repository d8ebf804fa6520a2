//! `retrylab grade -- CMD [ARGS...]`: a report card for CI. It starts a lab of its own on a free
//! loopback port (as `compare` does), gives CMD the endpoint's URL (`RETRYLAB_URL`, and `{url}`
//! in ARGS), breaks the endpoint on a schedule while CMD runs, and when CMD exits prints the
//! card of every caller it saw (`GET /api/labs/{lab}/callers`, so `--json` is the API's own
//! answer). Exit status: 1 when a check failed (or CMD sent nothing), 0 otherwise, 2 on bad usage
//! or a CMD that does not start. A check that could not be judged (`not_judged`) is no pass and
//! is said on stderr, but fails the run only with `--strict`: unlike `check`, whose probes are
//! its own, here the evidence is CMD's traffic, and a CMD that sends one request can never show
//! a jitter; failing every such run would teach a CI to ignore the exit code.

use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::cli::check::xml;
use crate::cli::family::{self, Family};
use crate::config::{Config, GradeArgs};
use crate::server::serve;

/// The checks of a card, in the order the page shows them.
const CHECKS: [&str; 10] = [
    "retry_after",
    "backoff",
    "jitter",
    "attempts_capped",
    "key_reused",
    "no_retry_on_4xx",
    "timeouts",
    "deadline_sent",
    "attempts_numbered",
    "pushback_honoured",
];

/// One spell of the endpoint: its settings (as `PUT /api/labs/{lab}/downstream` takes them)
/// and how long it lasts; the last lasts until CMD exits.
#[derive(Debug, Clone)]
struct Phase {
    settings: Value,
    ms: Option<u64>,
}

/// Each phase gives some checks their evidence: an outage answering 503 with no `Retry-After`
/// (the client's own backoff and jitter show), then with `Retry-After: 1` and with
/// `Retry-After: 2` (a client that ignores the header cannot honour both by chance), a slow
/// spell answering past a client's timeout, then healthy. `docs/your-own-code.md` says each.
const STANDARD: &str = r#"[
    {"mode": "down", "retry_after_s": null, "ms": 3000},
    {"mode": "down", "retry_after_s": 1, "ms": 1500},
    {"mode": "down", "retry_after_s": 2, "ms": 2500},
    {"mode": "slow", "ms": 1500},
    {"mode": "healthy"}
]"#;

fn schedule(raw: &str) -> Result<Vec<Phase>, String> {
    let raw = match raw {
        "standard" => STANDARD,
        "healthy" => r#"[{"mode": "healthy"}]"#,
        other => other,
    };
    let phases: Vec<Value> = serde_json::from_str(raw).map_err(|_| {
        "--schedule is `standard`, `healthy`, or a JSON list of phases such as \
         [{\"mode\": \"down\", \"ms\": 1500}, {\"mode\": \"healthy\"}]"
            .to_owned()
    })?;
    if phases.is_empty() {
        return Err("--schedule needs at least one phase".into());
    }
    phases
        .into_iter()
        .map(|mut phase| {
            let Some(settings) = phase.as_object_mut() else {
                return Err(format!("--schedule: a phase is an object, not {phase}"));
            };
            let ms = match settings.remove("ms") {
                None => None,
                Some(ms) => {
                    Some(ms.as_u64().ok_or_else(|| format!("--schedule: \"ms\" is a number, not {ms}"))?)
                }
            };
            Ok(Phase { settings: phase, ms })
        })
        .collect()
}

/// What the process should exit with.
pub async fn run(args: GradeArgs) -> i32 {
    family::clean_after_killed(&std::env::temp_dir());
    let dir = std::env::temp_dir().join(format!("{}{}", family::FOLDER_PREFIX, uuid::Uuid::new_v4()));
    let code = match grade(&args, &dir).await {
        Ok(code) => code,
        Err(refused) => {
            eprintln!("retrylab grade: {refused}");
            2
        }
    };
    let _ = std::fs::remove_dir_all(&dir);
    code
}

async fn grade(args: &GradeArgs, dir: &std::path::Path) -> Result<i32, String> {
    let phases = schedule(&args.schedule)?;
    let Some((program, rest)) = args.command.split_first() else {
        return Err(
            "give the command to grade after --, e.g. retrylab grade -- python client.py {url}".into()
        );
    };
    let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .map_err(|e| format!("cannot listen on loopback: {e}"))?;
    let base = format!("http://{}", listener.local_addr().map_err(|e| e.to_string())?);
    let mut config = Config::new(dir.join("grade.db"));
    // One lab, one caller on loopback: the per-client limits would only get in its way.
    config.limits.control_rate_per_s = 1_000;
    config.limits.endpoint_rate_per_s = 100_000;
    config.limits.endpoint_burst = 100_000;
    // Each phase is set twice (tried before CMD starts, then in its turn): any schedule fits.
    let puts = u32::try_from(phases.len()).unwrap_or(u32::MAX).saturating_mul(2).saturating_add(10);
    config.limits.control_burst = config.limits.control_burst.max(puts);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(listener, config, async {
        let _ = stopped.await;
    }));
    let graded = graded(args, &base, &phases, program, rest, dir).await;
    let _ = stop.send(());
    let _ = server.await;
    graded
}

async fn graded(
    args: &GradeArgs,
    base: &str,
    phases: &[Phase],
    program: &str,
    rest: &[String],
    dir: &std::path::Path,
) -> Result<i32, String> {
    let http = reqwest::Client::builder().no_proxy().tls_certs_only([]).build().map_err(|e| e.to_string())?;
    let created = json_of(http.post(format!("{base}/api/labs"))).await?;
    let lab = created["id"].as_str().ok_or("the lab was not created")?.to_owned();
    let url = format!("{base}/labs/{lab}/downstream");
    let settings = format!("{base}/api/labs/{lab}/downstream");
    // Every phase is tried on the lab before CMD starts, so a bad one is refused before anything
    // runs; the first is the one left in force, before CMD sends anything.
    for phase in phases.iter().rev() {
        put(&http, &settings, &phase.settings).await?;
    }
    // CMD leads a process group of its own, and what leaves the group comes back to the grade
    // as an orphan: nothing of it outlives the grade, however it ends (past the time limit,
    // interrupted, or by itself); `family` says how, and what a killed grade leaves.
    Family::prepare(dir)?;
    let mut child = std::process::Command::new(program)
        .args(rest.iter().map(|a| a.replace("{url}", &url)))
        .env("RETRYLAB_URL", &url)
        .stdout(to_stderr())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot start {program}: {e}"))?;
    let mut family = Family::of(child.id(), dir);
    // Listening from now on: a signal that comes while a phase is being set is not lost.
    let interrupt = interrupted();
    tokio::pin!(interrupt);
    let started = Instant::now();
    let limit = Duration::from_secs(args.time_limit_s);
    let (mut phase, mut phase_started) = (0, Instant::now());
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            break Some(status);
        }
        family.note_now_and_then();
        if started.elapsed() > limit {
            family.kill_group();
            let _ = child.wait();
            break None;
        }
        if let Some(ms) = phases[phase].ms
            && phase + 1 < phases.len()
            && phase_started.elapsed() >= Duration::from_millis(ms)
        {
            phase += 1;
            phase_started = Instant::now();
            put(&http, &settings, &phases[phase].settings).await?;
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(20)) => {}
            signal = &mut interrupt => {
                family.kill_group();
                let _ = child.wait();
                return Err(format!("{signal}: stopped {program} and everything it started"));
            }
        }
    };
    // What CMD left running in the background goes with it.
    family.end();
    match status {
        None => {
            eprintln!("retrylab grade: {program} ran past --time-limit-s {}; stopped it", args.time_limit_s)
        }
        Some(status) if !status.success() => eprintln!("retrylab grade: {program} exited with {status}"),
        Some(_) => {}
    }
    let report = json_of(http.get(format!("{base}/api/labs/{lab}/callers"))).await?;
    let callers = report["callers"].as_array().cloned().unwrap_or_default();
    if let Some(path) = &args.junit {
        std::fs::write(path, junit(&callers, args.strict))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?);
    } else {
        print!("{}", table(&callers));
    }
    if callers.is_empty() {
        eprintln!("retrylab grade: {program} sent nothing to RETRYLAB_URL ({url})");
        return Ok(1);
    }
    let with = |verdict: &str| -> Vec<String> {
        callers
            .iter()
            .flat_map(|c| {
                CHECKS
                    .iter()
                    .filter(move |check| c["checks"][**check]["verdict"] == verdict)
                    .map(move |check| format!("{} {check}", c["name"].as_str().unwrap_or_default()))
            })
            .collect()
    };
    let (failed, unjudged) = (with("fail"), with("not_judged"));
    if !unjudged.is_empty() {
        eprintln!(
            "retrylab grade: could not judge {} (the evidence says why){}",
            unjudged.join(", "),
            if args.strict {
                "; --strict fails the run"
            } else {
                "; not a pass, and not a failure without --strict"
            }
        );
    }
    let failed = !failed.is_empty() || (args.strict && !unjudged.is_empty());
    Ok(if failed || status.is_none() { 1 } else { 0 })
}

/// The JSON answer to a request to the grade's own server.
async fn json_of(request: reqwest::RequestBuilder) -> Result<Value, String> {
    let answer = request.send().await.map_err(|e| format!("the lab's server did not answer: {e}"))?;
    answer.json().await.map_err(|e| format!("the lab's server did not answer JSON: {e}"))
}

/// CMD's own output goes to stderr, so that stdout holds only the card (and `--json` stays JSON).
fn to_stderr() -> std::process::Stdio {
    use std::os::fd::AsFd;
    std::io::stderr()
        .as_fd()
        .try_clone_to_owned()
        .map(std::process::Stdio::from)
        .unwrap_or_else(|_| std::process::Stdio::null())
}

async fn put(http: &reqwest::Client, url: &str, settings: &Value) -> Result<(), String> {
    let response = http.put(url).json(settings).send().await.map_err(|e| e.to_string())?;
    if response.status().is_success() {
        return Ok(());
    }
    let problem: Value = response.json().await.unwrap_or(json!({}));
    Err(format!(
        "--schedule: the phase {settings} was refused: {}",
        problem["detail"].as_str().unwrap_or("bad settings")
    ))
}

fn table(callers: &[Value]) -> String {
    let mut out = String::new();
    for caller in callers {
        out.push_str(&format!(
            "{}: {} keys, {} requests\n",
            caller["name"].as_str().unwrap_or_default(),
            caller["keys"],
            caller["requests"]
        ));
        // Each column as wide as its widest entry and two spaces, so no name runs into the next.
        let verdict =
            |check: &str| caller["checks"][check]["verdict"].as_str().unwrap_or_default().to_owned();
        let names = CHECKS.iter().map(|c| c.len()).max().unwrap_or(0) + 2;
        let verdicts = CHECKS.iter().map(|c| verdict(c).len()).max().unwrap_or(0) + 2;
        for check in CHECKS {
            let found = &caller["checks"][check];
            out.push_str(&format!(
                "  {check:<names$}{:<verdicts$}{}\n",
                verdict(check),
                found["evidence"].as_str().unwrap_or_default()
            ));
            if let Some(advice) = found["advice"].as_str() {
                out.push_str(&format!(
                    "  {:<width$}what to change: {advice}\n",
                    "",
                    width = names + verdicts
                ));
            }
        }
    }
    out
}

/// A test suite per caller, a test case per check: a fail is a failure, not_seen is skipped, and
/// not_judged is skipped too, or an error with `strict` (a CI must not read it as green then).
fn junit(callers: &[Value], strict: bool) -> String {
    let mut out =
        String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"retrylab grade\">\n");
    for caller in callers {
        let name = xml(caller["name"].as_str().unwrap_or_default());
        let verdict =
            |check: &str| caller["checks"][check]["verdict"].as_str().unwrap_or_default().to_owned();
        let count = |v: &str| CHECKS.iter().filter(|c| verdict(c) == v).count();
        let (failures, unjudged) = (count("fail"), count("not_judged"));
        let (skipped, errors) =
            if strict { (count("not_seen"), unjudged) } else { (count("not_seen") + unjudged, 0) };
        out.push_str(&format!(
            "  <testsuite name=\"{name}\" tests=\"{}\" failures=\"{failures}\" skipped=\"{skipped}\" errors=\"{errors}\">\n",
            CHECKS.len()
        ));
        for check in CHECKS {
            let found = &caller["checks"][check];
            let said = xml(&format!(
                "{}{}",
                found["evidence"].as_str().unwrap_or_default(),
                found["advice"].as_str().map(|a| format!(" (what to change: {a})")).unwrap_or_default()
            ));
            let body = match verdict(check).as_str() {
                "fail" => format!("<failure message=\"{said}\"/>"),
                "not_judged" if strict => format!("<error message=\"{said}\"/>"),
                "not_seen" | "not_judged" => format!("<skipped message=\"{said}\"/>"),
                other => format!("<system-out>{other}: {said}</system-out>"),
            };
            out.push_str(&format!(
                "    <testcase classname=\"retrylab.grade.{name}\" name=\"{check}\">{body}</testcase>\n"
            ));
        }
        out.push_str("  </testsuite>\n");
    }
    out.push_str("</testsuites>\n");
    out
}

/// Resolves when the grade itself is told to stop (Ctrl-C, or SIGTERM), naming the signal:
/// CMD's own group does not receive the terminal's Ctrl-C, so the grade passes it on.
async fn interrupted() -> &'static str {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => "interrupted",
        Some(()) = async { match terminate.as_mut() { Some(t) => t.recv().await, None => None } } => "terminated",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schedule_is_a_name_or_a_list_of_phases_with_their_lengths() {
        let standard = schedule("standard").unwrap();
        assert_eq!(standard.len(), 5);
        assert_eq!((standard[0].settings["mode"].as_str(), standard[0].ms), (Some("down"), Some(3000)));
        let headers: Vec<&Value> = standard[..3].iter().map(|p| &p.settings["retry_after_s"]).collect();
        assert_eq!(headers, [&Value::Null, &json!(1), &json!(2)], "none, then two different values");
        assert_eq!(standard[3].settings["mode"], "slow");
        assert_eq!(standard[4].ms, None);
        let mine = schedule(r#"[{"mode": "flaky", "ms": 500}, {"mode": "healthy"}]"#).unwrap();
        assert_eq!(mine[0].settings, json!({"mode": "flaky"}));
        assert!(schedule("[]").unwrap_err().contains("at least one"));
        assert!(schedule("stormy").unwrap_err().contains("--schedule is"));
        assert!(schedule(r#"[{"mode": "down", "ms": "long"}]"#).unwrap_err().contains("\"ms\""));
    }

    #[test]
    fn a_check_not_judged_is_skipped_in_junit_and_an_error_under_strict() {
        let checks: serde_json::Map<String, Value> = CHECKS
            .iter()
            .map(|c| {
                let verdict = if *c == "jitter" { "not_judged" } else { "pass" };
                (c.to_string(), json!({"verdict": verdict, "evidence": "could not judge: 3 keys"}))
            })
            .collect();
        let callers = [json!({"name": "one", "checks": checks})];
        let plain = junit(&callers, false);
        assert!(plain.contains("failures=\"0\" skipped=\"1\" errors=\"0\""), "{plain}");
        assert!(plain.contains("name=\"jitter\"><skipped message=\"could not judge: 3 keys\"/>"), "{plain}");
        let strict = junit(&callers, true);
        assert!(strict.contains("skipped=\"0\" errors=\"1\""), "{strict}");
        assert!(strict.contains("name=\"jitter\"><error message="), "{strict}");
    }
}
