#!/usr/bin/env python3
"""Runs `retrylab compare` for every scenario over three seeds and prints, for each scenario,
a markdown table of min / median / max per policy. Used for BENCHMARKS.md:

    cargo build --release && python3 scripts/compare-bench.py target/release/retrylab

With QUICK=1: a burst of 10, one seed, two scenarios (CI proves the script still works).
"""
import json
import os
import statistics
import subprocess
import sys

BINARY = sys.argv[1] if len(sys.argv) > 1 else "target/release/retrylab"
BURST = 100
SEEDS = [1, 2, 3]
SCENARIOS = {
    "overload": ["fixed", "none", "full", "equal", "decorrelated"],
    "outage": ["none", "full", "equal", "breaker", "budget"],
    "throttled": ["none", "full", "equal", "ignore-retry-after", "budget"],
    "flaky": ["fixed", "none", "full", "equal", "decorrelated"],
    "metastable": ["none", "full", "equal", "breaker", "budget"],
}
if os.environ.get("QUICK"):
    BURST, SEEDS = 10, [1]
    SCENARIOS = {"flaky": ["none", "full"], "throttled": ["full", "ignore-retry-after"]}
ROWS = ["requests_per_delivered", "delivered", "dead_letter", "drain_ms", "peak_requests_per_100ms", "wasted", "latency_p99_ms"]


def run(scenario, policies, seed):
    command = [BINARY, "compare", "--scenario", scenario, "--burst", str(BURST), "--seed", str(seed), "--json"]
    for policy in policies:
        command += ["--policy", policy]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def spread(values):
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    fmt = lambda v: f"{v:g}"
    return f"{fmt(min(values))} / {fmt(statistics.median(values))} / {fmt(max(values))}"


for scenario, policies in SCENARIOS.items():
    results = {policy: [] for policy in policies}
    for seed in SEEDS:
        for row in run(scenario, policies, seed):
            assert row["applied_twice"] == 0, row
            assert row["delivered"] + row["dead_letter"] == BURST, row
            results[row["policy"]].append(row)
    print(f"\n#### {scenario} (burst {BURST}, seeds {', '.join(map(str, SEEDS))}: min / median / max)\n")
    print("| | " + " | ".join(policies) + " |")
    print("| --- |" + " --- |" * len(policies))
    for field in ROWS:
        cells = [spread([r[field] for r in results[p]]) for p in policies]
        print(f"| {field} | " + " | ".join(cells) + " |")
    sys.stdout.flush()
