//! The live connection to one lab: opens the event stream, feeds the snapshot and the
//! numbered events into the model, and gets the connection back by itself after a drop.
//!
//! While the browser's EventSource is reconnecting on its own (it sends Last-Event-ID, so the
//! server resumes exactly where we left off) we only show "reconnecting". When it gives up
//! (readyState CLOSED: the server answered 404 or was unreachable) we retry ourselves with
//! exponential backoff and equal jitter, the same advice this lab demonstrates, probing the
//! snapshot route first so a lab that no longer exists stops the retries.

import { applyEvent, applySnapshot } from './model.js';

const RETRY_BASE_MS = 500;
const RETRY_CAP_MS = 10_000;

/**
 * Connect to the lab's event stream.
 * @param {string} lab the lab id
 * @param {object} model the model to keep up to date
 * @param {object} hooks
 *   onChanges(changes)  after the model changed
 *   onEvent(id, event)  every applied event, for the trace console (snapshots too, type "snapshot")
 *   onState(state, detail) connection state: "connecting" | "live" | "reconnecting" | "offline" | "gone"
 *                          ("offline" comes with { waitMs, attempt, reason })
 */
export function connect(lab, model, hooks) {
  const streamUrl = `/api/labs/${encodeURIComponent(lab)}/events`;
  const probeUrl = `/api/labs/${encodeURIComponent(lab)}`;
  let source = null;
  let failures = 0;
  let timer = 0;

  function open() {
    hooks.onState('connecting');
    source = new EventSource(streamUrl);
    source.addEventListener('open', () => {
      failures = 0;
      hooks.onState('live');
    });
    source.addEventListener('snapshot', (e) => {
      const snap = parse(e.data);
      if (!snap) return resync();
      hooks.onChanges(applySnapshot(model, snap));
      hooks.onEvent(model.lastEventId, { type: 'snapshot', at_ms: snap.now_ms, snapshot: snap });
    });
    source.addEventListener('message', (e) => {
      const id = Number(e.lastEventId);
      // Resumed streams may repeat what we already have.
      if (Number.isFinite(id) && id <= model.lastEventId) return;
      const ev = parse(e.data);
      if (!ev) return resync();
      const changes = applyEvent(model, id, ev);
      if (!changes) return resync();
      hooks.onChanges(changes);
      hooks.onEvent(id, ev);
    });
    source.addEventListener('error', () => {
      if (source.readyState === EventSource.CLOSED) {
        source = null;
        scheduleRetry('the stream closed');
      } else {
        hooks.onState('reconnecting');
      }
    });
  }

  /** The model missed something: start a fresh stream, which begins with a snapshot. */
  function resync() {
    if (source) source.close();
    open();
  }

  function scheduleRetry(reason) {
    // Equal jitter: half the nominal delay is guaranteed, the other half is random.
    const nominal = Math.min(RETRY_CAP_MS, RETRY_BASE_MS * 2 ** failures);
    const wait = nominal / 2 + Math.random() * (nominal / 2);
    failures += 1;
    hooks.onState('offline', { waitMs: wait, attempt: failures, reason });
    clearTimeout(timer);
    timer = setTimeout(probe, wait);
  }

  async function probe() {
    hooks.onState('reconnecting', { attempt: failures });
    let res;
    try {
      res = await fetch(probeUrl, { headers: { accept: 'application/json' }, cache: 'no-store' });
    } catch {
      return scheduleRetry('the server is unreachable'); // keep trying until it is back
    }
    if (res.status === 404) {
      hooks.onState('gone');
      return;
    }
    if (!res.ok) return scheduleRetry(`the server answered ${res.status}`);
    open();
  }

  /** Retry now, skipping the rest of the current wait (the person asked for it). */
  function retryNow() {
    if (source) return;
    clearTimeout(timer);
    probe();
  }

  open();
  return { retryNow };
}

function parse(data) {
  try {
    return JSON.parse(data);
  } catch {
    return null;
  }
}
