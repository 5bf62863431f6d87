//! The real, pinned CLIs (`cargo xtask clis`) run as plain processes against the fake model
//! server and complete a turn that runs a shell command, with no request leaving loopback.
//!
//! A CLI that is not installed fails its test with the command that installs it.

mod support;

use agent_testkit::{Channel, Cli, Endpoint, FakeModel, OfflineEnv, Provider, Scenario};
use serde_json::{Value, json};
use support::{CLI_DEADLINE, JsonlChild};

/// The CLI, or a failure that says how to install it.
fn cli(provider: Provider, channel: Channel) -> Cli {
    Cli::locate(provider, channel).unwrap_or_else(|e| panic!("{e}"))
}

/// The scenario every test runs: a shell command, then an answer quoting its output.
fn shell_scenario() -> Scenario {
    Scenario::new().shell("echo offline-marker").quote_tool_result("Tool said: ")
}

/// Asserts that every request stayed on loopback and nothing tried the proxy.
#[track_caller]
fn assert_loopback_only(server: &FakeModel) {
    let host = server.addr().to_string();
    for request in server.requests() {
        assert_eq!(request.header("host"), Some(host.as_str()), "{request:?}");
    }
    assert!(server.proxy().attempts().is_empty(), "outside traffic: {:?}", server.proxy().attempts());
}

/// Asserts the two model calls of [`shell_scenario`]: the prompt, then the tool output.
#[track_caller]
fn assert_shell_round_trip(server: &FakeModel, endpoint: Endpoint, prompt: &str) {
    let calls = server.model_requests();
    assert_eq!(calls.len(), 2, "{calls:#?}");
    assert!(calls.iter().all(|c| c.endpoint == endpoint), "{calls:#?}");
    assert_eq!(calls.iter().map(|c| c.step).collect::<Vec<_>>(), [Some(0), Some(1)]);
    let first = calls[0].body.as_ref().unwrap().to_string();
    assert!(first.contains(prompt), "the first model call does not carry the prompt");
    let second = calls[1].body.as_ref().unwrap().to_string();
    assert!(second.contains("offline-marker"), "the second model call does not carry the tool output");
    assert_eq!(server.remaining_steps(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_app_server_completes_a_turn_offline() {
    let codex = cli(Provider::Codex, Channel::LatestValidated);
    let server = FakeModel::start(shell_scenario()).await.unwrap();
    let env = OfflineEnv::new(&codex, &server).unwrap();
    let mut command = env.command(&codex);
    command.arg("app-server");
    let mut child = JsonlChild::spawn(command);
    let turn = tokio::time::timeout(CLI_DEADLINE, async {
        child
            .send(json!({"id": 1, "method": "initialize", "params": {"clientInfo": {"name": "agent-testkit", "version": "0.1.0"}}}))
            .await;
        child.until("initialize response", |m| m["id"] == 1).await;
        child.send(json!({"method": "initialized"})).await;
        child.send(json!({"id": 2, "method": "thread/start", "params": {"cwd": env.workspace()}})).await;
        let thread = child.until("thread/start response", |m| m["id"] == 2).await;
        let thread_id = thread["result"]["thread"]["id"].as_str().expect("thread id").to_owned();
        let input = json!([{"type": "text", "text": "Run the marker command"}]);
        child.send(json!({"id": 3, "method": "turn/start", "params": {"threadId": thread_id, "input": input}})).await;
        child.until("turn/completed", |m| m["method"] == "turn/completed").await
    })
    .await
    .unwrap_or_else(|_| child.timed_out("codex to complete the turn"));
    assert_eq!(turn["params"]["turn"]["status"], "completed", "{turn}");
    let message = child
        .seen
        .iter()
        .find(|m| m["method"] == "item/completed" && m["params"]["item"]["type"] == "agentMessage")
        .expect("an agent message");
    assert!(message["params"]["item"]["text"].as_str().unwrap().starts_with("Tool said: "), "{message}");
    assert!(message["params"]["item"]["text"].as_str().unwrap().contains("offline-marker"), "{message}");
    assert!(child.finish().await.success());

    assert_shell_round_trip(&server, Endpoint::Responses, "Run the marker command");
    let first = &server.model_requests()[0];
    assert_eq!(first.path, "/v1/responses");
    assert_eq!(first.body.as_ref().unwrap()["model"], "fake-model");
    assert_eq!(first.header("authorization"), Some("Bearer fake-model-key"));
    assert_loopback_only(&server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_stream_json_completes_a_turn_offline() {
    let claude = cli(Provider::Claude, Channel::LatestValidated);
    let server = FakeModel::start(shell_scenario()).await.unwrap();
    let env = OfflineEnv::new(&claude, &server).unwrap();
    let mut command = env.command(&claude);
    command.args(["-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose"]);
    let mut child = JsonlChild::spawn(command);
    let user = json!({"type": "user", "message": {"role": "user", "content": "Run the marker command"}, "parent_tool_use_id": null, "session_id": ""});
    let result = tokio::time::timeout(CLI_DEADLINE, async {
        child.send(user).await;
        child.until("result", |m| m["type"] == "result").await
    })
    .await
    .unwrap_or_else(|_| child.timed_out("claude to complete the turn"));
    assert_eq!(result["is_error"], false, "{result}");
    let text = result["result"].as_str().unwrap();
    assert!(text.starts_with("Tool said: ") && text.contains("offline-marker"), "{result}");
    assert!(child.finish().await.success());

    assert_shell_round_trip(&server, Endpoint::Messages, "Run the marker command");
    let first = &server.model_requests()[0];
    assert_eq!(first.query.as_deref(), Some("beta=true"));
    assert_eq!(first.header("x-api-key"), Some("fake-model-key"));
    assert_loopback_only(&server);
}

/// Runs one Pi prompt over `--mode rpc` and returns the final assistant text.
async fn pi_turn(pi: &Cli, server: &FakeModel) -> String {
    let env = OfflineEnv::new(pi, server).unwrap();
    let mut command = env.command(pi);
    command.args(["--mode", "rpc", "--no-session"]);
    let mut child = JsonlChild::spawn(command);
    tokio::time::timeout(CLI_DEADLINE, async {
        child.send(json!({"id": "p1", "type": "prompt", "message": "Run the marker command"})).await;
        let accepted = child.until("prompt response", |m| m["id"] == "p1").await;
        assert_eq!(accepted["success"], true, "{accepted}");
        child.until("agent_end", |m| m["type"] == "agent_end").await
    })
    .await
    .unwrap_or_else(|_| child.timed_out("pi to complete the turn"));
    let last_assistant = child
        .seen
        .iter()
        .rev()
        .find(|m| m["type"] == "message_end" && m["message"]["role"] == "assistant")
        .expect("an assistant message")
        .clone();
    assert_eq!(last_assistant["message"]["stopReason"], "stop", "{last_assistant}");
    assert!(child.finish().await.success());
    let content = last_assistant["message"]["content"].as_array().unwrap();
    content.iter().filter_map(|c| c["text"].as_str()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pi_latest_on_node_22_completes_a_turn_offline() {
    let pi = cli(Provider::Pi, Channel::LatestValidated);
    assert_eq!(pi.version(), "1.6.0");
    let server = FakeModel::start(shell_scenario()).await.unwrap();
    let text = pi_turn(&pi, &server).await;
    assert!(text.starts_with("Tool said: ") && text.contains("offline-marker"), "{text}");
    assert_shell_round_trip(&server, Endpoint::ChatCompletions, "Run the marker command");
    let first: Value = server.model_requests()[0].body.clone().unwrap();
    assert_eq!(first["model"], "fake-model");
    assert_loopback_only(&server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pi_min_supported_on_system_node_completes_a_turn_offline() {
    let pi = cli(Provider::Pi, Channel::MinSupported);
    assert_eq!(pi.version(), "0.73.1");
    let server = FakeModel::start(shell_scenario()).await.unwrap();
    let text = pi_turn(&pi, &server).await;
    assert!(text.starts_with("Tool said: ") && text.contains("offline-marker"), "{text}");
    assert_shell_round_trip(&server, Endpoint::ChatCompletions, "Run the marker command");
    assert_loopback_only(&server);
}
