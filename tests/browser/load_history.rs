//! The load chart of a lab older than five minutes: the server sums activity older than that
//! into bins of 10 s, and the page draws each such bin spread evenly over the bars it covers,
//! so the chart still adds up to every request. Five minutes pass for the lab by moving its
//! origin back in the store while the server is stopped.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chart_with_summed_older_bins_still_adds_up_to_every_request() {
    let Some(browser) = browser() else { return };
    let mut server = Server::start().await;
    let created: Value =
        server.http.post(server.url("/api/labs")).send().await.unwrap().json().await.unwrap();
    let lab = created["id"].as_str().unwrap().to_owned();
    server.put(&lab, "policy", FAST_POLICY).await;
    server.put(&lab, "downstream", FAST_DOWNSTREAM).await;
    server.burst(&lab, 30).await;
    wait_snapshot(&server, &lab, |s| s["counters"]["delivered"] == 30).await;
    server.stop().await;
    let store = rusqlite::Connection::open(&server.db).unwrap();
    store.execute("UPDATE labs SET origin_unix_ms = origin_unix_ms - 360000 WHERE id = ?1", [&lab]).unwrap();
    drop(store);
    let server = Server::start_at(support::any_port(), server.db.clone()).await;
    server.burst(&lab, 10).await;
    let snapshot = wait_snapshot(&server, &lab, |s| s["counters"]["delivered"] == 40).await;
    let coarse =
        snapshot["load"]["bins"].as_array().unwrap().iter().filter(|b| b["width_ms"] == 10_000).count();
    assert!(coarse > 0, "the first burst's bins are summed: {}", snapshot["load"]);
    let requests = snapshot["counters"]["requests"].as_u64().unwrap();

    let page = browser.page().await;
    page.navigate(&server.url(&format!("/labs/{lab}"))).await;
    wait_live(&page).await;
    let summary = format!("document.querySelector('[data-load-plot]').dataset.requests === '{requests}'");
    wait_for(&page, "the chart's total to be every request", &summary).await;
    // Fitted to six minutes, a bar is narrower than 10 s: each summed bin is spread over
    // several bars, and the bars still add up to every request.
    let bars = page
        .eval("[...document.querySelectorAll('[data-load-bar]')].map(b => [Number(b.dataset.t), Number(b.dataset.requests)])")
        .await
        .unwrap();
    let bars = bars.as_array().unwrap();
    let total: f64 = bars.iter().map(|b| b[1].as_f64().unwrap()).sum();
    assert!((total - requests as f64).abs() < 0.01, "bars add up to {total}, not {requests}: {bars:?}");
    let old = bars.iter().filter(|b| b[0].as_f64().unwrap() < 60_000.0).count();
    assert!(old > coarse, "{coarse} summed bins are spread over more bars than that: {old} ({bars:?})");
    assert_no_console_errors(&page);
}

/// The lab's snapshot once `done` holds for it (or the last one read when patience ran out).
pub(super) async fn wait_snapshot(server: &Server, lab: &str, done: impl Fn(&Value) -> bool) -> Value {
    let start = std::time::Instant::now();
    loop {
        let snapshot = server.snapshot(lab).await;
        if done(&snapshot) || start.elapsed() > PATIENCE {
            return snapshot;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
