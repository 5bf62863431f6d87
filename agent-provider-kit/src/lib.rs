#![doc = include_str!("../README.md")]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub mod auth;
pub mod clones;
pub mod conversations;
pub mod framing;
pub mod permission_prompt;
pub mod private_dir;
pub mod probe;
pub mod process;
pub mod rpc;
pub mod scan;
pub mod secrets;
pub mod skills;
pub mod transcript;
pub mod version;

/// Test support (feature `testing`): a [`Sink`](agent_core::Sink) attached to no session and
/// the recorder of what a provider sends into it, to unit-test a reader or normalizer without a
/// `Harness`.
#[cfg(feature = "testing")]
pub mod testing {
    pub use agent_core::testing::{Sent, SinkRecorder, sink};
}
