//! A small Chrome DevTools Protocol client: launches Debian's headless Chromium with a fresh
//! profile, attaches to its page over a WebSocket and speaks CDP's JSON-RPC. It does only what
//! the browser tests need: navigate, evaluate, click and hover with real mouse events, resize
//! the viewport, take screenshots, and collect every console error the page produced.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use futures_util::stream::SplitSink;
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio::sync::{broadcast, oneshot};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

pub const CHROMIUM: &str = "/usr/bin/chromium";
/// Every wait in here is bounded; on two shared cores a cold Chromium can take a while.
const PATIENCE: Duration = Duration::from_secs(30);

type Sink = SplitSink<WebSocketStream<MaybeTlsStream<TcpStream>>, Message>;
type Replies = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<Value, String>>>>>;

/// A running Chromium; killed, and its profile removed, when dropped.
pub struct Browser {
    child: Child,
    profile: PathBuf,
    port: u16,
}

impl Browser {
    pub fn launch() -> Result<Browser, String> {
        let profile =
            Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("chromium-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&profile).map_err(|e| format!("profile dir: {e}"))?;
        let mut child = Command::new(CHROMIUM)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                // Loopback only: never route the test's requests through a proxy from the environment.
                "--no-proxy-server",
                "--remote-debugging-port=0",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            // Its own process group, so drop can end the renderers along with the browser.
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cannot start {CHROMIUM}: {e}"))?;

        // The port is chosen by Chromium and announced on stderr. Keep draining stderr after
        // that line, or Chromium blocks once the pipe fills.
        let stderr = child.stderr.take().expect("stderr is piped");
        let (found, announced) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut seen = Vec::new();
            let mut found = Some(found);
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(sender) = &found {
                    if let Some(url) = line.split("DevTools listening on ").nth(1) {
                        let _ = sender.send(Ok(url.trim().to_owned()));
                        found = None;
                    } else {
                        seen.push(line);
                    }
                }
            }
            if let Some(sender) = found {
                let _ = sender.send(Err(seen.join("\n")));
            }
        });
        let mut browser = Browser { child, profile, port: 0 };
        let url = match announced.recv_timeout(PATIENCE) {
            Ok(Ok(url)) => url,
            Ok(Err(stderr)) => return Err(format!("Chromium exited before listening:\n{stderr}")),
            Err(_) => return Err("Chromium did not announce its DevTools port in 30 s".into()),
        };
        // ws://127.0.0.1:PORT/devtools/browser/ID
        browser.port = url
            .trim_start_matches("ws://")
            .split(['/', ':'])
            .nth(1)
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| format!("unexpected DevTools address {url}"))?;
        Ok(browser)
    }

    /// Attaches to the page Chromium opened at start, as a person who has asked the lab page
    /// for every control (the console) before: most tests press controls the story hides.
    pub async fn page(&self) -> Page {
        let page = self.first_visit().await;
        let remembered = "try { localStorage.setItem('retrylab.view', 'console') } catch {}";
        page.call("Page.addScriptToEvaluateOnNewDocument", json!({ "source": remembered })).await.unwrap();
        page
    }

    /// Attaches to the page Chromium opened at start, as on a first visit: the lab page leads
    /// with its story.
    pub async fn first_visit(&self) -> Page {
        let http = reqwest::Client::builder().no_proxy().build().unwrap();
        let list = format!("http://127.0.0.1:{}/json/list", self.port);
        let start = Instant::now();
        let ws_url = loop {
            let targets: Vec<Value> = match http.get(&list).send().await {
                Ok(response) => response.json().await.unwrap_or_default(),
                Err(_) => Vec::new(),
            };
            let page = targets.iter().find(|t| t["type"] == "page");
            if let Some(url) = page.and_then(|t| t["webSocketDebuggerUrl"].as_str()) {
                break url.to_owned();
            }
            assert!(start.elapsed() < PATIENCE, "no page target in {targets:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        Page::attach(&ws_url).await
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Negative pid: the whole process group we created, and nothing else.
        let _ = Command::new("kill").args(["-KILL", "--", &format!("-{}", self.child.id())]).status();
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// One page (tab) of the browser.
pub struct Page {
    sink: tokio::sync::Mutex<Sink>,
    next_id: AtomicU64,
    replies: Replies,
    events: broadcast::Sender<(String, Value)>,
    errors: Arc<Mutex<Vec<ConsoleError>>>,
    reader: tokio::task::JoinHandle<()>,
}

/// Something the page reported as an error: a console.error call, an uncaught exception, or
/// a browser log entry at level error (failed loads, CSP violations...).
#[derive(Debug, Clone)]
pub struct ConsoleError {
    /// `console`, `exception`, or the log entry's source (`network`, `javascript`, ...).
    pub source: String,
    pub text: String,
}

impl std::fmt::Display for ConsoleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[{}] {}", self.source, self.text)
    }
}

impl Page {
    async fn attach(ws_url: &str) -> Page {
        let (socket, _) = tokio_tungstenite::connect_async(ws_url).await.expect("DevTools WebSocket");
        let (sink, mut stream) = socket.split();
        let replies: Replies = Arc::default();
        let errors: Arc<Mutex<Vec<ConsoleError>>> = Arc::default();
        let (events, _) = broadcast::channel(4096);
        let reader = tokio::spawn({
            let (replies, errors, events) = (replies.clone(), errors.clone(), events.clone());
            async move {
                while let Some(Ok(message)) = stream.next().await {
                    let Message::Text(text) = message else { continue };
                    let Ok(message) = serde_json::from_str::<Value>(&text) else { continue };
                    if let Some(id) = message["id"].as_u64() {
                        let reply = match message.get("error") {
                            Some(error) => Err(error.to_string()),
                            None => Ok(message["result"].clone()),
                        };
                        if let Some(waiter) = replies.lock().unwrap().remove(&id) {
                            let _ = waiter.send(reply);
                        }
                    } else if let Some(method) = message["method"].as_str() {
                        if let Some(error) = console_error(method, &message["params"]) {
                            errors.lock().unwrap().push(error);
                        }
                        // Nobody listening is fine: events are only awaited now and then.
                        let _ = events.send((method.to_owned(), message["params"].clone()));
                    }
                }
            }
        });
        let page = Page {
            sink: tokio::sync::Mutex::new(sink),
            next_id: AtomicU64::new(1),
            replies,
            events,
            errors,
            reader,
        };
        for domain in ["Page.enable", "Runtime.enable", "Log.enable"] {
            page.call(domain, json!({})).await.unwrap();
        }
        page
    }

    /// Sends one command and waits for its result.
    pub async fn call(&self, method: &str, params: Value) -> Result<Value, String> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (reply, answer) = oneshot::channel();
        self.replies.lock().unwrap().insert(id, reply);
        let request = json!({ "id": id, "method": method, "params": params }).to_string();
        self.sink.lock().await.send(Message::text(request)).await.map_err(|e| format!("{method}: {e}"))?;
        match tokio::time::timeout(PATIENCE, answer).await {
            Ok(Ok(result)) => result.map_err(|e| format!("{method}: {e}")),
            Ok(Err(_)) => Err(format!("{method}: the DevTools connection closed")),
            Err(_) => Err(format!("{method}: no answer in 30 s")),
        }
    }

    /// Every event the browser sends from now on, as `(method, params)`.
    pub fn events(&self) -> broadcast::Receiver<(String, Value)> {
        self.events.subscribe()
    }

    /// Opens `url` and waits for its load event (scripts, including modules, have run).
    pub async fn navigate(&self, url: &str) {
        let mut events = self.events.subscribe();
        let result = self.call("Page.navigate", json!({ "url": url })).await.unwrap();
        assert!(result.get("errorText").is_none(), "navigating to {url}: {result}");
        tokio::time::timeout(PATIENCE, async {
            loop {
                match events.recv().await {
                    Ok((method, _)) if method == "Page.loadEventFired" => return,
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => panic!("browser went away"),
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{url} did not finish loading in 30 s"));
    }

    /// Evaluates a JavaScript expression (awaiting a promise) and returns its value as JSON.
    pub async fn eval(&self, expression: &str) -> Result<Value, String> {
        let params = json!({ "expression": expression, "awaitPromise": true, "returnByValue": true });
        let result = self.call("Runtime.evaluate", params).await?;
        if let Some(details) = result.get("exceptionDetails") {
            let text =
                details["exception"]["description"].as_str().or(details["text"].as_str()).unwrap_or("?");
            return Err(format!("{expression}: {text}"));
        }
        Ok(result["result"]["value"].clone())
    }

    /// Where a person would press `selector`: the centre of its box, once it is displayed,
    /// enabled and not covered by anything else. Scrolls it into view first.
    async fn target(&self, selector: &str) -> (f64, f64) {
        let script = format!(
            r#"(() => {{
                const el = document.querySelector({selector});
                if (!el) return {{ wait: 'not in the page' }};
                if (el.disabled) return {{ wait: 'disabled' }};
                el.scrollIntoView({{ block: 'center', inline: 'center', behavior: 'instant' }});
                const r = el.getBoundingClientRect();
                if (r.width === 0 || r.height === 0) return {{ wait: 'not displayed' }};
                const x = r.left + r.width / 2, y = r.top + r.height / 2;
                const hit = document.elementFromPoint(x, y);
                if (!hit || !(el === hit || el.contains(hit))) return {{ wait: `covered by ${{hit?.outerHTML.slice(0, 80)}}` }};
                return {{ x, y }};
            }})()"#,
            selector = json!(selector)
        );
        // The element must stand still for one poll: a view that is still scrolling (a smooth
        // scroll, a timeline redrawn after it) would move it from under the press.
        let start = Instant::now();
        let mut last = None;
        loop {
            let spot = self.eval(&script).await.unwrap();
            let here = spot["x"].as_f64().zip(spot["y"].as_f64());
            if let Some(spot) = here
                && last == here
            {
                return spot;
            }
            last = here;
            assert!(start.elapsed() < PATIENCE, "cannot press {selector}: {}", spot["wait"]);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Presses `selector` with the mouse, as a person would: move, press, release.
    pub async fn click(&self, selector: &str) {
        let (x, y) = self.target(selector).await;
        self.mouse("mouseMoved", x, y).await;
        self.mouse("mousePressed", x, y).await;
        self.mouse("mouseReleased", x, y).await;
    }

    /// Moves the mouse over `selector`.
    pub async fn hover(&self, selector: &str) {
        let (x, y) = self.target(selector).await;
        self.mouse("mouseMoved", x, y).await;
    }

    async fn mouse(&self, kind: &str, x: f64, y: f64) {
        let (button, click_count) = if kind == "mouseMoved" { ("none", 0) } else { ("left", 1) };
        let params = json!({ "type": kind, "x": x, "y": y, "button": button, "clickCount": click_count });
        self.call("Input.dispatchMouseEvent", params).await.unwrap();
    }

    /// Presses and releases one key on whatever has the focus, as a keyboard would.
    pub async fn press(&self, key: &str) {
        // The virtual key code makes Chromium act on the key (Enter submits a form); `text`
        // makes a printable key type its character.
        let (code, text) = match key {
            "Enter" => (13, "\r"),
            "Tab" => (9, ""),
            " " => (32, " "),
            "Escape" => (27, ""),
            "End" => (35, ""),
            "Home" => (36, ""),
            "ArrowLeft" => (37, ""),
            "ArrowUp" => (38, ""),
            "ArrowRight" => (39, ""),
            "ArrowDown" => (40, ""),
            "0" => (48, "0"),
            "+" => (187, "+"),
            "-" => (189, "-"),
            other => panic!("press: no key code for {other:?}"),
        };
        let down = if text.is_empty() { "rawKeyDown" } else { "keyDown" };
        for kind in [down, "keyUp"] {
            let params = json!({ "type": kind, "key": key, "windowsVirtualKeyCode": code, "text": text });
            self.call("Input.dispatchKeyEvent", params).await.unwrap();
        }
    }

    /// Types `text` into whatever has the focus (an `input` event, as from a keyboard).
    pub async fn type_text(&self, text: &str) {
        self.call("Input.insertText", json!({ "text": text })).await.unwrap();
    }

    /// Drags with the left button from (x, y) by `dx` px, in a few steps.
    pub async fn drag(&self, x: f64, y: f64, dx: f64) {
        let mouse = |kind: &str, x: f64, buttons: u8| {
            let button = if kind == "mouseMoved" { "none" } else { "left" };
            json!({ "type": kind, "x": x, "y": y, "button": button, "buttons": buttons, "clickCount": 1 })
        };
        self.call("Input.dispatchMouseEvent", mouse("mouseMoved", x, 0)).await.unwrap();
        self.call("Input.dispatchMouseEvent", mouse("mousePressed", x, 1)).await.unwrap();
        for step in 1..=4 {
            let at = x + dx * f64::from(step) / 4.0;
            self.call("Input.dispatchMouseEvent", mouse("mouseMoved", at, 1)).await.unwrap();
        }
        self.call("Input.dispatchMouseEvent", mouse("mouseReleased", x + dx, 0)).await.unwrap();
    }

    /// Emulates a screen `width` px wide (a phone's below 600 px).
    pub async fn set_viewport(&self, width: u32, height: u32) {
        let params =
            json!({ "width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600 });
        self.call("Emulation.setDeviceMetricsOverride", params).await.unwrap();
    }

    /// Saves a PNG of the whole page under `target/browser-screenshots/` and returns its path.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        // From the top, so the fixed bars sit where a visitor first sees them, not mid-page.
        let size = self
            .eval("window.scrollTo(0, 0), [document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
            .await
            .unwrap();
        let clip = json!({ "x": 0, "y": 0, "width": size[0], "height": size[1], "scale": 1 });
        self.save(name, json!({ "format": "png", "captureBeyondViewport": true, "clip": clip })).await
    }

    /// Saves a PNG of what the viewport shows right now (a tooltip, say), without scrolling.
    pub async fn screenshot_viewport(&self, name: &str) -> PathBuf {
        self.save(name, json!({ "format": "png" })).await
    }

    async fn save(&self, name: &str, params: Value) -> PathBuf {
        let shot = self.call("Page.captureScreenshot", params).await.unwrap();
        let png = base64::engine::general_purpose::STANDARD.decode(shot["data"].as_str().unwrap()).unwrap();
        let folder = Path::new(env!("CARGO_TARGET_TMPDIR")).parent().unwrap().join("browser-screenshots");
        std::fs::create_dir_all(&folder).unwrap();
        let path = folder.join(format!("{name}.png"));
        std::fs::write(&path, png).unwrap();
        path
    }

    /// Every error the page reported so far.
    pub fn console_errors(&self) -> Vec<ConsoleError> {
        self.errors.lock().unwrap().clone()
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// The error, if this event reports one.
fn console_error(method: &str, params: &Value) -> Option<ConsoleError> {
    match method {
        "Runtime.consoleAPICalled" if params["type"] == "error" || params["type"] == "assert" => {
            let args = params["args"].as_array().map(Vec::as_slice).unwrap_or_default();
            let text = args
                .iter()
                // Strings as written, objects by their description, other values as JSON.
                .map(|a| match (a["value"].as_str(), a["description"].as_str()) {
                    (Some(text), _) | (None, Some(text)) => text.to_owned(),
                    (None, None) => a["value"].to_string(),
                })
                .collect::<Vec<_>>()
                .join(" ");
            Some(ConsoleError { source: "console".into(), text })
        }
        "Runtime.exceptionThrown" => {
            let details = &params["exceptionDetails"];
            let text =
                details["exception"]["description"].as_str().or(details["text"].as_str()).unwrap_or("?");
            Some(ConsoleError { source: "exception".into(), text: text.to_owned() })
        }
        "Log.entryAdded" if params["entry"]["level"] == "error" => {
            let entry = &params["entry"];
            let text =
                format!("{} {}", entry["text"].as_str().unwrap_or("?"), entry["url"].as_str().unwrap_or(""));
            Some(ConsoleError { source: entry["source"].as_str().unwrap_or("log").to_owned(), text })
        }
        _ => None,
    }
}
