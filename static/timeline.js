//! "Every attempt, to scale": one row per message, lab time on the x axis, each attempt a
//! bar exactly as long as its measured duration and each wait a thin line exactly as long as
//! the measured wait (or the planned one, dashed, while it is still going on).
//!
//! Built to stay smooth with thousands of messages streaming in:
//! - Rows are virtual. Every row is ROW_H px tall, the row box is as tall as all of them, and
//!   only the rows in view (and a margin) exist in the DOM, placed by their index.
//! - Positions are CSS custom properties in lab milliseconds (`--s` start, `--d` length); the
//!   stylesheet turns them into pixels with the timeline's `--t0` and `--k` (px per ms), so a
//!   zoom or a pan is two property writes, not a walk over every bar.
//! - A row is updated only when its own message changed, only while it is drawn, and only in
//!   the attempts that changed.
//! - Drawing reads no layout: sizes come from a ResizeObserver, the scroll offset from scroll
//!   events, and the tooltip is placed from those numbers.
//!
//! The time window is either "fit" (all of lab time, growing with the lab) or one the person
//! chose by zooming and panning. A filter by message id, key prefix and state picks the rows.

import { findAttempt, labNow, ms, shortKey } from './model.js';

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
const ROW_H = 32;
/** Rows drawn above and below the visible ones, so a quick scroll does not show blanks. */
const OVERSCAN = 6;
/** "Fit" never shows less lab time than this. */
const MIN_SPAN_MS = 2000;
/** Nice spans for "fit" (× 10^k): fine once the lab is still, coarse while it runs. */
const FINE_STEPS = [1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10];
const LIVE_STEPS = [1, 2, 5, 10];
/** The closest zoom: enough to tell apart attempts a few ms long. */
const MIN_VIEW_MS = 20;
const ZOOM_STEP = 2;
/** A pan key or button moves the window by this share of its width. */
const PAN_STEP = 0.25;
const TICK_SPACING_PX = 90;
const HOVER_SLOP_PX = 8;
/** A pointer that moves this far with the button down is panning, not clicking. */
const DRAG_PX = 4;
/** Below this many px per second the outcome marks above the bars would overlap. */
const DENSE_PX_PER_S = 24;
const SAY_FILTER_MS = 700;

export function createTimeline(root, model, requestDraw) {
  const scroller = root.querySelector('.tl-scroll');
  const axis = root.querySelector('.tl-axis');
  const corner = root.querySelector('.tl-corner');
  const ticksEl = root.querySelector('.tl-ticks');
  const gridEl = root.querySelector('.tl-grid');
  const rowsEl = root.querySelector('.tl-rows');
  const nowEl = root.querySelector('.tl-now');
  const emptyEl = root.querySelector('.tl-empty');
  const noMatchEl = root.querySelector('.tl-nomatch');
  const tip = root.querySelector('.tl-tip');
  const findForm = document.querySelector('[data-find-form]');
  const findInput = findForm.querySelector('[data-find]');
  const stateSelect = findForm.querySelector('[data-state-filter]');
  const countEl = findForm.querySelector('[data-filter-count]');
  const filterSaid = document.querySelector('[data-filter-said]');
  const control = (attr, name) => document.querySelector(`[data-${attr}="${name}"]`);
  const controls = {
    in: control('zoom', 'in'),
    out: control('zoom', 'out'),
    fit: control('zoom', 'fit'),
    earlier: control('pan', 'earlier'),
    later: control('pan', 'later'),
  };
  const rangeEl = document.querySelector('[data-view-range]');
  root.style.setProperty('--row-h', `${ROW_H}px`);

  /** Ids of the messages that pass the filter, in creation order: the rows, top to bottom. */
  let list = [];
  let listStale = true;
  /** How many messages the model held when `list` was made. */
  let listedOf = 0;
  /** message id -> drawn row { el, stateEl, track, parts, running: [{ el, start }], index, state } */
  const drawn = new Map();
  /** Ids of drawn rows whose message changed since they were built. */
  const stale = new Set();
  let windowStale = true;
  /** Earliest start and latest end over every message: what "fit" shows. */
  let extent = { first: Infinity, end: -Infinity };
  /** The window the person chose, { t0, span } in lab ms, or null for "fit". */
  let chosen = null;
  /** The window on screen and its scale (px per ms). */
  let view = { t0: 0, span: 0, k: 0 };
  /** Sizes in px and the scroll offset, kept by observers so drawing never asks for layout. */
  const box = { width: 0, label: 0, axis: 0, track: 0, height: 0, top: 0 };
  let filter = { id: null, key: '', state: '' };
  let sayTimer = 0;
  /** The bar that holds the grid's single tab stop: { id, round, n }. */
  let focusTarget = null;
  /** What the tooltip shows: { id, round, n, x } (x: pointer px in the timeline, or null). */
  let tipTarget = null;
  let tipStale = false;
  /** Where the tooltip was last put, to skip writes when nothing moved. */
  let tipPlace = '';
  /** Set while a rebuilt row gives focus back to its new bar, which is not a person moving. */
  let refocusing = false;

  // ---- the list of rows -------------------------------------------------------------------

  function passes(m) {
    if (filter.state && m.state !== filter.state) return false;
    if (filter.id != null) return m.id === filter.id;
    return !filter.key || m.key.toLowerCase().startsWith(filter.key);
  }

  function rebuildList() {
    listStale = false;
    windowStale = true;
    listedOf = model.messages.size;
    list = [];
    for (const m of model.messages.values()) if (passes(m)) list.push(m.id);
    const text = `${list.length} of ${listedOf} message${listedOf === 1 ? '' : 's'}`;
    // Written only when they change: every write restyles.
    if (countEl.textContent === text) return;
    countEl.textContent = text;
    countEl.dataset.shown = String(list.length);
    countEl.dataset.total = String(listedOf);
    rowsEl.style.height = `${list.length * ROW_H}px`;
    rowsEl.setAttribute('aria-rowcount', String(list.length));
  }

  /** Widen "fit" to take in a message (it only ever grows until the next snapshot). */
  function grow(m) {
    let first = m.created_ms;
    let end = m.created_ms;
    for (const a of m.attempts) {
      first = Math.min(first, a.started_ms);
      if (a.duration_ms == null) continue;
      const wait = a.wait ? (a.wait.actual_ms ?? a.wait.planned_ms) : 0;
      end = Math.max(end, a.started_ms + a.duration_ms + wait);
    }
    extent.first = Math.min(extent.first, first);
    extent.end = Math.max(extent.end, end);
  }

  // ---- rows -------------------------------------------------------------------------------

  function createRow(m) {
    const el = document.createElement('div');
    el.className = 'tl-row';
    el.setAttribute('role', 'row');
    el.dataset.messageId = String(m.id);
    const label = document.createElement('div');
    label.className = 'tl-label';
    label.setAttribute('role', 'rowheader');
    const stateEl = span('tl-state', '');
    label.append(span('tl-id', `#${m.id}`), span('tl-key', shortKey(m.key), m.key), stateEl);
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
    });
    if (focusTarget?.id === m.id) {
      const bar = barOf(focusTarget) ?? row.track.querySelector('.tl-bar');
      if (bar) {
        bar.tabIndex = 0;
        if (hadFocus && !bar.contains(document.activeElement)) {
          refocusing = true;
          bar.focus({ preventScroll: true });
          refocusing = false;
        }
      }
    }
    if (tipTarget?.id === m.id) tipStale = true;
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

  /** Draw the rows in view (and the margin), drop the others, rebuild the changed ones. */
  function drawWindow() {
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
        const m = model.messages.get(id);
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

  // ---- the time window --------------------------------------------------------------------

  function active() {
    const c = model.counters;
    return Boolean(c) && c.queued + c.in_flight + c.backing_off > 0;
  }

  /**
   * All of lab time so far, on a stepped scale so bars do not shimmer every frame. While the
   * lab runs the steps are coarse (1, 2, 5): each change of scale restyles every drawn bar, so
   * it should come rarely; once the lab is still, the window closes in on the data.
   */
  function fitWindow() {
    const live = active();
    const end = live ? Math.max(extent.end, labNow(model)) : extent.end;
    const t0 = Math.floor(extent.first / 100) * 100;
    return { t0, span: niceCeil(Math.max(MIN_SPAN_MS, (end - t0) * 1.05), live ? LIVE_STEPS : FINE_STEPS) };
  }

  function clampWindow(w, fit) {
    const span = Math.min(w.span, fit.span);
    return { t0: Math.min(Math.max(w.t0, fit.t0), fit.t0 + fit.span - span), span };
  }

  /** The window the next frame will show: what the person chose, held inside "fit". */
  function current() {
    const fit = fitWindow();
    return chosen ? clampWindow(chosen, fit) : fit;
  }

  function scale() {
    const empty = model.messages.size === 0;
    root.classList.toggle('is-empty', empty);
    show(emptyEl, empty);
    show(noMatchEl, !empty && list.length === 0);
    if (empty) return;
    // After a reset or a new snapshot a chosen window may now hold everything: that is "fit".
    if (chosen && chosen.span >= fitWindow().span) chosen = null;
    const { t0, span } = current();
    const k = box.track / span;
    if (t0 === view.t0 && span === view.span && k === view.k) return;
    view = { t0, span, k };
    root.style.setProperty('--t0', String(t0));
    root.style.setProperty('--k', String(k));
    root.classList.toggle('is-dense', k * 1000 < DENSE_PX_PER_S);
    root.classList.toggle('is-zoomed', chosen != null);
    drawTicks();
    syncViewControls();
  }

  function drawTicks() {
    const { t0, span, k } = view;
    if (!(k > 0)) return;
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

  function syncViewControls() {
    const fit = fitWindow();
    // aria-disabled rather than disabled, so a button keeps the focus when it runs out.
    const off = (button, value) => button.setAttribute('aria-disabled', String(value));
    controls.fit.setAttribute('aria-pressed', String(chosen == null));
    off(controls.out, chosen == null);
    off(controls.in, view.span <= MIN_VIEW_MS);
    off(controls.earlier, chosen == null || view.t0 <= fit.t0);
    off(controls.later, chosen == null || view.t0 + view.span >= fit.t0 + fit.span);
    const digits = view.span >= 10_000 ? 1 : view.span >= 1000 ? 2 : 3;
    const text = `${(view.t0 / 1000).toFixed(digits)}–${((view.t0 + view.span) / 1000).toFixed(digits)} s`;
    rangeEl.textContent = chosen ? text : `${text}, all`;
  }

  /** Show `span` ms with lab time `at` staying `atPx` px from the track's left edge. */
  function zoomTo(span, at, atPx) {
    const fit = fitWindow();
    const next = Math.max(MIN_VIEW_MS, span);
    chosen = next >= fit.span ? null : clampWindow({ t0: at - (atPx / box.track) * next, span: next }, fit);
    requestDraw();
  }

  function zoomBy(factor, at = null, atPx = box.track / 2) {
    const w = current();
    zoomTo(w.span / factor, at ?? w.t0 + (atPx / box.track) * w.span, atPx);
  }

  function panBy(deltaMs) {
    if (!chosen) return;
    chosen = clampWindow({ t0: current().t0 + deltaMs, span: chosen.span }, fitWindow());
    requestDraw();
  }

  /** Pan the chosen window just enough to show lab time [start, end]. */
  function panToShow(start, end) {
    if (!chosen) return;
    const w = current();
    if (start >= w.t0 && end <= w.t0 + w.span) return;
    panBy(start < w.t0 || end - start > w.span ? start - w.t0 - w.span * 0.1 : end - (w.t0 + w.span) + w.span * 0.1);
  }

  const step = (name, run) => controls[name].addEventListener('click', () => {
    if (controls[name].getAttribute('aria-disabled') !== 'true') run();
  });
  step('in', () => zoomBy(ZOOM_STEP));
  step('out', () => zoomBy(1 / ZOOM_STEP));
  step('fit', () => {
    chosen = null;
    requestDraw();
  });
  step('earlier', () => panBy(-current().span * PAN_STEP));
  step('later', () => panBy(current().span * PAN_STEP));

  // ---- the clock --------------------------------------------------------------------------

  /** Grow running attempts and move the "now" line; called every frame while anything runs. */
  function clock() {
    const on = needsClock();
    show(nowEl, on);
    if (!on) return;
    const now = labNow(model);
    for (const row of drawn.values()) {
      for (const { el, start } of row.running) el.style.setProperty('--d', String(Math.max(0, now - start)));
    }
    nowEl.style.setProperty('--s', String(now));
  }

  // ---- sizes and scrolling ----------------------------------------------------------------

  /** Read the sizes; only a new track width changes the scale, only a new height the rows. */
  function measure() {
    const track = Math.max(1, scroller.clientWidth - corner.offsetWidth);
    const height = scroller.clientHeight;
    if (track !== box.track) view.k = -1;
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
    requestDraw();
  }).observe(scroller);

  scroller.addEventListener('scroll', () => {
    box.top = scroller.scrollTop;
    windowStale = true;
    requestDraw();
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

  // ---- finding a message ------------------------------------------------------------------

  function readFilter() {
    const text = findInput.value.trim();
    // "12" or "#12" is a message id; anything else is the start of an idempotency key.
    const id = /^#?(\d+)$/.exec(text);
    filter = { id: id ? Number(id[1]) : null, key: id ? '' : text.toLowerCase(), state: stateSelect.value };
    listStale = true;
    box.top = 0;
    scroller.scrollTop = 0;
    requestDraw();
    clearTimeout(sayTimer);
    sayTimer = setTimeout(() => {
      filterSaid.textContent = `${list.length} of ${model.messages.size} messages shown.`;
    }, SAY_FILTER_MS);
  }
  findInput.addEventListener('input', readFilter);
  stateSelect.addEventListener('change', readFilter);
  // Enter takes the keyboard to the first message found.
  findForm.addEventListener('submit', (e) => {
    e.preventDefault();
    if (listStale) rebuildList();
    moveTo(0, 0, 1);
  });

  // ---- keyboard: one tab stop for the whole grid, arrow keys move between attempts --------

  /** Focus attempt `i` of the first row with attempts from `index` on, going `dir` (±1). */
  function moveTo(index, i, dir) {
    for (let j = index; j >= 0 && j < list.length; j += dir) {
      const m = model.messages.get(list[j]);
      if (!m?.attempts.length) continue;
      const a = m.attempts[Math.min(Math.max(0, i), m.attempts.length - 1)];
      reveal(j);
      if (!drawn.has(m.id)) drawWindow();
      const bar = barOf({ id: m.id, round: a.round, n: a.n });
      if (!bar) return;
      for (const old of rowsEl.querySelectorAll('.tl-bar[tabindex="0"]')) old.tabIndex = -1;
      bar.tabIndex = 0;
      bar.focus();
      return;
    }
  }

  rowsEl.addEventListener('keydown', (e) => {
    const bar = e.target.closest('.tl-bar');
    // Leave the browser's own shortcuts alone (Ctrl + plus zooms the page).
    if (!bar || e.altKey || e.metaKey || (e.ctrlKey && e.key !== 'Home' && e.key !== 'End')) return;
    const at = targetOf(bar);
    const m = model.messages.get(at.id);
    const index = list.indexOf(at.id);
    if (!m || index < 0) return;
    const i = m.attempts.findIndex((a) => a.round === at.round && a.n === at.n);
    const a = m.attempts[i];
    switch (e.key) {
      case 'ArrowRight':
        if (e.shiftKey) panBy(current().span * PAN_STEP);
        else moveTo(index, i + 1, 1);
        break;
      case 'ArrowLeft':
        if (e.shiftKey) panBy(-current().span * PAN_STEP);
        else moveTo(index, i - 1, 1);
        break;
      case 'ArrowDown': moveTo(index + 1, i, 1); break;
      case 'ArrowUp': moveTo(index - 1, i, -1); break;
      case 'PageDown': moveTo(Math.min(list.length - 1, index + 10), i, 1); break;
      case 'PageUp': moveTo(Math.max(0, index - 10), i, -1); break;
      case 'Home':
        if (e.ctrlKey) moveTo(0, 0, 1);
        else moveTo(index, 0, 1);
        break;
      case 'End':
        if (e.ctrlKey) moveTo(list.length - 1, Infinity, -1);
        else moveTo(index, Infinity, 1);
        break;
      case '+':
      case '=':
        zoomBy(ZOOM_STEP, a.started_ms, (a.started_ms - view.t0) * view.k);
        break;
      case '-':
      case '_':
        zoomBy(1 / ZOOM_STEP, a.started_ms, (a.started_ms - view.t0) * view.k);
        break;
      case '0':
        chosen = null;
        requestDraw();
        break;
      case 'Escape':
        hideTip();
        break;
      default:
        return;
    }
    e.preventDefault();
  });

  rowsEl.addEventListener('focusin', (e) => {
    const bar = e.target.closest('.tl-bar');
    if (!bar) return;
    focusTarget = targetOf(bar);
    if (refocusing) return;
    const m = model.messages.get(focusTarget.id);
    const a = m && findAttempt(m, focusTarget.round, focusTarget.n);
    if (a) panToShow(a.started_ms, a.started_ms + (a.duration_ms ?? 0));
    showTip({ ...focusTarget, x: null });
  });
  rowsEl.addEventListener('focusout', (e) => {
    if (!rowsEl.contains(e.relatedTarget)) hideTip();
  });

  /** Keyboard users must always find one way in, even after the focused row went away. */
  function ensureTabStop() {
    if (rowsEl.querySelector('.tl-bar[tabindex="0"]')) return;
    const bar = (focusTarget && barOf(focusTarget)) ?? rowsEl.querySelector('.tl-bar');
    if (bar) bar.tabIndex = 0;
  }

  // ---- pointer: hover for numbers, drag to pan, pinch or ctrl + wheel to zoom -------------

  /** Lab time under a pointer at clientX, and its px offset from the track's left edge. */
  function timeAt(clientX) {
    const px = clientX - scroller.getBoundingClientRect().left - box.label;
    return { t: view.t0 + px / view.k, px };
  }

  scroller.addEventListener('wheel', (e) => {
    const unit = e.deltaMode === 1 ? 16 : e.deltaMode === 2 ? box.height : 1;
    if (e.ctrlKey) {
      // A trackpad pinch arrives as a wheel with ctrlKey.
      e.preventDefault();
      const { t, px } = timeAt(e.clientX);
      zoomBy(Math.exp(-e.deltaY * unit * 0.002), t, px);
    } else if (chosen && (e.shiftKey || Math.abs(e.deltaX) > Math.abs(e.deltaY))) {
      e.preventDefault();
      panBy(((e.deltaX || e.deltaY) * unit) / view.k);
    }
  }, { passive: false });

  /** Pointers down on the tracks: id -> clientX, clientY. */
  const pointers = new Map();
  let gesture = null;

  function startGesture() {
    const [p, q] = [...pointers.values()];
    const w = current();
    gesture = q
      ? { pinch: true, dist: Math.hypot(p.x - q.x, p.y - q.y), span: w.span, at: timeAt((p.x + q.x) / 2).t }
      : { pinch: false, x: p.x, t0: w.t0, moved: false };
  }

  rowsEl.addEventListener('pointerdown', (e) => {
    if (e.button !== 0 || e.target.closest('.tl-label')) return;
    pointers.set(e.pointerId, { x: e.clientX, y: e.clientY });
    startGesture();
  });
  rowsEl.addEventListener('pointermove', (e) => {
    // A button let go outside the rows never sent its pointerup here.
    if (pointers.has(e.pointerId) && e.buttons === 0) lift(e);
    if (!pointers.has(e.pointerId)) return hover(e);
    pointers.set(e.pointerId, { x: e.clientX, y: e.clientY });
    const [p, q] = [...pointers.values()];
    if (gesture.pinch && q) {
      const mid = timeAt((p.x + q.x) / 2);
      zoomTo(gesture.span * (gesture.dist / Math.max(1, Math.hypot(p.x - q.x, p.y - q.y))), gesture.at, mid.px);
    } else if (!gesture.pinch && chosen) {
      if (!gesture.moved && Math.abs(p.x - gesture.x) < DRAG_PX) return;
      if (!gesture.moved) {
        gesture.moved = true;
        rowsEl.setPointerCapture(e.pointerId);
        root.classList.add('is-panning');
        hideTip();
      }
      chosen = clampWindow({ t0: gesture.t0 - (p.x - gesture.x) / view.k, span: chosen.span }, fitWindow());
      requestDraw();
    }
  });
  function lift(e) {
    if (!pointers.delete(e.pointerId)) return;
    root.classList.remove('is-panning');
    if (pointers.size) startGesture();
    else gesture = null;
  }
  rowsEl.addEventListener('pointerup', lift);
  rowsEl.addEventListener('pointercancel', lift);

  /** Show the attempt under the pointer, or the one (or its wait) nearest it if close enough. */
  function hover(e) {
    const rowEl = e.target.closest('.tl-row');
    const m = rowEl && model.messages.get(Number(rowEl.dataset.messageId));
    if (!m || !m.attempts.length || e.target.closest('.tl-label')) return hideTip();
    const x = e.clientX - root.getBoundingClientRect().left;
    const bar = e.target.closest('.tl-bar');
    if (bar) return showTip({ ...targetOf(bar), x });
    const { t } = timeAt(e.clientX);
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
    showTip({ id: m.id, round: best.round, n: best.n, x });
  }
  rowsEl.addEventListener('pointerleave', () => {
    if (!rowsEl.contains(document.activeElement)) hideTip();
  });

  // ---- the tooltip ------------------------------------------------------------------------

  function showTip(target) {
    const same = tipTarget && !tip.hidden
      && tipTarget.id === target.id && tipTarget.round === target.round && tipTarget.n === target.n;
    tipTarget = target;
    if (!same) refreshTip();
    placeTip();
  }

  function hideTip() {
    tipTarget = null;
    tip.hidden = true;
    for (const hot of rowsEl.querySelectorAll('.tl-bar.is-hot')) hot.classList.remove('is-hot');
  }

  function refreshTip() {
    tipStale = false;
    const m = model.messages.get(tipTarget.id);
    const a = m && findAttempt(m, tipTarget.round, tipTarget.n);
    if (!a) return hideTip();
    tip.replaceChildren(...tipContent(m, a, labNow(model)));
    tip.hidden = false;
    for (const hot of rowsEl.querySelectorAll('.tl-bar.is-hot')) hot.classList.remove('is-hot');
    barOf(tipTarget)?.classList.add('is-hot');
  }

  /**
   * Put the tooltip under the bar (above it in the lower half of the rows), on the side of
   * the bar with more room, from the cached sizes alone.
   */
  function placeTip() {
    const row = drawn.get(tipTarget.id);
    const m = model.messages.get(tipTarget.id);
    const a = m && findAttempt(m, tipTarget.round, tipTarget.n);
    if (!row || !a) return hideTip();
    const x = Math.min(Math.max(8, tipTarget.x ?? box.label + (a.started_ms - view.t0) * view.k), box.width - 8);
    const rowTop = box.axis + row.index * ROW_H - box.top;
    const above = rowTop > box.height / 2;
    // Anchored on the side it opens away from, so its width is not squeezed by the edge.
    const leftward = x > box.width / 2;
    const place = [above, rowTop, leftward, x, box.width].join();
    // Placed again every frame while shown, so write only when something moved.
    if (place === tipPlace) return;
    tipPlace = place;
    tip.classList.toggle('is-above', above);
    tip.style.top = `${above ? rowTop + 6 : rowTop + ROW_H + 4}px`;
    tip.style.left = leftward ? 'auto' : `${x}px`;
    tip.style.right = leftward ? `${box.width - x}px` : 'auto';
    tip.style.maxWidth = `${Math.min(384, (leftward ? x : box.width - x) - 8)}px`;
  }

  // ---- entry points -----------------------------------------------------------------------

  /** Draw what changed; called once per animation frame. */
  function render(changes) {
    if (changes.all) {
      for (const row of drawn.values()) row.el.remove();
      drawn.clear();
      extent = { first: Infinity, end: -Infinity };
      for (const m of model.messages.values()) grow(m);
      listStale = true;
      if (focusTarget && !model.messages.has(focusTarget.id)) focusTarget = null;
      if (tipTarget && !model.messages.has(tipTarget.id)) hideTip();
    } else {
      for (const id of changes.messages) {
        const m = model.messages.get(id);
        if (!m) continue;
        grow(m);
        if (drawn.has(id)) {
          stale.add(id);
          windowStale = true;
        }
      }
      // New messages join the list; with a state filter, a change of state may move a row.
      if (model.messages.size !== listedOf || (filter.state && changes.messages.size)) listStale = true;
    }
    if (listStale) rebuildList();
    if (windowStale) drawWindow();
    scale();
    clock();
    ensureTabStop();
    if (tipTarget) {
      if (tipStale) refreshTip();
      if (tipTarget) placeTip();
    }
  }

  /** True while anything grows with the clock, so the page keeps drawing frames. */
  function needsClock() {
    return active() && model.messages.size > 0;
  }

  return { render, needsClock };
}

// ---- helpers --------------------------------------------------------------------------------

/** Unhide or hide, touching the attribute only when it changes: every write restyles. */
function show(el, visible) {
  if (el.hidden === visible) el.hidden = !visible;
}

function barOf(target) {
  return document.getElementById(barId(target.id, target.round, target.n));
}

function span(className, text, title = null) {
  const el = document.createElement('span');
  el.className = className;
  el.textContent = text;
  if (title) el.title = title;
  return el;
}

function barId(id, round, n) {
  return `attempt-${id}-${round}-${n}`;
}

function targetOf(bar) {
  return { id: Number(bar.dataset.message), round: Number(bar.dataset.round), n: Number(bar.dataset.n) };
}

/** The smallest of `steps` × 10^k that is at least `x`. */
function niceCeil(x, steps = FINE_STEPS) {
  const p = 10 ** Math.floor(Math.log10(x));
  for (const f of steps) if (f * p >= x) return f * p;
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
