//! The dead-letter table: the messages the client gave up on, as the server keeps them, each
//! with a replay button. Replay sends the message again with its original idempotency key.
//! An outage can leave thousands: the table shows them a hundred at a time, adds rows for new
//! letters instead of redrawing the ones already shown, and builds at most a few per frame.

import { labTime, shortKey } from './model.js';

/** Rows drawn at first; an outage of thousands would otherwise mean a table of thousands. */
const PAGE = 100;
/** Rows built per frame, so letters arriving together do not stall one frame. */
const ROWS_PER_FRAME = 20;
/** One formatter for every row: making one per call is slow. */
const WALL_CLOCK = new Intl.DateTimeFormat(undefined, { timeStyle: 'medium' });

/** `replay(button, ids, confirmQuarantined)` is the controls' (it calls the lab's API). */
export function createDeadLetters(tbody, emptyEl, moreEl, model, replay) {
  const counts = document.querySelectorAll('[data-replay-count]');
  const retention = document.querySelector('[data-retention]');
  const shownText = moreEl.querySelector('[data-dead-shown]');
  const moreButton = moreEl.querySelector('button');
  const table = tbody.closest('table');
  let limit = PAGE;
  /** The dead letters drawn, in order; a letter object is replaced whenever it changes. */
  let drawn = [];
  /** Whether shown letters are still waiting for their rows. */
  let behind = false;

  tbody.addEventListener('click', (e) => {
    const button = e.target.closest('button[data-replay-id]');
    if (!button) return;
    const id = Number(button.dataset.replayId);
    // A quarantined letter failed again and again: replaying it is a deliberate act.
    if (button.dataset.quarantined === 'true') {
      const ok = window.confirm(`Message #${id} is quarantined: it kept failing after replays. Replay it anyway?`);
      if (ok) replay(button, [id], true);
    } else {
      replay(button, [id]);
    }
  });

  moreButton.addEventListener('click', () => {
    limit += PAGE;
    draw();
  });

  function row(d) {
    const tr = document.createElement('tr');
    tr.dataset.deadLetter = String(d.id);
    const key = document.createElement('code');
    key.textContent = shortKey(d.key);
    key.title = d.key;
    const button = document.createElement('button');
    button.type = 'button';
    button.className = 'secondary small';
    button.dataset.replayId = String(d.id);
    button.textContent = d.quarantined ? 'replay anyway…' : 'replay';
    button.setAttribute('aria-label', `replay message ${d.id}${d.quarantined ? ' (quarantined)' : ''}`);
    if (d.quarantined) {
      button.dataset.quarantined = 'true';
      tr.classList.add('quarantined');
    }
    const reason = document.createElement('span');
    reason.textContent = d.reason;
    if (d.applied) {
      // The ledger holds the key as applied: the write landed though no answer came in time.
      tr.dataset.applied = 'true';
      const mark = document.createElement('strong');
      mark.className = 'applied-badge';
      mark.textContent = 'write applied';
      const why = document.createElement('small');
      why.className = 'applied-why';
      why.textContent = 'The endpoint applied this write; no answer came in time. A replay is answered from the stored result and applies nothing again.';
      reason.prepend(mark, ' ');
      reason.append(why);
    }
    if (d.quarantined) {
      const badge = document.createElement('strong');
      badge.className = 'q-badge';
      badge.textContent = 'quarantined';
      reason.prepend(badge, ' ');
    }
    // Lab time lines up with the timeline; the wall clock is for the person.
    const when = document.createElement('span');
    when.textContent = labTime(d.dead_lettered_ms);
    if (d.dead_lettered_unix_ms != null) {
      const wall = document.createElement('small');
      wall.className = 'wall';
      wall.textContent = WALL_CLOCK.format(d.dead_lettered_unix_ms);
      when.append(wall);
    }
    // Labels name each cell when narrow screens stack a row into a card.
    tr.append(
      cell(`#${d.id}`, 'id'),
      cell(key, 'key'),
      cell(d.round === 0 ? '0' : `${d.round} (replay)`, 'round'),
      cell(reason, 'reason'),
      cell(attemptCount(d), 'attempts', 'num'),
      cell(when, 'dead-lettered at', 'num'),
      cell(button, 'action'),
    );
    return tr;
  }

  function draw() {
    const total = model.deadLetters.size;
    const shown = [];
    let replayable = 0;
    for (const d of model.deadLetters.values()) {
      if (shown.length < limit) shown.push(d);
      if (!d.quarantined) replayable += 1;
    }
    // Letters mostly arrive at the end: keep the rows up to the first difference, redo the rest.
    let same = 0;
    while (same < shown.length && same < drawn.length && shown[same] === drawn[same]) same += 1;
    while (tbody.rows.length > same) tbody.lastElementChild.remove();
    const added = shown.slice(same, same + ROWS_PER_FRAME);
    tbody.append(...added.map(row));
    drawn = shown.slice(0, same + added.length);
    // During an outage this runs every frame: write only what changed, as each write restyles.
    hide(emptyEl, total > 0);
    hide(table, total === 0);
    hide(moreEl, total <= shown.length);
    setText(shownText, `Showing the first ${shown.length} of ${total}.`);
    for (const c of counts) setText(c, String(replayable));
    behind = drawn.length < shown.length;
  }

  /** Draw what changed; returns true while rows are still to be built in later frames. */
  function render(changes) {
    if (changes.all) {
      const ttl = model.retention?.dead_letter_ttl_s;
      retention.textContent = ttl ? ` or for ${keptFor(ttl)}, whichever comes first` : '';
    }
    if (changes.all || changes.deadLetters || behind) draw();
    return behind;
  }

  return { render };
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
