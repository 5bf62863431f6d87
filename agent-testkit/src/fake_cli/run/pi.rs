//! `pi --mode rpc`: JSON commands with optional `id`, `response` lines, untagged events, and the
//! extension UI sub-protocol for approvals and questions (`shared/protocols/pi.md`, 1.6.0).

use std::time::Duration;

use serde_json::{Value, json};

use super::{Decision, Engine, Flow, State, Tool, content_text, now_ms};
use crate::fake_cli::script::{ApprovalKind, EndStatus};

const MODEL: &str = "fake-model";
const PROVIDER: &str = "fake";
/// The tool result of a refused approval (what the approval extension returns).
const BLOCKED: &str = "Blocked by RPC client";

fn kind(msg: &Value) -> Option<&str> {
    msg.get("type").and_then(Value::as_str)
}

/// Like pi, a session of its own per process: the one `--session <dir>/<time>_<id>.jsonl`
/// names, else a new ID.
pub(super) fn first_session(args: &[String]) -> String {
    let file = args.iter().position(|a| a == "--session").and_then(|i| args.get(i + 1));
    file.and_then(|file| {
        let name = file.rsplit('/').next()?.strip_suffix(".jsonl")?;
        Some(name.rsplit_once('_').map_or(name, |(_, id)| id).to_owned())
    })
    .unwrap_or_else(|| {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        format!("00000000-0000-7000-8000-{:06x}{:06x}", std::process::id() & 0xff_ffff, nanos & 0xff_ffff)
    })
}

pub(super) fn is_handshake(msg: &Value) -> bool {
    kind(msg) == Some("get_state")
}

pub(super) fn is_turn_start(msg: &Value) -> bool {
    kind(msg) == Some("prompt")
}

pub(super) fn is_interrupt(msg: &Value) -> bool {
    kind(msg) == Some("abort")
}

/// A `response` line to `msg`: `success` with optional `data`, or an error.
fn response(msg: &Value, data: Option<Value>, error: Option<&str>) -> Value {
    let mut frame = json!({"type": "response", "command": kind(msg).unwrap_or_default(), "success": error.is_none()});
    if let Some(id) = msg.get("id") {
        frame["id"] = id.clone();
    }
    match (error, data) {
        (Some(error), _) => frame["error"] = json!(error),
        (None, Some(data)) => frame["data"] = data,
        (None, None) => {}
    }
    frame
}

fn get_state(state: &State) -> Value {
    json!({
        "model": {"id": MODEL, "provider": PROVIDER, "api": "openai-completions"},
        "thinkingLevel": "off", "isStreaming": state.turn.is_some(), "isCompacting": false,
        "steeringMode": "one-at-a-time", "followUpMode": "one-at-a-time", "sessionId": state.session,
        "autoCompactionEnabled": false, "messageCount": state.messages, "pendingMessageCount": 0,
    })
}

pub(super) fn housekeeping(msg: &Value, state: &State) -> Option<Vec<Value>> {
    let answer = match kind(msg)? {
        "get_state" if state.handshake_done => response(msg, Some(get_state(state)), None),
        "prompt" if state.turn.is_some() && msg.get("streamingBehavior").is_none() => response(
            msg,
            None,
            Some(
                "Agent is already processing. Specify streamingBehavior ('steer' or 'followUp') to queue the message.",
            ),
        ),
        "set_auto_retry" | "set_steering_mode" | "set_follow_up_mode" | "set_thinking_level" | "set_session_name" => {
            response(msg, None, None)
        }
        "get_session_stats" => response(
            msg,
            Some(json!({
                "sessionId": state.session, "userMessages": state.turns, "totalMessages": state.messages,
                "tokens": {"input": 10, "output": 5, "cacheRead": 0, "cacheWrite": 0, "total": 15}, "cost": 0,
            })),
            None,
        ),
        "get_last_assistant_text" => {
            let text = state.turn.as_ref().map(|t| t.text.clone());
            response(msg, Some(json!({"text": text})), None)
        }
        "get_messages" => response(msg, Some(json!({"messages": []})), None),
        _ => return None,
    };
    Some(vec![answer])
}

pub(super) fn reply(msg: &Value, result: Option<Value>, error: Option<&str>) -> Option<Value> {
    kind(msg)?;
    Some(response(msg, result, error))
}

pub(super) fn parse_error(line: &[u8]) -> Value {
    let error = match serde_json::from_slice::<Value>(line) {
        Err(e) => format!("Failed to parse command: {e}"),
        Ok(_) => "Failed to parse command".to_owned(),
    };
    json!({"type": "response", "command": "parse", "success": false, "error": error})
}

pub(super) fn interrupt_ack(msg: &Value) -> Vec<Value> {
    vec![response(msg, None, None)]
}

pub(super) async fn handshake(e: &Engine) {
    let msg = e.expect(is_handshake).await;
    let state = get_state(&e.state());
    e.send(response(&msg, Some(state), None)).await;
}

fn text_content(text: &str) -> Value {
    json!([{"type": "text", "text": text}])
}

fn assistant(content: Value, stop_reason: &str) -> Value {
    json!({
        "role": "assistant", "content": content, "api": "openai-completions", "provider": PROVIDER, "model": MODEL,
        "usage": {"input": 10, "output": 5, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 15},
        "stopReason": stop_reason, "timestamp": now_ms(),
    })
}

pub(super) async fn turn_start(e: &Engine) {
    let msg = e.expect(is_turn_start).await;
    let prompt = msg.get("message").map(content_text).unwrap_or_default();
    e.begin_turn(|n| n.to_string(), prompt.clone());
    e.send(response(&msg, Some(json!({"disposition": "started"})), None)).await;
    e.send(json!({"type": "agent_start"})).await;
    e.send(json!({"type": "turn_start"})).await;
    let user = json!({"role": "user", "content": text_content(&prompt), "timestamp": now_ms()});
    e.send(json!({"type": "message_start", "message": user})).await;
    e.send(json!({"type": "message_end", "message": user})).await;
}

async fn update(e: &Engine, event: Value) {
    e.send(json!({"type": "message_update", "assistantMessageEvent": event})).await;
}

pub(super) async fn deltas(e: &Engine, deltas: &[String], delay: Duration) {
    e.send(json!({"type": "message_start", "message": assistant(json!([]), "stop")})).await;
    update(e, json!({"type": "text_start", "contentIndex": 0})).await;
    for delta in deltas {
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        update(e, json!({"type": "text_delta", "contentIndex": 0, "delta": delta})).await;
    }
    let text = deltas.concat();
    e.set_turn_text(&text);
    update(e, json!({"type": "text_end", "contentIndex": 0, "content": text})).await;
    e.send(json!({"type": "message_end", "message": assistant(text_content(&text), "stop")})).await;
}

/// Ends the agent run: `turn_end`, `agent_end`, `agent_settled`.
async fn settle(e: &Engine, last: Value, aborted: bool) {
    e.send(json!({"type": "turn_end", "message": last, "toolResults": []})).await;
    e.send(json!({"type": "agent_end", "messages": [], "willRetry": false})).await;
    e.send(json!({"type": "agent_settled", "aborted": aborted})).await;
}

async fn stopped(e: &Engine, stop_reason: &str, error: &str) -> Value {
    let mut message = assistant(json!([]), stop_reason);
    message["errorMessage"] = json!(error);
    e.send(json!({"type": "message_start", "message": message})).await;
    e.send(json!({"type": "message_end", "message": message})).await;
    message
}

pub(super) async fn complete(e: &Engine, end: EndStatus, text: &str, message: &str) {
    match end {
        EndStatus::Completed => settle(e, assistant(text_content(text), "stop"), false).await,
        EndStatus::Failed => {
            let last = stopped(e, "error", message).await;
            settle(e, last, false).await;
        }
        EndStatus::Interrupted => {
            let last = stopped(e, "aborted", "Request was aborted").await;
            settle(e, last, true).await;
        }
    }
}

/// Announces a tool call and starts executing it; returns its call ID.
async fn tool_call(e: &Engine, name: &str, args: &Value) -> String {
    let call_id = format!("call_fake_{}", e.next_id());
    let call = json!({"type": "toolCall", "id": call_id, "name": name, "arguments": args});
    e.send(json!({"type": "message_start", "message": assistant(json!([]), "toolUse")})).await;
    update(e, json!({"type": "toolcall_start", "contentIndex": 0, "id": call_id, "toolName": name})).await;
    update(e, json!({"type": "toolcall_end", "contentIndex": 0, "toolCall": call})).await;
    e.send(json!({"type": "message_end", "message": assistant(json!([call]), "toolUse")})).await;
    e.send(json!({"type": "tool_execution_start", "toolCallId": call_id, "toolName": name, "args": args})).await;
    call_id
}

/// Ends a tool call with its result, closing the model turn that asked for it.
async fn tool_end(e: &Engine, call_id: &str, name: &str, text: &str, is_error: bool) {
    let result = json!({"content": text_content(text), "details": {}});
    e.send(json!({"type": "tool_execution_end", "toolCallId": call_id, "toolName": name, "result": result, "isError": is_error}))
        .await;
    let message = json!({
        "role": "toolResult", "toolCallId": call_id, "toolName": name, "content": text_content(text),
        "isError": is_error, "timestamp": now_ms(),
    });
    e.send(json!({"type": "message_start", "message": message})).await;
    e.send(json!({"type": "message_end", "message": message})).await;
    e.send(json!({"type": "turn_end", "message": message, "toolResults": [message]})).await;
    e.send(json!({"type": "turn_start"})).await;
}

/// Sends an extension UI request and waits for its response.
async fn ui_request(e: &Engine, method: &str, fields: Value) -> Value {
    let id = format!("00000000-0000-4000-8000-{:012x}", e.next_id());
    let mut request = json!({"type": "extension_ui_request", "id": id, "method": method});
    if let (Some(request), Value::Object(fields)) = (request.as_object_mut(), fields) {
        request.extend(fields);
    }
    e.set_pending(Some(json!(id)));
    e.send(request).await;
    let answer = e.expect(|m| kind(m) == Some("extension_ui_response") && m.get("id") == Some(&json!(id))).await;
    e.set_pending(None);
    answer
}

pub(super) async fn approval(e: &Engine, tool: &Tool<'_>) -> Flow {
    let (name, args, title, message) = match tool.kind {
        ApprovalKind::Command => ("bash", json!({"command": tool.command}), "Allow bash?", tool.command),
        ApprovalKind::FileChange => {
            ("write", json!({"path": tool.path, "content": tool.content}), "Allow write?", tool.path)
        }
    };
    let call_id = tool_call(e, name, &args).await;
    let answer = ui_request(e, "confirm", json!({"title": title, "message": message, "timeout": 60_000})).await;
    let approved = answer["confirmed"] == json!(true);
    let (decision, text) = if approved {
        (Decision::Approved, tool.output.clone())
    } else {
        (Decision::Denied(BLOCKED.to_owned()), BLOCKED.to_owned())
    };
    e.decided(&decision, &text);
    tool_end(e, &call_id, name, &text, !approved).await;
    Flow::Continue
}

pub(super) async fn question(e: &Engine, question: &str, options: &[String]) -> String {
    let call_id = tool_call(e, "ask_user", &json!({"question": question, "options": options})).await;
    let answer = ui_request(e, "select", json!({"title": question, "options": options})).await;
    let chosen = answer["value"].as_str().unwrap_or_default().to_owned();
    let text = if chosen.is_empty() { "(no answer)".to_owned() } else { format!("User chose: {chosen}") };
    tool_end(e, &call_id, "ask_user", &text, false).await;
    chosen
}

/// Pi resolves an open dialog to its default by itself; nothing is withdrawn.
pub(super) async fn interrupt(e: &Engine, msg: &Value) {
    let last = stopped(e, "aborted", "Request was aborted").await;
    settle(e, last, true).await;
    e.send(response(msg, None, None)).await;
}
