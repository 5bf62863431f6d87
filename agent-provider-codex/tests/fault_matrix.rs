//! The fault matrix: the testkit's `fake-codex` misbehaving at every protocol phase, driven
//! through the public `Harness` API with the real `LocalExec` and a `MemoryStore`.
//!
//! Every case asserts the outcome (the turn's terminal event, or the `start_session` error) and
//! that every process the provider started (the `--version` probe and the app-server) is gone
//! from `/proc` once its session ended. The fake binaries come from
//! `cargo build -p agent-testkit --bins`; a missing or stale build fails with that command.
//!
//! | fault | outcome |
//! |---|---|
//! | exit before the `initialize` / `thread/start` reply | `start_session`: `ProviderUnavailable` with exit status and stderr |
//! | exit after the handshake | session-level `transport_error`; the session is `unavailable` |
//! | exit before the `turn/start` reply | `turn_failed` (admission uncertain, with exit status and stderr); session retired |
//! | exit mid-turn, or exit 0 without a terminal event | `turn_failed` with `exit_status`, `stderr_tail`, partial text (at most `max_line_bytes` of it, else a `warning`); `transport_error` |
//! | exit after the terminal event | the turn stays `turn_completed`; session-level `transport_error` |
//! | hang before the `initialize` / `thread/start` reply | `start_session`: `Timeout` at 90 % of `startup_timeout` |
//! | `turn/interrupt` refused before `turn/started` (codex's window after answering `turn/start`) | sent again after `turn/started`: `turn_interrupted`; the session stays usable |
//! | hang mid-turn, then cancel | `turn_failed` ("cancellation failed"); session retired |
//! | interrupt acknowledged, no terminal event | `turn_failed` ("cancellation failed"); session retired |
//! | no terminal event, then silence | nothing ends it by itself: the stream's idle timeout fires and the turn keeps running until the caller cancels (as above) or force-stops (`turn_interrupted`) |
//! | garbage line | `warning`; the turn completes |
//! | 10 MiB line | a `provider_event` holding it (default 16 MiB cap), or a `warning` over a smaller cap; the turn completes |
//! | a final message over the cap (its delta, `item/completed` and `turn/completed` each too long) | `warning`s, then `turn_failed` naming the limit; the session goes on |
//! | stderr flood | drained; the turn completes; a later exit reports the last 40 lines |
//! | duplicate frames | a duplicated terminal frame is dropped as stale; one terminal event per turn |
//! | out-of-order frames | `turn/completed` first ends the turn (text from its items); later frames are dropped |
//! | exit while a request is pending | `request_expired`, then `turn_failed` |
//! | stdin closed early | `turn/start` / `turn/interrupt` is swallowed (times out) or fails with EPIPE: `turn_failed`; session retired |
//! | slow reader | the turn waits for the reader and completes; past the deadline, `turn_failed` and retired |

use std::sync::Arc;
use std::time::Duration;

use agent_core::exec::{Exec, ExitStatus};
use agent_core::{
    AuthMode, EndCause, Error, Event, EventKind, ExitReason, ExpiryReason, Harness, Replay, Response, SessionMonitor,
    SessionOptions, SessionRef, SessionState, StoreChoice, StreamError, TurnEnd, TurnOptions, TurnStatus,
};
use agent_exec::LocalExec;
use agent_provider_codex::{CodexOptions, CodexProvider};
use agent_store_memory::MemoryStore;
use agent_testkit::events::{Watched, names, sole_terminal as end};
use agent_testkit::fake_cli::{Direction, ExpectKind, FakeCli, FakeCliEnv, FakeScript, InterruptMode};
use agent_testkit::recording::RecordingExec;
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::time::Instant;

/// `startup_timeout` of the cases (the adapter's own deadline is 90 % of it, see
/// [`adapter_deadline`]).
const STARTUP: Duration = Duration::from_millis(1500);
/// `startup_timeout` of the cases that hang during the handshake.
const SHORT_STARTUP: Duration = Duration::from_millis(600);
/// `turn_start_timeout`.
const TURN_START: Duration = Duration::from_millis(1000);
/// `provider_command_timeout`.
const COMMAND: Duration = Duration::from_millis(500);
/// `startup_finalization_timeout`, which also bounds the provider's close: a CLI that ignores
/// the end of its stdin is killed once it passes.
const FINALIZATION: Duration = Duration::from_millis(500);
/// The longest wait for the next event before a case fails as hung.
const IDLE: Duration = Duration::from_secs(5);
/// How long an ended session's processes may take to disappear from `/proc`.
const GONE_DEADLINE: Duration = Duration::from_secs(3);
/// How often `/proc` is read while waiting for a process to disappear.
const GONE_POLL: Duration = Duration::from_millis(10);
/// Bytes of one line of fake-codex's stderr flood (`fake-cli stderr flood line 00000001 x…\n`).
const FLOOD_LINE_BYTES: usize = 101;

/// One case: a fake-codex script in its directory, and a harness spawning through a
/// `LocalExec` that notes every child. The recorder keeps no handle, so the provider alone
/// decides how long its processes live.
struct Case {
    env: FakeCliEnv,
    exec: Arc<RecordingExec>,
    harness: Harness,
}

impl Case {
    fn new(script: FakeScript) -> Case {
        let env = FakeCliEnv::new(FakeCli::Codex, &script).unwrap_or_else(|e| panic!("{e}"));
        let exec = Arc::new(RecordingExec::without_handles(Arc::new(LocalExec::new())));
        let harness = Harness::builder()
            .provider(CodexProvider::new())
            .exec(Arc::clone(&exec) as Arc<dyn Exec>)
            .store(StoreChoice::Custom(Arc::new(MemoryStore::new())))
            .build()
            .expect("harness");
        Case { env, exec, harness }
    }

    fn options(&self) -> SessionOptions {
        self.options_with(CodexOptions::new())
    }

    fn options_with(&self, codex: CodexOptions) -> SessionOptions {
        self.env
            .session_options()
            .provider_option(codex.binary(self.env.program()))
            .startup_timeout(STARTUP)
            .turn_start_timeout(TURN_START)
            .provider_command_timeout(COMMAND)
            .startup_finalization_timeout(FINALIZATION)
    }

    async fn session(&self) -> SessionRef {
        self.session_with(self.options()).await
    }

    async fn session_with(&self, options: SessionOptions) -> SessionRef {
        self.harness.start_session("codex", options).await.expect("session starts")
    }

    /// Starts a turn, watching the session from before it starts.
    async fn watch(&self, session: &SessionRef, prompt: &str) -> Watched {
        let events = self.harness.subscribe(session, Replay::Latest).await.expect("subscribe");
        let turn = self.harness.start_turn(session, prompt, TurnOptions::new()).await.expect("turn recorded");
        Watched::new(turn, events, IDLE)
    }

    /// Starts a turn and returns its events up to the terminal one.
    async fn run(&self, session: &SessionRef, prompt: &str) -> Vec<Arc<Event>> {
        self.watch(session, prompt).await.into_events().await
    }

    /// Starts a turn, opens the script's [`gate`] once the turn started, and returns the turn's
    /// events up to the terminal one.
    ///
    /// The gate pins the order of events: a fault that follows it happens after the runtime
    /// admitted the turn, so each case asserts one outcome rather than one of two orderings.
    async fn run_gated(&self, session: &SessionRef, prompt: &str) -> Vec<Arc<Event>> {
        let watched = self.watch(session, prompt).await;
        self.open_gate(watched).await
    }

    /// Opens the script's [`gate`] once the watched turn started; returns the turn's events up
    /// to the terminal one.
    async fn open_gate(&self, mut watched: Watched) -> Vec<Arc<Event>> {
        watched.until(|e| matches!(e.kind, EventKind::TurnStarted { .. })).await;
        // The steer only has to reach the fake. A fault right after the gate can overtake the
        // steer's answer, which then says the transport went down.
        match self.harness.steer(watched.turn(), "go on").await {
            Ok(()) | Err(Error::SessionUnavailable { .. }) => {}
            Err(other) => panic!("the gate did not open: {other}"),
        }
        watched.into_events().await
    }

    /// Starts a turn and waits until it streams text.
    async fn streaming_turn(&self, session: &SessionRef) -> Watched {
        let mut watched = self.watch(session, "work").await;
        watched.until(|e| matches!(e.kind, EventKind::MessageDelta { .. })).await;
        watched
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

    /// Every event the session published so far.
    async fn session_log(&self, session: &SessionRef) -> Vec<Arc<Event>> {
        let last = self.harness.status(session).await.expect("status").last_seq;
        let mut events = self.harness.subscribe(session, Replay::Start).await.expect("subscribe");
        let mut log = Vec::new();
        while log.last().is_none_or(|e: &Arc<Event>| e.seq < last) {
            let next = tokio::time::timeout(IDLE, events.next()).await.expect("replay");
            log.push(next.expect("an event").expect("no lag"));
        }
        log
    }

    /// A live session and its monitor (taken at once: a session that ended has none).
    async fn monitored_session(&self) -> (SessionRef, SessionMonitor) {
        let session = self.session().await;
        let monitor = self.harness.monitor(&session).await.expect("live session");
        (session, monitor)
    }

    /// Asserts that every process the provider started has exited and been reaped.
    async fn assert_no_process_left(&self) {
        let spawned = self.exec.spawned();
        assert!(!spawned.is_empty(), "the provider started no process");
        let deadline = Instant::now() + GONE_DEADLINE;
        for process in spawned {
            let pid = process.pid().expect("a local child has a PID");
            while process.is_running() {
                assert!(
                    Instant::now() < deadline,
                    "process {pid} (`{}`) is still in /proc {GONE_DEADLINE:?} after its session ended",
                    process.argv()
                );
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

#[track_caller]
fn reason(end: &TurnEnd) -> &str {
    end.result.reason.as_deref().unwrap_or_else(|| panic!("a reason: {end:?}"))
}

/// Asserts that the turn failed because the CLI exited with `status` before ending it.
#[track_caller]
fn assert_exited(end: &TurnEnd, status: ExitStatus) {
    assert_eq!(end.status, TurnStatus::Failed, "{end:?}");
    assert_eq!(end.result.exit_status, Some(status), "{end:?}");
    assert_eq!(end.result.ended_by, Some(EndCause::TransportLost), "{end:?}");
    assert!(end.result.reason.is_some(), "a failed turn says why: {end:?}");
}

/// The adapter's own deadline for a provider command: 90 % of the runtime's `timeout`, so that
/// the adapter reports first.
fn adapter_deadline(timeout: Duration) -> Duration {
    timeout * 9 / 10
}

/// What a retirement reason says of a provider command that passed the adapter's deadline.
/// Neither the turn's result nor the session's exit reason carries the error itself, only its
/// text, so the expected text is the typed error's.
fn timed_out(operation: &'static str, runtime_timeout: Duration) -> String {
    Error::Timeout { operation, timeout: adapter_deadline(runtime_timeout) }.to_string()
}

fn count(events: &[Arc<Event>], name: &str) -> usize {
    events.iter().filter(|e| e.type_name() == name).count()
}

fn warnings(events: &[Arc<Event>]) -> Vec<&str> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Warning { message } => Some(message.as_str()),
            _ => None,
        })
        .collect()
}

fn deltas(events: &[Arc<Event>]) -> String {
    agent_testkit::events::delta_texts(events).concat()
}

/// The `initialize` result, for scripts that answer it by hand.
fn initialize_result() -> Value {
    json!({"userAgent": "fake-codex/0.171.0", "codexHome": "/nonexistent", "platformFamily": "unix", "platformOs": "linux"})
}

/// A handshake whose `thread/start` reply comes after the steps `before_reply` adds, so that a
/// fault they set up is in place before the client can send anything else.
fn handshake_with(before_reply: impl FnOnce(FakeScript) -> FakeScript) -> FakeScript {
    let script = FakeScript::new()
        .expect(ExpectKind::Handshake)
        .reply(initialize_result())
        .expect_match(json!({"method": "thread/start"}));
    before_reply(script).reply(json!({"thread": {"id": "${session_id}"}}))
}

/// The handshake, then a reader that takes one more line (the first turn's request) and stops
/// reading for `ms`.
///
/// `pause_reading` starts after the line being read, so the reader must be back inside its
/// read when the step runs (or the pause comes before that line), and the client must not have
/// written the next line yet. The pause is set before the `thread/start` reply, so the client
/// waits; nothing tells the script when the reader thread is back in its read, so it gives it
/// 50 ms.
fn slow_reader(ms: u64) -> FakeScript {
    handshake_with(|script| script.sleep(50).pause_reading(ms))
}

/// `script` then waits for the client's `turn/steer` and accepts it: the steps after it run
/// once the runtime admitted the turn (see [`Case::run_gated`]).
fn gate(script: FakeScript) -> FakeScript {
    script.expect_match(json!({"method": "turn/steer"})).reply(json!({"turnId": "${turn_id}"}))
}

/// Waits for the session to end and asserts that it retired `because` of something.
async fn assert_retired(monitor: SessionMonitor, because: &str) {
    match tokio::time::timeout(IDLE, monitor).await.expect("the session ends") {
        ExitReason::Retired { reason } => assert!(reason.contains(because), "{reason}"),
        other => panic!("expected the session to retire, got {other:?}"),
    }
}

// ----- exits at each protocol phase --------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_before_the_initialize_reply_fails_start_session() {
    let script = FakeScript::new().expect(ExpectKind::Handshake).stderr("fake-codex: config is broken").exit(3);
    let case = Case::new(script);
    let started = case.harness.start_session("codex", case.options()).await;
    let Err(Error::ProviderUnavailable { reason, .. }) = started else {
        panic!("expected ProviderUnavailable, got {started:?}")
    };
    // The error carries no exit status of its own: the reason says it.
    assert!(reason.contains(&format!("exited during initialize ({})", ExitStatus::code(3))), "{reason}");
    assert!(reason.contains("fake-codex: config is broken"), "the stderr tail is reported: {reason}");
    assert!(case.harness.list_sessions().is_empty());
    case.assert_no_process_left().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_before_the_thread_reply_fails_start_session() {
    let script = FakeScript::new()
        .expect(ExpectKind::Handshake)
        .reply(initialize_result())
        .expect_match(json!({"method": "thread/start"}))
        .exit(4);
    let case = Case::new(script);
    let started = case.harness.start_session("codex", case.options()).await;
    let Err(Error::ProviderUnavailable { reason, .. }) = started else {
        panic!("expected ProviderUnavailable, got {started:?}")
    };
    assert!(reason.contains(&format!("exited during thread/start ({})", ExitStatus::code(4))), "{reason}");
    case.assert_no_process_left().await;
}

/// codex refusing `thread/start` quotes the config value it could not take: the error has the
/// value redacted, whether its key names a credential (`…env.TOKEN`) or not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_quoting_a_config_value_has_it_redacted() {
    const TOKEN: &str = "sk-live-config-0123456789";
    const PATH: &str = "/srv/secret-mount-01";
    let script = FakeScript::new()
        .expect(ExpectKind::Handshake)
        .reply(initialize_result())
        .expect_match(json!({"method": "thread/start"}))
        .reply_error(format!("failed to load configuration: invalid value \"TOKEN={TOKEN}\" under {PATH}"));
    let case = Case::new(script);
    let codex = CodexOptions::new()
        .config("mcp_servers.x.env.TOKEN", format!("\"{TOKEN}\""))
        .config("sandbox_workspace_write.writable_roots", format!("[\"{PATH}\"]"));
    let started = case.harness.start_session("codex", case.options_with(codex)).await;
    let Err(Error::ProviderUnavailable { reason, .. }) = started else {
        panic!("expected ProviderUnavailable, got {started:?}")
    };
    assert_eq!(
        reason,
        "codex refused thread/start: failed to load configuration: invalid value \"TOKEN=[redacted]\" under [redacted]"
    );
    case.assert_no_process_left().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_after_the_handshake_makes_the_session_unavailable() {
    let case = Case::new(FakeScript::new().handshake().exit_after_the_start(5));
    let session = case.session().await;
    let down = case.session_event(&session, |e| matches!(e.kind, EventKind::TransportError { .. })).await;
    assert!(
        matches!(&down.kind, EventKind::TransportError { reason }
            if *reason == format!("codex app-server exited ({})", ExitStatus::code(5))),
        "{:?}",
        down.kind
    );
    assert_eq!(down.turn_id, None, "no turn was running");
    // The process is gone before anyone stops the session.
    case.assert_no_process_left().await;
    assert_eq!(case.harness.status(&session).await.unwrap().status, SessionState::Unavailable);
    let next = case.harness.start_turn(&session, "hello?", TurnOptions::new()).await;
    assert!(matches!(next, Err(Error::SessionUnavailable { .. })), "{next:?}");
    case.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_before_the_turn_start_reply_fails_the_turn_and_retires_the_session() {
    let case = Case::new(FakeScript::new().handshake().expect(ExpectKind::TurnStart).stderr("dying").exit(6));
    let (session, monitor) = case.monitored_session().await;
    let events = case.run(&session, "hello").await;
    let end = end(&events);
    assert_eq!(end.status, TurnStatus::Failed, "{}", names(&events));
    // For a turn that was never admitted, only the reason tells the exit and the stderr tail.
    assert_eq!(
        reason(end),
        format!(
            "turn admission outcome is uncertain: provider `codex` transport failed: codex app-server exited during \
             turn/start ({}); stderr:\ndying",
            ExitStatus::code(6)
        )
    );
    assert_retired(monitor, "exited during turn/start").await;
    case.assert_no_process_left().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_mid_turn_fails_the_turn_with_exit_status_and_stderr() {
    let script = gate(FakeScript::new().handshake().turn_start())
        .deltas(["partial ", "answer"])
        .stderr("thread 'main' panicked: out of memory")
        .exit(137);
    let case = Case::new(script);
    let session = case.session().await;
    let events = case.run_gated(&session, "hello").await;
    let end = end(&events);
    assert_exited(end, ExitStatus::code(137));
    assert_eq!(end.result.stderr_tail.as_deref(), Some("thread 'main' panicked: out of memory"));
    assert_eq!(end.result.text.as_deref(), Some("partial answer"), "the partial text is kept");
    let down = case.session_event(&session, |e| matches!(e.kind, EventKind::TransportError { .. })).await;
    assert!(down.seq > events.last().unwrap().seq, "the transport is reported down after the turn failed");
    case.assert_no_process_left().await;
    let next = case.harness.start_turn(&session, "again", TurnOptions::new()).await;
    assert!(matches!(next, Err(Error::SessionUnavailable { .. })), "{next:?}");
    case.finish().await;
}

/// A CLI that prints a credential the session gave it: what reaches the turn's result, the
/// events and the store has it redacted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credential_the_cli_prints_on_stderr_is_redacted_from_what_is_kept() {
    const KEY: &str = "sk-test-0123456789abcdef";
    let script = gate(FakeScript::new().handshake().turn_start())
        .stderr(format!("401 Unauthorized: Incorrect API key provided: {KEY}"))
        .exit(1);
    let case = Case::new(script);
    let options = case.options().auth(AuthMode::Inherit).env("OPENAI_API_KEY", KEY);
    let session = case.session_with(options).await;
    let events = case.run_gated(&session, "hello").await;
    let end = end(&events);
    assert_eq!(end.result.stderr_tail.as_deref(), Some("401 Unauthorized: Incorrect API key provided: [redacted]"));
    let down = case.session_event(&session, |e| matches!(e.kind, EventKind::TransportError { .. })).await;
    let last = down.seq as usize;
    let stored: Vec<_> = case.harness.subscribe(&session, Replay::Start).await.unwrap().take(last).collect().await;
    assert_eq!(stored.len(), last);
    for event in stored {
        let json = serde_json::to_string(&*event.unwrap()).unwrap();
        assert!(!json.contains(KEY), "{json}");
    }
    case.finish().await;
}

/// A CLI whose stdout carries a credential the session gave it (a tool printed `env`, say): the
/// deltas, the turn's text and every stored event have it redacted, whether a line holds it
/// once, twice or as a JSON escape. A value whose name is not a credential's is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credential_the_cli_prints_on_stdout_is_redacted_from_events_and_the_store() {
    const KEY: &str = "sk-test-0123456789abcdef";
    const QUOTED: &str = r#"pass"word\1234"#;
    let echoed = format!("OPENAI_API_KEY={KEY} DB_PASSWORD={QUOTED} {KEY} PROJECT_DIR=/tmp/project-1");
    let script = gate(FakeScript::new().handshake().turn_start()).deltas(["env: ", echoed.as_str()]).complete();
    let case = Case::new(script);
    let options = case
        .options()
        .auth(AuthMode::Inherit)
        .env("OPENAI_API_KEY", KEY)
        .env("DB_PASSWORD", QUOTED)
        .env("PROJECT_DIR", "/tmp/project-1");
    let session = case.session_with(options).await;
    let events = case.run_gated(&session, "hello").await;
    let end = end(&events);
    let text = "env: OPENAI_API_KEY=[redacted] DB_PASSWORD=[redacted] [redacted] PROJECT_DIR=/tmp/project-1";
    assert_eq!(end.result.text.as_deref(), Some(text));
    let last = events.last().unwrap().seq as usize;
    let stored: Vec<_> = case.harness.subscribe(&session, Replay::Start).await.unwrap().take(last).collect().await;
    assert_eq!(stored.len(), last);
    let json: String = stored.into_iter().map(|event| serde_json::to_string(&*event.unwrap()).unwrap()).collect();
    assert!(!json.contains(KEY) && !json.contains("word\\\\1234"), "{json}");
    assert!(json.contains("[redacted]") && json.contains("/tmp/project-1"), "{json}");
    case.finish().await;
}

/// A credential a model quotes comes in pieces, a few characters per delta, no line holding it
/// whole; so may a command's output or a file change's. Codex ends before any of them completes:
/// the deltas published and stored hold none of it together, nor does the text the turn kept of
/// its unfinished message, nor the interrupted tools' output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credential_streamed_in_pieces_is_redacted_from_the_deltas_and_the_partial_text() {
    const KEY: &str = "sk-test-0123456789abcdef";
    let note = |method: &str, mut params: serde_json::Value| {
        params["threadId"] = json!("${in.params.threadId}");
        params["turnId"] = json!("${in.params.expectedTurnId}");
        json!({"method": method, "params": params})
    };
    let command = json!({"type": "commandExecution", "id": "c1", "command": "env", "cwd": "/tmp", "processId": null,
        "source": "agent", "status": "inProgress", "commandActions": [], "aggregatedOutput": null, "exitCode": null});
    let change = json!({"type": "fileChange", "id": "f1", "status": "inProgress",
        "changes": [{"path": "/tmp/x", "kind": {"type": "add"}, "diff": ""}]});
    let message = json!({"type": "agentMessage", "id": "m1", "text": ""});
    let mut script = gate(FakeScript::new().handshake().turn_start());
    for item in [command, change, message] {
        script = script.send(note("item/started", json!({ "item": item })));
    }
    for piece in ["PATH=/bin\nOPENAI_API_KEY=sk-te", "st-0123456789", "abcdef\n"] {
        script = script.send(note("item/commandExecution/outputDelta", json!({"itemId": "c1", "delta": piece})));
        script = script.send(note("item/fileChange/outputDelta", json!({"itemId": "f1", "delta": piece})));
    }
    for piece in ["Your key: ", "sk", "-te", "st-01", "23456789", "abcdef", ", and sk-", "etch"] {
        script = script.send(note("item/agentMessage/delta", json!({"itemId": "m1", "delta": piece})));
    }
    let case = Case::new(script.exit(1));
    let options = case.options().auth(AuthMode::Inherit).env("OPENAI_API_KEY", KEY);
    let session = case.session_with(options).await;
    let events = case.run_gated(&session, "hello").await;
    let streamed = agent_testkit::events::delta_texts(&events).concat();
    assert!(streamed.ends_with("Your key: sk[redacted], and sk-etch"), "{streamed:?}");
    let end = end(&events);
    assert_eq!(end.status, TurnStatus::Failed);
    assert_eq!(
        end.result.text.as_deref(),
        Some("Your key: sk-test-0123456789abcdef, and sk-etch".replace(KEY, "[redacted]").as_str())
    );
    let last = events.last().unwrap().seq as usize;
    let stored: Vec<_> = case.harness.subscribe(&session, Replay::Start).await.unwrap().take(last).collect().await;
    let json: String = stored.into_iter().map(|event| serde_json::to_string(&*event.unwrap()).unwrap()).collect();
    assert!(!json.contains("0123456789") && !json.contains("st-01"), "{json}");
    assert_eq!(json.matches("OPENAI_API_KEY=[redacted]").count(), 2, "both tools' interrupted output: {json}");
    let progress: String = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolProgress { message, .. } => Some(message.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(progress, "PATH=/bin\nOPENAI_API_KEY=[redacted]\n", "the file change's output, as progress");
    case.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_mid_turn_keeps_at_most_max_line_bytes_of_the_partial_text() {
    const LIMIT: usize = 4096;
    // 100 deltas of 64 bytes, each its own, so a cut at the limit shows which were kept. The
    // fake's `item/completed` brings the whole text, in a line over the limit: dropped, it
    // leaves the message open, as a crash before it would.
    let deltas: Vec<String> = (0..100).map(|i| format!("{i:03}{}", "x".repeat(61))).collect();
    let script = gate(FakeScript::new().handshake().turn_start()).deltas(deltas.iter().map(String::as_str)).exit(1);
    let case = Case::new(script);
    let session = case.session_with(case.options_with(CodexOptions::new().max_line_bytes(LIMIT))).await;
    let events = case.run_gated(&session, "hello").await;
    let streamed = events.iter().filter(|e| matches!(e.kind, EventKind::MessageDelta { .. })).count();
    assert_eq!(streamed, 100, "every delta is delivered, whatever is kept of the text");
    let end = end(&events);
    assert_eq!(end.status, TurnStatus::Failed);
    assert_eq!(end.result.text.as_deref(), Some(&deltas.concat()[..LIMIT]), "the first 64 deltas, whole");
    let [dropped, cut] = warnings(&events)[..] else { panic!("{:?}", warnings(&events)) };
    assert!(dropped.starts_with("codex wrote a stdout line of ") && dropped.ends_with("dropped"), "{dropped}");
    assert!(cut.contains("only the first 4096 bytes of its text were kept"), "{cut}");
    case.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_while_an_escaped_process_holds_stdout_fails_the_turn() {
    use std::os::unix::fs::PermissionsExt;

    let case = Case::new(gate(FakeScript::new().handshake().turn_start()).deltas(["half"]).exit(3));
    // codex, wrapped: it leaves a process in a session of its own, out of reach of the group's
    // kill, holding its stdout (the version probe runs the fake alone).
    let dir = case.env.workspace().join("escaping");
    std::fs::create_dir_all(&dir).expect("a directory for the wrapper");
    let (wrapper, pid_file) = (dir.join("codex"), dir.join("sleeper.pid"));
    let script = format!(
        "#!/bin/sh\ncase \"$1\" in --version) exec '{real}' \"$@\";; esac\n\
         setsid sleep 60 2>/dev/null </dev/null &\necho $! > '{pid}'\nexec '{real}' \"$@\"\n",
        real = case.env.program().display(),
        pid = pid_file.display(),
    );
    std::fs::write(&wrapper, script).expect("the wrapper");
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).expect("executable");
    /// Ends the process the wrapper started, by the PID it wrote, however the test ends; says
    /// whether it was still there to end.
    struct Sleeper(std::path::PathBuf);
    impl Sleeper {
        fn end(&self) -> bool {
            let Ok(pid) = std::fs::read_to_string(&self.0) else { return false };
            let killed = std::process::Command::new("kill").args(["-9", pid.trim()]).status();
            killed.is_ok_and(|status| status.success())
        }
    }
    impl Drop for Sleeper {
        fn drop(&mut self) {
            self.end();
        }
    }
    let sleeper = Sleeper(pid_file);
    let session = case.session_with(case.options().provider_option(CodexOptions::new().binary(&wrapper))).await;
    let events = case.run_gated(&session, "hello").await;
    assert!(sleeper.end(), "the sleeper held stdout to the end");
    assert_exited(end(&events), ExitStatus::code(3));
    assert_eq!(end(&events).result.text.as_deref(), Some("half"));
    case.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_terminal_event_then_exit_0_fails_the_turn() {
    let case = Case::new(gate(FakeScript::new().handshake().turn_start()).deltas(["half"]).exit(0));
    let session = case.session().await;
    let events = case.run_gated(&session, "hello").await;
    let end = end(&events);
    // A clean exit without turn/completed is no success.
    assert_exited(end, ExitStatus::code(0));
    assert_eq!(end.result.text.as_deref(), Some("half"));
    case.assert_no_process_left().await;
    case.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_after_the_terminal_event_keeps_the_completed_turn() {
    let case = Case::new(gate(FakeScript::new().handshake().turn_start()).deltas(["done"]).complete().exit(0));
    let session = case.session().await;
    let watched = case.watch(&session, "hello").await;
    let turn = watched.turn().clone();
    let events = case.open_gate(watched).await;
    let end = end(&events);
    assert_eq!(end.status, TurnStatus::Completed, "{}", names(&events));
    assert_eq!(end.result.text.as_deref(), Some("done"));
    let down = case.session_event(&session, |e| matches!(e.kind, EventKind::TransportError { .. })).await;
    assert_eq!(down.turn_id, None, "the exit belongs to no turn");
    assert!(down.seq > events.last().unwrap().seq);
    case.assert_no_process_left().await;
    let outcome = case.harness.await_turn(&turn, Some(IDLE)).await.expect("the turn stays completed");
    assert_eq!(outcome.result.text.as_deref(), Some("done"));
    case.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_while_a_request_is_pending_expires_it_and_fails_the_turn() {
    let request = json!({
        "method": "item/commandExecution/requestApproval", "id": 0,
        "params": {
            "threadId": "${session_id}", "turnId": "${turn_id}", "itemId": "call_pending",
            "command": "touch never.txt", "cwd": "/tmp", "availableDecisions": ["accept", "decline", "cancel"],
        },
    });
    let case = Case::new(gate(FakeScript::new().handshake().turn_start()).send(request).exit(2));
    let session = case.session().await;
    let events = case.run_gated(&session, "hello").await;
    let end = end(&events);
    assert_exited(end, ExitStatus::code(2));
    let created = events.iter().position(|e| e.type_name() == "request_created").expect("the request was created");
    let expired = events
        .iter()
        .position(|e| matches!(e.kind, EventKind::RequestExpired { reason: ExpiryReason::TurnEnded, .. }))
        .unwrap_or_else(|| panic!("the request expires with the turn: {}", names(&events)));
    assert!(created < expired && expired < events.len() - 1, "{}", names(&events));
    let EventKind::RequestCreated(request) = &events[created].kind else { unreachable!() };
    let late = case.harness.respond(request, Response::approve()).await;
    assert!(matches!(late, Err(Error::RequestExpired { .. })), "{late:?}");
    case.assert_no_process_left().await;
    case.finish().await;
}

// ----- hangs -------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hang_before_the_initialize_reply_times_out_start_session() {
    let case = Case::new(FakeScript::new().hang());
    let started = case.harness.start_session("codex", case.options().startup_timeout(SHORT_STARTUP)).await;
    // The adapter's deadline (90 % of the runtime's) reports first.
    let Err(Error::Timeout { operation: "initialize", timeout }) = started else {
        panic!("expected the initialize timeout, got {started:?}")
    };
    assert_eq!(timeout, adapter_deadline(SHORT_STARTUP));
    case.assert_no_process_left().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hang_before_the_thread_reply_times_out_start_session() {
    let script = FakeScript::new().expect(ExpectKind::Handshake).reply(initialize_result()).hang();
    let case = Case::new(script);
    let started = case.harness.start_session("codex", case.options().startup_timeout(SHORT_STARTUP)).await;
    let Err(Error::Timeout { operation: "thread/start", timeout }) = started else {
        panic!("expected the thread/start timeout, got {started:?}")
    };
    assert_eq!(timeout, adapter_deadline(SHORT_STARTUP));
    case.assert_no_process_left().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hang_mid_turn_then_cancel_retires_the_session() {
    let case = Case::new(FakeScript::new().handshake().turn_start().deltas(["working"]).hang());
    let (session, monitor) = case.monitored_session().await;
    let watched = case.streaming_turn(&session).await;
    case.harness.cancel(watched.turn()).await.expect("cancel accepted");
    let events = watched.into_events().await;
    let end = end(&events);
    assert_eq!(end.status, TurnStatus::Failed, "{}", names(&events));
    // The adapter's deadline reports first.
    assert_eq!(reason(end), format!("cancellation failed: {}", timed_out("turn/interrupt", COMMAND)));
    assert_eq!(count(&events, "cancel_requested"), 1);
    assert_retired(monitor, "cancellation failed").await;
    case.assert_no_process_left().await;
}

/// A codex that exits when asked to interrupt: the turn fails with how it exited and the session
/// is unavailable, as after any exit — not retired as if the cancel's outcome were unknown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_on_interrupt_fails_the_turn_with_the_exit() {
    let script = FakeScript::new()
        .handshake()
        .interrupts(InterruptMode::Ignore)
        .turn_start()
        .deltas(["working"])
        .expect(ExpectKind::Interrupt)
        .stderr("dying on interrupt")
        .exit(3);
    let case = Case::new(script);
    let session = case.session().await;
    let watched = case.streaming_turn(&session).await;
    case.harness.cancel(watched.turn()).await.expect("cancel accepted");
    let events = watched.into_events().await;
    let end = end(&events);
    assert_exited(end, ExitStatus::code(3));
    assert_eq!(end.result.stderr_tail.as_deref(), Some("dying on interrupt"), "{end:?}");
    case.session_event(&session, |e| matches!(e.kind, EventKind::TransportError { .. })).await;
    assert_eq!(case.harness.status(&session).await.unwrap().status, SessionState::Unavailable);
    case.finish().await;
}

/// The same for a codex that exits when a steer reaches it: the steer fails, and so does the
/// turn, with the exit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_on_steer_fails_the_turn_with_the_exit() {
    let script = FakeScript::new()
        .handshake()
        .turn_start()
        .deltas(["working"])
        .expect_match(json!({"method": "turn/steer"}))
        .stderr("dying on steer")
        .exit(4);
    let case = Case::new(script);
    let session = case.session().await;
    let watched = case.streaming_turn(&session).await;
    let steered = case.harness.steer(watched.turn(), "and also").await;
    // The steer's own failure and the exit's report race: whichever the session takes first
    // answers the caller, and either says the CLI is gone.
    assert!(matches!(steered, Err(Error::Transport { .. } | Error::SessionUnavailable { .. })), "{steered:?}");
    let events = watched.into_events().await;
    let end = end(&events);
    assert_exited(end, ExitStatus::code(4));
    assert_eq!(end.result.stderr_tail.as_deref(), Some("dying on steer"), "{end:?}");
    assert_eq!(case.harness.status(&session).await.unwrap().status, SessionState::Unavailable);
    case.finish().await;
}

/// Codex answers `turn/start` before it holds the turn as active and refuses an interrupt sent in
/// between; a cancel right after the start is sent again once codex announced the turn, and the
/// turn ends interrupted with the session usable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_before_codex_announced_the_turn_interrupts_it() {
    let script = FakeScript::new().handshake().turn_start_announced_after(200).deltas(["never"]).stall().turn("next");
    let case = Case::new(script);
    let session = case.session().await;
    let watched = case.watch(&session, "work").await;
    case.harness.cancel(watched.turn()).await.expect("cancel accepted");
    let events = watched.into_events().await;
    assert_eq!(end(&events).status, TurnStatus::Interrupted, "{}", names(&events));
    let interrupts = case.env.received().unwrap().iter().filter(|m| m["method"] == "turn/interrupt").count();
    assert_eq!(interrupts, 2, "refused before the announcement, then taken");
    let next = case.run(&session, "again").await;
    assert_eq!(end(&next).status, TurnStatus::Completed, "{}", names(&next));
    case.harness.stop_session(&session, false).await.expect("stopped");
    case.assert_no_process_left().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupt_acknowledged_without_a_terminal_event_retires_the_session() {
    let script = FakeScript::new().handshake().interrupts(InterruptMode::AckOnly).turn_start().deltas(["half"]).stall();
    let case = Case::new(script);
    let (session, monitor) = case.monitored_session().await;
    let watched = case.streaming_turn(&session).await;
    case.harness.cancel(watched.turn()).await.expect("cancel accepted");
    let events = watched.into_events().await;
    let end = end(&events);
    assert_eq!(end.status, TurnStatus::Failed, "{}", names(&events));
    let operation = "turn/completed after an acknowledged turn/interrupt";
    assert_eq!(reason(end), format!("cancellation failed: {}", timed_out(operation, COMMAND)));
    assert!(
        case.env.received().unwrap().iter().any(|m| m["method"] == "turn/interrupt"),
        "the interrupt reached the CLI"
    );
    assert_retired(monitor, "cancellation failed").await;
    case.assert_no_process_left().await;
}

/// A CLI that goes silent mid-turn is not ended by the adapter: codex turns may legitimately
/// run for a long time without a frame. The caller ends it, by `cancel` (see
/// `hang_mid_turn_then_cancel_retires_the_session`) or by a forced stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_terminal_event_then_silence_runs_until_the_caller_stops_it() {
    let case = Case::new(FakeScript::new().handshake().turn_start().deltas(["half"]).hang());
    let session = case.session().await;
    let mut watched = case.streaming_turn(&session).await;
    // The last frame the fake writes.
    watched.until(|e| matches!(e.kind, EventKind::AssistantMessage { .. })).await;
    let idle = Duration::from_millis(300);
    let mut stream = case.harness.stream(watched.turn(), Replay::Latest, Some(idle)).await.expect("turn stream");
    let next = stream.next().await;
    assert!(matches!(next, Some(Err(StreamError::IdleTimeout(t))) if t == idle), "{next:?}");
    let status = case.harness.status(&session).await.unwrap();
    assert_eq!(status.status, SessionState::Running);
    assert_eq!(status.current_turn.map(|t| t.id), Some(watched.turn().id.clone()), "the turn is still running");

    case.harness.stop_session(&session, true).await.expect("forced stop");
    let events = watched.into_events().await;
    let end = end(&events);
    assert_eq!(end.status, TurnStatus::Interrupted);
    assert_eq!(reason(end), "forced session stop");
    case.assert_no_process_left().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_of_duration_max_mean_no_limit() {
    let script = FakeScript::new().handshake().turn_start().deltas(["no ", "limits"]).complete();
    let case = Case::new(script);
    let options = case
        .options()
        .startup_timeout(Duration::MAX)
        .turn_start_timeout(Duration::MAX)
        .provider_command_timeout(Duration::MAX)
        .turn_inactivity_timeout(Duration::MAX);
    let session = case.session_with(options).await;
    let events = case.run(&session, "hello").await;
    let end = end(&events);
    assert_eq!(end.status, TurnStatus::Completed, "{}", names(&events));
    assert_eq!(end.result.text.as_deref(), Some("no limits"));
    case.harness.stop_session(&session, false).await.expect("a clean stop within no limit");
    case.finish().await;
}

// ----- bad output --------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_completed_with_fields_of_other_types_still_ends_the_turn() {
    // A codex newer than the schema: `durationMs` a float, an item of a kind with a text object.
    let item = json!({"type": "richNote", "id": "n1", "text": {"parts": ["a"]}});
    let completed = |status: Value| {
        json!({"method": "turn/completed", "params": {"threadId": "${session_id}",
            "turn": {"id": "${turn_id}", "status": status, "items": [item.clone()], "durationMs": 12.5}}})
    };
    for (status, expected) in [(json!("completed"), TurnStatus::Completed), (json!(2), TurnStatus::Failed)] {
        let script = FakeScript::new().handshake().turn_start().deltas(["done"]).send(completed(status)).stall();
        let case = Case::new(script);
        let session = case.session().await;
        let events = case.run(&session, "hello").await;
        let end = end(&events);
        assert_eq!(end.status, expected, "{}", names(&events));
        let warned = warnings(&events);
        assert!(warned.iter().any(|w| w.contains("`turn/completed` has fields of types")), "{warned:?}");
        let raw = events.iter().find(|e| e.is_terminal()).and_then(|e| e.raw.as_ref()).map(|r| r.get().to_owned());
        assert!(raw.is_some_and(|r| r.contains("richNote")), "the line is kept");
        case.finish().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_line_is_a_warning_and_the_turn_completes() {
    let script = FakeScript::new().handshake().turn_start().garbage().deltas(["still ", "fine"]).complete();
    let case = Case::new(script);
    let session = case.session().await;
    let events = case.run(&session, "hello").await;
    assert_eq!(warnings(&events), ["codex wrote a stdout line that is not JSON (23 bytes)"]);
    let end = end(&events);
    assert_eq!(end.status, TurnStatus::Completed, "{}", names(&events));
    assert_eq!(end.result.text.as_deref(), Some("still fine"));
    case.finish().await;
}

/// A CLI that writes garbage without end makes a few dozen warnings, not one per line: the
/// first 32 of the turn, then one at each doubling of the count, saying how many there were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_garbage_lines_is_warned_of_a_few_times_and_the_turn_completes() {
    let script = (0..1000).fold(FakeScript::new().handshake().turn_start(), |script, _| script.garbage());
    let case = Case::new(script.deltas(["still ", "fine"]).complete());
    let session = case.session().await;
    let events = case.run(&session, "hello").await;
    let warned = warnings(&events);
    assert_eq!(warned.len(), 32 + 4, "the first 32, then at 64, 128, 256 and 512 lines: {warned:?}");
    assert!(warned[35].contains("(512 unreadable stdout lines so far;"), "{}", warned[35]);
    let end = end(&events);
    assert_eq!(end.status, TurnStatus::Completed, "{}", names(&events));
    assert_eq!(end.result.text.as_deref(), Some("still fine"));
    case.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_megabyte_line_is_kept_and_the_turn_completes() {
    const BYTES: usize = 10 * 1024 * 1024;
    let script = FakeScript::new().handshake().turn_start().huge_line(BYTES).deltas(["after"]).complete();
    let case = Case::new(script);
    let session = case.session().await;
    let events = case.run(&session, "hello").await;
    let padding = events
        .iter()
        .find(|e| matches!(&e.kind, EventKind::ProviderEvent { method } if method == "fake/padding"))
        .unwrap_or_else(|| panic!("the unknown frame is kept: {}", names(&events)));
    assert_eq!(padding.raw.as_ref().map(|r| r.get().len()), Some(BYTES), "raw is the whole line");
    assert!(warnings(&events).is_empty(), "{:?}", warnings(&events));
    let end = end(&events);
    assert_eq!(end.status, TurnStatus::Completed);
    assert_eq!(end.result.text.as_deref(), Some("after"));
    case.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_megabyte_line_over_the_line_limit_is_a_warning() {
    let script = FakeScript::new().handshake().turn_start().huge_line(10 * 1024 * 1024).deltas(["after"]).complete();
    let case = Case::new(script);
    let session = case.session_with(case.options_with(CodexOptions::new().max_line_bytes(1024 * 1024))).await;
    let events = case.run(&session, "hello").await;
    assert_eq!(
        warnings(&events),
        ["codex wrote a stdout line of 10485760 bytes, over the 1048576-byte limit; dropped"]
    );
    let end = end(&events);
    assert_eq!(end.status, TurnStatus::Completed);
    assert_eq!(end.result.text.as_deref(), Some("after"));
    case.finish().await;
}

/// A final message over `max_line_bytes` makes every line that carries it too long, the
/// `turn/completed` that repeats the turn's items among them: the turn ends failed, saying why,
/// where it had stayed running for good; codex is idle, and the next turn runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_completed_line_over_the_limit_ends_the_turn_and_the_session_goes_on() {
    let script = FakeScript::new().handshake().turn_start().deltas(["x".repeat(5000)]).complete().turn("small again");
    let case = Case::new(script);
    let session = case.session_with(case.options_with(CodexOptions::new().max_line_bytes(4096))).await;
    let events = case.run(&session, "long please").await;
    let failed = end(&events);
    assert_eq!(failed.status, TurnStatus::Failed);
    let reason = failed.result.reason.clone().unwrap_or_default();
    assert!(reason.contains("turn/completed line") && reason.contains("4096-byte limit"), "{reason}");
    assert_eq!(failed.result.ended_by, Some(EndCause::Provider), "codex ended it; nothing was lost in transport");
    assert_eq!(warnings(&events).len(), 3, "the delta, item/completed and turn/completed: {:?}", warnings(&events));

    let next = case.run(&session, "short now").await;
    assert_eq!(end(&next).status, TurnStatus::Completed);
    assert_eq!(end(&next).result.text.as_deref(), Some("small again"));
    case.finish().await;
}

/// A request of codex's over `max_line_bytes` (the approval of a long command) cannot be read
/// whole, but its first bytes name it: it is declined at once with a warning, where it was
/// dropped and codex waited for its answer for good. An over-long reply to a call of ours fails
/// that call at once, where its caller waited out its deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_over_long_request_is_declined_and_an_over_long_reply_fails_its_call() {
    let request = json!({
        "method": "item/commandExecution/requestApproval", "id": 7,
        "params": {
            "threadId": "${session_id}", "turnId": "${turn_id}", "itemId": "call_long",
            "command": format!("echo {}", "x".repeat(5000)), "cwd": "/tmp",
            "availableDecisions": ["accept", "decline", "cancel"],
        },
    });
    let script = FakeScript::new()
        .handshake()
        .turn_start()
        .send(request)
        .expect_match(json!({"id": 7, "result": {"decision": "decline"}}))
        .deltas(["after"])
        .complete();
    let case = Case::new(script);
    let session = case.session_with(case.options_with(CodexOptions::new().max_line_bytes(4096))).await;
    let events = case.run(&session, "run a long command").await;
    assert_eq!(end(&events).status, TurnStatus::Completed, "{:?}", warnings(&events));
    assert_eq!(end(&events).result.text.as_deref(), Some("after"));
    let warned = warnings(&events);
    assert!(
        warned.iter().any(|w| w.contains("item/commandExecution/requestApproval") && w.contains("declined")),
        "{warned:?}"
    );
    case.finish().await;

    let long_reply =
        FakeScript::new().expect(ExpectKind::Handshake).reply(json!({"userAgent": "x".repeat(5000)})).stall();
    let case = Case::new(long_reply);
    let started = tokio::time::Instant::now();
    let options = case.options_with(CodexOptions::new().max_line_bytes(4096)).startup_timeout(Duration::from_secs(20));
    let refused = case.harness.start_session("codex", options).await.expect_err("the reply cannot be read");
    assert!(refused.to_string().contains("4096"), "{refused}");
    assert!(started.elapsed() < Duration::from_secs(5), "failed at once, not at its deadline: {:?}", started.elapsed());
    case.finish().await;
}

/// An over-long `turn/completed` of another turn (a stale one of the turn before) or of another
/// thread (a subagent's, naming the running turn's ID) ends nothing: it is only warned of, as
/// the notification itself would have been dropped as stale or foreign.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_over_long_turn_completed_of_another_turn_or_thread_ends_nothing() {
    let long = |thread: &str, turn: &str| {
        json!({"method": "turn/completed", "params": {
            "threadId": thread,
            "turn": {"id": turn, "items": [{"type": "agentMessage", "id": "m", "text": "x".repeat(5000)}], "status": "completed", "error": null},
        }})
    };
    let script = FakeScript::new()
        .handshake()
        .turn("one")
        .turn_start()
        .send(long("${session_id}", "fake-turn-1"))
        .send(long("another-thread", "fake-turn-2"))
        .deltas(["two"])
        .complete();
    let case = Case::new(script);
    let session = case.session_with(case.options_with(CodexOptions::new().max_line_bytes(4096))).await;
    assert_eq!(end(&case.run(&session, "first").await).status, TurnStatus::Completed);
    let second = case.run(&session, "second").await;
    assert_eq!(end(&second).status, TurnStatus::Completed, "{:?}", warnings(&second));
    assert_eq!(end(&second).result.text.as_deref(), Some("two"));
    assert_eq!(warnings(&second).len(), 2, "{:?}", warnings(&second));
    case.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stderr_flood_is_drained_and_the_tail_stays_bounded() {
    // Whole lines, so that the last flood line ends before the final words.
    let first_turn = FakeScript::new()
        .handshake()
        .turn_start()
        .stderr_flood(FLOOD_LINE_BYTES * 80_000)
        .deltas(["after the flood"])
        .complete()
        .turn_start();
    let script = gate(first_turn).stderr_flood(FLOOD_LINE_BYTES * 10_000).stderr("last words").exit(1);
    let case = Case::new(script);
    let session = case.session().await;
    let first = case.run(&session, "hello").await;
    let end_first = end(&first);
    assert_eq!(end_first.status, TurnStatus::Completed, "8 MB of stderr must not stall the turn");
    assert_eq!(end_first.result.text.as_deref(), Some("after the flood"));

    let second = case.run_gated(&session, "again").await;
    let end_second = end(&second);
    assert_exited(end_second, ExitStatus::code(1));
    let tail = end_second.result.stderr_tail.as_deref().expect("a stderr tail");
    let lines: Vec<&str> = tail.lines().collect();
    assert_eq!(lines.len(), 40, "the tail keeps the last 40 lines");
    assert_eq!(lines.last(), Some(&"last words"));
    assert!(lines[..39].iter().all(|l| l.starts_with("fake-cli stderr flood line ")), "{tail}");
    case.assert_no_process_left().await;
    case.finish().await;
}

// ----- duplicate and out-of-order frames ---------------------------------------------------------

/// Asserts that every turn in the session's log has exactly one terminal event and no event
/// after it.
fn assert_one_ending_per_turn(log: &[Arc<Event>]) {
    let mut turns: Vec<_> = log.iter().filter_map(|e| e.turn_id.clone()).collect();
    turns.dedup();
    for turn in turns {
        let events: Vec<Arc<Event>> = log.iter().filter(|e| e.turn_id.as_ref() == Some(&turn)).cloned().collect();
        end(&events);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_frames_end_each_turn_once() {
    let script = FakeScript::new()
        .handshake()
        .turn("one")
        // `turn/completed` of the first turn twice more, before and after the second turn starts.
        .duplicate(1)
        .turn_start()
        .send(json!({"method": "turn/completed", "params": {
            "threadId": "${session_id}",
            "turn": {"id": "fake-turn-1", "items": [], "status": "failed", "error": {"message": "stale"}},
        }}))
        // The second turn's delta and its `item/completed` twice.
        .deltas(["two"])
        .duplicate(1)
        .complete();
    let case = Case::new(script);
    let session = case.session().await;
    let first = case.run(&session, "first").await;
    assert_eq!(end(&first).status, TurnStatus::Completed);
    assert_eq!(end(&first).result.text.as_deref(), Some("one"));
    let second = case.run(&session, "second").await;
    let end_second = end(&second);
    assert_eq!(end_second.status, TurnStatus::Completed, "a stale turn/completed must not end the next turn");
    assert_eq!(end_second.result.text.as_deref(), Some("two"));
    assert_eq!(count(&second, "assistant_message"), 2, "a repeated item/completed is reported again");
    assert_one_ending_per_turn(&case.session_log(&session).await);
    case.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_order_frames_end_the_turn_at_its_terminal_frame() {
    // `turn/completed` first, then the item frames in reverse.
    let script =
        FakeScript::new().handshake().turn_start().hold().deltas(["a", "b"]).complete().release_reversed().turn("next");
    let case = Case::new(script);
    let session = case.session().await;
    let first = case.run(&session, "first").await;
    let end_first = end(&first);
    assert_eq!(end_first.status, TurnStatus::Completed, "{}", names(&first));
    assert_eq!(end_first.result.text.as_deref(), Some("ab"), "the text comes from turn/completed's items");
    assert_eq!(deltas(&first), "", "deltas after the terminal frame are stale");
    let second = case.run(&session, "second").await;
    assert_eq!(end(&second).result.text.as_deref(), Some("next"));
    assert_one_ending_per_turn(&case.session_log(&session).await);
    case.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_before_the_turn_start_reply_wait_for_admission() {
    // Every frame of the turn, the `turn/start` reply last.
    let script =
        FakeScript::new().handshake().hold().turn_start().deltas(["early"]).complete().release_reversed().turn("next");
    let case = Case::new(script);
    let session = case.session().await;
    let first = case.run(&session, "first").await;
    assert_eq!(first.first().map(|e| e.type_name()), Some("turn_started"), "{}", names(&first));
    let end_first = end(&first);
    assert_eq!(end_first.status, TurnStatus::Completed);
    assert_eq!(end_first.result.text.as_deref(), Some("early"));
    assert_eq!(end_first.result.provider_turn_id.as_deref(), Some("fake-turn-1"));
    let second = case.run(&session, "second").await;
    assert_eq!(end(&second).result.text.as_deref(), Some("next"));
    assert_one_ending_per_turn(&case.session_log(&session).await);
    case.finish().await;
}

// ----- stdin -------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdin_closed_before_the_turn_fails_the_turn_and_retires_the_session() {
    let case = Case::new(handshake_with(FakeScript::close_stdin).turn("never"));
    let (session, monitor) = case.monitored_session().await;
    let events = case.run(&session, "hello").await;
    let end = end(&events);
    assert_eq!(end.status, TurnStatus::Failed, "{}", names(&events));
    // Depending on whether the fake's reader was inside a read when the pipe went away, the
    // request is swallowed (no answer in time) or its write fails (EPIPE): uncertain either way.
    let reason = reason(end);
    assert!(
        reason == format!("turn admission outcome is uncertain: {}", timed_out("turn/start", TURN_START))
            || reason.ends_with("turn/start: writing to codex failed: Broken pipe (os error 32)"),
        "{reason}"
    );
    assert_retired(monitor, "turn/start").await;
    case.assert_no_process_left().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdin_closed_mid_turn_then_cancel_retires_the_session() {
    let case = Case::new(FakeScript::new().handshake().turn_start().close_stdin().deltas(["x"]).stall());
    let (session, monitor) = case.monitored_session().await;
    let watched = case.streaming_turn(&session).await;
    case.harness.cancel(watched.turn()).await.expect("cancel accepted");
    let events = watched.into_events().await;
    let end = end(&events);
    assert_eq!(end.status, TurnStatus::Failed, "{}", names(&events));
    // Swallowed or refused with EPIPE, as above.
    let reason = reason(end);
    assert!(
        reason == format!("cancellation failed: {}", timed_out("turn/interrupt", COMMAND))
            || reason.ends_with("turn/interrupt: writing to codex failed: Broken pipe (os error 32)"),
        "{reason}"
    );
    assert_retired(monitor, "cancellation failed").await;
    case.assert_no_process_left().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_reader_delays_the_turn_until_it_reads() {
    const PAUSE_MS: u64 = 600;
    let script = slow_reader(PAUSE_MS).turn("one").turn_start().deltas(["${prompt}"]).complete();
    let case = Case::new(script);
    let session = case.session().await;
    assert_eq!(end(&case.run(&session, "small").await).status, TurnStatus::Completed);
    // Far more than a pipe holds: the write waits for the reader.
    let big = "y".repeat(1024 * 1024);
    let events = case.run(&session, &big).await;
    let end = end(&events);
    assert_eq!(end.status, TurnStatus::Completed, "{}", names(&events));
    assert_eq!(end.result.text.as_deref().map(str::len), Some(big.len()), "the whole prompt arrived");
    let transcript = case.env.transcript().unwrap();
    let read_at = transcript
        .iter()
        .find(|l| l.dir == Direction::In && l.bytes.is_some_and(|b| b > big.len()))
        .map(|l| l.t)
        .expect("the big request in the transcript");
    assert!(read_at >= PAUSE_MS as f64 / 1000.0, "read at {read_at}s, before the pause ended");
    case.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_reader_past_the_admission_deadline_retires_the_session() {
    let script = slow_reader(3000).turn("one").turn("two");
    let case = Case::new(script);
    let (session, monitor) = case.monitored_session().await;
    assert_eq!(end(&case.run(&session, "small").await).status, TurnStatus::Completed);
    let big = "y".repeat(1024 * 1024);
    let events = case.run(&session, &big).await;
    let end = end(&events);
    assert_eq!(end.status, TurnStatus::Failed, "{}", names(&events));
    // The adapter's deadline covers the blocked write, so the adapter reports first.
    assert_eq!(reason(end), format!("turn admission outcome is uncertain: {}", timed_out("turn/start", TURN_START)));
    assert_retired(monitor, "turn/start timed out").await;
    case.assert_no_process_left().await;
}

/// A skill whose `SKILL.md` is not there: the session is refused before anything runs, where
/// codex would have been sent a skill it cannot read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skill_without_its_skill_md_is_refused_before_spawning() {
    let case = Case::new(FakeScript::new().handshake());
    let dir = agent_provider_kit::private_dir::PrivateDir::create(&std::env::temp_dir(), "skill").expect("dir");
    let options = case.options().skill(agent_core::Skill::new("release", dir.path()));
    let started = case.harness.start_session("codex", options).await;
    let Err(Error::InvalidOption { option: "skills", reason }) = started else { panic!("got {started:?}") };
    assert!(reason.contains("skill `release`") && reason.contains("SKILL.md does not exist"), "{reason}");
    assert!(case.exec.commands().is_empty(), "nothing was spawned");
    std::fs::write(dir.path().join("SKILL.md"), "---\nname: release\ndescription: x\n---\n").expect("write");
    let options = case.options().skill(agent_core::Skill::new("release", dir.path()));
    let started = case.harness.start_session("codex", options).await;
    assert!(started.is_ok(), "{started:?}");
    case.finish().await;
}

/// A harness built without an exec says so at the start, whatever the auth mode — not that
/// the auth guard refuses an exec that is not local.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_harness_without_an_exec_says_so() {
    let case = Case::new(FakeScript::new().handshake());
    let harness = Harness::builder()
        .provider(agent_provider_codex::CodexProvider::new())
        .store(StoreChoice::Disabled)
        .build()
        .expect("builds");
    for auth in [AuthMode::Subscription, AuthMode::Inherit] {
        let started = harness.start_session("codex", case.options().auth(auth)).await;
        let Err(Error::Exec(agent_core::exec::ExecError::Backend(reason))) = started else {
            panic!("{auth:?}: got {started:?}")
        };
        assert!(reason.contains("no exec configured"), "{auth:?}: {reason}");
    }
    assert!(case.exec.commands().is_empty(), "the case's own exec was not asked");
}

/// Codex options in the wrong place are refused, not ignored: per-turn options given to the
/// session, and a blank effort given to a turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_options_in_the_wrong_place_are_refused() {
    let case = Case::new(FakeScript::new().handshake());
    let options = case.options().provider_option(agent_provider_codex::CodexTurnOptions::new().effort("high"));
    let started = case.harness.start_session("codex", options).await;
    let Err(Error::InvalidOption { option: "provider_options", reason }) = started else { panic!("got {started:?}") };
    assert!(reason.contains("CodexTurnOptions apply to one turn") && reason.contains("CodexOptions"), "{reason}");
    assert!(case.exec.commands().is_empty(), "nothing was spawned");

    let session = case.harness.start_session("codex", case.options()).await.expect("session starts");
    let blank = TurnOptions::new().provider_option(agent_provider_codex::CodexTurnOptions::new().effort(" "));
    let refused = case.harness.start_turn(&session, "go", blank).await;
    let Err(Error::InvalidOption { option: "provider_options", reason }) = refused else { panic!("got {refused:?}") };
    assert!(reason.contains("effort"), "{reason}");
    assert_eq!(case.harness.status(&session).await.expect("status").status, SessionState::Idle, "no turn runs");
    case.finish().await;
}

/// A codex that starts a helper in a session of its own (`setsid`), outside the process group
/// its teardown ends, and then exits before the handshake: the failed start ends the helper too,
/// as an ended session's close would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_start_ends_what_the_cli_left_outside_its_group() {
    let case = Case::new(FakeScript::new().handshake());
    let programs = agent_testkit::programs::ProgramDir::new("codex-strays");
    let pid_file = programs.path().join("helper.pid");
    let cli = programs.file("codex", 0o755);
    let script = format!(
        "#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'codex-cli 0.171.0'; exit 0; fi\n\
         setsid sleep 300 </dev/null >/dev/null 2>&1 &\necho $! > {}\nexit 3\n",
        pid_file.display()
    );
    std::fs::write(&cli, script).expect("write the CLI");
    let options = case.options().update_provider_option(|codex: &mut CodexOptions| *codex = codex.clone().binary(&cli));
    let started = case.harness.start_session("codex", options).await;
    assert!(matches!(started, Err(Error::ProviderUnavailable { .. })), "{started:?}");
    let helper: u32 = std::fs::read_to_string(&pid_file).expect("the helper started").trim().parse().expect("pid");
    let deadline = Instant::now() + GONE_DEADLINE;
    while std::path::Path::new(&format!("/proc/{helper}")).exists() {
        assert!(Instant::now() < deadline, "helper {helper} outlived the failed start");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
