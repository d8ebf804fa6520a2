//! The dead-letter queue's API, as an operator works it: a filtered, paged list with the facet
//! counts (or the whole filtered queue as NDJSON, streamed a few letters at a time), one letter
//! in detail, and the actions on a selection (by ids or by filter): replay (at once, or at a
//! rate as a redrive that can be cancelled, or a dry run that changes nothing), delete,
//! quarantine and back. A bad field is refused naming it.

use std::collections::HashMap;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::api::check_overall_active;
use super::error::{AppError, Problem};
use super::responses::{LabErrors, SelectionErrors, StoreErrors};
use super::{AppState, LabParam, LabPath};
use crate::dlq::{Filter, FilterError, Redrive, ReplayRefusal, Selection, Target};
use crate::domain::MIN_RATE_PER_S;
use crate::lab::{Detail, DryRun, Lab, Listing, RedriveRefusal};

/// A page unless `limit` says otherwise.
const DEFAULT_PAGE: usize = 100;
/// Letters an export reads from the lab at a time: its memory, whatever the queue's size.
const EXPORT_CHUNK: usize = 200;

/// The list's query: the filter's fields, and `limit`, `after`, `format`.
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct ListParams {
    /// Causes, comma-separated (the description lists them, from `Cause::ALL`).
    cause: Option<String>,
    /// Last statuses, comma-separated: an HTTP status, or timeout, transport_error, interrupted, short_circuited, none.
    status: Option<String>,
    /// Replayed exactly this many times before.
    replays: Option<u32>,
    /// Dead-lettered at or after this lab time (ms).
    since_ms: Option<u64>,
    /// Dead-lettered at or before this lab time (ms).
    until_ms: Option<u64>,
    /// A message id or the start of its idempotency key.
    q: Option<String>,
    /// Whether the ledger holds the write as applied.
    applied: Option<bool>,
    /// Whether the letter is quarantined.
    quarantined: Option<bool>,
    /// Letters per page: 1 to max_messages_per_lab (100 unless given).
    limit: Option<usize>,
    /// The cursor: the `next` of the page before.
    after: Option<u64>,
    /// `json` (a page) or `ndjson` (every matching letter, one a line, streamed).
    format: Option<String>,
}

/// Query fields that stay text; the others are read as JSON numbers and booleans.
const TEXT_FIELDS: [&str; 4] = ["cause", "status", "q", "format"];

/// The dead letters a filter matches, a page at a time, with the counts per cause and per
/// last status of the whole queue; or, with `format=ndjson`, all of them, one a line.
#[utoipa::path(
    get,
    path = "/api/labs/{lab}/dead-letters",
    tag = "dead letters",
    params(LabParam, ListParams),
    responses(
        (status = 200, content(
            (Listing = "application/json"),
            (crate::dlq::DeadLetter = "application/x-ndjson"),
        )),
        LabErrors,
        (status = 422, description = "A filter field, limit or format with an unusable value; `field` names it", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "An export past this client's allowance of bytes read (snapshot_bytes_per_s): exports and snapshots share it", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn list(
    State(app): State<AppState>,
    LabPath(lab): LabPath,
    headers: axum::http::HeaderMap,
    peer: Option<axum::Extension<axum::extract::ConnectInfo<std::net::SocketAddr>>>,
    query: Result<Query<HashMap<String, String>>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, AppError> {
    let Query(raw) = query.map_err(|e| AppError::BadRequest(e.body_text()))?;
    let mut fields = Map::new();
    for (name, value) in raw {
        let value = match TEXT_FIELDS.contains(&name.as_str()) {
            true => Value::String(value),
            false => serde_json::from_str(&value).unwrap_or(Value::String(value)),
        };
        fields.insert(name, value);
    }
    let format = take::<String>(&mut fields, "format")?;
    let limit = take::<usize>(&mut fields, "limit")?;
    let after = take::<u64>(&mut fields, "after")?;
    let selection = filter_from(Value::Object(fields), "")?;
    match format.as_deref() {
        None | Some("json") => {}
        Some("ndjson") => {
            let ids = lab.matching_dead_letters(&selection);
            // An export is read like a snapshot: its bytes count against the same allowance
            // per client, so many exports from one address are refused, not queued.
            let client = app.snapshot_gate.limiter().client_address(&headers, peer.map(|p| p.0.0));
            if let Some(client) = client {
                app.snapshot_gate.charge(client, lab.export_estimate(&ids))?;
            }
            return Ok(export(lab, ids));
        }
        Some(other) => {
            return Err(field("format", format!("format: {other:?} is not one of json, ndjson")));
        }
    }
    let max = app.limits.max_messages_per_lab;
    let limit = limit.unwrap_or(DEFAULT_PAGE);
    if limit == 0 || limit > max {
        return Err(field("limit", format!("limit must be 1 to {max} (max_messages_per_lab)")));
    }
    Ok(Json(lab.dead_letters_page(&selection, after, limit)).into_response())
}

/// Streams the matching letters, read from the lab `EXPORT_CHUNK` at a time: the ids are taken
/// at the start (8 bytes each), the letters as the stream goes, so memory stays bounded however
/// large the queue. A letter replayed or deleted meanwhile is left out.
fn export(lab: std::sync::Arc<Lab>, ids: Vec<u64>) -> Response {
    let chunks = futures_util::stream::unfold(0usize, move |from| {
        let lab = lab.clone();
        let ids = &ids;
        let chunk: Option<Vec<u64>> =
            (from < ids.len()).then(|| ids[from..(from + EXPORT_CHUNK).min(ids.len())].to_vec());
        async move {
            let chunk = chunk?;
            let read = chunk.len();
            // Serialized off the async workers: eight exports at once would otherwise keep
            // them busy and every other lab's requests would wait behind them.
            let text = tokio::task::spawn_blocking(move || {
                let mut text = String::new();
                for letter in lab.dead_letters_for_export(&chunk) {
                    text.push_str(&serde_json::to_string(&letter).expect("a dead letter serializes"));
                    text.push('\n');
                }
                text
            })
            .await;
            // A chunk that could not be read breaks the connection: a cut-off export must not
            // look whole.
            let text = text.map(Bytes::from).map_err(std::io::Error::other);
            Some((text, from + read))
        }
    });
    ([(header::CONTENT_TYPE, "application/x-ndjson")], Body::from_stream(chunks)).into_response()
}

/// The `{lab}` and `{id}` path segments.
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
pub struct LetterParam {
    /// The message's id
    #[allow(dead_code)]
    id: String,
}

/// One dead letter: its key, every attempt of every round with its wait, why and when it was
/// dead-lettered, how often it was replayed, and whether its write was applied.
#[utoipa::path(
    get,
    path = "/api/labs/{lab}/dead-letters/{id}",
    tag = "dead letters",
    params(LabParam, LetterParam),
    responses(
        (status = 200, body = Detail),
        LabErrors,
        (status = 422, description = "The id is not a message id", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn detail(
    LabPath(lab): LabPath,
    Path(params): Path<HashMap<String, String>>,
) -> Result<Json<Detail>, AppError> {
    let raw = params.get("id").map_or("", String::as_str);
    let id: u64 = raw.parse().map_err(|_| field("id", format!("id: {raw:?} is not a message id")))?;
    lab.dead_letter_detail(id).map(Json).ok_or_else(|| AppError::Field {
        status: StatusCode::NOT_FOUND,
        field: "id".into(),
        detail: format!("message {id} is not in this lab's dead-letter queue"),
    })
}

/// A replay: by `ids` or `filter` (or neither: every letter not quarantined), at once or at
/// `rate_per_s`, or only a `dry_run`.
#[derive(Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplayRequest {
    /// These dead letters; each must be in this lab's queue.
    ids: Option<Vec<u64>>,
    /// The dead letters this filter matches (quarantined ones skipped unless confirmed).
    /// Read on its own, so its fields are named when they do not read.
    #[allow(dead_code)]
    filter: Option<Filter>,
    /// Needed to replay quarantined dead letters.
    #[serde(default)]
    confirm_quarantined: bool,
    /// Answer what would happen and change nothing.
    #[serde(default)]
    dry_run: bool,
    /// Replay this many per second, as a redrive, instead of all at once: from 0.01
    /// (`MIN_RATE_PER_S`, one every 100 s) up to max_redrive_rate_per_s.
    #[schema(minimum = 0.01)]
    rate_per_s: Option<f64>,
}

/// What a replay took.
#[derive(Serialize, utoipa::ToSchema)]
pub struct Replayed {
    /// The messages sent again (with a rate: those the redrive will send, in order).
    message_ids: Vec<u64>,
    /// The redrive, when the replay goes at a rate.
    #[serde(skip_serializing_if = "Option::is_none")]
    redrive: Option<Redrive>,
}

/// Replays dead letters with their keys and a fresh budget: all but the quarantined, by id, or
/// by filter; at once, or at a rate (a redrive, shown in the snapshot's `redrive`); or a dry
/// run that says what would go and changes nothing.
#[utoipa::path(
    post,
    path = "/api/labs/{lab}/dead-letters/replay",
    tag = "dead letters",
    params(LabParam),
    request_body(content = ReplayRequest, description = "Empty or `{}` replays every dead letter that is not quarantined"),
    responses(
        (status = 200, description = "A dry run: nothing was changed", body = DryRun),
        (status = 202, body = Replayed),
        LabErrors,
        (status = 404, description = "An id not in this lab's dead-letter queue (`field`: ids)", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "The body is larger than max_body_bytes; sent with Connection: close, and the connection closes after it", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "A field with an unusable value, a filter that matches nothing, or a rate out of range; `field` names it", body = Problem, content_type = "application/problem+json"),
        StoreErrors,
        (status = 409, description = "Quarantined without confirmation, too many owed, a redrive already running, or the lab lives on another instance (fly-replay)", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn replay(
    State(app): State<AppState>,
    LabPath(lab): LabPath,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, AppError> {
    let (request, target): (ReplayRequest, Target) = body_with_target(&body?)?;
    if request.dry_run {
        let dry = lab.dry_run(&target, true, request.confirm_quarantined).map_err(refused)?;
        return Ok(Json(dry).into_response());
    }
    if let Some(rate) = request.rate_per_s {
        let max = app.limits.max_redrive_rate_per_s;
        if !(rate.is_finite() && (MIN_RATE_PER_S..=f64::from(max)).contains(&rate)) {
            return Err(AppError::Field {
                status: StatusCode::UNPROCESSABLE_ENTITY,
                field: "rate_per_s".into(),
                detail: format!(
                    "rate_per_s must be at least {MIN_RATE_PER_S} (the lowest rate, one letter every {} s) \
                     and at most {max} (max_redrive_rate_per_s)",
                    1.0 / MIN_RATE_PER_S
                ),
            });
        }
        let (chosen, redrive) = lab.start_redrive(&target, request.confirm_quarantined, rate).map_err(
            |refusal| match refusal {
                RedriveRefusal::Running(running) => AppError::Conflict(format!(
                    "a redrive is running ({} of {} sent at {}/s); cancel it first \
                     (POST .../dead-letters/redrive/cancel)",
                    running.sent, running.total, running.rate_per_s
                )),
                RedriveRefusal::Chosen(refusal) => refused(refusal),
            },
        )?;
        if let Err(not_kept) = lab.persisted().await {
            lab.withdraw_redrive();
            return Err(not_kept.into());
        }
        app.producer.redrive(&lab);
        let replayed = Replayed { message_ids: chosen.ids, redrive: Some(redrive) };
        return Ok((StatusCode::ACCEPTED, Json(replayed)).into_response());
    }
    let asked = match &target {
        Target::Ids(ids) => ids.len(),
        _ => lab.counters().dead_letter as usize,
    };
    check_overall_active(&app, asked)?;
    let letters = lab.replay(&target, request.confirm_quarantined).map_err(refused)?;
    let ids: Vec<u64> = letters.iter().map(|d| d.id).collect();
    if let Err(not_kept) = lab.persisted().await {
        lab.withdraw_replay(letters);
        return Err(not_kept.into());
    }
    app.producer.start(&lab, ids.clone());
    Ok((StatusCode::ACCEPTED, Json(Replayed { message_ids: ids, redrive: None })).into_response())
}

/// A delete: by `ids` or `filter` (one of them). A filter must narrow the queue (to empty a
/// lab, reset it), and comes with `expected`, the count the person confirmed.
#[derive(Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeleteRequest {
    ids: Option<Vec<u64>>,
    /// Read on its own, so its fields are named when they do not read. At least one field
    /// that narrows (a blank or null `q` alone is no filter).
    #[allow(dead_code)]
    filter: Option<Filter>,
    /// With `filter`, needed: how many letters the person saw match and confirmed (the list's
    /// `matched`). If more match when the delete runs, nothing is deleted (409).
    expected: Option<usize>,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct DeletedIds {
    /// The dead letters deleted, with their messages: gone from the store.
    deleted: Vec<u64>,
}

/// Deletes dead letters (and their messages) by id or by filter. The list's `matched` says
/// beforehand how many a filter takes; a delete by filter sends that count as `expected`, and
/// deletes nothing if more match by the time it runs.
#[utoipa::path(
    post,
    path = "/api/labs/{lab}/dead-letters/delete",
    tag = "dead letters",
    params(LabParam),
    request_body = DeleteRequest,
    responses(
        (status = 200, body = DeletedIds),
        LabErrors,
        SelectionErrors,
        StoreErrors,
        (status = 409, description = "More letters match the filter now than `expected` said (`field`: expected; the detail says how many match now), or the lab lives on another instance", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn delete(
    LabPath(lab): LabPath,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, AppError> {
    let (request, target): (DeleteRequest, Target) = body_with_target(&body?)?;
    need_a_target(&target)?;
    let confirmed = match &target {
        Target::Filter(_) => Some(confirmed_filter(request.expected)?),
        _ => None,
    };
    let deleted = lab.delete_dead_letters(&target, confirmed).map_err(refused)?;
    let ids = deleted.letters.iter().map(|d| d.id).collect();
    if let Err(not_kept) = lab.persisted().await {
        lab.withdraw_delete(deleted);
        return Err(not_kept.into());
    }
    Ok(Json(DeletedIds { deleted: ids }).into_response())
}

/// A quarantine move: by `ids` or `filter`, into quarantine or (`quarantined: false`) out.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QuarantineRequest {
    ids: Option<Vec<u64>>,
    /// Read on its own, so its fields are named when they do not read.
    #[allow(dead_code)]
    filter: Option<Filter>,
    /// Into quarantine (the default) or out of it.
    #[serde(default = "yes")]
    quarantined: bool,
}

impl Default for QuarantineRequest {
    fn default() -> Self {
        QuarantineRequest { ids: None, filter: None, quarantined: true }
    }
}

fn yes() -> bool {
    true
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct QuarantineMoved {
    /// The letters whose flag changed.
    changed: Vec<u64>,
    quarantined: bool,
}

/// Moves dead letters into quarantine ("replay all" then leaves them alone) or back out.
#[utoipa::path(
    post,
    path = "/api/labs/{lab}/dead-letters/quarantine",
    tag = "dead letters",
    params(LabParam),
    request_body = QuarantineRequest,
    responses(
        (status = 200, body = QuarantineMoved),
        LabErrors,
        SelectionErrors,
        StoreErrors,
    )
)]
pub async fn quarantine(
    LabPath(lab): LabPath,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, AppError> {
    let (request, target): (QuarantineRequest, Target) = body_with_target(&body?)?;
    need_a_target(&target)?;
    let changed = lab.quarantine(&target, request.quarantined).map_err(refused)?;
    if let Err(not_kept) = lab.persisted().await {
        lab.withdraw_quarantine(&changed, request.quarantined);
        return Err(not_kept.into());
    }
    Ok(Json(QuarantineMoved { changed, quarantined: request.quarantined }).into_response())
}

/// Stops the running redrive: the letters it has not replayed stay in the queue.
#[utoipa::path(
    post,
    path = "/api/labs/{lab}/dead-letters/redrive/cancel",
    tag = "dead letters",
    params(LabParam),
    responses(
        (status = 200, description = "The redrive as it stood when cancelled", body = Redrive),
        LabErrors,
        (status = 409, description = "No redrive is running (`field`: redrive), or the lab lives on another instance", body = Problem, content_type = "application/problem+json"),
        StoreErrors,
    )
)]
pub async fn cancel_redrive(LabPath(lab): LabPath) -> Result<Json<Redrive>, AppError> {
    let cancelled = lab.cancel_redrive().ok_or_else(|| AppError::Field {
        status: StatusCode::CONFLICT,
        field: "redrive".into(),
        detail: "no redrive is running in this lab; nothing was cancelled".into(),
    })?;
    // A cancel the store cannot keep is kept in memory and written when it can: the letters
    // stay in the queue either way, and the redrive's loop has stopped.
    let _ = lab.persisted().await;
    Ok(Json(cancelled))
}

/// Reads a request body (empty means the defaults), naming the field at fault, and the letters
/// it names: `ids`, `filter`, or neither (all); not both.
fn body_with_target<T: DeserializeOwned + Default + Targets>(body: &[u8]) -> Result<(T, Target), AppError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok((T::default(), Target::All));
    }
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| AppError::BadRequest(format!("the body is not JSON: {e}")))?;
    let Value::Object(mut fields) = value else {
        return Err(AppError::Unprocessable("the body must be a JSON object".into()));
    };
    let filter = fields.remove("filter");
    // Each field alone first, so a bad one is named.
    for (name, value) in &fields {
        let one = Value::Object(Map::from_iter([(name.clone(), value.clone())]));
        if let Err(e) = serde_json::from_value::<T>(one) {
            let known = T::FIELDS.iter().find(|f| **f == name.as_str()).copied().unwrap_or("");
            let name = if known.is_empty() { name.clone() } else { known.to_owned() };
            return Err(AppError::Field {
                status: StatusCode::UNPROCESSABLE_ENTITY,
                detail: format!("{name}: {e}"),
                field: name,
            });
        }
    }
    let ids = fields.get("ids").filter(|v| !v.is_null()).is_some();
    let request: T = serde_json::from_value(Value::Object(fields))
        .map_err(|e| AppError::Unprocessable(format!("the body is not valid here: {e}")))?;
    let target = match (ids, filter.filter(|f| !f.is_null())) {
        (true, Some(_)) => return Err(field("filter", "give ids or filter, not both".into())),
        (true, None) => Target::Ids(request.ids().unwrap_or_default()),
        (false, Some(filter)) => Target::Filter(filter_from(filter, "filter.")?),
        (false, None) => Target::All,
    };
    Ok((request, target))
}

/// Requests that name letters by `ids`.
trait Targets {
    const FIELDS: &'static [&'static str];
    fn ids(&self) -> Option<Vec<u64>>;
}

impl Targets for ReplayRequest {
    const FIELDS: &'static [&'static str] = &["ids", "confirm_quarantined", "dry_run", "rate_per_s"];
    fn ids(&self) -> Option<Vec<u64>> {
        self.ids.clone()
    }
}

impl Targets for DeleteRequest {
    const FIELDS: &'static [&'static str] = &["ids", "expected"];
    fn ids(&self) -> Option<Vec<u64>> {
        self.ids.clone()
    }
}

impl Targets for QuarantineRequest {
    const FIELDS: &'static [&'static str] = &["ids", "quarantined"];
    fn ids(&self) -> Option<Vec<u64>> {
        self.ids.clone()
    }
}

/// A filter from a JSON object (the body's `filter`, or the query's fields), each field checked
/// on its own so a bad one is named (`prefix` + its name).
fn filter_from(value: Value, prefix: &str) -> Result<Selection, AppError> {
    let Value::Object(fields) = value else {
        return Err(field("filter", "filter must be a JSON object of filter fields".into()));
    };
    for (name, value) in &fields {
        let one = Value::Object(Map::from_iter([(name.clone(), value.clone())]));
        if let Err(e) = serde_json::from_value::<Filter>(one) {
            let at = format!("{prefix}{name}");
            return Err(AppError::Field {
                status: StatusCode::UNPROCESSABLE_ENTITY,
                detail: format!("{at}: {e}"),
                field: at,
            });
        }
    }
    let filter: Filter = serde_json::from_value(Value::Object(fields))
        .map_err(|e| AppError::Unprocessable(format!("the filter is not valid: {e}")))?;
    filter.parse().map_err(|FilterError { field, detail }| AppError::Field {
        status: StatusCode::UNPROCESSABLE_ENTITY,
        field: format!("{prefix}{field}"),
        detail,
    })
}

/// Takes one typed field out of the query's fields, naming it when it does not read.
fn take<T: DeserializeOwned>(
    fields: &mut Map<String, Value>,
    name: &'static str,
) -> Result<Option<T>, AppError> {
    let Some(value) = fields.remove(name) else { return Ok(None) };
    serde_json::from_value(value).map(Some).map_err(|e| field(name, format!("{name}: {e}")))
}

/// Delete and quarantine moves act on what they are told, never on "everything" by default:
/// nor by a filter that narrows nothing (`{"filter": {"q": null}}` would otherwise act on
/// every letter).
fn need_a_target(target: &Target) -> Result<(), AppError> {
    match target {
        Target::All => Err(field("ids", "name the dead letters: give ids or a filter".into())),
        Target::Filter(selection) if !selection.narrows() => Err(field(
            "filter",
            "the filter narrows nothing (a blank or null q alone is no filter), so it would act on \
             every dead letter; give ids or a filter field that narrows, or reset the lab to empty it"
                .into(),
        )),
        _ => Ok(()),
    }
}

/// A delete by filter acts only on the count the person confirmed: a filter matches what
/// there is when it runs, which may be more than the person was shown.
fn confirmed_filter(expected: Option<usize>) -> Result<usize, AppError> {
    expected.ok_or_else(|| {
        field(
            "expected",
            "a delete by filter needs expected: the count of letters the person confirmed (the \
             list's matched for this filter)"
                .into(),
        )
    })
}

fn field(name: &str, detail: String) -> AppError {
    AppError::Field { status: StatusCode::UNPROCESSABLE_ENTITY, field: name.to_owned(), detail }
}

/// A refusal as an answer; nothing was changed.
fn refused(refusal: ReplayRefusal) -> AppError {
    match refusal {
        ReplayRefusal::NotDeadLetters(ids) => AppError::Field {
            status: StatusCode::NOT_FOUND,
            field: "ids".into(),
            detail: format!("not in this lab's dead-letter queue: {ids:?}; nothing was changed"),
        },
        ReplayRefusal::TooManyActive { max, active, asked } => AppError::Limit {
            status: StatusCode::CONFLICT,
            limit: "max_active_messages_per_lab",
            detail: format!(
                "replaying {asked} would leave {} messages owed a delivery, more than {max} \
                 (max_active_messages_per_lab); replay fewer, use rate_per_s, or wait (nothing was replayed)",
                active + asked
            ),
        },
        ReplayRefusal::Quarantined(ids) => AppError::Conflict(format!(
            "quarantined after repeated failures: {ids:?}; find the cause first, then replay them with \
             \"confirm_quarantined\": true (nothing was replayed)"
        )),
        ReplayRefusal::MoreThanConfirmed { confirmed, matching } => AppError::Field {
            status: StatusCode::CONFLICT,
            field: "expected".into(),
            detail: format!(
                "{matching} match now, more than the {confirmed} confirmed (expected); nothing was \
                 deleted: list them again and confirm the count that matches now"
            ),
        },
        ReplayRefusal::NothingMatches => {
            field("filter", "the filter matches no dead letter in this lab; nothing was changed".into())
        }
    }
}
