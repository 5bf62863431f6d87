//! `can_use_tool` control requests as harness requests, and responses as the `PermissionResult`
//! the CLI expects.
//!
//! | tool | request kind |
//! |---|---|
//! | `Bash` | command approval |
//! | `Write`, `Edit`, `MultiEdit`, `NotebookEdit` | file-change approval |
//! | `AskUserQuestion` | question (answered by allowing with `updatedInput.answers`) |
//! | anything else (MCP tools, `WebFetch`, …) | permission |
//!
//! Claude Code has no "allow for this session" answer of its own in stdio mode; the harness
//! emulates it: an approval with [`Scope::Session`] is remembered as a [`SessionRule`] (the tool
//! and its input pattern), and a later `can_use_tool` that matches is allowed without asking.

use agent_core::request::RequestSpec;
use agent_core::{Answer, Choice, Error, Question, RequestKind, Response, Result, Scope};
use serde_json::{Map, Value, json};

use crate::wire::CliRequest;

/// The CLI's question tool.
pub(crate) const ASK_USER_QUESTION: &str = "AskUserQuestion";

/// Tools whose approval is a file change.
const FILE_TOOLS: &[&str] = &["Write", "Edit", "MultiEdit", "NotebookEdit"];

/// What is pending for one `can_use_tool`.
#[derive(Clone, Debug)]
pub(crate) struct PendingTool {
    /// The CLI's `request_id`.
    pub(crate) request_id: String,
    pub(crate) tool_name: String,
    pub(crate) input: Value,
    pub(crate) tool_use_id: Option<String>,
    /// The questions of an `AskUserQuestion`, by ID (the question text).
    pub(crate) questions: Vec<String>,
}

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

/// The request kind of a tool.
pub(crate) fn kind_of(tool: &str) -> RequestKind {
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

/// The harness request for a `can_use_tool`, and what to keep pending.
pub(crate) fn request_spec(request_id: &str, request: CliRequest) -> (RequestSpec, PendingTool) {
    let tool = request.tool_name.unwrap_or_default();
    let input = request.input.unwrap_or(Value::Object(Map::new()));
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
            let shown = request.display_name.clone().unwrap_or_else(|| tool.clone());
            (format!("Use {shown}"), Vec::new())
        }
    };
    let question_ids = questions.iter().map(|q| q.id.clone()).collect();
    let mut spec = RequestSpec::new(kind, prompt, request_id);
    if kind == RequestKind::Question {
        spec = spec.questions(questions);
    } else {
        spec = spec.scopes([Scope::Once, Scope::Session]);
    }
    spec = spec.meta("tool_name", tool.clone()).meta("input", input.clone());
    if let Some(id) = &request.tool_use_id {
        spec = spec.meta("tool_use_id", id.clone());
    }
    if let Some(command) = str_field("command") {
        spec = spec.meta("command", command);
    }
    if let Some(description) = request.description.or_else(|| str_field("description")) {
        spec = spec.meta("description", description);
    }
    if let Some(path) = request.blocked_path {
        spec = spec.meta("blocked_path", path);
    }
    if let Some(reason) = request.decision_reason {
        spec = spec.meta("decision_reason", reason);
    }
    if let Some(suggestions) = request.permission_suggestions {
        spec = spec.meta("permission_suggestions", suggestions);
    }
    let pending = PendingTool {
        request_id: request_id.to_owned(),
        tool_name: tool,
        input,
        tool_use_id: request.tool_use_id,
        questions: question_ids,
    };
    (spec, pending)
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

/// The default denial text when the host gives none.
const DENIED: &str = "The user denied this tool use.";

/// Encodes `response` to `pending` as a `PermissionResult`.
pub(crate) fn encode(pending: &PendingTool, response: &Response) -> Result<Encoded> {
    let tool_use = pending.tool_use_id.as_deref();
    let allow = |input: &Value| {
        let mut result = json!({"behavior": "allow", "updatedInput": input});
        if let Some(id) = tool_use {
            result["toolUseID"] = json!(id);
        }
        result
    };
    let deny = |message: &str, interrupt: bool| {
        let mut result = json!({"behavior": "deny", "message": message});
        if interrupt {
            result["interrupt"] = json!(true);
        }
        if let Some(id) = tool_use {
            result["toolUseID"] = json!(id);
        }
        result
    };
    let question = pending.tool_name == ASK_USER_QUESTION;
    match response {
        Response::Deny { reason } => {
            Ok(Encoded { result: deny(reason.as_deref().unwrap_or(DENIED), false), rule: None, denied: true })
        }
        Response::Cancel { reason } => {
            Ok(Encoded { result: deny(reason.as_deref().unwrap_or(DENIED), true), rule: None, denied: true })
        }
        Response::Answer { answer } if question => {
            let mut input = pending.input.clone();
            let answers = answers(pending, answer)?;
            if let Value::Object(map) = &mut input {
                map.insert("answers".to_owned(), Value::Object(answers));
            }
            Ok(Encoded { result: allow(&input), rule: None, denied: false })
        }
        Response::Approve { scope } if !question => {
            let rule = (*scope == Scope::Session).then(|| SessionRule::of(&pending.tool_name, &pending.input));
            Ok(Encoded { result: allow(&pending.input), rule, denied: false })
        }
        other => match edited_input(other) {
            Some((scope, input)) if !question => {
                if !input.is_object() {
                    return Err(Error::InvalidResponse("an edited tool input must be a JSON object".into()));
                }
                let rule = (scope == Scope::Session).then(|| SessionRule::of(&pending.tool_name, input));
                Ok(Encoded { result: allow(input), rule, denied: false })
            }
            _ => Err(Error::InvalidResponse(format!(
                "Claude Code's `{}` request takes {}",
                pending.tool_name,
                if question {
                    "an answer, deny or cancel"
                } else {
                    "approve, approve with edited input, deny or cancel"
                }
            ))),
        },
    }
}

/// The scope and input of an approval with edited input.
fn edited_input(response: &Response) -> Option<(Scope, &Value)> {
    match response {
        Response::ApproveEdited { scope, input } => Some((*scope, input)),
        _ => None,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn cli_request(json: Value) -> CliRequest {
        serde_json::from_value(json).unwrap()
    }

    fn bash() -> (RequestSpec, PendingTool) {
        request_spec(
            "r1",
            cli_request(json!({
                "subtype": "can_use_tool", "tool_name": "Bash", "display_name": "Bash",
                "input": {"command": "touch x && echo hi", "description": "Make x"},
                "tool_use_id": "toolu_1", "blocked_path": "/w/x",
            })),
        )
    }

    #[test]
    fn a_bash_call_is_a_command_approval_with_session_scope() {
        let (spec, pending) = bash();
        assert_eq!(spec.kind, RequestKind::CommandApproval);
        assert_eq!(spec.prompt, "Run `touch x && echo hi`");
        assert_eq!(spec.scopes, [Scope::Once, Scope::Session]);
        assert_eq!(spec.metadata["command"], "touch x && echo hi");
        assert_eq!(spec.metadata["blocked_path"], "/w/x");
        assert_eq!(spec.provider_ref.0, "r1");
        assert_eq!(pending.tool_use_id.as_deref(), Some("toolu_1"));
    }

    #[test]
    fn approvals_deny_and_cancel_encode_as_permission_results() {
        let (_, pending) = bash();
        let allowed = encode(&pending, &Response::approve()).unwrap();
        assert_eq!(
            allowed.result,
            json!({"behavior": "allow", "updatedInput": {"command": "touch x && echo hi", "description": "Make x"}, "toolUseID": "toolu_1"})
        );
        assert_eq!(allowed.rule, None);
        let session = encode(&pending, &Response::approve_with(Scope::Session)).unwrap();
        assert_eq!(session.rule, Some(SessionRule { tool: "Bash".into(), pattern: "touch x && echo hi".into() }));
        let edited = encode(&pending, &Response::approve_edited(json!({"command": "echo edited"}))).unwrap();
        assert_eq!(edited.result["updatedInput"], json!({"command": "echo edited"}));
        let denied = encode(&pending, &Response::deny("no shell today")).unwrap();
        assert_eq!(denied.result, json!({"behavior": "deny", "message": "no shell today", "toolUseID": "toolu_1"}));
        assert!(denied.denied);
        let cancelled = encode(&pending, &Response::cancel("stop")).unwrap();
        assert_eq!(cancelled.result["interrupt"], true);
        assert!(encode(&pending, &Response::answer("x")).is_err());
        assert!(encode(&pending, &Response::approve_edited(json!("not an object"))).is_err());
    }

    #[test]
    fn questions_are_answered_by_allowing_with_answers() {
        let input = json!({"questions": [{"question": "Which color?", "header": "Color", "options": [
            {"label": "Red", "description": "The red one"}, {"label": "Blue", "description": ""}], "multiSelect": false}]});
        let (spec, pending) = request_spec(
            "q1",
            cli_request(
                json!({"subtype": "can_use_tool", "tool_name": "AskUserQuestion", "input": input, "tool_use_id": "t"}),
            ),
        );
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
    fn session_rules_match_commands_files_and_whole_inputs() {
        assert_eq!(SessionRule::of("Bash", &json!({"command": "ls", "description": "a"})).pattern, "ls");
        assert_eq!(SessionRule::of("Write", &json!({"file_path": "/a", "content": "x"})).pattern, "/a");
        let a = SessionRule::of("mcp__e__echo", &json!({"text": "hi", "description": "one"}));
        let b = SessionRule::of("mcp__e__echo", &json!({"description": "two", "text": "hi"}));
        assert_eq!(a, b);
        assert_eq!(kind_of("mcp__e__echo"), RequestKind::Permission);
        assert_eq!(kind_of("Edit"), RequestKind::FileChangeApproval);
    }
}
