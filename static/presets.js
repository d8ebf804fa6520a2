//! "Try a failure mode": one button per retry anti-pattern, and one for a metastable failure.
//! Each sets the lab up through the same HTTP API as every other control (reset, PUT policy,
//! PUT downstream, POST a burst), with timings small enough to watch, and then says in one
//! sentence what to look for. A follow-up button repeats the run with the fix (or, for the
//! metastable failure, ends it), so the two can be compared on the same timeline.

import { say } from './controls.js';
import { labNow } from './model.js';
import { metastableSentence } from './traffic.js';

/**
 * The presets live in presets.json, read by this page and by the API tests that run each one
 * with a fixed seed and check the figures its sentences name. Each: what it sets (the whole
 * policy, every protection off unless named, so one preset does not inherit the last one's
 * breaker, as the waits and attempts it needs and the named policy preset it applies; then
 * downstream updates in order; then a burst), the sentence shown after it with the claims it
 * makes, its follow-ups (the same shape, without the reset), and, where its sentences speak of
 * another picture than the timeline, `show`: what the story's chapter brings into view.
 */
const PRESETS_URL = '/static/presets.json';

/**
 * The policy presets (no-jitter, full-jitter, budget, breaker-fail-fast, ...): one table, read by
 * this page and by the comparison on the server, so a name means the same policy in both.
 */
const POLICY_PRESETS_URL = '/static/policy-presets.json';
let policyPresets = null;

/**
 * The policy a step sets: its own `policy` (waits, attempts, timeout), with what its named
 * policy `preset` changes written over it. Null when it sets neither.
 */
export async function stepPolicy(step) {
  if (!step.preset) return step.policy ?? null;
  policyPresets ??= fetch(POLICY_PRESETS_URL).then((res) => res.json());
  const preset = (await policyPresets).find((p) => p.name === step.preset);
  if (!preset) throw new Error(`no policy preset "${step.preset}"`);
  return { ...step.policy, ...preset.policy };
}

/**
 * What a preset or a story step sets, in order: the policy, each downstream update, the steady
 * traffic, then the burst. Returns the burst's answer (its `message_ids`), if it sent one.
 */
export async function applySettings(api, step) {
  const policy = await stepPolicy(step);
  if (policy) await api('PUT', '/policy', policy);
  for (const update of step.downstream ?? []) await api('PUT', '/downstream', update);
  if (step.traffic) await api('PUT', '/traffic', step.traffic);
  return step.burst ? api('POST', '/bursts', { count: step.burst }) : null;
}

/**
 * Scrolls the part `selector` names (a chart, a panel) to just under the sticky top bar, however
 * tall the bar has wrapped: in the story the box of what to look for is held at the bottom of
 * the screen, and a chart placed at the top of the room stays clear of it. For `holdMs` after
 * (long enough for a burst's rows to be drawn on a busy machine), the part is held there as the
 * page grows above it (the rows are drawn above the load chart as they arrive), until the person
 * scrolls or presses a key themselves.
 */
export function bringIntoView(selector, holdMs = 6000) {
  const part = selector && document.querySelector(selector);
  if (!part) return;
  const place = (behavior) => {
    const bar = document.querySelector('.topbar')?.getBoundingClientRect().bottom ?? 0;
    const by = part.getBoundingClientRect().top - Math.max(bar, 0) - 8;
    if (Math.abs(by) > 1) window.scrollBy({ top: by, behavior });
  };
  place('smooth');
  const panel = part.closest('section') ?? document.body;
  // The first call is the observer's own first look, not a change: the smooth scroll goes on.
  let first = true;
  const observer = new ResizeObserver(() => {
    if (!first) place('instant');
    first = false;
  });
  const release = () => {
    observer.disconnect();
    for (const type of PERSON_SCROLLS) removeEventListener(type, release);
  };
  for (const type of PERSON_SCROLLS) addEventListener(type, release, { passive: true });
  observer.observe(panel);
  setTimeout(release, holdMs);
}

/** What a person does to scroll, which ends the hold of `bringIntoView`. */
const PERSON_SCROLLS = ['wheel', 'touchstart', 'keydown', 'mousedown'];

/** A button for `preset`: its name, and `what` it does in a few words under it. */
export function presetButton(preset, what) {
  const button = document.createElement('button');
  button.type = 'button';
  button.className = 'preset';
  const title = document.createElement('span');
  title.className = 'preset-name';
  title.textContent = preset.name;
  const words = document.createElement('span');
  words.className = 'preset-what';
  words.textContent = what;
  button.append(title, words);
  return button;
}

/**
 * The preset buttons in `root` and the "what to look for" box `look`; `controls` gives the API
 * (`api`) and the busy-while-calling wrapper (`act`); `claims` shows what a step's run bore out.
 */
export function createPresets(root, look, controls, model, claims) {
  const { api, act } = controls;
  const live = look.querySelector('[data-look-live]');
  /** The running preset's delayed trigger, and when (lab ms) the preset began. */
  let trigger = 0;
  let began = 0;
  const drawer = root.closest('details');
  const name = look.querySelector('[data-look-name]');
  const text = look.querySelector('[data-look-text]');
  const actions = look.querySelector('[data-look-actions]');
  const ready = build();
  ready.catch((err) => say(`Could not load the failure modes: ${err.message}`, 'error'));

  /** The buttons, one per preset in presets.json, and one per protection people run. */
  async function build() {
    const presets = await fetch(PRESETS_URL).then((res) => res.json());
    for (const preset of presets) {
      const button = presetButton(preset, `${preset.what}${preset.traffic ? '' : `; a burst of ${preset.burst}`}`);
      button.dataset.preset = preset.id;
      button.addEventListener('click', () => start(button, preset));
      root.append(button);
    }
    await buildProtections();
    return presets;
  }

  /**
   * The protections people run (the policy presets that follow a library or a paper and hold a
   * protection), each a button that puts it on this lab's policy and leaves the rest as it is,
   * with its line and its source; what it does is then for the person's own traffic to show.
   */
  async function buildProtections() {
    const shelf = document.querySelector('[data-protection-presets]');
    if (!shelf) return;
    policyPresets ??= fetch(POLICY_PRESETS_URL).then((res) => res.json());
    const protections = (await policyPresets).filter((p) => p.source && p.policy.protections?.length);
    for (const preset of protections) {
      const button = presetButton({ name: preset.name }, preset.what);
      button.dataset.protectionPreset = preset.name;
      button.addEventListener('click', () =>
        act(button, `Could not apply ${preset.name}`, async () => {
          await api('PUT', '/policy', preset.policy);
          delete look.dataset.step;
          delete look.dataset.preset;
          look.dataset.messages = '';
          claims.show([], {});
          name.textContent = `${preset.name}:`;
          text.textContent = `${preset.what}. It is on this lab's policy now, with the rest of the policy as it was; send a burst or steady traffic and watch its row in the protection lane.`;
          const source = document.createElement('a');
          source.href = preset.source.url;
          source.textContent = `source: ${preset.source.title}`;
          source.rel = 'noopener';
          actions.replaceChildren(source);
          look.hidden = false;
          say(`${preset.name} is on the policy.`);
        }),
      );
      shelf.append(button);
    }
  }

  look.querySelector('[data-look-close]').addEventListener('click', () => {
    look.hidden = true;
  });

  /**
   * Apply one step: the policy, then each downstream update in order, then the steady traffic
   * or the burst; a `later` downstream update (a trigger) follows after its delay.
   */
  async function run(step) {
    const sent = await applySettings(api, step);
    if (step.later) {
      trigger = setTimeout(() => {
        trigger = 0;
        api('PUT', '/downstream', step.later.downstream).catch((err) => say(`Could not start the trigger: ${err.message}`, 'error'));
      }, step.later.after_ms);
    }
    return sent?.message_ids ?? [];
  }

  function start(button, preset) {
    clearTimeout(trigger);
    trigger = 0;
    return act(button, `Could not set up "${preset.name}"`, async () => {
      // A chapter starts from a new lab's settings, so nothing another chapter or its ending
      // turned on (a server defence, a protection, a queue) carries into this one.
      await api('POST', '/reset', { settings: 'defaults' });
      began = labNow(model);
      const ids = await run(preset);
      // Out of the way, so the timeline and its load chart come into view.
      if (drawer) drawer.open = false;
      show(preset.name, preset.look, preset, ids);
      // The pressed button went away with the drawer: the keyboard goes on from what to look
      // for, with the follow-ups right after it.
      look.focus();
      // What to look for is said once, in its box (a polite live region, so it is read out
      // too): above the timeline with every control, held at the bottom of the screen in the
      // story. The status line only confirms what was done, and says where the box is.
      const sent = preset.traffic ? `steady traffic of ${preset.traffic.rate_per_s} messages a second` : `sent ${preset.burst} messages`;
      const where = getComputedStyle(look).position === 'fixed' ? 'at the bottom of the screen' : 'above the timeline';
      say(`${preset.name}: ${sent}. What to look for is ${where}.`);
    });
  }

  /** What to look for after `preset`, whose burst sent messages `ids`, and its claims. */
  function show(title, sentence, preset, ids) {
    delete look.dataset.step;
    look.dataset.messages = ids.join(',');
    claims.show(preset.claims ?? [], { messages: ids });
    /** The messages of the run before each follow-up, for the claims that compare. */
    let before = ids;
    name.textContent = `${title}:`;
    text.textContent = sentence;
    look.dataset.preset = preset.id;
    actions.replaceChildren(
      ...preset.then.map((step, i) => {
        const button = document.createElement('button');
        button.type = 'button';
        button.className = 'secondary small';
        button.dataset.presetStep = `${preset.id}/${i + 1}`;
        button.textContent = step.label;
        button.addEventListener('click', () =>
          act(button, `Could not ${step.label}`, async () => {
            const from = labNow(model);
            const sent = await run(step);
            text.textContent = step.look;
            // A follow-up without a burst speaks of the seconds after it, under the traffic.
            if (sent.length) {
              claims.show(step.claims ?? [], { messages: sent, before });
              before = sent;
              look.dataset.messages = sent.join(',');
            } else claims.show(step.claims ?? [], { from_ms: Math.floor(from) });
            name.textContent = `${title}, ${step.label}:`;
            // The follow-up's own rows, not the first run's: once its messages are drawn, the
            // timeline zooms to the newest burst and scrolls its first row into view.
            if (sent.length) showLatest(sent);
            // In the story, back to the part the chapter's sentences name, which the box at the
            // bottom must not cover.
            if (getComputedStyle(look).position === 'fixed') bringIntoView(preset.show ?? '#timeline-panel');
            const did = step.burst ? `sent ${step.burst} more messages` : 'policy changed';
            say(`${title}, ${step.label}: ${did}.`);
          }),
        );
        return button;
      }),
    );
    look.hidden = false;
    tick();
  }

  /**
   * Once every message of `ids` is in the model (at most 3 s), shows the newest burst: the
   * timeline zooms to it and scrolls its first row to the top. Asked again over the next 2 s,
   * as the rows it scrolls to are still being sized and drawn, unless the person scrolls or
   * presses a key meanwhile.
   */
  function showLatest(ids) {
    const latest = () => document.querySelector('[data-zoom="latest"]')?.click();
    const until = performance.now() + 3000;
    let personMoved = false;
    const moved = () => {
      personMoved = true;
    };
    for (const type of PERSON_SCROLLS) addEventListener(type, moved, { passive: true, once: true });
    const again = (after) =>
      setTimeout(() => {
        if (!personMoved) latest();
      }, after);
    const tick = () => {
      if (ids.every((id) => model.messages.has(id))) {
        latest();
        for (const after of [400, 1000, 2000]) again(after);
        setTimeout(() => {
          for (const type of PERSON_SCROLLS) removeEventListener(type, moved);
        }, 2100);
      } else if (performance.now() < until) setTimeout(tick, 50);
    };
    tick();
  }

  /** What the metastable preset says live, from the load bins as they come in. */
  function tick() {
    const text = !look.hidden && look.dataset.preset === 'metastable' ? metastableSentence(model, labNow(model), began) : null;
    live.hidden = !text;
    if (text && live.textContent !== text) live.textContent = text;
  }

  /** The presets once loaded, and a way to start one from elsewhere (the story's chapters). */
  return {
    tick,
    ready,
    start: async (id, button) => start(button, (await ready).find((preset) => preset.id === id)),
  };
}
