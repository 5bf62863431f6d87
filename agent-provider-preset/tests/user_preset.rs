//! A user preset for a made-up CLI (a shell script this test writes) loaded from a presets
//! directory: turns, a conversation continued by key, the exit status against the matchers,
//! one turn at a time per key (`on_busy`), cancel, sessions from a `SessionConfig`, and
//! presets that do not load.

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agent_core::{
    Error, ErrorKind, EventKind, Harness, Reuse, SessionConfig, SessionOptions, SessionRef, SessionState, TurnOptions,
    TurnStatus,
};
use agent_exec::LocalExec;
use agent_provider_preset::{AllowList, OnBusy, PresetCatalog, PresetOptions};
use agent_store_memory::MemoryStore;
use agent_testkit::events::{Watched, names, terminal};
use agent_testkit::programs::ProgramDir;
use agent_testkit::recording::RecordingExec;
use serde_json::{Value, json};
use support::payload;

/// The made-up CLI: `mini-agent [--resume ID] [--model M] [EXTRA…] -- PROMPT`. It prints its
/// session, one line per turn it has seen in that session, and a result (or a failure) chosen
/// by the prompt's first word; `forget…` starts a new session whatever `--resume` says.
const MINI_AGENT: &str = r#"
if [ "$1" = "--version" ]; then echo "mini-agent 1.2.0"; exit 0; fi
session=""; model=""
while [ $# -gt 0 ]; do
  case "$1" in
    --resume) session="$2"; shift 2;;
    --model) model="$2"; shift 2;;
    --) shift; break;;
    *) echo "ARG $1"; shift;;
  esac
done
prompt="$1"
[ -n "$session" ] || session="s-$$"
case "$prompt" in forget*) session="s-$$";; esac
echo "SESSION $session"
echo "$prompt" >> "history-$session"
turns=$(wc -l < "history-$session" | tr -d ' ')
echo "SAY turn $turns of $session${model:+ with $model}"
case "$prompt" in
  fail-zero*) echo "RESULT partial"; echo "FAILED out of credits"; exit 0;;
  result-one*) echo "RESULT all done"; echo "mini-agent: lost the connection (token $MINI_TOKEN)" >&2; exit 1;;
  linger*) echo "RESULT lingered"; sleep 60;;
  closing*) echo "RESULT lingered"; exec 1>&-; sleep 60;;
  env*) echo "SAY token=$MINI_TOKEN"; echo "RESULT token=$MINI_TOKEN";;
  pem*) printf '%s\n' "$MINI_PRIVATE_KEY" | sed 's/^/SAY /'; echo "RESULT ok"; printf 'bad key:\n%s\n' "$MINI_PRIVATE_KEY" >&2; exit 1;;
  pieces*) for r in 1-4 5-9 10-16 17-; do echo "DELTA $(printf %s "$MINI_TOKEN" | cut -c$r)"; done; echo "RESULT done";;
  block*) while [ ! -e release ]; do sleep 0.05; done; echo "RESULT released";;
  long*) printf 'RESULT '; head -c 5000 /dev/zero | tr '\0' x; echo;;
  *) echo "RESULT echo: $prompt";;
esac
"#;

fn mini_preset(program: &Path) -> Value {
    json!({
        "schema_version": 1,
        "id": "mini-agent",
        "description": "A made-up CLI",
        "program": program,
        "args": [
            {"if": "resume", "then": ["--resume", "{session_id}"]},
            {"if": "model", "then": ["--model", "{model}"]},
            {"insert": "extra_args"},
            "--", "{prompt}"
        ],
        "framing": "lines",
        "max_line_bytes": 4096,
        "env": {"set": {"MINI_TOKEN": "preset-token-0123456789"}},
        "version": {"args": ["--version"], "contains": "mini-agent", "min": "1.0.0"},
        "reserved_args": ["--continue", "-c"],
        "arg_aliases": {"-m": "--model"},
        "matchers": {
            "session_id": [{"when": "^SESSION (?P<id>\\S+)$", "value": "id"}],
            "result": [{"when": "^RESULT (?P<text>.*)$", "value": "text"}],
            "failure": [{"when": "^FAILED (?P<why>.*)$", "value": "why"}]
        },
        "events": [
            {"when": "^SAY (?P<t>.*)$", "emit": "assistant_message", "text": "t"},
            {"when": "^DELTA (?P<t>.*)$", "emit": "message_delta", "text": "t"},
            {"when": "^(SESSION|RESULT|FAILED) ", "emit": "drop"}
        ]
    })
}

/// A test's world: the script, a presets directory holding its preset, a workspace, a harness.
struct Mini {
    /// Holds the script, the presets and the workspace (removed on drop).
    _programs: ProgramDir,
    presets: PathBuf,
    workspace: PathBuf,
    exec: Arc<RecordingExec>,
    harness: Harness,
    catalog: PresetCatalog,
}

impl Mini {
    fn start() -> Mini {
        let programs = ProgramDir::new("preset-mini");
        let script = programs.script("mini-agent", MINI_AGENT);
        let presets = programs.dir("presets");
        std::fs::write(presets.join("mini-agent.json"), mini_preset(&script).to_string()).expect("preset written");
        let workspace = programs.dir("work");
        let catalog = PresetCatalog::builder(AllowList::shipped().allow(&script)).dir(&presets).load();
        assert!(catalog.errors().is_empty(), "{:?}", catalog.errors());
        let exec = Arc::new(RecordingExec::new(Arc::new(LocalExec::new())));
        let harness = support::harness(&catalog, &exec, Arc::new(MemoryStore::new()));
        Mini { _programs: programs, presets, workspace, exec, harness, catalog }
    }

    fn options(&self, preset: PresetOptions) -> SessionOptions {
        SessionOptions::new(&self.workspace).provider_option(preset)
    }

    async fn session(&self, options: SessionOptions) -> SessionRef {
        self.harness.start_session("preset:mini-agent", options).await.expect("session starts")
    }

    /// The argv (without the program) of the `n`-th process started.
    fn argv(&self, n: usize) -> Vec<String> {
        self.exec.commands()[n].args.iter().map(|a| a.to_string_lossy().into_owned()).collect()
    }

    async fn finish(self) {
        support::finish(&self.harness, &self.exec).await;
        self.harness.shutdown().await;
    }
}

fn said(events: &[Arc<agent_core::Event>]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::AssistantMessage { text, .. } => Some(text.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_preset_for_a_made_up_cli_runs_from_a_presets_directory() {
    let mini = Mini::start();
    let preset = mini.catalog.get("mini-agent").expect("loaded from the directory");
    assert!(preset.origin().ends_with("presets/mini-agent.json"), "{}", preset.origin());
    let session = mini.session(mini.options(PresetOptions::new().args(["--verbose"])).model("tiny")).await;

    let (_, first) = support::run(&mini.harness, &session, "hello there", |_| None).await;
    assert_eq!(terminal(&first).status, TurnStatus::Completed, "{}", names(&first));
    assert_eq!(terminal(&first).result.text.as_deref(), Some("echo: hello there"));
    let one = payload(&first);
    let id = one.session_id.clone().expect("the session line was matched");
    assert_eq!(said(&first), [format!("turn 1 of {id} with tiny")]);
    // A line no rule takes is a provider event with its text as raw JSON.
    let arg = first.iter().find(|e| matches!(&e.kind, EventKind::ProviderEvent { method } if method == "line"));
    assert_eq!(arg.and_then(|e| e.raw.as_ref()).map(|r| r.get()), Some("\"ARG --verbose\""), "{}", names(&first));
    assert_eq!((one.turn, one.exit_code), (1, Some(0)));

    let (_, second) = support::run(&mini.harness, &session, "and again", |_| None).await;
    assert_eq!(said(&second), [format!("turn 2 of {id} with tiny")], "the conversation continued");
    assert_eq!(payload(&second).turn, 2);
    assert_eq!(mini.argv(0), ["--version"]);
    assert_eq!(mini.argv(1), ["--model", "tiny", "--verbose", "--", "hello there"]);
    assert_eq!(mini.argv(2), ["--resume", id.as_str(), "--model", "tiny", "--verbose", "--", "and again"]);
    let status = mini.harness.status(&session).await.expect("status");
    assert_eq!(status.provider_session_id.as_deref(), Some(id.as_str()));
    mini.finish().await;
}

/// A turn's model applies to that turn only: the session's model, which the turns after it run
/// on, is needed for it (a CLI continues a conversation on the model it ran last).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turns_model_applies_to_that_turn_only() {
    let mini = Mini::start();
    let without = mini.session(mini.options(PresetOptions::new())).await;
    let refused = mini.harness.start_turn(&without, "hi", TurnOptions::new().model("big")).await.unwrap_err();
    assert!(
        matches!(&refused, Error::InvalidOption { option: "model", reason } if reason.contains("SessionOptions::model"))
    );
    assert_eq!(mini.exec.commands().len(), 1, "only the version probe ran");

    let session = mini.session(mini.options(PresetOptions::new()).model("tiny")).await;
    let turn = mini.harness.start_turn(&session, "one", TurnOptions::new().model("big")).await.expect("turn");
    let first = mini.harness.await_turn(&turn, Some(support::IDLE)).await.expect("completed");
    let id = first.result.details.as_ref().and_then(|d| d["session_id"].as_str()).expect("id").to_owned();
    let (_, next) = support::run(&mini.harness, &session, "two", |_| None).await;
    assert_eq!(said(&next), [format!("turn 2 of {id} with tiny")], "back on the session's model");
    mini.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_status_and_matchers_disagreeing_fail_the_turn() {
    let mini = Mini::start();
    let session = mini.session(mini.options(PresetOptions::new())).await;

    // Exit 0 with a failure line: failed, with the failure's text.
    let (_, events) = support::run(&mini.harness, &session, "fail-zero please", |_| None).await;
    let end = terminal(&events);
    assert_eq!(end.status, TurnStatus::Failed, "{}", names(&events));
    assert_eq!(end.result.reason.as_deref(), Some("out of credits"));
    let failed = payload(&events);
    assert_eq!((failed.status, failed.exit_code), (TurnStatus::Failed, Some(0)));

    // Exit 1 with a result line: failed; the result's text is kept, stderr explains.
    let (_, events) = support::run(&mini.harness, &session, "result-one please", |_| None).await;
    let end = terminal(&events);
    assert_eq!(end.status, TurnStatus::Failed, "{}", names(&events));
    let reason = end.result.reason.clone().unwrap_or_default();
    assert!(reason.starts_with("mini-agent exited (exit code 1) after its result line"), "{reason}");
    assert!(reason.contains("lost the connection (token [redacted])"), "the preset's env value is secret: {reason}");
    assert_eq!(end.result.text.as_deref(), Some("all done"));
    assert_eq!(end.result.exit_status.and_then(|s| s.code), Some(1));
    assert_eq!((payload(&events).exit_code, payload(&events).text.as_deref()), (Some(1), Some("all done")));

    // The session goes on: one process per turn.
    let (_, events) = support::run(&mini.harness, &session, "fine now", |_| None).await;
    assert_eq!(terminal(&events).status, TurnStatus::Completed, "{}", names(&events));
    assert_eq!(payload(&events).turn, 3);

    // The token on stdout: redacted from what the lines became, as from stderr above.
    let (_, events) = support::run(&mini.harness, &session, "env please", |_| None).await;
    let lines = said(&events);
    assert_eq!(lines.last().map(String::as_str), Some("token=[redacted]"), "{lines:?}");
    assert_eq!(terminal(&events).result.text.as_deref(), Some("token=[redacted]"));
    for event in &events {
        let json = serde_json::to_string(&**event).expect("JSON");
        assert!(!json.contains("preset-token-0123456789"), "{json}");
    }

    // The token in pieces, one per line: no delta holds it, nor do they all together.
    let (_, events) = support::run(&mini.harness, &session, "pieces please", |_| None).await;
    let streamed = agent_testkit::events::delta_texts(&events).concat();
    assert_eq!(streamed, "[redacted]", "{}", names(&events));
    mini.finish().await;
}

/// A secret of several lines (a PEM key) reaches what is kept of the CLI's output a line at a
/// time, on stdout as on stderr: each line of its base64 is redacted, its armor lines are not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_of_several_lines_is_kept_out_line_by_line() {
    let mini = Mini::start();
    let pem = "-----BEGIN TEST KEY-----\nMIIEvQIBADANBgkqhkiG\n-----END TEST KEY-----";
    let session = mini.session(mini.options(PresetOptions::new()).env("MINI_PRIVATE_KEY", pem)).await;
    let (_, events) = support::run(&mini.harness, &session, "pem please", |_| None).await;
    let said = said(&events);
    assert_eq!(said[1..], ["-----BEGIN TEST KEY-----", "[redacted]", "-----END TEST KEY-----"], "{}", names(&events));
    let reason = terminal(&events).result.reason.clone().unwrap_or_default();
    assert!(reason.contains("bad key:"), "the stderr tail is there: {reason}");
    for event in &events {
        let json = serde_json::to_string(&**event).expect("JSON");
        assert!(!json.contains("MIIEvQIBADANBgkqhkiG"), "{json}");
    }
    mini.finish().await;
}

/// A CLI that prints its result and then does not exit: the turn ends with that result a few
/// seconds later, the CLI ended, rather than waiting for it for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cli_lingering_after_its_result_is_ended_and_the_turn_completes() {
    lingers_after_its_result("linger please").await;
}

/// The same for a CLI that closes its stdout after its result: it is not worse off than one
/// that kept it open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cli_lingering_after_closing_its_output_is_ended_and_the_turn_completes() {
    lingers_after_its_result("closing please").await;
}

async fn lingers_after_its_result(prompt: &str) {
    let mini = Mini::start();
    let session = mini.session(mini.options(PresetOptions::new())).await;
    let started = std::time::Instant::now();
    let (_, events) = support::run(&mini.harness, &session, prompt, |_| None).await;
    let end = terminal(&events);
    assert_eq!(end.status, TurnStatus::Completed, "{}", names(&events));
    assert_eq!(end.result.text.as_deref(), Some("lingered"));
    assert!(started.elapsed() < Duration::from_secs(15), "ended {:?} after the start", started.elapsed());
    let warned = events.iter().any(|e| {
        matches!(&e.kind, EventKind::Warning { message } if message.contains("did not exit within 5 s of its result line"))
    });
    assert!(warned, "{}", names(&events));
    let (_, next) = support::run(&mini.harness, &session, "fine now", |_| None).await;
    assert_eq!(terminal(&next).status, TurnStatus::Completed, "the session goes on: {}", names(&next));
    mini.finish().await;
}

/// A NUL, which no command-line argument can carry, is refused as the option or input that
/// holds it, before anything is spawned, and the session goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nul_in_the_prompt_or_the_model_is_refused_by_name() {
    let mini = Mini::start();
    for (options, option) in [
        (mini.options(PresetOptions::new()).model("tiny\0x"), "model"),
        (mini.options(PresetOptions::new().args(["--verbose\0"])), "provider_options.args"),
    ] {
        match mini.harness.start_session("preset:mini-agent", options).await {
            Err(Error::InvalidOption { option: refused, .. }) => assert_eq!(refused, option),
            other => panic!("expected InvalidOption on {option}, got {other:?}"),
        }
    }
    assert!(mini.exec.commands().is_empty(), "nothing was spawned");
    let session = mini.session(mini.options(PresetOptions::new())).await;
    let spawned = mini.exec.commands().len();
    // Refused before the turn is recorded.
    for (prompt, turn, option) in
        [("a\0b", TurnOptions::new(), "input"), ("fine", TurnOptions::new().model("tiny\0x"), "model")]
    {
        match mini.harness.start_turn(&session, prompt, turn).await {
            Err(Error::InvalidOption { option: refused, reason }) => {
                assert_eq!(refused, option);
                assert!(reason.contains("NUL"), "{reason}");
            }
            other => panic!("expected InvalidOption on {option}, got {other:?}"),
        }
    }
    assert_eq!(mini.exec.commands().len(), spawned, "neither turn spawned anything");
    let (_, events) = support::run(&mini.harness, &session, "fine now", |_| None).await;
    assert_eq!(terminal(&events).status, TurnStatus::Completed, "the session goes on: {}", names(&events));
    mini.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_turn_at_a_time_per_key_waits_or_fails() {
    let mini = Mini::start();
    let keyed = |on_busy| mini.options(PresetOptions::new().key("ticket-42").on_busy(on_busy));
    let first = mini.session(keyed(OnBusy::Wait).id("first")).await;
    let failing = mini.session(keyed(OnBusy::Fail).id("failing")).await;
    let waiting = mini.session(keyed(OnBusy::Wait).id("waiting")).await;

    let mut blocked = watch(&mini.harness, &first, "block until released").await;
    blocked.until(|e| matches!(e.kind, EventKind::AssistantMessage { .. })).await;

    // on_busy: fail — refused at once, nothing started.
    let (_, refused) = support::run(&mini.harness, &failing, "me too", |_| None).await;
    let end = terminal(&refused);
    assert_eq!(end.status, TurnStatus::Failed, "{}", names(&refused));
    let reason = end.result.reason.clone().unwrap_or_default();
    assert!(reason.contains("conversation `ticket-42` is busy"), "{reason}");
    assert_eq!(mini.exec.commands().len(), 2, "--version and the blocked turn only");

    // on_busy: wait — admitted, waits for the key, then continues the same conversation.
    let mut queued = watch(&mini.harness, &waiting, "after you").await;
    queued
        .until(|e| matches!(&e.kind, EventKind::ProviderEvent { method } if method == "preset/waiting_for_key"))
        .await;
    assert_eq!(mini.exec.commands().len(), 2, "the waiting turn has not started its process");

    // A waiting turn can be cancelled: it ends without ever starting its process.
    let impatient = mini.session(keyed(OnBusy::Wait).id("impatient")).await;
    let mut given_up = watch(&mini.harness, &impatient, "never mind").await;
    given_up
        .until(|e| matches!(&e.kind, EventKind::ProviderEvent { method } if method == "preset/waiting_for_key"))
        .await;
    mini.harness.cancel(given_up.turn()).await.expect("cancel");
    let given_up = given_up.into_events().await;
    assert_eq!(terminal(&given_up).status, TurnStatus::Interrupted, "{}", names(&given_up));
    assert_eq!((payload(&given_up).exit_code, payload(&given_up).turn), (None, 2), "the number it would have had");
    assert_eq!(mini.exec.commands().len(), 2, "the cancelled turn never started a process");

    std::fs::write(mini.workspace.join("release"), "").expect("release");
    let first_events = blocked.into_events().await;
    assert_eq!(terminal(&first_events).result.text.as_deref(), Some("released"));
    let id = payload(&first_events).session_id.expect("session id");
    let queued_events = queued.into_events().await;
    assert_eq!(terminal(&queued_events).status, TurnStatus::Completed, "{}", names(&queued_events));
    assert_eq!(said(&queued_events), [format!("turn 2 of {id}")], "one conversation for the key");
    let status = mini.harness.status(&waiting).await.expect("status");
    assert_eq!(status.provider_session_id.as_deref(), Some(id.as_str()), "recorded by each session that continued it");
    assert_eq!(payload(&queued_events).turn, 2, "turns that started a process count");
    assert_eq!(mini.argv(2)[..2], ["--resume".to_owned(), id]);
    mini.finish().await;
}

/// Starts a turn of `session` watched from before it starts.
async fn watch(harness: &Harness, session: &SessionRef, prompt: &str) -> Watched {
    let events = harness.subscribe(session, agent_core::Replay::Latest).await.expect("subscribe");
    let turn = harness.start_turn(session, prompt, TurnOptions::new()).await.expect("turn recorded");
    Watched::new(turn, events, support::IDLE)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_the_turns_process_and_the_next_turn_runs() {
    let mini = Mini::start();
    let session = mini.session(mini.options(PresetOptions::new())).await;
    let (_, first) = support::run(&mini.harness, &session, "hello", |_| None).await;
    let id = payload(&first).session_id.expect("session id");

    let mut blocked = watch(&mini.harness, &session, "block forever").await;
    blocked.until(|e| matches!(e.kind, EventKind::AssistantMessage { .. })).await;
    let pid = mini.exec.spawned().last().and_then(|s| s.pid()).expect("the turn's process");
    mini.harness.cancel(blocked.turn()).await.expect("cancel");
    let events = blocked.into_events().await;
    assert_eq!(terminal(&events).status, TurnStatus::Interrupted, "{}", names(&events));
    let cut = payload(&events);
    assert_eq!((cut.status, cut.turn, cut.exit_code), (TurnStatus::Interrupted, 2, None));
    let child = mini.exec.children().into_iter().find(|c| c.id() == Some(pid)).expect("its handle");
    let status = tokio::time::timeout(Duration::from_secs(5), child.wait()).await.expect("exited").expect("status");
    assert!(status.signal.is_some(), "stopped by a signal: {status:?}");

    // The conversation goes on from what the CLI kept.
    let (_, next) = support::run(&mini.harness, &session, "still here?", |_| None).await;
    assert_eq!(terminal(&next).status, TurnStatus::Completed, "{}", names(&next));
    assert_eq!(said(&next), [format!("turn 3 of {id}")]);
    mini.finish().await;
}

/// A CLI stopped in a conversation's first turn may not have saved the conversation it named
/// (claude has not, measured): its session ID is not taken, and the next turn starts afresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_turn_cut_short_leaves_no_conversation_to_continue() {
    let mini = Mini::start();
    let session = mini.session(mini.options(PresetOptions::new())).await;
    let mut blocked = watch(&mini.harness, &session, "block forever").await;
    blocked.until(|e| matches!(e.kind, EventKind::AssistantMessage { .. })).await;
    mini.harness.cancel(blocked.turn()).await.expect("cancel");
    let events = blocked.into_events().await;
    assert_eq!(terminal(&events).status, TurnStatus::Interrupted, "{}", names(&events));
    assert_eq!(payload(&events).session_id, None, "the cut turn's session ID was not taken");
    assert_eq!(mini.harness.status(&session).await.expect("status").provider_session_id, None);

    let (_, next) = support::run(&mini.harness, &session, "from scratch", |_| None).await;
    assert_eq!(terminal(&next).status, TurnStatus::Completed, "{}", names(&next));
    assert!(!mini.argv(2).contains(&"--resume".to_owned()), "{:?}", mini.argv(2));
    let id = payload(&next).session_id.expect("this turn's session ID is taken");
    assert_eq!(said(&next), [format!("turn 1 of {id}")]);
    let warned = next.iter().any(|e| {
        matches!(&e.kind, EventKind::Warning { message } if message.contains("starts a new conversation in turn 2"))
    });
    assert!(warned, "a fresh start after a turn is never silent: {}", names(&next));
    assert_eq!(mini.harness.status(&session).await.expect("status").provider_session_id, Some(id));
    mini.finish().await;
}

/// A CLI that exited by itself with a success code kept its conversation, even when its result
/// line was dropped as over-long (the turn fails, naming the limit): the next turn continues it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_line_dropped_as_too_long_still_leaves_the_conversation_to_continue() {
    let mini = Mini::start();
    let session = mini.session(mini.options(PresetOptions::new())).await;
    let (_, long) = support::run(&mini.harness, &session, "long reply", |_| None).await;
    let end = terminal(&long);
    assert_eq!(end.status, TurnStatus::Failed, "{}", names(&long));
    let reason = end.result.reason.clone().unwrap_or_default();
    assert!(reason.contains("over the 4096-byte limit"), "{reason}");
    let id = payload(&long).session_id.expect("the turn's session ID is taken");
    assert_eq!(mini.harness.status(&session).await.expect("status").provider_session_id.as_deref(), Some(&*id));

    let (_, next) = support::run(&mini.harness, &session, "and then?", |_| None).await;
    assert_eq!(terminal(&next).status, TurnStatus::Completed, "{}", names(&next));
    assert_eq!(mini.argv(2)[..2], ["--resume".to_owned(), id.clone()]);
    assert_eq!(said(&next), [format!("turn 2 of {id}")], "the conversation goes on");
    let warned = next.iter().any(|e| matches!(&e.kind, EventKind::Warning { .. }));
    assert!(!warned, "a turn that continues the conversation warns of nothing: {}", names(&next));
    mini.finish().await;
}

/// A CLI asked to continue a conversation that reports another did not resume it: the turn fails
/// as soon as it says so, its process is stopped, and the key keeps its conversation — a fresh
/// conversation is never taken silently in its place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cli_that_does_not_resume_the_conversation_fails_the_turn_and_the_key_keeps_it() {
    let mini = Mini::start();
    let session = mini.session(mini.options(PresetOptions::new())).await;
    let (_, first) = support::run(&mini.harness, &session, "hello", |_| None).await;
    let id = payload(&first).session_id.expect("session id");

    let (_, forgot) = support::run(&mini.harness, &session, "forget it all", |_| None).await;
    let end = terminal(&forgot);
    assert_eq!(end.status, TurnStatus::Failed, "{}", names(&forgot));
    let reason = end.result.reason.clone().unwrap_or_default();
    assert!(reason.contains(&format!("asked to continue conversation `{id}` but reported `s-")), "{reason}");
    assert!(said(&forgot).is_empty(), "nothing of the other conversation ran on: {:?}", said(&forgot));
    assert_eq!(payload(&forgot).session_id.as_deref(), Some(id.as_str()));
    assert_eq!(mini.argv(2)[..2], ["--resume".to_owned(), id.clone()]);
    let status = mini.harness.status(&session).await.expect("status");
    assert_eq!(status.provider_session_id.as_deref(), Some(id.as_str()), "not replaced");

    let (_, next) = support::run(&mini.harness, &session, "still there?", |_| None).await;
    assert_eq!(terminal(&next).status, TurnStatus::Completed, "{}", names(&next));
    assert_eq!(said(&next), [format!("turn 2 of {id}")], "the conversation goes on");
    mini.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_from_a_config_and_bad_options_refused_before_anything_runs() {
    let mini = Mini::start();
    let config = SessionConfig::from_json_value(json!({
        "provider": "preset:mini-agent",
        "id": "from-config",
        "cwd": mini.workspace,
        "model": "large",
        "provider_options": {"key": "cfg", "on_busy": "fail", "args": ["--json-flag"]}
    }))
    .expect("config parses");
    let session = mini.harness.start_session_from_config(config).await.expect("session from config");
    let (_, events) = support::run(&mini.harness, &session, "configured", |_| None).await;
    assert_eq!(terminal(&events).status, TurnStatus::Completed, "{}", names(&events));
    assert!(said(&events)[0].ends_with(" with large"), "{:?}", said(&events));
    assert!(mini.argv(1).contains(&"--json-flag".to_owned()), "{:?}", mini.argv(1));
    let started = mini.exec.commands().len();

    let refused = |options: Value| {
        SessionConfig::from_json_value(
            json!({"provider": "preset:mini-agent", "cwd": mini.workspace, "provider_options": options}),
        )
        .expect("parses")
    };
    let error = mini.harness.start_session_from_config(refused(json!({"on_busy": "later"}))).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidConfig);
    assert!(error.to_string().contains("provider_options.on_busy"), "{error}");
    let error = mini.harness.start_session_from_config(refused(json!({"binary": "/bin/sh"}))).await.unwrap_err();
    assert!(matches!(&error, Error::InvalidOption { option: "provider_options.binary", .. }), "{error}");
    assert!(error.to_string().contains("not on the executable allow-list"), "{error}");
    let error = mini.harness.start_session_from_config(refused(json!({"approvals": "ask"}))).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Unsupported, "{error}");
    let error = mini.harness.start_session_from_config(refused(json!({"max_turns": 3}))).await.unwrap_err();
    assert!(matches!(&error, Error::InvalidOption { option: "provider_options.max_turns", .. }), "{error}");
    // A flag the preset passes a value of the session with, given again, or another name of
    // it: the CLI would take one of the two. (Without a model, `--model` among the arguments is
    // the only one.)
    for (args, named) in [
        (json!(["--model", "big"]), "`--model`"),
        (json!(["--model=big"]), "`--model`"),
        (json!(["-m", "big"]), "`-m` (`--model`)"),
        (json!(["-m=big"]), "`-m` (`--model`)"),
        (json!(["--resume", "s-1"]), "`--resume`"),
    ] {
        let config = json!({"provider": "preset:mini-agent", "cwd": mini.workspace, "model": "large",
            "provider_options": {"args": args}});
        let config = SessionConfig::from_json_value(config).expect("parses");
        let error = mini.harness.start_session_from_config(config).await.unwrap_err();
        assert!(matches!(&error, Error::InvalidOption { option: "provider_options.args", .. }), "{error}");
        let own = format!("{named} is in preset `mini-agent`'s own command line, before `{{");
        assert!(error.to_string().contains(&own), "{error}");
    }
    // A reserved flag, in any session.
    for (options, field) in [
        (json!({"args": ["--continue"]}), "provider_options.args"),
        (json!({"args": ["-c"]}), "provider_options.args"),
        (json!({"args": ["--continue=yes"]}), "provider_options.args"),
    ] {
        let error = mini.harness.start_session_from_config(refused(options)).await.unwrap_err();
        assert!(matches!(&error, Error::InvalidOption { option, .. } if *option == field), "{error}");
        assert!(error.to_string().contains("is reserved by preset `mini-agent` (`reserved_args`)"), "{error}");
    }
    let sandboxed = SessionConfig::from_json_value(
        json!({"provider": "preset:mini-agent", "cwd": mini.workspace, "sandbox": "read_only"}),
    )
    .expect("parses");
    let error = mini.harness.start_session_from_config(sandboxed).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Unsupported, "{error}");
    assert_eq!(mini.exec.commands().len(), started, "nothing was spawned for a refused session");
    // A CLI that is not there fails the start, before any turn.
    let missing = mini.workspace.join("no-such-agent");
    let script = mini.catalog.get("mini-agent").expect("loaded").program().to_owned();
    let catalog = PresetCatalog::builder(AllowList::new().allow(&missing).allow(&script)).dir(&mini.presets).load();
    let harness = support::harness(&catalog, &mini.exec, Arc::new(MemoryStore::new()));
    let error = harness
        .start_session("preset:mini-agent", mini.options(PresetOptions::new().binary(&missing)))
        .await
        .expect_err("a missing CLI fails the start");
    assert_eq!(error.kind(), ErrorKind::ProviderUnavailable, "{error}");
    assert!(error.to_string().contains("no-such-agent` was not found"), "{error}");
    harness.shutdown().await;
    mini.finish().await;
}

/// A preset without a version check still has its program looked at before the session
/// starts: one that cannot run (a directory, a file without an execute bit) fails the start, as
/// a missing one does, instead of its first turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_version_check_a_cli_that_cannot_run_fails_the_start() {
    let programs = ProgramDir::new("preset-unversioned");
    let script = programs.script("mini-agent", MINI_AGENT);
    let presets = programs.dir("presets");
    let mut preset = mini_preset(&script);
    preset.as_object_mut().expect("an object").remove("version");
    std::fs::write(presets.join("mini-agent.json"), preset.to_string()).expect("preset written");
    let workspace = programs.dir("work");
    let directory = programs.dir("a-directory");
    let plain = workspace.join("plain-file");
    std::fs::write(&plain, MINI_AGENT).expect("written");
    let allow = AllowList::shipped().allow(&script).allow(&directory).allow(&plain);
    let catalog = PresetCatalog::builder(allow).dir(&presets).load();
    assert!(catalog.errors().is_empty(), "{:?}", catalog.errors());
    let exec = Arc::new(RecordingExec::new(Arc::new(LocalExec::new())));
    let harness = support::harness(&catalog, &exec, Arc::new(MemoryStore::new()));
    let options = |preset: PresetOptions| SessionOptions::new(&workspace).provider_option(preset);
    for (binary, problem) in [(&directory, "is a directory"), (&plain, "is not executable")] {
        let error = harness
            .start_session("preset:mini-agent", options(PresetOptions::new().binary(binary)))
            .await
            .expect_err("a CLI that cannot run fails the start");
        assert_eq!(error.kind(), ErrorKind::ProviderUnavailable, "{error}");
        assert!(error.to_string().contains(problem), "{error}");
    }
    harness.start_session("preset:mini-agent", options(PresetOptions::new())).await.expect("the script starts");
    assert!(exec.commands().is_empty(), "nothing was spawned before a turn");
    harness.shutdown().await;
}

#[test]
fn bad_presets_are_reported_by_file_and_field_and_the_others_still_load() {
    let programs = ProgramDir::new("preset-bad");
    let script = programs.script("mini-agent", MINI_AGENT);
    let dir = programs.dir("presets");
    let write = |name: &str, preset: &Value| std::fs::write(dir.join(name), preset.to_string()).expect("written");
    let good = mini_preset(&script);
    write("a-good.json", &good);
    let mut placeholder = good.clone();
    placeholder["id"] = json!("placeholder");
    placeholder["args"][4] = json!("{promt}");
    write("b-placeholder.json", &placeholder);
    let mut regex = good.clone();
    regex["id"] = json!("regex");
    regex["matchers"]["failure"][0]["when"] = json!("^FAILED (?P<why>.*$");
    write("c-regex.json", &regex);
    let mut missing = good.clone();
    missing["id"] = json!("missing");
    missing.as_object_mut().unwrap().remove("framing");
    write("d-missing.json", &missing);
    let mut outside = good.clone();
    outside["id"] = json!("outside");
    outside["program"] = json!("/bin/sh");
    write("e-outside.json", &outside);
    let mut twice = good.clone();
    twice["description"] = json!("the same ID again");
    write("f-twice.json", &twice);
    std::fs::write(dir.join("g-not-json.json"), "{ nope").expect("written");
    std::fs::write(dir.join("notes.txt"), "not a preset").expect("written");
    // A file whose ID is a shipped preset's replaces it.
    let mut codex = good.clone();
    codex["id"] = json!("codex-exec");
    codex["description"] = json!("my own codex");
    write("h-codex.json", &codex);
    // A preset is a few KB: a file of megabytes is not read whole.
    std::fs::write(dir.join("i-huge.json"), " ".repeat(2 << 20)).expect("written");

    let catalog = PresetCatalog::builder(AllowList::shipped().allow(&script)).dir(&dir).load();
    let ids: Vec<&str> = catalog.presets().map(|p| p.id()).collect();
    assert_eq!(ids, ["claude-print", "codex-exec", "mini-agent", "pi-print"]);
    let codex = catalog.get("codex-exec").expect("replaced");
    assert_eq!(codex.description(), Some("my own codex"));
    assert!(codex.origin().ends_with("h-codex.json"), "{}", codex.origin());
    assert!(catalog.get("mini-agent").is_some_and(|p| p.origin().ends_with("a-good.json")), "the first file wins");

    let errors: Vec<(String, String, String)> = catalog
        .errors()
        .iter()
        .map(|e| {
            let file = Path::new(&e.origin).file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
            (file, e.field.clone(), e.message.clone())
        })
        .collect();
    let expect = [
        ("b-placeholder.json", "args[4]", "unknown placeholder"),
        ("c-regex.json", "matchers.failure[0].when", "invalid regex"),
        ("d-missing.json", "", "missing field `framing`"),
        ("e-outside.json", "program", "`/bin/sh` is not on the executable allow-list"),
        ("f-twice.json", "id", "`mini-agent` is already defined by"),
        ("g-not-json.json", "", "not JSON"),
        ("i-huge.json", "", "cannot read: the file is larger than 1048576 bytes"),
    ];
    assert_eq!(errors.len(), expect.len(), "{errors:#?}");
    for ((file, field, message), (want_file, want_field, says)) in errors.iter().zip(expect) {
        assert_eq!((file.as_str(), field.as_str()), (want_file, want_field), "{message}");
        assert!(message.contains(says), "{file}: {message}");
    }
    let shown = catalog.errors()[0].to_string();
    assert!(shown.contains("b-placeholder.json: args[4]: unknown placeholder"), "{shown}");

    let missing_dir = PresetCatalog::builder(AllowList::shipped()).dir(programs.path().join("nowhere")).load();
    assert_eq!(missing_dir.presets().count(), 3, "the shipped presets still load");
    assert!(
        missing_dir.errors()[0].message.starts_with("cannot read the presets directory"),
        "{:?}",
        missing_dir.errors()
    );
    let nothing_allowed = PresetCatalog::builder(AllowList::new()).load();
    assert_eq!(nothing_allowed.presets().count(), 0);
    assert!(nothing_allowed.errors().iter().all(|e| e.field == "program"), "{:?}", nothing_allowed.errors());
}

/// A key is one conversation: resuming another one on a key other live sessions hold would
/// move their next turns into it without a word, so it is refused.
/// A session started anew under the ID of an earlier, closed one starts a new conversation:
/// the key it takes by default (its ID) does not carry the earlier session's into it. A key
/// set on purpose is shared on purpose: a new session of that key continues its conversation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_session_under_an_earlier_ones_id_starts_a_new_conversation() {
    let mini = Mini::start();
    let first = mini.session(mini.options(PresetOptions::new()).id("again")).await;
    let (_, events) = support::run(&mini.harness, &first, "hello", |_| None).await;
    let old = payload(&events).session_id.expect("session id");
    mini.harness.stop_session(&first, false).await.expect("stopped");

    let again = mini.session(mini.options(PresetOptions::new()).id("again").reuse(Reuse::Closed)).await;
    assert_eq!(mini.harness.status(&again).await.expect("status").provider_session_id, None);
    let (_, events) = support::run(&mini.harness, &again, "hello again", |_| None).await;
    assert_eq!(terminal(&events).status, TurnStatus::Completed, "{}", names(&events));
    let argv = mini.argv(mini.exec.commands().len() - 1);
    assert!(!argv.contains(&"--resume".to_owned()), "{argv:?}");
    let new = payload(&events).session_id.expect("session id");
    assert_ne!(new, old);
    assert_eq!(said(&events), [format!("turn 1 of {new}")]);
    assert_eq!(payload(&events).turn, 1, "counted from the start");

    let keyed = || mini.options(PresetOptions::new().key("ticket-7"));
    let owner = mini.session(keyed().id("owner")).await;
    let (_, events) = support::run(&mini.harness, &owner, "hello", |_| None).await;
    let shared = payload(&events).session_id.expect("session id");
    mini.harness.stop_session(&owner, false).await.expect("stopped");
    let next = mini.session(keyed().id("owner").reuse(Reuse::Closed)).await;
    let (_, events) = support::run(&mini.harness, &next, "and on", |_| None).await;
    assert_eq!(said(&events), [format!("turn 2 of {shared}")], "the key's conversation goes on");
    mini.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resuming_another_conversation_on_a_key_other_sessions_hold_is_refused() {
    let mini = Mini::start();
    let keyed = || mini.options(PresetOptions::new().key("shared"));
    let first = mini.session(keyed().id("first")).await;
    // Before its first turn too: that turn would continue the resumed conversation.
    let early = keyed().id("early").resume_provider_session("s-other");
    let err = mini.harness.start_session("preset:mini-agent", early).await.unwrap_err();
    assert!(
        matches!(err, Error::InvalidOption { option: "conversation", ref reason } if reason.contains("new conversation")),
        "{err:?}"
    );
    let (_, events) = support::run(&mini.harness, &first, "hello", |_| None).await;
    let id = payload(&events).session_id.expect("session id");

    let other = keyed().id("second").resume_provider_session("s-other");
    let err = mini.harness.start_session("preset:mini-agent", other).await.unwrap_err();
    assert!(
        matches!(err, Error::InvalidOption { option: "conversation", ref reason } if reason.contains(&id)),
        "{err:?}"
    );
    // The key's own conversation may be resumed, and the first session's turns go on in it.
    let _same = mini.session(keyed().id("third").resume_provider_session(id.clone())).await;
    let (_, next) = support::run(&mini.harness, &first, "again", |_| None).await;
    assert_eq!(said(&next), [format!("turn 2 of {id}")]);
    mini.finish().await;
}

/// Writes 300 KB to stdout, more than a pipe holds, before it reads its prompt from stdin.
const CHATTY: &str = r#"
if [ "$1" = "--version" ]; then echo "chatty 1.0.0"; exit 0; fi
line=$(printf '%0999d' 0)
i=0
while [ $i -lt 300 ]; do echo "$line"; i=$((i + 1)); done
echo "RESULT read $(wc -c | tr -d ' ') bytes"
"#;

/// A prompt on stdin goes beside the reading of stdout: a CLI that writes more than a pipe
/// holds before reading a prompt larger than one would wait on us while we waited on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_stdin_prompt_to_a_cli_that_writes_first_does_not_deadlock() {
    let programs = ProgramDir::new("preset-chatty");
    let script = programs.script("chatty", CHATTY);
    let preset = json!({
        "schema_version": 1, "id": "chatty", "program": script, "framing": "lines",
        "args": [], "prompt": "stdin",
        "version": {"args": ["--version"], "contains": "chatty", "min": "1.0.0"},
        "matchers": {"result": [{"when": "^RESULT (?P<text>.*)$", "value": "text"}]},
        "events": [{"when": "^0+$", "emit": "drop"}, {"when": "^RESULT ", "emit": "drop"}]
    });
    let catalog = support::catalog_of(&programs, &script, &preset);
    let workspace = programs.dir("work");
    let (exec, harness) = support::harness_of(&catalog);
    let session =
        harness.start_session("preset:chatty", SessionOptions::new(&workspace)).await.expect("session starts");

    let prompt = "p".repeat(1 << 20);
    let run = support::run(&harness, &session, &prompt, |_| None);
    let (_, events) = tokio::time::timeout(Duration::from_secs(30), run).await.expect("the turn ends");
    let end = terminal(&events);
    assert_eq!(end.status, TurnStatus::Completed, "{}", names(&events));
    assert_eq!(payload(&events).text.as_deref(), Some("read 1048576 bytes"), "{}", names(&events));
    support::finish(&harness, &exec).await;
    harness.shutdown().await;
}

/// Starts a sleeper outside its process group, as a CLI's shell command may, and finishes.
const ESCAPER: &str = r#"
if [ "$1" = "--version" ]; then echo "escaper 1.0.0"; exit 0; fi
setsid sh -c 'echo $$ > escaped.pid.new && mv escaped.pid.new escaped.pid && exec sleep 300' </dev/null >/dev/null 2>&1 &
while [ ! -s escaped.pid ]; do sleep 0.01; done
echo "RESULT left one behind"
"#;

/// The catalog of a line-framed preset `id` running the shell script `body` from `programs`
/// (which answers `--version` with `<id> 1.0.0`), whose `RESULT <text>` line is its result.
fn script_catalog(programs: &ProgramDir, id: &str, body: &str, events: Value) -> PresetCatalog {
    let script = programs.script(id, body);
    let preset = json!({
        "schema_version": 1, "id": id, "program": script, "framing": "lines",
        "args": ["--", "{prompt}"],
        "version": {"args": ["--version"], "contains": id, "min": "1.0.0"},
        "matchers": {"result": [{"when": "^RESULT (?P<text>.*)$", "value": "text"}]},
        "events": events
    });
    support::catalog_of(programs, &script, &preset)
}

/// A preset that passes the prompt and the model as arguments of their own, before any `--`:
/// a prompt or a model starting with `-` would reach the CLI as one of its options
/// (`--dangerously-skip-permissions`), and is refused by name before anything runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_the_cli_would_read_as_an_option_is_refused() {
    let programs = ProgramDir::new("preset-flags");
    let script =
        programs.script("flags", "[ \"$1\" = --version ] && { echo flags 1.0.0; exit 0; }\necho \"RESULT $*\"\n");
    let preset = json!({
        "schema_version": 1, "id": "flags", "program": script, "framing": "lines",
        "args": ["-p", "{prompt}", {"if": "model", "then": ["{model}"]}],
        "version": {"args": ["--version"], "contains": "flags", "min": "1.0.0"},
        "matchers": {"result": [{"when": "^RESULT (?P<text>.*)$", "value": "text"}]},
        "events": [{"when": "^RESULT ", "emit": "drop"}]
    });
    let catalog = support::catalog_of(&programs, &script, &preset);
    let (exec, harness) = support::harness_of(&catalog);
    let cwd = programs.dir("work");
    let refused = harness.start_session("preset:flags", SessionOptions::new(&cwd).model("--yolo")).await.unwrap_err();
    assert!(
        matches!(&refused, Error::InvalidOption { option: "model", reason } if reason.contains("`{model}`")),
        "{refused:?}"
    );
    assert!(exec.commands().is_empty(), "nothing was spawned");
    let session = harness.start_session("preset:flags", SessionOptions::new(&cwd)).await.expect("session starts");
    let spawned = exec.commands().len();
    for (prompt, model) in [("--dangerously-skip-permissions", None), ("hello", Some("-m"))] {
        let mut options = TurnOptions::new();
        if let Some(model) = model {
            options = options.model(model);
        }
        let refused = harness.start_turn(&session, prompt, options).await.unwrap_err();
        assert!(matches!(&refused, Error::InvalidOption { option: "input" | "model", .. }), "{refused:?}");
    }
    assert_eq!(exec.commands().len(), spawned, "no turn was spawned");
    let (_, events) = support::run(&harness, &session, "hello", |_| None).await;
    assert_eq!(terminal(&events).result.text.as_deref(), Some("-p hello"));
    harness.stop_session(&session, false).await.unwrap();
}

/// The catalog of a preset running [`ESCAPER`] from `programs`.
fn escaper_catalog(programs: &ProgramDir) -> PresetCatalog {
    script_catalog(programs, "escaper", ESCAPER, json!([{"when": "^RESULT ", "emit": "drop"}]))
}

/// What a session's CLI left running outside its process group, which ending the group misses,
/// ends with the session — and only that session's: another harness of this process running a
/// session of the same ID keeps its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_cli_left_outside_its_process_group_ends_with_the_session() {
    let programs = ProgramDir::new("preset-escaper");
    let catalog = escaper_catalog(&programs);
    let running = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|stat| stat.rsplit(')').next().is_some_and(|rest| !rest.trim_start().starts_with('Z')))
    };
    // Two harnesses, each running a session `twin` whose CLI leaves a sleeper behind.
    let mut twins = Vec::new();
    for name in ["one", "two"] {
        let workspace = programs.dir(name);
        let (exec, harness) = support::harness_of(&catalog);
        let options = SessionOptions::new(&workspace).id("twin");
        let session = harness.start_session("preset:escaper", options).await.expect("session starts");
        let (_, events) = support::run(&harness, &session, "go", |_| None).await;
        assert_eq!(terminal(&events).status, TurnStatus::Completed, "{}", names(&events));
        let pid: u32 =
            std::fs::read_to_string(workspace.join("escaped.pid")).expect("pid").trim().parse().expect("a pid");
        assert!(running(pid), "the sleeper runs on after its turn");
        twins.push((harness, exec, session, pid));
    }

    for (i, (harness, exec, session, pid)) in twins.iter().enumerate() {
        harness.stop_session(session, false).await.expect("stopped");
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while running(*pid) {
            assert!(std::time::Instant::now() < deadline, "{pid} outlived its session");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if let Some((_, _, _, other)) = twins.get(i + 1) {
            assert!(running(*other), "the other harness's `twin` keeps its sleeper");
        }
        support::finish(harness, exec).await;
        harness.shutdown().await;
    }
}

/// Starts a sleeper outside its process group that keeps stdout open, then works until stopped.
const HOLDER: &str = r#"
if [ "$1" = "--version" ]; then echo "holder 1.0.0"; exit 0; fi
setsid sh -c 'echo $$ > escaped.pid.new && mv escaped.pid.new escaped.pid && exec sleep 300' </dev/null 2>/dev/null &
while [ ! -s escaped.pid ]; do sleep 0.01; done
echo "WORKING"
while true; do sleep 0.1; done
"#;

/// A cancel ends the turn at once though a process the CLI left outside its group holds its
/// stdout open (the turn is not failed after `provider_command_timeout`, the session stays
/// usable), and the sleeper ends with the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_is_not_held_up_by_a_process_that_keeps_stdout_open() {
    let programs = ProgramDir::new("preset-holder");
    let working = json!([{"when": "^(?P<m>WORKING)$", "emit": "warning", "message": "m"}]);
    let catalog = script_catalog(&programs, "holder", HOLDER, working);
    let workspace = programs.dir("work");
    let (exec, harness) = support::harness_of(&catalog);
    let options = SessionOptions::new(&workspace).provider_command_timeout(Duration::from_secs(60));
    let session = harness.start_session("preset:holder", options).await.expect("session starts");
    let mut turn = watch(&harness, &session, "go").await;
    turn.until(|e| matches!(e.kind, EventKind::Warning { .. })).await;
    let pid: u32 = std::fs::read_to_string(workspace.join("escaped.pid")).expect("pid").trim().parse().expect("a pid");
    let cancelled = std::time::Instant::now();
    harness.cancel(turn.turn()).await.expect("cancel");
    let events = turn.into_events().await;
    assert_eq!(terminal(&events).status, TurnStatus::Interrupted, "{}", names(&events));
    assert!(cancelled.elapsed() < Duration::from_secs(20), "the turn ended {:?} after the cancel", cancelled.elapsed());
    let status = harness.status(&session).await.expect("status");
    assert_eq!(status.status, SessionState::Idle, "the session goes on");

    harness.stop_session(&session, false).await.expect("stopped");
    let gone = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map_or(true, |stat| stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')))
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !gone(pid) {
        assert!(std::time::Instant::now() < deadline, "{pid} outlived its session");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    support::finish(&harness, &exec).await;
    harness.shutdown().await;
}

/// A runtime dropped with a session still live ends what the session's CLI left outside its
/// process group too: the session's task, dropped unfinished, asks for the scan a close runs.
#[test]
fn what_a_cli_left_outside_its_process_group_ends_when_the_runtime_is_dropped() {
    let programs = ProgramDir::new("preset-escaper-drop");
    let catalog = escaper_catalog(&programs);
    let workspace = programs.dir("work");
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let (harness, pid) = runtime.block_on(async {
        let (_exec, harness) = support::harness_of(&catalog);
        let session =
            harness.start_session("preset:escaper", SessionOptions::new(&workspace)).await.expect("session starts");
        let (_, events) = support::run(&harness, &session, "go", |_| None).await;
        assert_eq!(terminal(&events).status, TurnStatus::Completed, "{}", names(&events));
        let pid: u32 =
            std::fs::read_to_string(workspace.join("escaped.pid")).expect("pid").trim().parse().expect("a pid");
        (harness, pid)
    });
    let running = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|stat| stat.rsplit(')').next().is_some_and(|rest| !rest.trim_start().starts_with('Z')))
    };
    assert!(running(pid), "the sleeper runs on after its turn");
    drop(runtime);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while running(pid) {
        assert!(std::time::Instant::now() < deadline, "{pid} outlived the runtime its session ran on");
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(harness);
}

/// Sessions given the same exec of their own share one value of it while they run, so the CLI's
/// version is probed once, as for the harness's exec.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_with_the_same_exec_of_their_own_probe_the_cli_once() {
    let mini = Mini::start();
    let own = Arc::new(RecordingExec::new(Arc::new(LocalExec::new())));
    let options =
        |id: &str| mini.options(PresetOptions::new()).id(id).exec(Arc::clone(&own) as Arc<dyn agent_core::exec::Exec>);
    let first = mini.session(options("first")).await;
    let second = mini.session(options("second")).await;
    let probes = own.commands().iter().filter(|c| c.args.iter().any(|a| a == "--version")).count();
    assert_eq!(probes, 1, "{:?}", own.commands().iter().map(|c| &c.args).collect::<Vec<_>>());
    let (_, events) = support::run(&mini.harness, &second, "hello", |_| None).await;
    assert_eq!(terminal(&events).status, TurnStatus::Completed, "{}", names(&events));
    assert_eq!(own.commands().len(), 2, "the probe and the turn ran through the session's own exec");
    drop(first);
    support::finish(&mini.harness, &own).await;
    mini.finish().await;
}

/// A prompt longer than one command-line argument may be fails its turn saying so, and how to
/// send it instead; the CLI is there and the session goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_too_long_for_the_command_line_says_so() {
    let mini = Mini::start();
    let session = mini.session(mini.options(PresetOptions::new())).await;
    // Linux takes at most 128 KiB in one argument: refused before the turn is recorded.
    let refused = mini.harness.start_turn(&session, "p".repeat(200 << 10), TurnOptions::new()).await.unwrap_err();
    let Error::InvalidOption { option: "input", reason } = &refused else { panic!("{refused:?}") };
    assert!(reason.contains("Linux allows at most") && reason.contains("\"prompt\": \"stdin\""), "{reason}");
    assert!(mini.harness.status(&session).await.unwrap().current_turn.is_none(), "no turn was recorded");
    let (_, next) = support::run(&mini.harness, &session, "short", |_| None).await;
    assert_eq!(terminal(&next).status, TurnStatus::Completed, "{}", names(&next));
    mini.finish().await;
}
