//! The pure half of the provider: Claude Code's stdout lines in, [`Action`]s out. No I/O, so
//! every captured transcript can be fed through it in a unit test.
//!
//! | line | events |
//! |---|---|
//! | `stream_event` `content_block_delta` (`text_delta` / `thinking_delta`) | `message_delta` / `reasoning_delta` |
//! | other `stream_event`s (`message_start`, block start/stop, `message_delta`, `message_stop`, `ping`) | none (their content returns in `assistant` and `result`) |
//! | `assistant` | `assistant_message` per text block, `tool_started` per `tool_use` block |
//! | `user` with `tool_result` blocks | `tool_completed` (declined when the host denied it) |
//! | `system/init` | `session_updated` when the session ID changed, else `provider_event` |
//! | `system/api_retry` | `provider_error` with `will_retry` |
//! | `assistant` with `error` (the message claude makes up for a failed model request) | `provider_error` with the message's text, `code` the `error` |
//! | `result` | `usage_updated`, then the terminal event: `is_error` decides; an interrupt ends it `interrupted` |
//! | `control_request` `can_use_tool` | a request (or an answer at once under an emulated session rule) |
//! | other `control_request`s | an error answer (hooks and SDK MCP servers are not registered) |
//! | `control_cancel_request` | the pending request is resolved by the CLI (it expires) |
//! | anything else | `provider_event`, counted |

use std::collections::{HashMap, HashSet};

use agent_core::event::{RawJson, TextArena, ToolKind, ToolStatus, Usage};
use agent_core::exec::ExitStatus;
use agent_core::request::{ProviderRef, RequestSpec};
use agent_core::{EndCause, EventKind, ItemId, TurnId, TurnResult, TurnStatus};
use agent_provider_kit::clones::Clones;
use agent_provider_kit::framing::{Bytes, Unreadable};
use agent_provider_kit::permission_prompt::{ToolUseRequest, reused_request_id, unread_request_answer};
use agent_provider_kit::rpc::CliRequestId;
use serde_json::{Value, json};

use crate::requests::{self, PendingTool, SessionRule};
use crate::wire::{self, Content, Envelope};

/// What the connection does for one line.
#[derive(Debug)]
pub(crate) enum Action {
    /// Report an event.
    Emit { turn: Option<TurnId>, kind: EventKind, raw: Option<RawJson> },
    /// Ask the host.
    Request { turn: TurnId, spec: Box<RequestSpec>, raw: Option<RawJson> },
    /// The CLI settled a request by itself.
    Resolved { provider_ref: ProviderRef, raw: Option<RawJson> },
    /// A new Claude session ID.
    SessionUpdated { session_id: String, raw: Option<RawJson> },
    /// Write this line to the CLI (an answer to its control request).
    Write(Value),
    /// The CLI is not in the conversation the session holds: the transport is reported down
    /// and the CLI ended.
    Retire { reason: String },
}

impl Action {
    /// True for the terminal event of a turn.
    pub(crate) fn ends_turn(&self) -> bool {
        matches!(self, Action::Emit { kind, .. } if kind.is_terminal())
    }

    fn raw_slot(&mut self) -> Option<&mut Option<RawJson>> {
        match self {
            Action::Emit { raw, .. }
            | Action::Request { raw, .. }
            | Action::Resolved { raw, .. }
            | Action::SessionUpdated { raw, .. } => Some(raw),
            Action::Write(_) | Action::Retire { .. } => None,
        }
    }
}

/// Gives every reporting action of one line the line's raw JSON (moved into the last one).
pub(crate) fn attach(actions: &mut [Action], raw: RawJson) {
    let Some(last) = actions.iter_mut().rposition(|a| a.raw_slot().is_some()) else { return };
    for action in &mut actions[..last] {
        if let Some(slot) = action.raw_slot() {
            *slot = Some(raw.clone());
        }
    }
    if let Some(slot) = actions[last].raw_slot() {
        *slot = Some(raw);
    }
}

/// The running turn.
#[derive(Debug)]
struct Turn {
    harness: Clones<TurnId>,
    /// An interrupt was sent: an error result ends the turn `interrupted`.
    interrupted: bool,
    /// The API message being streamed (`message_start.message.id`).
    message_id: Option<Clones<ItemId>>,
    /// Tool uses the host denied.
    declined: HashSet<String>,
}

/// Whose run claude is in, from a `system/init` to its `result`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Run {
    /// Between runs (or a run whose `system/init` was not seen).
    #[default]
    Idle,
    /// The harness turn's prompt.
    Ours,
    /// One claude started by itself, with no turn running: a background task's notification
    /// (`system/task_notification`, then a run answering it). A turn started meanwhile waits
    /// behind it in claude's queue and begins at the next `system/init`.
    Own,
}

/// Claude Code's protocol state for one process.
#[derive(Debug, Default)]
pub(crate) struct Normalizer {
    turn: Option<Turn>,
    /// Whose run the lines are part of.
    run: Run,
    /// The session ID the CLI reports (`system/init`, `result`).
    session_id: Option<String>,
    /// `result.total_cost_usd` so far: it is cumulative per process.
    cost_so_far: f64,
    /// Pending `can_use_tool`s by the CLI's request ID.
    requests: HashMap<String, PendingTool>,
    /// "Allow for this session" decisions.
    rules: Vec<SessionRule>,
    /// Lines of a kind the provider does not know.
    unknown: u64,
    /// Where the texts of deltas the CLI wrote with escapes are kept.
    decoded: TextArena,
    /// Why the CLI is not in the conversation it was started on (it reported another session
    /// ID): the running turn fails with this reason and the session retires.
    foreign: Option<String>,
    /// Which unreadable stdout lines get a warning.
    unreadable: Unreadable,
}

impl Normalizer {
    /// A normalizer for a process whose session ID is expected to be `session_id`.
    pub(crate) fn new(session_id: Option<String>) -> Self {
        Normalizer { session_id, ..Normalizer::default() }
    }

    /// The session ID last reported.
    #[cfg(test)]
    pub(crate) fn session_id(&self) -> Option<&str> {
        self.session_id.as_deref()
    }

    /// Lines of unknown kinds seen.
    pub(crate) fn unknown_frames(&self) -> u64 {
        self.unknown
    }

    /// Starts `turn`; refuses while another runs.
    pub(crate) fn begin_turn(&mut self, turn: TurnId) -> Result<(), TurnId> {
        if let Some(running) = &self.turn {
            return Err(running.harness.get().clone());
        }
        self.turn =
            Some(Turn { harness: Clones::new(turn), interrupted: false, message_id: None, declined: HashSet::new() });
        Ok(())
    }

    /// Forgets `turn` when its prompt could not be written.
    pub(crate) fn abort_turn(&mut self, turn: &TurnId) {
        if self.turn.as_ref().is_some_and(|t| t.harness.get() == turn) {
            self.turn = None;
        }
    }

    /// True while `turn` runs.
    pub(crate) fn is_running(&self, turn: &TurnId) -> bool {
        self.turn.as_ref().is_some_and(|t| t.harness.get() == turn)
    }

    /// True while `turn` waits behind a run claude started by itself: claude has not begun it.
    pub(crate) fn is_waiting(&self, turn: &TurnId) -> bool {
        self.run == Run::Own && self.is_running(turn)
    }

    /// True while any turn runs.
    pub(crate) fn has_turn(&self) -> bool {
        self.turn.is_some()
    }

    /// Marks `turn` interrupted; false when it is not running.
    pub(crate) fn mark_interrupted(&mut self, turn: &TurnId) -> bool {
        match self.turn.as_mut() {
            Some(t) if t.harness.get() == turn => {
                t.interrupted = true;
                true
            }
            _ => false,
        }
    }

    /// Takes the pending tool `request_id` to answer it.
    pub(crate) fn take_request(&mut self, request_id: &str) -> Option<PendingTool> {
        self.requests.remove(request_id)
    }

    /// Puts back a pending tool whose answer was not sent.
    pub(crate) fn restore_request(&mut self, pending: PendingTool) {
        self.requests.insert(pending.request_id.as_str().to_owned(), pending);
    }

    /// Remembers the session rules of the session's earlier approvals for the session (a resumed
    /// session's, see `OpenContext::session_approvals`): the tool and the input approved, the
    /// edited one for an approval that replaced it.
    pub(crate) fn restore_rules(&mut self, approvals: &[agent_core::Request]) {
        for request in approvals {
            let Some(tool) = request.metadata.get("tool_name").and_then(Value::as_str) else { continue };
            let input = match &request.response {
                Some(agent_core::Response::ApproveEdited { input, .. }) => Some(input),
                _ => request.metadata.get("input"),
            };
            if let Some(input) = input {
                self.answered_rule(SessionRule::of(tool, input));
            }
        }
    }

    fn answered_rule(&mut self, rule: SessionRule) {
        if !self.rules.contains(&rule) {
            self.rules.push(rule);
        }
    }

    /// Records what an answer did: a remembered session rule, a denied tool use.
    pub(crate) fn answered(&mut self, pending: &PendingTool, rule: Option<SessionRule>, denied: bool) {
        if let Some(rule) = rule {
            self.answered_rule(rule);
        }
        if denied && let (Some(turn), Some(id)) = (self.turn.as_mut(), pending.tool_use_id.as_ref()) {
            turn.declined.insert(id.clone());
        }
    }

    fn current(&self) -> Option<TurnId> {
        self.turn.as_ref().map(|t| t.harness.get().clone())
    }

    fn emit(&self, actions: &mut Vec<Action>, kind: EventKind) {
        actions.push(Action::Emit { turn: self.current(), kind, raw: None });
    }

    fn other(&mut self, actions: &mut Vec<Action>, method: String) {
        self.emit(actions, EventKind::ProviderEvent { method });
    }

    /// Answers a control request of claude's whose line was over `max_line_bytes`: its first or
    /// last bytes named it, and claude would wait for its answer for good (see
    /// [`agent_provider_kit::permission_prompt::unread_request_answer`]). A warning says so.
    pub(crate) fn unread_control_request(
        &mut self,
        id: &CliRequestId,
        subtype: Option<&str>,
        len: usize,
        max_line: usize,
    ) -> Vec<Action> {
        let why = format!("its line was {len} bytes, over the {max_line}-byte limit (`max_line_bytes`)");
        let (answer, message) = unread_request_answer("claude", id, subtype, &why);
        let mut actions = vec![Action::Write(answer)];
        self.emit(&mut actions, EventKind::Warning { message });
        actions
    }

    /// A stdout line that is not JSON, not UTF-8 or too long: a warning, when the line gets one
    /// (see [`Unreadable`]).
    pub(crate) fn garbage(&mut self, message: String) -> Option<Action> {
        let turn = self.current();
        let message = self.unreadable.warning(turn.as_ref(), || message)?;
        Some(Action::Emit { turn, kind: EventKind::Warning { message }, raw: None })
    }

    /// Normalizes one line (`text`, parsed as `line`); the caller [`attach`]es the line's raw
    /// JSON. `chunk` is the read buffer the line lies in, if it does: streamed text is kept as
    /// a slice of it.
    pub(crate) fn on_line(
        &mut self,
        text: &str,
        chunk: Option<&Bytes>,
        line: &Envelope<'_>,
        actions: &mut Vec<Action>,
    ) {
        if &*line.kind == "system" && &*line.subtype == "init" {
            // A run opens: the turn's when one runs (or waits), else one claude started itself.
            self.run = if self.turn.is_some() { Run::Ours } else { Run::Own };
        }
        if self.run == Run::Own {
            // None of a run claude started by itself is the turn's, which waits behind it: its
            // lines are the session's, its tool requests are refused as outside a turn.
            let waiting = self.turn.take();
            self.dispatch(text, chunk, line, actions);
            self.turn = waiting;
        } else {
            self.dispatch(text, chunk, line, actions);
        }
    }

    fn dispatch(&mut self, text: &str, chunk: Option<&Bytes>, line: &Envelope<'_>, actions: &mut Vec<Action>) {
        match &*line.kind {
            "stream_event" => self.on_stream_event(line, chunk, actions),
            "assistant" => self.on_assistant(line, actions),
            "user" => self.on_user(line, actions),
            "system" => self.on_system(text, line, actions),
            "result" => match serde_json::from_str::<wire::ResultMessage>(text) {
                Ok(result) => self.on_result(result, actions),
                Err(error) => match wire::ResultMessage::lenient(text) {
                    // The turn must end: what reads, with a word on what did not.
                    Some(result) => {
                        let message = format!(
                            "claude's `result` has fields missing or of types this provider does not expect \
                             ({error}); the turn ends with what could be read"
                        );
                        self.emit(actions, EventKind::Warning { message });
                        self.on_result(result, actions);
                    }
                    None => self.other(actions, "result".into()),
                },
            },
            "control_request" => self.on_control_request(line, actions),
            "control_cancel_request" => {
                let Some(id) = line.control_id() else { return };
                if self.requests.remove(id.as_str()).is_some() {
                    actions.push(Action::Resolved { provider_ref: ProviderRef(id.as_str().to_owned()), raw: None });
                }
            }
            // A reply nobody waits for (a caller gave up); keep-alives.
            "control_response" | "keep_alive" => {}
            other => {
                self.unknown += 1;
                let method =
                    if line.subtype.is_empty() { other.to_owned() } else { format!("{other}/{}", line.subtype) };
                self.other(actions, method);
            }
        }
    }

    fn on_stream_event(&mut self, line: &Envelope<'_>, chunk: Option<&Bytes>, actions: &mut Vec<Action>) {
        let Some(event) = &line.event else { return };
        match &*event.kind {
            "message_start" => {
                if let Some(turn) = self.turn.as_mut() {
                    turn.message_id = event
                        .message
                        .as_ref()
                        .map(|m| &*m.id)
                        .filter(|id| !id.is_empty())
                        .map(|id| Clones::new(ItemId::from(id)));
                }
            }
            "content_block_delta" => {
                let Some(delta) = &event.delta else { return };
                // Clones made a burst at a time (see `Clones`): every delta carries both IDs.
                let (turn, item_id) = match self.turn.as_mut() {
                    Some(t) => (Some(t.harness.take()), t.message_id.as_mut().map(Clones::take)),
                    None => (None, None),
                };
                let kind = match &*delta.kind {
                    "text_delta" => EventKind::MessageDelta { item_id, text: self.decoded.keep(&delta.text, chunk) },
                    "thinking_delta" => {
                        EventKind::ReasoningDelta { item_id, text: self.decoded.keep(&delta.thinking, chunk) }
                    }
                    _ => return,
                };
                actions.push(Action::Emit { turn, kind, raw: None });
            }
            _ => {}
        }
    }

    fn on_assistant(&mut self, line: &Envelope<'_>, actions: &mut Vec<Action>) {
        let Some(message) = line.message.and_then(|m| serde_json::from_str::<wire::Message>(m.get()).ok()) else {
            return self.other(actions, "assistant".into());
        };
        let item_id = message.id.as_deref().map(ItemId::from);
        let Content::Blocks(blocks) = &message.content else {
            let text = wire::content_text(&message.content);
            return self.emit(actions, EventKind::AssistantMessage { item_id, text });
        };
        // The message claude makes up for a failed model request is an error, not the agent's.
        let failure = line.error.and_then(|e| serde_json::from_str::<String>(e.get()).ok());
        let before = actions.len();
        for block in blocks {
            match block["type"].as_str() {
                Some("text") if failure.is_some() => {
                    let message = block["text"].as_str().unwrap_or_default().to_owned();
                    let code = failure.clone();
                    self.emit(actions, EventKind::ProviderError { message, code, will_retry: Some(false) });
                }
                Some("text") => {
                    let text = block["text"].as_str().unwrap_or_default().to_owned();
                    self.emit(actions, EventKind::AssistantMessage { item_id: item_id.clone(), text });
                }
                Some("tool_use") => {
                    let name = block["name"].as_str().unwrap_or_default().to_owned();
                    let tool = tool_kind(&name);
                    let item_id = ItemId::from(block["id"].as_str().unwrap_or_default());
                    let input = block.get("input").cloned();
                    self.emit(actions, EventKind::ToolStarted { item_id, tool, name, input });
                }
                _ => {}
            }
        }
        if actions.len() == before {
            // Thinking blocks only (their text came as deltas).
            self.other(actions, "assistant".into());
        }
    }

    fn on_user(&mut self, line: &Envelope<'_>, actions: &mut Vec<Action>) {
        let message = line.message.and_then(|m| serde_json::from_str::<wire::Message>(m.get()).ok());
        let before = actions.len();
        if let Some(wire::Message { content: Content::Blocks(blocks), .. }) = &message
            && !line.is_replay
        {
            for block in blocks.iter().filter(|b| b["type"] == "tool_result") {
                let item_id = ItemId::from(block["tool_use_id"].as_str().unwrap_or_default());
                let declined = self.turn.as_ref().is_some_and(|t| t.declined.contains(item_id.as_str()));
                let status = if declined {
                    ToolStatus::Declined
                } else if block["is_error"] == true {
                    ToolStatus::Failed
                } else {
                    ToolStatus::Completed
                };
                let output = wire::tool_result_text(&block["content"]);
                self.emit(actions, EventKind::ToolCompleted { item_id, status, output, exit_code: None });
            }
        }
        if actions.len() == before {
            self.other(actions, "user".into());
        }
    }

    fn on_system(&mut self, text: &str, line: &Envelope<'_>, actions: &mut Vec<Action>) {
        match &*line.subtype {
            "init" => {
                let id = &*line.session_id;
                if !id.is_empty() && self.session_id.as_deref() != Some(id) {
                    self.reported(id, actions);
                    return;
                }
                self.other(actions, "system/init".into());
            }
            "api_retry" => match serde_json::from_str::<wire::ApiRetry>(text) {
                Ok(retry) => self.on_api_retry(retry, actions),
                Err(_) => self.other(actions, "system/api_retry".into()),
            },
            other => self.other(actions, format!("system/{other}")),
        }
    }

    fn on_api_retry(&mut self, retry: wire::ApiRetry, actions: &mut Vec<Action>) {
        let status = retry.error_status.as_ref().filter(|s| !s.is_null()).map(Value::to_string);
        let error = retry.error.as_ref().and_then(Value::as_str).unwrap_or("unknown");
        let attempt = retry.attempt.map_or_else(String::new, |a| format!(" (attempt {a}"))
            + &retry.max_retries.map_or_else(String::new, |m| format!(" of {m}"))
            + if retry.attempt.is_some() { ")" } else { "" };
        let message = match &status {
            Some(status) => format!("model API error {status}: {error}; retrying{attempt}"),
            None => format!("model API error: {error}; retrying{attempt}"),
        };
        self.emit(actions, EventKind::ProviderError { message, code: status, will_retry: Some(true) });
    }

    /// Claude reports session `id`, not the one it was expected in. The provider chose (or
    /// resumed) the ID claude was started with, so another one means claude is not in the
    /// conversation the session holds — on a resume, a fresh one without its history. Nothing
    /// it does there may pass for the session's: the turn fails, claude is ended (the session
    /// becomes unavailable), and the session keeps the ID it holds, for a resume to try again. Without an expected ID, the
    /// reported one is the session's.
    fn reported(&mut self, id: &str, actions: &mut Vec<Action>) {
        match &self.session_id {
            Some(expected) => {
                if self.foreign.is_none() {
                    let reason = format!(
                        "claude reports session `{id}`, not `{expected}` it was started on: it is not in the \
                         session's conversation (its history is not there), so the turn fails and claude is \
                         ended; stop the session and resume it to try again"
                    );
                    self.emit(
                        actions,
                        EventKind::ProviderError { message: reason.clone(), code: None, will_retry: None },
                    );
                    self.foreign = Some(reason);
                }
            }
            None => {
                self.session_id = Some(id.to_owned());
                actions.push(Action::SessionUpdated { session_id: id.to_owned(), raw: None });
            }
        }
    }

    fn on_result(&mut self, result: wire::ResultMessage, actions: &mut Vec<Action>) {
        if let Some(id) = &result.session_id
            && self.session_id.as_deref() != Some(id.as_str())
        {
            self.reported(id, actions);
        }
        self.run = Run::Idle;
        // Cumulative over the process: a run outside a turn is not billed to the next turn.
        let total = result.total_cost_usd.unwrap_or(0.0);
        let cost = (total - self.cost_so_far).max(0.0);
        self.cost_so_far = self.cost_so_far.max(total);
        let Some(turn) = self.turn.take() else {
            // A result outside a turn (a run claude started by itself, or something it finished
            // after the turn ended).
            return self.other(actions, "result".into());
        };
        self.requests.clear();
        let usage = result.usage.map(|u| {
            let mut usage = Usage::default();
            usage.input_tokens = u.input_tokens;
            usage.cached_input_tokens = u.cache_read_input_tokens;
            usage.output_tokens = u.output_tokens;
            usage.total_tokens = match (u.input_tokens, u.output_tokens) {
                (Some(i), Some(o)) => {
                    Some(i + o + u.cache_read_input_tokens.unwrap_or(0) + u.cache_creation_input_tokens.unwrap_or(0))
                }
                _ => None,
            };
            usage.cost_usd = result.total_cost_usd.map(|_| cost);
            usage
        });
        let harness = Some(turn.harness.get().clone());
        if let Some(usage) = usage {
            actions.push(Action::Emit {
                turn: harness.clone(),
                kind: EventKind::UsageUpdated(Box::new(usage)),
                raw: None,
            });
        }
        let aborted = result.terminal_reason.as_deref().is_some_and(|r| r.starts_with("aborted"));
        let status = if !result.is_error {
            TurnStatus::Completed
        } else if turn.interrupted || aborted {
            TurnStatus::Interrupted
        } else {
            TurnStatus::Failed
        };
        let mut end = TurnResult::default();
        end.usage = usage;
        end.details = Some(json!({
            "subtype": result.subtype,
            "terminal_reason": result.terminal_reason,
            "stop_reason": result.stop_reason,
            "num_turns": result.num_turns,
            "duration_ms": result.duration_ms,
            "duration_api_ms": result.duration_api_ms,
            "total_cost_usd": result.total_cost_usd,
            "permission_denials": result.permission_denials,
        }));
        match status {
            TurnStatus::Completed => end.text = result.result,
            _ => {
                let reason = result
                    .result
                    .clone()
                    .filter(|r| !r.is_empty())
                    .or_else(|| result.errors.iter().find_map(|e| e.as_str().map(str::to_owned)))
                    .unwrap_or_else(|| {
                        format!("claude ended the turn with `{}`", result.subtype.as_deref().unwrap_or("an error"))
                    });
                end.reason = Some(if status == TurnStatus::Interrupted { "interrupted".to_owned() } else { reason });
                end.error = Some(json!({
                    "subtype": result.subtype,
                    "api_error_status": result.api_error_status,
                    "errors": result.errors,
                    "result": result.result,
                }));
            }
        }
        let (status, end) = match &self.foreign {
            Some(reason) => {
                let mut failed = TurnResult::default();
                (failed.usage, failed.details, failed.reason) = (end.usage, end.details, Some(reason.clone()));
                (TurnStatus::Failed, failed)
            }
            None => (status, end),
        };
        actions.push(Action::Emit { turn: harness, kind: EventKind::terminal(status, end), raw: None });
        if let Some(reason) = &self.foreign {
            actions.push(Action::Retire { reason: reason.clone() });
        }
    }

    fn on_control_request(&mut self, line: &Envelope<'_>, actions: &mut Vec<Action>) {
        // Without an ID the CLI can match, the answer goes under `""`: nothing else could reach it.
        let id = line.control_id().unwrap_or_else(|| CliRequestId::from(""));
        let request = line.request.and_then(|r| serde_json::from_str::<ToolUseRequest>(r.get()).ok());
        let Some(request) = request else {
            actions.push(Action::Write(wire::control_response(&id, Err("malformed control request".into()))));
            return self.other(actions, "control_request".into());
        };
        if !request.is_tool_use() {
            let error = format!("agent-harness does not handle `{}` control requests", request.subtype);
            actions.push(Action::Write(wire::control_response(&id, Err(error))));
            return self.other(actions, format!("control_request/{}", request.subtype));
        }
        let Some(turn) = self.current() else {
            let deny = json!({"behavior": "deny", "message": "no turn is running"});
            actions.push(Action::Write(wire::control_response(&id, Ok(Some(deny)))));
            return self.other(actions, "control_request/can_use_tool".into());
        };
        let tool = request.tool_name.clone().unwrap_or_default();
        if tool != requests::ASK_USER_QUESTION {
            let input = request.input.clone().unwrap_or(Value::Null);
            let rule = SessionRule::of(&tool, &input);
            if self.rules.contains(&rule) {
                // Allowed for the session by the host earlier (emulated "always allow").
                let mut allow = json!({"behavior": "allow", "updatedInput": input});
                if let Some(tool_use) = &request.tool_use_id {
                    allow["toolUseID"] = json!(tool_use);
                }
                actions.push(Action::Write(wire::control_response(&id, Ok(Some(allow)))));
                return self.other(actions, "control_request/can_use_tool (allowed for the session)".into());
            }
        }
        if self.requests.remove(id.as_str()).is_some() {
            let (deny, message) = reused_request_id("claude", &id);
            actions.push(Action::Write(deny));
            actions.push(Action::Resolved { provider_ref: ProviderRef(id.as_str().to_owned()), raw: None });
            return self.emit(actions, EventKind::Warning { message });
        }
        let (spec, pending) = requests::request_spec(&id, request);
        self.requests.insert(id.as_str().to_owned(), pending);
        actions.push(Action::Request { turn, spec: Box::new(spec), raw: None });
    }

    /// The process is gone: fails the running turn with how it ended.
    pub(crate) fn on_exit(
        &mut self,
        reason: &str,
        exit_status: Option<ExitStatus>,
        stderr_tail: Option<String>,
    ) -> Vec<Action> {
        self.fail_running(reason, exit_status, stderr_tail, EndCause::TransportLost)
    }

    /// The running turn's `result` line could not be read (over the line cap): the turn ends
    /// failed with `reason`, ended by claude, which is waiting for its next prompt.
    pub(crate) fn on_unread_result(&mut self, reason: &str) -> Vec<Action> {
        if std::mem::take(&mut self.run) == Run::Own {
            // The end of a run claude started by itself: the turn waiting behind it goes on.
            return Vec::new();
        }
        self.fail_running(reason, None, None, EndCause::Provider)
    }

    fn fail_running(
        &mut self,
        reason: &str,
        exit_status: Option<ExitStatus>,
        stderr_tail: Option<String>,
        cause: EndCause,
    ) -> Vec<Action> {
        let Some(turn) = self.turn.take() else { return Vec::new() };
        self.requests.clear();
        let mut result = TurnResult::default();
        result.reason = Some(reason.to_owned());
        result.exit_status = exit_status;
        result.stderr_tail = stderr_tail;
        result.ended_by = Some(cause);
        vec![Action::Emit {
            turn: Some(turn.harness.into_inner()),
            kind: EventKind::terminal(TurnStatus::Failed, result),
            raw: None,
        }]
    }
}

/// The tool kind of a Claude Code tool name.
pub(crate) fn tool_kind(name: &str) -> ToolKind {
    match name {
        "Bash" | "BashOutput" | "KillShell" => ToolKind::Command,
        "Write" | "Edit" | "MultiEdit" | "NotebookEdit" => ToolKind::FileChange,
        "WebFetch" | "WebSearch" => ToolKind::Web,
        n if n.starts_with("mcp__") => ToolKind::Mcp,
        _ => ToolKind::Other,
    }
}
