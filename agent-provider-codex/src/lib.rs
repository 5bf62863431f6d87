#![doc = include_str!("../README.md")]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod auth;
mod connection;
mod input;
mod normalize;
mod options;
mod provider;
mod requests;
mod session;
#[cfg(test)]
mod transcripts;
mod validate;
mod version;
mod wire;

pub use agent_provider_kit::auth::{AuthReport, LoginState};
pub use agent_provider_kit::version::{CliProbe, ParseVersionError, Version, VersionRange, VersionSupport};
pub use auth::{SCRUBBED_UNDER_SUBSCRIPTION, auth_report};
pub use options::{CodexOptions, CodexTurnOptions, DEFAULT_CLIENT_NAME, DEFAULT_MAX_LINE_BYTES, DEFAULT_PROGRAM};
pub use provider::{CodexProvider, PROVIDER_ID};
pub use version::{LATEST_VALIDATED, MIN_SUPPORTED, RANGE};
