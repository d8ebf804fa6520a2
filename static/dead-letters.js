//! The dead-letter table: the messages the client gave up on, as the server keeps them. An
//! outage can leave ten thousand, so the table draws only the rows in view (a fixed row
//! height, two spacers for the rest) and filters in the page, from the model, by cause, last
//! status, replays, quarantine, when dead-lettered and id or key prefix, with the counts per
//! cause and per status above it. A row can be picked for an action, replayed on its own, or
//! opened in detail.

import { labTime, shortKey } from './model.js';
import { CAUSE_TEXT, emptyFilter, facets, isEmpty, lastStatus, matcher, rangeInverted } from './dlq-filter.js';

/** Every row is this tall (style.css holds it to it), so a row's place is its index times it. */
export const ROW_H = 34;
/**
 * The scroller's most height (style.css's max-height for .dlq-scroll): the window is drawn for
 * it, not for the height the scroller has now, which a short list of a moment ago shrank.
 */
const VIEW_H = 420;
/** Rows drawn beyond the visible ones, above and below, so a scroll does not show a gap. */
const OVERSCAN = 6;
/** One formatter for every row: making one per call is slow. */
const WALL_CLOCK = new Intl.DateTimeFormat(undefined, { timeStyle: 'medium' });

/**
 * `panel` is the dead-letter section; `replayOne(button, id, quarantined)` replays one letter;
 * `openDetail(id)` shows one in detail. Returns { render, reveal, scope, filter, changed }.
 */
export function createDeadLetters(panel, model, { replayOne, openDetail }) {
  const tbody = panel.querySelector('#dead-body');
  const table = panel.querySelector('[data-dlq-table]');
  const scroller = panel.querySelector('[data-dlq-scroll]');
  const emptyEl = panel.querySelector('#dead-empty');
  const noMatchEl = panel.querySelector('[data-dlq-nomatch]');
  const form = panel.querySelector('[data-dlq-filter]');
  const statusSelect = form.elements.status;
  const matchedEl = panel.querySelector('[data-dlq-matched]');
  const facetsEl = panel.querySelector('[data-dlq-facets]');
  const selectAll = panel.querySelector('[data-dlq-select-all]');
  const counts = document.querySelectorAll('[data-replay-count]');
  const retention = panel.querySelector('[data-retention]');
  const depthEl = panel.querySelector('[data-dlq-depth]');
  const oldestEl = panel.querySelector('[data-dlq-oldest]');

  let filter = emptyFilter();
  /** The letters that pass the filter, in the queue's order; remade when either changes. */
  let list = [];
  let listStale = true;
  /** Picked by hand: ids. Cleared when the filter changes. */
  const selected = new Set();
  /** What the drawn window was drawn from, to skip a redraw when nothing moved. */
  let drawnKey = '';
  let oldestUnixMs = null;
  /** Called when the scope of an action changes (the actions bar says it). */
  let onChange = () => {};

  form.addEventListener('input', () => {
    const data = new FormData(form);
    filter = {
      cause: data.get('cause') ?? '',
      status: data.get('status') ?? '',
      replays: String(data.get('replays') ?? '').trim(),
      quarantined: data.get('quarantined') ?? '',
      applied: data.get('applied') ?? '',
      q: String(data.get('q') ?? ''),
      since: String(data.get('since') ?? ''),
      until: String(data.get('until') ?? ''),
    };
    // A range that ends before it starts matches nothing; the field says why.
    form.elements.until.setCustomValidity(rangeInverted(filter) ? 'This is before the start: the range holds nothing.' : '');
    selected.clear();
    listStale = true;
    scroller.scrollTop = 0;
    draw();
  });
  form.addEventListener('submit', (e) => e.preventDefault());

  facetsEl.addEventListener('click', (e) => {
    const chip = e.target.closest('button[data-facet]');
    if (!chip) return;
    const field = form.elements[chip.dataset.facet];
    field.value = field.value === chip.dataset.value ? '' : chip.dataset.value;
    form.dispatchEvent(new Event('input'));
  });

  scroller.addEventListener('scroll', () => drawWindow(), { passive: true });

  tbody.addEventListener('click', (e) => {
    const replay = e.target.closest('button[data-replay-id]');
    if (replay) {
      const id = Number(replay.dataset.replayId);
      // A quarantined letter failed again and again: replaying it is a deliberate act.
      if (replay.dataset.quarantined === 'true') {
        const ok = window.confirm(`Message #${id} is quarantined: it kept failing after replays. Replay it anyway?`);
        if (ok) replayOne(replay, id, true);
      } else {
        replayOne(replay, id, false);
      }
      return;
    }
    const open = e.target.closest('button[data-open-id]');
    if (open) openDetail(Number(open.dataset.openId));
  });
  tbody.addEventListener('change', (e) => {
    const box = e.target.closest('input[data-pick-id]');
    if (!box) return;
    const id = Number(box.dataset.pickId);
    if (box.checked) selected.add(id);
    else selected.delete(id);
    syncSelectAll();
    onChange();
  });
  selectAll.addEventListener('change', () => {
    if (selectAll.checked) for (const d of list) selected.add(d.id);
    else selected.clear();
    drawnKey = '';
    drawWindow();
    onChange();
  });

  function syncSelectAll() {
    selectAll.checked = list.length > 0 && selected.size === list.length;
    selectAll.indeterminate = selected.size > 0 && selected.size < list.length;
  }

  function rebuild() {
    listStale = false;
    const test = matcher(filter);
    list = [];
    for (const d of model.deadLetters.values()) if (test(d)) list.push(d);
    // Picked letters that left the queue (replayed, deleted) are no longer picked.
    if (selected.size) {
      const present = new Set(list.map((d) => d.id));
      for (const id of selected) if (!present.has(id)) selected.delete(id);
    }
    drawnKey = '';
  }

  function row(d) {
    const tr = document.createElement('tr');
    tr.dataset.deadLetter = String(d.id);
    if (d.quarantined) tr.classList.add('quarantined');
    const pick = document.createElement('input');
    pick.type = 'checkbox';
    pick.dataset.pickId = String(d.id);
    pick.checked = selected.has(d.id);
    pick.setAttribute('aria-label', `pick message ${d.id}`);
    const open = document.createElement('button');
    open.type = 'button';
    open.className = 'link';
    open.dataset.openId = String(d.id);
    open.textContent = `#${d.id}`;
    open.setAttribute('aria-label', `message ${d.id} in detail`);
    const key = document.createElement('code');
    key.textContent = shortKey(d.key);
    key.title = d.key;
    const cause = document.createElement('span');
    cause.textContent = CAUSE_TEXT[d.cause] ?? d.cause;
    cause.title = d.reason;
    if (d.quarantined) {
      const badge = document.createElement('strong');
      badge.className = 'q-badge';
      badge.textContent = 'quarantined';
      cause.prepend(badge, ' ');
    }
    if (d.applied) {
      // The ledger holds the key as applied: the write landed though no answer came in time.
      tr.dataset.applied = 'true';
      const why = 'The endpoint applied this write; no answer came in time. A replay is answered from the stored result and applies nothing again.';
      const mark = document.createElement('strong');
      mark.className = 'applied-badge';
      mark.textContent = 'write applied';
      mark.title = why;
      // The row keeps its height: the sentence is read out, shown in full in the letter's detail.
      const said = document.createElement('span');
      said.className = 'visually-hidden';
      said.textContent = ` ${why}`;
      cause.prepend(mark, ' ');
      cause.append(said);
    }
    const button = document.createElement('button');
    button.type = 'button';
    button.className = 'secondary small';
    button.dataset.replayId = String(d.id);
    button.textContent = d.quarantined ? 'replay anyway…' : 'replay';
    button.setAttribute('aria-label', `replay message ${d.id}${d.quarantined ? ' (quarantined)' : ''}`);
    if (d.quarantined) button.dataset.quarantined = 'true';
    // Lab time lines up with the timeline; the wall clock is for the person.
    const when = document.createElement('span');
    when.textContent = labTime(d.dead_lettered_ms);
    if (d.dead_lettered_unix_ms != null) {
      const wall = document.createElement('small');
      wall.className = 'wall';
      wall.textContent = WALL_CLOCK.format(d.dead_lettered_unix_ms);
      when.append(wall);
    }
    tr.append(
      cell(pick, 'pick'),
      cell(open, 'id'),
      cell(key, 'key'),
      cell(d.round === 0 ? '0' : `${d.round} (replay)`, 'round'),
      cell(cause, 'cause'),
      cell(lastStatus(d).replace('_', ' '), 'last status'),
      cell(attemptCount(d), 'attempts', 'num'),
      cell(when, 'dead-lettered at', 'num'),
      cell(button, 'action'),
    );
    return tr;
  }

  /** Draws the rows in view, with spacers standing in for the others. */
  function drawWindow() {
    const height = VIEW_H;
    const first = Math.max(0, Math.floor(scroller.scrollTop / ROW_H) - OVERSCAN);
    const last = Math.min(list.length, Math.ceil((scroller.scrollTop + height) / ROW_H) + OVERSCAN);
    const key = `${first}:${last}:${list.length}`;
    if (key === drawnKey) return;
    drawnKey = key;
    const rows = [spacer(first * ROW_H)];
    for (let i = first; i < last; i += 1) rows.push(row(list[i]));
    rows.push(spacer((list.length - last) * ROW_H));
    tbody.replaceChildren(...rows);
  }

  function drawFacets() {
    const all = facets(model.deadLetters.values());
    const chips = [];
    for (const [name, field, map, words] of [
      ['cause', 'cause', all.cause, (c) => CAUSE_TEXT[c] ?? c],
      ['last status', 'status', all.status, (s) => s.replace('_', ' ')],
    ]) {
      const group = document.createElement('span');
      group.className = 'dlq-facet';
      group.append(`${name}: `);
      for (const [value, count] of map) {
        if (count === 0) continue;
        const chip = document.createElement('button');
        chip.type = 'button';
        chip.className = 'chip';
        chip.dataset.facet = field;
        chip.dataset.value = value;
        chip.dataset.count = String(count);
        chip.setAttribute('aria-pressed', String(filter[field] === value));
        chip.textContent = `${words(value)} ${count}`;
        group.append(chip);
      }
      if (group.childElementCount) chips.push(group);
    }
    facetsEl.replaceChildren(...chips);
    // The status filter offers the statuses the queue holds, and keeps the one chosen.
    const options = [...all.status.keys()].sort();
    if (filter.status && !options.includes(filter.status)) options.push(filter.status);
    const have = [...statusSelect.options].slice(1).map((o) => o.value).join();
    if (have !== options.join()) {
      statusSelect.replaceChildren(new Option('any', ''), ...options.map((s) => new Option(s.replace('_', ' '), s)));
      statusSelect.value = filter.status;
    }
  }

  function draw() {
    if (listStale) rebuild();
    const total = model.deadLetters.size;
    hide(emptyEl, total > 0);
    hide(table, total === 0);
    hide(scroller, total === 0);
    hide(noMatchEl, total === 0 || list.length > 0);
    setText(matchedEl, isEmpty(filter) ? `${total} in the queue` : `${list.length} of ${total} match`);
    matchedEl.dataset.matched = String(list.length);
    let replayable = 0;
    oldestUnixMs = null;
    for (const d of model.deadLetters.values()) {
      if (!d.quarantined) replayable += 1;
      if (d.dead_lettered_unix_ms != null && (oldestUnixMs == null || d.dead_lettered_unix_ms < oldestUnixMs)) {
        oldestUnixMs = d.dead_lettered_unix_ms;
      }
    }
    for (const c of counts) setText(c, String(replayable));
    setText(depthEl, String(total));
    tellOldest();
    drawFacets();
    syncSelectAll();
    drawWindow();
    onChange();
  }

  /** "oldest waited 3 min": next to the depth, the operator's other signal. */
  function tellOldest() {
    const text = oldestUnixMs == null ? '' : ` · oldest waited ${age(Date.now() - oldestUnixMs)}`;
    setText(oldestEl, text);
    oldestEl.dataset.oldestUnixMs = oldestUnixMs == null ? '' : String(oldestUnixMs);
  }
  setInterval(tellOldest, 1000);

  function render(changes) {
    if (changes.all) {
      const ttl = model.retention?.dead_letter_ttl_s;
      retention.textContent = ttl ? ` or for ${keptFor(ttl)}, whichever comes first` : '';
    }
    if (changes.all || changes.deadLetters) {
      listStale = true;
      draw();
    }
    return false;
  }

  return {
    render,
    /** Scrolls the table to letter `id` (clearing a filter that hides it) and focuses its row. */
    reveal(id) {
      if (!list.some((d) => d.id === id) && model.deadLetters.has(id)) {
        form.reset();
        form.dispatchEvent(new Event('input'));
      }
      const index = list.findIndex((d) => d.id === id);
      if (index < 0) return false;
      scroller.scrollTop = Math.max(0, index * ROW_H - ROW_H * 2);
      drawWindow();
      const tr = tbody.querySelector(`tr[data-dead-letter="${id}"]`);
      tr?.scrollIntoView({ block: 'nearest' });
      tr?.querySelector('button[data-open-id]')?.focus();
      return true;
    },
    /** What an action takes: the picked letters, or everything the filter matches. */
    scope() {
      if (selected.size) return { ids: [...selected].sort((a, b) => a - b), count: selected.size };
      return { filter, count: list.length };
    },
    filter: () => filter,
    changed(f) {
      onChange = f;
    },
  };
}

/** A long wait in its largest unit: "45 s", "3 min", "2 h", "4 days". */
function age(msAgo) {
  const s = Math.max(0, Math.floor(msAgo / 1000));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min`;
  if (s < 86400) return `${Math.floor(s / 3600)} h`;
  const days = Math.floor(s / 86400);
  return `${days} day${days === 1 ? '' : 's'}`;
}

function spacer(height) {
  const tr = document.createElement('tr');
  tr.className = 'dlq-spacer';
  tr.setAttribute('aria-hidden', 'true');
  const td = document.createElement('td');
  td.colSpan = 9;
  td.style.height = `${height}px`;
  tr.append(td);
  return tr;
}

/** Attempts in the round that gave up, and across every round when replays came before. */
function attemptCount(d) {
  const inRound = d.attempts.filter((a) => a.round === d.round).length;
  return inRound === d.attempts.length ? String(inRound) : `${inRound} (${d.attempts.length} in all)`;
}

function keptFor(seconds) {
  const days = seconds / 86400;
  if (days >= 1) return `${+days.toFixed(1)} day${days === 1 ? '' : 's'}`;
  const hours = seconds / 3600;
  if (hours >= 1) return `${+hours.toFixed(1)} hour${hours === 1 ? '' : 's'}`;
  return `${Math.round(seconds)} s`;
}

function hide(el, hidden) {
  if (el.hidden !== hidden) el.hidden = hidden;
}

function setText(el, text) {
  if (el.textContent !== text) el.textContent = text;
}

function cell(content, label, className = '') {
  const td = document.createElement('td');
  td.dataset.label = label;
  if (className) td.className = className;
  if (typeof content === 'string') td.textContent = content;
  else td.append(content);
  return td;
}
