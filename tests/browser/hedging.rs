//! A hedged round on the timeline: its attempts overlap in time, so each is drawn in a lane of
//! its own within the message's row (lanes stacked, not bars on top of each other), the
//! siblings' 409s and a cancelled hedge are shown as the API records them, and the tooltip
//! says which attempts were in flight together.

use super::*;

/// The bars of message `id` as `[n, lane, outcome, status, top, bottom, left, right]`.
async fn lanes_of(page: &Page, id: u64) -> Vec<Value> {
    let script = format!(
        "[...document.querySelectorAll('#timeline .tl-bar[data-message=\"{id}\"]')].map(b => {{ \
           const r = b.getBoundingClientRect(); \
           return [Number(b.dataset.n), Number(b.dataset.lane), b.dataset.outcome, b.dataset.status ?? null, r.top, r.bottom, r.left, r.right]; }})"
    );
    page.eval(&script).await.unwrap().as_array().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hedged_attempts_are_drawn_in_lanes_with_their_409s_and_the_cancelled_one() {
    let Some(browser) = browser() else { return };
    let server = Server::start().await;
    let page = browser.page().await;
    page.set_viewport(1280, 900).await;
    let lab = open_new_lab(&page, &server).await;
    server
        .put(&lab, "downstream", r#"{"mode": "healthy", "latency_ms": [400, 450], "slow_ms": [700, 800]}"#)
        .await;
    let policy = r#"{"timeout_ms": 3000, "protections":
        [{"kind": "grpc_hedging", "max_attempts": 3, "hedging_delay_ms": 150, "max_tokens": 100}]}"#;
    server.put(&lab, "policy", policy).await;
    page.click("[data-send=\"1\"]").await;
    wait_counter(&page, "delivered", 1).await;
    let snapshot = server.snapshot(&lab).await;
    let message = &snapshot["messages"][0];
    let id = message["id"].as_u64().unwrap();
    let statuses: Vec<&Value> =
        message["attempts"].as_array().unwrap().iter().map(|a| &a["status"]).collect();
    assert_eq!(statuses, [&json!(200), &json!(409), &json!(409)], "{message}");
    // The two hedges overlap the first, not each other (the second went when the first hedge's
    // 409 came back): two lanes, the hedges one after the other in the second.
    wait_for(
        &page,
        "the row's two lanes",
        &format!(
            "document.querySelector('#timeline .tl-row[data-message-id=\"{id}\"]')?.dataset.lanes === '2'"
        ),
    )
    .await;
    let bars = lanes_of(&page, id).await;
    assert_eq!(bars.len(), 3, "{bars:?}");
    let lane: Vec<u64> = bars.iter().map(|b| b[1].as_u64().unwrap()).collect();
    assert_eq!(lane, [0, 1, 1], "each attempt in the first lane free when it started: {bars:?}");
    let page_statuses: Vec<&Value> = bars.iter().map(|b| &b[3]).collect();
    assert_eq!(page_statuses, [&json!("200"), &json!("409"), &json!("409")], "as the API has them");
    let f = |bar: &Value, i: usize| bar[i].as_f64().unwrap();
    for (a, b) in [(0, 1), (0, 2)] {
        assert!(f(&bars[a], 5) <= f(&bars[b], 4) + 0.5, "lanes stack without covering each other: {bars:?}");
        assert!(
            f(&bars[b], 6) < f(&bars[a], 7),
            "the hedge is drawn while the first was in flight: {bars:?}"
        );
    }
    assert!(f(&bars[1], 7) <= f(&bars[2], 6) + 3.5, "one lane's bars follow each other: {bars:?}");

    // The trace says a hedge went while its sibling was out.
    let traced = "[...document.querySelectorAll('#trace *')].some(e => e.textContent.includes('attempt 2 sent as a hedge, with attempt 1 still out'))";
    wait_for(&page, "the trace's hedge line", traced).await;

    // Slow mode applied the write at once: the hedge's replay wins, the first is cancelled.
    choose_mode(&page, "slow").await;
    page.click("[data-send=\"1\"]").await;
    wait_counter(&page, "delivered", 2).await;
    let cancelled = "#timeline .tl-bar[data-outcome=\"cancelled\"]";
    wait_for(&page, "a cancelled bar", &format!("document.querySelector('{cancelled}')")).await;
    let snapshot = server.snapshot(&lab).await;
    let cut: usize = snapshot["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["attempts"].as_array().unwrap())
        .filter(|a| a["outcome"] == "cancelled")
        .count();
    let drawn = page.eval(&format!("document.querySelectorAll('{cancelled}').length")).await.unwrap();
    assert_eq!(drawn, json!(cut), "the page draws each cancelled attempt the API records");
    page.screenshot_viewport("hedged-lanes-rows-1280").await;
    let mut found = Vec::new();
    super::accessibility::check_both(&page, "a lab with hedged rows", &mut found).await;
    assert!(found.is_empty(), "axe found:\n{}", found.join("\n"));
    page.hover(cancelled).await;
    let tip = wait_for(
        &page,
        "the tooltip",
        "(t => !t.hidden && t.textContent)(document.querySelector('#timeline [role=\"tooltip\"]'))",
    )
    .await;
    let tip = tip.as_str().unwrap();
    assert!(
        tip.contains("cancelled") && tip.contains("hung up") && tip.contains("overlapped"),
        "tooltip: {tip}"
    );
    // The key lists the cancelled mark once one is drawn (it looks twice a second).
    let legend = "!document.querySelector('[data-key=\".tl-bar.o-cancelled\"]').hidden";
    wait_for(&page, "the key's cancelled item", legend).await;
    page.screenshot_viewport("hedged-lanes-1280").await;
    assert_no_console_errors(&page);
}

/// The claim `id` as the page shows it (verdict, figure) once settled, and as the API judges it
/// about the step's `messages`.
async fn claim_on(page: &Page, server: &Server, lab: &str, id: &str, messages: &[u64]) -> (Value, Value) {
    let shown = wait_for(
        page,
        &format!("the claim {id} to settle"),
        &format!(
            "(c => c && c.dataset.verdict !== 'pending' && [c.dataset.verdict, c.dataset.figure])(document.querySelector('[data-claim={id}]'))"
        ),
    )
    .await;
    let ids: Vec<String> = messages.iter().map(u64::to_string).collect();
    let judged: Value =
        server.get_json(&format!("/api/labs/{lab}/claims?ids={id}&messages={}", ids.join(","))).await;
    let judged = judged["claims"][0].clone();
    assert_eq!(shown, json!([judged["verdict"], judged["figure"]]), "{id}: {judged}");
    (shown, judged)
}

/// The ids of the lab's messages, oldest first.
async fn message_ids(server: &Server, lab: &str) -> Vec<u64> {
    let snapshot = server.snapshot(lab).await;
    let mut ids: Vec<u64> =
        snapshot["messages"].as_array().unwrap().iter().map(|m| m["id"].as_u64().unwrap()).collect();
    ids.sort();
    ids
}

/// The "hedged writes" failure mode from its button, as a person runs it: the policy is the
/// `grpc-hedging` preset, and each claim its sentence makes is shown with the verdict and figure
/// the API gives, on the first step and on its follow-up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hedged_writes_preset_shows_its_claims_as_the_api_judges_them() {
    let Some(browser) = browser() else { return };
    let server = Server::start().await;
    let page = browser.page().await;
    page.set_viewport(1280, 900).await;
    let lab = open_new_lab(&page, &server).await;
    page.click("[data-presets-drawer] > summary").await;
    page.click("[data-preset=\"hedging\"]").await;
    wait_counter(&page, "delivered", 8).await;
    let snapshot = server.snapshot(&lab).await;
    assert_eq!(snapshot["policy"]["protections"][0]["kind"], "grpc_hedging");
    assert_eq!(snapshot["policy"]["protections"][0]["hedging_delay_ms"], 500);
    let first = message_ids(&server, &lab).await;
    assert_eq!(first.len(), 8);
    for id in ["answered_from_store", "cancelled", "delivered", "none_applied_twice"] {
        let (shown, judged) = claim_on(&page, &server, &lab, id, &first).await;
        assert_eq!(shown[0], "holds", "{id}: {judged}");
    }
    page.click("[data-preset-step=\"hedging/1\"]").await;
    wait_counter(&page, "delivered", 16).await;
    let next: Vec<u64> =
        message_ids(&server, &lab).await.into_iter().filter(|id| !first.contains(id)).collect();
    assert_eq!(next.len(), 8);
    for id in ["hedges_met_409", "delivered", "none_applied_twice"] {
        let (shown, judged) = claim_on(&page, &server, &lab, id, &next).await;
        assert_eq!(shown[0], "holds", "{id}: {judged}");
    }
    page.screenshot_viewport("hedged-writes-preset-1280").await;
    assert_no_console_errors(&page);
}
