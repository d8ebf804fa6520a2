//! The backoff chart: for the wait after attempt n (x), the policy's nominal delay, the band
//! its jitter draws from, and every wait the client measured (y, ms). The curve and the bands
//! are the server's (`policy.bands`, one per wait, from the same code the client retries
//! with), so the page has no copy of the formulas; the dots come from the model, so a wait
//! lifted above the band by Retry-After shows.
//!
//! A burst changes the waits every frame, but the chart is redrawn a few times a second at
//! most, less often the more dots it holds and while it is out of view (always once more after
//! the last change), and it never reads layout while drawing: its width comes from a
//! ResizeObserver.

const HEIGHT = 280;
const MARGIN = { top: 16, right: 16, bottom: 42, left: 58 };
/** Drawing thousands of dots helps nobody; the latest ones tell the story. */
const MAX_WAITS = 300;
/** Redraw at most this often, plus this much per dot (300 dots: 1 s)... */
const REDRAW_MS = 250;
const REDRAW_MS_PER_DOT = 2.5;
/** ...and this many times less often while the chart is scrolled out of view. */
const OFFSCREEN_SLOWER = 4;
/** A redraw put off by busy frames for this long goes ahead in the next one anyway. */
const OVERDUE_MS = 1000;

/**
 * The server's band for each wait, by n (the wait after attempt n): { nominal_ms, low_ms,
 * high_ms }. Empty when the server sent none (an older server): the chart then draws the
 * waits without the curve and the bands.
 */
function bandsByN(policy) {
  const byN = [];
  for (const b of policy.bands ?? []) byN[b.n] = b;
  return byN;
}

/**
 * Whether a recorded wait was drawn under this policy (the policy may have changed since):
 * its band is the policy's for that wait, or, where each wait draws from a band of its own
 * (decorrelated jitter), lies within the widest one the policy can reach.
 */
function fitsPolicy(b, ownBands, w) {
  if (!b) return true;
  const low = Math.abs(w.low_ms - b.low_ms) <= 1;
  return low && (ownBands ? w.high_ms <= b.high_ms + 1 : Math.abs(w.high_ms - b.high_ms) <= 1);
}

export function createBackoffChart(svg, caption, model, requestDraw) {
  /** The svg's width in px: the chart is drawn in screen pixels so text keeps its size. */
  let width = 640;
  /** The width the chart was last drawn for. */
  let drawnWidth = 0;
  /** Dots in the last drawing, which sets how soon the next one may come. */
  let dots = 0;
  // Redraw in a later frame: the drawing changes the svg's height, which the observer sees.
  new ResizeObserver(([entry]) => {
    width = Math.round(entry.contentRect.width) || 640;
    if (width !== drawnWidth) {
      dirty = urgent = true;
      requestDraw();
    }
  }).observe(svg);

  function draw() {
    const policy = model.policy;
    if (!policy) return;
    drawnWidth = width;
    const slots = Math.max(0, policy.max_attempts - 1);
    svg.setAttribute('viewBox', `0 0 ${width} ${HEIGHT}`);
    if (slots === 0) {
      dots = 0;
      svg.innerHTML = '';
      caption.textContent = 'With max attempts 1 the client never retries, so there is no wait to draw.';
      return;
    }

    const bands = bandsByN(policy);
    // Decorrelated jitter draws each wait from a band of its own, from base to 3 × the previous
    // wait: those are drawn per wait, as thin lines, rather than as one box per slot.
    const ownBands = policy.jitter === 'decorrelated';

    // Every recorded wait under the current policy, newest last.
    const waits = [];
    let skipped = 0;
    for (const m of model.messages.values()) {
      for (const a of m.attempts) {
        if (!a.wait) continue;
        if (a.n <= slots && fitsPolicy(bands[a.n], ownBands, a.wait)) waits.push({ m, a, w: a.wait });
        else skipped += 1;
      }
    }
    const shown = waits.slice(-MAX_WAITS);
    dots = shown.length;

    let yMax = 0;
    for (let n = 1; n <= slots; n++) yMax = Math.max(yMax, bands[n]?.nominal_ms ?? 0);
    for (const { w } of shown) yMax = Math.max(yMax, w.high_ms, w.planned_ms, w.actual_ms ?? 0, w.floor_ms ?? 0);
    const yTop = niceCeil(yMax * 1.08);

    const plotW = width - MARGIN.left - MARGIN.right;
    const plotH = HEIGHT - MARGIN.top - MARGIN.bottom;
    const slotW = plotW / slots;
    const x = (n) => MARGIN.left + (n - 0.5) * slotW;
    const y = (v) => MARGIN.top + plotH * (1 - v / yTop);

    const g = [];
    // y axis: gridlines with labels.
    const step = niceCeil(yTop / 5);
    for (let v = 0; v <= yTop + 1e-9; v += step) {
      g.push(el('line', { class: 'bc-grid', x1: MARGIN.left, x2: width - MARGIN.right, y1: y(v), y2: y(v) }));
      g.push(el('text', { class: 'bc-label', x: MARGIN.left - 6, y: y(v) + 4, 'text-anchor': 'end' }, axisMs(v)));
    }
    // x axis: one slot per retry.
    for (let n = 1; n <= slots; n++) {
      g.push(el('text', { class: 'bc-label', x: x(n), y: HEIGHT - MARGIN.bottom + 16, 'text-anchor': 'middle' }, `${n}`));
    }
    g.push(el('text', { class: 'bc-title', x: MARGIN.left + plotW / 2, y: HEIGHT - 6, 'text-anchor': 'middle' }, 'wait after attempt n'));
    g.push(el('line', { class: 'bc-axis', x1: MARGIN.left, x2: width - MARGIN.right, y1: y(0), y2: y(0) }));

    // The jitter band: one shaded box per slot, or one thin band per wait for decorrelated.
    const half = Math.min(slotW * 0.36, 80);
    for (let n = 1; n <= slots; n++) {
      const b = bands[n];
      if (!b || ownBands) continue;
      const top = y(b.high_ms);
      g.push(el('rect', { class: 'bc-band', x: x(n) - half, y: top - (b.low_ms === b.high_ms ? 1.5 : 0), width: half * 2, height: Math.max(3, y(b.low_ms) - top) }));
    }
    const offset = (m, a) => ((hash(m.id * 31 + a.round) % 1000) / 1000 - 0.5) * half * 1.6;
    if (ownBands) {
      for (const { m, a, w } of shown) {
        const cx = x(a.n) + offset(m, a);
        g.push(el('line', { class: 'bc-band-line', x1: cx, x2: cx, y1: y(w.low_ms), y2: y(w.high_ms) }));
      }
    }

    // Retry-After floors that actually set a wait.
    const floors = new Set(shown.filter(({ w }) => w.reason === 'retry_after' && w.floor_ms != null).map(({ w }) => w.floor_ms));
    for (const f of [...floors].slice(0, 3)) {
      g.push(el('line', { class: 'bc-floor', x1: MARGIN.left, x2: width - MARGIN.right, y1: y(f), y2: y(f) }));
      const label = width < 480 ? `floor ${axisMs(f)}` : `Retry-After floor ${axisMs(f)}`;
      g.push(el('text', { class: 'bc-floor-label', x: width - MARGIN.right - 4, y: y(f) - 5, 'text-anchor': 'end' }, label));
    }

    // The nominal curve.
    const nominal = [];
    for (let n = 1; n <= slots; n++) if (bands[n]) nominal.push([n, bands[n].nominal_ms]);
    if (nominal.length) {
      const points = nominal.map(([n, v]) => `${x(n)},${y(v)}`);
      g.push(el('polyline', { class: 'bc-nominal', points: points.join(' ') }));
    }
    for (const [n, v] of nominal) {
      g.push(el('rect', { class: 'bc-nominal-point', x: x(n) - half, y: y(v) - 1.5, width: half * 2, height: 3 }));
    }

    // Sampled (hollow) and measured (filled) waits, joined when the floor lifted one. The
    // filled mark is the timer's own wait; time then spent queueing for a connection slot is
    // a dashed line above it, to the whole measured wait.
    for (const { m, a, w } of shown) {
      const cx = x(a.n) + offset(m, a);
      const queued = w.queued_ms ?? 0;
      const timer = w.actual_ms != null ? w.actual_ms - queued : null;
      if (timer != null && Math.abs(timer - w.chosen_ms) > 2) {
        g.push(el('line', { class: 'bc-lift', x1: cx, x2: cx, y1: y(w.chosen_ms), y2: y(timer) }));
      }
      if (timer != null && queued > 2) {
        g.push(el('line', { class: 'bc-queued', x1: cx, x2: cx, y1: y(timer), y2: y(w.actual_ms) }));
      }
      g.push(el('circle', { class: 'bc-chosen', cx, cy: y(w.chosen_ms), r: 3 }));
      if (timer != null) {
        const floor = w.reason === 'retry_after';
        const slot = queued > 0 ? `, then ${queued} ms queued for a connection slot` : '';
        const title = `#${m.id} wait after attempt ${a.n}: waited ${timer} ms${slot}, chosen ${w.chosen_ms} ms${floor ? `, Retry-After floor ${w.floor_ms} ms` : ''}`;
        g.push(floor
          ? el('rect', { class: 'bc-actual bc-actual-floor', x: cx - 3.5, y: y(timer) - 3.5, width: 7, height: 7 }, null, title)
          : el('circle', { class: 'bc-actual', cx, cy: y(timer), r: 3.5 }, null, title));
      }
    }
    // One string parsed at once costs far less than hundreds of DOM calls.
    svg.innerHTML = g.join('');

    const measured = shown.filter(({ w }) => w.actual_ms != null).length;
    const lifted = shown.filter(({ w }) => w.actual_ms != null && w.reason === 'retry_after').length;
    const queuedWaits = shown.filter(({ w }) => (w.queued_ms ?? 0) > 2).length;
    let text = `${policy.jitter === 'none' ? 'no' : policy.jitter} jitter, base ${policy.base_ms} ms, cap ${policy.cap_ms} ms, ${policy.max_attempts} attempts. `;
    text += measured
      ? `${measured} measured wait${measured === 1 ? '' : 's'}${lifted ? `, ${lifted} set by Retry-After` : ''}.`
      : 'No measured waits yet: send traffic at a flaky or down endpoint.';
    if (queuedWaits) text += ` ${queuedWaits} also queued for a connection slot (dashed, above the dot).`;
    if (ownBands) text += ' Decorrelated jitter: each wait has its own band, from base to 3 × the previous wait (thin vertical lines).';
    if (waits.length > shown.length) text += ` Showing the latest ${shown.length}.`;
    if (skipped) text += ` ${skipped} wait${skipped === 1 ? '' : 's'} from an earlier policy not shown.`;
    caption.textContent = text;
  }

  // A burst changes the waits every frame; a redraw now and then is plenty.
  let lastDraw = -Infinity;
  let timer = 0;
  let dirty = false;
  /** When a due redraw was first put off for a busy frame (0: it was not). */
  let waitingSince = 0;
  /** A new policy or width: redraw in the next frame whatever else it holds. */
  let urgent = false;
  let visible = true;
  new IntersectionObserver(([entry]) => {
    visible = entry.isIntersecting;
    if (visible && dirty) requestDraw();
  }).observe(svg);

  /** Note what changed; the drawing itself waits for `flush`. */
  function render(changes) {
    if (changes.all || changes.settings) dirty = urgent = true;
    else if (changes.messages.size) dirty = true;
  }

  /**
   * Redraw when due, if the frame has `room` (or the redraw is long overdue).
   * Returns "drew", "waiting" (call again in the next frame) or "idle".
   */
  function flush(room) {
    if (!dirty) return 'idle';
    const now = performance.now();
    const due = lastDraw + (REDRAW_MS + dots * REDRAW_MS_PER_DOT) * (visible ? 1 : OFFSCREEN_SLOWER);
    if (!urgent && now < due) {
      // Nothing to do until then: ask for a frame at that time rather than spin.
      timer ||= setTimeout(() => {
        timer = 0;
        requestDraw();
      }, due - now);
      return 'idle';
    }
    if (!urgent && !room) {
      waitingSince ||= now;
      if (now < waitingSince + OVERDUE_MS) return 'waiting';
    }
    dirty = urgent = false;
    waitingSince = 0;
    lastDraw = now;
    draw();
    return 'drew';
  }

  return { render, flush };
}

/** One SVG element as markup; numbers are rounded to 0.1 px, text is escaped. */
function el(name, attrs, text = null, title = null) {
  let out = `<${name}`;
  for (const [k, v] of Object.entries(attrs)) out += ` ${k}="${typeof v === 'number' ? Math.round(v * 10) / 10 : escapeXml(v)}"`;
  out += '>';
  if (title) out += `<title>${escapeXml(title)}</title>`;
  if (text != null) out += escapeXml(text);
  return `${out}</${name}>`;
}

function escapeXml(text) {
  return String(text).replace(/[&<>"]/g, (c) => `&#${c.charCodeAt(0)};`);
}

function axisMs(v) {
  return v >= 1000 ? `${+(v / 1000).toFixed(1)} s` : `${Math.round(v)} ms`;
}

function niceCeil(x) {
  if (x <= 0) return 1;
  const p = 10 ** Math.floor(Math.log10(x));
  for (const f of [1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10]) if (f * p >= x) return f * p;
  return 10 * p;
}

/** A small integer hash, so each message keeps its horizontal spot between redraws. */
function hash(n) {
  let h = n | 0;
  h = Math.imul(h ^ (h >>> 16), 0x45d9f3b);
  h = Math.imul(h ^ (h >>> 16), 0x45d9f3b);
  return (h ^ (h >>> 16)) >>> 0;
}
