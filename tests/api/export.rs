//! A lab policy carried home: `GET /api/policies/export` and `retrylab export`, their answers
//! and their refusals, and the Done-when of the issue: `full-jitter` exported to tenacity and
//! to got runs under `retrylab grade` on the real library (the conformance matrix's pins) and
//! gets a card that honours `Retry-After`, backs off, reuses its keys and keeps the policy's
//! attempt limit. Under `CI=1` the runtimes must be here; elsewhere a missing one is skipped,
//! and said so.

use std::path::{Path, PathBuf};
use std::process::Command;

use reqwest::{Method, StatusCode};
use serde_json::Value;

use crate::helpers::TestApp;

#[tokio::test]
async fn a_policy_exports_as_json_and_unknown_names_are_422_naming_the_field() {
    let app = TestApp::spawn().await;
    let (status, export) =
        app.call(Method::GET, "/api/policies/export?policy=full-jitter&library=tenacity", None).await;
    assert_eq!(status, StatusCode::OK, "{export}");
    assert_eq!(
        (&export["library"], &export["version"], &export["language"]),
        (&"tenacity".into(), &"9.1.2".into(), &"python".into())
    );
    assert_eq!(
        (&export["settings"]["jitter"], &export["settings"]["max_attempts"]),
        (&"full".into(), &4.into())
    );
    let code = export["code"].as_str().unwrap();
    for part in [
        "RETRYLAB_URL",
        "Idempotency-Key",
        "from tenacity import",
        "wait=lab_wait",
        "MAX_ATTEMPTS = 4",
        "\"jitter\": \"full\"",
    ] {
        assert!(code.contains(part), "the program has {part}: {code}");
    }
    assert_eq!(export["unsupported"], serde_json::json!([]));

    // A policy as JSON, with a breaker the library has not: said, and what the program does.
    let custom =
        r#"{"base_ms": 100, "breaker": {"failure_threshold": 5, "open_ms": 4000, "half_open_probes": 1}}"#;
    let path = format!("/api/policies/export?library=go-retryablehttp&policy={}", urlencode(custom));
    let (status, export) = app.call(Method::GET, &path, None).await;
    assert_eq!(status, StatusCode::OK, "{export}");
    assert_eq!(export["settings"]["base_ms"], 100);
    let said = export["unsupported"].as_array().unwrap();
    assert!(said.len() == 1 && said[0].as_str().unwrap().starts_with("circuit breaker"), "{said:?}");

    for (query, field) in [
        ("policy=full-jitter&library=requests", "library"),
        ("policy=full-jitter", "library"),
        ("policy=yolo&library=got", "policy"),
        ("library=got", "policy"),
        (
            &*format!("library=got&policy={}", urlencode(r#"{"base_ms": 9000, "cap_ms": 10}"#)),
            "policy.base_ms",
        ),
        (&*format!("library=got&policy={}", urlencode(r#"{"jitter": "wobbly"}"#)), "policy"),
    ] {
        let (status, problem) = app.call(Method::GET, &format!("/api/policies/export?{query}"), None).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{query}: {problem}");
        assert_eq!(problem["field"], field, "{query}: {problem}");
    }
}

fn urlencode(raw: &str) -> String {
    raw.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[test]
fn the_command_line_refuses_an_unknown_library_or_policy_in_one_line_with_exit_2() {
    for (args, field) in [(["full-jitter", "requests"], "library"), (["yolo", "got"], "policy")] {
        let output = Command::new(env!("CARGO_BIN_EXE_retrylab"))
            .args(["export", "--policy", args[0], "--library", args[1]])
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.starts_with(&format!("retrylab export: {field}: ")), "{stderr}");
        assert!(output.stdout.is_empty());
    }
}

/// `retrylab export` as printed: the program on stdout.
fn exported(policy: &str, library: &str) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_retrylab"))
        .args(["export", "--policy", policy, "--library", library])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap()
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The command that runs `library`'s program written into `folder`, or why it cannot run here.
fn runnable(library: &str, code: &str, folder: &Path) -> Result<Vec<String>, String> {
    if library == "got" {
        let modules = root().join("tests/conformance/node/node_modules");
        if !modules.join("got").exists() {
            return Err("no tests/conformance/node/node_modules (npm ci)".into());
        }
        // ES modules resolve packages from the file's own folder up: a link to the pinned ones.
        let link = folder.join("node_modules");
        if !link.exists() {
            std::os::unix::fs::symlink(&modules, &link).unwrap();
        }
        let file = folder.join("exported_got.mjs");
        std::fs::write(&file, code).unwrap();
        return Ok(vec!["node".into(), file.display().to_string()]);
    }
    let python = std::env::var_os("RETRYLAB_SNIPPET_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target/snippet-venv/bin/python"));
    let works =
        Command::new(&python).args(["-c", "import requests, tenacity"]).status().is_ok_and(|s| s.success());
    if !works {
        return Err("no Python with tenacity (.ci/run makes target/snippet-venv)".into());
    }
    let file = folder.join(format!("exported_{}.py", library.replace('-', "_")));
    std::fs::write(&file, code).unwrap();
    Ok(vec![python.display().to_string(), file.display().to_string()])
}

/// `retrylab grade --json` on `command`: its exit code and its one caller's card.
fn grade(command: &[String]) -> (Option<i32>, Value, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_retrylab"))
        .args(["grade", "--json", "--"])
        .args(command)
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
    let callers = report["callers"].as_array().cloned().unwrap_or_default();
    let card = if callers.len() == 1 { callers[0].clone() } else { Value::Null };
    (output.status.code(), card, String::from_utf8_lossy(&output.stderr).into_owned())
}

/// The most requests the card saw for one key ("at most 4 requests for one key ...").
fn most_requests(card: &Value) -> u64 {
    let evidence = card["checks"]["attempts_capped"]["evidence"].as_str().unwrap_or_default();
    let after = evidence.strip_prefix("at most ").unwrap_or_else(|| panic!("{evidence}"));
    after.split(' ').next().unwrap().parse().unwrap()
}

#[test]
fn full_jitter_exported_to_tenacity_and_got_passes_the_card_on_the_real_library() {
    let ci = std::env::var_os("CI").is_some();
    let folder = std::env::temp_dir().join(format!("retrylab-export-{}", std::process::id()));
    std::fs::create_dir_all(&folder).unwrap();
    // full-jitter as it is (Retry-After a floor), to both; and with the jitter above the
    // header, to tenacity, which shows the exported jitter survives a Retry-After too.
    let above = r#"{"jitter": "full", "retry_after_mode": "jitter_above"}"#;
    let cases = [("full-jitter", "tenacity"), ("full-jitter", "got"), (above, "tenacity")];
    let mut runs = Vec::new();
    for (n, (policy, library)) in cases.into_iter().enumerate() {
        let case = folder.join(n.to_string());
        std::fs::create_dir_all(&case).unwrap();
        match runnable(library, &exported(policy, library), &case) {
            Ok(command) => runs.push(((policy, library), std::thread::spawn(move || grade(&command)))),
            Err(why) if ci => panic!("CI=1: {library} must run here: {why}"),
            Err(why) => eprintln!("skipping {library}: {why}"),
        }
    }
    for ((policy, library), run) in runs {
        let (exit, card, stderr) = run.join().unwrap();
        let verdict = |check: &str| card["checks"][check]["verdict"].as_str().unwrap_or("missing").to_owned();
        let why =
            |check: &str| format!("{policy} as {library}: {check}: {}\n{stderr}", card["checks"][check]);
        for check in ["retry_after", "backoff", "key_reused", "attempts_capped"] {
            assert_eq!(verdict(check), "pass", "{}", why(check));
        }
        assert!(most_requests(&card) <= 4, "the policy's 4 attempts: {}", why("attempts_capped"));
        if policy == above {
            assert_eq!(verdict("jitter"), "pass", "{}", why("jitter"));
        } else {
            // As a floor, a Retry-After longer than the whole band is waited exactly: the card
            // says so (a warn), and it is the policy's own rule, not the export's.
            assert_eq!(verdict("jitter"), "warn", "{}", why("jitter"));
            let evidence = card["checks"]["jitter"]["evidence"].as_str().unwrap();
            assert!(evidence.starts_with("waits exactly the Retry-After"), "{}", why("jitter"));
        }
        assert_eq!(exit, Some(0), "{}", why("jitter"));
    }
    let _ = std::fs::remove_dir_all(&folder);
}
