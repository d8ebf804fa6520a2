// got with POST added to its retried methods and a limit of 5; its waits are its own defaults.
//
// What got 14.6.6 does (dist/source/core/calculate-retry-delay.js, options.js, index.js):
// - Retry-After: read as seconds (or a date) and, when the status is one it retries, waited
//   exactly (`return retryAfter`), unless it is longer than `maxRetryAfter` (here the request
//   timeout, 10 s), when it gives up. No noise is added to it.
// - Backoff and jitter without the header: `2 ** (attemptCount - 1) * 1000` ms (capped by
//   `backoffLimit`, Infinity) plus `Math.random() * noise`, `noise` 100 ms: 1, 2, 4 s, each plus
//   0 to 100 ms.
// - Statuses: 408, 413, 429, 500, 502, 503, 504, 521, 522, 524, and ETIMEDOUT, ECONNRESET, ...
// - Methods: GET, PUT, HEAD, DELETE, OPTIONS, TRACE by default; POST added here.
// - Attempts: `limit` retries (default 2; 5 here).
import got from 'got';

const url = process.env.RETRYLAB_URL || process.argv[2];

async function order(n) {
  const key = crypto.randomUUID(); // one key per order, sent again on each of its retries
  try {
    const response = await got.post(url, {
      json: { order: key, n },
      headers: { 'Idempotency-Key': key },
      retry: { limit: 5, methods: ['POST'] },
      timeout: { request: 10000 },
    });
    return response.statusCode;
  } catch (error) {
    return error.response?.statusCode ?? error.code;
  }
}

console.log(await Promise.all(Array.from({ length: 20 }, (_, n) => order(n))));
