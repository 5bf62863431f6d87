//! The Pi provider for agent-harness.
//!
//! This crate will hold the adapter for `pi --mode rpc`: prompts, streaming events, abort,
//! session files for resume and fork.
