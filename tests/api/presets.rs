//! Every "try a failure mode" preset, run as the page runs it (the same static/presets.json,
//! the same API calls in the same order) with a fixed seed, and the figures its sentence names
//! checked on what the lab measured: a sentence the page says about a run must be true of it.

use std::time::Duration;

use serde_json::{Value, json};

use retrylab::claims::{ClaimId, Run, Scope, Verdict};

use crate::helpers::{TestApp, counter, messages};
use crate::{defences, metastable};

const PRESETS: &str = include_str!("../../static/presets.json");
const PATIENCE: Duration = Duration::from_secs(90);
const SEED: u64 = 7;

fn preset(id: &str) -> Value {
    let all: Vec<Value> = serde_json::from_str(PRESETS).unwrap();
    all.into_iter().find(|p| p["id"] == id).unwrap_or_else(|| panic!("no preset {id}"))
}

/// The sentence of `step` says `phrase`: the figures checked next are the ones it names.
fn says(step: &Value, phrase: &str) {
    let look = step["look"].as_str().unwrap();
    assert!(look.contains(phrase), "the sentence no longer says {phrase:?}: {look}");
}

/// What one step of a preset did: its messages, and the lab time it started.
struct Step {
    ids: Vec<u64>,
    from_ms: u64,
}

/// The policy a step sets, as the page makes it: its own `policy` with what its named policy
/// `preset` changes written over it (the table the comparison uses too).
fn step_policy(step: &Value) -> Option<Value> {
    let Some(name) = step["preset"].as_str() else { return step.get("policy").cloned() };
    let preset = retrylab::compare::presets::find(name).unwrap_or_else(|| panic!("no policy preset {name}"));
    let mut policy = step.get("policy").cloned().unwrap_or_else(|| json!({}));
    for (field, value) in preset.policy.as_object().unwrap() {
        policy[field] = value.clone();
    }
    Some(policy)
}

/// Applies one step as the page does: the policy (with the test's seed), each downstream
/// update in order, then the burst.
async fn apply(app: &TestApp, lab: &str, step: &Value) -> Step {
    let from_ms = app.snapshot(lab).await["now_ms"].as_u64().unwrap();
    if let Some(mut policy) = step_policy(step) {
        policy["seed"] = json!(SEED);
        app.put(lab, "policy", &policy.to_string()).await;
    }
    for update in step["downstream"].as_array().into_iter().flatten() {
        app.put(lab, "downstream", &update.to_string()).await;
    }
    let ids = match step["burst"].as_u64() {
        Some(count) => app.burst(lab, count).await,
        None => Vec::new(),
    };
    Step { ids, from_ms }
}

/// Runs a preset from a reset, as its button does.
async fn start(app: &TestApp, id: &str) -> (String, Value, Step) {
    let lab = app.new_lab().await;
    let preset = preset(id);
    reset(app, &lab).await;
    let step = apply(app, &lab, &preset).await;
    (lab, preset, step)
}

/// Waits until every message of `step` is delivered or dead-lettered, and for the endpoint
/// to have finished its work.
async fn settled(app: &TestApp, lab: &str, step: &Step) -> Value {
    app.wait_for(lab, PATIENCE, |s| {
        let done = messages(s)
            .iter()
            .filter(|m| step.ids.contains(&m["id"].as_u64().unwrap()))
            .all(|m| m["state"] == "delivered" || m["state"] == "dead_letter");
        done && counter(s, "in_flight") == 0 && s["downstream"]["revert"].is_null()
    })
    .await
}

/// The figures of one step's messages and of the load from its start until `to_ms`.
#[derive(Debug)]
struct Figures {
    dead: u64,
    bins: Vec<Value>,
}

fn figures(snapshot: &Value, step: &Step, to_ms: u64) -> Figures {
    let ours: Vec<&Value> =
        messages(snapshot).iter().filter(|m| step.ids.contains(&m["id"].as_u64().unwrap())).collect();
    let dead = ours.iter().filter(|m| m["state"] == "dead_letter").count() as u64;
    let bins: Vec<Value> = snapshot["load"]["bins"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| (step.from_ms..to_ms).contains(&b["t_ms"].as_u64().unwrap()))
        .cloned()
        .collect();
    Figures { dead, bins }
}

/// The claims `step` makes (its `claims` in presets.json), judged on `snapshot` by the very
/// definitions the page shows them with (`retrylab::claims`): each must hold. `before` is the run
/// before, for the claims that compare.
fn claims_hold(snapshot: &Value, step: &Value, ours: &Step, before: Option<&Step>) {
    let ids: Vec<ClaimId> = step["claims"]
        .as_array()
        .expect("the step names its claims")
        .iter()
        .map(|c| ClaimId::parse(c.as_str().unwrap()).unwrap_or_else(|| panic!("no claim {c}")))
        .collect();
    assert!(!ids.is_empty());
    let scope = Scope {
        messages: ours.ids.clone(),
        before: before.map(|b| b.ids.clone()).unwrap_or_default(),
        from_ms: None,
    };
    let run = Run::from_snapshot(&snapshot.to_string()).unwrap();
    for judged in run.judge(&ids, &scope) {
        println!("{}: {:?}, {}", judged.id.name(), judged.verdict, judged.said);
        assert_eq!(judged.verdict, Verdict::Holds, "{}: {}", judged.id.name(), judged.said);
    }
}

/// How many requests the endpoint can finish per 100 ms bin: `capacity` at once, each taking
/// `latency_ms` on average (the capacity line the load chart draws).
fn finishes_per_bin(downstream: &Value) -> f64 {
    let latency = downstream["latency_ms"].as_array().unwrap();
    let mean = (latency[0].as_f64().unwrap() + latency[1].as_f64().unwrap()) / 2.0;
    downstream["capacity"].as_f64().unwrap() * 100.0 / mean
}

/// When the step's scheduled revert ran (its outage ended), in lab time.
fn reverted_at(snapshot: &Value, step: &Step) -> u64 {
    let markers = snapshot["markers"].as_array().unwrap();
    let at = markers.iter().filter(|m| m["kind"] == "scheduled").map(|m| m["at_ms"].as_u64().unwrap());
    at.filter(|&t| t >= step.from_ms).min().expect("the outage ended by itself")
}

fn sum(bins: &[Value], field: &str, range: std::ops::Range<u64>) -> u64 {
    bins.iter()
        .filter(|b| range.contains(&b["t_ms"].as_u64().unwrap()))
        .map(|b| b[field].as_u64().unwrap())
        .sum()
}

fn causes(snapshot: &Value, step: &Step) -> Vec<String> {
    let letters = snapshot["dead_letters"].as_array().unwrap();
    let ours = letters.iter().filter(|d| step.ids.contains(&d["id"].as_u64().unwrap()));
    ours.map(|d| d["cause"].as_str().unwrap().to_owned()).collect()
}

/// The metastable preset is the set-up `tests/api/metastable.rs` runs, setting for setting,
/// where its sentences are proven: healthy before the trigger (goodput within 10 % of offered),
/// goodput below half of offered for 10 s after it, back on offered within a few seconds of the
/// retry budget while the traffic goes on, and the two breakers: one that retries what it
/// refused, which does not end it, and one that gives up on a refusal, which does. The page's
/// live sentence is checked in the browser.
#[test]
fn the_metastable_preset_is_the_set_up_whose_sentences_the_metastable_tests_prove() {
    let preset = preset("metastable");
    let policy = &step_policy(&preset).unwrap();
    assert_eq!(
        (
            &policy["jitter"],
            &policy["base_ms"],
            &policy["cap_ms"],
            &policy["max_attempts"],
            &policy["timeout_ms"]
        ),
        (&json!("none"), &json!(800), &json!(3200), &json!(5), &json!(500))
    );
    assert_eq!(
        (&policy["honor_retry_after"], &policy["breaker"], &policy["retry_budget"]),
        (&json!(false), &Value::Null, &Value::Null)
    );
    assert_eq!(
        preset["downstream"],
        json!([{"mode": "overloaded", "capacity": 8, "queue": 40, "latency_ms": [200, 200], "retry_after_s": 0}])
    );
    assert_eq!(preset["traffic"], json!({"rate_per_s": 28, "arrivals": "poisson"}));
    assert_eq!(
        preset["later"],
        json!({"after_ms": 3000, "downstream": {"latency_ms": [1000, 1000], "for_ms": 2000}})
    );
    assert!(preset["burst"].is_null(), "its load is steady traffic, not a burst");
    says(&preset, "the goodput line follows the offered line");
    says(&preset, "stays there after the flag, while the offered line holds");
    says(&preset, "the first one below does not end it, the second does");
    let policy_of = |fix: &str| -> Value { serde_json::from_str(fix).unwrap() };
    let budget = &preset["then"][0];
    assert_eq!(step_policy(budget).unwrap(), policy_of(metastable::BUDGET));
    says(budget, "within ten seconds the goodput line is back on the offered line");
    // metastable_a_breaker_that_retries_what_it_refused_does_not_end_it
    let breaker = &preset["then"][1];
    assert_eq!(step_policy(breaker).unwrap(), policy_of(metastable::BREAKER_RETRYING));
    says(breaker, "Five failures in a row open the breaker, and for 4 s it refuses every attempt");
    says(breaker, "its probe succeeds");
    says(breaker, "more requests in a second than the 8 workers can do, and within 2 s it opens again");
    says(breaker, "the goodput line stays below half of the offered line");
    // metastable_a_breaker_that_gives_up_on_what_it_refused_ends_it, and clicked late in the
    // retrying breaker's open spell, metastable_failing_fast_late_in_the_retrying_breakers_open_spell_still_opens_once
    let failing_fast = &preset["then"][2];
    assert_eq!(step_policy(failing_fast).unwrap(), policy_of(metastable::BREAKER_GIVING_UP));
    says(failing_fast, "goes to the dead-letter queue (circuit_open)");
    says(failing_fast, "Every message it meets while it is open is dead-lettered");
    says(failing_fast, "within a few seconds the goodput line is back on the offered line");
    // It does not promise to stay closed: the client's lockstep retries are as they were.
    says(failing_fast, "the breaker opens once more and ends that spell the same way");
    // defences::metastable_a_deadline_drop_turned_on_while_stuck_ends_it and
    // defences::metastable_codel_turned_on_while_stuck_ends_it: the naive client kept.
    for (step, fix) in
        [(&preset["then"][3], defences::DEADLINE_STEP), (&preset["then"][4], defences::CODEL_STEP)]
    {
        assert_eq!(step["downstream"], json!([policy_of(fix)]));
        assert_eq!(step["policy"], json!({"breaker": null, "retry_budget": null}), "the client's fixes off");
        says(step, "The client is as naive as before");
        says(step, "within a few seconds the goodput line is back on the offered line");
    }
    says(&preset["then"][3], "no longer begins work that would finish after its client has given up");
    says(&preset["then"][4], "one that waited longer gets a 503 when its turn comes");
    assert_eq!(preset["then"].as_array().unwrap().len(), 5, "only the endings the tests prove");
    // The claims the page shows are those the tests above judge: stuck() the preset's two, the
    // budget's test goodput_back_within_10_s (it drains a full queue with what the workers have
    // left), the breaker that fails fast goodput_returns (a burst may open it again), fixed_by_putting()
    // goodput_back for each defence (not the retrying breaker's, which does not end it).
    assert_eq!(preset["claims"], json!(["goodput_follows_offered", "goodput_stays_down"]));
    let endings: Vec<&Value> = preset["then"].as_array().unwrap().iter().map(|s| &s["claims"]).collect();
    let (slow, back) = (json!(["goodput_back_within_10_s"]), json!(["goodput_back"]));
    let returns = json!(["goodput_returns"]);
    assert_eq!(endings, [&slow, &Value::Null, &returns, &back, &back]);
}

/// What a lab is set to (its breaker, retry budget and defences) after `clicked`, in order, from
/// `preset`'s start.
async fn state_after(app: &TestApp, preset: &Value, clicked: &[&Value]) -> (Value, Value, Value) {
    let lab = app.new_lab().await;
    apply(app, &lab, preset).await;
    for step in clicked {
        apply(app, &lab, step).await;
    }
    let s = app.snapshot(&lab).await;
    (s["policy"]["breaker"].clone(), s["policy"]["retry_budget"].clone(), s["downstream"]["defences"].clone())
}

/// Each ending of the metastable preset sets everything its sentence depends on, whatever was
/// clicked before it: the client's fixes (retry budget, breaker) and the endpoint's defences.
/// A client fix clicked after a defence turns the defence off, or its sentence ("does not end
/// it", "back on the offered line") would be said of a run the defence also shaped.
#[tokio::test]
async fn each_metastable_ending_sets_what_its_sentence_depends_on_whatever_came_before() {
    // Some hundred settings in a second, more than a person clicks.
    let limits = retrylab::config::Limits {
        control_rate_per_s: 1_000,
        control_burst: 1_000,
        lab_create_burst: 100,
        lab_creates_per_hour: 1_000,
        ..Default::default()
    };
    let app = TestApp::spawn_with(limits).await;
    let preset = preset("metastable");
    let steps = preset["then"].as_array().unwrap();
    for (b, last) in steps.iter().enumerate() {
        let alone = state_after(&app, &preset, &[last]).await;
        for (a, first) in steps.iter().enumerate().filter(|&(a, _)| a != b) {
            let after = state_after(&app, &preset, &[first, last]).await;
            assert_eq!(after, alone, "step {b} ({}) after step {a} ({})", last["label"], first["label"]);
        }
        // Clicked during the spike, it leaves the spike to end when it was to, and its settings
        // stay after it.
        let lab = app.new_lab().await;
        apply(&app, &lab, &preset).await;
        app.put(&lab, "downstream", &preset["later"]["downstream"].to_string()).await;
        apply(&app, &lab, last).await;
        let s = app.snapshot(&lab).await;
        let revert = &s["downstream"]["revert"];
        assert_eq!(revert["to"]["latency_ms"], json!([200, 200]), "step {b} during the spike: {revert}");
        assert_eq!(revert["to"]["defences"], alone.2, "step {b} during the spike: {revert}");
        assert_eq!(s["downstream"]["defences"], alone.2);
    }
}

#[tokio::test]
async fn retry_storm_towers_over_the_capacity_and_backoff_spreads_it() {
    let app = TestApp::spawn().await;
    let (lab, preset, first) = start(&app, "storm").await;
    says(&preset, "towers over the capacity line");
    says(&preset, "nine requests in ten are 503s");
    says(&preset, "many messages use up all ten attempts");
    let done = settled(&app, &lab, &first).await;
    let f = figures(&done, &first, u64::MAX);
    let line = finishes_per_bin(&done["downstream"]);
    // "...the load chart towers over the capacity line, nine requests in ten are 503s, and
    // many messages use up all ten attempts and end as dead letters."
    let busy: Vec<u64> = f.bins.iter().map(|b| b["requests"].as_u64().unwrap()).filter(|&r| r > 0).collect();
    let over = busy.iter().filter(|&&r| r as f64 > 3.0 * line).count();
    assert!(over * 2 > busy.len(), "most busy bins tower over {line:.1} per bin: {busy:?}");
    // Nine in ten are 503s, many dead letters: the claims the page shows with the sentence.
    claims_hold(&done, &preset, &first, None);
    // "...fewer than half as many 503s, and nearly every message gets through."
    says(&preset["then"][0], "fewer than half as many 503s, and nearly every message gets through");
    let next = apply(&app, &lab, &preset["then"][0]).await;
    let done = settled(&app, &lab, &next).await;
    claims_hold(&done, &preset["then"][0], &next, Some(&first));
}

#[tokio::test]
async fn thundering_herd_comes_back_in_columns_and_jitter_spreads_them() {
    let app = TestApp::spawn().await;
    let (lab, preset, first) = start(&app, "herd").await;
    says(&preset, "overflows the capacity line");
    says(&preset, "turned away with 503");
    let done = settled(&app, &lab, &first).await;
    // "every message retries at the same instant": the claim the page shows with it.
    claims_hold(&done, &preset, &first, None);
    let back = reverted_at(&done, &first);
    let f = figures(&done, &first, u64::MAX);
    let line = finishes_per_bin(&done["downstream"]);
    let after = |f: &Figures| -> Vec<u64> {
        f.bins
            .iter()
            .filter(|b| b["t_ms"].as_u64().unwrap() >= back)
            .map(|b| b["requests"].as_u64().unwrap())
            .collect()
    };
    // "After the ↩ flag ... every message retries at the same instant: each column overflows
    // the capacity line, and what does not fit is turned away and comes back as the next."
    let columns: Vec<u64> = after(&f).into_iter().filter(|&r| r as f64 > 3.0 * line).collect();
    assert!(columns.len() >= 2, "at least two columns over {line:.1} after the outage: {:?}", after(&f));
    let turned_away = |f: &Figures| sum(&f.bins, "unavailable", back..u64::MAX);
    assert!(turned_away(&f) > 0);
    says(
        &preset["then"][0],
        "less than half as many are turned away after the ↩ flag and more messages get through",
    );
    // "With jitter the retries after recovery arrive spread over the whole wait, so far fewer
    // are turned away and more messages get through."
    let next = apply(&app, &lab, &preset["then"][0]).await;
    let done = settled(&app, &lab, &next).await;
    let back_again = reverted_at(&done, &next);
    let g = figures(&done, &next, u64::MAX);
    let g_away: u64 = g
        .bins
        .iter()
        .filter(|b| b["t_ms"].as_u64().unwrap() >= back_again)
        .map(|b| b["unavailable"].as_u64().unwrap())
        .sum();
    assert!(g_away * 2 < turned_away(&f), "after recovery: {} turned away, then {g_away}", turned_away(&f));
    // "...and more messages get through": the claim the page shows with it.
    claims_hold(&done, &preset["then"][0], &next, Some(&first));
}

#[tokio::test]
async fn a_token_bucket_keeps_requests_near_one_a_message_and_without_it_retries_deliver() {
    let app = TestApp::spawn().await;
    let (lab, preset, first) = start(&app, "token-bucket").await;
    says(&preset, "at most 1.3 requests a message");
    says(&preset, "end as dead letters");
    let done = settled(&app, &lab, &first).await;
    // "...once its 5 tokens are spent most failures go unretried and end as dead letters. The
    // endpoint sees at most 1.3 requests a message."
    claims_hold(&done, &preset, &first, None);
    let policy = &done["policy"];
    assert_eq!(policy["protections"][0]["kind"], "token_bucket", "{policy}");
    says(&preset["then"][0], "at least a quarter more requests a message");
    let next = apply(&app, &lab, &preset["then"][0]).await;
    let done = settled(&app, &lab, &next).await;
    let left = &done["policy"]["protections"];
    assert!(left.as_array().is_none_or(|p| p.is_empty()), "the follow-up takes the bucket off: {left}");
    // "...nearly every message gets through, and the endpoint pays for it with at least a
    // quarter more requests a message."
    claims_hold(&done, &preset["then"][0], &next, Some(&first));
}

#[tokio::test]
async fn ignoring_retry_after_draws_429s_and_honouring_it_delivers_every_message() {
    let app = TestApp::spawn().await;
    let (lab, preset, first) = start(&app, "ignore-429").await;
    says(&preset, "most requests are 429s");
    says(&preset, "many messages run out of attempts");
    let done = settled(&app, &lab, &first).await;
    // "...most requests are 429s, and many messages run out of attempts."
    claims_hold(&done, &preset, &first, None);
    says(&preset["then"][0], "every message gets through in the end and none runs out of attempts");
    says(&preset["then"][0], "fewer 429s, not none");
    // "...every message gets through in the end and none runs out of attempts; fewer 429s, but not none: retries told the same second still meet."
    let next = apply(&app, &lab, &preset["then"][0]).await;
    let done = settled(&app, &lab, &next).await;
    claims_hold(&done, &preset["then"][0], &next, Some(&first));
}

#[tokio::test]
async fn a_fixed_interval_keeps_the_load_up_and_doubling_thins_it_at_a_price() {
    let app = TestApp::spawn().await;
    let (lab, preset, first) = start(&app, "fixed").await;
    says(&preset, "the same column every 400 ms");
    let done = settled(&app, &lab, &first).await;
    // The column every 400 ms, and none of the messages given up, as the page shows them.
    claims_hold(&done, &preset, &first, None);
    let back = reverted_at(&done, &first);
    let f = figures(&done, &first, back);
    // "For the whole outage the load chart shows the same column every 400 ms": every 400 ms
    // of the outage, about one request per message, the last as many as the first.
    // Per second of the outage, a column of the 30 messages every 400 ms is 75 requests; most
    // of that every second (a loaded machine smears a column over a window's edge), and the
    // last second about as busy as the rest.
    let sent = f.bins[0]["t_ms"].as_u64().unwrap();
    let seconds: Vec<u64> = (0..(back - sent) / 1000)
        .map(|k| sent + k * 1000)
        .map(|at| sum(&f.bins, "requests", at..at + 1000))
        .collect();
    assert!(seconds.len() >= 3, "{seconds:?}");
    assert!(seconds.iter().all(|&n| n >= 50), "a column of the messages every 400 ms: {seconds:?}");
    let mean = seconds.iter().sum::<u64>() / seconds.len() as u64;
    assert!(*seconds.last().unwrap() * 3 >= mean * 2, "the load never falls: {seconds:?}");
    assert_eq!(figures(&done, &first, u64::MAX).dead, 0, "twelve attempts outlast the outage");
    says(&preset["then"][0], "Doubling thins the columns out");
    says(&preset["then"][0], "some messages become dead letters (the fixed interval had none)");
    // "Doubling thins the columns out ... The price: ... some messages use up their six
    // attempts before the outage is over and become dead letters."
    let next = apply(&app, &lab, &preset["then"][0]).await;
    let done = settled(&app, &lab, &next).await;
    let back = reverted_at(&done, &next);
    let g = figures(&done, &next, back);
    let half = next.from_ms + (back - next.from_ms) / 2;
    let (early, late) =
        (sum(&g.bins, "requests", next.from_ms + 100..half), sum(&g.bins, "requests", half..back));
    assert!(late < early, "thinner later in the outage: {early} then {late}");
    // Some dead letters, where the fixed interval had none: the claims the page shows with it.
    claims_hold(&done, &preset["then"][0], &next, Some(&first));
    assert!(causes(&done, &next).iter().all(|c| c == "attempts_used_up"));
}

#[tokio::test]
async fn no_jitter_stands_in_columns_and_jitter_flattens_them() {
    let app = TestApp::spawn().await;
    let (lab, preset, first) = start(&app, "no-jitter").await;
    says(&preset, "spikes with silence in between");
    let done = settled(&app, &lab, &first).await;
    // "Every retry lands 500, 1,000, 2,000 ms after the one before, for all messages alike":
    // each wait of the run is exactly its nominal (no band to draw from), doubling from 500 ms
    // to the 3 s cap, and the next attempt leaves no earlier than that after the answer (but
    // for the 2 ms that rounding lab times to whole ms can take).
    says(&preset, "Every retry lands 500, 1,000, 2,000 ms after the one before");
    let mut waits = 0;
    for m in messages(&done).iter().filter(|m| first.ids.contains(&m["id"].as_u64().unwrap())) {
        let attempts = m["attempts"].as_array().unwrap();
        for (a, next) in attempts.iter().zip(attempts.iter().skip(1)) {
            let wait = &a["wait"];
            let n = a["n"].as_u64().unwrap();
            let nominal = (500 << (n - 1)).min(3000);
            assert_eq!(
                (wait["low_ms"].as_u64(), wait["high_ms"].as_u64(), wait["planned_ms"].as_u64()),
                (Some(nominal), Some(nominal), Some(nominal)),
                "attempt {n} of message {}: {wait}",
                m["id"]
            );
            let answered = a["started_ms"].as_u64().unwrap() + a["duration_ms"].as_u64().unwrap();
            assert!(next["started_ms"].as_u64().unwrap() + 2 >= answered + nominal, "{a} then {next}");
            waits += 1;
        }
    }
    assert!(waits >= 50, "half the burst retried at least once: {waits} waits");
    // "...the load chart is spikes with silence in between": a 503 is answered at once, so
    // without jitter the retries of each round leave together, 500, 1,000, 2,000 and 3,000 ms
    // after the burst, and four columns of 200 ms hold almost all of them (the claim
    // retries_in_columns, as the page shows it). Full jitter draws each wait anywhere in
    // [0, nominal]: the four busiest 200 ms windows hold clearly less of its own retries, so a
    // busy machine that smears one run's columns is held to its own total
    // (retries_out_of_columns).
    claims_hold(&done, &preset, &first, None);
    let next = apply(&app, &lab, &preset["then"][0]).await;
    let done = settled(&app, &lab, &next).await;
    says(&preset["then"][0], "the load chart flattens");
    claims_hold(&done, &preset["then"][0], &next, Some(&first));
}

#[tokio::test]
async fn hedged_writes_win_by_the_stored_answer_when_applied_and_meet_409_while_in_work() {
    let app = TestApp::spawn().await;
    let (lab, preset, first) = start(&app, "hedging").await;
    says(&preset, "gets the stored answer back (↺) and wins");
    says(&preset, "(✂, cancelled)");
    let done = settled(&app, &lab, &first).await;
    // "...the hedge sent 500 ms after the first attempt gets the stored answer back and wins,
    // and the client hangs up on the first attempt: every message delivered, each applied once."
    claims_hold(&done, &preset, &first, None);
    says(&preset["then"][0], "every hedge sent meets 409 at once");
    says(&preset["then"][0], "later hedges are not even sent (⊘)");
    let next = apply(&app, &lab, &preset["then"][0]).await;
    let done = settled(&app, &lab, &next).await;
    claims_hold(&done, &preset["then"][0], &next, Some(&first));
    // The tokens the 409s took stopped some hedges: each counted as the protection's.
    let stopped: u64 = done["load"]["bins"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["t_ms"].as_u64().unwrap() >= next.from_ms)
        .map(|b| b["suppressed"]["grpc_hedging"].as_u64().unwrap_or(0))
        .sum();
    println!("hedges not sent: {stopped}");
    assert!(stopped > 0, "the 409s drained the tokens: {stopped} hedges not sent");
}

/// The settings a lab holds: the policy, the downstream and the steady traffic, as the snapshot
/// gives them, without what moves with the clock (a timed setting's time left).
async fn held_settings(app: &TestApp, lab: &str) -> Value {
    let snapshot = app.snapshot(lab).await;
    let mut downstream = snapshot["downstream"].clone();
    if let Some(revert) = downstream.get_mut("revert").and_then(Value::as_object_mut) {
        revert.remove("at_ms");
    }
    // The traffic's settings, not what it did: on a loaded machine a tick can come between the
    // chapter's PUT and this read, and a message sent is no setting inherited.
    let mut traffic = snapshot["traffic"].clone();
    if let Some(measured) = traffic.as_object_mut() {
        for field in ["sent", "refused", "late_ms_p99"] {
            measured.remove(field);
        }
    }
    json!({"policy": snapshot["policy"], "downstream": downstream, "traffic": traffic})
}

/// Sets what one step sets (policy, downstream updates, traffic), without its burst: the
/// settings are what is under test here, not the run.
async fn set_only(app: &TestApp, lab: &str, step: &Value) {
    if let Some(mut policy) = step_policy(step) {
        policy["seed"] = json!(SEED);
        app.put(lab, "policy", &policy.to_string()).await;
    }
    for update in step["downstream"].as_array().into_iter().flatten() {
        app.put(lab, "downstream", &update.to_string()).await;
    }
    if let Some(traffic) = step.get("traffic") {
        app.put(lab, "traffic", &traffic.to_string()).await;
    }
}

/// Clears the lab as a chapter's button does: back to a new lab's settings too.
async fn reset(app: &TestApp, lab: &str) {
    let path = format!("/api/labs/{lab}/reset");
    let (status, body) = app.call(reqwest::Method::POST, &path, Some(r#"{"settings": "defaults"}"#)).await;
    assert!(status.is_success(), "{body}");
}

/// Each chapter promises that it "clears the lab, sets the downstream and the policy": so it
/// holds the same settings whatever ran before it. A metastable ending that turned on the
/// deadline drop (or CoDel, or a retry budget) once leaked into the next chapter, which then
/// never failed. Every chapter is run after every state another chapter or its endings leave,
/// and must hold what it holds on a fresh lab.
#[tokio::test]
async fn every_chapter_starts_clean_after_every_ending_of_every_other() {
    // Some thousand control calls from one address, far past its default allowance.
    let limits = retrylab::config::Limits {
        control_rate_per_s: 100_000,
        control_burst: 100_000,
        lab_create_burst: 100,
        ..Default::default()
    };
    let app = TestApp::spawn_with(limits).await;
    let chapters: Vec<Value> = serde_json::from_str(PRESETS).unwrap();
    let story: Vec<Value> = serde_json::from_str(include_str!("../../static/story.json")).unwrap();
    // The story's first step starts from a reset too: it is a chapter of its own kind.
    let starts: Vec<&Value> = chapters.iter().chain(story.iter().filter(|s| s["reset"] == true)).collect();
    let lab = app.new_lab().await;
    let mut clean = Vec::new();
    for chapter in &starts {
        // What the chapter holds on a lab nothing ran on before.
        let fresh = app.new_lab().await;
        set_only(&app, &fresh, chapter).await;
        clean.push(held_settings(&app, &fresh).await);
    }
    let (mut checked, mut failures) = (0, Vec::new());
    for before in &chapters {
        // Each state the chapter can leave: its own end, and after each of its follow-ups.
        for ending in 0..=before["then"].as_array().map_or(0, Vec::len) {
            for (chapter, clean) in starts.iter().zip(&clean) {
                if chapter["id"] == before["id"] {
                    continue;
                }
                reset(&app, &lab).await;
                set_only(&app, &lab, before).await;
                if ending > 0 {
                    set_only(&app, &lab, &before["then"][ending - 1]).await;
                }
                reset(&app, &lab).await;
                set_only(&app, &lab, chapter).await;
                let held = held_settings(&app, &lab).await;
                if &held != clean {
                    failures.push(format!(
                        "{} after {} (ending {ending}): {}",
                        chapter["id"],
                        before["id"],
                        differences(&held, clean, "").join(", ")
                    ));
                }
                checked += 1;
            }
        }
        reset(&app, &lab).await;
    }
    assert!(checked >= 60, "{checked} pairs checked");
    assert!(failures.is_empty(), "chapters that inherit settings:\n{}", failures.join("\n"));
}

/// Where two JSON values differ, as paths with both sides.
fn differences(a: &Value, b: &Value, at: &str) -> Vec<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut names: Vec<&String> = x.keys().chain(y.keys()).collect();
            names.sort();
            names.dedup();
            names
                .into_iter()
                .flat_map(|n| {
                    differences(
                        &x.get(n).cloned().unwrap_or(Value::Null),
                        &y.get(n).cloned().unwrap_or(Value::Null),
                        &format!("{at}.{n}"),
                    )
                })
                .collect()
        }
        _ if a == b => Vec::new(),
        _ => vec![format!("{at}: {a} instead of {b}")],
    }
}
