//! retrylab: break a real HTTP endpoint, send real traffic at it, and watch retries, backoff
//! with jitter, `Retry-After`, idempotency keys and a dead-letter queue do their work.
//!
//! The parts, each a module (arrows point to what a part uses):
//! `web` -> `lab` -> (`producer` -> `retry`), `downstream`, `dlq`, `events`; `lab` -> `store`.

pub mod config;
pub mod dlq;
pub mod downstream;
pub mod events;
pub mod lab;
pub mod producer;
pub mod retry;
pub mod store;
pub mod web;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::watch;

use config::Limits;
use lab::Labs;
use producer::Producer;
use web::{App, AppState};

/// Serves retrylab on `listener` until `shutdown` completes, then lets open requests finish.
pub async fn serve(
    listener: TcpListener,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let address = listener.local_addr()?;
    let producer = Producer::new(self_url(address)).map_err(std::io::Error::other)?;
    let (stop, stopped) = watch::channel(false);
    let app = App { labs: Labs::new(limits.clone()), producer, limits, shutdown: stopped };
    let router = web::router(AppState(Arc::new(app)));
    axum::serve(listener, router)
        .with_graceful_shutdown(async move {
            shutdown.await;
            // Ends the event streams, which would otherwise hold the shutdown open.
            let _ = stop.send(true);
        })
        .await
}

/// How the producer reaches this server's own downstream route: over loopback when the server
/// listens on every interface.
fn self_url(address: SocketAddr) -> String {
    let host = match address.ip() {
        ip if ip.is_unspecified() && ip.is_ipv4() => "127.0.0.1".to_owned(),
        ip if ip.is_unspecified() => "[::1]".to_owned(),
        std::net::IpAddr::V6(ip) => format!("[{ip}]"),
        ip => ip.to_string(),
    };
    format!("http://{host}:{}", address.port())
}
