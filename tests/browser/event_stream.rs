//! The page's reader of the SSE wire format, fed the same events cut into pieces at every
//! possible point, with each kind of line end, comments and keep-alives, a multi-line `data`
//! and an event far larger than the pieces: it must find the same events every time.

use serde_json::{Value, json};

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

/// Runs in the page: the page's own model, started from the snapshot `BEFORE` and fed the
/// events `EVENTS` as the stream gave them; answers its dead letters and its messages' states.
const REPLAY_EVENTS: &str = r#"(async () => {
    const { emptyModel, applySnapshot, applyEvent } = await import('/static/model.js');
    const model = emptyModel();
    applySnapshot(model, BEFORE);
    let unknown = 0;
    for (const [id, ev] of EVENTS) if (applyEvent(model, id, ev) === null) unknown += 1;
    const letters = [...model.deadLetters.values()].map((d) => [d.id, d.quarantined, d.redrive ?? null]);
    const states = [...model.messages.values()].map((m) => [m.id, m.state, m.round]);
    return { unknown, letters, states, redrive: model.redrive ?? null };
})()"#;

/// The events after `after` on `lab`'s stream until `count` of type `withdrawn` came.
async fn events_until_withdrawn(http: &reqwest::Client, url: &str, after: u64, count: usize) -> Vec<Value> {
    let mut response = http.get(url).header("Last-Event-ID", after.to_string()).send().await.unwrap();
    let (mut text, mut events) = (String::new(), Vec::new());
    while events.iter().filter(|(_, e): &&(u64, Value)| e["type"] == "withdrawn").count() < count {
        let chunk = tokio::time::timeout(std::time::Duration::from_secs(20), response.chunk())
            .await
            .expect("an event within 20 s")
            .unwrap()
            .expect("the stream stays open");
        text.push_str(std::str::from_utf8(&chunk).unwrap());
        while let Some(end) = text.find("\n\n") {
            let block: String = text.drain(..end + 2).collect();
            let id =
                block.lines().find_map(|l| l.strip_prefix("id:")).map(|v| v.trim().parse::<u64>().unwrap());
            let data = block.lines().find_map(|l| l.strip_prefix("data:")).map(str::trim);
            if let (Some(id), Some(data)) = (id, data) {
                events.push((id, serde_json::from_str(data).unwrap()));
            }
        }
    }
    events.into_iter().map(|(id, event)| json!([id, event])).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_takes_back_what_a_withdrawal_says_and_agrees_with_the_server() {
    let Some(browser) = browser() else { return };
    // A store that fills up, so actions on dead letters are refused and taken back.
    let db = super::support::fresh_db("withdrawn");
    let config = retrylab::config::Config { max_db_bytes: 640 * 1024, ..retrylab::config::Config::new(db) };
    let serving = super::support::Serving::start(super::support::any_port(), config).await;
    let base = format!("http://{}", serving.address);
    let http = super::support::http_client();
    let call = |method: reqwest::Method, path: String, body: &str| {
        http.request(method, format!("{base}{path}"))
            .header("content-type", "application/json")
            .body(body.to_owned())
            .send()
    };
    let new_lab = async || -> String {
        let created: Value =
            call(reqwest::Method::POST, "/api/labs".into(), "").await.unwrap().json().await.unwrap();
        created["id"].as_str().unwrap().to_owned()
    };
    let (lab, hog) = (new_lab().await, new_lab().await);
    let put = |lab: &str, what: &str, body: &'static str| {
        call(reqwest::Method::PUT, format!("/api/labs/{lab}/{what}"), body)
    };
    put(&lab, "policy", r#"{"max_attempts": 1, "timeout_ms": 1500}"#).await.unwrap();
    put(&lab, "downstream", r#"{"mode": "down", "latency_ms": [0, 0], "retry_after_s": 0}"#).await.unwrap();
    call(reqwest::Method::POST, format!("/api/labs/{lab}/bursts"), r#"{"count": 6}"#).await.unwrap();
    let snapshot = async |lab: &str| -> Value {
        http.get(format!("{base}/api/labs/{lab}")).send().await.unwrap().json().await.unwrap()
    };
    let start = std::time::Instant::now();
    while snapshot(&lab).await["counters"]["dead_letter"] != 6 {
        assert!(start.elapsed() < super::PATIENCE, "six dead letters");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    put(&lab, "downstream", r#"{"mode": "healthy"}"#).await.unwrap();
    // The hog's thousand messages fit; the attempts they then make do not.
    put(&hog, "downstream", r#"{"mode": "down", "latency_ms": [0, 0]}"#).await.unwrap();
    put(&hog, "policy", r#"{"base_ms": 20, "cap_ms": 20, "max_attempts": 20}"#).await.unwrap();
    call(reqwest::Method::POST, format!("/api/labs/{hog}/bursts"), r#"{"count": 1000}"#).await.unwrap();
    while http.get(format!("{base}/healthz")).send().await.unwrap().status() != 503 {
        assert!(start.elapsed() < super::PATIENCE, "the store filled up");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let before = snapshot(&lab).await;
    let ids: Vec<u64> =
        before["dead_letters"].as_array().unwrap().iter().map(|d| d["id"].as_u64().unwrap()).collect();
    let stream = format!("{base}/api/labs/{lab}/events");
    let after_id = before["last_event_id"].as_u64().unwrap();
    let reading = events_until_withdrawn(&http, &stream, after_id, 3);
    let acting = async {
        // Each is refused (the store is full) and taken back.
        for (action, body) in [
            ("quarantine", format!(r#"{{"ids": [{}]}}"#, ids[2])),
            ("replay", format!(r#"{{"ids": [{}, {}]}}"#, ids[0], ids[1])),
            ("replay", r#"{"rate_per_s": 5}"#.to_owned()),
        ] {
            let refused =
                call(reqwest::Method::POST, format!("/api/labs/{lab}/dead-letters/{action}"), &body)
                    .await
                    .unwrap();
            assert_eq!(refused.status(), 507, "{action}");
        }
    };
    let (events, ()) = tokio::join!(reading, acting);
    let after = snapshot(&lab).await;

    let page = browser.page().await;
    page.navigate(&format!("{base}/healthz")).await;
    let script = REPLAY_EVENTS
        .replace("BEFORE", &before.to_string())
        .replace("EVENTS", &Value::from(events).to_string());
    let model = page.eval(&script).await.unwrap();
    assert_eq!(model["unknown"], 0, "every event was about something the page knew");
    let letters: Vec<Value> = after["dead_letters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| json!([d["id"], d["quarantined"], d.get("redrive").cloned().unwrap_or(Value::Null)]))
        .collect();
    assert_eq!(model["letters"], Value::from(letters), "the page's dead letters, in order, are the server's");
    let states: Vec<Value> = after["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| json!([m["id"], m["state"], m["round"]]))
        .collect();
    assert_eq!(model["states"], Value::from(states));
    assert_eq!(model["redrive"], after["redrive"]);
    serving.stop().await;
}
