//! Errors as HTTP answers. Every error a route returns is an `AppError`, sent as
//! `application/problem+json` (RFC 9457) with `type`, `title`, `status` and `detail`.
//!
//! When to use which: `BadRequest` for input that cannot be read (syntax, a missing header),
//! `Unprocessable` for well-formed input with unusable values, `NotFound` for an unknown lab or
//! id, `Conflict` when the lab's current state refuses the request, `Limit` when a named limit
//! is reached (the answer names it and says what to do), `Unavailable` for the downstream's own
//! injected failures. `Internal` is logged and never shows its cause to the client.

use axum::Json;
use axum::extract::rejection::{BytesRejection, JsonRejection};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

#[derive(Debug)]
pub enum AppError {
    BadRequest(String),
    NotFound(String),
    Conflict(String),
    Unprocessable(String),
    /// A request field with an unusable value (or an id this lab does not hold): the answer
    /// names the field.
    Field {
        status: StatusCode,
        field: String,
        detail: String,
    },
    Limit {
        status: StatusCode,
        limit: &'static str,
        detail: String,
    },
    /// A named limit that a request field reached (a comparison's `runs` past
    /// `max_compare_runs`): the answer names both.
    FieldLimit {
        status: StatusCode,
        limit: &'static str,
        field: &'static str,
        detail: String,
    },
    /// Keeps the status a framework rejection chose (413, 415, ...).
    Rejected {
        status: StatusCode,
        detail: String,
    },
    /// 503 or 429 with `Retry-After`: the downstream's injected failures, a store that did
    /// not confirm in time.
    Unavailable {
        status: StatusCode,
        /// None when the downstream is set to send no `Retry-After`.
        retry_after_s: Option<u64>,
        detail: String,
    },
    /// The client made requests faster than the named per-client rate allows
    /// (`control_rate_per_s` on the control API, `endpoint_rate_per_s` on a lab's endpoint).
    RateLimited {
        limit: &'static str,
        retry_after_s: u64,
    },
    /// 507: the store is out of room (the disk, or `max_db_bytes`), with `Retry-After`.
    StoreFull,
    /// The lab belongs to another instance: Fly's proxy replays the request there.
    ElsewhereInstance {
        owner: String,
    },
    Internal(String),
}

/// An error, as RFC 9457 describes it.
#[derive(Serialize, utoipa::ToSchema)]
pub struct Problem<'a> {
    #[serde(rename = "type")]
    kind: String,
    title: &'a str,
    status: u16,
    /// What went wrong and, where it helps, what to do.
    detail: &'a str,
    /// The name of the setting whose limit was hit.
    #[serde(skip_serializing_if = "Option::is_none")]
    limit: Option<&'static str>,
    /// The request field at fault (`cause`, `filter.status`, `ids`, `rate_per_s`, ...; a
    /// setting's, dotted from its settings: `policy.timeout_ms`, `downstream.capacity`).
    #[serde(skip_serializing_if = "Option::is_none")]
    field: Option<&'a str>,
}

impl AppError {
    fn parts(&self) -> (StatusCode, &str, Option<&'static str>) {
        match self {
            AppError::BadRequest(d) => (StatusCode::BAD_REQUEST, d, None),
            AppError::NotFound(d) => (StatusCode::NOT_FOUND, d, None),
            AppError::Conflict(d) => (StatusCode::CONFLICT, d, None),
            AppError::Unprocessable(d) => (StatusCode::UNPROCESSABLE_ENTITY, d, None),
            AppError::Field { status, detail, .. } => (*status, detail, None),
            AppError::Limit { status, limit, detail }
            | AppError::FieldLimit { status, limit, detail, .. } => (*status, detail, Some(*limit)),
            AppError::Rejected { status, detail } => (*status, detail, None),
            AppError::Unavailable { status, detail, .. } => (*status, detail, None),
            AppError::RateLimited { limit: "endpoint_rate_per_s", .. } => (
                StatusCode::TOO_MANY_REQUESTS,
                "too many requests to this lab's endpoint from this client (endpoint_rate_per_s, \
                 endpoint_burst); wait for the Retry-After",
                Some("endpoint_rate_per_s"),
            ),
            AppError::RateLimited { limit: "lab_creates_per_hour", .. } => (
                StatusCode::TOO_MANY_REQUESTS,
                "this client has created too many labs lately (lab_creates_per_hour, lab_create_burst); \
                 use the labs it has, or wait for the Retry-After",
                Some("lab_creates_per_hour"),
            ),
            AppError::RateLimited { limit: "snapshot_bytes_per_s", .. } => (
                StatusCode::TOO_MANY_REQUESTS,
                "this client has read too many bytes of snapshots and exports lately \
                 (snapshot_bytes_per_s, snapshot_burst_bytes); wait for the Retry-After, or follow \
                 the event stream instead",
                Some("snapshot_bytes_per_s"),
            ),
            AppError::RateLimited { limit: "max_snapshot_bytes_building", .. } => (
                StatusCode::TOO_MANY_REQUESTS,
                "the server is building as many bytes of snapshots as it allows at once \
                 (max_snapshot_bytes_building); try again after the Retry-After",
                Some("max_snapshot_bytes_building"),
            ),
            AppError::RateLimited { limit, .. } => (
                StatusCode::TOO_MANY_REQUESTS,
                "too many control requests from this client (control_rate_per_s, control_burst); \
                 wait for the Retry-After, as the lab teaches",
                Some(limit),
            ),
            AppError::StoreFull => (
                StatusCode::INSUFFICIENT_STORAGE,
                "the store is full (the disk, or max_db_bytes, which covers the database and its \
                 write-ahead log): nothing was changed; try again once there is room",
                Some("max_db_bytes"),
            ),
            AppError::ElsewhereInstance { .. } => (
                StatusCode::CONFLICT,
                "this lab (or comparison) lives on another instance; the proxy replays the request there (fly-replay)",
                None,
            ),
            AppError::Internal(_) => {
                (StatusCode::INTERNAL_SERVER_ERROR, "something went wrong on our side", None)
            }
        }
    }
}

impl AppError {
    pub fn status(&self) -> StatusCode {
        self.parts().0
    }
}

/// A wait in words: "45 s", "6 min 37 s", "1 h 5 min".
pub fn in_words(seconds: u64) -> String {
    match seconds {
        0..60 => format!("{seconds} s"),
        60..3600 if seconds.is_multiple_of(60) => format!("{} min", seconds / 60),
        60..3600 => format!("{} min {} s", seconds / 60, seconds % 60),
        _ if seconds % 3600 < 60 => format!("{} h", seconds / 3600),
        _ => format!("{} h {} min", seconds / 3600, seconds % 3600 / 60),
    }
}

/// A setting's unusable value: 422, naming its field.
impl From<crate::invalid::Invalid> for AppError {
    fn from(crate::invalid::Invalid { field, detail }: crate::invalid::Invalid) -> Self {
        AppError::Field { status: StatusCode::UNPROCESSABLE_ENTITY, field, detail }
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        if let AppError::Internal(cause) = &self {
            tracing::error!(%cause, "internal error");
        }
        let (status, detail, limit) = self.parts();
        let title = status.canonical_reason().unwrap_or("Error");
        let kind = match limit {
            Some(limit) => format!("/problems/limit/{limit}"),
            None => format!("/problems/{}", title.to_lowercase().replace(' ', "-")),
        };
        let field = match &self {
            AppError::Field { field, .. } => Some(field.as_str()),
            AppError::FieldLimit { field, .. } => Some(*field),
            _ => None,
        };
        // A refusal that asks the client to wait says for how long in words too, not only in
        // the Retry-After header a person never sees.
        let waited;
        let detail = match &self {
            AppError::RateLimited { retry_after_s, .. } => {
                waited = format!("{detail} (try again in {})", in_words(*retry_after_s));
                waited.as_str()
            }
            _ => detail,
        };
        let problem = Problem { kind, title, status: status.as_u16(), detail, limit, field };
        let mut response = (status, Json(problem)).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
        if let AppError::ElsewhereInstance { owner } = &self
            && let Ok(value) = HeaderValue::from_str(&format!("instance={owner}"))
        {
            headers.insert("fly-replay", value);
        }
        if let AppError::Unavailable { retry_after_s: Some(retry_after_s), .. }
        | AppError::RateLimited { retry_after_s, .. } = self
        {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(retry_after_s));
        }
        if let AppError::StoreFull = self {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(1));
        }
        response
    }
}

/// A body that reads as JSON but not as the route's type names the field at fault (its path
/// in the body: `count`, `policies[1]`) when serde says which.
impl From<JsonRejection> for AppError {
    fn from(rejection: JsonRejection) -> Self {
        let status = rejection.status();
        let detail = rejection.body_text();
        let said = detail.split_once("target type: ").map(|(_, said)| json_field(said));
        match status {
            StatusCode::PAYLOAD_TOO_LARGE => too_large(),
            StatusCode::UNPROCESSABLE_ENTITY => match said {
                Some((field, why)) if !field.is_empty() => {
                    let detail = format!("{field}: {why}");
                    AppError::Field { status, field, detail }
                }
                _ => AppError::Unprocessable(detail),
            },
            StatusCode::BAD_REQUEST => AppError::BadRequest(detail),
            status if status.is_client_error() => AppError::Rejected { status, detail },
            _ => AppError::Internal(detail),
        }
    }
}

/// The field a serde error names, and what it says: the path it was read at (`defences.queue`,
/// `protections[0]`), then the key it names between backticks when that key is not a field
/// or is given twice.
pub fn json_field(said: &str) -> (String, &str) {
    let (path, why) = match said.split_once(": ") {
        Some((path, why)) if !path.contains(' ') && path != "." => (path, why),
        _ => ("", said),
    };
    let key = ["unknown field `", "duplicate field `"].iter().find_map(|start| why.strip_prefix(start));
    let key = key.and_then(|rest| rest.split_once('`')).map(|(key, _)| key);
    let path = match (path, key) {
        (path, Some(key)) if path == key || path.ends_with(&format!(".{key}")) => path.to_owned(),
        ("", Some(key)) => key.to_owned(),
        (path, Some(key)) => format!("{path}.{key}"),
        (path, None) => path.to_owned(),
    };
    (path, why)
}

impl From<BytesRejection> for AppError {
    fn from(rejection: BytesRejection) -> Self {
        match rejection.status() {
            StatusCode::PAYLOAD_TOO_LARGE => too_large(),
            status => AppError::Rejected { status, detail: rejection.body_text() },
        }
    }
}

fn too_large() -> AppError {
    AppError::Limit {
        status: StatusCode::PAYLOAD_TOO_LARGE,
        limit: "max_body_bytes",
        detail: "the request body is larger than this server accepts (max_body_bytes); send a smaller body"
            .into(),
    }
}

impl From<crate::lab::NotDurable> for AppError {
    fn from(refused: crate::lab::NotDurable) -> Self {
        let (status, detail) = match refused {
            crate::lab::NotDurable { full: true, .. } => return AppError::StoreFull,
            crate::lab::NotDurable { error: Some(error), .. } => (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("the store cannot write ({error}): nothing was changed; try again shortly"),
            ),
            crate::lab::NotDurable { error: None, .. } => (
                StatusCode::SERVICE_UNAVAILABLE,
                "the store did not confirm the write in time: nothing was changed; try again shortly"
                    .to_owned(),
            ),
        };
        AppError::Unavailable { status, retry_after_s: Some(1), detail }
    }
}

#[cfg(test)]
mod tests {
    use super::in_words;

    #[test]
    fn a_wait_reads_in_words() {
        assert_eq!(in_words(1), "1 s");
        assert_eq!(in_words(397), "6 min 37 s");
        assert_eq!(in_words(120), "2 min");
        assert_eq!(in_words(3600), "1 h");
        assert_eq!(in_words(3900), "1 h 5 min");
    }
}
