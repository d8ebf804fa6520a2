//! `POST /labs/{lab}/downstream`: the fault-injectable endpoint the producer calls, answering
//! by the lab's downstream mode and keeping the idempotency contract.
//!
//! Each request is counted where it arrives and its answer measured where it leaves, so the
//! lab's load chart shows what the downstream went through: a `Visit` notes the answer, or,
//! if the client hangs up first (axum then drops this handler), that it timed out.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Extension;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{ConnectInfo, FromRequest, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::callers::outside_caller;
use super::error::{AppError, Problem};
use super::{AppState, InternalCaller, LabParam, LabPath};
use crate::callers::{CallerName, Ending, Ticket, Unparsed};
use crate::domain::Answer;
use crate::downstream::{BodyDigest, Hints, IdempotencyKey, StoredResponse};
use crate::lab::{Arrival, BUSY_RETRY_AFTER_S, Lab, Passage, Refusal, Said, Served};

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
        ("X-Request-Timeout-Ms" = Option<u64>, Header, description = "How long the client waits for this answer, in ms (1 to 86,400,000); the overloaded mode's deadline defence drops, without doing it, work that would finish after that. A value that does not parse is counted (the load bins' ignored_hints) and ignored"),
        ("X-Previous-Attempts" = Option<u32>, Header, description = "How many attempts of this request the client made before (0 for a first attempt, as gRPC's grpc-previous-rpc-attempts); with the overloaded mode's retries_first defence, a first attempt takes a full line's newest retry's place. A value that does not parse is counted (ignored_hints) and ignored"),
        ("X-Client-Name" = Option<String>, Header, description = "Names this caller on the lab's page and report card (1 to 64 characters, no control, invisible, blank, separator or text-direction ones such as U+202E, U+200B, U+3164 or U+2028; plain spaces are fine); else its User-Agent, else its address names it"),
    ),
    request_body(content = Object, description = "Any JSON value"),
    responses(
        (status = 200, description = "Applied, or the stored answer again with `Idempotent-Replayed: true`", content_type = "application/json"),
        (status = 400, description = "No or malformed key, a body that is not JSON, or an X-Client-Name that is empty, longer than 64 characters or holds a control, invisible, blank, separator or text-direction character", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such lab", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The key's first request is still being processed (in line or in work, in every mode; see Retry-After), or the lab lives on another instance (fly-replay)", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "The body is larger than max_body_bytes; sent with Connection: close, and the connection closes after it", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "The body is not sent as application/json (or a +json type)", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "The key was first used with another body", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "Throttled mode: over the rate limit; or this client is over endpoint_rate_per_s; see Retry-After", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "Injected failure, shed load, or dropped by a defence (deadline, CoDel, retries_first), or the store did not confirm in time or could not read a key's stored answer back; see Retry-After. A retry shed by retries_first with the pushback defence on carries `X-Retry-Pushback-Ms: -1`: do not retry (the lab's name for gRPC's grpc-retry-pushback-ms, gRFC A6, whose negative or unparseable value asks the client not to retry at all)", body = Problem, content_type = "application/problem+json",
            headers(("X-Retry-Pushback-Ms" = i32, description = "Sent only on a retry the pushback defence shed: -1, do not retry"))),
        (status = 507, description = "No room for another outside key (max_outside_keys_per_lab, max_outside_keys), or the store is full (max_db_bytes, the disk)", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn downstream(
    State(app): State<AppState>,
    LabPath(lab): LabPath,
    internal: Option<Extension<InternalCaller>>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    request: Request,
) -> Result<Response, AppError> {
    // The headers are taken from the request, not copied out of it as axum's `HeaderMap`
    // extractor would: every request to the endpoint comes here.
    let (mut parts, body) = request.into_parts();
    let headers = std::mem::take(&mut parts.headers);
    let body = Bytes::from_request(Request::from_parts(parts, body), &()).await;
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
    let from = caller.as_ref().map(|caller| (caller, digest.to_string()));
    let Arrival { arrived_t_ms: arrived, passage, ticket, judged } =
        lab.downstream_pass(&key, said(&headers), from);
    if let Passage::Busy = passage {
        // Counted, answered and kept as it arrived: a repeat of a request still in line or in work.
        return Err(in_flight());
    }
    let working = matches!(passage, Passage::Open);
    let visit = Visit { lab: lab.clone(), arrived, working, judged, answered: false, ticket };
    let served = lab.downstream_serve(key, (digest, caller.is_some()), passage).await;
    // Answered as a response here, so what was sent (its `Retry-After`) can be kept.
    let response = match served {
        Ok(Served { response, replayed }) => answer(response, replayed),
        Err(refused) => {
            let pushback = matches!(refused, Refusal::Dropped { pushback: true, .. });
            let mut response = refusal(refused).into_response();
            if pushback {
                // gRFC A6, "Pushback": "If the value for pushback is negative or unparseble, then it
                // will be seen as the server asking the client not to retry at all."
                response.headers_mut().insert(PUSHBACK_HEADER, HeaderValue::from_static("-1"));
            }
            response
        }
    };
    visit.answered(&response);
    Ok(response)
}

/// The header that names a request's idempotency key (a name made once, not parsed from text
/// on every request).
const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// The header in which a client says how long it waits for this answer, in ms (as Envoy's
/// `x-envoy-expected-rq-timeout-ms` does); the deadline defence reads it.
pub const TIMEOUT_HEADER: HeaderName = HeaderName::from_static("x-request-timeout-ms");
/// The longest timeout taken from a client: longer means the header is not meant.
const MAX_TIMEOUT_MS: u64 = 24 * 60 * 60 * 1000;

/// The header in which a client says how many attempts of this request it made before (as
/// gRPC's `grpc-previous-rpc-attempts`, gRFC A6); retry-aware shedding reads it.
pub const PREVIOUS_ATTEMPTS_HEADER: HeaderName = HeaderName::from_static("x-previous-attempts");

/// The header in which the endpoint tells a client when to retry, in ms, or, negative, not to
/// retry at all: the lab's name for gRPC's `grpc-retry-pushback-ms` (gRFC A6). The endpoint
/// sends only `-1`, on a retry its pushback defence sheds.
pub const PUSHBACK_HEADER: HeaderName = HeaderName::from_static("x-retry-pushback-ms");

/// What the request's headers tell the endpoint; one that does not parse (a timeout that is not
/// a whole number of ms from 1 to a day, a count of attempts that is not a whole number, or
/// either sent twice) is counted and ignored, never refused.
fn said(headers: &HeaderMap) -> Said {
    let (timeout_ms, bad_timeout) =
        hint(headers, TIMEOUT_HEADER, |ms: &u64| (1..=MAX_TIMEOUT_MS).contains(ms));
    let (previous_attempts, bad_count) = hint(headers, PREVIOUS_ATTEMPTS_HEADER, |_: &u32| true);
    let unparsed = Unparsed { timeout: bad_timeout, previous_attempts: bad_count };
    Said { hints: Hints { timeout_ms, previous_attempts }, unparsed }
}

/// A hint header's whole number, if it is there once and `fits`; and whether it was there but
/// did not parse.
fn hint<T: std::str::FromStr>(
    headers: &HeaderMap,
    name: HeaderName,
    fits: impl Fn(&T) -> bool,
) -> (Option<T>, bool) {
    let mut values = headers.get_all(&name).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return (None, headers.contains_key(name));
    };
    let parsed = value
        .to_str()
        .ok()
        .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|v| v.parse::<T>().ok())
        .filter(fits);
    let bad = parsed.is_none();
    (parsed, bad)
}

/// A request refused before it reached the ledger is still an attempt of its caller's key, when
/// it named one: a client that sends it again is seen doing so.
fn kept_refusal(lab: &Lab, caller: Option<&CallerName>, headers: &HeaderMap, refused: AppError) -> AppError {
    let key = headers
        .get(IDEMPOTENCY_KEY)
        .and_then(|v| v.to_str().ok())
        .and_then(|k| IdempotencyKey::parse(k).ok());
    if let (Some(caller), Some(key)) = (caller, key)
        && let Some(ticket) = lab.outside_arrived((caller, key.as_str(), said(headers).spoken()), None)
    {
        let response = AppError::status(&refused);
        let retry_after_s = match &refused {
            AppError::Unavailable { retry_after_s, .. } => *retry_after_s,
            _ => None,
        };
        let ending = Ending::Answered { status: response.as_u16(), retry_after_s, pushback_ms: None };
        lab.outside_ended(ticket, ending);
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
    if headers.get_all(IDEMPOTENCY_KEY).iter().nth(1).is_some() {
        // A proxy that keeps the last one would disagree with us keeping the first.
        return Err(refuse(
            400,
            Some("two Idempotency-Key headers"),
            AppError::BadRequest("send one Idempotency-Key header, not several".into()),
        ));
    }
    let key = headers
        .get(IDEMPOTENCY_KEY)
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

/// The error a refused request is answered with.
fn refusal(refused: Refusal) -> AppError {
    match refused {
        Refusal::Throttled { retry_after_s } => AppError::Unavailable {
            status: StatusCode::TOO_MANY_REQUESTS,
            retry_after_s: Some(retry_after_s),
            detail: "over the downstream's rate limit (throttled mode); nothing was applied".into(),
        },
        Refusal::Shed { retry_after_s } => AppError::Unavailable {
            status: StatusCode::SERVICE_UNAVAILABLE,
            retry_after_s,
            detail: "overloaded: no worker free and no room in the queue; nothing was applied".into(),
        },
        Refusal::Dropped { why, retry_after_s, .. } => AppError::Unavailable {
            status: StatusCode::SERVICE_UNAVAILABLE,
            retry_after_s,
            detail: why.said().answer.into(),
        },
        Refusal::InProgress => in_flight(),
        Refusal::BodyMismatch => {
            AppError::Unprocessable("this Idempotency-Key was first used with a different body".into())
        }
        Refusal::Unavailable { retry_after_s } => AppError::Unavailable {
            status: StatusCode::SERVICE_UNAVAILABLE,
            retry_after_s,
            detail: "the downstream is unavailable (injected failure); nothing was applied".into(),
        },
        Refusal::StorageFull { limit } => storage_full(limit),
        Refusal::Unreadable(why) => unreadable(&why),
        Refusal::NotDurable(not_durable) => not_durable.into(),
        Refusal::Reset { waited: true } => {
            AppError::Conflict("the lab was reset while this request waited".into())
        }
        Refusal::Reset { waited: false } => {
            AppError::Conflict("the lab was reset while this request was processed".into())
        }
    }
}

/// The store could not read a key back: 503, nothing applied.
fn unreadable(why: &str) -> AppError {
    AppError::Unavailable {
        status: StatusCode::SERVICE_UNAVAILABLE,
        retry_after_s: Some(1),
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
        retry_after_s: Some(BUSY_RETRY_AFTER_S),
        detail: "a request with this Idempotency-Key is still being processed; retry after the Retry-After"
            .into(),
    }
}

/// A request that was read and let past the pipeline; when dropped without an answer, its client hung up.
struct Visit {
    lab: Arc<Lab>,
    arrived: u64,
    /// Let straight on: counted in process until it is answered.
    working: bool,
    /// Admission control let it through: its answer counts there.
    judged: bool,
    answered: bool,
    /// Where an outside caller's request is kept.
    ticket: Option<Ticket>,
}

impl Visit {
    fn answered(mut self, response: &Response) {
        self.answered = true;
        let status = response.status().as_u16();
        let kept = self.ticket.take().map(|ticket| {
            let retry_after_s = response
                .headers()
                .get(header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse().ok());
            let pushback_ms =
                response.headers().get(PUSHBACK_HEADER).and_then(|v| v.to_str().ok()?.trim().parse().ok());
            (ticket, Ending::Answered { status, retry_after_s, pushback_ms })
        });
        self.lab.downstream_done(self.arrived, (Answer::Status(status), self.working, self.judged), kept);
    }
}

impl Drop for Visit {
    fn drop(&mut self) {
        if !self.answered {
            let kept = self.ticket.take().map(|ticket| (ticket, Ending::HungUp));
            self.lab.downstream_done(self.arrived, (Answer::TimedOut, self.working, self.judged), kept);
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
