//! One open Codex session: the [`ProviderSession`] the runtime drives.

use std::time::Duration;

use agent_core::provider::{Admission, ProviderSession, TurnStart};
use agent_core::time::deadline_after;
use agent_core::{Error, ProviderId, Request, Response, Result, Skill, TurnId, TurnInput};
use agent_provider_kit::framing::stderr_note;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::connection::{CallError, Connection};
use crate::options::CodexTurnOptions;
use crate::{input, requests};

/// An adapter deadline: shorter than the runtime's `runtime` deadline, so the adapter reports
/// first (DESIGN.md §4: adapter < actor < caller).
pub(crate) fn adapter_deadline(runtime: Duration) -> Duration {
    runtime.saturating_sub(runtime / 10)
}

/// An open `codex app-server` session on one thread.
#[derive(Debug)]
pub(crate) struct CodexSession {
    pub(crate) provider: ProviderId,
    pub(crate) conn: Connection,
    pub(crate) thread_id: String,
    pub(crate) skills: Vec<Skill>,
    /// Deadline of `turn/start` answers.
    pub(crate) turn_timeout: Duration,
    /// Deadline of `turn/interrupt` and `turn/steer` answers.
    pub(crate) command_timeout: Duration,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct TurnStartParams<'a> {
    thread_id: &'a str,
    input: Vec<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    effort: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    output_schema: Option<&'a Value>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct TurnRefParams<'a> {
    thread_id: &'a str,
    turn_id: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SteerParams<'a> {
    thread_id: &'a str,
    expected_turn_id: &'a str,
    input: Vec<Value>,
}

#[derive(Deserialize)]
struct TurnStartResult {
    turn: TurnIdOnly,
}

#[derive(Deserialize)]
struct TurnIdOnly {
    id: String,
}

impl CodexSession {
    fn rejected(&self, reason: impl Into<String>) -> Error {
        Error::ProviderRejected { provider: self.provider.clone(), reason: reason.into() }
    }

    /// Maps a failed call whose outcome is unknown.
    fn uncertain(&self, operation: &'static str, timeout: Duration, error: CallError) -> Error {
        match error {
            CallError::Timeout => Error::Timeout { operation, timeout },
            other => Error::Transport { provider: self.provider.clone(), reason: format!("{operation}: {other}") },
        }
    }

    /// Sends `turn/interrupt` for the codex turn.
    async fn interrupt(&self, codex_turn: &str) -> std::result::Result<(), CallError> {
        let params = TurnRefParams { thread_id: &self.thread_id, turn_id: codex_turn };
        self.conn.call("turn/interrupt", params, self.command_timeout).await.map(drop)
    }
}

#[async_trait]
impl ProviderSession for CodexSession {
    async fn start_turn(&self, turn: TurnStart) -> Result<Admission> {
        let input = input::items(turn.input(), &self.skills, true)?;
        let extras = turn.options.provider_options.get::<CodexTurnOptions>();
        let params = TurnStartParams {
            thread_id: &self.thread_id,
            input,
            model: turn.options.model.as_deref(),
            effort: extras.and_then(|e| e.effort.as_deref()),
            output_schema: extras.and_then(|e| e.output_schema.as_ref()),
        };
        let id = turn.id().clone();
        if let Err(running) = self.conn.state().begin_turn(id.clone()) {
            return Err(self.rejected(format!("turn `{running}` is still running in codex")));
        }
        match self.conn.call("turn/start", params, self.turn_timeout).await {
            Ok(raw) => {
                let Some(codex) = parse_result::<TurnStartResult>(raw.get()) else {
                    return Err(self.uncertain(
                        "turn/start",
                        self.turn_timeout,
                        CallError::Unexpected { method: "turn/start".into() },
                    ));
                };
                self.conn.state().admitted(&id, &codex.turn.id);
                Ok(Admission::with_provider_turn_id(codex.turn.id))
            }
            Err(CallError::Rpc { message, .. }) => {
                self.conn.state().abort_turn(&id);
                Err(self.rejected(format!("codex refused turn/start: {message}")))
            }
            Err(CallError::Closed) => {
                // The process went away: say how, since the turn's own failure report cannot
                // outlive an unadmitted turn. (A failed write says nothing of an exit: codex may
                // just have closed its stdin, so that is reported as is, below.)
                let report = self.conn.exit_report().await;
                let (how, tail) = (report.how(), stderr_note(report.stderr_tail.as_deref()));
                Err(Error::Transport {
                    provider: self.provider.clone(),
                    reason: format!("codex app-server exited during turn/start ({how}){tail}"),
                })
            }
            Err(other) => Err(self.uncertain("turn/start", self.turn_timeout, other)),
        }
    }

    async fn respond(&self, request: &Request, response: &Response) -> Result<()> {
        let Some(pending) = self.conn.state().take_request(&request.provider_ref.0) else {
            return Err(Error::RequestExpired { request_id: request.id.clone() });
        };
        let encoded = match requests::encode(&pending, request.kind, response) {
            Ok(encoded) => encoded,
            Err(error) => {
                self.conn.state().restore_request(pending);
                return Err(error);
            }
        };
        if let Err(error) = self.conn.answer(&pending.id, encoded.result).await {
            return Err(Error::Transport {
                provider: self.provider.clone(),
                reason: format!("answering codex: {error}"),
            });
        }
        // The answer is delivered; the interrupt that completes a cancel is not awaited (its
        // outcome is the turn's terminal event), and not sent again when a cancel of another
        // request or of the turn already sent it.
        if encoded.interrupt {
            let codex_turn = self.conn.state().claim_interrupt(&pending.turn);
            if let Some(codex_turn) = codex_turn {
                let params = TurnRefParams { thread_id: &self.thread_id, turn_id: &codex_turn };
                if let Err(error) = self.conn.send("turn/interrupt", params).await {
                    tracing::warn!(%error, "turn/interrupt after a cancelled request failed");
                }
            }
        }
        Ok(())
    }

    /// Interrupts the turn and waits for codex to end it, all within the command deadline: an
    /// acknowledged interrupt whose `turn/completed` never comes leaves the turn's state unknown
    /// (a timeout, so the runtime retires the session rather than wait forever). When a
    /// cancelled request already interrupted the turn, only the wait remains.
    async fn cancel(&self, turn: &TurnId) -> Result<()> {
        let claimed = {
            let mut state = self.conn.state();
            // Not running any more: its terminal event is already on its way.
            if state.codex_turn(turn).is_none() {
                return Ok(());
            }
            state.claim_interrupt(turn)
        };
        let deadline = deadline_after(tokio::time::Instant::now(), self.command_timeout);
        let sent = match claimed {
            Some(codex_turn) => {
                let mut sent = self.interrupt(&codex_turn).await;
                // Codex answers `turn/start` before it holds the turn as active, and refuses an
                // interrupt in between ("no active turn to interrupt"): sent again once it
                // announced the turn.
                if matches!(sent, Err(CallError::Rpc { .. })) && self.conn.state().is_unannounced(turn) {
                    self.conn.turn_announced(turn, deadline).await;
                    if self.conn.state().is_running(turn) {
                        sent = self.interrupt(&codex_turn).await;
                    }
                }
                sent
            }
            None => Ok(()),
        };
        match sent {
            Ok(()) => {}
            Err(CallError::Rpc { .. }) if !self.conn.state().is_running(turn) => return Ok(()),
            Err(CallError::Rpc { message, .. }) => {
                return Err(self.rejected(format!("codex refused turn/interrupt: {message}")));
            }
            Err(other) => return Err(self.uncertain("turn/interrupt", self.command_timeout, other)),
        }
        match tokio::time::timeout_at(deadline, self.conn.turn_ended(turn)).await {
            Ok(()) => Ok(()),
            Err(_) => Err(Error::Timeout {
                operation: "turn/completed after an acknowledged turn/interrupt",
                timeout: self.command_timeout,
            }),
        }
    }

    async fn steer(&self, turn: &TurnId, input: &TurnInput) -> Result<()> {
        let Some(codex_turn) = self.conn.state().codex_turn(turn) else {
            return Err(Error::TurnNotActive { turn_id: turn.clone() });
        };
        let params = SteerParams {
            thread_id: &self.thread_id,
            expected_turn_id: &codex_turn,
            input: input::items(input, &self.skills, false)?,
        };
        match self.conn.call("turn/steer", params, self.command_timeout).await {
            Ok(_) => Ok(()),
            Err(CallError::Rpc { message, .. }) => Err(self.rejected(format!("codex refused turn/steer: {message}"))),
            Err(other) => Err(self.uncertain("turn/steer", self.command_timeout, other)),
        }
    }

    async fn close(&self) {
        self.conn.close().await;
    }
}

/// The `result` of a response line.
pub(crate) fn parse_result<T: serde::de::DeserializeOwned>(line: &str) -> Option<T> {
    serde_json::from_str::<crate::wire::Reply<T>>(line).ok()?.result
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn adapter_deadlines_expire_before_the_runtime_ones() {
        assert_eq!(adapter_deadline(Duration::from_secs(30)), Duration::from_secs(27));
        assert!(adapter_deadline(Duration::from_millis(10)) < Duration::from_millis(10));
    }

    #[test]
    fn steer_names_the_running_turn() {
        let input = input::items(&TurnInput::from("also check the tests"), &[], false).unwrap();
        let params = SteerParams { thread_id: "th", expected_turn_id: "tu", input };
        assert_eq!(
            serde_json::to_value(params).unwrap(),
            json!({"threadId": "th", "expectedTurnId": "tu", "input": [{"type": "text", "text": "also check the tests"}]})
        );
    }

    #[test]
    fn turn_start_omits_unset_overrides() {
        let schema = json!({"type": "object"});
        let params = TurnStartParams {
            thread_id: "th",
            input: Vec::new(),
            model: None,
            effort: Some("high"),
            output_schema: Some(&schema),
        };
        assert_eq!(
            serde_json::to_value(params).unwrap(),
            json!({"threadId": "th", "input": [], "effort": "high", "outputSchema": {"type": "object"}})
        );
    }
}
