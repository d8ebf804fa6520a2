//! One dead letter in detail, from the server (GET .../dead-letters/{id}): its key and body,
//! every attempt of every round with its answer, its measured duration and the wait after it
//! with the reason, when and why it was dead-lettered, how often it was replayed, and whether
//! the downstream applied its write. Opened from the table, from the message's timeline row or
//! by the address (#dead-letter-12); it leads back to the table's row and to the timeline.

import { duration, labTime, ms } from './model.js';
import { CAUSE_TEXT } from './dlq-filter.js';
import { say } from './controls.js';

const OUTCOME = {
  ok: 'ok', http_error: 'error', timeout: 'timed out', transport_error: 'connection failed',
  interrupted: 'cut off by a crash', short_circuited: 'refused by the open breaker',
  cancelled: 'cancelled: another attempt answered first',
};

export function createDetail(panel, model, controls, table) {
  const box = panel.querySelector('[data-dlq-detail]');
  const title = box.querySelector('[data-dlq-detail-title]');
  const facts = box.querySelector('[data-dlq-detail-facts]');
  const attempts = box.querySelector('[data-dlq-detail-attempts]');
  let shown = null;

  async function open(id) {
    shown = id;
    try {
      const detail = await controls.api('GET', `/dead-letters/${id}`);
      if (shown !== id) return;
      draw(detail);
      box.hidden = false;
      box.focus();
      if (location.hash !== `#dead-letter-${id}`) history.replaceState(null, '', `#dead-letter-${id}`);
    } catch (err) {
      box.hidden = true;
      say(`Message #${id}: ${err.message}`, 'error');
    }
  }

  function draw(detail) {
    const d = detail.dead_letter;
    box.dataset.id = String(d.id);
    title.textContent = `Dead letter #${d.id}`;
    const rows = [
      ['key', d.key],
      ['body', detail.body],
      ['dead-lettered', `at ${labTime(d.dead_lettered_ms)} (${new Date(d.dead_lettered_unix_ms).toLocaleString()})`],
      ['why', whyDead(d)],
      ['replayed', detail.replays === 0 ? 'never' : `${detail.replays} time${detail.replays === 1 ? '' : 's'}`],
      ['last status', detail.last_status.replace('_', ' ')],
      ['write applied', detail.applied
        ? 'yes: the downstream applied it (an answer was lost), so a replay is answered from the ledger'
        : 'no: the downstream never applied it'],
      ['quarantined', d.quarantined ? 'yes' : 'no'],
    ];
    facts.replaceChildren(...rows.flatMap(([k, v]) => {
      const dt = document.createElement('dt');
      dt.textContent = k;
      const dd = document.createElement('dd');
      dd.dataset.fact = k;
      dd.textContent = v;
      return [dt, dd];
    }));
    attempts.replaceChildren(...d.attempts.map((a) => {
      const tr = document.createElement('tr');
      const answer = a.status != null ? `${a.status}${a.replayed ? ' (replayed answer)' : ''}` : OUTCOME[a.outcome] ?? '—';
      const wait = a.wait;
      const waited = wait ? (wait.actual_ms != null ? `${ms(wait.actual_ms)} (planned ${ms(wait.planned_ms)})` : `planned ${ms(wait.planned_ms)}`) : '—';
      const why = wait ? whyWait(wait) : '';
      for (const text of [String(a.round), String(a.n), answer, a.duration_ms != null ? duration(a.duration_ms) : '—', waited, why]) {
        const td = document.createElement('td');
        td.textContent = text;
        tr.append(td);
      }
      return tr;
    }));
  }

  box.querySelector('[data-dlq-detail-close]').addEventListener('click', close);
  box.querySelector('[data-dlq-detail-row]').addEventListener('click', () => {
    const id = shown;
    close();
    table.reveal(id);
  });
  box.querySelector('[data-dlq-detail-timeline]').addEventListener('click', () => {
    const find = document.querySelector('[data-find]');
    find.value = `#${shown}`;
    find.dispatchEvent(new Event('input', { bubbles: true }));
    document.getElementById('timeline').scrollIntoView({ block: 'start' });
  });

  function close() {
    box.hidden = true;
    shown = null;
    if (location.hash.startsWith('#dead-letter-')) history.replaceState(null, '', location.pathname);
  }

  // From the timeline: a dead letter's row label opens it.
  document.addEventListener('click', (e) => {
    const label = e.target.closest('.tl-row .tl-label');
    if (!label) return;
    const id = Number(label.closest('.tl-row').dataset.messageId);
    if (model.deadLetters.has(id)) open(id);
  });

  function fromAddress() {
    const m = /^#dead-letter-(\d+)$/.exec(location.hash);
    if (m) open(Number(m[1]));
  }
  window.addEventListener('hashchange', fromAddress);

  return { open, fromAddress };
}

function whyWait(wait) {
  if (wait.reason === 'pushback') return `pushback: the endpoint named the wait, ${ms(wait.planned_ms)}`;
  const floor = wait.floor_ms != null ? `, Retry-After ${ms(wait.floor_ms)}` : '';
  return `${wait.reason.replace(/_/g, ' ')}: backoff ${ms(wait.nominal_ms)}, jitter chose ${ms(wait.chosen_ms)}${floor}`;
}

/** The cause, then the reason, unless the reason already opens with the cause's words. */
function whyDead(d) {
  const cause = CAUSE_TEXT[d.cause] ?? d.cause;
  return d.reason?.startsWith(cause) ? d.reason : `${cause}: ${d.reason}`;
}
