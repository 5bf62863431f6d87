//! The real `codex` 0.171.0 (from `cargo xtask clis`) driven through the public `Harness` API,
//! offline, against the testkit's fake Responses server on 127.0.0.1.
//!
//! Every test fails with "run `cargo xtask clis`" when the pinned CLI is not installed.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_core::event::ToolStatus;
use agent_core::exec::{Exec, ExecError};
use agent_core::{
    ApprovalPolicy, Error, Event, EventKind, ExpiryReason, Harness, Replay, Request, RequestKind, Response,
    SandboxMode, Scope, SessionConfig, SessionOptions, SessionRef, StoreChoice, Turn, TurnOptions, TurnStatus,
};
use agent_exec::LocalExec;
use agent_provider_codex::{CodexOptions, CodexProvider};
use agent_store_memory::MemoryStore;
use agent_testkit::events::{count, names, terminal};
use agent_testkit::recording::RecordingExec;
use agent_testkit::{Cli, FakeModel, OfflineEnv, Provider, Scenario};
use futures::StreamExt;
use serde_json::{Value, json};

/// Longest wait for any one event of a turn.
const IDLE: Duration = Duration::from_secs(30);

fn codex_cli() -> Cli {
    Cli::latest(Provider::Codex).unwrap_or_else(|e| panic!("{e}\nrun `cargo xtask clis`"))
}

/// One test's world: the CLI, the fake model, an offline environment and a harness.
struct Codex {
    cli: Cli,
    /// `None` once a test took the server down.
    server: Option<FakeModel>,
    env: OfflineEnv,
    exec: Arc<RecordingExec>,
    harness: Harness,
}

impl Codex {
    async fn start(scenario: Scenario) -> Codex {
        let cli = codex_cli();
        let server = FakeModel::start(scenario).await.expect("fake model server");
        let env = OfflineEnv::new(&cli, &server).expect("offline environment");
        let exec = Arc::new(RecordingExec::new(Arc::new(LocalExec::new())));
        let harness = Harness::builder()
            .provider(CodexProvider::new())
            .exec(Arc::clone(&exec) as Arc<dyn Exec>)
            .store(StoreChoice::Custom(Arc::new(MemoryStore::new())))
            .build()
            .expect("harness");
        Codex { cli, server: Some(server), env, exec, harness }
    }

    fn options(&self) -> SessionOptions {
        self.options_with(CodexOptions::new())
    }

    fn options_with(&self, codex: CodexOptions) -> SessionOptions {
        self.env.session_options().provider_option(codex.binary(self.cli.program()))
    }

    async fn session(&self, options: SessionOptions) -> SessionRef {
        self.harness.start_session("codex", options).await.expect("session starts")
    }

    fn server(&self) -> &FakeModel {
        self.server.as_ref().expect("the fake model server is running")
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
        mut answer: impl FnMut(&Request) -> Option<Response>,
    ) -> (Turn, Vec<Arc<Event>>) {
        let turn = self.harness.start_turn(session, prompt, TurnOptions::new()).await.expect("turn recorded");
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

    /// Stops every session and checks that no codex process is left.
    async fn finish(self) {
        for session in self.harness.list_sessions() {
            self.harness.stop_session(&session, true).await.expect("stop");
        }
        for child in self.exec.children() {
            let status = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
            assert!(matches!(status, Ok(Ok(_))), "a codex process outlived its session");
        }
        if let Some(server) = &self.server {
            assert!(server.proxy().attempts().is_empty(), "codex tried to reach outside 127.0.0.1");
        }
    }
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

/// The JSON text of the `input` of the model request at `index`.
fn model_input(server: &FakeModel, index: usize) -> String {
    let requests = server.model_requests();
    let body: &Value = requests[index].body.as_ref().expect("a JSON body");
    body["input"].to_string()
}

fn shell_options(codex: &Codex) -> SessionOptions {
    codex.options().approval_policy(ApprovalPolicy::Untrusted).sandbox(SandboxMode::WorkspaceWrite)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_turn_streams_deltas_and_usage() {
    let codex = Codex::start(Scenario::new().deltas(["Hel", "lo ", "world"], 0)).await;
    let session = codex.session(codex.options().system_prompt("Answer briefly.")).await;
    let (_, events) = codex.run(&session, "Say hello", |_| None).await;

    let deltas = agent_testkit::events::delta_texts(&events).concat();
    assert_eq!(deltas, "Hello world");
    assert_eq!(count(&events, "assistant_message"), 1);
    assert!(count(&events, "usage_updated") >= 1, "{}", names(&events));
    assert!(
        events
            .iter()
            .all(|e| e.raw.is_some() || e.type_name().starts_with("turn_") || e.type_name() == "request_created")
    );
    let end = terminal(&events);
    assert_eq!(end.status, TurnStatus::Completed);
    assert_eq!(end.result.text.as_deref(), Some("Hello world"));
    assert!(end.result.usage.and_then(|u| u.total_tokens).is_some_and(|t| t > 0));
    // The system prompt reached the model as developer instructions.
    assert!(model_input(codex.server(), 0).contains("Answer briefly."));
    let status = codex.harness.status(&session).await.unwrap();
    assert!(status.provider_session_id.is_some());
    codex.finish().await;
}

/// With `CODEX_HOME` under the temp dir, codex warns on stderr at every start, `--version`
/// included; the version probe must read that warning rather than let codex die of a closed pipe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_codex_home_under_the_temp_dir_still_passes_the_version_probe() {
    let codex = Codex::start(Scenario::new().text("hello")).await;
    let temp = std::env::temp_dir();
    let codex_home = codex.env.var("CODEX_HOME").expect("CODEX_HOME");
    assert!(Path::new(codex_home).starts_with(&temp), "{codex_home} is under {}", temp.display());
    let warned = codex.env.command(&codex.cli).env("TMPDIR", &temp).arg("--version").output().expect("codex runs");
    let stderr = String::from_utf8_lossy(&warned.stderr);
    assert!(stderr.contains("temporary dir"), "codex warns on stderr: {stderr}");

    let session = codex.session(codex.options().env("TMPDIR", temp.to_str().expect("a UTF-8 temp dir"))).await;
    let (_, events) = codex.run(&session, "hi", |_| None).await;
    assert_eq!(terminal(&events).status, TurnStatus::Completed, "{}", names(&events));
    codex.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_turns_in_one_session() {
    let codex = Codex::start(Scenario::new().echo("one: ").echo("two: ").echo("three: ")).await;
    let session = codex.session(codex.options()).await;
    for (prompt, expected) in [("alpha", "one: alpha"), ("beta", "two: beta"), ("gamma", "three: gamma")] {
        let (_, events) = codex.run(&session, prompt, |_| None).await;
        let end = terminal(&events);
        assert_eq!(end.status, TurnStatus::Completed, "{}", names(&events));
        assert_eq!(end.result.text.as_deref(), Some(expected));
    }
    let third = model_input(codex.server(), 2);
    assert!(third.contains("alpha") && third.contains("one: alpha") && third.contains("beta"), "{third}");
    codex.finish().await;
}

/// A turn's model and effort are that turn's: codex keeps a `turn/start` override for the
/// turns after it, so the next turn without one runs with the thread's again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turns_model_and_effort_are_that_turns_only() {
    a_turns_own_settings_then_a_turn_without(false).await;
}

/// The same across a resume: codex reopens the thread with its last turn's settings, and the
/// resumed session's turns run with the session's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_resumed_after_a_turns_model_runs_with_its_own() {
    a_turns_own_settings_then_a_turn_without(true).await;
}

/// Runs a turn, one with its own model and effort, then (after a stop and resume with
/// `resume`) one without: the last must be sent with the first one's settings.
async fn a_turns_own_settings_then_a_turn_without(resume: bool) {
    let codex = Codex::start(Scenario::new().text("one").text("two").text("three")).await;
    let mut session = codex.session(codex.options()).await;
    codex.run(&session, "first", |_| None).await;
    let own = TurnOptions::new()
        .model("other-model")
        .provider_option(agent_provider_codex::CodexTurnOptions::new().effort("high"));
    let turn = codex.harness.start_turn(&session, "second", own).await.expect("turn recorded");
    let outcome = codex.harness.await_turn(&turn, Some(IDLE)).await.expect("the turn ends");
    assert_eq!(outcome.status, TurnStatus::Completed, "{outcome:?}");
    if resume {
        codex.harness.stop_session(&session, false).await.expect("stop");
        session = codex.session(codex.options().resume_session(session.id.clone())).await;
    }
    let (_, third) = codex.run(&session, "third", |_| None).await;
    assert_eq!(terminal(&third).status, TurnStatus::Completed, "{}", names(&third));
    let settings: Vec<(Value, Value)> = codex
        .server()
        .model_requests()
        .iter()
        .map(|r| {
            let body = r.body.as_ref().expect("json");
            (body["model"].clone(), body["reasoning"]["effort"].clone())
        })
        .collect();
    assert_eq!(settings.len(), 3, "{settings:?}");
    assert_eq!(settings[1], (json!("other-model"), json!("high")), "the turn's own: {settings:?}");
    assert_eq!(settings[2], settings[0], "the session's again (resumed: {resume}): {settings:?}");
    codex.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resuming_a_stopped_session_continues_its_thread_and_its_history() {
    let codex = Codex::start(Scenario::new().echo("noted: ").echo("recall: ")).await;
    let first = codex.session(codex.options().id("long-job")).await;
    let (_, events) = codex.run(&first, "Remember the word PINEAPPLE", |_| None).await;
    assert_eq!(terminal(&events).status, TurnStatus::Completed);
    let thread = codex.harness.status(&first).await.unwrap().provider_session_id.expect("thread id");
    codex.harness.stop_session(&first, false).await.unwrap();

    let second = codex.session(codex.options().resume_session(first.id.clone())).await;
    assert_eq!(second, first, "the same session, under its own ID");
    assert_eq!(codex.harness.status(&second).await.unwrap().provider_session_id.as_deref(), Some(thread.as_str()));
    let (_, events) = codex.run(&second, "Which word did I ask you to remember?", |_| None).await;
    assert_eq!(terminal(&events).status, TurnStatus::Completed);
    let input = model_input(codex.server(), 1);
    assert!(input.contains("Remember the word PINEAPPLE") && input.contains("noted: "), "{input}");

    // Both runs' events, in one seq order.
    let last = codex.harness.status(&second).await.unwrap().last_seq as usize;
    let history: Vec<Arc<Event>> = codex
        .harness
        .subscribe(&second, Replay::Start)
        .await
        .unwrap()
        .take(last)
        .map(|e| e.expect("no gap"))
        .collect()
        .await;
    let seqs: Vec<u64> = history.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=last as u64).collect::<Vec<_>>());
    let types: Vec<&str> = history.iter().map(|e| e.type_name()).collect();
    let resumed = types.iter().position(|t| *t == "conversation_resumed").expect("the resume is recorded");
    assert_eq!(types[resumed - 2..resumed], ["session_closed", "session_ready"], "{types:?}");
    assert_eq!(types.iter().filter(|t| **t == "turn_completed").count(), 2, "{types:?}");
    codex.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_codex_thread_resumes_into_a_new_session_but_a_missing_one_is_an_error() {
    let codex = Codex::start(Scenario::new().echo("noted: ").echo("recall: ")).await;
    let first = codex.session(codex.options()).await;
    let (_, events) = codex.run(&first, "Remember the word PINEAPPLE", |_| None).await;
    assert_eq!(terminal(&events).status, TurnStatus::Completed);
    let thread = codex.harness.status(&first).await.unwrap().provider_session_id.expect("thread id");
    codex.harness.stop_session(&first, false).await.unwrap();

    let second = codex.session(codex.options().resume_provider_session(&thread)).await;
    assert_ne!(second, first);
    assert_eq!(codex.harness.status(&second).await.unwrap().provider_session_id.as_deref(), Some(thread.as_str()));
    let (_, events) = codex.run(&second, "Which word did I ask you to remember?", |_| None).await;
    assert_eq!(terminal(&events).status, TurnStatus::Completed);
    let input = model_input(codex.server(), 1);
    assert!(input.contains("Remember the word PINEAPPLE") && input.contains("noted: "), "{input}");

    // A thread that does not exist is an error, never a fresh thread.
    let missing = codex.options().resume_provider_session("01a2260d-0000-7000-8000-000000000000");
    match codex.harness.start_session("codex", missing).await {
        Err(Error::ResumeFailed { reason, .. }) => assert!(reason.contains("no fresh thread"), "{reason}"),
        other => panic!("resuming a missing thread must fail, got {other:?}"),
    }

    // A session stopped before its first turn has no thread codex kept: the error says so.
    let unused = codex.session(codex.options()).await;
    codex.harness.stop_session(&unused, false).await.unwrap();
    match codex.harness.start_session("codex", codex.options().resume_session(unused.id.clone())).await {
        Err(Error::ResumeFailed { reason, .. }) => {
            assert!(reason.contains("no fresh thread") && reason.contains("before its first turn"), "{reason}")
        }
        other => panic!("resuming a session without a turn must fail, got {other:?}"),
    }
    codex.finish().await;
}

/// A thread whose rollout lost its turns (their lines replaced, its first line kept) fails the
/// resume: codex would go on from an empty thread, reported as continued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_whose_rollout_lost_its_turns_fails_the_resume() {
    let codex = Codex::start(Scenario::new().echo("noted: ").echo("recall: ")).await;
    let first = codex.session(codex.options()).await;
    codex.run(&first, "Remember the word PINEAPPLE", |_| None).await;
    let thread = codex.harness.status(&first).await.unwrap().provider_session_id.expect("thread id");
    codex.harness.stop_session(&first, false).await.unwrap();
    let rollout = codex.env.find_file(&format!("{thread}.jsonl")).expect("codex's rollout");
    let text = std::fs::read_to_string(&rollout).unwrap();
    let head = text.lines().next().expect("a first line");
    std::fs::write(&rollout, format!("{head}\nnot json\n")).unwrap();
    match codex.harness.start_session("codex", codex.options().resume_session(first.id.clone())).await {
        Err(Error::ResumeFailed { reason, .. }) => assert!(reason.contains("no fresh thread"), "{reason}"),
        other => panic!("a rollout without its turns must fail the resume, got {other:?}"),
    }
    assert_eq!(codex.server().model_requests().len(), 1, "no turn ran on an empty thread");
    codex.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_overrides_reach_codex_over_stdin_and_never_its_command_line() {
    const PLANTED: &str = "sekrit-config-value-0451";
    let codex = Codex::start(Scenario::new().text("done")).await;
    let overrides = CodexOptions::new().config("model_providers.fake.http_headers.X-Planted", format!("\"{PLANTED}\""));
    let session = codex.session(codex.options_with(overrides)).await;
    let pid = codex.exec.children().last().expect("codex runs").id().expect("a pid");
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).expect("the running codex's command line");
    assert!(!String::from_utf8_lossy(&cmdline).contains(PLANTED), "{}", String::from_utf8_lossy(&cmdline));
    let (_, events) = codex.run(&session, "hello", |_| None).await;
    assert_eq!(terminal(&events).status, TurnStatus::Completed);
    let request = codex.server().requests().into_iter().find(|r| r.endpoint.is_model_call()).expect("a model call");
    assert_eq!(request.header("x-planted"), Some(PLANTED), "the override took effect");
    codex.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shell_approval_approve_runs_the_command() {
    let scenario = Scenario::new().shell("touch approved.txt && echo created-file").quote_tool_result("Tool said: ");
    let codex = Codex::start(scenario).await;
    let session = codex.session(shell_options(&codex)).await;
    let (_, events) = codex.run(&session, "make the file", |_| Some(Response::approve())).await;

    let [request] = requests(&events).try_into().expect("one approval");
    assert_eq!(request.kind, RequestKind::CommandApproval);
    // The command as the agent asked for it, without the shell codex runs it through.
    assert_eq!(request.metadata["command"], "touch approved.txt && echo created-file", "{:?}", request.metadata);
    assert!(request.scopes.contains(&Scope::Once) && request.scopes.contains(&Scope::Session));
    assert_eq!(count(&events, "request_resolved"), 1);
    let completed = events.iter().find_map(|e| match &e.kind {
        EventKind::ToolCompleted { status, exit_code, output, .. } => Some((*status, *exit_code, output.clone())),
        _ => None,
    });
    assert_eq!(completed, Some((ToolStatus::Completed, Some(0), Some("created-file\n".into()))));
    assert_eq!(terminal(&events).status, TurnStatus::Completed);
    assert!(codex.workspace().join("approved.txt").exists());
    codex.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn choosing_the_execpolicy_amendment_runs_the_command_and_codex_keeps_the_rule() {
    let scenario = Scenario::new()
        .shell("touch amended.txt")
        .quote_tool_result("first: ")
        .shell("touch amended.txt")
        .quote_tool_result("second: ");
    let codex = Codex::start(scenario).await;
    let session = codex.session(shell_options(&codex)).await;
    let choose = |_: &Request| Some(Response::choose("accept_with_execpolicy_amendment"));
    let (_, first) = codex.run(&session, "make the file", choose).await;
    let [request] = requests(&first).try_into().expect("one approval");
    let [choice] = request.choices.clone().try_into().expect("codex offers the amendment");
    assert_eq!(choice.value, "accept_with_execpolicy_amendment");
    assert!(choice.description.as_deref().is_some_and(|d| d.contains("`touch amended.txt`")), "{choice:?}");
    assert_eq!(request.metadata["execpolicy_amendment"], serde_json::json!(["touch", "amended.txt"]));
    assert_eq!(count(&first, "request_resolved"), 1);
    assert_eq!(terminal(&first).status, TurnStatus::Completed, "{}", names(&first));
    assert!(codex.workspace().join("amended.txt").exists(), "the command ran");
    // Codex saved the rule in its rules file.
    let rules = Path::new(codex.env.var("CODEX_HOME").expect("CODEX_HOME")).join("rules/default.rules");
    let saved = std::fs::read_to_string(&rules).unwrap_or_else(|e| panic!("{}: {e}", rules.display()));
    assert!(saved.contains(r#"prefix_rule(pattern=["touch", "amended.txt"], decision="allow")"#), "{saved}");
    codex.harness.stop_session(&session, false).await.expect("stop");

    // A new codex process applies it: the same command runs without asking.
    std::fs::remove_file(codex.workspace().join("amended.txt")).expect("remove");
    let later = codex.session(shell_options(&codex)).await;
    let (_, second) = codex.run(&later, "make it again", |_| Some(Response::deny("asked again"))).await;
    assert!(requests(&second).is_empty(), "asked again: {}", names(&second));
    assert_eq!(terminal(&second).status, TurnStatus::Completed, "{}", names(&second));
    assert!(codex.workspace().join("amended.txt").exists(), "the command ran again");
    codex.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shell_approval_deny_tells_the_model() {
    let scenario = Scenario::new().shell("touch denied.txt").quote_tool_result("Tool said: ");
    let codex = Codex::start(scenario).await;
    let session = codex.session(shell_options(&codex)).await;
    let (_, events) = codex.run(&session, "make the file", |_| Some(Response::deny("not now"))).await;

    assert_eq!(terminal(&events).status, TurnStatus::Completed, "{}", names(&events));
    assert!(!codex.workspace().join("denied.txt").exists());
    assert!(model_input(codex.server(), 1).contains("rejected"), "the model saw the rejection");
    codex.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shell_approval_cancel_interrupts_the_turn() {
    let scenario = Scenario::new().shell("touch cancelled.txt").quote_tool_result("Tool said: ");
    let codex = Codex::start(scenario).await;
    let session = codex.session(shell_options(&codex)).await;
    let (_, events) = codex.run(&session, "make the file", |_| Some(Response::cancel("stop"))).await;

    assert_eq!(terminal(&events).status, TurnStatus::Interrupted, "{}", names(&events));
    assert!(!codex.workspace().join("cancelled.txt").exists());
    assert_eq!(codex.server().model_requests().len(), 1, "no model request after the cancel");
    codex.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approve_for_session_is_not_asked_again() {
    let scenario = Scenario::new()
        .shell("touch session.txt")
        .quote_tool_result("first: ")
        .shell("touch session.txt")
        .quote_tool_result("second: ");
    let codex = Codex::start(scenario).await;
    let session = codex.session(shell_options(&codex)).await;
    let (_, first) = codex.run(&session, "once", |_| Some(Response::approve_with(Scope::Session))).await;
    assert_eq!(requests(&first).len(), 1);
    assert_eq!(terminal(&first).status, TurnStatus::Completed);
    let (_, second) = codex.run(&session, "again", |_| Some(Response::deny("asked twice"))).await;
    assert!(requests(&second).is_empty(), "asked again: {}", names(&second));
    assert_eq!(terminal(&second).status, TurnStatus::Completed);
    assert!(terminal(&second).result.text.as_deref().unwrap().starts_with("second: "));
    codex.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_change_approval_approve_and_deny() {
    let scenario = Scenario::new()
        .write_file("kept.txt", "hello\n")
        .quote_tool_result("first: ")
        .write_file("refused.txt", "hello\n")
        .quote_tool_result("second: ");
    let codex = Codex::start(scenario).await;
    let options = codex.options().approval_policy(ApprovalPolicy::Untrusted).sandbox(SandboxMode::ReadOnly);
    let session = codex.session(options).await;

    let (_, approved) = codex.run(&session, "write it", |_| Some(Response::approve())).await;
    let [request] = requests(&approved).try_into().expect("one approval");
    assert_eq!(request.kind, RequestKind::FileChangeApproval);
    assert!(request.metadata["diff"].as_str().unwrap().contains("hello"), "{:?}", request.metadata);
    assert_eq!(request.scopes, vec![Scope::Once, Scope::Session]);
    assert!(count(&approved, "file_change") >= 1);
    assert_eq!(terminal(&approved).status, TurnStatus::Completed);
    assert!(codex.workspace().join("kept.txt").exists());

    let (_, denied) = codex.run(&session, "write another", |_| Some(Response::deny("no"))).await;
    assert_eq!(requests(&denied).len(), 1);
    assert_eq!(terminal(&denied).status, TurnStatus::Completed);
    assert!(!codex.workspace().join("refused.txt").exists());
    codex.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_is_answered_through_respond() {
    let scenario = Scenario::new().ask_user("Pick a color", ["red", "blue"]).quote_tool_result("Tool said: ");
    let codex = Codex::start(scenario).await;
    let session = codex.session(codex.options()).await;
    let (_, events) = codex.run(&session, "ask me", |_| Some(Response::answer("blue"))).await;

    let [request] = requests(&events).try_into().expect("one question");
    assert_eq!(request.kind, RequestKind::Question);
    assert_eq!(request.prompt, "Pick a color");
    let choices: Vec<&str> = request.questions[0].choices.iter().map(|c| c.value.as_str()).collect();
    assert_eq!(choices, ["red", "blue"]);
    let end = terminal(&events);
    assert_eq!(end.status, TurnStatus::Completed);
    assert!(end.result.text.as_deref().unwrap().contains("blue"));
    codex.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_mid_stream_ends_within_a_second_and_the_session_stays_usable() {
    let codex = Codex::start(Scenario::new().stall("Thinking very slowly").text("back again")).await;
    let session = codex.session(codex.options()).await;
    let turn = codex.harness.start_turn(&session, "take your time", TurnOptions::new()).await.unwrap();
    let mut stream = codex.harness.stream(&turn, Replay::Start, Some(IDLE)).await.unwrap();
    while let Some(event) = stream.next().await {
        if event.expect("event").type_name() == "message_delta" {
            break;
        }
    }
    let asked = Instant::now();
    codex.harness.cancel(&turn).await.unwrap();
    let mut end = None;
    while let Some(event) = stream.next().await {
        let event = event.expect("event");
        if let Some(e) = event.kind.terminal_end() {
            end = Some(e.clone());
            break;
        }
    }
    let elapsed = asked.elapsed();
    let end = end.expect("terminal event");
    assert!(matches!(end.status, TurnStatus::Interrupted | TurnStatus::Cancelled), "{end:?}");
    assert!(elapsed < Duration::from_secs(1), "cancel took {elapsed:?}");
    assert_eq!(codex.server().wait_for_hangups(1).await, vec![0], "codex dropped the model stream");

    let (_, events) = codex.run(&session, "still there?", |_| None).await;
    assert_eq!(terminal(&events).status, TurnStatus::Completed);
    assert_eq!(terminal(&events).result.text.as_deref(), Some("back again"));
    codex.finish().await;
}

/// A cancel right after `start_turn` reaches codex in the moment after it answered `turn/start`
/// and before it holds the turn as active, when it refuses `turn/interrupt`: the interrupt is
/// sent again once codex announced the turn, which ends interrupted, the session usable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_right_after_the_start_interrupts_the_turn_and_the_session_stays_usable() {
    // Interrupted that early, codex asks the model nothing; a turn it asked anyway completes.
    let codex = Codex::start(Scenario::new().text("back again").text("back again")).await;
    let session = codex.session(codex.options()).await;
    let turn = codex.harness.start_turn(&session, "take your time", TurnOptions::new()).await.unwrap();
    codex.harness.cancel(&turn).await.unwrap();
    let events = codex.harness.stream(&turn, Replay::Start, Some(IDLE)).await.unwrap().collect().await.unwrap();
    let end = terminal(&events);
    let ended = [TurnStatus::Interrupted, TurnStatus::Cancelled, TurnStatus::Completed];
    assert!(ended.contains(&end.status), "{}", names(&events));

    let (_, events) = codex.run(&session, "still there?", |_| None).await;
    assert_eq!(terminal(&events).status, TurnStatus::Completed, "{}", names(&events));
    codex.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_while_an_approval_is_pending_expires_it_and_ends_the_turn() {
    let codex = Codex::start(Scenario::new().shell("touch never.txt").text("unused")).await;
    let session = codex.session(shell_options(&codex)).await;
    let turn = codex.harness.start_turn(&session, "make the file", TurnOptions::new()).await.unwrap();
    let mut stream = codex.harness.stream(&turn, Replay::Start, Some(IDLE)).await.unwrap();
    let mut pending = None;
    let mut expired = false;
    let mut end = None;
    while let Some(event) = stream.next().await {
        let event = event.expect("event");
        match &event.kind {
            EventKind::RequestCreated(request) => {
                pending = Some((**request).clone());
                codex.harness.cancel(&turn).await.unwrap();
            }
            EventKind::RequestExpired { reason, .. } => {
                assert_eq!(*reason, ExpiryReason::Cancelled);
                expired = true;
            }
            kind if kind.is_terminal() => {
                end = kind.terminal_end().cloned();
                break;
            }
            _ => {}
        }
    }
    assert!(expired, "the pending approval expired");
    let end = end.expect("terminal event");
    assert!(matches!(end.status, TurnStatus::Interrupted | TurnStatus::Cancelled), "{end:?}");
    let late = codex.harness.respond(&pending.expect("a request"), Response::approve()).await;
    assert!(matches!(late, Err(Error::RequestExpired { .. })), "{late:?}");
    assert!(!codex.workspace().join("never.txt").exists());
    codex.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_server_error_fails_the_turn_quickly() {
    let codex = Codex::start(Scenario::new().http_error(500, "the fake model broke")).await;
    let session = codex.session(codex.options()).await;
    let started = Instant::now();
    let (_, events) = codex.run(&session, "hello", |_| None).await;
    let end = terminal(&events);
    assert_eq!(end.status, TurnStatus::Failed, "{}", names(&events));
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
    assert!(end.result.reason.is_some() && end.result.error.is_some(), "{end:?}");
    assert!(count(&events, "provider_error") >= 1);
    codex.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_model_server_fails_the_turn_quickly() {
    let mut codex = Codex::start(Scenario::new()).await;
    let session = codex.session(codex.options()).await;
    // Nothing listens on the model server's port any more.
    let server = codex.server.take().expect("server");
    assert!(server.proxy().attempts().is_empty());
    drop(server);
    let started = Instant::now();
    let (_, events) = codex.run(&session, "hello?", |_| None).await;
    let end = terminal(&events);
    assert_eq!(end.status, TurnStatus::Failed, "{}", names(&events));
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
    let reason = end.result.reason.as_deref().unwrap_or_default();
    assert!(reason.contains("Connection failed"), "{reason}");
    codex.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_cli_fails_the_turn_with_exit_status_and_stderr() {
    let codex = Codex::start(Scenario::new().stall("working")).await;
    let session = codex.session(codex.options()).await;
    let turn = codex.harness.start_turn(&session, "work", TurnOptions::new()).await.unwrap();
    let mut stream = codex.harness.stream(&turn, Replay::Start, Some(IDLE)).await.unwrap();
    while let Some(event) = stream.next().await {
        if event.expect("event").type_name() == "message_delta" {
            break;
        }
    }
    let pid = codex.exec.children().last().expect("a child was spawned").id().expect("a pid");
    let killed = std::process::Command::new("kill").args(["-KILL", &pid.to_string()]).status().expect("kill runs");
    assert!(killed.success());
    let mut end = None;
    while let Some(event) = stream.next().await {
        let event = event.expect("event");
        if let Some(e) = event.kind.terminal_end() {
            end = Some(e.clone());
            break;
        }
    }
    let end = end.expect("terminal event");
    assert_eq!(end.status, TurnStatus::Failed);
    assert_eq!(end.result.exit_status.and_then(|s| s.signal), Some(9), "{end:?}");
    assert!(end.result.stderr_tail.as_deref().is_some_and(|t| t.contains("bubblewrap")), "{end:?}");
    assert!(end.result.reason.as_deref().unwrap().contains("exited"));
    let next = codex.harness.start_turn(&session, "again", TurnOptions::new()).await;
    assert!(matches!(next, Err(Error::SessionUnavailable { .. })), "{next:?}");
    codex.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fork_starts_a_new_thread_with_the_history() {
    let codex = Codex::start(Scenario::new().echo("noted: ").echo("forked: ")).await;
    let first = codex.session(codex.options()).await;
    let (_, events) = codex.run(&first, "The code word is MANGO", |_| None).await;
    assert_eq!(terminal(&events).status, TurnStatus::Completed);
    let thread = codex.harness.status(&first).await.unwrap().provider_session_id.expect("thread id");

    let parent_usage = terminal(&events).result.usage.and_then(|u| u.total_tokens).expect("usage");

    let fork = codex.session(codex.options().fork_session(first.id.clone())).await;
    let forked = codex.harness.status(&fork).await.unwrap().provider_session_id.expect("thread id");
    assert_ne!(forked, thread, "a fork is a new thread");
    let (_, events) = codex.run(&fork, "and now?", |_| None).await;
    assert_eq!(terminal(&events).result.text.as_deref(), Some("forked: and now?"));
    // The fork's first turn counts its own tokens, not its parent's too.
    let fork_usage = terminal(&events).result.usage.and_then(|u| u.total_tokens).expect("usage");
    assert_eq!(fork_usage, parent_usage, "the fake model bills every call alike");
    assert!(model_input(codex.server(), 1).contains("The code word is MANGO"));
    codex.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_mcp_servers_and_structured_input_reach_codex() {
    let codex = Codex::start(Scenario::new().text("seen")).await;
    let options = codex.options().mcp_server("probe", agent_core::McpServer::stdio("/nonexistent/mcp-server", ["--x"]));
    let session = codex.session(options).await;
    let mut session_events = codex.harness.subscribe(&session, Replay::Start).await.unwrap();
    let image = codex.workspace().join("shot.png");
    std::fs::write(&image, b"not really a png").unwrap();
    let input = agent_core::TurnInput::Items(vec![
        agent_core::InputItem::Text { text: "look at this".into() },
        agent_core::InputItem::LocalImage { path: image.clone() },
    ]);
    let turn = codex.harness.start_turn(&session, input, TurnOptions::new()).await.unwrap();
    let outcome = codex.harness.await_turn(&turn, Some(IDLE)).await.expect("completed");
    assert_eq!(outcome.result.text.as_deref(), Some("seen"));
    let sent = model_input(codex.server(), 0);
    assert!(sent.contains("look at this") && sent.contains(&*image.to_string_lossy()), "{sent}");

    // Codex tried to start the session's MCP server (and reports that it could not).
    let mut mcp_status = None;
    while let Ok(Some(Ok(event))) = tokio::time::timeout(Duration::from_secs(5), session_events.next()).await {
        if let EventKind::ProviderEvent { method } = &event.kind
            && method == "mcpServer/startupStatus/updated"
            && event.raw.as_ref().is_some_and(|r| r.get().contains("\"failed\""))
        {
            mcp_status = event.raw.as_ref().map(|r| r.get().to_owned());
            break;
        }
    }
    assert!(mcp_status.is_some_and(|s| s.contains("\"name\":\"probe\"")));
    codex.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steer_reaches_a_stalled_turn_and_the_model_sees_it() {
    let codex = Codex::start(Scenario::new().stall("Thinking").text("steered answer")).await;
    let session = codex.session(codex.options()).await;
    let turn = codex.harness.start_turn(&session, "take your time", TurnOptions::new()).await.unwrap();
    let mut stream = codex.harness.stream(&turn, Replay::Start, Some(IDLE)).await.unwrap();
    let mut events = Vec::new();
    while let Some(event) = stream.next().await {
        let event = event.expect("event");
        let streaming = event.type_name() == "message_delta";
        events.push(event);
        if streaming {
            break;
        }
    }
    codex.harness.steer(&turn, "Also mention bananas").await.expect("codex accepts turn/steer");
    while let Some(event) = stream.next().await {
        events.push(event.expect("event"));
    }

    // Codex 0.171 drops the stalled model stream and asks the model again within the same turn,
    // with the steered text as the newest user message.
    assert_eq!(codex.server().wait_for_hangups(1).await, vec![0], "codex dropped the stalled stream");
    let requests = codex.server().model_requests();
    assert_eq!(requests.len(), 2, "one more model request after the steer");
    let input = requests[1].body.as_ref().expect("a JSON body")["input"].as_array().cloned().expect("input items");
    let user_texts: Vec<&str> = input
        .iter()
        .filter(|item| item["role"] == "user")
        .filter_map(|item| item["content"][0]["text"].as_str())
        .collect();
    assert!(user_texts.ends_with(&["take your time", "Also mention bananas"]), "{user_texts:?}");
    // Codex reports the steered input as a user-message item of the running turn.
    assert!(
        events.iter().any(|e| matches!(&e.kind, EventKind::ProviderEvent { method } if method == "item/started")
            && e.raw
                .as_ref()
                .is_some_and(|r| r.get().contains("\"userMessage\"") && r.get().contains("Also mention bananas"))),
        "{}",
        names(&events)
    );
    let end = terminal(&events);
    assert_eq!(end.status, TurnStatus::Completed, "{}", names(&events));
    assert_eq!(end.result.text.as_deref(), Some("steered answer"));
    assert_eq!(count(&events, "turn_completed"), 1);

    let late = codex.harness.steer(&turn, "too late").await;
    assert!(matches!(late, Err(Error::TurnNotActive { .. })), "{late:?}");
    codex.finish().await;
}

#[tokio::test]
async fn max_provider_processes_bounds_running_clis_across_sessions() {
    let cli = codex_cli();
    let server = FakeModel::start(Scenario::new()).await.expect("fake model server");
    let env = OfflineEnv::new(&cli, &server).expect("offline environment");
    let harness = Harness::builder()
        .provider(CodexProvider::new())
        .exec(Arc::new(LocalExec::new()))
        .store(StoreChoice::Disabled)
        .max_provider_processes(1)
        .build()
        .expect("harness");
    let options = || env.session_options().provider_option(CodexOptions::new().binary(cli.program()));
    let first = harness.start_session("codex", options()).await.expect("the first CLI fits");
    let refused = harness.start_session("codex", options()).await.unwrap_err();
    assert!(
        matches!(refused, Error::Exec(ExecError::LimitReached { limit: 1 })),
        "a second running CLI is refused: {refused:?}"
    );
    assert!(refused.is_retryable(), "a slot frees when a session ends");
    harness.stop_session(&first, false).await.unwrap();
    let second = harness.start_session("codex", options()).await.expect("the stopped CLI freed its slot");
    harness.stop_session(&second, false).await.unwrap();
}

/// The `SessionConfig` JSON of a session in `codex`'s offline environment: everything
/// [`OfflineEnv::session_options`] sets, as data.
fn offline_config(codex: &Codex) -> Value {
    let options = codex.env.session_options();
    serde_json::json!({
        "provider": "codex",
        "cwd": codex.workspace(),
        "auth": "inherit",
        "env": { "set": options.env.set, "unset": options.env.unset },
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_config_file_starts_a_session_that_completes_a_turn() {
    let codex = Codex::start(Scenario::new().text("configured")).await;
    let mut config = offline_config(&codex);
    config["id"] = "from-a-file".into();
    config["system_prompt"] = "Answer from the config.".into();
    config["metadata"] = serde_json::json!({ "ticket": 42 });
    config["turn_start_timeout_ms"] = 20_000.into();
    config["provider_options"] = serde_json::json!({ "binary": codex.cli.program(), "questions": false });
    let file = codex.env.dir().join("session.json");
    std::fs::write(&file, serde_json::to_string_pretty(&config).expect("JSON")).expect("config written");

    let text = std::fs::read_to_string(&file).expect("config read");
    let config = SessionConfig::from_json_str(&text).expect("the config parses");
    let session = codex.harness.start_session_from_config(config).await.expect("session starts");
    assert_eq!(session.id.as_str(), "from-a-file");
    // The Codex options reached the provider.
    let capabilities = codex.harness.capabilities(&session).await.expect("capabilities");
    assert_eq!(capabilities.questions, agent_core::Support::Unsupported);
    let (_, events) = codex.run(&session, "hi", |_| None).await;
    let end = terminal(&events);
    assert_eq!(end.status, TurnStatus::Completed, "{}", names(&events));
    assert_eq!(end.result.text.as_deref(), Some("configured"));
    assert!(model_input(codex.server(), 0).contains("Answer from the config."));
    let spawned = codex.exec.commands();
    assert!(spawned.iter().all(|c| c.program.as_os_str() == codex.cli.program().as_os_str()), "{spawned:?}");
    codex.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_session_config_starts_no_session() {
    let codex = Codex::start(Scenario::new().text("never")).await;
    let with_options = |provider_options: Value| {
        let mut config = offline_config(&codex);
        config["provider_options"] = provider_options;
        SessionConfig::from_json_value(config).expect("the config itself parses")
    };
    let binary = codex.cli.program();
    for (provider_options, says) in [
        // A Claude option.
        (serde_json::json!({ "binary": binary, "max_turns": 3 }), "provider_options.max_turns: unknown field"),
        (serde_json::json!({ "binary": binary, "questions": "no" }), "provider_options.questions: invalid type"),
        (serde_json::json!([binary]), "provider_options: expected a JSON object"),
    ] {
        let error = codex.harness.start_session_from_config(with_options(provider_options)).await.unwrap_err();
        assert_eq!(error.kind(), agent_core::ErrorKind::InvalidConfig);
        assert!(error.to_string().contains(says) && error.to_string().contains("(provider `codex`)"), "{error}");
    }

    let mut unknown_field = offline_config(&codex);
    unknown_field["sandbox_mode"] = "read_only".into();
    let error = SessionConfig::from_json_str(&unknown_field.to_string()).unwrap_err();
    assert!(error.to_string().contains("sandbox_mode: unknown field `sandbox_mode`"), "{error}");

    let mut elsewhere = offline_config(&codex);
    elsewhere["provider"] = "claude".into();
    let config = SessionConfig::from_json_value(elsewhere).expect("parses");
    let error = codex.harness.start_session_from_config(config).await.unwrap_err();
    assert_eq!(error.kind(), agent_core::ErrorKind::UnknownProvider);

    assert!(codex.harness.list_sessions().is_empty());
    assert!(codex.exec.commands().is_empty(), "no codex process was started");
    codex.finish().await;
}
