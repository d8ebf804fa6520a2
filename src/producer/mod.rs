//! The producer: the client side of the lab. It delivers each message to the lab's downstream
//! route over real HTTP, exactly as an outside client would, following the lab's retry policy:
//! a stable idempotency key on every attempt, a per-attempt timeout, jittered waits with
//! `Retry-After` as a floor, and the dead-letter queue when the budget is spent.

mod redrive;
mod traffic;

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand::rngs::StdRng;
use reqwest::header::{CONTENT_TYPE, RETRY_AFTER};
use tokio::sync::Semaphore;
use tracing::Instrument;

use crate::dlq::Cause;
use crate::domain::MarkerKind;
use crate::domain::{AttemptEnd, Outcome};
use crate::lab::Lab;
use crate::metrics::Metrics;
use crate::retry::{self, Admission, Refused, Verdict};
use crate::store::{Store, StoreError};

/// Sends messages; cheap to clone.
#[derive(Clone)]
pub struct Producer {
    client: reqwest::Client,
    /// Connection slots shared by every lab, so many labs cannot exhaust the sockets.
    slots: Arc<Semaphore>,
    metrics: Arc<Metrics>,
    /// This server's own address: the producer never calls any other host.
    base_url: Arc<str>,
}

impl Producer {
    pub fn new(base_url: String, metrics: Arc<Metrics>, slots: usize) -> Result<Self, reqwest::Error> {
        let client = reqwest::Client::builder()
            // Loopback only: a proxy from the environment must not sit in between.
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        Ok(Producer { client, slots: Arc::new(Semaphore::new(slots)), metrics, base_url: base_url.into() })
    }

    /// Starts delivering the given messages, each in its own task the lab can stop.
    /// A message whose delivery is already running is left to it: one sender per message,
    /// even when a burst or a replay and a crash of the client meet.
    pub fn start(&self, lab: &Arc<Lab>, ids: Vec<u64>) {
        for id in ids {
            let (producer, lab_ref) = (self.clone(), lab.clone());
            let span = tracing::info_span!("delivery", lab = %lab.id, message = id);
            lab.spawn_delivery(id, || {
                tokio::spawn(
                    async move {
                        loop {
                            producer.deliver(&lab_ref, id).await;
                            if lab_ref.finish_delivery(id, tokio::task::id()) {
                                break;
                            }
                        }
                    }
                    .instrument(span),
                )
            });
        }
    }

    /// Resumes every delivery a dead client left unfinished, from the lab's record.
    pub fn resume(&self, lab: &Arc<Lab>, reason: &'static str) -> usize {
        let ids = lab.recover(reason);
        let count = ids.len();
        self.start(lab, ids);
        self.redrive(lab);
        count
    }

    /// "Crash the client": kills every delivery mid-flight without warning, reads the lab's
    /// messages back from the store, and resumes from what was durable. A retry loop that kept
    /// its progress only in memory would have lost every message in flight here.
    pub async fn crash_and_recover(&self, lab: &Arc<Lab>, store: &Store) -> Result<usize, StoreError> {
        lab.abort_deliveries();
        lab.mark(MarkerKind::Crash, "client crashed; recovering from the store");
        let read = async {
            lab.persisted()
                .await
                .map_err(|_| StoreError::Failed("the store did not confirm in time".into()))?;
            let (reader, id) = (store.clone(), lab.id.to_string());
            tokio::task::spawn_blocking(move || reader.load_messages(&id))
                .await
                .map_err(|e| StoreError::Failed(format!("reading the store failed: {e}")))?
        };
        match read.await {
            Ok((messages, dead_letters)) => {
                lab.reload(messages, dead_letters);
                Ok(self.resume(lab, "client crash"))
            }
            Err(e) => {
                // The deliveries must not stay stopped because the store could not be read:
                // they resume from the lab's own record, and the caller hears of the failure.
                self.resume(lab, "client crash");
                Err(e)
            }
        }
    }

    /// Delivers one message from where it stands (its first attempt, or where a crash left it)
    /// until it is delivered or its round ends: attempts used up, the time budget out, the
    /// breaker open on the last attempt (or on any, when a refusal gives up), the retry budget
    /// spent, or a permanent error.
    async fn deliver(&self, lab: &Lab, id: u64) {
        let Some(resume) = lab.resume_point(id) else { return };
        let url = format!("{}/labs/{}/downstream", self.base_url, lab.id);
        // The same body on every attempt: the downstream refuses a key reused with another.
        let body = crate::domain::Message::body(&lab.id, id);
        // A seeded policy draws each message's jitter from its own stream, so a run repeats;
        // each client's streams are its own (the first client's are those of a lone client).
        let client = lab.client_of(id) as u64;
        let mut rng = match lab.policy().seed {
            Some(seed) => StdRng::seed_from_u64(
                seed ^ client.wrapping_mul(0xD1B5_4A32_D192_ED03) ^ id.wrapping_mul(0x9E37_79B9_7F4A_7C15),
            ),
            None => StdRng::from_rng(&mut rand::rng()),
        };
        let mut previous_wait = resume.previous_wait_ms;
        let mut round_started_ms = resume.round_started_ms;
        if resume.delay_ms > 0 {
            // The rest of a wait a crash interrupted.
            tokio::time::sleep(Duration::from_millis(resume.delay_ms)).await;
        }
        for n in resume.next_n.. {
            let policy = lab.policy();
            if n > policy.max_attempts {
                // Only after a crash: the attempt that used up the budget was cut off.
                let spent = n - 1;
                let reason = format!("attempts used up ({spent}); last: interrupted by a client crash");
                self.dead_letter(lab, id, (Cause::AttemptsUsedUp, reason));
                break;
            }
            let sent = match lab.breaker_admit(id) {
                Admission::ShortCircuit => {
                    // Fails fast: no slot, no socket, no request.
                    if !lab.attempt_started(id, n, 0) {
                        return; // the lab was reset
                    }
                    Sent::short_circuited()
                }
                Admission::Send | Admission::Probe => {
                    let queued = Instant::now();
                    let Ok(slot) = lab.request_slots.acquire().await else { return };
                    let Ok(overall) = self.slots.acquire().await else { return };
                    if !lab.attempt_started(id, n, queued.elapsed().as_millis() as u64) {
                        return; // the lab was reset
                    }
                    if n == 1 {
                        lab.budget_first_attempt(id);
                    }
                    let started = Instant::now();
                    let mut sent = self.send(&url, &resume.key, &body, policy.timeout_ms).await;
                    sent.duration_ms = started.elapsed().as_millis() as u64;
                    drop((slot, overall));
                    lab.breaker_record(id, sent.outcome.is_failure(sent.status));
                    self.metrics.attempt(sent.label());
                    sent
                }
            };
            let round_started_ms =
                *round_started_ms.get_or_insert_with(|| lab.now_ms().saturating_sub(sent.duration_ms));
            let end = AttemptEnd {
                duration_ms: sent.duration_ms,
                status: sent.status,
                outcome: sent.outcome,
                replayed: sent.replayed,
                retry_after_s: sent.retry_after_s,
            };
            lab.attempt_finished(id, end);
            let last = sent.describe(policy.timeout_ms);
            match retry::classify(sent.outcome, sent.status) {
                Verdict::Delivered => {
                    lab.delivered(id);
                    self.metrics.message("delivered");
                    break;
                }
                Verdict::GiveUp => {
                    self.dead_letter(lab, id, (Cause::Permanent, format!("permanent error: {last}")));
                    break;
                }
                Verdict::Retry
                    if sent.outcome == Outcome::ShortCircuited
                        && policy.breaker.is_some_and(|b| b.refused == Refused::GiveUp) =>
                {
                    let reason = format!(
                        "circuit open: the breaker refused attempt {n}, and a refusal ends the round"
                    );
                    self.dead_letter(lab, id, (Cause::CircuitOpen, reason));
                    break;
                }
                Verdict::Retry if n >= policy.max_attempts => {
                    let ended = match sent.outcome {
                        Outcome::ShortCircuited => (
                            Cause::CircuitOpen,
                            format!("circuit open: the breaker refused attempt {n} of {n}"),
                        ),
                        _ => (Cause::AttemptsUsedUp, format!("attempts used up ({n}); last: {last}")),
                    };
                    self.dead_letter(lab, id, ended);
                    break;
                }
                Verdict::Retry => {
                    let wait = retry::plan_wait(
                        &policy.backoff(),
                        policy.retry_after_rule(),
                        n,
                        previous_wait,
                        sent.retry_after_s,
                        &mut rng,
                    );
                    let next_at = lab.now_ms() + wait.planned_ms;
                    let (budget_ms, budget) = lab.round_budget(&policy);
                    if next_at > round_started_ms.saturating_add(budget_ms) {
                        let reason = format!(
                            "time budget: the next attempt would start past {budget_ms} ms ({budget}); last: {last}"
                        );
                        self.dead_letter(lab, id, (Cause::TimeBudget, reason));
                        break;
                    }
                    if !lab.budget_allows_retry(id) {
                        let reason =
                            format!("retry budget spent: the client retried too much in 10 s; last: {last}");
                        self.dead_letter(lab, id, (Cause::RetryBudget, reason));
                        break;
                    }
                    lab.wait_scheduled(id, wait);
                    previous_wait = Some(wait.chosen_ms);
                    let waited = Instant::now();
                    tokio::time::sleep(Duration::from_millis(wait.planned_ms)).await;
                    self.metrics.waits.observe(waited.elapsed().as_secs_f64());
                }
            }
        }
    }

    fn dead_letter(&self, lab: &Lab, id: u64, reason: (Cause, String)) {
        lab.dead_lettered(id, reason);
        self.metrics.message("dead_lettered");
    }

    async fn send(&self, url: &str, key: &str, body: &str, timeout_ms: u64) -> Sent {
        let request = self
            .client
            .post(url)
            .header("Idempotency-Key", key)
            .header(CONTENT_TYPE, "application/json")
            .body(body.to_owned())
            .timeout(Duration::from_millis(timeout_ms));
        let response = match request.send().await {
            Ok(response) => response,
            Err(e) => return Sent::failed(&e),
        };
        let status = response.status().as_u16();
        let header = |name| response.headers().get(name).and_then(|v| v.to_str().ok());
        let replayed = header("idempotent-replayed") == Some("true");
        let retry_after_s = header(RETRY_AFTER.as_str()).and_then(retry::parse_retry_after);
        // The deadline covers the body too: a reply cut off mid-body is not a success.
        if let Err(e) = response.bytes().await {
            return Sent::failed(&e);
        }
        Sent {
            duration_ms: 0,
            status: Some(status),
            outcome: Outcome::of_status(status),
            replayed,
            retry_after_s,
        }
    }
}

/// What one attempt brought back.
struct Sent {
    duration_ms: u64,
    status: Option<u16>,
    outcome: Outcome,
    replayed: bool,
    retry_after_s: Option<u64>,
}

impl Sent {
    fn failed(error: &reqwest::Error) -> Self {
        let outcome = if error.is_timeout() { Outcome::Timeout } else { Outcome::TransportError };
        Sent { duration_ms: 0, status: None, outcome, replayed: false, retry_after_s: None }
    }

    /// The breaker was open: nothing was sent, and it took no time.
    fn short_circuited() -> Self {
        Sent {
            duration_ms: 0,
            status: None,
            outcome: Outcome::ShortCircuited,
            replayed: false,
            retry_after_s: None,
        }
    }

    /// The attempt's status as a metric label.
    fn label(&self) -> String {
        match (self.outcome, self.status) {
            (_, Some(status)) => status.to_string(),
            (outcome, None) => outcome_name(outcome).into(),
        }
    }

    fn describe(&self, timeout_ms: u64) -> String {
        match (self.outcome, self.status) {
            (_, Some(status)) => format!("HTTP {status}"),
            (Outcome::Timeout, None) => format!("no answer within {timeout_ms} ms"),
            (Outcome::ShortCircuited, None) => "short-circuited by the open breaker".into(),
            (Outcome::Interrupted, None) => "the client died mid-attempt".into(),
            (_, None) => "connection failed".into(),
        }
    }
}

/// An outcome without an answer, named as it serializes.
fn outcome_name(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Timeout => "timeout",
        Outcome::ShortCircuited => "short_circuited",
        Outcome::Interrupted => "interrupted",
        _ => "transport_error",
    }
}
