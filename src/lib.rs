//! retrylab: break a real HTTP endpoint, send real traffic at it, and watch retries, backoff
//! with jitter, `Retry-After`, idempotency keys and a dead-letter queue do their work.
//!
//! The parts, each a module (arrows point to what a part uses):
//!
//! ```text
//! web         routes, pages, SSE, the JSON API, errors
//!  |-> compare     policies side by side: scenarios, presets, a lab each, the table; the CLI
//!  |    '-> lab, producer, store, downstream, retry, dlq, domain
//!  |-> producer    the client: sends over HTTP, follows the policy, its breaker and budget
//!  |    '-> lab, retry, dlq, domain, store
//!  '-> lab         one playground: holds its state, publishes its events, asks the store to persist
//!       |-> domain      the lab's state and rules: messages, attempts, waits, counters, load
//!       |-> dlq         the dead-letter queue: replay, quarantine, retention
//!       |-> downstream  the fault-injectable modes, their rate limit and workers, the ledger
//!       |-> events      the numbered log, its resume window, the broadcast
//!       '-> store       persistence only: SQLite, migrations, the group-committing writer
//!
//! Lab also uses retry (the policy, the breaker, the budget).
//! Below lab:  domain -> downstream, retry     dlq -> domain
//!             events -> domain, dlq, downstream, retry     store -> domain, dlq, downstream
//!             retry (backoff math, breaker, budget: pure) and downstream use nothing of ours.
//! web also names the types of dlq, domain, downstream and retry in its requests and answers.
//! ```

pub mod cli;
pub mod client;
pub mod compare;
pub mod config;
pub mod dlq;
pub mod domain;
pub mod downstream;
pub mod events;
pub mod lab;
pub mod metrics;
pub mod producer;
pub mod retry;
pub mod server;
pub mod store;
pub mod web;
