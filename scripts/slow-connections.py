#!/usr/bin/env python3
"""Slow clients against a retrylab binary: N connections each send half a request line and
then nothing. Counts how many the server still holds open after 1 s and after 7 s, and whether
a normal request is still answered meanwhile. BENCHMARKS.md has the figures.

    python3 scripts/slow-connections.py target/debug/retrylab 1000 [retrylab flags...]
"""
import asyncio, sys, time, subprocess, os, tempfile, re

async def opened(port):
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(b"GET /healthz HT")
    await w.drain()
    return r, w

async def still_open(conns):
    async def probe(r):
        try:
            while True:
                data = await asyncio.wait_for(r.read(4096), 0.05)
                if data == b"":
                    return False
        except asyncio.TimeoutError:
            return True
        except Exception:
            return False
    return sum(await asyncio.gather(*(probe(r) for r, _ in conns)))

async def healthz(port):
    t = time.monotonic()
    try:
        r, w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 2)
        w.write(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        data = await asyncio.wait_for(r.read(100), 2)
        return data.split(b"\r\n")[0].decode(), round((time.monotonic() - t) * 1000)
    except Exception as e:
        return f"failed: {type(e).__name__}", None

async def main(binary, n, extra):
    db = tempfile.mktemp(suffix=".db")
    proc = subprocess.Popen([binary, "--addr", "127.0.0.1:0", "--db", db, *extra],
                            stdout=subprocess.PIPE, env={**os.environ, "RUST_LOG": "error"})
    port = int(re.search(rb":(\d+)/", proc.stdout.readline()).group(1))
    conns = []
    for _ in range(n):
        try:
            conns.append(await opened(port))
        except Exception:
            pass
    print(f"{' '.join(extra) or 'defaults'}: opened {len(conns)} slow connections")
    await asyncio.sleep(1)
    print(f"  after 1 s: {await still_open(conns)} still open; /healthz: {await healthz(port)}")
    await asyncio.sleep(6)
    print(f"  after 7 s: {await still_open(conns)} still open; /healthz: {await healthz(port)}")
    proc.terminate(); proc.wait()

binary, n = sys.argv[1], int(sys.argv[2])
asyncio.run(main(binary, n, sys.argv[3:]))
