#![doc = include_str!("../README.md")]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub mod auth;
pub mod framing;
pub mod probe;
pub mod rpc;
pub mod version;
