//! The conformance matrix: real retry libraries, pinned (`.ci/run` installs them), each run by a
//! client of ours under `tests/conformance/` with its documented or commonly recommended
//! configuration (20 POSTs at once, a key each), graded by `retrylab grade` twice. Each card is
//! held to what the library's source says it should be, check by check, and so is the exit
//! code: the same in both runs. Each client cites the source file and version of what it does.
//! Under `CI=1` every runtime must be here; elsewhere a library whose runtime is missing is
//! skipped, and said so.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::helpers::grade;

/// How a library's client is run.
#[derive(Debug, Clone, Copy)]
enum Runtime {
    /// The venv `.ci/run` makes (`RETRYLAB_SNIPPET_PYTHON`, or `target/snippet-venv`).
    Python,
    /// `node`, with `tests/conformance/node/node_modules` from `npm ci`.
    Node,
    /// Debian's `go` with Debian's go-retryablehttp under `/usr/share/gocode`.
    Go,
}

/// A library of the matrix, and the card its source says it should get.
struct Library {
    name: &'static str,
    runtime: Runtime,
    /// Under `tests/conformance/`.
    client: &'static str,
    /// Every check of the card, with its verdict.
    card: [(&'static str, &'static str); 10],
    exit: i32,
}

/// The checks no library of the matrix can pass or fail on its own: none sends the lab's
/// deadline or attempt-count headers (so those warn), the schedule answers no 4xx and no
/// pushback, and each waits longer than any answer takes (so it never hangs up).
const COMMON: [(&str, &str); 7] = [
    ("attempts_capped", "pass"),
    ("key_reused", "pass"),
    ("no_retry_on_4xx", "not_seen"),
    ("timeouts", "not_seen"),
    ("deadline_sent", "warn"),
    ("attempts_numbered", "warn"),
    ("pushback_honoured", "not_seen"),
];

/// A card: `retry_after`, `backoff`, `jitter` as given, the rest as [`COMMON`].
const fn card(
    retry_after: &'static str,
    backoff: &'static str,
    jitter: &'static str,
) -> [(&'static str, &'static str); 10] {
    let c = COMMON;
    [
        ("retry_after", retry_after),
        ("backoff", backoff),
        ("jitter", jitter),
        c[0],
        c[1],
        c[2],
        c[3],
        c[4],
        c[5],
        c[6],
    ]
}

/// What each library's source says (the comment at the top of each client cites it):
/// `backoff` is the library's own waits after failures without `Retry-After`; `jitter` is warn
/// where its own waits are random but a `Retry-After` is waited exactly, with nothing on top.
const MATRIX: [Library; 8] = [
    // Waits a Retry-After exactly; otherwise 0, 1, 2, 4 s, nothing random.
    Library {
        name: "urllib3",
        runtime: Runtime::Python,
        client: "urllib3_retry.py",
        card: card("pass", "pass", "fail"),
        exit: 1,
    },
    // urllib3's waits: 0, 2, 4, 8 s, nothing random; a Retry-After exactly.
    Library {
        name: "requests + urllib3",
        runtime: Runtime::Python,
        client: "requests_urllib3.py",
        card: card("pass", "pass", "fail"),
        exit: 1,
    },
    // Full jitter in a window that doubles; never reads Retry-After.
    Library {
        name: "tenacity",
        runtime: Runtime::Python,
        client: "tenacity_wait_random_exponential.py",
        card: card("fail", "pass", "pass"),
        exit: 1,
    },
    // A Retry-After exactly (the hook); otherwise 0.1 s doubling plus 0 to 1 s at random. Its
    // backoff is real but its first steps are smaller than its jitter: the card's rule warns in
    // most runs (BENCHMARKS.md), and the source says pass.
    Library {
        name: "stamina",
        runtime: Runtime::Python,
        client: "stamina_retry_after_hook.py",
        card: card("pass", "pass", "warn"),
        exit: 0,
    },
    // A Retry-After exactly; otherwise full jitter in a window that doubles.
    Library {
        name: "httpx-retries",
        runtime: Runtime::Python,
        client: "httpx_retries_transport.py",
        card: card("pass", "pass", "warn"),
        exit: 0,
    },
    // A Retry-After exactly; otherwise 1, 2, 4 s plus 0 to 100 ms.
    Library {
        name: "got",
        runtime: Runtime::Node,
        client: "node/got.mjs",
        card: card("pass", "pass", "warn"),
        exit: 0,
    },
    // The larger of its own wait (200 ms doubling) and the Retry-After, plus 0 to 20 %.
    Library {
        name: "axios-retry",
        runtime: Runtime::Node,
        client: "node/axios_retry.mjs",
        card: card("pass", "pass", "pass"),
        exit: 0,
    },
    // A Retry-After exactly after a 429 or 503; otherwise 1, 2, 4, 8 s, nothing random.
    Library {
        name: "go-retryablehttp",
        runtime: Runtime::Go,
        client: "retryablehttp.go",
        card: card("pass", "pass", "fail"),
        exit: 1,
    },
];

/// Each library is graded this many times; every run must give its card and its exit code.
const RUNS: usize = 2;

fn conformance() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance")
}

fn python() -> Option<PathBuf> {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/snippet-venv/bin/python");
    let python =
        std::env::var_os("RETRYLAB_SNIPPET_PYTHON").map(PathBuf::from).or(venv.exists().then_some(venv))?;
    let imports = "import urllib3, requests, tenacity, stamina, httpx, httpx_retries";
    let works = Command::new(&python).args(["-c", imports]).status().is_ok_and(|s| s.success());
    works.then_some(python)
}

fn node() -> bool {
    let installed = conformance().join("node/node_modules/axios-retry").exists();
    installed && Command::new("node").arg("--version").output().is_ok_and(|o| o.status.success())
}

const GOPATH: &str = "/usr/share/gocode";

/// Builds the go-retryablehttp client the way Debian's Go packages are built: no modules, the
/// library from `GOPATH`. Its program's path, or why it did not build.
fn build_go(folder: &Path) -> Result<PathBuf, String> {
    if !Path::new(GOPATH).join("src/github.com/hashicorp/go-retryablehttp").exists() {
        return Err("Debian's golang-github-hashicorp-go-retryablehttp-dev is not installed".into());
    }
    let program = folder.join("retryablehttp");
    let output = Command::new("go")
        .args(["build", "-o"])
        .arg(&program)
        .arg(conformance().join("retryablehttp.go"))
        .env("GO111MODULE", "off")
        .env("GOPATH", GOPATH)
        .env("GOCACHE", folder.join("cache"))
        .output()
        .map_err(|e| format!("go: {e}"))?;
    if !output.status.success() {
        return Err(format!("the Go client does not build: {}", String::from_utf8_lossy(&output.stderr)));
    }
    Ok(program)
}

/// The command that runs `library`'s client, or why it cannot run here.
fn command(library: &Library, python: &Option<PathBuf>, folder: &Path) -> Result<Vec<String>, String> {
    let client = conformance().join(library.client).display().to_string();
    match library.runtime {
        Runtime::Python => python.as_ref().map(|p| vec![p.display().to_string(), client]).ok_or_else(|| {
            "no Python with the matrix's libraries (.ci/run makes target/snippet-venv)".into()
        }),
        Runtime::Node => node()
            .then(|| vec!["node".to_owned(), client])
            .ok_or_else(|| "no node, or no tests/conformance/node/node_modules (npm ci)".into()),
        Runtime::Go => build_go(folder).map(|program| vec![program.display().to_string()]),
    }
}

/// Each check where `card` differs from what the source says, as `check: got (expected)`.
fn differences(library: &Library, card: &Value) -> Vec<String> {
    library
        .card
        .iter()
        .filter_map(|(check, expected)| {
            let found = &card["checks"][check];
            let verdict = found["verdict"].as_str().unwrap_or("missing");
            (verdict != *expected).then(|| {
                format!(
                    "{check}: {verdict} ({expected} expected): {}",
                    found["evidence"].as_str().unwrap_or_default()
                )
            })
        })
        .collect()
}

#[test]
fn each_real_library_gets_the_card_its_source_says_and_the_same_exit_code_every_run() {
    // Eight graders at once load the machine enough: not beside the other runs that time it.
    let _turn = crate::helpers::OPEN_SYSTEM_RUNS.blocking_lock();
    let ci = std::env::var_os("CI").is_some();
    let python = python();
    let folder = std::env::temp_dir().join(format!("retrylab-conformance-{}", std::process::id()));
    std::fs::create_dir_all(&folder).unwrap();
    let mut here = Vec::new();
    for library in &MATRIX {
        match command(library, &python, &folder) {
            Ok(command) => here.push((library, command)),
            Err(why) if ci => panic!("CI=1: {} must run here (.ci/run installs it): {why}", library.name),
            Err(why) => eprintln!("skipping {}: {why}", library.name),
        }
    }
    // Every library of a run is graded at once: the machine is loaded, as a CI runner is, and
    // the verdicts must hold all the same.
    let mut wrong = Vec::new();
    for run in 1..=RUNS {
        let graded: Vec<_> = std::thread::scope(|scope| {
            let runs: Vec<_> = here
                .iter()
                .map(|(library, command)| scope.spawn(move || (*library, grade(command))))
                .collect();
            runs.into_iter().map(|r| r.join().unwrap()).collect()
        });
        for (library, (exit, card, said)) in graded {
            if card.is_null() {
                wrong.push(format!(
                    "{} run {run}: not one caller's card (exit {exit:?}): {said}",
                    library.name
                ));
                continue;
            }
            let mut differs = differences(library, &card);
            if exit != Some(library.exit) {
                differs.push(format!("exit {exit:?} ({} expected)", library.exit));
            }
            wrong.extend(differs.into_iter().map(|d| format!("{} run {run}: {d}", library.name)));
        }
    }
    let _ = std::fs::remove_dir_all(&folder);
    assert!(wrong.is_empty(), "cards that are not what the sources say:\n{}", wrong.join("\n"));
}
