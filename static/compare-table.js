//! The comparison's table: a column per policy, a row per figure, as the server measured them
//! (`GET /api/comparisons/{id}`). With one run each a cell is that run's figure; with several
//! (`runs`) it is the median of the valid runs, with the least and the most in brackets, as
//! the server summarized them (`policies`), and "each run" switches to a column per run. The
//! scenario's key figures (`key_figure`) come first, marked as its question; only they carry
//! the verdict: each policy the server judged best (`verdict.best`) is bold and says "best" in
//! words. A row says "same for all" only when the server found every valid run of every policy
//! gave one value (`same_for_all`). While the comparison runs the figures are "so far".
//!
//! Cells carry `data-row`, `data-policy` and `data-value` (the raw figure, or the median; empty
//! for none), and with several runs `data-min`, `data-max` and `data-runs` (each run's value,
//! as JSON), so tests read what a person reads.

import { CAUSES as SERVER_CAUSES } from './kinds.js';
import { duration } from './model.js';
import { takeHome } from './take-home.js';

const count = (v) => String(v);
const ms = (v) => duration(v);
const ratio = (v) => v.toFixed(2);

/** [figure, what the row is called, how a value is written, what a missing value means, and
 *  (for a row only some scenarios have) the scenario that has it]. */
const ROWS = [
  ['messages', 'messages', count, ''],
  ['requests', 'requests sent', count, ''],
  ['requests_per_delivered', 'requests per delivered message', ratio, 'none delivered yet'],
  ['throttled', 'answered 429 (rate limited)', count, '', 'throttled'],
  ['throttled_per_delivered', '429 answers per delivered message', ratio, 'none delivered yet', 'throttled'],
  ['delivered', 'delivered', count, ''],
  ['dead_letter', 'dead-lettered', count, ''],
  ['drain_ms', 'time to drain', ms, 'still running'],
  ['peak_requests_per_100ms', 'peak requests per 100 ms', count, ''],
  ['wasted', 'wasted work (done for clients that had given up)', count, ''],
  ['latency_p50_ms', 'delivery latency, p50', ms, 'none delivered yet'],
  ['latency_p99_ms', 'delivery latency, p99', ms, 'none delivered yet'],
  ['goodput_after_trigger', 'goodput after the trigger (delivered per new message, 10 s)', ratio, 'not measured (yet)', 'metastable'],
  ['applied_twice', 'applied twice', count, ''],
];

/** The fixed causes of a dead letter as the table says them; a protection's refusal is said in
 *  its words, as the server gives them. */
const FIXED_CAUSES = {
  attempts_used_up: 'attempts used up',
  time_budget: 'time budget spent',
  circuit_open: 'circuit breaker open',
  permanent: 'permanent error (4xx)',
  pushback: 'told not to retry (pushback)',
};

/** Why a dead letter was given up, in words, in the server's order. */
const CAUSES = SERVER_CAUSES.map(({ cause, words }) => [cause, FIXED_CAUSES[cause] ?? words]);

/** How `figure`'s value `v` is written, as its row writes it. */
export function formatFigure(figure, v) {
  const row = ROWS.find(([key]) => key === figure);
  return row ? row[2](v) : String(v);
}

/**
 * "open in a lab": a button that asks the server for a new lab with `choice` (a column's
 * `{policy}`, a grid cell's `{policy, defence}`: its policy as its first run's lab held it and
 * the scenario's endpoint, ready for a burst or traffic) and goes there; `title` says what.
 */
export function openInLab(comparison, choice, title) {
  const button = document.createElement('button');
  button.type = 'button';
  button.className = 'secondary small';
  button.textContent = 'open in a lab';
  button.title = title;
  button.addEventListener('click', async () => {
    button.disabled = true;
    try {
      const res = await fetch(`/api/comparisons/${comparison}/labs`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json, application/problem+json' },
        body: JSON.stringify(choice),
      });
      const body = await res.json();
      if (!res.ok) throw new Error(body.detail ?? res.statusText);
      location.assign(body.url);
    } catch (err) {
      button.disabled = false;
      button.textContent = 'open in a lab (failed: try again)';
      button.title = err.message;
    }
  });
  return button;
}

export function createTable(table, hint) {
  const thead = table.tHead;
  const wrap = table.closest('.table-wrap');
  const scrollHint = document.createElement('p');
  scrollHint.className = 'cmp-scroll-hint';
  scrollHint.dataset.scrollHint = '';
  scrollHint.hidden = true;
  scrollHint.textContent = 'Scroll the table sideways for every policy →';
  // With several runs: the medians by default, each run's own figures on demand.
  const eachRun = document.createElement('label');
  eachRun.className = 'cmp-each-run';
  eachRun.hidden = true;
  const eachRunBox = document.createElement('input');
  eachRunBox.type = 'checkbox';
  eachRunBox.dataset.eachRun = '';
  eachRun.append(eachRunBox, ' Show each run in a column of its own');
  wrap.before(eachRun, scrollHint);
  const tbody = table.tBodies[0];
  /** The shape drawn: columns and the cause rows shown; a new shape rebuilds the table. */
  let shape = '';
  let last = null;
  eachRunBox.addEventListener('change', () => last && update(last));

  /** The rows to show: the key figures first, then every figure the scenario has, with a row
   *  per dead-letter cause that any policy has. */
  function rows(report) {
    const out = [];
    const key = report.key_figure ?? [];
    const ordered = [...ROWS].sort((a, b) => Number(key.includes(b[0])) - Number(key.includes(a[0])));
    for (const row of ordered) {
      if (row[4] && row[4] !== report.scenario) continue;
      out.push({ key: row[0], summary: row[0], label: row[1], format: row[2], missing: row[3], keyFigure: key.includes(row[0]), value: (f) => f[row[0]] });
      if (row[0] !== 'dead_letter') continue;
      for (const [cause, label] of CAUSES) {
        if (!report.columns.some((c) => (c.figures.dead_letter_by_cause?.[cause] ?? 0) > 0)) continue;
        out.push({
          key: `dead_letter.${cause}`,
          summary: `dead_letter_by_cause.${cause}`,
          label,
          sub: true,
          format: count,
          missing: '',
          value: (f) => f.dead_letter_by_cause?.[cause] ?? 0,
        });
      }
    }
    return out;
  }

  /** The columns to draw: one per policy over its runs (the medians), or one per lab. */
  function columnsOf(report, perRun) {
    if (!perRun) {
      return (report.policies ?? []).map((summary) => ({
        key: summary.name,
        policy: summary.name,
        summary,
        labs: report.columns.filter((c) => c.policy === summary.name),
      }));
    }
    const several = (report.runs ?? 1) > 1;
    // With one run each, a run tried again shows its last try; "each run" shows every try.
    const last = (c) => !report.columns.some((o) => o.policy === c.policy && o.run === c.run && o.attempt > c.attempt);
    return report.columns.filter((c) => several || last(c)).map((c) => ({
      key: c.lab,
      policy: c.policy,
      run: several ? c.run : null,
      attempt: c.attempt ?? 0,
      labs: [c],
    }));
  }

  function build(report, shown, columns) {
    const head = document.createElement('tr');
    const corner = document.createElement('th');
    corner.scope = 'col';
    corner.textContent = 'policy';
    head.append(corner);
    for (const column of columns) {
      const th = document.createElement('th');
      th.scope = 'col';
      th.className = 'cmp-col';
      th.dataset.policy = column.policy;
      const parts = [];
      if (column.labs.length === 1) {
        const lab = column.labs[0];
        const link = document.createElement('a');
        link.href = lab.lab_url;
        link.className = 'cmp-col-name';
        const again = column.attempt ? `, try ${column.attempt + 1}` : '';
        link.textContent = column.run == null ? column.policy : `${column.policy}, run ${column.run + 1}${again}`;
        link.title = `Open the lab of ${link.textContent}`;
        parts.push(link);
      } else {
        const name = document.createElement('span');
        name.className = 'cmp-col-name';
        name.textContent = column.policy;
        const runs = document.createElement('span');
        runs.className = 'cmp-col-runs';
        runs.append('runs:');
        for (const lab of column.labs) {
          const link = document.createElement('a');
          link.href = lab.lab_url;
          link.dataset.runLink = '';
          const again = lab.attempt ? ` (try ${lab.attempt + 1})` : '';
          link.textContent = `${lab.run + 1}${lab.attempt ? `′`.repeat(lab.attempt) : ''}`;
          link.title = `Open the lab of ${column.policy}, run ${lab.run + 1}${again}`;
          runs.append(' ', link);
        }
        parts.push(name, runs);
      }
      const progress = document.createElement('progress');
      progress.max = report.burst * column.labs.length;
      progress.value = 0;
      const state = document.createElement('span');
      state.className = 'cmp-col-state';
      state.dataset.columnState = '';
      th.append(...parts, progress, state);
      // The policy's full settings, as its lab holds them (the runs differ only in the seed).
      const settings = (report.policies ?? []).find((p) => p.name === column.policy)?.policy;
      if (settings) {
        const details = document.createElement('details');
        details.className = 'cmp-settings';
        const summary = document.createElement('summary');
        summary.textContent = 'settings';
        const pre = document.createElement('pre');
        pre.dataset.settings = '';
        pre.textContent = JSON.stringify(settings, null, 1);
        details.append(summary, pre);
        const title = `A new lab with ${column.policy} and this scenario's endpoint, ready to run`;
        const open = openInLab(report.id, { policy: column.policy }, title);
        open.dataset.openInLab = column.policy;
        th.append(details, open, takeHome(column.policy, settings));
      }
      head.append(th);
    }
    thead.replaceChildren(head);
    tbody.replaceChildren(
      ...shown.map((row) => {
        const tr = document.createElement('tr');
        tr.dataset.row = row.key;
        if (row.sub) tr.className = 'cmp-sub';
        if (row.keyFigure) {
          tr.classList.add('cmp-key');
          tr.dataset.keyFigure = '';
        }
        const th = document.createElement('th');
        th.scope = 'row';
        const label = document.createElement('span');
        label.textContent = row.sub ? `by reason: ${row.label}` : row.label;
        if (row.keyFigure) {
          const tag = document.createElement('span');
          tag.className = 'cmp-key-tag';
          tag.textContent = 'the question';
          tag.title = 'The scenario’s key figure: the verdict is judged on it alone';
          label.append(' ', tag);
        }
        const note = document.createElement('span');
        note.className = 'cmp-tie';
        note.hidden = true;
        note.textContent = 'same for all';
        th.append(label, note);
        tr.append(th);
        for (const column of columns) {
          const td = document.createElement('td');
          td.className = 'num';
          td.dataset.row = row.key;
          td.dataset.policy = column.policy;
          if (column.run != null) td.dataset.run = String(column.run);
          tr.append(td);
        }
        return tr;
      }),
    );
  }

  /**
   * What a column's header says of its runs' progress: settled of the burst, or under steady
   * traffic (`burst` null) of the messages that have arrived so far.
   */
  function progressOf(column, burst) {
    const settled = column.labs.reduce((sum, c) => sum + c.figures.delivered + c.figures.dead_letter, 0);
    const done = column.labs.every((c) => c.done);
    if (column.labs.length === 1) {
      const lab = column.labs[0];
      const of = `${settled} of ${burst ?? lab.figures.messages} settled`;
      return { settled, done, text: lab.gone ? 'lab deleted' : lab.done ? `done: ${of}` : `running: ${of}` };
    }
    // A run tried again (the machine kept its first try late) is still one run.
    const runs = new Set(column.labs.map((c) => c.run));
    const n = runs.size;
    const finished = [...runs].filter((run) => column.labs.every((c) => c.run !== run || c.done)).length;
    const gone = column.labs.filter((c) => c.gone).length;
    const deleted = gone ? `, ${gone} deleted` : '';
    const again = column.labs.length - n;
    const retried = again ? `, ${again} tried again` : '';
    return { settled, done, text: done ? `done: all ${n} runs${retried}${deleted}` : `running: ${finished} of ${n} runs done${retried}${deleted}` };
  }

  /** A cell's figure, its range (with several runs) and each run's value. */
  function cellOf(report, row, column, perRun) {
    const several = (report.runs ?? 1) > 1;
    if (perRun || !several) {
      const lab = column.labs[0];
      const value = lab.gone ? null : (row.value(lab.figures) ?? null);
      const why = lab.gone ? 'the lab was deleted' : row.missing;
      return { value, text: value == null ? '—' : row.format(value), range: '', why };
    }
    const median = column.summary.median?.[row.summary];
    const [min, max] = column.summary.range?.[row.summary] ?? [];
    const runs = column.labs.map((c) => (c.gone ? null : (row.value(c.figures) ?? null)));
    const each = `each run: ${runs.map((v) => (v == null ? '—' : row.format(v))).join(', ')}`;
    if (median == null) return { value: null, text: '—', range: '', runs, why: `${row.missing || 'no figure'}; ${each}` };
    const valid = column.summary.runs.filter((r) => r.valid).length;
    return {
      value: median,
      text: row.format(median),
      range: min === max ? '' : `[${row.format(min)}–${row.format(max)}]`,
      min,
      max,
      runs,
      why: `median of ${valid} valid run${valid === 1 ? '' : 's'}; ${each}`,
    };
  }

  function update(report) {
    last = report;
    const several = (report.runs ?? 1) > 1;
    eachRun.hidden = !several;
    const perRun = !several || eachRunBox.checked;
    const shown = rows(report);
    const columns = columnsOf(report, perRun);
    const next = JSON.stringify([perRun, columns.map((c) => c.key), shown.map((r) => r.key)]);
    if (next !== shape) {
      build(report, shown, columns);
      shape = next;
    }
    const verdict = report.verdict ?? {};
    const rule = 'Only the rows marked “the question” are judged; the others are figures, with no winner.';
    hint.textContent = !report.done
      ? 'Figures so far, while the runs go one after another; the verdict comes once every run has finished.'
      : perRun && several
        ? 'Each run’s own figures. The verdict is judged over the runs: untick “each run” to see the medians.'
        : several
          ? `Each cell is the median of the valid runs, the least and the most in brackets. ${rule}`
          : rule;
    // On a narrow screen the policies run off to the right: say so, and keep the row names.
    const overflows = wrap.scrollWidth > wrap.clientWidth + 1;
    wrap.dataset.overflows = String(overflows);
    scrollHint.hidden = !overflows;

    columns.forEach((column, i) => {
      const th = thead.rows[0].cells[i + 1];
      // Under steady traffic the burst is not used: the messages are those that arrived.
      const burst = report.scenario === 'metastable' ? null : report.burst;
      const { settled, done, text } = progressOf(column, burst);
      const progress = th.querySelector('progress');
      if (burst == null) progress.max = Math.max(1, column.labs.reduce((sum, c) => sum + c.figures.messages, 0));
      progress.value = Math.min(settled, progress.max);
      th.dataset.done = String(done);
      th.querySelector('[data-column-state]').textContent = text;
    });

    // Each run's column is not marked: the verdict is judged over the runs.
    const marks = !(several && perRun);
    const same = report.same_for_all ?? [];
    for (const [r, row] of shown.entries()) {
      const tr = tbody.rows[r];
      const best = marks && row.keyFigure ? (verdict.best ?? []) : [];
      tr.querySelector('.cmp-tie').hidden = !(report.done && same.includes(row.summary));
      columns.forEach((column, i) => {
        const td = tr.cells[i + 1];
        const cell = cellOf(report, row, column, perRun);
        const isBest = best.includes(column.policy);
        const key = `${cell.text}|${cell.range}|${cell.why}|${isBest}`;
        if (td.dataset.drawn === key) return;
        td.dataset.drawn = key;
        td.dataset.value = cell.value == null ? '' : String(cell.value);
        if (cell.runs) {
          td.dataset.min = cell.min == null ? '' : String(cell.min);
          td.dataset.max = cell.max == null ? '' : String(cell.max);
          td.dataset.runs = JSON.stringify(cell.runs);
        }
        td.dataset.best = String(isBest);
        td.classList.toggle('is-best', isBest);
        td.classList.toggle('is-alarm', row.key === 'applied_twice' && (cell.runs ? cell.max : cell.value) > 0);
        td.title = cell.value == null || cell.runs ? cell.why : '';
        const figure = document.createElement(isBest ? 'strong' : 'span');
        figure.textContent = cell.text;
        const parts = [figure];
        if (cell.range) {
          const range = document.createElement('span');
          range.className = 'cmp-range';
          range.textContent = cell.range;
          parts.push(' ', range);
        }
        if (isBest) {
          const tag = document.createElement('span');
          tag.className = 'cmp-best';
          tag.textContent = 'best';
          parts.push(' ', tag);
        }
        td.replaceChildren(...parts);
      });
    }
  }

  return { update };
}
