//! The span of each public command: the tracing contract the agent-core README documents
//! (span names, fields, and what never reaches tracing).

use std::future::Future;

use tokio::time::Instant;
use tracing::field::Empty;
use tracing::{Instrument, Span};

use crate::error::{Error, Result};
use crate::ids::{ProviderId, SessionId};

/// The traced commands.
#[derive(Clone, Copy, Debug)]
pub(super) enum Cmd {
    StartSession,
    StartTurn,
    Respond,
    Cancel,
    Steer,
    StopSession,
}

/// The span of one command; `session_id` may be recorded later (a generated ID).
pub(super) fn command_span(command: Cmd, provider: &ProviderId, session: Option<&SessionId>) -> Span {
    macro_rules! span {
        ($name:literal) => {
            tracing::info_span!(
                target: "agent_core::harness",
                $name,
                provider = %provider,
                session_id = Empty,
                turn_id = Empty,
                request_id = Empty,
                force = Empty,
                outcome = Empty,
                error = Empty,
                duration_us = Empty,
            )
        };
    }
    let span = match command {
        Cmd::StartSession => span!("start_session"),
        Cmd::StartTurn => span!("start_turn"),
        Cmd::Respond => span!("respond"),
        Cmd::Cancel => span!("cancel"),
        Cmd::Steer => span!("steer"),
        Cmd::StopSession => span!("stop_session"),
    };
    if let Some(session) = session {
        span.record("session_id", tracing::field::display(session));
    }
    span
}

/// Runs `call` in `span` and records its outcome and duration.
pub(super) async fn traced<T>(span: Span, call: impl Future<Output = Result<T>>) -> Result<T> {
    let started = Instant::now();
    let result = call.instrument(span.clone()).await;
    span.record("duration_us", u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX));
    match &result {
        Ok(_) => span.record("outcome", "ok"),
        Err(error) => {
            span.record("error", tracing::field::display(error));
            span.record("outcome", error.code())
        }
    };
    result
}

impl Error {
    /// The variant's stable snake_case name, for telemetry.
    pub(crate) fn code(&self) -> &'static str {
        match self {
            Error::InvalidOption { .. } => "invalid_option",
            Error::InvalidSessionId { .. } => "invalid_session_id",
            Error::InvalidTurnId { .. } => "invalid_turn_id",
            Error::UnknownProvider { .. } => "unknown_provider",
            Error::Unsupported { .. } => "unsupported",
            Error::InvalidConfig(_) => "invalid_config",
            Error::SessionAlreadyExists { .. } => "session_already_exists",
            Error::SessionIdAlreadyUsed { .. } => "session_id_already_used",
            Error::SessionNotFound { .. } => "session_not_found",
            Error::SessionClosed { .. } => "session_closed",
            Error::SessionLive { .. } => "session_live",
            Error::CapacityReached { .. } => "capacity_reached",
            Error::StartupTimeout { .. } => "startup_timeout",
            Error::ProviderOpenFailed { .. } => "provider_open_failed",
            Error::ResumeFailed { .. } => "resume_failed",
            Error::StartupFinalizationTimeout { .. } => "startup_finalization_timeout",
            Error::SessionUnavailable { .. } => "session_unavailable",
            Error::TurnInProgress { .. } => "turn_in_progress",
            Error::TurnNotActive { .. } => "turn_not_active",
            Error::TurnIdAlreadyUsed { .. } => "turn_id_already_used",
            Error::TurnNotFound { .. } => "turn_not_found",
            Error::SessionCallTimeout { .. } => "session_call_timeout",
            Error::ReplayUnavailable { .. } => "replay_unavailable",
            Error::RequestNotFound { .. } => "request_not_found",
            Error::ResponseInProgress { .. } => "response_in_progress",
            Error::AlreadyResolved { .. } => "already_resolved",
            Error::RequestExpired { .. } => "request_expired",
            Error::ResponseKindMismatch { .. } => "response_kind_mismatch",
            Error::MissingAnswer { .. } => "missing_answer",
            Error::UnknownQuestion { .. } => "unknown_question",
            Error::UnsupportedScope { .. } => "unsupported_scope",
            Error::InvalidResponse(_) => "invalid_response",
            Error::ProviderRejected { .. } => "provider_rejected",
            Error::Transport { .. } => "transport",
            Error::Timeout { .. } => "timeout",
            Error::ProviderPanicked { .. } => "provider_panicked",
            Error::ProviderUnavailable { .. } => "provider_unavailable",
            Error::Provider { .. } => "provider",
            Error::AuthGuard { .. } => "auth_guard",
            Error::Store(_) => "store",
            Error::Exec(_) => "exec",
            Error::SessionDown { .. } => "session_down",
        }
    }
}
