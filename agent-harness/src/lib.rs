#![doc = include_str!("../README.md")]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub use agent_core::*;

/// Provider adapters, one module per enabled feature.
pub mod providers {
    #[cfg(feature = "claude")]
    pub use agent_provider_claude as claude;
    #[cfg(feature = "codex")]
    pub use agent_provider_codex as codex;
    #[cfg(feature = "pi")]
    pub use agent_provider_pi as pi;
    #[cfg(feature = "presets")]
    pub use agent_provider_preset as preset;
}

/// Store implementations, one module per enabled feature.
pub mod stores {
    #[cfg(feature = "memory")]
    pub use agent_store_memory as memory;
    #[cfg(feature = "sqlite")]
    pub use agent_store_sqlite as sqlite;
}

/// The local process exec.
#[cfg(feature = "local-exec")]
pub use agent_exec as exec;
