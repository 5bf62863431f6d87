#![doc = include_str!("../README.md")]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod auth;
mod connection;
mod extension;
mod normalize;
mod options;
mod provider;
mod session;
mod stream;
#[cfg(test)]
mod transcripts;
mod version;

pub use agent_provider_kit::auth::{AuthReport, LoginState};
pub use agent_provider_kit::version::{CliProbe, ParseVersionError, Version, VersionRange, VersionSupport};
pub use auth::auth_report;
pub use options::{DEFAULT_MAX_LINE_BYTES, DEFAULT_PROGRAM, PiOptions};
pub use provider::{PROVIDER_ID, PiProvider};
pub use version::{LATEST_VALIDATED, MIN_SUPPORTED, RANGE};
