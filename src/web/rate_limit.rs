//! A rate limit per client on the control API, and another on the labs' endpoints for outside
//! callers: the lab applies its own lesson to itself, with the throttled endpoint's own
//! algorithm (`downstream::Gcra`), one per client. Each client may make `burst` requests in a
//! quick run and `rate` per second after that; past it, the answer is 429 with a
//! `Retry-After` saying when the next request would be allowed.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, Request};
use axum::http::Method;
use tokio::sync::OwnedSemaphorePermit;

use super::AppState;
use super::error::AppError;
use crate::downstream::Gcra;

/// Clients kept before idle ones are dropped, so many clients cannot grow memory.
const MAX_TRACKED_CLIENTS: usize = 10_000;

pub struct RateLimiter {
    rate_per_s: f64,
    burst: u32,
    /// A trusted proxy's header naming the client, if configured.
    client_ip_header: Option<String>,
    /// The limiter's clock: each client's `Gcra` counts milliseconds since this instant.
    origin: Instant,
    clients: Mutex<HashMap<IpAddr, Gcra>>,
}

impl RateLimiter {
    pub fn new(rate_per_s: u32, burst: u32, client_ip_header: Option<String>) -> Self {
        RateLimiter {
            rate_per_s: f64::from(rate_per_s.max(1)),
            burst: burst.max(1),
            client_ip_header,
            origin: Instant::now(),
            clients: Mutex::default(),
        }
    }

    /// A bucket of bytes: `rate_per_s` a second after a run of `burst` (see `take_n`).
    pub fn bytes(rate_per_s: u64, burst: u64, client_ip_header: Option<String>) -> Self {
        RateLimiter {
            rate_per_s: rate_per_s.max(1) as f64,
            burst: u32::try_from(burst).unwrap_or(u32::MAX).max(1),
            ..Self::new(1, 1, client_ip_header)
        }
    }

    /// A bucket that refills `rate_per_hour` tokens an hour: for what a client does rarely.
    pub fn per_hour(rate_per_hour: u32, burst: u32, client_ip_header: Option<String>) -> Self {
        RateLimiter {
            rate_per_s: f64::from(rate_per_hour.max(1)) / 3600.0,
            ..Self::new(1, burst, client_ip_header)
        }
    }

    /// Who sent the request: the trusted proxy's header when configured, else the peer.
    pub fn client(&self, request: &Request) -> Option<IpAddr> {
        let peer = request.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0);
        self.client_address(request.headers(), peer)
    }

    /// Who sent a request with `headers` over a connection from `peer` (see `client`).
    pub(super) fn client_address(
        &self,
        headers: &axum::http::HeaderMap,
        peer: Option<SocketAddr>,
    ) -> Option<IpAddr> {
        let from_proxy = self.client_ip_header.as_deref().and_then(|name| {
            let value = headers.get(name)?.to_str().ok()?;
            value.split(',').next()?.trim().parse().ok()
        });
        from_proxy.or_else(|| peer.map(|p| p.ip()))
    }

    /// Lets a request of `client` through, or says how long until one would be.
    pub fn take(&self, client: IpAddr, now: Instant) -> Result<(), Duration> {
        self.take_n(client, 1, now)
    }

    /// Lets a request of `client` that costs `cost` (bytes, say; at most a burst) through, or
    /// says how long until it would be.
    pub fn take_n(&self, client: IpAddr, cost: u32, now: Instant) -> Result<(), Duration> {
        let now_ms = now.saturating_duration_since(self.origin).as_millis() as u64;
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        if clients.len() >= MAX_TRACKED_CLIENTS {
            clients.retain(|_, limit| !limit.is_idle(now_ms));
        }
        let limit = clients.entry(client).or_default();
        limit
            .check_n(self.rate_per_s, self.burst, cost.min(self.burst), now_ms)
            .map_err(Duration::from_millis)
    }
}

/// Control requests: anything that changes state through the API, and `GET /` (it creates a lab).
fn is_control(request: &Request) -> bool {
    let path = request.uri().path();
    match *request.method() {
        Method::GET | Method::HEAD => path == "/",
        _ => path.starts_with("/api/"),
    }
}

/// Marks requests that came in on the producer's own loopback listener: the lab's client,
/// which the limits on outside callers never hold back.
#[derive(Debug, Clone, Copy)]
pub struct InternalCaller;

/// Holds each client to its rate, in one check for both limits: control requests to
/// `control_rate_per_s`, and outside callers of the labs' endpoints (the one public route that
/// writes, and so the one a flood would aim at) to `endpoint_rate_per_s`. The lab's own client
/// is never held back. A request that reads a snapshot is let in with a permit, held while the
/// handler builds it whole before it answers; a refused one is answered with the error (429,
/// or the snapshot gate's refusal).
pub fn admit(app: &AppState, request: &Request) -> Result<Option<OwnedSemaphorePermit>, AppError> {
    if let Some((limiter, limit)) = limit_for(app, request)
        && let Some(client) = limiter.client(request)
        && let Err(wait) = limiter.take(client, Instant::now())
    {
        let retry_after_s = wait.as_secs_f64().ceil().max(1.0) as u64;
        return Err(AppError::RateLimited { limit, retry_after_s });
    }
    if creates_lab(request)
        && let Some(client) = app.create_limiter.client(request)
        && let Err(wait) = app.create_limiter.take(client, Instant::now())
    {
        let retry_after_s = wait.as_secs_f64().ceil().max(1.0) as u64;
        return Err(AppError::RateLimited { limit: "lab_creates_per_hour", retry_after_s });
    }
    let Some(bytes) = reads_snapshot(app, request) else { return Ok(None) };
    let Some(client) = app.snapshot_gate.limiter().client(request) else { return Ok(None) };
    app.snapshot_gate.admit(client, bytes).map(Some)
}

/// The estimated size of the snapshot a request reads, if it reads one: `GET /api/labs/{lab}`,
/// its claims (judged on one), or an event stream that starts from a snapshot (no
/// `Last-Event-ID`).
fn reads_snapshot(app: &AppState, request: &Request) -> Option<usize> {
    if request.method() != Method::GET {
        return None;
    }
    let matched = request.extensions().get::<axum::extract::MatchedPath>()?.as_str();
    let stream_from_start = matched == "/api/labs/{lab}/events"
        && !request.headers().contains_key("last-event-id")
        && !request.uri().query().is_some_and(|q| q.contains("last_event_id="));
    // The claims are judged on a whole snapshot too, built for each request.
    let claims = matched == "/api/labs/{lab}/claims";
    if matched != "/api/labs/{lab}" && !stream_from_start && !claims {
        return None;
    }
    let raw = request.uri().path().strip_prefix("/api/labs/")?.split('/').next()?;
    let lab = app.labs.get(&crate::domain::LabId::parse(raw).ok()?)?;
    Some(lab.snapshot_estimate())
}

/// Requests that create a lab: `POST /api/labs`, opening `/`, and opening a comparison's policy
/// in a lab (`POST /api/comparisons/{id}/labs`). A comparison's own labs are taken from the same
/// allowance by its handler, all at once.
fn creates_lab(request: &Request) -> bool {
    let path = request.uri().path();
    let opens_in_lab = request.method() == Method::POST
        && path.strip_prefix("/api/comparisons/").is_some_and(|rest| rest.ends_with("/labs"));
    opens_in_lab
        || matches!(
            (request.method(), path),
            (&Method::POST, "/api/labs") | (&Method::GET | &Method::HEAD, "/")
        )
}

/// The limit a request is held to, if any, and its setting's name.
fn limit_for<'a>(app: &'a AppState, request: &Request) -> Option<(&'a RateLimiter, &'static str)> {
    if is_control(request) {
        return Some((&app.rate_limiter, "control_rate_per_s"));
    }
    let endpoint = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .is_some_and(|path| path.as_str() == super::endpoint::ROUTE);
    let outside = request.extensions().get::<InternalCaller>().is_none();
    (endpoint && outside).then_some((&app.endpoint_limiter, "endpoint_rate_per_s"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_gets_its_burst_then_the_rate() {
        let limiter = RateLimiter::new(10, 3, None);
        let (me, other) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let start = Instant::now();
        for _ in 0..3 {
            assert!(limiter.take(me, start).is_ok());
        }
        let wait = limiter.take(me, start).unwrap_err();
        assert!(wait > Duration::from_millis(90) && wait <= Duration::from_millis(100), "{wait:?}");
        assert!(limiter.take(other, start).is_ok(), "buckets are per client");
        assert!(limiter.take(me, start + Duration::from_millis(100)).is_ok(), "a token is back after 1/rate");
        assert!(limiter.take(me, start + Duration::from_millis(100)).is_err());
    }
}
