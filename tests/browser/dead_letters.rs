//! The dead-letter queue in the page, clicked through as an operator would: the counts per
//! cause and per status, a filter, a replay's dry run (with its warning while the endpoint is
//! down, and nothing changed when it is called off), a time range on the lab clock that takes
//! what the API takes for the same bounds, one letter in detail reached from the
//! table and from the timeline and back, a redrive at a rate with its progress; and a queue of
//! 10,000 letters drawn only in view, its filter answered within 100 ms.

use serde_json::Value;

use super::{Server, assert_no_console_errors, browser, choose_mode, open_new_lab, wait_counter, wait_for};

/// Reads the page's text at `selector`.
async fn text(page: &super::Page, selector: &str) -> String {
    let value = page.eval(&format!("document.querySelector('{selector}')?.textContent ?? ''")).await.unwrap();
    value.as_str().unwrap().trim().to_owned()
}

/// Sets a filter field in the dead-letter form, as typing or choosing does.
async fn set_filter(page: &super::Page, name: &str, value: &str) {
    let script = format!(
        "(() => {{ const f = document.querySelector('[data-dlq-filter]'); f.elements['{name}'].value = '{value}'; \
         f.dispatchEvent(new Event('input')); }})()"
    );
    page.eval(&script).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_filters_dry_runs_inspects_and_redrives_at_a_rate() {
    let Some(browser) = browser() else { return };
    let server = Server::start().await;
    let page = browser.page().await;
    page.set_viewport(1280, 900).await;
    let lab = open_new_lab(&page, &server).await;

    // Six letters from a down endpoint (503), two timed out against a slow one (applied).
    server.put(&lab, "policy", r#"{"max_attempts": 2}"#).await;
    choose_mode(&page, "down").await;
    server.burst(&lab, 6).await;
    wait_counter(&page, "dead_letter", 6).await;
    server.put(&lab, "downstream", r#"{"mode": "slow", "slow_ms": [300, 300]}"#).await;
    server.put(&lab, "policy", r#"{"timeout_ms": 60, "max_attempts": 1}"#).await;
    server.burst(&lab, 2).await;
    wait_counter(&page, "dead_letter", 8).await;
    let snapshot = server.snapshot(&lab).await;
    let letters = snapshot["dead_letters"].as_array().unwrap().clone();

    // The counts per cause and per status are the server's.
    let api: Value = server.get_json(&format!("/api/labs/{lab}/dead-letters")).await;
    for (field, value) in [("cause", "attempts_used_up"), ("status", "503"), ("status", "timeout")] {
        let chip = page
            .eval(&format!(
                "document.querySelector('[data-facet=\"{field}\"][data-value=\"{value}\"]')?.dataset.count"
            ))
            .await
            .unwrap();
        assert_eq!(
            chip.as_str().and_then(|c| c.parse::<u64>().ok()),
            api["facets"][field][value].as_u64(),
            "{field} {value}"
        );
    }
    assert_eq!(text(&page, "[data-dlq-depth]").await, "8");
    let oldest = letters.iter().map(|d| d["dead_lettered_unix_ms"].as_u64().unwrap()).min().unwrap();
    let shown = page.eval("document.querySelector('[data-dlq-oldest]').dataset.oldestUnixMs").await.unwrap();
    assert_eq!(shown.as_str().unwrap(), oldest.to_string(), "the oldest letter's age is measured from it");
    assert!(text(&page, "[data-dlq-oldest]").await.contains("oldest waited"));

    // A filter by status: the two timeouts.
    page.click("[data-facet=\"status\"][data-value=\"timeout\"]").await;
    wait_for(
        &page,
        "2 of 8 to match",
        "document.querySelector('[data-dlq-matched]').textContent === '2 of 8 match'",
    )
    .await;
    let rows = page.eval("[...document.querySelectorAll('#dead-body [data-dead-letter]')].map(r => Number(r.dataset.deadLetter))").await.unwrap();
    let timed_out: Vec<u64> = letters
        .iter()
        .filter(|d| d["attempts"][0]["outcome"] == "timeout")
        .map(|d| d["id"].as_u64().unwrap())
        .collect();
    assert_eq!(serde_json::from_value::<Vec<u64>>(rows).unwrap(), timed_out);
    // The same two by whether their writes were applied (the ledger's word).
    page.click("[data-facet=\"status\"][data-value=\"timeout\"]").await;
    set_filter(&page, "applied", "true").await;
    wait_for(
        &page,
        "2 applied of 8",
        "document.querySelector('[data-dlq-matched]').textContent === '2 of 8 match'",
    )
    .await;
    set_filter(&page, "applied", "").await;
    set_filter(&page, "status", "timeout").await;

    // One in detail, from the table: its key, its attempt, its write applied.
    let id = timed_out[0];
    page.click(&format!("#dead-body button[data-open-id=\"{id}\"]")).await;
    wait_for(&page, "the detail", &format!("document.querySelector('[data-dlq-detail]').dataset.id === '{id}' && !document.querySelector('[data-dlq-detail]').hidden")).await;
    let letter = letters.iter().find(|d| d["id"] == id).unwrap();
    assert_eq!(text(&page, "[data-fact=\"key\"]").await, letter["key"].as_str().unwrap());
    assert!(text(&page, "[data-fact=\"write applied\"]").await.starts_with("yes"));
    let attempt_rows =
        page.eval("document.querySelectorAll('[data-dlq-detail-attempts] tr').length").await.unwrap();
    assert_eq!(attempt_rows, 1);
    assert!(text(&page, "[data-dlq-detail-attempts] tr").await.contains("timed out"));
    page.click("[data-dlq-detail-row]").await;
    wait_for(
        &page,
        "its row to have the focus",
        &format!("document.activeElement?.dataset.openId === '{id}'"),
    )
    .await;

    // And from the timeline: a dead letter's row label opens it.
    let other = letters.iter().find(|d| d["attempts"][0]["status"] == 503).unwrap()["id"].as_u64().unwrap();
    page.eval(&format!("document.querySelector('[data-find]').value = '#{other}'; document.querySelector('[data-find]').dispatchEvent(new Event('input', {{ bubbles: true }}))")).await.unwrap();
    let label = format!(".tl-row[data-message-id=\"{other}\"] .tl-label");
    wait_for(&page, "its timeline row", &format!("document.querySelector('{label}')")).await;
    page.click(&label).await;
    wait_for(&page, "the detail from the timeline", &format!("document.querySelector('[data-dlq-detail]').dataset.id === '{other}' && !document.querySelector('[data-dlq-detail]').hidden")).await;
    assert_eq!(text(&page, "[data-fact=\"last status\"]").await, "503");
    page.click("[data-dlq-detail-close]").await;

    // A time range on the lab clock, typed as the table shows it, narrows the rows to what the
    // API answers for the same since_ms/until_ms: the six 503s were all dead-lettered before the
    // two timeouts' burst was sent, so each group has its own range (both ends included).
    set_filter(&page, "status", "").await;
    let at = |ids: &[u64]| -> (u64, u64) {
        let times = letters.iter().filter(|d| ids.contains(&d["id"].as_u64().unwrap()));
        let times: Vec<u64> = times.map(|d| d["dead_lettered_ms"].as_u64().unwrap()).collect();
        (*times.iter().min().unwrap(), *times.iter().max().unwrap())
    };
    // In id order, as the API and the export answer; the table keeps the queue's order.
    let mut all_ids: Vec<u64> = letters.iter().map(|d| d["id"].as_u64().unwrap()).collect();
    all_ids.sort_unstable();
    let unavailable: Vec<u64> = all_ids.iter().copied().filter(|id| !timed_out.contains(id)).collect();
    let late: Vec<u64> = all_ids.iter().copied().filter(|id| timed_out.contains(id)).collect();
    let seconds = |ms: u64| format!("{}.{:03}", ms / 1000, ms % 1000);
    let (first_503, last_503) = at(&unavailable);
    let (first_timeout, _) = at(&timed_out);
    for (since, until, expected) in [
        (Some(first_503), Some(last_503), &unavailable),
        (Some(first_timeout), None, &late),
        (None, Some(last_503), &unavailable),
    ] {
        set_filter(&page, "since", &since.map_or(String::new(), seconds)).await;
        set_filter(&page, "until", &until.map_or(String::new(), seconds)).await;
        let mut query = String::new();
        if let Some(since) = since {
            query += &format!("&since_ms={since}");
        }
        if let Some(until) = until {
            query += &format!("&until_ms={until}");
        }
        let api: Value = server.get_json(&format!("/api/labs/{lab}/dead-letters?limit=100{query}")).await;
        let from_api: Vec<u64> =
            api["dead_letters"].as_array().unwrap().iter().map(|d| d["id"].as_u64().unwrap()).collect();
        assert_eq!(&from_api, expected, "the API's letters for {query}");
        let matched = format!("{} of 8 match", expected.len());
        wait_for(
            &page,
            &format!("{matched} for {query}"),
            &format!("document.querySelector('[data-dlq-matched]').textContent === '{matched}'"),
        )
        .await;
        let rows = page.eval("[...document.querySelectorAll('#dead-body [data-dead-letter]')].map(r => Number(r.dataset.deadLetter))").await.unwrap();
        let mut rows = serde_json::from_value::<Vec<u64>>(rows).unwrap();
        rows.sort_unstable();
        assert_eq!(rows, from_api, "the page's rows for {query}");
        // The actions take the same letters, and the export link carries the range.
        let scope = format!("Acts on the {} letters the filter matches:", expected.len());
        assert_eq!(text(&page, "[data-dlq-scope]").await, scope);
        let href = page.eval("document.querySelector('[data-dlq-export]').href").await.unwrap();
        let export = server.http.get(href.as_str().unwrap()).send().await.unwrap().text().await.unwrap();
        let exported: Vec<u64> = export
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap()["id"].as_u64().unwrap())
            .collect();
        assert_eq!(exported, from_api, "the export of {query}");
    }
    // A range that ends before it starts holds nothing, and the field says so.
    set_filter(&page, "since", &seconds(last_503)).await;
    set_filter(&page, "until", &seconds(first_503.saturating_sub(1))).await;
    wait_for(
        &page,
        "nothing to match",
        "document.querySelector('[data-dlq-matched]').textContent === '0 of 8 match'",
    )
    .await;
    let invalid = page
        .eval("document.querySelector('[data-dlq-filter]').elements.until.validity.customError")
        .await
        .unwrap();
    assert_eq!(invalid, true);
    assert_eq!(text(&page, "[data-dlq-scope]").await, "Nothing to act on.");

    // A dry run of the timeouts' range takes those two only.
    set_filter(&page, "since", &seconds(first_timeout)).await;
    set_filter(&page, "until", "").await;
    choose_mode(&page, "down").await;
    page.click("[data-dlq-action=\"replay\"]").await;
    let dry = wait_for(&page, "the range's dry run", "!document.querySelector('[data-dlq-confirm]').hidden && document.querySelector('[data-dlq-confirm-text]').textContent").await;
    assert!(dry.as_str().unwrap().contains("2 letters would be replayed at once"), "{dry}");
    page.click("[data-dlq-cancel]").await;
    set_filter(&page, "since", "").await;

    // A dry run while the endpoint is down warns, and calling it off changes nothing.
    page.click("[data-dlq-action=\"replay\"]").await;
    let dry = wait_for(&page, "the dry run", "!document.querySelector('[data-dlq-confirm]').hidden && document.querySelector('[data-dlq-confirm-text]').textContent").await;
    assert!(dry.as_str().unwrap().contains("8 letters would be replayed at once"), "{dry}");
    assert!(dry.as_str().unwrap().contains("The downstream is down"), "{dry}");
    assert!(text(&page, "[data-dlq-warning]").await.contains("dead-letter again"));
    let before = server.snapshot(&lab).await;
    page.click("[data-dlq-cancel]").await;
    let after = server.snapshot(&lab).await;
    assert_eq!(before["dead_letters"], after["dead_letters"], "a dry run changes nothing");

    // A redrive at 8 a second, with its progress, then the queue is empty.
    server.put(&lab, "policy", r#"{"timeout_ms": 1500, "max_attempts": 4}"#).await;
    choose_mode(&page, "healthy").await;
    page.eval("document.querySelector('[data-dlq-rate]').value = '8'").await.unwrap();
    page.click("[data-dlq-action=\"redrive\"]").await;
    let dry = wait_for(&page, "the redrive's dry run", "!document.querySelector('[data-dlq-confirm]').hidden && document.querySelector('[data-dlq-confirm-text]').textContent").await;
    assert!(dry.as_str().unwrap().contains("at 8 a second"), "{dry}");
    page.click("[data-dlq-go]").await;
    let progress = wait_for(
        &page,
        "the redrive's progress, midway",
        "(() => { const t = document.querySelector('[data-dlq-redrive-text]').textContent; \
          const m = /Redrive: (\\d+) of 8 sent/.exec(t); return m && Number(m[1]) > 0 && Number(m[1]) < 8 ? t : null; })()",
    )
    .await;
    println!("seen: {progress}");
    wait_counter(&page, "dead_letter", 0).await;
    wait_for(&page, "the redrive line to go", "document.querySelector('[data-dlq-redrive]').hidden").await;
    let done = server.snapshot(&lab).await;
    assert!(done["redrive"].is_null());
    assert_no_console_errors(&page);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_dead_letters_draw_only_in_view_and_filter_within_100_ms() {
    let Some(browser) = browser() else { return };
    let server = Server::start().await;
    let page = browser.page().await;
    page.set_viewport(1280, 900).await;
    let lab = open_new_lab(&page, &server).await;
    server.put(&lab, "policy", r#"{"max_attempts": 1}"#).await;
    choose_mode(&page, "down").await;
    for round in 1..=5 {
        server.burst(&lab, 2_000).await;
        let expression =
            format!("document.querySelector('[data-dlq-depth]').textContent === '{}'", round * 2_000);
        wait_for(&page, &format!("{} dead letters", round * 2_000), &expression).await;
    }
    let drawn = page.eval("document.querySelectorAll('#dead-body [data-dead-letter]').length").await.unwrap();
    let drawn = drawn.as_u64().unwrap();
    assert!(drawn > 5 && drawn < 60, "{drawn} rows drawn for 10,000 letters");

    // A filter by id, then one that keeps all 10,000, each timed from the input's event to the
    // table drawn (synchronous: the handler filters and draws). The best of five runs is the
    // page's own cost; the other four absorb a machine busy with other tests.
    let timing = page
        .eval(
            "(() => { const f = document.querySelector('[data-dlq-filter]'); \
               const time = (set) => { const t0 = performance.now(); set(); f.dispatchEvent(new Event('input')); \
                 return performance.now() - t0; }; \
               let one = Infinity, all = Infinity; \
               for (let i = 0; i < 5; i += 1) { \
                 one = Math.min(one, time(() => { f.elements.replays.value = ''; f.elements.q.value = '#4321'; })); \
                 all = Math.min(all, time(() => { f.elements.q.value = ''; f.elements.replays.value = '0'; })); \
               } \
               return { one, all, rows: document.querySelectorAll('#dead-body [data-dead-letter]').length, \
                 matched: document.querySelector('[data-dlq-matched]').textContent }; })()",
        )
        .await
        .unwrap();
    println!("filter timings: {timing}");
    assert!(timing["one"].as_f64().unwrap() <= 100.0, "{timing}");
    assert!(timing["all"].as_f64().unwrap() <= 100.0, "{timing}");
    assert_eq!(timing["matched"], "10000 of 10000 match");
    // A scroller of 420 px holds 13 rows of 34 px; 6 more are drawn below them.
    let rows = timing["rows"].as_u64().unwrap();
    assert!((13..60).contains(&rows), "the rows in view are drawn, and only those: {timing}");

    // Scrolled to the end, the last letters are drawn, and still only those in view.
    let snapshot = server.snapshot(&lab).await;
    let newest = snapshot["dead_letters"].as_array().unwrap().last().unwrap()["id"].as_u64().unwrap();
    page.eval("document.querySelector('[data-dlq-scroll]').scrollTop = 1e9").await.unwrap();
    let last = wait_for(
        &page,
        "the last rows",
        &format!("document.querySelector('#dead-body tr[data-dead-letter=\"{newest}\"]') ? document.querySelectorAll('#dead-body [data-dead-letter]').length : 0"),
    )
    .await;
    assert!(last.as_u64().unwrap() < 60, "{last}");
    assert_no_console_errors(&page);
}

/// The page's causes are the server's (`GET /api/protection-kinds`, made from the one table of
/// kinds): the filter's names and words are those, and a letter a hedged round ended (a kind two
/// page lists once left out) is counted and named in the server's words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_names_the_causes_as_the_server_does_hedging_included() {
    let Some(browser) = browser() else { return };
    let server = Server::start().await;
    let page = browser.page().await;
    page.set_viewport(1280, 900).await;
    let lab = open_new_lab(&page, &server).await;
    let served: Value = server.get_json("/api/protection-kinds").await;
    let causes = served["causes"].as_array().unwrap();
    let in_page = page
        .eval("import('/static/dlq-filter.js').then((m) => ({ causes: m.CAUSES, text: m.CAUSE_TEXT }))")
        .await
        .unwrap();
    let names: Vec<Value> = causes.iter().map(|c| c["cause"].clone()).collect();
    assert_eq!(in_page["causes"], Value::Array(names), "the page's causes, in the server's order");
    for cause in causes {
        assert_eq!(in_page["text"][cause["cause"].as_str().unwrap()], cause["words"], "{cause}");
    }

    // Every 503 is fatal to this hedging: each round ends under the hedging's own cause.
    let hedging =
        r#"{"protections": [{"kind": "grpc_hedging", "max_attempts": 2, "non_fatal_statuses": []}]}"#;
    server.put(&lab, "policy", hedging).await;
    choose_mode(&page, "down").await;
    server.burst(&lab, 3).await;
    wait_counter(&page, "dead_letter", 3).await;
    let hedged = causes.iter().find(|c| c["kind"] == "grpc_hedging").expect("hedging has its cause");
    let chip = wait_for(
        &page,
        "the hedging's cause among the counts",
        "(() => { const c = document.querySelector('[data-facet=\"cause\"][data-value=\"grpc_hedging\"]'); \
         return c?.dataset.count === '3' ? c.textContent : null; })()",
    )
    .await;
    let words = hedged["words"].as_str().unwrap();
    assert_eq!(
        chip.as_str(),
        Some(format!("{words} 3").as_str()),
        "counted and named as the server names it"
    );
    assert_no_console_errors(&page);
}
