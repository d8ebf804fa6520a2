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
    /// What the program does, as the policy says, that `retrylab grade` marks down, each with the
    /// check it meets and the setting that changes it; empty when the policy gives the card
    /// nothing to mark down.
    pub cautions: Vec<String>,
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

/// `policy`, with its way with `Retry-After` set to `mode` when one is given: a mode's name as
/// the policy writes it (`--retry-after-mode`, `retry_after_mode=`), the one setting an export's
/// caution most often names, given beside a preset's name.
pub fn with_retry_after_mode(policy: Policy, mode: Option<&str>) -> Result<Policy, Invalid> {
    let Some(raw) = mode else { return Ok(policy) };
    let mode: RetryAfterMode =
        serde_json::from_value(Value::String(raw.trim().to_owned())).map_err(|_| {
            let names: Vec<&str> = RetryAfterMode::ALL.iter().map(|&m| retry_after_mode_name(m)).collect();
            Invalid::new(
                "retry_after_mode",
                format!("unknown mode '{raw}'; choose one of: {}", names.join(", ")),
            )
        })?;
    policy.updated(&PolicyUpdate { retry_after_mode: Some(mode), ..PolicyUpdate::default() })
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
        cautions: cautions(policy),
    }
}

/// What `retrylab grade` will mark down in a program that follows `policy` faithfully: a claim
/// about the card, held by `tests/api/export.rs`, which grades such programs on their real
/// libraries. Each names the check, and the setting that would change it.
fn cautions(policy: &Policy) -> Vec<String> {
    let mut said = Vec::new();
    if policy.jitter == Jitter::None {
        said.push(
            "jitter none: keys that fail together wait alike and come back at one instant, so the card's \
             `jitter` fails; any other jitter kind spreads them"
                .to_owned(),
        );
    }
    if !policy.honor_retry_after {
        said.push(
            "honor_retry_after false: the program does not wait for a Retry-After, so a retry can come back \
             before the header asks and the card's `retry_after` fails; honor_retry_after true waits it out"
                .to_owned(),
        );
    } else if policy.jitter != Jitter::None {
        let how = match policy.retry_after_mode {
            RetryAfterMode::Floor => {
                Some("when a Retry-After is longer than the most its band would wait, a wait is")
            }
            RetryAfterMode::Exact | RetryAfterMode::ExactIncludingZero => {
                Some("after a Retry-After every wait is")
            }
            RetryAfterMode::JitterAbove | RetryAfterMode::NominalFloor => None,
        };
        if let Some(how) = how {
            said.push(format!(
                "retry_after_mode {}: {how} exactly the header, so the keys told the same header come back \
                 together at it and the card's `jitter` warns (\"waits exactly the Retry-After\"); retry_after_mode \
                 jitter_above draws the jitter past the header (`--retry-after-mode jitter_above`)",
                retry_after_mode_name(policy.retry_after_mode)
            ));
        }
    }
    said
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

    /// Each caution names the check the card will mark down and the setting that changes it;
    /// the setting named takes it away. (`tests/api/export.rs` grades the programs themselves.)
    #[test]
    fn a_herd_at_the_header_is_a_caution_and_jitter_above_takes_it_away() {
        let cautions = |policy: &Policy| export(policy, Library::Tenacity).cautions;
        let floor = read_policy("full-jitter").unwrap();
        let said = cautions(&floor);
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(said[0].starts_with("retry_after_mode floor: when a Retry-After is longer"), "{said:?}");
        assert!(said[0].contains("`jitter` warns") && said[0].contains("--retry-after-mode jitter_above"));
        let above = with_retry_after_mode(floor.clone(), Some("jitter_above")).unwrap();
        assert_eq!(above.retry_after_mode, RetryAfterMode::JitterAbove);
        assert_eq!(cautions(&above), Vec::<String>::new());
        // A library that never jitters fails the check outright; one that ignores the header
        // fails `retry_after`.
        let urllib3 = cautions(&read_policy("urllib3").unwrap());
        assert!(urllib3.len() == 1 && urllib3[0].starts_with("jitter none"), "{urllib3:?}");
        let tenacity = cautions(&read_policy("tenacity").unwrap());
        assert!(tenacity.len() == 1 && tenacity[0].starts_with("honor_retry_after false"), "{tenacity:?}");
        let got = cautions(&read_policy("got").unwrap());
        assert!(
            got.len() == 1 && got[0].starts_with("retry_after_mode exact: after a Retry-After"),
            "{got:?}"
        );
        let wrong = with_retry_after_mode(floor, Some("sometimes")).unwrap_err();
        assert_eq!(wrong.field, "retry_after_mode");
        assert!(wrong.detail.contains("floor, jitter_above, exact, exact_including_zero, nominal_floor"));
    }
}
