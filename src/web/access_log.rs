//! The access log, as an operator reads it: one line per request with the matched route, the
//! status and the latency, inside a span that carries the request id and the lab id. Control
//! and page requests are logged at INFO. The downstream endpoint's traffic is the lab's own
//! client talking to itself over loopback, and its 503s and 429s are the lab working as a
//! person asked: those lines are DEBUG. ERROR is kept for what someone must act on.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::{HeaderValue, StatusCode};
use tracing::{Level, Span};

use super::endpoint::ROUTE as ENDPOINT_ROUTE;

/// A request being logged: its span, and when it came in.
pub struct Logged {
    span: Span,
    started: Instant,
    endpoint: bool,
}

impl Logged {
    /// Starts the log of `request`, whose id is `id`; `None` for the endpoint's requests while
    /// DEBUG is off: they skip the span entirely.
    pub fn start(request: &Request, id: &HeaderValue) -> Option<Logged> {
        let matched = request.extensions().get::<MatchedPath>().map(MatchedPath::as_str);
        let endpoint = matched == Some(ENDPOINT_ROUTE);
        if endpoint && !tracing::enabled!(Level::DEBUG) {
            return None;
        }
        let route = matched.unwrap_or("(no route)");
        let request_id = id.to_str().unwrap_or("-");
        let path = request.uri().path();
        let lab = path
            .strip_prefix("/api")
            .unwrap_or(path)
            .strip_prefix("/labs/")
            .and_then(|rest| rest.split('/').next())
            .unwrap_or("-");
        let method = request.method();
        let span = tracing::info_span!("request", %method, route, request_id, lab);
        Some(Logged { span, started: Instant::now(), endpoint })
    }

    /// The span the request is handled in.
    pub fn span(&self) -> Span {
        self.span.clone()
    }

    /// Writes the request's line.
    pub fn answered(self, status: StatusCode) {
        let latency_ms = self.started.elapsed().as_secs_f64() * 1000.0;
        let _entered = self.span.enter();
        let code = status.as_u16();
        if self.endpoint {
            tracing::debug!(status = code, latency_ms, "answered");
        } else if status.is_server_error() {
            tracing::warn!(status = code, latency_ms, "answered");
        } else {
            tracing::info!(status = code, latency_ms, "answered");
        }
    }
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

    /// The next request's id.
    pub fn make(&self) -> HeaderValue {
        let mut n = self.next.fetch_add(1, Ordering::Relaxed);
        // Written on the stack, from the last digit back: at most 20 digits, a dash, 12 hex
        // digits (no formatting machinery on every request to the endpoint).
        let mut text = [0u8; 40];
        let mut at = text.len();
        loop {
            at -= 1;
            text[at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        at -= 1;
        text[at] = b'-';
        at -= self.prefix.len();
        text[at..at + self.prefix.len()].copy_from_slice(self.prefix.as_bytes());
        HeaderValue::from_bytes(&text[at..]).expect("hex digits, a dash and digits")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_differ_within_and_across_processes() {
        let id = |ids: &RequestIds| ids.make().to_str().unwrap().to_owned();
        let here = RequestIds::new();
        let (a, b, c) = (id(&here), id(&here.clone()), id(&RequestIds::new()));
        let prefix = &here.prefix;
        assert_eq!(
            (a.as_str(), b.as_str()),
            (format!("{prefix}-1").as_str(), format!("{prefix}-2").as_str())
        );
        here.next.store(u64::MAX, Ordering::Relaxed);
        assert_eq!(id(&here), format!("{prefix}-{}", u64::MAX), "the longest count fits");
        assert_ne!(a, b, "clones share the count");
        assert_ne!(a.split('-').next(), c.split('-').next(), "each process draws its own prefix");
    }
}
