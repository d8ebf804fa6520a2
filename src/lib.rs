//! retrylab: break a real HTTP endpoint, send real traffic at it, and watch retries, backoff
//! with jitter, `Retry-After`, idempotency keys and a dead-letter queue do their work.
//!
//! The parts, each a module, and what each uses: docs/architecture.md, "How it is built" (a
//! test holds that list to the `use` lines).

pub mod callers;
pub mod claims;
pub mod cli;
pub mod client;
pub mod compare;
pub mod config;
pub mod contract;
pub mod dlq;
pub mod domain;
pub mod downstream;
pub mod events;
pub mod export;
pub mod invalid;
pub mod lab;
pub mod metrics;
pub mod producer;
pub mod retry;
pub mod server;
pub mod store;
pub mod web;
