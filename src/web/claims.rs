//! `GET /api/labs/{lab}/claims`: what the story's steps say about a run, each judged on the
//! lab's snapshot now (the definitions are `crate::claims`).

use axum::Json;
use axum::extract::Query;
use axum::extract::rejection::QueryRejection;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};

use super::error::{AppError, Problem};
use super::responses::LabErrors;
use super::{LabParam, LabPath};
use crate::claims::{ClaimId, Judged, Run, Scope};

/// Which claims, about which messages.
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ClaimsParams {
    /// Claim ids, comma-separated (`dead_lettered,none_applied_twice`); at least one.
    ids: Option<String>,
    /// The run's message ids, comma-separated; absent: every message of the lab.
    messages: Option<String>,
    /// The run before's message ids, comma-separated, for the claims that compare with it.
    before: Option<String>,
    /// When the run began (lab ms), for the claims about the seconds after a change of settings
    /// (`goodput_back`).
    from_ms: Option<u64>,
}

/// The verdicts: `settled` once every message of the run has arrived where it ends, and until
/// then each claim is `pending`.
#[derive(Serialize, utoipa::ToSchema)]
pub struct Claims {
    settled: bool,
    claims: Vec<Judged>,
}

/// The story's claims judged on this lab's run: each with its verdict (`pending` until the run
/// has settled, then `holds` or `fails`; `unknown`, saying why, once messages it speaks of are no
/// longer in the lab), the figure it rests on and the sentence the page shows.
#[utoipa::path(
    get,
    path = "/api/labs/{lab}/claims",
    tag = "labs",
    params(LabParam, ClaimsParams),
    responses(
        (status = 200, body = Claims),
        LabErrors,
        (status = 422, description = "An unknown claim id, a message id that is not a number, or a from_ms later than the lab's clock; `field` names it", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "Too many bytes of snapshots: claims are judged on one, read by this client (snapshot_bytes_per_s) or being built at once (max_snapshot_bytes_building)", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn claims(
    LabPath(lab): LabPath,
    query: Result<Query<ClaimsParams>, QueryRejection>,
) -> Result<Json<Claims>, AppError> {
    let Query(params) = query.map_err(|e| AppError::BadRequest(e.body_text()))?;
    let ids = params.ids.ok_or_else(|| unusable("ids", "ids: name at least one claim".into()))?;
    let ids = ids
        .split(',')
        .map(|name| {
            ClaimId::parse(name.trim())
                .ok_or_else(|| unusable("ids", format!("ids: no claim is named {name:?}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    // A run begins no later than the lab's clock now; past it, the claims' sums would overflow.
    if let Some(from_ms) = params.from_ms.filter(|&ms| ms > lab.now_ms()) {
        return Err(unusable("from_ms", format!("from_ms: {from_ms} is later than the lab's clock now")));
    }
    let scope = Scope {
        messages: message_ids("messages", params.messages.as_deref())?,
        before: message_ids("before", params.before.as_deref())?,
        from_ms: params.from_ms,
    };
    let run = Run::from_snapshot(&lab.snapshot()).expect("a snapshot reads back as a run");
    Ok(Json(Claims { settled: run.settled(&scope.messages), claims: run.judge(&ids, &scope) }))
}

/// A comma-separated list of message ids in query field `field`; none when absent or empty.
fn message_ids(field: &str, list: Option<&str>) -> Result<Vec<u64>, AppError> {
    match list {
        None | Some("") => Ok(Vec::new()),
        Some(list) => list
            .split(',')
            .map(|id| {
                id.trim()
                    .parse::<u64>()
                    .map_err(|_| unusable(field, format!("{field}: {id:?} is not a message id")))
            })
            .collect(),
    }
}

fn unusable(field: &str, detail: String) -> AppError {
    AppError::Field { status: StatusCode::UNPROCESSABLE_ENTITY, field: field.into(), detail }
}
