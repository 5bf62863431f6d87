//! One open Claude Code session: the [`ProviderSession`] the runtime drives.

use std::sync::Mutex;
use std::time::Duration;

use agent_core::provider::{Admission, ProviderSession, TurnStart};
use agent_core::time::deadline_after;
use agent_core::{Error, InputItem, ProviderId, Request, Response, Result, TurnId, TurnInput, TurnOptions};
use agent_provider_kit::conversations::Claim;
use async_trait::async_trait;
use serde_json::{Value, json};

use crate::connection::{CallError, Connection};

/// How often a cancel looks whether claude has begun a turn that waits behind its own run.
const WAITING_POLL: Duration = Duration::from_millis(20);
use crate::options::{ClaudeTurnOptions, PermissionMode};
use crate::requests;
use crate::wire::{UserLine, UserMessage, control_response};

/// An adapter deadline: shorter than the runtime's `runtime` deadline, so the adapter reports
/// first (DESIGN.md §4: adapter < actor < caller).
pub(crate) fn adapter_deadline(runtime: Duration) -> Duration {
    runtime.saturating_sub(runtime / 10)
}

/// The model and permission mode the process runs with now.
#[derive(Debug)]
pub(crate) struct Settings {
    /// The session's model (`None`: claude's default), which a turn without its own runs with.
    pub(crate) session_model: Option<String>,
    /// The session's permission mode, which a turn without its own runs with.
    pub(crate) session_mode: PermissionMode,
    /// The model claude runs with now.
    pub(crate) model: Option<String>,
    /// The permission mode claude runs with now.
    pub(crate) permission_mode: PermissionMode,
}

impl Settings {
    /// A session opened with `model` and `mode`.
    pub(crate) fn new(model: Option<String>, mode: PermissionMode) -> Settings {
        Settings { session_model: model.clone(), session_mode: mode, model, permission_mode: mode }
    }
}

/// An open `claude -p` process.
#[derive(Debug)]
pub(crate) struct ClaudeSession {
    pub(crate) provider: ProviderId,
    /// The names of the session's skills (an `InputItem::Skill` must name one).
    pub(crate) skills: Vec<String>,
    pub(crate) conn: Connection,
    pub(crate) settings: Mutex<Settings>,
    /// The session opted in to `bypassPermissions` (`--allow-dangerously-skip-permissions`),
    /// which a turn's permission mode needs as much as the session's.
    pub(crate) bypass_allowed: bool,
    /// Deadline of the control requests before a turn (`set_model`, `set_permission_mode`).
    pub(crate) turn_timeout: Duration,
    /// Deadline of `interrupt` and of the turn's end after it.
    pub(crate) command_timeout: Duration,
    /// The session's hold on its conversation, let go when claude has ended.
    pub(crate) claim: Mutex<Option<Claim>>,
}

/// Claude Code's commands that start a new conversation in the running process (`/clear` and
/// its aliases): claude would then report another session ID than the session's, which ends the
/// session (see `Normalizer::reported`).
const NEW_CONVERSATION_COMMANDS: &[&str] = &["/clear", "/reset", "/new"];

/// Claude Code runs a prompt that starts with `/` as its command (`/cost`, `/compact`): those
/// pass. The ones that would leave the session's conversation, and `/model`, which would
/// change the model behind the provider's back (a later turn's model, or the session's, would
/// then not be set again), are refused before claude sees them.
fn refuse_conversation_commands(input: &TurnInput) -> Result<()> {
    let first = match input {
        TurnInput::Text(text) => Some(text.as_str()),
        TurnInput::Items(items) => items.iter().find_map(|i| match i {
            InputItem::Text { text } => Some(text.as_str()),
            _ => None,
        }),
    };
    let command = first.and_then(|text| text.split_whitespace().next()).unwrap_or_default();
    let why = if NEW_CONVERSATION_COMMANDS.contains(&command) {
        "makes claude start a new conversation, which this session cannot follow; start a new session instead"
    } else if command == "/model" {
        "changes claude's model without the session knowing; set `TurnOptions::model` (this turn) or \
         `SessionOptions::model` instead"
    } else {
        return Ok(());
    };
    Err(Error::InvalidOption { option: "input", reason: format!("`{command}` {why}") })
}

/// The `message.content` of a prompt: the text, or text and image blocks for structured
/// input. A skill item makes the prompt `/<skill> <text>`, a string: claude expands a skill's
/// slash command only in a string prompt (measured), so it takes text items only.
pub(crate) fn content(input: &TurnInput, skills: &[String]) -> Result<Value> {
    refuse_conversation_commands(input)?;
    if let TurnInput::Items(items) = input
        && let Some(skill) = items.iter().find_map(|i| match i {
            InputItem::Skill { name } => Some(name),
            _ => None,
        })
    {
        let invalid = |reason: String| Error::InvalidOption { option: "input", reason };
        if !skills.contains(skill) {
            return Err(invalid(format!("skill `{skill}` is not configured for this session (SessionOptions::skill)")));
        }
        let mut text = format!("/{skill}");
        for item in items {
            match item {
                InputItem::Text { text: part } => {
                    text.push(' ');
                    text.push_str(part);
                }
                InputItem::Skill { name } if name == skill => {}
                _ => return Err(invalid("a prompt with a skill takes one skill and text items only".into())),
            }
        }
        return Ok(json!(text));
    }
    match input {
        TurnInput::Text(text) => Ok(json!(text)),
        TurnInput::Items(items) => items
            .iter()
            .map(|item| match item {
                InputItem::Text { text } => Ok(json!({"type": "text", "text": text})),
                InputItem::ImageUrl { url } => image(url),
                _ => Err(Error::InvalidOption {
                    option: "input",
                    reason: "Claude Code takes text, image-URL and skill input items (a local image file cannot \
                             be read through the exec; pass it as a data: URL)"
                        .into(),
                }),
            })
            .collect::<Result<Vec<_>>>()
            .map(Value::Array),
    }
}

/// An image content block: a `data:<media type>;base64,…` URL becomes a base64 source, an
/// http(s) URL a URL source.
fn image(url: &str) -> Result<Value> {
    if let Some(rest) = url.strip_prefix("data:") {
        let invalid = || Error::InvalidOption {
            option: "input",
            reason: "an image data: URL must be base64 (`data:image/png;base64,…`)".into(),
        };
        let (meta, data) = rest.split_once(',').ok_or_else(invalid)?;
        let media_type = meta.strip_suffix(";base64").filter(|m| m.starts_with("image/")).ok_or_else(invalid)?;
        return Ok(json!({"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}));
    }
    if url.starts_with("https://") || url.starts_with("http://") {
        return Ok(json!({"type": "image", "source": {"type": "url", "url": url}}));
    }
    Err(Error::InvalidOption { option: "input", reason: "an image URL must be http(s) or a base64 data: URL".into() })
}

impl ClaudeSession {
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

    fn settings(&self) -> std::sync::MutexGuard<'_, Settings> {
        self.settings.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sends a control request before a turn; a refusal is definite.
    async fn setting(&self, operation: &'static str, request: Value) -> Result<()> {
        match self.conn.control(request, self.turn_timeout).await {
            Ok(_) => Ok(()),
            Err(CallError::Refused(message)) => Err(self.rejected(format!("claude refused {operation}: {message}"))),
            Err(other) => Err(self.uncertain(operation, self.turn_timeout, other)),
        }
    }
}

#[async_trait]
impl ProviderSession for ClaudeSession {
    fn validate_turn(&self, options: &TurnOptions, input: &TurnInput) -> Result<()> {
        agent_core::provider::refuse_session_options::<crate::ClaudeOptions>(options, Some("ClaudeTurnOptions"))?;
        let mode = options.provider_options.get::<ClaudeTurnOptions>().and_then(|o| o.permission_mode);
        if mode == Some(PermissionMode::BypassPermissions) && !self.bypass_allowed {
            return Err(Error::InvalidOption {
                option: "provider_options",
                reason: "permission mode `bypassPermissions` runs every tool without asking; a turn may use it only \
                         in a session started with ClaudeOptions::allow_dangerously_skip_permissions"
                    .into(),
            });
        }
        content(input, &self.skills).map(drop)
    }

    async fn start_turn(&self, turn: TurnStart) -> Result<Admission> {
        let content = content(turn.input(), &self.skills)?;
        if self.conn.state().has_turn() {
            return Err(self.rejected("a turn is still running in claude"));
        }
        // A turn's model and permission mode are its own: a turn without them runs with the
        // session's again (`null` is claude's default model).
        let turn_mode = turn.options.provider_options.get::<ClaudeTurnOptions>().and_then(|o| o.permission_mode);
        let (model, mode) = {
            let settings = self.settings();
            let model = turn.options.model.clone().or_else(|| settings.session_model.clone());
            let mode = turn_mode.unwrap_or(settings.session_mode);
            ((model != settings.model).then_some(model), (mode != settings.permission_mode).then_some(mode))
        };
        if let Some(model) = model {
            self.setting("set_model", json!({"subtype": "set_model", "model": model})).await?;
            self.settings().model = model;
        }
        if let Some(mode) = mode {
            let request = json!({"subtype": "set_permission_mode", "mode": mode.as_str()});
            self.setting("set_permission_mode", request).await?;
            self.settings().permission_mode = mode;
        }
        let id = turn.id().clone();
        if let Err(running) = self.conn.state().begin_turn(id.clone()) {
            return Err(self.rejected(format!("turn `{running}` is still running in claude")));
        }
        let line = UserLine {
            kind: "user",
            message: UserMessage { role: "user", content: &content },
            parent_tool_use_id: None,
            session_id: "",
        };
        match tokio::time::timeout(self.turn_timeout, self.conn.write(&line)).await {
            Ok(Ok(())) => Ok(Admission::default()),
            Ok(Err(error)) => {
                self.conn.state().abort_turn(&id);
                let report = self.conn.exit_report().await;
                Err(Error::Transport {
                    provider: self.provider.clone(),
                    reason: format!("writing the prompt to claude failed ({error}): the process {report}"),
                })
            }
            Err(_) => Err(Error::Timeout { operation: "writing the prompt to claude", timeout: self.turn_timeout }),
        }
    }

    async fn respond(&self, request: &Request, response: &Response) -> Result<()> {
        let Some(pending) = self.conn.state().take_request(&request.provider_ref.0) else {
            return Err(Error::RequestExpired { request_id: request.id.clone() });
        };
        let encoded = match requests::encode(&pending, response) {
            Ok(encoded) => encoded,
            Err(error) => {
                self.conn.state().restore_request(pending);
                return Err(error);
            }
        };
        let line = control_response(&pending.request_id, Ok(Some(encoded.result)));
        if let Err(error) = self.conn.write(&line).await {
            return Err(Error::Transport {
                provider: self.provider.clone(),
                reason: format!("answering claude: {error}"),
            });
        }
        self.conn.state().answered(&pending, encoded.rule, encoded.denied);
        Ok(())
    }

    /// Interrupts the turn and waits for claude to end it (its `result`), all within the
    /// command deadline; an acknowledged interrupt whose `result` never comes is a timeout, so
    /// the runtime retires the session rather than wait forever.
    async fn cancel(&self, turn: &TurnId) -> Result<()> {
        if !self.conn.state().mark_interrupted(turn) {
            return Ok(());
        }
        let deadline = deadline_after(tokio::time::Instant::now(), self.command_timeout);
        // Behind a run claude started by itself, an interrupt would stop that run, and the
        // turn's prompt would run after it: the interrupt waits for the turn's own run.
        while self.conn.state().is_waiting(turn) {
            if tokio::time::Instant::now() >= deadline {
                return Err(Error::Timeout {
                    operation: "claude beginning the turn to interrupt (it runs one of its own first)",
                    timeout: self.command_timeout,
                });
            }
            tokio::time::sleep(WAITING_POLL).await;
        }
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match self.conn.control(json!({"subtype": "interrupt"}), left).await {
            Ok(_) => {}
            Err(_) if !self.conn.state().is_running(turn) => return Ok(()),
            Err(CallError::Refused(message)) => {
                return Err(self.rejected(format!("claude refused interrupt: {message}")));
            }
            Err(other) => return Err(self.uncertain("interrupt", self.command_timeout, other)),
        }
        match tokio::time::timeout_at(deadline, self.conn.turn_ended(turn)).await {
            Ok(()) => Ok(()),
            Err(_) => Err(Error::Timeout {
                operation: "the turn's result after an acknowledged interrupt",
                timeout: self.command_timeout,
            }),
        }
    }

    async fn close(&self) {
        self.conn.close().await;
        drop(self.claim.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adapter_deadlines_expire_before_the_runtime_ones() {
        assert_eq!(adapter_deadline(Duration::from_secs(30)), Duration::from_secs(27));
    }

    fn content_of(input: &TurnInput) -> Result<Value> {
        content(input, &["notes".to_owned()])
    }

    #[test]
    fn a_command_that_leaves_the_conversation_or_changes_the_model_is_refused_and_others_pass() {
        for text in ["/clear", "  /reset now", "/new"] {
            let err = content_of(&TurnInput::Text(text.into())).unwrap_err();
            assert!(
                matches!(&err, Error::InvalidOption { option: "input", reason } if reason.contains("new conversation"))
            );
        }
        let items = TurnInput::Items(vec![InputItem::Text { text: "/clear".into() }]);
        assert!(content_of(&items).is_err());
        let model = content_of(&TurnInput::Text("/model claude-haiku-4-5".into())).unwrap_err();
        assert!(
            matches!(&model, Error::InvalidOption { option: "input", reason } if reason.contains("TurnOptions::model"))
        );
        for text in ["/cost", "/clearly wrong", "/models are fun", "/etc/hosts has a typo", "please /clear the cache"] {
            assert_eq!(content_of(&TurnInput::Text(text.into())).unwrap(), json!(text));
        }
    }

    #[test]
    fn a_skill_item_is_a_slash_command() {
        let input = TurnInput::Items(vec![
            InputItem::Skill { name: "notes".into() },
            InputItem::Text { text: "for v2".into() },
        ]);
        assert_eq!(content_of(&input).unwrap(), json!("/notes for v2"));
        let unknown = TurnInput::Items(vec![InputItem::Skill { name: "other".into() }]);
        assert!(matches!(content_of(&unknown), Err(Error::InvalidOption { option: "input", .. })));
        let mixed = TurnInput::Items(vec![
            InputItem::Skill { name: "notes".into() },
            InputItem::ImageUrl { url: "https://x/y.png".into() },
        ]);
        assert!(matches!(content_of(&mixed), Err(Error::InvalidOption { option: "input", .. })));
    }

    #[test]
    fn prompts_are_text_or_text_blocks() {
        assert_eq!(content_of(&TurnInput::from("hi")).unwrap(), json!("hi"));
        let items = TurnInput::Items(vec![InputItem::Text { text: "a".into() }]);
        assert_eq!(content_of(&items).unwrap(), json!([{"type": "text", "text": "a"}]));
        let image = TurnInput::Items(vec![InputItem::ImageUrl { url: "data:image/png;base64,iVBOR".into() }]);
        assert_eq!(
            content_of(&image).unwrap(),
            json!([{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBOR"}}])
        );
        let web = TurnInput::Items(vec![InputItem::ImageUrl { url: "https://x/y.png".into() }]);
        assert_eq!(content_of(&web).unwrap()[0]["source"], json!({"type": "url", "url": "https://x/y.png"}));
        for bad in ["data:text/plain;base64,aGk=", "data:image/png,raw", "file:///y.png"] {
            let item = TurnInput::Items(vec![InputItem::ImageUrl { url: bad.into() }]);
            assert!(matches!(content_of(&item), Err(Error::InvalidOption { option: "input", .. })), "{bad}");
        }
        let local = TurnInput::Items(vec![InputItem::LocalImage { path: "/y.png".into() }]);
        assert!(matches!(content_of(&local), Err(Error::InvalidOption { option: "input", .. })));
    }
}
