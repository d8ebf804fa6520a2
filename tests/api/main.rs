//! Integration tests: each spawns the real server on port 0 and drives it over real sockets,
//! with small lab timings (milliseconds, not seconds) so the suite stays fast.

mod bad_input;
mod broken_store;
mod caller_hints;
mod callers;
mod check;
mod claims;
mod clients;
mod compare;
mod compare_grid;
mod conformance;
mod crash_ids;
mod dead_letters;
mod dedup_window;
mod defences;
mod deployment;
mod docs;
mod durability;
mod events;
mod export;
mod full_store;
mod hardening;
mod hedging;
mod helpers;
mod idempotency;
mod instances;
mod layout;
mod load_history;
mod logs;
mod metastable;
mod operations;
mod outside;
mod pages;
mod presets;
mod protection_kinds;
mod protections;
mod resting;
mod retries;
mod snippets;
mod stored;
#[path = "../support/mod.rs"]
mod support;
mod sweeps;
mod traffic;
mod wording;
