//! The access log, as an operator reads it: one line per request with the matched route, the
//! status and the latency, inside a span that carries the request id and the lab id. Control
//! and page requests are logged at INFO. The downstream endpoint's traffic is the lab's own
//! client talking to itself over loopback, and its 503s and 429s are the lab working as a
//! person asked: those lines are DEBUG. ERROR is kept for what someone must act on.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;
use tower_http::request_id::{MakeRequestId, RequestId};
use tracing::{Instrument, Level};

use super::endpoint::ROUTE as ENDPOINT_ROUTE;

pub async fn log_requests(request: Request, next: Next) -> Response {
    let matched = request.extensions().get::<MatchedPath>().map(MatchedPath::as_str);
    let endpoint = matched == Some(ENDPOINT_ROUTE);
    if endpoint && !tracing::enabled!(Level::DEBUG) {
        // The endpoint's lines are DEBUG: with DEBUG off, its requests skip the span entirely.
        return next.run(request).await;
    }
    let route = matched.unwrap_or("(no route)").to_owned();
    let request_id = request.headers().get("x-request-id").and_then(|v| v.to_str().ok()).unwrap_or("-");
    let path = request.uri().path();
    let lab = path
        .strip_prefix("/api")
        .unwrap_or(path)
        .strip_prefix("/labs/")
        .and_then(|rest| rest.split('/').next())
        .unwrap_or("-");
    let method = request.method().clone();
    let span = tracing::info_span!("request", %method, route, request_id, lab);
    let started = Instant::now();
    let response = next.run(request).instrument(span.clone()).await;
    let latency_ms = started.elapsed().as_secs_f64() * 1000.0;
    let status = response.status().as_u16();
    let _entered = span.enter();
    if endpoint {
        tracing::debug!(status, latency_ms, "answered");
    } else if response.status().is_server_error() {
        tracing::warn!(status, latency_ms, "answered");
    } else {
        tracing::info!(status, latency_ms, "answered");
    }
    response
}

/// Request ids: a random prefix drawn once per process, then a count. Unique like a UUID per
/// request, without asking the kernel for randomness on every request to the endpoint.
#[derive(Clone)]
pub struct RequestIds {
    prefix: Arc<str>,
    next: Arc<AtomicU64>,
}

impl RequestIds {
    pub fn new() -> Self {
        let prefix = uuid::Uuid::new_v4().simple().to_string()[..12].into();
        RequestIds { prefix, next: Arc::new(AtomicU64::new(1)) }
    }
}

impl MakeRequestId for RequestIds {
    fn make_request_id<B>(&mut self, _request: &axum::http::Request<B>) -> Option<RequestId> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        HeaderValue::try_from(format!("{}-{n}", self.prefix)).ok().map(RequestId::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_differ_within_and_across_processes() {
        let request = axum::http::Request::new(());
        let id = |ids: &mut RequestIds| {
            ids.make_request_id(&request).unwrap().header_value().to_str().unwrap().to_owned()
        };
        let mut here = RequestIds::new();
        let (a, b, c) = (id(&mut here), id(&mut here.clone()), id(&mut RequestIds::new()));
        assert_ne!(a, b, "clones share the count");
        assert_ne!(a.split('-').next(), c.split('-').next(), "each process draws its own prefix");
    }
}
