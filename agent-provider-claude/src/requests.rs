//! `can_use_tool` control requests as harness requests, and responses as the `PermissionResult`
//! the CLI expects: the kit's [`permission_prompt`] rules (shared with presets that speak the
//! same conversation), plus what only this provider does.
//!
//! Claude Code has no "allow for this session" answer of its own in stdio mode; the harness
//! emulates it: an approval with [`Scope::Session`] is remembered as a [`SessionRule`] (the tool
//! and its input pattern), and a later `can_use_tool` that matches is allowed without asking.

use agent_core::request::RequestSpec;
use agent_core::{Response, Result, Scope};
use agent_provider_kit::permission_prompt::{self, ToolUseRequest};
pub(crate) use agent_provider_kit::permission_prompt::{ASK_USER_QUESTION, PendingTool};
use agent_provider_kit::rpc::CliRequestId;
use serde_json::{Map, Value};

/// An "allow for this session" decision: a tool and the pattern of its input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SessionRule {
    pub(crate) tool: String,
    pub(crate) pattern: String,
}

impl SessionRule {
    /// The rule an approval of `tool` with `input` for the session stands for: a command for
    /// `Bash`, the file for file tools, the whole input otherwise.
    pub(crate) fn of(tool: &str, input: &Value) -> SessionRule {
        let field = match tool {
            "Bash" => input.get("command"),
            "Write" | "Edit" | "MultiEdit" | "Read" => input.get("file_path"),
            "NotebookEdit" => input.get("notebook_path"),
            _ => None,
        };
        let pattern = match field {
            Some(Value::String(s)) => s.clone(),
            _ => canonical(input),
        };
        SessionRule { tool: tool.to_owned(), pattern }
    }
}

/// `input` without its free-text `description`, as text (keys sorted by `serde_json`'s map).
fn canonical(input: &Value) -> String {
    match input {
        Value::Object(map) => {
            let kept: Map<String, Value> =
                map.iter().filter(|(k, _)| *k != "description").map(|(k, v)| (k.clone(), v.clone())).collect();
            Value::Object(kept).to_string()
        }
        other => other.to_string(),
    }
}

/// The harness request for a `can_use_tool` (approvals offer the session scope this provider
/// emulates), and what to keep pending.
pub(crate) fn request_spec(request_id: &CliRequestId, request: ToolUseRequest) -> (RequestSpec, PendingTool) {
    request.into_request(request_id, &[Scope::Once, Scope::Session])
}

/// What answering a pending tool sends and does.
#[derive(Debug, PartialEq)]
pub(crate) struct Encoded {
    /// The `PermissionResult` for the control response.
    pub(crate) result: Value,
    /// The session rule to remember (an approval for the session).
    pub(crate) rule: Option<SessionRule>,
    /// The tool was refused.
    pub(crate) denied: bool,
}

/// Encodes `response` to `pending` as a `PermissionResult`.
pub(crate) fn encode(pending: &PendingTool, response: &Response) -> Result<Encoded> {
    let encoded = permission_prompt::encode(pending, response)?;
    let rule = encoded.session_input.as_ref().map(|input| SessionRule::of(&pending.tool_name, input));
    Ok(Encoded { result: encoded.result, rule, denied: encoded.denied })
}

#[cfg(test)]
mod tests {
    use agent_core::RequestKind;
    use serde_json::json;

    use super::*;

    fn bash() -> (RequestSpec, PendingTool) {
        let request: ToolUseRequest = serde_json::from_value(json!({
            "subtype": "can_use_tool", "tool_name": "Bash", "display_name": "Bash",
            "input": {"command": "touch x && echo hi", "description": "Make x"},
            "tool_use_id": "toolu_1",
        }))
        .unwrap();
        request_spec(&"r1".into(), request)
    }

    #[test]
    fn approvals_offer_the_emulated_session_scope() {
        let (spec, pending) = bash();
        assert_eq!(spec.kind, RequestKind::CommandApproval);
        assert_eq!(spec.scopes, [Scope::Once, Scope::Session]);
        assert_eq!(pending.request_id.as_str(), "r1");
    }

    #[test]
    fn an_approval_for_the_session_is_remembered_as_a_rule() {
        let (_, pending) = bash();
        let once = encode(&pending, &Response::approve()).unwrap();
        assert_eq!((once.rule, once.denied), (None, false));
        let session = encode(&pending, &Response::approve_with(Scope::Session)).unwrap();
        assert_eq!(session.rule, Some(SessionRule { tool: "Bash".into(), pattern: "touch x && echo hi".into() }));
        let edited = Response::ApproveEdited { scope: Scope::Session, input: json!({"command": "echo edited"}) };
        let edited = encode(&pending, &edited).unwrap();
        assert_eq!(edited.rule, Some(SessionRule { tool: "Bash".into(), pattern: "echo edited".into() }));
        let denied = encode(&pending, &Response::deny("no shell today")).unwrap();
        assert_eq!((denied.rule, denied.denied), (None, true));
        assert!(encode(&pending, &Response::answer("x")).is_err());
    }

    #[test]
    fn session_rules_match_commands_files_and_whole_inputs() {
        assert_eq!(SessionRule::of("Bash", &json!({"command": "ls", "description": "a"})).pattern, "ls");
        assert_eq!(SessionRule::of("Write", &json!({"file_path": "/a", "content": "x"})).pattern, "/a");
        let a = SessionRule::of("mcp__e__echo", &json!({"text": "hi", "description": "one"}));
        let b = SessionRule::of("mcp__e__echo", &json!({"description": "two", "text": "hi"}));
        assert_eq!(a, b);
    }
}
