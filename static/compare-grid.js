//! The grid of a comparison with defences: a row per defence, a column per policy, each cell
//! the scenario's key figure over that cell's valid runs (median, least and most) as the
//! server measured them (`grid.cells`), on metastable whether the cell ended the failure, and
//! a button that opens the cell in a lab of its own (its policy, the scenario's endpoint with
//! the row's defences). No cell is marked best: the server runs no test across defences, and
//! each row's own verdict (among its policies) is said under the table.
//!
//! Cells carry `data-defence`, `data-policy`, `data-value` (the median, empty for none),
//! `data-min` and `data-max`, so tests read what a person reads.

import { formatFigure, openInLab } from './compare-table.js';

export function createGrid(panel) {
  const table = panel.querySelector('[data-grid]');
  const note = panel.querySelector('[data-grid-note]');
  const verdicts = panel.querySelector('[data-grid-verdicts]');
  let shape = '';

  /** A new lab with the cell's policy and the row's defences; the page goes there. */
  function openCell(comparison, defence, policy) {
    const title = `A new lab with ${policy} against this scenario's endpoint with the ${defence} defence, ready to run`;
    const button = openInLab(comparison, { policy, defence }, title);
    button.dataset.openCell = '';
    return button;
  }

  function build(report) {
    const { rows, policies } = report.grid;
    const head = document.createElement('tr');
    const corner = document.createElement('th');
    corner.scope = 'col';
    corner.textContent = 'defence ╲ policy';
    head.append(corner);
    for (const policy of policies) {
      const th = document.createElement('th');
      th.scope = 'col';
      th.dataset.policy = policy;
      th.textContent = policy;
      head.append(th);
    }
    table.tHead.replaceChildren(head);
    table.tBodies[0].replaceChildren(...rows.map((row) => {
      const tr = document.createElement('tr');
      tr.dataset.defence = row.name;
      const th = document.createElement('th');
      th.scope = 'row';
      th.textContent = row.name;
      th.title = JSON.stringify(row.defences);
      tr.append(th);
      for (const policy of policies) {
        const td = document.createElement('td');
        td.className = 'num cmp-cell';
        td.dataset.defence = row.name;
        td.dataset.policy = policy;
        const figure = document.createElement('span');
        figure.dataset.cellFigure = '';
        td.append(figure, document.createElement('br'), openCell(report.id, row.name, policy));
        tr.append(td);
      }
      return tr;
    }));
  }

  function update(report) {
    panel.hidden = !report.grid;
    if (!report.grid) return;
    const next = JSON.stringify([report.grid.rows.map((r) => r.name), report.grid.policies]);
    if (next !== shape) {
      build(report);
      shape = next;
    }
    const key = report.key_figure?.[0];
    const format = (v) => formatFigure(key, v);
    for (const td of table.querySelectorAll('td[data-defence]')) {
      const cell = report.grid.cells.find((c) => c.defence === td.dataset.defence && c.policy === td.dataset.policy);
      const median = cell?.median?.[key];
      const [min, max] = cell?.range?.[key] ?? [];
      td.dataset.value = median == null ? '' : String(median);
      td.dataset.min = min == null ? '' : String(min);
      td.dataset.max = max == null ? '' : String(max);
      const runs = cell?.valid_runs ?? 0;
      // A cell whose every run ran late (and its re-run too) has no valid run to take a figure
      // from: it says so, as the warning above says why.
      const none = runs === 0 ? 'no valid run: each ran late' : 'no figure';
      let text = median == null ? (report.done ? none : 'running…') : format(median);
      if (median != null && min !== max) text += ` [${format(min)}–${format(max)}]`;
      if (cell?.ends_failure != null) text += cell.ends_failure ? ' · ended it' : ' · stuck';
      td.title = `${key}: median of ${runs} valid run${runs === 1 ? '' : 's'}, least and most in brackets`;
      const figure = td.querySelector('[data-cell-figure]');
      if (figure.textContent !== text) figure.textContent = text;
    }
    const said = [`Each cell: ${key}, the median of its valid runs with the least and the most in brackets.`];
    if (report.grid.cells.some((c) => c.ends_failure != null)) {
      said.push('“Ended it”: half or more of the new messages of the 10 s after the trigger were delivered; “stuck”: fewer.');
    }
    said.push('No cell is marked best: no test is run across defences, so the grid shows where each side stands, not a winner. Within a row, the policies are judged as a comparison of them alone would judge them (below).');
    const text = said.join(' ');
    if (note.textContent !== text) note.textContent = text;
    verdicts.replaceChildren(...report.grid.rows.filter((r) => r.verdict).map((row) => {
      const li = document.createElement('li');
      li.dataset.rowVerdict = row.name;
      const best = row.verdict.best.length ? `best ${row.verdict.best.join(', ')} — ` : '';
      li.textContent = `${row.name}: ${best}${row.verdict.result}.`;
      return li;
    }));
  }

  return { update };
}
