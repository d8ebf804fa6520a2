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
    // Every preset reads as an update (tested); should a change to `PolicyUpdate` ever break
    // one, the request that names it is refused, not the server.
    serde_json::from_value(preset.policy.clone())
        .map_err(|e| format!("the preset '{name}' does not read as a policy ({e}); please report it"))
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

    /// The waits a library preset plans after attempts 1, 2, ... with no `Retry-After`: their
    /// lowest and highest over many draws.
    fn waits(name: &str, retry_after_s: Option<u64>) -> Vec<(u64, u64)> {
        use rand::SeedableRng;
        let policy = Policy::default().updated(&changes(name).unwrap()).unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        (1..policy.max_attempts)
            .map(|n| {
                let planned: Vec<u64> = (0..3_000)
                    .map(|_| {
                        crate::retry::plan_wait(
                            &policy.backoff(),
                            policy.retry_after_rule(),
                            n,
                            None,
                            retry_after_s,
                            &mut rng,
                        )
                        .planned_ms
                    })
                    .collect();
                (*planned.iter().min().unwrap(), *planned.iter().max().unwrap())
            })
            .collect()
    }

    /// Holds `observed` ranges to `expected` ones: inside them, and reaching within `slack` of
    /// each end.
    fn spans(name: &str, observed: &[(u64, u64)], expected: &[(u64, u64)], slack: u64) {
        assert_eq!(observed.len(), expected.len(), "{name}: one wait per retry");
        for (n, (&(low, high), &(want_low, want_high))) in observed.iter().zip(expected).enumerate() {
            assert!(low >= want_low && high <= want_high, "{name} wait {}: {low}..{high}", n + 1);
            assert!(
                low <= want_low + slack && high + slack >= want_high,
                "{name} wait {}: {low}..{high}",
                n + 1
            );
        }
    }

    #[test]
    fn library_presets_wait_as_their_library_s_formula() {
        // urllib3 2.5.0 `Retry.get_backoff_time`: 0, then backoff_factor * 2 ** (n - 1).
        let urllib3: Vec<(u64, u64)> =
            (1..6u32).map(|n| if n == 1 { 0 } else { 500 << (n - 1) }).map(|w| (w, w)).collect();
        spans("urllib3", &waits("urllib3", None), &urllib3, 0);
        // tenacity 9.1.2 `wait_random_exponential(multiplier=1, max=60)`: uniform(0, min(60, 2 ** (n - 1))).
        let tenacity: Vec<(u64, u64)> = (1..6u32).map(|n| (0, (1000u64 << (n - 1)).min(60_000))).collect();
        spans("tenacity", &waits("tenacity", None), &tenacity, 60);
        // stamina 26.1.0 `_compute_backoff`: min(5, 0.1 * 2 ** (n - 1) + uniform(0, 1)).
        let stamina: Vec<(u64, u64)> = (1..10u32)
            .map(|n| ((100u64 << (n - 1)).min(5_000), ((100u64 << (n - 1)) + 1_000).min(5_000)))
            .collect();
        spans("stamina", &waits("stamina", None), &stamina, 30);
        // httpx-retries 0.6.0 `backoff_strategy` after `increment`: 0.5 * 2 ** n * uniform(0, 1), at most 120 s.
        let httpx: Vec<(u64, u64)> = (1..11u32).map(|n| (0, (1000u64 << (n - 1)).min(120_000))).collect();
        spans("httpx-retries", &waits("httpx-retries", None), &httpx, 300);
        // got 14.6.6 `calculateRetryDelay`: 1000 * 2 ** (n - 1) + random * 100.
        spans("got", &waits("got", None), &[(1_000, 1_100), (2_000, 2_100)], 10);
        // axios-retry 4.5.0 `exponentialDelay`: 100 * 2 ** n, plus 0 to 20 %.
        spans("axios-retry", &waits("axios-retry", None), &[(200, 240), (400, 480), (800, 960)], 10);
        // go-retryablehttp 0.7.1 `DefaultBackoff`: 1 s * 2 ** (n - 1), at most 30 s; 4 retries.
        spans(
            "go-retryablehttp",
            &waits("go-retryablehttp", None),
            &[(1_000, 1_000), (2_000, 2_000), (4_000, 4_000), (8_000, 8_000)],
            0,
        );
        // gRFC A6's example: uniform(0, min(1 s, 100 ms * 2 ** (n - 1))).
        spans("grpc-retry-policy", &waits("grpc-retry-policy", None), &[(0, 100), (0, 200), (0, 400)], 10);
        // Polly v8: a constant 2 s, 3 retries.
        spans("polly-v8", &waits("polly-v8", None), &[(2_000, 2_000); 3], 0);
    }

    #[test]
    fn library_presets_retry_their_library_s_statuses() {
        let statuses = |name: &str| changes(name).unwrap().retry_statuses.flatten().unwrap();
        assert_eq!(statuses("got"), [408, 413, 429, 500, 502, 503, 504, 521, 522, 524], "got's options.js");
        assert_eq!(statuses("httpx-retries"), [429, 502, 503, 504], "RETRYABLE_STATUS_CODES");
        for name in ["urllib3", "tenacity", "stamina"] {
            assert_eq!(statuses(name), [429, 500, 502, 503, 504], "{name}'s documented set-up");
        }
        let go = statuses("go-retryablehttp");
        assert!(
            go.contains(&429) && !go.contains(&501) && (502..600).all(|s| go.contains(&s)) && go.len() == 100
        );
        let axios = statuses("axios-retry");
        assert!(axios.contains(&429) && (500..600).all(|s| axios.contains(&s)) && axios.len() == 101);
        assert!(!statuses("grpc-retry-policy").contains(&409));
        assert_eq!(
            changes("polly-v8").unwrap().retry_statuses,
            None,
            "the lab's own, as a ShouldHandle for them"
        );
    }

    #[test]
    fn library_presets_treat_retry_after_as_their_library_does() {
        // Waited exactly, whatever the backoff: urllib3, httpx-retries, got, go-retryablehttp.
        for name in ["urllib3", "httpx-retries", "got", "go-retryablehttp"] {
            assert!(waits(name, Some(3)).iter().all(|&w| w == (3_000, 3_000)), "{name}");
        }
        // A header of 0: go-retryablehttp retries at once; the others fall back to their backoff.
        assert!(waits("go-retryablehttp", Some(0)).iter().all(|&w| w == (0, 0)));
        assert_eq!(waits("urllib3", Some(0))[1], (1_000, 1_000));
        assert_eq!(waits("got", Some(0))[0].0, 1_000);
        // axios-retry: the header raises the delay, and 0 to 20 % goes on top.
        spans(
            "axios-retry",
            &waits("axios-retry", Some(1)),
            &[(1_000, 1_200), (1_000, 1_200), (1_000, 1_200)],
            10,
        );
        // Not read at all: tenacity, stamina, gRPC (it has pushback instead), Polly's defaults.
        for name in ["tenacity", "stamina", "grpc-retry-policy", "polly-v8"] {
            assert_eq!(waits(name, Some(30)), waits(name, None), "{name}");
        }
    }

    /// A policy's settings read back as an update of them, whatever the preset set (the lab's
    /// "open in a lab" copies a comparison's column this way): a field added to `Policy` and not
    /// to `PolicyUpdate` fails here, not in a request.
    #[test]
    fn every_presets_policy_reads_back_as_its_own_settings() {
        for preset in all() {
            let policy = Policy::default().updated(&changes(&preset.name).unwrap()).unwrap();
            let json = serde_json::to_value(&policy).unwrap();
            let update: PolicyUpdate = serde_json::from_value(json.clone())
                .unwrap_or_else(|e| panic!("{}: {e}: {json}", preset.name));
            let again = Policy::default().updated(&update).unwrap();
            assert_eq!(serde_json::to_value(&again).unwrap(), json, "{}", preset.name);
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
