//! The Dockerfile and fly.toml agree with each other and with the server: one port, one
//! health check that answers, one shutdown signal, the store on the mounted volume, a
//! non-root user, and a build step that is the script CI runs.

use std::path::Path;

use crate::helpers::TestApp;

fn read(file: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(file)).unwrap()
}

/// The value of `key = "value"` or `key = value` in fly.toml (first occurrence).
fn fly(key: &str) -> String {
    let toml = read("fly.toml");
    let line = toml
        .lines()
        .map(str::trim)
        .find(|l| l.split('=').next().map(str::trim) == Some(key))
        .unwrap_or_else(|| panic!("fly.toml has no {key}"));
    line.split_once('=').unwrap().1.trim().trim_matches('"').to_owned()
}

#[tokio::test]
async fn the_dockerfile_and_fly_toml_agree_with_the_server() {
    let dockerfile = read("Dockerfile");
    let port = fly("internal_port");
    assert!(dockerfile.contains(&format!("EXPOSE {port}")), "the image exposes fly's internal_port");
    assert!(dockerfile.contains(&format!("RETRYLAB_ADDR=0.0.0.0:{port}")), "and serves on it");
    assert_eq!(fly("RETRYLAB_ADDR"), format!("0.0.0.0:{port}"));

    // Metrics on a port of their own, the one fly scrapes, in the image as in fly.toml.
    let metrics = fly("RETRYLAB_METRICS_ADDR");
    assert!(dockerfile.contains(&format!("RETRYLAB_METRICS_ADDR={metrics}")), "the image sets it too");
    assert_eq!(metrics.rsplit_once(':').unwrap().1, fly("port"), "fly scrapes the metrics port");
    assert_ne!(fly("port"), port, "never the public port");

    // Behind fly's proxy every connection comes from the proxy: no per-address cap.
    assert!(!fly("RETRYLAB_CLIENT_IP_HEADER").is_empty());
    assert_eq!(fly("RETRYLAB_MAX_CONNECTIONS_PER_IP"), "0");

    let stop = fly("kill_signal");
    assert!(dockerfile.contains(&format!("STOPSIGNAL {stop}")), "one shutdown signal");
    let grace: u64 = fly("kill_timeout").trim_end_matches('s').parse().unwrap();
    assert!(grace > 5, "fly waits longer than retrylab's 5 s shutdown");

    let volume = fly("destination");
    assert!(fly("RETRYLAB_DB").starts_with(&format!("{volume}/")), "the store is on the volume");
    assert!(dockerfile.contains(&format!("VOLUME {volume}")));

    assert!(dockerfile.contains("USER retrylab") && !dockerfile.contains("USER root"), "runs as non-root");
    assert!(dockerfile.contains("RUN scripts/build-release.sh"), "the build step is the script CI runs");
    for line in dockerfile.lines().filter(|l| l.starts_with("COPY ") && !l.contains("--from")) {
        let sources: Vec<&str> = line.split_whitespace().skip(1).collect();
        for source in &sources[..sources.len() - 1] {
            assert!(Path::new(env!("CARGO_MANIFEST_DIR")).join(source).exists(), "COPY {source}: missing");
        }
    }

    // The health check fly will call answers 200.
    let path = fly("path");
    let app = TestApp::spawn().await;
    assert_eq!(app.client.get(app.url(&path)).send().await.unwrap().status(), 200, "{path}");
}
