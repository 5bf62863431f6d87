//! [`Response`]s → the JSON codex expects for its requests, and the answers sent for requests
//! no host answers (no turn runs, or the line was too long to read).

use agent_core::{Answer, Error, RequestKind, Response, Result, Scope};
use serde_json::{Map, Value, json};

use super::{INVALID_PARAMS, Offered, PendingKind, PendingRequest};
use crate::wire;

/// The answer to send for a response, and whether the turn must also be interrupted (a cancel
/// of a request kind codex has no cancel decision for).
#[derive(Debug, PartialEq)]
pub(crate) struct Encoded {
    pub(crate) result: Value,
    pub(crate) interrupt: bool,
}

impl Encoded {
    fn answer(result: Value) -> Self {
        Encoded { result, interrupt: false }
    }
}

/// Encodes `response` for `pending`. Errors are definite: nothing was sent.
pub(crate) fn encode(pending: &PendingRequest, kind: RequestKind, response: &Response) -> Result<Encoded> {
    let mismatch = || Error::ResponseKindMismatch { kind, action: response.action() };
    match (&pending.kind, response) {
        (PendingKind::Command { scopes, .. }, Response::Approve { scope }) => {
            if !scopes.contains(scope) {
                return Err(Error::UnsupportedScope { scope: *scope });
            }
            let decision = if *scope == Scope::Session { "acceptForSession" } else { "accept" };
            Ok(Encoded::answer(json!({ "decision": decision })))
        }
        (PendingKind::FileChange, Response::Approve { scope }) => {
            let decision = if *scope == Scope::Session { "acceptForSession" } else { "accept" };
            Ok(Encoded::answer(json!({ "decision": decision })))
        }
        (PendingKind::Command { offered, .. }, Response::Choose { value }) => {
            match offered.iter().find(|o| o.value == *value) {
                Some(offered) => Ok(Encoded::answer(json!({ "decision": offered.decision }))),
                None => Err(unoffered(value, offered)),
            }
        }
        (_, Response::Choose { value }) => Err(unoffered(value, &[])),
        (PendingKind::Command { .. } | PendingKind::FileChange, Response::Deny { .. }) => {
            Ok(Encoded::answer(json!({ "decision": "decline" })))
        }
        (PendingKind::Command { .. } | PendingKind::FileChange, Response::Cancel { .. }) => {
            Ok(Encoded::answer(json!({ "decision": "cancel" })))
        }
        (PendingKind::Permissions { requested }, Response::Approve { scope }) => {
            let scope = if *scope == Scope::Session { "session" } else { "turn" };
            Ok(Encoded::answer(json!({ "permissions": requested, "scope": scope })))
        }
        (PendingKind::Permissions { .. }, Response::Deny { .. } | Response::Cancel { .. }) => {
            Ok(Encoded { result: json!({ "permissions": {} }), interrupt: matches!(response, Response::Cancel { .. }) })
        }
        (PendingKind::Question { ids }, Response::Answer { answer }) => {
            Ok(Encoded::answer(json!({ "answers": question_answers(ids, answer)? })))
        }
        (PendingKind::Question { ids }, Response::Deny { .. } | Response::Cancel { .. }) => {
            let empty: Map<String, Value> = ids.iter().map(|id| (id.clone(), json!({ "answers": [] }))).collect();
            Ok(Encoded { result: json!({ "answers": empty }), interrupt: matches!(response, Response::Cancel { .. }) })
        }
        (PendingKind::Elicitation, Response::Answer { answer }) => {
            let content = match answer {
                Answer::Content(value) => value.clone(),
                Answer::ByQuestion(map) => Value::Object(
                    map.iter()
                        .map(|(k, v)| {
                            let value = match v.as_slice() {
                                [one] => Value::String(one.clone()),
                                many => json!(many),
                            };
                            (k.clone(), value)
                        })
                        .collect(),
                ),
                _ => return Err(mismatch()),
            };
            Ok(Encoded::answer(json!({ "action": "accept", "content": content })))
        }
        (PendingKind::ToolCall, Response::Approve { scope: Scope::Once }) => {
            Ok(Encoded::answer(json!({ "action": "accept", "content": {} })))
        }
        (PendingKind::ToolCall, Response::Approve { scope }) => Err(Error::UnsupportedScope { scope: *scope }),
        (PendingKind::ToolCall, Response::Deny { .. }) => Ok(Encoded::answer(json!({ "action": "decline" }))),
        (PendingKind::ToolCall, Response::Cancel { .. }) => Ok(Encoded::answer(json!({ "action": "cancel" }))),
        (PendingKind::Elicitation, Response::Deny { .. }) => Ok(Encoded::answer(json!({ "action": "decline" }))),
        (PendingKind::Elicitation, Response::Cancel { .. }) => Ok(Encoded::answer(json!({ "action": "cancel" }))),
        (PendingKind::Legacy, Response::Approve { scope }) => {
            let decision = if *scope == Scope::Session { "approved_for_session" } else { "approved" };
            Ok(Encoded::answer(json!({ "decision": decision })))
        }
        (PendingKind::Legacy, Response::Deny { reason }) => {
            let rejection = reason.clone().unwrap_or_else(|| "denied by the user".into());
            Ok(Encoded::answer(json!({ "decision": { "denied": { "rejection": rejection } } })))
        }
        (PendingKind::Legacy, Response::Cancel { .. }) => Ok(Encoded::answer(json!({ "decision": "abort" }))),
        _ => Err(mismatch()),
    }
}

/// A `Response::Choose` naming a decision the request does not offer.
fn unoffered(value: &str, offered: &[Offered]) -> Error {
    let names: Vec<String> = offered.iter().map(|o| format!("`{}`", o.value)).collect();
    Error::InvalidResponse(if names.is_empty() {
        format!("`{value}` is not a choice of this request: codex offered none")
    } else {
        format!("`{value}` is not a choice of this request; codex offered {}", names.join(", "))
    })
}

fn question_answers(ids: &[String], answer: &Answer) -> Result<Map<String, Value>> {
    let single = |values: Vec<String>| -> Result<Map<String, Value>> {
        match ids {
            [id] => Ok(Map::from_iter([(id.clone(), json!({ "answers": values }))])),
            _ => Err(Error::InvalidResponse(format!(
                "the request has {} questions; answer with a map keyed by question id",
                ids.len()
            ))),
        }
    };
    match answer {
        Answer::Text(text) => single(vec![text.clone()]),
        Answer::Many(values) => single(values.clone()),
        Answer::ByQuestion(map) => {
            if let Some(missing) = ids.iter().find(|id| !map.contains_key(*id)) {
                return Err(Error::MissingAnswer { question_id: missing.clone() });
            }
            Ok(ids.iter().map(|id| (id.clone(), json!({ "answers": map[id] }))).collect())
        }
        _ => Err(Error::InvalidResponse("questions are answered with text".into())),
    }
}

/// The answer to a dynamic tool call: this client registers no tools.
pub(super) fn no_dynamic_tools() -> Value {
    json!({
        "success": false,
        "contentItems": [{"type": "inputText", "text": "this client registers no dynamic tools"}],
    })
}

/// The answer to a request of `method` whose line was too long to read (only its first bytes,
/// naming it, were): decline, or its closest equivalent, as for a request no turn can take; a
/// JSON-RPC error for a method this provider does not answer.
pub(crate) fn decline_unread(method: &str) -> std::result::Result<Value, wire::AnswerError> {
    let kind = match method {
        "item/commandExecution/requestApproval" => PendingKind::Command { scopes: Vec::new(), offered: Vec::new() },
        "item/fileChange/requestApproval" => PendingKind::FileChange,
        "item/permissions/requestApproval" => PendingKind::Permissions { requested: Value::Null },
        "item/tool/requestUserInput" => PendingKind::Question { ids: Vec::new() },
        "mcpServer/elicitation/request" => PendingKind::Elicitation,
        "execCommandApproval" | "applyPatchApproval" => {
            return Ok(json!({ "decision": { "denied": { "rejection": "the request was too long to read" } } }));
        }
        "item/tool/call" => return Ok(no_dynamic_tools()),
        _ => {
            let message = format!("agent-harness could not read `{method}`: its line was over `max_line_bytes`");
            return Err(wire::AnswerError { code: INVALID_PARAMS, message });
        }
    };
    Ok(auto_decline(&kind))
}

/// The answer sent when a request cannot reach the host (no turn is running): decline, or its
/// closest equivalent.
pub(crate) fn auto_decline(kind: &PendingKind) -> Value {
    match kind {
        PendingKind::Command { .. } | PendingKind::FileChange => json!({ "decision": "decline" }),
        PendingKind::Permissions { .. } => json!({ "permissions": {} }),
        PendingKind::Question { ids } => {
            json!({ "answers": ids.iter().map(|id| (id.clone(), json!({ "answers": [] }))).collect::<Map<_, _>>() })
        }
        PendingKind::Elicitation | PendingKind::ToolCall => json!({ "action": "decline" }),
        PendingKind::Legacy => json!({ "decision": { "denied": { "rejection": "no turn is running" } } }),
    }
}
