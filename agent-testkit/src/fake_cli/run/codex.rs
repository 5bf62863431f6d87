//! `codex app-server`: JSON-RPC lines without `"jsonrpc"`, server requests with their own IDs
//! from 0, notifications carrying `emittedAtMs` (`shared/protocols/codex.md`).

use std::time::Duration;

use serde_json::{Value, json};

use super::{Decision, Engine, Flow, State, Tool, now_ms};
use crate::fake_cli::script::{ApprovalKind, EndStatus};

/// The error code Codex uses for every request error.
const INVALID_REQUEST: i64 = -32600;

fn method(msg: &Value) -> Option<&str> {
    msg.get("method").and_then(Value::as_str)
}

fn notification(method: &str, params: Value) -> Value {
    json!({"method": method, "params": params, "emittedAtMs": now_ms()})
}

fn error(id: &Value, message: &str) -> Value {
    json!({"id": id, "error": {"code": INVALID_REQUEST, "message": message}})
}

/// The thread every new codex thread gets (a resumed one keeps its own, set at the handshake).
pub(super) fn first_session() -> String {
    crate::fake_cli::CODEX_THREAD_ID.to_owned()
}

pub(super) fn is_handshake(msg: &Value) -> bool {
    method(msg) == Some("initialize")
}

pub(super) fn is_turn_start(msg: &Value) -> bool {
    method(msg) == Some("turn/start")
}

pub(super) fn is_interrupt(msg: &Value) -> bool {
    method(msg) == Some("turn/interrupt")
}

pub(super) fn housekeeping(msg: &Value, state: &State) -> Option<Vec<Value>> {
    match (method(msg), msg.get("id")) {
        // The client's only notification; nothing answers it.
        (Some("initialized"), None) => Some(Vec::new()),
        (Some("initialize"), Some(id)) if state.handshake_done => Some(vec![error(id, "Already initialized")]),
        // What the provider reads of codex's configuration and models, as the real one answers.
        (Some("config/read"), Some(id)) => Some(vec![json!({"id": id, "result": {
            "config": {"model": "fake-model", "model_provider": "fake"}, "origins": {},
        }})]),
        (Some("model/list"), Some(id)) => Some(vec![json!({"id": id, "result": {"data": [{
            "id": "fake-model", "model": "fake-model", "displayName": "Fake model", "description": "",
            "hidden": false, "isDefault": true, "defaultReasoningEffort": "medium", "supportedReasoningEfforts": [],
        }], "nextCursor": null}})]),
        _ => None,
    }
}

pub(super) fn reply(msg: &Value, result: Option<Value>, error_message: Option<&str>) -> Option<Value> {
    let id = msg.get("id")?;
    Some(match error_message {
        Some(message) => error(id, message),
        None => json!({"id": id, "result": result.unwrap_or_else(|| json!({}))}),
    })
}

pub(super) fn interrupt_ack(msg: &Value, turn_active: bool) -> Vec<Value> {
    let id = msg.get("id").cloned().unwrap_or(Value::Null);
    if turn_active { vec![json!({"id": id, "result": {}})] } else { vec![error(&id, "no active turn to interrupt")] }
}

fn ids(e: &Engine) -> (String, String) {
    let state = e.state();
    (state.session.clone(), state.turn_id())
}

pub(super) async fn handshake(e: &Engine) {
    let init = e.expect(|m| is_handshake(m) && m.get("id").is_some()).await;
    let user_agent = format!("fake-codex/{}", e.version);
    e.send(json!({"id": init["id"], "result": {
        "userAgent": user_agent, "codexHome": "/nonexistent/fake-codex-home",
        "platformFamily": "unix", "platformOs": "linux",
    }}))
    .await;
    let start = e
        .expect(|m| {
            matches!(method(m), Some("thread/start" | "thread/resume" | "thread/fork")) && m.get("id").is_some()
        })
        .await;
    let params = &start["params"];
    if method(&start) == Some("thread/resume")
        && let Some(thread) = params.get("threadId").and_then(Value::as_str)
    {
        e.state().session = thread.to_owned();
    }
    let (thread_id, cwd) = {
        let state = e.state();
        let cwd = params.get("cwd").and_then(Value::as_str).map_or_else(|| state.cwd.clone(), str::to_owned);
        (state.session.clone(), cwd)
    };
    let thread = json!({
        "id": thread_id, "preview": "", "ephemeral": false, "modelProvider": "fake", "model": "fake-model",
        "status": {"type": "idle"}, "cwd": cwd, "cliVersion": e.version, "source": "vscode", "turns": [],
    });
    e.send(json!({"id": start["id"], "result": {
        "thread": thread, "model": "fake-model", "modelProvider": "fake", "cwd": cwd,
        "approvalPolicy": params.get("approvalPolicy").cloned().unwrap_or_else(|| json!("never")),
        "sandbox": {"type": "readOnly", "networkAccess": false},
    }}))
    .await;
    e.send(notification("thread/started", json!({"thread": thread}))).await;
}

pub(super) async fn turn_start(e: &Engine, announce_after: Duration) {
    let msg = e.expect(|m| is_turn_start(m) && m.get("id").is_some()).await;
    let input = msg["params"]["input"].as_array().cloned().unwrap_or_default();
    let prompt: Vec<&str> = input.iter().filter_map(|item| item.get("text").and_then(Value::as_str)).collect();
    let prompt = prompt.join("\n");
    let turn_id = e.begin_turn(crate::fake_cli::codex_turn_id, prompt.clone());
    let thread_id = e.state().session.clone();
    let turn = json!({"id": turn_id, "items": [], "itemsView": "notLoaded", "status": "inProgress", "error": null});
    let delayed = !announce_after.is_zero();
    e.state().unannounced = delayed;
    e.send(json!({"id": msg["id"], "result": {"turn": turn}})).await;
    if delayed {
        tokio::time::sleep(announce_after).await;
    }
    e.send(status(&thread_id, json!({"type": "active", "activeFlags": []}))).await;
    e.state().unannounced = false;
    e.send(notification("turn/started", json!({"threadId": thread_id, "turn": turn}))).await;
    let item = json!({
        "type": "userMessage", "id": format!("fake-user-{}", e.next_id()),
        "content": [{"type": "text", "text": prompt, "text_elements": []}],
    });
    for method in ["item/started", "item/completed"] {
        e.send(notification(method, json!({"item": item, "threadId": thread_id, "turnId": turn_id}))).await;
    }
}

fn status(thread_id: &str, status: Value) -> Value {
    notification("thread/status/changed", json!({"threadId": thread_id, "status": status}))
}

pub(super) async fn deltas(e: &Engine, deltas: &[String], delay: Duration) {
    let (thread_id, turn_id) = ids(e);
    let item_id = format!("msg_fake_{}", e.next_id());
    let item = |text: &str| json!({"type": "agentMessage", "id": item_id, "text": text});
    e.send(notification("item/started", json!({"item": item(""), "threadId": thread_id, "turnId": turn_id}))).await;
    for delta in deltas {
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let params = json!({"threadId": thread_id, "turnId": turn_id, "itemId": item_id, "delta": delta});
        e.send(notification("item/agentMessage/delta", params)).await;
    }
    let text = deltas.concat();
    e.set_turn_text(&text);
    e.send(notification("item/completed", json!({"item": item(&text), "threadId": thread_id, "turnId": turn_id})))
        .await;
}

pub(super) async fn complete(e: &Engine, end: EndStatus, text: &str, message: &str) {
    let (thread_id, turn_id) = ids(e);
    let (status_name, error) = match end {
        EndStatus::Completed => ("completed", Value::Null),
        EndStatus::Failed => ("failed", json!({"message": message, "codexErrorInfo": "other"})),
        EndStatus::Interrupted => ("interrupted", Value::Null),
    };
    if end == EndStatus::Failed {
        let params = json!({"error": error, "willRetry": false, "threadId": thread_id, "turnId": turn_id});
        e.send(notification("error", params)).await;
    }
    if end == EndStatus::Completed {
        let usage = json!({"totalTokens": 15, "inputTokens": 10, "cachedInputTokens": 0, "outputTokens": 5, "reasoningOutputTokens": 0});
        let params = json!({"threadId": thread_id, "turnId": turn_id, "tokenUsage": {"total": usage, "last": usage}});
        e.send(notification("thread/tokenUsage/updated", params)).await;
    }
    let items = if text.is_empty() || end != EndStatus::Completed {
        json!([])
    } else {
        json!([{"type": "agentMessage", "id": format!("msg_fake_{}", e.next_id()), "text": text}])
    };
    end_turn(e, &thread_id, json!({
        "id": turn_id, "items": items, "itemsView": "summary", "status": status_name, "error": error, "durationMs": 1,
    }))
    .await;
}

async fn end_turn(e: &Engine, thread_id: &str, turn: Value) {
    e.send(status(thread_id, json!({"type": "idle"}))).await;
    e.send(notification("turn/completed", json!({"threadId": thread_id, "turn": turn}))).await;
}

/// Sends a server request and waits for the client's answer to it.
async fn server_request(e: &Engine, method: &str, params: Value) -> Value {
    let id = {
        let mut state = e.state();
        let id = state.server_requests;
        state.server_requests += 1;
        id
    };
    e.set_pending(Some(json!(id)));
    e.send(json!({"method": method, "id": id, "params": params})).await;
    let answer = e.expect(|m| m.get("id") == Some(&json!(id)) && m.get("method").is_none()).await;
    e.set_pending(None);
    let (thread_id, _) = ids(e);
    e.send(notification("serverRequest/resolved", json!({"threadId": thread_id, "requestId": id}))).await;
    answer
}

fn decision(answer: &Value) -> Decision {
    match &answer["result"]["decision"] {
        Value::String(d) if d.starts_with("accept") => Decision::Approved,
        Value::Object(map) if map.keys().any(|k| k.starts_with("accept")) => Decision::Approved,
        Value::String(d) if d == "cancel" => Decision::Cancelled,
        _ => Decision::Denied("rejected by user".to_owned()),
    }
}

pub(super) async fn approval(e: &Engine, tool: &Tool<'_>) -> Flow {
    let (thread_id, turn_id) = ids(e);
    let item_id = format!("call_fake_{}", e.next_id());
    let (item, method, params) = match tool.kind {
        ApprovalKind::Command => {
            let actions = json!([{"type": "unknown", "command": tool.command}]);
            let cwd = e.state().cwd.clone();
            (
                json!({
                    "type": "commandExecution", "id": item_id, "command": tool.command, "cwd": cwd,
                    "processId": null, "source": "agent", "status": "inProgress", "commandActions": actions,
                    "aggregatedOutput": null, "exitCode": null,
                }),
                "item/commandExecution/requestApproval",
                json!({
                    "threadId": thread_id, "turnId": turn_id, "itemId": item_id, "startedAtMs": now_ms(),
                    "command": tool.command, "cwd": cwd, "commandActions": actions,
                    "availableDecisions": ["accept", "acceptForSession", "cancel"],
                }),
            )
        }
        ApprovalKind::FileChange => (
            json!({
                "type": "fileChange", "id": item_id, "status": "inProgress",
                "changes": [{"path": tool.path, "kind": {"type": "add"}, "diff": tool.content}],
            }),
            "item/fileChange/requestApproval",
            json!({
                "threadId": thread_id, "turnId": turn_id, "itemId": item_id, "startedAtMs": now_ms(),
                "reason": null, "grantRoot": null,
            }),
        ),
    };
    e.send(notification("item/started", json!({"item": item, "threadId": thread_id, "turnId": turn_id}))).await;
    e.send(status(&thread_id, json!({"type": "active", "activeFlags": ["waitingOnApproval"]}))).await;
    let answer = server_request(e, method, params).await;
    e.send(status(&thread_id, json!({"type": "active", "activeFlags": []}))).await;
    let decision = decision(&answer);
    let mut done = item;
    if decision == Decision::Approved {
        done["status"] = json!("completed");
        if tool.kind == ApprovalKind::Command {
            done["aggregatedOutput"] = json!(tool.output);
            done["exitCode"] = json!(0);
        }
        e.decided(&decision, &tool.output);
    } else {
        done["status"] = json!("declined");
        e.decided(&decision, "rejected by user");
    }
    e.send(notification("item/completed", json!({"item": done, "threadId": thread_id, "turnId": turn_id}))).await;
    if decision != Decision::Cancelled {
        return Flow::Continue;
    }
    e.end_turn();
    end_turn(e, &thread_id, json!({"id": turn_id, "items": [], "status": "interrupted", "error": null})).await;
    Flow::TurnEnded
}

pub(super) async fn question(e: &Engine, question: &str, options: &[String], header: &str) -> String {
    let (thread_id, turn_id) = ids(e);
    let question_id = format!("fake_question_{}", e.next_id());
    let options: Vec<Value> = options.iter().map(|o| json!({"label": o, "description": ""})).collect();
    let params = json!({
        "threadId": thread_id, "turnId": turn_id, "itemId": format!("call_fake_{}", e.next_id()), "isBlocking": true,
        "questions": [{
            "id": question_id, "header": header, "question": question, "options": options,
            "isOther": false, "isSecret": false,
        }],
    });
    let answer = server_request(e, "item/tool/requestUserInput", params).await;
    let chosen = answer["result"]["answers"][&question_id]["answers"].as_array().cloned().unwrap_or_default();
    chosen.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", ")
}

pub(super) async fn interrupt(e: &Engine, msg: &Value, pending: Option<Value>) {
    let (thread_id, turn_id) = ids(e);
    e.send(json!({"id": msg["id"], "result": {}})).await;
    if let Some(request_id) = pending {
        e.send(notification("serverRequest/resolved", json!({"threadId": thread_id, "requestId": request_id}))).await;
    }
    end_turn(
        e,
        &thread_id,
        json!({"id": turn_id, "items": [], "status": "interrupted", "error": null, "durationMs": 1}),
    )
    .await;
}
