//! The live connection to one lab: reads the event stream, feeds the snapshot and the
//! numbered events into the model, and gets the connection back by itself after a drop.
//!
//! The stream is Server-Sent Events, read with fetch rather than EventSource. A burst sends
//! thousands of events a second and a network read can hold a thousand of them; EventSource
//! would dispatch them all in one long task and freeze the page for that time. Here events are
//! queued as they arrive and applied in slices of a few milliseconds, so the page keeps
//! drawing at the frame rate however fast they come.
//!
//! The page starts from the lab's snapshot, fetched as plain JSON: the server compresses that
//! (a big lab's is many megabytes, about a tenth of it on the wire), which it cannot do for an
//! event stream. The stream then starts right after the snapshot, with `Last-Event-ID`.
//!
//! After a drop we reconnect with `Last-Event-ID`, so the server resumes exactly where we left
//! off, waiting between tries with exponential backoff and equal jitter, the same advice this
//! lab demonstrates. A 404 means the lab is gone, and the retries stop.

import { applyEvent, applySnapshot } from './model.js';

const RETRY_BASE_MS = 500;
const RETRY_CAP_MS = 10_000;
/** Longest stretch spent applying events before the page gets to draw a frame. */
const SLICE_MS = 2;

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
  const snapshotUrl = `/api/labs/${encodeURIComponent(lab)}`;
  const url = `${snapshotUrl}/events`;
  /** Stops the current read; a new one gets a new controller. */
  let reading = null;
  let failures = 0;
  let timer = 0;
  /** Set when the model missed something: the next stream must start with a snapshot. */
  let fresh = true;
  /** Events not yet applied: { event, id, data }, or a snapshot already parsed ({ parsed }). */
  let queue = [];
  let queueStart = 0;
  let pumping = false;
  // A message to ourselves is the quickest way to yield to the browser and carry on after it.
  const channel = new MessageChannel();
  channel.port1.onmessage = pump;

  async function open() {
    clearTimeout(timer);
    timer = 0;
    hooks.onState(failures ? 'reconnecting' : 'connecting');
    const controller = new AbortController();
    reading = controller;
    // Whatever was queued belongs to the stream being replaced.
    queue = [];
    queueStart = 0;
    let after = !fresh && model.lastEventId >= 0 ? model.lastEventId : null;
    if (after === null) {
      const res = await get(snapshotUrl, { accept: 'application/json' }, controller);
      if (!res) return;
      let snapshot;
      try {
        snapshot = await res.json();
      } catch {
        if (reading === controller) retryLater('the snapshot did not arrive whole');
        return;
      }
      if (reading !== controller) return;
      queue.push({ event: 'snapshot', id: '', data: '', parsed: snapshot });
      schedulePump();
      after = snapshot.last_event_id;
    }
    const headers = { accept: 'text/event-stream', 'last-event-id': String(after) };
    const res = await get(url, headers, controller);
    if (!res) return;
    if (!res.body) {
      retryLater('the server sent no stream');
      return;
    }
    failures = 0;
    hooks.onState('live');
    try {
      await read(res.body, controller);
    } catch {
      // A dropped connection or an abort: handled below.
    }
    if (reading === controller) retryLater('the stream closed');
  }

  /**
   * GET `target` for the read `controller` stands for; null (with the next step arranged) when
   * it failed, the lab is gone, or a newer read took over meanwhile.
   */
  async function get(target, headers, controller) {
    let res;
    try {
      res = await fetch(target, { headers, cache: 'no-store', signal: controller.signal });
    } catch {
      if (reading === controller) retryLater('the server is unreachable');
      return null;
    }
    if (reading !== controller) return null;
    if (res.status === 404) {
      reading = null;
      hooks.onState('gone');
      return null;
    }
    if (!res.ok) {
      retryLater(`the server answered ${res.status}`);
      return null;
    }
    return res;
  }

  function schedulePump() {
    if (!pumping && queueStart < queue.length) {
      pumping = true;
      channel.port2.postMessage(null);
    }
  }

  /** Split the byte stream into SSE events and queue them. */
  async function read(body, controller) {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    const parser = createEventParser((ev) => queue.push(ev));
    for (;;) {
      const { value, done } = await reader.read();
      if (done || reading !== controller) {
        reader.cancel().catch(() => {});
        return;
      }
      parser.push(value);
      schedulePump();
    }
  }

  /** Apply queued events for at most SLICE_MS, then yield and come back for the rest. */
  function pump() {
    const until = performance.now() + SLICE_MS;
    while (queueStart < queue.length) {
      const ev = queue[queueStart++];
      if (!apply(ev)) break;
      if (performance.now() > until) break;
    }
    if (queueStart >= queue.length) {
      queue = [];
      queueStart = 0;
      pumping = false;
    } else {
      channel.port2.postMessage(null);
    }
  }

  /** Apply one event; false when it forced a fresh start. */
  function apply({ event, id, data, parsed: given }) {
    const parsed = given ?? parse(data);
    if (event === 'snapshot') {
      if (!parsed) return resync();
      hooks.onChanges(applySnapshot(model, parsed));
      // From here a new stream can resume after it, without another snapshot.
      fresh = false;
      hooks.onEvent(model.lastEventId, { type: 'snapshot', at_ms: parsed.now_ms, snapshot: parsed });
      return true;
    }
    const n = Number(id);
    // Resumed streams may repeat what we already have.
    if (id !== '' && Number.isFinite(n) && n <= model.lastEventId) return true;
    if (!parsed) return resync();
    const changes = applyEvent(model, n, parsed);
    if (!changes) return resync();
    hooks.onChanges(changes);
    hooks.onEvent(n, parsed);
    return true;
  }

  /** The model missed something: start a fresh stream, which begins with a snapshot. */
  function resync() {
    fresh = true;
    reading?.abort();
    open();
    return false;
  }

  function retryLater(reason) {
    reading?.abort();
    reading = null;
    // Equal jitter: half the nominal delay is guaranteed, the other half is random.
    const nominal = Math.min(RETRY_CAP_MS, RETRY_BASE_MS * 2 ** failures);
    const wait = nominal / 2 + Math.random() * (nominal / 2);
    failures += 1;
    // The first try after a drop is quick and quiet; from the second on, say so and count down.
    if (failures === 1) hooks.onState('reconnecting', { attempt: failures });
    else hooks.onState('offline', { waitMs: wait, attempt: failures, reason });
    clearTimeout(timer);
    timer = setTimeout(open, wait);
  }

  /** Retry now, skipping the rest of the current wait (the person asked for it). */
  function retryNow() {
    if (reading || !timer) return;
    open();
  }

  open();
  return { retryNow };
}

/**
 * An incremental reader of the SSE wire format
 * (https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation):
 * give it the text as it arrives, in pieces of any size, and it calls `onEvent({ event, id,
 * data })` for each event, once its blank line has come. Comments and blocks without data
 * (keep-alives) produce nothing. Each piece is scanned once: a line that spans pieces is kept
 * as a list of its parts and joined when it ends, so a snapshot of many megabytes in hundreds
 * of pieces costs time in proportion to its size, not to its size times the number of pieces.
 */
export function createEventParser(onEvent) {
  /** The parts of the line not yet ended. */
  let parts = [];
  /** The last piece ended with CR: an LF at the start of the next one ends nothing more. */
  let afterCR = false;
  let event = 'message';
  let id = '';
  let data = [];

  function line(text) {
    if (text === '') {
      if (data.length) onEvent({ event, id, data: data.join('\n') });
      event = 'message';
      id = '';
      data = [];
      return;
    }
    if (text.charCodeAt(0) === 0x3a) return; // ":" starts a comment
    const colon = text.indexOf(':');
    const field = colon < 0 ? text : text.slice(0, colon);
    let value = colon < 0 ? '' : text.slice(colon + 1);
    if (value.charCodeAt(0) === 0x20) value = value.slice(1);
    if (field === 'data') data.push(value);
    else if (field === 'event') event = value;
    else if (field === 'id') id = value;
  }

  // A line ends at CRLF, LF or CR.
  const lineEnd = /\r\n?|\n/g;
  return {
    push(text) {
      if (text === '') return;
      let start = 0;
      if (afterCR && text.charCodeAt(0) === 0x0a) start = 1;
      afterCR = false;
      lineEnd.lastIndex = start;
      for (let m; (m = lineEnd.exec(text)); start = lineEnd.lastIndex) {
        const tail = text.slice(start, m.index);
        if (parts.length) {
          parts.push(tail);
          line(parts.join(''));
          parts = [];
        } else {
          line(tail);
        }
        // A CR that ends the piece may be the first half of a CRLF split across two pieces.
        if (lineEnd.lastIndex === text.length && m[0] === '\r') afterCR = true;
      }
      if (start < text.length) parts.push(text.slice(start));
    },
  };
}

function parse(data) {
  try {
    return JSON.parse(data);
  } catch {
    return null;
  }
}
