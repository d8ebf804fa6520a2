//! The report card's checks of the headers the endpoint's defences read and send
//! (`X-Request-Timeout-Ms`, `X-Previous-Attempts`, `X-Retry-Pushback-Ms`): three outside
//! clients written here, each over real sockets against a lab of its own that is down, then
//! overloaded with the deadline drop, retries first and pushback on. One speaks the headers as
//! gRPC would, one sends them wrong and ignores the pushback, one sends none; each card is read
//! from `GET /api/labs/{lab}/callers`.

use std::time::Duration;

use futures_util::future::join_all;
use retrylab::config::Limits;
use serde_json::{Value, json};

use crate::helpers::TestApp;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Says how long it waits and keeps to it, numbers its attempts, stops when told to.
    Speaks,
    /// Says it waits 3 s and hangs up after 400 ms, says 3 attempts before where there was 1,
    /// and sends again a key it was told not to retry.
    Careless,
    /// Sends none of the headers.
    Silent,
}

struct Client {
    kind: Kind,
    name: &'static str,
    endpoint: String,
    http: reqwest::Client,
}

/// What one request got: its status and `X-Retry-Pushback-Ms`, or `None` when the client hung up.
type Got = Option<(u16, Option<String>)>;

impl Client {
    /// Sends `key` with the deadline and the count of attempts before that this kind says,
    /// hanging up after `hang_up_ms` if given.
    async fn send(&self, key: &str, (deadline_ms, before): (u32, u32), hang_up_ms: Option<u64>) -> Got {
        let mut request = self
            .http
            .post(&self.endpoint)
            .header("X-Client-Name", self.name)
            .header("Idempotency-Key", key)
            .json(&json!({ "key": key }));
        if self.kind != Kind::Silent {
            request = request
                .header("X-Request-Timeout-Ms", deadline_ms.to_string())
                .header("X-Previous-Attempts", before.to_string());
        }
        if let Some(ms) = hang_up_ms {
            request = request.timeout(Duration::from_millis(ms));
        }
        match request.send().await {
            Ok(response) => {
                let pushback =
                    response.headers().get("x-retry-pushback-ms").map(|v| v.to_str().unwrap().to_owned());
                Some((response.status().as_u16(), pushback))
            }
            Err(e) if e.is_timeout() => None,
            Err(e) => panic!("{}: {e}", self.name),
        }
    }
}

/// Each in its place before the next is sent (the snapshot's line says so).
fn placed(waiting: u64) -> impl Fn(&Value) -> bool {
    move |snapshot: &Value| snapshot["line"]["in_work"] == 1 && snapshot["line"]["waiting"] == waiting
}

/// The client's run: key `p` fails in the outage; then, overloaded (one worker, a line of
/// two, 1.5 s of work), `w` is worked, `h` waits in line and its client hangs up after 400 ms,
/// `p` comes again as a retry and waits, and a first attempt `f` takes its place: with
/// retries first and pushback on, the retry is shed with `X-Retry-Pushback-Ms: -1`.
async fn run(app: &TestApp, lab: &str, client: Client) -> Vec<Got> {
    let client = std::sync::Arc::new(client);
    app.put(lab, "downstream", r#"{"mode": "down", "retry_after_s": 1}"#).await;
    let p1 = client.send("p", (5_000, 0), None).await;
    let overloaded = json!({"mode": "overloaded", "capacity": 1, "queue": 2, "latency_ms": [1500, 1500],
        "defences": {"deadline": true, "retries_first": true, "pushback": true}});
    app.put(lab, "downstream", &overloaded.to_string()).await;
    let go = |key: &'static str, said: (u32, u32), hang_up_ms: Option<u64>| {
        let client = client.clone();
        tokio::spawn(async move { client.send(key, said, hang_up_ms).await })
    };
    let w = go("w", (5_000, 0), None);
    app.wait_for(lab, Duration::from_secs(10), placed(0)).await;
    let said_h = if client.kind == Kind::Careless { 3_000 } else { 400 };
    let h = go("h", (said_h, 0), Some(400));
    app.wait_for(lab, Duration::from_secs(10), placed(1)).await;
    let before = if client.kind == Kind::Careless { 3 } else { 1 };
    let p2 = go("p", (5_000, before), None);
    app.wait_for(lab, Duration::from_secs(10), placed(2)).await;
    let f = go("f", (5_000, 0), None);
    let p2 = p2.await.unwrap();
    let mut got = vec![p1, p2.clone()];
    if client.kind == Kind::Careless {
        // Told not to retry, and retries at once, still numbering it wrong.
        got.push(client.send("p", (5_000, before), None).await);
    }
    for task in [w, h, f] {
        got.push(task.await.unwrap());
    }
    got
}

fn card<'a>(report: &'a Value, name: &str) -> &'a Value {
    let callers = report["callers"].as_array().unwrap();
    &callers.iter().find(|c| c["name"] == name).unwrap_or_else(|| panic!("no caller {name}: {report}"))["checks"]
}

/// The verdicts of the three checks, and their evidence, in order.
fn judged(checks: &Value) -> [(String, String); 3] {
    ["deadline_sent", "attempts_numbered", "pushback_honoured"].map(|check| {
        let c = &checks[check];
        (c["verdict"].as_str().unwrap().to_owned(), c["evidence"].as_str().unwrap().to_owned())
    })
}

#[tokio::test]
async fn the_card_says_whether_a_caller_sent_its_deadline_numbered_its_attempts_and_honoured_a_pushback() {
    let app = TestApp::spawn_with(Limits {
        endpoint_rate_per_s: 100_000,
        endpoint_burst: 100_000,
        ..Default::default()
    })
    .await;
    let kinds = [(Kind::Speaks, "speaks"), (Kind::Careless, "careless"), (Kind::Silent, "silent")];
    let mut labs = Vec::new();
    for _ in kinds {
        labs.push(app.new_lab().await);
    }
    let runs = kinds.iter().zip(&labs).map(|(&(kind, name), lab)| {
        let client = Client {
            kind,
            name,
            endpoint: app.url(&format!("/labs/{lab}/downstream")),
            http: reqwest::Client::builder().no_proxy().build().unwrap(),
        };
        run(&app, lab, client)
    });
    let got = join_all(runs).await;
    let shed_told = Some((503, Some("-1".to_owned())));
    // What each got: p in the outage, p again, (careless: p a third time), w, h, f.
    assert_eq!(got[0], [Some((503, None)), shed_told.clone(), Some((200, None)), None, Some((200, None))]);
    assert_eq!(
        got[1],
        [Some((503, None)), shed_told, Some((503, None)), Some((200, None)), None, Some((200, None))],
        "careless: its third p is shed for want of room, not told again"
    );
    // Unmarked, its p is no retry to the endpoint: f finds a full line with none to shed, and p
    // is worked after w (h's client being gone).
    assert_eq!(got[2], [Some((503, None)), Some((200, None)), Some((200, None)), None, Some((503, None))]);

    let report = |lab: &str| {
        let url = app.url(&format!("/api/labs/{lab}/callers"));
        let http = app.client.clone();
        async move { http.get(url).send().await.unwrap().json::<Value>().await.unwrap() }
    };

    // Speaks: what the endpoint kept of it, then its card.
    let snapshot = app.snapshot(&labs[0]).await;
    let outside = snapshot["outside"]["messages"].as_array().unwrap();
    let p = outside.iter().find(|m| m["key"] == "p").unwrap();
    let kept: Vec<(Value, Value, Value)> = p["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["timeout_ms"].clone(), a["previous_attempts"].clone(), a["pushback_ms"].clone()))
        .collect();
    assert_eq!(kept, [(json!(5_000), json!(0), Value::Null), (json!(5_000), json!(1), json!(-1))]);
    let h = &outside.iter().find(|m| m["key"] == "h").unwrap()["attempts"][0];
    let hung_up_after = h["ended_ms"].as_u64().unwrap() - h["started_ms"].as_u64().unwrap();
    assert_eq!((h["hung_up"].clone(), h["timeout_ms"].clone()), (json!(true), json!(400)), "{h}");
    println!("speaks: said 400 ms, hung up after {hung_up_after} ms (as the endpoint measured it)");
    let speaks = report(&labs[0]).await;
    let [deadline, numbered, pushback] = judged(card(&speaks, "speaks"));
    assert_eq!(deadline.0, "pass", "{deadline:?}");
    assert!(
        deadline.1.contains("all 5 requests sent a deadline (400 to 5000 ms); it hung up once"),
        "{deadline:?}"
    );
    assert_eq!(numbered.0, "pass", "{numbered:?}");
    assert!(
        numbered.1.contains("1 retries numbered right") && numbered.1.contains("key p's request 2"),
        "{numbered:?}"
    );
    assert_eq!(pushback.0, "pass", "{pushback:?}");
    assert!(
        pushback.1.contains("key p was told -1 ms") && pushback.1.contains("not sent again"),
        "{pushback:?}"
    );
    assert!(card(&speaks, "speaks")["pushback_honoured"]["advice"].is_null());

    let careless = report(&labs[1]).await;
    let [deadline, numbered, pushback] = judged(card(&careless, "careless"));
    assert_eq!(deadline.0, "fail", "{deadline:?}");
    assert!(
        deadline.1.contains("key h's request 1") && deadline.1.contains("having said 3000 ms"),
        "{deadline:?}"
    );
    assert_eq!(numbered.0, "fail", "{numbered:?}");
    assert!(
        numbered.1.contains("key p's request 2") && numbered.1.contains("said 3, after 1 requests"),
        "{numbered:?}"
    );
    assert!(
        numbered.1.contains("key p's request 3") && numbered.1.contains("said 3, after 2 requests"),
        "{numbered:?}"
    );
    assert_eq!(pushback.0, "fail", "{pushback:?}");
    assert!(pushback.1.contains("key p was told -1 ms") && pushback.1.contains("came again"), "{pushback:?}");
    assert!(card(&careless, "careless")["pushback_honoured"]["advice"].as_str().unwrap().contains("gRFC A6"));

    let silent = report(&labs[2]).await;
    let [deadline, numbered, pushback] = judged(card(&silent, "silent"));
    assert_eq!(deadline.0, "warn", "{deadline:?}");
    assert!(deadline.1.contains("none of its 5 requests"), "{deadline:?}");
    assert_eq!(numbered.0, "warn", "{numbered:?}");
    assert!(
        numbered.1.contains("none of its 1 retries") && numbered.1.contains("key p's request 2"),
        "{numbered:?}"
    );
    assert_eq!(pushback.0, "not_seen", "nothing to judge is said so: {pushback:?}");
    assert!(
        card(&silent, "silent")["pushback_honoured"]["advice"].as_str().unwrap().contains("pushback defence")
    );

    // A deadline that does not parse is kept as such, and fails the check.
    let plain = app.new_lab().await;
    let sent = app
        .client
        .post(app.url(&format!("/labs/{plain}/downstream")))
        .header("X-Client-Name", "garbled")
        .header("Idempotency-Key", "g")
        .header("X-Request-Timeout-Ms", "-5")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(sent.status(), 200, "counted and ignored, never refused");
    let garbled = report(&plain).await;
    let [deadline, ..] = judged(card(&garbled, "garbled"));
    assert_eq!(deadline.0, "fail", "{deadline:?}");
    assert!(
        deadline.1.contains("1 requests sent an X-Request-Timeout-Ms that did not parse"),
        "{deadline:?}"
    );
    let snapshot = app.snapshot(&plain).await;
    assert_eq!(snapshot["outside"]["messages"][0]["attempts"][0]["unparsed"], json!({"timeout": true}));

    // The OpenAPI description says all of it: the cards, and the outside messages with what
    // their attempts sent.
    let spec: Value =
        app.client.get(app.url("/api/openapi.json")).send().await.unwrap().json().await.unwrap();
    let schemas = &spec["components"]["schemas"];
    for name in ["CallersView", "OutsideMessage", "OutsideAttempt", "Unparsed"] {
        assert!(schemas[name]["properties"].is_object(), "{name} is described");
    }
    let mut errors = Vec::new();
    for report in [&speaks, &careless, &silent, &garbled] {
        crate::compare::breaks(&spec, &schemas["CallersView"], report, "", &mut errors);
    }
    for lab in labs.iter().chain([&plain]) {
        let snapshot = app.snapshot(lab).await;
        for message in snapshot["outside"]["messages"].as_array().unwrap() {
            crate::compare::breaks(&spec, &schemas["OutsideMessage"], message, "", &mut errors);
        }
    }
    assert!(errors.is_empty(), "{}", errors.join("\n"));
    assert!(
        schemas["Unparsed"].is_object() && schemas["Checks"]["properties"]["pushback_honoured"].is_object()
    );
}
