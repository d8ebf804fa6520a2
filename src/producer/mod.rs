//! The producer: the client side of the lab. It delivers each message to the lab's downstream
//! route over real HTTP, exactly as an outside client would, following the lab's retry policy:
//! a stable idempotency key on every attempt, a per-attempt timeout, jittered waits with
//! `Retry-After` as a floor, and the dead-letter queue when the budget is spent.
//!
//! A message's round has a shape (`round::Shape`): sequential (`round`) or hedged (`hedged`);
//! `deliver` meets both the same way. `traffic` drives a lab's steady traffic, `redrive` sends
//! dead letters again.

mod hedged;
mod redrive;
mod round;
mod traffic;

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand::rngs::StdRng;
use reqwest::header::{CONTENT_TYPE, RETRY_AFTER};
use tokio::sync::Semaphore;
use tracing::Instrument;

use crate::client::attempt::Next;
use crate::domain::{AttemptEnd, MarkerKind, Outcome, Pushback};
use crate::lab::Lab;
use crate::metrics::Metrics;
use crate::retry;
use crate::store::{Store, StoreError};
use round::{Delivery, Shape};

/// Connections to the lab's own endpoint kept open while idle.
const IDLE_CONNECTIONS: usize = 32;

/// Sends messages; cheap to clone.
#[derive(Clone)]
pub struct Producer {
    /// The HTTP client every delivery sends with (reqwest's; one per server, pooled).
    http: reqwest::Client,
    /// Connection slots shared by every lab, so many labs cannot exhaust the sockets.
    slots: Arc<Semaphore>,
    metrics: Arc<Metrics>,
    /// This server's own address: the producer never calls any other host.
    base_url: Arc<str>,
}

impl Producer {
    pub fn new(base_url: String, metrics: Arc<Metrics>, slots: usize) -> Result<Self, reqwest::Error> {
        let http = reqwest::Client::builder()
            // Loopback only: a proxy from the environment must not sit in between.
            .no_proxy()
            // Plain http to the lab's own endpoint: no certificate is ever read, so a host
            // without CA certificates (the slim runtime image) still makes clients.
            .tls_certs_only([])
            .redirect(reqwest::redirect::Policy::none())
            // A burst opens up to `slots` connections. Past this many idle, a connection closes
            // as soon as it is free, and any idle for 10 s closes too (reqwest kept every one
            // for 90 s, each with its buffers at both ends, in this process): steady traffic
            // keeps the connections it uses at once and up to this many spare (about 45 in all
            // for 100 labs at 10 messages a second answered in 5 to 20 ms, BENCHMARKS.md).
            .pool_max_idle_per_host(IDLE_CONNECTIONS)
            .pool_idle_timeout(std::time::Duration::from_secs(10))
            .build()?;
        Ok(Producer { http, slots: Arc::new(Semaphore::new(slots)), metrics, base_url: base_url.into() })
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
    /// until it is delivered or its round ends, in its round's shape. The lab decides around
    /// each attempt (may it go; what comes next); the round sends, and waits.
    async fn deliver(&self, lab: &Lab, id: u64) {
        let Some((resume, seed)) = lab.delivery_start(id) else { return };
        let url = format!("{}/labs/{}/downstream", self.base_url, lab.id).into();
        let body = crate::domain::Message::body(&lab.id, id).into();
        // A seeded policy draws each message's jitter from its own stream, so a run repeats.
        let rng = match seed {
            Some(seed) => StdRng::seed_from_u64(seed),
            None => StdRng::from_rng(&mut rand::rng()),
        };
        let delivery = Delivery { lab, id, resume, url, body, rng };
        Shape::of(&lab.policy()).deliver(self, delivery).await;
    }

    fn ended(&self, next: &Next) {
        self.metrics.message(match next {
            Next::Delivered => "delivered",
            _ => "dead_lettered",
        });
    }

    /// Sends one attempt and measures it.
    async fn send(&self, url: &str, attempt: (&str, u32), body: &str, timeout_ms: u64) -> AttemptEnd {
        let started = Instant::now();
        let mut end = self.send_once(url, attempt, body, timeout_ms).await;
        end.duration_ms = started.elapsed().as_millis() as u64;
        end
    }

    async fn send_once(&self, url: &str, (key, n): (&str, u32), body: &str, timeout_ms: u64) -> AttemptEnd {
        let request = self
            .http
            .post(url)
            .header("Idempotency-Key", key)
            // How long this attempt waits: the endpoint's deadline defence reads it.
            .header("X-Request-Timeout-Ms", timeout_ms)
            // Which attempt of its round this is, as gRPC marks them: retry-aware shedding reads it.
            .header("X-Previous-Attempts", n.saturating_sub(1))
            .header(CONTENT_TYPE, "application/json")
            .body(body.to_owned())
            .timeout(Duration::from_millis(timeout_ms));
        let response = match request.send().await {
            Ok(response) => response,
            Err(e) => return failed(&e),
        };
        let status = response.status().as_u16();
        let header = |name| response.headers().get(name).and_then(|v| v.to_str().ok());
        let replayed = header("idempotent-replayed") == Some("true");
        let retry_after_s = header(RETRY_AFTER.as_str()).and_then(retry::parse_retry_after);
        let pushback = response.headers().get("x-retry-pushback-ms").map(|v| Pushback::parse(v.as_bytes()));
        // The deadline covers the body too: a reply cut off mid-body is not a success.
        if let Err(e) = response.bytes().await {
            return failed(&e);
        }
        AttemptEnd {
            duration_ms: 0,
            status: Some(status),
            outcome: Outcome::of_status(status),
            replayed,
            retry_after_s,
            pushback,
        }
    }
}

/// An attempt that brought no answer back, and took no time (yet).
fn answerless(outcome: Outcome) -> AttemptEnd {
    AttemptEnd { duration_ms: 0, status: None, outcome, replayed: false, retry_after_s: None, pushback: None }
}

fn failed(error: &reqwest::Error) -> AttemptEnd {
    answerless(if error.is_timeout() { Outcome::Timeout } else { Outcome::TransportError })
}

/// The attempt's status as a metric label.
fn label(end: &AttemptEnd) -> String {
    match (end.outcome, end.status) {
        (_, Some(status)) => status.to_string(),
        (outcome, None) => outcome_name(outcome).into(),
    }
}

/// An outcome without an answer, named as it serializes.
fn outcome_name(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Timeout => "timeout",
        Outcome::ShortCircuited => "short_circuited",
        Outcome::Interrupted => "interrupted",
        Outcome::Cancelled => "cancelled",
        _ => "transport_error",
    }
}
