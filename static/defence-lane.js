//! The defence lane: what the endpoint's own defences did, per second, drawn as the protection
//! lane draws the client's (`protection-lane.js`), from the same load bins: requests dropped for
//! their deadline, timed out in the queue (CoDel or HAProxy's queue timeout), retries shed, refused by the adaptive limit
//! or by admission control, as bars; the adaptive limit as a line; and the tenths of a second
//! the line was served newest first (LIFO). Its figures are the bins' own sums.

import { createProtectionLane } from './protection-lane.js';

/** Each row: the bins' count it sums, its words, and for the limit the bins' level. */
const ROWS = [
  ['deadline', 'dropped_deadline', 'dropped for their deadline'],
  ['codel', 'timed_out_in_queue', 'timed out in the queue (CoDel or the queue timeout)'],
  ['retries_first', 'retries_shed', 'retries shed for first attempts'],
  ['limit', 'refused_by_limit', 'refused by the adaptive concurrency limit'],
  ['admission', 'refused_by_admission', 'refused by admission control'],
  // A bin older than five minutes is summed into 10 s and keeps only whether LIFO was on in it.
  ['lifo', 'lifo', 'tenths of a second served newest first (LIFO; a 10 s span past five minutes counts as one)'],
];
const WORDS = Object.fromEntries(ROWS.map(([kind, , words]) => [kind, words]));

/** The bins as the protection lane reads them: each defence's count and the limit's level. */
export function defenceBins(bins) {
  return [...bins].map((b) => {
    const suppressed = {};
    for (const [kind, field] of ROWS) {
      const n = Number(b[field] ?? 0);
      if (n > 0) suppressed[kind] = n;
    }
    return { t_ms: b.t_ms, suppressed, levels: b.limit != null ? { limit: b.limit } : {} };
  });
}

function defenceHead(lane, head) {
  head.innerHTML = '<span data-defence-figure="stopped"></span> <strong></strong>';
  head.querySelector('strong').textContent = WORDS[lane.kind] ?? lane.kind;
  head.querySelector('[data-defence-figure="stopped"]').textContent = String(lane.stopped);
  if (lane.level != null) {
    const now = document.createElement('span');
    now.dataset.defenceFigure = 'level';
    now.textContent = String(lane.level);
    head.append('; the limit now ', now);
  }
}

/** The lane in `panel`: `render(bins, nowMs)` draws it from the model's load bins. */
export function createDefenceLane(panel) {
  const lane = createProtectionLane(panel, { attr: 'defence', head: defenceHead });
  return { render: (bins, nowMs) => lane.render(defenceBins(bins), nowMs) };
}
