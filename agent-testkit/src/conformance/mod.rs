//! Conformance suites: every implementation of a core trait runs the same checks.

pub mod exec;
pub mod provider;
pub mod store;
