//! Outside callers on the page: their requests as rows of the timeline beside the lab's own
//! messages, the numbers of one attempt in the tooltip, the source filter, the report card per
//! caller (the same verdicts as `GET /api/labs/{lab}/callers`, the headers' checks among them),
//! the snippets beside the endpoint's URL, and a bound reached said plainly. Requests are sent
//! by the test's own HTTP client at the URL the page gives, as an engineer's service would.

use serde_json::{Value, json};

use super::{
    Page, Server, assert_no_console_errors, browser, open_new_lab, timeline, wait_counter, wait_for,
};

/// Sends one outside request as caller `name` with key `key`; returns the status.
async fn send(server: &Server, url: &str, name: &str, key: &str) -> u16 {
    send_with(server, url, (name, key), &[]).await
}

/// `send`, with the hint headers given (`X-Request-Timeout-Ms`, `X-Previous-Attempts`).
async fn send_with(server: &Server, url: &str, (name, key): (&str, &str), hints: &[(&str, &str)]) -> u16 {
    let mut request = server.http.post(url).header("X-Client-Name", name).header("Idempotency-Key", key);
    for (header, value) in hints {
        request = request.header(*header, *value);
    }
    let response = request.json(&json!({"order": key})).send().await.unwrap();
    response.status().as_u16()
}

/// Picks `source` in the timeline's "from" filter, as a person would, and reads what is drawn.
async fn pick_source(page: &Page, source: &str) -> Value {
    let script = format!(
        "(() => {{ const s = document.querySelector('[data-source-filter]'); s.value = {v};
            s.dispatchEvent(new Event('change')); return s.value; }})()",
        v = json!(source)
    );
    assert_eq!(page.eval(&script).await.unwrap(), json!(source), "the filter offers {source:?}");
    timeline(page).await;
    page.eval(ROWS).await.unwrap()
}

/// The rows drawn: `[message id, caller or null]`, top to bottom.
const ROWS: &str = "[...document.querySelectorAll('#timeline .tl-row')].map(r => [Number(r.dataset.messageId), r.dataset.caller ?? null])";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outside_callers_are_rows_with_their_numbers_a_filter_and_a_report_card() {
    let Some(browser) = browser() else { return };
    let server = Server::start().await;
    let page = browser.page().await;
    page.set_viewport(1280, 900).await;
    let lab = open_new_lab(&page, &server).await;
    let url = page.eval("document.querySelector('[data-endpoint-url]').textContent").await.unwrap();
    let url = url.as_str().unwrap().to_owned();

    // Two messages of the lab's own.
    server.burst(&lab, 2).await;
    wait_counter(&page, "delivered", 2).await;

    // A down endpoint asks for 1 s: "alpha" comes back at once, twice, then after the heal,
    // saying how long it waits and numbering its attempts; "beta" sends once and stops, saying
    // no deadline and 2 attempts before its first.
    server.put(&lab, "downstream", r#"{"mode": "down", "retry_after_s": 1}"#).await;
    let alpha = |before| [("X-Request-Timeout-Ms", "2000"), ("X-Previous-Attempts", before)];
    assert_eq!(send_with(&server, &url, ("alpha", "alpha-1"), &alpha("0")).await, 503);
    assert_eq!(send_with(&server, &url, ("alpha", "alpha-1"), &alpha("1")).await, 503);
    assert_eq!(send_with(&server, &url, ("beta", "beta-1"), &[("X-Previous-Attempts", "2")]).await, 503);
    server.put(&lab, "downstream", r#"{"mode": "healthy"}"#).await;
    assert_eq!(send_with(&server, &url, ("alpha", "alpha-1"), &alpha("2")).await, 200);

    // Drawn as rows beside the lab's, each attempt a bar with its status.
    wait_for(
        &page,
        "two outside rows",
        "document.querySelectorAll('#timeline .tl-row.is-outside').length === 2",
    )
    .await;
    wait_for(
        &page,
        "alpha's three bars",
        "document.querySelectorAll('#timeline .tl-row[data-caller=\"alpha\"] .tl-bar').length === 3",
    )
    .await;
    let snapshot = server.snapshot(&lab).await;
    let outside = snapshot["outside"]["messages"].as_array().unwrap();
    let alpha = outside.iter().find(|m| m["caller"] == "alpha").expect("alpha in the snapshot");
    let statuses: Vec<u64> =
        alpha["attempts"].as_array().unwrap().iter().map(|a| a["status"].as_u64().unwrap()).collect();
    assert_eq!(statuses, [503, 503, 200]);
    let drawn = page
        .eval("[...document.querySelectorAll('#timeline .tl-row[data-caller=\"alpha\"] .tl-bar')].map(b => [Number(b.dataset.message), Number(b.dataset.status), b.dataset.outcome])")
        .await
        .unwrap();
    let id = -alpha["id"].as_i64().unwrap();
    assert_eq!(drawn, json!([[id, 503, "http_error"], [id, 503, "http_error"], [id, 200, "ok"]]));
    let label = page
        .eval("document.querySelector('#timeline .tl-row[data-caller=\"alpha\"] .tl-label').textContent")
        .await
        .unwrap();
    assert!(
        label.as_str().unwrap().contains("alpha") && label.as_str().unwrap().contains("alpha-1"),
        "{label}"
    );
    let all = page.eval(ROWS).await.unwrap();
    assert_eq!(all.as_array().unwrap().len(), 4, "two of the lab's, two outside: {all}");
    assert_eq!(
        page.eval("document.querySelector('[data-filter-count]').textContent").await.unwrap(),
        json!("4 of 4 messages")
    );

    // The tooltip of alpha's second attempt: status, duration, the Retry-After sent and the
    // wait the caller then took, as the snapshot measured them. The three calls went out a
    // millisecond or two apart, closer than a bar is wide at this zoom, so the bar is reached by
    // keyboard focus (which shows the same tooltip) rather than by pointing at it, once a
    // click on the row's name has given the page the focus.
    page.click("#timeline .tl-row[data-caller=\"alpha\"] .tl-label").await;
    page.eval(
        "document.querySelector('#timeline .tl-row[data-caller=\"alpha\"] .tl-bar[data-n=\"2\"]').focus()",
    )
    .await
    .unwrap();
    let tip = wait_for(
        &page,
        "the tooltip",
        "(t => !t.hidden && Object.fromEntries([...t.querySelectorAll('dt')].map(d => [d.textContent, d.nextElementSibling.textContent])))(document.querySelector('.tl-tip'))",
    )
    .await;
    let second = &alpha["attempts"][1];
    let duration = second["ended_ms"].as_u64().unwrap() - second["started_ms"].as_u64().unwrap();
    let waited = alpha["attempts"][2]["waited_ms"].as_u64().unwrap();
    assert_eq!(tip["caller"], "alpha", "{tip}");
    assert_eq!(tip["status"], "503", "{tip}");
    assert_eq!(tip["duration"], json!(format!("{duration} ms")), "{tip}");
    assert_eq!(tip["Retry-After sent"], "1 s", "{tip}");
    assert_eq!(tip["then waited"], json!(format!("{waited} ms")), "{tip}");
    let note = page.eval("document.querySelector('.tl-tip .tl-tip-note')?.textContent").await.unwrap();
    assert!(note.as_str().unwrap().contains("before the Retry-After of 1 s"), "{note}");

    // The filter: the lab's client, the outside callers, one caller, both.
    let lab_rows = pick_source(&page, "lab").await;
    assert_eq!(lab_rows.as_array().unwrap().len(), 2, "{lab_rows}");
    assert!(
        lab_rows.as_array().unwrap().iter().all(|r| r[0].as_i64().unwrap() > 0 && r[1].is_null()),
        "{lab_rows}"
    );
    let outside_rows = pick_source(&page, "outside").await;
    let callers: Vec<&str> =
        outside_rows.as_array().unwrap().iter().map(|r| r[1].as_str().unwrap()).collect();
    assert_eq!(callers, ["alpha", "beta"], "{outside_rows}");
    let beta_rows = pick_source(&page, "caller:beta").await;
    assert_eq!(
        beta_rows,
        json!([[-outside.iter().find(|m| m["caller"] == "beta").unwrap()["id"].as_i64().unwrap(), "beta"]])
    );
    assert_eq!(pick_source(&page, "").await.as_array().unwrap().len(), 4);

    // A card per caller, with the API's verdicts, evidence and advice.
    wait_for(&page, "two report cards", "document.querySelectorAll('#callers .caller-card').length === 2")
        .await;
    let api: Value = server.get_json(&format!("/api/labs/{lab}/callers")).await;
    let expected: Value = api["callers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let checks: serde_json::Map<String, Value> = c["checks"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), json!([v["verdict"], v["evidence"], v["advice"]])))
                .collect();
            (c["name"].as_str().unwrap().to_owned(), Value::Object(checks))
        })
        .collect::<serde_json::Map<_, _>>()
        .into();
    let shown = page
        .eval(
            "Object.fromEntries([...document.querySelectorAll('#callers .caller-card')].map(c => [c.dataset.caller,
                Object.fromEntries([...c.querySelectorAll('[data-check]')].map(l => [l.dataset.check, [l.dataset.verdict, l.querySelector('.evidence').textContent, l.querySelector('.advice')?.textContent ?? null]]))]))",
        )
        .await
        .unwrap();
    assert_eq!(shown, expected);
    // Alpha came back at once after being asked for 1 s: the card says it failed that check.
    assert_eq!(shown["alpha"]["retry_after"][0], "fail", "{shown}");
    assert_eq!(shown["alpha"].as_object().unwrap().len(), 10);
    // The headers' checks, drawn with their verdicts: alpha said its deadline and numbered its
    // attempts; beta said no deadline and miscounted; no answer carried a pushback.
    let verdict = |caller: &str, check: &str| shown[caller][check][0].as_str().unwrap().to_owned();
    assert_eq!(
        [
            verdict("alpha", "deadline_sent"),
            verdict("alpha", "attempts_numbered"),
            verdict("alpha", "pushback_honoured")
        ],
        ["pass", "pass", "not_seen"],
        "{shown}"
    );
    assert_eq!(
        [
            verdict("beta", "deadline_sent"),
            verdict("beta", "attempts_numbered"),
            verdict("beta", "pushback_honoured")
        ],
        ["warn", "fail", "not_seen"],
        "{shown}"
    );
    assert!(
        shown["beta"]["attempts_numbered"][1].as_str().unwrap().contains("said 2, after 0 requests"),
        "{shown}"
    );
    let labels = page
        .eval(
            "[...document.querySelectorAll('#callers .caller-card[data-caller=\"beta\"] [data-check]')].slice(7).map(l => [l.dataset.check, l.querySelector('strong').textContent, l.querySelector('.verdict').textContent])",
        )
        .await
        .unwrap();
    assert_eq!(
        labels,
        json!([
            ["deadline_sent", "says its deadline", "warn"],
            ["attempts_numbered", "numbers its attempts", "fail"],
            ["pushback_honoured", "honours pushback", "not seen"]
        ])
    );

    // The snippets beside the URL, with this lab's URL in them, each with a copy button.
    page.click("[data-snippets-toggle]").await;
    let snippets = wait_for(
        &page,
        "the snippets",
        "(s => s.length >= 5 && s.map(f => [f.dataset.snippet, f.querySelector('code').textContent, !!f.querySelector('button')]))([...document.querySelectorAll('[data-snippet]')])",
    )
    .await;
    let file: Value =
        server.http.get(server.url("/static/snippets.json")).send().await.unwrap().json().await.unwrap();
    assert_eq!(snippets.as_array().unwrap().len(), file["snippets"].as_array().unwrap().len());
    for (shown, given) in snippets.as_array().unwrap().iter().zip(file["snippets"].as_array().unwrap()) {
        assert_eq!(shown[0], given["id"]);
        assert_eq!(
            shown[1],
            json!(given["code"].as_str().unwrap().replace("{URL}", &url)),
            "{}",
            given["id"]
        );
        assert!(shown[1].as_str().unwrap().contains(&url) && shown[2] == true, "{shown}");
    }

    // On a phone, the new parts stay within 375 px.
    page.set_viewport(375, 812).await;
    let wide = page
        .eval(
            "(() => { const parts = [...document.querySelectorAll('[data-snippets], [data-snippets] figure, [data-snippets] pre, [data-snippets] button, #callers, #callers *, [data-find-form], [data-find-form] *')];
                return [document.documentElement.scrollWidth, parts.filter(e => e.getClientRects().length && e.getBoundingClientRect().right > 375).map(e => e.tagName + '.' + e.className)]; })()",
        )
        .await
        .unwrap();
    assert!(wide[0].as_u64() <= Some(375) && wide[1].as_array().unwrap().is_empty(), "past 375 px: {wide}");
    page.screenshot("outside-callers-phone-375").await;
    assert_no_console_errors(&page);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_past_the_cap_are_said_under_the_cards() {
    let Some(browser) = browser() else { return };
    let server = Server::start().await;
    let page = browser.page().await;
    page.set_viewport(1280, 900).await;
    let lab = open_new_lab(&page, &server).await;
    let url = page.eval("document.querySelector('[data-endpoint-url]').textContent").await.unwrap();
    let url = url.as_str().unwrap().to_owned();
    let cap = server.snapshot(&lab).await["outside"]["max_callers_per_lab"].as_u64().unwrap();
    for i in 0..cap + 2 {
        assert_eq!(send(&server, &url, &format!("caller-{i}"), &format!("key-{i}")).await, 200);
    }
    // Both requests past the cap: the line says the first before the second has come (a full
    // run once read "1 request" here).
    let said = wait_for(
        &page,
        "the untracked requests said",
        "(p => !p.hidden && p.textContent.includes(': 2 requests') && p.textContent)(document.querySelector('[data-callers-untracked]'))",
    )
    .await;
    let snapshot = server.snapshot(&lab).await;
    assert_eq!(snapshot["outside"]["untracked"]["max_callers_per_lab"], 2);
    assert!(
        said.as_str()
            .unwrap()
            .contains(&format!("2 requests of new callers past the cap of {cap} callers per lab")),
        "{said}"
    );
    wait_for(
        &page,
        "a card per kept caller",
        &format!("document.querySelectorAll('#callers .caller-card').length === {cap}"),
    )
    .await;
    let rows = page.eval("document.querySelectorAll('#timeline .tl-row.is-outside').length").await.unwrap();
    assert!(rows.as_u64().unwrap() > 0);
    assert_eq!(
        page.eval("document.querySelector('[data-filter-count]').dataset.total").await.unwrap(),
        json!(cap.to_string())
    );
    assert_no_console_errors(&page);
}
