//! `POST /labs/{lab}/downstream`: the fault-injectable endpoint the producer calls, answering
//! by the lab's downstream mode and keeping the idempotency contract.
//!
//! Each request is counted where it arrives and its answer measured where it leaves, so the
//! lab's load chart shows what the downstream went through: a `Visit` notes the answer, or,
//! if the client hangs up first (axum then drops this handler), that it timed out.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Extension;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rand::RngExt;
use tokio::sync::oneshot;

use super::callers::outside_caller;
use super::error::{AppError, Problem};
use super::{AppState, InternalCaller, LabParam, LabPath};
use crate::callers::{CallerName, Ending, Ticket};
use crate::domain::Answer;
use crate::downstream::{BodyDigest, Decision, IdempotencyKey, Mode, StoredResponse};
use crate::lab::{Arrival, Decided, Lab, Passage};

/// The endpoint's route, as matched (the access log and the rate limits look for it).
pub const ROUTE: &str = "/labs/{lab}/downstream";

/// The fault-injectable endpoint, keeping the idempotency contract.
#[utoipa::path(
    post,
    path = "/labs/{lab}/downstream",
    tag = "downstream",
    params(
        LabParam,
        ("Idempotency-Key" = String, Header, description = "1 to 255 visible ASCII characters"),
        ("X-Client-Name" = Option<String>, Header, description = "Names this caller on the lab's page and report card (1 to 64 characters, no control characters, no invisible or text-direction ones such as U+202E or U+200B); else its User-Agent, else its address names it"),
    ),
    request_body(content = Object, description = "Any JSON value"),
    responses(
        (status = 200, description = "Applied, or the stored answer again with `Idempotent-Replayed: true`", content_type = "application/json"),
        (status = 400, description = "No or malformed key, a body that is not JSON, or an X-Client-Name that is empty, longer than 64 characters or holds a control, invisible or text-direction character", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such lab", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The key's first request is still being processed (in line or in work, in every mode; see Retry-After), or the lab lives on another instance (fly-replay)", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "The body is larger than max_body_bytes; sent with Connection: close, and the connection closes after it", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "The body is not sent as application/json (or a +json type)", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "The key was first used with another body", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "Throttled mode: over the rate limit; or this client is over endpoint_rate_per_s; see Retry-After", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "Injected failure or shed load, or the store did not confirm in time or could not read a key's stored answer back; see Retry-After", body = Problem, content_type = "application/problem+json"),
        (status = 507, description = "No room for another outside key (max_outside_keys_per_lab, max_outside_keys), or the store is full (max_db_bytes, the disk)", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn downstream(
    State(app): State<AppState>,
    LabPath(lab): LabPath,
    internal: Option<Extension<InternalCaller>>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, AppError> {
    // Only outside callers are named and kept: the lab's own client is known by its listener.
    let caller = match internal {
        Some(_) => None,
        None => Some(outside_caller(&app, &headers, peer.map(|Extension(p)| p)).map_err(|e| {
            lab.downstream_refused(400, Some("malformed X-Client-Name"));
            AppError::BadRequest(e)
        })?),
    };
    let (key, digest) = match read(&lab, &headers, body) {
        Ok(read) => read,
        Err(refused) => return Err(kept_refusal(&lab, caller.as_ref(), &headers, refused)),
    };
    // The overloaded downstream holds a request in line and in work before its key is
    // reserved in the ledger: a repeat meanwhile is 409 at once, as in every other mode.
    let in_line = match lab.downstream_settings().mode {
        Mode::Overloaded => match InLine::enter(&lab, &key) {
            Some(held) => Some(held),
            None => {
                lab.downstream_refused(409, Some("key still being processed"));
                return Err(kept_refusal(&lab, caller.as_ref(), &headers, in_flight()));
            }
        },
        _ => None,
    };
    let ticket = caller
        .as_ref()
        .and_then(|caller| lab.outside_arrived(caller, key.as_str(), Some(digest.to_string())));
    let Arrival { arrived_t_ms: arrived, passage: admission } = lab.downstream_admit(&key);
    let working = matches!(admission, Passage::Open);
    let visit = Visit { lab: lab.clone(), arrived, working, answered: false, ticket };
    let answer = admitted(lab, key, (digest, caller.is_some()), (admission, in_line)).await;
    // Answered as a response here, so what was sent (its `Retry-After`) can be kept.
    let response = answer.unwrap_or_else(IntoResponse::into_response);
    visit.answered(&response);
    Ok(response)
}

/// A request refused before it reached the ledger is still an attempt of its caller's key, when
/// it named one: a client that sends it again is seen doing so.
fn kept_refusal(lab: &Lab, caller: Option<&CallerName>, headers: &HeaderMap, refused: AppError) -> AppError {
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .and_then(|k| IdempotencyKey::parse(k).ok());
    if let (Some(caller), Some(key)) = (caller, key)
        && let Some(ticket) = lab.outside_arrived(caller, key.as_str(), None)
    {
        let response = AppError::status(&refused);
        let retry_after_s = match &refused {
            AppError::Unavailable { retry_after_s, .. } => Some(*retry_after_s),
            _ => None,
        };
        lab.outside_ended(ticket, Ending::Answered { status: response.as_u16(), retry_after_s });
    }
    refused
}

/// Reads the request's key and the digest of its JSON body; a request refused here is counted
/// as it arrived and answered.
fn read(
    lab: &Lab,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<(IdempotencyKey, BodyDigest), AppError> {
    let refuse = |status: u16, detail: Option<&'static str>, error: AppError| {
        lab.downstream_refused(status, detail);
        error
    };
    if !is_json(headers) {
        return Err(refuse(
            415,
            Some("body not sent as JSON"),
            AppError::Rejected {
                status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
                detail: "send the body with Content-Type: application/json (or another +json type)".into(),
            },
        ));
    }
    let body = body.map_err(|rejected| {
        let error = AppError::from(rejected);
        refuse(error.status().as_u16(), None, error)
    })?;
    if headers.get_all("idempotency-key").iter().nth(1).is_some() {
        // A proxy that keeps the last one would disagree with us keeping the first.
        return Err(refuse(
            400,
            Some("two Idempotency-Key headers"),
            AppError::BadRequest("send one Idempotency-Key header, not several".into()),
        ));
    }
    let key = headers
        .get("idempotency-key")
        .ok_or_else(|| {
            refuse(
                400,
                Some("no Idempotency-Key"),
                AppError::BadRequest("the Idempotency-Key header is required".into()),
            )
        })?
        .to_str()
        .map_err(|_| "Idempotency-Key must be visible ASCII".to_owned())
        .and_then(IdempotencyKey::parse)
        .map_err(|e| refuse(400, Some("malformed Idempotency-Key"), AppError::BadRequest(e)))?;
    let body: serde_json::Value = serde_json::from_slice(&body).map_err(|e| {
        refuse(400, Some("body is not JSON"), AppError::BadRequest(format!("the body must be JSON: {e}")))
    })?;
    // Only the digest is kept: enough to tell a repeat from another body.
    Ok((key, BodyDigest::of(&body)))
}

/// Answers a request by how it got past the mode's gate.
async fn admitted(
    lab: Arc<Lab>,
    key: IdempotencyKey,
    (digest, outside): (BodyDigest, bool),
    (admission, in_line): (Passage, Option<InLine>),
) -> Result<Response, AppError> {
    match admission {
        Passage::Open => {}
        Passage::Throttled { retry_after_s } => {
            return Err(AppError::Unavailable {
                status: StatusCode::TOO_MANY_REQUESTS,
                retry_after_s,
                detail: "over the downstream's rate limit (throttled mode); nothing was applied".into(),
            });
        }
        Passage::Shed { retry_after_s } => {
            return Err(AppError::Unavailable {
                status: StatusCode::SERVICE_UNAVAILABLE,
                retry_after_s,
                detail: "overloaded: no worker free and no room in the queue; nothing was applied".into(),
            });
        }
        Passage::Worker => return overloaded(lab, key, (digest, outside), None, in_line).await,
        Passage::Queued(turn) => return overloaded(lab, key, (digest, outside), Some(turn), in_line).await,
    }
    let decided = decide(&lab, &key, digest, outside).await?;
    respond(lab, key, decided, Latency::ToWaitOut).await
}

/// Whether a request's latency is still to be waited out when it is decided.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Latency {
    ToWaitOut,
    /// The overloaded downstream's worker held the request for it before deciding.
    WaitedOut,
}

/// Answers a decided request.
async fn respond(
    lab: Arc<Lab>,
    key: IdempotencyKey,
    Decided { decision, epoch, durable_at }: Decided,
    latency: Latency,
) -> Result<Response, AppError> {
    let waited_out = |ms: u64| if latency == Latency::WaitedOut { 0 } else { ms };
    match decision {
        Decision::Replay(stored) => {
            // The first answer may not be committed yet: after a crash the key could be applied
            // again, so its repeat waits for that commit too (and only for that one).
            lab.persisted_through(durable_at).await?;
            Ok(answer(stored, true))
        }
        Decision::InProgress => Err(in_flight()),
        Decision::BodyMismatch => {
            Err(AppError::Unprocessable("this Idempotency-Key was first used with a different body".into()))
        }
        // Also when the mode changed while an overloaded request waited in line (an outage
        // window began): it is answered by the mode now in force.
        Decision::Unavailable { retry_after_s } => Err(AppError::Unavailable {
            status: StatusCode::SERVICE_UNAVAILABLE,
            retry_after_s,
            detail: "the downstream is unavailable (injected failure); nothing was applied".into(),
        }),
        Decision::StorageFull { limit } => Err(storage_full(limit)),
        Decision::Recall { .. } => Err(unreadable("the key changed while it was read back")),
        Decision::AppliedEarly { response, answer_after_ms } => {
            once_committed(&lab, &key, (epoch, durable_at), response, waited_out(answer_after_ms)).await
        }
        Decision::Applied(response) => once_committed(&lab, &key, (epoch, durable_at), response, 0).await,
        Decision::Process { latency_ms } => process(lab, key, epoch, waited_out(latency_ms)).await,
    }
}

/// Applies a reserved key's write after `latency_ms`, in a task of its own: axum drops the
/// handler's future when the client hangs up, and a write that has begun must still land
/// with its key.
async fn process(
    lab: Arc<Lab>,
    key: IdempotencyKey,
    epoch: u64,
    latency_ms: u64,
) -> Result<Response, AppError> {
    let work = tokio::spawn(async move {
        if latency_ms > 0 {
            tokio::time::sleep(Duration::from_millis(latency_ms)).await;
        }
        let (stored, applied_event) = lab.downstream_complete(&key, epoch)?;
        // The key and its answer are committed with the write before anyone hears of it; a
        // write the store cannot keep is taken back, so a 503 applied nothing.
        let kept = lab.persisted_through(applied_event).await;
        if kept.is_err() {
            lab.downstream_unapply(&key, epoch);
        }
        Some(kept.map(|()| stored))
    });
    match work.await {
        Ok(Some(Ok(stored))) => Ok(answer(stored, false)),
        Ok(Some(Err(not_durable))) => Err(not_durable.into()),
        _ => Err(AppError::Conflict("the lab was reset while this request was processed".into())),
    }
}

/// The overloaded downstream: wait in line for a worker (if `turn` is given), hold it for the
/// request's latency, then decide and answer. All of it runs in its own task, so a request
/// whose client gave up still takes its worker when its turn comes: that work is wasted, and
/// it is what keeps an overloaded service overloaded after the trigger has gone.
async fn overloaded(
    lab: Arc<Lab>,
    key: IdempotencyKey,
    (digest, outside): (BodyDigest, bool),
    turn: Option<oneshot::Receiver<()>>,
    in_line: Option<InLine>,
) -> Result<Response, AppError> {
    let (reply, replied) = oneshot::channel();
    tokio::spawn(async move {
        // The key stays taken until this work ends, whether or not its client still waits.
        let _in_line = in_line;
        if let Some(turn) = turn
            && turn.await.is_err()
        {
            return; // the lab was reset, or its gate dropped the line
        }
        // The worker goes back to the gate however this ends, and once its `latency_ms` of
        // work is done: waiting for the store to commit the write is not the worker's, so the
        // capacity is `capacity / latency_ms` whatever the store's pace.
        let worker = Worker(lab.clone());
        let work = Work::start(&lab);
        let latency = lab.downstream_settings().latency_ms;
        let latency_ms = rand::rng().random_range(latency[0]..=latency[1]);
        tokio::time::sleep(Duration::from_millis(latency_ms)).await;
        drop(worker);
        let outcome = match decide(&lab, &key, digest, outside).await {
            Ok(decided) => respond(lab.clone(), key, decided, Latency::WaitedOut).await,
            Err(unreadable) => Err(unreadable),
        };
        let wasted = reply.send(outcome).is_err();
        work.finish(wasted);
    });
    replied
        .await
        .unwrap_or_else(|_| Err(AppError::Conflict("the lab was reset while this request waited".into())))
}

/// A write applied in the decision itself, answered once it is committed (its event,
/// `durable_at`) and `answer_after_ms` later; a write the store cannot keep is taken back, so
/// a 503 applied nothing.
async fn once_committed(
    lab: &Lab,
    key: &IdempotencyKey,
    (epoch, durable_at): (u64, u64),
    response: StoredResponse,
    answer_after_ms: u64,
) -> Result<Response, AppError> {
    if let Err(refused) = lab.persisted_through(durable_at).await {
        lab.downstream_unapply(key, epoch);
        return Err(refused.into());
    }
    if answer_after_ms > 0 {
        tokio::time::sleep(Duration::from_millis(answer_after_ms)).await;
    }
    Ok(answer(response, false))
}

/// Decides the request against the lab's ledger, reading a cold key back from the store.
async fn decide(
    lab: &Lab,
    key: &IdempotencyKey,
    digest: BodyDigest,
    outside: bool,
) -> Result<Decided, AppError> {
    lab.downstream_decide(key, digest, outside).await.map_err(|e| unreadable(&e.to_string()))
}

/// The store could not read a key back: 503, nothing applied.
fn unreadable(why: &str) -> AppError {
    AppError::Unavailable {
        status: StatusCode::SERVICE_UNAVAILABLE,
        retry_after_s: 1,
        detail: format!(
            "this key's answer could not be read back from the store ({why}); nothing was applied; try again shortly"
        ),
    }
}

/// No room for another outside key: 507, naming the limit.
fn storage_full(limit: &'static str) -> AppError {
    AppError::Limit {
        status: StatusCode::INSUFFICIENT_STORAGE,
        limit,
        detail: format!(
            "this server keeps no more idempotency keys for outside callers ({limit}); nothing was \
             applied; repeat a key you already used, or wait for the dedup window to expire old ones"
        ),
    }
}

/// 409 for a key whose first request is still in line or in work, with a `Retry-After`: the
/// first answer is due within about a second, and the client is told when to ask again.
fn in_flight() -> AppError {
    AppError::Unavailable {
        status: StatusCode::CONFLICT,
        retry_after_s: 1,
        detail: "a request with this Idempotency-Key is still being processed; retry after the Retry-After"
            .into(),
    }
}

/// A key taken in the overloaded downstream's line, given back when dropped.
struct InLine {
    lab: Arc<Lab>,
    key: IdempotencyKey,
}

impl InLine {
    fn enter(lab: &Arc<Lab>, key: &IdempotencyKey) -> Option<InLine> {
        lab.downstream_line_enter(key).then(|| InLine { lab: lab.clone(), key: key.clone() })
    }
}

impl Drop for InLine {
    fn drop(&mut self) {
        self.lab.downstream_line_leave(&self.key);
    }
}

/// A worker of the overloaded downstream, handed back to its gate when dropped.
struct Worker(Arc<Lab>);

impl Drop for Worker {
    fn drop(&mut self) {
        self.0.downstream_leave();
    }
}

/// A request that was read and admitted; when dropped without an answer, its client hung up.
struct Visit {
    lab: Arc<Lab>,
    arrived: u64,
    /// Let straight on: counted in process until it is answered.
    working: bool,
    answered: bool,
    /// Where an outside caller's request is kept.
    ticket: Option<Ticket>,
}

impl Visit {
    fn answered(mut self, response: &Response) {
        self.answered = true;
        let status = response.status().as_u16();
        self.lab.downstream_done(self.arrived, Answer::Status(status), self.working);
        if let Some(ticket) = self.ticket.take() {
            let retry_after_s = response
                .headers()
                .get(header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse().ok());
            self.lab.outside_ended(ticket, Ending::Answered { status, retry_after_s });
        }
    }
}

impl Drop for Visit {
    fn drop(&mut self) {
        if !self.answered {
            self.lab.downstream_done(self.arrived, Answer::TimedOut, self.working);
            if let Some(ticket) = self.ticket.take() {
                self.lab.outside_ended(ticket, Ending::HungUp);
            }
        }
    }
}

/// Work on one request, counted in process while it lives.
struct Work {
    lab: Arc<Lab>,
    done: bool,
}

impl Work {
    fn start(lab: &Arc<Lab>) -> Work {
        lab.downstream_work_started();
        Work { lab: lab.clone(), done: false }
    }

    fn finish(mut self, wasted: bool) {
        self.done = true;
        self.lab.downstream_work_finished(wasted);
    }
}

impl Drop for Work {
    fn drop(&mut self) {
        if !self.done {
            self.lab.downstream_work_finished(false);
        }
    }
}

/// Whether the request says its body is JSON: `application/json` or any `+json` type.
fn is_json(headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let essence = value.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    essence == "application/json" || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// The stored answer, byte for byte, flagged when it is a replay.
fn answer(stored: StoredResponse, replayed: bool) -> Response {
    let status = StatusCode::from_u16(stored.status).unwrap_or(StatusCode::OK);
    let mut response = (status, [(header::CONTENT_TYPE, "application/json")], stored.body).into_response();
    if replayed {
        response.headers_mut().insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    response
}
