//! The protection lane: one row per client protection, drawn from what each reports in the load
//! bins, by its kind: `levels` (where it stood in the bin: tokens in a bucket, retries left in
//! a budget's window) and `suppressed` (the attempts and retries it stopped). A protection whose
//! level is known by its history of changes rather than by bins (the circuit breaker: how many
//! were open) is handed in as such a history, and its row is drawn by the same code. Nothing
//! here knows a protection by name, so a new kind draws with no new code. Per second of lab
//! time over the last minute: the level as a line, what was stopped as bars; beside each row,
//! the level now and everything stopped since the lab began (or was reset).

const SVG = 'http://www.w3.org/2000/svg';
const WINDOW_S = 60;
const WIDTH = 480;
const HEIGHT = 56;

function svgEl(name, attrs = {}) {
  const node = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  return node;
}

/**
 * The highest level held at any moment of each second from `fromS` to `toS`, from `changes`
 * (each with its `at_ms`, oldest first; `levelOf` reads its level): the level held as the
 * second began and every level it changed to within it; null before the first change. Only
 * the changes from the last one before the window on are read, however long the history.
 */
export function highestEachSecond(changes, levelOf, fromS, toS) {
  // The first change at or after the window's start, by halves.
  let lo = 0;
  let hi = changes.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (changes[mid].at_ms < fromS * 1000) lo = mid + 1;
    else hi = mid;
  }
  let i = lo;
  let held = i > 0 ? levelOf(changes[i - 1]) : null;
  const highest = [];
  for (let s = fromS; s <= toS; s += 1) {
    let top = held;
    while (i < changes.length && changes[i].at_ms < (s + 1) * 1000) {
      held = levelOf(changes[i++]);
      top = top == null ? held : Math.max(top, held);
    }
    highest.push(top);
  }
  return highest;
}

/**
 * What the bins say of each kind: every kind that reported, the total it stopped, its latest
 * level, and per second from `fromS` to `toS` the level last noted and the count stopped.
 * Each of `histories` ({ kind, changes, levelOf, level, ceiling, figure }) gives its kind a
 * row even before the bins mention it, its level now, and per second the highest level its
 * changes held; `figure` is the level now in words, `ceiling` the top of its line.
 */
export function lanes(bins, fromS, toS, histories = []) {
  const byKind = new Map();
  const lane = (kind) => {
    if (!byKind.has(kind)) {
      const seconds = [];
      for (let s = fromS; s <= toS; s += 1) seconds.push({ level: null, stopped: 0 });
      byKind.set(kind, { kind, stopped: 0, level: null, levelAt: -1, figure: null, ceiling: null, seconds });
    }
    return byKind.get(kind);
  };
  for (const b of [...bins].sort((x, y) => x.t_ms - y.t_ms)) {
    const s = Math.floor(b.t_ms / 1000);
    const inWindow = s >= fromS && s <= toS;
    for (const [kind, count] of Object.entries(b.suppressed ?? {})) {
      const l = lane(kind);
      l.stopped += count;
      if (inWindow) l.seconds[s - fromS].stopped += count;
    }
    for (const [kind, level] of Object.entries(b.levels ?? {})) {
      const l = lane(kind);
      if (b.t_ms > l.levelAt) Object.assign(l, { level, levelAt: b.t_ms });
      if (inWindow) l.seconds[s - fromS].level = level;
    }
  }
  for (const h of histories) {
    const l = lane(h.kind);
    Object.assign(l, { level: h.level, figure: h.figure ?? null, ceiling: h.ceiling ?? null });
    highestEachSecond(h.changes, h.levelOf, fromS, toS).forEach((level, i) => {
      l.seconds[i].level = level;
    });
  }
  return [...byKind.values()].sort((a, b) => a.kind.localeCompare(b.kind));
}

const show = (v) => (v == null ? '–' : Number.isInteger(v) ? String(v) : v.toFixed(1));

/** A protection's row head: its kind, its level now, what it stopped in all. */
function protectionHead(lane, head) {
  head.innerHTML = '<strong></strong>: level now <span data-protection-figure="level"></span>, '
    + '<span data-protection-figure="stopped"></span> stopped in all';
  head.querySelector('strong').textContent = lane.kind;
  head.querySelector('[data-protection-figure="level"]').textContent = lane.figure ?? show(lane.level);
  head.querySelector('[data-protection-figure="stopped"]').textContent = String(lane.stopped);
}

/**
 * The lane in `panel`: `render(bins, nowMs, histories)` draws it from the model's load bins and
 * the histories of the protections known by their changes (see `lanes`). Another lane of the
 * same shape may name its rows' attribute (`attr`) and write their heads (`head`).
 */
export function createProtectionLane(panel, { attr = 'protection', head: writeHead = protectionHead } = {}) {
  const list = panel.querySelector(`[data-${attr}-rows]`);
  const empty = panel.querySelector(`[data-${attr}-empty]`);
  let drawn = '';

  function render(bins, nowMs, histories = []) {
    const toS = Math.max(0, Math.floor(nowMs / 1000));
    const fromS = Math.max(0, toS - WINDOW_S + 1);
    const rows = lanes(bins, fromS, toS, histories);
    const key = JSON.stringify([fromS, rows.map((r) => [r.kind, r.stopped, r.level, r.figure, r.ceiling, r.seconds])]);
    if (key === drawn) return;
    drawn = key;
    empty.hidden = rows.length > 0;
    list.replaceChildren(...rows.map((r) => row(r, fromS)));
  }

  function row(lane, fromS) {
    const item = document.createElement('li');
    item.className = 'protection-row';
    item.setAttribute(`data-${attr}`, lane.kind);
    // What the line draws, per second from `fromS` (blank where nothing was noted).
    item.dataset.fromS = String(fromS);
    item.dataset.levels = lane.seconds.map((s) => s.level ?? '').join(',');
    const head = document.createElement('p');
    writeHead(lane, head);
    const svg = svgEl('svg', { viewBox: `0 0 ${WIDTH} ${HEIGHT}`, role: 'img' });
    svg.setAttribute('aria-label', `${lane.kind} per second over the last minute from second ${fromS}: its level as a line, what it stopped as bars`);
    const step = WIDTH / WINDOW_S;
    const topLevel = Math.max(1, lane.ceiling ?? 0, ...lane.seconds.map((s) => s.level ?? 0));
    const topStopped = Math.max(1, ...lane.seconds.map((s) => s.stopped));
    const points = [];
    lane.seconds.forEach((s, i) => {
      if (s.stopped > 0) {
        const h = (s.stopped / topStopped) * (HEIGHT - 4);
        svg.append(svgEl('rect', { x: i * step + 1, y: HEIGHT - h, width: step - 2, height: h, class: 'protection-stopped' }));
      }
      if (s.level != null) points.push(`${(i + 0.5) * step},${HEIGHT - 2 - (s.level / topLevel) * (HEIGHT - 6)}`);
    });
    if (points.length) svg.append(svgEl('polyline', { points: points.join(' '), class: 'protection-level' }));
    item.append(head, svg);
    return item;
  }

  return { render };
}
