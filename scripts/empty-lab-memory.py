#!/usr/bin/env python3
"""Server memory per empty lab: RSS of a fresh server, then after creating 1,000 labs.

    python3 scripts/empty-lab-memory.py target/release/retrylab
"""
import json, os, re, subprocess, sys, tempfile, time, urllib.request

binary = sys.argv[1] if len(sys.argv) > 1 else "target/release/retrylab"
labs = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
work = tempfile.mkdtemp()
server = subprocess.Popen(
    [binary, "--addr", "127.0.0.1:0", "--db", os.path.join(work, "m.db"),
     "--control-rate-per-s", "1000000", "--control-burst", "1000000", "--max-labs", str(labs + 10)],
    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
base = re.search(r"http://[0-9.:]+", server.stdout.readline()).group(0)


def rss_kb():
    with open(f"/proc/{server.pid}/status") as status:
        return int(next(l for l in status if l.startswith("VmRSS")).split()[1])


def create():
    request = urllib.request.Request(base + "/api/labs", method="POST")
    return json.load(urllib.request.urlopen(request))["id"]


create()
time.sleep(0.5)
before = rss_kb()
for _ in range(labs):
    create()
time.sleep(0.5)
after = rss_kb()
server.terminate()
server.wait()
print(f"rss before {before} kB, after {labs} labs {after} kB: {(after - before) / labs:.1f} kB per empty lab")
