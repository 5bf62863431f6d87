#![doc = include_str!("../README.md")]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod limits;
#[cfg(unix)]
mod local;
#[cfg(feature = "testing")]
pub mod scripted;
mod stop;
mod validate;

pub use limits::LimitExceeded;
#[cfg(unix)]
pub use local::{LocalExec, LocalExecBuilder};
