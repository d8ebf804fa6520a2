#!/usr/bin/env python3
"""An outside client floods one lab's endpoint: 2,000 requests of 60 kB, each with a new key,
16 at a time. Prints the answers by status, and the server's RSS and database growth.

    python3 scripts/endpoint-flood.py target/release/retrylab [REQUESTS]

REQUESTS (default 2000) sets how many are sent.
"""
import collections, concurrent.futures, json, os, re, subprocess, sys, tempfile, time, urllib.request, uuid

binary = sys.argv[1] if len(sys.argv) > 1 else "target/release/retrylab"
requests = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
work = tempfile.mkdtemp()
db = os.path.join(work, "flood.db")
server = subprocess.Popen([binary, "--addr", "127.0.0.1:0", "--db", db],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
base = re.search(r"http://[0-9.:]+", server.stdout.readline()).group(0)


def rss_kb():
    with open(f"/proc/{server.pid}/status") as status:
        return int(next(l for l in status if l.startswith("VmRSS")).split()[1])


def db_bytes():
    return sum(os.path.getsize(db + suffix) for suffix in ("", "-wal") if os.path.exists(db + suffix))


lab = json.load(urllib.request.urlopen(urllib.request.Request(base + "/api/labs", method="POST")))["id"]
body = json.dumps({"blob": "x" * 60_000}).encode()


def send(_):
    request = urllib.request.Request(f"{base}/labs/{lab}/downstream", data=body, method="POST",
                                     headers={"Content-Type": "application/json", "Idempotency-Key": str(uuid.uuid4())})
    try:
        return urllib.request.urlopen(request).status
    except urllib.error.HTTPError as e:
        return e.code


time.sleep(0.5)
rss_before, db_before = rss_kb(), db_bytes()
started = time.time()
with concurrent.futures.ThreadPoolExecutor(16) as pool:
    statuses = collections.Counter(pool.map(send, range(requests)))
elapsed = time.time() - started
time.sleep(0.5)
import sqlite3
with sqlite3.connect(db) as store:
    keys, stored = store.execute(
        "SELECT COUNT(*), SUM(LENGTH(key) + LENGTH(request_body) + LENGTH(response)) FROM idempotency_keys").fetchone()
print(f"{dict(statuses)} in {elapsed:.1f} s; RSS +{(rss_kb() - rss_before) / 1024:.1f} MB; "
      f"database and WAL files +{(db_bytes() - db_before) / 1e6:.2f} MB; {keys} keys stored in {stored / 1e3:.1f} kB")
server.terminate()
server.wait()
