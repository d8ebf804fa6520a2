"""urllib3's `Retry`, as its docs and most guides set it for POSTs made safe by a key.

What urllib3 2.5.0 does (src/urllib3/util/retry.py):
- Retry-After: `sleep()` calls `sleep_for_retry()` first and sleeps exactly the header's
  seconds, for any status it retries (`respect_retry_after_header` is True by default); only
  without the header does it back off.
- Backoff: `get_backoff_time()` is 0 after the first failure, then `backoff_factor * 2 **
  (n - 1)` for the n-th consecutive one: here 0, 1, 2, 4 s; capped at `DEFAULT_BACKOFF_MAX`
  120 s.
- Jitter: `random.random() * backoff_jitter` added, and `backoff_jitter` is 0.0 by default:
  none. A Retry-After is waited exactly, with nothing random on top.
- Statuses and methods: those in `status_forcelist`; `allowed_methods=None` retries any
  method (the default, `DEFAULT_ALLOWED_METHODS`, leaves POST out).
- Attempts: `total=5` retries, so at most 6 requests a key; the same headers each time.
"""

import json
import os
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor

import urllib3
from urllib3.util import Retry

URL = os.environ.get("RETRYLAB_URL") or sys.argv[1]
retry = Retry(
    total=5,
    backoff_factor=0.5,
    status_forcelist=[429, 500, 502, 503, 504],
    allowed_methods=None,
    raise_on_status=False,
)
http = urllib3.PoolManager(maxsize=20, retries=retry, timeout=urllib3.Timeout(total=10))


def order(n):
    key = str(uuid.uuid4())  # one key per order, sent again on each of its retries
    response = http.request(
        "POST",
        URL,
        body=json.dumps({"order": key, "n": n}).encode(),
        headers={"Content-Type": "application/json", "Idempotency-Key": key},
    )
    return response.status


with ThreadPoolExecutor(max_workers=20) as pool:
    print(sorted(pool.map(order, range(20))))
