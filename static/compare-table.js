//! The comparison's table: one column per policy, one row per figure, as the server measured
//! them (`GET /api/comparisons/{id}`). The best value of each row, as the server picked it, is
//! bold and says "best" in words; when every policy shares it, the row says "same for all"
//! instead of crowning everyone. While the comparison runs the figures are "so far".
//!
//! Cells carry `data-row`, `data-policy` and `data-value` (the raw figure, empty for none) so
//! tests read what a person reads.

import { duration } from './model.js';

const count = (v) => String(v);
const ms = (v) => duration(v);
const ratio = (v) => v.toFixed(2);

/** [figure, what the row is called, how a value is written, what a missing value means]. */
const ROWS = [
  ['messages', 'messages', count, ''],
  ['requests', 'requests sent', count, ''],
  ['requests_per_delivered', 'requests per delivered message', ratio, 'none delivered yet'],
  ['delivered', 'delivered', count, ''],
  ['dead_letter', 'dead-lettered', count, ''],
  ['drain_ms', 'time to drain', ms, 'still running'],
  ['peak_requests_per_100ms', 'peak requests per 100 ms', count, ''],
  ['wasted', 'wasted work (done for clients that had given up)', count, ''],
  ['latency_p50_ms', 'delivery latency, p50', ms, 'none delivered yet'],
  ['latency_p99_ms', 'delivery latency, p99', ms, 'none delivered yet'],
  ['applied_twice', 'applied twice', count, ''],
];

/** Why a dead letter was given up, in words, in this order. */
const CAUSES = [
  ['attempts_used_up', 'attempts used up'],
  ['time_budget', 'time budget spent'],
  ['circuit_open', 'circuit breaker open'],
  ['retry_budget', 'retry budget spent'],
  ['permanent', 'permanent error (4xx)'],
];

export function createTable(table, hint) {
  const thead = table.tHead;
  const scrollHint = document.createElement('p');
  scrollHint.className = 'cmp-scroll-hint';
  scrollHint.dataset.scrollHint = '';
  scrollHint.hidden = true;
  scrollHint.textContent = 'Scroll the table sideways for every policy →';
  table.closest('.table-wrap').before(scrollHint);
  const tbody = table.tBodies[0];
  /** The shape drawn: policies and the cause rows shown; a new shape rebuilds the table. */
  let shape = '';

  /** The rows to show: every figure, with a row per dead-letter cause that any policy has. */
  function rows(report) {
    const out = [];
    for (const row of ROWS) {
      out.push({ key: row[0], label: row[1], format: row[2], missing: row[3], value: (f) => f[row[0]] });
      if (row[0] !== 'dead_letter') continue;
      for (const [cause, label] of CAUSES) {
        if (!report.columns.some((c) => (c.figures.dead_letter_by_cause?.[cause] ?? 0) > 0)) continue;
        out.push({ key: `dead_letter.${cause}`, label, sub: true, format: count, missing: '', value: (f) => f.dead_letter_by_cause?.[cause] ?? 0 });
      }
    }
    return out;
  }

  function build(report, shown) {
    const head = document.createElement('tr');
    const corner = document.createElement('th');
    corner.scope = 'col';
    corner.textContent = 'policy';
    head.append(corner);
    for (const column of report.columns) {
      const th = document.createElement('th');
      th.scope = 'col';
      th.className = 'cmp-col';
      th.dataset.policy = column.policy;
      const link = document.createElement('a');
      link.href = column.lab_url;
      link.className = 'cmp-col-name';
      link.textContent = column.policy;
      link.title = `Open the lab of ${column.policy}`;
      const progress = document.createElement('progress');
      progress.max = report.burst;
      progress.value = 0;
      const state = document.createElement('span');
      state.className = 'cmp-col-state';
      state.dataset.columnState = '';
      th.append(link, progress, state);
      head.append(th);
    }
    thead.replaceChildren(head);
    tbody.replaceChildren(
      ...shown.map((row) => {
        const tr = document.createElement('tr');
        tr.dataset.row = row.key;
        if (row.sub) tr.className = 'cmp-sub';
        const th = document.createElement('th');
        th.scope = 'row';
        const label = document.createElement('span');
        label.textContent = row.sub ? `by reason: ${row.label}` : row.label;
        const note = document.createElement('span');
        note.className = 'cmp-tie';
        note.hidden = true;
        note.textContent = 'same for all';
        th.append(label, note);
        tr.append(th);
        for (const column of report.columns) {
          const td = document.createElement('td');
          td.className = 'num';
          td.dataset.row = row.key;
          td.dataset.policy = column.policy;
          tr.append(td);
        }
        return tr;
      }),
    );
  }

  return {
    update(report) {
      const shown = rows(report);
      const next = JSON.stringify([report.columns.map((c) => c.lab), shown.map((r) => r.key)]);
      if (next !== shape) {
        build(report, shown);
        shape = next;
      }
      hint.textContent = report.done
        ? 'Best of each row in bold, marked “best”, where it beats the others by more than 5 %; closer is a tie.'
        : 'Figures so far, while the policies run; the best of each row is marked once every policy has finished.';
      // On a narrow screen the policies run off to the right: say so, and keep the row names.
      const wrap = table.closest('.table-wrap');
      const overflows = wrap.scrollWidth > wrap.clientWidth + 1;
      wrap.dataset.overflows = String(overflows);
      scrollHint.hidden = !overflows;

      report.columns.forEach((column, i) => {
        const th = thead.rows[0].cells[i + 1];
        const f = column.figures;
        const settled = f.delivered + f.dead_letter;
        th.querySelector('progress').value = Math.min(settled, report.burst);
        th.dataset.done = String(column.done);
        th.querySelector('[data-column-state]').textContent = column.gone
          ? 'lab deleted'
          : column.done
            ? `done: ${settled} of ${report.burst} settled`
            : `running: ${settled} of ${report.burst} settled`;
      });

      for (const [r, row] of shown.entries()) {
        const tr = tbody.rows[r];
        const best = report.best[row.key] ?? [];
        const everyone = report.columns.length > 1 && report.columns.every((c) => best.includes(c.policy));
        tr.querySelector('.cmp-tie').hidden = !everyone;
        report.columns.forEach((column, i) => {
          const td = tr.cells[i + 1];
          const value = column.gone ? null : row.value(column.figures);
          const isBest = !everyone && best.includes(column.policy);
          const text = value == null ? '—' : row.format(value);
          const key = `${text}|${isBest}`;
          if (td.dataset.drawn === key) return;
          td.dataset.drawn = key;
          td.dataset.value = value == null ? '' : String(value);
          td.dataset.best = String(isBest);
          td.classList.toggle('is-best', isBest);
          td.classList.toggle('is-alarm', row.key === 'applied_twice' && value > 0);
          td.title = value == null ? (column.gone ? 'the lab was deleted' : row.missing) : '';
          if (isBest) {
            const strong = document.createElement('strong');
            strong.textContent = text;
            const tag = document.createElement('span');
            tag.className = 'cmp-best';
            tag.textContent = 'best';
            td.replaceChildren(strong, ' ', tag);
          } else {
            td.textContent = text;
          }
        });
      }
    },
  };
}
