//! The binary's commands beyond serving: `retrylab compare` and `retrylab check`.

pub mod check;
pub mod compare;
