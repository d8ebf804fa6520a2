//! The Python programs: urllib3, tenacity, stamina and httpx-retries, each with the lab's wait
//! formula hooked into the library's own place for waits.
//!
//! The hooks, as the pinned sources have them:
//! - urllib3 2.5.0 (`src/urllib3/util/retry.py`): `Retry.sleep(response)` is what the pool calls
//!   between attempts, and `Retry.new()` copies the instance with `type(self)(...)`, so a
//!   subclass that overrides `sleep` keeps its waits on every retry.
//! - tenacity 9.1.2 (`tenacity/wait.py`, `tenacity/stop.py`): `wait=` takes any callable of the
//!   `RetryCallState`; `stop_before_delay` stops "right before the next attempt would take place
//!   after the time delay", as the lab's `max_total_ms` does.
//! - stamina 26.1.0 (`stamina/_core.py`): an `on=` hook that returns a float is slept exactly
//!   (`_jittered_backoff_for_rcs` takes the custom backoff as is).
//! - httpx-retries 0.6.0 (`httpx_retries/retry.py`, `transport.py`): `RetryTransport` calls
//!   `retry.increment()` then `retry.sleep(response)`, and `copy_with` builds
//!   `self.__class__(...)`, so a subclass that overrides `sleep` keeps its waits.

use super::{ATTEMPT_LIMIT_ONLY, Library, jitter_name, no_time_budget, retry_after_mode_name, seconds};
use crate::retry::Policy;

/// `native`: the policy is the library's own preset, so the program is the library's own
/// settings (no formula), and what it had to write out goes into `native`.
pub(super) fn program(
    policy: &Policy,
    library: Library,
    settings: &str,
    unsupported: &mut Vec<String>,
    native: Option<&mut Vec<String>>,
) -> String {
    let version = library.version();
    let lib = library.id();
    let is_native = native.is_some();
    let (imports, setup, send) = match (library, native) {
        (_, Some(spelled_out)) => native_parts(policy, library, spelled_out),
        (Library::Urllib3, None) => urllib3(policy),
        (Library::Tenacity, None) => tenacity(policy),
        (Library::Stamina, None) => stamina(policy),
        (_, None) => httpx_retries(policy),
    };
    let (constants, formula) = if is_native {
        (format!("TIMEOUT_S = {}", seconds(policy.timeout_ms)), "state = threading.local()".to_owned())
    } else {
        (constants(policy), FORMULA.to_owned())
    };
    if library != Library::Tenacity && !is_native {
        let instead = if library == Library::Stamina {
            "stamina's `timeout` stops once that time has passed after a failure, one attempt later than the lab"
        } else {
            ATTEMPT_LIMIT_ONLY
        };
        no_time_budget(policy, lib, instead, unsupported);
    }
    let settings: String = settings.lines().map(|l| format!("#   {l}\n")).collect();
    let run = match library {
        Library::Urllib3 => "pip install urllib3",
        Library::Tenacity => "pip install tenacity requests",
        Library::Stamina => "pip install stamina httpx",
        _ => "pip install httpx-retries",
    };
    format!(
        r#""""A retrylab policy as a {lib} {version} client, written by `retrylab export`.

Sends WAVES waves of ORDERS POSTs at once, WAVE_GAP_S apart, each POST with its own
Idempotency-Key, the same key on every retry, to the endpoint in RETRYLAB_URL or the first
argument; prints the final statuses. (Two waves, so that a grade's schedule, 3 s down without
Retry-After and then with it, meets both; and orders sent together, so that their waits can
show a jitter beside what the process adds.)
Run: {run}; python this_file.py URL (or under `retrylab grade -- python this_file.py`).
"""

# The lab policy it follows (retrylab's settings):
{settings}
import json
import os
import random
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

{imports}

URL = os.environ.get("RETRYLAB_URL") or sys.argv[1]
ORDERS = 10
WAVES = 2
WAVE_GAP_S = 3.5
{constants}

{formula}

{setup}

def order(n):
    key = str(uuid.uuid4())  # one key per order, sent again on each of its retries
    state.previous = None
{send}


def wave(w):
    time.sleep(w * WAVE_GAP_S)
    with ThreadPoolExecutor(max_workers=ORDERS) as pool:
        return list(pool.map(order, range(w * ORDERS, (w + 1) * ORDERS)))


with ThreadPoolExecutor(max_workers=WAVES) as waves:
    print(sorted(sum(waves.map(wave, range(WAVES)), []), key=str))
"#,
    )
}

fn constants(policy: &Policy) -> String {
    let mode = retry_after_mode_name(policy.retry_after_mode);
    let py_bool = |b: bool| if b { "True" } else { "False" };
    format!(
        "MAX_ATTEMPTS = {}  # the first included\n\
         TIMEOUT_S = {}\n\
         MAX_TOTAL_S = {}  # 0: no time budget\n\
         BASE_S = {}\n\
         CAP_S = {}\n\
         MULTIPLIER = {:?}\n\
         JITTER = \"{}\"\n\
         JITTER_S = {}  # additive jitter's most\n\
         JITTER_RATIO = {:?}  # proportional jitter's most\n\
         FIRST_RETRY_AT_ONCE = {}\n\
         HONOR_RETRY_AFTER = {}\n\
         RETRY_AFTER_MODE = \"{mode}\"\n\
         RETRY_AFTER_CAP_S = {}\n\
         {statuses}",
        policy.max_attempts,
        seconds(policy.timeout_ms),
        seconds(policy.max_total_ms),
        seconds(policy.base_ms),
        seconds(policy.cap_ms),
        policy.multiplier,
        jitter_name(policy.jitter),
        seconds(policy.jitter_ms),
        policy.jitter_ratio,
        py_bool(policy.first_retry_at_once),
        py_bool(policy.honor_retry_after),
        seconds(policy.retry_after_cap_ms),
        statuses = match &policy.retry_statuses {
            Some(listed) => format!("# The statuses the policy retries.\nRETRY_STATUSES = {listed:?}"),
            None => "# The lab's transient answers: 408, 409 (the key still in work), 429 and every 5xx.\n\
                     RETRY_STATUSES = [408, 409, 429, *range(500, 600)]"
                .to_owned(),
        },
    )
}

/// `retry::plan_wait` in Python: the wait after failed attempt `n`, in seconds.
const FORMULA: &str = r#"state = threading.local()  # each order runs in one thread: its previous wait


def draw(nominal, previous):
    if JITTER == "full":
        return random.uniform(0, nominal)
    if JITTER == "equal":
        return nominal / 2 + random.uniform(0, nominal / 2)
    if JITTER == "decorrelated":
        high = min(CAP_S, 3 * max(previous or BASE_S, BASE_S))
        return random.uniform(min(BASE_S, high), high)
    if JITTER == "additive":
        return min(max(CAP_S, nominal), nominal + random.uniform(0, JITTER_S))
    if JITTER == "proportional":
        return nominal * (1 + random.uniform(0, JITTER_RATIO))
    return nominal


def planned_wait(n, retry_after):
    """The wait after failed attempt n (1-based), as retrylab plans it; retry_after is the
    header as sent, or None."""
    nominal = 0.0 if FIRST_RETRY_AT_ONCE and n == 1 else min(CAP_S, BASE_S * MULTIPLIER ** (n - 1))
    after = None
    if HONOR_RETRY_AFTER and retry_after is not None and retry_after.strip().isdigit():
        after = min(float(retry_after), RETRY_AFTER_CAP_S)
    if after is not None and (RETRY_AFTER_MODE == "exact_including_zero" or (RETRY_AFTER_MODE == "exact" and after > 0)):
        return after
    if after is not None and RETRY_AFTER_MODE == "nominal_floor":
        nominal = max(nominal, after)
        after = None
    drawn = draw(nominal, getattr(state, "previous", None))
    state.previous = drawn
    if after is None:
        return drawn
    if RETRY_AFTER_MODE == "jitter_above":
        return after + drawn
    return max(drawn, after)
"#;

type Parts = (String, String, String);

fn urllib3(_policy: &Policy) -> Parts {
    let imports = "import urllib3\nfrom urllib3.util import Retry".to_owned();
    let setup = r#"class LabRetry(Retry):
    """urllib3's Retry with the lab's waits: the pool calls sleep() between attempts."""

    def sleep(self, response=None):
        header = response.headers.get("Retry-After") if response is not None else None
        time.sleep(planned_wait(len(self.history), header))


retry = LabRetry(
    total=MAX_ATTEMPTS - 1,
    status_forcelist=RETRY_STATUSES,
    allowed_methods=None,  # POST too: the key makes it safe
    respect_retry_after_header=HONOR_RETRY_AFTER,
    raise_on_status=False,
)
http = urllib3.PoolManager(maxsize=ORDERS * WAVES, retries=retry, timeout=urllib3.Timeout(total=TIMEOUT_S))
"#
    .to_owned();
    let send = r#"    try:
        response = http.request(
            "POST",
            URL,
            body=json.dumps({"order": key, "n": n}).encode(),
            headers={"Content-Type": "application/json", "Idempotency-Key": key},
        )
        return response.status
    except urllib3.exceptions.MaxRetryError as error:
        return type(error.reason).__name__"#
        .to_owned();
    (imports, setup, send)
}

fn tenacity(_policy: &Policy) -> Parts {
    let imports = "import requests\nfrom tenacity import retry, retry_if_exception, stop_after_attempt, stop_before_delay, stop_never"
        .to_owned();
    let setup = r#"session = requests.Session()
session.mount("http://", requests.adapters.HTTPAdapter(pool_maxsize=ORDERS * WAVES))


def retryable(error):
    if isinstance(error, requests.HTTPError):
        return error.response.status_code in RETRY_STATUSES
    return isinstance(error, (requests.ConnectionError, requests.Timeout))


def lab_wait(retry_state):
    """tenacity's wait= takes any callable of the retry state."""
    error = retry_state.outcome.exception()
    response = getattr(error, "response", None)
    header = response.headers.get("Retry-After") if response is not None else None
    return planned_wait(retry_state.attempt_number, header)


@retry(
    wait=lab_wait,
    stop=stop_after_attempt(MAX_ATTEMPTS) | (stop_before_delay(MAX_TOTAL_S) if MAX_TOTAL_S else stop_never),
    retry=retry_if_exception(retryable),
    reraise=True,
)
def send(key, n):
    response = session.post(URL, json={"order": key, "n": n}, headers={"Idempotency-Key": key}, timeout=TIMEOUT_S)
    response.raise_for_status()
    return response.status_code
"#
    .to_owned();
    let send = r#"    try:
        return send(key, n)
    except requests.HTTPError as error:
        return error.response.status_code
    except requests.RequestException as error:
        return type(error).__name__"#
        .to_owned();
    (imports, setup, send)
}

fn stamina(_policy: &Policy) -> Parts {
    let imports = "import httpx\nimport stamina".to_owned();
    let setup =
        r#"client = httpx.Client(timeout=TIMEOUT_S, limits=httpx.Limits(max_connections=ORDERS * WAVES))


def lab_wait(error):
    """stamina sleeps exactly the float an on= hook returns; False ends the retries."""
    if isinstance(error, httpx.HTTPStatusError):
        if error.response.status_code not in RETRY_STATUSES:
            return False
        header = error.response.headers.get("Retry-After")
    elif isinstance(error, httpx.TransportError):
        header = None
    else:
        return False
    return planned_wait(state.attempt, header)
"#
        .to_owned();
    let send = r#"    try:
        for attempt in stamina.retry_context(on=lab_wait, attempts=MAX_ATTEMPTS, timeout=MAX_TOTAL_S or None):
            with attempt:
                state.attempt = attempt.num
                response = client.post(URL, json={"order": key, "n": n}, headers={"Idempotency-Key": key})
                response.raise_for_status()
                return response.status_code
    except httpx.HTTPStatusError as error:
        return error.response.status_code
    except httpx.TransportError as error:
        return type(error).__name__"#
        .to_owned();
    (imports, setup, send)
}

fn httpx_retries(_policy: &Policy) -> Parts {
    let imports = "import httpx\nfrom httpx_retries import Retry, RetryTransport".to_owned();
    let setup = r#"class LabRetry(Retry):
    """httpx-retries' Retry with the lab's waits: the transport increments, then sleeps."""

    def sleep(self, response):
        header = response.headers.get("Retry-After") if isinstance(response, httpx.Response) else None
        time.sleep(planned_wait(self.attempts_made, header))


retry = LabRetry(
    total=MAX_ATTEMPTS - 1,
    allowed_methods=["GET", "PUT", "DELETE", "POST"],  # POST too: the key makes it safe
    status_forcelist=RETRY_STATUSES,
    respect_retry_after_header=HONOR_RETRY_AFTER,
)
client = httpx.Client(
    transport=RetryTransport(retry=retry, transport=httpx.HTTPTransport(limits=httpx.Limits(max_connections=ORDERS * WAVES))),
    timeout=TIMEOUT_S,
)
"#
    .to_owned();
    let send = r#"    try:
        response = client.post(URL, json={"order": key, "n": n}, headers={"Idempotency-Key": key})
        return response.status_code
    except httpx.TransportError as error:
        return type(error).__name__"#
        .to_owned();
    (imports, setup, send)
}

/// A library's own preset as the library's own settings: its defaults, and the set-up its
/// preset names where the defaults would not retry a keyed POST or would not wait.
fn native_parts(policy: &Policy, library: Library, spelled_out: &mut Vec<String>) -> Parts {
    let statuses = format!("{:?}", policy.retry_statuses.clone().unwrap_or_default());
    let timeout =
        format!("timeout {} s: the policy's timeout_ms (the library sets none)", seconds(policy.timeout_ms));
    match library {
        Library::Urllib3 => {
            spelled_out.push(format!(
                "total={}, backoff_factor={}, status_forcelist={statuses}: urllib3's defaults (total=10, \
                 backoff_factor=0, no list) would not wait between retries; the preset is the documented set-up",
                policy.max_attempts - 1,
                seconds(policy.base_ms)
            ));
            spelled_out.push("allowed_methods=None: the default methods leave POST out".to_owned());
            spelled_out.push(timeout);
            let setup = format!(
                r#"retry = Retry(
    total={total},
    backoff_factor={factor},
    status_forcelist={statuses},
    allowed_methods=None,  # POST too: the key makes it safe
    raise_on_status=False,
)  # the rest is urllib3's: the first retry at once, no jitter, Retry-After waited, 120 s cap
http = urllib3.PoolManager(maxsize=ORDERS * WAVES, retries=retry, timeout=urllib3.Timeout(total=TIMEOUT_S))
"#,
                total = policy.max_attempts - 1,
                factor = seconds(policy.base_ms),
            );
            let (imports, _, send) = urllib3(policy);
            (imports, setup, send)
        }
        Library::Tenacity => {
            spelled_out.push(format!(
                "wait_random_exponential(multiplier=1, max=60), stop_after_attempt({}), retry on {statuses} \
                 and connection errors: tenacity retries nothing and waits nothing by default; the README's set-up",
                policy.max_attempts
            ));
            spelled_out.push(timeout);
            let imports = "import requests\nfrom tenacity import retry, retry_if_exception, stop_after_attempt, wait_random_exponential".to_owned();
            let setup = format!(
                r#"session = requests.Session()
session.mount("http://", requests.adapters.HTTPAdapter(pool_maxsize=ORDERS * WAVES))


def retryable(error):
    if isinstance(error, requests.HTTPError):
        return error.response.status_code in {statuses}
    return isinstance(error, (requests.ConnectionError, requests.Timeout))


@retry(
    wait=wait_random_exponential(multiplier=1, max=60),
    stop=stop_after_attempt({attempts}),
    retry=retry_if_exception(retryable),
    reraise=True,
)
def send(key, n):
    response = session.post(URL, json={{"order": key, "n": n}}, headers={{"Idempotency-Key": key}}, timeout=TIMEOUT_S)
    response.raise_for_status()
    return response.status_code
"#,
                attempts = policy.max_attempts,
            );
            let (_, _, send) = tenacity(policy);
            (imports, setup, send)
        }
        Library::Stamina => {
            spelled_out.push(format!(
                "on=: {statuses} and transport errors (stamina has no default for what to retry)"
            ));
            spelled_out.push(timeout);
            let imports = "import httpx\nimport stamina".to_owned();
            let setup = format!(
                r#"client = httpx.Client(timeout=TIMEOUT_S, limits=httpx.Limits(max_connections=ORDERS * WAVES))


def retryable(error):
    if isinstance(error, httpx.HTTPStatusError):
        return error.response.status_code in {statuses}
    return isinstance(error, httpx.TransportError)
"#
            );
            let send = r#"    try:
        # stamina's defaults: 10 attempts within 45 s, 0.1 s doubling plus up to 1 s, at most 5 s.
        for attempt in stamina.retry_context(on=retryable):
            with attempt:
                response = client.post(URL, json={"order": key, "n": n}, headers={"Idempotency-Key": key})
                response.raise_for_status()
                return response.status_code
    except httpx.HTTPStatusError as error:
        return error.response.status_code
    except httpx.TransportError as error:
        return type(error).__name__"#
                .to_owned();
            (imports, setup, send)
        }
        _ => {
            spelled_out.push(
                "backoff_factor=0.5: httpx-retries' default of 0 waits nothing; the preset is the documented set-up"
                    .to_owned(),
            );
            spelled_out.push("allowed_methods with POST: the default methods leave it out".to_owned());
            spelled_out.push(timeout);
            let imports = "import httpx\nfrom httpx_retries import Retry, RetryTransport".to_owned();
            let setup = r#"# The rest is httpx-retries': 10 retries, full jitter, 120 s cap, Retry-After waited.
retry = Retry(backoff_factor=0.5, allowed_methods=["GET", "PUT", "DELETE", "POST"])
client = httpx.Client(
    transport=RetryTransport(retry=retry, transport=httpx.HTTPTransport(limits=httpx.Limits(max_connections=ORDERS * WAVES))),
    timeout=TIMEOUT_S,
)
"#
            .to_owned();
            let (_, _, send) = httpx_retries(policy);
            (imports, setup, send)
        }
    }
}
