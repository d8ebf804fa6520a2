//! The compare pages: the form refuses fewer than two policies and shows the server's own
//! words when it refuses a policy, a started comparison gets its own address, its page follows
//! every policy to the end with the figures in the table and the load drawn, and the address
//! opens the same comparison again. Read from the DOM's data attributes, as a person sees it.

use serde_json::{Value, json};

use super::{Server, browser, list, wait_for, write_client};

/// Chooses a scenario, the presets, the custom policy (name and JSON, or empty), a burst and a
/// seed in the form, as typing and clicking would, once the presets' boxes are there.
async fn fill_form(
    page: &super::cdp::Page,
    scenario: &str,
    presets: &[&str],
    custom: (&str, &str),
    burst: u64,
) {
    // The preset boxes come from a fetched table: on a loaded machine the form can be on the
    // page before them.
    let boxes = format!(
        "{}.every(p => !!document.querySelector(`#compare-form input[name=policy][value=${{JSON.stringify(p)}}]`))",
        json!(presets)
    );
    wait_for(page, "the preset boxes", &boxes).await;
    let script = format!(
        "(() => {{ const f = document.getElementById('compare-form');
            f.querySelector(`input[name=scenario][value=${{JSON.stringify({scenario})}}]`).checked = true;
            for (const box of f.querySelectorAll('input[name=policy]')) box.checked = {presets}.includes(box.value);
            f.querySelector('[data-custom]').open = true;
            f.elements.namedItem('custom_name').value = {name};
            f.elements.namedItem('custom_policy').value = {policy};
            f.elements.namedItem('burst').value = '{burst}';
            f.elements.namedItem('seed').value = '7';
            f.elements.namedItem('runs').value = '1';
            f.dispatchEvent(new Event('input', {{ bubbles: true }}));
            return true; }})()",
        scenario = json!(scenario),
        presets = json!(presets),
        name = json!(custom.0),
        policy = json!(custom.1),
    );
    page.eval(&script).await.unwrap();
}

/// Starts the comparison the form holds and waits for its own page; returns its id.
async fn start_from_the_form(page: &super::cdp::Page) -> String {
    page.click("[data-start]").await;
    let path = wait_for_navigation(
        page,
        "document.readyState !== 'loading' && location.pathname.startsWith('/compare/') \
         && document.getElementById('compare')?.dataset.comparison && location.pathname",
    )
    .await;
    path.as_str().unwrap().trim_start_matches("/compare/").to_owned()
}

/// Polls `expression` across a navigation (while the old document goes, an evaluation may
/// fail) until it is a non-empty string.
async fn wait_for_navigation(page: &super::cdp::Page, expression: &str) -> Value {
    let start = std::time::Instant::now();
    loop {
        if let Ok(value) = page.eval(expression).await
            && value.as_str().is_some_and(|s| !s.is_empty())
        {
            return value;
        }
        assert!(start.elapsed() < super::PATIENCE, "the comparison's page never opened");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// The error under the form, once it shows.
async fn form_error(page: &super::cdp::Page) -> String {
    let shown = wait_for(
        page,
        "the form's error",
        "(e => !e.hidden && e.textContent)(document.querySelector('[data-form-error]'))",
    )
    .await;
    shown.as_str().unwrap().to_owned()
}

/// Every cell of the table: policy -> row -> the raw value (null when none), plus the rows
/// where the policy is marked best.
const TABLE: &str = "(() => {
    const out = {};
    for (const td of document.querySelectorAll('[data-table] td[data-row][data-policy]')) {
        const p = (out[td.dataset.policy] ??= { values: {}, best: [] });
        p.values[td.dataset.row] = td.dataset.value === '' ? null : Number(td.dataset.value);
        if (td.dataset.best === 'true') {
            p.best.push(td.dataset.row);
            if (!td.querySelector('strong') || !td.textContent.includes('best')) throw new Error('a best cell without its cues');
        }
    }
    return out;
})()";

/// Every chart: policy -> [done, bars drawn, requests drawn].
const CHARTS: &str = "Object.fromEntries([...document.querySelectorAll('[data-chart]')].map(c => {
    const plot = c.querySelector('[data-load-plot]');
    return [c.dataset.policy, [c.dataset.done === 'true', c.querySelectorAll('[data-load-bar]').length,
        Number(plot.dataset.requests), plot.getAttribute('aria-label')]];
}))";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_comparison_starts_from_the_form_runs_to_the_end_and_reopens_from_its_address() {
    let Some(browser) = browser() else { return };
    let server = Server::start().await;
    let page = browser.page().await;
    page.set_viewport(1280, 900).await;
    page.navigate(&server.url("/compare")).await;

    // One policy is not a comparison: the page says so and stays.
    fill_form(&page, "overload", &["no-jitter"], ("", ""), 20).await;
    let count = page.eval("document.querySelector('[data-policy-count]').textContent").await.unwrap();
    assert_eq!(count, "1 chosen: choose at least 2");
    page.click("[data-start]").await;
    let error = form_error(&page).await;
    assert!(error.contains("2 to 5"), "{error}");

    // A custom policy the server cannot use: its refusal, in its words, under the form.
    fill_form(&page, "overload", &["no-jitter"], ("mine", r#"{"jitter": "sideways"}"#), 20).await;
    page.click("[data-start]").await;
    let error = form_error(&page).await;
    assert!(error.starts_with("Not started: ") && error.contains("mine"), "{error}");
    assert_eq!(page.eval("location.pathname").await.unwrap(), "/compare");
    page.screenshot("compare-form-refused-1280").await;

    // Two presets, a small overload: started, and on the comparison's own address.
    fill_form(&page, "overload", &["no-jitter", "full-jitter"], ("", ""), 20).await;
    let id = start_from_the_form(&page).await;
    let path = format!("/compare/{id}");
    wait_for(&page, "the comparison to finish", "document.getElementById('compare').dataset.done === 'true'")
        .await;

    let table = page.eval(TABLE).await.unwrap();
    let charts = page.eval(CHARTS).await.unwrap();
    let report: Value = server.get_json(&format!("/api/comparisons/{id}")).await;
    assert_eq!(report["done"], true, "{report}");
    for policy in ["no-jitter", "full-jitter"] {
        let shown = &table[policy]["values"];
        // The run's last try (the machine may have kept the first late, and it ran again).
        let columns = report["columns"].as_array().unwrap();
        let column = columns.iter().rfind(|c| c["policy"] == policy).unwrap();
        let figures = &column["figures"];
        assert_eq!(shown["messages"], 20, "{policy}: {shown}");
        let settled = shown["delivered"].as_u64().unwrap() + shown["dead_letter"].as_u64().unwrap();
        assert_eq!(settled, 20, "{policy}: every message delivered or dead-lettered: {shown}");
        assert!(shown["requests"].as_u64().unwrap() >= 20, "{policy}: {shown}");
        assert!(shown["drain_ms"].as_u64().is_some(), "{policy} drained: {shown}");
        assert_eq!(shown["applied_twice"], 0, "{policy}: {shown}");
        // The table shows what the server measured.
        for row in ["requests", "delivered", "dead_letter", "drain_ms", "peak_requests_per_100ms", "wasted"] {
            assert_eq!(shown[row], figures[row], "{policy} {row}");
        }
        // The chart drew that lab's load: bars, and every request the table counts.
        let chart = &charts[policy];
        assert_eq!(chart[0], true, "{policy}'s chart is done: {chart}");
        assert!(chart[1].as_u64().unwrap() > 0, "{policy} has load bars: {chart}");
        assert_eq!(chart[2], shown["requests"], "{policy}'s chart counts its requests: {chart}");
        // The capacity line in the chart's units: 2 workers of 40 ms finish 5 per 100 ms.
        assert!(
            chart[3]
                .as_str()
                .unwrap()
                .contains("capacity: finishes about 5 per 100 ms (2 at once, 40 ms each)"),
            "{chart}"
        );
    }
    // One run is one sample: no verdict, no cell crowned, and the page says how many runs a
    // verdict needs and which test it would take.
    assert_eq!(report["verdict"]["best"], json!([]), "{}", report["verdict"]);
    for policy in ["no-jitter", "full-jitter"] {
        assert_eq!(table[policy]["best"], json!([]), "{policy} is marked best on nothing");
    }
    let verdict = page.eval("document.querySelector('[data-verdict]').textContent").await.unwrap();
    let verdict = verdict.as_str().unwrap();
    assert!(verdict.starts_with("The question: requests_per_delivered. No verdict"), "{verdict}");
    assert!(
        verdict.contains("A verdict needs 4 runs of each policy") && verdict.contains("Mann-Whitney"),
        "{verdict}"
    );
    let key = page
        .eval("[...document.querySelectorAll('[data-table] tr[data-key-figure]')].map(r => r.dataset.row)")
        .await
        .unwrap();
    assert_eq!(key, json!(["requests_per_delivered"]), "the question's row is marked, and only it");
    let first = page.eval("document.querySelector('[data-table] tbody tr').dataset.row").await.unwrap();
    assert_eq!(first, "requests_per_delivered", "the question comes first");
    let links = page
        .eval("[...document.querySelectorAll('.cmp-col-name')].map(a => a.getAttribute('href'))")
        .await
        .unwrap();
    // One run each: a column per policy, linking to its run's last try.
    let all = report["columns"].as_array().unwrap();
    let labs: Vec<Value> = ["no-jitter", "full-jitter"]
        .iter()
        .map(|p| all.iter().rfind(|c| c["policy"] == *p).unwrap()["lab_url"].clone())
        .collect();
    assert_eq!(links, json!(labs), "each column links to its lab");
    // Each column holds its policy's full settings, as the document gives them.
    let settings = page
        .eval("[...document.querySelectorAll('[data-table] [data-settings]')].map(p => JSON.parse(p.textContent))")
        .await
        .unwrap();
    let expected: Vec<Value> =
        report["policies"].as_array().unwrap().iter().map(|p| p["policy"].clone()).collect();
    assert!(same(&settings, &json!(expected)), "each column's settings: {settings} vs {expected:?}");
    assert_eq!(settings[0]["jitter"], "none");
    assert_eq!(settings[1]["jitter"], "full");
    page.screenshot("compare-done-1280").await;

    // The address opens the same comparison again, already done.
    page.navigate(&server.url(&path)).await;
    wait_for(&page, "the reopened comparison", "document.getElementById('compare').dataset.done === 'true'")
        .await;
    // The counts are settled for good once done (measured times may still move by a few ms
    // as the server re-measures them).
    let reopened = page.eval(TABLE).await.unwrap();
    for policy in ["no-jitter", "full-jitter"] {
        for row in ["messages", "requests", "delivered", "dead_letter", "applied_twice"] {
            let (then, now) = (&table[policy]["values"][row], &reopened[policy]["values"][row]);
            assert_eq!(then, now, "{policy} {row} reopened");
        }
    }

    // On a phone the page fits the width; the table scrolls within itself.
    page.set_viewport(375, 812).await;
    page.navigate(&server.url(&path)).await;
    wait_for(
        &page,
        "the comparison on a phone",
        "document.getElementById('compare').dataset.done === 'true'",
    )
    .await;
    let widths = page.eval("[document.documentElement.scrollWidth, window.innerWidth]").await.unwrap();
    assert!(widths[0].as_u64() <= Some(375), "the page scrolls sideways on a phone: {widths}");
    page.screenshot("compare-done-phone-375").await;

    // The refused start logged its 422 as a failed load; nothing else went wrong.
    let errors = page.console_errors();
    let unexpected: Vec<_> = errors.iter().filter(|e| e.source != "network").cloned().collect();
    assert!(unexpected.is_empty(), "the page reported errors:\n{}", list(&unexpected));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_policy_is_one_chosen_and_the_table_says_it_scrolls_on_a_phone() {
    let Some(browser) = browser() else { return };
    let server = Server::start().await;
    let page = browser.page().await;
    page.set_viewport(375, 812).await;
    page.navigate(&server.url("/compare")).await;
    fill_form(&page, "flaky", &["no-jitter"], ("", ""), 5).await;
    page.click("[data-start]").await;
    let error = form_error(&page).await;
    assert!(error.contains("1 is chosen"), "{error}");

    // A finished comparison of three, opened on a phone.
    let body = json!({"scenario": "flaky", "burst": 5, "seed": 1, "policies": ["none", "full", "equal"]});
    let id = start_comparison(&server, &body).await;
    page.navigate(&server.url(&format!("/compare/{id}"))).await;
    wait_for(&page, "the table", "document.querySelectorAll('[data-table] td[data-policy]').length > 0")
        .await;
    let shown = page
        .eval(
            "(() => { const w = document.querySelector('.cmp-table').closest('.table-wrap');
                const hint = document.querySelector('[data-scroll-hint]');
                const name = document.querySelector('.cmp-table th[scope=\"row\"]');
                return { overflows: w.scrollWidth > w.clientWidth, hint: !hint.hidden && hint.offsetParent !== null,
                    sticky: getComputedStyle(name).position, page: document.documentElement.scrollWidth }; })()",
        )
        .await
        .unwrap();
    assert_eq!(shown["overflows"], true, "three policies do not fit 375 px: {shown}");
    assert_eq!(shown["hint"], true, "the page says the table scrolls: {shown}");
    assert_eq!(shown["sticky"], "sticky", "the row names stay in view: {shown}");
    assert!(shown["page"].as_u64() <= Some(375), "only the table scrolls: {shown}");
    page.screenshot("compare-table-phone-375").await;
    let errors = page.console_errors();
    assert!(errors.is_empty(), "{}", list(&errors));
}

/// With several runs, every cell of the medians' table: policy -> row -> what it shows (the
/// figure's text, the range's text, and the raw median, least, most and each run's value).
const SPREADS: &str = "(() => {
    const out = {};
    for (const td of document.querySelectorAll('[data-table] td[data-row][data-policy]')) {
        if (td.dataset.run !== undefined) throw new Error('a column per run in the medians table');
        const num = (v) => (v === '' ? null : Number(v));
        (out[td.dataset.policy] ??= {})[td.dataset.row] = {
            text: td.firstElementChild.textContent,
            range: td.querySelector('.cmp-range')?.textContent ?? null,
            median: num(td.dataset.value), min: num(td.dataset.min), max: num(td.dataset.max),
            runs: JSON.parse(td.dataset.runs), title: td.title,
            best: td.dataset.best === 'true' && td.textContent.includes('best') && !!td.querySelector('strong'),
        };
    }
    return out;
})()";

/// Equal JSON, numbers compared as numbers (the page writes 2.0 as 2).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

/// A count as the page writes it: whole numbers without decimals.
fn whole(value: &Value) -> String {
    let x = value.as_f64().unwrap();
    if x.fract() == 0.0 { format!("{x:.0}") } else { format!("{x}") }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_three_runs_the_table_shows_each_policys_median_and_range_as_the_api_gives_them() {
    let Some(browser) = browser() else { return };
    let server = Server::start().await;
    // Every run counts however late its timers ran. The spread is over valid runs, and a run
    // whose timers ran more than 20 ms late (the default) is not valid: on CI's loaded machine
    // no figure had a spread, as when a policy is left with one valid run.
    let body = json!({"scenario": "flaky", "burst": 10, "seed": 3, "runs": 3, "late_threshold_ms": 1000,
        "policies": ["none", "full"]});
    let id = start_comparison(&server, &body).await;
    let page = browser.page().await;
    page.set_viewport(1280, 900).await;
    page.navigate(&server.url(&format!("/compare/{id}"))).await;
    wait_for(&page, "the comparison to finish", "document.getElementById('compare').dataset.done === 'true'")
        .await;
    let shown = page.eval(SPREADS).await.unwrap();
    let report: Value = server.get_json(&format!("/api/comparisons/{id}")).await;
    assert_eq!((report["done"].as_bool(), report["runs"].as_u64()), (Some(true), Some(3)), "{report}");
    let heads = page.eval("document.querySelectorAll('[data-table] th.cmp-col').length").await.unwrap();
    assert_eq!(heads, 2, "a column per policy, not per run");
    let status = page.eval("document.querySelector('[data-status]').textContent").await.unwrap();
    assert_eq!(status, "Done: both policies have settled every message in each of their 3 runs.");
    let states = page
        .eval("[...document.querySelectorAll('[data-column-state]')].map(s => s.textContent)")
        .await
        .unwrap();
    for state in states.as_array().unwrap() {
        // ", 1 tried again" when the machine kept a run late.
        assert!(state.as_str().unwrap().starts_with("done: all 3 runs"), "{states}");
    }

    let columns = report["columns"].as_array().unwrap();
    let (mut compared, mut valid_runs) = (0, Vec::new());
    for summary in report["policies"].as_array().unwrap() {
        let policy = summary["name"].as_str().unwrap();
        // Every try of every run, in the document's order (a run tried again comes at the end).
        let runs: Vec<&Value> = columns.iter().filter(|c| c["policy"] == policy).collect();
        assert_eq!(runs.iter().filter(|c| c["attempt"] == 0).count(), 3, "{policy}");
        let valid = summary["runs"].as_array().unwrap().iter().filter(|r| r["valid"] == true).count();
        valid_runs.push(valid);
        for (key, median) in summary["median"].as_object().unwrap() {
            let range = &summary["range"][key];
            let spread = json!({"median": median, "min": range[0], "max": range[1]});
            // Summarized but not a row of the page's table.
            if key == "offered" {
                continue;
            }
            let (row, each): (String, Vec<Value>) = match key.strip_prefix("dead_letter_by_cause.") {
                Some(cause) => (
                    format!("dead_letter.{cause}"),
                    runs.iter()
                        .map(|c| c["figures"]["dead_letter_by_cause"].get(cause).cloned().unwrap_or(json!(0)))
                        .collect(),
                ),
                None => (key.clone(), runs.iter().map(|c| c["figures"][key].clone()).collect()),
            };
            let cell = &shown[policy][&row];
            assert!(cell.is_object(), "{policy} has no cell for {row}: {}", shown[policy]);
            for part in ["median", "min", "max"] {
                assert_eq!(
                    cell[part].as_f64(),
                    spread[part].as_f64(),
                    "{policy} {row} {part}: {cell} vs {spread}"
                );
            }
            let each: Vec<Option<f64>> = each.iter().map(Value::as_f64).collect();
            let seen: Vec<Option<f64>> = cell["runs"].as_array().unwrap().iter().map(Value::as_f64).collect();
            assert_eq!(seen, each, "{policy} {row}: each run's value is there");
            let plural = if valid == 1 { "" } else { "s" };
            let title = format!("median of {valid} valid run{plural}; each run: ");
            assert!(cell["title"].as_str().unwrap().starts_with(&title), "{cell}");
            if !["requests_per_delivered", "drain_ms", "latency_p50_ms", "latency_p99_ms"]
                .contains(&row.as_str())
            {
                assert_eq!(cell["text"], whole(&spread["median"]), "{policy} {row}");
                // A range only where the runs differ.
                let range = format!("[{}–{}]", whole(&spread["min"]), whole(&spread["max"]));
                let range = if spread["min"] == spread["max"] { Value::Null } else { json!(range) };
                assert_eq!(cell["range"], range, "{policy} {row}");
            }
            compared += 1;
        }
    }
    assert!(compared >= 20, "every figure of both policies compared: {compared}");
    // Runs differ (their seeds do): at least one range is more than a point.
    let spreads: Vec<&Value> =
        shown.as_object().unwrap().values().flat_map(|p| p.as_object().unwrap().values()).collect();
    assert!(
        spreads.iter().any(|c| c["min"] != c["max"]),
        "some figure varies between runs (valid runs: {valid_runs:?})"
    );

    // Three runs are fewer than flaky's test needs (five): nothing crowned. "Same for all"
    // exactly on the rows where the server found every valid run of both gave one value.
    assert_eq!(report["verdict"]["best"], json!([]), "{}", report["verdict"]);
    let same = report["same_for_all"].as_array().unwrap();
    for row in shown["none"].as_object().unwrap().keys() {
        assert!(["none", "full"].iter().all(|p| shown[p][row]["best"] == false), "nothing best on {row}");
        let tie =
            format!("!document.querySelector('[data-table] tr[data-row={}] .cmp-tie').hidden", json!(row));
        assert_eq!(page.eval(&tie).await.unwrap(), same.contains(&json!(row)), "{row}: {same:?}");
    }
    page.screenshot("compare-runs-medians-1280").await;

    // Each run, a column of its own, on demand: the figures the API has for each run's lab.
    page.click("[data-each-run]").await;
    let every = format!("document.querySelectorAll('[data-table] th.cmp-col').length === {}", columns.len());
    wait_for(&page, "a column per run (and per try of a run tried again)", &every).await;
    let per_run = page
        .eval(
            "[...document.querySelectorAll('[data-table] td[data-row=requests]')].map(td =>
                [td.dataset.policy, Number(td.dataset.run), Number(td.dataset.value), td.dataset.best])",
        )
        .await
        .unwrap();
    let expected: Vec<Value> =
        columns.iter().map(|c| json!([c["policy"], c["run"], c["figures"]["requests"], "false"])).collect();
    assert_eq!(per_run, json!(expected), "each run's requests, none of them crowned");
    let charts = page.eval("document.querySelectorAll('[data-chart][data-run]').length").await.unwrap();
    assert_eq!(charts, json!(columns.len()), "a chart per run (and try), each named by its run");
    page.screenshot("compare-runs-each-1280").await;
    let errors = page.console_errors();
    assert!(errors.is_empty(), "{}", list(&errors));
}

/// Whether `text` is `value` as the page writes a ratio: two decimals, rounded.
fn two_decimals(text: &Value, value: f64) -> bool {
    let text = text.as_str().unwrap_or_default();
    let decimals = text.split_once('.').map(|(_, d)| d.len());
    decimals == Some(2) && text.parse::<f64>().is_ok_and(|shown| (shown - value).abs() <= 0.005 + 1e-9)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metastable_comparisons_goodput_after_the_trigger_row_shows_the_apis_figures() {
    let Some(browser) = browser() else { return };
    // Steady traffic into four labs at once: it runs alone, as the other metastable runs do.
    let server = Server::start_alone().await;
    // The scenario's own traffic and slowdown; two runs each, so the row shows a median and a
    // range; two policies that retry little, so every lab drains soon after its traffic ends.
    let one_try = json!({"name": "one try", "policy": {"max_attempts": 1}});
    // What the page shows of the runs is checked here, not whether the machine kept them on
    // time: a lenient threshold keeps both runs in.
    let body = json!({"scenario": "metastable", "seed": 19, "runs": 2, "late_threshold_ms": 1000, "policies": ["budget", one_try]});
    let id = start_comparison(&server, &body).await;
    let page = browser.page().await;
    let took = watch_to_the_end(&page, &server, &id).await;
    eprintln!("the comparison ran {:.1} s", took.as_secs_f64());
    let shown = page.eval(SPREADS).await.unwrap();
    let report: Value = server.get_json(&format!("/api/comparisons/{id}")).await;
    assert_eq!((report["done"].as_bool(), report["runs"].as_u64()), (Some(true), Some(2)), "{report}");
    let label = page
        .eval("document.querySelector('[data-table] tr[data-row=goodput_after_trigger] th').textContent")
        .await
        .unwrap();
    assert!(
        label.as_str().unwrap().starts_with("goodput after the trigger (delivered per new message, 10 s)"),
        "{label}"
    );

    let columns = report["columns"].as_array().unwrap();
    let policies = ["budget", "one try"];
    for policy in policies {
        let summary = report["policies"].as_array().unwrap().iter().find(|s| s["name"] == policy).unwrap();
        let range = &summary["range"]["goodput_after_trigger"];
        let spread =
            &json!({"median": summary["median"]["goodput_after_trigger"], "min": range[0], "max": range[1]});
        let valid = summary["runs"].as_array().unwrap().iter().filter(|r| r["valid"] == true).count();
        let mut runs: Vec<&Value> = columns.iter().filter(|c| c["policy"] == policy).collect();
        runs.sort_by_key(|c| c["run"].as_u64());
        let each: Vec<f64> = runs
            .iter()
            .map(|c| c["figures"]["goodput_after_trigger"].as_f64().expect("measured in every run"))
            .collect();
        let cell = &shown[policy]["goodput_after_trigger"];
        eprintln!("{policy}: the API says {spread}, each run {each:?}; the page shows {cell}");
        for part in ["median", "min", "max"] {
            assert_eq!(cell[part].as_f64(), spread[part].as_f64(), "{policy} {part}: {cell} vs {spread}");
        }
        let seen: Vec<Option<f64>> = cell["runs"].as_array().unwrap().iter().map(Value::as_f64).collect();
        assert_eq!(seen, each.iter().map(|&v| Some(v)).collect::<Vec<_>>(), "{policy}: each run's value");
        assert!(two_decimals(&cell["text"], spread["median"].as_f64().unwrap()), "{policy}: {cell}");
        if spread["min"] == spread["max"] {
            assert!(cell["range"].is_null(), "no range for one value: {cell}");
        } else {
            let range = cell["range"].as_str().unwrap();
            let (min, max) = range
                .strip_prefix('[')
                .and_then(|r| r.strip_suffix(']'))
                .and_then(|r| r.split_once('–'))
                .unwrap_or_else(|| panic!("{policy}: the range reads {range}"));
            assert!(two_decimals(&json!(min), spread["min"].as_f64().unwrap()), "{policy}: {range}");
            assert!(two_decimals(&json!(max), spread["max"].as_f64().unwrap()), "{policy}: {range}");
        }
        let title = cell["title"].as_str().unwrap();
        let written: Vec<String> = each.iter().map(|v| format!("{v:.2}")).collect();
        let plural = if valid == 1 { "" } else { "s" };
        assert_eq!(
            title,
            format!("median of {valid} valid run{plural}; each run: {}", written.join(", ")),
            "{policy}"
        );
    }
    // Two runs are fewer than the test needs: nothing crowned on the question's row.
    assert_eq!(report["verdict"]["best"], json!([]), "{}", report["verdict"]);
    let marked: Vec<&str> =
        policies.into_iter().filter(|p| shown[p]["goodput_after_trigger"]["best"] == true).collect();
    assert!(marked.is_empty(), "{marked:?}");

    // Each run in a column of its own: each lab's own figure.
    page.click("[data-each-run]").await;
    wait_for(&page, "a column per run", "document.querySelectorAll('[data-table] th.cmp-col').length === 4")
        .await;
    let per_run = page
        .eval(
            "[...document.querySelectorAll('[data-table] td[data-row=goodput_after_trigger]')].map(td =>
                [td.dataset.policy, Number(td.dataset.run), Number(td.dataset.value), td.firstElementChild.textContent])",
        )
        .await
        .unwrap();
    let per_run = per_run.as_array().unwrap();
    assert_eq!(per_run.len(), columns.len(), "{per_run:?}");
    for (cell, column) in per_run.iter().zip(columns) {
        let value = column["figures"]["goodput_after_trigger"].as_f64().unwrap();
        assert_eq!((&cell[0], &cell[1], cell[2].as_f64()), (&column["policy"], &column["run"], Some(value)));
        assert!(two_decimals(&cell[3], value), "{cell} vs {value}");
    }
    page.screenshot("compare-metastable-goodput-1280").await;
    let errors = page.console_errors();
    assert!(errors.is_empty(), "{}", list(&errors));
}

/// Opens comparison `id`'s page at 1280 x 900 and waits for it to say it is done: under steady
/// traffic (16 s, then the drain) longer than one wait's patience. Gives how long that took.
async fn watch_to_the_end(page: &super::cdp::Page, server: &Server, id: &str) -> std::time::Duration {
    page.set_viewport(1280, 900).await;
    page.navigate(&server.url(&format!("/compare/{id}"))).await;
    let started = std::time::Instant::now();
    while page.eval("document.getElementById('compare').dataset.done === 'true'").await.unwrap() != true {
        assert!(started.elapsed() < super::PATIENCE * 3, "the comparison never finished");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    started.elapsed()
}

/// Starts a comparison through the API and gives its id.
pub(crate) async fn start_comparison(server: &Server, body: &Value) -> String {
    let created: Value = server
        .http
        .post(server.url("/api/comparisons"))
        .json(body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    created["id"].as_str().unwrap_or_else(|| panic!("not started: {created}")).to_owned()
}

/// "open in a lab" under a column opens a new lab whose policy is the column's (as the API's
/// document gives it) and whose endpoint is the scenario's, with nothing sent yet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_in_a_lab_opens_a_lab_with_the_columns_policy_and_the_scenarios_endpoint() {
    let Some(browser) = browser() else { return };
    let server = Server::start().await;
    let page = browser.page().await;
    page.set_viewport(1280, 900).await;
    let body = json!({"scenario": "overload", "burst": 20, "seed": 5, "runs": 1, "policies": ["no-jitter", "breaker-fail-fast"]});
    let id = start_comparison(&server, &body).await;
    page.navigate(&server.url(&format!("/compare/{id}"))).await;
    wait_for(&page, "the comparison to finish", "document.getElementById('compare').dataset.done === 'true'")
        .await;
    let report: Value = server.get_json(&format!("/api/comparisons/{id}")).await;
    let column =
        report["policies"].as_array().unwrap().iter().find(|p| p["name"] == "breaker-fail-fast").unwrap();
    let run_lab = report["columns"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["policy"] == "breaker-fail-fast")
        .unwrap()["lab"]
        .as_str()
        .unwrap()
        .to_owned();

    page.click("[data-open-in-lab='breaker-fail-fast']").await;
    let path = wait_for_navigation(
        &page,
        "document.readyState !== 'loading' && location.pathname.startsWith('/labs/') && location.pathname",
    )
    .await;
    let lab = path.as_str().unwrap().trim_start_matches("/labs/").to_owned();
    assert_ne!(lab, run_lab, "a new lab, not the run's");
    let snapshot = server.snapshot(&lab).await;
    let mut policy = snapshot["policy"].clone();
    policy.as_object_mut().unwrap().remove("bands"); // drawn from the settings, not one of them
    assert_eq!(policy, column["policy"], "the column's policy, setting for setting");
    assert_eq!(snapshot["policy"]["breaker"]["refused"], "give_up");
    let run = server.snapshot(&run_lab).await;
    for field in ["mode", "capacity", "queue", "latency_ms", "retry_after_s"] {
        assert_eq!(
            snapshot["downstream"][field], run["downstream"][field],
            "the scenario's endpoint: {field}"
        );
    }
    assert_eq!(snapshot["downstream"]["mode"], "overloaded");
    assert_eq!(snapshot["downstream"]["capacity"], 2, "overload's capacity for a burst of 20");
    assert_eq!(snapshot["messages"].as_array().map(Vec::len), Some(0), "ready to run: nothing sent yet");
}

/// On a metastable comparison each policy's chart holds the goodput chart: offered load and
/// goodput per second of its run, equal to its lab's load bins summed per second, the trigger's
/// start and end marked where the scenario puts them; the policy without protection shows the
/// collapse (goodput under half of the offered load over the 10 s after the slowdown ended).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metastable_comparisons_goodput_charts_equal_the_labs_bins_and_show_the_collapse() {
    let Some(browser) = browser() else { return };
    let server = Server::start_alone().await;
    let body = json!({"scenario": "metastable", "seed": 19, "runs": 1, "late_threshold_ms": 1000, "policies": ["no-jitter", "budget"]});
    let id = start_comparison(&server, &body).await;
    let page = browser.page().await;
    watch_to_the_end(&page, &server, &id).await;
    let report: Value = server.get_json(&format!("/api/comparisons/{id}")).await;
    assert_eq!(report["trigger_ms"], json!([3000, 5000]), "{report}");
    let charts = page
        .eval(
            "[...document.querySelectorAll('[data-chart]')].map(c => { const svg = c.querySelector('[data-goodput] svg');
                const line = n => svg.querySelector(`[data-line=${n}]`)?.dataset.values.split(',').map(Number);
                return { policy: c.dataset.policy, height: svg.getBoundingClientRect().height,
                  from: Number(svg.dataset.fromS), to: Number(svg.dataset.toS),
                  offered: line('offered'), goodput: line('goodput'), name: svg.getAttribute('aria-label'),
                  marks: [...svg.querySelectorAll('[data-mark]')].map(m => Number(m.dataset.tMs)) }; })",
        )
        .await
        .unwrap();
    let charts = charts.as_array().unwrap();
    assert_eq!(charts.len(), 2, "{charts:?}");
    for chart in charts {
        let policy = chart["policy"].as_str().unwrap();
        let column = report["columns"].as_array().unwrap().iter().rfind(|c| c["policy"] == policy).unwrap();
        let started_ms = column["started_ms"].as_u64().unwrap();
        assert!(chart["height"].as_f64().unwrap() >= 200.0, "{policy}: {chart}");
        assert!(chart["name"].as_str().unwrap().contains("goodput"), "{chart}");
        assert_eq!(
            chart["marks"],
            json!([started_ms + 3000, started_ms + 5000]),
            "{policy}: the trigger marked"
        );
        // The lab's bins, summed per second as the chart sums them.
        let snapshot = server.snapshot(column["lab"].as_str().unwrap()).await;
        let (from, to) = (chart["from"].as_u64().unwrap(), chart["to"].as_u64().unwrap());
        assert_eq!(from, started_ms / 1000, "{policy}: from the run's start");
        assert!(to >= from + 16, "{policy}: the 16 s of traffic drawn: {chart}");
        let mut per_second = vec![(0.0, 0.0); (to - from + 1) as usize];
        let bin_ms = snapshot["load"]["bin_ms"].as_u64().unwrap();
        for bin in snapshot["load"]["bins"].as_array().unwrap() {
            let t = bin["t_ms"].as_u64().unwrap();
            let width = bin["width_ms"].as_u64().unwrap_or(bin_ms);
            let (first, last) = (t / 1000, (t + width - 1) / 1000);
            let share = 1.0 / (last - first + 1) as f64;
            for s in first.max(from)..=last.min(to) {
                let slot = &mut per_second[(s - from) as usize];
                slot.0 += bin["offered"].as_f64().unwrap_or(0.0) * share;
                slot.1 += bin["delivered"].as_f64().unwrap_or(0.0) * share;
            }
        }
        let shown = |line: &str| -> Vec<f64> {
            chart[line].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect()
        };
        let (offered, goodput) = (shown("offered"), shown("goodput"));
        let near = |a: f64, b: f64| (a - b).abs() < 0.051;
        for (i, (o, d)) in per_second.iter().enumerate() {
            assert!(
                near(offered[i], *o) && near(goodput[i], *d),
                "{policy} second {i}: chart {} / {} vs API {o} / {d}",
                offered[i],
                goodput[i]
            );
        }
        eprintln!("{policy}: offered {offered:?}\n  goodput {goodput:?}");
        if policy == "no-jitter" {
            // The 10 s after the slowdown ended, in the chart's seconds.
            let end = ((started_ms + 5000) / 1000 - from) as usize + 1;
            let window = end..(end + 10).min(offered.len());
            let (o, d): (f64, f64) = (offered[window.clone()].iter().sum(), goodput[window].iter().sum());
            assert!(d < o / 2.0, "no-jitter collapses: goodput {d} of {o} offered after the trigger");
        }
    }
    page.screenshot("compare-metastable-goodput-charts-1280").await;
    let errors = page.console_errors();
    assert!(errors.is_empty(), "{}", list(&errors));
}

/// Every cell of the grid: [defence, policy, median, least, most] as the page holds them.
const GRID: &str = "[...document.querySelectorAll('[data-grid] td[data-defence][data-policy]')].map(td =>
    [td.dataset.defence, td.dataset.policy, td.dataset.value === '' ? null : Number(td.dataset.value),
     td.dataset.min === '' ? null : Number(td.dataset.min), td.dataset.max === '' ? null : Number(td.dataset.max),
     td.querySelector('[data-cell-figure]').textContent])";

/// A grid started from the form (two defences chosen, two policies) draws one cell per
/// (defence, policy) with the API's median and range of the key figure, names no best cell,
/// and a cell's "open in a lab" opens a lab with that cell's policy and defences.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grid_draws_a_cell_per_defence_and_policy_and_opens_each_in_its_lab() {
    let Some(browser) = browser() else { return };
    // Alone: its runs are judged late past 20 ms behind schedule, and beside another test's
    // Chromium on these two cores a cell's run and its re-run both were (CI caught it).
    let server = Server::start_alone().await;
    let page = browser.page().await;
    page.set_viewport(1280, 900).await;
    page.navigate(&server.url("/compare")).await;
    fill_form(&page, "overload", &["no-jitter", "full-jitter"], ("", ""), 10).await;
    page.eval(
        "(() => { const s = document.querySelectorAll('select[data-defence]');
            s[0].value = 'none'; s[1].value = 'codel';
            document.getElementById('compare-form').dispatchEvent(new Event('input', { bubbles: true }));
            return true; })()",
    )
    .await
    .unwrap();
    let id = start_from_the_form(&page).await;
    wait_for(&page, "the grid to finish", "document.getElementById('compare').dataset.done === 'true'").await;
    let report: Value = server.get_json(&format!("/api/comparisons/{id}")).await;
    let key = report["key_figure"][0].as_str().unwrap();
    let rows = report["grid"]["rows"].as_array().unwrap();
    assert_eq!(rows[1]["defences"]["queue"], "codel", "the form sent the chosen defences: {report}");

    let drawn = page.eval(GRID).await.unwrap();
    let drawn = drawn.as_array().unwrap();
    assert_eq!(drawn.len(), 4, "one cell per (defence, policy): {drawn:?}");
    for cell in report["grid"]["cells"].as_array().unwrap() {
        let shown = drawn
            .iter()
            .find(|d| d[0] == cell["defence"] && d[1] == cell["policy"])
            .unwrap_or_else(|| panic!("no cell drawn for {cell}"));
        assert!(same(&shown[2], &cell["median"][key]), "{shown:?} against {cell}");
        assert!(same(&shown[3], &cell["range"][key][0]) && same(&shown[4], &cell["range"][key][1]), "{cell}");
        // A figure in every cell that had a valid run; one whose runs all ran late (a loaded
        // machine: CI caught one) says so instead of drawing nothing.
        match cell["valid_runs"].as_u64() {
            Some(0) => assert_eq!(shown[5], "no valid run: each ran late", "{cell}"),
            _ => assert!(shown[2].as_f64().is_some_and(|m| m >= 1.0), "a figure in the cell: {shown:?}"),
        }
    }
    // No cell is named best, and the page says why; the per-policy table stands aside.
    let note = page.eval("document.querySelector('[data-grid-note]').textContent").await.unwrap();
    assert!(note.as_str().unwrap().contains("No cell is marked best"), "{note}");
    assert_eq!(
        page.eval("document.querySelectorAll('[data-grid] .cmp-best, [data-grid] strong').length")
            .await
            .unwrap(),
        0
    );
    assert_eq!(page.eval("document.querySelector('[data-table-panel]').hidden").await.unwrap(), true);
    page.screenshot("compare-grid-1280").await;
    let again = page.eval("document.querySelector('[data-again-link]').href").await.unwrap();
    let again = again.as_str().unwrap().to_owned();
    assert!(again.contains("defence=none&defence=codel"), "run again keeps the defences: {again}");

    page.click("td[data-defence='codel'][data-policy='full-jitter'] [data-open-cell]").await;
    let path = wait_for_navigation(
        &page,
        "document.readyState !== 'loading' && location.pathname.startsWith('/labs/') && location.pathname",
    )
    .await;
    let lab = path.as_str().unwrap().trim_start_matches("/labs/").to_owned();
    let snapshot = server.snapshot(&lab).await;
    let settings =
        report["policies"].as_array().unwrap().iter().find(|p| p["name"] == "full-jitter").unwrap();
    let mut policy = snapshot["policy"].clone();
    policy.as_object_mut().unwrap().remove("bands");
    assert_eq!(policy, settings["policy"], "the cell's policy, setting for setting");
    assert_eq!(snapshot["downstream"]["defences"], rows[1]["defences"], "the cell's defences");
    assert_eq!(snapshot["downstream"]["mode"], "overloaded");
    assert_eq!(snapshot["messages"].as_array().map(Vec::len), Some(0), "ready to run: nothing sent yet");

    // "Change it and run again" fills the form in with the grid's defences. The selects are
    // drawn before the page has read the kinds and the link's choices, so the wait is for the
    // first to hold a value, not for the selects alone (",," was read once on a loaded machine).
    page.navigate(&again).await;
    let chosen = wait_for(
        &page,
        "the form filled in",
        "(s => s.length && s[0].value && [...s].map(x => x.value).join(','))(document.querySelectorAll('select[data-defence]'))",
    )
    .await;
    assert_eq!(chosen, "none,codel,");
}

/// "take it home" under a column writes the column's policy as the chosen library's client: the
/// program the API gives for the same settings (the run's seed left out), and what the library
/// cannot express said beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn take_it_home_writes_the_columns_policy_as_the_chosen_librarys_client() {
    let Some(browser) = browser() else { return };
    let server = Server::start().await;
    let page = browser.page().await;
    page.set_viewport(1280, 900).await;
    let body = json!({"scenario": "outage", "burst": 5, "seed": 5, "runs": 1, "policies": ["full-jitter", "breaker-retry"]});
    let id = start_comparison(&server, &body).await;
    page.navigate(&server.url(&format!("/compare/{id}"))).await;
    // Once it is done the table is drawn for good: a redraw would close an open panel.
    wait_for(&page, "the comparison to finish", "document.getElementById('compare').dataset.done === 'true'")
        .await;
    wait_for(&page, "the column heads", "!!document.querySelector(\"[data-take-home='breaker-retry']\")")
        .await;
    let (code, said) = write_client(&page, "[data-take-home='breaker-retry']", "got").await;
    assert!(code.contains("import got from 'got'") && code.contains("calculateDelay"), "{code}");
    assert!(code.contains("\"breaker\": {"), "the column's settings in its comment: {code}");
    assert!(code.contains("\"seed\": null"), "the run's seed is left out: {code}");
    assert!(said.contains("got cannot: circuit breaker"), "{said}");

    // full-jitter keeps Retry-After as a floor: the caution says the card will warn; the box
    // that draws the jitter past the header rewrites the program and takes the caution away.
    let home = "[data-take-home='full-jitter']";
    let (code, said) = write_client(&page, home, "tenacity").await;
    assert!(said.starts_with("caution: retry_after_mode floor"), "{said}");
    assert!(code.contains("\"retry_after_mode\": \"floor\""), "{code}");
    page.eval(&format!("document.querySelector(\"{home}\").scrollIntoView()")).await.unwrap();
    page.screenshot_viewport("take-it-home-caution").await;
    page.click(&format!("{home} .cmp-above input")).await;
    let rewritten = format!(
        "document.querySelector(\"{home} pre\").textContent.includes('\"retry_after_mode\": \"jitter_above\"')"
    );
    wait_for(&page, "the program with the jitter past the header", &rewritten).await;
    let said = page.eval(&format!("document.querySelector(\"{home} ul\").textContent")).await.unwrap();
    assert_eq!(said.as_str().unwrap(), "", "no caution left");
}
