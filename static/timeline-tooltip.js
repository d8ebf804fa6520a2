//! The timeline's tooltip: every number of one attempt and of the wait after it, shown for the
//! bar under the pointer or the one with the keyboard focus, and placed from the cached sizes
//! alone so it reads no layout.

import { findAttempt, labNow, ms, rowOf } from './model.js';
import { OUTCOME_TEXT, ROW_H, barOf, roundName } from './timeline-rows.js';

export function createTooltip(state, rows) {
  const { root, model, box } = state;
  const tip = root.querySelector('.tl-tip');
  const rowsEl = root.querySelector('.tl-rows');

  /** What the tooltip shows: { id, round, n, x } (x: pointer px in the timeline, or null). */
  let target = null;
  let stale = false;
  /** Where the tooltip was last put, to skip writes when nothing moved. */
  let placed = '';

  function showTip(next) {
    const same = target && !tip.hidden
      && target.id === next.id && target.round === next.round && target.n === next.n;
    target = next;
    if (!same) refresh();
    place();
  }

  function hide() {
    target = null;
    tip.hidden = true;
    for (const hot of rowsEl.querySelectorAll('.tl-bar.is-hot')) hot.classList.remove('is-hot');
  }

  function refresh() {
    stale = false;
    const m = rowOf(model, target.id);
    const a = m && findAttempt(m, target.round, target.n);
    if (!a) return hide();
    tip.replaceChildren(...tipContent(m, a, labNow(model)));
    tip.hidden = false;
    for (const hot of rowsEl.querySelectorAll('.tl-bar.is-hot')) hot.classList.remove('is-hot');
    barOf(target)?.classList.add('is-hot');
  }

  /**
   * Put the tooltip under the bar (above it in the lower half of the rows), on the side of
   * the bar with more room, from the cached sizes alone.
   */
  function place() {
    const row = rows.drawn(target.id);
    const m = rowOf(model, target.id);
    const a = m && findAttempt(m, target.round, target.n);
    if (!row || !a) return hide();
    const { t0, k } = state.view;
    const x = Math.min(Math.max(8, target.x ?? box.label + (a.started_ms - t0) * k), box.width - 8);
    const rowTop = box.axis + row.index * ROW_H - box.top;
    const above = rowTop > box.height / 2;
    // Anchored on the side it opens away from, so its width is not squeezed by the edge.
    const leftward = x > box.width / 2;
    const spot = [above, rowTop, leftward, x, box.width].join();
    // Placed again every frame while shown, so write only when something moved.
    if (spot === placed) return;
    placed = spot;
    tip.classList.toggle('is-above', above);
    tip.style.top = `${above ? rowTop + 6 : rowTop + ROW_H + 4}px`;
    tip.style.left = leftward ? 'auto' : `${x}px`;
    tip.style.right = leftward ? `${box.width - x}px` : 'auto';
    tip.style.maxWidth = `${Math.min(384, (leftward ? x : box.width - x) - 8)}px`;
  }

  return {
    /** Show attempt { id, round, n } with x, the pointer's px in the timeline (or null). */
    show: showTip,
    hide,
    /** The row of message `id` was rebuilt: redraw the tooltip if it shows that message. */
    filled(id) {
      if (target?.id === id) stale = true;
    },
    /** Hide the tooltip if its message is gone (a new snapshot). */
    forgetGone() {
      if (target && !rowOf(model, target.id)) hide();
    },
    /** Redraw and place the tooltip for this frame, if it is shown. */
    update() {
      if (!target) return;
      if (stale) refresh();
      if (target) place();
    },
  };
}

/** The tooltip: one definition list for the attempt, one for the wait after it. */
function tipContent(m, a, now) {
  if (m.outside) return outsideTip(m, a, now);
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
  if (a.outcome === 'cancelled') rowsOut.push(['why', "a hedge: another attempt's answer settled the call first, and the client hung up on this one"]);
  const overlapping = overlaps(m, a);
  if (overlapping.length > 0) {
    rowsOut.push(['overlapped', `attempt${overlapping.length > 1 ? 's' : ''} ${overlapping.join(', ')}, in flight at the same time with the same key (hedged)`]);
  }
  if (a.outcome === 'short_circuited') {
    const by = a.refused_by ?? 'breaker';
    rowsOut.push(['why', by === 'breaker' ? 'the circuit breaker was open: failed at once, no request sent' : `refused by the client's ${by} protection: failed at once, no request sent`]);
  }
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

/**
 * An outside caller's request: what the endpoint answered (or that the caller hung up), how
 * long it took, the Retry-After it sent, and the wait the caller then took before the key's
 * next request, all as the endpoint measured them.
 */
function outsideTip(m, a, now) {
  const head = document.createElement('p');
  head.className = 'tl-tip-head';
  head.textContent = `${m.caller} · attempt ${a.n} of ${m.requests}`;
  const pairs = [
    ['caller', m.caller],
    ['key', m.key],
    ['status', a.hung_up ? 'none: the caller hung up' : a.status ?? '—'],
    ['duration', a.duration_ms != null ? ms(a.duration_ms) : `${ms(Math.max(0, now - a.started_ms))} so far`],
    ['arrived', `${(a.started_ms / 1000).toFixed(3)} s`],
    ['Retry-After sent', a.retry_after_s != null ? `${a.retry_after_s} s` : 'none'],
  ];
  const last = a === m.attempts[m.attempts.length - 1];
  if (a.wait) pairs.push(['then waited', ms(a.wait.actual_ms)]);
  else if (last && a.outcome) pairs.push(['then waited', 'not sent again (yet)']);
  const parts = [head, definitionList(pairs)];
  if (a.wait && a.retry_after_s != null) {
    const note = document.createElement('p');
    note.className = 'tl-tip-note';
    const early = a.retry_after_s * 1000 - a.wait.actual_ms;
    note.textContent = early > 0
      ? `Came back ${ms(early)} before the Retry-After of ${a.retry_after_s} s.`
      : `Waited ${ms(-early)} past the Retry-After of ${a.retry_after_s} s.`;
    parts.push(note);
  }
  return parts;
}

/** The numbers of the other attempts of `a`'s round that were in flight while it was. */
function overlaps(m, a) {
  const end = (x) => (x.duration_ms == null ? Infinity : x.started_ms + x.duration_ms);
  return m.attempts
    .filter((x) => x !== a && x.round === a.round && x.outcome !== 'short_circuited' && a.outcome !== 'short_circuited')
    .filter((x) => x.started_ms < end(a) && a.started_ms < end(x))
    .map((x) => x.n);
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

/**
 * The small tooltip for the lanes around the rows (a flag, a load bar): a heading and one
 * line, under or above a spot given in client coordinates. Placed on hover and focus only,
 * so reading the layout then costs nothing while the page streams.
 */
export function createMiniTip(root) {
  const tip = root.querySelector('.tl-mini-tip');
  return {
    /** Show `head` and `body` at clientX, under clientY (or above it, when `above`). */
    show(clientX, clientY, head, body, above = false) {
      const box = root.getBoundingClientRect();
      const x = clientX - box.left;
      const leftward = x > box.width / 2;
      const strong = document.createElement('strong');
      strong.textContent = head;
      tip.replaceChildren(strong, document.createElement('br'), body);
      tip.classList.toggle('is-above', above);
      tip.style.top = `${clientY - box.top + (above ? -4 : 4)}px`;
      tip.style.left = leftward ? 'auto' : `${Math.max(4, x - 8)}px`;
      tip.style.right = leftward ? `${Math.max(4, box.width - x - 8)}px` : 'auto';
      tip.hidden = false;
    },
    hide() {
      tip.hidden = true;
    },
  };
}
