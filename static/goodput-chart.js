//! The goodput chart: per second of lab time, the offered load (new messages) and the goodput
//! (messages delivered) as two bold lines, each named on the chart. When retries sustain an
//! overload the two part: work keeps arriving and little of it gets through. Drawn from the
//! load bins the lab already sends, so its figures are the load chart's, summed per second.
//! One module, so the comparison page can draw a chart per policy with it.

const SVG = 'http://www.w3.org/2000/svg';
/** The seconds shown: the last minute of lab time. */
const WINDOW_S = 60;
const HEIGHT = 220;
const PAD = { left: 34, right: 104, top: 14, bottom: 24 };

/**
 * The load bins summed per whole second of lab time, `from_s` to `to_s` (included): for each
 * second, `offered` and `delivered`. A bin wider than a second (older activity, summed) is
 * spread evenly over the seconds it covers.
 */
export function perSecond(bins, binMs, fromS, toS) {
  const seconds = [];
  for (let s = fromS; s <= toS; s += 1) seconds.push({ t_s: s, offered: 0, delivered: 0 });
  for (const b of bins) {
    const width = b.width_ms ?? binMs;
    const first = Math.floor(b.t_ms / 1000);
    const last = Math.floor((b.t_ms + width - 1) / 1000);
    const share = 1 / (last - first + 1);
    for (let s = Math.max(first, fromS); s <= Math.min(last, toS); s += 1) {
      const slot = seconds[s - fromS];
      slot.offered += (b.offered ?? 0) * share;
      slot.delivered += (b.delivered ?? 0) * share;
    }
  }
  return seconds;
}

function el(name, attrs = {}) {
  const node = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  return node;
}

/** 1, 2, 5, 10, 20, 50...: a round top for the axis at or above `x`. */
function roundUp(x) {
  if (x <= 5) return 5;
  const p = 10 ** Math.floor(Math.log10(x));
  return [1, 2, 5, 10].map((m) => m * p).find((v) => v >= x);
}

const show = (v) => (Number.isInteger(v) ? String(v) : v.toFixed(1));

/**
 * A chart in `figure` (an element holding an `svg` and a `figcaption`). `render(bins, binMs,
 * nowMs, view)` draws the last minute of whole seconds before lab time `nowMs` from the load
 * bins (an array of the snapshot's bin objects). `view` may fix the seconds drawn (`fromS`,
 * `toS`), count the axis from `originS` (a run's start), and mark moments (`marks`: each
 * `{ t_ms, label }` in lab time, a dashed line across the plot).
 */
export function createGoodputChart(figure) {
  const svg = figure.querySelector('svg');
  const caption = figure.querySelector('figcaption');
  svg.setAttribute('role', 'img');
  /** What was drawn last, so an unchanged chart is not drawn again. */
  let drawn = '';

  function render(bins, binMs, nowMs, view = {}) {
    const width = Math.max(280, Math.round(svg.clientWidth || 480));
    // Whole seconds only: the one under way is still filling.
    const nowS = Math.max(0, Math.floor(nowMs / 1000) - 1);
    const toS = Math.min(nowS, view.toS ?? nowS);
    let firstS = toS;
    for (const b of bins) firstS = Math.min(firstS, Math.floor(b.t_ms / 1000));
    const fromS = Math.min(toS, view.fromS ?? Math.max(firstS, toS - WINDOW_S + 1));
    const originS = view.originS ?? 0;
    const marks = view.marks ?? [];
    const seconds = perSecond(bins, binMs, fromS, toS);
    const key = `${width}|${fromS}|${originS}|${marks.map((m) => m.t_ms).join(',')}|${seconds.map((s) => `${s.offered},${s.delivered}`).join(';')}`;
    if (key === drawn) return;
    drawn = key;

    const top = roundUp(Math.max(...seconds.map((s) => Math.max(s.offered, s.delivered)), 1));
    const plotW = width - PAD.left - PAD.right;
    const plotH = HEIGHT - PAD.top - PAD.bottom;
    const span = Math.max(1, seconds.length - 1);
    const x = (i) => PAD.left + (seconds.length === 1 ? plotW : (i / span) * plotW);
    const y = (v) => PAD.top + plotH - (v / top) * plotH;

    svg.setAttribute('viewBox', `0 0 ${width} ${HEIGHT}`);
    const parts = [];
    for (const v of [0, top / 2, top]) {
      parts.push(el('line', { class: 'gp-grid', x1: PAD.left, x2: PAD.left + plotW, y1: y(v), y2: y(v) }));
      const label = el('text', { class: 'gp-tick', x: PAD.left - 6, y: y(v) + 4, 'text-anchor': 'end' });
      label.textContent = show(v);
      parts.push(label);
    }
    for (const [i, s] of seconds.entries()) {
      if ((s.t_s - originS) % 10 !== 0 && i !== 0) continue;
      const label = el('text', { class: 'gp-tick', x: x(i), y: HEIGHT - 6, 'text-anchor': 'middle' });
      label.textContent = `${s.t_s - originS} s`;
      parts.push(label);
    }
    // A moment (a trigger, its end) at its place within its second: a point at x(i) is second i.
    for (const mark of marks) {
      const at = mark.t_ms / 1000 - fromS;
      if (at < 0 || at > span) continue;
      const mx = (PAD.left + (at / span) * plotW).toFixed(1);
      const line = el('line', { class: 'gp-mark', 'data-mark': mark.label, x1: mx, x2: mx, y1: PAD.top, y2: PAD.top + plotH });
      line.dataset.tMs = String(mark.t_ms);
      const label = el('text', { class: 'gp-mark-label', x: mx, y: PAD.top - 3, 'text-anchor': 'middle' });
      label.textContent = mark.label;
      parts.push(line, label);
    }
    const last = seconds[seconds.length - 1];
    // Each line named at its right end, by its last value; two ends closer than a line of text
    // are pushed apart, the higher value's name above.
    let [yOffered, yGoodput] = [y(last.offered) + 4, y(last.delivered) + 4];
    if (Math.abs(yOffered - yGoodput) < 14) {
      const middle = (yOffered + yGoodput) / 2;
      const offeredAbove = last.offered >= last.delivered;
      yOffered = middle + (offeredAbove ? -7 : 7);
      yGoodput = middle + (offeredAbove ? 7 : -7);
    }
    const lines = [
      ['offered', 'offered', last.offered, yOffered],
      ['delivered', 'goodput', last.delivered, yGoodput],
    ];
    for (const [field, name, value, labelY] of lines) {
      const points = seconds.map((s, i) => `${x(i).toFixed(1)},${y(s[field]).toFixed(1)}`).join(' ');
      const line = el('polyline', { class: 'gp-line', 'data-line': name, points });
      line.dataset.values = seconds.map((s) => show(s[field])).join(',');
      parts.push(line);
      const label = el('text', { class: 'gp-label', 'data-label': name, x: PAD.left + plotW + 6, y: labelY });
      label.textContent = `${name} ${show(value)}/s`;
      parts.push(label);
    }
    svg.replaceChildren(...parts);
    svg.dataset.fromS = String(fromS);
    svg.dataset.toS = String(toS);

    const sum = (field) => seconds.reduce((a, s) => a + s[field], 0);
    const marked = marks.map((m) => `; ${m.label} at ${show(m.t_ms / 1000 - originS)} s`).join('');
    const said = `Offered load and goodput per second of ${originS ? 'the run' : 'lab time'}, ${fromS - originS} to ${toS - originS} s${marked}: `
      + `${show(sum('offered'))} new messages offered, ${show(sum('delivered'))} delivered; `
      + `in the last second ${show(last.offered)} offered, goodput ${show(last.delivered)}.`;
    svg.setAttribute('aria-label', said);
    caption.textContent = `New messages (offered, dashed) and messages delivered (goodput, solid), each per second of ${originS ? 'the run' : 'lab time'}.`;
  }

  return { render };
}
