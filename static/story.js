//! The story first: a first visit leads with the seed's story as steps, one click each. A step
//! sets the lab up through the same API as every other control, brings into view the part of
//! the page it is about, and says what to look for there, with each claim it makes checked by
//! the server on this run ("✔ 8 of 8 messages were dead-lettered", or "✘ ..."). The full
//! console of controls is one click away ("show every control"), and the choice is remembered.

import { say } from './controls.js';
import { applySettings, bringIntoView, presetButton } from './presets.js';

const STORY_URL = '/static/story.json';
/** Where the choice of view is kept between visits. */
const VIEW_KEY = 'retrylab.view';

/** The stored choice: 'console' once a person asked for every control, else the story. */
function storedView() {
  try {
    return localStorage.getItem(VIEW_KEY) === 'console' ? 'console' : 'story';
  } catch {
    return 'story';
  }
}

/**
 * The view toggle, the steps in `root` (the story section), and the "what to look for" box
 * `look` they share with the presets. `controls` gives `api` and `act`; `presets` starts a
 * chapter; `claims` shows a step's claims; `model` is the lab as the page knows it.
 */
export function createStory(root, look, controls, presets, claims, model) {
  const { api, act } = controls;
  const main = document.getElementById('lab');
  const toggle = document.querySelector('[data-view-toggle]');
  const goodput = document.querySelector('[data-goodput]');
  const list = root.querySelector('[data-story-steps]');
  const name = look.querySelector('[data-look-name]');
  const text = look.querySelector('[data-look-text]');
  const actions = look.querySelector('[data-look-actions]');
  /** The step on show and the messages it speaks of: { step, ids } or null. */
  let current = null;
  let steps = [];

  setView(storedView());
  toggle.addEventListener('click', () => {
    const view = main.dataset.view === 'story' ? 'console' : 'story';
    setView(view);
    try {
      localStorage.setItem(VIEW_KEY, view);
    } catch {
      // No storage (a private window that refuses it): the choice lasts for this visit.
    }
  });

  function setView(view) {
    main.dataset.view = view;
    // The goodput chart sits by the traffic buttons in the story, below the timeline in the
    // console (whose top keeps the switches, the counts and the timeline on one screen).
    document.querySelector(`[data-goodput-slot="${view}"]`).append(goodput);
    toggle.setAttribute('aria-pressed', String(view === 'console'));
  }

  build().catch((err) => say(`Could not load the story: ${err.message}`, 'error'));

  async function build() {
    steps = await fetch(STORY_URL).then((res) => res.json());
    list.replaceChildren(
      ...steps.map((step, i) => {
        const item = document.createElement('li');
        const button = document.createElement('button');
        button.type = 'button';
        button.dataset.storyStep = step.id;
        button.textContent = `${i + 1}. ${step.name}`;
        button.addEventListener('click', () => run(button, i));
        const what = document.createElement('span');
        what.className = 'story-what';
        what.textContent = step.what;
        item.append(button, ' ', what);
        return item;
      }),
    );
    const chapters = root.querySelector('[data-story-presets]');
    for (const preset of await presets.ready) {
      const button = presetButton(preset, preset.what);
      button.dataset.storyPreset = preset.id;
      // A chapter speaks of the timeline and its load chart, as a step does, unless it names
      // the picture its sentences are about (the metastable failure's goodput chart).
      button.addEventListener('click', async () => {
        await presets.start(preset.id, button);
        bringIntoView(preset.show ?? '#timeline-panel');
      });
      chapters.append(button);
    }
  }

  /** Resolves once an attempt is on the wire (or after 3 s): the moment to crash the client. */
  function onTheWire() {
    return new Promise((resolve) => {
      const until = performance.now() + 3000;
      const check = () => {
        if ((model.counters?.in_flight ?? 0) > 0 || performance.now() > until) resolve();
        else setTimeout(check, 20);
      };
      check();
    });
  }

  /** Step `i`: its settings, its burst, replay or crash, then what to look for. */
  function run(button, i) {
    const step = steps[i];
    return act(button, `Could not run "${step.name}"`, async () => {
      if (step.reset) await api('POST', '/reset', { settings: 'defaults' });
      const sent = await applySettings(api, step);
      let ids = sent?.message_ids ?? null;
      if (step.crash) {
        await onTheWire();
        await api('POST', '/crash-client');
      }
      if (step.replay) ids = (await api('POST', '/dead-letters/replay', {}))?.message_ids ?? [];
      // A step that sends nothing speaks of the messages the step before it sent.
      current = { step, ids: ids ?? current?.ids ?? [] };
      look.dataset.messages = current.ids.join(',');
      show(step, i);
      bringIntoView(step.show);
      // The pressed button is gone (the next step's replaced it) or scrolled away: the keyboard
      // goes on from what to look for, with the next step one Tab after it.
      look.focus({ preventScroll: true });
      // No status line: what to look for, at the bottom, is read out (a polite live region),
      // and a line at the top would cover the rows the step brought into view.
    });
  }

  function show(step, i) {
    delete look.dataset.preset;
    look.dataset.step = step.id;
    name.textContent = `${i + 1}. ${step.name}:`;
    text.textContent = step.look;
    const next = steps[i + 1];
    actions.replaceChildren();
    if (next) {
      const button = document.createElement('button');
      button.type = 'button';
      button.className = 'small';
      button.dataset.storyNext = next.id;
      button.textContent = `next: ${i + 2}. ${next.name}`;
      button.addEventListener('click', () => run(button, i + 1));
      actions.append(button);
    }
    look.hidden = false;
    claims.show(step.claims, { messages: current.ids });
  }

}
