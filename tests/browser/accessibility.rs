//! axe-core, the accessibility checker, run in the page on every kind of page the lab serves,
//! in the light and the dark colour scheme: a fresh lab, a lab after an outage with dead
//! letters and every drawer open, the compare form and a finished comparison. Any violation,
//! of any impact, fails the test with the rule, its impact and the elements it found.

use serde_json::{Value, json};

use super::cdp::Page;
use super::{Server, browser, dead_letters_then_healthy, open_new_lab, wait_for};

/// axe-core 4.14.1, vendored unchanged with its licence (see `vendor/README.md`).
const AXE: &str = include_str!("vendor/axe-4.14.1.min.js");

/// Runs axe-core on the whole document and returns its violations, each as
/// `{ id, impact, help, nodes: [{ target, summary }] }`.
async fn violations(page: &Page) -> Vec<Value> {
    if page.eval("typeof window.axe").await.unwrap() != "object" {
        page.eval(&format!("(() => {{ {AXE}\n; return true; }})()")).await.unwrap();
    }
    let found = page
        .eval(
            "axe.run(document, { resultTypes: ['violations'] }).then(r => r.violations.map(v => ({
                id: v.id, impact: v.impact, help: v.help,
                nodes: v.nodes.map(n => ({ target: n.target.join(' '), summary: n.failureSummary })),
            })))",
        )
        .await
        .unwrap();
    found.as_array().cloned().unwrap_or_default()
}

/// Emulates `prefers-color-scheme`, which the page's style follows.
async fn scheme(page: &Page, scheme: &str) {
    let features = json!([{ "name": "prefers-color-scheme", "value": scheme }]);
    page.call("Emulation.setEmulatedMedia", json!({ "features": features })).await.unwrap();
    let applied =
        page.eval(&format!("matchMedia('(prefers-color-scheme: {scheme})').matches")).await.unwrap();
    assert_eq!(applied, true, "the page did not take the {scheme} scheme");
}

/// Checks the page as it stands in both schemes and returns every violation, named by where
/// it was found.
pub(super) async fn check_both(page: &Page, place: &str, found: &mut Vec<String>) {
    for name in ["light", "dark"] {
        scheme(page, name).await;
        for v in violations(page).await {
            found.push(format!(
                "{place}, {name}: {} ({}): {}\n    {}",
                v["id"], v["impact"], v["help"], v["nodes"]
            ));
        }
    }
    scheme(page, "light").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn axe_finds_no_violation_on_any_page_in_light_or_dark() {
    let Some(browser) = browser() else { return };
    let server = Server::start().await;
    let page = browser.page().await;
    page.set_viewport(1280, 900).await;
    let mut found = Vec::new();

    // A first visit, before any message exists.
    open_new_lab(&page, &server).await;
    check_both(&page, "a fresh lab", &mut found).await;

    // After an outage: dead letters in the queue, every drawer and panel open.
    dead_letters_then_healthy(&page, 8).await;
    page.eval("document.querySelectorAll('details').forEach(d => d.open = true)").await.unwrap();
    wait_for(&page, "the dead letters listed", "document.querySelectorAll('[data-dlq-facets] *').length > 0")
        .await;
    check_both(&page, "a lab after an outage, drawers open", &mut found).await;

    // The compare form, then a finished comparison.
    page.navigate(&server.url("/compare")).await;
    check_both(&page, "the compare form", &mut found).await;
    let body = json!({"scenario": "flaky", "burst": 5, "seed": 1, "policies": ["none", "full"]});
    let id = super::compare::start_comparison(&server, &body).await;
    page.navigate(&server.url(&format!("/compare/{id}"))).await;
    wait_for(&page, "the comparison to finish", "document.getElementById('compare').dataset.done === 'true'")
        .await;
    page.eval("document.querySelectorAll('details').forEach(d => d.open = true)").await.unwrap();
    check_both(&page, "a finished comparison", &mut found).await;
    // A finished grid of defences × policies.
    let body = json!({"scenario": "overload", "burst": 5, "seed": 1, "runs": 1, "policies": ["none", "full"],
        "defences": [{"name": "none", "defences": {}}, {"name": "codel", "defences": {"queue": "codel"}}]});
    let id = super::compare::start_comparison(&server, &body).await;
    page.navigate(&server.url(&format!("/compare/{id}"))).await;
    wait_for(&page, "the grid to finish", "document.getElementById('compare').dataset.done === 'true'").await;
    check_both(&page, "a finished grid", &mut found).await;

    assert!(found.is_empty(), "axe-core found {} violations:\n{}", found.len(), found.join("\n"));
    super::assert_no_console_errors(&page);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn axe_finds_no_violation_in_the_story_in_light_or_dark() {
    let Some(browser) = browser() else { return };
    let server = Server::start().await;
    let page = browser.first_visit().await;
    page.set_viewport(1280, 900).await;
    let mut found = Vec::new();

    // A first visit: the story, its chapters open.
    page.navigate(&server.url("/")).await;
    super::wait_live(&page).await;
    wait_for(&page, "the chapters", "document.querySelector('[data-story-preset]')").await;
    page.eval("document.querySelector('[data-story-chapters]').open = true").await.unwrap();
    check_both(&page, "the story on a first visit", &mut found).await;

    // A step run to its end: what to look for at the bottom, its claims judged, the goodput
    // chart drawn.
    page.click("[data-story-step=\"break\"]").await;
    wait_for(
        &page,
        "step 1's claims to settle",
        "document.querySelectorAll('[data-claims] [data-verdict=\"holds\"]').length === 3",
    )
    .await;
    check_both(&page, "the story after step 1", &mut found).await;

    assert!(found.is_empty(), "axe-core found {} violations:\n{}", found.len(), found.join("\n"));
    super::assert_no_console_errors(&page);
}
