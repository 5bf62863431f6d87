//! The shipped `pi-print` preset on the real pi 1.6.0 and 0.79.10 (Node 22) and 0.73.1 (Node 20), from
//! `cargo xtask clis`, through the public `Harness`, offline against the testkit's fake Chat
//! Completions server on 127.0.0.1: `pi -p --mode json` with the prompt on stdin, one process
//! per turn, the second turn continuing the first's session with `--session`.
//!
//! Every test fails with "run `cargo xtask clis`" when a pinned CLI is not installed.

mod support;

use std::sync::Arc;

use agent_core::event::ToolStatus;
use agent_core::{EventKind, TurnStatus};
use agent_exec::LocalExec;
use agent_provider_preset::PresetCatalog;
use agent_store_memory::MemoryStore;
use agent_testkit::events::{count, names, terminal};
use agent_testkit::recording::RecordingExec;
use agent_testkit::{Cli, FakeModel, OfflineEnv, Provider, Scenario};
use support::{World, allow, deltas, model_history, payload, preset_options};

fn clis() -> Vec<Cli> {
    let fail = |e| panic!("{e}\nrun `cargo xtask clis`");
    Cli::pinned(Provider::Pi).unwrap_or_else(fail)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_text_turn_and_a_continued_second_turn_on_every_pinned_version() {
    for cli in clis() {
        let version = cli.version().to_owned();
        let scenario = Scenario::new().deltas(["Kiwi ", "noted"], 0).echo("recall: ");
        let server = FakeModel::start(scenario).await.expect("fake model");
        let env = OfflineEnv::new(&cli, &server).expect("offline environment");
        let exec = Arc::new(RecordingExec::new(Arc::new(LocalExec::new())));
        let catalog = PresetCatalog::builder(allow(&cli)).load();
        let harness = support::harness(&catalog, &exec, Arc::new(MemoryStore::new()));
        // A system prompt that names a file reaches the model as the text given: pi reads a
        // `--system-prompt` naming an existing file as that file.
        std::fs::write(env.workspace().join("notes.txt"), "FILE-CONTENT-NOT-FOR-THE-MODEL").unwrap();
        let options = env.session_options().provider_option(preset_options(&cli, &env)).system_prompt("notes.txt");
        let session = harness.start_session("preset:pi-print", options).await.expect("session starts");

        // A prompt pi would take for a file name on its command line goes on stdin, as text.
        let (_, first) = support::run(&harness, &session, "@notes.txt Remember the word KIWI", |_| None).await;
        let end = terminal(&first);
        assert_eq!(end.status, TurnStatus::Completed, "pi {version}: {}: {:?}", names(&first), end.result);
        assert_eq!(end.result.text.as_deref(), Some("Kiwi noted"), "pi {version}");
        assert_eq!(deltas(&first), "Kiwi noted", "pi {version}: {}", names(&first));
        assert_eq!(count(&first, "assistant_message"), 1, "pi {version}: {}", names(&first));
        assert!(count(&first, "usage_updated") >= 1, "pi {version}: {}", names(&first));
        let one = payload(&first);
        assert_eq!((one.status, one.turn, one.exit_code), (TurnStatus::Completed, 1, Some(0)), "pi {version}");
        let pi_session = one.session_id.expect("pi's session id");
        let system = server.model_requests()[0].body.as_ref().expect("json")["messages"][0]["content"].to_string();
        assert!(system.contains("notes.txt") && !system.contains("FILE-CONTENT"), "pi {version}: {system}");

        let (_, second) = support::run(&harness, &session, "Which fruit?", |_| None).await;
        assert_eq!(terminal(&second).status, TurnStatus::Completed, "pi {version}: {}", names(&second));
        assert_eq!(terminal(&second).result.text.as_deref(), Some("recall: Which fruit?"));
        assert_eq!(payload(&second).session_id.as_deref(), Some(pi_session.as_str()), "pi {version}");
        let history = model_history(&server, 1);
        assert!(
            history.contains("Remember the word KIWI") && history.contains("Kiwi noted"),
            "pi {version}: {history}"
        );
        let argv: Vec<String> = exec.commands()[2].args.iter().map(|a| a.to_string_lossy().into_owned()).collect();
        assert!(argv.windows(2).any(|w| w == ["--session", pi_session.as_str()]), "pi {version}: {argv:?}");
        assert!(!argv.iter().any(|a| a.contains("Which fruit")), "the prompt is not on the command line: {argv:?}");
        let prompt_file = argv.windows(2).find(|w| w[0] == "--system-prompt").map(|w| w[1].clone()).expect("a file");
        support::finish(&harness, &exec).await;
        harness.shutdown().await;
        assert!(!std::path::Path::new(&prompt_file).exists(), "pi {version}: the prompt's file went with the session");
        assert!(server.proxy().attempts().is_empty(), "pi {version} tried to reach outside 127.0.0.1");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bash_call_shows_as_a_tool_and_a_model_error_fails_the_turn() {
    let cli = support::cli(Provider::Pi);
    let scenario = Scenario::new()
        .shell("echo from-pi")
        .quote_tool_result("Tool said: ")
        .http_error(400, "the fake model refuses");
    let server = FakeModel::start(scenario).await.expect("fake model");
    let env = OfflineEnv::new(&cli, &server).expect("offline environment");
    let exec = Arc::new(RecordingExec::new(Arc::new(LocalExec::new())));
    let harness = support::harness(&PresetCatalog::builder(allow(&cli)).load(), &exec, Arc::new(MemoryStore::new()));
    let options = env.session_options().provider_option(preset_options(&cli, &env));
    let session = harness.start_session("preset:pi-print", options).await.expect("session starts");
    let (_, events) = support::run(&harness, &session, "run it", |_| None).await;
    assert_eq!(terminal(&events).status, TurnStatus::Completed, "{}", names(&events));
    let tools: Vec<(ToolStatus, String)> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolCompleted { status, output, .. } => Some((*status, output.clone().unwrap_or_default())),
            _ => None,
        })
        .collect();
    assert_eq!(tools, [(ToolStatus::Completed, "from-pi\n".to_owned())], "{}", names(&events));
    assert_eq!(terminal(&events).result.text.as_deref(), Some("Tool said: from-pi\n"));

    // Pi exits 0 after a model error: the failure matcher decides.
    let (_, failed) = support::run(&harness, &session, "fail now", |_| None).await;
    let end = terminal(&failed);
    assert_eq!(end.status, TurnStatus::Failed, "{}", names(&failed));
    assert!(end.result.reason.as_deref().is_some_and(|r| r.contains("the fake model refuses")), "{:?}", end.result);
    assert_eq!(payload(&failed).exit_code, Some(0));
    support::finish(&harness, &exec).await;
    harness.shutdown().await;
}

/// A turn continuing a pi session makes the checks the Pi provider makes before a resume: it is
/// refused while a live session holds the conversation (claimed as a native pi session claims
/// it), and when pi's session file lost its messages (pi would go on from an empty conversation,
/// reported as continued); a refused turn starts no pi. A session file that is gone pi refuses
/// itself. Either way the key keeps its conversation for the next turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_emptied_or_missing_pi_session_is_not_continued() {
    use agent_core::SessionId;
    use agent_provider_kit::conversations::Claim;

    for cli in clis() {
        let version = cli.version().to_owned();
        let scenario = Scenario::new().echo("noted: ").echo("recall: ");
        let world = World::on(cli, "pi-print", scenario, Arc::new(MemoryStore::new())).await;
        let World { server, env, exec, harness, .. } = &world;
        let session = world.session(world.options()).await;
        let (_, first) = world.run(&session, "Remember the word KIWI", |_| None).await;
        assert_eq!(terminal(&first).status, TurnStatus::Completed, "pi {version}: {}", names(&first));
        let conversation = payload(&first).session_id.expect("pi's session id");
        let spawned = exec.commands().len();
        let failed = |says: &'static str| failed_turn(harness, &session, &conversation, says);

        // Held by a live session elsewhere (a native pi session claims pi's session ID alone).
        let native = SessionId::new("native").unwrap();
        let held = Claim::take("pi", std::path::Path::new(""), &conversation, &native).expect("free between turns");
        failed("is open in live session `native`").await;
        drop(held);
        // The session file without its messages.
        let file = env.find_file(&format!("_{conversation}.jsonl")).expect("pi's session file");
        let text = std::fs::read_to_string(&file).expect("session file");
        let kept: Vec<&str> = text.lines().filter(|l| !l.contains(r#""type":"message""#)).collect();
        assert!(kept.len() < text.lines().count(), "pi {version}: the session had messages: {text}");
        std::fs::write(&file, format!("{}\n", kept.join("\n"))).expect("cut");
        failed("holds none of its messages").await;
        assert_eq!(exec.commands().len(), spawned, "pi {version} was not run");
        // Without the file: pi says so.
        std::fs::remove_file(&file).expect("remove");
        failed("No session found").await;

        // Nothing was lost: with the file back, the key's conversation goes on.
        std::fs::write(&file, &text).expect("restore");
        let (_, recalled) = support::run(harness, &session, "Which fruit did I name?", |_| None).await;
        assert_eq!(terminal(&recalled).status, TurnStatus::Completed, "pi {version}: {}", names(&recalled));
        assert_eq!(payload(&recalled).session_id.as_deref(), Some(conversation.as_str()), "pi {version}");
        let history = model_history(server, 1);
        assert!(history.contains("Remember the word KIWI"), "pi {version}: {history}");
        assert_eq!(server.model_requests().len(), 2, "pi {version}: no turn ran on an empty conversation");
        support::finish(harness, exec).await;
        harness.shutdown().await;
        assert!(server.proxy().attempts().is_empty(), "pi {version} tried to reach outside 127.0.0.1");
    }
}

/// A turn of `session` that fails, its reason naming `conversation` and saying `says`.
async fn failed_turn(harness: &agent_core::Harness, session: &agent_core::SessionRef, conversation: &str, says: &str) {
    let (_, events) = support::run(harness, session, "Which fruit?", |_| None).await;
    let end = terminal(&events);
    assert_eq!(end.status, TurnStatus::Failed, "{}", names(&events));
    let reason = end.result.reason.clone().unwrap_or_default();
    assert!(reason.contains(says) && reason.contains(conversation), "{reason}");
}

/// With pi's own auto-retry on, a turn whose first model call fails and whose retry succeeds
/// completes: 0.73.1 ends the failed run with an `agent_end` that does not say a retry follows,
/// and its `auto_retry_start` takes the failure back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_auto_retry_after_a_500_completes_the_turn_on_every_pinned_version() {
    for cli in clis() {
        let version = cli.version().to_owned();
        let scenario = Scenario::new().http_error(500, "flaky upstream").text("recovered");
        let world = World::on(cli, "pi-print", scenario, Arc::new(MemoryStore::new())).await;
        let World { server, exec, harness, .. } = &world;
        world.env.pi_retries(2, 50);
        let session = world.session(world.options()).await;
        let (_, events) = world.run(&session, "try hard", |_| None).await;
        let end = terminal(&events);
        assert_eq!(end.status, TurnStatus::Completed, "pi {version}: {}: {:?}", names(&events), end.result);
        assert_eq!(end.result.text.as_deref(), Some("recovered"), "pi {version}");
        assert_eq!(server.model_requests().len(), 2, "pi {version}");
        support::finish(harness, exec).await;
        harness.shutdown().await;
    }
}

/// A model request that overflows the context: 1.6.0 compacts and continues the run before it
/// exits, and the turn completes with what the continued run replied (the compaction takes the
/// failed `agent_end` back); 0.73.1 exits without finishing the compaction, and the turn fails
/// with the model's error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_context_overflow_completes_where_pi_recovers_and_fails_where_it_exits() {
    for cli in clis() {
        let version = cli.version().to_owned();
        // The compaction's summary requests (one or two) and the continued run get one reply.
        let recovered = (0..3).fold(Scenario::new().text("first").context_overflow(), |s, _| s.text("recovered"));
        let world = World::on(cli, "pi-print", recovered, Arc::new(MemoryStore::new())).await;
        let World { exec, harness, .. } = &world;
        world.env.pi_keep_recent_tokens(1);
        let session = world.session(world.options()).await;
        world.run(&session, "one", |_| None).await;
        let (_, events) = world.run(&session, "two", |_| None).await;
        let end = terminal(&events);
        if version == "0.73.1" {
            assert_eq!(end.status, TurnStatus::Failed, "pi {version}: {}: {:?}", names(&events), end.result);
            assert!(end.result.reason.as_deref().is_some_and(|r| r.contains("maximum context length")), "{end:?}");
        } else {
            assert_eq!(end.status, TurnStatus::Completed, "pi {version}: {}: {:?}", names(&events), end.result);
            assert_eq!(end.result.text.as_deref(), Some("recovered"), "pi {version}");
        }
        support::finish(harness, exec).await;
        harness.shutdown().await;
    }
}
