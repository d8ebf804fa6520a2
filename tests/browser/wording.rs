//! Small things the page said that were not so (issue 27, item 8): the steady traffic form
//! shows the rate that runs however it was started, and many clients without a breaker have
//! their breakers called off, not "0 of 10 open".

use super::{Server, assert_no_console_errors, browser, open_new_lab, wait_for};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_form_shows_the_running_rate_and_no_breaker_reads_off() {
    let Some(browser) = browser() else { return };
    let server = Server::start().await;
    let page = browser.page().await;
    page.set_viewport(1280, 900).await;
    let lab = open_new_lab(&page, &server).await;
    // A breaker once, then none: the band keeps its history and says "off".
    server
        .put(
            &lab,
            "policy",
            r#"{"clients": 10, "breaker": {"failure_threshold": 3, "open_ms": 500, "half_open_probes": 1}}"#,
        )
        .await;
    server.put(&lab, "policy", r#"{"breaker": null}"#).await;
    // Traffic started through the API, as a preset starts it, at a rate the form did not hold.
    server.put(&lab, "traffic", r#"{"rate_per_s": 7, "arrivals": "even"}"#).await;
    let shown = wait_for(
        &page,
        "the form to show the running rate",
        "(f => f.dataset.running === 'true' && [f.elements.rate_per_s.value, f.elements.arrivals.value])(document.getElementById('traffic-form'))",
    )
    .await;
    assert_eq!(shown, serde_json::json!(["7", "even"]));
    let now = page.eval("document.querySelector('[data-breaker-now]').textContent").await.unwrap();
    assert_eq!(now, "off", "no breaker in the policy");
    server.put(&lab, "traffic", r#"{"rate_per_s": 0}"#).await;
    assert_no_console_errors(&page);
}
