#!/usr/bin/env python3
"""The chance that `grade` passes `retry_after` for a client that ignores the header, by luck.

A client with full jitter in a window that doubles (tenacity's `wait_random_exponential(multiplier=1,
max=60)`, six attempts) never reads `Retry-After`, yet each of its waits after the header is long
enough by chance most of the time. `grade` fails it only when at least one retry comes back early,
so with few orders the card can pass. This simulates such a client against the standard schedule
(read from src/cli/grade.rs, so it cannot drift) and prints, for each number of orders sent side by
side, the mean number of retries after a header and the share of runs in which none was early.

    scripts/retry-after-chance.py [--runs 20000] [--orders 20 40 60]
"""

import argparse
import json
import os
import random
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SLACK_MS = 25  # RETRY_AFTER_SLACK_MS in src/callers/grade.rs


def standard_schedule():
    """[(retry_after_s or None or "slow", ms)] from the STANDARD constant, up to healthy."""
    source = open(os.path.join(ROOT, "src", "cli", "grade.rs")).read()
    raw = re.search(r'const STANDARD: &str = r#"(.*?)"#;', source, re.S).group(1)
    phases = []
    for phase in json.loads(raw):
        if phase["mode"] == "down":
            phases.append((phase.get("retry_after_s"), phase["ms"]))
        elif "ms" in phase:
            phases.append(("answers", phase["ms"]))
    return phases


def answer_at(t_ms, phases):
    start = 0
    for header, ms in phases:
        if t_ms < start + ms:
            return header
        start += ms
    return "answers"


def one_run(orders, phases, rng, attempts=6):
    """(retries after a header, how many of them came back early) for one graded run."""
    after, early = 0, 0
    for _ in range(orders):
        t = rng.uniform(0, 0.05)  # the orders leave together, within a few ms
        for attempt in range(1, attempts):
            header = answer_at(t * 1000, phases)
            if header == "answers":
                break
            wait = rng.uniform(0, min(60, 2 ** (attempt - 1)))
            if header is not None:
                after += 1
                early += wait * 1000 + SLACK_MS < header * 1000
            t += wait + 0.005
    return after, early


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20000)
    parser.add_argument("--orders", type=int, nargs="+", default=[20, 40, 60])
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    phases = standard_schedule()
    rng = random.Random(args.seed)
    print("| orders | retries after a header (mean) | runs with none early (a lucky pass) |")
    print("| --- | --- | --- |")
    for orders in args.orders:
        results = [one_run(orders, phases, rng) for _ in range(args.runs)]
        mean = sum(after for after, _ in results) / args.runs
        lucky = sum(1 for _, early in results if early == 0)
        print(f"| {orders} | {mean:.1f} | {lucky} of {args.runs} ({100 * lucky / args.runs:.2f} %) |")


if __name__ == "__main__":
    main()
