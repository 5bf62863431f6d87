//! One open pi session: the [`ProviderSession`] the runtime drives.

use std::time::Duration;

use agent_core::provider::{Admission, ProviderSession, TurnStart};
use agent_core::time::deadline_after;
use agent_core::{Answer, Error, ProviderId, Request, Response, Result, TurnId, TurnInput, TurnOptions};
use agent_provider_kit::conversations::Claim;
use agent_provider_kit::framing::stderr_note;
use async_trait::async_trait;
use serde_json::{Value, json};

use crate::connection::{CallError, Connection};
use crate::extension::ExtensionDir;
use crate::normalize::Dialog;

/// The longest a closing session waits for pi to take its own model back (see
/// `PiSession::close`).
const SET_MODEL_ON_CLOSE: Duration = Duration::from_secs(2);

/// An adapter deadline: shorter than the runtime's, so the adapter reports first.
pub(crate) fn adapter_deadline(runtime: Duration) -> Duration {
    runtime.saturating_sub(runtime / 10)
}

/// An open `pi --mode rpc` process.
#[derive(Debug)]
pub(crate) struct PiSession {
    pub(crate) provider: ProviderId,
    pub(crate) conn: Connection,
    /// Deadline of `prompt` answers.
    pub(crate) turn_timeout: Duration,
    /// Deadline of `abort` and `steer` answers.
    pub(crate) command_timeout: Duration,
    /// `steer` sends `follow_up`.
    pub(crate) follow_up: bool,
    /// The approval extension; removed when the session goes.
    pub(crate) _extension: ExtensionDir,
    /// The model the session opened with, which a turn without its own runs with.
    pub(crate) session_model: PiModel,
    /// The model pi runs with now.
    pub(crate) model: std::sync::Mutex<PiModel>,
    /// The session's hold on its conversation, let go when pi has ended.
    pub(crate) claim: std::sync::Mutex<Option<Claim>>,
}

/// A pi model: its provider (in `models.json`) and ID.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PiModel {
    pub(crate) provider: String,
    pub(crate) id: String,
}

impl PiModel {
    /// A turn's model `pattern` (`provider/id`, or an `id` of the provider pi runs now).
    fn of_turn(pattern: &str, now: &PiModel) -> Result<PiModel> {
        if pattern.trim().is_empty() || pattern.chars().any(char::is_whitespace) || pattern.contains(':') {
            let reason =
                format!("`{pattern}` is not a model for one pi turn: `provider/id` or `id`, without a thinking level");
            return Err(Error::InvalidOption { option: "model", reason });
        }
        Ok(match pattern.split_once('/') {
            Some((provider, id)) => PiModel { provider: provider.to_owned(), id: id.to_owned() },
            None => PiModel { provider: now.provider.clone(), id: pattern.to_owned() },
        })
    }
}

impl PiSession {
    /// The model pi must switch to for a turn asking for `requested`, if any: a turn's model is
    /// its own, and a turn without one runs with the session's again (a session whose model pi
    /// did not name has none to go back to).
    fn switch_for(&self, requested: Option<&str>) -> Result<Option<PiModel>> {
        let now = self.model.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        let wanted = match requested {
            Some(pattern) => PiModel::of_turn(pattern, &now)?,
            None if self.session_model.id.is_empty() => return Ok(None),
            None => self.session_model.clone(),
        };
        Ok((wanted != now).then_some(wanted))
    }

    fn rejected(&self, reason: impl Into<String>) -> Error {
        Error::ProviderRejected { provider: self.provider.clone(), reason: reason.into() }
    }

    fn uncertain(&self, operation: &'static str, timeout: Duration, error: CallError) -> Error {
        match error {
            CallError::Timeout => Error::Timeout { operation, timeout },
            other => Error::Transport { provider: self.provider.clone(), reason: format!("{operation}: {other}") },
        }
    }

    /// Drops the steer and follow-up messages pi holds undelivered (`clear_queue`), so that
    /// neither the run an abort stops nor the next prompt's run takes them. Does nothing on a
    /// pi without `clear_queue` (the turn's end warns instead).
    async fn clear_queue(&self, timeout: Duration) -> Result<()> {
        let held = {
            let state = self.conn.state();
            state.clears_queue() && state.queued() > 0
        };
        if !held {
            return Ok(());
        }
        match self.conn.call(json!({"type": "clear_queue"}), timeout).await {
            Ok(_) => Ok(()),
            Err(CallError::Refused { message, .. }) => Err(self.rejected(format!("pi refused clear_queue: {message}"))),
            Err(other) => Err(self.uncertain("clear_queue", timeout, other)),
        }
    }

    /// Input text; pi's RPC `prompt` takes a message string.
    fn text(&self, input: &TurnInput) -> Result<String> {
        if input.is_empty() {
            return Err(Error::InvalidOption { option: "input", reason: "the turn input is empty".into() });
        }
        Ok(input.text())
    }
}

/// The `extension_ui_response` for `response` to `dialog`, and whether the turn is to be
/// aborted afterwards (a cancelled request).
pub(crate) fn encode(dialog: &Dialog, response: &Response) -> Result<(Value, bool)> {
    let mut line = json!({"type": "extension_ui_response", "id": dialog.id.to_json()});
    let cancel = matches!(response, Response::Cancel { .. });
    match (dialog.method.as_str(), response) {
        ("confirm", Response::Approve { .. }) => line["confirmed"] = json!(true),
        ("confirm", Response::Deny { .. } | Response::Cancel { .. }) => line["confirmed"] = json!(false),
        (_, Response::Deny { .. } | Response::Cancel { .. }) => line["cancelled"] = json!(true),
        ("select" | "input" | "editor", Response::Answer { answer }) => {
            let value = match answer {
                Answer::Text(text) => Some(text.clone()),
                Answer::Many(values) => values.first().cloned(),
                Answer::ByQuestion(map) => map.values().next().and_then(|v| v.first().cloned()),
                _ => None,
            };
            let Some(value) = value else {
                return Err(Error::InvalidResponse("pi dialogs are answered with text".into()));
            };
            line["value"] = json!(value);
        }
        ("confirm", Response::ApproveEdited { .. }) => {
            return Err(Error::InvalidResponse(
                "a pi `confirm` dialog is a yes or no: approve without edits, or deny".into(),
            ));
        }
        (method, other) => {
            return Err(Error::InvalidResponse(format!(
                "a pi `{method}` dialog cannot take a `{}` response",
                other.action()
            )));
        }
    }
    Ok((line, cancel))
}

#[async_trait]
impl ProviderSession for PiSession {
    fn validate_turn(&self, options: &TurnOptions, input: &TurnInput) -> Result<()> {
        agent_core::provider::refuse_session_options::<crate::PiOptions>(options, None)?;
        if let Some(pattern) = options.model.as_deref() {
            let now = self.model.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
            PiModel::of_turn(pattern, &now)?;
        }
        self.text(input).map(drop)
    }

    async fn start_turn(&self, turn: TurnStart) -> Result<Admission> {
        let message = self.text(turn.input())?;
        if let Some(wanted) = self.switch_for(turn.options.model.as_deref())? {
            let request = json!({"type": "set_model", "provider": wanted.provider, "modelId": wanted.id});
            match self.conn.call(request, self.command_timeout).await {
                Ok(_) => *self.model.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = wanted,
                Err(CallError::Refused { message, .. }) => {
                    return Err(self.rejected(format!("pi refused set_model: {message}")));
                }
                Err(other) => return Err(self.uncertain("set_model", self.command_timeout, other)),
            }
        }
        // What the last turn left undelivered is not this turn's input.
        self.clear_queue(self.command_timeout).await?;
        let id = turn.id().clone();
        if let Err(running) = self.conn.state().begin_turn(id.clone()) {
            return Err(self.rejected(format!("turn `{running}` is still running in pi")));
        }
        match self.conn.prompt(&id, &message, self.turn_timeout).await {
            // The reader admitted the turn when the reply came (or pi compacts first).
            Ok(()) => Ok(Admission::default()),
            Err(CallError::Refused { message, .. }) => {
                self.conn.state().abort_turn(&id);
                Err(self.rejected(format!("pi refused the prompt: {message}")))
            }
            Err(CallError::Closed) => {
                let report = self.conn.exit_report().await;
                let (how, tail) = (report.how(), stderr_note(report.stderr_tail.as_deref()));
                Err(Error::Transport {
                    provider: self.provider.clone(),
                    reason: format!("pi exited during prompt ({how}){tail}"),
                })
            }
            Err(other) => Err(self.uncertain("prompt", self.turn_timeout, other)),
        }
    }

    async fn respond(&self, request: &Request, response: &Response) -> Result<()> {
        let Some(dialog) = self.conn.state().take_dialog(&request.provider_ref.0) else {
            return Err(Error::RequestExpired { request_id: request.id.clone() });
        };
        let (line, cancel) = match encode(&dialog, response) {
            Ok(encoded) => encoded,
            Err(error) => {
                self.conn.state().restore_dialog(dialog);
                return Err(error);
            }
        };
        if line.get("confirmed") == Some(&json!(false))
            && let Some(call) = &dialog.tool_call
        {
            let reason = match response {
                Response::Deny { reason } | Response::Cancel { reason } => reason.clone(),
                _ => None,
            };
            self.conn.state().denied(call, reason);
        }
        // A cancel aborts the run before the dialog is answered: answered first, a refused tool
        // lets pi go on to its next model request before the abort is read (measured under
        // load); aborted first, the run stops where it waits. The abort's outcome is the turn's
        // terminal event.
        if cancel && self.conn.state().aborting(&dialog.turn) {
            if let Err(error) = self.clear_queue(self.command_timeout).await {
                tracing::warn!(%error, "clearing pi's queue for a cancelled request failed");
            }
            if let Err(error) = self.conn.send(&json!({"type": "abort"})).await {
                tracing::warn!(%error, "abort for a cancelled request failed");
            }
        }
        if let Err(error) = self.conn.send(&line).await {
            return Err(Error::Transport { provider: self.provider.clone(), reason: format!("answering pi: {error}") });
        }
        Ok(())
    }

    /// Sends `abort` and waits for pi to end the turn, within the command deadline.
    async fn cancel(&self, turn: &TurnId) -> Result<()> {
        if !self.conn.state().aborting(turn) {
            return Ok(());
        }
        let deadline = deadline_after(tokio::time::Instant::now(), self.command_timeout);
        // Pi's abort goes on with the messages it holds: they go first.
        if let Err(error) = self.clear_queue(self.command_timeout / 2).await {
            tracing::warn!(%error, "clearing pi's queue before the abort failed");
        }
        let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
        match self.conn.call(json!({"type": "abort"}), remaining).await {
            Ok(_) => {}
            Err(CallError::Refused { .. }) if !self.conn.state().is_running(turn) => return Ok(()),
            Err(CallError::Refused { message, .. }) => {
                return Err(self.rejected(format!("pi refused abort: {message}")));
            }
            Err(other) => return Err(self.uncertain("abort", self.command_timeout, other)),
        }
        match tokio::time::timeout_at(deadline, self.conn.turn_ended(turn)).await {
            Ok(()) => Ok(()),
            Err(_) => Err(Error::Timeout {
                operation: "the turn's end after an acknowledged abort",
                timeout: self.command_timeout,
            }),
        }
    }

    async fn steer(&self, turn: &TurnId, input: &TurnInput) -> Result<()> {
        if !self.conn.state().is_running(turn) {
            return Err(Error::TurnNotActive { turn_id: turn.clone() });
        }
        let message = self.text(input)?;
        let kind = if self.follow_up { "follow_up" } else { "steer" };
        match self.conn.call(json!({"type": kind, "message": message}), self.command_timeout).await {
            Ok(_) => Ok(()),
            Err(CallError::Refused { message, .. }) => Err(self.rejected(format!("pi refused {kind}: {message}"))),
            Err(other) => Err(self.uncertain("steer", self.command_timeout, other)),
        }
    }

    async fn close(&self) {
        // pi records a turn's `set_model` in its session file, and a resume reopens on the model
        // named last: after a turn with its own, the session's goes back first. Not while a turn
        // runs (a forced stop), which pi would refuse or hold up.
        let idle = self.conn.state().running().is_none();
        if let (true, Ok(Some(model))) = (idle, self.switch_for(None)) {
            let request = json!({"type": "set_model", "provider": model.provider, "modelId": model.id});
            let _ = self.conn.call(request, self.command_timeout.min(SET_MODEL_ON_CLOSE)).await;
        }
        self.conn.close().await;
        drop(self.claim.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_provider_kit::rpc::CliRequestId;

    fn dialog(method: &str) -> Dialog {
        Dialog { id: CliRequestId::from("d1"), method: method.into(), turn: TurnId::generate(), tool_call: None }
    }

    #[test]
    fn answers_take_the_shape_of_the_dialog() {
        let (line, cancel) = encode(&dialog("confirm"), &Response::approve()).unwrap();
        assert_eq!(line, json!({"type": "extension_ui_response", "id": "d1", "confirmed": true}));
        assert!(!cancel);
        let (line, _) = encode(&dialog("confirm"), &Response::deny("no")).unwrap();
        assert_eq!(line["confirmed"], false);
        let (line, cancel) = encode(&dialog("confirm"), &Response::cancel("stop")).unwrap();
        assert_eq!(line["confirmed"], false);
        assert!(cancel);
        let (line, _) = encode(&dialog("select"), &Response::answer("blue")).unwrap();
        assert_eq!(line, json!({"type": "extension_ui_response", "id": "d1", "value": "blue"}));
        let (line, _) = encode(&dialog("input"), &Response::answers([("answer", "typed")])).unwrap();
        assert_eq!(line["value"], "typed");
        let (line, _) = encode(&dialog("select"), &Response::deny("skip")).unwrap();
        assert_eq!(line["cancelled"], true);
        assert!(encode(&dialog("confirm"), &Response::answer("yes")).is_err());
        let edited = encode(&dialog("confirm"), &Response::approve_edited(json!({"command": "ls"}))).unwrap_err();
        assert!(edited.to_string().contains("yes or no"), "{edited}");
    }
}

/// The session over a scripted pi (agent-exec's `ScriptedExec`) and the kit's testing sink,
/// under tokio's paused clock.
#[cfg(test)]
mod scripted {
    use std::time::Duration;

    use agent_core::EventKind;
    use agent_core::exec::{Command, Exec};
    use agent_exec::scripted::{LineMatch, Script, ScriptedExec, Step};
    use agent_provider_kit::testing::{Sent, SinkRecorder, sink};
    use serde_json::{Value, json};

    use super::*;

    /// Answers the command on `line` with a successful response.
    fn ok(line: &str) -> Vec<Step> {
        let command: Value = serde_json::from_str(line).expect("a JSON command");
        let reply = json!({"id": command["id"], "type": "response", "command": command["type"], "success": true});
        vec![Step::stdout(reply.to_string())]
    }

    async fn session(script: Script) -> (PiSession, SinkRecorder) {
        let exec = ScriptedExec::new();
        exec.script("pi", script);
        let child = exec.spawn(Command::new("pi")).await.expect("spawned");
        let (sink, recorder) = sink();
        let conn =
            Connection::start(child, sink, 1 << 20, agent_provider_kit::secrets::Secrets::default()).expect("pipes");
        let model = PiModel { provider: "fake".into(), id: "fake-model".into() };
        let session = PiSession {
            provider: ProviderId::new("pi"),
            conn,
            turn_timeout: Duration::from_secs(5),
            command_timeout: Duration::from_secs(2),
            follow_up: false,
            _extension: ExtensionDir::create(&std::env::temp_dir(), true).expect("extension"),
            session_model: model.clone(),
            model: std::sync::Mutex::new(model),
            claim: std::sync::Mutex::new(None),
        };
        (session, recorder)
    }

    fn prompted() -> Script {
        Script::new()
            .expect_line(LineMatch::contains(r#""type":"prompt""#))
            .answer(ok)
            .stdout(r#"{"type":"agent_start"}"#)
            .stdout(r#"{"type":"message_update","assistantMessageEvent":{"type":"text_delta","contentIndex":0,"delta":"Hel"}}"#)
            // 0.73.1's reply says nothing of a run: the provider asks whether one follows.
            .expect_line(LineMatch::contains(r#""type":"get_state""#))
            .answer(ok)
    }

    /// A turn's model is switched to and back; a session whose model pi did not name stays on
    /// the last one asked for.
    #[tokio::test(start_paused = true)]
    async fn a_turns_model_is_switched_to_and_back() {
        let (mut session, _) = session(Script::new().wait_eof()).await;
        let model = |provider: &str, id: &str| PiModel { provider: provider.into(), id: id.into() };
        assert_eq!(session.switch_for(None).unwrap(), None, "on the session's model");
        assert_eq!(session.switch_for(Some("fake-resp/m")).unwrap(), Some(model("fake-resp", "m")));
        assert_eq!(session.switch_for(Some("other")).unwrap(), Some(model("fake", "other")), "pi's provider");
        assert!(matches!(session.switch_for(Some("fake/m:high")), Err(Error::InvalidOption { .. })));
        *session.model.lock().unwrap() = model("fake-resp", "m");
        assert_eq!(session.switch_for(None).unwrap(), Some(model("fake", "fake-model")), "back to the session's");
        session.session_model = model("", "");
        assert_eq!(session.switch_for(None).unwrap(), None, "no session model to go back to");
    }

    /// A prompt pi compacts the context for is admitted when the compaction starts, long before
    /// its reply (here past the admission's deadline); the refusal that comes after it fails the
    /// turn through the reader.
    #[tokio::test(start_paused = true)]
    async fn a_prompt_is_admitted_when_pi_compacts_for_it_and_fails_when_refused_after() {
        let refuse = |line: &str| {
            let command: Value = serde_json::from_str(line).expect("a JSON command");
            let reply = json!({"id": command["id"], "type": "response", "command": "prompt", "success": false,
                "error": "an extension said no"});
            vec![Step::stdout(reply.to_string())]
        };
        let script = Script::new()
            .expect_line(LineMatch::contains(r#""type":"prompt""#))
            .stdout(r#"{"type":"compaction_start","reason":"threshold"}"#)
            .sleep(Duration::from_secs(60))
            .stdout(r#"{"type":"compaction_end","reason":"threshold","aborted":false,"willRetry":false}"#)
            .answer(refuse)
            .wait_eof();
        let (session, mut sent) = session(script).await;
        let turn = TurnId::from_string("t1");
        session.conn.state().begin_turn(turn.clone()).expect("no turn runs");
        let started = tokio::time::Instant::now();
        session.conn.prompt(&turn, "hi", Duration::from_secs(5)).await.expect("admitted");
        assert!(started.elapsed() < Duration::from_secs(1), "{:?}", started.elapsed());
        tokio::time::timeout(Duration::from_secs(120), session.conn.turn_ended(&turn)).await.expect("the turn ends");
        let end = sent.drain().into_iter().find_map(|s| match s {
            Sent::Event { kind, turn: Some(t), .. } if t == turn && kind.is_terminal() => kind.terminal_end().cloned(),
            _ => None,
        });
        let end = end.expect("the turn ended");
        assert_eq!(end.status, agent_core::TurnStatus::Failed);
        assert_eq!(end.result.reason.as_deref(), Some("pi refused the prompt: an extension said no"));
        session.close().await;
    }

    /// A reply that comes after its caller stopped waiting still tells the turn: an extension
    /// command took the prompt, so the turn completes.
    #[tokio::test(start_paused = true)]
    async fn a_prompt_reply_after_its_caller_gave_up_still_ends_the_turn() {
        let handled = |line: &str| {
            let command: Value = serde_json::from_str(line).expect("a JSON command");
            let reply = json!({"id": command["id"], "type": "response", "command": "prompt", "success": true,
                "data": {"disposition": "handled"}});
            vec![Step::stdout(reply.to_string())]
        };
        let script = Script::new()
            .expect_line(LineMatch::contains(r#""type":"prompt""#))
            .sleep(Duration::from_secs(10))
            .answer(handled)
            .wait_eof();
        let (session, mut sent) = session(script).await;
        let turn = TurnId::from_string("t1");
        session.conn.state().begin_turn(turn.clone()).expect("no turn runs");
        let gave_up = session.conn.prompt(&turn, "/mark", Duration::from_secs(1)).await;
        assert!(matches!(gave_up, Err(CallError::Timeout)), "{gave_up:?}");
        tokio::time::timeout(Duration::from_secs(60), session.conn.turn_ended(&turn)).await.expect("the turn ends");
        let end = sent.drain().into_iter().find_map(|s| match s {
            Sent::Event { kind, turn: Some(t), .. } if t == turn && kind.is_terminal() => kind.terminal_end().cloned(),
            _ => None,
        });
        assert_eq!(end.map(|end| end.status), Some(agent_core::TurnStatus::Completed));
        session.close().await;
    }

    #[tokio::test(start_paused = true)]
    async fn an_abort_acknowledged_without_an_end_times_out_on_the_command_deadline() {
        let script = prompted().expect_line(LineMatch::contains(r#""type":"abort""#)).answer(ok).wait_eof();
        let (session, mut sent) = session(script).await;
        let turn = TurnId::from_string("t1");
        session.conn.state().begin_turn(turn.clone()).expect("no turn runs");
        session.conn.prompt(&turn, "hi", Duration::from_secs(5)).await.expect("accepted");
        let started = tokio::time::Instant::now();
        let cancelled = session.cancel(&turn).await;
        assert!(matches!(cancelled, Err(Error::Timeout { .. })), "{cancelled:?}");
        assert_eq!(started.elapsed(), Duration::from_secs(2), "bounded by the command deadline");
        let delta = sent.drain().into_iter().find_map(|s| match s {
            Sent::Event { kind: EventKind::MessageDelta { text, .. }, turn: Some(t), .. } if t == turn => Some(text),
            _ => None,
        });
        assert_eq!(delta.as_deref(), Some("Hel"));
    }

    #[tokio::test(start_paused = true)]
    async fn an_abort_returns_once_pi_ended_the_turn() {
        let script = prompted()
            .expect_line(LineMatch::contains(r#""type":"abort""#))
            .stdout(r#"{"type":"message_end","message":{"role":"assistant","content":[{"type":"text","text":"Hel"}],"stopReason":"aborted"}}"#)
            .stdout(r#"{"type":"agent_end","messages":[],"willRetry":false}"#)
            .stdout(r#"{"type":"agent_settled","aborted":true}"#)
            .answer(ok)
            .wait_eof();
        let (session, mut sent) = session(script).await;
        let turn = TurnId::from_string("t1");
        session.conn.state().begin_turn(turn.clone()).expect("no turn runs");
        session.conn.prompt(&turn, "hi", Duration::from_secs(5)).await.expect("accepted");
        session.cancel(&turn).await.expect("the turn ended");
        let end = sent.drain().into_iter().find_map(|s| match s {
            Sent::Event { kind, .. } if kind.is_terminal() => Some(kind),
            _ => None,
        });
        assert!(matches!(end, Some(EventKind::TurnInterrupted(_))), "{end:?}");
        assert!(session.conn.state().running().is_none());
        session.close().await;
    }
}
