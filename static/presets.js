//! "Try a failure mode": one button per retry anti-pattern, and one for a metastable failure.
//! Each sets the lab up through the same HTTP API as every other control (reset, PUT policy,
//! PUT downstream, POST a burst), with timings small enough to watch, and then says in one
//! sentence what to look for. A follow-up button repeats the run with the fix (or, for the
//! metastable failure, ends it), so the two can be compared on the same timeline.

import { say } from './controls.js';
import { labNow } from './model.js';
import { metastableSentence } from './traffic.js';

/** Every protection off, so one preset does not inherit the last one's breaker. */
const PLAIN = {
  multiplier: 2,
  max_total_ms: 0,
  honor_retry_after: false,
  retry_after_mode: 'floor',
  retry_after_cap_ms: 10_000,
  breaker: null,
  retry_budget: null,
};

/**
 * Each preset: what it sets (policy, then downstream updates in order, then a burst), the
 * sentence shown after it, and its follow-ups (the same shape, without the reset).
 */
export const PRESETS = [
  {
    id: 'storm',
    name: 'retry storm',
    what: 'no backoff and ten attempts against an overloaded endpoint',
    policy: { ...PLAIN, jitter: 'none', base_ms: 50, multiplier: 1, cap_ms: 50, max_attempts: 10, timeout_ms: 2000 },
    downstream: [{ mode: 'overloaded', capacity: 4, queue: 4, latency_ms: [150, 250] }],
    burst: 60,
    look: 'Each message the endpoint turns away is back 50 ms later, so the load chart towers over the capacity line in 503s and most messages end as dead letters, though the endpoint never stopped working.',
    then: [
      {
        label: 'again, with backoff and jitter',
        policy: { jitter: 'full', base_ms: 200, multiplier: 2, cap_ms: 3000, max_attempts: 6 },
        burst: 60,
        look: 'The same burst now spreads itself out: far fewer requests per 100 ms, far fewer 503s, and most messages get through.',
      },
    ],
  },
  {
    id: 'herd',
    name: 'thundering herd',
    what: 'a 2.5 s outage, then recovery, with retries on a fixed schedule and no jitter',
    policy: { ...PLAIN, jitter: 'none', base_ms: 500, multiplier: 2, cap_ms: 2000, max_attempts: 6, timeout_ms: 2000 },
    downstream: [
      { mode: 'overloaded', capacity: 6, queue: 6, latency_ms: [100, 200], retry_after_s: 1 },
      { mode: 'down', for_ms: 2500 },
    ],
    burst: 60,
    look: 'After the ↩ flag the endpoint is back, but every message retries at the same instant: each column on the load chart overflows the capacity line, and the part that does not fit is turned away and comes back as the next column.',
    then: [
      {
        label: 'same outage, with full jitter',
        policy: { jitter: 'full' },
        downstream: [{ mode: 'down', for_ms: 2500 }],
        burst: 60,
        look: 'With jitter the retries after recovery arrive spread over the whole wait, so the load stays near the capacity line and far fewer are turned away.',
      },
    ],
  },
  {
    id: 'ignore-429',
    name: 'ignoring Retry-After',
    what: 'a rate-limited endpoint, and a client that retries on its own schedule',
    policy: { ...PLAIN, jitter: 'full', base_ms: 100, multiplier: 2, cap_ms: 1000, max_attempts: 6, timeout_ms: 2000 },
    downstream: [{ mode: 'throttled', rate_per_s: 10, burst: 5 }],
    burst: 40,
    look: 'Retries come back before the limiter has room and get another 429: requests per 100 ms sit far above the rate line while only a few get through each second, and the rest run out of attempts.',
    then: [
      {
        label: 'again, honouring Retry-After',
        policy: { honor_retry_after: true, retry_after_mode: 'jitter_above', max_attempts: 6 },
        burst: 40,
        look: 'Each retry now waits at least as long as the endpoint asked (the orange waits), with jitter on top, so the 429s fall away and the messages get through at the rate the endpoint allows.',
      },
    ],
  },
  {
    id: 'fixed',
    name: 'fixed interval',
    what: 'a 4 s outage, and a retry every 400 ms without fail',
    policy: { ...PLAIN, jitter: 'none', base_ms: 400, multiplier: 1, cap_ms: 400, max_attempts: 12, timeout_ms: 2000 },
    downstream: [{ mode: 'healthy' }, { mode: 'down', for_ms: 4000 }],
    burst: 30,
    look: 'For the whole outage the load chart shows the same column every 400 ms: a fixed interval never lets the load fall, however long the outage lasts.',
    then: [
      {
        label: 'same outage, doubling with jitter',
        policy: { jitter: 'full', multiplier: 2, cap_ms: 4000, max_attempts: 6 },
        downstream: [{ mode: 'down', for_ms: 4000 }],
        burst: 30,
        look: 'Doubling thins the columns out the longer the outage lasts, and jitter smears them, so the endpoint meets a trickle rather than a wall when it comes back.',
      },
    ],
  },
  {
    id: 'no-jitter',
    name: 'no jitter',
    what: 'a flaky endpoint, exponential backoff with every wait exactly nominal',
    policy: { ...PLAIN, jitter: 'none', base_ms: 300, multiplier: 2, cap_ms: 3000, max_attempts: 5, timeout_ms: 2000 },
    downstream: [{ mode: 'flaky', failure_rate: 0.5, latency_ms: [60, 240] }],
    burst: 50,
    look: 'Every retry lands 300, 600, 1200 ms after the one before, for all messages alike: the timeline\'s retries stand in straight columns and the load chart is spikes with silence in between.',
    then: [
      {
        label: 'again, with full jitter',
        policy: { jitter: 'full' },
        burst: 50,
        look: 'The same retries, now drawn at random inside each wait: the columns dissolve and the load chart flattens.',
      },
    ],
  },
  {
    id: 'metastable',
    name: 'metastable failure',
    what: 'steady traffic at 70 % of an endpoint with a queue, a 500 ms timeout, quick retries; a 2 s slowdown',
    // The same set-up as the `metastable` compare scenario and tests/api/metastable.rs.
    policy: { ...PLAIN, jitter: 'none', base_ms: 10, multiplier: 2, cap_ms: 40, max_attempts: 5, timeout_ms: 500 },
    downstream: [{ mode: 'overloaded', capacity: 8, queue: 40, latency_ms: [200, 200], retry_after_s: 0 }],
    traffic: { rate_per_s: 28, arrivals: 'poisson' },
    // Once the load has settled, the trigger: the work takes five times as long for 2 s.
    later: { after_ms: 3000, downstream: { latency_ms: [1000, 1000], for_ms: 2000 } },
    look: 'New messages arrive at 28 a second, 70 % of what the 8 workers can do, and each is delivered: the goodput line follows the offered line. After 3 s the work slows five-fold for 2 s (the ↩ flag marks its end). The goodput line falls to the floor and stays there after the flag, while the offered line holds: the queue is full of requests whose clients already timed out (the wasted work below the baseline), and their retries keep it full. End it with one of the buttons.',
    then: [
      {
        label: 'end it with a retry budget',
        policy: { retry_budget: { ratio: 0.1, min_per_s: 0.5 } },
        look: 'Retries may now be at most a tenth of the first attempts (plus one every 2 s): the queue drains while new messages keep arriving, and within a few seconds the goodput line is back on the offered line. Messages refused a retry go to the dead-letter queue.',
      },
      {
        label: 'end it with a circuit breaker',
        policy: { breaker: { failure_threshold: 5, open_ms: 500, half_open_probes: 2 } },
        look: 'The breaker opens after a run of failures (the red band): attempts stop reaching the endpoint, its queue drains, a half-open probe succeeds and it closes again, and the goodput line is back on the offered line while new messages keep arriving. Messages cut short wait in the dead-letter queue for a replay.',
      },
    ],
  },
];

/**
 * The preset buttons in `root` and the "what to look for" box `look`; `controls` gives the API
 * (`api`) and the busy-while-calling wrapper (`act`).
 */
export function createPresets(root, look, controls, model) {
  const { api, act } = controls;
  const live = look.querySelector('[data-look-live]');
  /** The running preset's delayed trigger, and when (lab ms) the preset began. */
  let trigger = 0;
  let began = 0;
  const drawer = root.closest('details');
  const name = look.querySelector('[data-look-name]');
  const text = look.querySelector('[data-look-text]');
  const actions = look.querySelector('[data-look-actions]');

  for (const preset of PRESETS) {
    const button = document.createElement('button');
    button.type = 'button';
    button.className = 'preset';
    button.dataset.preset = preset.id;
    const title = document.createElement('span');
    title.className = 'preset-name';
    title.textContent = preset.name;
    const what = document.createElement('span');
    what.className = 'preset-what';
    what.textContent = preset.traffic ? preset.what : `${preset.what}; a burst of ${preset.burst}`;
    button.append(title, what);
    button.addEventListener('click', () => start(button, preset));
    root.append(button);
  }

  look.querySelector('[data-look-close]').addEventListener('click', () => {
    look.hidden = true;
  });

  /**
   * Apply one step: the policy, then each downstream update in order, then the steady traffic
   * or the burst; a `later` downstream update (a trigger) follows after its delay.
   */
  async function run(step) {
    if (step.policy) await api('PUT', '/policy', step.policy);
    for (const update of step.downstream ?? []) await api('PUT', '/downstream', update);
    if (step.traffic) await api('PUT', '/traffic', step.traffic);
    if (step.burst) await api('POST', '/bursts', { count: step.burst });
    if (step.later) {
      trigger = setTimeout(() => {
        trigger = 0;
        api('PUT', '/downstream', step.later.downstream).catch((err) => say(`Could not start the trigger: ${err.message}`, 'error'));
      }, step.later.after_ms);
    }
  }

  function start(button, preset) {
    clearTimeout(trigger);
    trigger = 0;
    return act(button, `Could not set up "${preset.name}"`, async () => {
      await api('POST', '/reset');
      began = labNow(model);
      await run(preset);
      // Out of the way, so the timeline and its load chart come into view.
      if (drawer) drawer.open = false;
      show(preset.name, preset.look, preset);
      // The status line is the polite live region: it reads out what to look for.
      const sent = preset.traffic ? `steady traffic of ${preset.traffic.rate_per_s} messages a second` : `sent ${preset.burst} messages`;
      say(`${preset.name}: ${sent}. ${preset.look}`);
    });
  }

  function show(title, sentence, preset) {
    name.textContent = `${title}:`;
    text.textContent = sentence;
    look.dataset.preset = preset.id;
    actions.replaceChildren(
      ...preset.then.map((step, i) => {
        const button = document.createElement('button');
        button.type = 'button';
        button.className = 'secondary small';
        button.dataset.presetStep = `${preset.id}/${i + 1}`;
        button.textContent = step.label;
        button.addEventListener('click', () =>
          act(button, `Could not ${step.label}`, async () => {
            await run(step);
            text.textContent = step.look;
            name.textContent = `${title}, ${step.label}:`;
            const did = step.burst ? `sent ${step.burst} more messages` : 'policy changed';
            say(`${title}, ${step.label}: ${did}. ${step.look}`);
          }),
        );
        return button;
      }),
    );
    look.hidden = false;
    tick();
  }

  /** What the metastable preset says live, from the load bins as they come in. */
  function tick() {
    const text = !look.hidden && look.dataset.preset === 'metastable' ? metastableSentence(model, labNow(model), began) : null;
    live.hidden = !text;
    if (text && live.textContent !== text) live.textContent = text;
  }

  return { tick };
}
