//! What the person does to the timeline with keyboard and pointer. The grid has one tab stop;
//! arrow keys move between attempts, + and − zoom, 0 fits, Shift + arrows pan, Enter in the
//! find box goes to the first message found. The pointer shows the numbers on hover, drags to
//! pan, and pinches (or Ctrl + wheel) to zoom.

import { findAttempt, labNow, rowOf } from './model.js';
import { barOf, targetOf } from './timeline-rows.js';
import { PAN_STEP, ZOOM_STEP } from './timeline-scale.js';

const HOVER_SLOP_PX = 8;
/** A pointer that moves this far with the button down is panning, not clicking. */
const DRAG_PX = 4;

export function createInput(state, { scale, rows, find, tooltip }) {
  const { root, model, box } = state;
  const scroller = root.querySelector('.tl-scroll');
  const rowsEl = root.querySelector('.tl-rows');
  const findForm = document.querySelector('[data-find-form]');

  /** The bar that holds the grid's single tab stop: { id, round, n }. */
  let focusTarget = null;
  /** Set while a rebuilt row gives focus back to its new bar, which is not a person moving. */
  let refocusing = false;

  // ---- keyboard: one tab stop for the whole grid, arrow keys move between attempts --------

  /** Focus attempt `i` of the first row with attempts from `index` on, going `dir` (±1). */
  function moveTo(index, i, dir) {
    const list = state.list;
    for (let j = index; j >= 0 && j < list.length; j += dir) {
      const m = rowOf(model, list[j]);
      if (!m?.attempts.length) continue;
      const a = m.attempts[Math.min(Math.max(0, i), m.attempts.length - 1)];
      rows.reveal(j);
      if (!rows.drawn(m.id)) rows.drawWindow();
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
    const list = state.list;
    const at = targetOf(bar);
    const m = rowOf(model, at.id);
    const index = list.indexOf(at.id);
    if (!m || index < 0) return;
    const i = m.attempts.findIndex((a) => a.round === at.round && a.n === at.n);
    const a = m.attempts[i];
    const { t0, k } = state.view;
    switch (e.key) {
      case 'ArrowRight':
        if (e.shiftKey) scale.panBy(scale.current().span * PAN_STEP);
        else moveTo(index, i + 1, 1);
        break;
      case 'ArrowLeft':
        if (e.shiftKey) scale.panBy(-scale.current().span * PAN_STEP);
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
        scale.zoomBy(ZOOM_STEP, a.started_ms, (a.started_ms - t0) * k);
        break;
      case '-':
      case '_':
        scale.zoomBy(1 / ZOOM_STEP, a.started_ms, (a.started_ms - t0) * k);
        break;
      case '0':
        scale.fit();
        break;
      case 'Escape':
        tooltip.hide();
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
    const m = rowOf(model, focusTarget.id);
    const a = m && findAttempt(m, focusTarget.round, focusTarget.n);
    if (a) scale.panToShow(a.started_ms, a.started_ms + (a.duration_ms ?? 0));
    tooltip.show({ ...focusTarget, x: null });
  });
  rowsEl.addEventListener('focusout', (e) => {
    if (!rowsEl.contains(e.relatedTarget)) tooltip.hide();
  });

  // Enter takes the keyboard to the first message found.
  findForm.addEventListener('submit', (e) => {
    e.preventDefault();
    find.refresh();
    moveTo(0, 0, 1);
  });

  // ---- pointer: hover for numbers, drag to pan, pinch or ctrl + wheel to zoom -------------

  scroller.addEventListener('wheel', (e) => {
    const unit = e.deltaMode === 1 ? 16 : e.deltaMode === 2 ? box.height : 1;
    if (e.ctrlKey) {
      // A trackpad pinch arrives as a wheel with ctrlKey.
      e.preventDefault();
      const { t, px } = scale.timeAt(e.clientX);
      scale.zoomBy(Math.exp(-e.deltaY * unit * 0.002), t, px);
    } else if (scale.zoomed() && (e.shiftKey || Math.abs(e.deltaX) > Math.abs(e.deltaY))) {
      e.preventDefault();
      scale.panBy(((e.deltaX || e.deltaY) * unit) / state.view.k);
    }
  }, { passive: false });

  /** Pointers down on the tracks: id -> clientX, clientY. */
  const pointers = new Map();
  let gesture = null;

  function startGesture() {
    const [p, q] = [...pointers.values()];
    const w = scale.current();
    gesture = q
      ? { pinch: true, dist: Math.hypot(p.x - q.x, p.y - q.y), span: w.span, at: scale.timeAt((p.x + q.x) / 2).t }
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
      const mid = scale.timeAt((p.x + q.x) / 2);
      scale.zoomTo(gesture.span * (gesture.dist / Math.max(1, Math.hypot(p.x - q.x, p.y - q.y))), gesture.at, mid.px);
    } else if (!gesture.pinch && scale.zoomed()) {
      if (!gesture.moved && Math.abs(p.x - gesture.x) < DRAG_PX) return;
      if (!gesture.moved) {
        gesture.moved = true;
        rowsEl.setPointerCapture(e.pointerId);
        root.classList.add('is-panning');
        tooltip.hide();
      }
      scale.panTo(gesture.t0 - (p.x - gesture.x) / state.view.k);
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
    const m = rowEl && rowOf(model, Number(rowEl.dataset.messageId));
    if (!m || !m.attempts.length || e.target.closest('.tl-label')) return tooltip.hide();
    const x = e.clientX - root.getBoundingClientRect().left;
    const bar = e.target.closest('.tl-bar');
    if (bar) return tooltip.show({ ...targetOf(bar), x });
    const { t } = scale.timeAt(e.clientX);
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
    if (bestDistance * state.view.k > HOVER_SLOP_PX) return tooltip.hide();
    tooltip.show({ id: m.id, round: best.round, n: best.n, x });
  }
  rowsEl.addEventListener('pointerleave', () => {
    if (!rowsEl.contains(document.activeElement)) tooltip.hide();
  });

  return {
    /**
     * A row was rebuilt: if it holds the tab stop, put it on the new bar, and give that bar
     * the focus back if the row had it (without panning or moving the tooltip).
     */
    refocus(row, m, hadFocus) {
      if (focusTarget?.id !== m.id) return;
      const bar = barOf(focusTarget) ?? row.track.querySelector('.tl-bar');
      if (!bar) return;
      bar.tabIndex = 0;
      if (hadFocus && !bar.contains(document.activeElement)) {
        refocusing = true;
        bar.focus({ preventScroll: true });
        refocusing = false;
      }
    },
    /** Forget the focused attempt if its message is gone (a new snapshot). */
    forgetGone() {
      if (focusTarget && !rowOf(model, focusTarget.id)) focusTarget = null;
    },
    /** Keyboard users must always find one way in, even after the focused row went away. */
    ensureTabStop() {
      if (rowsEl.querySelector('.tl-bar[tabindex="0"]')) return;
      const bar = (focusTarget && barOf(focusTarget)) ?? rowsEl.querySelector('.tl-bar');
      if (bar) bar.tabIndex = 0;
    },
  };
}
