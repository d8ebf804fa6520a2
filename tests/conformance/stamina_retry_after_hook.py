"""stamina around httpx, with a backoff hook that returns the Retry-After (stamina's own
recipe for honouring the header), its default waits otherwise.

What stamina 26.1.0 does (stamina/_core.py):
- Retry-After: a hook passed as `on=` may return a float; `_RetryContextIterator` then sleeps
  exactly that (`_jittered_backoff_for_rcs` returns the custom backoff as is): no jitter on top.
- Backoff and jitter without the header (`_compute_backoff`): `min(wait_max, wait_initial *
  wait_exp_base ** (n - 1) + random.uniform(0, wait_jitter))`, by default 0.1 s doubling,
  plus 0 to 1 s at random, capped at 5 s.
- Attempts: `attempts=6` here (default 10), within `timeout` 45 s.
"""

import os
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import stamina

URL = os.environ.get("RETRYLAB_URL") or sys.argv[1]
client = httpx.Client(timeout=10, limits=httpx.Limits(max_connections=20))


def retry_after_or_retryable(error: Exception) -> bool | float:
    if isinstance(error, httpx.HTTPStatusError):
        if error.response.status_code not in (429, 500, 502, 503, 504):
            return False
        after = error.response.headers.get("Retry-After", "")
        return float(after) if after.isdigit() else True
    return isinstance(error, httpx.TransportError)


@stamina.retry(on=retry_after_or_retryable, attempts=6)
def send(key, n):
    response = client.post(URL, json={"order": key, "n": n}, headers={"Idempotency-Key": key})
    response.raise_for_status()
    return response.status_code


def order(n):
    key = str(uuid.uuid4())  # one key per order, sent again on each of its retries
    try:
        return send(key, n)
    except httpx.HTTPStatusError as error:
        return error.response.status_code


with ThreadPoolExecutor(max_workers=20) as pool:
    print(sorted(pool.map(order, range(20))))
