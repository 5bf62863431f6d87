//! The one public error type.

use std::time::Duration;

use crate::capabilities::Capability;
use crate::ids::{ProviderId, RequestId, SessionId, TurnId};
use crate::request::{RequestKind, ResponseAction, Scope};
use crate::session::SessionState;
use crate::turn::Turn;

/// `Result` with [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Every way an agent-harness operation can fail.
///
/// Variants name what a caller can act on. Errors coming from a provider's CLI, a store or an
/// exec backend keep their source; [`Error::is_retryable`] and [`Error::is_definite`] classify
/// them for callers and for the session runtime.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    // ----- options and configuration -------------------------------------------------------
    /// A session or turn option is invalid; nothing was started.
    #[error("invalid option `{option}`: {reason}")]
    InvalidOption {
        /// The option's name, as in the builder method.
        option: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// A caller-chosen session ID is malformed.
    #[error("invalid session id {id:?}: {reason}")]
    InvalidSessionId {
        /// The rejected ID.
        id: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A caller-chosen turn ID is malformed.
    #[error("invalid turn id {id:?}: {reason}")]
    InvalidTurnId {
        /// The rejected ID.
        id: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// No provider is registered under this ID.
    #[error("unknown provider `{provider}` (registered: {registered})")]
    UnknownProvider {
        /// The ID that was asked for.
        provider: ProviderId,
        /// The registered provider IDs, comma-separated.
        registered: String,
    },
    /// The provider cannot do what the options or the call ask for.
    #[error("provider `{provider}` does not support {capability}")]
    Unsupported {
        /// The provider.
        provider: ProviderId,
        /// The capability that is missing.
        capability: Capability,
    },
    /// The harness is misconfigured, or a [`SessionConfig`](crate::SessionConfig) or the
    /// provider options in it do not parse; the message starts with the field's path. Nothing
    /// was started.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),

    // ----- session lifecycle ----------------------------------------------------------------
    /// A live session already uses this ID.
    #[error("session `{id}` already exists")]
    SessionAlreadyExists {
        /// The ID.
        id: SessionId,
    },
    /// The store retains a stopped session with this ID; pass `reuse` to replace it.
    #[error("session id `{id}` was already used (stored status: {status}); see SessionOptions::reuse")]
    SessionIdAlreadyUsed {
        /// The ID.
        id: SessionId,
        /// The stored snapshot's status.
        status: SessionState,
    },
    /// No live session has this ID (it never existed or has stopped).
    #[error("session `{id}` not found")]
    SessionNotFound {
        /// The ID.
        id: SessionId,
    },
    /// The session has ended; the store (or this harness) knows how.
    #[error("session `{id}` is closed: {reason}")]
    SessionClosed {
        /// The ID.
        id: SessionId,
        /// How it ended.
        reason: crate::session::ExitReason,
    },
    /// The session is live; the operation needs a stopped one (e.g. `purge_session`).
    #[error("session `{id}` is live; stop it first")]
    SessionLive {
        /// The ID.
        id: SessionId,
    },
    /// Another harness sharing the store holds the session live: one in another process of this
    /// host, or another `Harness` in this process. Starting, resuming or purging it here would
    /// run two CLIs on one history; stop it there, or wait until that process ends (a host that
    /// died leaves the session abandoned, and it can be resumed). See
    /// [`SessionOwner`](crate::SessionOwner).
    #[error("session `{id}` is live in another harness (process {pid}); stop it there first")]
    SessionLiveElsewhere {
        /// The ID.
        id: SessionId,
        /// The process that holds it (this process's own PID for another harness in it).
        pid: u32,
    },
    /// The harness is at its `max_sessions` limit.
    #[error("session capacity reached ({limit} live sessions)")]
    CapacityReached {
        /// The configured limit.
        limit: usize,
    },
    /// The provider did not open within `startup_timeout`; the attempt was torn down.
    #[error("provider `{provider}` did not open within {timeout:?}")]
    StartupTimeout {
        /// The provider.
        provider: ProviderId,
        /// The configured startup timeout.
        timeout: Duration,
    },
    /// The provider's transport went down while it was opening; the attempt was torn down.
    #[error("provider `{provider}` failed while opening: {reason}")]
    ProviderOpenFailed {
        /// The provider.
        provider: ProviderId,
        /// What the provider reported (the transport's reason).
        reason: String,
    },
    /// A resume or fork could not continue the provider conversation it asked for. Nothing was
    /// started: a session never falls back to a fresh conversation.
    #[error("could not {mode} the conversation: {reason}")]
    ResumeFailed {
        /// Resume or fork.
        mode: crate::options::ConversationMode,
        /// Why.
        reason: String,
    },
    /// The initial store commit, cleanup or hand-off exceeded `startup_finalization_timeout`.
    #[error("session startup could not be finalized within {timeout:?}")]
    StartupFinalizationTimeout {
        /// The configured finalization timeout.
        timeout: Duration,
    },
    /// The session cannot take new work: its provider transport failed or was retired.
    #[error("session `{id}` is unavailable: {reason}")]
    SessionUnavailable {
        /// The ID.
        id: SessionId,
        /// Why it became unavailable.
        reason: String,
    },

    // ----- turns ----------------------------------------------------------------------------
    /// Another turn is active; it is returned so the caller can await or cancel it.
    #[error("turn `{}` is in progress", current.id)]
    TurnInProgress {
        /// The active turn.
        current: Box<Turn>,
    },
    /// The turn is not active (finished, never started, or of another session).
    #[error("turn `{turn_id}` is not active")]
    TurnNotActive {
        /// The turn.
        turn_id: TurnId,
    },
    /// A caller-chosen turn ID was already used in this session.
    #[error("turn id `{turn_id}` was already used in this session")]
    TurnIdAlreadyUsed {
        /// The turn ID.
        turn_id: TurnId,
    },
    /// The session does not know this turn.
    #[error("turn `{turn_id}` not found in session `{session_id}`")]
    TurnNotFound {
        /// The session.
        session_id: SessionId,
        /// The turn.
        turn_id: TurnId,
    },
    /// The local call to the session timed out; the turn may or may not have been recorded.
    ///
    /// Not proof of rejection: inspect the session and subscribe with the retained turn.
    #[error("session call timed out after {timeout:?}; the turn's fate is unknown")]
    SessionCallTimeout {
        /// The turn handle created before the call, for reconciliation.
        turn: Box<Turn>,
        /// The local call timeout.
        timeout: Duration,
    },

    /// The awaited turn ended without completing (failed, cancelled or interrupted); the
    /// outcome holds its terminal event. What [`crate::AwaitError::Ended`] becomes.
    #[error("turn ended {}", .0.status)]
    TurnEnded(Box<crate::turn::TurnOutcome>),
    /// A wait (`await_turn`) gave up after its timeout; the turn keeps running.
    #[error("timed out after {timeout:?} waiting for the turn")]
    WaitTimeout {
        /// The caller's timeout.
        timeout: Duration,
    },

    // ----- events ---------------------------------------------------------------------------
    /// The requested replay cannot be served: the events are gone from every source.
    #[error("replay unavailable: {reason}")]
    ReplayUnavailable {
        /// Which source ran out, and where.
        reason: String,
    },

    // ----- requests -------------------------------------------------------------------------
    /// The session has no request with this ID (it belongs to another session or never existed).
    #[error("request `{request_id}` not found in session `{session_id}`")]
    RequestNotFound {
        /// The session that was asked.
        session_id: SessionId,
        /// The request.
        request_id: RequestId,
    },
    /// Another response to this request is being delivered right now.
    #[error("a response to request `{request_id}` is in progress")]
    ResponseInProgress {
        /// The request.
        request_id: RequestId,
    },
    /// The request was already answered.
    #[error("request `{request_id}` was already resolved")]
    AlreadyResolved {
        /// The request.
        request_id: RequestId,
    },
    /// The request expired (its turn ended, the provider resolved it, or it timed out).
    #[error("request `{request_id}` expired")]
    RequestExpired {
        /// The request.
        request_id: RequestId,
    },
    /// The response's action does not apply to this kind of request.
    #[error("a `{action}` response does not apply to a {kind} request")]
    ResponseKindMismatch {
        /// The request's kind.
        kind: RequestKind,
        /// The response's action.
        action: ResponseAction,
    },
    /// A question answer lacks an answer for this question ID.
    #[error("the answer is missing question `{question_id}`")]
    MissingAnswer {
        /// The unanswered question.
        question_id: String,
    },
    /// A question answer names a question the request does not have.
    #[error("the request has no question `{question_id}`")]
    UnknownQuestion {
        /// The unknown question ID.
        question_id: String,
    },
    /// The request does not offer this approval scope.
    #[error("the request does not offer approval scope `{scope}`")]
    UnsupportedScope {
        /// The scope asked for.
        scope: Scope,
    },
    /// A response is malformed for a reason other than the above.
    #[error("invalid response: {0}")]
    InvalidResponse(String),

    // ----- providers, stores, processes -----------------------------------------------------
    /// The provider definitely refused the command; nothing changed on its side.
    #[error("provider `{provider}` rejected the command: {reason}")]
    ProviderRejected {
        /// The provider.
        provider: ProviderId,
        /// Its reason.
        reason: String,
    },
    /// The provider transport failed; the command's outcome is unknown.
    #[error("provider `{provider}` transport failed: {reason}")]
    Transport {
        /// The provider.
        provider: ProviderId,
        /// What happened.
        reason: String,
    },
    /// A provider command did not answer in time; its outcome is unknown.
    #[error("{operation} timed out after {timeout:?}")]
    Timeout {
        /// The operation, e.g. `turn admission`.
        operation: &'static str,
        /// The deadline that passed.
        timeout: Duration,
    },
    /// The provider's code panicked while handling a command; its outcome is unknown.
    #[error("the provider panicked during {operation}")]
    ProviderPanicked {
        /// The command.
        operation: &'static str,
    },
    /// The provider's CLI is missing, too old or unusable.
    #[error("provider `{provider}` cannot run: {reason}")]
    ProviderUnavailable {
        /// The provider.
        provider: ProviderId,
        /// What is wrong, with the fix where known.
        reason: String,
    },
    /// Any other provider failure.
    #[error("provider `{provider}` failed: {source}")]
    Provider {
        /// The provider.
        provider: ProviderId,
        /// The underlying error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The auth guard refused the session's environment (see `AuthMode`).
    #[error("auth guard: {reason}")]
    AuthGuard {
        /// Which variable or setting was refused (never its value).
        reason: String,
    },
    /// A store operation failed.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    /// Spawning or controlling a process failed.
    #[error(transparent)]
    Exec(#[from] crate::exec::ExecError),
    /// The session ended while the operation was in flight.
    #[error("session `{id}` went down: {reason}")]
    SessionDown {
        /// The session.
        id: SessionId,
        /// Why it ended.
        reason: crate::session::ExitReason,
    },
    /// A turn stream or subscription ended early (what `?` makes of a
    /// [`StreamError`](crate::StreamError) or [`SubscriptionError`](crate::SubscriptionError));
    /// [`Error::kind`] tells which way.
    #[error(transparent)]
    Stream(#[from] crate::runtime::StreamError),
}

impl From<crate::runtime::SubscriptionError> for Error {
    fn from(error: crate::runtime::SubscriptionError) -> Self {
        Error::Stream(error.into())
    }
}

impl Error {
    /// True when retrying the same call later may succeed without changing it.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::ResponseInProgress { .. }
                | Error::CapacityReached { .. }
                | Error::Timeout { .. }
                | Error::StartupTimeout { .. }
                | Error::TurnInProgress { .. }
                // `max_provider_processes`, as `CapacityReached` is `max_sessions`: a slot frees
                // when a session ends.
                | Error::Exec(crate::exec::ExecError::LimitReached { .. })
        ) || matches!(self, Error::Store(e) if e.is_retryable())
    }

    /// True when the provider definitely did not act on the command (a rejection or an input
    /// error), as opposed to an uncertain outcome such as a timeout or a broken transport.
    ///
    /// The session runtime releases a response claim after a definite error and retires the
    /// session after an uncertain one.
    pub fn is_definite(&self) -> bool {
        !matches!(
            self,
            Error::Transport { .. }
                | Error::Timeout { .. }
                | Error::ProviderPanicked { .. }
                | Error::Provider { .. }
                | Error::Exec(_)
                | Error::SessionDown { .. }
        )
    }

    /// What kind of error this is, to match on without parsing the message.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::InvalidOption { .. } => ErrorKind::InvalidOption,
            Error::InvalidSessionId { .. } => ErrorKind::InvalidSessionId,
            Error::InvalidTurnId { .. } => ErrorKind::InvalidTurnId,
            Error::UnknownProvider { .. } => ErrorKind::UnknownProvider,
            Error::Unsupported { .. } => ErrorKind::Unsupported,
            Error::InvalidConfig { .. } => ErrorKind::InvalidConfig,
            Error::SessionAlreadyExists { .. } => ErrorKind::SessionAlreadyExists,
            Error::SessionIdAlreadyUsed { .. } => ErrorKind::SessionIdAlreadyUsed,
            Error::SessionNotFound { .. } => ErrorKind::SessionNotFound,
            Error::SessionClosed { .. } => ErrorKind::SessionClosed,
            Error::SessionLive { .. } => ErrorKind::SessionLive,
            Error::SessionLiveElsewhere { .. } => ErrorKind::SessionLiveElsewhere,
            Error::CapacityReached { .. } => ErrorKind::CapacityReached,
            Error::StartupTimeout { .. } => ErrorKind::StartupTimeout,
            Error::ProviderOpenFailed { .. } => ErrorKind::ProviderOpenFailed,
            Error::ResumeFailed { .. } => ErrorKind::ResumeFailed,
            Error::StartupFinalizationTimeout { .. } => ErrorKind::StartupFinalizationTimeout,
            Error::SessionUnavailable { .. } => ErrorKind::SessionUnavailable,
            Error::TurnInProgress { .. } => ErrorKind::TurnInProgress,
            Error::TurnNotActive { .. } => ErrorKind::TurnNotActive,
            Error::TurnIdAlreadyUsed { .. } => ErrorKind::TurnIdAlreadyUsed,
            Error::TurnNotFound { .. } => ErrorKind::TurnNotFound,
            Error::SessionCallTimeout { .. } => ErrorKind::SessionCallTimeout,
            Error::TurnEnded { .. } => ErrorKind::TurnEnded,
            Error::WaitTimeout { .. } => ErrorKind::WaitTimeout,
            Error::ReplayUnavailable { .. } => ErrorKind::ReplayUnavailable,
            Error::RequestNotFound { .. } => ErrorKind::RequestNotFound,
            Error::ResponseInProgress { .. } => ErrorKind::ResponseInProgress,
            Error::AlreadyResolved { .. } => ErrorKind::AlreadyResolved,
            Error::RequestExpired { .. } => ErrorKind::RequestExpired,
            Error::ResponseKindMismatch { .. } => ErrorKind::ResponseKindMismatch,
            Error::MissingAnswer { .. } => ErrorKind::MissingAnswer,
            Error::UnknownQuestion { .. } => ErrorKind::UnknownQuestion,
            Error::UnsupportedScope { .. } => ErrorKind::UnsupportedScope,
            Error::InvalidResponse { .. } => ErrorKind::InvalidResponse,
            Error::ProviderRejected { .. } => ErrorKind::ProviderRejected,
            Error::Transport { .. } => ErrorKind::Transport,
            Error::Timeout { .. } => ErrorKind::Timeout,
            Error::ProviderPanicked { .. } => ErrorKind::ProviderPanicked,
            Error::ProviderUnavailable { .. } => ErrorKind::ProviderUnavailable,
            Error::Provider { .. } => ErrorKind::Provider,
            Error::AuthGuard { .. } => ErrorKind::AuthGuard,
            Error::Store { .. } => ErrorKind::Store,
            Error::Exec { .. } => ErrorKind::Exec,
            Error::SessionDown { .. } => ErrorKind::SessionDown,
            Error::Stream(error) => match error {
                crate::runtime::StreamError::IdleTimeout(_) => ErrorKind::IdleTimeout,
                crate::runtime::StreamError::SessionDown(_) => ErrorKind::SessionDown,
                crate::runtime::StreamError::Lagged(_) => ErrorKind::Lagged,
                crate::runtime::StreamError::ReplayFailed { .. } => ErrorKind::ReplayFailed,
            },
        }
    }

    pub(crate) fn invalid(option: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidOption { option, reason: reason.into() }
    }
}

/// The kind of an [`Error`], one per variant, for matching and for telemetry (its
/// [`as_str`](ErrorKind::as_str) is the stable snake_case name).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// [`Error::InvalidOption`].
    InvalidOption,
    /// [`Error::InvalidSessionId`].
    InvalidSessionId,
    /// [`Error::InvalidTurnId`].
    InvalidTurnId,
    /// [`Error::UnknownProvider`].
    UnknownProvider,
    /// [`Error::Unsupported`].
    Unsupported,
    /// [`Error::InvalidConfig`].
    InvalidConfig,
    /// [`Error::SessionAlreadyExists`].
    SessionAlreadyExists,
    /// [`Error::SessionIdAlreadyUsed`].
    SessionIdAlreadyUsed,
    /// [`Error::SessionNotFound`].
    SessionNotFound,
    /// [`Error::SessionClosed`].
    SessionClosed,
    /// [`Error::SessionLive`].
    SessionLive,
    /// [`Error::SessionLiveElsewhere`].
    SessionLiveElsewhere,
    /// [`Error::CapacityReached`].
    CapacityReached,
    /// [`Error::StartupTimeout`].
    StartupTimeout,
    /// [`Error::ProviderOpenFailed`].
    ProviderOpenFailed,
    /// [`Error::ResumeFailed`].
    ResumeFailed,
    /// [`Error::StartupFinalizationTimeout`].
    StartupFinalizationTimeout,
    /// [`Error::SessionUnavailable`].
    SessionUnavailable,
    /// [`Error::TurnInProgress`].
    TurnInProgress,
    /// [`Error::TurnNotActive`].
    TurnNotActive,
    /// [`Error::TurnIdAlreadyUsed`].
    TurnIdAlreadyUsed,
    /// [`Error::TurnNotFound`].
    TurnNotFound,
    /// [`Error::SessionCallTimeout`].
    SessionCallTimeout,
    /// [`Error::TurnEnded`].
    TurnEnded,
    /// [`Error::WaitTimeout`].
    WaitTimeout,
    /// [`Error::ReplayUnavailable`].
    ReplayUnavailable,
    /// [`Error::RequestNotFound`].
    RequestNotFound,
    /// [`Error::ResponseInProgress`].
    ResponseInProgress,
    /// [`Error::AlreadyResolved`].
    AlreadyResolved,
    /// [`Error::RequestExpired`].
    RequestExpired,
    /// [`Error::ResponseKindMismatch`].
    ResponseKindMismatch,
    /// [`Error::MissingAnswer`].
    MissingAnswer,
    /// [`Error::UnknownQuestion`].
    UnknownQuestion,
    /// [`Error::UnsupportedScope`].
    UnsupportedScope,
    /// [`Error::InvalidResponse`].
    InvalidResponse,
    /// [`Error::ProviderRejected`].
    ProviderRejected,
    /// [`Error::Transport`].
    Transport,
    /// [`Error::Timeout`].
    Timeout,
    /// [`Error::ProviderPanicked`].
    ProviderPanicked,
    /// [`Error::ProviderUnavailable`].
    ProviderUnavailable,
    /// [`Error::Provider`].
    Provider,
    /// [`Error::AuthGuard`].
    AuthGuard,
    /// [`Error::Store`].
    Store,
    /// [`Error::Exec`].
    Exec,
    /// [`Error::SessionDown`], or a turn stream whose session ended before the turn did.
    SessionDown,
    /// A turn stream's idle timeout ([`StreamError::IdleTimeout`](crate::StreamError::IdleTimeout)).
    IdleTimeout,
    /// A consumer fell behind and the missed events cannot be replayed ([`crate::Lagged`]).
    Lagged,
    /// Replaying events from the store failed part way.
    ReplayFailed,
}

impl ErrorKind {
    /// The stable snake_case name, e.g. `turn_in_progress`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::InvalidOption => "invalid_option",
            ErrorKind::InvalidSessionId => "invalid_session_id",
            ErrorKind::InvalidTurnId => "invalid_turn_id",
            ErrorKind::UnknownProvider => "unknown_provider",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::InvalidConfig => "invalid_config",
            ErrorKind::SessionAlreadyExists => "session_already_exists",
            ErrorKind::SessionIdAlreadyUsed => "session_id_already_used",
            ErrorKind::SessionNotFound => "session_not_found",
            ErrorKind::SessionClosed => "session_closed",
            ErrorKind::SessionLive => "session_live",
            ErrorKind::SessionLiveElsewhere => "session_live_elsewhere",
            ErrorKind::CapacityReached => "capacity_reached",
            ErrorKind::StartupTimeout => "startup_timeout",
            ErrorKind::ProviderOpenFailed => "provider_open_failed",
            ErrorKind::ResumeFailed => "resume_failed",
            ErrorKind::StartupFinalizationTimeout => "startup_finalization_timeout",
            ErrorKind::SessionUnavailable => "session_unavailable",
            ErrorKind::TurnInProgress => "turn_in_progress",
            ErrorKind::TurnNotActive => "turn_not_active",
            ErrorKind::TurnIdAlreadyUsed => "turn_id_already_used",
            ErrorKind::TurnNotFound => "turn_not_found",
            ErrorKind::SessionCallTimeout => "session_call_timeout",
            ErrorKind::TurnEnded => "turn_ended",
            ErrorKind::WaitTimeout => "wait_timeout",
            ErrorKind::ReplayUnavailable => "replay_unavailable",
            ErrorKind::RequestNotFound => "request_not_found",
            ErrorKind::ResponseInProgress => "response_in_progress",
            ErrorKind::AlreadyResolved => "already_resolved",
            ErrorKind::RequestExpired => "request_expired",
            ErrorKind::ResponseKindMismatch => "response_kind_mismatch",
            ErrorKind::MissingAnswer => "missing_answer",
            ErrorKind::UnknownQuestion => "unknown_question",
            ErrorKind::UnsupportedScope => "unsupported_scope",
            ErrorKind::InvalidResponse => "invalid_response",
            ErrorKind::ProviderRejected => "provider_rejected",
            ErrorKind::Transport => "transport",
            ErrorKind::Timeout => "timeout",
            ErrorKind::ProviderPanicked => "provider_panicked",
            ErrorKind::ProviderUnavailable => "provider_unavailable",
            ErrorKind::Provider => "provider",
            ErrorKind::AuthGuard => "auth_guard",
            ErrorKind::Store => "store",
            ErrorKind::Exec => "exec",
            ErrorKind::SessionDown => "session_down",
            ErrorKind::IdleTimeout => "idle_timeout",
            ErrorKind::Lagged => "lagged",
            ErrorKind::ReplayFailed => "replay_failed",
        }
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
