//! Comparisons of retry policies: `POST /api/comparisons` starts one, `GET
//! /api/comparisons/{id}` measures it, and `/compare` and `/compare/{id}` are its pages.

use askama::Template;
use askama_web::WebTemplate;
use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::AppState;
use super::error::{AppError, Problem};
use super::pages::NotFoundPage;
use super::responses::{JsonBodyErrors, StoreErrors};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use axum::Extension;
use axum::extract::ConnectInfo;
use axum::http::HeaderMap;

use crate::callers::unseen_in;
use crate::compare::{
    Allowance, ComparisonId, ComparisonReport, ComparisonRequest, MakeLab, Refusal, SCENARIOS, presets,
};

/// Starts a comparison: one lab per policy, the same scenario and seed, all at once.
#[utoipa::path(
    post,
    path = "/api/comparisons",
    tag = "comparisons",
    request_body = ComparisonRequest,
    responses(
        (status = 201, body = ComparisonReport),
        (status = 400, description = "A body that cannot be read", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "max_labs reached, this address has created its labs for now (lab_creates_per_hour: a comparison's labs count as POST /api/labs' do, all at once), or too many control requests", body = Problem, content_type = "application/problem+json"),
        JsonBodyErrors,
        StoreErrors,
    )
)]
pub async fn create(
    State(app): State<AppState>,
    headers: HeaderMap,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    payload: Result<Json<ComparisonRequest>, JsonRejection>,
) -> Result<Response, AppError> {
    let Json(request) = payload.map_err(defence_named)?;
    shown_names(&request)?;
    let parts = (&app.labs, &app.producer, &app.store);
    // Its labs are the asking address's as much as those of `POST /api/labs`: they draw on the
    // same allowance, all at once, and so does a late run's re-run, one lab at a time.
    let client = app.create_limiter.client_address(&headers, peer.map(|p| p.0.0));
    let take = {
        let app = app.clone();
        move |labs: u32| match client {
            Some(client) => app.create_limiter.take_n(client, labs, Instant::now()).map_err(|wait| {
                Refusal::Allowance { retry_after_s: wait.as_secs_f64().ceil().max(1.0) as u64 }
            }),
            None => Ok(()),
        }
    };
    let allowance: Allowance = Box::new(take.clone());
    let maker = app.clone();
    let make_lab: MakeLab = Arc::new(move || take(1).ok().and_then(|()| maker.labs.create().ok()));
    let setup = (allowance, make_lab);
    let comparison =
        app.comparisons.start(request, parts, &app.limits, setup).await.map_err(|r| match r {
            Refusal::Invalid(detail) => AppError::Unprocessable(detail),
            Refusal::Field(invalid) => invalid.into(),
            Refusal::Storage => AppError::Unavailable {
                status: StatusCode::SERVICE_UNAVAILABLE,
                retry_after_s: Some(1),
                detail:
                    "the store could not keep the comparison's labs: nothing was started; try again shortly"
                        .into(),
            },
            Refusal::Allowance { retry_after_s } => {
                AppError::RateLimited { limit: "lab_creates_per_hour", retry_after_s }
            }
            Refusal::Limit { limit: "max_labs", detail } => {
                AppError::Limit { status: StatusCode::TOO_MANY_REQUESTS, limit: "max_labs", detail }
            }
            Refusal::Limit { limit, detail } => match limit_field(limit) {
                Some(field) => {
                    AppError::FieldLimit { status: StatusCode::UNPROCESSABLE_ENTITY, limit, field, detail }
                }
                None => AppError::Limit { status: StatusCode::UNPROCESSABLE_ENTITY, limit, detail },
            },
        })?;
    let report = app.comparisons.report(&comparison, &app.labs);
    let url = report.url.clone();
    Ok((StatusCode::CREATED, [(header::LOCATION, url)], Json(report)).into_response())
}

/// The request field that reaches each limit a comparison's request may reach: the runs ask
/// for the labs, the burst for the messages.
fn limit_field(limit: &str) -> Option<&'static str> {
    match limit {
        "max_compare_runs" | "lab_create_burst" => Some("runs"),
        "max_burst" | "max_active_messages" => Some("burst"),
        _ => None,
    }
}

/// The names a comparison shows (a custom policy's, a column; a grid row's) are plain text: not
/// blank, and with no character that shows as nothing, as a gap or reorders the text, by the
/// Unicode properties `callers::name::unseen` reads (a plain space is fine).
fn shown_names(request: &ComparisonRequest) -> Result<(), AppError> {
    let custom = request.policies.iter().enumerate().filter_map(|(i, choice)| match choice {
        crate::compare::PolicyChoice::Custom { name, .. } => Some((format!("policies[{i}].name"), name)),
        crate::compare::PolicyChoice::Preset(_) => None,
    });
    let rows = request.defences.iter().flatten().enumerate();
    let rows = rows.map(|(i, row)| (format!("defences[{i}].name"), &row.name));
    for (field, name) in custom.chain(rows) {
        let detail = match unseen_in(name) {
            Some(c) => format!(
                "{field} must be plain text: it holds U+{:04X}, a control, invisible, blank, separator or \
                 text-direction character, which would make the name show as another; use plain spaces",
                u32::from(c)
            ),
            None if name.trim().is_empty() => format!("{field} must not be blank: it names a column or row"),
            None => continue,
        };
        return Err(AppError::Field { status: StatusCode::UNPROCESSABLE_ENTITY, field, detail });
    }
    Ok(())
}

/// A request field that does not parse is answered 422 naming it as the request has it: a
/// grid's defence (`defences[1].defences.queue`, said first in the detail), a policy
/// (`policies[1]`), or an unknown field at the top (`defense`).
fn defence_named(rejection: JsonRejection) -> AppError {
    let detail = rejection.body_text();
    let Some((_, rest)) = detail.split_once("target type: ") else { return rejection.into() };
    if rejection.status() != StatusCode::UNPROCESSABLE_ENTITY {
        return rejection.into();
    }
    let field = |field: String, detail: String| AppError::Field {
        status: StatusCode::UNPROCESSABLE_ENTITY,
        field,
        detail,
    };
    match rest.split_once(": ") {
        Some((path, why)) if path.starts_with("defences") => field(path.to_owned(), format!("{path}: {why}")),
        Some((path, _)) if !path.contains(' ') => field(path.to_owned(), detail.clone()),
        _ => match rest.strip_prefix("unknown field `").and_then(|r| r.split_once('`')) {
            Some((name, _)) => field(name.to_owned(), detail.clone()),
            None => rejection.into(),
        },
    }
}

/// A comparison's table, measured now: every policy's figures and which did best on each row.
#[utoipa::path(
    get,
    path = "/api/comparisons/{id}",
    tag = "comparisons",
    params(("id" = String, Path, description = "The comparison id (a UUID, then `-<instance>` past one machine)")),
    responses(
        (status = 200, body = ComparisonReport),
        (status = 400, description = "Not a comparison id", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such comparison", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The comparison lives on another instance (fly-replay)", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "Too many control requests from this client", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn report(
    State(app): State<AppState>,
    Path(raw): Path<String>,
) -> Result<Json<ComparisonReport>, AppError> {
    let id = parse_id(&app, &raw)?;
    let comparison = app
        .comparisons
        .get(&id)
        .ok_or_else(|| AppError::NotFound(format!("there is no comparison {id}; start one at /compare")))?;
    Ok(Json(app.comparisons.report(&comparison, &app.labs)))
}

/// Which of a comparison's policies to open in a lab of its own.
#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OpenInLab {
    /// The policy's name, as the comparison gives it.
    pub policy: String,
    /// In a grid, the defence's name (the cell's row): the lab's endpoint gets its defences.
    /// Required in a grid, refused elsewhere.
    #[serde(default)]
    pub defence: Option<String>,
}

/// Opens one of a comparison's policies in a new lab, ready to run: the policy as its first
/// run's lab held it (its seed included) and the endpoint as the scenario starts it. The
/// scenario's script (its bursts, traffic and outages) is not started: the lab waits for its
/// person.
#[utoipa::path(
    post,
    path = "/api/comparisons/{id}/labs",
    tag = "comparisons",
    params(("id" = String, Path, description = "The comparison id (a UUID, then `-<instance>` past one machine)")),
    request_body = OpenInLab,
    responses(
        (status = 201, body = super::api::Created),
        (status = 400, description = "Not a comparison id, or a body that cannot be read", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such comparison", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The comparison lives on another instance (fly-replay)", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "This server's limits (restarted with tighter ones) no longer take the policy's settings", body = Problem, content_type = "application/problem+json"),
        (status = 410, description = "The policy's lab is gone (idle too long, or evicted): its settings went with it", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "max_labs reached, this address has created its labs for now (lab_creates_per_hour: opening a policy in a lab counts as POST /api/labs does), or too many control requests", body = Problem, content_type = "application/problem+json"),
        JsonBodyErrors,
        StoreErrors,
    )
)]
pub async fn open_in_lab(
    State(app): State<AppState>,
    Path(raw): Path<String>,
    payload: Result<Json<OpenInLab>, JsonRejection>,
) -> Result<Response, AppError> {
    let id = parse_id(&app, &raw)?;
    let Json(OpenInLab { policy, defence }) = payload?;
    let comparison = app
        .comparisons
        .get(&id)
        .ok_or_else(|| AppError::NotFound(format!("there is no comparison {id}; start one at /compare")))?;
    let row = cell_row(&comparison, defence.as_deref())?;
    let first = comparison
        .columns
        .iter()
        .filter(|c| c.policy == policy && c.defence == defence)
        .min_by_key(|c| (c.run, c.attempt));
    let Some(column) = first else {
        let names: Vec<&str> = comparison
            .columns
            .iter()
            .filter(|c| c.run == 0 && c.attempt == 0 && c.defence == defence)
            .map(|c| c.policy.as_str())
            .collect();
        return Err(AppError::Field {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            field: "policy".into(),
            detail: format!("this comparison has no policy '{policy}'; it has {}", names.join(", ")),
        });
    };
    let source = app.labs.get(&column.lab).ok_or_else(|| AppError::Rejected {
        status: StatusCode::GONE,
        detail: format!(
            "the lab of '{policy}' is gone (idle too long, or evicted), and its settings with it"
        ),
    })?;
    // A policy's settings read back as an update of them (tests in `retry::policy`, with every
    // field set, and `compare::presets` hold it); should a new field ever break that, say so
    // with a 500, do not panic.
    let settings = serde_json::to_value(source.policy()).and_then(serde_json::from_value);
    let settings: crate::retry::PolicyUpdate = settings.map_err(|e| AppError::Rejected {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        detail: format!("the policy of '{policy}' does not read back as settings ({e}); please report it"),
    })?;
    let lab = app.labs.create().map_err(super::api::lab_limit)?;
    // Valid when the comparison ran; a server restarted with tighter limits may refuse them now.
    let mut downstream = comparison.scenario.downstream(comparison.burst);
    if let Some(row) = row {
        downstream.defences = Some(row.defences);
    }
    let ready = lab.set_policy(&settings).and_then(|_| lab.set_downstream(&downstream));
    if let Err(refused) = ready {
        app.labs.remove(&lab.id); // a refused lab leaves nothing behind
        return Err(AppError::Rejected {
            status: StatusCode::CONFLICT,
            detail: format!("this server's limits no longer take the settings of '{policy}': {refused}"),
        });
    }
    if let Err(refused) = lab.persisted().await {
        app.labs.remove(&lab.id); // a refused lab leaves nothing behind
        return Err(refused.into());
    }
    let url = format!("/labs/{}", lab.id);
    let created = super::api::Created { id: lab.id.to_string(), url: url.clone() };
    Ok((StatusCode::CREATED, [(header::LOCATION, url)], Json(created)).into_response())
}

/// The grid row a cell to open names: one of the grid's in a grid (required there), none
/// elsewhere.
fn cell_row<'a>(
    comparison: &'a crate::compare::Comparison,
    defence: Option<&str>,
) -> Result<Option<&'a crate::compare::NamedDefences>, AppError> {
    let rows = &comparison.defences;
    let names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
    let refuse = |detail: String| AppError::Field {
        status: StatusCode::UNPROCESSABLE_ENTITY,
        field: "defence".into(),
        detail,
    };
    match defence {
        None if rows.is_empty() => Ok(None),
        None => Err(refuse(format!(
            "this comparison is a grid: name the cell's defence too, one of {}",
            names.join(", ")
        ))),
        Some(name) if rows.is_empty() => {
            Err(refuse(format!("this comparison has no defences; leave out 'defence' (it was '{name}')")))
        }
        Some(name) => {
            rows.iter().find(|r| r.name == name).map(Some).ok_or_else(|| {
                refuse(format!("this grid has no defence '{name}'; it has {}", names.join(", ")))
            })
        }
    }
}

/// A comparison id, owned by this instance: another instance's is sent on there (fly-replay).
fn parse_id(app: &super::App, raw: &str) -> Result<ComparisonId, AppError> {
    let id = ComparisonId::parse(raw).map_err(|_| {
        AppError::BadRequest(format!(
            "'{}' is not a comparison id (a lowercase UUID, then the instance that owns it after a \
             hyphen when there are several)",
            raw.chars().take(64).collect::<String>()
        ))
    })?;
    super::owned_here(app, &id)?;
    Ok(id)
}

#[derive(Template, WebTemplate)]
#[template(path = "compare.html")]
struct ComparePage {
    /// Empty on the form; the comparison's id on its own page.
    comparison_id: String,
    scenarios: Vec<&'static str>,
    presets: &'static [presets::Preset],
    defences: Vec<DefenceChoice>,
}

/// A named defence as the form offers it: its name, its settings as the request's JSON, and
/// what it does.
struct DefenceChoice {
    name: String,
    json: String,
    what: &'static str,
}

fn defence_choices() -> Vec<DefenceChoice> {
    crate::compare::defences::named()
        .into_iter()
        .map(|(named, what)| DefenceChoice {
            json: serde_json::to_string(&named.defences).expect("defences serialize"),
            name: named.name,
            what,
        })
        .collect()
}

/// Each preset's name and what it is, for the form's choices.
fn preset_choices() -> &'static [presets::Preset] {
    presets::all()
}

/// `GET /compare`: choose a scenario and policies, and start.
pub async fn form() -> Response {
    ComparePage {
        comparison_id: String::new(),
        scenarios: SCENARIOS.to_vec(),
        presets: preset_choices(),
        defences: defence_choices(),
    }
    .into_response()
}

/// `GET /compare/{id}`: a comparison's page, shareable.
/// A browser asking for an id that is no comparison's gets the friendly not-found page, as it
/// does for a lab; one another instance owns is still sent there.
pub async fn page(State(app): State<AppState>, Path(raw): Path<String>) -> Result<Response, AppError> {
    let Ok(id) = ComparisonId::parse(&raw) else { return Ok(NotFoundPage::comparison().response()) };
    super::owned_here(&app, &id)?;
    if app.comparisons.get(&id).is_none() {
        return Ok(NotFoundPage::comparison().response());
    }
    Ok(ComparePage {
        comparison_id: id.to_string(),
        scenarios: SCENARIOS.to_vec(),
        presets: preset_choices(),
        defences: Vec::new(),
    }
    .into_response())
}
