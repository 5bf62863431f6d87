#![doc = include_str!("../README.md")]
// The workspace README's quick start is compiled as a doctest wherever its features are on.
#![cfg_attr(all(doctest, feature = "codex", feature = "local-exec", feature = "memory"), doc = include_str!("../../README.md"))]
// The guides in docs/ with Rust code blocks are compiled as doctests too.
#![cfg_attr(all(doctest, feature = "codex", feature = "claude", feature = "pi", feature = "local-exec", feature = "memory"), doc = include_str!("../../docs/getting-started.md"))]
#![cfg_attr(all(doctest, feature = "codex", feature = "claude", feature = "pi"), doc = include_str!("../../docs/configuration.md"))]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

// agent-core, named item by item: nothing here can shadow one of its modules.
pub use agent_core::{
    Answer, ApprovalPolicy, AuthMode, AwaitError, CacheSize, Capabilities, Capability, Choice, CloseReason,
    Conversation, ConversationMode, ConversationSource, DEFAULT_CALL_TIMEOUT, Durability, DynExec, DynProvider,
    DynStore, EndCause, Env, Error, ErrorKind, Event, EventId, EventKind, Exec, ExitReason, ExpiryReason, Harness,
    HarnessBuilder, InputItem, IntoExec, ItemId, Lagged, McpServer, Provider, ProviderId, ProviderOptions,
    ProviderSession, Question, Replay, Request, RequestId, RequestKind, RequestQuery, RequestStatus, Response, Result,
    Reuse, SandboxMode, Scope, SessionConfig, SessionId, SessionMonitor, SessionOptions, SessionOwner, SessionRef,
    SessionSnapshot, SessionState, SessionStatus, SharedStr, Sink, SinkBuffer, Skill, Store, StoreChoice, StoreError,
    StoreFailurePolicy, StoredSession, StreamError, Subscription, SubscriptionError, Support, Target, Timestamp, Turn,
    TurnEnd, TurnId, TurnInput, TurnOptions, TurnOutcome, TurnRef, TurnResult, TurnStatus, TurnStream, Usage,
};
pub use agent_core::{
    capabilities, config, error, event, exec, handler, ids, options, provider, request, session, store, time, turn,
};

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

/// Exec backends, one module per enabled feature (the `Exec` trait and its types are in
/// [`exec`]).
pub mod execs {
    #[cfg(feature = "local-exec")]
    pub use agent_exec as local;
}
