//! The fault matrix: the testkit's `fake-pi` misbehaving at each phase of pi's RPC protocol,
//! driven through the public `Harness` API with the real `LocalExec` and a `MemoryStore`.
//!
//! Every case asserts the outcome and that every process the provider started (the `--version`
//! probe and `pi --mode rpc`) is gone once its session ended. The fake binaries come from
//! `cargo build -p agent-testkit --bins`; a missing or stale build fails with that command.
//!
//! | fault | outcome |
//! |---|---|
//! | exit before the `get_state` reply | `start_session`: `ProviderUnavailable` with exit status and stderr |
//! | hang before the `get_state` reply | `start_session`: `Timeout` |
//! | exit after the handshake | session-level `transport_error`; the session is `unavailable` |
//! | exit before the `prompt` reply | `turn_failed` (admission uncertain); session retired |
//! | exit mid-turn | `turn_failed` with `exit_status`, `stderr_tail`, partial text; `transport_error` |
//! | exit while a dialog is pending | `request_expired`, then `turn_failed` |
//! | `prompt` refused | `turn_failed` (rejected); the session takes the next turn |
//! | `PiOptions` given to a turn | `start_turn`: `InvalidOption`; no turn recorded |
//! | garbage line, line over the limit | `warning`; the turn completes |
//! | duplicate frames | one terminal event per turn |
//! | out-of-order frames | the turn ends once, at its terminal frame |
//! | `abort` acknowledged, no end | `turn_failed` ("cancellation failed"); session retired |
//! | a dialog while no turn runs | answered `cancelled` at once, no request |

use std::sync::Arc;
use std::time::Duration;

use agent_core::exec::{Exec, ExitStatus};
use agent_core::{
    EndCause, Error, Event, EventKind, ExitReason, ExpiryReason, Harness, Replay, SessionOptions, SessionRef,
    SessionState, StoreChoice, TurnOptions, TurnStatus,
};
use agent_exec::LocalExec;
use agent_provider_pi::{PiOptions, PiProvider};
use agent_store_memory::MemoryStore;
use agent_testkit::events::{names, terminal as end};
use agent_testkit::fake_cli::{ExpectKind, FakeCli, FakeCliEnv, FakeScript, InterruptMode};
use agent_testkit::recording::RecordingExec;
use serde_json::json;
use tokio::time::Instant;

const STARTUP: Duration = Duration::from_millis(3000);
const SHORT_STARTUP: Duration = Duration::from_millis(800);
const TURN_START: Duration = Duration::from_millis(1000);
const COMMAND: Duration = Duration::from_millis(500);
const FINALIZATION: Duration = Duration::from_millis(500);
const IDLE: Duration = Duration::from_secs(5);
const GONE_DEADLINE: Duration = Duration::from_secs(3);

struct Case {
    env: FakeCliEnv,
    exec: Arc<RecordingExec>,
    harness: Harness,
}

impl Case {
    fn new(script: FakeScript) -> Case {
        let env = FakeCliEnv::new(FakeCli::Pi, &script).unwrap_or_else(|e| panic!("{e}"));
        let exec = Arc::new(RecordingExec::without_handles(Arc::new(LocalExec::new())));
        let harness = Harness::builder()
            .provider(PiProvider::new())
            .exec(Arc::clone(&exec) as Arc<dyn Exec>)
            .store(StoreChoice::Custom(Arc::new(MemoryStore::new())))
            .build()
            .expect("harness");
        Case { env, exec, harness }
    }

    fn options(&self) -> SessionOptions {
        self.env
            .session_options()
            .provider_option(PiOptions::new().binary(self.env.program()).max_line_bytes(64 * 1024))
            .startup_timeout(STARTUP)
            .turn_start_timeout(TURN_START)
            .provider_command_timeout(COMMAND)
            .startup_finalization_timeout(FINALIZATION)
    }

    async fn session(&self) -> SessionRef {
        self.harness.start_session("pi", self.options()).await.expect("session starts")
    }

    /// Runs a turn, watching the session from before it starts; returns the turn's events.
    async fn run(&self, session: &SessionRef, prompt: &str) -> Vec<Arc<Event>> {
        let mut events = self.harness.subscribe(session, Replay::Latest).await.expect("subscribe");
        let turn = self.harness.start_turn(session, prompt, TurnOptions::new()).await.expect("turn recorded");
        let mut seen = Vec::new();
        loop {
            let next = tokio::time::timeout(IDLE, events.next()).await;
            let next = next.unwrap_or_else(|_| panic!("no event within {IDLE:?}; events: {}", names(&seen)));
            let Some(Ok(event)) = next else { panic!("the session's events ended: {}", names(&seen)) };
            if event.turn_id.as_ref() != Some(&turn.id) {
                continue;
            }
            let done = event.is_terminal();
            seen.push(event);
            if done {
                return seen;
            }
        }
    }

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
        tokio::time::timeout(IDLE, found).await.expect("the session event came")
    }

    async fn assert_no_process_left(&self) {
        let spawned = self.exec.spawned();
        assert!(!spawned.is_empty(), "the provider started no process");
        let deadline = Instant::now() + GONE_DEADLINE;
        for process in spawned {
            while process.is_running() {
                assert!(Instant::now() < deadline, "`{}` outlived its session", process.argv());
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }

    async fn finish(self) {
        for session in self.harness.list_sessions() {
            self.harness.stop_session(&session, true).await.expect("forced stop");
        }
        self.assert_no_process_left().await;
    }
}

async fn retired(case: &Case, session: &SessionRef, because: &str) {
    let monitor = case.harness.monitor(session).await;
    let Ok(monitor) = monitor else { return };
    match tokio::time::timeout(IDLE, monitor).await.expect("the session ends") {
        ExitReason::Retired { reason } => assert!(reason.contains(because), "{reason}"),
        other => panic!("expected the session to retire, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_before_the_get_state_reply_fails_start_session() {
    let script = FakeScript::new().expect(ExpectKind::Handshake).stderr("fake-pi: models.json is broken").exit(3);
    let case = Case::new(script);
    let started = case.harness.start_session("pi", case.options()).await;
    let Err(Error::ProviderUnavailable { reason, .. }) = started else { panic!("got {started:?}") };
    assert!(reason.contains(&format!("exited during startup ({})", ExitStatus::code(3))), "{reason}");
    assert!(reason.contains("models.json is broken"), "{reason}");
    case.assert_no_process_left().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hang_before_the_get_state_reply_times_out_start_session() {
    let case = Case::new(FakeScript::new().expect(ExpectKind::Handshake).hang());
    let started = case.harness.start_session("pi", case.options().startup_timeout(SHORT_STARTUP)).await;
    assert!(matches!(started, Err(Error::Timeout { .. })), "{started:?}");
    case.assert_no_process_left().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_after_the_handshake_makes_the_session_unavailable() {
    let case = Case::new(FakeScript::new().handshake().exit_after_the_start(5));
    let session = case.session().await;
    let down = case.session_event(&session, |e| matches!(e.kind, EventKind::TransportError { .. })).await;
    assert!(
        matches!(&down.kind, EventKind::TransportError { reason } if *reason == format!("pi exited ({})", ExitStatus::code(5))),
        "{:?}",
        down.kind
    );
    case.assert_no_process_left().await;
    assert_eq!(case.harness.status(&session).await.unwrap().status, SessionState::Unavailable);
    case.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_before_the_prompt_reply_fails_the_turn_and_retires_the_session() {
    let case = Case::new(FakeScript::new().handshake().expect(ExpectKind::TurnStart).stderr("dying").exit(6));
    let session = case.session().await;
    let events = case.run(&session, "hello").await;
    assert_eq!(end(&events).status, TurnStatus::Failed, "{}", names(&events));
    assert!(end(&events).result.reason.as_deref().unwrap_or_default().contains("exited during prompt"));
    retired(&case, &session, "exited during prompt").await;
    case.assert_no_process_left().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_mid_turn_fails_the_turn_with_exit_status_and_stderr() {
    let script =
        FakeScript::new().handshake().turn_start().deltas(["partial ", "answer"]).stderr("out of memory").exit(137);
    let case = Case::new(script);
    let session = case.session().await;
    let events = case.run(&session, "hello").await;
    let end = end(&events);
    assert_eq!(end.status, TurnStatus::Failed, "{}", names(&events));
    assert_eq!(end.result.exit_status, Some(ExitStatus::code(137)));
    assert_eq!(end.result.ended_by, Some(EndCause::TransportLost));
    assert_eq!(end.result.stderr_tail.as_deref(), Some("out of memory"));
    case.session_event(&session, |e| matches!(e.kind, EventKind::TransportError { .. })).await;
    case.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_while_a_dialog_is_pending_expires_it_and_fails_the_turn() {
    let dialog = json!({"type": "extension_ui_request", "id": "d-1", "method": "confirm", "title": "Allow bash?", "message": "rm -rf /"});
    let case = Case::new(FakeScript::new().handshake().turn_start().send(dialog).sleep(200).exit(2));
    let session = case.session().await;
    let events = case.run(&session, "hello").await;
    let created = events.iter().position(|e| e.type_name() == "request_created").expect("a request");
    let expired = events
        .iter()
        .position(|e| matches!(e.kind, EventKind::RequestExpired { reason: ExpiryReason::TurnEnded, .. }))
        .unwrap_or_else(|| panic!("the request expires with the turn: {}", names(&events)));
    assert!(created < expired);
    assert_eq!(end(&events).status, TurnStatus::Failed);
    case.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_prompt_is_rejected_and_the_session_goes_on() {
    let script = FakeScript::new()
        .handshake()
        .expect(ExpectKind::TurnStart)
        .reply_error("Agent is already processing.")
        .turn_start()
        .deltas(["fine"])
        .complete();
    let case = Case::new(script);
    let session = case.session().await;
    let refused = case.run(&session, "first").await;
    assert_eq!(end(&refused).status, TurnStatus::Failed, "{}", names(&refused));
    assert!(end(&refused).result.reason.as_deref().unwrap_or_default().contains("Agent is already processing"));
    let next = case.run(&session, "second").await;
    assert_eq!(end(&next).status, TurnStatus::Completed, "{}", names(&next));
    case.finish().await;
}

/// `PiOptions` apply to the session (its command line): given to a turn they would be ignored,
/// so the turn is refused before it is recorded and the session takes the next one as its first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_options_given_to_a_turn_are_refused_before_it_is_recorded() {
    let script = FakeScript::new().handshake().turn_start().deltas(["fine"]).complete();
    let case = Case::new(script);
    let session = case.session().await;
    let options = TurnOptions::new().provider_option(PiOptions::new().arg("--no-tools"));
    let refused = case.harness.start_turn(&session, "first", options).await;
    match refused {
        Err(Error::InvalidOption { option: "provider_options", reason }) => {
            assert!(reason.contains("PiOptions") && reason.contains("whole session"), "{reason}")
        }
        other => panic!("expected InvalidOption(provider_options), got {other:?}"),
    }
    let status = case.harness.status(&session).await.expect("status");
    assert!(status.status == SessionState::Idle && status.current_turn.is_none(), "{status:?}");
    let next = case.run(&session, "second").await;
    assert_eq!(end(&next).status, TurnStatus::Completed, "{}", names(&next));
    let mut events = case.harness.subscribe(&session, Replay::Start).await.expect("subscribe");
    let mut turns = std::collections::BTreeSet::new();
    while let Ok(Some(event)) = tokio::time::timeout(Duration::from_millis(200), events.next()).await {
        turns.extend(event.expect("event").turn_id.clone());
    }
    assert_eq!(turns.len(), 1, "only the second turn was recorded: {turns:?}");
    case.finish().await;
}

/// pi quoting a secret of the session in a refusal (here a path, which is no credential and
/// so not redacted from stdout as such): the turn's reason has it redacted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_quoting_a_secret_has_it_redacted() {
    const MOUNT: &str = "/srv/private-mount-01";
    let script = FakeScript::new()
        .handshake()
        .expect(ExpectKind::TurnStart)
        .reply_error(format!("cannot read {MOUNT}/prompt.md"))
        .turn_start()
        .deltas(["fine"])
        .complete();
    let case = Case::new(script);
    let session = case.harness.start_session("pi", case.options().env("PROMPT_ROOT", MOUNT)).await.expect("starts");
    let refused = case.run(&session, "first").await;
    let reason = end(&refused).result.reason.clone().unwrap_or_default();
    assert!(reason.contains("cannot read [redacted]/prompt.md") && !reason.contains(MOUNT), "{reason}");
    case.finish().await;
}

/// A CLI that writes garbage without end makes a few dozen warnings, not one per line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_garbage_lines_is_warned_of_a_few_times_and_the_turn_completes() {
    let script = (0..1000).fold(FakeScript::new().handshake().turn_start(), |script, _| script.garbage());
    let case = Case::new(script.deltas(["still ", "here"]).complete());
    let session = case.session().await;
    let events = case.run(&session, "hello").await;
    assert_eq!(end(&events).status, TurnStatus::Completed, "{}", names(&events));
    let warned = events.iter().filter(|e| matches!(e.kind, EventKind::Warning { .. })).count();
    assert_eq!(warned, 32 + 4, "the first 32, then at 64, 128, 256 and 512 lines");
    assert_eq!(end(&events).result.text.as_deref(), Some("still here"));
    case.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_and_over_long_lines_are_warnings_and_the_turn_completes() {
    let script = FakeScript::new()
        .handshake()
        .turn_start()
        .garbage()
        .huge_line(200 * 1024)
        .deltas(["still ", "here"])
        .complete();
    let case = Case::new(script);
    let session = case.session().await;
    let events = case.run(&session, "hello").await;
    assert_eq!(end(&events).status, TurnStatus::Completed, "{}", names(&events));
    let warnings: Vec<String> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Warning { message } => Some(message.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(
        warnings[0].contains("not a JSON frame") && warnings[1].contains("over the 65536-byte limit"),
        "{warnings:?}"
    );
    assert_eq!(end(&events).result.text.as_deref(), Some("still here"));
    case.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_with_fields_of_other_types_keeps_the_rest_and_still_ends_the_turn() {
    let script = FakeScript::new()
        .handshake()
        .turn_start()
        .deltas(["done"])
        .send(json!({"type": "agent_end", "messages": [], "willRetry": false}))
        // A newer pi: `willRetry` a string where a boolean was expected.
        .send(json!({"type": "agent_settled", "aborted": false, "willRetry": "later"}))
        .stall();
    let case = Case::new(script);
    let session = case.session().await;
    let events = case.run(&session, "hello").await;
    assert_eq!(end(&events).status, TurnStatus::Completed, "{}", names(&events));
    let warnings: Vec<&str> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Warning { message } => Some(message.as_str()),
            _ => None,
        })
        .collect();
    assert!(
        warnings.iter().any(|w| w.contains("`agent_settled` frame has fields of types") && w.contains("(willRetry)")),
        "{warnings:?}"
    );
    case.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_model_call_whose_error_is_an_object_fails_the_turn() {
    let message = json!({"role": "assistant", "content": [], "stopReason": "error",
        "errorMessage": {"status": 529, "message": "overloaded"}});
    let script = FakeScript::new()
        .handshake()
        .turn_start()
        .send(json!({"type": "message_end", "message": message}))
        .send(json!({"type": "agent_end", "messages": [], "willRetry": false}))
        .send(json!({"type": "agent_settled", "aborted": false}))
        .stall();
    let case = Case::new(script);
    let session = case.session().await;
    let events = case.run(&session, "hello").await;
    let end = end(&events);
    assert_eq!(end.status, TurnStatus::Failed, "{}", names(&events));
    assert!(end.result.reason.as_deref().is_some_and(|r| r.contains("overloaded")), "{:?}", end.result);
    // Said as codex and claude say it, just before the turn's end.
    let said = events.iter().rev().nth(1).map(|e| &e.kind);
    let Some(EventKind::ProviderError { message, will_retry: Some(false), .. }) = said else {
        panic!("a provider_error before the end: {}", names(&events))
    };
    assert!(message.contains("overloaded"), "{message}");
    case.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_and_out_of_order_frames_end_each_turn_once() {
    let script = FakeScript::new()
        .handshake()
        .turn_start()
        .deltas(["one"])
        .complete()
        .duplicate(2)
        .turn_start()
        .hold()
        .deltas(["two"])
        .complete()
        .release_reversed();
    let case = Case::new(script);
    let session = case.session().await;
    let first = case.run(&session, "first").await;
    assert_eq!(end(&first).status, TurnStatus::Completed);
    let second = case.run(&session, "second").await;
    assert_eq!(second.iter().filter(|e| e.is_terminal()).count(), 1);
    assert!(end(&second).status == TurnStatus::Completed, "{}", names(&second));
    case.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abort_acknowledged_without_an_end_retires_the_session() {
    let script =
        FakeScript::new().handshake().interrupts(InterruptMode::AckOnly).turn_start().deltas(["working"]).stall();
    let case = Case::new(script);
    let session = case.session().await;
    let turn = case.harness.start_turn(&session, "work", TurnOptions::new()).await.expect("turn");
    let mut stream = case.harness.stream(&turn, Replay::Start, Some(IDLE)).await.expect("stream");
    while let Some(event) = stream.next().await {
        if matches!(event.expect("event").kind, EventKind::MessageDelta { .. }) {
            break;
        }
    }
    let _ = case.harness.cancel(&turn).await;
    let mut last = None;
    while let Some(event) = tokio::time::timeout(IDLE, stream.next()).await.expect("an end") {
        let event = event.expect("event");
        if event.is_terminal() {
            last = Some(event);
            break;
        }
    }
    let last = last.expect("a terminal event");
    assert_eq!(last.kind.terminal_end().map(|e| e.status), Some(TurnStatus::Failed), "{:?}", last.kind);
    retired(&case, &session, "").await;
    case.assert_no_process_left().await;
}

/// A dialog over `max_line_bytes` (an editor with a large text to start from) cannot be read
/// whole, but its first or last bytes name it: it is dismissed at once with a warning, where pi
/// waited for its answer for good. An over-long reply to a command of ours fails that command
/// at once, where its caller waited out its deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_over_long_dialog_is_dismissed_and_an_over_long_reply_fails_its_command() {
    let dialog = json!({"type": "extension_ui_request", "id": "d-long", "method": "editor", "title": "Edit",
        "prefill": "x".repeat(70 * 1024)});
    let script = FakeScript::new()
        .handshake()
        .turn_start()
        .send(dialog)
        .expect_match(json!({"type": "extension_ui_response", "id": "d-long", "cancelled": true}))
        .deltas(["after"])
        .complete();
    let case = Case::new(script);
    let session = case.session().await;
    let events = case.run(&session, "hello").await;
    assert_eq!(end(&events).status, TurnStatus::Completed, "{}", names(&events));
    let warned = events.iter().any(|e| {
        matches!(&e.kind, EventKind::Warning { message } if message.contains("editor") && message.contains("dismissed"))
    });
    assert!(warned, "{}", names(&events));
    case.finish().await;

    let case =
        Case::new(FakeScript::new().expect(ExpectKind::Handshake).reply(json!({"big": "x".repeat(70 * 1024)})).stall());
    let started = Instant::now();
    let refused = case.harness.start_session("pi", case.options().startup_timeout(Duration::from_secs(20))).await;
    let refused = refused.expect_err("the reply cannot be read");
    assert!(refused.to_string().contains("65536-byte limit"), "{refused}");
    assert!(started.elapsed() < Duration::from_secs(5), "at once, not at a deadline: {:?}", started.elapsed());
    case.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dialog_while_no_turn_runs_is_dismissed() {
    let dialog =
        json!({"type": "extension_ui_request", "id": "idle-1", "method": "select", "title": "Pick", "options": ["a"]});
    let script = FakeScript::new()
        .handshake()
        .send(dialog)
        .expect_match(json!({"type": "extension_ui_response", "id": "idle-1", "cancelled": true}))
        .turn_start()
        .deltas(["after"])
        .complete();
    let case = Case::new(script);
    let session = case.session().await;
    let events = case.run(&session, "hello").await;
    assert_eq!(end(&events).status, TurnStatus::Completed, "the fake saw the dismissal: {}", names(&events));
    assert!(!events.iter().any(|e| e.type_name() == "request_created"));
    case.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pi_older_than_the_minimum_is_refused_after_the_version_probe() {
    let case = Case::new(FakeScript::new().handshake());
    let options = case.options().env(agent_testkit::fake_cli::VERSION_ENV, "0.50.2");
    let started = case.harness.start_session("pi", options).await;
    let Err(Error::ProviderUnavailable { reason, .. }) = started else { panic!("got {started:?}") };
    assert!(reason.contains("0.50.2 is older than the minimum supported 0.73.1"), "{reason}");
    let spawned = case.exec.commands();
    assert_eq!(spawned.len(), 1, "only the version probe ran");
    assert!(spawned[0].args.iter().any(|a| a == "--version"));
    case.assert_no_process_left().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_auth_guard_refuses_keys_under_subscription_before_spawning() {
    let case = Case::new(FakeScript::new().handshake());
    let options = case.options().auth(agent_core::AuthMode::Subscription).env("OPENAI_API_KEY", "sk-very-secret");
    let started = case.harness.start_session("pi", options).await;
    let Err(Error::AuthGuard { reason }) = started else { panic!("got {started:?}") };
    assert!(reason.contains("OPENAI_API_KEY") && !reason.contains("sk-very-secret"), "{reason}");
    assert!(case.exec.commands().is_empty(), "nothing was spawned");
}

/// pi given a skill path that is not there starts without the skill (a diagnostic nobody sees):
/// the session is refused before anything runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_skill_is_refused_before_spawning() {
    let case = Case::new(FakeScript::new().handshake());
    let missing = std::env::temp_dir().join("agent-harness-no-such-skill").join("review");
    let options = case.options().skill(agent_core::Skill::new("review", &missing));
    let started = case.harness.start_session("pi", options).await;
    let Err(Error::InvalidOption { option: "skills", reason }) = started else { panic!("got {started:?}") };
    assert!(reason.contains("skill `review`") && reason.contains("does not exist"), "{reason}");
    assert!(case.exec.commands().is_empty(), "nothing was spawned");
    assert!(case.harness.list_sessions().is_empty());
}
