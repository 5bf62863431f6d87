//! The Codex provider for agent-harness.
//!
//! This crate will hold the adapter for `codex app-server` (JSON-RPC over stdio): handshake,
//! threads and turns, normalization of notifications into agent-core events, approvals and
//! questions as requests, interrupt, resume and fork.
