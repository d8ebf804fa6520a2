//! A legend of what is there: each key item names, in `data-key`, what it stands for in the
//! timeline (a selector), and shows only while such a mark is drawn; "show the full key" shows
//! every item, and says so on the button. Checked twice a second, not in every frame.

/** The legends `lists` (their items carry `data-key`) for the marks in `timeline`. */
export function createLegend(timeline, lists, head) {
  const items = lists.flatMap((list) => [...list.querySelectorAll('[data-key]')]);
  const fullButton = head.querySelector('[data-legend-full]');
  const none = head.querySelector('[data-legend-none]');
  let full = false;

  fullButton.addEventListener('click', () => {
    full = !full;
    fullButton.setAttribute('aria-pressed', String(full));
    fullButton.textContent = full ? 'show only what is drawn' : 'show the full key';
    tick();
  });

  function tick() {
    let shown = 0;
    for (const item of items) {
      const drawn = full || timeline.querySelector(item.dataset.key) != null;
      if (item.hidden === drawn) item.hidden = !drawn;
      if (drawn) shown += 1;
    }
    for (const list of lists) {
      const empty = !list.querySelector('[data-key]:not([hidden])');
      if (list.hidden !== empty) list.hidden = empty;
    }
    none.hidden = shown > 0;
  }

  tick();
  return { tick };
}
