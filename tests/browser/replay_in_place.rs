//! Replay in place (issue 27, item 5): "replay dead letters" asks its dry-run question right
//! under the button, and the timeline stays in view while the replay lands on it.

use super::failure_modes::rect;
use super::{
    Server, assert_no_console_errors, browser, dead_letters_then_healthy, open_new_lab, wait_counter,
    wait_for,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_asks_next_to_its_button_and_the_timeline_stays_in_view_while_it_lands() {
    let Some(browser) = browser() else { return };
    let server = Server::start().await;
    let page = browser.page().await;
    page.set_viewport(1280, 900).await;
    open_new_lab(&page, &server).await;
    dead_letters_then_healthy(&page, 8).await;
    page.eval("window.scrollTo(0, 0)").await.unwrap();

    let button = ".panel-traffic [data-replay-all]";
    page.click(button).await;
    wait_for(&page, "the dry run", "!document.querySelector('[data-dlq-confirm]').hidden").await;
    let scrolled = page.eval("scrollY").await.unwrap().as_f64().unwrap();
    let height = page.eval("innerHeight").await.unwrap().as_f64().unwrap();
    let (_, asked) = rect(&page, button).await;
    let (top, bottom) = rect(&page, "[data-dlq-confirm]").await;
    assert!(
        top >= asked && top - asked < 40.0,
        "the question opens right under its button: button ends at {asked}, question at {top}"
    );
    assert!(bottom <= height, "the whole question is in view: {top}..{bottom} of {height}");
    let (rows, _) = rect(&page, "#timeline .tl-rows").await;
    assert!(rows < height, "the timeline's rows are in view: they start at {rows} of {height}");

    // The question has the focus: Enter replays (a click would scroll the page to the button).
    let focused = page.eval("document.activeElement.hasAttribute('data-dlq-go')").await.unwrap();
    assert_eq!(focused, true, "the focus is on the question's button");
    page.press("Enter").await;
    wait_counter(&page, "delivered", 8).await;
    let now = page.eval("scrollY").await.unwrap().as_f64().unwrap();
    assert!((now - scrolled).abs() < 1.0, "the page stayed where it was: {scrolled} then {now}");
    let (rows, _) = rect(&page, "#timeline .tl-rows").await;
    assert!(rows < height, "the replay landed in view: rows start at {rows} of {height}");
    page.screenshot_viewport("replay-in-place-1280x900").await;
    assert_no_console_errors(&page);
}
