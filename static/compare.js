//! Entry point of the compare pages. On /compare it runs the form; on /compare/{id} it polls
//! the comparison's report every half second until every policy is done, fetches each lab's
//! snapshot for its load, and draws the charts and the table from what the server measured.
//! Once done it fetches everything one last time a moment later (an endpoint may still finish
//! work for clients that gave up) and stops.

import { createForm, againQuery } from './compare-form.js';
import { createCharts } from './compare-charts.js';
import { createTable } from './compare-table.js';
import { createGrid } from './compare-grid.js';

const REPORT_EVERY_MS = 500;
/** After a column is done, its last snapshot is taken this much later. */
const SETTLE_MS = 1000;

const main = document.getElementById('compare');
const id = main.dataset.comparison;

if (!id) {
  createForm(document.getElementById('compare-form'));
} else {
  watch(id);
}

class Problem extends Error {
  constructor(status, detail, retryAfterS) {
    super(detail);
    this.status = status;
    this.retryAfterS = retryAfterS;
  }
}

async function getJSON(url) {
  const res = await fetch(url, { headers: { accept: 'application/json, application/problem+json' } });
  const json = await res.json().catch(() => null);
  if (!res.ok) {
    const retry = Number(res.headers.get('retry-after'));
    throw new Problem(res.status, json?.detail || `${res.status} ${res.statusText}`.trim(), retry > 0 ? retry : null);
  }
  return json;
}

function watch(id) {
  const statusEl = main.querySelector('[data-status]');
  const whatEl = main.querySelector('[data-what]');
  const machineEl = main.querySelector('[data-machine]');
  const verdictEl = main.querySelector('[data-verdict]');
  const again = main.querySelector('[data-again]');
  const charts = createCharts(main.querySelector('[data-charts]'), main.querySelector('[data-axis]'));
  const table = createTable(main.querySelector('[data-table]'), main.querySelector('[data-table-hint]'));
  const grid = createGrid(main.querySelector('[data-grid-panel]'));

  /** lab id -> { snapshot, at (when fetched), final (taken SETTLE_MS after the column was done) }. */
  const labs = new Map();
  /** lab id -> when this page first saw the column done. */
  const doneSince = new Map();
  let failures = 0;
  let first = true;

  function say(text, state) {
    if (statusEl.textContent !== text) statusEl.textContent = text;
    main.dataset.state = state;
  }

  /** How often a running column's snapshot is fetched: snapshots carry every attempt, so a
   *  big burst is fetched less often than the report. */
  function snapshotEvery(burst) {
    return Math.min(4000, Math.max(REPORT_EVERY_MS, burst * 5));
  }

  async function refreshLab(column, now, burst) {
    const held = labs.get(column.lab);
    if (column.gone || held?.final) return;
    const settled = column.done && now - doneSince.get(column.lab) >= SETTLE_MS;
    if (!settled && held && now - held.at < snapshotEvery(burst)) return;
    const snapshot = await getJSON(`/api/labs/${column.lab}`);
    labs.set(column.lab, { snapshot, at: now, final: settled });
  }

  async function tick() {
    let report;
    try {
      report = await getJSON(`/api/comparisons/${id}`);
      const now = performance.now();
      // A column already done when the page opened has long settled.
      const since = first ? now - SETTLE_MS : now;
      first = false;
      for (const c of report.columns) if (c.done && !doneSince.has(c.lab)) doneSince.set(c.lab, since);
      await Promise.all(report.columns.map((c) => refreshLab(c, now, report.burst).catch((e) => {
        // A lab deleted between the report and its snapshot is shown as gone next time.
        if (!(e instanceof Problem && e.status === 404)) throw e;
      })));
      failures = 0;
    } catch (e) {
      if (e instanceof Problem && (e.status === 404 || e.status === 400)) {
        say(`This comparison cannot be shown: ${e.message}`, 'missing');
        return;
      }
      failures += 1;
      say(`Lost contact with the server (${e.message}); trying again…`, 'retrying');
      // Back off with jitter, honouring Retry-After: this page follows its own advice.
      const base = Math.min(10_000, REPORT_EVERY_MS * 2 ** failures);
      const floor = (e.retryAfterS ?? 0) * 1000;
      setTimeout(tick, Math.max(floor, base / 2 + Math.random() * (base / 2)));
      return;
    }

    // The one scenario whose load is steady traffic rather than a burst.
    const steady = report.scenario === 'metastable';
    const load = steady ? 'steady traffic' : `burst of ${report.burst}`;
    const runs = (report.runs ?? 1) > 1 ? `, ${report.runs} runs each` : '';
    whatEl.textContent = `· ${report.scenario}, ${load}, seed ${report.seed}${runs}`;
    const late = report.lateness_ms_p99;
    machineEl.hidden = late == null && !report.warning;
    machineEl.dataset.warning = String(Boolean(report.warning));
    machineEl.textContent = report.warning
      ? `Warning: ${report.warning}.`
      : `Machine load: the runs ran ${late} ms behind their schedule (p99); a run past ${report.late_threshold_ms} ms is left out.`;
    showVerdict(verdictEl, report);
    again.hidden = false;
    again.querySelector('[data-again-link]').href = `/compare${againQuery(report)}`;
    const several = (report.runs ?? 1) > 1;
    const columns = report.columns.map((c) => ({
      ...c,
      name: `${c.defence ? `${c.defence} · ` : ''}${several ? `${c.policy}, run ${c.run + 1}${c.attempt ? `, try ${c.attempt + 1}` : ''}` : c.policy}`,
      snapshot: labs.get(c.lab)?.snapshot ?? null,
      steady,
      trigger: report.trigger_ms,
    }));
    // In a grid a policy's runs met different endpoints: its figures are the grid's cells.
    main.querySelector('[data-table-panel]').hidden = Boolean(report.grid);
    if (!report.grid) table.update(report);
    grid.update(report);
    charts.update(columns);

    const doneCount = report.columns.filter((c) => c.done).length;
    const finished = report.done && report.columns.every((c) => c.gone || labs.get(c.lab)?.final);
    main.dataset.done = String(finished);
    const policies = report.grid ? report.grid.cells.length : report.policies.length;
    const what = report.grid ? 'cells' : 'policies';
    const each = several ? ` in each of their ${report.runs} runs` : '';
    if (finished) {
      const all = policies === 2 ? 'both' : `all ${policies}`;
      say(`Done: ${all} ${what} have settled every message${each}.`, 'done');
      return;
    }
    const runsDone = new Set(report.columns.filter((c) => c.done).map((c) => c.run));
    const going = report.columns.find((c) => !c.done)?.run ?? 0;
    const finishedRuns = [...runsDone].filter((run) => report.columns.every((c) => c.run !== run || c.done)).length;
    say(several
      ? `Running run ${going + 1} of ${report.runs}: ${finishedRuns} of ${report.runs} runs done (${doneCount} of ${report.columns.length} labs).`
      : `Running: ${doneCount} of ${report.columns.length} ${what} done.`, 'running');
    setTimeout(tick, REPORT_EVERY_MS);
  }

  tick();
}

/** The verdict in words: who is best on the scenario's question, by which test with which
 *  result; or why there is none, and how many runs one needs. */
function showVerdict(el, report) {
  const verdict = report.verdict;
  if (!verdict) return;
  el.hidden = false;
  el.dataset.best = JSON.stringify(verdict.best);
  el.dataset.figure = verdict.figure ?? '';
  const question = (report.key_figure ?? []).join(', then ');
  const parts = [`The question: ${question}. `];
  if (verdict.best.length) {
    parts.push(`Verdict: best ${verdict.best.join(', ')} — ${verdict.result}.`);
  } else {
    parts.push(`${verdict.result[0].toUpperCase()}${verdict.result.slice(1)}.`);
  }
  if ((report.runs ?? 1) < verdict.runs_needed) {
    parts.push(` A verdict needs ${verdict.runs_needed} runs of each policy.`);
  }
  parts.push(` Test: ${verdict.test}.`);
  // Why the policies cannot differ here, when their settings show it (the Retry-After floor).
  if (report.tie_reason) parts.push(` Why they tie: ${report.tie_reason}.`);
  const text = parts.join('');
  if (el.textContent !== text) el.textContent = text;
}
