"""tenacity around requests, with the wait its README recommends for contention:
`wait_random_exponential(multiplier=1, max=60)` (and `stop_after_attempt(6)`).

What tenacity 9.1.2 does (tenacity/wait.py):
- Retry-After: tenacity knows nothing of HTTP, so the header is not read: the waits are its own.
- Backoff and jitter: `wait_random_exponential.__call__` draws `random.uniform(min, high)`
  with `high = multiplier * 2 ** (attempt - 1)` capped at `max` (AWS's "full jitter"): the
  n-th wait is anywhere in [0, 1], [0, 2], [0, 4], [0, 8] s. One key's later wait is often
  shorter than its earlier one; the range grows.
- Statuses: those the `retry=` predicate below names (429, 5xx, and no answer); any method.
- Attempts: `stop_after_attempt(6)`, at most 6 requests a key.

60 orders, not 20 as the other clients send: tenacity's waits after a `Retry-After` are its own
draws, which come back before the header in about one retry in six under the standard schedule.
With 20 orders (about 20 retries after a header) none is early in about 5 % of runs, and the card
passed `retry_after` by luck; with 60 (about 60 retries) about 1 run in 10,000 (simulated, 20,000
runs: scripts/retry-after-chance.py).
"""

import os
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor

import requests
from tenacity import retry, retry_if_exception, stop_after_attempt, wait_random_exponential

URL = os.environ.get("RETRYLAB_URL") or sys.argv[1]
ORDERS = 60
session = requests.Session()
session.mount("http://", requests.adapters.HTTPAdapter(pool_maxsize=ORDERS))


def retryable(error):
    if isinstance(error, requests.HTTPError):
        return error.response.status_code in (429, 500, 502, 503, 504)
    return isinstance(error, (requests.ConnectionError, requests.Timeout))


@retry(
    wait=wait_random_exponential(multiplier=1, max=60),
    stop=stop_after_attempt(6),
    retry=retry_if_exception(retryable),
    reraise=True,
)
def send(key, n):
    response = session.post(URL, json={"order": key, "n": n}, headers={"Idempotency-Key": key}, timeout=10)
    response.raise_for_status()
    return response.status_code


def order(n):
    key = str(uuid.uuid4())  # one key per order, sent again on each of its retries
    try:
        return send(key, n)
    except requests.HTTPError as error:
        return error.response.status_code


with ThreadPoolExecutor(max_workers=ORDERS) as pool:
    print(sorted(pool.map(order, range(ORDERS))))
