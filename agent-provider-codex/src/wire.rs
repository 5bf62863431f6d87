//! The codex app-server wire format: tolerant private types, parsed one line at a time.
//!
//! Lines are JSON-RPC 2.0 without the `jsonrpc` field. Every type here ignores unknown fields
//! and treats missing optional fields as absent, so additive protocol changes never break
//! parsing. A message that does not fit its method's shape is kept as an unnormalized frame.

use std::borrow::Cow;
use std::fmt;

use agent_core::ItemId;
use agent_provider_kit::framing::is_not_json;
use serde::de::DeserializeOwned;
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

mod requests;
mod stream;

pub(crate) use requests::{CommandApproval, FileApproval, ServerRequest, UserQuestion};

/// Server notifications codex 0.171.0 declares (sorted for binary search). Methods outside
/// this list are counted as unknown: they signal protocol drift.
pub(crate) const KNOWN_NOTIFICATIONS: &[&str] = &[
    "account/gatewayOAuth/changed",
    "account/login/completed",
    "account/rateLimits/updated",
    "account/updated",
    "app/list/updated",
    "autoApprovalReview/strictReviewRequired",
    "command/exec/outputDelta",
    "configWarning",
    "deprecationNotice",
    "error",
    "externalAgentConfig/import/completed",
    "externalAgentConfig/import/progress",
    "fs/changed",
    "fuzzyFileSearch/sessionCompleted",
    "fuzzyFileSearch/sessionUpdated",
    "guardianWarning",
    "hook/completed",
    "hook/started",
    "item/agentMessage/delta",
    "item/autoApprovalReview/completed",
    "item/autoApprovalReview/started",
    "item/commandExecution/outputDelta",
    "item/commandExecution/terminalInteraction",
    "item/completed",
    "item/fileChange/outputDelta",
    "item/fileChange/patchUpdated",
    "item/mcpToolCall/progress",
    "item/plan/delta",
    "item/reasoning/summaryPartAdded",
    "item/reasoning/summaryTextDelta",
    "item/reasoning/textDelta",
    "item/started",
    "mcpServer/event/stream/notification",
    "mcpServer/oauthLogin/completed",
    "mcpServer/startupStatus/updated",
    "model/rerouted",
    "model/safetyBuffering/updated",
    "model/verification",
    "modelProvider/authRecoveryCompleted",
    "modelProvider/authRecoveryStarted",
    "process/exited",
    "process/outputDelta",
    "project/changed",
    "remoteControl/status/changed",
    "serverRequest/resolved",
    "skills/changed",
    "thread/archived",
    "thread/attachment/updated",
    "thread/closed",
    "thread/compacted",
    "thread/deleted",
    "thread/environment/connected",
    "thread/environment/disconnected",
    "thread/goal/cleared",
    "thread/goal/updated",
    "thread/name/updated",
    "thread/prediction/updated",
    "thread/project/updated",
    "thread/queue/changed",
    "thread/readState/changed",
    "thread/realtime/closed",
    "thread/realtime/error",
    "thread/realtime/item/completed",
    "thread/realtime/item/started",
    "thread/realtime/item/transcript/delta",
    "thread/realtime/itemAdded",
    "thread/realtime/outputAudio/delta",
    "thread/realtime/sdp",
    "thread/realtime/started",
    "thread/realtime/transcript/delta",
    "thread/realtime/transcript/done",
    "thread/reverted",
    "thread/search/partial",
    "thread/section/changed",
    "thread/settings/updated",
    "thread/started",
    "thread/status/changed",
    "thread/tokenUsage/updated",
    "thread/unarchived",
    "turn/completed",
    "turn/diff/updated",
    "turn/moderationMetadata",
    "turn/plan/updated",
    "turn/started",
    "warning",
    "windows/worldWritableWarning",
    "windowsSandbox/setupCompleted",
];

/// A JSON-RPC request ID: codex uses integers, the protocol allows strings.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub(crate) enum RpcId {
    Num(i64),
    Str(String),
}

impl RpcId {
    /// The opaque provider reference of a server request: the ID's JSON text (`0`, `"abc"`).
    pub(crate) fn to_ref(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

impl fmt::Display for RpcId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_ref())
    }
}

/// A JSON-RPC error object.
#[derive(Clone, Debug, Deserialize)]
pub(crate) struct RpcError {
    #[serde(default)]
    pub(crate) code: i64,
    #[serde(default)]
    pub(crate) message: String,
}

impl RpcError {
    /// An `error` member of any shape. An `error` says codex did not act whatever it holds, so
    /// one that is not the JSON-RPC object is kept as its message (the kit's
    /// [`error_text`](agent_provider_kit::rpc::error_text)) with code 0, rather than read as a
    /// broken connection.
    pub(crate) fn lenient(raw: &RawValue) -> RpcError {
        // Only an object: serde would read a struct from an array too.
        let object = raw.get().starts_with('{').then(|| serde_json::from_str(raw.get()).ok()).flatten();
        object.unwrap_or_else(|| {
            let text = agent_provider_kit::rpc::error_text(&mut serde_json::Deserializer::from_str(raw.get()));
            RpcError { code: 0, message: text.ok().flatten().unwrap_or_default() }
        })
    }
}

/// A response line as a caller first reads it: whether codex answered with a result (`null`
/// included: a method with nothing to return) or with an error (of any shape).
#[derive(Deserialize)]
pub(crate) struct Outcome<'a> {
    /// `Some` whenever the member is there, `null` too.
    #[serde(default, borrow, deserialize_with = "present")]
    pub(crate) result: Option<&'a RawValue>,
    /// `None` when absent or `null`.
    #[serde(default, borrow)]
    pub(crate) error: Option<&'a RawValue>,
}

fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(default, borrow)]
    id: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "borrowed_opt")]
    method: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    params: Option<&'a RawValue>,
}

/// A string borrowed from the line unless it holds an escape (serde's own `Cow` impl always
/// copies).
struct BorrowedStr<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for BorrowedStr<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = BorrowedStr<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(BorrowedStr(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(BorrowedStr(Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(Visit)
    }
}

fn borrowed<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Cow<'de, str>, D::Error> {
    Ok(BorrowedStr::deserialize(d)?.0)
}

fn borrowed_opt<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Cow<'de, str>>, D::Error> {
    Ok(Option::<BorrowedStr<'de>>::deserialize(d)?.map(|s| s.0))
}

/// One parsed line, borrowing from it.
#[derive(Debug)]
pub(crate) enum Message<'a> {
    /// A response to one of our requests; the caller parses it from the raw line.
    Response { id: RpcId },
    /// A notification.
    Notification(Notification<'a>),
    /// A request from codex that waits for our answer.
    Request { id: RpcId, request: Box<ServerRequest> },
    /// JSON that is not a JSON-RPC message.
    Unrecognized,
}

/// A stdout line that is not JSON.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct NotJson;

/// [`parse_in`] with a `String` of its own for an escaped delta text.
#[cfg(test)]
pub(crate) fn parse(line: &str) -> Result<Message<'_>, NotJson> {
    parse_with(line, None)
}

/// Parses one line into a message, borrowing from it. The envelope's parse reads the whole line
/// (fields it does not know are skipped, which checks them), so a message means the line is
/// JSON: the reader keeps it as the event's raw JSON without a second syntax check. A streamed
/// delta's text that codex wrote with escapes is decoded into `scratch` (see
/// [`Scanner::string_in`](agent_provider_kit::scan::Scanner::string_in)): the reader copies it
/// into its arena, so one buffer serves every line where a `String` each cost an allocation
/// and a free.
pub(crate) fn parse_in<'a>(line: &'a str, scratch: &'a mut String) -> Result<Message<'a>, NotJson> {
    parse_with(line, Some(scratch))
}

fn parse_with<'a>(line: &'a str, scratch: Option<&'a mut String>) -> Result<Message<'a>, NotJson> {
    if let Some(note) = stream::fast_delta(line, scratch) {
        return Ok(Message::Notification(note));
    }
    let envelope = match serde_json::from_str::<Envelope<'_>>(line) {
        Ok(envelope) => envelope,
        // JSON of another shape stops the parse early: the rest is checked before keeping it.
        Err(error) if !is_not_json(&error) && serde_json::from_str::<IgnoredAny>(line).is_ok() => {
            return Ok(Message::Unrecognized);
        }
        Err(_) => return Err(NotJson),
    };
    let id = envelope.id.and_then(|raw| serde_json::from_str::<RpcId>(raw.get()).ok());
    Ok(match (id, envelope.method) {
        (Some(id), None) => Message::Response { id },
        (None, Some(method)) => Message::Notification(Notification::parse(&method, envelope.params)),
        (Some(id), Some(method)) => {
            Message::Request { id, request: Box::new(ServerRequest::parse(&method, envelope.params)) }
        }
        (None, None) => Message::Unrecognized,
    })
}

fn params<T: DeserializeOwned>(params: Option<&RawValue>) -> Option<T> {
    serde_json::from_str(params.map_or("{}", RawValue::get)).ok()
}

/// [`params`] for a type that borrows from the line.
fn borrowed_params<'a, T: Deserialize<'a>>(params: Option<&'a RawValue>) -> Option<T> {
    serde_json::from_str(params.map_or("{}", RawValue::get)).ok()
}

/// The thread and turn a frame belongs to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Ids {
    #[serde(default)]
    pub(crate) thread_id: Option<String>,
    #[serde(default)]
    pub(crate) turn_id: Option<String>,
}

impl Ids {
    /// Borrowed form, for routing.
    pub(crate) fn as_ref(&self) -> IdRef<'_> {
        IdRef { thread: self.thread_id.as_deref(), turn: self.turn_id.as_deref() }
    }
}

/// The thread and turn a frame names, borrowed.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct IdRef<'a> {
    pub(crate) thread: Option<&'a str>,
    pub(crate) turn: Option<&'a str>,
}

/// A streamed text piece of an item. The hottest message: no flattening, so serde parses it
/// without buffering.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Delta<'a> {
    /// Borrowed from the line (owned only when codex escaped a character): the IDs only
    /// route the delta, so a streamed delta allocates just the two strings its event keeps.
    #[serde(default, borrow, deserialize_with = "borrowed_opt")]
    pub(crate) thread_id: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "borrowed_opt")]
    pub(crate) turn_id: Option<Cow<'a, str>>,
    /// Borrowed too: the event shares its open item's [`ItemId`].
    #[serde(borrow, deserialize_with = "borrowed")]
    pub(crate) item_id: Cow<'a, str>,
    /// Borrowed too: the event's text is a slice of the read the line came in.
    #[serde(borrow, deserialize_with = "borrowed")]
    pub(crate) delta: Cow<'a, str>,
}

impl Delta<'_> {
    /// The thread and turn.
    pub(crate) fn ids(&self) -> IdRef<'_> {
        IdRef { thread: self.thread_id.as_deref(), turn: self.turn_id.as_deref() }
    }
}

/// `item/started` and `item/completed`.
#[derive(Debug, Deserialize)]
pub(crate) struct ItemNote {
    #[serde(flatten)]
    pub(crate) ids: Ids,
    pub(crate) item: Item,
}

/// A thread item, flattened: each `type` fills the fields it has.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Item {
    #[serde(rename = "type")]
    pub(crate) kind: String,
    pub(crate) id: ItemId,
    #[serde(default)]
    pub(crate) text: Option<String>,
    #[serde(default)]
    pub(crate) command: Option<String>,
    #[serde(default)]
    pub(crate) cwd: Option<String>,
    #[serde(default)]
    pub(crate) status: Option<String>,
    #[serde(default)]
    pub(crate) aggregated_output: Option<String>,
    #[serde(default)]
    pub(crate) exit_code: Option<i64>,
    #[serde(default)]
    pub(crate) changes: Option<Vec<Change>>,
    #[serde(default)]
    pub(crate) summary: Option<Vec<Value>>,
    #[serde(default)]
    pub(crate) content: Option<Value>,
    #[serde(default)]
    pub(crate) server: Option<String>,
    #[serde(default)]
    pub(crate) tool: Option<String>,
    #[serde(default)]
    pub(crate) arguments: Option<Value>,
    #[serde(default)]
    pub(crate) result: Option<Value>,
    #[serde(default)]
    pub(crate) error: Option<Value>,
    #[serde(default)]
    pub(crate) query: Option<String>,
    #[serde(default)]
    pub(crate) path: Option<String>,
}

/// One file of a `fileChange` item.
#[derive(Clone, Debug, Deserialize)]
pub(crate) struct Change {
    pub(crate) path: String,
    #[serde(default)]
    pub(crate) kind: ChangeKind,
    #[serde(default)]
    pub(crate) diff: Option<String>,
}

/// `{"type":"add"|"delete"|"update","move_path":..}`.
#[derive(Clone, Debug, Default, Deserialize)]
pub(crate) struct ChangeKind {
    #[serde(rename = "type", default)]
    pub(crate) kind: String,
    #[serde(default)]
    pub(crate) move_path: Option<String>,
}

/// `item/fileChange/patchUpdated`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PatchUpdated {
    #[serde(flatten)]
    pub(crate) ids: Ids,
    pub(crate) item_id: ItemId,
    pub(crate) changes: Vec<Change>,
}

/// `item/mcpToolCall/progress`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Progress {
    #[serde(flatten)]
    pub(crate) ids: Ids,
    pub(crate) item_id: ItemId,
    pub(crate) message: String,
}

/// `turn/plan/updated`.
#[derive(Debug, Deserialize)]
pub(crate) struct PlanUpdated {
    #[serde(flatten)]
    pub(crate) ids: Ids,
    #[serde(default)]
    pub(crate) explanation: Option<String>,
    pub(crate) plan: Vec<PlanStep>,
}

/// One plan step.
#[derive(Debug, Deserialize)]
pub(crate) struct PlanStep {
    pub(crate) step: String,
    pub(crate) status: String,
}

/// `turn/diff/updated`.
#[derive(Debug, Deserialize)]
pub(crate) struct TurnDiff {
    #[serde(flatten)]
    pub(crate) ids: Ids,
    pub(crate) diff: String,
}

/// `thread/tokenUsage/updated`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TokenUsageNote {
    #[serde(flatten)]
    pub(crate) ids: Ids,
    pub(crate) token_usage: TokenUsage,
}

/// Thread token totals and the last model call.
#[derive(Debug, Deserialize)]
pub(crate) struct TokenUsage {
    pub(crate) total: Tokens,
    #[serde(default)]
    pub(crate) last: Option<Tokens>,
}

/// Token counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Tokens {
    #[serde(default, deserialize_with = "count")]
    pub(crate) total_tokens: u64,
    #[serde(default, deserialize_with = "count")]
    pub(crate) input_tokens: u64,
    #[serde(default, deserialize_with = "count")]
    pub(crate) cached_input_tokens: u64,
    #[serde(default, deserialize_with = "count")]
    pub(crate) output_tokens: u64,
    #[serde(default, deserialize_with = "count")]
    pub(crate) reasoning_output_tokens: u64,
}

/// A token count, `null` read as none counted: one counter a newer codex leaves `null` must not
/// lose the whole turn's usage.
fn count<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    Ok(Option::<u64>::deserialize(deserializer)?.unwrap_or(0))
}

impl Tokens {
    /// `self - base`, field by field, never below zero.
    pub(crate) fn since(self, base: Tokens) -> Tokens {
        Tokens {
            total_tokens: self.total_tokens.saturating_sub(base.total_tokens),
            input_tokens: self.input_tokens.saturating_sub(base.input_tokens),
            cached_input_tokens: self.cached_input_tokens.saturating_sub(base.cached_input_tokens),
            output_tokens: self.output_tokens.saturating_sub(base.output_tokens),
            reasoning_output_tokens: self.reasoning_output_tokens.saturating_sub(base.reasoning_output_tokens),
        }
    }
}

/// `account/rateLimits/updated`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RateLimits {
    pub(crate) rate_limits: Value,
}

/// `warning`, `configWarning`, `deprecationNotice`.
#[derive(Debug, Deserialize)]
pub(crate) struct WarningNote {
    #[serde(flatten)]
    pub(crate) ids: Ids,
    #[serde(default)]
    pub(crate) message: Option<String>,
    #[serde(default)]
    pub(crate) summary: Option<String>,
    #[serde(default)]
    pub(crate) details: Option<String>,
}

impl WarningNote {
    /// The human-readable text.
    pub(crate) fn text(&self) -> String {
        let main = self.message.as_deref().or(self.summary.as_deref()).unwrap_or("codex warning");
        match self.details.as_deref().filter(|d| !d.is_empty()) {
            Some(details) => format!("{main} ({details})"),
            None => main.to_owned(),
        }
    }
}

/// `error`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ErrorNote {
    #[serde(flatten)]
    pub(crate) ids: Ids,
    pub(crate) error: Value,
    #[serde(default)]
    pub(crate) will_retry: Option<bool>,
}

/// `turn/started` and `turn/completed`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TurnNote {
    #[serde(default)]
    pub(crate) thread_id: Option<String>,
    pub(crate) turn: TurnInfo,
    /// Read by [`TurnNote::lenient`]: some fields had types other than expected.
    #[serde(skip)]
    pub(crate) lenient: bool,
}

impl TurnNote {
    /// A `turn/completed` whose fields do not all have the types expected (a codex newer than
    /// this schema, say): the turn's ID, status and error as far as they read, so that the turn
    /// still ends. `None` without a string `turn.id`.
    fn lenient(raw: Option<&RawValue>) -> Option<TurnNote> {
        let value: Value = serde_json::from_str(raw?.get()).ok()?;
        let turn = value.get("turn")?;
        let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_owned);
        let info = TurnInfo {
            id: text(turn.get("id"))?,
            status: text(turn.get("status")).unwrap_or_default(),
            error: turn.get("error").filter(|e| !e.is_null()).cloned(),
            items: Vec::new(),
            duration_ms: None,
        };
        Some(TurnNote { thread_id: text(value.get("threadId")), turn: info, lenient: true })
    }
}

/// A codex turn.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TurnInfo {
    pub(crate) id: String,
    #[serde(default)]
    pub(crate) status: String,
    #[serde(default)]
    pub(crate) error: Option<Value>,
    #[serde(default)]
    pub(crate) items: Vec<Item>,
    #[serde(default)]
    pub(crate) duration_ms: Option<u64>,
}

/// `serverRequest/resolved`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Resolved {
    #[serde(default)]
    pub(crate) thread_id: Option<String>,
    pub(crate) request_id: RpcId,
}

/// A server notification, parsed by method.
#[derive(Debug)]
pub(crate) enum Notification<'a> {
    AgentMessageDelta(Delta<'a>),
    /// `item/reasoning/summaryTextDelta` or `item/reasoning/textDelta` (the method).
    ReasoningDelta(Delta<'a>, &'static str),
    CommandOutputDelta(Delta<'a>),
    FileChangeOutputDelta(Delta<'a>),
    ItemStarted(Box<ItemNote>),
    ItemCompleted(Box<ItemNote>),
    PatchUpdated(PatchUpdated),
    McpProgress(Progress),
    PlanUpdated(PlanUpdated),
    TurnDiff(TurnDiff),
    TokenUsage(TokenUsageNote),
    RateLimits(RateLimits),
    Warning(WarningNote),
    Error(ErrorNote),
    TurnStarted(Box<TurnNote>),
    TurnCompleted(Box<TurnNote>),
    Resolved(Resolved),
    /// Anything not normalized: a known method kept as `provider_event`, an unknown method, or
    /// a known method whose params did not fit.
    Other {
        method: String,
        ids: Ids,
        known: bool,
    },
}

impl<'a> Notification<'a> {
    fn parse(method: &str, raw: Option<&'a RawValue>) -> Notification<'a> {
        let parsed = match method {
            "item/agentMessage/delta" => borrowed_params(raw).map(Notification::AgentMessageDelta),
            "item/reasoning/summaryTextDelta" => {
                borrowed_params(raw).map(|d| Notification::ReasoningDelta(d, "item/reasoning/summaryTextDelta"))
            }
            "item/reasoning/textDelta" => {
                borrowed_params(raw).map(|d| Notification::ReasoningDelta(d, "item/reasoning/textDelta"))
            }
            "item/commandExecution/outputDelta" => borrowed_params(raw).map(Notification::CommandOutputDelta),
            "item/fileChange/outputDelta" => borrowed_params(raw).map(Notification::FileChangeOutputDelta),
            "item/started" => params(raw).map(|n| Notification::ItemStarted(Box::new(n))),
            "item/completed" => params(raw).map(|n| Notification::ItemCompleted(Box::new(n))),
            "item/fileChange/patchUpdated" => params(raw).map(Notification::PatchUpdated),
            "item/mcpToolCall/progress" => params(raw).map(Notification::McpProgress),
            "turn/plan/updated" => params(raw).map(Notification::PlanUpdated),
            "turn/diff/updated" => params(raw).map(Notification::TurnDiff),
            "thread/tokenUsage/updated" => params(raw).map(Notification::TokenUsage),
            "account/rateLimits/updated" => params(raw).map(Notification::RateLimits),
            "warning" | "configWarning" | "deprecationNotice" => params(raw).map(Notification::Warning),
            "error" => params(raw).map(Notification::Error),
            "turn/started" => params(raw).map(|n| Notification::TurnStarted(Box::new(n))),
            "turn/completed" => {
                params(raw).or_else(|| TurnNote::lenient(raw)).map(|n| Notification::TurnCompleted(Box::new(n)))
            }
            "serverRequest/resolved" => params(raw).map(Notification::Resolved),
            _ => None,
        };
        parsed.unwrap_or_else(|| Notification::Other {
            method: method.to_owned(),
            ids: params(raw).unwrap_or_default(),
            known: KNOWN_NOTIFICATIONS.binary_search(&method).is_ok(),
        })
    }

    /// The method name, for `provider_event`s and logs.
    pub(crate) fn method(&self) -> &str {
        match self {
            Notification::AgentMessageDelta(_) => "item/agentMessage/delta",
            Notification::ReasoningDelta(_, method) => method,
            Notification::CommandOutputDelta(_) => "item/commandExecution/outputDelta",
            Notification::FileChangeOutputDelta(_) => "item/fileChange/outputDelta",
            Notification::ItemStarted(_) => "item/started",
            Notification::ItemCompleted(_) => "item/completed",
            Notification::PatchUpdated(_) => "item/fileChange/patchUpdated",
            Notification::McpProgress(_) => "item/mcpToolCall/progress",
            Notification::PlanUpdated(_) => "turn/plan/updated",
            Notification::TurnDiff(_) => "turn/diff/updated",
            Notification::TokenUsage(_) => "thread/tokenUsage/updated",
            Notification::RateLimits(_) => "account/rateLimits/updated",
            Notification::Warning(_) => "warning",
            Notification::Error(_) => "error",
            Notification::TurnStarted(_) => "turn/started",
            Notification::TurnCompleted(_) => "turn/completed",
            Notification::Resolved(_) => "serverRequest/resolved",
            Notification::Other { method, .. } => method,
        }
    }
}

/// The result of a response line that [`Outcome`] found to be a success, read as `T`.
#[derive(Debug, Deserialize)]
pub(crate) struct Reply<T> {
    #[serde(default = "Option::default")]
    pub(crate) result: Option<T>,
}

/// A request or notification we send.
#[derive(Debug, Serialize)]
pub(crate) struct Outgoing<'a, P: Serialize> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) id: Option<i64>,
    pub(crate) method: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) params: Option<P>,
}

/// Our answer to a server request.
#[derive(Debug, Serialize)]
pub(crate) struct Answer<'a> {
    pub(crate) id: &'a RpcId,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) result: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<AnswerError>,
}

/// A JSON-RPC error we send.
#[derive(Debug, Serialize)]
pub(crate) struct AnswerError {
    pub(crate) code: i64,
    pub(crate) message: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_method_lists_are_sorted_for_binary_search() {
        assert!(KNOWN_NOTIFICATIONS.windows(2).all(|w| w[0] < w[1]));
        assert!(requests::KNOWN_REQUESTS.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn classifies_messages() {
        assert!(matches!(parse_ok(r#"{"id":1,"result":{}}"#), Message::Response { id: RpcId::Num(1) }));
        assert!(matches!(parse_ok(r#"{"error":{"code":-32600,"message":"x"},"id":"a"}"#), Message::Response { .. }));
        assert!(matches!(
            parse_ok(r#"{"method":"item/agentMessage/delta","params":{"itemId":"m","delta":"Hi","turnId":"t"}}"#),
            Message::Notification(Notification::AgentMessageDelta(Delta { ref delta, .. })) if delta == "Hi"
        ));
        assert!(matches!(
            parse_ok(r#"{"method":"item/tool/requestUserInput","id":0,"params":{"questions":[]}}"#),
            Message::Request { id: RpcId::Num(0), request } if matches!(*request, ServerRequest::UserInput(_))
        ));
        assert!(matches!(parse_ok(r#"{"type":"thread.started"}"#), Message::Unrecognized));
        assert!(matches!(parse_ok("[1,2]"), Message::Unrecognized));
        // JSON of another shape is checked to the end before it is kept.
        assert!(matches!(parse_ok(r#"{"method":7,"params":{}}"#), Message::Unrecognized));
        assert_eq!(parse(r#"{"method":7,"params":{"#).unwrap_err(), NotJson);
        assert_eq!(parse(r#"{"method":"x","params":{"a":1}} trailing"#).unwrap_err(), NotJson);
        assert_eq!(parse("not json").unwrap_err(), NotJson);
    }

    #[track_caller]
    fn parse_ok(line: &str) -> Message<'_> {
        parse(line).expect("JSON")
    }

    #[test]
    fn bad_params_become_unnormalized_frames() {
        let Message::Notification(Notification::Other { method, known, ids }) =
            parse_ok(r#"{"method":"item/agentMessage/delta","params":{"threadId":"th","delta":7}}"#)
        else {
            panic!("expected an unnormalized frame");
        };
        assert_eq!(method, "item/agentMessage/delta");
        assert!(known);
        assert_eq!(ids.thread_id.as_deref(), Some("th"));
        let Message::Notification(Notification::Other { known, .. }) = parse_ok(r#"{"method":"brand/new"}"#) else {
            panic!("expected an unnormalized frame");
        };
        assert!(!known);
    }

    #[test]
    fn a_reply_is_a_result_even_when_null_and_an_error_of_any_shape() {
        let outcome = |line: &'static str| {
            let Outcome { result, error } = serde_json::from_str(line).unwrap();
            (result.map(RawValue::get), error.map(RpcError::lenient).map(|e| (e.code, e.message)))
        };
        assert_eq!(outcome(r#"{"id":1,"result":null}"#), (Some("null"), None));
        assert_eq!(outcome(r#"{"id":1,"result":{},"error":null}"#), (Some("{}"), None));
        assert_eq!(outcome(r#"{"id":1}"#), (None, None));
        assert_eq!(
            outcome(r#"{"id":1,"error":{"code":-32600,"message":"busy"}}"#),
            (None, Some((-32600, "busy".into())))
        );
        assert_eq!(outcome(r#"{"id":1,"error":"busy\n"}"#), (None, Some((0, "busy\n".into()))));
        assert_eq!(outcome(r#"{"id":1,"error":[7]}"#), (None, Some((0, "[7]".into()))));
    }

    #[test]
    fn request_ids_round_trip_as_provider_refs() {
        assert_eq!(RpcId::Num(0).to_ref(), "0");
        assert_eq!(RpcId::Str("a\"b".into()).to_ref(), r#""a\"b""#);
        assert_eq!(serde_json::from_str::<RpcId>("\"x\"").unwrap(), RpcId::Str("x".into()));
    }
}
