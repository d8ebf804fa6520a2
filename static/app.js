//! Entry point of the lab page: builds the model and the views, connects the event stream,
//! and draws at most once per animation frame, however many events arrived in between.

import { emptyModel, mergeChanges, noChanges } from './model.js';
import { connect } from './stream.js';
import { createControls, say } from './controls.js';
import { createTimeline } from './timeline.js';
import { createBackoffChart } from './backoff-chart.js';
import { createDeadLetters } from './dead-letters.js';
import { createTrace } from './trace.js';

const main = document.getElementById('lab');
const lab = main.dataset.lab;
const model = emptyModel();

const controls = createControls(model);
const timeline = createTimeline(document.getElementById('timeline'), model);
const chart = createBackoffChart(document.getElementById('backoff'), document.getElementById('backoff-caption'), model);
const deadLetters = createDeadLetters(document.getElementById('dead-body'), document.getElementById('dead-empty'), model);
const trace = createTrace(document.getElementById('trace'), model);

const counterEls = [...document.querySelectorAll('[data-counter]')];
const appliedTwice = document.getElementById('applied-twice');

function drawCounters() {
  const counters = model.counters;
  if (!counters) return;
  for (const el of counterEls) {
    const value = counters[el.dataset.counter];
    // Only touch text that changed, so the live region announces real changes only.
    if (value != null && el.textContent !== String(value)) el.textContent = String(value);
  }
  appliedTwice.classList.toggle('alarm', counters.applied_twice > 0);
}

// ---- one draw per frame ----------------------------------------------------------------------

let pending = noChanges();
let frame = 0;

function schedule() {
  frame ||= requestAnimationFrame(draw);
}

function draw() {
  frame = 0;
  const changes = pending;
  pending = noChanges();
  if (changes.all || changes.counters) drawCounters();
  controls.sync(changes);
  timeline.render(changes);
  chart.render(changes);
  deadLetters.render(changes);
  trace.flush();
  // Running attempts grow with the lab clock, so keep drawing while anything is in motion.
  if (timeline.needsClock()) schedule();
}

// ---- the connection ---------------------------------------------------------------------------

const pill = document.getElementById('conn');
const retryButton = document.getElementById('conn-retry');
let lastState = '';

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
      if (lastState === 'live') trace.note('connection lost; the browser is reconnecting');
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

const stream = connect(lab, model, {
  onChanges(changes) {
    mergeChanges(pending, changes);
    schedule();
  },
  onEvent: trace.event,
  onState: showState,
});
retryButton.addEventListener('click', stream.retryNow);
