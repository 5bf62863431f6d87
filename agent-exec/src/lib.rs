//! Exec backends for agent-harness.
//!
//! This crate will hold `LocalExec`, the process backend on `tokio::process` (own process group,
//! parent-death signal, SIGINT → SIGTERM → SIGKILL escalation, kill-on-drop, executable
//! allow-list, output caps), a scripted in-memory exec for provider tests, and the exec
//! conformance suite. It is the only crate that spawns processes.
