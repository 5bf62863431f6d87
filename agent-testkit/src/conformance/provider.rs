//! The provider conformance suite.
//!
//! Every check drives a provider through the public [`Harness`] API only, against a session the
//! provider's [`ProviderFixture`] prepares for a fake model [`Scenario`]: a real CLI talking to a
//! [`FakeModel`] ([`OfflineCliFixture`]), or a fake CLI playing the same
//! scenario ([`FakeCliFixture`]). Checks that need an optional capability run only when the
//! provider reports it available for the check's options, and say so in the [`Report`].
//!
//! Each check panics with a message naming the broken rule, fails rather than hangs (bounded by
//! [`CHECK_TIMEOUT`] on tokio's clock), stops its sessions at the end and checks that every
//! process the provider started through the exec has exited.
//!
//! ```no_run
//! # async fn example(fixture: impl agent_testkit::conformance::provider::ProviderFixture) {
//! use agent_testkit::conformance::provider;
//!
//! let report = provider::run_all(&fixture).await;
//! assert!(report.skipped.is_empty(), "{report:?}");
//! # }
//! ```

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_core::event::ToolStatus;
use agent_core::{
    ApprovalPolicy, Capability, DynExec, DynProvider, Event, EventKind, Harness, Replay, Request, RequestKind,
    Response, SandboxMode, SessionOptions, SessionRef, StoreChoice, Turn, TurnOptions, TurnStatus,
};
use tokio::time::Instant;

use crate::clis::Cli;
use crate::fake_cli::{FakeCli, FakeCliEnv, FakeScript};
use crate::fake_model::FakeModel;
use crate::offline::OfflineEnv;
use crate::recording::RecordingExec;
use crate::scenario::Scenario;

/// The longest any one check may take before it fails as hung.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(60);
/// The longest wait for the next event of a turn.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// How soon after `cancel` the turn must end.
pub const CANCEL_DEADLINE: Duration = Duration::from_secs(5);
/// How soon after the CLI process dies the turn must fail.
pub const EXIT_DEADLINE: Duration = Duration::from_secs(10);
/// How long a stopped session's processes may take to exit.
const REAP_TIMEOUT: Duration = Duration::from_secs(10);

/// The command the approval checks ask to run; it writes a file so that CLIs that auto-allow
/// read-only commands still ask.
pub const APPROVED_COMMAND: &str = "touch conformance-approved.txt && echo conformance-approved";
/// The command the deny check asks to run.
pub const DENIED_COMMAND: &str = "touch conformance-denied.txt && echo conformance-denied";

/// What the suite needs from a provider crate's tests: the provider, where it spawns, and
/// session options for a session whose model answers with a given [`Scenario`].
///
/// The fixture keeps whatever it starts for a session (fake model server, offline environment,
/// fake CLI directory) alive until it is dropped.
pub trait ProviderFixture: Send + Sync {
    /// The provider under test.
    fn provider(&self) -> DynProvider;

    /// The exec the provider spawns through (e.g. `agent_exec::LocalExec`).
    fn exec(&self) -> DynExec;

    /// Options for a session whose model request `n` gets the scenario's step `n`.
    fn session_options(&self, scenario: Scenario) -> impl Future<Output = SessionOptions> + Send;

    /// `options` changed so that the provider asks before running a command that writes a file.
    /// The default sets [`ApprovalPolicy::Untrusted`] and [`SandboxMode::WorkspaceWrite`] when
    /// the provider supports those options.
    fn approval_options(&self, options: SessionOptions) -> SessionOptions {
        let caps = self.provider().capabilities(&options);
        let options = if caps.approval_policy.is_available() {
            options.approval_policy(ApprovalPolicy::Untrusted)
        } else {
            options
        };
        if caps.sandbox.is_available() { options.sandbox(SandboxMode::WorkspaceWrite) } else { options }
    }
}

/// Whether a check ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// It ran and passed (a failing check panics).
    Ran,
    /// The provider does not report this capability available, so the check did not run.
    Skipped(Capability),
}

/// What [`run_all`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Report {
    /// The checks that ran and passed.
    pub ran: Vec<&'static str>,
    /// The checks skipped, with the capability they need.
    pub skipped: Vec<(&'static str, Capability)>,
}

impl Report {
    fn record(&mut self, name: &'static str, outcome: Outcome) {
        match outcome {
            Outcome::Ran => self.ran.push(name),
            Outcome::Skipped(capability) => self.skipped.push((name, capability)),
        }
    }
}

/// Runs every check, in order.
pub async fn run_all<F: ProviderFixture>(fixture: &F) -> Report {
    let mut report = Report::default();
    report.record("text_turn_streams_deltas", text_turn_streams_deltas(fixture).await);
    report.record("two_turns_in_one_session", two_turns_in_one_session(fixture).await);
    report.record("cancel_mid_turn_keeps_the_session_usable", cancel_mid_turn_keeps_the_session_usable(fixture).await);
    report.record("approval_approve_runs_the_tool", approval_approve_runs_the_tool(fixture).await);
    report.record("approval_deny_completes_the_turn", approval_deny_completes_the_turn(fixture).await);
    report.record("question_is_answered_through_respond", question_is_answered_through_respond(fixture).await);
    report.record("process_exit_mid_turn_fails_the_turn", process_exit_mid_turn_fails_the_turn(fixture).await);
    report
}

/// A text turn completes, streaming its text as deltas when the provider streams tokens.
pub async fn text_turn_streams_deltas<F: ProviderFixture>(fixture: &F) -> Outcome {
    within("text_turn_streams_deltas", async {
        let options = fixture.session_options(Scenario::new().deltas(["Hel", "lo ", "world"], 0)).await;
        let streaming = fixture.provider().capabilities(&options).token_streaming.is_available();
        let world = World::new(fixture);
        let session = world.start(options).await;
        let events = world.run_turn(&session, "Say hello", no_answer).await;
        check_turn_shape(&events);
        assert_eq!(terminal_status(&events), TurnStatus::Completed, "a text turn must complete: {}", names(&events));
        if streaming {
            assert_eq!(deltas(&events), "Hello world", "the deltas must add up to the text: {}", names(&events));
        }
        assert_eq!(final_text(&events).trim(), "Hello world", "the turn's final text");
        world.finish().await;
    })
    .await;
    Outcome::Ran
}

/// Two turns run one after the other in one session.
pub async fn two_turns_in_one_session<F: ProviderFixture>(fixture: &F) -> Outcome {
    within("two_turns_in_one_session", async {
        let options = fixture.session_options(Scenario::new().text("first answer").text("second answer")).await;
        let world = World::new(fixture);
        let session = world.start(options).await;
        let first = world.run_turn(&session, "first question", no_answer).await;
        let second = world.run_turn(&session, "second question", no_answer).await;
        for (events, text) in [(&first, "first answer"), (&second, "second answer")] {
            check_turn_shape(events);
            assert_eq!(terminal_status(events), TurnStatus::Completed, "every turn must complete: {}", names(events));
            assert_eq!(final_text(events).trim(), text, "each turn has its own answer");
        }
        assert_ne!(first[0].turn_id, second[0].turn_id, "two turns, two turn ids");
        assert!(first.last().map(|e| e.seq) < second.first().map(|e| e.seq), "seq keeps increasing across turns");
        let status = world.harness.status(&session).await.expect("status of a live session");
        assert!(status.current_turn.is_none(), "no turn is active after both completed");
        world.finish().await;
    })
    .await;
    Outcome::Ran
}

/// Cancelling a streaming turn ends it (cancelled or interrupted) within [`CANCEL_DEADLINE`],
/// and the next turn in the same session completes.
pub async fn cancel_mid_turn_keeps_the_session_usable<F: ProviderFixture>(fixture: &F) -> Outcome {
    let options = fixture.session_options(Scenario::new().stall("Thinking").text("back again")).await;
    let caps = fixture.provider().capabilities(&options);
    if !caps.cancel.is_available() {
        return Outcome::Skipped(Capability::Cancel);
    }
    within("cancel_mid_turn_keeps_the_session_usable", async {
        let world = World::new(fixture);
        let session = world.start(options).await;
        let turn = world.start_turn(&session, "take your time").await;
        let mut stream = world.harness.stream(&turn, Replay::Start, Some(IDLE_TIMEOUT)).await.expect("turn stream");
        let started = if caps.token_streaming.is_available() { "message_delta" } else { "turn_started" };
        let mut events = Vec::new();
        while let Some(event) = stream.next().await {
            let event = event.unwrap_or_else(|e| panic!("the turn stream broke before `{started}`: {e}"));
            let seen = event.type_name() == started;
            assert!(!event.is_terminal(), "the stalled turn ended by itself: {:?}", event.kind);
            events.push(event);
            if seen {
                break;
            }
        }
        let asked = Instant::now();
        world.harness.cancel(&turn).await.expect("cancel of an active turn is accepted");
        let end = tokio::time::timeout(CANCEL_DEADLINE, async {
            while let Some(event) = stream.next().await {
                let event = event.unwrap_or_else(|e| panic!("the turn stream broke after cancel: {e}"));
                let done = event.is_terminal();
                events.push(event);
                if done {
                    return;
                }
            }
        })
        .await;
        let waited = asked.elapsed();
        assert!(end.is_ok(), "the turn did not end within {waited:?} of cancel: {}", names(&events));
        let status = terminal_status(&events);
        assert!(
            matches!(status, TurnStatus::Cancelled | TurnStatus::Interrupted),
            "a cancelled turn ends cancelled or interrupted, not {status:?}"
        );
        assert!(events.iter().any(|e| e.type_name() == "cancel_requested"), "cancel_requested is recorded");

        let next = world.run_turn(&session, "still there?", no_answer).await;
        assert_eq!(terminal_status(&next), TurnStatus::Completed, "the session stays usable: {}", names(&next));
        assert_eq!(final_text(&next).trim(), "back again");
        world.finish().await;
    })
    .await;
    Outcome::Ran
}

/// Approving a command approval runs the tool and the turn completes.
pub async fn approval_approve_runs_the_tool<F: ProviderFixture>(fixture: &F) -> Outcome {
    let scenario = Scenario::new().shell(APPROVED_COMMAND).quote_tool_result("Tool said: ");
    let options = fixture.approval_options(fixture.session_options(scenario).await);
    if !fixture.provider().capabilities(&options).approvals.is_available() {
        return Outcome::Skipped(Capability::Approvals);
    }
    within("approval_approve_runs_the_tool", async {
        let world = World::new(fixture);
        let session = world.start(options).await;
        let events = world.run_turn(&session, "make the file", |r| r.kind.is_approval().then(Response::approve)).await;
        let approval = one_request(&events, |r| r.kind.is_approval(), "approval");
        assert!(resolved(&events, &approval), "the approval is resolved: {}", names(&events));
        assert!(
            tool_statuses(&events).contains(&ToolStatus::Completed),
            "an approved tool runs and completes: {}",
            names(&events)
        );
        assert_eq!(terminal_status(&events), TurnStatus::Completed, "{}", names(&events));
        world.finish().await;
    })
    .await;
    Outcome::Ran
}

/// Denying a command approval keeps the tool from running, and the turn still completes.
pub async fn approval_deny_completes_the_turn<F: ProviderFixture>(fixture: &F) -> Outcome {
    let scenario = Scenario::new().shell(DENIED_COMMAND).quote_tool_result("Tool said: ");
    let options = fixture.approval_options(fixture.session_options(scenario).await);
    if !fixture.provider().capabilities(&options).approvals.is_available() {
        return Outcome::Skipped(Capability::Approvals);
    }
    within("approval_deny_completes_the_turn", async {
        let world = World::new(fixture);
        let session = world.start(options).await;
        let events = world
            .run_turn(&session, "make the file", |r| {
                r.kind.is_approval().then(|| Response::deny("conformance: denied"))
            })
            .await;
        let approval = one_request(&events, |r| r.kind.is_approval(), "approval");
        assert!(resolved(&events, &approval), "the denial is resolved: {}", names(&events));
        assert!(
            !tool_statuses(&events).contains(&ToolStatus::Completed),
            "a denied tool must not complete: {}",
            names(&events)
        );
        assert_eq!(
            terminal_status(&events),
            TurnStatus::Completed,
            "the turn goes on after a denial: {}",
            names(&events)
        );
        world.finish().await;
    })
    .await;
    Outcome::Ran
}

/// A question reaches the host as a request with its choices; the answer given through
/// `respond` reaches the model.
pub async fn question_is_answered_through_respond<F: ProviderFixture>(fixture: &F) -> Outcome {
    let scenario = Scenario::new().ask_user("Pick a color", ["red", "blue"]).quote_tool_result("You chose: ");
    let options = fixture.session_options(scenario).await;
    if !fixture.provider().capabilities(&options).questions.is_available() {
        return Outcome::Skipped(Capability::Questions);
    }
    within("question_is_answered_through_respond", async {
        let world = World::new(fixture);
        let session = world.start(options).await;
        let events = world
            .run_turn(&session, "ask me", |r| (r.kind == RequestKind::Question).then(|| Response::answer("blue")))
            .await;
        let question = one_request(&events, |r| r.kind == RequestKind::Question, "question");
        let prompt = question.questions.first().map_or(question.prompt.as_str(), |q| q.prompt.as_str());
        assert!(prompt.contains("Pick a color"), "the question's text: {prompt:?}");
        let choices = question.questions.first().map_or(&question.choices, |q| &q.choices);
        let offered: Vec<&str> = choices.iter().map(|c| c.label.as_str()).collect();
        assert_eq!(offered, ["red", "blue"], "the question's choices");
        assert!(resolved(&events, &question), "the question is resolved: {}", names(&events));
        assert_eq!(terminal_status(&events), TurnStatus::Completed, "{}", names(&events));
        let text = final_text(&events);
        assert!(text.contains("blue"), "the answer reached the model: {text:?}");
        world.finish().await;
    })
    .await;
    Outcome::Ran
}

/// When the CLI process dies mid-turn, the turn fails within [`EXIT_DEADLINE`] with the exit
/// status, and the session takes no new turn.
pub async fn process_exit_mid_turn_fails_the_turn<F: ProviderFixture>(fixture: &F) -> Outcome {
    within("process_exit_mid_turn_fails_the_turn", async {
        let options = fixture.session_options(Scenario::new().stall("working")).await;
        let world = World::new(fixture);
        let session = world.start(options).await;
        let turn = world.start_turn(&session, "work").await;
        let mut stream = world.harness.stream(&turn, Replay::Start, Some(IDLE_TIMEOUT)).await.expect("turn stream");
        let mut events = Vec::new();
        while let Some(event) = stream.next().await {
            let event = event.unwrap_or_else(|e| panic!("the turn stream broke before the turn started: {e}"));
            let started = matches!(event.kind, EventKind::TurnStarted { .. } | EventKind::MessageDelta { .. });
            events.push(event);
            if started {
                break;
            }
        }
        world.exec.kill_running();
        let end = tokio::time::timeout(EXIT_DEADLINE, async {
            while let Some(event) = stream.next().await {
                let event = event.unwrap_or_else(|e| panic!("the turn stream broke without a terminal event: {e}"));
                let done = event.is_terminal();
                events.push(event);
                if done {
                    return;
                }
            }
        })
        .await;
        assert!(end.is_ok(), "no terminal event within {EXIT_DEADLINE:?} of the CLI's death: {}", names(&events));
        let result = events.last().and_then(|e| e.kind.terminal_end()).map(|end| (end.status, end.result.clone()));
        let Some((status, result)) = result else { panic!("no terminal event: {}", names(&events)) };
        assert_eq!(status, TurnStatus::Failed, "a CLI death fails the turn");
        assert!(result.exit_status.is_some(), "the failed turn carries the exit status: {result:?}");
        let again = world.harness.start_turn(&session, "are you there?", TurnOptions::new()).await;
        assert!(again.is_err(), "a session whose CLI died takes no new turn, got {again:?}");
        world.finish().await;
    })
    .await;
    Outcome::Ran
}

/// Bounds `check` by [`CHECK_TIMEOUT`].
async fn within<T>(name: &str, check: impl Future<Output = T>) -> T {
    match tokio::time::timeout(CHECK_TIMEOUT, check).await {
        Ok(value) => value,
        Err(_) => panic!("provider conformance: `{name}` did not finish within {CHECK_TIMEOUT:?}"),
    }
}

/// One check's harness, with an exec that remembers the processes it started.
struct World {
    harness: Harness,
    provider: DynProvider,
    exec: Arc<RecordingExec>,
}

impl World {
    fn new<F: ProviderFixture>(fixture: &F) -> World {
        let provider = fixture.provider();
        let exec = Arc::new(RecordingExec::new(fixture.exec()));
        let harness = Harness::builder()
            .provider(Arc::clone(&provider))
            .exec(Arc::clone(&exec) as DynExec)
            .store(StoreChoice::Disabled)
            .build()
            .expect("a harness with one provider builds");
        World { harness, provider, exec }
    }

    async fn start(&self, mut options: SessionOptions) -> SessionRef {
        if let Some(own) = options.exec.take() {
            options.exec = Some(Arc::new(RecordingExec::new(own)));
        }
        let session = self.harness.start_session(self.provider.id(), options).await;
        session.unwrap_or_else(|e| panic!("the session must start: {e}"))
    }

    async fn start_turn(&self, session: &SessionRef, prompt: &str) -> Turn {
        let turn = self.harness.start_turn(session, prompt, TurnOptions::new()).await;
        turn.unwrap_or_else(|e| panic!("the turn must be recorded: {e}"))
    }

    /// Runs a turn to its terminal event, answering requests with `answer` (`None`: leave it).
    async fn run_turn(
        &self,
        session: &SessionRef,
        prompt: &str,
        mut answer: impl FnMut(&Request) -> Option<Response>,
    ) -> Vec<Arc<Event>> {
        let turn = self.start_turn(session, prompt).await;
        let mut stream = self.harness.stream(&turn, Replay::Start, Some(IDLE_TIMEOUT)).await.expect("turn stream");
        let mut events = Vec::new();
        while let Some(event) = stream.next().await {
            let event =
                event.unwrap_or_else(|e| panic!("the turn stream ended early: {e}; events: {}", names(&events)));
            if let EventKind::RequestCreated(request) = &event.kind
                && let Some(response) = answer(request)
            {
                let delivered = self.harness.respond(request, response).await;
                delivered.unwrap_or_else(|e| panic!("the response to {} must be delivered: {e}", request.kind));
            }
            let done = event.is_terminal();
            events.push(event);
            if done {
                break;
            }
        }
        events
    }

    /// Stops every session and checks that no process the provider started is left.
    async fn finish(self) {
        for session in self.harness.list_sessions() {
            let stopped = self.harness.stop_session(&session, true).await;
            stopped.unwrap_or_else(|e| panic!("a forced stop succeeds: {e}"));
        }
        for child in self.exec.children() {
            let exited = tokio::time::timeout(REAP_TIMEOUT, child.wait()).await;
            assert!(matches!(exited, Ok(Ok(_))), "process {:?} outlived its session", child.id());
        }
    }
}

fn no_answer(_: &Request) -> Option<Response> {
    None
}

/// The event types of a turn, for failure messages.
fn names(events: &[Arc<Event>]) -> String {
    events.iter().map(|e| e.type_name()).collect::<Vec<_>>().join(" ")
}

/// Checks what every turn's events must look like: strictly increasing `seq`, every event of
/// the turn, `turn_started` before any provider content, exactly one terminal event, last.
fn check_turn_shape(events: &[Arc<Event>]) {
    let Some(first) = events.first() else { panic!("a turn without events") };
    assert!(events.windows(2).all(|w| w[0].seq < w[1].seq), "seq must strictly increase: {}", names(events));
    assert!(events.iter().all(|e| e.turn_id == first.turn_id), "a turn stream carries only its turn's events");
    let started = events.iter().position(|e| matches!(e.kind, EventKind::TurnStarted { .. }));
    let content = events
        .iter()
        .position(|e| matches!(e.kind, EventKind::MessageDelta { .. } | EventKind::AssistantMessage { .. }));
    assert!(started.is_some(), "a turn that ran has turn_started: {}", names(events));
    assert!(content.is_none() || started < content, "turn_started comes before content: {}", names(events));
    let terminals = events.iter().filter(|e| e.is_terminal()).count();
    assert_eq!(terminals, 1, "exactly one terminal event: {}", names(events));
    assert!(events.last().is_some_and(|e| e.is_terminal()), "the terminal event is the last: {}", names(events));
}

fn terminal_status(events: &[Arc<Event>]) -> TurnStatus {
    let end = events.last().and_then(|e| e.kind.terminal_end());
    end.unwrap_or_else(|| panic!("no terminal event: {}", names(events))).status
}

/// The streamed text deltas, joined.
fn deltas(events: &[Arc<Event>]) -> String {
    crate::events::delta_texts(events).concat()
}

/// The turn's final text: the terminal result's text, else the last assistant message, else
/// the deltas.
fn final_text(events: &[Arc<Event>]) -> String {
    let result = events.last().and_then(|e| e.kind.terminal_end()).and_then(|end| end.result.text.clone());
    let message = || {
        events.iter().rev().find_map(|e| match &e.kind {
            EventKind::AssistantMessage { text, .. } => Some(text.clone()),
            _ => None,
        })
    };
    result.or_else(message).unwrap_or_else(|| deltas(events))
}

/// The one request `select` takes.
fn one_request(events: &[Arc<Event>], select: impl Fn(&Request) -> bool, what: &str) -> Request {
    let requests: Vec<Request> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::RequestCreated(request) if select(request) => Some((**request).clone()),
            _ => None,
        })
        .collect();
    match <[Request; 1]>::try_from(requests) {
        Ok([request]) => request,
        Err(requests) => panic!("expected exactly one {what} request, got {}: {}", requests.len(), names(events)),
    }
}

fn resolved(events: &[Arc<Event>], request: &Request) -> bool {
    events.iter().any(|e| matches!(&e.kind, EventKind::RequestResolved { request_id, .. } if *request_id == request.id))
}

fn tool_statuses(events: &[Arc<Event>]) -> Vec<ToolStatus> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolCompleted { status, .. } => Some(*status),
            _ => None,
        })
        .collect()
}

/// A fixture for a real CLI run offline: each session gets its own [`FakeModel`] serving the
/// scenario and its own [`OfflineEnv`]; `configure` adds what the provider needs to run `cli`
/// (typically its binary option).
pub struct OfflineCliFixture<C> {
    provider: DynProvider,
    exec: DynExec,
    cli: Cli,
    configure: C,
    kept: Mutex<Vec<(FakeModel, OfflineEnv)>>,
}

impl<C> OfflineCliFixture<C>
where
    C: Fn(&Cli, &OfflineEnv, SessionOptions) -> SessionOptions + Send + Sync,
{
    /// A fixture running `cli` through `provider` and `exec`.
    pub fn new(provider: DynProvider, exec: DynExec, cli: Cli, configure: C) -> Self {
        OfflineCliFixture { provider, exec, cli, configure, kept: Mutex::default() }
    }
}

impl<C> fmt::Debug for OfflineCliFixture<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OfflineCliFixture")
            .field("provider", &self.provider)
            .field("cli", &self.cli)
            .finish_non_exhaustive()
    }
}

impl<C> ProviderFixture for OfflineCliFixture<C>
where
    C: Fn(&Cli, &OfflineEnv, SessionOptions) -> SessionOptions + Send + Sync,
{
    fn provider(&self) -> DynProvider {
        Arc::clone(&self.provider)
    }

    fn exec(&self) -> DynExec {
        Arc::clone(&self.exec)
    }

    async fn session_options(&self, scenario: Scenario) -> SessionOptions {
        let server = FakeModel::start(scenario).await.unwrap_or_else(|e| panic!("the fake model server starts: {e}"));
        let env = OfflineEnv::new(&self.cli, &server).unwrap_or_else(|e| panic!("the offline environment: {e}"));
        let options = (self.configure)(&self.cli, &env, env.session_options());
        self.kept.lock().unwrap_or_else(|p| p.into_inner()).push((server, env));
        options
    }
}

/// A fixture for a fake CLI: each session gets a [`FakeCliEnv`] whose script plays the scenario
/// ([`FakeScript::from_scenario`]); `configure` points the provider at [`FakeCliEnv::program`].
pub struct FakeCliFixture<C> {
    provider: DynProvider,
    exec: DynExec,
    cli: FakeCli,
    configure: C,
    kept: Mutex<Vec<FakeCliEnv>>,
}

impl<C> FakeCliFixture<C>
where
    C: Fn(&FakeCliEnv, SessionOptions) -> SessionOptions + Send + Sync,
{
    /// A fixture running the fake `cli` through `provider` and `exec`.
    pub fn new(provider: DynProvider, exec: DynExec, cli: FakeCli, configure: C) -> Self {
        FakeCliFixture { provider, exec, cli, configure, kept: Mutex::default() }
    }

    /// The environments of the sessions so far (their transcripts), oldest first.
    pub fn transcripts(&self) -> Vec<Vec<crate::fake_cli::TranscriptLine>> {
        let kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        kept.iter().map(|env| env.transcript().unwrap_or_default()).collect()
    }
}

impl<C> fmt::Debug for FakeCliFixture<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FakeCliFixture")
            .field("provider", &self.provider)
            .field("cli", &self.cli)
            .finish_non_exhaustive()
    }
}

impl<C> ProviderFixture for FakeCliFixture<C>
where
    C: Fn(&FakeCliEnv, SessionOptions) -> SessionOptions + Send + Sync,
{
    fn provider(&self) -> DynProvider {
        Arc::clone(&self.provider)
    }

    fn exec(&self) -> DynExec {
        Arc::clone(&self.exec)
    }

    async fn session_options(&self, scenario: Scenario) -> SessionOptions {
        let script = FakeScript::from_scenario(&scenario);
        let env = FakeCliEnv::new(self.cli, &script).unwrap_or_else(|e| panic!("{e}"));
        let options = (self.configure)(&env, env.session_options());
        self.kept.lock().unwrap_or_else(|p| p.into_inner()).push(env);
        options
    }
}
