//! `GET /api/openapi.json`: the JSON API described from the handlers' own annotations and the
//! request and response types themselves, so the description changes with the code.

use std::sync::OnceLock;

use axum::Json;
use serde_json::{Value, json};
use utoipa::OpenApi;

use super::{api, callers, claims, compare, dead_letters, endpoint, events, pages};

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
    description
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
}
