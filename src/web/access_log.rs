//! The access log, as an operator reads it: one line per request with the matched route, the
//! status and the latency, inside a span that carries the request id and the lab id. Control
//! and page requests are logged at INFO. The downstream endpoint's traffic is the lab's own
//! client talking to itself over loopback, and its 503s and 429s are the lab working as a
//! person asked: those lines are DEBUG. ERROR is kept for what someone must act on.

use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;

/// The route of the fault-injectable endpoint.
const ENDPOINT_ROUTE: &str = "/labs/{lab}/downstream";

pub async fn log_requests(request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "(no route)".to_owned(), |path| path.as_str().to_owned());
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
    if route == ENDPOINT_ROUTE {
        tracing::debug!(status, latency_ms, "answered");
    } else if response.status().is_server_error() {
        tracing::warn!(status, latency_ms, "answered");
    } else {
        tracing::info!(status, latency_ms, "answered");
    }
    response
}
