//! The HTTP face of retrylab: one route table, the shared state, and the middleware.
//! Handlers are grouped by resource: `api` (the JSON control API), `dead_letters` (the
//! dead-letter queue's API), `endpoint` (the fault-injectable downstream), `events` (SSE),
//! `pages` (HTML and static assets).

mod access_log;
mod api;
mod app;
mod callers;
mod claims;
mod compare;
mod connections;
mod dead_letters;
mod early_errors;
mod endpoint;
pub mod error;
mod events;
mod front;
mod kinds;
mod openapi;
mod pages;
mod policies;
mod rate_limit;
mod responses;
mod snapshot_limit;

pub use app::{App, AppState};
pub use connections::{ConnectionLimits, serve as serve_connections};
pub use rate_limit::{InternalCaller, RateLimiter};
pub use snapshot_limit::SnapshotGate;

use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, FromRequestParts, RawPathParams};
use axum::http::request::Parts;
use axum::routing::{get, post, put};
use tower::ServiceBuilder;
use tower_http::CompressionLevel;
use tower_http::compression::CompressionLayer;

use crate::domain::LabId;
use crate::lab::Lab;
use error::AppError;

/// The whole route table; `/metrics` only when it is not served on an address of its own.
pub fn router(state: AppState, with_metrics: bool) -> Router {
    let body_limit = state.limits.max_body_bytes;
    let routes = if with_metrics { metrics_routes() } else { Router::new() };
    routes
        .route("/", get(pages::new_lab))
        .route("/healthz", get(healthz))
        .route("/static/{file}", get(pages::asset).layer(compressed()))
        .route("/labs/{lab}", get(pages::lab))
        .route(endpoint::ROUTE, post(endpoint::downstream))
        .route("/api/openapi.json", get(openapi::openapi_json))
        .route("/compare", get(compare::form))
        .route("/compare/{id}", get(compare::page))
        .route("/api/comparisons", post(compare::create))
        .route("/api/comparisons/{id}", get(compare::report))
        .route("/api/comparisons/{id}/labs", post(compare::open_in_lab))
        .route("/api/policies/export", get(policies::export_policy))
        .route("/api/protection-kinds", get(kinds::protection_kinds))
        .route("/api/labs", post(api::create_lab))
        .route("/api/labs/{lab}", get(api::snapshot).layer(compressed()))
        .route("/api/labs/{lab}/downstream", put(api::set_downstream))
        .route("/api/labs/{lab}/policy", put(api::set_policy))
        .route("/api/labs/{lab}/bursts", post(api::burst))
        .route("/api/labs/{lab}/traffic", put(api::set_traffic))
        .route("/api/labs/{lab}/dead-letters", get(dead_letters::list))
        .route("/api/labs/{lab}/dead-letters/{id}", get(dead_letters::detail))
        .route("/api/labs/{lab}/dead-letters/replay", post(dead_letters::replay))
        .route("/api/labs/{lab}/dead-letters/delete", post(dead_letters::delete))
        .route("/api/labs/{lab}/dead-letters/quarantine", post(dead_letters::quarantine))
        .route("/api/labs/{lab}/dead-letters/redrive/cancel", post(dead_letters::cancel_redrive))
        .route("/api/labs/{lab}/reset", post(api::reset))
        .route("/api/labs/{lab}/crash-client", post(api::crash_client))
        .route("/api/labs/{lab}/events", get(events::stream))
        .route("/api/labs/{lab}/callers", get(callers::callers))
        .route("/api/labs/{lab}/claims", get(claims::claims))
        .fallback(|| async { AppError::NotFound("no such route".into()) })
        .method_not_allowed_fallback(|| async {
            AppError::Rejected {
                status: axum::http::StatusCode::METHOD_NOT_ALLOWED,
                detail: "this route does not take that method".into(),
            }
        })
        // One layer, outermost first: each `Router::layer` boxes every route's service once
        // more, and each box costs every request a dynamic call and an allocation.
        .layer(
            ServiceBuilder::new()
                .layer(front::FrontLayer::new(state.clone()))
                .layer(DefaultBodyLimit::max(body_limit)),
        )
        .with_state(state)
}

/// `GET /healthz`: 200 while serving and the store writes; 503 naming the cause while its
/// commits fail (a full disk, say), so a load balancer stops sending work that cannot be kept.
async fn healthz(
    axum::extract::State(app): axum::extract::State<AppState>,
) -> Result<&'static str, AppError> {
    let health = app.store.health().borrow().clone();
    match health.failing {
        None => Ok("ok"),
        Some(error) => Err(AppError::Unavailable {
            status: axum::http::StatusCode::SERVICE_UNAVAILABLE,
            retry_after_s: Some(1),
            detail: format!("not ready: the store cannot write ({error})"),
        }),
    }
}

/// Gzip, for a browser that accepts it, on the routes that send a lot: a big lab's snapshot (the
/// page starts from one: many megabytes of JSON that shrink about tenfold) and the page's
/// scripts. Fastest level: the snapshot is made fresh for each request. Never on the event
/// stream (a compressor holds events back) nor on the endpoint (its answers are small and
/// are kept byte for byte).
fn compressed() -> CompressionLayer {
    CompressionLayer::new().quality(CompressionLevel::Fastest)
}

fn metrics_routes() -> Router<AppState> {
    Router::new().route("/metrics", get(pages::metrics))
}

/// `/metrics` alone, for a private address.
pub fn metrics_router(state: AppState) -> Router {
    metrics_routes().with_state(state)
}

/// A lab made by another named instance is not here: Fly's proxy replays the request to
/// its owner (`fly-replay`). Labs without an instance are served wherever they are.
pub fn owned_here(app: &App, id: &LabId) -> Result<(), AppError> {
    match id.instance() {
        Some(owner) if Some(owner) != app.labs.instance => {
            Err(AppError::ElsewhereInstance { owner: owner.to_string() })
        }
        _ => Ok(()),
    }
}

/// The `{lab}` path segment, as the API description shows it.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
pub struct LabParam {
    /// The lab id (a UUID)
    #[allow(dead_code)]
    lab: String,
}

/// A lab named by the `{lab}` path segment: 400 if it is not a lab id, 404 if unknown.
pub struct LabPath(pub Arc<Lab>);

impl FromRequestParts<AppState> for LabPath {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, AppError> {
        // The raw captures, not a map of owned strings: every request to the endpoint comes here.
        let segments = RawPathParams::from_request_parts(parts, state)
            .await
            .map_err(|e| AppError::BadRequest(e.body_text()))?;
        let raw = segments.iter().find_map(|(name, value)| (name == "lab").then_some(value)).unwrap_or("");
        let id = LabId::parse(raw).map_err(AppError::BadRequest)?;
        owned_here(state, &id)?;
        state
            .labs
            .get(&id)
            .map(LabPath)
            .ok_or_else(|| AppError::NotFound(format!("there is no lab {id}; open / to start a new one")))
    }
}
