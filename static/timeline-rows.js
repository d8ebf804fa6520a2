//! The timeline's virtual rows: one row per message in the filtered list, every row ROW_H px
//! tall in a box as tall as all of them, and only the rows in view (and a margin) in the DOM,
//! placed by their index. A row is rebuilt only when its own message changed, only while it is
//! drawn, and only in the attempts that changed. This part also keeps the sizes and the scroll
//! offset (from a ResizeObserver and scroll events, so drawing reads no layout) and grows the
//! running attempts with the clock.

import { labNow, ms, rowOf, shortKey } from './model.js';

export const ROW_H = 32;
/** Rows drawn above and below the visible ones, so a quick scroll does not show blanks. */
const OVERSCAN = 6;
export const OUTCOME_TEXT = {
  ok: 'ok',
  http_error: 'HTTP error',
  timeout: 'timeout',
  transport_error: 'transport error',
  short_circuited: 'short-circuited',
  interrupted: 'interrupted',
  cancelled: 'cancelled',
  running: 'running',
};
const STATE_TEXT = {
  queued: 'queued',
  in_flight: 'in flight',
  backing_off: 'backing off',
  delivered: 'delivered',
  dead_letter: 'dead letter',
  // The rows of outside callers, by how their last request ended.
  answered: 'answered',
  failed: 'last failed',
  hung_up: 'hung up',
};

/**
 * `state.list` says which messages are rows; this writes `state.box`. `filled(row, m, hadFocus)`
 * is called after a row was brought up to date with its message, so the keyboard focus and the
 * tooltip can follow the bars that replaced theirs.
 */
export function createRows(state, { filled }) {
  const { root, model, box } = state;
  const scroller = root.querySelector('.tl-scroll');
  const axis = root.querySelector('.tl-axis');
  const corner = root.querySelector('.tl-corner');
  const rowsEl = root.querySelector('.tl-rows');
  const nowEl = root.querySelector('.tl-now');
  root.style.setProperty('--row-h', `${ROW_H}px`);

  /** message id -> drawn row { el, stateEl, track, parts, running: [{ el, start }], index, state } */
  const drawn = new Map();
  /** Ids of drawn rows whose message changed since they were built. */
  const stale = new Set();
  let windowStale = true;
  /** The list length the row box was last sized for. */
  let sizedFor = 0;

  /** Size the row box for the list; written only when it changes (a write restyles). */
  function size() {
    const length = state.list.length;
    if (length === sizedFor) return;
    rowsEl.setAttribute('aria-rowcount', String(length));
    sizedFor = length;
    rowsEl.style.height = `${length * ROW_H}px`;
  }

  function createRow(m) {
    const el = document.createElement('div');
    el.className = 'tl-row';
    el.setAttribute('role', 'row');
    el.dataset.messageId = String(m.id);
    const label = document.createElement('div');
    label.className = 'tl-label';
    label.setAttribute('role', 'rowheader');
    const stateEl = span('tl-state', '');
    // An outside caller's row is named by the caller, where a message of the lab's own has its id.
    const name = m.outside ? span('tl-id tl-caller', m.caller, `outside caller ${m.caller}`) : span('tl-id', `#${m.id}`);
    if (m.outside) {
      el.classList.add('is-outside');
      el.dataset.caller = m.caller;
    }
    label.append(name, span('tl-key', shortKey(m.key), m.key), stateEl);
    const track = document.createElement('div');
    track.className = 'tl-track';
    el.append(label, track);
    /** parts[i]: what attempt i was drawn from, and its elements (round mark, bar, wait). */
    const row = { el, stateEl, track, parts: [], running: [], index: -1, state: '' };
    drawn.set(m.id, row);
    return row;
  }

  /**
   * Bring a row up to date with its message, redrawing only the attempts that changed: an
   * attempt is replaced when it finishes, and its wait is set and then measured in place.
   */
  function fillRow(row, m) {
    if (row.state !== m.state) {
      row.state = m.state;
      row.stateEl.textContent = STATE_TEXT[m.state] ?? m.state;
      row.stateEl.dataset.state = m.state;
    }
    const hadFocus = row.el.contains(document.activeElement);
    const now = labNow(model);
    row.running = [];
    // Hedged attempts overlap: each goes in the first lane free when it started.
    const { lane, lanes, nextInLane } = laneOf(m.attempts);
    if (row.lanes !== lanes) {
      row.lanes = lanes;
      row.el.classList.toggle('has-lanes', lanes > 1);
      row.el.style.setProperty('--lanes', String(lanes));
      if (lanes > 1) row.el.dataset.lanes = String(lanes);
      else delete row.el.dataset.lanes;
    }
    m.attempts.forEach((a, i) => {
      const running = a.duration_ms == null;
      const old = row.parts[i];
      const actual = a.wait?.actual_ms ?? null;
      if (!(old && old.a === a && old.wait === a.wait && old.actual === actual)) {
        const els = [];
        if (a.round > 0 && (i === 0 || m.attempts[i - 1].round !== a.round)) els.push(roundMark(a));
        const length = running ? Math.max(0, now - a.started_ms) : a.duration_ms;
        els.push(attemptBar(m, a, length));
        if (a.wait && !running) els.push(waitLine(a, a.started_ms + length));
        if (old) {
          old.els[0].before(...els);
          for (const el of old.els) el.remove();
        } else {
          row.track.append(...els);
        }
        row.parts[i] = { a, wait: a.wait, actual, els, bar: els.find((el) => el.classList.contains('tl-bar')) };
      }
      if (running) row.running.push({ el: row.parts[i].bar, start: a.started_ms });
      // The room before the next attempt in its lane, for the stylesheet to hide an outcome
      // mark that would run into the next one's at this zoom ("503503503").
      const next = m.attempts[nextInLane[i]];
      const gap = String(next ? next.started_ms - a.started_ms : 1e9);
      const part = row.parts[i];
      if (part.lane !== lane[i]) {
        part.lane = lane[i];
        part.bar.style.setProperty('--lane', String(lane[i]));
        part.bar.dataset.lane = String(lane[i]);
      }
      if (part.gap !== gap) {
        part.gap = gap;
        part.bar.style.setProperty('--gap', gap);
      }
    });
    filled(row, m, hadFocus);
  }

  /** Draw the rows in view (and the margin), drop the others, rebuild the changed ones. */
  function drawWindow() {
    const list = state.list;
    windowStale = false;
    // While the list was empty the box had no height: guess a screenful until it is measured.
    const height = box.height || window.innerHeight;
    const from = Math.max(0, Math.floor(box.top / ROW_H) - OVERSCAN);
    const to = Math.min(list.length, Math.ceil((box.top + height - box.axis) / ROW_H) + OVERSCAN);
    const wanted = new Map();
    for (let i = from; i < to; i++) wanted.set(list[i], i);

    for (const [id, row] of drawn) {
      if (wanted.has(id)) continue;
      // The row holding the keyboard focus stays, so scrolling away does not lose the focus.
      if (row.el.contains(document.activeElement)) {
        const index = list.indexOf(id);
        if (index >= 0) {
          place(row, index);
          continue;
        }
      }
      row.el.remove();
      drawn.delete(id);
    }

    // Keep the DOM in row order for screen readers: only new rows are inserted, so a drawn
    // row (and the focus in it) is never moved.
    let cursor = rowsEl.firstElementChild;
    for (const [id, index] of wanted) {
      let row = drawn.get(id);
      if (!row || stale.has(id)) {
        const m = rowOf(model, id);
        row ??= createRow(m);
        fillRow(row, m);
      }
      place(row, index);
      if (row.el === cursor) cursor = cursor.nextElementSibling;
      else rowsEl.insertBefore(row.el, cursor);
    }
    stale.clear();
  }

  function place(row, index) {
    if (row.index === index) return;
    row.index = index;
    // A plain length, not a custom property: those are inherited, so changing one restyles
    // everything in the row.
    row.el.style.top = `${index * ROW_H}px`;
    row.el.setAttribute('aria-rowindex', String(index + 1));
  }

  // ---- sizes and scrolling ----------------------------------------------------------------

  /** Read the sizes; a new track width changes the scale, a new height the rows in view. */
  function measure() {
    const track = Math.max(1, scroller.clientWidth - corner.offsetWidth);
    const height = scroller.clientHeight;
    if (height !== box.height) windowStale = true;
    box.width = root.clientWidth;
    box.label = corner.offsetWidth;
    box.axis = axis.offsetHeight;
    box.track = track;
    box.height = height;
  }
  // Once now, so the first frame already has the right scale; then after each layout that
  // resized the box, when the reads are free.
  measure();
  new ResizeObserver(() => {
    measure();
    state.requestDraw();
  }).observe(scroller);

  scroller.addEventListener('scroll', () => {
    box.top = scroller.scrollTop;
    windowStale = true;
    state.requestDraw();
  }, { passive: true });

  /** Scroll the rows so row `index` is in view, and draw it now (the caller focuses it). */
  function reveal(index) {
    const top = index * ROW_H;
    const visible = box.height - box.axis;
    if (top < box.top) box.top = top;
    else if (top + ROW_H > box.top + visible) box.top = top + ROW_H - visible;
    else return;
    scroller.scrollTop = box.top;
    drawWindow();
  }

  /** Scroll so that row `index` is the top one in view (or as near the top as it goes). */
  function scrollToRow(index) {
    box.top = Math.max(0, index * ROW_H);
    scroller.scrollTop = box.top;
    box.top = scroller.scrollTop;
    drawWindow();
  }

  return {
    scrollToRow,
    /** Drop every drawn row (a new snapshot): the next draw builds them afresh. */
    clear() {
      for (const row of drawn.values()) row.el.remove();
      drawn.clear();
    },
    /** A message changed: rebuild its row in the next draw, if it is drawn. */
    changed(id) {
      if (drawn.has(id)) {
        stale.add(id);
        windowStale = true;
      }
    },
    /** `state.list` is new: size the row box for it and draw the window again. */
    listChanged() {
      windowStale = true;
      size();
    },
    scrollToTop() {
      box.top = 0;
      scroller.scrollTop = 0;
    },
    /** Draw the window if the list, the scroll offset, the height or a drawn message changed. */
    update() {
      size();
      if (windowStale) drawWindow();
    },
    drawWindow,
    reveal,
    /** The drawn row of message `id`, or undefined. */
    drawn: (id) => drawn.get(id),
    /**
     * Grow running attempts and move the "now" line while `on` (anything runs); called
     * every frame.
     */
    clock(on) {
      show(nowEl, on);
      if (!on) return;
      const now = labNow(model);
      for (const row of drawn.values()) {
        for (const { el, start } of row.running) el.style.setProperty('--d', String(Math.max(0, now - start)));
      }
      nowEl.style.setProperty('--s', String(now));
    },
  };
}

/**
 * Lanes for attempts that overlap in time (a hedged round's, or an outside caller's requests
 * at once): attempt i goes in the first lane whose last attempt had ended when i started (a
 * running one never has). An attempt's lane never changes once given: the ones before it only
 * end later than it started. Returns each one's lane, how many lanes, and the index of the
 * next attempt in the same lane (or -1).
 */
export function laneOf(attempts) {
  const ends = [];
  const last = [];
  const lane = [];
  const nextInLane = attempts.map(() => -1);
  attempts.forEach((a, i) => {
    let l = ends.findIndex((end) => end <= a.started_ms);
    if (l < 0) l = ends.length;
    ends[l] = a.duration_ms == null ? Infinity : a.started_ms + a.duration_ms + (a.wait?.actual_ms ?? a.wait?.planned_ms ?? 0);
    if (last[l] != null) nextInLane[last[l]] = i;
    last[l] = i;
    lane.push(l);
  });
  return { lane, lanes: Math.max(1, ends.length), nextInLane };
}

function attemptBar(m, a, length) {
  const bar = document.createElement('div');
  const outcome = a.outcome ?? 'running';
  // Classes style the bar; the data attributes describe it (and let tests count bars).
  bar.className = `tl-bar o-${outcome}${a.replayed ? ' is-replayed' : ''}`;
  bar.id = barId(m.id, a.round, a.n);
  bar.setAttribute('role', 'gridcell');
  bar.tabIndex = -1;
  bar.dataset.message = String(m.id);
  bar.dataset.round = String(a.round);
  bar.dataset.n = String(a.n);
  bar.dataset.outcome = outcome;
  if (a.status != null) bar.dataset.status = String(a.status);
  if (a.replayed) bar.dataset.replayed = 'true';
  bar.style.setProperty('--s', String(a.started_ms));
  bar.style.setProperty('--d', String(length));
  bar.setAttribute('aria-label', attemptSummary(m, a));
  return bar;
}

function waitLine(a, start) {
  const line = document.createElement('div');
  line.className = 'tl-wait';
  line.dataset.reason = a.wait.reason;
  if (a.wait.actual_ms == null) line.dataset.planned = 'true';
  line.style.setProperty('--s', String(start));
  line.style.setProperty('--d', String(a.wait.actual_ms ?? a.wait.planned_ms));
  // The end of the wait spent queueing for a connection slot: a segment of its own.
  const queued = a.wait.queued_ms ?? 0;
  if (queued > 0) {
    line.style.setProperty('--q', String(queued));
    line.dataset.queued = String(queued);
  }
  line.setAttribute('aria-hidden', 'true');
  return line;
}

function roundMark(a) {
  const mark = document.createElement('div');
  mark.className = 'tl-round';
  mark.textContent = `replay ${a.round}`;
  mark.style.setProperty('--s', String(a.started_ms));
  mark.setAttribute('aria-hidden', 'true');
  return mark;
}

function attemptSummary(m, a) {
  if (m.outside) return outsideSummary(m, a);
  const replayed = a.replayed ? ', replayed by the idempotency key' : '';
  let text = `Message ${m.id}, ${roundName(a.round)}, attempt ${a.n}: ${attemptResult(a)}${replayed}.`;
  if (a.wait) {
    const w = a.wait;
    text += w.actual_ms != null ? ` Then waited ${ms(w.actual_ms)}` : ` Waiting ${ms(w.planned_ms)}`;
    if ((w.queued_ms ?? 0) > 0) text += ` (the last ${ms(w.queued_ms)} of it queued for a connection slot)`;
    const why = { retry_after: ', set by Retry-After.', pushback: ", set by the endpoint's pushback." };
    text += why[w.reason] ?? ', jittered backoff.';
  }
  return text;
}

function outsideSummary(m, a) {
  let text = `Outside caller ${m.caller}, key ${m.key}, attempt ${a.n}: ${outsideResult(a)}.`;
  if (a.retry_after_s != null) text += ` Retry-After sent: ${a.retry_after_s} s.`;
  if (a.wait) text += ` The caller then waited ${ms(a.wait.actual_ms)}.`;
  return text;
}

/** How an outside request ended: "503 in 2 ms", "hung up after 5001 ms", "running". */
function outsideResult(a) {
  if (a.outcome == null) return 'running';
  if (a.hung_up) return `the caller hung up after ${ms(a.duration_ms)}`;
  return `${a.status} in ${ms(a.duration_ms)}`;
}

function attemptResult(a) {
  if (a.outcome == null) return 'running';
  if (a.outcome === 'short_circuited') return 'short-circuited: the circuit breaker was open, nothing was sent';
  if (a.outcome === 'cancelled') return `cancelled after ${ms(a.duration_ms)}: another attempt's answer settled the call`;
  const status = a.status != null ? `${a.status} ` : '';
  return `${status}${OUTCOME_TEXT[a.outcome] ?? a.outcome} in ${ms(a.duration_ms)}`;
}

export function roundName(round) {
  return round === 0 ? 'first delivery' : `replay ${round}`;
}

// ---- bars by attempt ------------------------------------------------------------------------

/** The bar of attempt { id, round, n }, if it is in the page. */
export function barOf(target) {
  return document.getElementById(barId(target.id, target.round, target.n));
}

/** The attempt { id, round, n } a bar stands for. */
export function targetOf(bar) {
  return { id: Number(bar.dataset.message), round: Number(bar.dataset.round), n: Number(bar.dataset.n) };
}

function barId(id, round, n) {
  return `attempt-${id}-${round}-${n}`;
}

/** Unhide or hide, touching the attribute only when it changes: every write restyles. */
export function show(el, visible) {
  if (el.hidden === visible) el.hidden = !visible;
}

function span(className, text, title = null) {
  const el = document.createElement('span');
  el.className = className;
  el.textContent = text;
  if (title) el.title = title;
  return el;
}
