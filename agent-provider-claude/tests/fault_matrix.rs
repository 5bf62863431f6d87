//! The fault matrix: the testkit's `fake-claude` misbehaving at every protocol phase, driven
//! through the public `Harness` API with the real `LocalExec` and a `MemoryStore`.
//!
//! Every case asserts the outcome (the turn's terminal event, or the `start_session` error) and
//! that every process the provider started (the `--version` probe and claude) is gone from
//! `/proc` once its session ended. The fake binaries come from
//! `cargo build -p agent-testkit --bins`; a missing or stale build fails with that command.
//!
//! | fault | outcome |
//! |---|---|
//! | exit before the `initialize` reply | `start_session`: `ProviderUnavailable` with exit status and stderr |
//! | hang before the `initialize` reply | `start_session`: `Timeout` |
//! | exit after the handshake | session-level `transport_error`; the session is `unavailable` |
//! | exit mid-turn, or exit 0 without a `result` | `turn_failed` with `exit_status`, `stderr_tail`; `transport_error` |
//! | exit after the `result` | the turn stays `turn_completed`; session-level `transport_error` |
//! | interrupt acknowledged, no `result` | `turn_failed`; the session retires |
//! | exit while a permission is pending | `request_expired`, then `turn_failed` |
//! | garbage line | `warning`; the turn completes |
//! | 10 MiB line of an unknown kind | a `provider_event` holding it; the turn completes |
//! | stderr flood | drained; the turn completes |
//! | duplicated `result` | one terminal event per turn; the next turn is unaffected |
//! | stdin closed early | the prompt write fails or is never answered: `turn_failed` |

use std::sync::Arc;
use std::time::Duration;

use agent_core::exec::{Exec, ExitStatus};
use agent_core::{
    EndCause, Error, Event, EventKind, Harness, Replay, SessionOptions, SessionRef, SessionState, StoreChoice,
    TurnOptions, TurnStatus,
};
use agent_exec::LocalExec;
use agent_provider_claude::{ClaudeOptions, ClaudeProvider};
use agent_store_memory::MemoryStore;
use agent_testkit::events::{Watched, names, sole_terminal as end};
use agent_testkit::fake_cli::{ExpectKind, FakeCli, FakeCliEnv, FakeScript, FakeStep, InterruptMode};
use agent_testkit::recording::RecordingExec;
use tokio::time::Instant;

/// `startup_timeout` of the cases.
const STARTUP: Duration = Duration::from_millis(3000);
/// `startup_timeout` of the cases that hang during the handshake.
const SHORT_STARTUP: Duration = Duration::from_millis(600);
/// `turn_start_timeout`.
const TURN_START: Duration = Duration::from_millis(1000);
/// `provider_command_timeout`.
const COMMAND: Duration = Duration::from_millis(500);
/// `startup_finalization_timeout`, which also bounds the provider's close.
const FINALIZATION: Duration = Duration::from_millis(500);
/// The longest wait for the next event before a case fails as hung.
const IDLE: Duration = Duration::from_secs(5);
/// How long an ended session's processes may take to disappear from `/proc`.
const GONE_DEADLINE: Duration = Duration::from_secs(3);
/// How often `/proc` is read while waiting for a process to disappear.
const GONE_POLL: Duration = Duration::from_millis(10);

struct Case {
    env: FakeCliEnv,
    exec: Arc<RecordingExec>,
    harness: Harness,
}

impl Case {
    fn new(script: FakeScript) -> Case {
        let env = FakeCliEnv::new(FakeCli::Claude, &script).unwrap_or_else(|e| panic!("{e}"));
        let exec = Arc::new(RecordingExec::without_handles(Arc::new(LocalExec::new())));
        let harness = Harness::builder()
            .provider(ClaudeProvider::new())
            .exec(Arc::clone(&exec) as Arc<dyn Exec>)
            .store(StoreChoice::Custom(Arc::new(MemoryStore::new())))
            .build()
            .expect("harness");
        Case { env, exec, harness }
    }

    fn options(&self) -> SessionOptions {
        self.env
            .session_options()
            .provider_option(ClaudeOptions::new().binary(self.env.program()))
            .startup_timeout(STARTUP)
            .turn_start_timeout(TURN_START)
            .provider_command_timeout(COMMAND)
            .startup_finalization_timeout(FINALIZATION)
    }

    async fn session(&self) -> SessionRef {
        self.harness.start_session("claude", self.options()).await.expect("session starts")
    }

    async fn watch(&self, session: &SessionRef, prompt: &str) -> Watched {
        let events = self.harness.subscribe(session, Replay::Latest).await.expect("subscribe");
        let turn = self.harness.start_turn(session, prompt, TurnOptions::new()).await.expect("turn recorded");
        Watched::new(turn, events, IDLE)
    }

    async fn run(&self, session: &SessionRef, prompt: &str) -> Vec<Arc<Event>> {
        self.watch(session, prompt).await.into_events().await
    }

    /// The first event of the session that `select` takes.
    async fn session_event(&self, session: &SessionRef, select: impl Fn(&Event) -> bool) -> Arc<Event> {
        let mut events = self.harness.subscribe(session, Replay::Start).await.expect("subscribe");
        let found = async {
            while let Some(event) = events.next().await {
                let event = event.expect("session event");
                if select(&event) {
                    return event;
                }
            }
            panic!("the session's events ended");
        };
        tokio::time::timeout(IDLE, found).await.unwrap_or_else(|_| panic!("no such session event within {IDLE:?}"))
    }

    /// Asserts that every process the provider started has exited and been reaped.
    async fn assert_no_process_left(&self) {
        let spawned = self.exec.spawned();
        assert!(!spawned.is_empty(), "the provider started no process");
        let deadline = Instant::now() + GONE_DEADLINE;
        for process in spawned {
            let pid = process.pid().expect("a local child has a PID");
            while process.is_running() {
                assert!(Instant::now() < deadline, "process {pid} (`{}`) is still running", process.argv());
                tokio::time::sleep(GONE_POLL).await;
            }
        }
    }

    /// Stops every live session (forced) and checks that no process is left.
    async fn finish(self) {
        for session in self.harness.list_sessions() {
            self.harness.stop_session(&session, true).await.expect("forced stop");
        }
        self.assert_no_process_left().await;
    }
}

fn count(events: &[Arc<Event>], name: &str) -> usize {
    events.iter().filter(|e| e.type_name() == name).count()
}

// ----- startup --------------------------------------------------------------------------------

/// claude quoting a secret of the session in its refusal of a control request (here a path,
/// which is no credential and so not redacted from stdout as such): the turn's reason has it
/// redacted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_quoting_a_secret_has_it_redacted() {
    const MOUNT: &str = "/srv/private-mount-01";
    let script = FakeScript::new().handshake().step(FakeStep::On {
        pattern: serde_json::json!({"type": "control_request", "request": {"subtype": "set_model"}}),
        reply: None,
        error: Some(format!("no model file under {MOUNT}")),
        frames: Vec::new(),
        times: None,
    });
    let case = Case::new(script);
    let options = case.options().env("MODEL_ROOT", MOUNT);
    let session = case.harness.start_session("claude", options).await.expect("session starts");
    let events = case.harness.subscribe(&session, Replay::Latest).await.expect("subscribe");
    let turn = case.harness.start_turn(&session, "hi", TurnOptions::new().model("other")).await.expect("recorded");
    let refused = Watched::new(turn, events, IDLE).into_events().await;
    let reason = end(&refused).result.reason.clone().unwrap_or_default();
    assert!(reason.contains("no model file under [redacted]") && !reason.contains(MOUNT), "{reason}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_before_the_initialize_reply_fails_start_session() {
    let script = FakeScript::new().expect(ExpectKind::Handshake).stderr("fake-claude: settings are broken").exit(3);
    let case = Case::new(script);
    let started = case.harness.start_session("claude", case.options()).await;
    let Err(Error::ProviderUnavailable { reason, .. }) = started else {
        panic!("expected ProviderUnavailable, got {started:?}")
    };
    assert!(reason.contains(&ExitStatus::code(3).to_string()), "{reason}");
    assert!(reason.contains("fake-claude: settings are broken"), "the stderr tail is reported: {reason}");
    assert!(case.harness.list_sessions().is_empty());
    case.assert_no_process_left().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hang_before_the_initialize_reply_times_out() {
    let case = Case::new(FakeScript::new().expect(ExpectKind::Handshake).hang());
    let started = case.harness.start_session("claude", case.options().startup_timeout(SHORT_STARTUP)).await;
    assert!(
        matches!(started, Err(Error::Timeout { .. } | Error::StartupTimeout { .. })),
        "expected a timeout, got {started:?}"
    );
    case.assert_no_process_left().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_after_the_handshake_makes_the_session_unavailable() {
    let case = Case::new(FakeScript::new().handshake().exit_after_the_start(5));
    let session = case.session().await;
    let down = case.session_event(&session, |e| matches!(e.kind, EventKind::TransportError { .. })).await;
    assert!(
        matches!(&down.kind, EventKind::TransportError { reason } if reason.contains(&ExitStatus::code(5).to_string())),
        "{:?}",
        down.kind
    );
    assert_eq!(down.turn_id, None, "no turn was running");
    case.assert_no_process_left().await;
    assert_eq!(case.harness.status(&session).await.unwrap().status, SessionState::Unavailable);
    let next = case.harness.start_turn(&session, "hello?", TurnOptions::new()).await;
    assert!(matches!(next, Err(Error::SessionUnavailable { .. })), "{next:?}");
    case.finish().await;
}

// ----- exits during a turn ------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_mid_turn_fails_the_turn_with_status_and_stderr() {
    let script = FakeScript::new().handshake().turn_start().deltas(["par", "tial"]).stderr("fake-claude: boom").exit(7);
    let case = Case::new(script);
    let session = case.session().await;
    let events = case.run(&session, "work").await;
    let end = end(&events);
    assert_eq!(end.status, TurnStatus::Failed, "{}", names(&events));
    assert_eq!(end.result.exit_status, Some(ExitStatus::code(7)));
    assert_eq!(end.result.ended_by, Some(EndCause::TransportLost));
    assert_eq!(end.result.stderr_tail.as_deref(), Some("fake-claude: boom"));
    assert!(end.result.reason.as_deref().unwrap().contains("claude exited"));
    let down = case.session_event(&session, |e| matches!(e.kind, EventKind::TransportError { .. })).await;
    assert!(matches!(&down.kind, EventKind::TransportError { reason } if reason.contains("fake-claude: boom")));
    case.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_0_without_a_result_fails_the_turn() {
    let case = Case::new(FakeScript::new().handshake().turn_start().deltas(["no end"]).exit(0));
    let session = case.session().await;
    let events = case.run(&session, "work").await;
    let end = end(&events);
    assert_eq!(end.status, TurnStatus::Failed, "{}", names(&events));
    assert_eq!(end.result.exit_status, Some(ExitStatus::code(0)));
    case.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_after_the_result_keeps_the_turn_completed() {
    let case = Case::new(FakeScript::new().handshake().turn("done").exit(1));
    let session = case.session().await;
    let events = case.run(&session, "work").await;
    assert_eq!(end(&events).status, TurnStatus::Completed, "{}", names(&events));
    let down = case.session_event(&session, |e| matches!(e.kind, EventKind::TransportError { .. })).await;
    assert_eq!(down.turn_id, None);
    case.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_while_a_permission_is_pending_expires_it_and_fails_the_turn() {
    // The permission is asked, then the CLI dies before any answer can arrive.
    let ask = serde_json::json!({
        "type": "control_request", "request_id": "perm-1",
        "request": {"subtype": "can_use_tool", "tool_name": "Bash", "input": {"command": "touch x"}, "tool_use_id": "toolu_1"},
    });
    let script = FakeScript::new().handshake().turn_start().send(ask).sleep(300).stderr("fake-claude: died waiting");
    let case = Case::new(script.exit(9));
    let session = case.session().await;
    let events = case.run(&session, "work").await;
    let end = end(&events);
    assert_eq!(end.status, TurnStatus::Failed, "{}", names(&events));
    assert_eq!(count(&events, "request_created"), 1);
    assert_eq!(count(&events, "request_expired"), 1, "{}", names(&events));
    case.finish().await;
}

// ----- interrupts ----------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acknowledged_interrupt_without_a_result_fails_the_turn_and_retires_the_session() {
    let script = FakeScript::new().interrupts(InterruptMode::AckOnly).handshake().turn_start().deltas(["x"]).stall();
    let case = Case::new(script);
    let session = case.session().await;
    let monitor = case.harness.monitor(&session).await.expect("live");
    let mut watched = case.watch(&session, "work").await;
    watched.until(|e| matches!(e.kind, EventKind::MessageDelta { .. })).await;
    case.harness.cancel(watched.turn()).await.expect("cancel accepted");
    let events = watched.into_events().await;
    assert_eq!(end(&events).status, TurnStatus::Failed, "{}", names(&events));
    let reason = tokio::time::timeout(IDLE, monitor).await.expect("the session ends");
    assert!(matches!(reason, agent_core::ExitReason::Retired { .. }), "{reason:?}");
    case.finish().await;
}

// ----- odd output ------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_garbage_line_is_a_warning_and_the_turn_completes() {
    let case = Case::new(FakeScript::new().handshake().turn_start().garbage().deltas(["fine"]).complete());
    let session = case.session().await;
    let events = case.run(&session, "work").await;
    assert_eq!(end(&events).status, TurnStatus::Completed, "{}", names(&events));
    assert_eq!(count(&events, "warning"), 1, "{}", names(&events));
    case.finish().await;
}

/// A CLI that writes garbage without end makes a few dozen warnings, not one per line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_garbage_lines_is_warned_of_a_few_times_and_the_turn_completes() {
    let script = (0..1000).fold(FakeScript::new().handshake().turn_start(), |script, _| script.garbage());
    let case = Case::new(script.deltas(["fine"]).complete());
    let session = case.session().await;
    let events = case.run(&session, "work").await;
    assert_eq!(end(&events).status, TurnStatus::Completed, "{}", names(&events));
    assert_eq!(count(&events, "warning"), 32 + 4, "the first 32, then at 64, 128, 256 and 512 lines");
    case.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_line_is_kept_and_the_turn_completes() {
    let case = Case::new(FakeScript::new().handshake().turn_start().huge_line(10 << 20).deltas(["fine"]).complete());
    let session = case.session().await;
    let events = case.run(&session, "work").await;
    assert_eq!(end(&events).status, TurnStatus::Completed, "{}", names(&events));
    let huge =
        events.iter().find(|e| matches!(&e.kind, EventKind::ProviderEvent { method } if method == "fake_padding"));
    assert!(huge.and_then(|e| e.raw.as_ref()).is_some_and(|r| r.get().len() >= 10 << 20), "{}", names(&events));
    case.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stderr_flood_is_drained_and_the_turn_completes() {
    let case = Case::new(FakeScript::new().handshake().turn_start().stderr_flood(4 << 20).deltas(["fine"]).complete());
    let session = case.session().await;
    let events = case.run(&session, "work").await;
    assert_eq!(end(&events).status, TurnStatus::Completed, "{}", names(&events));
    case.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicated_result_ends_the_turn_once() {
    let script = FakeScript::new().handshake().turn_start().deltas(["one"]).duplicate(2).complete().turn("two");
    let case = Case::new(script);
    let session = case.session().await;
    let events = case.run(&session, "first").await;
    assert_eq!(end(&events).status, TurnStatus::Completed, "{}", names(&events));
    let events = case.run(&session, "second").await;
    assert_eq!(end(&events).status, TurnStatus::Completed, "{}", names(&events));
    assert_eq!(end(&events).result.text.as_deref(), Some("two"));
    case.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdin_closed_early_fails_the_turn() {
    let case = Case::new(FakeScript::new().handshake().close_stdin().sleep(200).exit(0));
    let session = case.session().await;
    // Either the prompt's write fails, or claude exits without reading it: the turn fails.
    match case.harness.start_turn(&session, "work", TurnOptions::new()).await {
        Ok(turn) => match case.harness.await_turn(&turn, Some(IDLE * 2)).await {
            Err(agent_core::AwaitError::Ended(outcome)) => assert_eq!(outcome.status, TurnStatus::Failed),
            other => panic!("expected a failed turn, got {other:?}"),
        },
        Err(Error::SessionUnavailable { .. }) => {}
        Err(other) => panic!("unexpected {other:?}"),
    }
    case.finish().await;
}
