//! The timeline's two lanes above its time axis: the client's circuit breaker, drawn as a band
//! of its states over lab time, and a flag for every change of settings (by hand or by
//! schedule), client crash and server restart, with its label on hover and on focus, and a
//! faint line down through the rows, so a person sees what the messages reacted to.
//!
//! Both use the bars' `--s` and `--d` custom properties (lab ms), so they follow the zoom and
//! the pan without being redrawn. What happens by itself (the breaker trips, an outage window
//! ends, the client crashes) is also told to screen readers, a few seconds apart at most.

import { labNow, labTime } from './model.js';

export const BREAKER_TEXT = { closed: 'closed', open: 'open', half_open: 'half-open' };
const KIND_GLYPH = { settings: '⚙', scheduled: '↩', crash: '✕', restart: '↻', reset: '↻' };
const KIND_TEXT = {
  settings: 'settings changed',
  scheduled: 'scheduled revert',
  crash: 'client crash',
  restart: 'server restart',
  reset: 'lab reset',
};
/** Markers set this close to the one before share a flag, with a count. */
const GROUP_MS = 50;
/** Tell screen readers at most this often; what happened in between is told together. */
const SAY_EVERY_MS = 3000;

export function createMarks(state, scale, miniTip) {
  const { root, model } = state;
  const band = root.querySelector('[data-breaker]');
  const nowEl = root.querySelector('[data-breaker-now]');
  const marksEl = root.querySelector('[data-marks]');
  const linesEl = root.querySelector('.tl-marklines');
  const said = document.getElementById('changes-said');

  /** How many of `model.markers` are drawn (they only ever grow until the next snapshot). */
  let drawnMarkers = 0;
  /** Index of the flag holding the lane's single tab stop. */
  let tabStop = -1;
  /** Phrases waiting to be told, and the timer that tells them. */
  let toTell = [];
  let tellTimer = 0;
  let lastTold = -Infinity;

  // ---- the breaker ------------------------------------------------------------------------

  /** With several clients: the share of clients whose breaker is open, as a band that is as
   * tall as that share, with "k of n open" written in it. */
  function drawShares() {
    const { count, breakers, changes } = model.clients;
    const on = model.policy?.breaker != null;
    const segments = [];
    let from = 0;
    let open = 0;
    let half = 0;
    for (const c of changes) {
      if (c.at_ms > from) segments.push({ from, to: c.at_ms, open, half });
      ({ at_ms: from, open, half_open: half } = c);
    }
    segments.push({ from, to: null, open, half });
    band.replaceChildren(
      ...segments.map((s) => {
        const el = document.createElement('span');
        el.className = 'tl-bk';
        el.dataset.breakerSegment = '';
        el.dataset.state = s.open > 0 ? 'open' : s.half > 0 ? 'half_open' : 'closed';
        el.dataset.open = String(s.open);
        el.dataset.from = String(s.from);
        el.style.setProperty('--s', String(s.from));
        el.style.setProperty('--share', String(Math.max(s.open, s.half) / count));
        if (s.to == null) el.classList.add('is-current');
        else el.style.setProperty('--d', String(s.to - s.from));
        if (s.open > 0) el.textContent = `${s.open} of ${count} open`;
        return el;
      }),
    );
    band.classList.add('is-share');
    band.dataset.breakerState = breakers.open > 0 ? 'open' : breakers.half_open > 0 ? 'half_open' : 'closed';
    band.dataset.breakerOn = String(on);
    band.dataset.open = String(breakers.open);
    band.classList.toggle('is-off', !on && changes.length === 0);
    // With no breaker in the policy, "0 of 200 open" would say there were breakers to open:
    // the band says "off", and its history stays drawn.
    const counting = on || breakers.open > 0 || breakers.half_open > 0;
    band.setAttribute(
      'aria-label',
      counting
        ? `Circuit breakers of ${count} clients: ${breakers.open} open, ${breakers.half_open} half-open, ${breakers.closed} closed now.`
        : `Circuit breakers: off in this policy (${count} clients).`,
    );
    nowEl.textContent = counting ? `${breakers.open} of ${count} open` : 'off';
    nowEl.dataset.state = breakers.open > 0 ? 'open' : on ? 'closed' : 'off';
  }

  /** A redraw due when an open breaker's `open_ms` runs out with nothing recorded yet. */
  let breakerTimer = 0;

  function drawBreaker() {
    if (model.clients?.count > 1) return drawShares();
    band.classList.remove('is-share');
    delete band.dataset.open;
    const { state: current, changes } = model.breaker;
    const on = model.policy?.breaker != null;
    const openMs = model.policy?.breaker?.open_ms;
    const segments = [];
    // Closed from the lab's start until the first change.
    let from = 0;
    let st = 'closed';
    for (const c of changes) {
      if (c.at_ms > from) segments.push({ from, to: c.at_ms, state: st });
      from = c.at_ms;
      st = c.state;
    }
    segments.push({ from, to: null, state: st });
    // The server records a change only at the next attempt, but an open breaker lets a probe
    // through as soon as `open_ms` has passed: draw it as it would answer at each moment,
    // open for `open_ms`, then half-open and waiting for a probe.
    const drawnSegments = [];
    const now = labNow(model);
    clearTimeout(breakerTimer);
    breakerTimer = 0;
    for (const seg of segments) {
      const ends = seg.to ?? now;
      if (seg.state === 'open' && openMs != null && ends > seg.from + openMs) {
        drawnSegments.push({ from: seg.from, to: seg.from + openMs, state: 'open' });
        drawnSegments.push({ from: seg.from + openMs, to: seg.to, state: 'half_open', waiting: true });
      } else {
        drawnSegments.push(seg);
        if (seg.state === 'open' && seg.to == null && openMs != null) {
          breakerTimer = setTimeout(() => {
            breakerTimer = 0;
            drawBreaker();
          }, seg.from + openMs - now + 20);
        }
      }
    }
    const shownNow = drawnSegments.at(-1).state;
    band.replaceChildren(
      ...drawnSegments.map((s) => {
        const el = document.createElement('span');
        el.className = 'tl-bk';
        el.dataset.breakerSegment = '';
        el.dataset.state = s.state;
        el.dataset.from = String(s.from);
        el.style.setProperty('--s', String(s.from));
        // The current state runs to the right edge, so it needs no redrawing as time passes.
        if (s.to == null) el.classList.add('is-current');
        else el.style.setProperty('--d', String(s.to - s.from));
        if (s.state !== 'closed') el.textContent = BREAKER_TEXT[s.state];
        if (s.waiting) {
          el.dataset.waiting = 'true';
          el.title = 'open_ms has passed: the next attempt goes through as a probe';
        }
        return el;
      }),
    );
    band.dataset.breakerState = shownNow === 'half_open' && current === 'open' ? 'half_open' : current;
    band.dataset.breakerOn = String(on);
    band.classList.toggle('is-off', !on && changes.length === 0);
    const opened = changes.filter((c) => c.state === 'open').length;
    const times = opened === 1 ? 'once' : `${opened} times`;
    band.setAttribute(
      'aria-label',
      on || changes.length
        ? `Circuit breaker ${BREAKER_TEXT[current]} now${opened ? `; it opened ${times}` : '; it has not opened'}.`
        : 'Circuit breaker: off in this policy.',
    );
    const answering = band.dataset.breakerState;
    nowEl.textContent = on || changes.length ? BREAKER_TEXT[answering] : 'off';
    nowEl.dataset.state = on || changes.length ? answering : 'off';
  }

  // ---- the markers ------------------------------------------------------------------------

  /** Drawn flags, each a group of markers set within GROUP_MS of the one before. */
  let groups = [];

  function drawMarkers(all) {
    if (all) {
      marksEl.replaceChildren();
      linesEl.replaceChildren();
      drawnMarkers = 0;
      groups = [];
      tabStop = -1;
      miniTip.hide();
    }
    for (let i = drawnMarkers; i < model.markers.length; i++) {
      const m = model.markers[i];
      const last = groups.at(-1);
      if (last && m.at_ms - model.markers[last.members.at(-1)].at_ms <= GROUP_MS) {
        last.members.push(i);
        labelGroup(last);
        continue;
      }
      const flag = document.createElement('button');
      flag.type = 'button';
      flag.className = 'tl-mark';
      flag.tabIndex = -1;
      flag.dataset.marker = String(i);
      flag.dataset.group = String(groups.length);
      flag.style.setProperty('--s', String(m.at_ms));
      const line = document.createElement('span');
      line.className = 'tl-markline';
      line.dataset.kind = m.kind;
      line.style.setProperty('--s', String(m.at_ms));
      const group = { flag, members: [i] };
      groups.push(group);
      labelGroup(group);
      marksEl.append(flag);
      linesEl.append(line);
    }
    drawnMarkers = model.markers.length;
    // Keyboard users get one way in: the latest flag, unless one was chosen.
    const stops = marksEl.children;
    if (stops.length && (tabStop < 0 || !stops[tabStop])) setTabStop(stops.length - 1);
  }

  /** A flag's glyph, count and label: one marker, or several set within a few ms. */
  function labelGroup({ flag, members }) {
    const ms = members.map((i) => model.markers[i]);
    const first = ms[0];
    const kinds = [...new Set(ms.map((m) => m.kind))];
    flag.dataset.kind = kinds.length === 1 ? first.kind : 'several';
    flag.dataset.count = String(ms.length);
    flag.textContent = KIND_GLYPH[kinds.length === 1 ? first.kind : 'settings'] ?? '•';
    if (ms.length > 1) {
      const count = document.createElement('span');
      count.className = 'tl-mark-count';
      count.textContent = String(ms.length);
      flag.append(count);
    }
    const what = ms.map((m) => `${KIND_TEXT[m.kind] ?? m.kind}: ${m.label}`).join('; ');
    const head = ms.length > 1 ? `${labTime(first.at_ms)}, ${ms.length} changes` : labTime(first.at_ms);
    flag.setAttribute('aria-label', `${head}, ${what}`);
  }

  function setTabStop(i) {
    const stops = marksEl.children;
    if (stops[tabStop]) stops[tabStop].tabIndex = -1;
    tabStop = i;
    stops[i].tabIndex = 0;
  }

  function showFlag(flag) {
    const group = groups[Number(flag.dataset.group)];
    if (!group) return;
    const ms = group.members.map((i) => model.markers[i]);
    const r = flag.getBoundingClientRect();
    const head = ms.length > 1
      ? `${labTime(ms[0].at_ms)} · ${ms.length} changes within ${Math.round(ms.at(-1).at_ms - ms[0].at_ms)} ms`
      : `${labTime(ms[0].at_ms)} · ${KIND_TEXT[ms[0].kind] ?? ms[0].kind}`;
    const body = ms.length > 1 ? ms.map((m) => `${KIND_GLYPH[m.kind] ?? '•'} ${m.label}`).join(' · ') : ms[0].label;
    miniTip.show(r.left + r.width / 2, r.bottom, head, body);
  }

  marksEl.addEventListener('pointerover', (e) => {
    const flag = e.target.closest('.tl-mark');
    if (flag) showFlag(flag);
  });
  marksEl.addEventListener('pointerout', (e) => {
    if (e.target.closest('.tl-mark') && !marksEl.contains(document.activeElement)) miniTip.hide();
  });
  marksEl.addEventListener('focusin', (e) => {
    const flag = e.target.closest('.tl-mark');
    if (!flag) return;
    const i = Number(flag.dataset.group);
    if (i !== tabStop) setTabStop(i);
    const at = model.markers[Number(flag.dataset.marker)]?.at_ms;
    if (at != null) scale.panToShow(at, at);
    showFlag(flag);
  });
  marksEl.addEventListener('focusout', (e) => {
    if (!marksEl.contains(e.relatedTarget)) miniTip.hide();
  });
  marksEl.addEventListener('keydown', (e) => {
    const stops = marksEl.children;
    if (!stops.length) return;
    const moves = { ArrowLeft: tabStop - 1, ArrowRight: tabStop + 1, Home: 0, End: stops.length - 1 };
    if (e.key === 'Escape') return miniTip.hide();
    if (!(e.key in moves)) return;
    e.preventDefault();
    const i = Math.min(Math.max(0, moves[e.key]), stops.length - 1);
    // No scrolling: the lane is clipped, and a scrolled lane would no longer line up with time.
    stops[i].focus({ preventScroll: true });
  });

  // ---- telling ----------------------------------------------------------------------------

  function tell(phrase) {
    toTell.push(phrase);
    if (toTell.length > 3) toTell = toTell.slice(-3);
    if (tellTimer) return;
    tellTimer = setTimeout(() => {
      tellTimer = 0;
      lastTold = performance.now();
      said.textContent = toTell.join(' ');
      toTell = [];
    }, Math.max(300, lastTold + SAY_EVERY_MS - performance.now()));
  }

  return {
    /** Draw what changed; called once per animation frame. */
    render(changes) {
      const fresh = model.markers.length - drawnMarkers;
      if (changes.all || changes.breaker || changes.settings || changes.clients) drawBreaker();
      if (changes.all || changes.markers) drawMarkers(changes.all);
      // A snapshot is where the page starts from: only what happens after it is told.
      if (changes.all) return;
      if (changes.breaker) tell(`Circuit breaker ${BREAKER_TEXT[model.breaker.state]}.`);
      if (changes.markers) {
        for (const m of model.markers.slice(-Math.max(0, fresh))) {
          // A change the person made is told by the status line already.
          if (m.kind !== 'settings') tell(`${KIND_TEXT[m.kind] ?? m.kind}: ${m.label}.`);
        }
      }
    },
  };
}
