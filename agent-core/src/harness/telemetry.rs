//! The span of each public command: the tracing contract the agent-core README documents
//! (span names, fields, and what never reaches tracing).

use std::future::Future;

use tokio::time::Instant;
use tracing::field::Empty;
use tracing::{Instrument, Span};

use crate::error::Result;
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
            span.record("outcome", error.kind().as_str())
        }
    };
    result
}
