"""requests with urllib3's `Retry` mounted on its adapter, the recipe most guides give.

What requests 2.34.2 and urllib3 2.5.0 do: requests' `HTTPAdapter(max_retries=...)`
(src/requests/adapters.py) hands the `Retry` to urllib3's pool as is, so the waits are
urllib3's (src/urllib3/util/retry.py):
- Retry-After: slept exactly (`sleep_for_retry()`), for any status in `status_forcelist`.
- Backoff: 0 after the first failure, then `backoff_factor * 2 ** (n - 1)`: here 0, 2, 4, 8 s,
  capped at 120 s.
- Jitter: none (`backoff_jitter` defaults to 0.0).
- Methods: `allowed_methods=None`, any method, POST too.
- Attempts: `total=5` retries, at most 6 requests a key.
"""

import os
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor

import requests
from requests.adapters import HTTPAdapter
from urllib3.util import Retry

URL = os.environ.get("RETRYLAB_URL") or sys.argv[1]
session = requests.Session()
retry = Retry(
    total=5,
    backoff_factor=1,
    status_forcelist=[429, 500, 502, 503, 504],
    allowed_methods=None,
    raise_on_status=False,
)
session.mount("http://", HTTPAdapter(max_retries=retry, pool_maxsize=20))


def order(n):
    key = str(uuid.uuid4())  # one key per order, sent again on each of its retries
    response = session.post(URL, json={"order": key, "n": n}, headers={"Idempotency-Key": key}, timeout=10)
    return response.status_code


with ThreadPoolExecutor(max_workers=20) as pool:
    print(sorted(pool.map(order, range(20))))
