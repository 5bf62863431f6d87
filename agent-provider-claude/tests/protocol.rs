//! The Claude provider against a scripted `claude` (agent-exec's `ScriptedExec`), through the
//! public `Harness` API, on tokio's paused clock: the command line and environment, the lines
//! written, control responses matched by `request_id`, and deadlines that pass without real
//! waiting.

use std::sync::Arc;
use std::time::Duration;

use agent_core::exec::Exec;
use agent_core::{
    Event, EventKind, ExitReason, Harness, McpServer, Replay, Request, Response, SessionOptions, SessionRef,
    StoreChoice, TurnOptions, TurnStatus,
};
use agent_exec::scripted::{LineMatch, Script, ScriptedExec, ScriptedRun, Step};
use agent_provider_claude::{ClaudeOptions, ClaudeProvider};
use serde_json::{Value, json};

const SESSION: &str = "5e55105e-0000-4000-8000-000000000001";

/// A success control response to the control request on `line`, with `response` (if any).
fn control_success(line: &str, response: Option<Value>) -> Vec<Step> {
    let request: Value = serde_json::from_str(line).expect("a JSON line");
    let mut body = json!({"subtype": "success", "request_id": request["request_id"]});
    if let Some(response) = response {
        body["response"] = response;
    }
    vec![Step::stdout(json!({"type": "control_response", "response": body}).to_string())]
}

fn control(subtype: &'static str) -> LineMatch {
    LineMatch::predicate(format!("control_request {subtype}"), move |line| {
        serde_json::from_str::<Value>(line)
            .is_ok_and(|v| v["type"] == "control_request" && v["request"]["subtype"] == subtype)
    })
}

fn user_line() -> LineMatch {
    LineMatch::predicate("a user line", |line| serde_json::from_str::<Value>(line).is_ok_and(|v| v["type"] == "user"))
}

fn init() -> String {
    json!({"type": "system", "subtype": "init", "session_id": SESSION, "tools": [], "mcp_servers": []}).to_string()
}

fn delta(text: &str) -> String {
    json!({"type": "stream_event", "event": {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}, "session_id": SESSION})
        .to_string()
}

fn result(is_error: bool, text: &str, total_cost: f64) -> String {
    json!({"type": "result", "subtype": "success", "is_error": is_error, "result": text, "session_id": SESSION,
        "total_cost_usd": total_cost, "usage": {"input_tokens": 10, "output_tokens": 2, "cache_read_input_tokens": 3},
        "permission_denials": []})
    .to_string()
}

/// `initialize`, answered.
fn initialized() -> Script {
    Script::new().expect_line(control("initialize")).answer(|line| control_success(line, Some(json!({"commands": []}))))
}

struct Fixture {
    exec: ScriptedExec,
    harness: Harness,
}

impl Fixture {
    fn new(claude: Script) -> Fixture {
        let exec = ScriptedExec::new();
        exec.script("claude", Script::new().stdout("2.1.197 (Claude Code)").exit(0));
        exec.script("claude", claude);
        let harness = Harness::builder()
            .provider(ClaudeProvider::new())
            .exec(Arc::new(exec.clone()) as Arc<dyn Exec>)
            .store(StoreChoice::Disabled)
            .build()
            .unwrap();
        Fixture { exec, harness }
    }

    fn claude(&self) -> ScriptedRun {
        self.exec.runs().into_iter().nth(1).expect("claude spawned")
    }

    fn sent(&self) -> Vec<Value> {
        self.claude().stdin_lines().iter().map(|l| serde_json::from_str(l).expect("JSON line")).collect()
    }

    /// A session on claude's conversation `SESSION`, the one the scripted claude reports: a
    /// claude in another conversation than it was started on fails the turn.
    fn options(&self) -> SessionOptions {
        // A scripted exec is not local: the subscription guard would refuse it.
        SessionOptions::new(std::env::temp_dir())
            .auth(agent_core::AuthMode::Inherit)
            .provider_command_timeout(Duration::from_secs(10))
            .resume_provider_session(SESSION)
    }

    async fn session(&self, options: SessionOptions) -> SessionRef {
        self.harness.start_session("claude", options).await.expect("session opens")
    }

    async fn run(&self, session: &SessionRef, answer: impl Fn(&Request) -> Option<Response>) -> Vec<Arc<Event>> {
        let turn = self.harness.start_turn(session, "hi", TurnOptions::new()).await.unwrap();
        let mut stream = self.harness.stream(&turn, Replay::Start, Some(Duration::from_secs(60))).await.unwrap();
        let mut events = Vec::new();
        while let Some(event) = stream.next().await {
            let event = event.unwrap_or_else(|e| panic!("stream ended: {e}"));
            if let EventKind::RequestCreated(request) = &event.kind
                && let Some(response) = answer(request)
            {
                self.harness.respond(request, response).await.expect("response delivered");
            }
            let done = event.is_terminal();
            events.push(event);
            if done {
                break;
            }
        }
        events
    }
}

#[tokio::test(start_paused = true)]
async fn the_command_line_environment_and_lines_written() {
    let claude = initialized()
        .expect_line(control("mcp_set_servers"))
        .answer(|line| control_success(line, Some(json!({"added": ["files"], "removed": [], "errors": {}}))))
        .expect_line(user_line())
        .stdout(init())
        .stdout(delta("Hel"))
        .stdout(delta("lo"))
        .stdout(result(false, "Hello", 0.25))
        .expect_line(user_line())
        .stdout(result(false, "again", 0.75))
        .wait_eof()
        .exit(0);
    let fixture = Fixture::new(claude);
    let mut server = McpServer::stdio("/opt/mcp/files", ["--root", "/w"]);
    if let McpServer::Stdio { env, .. } = &mut server {
        env.insert("FILES_TOKEN".into(), "sekrit".into());
    }
    let options = fixture
        .options()
        .model("claude-x")
        .system_prompt("Be brief.")
        .mcp_server("files", server)
        .provider_option(ClaudeOptions::new().allowed_tool("Read"));
    let session = fixture.session(options).await;
    let events = fixture.run(&session, |_| None).await;
    let end = events.last().and_then(|e| e.kind.terminal_end()).unwrap();
    assert_eq!(end.status, TurnStatus::Completed);
    assert_eq!(end.result.text.as_deref(), Some("Hello"));
    let usage = end.result.usage.unwrap();
    assert_eq!((usage.input_tokens, usage.cached_input_tokens, usage.output_tokens), (Some(10), Some(3), Some(2)));
    assert_eq!(usage.cost_usd, Some(0.25));
    let events = fixture.run(&session, |_| None).await;
    let usage = events.last().and_then(|e| e.kind.terminal_end()).unwrap().result.usage.unwrap();
    assert_eq!(usage.cost_usd, Some(0.5), "the second turn's cost is the difference of the totals");

    let command = fixture.claude().command().clone();
    let args: Vec<String> = command.args.iter().map(|a| a.to_string_lossy().into_owned()).collect();
    let line = args.join(" ");
    assert!(line.starts_with("-p --input-format stream-json --output-format stream-json --verbose"), "{line}");
    assert!(line.contains("--permission-prompt-tool stdio") && line.contains("--include-partial-messages"), "{line}");
    assert!(line.contains("--model claude-x") && line.contains("--system-prompt Be brief."), "{line}");
    assert!(line.contains("--strict-mcp-config") && line.contains("--allowedTools Read"), "{line}");
    assert!(!line.contains("sekrit"), "no secret on the command line: {line}");
    let resumed = &args[args.iter().position(|a| a == "--resume").expect("--resume") + 1];
    assert_eq!(resumed, SESSION);
    let status = fixture.harness.status(&session).await.unwrap();
    assert_eq!(status.provider_session_id.as_deref(), Some(SESSION), "the conversation claude reports");
    let env = format!("{:?}", fixture.claude().env());
    assert!(!env.contains("sekrit") && !env.contains("--root"), "no MCP value in claude's environment: {env}");
    assert!(!line.contains("--root"), "no MCP argument on the command line: {line}");

    // The servers go over stdin, whole, after `initialize`.
    let sent = fixture.sent();
    assert_eq!(sent[0]["request"]["subtype"], "initialize");
    assert_eq!(
        sent[1]["request"],
        json!({"subtype": "mcp_set_servers", "servers": {"files": {
            "type": "stdio", "command": "/opt/mcp/files", "args": ["--root", "/w"], "env": {"FILES_TOKEN": "sekrit"}}}})
    );
    assert_eq!(
        sent[2],
        json!({"type": "user", "message": {"role": "user", "content": "hi"}, "parent_tool_use_id": null, "session_id": ""})
    );
    fixture.harness.stop_session(&session, false).await.unwrap();
    // Under the default subscription auth an exec the guard cannot inspect is refused.
    let refused = fixture.harness.start_session("claude", SessionOptions::new(std::env::temp_dir())).await;
    assert!(matches!(refused, Err(agent_core::Error::AuthGuard { .. })), "{refused:?}");
}

#[tokio::test(start_paused = true)]
async fn permission_answers_and_unserved_control_requests() {
    let can_use_tool = json!({"type": "control_request", "request_id": "cli-1", "request": {
        "subtype": "can_use_tool", "tool_name": "Bash", "input": {"command": "rm -rf build"}, "tool_use_id": "toolu_1"}});
    let hook = json!({"type": "control_request", "request_id": "cli-0", "request": {"subtype": "hook_callback", "callback_id": "h"}});
    let claude = initialized()
        .expect_line(user_line())
        .stdout(hook.to_string())
        .expect_line(LineMatch::contains("\"cli-0\""))
        .stdout(can_use_tool.to_string())
        .expect_line(LineMatch::contains("\"cli-1\""))
        .stdout(result(false, "done", 0.1))
        .wait_eof()
        .exit(0);
    let fixture = Fixture::new(claude);
    let session = fixture.session(fixture.options()).await;
    let events =
        fixture.run(&session, |_| Some(Response::approve_edited(json!({"command": "rm -rf build/tmp"})))).await;
    assert_eq!(events.last().and_then(|e| e.kind.terminal_end()).unwrap().status, TurnStatus::Completed);
    let sent = fixture.sent();
    let hook_answer = sent.iter().find(|m| m["response"]["request_id"] == "cli-0").expect("the hook was answered");
    assert_eq!(hook_answer["response"]["subtype"], "error");
    let answer = sent.iter().find(|m| m["response"]["request_id"] == "cli-1").expect("the permission was answered");
    assert_eq!(
        answer["response"]["response"],
        json!({"behavior": "allow", "updatedInput": {"command": "rm -rf build/tmp"}, "toolUseID": "toolu_1"})
    );
    fixture.harness.stop_session(&session, false).await.unwrap();
}

/// A control request over `max_line_bytes` (the permission to write a large file carries the
/// file) cannot be read whole, but its first bytes name it: it is denied at once with a
/// warning, where it was dropped and claude waited for its answer for good.
#[tokio::test(start_paused = true)]
async fn an_over_long_control_request_is_denied_and_the_turn_goes_on() {
    // In the order claude writes the members.
    let can_use_tool = format!(
        r#"{{"type":"control_request","request_id":"cli-9","request":{{"subtype":"can_use_tool","tool_name":"Write","input":{{"file_path":"/w/big.txt","content":"{}"}},"tool_use_id":"toolu_9"}}}}"#,
        "x".repeat(5000)
    );
    let claude = initialized()
        .expect_line(user_line())
        .stdout(can_use_tool)
        .expect_line(LineMatch::contains("\"cli-9\""))
        .stdout(result(false, "done", 0.1))
        .wait_eof()
        .exit(0);
    let fixture = Fixture::new(claude);
    let session = fixture.session(fixture.options().provider_option(ClaudeOptions::new().max_line_bytes(2048))).await;
    let events = fixture.run(&session, |_| Some(Response::approve())).await;
    assert_eq!(events.last().and_then(|e| e.kind.terminal_end()).unwrap().status, TurnStatus::Completed);
    let warned = events.iter().any(|e| {
        matches!(&e.kind, EventKind::Warning { message } if message.contains("can_use_tool") && message.contains("denied"))
    });
    assert!(warned, "a warning says what was denied");
    let sent = fixture.sent();
    let answer = sent.iter().find(|m| m["response"]["request_id"] == "cli-9").expect("the request was answered");
    assert_eq!(answer["response"]["response"]["behavior"], "deny");
    fixture.harness.stop_session(&session, false).await.unwrap();
}

/// A reply to a control request of ours over `max_line_bytes` fails that call at once, naming
/// the limit, where its caller waited out its deadline (here `initialize`, so the start fails).
#[tokio::test(start_paused = true)]
async fn an_over_long_control_response_fails_its_call_at_once() {
    let claude = Script::new()
        .expect_line(control("initialize"))
        .answer(|line| control_success(line, Some(json!({"commands": "x".repeat(5000)}))))
        .wait_eof()
        .exit(0);
    let fixture = Fixture::new(claude);
    let started = tokio::time::Instant::now();
    let options = fixture.options().provider_option(ClaudeOptions::new().max_line_bytes(2048));
    let refused = fixture.harness.start_session("claude", options).await.expect_err("the reply cannot be read");
    assert!(refused.to_string().contains("2048-byte limit"), "{refused}");
    // The exit report's wait for the process (2 s), not the handshake's deadline (27 s).
    assert!(started.elapsed() < Duration::from_secs(5), "at once, not at a deadline: {:?}", started.elapsed());
}

/// A CLI that numbers its control requests waits for answers under the same numbers, and a
/// `result` whose `subtype` and `session_id` a newer CLI writes as `null` still ends the turn:
/// either, refused, would leave the CLI and the turn waiting for ever.
#[tokio::test(start_paused = true)]
async fn numbered_control_requests_and_null_result_fields_end_the_turn() {
    let hook = json!({"type": "control_request", "request_id": 6, "request": {"subtype": "hook_callback", "callback_id": "h"}});
    let can_use_tool = json!({"type": "control_request", "request_id": 7, "request": {
        "subtype": "can_use_tool", "tool_name": "Bash", "input": {"command": "ls"}, "tool_use_id": "toolu_1"}});
    let mut end: Value = serde_json::from_str(&result(false, "done", 0.1)).unwrap();
    end["subtype"] = Value::Null;
    end["session_id"] = Value::Null;
    let claude = initialized()
        .expect_line(user_line())
        .stdout(hook.to_string())
        .expect_line(LineMatch::contains("\"request_id\":6"))
        .stdout(can_use_tool.to_string())
        .expect_line(LineMatch::contains("\"request_id\":7"))
        .stdout(end.to_string())
        .wait_eof()
        .exit(0);
    let fixture = Fixture::new(claude);
    let session = fixture.session(fixture.options()).await;
    let asked = std::sync::Mutex::new(Vec::new());
    let events = fixture
        .run(&session, |request| {
            asked.lock().unwrap().push(request.provider_ref.0.clone());
            Some(Response::approve())
        })
        .await;
    assert_eq!(*asked.lock().unwrap(), ["7"]);
    assert_eq!(events.last().and_then(|e| e.kind.terminal_end()).unwrap().status, TurnStatus::Completed);
    let sent = fixture.sent();
    let hook_answer = sent.iter().find(|m| m["response"]["request_id"] == json!(6)).expect("the hook was answered");
    assert_eq!(hook_answer["response"]["subtype"], "error");
    let answer = sent.iter().find(|m| m["response"]["request_id"] == json!(7)).expect("the permission was answered");
    assert_eq!(answer["response"]["response"]["behavior"], "allow");
    fixture.harness.stop_session(&session, false).await.unwrap();
}

/// A whole turn in one write, with a control response nobody waits for and a line that is not
/// JSON in the middle: the reader takes them from one read, and every line after them is still
/// read, in order.
#[tokio::test(start_paused = true)]
async fn lines_that_come_in_one_write_keep_their_order_around_replies_and_garbage() {
    let mut out = init() + "\n";
    for i in 0..150 {
        out += &delta(&format!("{i},"));
        out += "\n";
        if i == 70 {
            out += "not json\n\n";
        }
        if i == 100 {
            out += &json!({"type": "control_response", "response": {"subtype": "success", "request_id": "req_999"}})
                .to_string();
            out += "\n";
        }
    }
    out += &result(false, "done", 0.01);
    out += "\n";
    let claude = initialized().expect_line(user_line()).stdout_bytes(out.into_bytes()).wait_eof();
    let fixture = Fixture::new(claude);
    let session = fixture.session(fixture.options()).await;
    let events = fixture.run(&session, |_| None).await;
    let names: Vec<&str> = events.iter().map(|e| e.type_name()).collect();
    assert_eq!(names.last(), Some(&"turn_completed"));
    let garbage =
        |e: &Arc<Event>| matches!(&e.kind, EventKind::Warning { message } if message.contains("not a JSON message"));
    assert_eq!(events.iter().filter(|e| garbage(e)).count(), 1, "{names:?}");
    let warning = events.iter().position(garbage).unwrap();
    assert_eq!(names[warning - 1..warning + 2], ["message_delta", "warning", "message_delta"]);
    let texts = agent_testkit::events::delta_texts(&events);
    let expected: Vec<String> = (0..150).map(|i| format!("{i},")).collect();
    assert_eq!(texts, expected);
    // Session events (the session's ID from `init`) are not the turn's.
    assert!(events.windows(2).all(|w| w[0].seq < w[1].seq));
}

/// An acknowledged interrupt whose `result` never comes: the cancel times out at the adapter's
/// deadline (on the paused clock), the turn fails and the session retires.
#[tokio::test(start_paused = true)]
async fn an_interrupt_without_a_result_retires_the_session() {
    let claude = initialized()
        .expect_line(user_line())
        .stdout(init())
        .stdout(delta("working"))
        .expect_line(control("interrupt"))
        .answer(|line| control_success(line, None))
        .hang();
    let fixture = Fixture::new(claude);
    let session = fixture.session(fixture.options()).await;
    let monitor = fixture.harness.monitor(&session).await.unwrap();
    let turn = fixture.harness.start_turn(&session, "hi", TurnOptions::new()).await.unwrap();
    let mut stream = fixture.harness.stream(&turn, Replay::Start, Some(Duration::from_secs(120))).await.unwrap();
    let mut events = Vec::new();
    while let Some(event) = stream.next().await {
        let event = event.unwrap();
        if matches!(event.kind, EventKind::MessageDelta { .. }) {
            fixture.harness.cancel(&turn).await.unwrap();
        }
        let done = event.is_terminal();
        events.push(event);
        if done {
            break;
        }
    }
    let end = events.last().and_then(|e| e.kind.terminal_end()).unwrap();
    assert_eq!(end.status, TurnStatus::Failed);
    assert!(matches!(monitor.await, ExitReason::Retired { .. }));
    assert!(fixture.sent().iter().any(|m| m["request"]["subtype"] == "interrupt"));
}

/// `claude --version` is checked against `MIN_SUPPORTED` (clis.toml) before claude is spawned,
/// once per program file; another program is refused.
#[tokio::test(start_paused = true)]
async fn the_version_is_checked_before_spawning() {
    for (printed, says) in [
        ("2.1.100 (Claude Code)", "older than the minimum supported 2.1.197"),
        ("codex-cli 0.171.0", "did not print a Claude Code version"),
    ] {
        let exec = ScriptedExec::new();
        exec.script("claude", Script::new().stdout(printed).exit(0));
        let harness = Harness::builder()
            .provider(ClaudeProvider::new())
            .exec(Arc::new(exec.clone()) as Arc<dyn Exec>)
            .store(StoreChoice::Disabled)
            .build()
            .unwrap();
        let options = SessionOptions::new(std::env::temp_dir()).auth(agent_core::AuthMode::Inherit);
        match harness.start_session("claude", options).await {
            Err(agent_core::Error::ProviderUnavailable { reason, .. }) => assert!(reason.contains(says), "{reason}"),
            other => panic!("expected ProviderUnavailable, got {other:?}"),
        }
        assert_eq!(exec.runs().len(), 1, "only the version probe ran");
    }
}

/// A claude that reports another session than it was started on is in another conversation
/// (after a resume, a fresh one): the turn fails without its answer, claude is ended and the
/// session, unavailable until stopped, keeps the conversation it holds.
#[tokio::test(start_paused = true)]
async fn a_claude_in_another_conversation_fails_the_turn_and_is_ended() {
    let claude = initialized()
        .expect_line(user_line())
        .stdout(init())
        .stdout(delta("fresh"))
        .stdout(result(false, "an answer without the history", 0.1))
        .wait_eof()
        .exit(0);
    let fixture = Fixture::new(claude);
    let wanted = "0b1e5e55-0000-4000-8000-000000000002";
    let session = fixture.session(fixture.options().resume_provider_session(wanted)).await;
    let monitor = fixture.harness.monitor(&session).await.unwrap();
    let events = fixture.run(&session, |_| None).await;
    let end = events.last().and_then(|e| e.kind.terminal_end()).unwrap();
    assert_eq!(end.status, TurnStatus::Failed);
    assert!(end.result.text.is_none(), "{:?}", end.result);
    let reason = end.result.reason.as_deref().unwrap_or_default();
    assert!(reason.contains(SESSION) && reason.contains(wanted), "{reason}");
    assert!(events.iter().any(|e| matches!(&e.kind, EventKind::ProviderError { message, .. } if message == reason)));
    // Claude is ended; the session takes no turn until it is stopped and resumed.
    let status = fixture.harness.status(&session).await.unwrap();
    assert_eq!(status.status, agent_core::SessionState::Unavailable);
    assert_eq!(status.provider_session_id.as_deref(), Some(wanted), "the session keeps its conversation");
    let refused = fixture.harness.start_turn(&session, "again", TurnOptions::new()).await.unwrap_err();
    assert!(matches!(refused, agent_core::Error::SessionUnavailable { .. }), "{refused:?}");
    assert!(!fixture.claude().signals().is_empty(), "claude was ended");
    fixture.harness.stop_session(&session, false).await.unwrap();
    assert!(matches!(monitor.await, agent_core::ExitReason::Closed { .. }));
}

/// A `result` with fields of other types than expected (a newer Claude Code) still ends the
/// turn, by what reads, with a warning.
#[tokio::test(start_paused = true)]
async fn a_result_with_fields_of_other_types_still_ends_the_turn() {
    let mut odd: Value = serde_json::from_str(&result(false, "Hello", 0.25)).unwrap();
    odd["duration_ms"] = json!(1234.5);
    odd["errors"] = Value::Null;
    let claude = initialized()
        .expect_line(user_line())
        .stdout(init())
        .stdout(delta("Hello"))
        .stdout(odd.to_string())
        .wait_eof()
        .exit(0);
    let fixture = Fixture::new(claude);
    let session = fixture.session(fixture.options()).await;
    let events = fixture.run(&session, |_| None).await;
    let end = events.last().and_then(|e| e.kind.terminal_end()).unwrap();
    assert_eq!(end.status, TurnStatus::Completed);
    assert_eq!(end.result.text.as_deref(), Some("Hello"));
    let warned = events
        .iter()
        .any(|e| matches!(&e.kind, EventKind::Warning { message } if message.contains("`result` has fields")));
    assert!(warned, "{:?}", events.iter().map(|e| e.type_name()).collect::<Vec<_>>());
    fixture.harness.stop_session(&session, false).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_control_error_given_as_an_object_is_read_as_a_refusal_with_its_message() {
    let claude = Script::new()
        .expect_line(control("initialize"))
        .answer(|line| {
            let request: Value = serde_json::from_str(line).expect("a JSON line");
            let body = json!({"subtype": "error", "request_id": request["request_id"],
                "error": {"message": "hooks are not supported", "code": "unsupported"}});
            vec![Step::stdout(json!({"type": "control_response", "response": body}).to_string())]
        })
        .wait_eof();
    let fixture = Fixture::new(claude);
    let error = fixture.harness.start_session("claude", fixture.options()).await.unwrap_err();
    assert!(error.to_string().contains("claude refused initialize: hooks are not supported"), "{error}");
}

/// A control request ID reused while a request under it waits: an answer given for one tool use
/// could reach the other, so neither is approved — one deny for the ID, the waiting request
/// ended (`request_expired`), a warning.
#[tokio::test(start_paused = true)]
async fn a_reused_control_request_id_denies_both_requests_and_approves_nothing() {
    let ask = |tool_use: &str, command: &str| {
        json!({"type": "control_request", "request_id": "cli-1", "request": {
            "subtype": "can_use_tool", "tool_name": "Bash", "input": {"command": command}, "tool_use_id": tool_use}})
        .to_string()
    };
    let claude = initialized()
        .expect_line(user_line())
        .stdout(ask("toolu_1", "ls"))
        .stdout(ask("toolu_2", "rm -rf /"))
        .expect_line(LineMatch::contains("\"cli-1\""))
        .stdout(result(false, "done", 0.1))
        .wait_eof()
        .exit(0);
    let fixture = Fixture::new(claude);
    let session = fixture.session(fixture.options()).await;
    let events = fixture.run(&session, |_| None).await;
    assert_eq!(events.last().and_then(|e| e.kind.terminal_end()).unwrap().status, TurnStatus::Completed);
    let created = events.iter().filter(|e| matches!(e.kind, EventKind::RequestCreated(_))).count();
    let expired = events.iter().filter(|e| e.type_name() == "request_expired").count();
    let names: Vec<_> = events.iter().map(|e| e.type_name()).collect();
    assert_eq!((created, expired), (1, 1), "the first shown and ended, the second never shown: {names:?}");
    assert!(events.iter().any(|e| matches!(&e.kind, EventKind::Warning { message } if message.contains("reused"))));
    let answers: Vec<Value> = fixture.sent().into_iter().filter(|m| m["response"]["request_id"] == "cli-1").collect();
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert_eq!(answers[0]["response"]["response"]["behavior"], "deny", "{answers:?}");
    fixture.harness.stop_session(&session, false).await.unwrap();
}
