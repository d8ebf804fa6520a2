//! The Node programs (ES modules): got and axios-retry, each with the lab's wait formula hooked
//! into the library's own place for waits.
//!
//! The hooks, as the pinned sources have them:
//! - got 14.6.6 (`dist/source/core/index.js`, `calculate-retry-delay.js`): `retry.calculateDelay`
//!   is called after every failure with `attemptCount`, the header as `retryAfter` (ms) and got's
//!   own `computedValue` (0 when its limit, methods or statuses say no); what it returns is the
//!   wait, and 0 means no retry.
//! - axios-retry 4.5.0 (`dist/esm/index.js`): `retryDelay(retryNumber, error)` returns the wait
//!   in ms (`retryNumber` from 1); `retryCondition(error)` decides whether to retry at all;
//!   `shouldResetTimeout` gives each attempt its own timeout.

use super::{ATTEMPT_LIMIT_ONLY, Library, jitter_name, may_wait_zero, no_time_budget, retry_after_mode_name};
use crate::retry::Policy;

pub(super) fn program(
    policy: &Policy,
    library: Library,
    settings: &str,
    unsupported: &mut Vec<String>,
) -> String {
    let lib = library.id();
    let version = library.version();
    no_time_budget(policy, lib, ATTEMPT_LIMIT_ONLY, unsupported);
    if library == Library::Got && may_wait_zero(policy) {
        unsupported.push(
            "a wait of 0: got reads a delay of 0 as \"do not retry\", so the program waits 1 ms instead"
                .to_owned(),
        );
    }
    let settings: String = settings.lines().map(|l| format!("//   {l}\n")).collect();
    let (imports, send) = if library == Library::Got { got() } else { axios_retry() };
    let install = if library == Library::Got { "npm install got" } else { "npm install axios axios-retry" };
    format!(
        r#"// A retrylab policy as a {lib} {version} client, written by `retrylab export`.
//
// Sends WAVES waves of ORDERS POSTs at once, WAVE_GAP_MS apart, each POST with its own
// Idempotency-Key, the same key on every retry, to the endpoint in RETRYLAB_URL or the first
// argument; prints the final statuses. (Two waves, so that a grade's schedule, 3 s down without
// Retry-After and then with it, meets both; and orders sent together, so that their waits can
// show a jitter beside what the process adds.)
// Run: {install}; node this_file.mjs URL (or under `retrylab grade -- node this_file.mjs`).
//
// The lab policy it follows (retrylab's settings):
{settings}
{imports}

const url = process.env.RETRYLAB_URL || process.argv[2];
const ORDERS = 10;
const WAVES = 2;
const WAVE_GAP_MS = 3500;
{constants}

{formula}

{send}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const waves = Array.from({{ length: WAVES }}, (_, w) =>
  sleep(w * WAVE_GAP_MS).then(() => Promise.all(Array.from({{ length: ORDERS }}, (_, i) => order(w * ORDERS + i)))));
console.log((await Promise.all(waves)).flat());
"#,
        constants = constants(policy),
        formula = FORMULA,
    )
}

/// A library's own preset as the library's defaults (the round trip): no hook, only what
/// must be written out for a keyed POST, each said in `spelled_out`.
pub(super) fn native(
    policy: &Policy,
    library: Library,
    settings: &str,
    spelled_out: &mut Vec<String>,
) -> String {
    let lib = library.id();
    let version = library.version();
    let settings: String = settings.lines().map(|l| format!("//   {l}\n")).collect();
    let (imports, send, install) = if library == Library::Got {
        spelled_out.push("retry.methods ['POST']: got's default methods leave POST out".to_owned());
        spelled_out.push(format!(
            "timeout.request {} ms: got sets no timeout by default; the policy's timeout_ms (with it, got gives up on a Retry-After longer than the timeout)",
            policy.timeout_ms
        ));
        (
            "import got from 'got';",
            r#"async function order(n) {
  const key = crypto.randomUUID(); // one key per order, sent again on each of its retries
  try {
    const response = await got.post(url, {
      json: { order: key, n },
      headers: { 'Idempotency-Key': key },
      timeout: { request: TIMEOUT_MS },
      retry: { methods: ['POST'] }, // the rest is got's defaults: limit 2, its waits, statuses and Retry-After
    });
    return response.statusCode;
  } catch (error) {
    return error.response?.statusCode ?? error.code;
  }
}"#,
            "npm install got",
        )
    } else {
        spelled_out.push("retryDelay exponentialDelay: axios-retry's default is no delay at all; the preset is its documented exponential set-up".to_owned());
        spelled_out.push(
            "retryCondition isNetworkError or isRetryableError (429 and 5xx): the default leaves POST out"
                .to_owned(),
        );
        spelled_out.push(format!(
            "timeout {} ms: axios sets none by default; the policy's timeout_ms",
            policy.timeout_ms
        ));
        (
            "import axios from 'axios';\nimport axiosRetry, { exponentialDelay, isNetworkError, isRetryableError } from 'axios-retry';",
            r#"// The rest is axios-retry's defaults: 3 retries.
axiosRetry(axios, {
  retryDelay: exponentialDelay,
  retryCondition: (error) => isNetworkError(error) || isRetryableError(error),
});

async function order(n) {
  const key = crypto.randomUUID(); // one key per order, sent again on each of its retries
  try {
    const response = await axios.post(url, { order: key, n }, { headers: { 'Idempotency-Key': key }, timeout: TIMEOUT_MS });
    return response.status;
  } catch (error) {
    return error.response?.status ?? error.code;
  }
}"#,
            "npm install axios axios-retry",
        )
    };
    format!(
        r#"// The {lib} preset as {lib} {version} itself, written by `retrylab export`: the library's
// defaults, with only what a keyed POST needs written out.
//
// Sends WAVES waves of ORDERS POSTs at once, WAVE_GAP_MS apart, each POST with its own
// Idempotency-Key, the same key on every retry, to the endpoint in RETRYLAB_URL or the first
// argument; prints the final statuses.
// Run: {install}; node this_file.mjs URL (or under `retrylab grade -- node this_file.mjs`).
//
// The lab policy it follows (retrylab's settings):
{settings}
{imports}

const url = process.env.RETRYLAB_URL || process.argv[2];
const ORDERS = 10;
const WAVES = 2;
const WAVE_GAP_MS = 3500;
const TIMEOUT_MS = {timeout};

{send}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const waves = Array.from({{ length: WAVES }}, (_, w) =>
  sleep(w * WAVE_GAP_MS).then(() => Promise.all(Array.from({{ length: ORDERS }}, (_, i) => order(w * ORDERS + i)))));
console.log((await Promise.all(waves)).flat());
"#,
        timeout = policy.timeout_ms,
    )
}

fn constants(policy: &Policy) -> String {
    let mode = retry_after_mode_name(policy.retry_after_mode);
    format!(
        "const MAX_ATTEMPTS = {}; // the first included\n\
         const TIMEOUT_MS = {};\n\
         const BASE_MS = {};\n\
         const CAP_MS = {};\n\
         const MULTIPLIER = {};\n\
         const JITTER = '{}';\n\
         const JITTER_MS = {}; // additive jitter's most\n\
         const JITTER_RATIO = {}; // proportional jitter's most\n\
         const FIRST_RETRY_AT_ONCE = {};\n\
         const HONOR_RETRY_AFTER = {};\n\
         const RETRY_AFTER_MODE = '{mode}';\n\
         const RETRY_AFTER_CAP_MS = {};\n\
         {statuses}",
        policy.max_attempts,
        policy.timeout_ms,
        policy.base_ms,
        policy.cap_ms,
        policy.multiplier,
        jitter_name(policy.jitter),
        policy.jitter_ms,
        policy.jitter_ratio,
        policy.first_retry_at_once,
        policy.honor_retry_after,
        policy.retry_after_cap_ms,
        statuses = match &policy.retry_statuses {
            Some(listed) => format!("// The statuses the policy retries.\nconst RETRY_STATUSES = {listed:?};"),
            None => "// The lab's transient answers: 408, 409 (the key still in work), 429 and every 5xx.\n\
                     const RETRY_STATUSES = [408, 409, 429, ...Array.from({ length: 100 }, (_, i) => 500 + i)];"
                .to_owned(),
        },
    )
}

/// `retry::plan_wait` in JavaScript: the wait after failed attempt `n`, in ms.
const FORMULA: &str = r#"const uniform = (low, high) => low + Math.random() * (high - low);

function draw(nominal, previous) {
  switch (JITTER) {
    case 'full': return uniform(0, nominal);
    case 'equal': return nominal / 2 + uniform(0, nominal / 2);
    case 'decorrelated': {
      const high = Math.min(CAP_MS, 3 * Math.max(previous ?? BASE_MS, BASE_MS));
      return uniform(Math.min(BASE_MS, high), high);
    }
    case 'additive': return Math.min(Math.max(CAP_MS, nominal), nominal + uniform(0, JITTER_MS));
    case 'proportional': return nominal * (1 + uniform(0, JITTER_RATIO));
    default: return nominal;
  }
}

// The wait after failed attempt n (1-based), as retrylab plans it; afterMs is the Retry-After
// in ms, or undefined; state keeps one order's previous wait.
function plannedWait(n, afterMs, state) {
  let nominal = FIRST_RETRY_AT_ONCE && n === 1 ? 0 : Math.min(CAP_MS, BASE_MS * MULTIPLIER ** (n - 1));
  let after = HONOR_RETRY_AFTER && Number.isFinite(afterMs) ? Math.min(afterMs, RETRY_AFTER_CAP_MS) : undefined;
  if (after !== undefined && (RETRY_AFTER_MODE === 'exact_including_zero' || (RETRY_AFTER_MODE === 'exact' && after > 0))) {
    return after;
  }
  if (after !== undefined && RETRY_AFTER_MODE === 'nominal_floor') {
    nominal = Math.max(nominal, after);
    after = undefined;
  }
  const drawn = draw(nominal, state.previous);
  state.previous = drawn;
  if (after === undefined) return drawn;
  return RETRY_AFTER_MODE === 'jitter_above' ? after + drawn : Math.max(drawn, after);
}"#;

fn got() -> (String, String) {
    let imports = "import got from 'got';".to_owned();
    let send = r#"async function order(n) {
  const key = crypto.randomUUID(); // one key per order, sent again on each of its retries
  const state = {};
  try {
    const response = await got.post(url, {
      json: { order: key, n },
      headers: { 'Idempotency-Key': key },
      timeout: { request: TIMEOUT_MS },
      retry: {
        limit: MAX_ATTEMPTS - 1,
        methods: ['POST'], // got leaves POST out by default; the key makes it safe
        statusCodes: RETRY_STATUSES,
        maxRetryAfter: Number.MAX_SAFE_INTEGER, // the cap is the policy's, below
        // got's own rules (limit, methods, statuses) decide whether; the lab's formula, how long.
        calculateDelay: ({ attemptCount, retryAfter, computedValue }) => {
          if (computedValue === 0) return 0;
          return Math.max(1, plannedWait(attemptCount, retryAfter, state));
        },
      },
    });
    return response.statusCode;
  } catch (error) {
    return error.response?.statusCode ?? error.code;
  }
}"#
    .to_owned();
    (imports, send)
}

fn axios_retry() -> (String, String) {
    let imports =
        "import axios from 'axios';\nimport axiosRetry, { isNetworkError } from 'axios-retry';".to_owned();
    let send = r#"const states = new Map(); // each order's previous wait, by its key

axiosRetry(axios, {
  retries: MAX_ATTEMPTS - 1,
  shouldResetTimeout: true, // each attempt its own timeout
  // POST too (the default condition leaves it out; the key makes it safe), and timeouts.
  retryCondition: (error) =>
    isNetworkError(error) || ['ECONNABORTED', 'ETIMEDOUT'].includes(error.code) ||
    RETRY_STATUSES.includes(error.response?.status),
  retryDelay: (retryNumber, error) => {
    const header = error.response?.headers?.['retry-after'];
    const afterMs = header !== undefined && /^\d+$/.test(header.trim()) ? Number(header) * 1000 : undefined;
    const key = error.config?.headers?.['Idempotency-Key'];
    if (!states.has(key)) states.set(key, {});
    return plannedWait(retryNumber, afterMs, states.get(key));
  },
});

async function order(n) {
  const key = crypto.randomUUID(); // one key per order, sent again on each of its retries
  try {
    const response = await axios.post(url, { order: key, n }, { headers: { 'Idempotency-Key': key }, timeout: TIMEOUT_MS });
    return response.status;
  } catch (error) {
    return error.response?.status ?? error.code;
  } finally {
    states.delete(key);
  }
}"#
    .to_owned();
    (imports, send)
}
