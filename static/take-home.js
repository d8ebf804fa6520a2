//! "take it home": a policy as a real retry library's client program, from
//! `GET /api/policies/export`, with what the library cannot express and what `retrylab grade`
//! will mark down in it. Under each column of a comparison (`compare-table.js`) and in the lab
//! page's retry policy drawer (`controls.js`).

/** The libraries `GET /api/policies/export` writes a client for. */
const LIBRARIES = ['urllib3', 'tenacity', 'stamina', 'httpx-retries', 'got', 'axios-retry', 'go-retryablehttp'];

/**
 * "take it home" (or `label`): a library picker that asks the server for `settings` (a column's
 * policy, or the lab's) as that library's client program, and shows it with what the library cannot express and what
 * `retrylab grade` will mark down in it. A policy that honours `Retry-After` offers to draw its
 * jitter past the header instead (`retry_after_mode: jitter_above`), the change the cautions
 * most often name.
 */
export function takeHome(name, settings, label = 'take it home') {
  const details = document.createElement('details');
  details.className = 'cmp-take-home';
  details.dataset.takeHome = name;
  const summary = document.createElement('summary');
  summary.textContent = label;
  const pick = document.createElement('select');
  pick.setAttribute('aria-label', `library to write ${name} for`);
  pick.append(...LIBRARIES.map((id) => new Option(id, id)));
  const show = document.createElement('button');
  show.type = 'button';
  show.className = 'secondary small';
  show.textContent = 'write the client';
  const said = document.createElement('ul');
  said.className = 'cmp-unsupported';
  const pre = document.createElement('pre');
  pre.dataset.exported = '';
  pre.hidden = true;
  const copy = document.createElement('button');
  copy.type = 'button';
  copy.className = 'secondary small';
  copy.textContent = 'copy';
  copy.hidden = true;
  copy.addEventListener('click', () => navigator.clipboard?.writeText(pre.textContent));
  const above = document.createElement('label');
  above.className = 'cmp-above';
  const aboveBox = Object.assign(document.createElement('input'), { type: 'checkbox' });
  above.append(aboveBox, ' jitter past Retry-After');
  above.hidden = !settings.honor_retry_after || settings.retry_after_mode === 'jitter_above';
  // The comparison seeds each run; at home the client draws fresh randomness.
  const { seed: _seed, ...policy } = settings;
  const write = async () => {
    show.disabled = true;
    try {
      const asked = aboveBox.checked ? { ...policy, retry_after_mode: 'jitter_above' } : policy;
      const query = new URLSearchParams({ policy: JSON.stringify(asked), library: pick.value });
      const res = await fetch(`/api/policies/export?${query}`, { headers: { accept: 'application/json, application/problem+json' } });
      const body = await res.json();
      if (!res.ok) throw new Error(body.detail ?? res.statusText);
      pre.textContent = body.code;
      const item = (text) => Object.assign(document.createElement('li'), { textContent: text });
      said.replaceChildren(
        ...body.unsupported.map((s) => item(`${body.library} cannot: ${s}`)),
        ...body.cautions.map((s) => item(`caution: ${s}`)),
      );
      pre.hidden = false;
      copy.hidden = false;
    } catch (err) {
      said.replaceChildren(Object.assign(document.createElement('li'), { textContent: `could not write it: ${err.message}` }));
    } finally {
      show.disabled = false;
    }
  };
  show.addEventListener('click', write);
  // Once a program is shown, the box rewrites it.
  aboveBox.addEventListener('change', () => { if (!pre.hidden) write(); });
  details.append(summary, pick, ' ', show, ' ', copy, above, said, pre);
  return details;
}
