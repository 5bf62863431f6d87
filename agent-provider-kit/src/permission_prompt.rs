//! Claude Code's stdio permission prompt (`--permission-prompt-tool stdio`): the `can_use_tool`
//! control requests the CLI writes when a tool needs permission, as harness requests, and
//! responses as the `PermissionResult` it expects back.
//!
//! Every provider that runs a CLI speaking this conversation (the Claude provider, presets that
//! declare it) uses these rules, so a tool use reads and answers the same way everywhere:
//!
//! | tool | request kind |
//! |---|---|
//! | `Bash` | command approval |
//! | `Write`, `Edit`, `MultiEdit`, `NotebookEdit` | file-change approval |
//! | `AskUserQuestion` | question (answered by allowing with `updatedInput.answers`) |
//! | anything else (MCP tools, `WebFetch`, …) | permission |
//!
//! Lines on the wire (measured with claude 2.1.197):
//!
//! ```text
//! OUT {"type":"control_request","request_id":"<uuid>","request":{"subtype":"can_use_tool","tool_name":"Bash","input":{…},"tool_use_id":"toolu_…"}}
//! IN  {"type":"control_response","response":{"subtype":"success","request_id":"<uuid>","response":{"behavior":"allow","updatedInput":{…},"toolUseID":"toolu_…"}}}
//! IN  {"type":"control_response","response":{"subtype":"success","request_id":"<uuid>","response":{"behavior":"deny","message":"…","toolUseID":"toolu_…"}}}
//! ```
//!
//! ```
//! use agent_core::{RequestKind, Response, Scope};
//! use agent_provider_kit::permission_prompt::{ToolUseRequest, encode};
//!
//! let request: ToolUseRequest = serde_json::from_value(serde_json::json!({
//!     "subtype": "can_use_tool", "tool_name": "Bash",
//!     "input": {"command": "touch x"}, "tool_use_id": "toolu_1",
//! }))?;
//! let (spec, pending) = request.into_request(&"req-1".into(), &[Scope::Once]);
//! assert_eq!(spec.kind, RequestKind::CommandApproval);
//! let denied = encode(&pending, &Response::deny("not today"))?;
//! assert_eq!(denied.result["behavior"], "deny");
//! assert!(denied.denied);
//! # Ok::<_, Box<dyn std::error::Error>>(())
//! ```

use agent_core::request::RequestSpec;
use agent_core::{Answer, Choice, Error, Question, RequestKind, Response, Result, Scope};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::rpc::CliRequestId;

/// The CLI's question tool.
pub const ASK_USER_QUESTION: &str = "AskUserQuestion";

/// Tools whose approval is a file change.
const FILE_TOOLS: &[&str] = &["Write", "Edit", "MultiEdit", "NotebookEdit"];

/// The default denial text when the host gives none.
pub const DENIED: &str = "The user denied this tool use.";

/// The `request` body of a `control_request` line (`can_use_tool` and the other subtypes).
#[derive(Clone, Debug, Deserialize)]
#[non_exhaustive]
pub struct ToolUseRequest {
    /// `can_use_tool` for a tool permission; other subtypes (`hook_callback`, `mcp_message`) are
    /// not tool uses.
    pub subtype: String,
    /// The tool's name (`Bash`, `Write`, `mcp__server__tool`, …).
    #[serde(default)]
    pub tool_name: Option<String>,
    /// The tool's name for people.
    #[serde(default)]
    pub display_name: Option<String>,
    /// The tool's input.
    #[serde(default)]
    pub input: Option<Value>,
    /// The CLI's description of the call.
    #[serde(default)]
    pub description: Option<String>,
    /// The ID of the `tool_use` block.
    #[serde(default)]
    pub tool_use_id: Option<String>,
    /// A path outside the allowed directories the call would touch.
    #[serde(default)]
    pub blocked_path: Option<String>,
    /// Why the CLI asks.
    #[serde(default)]
    pub decision_reason: Option<String>,
    /// Permission rules the CLI suggests.
    #[serde(default)]
    pub permission_suggestions: Option<Value>,
}

/// What is pending for one `can_use_tool`: what an answer needs.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct PendingTool {
    /// The CLI's `request_id`.
    pub request_id: CliRequestId,
    /// The tool's name.
    pub tool_name: String,
    /// The tool's input as asked.
    pub input: Value,
    /// The ID of the `tool_use` block.
    pub tool_use_id: Option<String>,
    /// The questions of an `AskUserQuestion`, by ID (the question text).
    pub questions: Vec<String>,
}

/// The request kind of a tool.
pub fn kind_of(tool: &str) -> RequestKind {
    if tool == "Bash" {
        RequestKind::CommandApproval
    } else if FILE_TOOLS.contains(&tool) {
        RequestKind::FileChangeApproval
    } else if tool == ASK_USER_QUESTION {
        RequestKind::Question
    } else {
        RequestKind::Permission
    }
}

impl ToolUseRequest {
    /// True for a `can_use_tool` request.
    pub fn is_tool_use(&self) -> bool {
        self.subtype == "can_use_tool"
    }

    /// The harness request for this tool use (`request_id` is the CLI's, its provider
    /// reference), offering `scopes` for an approval, and what to keep pending.
    pub fn into_request(self, request_id: &CliRequestId, scopes: &[Scope]) -> (RequestSpec, PendingTool) {
        let tool = self.tool_name.unwrap_or_default();
        let input = self.input.unwrap_or(Value::Object(Map::new()));
        let kind = kind_of(&tool);
        let str_field = |name: &str| input.get(name).and_then(Value::as_str).map(str::to_owned);
        let (prompt, questions) = match kind {
            RequestKind::CommandApproval => {
                let command = str_field("command").unwrap_or_default();
                (format!("Run `{command}`"), Vec::new())
            }
            RequestKind::FileChangeApproval => {
                let path = str_field("file_path").or_else(|| str_field("notebook_path")).unwrap_or_default();
                (format!("{tool} {path}"), Vec::new())
            }
            RequestKind::Question => {
                let questions = questions_of(&input);
                let prompt = questions.first().map(|q| q.prompt.clone()).unwrap_or_else(|| "Question".to_owned());
                (prompt, questions)
            }
            _ => {
                let shown = self.display_name.clone().unwrap_or_else(|| tool.clone());
                (format!("Use {shown}"), Vec::new())
            }
        };
        let question_ids = questions.iter().map(|q| q.id.clone()).collect();
        let mut spec = RequestSpec::new(kind, prompt, request_id.as_str());
        if kind == RequestKind::Question {
            spec = spec.questions(questions);
        } else {
            spec = spec.scopes(scopes.iter().copied());
        }
        spec = spec.meta("tool_name", tool.clone()).meta("input", input.clone());
        if let Some(id) = &self.tool_use_id {
            spec = spec.meta("tool_use_id", id.clone());
        }
        if let Some(command) = str_field("command") {
            spec = spec.meta("command", command);
        }
        if let Some(description) = self.description.or_else(|| str_field("description")) {
            spec = spec.meta("description", description);
        }
        if let Some(path) = self.blocked_path {
            spec = spec.meta("blocked_path", path);
        }
        if let Some(reason) = self.decision_reason {
            spec = spec.meta("decision_reason", reason);
        }
        if let Some(suggestions) = self.permission_suggestions {
            spec = spec.meta("permission_suggestions", suggestions);
        }
        let pending = PendingTool {
            request_id: request_id.clone(),
            tool_name: tool,
            input,
            tool_use_id: self.tool_use_id,
            questions: question_ids,
        };
        (spec, pending)
    }
}

/// The questions of an `AskUserQuestion` input; each one's ID is its text (the key Claude Code
/// expects in `answers`).
fn questions_of(input: &Value) -> Vec<Question> {
    let Some(list) = input.get("questions").and_then(Value::as_array) else { return Vec::new() };
    list.iter()
        .filter_map(|q| {
            let text = q.get("question")?.as_str()?;
            let choices = q.get("options").and_then(Value::as_array).map_or_else(Vec::new, |options| {
                options
                    .iter()
                    .filter_map(|o| {
                        let mut choice = Choice::new(o.get("label")?.as_str()?);
                        choice.description =
                            o.get("description").and_then(Value::as_str).filter(|d| !d.is_empty()).map(str::to_owned);
                        Some(choice)
                    })
                    .collect()
            });
            let mut question = Question::new(text, text).with_choices(choices);
            question.header = q.get("header").and_then(Value::as_str).map(str::to_owned);
            question.multi_select = q.get("multiSelect").and_then(Value::as_bool).unwrap_or(false);
            // The CLI's question tool always takes an "Other" free-text answer.
            question.allow_other = true;
            Some(question)
        })
        .collect()
}

/// What answering a pending tool sends.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Encoded {
    /// The `PermissionResult` for the control response.
    pub result: Value,
    /// For an approval with [`Scope::Session`]: the input approved (the provider decides what
    /// "the same request" means for the rest of the session).
    pub session_input: Option<Value>,
    /// The tool was refused (the agent sees the refusal).
    pub denied: bool,
}

/// `{"behavior": "allow", "updatedInput": input}` (with `toolUseID` when known).
pub fn allow(input: &Value, tool_use_id: Option<&str>) -> Value {
    let mut result = json!({"behavior": "allow", "updatedInput": input});
    if let Some(id) = tool_use_id {
        result["toolUseID"] = json!(id);
    }
    result
}

/// `{"behavior": "deny", "message": message}` (with `interrupt` when the turn should stop, and
/// `toolUseID` when known).
pub fn deny(message: &str, interrupt: bool, tool_use_id: Option<&str>) -> Value {
    let mut result = json!({"behavior": "deny", "message": message});
    if interrupt {
        result["interrupt"] = json!(true);
    }
    if let Some(id) = tool_use_id {
        result["toolUseID"] = json!(id);
    }
    result
}

/// Encodes `response` to `pending` as a `PermissionResult`. A question takes an answer, deny or
/// cancel; an approval takes approve, approve with edited input, deny or cancel; anything else
/// is `Error::InvalidResponse` (nothing to send).
pub fn encode(pending: &PendingTool, response: &Response) -> Result<Encoded> {
    let tool_use = pending.tool_use_id.as_deref();
    let question = pending.tool_name == ASK_USER_QUESTION;
    let denied = |result| Encoded { result, session_input: None, denied: true };
    let allowed = |input: &Value, scope: Scope| Encoded {
        result: allow(input, tool_use),
        session_input: (scope == Scope::Session).then(|| input.clone()),
        denied: false,
    };
    match response {
        Response::Deny { reason } => Ok(denied(deny(reason.as_deref().unwrap_or(DENIED), false, tool_use))),
        Response::Cancel { reason } => Ok(denied(deny(reason.as_deref().unwrap_or(DENIED), true, tool_use))),
        Response::Answer { answer } if question => {
            let mut input = pending.input.clone();
            let answers = answers(pending, answer)?;
            if let Value::Object(map) = &mut input {
                map.insert("answers".to_owned(), Value::Object(answers));
            }
            Ok(allowed(&input, Scope::Once))
        }
        Response::Approve { scope } if !question => Ok(allowed(&pending.input, *scope)),
        Response::ApproveEdited { scope, input } if !question => {
            if !input.is_object() {
                return Err(Error::InvalidResponse("an edited tool input must be a JSON object".into()));
            }
            Ok(allowed(input, *scope))
        }
        _ => Err(Error::InvalidResponse(format!(
            "Claude Code's `{}` request takes {}",
            pending.tool_name,
            if question { "an answer, deny or cancel" } else { "approve, approve with edited input, deny or cancel" }
        ))),
    }
}

/// The `answers` map Claude Code expects: question text → chosen label(s), several joined with
/// `", "`.
fn answers(pending: &PendingTool, answer: &Answer) -> Result<Map<String, Value>> {
    let first = || {
        pending
            .questions
            .first()
            .cloned()
            .ok_or_else(|| Error::InvalidResponse("the question request carries no question to answer".into()))
    };
    let mut map = Map::new();
    match answer {
        Answer::Text(text) => {
            map.insert(first()?, json!(text));
        }
        Answer::Many(values) => {
            map.insert(first()?, json!(values.join(", ")));
        }
        Answer::ByQuestion(by_id) => {
            for (id, values) in by_id {
                map.insert(id.clone(), json!(values.join(", ")));
            }
        }
        Answer::Content(_) => {
            return Err(Error::InvalidResponse("questions are answered with text".into()));
        }
        _ => return Err(Error::InvalidResponse("this answer form is not supported by Claude Code".into())),
    }
    Ok(map)
}

/// The control response line answering the CLI's request `request_id`: `Ok(payload)` is a
/// `success` (with the payload when there is one), `Err(text)` an `error`.
pub fn control_response(request_id: &CliRequestId, outcome: Result<Option<Value>, String>) -> Value {
    let request_id = request_id.to_json();
    match outcome {
        Ok(Some(response)) => json!({
            "type": "control_response",
            "response": {"subtype": "success", "request_id": request_id, "response": response},
        }),
        Ok(None) => json!({
            "type": "control_response",
            "response": {"subtype": "success", "request_id": request_id},
        }),
        Err(error) => json!({
            "type": "control_response",
            "response": {"subtype": "error", "request_id": request_id, "error": error},
        }),
    }
}

/// What answers a `can_use_tool` request whose `request_id` the CLI reused while a request under
/// it waited: an answer given for one tool use could reach the other, so neither is approved.
/// Returns the control response denying the ID (once: it settles the CLI's waiter) and the
/// warning to show; the provider ends the waiting request itself.
pub fn reused_request_id(cli: &str, request_id: &CliRequestId) -> (Value, String) {
    let message = format!("{cli} reused control request ID `{request_id}` while a request under it waited");
    let deny = json!({"behavior": "deny", "message": format!("{message}; both were denied")});
    (control_response(request_id, Ok(Some(deny))), format!("{message}: both were denied"))
}

/// A control request whose line was too long to keep (see
/// [`LineReader::too_long_head`](crate::framing::LineReader::too_long_head)): its `request_id`
/// and, when the bytes reach it, its `subtype`, read from the line's first and last bytes;
/// `None` for a line that is no control request, or whose ID neither end holds.
pub fn unread_request<'b>(ends: (&'b [u8], &'b [u8])) -> Option<(CliRequestId, Option<&'b str>)> {
    use crate::framing::ends::{head_object, id_member, string_member};
    use crate::framing::head::{find_key, string_at};
    if string_member(ends, "type")? != "control_request" {
        return None;
    }
    let id = id_member(ends, "request_id")?;
    let request = head_object(ends.0, "request");
    Some((id, request.and_then(|request| string_at(request, find_key(request, "subtype")?))))
}

/// The answer to a control request the CLI waits on that could not be read (`why`): a tool's
/// permission (`can_use_tool`, or a subtype past the bytes that were read) denied, any other
/// request refused. Returns the control response and the warning to show.
pub fn unread_request_answer(
    cli: &str,
    request_id: &CliRequestId,
    subtype: Option<&str>,
    why: &str,
) -> (Value, String) {
    let (answer, what) = match subtype {
        Some("can_use_tool") | None => (
            Ok(Some(json!({"behavior": "deny", "message": format!("the request could not be read: {why}")}))),
            "denied",
        ),
        Some(_) => (Err(format!("agent-harness could not read the request: {why}")), "refused"),
    };
    let subtype = subtype.unwrap_or("control request");
    let message = format!("{cli} sent a `{subtype}` request that could not be read ({why}); it was {what}");
    (control_response(request_id, answer), message)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A control request too long to keep is named by its first bytes, or, for the members
    /// written after a long one, by its last.
    #[test]
    fn an_unread_control_request_is_named_by_either_end_and_denied() {
        let head =
            br#"{"type":"control_request","request_id":"r-1","request":{"subtype":"can_use_tool","input":{"x":"xx"#;
        let (id, subtype) = unread_request((head, b"")).expect("a control request");
        assert_eq!((id.as_str(), subtype), ("r-1", Some("can_use_tool")));
        let head = br#"{"request":{"input":{"content":"xxxx"#;
        let (id, subtype) =
            unread_request((head, br#"xx"}},"request_id":7,"type":"control_request"}"#)).expect("from the tail");
        assert_eq!((id.to_json(), subtype), (json!(7), None));
        assert!(unread_request((br#"{"type":"result","result":"xx"#, b"")).is_none());

        let (line, warning) = unread_request_answer("claude", &id, None, "too long");
        assert_eq!(line["response"]["request_id"], 7);
        assert_eq!(line["response"]["response"]["behavior"], "deny");
        assert!(warning.contains("`control request`") && warning.contains("denied"), "{warning}");
        let (line, warning) = unread_request_answer("claude", &id, Some("hook_callback"), "too long");
        assert_eq!(line["response"]["subtype"], "error");
        assert!(warning.contains("refused"), "{warning}");
    }

    fn tool_use(json: Value) -> ToolUseRequest {
        serde_json::from_value(json).unwrap()
    }

    fn bash() -> (RequestSpec, PendingTool) {
        tool_use(json!({
            "subtype": "can_use_tool", "tool_name": "Bash", "display_name": "Bash",
            "input": {"command": "touch x && echo hi", "description": "Make x"},
            "tool_use_id": "toolu_1", "blocked_path": "/w/x",
        }))
        .into_request(&"r1".into(), &[Scope::Once, Scope::Session])
    }

    #[test]
    fn a_bash_call_is_a_command_approval_with_the_scopes_offered() {
        let (spec, pending) = bash();
        assert_eq!(spec.kind, RequestKind::CommandApproval);
        assert_eq!(spec.prompt, "Run `touch x && echo hi`");
        assert_eq!(spec.scopes, [Scope::Once, Scope::Session]);
        assert_eq!(spec.metadata["command"], "touch x && echo hi");
        assert_eq!(spec.metadata["blocked_path"], "/w/x");
        assert_eq!(spec.metadata["description"], "Make x");
        assert_eq!(spec.provider_ref.0, "r1");
        assert_eq!(pending.tool_use_id.as_deref(), Some("toolu_1"));
        let (once, _) =
            tool_use(json!({"subtype": "can_use_tool", "tool_name": "Write", "input": {"file_path": "/a"}}))
                .into_request(&"r2".into(), &[Scope::Once]);
        assert_eq!((once.kind, once.prompt.as_str()), (RequestKind::FileChangeApproval, "Write /a"));
        assert_eq!(once.scopes, [Scope::Once]);
    }

    #[test]
    fn approvals_deny_and_cancel_encode_as_permission_results() {
        let (_, pending) = bash();
        let allowed = encode(&pending, &Response::approve()).unwrap();
        assert_eq!(
            allowed.result,
            json!({"behavior": "allow", "updatedInput": {"command": "touch x && echo hi", "description": "Make x"}, "toolUseID": "toolu_1"})
        );
        assert_eq!(allowed.session_input, None);
        let session = encode(&pending, &Response::approve_with(Scope::Session)).unwrap();
        assert_eq!(session.session_input, Some(pending.input.clone()));
        let edited = encode(&pending, &Response::approve_edited(json!({"command": "echo edited"}))).unwrap();
        assert_eq!(edited.result["updatedInput"], json!({"command": "echo edited"}));
        let denied = encode(&pending, &Response::deny("no shell today")).unwrap();
        assert_eq!(denied.result, json!({"behavior": "deny", "message": "no shell today", "toolUseID": "toolu_1"}));
        assert!(denied.denied);
        let cancelled = encode(&pending, &Response::cancel("stop")).unwrap();
        assert_eq!(cancelled.result["interrupt"], true);
        let unexplained = encode(&pending, &Response::Deny { reason: None }).unwrap();
        assert_eq!(unexplained.result["message"], DENIED);
        assert!(encode(&pending, &Response::answer("x")).is_err());
        assert!(encode(&pending, &Response::approve_edited(json!("not an object"))).is_err());
    }

    #[test]
    fn questions_are_answered_by_allowing_with_answers() {
        let input = json!({"questions": [{"question": "Which color?", "header": "Color", "options": [
            {"label": "Red", "description": "The red one"}, {"label": "Blue", "description": ""}], "multiSelect": false}]});
        let (spec, pending) = tool_use(
            json!({"subtype": "can_use_tool", "tool_name": "AskUserQuestion", "input": input, "tool_use_id": "t"}),
        )
        .into_request(&"q1".into(), &[Scope::Once, Scope::Session]);
        assert_eq!(spec.kind, RequestKind::Question);
        assert!(spec.scopes.is_empty());
        assert_eq!(spec.questions[0].id, "Which color?");
        assert_eq!(spec.questions[0].choices[0].description.as_deref(), Some("The red one"));
        assert_eq!(spec.questions[0].choices[1].description, None);
        let answered = encode(&pending, &Response::answer("Blue")).unwrap();
        assert_eq!(answered.result["behavior"], "allow");
        assert_eq!(answered.result["updatedInput"]["answers"], json!({"Which color?": "Blue"}));
        assert_eq!(answered.result["updatedInput"]["questions"], input["questions"]);
        assert!(encode(&pending, &Response::approve()).is_err());
    }

    #[test]
    fn kinds_follow_the_tool() {
        assert_eq!(kind_of("mcp__e__echo"), RequestKind::Permission);
        assert_eq!(kind_of("Edit"), RequestKind::FileChangeApproval);
        assert_eq!(kind_of("Bash"), RequestKind::CommandApproval);
        assert!(!tool_use(json!({"subtype": "hook_callback"})).is_tool_use());
    }

    #[test]
    fn control_responses_carry_the_clis_request_id() {
        let r = CliRequestId::from("r");
        assert_eq!(
            control_response(&r, Ok(None)),
            json!({"type": "control_response", "response": {"subtype": "success", "request_id": "r"}})
        );
        assert_eq!(control_response(&r, Err("no".into()))["response"]["error"], "no");
        assert_eq!(control_response(&r, Ok(Some(json!({"a": 1}))))["response"]["response"], json!({"a": 1}));
    }

    #[test]
    fn a_numbered_request_is_answered_under_its_number() {
        let seven = CliRequestId::of(&json!(7)).expect("a number is an ID");
        assert_eq!(seven.as_str(), "7");
        assert_eq!(control_response(&seven, Ok(None))["response"]["request_id"], json!(7));
        let text = CliRequestId::of(&json!("7")).expect("a string is an ID");
        assert_eq!(control_response(&text, Ok(None))["response"]["request_id"], json!("7"));
        assert_eq!(CliRequestId::of(&json!(1.5)).map(|id| id.to_json()), Some(json!(1.5)));
        assert_eq!(CliRequestId::of(&json!(null)), None);
        assert_eq!(CliRequestId::of(&json!({"id": 1})), None);
    }
}
