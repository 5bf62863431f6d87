//! The Codex provider against a scripted `codex app-server` (agent-exec's `ScriptedExec`),
//! through the public `Harness` API: handshake, request and response shapes, and the faults a
//! real CLI can produce (crashes, hangs, garbage, oversized lines, missing terminal events).

use std::sync::Arc;
use std::time::Duration;

use agent_core::exec::{Exec, ExitStatus, SESSION_MARKER_ENV};
use agent_core::{
    ApprovalPolicy, AuthMode, ConversationMode, Error, Event, EventKind, ExitReason, Harness, McpServer, Replay,
    Request, Response, SandboxMode, Scope, SessionOptions, SessionRef, SessionState, Skill, StoreChoice, TurnOptions,
    TurnStatus,
};
use agent_exec::scripted::{LineMatch, Script, ScriptedExec, ScriptedRun, Step};
use agent_provider_codex::{CodexOptions, CodexProvider};
use serde_json::{Value, json};

// The results of the handshake's and the turn's requests; the script answers each request with
// the ID the provider gave it.
const INITIALIZED: &str =
    r#"{"userAgent":"agent_harness/0.171.0","codexHome":"/h","platformFamily":"unix","platformOs":"linux"}"#;
const THREAD: &str = r#"{"thread":{"id":"th-1","status":{"type":"idle"},"turns":[]},"model":"m"}"#;
const TURN: &str = r#"{"turn":{"id":"tu-1","items":[],"status":"inProgress","error":null}}"#;

fn notification(method: &str, params: Value) -> String {
    json!({ "method": method, "params": params }).to_string()
}

fn completed(status: &str) -> String {
    notification(
        "turn/completed",
        json!({"threadId": "th-1", "turn": {"id": "tu-1", "items": [], "status": status, "error": null, "durationMs": 5}}),
    )
}

fn delta(text: &str) -> String {
    notification(
        "item/agentMessage/delta",
        json!({"threadId": "th-1", "turnId": "tu-1", "itemId": "m1", "delta": text}),
    )
}

/// `initialize`, `initialized`, `thread/start`, answered.
fn handshake() -> Script {
    Script::new()
        .expect_request("initialize")
        .respond(INITIALIZED)
        .expect_line(r#""method":"initialized""#)
        .expect_request("thread/start")
        .respond(THREAD)
}

/// The handshake, then one admitted turn.
fn admitted() -> Script {
    handshake().expect_request("turn/start").respond(TURN)
}

struct Fixture {
    exec: ScriptedExec,
    harness: Harness,
}

impl Fixture {
    /// `codex --version` prints `version`, then `app_server` plays.
    fn new(version: &str, app_server: Script) -> Fixture {
        let exec = ScriptedExec::new();
        exec.script("codex", Script::new().stdout(version).exit(0));
        exec.script("codex", app_server);
        let harness = Harness::builder()
            .provider(CodexProvider::new())
            .exec(Arc::new(exec.clone()) as Arc<dyn Exec>)
            .store(StoreChoice::Disabled)
            .build()
            .unwrap();
        Fixture { exec, harness }
    }

    fn with(app_server: Script) -> Fixture {
        Fixture::new("codex-cli 0.171.0", app_server)
    }

    fn app_server(&self) -> ScriptedRun {
        self.exec.runs().into_iter().nth(1).expect("app-server spawned")
    }

    /// The JSON lines the provider wrote to the app-server.
    fn sent(&self) -> Vec<Value> {
        self.app_server().stdin_lines().iter().map(|l| serde_json::from_str(l).expect("JSON line")).collect()
    }

    fn sent_method(&self, method: &str) -> Value {
        self.sent().into_iter().find(|m| m["method"] == method).unwrap_or_else(|| panic!("no `{method}` sent"))
    }

    async fn session(&self, options: SessionOptions) -> SessionRef {
        self.harness.start_session("codex", options).await.expect("session opens")
    }

    /// Starts a turn, cancels it at its first delta (the cancel must succeed) and returns how
    /// it ended.
    async fn cancel_at_first_delta(&self, session: &SessionRef) -> Option<TurnStatus> {
        let turn = self.harness.start_turn(session, "hi", TurnOptions::new()).await.unwrap();
        let mut stream = self.harness.stream(&turn, Replay::Start, None).await.unwrap();
        while let Some(event) = stream.next().await {
            let event = event.unwrap();
            if event.type_name() == "message_delta" {
                self.harness.cancel(&turn).await.expect("the cancel succeeds");
            }
            if let Some(end) = event.kind.terminal_end() {
                return Some(end.status);
            }
        }
        None
    }

    /// Runs a turn to its terminal event, answering requests with `answer`.
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

fn options() -> SessionOptions {
    SessionOptions::new(std::env::temp_dir()).auth(AuthMode::Inherit)
}

fn names(events: &[Arc<Event>]) -> Vec<&'static str> {
    events.iter().map(|e| e.type_name()).collect()
}

fn end(events: &[Arc<Event>]) -> agent_core::TurnEnd {
    events.last().and_then(|e| e.kind.terminal_end()).cloned().expect("a terminal event")
}

#[tokio::test(start_paused = true)]
async fn handshake_carries_the_session_options() {
    let fixture = Fixture::with(handshake().wait_eof().exit(0));
    let mut server = McpServer::stdio("files-mcp", ["--root", "/srv"]);
    if let McpServer::Stdio { env, .. } = &mut server {
        env.insert("FILES_TOKEN".into(), "t0ken".into());
    }
    let options = options()
        .model("gpt-test")
        .system_prompt("Be terse.")
        .approval_policy(ApprovalPolicy::OnRequest)
        .sandbox(SandboxMode::ReadOnly)
        .mcp_server("files", server)
        .env("EXTRA", "1")
        .env_remove("DROPPED")
        .provider_option(CodexOptions::new().config("model_reasoning_effort", "\"low\"").client_name("tester"));
    let session = fixture.session(options).await;
    assert_eq!(fixture.harness.status(&session).await.unwrap().provider_session_id.as_deref(), Some("th-1"));
    fixture.harness.stop_session(&session, false).await.unwrap();

    let run = fixture.app_server();
    let args: Vec<String> = run.command().args.iter().map(|a| a.to_string_lossy().into_owned()).collect();
    assert_eq!(
        args,
        [
            "app-server",
            "-c",
            "features.unbounded_connection_retries=false",
            "-c",
            "features.default_mode_request_user_input=true",
            "-c",
            "suppress_unstable_features_warning=true"
        ]
    );
    assert_eq!(
        run.env().get(std::ffi::OsStr::new("EXTRA")).map(|v| v.to_string_lossy().into_owned()),
        Some("1".into())
    );
    assert!(run.env().get(std::ffi::OsStr::new("DROPPED")).is_none());
    assert_eq!(
        run.env().get(std::ffi::OsStr::new(SESSION_MARKER_ENV)).map(|v| v.to_string_lossy().into_owned()),
        Some(session.id.to_string())
    );
    assert_eq!(run.command().cwd.as_deref(), Some(std::env::temp_dir().as_path()));

    let initialize = fixture.sent_method("initialize");
    assert_eq!(initialize["params"]["clientInfo"]["name"], "tester");
    assert_eq!(initialize["params"]["capabilities"]["experimentalApi"], false);
    assert_eq!(fixture.sent()[1], json!({"method": "initialized"}));
    let thread = fixture.sent_method("thread/start")["params"].clone();
    assert_eq!(thread["config"]["model_reasoning_effort"], "low", "config overrides go over stdin, not argv");
    assert_eq!(thread["model"], "gpt-test");
    assert_eq!(thread["developerInstructions"], "Be terse.");
    assert_eq!(thread["approvalPolicy"], "on-request");
    assert_eq!(thread["sandbox"], "read-only");
    assert_eq!(thread["cwd"], std::env::temp_dir().to_string_lossy().as_ref());
    assert_eq!(
        thread["config"]["mcp_servers.files"],
        json!({"command": "files-mcp", "args": ["--root", "/srv"], "env": {"FILES_TOKEN": "t0ken"}})
    );
    // Closing the session closes stdin; the app-server then exits on its own.
    assert!(run.stdin_closed());
    assert_eq!(run.wait().await.code, Some(0));
    assert!(run.signals().is_empty(), "no signal needed: {:?}", run.signals());
}

#[tokio::test(start_paused = true)]
async fn turns_normalize_and_carry_skills_and_overrides() {
    let script = admitted()
        .stdout(notification("turn/started", json!({"threadId": "th-1", "turn": {"id": "tu-1", "status": "inProgress"}})))
        .stdout(notification(
            "item/reasoning/summaryTextDelta",
            json!({"threadId": "th-1", "turnId": "tu-1", "itemId": "r1", "delta": "thinking", "summaryIndex": 0}),
        ))
        .stdout(notification(
            "turn/plan/updated",
            json!({"threadId": "th-1", "turnId": "tu-1", "explanation": null,
                   "plan": [{"step": "look", "status": "completed"}, {"step": "fix", "status": "inProgress"}]}),
        ))
        .stdout(notification(
            "item/started",
            json!({"threadId": "th-1", "turnId": "tu-1", "item": {"type": "commandExecution", "id": "c1",
                   "command": "ls", "cwd": "/w", "status": "inProgress", "commandActions": []}}),
        ))
        .stdout(notification(
            "item/commandExecution/outputDelta",
            json!({"threadId": "th-1", "turnId": "tu-1", "itemId": "c1", "delta": "a.txt\n"}),
        ))
        .stdout(notification(
            "item/completed",
            json!({"threadId": "th-1", "turnId": "tu-1", "item": {"type": "commandExecution", "id": "c1",
                   "command": "ls", "cwd": "/w", "status": "completed", "aggregatedOutput": "a.txt\n", "exitCode": 0,
                   "commandActions": []}}),
        ))
        .stdout(delta("Done"))
        .stdout(notification(
            "item/completed",
            json!({"threadId": "th-1", "turnId": "tu-1", "item": {"type": "agentMessage", "id": "m1", "text": "Done"}}),
        ))
        .stdout(notification(
            "thread/tokenUsage/updated",
            json!({"threadId": "th-1", "turnId": "tu-1", "tokenUsage": {
                "total": {"totalTokens": 12, "inputTokens": 8, "cachedInputTokens": 2, "outputTokens": 4, "reasoningOutputTokens": 1},
                "last": {"totalTokens": 12, "inputTokens": 8, "cachedInputTokens": 2, "outputTokens": 4, "reasoningOutputTokens": 1}}}),
        ))
        .stdout(completed("completed"))
        .wait_eof();
    let fixture = Fixture::with(script);
    let options = options().skill(Skill::new("release", "/skills/release"));
    let session = fixture.session(options).await;
    let turn = fixture.harness.start_turn(&session, "hi", TurnOptions::new().model("gpt-fast")).await.unwrap();
    let events = fixture.harness.stream(&turn, Replay::Start, None).await.unwrap().collect().await.unwrap();
    assert_eq!(
        names(&events),
        [
            "turn_started",
            "provider_event",
            "reasoning_delta",
            "plan_updated",
            "tool_started",
            "command_output_delta",
            "tool_completed",
            "message_delta",
            "assistant_message",
            "usage_updated",
            "turn_completed"
        ]
    );
    let EventKind::PlanUpdated { steps, .. } = &events[3].kind else { panic!("plan") };
    assert_eq!(steps[1].status, "in_progress");
    let result = end(&events).result;
    assert_eq!(result.text.as_deref(), Some("Done"));
    assert_eq!(result.provider_turn_id.as_deref(), Some("tu-1"));
    assert_eq!(result.usage.and_then(|u| u.cached_input_tokens), Some(2));
    let start = fixture.sent_method("turn/start")["params"].clone();
    assert_eq!(
        start,
        json!({"threadId": "th-1", "model": "gpt-fast", "input": [
            {"type": "skill", "name": "release", "path": "/skills/release/SKILL.md"},
            {"type": "text", "text": "hi"},
        ]})
    );
}

#[tokio::test(start_paused = true)]
async fn lines_that_come_in_one_write_keep_their_order_around_replies_and_garbage() {
    // The reply to `turn/start`, the whole turn, a stray response and a line that is not JSON,
    // in one write: the reader takes them from one read.
    let script = handshake()
        .expect_request("turn/start")
        .answer(|request| {
            let id = serde_json::from_str::<Value>(request).unwrap()["id"].clone();
            let mut out = format!("{}\n", json!({"id": id, "result": serde_json::from_str::<Value>(TURN).unwrap()}));
            out += &notification(
                "turn/started",
                json!({"threadId": "th-1", "turn": {"id": "tu-1", "status": "inProgress"}}),
            );
            out += "\n";
            for i in 0..150 {
                out += &delta(&format!("{i},"));
                out += "\n";
                if i == 70 {
                    out += "not json\n\n";
                }
                if i == 100 {
                    // A response nobody waits for, in the middle of the read.
                    out += "{\"id\":999,\"result\":{\"secret\":\"sk-from-config\"}}\n";
                }
            }
            out += &completed("completed");
            out += "\n";
            vec![Step::Stdout(out.into_bytes())]
        })
        .wait_eof();
    let fixture = Fixture::with(script);
    let session = fixture.session(options()).await;
    let turn = fixture.harness.start_turn(&session, "hi", TurnOptions::new()).await.unwrap();
    let stream = fixture.harness.stream(&turn, Replay::Start, Some(Duration::from_secs(60))).await.unwrap();
    let events = stream.collect().await.expect("the turn ends");
    let names = names(&events);
    assert_eq!(names.first(), Some(&"turn_started"));
    assert_eq!(names.last(), Some(&"turn_completed"));
    assert_eq!(names.iter().filter(|n| **n == "warning").count(), 1, "{names:?}");
    let texts = agent_testkit::events::delta_texts(&events);
    let expected: Vec<String> = (0..150).map(|i| format!("{i},")).collect();
    assert_eq!(texts, expected);
    let warning = names.iter().position(|n| *n == "warning").unwrap();
    assert_eq!(names[warning - 1..warning + 2], ["message_delta", "warning", "message_delta"]);
    assert_eq!(texts.concat(), end(&events).result.text.unwrap());
    // The stray response is a session event, not one of the turn's, noted without its body
    // (a timed-out `config/read`'s would be codex's whole configuration).
    assert!(events.windows(2).all(|w| w[0].seq < w[1].seq));
    let mut all = fixture.harness.subscribe(&session, Replay::Start).await.expect("subscribed");
    let stray = loop {
        let event = all.next().await.expect("the session's events").expect("an event");
        if matches!(&event.kind, EventKind::ProviderEvent { method } if method == "response") {
            break event;
        }
    };
    assert_eq!(stray.turn_id, None);
    assert!(stray.raw.is_none(), "{:?}", stray.raw);
}

/// Plays one server request in a turn, answers it with `response`, and returns what the
/// provider wrote back for it (and whether it also interrupted the turn).
async fn answer(request: Value, response: Response) -> (Value, bool) {
    let (reply, interrupted, _) = answer_seen(request, response).await;
    (reply, interrupted)
}

/// [`answer`], also returning the request the host saw.
async fn answer_seen(request: Value, response: Response) -> (Value, bool, Request) {
    let line = json!({"id": 0, "method": request["method"], "params": request["params"]}).to_string();
    let script = admitted()
        .stdout(line)
        .wait_line(LineMatch::response(0))
        .stdout(notification("serverRequest/resolved", json!({"threadId": "th-1", "requestId": 0})))
        .stdout(completed("completed"))
        .wait_eof();
    let fixture = Fixture::with(script);
    let session = fixture.session(options()).await;
    let response = std::sync::Mutex::new(Some(response));
    let seen = std::sync::Mutex::new(None);
    let events = fixture
        .run(&session, |request| {
            *seen.lock().unwrap() = Some(request.clone());
            response.lock().unwrap().take()
        })
        .await;
    assert!(names(&events).contains(&"request_resolved"), "{:?}", names(&events));
    fixture.harness.stop_session(&session, false).await.unwrap();
    let sent = fixture.sent();
    let reply = sent.iter().find(|m| m["id"] == 0 && m.get("method").is_none()).expect("an answer").clone();
    assert!(reply.get("error").is_none(), "{reply}");
    let interrupted = sent.iter().any(|m| m["method"] == "turn/interrupt");
    (reply["result"].clone(), interrupted, seen.into_inner().unwrap().expect("a request"))
}

fn command_approval(decisions: Value) -> Value {
    json!({"method": "item/commandExecution/requestApproval", "params": {"threadId": "th-1", "turnId": "tu-1",
           "itemId": "c1", "command": "rm -rf build", "cwd": "/w", "reason": "clean up", "availableDecisions": decisions}})
}

#[tokio::test(start_paused = true)]
async fn approvals_are_answered_in_codex_shapes() {
    let offered = json!(["accept", "cancel"]);
    let cases: Vec<(Value, Response, Value)> = vec![
        (command_approval(offered.clone()), Response::approve(), json!({"decision": "accept"})),
        (
            command_approval(offered.clone()),
            Response::approve_with(Scope::Session),
            json!({"decision": "acceptForSession"}),
        ),
        (command_approval(offered.clone()), Response::deny("no"), json!({"decision": "decline"})),
        (command_approval(offered), Response::cancel("stop"), json!({"decision": "cancel"})),
        (
            json!({"method": "item/fileChange/requestApproval", "params": {"threadId": "th-1", "turnId": "tu-1", "itemId": "f1"}}),
            Response::approve_with(Scope::Session),
            json!({"decision": "acceptForSession"}),
        ),
        (
            json!({"method": "item/permissions/requestApproval", "params": {"threadId": "th-1", "turnId": "tu-1",
                   "itemId": "p1", "cwd": "/w", "permissions": {"network": {"enabled": true}}}}),
            Response::approve(),
            json!({"permissions": {"network": {"enabled": true}}, "scope": "turn"}),
        ),
        (
            json!({"method": "item/permissions/requestApproval", "params": {"threadId": "th-1", "turnId": "tu-1",
                   "itemId": "p1", "cwd": "/w", "permissions": {"network": {"enabled": true}}}}),
            Response::deny("no"),
            json!({"permissions": {}}),
        ),
        (
            json!({"method": "mcpServer/elicitation/request", "params": {"threadId": "th-1", "turnId": "tu-1",
                   "serverName": "files", "mode": "form", "message": "Which root?",
                   "requestedSchema": {"type": "object", "properties": {"root": {"type": "string"}}}}}),
            Response::content(json!({"root": "/srv"})),
            json!({"action": "accept", "content": {"root": "/srv"}}),
        ),
        (
            json!({"method": "mcpServer/elicitation/request", "params": {"threadId": "th-1", "turnId": "tu-1",
                   "serverName": "files", "mode": "form", "message": "Which root?", "requestedSchema": {}}}),
            Response::deny("no"),
            json!({"action": "decline"}),
        ),
    ];
    for (request, response, expected) in cases {
        let method = request["method"].clone();
        let (reply, interrupted) = answer(request, response.clone()).await;
        assert_eq!(reply, expected, "{method} answered with {response:?}");
        assert!(!interrupted);
    }
}

#[tokio::test(start_paused = true)]
async fn offered_amendments_become_choices_and_choose_sends_them_back() {
    let execpolicy = json!({"acceptWithExecpolicyAmendment": {"execpolicy_amendment": ["touch", "approved.txt"]}});
    let mut request = command_approval(json!(["accept", execpolicy.clone(), "cancel"]));
    request["params"]["proposedExecpolicyAmendment"] = json!(["touch", "approved.txt"]);
    let (reply, interrupted, seen) = answer_seen(request, Response::choose("accept_with_execpolicy_amendment")).await;
    assert_eq!(reply, json!({"decision": execpolicy}));
    assert!(!interrupted);
    let [choice] = seen.choices.try_into().expect("one choice");
    assert_eq!(choice.value, "accept_with_execpolicy_amendment");
    assert!(choice.description.as_deref().is_some_and(|d| d.contains("`touch approved.txt`")), "{choice:?}");
    assert_eq!(seen.metadata["execpolicy_amendment"], json!(["touch", "approved.txt"]));
    assert_eq!(seen.scopes, vec![Scope::Once, Scope::Session], "approve keeps its scopes");

    let network = json!({"applyNetworkPolicyAmendment": {"network_policy_amendment": {"host": "example.com", "action": "allow"}}});
    let mut request = command_approval(json!(["accept", "acceptForSession", network.clone(), "cancel"]));
    request["params"]["networkApprovalContext"] = json!({"host": "example.com", "protocol": "https"});
    request["params"]["proposedNetworkPolicyAmendments"] =
        json!([{"host": "example.com", "action": "allow"}, {"host": "example.com", "action": "deny"}]);
    let (reply, _, seen) = answer_seen(request, Response::choose("apply_network_policy_amendment")).await;
    assert_eq!(reply, json!({"decision": network}));
    let [choice] = seen.choices.try_into().expect("one choice");
    assert!(choice.description.as_deref().is_some_and(|d| d.contains("`example.com`")), "{choice:?}");
    assert_eq!(seen.metadata["network_policy_amendment"], json!({"host": "example.com", "action": "allow"}));
}

#[tokio::test(start_paused = true)]
async fn an_unoffered_choice_is_refused_before_anything_is_sent() {
    let execpolicy = json!({"acceptWithExecpolicyAmendment": {"execpolicy_amendment": ["ls"]}});
    let request = json!({"id": 0, "method": "item/commandExecution/requestApproval", "params": {"threadId": "th-1",
        "turnId": "tu-1", "itemId": "c1", "command": "ls", "availableDecisions": ["accept", execpolicy, "cancel"]}});
    let script = admitted()
        .stdout(request.to_string())
        .wait_line(LineMatch::response(0))
        .stdout(completed("completed"))
        .wait_eof();
    let fixture = Fixture::with(script);
    let session = fixture.session(options()).await;
    let turn = fixture.harness.start_turn(&session, "hi", TurnOptions::new()).await.unwrap();
    let mut stream = fixture.harness.stream(&turn, Replay::Start, None).await.unwrap();
    while let Some(event) = stream.next().await {
        let event = event.unwrap();
        if let EventKind::RequestCreated(request) = &event.kind {
            match fixture.harness.respond(request, Response::choose("apply_network_policy_amendment")).await {
                Err(Error::InvalidResponse(message)) => {
                    assert!(message.contains("`accept_with_execpolicy_amendment`"), "names the offer: {message}");
                }
                other => panic!("expected InvalidResponse, got {other:?}"),
            }
            // The refusal was definite: the request can still be answered.
            fixture.harness.respond(request, Response::approve()).await.unwrap();
        }
        if event.is_terminal() {
            break;
        }
    }
    let answers: Vec<Value> = fixture.sent().into_iter().filter(|m| m["id"] == 0).collect();
    assert_eq!(answers, vec![json!({"id": 0, "result": {"decision": "accept"}})]);
}

fn question(questions: Value) -> Value {
    json!({"method": "item/tool/requestUserInput", "params": {"threadId": "th-1", "turnId": "tu-1", "itemId": "q",
           "isBlocking": true, "questions": questions}})
}

#[tokio::test(start_paused = true)]
async fn questions_are_answered_by_question_id() {
    let one = json!([{"id": "color", "header": "Color", "question": "Pick one",
                      "options": [{"label": "red", "description": "warm"}, {"label": "blue", "description": "cool"}],
                      "isOther": true}]);
    let (reply, _) = answer(question(one.clone()), Response::answer("blue")).await;
    assert_eq!(reply, json!({"answers": {"color": {"answers": ["blue"]}}}));
    let two = json!([{"id": "a", "header": "", "question": "A?"}, {"id": "b", "header": "", "question": "B?"}]);
    let (reply, _) = answer(question(two), Response::answers([("a", "1"), ("b", "2")])).await;
    assert_eq!(reply, json!({"answers": {"a": {"answers": ["1"]}, "b": {"answers": ["2"]}}}));
    let (reply, interrupted) = answer(question(one.clone()), Response::deny("skip")).await;
    assert_eq!(reply, json!({"answers": {"color": {"answers": []}}}));
    assert!(!interrupted);
    // Codex has no cancel answer for questions: the turn is interrupted after an empty answer.
    let (reply, interrupted) = answer(question(one), Response::cancel("stop")).await;
    assert_eq!(reply, json!({"answers": {"color": {"answers": []}}}));
    assert!(interrupted);
}

/// A question request line with server request ID `id` and one question `qid`.
fn question_request(id: u64, qid: &str) -> String {
    let params = question(json!([{"id": qid, "header": "", "question": "Go on?"}]))["params"].clone();
    json!({"id": id, "method": "item/tool/requestUserInput", "params": params}).to_string()
}

fn interrupts(fixture: &Fixture) -> Vec<Value> {
    fixture.sent().into_iter().filter(|m| m["method"] == "turn/interrupt").collect()
}

#[tokio::test(start_paused = true)]
async fn cancelling_two_pending_questions_interrupts_the_turn_once() {
    let script = admitted()
        .on_request("turn/interrupt", json!({}))
        .stdout(question_request(0, "a"))
        .stdout(question_request(1, "b"))
        .wait_line(LineMatch::response(0))
        .wait_line(LineMatch::response(1))
        // Time for anything the second answer sets off to arrive.
        .sleep(Duration::from_secs(1))
        .stdout(completed("interrupted"))
        .wait_eof();
    let fixture = Fixture::with(script);
    let session = fixture.session(options()).await;
    let events = fixture.run(&session, |_| Some(Response::cancel("stop"))).await;
    assert_eq!(end(&events).status, TurnStatus::Interrupted);
    assert_eq!(names(&events).iter().filter(|n| **n == "request_resolved").count(), 2);
    fixture.harness.stop_session(&session, false).await.unwrap();
    let answers: Vec<Value> = fixture.sent().into_iter().filter(|m| m.get("method").is_none()).collect();
    assert_eq!(answers.len(), 2, "{answers:?}");
    assert!(answers.iter().all(|m| m["result"]["answers"].is_object()), "both are answered: {answers:?}");
    let sent = interrupts(&fixture);
    assert_eq!(sent.len(), 1, "one turn/interrupt per turn: {sent:?}");
    assert_eq!(sent[0]["params"], json!({"threadId": "th-1", "turnId": "tu-1"}));
}

#[tokio::test(start_paused = true)]
async fn cancel_after_a_cancelled_question_does_not_interrupt_again() {
    let script = admitted()
        .on_request("turn/interrupt", json!({}))
        .stdout(question_request(0, "a"))
        .wait_line(LineMatch::response(0))
        .sleep(Duration::from_secs(1))
        .stdout(completed("interrupted"))
        .wait_eof();
    let fixture = Fixture::with(script);
    let session = fixture.session(options()).await;
    let turn = fixture.harness.start_turn(&session, "hi", TurnOptions::new()).await.unwrap();
    let mut stream = fixture.harness.stream(&turn, Replay::Start, None).await.unwrap();
    let mut status = None;
    while let Some(event) = stream.next().await {
        let event = event.unwrap();
        if let EventKind::RequestCreated(request) = &event.kind {
            fixture.harness.respond(request, Response::cancel("stop")).await.expect("answered");
            fixture.harness.cancel(&turn).await.expect("cancel accepted");
        }
        if let Some(end) = event.kind.terminal_end() {
            status = Some(end.status);
            break;
        }
    }
    assert_eq!(status, Some(TurnStatus::Interrupted));
    fixture.harness.stop_session(&session, false).await.unwrap();
    assert_eq!(interrupts(&fixture).len(), 1, "one turn/interrupt per turn");
}

#[tokio::test(start_paused = true)]
async fn questions_become_requests_with_choices() {
    let script = admitted()
        .stdout(
            json!({"id": 0, "method": "item/tool/requestUserInput", "params": question(json!([
                {"id": "color", "header": "Color", "question": "Pick one", "isOther": true, "isSecret": false,
                 "options": [{"label": "red", "description": "warm"}]}]))["params"]})
            .to_string(),
        )
        .wait_line(LineMatch::response(0))
        .stdout(completed("completed"))
        .wait_eof();
    let fixture = Fixture::with(script);
    let session = fixture.session(options()).await;
    let seen = std::sync::Mutex::new(None);
    fixture
        .run(&session, |request| {
            *seen.lock().unwrap() = Some(request.clone());
            Some(Response::answer("red"))
        })
        .await;
    let request = seen.into_inner().unwrap().expect("a request");
    assert_eq!(request.kind, agent_core::RequestKind::Question);
    assert_eq!(request.prompt, "Pick one");
    assert!(request.scopes.is_empty());
    let q = &request.questions[0];
    assert_eq!((q.id.as_str(), q.header.as_deref(), q.allow_other), ("color", Some("Color"), true));
    assert_eq!(q.choices[0].description.as_deref(), Some("warm"));
}

#[tokio::test(start_paused = true)]
async fn an_unoffered_scope_is_refused_before_anything_is_sent() {
    let request = json!({"id": 0, "method": "item/commandExecution/requestApproval", "params": {"threadId": "th-1",
        "turnId": "tu-1", "itemId": "c1", "kind": "writeStdin", "command": "y", "availableDecisions": ["accept", "decline"]}});
    let script = admitted()
        .stdout(request.to_string())
        .wait_line(LineMatch::response(0))
        .stdout(completed("completed"))
        .wait_eof();
    let fixture = Fixture::with(script);
    let session = fixture.session(options()).await;
    let turn = fixture.harness.start_turn(&session, "hi", TurnOptions::new()).await.unwrap();
    let mut stream = fixture.harness.stream(&turn, Replay::Start, None).await.unwrap();
    let mut outcome = None;
    while let Some(event) = stream.next().await {
        let event = event.unwrap();
        if let EventKind::RequestCreated(request) = &event.kind {
            assert_eq!(request.scopes, vec![Scope::Once]);
            let refused = fixture.harness.respond(request, Response::approve_with(Scope::Session)).await;
            assert!(matches!(refused, Err(Error::UnsupportedScope { scope: Scope::Session })), "{refused:?}");
            // The refusal was definite: the request can still be answered.
            fixture.harness.respond(request, Response::deny("no")).await.unwrap();
        }
        if let Some(end) = event.kind.terminal_end() {
            outcome = Some(end.status);
            break;
        }
    }
    assert_eq!(outcome, Some(TurnStatus::Completed));
    let answers: Vec<Value> = fixture.sent().into_iter().filter(|m| m["id"] == 0).collect();
    assert_eq!(answers, vec![json!({"id": 0, "result": {"decision": "decline"}})]);
}

#[tokio::test(start_paused = true)]
async fn exit_without_turn_completed_fails_the_turn_with_status_and_stderr() {
    let script = admitted()
        .stdout(delta("partial"))
        .stderr("\u{1b}[31mERROR\u{1b}[0m model stream broke")
        .stderr("panic: giving up")
        .exit(3);
    let fixture = Fixture::with(script);
    let session = fixture.session(options()).await;
    let mut session_events = fixture.harness.subscribe(&session, Replay::Start).await.unwrap();
    let events = fixture.run(&session, |_| None).await;
    let end = end(&events);
    assert_eq!(end.status, TurnStatus::Failed);
    assert_eq!(end.result.exit_status, Some(ExitStatus::code(3)));
    assert_eq!(end.result.stderr_tail.as_deref(), Some("ERROR model stream broke\npanic: giving up"));
    assert!(end.result.reason.is_some(), "a failed turn says why");
    assert_eq!(end.result.text.as_deref(), Some("partial"));
    let status = fixture.harness.status(&session).await.unwrap();
    assert_eq!(status.status, SessionState::Unavailable);
    let mut saw_transport_error = false;
    while let Ok(Some(Ok(event))) =
        tokio::time::timeout(Duration::from_secs(1), futures::StreamExt::next(&mut session_events)).await
    {
        saw_transport_error |= event.type_name() == "transport_error";
    }
    assert!(saw_transport_error);
}

#[tokio::test(start_paused = true)]
async fn garbage_and_unknown_frames_never_end_the_session() {
    let script = admitted()
        .stdout("this is not json")
        .stdout_bytes(b"\xff\xfe\n".to_vec())
        .stdout(r#"{"type":"thread.started"}"#)
        .stdout(notification("brand/new/method", json!({"threadId": "th-1", "turnId": "tu-1"})))
        .stdout(r#"{"method":"item/agentMessage/delta","params":{"itemId":7}}"#)
        .stdout("")
        .stdout(format!("{{\"pad\":\"{}\"}}", "x".repeat(5000)))
        .stdout_bytes(b"{\"method\":\"warning\",\"params\":{\"message\":\"crlf\"}}\r\n".to_vec())
        .stdout(delta("still here"))
        .stdout(completed("completed"))
        .wait_eof();
    let fixture = Fixture::with(script);
    let session = fixture.session(options().provider_option(CodexOptions::new().max_line_bytes(4096))).await;
    let events = fixture.run(&session, |_| None).await;
    assert_eq!(
        names(&events),
        [
            "turn_started",
            "warning",
            "warning",
            "provider_event",
            "provider_event",
            "provider_event",
            "warning",
            "warning",
            "message_delta",
            "turn_completed"
        ]
    );
    assert_eq!(events[7].kind, EventKind::Warning { message: "crlf".into() });
    let methods: Vec<&str> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ProviderEvent { method } => Some(method.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(methods, ["(not json-rpc)", "brand/new/method", "item/agentMessage/delta"]);
    assert!(events[6].raw.is_none());
    assert_eq!(
        events[4].raw.as_ref().unwrap().get(),
        notification("brand/new/method", json!({"threadId": "th-1", "turnId": "tu-1"}))
    );
    assert_eq!(end(&events).status, TurnStatus::Completed);
}

#[tokio::test(start_paused = true)]
async fn a_refused_turn_fails_definitely_and_the_session_stays_usable() {
    let script = handshake()
        .expect_request("turn/start")
        .respond_error(json!({"code": -32600, "message": "thread is busy"}))
        .expect_request("turn/start")
        .respond(json!({"turn": {"id": "tu-1", "status": "inProgress"}}))
        .stdout(completed("completed"))
        .wait_eof();
    let fixture = Fixture::with(script);
    let session = fixture.session(options()).await;
    let refused = fixture.run(&session, |_| None).await;
    let first = end(&refused);
    assert_eq!(first.status, TurnStatus::Failed);
    assert!(first.result.reason.as_deref().unwrap().contains("thread is busy"));
    let accepted = fixture.run(&session, |_| None).await;
    assert_eq!(end(&accepted).status, TurnStatus::Completed);
    // Each request had an ID of its own, so each answer reached the request it was for.
    let mut ids: Vec<String> = fixture
        .sent()
        .iter()
        .filter(|m| m.get("method").is_some())
        .filter_map(|m| Some(m.get("id")?.to_string()))
        .collect();
    assert_eq!(ids.len(), 4, "initialize, thread/start and two turn/start: {ids:?}");
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 4, "request IDs are unique: {ids:?}");
}

#[tokio::test(start_paused = true)]
async fn cancel_interrupts_the_codex_turn() {
    let script = admitted()
        .stdout(delta("working"))
        .wait_request("turn/interrupt")
        .respond(json!({}))
        .stdout(completed("interrupted"))
        .wait_eof();
    let fixture = Fixture::with(script);
    let session = fixture.session(options()).await;
    assert_eq!(fixture.cancel_at_first_delta(&session).await, Some(TurnStatus::Interrupted));
    assert_eq!(fixture.sent_method("turn/interrupt")["params"], json!({"threadId": "th-1", "turnId": "tu-1"}));
}

/// Answers outside the JSON-RPC shapes: a `null` result is a success with nothing to return, an
/// `error` that is not an object is still a refusal. Neither is a broken connection, so neither
/// retires the session.
#[tokio::test(start_paused = true)]
async fn a_null_result_and_a_string_error_are_read_as_success_and_refusal() {
    let script = handshake()
        .expect_request("turn/start")
        .respond_error(json!("thread is busy"))
        .expect_request("turn/start")
        .respond(TURN)
        .stdout(delta("working"))
        .wait_request("turn/interrupt")
        .respond(json!(null))
        .stdout(completed("interrupted"))
        .expect_request("turn/start")
        .respond(TURN.replace("tu-1", "tu-2"))
        .stdout(completed("completed").replace("tu-1", "tu-2"))
        .wait_eof();
    let fixture = Fixture::with(script);
    let session = fixture.session(options()).await;
    let refused = fixture.run(&session, |_| None).await;
    let first = end(&refused);
    assert_eq!(first.status, TurnStatus::Failed);
    assert!(first.result.reason.as_deref().unwrap().contains("codex refused turn/start: thread is busy"), "{first:?}");

    // `cancel` returns Ok only once the interrupt was acknowledged (here by a null result).
    assert_eq!(fixture.cancel_at_first_delta(&session).await, Some(TurnStatus::Interrupted));
    let again = fixture.run(&session, |_| None).await;
    assert_eq!(end(&again).status, TurnStatus::Completed, "the session stays usable");
}

#[tokio::test(start_paused = true)]
async fn turn_completed_closes_open_items_and_a_repeat_is_dropped() {
    let script = admitted()
        .stdout(notification(
            "item/started",
            json!({"threadId": "th-1", "turnId": "tu-1", "item": {"type": "commandExecution", "id": "c1",
                   "command": "sleep 100", "cwd": "/w", "status": "inProgress", "commandActions": []}}),
        ))
        .stdout(notification(
            "item/commandExecution/outputDelta",
            json!({"threadId": "th-1", "turnId": "tu-1", "itemId": "c1", "delta": "tick"}),
        ))
        .stdout(completed("interrupted"))
        .stdout(completed("completed"))
        .wait_eof();
    let fixture = Fixture::with(script);
    let session = fixture.session(options()).await;
    let mut all = fixture.harness.subscribe(&session, Replay::Start).await.unwrap();
    let events = fixture.run(&session, |_| None).await;
    assert_eq!(
        names(&events),
        ["turn_started", "tool_started", "command_output_delta", "tool_completed", "turn_interrupted"]
    );
    let EventKind::ToolCompleted { status, output, .. } = &events[3].kind else { panic!("tool_completed") };
    assert_eq!((*status, output.as_deref()), (agent_core::event::ToolStatus::Interrupted, Some("tick")));
    fixture.harness.stop_session(&session, false).await.unwrap();
    let mut terminals = 0;
    while let Some(Ok(event)) = futures::StreamExt::next(&mut all).await {
        terminals += usize::from(event.is_terminal());
    }
    assert_eq!(terminals, 1, "the repeated turn/completed belongs to a finished turn");
}

#[tokio::test(start_paused = true)]
async fn requests_while_no_turn_runs_are_declined() {
    let request = json!({"id": 5, "method": "mcpServer/elicitation/request", "params": {"threadId": "th-1",
        "serverName": "files", "mode": "form", "message": "Token?", "requestedSchema": {}}});
    let unknown = json!({"id": 6, "method": "account/chatgptAuthTokens/refresh", "params": {}});
    let script = handshake()
        .stdout(request.to_string())
        .stdout(unknown.to_string())
        .wait_line(LineMatch::response(6))
        .wait_eof();
    let fixture = Fixture::with(script);
    let session = fixture.session(options()).await;
    let mut events = fixture.harness.subscribe(&session, Replay::Start).await.unwrap();
    let mut warnings = 0;
    while let Ok(Some(Ok(event))) =
        tokio::time::timeout(Duration::from_secs(1), futures::StreamExt::next(&mut events)).await
    {
        warnings += usize::from(event.type_name() == "warning");
    }
    assert_eq!(warnings, 2);
    let sent = fixture.sent();
    assert!(sent.contains(&json!({"id": 5, "result": {"action": "decline"}})), "{sent:?}");
    let refused = sent.iter().find(|m| m["id"] == 6).expect("answered");
    assert_eq!(refused["error"]["code"], -32601);
}

#[tokio::test(start_paused = true)]
async fn a_missing_binary_names_the_fix() {
    let exec = ScriptedExec::new();
    let harness = Harness::builder()
        .provider(CodexProvider::new())
        .exec(Arc::new(exec) as Arc<dyn Exec>)
        .store(StoreChoice::Disabled)
        .build()
        .unwrap();
    match harness.start_session("codex", options()).await {
        Err(Error::ProviderUnavailable { reason, .. }) => {
            assert!(
                reason.contains("npm install -g @openai/codex") && reason.contains("CodexOptions::binary"),
                "{reason}"
            );
        }
        other => panic!("expected ProviderUnavailable, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn an_old_or_foreign_binary_is_refused_before_the_app_server_starts() {
    for (output, needle) in
        [("codex-cli 0.160.2", "older than the minimum supported 0.171.0"), ("hello", "is it the codex CLI?")]
    {
        let fixture = Fixture::new(output, Script::new().exit(0));
        match fixture.harness.start_session("codex", options()).await {
            Err(Error::ProviderUnavailable { reason, .. }) => assert!(reason.contains(needle), "{reason}"),
            other => panic!("expected ProviderUnavailable, got {other:?}"),
        }
        assert_eq!(fixture.exec.runs().len(), 1, "only `--version` ran");
    }
}

#[tokio::test(start_paused = true)]
async fn a_failed_resume_is_an_error_not_a_fresh_thread() {
    let script = Script::new()
        .expect_request("initialize")
        .respond(INITIALIZED)
        .expect_line(r#""method":"initialized""#)
        .expect_request("thread/resume")
        .respond_error(json!({"code": -32600, "message": "no rollout found for thread id th-9"}))
        .wait_eof();
    let fixture = Fixture::with(script);
    let options = options().resume_provider_session("th-9");
    match fixture.harness.start_session("codex", options).await {
        Err(Error::ResumeFailed { mode: ConversationMode::Resume, reason }) => {
            assert!(reason.contains("th-9") && reason.contains("no fresh thread"), "{reason}");
        }
        other => panic!("expected ResumeFailed, got {other:?}"),
    }
    let resume = fixture.sent_method("thread/resume")["params"].clone();
    assert_eq!(resume["threadId"], "th-9");
    assert!(fixture.sent().iter().all(|m| m["method"] != "thread/start"));
}

#[tokio::test(start_paused = true)]
async fn a_crash_during_the_handshake_reports_status_and_stderr() {
    let script = Script::new().expect_request("initialize").stderr("failed to load configuration").exit(1);
    let fixture = Fixture::with(script);
    match fixture.harness.start_session("codex", options()).await {
        Err(Error::ProviderUnavailable { reason, .. }) => {
            // The error carries no exit status of its own: the reason says it, with stderr.
            assert!(reason.contains(&ExitStatus::code(1).to_string()), "{reason}");
            assert!(reason.contains("failed to load configuration"), "{reason}");
        }
        other => panic!("expected ProviderUnavailable, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_hung_handshake_times_out_and_the_process_is_killed() {
    let fixture = Fixture::with(Script::new().hang());
    let options = options().startup_timeout(Duration::from_secs(5));
    let outcome = fixture.harness.start_session("codex", options).await;
    assert!(matches!(outcome, Err(Error::Timeout { operation: "initialize", .. })), "{outcome:?}");
    let status = fixture.app_server().wait().await;
    assert_eq!(status.signal, Some(9));
}

#[tokio::test(start_paused = true)]
async fn a_stderr_flood_keeps_only_the_tail() {
    let mut script = admitted();
    for i in 0..5000 {
        script = script.step(Step::stderr(format!("log line {i}")));
    }
    let fixture = Fixture::with(script.exit(101));
    let session = fixture.session(options()).await;
    let events = fixture.run(&session, |_| None).await;
    let tail = end(&events).result.stderr_tail.expect("a tail");
    assert_eq!(tail.lines().count(), 40);
    assert!(tail.ends_with("log line 4999"), "{tail}");
}

#[tokio::test(start_paused = true)]
async fn subscription_auth_refuses_keys_before_spawning() {
    let fixture = Fixture::with(Script::new());
    let options = SessionOptions::new(std::env::temp_dir()).env("OPENAI_API_KEY", "sk-secret-value");
    match fixture.harness.start_session("codex", options).await {
        Err(Error::AuthGuard { reason }) => {
            assert!(reason.contains("OPENAI_API_KEY") && !reason.contains("sk-secret-value"), "{reason}");
        }
        other => panic!("expected AuthGuard, got {other:?}"),
    }
    assert!(fixture.exec.runs().is_empty(), "nothing was spawned");
}

#[tokio::test(start_paused = true)]
async fn a_crash_during_turn_start_retires_the_session_with_the_exit_report() {
    let script = handshake().expect_request("turn/start").stderr("out of memory").exit(137);
    let fixture = Fixture::with(script);
    let session = fixture.session(options()).await;
    // The session retires right after the turn fails: watch it from the start.
    let mut events = fixture.harness.subscribe(&session, Replay::Start).await.unwrap();
    fixture.harness.start_turn(&session, "hi", TurnOptions::new()).await.unwrap();
    let mut end = None;
    while let Some(Ok(event)) = futures::StreamExt::next(&mut events).await {
        if let Some(e) = event.kind.terminal_end() {
            end = Some(e.clone());
        }
    }
    let end = end.expect("a terminal event");
    assert_eq!(end.status, TurnStatus::Failed);
    let reason = end.result.reason.unwrap_or_default();
    // For a turn that was never admitted, only the reason tells the exit and the stderr tail.
    assert!(reason.contains(&ExitStatus::code(137).to_string()) && reason.contains("out of memory"), "{reason}");
    let next = fixture.harness.start_turn(&session, "again", TurnOptions::new()).await;
    let retired = matches!(next, Err(Error::SessionClosed { reason: ExitReason::Retired { .. }, .. }));
    assert!(retired, "the session retired and is no longer usable: {next:?}");
}

#[tokio::test(start_paused = true)]
async fn a_crash_during_thread_start_reports_status_and_stderr() {
    let script = Script::new()
        .expect_request("initialize")
        .respond(INITIALIZED)
        .expect_line(r#""method":"initialized""#)
        .expect_request("thread/start")
        .stderr("sandbox setup failed")
        .die(6);
    let fixture = Fixture::with(script);
    match fixture.harness.start_session("codex", options()).await {
        Err(Error::ProviderUnavailable { reason, .. }) => {
            assert!(reason.contains("thread/start") && reason.contains(&ExitStatus::signal(6).to_string()), "{reason}");
            assert!(reason.contains("sandbox setup failed"), "{reason}");
        }
        other => panic!("expected ProviderUnavailable, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_hung_cli_that_ignores_the_interrupt_retires_the_session_and_is_killed() {
    let script = admitted().stdout(delta("working")).hang();
    let fixture = Fixture::with(script);
    let session = fixture.session(options().provider_command_timeout(Duration::from_secs(10))).await;
    let mut events = fixture.harness.subscribe(&session, Replay::Start).await.unwrap();
    let turn = fixture.harness.start_turn(&session, "hi", TurnOptions::new()).await.unwrap();
    let mut end = None;
    while let Some(Ok(event)) = futures::StreamExt::next(&mut events).await {
        if event.type_name() == "message_delta" {
            fixture.harness.cancel(&turn).await.unwrap();
        }
        if let Some(e) = event.kind.terminal_end() {
            end = Some(e.clone());
        }
    }
    let end = end.expect("a terminal event");
    assert_eq!(end.status, TurnStatus::Failed);
    assert!(end.result.reason.as_deref().unwrap().contains("cancellation failed"), "{:?}", end.result.reason);
    // No orphan: the retired session's process is killed.
    assert_eq!(fixture.app_server().wait().await.signal, Some(9));
}

#[tokio::test(start_paused = true)]
async fn ten_megabyte_lines_are_read_whole() {
    let text = "y".repeat(10 * 1024 * 1024);
    let script = admitted().stdout(delta(&text)).stdout(completed("completed")).wait_eof();
    let fixture = Fixture::with(script);
    let session = fixture.session(options()).await;
    let events = fixture.run(&session, |_| None).await;
    let EventKind::MessageDelta { text: got, .. } = &events[1].kind else { panic!("{:?}", names(&events)) };
    assert_eq!(got.len(), text.len());
    assert_eq!(end(&events).result.text.as_deref().map(str::len), Some(text.len()));
}
