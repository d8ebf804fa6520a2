#!/usr/bin/env python3
"""Whether the NDJSON export of the dead-letter queue streams in bounded memory: the server's
RSS growth while a slow reader takes `GET /api/labs/{lab}/dead-letters?format=ndjson` of N
dead letters, beside the size of that body, and beside the RSS growth of one snapshot
(`GET /api/labs/{lab}`, built whole before it is sent) of the same lab in the same run.

    python3 scripts/export-memory.py [--bin target/release/retrylab] [--letters 10000]

Each run starts a fresh server on a temporary store, fills a lab with N dead letters (the
endpoint down, max_attempts 1, bursts of --max-burst), lets it settle, then reads the export
through a socket with a small receive buffer, --chunk bytes at a time with a pause between, so
the server must hold back while the reader lags; a sampler reads VmRSS from /proc every few
ms. A one-letter export and an empty lab's snapshot go first, so one-time costs are not
counted as growth. The snapshot is read after the export, on the same server: memory the export freed may be
reused by it, which makes its growth smaller, not larger. Prints min / median / max over
--runs runs. Without a release build it measures the debug one.

With --contention it measures what exports and bulk actions cost the other labs instead: a
probe posts to another lab's endpoint one request at a time, first alone and then while
--exports exports of the N letters are read at full speed at once (each from a client address
of its own, behind --client-ip-header, so none is held to another's allowance of bytes); then
the bulk actions on the N letters (a dry run, quarantine and back, a redrive started and
cancelled, a delete by filter) are timed one by one. The time an action takes to answer bounds
how long it held the lab's lock; the server's own count of long holds (`/metrics`,
`retrylab_lab_lock_long_holds`, and the longest hold) says how long it did: each action's row
gives the longest of its holds, to the step of that count it reached (1, 5, 10, 25, 50, 100 ms...),
and the exact figure when it was the longest hold so far.
"""
import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--bin", default="target/release/retrylab")
parser.add_argument("--letters", type=int, default=10_000)
parser.add_argument("--max-burst", type=int, default=2_000, help="messages per burst (the server's --max-burst)")
parser.add_argument("--runs", type=int, default=3)
parser.add_argument("--chunk", type=int, default=4096, help="bytes read from the export at a time")
parser.add_argument("--pause-ms", type=float, default=2.0, help="pause between two reads of the export")
parser.add_argument("--quick", action="store_true", help="300 letters, one run (CI proves the script still works)")
parser.add_argument("--contention", action="store_true", help="time another lab's endpoint during exports, and bulk actions")
parser.add_argument("--exports", type=int, default=8, help="exports read at once, with --contention")
args = parser.parse_args()
if args.quick:
    args.letters, args.runs, args.max_burst, args.pause_ms = 300, 1, 100, 0.5
if not os.path.exists(args.bin) and args.bin == "target/release/retrylab":
    args.bin = "target/debug/retrylab"
BIG = "100000000"


class Server:
    """retrylab on a free port with its own store, its rate limits opened for the measurement."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="export-memory-")
        flags = ["--control-rate-per-s", BIG, "--control-burst", BIG, "--max-burst", str(args.max_burst),
                 "--max-messages-per-lab", str(max(20_000, args.letters)),
                 "--max-active-messages-per-lab", str(max(5_000, args.max_burst)),
                 "--snapshot-bytes-per-s", BIG, "--snapshot-burst-bytes", "1000000000",
                 "--endpoint-rate-per-s", BIG, "--endpoint-burst", BIG, "--client-ip-header", "x-client-ip",
                 # The probe is an outside caller with a new key each request: thousands of them.
                 "--max-outside-keys-per-lab", BIG, "--max-outside-keys", BIG]
        self.process = subprocess.Popen(
            [args.bin, "--addr", "127.0.0.1:0", "--db", os.path.join(self.dir, "export.db"), *flags],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env={**os.environ, "RUST_LOG": "warn"})
        self.url = re.search(r"http://[0-9.:]+", self.process.stdout.readline()).group(0)
        self.host, self.port = self.url.removeprefix("http://").rsplit(":", 1)

    def call(self, method, path, body=None, headers=None):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method,
                                         headers={"content-type": "application/json", **(headers or {})})
        with urllib.request.urlopen(request, timeout=120) as response:
            raw = response.read()
        return json.loads(raw) if raw else None

    def rss_kb(self):
        with open(f"/proc/{self.process.pid}/status") as status:
            return int(next(line for line in status if line.startswith("VmRSS")).split()[1])

    def stop(self):
        self.process.terminate()
        self.process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class Peak:
    """The highest RSS seen from start to stop, sampled every 2 ms in a thread."""

    def __init__(self, server):
        self.server, self.peak, self.running = server, server.rss_kb(), True
        self.thread = threading.Thread(target=self.sample, daemon=True)
        self.thread.start()

    def sample(self):
        while self.running:
            self.peak = max(self.peak, self.server.rss_kb())
            time.sleep(0.002)

    def stop(self):
        self.running = False
        self.thread.join()
        return max(self.peak, self.server.rss_kb())


def slow_get(server, path):
    """The body of GET `path`, read through a small receive window a chunk at a time."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)  # before connect: caps the window
    sock.connect((server.host, int(server.port)))
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {server.host}\r\nConnection: close\r\n\r\n".encode())
    raw = bytearray()
    while True:
        piece = sock.recv(args.chunk)
        if not piece:
            break
        raw += piece
        time.sleep(args.pause_ms / 1000)
    sock.close()
    head, _, body = bytes(raw).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head[:200]
    if b"transfer-encoding: chunked" in head.lower():
        body = unchunk(body)
    return body


def unchunk(body):
    out, at = bytearray(), 0
    while True:
        end = body.index(b"\r\n", at)
        size = int(body[at:end].split(b";")[0], 16)
        if size == 0:
            return bytes(out)
        out += body[end + 2:end + 2 + size]
        at = end + 2 + size + 2


def fill(server):
    lab = server.call("POST", "/api/labs")["id"]
    server.call("PUT", f"/api/labs/{lab}/policy", {"max_attempts": 1})
    server.call("PUT", f"/api/labs/{lab}/downstream", {"mode": "down"})
    depth, sent = 0, 0
    while sent < args.letters:
        count = min(args.max_burst, args.letters - sent)
        server.call("POST", f"/api/labs/{lab}/bursts", {"count": count})
        sent += count
        while (depth := dead_letters(server, lab)) < sent:
            time.sleep(0.05)
    assert depth == args.letters, depth
    return lab


def dead_letters(server, lab):
    page = server.call("GET", f"/api/labs/{lab}/dead-letters?limit=1")
    return sum(page["facets"]["cause"].values())


def one_run():
    server = Server()
    try:
        lab = fill(server)
        # One-time costs (the code paths' first use, the store's cache, allocator arenas) are
        # paid by a one-letter export and an empty lab's snapshot, so the figures are the growth.
        slow_get(server, f"/api/labs/{lab}/dead-letters?format=ndjson&q=%231")
        server.call("GET", f"/api/labs/{server.call('POST', '/api/labs')['id']}")
        time.sleep(1.0)
        before = server.rss_kb()
        peak = Peak(server)
        body = slow_get(server, f"/api/labs/{lab}/dead-letters?format=ndjson")
        export_peak = peak.stop()
        lines = body.count(b"\n")
        assert lines == args.letters, f"{lines} lines exported of {args.letters}"
        time.sleep(0.5)
        after = server.rss_kb()
        peak = Peak(server)
        with urllib.request.urlopen(server.url + f"/api/labs/{lab}", timeout=120) as response:
            snapshot = response.read()
        snapshot_peak = peak.stop()
        assert len(json.loads(snapshot)["dead_letters"]) == args.letters
        return {
            "export body KB": len(body) / 1024,
            "export RSS growth KB": export_peak - before,
            "export growth / body": (export_peak - before) * 1024 / len(body),
            "snapshot body KB": len(snapshot) / 1024,
            "snapshot RSS growth KB": snapshot_peak - after,
            "snapshot growth / body": (snapshot_peak - after) * 1024 / len(snapshot),
            "RSS before KB": before,
        }
    finally:
        server.stop()


def percentile(values, p):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def probe(server, lab, seconds, latencies):
    """Posts to `lab`'s endpoint one request at a time for `seconds`, each a new key."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        key = f"probe-{len(latencies)}-{time.monotonic_ns()}"
        started = time.monotonic()
        server.call("POST", f"/labs/{lab}/downstream", {"order": 1}, {"idempotency-key": key})
        latencies.append((time.monotonic() - started) * 1000)


def lock_holds(server):
    """The server's count of lab-lock holds at each length (ms), and its longest hold (ms)."""
    with urllib.request.urlopen(server.url + "/metrics", timeout=60) as response:
        text = response.read().decode()
    steps = {int(m.group(1)): int(m.group(2))
             for m in re.finditer(r'^retrylab_lab_lock_long_holds_total\{at_least_ms="(\d+)"\} (\d+)', text, re.M)}
    longest = re.search(r"^retrylab_lab_lock_longest_hold_seconds (\S+)", text, re.M)
    return steps, float(longest.group(1)) * 1000 if longest else 0.0


def held_during(before, after):
    """The longest lock hold between two reads of `lock_holds`, as (at least, below) in ms: exact
    (both the same) when it was the longest so far, else between the highest step that counted
    a hold and the next (0 to 1 when none reached 1 ms)."""
    (steps_before, longest_before), (steps_after, longest_after) = before, after
    if longest_after > longest_before:
        return longest_after, longest_after
    steps = sorted(steps_after)
    grown = [step for step in steps if steps_after[step] > steps_before.get(step, 0)]
    at_least = max(grown, default=0)
    below = next((step for step in steps if step > at_least), float("inf"))
    return at_least, below


def timed(server, lab, action):
    """How long `action` took to answer, the longest a request to the same lab's endpoint
    (which takes the lab's lock) waited meanwhile, and the longest hold of any lab's lock the
    server counted meanwhile (the action's own, and its commit's)."""
    waits, running = [], True

    def watch():
        while running:
            key = f"watch-{time.monotonic_ns()}"
            started = time.monotonic()
            try:
                server.call("POST", f"/labs/{lab}/downstream", {"order": 1}, {"idempotency-key": key})
            except urllib.error.HTTPError:
                pass  # the endpoint is down: a 503 still went through the lab
            waits.append((time.monotonic() - started) * 1000)

    watcher = threading.Thread(target=watch)
    watcher.start()
    time.sleep(0.05)
    holds = lock_holds(server)
    started = time.monotonic()
    action()
    took = (time.monotonic() - started) * 1000
    running = False
    watcher.join()
    return took, max(waits), held_during(holds, lock_holds(server))


def contention_run():
    server = Server()
    try:
        lab = fill(server)
        other = server.call("POST", "/api/labs")["id"]
        server.call("PUT", f"/api/labs/{other}/downstream", {"latency_ms": [0, 0]})
        export = f"/api/labs/{lab}/dead-letters?format=ndjson"
        alone = []
        probe(server, other, 2.0, alone)
        during, walls = [], []

        def read_export(n):
            request = urllib.request.Request(server.url + export, headers={"x-client-ip": f"10.0.0.{n + 1}"})
            started = time.monotonic()
            with urllib.request.urlopen(request, timeout=300) as response:
                lines = response.read().count(b"\n")
            walls.append(time.monotonic() - started)
            assert lines == args.letters, f"{lines} lines exported of {args.letters}"

        readers = [threading.Thread(target=read_export, args=(n,)) for n in range(args.exports)]
        for reader in readers:
            reader.start()
        while any(reader.is_alive() for reader in readers):
            probe(server, other, 0.2, during)
        for reader in readers:
            reader.join()
        assert len(walls) == args.exports, f"{len(walls)} of {args.exports} exports finished"
        path = f"/api/labs/{lab}/dead-letters"
        everything = {"filter": {"cause": "attempts_used_up"}}
        figures = {
            "endpoint alone p50 ms": percentile(alone, 50),
            "endpoint alone p99 ms": percentile(alone, 99),
            "endpoint during exports p50 ms": percentile(during, 50),
            "endpoint during exports p99 ms": percentile(during, 99),
            "endpoint during exports max ms": max(during),
            "slowest export s": max(walls),
        }
        actions = {
            "dry run": lambda: server.call("POST", f"{path}/replay", {**everything, "dry_run": True}),
            "quarantine": lambda: server.call("POST", f"{path}/quarantine", everything),
            "back out": lambda: server.call("POST", f"{path}/quarantine", {**everything, "quarantined": False}),
            "redrive start": lambda: server.call("POST", f"{path}/replay", {**everything, "rate_per_s": 0.01}),
            "redrive cancel": lambda: server.call("POST", f"{path}/redrive/cancel"),
            "delete by filter": lambda: server.call("POST", f"{path}/delete", {**everything, "expected": args.letters}),
        }
        for name, action in actions.items():
            took, waited, held = timed(server, lab, action)
            figures[f"{name} ms"] = took
            figures[f"{name}: longest wait for the lab ms"] = waited
            figures[f"{name}: longest lock hold, at least ms"] = held[0]
            figures[f"{name}: longest lock hold, below ms"] = held[1]
        # The redrive sent its first letter as it started; against the down endpoint it may
        # come back as a new letter after the delete.
        assert dead_letters(server, lab) <= 1, "the delete took every letter"
        return figures
    finally:
        server.stop()


if args.contention:
    runs = [contention_run() for _ in range(args.runs)]
    print(f"{args.letters} dead letters, {args.exports} exports at once, {args.runs} run(s), {args.bin}. "
          "min / median / max:")
    for name in runs[0]:
        values = [run[name] for run in runs]
        print(f"  {name:48} {min(values):10.2f} {statistics.median(values):10.2f} {max(values):10.2f}")
    raise SystemExit(0)

runs = [one_run() for _ in range(args.runs)]
print(f"{args.letters} dead letters, {args.runs} run(s), {args.bin}; export read {args.chunk} B at a time, "
      f"{args.pause_ms} ms apart. min / median / max:")
for name in runs[0]:
    values = [run[name] for run in runs]
    print(f"  {name:24} {min(values):10.2f} {statistics.median(values):10.2f} {max(values):10.2f}")
