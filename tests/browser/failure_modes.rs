//! Failure modes and protections on the page: an outage window with its countdown, the circuit
//! breaker's band, the flags of the changes, the load chart, the presets, and the top of the
//! page fitting a laptop screen. Everything is read from what the page shows (its DOM and the
//! data attributes on the drawn elements).

use serde_json::{Value, json};

use super::{
    Server, assert_no_console_errors, browser, cdp, choose_mode, open_new_lab, wait_counter, wait_for,
};

/// Fills the policy form's named fields (checkboxes take booleans) as typing would, and applies it.
async fn apply_policy_form(page: &cdp::Page, fields: Value) {
    // As a person would, start from the lab's policy shown in the form (FAST_POLICY's timeout).
    wait_for(
        page,
        "the policy form to show the lab's policy",
        "document.getElementById('policy-form').elements.namedItem('timeout_ms').value === '1500'",
    )
    .await;
    let script = format!(
        "(() => {{ const f = document.getElementById('policy-form');
            f.closest('details').open = true;
            for (const [name, value] of Object.entries({fields})) {{
                const input = f.elements.namedItem(name);
                if (input.type === 'checkbox') input.checked = value; else input.value = String(value);
                input.dispatchEvent(new Event('input', {{ bubbles: true }}));
            }}
            return true; }})()"
    );
    page.eval(&script).await.unwrap();
    page.click("#policy-form button[type=\"submit\"]").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outage_window_opens_the_breaker_and_the_load_chart_shows_the_burst() {
    let Some(browser) = browser() else { return };
    let server = Server::start().await;
    let page = browser.page().await;
    page.set_viewport(1280, 800).await;
    let lab = open_new_lab(&page, &server).await;

    // The breaker, from the policy form: open after 3 failures in a row, for 400 ms.
    apply_policy_form(
        &page,
        json!({"breaker_on": true, "failure_threshold": 3, "open_ms": 400, "half_open_probes": 1}),
    )
    .await;
    wait_for(
        &page,
        "the breaker to be on",
        "document.querySelector('[data-breaker]').dataset.breakerOn === 'true'",
    )
    .await;
    let policy = server.snapshot(&lab).await["policy"].clone();
    assert_eq!(policy["breaker"], json!({"failure_threshold": 3, "open_ms": 400, "half_open_probes": 1}));
    assert_eq!(policy["base_ms"], 20, "the rest of the policy is kept: {policy}");

    // An outage window: down for 5 s, then back to healthy by itself, counted down on the page;
    // long enough that the burst sent next meets it however busy the machine.
    page.eval(
        "(s => { s.value = '5000'; s.dispatchEvent(new Event('change', { bubbles: true })); })(document.querySelector('[data-outage-for]'))",
    )
    .await
    .unwrap();
    choose_mode(&page, "down").await;
    let countdown = wait_for(
        &page,
        "the countdown",
        "(r => !r.hidden && r.textContent.includes('back to healthy in') && r.textContent)(document.querySelector('[data-revert]'))",
    )
    .await;
    eprintln!("the page counts down: {countdown}");
    page.click("[data-send=\"8\"]").await;

    // The breaker opens: an open segment on its band, and attempts that were never sent.
    wait_for(
        &page,
        "an open breaker segment",
        "document.querySelector('[data-breaker-segment][data-state=\"open\"]')",
    )
    .await;
    wait_for(
        &page,
        "a short-circuited attempt",
        "document.querySelector('#timeline .tl-bar[data-outcome=\"short_circuited\"]')",
    )
    .await;

    // The load chart has bars, with the 503s of the outage among them.
    let load = wait_for(
        &page,
        "load bars with 503s",
        "(bars => bars.length && bars.some(b => Number(b.dataset.unavailable) > 0) && bars.map(b => [Number(b.dataset.t), Number(b.dataset.requests), Number(b.dataset.unavailable)]))([...document.querySelectorAll('[data-load-bar]')])",
    )
    .await;
    let requests: u64 = load.as_array().unwrap().iter().map(|b| b[1].as_u64().unwrap()).sum();
    assert!(requests > 0, "the bars count requests: {load}");

    // The window ends by itself: healthy is pressed again and a flag marks the revert.
    let healthy =
        "document.querySelector('.mode[data-mode=\"healthy\"]').getAttribute('aria-pressed') === 'true'";
    wait_for(&page, "the downstream back to healthy", healthy).await;
    wait_for(
        &page,
        "a flag for the scheduled revert",
        "document.querySelector('.tl-mark[data-kind=\"scheduled\"]')",
    )
    .await;
    wait_for(&page, "the countdown to go", "document.querySelector('[data-revert]').hidden").await;
    // A person pointing at the flag reads what changed.
    page.hover(".tl-mark[data-kind=\"scheduled\"]").await;
    let tip = wait_for(
        &page,
        "the flag's label",
        "(t => !t.hidden && t.textContent)(document.querySelector('#timeline .tl-mini-tip'))",
    )
    .await;
    assert!(tip.as_str().unwrap().contains("scheduled revert"), "flag tooltip: {tip}");
    page.screenshot_viewport("breaker-and-load-1280x800").await;
    page.screenshot("breaker-and-load-1280").await;

    // What the page drew agrees with the server's record.
    let snapshot = server.snapshot(&lab).await;
    let opened =
        snapshot["breaker"]["changes"].as_array().unwrap().iter().filter(|c| c["state"] == "open").count();
    let drawn = page
        .eval("document.querySelectorAll('[data-breaker-segment][data-state=\"open\"]').length")
        .await
        .unwrap();
    assert!(
        drawn.as_u64().unwrap() as usize <= opened && opened > 0,
        "{drawn} open segments, {opened} openings"
    );
    assert_no_console_errors(&page);
}

/// Where an element sits in the viewport: [top, bottom].
async fn rect(page: &cdp::Page, selector: &str) -> (f64, f64) {
    let r = page
        .eval(&format!(
            "(r => [r.top, r.bottom])(document.querySelector({}).getBoundingClientRect())",
            json!(selector)
        ))
        .await
        .unwrap();
    (r[0].as_f64().unwrap(), r[1].as_f64().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modes_traffic_counters_and_the_timeline_top_fit_a_1280_by_800_screen() {
    let Some(browser) = browser() else { return };
    let server = Server::start().await;
    let page = browser.page().await;
    page.set_viewport(1280, 800).await;
    open_new_lab(&page, &server).await;
    page.click("[data-send=\"8\"]").await;
    wait_counter(&page, "delivered", 8).await;
    page.eval("window.scrollTo(0, 0)").await.unwrap();

    let height = page.eval("window.innerHeight").await.unwrap().as_f64().unwrap();
    let mut seen = Vec::new();
    for mode in ["healthy", "flaky", "slow", "down", "throttled", "overloaded"] {
        seen.push((format!("mode {mode}"), rect(&page, &format!(".mode[data-mode=\"{mode}\"]")).await));
    }
    seen.push(("burst of 8".into(), rect(&page, "[data-send=\"8\"]").await));
    for counter in
        ["in_flight", "backing_off", "delivered", "dead_letter", "requests", "applied", "applied_twice"]
    {
        seen.push((
            format!("counter {counter}"),
            rect(&page, &format!("[data-counter=\"{counter}\"]")).await,
        ));
    }
    // The top of the timeline: its breaker band, its time axis and the first row.
    seen.push(("breaker band".into(), rect(&page, "#timeline [data-breaker]").await));
    seen.push(("time axis".into(), rect(&page, "#timeline .tl-ticks").await));
    seen.push(("first row".into(), rect(&page, "#timeline .tl-row").await));
    let outside: Vec<_> = seen.iter().filter(|(_, (top, bottom))| *top < 0.0 || *bottom > height).collect();
    assert!(outside.is_empty(), "not in the {height} px viewport without scrolling: {outside:?}");
    page.screenshot_viewport("top-of-page-1280x800").await;
    assert_no_console_errors(&page);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metastable_preset_sets_up_the_lab_and_a_breaker_ends_it() {
    let Some(browser) = browser() else { return };
    let server = Server::start().await;
    let page = browser.page().await;
    page.set_viewport(1280, 800).await;
    let lab = open_new_lab(&page, &server).await;

    page.click("[data-presets-drawer] > summary").await;
    page.click("[data-preset=\"metastable\"]").await;
    let said = wait_for(
        &page,
        "what to look for",
        "(l => !l.hidden && l.dataset.preset === 'metastable' && l.textContent)(document.querySelector('[data-look]'))",
    )
    .await;
    assert!(said.as_str().unwrap().contains("wasted"), "{said}");

    // The preset went through the real API: an overloaded endpoint, down for a short while.
    // That while may be over by now on a busy machine: then it went back by itself.
    let snapshot = server.snapshot(&lab).await;
    let downstream = &snapshot["downstream"];
    let markers = snapshot["markers"].as_array().unwrap();
    assert!(
        markers
            .iter()
            .any(|m| m["kind"] == "settings" && m["label"].as_str().unwrap().starts_with("down for")),
        "the outage was set: {markers:?}"
    );
    if downstream["mode"] == "down" {
        assert_eq!(downstream["revert"]["to"]["mode"], "overloaded", "{downstream}");
    } else {
        assert_eq!(downstream["mode"], "overloaded", "{downstream}");
        assert!(markers.iter().any(|m| m["kind"] == "scheduled"), "it went back by itself: {markers:?}");
    }
    assert_eq!(downstream["capacity"], 4);
    assert_eq!(downstream["queue"], 24);
    let policy = &snapshot["policy"];
    assert_eq!(
        (policy["jitter"].clone(), policy["max_attempts"].clone()),
        (json!("none"), json!(12)),
        "{policy}"
    );
    assert_eq!(policy["breaker"], Value::Null);
    assert_eq!(snapshot["messages"].as_array().unwrap().len(), 80);

    page.click("[data-preset-step=\"metastable/1\"]").await;
    wait_for(
        &page,
        "the breaker to be on",
        "document.querySelector('[data-breaker]').dataset.breakerOn === 'true'",
    )
    .await;
    let policy = server.snapshot(&lab).await["policy"].clone();
    assert!(policy["breaker"].is_object(), "{policy}");
    assert_eq!(policy["max_attempts"], 12, "the rest of the preset's policy stays: {policy}");
    // Stop the load, so the other tests on these two cores keep their pace.
    page.click("[data-reset]").await;
    wait_for(&page, "an empty lab", "document.querySelector('[data-filter-count]').dataset.total === '0'")
        .await;
    assert_no_console_errors(&page);
}
