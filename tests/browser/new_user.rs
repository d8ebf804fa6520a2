//! What a new user tripped on, each clicked or typed as that person did: the keyboard after an
//! action button, a preset's sentence said once, the replay badge's contrast, requests from an
//! outside client on the load chart (at the URL the page gives), "fit" and "latest", the
//! breaker's band between its recorded changes, outcome marks and flags that never pile up, and
//! a dead letter whose write was applied.

use std::time::Duration;

use serde_json::{Value, json};

use super::{
    Server, assert_no_console_errors, browser, choose_mode, open_new_lab, timeline, wait_counter, wait_for,
};

/// Messages the page shows in its timeline count.
const TOTAL: &str = "Number(document.querySelector('[data-filter-count]').dataset.total)";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn action_buttons_keep_the_focus_and_a_preset_says_what_to_look_for_once() {
    let Some(browser) = browser() else { return };
    let server = Server::start().await;
    let page = browser.page().await;
    page.set_viewport(1280, 900).await;
    open_new_lab(&page, &server).await;

    // "send 1", pressed with Enter, then Enter and Space again: three messages, and the
    // button keeps the focus throughout.
    page.eval("document.querySelector('[data-send=\"1\"]').focus()").await.unwrap();
    for (key, total) in [("Enter", 1), ("Enter", 2), (" ", 3)] {
        page.press(key).await;
        wait_for(&page, &format!("{total} messages"), &format!("{TOTAL} === {total}")).await;
        wait_for(
            &page,
            "send 1 to be free",
            "!document.querySelector('[data-send=\"1\"]').hasAttribute('aria-busy')",
        )
        .await;
        let focused =
            page.eval("document.activeElement.dataset.send ?? document.activeElement.tagName").await.unwrap();
        assert_eq!(focused, "1", "after {key}, the focus is on send 1");
    }
    // A mode button too.
    page.eval("document.querySelector('.mode[data-mode=\"down\"]').focus()").await.unwrap();
    page.press("Enter").await;
    wait_for(
        &page,
        "down pressed",
        "document.querySelector('.mode[data-mode=\"down\"]').getAttribute('aria-pressed') === 'true'",
    )
    .await;
    wait_for(
        &page,
        "down to be free",
        "!document.querySelector('.mode[data-mode=\"down\"]').hasAttribute('aria-busy')",
    )
    .await;
    let focused =
        page.eval("document.activeElement.dataset.mode ?? document.activeElement.tagName").await.unwrap();
    assert_eq!(focused, "down");

    // The replay badges are readable: at least 4.5:1 against the button under them (AA).
    page.click("[data-send=\"1\"]").await;
    wait_counter(&page, "dead_letter", 1).await;
    let contrasts = page.eval(CONTRASTS).await.unwrap();
    for c in contrasts.as_array().unwrap() {
        assert!(c.as_f64().unwrap() >= 4.5, "a replay badge's contrast is below AA: {contrasts}");
    }

    // A preset: what to look for is said once, in the box, and the focus goes there.
    page.click("[data-presets-drawer] > summary").await;
    wait_for(&page, "the presets", "document.querySelector('[data-preset=\"storm\"]')").await;
    page.eval("document.querySelector('[data-preset=\"storm\"]').focus()").await.unwrap();
    page.press("Enter").await;
    let look = wait_for(
        &page,
        "what to look for",
        "(l => !l.hidden && l.dataset.preset === 'storm' && l.querySelector('[data-look-text]').textContent)(document.querySelector('[data-look]'))",
    )
    .await;
    let look = look.as_str().unwrap().to_owned();
    let said = page.eval("document.getElementById('status').textContent").await.unwrap();
    assert!(!said.as_str().unwrap().contains(&look), "the sentence is said twice: {said}");
    let body = page.eval("document.body.innerText").await.unwrap();
    assert_eq!(body.as_str().unwrap().matches(&look[..60]).count(), 1, "the sentence shows once");
    let focused = page.eval("document.activeElement.hasAttribute('data-look')").await.unwrap();
    assert_eq!(focused, true, "the focus moved to what to look for, with the follow-ups after it");
    page.click("[data-reset]").await;
    assert_no_console_errors(&page);
}

/// Each replay badge's contrast ratio (WCAG 2) against what lies under it.
const CONTRASTS: &str = "(() => {
    const rgb = (c) => (c.match(/[\\d.]+/g) || []).map(Number);
    const lum = ([r, g, b]) => {
        const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
        return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
    };
    const over = (top, under) => {
        const a = top[3] ?? 1;
        return [0, 1, 2].map((i) => top[i] * a + under[i] * (1 - a));
    };
    const solid = (el) => {
        const stack = [];
        for (let e = el; e; e = e.parentElement) stack.push(rgb(getComputedStyle(e).backgroundColor));
        let colour = [255, 255, 255];
        for (const c of stack.reverse()) if (c.length) colour = over(c, colour);
        return colour;
    };
    return [...document.querySelectorAll('[data-replay-count]')].map((badge) => {
        const fg = over(rgb(getComputedStyle(badge).color), solid(badge));
        const [a, b] = [lum(fg), lum(solid(badge))].sort((x, y) => y - x);
        return (a + 0.05) / (b + 0.05);
    });
})()";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outside_requests_show_on_the_load_chart_and_fit_and_latest_take_in_the_right_time() {
    let Some(browser) = browser() else { return };
    let server = Server::start().await;
    let page = browser.page().await;
    page.set_viewport(1280, 900).await;
    let lab = open_new_lab(&page, &server).await;

    // The page gives the endpoint's URL; an outside client calls it.
    let url = page.eval("document.querySelector('[data-endpoint-url]').textContent").await.unwrap();
    assert_eq!(url, json!(server.url(&format!("/labs/{lab}/downstream"))));
    assert!(page.eval("!!document.querySelector('[data-copy-endpoint]')").await.unwrap() == true);
    for i in 0..5 {
        let sent = server
            .http
            .post(url.as_str().unwrap())
            .header("Idempotency-Key", format!("outside-{i}"))
            .json(&json!({"n": i}))
            .send()
            .await
            .unwrap();
        assert_eq!(sent.status(), 200);
    }
    // No messages of the lab's own, yet the load chart shows the five.
    let plot = wait_for(
        &page,
        "the outside requests on the load chart",
        "(p => p.offsetParent !== null && p.dataset.requests === '5' && p.dataset.requests)(document.querySelector('[data-load-plot]'))",
    )
    .await;
    assert_eq!(plot, "5");
    // Each of them is a row of its own, named by its caller (here its User-Agent or address).
    wait_for(&page, "the five outside rows", &format!("{TOTAL} === 5")).await;
    let outside =
        page.eval("document.querySelectorAll('#timeline .tl-row.is-outside').length").await.unwrap();
    assert_eq!(outside, 5);

    // A marker, then 1.4 s later the first attempt: "fit" starts before the marker.
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.put(&lab, "downstream", r#"{"mode": "down"}"#).await;
    tokio::time::sleep(Duration::from_millis(1400)).await;
    server.burst(&lab, 30).await;
    wait_counter(&page, "dead_letter", 30).await;
    let snapshot = server.snapshot(&lab).await;
    let down_at = snapshot["markers"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m["kind"] == "settings")
        .unwrap()["at_ms"]
        .as_f64()
        .unwrap();
    let first_bin = snapshot["load"]["bins"][0]["t_ms"].as_f64().unwrap();
    let fit = timeline(&page).await;
    let t0 = fit["t0"].as_f64().unwrap();
    assert!(
        t0 <= down_at && t0 <= first_bin,
        "fit starts at {t0}, the marker is at {down_at}, the first bin at {first_bin}"
    );

    // Then a later burst: "latest" zooms to it and scrolls its first row to the top.
    server.put(&lab, "downstream", r#"{"mode": "healthy"}"#).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    server.burst(&lab, 2).await;
    wait_counter(&page, "delivered", 2).await;
    let created = server.snapshot(&lab).await["messages"][30]["created_ms"].as_f64().unwrap();
    // Below the rows in view, at first.
    assert_eq!(page.eval(ROW_31_IN_VIEW).await.unwrap(), false);
    page.click("[data-zoom=\"latest\"]").await;
    let latest = timeline(&page).await;
    let (t0, span) = (latest["t0"].as_f64().unwrap(), latest["k"].as_f64().unwrap());
    assert_eq!(latest["zoomed"], true, "{latest}");
    assert!(
        t0 <= created && t0 >= created - 2500.0,
        "latest starts at {t0}, the burst at {created}: {latest}"
    );
    assert!(span > fit["k"].as_f64().unwrap(), "closer than fit: {latest} vs {fit}");
    let scrolled = page.eval("(s => [s.scrollTop, s.clientHeight, s.scrollHeight])(document.querySelector('#timeline .tl-scroll'))").await.unwrap();
    assert_eq!(
        page.eval(ROW_31_IN_VIEW).await.unwrap(),
        true,
        "the newest burst's first row is in view: {scrolled}"
    );
    assert_no_console_errors(&page);
}

/// Whether message #31's row lies within the timeline's visible rows.
const ROW_31_IN_VIEW: &str = "(() => {
    const s = document.querySelector('#timeline .tl-scroll');
    const axis = document.querySelector('#timeline .tl-axis').offsetHeight;
    const top = 30 * 32 + axis;
    return top >= s.scrollTop + axis && top + 32 <= s.scrollTop + s.clientHeight;
})()";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_band_marks_and_flags_show_the_run_as_it_is() {
    let Some(browser) = browser() else { return };
    let server = Server::start().await;
    let page = browser.page().await;
    page.set_viewport(1280, 900).await;
    let lab = open_new_lab(&page, &server).await;

    // A breaker that opens at the first failure for 300 ms, and nothing after it: the server
    // records no change until the next attempt, but from 300 ms on it would let a probe in.
    let policy =
        r#"{"max_attempts": 1, "breaker": {"failure_threshold": 1, "open_ms": 300, "half_open_probes": 1}}"#;
    server.put(&lab, "policy", policy).await;
    choose_mode(&page, "down").await;
    page.click("[data-send=\"1\"]").await;
    wait_counter(&page, "dead_letter", 1).await;
    let waiting = wait_for(
        &page,
        "the band to go half-open",
        "(b => b.dataset.breakerState === 'half_open' && [...b.querySelectorAll('[data-breaker-segment]')].map(s => [s.dataset.state, Number(s.dataset.from), s.dataset.waiting ?? '']))(document.querySelector('[data-breaker]'))",
    )
    .await;
    let opened =
        server.snapshot(&lab).await["breaker"]["changes"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(opened["state"], "open", "the server still says open: {opened}");
    let at = opened["at_ms"].as_f64().unwrap();
    let segments = waiting.as_array().unwrap();
    let half = segments.last().unwrap();
    assert_eq!((half[0].clone(), half[2].clone()), (json!("half_open"), json!("true")), "{waiting}");
    assert!(
        (half[1].as_f64().unwrap() - (at + 300.0)).abs() < 1.0,
        "half-open from open + open_ms: {waiting}"
    );
    assert_eq!(segments[segments.len() - 2][0], "open");

    // Eight attempts 10 ms apart: at "fit" the marks would overlap, so all but the last hide.
    let policy = r#"{"max_attempts": 8, "jitter": "none", "base_ms": 10, "multiplier": 1, "cap_ms": 10, "breaker": null}"#;
    // Three settings changes within a few ms: one flag, with a count.
    let (a, b, c) = tokio::join!(
        server.put(&lab, "policy", policy),
        server.put(&lab, "downstream", r#"{"retry_after_s": 0}"#),
        server.put(&lab, "downstream", r#"{"mode": "down"}"#),
    );
    let _ = (a, b, c);
    page.click("[data-send=\"1\"]").await;
    wait_counter(&page, "dead_letter", 2).await;
    page.click("[data-zoom=\"fit\"]").await;
    timeline(&page).await;
    let overlaps = page.eval(OVERLAPS).await.unwrap();
    assert_eq!(overlaps["bars"], 8, "{overlaps}");
    assert_eq!(overlaps["overlapping"], json!([]), "outcome marks run into each other: {overlaps}");
    assert!(overlaps["shown"].as_u64().unwrap() >= 1, "the last one shows: {overlaps}");
    let flags = page
        .eval("[...document.querySelectorAll('.tl-mark')].map(f => Number(f.dataset.count))")
        .await
        .unwrap();
    let markers = server.snapshot(&lab).await["markers"].as_array().unwrap().len();
    let counted: u64 = flags.as_array().unwrap().iter().map(|n| n.as_u64().unwrap()).sum();
    assert_eq!(counted as usize, markers, "every marker is in a flag: {flags}");
    assert!(
        flags.as_array().unwrap().iter().any(|n| n.as_u64() >= Some(2)),
        "close markers share a flag: {flags}"
    );
    assert_no_console_errors(&page);
}

/// The outcome marks of message #2's round: how many bars, how many marks show, and the pairs
/// whose marks run into each other (a shown mark wider than the room before the next bar).
const OVERLAPS: &str = "(() => {
    const bars = [...document.querySelectorAll('#timeline .tl-row[data-message-id=\"2\"] .tl-bar')];
    const ctx = document.createElement('canvas').getContext('2d');
    const marks = bars.map((b) => {
        const style = getComputedStyle(b, '::before');
        ctx.font = `${style.fontWeight} ${style.fontSize} ${style.fontFamily}`;
        const text = style.content.replace(/^\"|\"$/g, '') === 'attr(data-status)' ? b.dataset.status : style.content.replace(/^\"|\"$/g, '');
        const size = parseFloat(style.fontSize);
        return { left: b.getBoundingClientRect().left, width: size > 0 ? ctx.measureText(text).width : 0 };
    });
    const overlapping = [];
    for (let i = 0; i + 1 < marks.length; i++) {
        if (marks[i].width > 0 && marks[i].left + marks[i].width > marks[i + 1].left) overlapping.push(i);
    }
    return { bars: bars.length, shown: marks.filter((m) => m.width > 0).length, overlapping };
})()";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_whose_write_landed_is_marked_and_the_capacity_line_is_per_bin() {
    let Some(browser) = browser() else { return };
    let server = Server::start().await;
    let page = browser.page().await;
    page.set_viewport(1280, 900).await;
    let lab = open_new_lab(&page, &server).await;
    // The first attempt times out while its write is in work; the second finds it still in
    // work (409); the attempts run out, and the write lands after.
    server.put(&lab, "downstream", r#"{"latency_ms": [300, 300]}"#).await;
    server.put(&lab, "policy", r#"{"timeout_ms": 50, "max_attempts": 2}"#).await;
    page.click("[data-send=\"1\"]").await;
    let row = wait_for(
        &page,
        "the applied mark",
        "(r => r && r.dataset.applied === 'true' && r.textContent)(document.querySelector('#dead-body [data-dead-letter=\"1\"]'))",
    )
    .await;
    assert!(row.as_str().unwrap().contains("A replay is answered from the stored result"), "{row}");
    assert_eq!(server.snapshot(&lab).await["dead_letters"][0]["applied"], true);

    // The capacity line in the chart's own units: 4 workers of 150-250 ms finish 2 per 100 ms.
    server
        .put(
            &lab,
            "downstream",
            r#"{"mode": "overloaded", "capacity": 4, "queue": 4, "latency_ms": [150, 250]}"#,
        )
        .await;
    let limit: Value =
        wait_for(&page, "the line", "document.querySelector('[data-load-plot]').dataset.limit").await;
    assert_eq!(limit, "2");
    let text = page.eval("document.querySelector('[data-load-limit-text]').textContent").await.unwrap();
    assert!(text.as_str().unwrap().starts_with("capacity: finishes about 2 per 100 ms (4 at once"), "{text}");
    assert_no_console_errors(&page);
}

/// The mode cards say what the endpoint does in words that are true and plain: one value for a
/// latency that does not vary, and what a `Retry-After` of 0 means.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mode_cards_read_a_fixed_latency_as_one_value_and_a_zero_retry_after_as_at_once() {
    let Some(browser) = browser() else { return };
    let server = Server::start().await;
    let page = browser.page().await;
    let lab = open_new_lab(&page, &server).await;
    server.put(&lab, "downstream", r#"{"latency_ms": [200, 200], "retry_after_s": 0}"#).await;
    let said =
        |mode: &str| format!("document.querySelector('[data-mode=\"{mode}\"] .mode-what').textContent");
    let healthy = wait_for(
        &page,
        "the healthy card to take the latency",
        &format!("(t => t.includes('200 ms') && t)({})", said("healthy")),
    )
    .await;
    assert_eq!(healthy, "answers 200 after 200 ms", "no 200–200 ms");
    let down = page.eval(&said("down")).await.unwrap();
    assert_eq!(down, "503 with Retry-After 0 (retry at once) every time, applies nothing");
    super::assert_no_console_errors(&page);
}

/// A live figure from a handful of messages would say "0.0×" or "100 %" on the strength of one
/// or two requests: below 20 in its window it shows "–" and says why on hover, and from 20 on
/// it shows the figure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_figures_from_a_handful_of_messages_show_a_dash_and_say_why() {
    let Some(browser) = browser() else { return };
    let server = Server::start().await;
    let page = browser.page().await;
    let lab = open_new_lab(&page, &server).await;
    let figure = "(el => ({ text: el.textContent, title: el.title }))(document.querySelector('[data-live=\"amplification\"]'))";
    server.burst(&lab, 3).await;
    wait_counter(&page, "delivered", 3).await;
    // The window counts whole bins only: the burst counts once its bin has closed.
    let few = wait_for(
        &page,
        "the burst in the window",
        &format!("(f => f.title.startsWith('3 ') && f)({figure})"),
    )
    .await;
    assert_eq!(few["text"], "–", "{few}");
    let why = few["title"].as_str().unwrap();
    assert!(why.starts_with("3 new messages in the last 10 s") && why.contains("needs 20"), "{few}");
    server.burst(&lab, 30).await;
    // A healthy endpoint, no retries: one request per message, once the bins that hold the
    // burst's requests have closed too (a message is offered in the bin before its request).
    let enough =
        wait_for(&page, "a figure from 33 messages", &format!("(f => f.text === '1.0×' && f)({figure})"))
            .await;
    assert_eq!(enough["title"], "", "{enough}");
    assert_no_console_errors(&page);
}
