//! Steady traffic: the control in the Traffic panel (a rate, how arrivals fall, how long; start
//! and stop) and what the traffic has done; and the live figures by the counters that show the
//! feedback loop that sustains a metastable failure, each over the last 10 s of lab time:
//! amplification (requests the endpoint received per new message) and wasted share (of the work
//! the endpoint finished, the part done for clients that had already given up). Everything here
//! is read from the server's load bins and `traffic` events, never from the page's own buttons.

import { labNow } from './model.js';

/** The live figures look back this far. */
export const FIGURE_WINDOW_MS = 10_000;
/**
 * The metastable sentence judges goodput over this much of the recent past: longer than a
 * circuit breaker that keeps reopening stays closed (its closed spells deliver a few seconds'
 * worth at most), so that its 4 s open and its short closed spells together read as the
 * overload they are, never as goodput back.
 */
export const GOODPUT_WINDOW_MS = 5_000;

/**
 * Sums of the load bins wholly inside the last `windowMs` before `now` (a bin still filling
 * would read low): new messages, deliveries, requests, 2xx answers and wasted work.
 */
export function recentLoad(model, windowMs, now) {
  const binMs = model.load.binMs;
  const sum = { offered: 0, delivered: 0, requests: 0, ok: 0, wasted: 0 };
  // Bins start at whole multiples of binMs: look up the window's own, not every bin of the run.
  for (let t = Math.ceil((now - windowMs) / binMs) * binMs; t + binMs <= now; t += binMs) {
    const b = model.load.bins.get(t);
    if (!b) continue;
    sum.offered += b.offered ?? 0;
    sum.delivered += b.delivered ?? 0;
    sum.requests += b.requests ?? 0;
    sum.ok += b.ok ?? 0;
    sum.wasted += b.wasted ?? 0;
  }
  return sum;
}

/**
 * A live figure divides by what its window holds; below this many (new messages, or finished
 * pieces of work) one request more or less swings it wildly ("0.0×", "100 %" from one or two
 * requests), so the page shows "–" and says why.
 */
export const MIN_SAMPLE = 20;

/**
 * Amplification and wasted share over the last 10 s, each `null` with a `why` where the window
 * holds too few to divide by.
 */
export function liveFigures(model, now) {
  const s = recentLoad(model, FIGURE_WINDOW_MS, now);
  const work = s.ok + s.wasted;
  const tooFew = (n, what) => `${n} ${what} in the last 10 s: too few for this figure to mean much (it needs ${MIN_SAMPLE})`;
  return {
    amplification: s.offered >= MIN_SAMPLE ? s.requests / s.offered : null,
    amplificationWhy: s.offered >= MIN_SAMPLE ? '' : tooFew(s.offered, s.offered === 1 ? 'new message' : 'new messages'),
    wastedShare: work >= MIN_SAMPLE ? s.wasted / work : null,
    wastedWhy: work >= MIN_SAMPLE ? '' : tooFew(work, work === 1 ? 'finished request' : 'finished requests'),
  };
}

/**
 * What the metastable preset says live, or null before its trigger: how long ago the trigger
 * (the last timed setting) ended and whether goodput has come back, from the last 5 s of bins.
 * `since` is when the preset began (lab ms), so a flag from an earlier run is not its trigger.
 */
export function metastableSentence(model, now, since) {
  const pending = model.downstream?.revert;
  if (pending && pending.at_ms > now) return 'The trigger is on: the work takes longer, the queue fills up, and clients start to time out.';
  const ended = [...model.markers].reverse().find((m) => m.kind === 'scheduled' && m.at_ms >= since);
  if (!ended) return null;
  const s = recentLoad(model, GOODPUT_WINDOW_MS, now);
  if (s.offered === 0) return null;
  const ago = Math.max(0, Math.round((now - ended.at_ms) / 1000));
  const what = `${s.delivered} of ${s.offered} new messages delivered in the last ${GOODPUT_WINDOW_MS / 1000} s`;
  return s.delivered * 2 < s.offered
    ? `The trigger ended ${ago} s ago; the endpoint is still overloaded: ${what}.`
    : `The trigger ended ${ago} s ago; goodput is back: ${what}.`;
}

function percent(x) {
  return `${Math.round(x * 100)} %`;
}

/** The traffic control in `form`, its status line, and the live figures; returns { update }. */
export function createTraffic(model, controls) {
  const { api, act } = controls;
  const form = document.getElementById('traffic-form');
  const stop = form.querySelector('[data-traffic-stop]');
  const status = document.querySelector('[data-traffic-status]');
  const amplification = document.querySelector('[data-live="amplification"]');
  const wasted = document.querySelector('[data-live="wasted_share"]');

  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const data = new FormData(form);
    const seconds = Number(data.get('for_s'));
    const body = {
      rate_per_s: Number(data.get('rate_per_s')),
      arrivals: String(data.get('arrivals')),
      for_ms: seconds > 0 ? Math.round(seconds * 1000) : null,
    };
    act(e.submitter ?? form, 'Could not start the traffic', () => api('PUT', '/traffic', body));
  });
  stop.addEventListener('click', () => act(stop, 'Could not stop the traffic', () => api('PUT', '/traffic', { rate_per_s: 0 })));

  function drawStatus() {
    const t = model.traffic;
    const running = t.rate_per_s > 0;
    form.dataset.running = String(running);
    stop.disabled = !running;
    // While traffic runs, the form shows its rate, however it was started (a preset, the API),
    // unless the person is typing a new one.
    const rate = form.elements.namedItem('rate_per_s');
    const arrivals = form.elements.namedItem('arrivals');
    if (running && !form.contains(document.activeElement)) {
      if (Number(rate.value) !== t.rate_per_s) rate.value = String(t.rate_per_s);
      if (arrivals.value !== t.arrivals) arrivals.value = t.arrivals;
    }
    const until = t.until_ms != null ? `, until ${(t.until_ms / 1000).toFixed(1)} s` : '';
    const late = t.late_ms_p99 != null ? `; arrivals p99 ${t.late_ms_p99} ms behind schedule` : '';
    const refused = t.refused > 0 ? `, ${t.refused} refused at the source (the lab owed too many)` : '';
    status.textContent = running
      ? `running: ${t.rate_per_s} msg/s, ${t.arrivals}${until}; sent ${t.sent}${refused}${late}`
      : t.sent > 0 ? `stopped; sent ${t.sent}${refused}` : '';
    // Nothing to say until traffic has run: the line takes no room until then.
    status.hidden = status.textContent === '';
    status.dataset.sent = String(t.sent);
    status.dataset.refused = String(t.refused);
  }

  function drawFigures() {
    const f = liveFigures(model, labNow(model));
    amplification.textContent = f.amplification == null ? '–' : `${f.amplification.toFixed(1)}×`;
    amplification.dataset.value = f.amplification == null ? '' : String(f.amplification);
    wasted.textContent = f.wastedShare == null ? '–' : percent(f.wastedShare);
    wasted.dataset.value = f.wastedShare == null ? '' : String(f.wastedShare);
    // Why a figure is "–", on hover; the card's own title says what it is otherwise.
    for (const [el, why] of [[amplification, f.amplificationWhy], [wasted, f.wastedWhy]]) {
      if (why && el.title !== why) el.title = why;
      else if (!why && el.hasAttribute('title')) el.removeAttribute('title');
    }
  }

  return {
    update(changes) {
      if (changes.all || changes.traffic) drawStatus();
      if (changes.all || changes.load.size) drawFigures();
    },
    /** Time passes: the 10 s window moves on even when no bin changes. */
    tick: drawFigures,
  };
}
