//! The shipped `codex-exec` preset on the real `codex` 0.171.0 (from `cargo xtask clis`),
//! through the public `Harness`, offline against the testkit's fake Responses server on
//! 127.0.0.1: `codex exec --json` with the prompt on stdin, one process per turn, the second turn
//! continuing the first's thread with `codex exec resume`.
//!
//! Every test fails with "run `cargo xtask clis`" when the pinned CLI is not installed.

mod support;

use agent_core::event::ToolStatus;
use agent_core::{EventKind, TurnStatus};
use agent_provider_preset::PresetOptions;
use agent_testkit::events::{count, names, terminal};
use agent_testkit::{Provider, Scenario};
use support::{World, model_history, payload};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_text_turn_and_a_second_turn_that_resumes_the_thread() {
    let world =
        World::start(Provider::Codex, "codex-exec", Scenario::new().text("Noted.").echo("recall: ").echo("dash: "))
            .await;
    let session = world.session(world.options()).await;

    let (_, first) = world.run(&session, "Remember the word MANGO", |_| None).await;
    let end = terminal(&first);
    assert_eq!(end.status, TurnStatus::Completed, "{}: {:?}", names(&first), end.result);
    assert_eq!(end.result.text.as_deref(), Some("Noted."));
    assert_eq!(count(&first, "assistant_message"), 1, "{}", names(&first));
    assert!(end.result.usage.is_some_and(|u| u.input_tokens.is_some_and(|n| n > 0)), "{:?}", end.result.usage);
    let one = payload(&first);
    assert_eq!((one.status, one.turn, one.exit_code), (TurnStatus::Completed, 1, Some(0)));
    let thread = one.session_id.expect("codex's thread id");

    let (_, second) = world.run(&session, "--which word?", |_| None).await;
    assert_eq!(terminal(&second).status, TurnStatus::Completed, "{}", names(&second));
    assert_eq!(
        terminal(&second).result.text.as_deref(),
        Some("recall: --which word?"),
        "a prompt like a flag is a prompt"
    );
    let two = payload(&second);
    assert_eq!((two.turn, two.session_id.as_deref()), (2, Some(thread.as_str())));
    let history = model_history(&world.server, 1);
    assert!(history.contains("Remember the word MANGO") && history.contains("Noted."), "{history}");

    let commands = world.exec.commands();
    assert_eq!(commands.len(), 3, "--version, then one process per turn");
    let argv: Vec<String> = commands[2].args.iter().map(|a| a.to_string_lossy().into_owned()).collect();
    assert!(argv.windows(2).any(|w| w == ["resume", thread.as_str()]), "{argv:?}");
    assert!(!argv.iter().any(|a| a.contains("which word")), "the prompt is not on the command line: {argv:?}");

    // `-` as an argument would be codex's "read the prompt from stdin": it is a prompt too.
    let (_, third) = world.run(&session, "-", |_| None).await;
    assert_eq!(terminal(&third).status, TurnStatus::Completed, "{}", names(&third));
    assert_eq!(terminal(&third).result.text.as_deref(), Some("dash: -"));
    world.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_shows_as_a_tool_and_a_model_error_fails_the_turn() {
    let scenario = Scenario::new()
        .shell("echo from-codex")
        .quote_tool_result("Tool said: ")
        .http_error(400, "the fake model refuses");
    let world = World::start(Provider::Codex, "codex-exec", scenario).await;
    let options = world.options_with(PresetOptions::new().args(["--sandbox", "workspace-write"]));
    let session = world.session(options).await;
    let (_, events) = world.run(&session, "run it", |_| None).await;
    assert_eq!(terminal(&events).status, TurnStatus::Completed, "{}", names(&events));
    let tools: Vec<(ToolStatus, Option<i32>)> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolCompleted { status, exit_code, .. } => Some((*status, *exit_code)),
            _ => None,
        })
        .collect();
    assert_eq!(tools, [(ToolStatus::Completed, Some(0))], "{}", names(&events));
    assert_eq!(count(&events, "tool_started"), 1);
    assert!(
        terminal(&events).result.text.as_deref().is_some_and(|t| t.contains("from-codex")),
        "{:?}",
        terminal(&events).result
    );

    let (_, failed) = world.run(&session, "fail now", |_| None).await;
    let end = terminal(&failed);
    assert_eq!(end.status, TurnStatus::Failed, "{}", names(&failed));
    assert!(end.result.reason.as_deref().is_some_and(|r| r.contains("the fake model refuses")), "{:?}", end.result);
    assert_eq!(payload(&failed).status, TurnStatus::Failed);
    assert!(count(&failed, "provider_error") >= 1, "{}", names(&failed));
    world.finish().await;
}
