//! The real `claude` 2.1.332 and 2.1.197 (from `cargo xtask clis`) driven through the public
//! `Harness` API, offline, against the testkit's fake Messages server on 127.0.0.1. Each test
//! runs on each version, one after the other.
//!
//! Every test fails with "run `cargo xtask clis`" when the pinned CLI is not installed.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_core::event::ToolStatus;
use agent_core::exec::Exec;
use agent_core::{
    Error, Event, EventKind, ExpiryReason, Harness, Replay, Request, RequestKind, Response, Scope, SessionOptions,
    SessionRef, StoreChoice, Turn, TurnOptions, TurnStatus,
};
use agent_exec::LocalExec;
use agent_provider_claude::{ClaudeOptions, ClaudeProvider, ClaudeTurnOptions, PermissionMode};
use agent_store_memory::MemoryStore;
use agent_testkit::events::{count, names, terminal};
use agent_testkit::recording::RecordingExec;
use agent_testkit::{Cli, FakeModel, OfflineEnv, Provider, Scenario};
use futures::StreamExt;
use serde_json::Value;

/// Longest wait for any one event of a turn.
const IDLE: Duration = Duration::from_secs(30);

/// Every pinned claude, newest first: 2.1.332 and 2.1.197. Each test runs on each.
fn clis() -> Vec<Cli> {
    Cli::pinned(Provider::Claude).unwrap_or_else(|e| panic!("{e}\nrun `cargo xtask clis`"))
}

/// One test's world: the CLI, the fake model, an offline environment and a harness.
struct Claude {
    cli: Cli,
    server: FakeModel,
    env: OfflineEnv,
    exec: Arc<RecordingExec>,
    harness: Harness,
}

impl Claude {
    async fn start(cli: &Cli, scenario: Scenario) -> Claude {
        Claude::start_with(cli, scenario, |builder| builder).await
    }

    async fn start_with(
        cli: &Cli,
        scenario: Scenario,
        configure: impl FnOnce(agent_core::HarnessBuilder) -> agent_core::HarnessBuilder,
    ) -> Claude {
        let cli = cli.clone();
        let server = FakeModel::start(scenario).await.expect("fake model server");
        let env = OfflineEnv::new(&cli, &server).expect("offline environment");
        let exec = Arc::new(RecordingExec::new(Arc::new(LocalExec::new())));
        let builder = Harness::builder()
            .provider(ClaudeProvider::new())
            .exec(Arc::clone(&exec) as Arc<dyn Exec>)
            .store(StoreChoice::Custom(Arc::new(MemoryStore::new())));
        let harness = configure(builder).build().expect("harness");
        Claude { cli, server, env, exec, harness }
    }

    fn options(&self) -> SessionOptions {
        self.options_with(ClaudeOptions::new())
    }

    fn options_with(&self, claude: ClaudeOptions) -> SessionOptions {
        self.env.session_options().provider_option(claude.binary(self.cli.program()))
    }

    async fn session(&self, options: SessionOptions) -> SessionRef {
        self.harness.start_session("claude", options).await.expect("session starts")
    }

    fn workspace(&self) -> &Path {
        self.env.workspace()
    }

    /// Starts a turn and collects its events up to the terminal one, answering requests with
    /// `answer` (`None`: leave it pending).
    async fn run(
        &self,
        session: &SessionRef,
        prompt: &str,
        answer: impl FnMut(&Request) -> Option<Response>,
    ) -> (Turn, Vec<Arc<Event>>) {
        self.run_with(session, prompt, TurnOptions::new(), answer).await
    }

    async fn run_with(
        &self,
        session: &SessionRef,
        prompt: &str,
        options: TurnOptions,
        mut answer: impl FnMut(&Request) -> Option<Response>,
    ) -> (Turn, Vec<Arc<Event>>) {
        let turn = self.harness.start_turn(session, prompt, options).await.expect("turn recorded");
        let mut stream = self.harness.stream(&turn, Replay::Start, Some(IDLE)).await.expect("turn stream");
        let mut events = Vec::new();
        while let Some(event) = stream.next().await {
            let event = event.unwrap_or_else(|e| panic!("turn stream ended early: {e}; events: {}", names(&events)));
            if let EventKind::RequestCreated(request) = &event.kind
                && let Some(response) = answer(request)
            {
                self.harness.respond(request, response).await.expect("response delivered");
            }
            let terminal = event.is_terminal();
            events.push(event);
            if terminal {
                break;
            }
        }
        (turn, events)
    }

    /// Stops every session and checks that no claude process is left and nothing left 127.0.0.1.
    async fn finish(self) {
        for session in self.harness.list_sessions() {
            self.harness.stop_session(&session, true).await.expect("stop");
        }
        for child in self.exec.children() {
            let status = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
            assert!(matches!(status, Ok(Ok(_))), "a claude process outlived its session");
        }
        assert!(self.server.proxy().attempts().is_empty(), "claude tried to reach outside 127.0.0.1");
    }
}

fn deltas(events: &[Arc<Event>]) -> String {
    agent_testkit::events::delta_texts(events).concat()
}

fn requests(events: &[Arc<Event>]) -> Vec<Request> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::RequestCreated(request) => Some((**request).clone()),
            _ => None,
        })
        .collect()
}

fn tool_outputs(events: &[Arc<Event>]) -> Vec<(ToolStatus, String)> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolCompleted { status, output, .. } => Some((*status, output.clone().unwrap_or_default())),
            _ => None,
        })
        .collect()
}

/// The JSON text of the `messages` of the model request at `index`.
fn model_messages(server: &FakeModel, index: usize) -> String {
    let requests = server.model_requests();
    let body: &Value = requests[index].body.as_ref().expect("a JSON body");
    body["messages"].to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_turns_stream_deltas_with_usage_and_cost_per_turn() {
    for cli in clis() {
        eprintln!("claude {}", cli.version());
        let scenario = Scenario::new().deltas(["Hel", "lo ", "world"], 0).echo("second: ").echo("third: ");
        let claude = Claude::start(&cli, scenario).await;
        let session = claude.session(claude.options().system_prompt("Answer briefly.")).await;
        let mut costs = Vec::new();
        for (n, prompt) in ["Say hello", "Again", "Once more"].into_iter().enumerate() {
            let (_, events) = claude.run(&session, prompt, |_| None).await;
            let end = terminal(&events);
            assert_eq!(end.status, TurnStatus::Completed, "{}", names(&events));
            assert_eq!(deltas(&events), end.result.text.clone().unwrap(), "the deltas add up to the text");
            assert_eq!(count(&events, "assistant_message"), 1);
            assert_eq!(count(&events, "usage_updated"), 1);
            let usage = end.result.usage.expect("usage");
            assert!(usage.input_tokens.is_some_and(|t| t > 0) && usage.output_tokens.is_some_and(|t| t > 0));
            costs.push(usage.cost_usd.expect("cost"));
            if n == 0 {
                assert_eq!(end.result.text.as_deref(), Some("Hello world"));
            } else {
                assert!(end.result.text.as_deref().unwrap().ends_with(prompt), "{:?}", end.result.text);
            }
            assert!(events.iter().all(|e| e.raw.is_some() || e.type_name().starts_with("turn_")), "{}", names(&events));
        }
        // Each turn's cost is its own, not the process's running total.
        assert!(costs.iter().all(|c| *c > 0.0), "{costs:?}");
        assert!((costs[1] - costs[2]).abs() < costs[1] * 0.5, "per-turn, not cumulative: {costs:?}");
        // The system prompt reached the model, and the third request carries the whole history.
        let requests = claude.server.model_requests();
        assert_eq!(requests.len(), 3);
        assert!(requests[0].body.as_ref().unwrap()["system"].to_string().contains("Answer briefly."));
        let history = model_messages(&claude.server, 2);
        assert!(history.contains("Say hello") && history.contains("Again") && history.contains("Once more"));
        let status = claude.harness.status(&session).await.unwrap();
        assert!(status.provider_session_id.is_some());
        claude.finish().await;
    }
}

/// Approve, approve with edited input, deny, and approve for the session (not asked again, also
/// after a resume), in one session: each answer's effect is what the tool did and what the model
/// saw next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_allow_edit_deny_and_remember_for_the_session() {
    for cli in clis() {
        eprintln!("claude {}", cli.version());
        let scenario = Scenario::new()
            .shell("touch approved.txt && echo approved")
            .quote_tool_result("Tool said: ")
            .shell("touch never.txt && echo unedited")
            .quote_tool_result("Tool said: ")
            .shell("touch denied.txt && echo denied")
            .quote_tool_result("Tool said: ")
            .shell("touch session.txt && echo remembered")
            .quote_tool_result("Tool said: ")
            .shell("touch session.txt && echo remembered")
            .quote_tool_result("Again: ")
            .shell("touch session.txt && echo remembered")
            .quote_tool_result("Resumed: ");
        let claude = Claude::start(&cli, scenario).await;
        let session = claude.session(claude.options()).await;
        let workspace = claude.workspace().to_path_buf();

        // Approve: the command ran.
        let (_, events) = claude.run(&session, "make approved", |_| Some(Response::approve())).await;
        let asked = requests(&events);
        assert_eq!(asked.len(), 1, "{}", names(&events));
        assert_eq!(asked[0].kind, RequestKind::CommandApproval);
        assert_eq!(asked[0].metadata["command"], "touch approved.txt && echo approved");
        assert_eq!(asked[0].scopes, [Scope::Once, Scope::Session]);
        assert!(workspace.join("approved.txt").exists());
        assert_eq!(tool_outputs(&events), [(ToolStatus::Completed, "approved".to_owned())]);
        assert_eq!(terminal(&events).result.text.as_deref(), Some("Tool said: approved"));
        assert_eq!(count(&events, "request_resolved"), 1);

        // Approve with edited input: the edited command ran instead.
        let edited = Response::approve_edited(serde_json::json!({"command": "echo edited-command"}));
        let (_, events) = claude.run(&session, "make never", |_| Some(edited.clone())).await;
        assert!(!workspace.join("never.txt").exists(), "the original command did not run");
        assert_eq!(tool_outputs(&events), [(ToolStatus::Completed, "edited-command".to_owned())]);
        assert_eq!(terminal(&events).result.text.as_deref(), Some("Tool said: edited-command"));

        // Deny: the model saw the denial and the turn completed.
        let (_, events) = claude.run(&session, "make denied", |_| Some(Response::deny("no shell today"))).await;
        assert!(!workspace.join("denied.txt").exists());
        assert_eq!(tool_outputs(&events), [(ToolStatus::Declined, "no shell today".to_owned())]);
        let end = terminal(&events);
        assert_eq!(end.status, TurnStatus::Completed);
        assert_eq!(end.result.text.as_deref(), Some("Tool said: no shell today"));
        assert_eq!(end.result.details.as_ref().unwrap()["permission_denials"][0]["tool_name"], "Bash");

        // Approve for the session: the same command is not asked about again.
        let (_, events) = claude.run(&session, "make session", |_| Some(Response::approve_with(Scope::Session))).await;
        assert_eq!(requests(&events).len(), 1);
        assert!(workspace.join("session.txt").exists());
        let (_, events) = claude.run(&session, "again", |_| panic!("asked again")).await;
        assert!(requests(&events).is_empty(), "{}", names(&events));
        assert_eq!(tool_outputs(&events), [(ToolStatus::Completed, "remembered".to_owned())]);
        assert_eq!(terminal(&events).result.text.as_deref(), Some("Again: remembered"));
        let caps = claude.harness.capabilities(&session).await.unwrap();
        assert_eq!(caps.session_approvals, agent_core::Support::Emulated);

        // And after a resume: the approval is the session's, not the process's.
        claude.harness.stop_session(&session, false).await.expect("stop");
        let resumed = claude.session(claude.options().resume_session(session.id.clone())).await;
        let (_, events) = claude.run(&resumed, "after the resume", |_| panic!("asked again after the resume")).await;
        assert!(requests(&events).is_empty(), "{}", names(&events));
        assert_eq!(terminal(&events).result.text.as_deref(), Some("Resumed: remembered"));
        claude.finish().await;
    }
}

/// A command the agent runs prints a credential the session gave claude, and the MCP secret
/// claude holds for a server: the tool's output, the model's reply quoting it (streamed in
/// deltas of 16 characters, none of which holds a whole value) and every stored event have them
/// redacted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credential_a_tool_prints_is_redacted_from_events_and_the_store() {
    for cli in clis() {
        eprintln!("claude {}", cli.version());
        const TOKEN: &str = "deploy-token-0123456789";
        const DATABASE: &str = "postgres://u:db-pass-0123@db";
        let scenario = Scenario::new()
            .shell("echo token=$DEPLOY_TOKEN; env | grep -c db-pass-0123")
            .quote_tool_result("Tool said: ");
        let claude = Claude::start(&cli, scenario).await;
        let mut server = agent_core::McpServer::stdio("/bin/true", Vec::<String>::new());
        if let agent_core::McpServer::Stdio { env, .. } = &mut server {
            env.insert("DATABASE_URL".into(), DATABASE.into());
        }
        let options = claude.options().env("DEPLOY_TOKEN", TOKEN).mcp_server("db", server);
        let session = claude.session(options).await;
        let (_, events) = claude.run(&session, "show the token", |_| Some(Response::approve())).await;
        // The MCP server's variable is not in the environment of the commands claude runs: it
        // reached claude over its stdin.
        let said = "token=[redacted]\n0";
        assert_eq!(tool_outputs(&events), [(ToolStatus::Completed, said.to_owned())]);
        assert_eq!(terminal(&events).result.text.as_deref(), Some(format!("Tool said: {said}").as_str()));
        let seen = model_messages(&claude.server, 1);
        assert!(seen.contains(TOKEN), "the agent itself saw the session's variable");
        assert!(!seen.contains(DATABASE), "nor the MCP server's: {seen}");
        let last = events.last().expect("events").seq as usize;
        let stored: Vec<_> =
            claude.harness.subscribe(&session, Replay::Start).await.unwrap().take(last).collect().await;
        assert_eq!(stored.len(), last);
        let stored: Vec<Arc<Event>> = stored.into_iter().map(|e| e.expect("stored event")).collect();
        for event in &stored {
            let json = serde_json::to_string(&**event).unwrap();
            assert!(!json.contains(TOKEN) && !json.contains(DATABASE), "{json}");
        }
        // `/bin/true` is no MCP server: the session runs without it, and says so.
        let warned = stored.iter().any(|event| {
            matches!(&event.kind, EventKind::Warning { message } if message.contains("MCP server `db` did not connect"))
        });
        assert!(warned, "a warning names the server that did not connect");
        let streamed = agent_testkit::events::delta_texts(&stored).concat();
        assert!(streamed.contains("[redacted]"), "{streamed:?}");
        assert!(!streamed.contains(TOKEN) && !streamed.contains(DATABASE), "the deltas together: {streamed:?}");
        claude.finish().await;
    }
}

/// The same answers given by request handlers instead of `respond`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_handler_answers_approvals() {
    for cli in clis() {
        eprintln!("claude {}", cli.version());
        let scenario = Scenario::new()
            .shell("touch handled.txt && echo handled")
            .quote_tool_result("Tool said: ")
            .shell("touch refused.txt && echo refused")
            .quote_tool_result("Tool said: ");
        // The whole command: a prefix never approves what follows a `&&`.
        let policy = agent_core::handler::RequestPolicy::new()
            .approve_commands(["touch handled.txt && echo handled"])
            .deny_kind(RequestKind::CommandApproval, "only handled.txt may be made");
        let claude = Claude::start_with(&cli, scenario, |builder| builder.request_handler(policy)).await;
        let session = claude.session(claude.options()).await;
        let (_, events) = claude.run(&session, "make handled", |_| None).await;
        assert_eq!(count(&events, "request_resolved"), 1, "{}", names(&events));
        assert!(claude.workspace().join("handled.txt").exists());
        assert_eq!(terminal(&events).result.text.as_deref(), Some("Tool said: handled"));
        let (_, events) = claude.run(&session, "make refused", |_| None).await;
        assert!(!claude.workspace().join("refused.txt").exists());
        assert_eq!(terminal(&events).result.text.as_deref(), Some("Tool said: only handled.txt may be made"));
        assert_eq!(terminal(&events).status, TurnStatus::Completed);
        claude.finish().await;
    }
}

/// A project's `.claude/settings.json` asking for `bypassPermissions` does not run tools without
/// asking a session that did not opt in: the session's mode goes on claude's command line, where
/// it wins; so does a per-turn `default` after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_project_settings_file_cannot_turn_off_approvals() {
    for cli in clis() {
        eprintln!("claude {}", cli.version());
        let scenario = Scenario::new().shell("touch bypassed.txt").quote_tool_result("Tool said: ");
        let claude = Claude::start(&cli, scenario).await;
        let settings = claude.workspace().join(".claude");
        std::fs::create_dir_all(&settings).unwrap();
        std::fs::write(settings.join("settings.json"), r#"{"permissions":{"defaultMode":"bypassPermissions"}}"#)
            .unwrap();
        let session = claude.session(claude.options()).await;
        let (_, events) = claude.run(&session, "make the file", |_| Some(Response::deny("not today"))).await;
        assert_eq!(requests(&events).len(), 1, "claude asked: {}", names(&events));
        assert!(!claude.workspace().join("bypassed.txt").exists(), "the denied command did not run");
        assert_eq!(terminal(&events).status, TurnStatus::Completed, "{}", names(&events));
        claude.finish().await;
    }
}

/// `/clear` would make claude start a new conversation, which ends the session, and `/model`
/// would change its model behind the session's back: such a turn is refused before it is
/// recorded, and the session goes on in its conversation. So is a turn's `bypassPermissions` in
/// a session that did not opt in to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_that_would_clear_the_conversation_is_refused_and_the_session_goes_on() {
    for cli in clis() {
        eprintln!("claude {}", cli.version());
        let claude = Claude::start(&cli, Scenario::new().text("still here")).await;
        let session = claude.session(claude.options()).await;
        let before = claude.harness.status(&session).await.expect("status").last_seq;
        for (prompt, why) in [("/clear", "new conversation"), ("/model claude-haiku-4-5", "TurnOptions::model")] {
            match claude.harness.start_turn(&session, prompt, TurnOptions::new()).await {
                Err(Error::InvalidOption { option: "input", reason }) => assert!(reason.contains(why), "{reason}"),
                other => panic!("{prompt}: expected InvalidOption(input), got {other:?}"),
            }
        }
        let bypass = TurnOptions::new()
            .provider_option(ClaudeTurnOptions::new().permission_mode(PermissionMode::BypassPermissions));
        match claude.harness.start_turn(&session, "do anything", bypass).await {
            Err(Error::InvalidOption { option: "provider_options", reason }) => {
                assert!(reason.contains("allow_dangerously_skip_permissions"), "{reason}")
            }
            other => panic!("expected InvalidOption(provider_options), got {other:?}"),
        }
        assert_eq!(claude.harness.status(&session).await.expect("status").last_seq, before, "nothing was recorded");
        let (_, events) = claude.run(&session, "are you there?", |_| None).await;
        assert_eq!(terminal(&events).status, TurnStatus::Completed, "{}", names(&events));
        assert_eq!(terminal(&events).result.text.as_deref(), Some("still here"));
        claude.finish().await;
    }
}

/// Waits on `turn`'s events until `found` matches one; returns the events so far.
async fn wait_for(
    claude: &Claude,
    turn: &Turn,
    mut found: impl FnMut(&Event) -> bool,
) -> (agent_core::TurnStream, Vec<Arc<Event>>) {
    let mut stream = claude.harness.stream(turn, Replay::Start, Some(IDLE)).await.expect("turn stream");
    let mut events = Vec::new();
    while let Some(event) = stream.next().await {
        let event = event.expect("turn stream");
        let hit = found(&event);
        events.push(event);
        if hit {
            return (stream, events);
        }
    }
    panic!("the turn ended first: {}", names(&events));
}

/// Reads the rest of a turn's events.
async fn rest(mut stream: agent_core::TurnStream, mut events: Vec<Arc<Event>>) -> Vec<Arc<Event>> {
    while let Some(event) = stream.next().await {
        let event = event.expect("turn stream");
        let terminal = event.is_terminal();
        events.push(event);
        if terminal {
            break;
        }
    }
    events
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_mid_stream_interrupts_the_turn_and_the_session_goes_on() {
    for cli in clis() {
        eprintln!("claude {}", cli.version());
        let chunks: Vec<String> = (0..40).map(|n| format!("chunk{n:02} ")).collect();
        let scenario = Scenario::new().deltas(chunks, 250).echo("after: ");
        let claude = Claude::start(&cli, scenario).await;
        let session = claude.session(claude.options()).await;
        let turn = claude.harness.start_turn(&session, "stream slowly", TurnOptions::new()).await.unwrap();
        let (stream, events) = wait_for(&claude, &turn, |e| matches!(e.kind, EventKind::MessageDelta { .. })).await;
        let asked = Instant::now();
        claude.harness.cancel(&turn).await.expect("cancel");
        let events = rest(stream, events).await;
        assert!(asked.elapsed() < Duration::from_secs(5), "the turn ended {:?} after cancel", asked.elapsed());
        let end = terminal(&events);
        assert_eq!(end.status, TurnStatus::Interrupted, "{}", names(&events));
        assert_eq!(count(&events, "cancel_requested"), 1);
        assert!(deltas(&events).starts_with("chunk00 "));
        // The session takes the next turn, and its history has the interrupted one.
        let (_, events) = claude.run(&session, "next", |_| None).await;
        assert_eq!(terminal(&events).status, TurnStatus::Completed);
        // The CLI puts its interrupt marker into the next user message, before the prompt.
        let text = terminal(&events).result.text.clone().unwrap();
        assert!(text.starts_with("after: [Request interrupted by user]") && text.ends_with("next"), "{text}");
        assert!(model_messages(&claude.server, 1).contains("chunk00"));
        claude.finish().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_during_a_pending_permission_expires_the_request() {
    for cli in clis() {
        eprintln!("claude {}", cli.version());
        let scenario = Scenario::new().shell("touch pending.txt && echo pending").echo("after: ");
        let claude = Claude::start(&cli, scenario).await;
        let session = claude.session(claude.options()).await;
        let turn = claude.harness.start_turn(&session, "ask me", TurnOptions::new()).await.unwrap();
        let (stream, events) = wait_for(&claude, &turn, |e| matches!(e.kind, EventKind::RequestCreated(_))).await;
        let request = requests(&events).pop().expect("a request");
        claude.harness.cancel(&turn).await.expect("cancel");
        let events = rest(stream, events).await;
        assert_eq!(terminal(&events).status, TurnStatus::Interrupted, "{}", names(&events));
        let expired = events.iter().any(|e| {
            matches!(&e.kind, EventKind::RequestExpired { request_id, reason }
                if *request_id == request.id && matches!(reason, ExpiryReason::Cancelled | ExpiryReason::ProviderResolved | ExpiryReason::TurnEnded))
        });
        assert!(expired, "{}", names(&events));
        let late = claude.harness.respond(&request, Response::approve()).await;
        assert!(matches!(late, Err(agent_core::Error::RequestExpired { .. })), "{late:?}");
        assert!(!claude.workspace().join("pending.txt").exists());
        let (_, events) = claude.run(&session, "next", |_| None).await;
        assert_eq!(terminal(&events).status, TurnStatus::Completed);
        assert!(terminal(&events).result.text.as_deref().unwrap().ends_with("next"));
        claude.finish().await;
    }
}

/// A turn's model and permission mode reach claude through the control channel, for that turn
/// only: the next turn runs with the session's again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_and_permission_mode_change_for_one_turn() {
    for cli in clis() {
        eprintln!("claude {}", cli.version());
        let claude = Claude::start(&cli, Scenario::new().echo("one: ")).await;
        let target = claude.workspace().join("accepted.txt");
        let asked = claude.workspace().join("asked.txt");
        for (path, content) in [(&target, "accepted\n"), (&asked, "asked\n")] {
            let step = agent_testkit::Step::WriteFile { path: path.display().to_string(), content: content.into() };
            claude.server.push(step);
            claude.server.push(agent_testkit::Step::Text { text: "written".into() });
        }
        let session = claude.session(claude.options()).await;
        let (_, events) = claude.run(&session, "first", |_| None).await;
        assert_eq!(terminal(&events).status, TurnStatus::Completed);
        let options = TurnOptions::new()
            .model("claude-sonnet-4-5")
            .provider_option(ClaudeTurnOptions::new().permission_mode(PermissionMode::AcceptEdits));
        let (_, events) = claude.run_with(&session, "write it", options, |_| panic!("acceptEdits does not ask")).await;
        assert_eq!(terminal(&events).status, TurnStatus::Completed, "{}", names(&events));
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "accepted\n");

        // The next turn, without options, asks before writing and runs on the session's model.
        let (_, events) = claude.run(&session, "write again", |_| Some(Response::approve())).await;
        assert_eq!(terminal(&events).status, TurnStatus::Completed, "{}", names(&events));
        assert_eq!(count(&events, "request_created"), 1, "the session's mode asks: {}", names(&events));
        assert_eq!(std::fs::read_to_string(&asked).unwrap(), "asked\n");
        let models: Vec<Value> =
            claude.server.model_requests().iter().map(|r| r.body.as_ref().unwrap()["model"].clone()).collect();
        assert_ne!(models[0], "claude-sonnet-4-5");
        assert_eq!(models[1], "claude-sonnet-4-5");
        assert_eq!(models.last(), models.first(), "the session's model again: {models:?}");
        claude.finish().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resuming_a_stopped_session_continues_its_conversation_and_its_history() {
    for cli in clis() {
        eprintln!("claude {}", cli.version());
        let claude = Claude::start(&cli, Scenario::new().echo("noted: ").echo("recall: ")).await;
        let first = claude.session(claude.options().id("long-job")).await;
        let (_, events) = claude.run(&first, "Remember the word PINEAPPLE", |_| None).await;
        assert_eq!(terminal(&events).status, TurnStatus::Completed);
        let conversation = claude.harness.status(&first).await.unwrap().provider_session_id.expect("session id");
        claude.harness.stop_session(&first, false).await.unwrap();

        let second = claude.session(claude.options().resume_session(first.id.clone())).await;
        assert_eq!(second, first, "the same session, under its own ID");
        let status = claude.harness.status(&second).await.unwrap();
        assert_eq!(status.provider_session_id.as_deref(), Some(conversation.as_str()));
        let (_, events) = claude.run(&second, "Which word did I ask you to remember?", |_| None).await;
        assert_eq!(terminal(&events).status, TurnStatus::Completed, "{}", names(&events));
        let history = model_messages(&claude.server, 1);
        assert!(history.contains("Remember the word PINEAPPLE") && history.contains("noted: "), "{history}");

        // Both runs' events, in one seq order.
        let last = claude.harness.status(&second).await.unwrap().last_seq as usize;
        let mut subscription = claude.harness.subscribe(&second, Replay::Start).await.unwrap();
        let mut seen = Vec::new();
        while seen.len() < last {
            seen.push(subscription.next().await.expect("an event").expect("no gap"));
        }
        let seqs: Vec<u64> = seen.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, (1..=last as u64).collect::<Vec<_>>());
        let types: Vec<&str> = seen.iter().map(|e| e.type_name()).collect();
        assert!(types.contains(&"conversation_resumed"), "{types:?}");
        assert_eq!(types.iter().filter(|t| **t == "turn_completed").count(), 2, "{types:?}");
        claude.finish().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fork_gets_a_new_session_id_and_a_missing_conversation_is_an_error() {
    for cli in clis() {
        eprintln!("claude {}", cli.version());
        let claude = Claude::start(&cli, Scenario::new().echo("noted: ").echo("forked: ")).await;
        let first = claude.session(claude.options()).await;
        let (_, events) = claude.run(&first, "The code word is MANGO", |_| None).await;
        assert_eq!(terminal(&events).status, TurnStatus::Completed);
        let original = claude.harness.status(&first).await.unwrap().provider_session_id.expect("session id");

        let fork = claude.session(claude.options().fork_session(first.id.clone())).await;
        let forked = claude.harness.status(&fork).await.unwrap().provider_session_id.expect("session id");
        assert_ne!(forked, original, "a fork is a new conversation");
        let (_, events) = claude.run(&fork, "and now?", |_| None).await;
        assert_eq!(terminal(&events).result.text.as_deref(), Some("forked: and now?"));
        assert!(model_messages(&claude.server, 1).contains("The code word is MANGO"));
        assert_eq!(claude.harness.status(&fork).await.unwrap().provider_session_id, Some(forked));

        // A conversation claude cannot find is an error, never a fresh conversation.
        let missing = claude.options().resume_provider_session("0b1e5e55-0000-4000-8000-000000000000");
        match claude.harness.start_session("claude", missing).await {
            Err(agent_core::Error::ResumeFailed { reason, .. }) => {
                assert!(
                    reason.contains("No conversation found") && reason.contains("no fresh conversation"),
                    "{reason}"
                )
            }
            other => panic!("resuming a missing conversation must fail, got {other:?}"),
        }
        // Nor does a session stopped before its first turn have one: the error says why.
        let turnless = claude.session(claude.options()).await;
        claude.harness.stop_session(&turnless, false).await.unwrap();
        match claude.harness.start_session("claude", claude.options().resume_session(turnless.id.clone())).await {
            Err(agent_core::Error::ResumeFailed { reason, .. }) => {
                assert!(reason.contains("a session stopped before its first turn"), "{reason}")
            }
            other => panic!("resuming a session without a turn must fail, got {other:?}"),
        }
        claude.finish().await;
    }
}

/// Claude keeps a conversation under the project of the cwd it ran in. 2.1.197 finds it only
/// there: a resume in another cwd fails, and says where the conversation is and what to do (it
/// blamed a session stopped before its first turn). 2.1.332 finds it in any project: the
/// resume continues the conversation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_in_another_cwd_fails_saying_where_the_conversation_is_or_continues_it() {
    for cli in clis() {
        eprintln!("claude {}", cli.version());
        let claude = Claude::start(&cli, Scenario::new().echo("noted: ").echo("recall: ")).await;
        let first = claude.session(claude.options()).await;
        claude.run(&first, "Remember the word PINEAPPLE", |_| None).await;
        claude.harness.stop_session(&first, false).await.unwrap();
        let elsewhere = claude.workspace().join("elsewhere");
        std::fs::create_dir_all(&elsewhere).expect("the other cwd");
        let mut options = claude.options().resume_session(first.id.clone());
        options.cwd = Some(elsewhere);
        match claude.harness.start_session("claude", options).await {
            Err(agent_core::Error::ResumeFailed { reason, .. }) if cli.version() == "2.1.197" => {
                assert!(
                    reason.contains("resume it with the cwd it ran in") && reason.contains("`projects/"),
                    "{reason}"
                );
                assert!(!reason.contains("before its first turn"), "{reason}");
            }
            Ok(resumed) if cli.version() != "2.1.197" => {
                let (_, events) = claude.run(&resumed, "Which word?", |_| None).await;
                assert_eq!(terminal(&events).status, TurnStatus::Completed, "{}", names(&events));
                assert!(model_messages(&claude.server, 1).contains("PINEAPPLE"), "the conversation went on");
            }
            other => panic!("claude {}: {other:?}", cli.version()),
        }
        claude.finish().await;
    }
}

/// A transcript whose message lines were lost (replaced, here) fails the resume before claude
/// runs: claude would go on from an empty conversation, reported as continued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transcript_without_its_messages_fails_the_resume() {
    for cli in clis() {
        eprintln!("claude {}", cli.version());
        let claude = Claude::start(&cli, Scenario::new().echo("noted: ").echo("recall: ")).await;
        let first = claude.session(claude.options()).await;
        claude.run(&first, "Remember the word PINEAPPLE", |_| None).await;
        let conversation = claude.harness.status(&first).await.unwrap().provider_session_id.expect("session id");
        claude.harness.stop_session(&first, false).await.unwrap();
        let transcript = claude.env.find_file(&format!("{conversation}.jsonl")).expect("claude's transcript");
        let text = std::fs::read_to_string(&transcript).unwrap();
        let kept: Vec<&str> =
            text.lines().filter(|l| !l.contains(r#""type":"user""#) && !l.contains(r#""type":"assistant""#)).collect();
        assert!(kept.len() < text.lines().count(), "the transcript had messages: {text}");
        std::fs::write(&transcript, format!("{}\nnot json\n", kept.join("\n"))).unwrap();
        let spawned = claude.exec.children().len();
        match claude.harness.start_session("claude", claude.options().resume_session(first.id.clone())).await {
            Err(agent_core::Error::ResumeFailed { reason, .. }) => {
                assert!(reason.contains("holds none of its messages") && reason.contains(&conversation), "{reason}");
            }
            other => panic!("a transcript without messages must fail the resume, got {other:?}"),
        }
        assert_eq!(claude.exec.children().len(), spawned, "claude was not run");
        assert_eq!(claude.server.model_requests().len(), 1, "no turn ran on an empty conversation");
        claude.finish().await;
    }
}

/// Two live sessions never continue one claude conversation (each would lose the other's
/// turns): a resume of a conversation a live session holds is refused and starts nothing; a
/// fork of it is not, and once the holder stops the resume goes ahead with the history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_a_live_session_holds_is_not_resumed_by_another() {
    for cli in clis() {
        eprintln!("claude {}", cli.version());
        let claude = Claude::start(&cli, Scenario::new().echo("noted: ").echo("forked: ").echo("recall: ")).await;
        let holder = claude.session(claude.options()).await;
        claude.run(&holder, "Remember the word PINEAPPLE", |_| None).await;
        let conversation = claude.harness.status(&holder).await.unwrap().provider_session_id.expect("session id");
        let spawned = claude.exec.children().len();
        match claude.harness.start_session("claude", claude.options().resume_provider_session(&conversation)).await {
            Err(agent_core::Error::ResumeFailed { mode: agent_core::ConversationMode::Resume, reason }) => {
                assert!(reason.contains(&conversation) && reason.contains(holder.id.as_str()), "{reason}");
            }
            other => panic!("a held conversation must not be resumed, got {other:?}"),
        }
        assert_eq!(claude.exec.children().len(), spawned, "nothing was spawned");

        let fork = claude.session(claude.options().fork_provider_session(&conversation)).await;
        let (_, events) = claude.run(&fork, "and now?", |_| None).await;
        assert_eq!(terminal(&events).result.text.as_deref(), Some("forked: and now?"));

        claude.harness.stop_session(&holder, false).await.unwrap();
        let resumed = claude.session(claude.options().resume_provider_session(&conversation)).await;
        let (_, events) = claude.run(&resumed, "Which word?", |_| None).await;
        assert_eq!(terminal(&events).status, TurnStatus::Completed, "{}", names(&events));
        let history = model_messages(&claude.server, 2);
        assert!(history.contains("Remember the word PINEAPPLE") && !history.contains("and now?"), "{history}");
        claude.finish().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_user_question_is_answered_through_respond() {
    for cli in clis() {
        eprintln!("claude {}", cli.version());
        let scenario =
            Scenario::new().ask_user("Which color do you prefer?", ["Red", "Blue"]).quote_tool_result("Answer: ");
        let claude = Claude::start(&cli, scenario).await;
        let session = claude.session(claude.options()).await;
        let (_, events) = claude
            .run(&session, "ask me", |request| {
                assert_eq!(request.kind, RequestKind::Question);
                let labels: Vec<&str> = request.questions[0].choices.iter().map(|c| c.label.as_str()).collect();
                assert_eq!(labels, ["Red", "Blue"]);
                Some(Response::answer("Blue"))
            })
            .await;
        let end = terminal(&events);
        assert_eq!(end.status, TurnStatus::Completed, "{}", names(&events));
        assert_eq!(count(&events, "request_resolved"), 1);
        let text = end.result.text.clone().unwrap();
        assert!(text.contains("\"Which color do you prefer?\"=\"Blue\""), "{text}");
        assert!(model_messages(&claude.server, 1).contains("=\\\"Blue\\\""), "the model request shows the answer");
        claude.finish().await;
    }
}

/// The testkit's `mcp-echo` server (from `cargo build -p agent-testkit --bins`).
fn mcp_echo() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("the test executable");
    let path = exe.parent().and_then(Path::parent).expect("target/debug").join("mcp-echo");
    assert!(path.exists(), "{} is missing; run `cargo build -p agent-testkit --bins`", path.display());
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_mcp_server_is_connected_and_its_tool_callable() {
    for cli in clis() {
        eprintln!("claude {}", cli.version());
        const PLANTED: &str = "planted-mcp-secret-0451: ";
        const PLANTED_ARG: &str = " planted-mcp-arg-0452";
        let scenario = Scenario::new()
            .tool_call("mcp__echo__echo", serde_json::json!({"text": "ping"}))
            .quote_tool_result("MCP said: ");
        let claude = Claude::start(&cli, scenario).await;
        let mut server = agent_core::McpServer::stdio(mcp_echo().display().to_string(), ["--suffix", PLANTED_ARG]);
        if let agent_core::McpServer::Stdio { env, .. } = &mut server {
            env.insert("MCP_ECHO_PREFIX".into(), PLANTED.into());
        }
        let session = claude.session(claude.options().mcp_server("echo", server)).await;
        let pid = claude.exec.children().last().expect("claude runs").id().expect("a pid");
        let cmdline = String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/cmdline")).unwrap()).into_owned();
        assert!(cmdline.contains("--strict-mcp-config") && !cmdline.contains(PLANTED), "{cmdline}");
        assert!(
            !cmdline.contains(PLANTED_ARG.trim()),
            "the server's arguments are not on claude's command line: {cmdline}"
        );
        let environ = String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/environ")).unwrap()).into_owned();
        assert!(
            !environ.contains(PLANTED.trim()) && !environ.contains(PLANTED_ARG.trim()),
            "nor in its environment, which the commands it runs inherit"
        );
        let (_, events) = claude.run(&session, "use the tool", |_| Some(Response::approve())).await;
        let end = terminal(&events);
        assert_eq!(end.status, TurnStatus::Completed, "{}", names(&events));
        assert_eq!(requests(&events)[0].kind, RequestKind::Permission);
        // The secret and the argument reached the server (the model saw the server's echo of
        // both); what is kept has the secret redacted.
        assert!(model_messages(&claude.server, 1).contains(&format!("{PLANTED}ping{PLANTED_ARG}")));
        assert_eq!(end.result.text.as_deref(), Some(format!("MCP said: [redacted]ping{PLANTED_ARG}").as_str()));
        // Named to the model: among the request's tools (2.1.197), or among the tools it is told it
        // may load (2.1.332 defers MCP tools).
        let first = claude.server.model_requests()[0].body.as_ref().unwrap().to_string();
        assert!(first.contains("mcp__echo__echo"), "the tool was advertised to the model");
        // Nor in the recorded commands' Debug output.
        let commands = format!("{:?}", claude.exec.commands());
        assert!(!commands.contains(PLANTED.trim()), "{commands}");
        claude.finish().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_errors_fail_the_turn_promptly() {
    for cli in clis() {
        eprintln!("claude {}", cli.version());
        // A bad request, answered the same each time claude tries again (2.1.332 does, leaving out
        // a beta feature each time, six requests in all).
        let bad = (0..8).fold(Scenario::new(), |scenario, _| scenario.http_error(400, "fake bad request"));
        let claude = Claude::start(&cli, bad).await;
        let session = claude.session(claude.options()).await;
        let started = Instant::now();
        let (_, events) = claude.run(&session, "fail at once", |_| None).await;
        let end = terminal(&events);
        assert_eq!(end.status, TurnStatus::Failed, "{}", names(&events));
        assert!(end.result.reason.as_deref().unwrap().contains("400"), "{:?}", end.result.reason);
        assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
        claude.finish().await;

        let claude =
            Claude::start(&cli, Scenario::new().http_error(529, "overloaded").http_error(529, "overloaded")).await;
        let session = claude.session(claude.options()).await;
        let started = Instant::now();
        let (_, events) = claude.run(&session, "overloaded", |_| None).await;
        assert_eq!(terminal(&events).status, TurnStatus::Failed, "{}", names(&events));
        assert!(started.elapsed() < Duration::from_secs(5), "retries are bounded: {:?}", started.elapsed());
        assert!(events.iter().any(|e| matches!(&e.kind, EventKind::ProviderError { will_retry: Some(true), .. })));
        claude.finish().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_process_fails_the_turn_with_its_exit_status() {
    for cli in clis() {
        eprintln!("claude {}", cli.version());
        let chunks: Vec<String> = (0..40).map(|n| format!("chunk{n:02} ")).collect();
        let claude = Claude::start(&cli, Scenario::new().deltas(chunks, 250)).await;
        let session = claude.session(claude.options()).await;
        let turn = claude.harness.start_turn(&session, "stream", TurnOptions::new()).await.unwrap();
        let (stream, events) = wait_for(&claude, &turn, |e| matches!(e.kind, EventKind::MessageDelta { .. })).await;
        let pid = claude.exec.children().last().unwrap().id().unwrap();
        // SAFETY: kill(2) of the claude process this test started; no memory is involved.
        assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) }, 0);
        let events = rest(stream, events).await;
        let end = terminal(&events);
        assert_eq!(end.status, TurnStatus::Failed, "{}", names(&events));
        assert_eq!(end.result.exit_status.as_ref().and_then(|s| s.signal), Some(9));
        assert!(end.result.reason.as_deref().unwrap().contains("claude exited"), "{:?}", end.result.reason);
        claude.finish().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_before_anything_is_spawned() {
    for cli in clis() {
        eprintln!("claude {}", cli.version());
        let claude = Claude::start(&cli, Scenario::new()).await;
        let refused = [
            claude.options().approval_policy(agent_core::ApprovalPolicy::OnFailure),
            claude.options().mcp_server("files", agent_core::McpServer::stdio("./server", ["x"])),
            claude.options_with(ClaudeOptions::new().extra_arg("--dangerously-skip-permissions")),
            claude.options_with(ClaudeOptions::new().permission_mode(PermissionMode::BypassPermissions)),
            claude.options().sandbox(agent_core::SandboxMode::ReadOnly),
            claude.options().env("ANTHROPIC_API_KEY", "sekrit").auth(agent_core::AuthMode::Subscription),
        ];
        for options in refused {
            let error = claude.harness.start_session("claude", options).await.expect_err("refused");
            assert!(!error.to_string().contains("sekrit"), "{error}");
            assert!(
                matches!(
                    error,
                    agent_core::Error::InvalidOption { .. }
                        | agent_core::Error::Unsupported { .. }
                        | agent_core::Error::AuthGuard { .. }
                ),
                "{error:?}"
            );
        }
        // A backslash in the cwd: claude would not start ("Can't access working directory"). It
        // works in the real path: a plain link to such a directory is refused too.
        let workspace = claude.options().cwd.expect("the test's cwd");
        let cwd = workspace.join("back\\slash");
        std::fs::create_dir_all(&cwd).expect("the directory");
        std::os::unix::fs::symlink(&cwd, workspace.join("plain-link")).expect("the link");
        for cwd in [cwd, workspace.join("plain-link")] {
            let mut options = claude.options();
            options.cwd = Some(cwd.clone());
            match claude.harness.start_session("claude", options).await {
                Err(agent_core::Error::InvalidOption { option: "cwd", reason }) => {
                    assert!(reason.contains("backslash"), "{reason}")
                }
                other => panic!("{cwd:?}: a cwd with a backslash must be refused, got {other:?}"),
            }
        }
        // Unknown options in JSON.
        let config = agent_core::SessionConfig::from_json_value(serde_json::json!({
            "provider": "claude",
            "provider_options": {"binary": "/x/claude", "permision_mode": "plan"},
        }))
        .expect("the config parses; the provider options are read when applied");
        let provider = ClaudeProvider::new();
        match config.apply_to(&provider, claude.options()) {
            Err(agent_core::Error::InvalidConfig(message)) => assert!(message.contains("permision_mode"), "{message}"),
            other => panic!("expected InvalidConfig, got {other:?}"),
        }
        assert!(claude.exec.commands().is_empty(), "nothing was spawned");
        claude.finish().await;
    }
}

/// Structured input: text and a base64 image reach the model as content blocks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn structured_input_with_an_image_reaches_the_model() {
    for cli in clis() {
        eprintln!("claude {}", cli.version());
        // A 1×1 transparent PNG.
        const PNG: &str =
            "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";
        let claude = Claude::start(&cli, Scenario::new().text("seen")).await;
        let session = claude.session(claude.options()).await;
        let input = agent_core::TurnInput::Items(vec![
            agent_core::InputItem::Text { text: "look at this".into() },
            agent_core::InputItem::ImageUrl { url: format!("data:image/png;base64,{PNG}") },
        ]);
        let turn = claude.harness.start_turn(&session, input, TurnOptions::new()).await.unwrap();
        let outcome = claude.harness.await_turn(&turn, Some(IDLE)).await.expect("completed");
        assert_eq!(outcome.result.text.as_deref(), Some("seen"));
        let sent = model_messages(&claude.server, 0);
        assert!(sent.contains("look at this") && sent.contains(PNG) && sent.contains("image/png"), "{sent}");
        claude.finish().await;
    }
}

/// Without partial messages claude streams no deltas: the capability says so, and the turn's
/// text arrives whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_partial_messages_the_text_arrives_whole() {
    for cli in clis() {
        eprintln!("claude {}", cli.version());
        let claude = Claude::start(&cli, Scenario::new().deltas(["Hel", "lo"], 0)).await;
        let options = claude.options_with(ClaudeOptions::new().include_partial_messages(false));
        let session = claude.session(options).await;
        let caps = claude.harness.capabilities(&session).await.unwrap();
        assert_eq!(caps.token_streaming, agent_core::Support::Unsupported);
        let (_, events) = claude.run(&session, "hi", |_| None).await;
        assert_eq!(count(&events, "message_delta"), 0, "{}", names(&events));
        assert!(events.iter().any(|e| matches!(&e.kind, EventKind::AssistantMessage { text, .. } if text == "Hello")));
        assert_eq!(terminal(&events).result.text.as_deref(), Some("Hello"));
        claude.finish().await;
    }
}

/// `Response::Cancel` refuses the tool and stops the turn (claude's deny with `interrupt`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_permission_stops_the_turn() {
    for cli in clis() {
        eprintln!("claude {}", cli.version());
        let claude = Claude::start(&cli, Scenario::new().shell("touch cancelled.txt && echo no").echo("after: ")).await;
        let session = claude.session(claude.options()).await;
        let (_, events) = claude.run(&session, "try it", |_| Some(Response::cancel("stop here"))).await;
        let end = terminal(&events);
        assert_eq!(end.status, TurnStatus::Interrupted, "{}: {:?}", names(&events), end.result);
        assert!(!claude.workspace().join("cancelled.txt").exists());
        assert_eq!(count(&events, "request_resolved"), 1);
        let (_, events) = claude.run(&session, "next", |_| None).await;
        assert_eq!(terminal(&events).status, TurnStatus::Completed);
        claude.finish().await;
    }
}

/// A session skill in Claude Code's layout is loaded (`--add-dir`), and a skill input item
/// invokes it: the model request carries the skill's instructions and the arguments.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_skill_is_loaded_and_invoked() {
    for cli in clis() {
        eprintln!("claude {}", cli.version());
        let claude = Claude::start(&cli, Scenario::new().echo("got: ")).await;
        let dir = claude.env.dir().join("team-skills/.claude/skills/release-notes");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("SKILL.md"),
            "---\nname: release-notes\ndescription: Write release notes for this repository\n---\nList every MERGED-PR-MARKER.\n",
        )
        .unwrap();
        let options = claude.options().skill(agent_core::Skill::new("release-notes", dir.join("SKILL.md")));
        let session = claude.session(options).await;
        let input = agent_core::TurnInput::Items(vec![
            agent_core::InputItem::Skill { name: "release-notes".into() },
            agent_core::InputItem::Text { text: "for v2".into() },
        ]);
        let turn = claude.harness.start_turn(&session, input, TurnOptions::new()).await.unwrap();
        let outcome = claude.harness.await_turn(&turn, Some(IDLE)).await.expect("completed");
        let text = outcome.result.text.unwrap();
        assert!(text.contains("List every MERGED-PR-MARKER.") && text.contains("for v2"), "{text}");
        let caps = claude.harness.capabilities(&session).await.unwrap();
        assert_eq!(caps.skills, agent_core::Support::Emulated);
        claude.finish().await;
    }
}

/// Allowed tool rules run without asking; disallowed tools are not offered to the model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_and_disallowed_tools_reach_claude() {
    for cli in clis() {
        eprintln!("claude {}", cli.version());
        let scenario = Scenario::new().shell("touch allowed.txt && echo allowed").quote_tool_result("Tool said: ");
        let claude = Claude::start(&cli, scenario).await;
        let tools = ClaudeOptions::new().allowed_tool("Bash(touch allowed.txt:*)").disallowed_tool("WebFetch");
        let session = claude.session(claude.options_with(tools)).await;
        let (_, events) = claude.run(&session, "make it", |_| panic!("an allowed command is not asked about")).await;
        assert_eq!(terminal(&events).result.text.as_deref(), Some("Tool said: allowed"), "{}", names(&events));
        assert!(claude.workspace().join("allowed.txt").exists());
        let offered = claude.server.model_requests()[0].body.as_ref().unwrap()["tools"].to_string();
        assert!(offered.contains("\"Bash\"") && !offered.contains("\"WebFetch\""), "{offered}");
        claude.finish().await;
    }
}

/// A reply whose `result` line is over `max_line_bytes` still ends its turn: failed, saying
/// why, at once; claude waits for the next prompt, and the next turn runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_line_over_the_limit_ends_the_turn_and_the_session_goes_on() {
    for cli in clis() {
        eprintln!("claude {}", cli.version());
        let big: String = (0..200_000).map(|i| if i % 80 == 79 { '\n' } else { 'x' }).collect();
        let claude = Claude::start(&cli, Scenario::new().text(big).text("small again")).await;
        let session = claude.session(claude.options_with(ClaudeOptions::new().max_line_bytes(64 * 1024))).await;
        let (_, events) = claude.run(&session, "long please", |_| None).await;
        let end = terminal(&events);
        assert_eq!(end.status, TurnStatus::Failed, "{}", names(&events));
        let reason = end.result.reason.clone().unwrap_or_default();
        assert!(reason.contains("result line") && reason.contains("65536-byte limit"), "{reason}");
        assert_eq!(end.result.ended_by, Some(agent_core::EndCause::Provider), "claude ended it; it is still there");
        assert!(count(&events, "warning") >= 1, "the dropped lines are warned of: {}", names(&events));

        let (_, events) = claude.run(&session, "short now", |_| None).await;
        assert_eq!(terminal(&events).status, TurnStatus::Completed, "{}", names(&events));
        assert_eq!(terminal(&events).result.text.as_deref(), Some("small again"));
        claude.finish().await;
    }
}

/// The model's side of a first turn starting a Bash call claude runs in the background (ending
/// a few seconds later, after the turn), and of claude's own run answering its end (`NOTIF …`,
/// slowly); the steps after it are the next turn's.
fn with_claudes_own_run() -> Scenario {
    let task = serde_json::json!({"command": "sleep 3; echo bg-done", "run_in_background": true, "description": "bg"});
    Scenario::new().tool_call("Bash", task).text("started it").deltas(["NOTIF ", "turn ", "of its own"], 400)
}

/// Starts a background task in a first turn of `session` and returns once claude's own run
/// answering its end has begun (its first delta, `NOTIF`, is out, on the session).
async fn until_claudes_own_run(claude: &Claude, session: &SessionRef) {
    let mut all = claude.harness.subscribe(session, Replay::Start).await.expect("subscribed");
    let (_, first) = claude.run(session, "start a background task", |_| Some(Response::approve())).await;
    assert_eq!(terminal(&first).result.text.as_deref(), Some("started it"), "{}", names(&first));
    loop {
        let event =
            tokio::time::timeout(IDLE, all.next()).await.expect("claude's own run").expect("open").expect("event");
        if matches!(&event.kind, EventKind::MessageDelta { text, .. } if text.contains("NOTIF")) {
            assert_eq!(event.turn_id, None, "the session's, not a turn's");
            return;
        }
    }
}

/// A turn cancelled while it waits behind a run claude started by itself is interrupted once
/// claude begins it (an interrupt sent at once would stop claude's run instead, and the turn's
/// prompt would run after it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_cancelled_behind_claudes_own_run_is_interrupted() {
    for cli in clis() {
        eprintln!("claude {}", cli.version());
        let scenario = with_claudes_own_run().deltas(["slow ", "reply"], 3000);
        let claude = Claude::start(&cli, scenario).await;
        let session = claude.session(claude.options()).await;
        until_claudes_own_run(&claude, &session).await;
        let turn = claude.harness.start_turn(&session, "second question", TurnOptions::new()).await.expect("turn");
        claude.harness.cancel(&turn).await.expect("cancel");
        let stream = claude.harness.stream(&turn, Replay::Start, Some(IDLE)).await.expect("stream");
        let events = stream.collect().await.expect("the turn ends");
        assert_eq!(terminal(&events).status, TurnStatus::Interrupted, "{}", names(&events));
        assert!(!deltas(&events).contains("NOTIF") && !deltas(&events).contains("reply"), "{}", deltas(&events));
        claude.finish().await;
    }
}

/// Claude answers a background task's end with a run of its own, after the turn that started
/// it ended. A turn started meanwhile waits behind that run in claude's queue: the run's text
/// and end are the session's, not the turn's, which ends with its own reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_claude_starts_for_a_background_task_is_not_the_next_turns() {
    for cli in clis() {
        eprintln!("claude {}", cli.version());
        let scenario = with_claudes_own_run().echo("You said: ");
        let claude = Claude::start(&cli, scenario).await;
        let session = claude.session(claude.options()).await;
        // Claude's own run has begun: the next turn goes in behind it.
        until_claudes_own_run(&claude, &session).await;
        let (_, second) = claude.run(&session, "second question", |_| Some(Response::approve())).await;
        let end = terminal(&second);
        assert_eq!(end.status, TurnStatus::Completed, "{}", names(&second));
        assert_eq!(end.result.text.as_deref(), Some("You said: second question"), "{}", names(&second));
        assert!(!deltas(&second).contains("NOTIF") && !deltas(&second).contains("own"), "{}", deltas(&second));
        claude.finish().await;
    }
}
