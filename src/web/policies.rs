//! `GET /api/policies/export`: a policy as a real library's client program, as
//! `retrylab export --json` prints it.

use axum::Json;
use axum::extract::Query;
use axum::extract::rejection::QueryRejection;
use serde::Deserialize;

use super::error::{AppError, Problem};
use crate::export::{Export, Library, export, read_policy, with_retry_after_mode};
use crate::invalid::Invalid;

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ExportParams {
    /// A preset's name, or a policy as JSON (the settings `PUT /api/labs/{lab}/policy` takes).
    policy: Option<String>,
    /// urllib3, tenacity, stamina, httpx-retries, got, axios-retry or go-retryablehttp.
    library: Option<String>,
    /// Sets the policy's way with `Retry-After` over what `policy` says: floor, jitter_above,
    /// exact, exact_including_zero or nominal_floor.
    retry_after_mode: Option<String>,
}

/// The policy as the library's program: `library`, `version`, `language`, `code`, the policy's
/// `settings`, `unsupported`, each part the library cannot express with what the program does
/// instead, and `cautions`, what `retrylab grade` will mark down in it.
#[utoipa::path(
    get,
    path = "/api/policies/export",
    tag = "policies",
    params(ExportParams),
    responses(
        (status = 200, body = Export),
        (status = 400, description = "A query that cannot be read", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "No or an unknown policy, library or retry_after_mode, or a policy with an unusable setting; `field` names it", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn export_policy(
    query: Result<Query<ExportParams>, QueryRejection>,
) -> Result<Json<Export>, AppError> {
    let Query(params) = query.map_err(|e| AppError::BadRequest(e.body_text()))?;
    let policy =
        params.policy.ok_or_else(|| Invalid::new("policy", "policy: name a preset or give one as JSON"))?;
    let policy = with_retry_after_mode(read_policy(&policy)?, params.retry_after_mode.as_deref())?;
    let library =
        params.library.ok_or_else(|| Invalid::new("library", "library: name the library to export to"))?;
    let library = Library::parse(&library)?;
    Ok(Json(export(&policy, library)))
}
