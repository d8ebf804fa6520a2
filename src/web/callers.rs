//! Outside callers of a lab's endpoint: how the endpoint names one (`X-Client-Name`, else
//! `User-Agent`, else its address), and `GET /api/labs/{lab}/callers`, a report card per caller
//! graded from what the endpoint observed.

use std::net::SocketAddr;

use axum::Json;
use axum::extract::{ConnectInfo, State};
use axum::http::HeaderMap;
use serde::Serialize;

use super::error::{AppError, Problem};
use super::{AppState, LabParam, LabPath};
use crate::callers::{CallerName, CallerReport, Untracked};

const CLIENT_NAME: axum::http::HeaderName = axum::http::HeaderName::from_static("x-client-name");

/// Names an outside caller from its request: 400 naming the header when its `X-Client-Name`
/// cannot be a name.
pub(super) fn outside_caller(
    app: &AppState,
    headers: &HeaderMap,
    peer: Option<ConnectInfo<SocketAddr>>,
) -> Result<CallerName, String> {
    let address = app.endpoint_limiter.client_address(headers, peer.map(|p| p.0)).map(|ip| ip.to_string());
    CallerName::from_request(
        headers.get(CLIENT_NAME).map(|v| v.as_bytes()),
        headers.get(axum::http::header::USER_AGENT).map(|v| v.as_bytes()),
        address.as_deref(),
    )
}

/// Every outside caller's report card, and what the bounds held back.
#[derive(Serialize, utoipa::ToSchema)]
pub struct CallersView {
    callers: Vec<CallerReport>,
    /// Requests answered but not kept, by the limit that held them back.
    untracked: Untracked,
    max_callers_per_lab: usize,
}

/// A report card per outside caller: ten checks of its retry behaviour, each a verdict
/// (`pass`, `warn`, `fail`, `not_seen`, or `not_judged` when the evidence cannot decide) with
/// the keys and times it rests on.
#[utoipa::path(
    get,
    path = "/api/labs/{lab}/callers",
    tag = "labs",
    params(LabParam),
    responses(
        (status = 200, description = "The callers, by name", body = CallersView),
        (status = 400, description = "Not a lab id", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such lab", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The lab lives on another instance (fly-replay)", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn callers(
    State(app): State<AppState>,
    LabPath(lab): LabPath,
) -> Result<Json<CallersView>, AppError> {
    let (callers, untracked) = lab.caller_reports();
    Ok(Json(CallersView { callers, untracked, max_callers_per_lab: app.limits.max_callers_per_lab }))
}
