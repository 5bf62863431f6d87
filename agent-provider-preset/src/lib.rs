//! JSON harness presets for agent-harness.
//!
//! This crate will run any agent CLI described by a JSON preset (the AGENT_SESSION model): an
//! argv template with `{prompt}`, how model, max turns and sessions are passed, output framing,
//! matchers for result, failure and session ID, and capability claims.
