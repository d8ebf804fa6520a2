//! Probes the idempotency and retry contract of an HTTP API from outside, as `retrylab check`
//! does: each check sends a few requests, reads what came back (and the effect, when the user
//! gives a query for it) and says what it found, with the requests it rests on and the rule's
//! source. Knows HTTP only as a client: no server here.
//!
//! The rules are those of the IETF draft "The Idempotency-Key HTTP Header Field", cited by
//! section beside each check. The numbers are those of revision -06, whose text was read whole
//! in the working group's repository (ietf-wg-httpapi/idempotency, commit dab060c): 2.1
//! syntax, 2.5 responsibilities, 2.6 enforcement (a repeat gets the stored result, a request
//! still in work a conflict), 2.7 error handling (400 for a missing key, 422 for a key reused
//! with another body, 409 for a request still in work). Later revisions (-07 of October 2025)
//! keep the title and abstract; their numbering was not re-read. Where
//! providers differ from it (a reused key with another body: 422 in the draft, 400 at Stripe,
//! 409 elsewhere), the check reports the code it got instead of failing it.

use std::time::Duration;

use futures_util::future::join_all;
use reqwest::{Method, Url};
use serde::Serialize;
use serde_json::Value;

/// Requests a check may send before it stops, unless told otherwise.
pub const DEFAULT_MAX_REQUESTS: usize = 60;
/// Every key a check sends starts with this, so the owner can find and clear them.
pub const KEY_PREFIX: &str = "retrylab-check-";
/// Copies of one request the `concurrent` check sends at once.
pub const CONCURRENT: usize = 5;
/// How long `timeout_retry` waits for an answer before it abandons its first request.
pub const ABANDON_AFTER: Duration = Duration::from_millis(20);
/// A 409 or 503 is asked again at most this many times, after its `Retry-After` (capped).
const ASK_AGAIN: usize = 3;
const LONGEST_WAIT: Duration = Duration::from_secs(3);
/// Most characters of an answer's body kept in the report.
const BODY_SHOWN: usize = 300;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Pass,
    Warn,
    Fail,
    NotApplicable,
}

/// The body to send, as the user wrote it: JSON once every `{n}` is replaced with a number,
/// which makes each request's body its own.
#[derive(Debug, Clone)]
pub struct BodyTemplate(String);

impl BodyTemplate {
    pub fn parse(raw: &str) -> Result<BodyTemplate, String> {
        let template = BodyTemplate(raw.to_owned());
        serde_json::from_str::<Value>(&template.render(1))
            .map_err(|e| format!("--body is not JSON (with {{n}} as 1): {e}"))?;
        Ok(template)
    }

    pub fn render(&self, n: u64) -> String {
        self.0.replace("{n}", &n.to_string())
    }
}

/// How to read the effect of the requests: a GET whose JSON answer holds a number (at
/// `pointer`, or the whole answer) or a list, whose length is counted.
#[derive(Debug, Clone)]
pub struct Effect {
    pub url: Url,
    pub pointer: String,
}

/// What to probe and how.
#[derive(Debug, Clone)]
pub struct Target {
    pub url: Url,
    pub method: Method,
    pub body: BodyTemplate,
    pub effect: Option<Effect>,
    pub max_requests: usize,
    /// Records the plan without sending anything.
    pub dry_run: bool,
}

/// How a request carries its key.
#[derive(Debug, Clone)]
enum KeyHeader {
    None,
    One(String),
    Two(String, String),
}

/// One request and what came back.
#[derive(Debug, Clone, Serialize)]
pub struct Exchange {
    pub method: String,
    pub url: String,
    /// The `Idempotency-Key` values sent, in order (none, one, or two headers).
    pub keys: Vec<String>,
    pub body: Option<String>,
    /// Null when no answer came (not sent, abandoned, or the connection failed).
    pub status: Option<u16>,
    pub retry_after: Option<String>,
    pub location: Option<String>,
    /// The answer's body, cut to a few hundred characters.
    pub answer: Option<String>,
    /// What else is worth saying: abandoned on purpose, not sent (the cap), the error.
    pub note: Option<String>,
    /// Sent at the same moment as the others so marked (the `concurrent` check).
    pub together: bool,
}

impl Exchange {
    fn answered(&self) -> bool {
        self.status.is_some()
    }

    fn success(&self) -> bool {
        self.status.is_some_and(|s| (200..300).contains(&s))
    }
}

/// One check's finding.
#[derive(Debug, Clone, Serialize)]
pub struct CheckResult {
    pub id: &'static str,
    pub verdict: Verdict,
    pub detail: String,
    /// The rule's source: the draft's section, or the convention it follows.
    pub source: &'static str,
    pub requests: Vec<Exchange>,
}

/// Everything a run found, with what it left behind on the server.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub url: String,
    pub checks: Vec<CheckResult>,
    pub keys: Vec<String>,
    pub locations: Vec<String>,
}

/// Sends the requests and keeps what the checks need of them.
struct Prober {
    http: reqwest::Client,
    target: Target,
    run: String,
    sent: usize,
    bodies: u64,
    keys: Vec<String>,
    locations: Vec<String>,
    /// The current check's requests.
    current: Vec<Exchange>,
    /// Every request so far, for the checks that judge them all.
    all: Vec<Exchange>,
}

/// Runs every check against `target`. Fails (with what to tell the person) when the URL does
/// not answer or the effect query does not answer JSON.
pub async fn check(target: Target) -> Result<Report, String> {
    let http = reqwest::Client::builder()
        .no_proxy()
        // A redirect would carry the POST, its key and its body to a host no one allowed.
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| e.to_string())?;
    let run = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    let mut p = Prober {
        http,
        target,
        run,
        sent: 0,
        bodies: 0,
        keys: Vec::new(),
        locations: Vec::new(),
        current: Vec::new(),
        all: Vec::new(),
    };
    if p.target.effect.is_some() && !p.target.dry_run {
        p.effect().await?;
        p.current.clear();
    }
    let mut checks = vec![missing_key(&mut p).await];
    if let Some(failed) = checks[0].requests.iter().find(|e| !e.answered() && !p.target.dry_run) {
        return Err(format!(
            "{} does not answer: {}",
            p.target.url,
            failed.note.as_deref().unwrap_or("no answer")
        ));
    }
    checks.push(bad_key(&mut p).await);
    checks.push(replay(&mut p).await);
    checks.push(other_body(&mut p).await);
    checks.push(concurrent(&mut p).await);
    checks.push(timeout_retry(&mut p).await);
    checks.push(conflict_retry_after(&mut p));
    checks.push(retry_after(&mut p));
    Ok(Report { url: p.target.url.to_string(), checks, keys: p.keys, locations: p.locations })
}

impl Prober {
    fn key(&mut self, check: &str) -> String {
        let key = format!("{KEY_PREFIX}{}-{check}-{}", self.run, self.keys.len() + 1);
        self.keys.push(key.clone());
        key
    }

    fn body(&mut self) -> String {
        self.bodies += 1;
        self.target.body.render(self.bodies)
    }

    fn blank(&self, method: &Method, url: &Url, keys: &KeyHeader, body: Option<&str>) -> Exchange {
        Exchange {
            method: method.to_string(),
            url: url.to_string(),
            keys: match keys {
                KeyHeader::None => Vec::new(),
                KeyHeader::One(k) => vec![k.clone()],
                KeyHeader::Two(a, b) => vec![a.clone(), b.clone()],
            },
            body: body.map(str::to_owned),
            status: None,
            retry_after: None,
            location: None,
            answer: None,
            note: None,
            together: false,
        }
    }

    /// Sends `bodies.len()` requests at once with `keys`; each 503 or 429 is asked again after its
    /// `Retry-After`, each 409 too when `settle` (the key's first request is still at work).
    async fn send(
        &mut self,
        keys: KeyHeader,
        bodies: Vec<String>,
        timeout: Option<Duration>,
        settle: bool,
    ) -> Vec<Exchange> {
        let together = bodies.len() > 1;
        let mut finals = Vec::new();
        let mut pending: Vec<String> = bodies;
        for round in 0..=ASK_AGAIN {
            let (method, url) = (self.target.method.clone(), self.target.url.clone());
            let mut planned: Vec<Exchange> = pending
                .iter()
                .map(|body| {
                    let mut e = self.blank(&method, &url, &keys, Some(body));
                    e.together = together && round == 0;
                    e
                })
                .collect();
            if self.target.dry_run || self.sent + planned.len() > self.target.max_requests {
                let note =
                    if self.target.dry_run { "planned" } else { "not sent: the cap on requests was reached" };
                for e in &mut planned {
                    e.note = Some(note.into());
                }
                self.keep(&planned);
                finals.extend(planned);
                return finals;
            }
            self.sent += planned.len();
            let http = &self.http;
            let answers = join_all(pending.iter().map(|body| {
                let mut request = http
                    .request(method.clone(), url.clone())
                    .header("Content-Type", "application/json")
                    .body(body.clone());
                match &keys {
                    KeyHeader::None => {}
                    KeyHeader::One(k) => request = request.header("Idempotency-Key", k),
                    KeyHeader::Two(a, b) => {
                        request = request.header("Idempotency-Key", a).header("Idempotency-Key", b)
                    }
                }
                if let Some(timeout) = timeout {
                    request = request.timeout(timeout);
                }
                read(request.send())
            }))
            .await;
            let mut again = Vec::new();
            let mut wait = Duration::ZERO;
            for (mut e, answer) in planned.into_iter().zip(answers) {
                match answer {
                    Ok((status, retry_after, location, body)) => {
                        e.status = Some(status);
                        e.retry_after = retry_after;
                        e.answer = Some(shown(&body));
                        if let Some(location) = &location {
                            self.locations.push(location.clone());
                        }
                        e.location = location;
                    }
                    Err(error) => {
                        e.note = Some(match timeout {
                            Some(t) if error.is_timeout() => {
                                format!("abandoned on purpose {} ms after it was sent", t.as_millis())
                            }
                            _ => format!("no answer: {}", plain(&error)),
                        })
                    }
                }
                let asked_again = matches!(e.status, Some(503 | 429)) || (settle && e.status == Some(409));
                if asked_again && round < ASK_AGAIN {
                    wait = wait.max(delay(e.retry_after.as_deref()));
                    again.push(e.body.clone().unwrap_or_default());
                    self.keep(std::slice::from_ref(&e));
                } else {
                    self.keep(std::slice::from_ref(&e));
                    finals.push(e);
                }
            }
            if again.is_empty() {
                break;
            }
            tokio::time::sleep(wait).await;
            pending = again;
        }
        finals
    }

    async fn post(&mut self, keys: KeyHeader, body: String) -> Exchange {
        self.send(keys, vec![body], None, true).await.remove(0)
    }

    fn keep(&mut self, exchanges: &[Exchange]) {
        self.current.extend_from_slice(exchanges);
        self.all.extend_from_slice(exchanges);
    }

    /// The effect's reading now: `Ok(None)` when no query was given (or in a dry run).
    async fn effect(&mut self) -> Result<Option<f64>, String> {
        let Some(effect) = self.target.effect.clone() else { return Ok(None) };
        let mut e = self.blank(&Method::GET, &effect.url, &KeyHeader::None, None);
        if self.target.dry_run || self.sent >= self.target.max_requests {
            e.note =
                Some(if self.target.dry_run { "planned" } else { "not sent: the cap was reached" }.into());
            self.current.push(e);
            return Ok(None);
        }
        self.sent += 1;
        let answer = read(self.http.get(effect.url.clone()).send()).await;
        let reading = match &answer {
            Ok((status, _, _, body)) => {
                e.status = Some(*status);
                e.answer = Some(shown(body));
                count(body, &effect.pointer)
            }
            Err(error) => Err(format!("no answer: {}", plain(error))),
        };
        self.current.push(e);
        reading.map(Some).map_err(|why| format!("the effect query GET {} {why}", effect.url))
    }

    fn take(&mut self) -> Vec<Exchange> {
        std::mem::take(&mut self.current)
    }

    fn result(
        &mut self,
        id: &'static str,
        source: &'static str,
        (verdict, detail): (Verdict, String),
    ) -> CheckResult {
        let requests = self.take();
        let (verdict, detail) = if self.target.dry_run {
            (Verdict::NotApplicable, "dry run: nothing sent".to_owned())
        } else if requests.iter().any(|e| e.note.as_deref().is_some_and(|n| n.starts_with("not sent"))) {
            (
                Verdict::NotApplicable,
                format!("the cap of {} requests was reached first", self.target.max_requests),
            )
        } else {
            (verdict, detail)
        };
        CheckResult { id, verdict, detail, source, requests }
    }
}

/// The number an effect's answer holds at `pointer`: a number, or a list's length.
fn count(body: &str, pointer: &str) -> Result<f64, String> {
    let json: Value = serde_json::from_str(body).map_err(|_| "did not answer JSON".to_owned())?;
    match json.pointer(pointer) {
        Some(Value::Number(n)) => n.as_f64().ok_or_else(|| format!("holds {n} at {pointer:?}")),
        Some(Value::Array(items)) => Ok(items.len() as f64),
        Some(other) => Err(format!("holds {other} at {pointer:?}, not a number or a list")),
        None => Err(format!("has nothing at {pointer:?}")),
    }
}

type Answer = (u16, Option<String>, Option<String>, String);

async fn read(sent: impl Future<Output = reqwest::Result<reqwest::Response>>) -> reqwest::Result<Answer> {
    let response = sent.await?;
    let header = |name: &str| response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let (status, retry_after, location) =
        (response.status().as_u16(), header("retry-after"), header("location"));
    let body = response.text().await?;
    Ok((status, retry_after, location, body))
}

fn shown(body: &str) -> String {
    body.chars().take(BODY_SHOWN).collect()
}

/// An error in one line, with its cause (reqwest's own says only "error sending request").
fn plain(error: &reqwest::Error) -> String {
    let mut said = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        said.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    said
}

/// How long to wait before asking again: the `Retry-After` in seconds (capped), else a moment.
fn delay(retry_after: Option<&str>) -> Duration {
    match retry_after.and_then(|v| v.trim().parse::<u64>().ok()) {
        Some(seconds) => Duration::from_secs(seconds).min(LONGEST_WAIT),
        None => Duration::from_millis(200),
    }
}

/// Whether a `Retry-After` value is one RFC 9110 section 10.2.3 allows: delay-seconds or an
/// HTTP-date.
fn valid_retry_after(value: &str) -> bool {
    let value = value.trim();
    (!value.is_empty() && value.bytes().all(|b| b.is_ascii_digit())) || httpdate(value)
}

/// An IMF-fixdate, as `Sun, 06 Nov 1994 08:49:37 GMT`, the form RFC 9110 section 5.6.7 asks
/// senders to use.
fn httpdate(value: &str) -> bool {
    let parts: Vec<&str> = value.split(' ').collect();
    let days = ["Mon,", "Tue,", "Wed,", "Thu,", "Fri,", "Sat,", "Sun,"];
    let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let digits = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit());
    matches!(&parts[..], [day, dd, mon, yyyy, time, "GMT"]
        if days.contains(day) && digits(dd, 2) && months.contains(mon) && digits(yyyy, 4)
            && time.split(':').count() == 3 && time.split(':').all(|t| digits(t, 2)))
}

fn status(e: &Exchange) -> String {
    match e.status {
        Some(s) => s.to_string(),
        None => e.note.clone().unwrap_or_else(|| "no answer".into()),
    }
}

/// Draft section 2.7: a documented idempotent operation without the header gets 400.
async fn missing_key(p: &mut Prober) -> CheckResult {
    let body = p.body();
    let e = p.post(KeyHeader::None, body).await;
    let found = match e.status {
        Some(400) => (Verdict::Pass, "refused with 400".to_owned()),
        Some(s) if (200..300).contains(&s) => (
            Verdict::Warn,
            format!(
                "accepted with {s} without a key: a client retrying after a timeout would apply it twice \
                 (the draft says 400 where the operation requires the key)"
            ),
        ),
        _ => (Verdict::Warn, format!("answered {}; the draft says 400", status(&e))),
    };
    p.result("missing_key", "draft-ietf-httpapi-idempotency-key-header-06, section 2.7", found)
}

/// Draft section 2.1: the key is one sf-string; 255 characters is Stripe's longest key.
async fn bad_key(p: &mut Prober) -> CheckResult {
    let mut accepted = Vec::new();
    let mut other = Vec::new();
    let long = format!("{KEY_PREFIX}{}", "x".repeat(256 - KEY_PREFIX.len()));
    let cases = [
        ("an empty key", KeyHeader::One(String::new())),
        ("a 256-character key", KeyHeader::One(long)),
        ("two key headers", KeyHeader::Two(p.key("bad_key"), p.key("bad_key"))),
    ];
    for (what, keys) in cases {
        let body = p.body();
        let e = p.post(keys, body).await;
        match e.status {
            Some(400) => {}
            Some(s) if (200..300).contains(&s) => accepted.push(format!("{what}: {s}")),
            _ => other.push(format!("{what}: {}", status(&e))),
        }
    }
    let found = match (accepted.is_empty(), other.is_empty()) {
        (true, true) => {
            (Verdict::Pass, "an empty key, a 256-character key and two key headers: each 400".into())
        }
        (false, _) => (
            Verdict::Fail,
            format!(
                "accepted a malformed key ({}): the server cannot tell its retries apart",
                accepted.join("; ")
            ),
        ),
        (true, false) => (Verdict::Warn, format!("refused, but not with 400: {}", other.join("; "))),
    };
    p.result(
        "bad_key",
        "draft-ietf-httpapi-idempotency-key-header-06, section 2.1; Stripe: keys up to 255 characters",
        found,
    )
}

/// The change in the effect across `before`..now, said.
fn one_effect(before: Option<f64>, after: Option<f64>) -> Option<(bool, String)> {
    let (before, after) = (before?, after?);
    let delta = after - before;
    Some((delta == 1.0, format!("the effect went from {before} to {after} ({delta:+})")))
}

const NOT_VERIFIED: &str = "answers identical, effect not verified (give --effect to count it)";

/// Draft section 2.6: a repeat of a key with the same body gets the first answer again and is
/// not applied again.
async fn replay(p: &mut Prober) -> CheckResult {
    let before = p.effect().await.ok().flatten();
    let (key, body) = (p.key("replay"), p.body());
    let first = p.post(KeyHeader::One(key.clone()), body.clone()).await;
    let again = p.post(KeyHeader::One(key), body).await;
    let after = p.effect().await.ok().flatten();
    let same = first.status == again.status && first.answer == again.answer;
    let found = match (same, one_effect(before, after)) {
        (false, _) => (
            Verdict::Fail,
            format!(
                "the repeat got another answer: {} then {} (bodies {})",
                status(&first),
                status(&again),
                if first.answer == again.answer { "identical" } else { "different" }
            ),
        ),
        (true, Some((true, said))) => {
            (Verdict::Pass, format!("the same {} and body again; {said}", status(&first)))
        }
        (true, Some((false, said))) => {
            (Verdict::Fail, format!("the same answer, but {said}: applied more than once"))
        }
        (true, None) => {
            (Verdict::Pass, format!("the same {} and body again; {NOT_VERIFIED}", status(&first)))
        }
    };
    p.result("replay", "draft-ietf-httpapi-idempotency-key-header-06, section 2.6", found)
}

/// Draft section 2.7: a key reused with another body is refused (422 in the draft; Stripe
/// answers 400, others 409): the code is reported, any 4xx passes.
async fn other_body(p: &mut Prober) -> CheckResult {
    let before = p.effect().await.ok().flatten();
    let key = p.key("other_body");
    let (body, other) = (p.body(), p.body());
    let first = p.post(KeyHeader::One(key.clone()), body).await;
    let reused = p.send(KeyHeader::One(key), vec![other], None, true).await.remove(0);
    let after = p.effect().await.ok().flatten();
    let effect = one_effect(before, after);
    let found = match reused.status {
        Some(s) if (400..500).contains(&s) => match effect {
            Some((false, said)) => (Verdict::Fail, format!("refused with {s}, but {said}")),
            _ => {
                let code = if s == 422 {
                    "422, the draft's code".to_owned()
                } else {
                    format!("{s} (the draft says 422)")
                };
                let effect = effect.map_or("effect not verified".to_owned(), |(_, said)| said);
                (Verdict::Pass, format!("refused with {code}; {effect}"))
            }
        },
        _ => (
            Verdict::Fail,
            format!(
                "the same key with another body got {} after {}: a client's bug that reuses a key \
                 would go unnoticed",
                status(&reused),
                status(&first)
            ),
        ),
    };
    p.result("other_body", "draft-ietf-httpapi-idempotency-key-header-06, section 2.7", found)
}

/// Draft sections 2.6 and 2.7: copies of one request at once are applied once; the others get
/// 409 while the first is at work, or the stored answer.
async fn concurrent(p: &mut Prober) -> CheckResult {
    let before = p.effect().await.ok().flatten();
    let (key, body) = (p.key("concurrent"), p.body());
    let answers = p.send(KeyHeader::One(key), vec![body; CONCURRENT], None, false).await;
    let after = p.effect().await.ok().flatten();
    let statuses: Vec<String> = answers.iter().map(status).collect();
    let conflicts = answers.iter().filter(|e| e.status == Some(409)).count();
    let successes: Vec<&Exchange> = answers.iter().filter(|e| e.success()).collect();
    let bodies_differ = successes.windows(2).any(|w| w[0].answer != w[1].answer);
    let said = format!("{CONCURRENT} at once answered {} ({conflicts} with 409)", statuses.join(", "));
    let found = match one_effect(before, after) {
        Some((true, effect)) => (Verdict::Pass, format!("{said}; {effect}")),
        Some((false, effect)) => (Verdict::Fail, format!("{said}; {effect}: applied more than once")),
        None if bodies_differ => {
            (Verdict::Fail, format!("{said}; the successes' bodies differ, as when each was applied"))
        }
        None if successes.is_empty() => (Verdict::Warn, format!("{said}; none succeeded")),
        None => (Verdict::Pass, format!("{said}; {NOT_VERIFIED}")),
    };
    p.result("concurrent", "draft-ietf-httpapi-idempotency-key-header-06, sections 2.6 and 2.7", found)
}

/// Draft sections 2.5 and 2.6: a client that timed out sends the request again with its key,
/// and the server applies it once (the stored result, or a conflict while the first is in work).
async fn timeout_retry(p: &mut Prober) -> CheckResult {
    let before = p.effect().await.ok().flatten();
    let (key, body) = (p.key("timeout_retry"), p.body());
    p.send(KeyHeader::One(key.clone()), vec![body.clone()], Some(ABANDON_AFTER), false).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let again = p.post(KeyHeader::One(key), body).await;
    let after = p.effect().await.ok().flatten();
    let found = match (again.success(), one_effect(before, after)) {
        (false, _) => {
            (Verdict::Fail, format!("the retry after the abandoned request got {}", status(&again)))
        }
        (true, Some((true, said))) => (Verdict::Pass, format!("the retry got {}; {said}", status(&again))),
        (true, Some((false, said))) => {
            (Verdict::Fail, format!("the retry got {}, but {said}", status(&again)))
        }
        (true, None) => (
            Verdict::Pass,
            format!("the retry got {}; effect not verified (give --effect to count it)", status(&again)),
        ),
    };
    p.result("timeout_retry", "draft-ietf-httpapi-idempotency-key-header-06, sections 2.5 and 2.6", found)
}

/// A 409 says "not yet": with a `Retry-After` (RFC 9110 section 10.2.3) the client knows when
/// to ask again; the draft (section 2.7) leaves it out, so its absence is a warning.
fn conflict_retry_after(p: &mut Prober) -> CheckResult {
    let conflicts: Vec<Exchange> = p.all.iter().filter(|e| e.status == Some(409)).cloned().collect();
    let without =
        conflicts.iter().filter(|e| !e.retry_after.as_deref().is_some_and(valid_retry_after)).count();
    let found = match (conflicts.len(), without) {
        (0, _) => (Verdict::NotApplicable, "no 409 was seen".to_owned()),
        (n, 0) => (Verdict::Pass, format!("{n} answers 409, each with a Retry-After")),
        (n, w) => (
            Verdict::Warn,
            format!(
                "{w} of {n} answers 409 had no valid Retry-After: a client cannot tell when to ask again"
            ),
        ),
    };
    p.current = conflicts;
    p.result(
        "conflict_retry_after",
        "draft-ietf-httpapi-idempotency-key-header-06, section 2.7; RFC 9110, section 10.2.3",
        found,
    )
}

/// RFC 9110 section 15.6.4 (503) and RFC 6585 section 4 (429): a `Retry-After` tells clients
/// when to come back, so they do not all return at once.
fn retry_after(p: &mut Prober) -> CheckResult {
    let refusals: Vec<Exchange> =
        p.all.iter().filter(|e| matches!(e.status, Some(503 | 429))).cloned().collect();
    let bad: Vec<String> = refusals
        .iter()
        .filter(|e| !e.retry_after.as_deref().is_some_and(valid_retry_after))
        .map(|e| {
            format!(
                "{} with {}",
                status(e),
                e.retry_after.as_deref().map_or("no Retry-After".into(), |v| format!("Retry-After {v:?}"))
            )
        })
        .collect();
    let found = match (refusals.len(), bad.len()) {
        (0, _) => (Verdict::NotApplicable, "no 503 or 429 was seen".to_owned()),
        (n, 0) => (Verdict::Pass, format!("{n} answers 503 or 429, each with a valid Retry-After")),
        (n, _) => (
            Verdict::Fail,
            format!(
                "{} of {n} answers 503 or 429 without a valid Retry-After: {}",
                bad.len(),
                bad.join("; ")
            ),
        ),
    };
    p.current = refusals;
    p.result("retry_after", "RFC 9110, sections 10.2.3 and 15.6.4; RFC 6585, section 4", found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_template_must_be_json_and_numbers_each_request() {
        let template = BodyTemplate::parse(r#"{"order": {n}}"#).unwrap();
        assert_eq!(template.render(7), r#"{"order": 7}"#);
        assert!(BodyTemplate::parse("order=1").unwrap_err().contains("not JSON"));
    }

    #[test]
    fn retry_after_takes_seconds_or_an_http_date() {
        assert!(valid_retry_after("1"));
        assert!(valid_retry_after("Sun, 06 Nov 1994 08:49:37 GMT"));
        assert!(!valid_retry_after("-1"));
        assert!(!valid_retry_after("soon"));
        assert!(!valid_retry_after(""));
    }

    #[test]
    fn an_effect_is_a_number_or_a_list_s_length() {
        assert_eq!(count(r#"{"counters": {"applied": 3}}"#, "/counters/applied"), Ok(3.0));
        assert_eq!(count("[1, 2]", ""), Ok(2.0));
        assert!(count("<html>", "").unwrap_err().contains("JSON"));
    }
}
