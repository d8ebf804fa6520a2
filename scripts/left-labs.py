#!/usr/bin/env python3
"""What labs whose pages left cost while they stay busy: LABS labs take steady traffic at RATE
messages/s, a page watches each for a second and leaves, and after SECONDS s the server's RSS
and its event windows' bytes (from /metrics) are read. Two servers of the same build run one
after the other: one lets a lab's event window rest WINDOW_MS after its page left
(--idle-event-window-ms), the other only after an hour (as if busy labs never rested), so the
difference is what resting saves.

    cargo build --release --bin retrylab && python3 scripts/left-labs.py [--labs 50] [--rate 10] [--seconds 60]
"""
import argparse
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request

from lab_api import call

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--bin", default="target/release/retrylab")
parser.add_argument("--labs", type=int, default=50)
parser.add_argument("--rate", type=float, default=10)
parser.add_argument("--seconds", type=float, default=60)
parser.add_argument("--window-ms", type=int, default=5_000, help="--idle-event-window-ms of the resting server")
parser.add_argument("--quick", action="store_true", help="5 labs for 4 s (CI proves the script still works)")
args = parser.parse_args()
if args.quick:
    args.labs, args.seconds, args.window_ms = 5, 4, 1_000
if not os.path.exists(args.bin) and args.bin == "target/release/retrylab":
    args.bin = "target/debug/retrylab"


def watch_briefly(base, lab):
    """A page opens the lab's event stream, reads it for a second, and leaves."""
    deadline = time.monotonic() + 1
    try:
        with urllib.request.urlopen(f"{base}/api/labs/{lab}/events", timeout=1) as stream:
            while time.monotonic() < deadline and stream.read1(1 << 16):
                pass
    except OSError:
        pass  # a read timed out: the page leaves


def run(window_ms):
    directory = tempfile.mkdtemp(prefix="retrylab-left-")
    server = subprocess.Popen(
        [args.bin, "--addr", "127.0.0.1:0", "--db", os.path.join(directory, "left.db"),
         "--idle-event-window-ms", str(window_ms), "--sweep-interval-ms", "500",
         "--max-labs", str(args.labs + 10), "--lab-create-burst", str(args.labs + 10),
         "--lab-creates-per-hour", str(10 * args.labs), "--control-rate-per-s", "100000",
         "--control-burst", "100000", "--max-connections-per-ip", "100000"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        base = next(m.group(0) for line in server.stdout if (m := re.search(r"http://127\.0\.0\.1:\d+", line)))
        labs = [call(base, "POST", "/api/labs", {})["id"] for _ in range(args.labs)]
        for lab in labs:
            call(base, "PUT", f"/api/labs/{lab}/traffic", {"rate_per_s": args.rate, "arrivals": "even", "for_ms": None})
        pages = [threading.Thread(target=watch_briefly, args=(base, lab)) for lab in labs]
        for page in pages:
            page.start()
        for page in pages:
            page.join()
        time.sleep(args.seconds)
        with urllib.request.urlopen(base + "/metrics", timeout=30) as response:
            metrics = response.read().decode()
        window = int(float(re.search(r"^retrylab_event_window_bytes (\S+)", metrics, re.M).group(1)))
        with open(f"/proc/{server.pid}/status") as status:
            rss_kb = int(next(line for line in status if line.startswith("VmRSS")).split()[1])
        return rss_kb, window
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(directory, ignore_errors=True)


rested_rss, rested_window = run(args.window_ms)
kept_rss, kept_window = run(3_600_000)
print(f"{args.labs} labs at {args.rate:g} messages/s, pages left, {args.seconds:g} s later:")
print(f"  resting after {args.window_ms} ms: RSS {rested_rss / 1024:.1f} MiB, event windows {rested_window} bytes")
print(f"  resting after an hour: RSS {kept_rss / 1024:.1f} MiB, event windows {kept_window} bytes")
print(f"  saved: {(kept_rss - rested_rss) / args.labs:.0f} kB of RSS a lab, "
      f"{(kept_window - rested_window) / args.labs / 1024:.0f} KiB of event window a lab")
assert rested_window < kept_window, "the labs whose pages left kept their event windows"
