//! Pi RPC frames → [`EventKind`]s and requests. Pure: no I/O, fed one line at a time by the
//! connection's reader (and by the transcript tests).
//!
//! The turn's end is the subtle part (`shared/protocols/pi.md` §7.1, §9):
//! - 1.6.0 marks `agent_end` with `willRetry` and sends a final `agent_settled`, which pi
//!   documents as the idle signal: the turn ends there (a `prompt` sent between `agent_end`
//!   and `agent_settled` could still be refused as "already processing").
//! - 0.75.4 to 0.80.3 mark `agent_end` with `willRetry` but send no `agent_settled` (it came
//!   with 0.80.4): `willRetry: true` awaits the retry's run, `false` is read as 0.73.1's
//!   `agent_end` (below), which it otherwise is. Which release runs is told by the provider
//!   ([`RunEnds`], from the version it probed).
//! - 0.73.1 has neither: `agent_end` ends the turn unless its last assistant message failed,
//!   in which case an `auto_retry_start` may follow. The normalizer then asks for a barrier
//!   (a `get_state` whose response comes after any `auto_retry_start` pi emits for that
//!   `agent_end`); the turn fails at the barrier's response unless a retry started, and a
//!   retry that gives up (`auto_retry_end` with `success: false`) fails it too.
//! - A retry, or a run pi continues the turn with, opens with `agent_start`: the turn is running
//!   again (its tools are asked about, its end awaited anew).
//! - 0.73.1 recovers from a context overflow by compacting and continuing: a failed `agent_end`
//!   followed by `compaction_start` with reason `overflow` waits for `compaction_end`, whose
//!   `willRetry` says whether a run follows (the barrier's response, which comes while pi
//!   compacts, does not end the turn).
//! - Pi compacts before it runs a prompt when the context is over its threshold, and answers
//!   the `prompt` only then, a model request later: a compaction that starts while the `prompt`
//!   waits for its reply admits the turn at once (see [`Normalizer::admitted_early`]); the reply
//!   still comes to the reader ([`Normalizer::prompt_reply`]), and a refusal nobody took then
//!   fails the turn.
//! - A prompt an extension command (or `input` handler) takes runs nothing: 1.6.0 replies
//!   `disposition: "handled"`; 0.73.1 replies as to any prompt, so a `get_state` is sent after
//!   the reply (pi reads it once the prompt's run, if any, began): idle with no `agent_start`
//!   seen ends the turn completed.

use std::collections::HashMap;

use agent_core::event::{FileChangeEntry, RawJson, TextArena, ToolStatus, Usage};
use agent_core::request::RequestSpec;
use agent_core::{EventKind, ItemId, TurnId};
use agent_provider_kit::framing::Unreadable;
use agent_provider_kit::rpc::CliRequestId;
use serde_json::{Value, json};

use crate::extension::DENIED_REASON;
use crate::stream::{self, DeltaKind};

mod dialogs;
mod ending;
mod prompt;
mod values;
mod wire;

use values::{add_usage, stats_usage, text_of, tool_kind, usage_of};
use wire::{Frame, Message};

/// The id prefix of the barrier `get_state` commands (see the module docs).
pub(crate) const BARRIER_PREFIX: &str = "barrier-";
/// The id prefix of the `get_session_stats` commands sent after each turn.
pub(crate) const STATS_PREFIX: &str = "stats-";

/// What the reader does after a frame.
#[derive(Debug)]
pub(crate) enum Action {
    /// Emit an event for `turn` (`None`: a session event).
    Emit { turn: Option<TurnId>, kind: EventKind, raw: Option<RawJson> },
    /// Report a request the agent waits on.
    Request { turn: TurnId, spec: Box<RequestSpec>, raw: Option<RawJson> },
    /// Write this command line to pi (a dismissal, a barrier).
    Write(Value),
}

impl Action {
    /// True for a terminal event.
    pub(crate) fn ends_turn(&self) -> bool {
        matches!(self, Action::Emit { kind, .. } if kind.is_terminal())
    }
}

/// Gives the frame's raw JSON to the actions it produced that take one.
pub(crate) fn attach(actions: &mut [Action], raw: RawJson) {
    let mut raw = Some(raw);
    let slots = actions.iter_mut().filter_map(|a| match a {
        Action::Emit { raw: slot, .. } | Action::Request { raw: slot, .. } if slot.is_none() => Some(slot),
        _ => None,
    });
    let slots: Vec<_> = slots.collect();
    let last = slots.len();
    for (i, slot) in slots.into_iter().enumerate() {
        *slot = if i + 1 == last { raw.take() } else { raw.clone() };
    }
}

/// The raw JSON of a delta: the delta alone, as `{"assistantMessageEvent":{"delta":…,
/// "type":…},"type":"message_update"}` — pi repeats the whole partial message in every update,
/// which the event does not keep. Written directly (not through a `Value`) into a buffer of
/// its exact size, so it is one allocation.
fn delta_raw(kind: DeltaKind, text: &str) -> RawJson {
    const OPEN: &[u8] = br#"{"assistantMessageEvent":{"delta":"#;
    const TYPE: &[u8] = br#","type":""#;
    const CLOSE: &[u8] = br#""},"type":"message_update"}"#;
    let mut json = Vec::with_capacity(OPEN.len() + quoted_len(text) + TYPE.len() + kind.name().len() + CLOSE.len());
    json.extend_from_slice(OPEN);
    // Writing a string into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut json, text);
    json.extend_from_slice(TYPE);
    json.extend_from_slice(kind.name().as_bytes());
    json.extend_from_slice(CLOSE);
    // serde_json writes UTF-8, and so do the literals around it.
    RawJson::parsed(String::from_utf8(json).unwrap_or_default())
}

/// The length of `text` as a JSON string, quotes included, escaped as serde_json escapes it.
fn quoted_len(text: &str) -> usize {
    2 + text
        .bytes()
        .map(|b| match b {
            b'"' | b'\\' | b'\x08' | b'\t' | b'\n' | b'\x0c' | b'\r' => 2,
            0..0x20 => 6,
            _ => 1,
        })
        .sum::<usize>()
}

/// Serde's reading of a delta line, as [`Frame`] takes it, for the fast path's tests: the
/// event's type and text.
#[cfg(test)]
pub(crate) fn serde_delta(line: &str) -> Option<(String, String)> {
    let frame = serde_json::from_str::<Frame<'_>>(line).ok()?;
    let event = frame.assistant_message_event.filter(|_| frame.kind == "message_update")?;
    DeltaKind::of(&event.kind)?;
    Some((event.kind, event.delta?))
}

/// How pi marks the end of an agent run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ending {
    /// Nothing ended yet.
    Running,
    /// 1.6.0: `agent_end` with `willRetry: false` came; `agent_settled` ends the turn.
    Settling,
    /// 0.73.1: a failed `agent_end`; waiting for the barrier with this number.
    Barrier(u64),
    /// 0.73.1: pi is retrying after a failed run.
    Retrying,
    /// Before 0.80.4: a run failed on a context overflow and pi compacts to continue it.
    Compacting,
}

/// A turn pi is running for the harness.
#[derive(Debug)]
struct Running {
    id: TurnId,
    /// `prompt` was accepted.
    admitted: bool,
    ending: Ending,
    /// Text of the last assistant message.
    text: Option<String>,
    stop_reason: Option<String>,
    error: Option<String>,
    usage: Option<Usage>,
    /// Assistant messages so far (item IDs of their deltas).
    messages: u32,
    /// The item ID of assistant message `n` (`<turn>-message-<n>`), made once for all its deltas.
    message_item: Option<(u32, ItemId)>,
    /// `abort` was sent.
    aborting: bool,
    /// Tool calls started and not ended: ID, tool name, arguments.
    tools: Vec<(String, String, Option<Value>)>,
    /// Tool calls whose approval was denied.
    denied: Vec<String>,
    /// Why the turn's reply could not be read (a line that carried it was over the line cap):
    /// the turn then ends failed rather than completed without it.
    unread: Option<String>,
    /// `agent_start` came: pi runs the prompt.
    started: bool,
    /// 0.73.1: the barrier sent after the `prompt` reply, which tells whether a run follows.
    start_barrier: Option<u64>,
    /// The `id` of the turn's `prompt` while its reply has not come.
    prompt: Option<String>,
    /// A compaction started while the `prompt` reply was awaited.
    compacted: bool,
    /// Admitted before the `prompt` reply, because pi compacts first.
    early: bool,
    /// Why pi refused the prompt, when the reply was the reader's to act on (the turn was
    /// admitted early, or its caller stopped waiting).
    refused: Option<String>,
}

/// A dialog pi waits on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Dialog {
    /// The `extension_ui_request` id.
    pub(crate) id: CliRequestId,
    /// `confirm`, `select`, `input` or `editor`.
    pub(crate) method: String,
    pub(crate) turn: TurnId,
    /// The tool call an approval is about.
    pub(crate) tool_call: Option<String>,
}

/// The protocol state of one pi process.
#[derive(Debug, Default)]
pub(crate) struct Normalizer {
    turn: Option<Running>,
    dialogs: HashMap<String, Dialog>,
    /// The reason of the last denied approval, until the gate asks for it.
    deny_reason: Option<String>,
    next_barrier: u64,
    next_stats: u64,
    unknown: u64,
    /// Where deltas' texts are copied to, packed together.
    texts: TextArena,
    /// Steer and follow-up messages pi holds and has not delivered (its last `queue_update`).
    queued: usize,
    /// Pi drops a queue on request (`clear_queue`, pi 0.84.4 and later).
    clears_queue: bool,
    /// Which unreadable stdout lines get a warning.
    unreadable: Unreadable,
    /// `compaction_start` frames read, to wake a `prompt` waiting for its reply.
    compaction_starts: u64,
    /// How this pi marks the end of its runs; `None` when not told (transcript tests).
    run_ends: Option<RunEnds>,
}

/// How a pi release marks the end of its runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RunEnds {
    /// 0.73.1: `agent_end` says nothing of a retry, and nothing follows the last one.
    AgentEnd,
    /// 0.75.4 to 0.80.3: `agent_end` says whether a retry follows (`willRetry`), and nothing
    /// follows the last one.
    MarkedAgentEnd,
    /// 0.80.4 and later: marked `agent_end`s, then `agent_settled`.
    AgentSettled,
}

impl Running {
    /// The item ID of assistant message `n`: pi gives its messages no ID, and counts them per
    /// run, so the turn's ID makes it unique in the session.
    fn message_item(&mut self, n: u32) -> ItemId {
        match &self.message_item {
            Some((made, id)) if *made == n => id.clone(),
            _ => {
                let id = ItemId::from(format!("{}-message-{n}", self.id));
                self.message_item = Some((n, id.clone()));
                id
            }
        }
    }
}

impl Normalizer {
    pub(crate) fn new() -> Self {
        Normalizer::default()
    }

    /// Registers `turn` before its `prompt` is written; errs with the running turn.
    pub(crate) fn begin_turn(&mut self, turn: TurnId) -> Result<(), TurnId> {
        if let Some(running) = &self.turn {
            return Err(running.id.clone());
        }
        // A reason the gate never asked for belongs to the turn that denied.
        self.deny_reason = None;
        self.turn = Some(Running {
            id: turn,
            admitted: false,
            ending: Ending::Running,
            text: None,
            stop_reason: None,
            error: None,
            usage: None,
            messages: 0,
            message_item: None,
            aborting: false,
            tools: Vec::new(),
            denied: Vec::new(),
            unread: None,
            started: false,
            start_barrier: None,
            prompt: None,
            compacted: false,
            early: false,
            refused: None,
        });
        Ok(())
    }

    /// How many `compaction_start` frames were read.
    pub(crate) fn compaction_starts(&self) -> u64 {
        self.compaction_starts
    }

    /// The running harness turn, if any.
    pub(crate) fn running(&self) -> Option<&TurnId> {
        self.turn.as_ref().map(|r| &r.id)
    }

    /// True while `turn` runs.
    pub(crate) fn is_running(&self, turn: &TurnId) -> bool {
        self.turn.as_ref().is_some_and(|r| r.id == *turn)
    }

    /// Says whether this pi drops its queue on request (`clear_queue`).
    pub(crate) fn set_clears_queue(&mut self, clears: bool) {
        self.clears_queue = clears;
    }

    /// Says how this pi marks the end of its runs.
    pub(crate) fn set_run_ends(&mut self, run_ends: RunEnds) {
        self.run_ends = Some(run_ends);
    }

    /// True for a pi that drops its queue on request.
    pub(crate) fn clears_queue(&self) -> bool {
        self.clears_queue
    }

    /// How many steer and follow-up messages pi holds undelivered.
    pub(crate) fn queued(&self) -> usize {
        self.queued
    }

    /// Marks the running turn as being aborted; false when `turn` is not running.
    pub(crate) fn aborting(&mut self, turn: &TurnId) -> bool {
        match self.turn.as_mut().filter(|r| r.id == *turn) {
            Some(running) => {
                running.aborting = true;
                true
            }
            None => false,
        }
    }

    /// Takes the dialog `id` to answer it.
    pub(crate) fn take_dialog(&mut self, id: &str) -> Option<Dialog> {
        self.dialogs.remove(id)
    }

    /// Puts back a dialog whose answer could not be encoded.
    pub(crate) fn restore_dialog(&mut self, dialog: Dialog) {
        self.dialogs.insert(dialog.id.as_str().to_owned(), dialog);
    }

    /// An approval of `tool_call` was denied, for `reason`: its failed result is a decline, and
    /// the gate's question for the reason that follows is answered with it.
    pub(crate) fn denied(&mut self, tool_call: &str, reason: Option<String>) {
        if let Some(running) = self.turn.as_mut() {
            running.denied.push(tool_call.to_owned());
        }
        self.deny_reason = reason;
    }

    /// Frames of types the normalizer does not know.
    pub(crate) fn unknown_frames(&self) -> u64 {
        self.unknown
    }

    /// A line that is not a frame: a warning, when the line gets one (see [`Unreadable`]).
    pub(crate) fn garbage(&mut self, message: String) -> Option<Action> {
        let turn = self.turn.as_ref().map(|running| &running.id);
        let message = self.unreadable.warning(turn, || message)?;
        Some(Action::Emit { turn: turn.cloned(), kind: EventKind::Warning { message }, raw: None })
    }

    /// Normalizes one line; false when it is not a pi frame (not a JSON object with `type`).
    pub(crate) fn on_line(&mut self, line: &str, actions: &mut Vec<Action>) -> bool {
        if let Some(delta) = stream::fast_delta(line) {
            self.on_delta(delta.kind, &delta.text, actions);
            return true;
        }
        match serde_json::from_str::<Frame<'_>>(line) {
            Ok(frame) => self.on_frame(frame, actions),
            Err(_) => return self.on_odd_frame(line, actions),
        }
        true
    }

    /// A JSON object with a `type` whose other fields do not all have the types expected (a
    /// pi newer than this provider, say): the frame without those fields, with a warning
    /// naming them, so that an `agent_settled` still ends the turn and a dialog is still
    /// answered. False when the line is not a JSON object with a string `type`.
    fn on_odd_frame(&mut self, line: &str, actions: &mut Vec<Action>) -> bool {
        let Ok(Value::Object(fields)) = serde_json::from_str::<Value>(line) else { return false };
        let Some(kind) = fields.get("type").and_then(Value::as_str).map(str::to_owned) else { return false };
        let reads = |key: &str, value: &Value| {
            let alone = serde_json::json!({ "type": kind, key: value }).to_string();
            key == "type" || serde_json::from_str::<Frame<'_>>(&alone).is_ok()
        };
        let (kept, left_out): (serde_json::Map<String, Value>, serde_json::Map<String, Value>) =
            fields.into_iter().partition(|(key, value)| reads(key, value));
        let text = Value::Object(kept).to_string();
        let Ok(frame) = serde_json::from_str::<Frame<'_>>(&text) else { return false };
        let names: Vec<&str> = left_out.keys().map(String::as_str).collect();
        let message = format!(
            "pi's `{kind}` frame has fields of types this provider does not expect ({}); they were left out",
            names.join(", ")
        );
        actions.push(self.emit(EventKind::Warning { message }));
        self.on_frame(frame, actions);
        true
    }

    fn turn_id(&self) -> Option<TurnId> {
        self.running().cloned()
    }

    fn emit(&self, kind: EventKind) -> Action {
        Action::Emit { turn: self.turn_id(), kind, raw: None }
    }

    fn provider_event(&self, method: &str) -> Action {
        self.emit(EventKind::ProviderEvent { method: method.to_owned() })
    }

    fn on_frame(&mut self, frame: Frame<'_>, actions: &mut Vec<Action>) {
        match frame.kind {
            "response" => self.on_response(&frame, actions),
            "agent_start" => {
                if let Some(running) = self.turn.as_mut() {
                    running.started = true;
                    // A run of the turn again (a retry, or one pi continues with): its tools are
                    // asked about as the first run's were, and its end is awaited anew.
                    let ended = matches!(running.ending, Ending::Retrying | Ending::Settling | Ending::Barrier(_));
                    if running.aborting && ended {
                        // The run pi starts for the steers it held when the turn was aborted
                        // (0.75.4 to 0.84.3, which cannot drop them and go on with them after
                        // an abort): aborted too.
                        running.ending = Ending::Running;
                        actions.push(Action::Write(json!({"type": "abort"})));
                    } else if matches!(running.ending, Ending::Retrying | Ending::Settling) {
                        running.ending = Ending::Running;
                    }
                }
            }
            "turn_start" | "turn_end" | "message_start" => {}
            "message_update" => self.on_update(&frame, actions),
            "message_end" => self.on_message_end(&frame, actions),
            "tool_execution_start" => self.on_tool_start(frame, actions),
            "tool_execution_update" => {}
            "tool_execution_end" => self.on_tool_end(frame, actions),
            "agent_end" => self.on_agent_end(&frame, actions),
            "agent_settled" => {
                if self.turn.as_ref().is_some_and(|r| r.admitted || r.ending != Ending::Running) {
                    actions.extend(self.finish(None));
                } else {
                    actions.push(self.provider_event("agent_settled"));
                }
            }
            kind @ ("compaction_start" | "auto_compaction_start") => {
                self.compaction_starts += 1;
                if let Some(running) = self.turn.as_mut() {
                    running.compacted |= running.prompt.is_some() && !running.admitted;
                    if matches!(running.ending, Ending::Barrier(_)) && frame.reason.as_deref() == Some("overflow") {
                        // 0.73.1 compacts and continues the run that overflowed. (From 0.75.4
                        // pi awaits the model's credentials before it says so: a barrier's
                        // answer could come first, and the turn end failed as before.)
                        running.ending = Ending::Compacting;
                    }
                }
                actions.push(self.provider_event(kind));
            }
            kind @ ("compaction_end" | "auto_compaction_end") => {
                actions.push(self.provider_event(kind));
                let overflowed = frame.reason.as_deref() == Some("overflow");
                let Some(running) = self.turn.as_mut() else { return };
                match running.ending {
                    Ending::Compacting | Ending::Barrier(_) if overflowed => {
                        if frame.will_retry == Some(true) {
                            running.ending = Ending::Retrying;
                        } else {
                            if let Some(error) = frame.error_message.clone() {
                                running.error = Some(error);
                            }
                            actions.extend(self.finish(None));
                        }
                    }
                    _ => {}
                }
            }
            "auto_retry_start" => {
                if let Some(running) = self.turn.as_mut() {
                    running.ending = Ending::Retrying;
                }
                let message = frame.error_message.clone().unwrap_or_else(|| "the model request failed".into());
                actions.push(self.emit(EventKind::ProviderError { message, code: None, will_retry: Some(true) }));
            }
            "auto_retry_end" => {
                actions.push(self.provider_event("auto_retry_end"));
                let legacy = self.turn.as_ref().is_some_and(|r| r.ending == Ending::Retrying);
                if frame.success == Some(false) && legacy {
                    let error = frame.final_error.clone();
                    if let Some(running) = self.turn.as_mut() {
                        running.stop_reason = Some("error".into());
                        running.error = error.or(running.error.take());
                    }
                    actions.extend(self.finish(None));
                }
            }
            "extension_ui_request" => self.on_dialog(frame, actions),
            "extension_error" => {
                let message = match (&frame.error, &frame.error_message) {
                    (Some(error), _) | (None, Some(error)) => format!("a pi extension failed: {error}"),
                    (None, None) => "a pi extension failed".to_owned(),
                };
                actions.push(self.emit(EventKind::Warning { message }));
            }
            "queue_update" => {
                let held = |list: &Option<Vec<Value>>| list.as_ref().map_or(0, Vec::len);
                self.queued = held(&frame.steering) + held(&frame.follow_up);
                actions.push(self.provider_event("queue_update"));
            }
            "session_info_changed" => actions.push(self.provider_event("session_info_changed")),
            other => {
                self.unknown += 1;
                actions.push(self.provider_event(other));
            }
        }
    }

    /// A response nobody waited for: a barrier's, or a late or id-less one.
    fn on_response(&mut self, frame: &Frame<'_>, actions: &mut Vec<Action>) {
        let barrier = frame
            .id
            .as_ref()
            .and_then(Value::as_str)
            .and_then(|id| id.strip_prefix(BARRIER_PREFIX))
            .and_then(|n| n.parse().ok());
        if let Some(n) = barrier {
            if let Some(running) = self.turn.as_mut().filter(|r| r.start_barrier == Some(n)) {
                running.start_barrier = None;
                let idle = frame.data.as_ref().is_some_and(|data| data["isStreaming"] == false);
                if !running.started && idle {
                    // An extension command (or input handler) took the prompt: nothing runs.
                    actions.extend(self.finish(None));
                }
            } else if self.turn.as_ref().is_some_and(|r| r.ending == Ending::Barrier(n)) {
                actions.extend(self.finish(None));
            }
            return;
        }
        if frame.id.as_ref().and_then(Value::as_str).is_some_and(|id| id.starts_with(STATS_PREFIX)) {
            // The session's totals after a turn: a session-level usage event.
            if let Some(usage) = frame.data.as_ref().and_then(|d| stats_usage(&d["tokens"], &d["cost"])) {
                actions.push(Action::Emit { turn: None, kind: EventKind::UsageUpdated(Box::new(usage)), raw: None });
            }
            return;
        }
        if frame.success == Some(false) {
            let command = frame.command.as_deref().unwrap_or("a command");
            let message = format!("pi refused {command}: {}", frame.error.as_deref().unwrap_or("no reason given"));
            actions.push(self.emit(EventKind::ProviderError { message, code: None, will_retry: None }));
        }
    }

    fn on_update(&mut self, frame: &Frame<'_>, actions: &mut Vec<Action>) {
        let Some(event) = &frame.assistant_message_event else { return };
        let (Some(kind), Some(text)) = (DeltaKind::of(&event.kind), &event.delta) else { return };
        self.on_delta(kind, text, actions);
    }

    /// A streamed delta, from either path.
    fn on_delta(&mut self, kind: DeltaKind, text: &str, actions: &mut Vec<Action>) {
        let Some(running) = self.turn.as_mut() else { return };
        let item_id = Some(running.message_item(running.messages + 1));
        // A copy of the text, not a slice of the read it came in: pi's delta lines carry the
        // whole reply so far, so a slice would keep a read buffer alive per few deltas. The
        // copies are packed into the arena's buffers rather than allocated one by one.
        let raw = Some(delta_raw(kind, text));
        let text = self.texts.keep(text, None);
        let event = match kind {
            DeltaKind::Text => EventKind::MessageDelta { item_id, text },
            DeltaKind::Thinking => EventKind::ReasoningDelta { item_id, text },
        };
        actions.push(Action::Emit { turn: self.turn_id(), kind: event, raw });
    }

    fn on_message_end(&mut self, frame: &Frame<'_>, actions: &mut Vec<Action>) {
        let Some(raw) = frame.message else { return };
        let message = match serde_json::from_str::<Message>(raw.get()) {
            Ok(message) => message,
            Err(error) => {
                let message = format!("pi's `message_end` has a message this provider cannot read ({error})");
                actions.push(self.emit(EventKind::Warning { message }));
                return;
            }
        };
        if message.role != "assistant" {
            return;
        }
        let Some(running) = self.turn.as_mut() else { return };
        running.messages += 1;
        let text = text_of(&message.content);
        if let Some(usage) = message.usage.as_ref().and_then(usage_of) {
            let total = running.usage.get_or_insert_with(Usage::default);
            add_usage(total, &usage);
        }
        running.stop_reason = message.stop_reason.clone();
        running.error = message.error_message.clone();
        let item_id = Some(running.message_item(running.messages));
        if !text.is_empty() {
            running.text = Some(text.clone());
            actions.push(self.emit(EventKind::AssistantMessage { item_id, text }));
        }
    }

    fn on_tool_start(&mut self, frame: Frame<'_>, actions: &mut Vec<Action>) {
        let (Some(id), Some(name)) = (frame.tool_call_id, frame.tool_name) else { return };
        if let Some(running) = self.turn.as_mut() {
            running.tools.push((id.clone(), name.clone(), frame.args.clone()));
        }
        let kind = EventKind::ToolStarted { item_id: id.into(), tool: tool_kind(&name), name, input: frame.args };
        actions.push(self.emit(kind));
    }

    fn on_tool_end(&mut self, frame: Frame<'_>, actions: &mut Vec<Action>) {
        let Some(id) = frame.tool_call_id else { return };
        let name = frame.tool_name.unwrap_or_default();
        let (denied, aborting, args) = match self.turn.as_mut() {
            Some(running) => {
                let position = running.tools.iter().position(|(t, _, _)| *t == id);
                let args = position.and_then(|i| running.tools.remove(i).2);
                (running.denied.contains(&id), running.aborting, args)
            }
            None => (false, false, None),
        };
        let result = frame.result.unwrap_or(Value::Null);
        let output = text_of(&result["content"]);
        let is_error = frame.is_error.unwrap_or(false);
        let status = match (is_error, denied, aborting) {
            (false, _, _) => ToolStatus::Completed,
            (true, true, _) => ToolStatus::Declined,
            (true, false, true) => ToolStatus::Interrupted,
            (true, false, false) if output == DENIED_REASON => ToolStatus::Declined,
            _ => ToolStatus::Failed,
        };
        let exit_code = result["structuredContent"]["exit_code"].as_i64().and_then(|c| i32::try_from(c).ok());
        if status == ToolStatus::Completed && matches!(name.as_str(), "edit" | "write") {
            let path = args.as_ref().and_then(|a| a["path"].as_str()).map(str::to_owned);
            if let Some(path) = path {
                let change = if name == "write" { "add" } else { "update" };
                let diff = result["details"]["diff"].as_str().map(str::to_owned);
                let changes = vec![FileChangeEntry { path, change: change.to_owned(), diff }];
                actions.push(self.emit(EventKind::FileChange { item_id: ItemId::from(id.as_str()), changes }));
            }
        }
        let output = (!output.is_empty()).then_some(output);
        actions.push(self.emit(EventKind::ToolCompleted { item_id: id.into(), status, output, exit_code }));
    }
}

#[cfg(test)]
mod tests;
