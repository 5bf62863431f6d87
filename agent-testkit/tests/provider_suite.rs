//! The provider conformance suite against `agent_core::testing::ScriptedProvider`: a fixture
//! that plays each scenario as scripted provider frames passes every check it can run, gated
//! checks are skipped when the capability is missing, and broken behaviour fails the check.
//!
//! The end-to-end run against a real adapter (real CLI offline, or a fake CLI) lives in the
//! provider crates, which implement `ProviderFixture` with their adapter and an exec.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agent_core::event::ToolStatus;
use agent_core::exec::{Child, Command, ExecError};
use agent_core::request::RequestSpec;
use agent_core::testing::{CancelBehavior, Frame, ScriptedControl, ScriptedProvider};
use agent_core::{
    Capability, Choice, DynExec, DynProvider, EventKind, Exec, Question, RequestKind, SessionOptions, Support,
};
use agent_testkit::conformance::provider::{
    self, DENIED_COMMAND, FakeCliFixture, OfflineCliFixture, Outcome, ProviderFixture,
};
use agent_testkit::fake_cli::{FakeCli, FakeScript, RECORD_ENV, SCRIPT_ENV};
use agent_testkit::{Cli, Provider, Scenario, Step};

/// Longer than any check waits: a stalled turn sleeps this long.
const FOREVER: Duration = Duration::from_secs(24 * 3600);

/// The answer the scripted model quotes after a question (it cannot see the real one).
const SCRIPTED_ANSWER: &str = "blue";

/// An exec for providers that never spawn: every spawn fails.
#[derive(Debug)]
struct NoSpawn;

#[async_trait::async_trait]
impl Exec for NoSpawn {
    async fn spawn(&self, _command: Command) -> Result<Child, ExecError> {
        Err(ExecError::Backend("the scripted provider spawns nothing".into()))
    }
}

/// Plays each scenario as scripted frames, one script per turn.
struct Scripted {
    provider: DynProvider,
    control: ScriptedControl,
    /// When set, a denied tool is reported completed anyway (a broken provider).
    runs_denied_tools: bool,
    requests: AtomicUsize,
}

impl Scripted {
    fn new() -> Scripted {
        let (provider, control) = ScriptedProvider::new("scripted");
        Scripted { provider, control, runs_denied_tools: false, requests: AtomicUsize::new(0) }
    }

    fn request(&self, spec: impl FnOnce(String) -> RequestSpec) -> (Frame, Frame) {
        let reference = format!("ref-{}", self.requests.fetch_add(1, Ordering::SeqCst));
        (Frame::Request(spec(reference.clone())), Frame::WaitResponse(reference))
    }

    /// The frames of one model answer; true when it ends the turn.
    fn frames(&self, step: &Step, frames: &mut Vec<Frame>) -> bool {
        let finish = |frames: &mut Vec<Frame>, text: &str| {
            frames.push(Frame::delta(text));
            frames.push(Frame::complete(text));
        };
        match step {
            Step::Text { text } => finish(frames, text),
            Step::Deltas { deltas, .. } => {
                frames.extend(deltas.iter().map(|d| Frame::delta(d)));
                frames.push(Frame::complete(&deltas.concat()));
            }
            Step::QuoteToolResult { prefix } => finish(frames, &format!("{prefix}{SCRIPTED_ANSWER}")),
            Step::Stall { text } => frames.extend([Frame::delta(text), Frame::Sleep(FOREVER)]),
            Step::Shell { command } => {
                let (ask, wait) = self.request(|r| RequestSpec::new(RequestKind::CommandApproval, command.clone(), r));
                let declined = command == DENIED_COMMAND && !self.runs_denied_tools;
                let status = if declined { ToolStatus::Declined } else { ToolStatus::Completed };
                let done = EventKind::ToolCompleted { item_id: "tool-1".into(), status, output: None, exit_code: None };
                frames.extend([ask, wait, Frame::Event(done, None)]);
                return false;
            }
            Step::AskUser { question, options } => {
                let choices = options.iter().map(|o| Choice::new(o.as_str()));
                let asked = Question::new("q1", question.as_str()).with_choices(choices);
                let (ask, wait) =
                    self.request(|r| RequestSpec::new(RequestKind::Question, question.clone(), r).questions([asked]));
                frames.extend([ask, wait]);
                return false;
            }
            other => panic!("the scripted fixture does not play `{}`", other.name()),
        }
        true
    }
}

impl ProviderFixture for Scripted {
    fn provider(&self) -> DynProvider {
        Arc::clone(&self.provider)
    }

    fn exec(&self) -> DynExec {
        Arc::new(NoSpawn)
    }

    async fn session_options(&self, scenario: Scenario) -> SessionOptions {
        let mut turn = Vec::new();
        for step in scenario.steps() {
            if self.frames(step, &mut turn) {
                self.control.push_script(std::mem::take(&mut turn));
            }
        }
        SessionOptions::new(std::env::temp_dir())
    }
}

#[tokio::test]
async fn a_conforming_provider_passes_every_check_it_can_run() {
    let fixture = Scripted::new();
    assert_eq!(provider::text_turn_streams_deltas(&fixture).await, Outcome::Ran);
    assert_eq!(provider::two_turns_in_one_session(&fixture).await, Outcome::Ran);
    assert_eq!(provider::cancel_mid_turn_keeps_the_session_usable(&fixture).await, Outcome::Ran);
    assert_eq!(provider::approval_approve_runs_the_tool(&fixture).await, Outcome::Ran);
    assert_eq!(provider::approval_deny_completes_the_turn(&fixture).await, Outcome::Ran);
    assert_eq!(provider::question_is_answered_through_respond(&fixture).await, Outcome::Ran);
}

#[tokio::test]
async fn checks_that_need_a_missing_capability_are_skipped_and_reported() {
    let fixture = Scripted::new();
    let mut caps = ScriptedProvider::default_capabilities();
    for capability in [Capability::Cancel, Capability::Approvals, Capability::Questions] {
        caps = caps.with(capability, Support::Unsupported);
    }
    fixture.control.set_capabilities(caps);
    assert_eq!(
        provider::cancel_mid_turn_keeps_the_session_usable(&fixture).await,
        Outcome::Skipped(Capability::Cancel)
    );
    assert_eq!(provider::approval_approve_runs_the_tool(&fixture).await, Outcome::Skipped(Capability::Approvals));
    assert_eq!(provider::question_is_answered_through_respond(&fixture).await, Outcome::Skipped(Capability::Questions));
}

#[tokio::test(start_paused = true)]
#[should_panic(expected = "the turn did not end within")]
async fn a_cancel_that_never_ends_the_turn_fails() {
    let fixture = Scripted::new();
    fixture.control.set_cancel(CancelBehavior::AckOnly);
    provider::cancel_mid_turn_keeps_the_session_usable(&fixture).await;
}

#[tokio::test]
#[should_panic(expected = "a denied tool must not complete")]
async fn a_denied_tool_that_runs_anyway_fails() {
    let fixture = Scripted { runs_denied_tools: true, ..Scripted::new() };
    provider::approval_deny_completes_the_turn(&fixture).await;
}

#[tokio::test]
#[should_panic(expected = "the provider runs a process through the exec")]
async fn a_provider_without_a_process_cannot_pass_the_exit_check() {
    provider::process_exit_mid_turn_fails_the_turn(&Scripted::new()).await;
}

#[tokio::test]
async fn the_fake_cli_fixture_gives_each_session_the_scenarios_script() {
    let scripted = Scripted::new();
    let fixture = FakeCliFixture::new(scripted.provider(), scripted.exec(), FakeCli::Codex, |env, options| {
        options.env("FAKE_BINARY", env.program().display().to_string())
    });
    let scenario = Scenario::new().shell("touch x").quote_tool_result("Tool said: ");
    let options = fixture.session_options(scenario.clone()).await;
    let script = options.env.set.get(SCRIPT_ENV).expect("the script variable");
    assert_eq!(FakeScript::from_file(script).unwrap(), FakeScript::from_scenario(&scenario));
    assert!(options.env.set.contains_key(RECORD_ENV));
    assert_eq!(options.env.set.get("FAKE_BINARY").map(PathBuf::from), Some(FakeCli::Codex.binary().unwrap()));
    assert!(options.cwd.as_deref().is_some_and(std::path::Path::is_dir), "the workspace exists");
    assert_eq!(fixture.transcripts(), vec![Vec::new()], "one session, nothing run yet");
}

#[tokio::test]
async fn the_offline_fixture_gives_each_session_a_server_and_an_environment() {
    let cli = Cli::latest(Provider::Codex).unwrap_or_else(|e| panic!("{e}"));
    let scripted = Scripted::new();
    let fixture = OfflineCliFixture::new(scripted.provider(), scripted.exec(), cli, |cli, env, options| {
        options
            .env("CLI_PROGRAM", cli.program().display().to_string())
            .env("HOME_SEEN", env.home().display().to_string())
    });
    let first = fixture.session_options(Scenario::new().text("one")).await;
    let second = fixture.session_options(Scenario::new().text("two")).await;
    for options in [&first, &second] {
        assert!(options.cwd.as_deref().is_some_and(std::path::Path::is_dir), "the workspace is kept");
        assert_eq!(options.env.set.get("HOME"), options.env.set.get("HOME_SEEN"));
        assert!(options.env.set.contains_key("CODEX_HOME"));
        assert!(options.env.set.contains_key("CLI_PROGRAM"));
    }
    assert_ne!(first.env.set.get("HOME"), second.env.set.get("HOME"), "one environment per session");
}
