//! The policy presets: one table, `static/policy-presets.json`, read here for the comparison and
//! `retrylab compare`, and by the lab page for its failure modes (each step of `presets.json`
//! names the preset it applies). A preset changes only what makes it that policy; the rest
//! (waits, attempts, timeout) comes from the scenario or the failure mode it is applied to.
//! Older names are kept as aliases (`none`, `full`, `equal`, `breaker`), so requests and
//! scripts written with them keep working.

use std::sync::LazyLock;

use serde::Deserialize;
use serde_json::Value;

use crate::retry::PolicyUpdate;

const TABLE: &str = include_str!("../../static/policy-presets.json");

/// One row of the table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Preset {
    pub name: String,
    /// Names it was known by before, still accepted.
    #[serde(default)]
    pub aliases: Vec<String>,
    /// What it is, in a few words.
    pub what: String,
    /// What it changes, as the JSON of `PUT /policy`.
    pub policy: Value,
    /// Where its rule and defaults come from, for a preset that follows a library or a paper.
    #[serde(default)]
    pub source: Option<Source>,
}

/// A preset's source, linked where the preset is chosen.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Source {
    pub title: String,
    pub url: String,
}

static PRESETS: LazyLock<Vec<Preset>> =
    LazyLock::new(|| serde_json::from_str(TABLE).expect("static/policy-presets.json is a table of presets"));

/// Every preset, in the table's order.
pub fn all() -> &'static [Preset] {
    &PRESETS
}

/// The preset called `name` (or by one of its aliases).
pub fn find(name: &str) -> Option<&'static Preset> {
    all().iter().find(|p| p.name == name || p.aliases.iter().any(|a| a == name))
}

/// What a preset changes over the base policy; an unknown name is an error listing them all.
pub fn changes(name: &str) -> Result<PolicyUpdate, String> {
    let Some(preset) = find(name) else {
        let names: Vec<&str> = all().iter().map(|p| p.name.as_str()).collect();
        return Err(format!(
            "unknown policy preset '{name}'; choose one of: {}, or a custom policy as JSON",
            names.join(", ")
        ));
    };
    Ok(serde_json::from_value(preset.policy.clone()).expect("every preset is a policy update (tested)"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retry::{Jitter, Policy, Refused};

    #[test]
    fn every_preset_is_a_policy_the_lab_takes_and_no_name_is_taken_twice() {
        let mut names: Vec<&str> = Vec::new();
        for preset in all() {
            let update: PolicyUpdate = serde_json::from_value(preset.policy.clone())
                .unwrap_or_else(|e| panic!("{}: {e}", preset.name));
            Policy::default().updated(&update).unwrap_or_else(|e| panic!("{}: {e:?}", preset.name));
            names.push(&preset.name);
            names.extend(preset.aliases.iter().map(String::as_str));
        }
        let count = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), count, "a name or alias used twice: {names:?}");
    }

    #[test]
    fn presets_named_for_a_source_link_it_and_list_its_protection() {
        for (name, kind) in [
            ("token-bucket", "token_bucket"),
            ("finagle", "retry_budget"),
            ("grpc", "grpc"),
            ("sre", "sre"),
            ("aws-standard", "aws_standard"),
            ("aws-2026", "aws_standard_2026"),
            ("aws-adaptive", "aws_adaptive"),
            ("ratio-breaker", "ratio_breaker"),
            ("envoy", "envoy"),
            ("grpc-hedging", "grpc_hedging"),
        ] {
            let preset = find(name).unwrap_or_else(|| panic!("no preset {name}"));
            let source = preset.source.as_ref().unwrap_or_else(|| panic!("{name} names no source"));
            assert!(source.url.starts_with("https://"), "{name}: {}", source.url);
            let policy = Policy::default().updated(&changes(name).unwrap()).unwrap();
            let json = serde_json::to_value(&policy).unwrap();
            let kinds: Vec<&str> =
                json["protections"].as_array().unwrap().iter().map(|p| p["kind"].as_str().unwrap()).collect();
            assert_eq!(kinds, [kind], "{name}");
        }
    }

    #[test]
    fn old_names_are_aliases_of_the_new_ones() {
        for (old, new) in [("none", "no-jitter"), ("full", "full-jitter"), ("equal", "equal-jitter")] {
            assert_eq!(find(old).unwrap().name, new);
        }
        assert_eq!(find("breaker").unwrap().name, "breaker-retry");
        assert_eq!(changes("none").unwrap().jitter, Some(Jitter::None));
        assert_eq!(changes("full-jitter").unwrap().jitter, Some(Jitter::Full));
        let breaker = |name| changes(name).unwrap().breaker.flatten().unwrap().refused;
        assert_eq!(breaker("breaker-retry"), Refused::Retry);
        assert_eq!(breaker("breaker-fail-fast"), Refused::GiveUp);
        assert_eq!(changes("no-retry").unwrap().max_attempts, Some(1));
    }

    #[test]
    fn an_unknown_name_lists_the_presets() {
        let error = changes("yolo").unwrap_err();
        assert!(
            error.contains("no-retry, fixed, no-jitter, full-jitter, equal-jitter, decorrelated"),
            "{error}"
        );
        assert!(error.contains("breaker-retry, breaker-fail-fast, budget, ignore-retry-after"), "{error}");
    }
}
