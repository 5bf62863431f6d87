//! One open Codex session: the [`ProviderSession`] the runtime drives.

use std::time::Duration;

use agent_core::provider::{Admission, ProviderSession, TurnStart};
use agent_core::time::deadline_after;
use agent_core::{Error, ProviderId, Request, Response, Result, Skill, TurnId, TurnInput, TurnOptions};
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
    /// The thread's model and effort, and what codex runs with now.
    pub(crate) settings: TurnSettings,
    /// Deadline of `turn/start` answers.
    pub(crate) turn_timeout: Duration,
    /// Deadline of `turn/interrupt` and `turn/steer` answers.
    pub(crate) command_timeout: Duration,
}

/// A model and a reasoning effort.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ModelEffort {
    pub(crate) model: Option<String>,
    pub(crate) effort: Option<String>,
}

/// The thread's own model and effort, and the ones codex runs with now: codex keeps a turn's
/// override (`turn/start`'s `model`, `effort`) for the turns after it, so a turn without one
/// sends the thread's back.
#[derive(Debug)]
pub(crate) struct TurnSettings(std::sync::Mutex<Settings>);

#[derive(Debug)]
struct Settings {
    /// The thread's; an effort codex did not name is its model's default, learnt when needed.
    thread: ModelEffort,
    now: ModelEffort,
}

impl TurnSettings {
    /// The settings of a thread that opened with `model` and `effort` (as codex answered).
    pub(crate) fn new(model: Option<String>, effort: Option<String>) -> TurnSettings {
        let thread = ModelEffort { model, effort };
        TurnSettings(std::sync::Mutex::new(Settings { now: thread.clone(), thread }))
    }

    /// The settings of a resumed or forked thread: codex continues it with the model and effort
    /// of its last turn (`now`, as it answered), which may have been that turn's own; the
    /// thread's are the session's (`own`, see [`configured`]), when known.
    pub(crate) fn resumed(own: ModelEffort, now: ModelEffort) -> TurnSettings {
        let thread = if own.model.is_some() { own } else { now.clone() };
        TurnSettings(std::sync::Mutex::new(Settings { thread, now }))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Settings> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// What `turn/start` sends for a turn asking for `model` and `effort`: the turn's own, else
    /// the thread's where codex runs with another since an earlier turn's override, else
    /// nothing.
    pub(crate) fn for_turn(&self, model: Option<&str>, effort: Option<&str>) -> ModelEffort {
        let Settings { thread, now } = &*self.lock();
        let pick = |own: Option<&str>, thread: &Option<String>, now: &Option<String>| match own {
            Some(own) => Some(own.to_owned()),
            None => thread.clone().filter(|thread| Some(thread) != now.as_ref()),
        };
        ModelEffort { model: pick(model, &thread.model, &now.model), effort: pick(effort, &thread.effort, &now.effort) }
    }

    /// The thread's model, when a turn without an effort of its own must go back to the thread's
    /// effort and codex did not name it (the model's default, to be looked up).
    pub(crate) fn unnamed_effort(&self, effort: Option<&str>) -> Option<String> {
        let Settings { thread, now } = &*self.lock();
        let unnamed = effort.is_none() && thread.effort.is_none() && now.effort.is_some();
        unnamed.then(|| thread.model.clone()).flatten()
    }

    /// The thread's effort, looked up (see [`TurnSettings::unnamed_effort`]).
    pub(crate) fn learn_thread_effort(&self, effort: String) {
        self.lock().thread.effort = Some(effort);
    }

    /// Codex took `sent` with an admitted turn.
    pub(crate) fn applied(&self, sent: &ModelEffort) {
        let now = &mut self.lock().now;
        if sent.model.is_some() {
            now.model.clone_from(&sent.model);
        }
        if sent.effort.is_some() {
            now.effort.clone_from(&sent.effort);
        }
    }
}

/// One page of `model/list`.
#[derive(Deserialize)]
struct ModelList {
    data: Vec<ModelEntry>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ModelEntry {
    id: String,
    model: String,
    default_reasoning_effort: Option<String>,
    #[serde(default)]
    is_default: bool,
}

/// `config/read`'s effective configuration, the fields a turn's settings need.
#[derive(Deserialize)]
struct ConfigRead {
    config: ModelConfig,
}

#[derive(Deserialize)]
struct ModelConfig {
    model: Option<String>,
    model_reasoning_effort: Option<String>,
}

/// Codex's model list, hidden models included.
async fn model_list(conn: &Connection, timeout: Duration) -> Option<Vec<ModelEntry>> {
    let params = serde_json::json!({"includeHidden": true, "limit": 500});
    let raw = conn.call("model/list", params, timeout).await.ok()?;
    Some(parse_result::<ModelList>(raw.get())?.data)
}

/// The model and effort a session runs with where no turn sets its own: the session's `model`,
/// else the session's config overrides' (`model`, `model_reasoning_effort`), else codex's
/// configuration for `cwd` (`config/read`), else the model list's default model. An effort left
/// unset is the model's default. The model is `None` when codex answers neither call.
pub(crate) async fn configured(
    conn: &Connection,
    cwd: Option<&str>,
    model: Option<&str>,
    overrides: &std::collections::BTreeMap<String, Value>,
    timeout: Duration,
) -> ModelEffort {
    let set = |key: &str| overrides.get(key).and_then(Value::as_str).map(str::to_owned);
    let mut own =
        ModelEffort { model: model.map(str::to_owned).or_else(|| set("model")), effort: set("model_reasoning_effort") };
    if own.model.is_some() && own.effort.is_some() {
        return own;
    }
    // One deadline for both calls below.
    let deadline = tokio::time::Instant::now() + timeout;
    let left = || deadline.saturating_duration_since(tokio::time::Instant::now());
    let params = serde_json::json!({"cwd": cwd, "includeLayers": false});
    if let Ok(raw) = conn.call("config/read", params, left()).await
        && let Some(ConfigRead { config }) = parse_result(raw.get())
    {
        own.model = own.model.or(config.model);
        own.effort = own.effort.or(config.model_reasoning_effort);
    }
    if own.model.is_none() {
        own.model =
            model_list(conn, left()).await.and_then(|list| list.into_iter().find(|m| m.is_default)).map(|m| m.model);
    }
    own
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

    /// The default reasoning effort of `model` in codex's model list; `None` when codex does not
    /// say (the turn then keeps the effort codex runs with).
    async fn default_effort(&self, model: &str) -> Option<String> {
        let list = model_list(&self.conn, self.command_timeout).await?;
        list.into_iter().find(|m| m.model == model || m.id == model)?.default_reasoning_effort
    }

    /// Sends `turn/interrupt` for the codex turn.
    async fn interrupt(&self, codex_turn: &str) -> std::result::Result<(), CallError> {
        let params = TurnRefParams { thread_id: &self.thread_id, turn_id: codex_turn };
        self.conn.call("turn/interrupt", params, self.command_timeout).await.map(drop)
    }
}

#[async_trait]
impl ProviderSession for CodexSession {
    fn validate_turn(&self, options: &TurnOptions, input: &TurnInput) -> Result<()> {
        agent_core::provider::refuse_session_options::<crate::CodexOptions>(options, Some("CodexTurnOptions"))?;
        let effort = options.provider_options.get::<CodexTurnOptions>().and_then(|o| o.effort.as_deref());
        if effort.is_some_and(|effort| effort.trim().is_empty() || effort.contains('\0')) {
            return Err(Error::InvalidOption {
                option: "provider_options",
                reason: "CodexTurnOptions::effort must be a non-blank effort name".into(),
            });
        }
        // An item codex cannot take (a relative image path, a skill the session lacks).
        input::items(input, &self.skills, true).map(drop)
    }

    async fn start_turn(&self, turn: TurnStart) -> Result<Admission> {
        let input = input::items(turn.input(), &self.skills, true)?;
        let extras = turn.options.provider_options.get::<CodexTurnOptions>();
        let effort = extras.and_then(|e| e.effort.as_deref());
        if let Some(model) = self.settings.unnamed_effort(effort)
            && let Some(default) = self.default_effort(&model).await
        {
            self.settings.learn_thread_effort(default);
        }
        let sent = self.settings.for_turn(turn.options.model.as_deref(), effort);
        let params = TurnStartParams {
            thread_id: &self.thread_id,
            input,
            model: sent.model.as_deref(),
            effort: sent.effort.as_deref(),
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
                self.settings.applied(&sent);
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

    /// A turn's model and effort are its own: the next turn without them sends the thread's
    /// back, and a turn after that sends nothing.
    #[test]
    fn a_turns_model_and_effort_are_that_turns_only() {
        let settings = TurnSettings::new(Some("gpt-a".into()), Some("medium".into()));
        let both = |model: &str, effort: &str| ModelEffort { model: Some(model.into()), effort: Some(effort.into()) };
        assert_eq!(settings.for_turn(None, None), ModelEffort::default(), "on the thread's settings");
        let sent = settings.for_turn(Some("gpt-b"), Some("high"));
        assert_eq!(sent, both("gpt-b", "high"));
        settings.applied(&sent);
        let back = settings.for_turn(None, None);
        assert_eq!(back, both("gpt-a", "medium"), "back to the thread's");
        settings.applied(&back);
        assert_eq!(settings.for_turn(None, None), ModelEffort::default());
        let refused = settings.for_turn(Some("gpt-c"), None);
        assert_eq!(refused.model.as_deref(), Some("gpt-c"));
        assert_eq!(settings.for_turn(None, None), ModelEffort::default(), "a turn codex refused changed nothing");
        // A thread whose effort codex did not name goes back to its model's default, once known.
        let unnamed = TurnSettings::new(Some("gpt-a".into()), None);
        assert_eq!(unnamed.unnamed_effort(None), None, "nothing to go back from");
        unnamed.applied(&unnamed.for_turn(None, Some("high")));
        assert_eq!(unnamed.unnamed_effort(Some("low")), None, "the turn names its own");
        assert_eq!(unnamed.unnamed_effort(None).as_deref(), Some("gpt-a"));
        unnamed.learn_thread_effort("medium".into());
        assert_eq!(unnamed.for_turn(None, None).effort.as_deref(), Some("medium"));
    }

    #[test]
    fn a_resumed_thread_goes_back_to_the_sessions_settings() {
        let pair = |model: &str, effort: Option<&str>| ModelEffort {
            model: Some(model.into()),
            effort: effort.map(Into::into),
        };
        // Codex continues with the last turn's own; the session's effort is the model's default.
        let resumed = TurnSettings::resumed(pair("gpt-a", None), pair("gpt-b", Some("high")));
        assert_eq!(resumed.unnamed_effort(None).as_deref(), Some("gpt-a"));
        resumed.learn_thread_effort("medium".into());
        assert_eq!(resumed.for_turn(None, None), pair("gpt-a", Some("medium")));
        // Nothing known of the session's: codex's are taken as the thread's.
        let unknown = TurnSettings::resumed(ModelEffort::default(), pair("gpt-b", Some("high")));
        assert_eq!(unknown.for_turn(None, None), ModelEffort::default());
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
