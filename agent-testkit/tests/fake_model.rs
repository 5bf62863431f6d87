//! The fake model server, driven by a plain HTTP/1.1 client.

mod support;

use std::time::Duration;

use agent_testkit::{Endpoint, FakeModel, Scenario};
use serde_json::{Value, json};
use support::{read_response, request, send};

fn responses_request(text: &str) -> Value {
    json!({"model": "fake-model", "stream": true, "input": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    ]})
}

#[tokio::test]
async fn responses_text_streams_the_codex_event_sequence() {
    let server = FakeModel::start(Scenario::new().text("Hello from the fake model")).await.unwrap();
    let response = request(server.addr(), "POST", "/v1/responses", Some(&responses_request("hi"))).await;
    assert_eq!(response.status, 200);
    assert_eq!(response.header("content-type"), Some("text/event-stream"));
    assert!(response.complete);
    let names: Vec<String> = response.sse().into_iter().filter_map(|(e, _)| e).collect();
    assert_eq!(names.first().map(String::as_str), Some("response.created"));
    assert_eq!(names.last().map(String::as_str), Some("response.completed"));
    assert!(names.iter().any(|n| n == "response.output_item.done"));
    let events = response.sse_json();
    let text: String = events
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(text, "Hello from the fake model");
    let sequence: Vec<u64> = events.iter().map(|e| e["sequence_number"].as_u64().unwrap()).collect();
    assert_eq!(sequence, (0..events.len() as u64).collect::<Vec<_>>());

    let log = server.requests();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].endpoint, Endpoint::Responses);
    assert_eq!(log[0].step, Some(0));
    assert_eq!(log[0].body.as_ref().unwrap()["input"][0]["content"][0]["text"], "hi");
    assert_eq!(log[0].header("x-api-key"), Some("sk-test-secret"));
    assert!(!format!("{log:?}").contains("sk-test-secret"));
}

#[tokio::test]
async fn messages_accepts_claude_code_requests() {
    let server = FakeModel::start(Scenario::new().echo("You said: ")).await.unwrap();
    let head = request(server.addr(), "HEAD", "/", None).await;
    assert_eq!(head.status, 200);
    let count =
        request(server.addr(), "POST", "/v1/messages/count_tokens?beta=true", Some(&json!({"messages": []}))).await;
    assert_eq!(count.status, 200);
    assert!(serde_json::from_str::<Value>(&count.body).unwrap()["input_tokens"].is_u64());
    let body = json!({"model": "claude-opus-4-8", "stream": true, "messages": [
        {"role": "user", "content": [
            {"type": "text", "text": "<system-reminder>today is a day</system-reminder>"},
            {"type": "text", "text": "Say hello"}
        ]},
        {"role": "system", "content": "Available agent types: none"}
    ]});
    let response = request(server.addr(), "POST", "/v1/messages?beta=true", Some(&body)).await;
    assert_eq!(response.status, 200);
    let events = response.sse_json();
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(types[..3], ["message_start", "ping", "content_block_start"]);
    assert_eq!(types[types.len() - 3..], ["content_block_stop", "message_delta", "message_stop"]);
    assert_eq!(events[0]["message"]["model"], "claude-opus-4-8");
    let text: String = events.iter().filter_map(|e| e["delta"]["text"].as_str()).collect();
    assert_eq!(text, "You said: Say hello");
    assert_eq!(events[events.len() - 2]["delta"]["stop_reason"], "end_turn");

    let log = server.requests();
    let endpoints: Vec<Endpoint> = log.iter().map(|r| r.endpoint).collect();
    assert_eq!(endpoints, [Endpoint::Head, Endpoint::CountTokens, Endpoint::Messages]);
    assert_eq!(log[2].query.as_deref(), Some("beta=true"));
    assert_eq!(log[2].path, "/v1/messages");
    assert_eq!(server.model_requests().len(), 1);
    assert_eq!(server.remaining_steps(), 0);

    // Claude Code checks a model with a request that does not stream (2.1.332, before it
    // switches models): a short message, no step taken, not a model call.
    let check = json!({"model": "claude-sonnet-4-5", "max_tokens": 1, "messages": [{"role": "user", "content": "Hi"}]});
    let response = request(server.addr(), "POST", "/v1/messages?beta=true", Some(&check)).await;
    assert_eq!(response.status, 200);
    let message: Value = serde_json::from_str(&response.body).unwrap();
    assert_eq!((message["type"].as_str(), message["model"].as_str()), (Some("message"), Some("claude-sonnet-4-5")));
    assert!(message["usage"]["input_tokens"].is_u64(), "{message}");
    assert_eq!(server.requests().last().map(|r| r.endpoint), Some(Endpoint::MessagesCheck));
    assert_eq!(server.model_requests().len(), 1);
}

#[tokio::test]
async fn tool_call_then_reply_quoting_the_result_in_chat_completions() {
    let scenario = Scenario::new().shell("echo hi").quote_tool_result("Tool said: ");
    let server = FakeModel::start(scenario).await.unwrap();
    let tools = json!([{"type": "function", "function": {"name": "bash", "parameters": {}}}]);
    let first = json!({"model": "fake-model", "stream": true, "tools": tools, "messages": [{"role": "user", "content": "run it"}]});
    let response = request(server.addr(), "POST", "/v1/chat/completions", Some(&first)).await;
    let chunks = response.sse_json();
    let call = &chunks[1]["choices"][0]["delta"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "bash");
    let arguments = chunks[2]["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str().unwrap();
    assert_eq!(serde_json::from_str::<Value>(arguments).unwrap(), json!({"command": "echo hi"}));
    assert!(chunks.iter().any(|c| c["choices"][0]["finish_reason"] == "tool_calls"));
    assert!(response.body.trim_end().ends_with("data: [DONE]"));

    let second = json!({"model": "fake-model", "stream": true, "tools": tools, "messages": [
        {"role": "user", "content": "run it"},
        {"role": "assistant", "tool_calls": [{"id": call["id"], "type": "function", "function": {"name": "bash", "arguments": arguments}}]},
        {"role": "tool", "tool_call_id": call["id"], "content": "hi\n"}
    ]});
    let response = request(server.addr(), "POST", "/v1/chat/completions", Some(&second)).await;
    let text: String =
        response.sse_json().iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
    assert_eq!(text, "Tool said: hi\n");
}

#[tokio::test]
async fn codex_file_write_is_an_apply_patch_custom_tool_call() {
    let server = FakeModel::start(Scenario::new().write_file("notes.txt", "hello\n")).await.unwrap();
    let mut body = responses_request("write it");
    body["tools"] = json!([{"type": "function", "name": "exec_command"}, {"type": "custom", "name": "apply_patch"}]);
    let response = request(server.addr(), "POST", "/v1/responses", Some(&body)).await;
    let done = response.sse_json().into_iter().find(|e| e["type"] == "response.output_item.done").unwrap();
    assert_eq!(done["item"]["type"], "custom_tool_call");
    assert_eq!(done["item"]["name"], "apply_patch");
    assert_eq!(done["item"]["input"], "*** Begin Patch\n*** Add File: notes.txt\n+hello\n*** End Patch\n");
}

#[tokio::test]
async fn rate_limit_carries_reset_headers_in_each_format() {
    let server = FakeModel::start(Scenario::new().rate_limited(30).rate_limited(30)).await.unwrap();
    let openai = request(server.addr(), "POST", "/v1/responses", Some(&responses_request("hi"))).await;
    assert_eq!(openai.status, 429);
    assert_eq!(openai.header("retry-after"), Some("30"));
    assert_eq!(openai.header("x-ratelimit-reset-requests"), Some("30s"));
    let error: Value = serde_json::from_str(&openai.body).unwrap();
    assert_eq!(error["error"]["type"], "rate_limit_exceeded");

    let body = json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "hi"}]});
    let anthropic = request(server.addr(), "POST", "/v1/messages", Some(&body)).await;
    assert_eq!(anthropic.status, 429);
    let reset = anthropic.header("anthropic-ratelimit-requests-reset").unwrap();
    assert!(reset.len() == 20 && reset.ends_with('Z'), "{reset}");
    let error: Value = serde_json::from_str(&anthropic.body).unwrap();
    assert_eq!(
        error,
        json!({"type": "error", "error": {"type": "rate_limit_error", "message": "fake model: rate limited"}})
    );
}

#[tokio::test]
async fn server_errors_and_an_exhausted_scenario_answer_5xx() {
    let server = FakeModel::start(Scenario::new().http_error(529, "overloaded")).await.unwrap();
    let body = json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "hi"}]});
    let overloaded = request(server.addr(), "POST", "/v1/messages", Some(&body)).await;
    assert_eq!(overloaded.status, 529);
    assert!(overloaded.body.contains("overloaded_error"));
    let exhausted = request(server.addr(), "POST", "/v1/messages", Some(&body)).await;
    assert_eq!(exhausted.status, 500);
    assert!(exhausted.body.contains("no step left"));
    let log = server.requests();
    assert_eq!((log[0].step, log[1].step), (Some(0), None));
    assert_eq!(log[1].reply, "scenario exhausted");
    let unknown = request(server.addr(), "GET", "/v1/nothing", None).await;
    assert_eq!(unknown.status, 404);
}

#[tokio::test]
async fn disconnect_drops_the_connection_mid_stream() {
    let server = FakeModel::start(Scenario::new().disconnect("partial answer")).await.unwrap();
    let response = request(server.addr(), "POST", "/v1/responses", Some(&responses_request("hi"))).await;
    assert_eq!(response.status, 200);
    assert!(!response.complete, "the body must end without its last chunk");
    assert!(response.body.contains("partial answer"));
    assert!(!response.body.contains("response.completed"));
}

#[tokio::test(start_paused = true)]
async fn deltas_wait_their_delay() {
    let server = FakeModel::start(Scenario::new().deltas(["a", "b", "c"], 250)).await.unwrap();
    let started = tokio::time::Instant::now();
    let response = request(server.addr(), "POST", "/v1/responses", Some(&responses_request("hi"))).await;
    assert!(started.elapsed() >= Duration::from_millis(750), "{:?}", started.elapsed());
    let deltas: Vec<Value> = response
        .sse_json()
        .into_iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .map(|e| e["delta"].clone())
        .collect();
    assert_eq!(deltas, ["a", "b", "c"]);
}

#[tokio::test(start_paused = true)]
async fn stall_keeps_the_stream_open_until_the_client_hangs_up() {
    let server = FakeModel::start(Scenario::new().stall("Thinking very slowly")).await.unwrap();
    let body = json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "hi"}]});
    let stream = send(server.addr(), "POST", "/v1/messages", Some(&body)).await;
    // Sixty seconds of (paused) time later the answer has still not ended.
    let read = tokio::time::timeout(Duration::from_secs(60), read_response(stream, false)).await;
    assert!(read.is_err(), "a stalled answer must not end");
    assert!(server.hangups().is_empty());
    // Dropping the read future closed the connection.
    assert_eq!(server.wait_for_hangups(1).await, [0]);
}

#[tokio::test]
async fn steps_can_be_pushed_while_running() {
    let server = FakeModel::start(Scenario::new()).await.unwrap();
    server.push(agent_testkit::Step::Text { text: "late".into() });
    let response = request(server.addr(), "POST", "/v1/responses", Some(&responses_request("hi"))).await;
    assert_eq!(response.status, 200);
    assert!(response.body.contains("late"));
    assert_eq!(server.wait_for_requests(1).await.len(), 1);
}

#[tokio::test]
async fn refusing_proxy_records_connect_attempts() {
    let server = FakeModel::start(Scenario::new()).await.unwrap();
    let proxy_addr = server.proxy().url().trim_start_matches("http://").parse().unwrap();
    let response = request(proxy_addr, "CONNECT", "api.github.com:443", None).await;
    assert_eq!(response.status, 403);
    let attempts = server.proxy().attempts();
    assert_eq!(attempts.len(), 1);
    assert_eq!((attempts[0].method.as_str(), attempts[0].target.as_str()), ("CONNECT", "api.github.com:443"));
    assert!(server.requests().is_empty());
}
