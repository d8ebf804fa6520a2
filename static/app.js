//! Entry point of the lab page: builds the model and the views, connects the event stream,
//! and draws at most once per animation frame, however many events arrived in between.
//! It also tells screen-reader users how the counts moved, in a summary every few seconds
//! rather than on each of the thousands of changes a burst brings.

import { breakerHistory, emptyModel, labNow, mergeChanges, noChanges } from './model.js';
import { connect } from './stream.js';
import { createControls, say } from './controls.js';
import { createTimeline } from './timeline.js';
import { createBackoffChart } from './backoff-chart.js';
import { createDeadLetters } from './dead-letters.js';
import { createActions } from './dlq-actions.js';
import { createDetail } from './dlq-detail.js';
import { createTrace } from './trace.js';
import { createPresets } from './presets.js';
import { createStory } from './story.js';
import { createClaims } from './claims.js';
import { createLegend } from './legend.js';
import { createGoodputChart } from './goodput-chart.js';
import { createProtectionLane } from './protection-lane.js';
import { createDefenceLane } from './defence-lane.js';
import { createCallers } from './callers.js';
import { createSnippets } from './snippets.js';
import { createTraffic } from './traffic.js';

const main = document.getElementById('lab');
const lab = main.dataset.lab;
const model = emptyModel();

/** What changed since the last frame, merged from every event that arrived in between. */
let pending = noChanges();
let frame = 0;

function schedule() {
  frame ||= requestAnimationFrame(draw);
}

// The connection pill, which the stream sets as soon as it starts.
const pill = document.getElementById('conn');
const retryButton = document.getElementById('conn-retry');
let lastState = '';

// Ask for the snapshot and the event stream before building the views: a big lab's snapshot
// takes the server a while to put together, and the views can be built meanwhile. Nothing
// arrives from them before this script has run to the end.
const stream = connect(lab, model, {
  onChanges(changes) {
    mergeChanges(pending, changes);
    schedule();
  },
  onEvent: (id, event) => trace.event(id, event),
  onState: showState,
});

const controls = createControls(model, lab);
const timeline = createTimeline(document.getElementById('timeline'), model, schedule);
const chart = createBackoffChart(document.getElementById('backoff'), document.getElementById('backoff-caption'), model, schedule);
const deadPanel = document.getElementById('dead-letters');
let detail = null;
let addressed = false;
const deadLetters = createDeadLetters(deadPanel, model, {
  replayOne: (button, id, confirmQuarantined) => controls.replay(button, [id], confirmQuarantined),
  openDetail: (id) => detail.open(id),
});
createActions(deadPanel, model, lab, deadLetters, controls);
detail = createDetail(deadPanel, model, controls, deadLetters);
const trace = createTrace(document.getElementById('trace'), model, schedule);
const traffic = createTraffic(model, controls);
const claims = createClaims(document.querySelector('[data-claims]'), controls.api);
const presets = createPresets(document.querySelector('[data-presets]'), document.querySelector('[data-look]'), controls, model, claims);
createStory(document.getElementById('story'), document.querySelector('[data-look]'), controls, presets, claims, model);
const goodput = createGoodputChart(document.querySelector('[data-goodput]'));
const protectionLane = createProtectionLane(document.getElementById('protection-lane'));
const defenceLane = createDefenceLane(document.getElementById('defence-lane'));
const legend = createLegend(
  document.getElementById('timeline'),
  [...document.querySelectorAll('#timeline-panel [data-legend]')],
  document.querySelector('[data-legend-head]'),
);
// The live figures' window moves on with the lab clock, as do what a preset says live and the
// goodput chart (twice a second is often enough for figures per second).
setInterval(() => {
  traffic.tick();
  presets.tick();
  claims.tick();
  legend.tick();
  if (model.counters) goodput.render([...model.load.bins.values()], model.load.binMs, labNow(model));
  // The circuit breaker is known by its changes, not by the bins: it comes as a history.
  const histories = [breakerHistory(model)].filter(Boolean);
  if (model.counters) protectionLane.render(model.load.bins.values(), labNow(model), histories);
  if (model.counters) defenceLane.render(model.load.bins.values(), labNow(model));
}, 500);
const callers = createCallers(document.getElementById('callers'), lab, model);
createSnippets(
  document.querySelector('[data-snippets]'),
  document.querySelector('[data-snippets-toggle]'),
  document.querySelector('[data-endpoint-url]').textContent,
);

const counterEls = [...document.querySelectorAll('[data-counter]')];
const appliedTwice = document.getElementById('applied-twice');

function drawCounters() {
  const counters = model.counters;
  if (!counters) return;
  for (const el of counterEls) {
    const value = counters[el.dataset.counter];
    // Only touch text that changed: every write costs layout.
    if (value != null && el.textContent !== String(value)) el.textContent = String(value);
  }
  appliedTwice.classList.toggle('alarm', counters.applied_twice > 0);
}

// ---- the counts, told politely ----------------------------------------------------------------

/** Wait this long after a change before telling, so one action is told once... */
const SETTLE_MS = 1500;
/** ...and leave at least this long between two summaries, however busy the lab is. */
const SUMMARY_EVERY_MS = 5000;
const countsSaid = document.getElementById('counts-said');
let summaryTimer = 0;
let lastSummary = -Infinity;

function summariseLater() {
  if (summaryTimer) return;
  const wait = Math.max(SETTLE_MS, lastSummary + SUMMARY_EVERY_MS - performance.now());
  summaryTimer = setTimeout(summarise, wait);
}

function summarise() {
  summaryTimer = 0;
  lastSummary = performance.now();
  const c = model.counters;
  if (!c) return;
  const text = `${c.in_flight + c.queued} in flight or queued, ${c.backing_off} backing off, `
    + `${c.delivered} delivered, ${c.dead_letter} dead letter${c.dead_letter === 1 ? '' : 's'}. `
    + `Ledger: ${c.requests} requests, ${c.applied} applied, ${c.applied_twice} applied twice.`;
  if (countsSaid.textContent !== text) countsSaid.textContent = text;
}

// ---- one draw per frame ----------------------------------------------------------------------

/** A frame whose own drawing took longer than this has no room for the views that can wait. */
const ROOM_MS = 5;

function draw() {
  frame = 0;
  const start = performance.now();
  // Scroll offsets first, while the page is still laid out from the last frame: set after
  // any write, each would make the browser restyle and lay out the page at once.
  timeline.settle();
  trace.settle();
  const changes = pending;
  pending = noChanges();
  if (changes.all || changes.counters) drawCounters();
  // A snapshot is where the page starts from; only changes after it are worth telling.
  if (changes.counters && !changes.all) summariseLater();
  controls.sync(changes);
  traffic.update(changes);
  timeline.render(changes);
  let behind = deadLetters.render(changes);
  // An address that names a dead letter (#dead-letter-12) opens it once the lab is known.
  if (changes.all && !addressed) {
    addressed = true;
    detail.fromAddress();
  }
  chart.render(changes);
  callers.render(changes);
  // The chart and the trace can wait: they take turns, one per frame at most, in frames with
  // room to spare. The trace goes last: it may set its scroll offset, which lays the page out.
  let room = performance.now() - start < ROOM_MS;
  for (const view of [chart, trace]) {
    const result = view.flush(room);
    if (result === 'drew') room = false;
    behind ||= result !== 'idle';
  }
  // Running attempts grow with the lab clock, so keep drawing while anything is in motion.
  if (timeline.needsClock() || behind) schedule();
}

// ---- the connection ---------------------------------------------------------------------------

function showState(state, detail = {}) {
  pill.dataset.state = state;
  retryButton.hidden = state !== 'offline';
  switch (state) {
    case 'connecting':
      pill.textContent = 'connecting…';
      break;
    case 'live':
      pill.textContent = 'live';
      if (lastState && lastState !== 'live' && lastState !== 'connecting') trace.note('connection back');
      break;
    case 'reconnecting':
      pill.textContent = 'reconnecting…';
      if (lastState === 'live') trace.note('connection lost; reconnecting');
      break;
    case 'offline': {
      const seconds = (detail.waitMs / 1000).toFixed(1);
      pill.textContent = `offline · next try in ${seconds} s`;
      trace.note(`${detail.reason}; try ${detail.attempt} in ${seconds} s (exponential backoff, equal jitter)`);
      break;
    }
    case 'gone':
      pill.textContent = 'lab gone';
      document.getElementById('gone').hidden = false;
      controls.disable();
      say('This lab no longer exists on the server. Start a new lab with the link above.', 'error');
      trace.note('the server no longer knows this lab; stopped reconnecting');
      break;
  }
  lastState = state;
  schedule();
}

retryButton.addEventListener('click', stream.retryNow);
