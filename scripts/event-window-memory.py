#!/usr/bin/env python3
"""Memory held by the event window: a lab owes 2,000 deliveries (down, long backoff), then
"crash the client" is pressed N times; each recovery publishes an event carrying the whole
lab's snapshot. Prints the server's RSS before and after. BENCHMARKS.md has the figures.

    python3 scripts/event-window-memory.py target/debug/retrylab EVENT_WINDOW_BYTES N [flags...]

MESSAGES (default 2000) sets how many deliveries the lab owes.
"""
import json, os, re, subprocess, sys, tempfile, time, urllib.request
def call(base, method, path, body=None):
    req = urllib.request.Request(base + path, method=method, data=None if body is None else json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req) as r:
        return json.loads(r.read() or b"null")
def rss(pid):
    return int(re.search(r"VmRSS:\s+(\d+)", open(f"/proc/{pid}/status").read()).group(1)) // 1024
binary, window_bytes, crashes = sys.argv[1], sys.argv[2], int(sys.argv[3])
db = tempfile.mktemp(suffix=".db")
p = subprocess.Popen([binary, "--addr", "127.0.0.1:0", "--db", db, "--control-burst", "100000",
                      "--control-rate-per-s", "1000", "--event-window-bytes", window_bytes, *sys.argv[4:]], stdout=subprocess.PIPE,
                     env={**os.environ, "RUST_LOG": "error"})
base = re.search(rb"(http://[^/ ]+)", p.stdout.readline()).group(1).decode()
lab = call(base, "POST", "/api/labs")["id"]
call(base, "PUT", f"/api/labs/{lab}/policy", {"base_ms": 600000, "cap_ms": 600000, "max_attempts": 2, "honor_retry_after": False})
call(base, "PUT", f"/api/labs/{lab}/downstream", {"mode": "down"})
messages = int(os.environ.get("MESSAGES", "2000"))
call(base, "POST", f"/api/labs/{lab}/bursts", {"count": messages})
while call(base, "GET", f"/api/labs/{lab}")["counters"]["backing_off"] < messages:
    time.sleep(0.2)
snap = len(json.dumps(call(base, "GET", f"/api/labs/{lab}")))
before = rss(p.pid)
t = time.time()
for _ in range(crashes):
    call(base, "POST", f"/api/labs/{lab}/crash-client")
time.sleep(1)
print(f"event_window_bytes={window_bytes}: snapshot {snap} bytes; RSS {before} MB before, {rss(p.pid)} MB after {crashes} crash-client calls ({time.time()-t:.1f} s)")
p.terminate(); p.wait()
