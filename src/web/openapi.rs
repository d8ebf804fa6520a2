//! `GET /api/openapi.json`: the JSON API described from the handlers' own annotations and the
//! request and response types themselves, so the description changes with the code.

use std::sync::OnceLock;

use axum::Json;
use serde_json::{Value, json};
use utoipa::OpenApi;

use super::{api, callers, claims, compare, dead_letters, endpoint, events, kinds, pages, policies};
use crate::dlq::Cause;

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
        api::set_traffic,
        dead_letters::list,
        dead_letters::detail,
        dead_letters::replay,
        dead_letters::delete,
        dead_letters::quarantine,
        dead_letters::cancel_redrive,
        api::reset,
        api::crash_client,
        callers::callers,
        claims::claims,
        events::stream,
        endpoint::downstream,
        pages::metrics,
        compare::create,
        compare::report,
        compare::open_in_lab,
        policies::export_policy,
        kinds::protection_kinds,
    )
)]
pub struct ApiDoc;

pub async fn openapi_json() -> Json<Value> {
    static DESCRIPTION: OnceLock<Value> = OnceLock::new();
    Json(DESCRIPTION.get_or_init(description).clone())
}

/// The generated description, with the one thing utoipa cannot say written in: what each event
/// of the stream holds. OpenAPI 3.1 reads a `text/event-stream` schema as one event's fields
/// (`event`, `id`, `data`), and `data` is JSON in a string (`contentSchema`): a Snapshot under
/// `event: snapshot`, an Event in every unnamed event (named `message` by SSE's rules).
pub fn description() -> Value {
    let mut description = serde_json::to_value(ApiDoc::openapi()).expect("the description serializes");
    let data = |schema: &str| {
        json!({
            "type": "string",
            "contentMediaType": "application/json",
            "contentSchema": { "$ref": format!("#/components/schemas/{schema}") },
        })
    };
    let id = json!({ "type": "string", "description": "The event's number; send it back as Last-Event-ID" });
    let event = json!({
        "oneOf": [
            {
                "type": "object",
                "description": "The opening snapshot, and a fresh one for a subscriber that fell behind",
                "required": ["event", "id", "data"],
                "properties": { "event": { "const": "snapshot" }, "id": id, "data": data("Snapshot") },
            },
            {
                "type": "object",
                "description": "One change (an unnamed event, which SSE calls `message`)",
                "required": ["id", "data"],
                "properties": { "event": { "const": "message" }, "id": id, "data": data("Event") },
            },
        ]
    });
    let stream = &mut description["paths"]["/api/labs/{lab}/events"]["get"]["responses"]["200"]["content"]["text/event-stream"]
        ["schema"];
    assert!(stream.is_object(), "the events route describes its stream");
    *stream = event;
    write_in_causes(&mut description);
    description
}

/// The dead-letter filter's `cause`, described with the causes there are, from `Cause::ALL`, so
/// the text cannot leave one out (it once left out `grpc_hedging`).
fn write_in_causes(description: &mut Value) {
    let causes: Vec<&str> = Cause::all().map(Cause::as_str).collect();
    let text = format!(
        "Causes, comma-separated, each one of: {} (a protection's refusal is filed under its kind)",
        causes.join(", ")
    );
    let parameters = &mut description["paths"]["/api/labs/{lab}/dead-letters"]["get"]["parameters"];
    let cause = parameters.as_array_mut().and_then(|all| all.iter_mut().find(|p| p["name"] == "cause"));
    *cause
        .expect("the dead-letter list takes a cause")
        .get_mut("description")
        .expect("the cause parameter has a description") = json!(text);
    let property = &mut description["components"]["schemas"]["Filter"]["properties"]["cause"];
    assert!(property.is_object(), "the filter's cause is described");
    property["description"] = json!(text);
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_stream_is_described_event_by_event_snapshot_included() {
        let description = super::description();
        let stream = &description["paths"]["/api/labs/{lab}/events"]["get"]["responses"]["200"]["content"]["text/event-stream"]
            ["schema"]["oneOf"];
        assert_eq!(stream[0]["properties"]["event"]["const"], "snapshot");
        assert_eq!(stream[0]["properties"]["data"]["contentSchema"]["$ref"], "#/components/schemas/Snapshot");
        assert_eq!(stream[1]["properties"]["data"]["contentSchema"]["$ref"], "#/components/schemas/Event");
        for schema in ["Snapshot", "Event"] {
            assert!(description["components"]["schemas"][schema].is_object(), "{schema} is described");
        }
    }

    #[test]
    fn the_cause_filter_names_every_cause() {
        let description = super::description();
        let parameters =
            description["paths"]["/api/labs/{lab}/dead-letters"]["get"]["parameters"].as_array().unwrap();
        let parameter = parameters.iter().find(|p| p["name"] == "cause").unwrap();
        let property = &description["components"]["schemas"]["Filter"]["properties"]["cause"];
        for cause in crate::dlq::Cause::all() {
            for text in [&parameter["description"], &property["description"]] {
                assert!(text.as_str().unwrap().contains(cause.as_str()), "{cause:?} missing from {text}");
            }
        }
    }
}
