//! The server's accept loop, written out because `axum::serve` has no knobs for the two
//! things a public server needs: a deadline for a request's headers (hyper's
//! `http1::Builder::header_read_timeout`, which also closes idle keep-alive connections), so a
//! client that never finishes them cannot hold a connection for ever; and a cap on the
//! connections one client address holds open. Every request still gets
//! `ConnectInfo<SocketAddr>`, and a stop signal lets open requests finish, as
//! `axum::serve(..).with_graceful_shutdown` did.

use std::collections::HashMap;
use std::convert::Infallible;
use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tower_service::Service;

/// What one listener enforces on each connection.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// `None`: no deadline for the headers.
    pub header_read_timeout: Option<Duration>,
    /// `None`: no cap per client address.
    pub max_per_ip: Option<usize>,
}

/// Serves `router` on `listener` until `stop` turns true, then stops accepting, lets open
/// connections finish their requests, and returns once they have closed.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    mut stop: watch::Receiver<bool>,
) -> io::Result<()> {
    let mut make_service = router.into_make_service_with_connect_info::<SocketAddr>();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout);
    let open = Arc::new(OpenConnections::default());
    // Each connection holds a receiver; when the last is dropped, every connection is done.
    let (all_closed, connection_open) = watch::channel(());
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    accept_failed(e).await;
                    continue;
                }
            },
            () = stopping(&mut stop) => break,
        };
        let counted = match limits.max_per_ip {
            Some(max) => match open.try_open(peer.ip(), max) {
                Some(counted) => Some(counted),
                None => {
                    tokio::spawn(refuse(stream, max));
                    continue;
                }
            },
            None => None,
        };
        let service = make_service.call(peer).await.unwrap_or_else(|never: Infallible| match never {});
        let stream = super::early_errors::ProblemsOnly::new(stream);
        let connection = http.serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
        let (mut stop, open_guard) = (stop.clone(), connection_open.clone());
        tokio::spawn(async move {
            let _counted = counted;
            let _open = open_guard;
            let mut connection = std::pin::pin!(connection);
            let mut shutting_down = false;
            loop {
                tokio::select! {
                    served = connection.as_mut() => {
                        if let Err(e) = served {
                            tracing::debug!(%peer, error = %e, "connection ended with an error");
                        }
                        break;
                    }
                    () = stopping(&mut stop), if !shutting_down => {
                        shutting_down = true;
                        connection.as_mut().graceful_shutdown();
                    }
                }
            }
        });
    }
    drop(listener);
    drop(connection_open);
    all_closed.closed().await;
    Ok(())
}

/// Completes once the server is stopping (or its stop signal is gone).
async fn stopping(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|&stopping| stopping).await;
}

/// A failed accept: a client that gave up is no news; running out of sockets is, and waiting
/// a moment beats spinning on it.
async fn accept_failed(e: io::Error) {
    use io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if !matches!(e.kind(), ConnectionAborted | ConnectionRefused | ConnectionReset) {
        tracing::error!(error = %e, "cannot accept connections; trying again in a second");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Answers a connection over the cap with a 429 problem naming the limit, then closes it.
async fn refuse(mut stream: TcpStream, max: usize) {
    let body = format!(
        "{{\"type\":\"/problems/limit/max_connections_per_ip\",\"title\":\"Too Many Requests\",\
         \"status\":429,\"detail\":\"this address already holds {max} open connections \
         (max_connections_per_ip); close some first\",\"limit\":\"max_connections_per_ip\"}}"
    );
    let answer = format!(
        "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/problem+json\r\n\
         content-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let refusal = async {
        stream.write_all(answer.as_bytes()).await?;
        stream.shutdown().await?;
        // Reads what the client sent until it closes, so closing does not reset the connection
        // before the client has read the answer.
        let mut sink = [0u8; 1024];
        while stream.read(&mut sink).await? > 0 {}
        io::Result::Ok(())
    };
    let _ = tokio::time::timeout(Duration::from_millis(500), refusal).await;
}

/// Open connections per client address.
#[derive(Default)]
struct OpenConnections {
    by_client: Mutex<HashMap<IpAddr, usize>>,
}

/// One counted connection; uncounted when dropped.
struct Counted {
    open: Arc<OpenConnections>,
    client: IpAddr,
}

impl OpenConnections {
    /// Counts a connection from `ip`, unless its client already holds `max`.
    fn try_open(self: &Arc<Self>, ip: IpAddr, max: usize) -> Option<Counted> {
        let client = client_of(ip);
        let mut by_client = self.by_client.lock().unwrap_or_else(|p| p.into_inner());
        let count = by_client.entry(client).or_insert(0);
        if *count >= max {
            return None;
        }
        *count += 1;
        Some(Counted { open: self.clone(), client })
    }

    #[cfg(test)]
    fn count(&self, ip: IpAddr) -> usize {
        self.by_client.lock().unwrap_or_else(|p| p.into_inner()).get(&client_of(ip)).copied().unwrap_or(0)
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        let mut by_client = self.open.by_client.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = by_client.get_mut(&self.client) {
            *count -= 1;
            if *count == 0 {
                by_client.remove(&self.client);
            }
        }
    }
}

/// The client an address stands for: an IPv4 address (also when mapped into IPv6), or an
/// IPv6 /64, the block one subscriber usually holds whole.
fn client_of(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & (u128::MAX << 64))),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_client_gets_its_cap_and_a_closed_connection_frees_its_place() {
        let open = Arc::new(OpenConnections::default());
        let (me, other): (IpAddr, IpAddr) = ("203.0.113.7".parse().unwrap(), "198.51.100.9".parse().unwrap());
        let first = open.try_open(me, 2).unwrap();
        let _second = open.try_open(me, 2).unwrap();
        assert!(open.try_open(me, 2).is_none(), "a third is over the cap");
        assert!(open.try_open(other, 2).is_some(), "per client");
        drop(first);
        assert_eq!(open.count(me), 1);
        assert!(open.try_open(me, 2).is_some(), "a place came free");
    }

    #[test]
    fn an_ipv6_client_is_its_64_and_mapped_ipv4_is_ipv4() {
        let open = Arc::new(OpenConnections::default());
        let _a = open.try_open("2001:db8:1:2::1".parse().unwrap(), 2).unwrap();
        let _b = open.try_open("2001:db8:1:2:ffff::9".parse().unwrap(), 2).unwrap();
        assert!(open.try_open("2001:db8:1:2::abcd".parse().unwrap(), 2).is_none(), "same /64");
        assert!(open.try_open("2001:db8:1:3::1".parse().unwrap(), 2).is_some(), "another /64");
        let _c = open.try_open("192.0.2.1".parse().unwrap(), 1).unwrap();
        assert!(open.try_open("::ffff:192.0.2.1".parse().unwrap(), 1).is_none(), "the same IPv4 client");
    }
}
