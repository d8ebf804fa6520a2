//! `GET /api/labs/{lab}/claims`: the story's claims judged by the server, pending while the run
//! moves, then holding or failing with the figure; bad input names its field.

use std::time::Duration;

use reqwest::{Method, StatusCode};

use crate::helpers::{TestApp, counter};

#[tokio::test]
async fn claims_are_pending_while_the_run_moves_then_hold_with_their_figures() {
    let app = TestApp::spawn().await;
    let lab = app.fast_lab().await;
    app.set_mode(&lab, "down").await;
    let ids = app.burst(&lab, 3).await;
    let scope = ids.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
    let path =
        format!("/api/labs/{lab}/claims?ids=dead_lettered,delivered,none_applied_twice&messages={scope}");
    let (status, early) = app.call(Method::GET, &path, None).await;
    assert_eq!(status, StatusCode::OK, "{early}");
    assert_eq!(early["settled"], false, "three messages just sent have not settled: {early}");
    assert!(early["claims"].as_array().unwrap().iter().all(|c| c["verdict"] == "pending"), "{early}");

    app.wait_for(&lab, Duration::from_secs(20), |s| counter(s, "dead_letter") == 3).await;
    let (_, settled) = app.call(Method::GET, &path, None).await;
    assert_eq!(settled["settled"], true);
    let claims = settled["claims"].as_array().unwrap();
    assert_eq!(
        (claims[0]["id"].as_str(), claims[0]["verdict"].as_str()),
        (Some("dead_lettered"), Some("holds"))
    );
    assert_eq!(claims[0]["figure"], "3 of 3");
    assert_eq!(claims[0]["said"], "3 of 3 messages were dead-lettered");
    // A claim this run did not bear out says so, with its figure.
    assert_eq!(claims[1]["verdict"], "fails");
    assert_eq!(claims[1]["said"], "only 0 of 3 messages were delivered");
    assert_eq!((claims[2]["verdict"].as_str(), claims[2]["figure"].as_str()), (Some("holds"), Some("0")));
}

#[tokio::test]
async fn an_unknown_claim_or_a_message_id_that_is_not_a_number_is_a_422_naming_it() {
    let app = TestApp::spawn().await;
    let lab = app.new_lab().await;
    for (query, field) in [
        ("ids=nope", "ids"),
        ("ids=delivered&messages=1,x", "messages"),
        ("messages=1", "ids"),
        // Later than the lab's clock: the sums after it would overflow.
        ("ids=goodput_back&from_ms=18446744073709551615", "from_ms"),
    ] {
        let (status, body) = app.call(Method::GET, &format!("/api/labs/{lab}/claims?{query}"), None).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{query}: {body}");
        assert_eq!(body["field"], field, "{query}: {body}");
    }
}

/// A run reset away never settles: its claims turn `unknown` and say why, rather than stay
/// `pending` for ever.
#[tokio::test]
async fn claims_about_messages_a_reset_took_away_are_unknown_and_say_why() {
    let app = TestApp::spawn().await;
    let lab = app.fast_lab().await;
    app.set_mode(&lab, "down").await;
    let ids = app.burst(&lab, 3).await;
    let scope = ids.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
    let path = format!("/api/labs/{lab}/claims?ids=dead_lettered&messages={scope}");
    let (status, reset) = app.call(Method::POST, &format!("/api/labs/{lab}/reset"), None).await;
    assert!(status.is_success(), "{reset}");
    let (status, after) = app.call(Method::GET, &path, None).await;
    assert_eq!(status, StatusCode::OK, "{after}");
    let claim = &after["claims"][0];
    assert_eq!(
        (claim["verdict"].as_str(), claim["figure"].as_str()),
        (Some("unknown"), Some("–")),
        "{after}"
    );
    let said = claim["said"].as_str().unwrap();
    assert!(
        said.starts_with("cannot be judged: 3 of 3 of the run's messages are no longer in the lab"),
        "{said}"
    );
}
