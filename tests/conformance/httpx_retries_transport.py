"""httpx-retries' `RetryTransport`, with a backoff factor and POST allowed.

What httpx-retries 0.6.0 does (httpx_retries/retry.py, transport.py):
- Retry-After: `_calculate_sleep()` sleeps exactly the header (capped at `max_backoff_wait`
  120 s) whenever it is there and positive; only without it does it back off.
- Backoff and jitter: `backoff_strategy()` is `backoff_factor * 2 ** attempts_made` times
  `random.uniform(1 - backoff_jitter, 1)`, `backoff_jitter` 1.0 by default ("full jitter"):
  here anywhere in [0, 1], [0, 2], [0, 4] s.
- Statuses: `RETRYABLE_STATUS_CODES` 429, 502, 503, 504; timeouts and network errors too.
- Methods: `allowed_methods` given here with POST (the default leaves POST out).
- Attempts: `total=5` retries.
"""

import os
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
from httpx_retries import Retry, RetryTransport

URL = os.environ.get("RETRYLAB_URL") or sys.argv[1]
retry = Retry(total=5, backoff_factor=0.5, allowed_methods=["GET", "PUT", "DELETE", "POST"])
client = httpx.Client(
    transport=RetryTransport(retry=retry, transport=httpx.HTTPTransport(limits=httpx.Limits(max_connections=20))),
    timeout=10,
)


def order(n):
    key = str(uuid.uuid4())  # one key per order, sent again on each of its retries
    response = client.post(URL, json={"order": key, "n": n}, headers={"Idempotency-Key": key})
    return response.status_code


with ThreadPoolExecutor(max_workers=20) as pool:
    print(sorted(pool.map(order, range(20))))
