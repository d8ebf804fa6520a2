//! What the API tests and the browser tests share: the real server, served inside the test's
//! process on a loopback port until it is stopped, a fresh store for it, and a client for it.
//! Both test binaries include this file (`#[path = "../support/mod.rs"]`).

use std::net::SocketAddr;
use std::path::PathBuf;

use retrylab::config::Config;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A server in this process, stopped gracefully (as SIGTERM does) with `stop`.
pub struct Serving {
    pub address: SocketAddr,
    stop: oneshot::Sender<()>,
    server: JoinHandle<std::io::Result<()>>,
}

impl Serving {
    /// Serves `config` on `address` (port 0: any free one); the same address and store again
    /// is a restart.
    pub async fn start(address: SocketAddr, config: Config) -> Serving {
        let (stop, stopped) = oneshot::channel::<()>();
        let (address, server) =
            serve_until(address, config, async move { stopped.await.unwrap_or(()) }).await;
        Serving { address, stop, server }
    }

    /// Stops the server gracefully and waits until it has committed and let go of its store.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        let served = self.server.await.expect("the server task ran to its end");
        served.expect("the server shut down cleanly");
    }
}

/// Serves `config` on `address` until `stop` completes; the handle ends with the server.
pub async fn serve_until(
    address: SocketAddr,
    config: Config,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> (SocketAddr, JoinHandle<std::io::Result<()>>) {
    let listener = tokio::net::TcpListener::bind(address).await.unwrap();
    let address = listener.local_addr().unwrap();
    (address, tokio::spawn(retrylab::server::serve(listener, config, stop)))
}

/// Any free loopback port.
pub fn any_port() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// A store file of its own in the test's temporary folder, named after who uses it.
pub fn fresh_db(prefix: &str) -> PathBuf {
    std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{prefix}-{}.db", uuid::Uuid::new_v4()))
}

/// A client for the server: never through a proxy, redirects are the test's to follow, and an
/// idle connection is dropped after a second, well before the server's header-read timeout
/// (5 s) closes it, so a test that waits a few seconds never sends on a closing connection.
pub fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .tls_certs_only([])
        .redirect(reqwest::redirect::Policy::none())
        .pool_idle_timeout(std::time::Duration::from_secs(1))
        .build()
        .unwrap()
}
