//! "Every attempt, to scale": one row per message, lab time on the x axis, each attempt a
//! bar exactly as long as its measured duration and each wait a thin line exactly as long as
//! the measured wait (or the planned one, dashed, while it is still going on).
//!
//! Built to stay smooth with thousands of messages streaming in, from five parts that share
//! one small `state` object, each field written by one part only:
//! - timeline-scale.js: the time window (fit, or zoomed and panned), `--t0` and `--k`, ticks;
//! - timeline-rows.js: the virtual rows, the sizes and the scroll offset, the running clock;
//! - timeline-find.js: the filter by id, key prefix and state, and the list of rows it picks;
//! - timeline-tooltip.js: the numbers of one attempt, by the pointer or the focus;
//! - timeline-input.js: keyboard and pointer;
//! - timeline-marks.js: the circuit breaker's band and the flags of settings changes, crashes
//!   and restarts, above the time axis;
//! - load-chart.js: the load that reached the downstream, under the rows, on the same axis.
//! This file wires them together and draws what changed, once per animation frame.

import { createScale } from './timeline-scale.js';
import { createRows } from './timeline-rows.js';
import { createFind } from './timeline-find.js';
import { createMiniTip, createTooltip } from './timeline-tooltip.js';
import { createInput } from './timeline-input.js';
import { createMarks } from './timeline-marks.js';
import { createLoadChart } from './load-chart.js';

export function createTimeline(root, model, requestDraw) {
  const state = {
    root,
    model,
    requestDraw,
    /** Sizes in px and the scroll offset, kept by the rows so drawing never asks for layout. */
    box: { width: 0, label: 0, axis: 0, track: 0, height: 0, top: 0 },
    /** The window on screen and its scale (px per ms), set by the scale. */
    view: { t0: 0, span: 0, k: 0 },
    /**
     * Ids of the rows that pass the filter, the rows top to bottom: the lab's messages in
     * creation order and outside callers' (negative ids) among them by their first request.
     */
    list: [],
  };
  const scale = createScale(state);
  const rows = createRows(state, {
    // A rebuilt row gives the tab stop, the focus and the tooltip over to its new bars.
    filled(row, m, hadFocus) {
      input.refocus(row, m, hadFocus);
      tooltip.filled(m.id);
    },
  });
  const find = createFind(state, rows);
  const tooltip = createTooltip(state, rows);
  const input = createInput(state, { scale, rows, find, tooltip });
  const miniTip = createMiniTip(root);
  const marks = createMarks(state, scale, miniTip);
  const load = createLoadChart(state, miniTip);

  // "latest": the newest burst or replay, zoomed to and its first row scrolled into view.
  const latestButton = document.querySelector('[data-zoom="latest"]');
  latestButton.addEventListener('click', () => {
    const ids = scale.latest();
    if (!ids.length) return;
    const first = Math.min(...ids.map((id) => state.list.indexOf(id)).filter((i) => i >= 0));
    if (Number.isFinite(first)) rows.scrollToRow(first);
  });

  /** Draw what changed; called once per animation frame. */
  function render(changes) {
    if (changes.all) {
      rows.clear();
      scale.refit();
      find.invalidate();
      input.forgetGone();
      tooltip.forgetGone();
    } else {
      for (const id of changes.messages) {
        const m = model.messages.get(id);
        if (!m) continue;
        scale.grow(m);
        rows.changed(id);
      }
      // Outside callers' rows: drawn and fitted on the same axis as the lab's own.
      for (const id of changes.outside) {
        const m = model.outside.rows.get(id);
        if (!m) continue;
        scale.grow(m);
        rows.changed(id);
      }
      // Only the bins that changed: a long run holds thousands.
      if (changes.load.size || changes.markers) scale.growMeasured(changes.load);
      find.noteChanges(changes);
    }
    find.update({ timed: scale.hasTime() });
    rows.update();
    scale.update();
    marks.render(changes);
    load.update(changes);
    rows.clock(needsClock());
    input.ensureTabStop();
    tooltip.update();
  }

  /** True while anything grows with the clock, so the page keeps drawing frames. */
  function needsClock() {
    return (scale.active() && model.messages.size > 0) || scale.rowsBehind();
  }

  return {
    render,
    needsClock,
    /** Scroll reads and writes, first in a frame while the layout is still clean. */
    settle: () => scale.followRows(),
  };
}
