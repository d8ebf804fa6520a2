//! Finding messages in the timeline: the filter by message id, key prefix and state, the list
//! of rows it picks (`state.list`), the "n of m messages" count, and the notes shown when the
//! lab has no messages yet or none matches.

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
  const countEl = findForm.querySelector('[data-filter-count]');
  const filterSaid = document.querySelector('[data-filter-said]');

  let filter = { id: null, key: '', state: '' };
  let listStale = true;
  /** How many messages the model held when `state.list` was made. */
  let listedOf = 0;
  let sayTimer = 0;

  function passes(m) {
    if (filter.state && m.state !== filter.state) return false;
    if (filter.id != null) return m.id === filter.id;
    return !filter.key || m.key.toLowerCase().startsWith(filter.key);
  }

  function rebuildList() {
    listStale = false;
    listedOf = model.messages.size;
    const list = [];
    for (const m of model.messages.values()) if (passes(m)) list.push(m.id);
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
    filter = { id: id ? Number(id[1]) : null, key: id ? '' : text.toLowerCase(), state: stateSelect.value };
    listStale = true;
    rows.scrollToTop();
    state.requestDraw();
    clearTimeout(sayTimer);
    sayTimer = setTimeout(() => {
      filterSaid.textContent = `${state.list.length} of ${model.messages.size} messages shown.`;
    }, SAY_FILTER_MS);
  }
  findInput.addEventListener('input', readFilter);
  stateSelect.addEventListener('change', readFilter);

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
      if (model.messages.size !== listedOf || (filter.state && changes.messages.size)) listStale = true;
    },
    refresh,
    /** The list for this frame, and the notes for an empty lab or an empty list. */
    update({ timed } = { timed: false }) {
      refresh();
      const empty = model.messages.size === 0;
      // Without messages the axis and the load chart still show what the lab measured (the
      // requests of outside callers); with nothing at all, only the note.
      root.classList.toggle('is-empty', empty && !timed);
      root.classList.toggle('has-no-rows', empty);
      show(emptyEl, empty);
      show(noMatchEl, !empty && state.list.length === 0);
    },
  };
}
