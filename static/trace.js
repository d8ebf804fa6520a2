//! The trace console: the latest events in plain words, newest at the bottom. It follows the
//! newest line unless the person has scrolled up to read something older.
//!
//! A burst brings thousands of events a second, far more than anyone can read, so an event
//! only becomes a small record. New lines are drawn at most ten times a second; under a heavy
//! stream the console is redrawn a few times a second, each time with the newest lines only
//! and a line saying how many were left out: laying out hundreds of lines at once would cost
//! the page its frame rate.

import { duration, labTime, ms, range, rowOf, shortKey } from './model.js';
import { BREAKER_TEXT } from './timeline-marks.js';

const BREAKER_WHY = {
  open: ': attempts now fail at once without a request',
  half_open: ': a few probes may go through',
  closed: ': requests flow again',
};

const MAX_LINES = 300;
/**
 * Old lines go a hundred at a time, not one per new line: taking the top line moves every line
 * below it up, and the browser then paints the whole console again.
 */
const TRIM_STEP = 100;
/**
 * New lines are drawn at most this often. Steady traffic brings a few events in every frame,
 * and a console that changed in every frame cost the page its frame rate (a tenth of a second
 * is still live to the eye).
 */
const FLUSH_MS = 100;
/** Finished attempts retold from the first snapshot, so a reloaded page is not blank. */
const HISTORY_LINES = 25;
/** More lines than this in one frame counts as a heavy stream... */
const HEAVY_LINES = 20;
/** ...which is drawn at most this often, */
const HEAVY_FLUSH_MS = 250;
/** ...and with at most this many of its newest lines. */
const HEAVY_DRAWN = 30;
/** A heavy flush put off by busy frames for this long goes ahead in the next one anyway. */
const OVERDUE_MS = 1000;

export function createTrace(root, model, requestDraw) {
  /** Records not drawn yet, oldest first: { at, text, kind, attempt, el }. */
  let pending = [];
  /** Records on screen, oldest first. */
  const drawn = [];
  /** Lines (records) that a following wait_scheduled completes, keyed "message/round/n". */
  const finishedLines = new Map();
  let lastFlush = 0;
  let timer = 0;
  /** When a due heavy flush was first put off for a busy frame (0: it was not). */
  let waitingSince = 0;
  /** Whether the view sits at the bottom; kept from scroll events so drawing reads no layout. */
  let following = true;
  /** Lines were added while following: scroll to them first thing in the next frame. */
  let stick = false;
  root.addEventListener('scroll', () => {
    following = root.scrollTop + root.clientHeight >= root.scrollHeight - 8;
  }, { passive: true });

  function line(at, text, kind) {
    const record = { at, text, kind, attempt: null, el: null };
    pending.push(record);
    // A hidden tab draws nothing for a while: keep only what could ever be shown.
    if (pending.length > MAX_LINES * 2) pending.splice(0, pending.length - MAX_LINES).forEach(forget);
    return record;
  }

  function forget(record) {
    if (record.attempt && finishedLines.get(record.attempt) === record) finishedLines.delete(record.attempt);
  }

  /** Describe one applied event (called after the model has applied it). */
  function event(id, ev) {
    const t = ev.at_ms;
    switch (ev.type) {
      case 'snapshot': {
        const s = ev.snapshot;
        finishedLines.clear();
        if (!root.childElementCount && !pending.length) history(s);
        line(t, `snapshot: ${s.messages.length} message${s.messages.length === 1 ? '' : 's'}, ${s.dead_letters.length} dead letter${s.dead_letters.length === 1 ? '' : 's'}, downstream ${s.downstream.mode} (up to event ${id})`, 'note');
        break;
      }
      case 'messages_created': {
        const ids = ev.messages.map((m) => m.id);
        const which = ids.length > 1 ? `#${ids[0]}–#${ids[ids.length - 1]}` : `#${ids[0]}`;
        line(t, `${ids.length} new message${ids.length === 1 ? '' : 's'} queued (${which})`, 'note');
        break;
      }
      case 'attempt_started': {
        const a = ev.attempt;
        const after = ev.waited_ms != null ? ` after waiting ${ms(ev.waited_ms)}` : '';
        // A hedge goes while its siblings are still out (gRPC hedging): say which.
        const out = (rowOf(model, ev.message_id)?.attempts ?? [])
          .filter((x) => x.round === a.round && x.n !== a.n && x.duration_ms == null)
          .map((x) => x.n);
        const hedge = out.length ? ` as a hedge, with attempt${out.length > 1 ? 's' : ''} ${out.join(', ')} still out` : '';
        line(t, `${who(ev.message_id, a)} sent${after}${hedge}`, 'minor');
        break;
      }
      case 'attempt_finished': {
        const a = ev.attempt;
        const record = line(t, `${who(ev.message_id, a)} → ${result(a)}`, a.outcome === 'ok' ? 'ok' : 'fail');
        record.attempt = `${ev.message_id}/${a.round}/${a.n}`;
        finishedLines.set(record.attempt, record);
        break;
      }
      case 'wait_scheduled': {
        const key = `${ev.message_id}/${ev.round}/${ev.n}`;
        const record = finishedLines.get(key);
        finishedLines.delete(key);
        const text = waitText(ev.wait, model.policy?.jitter);
        // Finish the attempt's own line when it is still kept; otherwise say it alone.
        if (record) {
          record.text += `; ${text}`;
          if (record.el) record.el.lastChild.data = record.text;
        } else {
          line(t, `#${ev.message_id} ${text}`, 'minor');
        }
        break;
      }
      case 'delivered':
        line(t, `#${ev.message_id} delivered ✓`, 'ok');
        break;
      case 'dead_lettered': {
        const d = ev.dead_letter;
        line(t, `#${d.id} moved to the dead-letter queue: ${d.reason}`, 'dead');
        break;
      }
      case 'replay_started': {
        const ids = ev.messages.map((m) => `#${m.id}`);
        const round = ev.messages[0]?.round;
        line(t, `replaying ${ids.length} dead letter${ids.length === 1 ? '' : 's'} as round ${round} with the same keys: ${list(ids)}`, 'note');
        break;
      }
      case 'downstream_request': {
        // The server's own words when it gives them; otherwise what the flags say.
        const outcome = ev.detail
          || (ev.replayed ? 'replayed the stored answer, applied nothing' : ev.applied ? 'applied the write' : 'applied nothing');
        line(t, `downstream ← key ${shortKey(ev.key)}: ${ev.status}, ${outcome}`, ev.replayed ? 'replayed' : 'ds');
        break;
      }
      case 'settings_changed':
        line(t, `settings: downstream ${downstreamText(ev.downstream)}; policy ${policyText(ev.policy)}`, 'note');
        break;
      case 'breaker_changed':
        line(t, `circuit breaker ${BREAKER_TEXT[ev.state] ?? ev.state}${BREAKER_WHY[ev.state] ?? ''}`, ev.state === 'open' ? 'dead' : 'note');
        break;
      case 'marker':
        // Settings changes already have their own line; the others happen by themselves.
        if (ev.marker.kind !== 'settings') line(t, `${ev.marker.kind}: ${ev.marker.label}`, 'note');
        break;
      case 'load':
        // Drawn by the load chart: a line per 100 ms would bury everything else.
        break;
      case 'reset':
        finishedLines.clear();
        line(t, 'lab reset: messages, dead letters and the ledger cleared', 'note');
        break;
      case 'recovered': {
        finishedLines.clear();
        const ids = ev.resumed.map((m) => `#${m}`);
        const what = ids.length ? `resumed ${ids.length} message${ids.length === 1 ? '' : 's'} from the store: ${list(ids)}` : 'nothing was in flight';
        line(t, `the client came back after a ${ev.reason}; ${what}`, 'note');
        break;
      }
      case 'expired': {
        const n = ev.dead_letters.length;
        line(t, `retention: ${n} dead letter${n === 1 ? '' : 's'} expired${n ? ` (${list(ev.dead_letters.map((d) => `#${d}`))})` : ''}, ${ev.keys} idempotency key${ev.keys === 1 ? '' : 's'} forgotten`, 'note');
        break;
      }
      case 'lab_created':
        line(t, 'lab created', 'note');
        break;
      default:
        line(t, `${ev.type} (event ${id})`, 'minor');
    }
  }

  /** The latest finished attempts of a snapshot, in the order they ended. */
  function history(s) {
    // Only the newest few are retold: keep those in order as we go rather than sorting every
    // attempt of a lab that may hold tens of thousands. Equal ends keep their snapshot order.
    const shown = [];
    let done = 0;
    for (const m of s.messages) {
      for (const a of m.attempts) {
        if (a.outcome == null) continue;
        done += 1;
        const end = a.started_ms + a.duration_ms;
        if (shown.length === HISTORY_LINES && end < shown[0].end) continue;
        let i = shown.length;
        while (i > 0 && shown[i - 1].end > end) i -= 1;
        shown.splice(i, 0, { id: m.id, a, end });
        if (shown.length > HISTORY_LINES) shown.shift();
      }
    }
    if (shown.length < done) line(null, `… ${done - shown.length} earlier attempts not retold`, 'minor');
    for (const { id, a, end } of shown) {
      const wait = a.wait ? `; ${waitText(a.wait, s.policy.jitter)}` : '';
      line(end, `${who(id, a)} → ${result(a)}${wait}`, a.outcome === 'ok' ? 'ok' : 'fail');
    }
  }

  /** A line about the connection rather than the lab. */
  function note(text) {
    line(null, text, 'conn');
  }

  /**
   * Draw what arrived since the last flush and keep the newest lines; call once per frame,
   * after every other write. A heavy flush waits for a frame with `room` (or until overdue).
   * Returns "drew", "waiting" (call again in the next frame) or "idle".
   */
  function flush(room) {
    if (!pending.length) return 'idle';
    const now = performance.now();
    const since = now - lastFlush;
    const every = pending.length > HEAVY_LINES ? HEAVY_FLUSH_MS : FLUSH_MS;
    if (since < every) {
      // Nothing to do until then: ask for a frame at that time rather than spin.
      timer ||= setTimeout(() => {
        timer = 0;
        requestDraw();
      }, every - since);
      return 'idle';
    }
    if (pending.length > HEAVY_LINES && !room) {
      waitingSince ||= now;
      if (now < waitingSince + OVERDUE_MS) return 'waiting';
    }
    waitingSince = 0;
    lastFlush = now;
    if (pending.length > HEAVY_DRAWN) {
      const left = pending.splice(0, pending.length - HEAVY_DRAWN);
      left.forEach(forget);
      const n = left.length;
      pending.unshift({ at: left[n - 1].at, text: `… ${n} more event${n === 1 ? '' : 's'} not shown`, kind: 'minor', attempt: null, el: null });
    }
    root.append(...pending.map(element));
    drawn.push(...pending);
    pending = [];
    if (drawn.length > MAX_LINES + TRIM_STEP) {
      for (const record of drawn.splice(0, drawn.length - MAX_LINES)) {
        forget(record);
        record.el.remove();
      }
    }
    // Setting scrollTop after a write makes the browser lay the page out there and then, so
    // the scroll waits for the start of the next frame (`settle`), before anything is written.
    if (following) stick = true;
    return 'drew';
  }

  /** One line: the lab time, then the text; block layout, which is cheaper than flex here. */
  function element(record) {
    const el = document.createElement('div');
    el.className = `tr-line tr-${record.kind}`;
    const time = document.createElement('span');
    time.className = 'tr-time';
    // The trailing space keeps copied lines readable; the layout spaces them anyway.
    time.textContent = record.at != null ? `${labTime(record.at)} ` : '';
    el.append(time, record.text);
    record.el = el;
    return el;
  }

  /** The scroll `flush` put off: first in a frame, while the layout is still clean. */
  function settle() {
    if (!stick) return;
    stick = false;
    root.scrollTop = root.scrollHeight;
    // At the bottom now: a scroll event from before this (lines trimmed from the top) must not
    // leave the next flush thinking the person scrolled away.
    following = true;
  }

  return { event, note, flush, settle };
}

function who(messageId, a) {
  const round = a.round > 0 ? ` replay ${a.round},` : '';
  return `#${messageId}${round} attempt ${a.n}`;
}

/** "503 in 41 ms, Retry-After 1 s", "timed out after 2001 ms (…)", … */
function result(a) {
  const ra = a.retry_after_s != null ? `, Retry-After ${a.retry_after_s} s` : '';
  switch (a.outcome) {
    case 'ok':
      return `${a.status} in ${ms(a.duration_ms)}${a.replayed ? ', replayed by the key (already applied, not applied again)' : ''}`;
    case 'http_error':
      return `${a.status} in ${ms(a.duration_ms)}${ra}`;
    case 'timeout':
      return `timed out after ${ms(a.duration_ms)} (the write may still land)`;
    case 'transport_error':
      return `transport error after ${ms(a.duration_ms)}`;
    case 'interrupted':
      return `interrupted after ${ms(a.duration_ms)}: the client stopped mid-attempt`;
    case 'short_circuited':
      return 'short-circuited: the breaker was open, nothing sent';
    case 'cancelled':
      return `cancelled after ${ms(a.duration_ms)}: another attempt's answer settled the call (hedging)`;
    default:
      return `${a.outcome} in ${ms(a.duration_ms)}`;
  }
}

/** "waiting 1000 ms (Retry-After floor over 612 ms jittered)" and its backoff siblings. */
function waitText(w, jitter) {
  const bandText = w.low_ms === w.high_ms ? `no jitter, nominal ${ms(w.nominal_ms)}` : `${jitter ?? ''} jitter in ${Math.round(w.low_ms)}–${ms(w.high_ms)}`.trim();
  if (w.reason === 'retry_after') return `waiting ${ms(w.planned_ms)} (Retry-After floor over ${ms(w.chosen_ms)} jittered)`;
  const floor = w.floor_ms ? `, above the ${ms(w.floor_ms)} Retry-After floor` : '';
  return `waiting ${ms(w.planned_ms)} (${bandText}${floor})`;
}

/** "overloaded (4 at once, 8 waiting), back to healthy at 12.345 s" and its siblings. */
function downstreamText(d) {
  let what = d.mode;
  if (d.mode === 'throttled') what += ` (${d.rate_per_s}/s, bursts of ${d.burst})`;
  if (d.mode === 'overloaded') what += ` (${d.capacity} at once, ${d.queue} waiting, ${range(d.latency_ms)} each)`;
  if (d.revert) what += `, back to ${d.revert.to?.mode ?? 'the earlier settings'} at ${labTime(d.revert.at_ms)}`;
  return what;
}

function policyText(p) {
  const growth = p.multiplier === 1 ? 'fixed interval' : p.multiplier != null ? `× ${p.multiplier}` : '';
  const parts = [
    `${p.jitter} jitter, base ${ms(p.base_ms)}${growth ? ` ${growth}` : ''}, cap ${ms(p.cap_ms)}`,
    `${p.max_attempts} attempts${p.max_total_ms ? ` within ${duration(p.max_total_ms)}` : ''}`,
    `timeout ${ms(p.timeout_ms)}`,
    `Retry-After ${p.honor_retry_after ? `honoured${({ jitter_above: ' with jitter above', exact: ' exactly', exact_including_zero: ' exactly (0 too)', nominal_floor: ' as the least delay, jitter on top' })[p.retry_after_mode] ?? ''} up to ${ms(p.retry_after_cap_ms)}` : 'ignored'}`,
  ];
  if (p.breaker) parts.push(`breaker opens after ${p.breaker.failure_threshold} failures for ${ms(p.breaker.open_ms)}`);
  if (p.retry_budget) parts.push(`retry budget ${p.retry_budget.ratio} per request + ${p.retry_budget.min_per_s}/s`);
  return parts.join(', ');
}

function list(items) {
  return items.length > 8 ? `${items.slice(0, 8).join(', ')} and ${items.length - 8} more` : items.join(', ');
}
