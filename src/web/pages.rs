//! HTML pages and the static assets they load. Assets are compiled into the binary, so the
//! server runs from any directory with nothing beside it.

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};

use super::AppState;
use super::api::lab_limit;
use super::error::AppError;
use crate::domain::Counters;
use crate::domain::LabId;

#[derive(Template, WebTemplate)]
#[template(path = "lab.html")]
struct LabPage {
    lab_id: String,
    mode: String,
    modes: &'static [(&'static str, &'static str)],
    counters: Counters,
    retention: RetentionText,
    /// Every cause a dead letter can have, with its words, for the filter.
    dlq_causes: Vec<(&'static str, &'static str)>,
}

/// The downstream's modes, one button each, with what each does at the default settings (the
/// page rewrites the words from the lab's own settings once it has them).
const MODES: &[(&str, &str)] = &[
    ("healthy", "answers 200 after 60–240 ms"),
    ("flaky", "half get 503 with Retry-After 1 s, the rest answer like healthy"),
    ("slow", "applies the write, answers after 2.6–3.5 s, past the 2 s timeout"),
    ("down", "503 with Retry-After 1 s every time, applies nothing"),
    ("throttled", "a rate limit shared by every caller; over it, 429 with Retry-After"),
    ("overloaded", "works on a few at once, queues a few more, turns the rest away with 503"),
];

/// The retention windows in words, for the page.
struct RetentionText {
    keys: String,
    dead_letters: String,
    idle_labs: String,
}

/// "24 hours", "14 days", "90 seconds": the largest unit that divides the span evenly.
fn span(seconds: u64) -> String {
    let (count, unit) = match seconds {
        s if s >= 86_400 && s % 86_400 == 0 => (s / 86_400, "day"),
        s if s >= 3_600 && s % 3_600 == 0 => (s / 3_600, "hour"),
        s if s >= 60 && s % 60 == 0 => (s / 60, "minute"),
        s => (s, "second"),
    };
    format!("{count} {unit}{}", if count == 1 { "" } else { "s" })
}

/// The friendly 404 a browser gets for a lab or a comparison that is not there, in place of
/// the problem+json the API gives.
#[derive(Template, WebTemplate)]
#[template(path = "not_found.html")]
pub struct NotFoundPage {
    what: &'static str,
    detail: &'static str,
    offer: &'static str,
    start_href: &'static str,
    start_text: &'static str,
}

impl NotFoundPage {
    pub fn lab() -> Self {
        NotFoundPage {
            what: "lab",
            detail: "There is no lab at this address: the link may be mistyped, or the lab was \
                     deleted after a week without use.",
            offer: "A new lab takes one click and starts from the default settings.",
            start_href: "/",
            start_text: "Start a new lab",
        }
    }

    pub fn comparison() -> Self {
        NotFoundPage {
            what: "comparison",
            detail: "There is no comparison at this address: the link may be mistyped. (A \
                     comparison whose labs have expired keeps its page, marked so.)",
            offer: "A new comparison takes a scenario and two or more policies.",
            start_href: "/compare",
            start_text: "Start a comparison",
        }
    }

    pub fn response(self) -> Response {
        (StatusCode::NOT_FOUND, self).into_response()
    }
}

/// `GET /`: every visit starts a fresh lab.
pub async fn new_lab(State(app): State<AppState>) -> Result<Redirect, AppError> {
    let lab = app.labs.create().map_err(lab_limit)?;
    if let Err(refused) = lab.persisted().await {
        app.labs.remove(&lab.id);
        return Err(refused.into());
    }
    Ok(Redirect::to(&format!("/labs/{}", lab.id)))
}

pub async fn lab(State(app): State<AppState>, Path(raw): Path<String>) -> Response {
    if let Ok(id) = LabId::parse(&raw)
        && let Err(elsewhere) = super::owned_here(&app, &id)
    {
        return elsewhere.into_response();
    }
    let lab = LabId::parse(&raw).ok().and_then(|id| app.labs.get(&id));
    let Some(lab) = lab else { return NotFoundPage::lab().response() };
    let mode = lab.downstream_settings().mode.as_str().to_owned();
    let retention = RetentionText {
        keys: span(app.retention.key_ttl_s),
        dead_letters: span(app.retention.dead_letter_ttl_s),
        idle_labs: span(app.retention.idle_lab_ttl_s),
    };
    let dlq_causes = crate::dlq::Cause::all().map(|c| (c.as_str(), c.words())).collect();
    LabPage {
        lab_id: lab.id.to_string(),
        mode,
        modes: MODES,
        counters: lab.counters(),
        retention,
        dlq_causes,
    }
    .into_response()
}

/// Every file under `static/`, with its content type.
pub const ASSETS: &[(&str, &str, &str)] = &[
    ("app.js", JS, include_str!("../../static/app.js")),
    ("stream.js", JS, include_str!("../../static/stream.js")),
    ("model.js", JS, include_str!("../../static/model.js")),
    ("controls.js", JS, include_str!("../../static/controls.js")),
    ("timeline.js", JS, include_str!("../../static/timeline.js")),
    ("timeline-scale.js", JS, include_str!("../../static/timeline-scale.js")),
    ("timeline-rows.js", JS, include_str!("../../static/timeline-rows.js")),
    ("timeline-find.js", JS, include_str!("../../static/timeline-find.js")),
    ("timeline-tooltip.js", JS, include_str!("../../static/timeline-tooltip.js")),
    ("timeline-input.js", JS, include_str!("../../static/timeline-input.js")),
    ("timeline-marks.js", JS, include_str!("../../static/timeline-marks.js")),
    ("load-chart.js", JS, include_str!("../../static/load-chart.js")),
    ("outside.js", JS, include_str!("../../static/outside.js")),
    ("callers.js", JS, include_str!("../../static/callers.js")),
    ("snippets.js", JS, include_str!("../../static/snippets.js")),
    ("presets.js", JS, include_str!("../../static/presets.js")),
    ("traffic.js", JS, include_str!("../../static/traffic.js")),
    ("presets.json", "application/json", include_str!("../../static/presets.json")),
    ("policy-presets.json", "application/json", include_str!("../../static/policy-presets.json")),
    ("story.js", JS, include_str!("../../static/story.js")),
    ("claims.js", JS, include_str!("../../static/claims.js")),
    ("legend.js", JS, include_str!("../../static/legend.js")),
    ("goodput-chart.js", JS, include_str!("../../static/goodput-chart.js")),
    ("protection-lane.js", JS, include_str!("../../static/protection-lane.js")),
    ("defence-lane.js", JS, include_str!("../../static/defence-lane.js")),
    ("story.json", "application/json", include_str!("../../static/story.json")),
    ("snippets.json", "application/json", include_str!("../../static/snippets.json")),
    ("backoff-chart.js", JS, include_str!("../../static/backoff-chart.js")),
    ("dead-letters.js", JS, include_str!("../../static/dead-letters.js")),
    ("dlq-filter.js", JS, include_str!("../../static/dlq-filter.js")),
    ("kinds.js", JS, include_str!("../../static/kinds.js")),
    ("dlq-actions.js", JS, include_str!("../../static/dlq-actions.js")),
    ("dlq-detail.js", JS, include_str!("../../static/dlq-detail.js")),
    ("trace.js", JS, include_str!("../../static/trace.js")),
    ("compare.js", JS, include_str!("../../static/compare.js")),
    ("compare-form.js", JS, include_str!("../../static/compare-form.js")),
    ("compare-charts.js", JS, include_str!("../../static/compare-charts.js")),
    ("compare-table.js", JS, include_str!("../../static/compare-table.js")),
    ("take-home.js", JS, include_str!("../../static/take-home.js")),
    ("compare-grid.js", JS, include_str!("../../static/compare-grid.js")),
    ("style.css", "text/css; charset=utf-8", include_str!("../../static/style.css")),
];

const JS: &str = "text/javascript; charset=utf-8";

pub async fn asset(Path(file): Path<String>) -> Result<Response, AppError> {
    let (_, content_type, body) = ASSETS
        .iter()
        .find(|(name, _, _)| *name == file)
        .ok_or_else(|| AppError::NotFound(format!("no static file named {file}")))?;
    Ok(([(header::CONTENT_TYPE, *content_type), (header::CACHE_CONTROL, "no-cache")], *body).into_response())
}

/// `GET /metrics`: Prometheus / OpenMetrics text.
#[utoipa::path(get, path = "/metrics", tag = "operations",
    responses(
        (status = 200, description = "OpenMetrics text", content_type = "application/openmetrics-text"),
        (status = 404, description = "Served on --metrics-addr instead, or not at all on a public address without it", body = super::error::Problem, content_type = "application/problem+json"),
    ))]
pub async fn metrics(State(app): State<AppState>) -> Response {
    let text = app.metrics.render(&app.labs, &app.store.stats);
    let kind = "application/openmetrics-text; version=1.0.0; charset=utf-8";
    ([(header::CONTENT_TYPE, kind)], text).into_response()
}
