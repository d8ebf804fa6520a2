//! "Every attempt, to scale": one row per message, lab time on the x axis, each attempt a
//! bar exactly as long as its measured duration and each wait a thin line exactly as long as
//! the measured wait (or the planned one, dashed, while it is still going on).
//!
//! Positions are CSS custom properties in lab milliseconds (`--s` start, `--d` length) and the
//! stylesheet turns them into pixels with the container's `--t0` and `--k` (px per ms). So a
//! change of scale is two property writes, not a walk over every bar, and a row is rebuilt only
//! when its own message changed. Running attempts grow with the estimated lab clock.

import { findAttempt, isActive, labNow, ms, shortKey } from './model.js';

const OUTCOME_TEXT = {
  ok: 'ok',
  http_error: 'HTTP error',
  timeout: 'timeout',
  transport_error: 'transport error',
  interrupted: 'interrupted',
  running: 'running',
};
const STATE_TEXT = {
  queued: 'queued',
  in_flight: 'in flight',
  backing_off: 'backing off',
  delivered: 'delivered',
  dead_letter: 'dead letter',
};
const MIN_SPAN_MS = 2000;
const TICK_SPACING_PX = 90;
const HOVER_SLOP_PX = 8;
const MAX_ZOOM = 64;
/** Below this many px per second the outcome marks above the bars would overlap. */
const DENSE_PX_PER_S = 24;

export function createTimeline(root, model) {
  const scroller = root.querySelector('.tl-scroll');
  const inner = root.querySelector('.tl-inner');
  const corner = root.querySelector('.tl-corner');
  const ticksEl = root.querySelector('.tl-ticks');
  const gridEl = root.querySelector('.tl-grid');
  const rowsEl = root.querySelector('.tl-rows');
  const nowEl = root.querySelector('.tl-now');
  const emptyEl = root.querySelector('.tl-empty');
  const tip = root.querySelector('.tl-tip');
  const zoomButtons = document.querySelectorAll('[data-zoom]');

  /** message id -> { el, label, track, running: [{ el, start }], first, end, active } */
  const rows = new Map();
  let zoom = 1;
  let view = { t0: 0, span: 0, k: 0 };
  /** Label column and scroll box widths in px, measured on resize rather than every frame. */
  let box = null;
  /** The bar that holds the grid's single tab stop: { id, round, n }. */
  let focusTarget = null;
  /** What the tooltip shows: { id, round, n, x } (x = pointer x, or null when from focus). */
  let tipTarget = null;

  // ---- rows -------------------------------------------------------------------------------

  function renderRow(m) {
    let row = rows.get(m.id);
    if (!row) {
      const el = document.createElement('div');
      el.className = 'tl-row';
      el.setAttribute('role', 'row');
      el.dataset.messageId = String(m.id);
      const label = document.createElement('div');
      label.className = 'tl-label';
      label.setAttribute('role', 'rowheader');
      const track = document.createElement('div');
      track.className = 'tl-track';
      el.append(label, track);
      rowsEl.append(el);
      row = { el, label, track, running: [], first: m.created_ms, end: m.created_ms, active: false };
      rows.set(m.id, row);
    }
    const hadFocus = row.el.contains(document.activeElement);

    row.label.replaceChildren(
      span('tl-id', `#${m.id}`),
      span('tl-key', shortKey(m.key), m.key),
      span('tl-state', STATE_TEXT[m.state] ?? m.state, null, { state: m.state }),
    );

    const now = labNow(model);
    const parts = [];
    row.running = [];
    row.first = m.attempts.length ? Math.min(m.created_ms, m.attempts[0].started_ms) : m.created_ms;
    row.end = row.first;
    let round = -1;
    for (const a of m.attempts) {
      if (a.round !== round) {
        round = a.round;
        if (round > 0) parts.push(roundMark(a));
      }
      const running = a.duration_ms == null;
      const length = running ? Math.max(0, now - a.started_ms) : a.duration_ms;
      const bar = attemptBar(m, a, length);
      if (running) row.running.push({ el: bar, start: a.started_ms });
      parts.push(bar);
      let end = a.started_ms + length;
      if (a.wait && !running) {
        parts.push(waitLine(a, end));
        end += a.wait.actual_ms ?? a.wait.planned_ms;
      }
      row.end = Math.max(row.end, end);
    }
    row.active = isActive(m);
    row.track.replaceChildren(...parts);

    if (focusTarget?.id === m.id) claimTabStop(row, hadFocus);
    if (tipTarget?.id === m.id) refreshTip();
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

  function rebuildAll() {
    rows.clear();
    rowsEl.replaceChildren();
    for (const m of model.messages.values()) renderRow(m);
    if (focusTarget && !model.messages.has(focusTarget.id)) focusTarget = null;
    if (tipTarget && !model.messages.has(tipTarget.id)) hideTip();
  }

  // ---- scale ------------------------------------------------------------------------------

  /** Fit the domain to the data, on a stepped scale so bars do not shimmer every frame. */
  function layout() {
    const empty = rows.size === 0;
    emptyEl.hidden = !empty;
    root.classList.toggle('is-empty', empty);
    if (empty) return;

    const now = labNow(model);
    let first = Infinity;
    let end = -Infinity;
    let active = false;
    for (const row of rows.values()) {
      first = Math.min(first, row.first);
      end = Math.max(end, row.end);
      active ||= row.active;
    }
    if (active) end = Math.max(end, now);
    const t0 = Math.floor(first / 100) * 100;
    const span = niceCeil(Math.max(MIN_SPAN_MS, (end - t0) * 1.05));

    box ??= { label: corner.offsetWidth, width: scroller.clientWidth };
    const labelWidth = box.label;
    const available = Math.max(120, box.width - labelWidth - 16);
    const k = (available * zoom) / span;
    if (t0 === view.t0 && span === view.span && k === view.k) return;

    // Keep the time at the centre of the view where it was, unless we were following the end.
    const atEnd = scroller.scrollLeft + scroller.clientWidth >= scroller.scrollWidth - 4;
    const centre = view.k ? view.t0 + (scroller.scrollLeft + scroller.clientWidth / 2 - labelWidth) / view.k : 0;

    view = { t0, span, k };
    root.style.setProperty('--t0', String(t0));
    root.style.setProperty('--k', String(k));
    root.classList.toggle('is-dense', k * 1000 < DENSE_PX_PER_S);
    inner.style.width = `${labelWidth + span * k + 16}px`;
    drawTicks();

    if (zoom > 1) {
      scroller.scrollLeft = atEnd
        ? scroller.scrollWidth
        : labelWidth + (centre - t0) * k - scroller.clientWidth / 2;
    }
  }

  function drawTicks() {
    const { t0, span, k } = view;
    const step = niceCeil(TICK_SPACING_PX / k);
    const ticks = [];
    const lines = [];
    for (let t = Math.ceil(t0 / step) * step; t <= t0 + span; t += step) {
      const tick = document.createElement('span');
      tick.className = 'tl-tick';
      tick.style.setProperty('--s', String(t));
      tick.textContent = tickLabel(t, step);
      ticks.push(tick);
      const line = document.createElement('span');
      line.className = 'tl-gridline';
      line.style.setProperty('--s', String(t));
      lines.push(line);
    }
    ticksEl.replaceChildren(...ticks);
    gridEl.replaceChildren(...lines);
  }

  /** Grow running attempts and move the "now" line; call once per frame while active. */
  function tick() {
    const now = labNow(model);
    let active = false;
    for (const row of rows.values()) {
      active ||= row.active;
      for (const { el, start } of row.running) el.style.setProperty('--d', String(Math.max(0, now - start)));
    }
    layout();
    nowEl.hidden = !active;
    if (active) nowEl.style.setProperty('--s', String(now));
  }

  function needsClock() {
    for (const row of rows.values()) if (row.active) return true;
    return false;
  }

  function setZoom(next) {
    zoom = Math.min(MAX_ZOOM, Math.max(1, next));
    for (const b of zoomButtons) {
      if (b.dataset.zoom === 'fit') b.setAttribute('aria-pressed', String(zoom === 1));
      if (b.dataset.zoom === 'out') b.disabled = zoom === 1;
      if (b.dataset.zoom === 'in') b.disabled = zoom === MAX_ZOOM;
    }
    view.k = -1; // force a relayout
    layout();
    if (zoom === 1) scroller.scrollLeft = 0;
  }

  for (const b of zoomButtons) {
    b.addEventListener('click', () => {
      if (b.dataset.zoom === 'in') setZoom(zoom * 2);
      else if (b.dataset.zoom === 'out') setZoom(zoom / 2);
      else setZoom(1);
    });
  }
  setZoom(1);
  // Relayout in the next frame: doing it inside the observer would resize what it observes.
  new ResizeObserver(() =>
    requestAnimationFrame(() => {
      box = null;
      view.k = -1;
      layout();
    }),
  ).observe(scroller);

  // ---- keyboard: one tab stop for the whole grid, arrow keys move between attempts --------

  function claimTabStop(row, focus) {
    const bar = row.track.querySelector(`#${barId(focusTarget.id, focusTarget.round, focusTarget.n)}`)
      ?? row.track.querySelector('.tl-bar');
    if (!bar) return;
    for (const old of rowsEl.querySelectorAll('.tl-bar[tabindex="0"]')) old.tabIndex = -1;
    bar.tabIndex = 0;
    if (focus) bar.focus({ preventScroll: true });
  }

  /** Keyboard users must always find one way in, even after the focused row went away. */
  function ensureTabStop() {
    if (rowsEl.querySelector('.tl-bar[tabindex="0"]')) return;
    const bar = rowsEl.querySelector('.tl-bar');
    if (!bar) return;
    focusTarget = targetOf(bar);
    bar.tabIndex = 0;
  }

  rowsEl.addEventListener('keydown', (e) => {
    const bar = e.target.closest('.tl-bar');
    if (!bar) return;
    if (e.key === 'Escape') return hideTip();
    const rowEl = bar.closest('.tl-row');
    const inRow = [...rowEl.querySelectorAll('.tl-bar')];
    const i = inRow.indexOf(bar);
    let next = null;
    const otherRow = (delta) => {
      let r = rowEl;
      for (let step = 0; step < Math.abs(delta); step++) {
        const sibling = delta > 0 ? r.nextElementSibling : r.previousElementSibling;
        if (!sibling) break;
        r = sibling;
      }
      const bars = r.querySelectorAll('.tl-bar');
      return bars[Math.min(i, bars.length - 1)] ?? null;
    };
    switch (e.key) {
      case 'ArrowRight': next = inRow[i + 1]; break;
      case 'ArrowLeft': next = inRow[i - 1]; break;
      case 'Home': next = inRow[0]; break;
      case 'End': next = inRow[inRow.length - 1]; break;
      case 'ArrowDown': next = otherRow(1); break;
      case 'ArrowUp': next = otherRow(-1); break;
      case 'PageDown': next = otherRow(10); break;
      case 'PageUp': next = otherRow(-10); break;
      default: return;
    }
    e.preventDefault();
    if (next && next !== bar) {
      bar.tabIndex = -1;
      next.tabIndex = 0;
      next.focus();
    }
  });

  rowsEl.addEventListener('focusin', (e) => {
    const bar = e.target.closest('.tl-bar');
    if (!bar) return;
    focusTarget = targetOf(bar);
    bar.scrollIntoView({ block: 'nearest', inline: 'nearest' });
    showTip({ ...focusTarget, x: null });
  });
  rowsEl.addEventListener('focusout', (e) => {
    if (!rowsEl.contains(e.relatedTarget)) hideTip();
  });

  // ---- pointer: the nearest attempt (or its wait) under the pointer -----------------------

  rowsEl.addEventListener('pointermove', (e) => {
    const rowEl = e.target.closest('.tl-row');
    const m = rowEl && model.messages.get(Number(rowEl.dataset.messageId));
    if (!m || !m.attempts.length) return hideTip();
    const rect = rows.get(m.id).track.getBoundingClientRect();
    const t = view.t0 + (e.clientX - rect.left) / view.k;
    const now = labNow(model);
    let best = null;
    let bestDistance = Infinity;
    for (const a of m.attempts) {
      const end = a.started_ms + (a.duration_ms ?? Math.max(0, now - a.started_ms));
      const waitEnd = end + (a.wait ? (a.wait.actual_ms ?? a.wait.planned_ms) : 0);
      const distance = t < a.started_ms ? a.started_ms - t : t > waitEnd ? t - waitEnd : 0;
      if (distance < bestDistance) {
        best = a;
        bestDistance = distance;
      }
    }
    if (bestDistance * view.k > HOVER_SLOP_PX) return hideTip();
    showTip({ id: m.id, round: best.round, n: best.n, x: e.clientX });
  });
  rowsEl.addEventListener('pointerleave', () => {
    if (!rowsEl.contains(document.activeElement)) hideTip();
  });
  // The tooltip is fixed to the viewport, so it follows the bar when either box scrolls.
  const follow = () => {
    if (tipTarget) placeTip();
  };
  scroller.addEventListener('scroll', follow, { passive: true });
  window.addEventListener('scroll', follow, { passive: true });

  function showTip(target) {
    const same = tipTarget && !tip.hidden
      && tipTarget.id === target.id && tipTarget.round === target.round && tipTarget.n === target.n;
    tipTarget = target;
    if (same) placeTip();
    else refreshTip();
  }

  function hideTip() {
    tipTarget = null;
    tip.hidden = true;
    for (const hot of rowsEl.querySelectorAll('.tl-bar.is-hot')) hot.classList.remove('is-hot');
  }

  function refreshTip() {
    const m = model.messages.get(tipTarget.id);
    const a = m && findAttempt(m, tipTarget.round, tipTarget.n);
    if (!a) return hideTip();
    tip.replaceChildren(...tipContent(m, a, labNow(model)));
    tip.hidden = false;
    for (const hot of rowsEl.querySelectorAll('.tl-bar.is-hot')) hot.classList.remove('is-hot');
    document.getElementById(barId(m.id, a.round, a.n))?.classList.add('is-hot');
    placeTip();
  }

  /** Put the tooltip under the bar (or the pointer), flipped above it near the bottom edge. */
  function placeTip() {
    const bar = document.getElementById(barId(tipTarget.id, tipTarget.round, tipTarget.n));
    if (!bar) return;
    const r = bar.getBoundingClientRect();
    const size = tip.getBoundingClientRect();
    const x = tipTarget.x ?? r.left;
    const left = Math.min(Math.max(8, x - 12), window.innerWidth - size.width - 8);
    const below = r.bottom + 8;
    const top = below + size.height > window.innerHeight - 8 ? r.top - size.height - 8 : below;
    tip.style.left = `${left}px`;
    tip.style.top = `${Math.max(8, top)}px`;
  }

  // ---- entry points -----------------------------------------------------------------------

  function render(changes) {
    if (changes.all) rebuildAll();
    else {
      for (const id of changes.messages) {
        const m = model.messages.get(id);
        if (m) renderRow(m);
      }
    }
    ensureTabStop();
    tick();
  }

  return { render, tick, needsClock };
}

// ---- helpers (pure) -------------------------------------------------------------------------

function span(className, text, title = null, data = null) {
  const el = document.createElement('span');
  el.className = className;
  el.textContent = text;
  if (title) el.title = title;
  if (data) Object.assign(el.dataset, data);
  return el;
}

function barId(id, round, n) {
  return `attempt-${id}-${round}-${n}`;
}

function targetOf(bar) {
  return { id: Number(bar.dataset.message), round: Number(bar.dataset.round), n: Number(bar.dataset.n) };
}

/** The smallest of 1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8 × 10^k that is at least `x`. */
function niceCeil(x) {
  const p = 10 ** Math.floor(Math.log10(x));
  for (const f of [1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10]) if (f * p >= x) return f * p;
  return 10 * p;
}

/** Seconds with as many decimals as the step needs: "1.5 s" for a 1500 ms step. */
function tickLabel(t, step) {
  const decimals = step % 1000 === 0 ? 0 : step % 100 === 0 ? 1 : step % 10 === 0 ? 2 : 3;
  return `${(t / 1000).toFixed(decimals)} s`;
}

function roundName(round) {
  return round === 0 ? 'first delivery' : `replay ${round}`;
}

function attemptResult(a) {
  if (a.outcome == null) return 'running';
  const status = a.status != null ? `${a.status} ` : '';
  return `${status}${OUTCOME_TEXT[a.outcome] ?? a.outcome} in ${ms(a.duration_ms)}`;
}

function attemptSummary(m, a) {
  const replayed = a.replayed ? ', replayed by the idempotency key' : '';
  let text = `Message ${m.id}, ${roundName(a.round)}, attempt ${a.n}: ${attemptResult(a)}${replayed}.`;
  if (a.wait) {
    const w = a.wait;
    text += w.actual_ms != null ? ` Then waited ${ms(w.actual_ms)}` : ` Waiting ${ms(w.planned_ms)}`;
    text += w.reason === 'retry_after' ? ', set by Retry-After.' : ', jittered backoff.';
  }
  return text;
}

/** The tooltip: one definition list for the attempt, one for the wait after it. */
function tipContent(m, a, now) {
  const head = document.createElement('p');
  head.className = 'tl-tip-head';
  head.textContent = `#${m.id} · ${roundName(a.round)} · attempt ${a.n}`;
  const rowsOut = [
    ['key', m.key],
    ['status', a.status ?? '—'],
    ['outcome', OUTCOME_TEXT[a.outcome ?? 'running']],
    ['duration', a.duration_ms != null ? ms(a.duration_ms) : `${ms(Math.max(0, now - a.started_ms))} so far`],
    ['started', `${(a.started_ms / 1000).toFixed(3)} s`],
  ];
  if (a.retry_after_s != null) rowsOut.push(['Retry-After', `${a.retry_after_s} s`]);
  if (a.replayed) rowsOut.push(['replayed', 'yes: the key was already applied, nothing applied again']);
  if (a.outcome === 'interrupted') rowsOut.push(['why', 'the client stopped mid-attempt (crash or restart)']);
  const parts = [head, definitionList(rowsOut)];
  if (a.wait) {
    const w = a.wait;
    const waitHead = document.createElement('p');
    waitHead.className = 'tl-tip-head';
    waitHead.textContent = w.reason === 'retry_after' ? 'then a wait set by Retry-After' : 'then a jittered backoff wait';
    parts.push(
      waitHead,
      definitionList([
        ['nominal', ms(w.nominal_ms)],
        ['jitter band', `${Math.round(w.low_ms)}–${ms(w.high_ms)}`],
        ['chosen', ms(w.chosen_ms)],
        ['Retry-After floor', w.floor_ms != null ? ms(w.floor_ms) : 'none'],
        ['planned', ms(w.planned_ms)],
        ['actual', w.actual_ms != null ? ms(w.actual_ms) : 'still waiting'],
        ['reason', w.reason === 'retry_after' ? `Retry-After floor over ${ms(w.chosen_ms)} jittered` : 'backoff'],
      ]),
    );
  } else if (m.state === 'dead_letter' && a === m.attempts[m.attempts.length - 1]) {
    const last = document.createElement('p');
    last.className = 'tl-tip-note';
    last.textContent = 'The client gave up after this attempt: dead letter.';
    parts.push(last);
  }
  return parts;
}

function definitionList(pairs) {
  const dl = document.createElement('dl');
  for (const [k, v] of pairs) {
    const dt = document.createElement('dt');
    dt.textContent = k;
    const dd = document.createElement('dd');
    dd.textContent = String(v);
    dl.append(dt, dd);
  }
  return dl;
}
