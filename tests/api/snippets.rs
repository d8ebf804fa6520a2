//! The snippets the page gives beside the endpoint's URL (`static/snippets.json`) run as
//! printed against a lab that is down for a moment: each retries with one key, honours the
//! `Retry-After`, and gets its write through once the lab is back. curl always; Python's when
//! a Python with urllib3 and tenacity is at hand (`RETRYLAB_SNIPPET_PYTHON`, which `.ci/run`
//! sets, or `target/snippet-venv`); Node's when `node` is on the PATH, Go's when `go` is (Debian's
//! `golang-go`, Go 1.19, which `.ci/run` installs: the snippet keeps to what Go 1.19 has). Under
//! `CI=1` every one must run.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use futures_util::future::join_all;
use serde_json::{Value, json};

use crate::helpers::TestApp;

fn snippets() -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("static/snippets.json");
    let file: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    file["snippets"].as_array().unwrap().clone()
}

fn python() -> Option<PathBuf> {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/snippet-venv/bin/python");
    let python =
        std::env::var_os("RETRYLAB_SNIPPET_PYTHON").map(PathBuf::from).or(venv.exists().then_some(venv))?;
    let works =
        Command::new(&python).args(["-c", "import urllib3, tenacity"]).status().is_ok_and(|s| s.success());
    works.then_some(python)
}

fn on_path(tool: &str) -> bool {
    Command::new(tool).arg("--version").output().is_ok_and(|o| o.status.success())
}

/// The command that runs a snippet's code, if the tool is here.
fn runner(lang: &str, python: &Option<PathBuf>) -> Option<(String, Vec<String>)> {
    match lang {
        "sh" => on_path("curl").then(|| ("sh".to_owned(), vec!["-c".to_owned()])),
        "python" => python.as_ref().map(|p| (p.display().to_string(), vec!["-c".to_owned()])),
        "js" => on_path("node")
            .then(|| ("node".to_owned(), vec!["--input-type=module".to_owned(), "-e".to_owned()])),
        // Go's is built first (`build_go`), then run with no arguments.
        "go" => Command::new("go")
            .arg("version")
            .output()
            .is_ok_and(|o| o.status.success())
            .then(|| ("go".to_owned(), Vec::new())),
        _ => None,
    }
}

/// Builds a Go program from `code` in a fresh folder; returns the program's path.
fn build_go(code: &str) -> String {
    // A folder of its own per build: tests build side by side.
    static BUILDS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let build = BUILDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let folder = std::env::temp_dir().join(format!("retrylab-go-snippet-{}-{build}", std::process::id()));
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(folder.join("main.go"), code).unwrap();
    let output =
        Command::new("go").args(["build", "-o", "snippet", "main.go"]).current_dir(&folder).output().unwrap();
    assert!(output.status.success(), "the Go snippet builds: {}", String::from_utf8_lossy(&output.stderr));
    folder.join("snippet").display().to_string()
}

/// A new lab for `snippet`, and the command that runs it as printed against that lab's endpoint:
/// the program and its arguments, the code last; a compiled one (Go) is built now, so that it
/// starts at once when its lab goes down. `None` when the snippet's tool is not here.
async fn prepare(app: &TestApp, snippet: &Value, python: &Option<PathBuf>) -> Option<(String, Vec<String>)> {
    let Some((program, args)) = runner(snippet["lang"].as_str().unwrap(), python) else {
        eprintln!("skipping the {} snippet: its tool is not here", snippet["id"]);
        return None;
    };
    let lab = app.new_lab().await;
    let code =
        snippet["code"].as_str().unwrap().replace("{URL}", &app.url(&format!("/labs/{lab}/downstream")));
    let command = if program == "go" {
        vec![tokio::task::spawn_blocking(move || build_go(&code)).await.unwrap()]
    } else {
        [vec![program], args, vec![code]].concat()
    };
    Some((lab, command))
}

#[tokio::test]
async fn each_snippet_runs_as_printed_retries_with_one_key_and_honours_retry_after() {
    let python = python();
    if std::env::var_os("CI").is_some() {
        assert!(python.is_some(), "CI=1: set RETRYLAB_SNIPPET_PYTHON to a Python with urllib3 and tenacity");
        for snippet in snippets() {
            let lang = snippet["lang"].as_str().unwrap();
            assert!(
                runner(lang, &python).is_some(),
                "CI=1: the {lang} snippet's tool must be here (.ci/run)"
            );
        }
    }
    let app = TestApp::spawn().await;
    let mut prepared = Vec::new();
    for snippet in snippets() {
        if let Some((lab, command)) = prepare(&app, &snippet, &python).await {
            prepared.push((snippet["id"].as_str().unwrap().to_owned(), lab, command));
        }
    }
    // Then every lab goes down at once and every snippet starts.
    let mut runs = Vec::new();
    for (id, lab, command) in prepared {
        app.put(&lab, "downstream", r#"{"mode": "down", "retry_after_s": 1, "for_ms": 1500}"#).await;
        runs.push(async move {
            let output = tokio::task::spawn_blocking(move || {
                Command::new(&command[0]).args(&command[1..]).output().unwrap()
            })
            .await
            .unwrap();
            (id, lab, output)
        });
    }
    assert!(!runs.is_empty(), "curl at least is here");
    for (id, lab, output) in join_all(runs).await {
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "{id}: {stdout}{}", String::from_utf8_lossy(&output.stderr));
        let snapshot = app.snapshot(&lab).await;
        let messages = snapshot["outside"]["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 1, "{id}: one key for every retry: {}", snapshot["outside"]);
        let attempts = messages[0]["attempts"].as_array().unwrap();
        assert!(attempts.len() >= 2, "{id} retried: {attempts:?}");
        assert_eq!(attempts.last().unwrap()["status"], 200, "{id} got through: {attempts:?}");
        let response = app.client.get(app.url(&format!("/api/labs/{lab}/callers"))).send().await.unwrap();
        let report: Value = response.json().await.unwrap();
        let card = &report["callers"][0];
        let names = [
            ("curl", "curl"),
            ("urllib3", "python-urllib3"),
            ("tenacity", "python-tenacity"),
            ("node", "node-fetch"),
            ("go", "go-net-http"),
        ];
        let name = names.iter().find(|(snippet, _)| *snippet == id).map(|(_, name)| *name);
        assert_eq!(card["name"].as_str(), name, "{id} names itself");
        assert_eq!(card["checks"]["retry_after"]["verdict"], "pass", "{id}: {card}");
        assert_eq!(card["checks"]["key_reused"]["verdict"], "pass", "{id}: {card}");
        // Each says how long it waits; those that retry in a loop of their own number their
        // tries, while curl and urllib3 send the same headers on every retry (their notes say so).
        assert_eq!(card["checks"]["deadline_sent"]["verdict"], "pass", "{id}: {card}");
        let numbered = if ["curl", "urllib3"].contains(&id.as_str()) { "warn" } else { "pass" };
        assert_eq!(card["checks"]["attempts_numbered"]["verdict"], numbered, "{id}: {card}");
        let said: Vec<&Value> = attempts.iter().map(|a| &a["previous_attempts"]).collect();
        if numbered == "pass" {
            let counted: Vec<Value> = (0..attempts.len()).map(|n| json!(n)).collect();
            assert_eq!(said, counted.iter().collect::<Vec<_>>(), "{id}");
        }
    }
}

/// The curl snippet run twice, as a person tries it: the first run retries through an outage
/// and gets through, the second is a separate request. Neither is a retry under a new key.
#[tokio::test]
async fn the_curl_snippet_run_twice_is_two_requests_each_retried_under_its_own_key() {
    if !on_path("curl") {
        eprintln!("skipping: curl is not here");
        return;
    }
    let app = TestApp::spawn().await;
    let lab = app.new_lab().await;
    let curl = snippets().into_iter().find(|s| s["id"] == "curl").unwrap();
    let code = curl["code"].as_str().unwrap().replace("{URL}", &app.url(&format!("/labs/{lab}/downstream")));
    app.put(&lab, "downstream", r#"{"mode": "down", "retry_after_s": 1, "for_ms": 1500}"#).await;
    for run in 1..=2 {
        let code = code.clone();
        let output =
            tokio::task::spawn_blocking(move || Command::new("sh").args(["-c", &code]).output().unwrap())
                .await
                .unwrap();
        assert!(output.status.success(), "run {run}: {}", String::from_utf8_lossy(&output.stderr));
    }
    let snapshot = app.snapshot(&lab).await;
    let messages = snapshot["outside"]["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2, "a key per run: {}", snapshot["outside"]);
    assert_ne!(messages[0]["digest"], messages[1]["digest"], "a body per run");
    let response = app.client.get(app.url(&format!("/api/labs/{lab}/callers"))).send().await.unwrap();
    let report: Value = response.json().await.unwrap();
    let checks = &report["callers"][0]["checks"];
    assert_eq!(checks["key_reused"]["verdict"], "pass", "{checks}");
    assert_eq!(checks["retry_after"]["verdict"], "pass", "{checks}");
    assert_eq!(checks["attempts_capped"]["verdict"], "pass", "{checks}");
}

/// `retrylab grade -- CMD` on each snippet at hand, eight copies side by side (one request is too
/// few to judge a backoff or a jitter), through an outage (`Retry-After: 1`) long enough for
/// two or three retries. tenacity's, Node's and Go's back off on top of the header and pass
/// "backs off" whatever their jitter draws, and fail nothing; their jitter passes, or could not
/// be judged when the copies' own start-up spreads their sends as much. curl's and urllib3's
/// wait the header exactly, as their notes say: "backs off" cannot pass (it is not judged: only
/// the header set their waits), they fail nothing, and "jitters" names it (waits exactly the
/// Retry-After, a warning). The code is run as printed,
/// with `{URL}` given to `grade` as its `{url}` (Go's reads `RETRYLAB_URL` instead: it is built
/// before `grade` starts it).
#[tokio::test]
async fn each_snippet_graded_by_retrylab_grade_fails_only_what_its_note_says_it_cannot_pass() {
    // Forty graded copies at once: not beside the other runs that time the machine.
    let _turn = crate::helpers::OPEN_SYSTEM_RUNS.lock().await;
    let python = python();
    let schedule = r#"[{"mode": "down", "retry_after_s": 1, "ms": 5000}, {"mode": "healthy"}]"#;
    let mut runs = Vec::new();
    for snippet in snippets() {
        let Some((program, args)) = runner(snippet["lang"].as_str().unwrap(), &python) else {
            eprintln!("skipping the {} snippet: its tool is not here", snippet["id"]);
            continue;
        };
        let (id, code) = (snippet["id"].as_str().unwrap().to_owned(), snippet["code"].as_str().unwrap());
        let command = if program == "go" {
            let code = code
                .replace("\"{URL}\"", "os.Getenv(\"RETRYLAB_URL\")")
                .replace("\"net/http\"", "\"net/http\"\n\t\"os\"");
            vec![tokio::task::spawn_blocking(move || build_go(&code)).await.unwrap()]
        } else {
            [vec![program], args, vec![code.replace("{URL}", "{url}")]].concat()
        };
        runs.push(tokio::task::spawn_blocking(move || {
            // Eight copies at once, under one grade: with five, a jitter of a quarter of the
            // backoff drew five waits within 2 % of their median about once in 60 runs.
            let copies = "for copy in 1 2 3 4 5 6 7 8; do \"$@\" & done; wait";
            let output = Command::new(env!("CARGO_BIN_EXE_retrylab"))
                .args(["grade", "--json", "--schedule", schedule, "--", "sh", "-c", copies, "sh"])
                .args(&command)
                .output()
                .unwrap();
            (id, output)
        }));
    }
    assert!(!runs.is_empty(), "curl at least is here");
    for run in runs {
        let (id, output) = run.await.unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        let card: Value = serde_json::from_slice(&output.stdout)
            .unwrap_or_else(|_| panic!("{id}: {}{stderr}", String::from_utf8_lossy(&output.stdout)));
        let checks = &card["callers"][0]["checks"];
        let failed: Vec<&str> = checks
            .as_object()
            .unwrap()
            .iter()
            .filter(|(_, check)| check["verdict"] == "fail")
            .map(|(name, _)| name.as_str())
            .collect();
        assert_eq!(card["callers"][0]["keys"], 8, "{id}: a key per copy: {checks}");
        let waits_the_header_exactly = ["curl", "urllib3"].contains(&id.as_str());
        let jitter = &checks["jitter"];
        if waits_the_header_exactly {
            // Only the header set its waits, so its own backoff is not seen: not judged, and
            // not passed either (a not_judged check fails the grade only with --strict).
            assert!(failed.is_empty(), "{id}: {checks}");
            assert_eq!(checks["backoff"]["verdict"], "not_judged", "{id}: {checks}");
            assert_eq!(output.status.code(), Some(0), "{id}: {stderr}");
            assert_eq!(jitter["verdict"], "warn", "{id}: {jitter}");
            assert!(
                jitter["evidence"].as_str().unwrap().starts_with("waits exactly the Retry-After"),
                "{id}: {jitter}"
            );
        } else {
            assert_eq!(checks["backoff"]["verdict"], "pass", "{id}: {checks}");
            assert_eq!(failed, Vec::<&str>::new(), "{id}: {checks}");
            assert_eq!(output.status.code(), Some(0), "{id}: {stderr}");
            assert!(["pass", "not_judged"].contains(&jitter["verdict"].as_str().unwrap()), "{id}: {jitter}");
        }
        assert_eq!(checks["retry_after"]["verdict"], "pass", "{id}: {checks}");
        assert_eq!(checks["key_reused"]["verdict"], "pass", "{id}: {checks}");
    }
}

/// The snippets that retry in a loop of their own honour a pushback: their retry, waiting in a
/// full line, is shed for a first attempt under the pushback defence and told
/// `X-Retry-Pushback-Ms: -1`, and they stop there with attempts left; their card says so.
#[tokio::test]
async fn the_looping_snippets_stop_when_told_not_to_retry() {
    let python = python();
    let app = std::sync::Arc::new(TestApp::spawn().await);
    let mut prepared = Vec::new();
    for snippet in snippets() {
        let id = snippet["id"].as_str().unwrap().to_owned();
        if !["tenacity", "node", "go"].contains(&id.as_str()) {
            continue;
        }
        if let Some((lab, command)) = prepare(&app, &snippet, &python).await {
            prepared.push((id, lab, command));
        }
    }
    assert!(!prepared.is_empty() || std::env::var_os("CI").is_none(), "CI has node and go at least");
    // A request of the test's own, with the count of attempts before it.
    let send = |app: std::sync::Arc<TestApp>, lab: String, key: &'static str| {
        tokio::spawn(async move {
            let response = app
                .client
                .post(app.url(&format!("/labs/{lab}/downstream")))
                .header("X-Client-Name", "the-test")
                .header("Idempotency-Key", key)
                .header("X-Previous-Attempts", "0")
                .json(&json!({}))
                .send()
                .await
                .unwrap();
            response.status().as_u16()
        })
    };
    let placed = |waiting: u64| {
        move |snapshot: &Value| snapshot["line"]["in_work"] == 1 && snapshot["line"]["waiting"] == waiting
    };
    let runs = prepared.into_iter().map(|(id, lab, command)| {
        let app = app.clone();
        async move {
            // Its first try meets an outage; by its retry (a second or more later, after the
            // Retry-After) one worker is busy for 3 s, and the retry waits in a line of one.
            app.put(&lab, "downstream", r#"{"mode": "down", "retry_after_s": 1}"#).await;
            let run = tokio::task::spawn_blocking(move || {
                Command::new(&command[0]).args(&command[1..]).output().unwrap()
            });
            let answered = |s: &Value| s["outside"]["messages"][0]["attempts"][0]["ended_ms"].is_u64();
            app.wait_for(&lab, Duration::from_secs(30), answered).await;
            let overloaded = json!({"mode": "overloaded", "capacity": 1, "queue": 1, "latency_ms": [3000, 3000],
                "defences": {"retries_first": true, "pushback": true}});
            app.put(&lab, "downstream", &overloaded.to_string()).await;
            let worker = send(app.clone(), lab.clone(), "worker");
            app.wait_for(&lab, Duration::from_secs(10), placed(0)).await;
            app.wait_for(&lab, Duration::from_secs(30), placed(1)).await;
            let first = send(app.clone(), lab.clone(), "first");
            let output = run.await.unwrap();
            (id, lab, output, [worker.await.unwrap(), first.await.unwrap()])
        }
    });
    for (id, lab, output, ours) in join_all(runs).await {
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{id}: {}{stderr}", String::from_utf8_lossy(&output.stdout));
        assert_eq!(ours, [200, 200], "{id}: the test's worker and first attempt were worked");
        let snapshot = app.snapshot(&lab).await;
        let theirs = snapshot["outside"]["messages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["caller"] != "the-test")
            .unwrap_or_else(|| panic!("{id}: {}", snapshot["outside"]));
        let attempts: Vec<(Value, Value, Value)> = theirs["attempts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| (a["status"].clone(), a["previous_attempts"].clone(), a["pushback_ms"].clone()))
            .collect();
        assert_eq!(
            attempts,
            [(json!(503), json!(0), Value::Null), (json!(503), json!(1), json!(-1))],
            "{id}: told not to retry on its second try, it sent no third"
        );
        let report: Value = app
            .client
            .get(app.url(&format!("/api/labs/{lab}/callers")))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let card =
            report["callers"].as_array().unwrap().iter().find(|c| c["name"] == theirs["caller"]).unwrap();
        let pushback = &card["checks"]["pushback_honoured"];
        assert_eq!(pushback["verdict"], "pass", "{id}: {pushback}");
        assert!(pushback["evidence"].as_str().unwrap().contains("was not sent again"), "{id}: {pushback}");
    }
}
