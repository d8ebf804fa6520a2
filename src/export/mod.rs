//! A lab policy carried home: the same waits, attempts, timeout and `Retry-After` rule as a
//! complete client program for a real retry library (`retrylab export`,
//! `GET /api/policies/export`).
//!
//! Each program hooks the lab's wait formula (`retry::plan_wait`, written out in the program's
//! language) into the library's own extension point for waits, sets the library's own knobs for
//! the attempt limit, the statuses and the methods, and reads its endpoint from `RETRYLAB_URL`
//! or its first argument, so it runs under `retrylab grade` as printed. What the library cannot
//! express is said in `unsupported`, a sentence each, with what the program does instead.
//!
//! The libraries and versions are the ones the conformance matrix installs (`.ci/run`); the
//! hooks each program uses are cited beside the code that writes them (`python`, `node`, `go`).

mod go;
mod node;
mod python;

use serde::Serialize;
use serde_json::Value;

use crate::compare::presets;
use crate::invalid::Invalid;
use crate::retry::{Jitter, Policy, PolicyUpdate, RetryAfterMode};

/// A library a policy can be exported to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Library {
    Urllib3,
    Tenacity,
    Stamina,
    HttpxRetries,
    Got,
    AxiosRetry,
    GoRetryablehttp,
}

impl Library {
    pub const ALL: [Library; 7] = [
        Library::Urllib3,
        Library::Tenacity,
        Library::Stamina,
        Library::HttpxRetries,
        Library::Got,
        Library::AxiosRetry,
        Library::GoRetryablehttp,
    ];

    pub fn id(self) -> &'static str {
        match self {
            Library::Urllib3 => "urllib3",
            Library::Tenacity => "tenacity",
            Library::Stamina => "stamina",
            Library::HttpxRetries => "httpx-retries",
            Library::Got => "got",
            Library::AxiosRetry => "axios-retry",
            Library::GoRetryablehttp => "go-retryablehttp",
        }
    }

    /// The version the program is written for: the conformance matrix's pin.
    pub fn version(self) -> &'static str {
        match self {
            Library::Urllib3 => "2.5.0",
            Library::Tenacity => "9.1.2",
            Library::Stamina => "26.1.0",
            Library::HttpxRetries => "0.6.0",
            Library::Got => "14.6.6",
            Library::AxiosRetry => "4.5.0",
            Library::GoRetryablehttp => "0.7.1",
        }
    }

    /// The program's language: `python`, `javascript` (Node, ES modules) or `go`.
    pub fn language(self) -> &'static str {
        match self {
            Library::Urllib3 | Library::Tenacity | Library::Stamina | Library::HttpxRetries => "python",
            Library::Got | Library::AxiosRetry => "javascript",
            Library::GoRetryablehttp => "go",
        }
    }

    pub fn parse(raw: &str) -> Result<Library, Invalid> {
        Library::ALL.into_iter().find(|l| l.id() == raw.trim()).ok_or_else(|| {
            let ids: Vec<&str> = Library::ALL.iter().map(|l| l.id()).collect();
            Invalid::new("library", format!("unknown library '{raw}'; choose one of: {}", ids.join(", ")))
        })
    }
}

/// A policy as a library's program.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Export {
    pub library: &'static str,
    /// The library's version the program is written for.
    pub version: &'static str,
    /// `python`, `javascript` or `go`.
    pub language: &'static str,
    /// The whole program.
    pub code: String,
    /// The policy exported, every setting.
    #[schema(value_type = Object)]
    pub settings: Value,
    /// Each part of the policy the library cannot express, with what the program does instead.
    pub unsupported: Vec<String>,
    /// For a library's own preset exported to it (a round trip): the program is the library's
    /// defaults, and these are the settings it had to write out; empty otherwise.
    pub spelled_out: Vec<String>,
}

/// A policy given by a preset's name, or as JSON: the settings `PUT /policy` takes (or a
/// comparison's `{"name", "policy"}`), over a new lab's policy.
pub fn read_policy(raw: &str) -> Result<Policy, Invalid> {
    let trimmed = raw.trim();
    let update: PolicyUpdate = if trimmed.starts_with('{') {
        let value: Value = serde_json::from_str(trimmed)
            .map_err(|e| Invalid::new("policy", format!("the policy is not JSON: {e}")))?;
        let settings = match (&value["name"], &value["policy"]) {
            (Value::String(_), Value::Object(_)) => value["policy"].clone(),
            _ => value,
        };
        serde_json::from_value(settings).map_err(|e| Invalid::new("policy", format!("not a policy: {e}")))?
    } else {
        presets::changes(trimmed).map_err(|e| Invalid::new("policy", e))?
    };
    Policy::default().updated(&update)
}

/// `policy` as `library`'s program.
pub fn export(policy: &Policy, library: Library) -> Export {
    let settings = serde_json::to_value(policy).expect("a policy serializes");
    let comment = serde_json::to_string_pretty(&settings).expect("JSON prints");
    let mut unsupported = common_unsupported(policy, library);
    let mut spelled_out = Vec::new();
    let code = match library.language() {
        "python" => {
            let native = is_own_preset(policy, library).then_some(&mut spelled_out);
            python::program(policy, library, &comment, &mut unsupported, native)
        }
        "javascript" if is_own_preset(policy, library) => {
            node::native(policy, library, &comment, &mut spelled_out)
        }
        "javascript" => node::program(policy, library, &comment, &mut unsupported),
        _ => {
            let native = is_own_preset(policy, library).then_some(&mut spelled_out);
            go::program(policy, &comment, &mut unsupported, native)
        }
    };
    Export {
        library: library.id(),
        version: library.version(),
        language: library.language(),
        code,
        settings,
        unsupported,
        spelled_out,
    }
}

/// Whether `policy` is `library`'s own preset as it stands: then the program is the library's
/// own settings rather than the lab's formula hooked in (the round trip).
fn is_own_preset(policy: &Policy, library: Library) -> bool {
    read_policy(library.id()).is_ok_and(|preset| preset == *policy)
}

/// What no library here has: the lab's breaker, budget and protections, many clients, a
/// seeded draw.
fn common_unsupported(policy: &Policy, library: Library) -> Vec<String> {
    let lib = library.id();
    let mut said = Vec::new();
    if let Some(breaker) = policy.breaker {
        said.push(format!(
            "circuit breaker ({} failures, open {} ms): {lib} has none; the program retries without one",
            breaker.failure_threshold, breaker.open_ms
        ));
    }
    if let Some(budget) = policy.retry_budget {
        said.push(format!(
            "retry_budget (ratio {}, {} a second): {lib} keeps no budget; the program retries up to its attempt limit",
            budget.ratio, budget.min_per_s
        ));
    }
    for spec in &policy.protections {
        let kind = spec.settings.kind();
        said.push(format!("protection {kind}: {lib} has no such rule; the program leaves it out"));
    }
    if policy.clients > 1 {
        said.push(format!(
            "clients {}: the program is one client; run {} copies of it for as many",
            policy.clients, policy.clients
        ));
    }
    if policy.seed.is_some() {
        said.push("seed: the program draws fresh randomness each run".to_owned());
    }
    said
}

/// The name a jitter kind goes by in the programs.
pub(crate) fn jitter_name(jitter: Jitter) -> &'static str {
    match jitter {
        Jitter::None => "none",
        Jitter::Full => "full",
        Jitter::Equal => "equal",
        Jitter::Decorrelated => "decorrelated",
        Jitter::Additive => "additive",
        Jitter::Proportional => "proportional",
    }
}

/// The name a program's constant gives the policy's way with `Retry-After`.
pub(crate) fn retry_after_mode_name(mode: RetryAfterMode) -> &'static str {
    match mode {
        RetryAfterMode::Floor => "floor",
        RetryAfterMode::JitterAbove => "jitter_above",
        RetryAfterMode::Exact => "exact",
        RetryAfterMode::ExactIncludingZero => "exact_including_zero",
        RetryAfterMode::NominalFloor => "nominal_floor",
    }
}

/// What an export says of a time budget (`max_total_ms`) its library cannot keep, and what the
/// program does instead; nothing when the policy has none.
pub(crate) fn no_time_budget(policy: &Policy, library: &str, instead: &str, unsupported: &mut Vec<String>) {
    if policy.max_total_ms > 0 {
        unsupported.push(format!(
            "max_total_ms {}: {library} has no time budget of this kind; {instead}",
            policy.max_total_ms
        ));
    }
}

/// What most programs do without a time budget.
pub(crate) const ATTEMPT_LIMIT_ONLY: &str = "the program stops on its attempt limit only";

/// Seconds, as a program's literal: `0.8`, `30.0`.
pub(crate) fn seconds(ms: u64) -> String {
    let s = ms as f64 / 1000.0;
    if s.fract() == 0.0 { format!("{s:.1}") } else { format!("{s}") }
}

/// Whether a planned wait of 0 is possible under `policy` (some libraries read 0 as "stop").
pub(crate) fn may_wait_zero(policy: &Policy) -> bool {
    policy.first_retry_at_once
        || matches!(policy.jitter, Jitter::Full)
        || policy.base_ms == 0
        || (policy.honor_retry_after && policy.retry_after_mode == RetryAfterMode::ExactIncludingZero)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_library_or_policy_names_its_field() {
        assert_eq!(Library::parse("requests").unwrap_err().field, "library");
        assert!(Library::parse("requests").unwrap_err().detail.contains("urllib3, tenacity"));
        assert_eq!(Library::parse("got").unwrap(), Library::Got);
        assert_eq!(read_policy("yolo").unwrap_err().field, "policy");
        assert_eq!(read_policy("{not json").unwrap_err().field, "policy");
        assert_eq!(read_policy(r#"{"base_ms": 5000, "cap_ms": 10}"#).unwrap_err().field, "policy.base_ms");
        let custom =
            read_policy(r#"{"name": "mine", "policy": {"jitter": "none", "max_attempts": 3}}"#).unwrap();
        assert_eq!((custom.jitter, custom.max_attempts), (Jitter::None, 3));
        assert_eq!(read_policy("full-jitter").unwrap().jitter, Jitter::Full);
    }

    #[test]
    fn every_library_gets_a_program_with_its_settings_and_the_endpoint_from_the_environment() {
        let policy = read_policy("full-jitter").unwrap();
        for library in Library::ALL {
            let export = export(&policy, library);
            assert!(export.code.contains("RETRYLAB_URL"), "{}", library.id());
            assert!(export.code.contains("Idempotency-Key"), "{}", library.id());
            assert!(export.code.contains("\"base_ms\": 800"), "{}: the settings in a comment", library.id());
            // Full jitter may draw 0, which got reads as "do not retry": said, and nothing else.
            let said = if library == Library::Got { 1 } else { 0 };
            assert_eq!(export.unsupported.len(), said, "{}: {:?}", library.id(), export.unsupported);
        }
        // A library's own preset to its own library: its defaults, and what had to be written out.
        for library in Library::ALL {
            let round_trip = export(&read_policy(library.id()).unwrap(), library);
            let hooked = ["plannedWait", "planned_wait"].iter().any(|hook| round_trip.code.contains(hook));
            assert!(!hooked, "{}: the library's own settings, no hook", library.id());
            assert!(
                round_trip.spelled_out.iter().any(|s| s.contains("timeout")),
                "{:?}",
                round_trip.spelled_out
            );
        }
        let guarded = read_policy("breaker-retry").unwrap();
        let export = export(&guarded, Library::Tenacity);
        assert!(
            export.unsupported.iter().any(|s| s.starts_with("circuit breaker")),
            "{:?}",
            export.unsupported
        );
    }
}
