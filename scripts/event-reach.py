#!/usr/bin/env python3
"""How far back a lab's event window reaches: one lab takes steady traffic at RATE messages/s
for SECONDS s, then a page resumes its event stream from ever older ids (`Last-Event-ID`) until
one gets a snapshot instead of the events it missed. Prints how many events the oldest resume
that worked got back, and the bytes of their text.

    python3 scripts/event-reach.py [--bin target/release/retrylab] [--rate 10] [--seconds 60] [-- --event-window-bytes N ...]

Flags after `--` go to the server. The lab's endpoint answers at once, so each message is one
attempt; run long enough for the window to fill (half a minute at the defaults).
"""
import argparse
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time

from lab_api import call

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--bin", default="target/release/retrylab")
parser.add_argument("--rate", type=float, default=10)
parser.add_argument("--seconds", type=float, default=60)
parser.add_argument("--quick", action="store_true", help="50/s for 2 s (CI proves the script still works)")
parser.add_argument("server_flags", nargs="*")
args = parser.parse_args()
if args.quick:
    args.rate, args.seconds = 50, 2
if not os.path.exists(args.bin) and args.bin == "target/release/retrylab":
    args.bin = "target/debug/retrylab"


def resumed(base, lab, last_id):
    """The events a stream resumed after `last_id` sends before it goes quiet: (name of the
    first, ids, texts)."""
    host, port = base.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    sock.settimeout(1.0)
    sock.sendall(
        f"GET /api/labs/{lab}/events HTTP/1.1\r\nHost: {host}\r\nAccept: text/event-stream\r\n"
        f"Last-Event-ID: {last_id}\r\n\r\n".encode()
    )
    received = b""
    try:
        while chunk := sock.recv(1 << 20):
            received += chunk
    except socket.timeout:
        pass
    sock.close()
    head, _, body = received.partition(b"\r\n\r\n")
    if b"transfer-encoding: chunked" in head.lower():
        body = dechunked(body)
    records = [r for r in re.split(rb"\r?\n\r?\n", body) if re.search(rb"^data:", r, re.M)]
    first = re.search(rb"^event: ?(\S+)", records[0], re.M) if records else None
    ids = [int(i) for i in re.findall(rb"^id: ?(\d+)\r?$", body, re.M)]
    texts = re.findall(rb"^data: ?(.*?)\r?$", body, re.M)
    return (first.group(1) if first else b""), ids, texts


def dechunked(body):
    """The bytes a chunked HTTP/1.1 body carries, as far as it was read."""
    out = b""
    while True:
        size_line, _, rest = body.partition(b"\r\n")
        if not rest or not size_line.strip():
            return out
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            return out
        out += rest[:size]
        body = rest[size + 2 :]


def reaches(base, lab, newest, back):
    """Whether a resume `back` events before the newest gets exactly the events it missed."""
    first, ids, _ = resumed(base, lab, newest - back)
    return first != b"snapshot" and bool(ids) and ids[0] == newest - back + 1


directory = tempfile.mkdtemp(prefix="retrylab-reach-")
server = subprocess.Popen(
    [args.bin, "--addr", "127.0.0.1:0", "--db", os.path.join(directory, "reach.db"), *args.server_flags],
    stdout=subprocess.PIPE,
    stderr=subprocess.DEVNULL,
    text=True,
)
try:
    base = next(m.group(0) for line in server.stdout if (m := re.search(r"http://127\.0\.0\.1:\d+", line)))
    lab = call(base, "POST", "/api/labs", {})["id"]
    call(base, "PUT", f"/api/labs/{lab}/traffic", {"rate_per_s": args.rate, "arrivals": "even", "for_ms": None})
    time.sleep(args.seconds)
    call(base, "PUT", f"/api/labs/{lab}/traffic", {"rate_per_s": 0, "arrivals": "even", "for_ms": None})
    time.sleep(1)
    _, ids, _ = resumed(base, lab, 0)
    newest = max(ids)
    # Doubling, then halving: the oldest resume that still gets the events it missed.
    good, back = 0, 1
    while back < newest and reaches(base, lab, newest, back):
        good, back = back, back * 2
    bad = min(back, newest)
    while bad - good > 1:
        middle = (good + bad) // 2
        good, bad = (middle, bad) if reaches(base, lab, newest, middle) else (good, middle)
    _, _, texts = resumed(base, lab, newest - good)
    text = sum(len(t) + 1 for t in texts)
    assert good > 0, "no resume got its events back"
    print(
        f"{args.seconds:g} s at {args.rate:g} messages/s ({' '.join(args.server_flags) or 'defaults'}): "
        f"{newest} events; a resume reaches back {good} events, {text} bytes of their text"
    )
finally:
    server.terminate()
    server.wait()
    shutil.rmtree(directory, ignore_errors=True)
