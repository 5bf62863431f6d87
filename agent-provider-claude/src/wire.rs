//! Claude Code's stream-JSON messages, as much of them as the provider reads.
//!
//! Every line is parsed once into a borrowed [`Envelope`]; the parts a message kind needs are
//! parsed from its `RawValue`s only when that kind is handled. Field order is never relied on
//! (2.1.332 moved `type` away from the front of `result`).
//!
//! Optional strings are `Cow<str>` fields defaulting to `""` rather than `Option<Cow<str>>`:
//! serde borrows a `Cow<str>` field from the line only when it is the field's whole type, so an
//! `Option<Cow<str>>` would allocate for every field of every line.

use std::borrow::Cow;

pub(crate) use agent_provider_kit::permission_prompt::control_response;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

/// One stdout line: its `type`, `subtype` and the raw parts the kinds use.
#[derive(Deserialize)]
pub(crate) struct Envelope<'a> {
    #[serde(rename = "type", borrow)]
    pub(crate) kind: Cow<'a, str>,
    /// `""` when absent.
    #[serde(default, borrow)]
    pub(crate) subtype: Cow<'a, str>,
    /// `""` when absent.
    #[serde(default, borrow)]
    pub(crate) session_id: Cow<'a, str>,
    /// `stream_event`: the API event, read in the same pass as the envelope (the hot path).
    #[serde(default, borrow)]
    pub(crate) event: Option<StreamEvent<'a>>,
    /// `assistant` / `user`: the message.
    #[serde(default, borrow)]
    pub(crate) message: Option<&'a RawValue>,
    /// `control_request`: the request body.
    #[serde(default, borrow)]
    pub(crate) request: Option<&'a RawValue>,
    /// `control_request` / `control_cancel_request`: the CLI's request ID; `""` when absent.
    #[serde(default, borrow)]
    pub(crate) request_id: Cow<'a, str>,
    /// `user` lines replayed by the CLI (`set_model` output, resumed history).
    #[serde(default, rename = "isReplay")]
    pub(crate) is_replay: bool,
}

/// `stream_event.event`: the parts of an Anthropic streaming event the provider reads.
#[derive(Deserialize)]
pub(crate) struct StreamEvent<'a> {
    #[serde(rename = "type", borrow)]
    pub(crate) kind: Cow<'a, str>,
    #[serde(default, borrow)]
    pub(crate) delta: Option<Delta<'a>>,
    #[serde(default, borrow)]
    pub(crate) message: Option<MessageStart<'a>>,
}

/// `content_block_delta.delta`; absent strings are `""`.
#[derive(Deserialize)]
pub(crate) struct Delta<'a> {
    #[serde(rename = "type", default, borrow)]
    pub(crate) kind: Cow<'a, str>,
    #[serde(default, borrow)]
    pub(crate) text: Cow<'a, str>,
    #[serde(default, borrow)]
    pub(crate) thinking: Cow<'a, str>,
}

/// `message_start.message`.
#[derive(Deserialize)]
pub(crate) struct MessageStart<'a> {
    /// `""` when absent.
    #[serde(default, borrow)]
    pub(crate) id: Cow<'a, str>,
}

/// An `assistant` or `user` message.
#[derive(Deserialize)]
pub(crate) struct Message {
    #[serde(default)]
    pub(crate) id: Option<String>,
    #[serde(default)]
    pub(crate) content: Content,
}

/// A message's content: a string or a list of blocks.
#[derive(Deserialize, Default)]
#[serde(untagged)]
pub(crate) enum Content {
    #[default]
    None,
    Text(String),
    Blocks(Vec<Value>),
}

/// `result`.
#[derive(Deserialize)]
pub(crate) struct ResultMessage {
    #[serde(default)]
    pub(crate) subtype: Option<String>,
    #[serde(default)]
    pub(crate) is_error: bool,
    #[serde(default)]
    pub(crate) result: Option<String>,
    #[serde(default)]
    pub(crate) session_id: Option<String>,
    #[serde(default)]
    pub(crate) total_cost_usd: Option<f64>,
    #[serde(default)]
    pub(crate) usage: Option<ResultUsage>,
    #[serde(default)]
    pub(crate) permission_denials: Vec<Value>,
    #[serde(default)]
    pub(crate) terminal_reason: Option<String>,
    #[serde(default)]
    pub(crate) stop_reason: Option<String>,
    #[serde(default)]
    pub(crate) api_error_status: Option<Value>,
    #[serde(default)]
    pub(crate) errors: Vec<Value>,
    #[serde(default)]
    pub(crate) num_turns: Option<u64>,
    #[serde(default)]
    pub(crate) duration_ms: Option<u64>,
    #[serde(default)]
    pub(crate) duration_api_ms: Option<u64>,
}

/// `result.usage` (per turn).
#[derive(Deserialize, Default, Clone, Copy)]
pub(crate) struct ResultUsage {
    #[serde(default)]
    pub(crate) input_tokens: Option<u64>,
    #[serde(default)]
    pub(crate) output_tokens: Option<u64>,
    #[serde(default)]
    pub(crate) cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    pub(crate) cache_read_input_tokens: Option<u64>,
}

/// `system` `api_retry`.
#[derive(Deserialize)]
pub(crate) struct ApiRetry {
    #[serde(default)]
    pub(crate) attempt: Option<u64>,
    #[serde(default)]
    pub(crate) max_retries: Option<u64>,
    #[serde(default)]
    pub(crate) error_status: Option<Value>,
    #[serde(default)]
    pub(crate) error: Option<Value>,
}

/// A control response the CLI wrote (to one of our requests).
#[derive(Deserialize)]
pub(crate) struct ControlResponseLine {
    pub(crate) response: ControlResponseBody,
}

/// `control_response.response`.
#[derive(Deserialize)]
pub(crate) struct ControlResponseBody {
    pub(crate) subtype: String,
    #[serde(default)]
    pub(crate) error: Option<String>,
    #[serde(default)]
    pub(crate) response: Option<Value>,
}

// ----- outgoing ------------------------------------------------------------------------------

/// A prompt: `{"type":"user","message":{"role":"user","content":…},…}`.
#[derive(Serialize)]
pub(crate) struct UserLine<'a> {
    #[serde(rename = "type")]
    pub(crate) kind: &'static str,
    pub(crate) message: UserMessage<'a>,
    pub(crate) parent_tool_use_id: Option<&'a str>,
    pub(crate) session_id: &'a str,
}

/// The message of a [`UserLine`].
#[derive(Serialize)]
pub(crate) struct UserMessage<'a> {
    pub(crate) role: &'static str,
    pub(crate) content: &'a Value,
}

/// A control request we send.
#[derive(Serialize)]
pub(crate) struct ControlRequestLine<'a> {
    #[serde(rename = "type")]
    pub(crate) kind: &'static str,
    pub(crate) request_id: &'a str,
    pub(crate) request: Value,
}

/// The text of a message's content: a string, or its `text` blocks joined.
pub(crate) fn content_text(content: &Content) -> String {
    match content {
        Content::None => String::new(),
        Content::Text(text) => text.clone(),
        Content::Blocks(blocks) => blocks
            .iter()
            .filter(|b| b["type"] == "text")
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
    }
}

/// The text of a `tool_result` block's `content`: a string, or its text blocks joined.
pub(crate) fn tool_result_text(content: &Value) -> Option<String> {
    match content {
        Value::String(text) => Some(text.clone()),
        Value::Array(blocks) => {
            Some(blocks.iter().filter_map(|b| b.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("\n"))
        }
        Value::Null => None,
        other => Some(other.to_string()),
    }
}
