//! The durable SQLite store for agent-harness.
//!
//! This crate will hold a `Store` on SQLite: WAL mode, one writer with group commit, readers that
//! do not block it, forward schema migrations, and a private (0600) database file.
