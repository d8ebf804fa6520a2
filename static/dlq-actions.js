//! What a person does with the dead letters: replay, replay at a rate (a redrive, with its
//! progress and a cancel), quarantine and back, delete, export; on the letters picked in the
//! table, or on everything the filter matches. Before it runs, an action on more than one
//! letter says how many it takes; a replay shows the server's dry run first (how many would
//! go, how many quarantined stay, the endpoint's state and a warning when it is failing).

import { emptyFilter, isEmpty, toQuery, toServer } from './dlq-filter.js';
import { say } from './controls.js';

/** `table` is the dead-letter table (its scope); `controls` calls the API. */
export function createActions(panel, model, lab, table, controls) {
  const scopeEl = panel.querySelector('[data-dlq-scope]');
  const rateInput = panel.querySelector('[data-dlq-rate]');
  const exportLink = panel.querySelector('[data-dlq-export]');
  const confirmBox = panel.querySelector('[data-dlq-confirm]');
  const confirmText = panel.querySelector('[data-dlq-confirm-text]');
  const warningEl = panel.querySelector('[data-dlq-warning]');
  const goButton = panel.querySelector('[data-dlq-go]');
  const cancelButton = panel.querySelector('[data-dlq-cancel]');
  const redriveEl = panel.querySelector('[data-dlq-redrive]');
  const redriveText = panel.querySelector('[data-dlq-redrive-text]');
  const redriveBar = panel.querySelector('[data-dlq-redrive-bar]');
  const redriveCancel = panel.querySelector('[data-dlq-redrive-cancel]');
  const actionButtons = [...panel.querySelectorAll('[data-dlq-action]')];
  /** What the confirm button runs, set when the box opens. */
  let pending = null;

  const plural = (n, word) => `${n} ${word}${n === 1 ? '' : 's'}`;

  /** The body naming the letters: `{ids}` for the picked, `{filter}` for those matching. */
  function target(scope) {
    return scope.ids ? { ids: scope.ids } : { filter: toServer(scope.filter) };
  }

  function describe(scope) {
    if (scope.ids) return `${plural(scope.count, 'picked letter')}`;
    return isEmpty(scope.filter) ? `all ${plural(scope.count, 'letter')}` : `the ${plural(scope.count, 'letter')} the filter matches`;
  }

  function sync() {
    const scope = table.scope();
    const text = scope.count === 0 ? 'Nothing to act on.' : `Acts on ${describe(scope)}:`;
    if (scopeEl.textContent !== text) scopeEl.textContent = text;
    for (const b of actionButtons) b.disabled = scope.count === 0;
    const query = scope.ids ? '' : toQuery(scope.filter);
    exportLink.href = `/api/labs/${encodeURIComponent(lab)}/dead-letters?format=ndjson${query ? `&${query}` : ''}`;
    exportLink.hidden = !!scope.ids || scope.count === 0;
    const r = model.redrive;
    redriveEl.hidden = !r;
    if (r) {
      const text = `Redrive: ${r.sent} of ${r.total} sent, ${+r.rate_per_s.toFixed(2)} a second.`;
      if (redriveText.textContent !== text) redriveText.textContent = text;
      redriveBar.max = r.total;
      redriveBar.value = r.sent;
    }
  }

  const actionsRow = panel.querySelector('[data-dlq-actions]');

  /**
   * Asks before `run`, next to the `button` that asked: below the row of actions for theirs,
   * right after the button itself for a "replay all" (by the traffic buttons, or the queue's
   * head), so the page does not jump away from the timeline the replay lands on.
   */
  function ask(button, text, warning, goLabel, run) {
    if (actionsRow.contains(button)) actionsRow.after(confirmBox);
    else button.after(confirmBox);
    confirmText.textContent = text;
    warningEl.textContent = warning ?? '';
    warningEl.hidden = !warning;
    goButton.textContent = goLabel;
    pending = run;
    confirmBox.hidden = false;
    goButton.focus({ preventScroll: true });
    confirmBox.scrollIntoView({ block: 'nearest' });
  }

  function close() {
    confirmBox.hidden = true;
    pending = null;
  }

  goButton.addEventListener('click', () => {
    const run = pending;
    close();
    if (run) run();
  });
  cancelButton.addEventListener('click', close);

  /** A replay (at `rate` a second, or at once): one letter goes; more show the dry run first. */
  function replay(button, scope, rate) {
    const body = target(scope);
    if (rate != null) body.rate_per_s = rate;
    if (scope.count === 1 && rate == null) return send(button, body);
    controls.act(button, 'Could not check the replay', async () => {
      const dry = await controls.api('POST', '/dead-letters/replay', { ...body, dry_run: true });
      const skipped = dry.quarantined_skipped
        ? ` ${plural(dry.quarantined_skipped, 'quarantined letter')} would stay.` : '';
      const pace = rate != null ? ` at ${rate} a second (about ${Math.ceil(dry.count / rate)} s)` : ' at once';
      const text = `Dry run: ${plural(dry.count, 'letter')} would be replayed${pace}.${skipped} `
        + `The downstream is ${dry.mode}; the breaker is ${dry.breaker.replace('_', ' ')}.`;
      if (dry.count === 0) {
        say(`Nothing to replay.${skipped}`);
        return;
      }
      ask(button, text, dry.warning, `replay ${plural(dry.count, 'letter')}`, () => send(button, body));
    });
  }

  function send(button, body) {
    return controls.act(button, 'Could not replay', async () => {
      const res = await controls.api('POST', '/dead-letters/replay', body);
      const n = res?.message_ids?.length ?? 0;
      if (res?.redrive) say(`Redriving ${plural(n, 'dead letter')} at ${res.redrive.rate_per_s} a second.`);
      else if (n > 0) say(`Replaying ${plural(n, 'dead letter')} with ${n === 1 ? 'its' : 'their'} original key${n === 1 ? '' : 's'}.`);
      else say('Nothing was replayed.');
    });
  }

  function confirmThen(button, scope, verb, words, run) {
    const text = `${verb} ${describe(scope)}?${words ? ` ${words}` : ''}`;
    if (scope.count === 1) return run();
    ask(button, text, null, `${verb.toLowerCase()} ${plural(scope.count, 'letter')}`, run);
  }

  for (const button of actionButtons) {
    button.addEventListener('click', () => {
      const scope = table.scope();
      if (scope.count === 0) return;
      switch (button.dataset.dlqAction) {
        case 'replay':
          return replay(button, scope, null);
        case 'redrive': {
          const rate = Number(rateInput.value);
          if (!(rate > 0)) return say('The rate must be above 0 a second.', 'error');
          return replay(button, scope, rate);
        }
        case 'delete':
          // The server deletes by a filter only one that narrows, and only as many as confirmed.
          if (!scope.ids && isEmpty(scope.filter)) {
            return say('To delete, pick letters or narrow the filter; reset empties the whole lab.', 'error');
          }
          return confirmThen(button, scope, 'Delete', 'Their messages go too; this cannot be undone.', () =>
            controls.act(button, 'Could not delete', async () => {
              const body = scope.ids ? target(scope) : { ...target(scope), expected: scope.count };
              const res = await controls.api('POST', '/dead-letters/delete', body);
              say(`Deleted ${plural(res.deleted.length, 'dead letter')}.`);
            }));
        case 'quarantine':
        case 'release': {
          const into = button.dataset.dlqAction === 'quarantine';
          const verb = into ? 'Quarantine' : 'Take out of quarantine';
          return confirmThen(button, scope, verb, null, () =>
            controls.act(button, 'Could not move them', async () => {
              const res = await controls.api('POST', '/dead-letters/quarantine', { ...target(scope), quarantined: into });
              say(`${plural(res.changed.length, 'dead letter')} ${into ? 'quarantined' : 'out of quarantine'}.`);
            }));
        }
      }
    });
  }

  // "Replay all" (here and by the send buttons) goes through the dry run too.
  for (const button of document.querySelectorAll('[data-replay-all]')) {
    button.addEventListener('click', () => {
      const count = [...model.deadLetters.values()].filter((d) => !d.quarantined).length;
      if (count === 0) return say('Nothing to replay: no dead letter outside quarantine. Replay quarantined ones one by one, after finding the cause.');
      replay(button, { filter: emptyFilter(), count }, null);
    });
  }

  redriveCancel.addEventListener('click', () =>
    controls.act(redriveCancel, 'Could not cancel the redrive', async () => {
      const r = await controls.api('POST', '/dead-letters/redrive/cancel');
      say(`Redrive cancelled after ${r.sent} of ${r.total}; the rest stay in the queue.`);
    }));

  table.changed(sync);
  return { sync };
}
