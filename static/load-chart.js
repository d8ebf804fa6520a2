//! The load chart under the timeline, on its time axis (it follows the zoom and the pan): per
//! 100 ms of lab time, the requests that reached the downstream, stacked by the answer they got
//! (2xx, 503, 429, and those whose client had already timed out), the work the downstream did
//! for clients that had given up (below the baseline), the most requests in process at once
//! (a tick), and the overloaded mode's capacity or the throttled mode's rate as a line. Over
//! the bars, two step lines on the same axis: the offered load (new messages per bin) and the
//! goodput (messages delivered per bin), which part when retries sustain an overload.
//!
//! Bins come from the server (`load` in the snapshot and the `load` event). Zoomed out, bins
//! are summed into wider bars (2, 5, 10… bins) so a bar is never thinner than a few pixels, and
//! every height stays "per 100 ms" (the average over the bar) so the line keeps its meaning.
//! Positions are the bars' `--s` and `--d`; heights are `--n` over the chart's `--ymax`, so a
//! new maximum is one property write. Only the bars in the window on screen, and half a window
//! either side, are in the page: under steady traffic a lab holds thousands of bins (the last five
//! minutes at 100 ms), and a bar for each would make every frame slower as the run went on.

import { count, duration, labTime, range } from './model.js';

/** The answers, bottom to top, as stacked in every bar (the order is a cue besides colour). */
export const ANSWERS = [
  ['ok', '2xx'],
  ['unavailable', '503'],
  ['throttled', '429'],
  ['timed_out', 'client had timed out'],
  ['other', 'other'],
];
/** A bar is never thinner than this. */
const MIN_BAR_PX = 3;
/** The accessible summary is rewritten at most this often. */
const SUMMARY_MS = 1000;

/** Puts a bar's parts in `el`: one piece per kind of answer, wasted work below, the peak tick. */
export function fillBar(el) {
  const up = document.createElement('span');
  up.className = 'lb-up';
  const parts = {};
  for (const [kind] of ANSWERS) {
    const part = document.createElement('i');
    part.dataset.kind = kind;
    up.append(part);
    parts[kind] = part;
  }
  const down = document.createElement('span');
  down.className = 'lb-down';
  const peak = document.createElement('span');
  peak.className = 'lb-peak';
  const offered = document.createElement('span');
  offered.className = 'lb-line';
  offered.dataset.line = 'offered';
  const goodput = document.createElement('span');
  goodput.className = 'lb-line';
  goodput.dataset.line = 'goodput';
  el.append(up, down, peak, offered, goodput);
  return { parts, down, peak, offered, goodput };
}

/**
 * The limit line for a downstream, in the chart's own units (requests per bin of `binMs`): an
 * overloaded one's capacity as the requests its workers can finish per bin at their mean
 * latency, or a throttled one's rate per bin; `null` for the other modes.
 */
export function limitOf(ds, binMs) {
  if (ds?.mode === 'overloaded' && ds.capacity != null) {
    const [lo, hi] = ds.latency_ms ?? [binMs, binMs];
    const per = (ds.capacity * binMs) / Math.max(1, (lo + hi) / 2);
    return {
      value: per,
      text: `capacity: finishes about ${round(per)} per ${duration(binMs)} (${ds.capacity} at once, ${lo === hi ? duration(lo) : range([lo, hi])} each), ${ds.queue ?? 0} more may wait`,
    };
  }
  if (ds?.mode === 'throttled' && ds.rate_per_s != null) {
    const per = (ds.rate_per_s * binMs) / 1000;
    return { value: per, text: `rate limit: ${ds.rate_per_s}/s, ${round(per)} per ${duration(binMs)}` };
  }
  return null;
}

/**
 * Sizes one bar from a bin's sums: each kind of answer stacked up, wasted work below the line,
 * the most in process as a tick. `factor` is requests per unit of height. Returns how many
 * requests got another answer (a 400, a 409, a 422...).
 */
export function paintBar(bar, sum, factor) {
  const per = (n) => String(n / factor);
  const other = Math.max(0, sum.requests - sum.ok - sum.unavailable - sum.throttled - sum.timed_out);
  const counts = { ...sum, other };
  for (const [kind] of ANSWERS) {
    bar.parts[kind].style.setProperty('--n', per(counts[kind]));
    bar.parts[kind].hidden = counts[kind] === 0;
  }
  bar.down.style.setProperty('--n', per(sum.wasted));
  bar.down.hidden = sum.wasted === 0;
  bar.peak.style.setProperty('--n', String(sum.peak));
  bar.peak.hidden = sum.peak === 0;
  if (bar.offered) {
    bar.offered.style.setProperty('--n', per(sum.offered));
    bar.goodput.style.setProperty('--n', per(sum.delivered));
  }
  return other;
}

/** The sums of no bins yet: a bar (or a total) is built by adding bins to it. */
export function emptyLoadSum() {
  return { requests: 0, ok: 0, unavailable: 0, throttled: 0, timed_out: 0, wasted: 0, peak: 0, offered: 0, delivered: 0, refused: 0, bins: 0 };
}

/**
 * Adds one load bin, as the server sends it, to a sum; `share` of it, for a coarse bin (older
 * activity the server summed over 10 s) drawn across bars narrower than itself: its counts are
 * spread evenly over its width, the most that can be said of them.
 */
export function addToLoadSum(sum, b, share = 1) {
  sum.requests += (b.requests ?? 0) * share;
  sum.ok += (b.ok ?? 0) * share;
  sum.unavailable += (b.unavailable ?? 0) * share;
  sum.throttled += (b.throttled ?? 0) * share;
  sum.timed_out += (b.timed_out ?? 0) * share;
  sum.wasted += (b.wasted ?? 0) * share;
  sum.peak = Math.max(sum.peak, b.peak_in_process ?? 0);
  sum.offered += (b.offered ?? 0) * share;
  sum.delivered += (b.delivered ?? 0) * share;
  sum.refused += (b.refused ?? 0) * share;
  sum.bins += 1;
  if (share < 1) sum.spread = true;
}

/** A coarse bin's width: the server sums activity older than five minutes into bins of 10 s. */
export const COARSE_BIN_MS = 10_000;

export function createLoadChart(state, miniTip) {
  const { root, model } = state;
  const plot = root.querySelector('[data-load-plot]');
  const barsEl = root.querySelector('[data-load-bars]');
  const limitEl = root.querySelector('[data-load-limit]');
  const limitText = root.querySelector('[data-load-limit-text]');
  const maxEl = root.querySelector('[data-load-max]');

  /** Bins per bar at the current zoom. */
  let factor = 0;
  /**
   * Bar start (lab ms) -> { el, sum }: only the bars in the window on screen and half a window
   * either side, so a lab that has run for an hour draws no more bars than one a minute old.
   */
  const bars = new Map();
  /** The bar starts drawn, [from, to), and the load they were drawn from (a snapshot brings new). */
  let drawnRange = { from: 0, to: 0 };
  let drawnLoad = null;
  /**
   * The tallest bar (or tick) at this factor over every bin, not only the drawn ones, so the
   * scale does not jump as the window moves on.
   */
  let tallest = 0;
  let ymax = 0;
  let limit = null;
  let summaryTimer = 0;
  /** The window the bars were last moved to: they stand at their lab time, moved as one. */
  let shifted = { t0: NaN, k: NaN };

  const barMs = () => model.load.binMs * factor;

  /** The fewest bins per bar (1, 2, 5 × 10^n) that keep a bar MIN_BAR_PX wide at k px/ms. */
  function factorFor(k) {
    const binMs = model.load.binMs;
    if (!(k > 0)) return factor || 1;
    for (let p = 1; p < 1e7; p *= 10) {
      for (const f of [1, 2, 5]) if (binMs * f * p * k >= MIN_BAR_PX) return f * p;
    }
    return 1e7;
  }

  function barStart(t) {
    return Math.floor(t / barMs()) * barMs();
  }

  /** The share of bin `b` that falls in one bar: all of it, unless the bin is wider. */
  function shareOf(b) {
    const w = b.width_ms ?? model.load.binMs;
    return w > barMs() ? barMs() / w : 1;
  }

  /** Sum the bins of the bar that starts at `start` (and any coarse bin reaching into it). */
  function sumBar(start) {
    const sum = emptyLoadSum();
    const binMs = model.load.binMs;
    const end = start + barMs();
    for (let t = Math.min(start, Math.floor(start / COARSE_BIN_MS) * COARSE_BIN_MS); t < end; t += binMs) {
      const b = model.load.bins.get(t);
      if (b && t + (b.width_ms ?? binMs) > start) addToLoadSum(sum, b, shareOf(b));
    }
    return sum;
  }

  /** How tall a bar of `sum` stands on the scale. */
  function heightOf(sum) {
    return Math.max(sum.requests / factor, sum.offered / factor, sum.peak);
  }

  /** The bar starts to draw: the window on screen and half a window either side. */
  function wantedRange() {
    const { t0, span } = state.view;
    if (!(span > 0)) return { from: 0, to: 0 };
    return { from: barStart(t0 - span / 2), to: barStart(t0 + span * 1.5) + barMs() };
  }

  /** The starts of the bars bin `b` is drawn in. */
  function barsOf(b) {
    const w = b.width_ms ?? model.load.binMs;
    const starts = [];
    for (let s = barStart(b.t_ms); s < b.t_ms + w; s += barMs()) starts.push(s);
    return starts;
  }

  /** Write bar `start` with `sum`: made on first use, updated in place after. */
  function drawBar(start, sum) {
    let bar = bars.get(start);
    if (!bar) {
      const el = document.createElement('div');
      el.className = 'load-bar';
      el.dataset.loadBar = '';
      el.style.setProperty('--s', String(start));
      el.style.setProperty('--d', String(barMs()));
      bar = { el, ...fillBar(el), sum: null };
      bars.set(start, bar);
      barsEl.append(el);
    }
    bar.sum = sum;
    paintBar(bar, sum, factor);
    // The raw sums, for the tooltip and for tests.
    const d = bar.el.dataset;
    d.t = String(start);
    d.requests = String(sum.requests);
    d.ok = String(sum.ok);
    d.unavailable = String(sum.unavailable);
    d.throttled = String(sum.throttled);
    d.timedOut = String(sum.timed_out);
    d.wasted = String(sum.wasted);
    d.peak = String(sum.peak);
    d.offered = String(sum.offered);
    d.delivered = String(sum.delivered);
    d.refused = String(sum.refused);
  }

  /** A new factor or a new snapshot: no bar drawn, and the tallest bar found again. */
  function rebuild() {
    barsEl.replaceChildren();
    bars.clear();
    drawnRange = { from: 0, to: 0 };
    drawnLoad = model.load;
    const sums = new Map();
    for (const b of model.load.bins.values()) {
      const share = shareOf(b);
      for (const start of barsOf(b)) {
        let sum = sums.get(start);
        if (!sum) sums.set(start, (sum = emptyLoadSum()));
        addToLoadSum(sum, b, share);
      }
    }
    tallest = 0;
    for (const sum of sums.values()) tallest = Math.max(tallest, heightOf(sum));
  }

  /** Drop the bars that left the wanted range and draw those that came into it. */
  function follow() {
    const wanted = wantedRange();
    if (wanted.from === drawnRange.from && wanted.to === drawnRange.to) return false;
    for (const [start, bar] of bars) {
      if (start >= wanted.from && start < wanted.to) continue;
      bar.el.remove();
      bars.delete(start);
    }
    const step = barMs();
    for (let start = wanted.from; start < wanted.to; start += step) {
      if (bars.has(start)) continue;
      const sum = sumBar(start);
      if (sum.bins) drawBar(start, sum);
    }
    drawnRange = wanted;
    return true;
  }

  /** The line: the overloaded mode's capacity, or the throttled mode's rate per bin. */
  function drawLimit() {
    limit = limitOf(model.downstream, model.load.binMs);
    limitEl.hidden = !limit;
    // Its words sit under the chart, clear of the bars.
    limitText.parentElement.hidden = !limit;
    plot.dataset.limit = limit ? String(limit.value) : '';
    if (!limit) return;
    limitEl.style.setProperty('--n', String(limit.value));
    limitText.textContent = limit.text;
  }

  /** The top of the scale: the highest bar or tick, and room above the line. */
  function rescale() {
    let top = Math.max(4, tallest);
    if (limit) top = Math.max(top, limit.value * 1.25);
    const next = niceCeil(top);
    if (next === ymax) return;
    ymax = next;
    plot.style.setProperty('--ymax', String(ymax));
    maxEl.textContent = `↑ ${ymax}`;
  }

  function summarise() {
    summaryTimer = 0;
    const total = emptyLoadSum();
    let busiest = null;
    for (const b of model.load.bins.values()) {
      addToLoadSum(total, b);
      if (!busiest || b.requests > busiest.requests) busiest = b;
    }
    plot.dataset.bins = String(total.bins);
    plot.dataset.requests = String(total.requests);
    plot.dataset.offered = String(total.offered);
    plot.dataset.delivered = String(total.delivered);
    if (!total.bins) {
      plot.setAttribute('aria-label', 'Load on the downstream: no requests yet.');
      return;
    }
    const parts = [`${total.ok} answered 2xx`, `${total.unavailable} 503`, `${total.throttled} 429`, `${total.timed_out} after the client had timed out`];
    plot.setAttribute(
      'aria-label',
      `Load on the downstream: ${count(total.requests, 'request')}, ${parts.join(', ')}; ${total.wasted} done for clients that had given up; `
        + `${total.offered} new messages offered, ${total.delivered} delivered. `
        + `Busiest ${duration(model.load.binMs)}: ${count(busiest.requests, 'request')} at ${labTime(busiest.t_ms)}, at most ${total.peak} in process at once.`
        + (limit ? ` The line is the ${limit.text}.` : ''),
    );
  }

  // ---- hover: the numbers of one bar ----------------------------------------------------------

  plot.addEventListener('pointermove', (e) => {
    const { t0, k } = state.view;
    if (!(k > 0) || !factor) return;
    const px = e.clientX - plot.getBoundingClientRect().left;
    const bar = bars.get(barStart(t0 + px / k));
    if (!bar) return miniTip.hide();
    const s = bar.sum;
    const start = Number(bar.el.dataset.t);
    const span = `${labTime(start)} + ${duration(barMs())}`;
    const per = s.spread
      ? ' (older than five minutes: measured over 10 s and spread evenly)'
      : factor > 1 ? ` (over ${factor} bins of ${duration(model.load.binMs)})` : '';
    const n = (x) => round(x);
    const other = Math.max(0, s.requests - s.ok - s.unavailable - s.throttled - s.timed_out);
    const text = `${count(n(s.requests), 'request')}${per}: ${n(s.ok)} 2xx, ${n(s.unavailable)} 503, ${n(s.throttled)} 429, `
      + `${n(s.timed_out)} client timed out${other >= 0.05 ? `, ${n(other)} other` : ''}; ${n(s.wasted)} wasted; at most ${s.peak} in process at once; `
      + `${n(s.offered)} new messages offered${s.refused ? ` (${n(s.refused)} more refused at the source)` : ''}, ${n(s.delivered)} delivered`;
    const r = plot.getBoundingClientRect();
    miniTip.show(e.clientX, r.top, span, text, true);
  });
  plot.addEventListener('pointerleave', () => miniTip.hide());

  return {
    /** Draw what changed, after the scale has set this frame's window. */
    update(changes) {
      const { t0, k } = state.view;
      if (t0 !== shifted.t0 || k !== shifted.k) {
        shifted = { t0, k };
        barsEl.style.transform = `translateX(${-t0 * k}px)`;
      }
      const next = factorFor(k);
      let changed = false;
      if (model.load !== drawnLoad || next !== factor) {
        factor = next;
        rebuild();
        changed = true;
      } else if (changes.load.size) {
        const starts = new Set();
        for (const t of changes.load) {
          const b = model.load.bins.get(t);
          for (const start of b ? barsOf(b) : [barStart(t)]) starts.add(start);
        }
        for (const start of starts) {
          const sum = sumBar(start);
          tallest = Math.max(tallest, heightOf(sum));
          if (start >= drawnRange.from && start < drawnRange.to) drawBar(start, sum);
        }
        changed = true;
      }
      if (follow()) changed = true;
      if (changes.all || changes.settings) {
        drawLimit();
        changed = true;
      }
      if (!changed) return;
      plot.dataset.bars = String(bars.size);
      rescale();
      summaryTimer ||= setTimeout(summarise, changes.all ? 0 : SUMMARY_MS);
    },
  };
}

/** 1, 2, 2.5, 5 × 10^n at or above `x`. */
export function niceCeil(x) {
  const p = 10 ** Math.floor(Math.log10(x));
  for (const f of [1, 2, 2.5, 5, 10]) if (f * p >= x) return f * p;
  return 10 * p;
}

function round(x) {
  return Number.isInteger(x) ? String(x) : x.toFixed(1);
}
