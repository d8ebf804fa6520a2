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

/// Each key item as `[key, shown, drawn]`: whether the legend shows it, and whether the
/// timeline draws a mark it stands for.
const KEY: &str = "[...document.querySelectorAll('#timeline-panel [data-legend] [data-key]')]
    .map(li => [li.dataset.key, li.checkVisibility(), !!document.getElementById('timeline').querySelector(li.dataset.key)])";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_legend_lists_only_what_is_drawn_and_the_full_key_is_one_click_away() {
    let Some(browser) = browser() else { return };
    let server = Server::start().await;
    let page = browser.page().await;
    page.set_viewport(1280, 900).await;
    open_new_lab(&page, &server).await;
    // Nothing drawn: no item, and a line that says why.
    let key = page.eval(KEY).await.unwrap();
    let key = key.as_array().unwrap();
    assert!(key.len() >= 25, "every item carries its key: {}", key.len());
    assert!(key.iter().all(|k| k[1] == false), "nothing is drawn yet: {key:?}");
    let none = page.eval("document.querySelector('[data-legend-none]').checkVisibility()").await.unwrap();
    assert_eq!(none, true);

    super::dead_letters_then_healthy(&page, 8).await;
    let key = wait_for(
        &page,
        "the legend to show exactly what is drawn, the 503s among it",
        &format!("(k => k.every(i => i[1] === i[2]) && k.find(i => i[0] === '.tl-bar.o-http_error')[1] && k)({KEY})"),
    )
    .await;
    // It stays so: the legend follows what is drawn, read twice a second. A mark drawn late
    // (the load chart's sums come on their own timer) may be a read behind: at most a second.
    tokio::time::sleep(std::time::Duration::from_millis(700)).await;
    let started = std::time::Instant::now();
    loop {
        let key = page.eval(KEY).await.unwrap();
        let behind: Vec<&serde_json::Value> =
            key.as_array().unwrap().iter().filter(|item| item[1] != item[2]).collect();
        if behind.is_empty() {
            break;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_millis(1_000),
            "an item shows exactly when its mark is drawn, within a second: {behind:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let shown =
        |key: &serde_json::Value, k: &str| key.as_array().unwrap().iter().any(|i| i[0] == k && i[1] == true);
    assert!(!shown(&key, ".tl-bar.o-timeout") && !shown(&key, ".tl-bar.o-interrupted"), "{key}");
    assert!(
        shown(&key, ".tl-bar.o-http_error")
            && shown(&key, ".lb-up [data-kind=\"unavailable\"]:not([hidden])"),
        "{key}"
    );

    // The full key, one click away.
    page.click("[data-legend-full]").await;
    let all = wait_for(&page, "the full key", &format!("(k => k.every(i => i[1]) && k.length)({KEY})")).await;
    assert!(all.as_u64().unwrap() >= 25);
    assert_no_console_errors(&page);
}

/// Enabled controls in view below the top bar that something else covers at their centre. A
/// timeline flag under the next flag is not counted: two settings set more than 50 ms apart (the
/// lab's two PUTs, on a loaded machine) are two flags a pixel or two apart, which is the
/// timeline's own drawing, not something laid over the page.
const COVERED: &str = "(() => { const top = document.querySelector('.topbar').getBoundingClientRect().bottom;
    return [...document.querySelectorAll('a[href], button, input, select, summary')]
      .filter(e => !e.disabled && e.checkVisibility())
      .filter(e => { const r = e.getBoundingClientRect(); return r.height > 0 && r.top >= top && r.bottom <= innerHeight; })
      .filter(e => { const r = e.getBoundingClientRect(); const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
        const flags = e.classList.contains('tl-mark') && hit?.closest('.tl-mark');
        return !(hit && (hit === e || e.contains(hit) || flags)); })
      .map(e => e.tagName + ': ' + e.textContent.trim().slice(0, 30)); })()";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_phone_the_status_line_covers_no_control() {
    let Some(browser) = browser() else { return };
    let server = Server::start().await;
    let page = browser.page().await;
    page.set_viewport(375, 812).await;
    open_new_lab(&page, &server).await;
    page.click("[data-send=\"1\"]").await;
    wait_for(&page, "the status line", "document.getElementById('status').textContent.startsWith('Sent')")
        .await;
    // The whole page, 101 px at a time, while the line shows (it fades after 6 s: it is said
    // again at each place).
    let height = page.eval("document.documentElement.scrollHeight").await.unwrap().as_u64().unwrap();
    for place in (0..height).step_by(101) {
        page.eval(&format!("window.scrollTo(0, {place})")).await.unwrap();
        let covered = page
            .eval(&format!(
                "(document.getElementById('status').textContent = 'Sent 1 message (#1).', {COVERED})"
            ))
            .await
            .unwrap();
        assert_eq!(covered, serde_json::json!([]), "scrolled to {place} px: covered controls");
    }
    let widths = page.eval("document.documentElement.scrollWidth").await.unwrap();
    assert!(widths.as_u64() <= Some(375), "no sideways scrolling: {widths}");
    page.screenshot_viewport("status-line-phone-375").await;
    assert_no_console_errors(&page);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_capacity_line_is_named_clear_of_the_bars() {
    let Some(browser) = browser() else { return };
    let server = Server::start().await;
    let page = browser.page().await;
    page.set_viewport(1280, 900).await;
    let lab = open_new_lab(&page, &server).await;
    server
        .put(
            &lab,
            "downstream",
            r#"{"mode": "overloaded", "capacity": 2, "queue": 2, "latency_ms": [40, 60]}"#,
        )
        .await;
    // A retry storm: every bar of the run towers over the line, to its last at the right edge.
    server
        .put(
            &lab,
            "policy",
            r#"{"jitter": "none", "base_ms": 50, "cap_ms": 50, "multiplier": 1, "max_attempts": 10, "honor_retry_after": false}"#,
        )
        .await;
    server.burst(&lab, 30).await;
    wait_for(&page, "the storm to end", "document.querySelector('[data-counter=\"in_flight\"]').textContent === '0' && document.querySelector('[data-counter=\"backing_off\"]').textContent === '0' && document.querySelectorAll('[data-load-bar]').length > 3").await;
    // The words of the line overlap no bar, and say what it is.
    let clear = wait_for(
        &page,
        "the line's words",
        "(t => { if (!t.checkVisibility()) return false; const r = t.getBoundingClientRect();
            const hit = [...document.querySelectorAll('[data-load-bar]')].map(b => b.getBoundingClientRect())
              .filter(b => b.width > 0 && b.left < r.right && b.right > r.left && b.top < r.bottom && b.bottom > r.top);
            return [hit.length, t.textContent]; })(document.querySelector('[data-load-limit-text]'))",
    )
    .await;
    assert_eq!(clear[0], 0, "{clear}");
    assert!(clear[1].as_str().unwrap().starts_with("capacity:"), "{clear}");
    assert_no_console_errors(&page);
}
