//! What every request passes first, in one layer: its request id (the client's `x-request-id`,
//! or one made here, and sent back with the answer), the rate limits (`rate_limit::admit`), the
//! access log (`access_log::Logged`), and the headers every answer carries.
//!
//! Written as one tower service rather than eight layers, two of them `from_fn` middlewares:
//! those cloned the route's boxed service, or boxed a future, on every request (BENCHMARKS.md,
//! "Session 29").

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tokio::sync::OwnedSemaphorePermit;
use tower::{Layer, Service};
use tracing::Instrument;
use tracing::instrument::Instrumented;

use super::AppState;
use super::access_log::{Logged, RequestIds};
use super::rate_limit;

const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Puts `Front` around a service.
#[derive(Clone)]
pub struct FrontLayer {
    app: AppState,
    ids: RequestIds,
}

impl FrontLayer {
    pub fn new(app: AppState) -> Self {
        FrontLayer { app, ids: RequestIds::new() }
    }
}

impl<S> Layer<S> for FrontLayer {
    type Service = Front<S>;

    fn layer(&self, inner: S) -> Front<S> {
        Front { inner, app: self.app.clone(), ids: self.ids.clone() }
    }
}

/// The service `FrontLayer` makes (see the module's doc).
#[derive(Clone)]
pub struct Front<S> {
    inner: S,
    app: AppState,
    ids: RequestIds,
}

impl<S> Service<Request> for Front<S>
where
    S: Service<Request, Response = Response, Error = Infallible>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = FrontFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request) -> Self::Future {
        let id = match request.headers().get(X_REQUEST_ID) {
            Some(id) => id.clone(),
            None => {
                let id = self.ids.make();
                request.headers_mut().insert(X_REQUEST_ID, id.clone());
                id
            }
        };
        let logged = Logged::start(&request, &id);
        match rate_limit::admit(&self.app, &request) {
            Ok(permit) => {
                let span = logged.as_ref().map_or_else(tracing::Span::none, Logged::span);
                let inner = self.inner.call(request).instrument(span);
                FrontFuture { state: State::Inner { inner, id, logged, _permit: permit } }
            }
            Err(refused) => {
                let response = answered(refused.into_response(), id, logged);
                FrontFuture { state: State::Refused { response: Some(response) } }
            }
        }
    }
}

/// The policy every answer carries unless its handler set one: the page's scripts, styles and
/// requests come from this origin only, and no other site may frame it.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
    img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// The answer as it leaves: the request's id and the security headers on it (unless the
/// handler set its own), and its line in the log.
fn answered(mut response: Response, id: HeaderValue, logged: Option<Logged>) -> Response {
    let too_large = response.status() == StatusCode::PAYLOAD_TOO_LARGE;
    let headers = response.headers_mut();
    headers.entry(X_REQUEST_ID).or_insert(id);
    headers.entry(header::REFERRER_POLICY).or_insert(HeaderValue::from_static("no-referrer"));
    headers.entry(header::X_CONTENT_TYPE_OPTIONS).or_insert(HeaderValue::from_static("nosniff"));
    headers
        .entry(header::CONTENT_SECURITY_POLICY)
        .or_insert(HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    if too_large {
        // A 413 is sent before the body was read to its end (a chunked body is cut off at
        // `max_body_bytes`), so the connection cannot carry another request: the answer says
        // so and the server closes after it (RFC 9112 §9.6), rather than closing under the
        // client's next request.
        headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    if let Some(logged) = logged {
        logged.answered(response.status());
    }
    response
}

pin_project_lite::pin_project! {
    /// The answer of a request `Front` let in, or of one it refused.
    pub struct FrontFuture<F> {
        #[pin]
        state: State<F>,
    }
}

pin_project_lite::pin_project! {
    #[project = StateProjection]
    enum State<F> {
        Inner {
            #[pin]
            inner: Instrumented<F>,
            id: HeaderValue,
            logged: Option<Logged>,
            // Held until the handler answers (a snapshot's build).
            _permit: Option<OwnedSemaphorePermit>,
        },
        Refused { response: Option<Response> },
    }
}

impl<F> Future for FrontFuture<F>
where
    F: Future<Output = Result<Response, Infallible>>,
{
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProjection::Inner { inner, id, logged, .. } => {
                let Ok(response) = std::task::ready!(inner.poll(cx));
                Poll::Ready(Ok(answered(response, id.clone(), logged.take())))
            }
            StateProjection::Refused { response } => {
                Poll::Ready(Ok(response.take().expect("a refused request is answered once")))
            }
        }
    }
}
