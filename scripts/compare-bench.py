#!/usr/bin/env python3
"""Holds `retrylab compare`'s verdict to what issue 28 asks of it, at full scale, with the
defaults (the default runs; a run more than 20 ms late left out):

- an A/A test on every scenario: one policy (no jitter) under two names, AA comparisons each
  (default 20, seeds 1..AA): a verdict on at most 1 in 20 is the bar;
- a known large difference: a retry storm (ten attempts 50 ms apart, no backoff, no jitter)
  against full-jitter exponential backoff on `overload`, DIFF comparisons (default 10): a
  verdict for full jitter in at least 9 of 10 is the bar.

For each comparison it notes the wall time, the lateness p99 of its valid runs and the runs
left out, and prints a markdown table per check for BENCHMARKS.md:

    cargo build --release && python3 scripts/compare-bench.py target/release/retrylab

SCENARIOS=overload,flaky picks scenarios; AA=5 DIFF=3 fewer comparisons. With QUICK=1: one
small A/A comparison on two scenarios and one known difference (CI proves the script works).
"""
import json
import os
import statistics
import subprocess
import sys
import time

BINARY = sys.argv[1] if len(sys.argv) > 1 else "target/release/retrylab"
BURST = 100
AA = int(os.environ.get("AA", "20"))
DIFF = int(os.environ.get("DIFF", "10"))
SCENARIOS = os.environ.get("SCENARIOS", "overload,throttled,outage,flaky,metastable").split(",")
if os.environ.get("QUICK"):
    BURST, AA, DIFF, SCENARIOS = 10, 1, 1, ["flaky", "throttled"]

SAME = {"jitter": "none"}
STORM = {"jitter": "none", "multiplier": 1, "base_ms": 50, "cap_ms": 50, "max_attempts": 10, "honor_retry_after": False}
FULL = {"jitter": "full", "base_ms": 50, "cap_ms": 800, "max_attempts": 10, "honor_retry_after": False}


def compare(scenario, policies, seed):
    """One comparison with the defaults: its document and its wall time."""
    command = [BINARY, "compare", "--scenario", scenario, "--burst", str(BURST), "--seed", str(seed), "--json", "--quiet"]
    for name, policy in policies:
        command += ["--policy", json.dumps({"name": name, "policy": policy})]
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    wall = time.monotonic() - started
    document = json.loads(done.stdout)
    for policy in document["policies"]:
        for run in policy["runs"]:
            figures = run["figures"]
            assert figures["applied_twice"] == 0, figures
            if scenario != "metastable":
                assert figures["delivered"] + figures["dead_letter"] == BURST, figures
    return document, wall


def spread(values):
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    return f"{min(values):g} / {statistics.median(values):g} / {max(values):g}"


def check(title, scenario, policies, count, want):
    """`count` comparisons; prints a row and returns how many reached a verdict."""
    if count == 0:
        return 0
    verdicts, walls, late, left_out, runs, ps = 0, [], [], 0, None, []
    for seed in range(1, count + 1):
        document, wall = compare(scenario, policies, seed)
        verdict = document["verdict"]
        runs = document["runs"]
        walls.append(round(wall, 1))
        late.append(document["lateness_ms_p99"])
        left_out += len(document["invalid_runs"])
        ps += [t["p"] for t in verdict["tests"]]
        if verdict["best"]:
            verdicts += 1
            if want is not None:
                assert verdict["best"] == [want], verdict
        print(f"  {title} {scenario} seed {seed}: {verdict['result']} ({wall:.1f} s, late {document['lateness_ms_p99']} ms, "
              f"left out {document['invalid_runs']})", file=sys.stderr)
    key = ", then ".join(document["key_figure"])
    print(f"| {scenario} | {key} | {runs} | {verdicts} of {count} | {spread(ps)} | {spread(late)} | {left_out} | {spread(walls)} |")
    sys.stdout.flush()
    return verdicts


HEADER = "| scenario | key figure | runs each | verdicts | p (min / median / max) | lateness p99, ms (min / median / max) | runs left out | wall s (min / median / max) |\n| --- | --- | --- | --- | --- | --- | --- | --- |"

if DIFF:
    print(f"\n#### A known difference: a retry storm against full jitter on overload, burst {BURST}, {DIFF} comparisons\n")
    print(HEADER)
    check("storm", "overload", [("storm", STORM), ("full-jitter", FULL)], DIFF, "full-jitter")

if AA:
    print(f"\n#### A/A: one policy (no jitter) under two names, burst {BURST}, {AA} comparisons a scenario\n")
    print(HEADER)
    for scenario in SCENARIOS:
        check("A/A", scenario, [("a", SAME), ("b", SAME)], AA, None)
