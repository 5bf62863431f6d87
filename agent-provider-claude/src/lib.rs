//! The Claude Code provider for agent-harness.
//!
//! This crate will hold the adapter for `claude -p --input-format stream-json --output-format
//! stream-json` with its control protocol: permissions as requests, interrupt, resume and fork.
