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
//!
//! A check judges only what it could probe. A run first sends a probe (the body, a fresh key)
//! and goes on only when it is accepted (2xx): an API that refuses the body refuses every
//! request, and a refusal tells nothing of its keys. Where a check's requests cannot decide
//! (an error repeated is not a replay, an effect that did not move shows no second apply, an
//! operation still in progress when the wait ran out), its verdict is "not judged", with why.

use std::time::{Duration, Instant};

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
/// How long `timeout_retry` waits out an operation still in progress (409), unless told.
pub const DEFAULT_IN_PROGRESS_WAIT: Duration = Duration::from_secs(10);
/// A 409 or 503 is asked again at most this many times, after its `Retry-After` (capped).
const ASK_AGAIN: usize = 3;
const LONGEST_WAIT: Duration = Duration::from_secs(3);
/// Most characters of a refused probe's answer quoted back to the person.
const REFUSAL_SHOWN: usize = 200;
/// Most characters of an answer's body kept in the report.
const BODY_SHOWN: usize = 300;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Pass,
    Warn,
    Fail,
    NotApplicable,
    /// The requests could not decide (the probe was refused, an error was repeated, the effect
    /// did not move...): not a pass, and the run exits non-zero.
    NotJudged,
}

/// The body to send, as the user wrote it: JSON once every `{n}` is replaced with a number,
/// which makes each request's body its own.
#[derive(Debug, Clone)]
pub struct BodyTemplate(String);

/// The field added to a JSON object body without `{n}`, so that the checks that need two
/// different bodies under one key have them.
pub const VARIANT_FIELD: &str = "retrylab_check_variant";

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

    /// A body that differs for each `n`: the template's own when it holds `{n}`, else a JSON
    /// object with [`VARIANT_FIELD`] set to `n`. Anything else cannot be varied, and says why.
    pub fn varied(&self, n: u64) -> Result<String, String> {
        if self.0.contains("{n}") {
            return Ok(self.render(n));
        }
        match serde_json::from_str::<Value>(&self.0) {
            Ok(Value::Object(mut fields)) => {
                fields.insert(VARIANT_FIELD.into(), n.into());
                Ok(Value::Object(fields).to_string())
            }
            _ => Err("the --body has no {n} and is not a JSON object, so no second body can be made from \
                 it; put {n} where a number may differ between requests"
                .into()),
        }
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
    /// How long `timeout_retry` waits out an operation still in progress before it judges.
    pub in_progress_wait: Duration,
    /// Records the plan without sending anything.
    pub dry_run: bool,
    /// How an https URL's certificate is trusted.
    pub tls: Trust,
}

/// How `check` trusts an https API's certificate, as curl does: the platform's roots by default,
/// only the certificates of a file (`--cacert`), or none at all (`--insecure`, curl's `-k`).
#[derive(Debug, Clone, Default)]
pub enum Trust {
    #[default]
    Platform,
    Only(Vec<reqwest::Certificate>),
    Insecure,
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
    /// The first request: the body with a fresh key, which must be accepted for any check to
    /// be judged.
    pub probe: Exchange,
    /// Set when the probe was not accepted: then every check is not judged.
    pub refused: Option<Refusal>,
    pub checks: Vec<CheckResult>,
    pub keys: Vec<String>,
    pub locations: Vec<String>,
}

/// The probe's answer when it was not a success.
#[derive(Debug, Clone, Serialize)]
pub struct Refusal {
    pub status: u16,
    /// The start of the answer's body.
    pub answer: String,
}

impl Refusal {
    /// What to tell the person, in a sentence.
    pub fn said(&self, url: &str) -> String {
        let what = if self.status >= 500 { "failed on" } else { "refused" };
        let answer = self.answer.split_whitespace().collect::<Vec<_>>().join(" ");
        format!(
            "{url} {what} the probe's body with {}: {answer}; no check could be judged. Pass a --body the \
             API accepts (each {{n}} in it becomes a number of the request's own)",
            self.status
        )
    }
}

/// Sends the requests and keeps what the checks need of them.
struct Prober {
    http: reqwest::Client,
    target: Target,
    run: String,
    sent: usize,
    /// Each body's `{n}` is this plus a count: random, so no run repeats another's numbers.
    base: u64,
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
        .timeout(Duration::from_secs(10));
    let http = match &target.tls {
        Trust::Platform => http,
        Trust::Only(roots) => http.tls_certs_only(roots.iter().cloned()),
        Trust::Insecure => http.danger_accept_invalid_certs(true),
    };
    let http = http.build().map_err(|e| format!("cannot make an HTTP client: {}", plain(&e)))?;
    let run = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    let mut p = Prober {
        http,
        target,
        run,
        sent: 0,
        base: rand::random_range(1_000_000..1_000_000_000),
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
    let probe = {
        let (key, body) = (p.key("probe"), p.body());
        p.post(KeyHeader::One(key), body).await
    };
    p.current.clear();
    if !probe.answered() && !p.target.dry_run {
        let note = probe.note.as_deref().unwrap_or("no answer");
        return Err(format!("{} does not answer: {note}", p.target.url));
    }
    let url = p.target.url.to_string();
    if let Some(status) = probe.status.filter(|s| !(200..300).contains(s)) {
        let answer = probe.answer.as_deref().unwrap_or_default().chars().take(REFUSAL_SHOWN).collect();
        let refused = Refusal { status, answer };
        let detail = format!(
            "not judged: the probe's body was refused with {status}, so the API's answers say nothing of its keys"
        );
        let checks = CHECKS
            .iter()
            .map(|&(id, source)| CheckResult {
                id,
                verdict: Verdict::NotJudged,
                detail: detail.clone(),
                source,
                requests: Vec::new(),
            })
            .collect();
        return Ok(Report {
            url,
            probe,
            refused: Some(refused),
            checks,
            keys: p.keys,
            locations: p.locations,
        });
    }
    let mut checks = vec![missing_key(&mut p).await];
    checks.push(bad_key(&mut p).await);
    checks.push(replay(&mut p).await);
    checks.push(other_body(&mut p).await);
    checks.push(concurrent(&mut p).await);
    checks.push(timeout_retry(&mut p).await);
    checks.push(conflict_retry_after(&mut p));
    checks.push(retry_after(&mut p));
    Ok(Report { url, probe, refused: None, checks, keys: p.keys, locations: p.locations })
}

const DRAFT_2_1: &str =
    "draft-ietf-httpapi-idempotency-key-header-06, section 2.1; Stripe: keys up to 255 characters";
const DRAFT_2_5_6: &str = "draft-ietf-httpapi-idempotency-key-header-06, sections 2.5 and 2.6";
const DRAFT_2_6: &str = "draft-ietf-httpapi-idempotency-key-header-06, section 2.6";
const DRAFT_2_6_7: &str = "draft-ietf-httpapi-idempotency-key-header-06, sections 2.6 and 2.7";
const DRAFT_2_7: &str = "draft-ietf-httpapi-idempotency-key-header-06, section 2.7";
const DRAFT_2_7_RFC_9110: &str =
    "draft-ietf-httpapi-idempotency-key-header-06, section 2.7; RFC 9110, section 10.2.3";
const RFC_9110_6585: &str = "RFC 9110, sections 10.2.3 and 15.6.4; RFC 6585, section 4";

/// Every check, in the order a run makes them, with its rule's source.
const CHECKS: [(&str, &str); 8] = [
    ("missing_key", DRAFT_2_7),
    ("bad_key", DRAFT_2_1),
    ("replay", DRAFT_2_6),
    ("other_body", DRAFT_2_7),
    ("concurrent", DRAFT_2_6_7),
    ("timeout_retry", DRAFT_2_5_6),
    ("conflict_retry_after", DRAFT_2_7_RFC_9110),
    ("retry_after", RFC_9110_6585),
];

impl Prober {
    fn key(&mut self, check: &str) -> String {
        let key = format!("{KEY_PREFIX}{}-{check}-{}", self.run, self.keys.len() + 1);
        self.keys.push(key.clone());
        key
    }

    fn body(&mut self) -> String {
        self.bodies += 1;
        self.target.body.render(self.base + self.bodies)
    }

    /// A body unlike every other of the run, or why none can be made.
    fn other_body(&mut self) -> Result<String, String> {
        self.bodies += 1;
        self.target.body.varied(self.base + self.bodies)
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
                            _ => format!("no answer: {}{}", plain(&error), trust_advice(&url, &error)),
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
            Err(error) => Err(format!("no answer: {}{}", plain(error), trust_advice(&effect.url, error))),
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
                Verdict::NotJudged,
                format!(
                    "not judged: the cap of {} requests (--max-requests) was reached first",
                    self.target.max_requests
                ),
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
/// What to do when an https URL's certificate was not trusted (said after the error).
fn trust_advice(url: &Url, error: &reqwest::Error) -> &'static str {
    if url.scheme() == "https" && plain(error).contains("certificate") {
        "; to trust its certificate pass --cacert FILE (the certificate or its CA, PEM), or --insecure \
         to skip the check for a self-signed one"
    } else {
        ""
    }
}

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
    p.result("missing_key", DRAFT_2_7, found)
}

/// Draft section 2.1: the key is one sf-string; 255 characters is Stripe's longest key.
async fn bad_key(p: &mut Prober) -> CheckResult {
    let mut accepted = Vec::new();
    let mut other = Vec::new();
    // The run's own, like every key it sends: a server that keeps it cannot answer a later run.
    let mut long = format!("{KEY_PREFIX}{}-", p.run);
    long.push_str(&"x".repeat(256 - long.len()));
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
    p.result("bad_key", DRAFT_2_1, found)
}

/// What the effect's count says of the requests between two readings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Applied {
    Once,
    /// The count did not move: nothing was applied, or the effect does not count it (yet).
    Not,
    MoreThanOnce,
    /// Down, or by a fraction: something else moves the count too.
    Unclear,
}

/// The change in the effect across `before`..`after`, said; `None` without an effect.
fn applied(before: Option<f64>, after: Option<f64>) -> Option<(Applied, String)> {
    let (before, after) = (before?, after?);
    let delta = after - before;
    let applied = if delta == 1.0 {
        Applied::Once
    } else if delta == 0.0 {
        Applied::Not
    } else if delta > 1.0 && delta.fract() == 0.0 {
        Applied::MoreThanOnce
    } else {
        Applied::Unclear
    };
    Some((applied, format!("the effect went from {before} to {after} ({delta:+})")))
}

const NOT_VERIFIED: &str = "effect not verified (give --effect to count it)";

/// A verdict on answers that were right, by what the effect shows: once passes, more than once
/// fails, and a count that did not move (or moved oddly) cannot tell.
fn by_effect(said: String, effect: Option<(Applied, String)>) -> (Verdict, String) {
    match effect {
        None => (Verdict::Pass, format!("{said}; {NOT_VERIFIED}")),
        Some((Applied::Once, moved)) => (Verdict::Pass, format!("{said}; {moved}")),
        Some((Applied::MoreThanOnce, moved)) => {
            (Verdict::Fail, format!("{said}; {moved}: applied more than once"))
        }
        Some((Applied::Not, moved)) => (
            Verdict::NotJudged,
            format!(
                "not judged: {said}; {moved}: not applied, so the count cannot show a second apply \
                 (does the effect count this operation, and at once?)"
            ),
        ),
        Some((Applied::Unclear, moved)) => (
            Verdict::NotJudged,
            format!("not judged: {said}; {moved}: something besides these requests moves the count"),
        ),
    }
}

/// Draft section 2.6: a repeat of a key with the same body gets the first answer again and is
/// not applied again. Only a success is stored to be replayed: an error answered twice is no
/// replay.
async fn replay(p: &mut Prober) -> CheckResult {
    let before = p.effect().await.ok().flatten();
    let (key, body) = (p.key("replay"), p.body());
    let first = p.post(KeyHeader::One(key.clone()), body.clone()).await;
    let again = p.post(KeyHeader::One(key), body).await;
    let after = p.effect().await.ok().flatten();
    let same = first.status == again.status && first.answer == again.answer;
    let found = if !first.success() {
        (
            Verdict::NotJudged,
            format!(
                "not judged: the first request got {} then {}: no success to replay, and an error \
                 answered twice is not a replay",
                status(&first),
                status(&again)
            ),
        )
    } else if !same {
        (
            Verdict::Fail,
            format!(
                "the repeat got another answer: {} then {} (bodies {})",
                status(&first),
                status(&again),
                if first.answer == again.answer { "identical" } else { "different" }
            ),
        )
    } else {
        by_effect(format!("the same {} and body again", status(&first)), applied(before, after))
    };
    p.result("replay", DRAFT_2_6, found)
}

/// Draft section 2.7: a key reused with another body is refused (422 in the draft; Stripe
/// answers 400, others 409): the code is reported, any 4xx passes, once the other body alone
/// (a fresh key) is shown to be accepted, so that the refusal is the key's.
async fn other_body(p: &mut Prober) -> CheckResult {
    let body = p.body();
    let other = match p.other_body() {
        Ok(other) => other,
        Err(why) => {
            return p.result("other_body", DRAFT_2_7, (Verdict::NotJudged, format!("not judged: {why}")));
        }
    };
    let before = p.effect().await.ok().flatten();
    let key = p.key("other_body");
    let first = p.post(KeyHeader::One(key.clone()), body).await;
    if !first.success() {
        let why = format!("not judged: the first request got {}: no key was stored to reuse", status(&first));
        return p.result("other_body", DRAFT_2_7, (Verdict::NotJudged, why));
    }
    let reused = p.post(KeyHeader::One(key), other.clone()).await;
    let after = p.effect().await.ok().flatten();
    let found = match reused.status {
        Some(s) if (400..500).contains(&s) => {
            let alone = p.key("other_body");
            let alone = p.post(KeyHeader::One(alone), other).await;
            let code = if s == 422 {
                "422, the draft's code".to_owned()
            } else {
                format!("{s} (the draft says 422)")
            };
            if alone.success() {
                by_effect(
                    format!("refused with {code}; the other body alone got {}", status(&alone)),
                    applied(before, after),
                )
            } else {
                (
                    Verdict::NotJudged,
                    format!(
                        "not judged: refused with {code}, but the other body alone (a fresh key) got {} too: \
                         the refusal need not be the reused key's",
                        status(&alone)
                    ),
                )
            }
        }
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
    p.result("other_body", DRAFT_2_7, found)
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
    let effect = applied(before, after);
    let found = if successes.is_empty() {
        (
            Verdict::NotJudged,
            format!("not judged: {said}; none succeeded, so none shows how often it was applied"),
        )
    } else if effect.is_none() && bodies_differ {
        (Verdict::Fail, format!("{said}; the successes' bodies differ, as when each was applied"))
    } else {
        by_effect(said, effect)
    };
    p.result("concurrent", DRAFT_2_6_7, found)
}

/// Draft sections 2.5 and 2.6: a client that timed out sends the request again with its key,
/// and the server applies it once. While the first is still in work the draft's answer is 409
/// (section 2.7): the check asks again, after the `Retry-After` or its own growing wait, until
/// the target's `in_progress_wait` has passed, and only then judges.
async fn timeout_retry(p: &mut Prober) -> CheckResult {
    let before = p.effect().await.ok().flatten();
    let (key, body) = (p.key("timeout_retry"), p.body());
    p.send(KeyHeader::One(key.clone()), vec![body.clone()], Some(ABANDON_AFTER), false).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let bound = p.target.in_progress_wait;
    let started = Instant::now();
    let (mut step, mut in_progress) = (FIRST_STEP, 0);
    let again = loop {
        let e = p.send(KeyHeader::One(key.clone()), vec![body.clone()], None, false).await.remove(0);
        let waited = started.elapsed();
        if e.status != Some(409) || e.note.is_some() || waited >= bound {
            break e;
        }
        in_progress += 1;
        tokio::time::sleep(in_progress_delay(e.retry_after.as_deref(), step).min(bound - waited)).await;
        step = (step * 2).min(LONGEST_STEP);
    };
    let after = p.effect().await.ok().flatten();
    let waited = match in_progress {
        0 => String::new(),
        n => format!(" after {n} answers 409 (in progress) over {} ms", started.elapsed().as_millis()),
    };
    let found = if again.status == Some(409) {
        (
            Verdict::NotJudged,
            format!(
                "not judged: still in progress (409) after {} ms of asking, the bound \
                 (--in-progress-wait-ms); the operation may yet finish",
                bound.as_millis()
            ),
        )
    } else if !again.success() {
        (Verdict::Fail, format!("the retry after the abandoned request got {}{waited}", status(&again)))
    } else {
        by_effect(format!("the retry got {}{waited}", status(&again)), applied(before, after))
    };
    p.result("timeout_retry", DRAFT_2_5_6, found)
}

/// `timeout_retry`'s first wait on a 409, doubled each time up to [`LONGEST_STEP`]: eight asks
/// fill the default 10 s.
const FIRST_STEP: Duration = Duration::from_millis(200);
const LONGEST_STEP: Duration = Duration::from_secs(2);

/// How long to wait on a 409 before asking again: its `Retry-After` in seconds, but not less
/// than `step` (a `Retry-After: 0` must not make the check spin).
fn in_progress_delay(retry_after: Option<&str>, step: Duration) -> Duration {
    let said = retry_after.and_then(|v| v.trim().parse::<u64>().ok()).map(Duration::from_secs);
    said.unwrap_or_default().max(step)
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
    p.result("conflict_retry_after", DRAFT_2_7_RFC_9110, found)
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
    p.result("retry_after", RFC_9110_6585, found)
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
    fn a_body_without_n_is_varied_by_a_field_of_its_own_or_says_why_not() {
        let with_n = BodyTemplate::parse(r#"{"order": {n}}"#).unwrap();
        assert_eq!(with_n.varied(7), Ok(r#"{"order": 7}"#.to_owned()));
        let object = BodyTemplate::parse(r#"{"sku": "book"}"#).unwrap();
        let varied: Value = serde_json::from_str(&object.varied(7).unwrap()).unwrap();
        assert_eq!(varied, serde_json::json!({"sku": "book", VARIANT_FIELD: 7}));
        let list = BodyTemplate::parse(r#"["book"]"#).unwrap();
        assert!(list.varied(7).unwrap_err().contains("put {n}"));
    }

    #[test]
    fn an_operation_in_progress_is_asked_again_after_its_retry_after_or_a_growing_step() {
        let step = Duration::from_millis(400);
        assert_eq!(in_progress_delay(Some("2"), step), Duration::from_secs(2));
        assert_eq!(in_progress_delay(Some("0"), step), step, "a Retry-After of 0 does not spin");
        assert_eq!(in_progress_delay(None, step), step);
        assert_eq!(in_progress_delay(Some("soon"), step), step);
    }

    #[test]
    fn a_count_that_did_not_move_is_not_applied_never_applied_twice() {
        assert_eq!(applied(Some(3.0), Some(4.0)).unwrap().0, Applied::Once);
        assert_eq!(applied(Some(3.0), Some(3.0)).unwrap().0, Applied::Not);
        assert_eq!(applied(Some(3.0), Some(5.0)).unwrap().0, Applied::MoreThanOnce);
        assert_eq!(applied(Some(3.0), Some(2.0)).unwrap().0, Applied::Unclear);
        assert_eq!(by_effect("ok".into(), applied(Some(3.0), Some(3.0))).0, Verdict::NotJudged);
        assert_eq!(applied(None, Some(3.0)), None);
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
