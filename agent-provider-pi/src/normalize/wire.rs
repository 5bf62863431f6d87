//! Pi's stdout frames as the normalizer reads them: the fields it uses, big nested values kept
//! raw, an error's text read whatever its shape.

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

/// One stdout line, with the fields the normalizer reads; big nested values stay raw.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Frame<'a> {
    #[serde(rename = "type", borrow)]
    pub(super) kind: &'a str,
    /// A dialog's ID as pi wrote it (a string; a number is answered as one).
    #[serde(default)]
    pub(super) id: Option<Value>,
    #[serde(default)]
    pub(super) success: Option<bool>,
    #[serde(default, borrow)]
    pub(super) message: Option<&'a RawValue>,
    #[serde(default)]
    pub(super) assistant_message_event: Option<AssistantEvent>,
    #[serde(default)]
    pub(super) tool_call_id: Option<String>,
    #[serde(default)]
    pub(super) tool_name: Option<String>,
    #[serde(default)]
    pub(super) args: Option<Value>,
    #[serde(default)]
    pub(super) result: Option<Value>,
    #[serde(default)]
    pub(super) is_error: Option<bool>,
    #[serde(default)]
    pub(super) will_retry: Option<bool>,
    /// `compaction_start` / `compaction_end`: why pi compacts (`overflow`, `threshold`, …).
    #[serde(default)]
    pub(super) reason: Option<String>,
    #[serde(default)]
    pub(super) method: Option<String>,
    #[serde(default)]
    pub(super) title: Option<String>,
    #[serde(default)]
    pub(super) options: Option<Vec<Value>>,
    #[serde(default)]
    pub(super) placeholder: Option<String>,
    #[serde(default)]
    pub(super) timeout: Option<u64>,
    #[serde(default)]
    pub(super) notify_type: Option<String>,
    #[serde(default, deserialize_with = "agent_provider_kit::rpc::error_text")]
    pub(super) error_message: Option<String>,
    #[serde(default, deserialize_with = "agent_provider_kit::rpc::error_text")]
    pub(super) final_error: Option<String>,
    #[serde(default)]
    pub(super) command: Option<String>,
    #[serde(default, deserialize_with = "agent_provider_kit::rpc::error_text")]
    pub(super) error: Option<String>,
    #[serde(default)]
    pub(super) data: Option<Value>,
    /// `queue_update`: the steer messages pi holds.
    #[serde(default)]
    pub(super) steering: Option<Vec<Value>>,
    /// `queue_update`: the follow-up messages pi holds.
    #[serde(default)]
    pub(super) follow_up: Option<Vec<Value>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct AssistantEvent {
    #[serde(rename = "type")]
    pub(super) kind: String,
    #[serde(default)]
    pub(super) delta: Option<String>,
}

/// The parts of an agent message the normalizer reads.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub(super) struct Message {
    #[serde(default)]
    pub(super) role: String,
    #[serde(default)]
    pub(super) content: Value,
    #[serde(default)]
    pub(super) stop_reason: Option<String>,
    /// A string; a newer pi's object (`{"message": …}`) or any other value is read as text.
    #[serde(default, deserialize_with = "agent_provider_kit::rpc::error_text")]
    pub(super) error_message: Option<String>,
    #[serde(default)]
    pub(super) usage: Option<Value>,
}
