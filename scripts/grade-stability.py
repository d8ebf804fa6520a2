#!/usr/bin/env python3
"""Grades each real retry library of the conformance matrix (tests/conformance/, held by
tests/api/conformance.rs) N times with `retrylab grade --json`, every library of a round at once
(the load is the point: the same client must get the same exit code on a busy machine), and
prints a table: library, version, the exit codes over N runs, and each check's verdicts counted.
A library whose runtime is not here is left out, and said so.

    scripts/grade-stability.py [--runs 10] [--bin target/debug/retrylab] [--only got ...]
"""

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFORMANCE = os.path.join(ROOT, "tests", "conformance")
NODE = os.path.join(CONFORMANCE, "node")
PYTHON = os.environ.get("RETRYLAB_SNIPPET_PYTHON") or os.path.join(ROOT, "target", "snippet-venv", "bin", "python")
GOPATH = "/usr/share/gocode"
CHECKS = [
    "retry_after", "backoff", "jitter", "attempts_capped", "key_reused", "no_retry_on_4xx",
    "timeouts", "deadline_sent", "attempts_numbered", "pushback_honoured",
]  # fmt: skip

# (library, how its version is found, the client's file under tests/conformance/)
LIBRARIES = [
    ("urllib3", ("python", "urllib3"), "urllib3_retry.py"),
    ("requests + urllib3", ("python", "requests"), "requests_urllib3.py"),
    ("tenacity", ("python", "tenacity"), "tenacity_wait_random_exponential.py"),
    ("stamina", ("python", "stamina"), "stamina_retry_after_hook.py"),
    ("httpx-retries", ("python", "httpx-retries"), "httpx_retries_transport.py"),
    ("got", ("node", "got"), "node/got.mjs"),
    ("axios-retry", ("node", "axios-retry"), "node/axios_retry.mjs"),
    ("go-retryablehttp", ("debian", "golang-github-hashicorp-go-retryablehttp-dev"), "retryablehttp.go"),
]


def version(kind, name):
    """The installed version, or None when the library is not here."""
    try:
        if kind == "python":
            code = "import importlib.metadata, sys; print(importlib.metadata.version(sys.argv[1]))"
            return subprocess.run([PYTHON, "-c", code, name], capture_output=True, text=True, check=True).stdout.strip()
        if kind == "node":
            with open(os.path.join(NODE, "node_modules", name, "package.json")) as f:
                return json.load(f)["version"] if shutil.which("node") else None
        out = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", name], capture_output=True, text=True)
        return out.stdout.strip() if out.returncode == 0 and shutil.which("go") else None
    except (OSError, subprocess.CalledProcessError, KeyError):
        return None


def command(kind, client, build_dir):
    path = os.path.join(CONFORMANCE, client)
    if kind == "python":
        return [PYTHON, path]
    if kind == "node":
        return ["node", path]
    program = os.path.join(build_dir, "retryablehttp")
    env = dict(os.environ, GO111MODULE="off", GOPATH=GOPATH, GOCACHE=os.path.join(build_dir, "cache"))
    subprocess.run(["go", "build", "-o", program, path], env=env, check=True)
    return [program]


def grade(binary, cmd):
    """The exit code and each check's verdict of one run."""
    run = subprocess.run([binary, "grade", "--json", "--", *cmd], capture_output=True, text=True)
    try:
        callers = json.loads(run.stdout)["callers"]
    except (json.JSONDecodeError, KeyError):
        callers = []
    checks = callers[0]["checks"] if len(callers) == 1 else {}
    return run.returncode, {check: checks.get(check, {}).get("verdict", "?") for check in CHECKS}


def counted(items):
    return ", ".join(f"{item} {n}" for item, n in collections.Counter(items).most_common())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--bin", default=os.path.join(ROOT, "target", "debug", "retrylab"))
    parser.add_argument("--only", nargs="*", help="libraries to grade (names as in the table)")
    args = parser.parse_args()
    build_dir = tempfile.mkdtemp(prefix="retrylab-stability-")
    here = []
    for name, (kind, package), client in LIBRARIES:
        if args.only and name not in args.only:
            continue
        found = version(kind, package)
        if found is None:
            print(f"skipping {name}: not installed here (.ci/run installs it)", file=sys.stderr)
            continue
        here.append((name, found, command(kind, client, build_dir)))
    results = {name: [] for name, _, _ in here}
    for run in range(args.runs):
        with ThreadPoolExecutor(max_workers=len(here) or 1) as pool:
            for (name, _, _), result in zip(here, pool.map(lambda lib: grade(args.bin, lib[2]), here)):
                results[name].append(result)
        print(f"round {run + 1} of {args.runs} done", file=sys.stderr)
    shutil.rmtree(build_dir, ignore_errors=True)
    print("| library | version | exit codes | verdicts, counted over the runs |")
    print("| --- | --- | --- | --- |")
    unstable = []
    for name, found, _ in here:
        codes = [code for code, _ in results[name]]
        verdicts = "; ".join(
            f"{check} {counted(v[check] for _, v in results[name])}" for check in CHECKS
        )
        exits = ", ".join(f"{code} ×{n}" for code, n in collections.Counter(codes).most_common())
        print(f"| {name} | {found} | {exits} | {verdicts} |")
        if len(set(codes)) > 1:
            unstable.append(name)
    if unstable:
        print(f"not the same exit code in every run: {', '.join(unstable)}", file=sys.stderr)


if __name__ == "__main__":
    main()
