//! Command line and environment settings, including every limit the server enforces.

use std::net::SocketAddr;

use clap::{Args, Parser};

#[derive(Debug, Clone, Parser)]
#[command(name = "retrylab", version, about = "Break an endpoint, send traffic, watch retries work.")]
pub struct Config {
    /// Address to serve on. Without it, `PORT` alone serves on 0.0.0.0:PORT (for hosting
    /// platforms), else 127.0.0.1:3000.
    #[arg(long, env = "RETRYLAB_ADDR")]
    pub addr: Option<SocketAddr>,

    #[command(flatten)]
    pub limits: Limits,
}

impl Config {
    pub fn listen_addr(&self) -> SocketAddr {
        if let Some(addr) = self.addr {
            return addr;
        }
        match std::env::var("PORT").ok().and_then(|p| p.parse::<u16>().ok()) {
            Some(port) => SocketAddr::from(([0, 0, 0, 0], port)),
            None => SocketAddr::from(([127, 0, 0, 1], 3000)),
        }
    }
}

/// Every limit is named, so an answer that hits one can say which.
#[derive(Debug, Clone, Args)]
pub struct Limits {
    /// Most labs this server holds at once.
    #[arg(long, env = "RETRYLAB_MAX_LABS", default_value_t = DEFAULT_LIMITS.max_labs)]
    pub max_labs: usize,
    /// Most messages one burst may create.
    #[arg(long, env = "RETRYLAB_MAX_BURST", default_value_t = DEFAULT_LIMITS.max_burst)]
    pub max_burst: usize,
    /// Most messages one lab holds before it must be reset.
    #[arg(long, env = "RETRYLAB_MAX_MESSAGES_PER_LAB", default_value_t = DEFAULT_LIMITS.max_messages_per_lab)]
    pub max_messages_per_lab: usize,
    /// Most requests one lab's producer has open to the downstream at once.
    #[arg(long, env = "RETRYLAB_MAX_CONCURRENT_REQUESTS", default_value_t = DEFAULT_LIMITS.max_concurrent_requests)]
    pub max_concurrent_requests: usize,
    /// Largest request body accepted, in bytes.
    #[arg(long, env = "RETRYLAB_MAX_BODY_BYTES", default_value_t = DEFAULT_LIMITS.max_body_bytes)]
    pub max_body_bytes: usize,
    /// Events kept per lab so a reconnecting page can resume without a snapshot.
    #[arg(long, env = "RETRYLAB_EVENT_WINDOW", default_value_t = DEFAULT_LIMITS.event_window)]
    pub event_window: usize,
    /// Events a subscriber may fall behind before it is sent a fresh snapshot instead.
    #[arg(long, env = "RETRYLAB_SUBSCRIBER_LAG", default_value_t = DEFAULT_LIMITS.subscriber_lag)]
    pub subscriber_lag: usize,
}

/// The defaults, in one place for the command line and for tests.
const DEFAULT_LIMITS: Limits = Limits {
    max_labs: 1_000,
    max_burst: 2_000,
    max_messages_per_lab: 20_000,
    max_concurrent_requests: 64,
    max_body_bytes: 64 * 1024,
    event_window: 50_000,
    subscriber_lag: 8_192,
};

impl Default for Limits {
    fn default() -> Self {
        DEFAULT_LIMITS
    }
}
