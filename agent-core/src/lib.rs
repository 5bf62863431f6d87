#![doc = include_str!("../README.md")]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub mod capabilities;
pub mod config;
pub mod error;
pub mod event;
pub mod exec;
pub mod handler;
mod harness;
pub mod ids;
mod json_null;
pub mod options;
pub mod provider;
pub mod request;
mod runtime;
pub mod session;
pub mod store;
mod text;
pub mod time;
pub mod turn;

#[cfg(feature = "testing")]
pub mod testing;

pub use capabilities::{Capabilities, Capability, Support};
pub use config::SessionConfig;
pub use error::{Error, ErrorKind, Result};
pub use event::{Event, EventKind, ExpiryReason, TurnEnd, Usage};
pub use exec::{DynExec, Exec, IntoExec};
pub use harness::{AwaitError, DEFAULT_CALL_TIMEOUT, Harness, HarnessBuilder, SessionMonitor};
pub use ids::{EventId, ItemId, ProviderId, RequestId, SessionId, TurnId};
pub use options::{
    ApprovalPolicy, AuthMode, CacheSize, Conversation, ConversationMode, ConversationSource, Env, McpServer,
    ProviderOptions, Reuse, SandboxMode, SessionOptions, Skill, StoreChoice, StoreFailurePolicy, TurnOptions,
};
pub use provider::{DynProvider, Provider, ProviderSession, Sink, SinkBuffer};
pub use request::{Answer, Choice, Question, Request, RequestKind, RequestStatus, Response, Scope};
pub use runtime::{Lagged, Replay, StreamError, Subscription, SubscriptionError, Target, TurnStream};
pub use session::{
    CloseReason, Durability, ExitReason, SessionOwner, SessionRef, SessionSnapshot, SessionState, SessionStatus,
    StoredSession,
};
pub use store::{DynStore, RequestQuery, Store, StoreError};
pub use text::SharedStr;
pub use time::Timestamp;

/// What stands where the harness keeps a secret out of what it records: a secret question's
/// answer, a credential in a CLI's output or streamed text, an MCP server URL it cannot parse
/// (in `Debug` output).
pub const REDACTED: &str = "[redacted]";
pub use turn::{EndCause, InputItem, Turn, TurnInput, TurnOutcome, TurnRef, TurnResult, TurnStatus};
