//! Everything the person presses: downstream mode, parameters, retry policy, traffic,
//! replay and reset. Each control calls the HTTP API and reports the outcome in the status
//! line; it never touches the model, which changes only when the server's events say so.
//! The lab they act on is passed in; `replay` is handed to the dead-letter table through the
//! object `createControls` returns.

import { duration, range } from './model.js';

const statusEl = () => document.getElementById('status');
const dismissEl = () => document.getElementById('status-dismiss');
let statusTimer = 0;

/**
 * Show a short message in the status line. Errors stay until replaced or dismissed;
 * confirmations fade after a few seconds.
 */
export function say(text, kind = 'info') {
  const el = statusEl();
  clearTimeout(statusTimer);
  el.textContent = text;
  el.dataset.kind = kind;
  dismissEl().hidden = !text;
  if (kind === 'info' && text) statusTimer = setTimeout(() => say(''), 6000);
}

/** Call lab `lab`'s API; resolve to the JSON body, or throw an Error carrying the server's `detail`. */
async function call(lab, method, path, body) {
  const init = { method, headers: { accept: 'application/json, application/problem+json' } };
  if (body !== undefined) {
    init.headers['content-type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let res;
  try {
    res = await fetch(`/api/labs/${encodeURIComponent(lab)}${path}`, init);
  } catch {
    throw new Error('the server did not answer. Is it running? The page reconnects by itself when it is back.');
  }
  const text = await res.text();
  let json = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    // Not JSON: fall through to the status line below.
  }
  if (!res.ok) {
    const detail = json?.detail || json?.title || `${res.status} ${res.statusText}`.trim();
    throw new Error(detail);
  }
  return json;
}

/** What each mode does with the current parameters, in a few words. */
function describeMode(mode, ds, policy) {
  const ra = `Retry-After ${ds.retry_after_s} s`;
  switch (mode) {
    case 'healthy':
      return `answers 200 after ${range(ds.latency_ms)}`;
    case 'flaky':
      return `${Math.round(ds.failure_rate * 100)} % get 503 with ${ra}, the rest 200 after ${range(ds.latency_ms)}`;
    case 'slow': {
      const [lo, hi] = ds.slow_ms;
      const t = policy.timeout_ms;
      const relation = lo > t ? 'past' : hi < t ? 'within' : 'around';
      return `applies the write, answers after ${range(ds.slow_ms)}, ${relation} the client's ${duration(t)} timeout`;
    }
    case 'down':
      return `503 with ${ra} every time, applies nothing`;
    default:
      return '';
  }
}

/** Fill a form from the model unless the person is editing it. */
function fill(form, values) {
  if (form.dataset.dirty === 'true') return;
  for (const [name, value] of Object.entries(values)) {
    const input = form.elements.namedItem(name);
    if (!input) continue;
    if (input.type === 'checkbox') input.checked = Boolean(value);
    else input.value = String(value);
  }
}

const num = (form, name) => Number(form.elements.namedItem(name).value);

/** The controls of lab `lab`: returns { sync, disable, replay }. */
export function createControls(model, lab) {
  const modeButtons = [...document.querySelectorAll('.mode[data-mode]')];
  const params = document.getElementById('params-form');
  const policy = document.getElementById('policy-form');
  const burst = document.getElementById('custom-burst');
  /** Set once the lab is gone: controls stay disabled from then on. */
  let gone = false;
  const api = (method, path, body) => call(lab, method, path, body);

  /** Run an API call from a control, keeping the control busy until it answers. */
  async function act(control, failurePrefix, run) {
    control.disabled = true;
    control.setAttribute('aria-busy', 'true');
    try {
      await run();
    } catch (err) {
      say(`${failurePrefix}: ${err.message}`, 'error');
    } finally {
      control.disabled = gone;
      control.removeAttribute('aria-busy');
    }
  }

  /**
   * Replay some dead letters (`ids`) or every one that is not quarantined (`ids` omitted).
   * Quarantined ones need `confirmQuarantined`, which the server insists on.
   */
  function replay(control, ids, confirmQuarantined = false) {
    const body = ids ? { ids } : {};
    if (confirmQuarantined) body.confirm_quarantined = true;
    return act(control, 'Could not replay', async () => {
      const res = await api('POST', '/dead-letters/replay', body);
      const n = res?.message_ids?.length ?? 0;
      if (n > 0) say(`Replaying ${n} dead letter${n === 1 ? '' : 's'} with ${n === 1 ? 'its' : 'their'} original key${n === 1 ? '' : 's'}.`);
      else if (ids) say('Nothing was replayed.');
      else say('Nothing to replay: no dead letter outside quarantine. Replay quarantined ones one by one, after finding the cause.');
    });
  }

  dismissEl().addEventListener('click', () => say(''));

  for (const button of modeButtons) {
    button.addEventListener('click', () =>
      act(button, 'Could not change the downstream', async () => {
        await api('PUT', '/downstream', { mode: button.dataset.mode });
        say(`Downstream is now ${button.dataset.mode}.`);
      }),
    );
  }

  for (const form of [params, policy]) {
    form.addEventListener('input', () => {
      form.dataset.dirty = 'true';
    });
    form.querySelector('[data-revert]').addEventListener('click', () => {
      form.dataset.dirty = 'false';
      sync({ settings: true });
    });
  }

  params.addEventListener('submit', (e) => {
    e.preventDefault();
    const body = {
      mode: model.downstream?.mode ?? 'healthy',
      latency_ms: [num(params, 'latency_min'), num(params, 'latency_max')],
      slow_ms: [num(params, 'slow_min'), num(params, 'slow_max')],
      failure_rate: num(params, 'failure_pct') / 100,
      retry_after_s: num(params, 'retry_after_s'),
    };
    act(e.submitter ?? params, 'Could not change the parameters', async () => {
      await api('PUT', '/downstream', body);
      params.dataset.dirty = 'false';
      say('Downstream parameters applied.');
    });
  });

  policy.addEventListener('submit', (e) => {
    e.preventDefault();
    const body = {
      jitter: policy.elements.namedItem('jitter').value,
      base_ms: num(policy, 'base_ms'),
      cap_ms: num(policy, 'cap_ms'),
      max_attempts: num(policy, 'max_attempts'),
      timeout_ms: num(policy, 'timeout_ms'),
      honor_retry_after: policy.elements.namedItem('honor_retry_after').checked,
      retry_after_cap_ms: num(policy, 'retry_after_cap_ms'),
    };
    act(e.submitter ?? policy, 'Could not change the retry policy', async () => {
      await api('PUT', '/policy', body);
      policy.dataset.dirty = 'false';
      say('Retry policy applied. New waits follow it; earlier ones keep what they measured.');
    });
  });

  const send = (control, count) =>
    act(control, 'Could not send', async () => {
      const res = await api('POST', '/bursts', { count });
      const ids = res?.message_ids ?? [];
      const which = ids.length > 1 ? ` (#${ids[0]}–#${ids[ids.length - 1]})` : ids.length ? ` (#${ids[0]})` : '';
      say(`Sent ${ids.length} message${ids.length === 1 ? '' : 's'}${which}.`);
    });

  for (const button of document.querySelectorAll('[data-send]')) {
    button.addEventListener('click', () => send(button, Number(button.dataset.send)));
  }
  burst.addEventListener('submit', (e) => {
    e.preventDefault();
    send(e.submitter ?? burst, num(burst, 'count'));
  });

  for (const button of document.querySelectorAll('[data-replay-all]')) {
    button.addEventListener('click', () => replay(button));
  }

  const crash = document.querySelector('[data-crash]');
  crash.addEventListener('click', () =>
    act(crash, 'Could not crash the client', async () => {
      const res = await api('POST', '/crash-client');
      const n = res?.resumed ?? 0;
      say(`The client was killed and restarted; it read ${n} unfinished message${n === 1 ? '' : 's'} back from the store and resumed ${n === 1 ? 'it' : 'them'}.`);
    }),
  );

  const reset = document.querySelector('[data-reset]');
  reset.addEventListener('click', () =>
    act(reset, 'Could not reset', async () => {
      await api('POST', '/reset');
      say('Lab reset: messages, dead letters and the ledger are cleared.');
    }),
  );

  /** Reflect the model in the controls. */
  function sync(changes) {
    const ds = model.downstream;
    const pol = model.policy;
    if ((changes.all || changes.settings) && ds && pol) {
      for (const button of modeButtons) {
        const mode = button.dataset.mode;
        button.setAttribute('aria-pressed', String(mode === ds.mode));
        button.querySelector('.mode-what').textContent = describeMode(mode, ds, pol);
      }
      fill(params, {
        latency_min: ds.latency_ms[0],
        latency_max: ds.latency_ms[1],
        slow_min: ds.slow_ms[0],
        slow_max: ds.slow_ms[1],
        failure_pct: Math.round(ds.failure_rate * 100),
        retry_after_s: ds.retry_after_s,
      });
      fill(policy, pol);
    }
    if (changes.all && model.limits?.max_burst) {
      burst.elements.namedItem('count').max = String(model.limits.max_burst);
    }
  }

  /** Stop every control once the lab is gone; only "start a new lab" makes sense then. */
  function disable() {
    gone = true;
    for (const el of document.querySelectorAll('main button, main input, main select')) el.disabled = true;
  }

  return { sync, disable, replay };
}
