#!/usr/bin/env python3
"""Marc Brooker's retry experiment on real requests (issue 29): an endpoint that fails half
its requests (`flaky`, failure_rate 0.5) under steady traffic, and for each client protection
the amplification (requests / new messages) and the success rate (delivered / new messages),
with 1, 10 and 1,000 clients, each protection per client and shared by all of them.

Every row has the same client: 4 attempts (3 retries), equal-jitter backoff from 10 ms, so the
rows differ only in the protection, as in his simulator (each of his strategies allows 3
retries). His figures, simulated: 3 retries 1.89x and 93.5 %; token bucket 1.14x and 57 %;
circuit breaker 1.00x and 50 %; with 1,000 clients the per-client token bucket 1.92x.

    cargo build --release --bin retrylab && python3 scripts/brooker-experiment.py

--bin another build; --seconds of traffic per row (5); --rate messages a second (200);
--clients the client counts (1,10,1000); --only token_bucket the rows of one protection. --quick: one second at 50 a second, 1 and 10 clients
(CI proves the script works; its figures mean little). Prints a markdown table for BENCHMARKS.md.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--bin", default="target/release/retrylab")
parser.add_argument("--seconds", type=float, default=5)
parser.add_argument("--rate", type=float, default=200)
parser.add_argument("--clients", default="1,10,1000")
parser.add_argument("--only", default="", help="the rows whose protection starts with this")
parser.add_argument("--quick", action="store_true")
args = parser.parse_args()
if args.quick:
    args.seconds, args.rate, args.clients = 1, 50, "1,10"

BIG = "100000000"
DOWNSTREAM = {"mode": "flaky", "failure_rate": 0.5, "latency_ms": [1, 5], "retry_after_s": 0}
CLIENT = {"base_ms": 10, "cap_ms": 200, "timeout_ms": 5000, "max_attempts": 4, "jitter": "equal"}
# (row name, protection or None); each protection with its source's defaults.
PROTECTIONS = [
    ("3 retries, no protection", None),
    ("token_bucket", {"kind": "token_bucket"}),
    ("ratio_breaker, retries only", {"kind": "ratio_breaker", "retries_only": True}),
    ("aws_standard", {"kind": "aws_standard"}),
    ("grpc", {"kind": "grpc"}),
    ("sre", {"kind": "sre"}),
    ("retry_budget", {"kind": "retry_budget"}),
    ("envoy", {"kind": "envoy"}),
]
HIS = {
    "3 retries, no protection": "1.89x, 93.5 %",
    "token_bucket": "1.14x, 57 % (1,000 clients per client: 1.92x)",
    "ratio_breaker, retries only": "1.00x, 50 % (his breaker)",
}


class Server:
    """retrylab on a free port with its own database, its limits opened for the experiment."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="brooker-")
        flags = ["--control-rate-per-s", BIG, "--control-burst", BIG, "--endpoint-rate-per-s", BIG,
                 "--endpoint-burst", BIG, "--max-active-messages-per-lab", "100000",
                 "--max-messages-per-lab", "1000000", "--snapshot-bytes-per-s", BIG,
                 "--snapshot-burst-bytes", BIG, "--lab-create-burst", BIG, "--lab-creates-per-hour", BIG]
        self.process = subprocess.Popen(
            [args.bin, "--addr", "127.0.0.1:0", "--db", os.path.join(self.dir, "brooker.db"), *flags],
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

    def stop(self):
        self.process.terminate()
        self.process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def run(server, clients, protection, scope):
    """One row: steady traffic into a fresh lab until it settles; (amplification, success)."""
    lab = server.call("POST", "/api/labs")["id"]
    server.call("PUT", f"/api/labs/{lab}/downstream", DOWNSTREAM)
    protections = [] if protection is None else [{**protection, "scope": scope}]
    server.call("PUT", f"/api/labs/{lab}/policy", {**CLIENT, "clients": clients, "protections": protections})
    server.call("PUT", f"/api/labs/{lab}/traffic",
                {"rate_per_s": args.rate, "arrivals": "even", "for_ms": int(args.seconds * 1000)})
    deadline = time.monotonic() + args.seconds + 120
    while True:
        time.sleep(0.5)
        snapshot = server.call("GET", f"/api/labs/{lab}")
        counters, traffic = snapshot["counters"], snapshot["traffic"]
        done = counters["delivered"] + counters["dead_letter"]
        if traffic["rate_per_s"] == 0 and done == traffic["sent"] and done > 0:
            break
        if time.monotonic() > deadline:
            sys.exit(f"lab {lab} did not settle: {counters}, {traffic}")
    sent = traffic["sent"]
    return counters["requests"] / sent, counters["delivered"] / sent, sent


def main():
    server = Server()
    try:
        counts = [int(c) for c in args.clients.split(",")]
        print(f"\n#### Brooker's experiment: flaky 0.5, {args.rate:g} messages/s for {args.seconds:g} s, 4 attempts\n")
        print("| protection | scope | " + " | ".join(f"{c} client{'s' if c > 1 else ''}" for c in counts)
              + " | Brooker (simulated) |")
        print("| --- | --- | " + " | ".join("---" for _ in counts) + " | --- |")
        for name, protection in [row for row in PROTECTIONS if row[0].startswith(args.only)]:
            for scope in ["per_client"] if protection is None else ["per_client", "shared"]:
                cells = []
                for clients in counts:
                    amplification, success, sent = run(server, clients, protection, scope)
                    print(f"  {name} {scope} {clients} clients: {sent} messages, {amplification:.2f}x, "
                          f"{success:.1%}", file=sys.stderr)
                    cells.append(f"{amplification:.2f}x, {success * 100:.1f} %")
                his = HIS.get(name, "-") if scope == "per_client" else "-"
                print(f"| {name} | {scope if protection else '-'} | " + " | ".join(cells) + f" | {his} |")
                sys.stdout.flush()
    finally:
        server.stop()


main()
