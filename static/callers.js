//! The report card of each outside caller: the ten checks of `GET /api/labs/{lab}/callers`
//! (src/callers/grade.rs), each with its verdict and the evidence it rests on, as the server
//! graded them; the page judges nothing itself. The card is fetched again when outside requests
//! arrive, at most once every REFRESH_MS however many arrive, and what the bounds left untracked
//! is said under the cards in plain words.

import { labTime } from './model.js';

/** Fetch the report at most this often while outside requests keep arriving. */
const REFRESH_MS = 1000;

/** The checks in the order the card lists them, with what each looks at. */
const CHECKS = [
  ['retry_after', 'Retry-After honoured'],
  ['backoff', 'backs off'],
  ['jitter', 'jitters'],
  ['attempts_capped', 'attempts capped'],
  ['key_reused', 'key reused on retry'],
  ['no_retry_on_4xx', 'no retry on 4xx'],
  ['timeouts', 'its own timeout'],
  ['deadline_sent', 'says its deadline'],
  ['attempts_numbered', 'numbers its attempts'],
  ['pushback_honoured', 'honours pushback'],
];
const VERDICT_TEXT = { pass: 'pass', warn: 'warn', fail: 'fail', not_seen: 'not seen', not_judged: 'could not judge' };

/** What each bound's untracked count means, given its limit. */
const UNTRACKED_TEXT = {
  max_callers_per_lab: (n, limits) => `${n} request${n === 1 ? '' : 's'} of new callers past the cap of ${limits.max_callers_per_lab} callers per lab`,
  max_outside_keys: (n, limits) => `${n} request${n === 1 ? '' : 's'} with new keys past the cap of ${limits.max_outside_keys_per_lab} outside keys per lab (or the server's cap)`,
  max_outside_attempts_per_key: (n, limits) => `${n} request${n === 1 ? '' : 's'} of a key past the cap of ${limits.max_outside_attempts_per_key} kept per key`,
};

export function createCallers(root, lab, model) {
  const list = root.querySelector('[data-caller-cards]');
  const empty = root.querySelector('[data-callers-empty]');
  const untrackedEl = root.querySelector('[data-callers-untracked]');
  const url = `/api/labs/${encodeURIComponent(lab)}/callers`;
  let fetching = false;
  let again = false;
  let timer = 0;
  let last = -Infinity;

  /** Fetch the report now, or as soon as the throttle allows. */
  function refresh() {
    if (fetching) {
      again = true;
      return;
    }
    const wait = last + REFRESH_MS - performance.now();
    if (wait > 0) {
      timer ||= setTimeout(() => {
        timer = 0;
        refresh();
      }, wait);
      return;
    }
    fetching = true;
    last = performance.now();
    fetch(url, { headers: { accept: 'application/json' }, cache: 'no-store' })
      .then((res) => (res.ok ? res.json() : null))
      .then((report) => report && draw(report))
      .catch(() => {})
      .finally(() => {
        fetching = false;
        if (again) {
          again = false;
          refresh();
        }
      });
  }

  function draw(report) {
    root.dataset.callers = String(report.callers.length);
    list.replaceChildren(...report.callers.map(card));
    empty.hidden = report.callers.length > 0;
    const limits = { ...model.outside.limits, max_callers_per_lab: report.max_callers_per_lab };
    const said = Object.entries(report.untracked ?? {})
      .filter(([, n]) => n > 0)
      .map(([limit, n]) => (UNTRACKED_TEXT[limit] ?? ((k) => `${k} requests past ${limit}`))(n, limits));
    untrackedEl.hidden = said.length === 0;
    untrackedEl.textContent = said.length ? `Answered but not kept, so not on the timeline nor in these cards: ${said.join('; ')}.` : '';
  }

  return {
    /** Fetch the report again when outside requests arrived or a new snapshot came. */
    render(changes) {
      if (changes.all || changes.outside.size || changes.untracked) refresh();
    },
  };
}

/** One caller's card: its name, what it sent, and every check's verdict with its evidence. */
function card(caller) {
  const article = document.createElement('article');
  article.className = 'caller-card';
  article.dataset.caller = caller.name;
  const head = document.createElement('h3');
  head.textContent = caller.name;
  const sent = document.createElement('p');
  sent.className = 'caller-sent';
  sent.textContent = `${caller.keys} key${caller.keys === 1 ? '' : 's'}, ${caller.requests} request${caller.requests === 1 ? '' : 's'}, `
    + `from ${labTime(caller.first_seen_ms)} to ${labTime(caller.last_seen_ms)}`;
  const checks = document.createElement('ul');
  checks.className = 'caller-checks';
  for (const [name, label] of CHECKS) {
    const check = caller.checks[name];
    if (!check) continue;
    const li = document.createElement('li');
    li.dataset.check = name;
    li.dataset.verdict = check.verdict;
    const verdict = document.createElement('span');
    verdict.className = 'verdict';
    verdict.textContent = VERDICT_TEXT[check.verdict] ?? check.verdict;
    const what = document.createElement('strong');
    what.textContent = label;
    const evidence = document.createElement('span');
    evidence.className = 'evidence';
    evidence.textContent = check.evidence;
    li.append(verdict, ' ', what, ' ', evidence);
    if (check.advice) {
      // Why it did not pass, and what to change.
      const advice = document.createElement('span');
      advice.className = 'advice';
      advice.textContent = check.advice;
      li.append(advice);
    }
    checks.append(li);
  }
  article.append(head, sent, checks);
  return article;
}
