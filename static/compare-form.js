//! The form on /compare: a scenario, 2 to 5 policies (presets and one custom policy), a burst
//! and a seed. It posts to `POST /api/comparisons` and goes to the comparison's own address;
//! a refusal's `detail` is shown under the form, as the server wrote it.
//!
//! A query string fills the form in (`?scenario=overload&burst=20&seed=1&policy=none&policy=full`),
//! so a comparison's page can offer "change it and run again".
//!
//! Choosing server defences (up to 3, `&defence=codel`) makes it a grid: a row per defence, a
//! column per policy, then 1 to 3 policies.

const MIN_POLICIES = 2;
const MAX_POLICIES = 5;
const MAX_GRID_POLICIES = 3;

export function createForm(form) {
  const countEl = form.querySelector('[data-policy-count]');
  const errorEl = form.querySelector('[data-form-error]');
  const start = form.querySelector('[data-start]');
  const customName = form.elements.namedItem('custom_name');
  const customPolicy = form.elements.namedItem('custom_policy');
  const presets = () => [...form.querySelectorAll('input[name="policy"]')];
  const defenceSelects = () => [...form.querySelectorAll('select[data-defence]')];
  /** The defences chosen, each once, in the order of the selects. */
  const defences = () => {
    const seen = new Set();
    return defenceSelects()
      .map((select) => select.selectedOptions[0])
      .filter((option) => option && option.value && !seen.has(option.value) && seen.add(option.value))
      .map((option) => ({ name: option.value, defences: JSON.parse(option.dataset.defences) }));
  };
  /** How many policies the form takes: fewer in a grid (its columns). */
  const bounds = () => (defences().length ? [defences().length > 1 ? 1 : 2, MAX_GRID_POLICIES] : [MIN_POLICIES, MAX_POLICIES]);

  prefill(form, new URLSearchParams(location.search));

  /** The custom policy counts once it has a name or some JSON. */
  const customUsed = () => customName.value.trim() !== '' || customPolicy.value.trim() !== '';
  const chosen = () => presets().filter((p) => p.checked).length + (customUsed() ? 1 : 0);

  function showCount() {
    const n = chosen();
    const [min, max] = bounds();
    const ok = n >= min && n <= max;
    const grid = defences().length ? ' (a grid takes at most 3)' : '';
    countEl.textContent = `${n} chosen${ok ? '' : n < min ? `: choose at least ${min}` : `: at most ${max}${grid}`}`;
    countEl.dataset.ok = String(ok);
    countEl.dataset.count = String(n);
  }

  function showError(text) {
    errorEl.textContent = text;
    errorEl.hidden = !text;
  }

  form.addEventListener('input', () => {
    showCount();
    if (!errorEl.hidden) showError('');
    customPolicy.removeAttribute('aria-invalid');
  });
  showCount();

  /** The request body, or a sentence saying what to fix. */
  function request() {
    const data = new FormData(form);
    const policies = presets().filter((p) => p.checked).map((p) => p.value);
    if (customUsed()) {
      const name = customName.value.trim();
      if (!name) return { error: 'Give your own policy a name: it heads its column.' };
      if (policies.includes(name)) return { error: `“${name}” is already a preset's name: choose another for your own policy.` };
      let policy;
      try {
        policy = JSON.parse(customPolicy.value.trim() || '{}');
      } catch (e) {
        customPolicy.setAttribute('aria-invalid', 'true');
        return { error: `Your own policy is not valid JSON: ${e.message}` };
      }
      if (policy === null || typeof policy !== 'object' || Array.isArray(policy)) {
        customPolicy.setAttribute('aria-invalid', 'true');
        return { error: 'Your own policy is a JSON object of policy fields, such as {"jitter": "full"}.' };
      }
      policies.push({ name, policy });
    }
    const [min, max] = bounds();
    if (policies.length < min || policies.length > max) {
      const grid = defences().length ? ' for a grid with these defences' : '';
      return { error: `Choose ${min} to ${max} policies${grid}; ${policies.length} ${policies.length === 1 ? 'is' : 'are'} chosen.` };
    }
    const burst = Number(data.get('burst'));
    const seed = Number(data.get('seed'));
    // Empty: the server's default, the fewest runs its test can decide on.
    const rawRuns = String(data.get('runs') ?? '').trim();
    const runs = rawRuns === '' ? undefined : Number(rawRuns);
    if (!Number.isInteger(burst) || burst < 1) return { error: 'The burst is a whole number of messages, 1 or more.' };
    if (!Number.isInteger(seed) || seed < 0) return { error: 'The seed is a whole number, 0 or more.' };
    if (runs !== undefined && (!Number.isInteger(runs) || runs < 1)) return { error: 'Runs is a whole number, 1 or more (or empty for the default).' };
    const body = { scenario: data.get('scenario'), burst, seed, runs, policies };
    if (defences().length) body.defences = defences();
    return { body };
  }

  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const { body, error } = request();
    if (error) return showError(error);
    showError('');
    start.disabled = true;
    start.setAttribute('aria-busy', 'true');
    try {
      const res = await fetch('/api/comparisons', {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json, application/problem+json' },
        body: JSON.stringify(body),
      });
      const json = await res.json().catch(() => null);
      if (!res.ok) {
        throw new Error(json?.detail || json?.title || `the server answered ${res.status}`);
      }
      location.assign(json?.url || res.headers.get('location'));
    } catch (err) {
      showError(`Not started: ${err.message}`);
      start.disabled = false;
      start.removeAttribute('aria-busy');
    }
  });
}

/** Fill the form in from a query string; unknown values are ignored. */
function prefill(form, params) {
  const scenario = params.get('scenario');
  const radio = scenario && [...form.querySelectorAll('input[name="scenario"]')].find((r) => r.value === scenario);
  if (radio) radio.checked = true;
  const policies = params.getAll('policy');
  if (policies.length) {
    for (const box of form.querySelectorAll('input[name="policy"]')) box.checked = policies.includes(box.value);
  }
  params.getAll('defence').slice(0, 3).forEach((name, i) => {
    const select = form.querySelectorAll('select[data-defence]')[i];
    if (select && [...select.options].some((o) => o.value === name)) select.value = name;
  });
  for (const name of ['burst', 'seed', 'runs']) {
    const value = params.get(name);
    if (value !== null && /^\d+$/.test(value)) form.elements.namedItem(name).value = value;
  }
}

/** The query string that fills the form in with a comparison's choices (a custom policy's
 *  name matches no preset, so it is left for the person to write again). */
export function againQuery(report) {
  const params = new URLSearchParams({ scenario: report.scenario, burst: String(report.burst), seed: String(report.seed), runs: String(report.runs ?? 1) });
  for (const policy of report.policies) params.append('policy', policy.name);
  for (const row of report.grid?.rows ?? []) params.append('defence', row.name);
  return `?${params}`;
}
