//! Finding messages in the timeline: the filter by message id, key prefix and state, the list
//! of rows it picks (`state.list`), the "n of m messages" count, and the notes shown when the
//! lab has no messages yet or none matches. The source filter picks the lab's own client, the
//! outside callers, or one of them (outside.js); its list of callers grows as they appear.

import { sourcePasses } from './outside.js';
import { show } from './timeline-rows.js';

/** Wait this long after the last keystroke before telling screen readers the count. */
const SAY_FILTER_MS = 700;

/** Writes `state.list`: ids of the messages that pass the filter, in creation order. */
export function createFind(state, rows) {
  const { root, model } = state;
  const emptyEl = root.querySelector('.tl-empty');
  const noMatchEl = root.querySelector('.tl-nomatch');
  const findForm = document.querySelector('[data-find-form]');
  const findInput = findForm.querySelector('[data-find]');
  const stateSelect = findForm.querySelector('[data-state-filter]');
  const sourceSelect = findForm.querySelector('[data-source-filter]');
  const callersGroup = sourceSelect.querySelector('[data-source-callers]');
  const countEl = findForm.querySelector('[data-filter-count]');
  const filterSaid = document.querySelector('[data-filter-said]');

  let filter = { id: null, key: '', state: '', source: '' };
  let listStale = true;
  /** How many rows (the lab's messages and outside ones) the model held when `state.list` was made. */
  let listedOf = 0;
  /** How many outside callers the source filter offers. */
  let callersOffered = 0;
  let sayTimer = 0;

  function passes(m) {
    if (!sourcePasses(filter.source, m)) return false;
    if (filter.state && m.state !== filter.state) return false;
    if (filter.id != null) return m.id === filter.id;
    return !filter.key || m.key.toLowerCase().startsWith(filter.key);
  }

  function rebuildList() {
    listStale = false;
    listedOf = rowCount();
    const list = [];
    // Both kinds are in time order already: merge them by when each began.
    const outside = [...model.outside.rows.values()];
    let o = 0;
    for (const m of model.messages.values()) {
      for (; o < outside.length && outside[o].created_ms < m.created_ms; o++) if (passes(outside[o])) list.push(outside[o].id);
      if (passes(m)) list.push(m.id);
    }
    for (; o < outside.length; o++) if (passes(outside[o])) list.push(outside[o].id);
    state.list = list;
    rows.listChanged();
    const text = `${list.length} of ${listedOf} message${listedOf === 1 ? '' : 's'}`;
    // Written only when they change: every write restyles.
    if (countEl.textContent === text) return;
    countEl.textContent = text;
    countEl.dataset.shown = String(list.length);
    countEl.dataset.total = String(listedOf);
  }

  function readFilter() {
    const text = findInput.value.trim();
    // "12" or "#12" is a message id; anything else is the start of an idempotency key.
    const id = /^#?(\d+)$/.exec(text);
    filter = {
      id: id ? Number(id[1]) : null,
      key: id ? '' : text.toLowerCase(),
      state: stateSelect.value,
      source: sourceSelect.value,
    };
    listStale = true;
    rows.scrollToTop();
    state.requestDraw();
    clearTimeout(sayTimer);
    sayTimer = setTimeout(() => {
      filterSaid.textContent = `${state.list.length} of ${rowCount()} messages shown.`;
    }, SAY_FILTER_MS);
  }
  findInput.addEventListener('input', readFilter);
  stateSelect.addEventListener('change', readFilter);
  sourceSelect.addEventListener('change', readFilter);

  function rowCount() {
    return model.messages.size + model.outside.rows.size;
  }

  /** Offer each outside caller in the source filter, once, as it first appears. */
  function offerCallers() {
    const callers = model.outside.callers;
    if (callers.length === callersOffered) return;
    if (callers.length < callersOffered) {
      // A new snapshot with fewer callers (a reset): offer them afresh.
      callersGroup.replaceChildren();
      callersOffered = 0;
    }
    for (const name of callers.slice(callersOffered)) {
      const option = document.createElement('option');
      option.value = `caller:${name}`;
      option.textContent = name;
      callersGroup.append(option);
    }
    callersOffered = callers.length;
    callersGroup.hidden = callersOffered === 0;
    // The caller picked is gone (a reset): back to both.
    if (sourceSelect.value !== filter.source) {
      sourceSelect.value = '';
      readFilter();
    }
  }

  /** Make the list again if anything it depends on changed. */
  function refresh() {
    if (listStale) rebuildList();
  }

  return {
    /** Every message may have changed (a new snapshot): make the list again. */
    invalidate() {
      listStale = true;
    },
    /** New messages join the list; with a state filter, a change of state may move a row. */
    noteChanges(changes) {
      const moved = changes.messages.size || changes.outside.size;
      if (rowCount() !== listedOf || (filter.state && moved)) listStale = true;
    },
    refresh,
    /** The list for this frame, and the notes for an empty lab or an empty list. */
    update({ timed } = { timed: false }) {
      offerCallers();
      refresh();
      const empty = rowCount() === 0;
      // Without messages the axis and the load chart still show what the lab measured (the
      // requests of outside callers); with nothing at all, only the note.
      root.classList.toggle('is-empty', empty && !timed);
      root.classList.toggle('has-no-rows', empty);
      show(emptyEl, empty);
      show(noMatchEl, !empty && state.list.length === 0);
    },
  };
}
