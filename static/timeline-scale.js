//! The timeline's time window and its scale: lab time on the x axis, the axis ticks, and the
//! zoom and pan buttons. The window is either "fit" (all of lab time, growing with the lab) or
//! one the person chose by zooming and panning (or "latest": the newest run), held inside
//! "fit". "Fit" covers whatever the lab measured: its messages, its load bins (requests from
//! outside callers too) and its markers. While steady traffic runs the window "follows" from
//! the first arrival: about as long as a message's whole round under the policy (its attempts
//! and waits), moving on with the lab clock in whole seconds, with the rows of the messages that
//! arrived at its left edge in view, so each row shows a history (attempts, retries, waits) up
//! to now and the rows fill the pane. It is on by default and goes off when the person pans,
//! zooms or scrolls away; "follow" turns it on again.
//!
//! Positions are CSS custom properties in lab milliseconds (`--s` start, `--d` length); the
//! stylesheet turns them into pixels with the timeline's `--t0` and `--k` (px per ms), so a
//! zoom or a pan is two property writes, not a walk over every bar.

import { labNow } from './model.js';
import { ROW_H } from './timeline-rows.js';

/** "Fit" never shows less lab time than this. */
const MIN_SPAN_MS = 2000;
/** Nice spans for "fit" (× 10^k): fine once the lab is still, coarse while it runs. */
const FINE_STEPS = [1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10];
const LIVE_STEPS = [1, 2, 5, 10];
/** The closest zoom: enough to tell apart attempts a few ms long. */
const MIN_VIEW_MS = 20;
export const ZOOM_STEP = 2;
/** A pan key or button moves the window by this share of its width. */
export const PAN_STEP = 0.25;
const TICK_SPACING_PX = 90;
/** "Fit" starts this long before the first message (fixed, so the window does not creep). */
const LEAD_MS = 250;
/**
 * What "follow" shows: a message's longest round under the policy (every attempt to its timeout
 * and every wait at its longest), with room to spare, held to these bounds; moving on in whole
 * steps.
 */
const FOLLOW_MIN_SPAN_MS = 4000;
const FOLLOW_MAX_SPAN_MS = 20_000;
const FOLLOW_STEP_MS = 1000;
/**
 * The rows follow in the same steps: the top row in view is the first message that arrived
 * this share of the window after its left edge, so every row in view has the rest of the window
 * to show its history. Scrolling for every new row (50 a second) was most of the page's work.
 */
const FOLLOW_ROWS_FROM = 0.05;
/** Messages that start this close to the newest one are part of the same run. */
const LATEST_SLACK_MS = 100;
/** Flags this long before the newest run are shown with it. */
const LATEST_LEAD_MS = 2000;
/** Below this many px per second the outcome marks above the bars would overlap. */
const DENSE_PX_PER_S = 24;

/** Writes `state.view`, the window on screen and its scale: { t0, span, k } (k: px per ms). */
export function createScale(state) {
  const { root, model, box, requestDraw } = state;
  const ticksEl = root.querySelector('.tl-ticks');
  const gridEl = root.querySelector('.tl-grid');
  const scroller = root.querySelector('.tl-scroll');
  const control = (attr, name) => document.querySelector(`[data-${attr}="${name}"]`);
  const controls = {
    in: control('zoom', 'in'),
    out: control('zoom', 'out'),
    fit: control('zoom', 'fit'),
    earlier: control('pan', 'earlier'),
    later: control('pan', 'later'),
    follow: document.querySelector('[data-follow]'),
  };
  const rangeEl = document.querySelector('[data-view-range]');

  /** Earliest start and latest end over every message: what "fit" shows. */
  let extent = { first: Infinity, end: -Infinity };
  /** The window the person chose, { t0, span } in lab ms, or null for "fit". */
  let chosen = null;
  /** Follow the newest messages while traffic runs (until the person pans, zooms or scrolls). */
  let follow = true;
  /** The window start and row count the rows were last placed for, and the offset they were
   *  placed at; our own scroll is not the person's. */
  let followedFor = '';
  let followedTop = 0;
  let ownScroll = false;

  /** Widen "fit" to take in lab time [first, end]. */
  function growTo(first, end) {
    extent.first = Math.min(extent.first, first);
    extent.end = Math.max(extent.end, end);
  }

  /**
   * Widen "fit" to take in what the lab measured besides its messages: the load bins (outside
   * callers' requests among them) and every marker, so nothing the lab shows lies off the axis.
   * `starts` are the bins to take in: all of them, or those that changed (the extent only grows).
   */
  function growMeasured(starts = model.load.bins.keys()) {
    const binMs = model.load.binMs;
    for (const t of starts) {
      const b = model.load.bins.get(t);
      if (b) growTo(t, t + (b.width_ms ?? binMs));
    }
    for (const m of model.markers) growTo(m.at_ms, m.at_ms);
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

  /** Whether anything in the lab is still queued, in flight or backing off. */
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
    // A breaker change after the first message is part of the story, even when no message
    // was busy any more by then (markers and load bins are in the extent already).
    const late = model.breaker.changes.at(-1)?.at_ms ?? -Infinity;
    const last = late >= extent.first ? Math.max(extent.end, late) : extent.end;
    const end = live ? Math.max(last, labNow(model)) : last;
    // A little room before the first message, so the settings change that came just before a
    // burst still shows its flag.
    const t0 = Math.max(0, Math.floor((extent.first - LEAD_MS) / 100) * 100);
    return { t0, span: niceCeil(Math.max(MIN_SPAN_MS, (end - t0) * 1.05), live ? LIVE_STEPS : FINE_STEPS) };
  }

  function clampWindow(w, fit) {
    const span = Math.min(w.span, fit.span);
    return { t0: Math.min(Math.max(w.t0, fit.t0), fit.t0 + fit.span - span), span };
  }

  /** Whether the window follows the newest messages now: from the first arrival. */
  function following() {
    return follow && chosen == null && model.traffic?.rate_per_s > 0;
  }

  /** How much lab time "follow" shows: a message's longest round under the policy, and some. */
  function followSpan() {
    const policy = model.policy;
    if (!policy) return FOLLOW_MAX_SPAN_MS;
    const waits = (policy.bands ?? []).reduce((sum, b) => sum + b.high_ms, 0);
    const round = (waits + policy.max_attempts * policy.timeout_ms) * 1.2;
    const span = Math.ceil(round / FOLLOW_STEP_MS) * FOLLOW_STEP_MS;
    return Math.min(FOLLOW_MAX_SPAN_MS, Math.max(FOLLOW_MIN_SPAN_MS, span));
  }

  /** The window the next frame will show: what the person chose, held inside "fit". */
  function current() {
    const fit = fitWindow();
    if (following()) {
      const span = followSpan();
      const t0 = Math.floor((labNow(model) - span * 0.9) / FOLLOW_STEP_MS) * FOLLOW_STEP_MS;
      return { t0: Math.max(fit.t0, t0), span };
    }
    return chosen ? clampWindow(chosen, fit) : fit;
  }

  /** When a row's message arrived (an outside caller's row: its first request). */
  function arrivedAt(id) {
    const m = id < 0 ? model.outside.rows.get(id) : model.messages.get(id);
    return m?.created_ms ?? Infinity;
  }

  /** The first row whose message arrived at `t` or later (the rows are in arrival order). */
  function firstRowFrom(t) {
    let [lo, hi] = [0, state.list.length];
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (arrivedAt(state.list[mid]) < t) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  /**
   * While following, the rows in view are those that arrived just after the window's left edge
   * (see FOLLOW_ROWS_FROM), and never fewer than fill the view: they move on when the window
   * does, once a second. Called first thing in a frame, before anything is written: a scroll
   * offset set after a write makes the browser restyle and lay out the page there and then (and
   * again at the frame's end). The rows drawn last frame are laid out by now, so the reads are
   * free.
   */
  function followRows() {
    if (!following()) return;
    const { t0, span } = current();
    const rows = state.list.length;
    const placedFor = `${t0}|${rows}`;
    if (placedFor === followedFor) return;
    followedFor = placedFor;
    const visible = box.height - box.axis;
    const first = firstRowFrom(t0 + span * FOLLOW_ROWS_FROM);
    const target = Math.max(0, Math.min(first * ROW_H, rows * ROW_H - visible));
    followedTop = target;
    const top = scroller.scrollTop;
    if (target === top) return;
    ownScroll = true;
    scroller.scrollTop = target;
    // Not moved (the rows box is not tall enough yet): no scroll event will take the flag.
    if (scroller.scrollTop === top) ownScroll = false;
  }

  /** Rows came or the window moved since the rows were placed: the next frame must place them. */
  function rowsBehind() {
    return following() && `${current().t0}|${state.list.length}` !== followedFor;
  }

  scroller.addEventListener('scroll', () => {
    if (ownScroll) {
      ownScroll = false;
      return;
    }
    // The person scrolled away from the rows following placed: stop following.
    if (following() && Math.abs(scroller.scrollTop - followedTop) > 2 * ROW_H) {
      follow = false;
      requestDraw();
    }
  });

  /** Whether there is anything on the time axis: a message, a load bin or a marker. */
  function hasTime() {
    return extent.first <= extent.end;
  }

  /** Apply the window for this frame: write `--t0` and `--k` only when they change. */
  function update() {
    if (!hasTime() || !(box.track > 0)) return;
    // After a reset or a new snapshot a chosen window may now hold everything: that is "fit".
    if (chosen && chosen.span >= fitWindow().span) chosen = null;
    const { t0, span } = current();
    const k = box.track / span;
    const view = state.view;
    if (t0 === view.t0 && span === view.span && k === view.k) return;
    state.view = { t0, span, k };
    root.style.setProperty('--t0', String(t0));
    root.style.setProperty('--k', String(k));
    root.classList.toggle('is-dense', k * 1000 < DENSE_PX_PER_S);
    root.classList.toggle('is-zoomed', chosen != null);
    drawTicks();
    syncViewControls();
  }

  function drawTicks() {
    const { t0, span, k } = state.view;
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
    const view = state.view;
    const fit = fitWindow();
    // aria-disabled rather than disabled, so a button keeps the focus when it runs out.
    const off = (button, value) => button.setAttribute('aria-disabled', String(value));
    const followed = following();
    controls.fit.setAttribute('aria-pressed', String(chosen == null && !followed));
    if (controls.follow) {
      // Only while steady traffic runs is there anything to follow.
      controls.follow.hidden = !(model.traffic?.rate_per_s > 0);
      controls.follow.setAttribute('aria-pressed', String(follow && chosen == null));
      controls.follow.dataset.following = String(followed);
    }
    off(controls.out, chosen == null);
    off(controls.in, view.span <= MIN_VIEW_MS);
    off(controls.earlier, chosen == null || view.t0 <= fit.t0);
    off(controls.later, chosen == null || view.t0 + view.span >= fit.t0 + fit.span);
    const digits = view.span >= 10_000 ? 1 : view.span >= 1000 ? 2 : 3;
    const text = `${(view.t0 / 1000).toFixed(digits)}–${((view.t0 + view.span) / 1000).toFixed(digits)} s`;
    rangeEl.textContent = followed ? `${text}, following` : chosen ? text : `${text}, all`;
  }

  /** Show `span` ms with lab time `at` staying `atPx` px from the track's left edge. */
  function zoomTo(span, at, atPx) {
    if (following()) chosen = current();
    follow = false;
    const fit = fitWindow();
    const next = Math.max(MIN_VIEW_MS, span);
    chosen = next >= fit.span ? null : clampWindow({ t0: at - (atPx / box.track) * next, span: next }, fit);
    requestDraw();
  }

  function zoomBy(factor, at = null, atPx = box.track / 2) {
    const w = current();
    zoomTo(w.span / factor, at ?? w.t0 + (atPx / box.track) * w.span, atPx);
  }

  /** Move a chosen window to start at lab time `t0` (held inside "fit"). */
  function panTo(t0) {
    if (following()) chosen = current();
    follow = false;
    if (!chosen) return;
    chosen = clampWindow({ t0, span: chosen.span }, fitWindow());
    requestDraw();
  }

  function panBy(deltaMs) {
    if (!chosen && !following()) return;
    panTo(current().t0 + deltaMs);
  }

  /** Pan the chosen window just enough to show lab time [start, end]. */
  function panToShow(start, end) {
    if (!chosen) return;
    const w = current();
    if (start >= w.t0 && end <= w.t0 + w.span) return;
    panBy(start < w.t0 || end - start > w.span ? start - w.t0 - w.span * 0.1 : end - (w.t0 + w.span) + w.span * 0.1);
  }

  /**
   * Zoom to the newest run: the burst created last, or the replay started last, from just
   * before it (its settings flags) to the end of its attempts. Returns the ids of its messages.
   */
  function latest() {
    follow = false;
    let start = -Infinity;
    const startOf = (m) => {
      const a = m.attempts.find((x) => x.round === m.round);
      return m.round === 0 ? m.created_ms : (a?.started_ms ?? Infinity);
    };
    for (const m of model.messages.values()) {
      const t = startOf(m);
      if (Number.isFinite(t)) start = Math.max(start, t);
    }
    if (!Number.isFinite(start)) return [];
    const ids = [];
    let end = start;
    for (const m of model.messages.values()) {
      // A burst's messages are created together; a replay's first attempts start within a few ms.
      if (!(startOf(m) >= start - LATEST_SLACK_MS)) continue;
      ids.push(m.id);
      for (const a of m.attempts) {
        if (a.round !== m.round) continue;
        const length = a.duration_ms ?? Math.max(0, labNow(model) - a.started_ms);
        const wait = a.wait ? (a.wait.actual_ms ?? a.wait.planned_ms) : 0;
        end = Math.max(end, a.started_ms + length + wait);
      }
    }
    // The flags set just before it (a preset's policy and outage) belong to it.
    let from = start;
    for (const mk of model.markers) if (mk.at_ms <= start && mk.at_ms >= start - LATEST_LEAD_MS) from = Math.min(from, mk.at_ms);
    const t0 = Math.max(0, from - LEAD_MS);
    const span = Math.max(MIN_VIEW_MS, (end - t0) * 1.05);
    const fitSpan = fitWindow().span;
    chosen = span >= fitSpan ? null : clampWindow({ t0, span }, fitWindow());
    requestDraw();
    return ids;
  }

  /** Back to "fit": all of lab time. */
  function fit() {
    chosen = null;
    follow = false;
    requestDraw();
  }

  /** Lab time under a pointer at clientX, and its px offset from the track's left edge. */
  function timeAt(clientX) {
    const px = clientX - scroller.getBoundingClientRect().left - box.label;
    return { t: state.view.t0 + px / state.view.k, px };
  }

  const step = (name, run) => controls[name].addEventListener('click', () => {
    if (controls[name].getAttribute('aria-disabled') !== 'true') run();
  });
  step('in', () => zoomBy(ZOOM_STEP));
  step('out', () => zoomBy(1 / ZOOM_STEP));
  step('fit', fit);
  // "latest" is wired by the timeline, which also scrolls the rows to the newest run.
  step('earlier', () => panBy(-current().span * PAN_STEP));
  step('later', () => panBy(current().span * PAN_STEP));
  controls.follow?.addEventListener('click', () => {
    chosen = null;
    follow = true;
    followedFor = '';
    requestDraw();
  });

  return {
    /** Forget the extent and take it again from every message (a new snapshot). */
    refit() {
      extent = { first: Infinity, end: -Infinity };
      for (const m of model.messages.values()) grow(m);
      for (const m of model.outside.rows.values()) grow(m);
      growMeasured();
    },
    followRows,
    rowsBehind,
    grow,
    growMeasured,
    hasTime,
    latest,
    active,
    current,
    update,
    zoomTo,
    zoomBy,
    panTo,
    panBy,
    panToShow,
    fit,
    timeAt,
    /** Whether the person chose a window (zoomed), rather than "fit". */
    zoomed: () => chosen != null,
    /** Whether the window follows the newest messages (traffic runs, the person let it). */
    following: () => following(),
  };
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
