//! The JSON control API: create a lab, read its snapshot, change the downstream and the
//! policy, send bursts, reset (the dead-letter queue's routes are `dead_letters`').

use axum::Json;
use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::error::{AppError, Problem};
use super::responses::{JsonBodyErrors, LabErrors, StoreErrors};
use super::{AppState, LabParam, LabPath};
use crate::domain::{TrafficUpdate, TrafficView};
use crate::downstream::{DownstreamUpdate, DownstreamView};
use crate::invalid::Invalid;
use crate::lab::BurstError;
use crate::retry::{PolicyUpdate, PolicyView};

#[derive(Serialize, utoipa::ToSchema)]
pub struct Created {
    pub(super) id: String,
    pub(super) url: String,
}

/// Creates a lab.
#[utoipa::path(
    post,
    path = "/api/labs",
    tag = "labs",
    responses(
        (status = 201, body = Created),
        (status = 429, description = "max_labs reached, or too many control requests", body = Problem, content_type = "application/problem+json"),
        StoreErrors,
    )
)]
pub async fn create_lab(State(app): State<AppState>) -> Result<Response, AppError> {
    let lab = app.labs.create().map_err(lab_limit)?;
    if let Err(refused) = lab.persisted().await {
        app.labs.remove(&lab.id); // a refused lab leaves nothing behind
        return Err(refused.into());
    }
    let url = format!("/labs/{}", lab.id);
    let created = Created { id: lab.id.to_string(), url: url.clone() };
    Ok((StatusCode::CREATED, [(header::LOCATION, url)], Json(created)).into_response())
}

pub fn lab_limit(max: usize) -> AppError {
    AppError::Limit {
        status: StatusCode::TOO_MANY_REQUESTS,
        limit: "max_labs",
        detail: format!("this server already holds {max} labs (max_labs); try again later"),
    }
}

/// The whole lab: settings, counters, messages with every attempt, dead letters.
#[utoipa::path(
    get,
    path = "/api/labs/{lab}",
    tag = "labs",
    params(LabParam),
    responses(
        (status = 200, body = crate::lab::SnapshotView),
        LabErrors,
        (status = 429, description = "Too many bytes of snapshots: read by this client (snapshot_bytes_per_s) or being built at once (max_snapshot_bytes_building)", body = super::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn snapshot(LabPath(lab): LabPath) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], lab.snapshot_to_watch()).into_response()
}

/// Changes the downstream's mode and parameters; absent fields keep their value.
#[utoipa::path(
    put,
    path = "/api/labs/{lab}/downstream",
    tag = "labs",
    params(LabParam),
    request_body = DownstreamUpdate,
    responses((status = 200, body = DownstreamView), LabErrors, JsonBodyErrors, StoreErrors)
)]
pub async fn set_downstream(
    LabPath(lab): LabPath,
    payload: Result<Json<DownstreamUpdate>, JsonRejection>,
) -> Result<Json<DownstreamView>, AppError> {
    let Json(update) = payload.map_err(named_in("downstream"))?;
    let before = lab.settings();
    let downstream = lab.set_downstream(&update)?;
    kept_or_restored(&lab, before).await?;
    Ok(Json(downstream))
}

/// A body that does not read as the settings (a value of the wrong type, a field that is not
/// one, a key given twice, an array for an object) is answered 422 naming the field as the
/// forms do (`policy.clients`, `downstream.defences.queue`, `policy.protections[0].size`), as a
/// value out of range is.
fn named_in(settings: &'static str) -> impl Fn(JsonRejection) -> AppError {
    move |rejection| {
        let detail = rejection.body_text();
        let said = detail.split_once("target type: ").map(|(_, said)| said);
        match said.filter(|_| rejection.status() == StatusCode::UNPROCESSABLE_ENTITY) {
            Some(said) => {
                let (path, why) = super::error::json_field(said);
                let field = match (settings, path.as_str()) {
                    (settings, "") => settings.to_owned(),
                    ("", path) => path.to_owned(),
                    (settings, path) => format!("{settings}.{path}"),
                };
                let detail = if path.is_empty() { why.to_owned() } else { format!("{path}: {why}") };
                AppError::Field { status: StatusCode::UNPROCESSABLE_ENTITY, field, detail }
            }
            None => rejection.into(),
        }
    }
}

/// Changes the retry policy; absent fields keep their value.
#[utoipa::path(
    put,
    path = "/api/labs/{lab}/policy",
    tag = "labs",
    params(LabParam),
    request_body = PolicyUpdate,
    responses((status = 200, body = PolicyView), LabErrors, JsonBodyErrors, StoreErrors)
)]
pub async fn set_policy(
    LabPath(lab): LabPath,
    payload: Result<Json<PolicyUpdate>, JsonRejection>,
) -> Result<Json<PolicyView>, AppError> {
    let Json(update) = payload.map_err(named_in("policy"))?;
    let before = lab.settings();
    let policy = lab.set_policy(&update)?;
    kept_or_restored(&lab, before).await?;
    Ok(Json(policy.view()))
}

/// Sets the steady traffic: new messages at `rate_per_s` (0 stops it), Poisson or even
/// arrivals drawn from the policy's seed, for `for_ms` or until stopped. The traffic is set
/// even when the lab or the server owes its most deliveries (`max_active_messages_per_lab`,
/// `max_active_messages`): each arrival due then is refused at the source and counted in
/// `refused`, not answered with an error. `sent` and `refused` carry on across a restart.
#[utoipa::path(
    put,
    path = "/api/labs/{lab}/traffic",
    tag = "labs",
    params(LabParam),
    request_body = TrafficUpdate,
    responses((status = 200, body = TrafficView), LabErrors, JsonBodyErrors, StoreErrors)
)]
pub async fn set_traffic(
    State(app): State<AppState>,
    LabPath(lab): LabPath,
    payload: Result<Json<TrafficUpdate>, JsonRejection>,
) -> Result<Json<TrafficView>, AppError> {
    let Json(update) = payload.map_err(named_in(""))?;
    let (traffic, before) = lab.set_traffic(&update).map_err(|refusal| match refusal.limit {
        Some(limit) => {
            AppError::Limit { status: StatusCode::UNPROCESSABLE_ENTITY, limit, detail: refusal.detail }
        }
        None => AppError::Field {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            field: refusal.field.into(),
            detail: refusal.detail,
        },
    })?;
    if let Err(refused) = lab.persisted().await {
        lab.restore_traffic(before);
        app.producer.drive_traffic(&lab);
        return Err(refused.into());
    }
    app.producer.drive_traffic(&lab);
    Ok(Json(traffic))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BurstRequest {
    count: u64,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct Accepted {
    message_ids: Vec<u64>,
}

/// Sends `count` new messages; answered once they are committed.
#[utoipa::path(
    post,
    path = "/api/labs/{lab}/bursts",
    tag = "labs",
    params(LabParam),
    request_body = BurstRequest,
    responses(
        (status = 202, body = Accepted),
        LabErrors,
        JsonBodyErrors,
        StoreErrors,
        (status = 409, description = "The lab holds or owes too many messages, or lives on another instance (fly-replay)", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn burst(
    State(app): State<AppState>,
    LabPath(lab): LabPath,
    payload: Result<Json<BurstRequest>, JsonRejection>,
) -> Result<(StatusCode, Json<Accepted>), AppError> {
    let Json(request) = payload?;
    let count = usize::try_from(request.count).unwrap_or(usize::MAX);
    check_overall_active(&app, count.min(app.limits.max_burst))?;
    let ids = lab.accept_burst(count).map_err(|e| match e {
        BurstError::Count { max } if count == 0 => AppError::Limit {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            limit: "max_burst",
            detail: format!("count must be at least 1 (and at most {max}, max_burst)"),
        },
        BurstError::Count { max } => AppError::Limit {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            limit: "max_burst",
            detail: format!("count must be 1 to {max} (max_burst); send a smaller burst"),
        },
        BurstError::TooManyActive { max, active } => AppError::Limit {
            status: StatusCode::CONFLICT,
            limit: "max_active_messages_per_lab",
            detail: format!(
                "this lab still owes {active} messages a delivery and takes at most {max} at once \
                 (max_active_messages_per_lab); wait for them to finish or reset the lab"
            ),
        },
        BurstError::LabFull { max, held, dead_letters, owed } => AppError::Limit {
            status: StatusCode::CONFLICT,
            limit: "max_messages_per_lab",
            detail: format!(
                "this lab holds {held} messages and takes at most {max} (max_messages_per_lab): \
                 {dead_letters} dead letters, which stay until they are replayed, deleted or expire \
                 (--dead-letter-ttl-s), and {owed} messages still owed a delivery (delivered ones \
                 make room). Replay or delete dead letters, wait for the deliveries to finish, or \
                 reset the lab"
            ),
        },
    })?;
    // Accepted means committed: a crash after this answer cannot lose the messages. Refused
    // means nothing was created: a client that retries as told makes no duplicates.
    if let Err(refused) = lab.persisted().await {
        lab.withdraw_burst(&ids);
        return Err(refused.into());
    }
    app.producer.start(&lab, ids.clone());
    Ok((StatusCode::ACCEPTED, Json(Accepted { message_ids: ids })))
}

/// What a reset does to the settings: keeps them (`keep`, without a body too), or puts the
/// downstream and the policy back to a new lab's (`defaults`), as the page's chapters do.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResetRequest {
    #[serde(default)]
    settings: ResetSettings,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ResetSettings {
    #[default]
    Keep,
    Defaults,
}

/// Stops the steady traffic and clears messages, dead letters and the ledger; settings stay,
/// unless the body asks `{"settings": "defaults"}`.
#[utoipa::path(
    post,
    path = "/api/labs/{lab}/reset",
    tag = "labs",
    params(LabParam),
    request_body(content = Option<ResetRequest>, content_type = "application/json"),
    responses(
        (status = 200, body = crate::lab::SnapshotView),
        (status = 202, description = "Cleared, but the store cannot write it yet: it will when it can", body = crate::lab::SnapshotView),
        LabErrors,
        JsonBodyErrors,
    )
)]
pub async fn reset(LabPath(lab): LabPath, body: Bytes) -> Result<Response, AppError> {
    let request: ResetRequest = if body.iter().all(u8::is_ascii_whitespace) {
        ResetRequest::default()
    } else {
        serde_json::from_slice(&body).map_err(|err| {
            Invalid::new(
                "settings",
                format!("a reset takes {{}} or {{\"settings\": \"keep\"|\"defaults\"}}: {err}"),
            )
        })?
    };
    lab.reset();
    if request.settings == ResetSettings::Defaults {
        lab.default_settings();
    }
    // A reset cannot be taken back (what it cleared is gone from memory): when the store cannot
    // write it yet, the answer says it was accepted, and the store writes it when it can.
    let status = if lab.persisted().await.is_ok() { StatusCode::OK } else { StatusCode::ACCEPTED };
    Ok((status, [(header::CONTENT_TYPE, "application/json")], lab.snapshot()).into_response())
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct Recovered {
    resumed: usize,
}

/// Kills the lab's client mid-flight and resumes every delivery from the store.
#[utoipa::path(
    post,
    path = "/api/labs/{lab}/crash-client",
    tag = "labs",
    params(LabParam),
    responses((status = 200, body = Recovered), LabErrors, StoreErrors)
)]
pub async fn crash_client(
    State(app): State<AppState>,
    LabPath(lab): LabPath,
) -> Result<Json<Recovered>, AppError> {
    // One recovery at a time: two at once would start two delivery loops for one message.
    let _turn = lab.recovery_turn().await;
    let resumed = app.producer.crash_and_recover(&lab, &app.store).await.map_err(|e| {
        tracing::warn!(error = %e, "could not read the lab back from the store");
        AppError::Unavailable {
            status: StatusCode::SERVICE_UNAVAILABLE,
            retry_after_s: Some(1),
            detail: "the store did not answer in time; try again shortly".into(),
        }
    })?;
    Ok(Json(Recovered { resumed }))
}

/// Waits for a settings change to be committed; when the store cannot keep it, puts the
/// settings back as they were, so the refusal changes nothing.
async fn kept_or_restored(lab: &crate::lab::Lab, before: crate::lab::Settings) -> Result<(), AppError> {
    lab.persisted().await.map_err(|refused| {
        lab.restore_settings(before);
        refused.into()
    })
}

/// Refuses work that would take the whole server past `max_active_messages`.
pub(super) fn check_overall_active(app: &AppState, adding: usize) -> Result<(), AppError> {
    let max = app.limits.max_active_messages;
    let active = app.labs.active_messages();
    if active + adding <= max {
        return Ok(());
    }
    Err(AppError::Limit {
        status: StatusCode::SERVICE_UNAVAILABLE,
        limit: "max_active_messages",
        detail: format!(
            "the server is delivering {active} messages for all labs and takes at most {max} \
             (max_active_messages); try again in a few seconds"
        ),
    })
}
