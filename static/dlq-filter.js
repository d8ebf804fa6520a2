//! Which dead letters a person means, worked out in the page as the server does it
//! (src/dlq/filter.rs): by cause, last status, replays, quarantine, whether the write was
//! applied (the ledger's word, as the snapshot and its events carry it), when it was
//! dead-lettered (a range in seconds on the lab clock, both ends included) and id or key prefix; and
//! the counts per cause and per last status of the whole queue. The same filter goes to the
//! server for an action on everything it matches.

import { CAUSES as SERVER_CAUSES, CAUSE_WORDS } from './kinds.js';

/** Every cause's name, in the server's order. */
export const CAUSES = SERVER_CAUSES.map((c) => c.cause);

/** A cause in words, by its name, as the server says it. */
export const CAUSE_TEXT = CAUSE_WORDS;

/** How a letter's last attempt ended: "503", "timeout", "short_circuited"... as the server names it. */
export function lastStatus(d) {
  const last = d.attempts[d.attempts.length - 1];
  if (!last) return 'none';
  if (last.status != null) return String(last.status);
  switch (last.outcome) {
    case 'timeout':
    case 'transport_error':
    case 'short_circuited':
    case 'cancelled':
      return last.outcome;
    case 'ok':
    case 'http_error':
      return 'none';
    default:
      return 'interrupted';
  }
}

export function emptyFilter() {
  return { cause: '', status: '', replays: '', quarantined: '', applied: '', q: '', since: '', until: '' };
}

export function isEmpty(f) {
  return !f.cause && !f.status && f.replays === '' && !f.quarantined && !f.applied && !f.q.trim()
    && labMs(f.since) == null && labMs(f.until) == null;
}

/**
 * A time typed in seconds on the lab clock ("12.345", as the table shows it) in whole ms, as
 * the server compares `dead_lettered_ms`; null when empty or not a time (no bound).
 */
export function labMs(seconds) {
  const text = String(seconds ?? '').trim();
  if (text === '') return null;
  const s = Number(text);
  return Number.isFinite(s) && s >= 0 ? Math.round(s * 1000) : null;
}

/** Whether the range ends before it starts (the server refuses it: it holds nothing). */
export function rangeInverted(f) {
  const since = labMs(f.since);
  const until = labMs(f.until);
  return since != null && until != null && until < since;
}

/** A test for one letter. */
export function matcher(f) {
  const q = f.q.trim().toLowerCase();
  const idOnly = /^#(\d+)$/.exec(q);
  const replays = f.replays === '' ? null : Number(f.replays);
  const since = labMs(f.since);
  const until = labMs(f.until);
  return (d) => {
    if (f.cause && d.cause !== f.cause) return false;
    if (f.status && lastStatus(d) !== f.status) return false;
    if (replays != null && d.round !== replays) return false;
    if (since != null && d.dead_lettered_ms < since) return false;
    if (until != null && d.dead_lettered_ms > until) return false;
    if (f.quarantined && String(d.quarantined) !== f.quarantined) return false;
    if (f.applied && String(!!d.applied) !== f.applied) return false;
    if (idOnly) return d.id === Number(idOnly[1]);
    if (q) return String(d.id) === q || d.key.startsWith(q);
    return true;
  };
}

/** The filter as the API takes it (`"filter": {...}`), only the fields that are set. */
export function toServer(f) {
  const out = {};
  if (f.cause) out.cause = f.cause;
  if (f.status) out.status = f.status;
  if (f.replays !== '') out.replays = Number(f.replays);
  if (f.quarantined) out.quarantined = f.quarantined === 'true';
  if (f.applied) out.applied = f.applied === 'true';
  if (labMs(f.since) != null) out.since_ms = labMs(f.since);
  if (labMs(f.until) != null) out.until_ms = labMs(f.until);
  if (f.q.trim()) out.q = f.q.trim();
  return out;
}

/** The same filter as a query string, for the export. */
export function toQuery(f) {
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(toServer(f))) params.set(k, String(v));
  return params.toString();
}

/** Counts per cause (every cause) and per last status (those present), of `letters`. */
export function facets(letters) {
  const cause = new Map(CAUSES.map((c) => [c, 0]));
  const status = new Map();
  for (const d of letters) {
    cause.set(d.cause, (cause.get(d.cause) ?? 0) + 1);
    const s = lastStatus(d);
    status.set(s, (status.get(s) ?? 0) + 1);
  }
  return { cause, status };
}
