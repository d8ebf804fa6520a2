//! The comparison's load charts, one per policy, one above the other, on one time axis (ms
//! since the scenario started in that lab) and one vertical scale, so a bar's height means the
//! same in every row. Each bar is the requests that reached that policy's endpoint in 100 ms,
//! stacked by the answer they got in the lab page's order and patterns (colour is never the
//! only cue), with the work done for clients that had given up below the baseline, a tick for
//! the most requests in process at once, and the capacity or rate limit as a dashed line.
//!
//! It reuses the lab page's load-chart styles; only the horizontal placement differs (a share
//! of the axis instead of pixels per ms). Bins come from each lab's snapshot (`load`).
//!
//! Under steady traffic each chart also holds the lab page's goodput chart: offered load and
//! goodput per second of the run, the trigger's start and end marked, so whether a policy
//! recovered once the slowdown ended is read from two lines.

import { ANSWERS, addToLoadSum, emptyLoadSum, fillBar, limitOf, niceCeil, paintBar } from './load-chart.js';
import { count, duration } from './model.js';
import { createGoodputChart } from './goodput-chart.js';

/** A bar is never thinner than this many pixels: wide spans sum bins into wider bars. */
const MIN_BAR_PX = 3;
/** The axis never spans less than this, so a quick run does not fill the width with one bar. */
const MIN_SPAN_MS = 1000;

export function createCharts(container, axisEl) {
  /** lab id -> the drawn chart of that column. */
  const charts = new Map();
  let view = { t0: 0, span: 0, barMs: 0, ymax: 0 };

  function chartFor(column) {
    let chart = charts.get(column.lab);
    if (chart) return chart;
    const root = document.createElement('figure');
    root.className = 'cmp-chart';
    root.dataset.chart = '';
    root.dataset.policy = column.policy;
    if (column.name !== column.policy) root.dataset.run = String(column.run);
    const head = document.createElement('figcaption');
    head.className = 'cmp-chart-head';
    const link = document.createElement('a');
    link.href = column.lab_url;
    link.className = 'cmp-chart-name';
    link.textContent = column.name ?? column.policy;
    link.title = `Open the lab of ${link.textContent}: every attempt of every message`;
    const state = document.createElement('span');
    state.className = 'cmp-chart-state';
    const max = document.createElement('span');
    max.className = 'load-max';
    head.append(link, state, max);
    const plot = document.createElement('div');
    plot.className = 'load-plot cmp-plot';
    plot.setAttribute('role', 'img');
    plot.setAttribute('aria-label', `Load on ${column.name ?? column.policy}'s endpoint: nothing yet`);
    plot.dataset.loadPlot = '';
    const barsEl = document.createElement('div');
    barsEl.className = 'load-bars';
    const limitEl = document.createElement('div');
    limitEl.className = 'load-limit';
    limitEl.hidden = true;
    const limitText = document.createElement('span');
    limitText.className = 'load-limit-text';
    limitEl.append(limitText);
    plot.append(barsEl, limitEl);
    root.append(head, plot);
    container.append(root);
    chart = { root, plot, barsEl, limitEl, limitText, state, max, bars: new Map(), key: '' };
    charts.set(column.lab, chart);
    return chart;
  }

  /** Where a column's bins sit on the shared axis: [x (ms since its start), bin]. */
  function placed(column) {
    const load = column.snapshot?.load;
    if (!load) return [];
    return load.bins.map((b) => [b.t_ms - column.started_ms, b]);
  }

  /** How far a column's time reaches: to its last bin or its drain, or to now while it runs. */
  function extent(column, bins, binMs) {
    let end = 0;
    for (const [x] of bins) end = Math.max(end, x + binMs);
    if (column.figures?.drain_ms != null) end = Math.max(end, column.figures.drain_ms);
    if (!column.done && column.snapshot) end = Math.max(end, column.snapshot.now_ms - column.started_ms);
    return end;
  }

  /** Sum a column's bins into bars of `barMs` starting at multiples of it from `t0`. */
  function sumBars(bins, t0, barMs) {
    const sums = new Map();
    for (const [x, b] of bins) {
      const start = t0 + Math.floor((x - t0) / barMs) * barMs;
      let sum = sums.get(start);
      if (!sum) sums.set(start, (sum = emptyLoadSum()));
      addToLoadSum(sum, b);
    }
    return sums;
  }

  function drawBar(chart, start, sum, factor) {
    let bar = chart.bars.get(start);
    if (!bar) {
      const el = document.createElement('div');
      el.className = 'load-bar';
      el.dataset.loadBar = '';
      bar = { el, ...fillBar(el), text: '' };
      chart.bars.set(start, bar);
      chart.barsEl.append(el);
    }
    bar.el.style.setProperty('--s', String(start - view.t0));
    bar.el.style.setProperty('--d', String(view.barMs));
    const other = paintBar(bar, sum, factor);
    const d = bar.el.dataset;
    d.t = String(start);
    d.requests = String(sum.requests);
    d.wasted = String(sum.wasted);
    d.peak = String(sum.peak);
    d.offered = String(sum.offered);
    d.delivered = String(sum.delivered);
    const text = `${seconds(start)} + ${duration(view.barMs)}: ${count(sum.requests, 'request')} (${sum.ok} 2xx, ${sum.unavailable} 503, `
      + `${sum.throttled} 429, ${sum.timed_out} client had timed out${other ? `, ${other} other` : ''}); `
      + `${sum.wasted} wasted; at most ${sum.peak} in process at once`;
    if (text !== bar.text) bar.el.title = bar.text = text;
  }

  function summarise(chart, column, bins, limit, binMs) {
    const total = { requests: 0, ok: 0, unavailable: 0, throttled: 0, timed_out: 0, wasted: 0, peak: 0 };
    let busiest = null;
    for (const [x, b] of bins) {
      for (const k of ['requests', 'ok', 'unavailable', 'throttled', 'timed_out', 'wasted']) total[k] += b[k] ?? 0;
      total.peak = Math.max(total.peak, b.peak_in_process ?? 0);
      if (!busiest || b.requests > busiest[1].requests) busiest = [x, b];
    }
    chart.plot.dataset.bins = String(bins.length);
    chart.plot.dataset.requests = String(total.requests);
    chart.plot.dataset.bars = String(chart.bars.size);
    const who = `Load on ${column.name ?? column.policy}'s endpoint`;
    if (column.gone) {
      chart.plot.setAttribute('aria-label', `${who}: its lab was deleted, nothing left to draw.`);
    } else if (!bins.length) {
      chart.plot.setAttribute('aria-label', `${who}: no requests yet.`);
    } else {
      chart.plot.setAttribute(
        'aria-label',
        `${who}: ${count(total.requests, 'request')}, ${total.ok} answered 2xx, ${total.unavailable} 503, ${total.throttled} 429, `
          + `${total.timed_out} after the client had timed out; ${total.wasted} done for clients that had given up. `
          + `Busiest ${duration(binMs)}: ${count(busiest[1].requests, 'request')} at ${seconds(busiest[0])}, `
          + `at most ${total.peak} in process at once.${limit ? ` The line is the ${limit.text}.` : ''}`,
      );
    }
  }

  /**
   * The run's offered load and goodput per second, from its start for `runS` seconds (the
   * longest any policy's run had messages: one time scale for all), with the trigger's start
   * and end marked (`column.trigger`: ms after the start).
   */
  function drawGoodput(chart, column, binMs, runS) {
    if (!chart.goodput) {
      const figure = document.createElement('figure');
      figure.className = 'goodput cmp-goodput';
      figure.dataset.goodput = '';
      const svg = document.createElementNS('http://www.w3.org/2000/svg', 'svg');
      svg.setAttribute('aria-label', `Offered load and goodput of ${column.name ?? column.policy}: nothing yet`);
      figure.append(svg, document.createElement('figcaption'));
      chart.root.append(figure);
      chart.goodput = createGoodputChart(figure);
    }
    const fromS = startS(column);
    const marks = column.trigger
      ? [
        { t_ms: column.started_ms + column.trigger[0], label: 'trigger' },
        { t_ms: column.started_ms + column.trigger[1], label: '↩ ends' },
      ]
      : [];
    // A run that is done has nothing more to come: its chart may reach past its last snapshot.
    const nowMs = column.done ? Infinity : column.snapshot.now_ms;
    chart.goodput.render(column.snapshot.load.bins, binMs, nowMs, { fromS, toS: fromS + runS, originS: fromS, marks });
  }

  /** The second of lab time a column's run started in. */
  function startS(column) {
    return Math.floor(column.started_ms / 1000);
  }

  /** How many seconds after its start a column's run last offered or delivered a message. */
  function activeS(column) {
    let last = startS(column);
    for (const b of column.snapshot?.load.bins ?? []) if (b.offered || b.delivered) last = Math.max(last, Math.floor(b.t_ms / 1000));
    return last - startS(column);
  }

  function drawAxis() {
    const step = niceStep(view.span / 8);
    const ticks = [];
    // No label in the last twentieth: it would hang past the right edge.
    const last = view.t0 + view.span * 0.95;
    for (let t = Math.ceil(view.t0 / step) * step; t <= last; t += step) ticks.push(t);
    axisEl.replaceChildren(
      ...ticks.map((t) => {
        const tick = document.createElement('span');
        tick.className = 'cmp-tick';
        tick.style.setProperty('--s', String(t - view.t0));
        tick.textContent = seconds(t);
        return tick;
      }),
    );
  }

  return {
    /** Draw every column: `columns` are the report's columns, each with its lab `snapshot` (or null). */
    update(columns) {
      const binMs = columns.find((c) => c.snapshot)?.snapshot.load.bin_ms ?? 100;
      const all = columns.map((c) => placed(c));
      let t0 = 0;
      let end = MIN_SPAN_MS;
      columns.forEach((c, i) => {
        for (const [x] of all[i]) t0 = Math.min(t0, x);
        end = Math.max(end, extent(c, all[i], binMs));
      });
      // A lab's bins are aligned to its own clock, so its first may start a little before
      // the scenario did: the axis starts there.
      const span = end - t0;
      const width = container.querySelector('.cmp-plot')?.clientWidth || container.clientWidth || 800;
      const factor = factorFor(binMs, span, width);
      const barMs = binMs * factor;
      const rescaled = t0 !== view.t0 || barMs !== view.barMs;
      view = { ...view, t0, span, barMs };
      container.style.setProperty('--span', String(span));
      axisEl.style.setProperty('--span', String(span));

      const limits = columns.map((c) => limitOf(c.snapshot?.downstream, binMs));
      const sums = all.map((bins) => sumBars(bins, t0, barMs));
      let top = 4;
      sums.forEach((s, i) => {
        for (const sum of s.values()) top = Math.max(top, sum.requests / factor, sum.peak);
        if (limits[i]) top = Math.max(top, limits[i].value * 1.25);
      });
      const ymax = niceCeil(top);
      view.ymax = ymax;
      const runS = Math.max(0, ...columns.filter((c) => c.steady).map(activeS));

      columns.forEach((column, i) => {
        const chart = chartFor(column);
        // On the plot itself: the lab page's stylesheet gives every plot a default there.
        chart.plot.style.setProperty('--ymax', String(ymax));
        if (rescaled) {
          chart.barsEl.replaceChildren();
          chart.bars.clear();
        }
        for (const [start, sum] of sums[i]) drawBar(chart, start, sum, factor);
        const limit = limits[i];
        chart.limitEl.hidden = !limit;
        if (limit) {
          chart.limitEl.style.setProperty('--n', String(limit.value));
          chart.limitText.textContent = limit.text;
        }
        chart.max.textContent = `↑ ${ymax} per ${duration(binMs)}`;
        chart.state.textContent = column.gone ? 'lab deleted' : column.done ? 'done' : 'running';
        chart.root.dataset.done = String(column.done);
        summarise(chart, column, all[i], limit, binMs);
        if (column.steady && column.snapshot) drawGoodput(chart, column, binMs, runS);
      });
      drawAxis();
    },
  };
}

/** The fewest bins per bar (1, 2, 5 × 10^n) that keep a bar MIN_BAR_PX wide. */
function factorFor(binMs, span, width) {
  for (let p = 1; p < 1e7; p *= 10) {
    for (const f of [1, 2, 5]) if ((binMs * f * p * width) / span >= MIN_BAR_PX) return f * p;
  }
  return 1e7;
}

/** A tick step of 1, 2 or 5 × 10^n ms at or above `x`. */
function niceStep(x) {
  const p = 10 ** Math.floor(Math.log10(Math.max(x, 1)));
  for (const f of [1, 2, 5, 10]) if (f * p >= x) return f * p;
  return 10 * p;
}

/** A time on the shared axis: "0 s", "1.5 s", "-0.05 s". */
function seconds(t) {
  return `${Number((t / 1000).toFixed(2))} s`;
}
