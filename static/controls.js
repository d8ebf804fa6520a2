//! Everything the person presses: downstream mode (for good, or for an outage window),
//! parameters, retry policy, traffic, replay and reset. Each control calls the HTTP API and
//! reports the outcome in the status line; it never touches the model, which changes only when
//! the server's events say so. The lab they act on is passed in; `replay` (for the dead-letter
//! table) and `act` and `api` (for the presets) are handed on through the object
//! `createControls` returns.

import { duration, labNow, range } from './model.js';
import { takeHome } from './take-home.js';

/** What the forms show for a breaker or a budget while it is off, ready to switch on. */
const BREAKER_OFF = { failure_threshold: 5, open_ms: 2000, half_open_probes: 1, refused: 'retry' };
const BUDGET_OFF = { ratio: 0.1, min_per_s: 1 };
/** How often the outage countdown is redrawn. */
const COUNTDOWN_MS = 100;

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
    const error = new Error(detail);
    error.field = json?.field;
    throw error;
  }
  return json;
}

/** What each mode does with the current parameters, in a few words. */
function describeMode(mode, ds, policy) {
  const ra =
    ds.retry_after_s == null
      ? "no Retry-After (the client's own backoff decides)"
      : ds.retry_after_s === 0
        ? 'Retry-After 0 (retry at once)'
        : `Retry-After ${ds.retry_after_s} s`;
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
    case 'throttled':
      if (ds.rate_per_s == null) return 'a rate limit shared by every caller; over it, 429 with Retry-After';
      return `${ds.rate_per_s} requests/s for all callers, bursts of ${ds.burst}; over it 429 with Retry-After`;
    case 'overloaded':
      if (ds.capacity == null) return 'works on a few at once, queues a few more, turns the rest away with 503';
      return `${ds.capacity} at once (${range(ds.latency_ms)} each), ${ds.queue} more wait; the rest get 503 at once${defended(ds.defences)}`;
    default:
      return '';
  }
}

/** The overloaded endpoint's defences in words, or nothing when none is on. */
function defended(d) {
  if (!d) return '';
  const on = [];
  if (d.deadline) on.push('drops work whose client will have given up');
  if (d.retries_first) on.push('sheds a retry from a full line to make room for a first attempt');
  if (d.pushback) on.push('tells a retry it shed not to retry');
  if (d.queue === 'lifo') on.push('serves the newest first');
  if (d.queue === 'adaptive_lifo') on.push(`serves the newest first once a queue stands ${d.codel_interval_ms} ms`);
  if (d.queue === 'codel') on.push(`drops what waited over ${d.codel_target_ms} ms once a queue stands ${d.codel_interval_ms} ms`);
  if (d.queue_timeout_ms != null) on.push(`drops what waited in line over ${d.queue_timeout_ms} ms (a queue timeout)`);
  if (d.limit?.kind === 'aimd') on.push(`refuses past an AIMD limit of ${d.limit.min_limit}-${d.limit.max_limit} in flight`);
  if (d.limit?.kind === 'gradient2') on.push(`refuses past a Gradient2 limit of ${d.limit.min_limit}-${d.limit.max_limit} in flight`);
  if (d.admission) on.push(`refuses at random as fewer than ${Math.round(d.admission.sr_threshold * 100)} % of recent requests succeed`);
  return on.length ? `; it ${on.join(', and ')}` : '';
}

/** Fill a form from the model unless the person is editing it. */
function fill(form, values) {
  if (form.dataset.dirty === 'true') return;
  for (const [name, value] of Object.entries(values)) {
    const input = form.elements.namedItem(name);
    if (!input || value == null) continue;
    if (input.type === 'checkbox') input.checked = Boolean(value);
    else input.value = String(value);
  }
}

const num = (form, name) => Number(form.elements.namedItem(name).value);
const checked = (form, name) => form.elements.namedItem(name).checked;

/** A switch in a fieldset's legend turns the fieldset's numbers on and off (off: not required). */
function syncSwitches(form) {
  for (const fieldset of form.querySelectorAll('fieldset')) {
    const toggle = fieldset.querySelector('legend input[type="checkbox"]');
    // Controls in a fieldset's first legend stay enabled when the fieldset is disabled.
    if (toggle && toggle.name !== 'honor_retry_after') fieldset.disabled = !toggle.checked;
  }
}

/**
 * On a phone the status line is a row of the top bar, never a toast over the page: at the
 * bottom of a narrow screen it covered the controls there.
 */
function placeStatus(narrow) {
  const bar = document.querySelector('.statusbar');
  if (!bar) return;
  if (narrow) document.querySelector('.topbar').append(bar);
  else if (bar.parentElement !== document.body) document.body.append(bar);
}

/** The controls of lab `lab`: returns { sync, disable, replay }. */
export function createControls(model, lab) {
  const narrow = matchMedia('(max-width: 600px)');
  placeStatus(narrow.matches);
  narrow.addEventListener('change', (e) => placeStatus(e.matches));
  const modeButtons = [...document.querySelectorAll('.mode[data-mode]')];
  const modeNow = document.querySelector('[data-mode-now]');
  const modeNowWhat = document.querySelector('[data-mode-now-what]');
  const params = document.getElementById('params-form');
  const policy = document.getElementById('policy-form');
  const homeSlot = document.querySelector('[data-lab-take-home]');
  const burst = document.getElementById('custom-burst');
  const outageFor = document.querySelector('[data-outage-for]');
  const revertEl = document.querySelector('[data-revert]');
  const revertText = document.querySelector('[data-revert-text]');
  let countdown = 0;
  /** Set once the lab is gone: controls stay disabled from then on. */
  let gone = false;
  const api = (method, path, body) => call(lab, method, path, body);

  /**
   * Run an API call from a control, keeping the control busy until it answers. Busy is
   * `aria-disabled`, not `disabled`: a disabled button loses the keyboard focus (it goes to
   * the page), so a second Enter or Space would press nothing. A press while busy is ignored.
   */
  async function act(control, failurePrefix, run) {
    if (control.getAttribute('aria-busy') === 'true' || gone) return;
    control.setAttribute('aria-disabled', 'true');
    control.setAttribute('aria-busy', 'true');
    try {
      await run();
    } catch (err) {
      say(`${failurePrefix}: ${err.message}`, 'error');
    } finally {
      control.removeAttribute('aria-busy');
      if (gone) control.disabled = true;
      else control.removeAttribute('aria-disabled');
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

  // The endpoint is a real one: any HTTP client may call it, so the page gives its address.
  const endpointEl = document.querySelector('[data-endpoint-url]');
  const copyEl = document.querySelector('[data-copy-endpoint]');
  if (endpointEl) {
    endpointEl.textContent = `${location.origin}/labs/${encodeURIComponent(lab)}/downstream`;
    copyEl.addEventListener('click', async () => {
      try {
        await navigator.clipboard.writeText(endpointEl.textContent);
        say('Endpoint URL copied.');
      } catch {
        // No clipboard (an insecure origin, a refused permission): select it for a Ctrl+C.
        getSelection().selectAllChildren(endpointEl);
        say('The endpoint URL is selected: press Ctrl+C (⌘C) to copy it.');
      }
    });
  }

  for (const button of modeButtons) {
    button.addEventListener('click', () =>
      act(button, 'Could not change the downstream', async () => {
        const mode = button.dataset.mode;
        // An outage window: the server puts the old settings back by itself after `for_ms`.
        const forMs = Number(outageFor.value) || 0;
        const res = await api('PUT', '/downstream', forMs ? { mode, for_ms: forMs } : { mode });
        const back = res?.revert?.to?.mode;
        say(forMs && back ? `Downstream is ${mode} for ${duration(forMs)}, then back to ${back}.` : `Downstream is now ${mode}.`);
      }),
    );
  }

  for (const form of [params, policy]) {
    form.addEventListener('input', () => {
      form.dataset.dirty = 'true';
      syncSwitches(form);
    });
    form.querySelector('[data-revert-form]').addEventListener('click', () => {
      form.dataset.dirty = 'false';
      sync({ settings: true });
    });
  }

  /** The form's input for a 422's `field` (`policy.breaker.open_ms` is `open_ms`). */
  const INPUT_OF = { latency_ms: 'latency_min', slow_ms: 'slow_min', failure_rate: 'failure_pct', for_ms: 'for_s' };

  /**
   * Applies a settings form, marking the input the server refused (`aria-invalid`, focused)
   * until the next apply.
   */
  async function applyForm(form, path, body) {
    for (const input of form.querySelectorAll('[aria-invalid]')) input.removeAttribute('aria-invalid');
    try {
      await api('PUT', path, body);
    } catch (err) {
      const name = err.field?.split('.').pop();
      const input = name && form.elements.namedItem(INPUT_OF[name] ?? name);
      if (input instanceof HTMLElement) {
        input.setAttribute('aria-invalid', 'true');
        input.focus();
      }
      throw err;
    }
  }

  params.addEventListener('submit', (e) => {
    e.preventDefault();
    const body = {
      mode: model.downstream?.mode ?? 'healthy',
      latency_ms: [num(params, 'latency_min'), num(params, 'latency_max')],
      slow_ms: [num(params, 'slow_min'), num(params, 'slow_max')],
      failure_rate: num(params, 'failure_pct') / 100,
      retry_after_s: num(params, 'retry_after_s'),
      rate_per_s: num(params, 'rate_per_s'),
      burst: num(params, 'burst'),
      capacity: num(params, 'capacity'),
      queue: num(params, 'queue'),
    };
    // The defences are the overloaded mode's: another mode refuses them.
    if (body.mode === 'overloaded') {
      body.defences = {
        deadline: checked(params, 'deadline'),
        retries_first: checked(params, 'retries_first'),
        // Pushback rides on retries first; alone it is refused.
        pushback: checked(params, 'retries_first') && checked(params, 'pushback'),
        queue: params.elements.namedItem('queue_discipline').value,
        codel_target_ms: num(params, 'codel_target_ms'),
        codel_interval_ms: num(params, 'codel_interval_ms'),
        // Empty is off (null), as HAProxy leaves `timeout queue` unset.
        queue_timeout_ms: params.elements.namedItem('queue_timeout_ms').value === '' ? null : num(params, 'queue_timeout_ms'),
        // The form names a limit's kind and admission control on or off; the parameters set
        // through the API stay while the kind does.
        limit: keptLimit(params.elements.namedItem('limit_kind').value),
        admission: checked(params, 'admission') ? (model.downstream?.defences?.admission ?? {}) : null,
      };
    }
    act(e.submitter ?? params, 'Could not change the parameters', async () => {
      await applyForm(params, '/downstream', body);
      params.dataset.dirty = 'false';
      say('Downstream parameters applied.');
    });
  });

  // A preset from the same table the chapters and /compare use, applied as PUT /policy.
  const presetPick = policy.querySelector('[data-policy-preset]');
  const presetApply = policy.querySelector('[data-apply-preset]');
  const presetTable = fetch('/static/policy-presets.json').then((res) => res.json());
  presetTable.then((presets) => {
    presetPick.append(...presets.map((p) => Object.assign(new Option(p.name, p.name), { title: p.what })));
  }).catch(() => {});
  presetApply.addEventListener('click', () => {
    act(presetApply, 'Could not apply the preset', async () => {
      const preset = (await presetTable).find((p) => p.name === presetPick.value);
      if (!preset) throw new Error('choose a preset first');
      await applyForm(policy, '/policy', preset.policy);
      policy.dataset.dirty = 'false';
      say(`Preset ${preset.name} applied. New waits follow it; earlier ones keep what they measured.`);
    });
  });

  policy.addEventListener('submit', (e) => {
    e.preventDefault();
    const body = {
      jitter: policy.elements.namedItem('jitter').value,
      base_ms: num(policy, 'base_ms'),
      multiplier: num(policy, 'multiplier'),
      cap_ms: num(policy, 'cap_ms'),
      jitter_ms: num(policy, 'jitter_ms'),
      jitter_ratio: num(policy, 'jitter_ratio'),
      first_retry_at_once: checked(policy, 'first_retry_at_once'),
      max_attempts: num(policy, 'max_attempts'),
      max_total_ms: num(policy, 'max_total_ms'),
      timeout_ms: num(policy, 'timeout_ms'),
      quarantine_after: num(policy, 'quarantine_after'),
      clients: num(policy, 'clients'),
      honor_retry_after: checked(policy, 'honor_retry_after'),
      retry_after_mode: policy.elements.namedItem('retry_after_mode').value,
      retry_after_cap_ms: num(policy, 'retry_after_cap_ms'),
      breaker: checked(policy, 'breaker_on')
        ? {
          failure_threshold: num(policy, 'failure_threshold'),
          open_ms: num(policy, 'open_ms'),
          half_open_probes: num(policy, 'half_open_probes'),
          refused: policy.elements.namedItem('refused').value,
        }
        : null,
      retry_budget: checked(policy, 'budget_on') ? { ratio: num(policy, 'ratio'), min_per_s: num(policy, 'min_per_s') } : null,
    };
    act(e.submitter ?? policy, 'Could not change the retry policy', async () => {
      await applyForm(policy, '/policy', body);
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

  // "Replay all" is the dead-letter actions' (dlq-actions.js): it shows a dry run first.

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

  /** The limit the form sends for `kind`: the one in force when it is of that kind. */
  function keptLimit(kind) {
    const now = model.downstream?.defences?.limit;
    return now?.kind === kind ? now : { kind };
  }

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
      // The story shows the mode in words instead of the switches.
      modeNow.textContent = ds.mode;
      modeNowWhat.textContent = describeMode(ds.mode, ds, pol);
      fill(params, {
        latency_min: ds.latency_ms[0],
        latency_max: ds.latency_ms[1],
        slow_min: ds.slow_ms[0],
        slow_max: ds.slow_ms[1],
        failure_pct: Math.round(ds.failure_rate * 100),
        retry_after_s: ds.retry_after_s,
        rate_per_s: ds.rate_per_s,
        burst: ds.burst,
        capacity: ds.capacity,
        queue: ds.queue,
        deadline: ds.defences?.deadline,
        retries_first: ds.defences?.retries_first,
        pushback: ds.defences?.pushback,
        queue_discipline: ds.defences?.queue,
        codel_target_ms: ds.defences?.codel_target_ms,
        codel_interval_ms: ds.defences?.codel_interval_ms,
        queue_timeout_ms: ds.defences?.queue_timeout_ms ?? '',
        limit_kind: ds.defences?.limit?.kind ?? 'fixed',
        admission: ds.defences?.admission != null,
      });
      fill(policy, {
        ...pol,
        clients: pol.clients ?? 1,
        multiplier: pol.multiplier ?? 2,
        max_total_ms: pol.max_total_ms ?? 0,
        retry_after_mode: pol.retry_after_mode ?? 'floor',
        jitter_ms: pol.jitter_ms ?? 100,
        jitter_ratio: pol.jitter_ratio ?? 0.2,
        first_retry_at_once: pol.first_retry_at_once ?? false,
        breaker_on: pol.breaker != null,
        ...BREAKER_OFF,
        ...(pol.breaker ?? {}),
        budget_on: pol.retry_budget != null,
        ...(pol.retry_budget ?? BUDGET_OFF),
      });
      if (policy.dataset.dirty !== 'true') syncSwitches(policy);
      syncTakeHome(pol);
      syncCountdown();
    }
    if (changes.all && model.limits?.max_burst) {
      burst.elements.namedItem('count').max = String(model.limits.max_burst);
    }
  }

  /**
   * "take it home" for the lab's policy as it stands: made again when the policy changes (a
   * program already shown would be for the old one), and left open if it was.
   */
  function syncTakeHome(pol) {
    // The settings alone: the snapshot adds each attempt's band, which a policy does not take.
    const { bands: _bands, ...settings } = pol;
    const json = JSON.stringify(settings);
    if (!homeSlot || homeSlot.dataset.policy === json) return;
    homeSlot.dataset.policy = json;
    const fresh = takeHome("this lab's policy", settings, 'take this policy home: a client for your retry library');
    fresh.open = homeSlot.firstElementChild?.open ?? false;
    homeSlot.replaceChildren(fresh);
  }

  /** While the downstream holds a mode for a set time, count down to when it goes back. */
  function syncCountdown() {
    const revert = model.downstream?.revert;
    if (!revert) {
      clearInterval(countdown);
      countdown = 0;
      revertEl.hidden = true;
      delete revertEl.dataset.revertAt;
      return;
    }
    revertEl.dataset.revertAt = String(revert.at_ms);
    revertEl.dataset.revertTo = revert.to?.mode ?? '';
    tick();
    countdown ||= setInterval(tick, COUNTDOWN_MS);
  }

  function tick() {
    const revert = model.downstream?.revert;
    if (!revert) return syncCountdown();
    const left = revert.at_ms - labNow(model);
    const to = revert.to?.mode ?? 'the earlier settings';
    // The server sends the change when it happens; until then the countdown says it is due.
    const text = left > 0 ? `back to ${to} in ${(left / 1000).toFixed(1)} s` : `going back to ${to}…`;
    if (revertText.textContent !== text) revertText.textContent = text;
    revertEl.hidden = false;
  }

  /** Stop every control once the lab is gone; only "start a new lab" makes sense then. */
  function disable() {
    gone = true;
    clearInterval(countdown);
    for (const el of document.querySelectorAll('main button, main input, main select')) el.disabled = true;
  }

  return { sync, disable, replay, act, api };
}
