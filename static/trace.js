//! The trace console: the latest events in plain words, newest at the bottom. It follows the
//! newest line unless the person has scrolled up to read something older.

import { labTime, ms, shortKey } from './model.js';

const MAX_LINES = 300;
/** Finished attempts retold from the first snapshot, so a reloaded page is not blank. */
const HISTORY_LINES = 120;

export function createTrace(root, model) {
  let pending = [];
  /** Lines that a following wait_scheduled completes, keyed "message/round/n". */
  const finishedLines = new Map();

  function line(atMs, text, kind) {
    const el = document.createElement('div');
    el.className = `tr-line tr-${kind}`;
    const time = document.createElement('span');
    time.className = 'tr-time';
    // The trailing space keeps copied lines readable; the layout spaces them anyway.
    time.textContent = atMs != null ? `${labTime(atMs)} ` : '';
    const body = document.createElement('span');
    body.className = 'tr-text';
    body.textContent = text;
    el.append(time, body);
    pending.push(el);
    // A hidden tab draws nothing for a while: keep only what could ever be shown.
    if (pending.length > MAX_LINES) forget(pending.shift());
    return el;
  }

  function forget(el) {
    if (el.dataset.attempt) finishedLines.delete(el.dataset.attempt);
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
        line(t, `${who(ev.message_id, a)} sent${after}`, 'minor');
        break;
      }
      case 'attempt_finished': {
        const a = ev.attempt;
        const el = line(t, `${who(ev.message_id, a)} → ${result(a)}`, a.outcome === 'ok' ? 'ok' : 'fail');
        el.dataset.attempt = `${ev.message_id}/${a.round}/${a.n}`;
        finishedLines.set(el.dataset.attempt, el);
        break;
      }
      case 'wait_scheduled': {
        const key = `${ev.message_id}/${ev.round}/${ev.n}`;
        const el = finishedLines.get(key);
        finishedLines.delete(key);
        const text = waitText(ev.wait, model.policy?.jitter);
        // Finish the attempt's own line when it is still on screen; otherwise say it alone.
        if (el) el.querySelector('.tr-text').textContent += `; ${text}`;
        else line(t, `#${ev.message_id} ${text}`, 'minor');
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
      case 'settings_changed': {
        const d = ev.downstream;
        const p = ev.policy;
        line(t, `settings: downstream ${d.mode}; policy ${p.jitter} jitter, base ${ms(p.base_ms)}, cap ${ms(p.cap_ms)}, ${p.max_attempts} attempts, timeout ${ms(p.timeout_ms)}, Retry-After ${p.honor_retry_after ? `honoured up to ${ms(p.retry_after_cap_ms)}` : 'ignored'}`, 'note');
        break;
      }
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
    const done = [];
    for (const m of s.messages) {
      for (const a of m.attempts) if (a.outcome != null) done.push({ id: m.id, a, end: a.started_ms + a.duration_ms });
    }
    done.sort((x, y) => x.end - y.end);
    const shown = done.slice(-HISTORY_LINES);
    if (shown.length < done.length) line(null, `… ${done.length - shown.length} earlier attempts not retold`, 'minor');
    for (const { id, a, end } of shown) {
      const wait = a.wait ? `; ${waitText(a.wait, s.policy.jitter)}` : '';
      line(end, `${who(id, a)} → ${result(a)}${wait}`, a.outcome === 'ok' ? 'ok' : 'fail');
    }
  }

  /** A line about the connection rather than the lab. */
  function note(text) {
    line(null, text, 'conn');
  }

  /** Append what arrived since the last frame, trim to the newest lines, keep following. */
  function flush() {
    if (!pending.length) return;
    const follow = root.scrollTop + root.clientHeight >= root.scrollHeight - 8;
    root.append(...pending);
    pending = [];
    const excess = root.childElementCount - MAX_LINES;
    for (let i = 0; i < excess; i++) {
      forget(root.firstElementChild);
      root.firstElementChild.remove();
    }
    if (follow) root.scrollTop = root.scrollHeight;
  }

  return { event, note, flush };
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

function list(items) {
  return items.length > 8 ? `${items.slice(0, 8).join(', ')} and ${items.length - 8} more` : items.join(', ');
}
