//! Claims that check themselves: the sentences a story step or a preset says about its run,
//! each shown with the server's verdict and the figure it rests on (`GET .../claims`, whose
//! definitions the tests evaluate too). Pending until the run's messages have settled; then
//! "✔ 454 of 474 requests were 503s", or "✘ only ..." when this run did not bear it out.

import { say } from './controls.js';

/**
 * The claims list `list` (one item per claim: `data-claim`, `data-verdict` pending, holds,
 * fails or unknown (its messages are gone from the lab, so it cannot be judged),
 * `data-figure`), asked of the server through `api`.
 */
export function createClaims(list, api) {
  /** The claims on show and the messages they speak of: { ids, scope } or null. */
  let current = null;
  let asking = false;

  /** Shows `ids` as pending, about `scope`: { messages, before } (message ids), or { from_ms }
   *  (lab time of a change made while traffic runs, also kept as the item's `data-from-ms`). */
  function show(ids, scope) {
    current = ids.length ? { ids, scope } : null;
    list.replaceChildren(
      ...ids.map((id) => {
        const li = document.createElement('li');
        li.dataset.claim = id;
        li.dataset.verdict = 'pending';
        li.dataset.figure = '';
        if (scope.from_ms != null) li.dataset.fromMs = String(scope.from_ms);
        li.textContent = '… waiting for the run to settle';
        return li;
      }),
    );
    tick();
  }

  /** Asks for the verdicts still pending; called twice a second. */
  async function tick() {
    if (!current || asking) return;
    const pending = [...list.querySelectorAll('[data-verdict="pending"]')];
    if (!pending.length) return;
    const asked = current;
    const query = new URLSearchParams({ ids: pending.map((el) => el.dataset.claim).join(',') });
    if (asked.scope.messages?.length) query.set('messages', asked.scope.messages.join(','));
    if (asked.scope.before?.length) query.set('before', asked.scope.before.join(','));
    if (asked.scope.from_ms != null) query.set('from_ms', String(asked.scope.from_ms));
    asking = true;
    try {
      const res = await api('GET', `/claims?${query}`);
      if (current !== asked) return;
      for (const claim of res.claims) {
        const el = list.querySelector(`[data-claim="${claim.id}"]`);
        if (!el || claim.verdict === 'pending') continue;
        el.dataset.verdict = claim.verdict;
        el.dataset.figure = claim.figure;
        const mark = { holds: '✔', fails: '✘', unknown: '?' }[claim.verdict] ?? '';
        el.textContent = `${mark} ${claim.said}`;
      }
    } catch (err) {
      say(`Could not check the claims: ${err.message}`, 'error');
    } finally {
      asking = false;
    }
  }

  return { show, tick };
}
