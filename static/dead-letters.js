//! The dead-letter table: the messages the client gave up on, as the server keeps them, each
//! with a replay button. Replay sends the message again with its original idempotency key.

import { labTime, shortKey } from './model.js';
import { replay } from './controls.js';

export function createDeadLetters(tbody, emptyEl, model) {
  const counts = document.querySelectorAll('[data-replay-count]');
  const retention = document.querySelector('[data-retention]');

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

  function draw() {
    const rows = model.deadLetters.map((d) => {
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
        wall.textContent = new Date(d.dead_lettered_unix_ms).toLocaleTimeString();
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
    });
    tbody.replaceChildren(...rows);
    emptyEl.hidden = rows.length > 0;
    tbody.closest('table').hidden = rows.length === 0;
    const replayable = model.deadLetters.filter((d) => !d.quarantined).length;
    for (const c of counts) c.textContent = String(replayable);
  }

  function render(changes) {
    if (changes.all) {
      const ttl = model.retention?.dead_letter_ttl_s;
      retention.textContent = ttl ? ` or for ${keptFor(ttl)}, whichever comes first` : '';
    }
    if (changes.all || changes.deadLetters) draw();
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

function cell(content, label, className = '') {
  const td = document.createElement('td');
  td.dataset.label = label;
  if (className) td.className = className;
  if (typeof content === 'string') td.textContent = content;
  else td.append(content);
  return td;
}
