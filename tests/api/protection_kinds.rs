//! The protections a policy lists (issue 29), on real requests: steady traffic against an
//! endpoint that fails half its requests, as in Brooker's retry simulation. Without a
//! protection, 3 retries send 1 + 1/2 + 1/4 + 1/8 = 1.875 requests per message; a protection
//! brings that down, and every retry it stopped is counted in the load bins as its own.
//! Bounds have wide margins: the endpoint's failures are random, and the machine is loaded.

use std::time::Duration;

use serde_json::Value;

use crate::helpers::{TestApp, counter, messages};

const PATIENCE: Duration = Duration::from_secs(90);
/// 3 s of traffic at 100 a second: about 300 messages.
const TRAFFIC: &str = r#"{"rate_per_s": 100, "arrivals": "even", "for_ms": 3000}"#;

fn load_sum(snapshot: &Value, field: &str) -> u64 {
    snapshot["load"]["bins"].as_array().unwrap().iter().map(|b| b[field].as_u64().unwrap()).sum()
}

/// The retries `kind` stopped, summed over the load bins.
fn suppressed(snapshot: &Value, kind: &str) -> u64 {
    let bins = snapshot["load"]["bins"].as_array().unwrap();
    bins.iter().map(|b| b["suppressed"][kind].as_u64().unwrap_or(0)).sum()
}

/// Runs the traffic against a half-failing endpoint under `policy` until every message
/// settled; the snapshot then, and the requests per new message.
async fn run(app: &TestApp, policy: &str) -> (Value, f64) {
    let lab = app.fast_lab().await;
    app.put(&lab, "downstream", r#"{"mode": "flaky", "failure_rate": 0.5}"#).await;
    app.put(&lab, "policy", policy).await;
    app.put(&lab, "traffic", TRAFFIC).await;
    let done = app
        .wait_for(&lab, PATIENCE, |s| {
            let sent = s["traffic"]["sent"].as_u64().unwrap();
            s["traffic"]["rate_per_s"] == 0.0
                && sent > 0
                && counter(s, "delivered") + counter(s, "dead_letter") == sent
        })
        .await;
    let amplification = load_sum(&done, "requests") as f64 / load_sum(&done, "offered") as f64;
    eprintln!("{policy}: {amplification:.3} requests per message");
    (done, amplification)
}

/// Unprotected, half the attempts failing and 4 attempts at most: 1 + 0.5 + 0.25 + 0.125 = 1.875
/// requests per message expected. Over about 300 messages the mean's standard deviation is
/// about 0.06 (a message's attempts vary by about 1.05), so this is about four of them either
/// way; a run's own spread reached 1.700 in CI, which a bound at 1.7 failed.
const AS_UNPROTECTED: std::ops::Range<f64> = 1.625..2.125;

fn dead_lettered_as(snapshot: &Value, cause: &str, naming: &str) -> usize {
    let letters = snapshot["dead_letters"].as_array().unwrap();
    letters.iter().filter(|d| d["cause"] == cause && d["reason"].as_str().unwrap().contains(naming)).count()
}

#[tokio::test]
async fn a_token_bucket_brings_half_failing_traffic_near_one_request_per_message_and_counts_what_it_stopped()
{
    let app = TestApp::spawn().await;
    let (unprotected, (bucketed, bucket_amplification)) = tokio::join!(
        run(&app, r#"{"max_attempts": 4, "seed": 1}"#),
        run(&app, r#"{"max_attempts": 4, "seed": 1, "protections": [{"kind": "token_bucket"}]}"#),
    );
    let (unprotected, amplification) = unprotected;
    assert!(AS_UNPROTECTED.contains(&amplification), "3 retries: {amplification:.3}");
    assert_eq!(suppressed(&unprotected, "token_bucket"), 0);
    assert!(unprotected["load"]["bins"].as_array().unwrap().iter().all(|b| b.get("suppressed").is_none()));

    // Brooker's simulation: 1.14. The full bucket's first 4 retries come on top.
    assert!((1.03..1.3).contains(&bucket_amplification), "token bucket: {bucket_amplification:.3}");
    let stopped = suppressed(&bucketed, "token_bucket");
    let refused =
        dead_lettered_as(&bucketed, "token_bucket", "retry not sent (token_bucket): the token bucket has");
    assert!(stopped > 50, "about 0.4 of 300 messages fail once the bucket is dry: {stopped}");
    assert_eq!(stopped as usize, refused, "each retry stopped is a dead letter that says so");
    assert_eq!(bucketed["policy"]["protections"][0]["kind"], "token_bucket");
    assert_eq!(bucketed["policy"]["protections"][0]["size"], 5.0);
    // Its state now, and once a bin: the bucket ran dry, and new calls fill it a tenth at a time.
    let now = &bucketed["protections"][0];
    assert_eq!(
        (&now["kind"], &now["scope"], &now["held"], &now["ceiling"]),
        (&"token_bucket".into(), &"per_client".into(), &1.into(), &5.0.into())
    );
    assert!((0.0..=5.0).contains(&now["level"].as_f64().unwrap()), "{now}");
    let levels: Vec<f64> = bucketed["load"]["bins"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|b| b["levels"]["token_bucket"].as_f64())
        .collect();
    assert!(levels.len() > 10, "{levels:?}");
    assert!(levels.iter().all(|l| (0.0..=5.0).contains(l)), "{levels:?}");
    assert!(levels.iter().any(|&l| l < 1.5), "it ran dry: {levels:?}");
    assert!(unprotected["protections"].as_array().unwrap().is_empty());
}

#[tokio::test]
async fn with_many_clients_each_ones_token_bucket_amplifies_more_than_one_shared_by_all() {
    let app = TestApp::spawn().await;
    // 1,000 clients, about 300 messages: a client's own bucket never runs dry.
    let per_client =
        r#"{"max_attempts": 4, "seed": 2, "clients": 1000, "protections": [{"kind": "token_bucket"}]}"#;
    let shared = r#"{"max_attempts": 4, "seed": 2, "clients": 1000,
        "protections": [{"kind": "token_bucket", "scope": "shared"}]}"#;
    let ((each, each_amplification), (one, shared_amplification)) =
        tokio::join!(run(&app, per_client), run(&app, shared));
    assert!(
        AS_UNPROTECTED.contains(&each_amplification),
        "per client, as if unprotected: {each_amplification:.3}"
    );
    assert!(shared_amplification < 1.3, "shared: {shared_amplification:.3}");
    assert_eq!(suppressed(&each, "token_bucket"), 0);
    assert!(suppressed(&one, "token_bucket") > 50);
    assert_eq!(one["policy"]["protections"][0]["scope"], "shared");
}

#[tokio::test]
async fn a_listed_retry_budget_takes_towers_defaults_and_stops_retries_past_them() {
    let app = TestApp::spawn().await;
    // 20 % of requests and no floor: about 0.2 retries per message.
    let policy =
        r#"{"max_attempts": 4, "seed": 3, "protections": [{"kind": "retry_budget", "min_per_s": 0}]}"#;
    let (done, amplification) = run(&app, policy).await;
    assert_eq!(done["policy"]["protections"][0]["ratio"], 0.2, "tower's TpsBudget::default()");
    assert!((1.05..1.35).contains(&amplification), "{amplification:.3}");
    let stopped = suppressed(&done, "retry_budget");
    assert!(stopped > 50, "{stopped}");
    assert_eq!(stopped as usize, dead_lettered_as(&done, "retry_budget", "retry budget spent"));
}

#[tokio::test]
async fn an_unusable_protection_is_a_422_naming_its_field() {
    let app = TestApp::spawn().await;
    let lab = app.new_lab().await;
    let five = r#"{"protections": [{"kind": "token_bucket"}, {"kind": "token_bucket"}, {"kind": "token_bucket"},
        {"kind": "token_bucket"}, {"kind": "token_bucket"}]}"#;
    for (body, field, words) in [
        (
            r#"{"protections": [{"kind": "aws"}]}"#,
            "policy.protections[0].kind",
            "retry_budget, token_bucket, grpc",
        ),
        (
            r#"{"protections": [{"kind": "token_bucket", "size": 0}]}"#,
            "policy.protections[0].size",
            "1 to 10000",
        ),
        (
            r#"{"protections": [{"kind": "token_bucket"}, {"kind": "retry_budget", "scope": "all"}]}"#,
            "policy.protections[1].scope",
            "per_client or shared",
        ),
        (five, "policy.protections", "at most 4"),
        (
            r#"{"retry_budget": {"ratio": 0.1, "min_per_s": 1}, "protections": [{"kind": "retry_budget"}]}"#,
            "policy.protections[0].kind",
            "listed already",
        ),
    ] {
        let (status, problem) =
            app.call(reqwest::Method::PUT, &format!("/api/labs/{lab}/policy"), Some(body)).await;
        assert_eq!(status, 422, "{body}: {problem}");
        assert_eq!(problem["field"], field, "{body}");
        assert!(problem["detail"].as_str().unwrap().contains(words), "{problem}");
    }
    let snapshot = app.snapshot(&lab).await;
    assert!(snapshot["policy"].get("protections").is_none(), "nothing was changed");
}

/// The AWS SDKs' 2026 mode: a retry takes 14, and it sets its own waits, 50 ms × 2^(n−1) at
/// most after a 5xx, whatever the policy's backoff says.
#[tokio::test]
async fn the_aws_2026_mode_prices_a_retry_at_14_and_waits_from_50_ms() {
    let app = TestApp::spawn().await;
    // 140 tokens: ten retries' worth; the policy's own backoff (1 s) is not the one used.
    let policy = r#"{"max_attempts": 3, "seed": 6, "base_ms": 1000, "cap_ms": 20000,
        "protections": [{"kind": "aws_standard_2026", "initial_retry_tokens": 140}]}"#;
    let (done, amplification) = run(&app, policy).await;
    // A first-try success gives back 1, a retry takes 14: far fewer retries than the
    // standard mode's 5 allow.
    assert!(amplification < 1.3, "aws_standard_2026: {amplification:.3}");
    let stopped = suppressed(&done, "aws_standard_2026");
    assert!(stopped > 50, "{stopped}");
    let reason = "retry not sent (aws_standard_2026): AWS retry quota has ";
    assert_eq!(stopped as usize, dead_lettered_as(&done, "aws_standard_2026", reason));
    let letters = done["dead_letters"].as_array().unwrap();
    assert!(letters.iter().any(|d| d["reason"].as_str().unwrap().contains("a retry takes 14")));
    let waits: Vec<(u64, &Value)> = messages(&done)
        .iter()
        .flat_map(|m| m["attempts"].as_array().unwrap())
        .filter_map(|a| Some((a["n"].as_u64()?, a.get("wait").filter(|w| !w.is_null())?)))
        .collect();
    assert!(waits.len() > 20, "{}", waits.len());
    for (n, wait) in waits {
        let top = 50 << (n - 1);
        assert_eq!(wait["nominal_ms"], top, "{wait}");
        assert!(wait["planned_ms"].as_u64().unwrap() <= top, "{wait}");
    }
}

/// The AWS adaptive mode against an endpoint that throttles: its rate limiter turns on at the
/// first 429 and paces every attempt, first ones too, so it sends fewer requests and meets
/// fewer 429s than the standard mode on the same endpoint and traffic.
#[tokio::test]
async fn the_aws_adaptive_mode_paces_the_client_once_throttled() {
    let app = TestApp::spawn().await;
    let throttled = |policy: &'static str| {
        let app = &app;
        async move {
            let lab = app.fast_lab().await;
            app.put(&lab, "downstream", r#"{"mode": "throttled", "rate_per_s": 20, "burst": 5}"#).await;
            app.put(&lab, "policy", policy).await;
            app.put(&lab, "traffic", r#"{"rate_per_s": 60, "arrivals": "even", "for_ms": 3000}"#).await;
            app.wait_for(&lab, PATIENCE, |s| {
                let sent = s["traffic"]["sent"].as_u64().unwrap();
                s["traffic"]["rate_per_s"] == 0.0
                    && sent > 0
                    && counter(s, "delivered") + counter(s, "dead_letter") == sent
            })
            .await
        }
    };
    let (standard, adaptive) = tokio::join!(
        throttled(r#"{"max_attempts": 3, "seed": 2, "protections": [{"kind": "aws_standard"}]}"#),
        throttled(r#"{"max_attempts": 3, "seed": 2, "protections": [{"kind": "aws_adaptive"}]}"#),
    );
    let limiter = &adaptive["protections"][0];
    assert_eq!(limiter["kind"], "aws_adaptive");
    assert_eq!(limiter["state"], "on", "{limiter}");
    assert!(limiter["level"].as_f64().unwrap() > 0.0, "a send rate: {limiter}");
    assert_eq!(standard["protections"][0].get("state"), None, "the standard mode has no limiter");
    let (sent, paced) = (load_sum(&standard, "requests"), load_sum(&adaptive, "requests"));
    let (met, met_paced) = (load_sum(&standard, "throttled"), load_sum(&adaptive, "throttled"));
    eprintln!("standard {sent} requests, {met} throttled; adaptive {paced} requests, {met_paced} throttled");
    assert!(paced < sent, "adaptive {paced} requests, standard {sent}");
    assert!(met_paced * 3 < met, "adaptive met {met_paced} 429s, standard {met}");
}

/// The SRE book's throttle with a window a lab run fits in.
const SRE: &str = r#"{"max_attempts": 4, "seed": 4, "protections": [{"kind": "sre", "window_ms": 10000}]}"#;

#[tokio::test]
async fn grpc_throttling_and_sre_budgets_bring_half_failing_traffic_down_and_count_what_they_stopped() {
    let app = TestApp::spawn().await;
    // The AWS quota as small as a lab run: 50 tokens, ten retries' worth.
    let aws = r#"{"max_attempts": 4, "seed": 4, "protections": [{"kind": "aws_standard", "initial_retry_tokens": 50}]}"#;
    let ((grpc, grpc_amplification), (sre, sre_amplification), (aws, aws_amplification)) = tokio::join!(
        run(&app, r#"{"max_attempts": 4, "seed": 4, "protections": [{"kind": "grpc"}]}"#),
        run(&app, SRE),
        run(&app, aws),
    );
    // AWS: a retry takes 5, a first-try success gives 1 back: about 0.2 retries a message at
    // best, as each message's first try succeeds half the time.
    assert!(aws_amplification < 1.4, "aws_standard: {aws_amplification:.3}");
    let stopped = suppressed(&aws, "aws_standard");
    assert!(stopped > 50, "{stopped}");
    let refused =
        dead_lettered_as(&aws, "aws_standard", "retry not sent (aws_standard): AWS retry quota has ");
    assert_eq!(stopped as usize, refused);
    assert_eq!(aws["protections"][0]["ceiling"], 50.0);
    // gRPC: half the attempts fail, so the tokens sit at or under half of 10 and retries stop.
    assert!(grpc_amplification < 1.15, "grpc: {grpc_amplification:.3}");
    let stopped = suppressed(&grpc, "grpc");
    assert!(stopped > 100, "{stopped}");
    let refused = dead_lettered_as(&grpc, "grpc", "retry not sent (grpc): gRPC retry throttling has");
    assert_eq!(stopped as usize, refused);
    assert_eq!(grpc["policy"]["protections"][0]["max_tokens"], 10.0);
    assert_eq!(grpc["protections"][0]["ceiling"], 10.0);
    // SRE: retries under a tenth of the requests. Half accepted is K = 2's edge: every attempt
    // it refuses counts as a request that was not accepted, so the refusals feed themselves and
    // can take it under one request a message.
    assert!(sre_amplification < 1.2, "sre: {sre_amplification:.3}");
    let retries_refused = dead_lettered_as(&sre, "sre", "retry not sent (sre): retries are");
    assert!(retries_refused > 50, "{retries_refused}");
    // At that edge requests - 2 x accepts drifts nowhere (the endpoint's failures are random, not
    // seeded), and now and then (a run in fifteen or so) it never rises above 0: nothing is
    // refused locally. What holds whatever it did: each retry refused is a dead letter that says
    // so, each attempt refused locally went nowhere and says who refused it, and each is counted
    // once.
    let refused = refused_locally(&sre);
    assert!(refused.iter().all(|a| a["refused_by"] == "sre" && a["status"].is_null()), "{refused:?}");
    assert_eq!(
        suppressed(&sre, "sre") as usize,
        retries_refused + refused.len(),
        "refused retries, and attempts refused locally"
    );
    // Against an endpoint that accepts nothing it refuses for certain: after the first rejection,
    // each attempt with a chance of 1/2, 2/3, 3/4, ...
    let lab = app.fast_lab().await;
    app.set_mode(&lab, "down").await;
    app.put(&lab, "policy", SRE).await;
    app.burst(&lab, 10).await;
    let down =
        app.wait_for(&lab, PATIENCE, |s| counter(s, "delivered") + counter(s, "dead_letter") == 10).await;
    let refused = refused_locally(&down);
    assert!(!refused.is_empty(), "the throttle refused some attempts before they were sent");
    assert!(refused.iter().all(|a| a["refused_by"] == "sre" && a["status"].is_null()), "{refused:?}");
    let retries_refused = dead_lettered_as(&down, "sre", "retry not sent (sre): retries are");
    assert_eq!(suppressed(&down, "sre") as usize, retries_refused + refused.len());
}

/// The attempts a protection refused before they were sent.
fn refused_locally(snapshot: &Value) -> Vec<&Value> {
    let attempts = messages(snapshot).iter().flat_map(|m| m["attempts"].as_array().unwrap());
    attempts.filter(|a| a["outcome"] == "short_circuited").collect()
}

#[tokio::test]
async fn a_ratio_breaker_stops_retries_or_every_attempt_once_a_tenth_of_its_window_failed() {
    let app = TestApp::spawn().await;
    // Polly's rule with a throughput a lab run reaches in a fifth of a second (20, not 100).
    let retries_only = r#"{"max_attempts": 4, "seed": 5,
        "protections": [{"kind": "ratio_breaker", "minimum_throughput": 20, "retries_only": true}]}"#;
    let polly = r#"{"max_attempts": 4, "seed": 5,
        "protections": [{"kind": "ratio_breaker", "minimum_throughput": 20, "break_duration_ms": 500}]}"#;
    let ((brooker, brooker_amplification), (polly, _)) =
        tokio::join!(run(&app, retries_only), run(&app, polly));
    // Brooker's breaker: half fail, far over a tenth, so after its first 20 attempts no retry
    // goes out (his simulation: 1.00 requests a message and 50 % success).
    assert!(brooker_amplification < 1.15, "retries only: {brooker_amplification:.3}");
    let stopped = suppressed(&brooker, "ratio_breaker");
    assert!(stopped > 100, "{stopped}");
    let refused = dead_lettered_as(
        &brooker,
        "ratio_breaker",
        "retry not sent (ratio_breaker): the ratio breaker is open",
    );
    assert_eq!(stopped as usize, refused);
    let sent = brooker["traffic"]["sent"].as_u64().unwrap();
    let delivered = counter(&brooker, "delivered");
    assert!(delivered * 10 < sent * 7, "about half delivered: {delivered} of {sent}");
    assert_eq!(brooker["policy"]["protections"][0]["sampling_duration_ms"], 30_000, "Polly's 30 s");
    // Polly's breaker refuses first attempts too while open, each named, none sent.
    let short: Vec<&Value> = messages(&polly)
        .iter()
        .flat_map(|m| m["attempts"].as_array().unwrap())
        .filter(|a| a["outcome"] == "short_circuited")
        .collect();
    assert!(short.len() > 50, "{}", short.len());
    assert!(
        short.iter().all(|a| a["refused_by"] == "ratio_breaker" && a["status"].is_null()),
        "{:?}",
        short[0]
    );
    assert!(suppressed(&polly, "ratio_breaker") as usize >= short.len());
    // A round whose last attempt it refused ends on it, filed under its kind.
    let letters = polly["dead_letters"].as_array().unwrap();
    let last_refused = letters.iter().filter(|d| {
        d["attempts"].as_array().unwrap().last().is_some_and(|a| a["refused_by"] == "ratio_breaker")
    });
    let causes: Vec<&Value> = last_refused.map(|d| &d["cause"]).collect();
    assert!(!causes.is_empty() && causes.iter().all(|c| *c == "ratio_breaker"), "{causes:?}");
    let state = polly["protections"][0]["state"].as_str().unwrap();
    assert!(["closed", "open", "half_open"].contains(&state), "{state}");
}

#[tokio::test]
async fn envoys_budget_stops_a_retry_while_too_many_are_out() {
    let app = TestApp::spawn().await;
    // Waits of 100 ms: about 50 retries a second each out for 100 ms or more, some 5 at once,
    // past a budget of one at a time while fewer than 10 requests are in flight.
    let policy = r#"{"max_attempts": 4, "seed": 6, "base_ms": 100, "cap_ms": 100, "jitter": "none",
        "protections": [{"kind": "envoy", "min_retry_concurrency": 1}]}"#;
    let (done, amplification) = run(&app, policy).await;
    assert!(amplification < 1.5, "{amplification:.3}");
    let stopped = suppressed(&done, "envoy");
    assert!(stopped > 50, "{stopped}");
    let refused = dead_lettered_as(&done, "envoy", "retry not sent (envoy): Envoy's retry budget allows ");
    assert_eq!(stopped as usize, refused);
    assert_eq!(done["policy"]["protections"][0]["budget_percent"], 20.0, "Envoy's default");
}

/// resilience4j's semaphore bulkhead: with 3 permits and a slow endpoint, a burst of 10 sends
/// at most 3 at once; the rest are refused at once, unsent, each a dead letter under its kind,
/// counted as its own, and every permit is back once the burst settled.
#[tokio::test]
async fn a_bulkhead_refuses_attempts_past_its_permits_at_once_and_gives_each_back() {
    let app = TestApp::spawn().await;
    let lab = app.fast_lab().await;
    app.put(&lab, "downstream", r#"{"mode": "slow", "slow_ms": [300, 300]}"#).await;
    let policy = r#"{"max_attempts": 1, "timeout_ms": 5000,
        "protections": [{"kind": "bulkhead", "max_concurrent_calls": 3}]}"#;
    app.put(&lab, "policy", policy).await;
    app.burst(&lab, 10).await;
    let done =
        app.wait_for(&lab, PATIENCE, |s| counter(s, "delivered") + counter(s, "dead_letter") == 10).await;
    let refused = refused_locally(&done);
    assert!(!refused.is_empty(), "a burst of 10 against 3 permits");
    assert!(refused.iter().all(|a| a["refused_by"] == "bulkhead" && a["status"].is_null()), "{refused:?}");
    let letters = dead_lettered_as(&done, "bulkhead", "refused by bulkhead: the bulkhead is full");
    assert_eq!(letters as u64, counter(&done, "dead_letter"), "every letter is the bulkhead's");
    assert_eq!((suppressed(&done, "bulkhead") as usize, refused.len()), (letters, letters));
    assert!(counter(&done, "delivered") >= 3, "{}", counter(&done, "delivered"));
    assert_eq!(done["protections"][0]["kind"], "bulkhead");
    assert_eq!(
        (done["protections"][0]["level"].as_f64(), done["protections"][0]["ceiling"].as_f64()),
        (Some(0.0), Some(3.0))
    );
}
