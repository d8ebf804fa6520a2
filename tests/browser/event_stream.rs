//! The page's reader of the SSE wire format, fed the same events cut into pieces at every
//! possible point, with each kind of line end, comments and keep-alives, a multi-line `data`
//! and an event far larger than the pieces: it must find the same events every time.

use serde_json::json;

use super::{Server, browser};

/// Runs in the page: the wire cut in two at every point, then in pieces of 1 to 40 characters,
/// then in pieces of random sizes; answers the events of the first reading and how many of
/// the others differed from it.
const SPLIT_EVERYWHERE: &str = r#"(async () => {
    const { createEventParser } = await import('/static/stream.js');
    const big = 'x'.repeat(50000);
    const wire = ': hello\r\n\r\nevent: snapshot\r\nid: 7\r\ndata: {"a":1}\r\ndata: ' + big + '\r\n\r\n'
        + ':keep-alive\n\nid: 8\ndata: two\n\nid: 9\rdata: three\r\rdata\n\nevent: lone\n\n'
        + 'id: 10\r\ndata:no space\r\n\r\nid: 11\ndata: cut off at the end\n';
    const read = (cuts) => {
        const events = [];
        const parser = createEventParser((e) => events.push(e));
        let at = 0;
        for (const cut of [...cuts, wire.length]) { parser.push(wire.slice(at, cut)); at = cut; }
        return JSON.stringify(events);
    };
    const whole = read([]);
    let differ = 0;
    for (let cut = 0; cut <= wire.length; cut += cut < 200 || cut > wire.length - 200 ? 1 : 997) {
        if (read([cut]) !== whole) differ += 1;
    }
    for (let size = 1; size <= 40; size++) {
        const cuts = [];
        for (let at = size; at < wire.length; at += size) cuts.push(at);
        if (read(cuts) !== whole) differ += 1;
    }
    let seed = 1;
    for (let run = 0; run < 50; run++) {
        const cuts = [];
        for (let at = 0; ; ) {
            seed = (seed * 1103515245 + 12345) % 2147483648;
            at += 1 + (seed % 3000);
            if (at >= wire.length) break;
            cuts.push(at);
        }
        if (read(cuts) !== whole) differ += 1;
    }
    return { events: JSON.parse(whole).map((e) => ({ ...e, data: e.data.length > 100 ? e.data.length : e.data })), differ };
})()"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_stream_reader_finds_the_same_events_however_the_text_is_cut() {
    let Some(browser) = browser() else { return };
    let server = Server::start().await;
    let page = browser.page().await;
    page.navigate(&server.url("/")).await;

    let result = page.eval(SPLIT_EVERYWHERE).await.unwrap();
    assert_eq!(
        result["events"],
        json!([
            { "event": "snapshot", "id": "7", "data": 50008 },
            { "event": "message", "id": "8", "data": "two" },
            { "event": "message", "id": "9", "data": "three" },
            { "event": "message", "id": "", "data": "" },
            { "event": "message", "id": "10", "data": "no space" },
        ]),
        "the comment, the keep-alive, the event without data and the unfinished last event make nothing"
    );
    assert_eq!(result["differ"], 0, "some cuts of the text read differently");
}
