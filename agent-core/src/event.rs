//! Ordered, normalized session events.
//!
//! Every provider frame and every lifecycle step becomes an [`Event`]: an envelope with a
//! per-session `seq`, the normalized [`EventKind`] and, where the event came from the CLI, the
//! provider's original JSON in `raw`, kept byte for byte.
//!
//! JSON form (stable; `schema_version` versions the envelope):
//!
//! ```json
//! {"schema_version":1,"id":"evt_…","seq":7,"session_id":"s1","turn_id":"turn_…",
//!  "provider":"codex","at":"2026-11-29T08:00:00.000000Z",
//!  "type":"message_delta","data":{"text":"Hel"},"raw":{…}}
//! ```

use std::fmt;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::ids::{EventId, ItemId, ProviderId, RequestId, SessionId, TurnId};
use crate::request::{Request, Response};
use crate::session::CloseReason;
pub use crate::text::{SharedStr, TextArena, json_escape};
use crate::time::Timestamp;
use crate::turn::{TurnResult, TurnStatus};

/// The version of the event envelope.
pub const SCHEMA_VERSION: u32 = 1;

/// A provider's original JSON, kept verbatim (whitespace included) and serialized as the JSON it
/// is, not as a string.
///
/// [`RawJson::from_string`] checks the text; [`RawJson::parsed`] keeps text the caller has just
/// parsed as JSON — the line a provider deserialized its message from — without a second syntax
/// check on the event path, and [`RawJson::parsed_in`] does the same without copying the text
/// out of the read buffer it lies in. Either way the text is checked again when the event is
/// serialized, so text that is not JSON can only fail a serialization, never produce invalid
/// JSON. Cloning shares the text.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct RawJson(
    /// UTF-8, whichever constructor made it.
    bytes::Bytes,
);

impl RawJson {
    /// Checks that `json` is one JSON value (surrounding whitespace allowed) and keeps it.
    pub fn from_string(json: String) -> Result<RawJson, serde_json::Error> {
        serde_json::from_str::<serde::de::IgnoredAny>(&json)?;
        Ok(RawJson::parsed(json))
    }

    /// Keeps `json` without checking it: the caller has parsed it as JSON already.
    pub fn parsed(json: String) -> RawJson {
        // A boxed slice becomes `Bytes` without a copy or a second allocation.
        RawJson(bytes::Bytes::from(json.into_boxed_str().into_boxed_bytes()))
    }

    /// Keeps `json`, which the caller has parsed as JSON already, as a slice of `chunk` when it
    /// lies in it — the read buffer a line was handed out from: no copy, and the chunk is freed
    /// when the last event that keeps a slice of it is — and as a copy otherwise.
    pub fn parsed_in(json: &str, chunk: &bytes::Bytes) -> RawJson {
        if crate::text::lies_in(json.as_bytes(), chunk) {
            RawJson(chunk.slice_ref(json.as_bytes()))
        } else {
            RawJson::parsed(json.to_owned())
        }
    }

    /// The JSON text.
    pub fn get(&self) -> &str {
        // SAFETY: every constructor keeps UTF-8 — a `String`, a `&str` (copied, or the same
        // bytes sliced from the chunk it lies in) or a `RawValue` — and the bytes are never
        // changed. Checking again on every read cost the stores and subscribers a pass over
        // every line.
        unsafe { std::str::from_utf8_unchecked(&self.0) }
    }

    /// `part` of this JSON's text (a string value it holds verbatim, say) as a slice of it — no
    /// copy — when it lies in it, and as a copy otherwise.
    pub fn share(&self, part: &str) -> SharedStr {
        SharedStr::in_chunk(part, Some(&self.0))
    }

    /// The JSON as a [`RawValue`], checked.
    pub fn as_raw_value(&self) -> Result<&RawValue, serde_json::Error> {
        serde_json::from_str(self.get())
    }
}

impl From<Box<RawValue>> for RawJson {
    fn from(raw: Box<RawValue>) -> Self {
        RawJson::parsed(String::from(Box::<str>::from(raw)))
    }
}

impl fmt::Debug for RawJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("RawJson").field(&self.get()).finish()
    }
}

impl fmt::Display for RawJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.get())
    }
}

impl Serialize for RawJson {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.as_raw_value().map_err(serde::ser::Error::custom)?.serialize(s)
    }
}

impl<'de> Deserialize<'de> for RawJson {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Box::<RawValue>::deserialize(d).map(RawJson::from)
    }
}

/// One observation about a session or turn.
#[derive(Clone)]
#[non_exhaustive]
pub struct Event {
    /// Envelope version ([`SCHEMA_VERSION`]).
    pub schema_version: u32,
    /// Unique event ID.
    pub id: EventId,
    /// Position in the session's event sequence; strictly increasing, starting at 1.
    pub seq: u64,
    /// The session.
    pub session_id: SessionId,
    /// The turn, for turn events; `None` for session events.
    pub turn_id: Option<TurnId>,
    /// The provider.
    pub provider: ProviderId,
    /// When the runtime sequenced it.
    pub at: Timestamp,
    /// What happened.
    pub kind: EventKind,
    /// The provider's original JSON, when the event came from the CLI.
    pub raw: Option<RawJson>,
}

impl Event {
    /// How many bytes of the provider's output the event holds (its raw JSON), as the event
    /// path's byte bounds count them.
    pub(crate) fn raw_len(&self) -> usize {
        self.raw.as_ref().map_or(0, |raw| raw.get().len())
    }

    /// An event from its envelope fields, with `schema_version` [`SCHEMA_VERSION`] (the field is
    /// public to change it): for stores and transports that keep events in a form of their own
    /// and rebuild them on read. The runtime makes the events a session publishes.
    #[allow(clippy::too_many_arguments)] // one per envelope field, in the envelope's order
    pub fn from_parts(
        id: EventId,
        seq: u64,
        session_id: SessionId,
        turn_id: Option<TurnId>,
        provider: ProviderId,
        at: Timestamp,
        kind: EventKind,
        raw: Option<RawJson>,
    ) -> Event {
        Event { schema_version: SCHEMA_VERSION, id, seq, session_id, turn_id, provider, at, kind, raw }
    }

    /// True for the four terminal kinds that end a turn.
    pub fn is_terminal(&self) -> bool {
        self.kind.is_terminal()
    }

    /// The kind's `type` tag, e.g. `"message_delta"`.
    pub fn type_name(&self) -> &'static str {
        self.kind.type_name()
    }
}

impl PartialEq for Event {
    fn eq(&self, other: &Self) -> bool {
        self.schema_version == other.schema_version
            && self.id == other.id
            && self.seq == other.seq
            && self.session_id == other.session_id
            && self.turn_id == other.turn_id
            && self.provider == other.provider
            && self.at == other.at
            && self.kind == other.kind
            && self.raw.as_ref().map(|r| r.get()) == other.raw.as_ref().map(|r| r.get())
    }
}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Event")
            .field("seq", &self.seq)
            .field("session_id", &self.session_id)
            .field("turn_id", &self.turn_id)
            .field("kind", &self.kind)
            .field("raw", &self.raw.as_ref().map(|r| r.get().len()))
            .finish_non_exhaustive()
    }
}

/// Token usage of a turn or a model call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Usage {
    /// Input tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    /// Input tokens served from cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input_tokens: Option<u64>,
    /// Output tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    /// Reasoning tokens (part of output).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
    /// Total tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_tokens: Option<u64>,
    /// Cost in US dollars, where the provider reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

impl Usage {
    /// Usage with input and output token counts.
    pub fn tokens(input: u64, output: u64) -> Self {
        Usage {
            input_tokens: Some(input),
            output_tokens: Some(output),
            total_tokens: Some(input + output),
            ..Usage::default()
        }
    }
}

/// What kind of tool an item is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ToolKind {
    /// A shell command.
    Command,
    /// A file edit or patch.
    FileChange,
    /// An MCP tool call.
    Mcp,
    /// Web search or fetch.
    Web,
    /// Anything else.
    Other,
}

/// How a tool item ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ToolStatus {
    /// It ran and succeeded.
    Completed,
    /// It ran and failed.
    Failed,
    /// The user or policy refused it.
    Declined,
    /// The turn ended before it finished.
    Interrupted,
}

/// One changed file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileChangeEntry {
    /// The file.
    pub path: String,
    /// `add`, `delete`, `update` or `move`.
    pub change: String,
    /// Unified diff or new content, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
}

/// One step of an agent's plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanStep {
    /// What the step does.
    pub step: String,
    /// `pending`, `in_progress` or `completed`.
    pub status: String,
}

/// What happened. Serialized as `"type"` (snake_case) plus `"data"`.
///
/// The vocabulary grows as CLIs add features; match the kinds you need and keep a catch-all arm.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "data", rename_all = "snake_case")]
#[non_exhaustive]
pub enum EventKind {
    // ----- core lifecycle ---------------------------------------------------------------
    /// The provider runtime opened.
    SessionReady {
        /// The provider's own session/thread ID, once known.
        provider_session_id: Option<String>,
    },
    /// Provider identity or other session metadata changed.
    SessionUpdated {
        /// The provider's session/thread ID.
        provider_session_id: Option<String>,
    },
    /// The provider accepted the turn.
    TurnStarted {
        /// The provider's own turn ID, if it has one.
        provider_turn_id: Option<String>,
    },
    /// The agent is waiting on a question or approval.
    RequestCreated(Box<Request>),
    /// The harness delivered one response and the provider acknowledged it.
    RequestResolved {
        /// The request.
        request_id: RequestId,
        /// The response that was delivered.
        response: Box<Response>,
    },
    /// The request can no longer be answered.
    RequestExpired {
        /// The request.
        request_id: RequestId,
        /// Why.
        reason: ExpiryReason,
    },
    /// Cancellation was recorded and at most one provider command scheduled.
    CancelRequested {
        /// The caller's reason, if any.
        reason: Option<String>,
    },
    /// The turn finished successfully.
    TurnCompleted(Box<TurnEnd>),
    /// The turn failed (provider error, rejected admission, process exit without a result, …).
    TurnFailed(Box<TurnEnd>),
    /// The provider reported the turn cancelled.
    TurnCancelled(Box<TurnEnd>),
    /// The turn was interrupted (provider interrupt or forced stop).
    TurnInterrupted(Box<TurnEnd>),
    /// The provider transport became unusable.
    TransportError {
        /// What happened.
        reason: String,
    },
    /// A store write failed.
    StoreFailed {
        /// The store's error.
        reason: String,
        /// What the session did about it: `degrade` or `stop`.
        policy: crate::options::StoreFailurePolicy,
    },
    /// The harness closed the session.
    SessionClosed {
        /// Why.
        reason: CloseReason,
    },
    /// The session continues an earlier provider conversation (follows `session_ready`).
    ConversationResumed {
        /// The provider conversation that continues.
        provider_session_id: String,
    },
    /// The session branched an earlier provider conversation into a new one (follows
    /// `session_ready`).
    ConversationForked {
        /// The provider conversation it branched from.
        from_provider_session_id: String,
        /// The stored session it branched from, when named by session.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        from_session: Option<SessionId>,
    },
    /// A resume or fork of this session's conversation was asked for and could not be done;
    /// nothing was started. Recorded in the stored history of the session that was to be resumed.
    ConversationFailed {
        /// Resume or fork.
        mode: crate::options::ConversationMode,
        /// The provider conversation it was to continue, when known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        provider_session_id: Option<String>,
        /// Why it failed.
        reason: String,
    },

    // ----- provider content -------------------------------------------------------------
    /// A piece of assistant text.
    MessageDelta {
        /// Provider item ID.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        item_id: Option<ItemId>,
        /// The text (often a slice of the line it came in: see [`SharedStr`]).
        text: SharedStr,
    },
    /// A complete assistant message.
    AssistantMessage {
        /// Provider item ID.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        item_id: Option<ItemId>,
        /// The text.
        text: String,
    },
    /// A piece of reasoning text.
    ReasoningDelta {
        /// Provider item ID.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        item_id: Option<ItemId>,
        /// The text (often a slice of the line it came in: see [`SharedStr`]).
        text: SharedStr,
    },
    /// A tool started.
    ToolStarted {
        /// Provider item ID.
        item_id: ItemId,
        /// Tool kind.
        tool: ToolKind,
        /// Tool name (`exec_command`, `Bash`, an MCP tool, …).
        name: String,
        /// The tool's input (command line, arguments).
        #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::json_null::deserialize")]
        input: Option<Value>,
    },
    /// A tool reported progress.
    ToolProgress {
        /// Provider item ID.
        item_id: ItemId,
        /// Progress message.
        message: String,
    },
    /// A tool finished.
    ToolCompleted {
        /// Provider item ID.
        item_id: ItemId,
        /// How it ended.
        status: ToolStatus,
        /// Its output, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        output: Option<String>,
        /// A command's exit code.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
    },
    /// Output of a running command.
    CommandOutputDelta {
        /// Provider item ID.
        item_id: ItemId,
        /// The bytes, as lossy UTF-8 (often a slice of the line it came in: see [`SharedStr`]).
        text: SharedStr,
    },
    /// Files changed (or are proposed to change).
    FileChange {
        /// Provider item ID.
        item_id: ItemId,
        /// The files.
        changes: Vec<FileChangeEntry>,
    },
    /// The agent's plan changed.
    PlanUpdated {
        /// Explanation, if given.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        explanation: Option<String>,
        /// The steps.
        steps: Vec<PlanStep>,
    },
    /// Token usage changed.
    UsageUpdated(Box<Usage>),
    /// Rate-limit information.
    RateLimit {
        /// The provider's rate-limit fields.
        info: Value,
    },
    /// A non-fatal warning.
    Warning {
        /// The message.
        message: String,
    },
    /// An error the provider reported (the turn may still continue).
    ProviderError {
        /// The message.
        message: String,
        /// Provider error code or category.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        code: Option<String>,
        /// Whether the provider will retry by itself.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        will_retry: Option<bool>,
    },
    /// A provider frame that is not normalized (yet); `raw` holds it.
    ProviderEvent {
        /// The provider's method or message type.
        method: String,
    },
}

/// Data of the four terminal events.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TurnEnd {
    /// `completed`, `failed`, `cancelled` or `interrupted`.
    pub status: TurnStatus,
    /// The provider's result.
    pub result: TurnResult,
}

impl TurnEnd {
    /// A terminal payload.
    pub fn new(status: TurnStatus, result: TurnResult) -> Self {
        TurnEnd { status, result }
    }
}

/// Why a request expired.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ExpiryReason {
    /// Its turn ended.
    TurnEnded,
    /// Its turn is being cancelled.
    Cancelled,
    /// The provider resolved it by itself.
    ProviderResolved,
    /// Its timeout elapsed; the provider was told to deny it.
    Timeout,
    /// The session closed.
    SessionClosed,
}

impl EventKind {
    /// A terminal kind for `status` carrying `result`.
    pub fn terminal(status: TurnStatus, result: TurnResult) -> Self {
        let end = Box::new(TurnEnd::new(status, result));
        match status {
            TurnStatus::Completed => EventKind::TurnCompleted(end),
            TurnStatus::Cancelled => EventKind::TurnCancelled(end),
            TurnStatus::Interrupted => EventKind::TurnInterrupted(end),
            _ => EventKind::TurnFailed(Box::new(TurnEnd { status: TurnStatus::Failed, ..*end })),
        }
    }

    /// True for the four terminal kinds.
    pub fn is_terminal(&self) -> bool {
        self.terminal_end().is_some()
    }

    /// The terminal payload of a terminal kind, to change.
    pub(crate) fn terminal_end_mut(&mut self) -> Option<&mut TurnEnd> {
        match self {
            EventKind::TurnCompleted(end)
            | EventKind::TurnFailed(end)
            | EventKind::TurnCancelled(end)
            | EventKind::TurnInterrupted(end) => Some(end),
            _ => None,
        }
    }

    /// The terminal payload of a terminal kind.
    pub fn terminal_end(&self) -> Option<&TurnEnd> {
        match self {
            EventKind::TurnCompleted(end)
            | EventKind::TurnFailed(end)
            | EventKind::TurnCancelled(end)
            | EventKind::TurnInterrupted(end) => Some(end),
            _ => None,
        }
    }

    /// The `type` tag.
    pub fn type_name(&self) -> &'static str {
        match self {
            EventKind::SessionReady { .. } => "session_ready",
            EventKind::SessionUpdated { .. } => "session_updated",
            EventKind::TurnStarted { .. } => "turn_started",
            EventKind::RequestCreated(_) => "request_created",
            EventKind::RequestResolved { .. } => "request_resolved",
            EventKind::RequestExpired { .. } => "request_expired",
            EventKind::CancelRequested { .. } => "cancel_requested",
            EventKind::TurnCompleted(_) => "turn_completed",
            EventKind::TurnFailed(_) => "turn_failed",
            EventKind::TurnCancelled(_) => "turn_cancelled",
            EventKind::TurnInterrupted(_) => "turn_interrupted",
            EventKind::TransportError { .. } => "transport_error",
            EventKind::StoreFailed { .. } => "store_failed",
            EventKind::SessionClosed { .. } => "session_closed",
            EventKind::ConversationResumed { .. } => "conversation_resumed",
            EventKind::ConversationForked { .. } => "conversation_forked",
            EventKind::ConversationFailed { .. } => "conversation_failed",
            EventKind::MessageDelta { .. } => "message_delta",
            EventKind::AssistantMessage { .. } => "assistant_message",
            EventKind::ReasoningDelta { .. } => "reasoning_delta",
            EventKind::ToolStarted { .. } => "tool_started",
            EventKind::ToolProgress { .. } => "tool_progress",
            EventKind::ToolCompleted { .. } => "tool_completed",
            EventKind::CommandOutputDelta { .. } => "command_output_delta",
            EventKind::FileChange { .. } => "file_change",
            EventKind::PlanUpdated { .. } => "plan_updated",
            EventKind::UsageUpdated(_) => "usage_updated",
            EventKind::RateLimit { .. } => "rate_limit",
            EventKind::Warning { .. } => "warning",
            EventKind::ProviderError { .. } => "provider_error",
            EventKind::ProviderEvent { .. } => "provider_event",
        }
    }
}

// The envelope's JSON puts `type`/`data` beside the other fields. `#[serde(flatten)]` would
// buffer the map and break `RawValue`, so both directions are written out.

impl Serialize for Event {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;

        #[derive(Serialize)]
        struct Tagged<'a> {
            #[serde(flatten)]
            kind: &'a EventKind,
        }
        // Serialize the kind as its adjacently tagged form and copy its two entries.
        let tagged = serde_json::to_value(Tagged { kind: &self.kind }).map_err(serde::ser::Error::custom)?;
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("schema_version", &self.schema_version)?;
        map.serialize_entry("id", &self.id)?;
        map.serialize_entry("seq", &self.seq)?;
        map.serialize_entry("session_id", &self.session_id)?;
        map.serialize_entry("turn_id", &self.turn_id)?;
        map.serialize_entry("provider", &self.provider)?;
        map.serialize_entry("at", &self.at)?;
        map.serialize_entry("type", &tagged["type"])?;
        if let Some(data) = tagged.get("data") {
            map.serialize_entry("data", data)?;
        }
        map.serialize_entry("raw", &self.raw)?;
        map.end()
    }
}

impl<'de> Deserialize<'de> for Event {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Wire {
            schema_version: u32,
            id: EventId,
            seq: u64,
            session_id: SessionId,
            turn_id: Option<TurnId>,
            provider: ProviderId,
            at: Timestamp,
            #[serde(rename = "type")]
            ty: String,
            #[serde(default)]
            data: Option<Value>,
            #[serde(default)]
            raw: Option<RawJson>,
        }
        let wire = Wire::deserialize(d)?;
        let mut tagged = serde_json::Map::with_capacity(2);
        tagged.insert("type".into(), Value::String(wire.ty));
        if let Some(data) = wire.data {
            tagged.insert("data".into(), data);
        }
        let kind = EventKind::deserialize(Value::Object(tagged)).map_err(D::Error::custom)?;
        Ok(Event {
            schema_version: wire.schema_version,
            id: wire.id,
            seq: wire.seq,
            session_id: wire.session_id,
            turn_id: wire.turn_id,
            provider: wire.provider,
            at: wire.at,
            kind,
            raw: wire.raw,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: EventKind, raw: Option<&str>) -> Event {
        Event {
            schema_version: SCHEMA_VERSION,
            id: EventId::from_string("evt_1"),
            seq: 7,
            session_id: SessionId::new("s1").unwrap(),
            turn_id: Some(TurnId::from_string("turn_1")),
            provider: ProviderId::new("codex"),
            at: Timestamp::from_unix_micros(0),
            kind,
            raw: raw.map(|r| RawJson::from_string(r.to_owned()).unwrap()),
        }
    }

    #[track_caller]
    fn check(kind: EventKind, expected: Value) {
        let raw = r#"{"method":"x","params":{ "spaced" : true }}"#;
        let e = event(kind, Some(raw));
        let text = serde_json::to_string(&e).unwrap();
        // Raw JSON is kept byte for byte, whitespace included.
        assert!(text.contains(raw), "{text}");
        let json: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(json["type"], expected["type"]);
        assert_eq!(json.get("data"), expected.get("data"));
        assert_eq!(json["seq"], 7);
        assert_eq!(json["at"], "1970-01-01T00:00:00.000000Z");
        let back: Event = serde_json::from_str(&text).unwrap();
        assert_eq!(back, e);
    }

    #[test]
    fn stable_json_for_representative_kinds() {
        check(
            EventKind::MessageDelta { item_id: None, text: "Hel".into() },
            serde_json::json!({"type": "message_delta", "data": {"text": "Hel"}}),
        );
        check(
            EventKind::TurnStarted { provider_turn_id: Some("t".into()) },
            serde_json::json!({"type": "turn_started", "data": {"provider_turn_id": "t"}}),
        );
        check(
            EventKind::UsageUpdated(Box::new(Usage::tokens(10, 5))),
            serde_json::json!({"type": "usage_updated", "data": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}}),
        );
        check(
            EventKind::terminal(TurnStatus::Completed, TurnResult { text: Some("hi".into()), ..Default::default() }),
            serde_json::json!({"type": "turn_completed", "data": {"status": "completed", "result": {"text": "hi"}}}),
        );
        check(
            EventKind::ProviderEvent { method: "thread/unknown".into() },
            serde_json::json!({"type": "provider_event", "data": {"method": "thread/unknown"}}),
        );
    }

    #[test]
    fn every_kind_names_its_type() {
        let kinds = [
            EventKind::SessionReady { provider_session_id: None },
            EventKind::CancelRequested { reason: None },
            EventKind::Warning { message: "w".into() },
            EventKind::terminal(TurnStatus::Interrupted, TurnResult::default()),
        ];
        for kind in kinds {
            let json = serde_json::to_value(event(kind.clone(), None)).unwrap();
            assert_eq!(json["type"], kind.type_name());
        }
    }
}

#[cfg(test)]
mod raw {
    use super::RawJson;

    /// Text inside the chunk is kept as a slice of it; anything else is copied. Either way two
    /// raws with the same text are equal.
    #[test]
    fn parsed_in_shares_the_chunk_it_lies_in() {
        let chunk = bytes::Bytes::from_static(b"{\"a\":1}\n{\"b\":2}\n");
        let line = std::str::from_utf8(&chunk[8..15]).unwrap();
        let kept = RawJson::parsed_in(line, &chunk);
        assert_eq!(kept.get(), r#"{"b":2}"#);
        assert_eq!(kept.get().as_ptr(), line.as_ptr(), "the chunk's bytes, not a copy");

        let elsewhere = String::from(r#"{"b":2}"#);
        let copied = RawJson::parsed_in(&elsewhere, &chunk);
        assert_ne!(copied.get().as_ptr(), elsewhere.as_ptr());
        assert_eq!(copied, kept);
        assert_eq!(RawJson::parsed_in("", &chunk).get(), "");
    }
}

#[cfg(test)]
mod size {
    /// Events move through channels by value; rare, large payloads are boxed to keep it small.
    #[test]
    fn event_kind_stays_small() {
        assert!(std::mem::size_of::<super::EventKind>() <= 104, "{}", std::mem::size_of::<super::EventKind>());
    }
}
