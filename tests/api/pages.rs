//! The page, its assets and the headers every answer carries.

use std::collections::BTreeSet;

use crate::helpers::TestApp;

#[tokio::test]
async fn root_creates_a_lab_and_redirects_to_its_page() {
    let app = TestApp::spawn().await;
    let response = app.client.get(app.url("/")).send().await.unwrap();
    assert_eq!(response.status(), 303);
    let location = response.headers()["location"].to_str().unwrap().to_owned();
    let id = location.strip_prefix("/labs/").expect("a lab URL");
    assert_eq!(uuid::Uuid::parse_str(id).unwrap().get_version_num(), 4);

    let page = app.client.get(app.url(&location)).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let csp = page.headers()["content-security-policy"].to_str().unwrap().to_owned();
    assert!(csp.contains("script-src 'self'"), "{csp}");
    assert_eq!(page.headers()["x-content-type-options"], "nosniff");
    let html = page.text().await.unwrap();
    assert!(html.contains(id), "the page knows its lab");
    for counter in
        ["in_flight", "backing_off", "delivered", "dead_letter", "requests", "applied", "applied_twice"]
    {
        assert!(html.contains(&format!("data-counter=\"{counter}\"")), "no {counter} on the page");
    }
    assert!(!html.contains("<script>"), "no inline script");
    assert!(
        html.contains("<summary>check your own API</summary>")
            && html.contains("<code>retrylab check URL</code>"),
        "the endpoint's section points to retrylab check"
    );
    for window in ["an applied key for 1 day", "a dead letter for 14 days", "a lab nobody uses for 7 days"] {
        assert!(html.contains(window), "the page shows the retention window: {window}");
    }
}

#[tokio::test]
async fn an_unknown_lab_page_is_a_friendly_404() {
    let app = TestApp::spawn().await;
    for path in ["/labs/not-a-lab", "/labs/6f1c1c3e-9d5e-4a55-8f4a-3b3c2d1e0f9a"] {
        let response = app.client.get(app.url(path)).send().await.unwrap();
        assert_eq!(response.status(), 404, "{path}");
        assert!(response.headers()["content-type"].to_str().unwrap().starts_with("text/html"));
        assert!(response.text().await.unwrap().contains("href=\"/\""), "links to a new lab");
    }
}

#[tokio::test]
async fn an_unknown_comparison_page_is_the_same_friendly_404() {
    let app = TestApp::spawn().await;
    let unknown = format!("/compare/{}", uuid::Uuid::new_v4());
    for path in ["/compare/nope", unknown.as_str()] {
        let response = app.client.get(app.url(path)).send().await.unwrap();
        assert_eq!(response.status(), 404, "{path}");
        let kind = response.headers()["content-type"].to_str().unwrap().to_owned();
        assert!(kind.starts_with("text/html"), "{path}: {kind}");
        let html = response.text().await.unwrap();
        assert!(html.contains("This comparison does not exist"), "{path}: {html}");
        assert!(html.contains("href=\"/compare\""), "links to a new comparison: {html}");
    }
    // The API keeps its problem+json.
    let api = app.client.get(app.url("/api/comparisons/nope")).send().await.unwrap();
    assert_eq!(api.status(), 400);
    assert_eq!(api.headers()["content-type"], "application/problem+json");
}

#[tokio::test]
async fn every_page_opens_with_a_skip_link_to_its_main_content() {
    let app = TestApp::spawn().await;
    let lab_id = app.new_lab().await;
    let lab = app.client.get(app.url(&format!("/labs/{lab_id}"))).send().await.unwrap().text().await.unwrap();
    let form = app.client.get(app.url("/compare")).send().await.unwrap().text().await.unwrap();
    let gone = app.client.get(app.url("/labs/nope")).send().await.unwrap().text().await.unwrap();
    for (page, target) in [(lab, "lab"), (form, "compare"), (gone, "main")] {
        let link = format!("<a class=\"skip-link\" href=\"#{target}\">");
        let at = page.find(&link).unwrap_or_else(|| panic!("no skip link to #{target}"));
        assert!(page.contains(&format!("<main id=\"{target}\"")), "no main #{target}");
        // The first thing in the body, so it is the first stop for the keyboard.
        let body = page.find("<body>").unwrap();
        assert!(page[body + 6..at].trim().is_empty(), "the skip link is not first: {}", &page[body..at]);
    }
}

#[tokio::test]
async fn every_static_file_is_served_with_its_type() {
    let app = TestApp::spawn().await;
    let on_disk: BTreeSet<String> = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/static"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(on_disk.contains("app.js"));
    for file in on_disk {
        let response = app.client.get(app.url(&format!("/static/{file}"))).send().await.unwrap();
        assert_eq!(response.status(), 200, "{file} is not served");
        let kind = response.headers()["content-type"].to_str().unwrap().to_owned();
        let expected = match file.rsplit('.').next() {
            Some("css") => "text/css",
            Some("json") => "application/json",
            _ => "text/javascript",
        };
        assert!(kind.starts_with(expected), "{file}: {kind}");
        let served = response.text().await.unwrap();
        let local = std::fs::read_to_string(format!("{}/static/{file}", env!("CARGO_MANIFEST_DIR"))).unwrap();
        assert!(served == local, "{file} is not served as it is on disk");
    }
}

#[tokio::test]
async fn healthz_answers() {
    let app = TestApp::spawn().await;
    let response = app.client.get(app.url("/healthz")).send().await.unwrap();
    assert_eq!(response.status(), 200);
}

/// The modules `file` imports, and theirs, by name.
fn imported_modules(file: &str, found: &mut BTreeSet<String>) {
    let source = std::fs::read_to_string(format!("{}/static/{file}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    for import in source.split("from './").skip(1) {
        let name = import.split('\'').next().unwrap().to_owned();
        if found.insert(name.clone()) {
            imported_modules(&name, found);
        }
    }
}

#[tokio::test]
async fn the_lab_page_preloads_every_module_it_imports() {
    let app = TestApp::spawn().await;
    let lab = app.new_lab().await;
    let html = app.client.get(app.url(&format!("/labs/{lab}"))).send().await.unwrap().text().await.unwrap();
    let preloaded: BTreeSet<String> = html
        .split("<link rel=\"modulepreload\" href=\"/static/")
        .skip(1)
        .map(|rest| rest.split('"').next().unwrap().to_owned())
        .collect();
    let mut imported = BTreeSet::new();
    imported_modules("app.js", &mut imported);
    assert!(imported.contains("stream.js") && imported.len() > 10, "{imported:?}");
    assert_eq!(preloaded, imported, "the page fetches its modules at once, not one level at a time");
}

#[tokio::test]
async fn the_snapshot_and_the_scripts_are_compressed_the_stream_and_the_endpoint_are_not() {
    let app = TestApp::spawn().await;
    let lab = app.fast_lab().await;
    app.burst(&lab, 200).await;
    app.wait_for(&lab, std::time::Duration::from_secs(30), |s| {
        crate::helpers::counter(s, "delivered") == 200
    })
    .await;
    let get = |path: String| app.client.get(app.url(&path)).header("accept-encoding", "gzip").send();
    let plain = app.client.get(app.url(&format!("/api/labs/{lab}"))).send().await.unwrap();
    assert!(plain.headers().get("content-encoding").is_none(), "only for a client that accepts it");
    let plain = plain.bytes().await.unwrap();
    let packed = get(format!("/api/labs/{lab}")).await.unwrap();
    assert_eq!(packed.headers()["content-encoding"], "gzip");
    let packed = packed.bytes().await.unwrap();
    assert_eq!(packed[..2], [0x1f, 0x8b], "a gzip stream");
    assert!(packed.len() * 5 < plain.len(), "{} of {} bytes", packed.len(), plain.len());
    let script = get("/static/app.js".into()).await.unwrap();
    assert_eq!(script.headers()["content-encoding"], "gzip");

    let stream = get(format!("/api/labs/{lab}/events")).await.unwrap();
    assert!(stream.headers().get("content-encoding").is_none(), "events go out as they happen");
    let endpoint = app
        .client
        .post(app.url(&format!("/labs/{lab}/downstream")))
        .header("accept-encoding", "gzip")
        .header("content-type", "application/json")
        .header("idempotency-key", "plain")
        .body(format!(r#"{{"pad": "{}"}}"#, "x".repeat(2000)))
        .send()
        .await
        .unwrap();
    assert!(endpoint.headers().get("content-encoding").is_none(), "answers kept byte for byte");
}

#[tokio::test]
async fn every_page_has_one_top_bar_whose_logo_keeps_the_lab_and_an_explicit_new_lab() {
    let app = TestApp::spawn().await;
    let lab = app.new_lab().await;
    let form = app.client.get(app.url("/compare")).send().await.unwrap().text().await.unwrap();
    let lab_page =
        app.client.get(app.url(&format!("/labs/{lab}"))).send().await.unwrap().text().await.unwrap();
    let missing = app.client.get(app.url("/labs/not-a-lab")).send().await.unwrap().text().await.unwrap();
    for (page, html) in [("lab", &lab_page), ("compare", &form), ("404", &missing)] {
        assert_eq!(html.matches("<header class=\"topbar\">").count(), 1, "{page}");
        assert_eq!(html.matches("<head>").count(), 1, "{page}");
        assert!(html.contains(r#"<a href="/" class="top-new" data-new-lab"#), "{page}: a new-lab link");
        // The logo never starts a new lab.
        assert!(!html.contains(r#"class="brand" href="/""#), "{page}: the logo starts a new lab");
    }
    assert!(lab_page.contains(&format!(r#"<a class="brand" href="/labs/{lab}""#)), "the logo keeps the lab");
    let modes: Vec<&str> =
        lab_page.split("class=\"mode\" data-mode=\"").skip(1).map(|m| m.split('"').next().unwrap()).collect();
    assert_eq!(modes, ["healthy", "flaky", "slow", "down", "throttled", "overloaded"]);
    assert!(lab_page.contains(r#"data-mode="healthy" aria-pressed="true""#), "healthy is pressed");
    assert_eq!(lab_page.matches(r#"class="mode" data-mode"#).count(), 6);
    // The templates share one head and top bar instead of copying them.
    for template in ["lab.html", "compare.html", "not_found.html"] {
        let source =
            std::fs::read_to_string(format!("{}/templates/{template}", env!("CARGO_MANIFEST_DIR"))).unwrap();
        assert!(source.starts_with("{% extends \"base.html\" %}"), "{template}");
        assert!(!source.contains("<head>") && !source.contains("class=\"topbar\""), "{template}");
    }
}

/// The comparison's form offers the presets named for a library or a paper, each linking its
/// source beside the few words that say what it is.
#[tokio::test]
async fn the_compare_form_links_each_sourced_preset_to_its_source() {
    let app = TestApp::spawn().await;
    let form = app.client.get(app.url("/compare")).send().await.unwrap().text().await.unwrap();
    for (name, source) in [
        ("grpc", "https://github.com/grpc/proposal/blob/master/A6-client-retries.md"),
        ("sre", "https://sre.google/sre-book/handling-overload/"),
        ("aws-standard", "https://github.com/boto/botocore/blob/develop/botocore/retries/standard.py"),
        ("aws-2026", "https://github.com/boto/botocore/blob/develop/botocore/retries/standard.py"),
        ("aws-adaptive", "https://github.com/boto/botocore/blob/develop/botocore/retries/adaptive.py"),
        ("ratio-breaker", "https://www.pollydocs.org/strategies/circuit-breaker.html"),
        (
            "envoy",
            "https://www.envoyproxy.io/docs/envoy/latest/api-v3/config/cluster/v3/circuit_breaker.proto",
        ),
    ] {
        let at = form
            .find(&format!(r#"name="policy" value="{name}""#))
            .unwrap_or_else(|| panic!("the form offers no {name}"));
        let label_end = at + form[at..].find("</label>").unwrap();
        assert!(
            form[at..label_end].contains(&format!(r#"href="{source}""#)),
            "{name}: {}",
            &form[at..label_end]
        );
    }
}

/// The page lists no kind of protection nor dead-letter cause of its own: it takes them from
/// `GET /api/protection-kinds`, which the one table in `retry::protection` makes, and the lab
/// page's cause filter offers the same causes in the same words.
#[tokio::test]
async fn the_page_takes_the_kinds_and_causes_from_the_server() {
    use retrylab::dlq::Cause;
    use retrylab::retry::protection::ProtectionKind;
    use serde_json::{Value, json};

    let app = TestApp::spawn().await;
    let answer: Value =
        app.client.get(app.url("/api/protection-kinds")).send().await.unwrap().json().await.unwrap();
    let kinds: Vec<Value> =
        ProtectionKind::ALL.iter().map(|k| json!({"kind": k.name(), "words": k.words()})).collect();
    assert_eq!(answer["kinds"], json!(kinds));
    let causes: Vec<Value> = Cause::all()
        .map(|c| match c.kind() {
            Some(kind) => json!({"cause": c.as_str(), "words": c.words(), "kind": kind.name()}),
            None => json!({"cause": c.as_str(), "words": c.words()}),
        })
        .collect();
    assert_eq!(answer["causes"], json!(causes));
    assert!(causes.len() > kinds.len(), "every kind a cause, and the fixed causes besides");

    let lab = app.new_lab().await;
    let html = app.client.get(app.url(&format!("/labs/{lab}"))).send().await.unwrap().text().await.unwrap();
    for cause in Cause::all() {
        let option = format!("<option value=\"{}\">{}</option>", cause.as_str(), cause.words());
        assert!(html.contains(&option), "the lab page offers {option}");
    }

    // No page module names a kind: not as a string, nor as a key with its words.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("static");
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "js") {
            continue;
        }
        let source = std::fs::read_to_string(&path).unwrap();
        for kind in ProtectionKind::ALL {
            let name = kind.name();
            for written in
                [format!("'{name}'"), format!("\"{name}\""), format!("`{name}`"), format!("{name}: '")]
            {
                assert!(!source.contains(&written), "{} names the kind {written}", path.display());
            }
        }
    }
}
