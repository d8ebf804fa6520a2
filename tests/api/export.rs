//! A lab policy carried home: `GET /api/policies/export` and `retrylab export`, their answers
//! and their refusals, and the Done-when of the issue: `full-jitter` exported to each library
//! runs under `retrylab grade` on the real library (the conformance matrix's pins) and gets a
//! card that honours `Retry-After`, backs off, reuses its keys and keeps the policy's attempt
//! limit, and whose `jitter` is what the export's cautions said. Under `CI=1` the runtimes must
//! be here; elsewhere a missing one is skipped, and said so.

use std::path::{Path, PathBuf};
use std::process::Command;

use reqwest::{Method, StatusCode};
use serde_json::Value;

use crate::helpers::{OPEN_SYSTEM_RUNS, TestApp, grade};

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
    // Retry-After as a floor: the card will say the keys wait exactly the header; the mode that
    // draws the jitter past it takes the caution away.
    let cautions = export["cautions"].as_array().unwrap();
    assert!(cautions.len() == 1 && cautions[0].as_str().unwrap().starts_with("retry_after_mode floor"));
    let (status, above) = app
        .call(
            Method::GET,
            "/api/policies/export?policy=full-jitter&library=got&retry_after_mode=jitter_above",
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{above}");
    assert_eq!(
        (&above["settings"]["retry_after_mode"], &above["cautions"]),
        (&"jitter_above".into(), &serde_json::json!([]))
    );
    // The answer is what its OpenAPI schema describes.
    let spec: Value =
        app.client.get(app.url("/api/openapi.json")).send().await.unwrap().json().await.unwrap();
    let mut errors = Vec::new();
    crate::compare::breaks(&spec, &spec["components"]["schemas"]["Export"], &export, "", &mut errors);
    assert!(errors.is_empty(), "{errors:?}");

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
        ("policy=full-jitter&library=got&retry_after_mode=sometimes", "retry_after_mode"),
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
    for (args, field) in [
        (["full-jitter", "requests", "floor"], "library"),
        (["yolo", "got", "floor"], "policy"),
        (["full-jitter", "got", "sometimes"], "retry_after_mode"),
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_retrylab"))
            .args(["export", "--policy", args[0], "--library", args[1], "--retry-after-mode", args[2]])
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.starts_with(&format!("retrylab export: {field}: ")), "{stderr}");
        assert!(output.stdout.is_empty());
    }
    // The program on stdout; on stderr, the caution of what the card will mark down.
    let output = Command::new(env!("CARGO_BIN_EXE_retrylab"))
        .args(["export", "--policy", "full-jitter", "--library", "tenacity"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success() && !output.stdout.is_empty(), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("retrylab export: caution: retry_after_mode floor: "), "{stderr}");
}

/// `retrylab export` as printed: the program on stdout.
fn exported(policy: &str, library: &str) -> String {
    exported_with(policy, library, &[])
}

/// `retrylab export` with more arguments (`--json`, `--retry-after-mode MODE`): its stdout.
fn exported_with(policy: &str, library: &str, more: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_retrylab"))
        .args(["export", "--policy", policy, "--library", library])
        .args(more)
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

/// The most requests the card saw for one key ("at most 4 requests for one key ...").
fn most_requests(card: &Value) -> u64 {
    let evidence = card["checks"]["attempts_capped"]["evidence"].as_str().unwrap_or_default();
    let after = evidence.strip_prefix("at most ").unwrap_or_else(|| panic!("{evidence}"));
    after.split(' ').next().unwrap().parse().unwrap()
}

/// The issue's Done-when, and each export's cautions held to the card: `full-jitter` as it is
/// (`Retry-After` a floor) and with `--retry-after-mode jitter_above`, exported to each of the
/// seven libraries and graded on the real library, three programs at a time. Every check but
/// `jitter` passes either way, within the policy's 4 attempts; `jitter` warns "waits exactly the
/// Retry-After" where the export's one caution said it would, and passes where it gave none.
#[test]
fn full_jitter_exported_to_each_library_gets_the_card_its_cautions_say() {
    // Real clients measured at once: the other such runs wait their turn (`OPEN_SYSTEM_RUNS`).
    let _turn = OPEN_SYSTEM_RUNS.blocking_lock();
    let ci = std::env::var_os("CI").is_some();
    let folder = std::env::temp_dir().join(format!("retrylab-export-{}", std::process::id()));
    std::fs::create_dir_all(&folder).unwrap();
    let above: &[&str] = &["--retry-after-mode", "jitter_above"];
    let libraries =
        ["tenacity", "got", "urllib3", "stamina", "httpx-retries", "axios-retry", "go-retryablehttp"];
    // Every program written (and Go's built) before any runs.
    let mut programs = Vec::new();
    for library in libraries {
        for more in [&[][..], above] {
            let case = folder.join(format!("{library}-{}", more.len()));
            std::fs::create_dir_all(&case).unwrap();
            let json: Value =
                serde_json::from_str(&exported_with("full-jitter", library, &[more, &["--json"]].concat()))
                    .unwrap();
            let expected_mode = if more.is_empty() { "floor" } else { "jitter_above" };
            assert_eq!(json["settings"]["retry_after_mode"], expected_mode, "{json}");
            let cautions: Vec<String> =
                json["cautions"].as_array().unwrap().iter().map(|c| c.as_str().unwrap().to_owned()).collect();
            match any_runnable(library, json["code"].as_str().unwrap(), &case) {
                Ok(command) => programs.push(((library, more, cautions), command)),
                Err(why) if ci => panic!("CI=1: {library} must run here: {why}"),
                Err(why) => eprintln!("skipping {library}: {why}"),
            }
        }
    }
    let mut graded = Vec::new();
    for batch in programs.chunks(3) {
        let runs: Vec<_> = batch
            .iter()
            .map(|(case, command)| {
                let command = command.clone();
                (case.clone(), std::thread::spawn(move || grade(&command)))
            })
            .collect();
        graded.extend(runs.into_iter().map(|(case, run)| (case, run.join().unwrap())));
    }
    for ((library, more, cautions), (exit, card, stderr)) in graded {
        let verdict = |check: &str| card["checks"][check]["verdict"].as_str().unwrap_or("missing").to_owned();
        let why = |check: &str| {
            format!(
                "full-jitter {more:?} as {library}: {check}: {}\n{cautions:?}\n{stderr}",
                card["checks"][check]
            )
        };
        for check in ["retry_after", "backoff", "key_reused", "attempts_capped"] {
            assert_eq!(verdict(check), "pass", "{}", why(check));
        }
        assert!(most_requests(&card) <= 4, "the policy's 4 attempts: {}", why("attempts_capped"));
        if more.is_empty() {
            // As a floor, a Retry-After longer than the whole band is waited exactly: the card
            // says so (a warn), as the export's one caution said it would.
            assert!(cautions.len() == 1 && cautions[0].contains("`jitter` warns"), "{}", why("jitter"));
            assert_eq!(verdict("jitter"), "warn", "{}", why("jitter"));
            let evidence = card["checks"]["jitter"]["evidence"].as_str().unwrap();
            assert!(evidence.starts_with("waits exactly the Retry-After"), "{}", why("jitter"));
        } else {
            assert!(cautions.is_empty(), "{}", why("jitter"));
            assert_eq!(verdict("jitter"), "pass", "{}", why("jitter"));
        }
        assert_eq!(exit, Some(0), "{}", why("jitter"));
    }
    let _ = std::fs::remove_dir_all(&folder);
}

/// A message's measured waits by retry number (1 for the wait before the first retry): the
/// lab's own client's `wait.actual_ms`, or an outside caller's `waited_ms`.
fn waits_by_retry(snapshot: &Value, outside: bool) -> Vec<Vec<u64>> {
    let mut by_retry: Vec<Vec<u64>> = Vec::new();
    let mut put = |retry: usize, ms: u64| {
        if by_retry.len() < retry {
            by_retry.resize(retry, Vec::new());
        }
        by_retry[retry - 1].push(ms);
    };
    if outside {
        for message in snapshot["outside"]["messages"].as_array().unwrap() {
            for attempt in message["attempts"].as_array().unwrap() {
                if let (Some(n), Some(ms)) = (attempt["n"].as_u64(), attempt["waited_ms"].as_u64()) {
                    put(n as usize - 1, ms);
                }
            }
        }
    } else {
        for message in snapshot["messages"].as_array().unwrap() {
            for attempt in message["attempts"].as_array().unwrap() {
                if let (Some(n), Some(ms)) = (attempt["n"].as_u64(), attempt["wait"]["actual_ms"].as_u64()) {
                    put(n as usize, ms);
                }
            }
        }
    }
    by_retry.iter_mut().for_each(|waits| waits.sort_unstable());
    by_retry
}

/// The tolerance two measured waits of about `ms` are held to: 80 ms of process noise on a
/// loaded machine, or 5 % of the wait if more.
fn tolerance(ms: u64) -> u64 {
    80.max(ms / 20)
}

/// A library's own preset, simulated by the lab and run by the real library with its defaults
/// (the round trip: the preset exported to its own library), against an endpoint that is down
/// without `Retry-After`: per retry, the median and the range of the waits agree within
/// `tolerance`, and so does the number of attempts per key. got: 1 s and 2 s, each plus up to
/// 100 ms; axios-retry's `exponentialDelay`: 200, 400, 800 ms, each plus up to 20 %; urllib3:
/// at once, then 1, 2, 4, 8 s; go-retryablehttp: 1, 2, 4, 8 s. All at once, each in a lab of
/// its own beside the lab's own run. (tenacity's, stamina's and httpx-retries' defaults draw
/// full or wide jitter: 20 keys cannot pin their medians this close, so
/// `wide_jitter_presets_agree_in_distribution_with_their_real_library` holds them as
/// distributions.)
#[tokio::test]
async fn library_presets_agree_with_their_real_library_run_with_its_defaults() {
    let _turn = OPEN_SYSTEM_RUNS.lock().await;
    let ci = std::env::var_os("CI").is_some();
    let folder = std::env::temp_dir().join(format!("retrylab-agreement-{}", std::process::id()));
    std::fs::create_dir_all(&folder).unwrap();
    let app = TestApp::spawn().await;
    let down = r#"{"mode": "down", "retry_after_s": null, "latency_ms": [5, 10]}"#;
    // Every program written (and Go's built) before any runs: a build would hold up this
    // thread, and with it the server's.
    let mut commands = Vec::new();
    for library in ["got", "axios-retry", "urllib3", "go-retryablehttp"] {
        let case = folder.join(library);
        std::fs::create_dir_all(&case).unwrap();
        match any_runnable(library, &exported(library, library), &case) {
            Ok(command) => commands.push((library, command)),
            Err(why) if ci => panic!("CI=1: {library} must run here: {why}"),
            Err(why) => eprintln!("skipping {library}: {why}"),
        }
    }
    let mut runs = Vec::new();
    for (library, command) in commands {
        // The real library, on a lab of its own.
        let real = app.new_lab().await;
        app.put(&real, "downstream", down).await;
        let url = app.url(&format!("/labs/{real}/downstream"));
        let run = tokio::task::spawn_blocking(move || {
            Command::new(&command[0]).args(&command[1..]).env("RETRYLAB_URL", url).output().unwrap()
        });
        // The lab's own client with the preset, at the same time.
        let simulated = app.new_lab().await;
        let policy = retrylab::compare::presets::find(library).unwrap().policy.clone();
        app.put(&simulated, "policy", &policy.to_string()).await;
        app.put(&simulated, "downstream", down).await;
        app.burst(&simulated, 20).await;
        runs.push((library, real, simulated, run));
    }
    for (library, real, simulated, run) in runs {
        let output = run.await.unwrap();
        assert!(output.status.success(), "{library}: {}", String::from_utf8_lossy(&output.stderr));
        let lab = app
            .wait_for(&simulated, std::time::Duration::from_secs(60), |s| {
                s["counters"]["dead_letter"].as_u64() == Some(20)
            })
            .await;
        let ours = waits_by_retry(&lab, false);
        let theirs = waits_by_retry(&app.snapshot(&real).await, true);
        assert_eq!(
            ours.len(),
            theirs.len(),
            "{library}: retries per key, lab {ours:?} against real {theirs:?}"
        );
        agree(library, &ours, &theirs);
    }
    let _ = std::fs::remove_dir_all(&folder);
}

/// The command that runs `library`'s exported `code` from `folder`: Python for the four Python
/// libraries, node for got and axios-retry, a build with Debian's go-retryablehttp for Go.
fn any_runnable(library: &str, code: &str, folder: &Path) -> Result<Vec<String>, String> {
    match library {
        "got" | "axios-retry" => {
            let file = folder.join("exported.mjs");
            runnable("got", code, folder).map(|_| {
                std::fs::write(&file, code).unwrap();
                vec!["node".into(), file.display().to_string()]
            })
        }
        "go-retryablehttp" => {
            let gopath = Path::new("/usr/share/gocode");
            if !gopath.join("src/github.com/hashicorp/go-retryablehttp").exists() {
                return Err("Debian's golang-github-hashicorp-go-retryablehttp-dev is not installed".into());
            }
            let source = folder.join("exported.go");
            std::fs::write(&source, code).unwrap();
            let program = folder.join("exported");
            let output = Command::new("go")
                .args(["build", "-o"])
                .arg(&program)
                .arg(&source)
                .env("GO111MODULE", "off")
                .env("GOPATH", gopath)
                .env("GOCACHE", folder.join("cache"))
                .output()
                .map_err(|e| format!("go: {e}"))?;
            if !output.status.success() {
                return Err(format!(
                    "the exported Go does not build: {}",
                    String::from_utf8_lossy(&output.stderr)
                ));
            }
            Ok(vec![program.display().to_string()])
        }
        _ => {
            let python = std::env::var_os("RETRYLAB_SNIPPET_PYTHON")
                .map(PathBuf::from)
                .unwrap_or_else(|| root().join("target/snippet-venv/bin/python"));
            let imports = "import urllib3, requests, tenacity, stamina, httpx, httpx_retries";
            if !Command::new(&python).args(["-c", imports]).status().is_ok_and(|s| s.success()) {
                return Err(
                    "no Python with the matrix's libraries (.ci/run makes target/snippet-venv)".into()
                );
            }
            let file = folder.join("exported_client.py");
            std::fs::write(&file, code).unwrap();
            Ok(vec![python.display().to_string(), file.display().to_string()])
        }
    }
}

/// Each export, run on its real library against an endpoint that is down without
/// `Retry-After`, waits as the lab's own client waits under the same policy: per retry, the
/// median and the range within `tolerance`, and as many attempts per key. The policy draws
/// 0 to 100 ms above a nominal of 200 ms doubling, so both the curve and the jitter show.
#[tokio::test]
async fn each_export_waits_as_the_labs_own_run_of_the_same_policy() {
    let policy = r#"{"jitter": "additive", "jitter_ms": 100, "base_ms": 200, "cap_ms": 5000, "multiplier": 2, "max_attempts": 4}"#;
    let down = r#"{"mode": "down", "retry_after_s": null, "latency_ms": [5, 10]}"#;
    exports_wait_as_the_lab("waits", policy, down, 3).await;
}

/// The same with `Retry-After: 1` on every failure and a policy that puts its jitter above the
/// header (`jitter_above`, 0 to 100 ms): each library's program waits the header and its jitter
/// as the lab's own client does.
#[tokio::test]
async fn each_export_treats_retry_after_as_the_labs_own_run_does() {
    let policy = r#"{"jitter": "full", "base_ms": 100, "cap_ms": 5000, "max_attempts": 2, "honor_retry_after": true, "retry_after_mode": "jitter_above"}"#;
    let down = r#"{"mode": "down", "retry_after_s": 1, "latency_ms": [5, 10]}"#;
    exports_wait_as_the_lab("retry-after", policy, down, 1).await;
}

/// Runs `policy` in the lab's own client and, one library at a time, its export on the real
/// library, each against an endpoint set to `down`; holds the waits per retry together.
async fn exports_wait_as_the_lab(name: &str, policy: &str, down: &str, retries: usize) {
    let _turn = OPEN_SYSTEM_RUNS.lock().await;
    let ci = std::env::var_os("CI").is_some();
    let folder = std::env::temp_dir().join(format!("retrylab-export-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&folder).unwrap();
    let app = TestApp::spawn().await;
    let simulated = app.new_lab().await;
    app.put(&simulated, "policy", policy).await;
    app.put(&simulated, "downstream", down).await;
    app.burst(&simulated, 20).await;
    let lab = app
        .wait_for(&simulated, std::time::Duration::from_secs(30), |s| {
            s["counters"]["dead_letter"].as_u64() == Some(20)
        })
        .await;
    let ours = waits_by_retry(&lab, false);
    assert_eq!(ours.len(), retries, "{ours:?}");
    for library in
        ["urllib3", "tenacity", "stamina", "httpx-retries", "got", "axios-retry", "go-retryablehttp"]
    {
        let case = folder.join(library);
        std::fs::create_dir_all(&case).unwrap();
        let command = match any_runnable(library, &exported(policy, library), &case) {
            Ok(command) => command,
            Err(why) if ci => panic!("CI=1: {library} must run here: {why}"),
            Err(why) => {
                eprintln!("skipping {library}: {why}");
                continue;
            }
        };
        let real = app.new_lab().await;
        app.put(&real, "downstream", down).await;
        let url = app.url(&format!("/labs/{real}/downstream"));
        let output = tokio::task::spawn_blocking(move || {
            Command::new(&command[0]).args(&command[1..]).env("RETRYLAB_URL", url).output().unwrap()
        })
        .await
        .unwrap();
        assert!(output.status.success(), "{library}: {}", String::from_utf8_lossy(&output.stderr));
        let theirs = waits_by_retry(&app.snapshot(&real).await, true);
        assert_eq!(
            theirs.len(),
            ours.len(),
            "{library}: retries per key, real {theirs:?} against lab {ours:?}"
        );
        agree(library, &ours, &theirs);
    }
    let _ = std::fs::remove_dir_all(&folder);
}

/// The lab's waits (`ours`) and the real library's (`theirs`), per retry number: every key
/// retried, and the median, the shortest and the longest within `tolerance`.
fn agree(library: &str, ours: &[Vec<u64>], theirs: &[Vec<u64>]) {
    let median = |w: &[u64]| w[w.len() / 2];
    for (retry, (ours, theirs)) in ours.iter().zip(theirs).enumerate() {
        assert_eq!(theirs.len(), 20, "{library} retry {}: every key retried", retry + 1);
        let near = |a: u64, b: u64| a.abs_diff(b) <= tolerance(a.max(b));
        let o = (median(ours), ours[0], ours[ours.len() - 1]);
        let t = (median(theirs), theirs[0], theirs[theirs.len() - 1]);
        let said = format!(
            "{library} retry {}: lab median {} in {}..{}, real median {} in {}..{}",
            retry + 1,
            o.0,
            o.1,
            o.2,
            t.0,
            t.1,
            t.2
        );
        eprintln!("{said}");
        assert!(near(o.0, t.0) && near(o.1, t.1) && near(o.2, t.2), "{said}");
    }
}

/// The two-sample Kolmogorov-Smirnov statistic: the largest gap between the two samples'
/// cumulative shares (both sorted).
fn ks_distance(a: &[u64], b: &[u64]) -> f64 {
    let share = |sample: &[u64], x: u64| sample.partition_point(|&w| w <= x) as f64 / sample.len() as f64;
    a.iter().chain(b).map(|&x| (share(a, x) - share(b, x)).abs()).fold(0.0, f64::max)
}

/// The libraries whose defaults draw wide jitter (tenacity's `wait_random_exponential`,
/// httpx-retries' full jitter, stamina's 0 to 1 s above 0.1 s doubling), one after another: each
/// library's preset simulated by the lab for 60 keys beside its export to its own library run
/// three times at once (20 keys each, 60 in all), against an endpoint down without
/// `Retry-After` for 13 s, then healthy. Over the first retries, which every key makes well
/// before the endpoint heals (tenacity and httpx-retries 3: windows of 1, 2 and 4 s; stamina 4),
/// the lab's waits and the library's are one distribution: the Kolmogorov-Smirnov distance of
/// each retry's 60 against 60 is under 0.36, the critical value at a 0.1 % false alarm
/// (1.95 x sqrt(2/60)). A window twice too wide gives about 0.5 and fails (the test below).
#[tokio::test]
async fn wide_jitter_presets_agree_in_distribution_with_their_real_library() {
    let _turn = OPEN_SYSTEM_RUNS.lock().await;
    let ci = std::env::var_os("CI").is_some();
    let folder = std::env::temp_dir().join(format!("retrylab-wide-{}", std::process::id()));
    std::fs::create_dir_all(&folder).unwrap();
    let app = TestApp::spawn().await;
    for (library, retries) in [("tenacity", 3), ("httpx-retries", 3), ("stamina", 4)] {
        let case = folder.join(library);
        std::fs::create_dir_all(&case).unwrap();
        match any_runnable(library, &exported(library, library), &case) {
            Ok(command) => one_distribution(&app, library, retries, &command).await,
            Err(why) if ci => panic!("CI=1: {library} must run here: {why}"),
            Err(why) => eprintln!("skipping {library}: {why}"),
        }
    }
    let _ = std::fs::remove_dir_all(&folder);
}

/// One library of the test above: its preset in the lab and `command` on the real library.
async fn one_distribution(app: &TestApp, library: &str, retries: usize, command: &[String]) {
    const COPIES: usize = 3;
    const KEYS: usize = 60;
    const CRITICAL: f64 = 0.36;
    let down = r#"{"mode": "down", "retry_after_s": null, "latency_ms": [5, 10]}"#;
    let real = app.new_lab().await;
    app.put(&real, "downstream", down).await;
    let url = app.url(&format!("/labs/{real}/downstream"));
    let copies: Vec<_> = (0..COPIES)
        .map(|_| {
            let (command, url) = (command.to_vec(), url.clone());
            tokio::task::spawn_blocking(move || {
                Command::new(&command[0]).args(&command[1..]).env("RETRYLAB_URL", url).output().unwrap()
            })
        })
        .collect();
    let simulated = app.new_lab().await;
    let policy = retrylab::compare::presets::find(library).unwrap().policy.clone();
    app.put(&simulated, "policy", &policy.to_string()).await;
    app.put(&simulated, "downstream", down).await;
    app.burst(&simulated, KEYS as u64).await;
    tokio::time::sleep(std::time::Duration::from_secs(13)).await;
    app.put(&real, "downstream", r#"{"mode": "healthy"}"#).await;
    app.put(&simulated, "downstream", r#"{"mode": "healthy"}"#).await;
    for copy in copies {
        let output = copy.await.unwrap();
        assert!(output.status.success(), "{library}: {}", String::from_utf8_lossy(&output.stderr));
    }
    let lab = app
        .wait_for(&simulated, std::time::Duration::from_secs(60), |s| {
            let ended = |counter: &str| s["counters"][counter].as_u64().unwrap_or(0) as usize;
            ended("delivered") + ended("dead_letter") == KEYS
        })
        .await;
    let ours = waits_by_retry(&lab, false);
    let theirs = waits_by_retry(&app.snapshot(&real).await, true);
    for retry in 0..retries {
        let (o, t) = (&ours[retry], &theirs[retry]);
        assert_eq!((o.len(), t.len()), (KEYS, KEYS), "{library} retry {}: every key retried", retry + 1);
        let distance = ks_distance(o, t);
        let said = format!(
            "{library} retry {}: lab median {} in {}..{}, real median {} in {}..{}, distance {distance:.2}",
            retry + 1,
            o[KEYS / 2],
            o[0],
            o[KEYS - 1],
            t[KEYS / 2],
            t[0],
            t[KEYS - 1],
        );
        eprintln!("{said}");
        assert!(distance < CRITICAL, "{said} (critical {CRITICAL})");
    }
}

#[test]
fn the_distance_tells_one_window_from_one_twice_as_wide() {
    let window = |width: u64| (0..60).map(|i| i * width / 60).collect::<Vec<u64>>();
    assert!(ks_distance(&window(1_000), &window(1_000)) < 0.02);
    let wide = ks_distance(&window(1_000), &window(2_000));
    assert!((0.45..0.55).contains(&wide), "{wide}");
}
