//! The page's copy of one lab: settings, counters, messages with their attempts, and dead
//! letters. It changes only from a server snapshot or a server event (docs/events.md), never
//! from the page's own buttons, so what is drawn is always what the server measured.
//! Messages and dead letters are kept by id, and the load chart's bins by their start, so an
//! event costs the same in a lab of twenty messages as in one of twenty thousand.
//! The requests of outside callers are kept beside them as rows of their own (outside.js).

import { emptyOutside, outsideOf, putOutside } from './outside.js';

/** An empty model, used until the first snapshot arrives. */
export function emptyModel() {
  return {
    id: null,
    lastEventId: -1,
    downstream: null,
    policy: null,
    counters: null,
    limits: null,
    retention: null,
    /** @type {Map<number, object>} message id -> MESSAGE, in creation order */
    messages: new Map(),
    /** @type {Map<number, object>} message id -> DEAD_LETTER, in the order they were dead-lettered */
    deadLetters: new Map(),
    /** A redrive at a rate in progress: { total, sent, rate_per_s }, or null. */
    redrive: null,
    /** The client's circuit breaker: its state now and every change, oldest first. */
    breaker: { state: 'closed', changes: [] },
    /** Settings changes (by hand or by schedule), crashes, restarts: { at_ms, kind, label }. */
    markers: [],
    /** The policy's clients: how many, their breakers now, and the counts after each change. */
    clients: { count: 1, breakers: { closed: 1, open: 0, half_open: 0 }, changes: [] },
    /** Steady traffic: its rate (0: none), arrivals, end, what it sent and refused. */
    traffic: { rate_per_s: 0, arrivals: 'poisson', until_ms: null, sent: 0, refused: 0, late_ms_p99: null },
    /** What reached the downstream per bin of lab time: bin start (ms) -> LOAD_BIN. */
    load: { binMs: 100, bins: new Map() },
    /** What outside callers sent the endpoint, one row per caller and key (outside.js). */
    outside: emptyOutside(),
    // The lab clock: lab ms = anchorLab + (performance.now() - anchorPerf).
    anchorLab: 0,
    anchorPerf: 0,
  };
}

/** What changed since the views last drew; `all` means "redraw everything". */
export function noChanges() {
  return {
    all: false,
    messages: new Set(),
    deadLetters: false,
    settings: false,
    counters: false,
    breaker: false,
    markers: false,
    traffic: false,
    clients: false,
    /** Starts (ms) of the load bins that changed. */
    load: new Set(),
    /** Row ids (negative) of the outside messages that changed. */
    outside: new Set(),
    /** An outside request was answered but not kept (a bound was reached). */
    untracked: false,
  };
}

/** Merge `b` into `a` so several events can be drawn in one frame. */
export function mergeChanges(a, b) {
  a.all ||= b.all;
  a.deadLetters ||= b.deadLetters;
  a.settings ||= b.settings;
  a.counters ||= b.counters;
  a.breaker ||= b.breaker;
  a.markers ||= b.markers;
  a.traffic ||= b.traffic;
  a.clients ||= b.clients;
  for (const id of b.messages) a.messages.add(id);
  for (const t of b.load) a.load.add(t);
  for (const id of b.outside) a.outside.add(id);
  a.untracked ||= b.untracked;
  return a;
}

/** The lab clock estimated from the last anchor and the browser's monotonic clock. */
export function labNow(model) {
  return model.anchorLab + (performance.now() - model.anchorPerf);
}

/** Replace the whole model with a SNAPSHOT. */
export function applySnapshot(model, snap) {
  model.id = snap.id;
  model.lastEventId = snap.last_event_id;
  model.downstream = snap.downstream;
  model.policy = snap.policy;
  model.counters = snap.counters;
  model.limits = snap.limits ?? null;
  model.retention = snap.retention ?? null;
  model.messages = new Map(snap.messages.map((m) => [m.id, m]));
  model.deadLetters = new Map(snap.dead_letters.map((d) => [d.id, d]));
  model.redrive = snap.redrive ?? null;
  /** Message id by idempotency key, built when first needed. */
  model.idByKey = null;
  // An older server sends none of these three: the page then draws them empty.
  model.breaker = { state: snap.breaker?.state ?? 'closed', changes: [...(snap.breaker?.changes ?? [])] };
  model.markers = [...(snap.markers ?? [])];
  if (snap.traffic) model.traffic = snap.traffic;
  if (snap.clients) model.clients = snap.clients;
  model.load = { binMs: snap.load?.bin_ms ?? 100, bins: new Map((snap.load?.bins ?? []).map((b) => [b.t_ms, b])) };
  model.outside = outsideOf(snap.outside);
  model.anchorLab = snap.now_ms;
  model.anchorPerf = performance.now();
  const changes = noChanges();
  changes.all = true;
  return changes;
}

/**
 * Apply one numbered event. Returns the changes, or null when the event refers to something
 * the model does not know (the caller should then fetch a fresh snapshot).
 */
export function applyEvent(model, id, ev) {
  // Events only move the clock forward: a late event must not pull running bars back.
  if (typeof ev.at_ms === 'number' && ev.at_ms > labNow(model)) {
    model.anchorLab = ev.at_ms;
    model.anchorPerf = performance.now();
  }
  // These carry the whole lab as it now is (after a reset, a client restart, or retention).
  if (ev.type === 'reset' || ev.type === 'recovered' || ev.type === 'expired') {
    const changes = applySnapshot(model, ev.snapshot);
    model.lastEventId = id;
    return changes;
  }

  const changes = noChanges();
  if (ev.counters) {
    // Events carry only the counters that moved.
    model.counters = { ...model.counters, ...ev.counters };
    changes.counters = true;
  }
  const touch = (messageId) => {
    const m = model.messages.get(messageId);
    if (m) changes.messages.add(messageId);
    return m;
  };

  switch (ev.type) {
    case 'messages_created':
      for (const m of ev.messages) {
        model.messages.set(m.id, m);
        model.idByKey?.set(m.key, m.id);
        changes.messages.add(m.id);
      }
      break;

    case 'attempt_started': {
      const m = touch(ev.message_id);
      if (!m) return null;
      const a = ev.attempt;
      const prev = findAttempt(m, a.round, a.n - 1);
      if (prev && prev.wait && ev.waited_ms != null) {
        prev.wait.actual_ms = ev.waited_ms;
        prev.wait.queued_ms = ev.queued_ms ?? null;
      }
      m.attempts.push(a);
      m.round = a.round;
      m.state = 'in_flight';
      break;
    }

    case 'attempt_finished': {
      const m = touch(ev.message_id);
      if (!m) return null;
      const a = ev.attempt;
      const i = m.attempts.findIndex((x) => x.round === a.round && x.n === a.n);
      if (i < 0) return null;
      m.attempts[i] = { ...a, wait: a.wait ?? m.attempts[i].wait ?? null };
      break;
    }

    case 'wait_scheduled': {
      const m = touch(ev.message_id);
      if (!m) return null;
      const a = findAttempt(m, ev.round, ev.n);
      if (!a) return null;
      a.wait = ev.wait;
      m.state = 'backing_off';
      break;
    }

    case 'delivered': {
      const m = touch(ev.message_id);
      if (!m) return null;
      m.state = 'delivered';
      break;
    }

    case 'dead_lettered': {
      const dl = ev.dead_letter;
      const m = touch(dl.id);
      if (!m) return null;
      m.state = 'dead_letter';
      // Deleting first moves a letter that comes back to the end, where the server has it.
      model.deadLetters.delete(dl.id);
      model.deadLetters.set(dl.id, dl);
      changes.deadLetters = true;
      break;
    }

    case 'replay_started': {
      changes.deadLetters = true;
      for (const { id: messageId, round } of ev.messages) {
        model.deadLetters.delete(messageId);
        const m = touch(messageId);
        if (!m) return null;
        m.round = round;
        m.state = 'queued';
      }
      break;
    }

    case 'dead_letters_deleted':
      changes.deadLetters = true;
      for (const messageId of ev.ids) {
        model.deadLetters.delete(messageId);
        model.messages.delete(messageId);
      }
      changes.all = true; // rows leave the timeline
      break;

    case 'dead_letters_quarantined':
      changes.deadLetters = true;
      for (const messageId of ev.ids) {
        const d = model.deadLetters.get(messageId);
        // Replaced, not changed in place: views tell a changed letter by its object.
        if (d) model.deadLetters.set(messageId, { ...d, quarantined: ev.quarantined });
      }
      break;

    case 'redrive':
      model.redrive = ev.redrive ?? null;
      changes.deadLetters = true;
      break;

    case 'withdrawn': {
      // A change the store could not keep, taken back: what it touched, as it now is.
      for (const m of ev.messages) {
        model.messages.set(m.id, m);
        model.idByKey?.set(m.key, m.id);
        changes.messages.add(m.id);
      }
      for (const messageId of ev.removed) {
        model.messages.delete(messageId);
        model.deadLetters.delete(messageId);
      }
      if (ev.removed.length) changes.all = true; // rows leave the timeline
      for (const dl of ev.dead_letters) model.deadLetters.set(dl.id, dl);
      // Back in the server's order: oldest first.
      const letters = [...model.deadLetters.values()].sort(
        (a, b) => a.dead_lettered_unix_ms - b.dead_lettered_unix_ms || a.id - b.id,
      );
      model.deadLetters = new Map(letters.map((dl) => [dl.id, dl]));
      model.redrive = ev.redrive ?? null;
      changes.deadLetters = true;
      break;
    }

    case 'settings_changed':
      model.downstream = ev.downstream;
      model.policy = ev.policy;
      changes.settings = true;
      break;

    case 'breaker_changed':
      model.breaker.state = ev.state;
      model.breaker.changes.push({ at_ms: ev.at_ms, state: ev.state });
      changes.breaker = true;
      break;

    case 'marker':
      model.markers.push(ev.marker);
      changes.markers = true;
      break;

    case 'load':
      // Complete bins that changed: each replaces the one with the same start. A coarse bin
      // (activity older than five minutes, summed by the server) replaces the fine ones it sums.
      for (const bin of ev.bins) {
        const width = bin.width_ms ?? model.load.binMs;
        for (let t = bin.t_ms + model.load.binMs; t < bin.t_ms + width; t += model.load.binMs) {
          if (model.load.bins.delete(t)) changes.load.add(t);
        }
        model.load.bins.set(bin.t_ms, bin);
        changes.load.add(bin.t_ms);
      }
      break;

    case 'traffic':
      model.traffic = ev.traffic;
      changes.traffic = true;
      break;

    case 'clients':
      model.clients = ev.clients;
      changes.clients = true;
      break;

    case 'messages_forgotten':
      // Delivered messages that left the server's window: they stay counted, not drawn.
      for (const messageId of ev.message_ids) model.messages.delete(messageId);
      changes.all = true;
      break;

    case 'downstream_request': {
      // A write that lands after its message was given up on makes that dead letter applied:
      // its replay will be answered from the stored result.
      if (!ev.applied || !ev.key) break;
      const letter = deadLetterOfKey(model, ev.key);
      if (letter && !letter.applied) {
        model.deadLetters.set(letter.id, { ...letter, applied: true });
        changes.deadLetters = true;
      }
      break;
    }

    case 'outside_attempt':
      // The whole outside message as it is now: it replaces the row with its id.
      changes.outside.add(putOutside(model.outside, ev.message));
      break;

    case 'outside_untracked':
      model.outside.untracked = { ...ev.untracked };
      changes.untracked = true;
      break;

    case 'lab_created':
      // Only the trace console shows these; the counters above already changed.
      break;

    default:
      // An event type this page does not know yet: keep its counters, draw nothing new.
      break;
  }
  model.lastEventId = id;
  return changes;
}

/** The dead letter whose message has idempotency key `key`, if any. */
function deadLetterOfKey(model, key) {
  if (model.deadLetters.size === 0) return null;
  if (!model.idByKey) model.idByKey = new Map([...model.messages.values()].map((m) => [m.key, m.id]));
  return model.deadLetters.get(model.idByKey.get(key)) ?? null;
}

/**
 * The policy's circuit breakers as the protection lane draws a protection known by its changes
 * (protection-lane.js): how many were open after each change (with several clients, their
 * shared counts; with one, its own states), how many are open now, of how many clients. Null
 * with no breaker in the policy and none in the history. Many clients without a breaker have
 * their breakers called "off", as the timeline's band does, not "0 of 10 open".
 */
export function breakerHistory(model) {
  const { count, breakers } = model.clients;
  const several = count > 1;
  const changes = several ? model.clients.changes : model.breaker.changes;
  const levelOf = several ? (c) => c.open : (c) => Number(c.state === 'open');
  const on = model.policy?.breaker != null;
  if (!on && changes.length === 0) return null;
  const open = several ? breakers.open : Number(model.breaker.state === 'open');
  const halfOpen = several ? breakers.half_open > 0 : model.breaker.state === 'half_open';
  const figure = on || open > 0 || halfOpen ? `${open} of ${count} open` : 'off';
  return { kind: 'breaker', changes, levelOf, level: open, ceiling: count, figure };
}

/** The timeline row with id `id`: a message of the lab's own, or (negative id) an outside one. */
export function rowOf(model, id) {
  return id < 0 ? model.outside.rows.get(id) : model.messages.get(id);
}

export function findAttempt(message, round, n) {
  return message.attempts.find((a) => a.round === round && a.n === n) ?? null;
}

// Units and labels shared by every view.

/** Exact milliseconds, as measured: "41 ms". */
export function ms(value) {
  return `${Math.round(value)} ms`;
}

/** A count with its noun: "1 request", "3 requests". */
export function count(n, noun) {
  return `${n} ${noun}${n === 1 ? '' : 's'}`;
}

/** A human duration: "240 ms", "2.6 s", "30 s". */
export function duration(value) {
  if (value < 1000) return ms(value);
  const s = value / 1000;
  return `${Number.isInteger(s) || s >= 10 ? Math.round(s) : s.toFixed(1)} s`;
}

/** A [min, max] range in one unit: "60–240 ms", "2.6–3.5 s"; one value when they are equal. */
export function range([lo, hi]) {
  if (lo === hi) return duration(lo);
  if (hi < 1000) return `${Math.round(lo)}–${ms(hi)}`;
  return `${duration(lo).replace(/ s$/, '')}–${duration(hi)}`;
}

/** A point on the lab clock: "12.345 s". */
export function labTime(value) {
  return `${(value / 1000).toFixed(3)} s`;
}

/** The first characters of an idempotency key, enough to tell keys apart on screen. */
export function shortKey(key) {
  return key.length > 8 ? `${key.slice(0, 8)}…` : key;
}
