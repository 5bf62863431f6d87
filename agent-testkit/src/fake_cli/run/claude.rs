//! `claude -p --input-format stream-json --output-format stream-json`: NDJSON messages plus the
//! control protocol (`control_request` / `control_response`, `can_use_tool`, `interrupt`)
//! (`shared/protocols/claude.md`).

use std::time::Duration;

use serde_json::{Value, json};

use super::{Decision, Engine, Flow, State, Tool, content_text};
use crate::fake_cli::script::{ApprovalKind, EndStatus};

const MODEL: &str = "fake-model";

fn kind(msg: &Value) -> Option<&str> {
    msg.get("type").and_then(Value::as_str)
}

fn subtype(msg: &Value) -> Option<&str> {
    msg.pointer("/request/subtype").and_then(Value::as_str)
}

fn is_control_request(msg: &Value, name: &str) -> bool {
    kind(msg) == Some("control_request") && subtype(msg) == Some(name)
}

/// The session `--resume` or `--session-id` names, else the fake's fixed one.
pub(super) fn first_session(args: &[String]) -> String {
    let flag = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    flag("--resume").or_else(|| flag("--session-id")).unwrap_or_else(|| crate::fake_cli::CLAUDE_SESSION_ID.to_owned())
}

pub(super) fn is_handshake(msg: &Value) -> bool {
    is_control_request(msg, "initialize")
}

pub(super) fn is_turn_start(msg: &Value) -> bool {
    kind(msg) == Some("user")
}

pub(super) fn is_interrupt(msg: &Value) -> bool {
    is_control_request(msg, "interrupt")
}

fn success(request_id: &Value, response: Option<Value>) -> Value {
    let mut body = json!({"subtype": "success", "request_id": request_id});
    if let Some(response) = response {
        body["response"] = response;
    }
    json!({"type": "control_response", "response": body})
}

fn initialize_response() -> Value {
    json!({
        "commands": [], "agents": [], "output_style": "default", "available_output_styles": ["default"],
        "models": [{"value": "default", "resolvedModel": MODEL, "displayName": "Default"}],
        "account": {"tokenSource": "none", "apiKeySource": "ANTHROPIC_API_KEY", "apiProvider": "firstParty"},
        "pid": std::process::id(),
    })
}

pub(super) fn housekeeping(msg: &Value, state: &State) -> Option<Vec<Value>> {
    if kind(msg) != Some("control_request") {
        return None;
    }
    let id = &msg["request_id"];
    let response = match subtype(msg)? {
        "initialize" if state.handshake_done => Some(initialize_response()),
        "set_permission_mode" => Some(json!({"mode": msg["request"]["mode"]})),
        "set_model" | "set_max_thinking_tokens" => None,
        "mcp_status" => Some(json!({"mcpServers": []})),
        _ => return None,
    };
    Some(vec![success(id, response)])
}

pub(super) fn reply(msg: &Value, result: Option<Value>, error: Option<&str>) -> Option<Value> {
    if kind(msg) != Some("control_request") {
        return None;
    }
    let id = &msg["request_id"];
    Some(match error {
        Some(error) => {
            json!({"type": "control_response", "response": {"subtype": "error", "request_id": id, "error": error}})
        }
        None => success(id, result),
    })
}

pub(super) fn interrupt_ack(msg: &Value) -> Vec<Value> {
    vec![success(&msg["request_id"], None)]
}

fn session(e: &Engine) -> String {
    e.state().session.clone()
}

fn uuid(e: &Engine) -> String {
    format!("00000000-0000-4000-8000-{:012x}", e.next_id())
}

pub(super) async fn handshake(e: &Engine) {
    let msg = e.expect(is_handshake).await;
    e.send(success(&msg["request_id"], Some(initialize_response()))).await;
}

pub(super) async fn turn_start(e: &Engine) {
    let msg = e.expect(is_turn_start).await;
    let prompt = content_text(&msg["message"]["content"]);
    e.begin_turn(|n| n.to_string(), prompt);
    let (session, cwd) = {
        let state = e.state();
        (state.session.clone(), state.cwd.clone())
    };
    e.send(json!({
        "type": "system", "subtype": "init", "cwd": cwd, "session_id": session,
        "tools": ["Bash", "Edit", "Read", "Write", "AskUserQuestion"], "mcp_servers": [], "model": MODEL,
        "permissionMode": "default", "slash_commands": [], "apiKeySource": "ANTHROPIC_API_KEY",
        "claude_code_version": e.version, "output_style": "default", "agents": [], "skills": [], "plugins": [],
        "uuid": uuid(e),
    }))
    .await;
}

fn usage() -> Value {
    json!({"input_tokens": 10, "output_tokens": 5, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0})
}

async fn stream_event(e: &Engine, event: Value) {
    let frame = json!({"type": "stream_event", "event": event, "session_id": session(e), "parent_tool_use_id": null, "uuid": uuid(e)});
    e.send(frame).await;
}

/// An `assistant` message with `content` blocks.
async fn assistant(e: &Engine, message_id: &str, content: Value) {
    e.send(json!({
        "type": "assistant",
        "message": {
            "id": message_id, "type": "message", "role": "assistant", "model": MODEL, "content": content,
            "stop_reason": null, "stop_sequence": null, "usage": usage(),
        },
        "parent_tool_use_id": null, "session_id": session(e), "uuid": uuid(e),
    }))
    .await;
}

/// A `user` message with `content` (tool results, interrupt markers).
async fn user(e: &Engine, content: Value) {
    let frame = json!({
        "type": "user", "message": {"role": "user", "content": content},
        "parent_tool_use_id": null, "session_id": session(e), "uuid": uuid(e),
    });
    e.send(frame).await;
}

pub(super) async fn deltas(e: &Engine, deltas: &[String], delay: Duration, partial: bool) {
    let message_id = format!("msg_fake_{}", e.next_id());
    if partial {
        let message = json!({
            "id": message_id, "type": "message", "role": "assistant", "model": MODEL, "content": [],
            "stop_reason": null, "stop_sequence": null, "usage": usage(),
        });
        stream_event(e, json!({"type": "message_start", "message": message})).await;
        stream_event(
            e,
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        )
        .await;
    }
    for delta in deltas {
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        if partial {
            let event =
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": delta}});
            stream_event(e, event).await;
        }
    }
    let text = deltas.concat();
    e.set_turn_text(&text);
    assistant(e, &message_id, json!([{"type": "text", "text": text}])).await;
    if partial {
        stream_event(e, json!({"type": "content_block_stop", "index": 0})).await;
        let delta = json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"output_tokens": 5}});
        stream_event(e, delta).await;
        stream_event(e, json!({"type": "message_stop"})).await;
    }
}

async fn result(e: &Engine, subtype: &str, is_error: bool, text: Option<&str>, terminal_reason: &str) {
    let mut frame = json!({
        "type": "result", "subtype": subtype, "is_error": is_error, "duration_ms": 1, "duration_api_ms": 1,
        "num_turns": 1, "stop_reason": if is_error { Value::Null } else { json!("end_turn") },
        "session_id": session(e), "total_cost_usd": 0.0001, "usage": usage(), "modelUsage": {},
        "permission_denials": [], "terminal_reason": terminal_reason, "uuid": uuid(e),
    });
    if let Some(text) = text {
        frame["result"] = json!(text);
    }
    e.send(frame).await;
}

async fn interrupted(e: &Engine, marker: &str) {
    user(e, json!([{"type": "text", "text": marker}])).await;
    result(e, "error_during_execution", true, None, "aborted_streaming").await;
}

pub(super) async fn complete(e: &Engine, end: EndStatus, text: &str, message: &str) {
    match end {
        EndStatus::Completed => result(e, "success", false, Some(text), "completed").await,
        EndStatus::Failed => {
            let error_text = format!("API Error: {message}");
            let message_id = format!("msg_fake_{}", e.next_id());
            assistant(e, &message_id, json!([{"type": "text", "text": error_text}])).await;
            result(e, "success", true, Some(&error_text), "completed").await;
        }
        EndStatus::Interrupted => interrupted(e, "[Request interrupted by user]").await,
    }
}

/// Announces a tool call, asks `can_use_tool` and waits for the answer.
async fn can_use_tool(e: &Engine, name: &str, input: Value) -> (String, Value) {
    let tool_use_id = format!("toolu_fake_{}", e.next_id());
    let message_id = format!("msg_fake_{}", e.next_id());
    let block = json!([{"type": "tool_use", "id": tool_use_id, "name": name, "input": input}]);
    assistant(e, &message_id, block).await;
    let request_id = uuid(e);
    e.set_pending(Some(json!(request_id)));
    e.send(json!({
        "type": "control_request", "request_id": request_id,
        "request": {
            "subtype": "can_use_tool", "tool_name": name, "display_name": name, "input": input,
            "permission_suggestions": [], "tool_use_id": tool_use_id,
        },
    }))
    .await;
    let answer = e
        .expect(|m| {
            kind(m) == Some("control_response") && m.pointer("/response/request_id") == Some(&json!(request_id))
        })
        .await;
    e.set_pending(None);
    (tool_use_id, answer["response"].clone())
}

fn decision(response: &Value) -> Decision {
    let body = &response["response"];
    match (response["subtype"].as_str(), body["behavior"].as_str()) {
        (Some("success"), Some("allow")) => Decision::Approved,
        (Some("success"), Some("deny")) if body["interrupt"] == json!(true) => Decision::Cancelled,
        (Some("success"), Some("deny")) => {
            Decision::Denied(body["message"].as_str().unwrap_or("The user denied this tool use").to_owned())
        }
        _ => Decision::Denied(response["error"].as_str().unwrap_or("The user denied this tool use").to_owned()),
    }
}

async fn tool_result(e: &Engine, tool_use_id: &str, content: &str, is_error: bool) {
    user(e, json!([{"tool_use_id": tool_use_id, "type": "tool_result", "content": content, "is_error": is_error}]))
        .await;
}

pub(super) async fn approval(e: &Engine, tool: &Tool<'_>) -> Flow {
    let (name, input) = match tool.kind {
        ApprovalKind::Command => ("Bash", json!({"command": tool.command, "description": "Run a command"})),
        ApprovalKind::FileChange => ("Write", json!({"file_path": tool.path, "content": tool.content})),
    };
    let (tool_use_id, response) = can_use_tool(e, name, input).await;
    let decision = decision(&response);
    match &decision {
        Decision::Approved => {
            tool_result(e, &tool_use_id, &tool.output, false).await;
            e.decided(&decision, &tool.output);
            Flow::Continue
        }
        Decision::Denied(message) => {
            tool_result(e, &tool_use_id, message, true).await;
            e.decided(&decision, message);
            Flow::Continue
        }
        Decision::Cancelled => {
            let message = "The user doesn't want to proceed with this tool use.";
            tool_result(e, &tool_use_id, message, true).await;
            e.decided(&decision, message);
            e.end_turn();
            interrupted(e, "[Request interrupted by user for tool use]").await;
            Flow::TurnEnded
        }
    }
}

pub(super) async fn question(e: &Engine, question: &str, options: &[String], header: &str) -> String {
    let options: Vec<Value> = options.iter().map(|o| json!({"label": o, "description": ""})).collect();
    let input =
        json!({"questions": [{"question": question, "header": header, "options": options, "multiSelect": false}]});
    let (tool_use_id, response) = can_use_tool(e, "AskUserQuestion", input).await;
    let chosen = &response["response"]["updatedInput"]["answers"][question];
    let answer = match chosen {
        Value::String(answer) => answer.clone(),
        Value::Array(answers) => answers.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", "),
        _ => String::new(),
    };
    if decision(&response) == Decision::Approved {
        let text = format!(
            "Your questions have been answered: \"{question}\"=\"{answer}\". You can now continue with these answers in mind."
        );
        tool_result(e, &tool_use_id, &text, false).await;
    } else {
        tool_result(e, &tool_use_id, "The user declined to answer.", true).await;
    }
    answer
}

pub(super) async fn interrupt(e: &Engine, msg: &Value, pending: Option<Value>) {
    if let Some(request_id) = pending {
        e.send(json!({"type": "control_cancel_request", "request_id": request_id})).await;
    }
    e.send(success(&msg["request_id"], None)).await;
    interrupted(e, "[Request interrupted by user]").await;
}
