//! The baseline for the downstream's throughput: a bare axum handler that reads the same JSON
//! body and answers 200 with a small JSON, nothing else. `scripts/endpoint-throughput.sh` runs
//! wrk against it and against a lab's endpoint in the same run.
//!
//!     cargo run --release --example bare_endpoint -- 127.0.0.1:3999

use axum::Json;
use axum::http::HeaderMap;
use axum::routing::post;

async fn endpoint(headers: HeaderMap, Json(body): Json<serde_json::Value>) -> Json<serde_json::Value> {
    let key = headers.get("idempotency-key").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    Json(
        serde_json::json!({ "key": key, "result": "applied", "fields": body.as_object().map_or(0, |o| o.len()) }),
    )
}

#[tokio::main]
async fn main() {
    let address = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:3999".into());
    let listener = tokio::net::TcpListener::bind(&address).await.expect("the address is free");
    println!("bare endpoint on http://{address}/");
    let app = axum::Router::new().route("/labs/{lab}/downstream", post(endpoint));
    axum::serve(listener, app).await.expect("serves");
}
