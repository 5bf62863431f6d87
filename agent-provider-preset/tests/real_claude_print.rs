//! The shipped `claude-print` preset on the real `claude` 2.1.197 (from `cargo xtask clis`),
//! through the public `Harness`, offline against the testkit's fake Messages server on
//! 127.0.0.1: one process per turn, a conversation continued by its key (also after the harness
//! restarts on a SQLite file), and approvals asked through Claude's stdio permission prompt.
//!
//! Every test fails with "run `cargo xtask clis`" when the pinned CLI is not installed.

mod support;

use std::sync::Arc;
use std::time::Duration;

use agent_core::event::ToolStatus;
use agent_core::{EventKind, ExpiryReason, RequestKind, Response, TurnStatus};
use agent_exec::LocalExec;
use agent_provider_preset::{Approvals, PresetCatalog, PresetOptions};
use agent_store_sqlite::SqliteStore;
use agent_testkit::events::{count, names, terminal};
use agent_testkit::recording::RecordingExec;
use agent_testkit::{FakeModel, OfflineEnv, Provider, Scenario};
use support::{World, allow, cli, deltas, model_history, payload, requests};

fn tool_outputs(events: &[Arc<agent_core::Event>]) -> Vec<(ToolStatus, String)> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolCompleted { status, output, .. } => Some((*status, output.clone().unwrap_or_default())),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_text_turn_streams_and_the_second_turn_continues_the_conversation() {
    let scenario = Scenario::new().deltas(["Hel", "lo ", "there"], 0).echo("recall: ");
    let world = World::start(Provider::Claude, "claude-print", scenario).await;
    let session = world.session(world.options().system_prompt("Answer briefly.")).await;

    let (_, first) = world.run(&session, "Remember the word PINEAPPLE", |_| None).await;
    let end = terminal(&first);
    assert_eq!(end.status, TurnStatus::Completed, "{}", names(&first));
    assert_eq!(end.result.text.as_deref(), Some("Hello there"));
    assert_eq!(deltas(&first), "Hello there", "streamed as deltas");
    assert_eq!(count(&first, "assistant_message"), 1, "{}", names(&first));
    assert!(end.result.usage.is_some_and(|u| u.output_tokens.is_some_and(|n| n > 0)), "{:?}", end.result.usage);
    let one = payload(&first);
    assert_eq!((one.status, one.turn, one.exit_code), (TurnStatus::Completed, 1, Some(0)));
    assert_eq!(one.text.as_deref(), Some("Hello there"));
    let conversation = one.session_id.clone().expect("claude's session id");
    let status = world.harness.status(&session).await.expect("status");
    assert_eq!(status.provider_session_id.as_deref(), Some(conversation.as_str()), "kept as the provider session");

    let (_, second) = world.run(&session, "Which word?", |_| None).await;
    assert_eq!(terminal(&second).status, TurnStatus::Completed, "{}", names(&second));
    assert_eq!(terminal(&second).result.text.as_deref(), Some("recall: Which word?"));
    let two = payload(&second);
    assert_eq!((two.turn, two.session_id.as_deref()), (2, Some(conversation.as_str())));
    let history = model_history(&world.server, 1);
    assert!(history.contains("Remember the word PINEAPPLE") && history.contains("Hello there"), "{history}");
    let system = world.server.model_requests()[0].body.as_ref().expect("a JSON body")["system"].to_string();
    assert!(system.contains("Answer briefly."), "the system prompt reached the model: {system}");

    // One process per turn; the second continued the first's conversation.
    let commands = world.exec.commands();
    assert_eq!(commands.len(), 3, "--version, then one process per turn: {commands:?}");
    let argv = |n: usize| commands[n].args.iter().map(|a| a.to_string_lossy().into_owned()).collect::<Vec<_>>();
    assert_eq!(argv(0), ["--version"]);
    assert!(!argv(1).contains(&"--resume".to_owned()), "{:?}", argv(1));
    assert!(argv(2).windows(2).any(|w| w == ["--resume", conversation.as_str()]), "{:?}", argv(2));
    assert_eq!(argv(2).last().map(String::as_str), Some("Which word?"), "the prompt is one argument, after `--`");
    world.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_approves_and_denies_a_writing_bash_command() {
    let scenario = Scenario::new()
        .shell("touch approved.txt && echo approved")
        .quote_tool_result("Tool said: ")
        .shell("touch denied.txt && echo denied")
        .quote_tool_result("Tool said: ")
        .shell("touch cancelled.txt && echo cancelled")
        .text("not reached");
    let world = World::start(Provider::Claude, "claude-print", scenario).await;
    let ask = PresetOptions::new()
        .approvals(Approvals::Ask)
        .approval_risk("high")
        .approval_audience("release-managers")
        .approval_timeout(Duration::from_secs(60));
    let session = world.session(world.options_with(ask)).await;
    let caps = world.harness.capabilities(&session).await.expect("capabilities");
    assert!(caps.approvals.is_available() && caps.questions.is_available(), "{caps:?}");

    let (_, events) = world.run(&session, "make approved", |_| Some(Response::approve())).await;
    let asked = requests(&events);
    assert_eq!(asked.len(), 1, "{}", names(&events));
    assert_eq!(asked[0].kind, RequestKind::CommandApproval);
    assert_eq!(asked[0].metadata["command"], "touch approved.txt && echo approved");
    assert_eq!(asked[0].metadata["risk"], "high");
    assert_eq!(asked[0].metadata["audience"], "release-managers");
    assert_eq!(asked[0].metadata["timeout_ms"], 60_000);
    assert!(asked[0].expires_at.is_some(), "the request carries its deadline");
    assert_eq!(count(&events, "request_resolved"), 1);
    assert!(world.workspace().join("approved.txt").exists(), "the approved command ran");
    assert_eq!(tool_outputs(&events), [(ToolStatus::Completed, "approved".to_owned())]);
    assert_eq!(terminal(&events).status, TurnStatus::Completed, "{}", names(&events));
    assert_eq!(terminal(&events).result.text.as_deref(), Some("Tool said: approved"));

    let (_, events) = world.run(&session, "make denied", |_| Some(Response::deny("no shell today"))).await;
    assert_eq!(requests(&events).len(), 1, "{}", names(&events));
    assert!(!world.workspace().join("denied.txt").exists(), "the denied command did not run");
    assert_eq!(tool_outputs(&events), [(ToolStatus::Declined, "no shell today".to_owned())]);
    let end = terminal(&events);
    assert_eq!(end.status, TurnStatus::Completed, "the agent goes on after a denial: {}", names(&events));
    assert_eq!(end.result.text.as_deref(), Some("Tool said: no shell today"), "the agent saw the denial");
    assert_eq!(payload(&events).turn, 2);

    // Cancel: the tool is refused and the turn stops, interrupted.
    let (_, events) = world.run(&session, "make cancelled", |_| Some(Response::cancel("stop here"))).await;
    assert!(!world.workspace().join("cancelled.txt").exists(), "the cancelled command did not run");
    assert_eq!(terminal(&events).status, TurnStatus::Interrupted, "{}", names(&events));
    assert_eq!(payload(&events).status, TurnStatus::Interrupted);
    world.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_nobody_answers_in_time_is_denied() {
    let scenario = Scenario::new().shell("touch late.txt && echo late").quote_tool_result("Tool said: ");
    let world = World::start(Provider::Claude, "claude-print", scenario).await;
    let ask = PresetOptions::new().approvals(Approvals::Ask).approval_timeout(Duration::from_millis(500));
    let session = world.session(world.options_with(ask)).await;
    let (_, events) = world.run(&session, "make late", |_| None).await;
    let expired =
        events.iter().any(|e| matches!(&e.kind, EventKind::RequestExpired { reason: ExpiryReason::Timeout, .. }));
    assert!(expired, "{}", names(&events));
    assert!(!world.workspace().join("late.txt").exists(), "no answer: the tool did not run");
    assert_eq!(terminal(&events).status, TurnStatus::Completed, "{}", names(&events));
    let text = terminal(&events).result.text.clone().unwrap_or_default();
    assert!(text.starts_with("Tool said: ") && text.contains("timed out"), "the agent saw the denial: {text}");
    world.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_continues_after_the_harness_restarts_on_a_sqlite_file() {
    let cli = cli(Provider::Claude);
    let server = FakeModel::start(Scenario::new().echo("noted: ").echo("recall: ")).await.expect("fake model");
    let env = OfflineEnv::new(&cli, &server).expect("offline environment");
    let db = env.dir().join("sessions.db");
    let options = || env.session_options().id("ticket-7").provider_option(support::preset_options(&cli, &env));
    let start = || {
        let store = Arc::new(SqliteStore::open(&db).expect("sqlite store"));
        let exec = Arc::new(RecordingExec::new(Arc::new(LocalExec::new())));
        let catalog = PresetCatalog::builder(allow(&cli)).load();
        (support::harness(&catalog, &exec, store), exec)
    };

    let (harness, exec) = start();
    let session = harness.start_session("preset:claude-print", options()).await.expect("session");
    let (_, first) = support::run(&harness, &session, "Remember the word PINEAPPLE", |_| None).await;
    assert_eq!(terminal(&first).status, TurnStatus::Completed, "{}", names(&first));
    let conversation = payload(&first).session_id.expect("claude's session id");
    support::finish(&harness, &exec).await;
    harness.shutdown().await;
    drop(harness);

    // A new harness on the same file: the stored session resumes under its ID and its key's
    // conversation goes on.
    let (harness, exec) = start();
    let resumed = harness.start_session("preset:claude-print", options().resume_session(session.id.clone())).await;
    let resumed = resumed.expect("the stored session resumes");
    assert_eq!(resumed, session);
    let status = harness.status(&resumed).await.expect("status");
    assert_eq!(status.provider_session_id.as_deref(), Some(conversation.as_str()));
    let (_, second) = support::run(&harness, &resumed, "Which word did I ask you to remember?", |_| None).await;
    assert_eq!(terminal(&second).status, TurnStatus::Completed, "{}", names(&second));
    assert_eq!(payload(&second).session_id.as_deref(), Some(conversation.as_str()));
    let history = model_history(&server, 1);
    assert!(history.contains("Remember the word PINEAPPLE") && history.contains("noted: "), "{history}");
    let resumed_turn = exec.commands().into_iter().find(|c| c.args.iter().any(|a| a == "--resume")).expect("--resume");
    assert!(resumed_turn.args.iter().any(|a| a.to_string_lossy() == conversation), "{resumed_turn:?}");
    support::finish(&harness, &exec).await;
    harness.shutdown().await;
    assert!(server.proxy().attempts().is_empty(), "claude tried to reach outside 127.0.0.1");
}

/// A turn that continues a conversation makes the checks the Claude provider makes before a
/// resume: it claims the conversation for as long as it runs (as a native session claims it),
/// is refused while a live session holds it, and is refused when claude's transcript lost its
/// messages (claude would go on from an empty conversation, reported as continued). A refused
/// turn starts no claude, and the key keeps its conversation for the next turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_conversation_or_a_transcript_without_messages_is_not_continued() {
    use agent_core::{Replay, SessionId, TurnOptions};
    use agent_provider_kit::conversations::{Claim, real_path};

    let scenario = Scenario::new().echo("noted: ").stall("thinking").echo("recall: ");
    let world = World::start(Provider::Claude, "claude-print", scenario).await;
    let session = world.session(world.options()).await;
    let (_, first) = world.run(&session, "Remember the word PINEAPPLE", |_| None).await;
    assert_eq!(terminal(&first).status, TurnStatus::Completed, "{}", names(&first));
    let conversation = payload(&first).session_id.expect("claude's session id");
    // Where the Claude provider claims a conversation: claude's configuration directory.
    let place = real_path(std::path::Path::new(world.env.var("CLAUDE_CONFIG_DIR").expect("CLAUDE_CONFIG_DIR")));
    let native = SessionId::new("native").unwrap();

    // While a turn continuing the conversation runs, the conversation is its session's.
    let turn = world.harness.start_turn(&session, "Think it over", TurnOptions::new()).await.expect("turn");
    let mut stream = world.harness.stream(&turn, Replay::Start, Some(support::IDLE)).await.expect("stream");
    while let Some(event) = stream.next().await {
        let event = event.expect("event");
        assert!(!event.is_terminal(), "the stalled turn ended: {:?}", event.kind);
        if matches!(event.kind, EventKind::MessageDelta { .. }) {
            break;
        }
    }
    let refused = Claim::take("claude", &place, &conversation, &native).expect_err("held by the running turn");
    assert_eq!(refused.holder.as_ref(), Some(&session.id), "{refused}");
    world.harness.cancel(&turn).await.expect("cancel");
    let mut ended = None;
    while let Some(event) = stream.next().await {
        if event.as_ref().is_ok_and(|e| e.is_terminal()) {
            ended = event.ok();
            break;
        }
    }
    let ended = ended.expect("the cancelled turn's end");
    assert!(matches!(&ended.kind, EventKind::TurnInterrupted(_)), "{:?}", ended.kind);

    // Held by a live session elsewhere: refused, and claude is not run.
    let held = Claim::take("claude", &place, &conversation, &native).expect("let go with its turn");
    let spawned = world.exec.commands().len();
    let (_, busy) = world.run(&session, "Which word?", |_| None).await;
    let end = terminal(&busy);
    assert_eq!(end.status, TurnStatus::Failed, "{}", names(&busy));
    let reason = end.result.reason.clone().unwrap_or_default();
    assert!(reason.contains(&format!("conversation `{conversation}` is open in live session `native`")), "{reason}");
    assert_eq!(world.exec.commands().len(), spawned, "claude was not run");
    drop(held);

    // A transcript that lost its messages: refused, claude not run.
    let transcript = world.env.find_file(&format!("{conversation}.jsonl")).expect("claude's transcript");
    let text = std::fs::read_to_string(&transcript).expect("transcript");
    let kept: Vec<&str> =
        text.lines().filter(|l| !l.contains(r#""type":"user""#) && !l.contains(r#""type":"assistant""#)).collect();
    assert!(kept.len() < text.lines().count(), "the transcript had messages: {text}");
    std::fs::write(&transcript, format!("{}\n", kept.join("\n"))).expect("cut");
    let (_, emptied) = world.run(&session, "Which word?", |_| None).await;
    let end = terminal(&emptied);
    assert_eq!(end.status, TurnStatus::Failed, "{}", names(&emptied));
    let reason = end.result.reason.clone().unwrap_or_default();
    assert!(reason.contains("holds none of its messages") && reason.contains(&conversation), "{reason}");
    assert_eq!(world.exec.commands().len(), spawned, "claude was not run");

    // Nothing was lost: with the transcript back, the key's conversation goes on.
    std::fs::write(&transcript, &text).expect("restore");
    let (_, recalled) = world.run(&session, "Which word did I ask you to remember?", |_| None).await;
    assert_eq!(terminal(&recalled).status, TurnStatus::Completed, "{}", names(&recalled));
    assert_eq!(payload(&recalled).session_id.as_deref(), Some(conversation.as_str()));
    let requests = world.server.model_requests().len();
    let history = model_history(&world.server, requests - 1);
    assert!(history.contains("Remember the word PINEAPPLE"), "{history}");
    world.finish().await;
}

/// A turn claude ends with an error result that has no `result` text (here its turn limit)
/// fails with claude's own words for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_over_its_turn_limit_fails_with_claudes_reason() {
    let scenario = Scenario::new().shell("echo from-claude").text("done");
    let world = World::start(Provider::Claude, "claude-print", scenario).await;
    let session = world.session(world.options_with(PresetOptions::new().max_turns(1))).await;
    let (_, events) = world.run(&session, "run it", |_| None).await;
    let end = terminal(&events);
    assert_eq!(end.status, TurnStatus::Failed, "{}", names(&events));
    let reason = end.result.reason.clone().unwrap_or_default();
    assert!(reason.contains("maximum number of turns"), "{reason}");
    world.finish().await;
}
