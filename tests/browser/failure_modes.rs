//! Failure modes and protections on the page: an outage window with its countdown, the circuit
//! breaker's band, the flags of the changes, the load chart, the presets, and the top of the
//! page fitting a laptop screen. Everything is read from what the page shows (its DOM and the
//! data attributes on the drawn elements).

use serde_json::{Value, json};

use super::{
    PATIENCE, Server, assert_no_console_errors, browser, cdp, choose_mode, open_new_lab, wait_counter,
    wait_for, write_client,
};

/// Turns the breaker on from the policy form with `fields`, waits for the band to show it on,
/// and gives the lab's policy as the API has it then.
async fn breaker_from_the_form(page: &cdp::Page, server: &Server, lab: &str, fields: Value) -> Value {
    apply_policy_form(page, fields).await;
    wait_for(
        page,
        "the breaker to be on",
        "document.querySelector('[data-breaker]').dataset.breakerOn === 'true'",
    )
    .await;
    server.snapshot(lab).await["policy"].clone()
}

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
async fn the_policy_form_marks_the_input_the_server_refused() {
    let Some(browser) = browser() else { return };
    let server = Server::start().await;
    let page = browser.page().await;
    page.set_viewport(1280, 800).await;
    let lab = open_new_lab(&page, &server).await;

    // A base above the cap: each is fine alone, so only the server can say which is wrong.
    apply_policy_form(&page, json!({"base_ms": 5000, "cap_ms": 100})).await;
    let base = "document.getElementById('policy-form').elements.namedItem('base_ms')";
    wait_for(&page, "base_ms to be marked", &format!("{base}.getAttribute('aria-invalid') === 'true'")).await;
    let focused = page.eval("document.activeElement?.name").await.unwrap();
    assert_eq!(focused, "base_ms", "the refused input has the focus");
    let marked = page
        .eval("[...document.querySelectorAll('[aria-invalid=\"true\"]')].map(e => e.name)")
        .await
        .unwrap();
    assert_eq!(marked, json!(["base_ms"]), "only the refused input is marked");
    assert_eq!(server.snapshot(&lab).await["policy"]["base_ms"], 20, "the policy did not change");

    // Fixed and applied again: the mark goes as the form is sent, and the server takes it (its
    // answer may come after the mark went, so the API is asked until it says so).
    apply_policy_form(&page, json!({"base_ms": 50})).await;
    wait_for(&page, "the mark to go", &format!("!{base}.hasAttribute('aria-invalid')")).await;
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let mut base_ms = server.snapshot(&lab).await["policy"]["base_ms"].clone();
    while base_ms != 50 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        base_ms = server.snapshot(&lab).await["policy"]["base_ms"].clone();
    }
    assert_eq!(base_ms, 50, "the fixed policy was taken");
    let marked = page.eval("document.querySelectorAll('[aria-invalid]').length").await.unwrap();
    assert_eq!(marked, 0, "nothing is marked once the server took it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outage_window_opens_the_breaker_and_the_load_chart_shows_the_burst() {
    let Some(browser) = browser() else { return };
    let server = Server::start().await;
    let page = browser.page().await;
    page.set_viewport(1280, 800).await;
    let lab = open_new_lab(&page, &server).await;

    // The breaker, from the policy form: open after 3 failures in a row, for 400 ms.
    let policy = breaker_from_the_form(
        &page,
        &server,
        &lab,
        json!({"breaker_on": true, "failure_threshold": 3, "open_ms": 400, "half_open_probes": 1}),
    )
    .await;
    assert_eq!(
        policy["breaker"],
        json!({"failure_threshold": 3, "open_ms": 400, "half_open_probes": 1, "refused": "retry"}),
        "a refused attempt is retried unless the form says otherwise"
    );
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
pub(crate) async fn rect(page: &cdp::Page, selector: &str) -> (f64, f64) {
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
async fn metastable_preset_shows_goodput_fall_stay_down_and_come_back_with_a_budget() {
    let Some(browser) = browser() else { return };
    let server = Server::start_alone().await;
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

    // The preset went through the real API: steady traffic at an overloaded endpoint.
    let snapshot = server.snapshot(&lab).await;
    assert_eq!(snapshot["traffic"]["rate_per_s"], 28.0);
    let downstream = &snapshot["downstream"];
    assert_eq!((downstream["capacity"].as_u64(), downstream["queue"].as_u64()), (Some(8), Some(40)));
    assert_eq!(snapshot["policy"]["timeout_ms"], 500);

    // The trigger comes and goes; some seconds after it ended the page says the endpoint is
    // still overloaded, and that is what the server measured.
    let stuck = wait_for(
        &page,
        "the page to say it is still overloaded 5 s after the trigger",
        "(l => !l.hidden && /ended ([5-9]|\\d\\d) s ago; the endpoint is still overloaded/.test(l.textContent) && l.textContent)(document.querySelector('[data-look-live]'))",
    )
    .await;
    let stuck = stuck.as_str().unwrap().to_owned();
    eprintln!("the page says: {stuck}");
    let (delivered, offered) = said_goodput(&stuck);
    assert!(offered > 0 && delivered * 2 < offered, "{stuck}");
    let measured = server.snapshot(&lab).await;
    let ended = measured["markers"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m["kind"] == "scheduled")
        .unwrap()["at_ms"]
        .as_u64()
        .unwrap();
    let now = measured["now_ms"].as_u64().unwrap();
    let bins: Vec<&Value> = measured["load"]["bins"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| (ended + 1_000..now.saturating_sub(100)).contains(&b["t_ms"].as_u64().unwrap()))
        .collect();
    let sum = |f: &str| bins.iter().map(|b| b[f].as_u64().unwrap()).sum::<u64>();
    assert!(
        sum("delivered") * 2 < sum("offered"),
        "the server measured it too: {} of {}",
        sum("delivered"),
        sum("offered")
    );
    // The chart draws it: the goodput line under the offered line, amplification above 1.
    let drawn = page
        .eval("[...document.querySelectorAll('[data-load-bar]')].reduce((s, b) => [s[0] + Number(b.dataset.offered), s[1] + Number(b.dataset.delivered)], [0, 0])")
        .await
        .unwrap();
    assert!(
        drawn[0].as_u64().unwrap() > drawn[1].as_u64().unwrap(),
        "offered over goodput on the chart: {drawn}"
    );
    let amplification = page
        .eval("Number(document.querySelector('[data-live=\"amplification\"]').dataset.value)")
        .await
        .unwrap();
    assert!(amplification.as_f64().unwrap() > 1.5, "retries multiply the load: {amplification}");
    // The preset's claims: healthy before the trigger, and stuck for ten seconds after the
    // flag. Both hold, with the API's figures.
    for id in ["goodput_follows_offered", "goodput_stays_down"] {
        let (shown, judged) = claim_agrees(&page, &server, &lab, id).await;
        assert_eq!(shown[0], "holds", "{id}: {judged}");
    }
    page.screenshot_viewport("metastable-stuck-1280x800").await;

    // The fix, while traffic keeps arriving: goodput comes back, and the page says so.
    page.click("[data-preset-step=\"metastable/1\"]").await;
    let back = wait_for(
        &page,
        "the page to say goodput is back",
        "(l => !l.hidden && l.textContent.includes('goodput is back') && l.textContent)(document.querySelector('[data-look-live]'))",
    )
    .await;
    let back = back.as_str().unwrap().to_owned();
    let (delivered, offered) = said_goodput(&back);
    assert!(delivered * 2 >= offered && offered > 0, "{back}");
    let policy = server.snapshot(&lab).await["policy"].clone();
    assert!(policy["retry_budget"].is_object(), "{policy}");
    // The step's claim, judged 16 s after the click on the seconds after it: the page shows
    // the server's verdict and figure (whether it held on this machine's run is the API
    // tests' to insist on; here, that the page says what the server judged).
    let (shown, judged) = claim_agrees(&page, &server, &lab, "goodput_back_within_10_s").await;
    let from: u64 = page
        .eval("Number(document.querySelector('[data-claim]').dataset.fromMs)")
        .await
        .unwrap()
        .as_u64()
        .unwrap();
    let clicked = policy_changed_ms(&server.snapshot(&lab).await);
    eprintln!(
        "the budget's claim on the page: {shown}; {}; from {from}, the policy changed at {clicked}; per second {:?}",
        judged["said"],
        per_second(&server.snapshot(&lab).await, from - 2_000, from + 16_000)
    );
    // Stop the load, so the other tests on these two cores keep their pace.
    page.click("[data-reset]").await;
    wait_for(&page, "an empty lab", "document.querySelector('[data-filter-count]').dataset.total === '0'")
        .await;
    assert_no_console_errors(&page);
}

/// "X of Y new messages delivered in the last 5 s", read back from what the page said.
/// Waits for claim `id` on the page to settle, then asks the server to judge it on the same
/// scope (the page's `data-from-ms`, when the claim is about the seconds after a change): the
/// page's [verdict, figure] must be the server's. Returns them, and the server's judgement.
async fn claim_agrees(page: &cdp::Page, server: &Server, lab: &str, id: &str) -> (Value, Value) {
    let shown = wait_for(
        page,
        &format!("the claim {id} to settle"),
        &format!(
            "(c => c && c.dataset.verdict !== 'pending' && [c.dataset.verdict, c.dataset.figure, c.dataset.fromMs ?? null])(document.querySelector('[data-claim={id}]'))"
        ),
    )
    .await;
    let from = shown[2].as_str().map(|ms| format!("&from_ms={ms}")).unwrap_or_default();
    let judged: Value = server.get_json(&format!("/api/labs/{lab}/claims?ids={id}{from}")).await;
    let judged = judged["claims"][0].clone();
    let shown = json!([shown[0], shown[1]]);
    assert_eq!(shown, json!([judged["verdict"], judged["figure"]]), "{id}: {judged}");
    (shown, judged)
}

fn said_goodput(text: &str) -> (u64, u64) {
    let words: Vec<&str> = text.split_whitespace().collect();
    let at = words.iter().position(|w| *w == "of").expect("X of Y");
    (words[at - 1].parse().unwrap(), words[at + 1].parse().unwrap())
}

/// (offered, delivered, requests) per second of lab time in `[from, to)`.
fn per_second(snapshot: &Value, from: u64, to: u64) -> Vec<(u64, u64, u64)> {
    let bins = snapshot["load"]["bins"].as_array().unwrap();
    (from..to)
        .step_by(1_000)
        .map(|t| {
            let inside = bins.iter().filter(|b| (t..t + 1_000).contains(&b["t_ms"].as_u64().unwrap()));
            inside.fold((0, 0, 0), |(o, d, r), b| {
                (
                    o + b["offered"].as_u64().unwrap(),
                    d + b["delivered"].as_u64().unwrap(),
                    r + b["requests"].as_u64().unwrap(),
                )
            })
        })
        .collect()
}

/// The lab's clock in a snapshot.
fn now_ms(snapshot: &Value) -> u64 {
    snapshot["now_ms"].as_u64().unwrap()
}

/// When the breaker opened at `since` ms of lab time or later, as the API recorded it.
fn api_openings(snapshot: &Value, since: u64) -> Vec<u64> {
    let changes = snapshot["breaker"]["changes"].as_array().unwrap();
    let opened = changes.iter().filter(|c| c["state"] == "open");
    opened.map(|c| c["at_ms"].as_u64().unwrap()).filter(|&t| t >= since).collect()
}

/// When the band shows the breaker opening at `since` ms of lab time or later.
fn drawn_openings(since: u64) -> String {
    format!(
        "[...document.querySelectorAll('[data-breaker-segment][data-state=\"open\"]')].map(e => Number(e.dataset.from)).filter(t => t >= {since})"
    )
}

/// The live sentence under what to look for, once it matches `pattern` (a JS regex).
async fn live_sentence(page: &cdp::Page, what: &str, pattern: &str) -> String {
    let expression = format!(
        "(l => !l.hidden && {pattern}.test(l.textContent) && l.textContent)(document.querySelector('[data-look-live]'))"
    );
    wait_for(page, what, &expression).await.as_str().unwrap().to_owned()
}

/// Waits until the load chart's bars wholly inside `[from, to)` ms of lab time each show the
/// new messages and deliveries the API counted in their span in `snapshot` (the page hears of
/// a bin a little after the server does), and returns what those bars show, summed, as
/// (offered, delivered). The bars must cover at least half of the window: a page that drew
/// none would agree with anything.
async fn chart_agrees(page: &cdp::Page, snapshot: &Value, from: u64, to: u64) -> (u64, u64) {
    let bins: Vec<Value> = snapshot["load"]["bins"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| (from..to).contains(&b["t_ms"].as_u64().unwrap()))
        .map(|b| json!([b["t_ms"], b["offered"], b["delivered"]]))
        .collect();
    let script = format!(
        "(([bins, from, to]) => {{
            const bars = [...document.querySelectorAll('[data-load-bar]')].map(b => ({{
                t: Number(b.dataset.t), d: Number(b.style.getPropertyValue('--d')),
                offered: Number(b.dataset.offered), delivered: Number(b.dataset.delivered),
            }})).filter(b => b.t >= from && b.t + b.d <= to);
            const all = [...document.querySelectorAll('[data-load-bar]')].map(b => Number(b.dataset.t));
            const out = {{ wrong: [], covered: 0, offered: 0, delivered: 0,
                drawn: all.length ? [Math.min(...all), Math.max(...all), all.length] : [] }};
            for (const b of bars) {{
                const api = bins.filter(([t]) => t >= b.t && t < b.t + b.d)
                    .reduce((s, [, o, d]) => [s[0] + o, s[1] + d], [0, 0]);
                if (api[0] !== b.offered || api[1] !== b.delivered) out.wrong.push({{ bar: b, api }});
                out.covered += b.d; out.offered += b.offered; out.delivered += b.delivered;
            }}
            return out;
        }})({})",
        json!([bins, from, to])
    );
    let start = std::time::Instant::now();
    let mut differed = Value::Null;
    loop {
        let shown = page.eval(&script).await.unwrap();
        let covered = shown["covered"].as_u64().unwrap();
        let wrong = &shown["wrong"];
        if wrong.as_array().unwrap().is_empty() && covered * 2 >= to - from {
            return (shown["offered"].as_u64().unwrap(), shown["delivered"].as_u64().unwrap());
        }
        if !wrong.as_array().unwrap().is_empty() {
            differed = wrong.clone();
        }
        assert!(
            start.elapsed() < PATIENCE,
            "the load chart never showed the API's figures over {from}..{to} ms: {shown}; the last bars that differed: {differed}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// When the lab's policy last changed, in lab ms: the marker a step's PUT left.
fn policy_changed_ms(snapshot: &Value) -> u64 {
    let markers = snapshot["markers"].as_array().unwrap();
    let changed =
        markers.iter().rev().find(|m| m["label"].as_str().is_some_and(|l| l.starts_with("policy:")));
    changed.unwrap_or_else(|| panic!("no policy marker: {markers:?}"))["at_ms"].as_u64().unwrap()
}

/// Keeps every sentence the live line says from now on, in `window.__said`.
const RECORD_SAID: &str = "(() => {
    const l = document.querySelector('[data-look-live]');
    window.__said = [l.textContent];
    window.__saying?.disconnect();
    window.__saying = new MutationObserver(() => window.__said.at(-1) !== l.textContent && window.__said.push(l.textContent));
    window.__saying.observe(l, { childList: true, characterData: true, subtree: true });
    return true;
})()";
/// What the live line said since `RECORD_SAID`, and stops listening.
const SAID: &str = "(() => { window.__saying.disconnect(); return window.__said; })()";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metastable_steps_clicked_in_turn_a_retrying_breaker_leaves_it_stuck_one_that_fails_fast_ends_it() {
    let Some(browser) = browser() else { return };
    let server = Server::start_alone().await;
    let began = std::time::Instant::now();
    let page = browser.page().await;
    page.set_viewport(1280, 800).await;
    let lab = open_new_lab(&page, &server).await;
    // The test's own setting: the arrivals' schedule of the API's metastable tests (the preset
    // sets every other field of the policy, and keeps the seed).
    server.put(&lab, "policy", r#"{"seed": 19}"#).await;
    page.click("[data-presets-drawer] > summary").await;
    page.click("[data-preset=\"metastable\"]").await;

    // Stuck: seconds after the trigger ended, the page says the endpoint is still overloaded,
    // and its chart shows what the server counted: goodput under half of the offered load.
    let stuck = live_sentence(
        &page,
        "the page to say it is still overloaded 3 s after the trigger",
        "/ended ([3-9]|\\d\\d) s ago; the endpoint is still overloaded/",
    )
    .await;
    let snapshot = server.snapshot(&lab).await;
    let markers = snapshot["markers"].as_array().unwrap();
    let ended = markers.iter().rev().find(|m| m["kind"] == "scheduled").unwrap()["at_ms"].as_u64().unwrap();
    let (offered, delivered) = chart_agrees(&page, &snapshot, ended + 500, now_ms(&snapshot) - 300).await;
    eprintln!("stuck: {stuck} The chart, from 0.5 s after the trigger: {delivered} of {offered} delivered");
    assert!(offered >= 20 && delivered * 2 < offered, "stuck: {delivered} of {offered} delivered");

    // "try a circuit breaker": the band shows it on and open, and after its 4 s and a probe,
    // open again, over and over, while goodput stays under half of what keeps arriving, on
    // the chart and in every sentence the page says meanwhile.
    page.eval(RECORD_SAID).await.unwrap();
    page.click("[data-preset-step=\"metastable/2\"]").await;
    wait_for(
        &page,
        "the breaker step's sentence",
        "document.querySelector('[data-look-name]').textContent.includes('try a circuit breaker')",
    )
    .await;
    let snapshot = server.snapshot(&lab).await;
    assert_eq!(snapshot["policy"]["seed"], 19, "{}", snapshot["policy"]);
    assert_eq!(snapshot["policy"]["breaker"]["refused"], "retry", "{}", snapshot["policy"]);
    let at = policy_changed_ms(&snapshot);
    wait_for(
        &page,
        "the band to show the breaker on",
        "document.querySelector('[data-breaker]').dataset.breakerOn === 'true'",
    )
    .await;
    let drawn = wait_for(
        &page,
        "the breaker to open a third time",
        &format!("(o => o.length >= 3 && o)({})", drawn_openings(at)),
    )
    .await;
    // At once, before the breaker's 4 s are over: nothing it refused comes back to herd when
    // the next one closes.
    page.click("[data-preset-step=\"metastable/3\"]").await;
    let snapshot = server.snapshot(&lab).await;
    let opened = api_openings(&snapshot, at);
    let drawn: Vec<u64> = serde_json::from_value(drawn).unwrap();
    assert_eq!(
        drawn[..],
        opened[..drawn.len().min(opened.len())],
        "the band opens when the server's breaker did"
    );
    let third = drawn[2];
    let (offered, delivered) = chart_agrees(&page, &snapshot, at, third).await;
    eprintln!(
        "with the retrying breaker, opened at {:?} ms after the click: {delivered} of {offered} delivered",
        drawn.iter().map(|t| t - at).collect::<Vec<_>>()
    );
    assert!(offered >= 150, "traffic kept arriving: {offered}");
    assert!(delivered * 2 < offered, "still stuck with the breaker: {delivered} of {offered} delivered");

    // "end it with a breaker that fails fast": goodput comes back while traffic keeps arriving,
    // the page says so, the band ends closed, and what it refused is dead-lettered.
    wait_for(
        &page,
        "the fail-fast step's sentence",
        "document.querySelector('[data-look-name]').textContent.includes('a breaker that fails fast')",
    )
    .await;
    let snapshot = server.snapshot(&lab).await;
    assert_eq!(snapshot["policy"]["breaker"]["refused"], "give_up", "{}", snapshot["policy"]);
    let at = policy_changed_ms(&snapshot);
    eprintln!("failing fast from {} ms after the breaker opened", at - third);
    // Until the breaker that fails fast first closes, nothing is delivered: every sentence the
    // page said since the retrying breaker went on says the endpoint is still overloaded.
    wait_for(
        &page,
        "the band to show the breaker closed",
        "document.querySelector('[data-breaker]').dataset.breakerState === 'closed'",
    )
    .await;
    let said: Vec<String> = serde_json::from_value(page.eval(SAID).await.unwrap()).unwrap();
    let back: Vec<&String> = said.iter().filter(|s| !s.contains("still overloaded")).collect();
    assert!(
        said.len() > 1 && back.is_empty(),
        "while stuck the page said {} sentences, these not 'still overloaded': {back:#?}",
        said.len()
    );
    let back = live_sentence(&page, "the page to say goodput is back", "/goodput is back/").await;
    let (delivered, offered) = said_goodput(&back);
    assert!(offered > 0 && delivered * 2 >= offered, "{back}");
    eprintln!(
        "failing fast, {} s after the click: {back}",
        (now_ms(&server.snapshot(&lab).await) - at) / 1_000
    );
    // The step's claim: the page shows the server's verdict and figure (goodput back on the
    // offered load within 10 s of the click, goodput_returns; whether it held on this machine's
    // run is the API tests' to insist on: with the browser and another test on these two cores
    // the lab's timers ran 185 ms late at p99 in one run here, its requests timed out with 30
    // a second sent to 8 workers that do 40, and the page rightly said ✘). Not that the breaker stays closed: the client still
    // retries in lockstep, and a burst can open it again (2 of 4 full runs on these cores did).
    let (shown, judged) = claim_agrees(&page, &server, &lab, "goodput_returns").await;
    let snapshot = server.snapshot(&lab).await;
    let changes: Vec<(u64, &str)> = snapshot["breaker"]["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["at_ms"].as_u64().unwrap(), c["state"].as_str().unwrap()))
        .filter(|&(t, _)| t >= at)
        .map(|(t, s)| (t - at, s))
        .collect();
    eprintln!(
        "failing fast: {}; the breaker's changes since the click {changes:?}; per second (offered, delivered, requests) {:?}",
        judged["said"],
        per_second(&snapshot, at, now_ms(&snapshot)),
    );
    eprintln!("the page's goodput_returns: {shown}");
    // The band shows every opening the server's breaker had (a later one may come after).
    let opened = api_openings(&snapshot, third);
    let openings = wait_for(
        &page,
        "the band to show every opening",
        &format!(
            "(o => o.length >= {} && o.slice(0, {}))({})",
            opened.len(),
            opened.len(),
            drawn_openings(third)
        ),
    )
    .await;
    assert_eq!(openings, json!(opened));
    let letters = snapshot["dead_letters"].as_array().unwrap();
    let refused = letters.iter().filter(|d| d["cause"] == "circuit_open").count();
    assert!(refused > 0, "what it refused is dead-lettered: {refused}");
    page.screenshot_viewport("metastable-breaker-failing-fast-1280x800").await;

    // Stop the load, so the other tests on these two cores keep their pace.
    page.click("[data-reset]").await;
    wait_for(&page, "an empty lab", "document.querySelector('[data-filter-count]').dataset.total === '0'")
        .await;
    assert_no_console_errors(&page);
    eprintln!("the three steps took {:.1} s", began.elapsed().as_secs_f64());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steady_traffic_from_the_page_runs_and_the_timeline_follows_the_newest() {
    let Some(browser) = browser() else { return };
    let server = Server::start().await;
    let page = browser.page().await;
    page.set_viewport(1280, 800).await;
    let lab = open_new_lab(&page, &server).await;
    page.eval(
        "(f => { f.elements.namedItem('rate_per_s').value = '40'; f.elements.namedItem('arrivals').value = 'even'; })(document.getElementById('traffic-form'))",
    )
    .await
    .unwrap();
    page.click("[data-traffic-start]").await;
    wait_for(
        &page,
        "the traffic to run",
        "document.querySelector('#traffic-form').dataset.running === 'true'",
    )
    .await;
    // Following starts with the first arrival; once the window has moved on past the first
    // messages, the rows in view move on with it: read once the scroll that following asks for
    // has landed (it comes in a frame after the window moves).
    let following = wait_for(
        &page,
        "the timeline to follow",
        "document.querySelector('[data-follow]').dataset.following === 'true' && document.querySelector('[data-view-range]').textContent",
    )
    .await;
    assert!(following.as_str().unwrap().ends_with("following"), "{following}");
    let seen = wait_for(
        &page,
        "the rows to move on from the first messages",
        "(() => { const ids = [...document.querySelectorAll('.tl-row[data-message-id]')].map(r => Number(r.dataset.messageId)); return ids.length && Math.min(...ids) > 1 && [Math.min(...ids), Math.max(...ids)]; })()",
    )
    .await;
    assert!(seen[0].as_u64().unwrap() > 1, "scrolled on from the first rows: {seen}");
    let sent = server.snapshot(&lab).await["traffic"]["sent"].as_u64().unwrap();
    assert!(sent > seen[0].as_u64().unwrap(), "newer messages than those in view arrived: {sent} {seen}");
    // The rows in view fill the pane, from under the axis to its bottom.
    wait_for(&page, "the rows to fill the pane", ROWS_FILL_THE_PANE).await;
    // Scrolled down the rows (by more than a view, once the window has moved on far enough),
    // the "now" line and the grid lines still cross the view, and are no taller than it (not as
    // tall as every row).
    wait_for(
        &page,
        "the rows scrolled down by more than a view",
        "(sc => sc.scrollTop > sc.getBoundingClientRect().height)(document.querySelector('#timeline .tl-scroll'))",
    )
    .await;
    // The "now" line is drawn while anything runs: read the lines at a moment when it is.
    let lines = wait_for(
        &page,
        "the lines read while the now line is drawn",
        "(() => { const sc = document.querySelector('#timeline .tl-scroll'); const view = sc.getBoundingClientRect(); \
         const box = el => { const r = el.getBoundingClientRect(); return [r.top, r.bottom]; }; \
         const now = sc.querySelector('.tl-now'); if (now.getBoundingClientRect().height === 0) return null; \
         return { view: [view.top, view.bottom], scrolled: sc.scrollTop, now: box(now), \
                  grid: [...sc.querySelectorAll('.tl-gridline')].map(box) }; })()",
    )
    .await;
    let (top, bottom) = (lines["view"][0].as_f64().unwrap(), lines["view"][1].as_f64().unwrap());
    assert!(lines["scrolled"].as_f64().unwrap() > bottom - top, "the rows are scrolled down: {lines}");
    let grid = lines["grid"].as_array().unwrap().clone();
    assert!(!grid.is_empty(), "{lines}");
    for line in grid.iter().chain([&lines["now"]]) {
        let (from, to) = (line[0].as_f64().unwrap(), line[1].as_f64().unwrap());
        assert!(from <= top + 1.0 && to >= bottom - 1.0, "a line crosses the whole view: {line} in {lines}");
        assert!(to - from <= (bottom - top) * 1.5, "a line no taller than the view: {line} in {lines}");
    }
    // It follows in steps: the rows move up a part of a view at a time, not once for each of
    // the 40 new rows a second.
    page.eval("(sc => { window.__scrolls = 0; sc.addEventListener('scroll', () => window.__scrolls++); })(document.querySelector('#timeline .tl-scroll'))")
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let scrolls = page.eval("window.__scrolls").await.unwrap().as_u64().unwrap();
    assert!((1..30).contains(&scrolls), "the rows moved {scrolls} times in 2 s of 40 new rows a second");
    // A zoom ends following; "follow" brings it back.
    page.click("[data-zoom=\"in\"]").await;
    wait_for(
        &page,
        "follow off",
        "document.querySelector('[data-follow]').getAttribute('aria-pressed') === 'false'",
    )
    .await;
    page.click("[data-follow]").await;
    wait_for(&page, "follow on", "document.querySelector('[data-follow]').dataset.following === 'true'")
        .await;
    page.click("[data-traffic-stop]").await;
    wait_for(
        &page,
        "the traffic to stop",
        "document.querySelector('#traffic-form').dataset.running === 'false'",
    )
    .await;
    let status = page.eval("document.querySelector('[data-traffic-status]').textContent").await.unwrap();
    assert!(status.as_str().unwrap().starts_with("stopped; sent"), "{status}");
    assert_no_console_errors(&page);
}

/// Whether the drawn rows cover the timeline's pane from just under its axis to its bottom.
const ROWS_FILL_THE_PANE: &str = "(() => { const sc = document.querySelector('#timeline .tl-scroll'); const view = sc.getBoundingClientRect(); \
     const axis = sc.querySelector('.tl-axis').getBoundingClientRect().bottom; \
     const rows = [...sc.querySelectorAll('.tl-row[data-message-id]')].map(r => r.getBoundingClientRect()).filter(r => r.bottom > axis && r.top < view.bottom); \
     if (!rows.length) return false; const h = rows[0].height; \
     const top = Math.min(...rows.map(r => r.top)), bottom = Math.max(...rows.map(r => r.bottom)); \
     return top <= axis + 1 && bottom >= view.bottom - 1 && rows.length >= Math.floor((view.bottom - axis) / h) && rows.length; })()";

/// Steady traffic at a flaky endpoint with quick retries: as soon as the first message arrives
/// the timeline follows, its rows fill the pane, and within 2 s the rows in view show retries
/// and the waits before them (the window is long enough to hold a message's history).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn following_steady_traffic_fills_the_pane_with_histories_from_the_first_arrival() {
    let Some(browser) = browser() else { return };
    let server = Server::start().await;
    let page = browser.page().await;
    page.set_viewport(1280, 800).await;
    let lab = open_new_lab(&page, &server).await;
    server.put(&lab, "downstream", r#"{"mode": "flaky", "failure_rate": 0.5}"#).await;
    page.eval(
        "(f => { f.elements.namedItem('rate_per_s').value = '40'; f.elements.namedItem('arrivals').value = 'even'; })(document.getElementById('traffic-form'))",
    )
    .await
    .unwrap();
    page.click("[data-traffic-start]").await;
    wait_for(&page, "the first arrival", "document.querySelector('.tl-row[data-message-id]') !== null").await;
    let first = std::time::Instant::now();
    let shown = format!(
        "(() => {{ const following = document.querySelector('[data-follow]').dataset.following === 'true'; \
           const sc = document.querySelector('#timeline .tl-scroll'); const view = sc.getBoundingClientRect(); \
           const axis = sc.querySelector('.tl-axis').getBoundingClientRect().bottom; \
           const inView = el => {{ const r = el.getBoundingClientRect(); return r.bottom > axis && r.top < view.bottom && r.right > view.left && r.left < view.right; }}; \
           const retries = [...sc.querySelectorAll('.tl-bar')].filter(b => Number(b.dataset.n) >= 2 && inView(b)).length; \
           const waits = [...sc.querySelectorAll('.tl-wait')].filter(inView).length; \
           return {{ following, fill: {ROWS_FILL_THE_PANE}, retries, waits }}; }})()"
    );
    let mut last = Value::Null;
    while first.elapsed() < std::time::Duration::from_secs(2) {
        last = page.eval(&shown).await.unwrap();
        if last["following"] == true && last["fill"].as_u64().is_some() && last["retries"].as_u64() > Some(0)
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let took = first.elapsed();
    eprintln!("{:.2} s after the first arrival: {last}", took.as_secs_f64());
    assert_eq!(last["following"], true, "following from the first arrival: {last}");
    assert!(last["fill"].as_u64().is_some(), "the rows fill the pane: {last}");
    assert!(
        last["retries"].as_u64() > Some(0) && last["waits"].as_u64() > Some(0),
        "retries in view: {last}"
    );
    assert!(took < std::time::Duration::from_secs(2), "within 2 s of the first arrival: {took:?}");
    page.click("[data-traffic-stop]").await;
    assert_no_console_errors(&page);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policy_form_sets_what_a_refused_attempt_does_and_shows_it_after_a_reload() {
    let Some(browser) = browser() else { return };
    let server = Server::start().await;
    let page = browser.page().await;
    page.set_viewport(1280, 800).await;
    let lab = open_new_lab(&page, &server).await;
    let policy = breaker_from_the_form(
        &page,
        &server,
        &lab,
        json!({"breaker_on": true, "failure_threshold": 5, "open_ms": 4000, "half_open_probes": 1, "refused": "give_up"}),
    )
    .await;
    assert_eq!(
        policy["breaker"],
        json!({"failure_threshold": 5, "open_ms": 4000, "half_open_probes": 1, "refused": "give_up"})
    );
    // A fresh page fills the form from the lab's policy.
    page.eval("window.beforeReload = true; location.reload()").await.unwrap();
    let shown = wait_for(
        &page,
        "the form to show the breaker's refusal",
        "(f => !window.beforeReload && f?.elements.namedItem('breaker_on').checked && f.elements.namedItem('refused').value)(document.getElementById('policy-form'))",
    )
    .await;
    assert_eq!(shown, "give_up");
    assert_no_console_errors(&page);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_many_clients_the_breaker_band_shows_the_share_open() {
    let Some(browser) = browser() else { return };
    let server = Server::start().await;
    let page = browser.page().await;
    page.set_viewport(1280, 800).await;
    let lab = open_new_lab(&page, &server).await;
    let policy = r#"{"clients": 10, "max_attempts": 1, "breaker": {"failure_threshold": 2, "open_ms": 60000, "half_open_probes": 1}}"#;
    server.put(&lab, "policy", policy).await;
    server.put(&lab, "downstream", r#"{"mode": "down"}"#).await;
    // Twelve messages, one attempt each: the first two clients fail twice, the others once.
    server.burst(&lab, 10).await;
    wait_counter(&page, "dead_letter", 10).await;
    server.burst(&lab, 2).await;
    wait_counter(&page, "dead_letter", 12).await;
    let said = wait_for(
        &page,
        "the band to show 2 of 10 open",
        "(b => b.dataset.open === '2' && b.querySelector('[data-breaker-segment][data-open=\"2\"]')?.textContent)(document.querySelector('[data-breaker]'))",
    )
    .await;
    assert_eq!(said, "2 of 10 open");
    let now = page.eval("document.querySelector('[data-breaker-now]').textContent").await.unwrap();
    assert_eq!(now, "2 of 10 open");
    let server_says = server.snapshot(&lab).await["clients"]["breakers"].clone();
    assert_eq!(server_says, json!({"closed": 8, "open": 2, "half_open": 0}));
    // The form shows the policy's clients.
    let clients = page
        .eval("document.getElementById('policy-form').elements.namedItem('clients').value")
        .await
        .unwrap();
    assert_eq!(clients, "10");
    assert_no_console_errors(&page);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_parameters_form_turns_the_overloaded_endpoints_defences_on_and_the_page_says_so() {
    let Some(browser) = browser() else { return };
    let server = Server::start().await;
    let page = browser.page().await;
    page.set_viewport(1280, 800).await;
    let lab = open_new_lab(&page, &server).await;
    server.put(&lab, "downstream", r#"{"mode": "overloaded", "capacity": 8, "queue": 40}"#).await;
    wait_for(
        &page,
        "the form to show the overloaded endpoint",
        "document.getElementById('params-form').elements.namedItem('capacity').value === '8'",
    )
    .await;
    let script = "(() => { const f = document.getElementById('params-form');
        f.closest('details').open = true;
        f.elements.namedItem('deadline').checked = true;
        f.elements.namedItem('queue_discipline').value = 'codel';
        f.elements.namedItem('codel_target_ms').value = '80';
        f.elements.namedItem('codel_target_ms').dispatchEvent(new Event('input', { bubbles: true }));
        return true; })()";
    page.eval(script).await.unwrap();
    page.click("#params-form button[type=\"submit\"]").await;
    let said = wait_for(
        &page,
        "the page to say the defences are on",
        "(s => s.includes('drops what waited') && s)(document.querySelector('[data-mode-now-what]').textContent)",
    )
    .await;
    let said = said.as_str().unwrap_or_default().to_owned();
    assert!(
        said.contains("drops work whose client will have given up, and drops what waited over 80 ms once a queue stands 500 ms"),
        "{said}"
    );
    let snapshot = server.snapshot(&lab).await;
    assert_eq!(
        snapshot["downstream"]["defences"],
        json!({"deadline": true, "queue": "codel", "codel_target_ms": 80, "codel_interval_ms": 500, "retries_first": false, "pushback": false, "limit": {"kind": "fixed"}, "admission": null})
    );
    let flag = snapshot["markers"].as_array().unwrap().last().unwrap()["label"].as_str().unwrap().to_owned();
    assert!(flag.contains("defences: CoDel 80 ms / 500 ms, deadline drop"), "{flag}");
    // A fresh page fills the form from the lab's settings.
    page.eval("window.beforeReload = true; location.reload()").await.unwrap();
    let shown = wait_for(
        &page,
        "the form to show the defences",
        "(f => !window.beforeReload && f?.elements.namedItem('deadline').checked && f.elements.namedItem('queue_discipline').value)(document.getElementById('params-form'))",
    )
    .await;
    assert_eq!(shown, "codel");
    // Pushback rides on retries first; the form sends both, and a fresh page shows it kept.
    let script = "(() => { const f = document.getElementById('params-form');
        f.closest('details').open = true;
        f.elements.namedItem('retries_first').checked = true;
        f.elements.namedItem('pushback').checked = true;
        f.elements.namedItem('pushback').dispatchEvent(new Event('input', { bubbles: true }));
        return true; })()";
    page.eval(script).await.unwrap();
    page.click("#params-form button[type=\"submit\"]").await;
    wait_for(
        &page,
        "the page to say a shed retry is told not to retry",
        "document.querySelector('[data-mode-now-what]').textContent.includes('tells a retry it shed not to retry')",
    )
    .await;
    let defences = server.snapshot(&lab).await["downstream"]["defences"].clone();
    assert_eq!((defences["retries_first"].clone(), defences["pushback"].clone()), (json!(true), json!(true)));
    page.eval("window.beforeReload = true; location.reload()").await.unwrap();
    wait_for(
        &page,
        "the form to show pushback on",
        "(f => !window.beforeReload && f?.elements.namedItem('pushback').checked)(document.getElementById('params-form'))",
    )
    .await;
    // An adaptive limit and admission control: the form names the kind and turns the filter on;
    // a limit's parameters set through the API stay while its kind does.
    server
        .put(&lab, "downstream", r#"{"defences": {"limit": {"kind": "gradient2", "max_limit": 30}}}"#)
        .await;
    wait_for(
        &page,
        "the form to show the Gradient2 limit",
        "document.getElementById('params-form').elements.namedItem('limit_kind').value === 'gradient2'",
    )
    .await;
    let script = "(() => { const f = document.getElementById('params-form');
        f.closest('details').open = true;
        f.elements.namedItem('admission').checked = true;
        f.elements.namedItem('admission').dispatchEvent(new Event('input', { bubbles: true }));
        return true; })()";
    page.eval(script).await.unwrap();
    page.click("#params-form button[type=\"submit\"]").await;
    wait_for(
        &page,
        "the page to say admission control is on",
        "document.querySelector('[data-mode-now-what]').textContent.includes('refuses at random as fewer than 95 % of recent requests succeed')",
    )
    .await;
    let said = page.eval("document.querySelector('[data-mode-now-what]').textContent").await.unwrap();
    assert!(said.as_str().unwrap().contains("refuses past a Gradient2 limit of 2-30 in flight"), "{said}");
    let defences = server.snapshot(&lab).await["downstream"]["defences"].clone();
    assert_eq!(defences["limit"]["max_limit"], 30, "{defences}");
    assert_eq!(defences["admission"]["sr_threshold"], 0.95, "{defences}");
    // HAProxy's queue timeout: a number turns it on and the page says so; emptied, it is off.
    apply_param(&page, "queue_timeout_ms", "300").await;
    wait_for(
        &page,
        "the page to say the queue timeout is on",
        "document.querySelector('[data-mode-now-what]').textContent.includes('drops what waited in line over 300 ms (a queue timeout)')",
    )
    .await;
    let snapshot = server.snapshot(&lab).await;
    assert_eq!(snapshot["downstream"]["defences"]["queue_timeout_ms"], 300);
    let flag = snapshot["markers"].as_array().unwrap().last().unwrap()["label"].as_str().unwrap().to_owned();
    assert!(flag.contains("queue timeout 300 ms"), "{flag}");
    apply_param(&page, "queue_timeout_ms", "").await;
    wait_for(
        &page,
        "the page to say the queue timeout is off",
        "!document.querySelector('[data-mode-now-what]').textContent.includes('queue timeout')",
    )
    .await;
    assert_eq!(server.snapshot(&lab).await["downstream"]["defences"]["queue_timeout_ms"], Value::Null);
    assert_no_console_errors(&page);
}

/// Sets the parameters form's `name` to `value`, as a person typing it, and applies the form.
async fn apply_param(page: &cdp::Page, name: &str, value: &str) {
    let script = format!(
        "(() => {{ const f = document.getElementById('params-form'); f.closest('details').open = true;
            f.elements.namedItem('{name}').value = '{value}';
            f.elements.namedItem('{name}').dispatchEvent(new Event('input', {{ bubbles: true }})); return true; }})()"
    );
    page.eval(&script).await.unwrap();
    page.click("#params-form button[type=\"submit\"]").await;
}

/// The retry policy drawer takes the lab's policy home as a library's client, as a comparison's
/// column does: the program carries the policy as it stands, with the caution the card will
/// bear out, and a change of policy makes the panel again for the new one (left open).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lab_s_policy_goes_home_from_the_policy_drawer() {
    let Some(browser) = browser() else { return };
    let server = Server::start().await;
    let page = browser.page().await;
    page.set_viewport(1280, 800).await;
    let lab = open_new_lab(&page, &server).await;
    server.put(&lab, "policy", r#"{"jitter": "full", "base_ms": 100, "max_attempts": 3}"#).await;
    let home = "[data-lab-take-home] details";
    let policy_is = |ms: u32| {
        format!(
            "(document.querySelector('[data-lab-take-home]').dataset.policy ?? '').includes('\"base_ms\":{ms}')"
        )
    };
    wait_for(&page, "the panel for the policy", &policy_is(100)).await;
    let summary =
        page.eval(&format!("document.querySelector(\"{home} summary\").textContent")).await.unwrap();
    assert_eq!(summary, "take this policy home: a client for your retry library");
    let (code, said) = write_client(&page, home, "got").await;
    assert!(code.contains("import got from 'got'") && code.contains("\"base_ms\": 100"), "{code}");
    assert!(said.contains("caution: retry_after_mode floor"), "{said}");
    page.eval(&format!("document.querySelector(\"{home}\").scrollIntoView()")).await.unwrap();
    page.screenshot_viewport("lab-take-home").await;
    // A new policy: the panel is made again, still open, and writes the new one.
    server.put(&lab, "policy", r#"{"base_ms": 150}"#).await;
    wait_for(&page, "the panel for the new policy", &policy_is(150)).await;
    let open = page.eval(&format!("document.querySelector(\"{home}\").open")).await.unwrap();
    assert_eq!(open, true, "the panel stays open");
    let (code, _) = write_client(&page, home, "got").await;
    assert!(code.contains("\"base_ms\": 150"), "{code}");
    assert_no_console_errors(&page);
}

/// The policy form's preset picker applies a preset from the table the chapters and /compare
/// use: a library's preset sets its library's rule, and the form shows it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_library_preset_applies_from_the_policy_form() {
    let Some(browser) = browser() else { return };
    let server = Server::start().await;
    let page = browser.page().await;
    page.set_viewport(1280, 800).await;
    let lab = open_new_lab(&page, &server).await;
    wait_for(&page, "the preset list", "document.querySelector('[data-policy-preset]').options.length > 20")
        .await;
    page.eval(
        "(() => { const pick = document.querySelector('[data-policy-preset]'); pick.closest('details').open = true;
            pick.value = 'got'; return true; })()",
    )
    .await
    .unwrap();
    page.click("[data-apply-preset]").await;
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let mut policy = server.snapshot(&lab).await["policy"].clone();
    while policy["retry_after_mode"] != "exact" && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        policy = server.snapshot(&lab).await["policy"].clone();
    }
    assert_eq!(
        (&policy["jitter"], &policy["base_ms"], &policy["max_attempts"], &policy["retry_after_mode"]),
        (&json!("additive"), &json!(1000), &json!(3), &json!("exact")),
        "got's preset: {policy}"
    );
    wait_for(
        &page,
        "the form to show it",
        "document.getElementById('policy-form').elements.namedItem('jitter').value === 'additive'",
    )
    .await;
    assert_no_console_errors(&page);
}
