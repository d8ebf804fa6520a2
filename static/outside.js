//! Outside callers as the page draws them: each OUTSIDE_MESSAGE of the snapshot (docs/events.md)
//! becomes a timeline row shaped like one of the lab's own messages, so the rows, the scale,
//! the tooltip and the keyboard draw both alike. Its id is the outside message's id negated,
//! so the two kinds never share one; `outside: true` tells them apart where they differ.
//!
//! What the endpoint measured is kept as it is: an attempt runs from the request's arrival to
//! its answer or to the moment the caller hung up, and the wait after it is the time until the
//! key's next arrival (the next attempt's `waited_ms`).

/** The outside part of an empty model. */
export function emptyOutside() {
  return {
    /** @type {Map<number, object>} row id (negative) -> outside row, in the order first seen */
    rows: new Map(),
    /** Requests answered but not kept, by the limit that held them back. */
    untracked: {},
    limits: {},
    /** Caller names in the order first seen. */
    callers: [],
  };
}

/** The outside part of a snapshot (an older server sends none). */
export function outsideOf(snap) {
  const outside = emptyOutside();
  if (!snap) return outside;
  outside.untracked = { ...(snap.untracked ?? {}) };
  outside.limits = {
    max_callers_per_lab: snap.max_callers_per_lab,
    max_outside_keys_per_lab: snap.max_outside_keys_per_lab,
    max_outside_attempts_per_key: snap.max_outside_attempts_per_key,
  };
  for (const m of snap.messages ?? []) putOutside(outside, m);
  return outside;
}

/** Keep OUTSIDE_MESSAGE `m` (new, or replacing the one with its id); returns its row id. */
export function putOutside(outside, m) {
  const row = outsideRow(m);
  if (!outside.callers.includes(row.caller)) outside.callers.push(row.caller);
  outside.rows.set(row.id, row);
  return row.id;
}

/** The timeline row of OUTSIDE_MESSAGE `m`. */
export function outsideRow(m) {
  const attempts = m.attempts.map((a, i) => {
    const next = m.attempts[i + 1];
    const ended = a.ended_ms != null;
    let outcome = null;
    if (ended) outcome = a.hung_up ? 'timeout' : a.status >= 200 && a.status < 300 ? 'ok' : 'http_error';
    const waited = next?.waited_ms ?? null;
    return {
      n: a.n,
      round: 0,
      started_ms: a.started_ms,
      duration_ms: ended ? a.ended_ms - a.started_ms : null,
      status: a.status,
      outcome,
      hung_up: a.hung_up,
      retry_after_s: a.retry_after_s,
      // The wait the caller took before the next request of this key, as measured.
      wait: waited != null ? { reason: 'caller', actual_ms: waited, planned_ms: waited } : null,
    };
  });
  const last = attempts[attempts.length - 1];
  let state = 'in_flight';
  if (last?.outcome === 'ok') state = 'answered';
  else if (last?.outcome === 'timeout') state = 'hung_up';
  else if (last?.outcome) state = 'failed';
  return {
    id: -m.id,
    outside: true,
    caller: m.caller,
    key: m.key,
    requests: m.requests,
    created_ms: attempts[0]?.started_ms ?? 0,
    state,
    attempts,
  };
}

/** Which rows the timeline's source filter lets through: "" both, "lab", "outside", "caller:NAME". */
export function sourcePasses(source, m) {
  if (!source) return true;
  if (source === 'lab') return !m.outside;
  if (source === 'outside') return Boolean(m.outside);
  return Boolean(m.outside) && source === `caller:${m.caller}`;
}
