#!/usr/bin/env python3
"""Lean at scale, in one run: memory per empty lab, RSS growth for 150,000 applied keys, the
endpoint's requests per second beside a bare axum handler (new keys and repeats), and the
timer's error and the time queued for a connection slot at 1,000 and 10,000 messages.

    cargo build --release --bin retrylab --example bare_endpoint && python3 scripts/lean-bench.py

Each figure is measured --runs times (3 by default), every run on a fresh server and database,
and printed as min / median / max. --bin measures another build of retrylab (an older commit,
say); flags it does not know are left out. Needs wrk (apt-get install wrk).
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--bin", default="target/release/retrylab")
parser.add_argument("--bare", default="target/release/examples/bare_endpoint")
parser.add_argument("--runs", type=int, default=3)
parser.add_argument("--seconds", type=int, default=5, help="length of each wrk run")
parser.add_argument("--keys", type=int, default=150_000)
parser.add_argument("--labs", type=int, default=1000, help="empty labs made to measure one")
parser.add_argument("--messages", default="1000,10000", help="burst sizes for the timer figures")
parser.add_argument("--quick", action="store_true",
                    help="small counts and one short run (CI proves the script still works)")
parser.add_argument("--only", default="empty,keys,throughput,timer",
                    help="which figures, comma-separated: empty, keys, throughput, timer")
args = parser.parse_args()
if args.quick:
    args.runs, args.seconds, args.keys, args.labs, args.messages = 1, 1, 2_000, 50, "100"

HELP = subprocess.run([args.bin, "--help"], capture_output=True, text=True).stdout
BIG = "100000000"


def supported(*flags):
    """The flags (with their values) this build knows."""
    kept = []
    for flag, value in zip(flags[::2], flags[1::2]):
        if flag in HELP:
            kept += [flag, value]
    return kept


class Server:
    """retrylab on a free port with its own database, its limits opened for the benchmark."""

    def __init__(self, *extra):
        self.dir = tempfile.mkdtemp(prefix="lean-bench-")
        flags = supported(
            "--control-rate-per-s", BIG, "--control-burst", BIG, "--endpoint-rate-per-s", BIG,
            "--endpoint-burst", BIG, "--max-outside-keys-per-lab", BIG, "--max-outside-keys", BIG, "--cold-keys-per-lab", BIG,
            "--max-labs", "5000", "--max-burst", "10000", "--max-active-messages-per-lab", "20000",
            "--max-connections-per-ip", "100000", "--max-subscribers", "100000",
            "--lab-create-burst", BIG, "--lab-creates-per-hour", BIG)
        self.process = subprocess.Popen(
            [args.bin, "--addr", "127.0.0.1:0", "--db", os.path.join(self.dir, "bench.db"), *flags, *extra],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            env={**os.environ, "RUST_LOG": "warn"})
        self.url = re.search(r"http://[0-9.:]+", self.process.stdout.readline()).group(0)

    def call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method,
                                         headers={"content-type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as response:
            raw = response.read()
        return json.loads(raw) if raw else None

    def new_lab(self, downstream=None, policy=None):
        lab = self.call("POST", "/api/labs")["id"]
        if downstream:
            self.call("PUT", f"/api/labs/{lab}/downstream", downstream)
        if policy:
            self.call("PUT", f"/api/labs/{lab}/policy", policy)
        return lab

    def keys_held(self):
        """Applied keys the server holds in memory, whole or as fingerprints (from /metrics: a
        snapshot would carry every outside message, too large to poll)."""
        with urllib.request.urlopen(self.url + "/metrics", timeout=120) as response:
            text = response.read().decode()
        return sum(int(n) for n in re.findall(r'idempotency_keys\{held="[a-z]+"\} ([0-9]+)', text))

    def rss_kb(self):
        with open(f"/proc/{self.process.pid}/status") as status:
            return int(next(line for line in status if line.startswith("VmRSS")).split()[1])

    def stop(self):
        self.process.terminate()
        self.process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def wrk(url, script, seconds):
    out = subprocess.run(["wrk", "-t2", "-c128", f"-d{seconds}s", "-s", script, url],
                         capture_output=True, text=True, check=True).stdout
    return float(re.search(r"Requests/sec:\s+([0-9.]+)", out).group(1))


HERE = os.path.dirname(os.path.abspath(__file__))
NEW_KEYS = os.path.join(HERE, "wrk", "new-keys.lua")
REPEATS = os.path.join(HERE, "wrk", "repeat.lua")


def empty_lab_kb():
    server = Server()
    try:
        server.new_lab()
        time.sleep(0.5)
        before = server.rss_kb()
        for _ in range(args.labs):
            server.new_lab()
        time.sleep(0.5)
        return (server.rss_kb() - before) / args.labs
    finally:
        server.stop()


def keys_mb():
    """RSS growth while `--keys` distinct keys are applied, scaled to exactly that many."""
    server = Server()
    try:
        lab = server.new_lab({"latency_ms": [0, 0]})
        time.sleep(0.5)
        before = server.rss_kb()
        # wrk sends new keys until the lab has applied enough of them.
        runner = subprocess.Popen(["wrk", "-t2", "-c64", "-d600s", "-s", NEW_KEYS,
                                   f"{server.url}/labs/{lab}/downstream"], stdout=subprocess.DEVNULL)
        try:
            while server.keys_held() < args.keys:
                time.sleep(0.2)
        finally:
            runner.terminate()
            runner.wait()
        time.sleep(1)
        applied = server.keys_held()
        return (server.rss_kb() - before) / 1024 * args.keys / applied, applied
    finally:
        server.stop()


def throughput(bare_url):
    server = Server()
    try:
        lab = server.new_lab({"latency_ms": [0, 0]})
        path = f"/labs/{lab}/downstream"
        bare_new = wrk(bare_url + path, NEW_KEYS, args.seconds)
        lab_new = wrk(server.url + path, NEW_KEYS, args.seconds)
        bare_repeat = wrk(bare_url + path, REPEATS, args.seconds)
        lab_repeat = wrk(server.url + path, REPEATS, args.seconds)
        return lab_new / bare_new, lab_repeat / bare_repeat, lab_new, lab_repeat
    finally:
        server.stop()


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))] if values else float("nan")


def timer(messages):
    """A flaky burst with the default connection slots: every wait's timer error (actual minus
    planned minus queued) and its time queued for a slot, p50 and p99, in ms."""
    server = Server()
    try:
        lab = server.new_lab({"mode": "flaky", "failure_rate": 0.5, "latency_ms": [5, 20], "retry_after_s": 0},
                             {"jitter": "equal", "base_ms": 100, "cap_ms": 1000, "max_attempts": 4,
                              "timeout_ms": 10000})
        server.call("POST", f"/api/labs/{lab}/bursts", {"count": messages})
        deadline = time.time() + 300
        while True:
            counters = server.call("GET", f"/api/labs/{lab}")["counters"]
            if counters["delivered"] + counters["dead_letter"] >= messages:
                break
            if time.time() > deadline:
                raise SystemExit(f"the {messages}-message burst did not settle in 300 s: {counters}")
            time.sleep(0.5)
        snapshot = server.call("GET", f"/api/labs/{lab}")
        errors, queued = [], []
        for message in snapshot["messages"]:
            for attempt in message["attempts"]:
                wait = attempt.get("wait")
                if not wait or wait.get("actual_ms") is None:
                    continue
                q = wait.get("queued_ms") or 0
                errors.append(wait["actual_ms"] - wait["planned_ms"] - q)
                queued.append(q)
        return (percentile(errors, 50), percentile(errors, 99), percentile(queued, 50), percentile(queued, 99),
                len(errors))
    finally:
        server.stop()


def main():
    only = args.only.split(",")
    bare = subprocess.Popen([args.bare, "127.0.0.1:3998"], stdout=subprocess.DEVNULL)
    time.sleep(0.5)
    rows = {}

    def note(name, value):
        rows.setdefault(name, []).append(value)

    try:
        for run in range(1, args.runs + 1):
            print(f"run {run} of {args.runs}", file=sys.stderr)
            if "empty" in only:
                note("memory per empty lab (kB)", empty_lab_kb())
            if "keys" in only:
                grown, applied = keys_mb()
                note(f"RSS growth for {args.keys:,} applied keys (MB)", grown)
            if "throughput" in only:
                new_ratio, repeat_ratio, lab_new, lab_repeat = throughput("http://127.0.0.1:3998")
                note("endpoint, new keys: lab / bare", new_ratio)
                note("endpoint, repeats: lab / bare", repeat_ratio)
                note("endpoint, new keys (requests/s)", lab_new)
                note("endpoint, repeats (requests/s)", lab_repeat)
            for messages in map(int, args.messages.split(",")) if "timer" in only else ():
                e50, e99, q50, q99, waits = timer(messages)
                note(f"{messages:,} messages: timer error p50 (ms)", e50)
                note(f"{messages:,} messages: timer error p99 (ms)", e99)
                note(f"{messages:,} messages: queued for a slot p50 (ms)", q50)
                note(f"{messages:,} messages: queued for a slot p99 (ms)", q99)
                note(f"{messages:,} messages: waits measured", waits)
    finally:
        bare.terminate()

    print(f"| {args.bin} | min | median | max |")
    print("| --- | ---: | ---: | ---: |")
    for name, values in rows.items():
        shown = [f"{v:,.2f}" if isinstance(v, float) and abs(v) < 10 else f"{v:,.0f}" for v in
                 (min(values), statistics.median(values), max(values))]
        print(f"| {name} | {' | '.join(shown)} |")


main()
