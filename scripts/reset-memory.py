#!/usr/bin/env python3
"""What labs cost after their work is done: the server's RSS after LABS labs each ran steady
traffic at RATE messages/s for SECONDS s and was then reset, ROUNDS times over; then ROUNDS
times traffic followed by a quiet spell, unwatched, past --idle-event-window-ms. A reset lab and
a quiet unwatched one should cost what an empty lab does, their event windows gone, so the RSS
should stop growing after the first round.

    python3 scripts/reset-memory.py [--bin target/release/retrylab] [--labs 12] [--rate 400] [--seconds 6] [--rounds 3]

Each lab's endpoint answers at once (0 ms), so the traffic is delivered as it arrives. The
server's own flags open its limits for the measurement and set the idle window to 2 s, checked
every 200 ms. Prints the RSS in MB after each round.
"""
import argparse
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request

from lab_api import call

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--bin", default="target/release/retrylab")
parser.add_argument("--labs", type=int, default=12)
parser.add_argument("--rate", type=float, default=400)
parser.add_argument("--seconds", type=float, default=6)
parser.add_argument("--rounds", type=int, default=3)
parser.add_argument("--quick", action="store_true", help="2 labs, 50/s for 1 s (CI proves the script still works)")
args = parser.parse_args()
if args.quick:
    args.labs, args.rate, args.seconds, args.rounds = 2, 50, 1, 1
if not os.path.exists(args.bin) and args.bin == "target/release/retrylab":
    args.bin = "target/debug/retrylab"
BIG = "100000000"


def window_mb(base):
    """The bytes all labs keep in their event windows, from /metrics (None before they were counted)."""
    with urllib.request.urlopen(base + "/metrics", timeout=60) as response:
        text = response.read().decode()
    found = re.search(r"^retrylab_event_window_bytes (\d+)", text, re.M)
    return int(found.group(1)) / 1e6 if found else None


def shown(mb):
    return "   (not counted)" if mb is None else f"{mb:7.1f} MB"


def rss_mb(process):
    with open(f"/proc/{process.pid}/status") as status:
        return int(re.search(r"VmRSS:\s+(\d+)", status.read()).group(1)) / 1024


folder = tempfile.mkdtemp(prefix="reset-memory-")
# A release from before the idle window runs without it, as a baseline.
idle = ["--idle-event-window-ms", "2000"]
if "--idle-event-window-ms" not in subprocess.run([args.bin, "--help"], capture_output=True, text=True).stdout:
    idle = []
process = subprocess.Popen(
    [args.bin, "--addr", "127.0.0.1:0", "--db", os.path.join(folder, "reset.db"), "--control-rate-per-s", BIG,
     "--control-burst", BIG, "--sweep-interval-ms", "200", *idle],
    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env={**os.environ, "RUST_LOG": "warn"})
try:
    base = re.search(r"http://[0-9.:]+", process.stdout.readline()).group(0)
    labs = [call(base, "POST", "/api/labs")["id"] for _ in range(args.labs)]
    for lab in labs:
        call(base, "PUT", f"/api/labs/{lab}/downstream", {"latency_ms": [0, 0]})
        call(base, "GET", f"/api/labs/{lab}")
    time.sleep(1)
    empty = rss_mb(process)
    print(f"{args.labs} labs, {args.rate:g}/s each for {args.seconds:g} s a round, {args.bin}; "
          f"empty: RSS {empty:.1f} MB")

    def traffic():
        for lab in labs:
            call(base, "PUT", f"/api/labs/{lab}/traffic", {"rate_per_s": args.rate, "for_ms": int(args.seconds * 1000)})
        time.sleep(args.seconds)
        # Until every lab has delivered what its traffic sent (a busy machine falls behind).
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            snapshots = [call(base, "GET", f"/api/labs/{lab}") for lab in labs]
            if all(s["counters"]["delivered"] >= s["traffic"]["sent"] for s in snapshots):
                break
            time.sleep(0.2)
        return sum(s["traffic"]["sent"] for s in snapshots)

    # Memory a process has freed is reused, not given back: what is still held shows as growth
    # from one round to the next, where freed memory would have been enough.
    for round in range(1, args.rounds + 1):
        sent = traffic()
        busy = rss_mb(process)
        for lab in labs:
            call(base, "POST", f"/api/labs/{lab}/reset")
        time.sleep(0.5)
        print(f"  reset round {round}: {sent:6} messages; RSS after the traffic {busy:7.1f} MB, "
              f"after the resets {rss_mb(process):7.1f} MB; event windows {shown(window_mb(base))}")
    for round in range(1, args.rounds + 1):
        sent = traffic()
        busy, windows = rss_mb(process), window_mb(base)
        time.sleep(3)  # past the idle window, nobody watching
        print(f"  quiet round {round}: {sent:6} messages (in all); RSS after the traffic {busy:7.1f} MB, "
              f"after the quiet {rss_mb(process):7.1f} MB; event windows {shown(windows)} then "
              f"{shown(window_mb(base))}")
finally:
    process.terminate()
    process.wait()
    shutil.rmtree(folder, ignore_errors=True)
