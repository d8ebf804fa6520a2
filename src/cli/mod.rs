//! The binary's commands beyond serving: `retrylab compare`.

pub mod compare;
