//! The error answers many routes share, as reusable OpenAPI response sets, so each route's
//! description lists only what is its own and the shared ones stay written once.

use std::collections::BTreeMap;

use utoipa::IntoResponses;
use utoipa::openapi::response::{Response, ResponseBuilder};
use utoipa::openapi::{Content, Ref, RefOr};

/// A problem+json answer with this description.
fn problem(description: &str) -> RefOr<Response> {
    let content = Content::new(Some(Ref::from_schema_name("Problem")));
    ResponseBuilder::new()
        .description(description)
        .content("application/problem+json", content)
        .build()
        .into()
}

fn set(answers: &[(u16, &str)]) -> BTreeMap<String, RefOr<Response>> {
    answers.iter().map(|(status, description)| (status.to_string(), problem(description))).collect()
}

/// Every route under `/api/labs/{lab}`: a bad or unknown lab id, a lab another instance owns,
/// and the control rate limit.
pub struct LabErrors;

impl IntoResponses for LabErrors {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        set(&[
            (400, "Not a lab id, or a body that cannot be read"),
            (404, "No such lab"),
            (409, "The lab lives on another instance: answered with fly-replay, nothing done here"),
            (429, "Too many control requests from this client (control_rate_per_s); see Retry-After"),
        ])
    }
}

/// Routes that take a JSON body.
pub struct JsonBodyErrors;

impl IntoResponses for JsonBodyErrors {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        set(&[
            (
                413,
                "The body is larger than max_body_bytes; sent with Connection: close, and the connection closes after it",
            ),
            (415, "The body is not sent as application/json"),
            (422, "Well-formed JSON with unusable values; the detail names the field"),
        ])
    }
}

/// Routes that act on a selection of dead letters, by `ids` or by `filter`.
pub struct SelectionErrors;

impl IntoResponses for SelectionErrors {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        set(&[
            (404, "An id not in this lab's dead-letter queue (`field`: ids)"),
            (
                413,
                "The body is larger than max_body_bytes; sent with Connection: close, and the connection closes after it",
            ),
            (
                422,
                "Neither ids nor filter, a field with an unusable value, or a filter that matches nothing; \
                 `field` names it",
            ),
        ])
    }
}

/// Routes that answer only once their change is committed; a refused change is taken back.
pub struct StoreErrors;

impl IntoResponses for StoreErrors {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        set(&[
            (
                503,
                "The store cannot write, or did not confirm in time (bursts, replays and comparisons: \
                 or the server owes too many messages, max_active_messages); see Retry-After",
            ),
            (507, "The store is full (the disk, or max_db_bytes); nothing was changed"),
        ])
    }
}
