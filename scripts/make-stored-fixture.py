#!/usr/bin/env python3
"""Writes a small store with a running retrylab binary, and the snapshots it served.

The store's rows are the JSON of the API's types, so a renamed field would make every stored
lab unreadable. `tests/api/stored.rs` opens the database this script wrote with an earlier
release (checked in under tests/fixtures/) and checks today's build serves what that release
served. Run it again with a new release to add a newer fixture beside the old one:

    cargo build && scripts/make-stored-fixture.py target/debug/retrylab tests/fixtures/stored-0.1

It drives the real server over HTTP: a lab replayed after an outage, one whose letters came back
until they were quarantined, one whose breaker opened and closed, one timed out in slow mode
(retries answered from the stored result), one throttled with a timed setting still pending,
a lab whose listed protections stopped retries, and a comparison. Only the standard library is
used.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

FAST = {"base_ms": 10, "cap_ms": 100, "timeout_ms": 2000, "max_attempts": 3, "jitter": "equal", "seed": 7}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, binary, db):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [binary, "--addr", f"127.0.0.1:{self.port}", "--db", db],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                self.call("GET", "/healthz")
                return
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.05)
        raise SystemExit("the server did not start")

    def call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method)
        if data is not None:
            request.add_header("content-type", "application/json")
        with urllib.request.urlopen(request, timeout=30) as answer:
            text = answer.read()
            if "json" not in answer.headers.get("content-type", ""):
                return text
            return json.loads(text) if text else None

    def lab(self, policy=None, downstream=None):
        lab = self.call("POST", "/api/labs")["id"]
        self.call("PUT", f"/api/labs/{lab}/policy", {**FAST, **(policy or {})})
        self.call("PUT", f"/api/labs/{lab}/downstream", {"latency_ms": [1, 3], "retry_after_s": 0, **(downstream or {})})
        return lab

    def put(self, lab, what, body):
        return self.call("PUT", f"/api/labs/{lab}/{what}", body)

    def burst(self, lab, count):
        return self.call("POST", f"/api/labs/{lab}/bursts", {"count": count})["message_ids"]

    def replay(self, lab, body):
        return self.call("POST", f"/api/labs/{lab}/dead-letters/replay", body)

    def settle(self, lab, limit_s=60):
        deadline = time.time() + limit_s
        while time.time() < deadline:
            counters = self.call("GET", f"/api/labs/{lab}")["counters"]
            if counters["queued"] + counters["in_flight"] + counters["backing_off"] == 0:
                return
            time.sleep(0.05)
        raise SystemExit(f"lab {lab} did not settle")

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=30)


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    binary, out = sys.argv[1], sys.argv[2]
    work = tempfile.mkdtemp(prefix="retrylab-fixture-")
    db = os.path.join(work, "retrylab.db")
    server = Server(binary, db)
    labs = {}
    try:
        # Down, then healthy: three of six letters replayed and delivered, three left.
        lab = labs["outage_replay"] = server.lab(downstream={"mode": "down"})
        server.burst(lab, 6)
        server.settle(lab)
        server.put(lab, "downstream", {"mode": "healthy"})
        ids = [letter["id"] for letter in server.call("GET", f"/api/labs/{lab}")["dead_letters"]][:3]
        server.replay(lab, {"ids": ids})
        server.settle(lab)

        # Replayed against an endpoint still down until the letters are quarantined.
        lab = labs["quarantine"] = server.lab(policy={"quarantine_after": 2}, downstream={"mode": "down"})
        server.burst(lab, 4)
        for _ in range(2):
            server.settle(lab)
            server.replay(lab, {})
        server.settle(lab)

        # The breaker opens on an outage, then closes once the endpoint heals.
        breaker = {"failure_threshold": 3, "open_ms": 100, "half_open_probes": 1}
        lab = labs["breaker"] = server.lab(policy={"breaker": breaker, "max_attempts": 4}, downstream={"mode": "down"})
        server.burst(lab, 5)
        server.settle(lab)
        server.put(lab, "downstream", {"mode": "healthy"})
        time.sleep(0.2)
        server.burst(lab, 3)
        server.settle(lab)

        # Slow: the write lands after the client's timeout; the retry is answered from the store.
        lab = labs["slow"] = server.lab(
            policy={"timeout_ms": 150, "max_attempts": 3}, downstream={"mode": "slow", "slow_ms": [250, 300]}
        )
        server.burst(lab, 3)
        server.settle(lab)

        # Throttled, then a timed setting that is still pending when the server stops.
        lab = labs["throttled"] = server.lab(downstream={"mode": "throttled", "rate_per_s": 20, "burst": 2})
        server.burst(lab, 8)
        server.settle(lab)
        server.put(lab, "downstream", {"mode": "flaky", "failure_rate": 0.5, "for_ms": 3_600_000})

        # Two clients against a half-failing endpoint, each with its own token bucket and one AWS
        # retry quota shared by both: the load bins count the retries each stopped.
        protections = [{"kind": "token_bucket"}, {"kind": "aws_standard", "initial_retry_tokens": 20, "scope": "shared"}]
        lab = labs["protections"] = server.lab(
            policy={"clients": 2, "max_attempts": 4, "protections": protections},
            downstream={"mode": "flaky", "failure_rate": 0.5},
        )
        server.burst(lab, 30)
        server.settle(lab)

        comparison = server.call(
            "POST", "/api/comparisons", {"scenario": "flaky", "burst": 5, "seed": 3, "policies": ["full", "none"]}
        )["id"]
        deadline = time.time() + 120
        while not server.call("GET", f"/api/comparisons/{comparison}").get("done", False):
            if time.time() > deadline:
                raise SystemExit("the comparison did not finish")
            time.sleep(0.1)

        served = {
            "labs": {name: server.call("GET", f"/api/labs/{lab}") for name, lab in labs.items()},
            "comparisons": {"flaky": server.call("GET", f"/api/comparisons/{comparison}")},
        }
    finally:
        server.stop()
    os.makedirs(out, exist_ok=True)
    shutil.copyfile(db, os.path.join(out, "retrylab.db"))
    with open(os.path.join(out, "served.json"), "w") as f:
        json.dump(served, f, indent=1, sort_keys=True)
        f.write("\n")
    shutil.rmtree(work)
    size = os.path.getsize(os.path.join(out, "retrylab.db"))
    print(f"wrote {out}/retrylab.db ({size} bytes) and served.json: {len(labs)} labs, 1 comparison")


if __name__ == "__main__":
    main()
