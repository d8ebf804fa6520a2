//! `GET /api/openapi.json`: the JSON API described from the handlers' own annotations and the
//! request and response types themselves, so the description changes with the code.

use axum::Json;
use utoipa::OpenApi;

use super::{api, endpoint, events, pages};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "retrylab",
        description = "Break a real HTTP endpoint, send real traffic at it, and watch retries, backoff, \
                       idempotency keys and a dead-letter queue do their work."
    ),
    paths(
        api::create_lab,
        api::snapshot,
        api::set_downstream,
        api::set_policy,
        api::burst,
        api::replay,
        api::reset,
        api::crash_client,
        events::stream,
        endpoint::downstream,
        pages::metrics,
    )
)]
pub struct ApiDoc;

pub async fn openapi_json() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}
