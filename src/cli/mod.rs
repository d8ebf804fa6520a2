//! The binary's commands beyond serving: `retrylab compare`, `retrylab check` and
//! `retrylab grade`.

pub mod check;
pub mod compare;
pub mod grade;
