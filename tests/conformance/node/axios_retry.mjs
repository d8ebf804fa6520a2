// axios with axios-retry: `exponentialDelay`, and a `retryCondition` that retries POST too.
//
// What axios-retry 4.5.0 does (dist/esm/index.js):
// - Retry-After: `exponentialDelay` waits `Math.max(2 ** retryNumber * 100, retryAfter(error))`
//   and then adds `delay * 0.2 * Math.random()`: at least the header, 0 to 20 % more.
// - Backoff: 200, 400, 800, 1600, 3200 ms (`retryNumber` counts from 1), each plus 0 to 20 %.
//   No cap.
// - Statuses: `isRetryableError`, 429 and 5xx, and network errors (no answer). The default
//   condition (`isNetworkOrIdempotentRequestError`) leaves POST out; this one does not.
// - Attempts: `retries` (default 3; 5 here).
import axios from 'axios';
import axiosRetry, { exponentialDelay, isNetworkError, isRetryableError } from 'axios-retry';

const url = process.env.RETRYLAB_URL || process.argv[2];
axiosRetry(axios, {
  retries: 5,
  retryDelay: exponentialDelay,
  retryCondition: (error) => isNetworkError(error) || isRetryableError(error),
});

async function order(n) {
  const key = crypto.randomUUID(); // one key per order, sent again on each of its retries
  try {
    const response = await axios.post(url, { order: key, n }, { headers: { 'Idempotency-Key': key } });
    return response.status;
  } catch (error) {
    return error.response?.status ?? error.code;
  }
}

console.log(await Promise.all(Array.from({ length: 20 }, (_, n) => order(n))));
