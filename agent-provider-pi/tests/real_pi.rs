//! The real pi 1.6.0 and 0.79.10 (Node 22) and 0.73.1 (Node 20), from `cargo xtask clis`,
//! driven through the public `Harness` API, offline, against the testkit's fake Chat
//! Completions server on 127.0.0.1. Each test runs every version, one after the other.
//!
//! Every test fails with "run `cargo xtask clis`" when a pinned CLI is not installed.

mod support;

use std::time::{Duration, Instant};

use agent_core::event::ToolStatus;
use agent_core::{EventKind, Replay, RequestKind, Response, TurnStatus};
use agent_testkit::Scenario;
use agent_testkit::events::{count, names, terminal};
use futures::StreamExt;
use support::{Pi, clis, deltas, requests};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_text_turn_streams_deltas_and_three_turns_share_one_session() {
    for cli in clis() {
        let scenario = Scenario::new().deltas(["Hel", "lo ", "world"], 0).text("second answer").text("third answer");
        let pi = Pi::start(cli, scenario).await;
        let session = pi.session(pi.options()).await;
        let (_, first) = pi.run(&session, "first question", |_| None).await;
        assert_eq!(terminal(&first).status, TurnStatus::Completed, "pi {}: {}", pi.version(), names(&first));
        assert_eq!(deltas(&first), "Hello world", "pi {}: {}", pi.version(), names(&first));
        assert_eq!(terminal(&first).result.text.as_deref(), Some("Hello world"));
        assert!(terminal(&first).result.usage.is_some(), "usage is reported");
        assert_eq!(count(&first, "usage_updated"), 1);
        let (_, second) = pi.run(&session, "second question", |_| None).await;
        let (_, third) = pi.run(&session, "third question", |_| None).await;
        assert_eq!(terminal(&second).result.text.as_deref(), Some("second answer"));
        assert_eq!(terminal(&third).result.text.as_deref(), Some("third answer"), "{}", names(&third));
        // Pi numbers its messages per run; their item IDs are the session's own.
        let message = |events: &[std::sync::Arc<agent_core::Event>]| {
            events.iter().find_map(|e| match &e.kind {
                EventKind::AssistantMessage { item_id, .. } => item_id.clone(),
                _ => None,
            })
        };
        let (one, two) = (message(&first).expect("an item ID"), message(&second).expect("an item ID"));
        assert_ne!(one, two, "pi {}: two turns' messages share an item ID", pi.version());
        let requests = pi.server.model_requests();
        assert_eq!(requests.len(), 3, "one model request per turn");
        let history = requests[2].body.as_ref().expect("json body")["messages"].to_string();
        assert!(history.contains("first question") && history.contains("second answer"), "{history}");
        let status = pi.harness.status(&session).await.expect("status");
        assert!(status.current_turn.is_none());
        // Pi's session totals follow each turn as a session-level usage event.
        let mut all = pi.harness.subscribe(&session, agent_core::Replay::Start).await.expect("subscribe");
        let totals = tokio::time::timeout(Duration::from_secs(5), async {
            while let Some(event) = futures::StreamExt::next(&mut all).await {
                let event = event.expect("event");
                if let (None, EventKind::UsageUpdated(usage)) = (&event.turn_id, &event.kind) {
                    return **usage;
                }
            }
            panic!("the session's events ended");
        })
        .await
        .expect("a session usage event");
        assert!(totals.input_tokens.is_some_and(|n| n > 0), "{totals:?}");
        // The extension pi loaded lives in a private directory that goes with the session.
        let commands = pi.exec.commands();
        let rpc = commands.iter().find(|c| c.args.iter().any(|a| a == "rpc")).expect("pi --mode rpc ran");
        let at = rpc.args.iter().position(|a| a == "-e").expect("the extension is loaded with -e");
        let extension = std::path::PathBuf::from(&rpc.args[at + 1]);
        let dir = extension.parent().expect("its directory").to_path_buf();
        {
            use std::os::unix::fs::PermissionsExt;
            let mode =
                std::fs::metadata(&dir).expect("the directory exists while the session runs").permissions().mode();
            assert_eq!(mode & 0o777, 0o700, "{}", dir.display());
        }
        // The model key in the session environment reaches no event.
        let key = pi.env.var("FAKE_MODEL_API_KEY").expect("the offline key").to_owned();
        let mut replay = pi.harness.subscribe(&session, agent_core::Replay::Start).await.expect("subscribe");
        let last = pi.harness.status(&session).await.expect("status").last_seq;
        while let Ok(Some(event)) =
            tokio::time::timeout(Duration::from_secs(2), futures::StreamExt::next(&mut replay)).await
        {
            let event = event.expect("event");
            let json = serde_json::to_string(&*event).expect("events serialize");
            assert!(!json.contains(&key), "a secret reached an event: {json}");
            if event.seq >= last {
                break;
            }
        }
        pi.finish().await;
        // The session's last reference may go a moment after `stop_session` returned.
        let deadline = Instant::now() + Duration::from_secs(3);
        while dir.exists() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(!dir.exists(), "the extension directory is removed with the session");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bash_approval_approve_runs_and_deny_reaches_the_model() {
    for cli in clis() {
        let scenario = Scenario::new()
            .shell("touch approved.txt && echo approved-ran")
            .quote_tool_result("Tool said: ")
            .shell("touch denied.txt && echo denied-ran")
            .quote_tool_result("Tool said: ");
        let pi = Pi::start(cli, scenario).await;
        let session = pi.session(pi.options()).await;
        let (_, approved) = pi.run(&session, "run it", |r| r.kind.is_approval().then(Response::approve)).await;
        let asked = requests(&approved);
        assert_eq!(asked.len(), 1, "pi {}: {}", pi.version(), names(&approved));
        assert_eq!(asked[0].kind, RequestKind::CommandApproval);
        assert!(asked[0].prompt.contains("touch approved.txt"), "{:?}", asked[0].prompt);
        // The gate names the call it asks about.
        let started = approved.iter().find_map(|e| match &e.kind {
            EventKind::ToolStarted { item_id, .. } => Some(item_id.to_string()),
            _ => None,
        });
        let call = asked[0].metadata.get("tool_call_id").and_then(|v| v.as_str()).map(str::to_owned);
        assert!(call.is_some() && call == started, "pi {}: {call:?} against {started:?}", pi.version());
        assert_eq!(asked[0].metadata.get("title"), Some(&serde_json::json!("Allow bash?")));
        assert!(pi.env.workspace().join("approved.txt").exists(), "the approved command ran");
        assert_eq!(terminal(&approved).status, TurnStatus::Completed);
        assert!(terminal(&approved).result.text.as_deref().unwrap_or_default().contains("approved-ran"));

        let deny = |r: &agent_core::Request| r.kind.is_approval().then(|| Response::deny("no shell today, use python"));
        let (_, denied) = pi.run(&session, "run the other", deny).await;
        assert!(!pi.env.workspace().join("denied.txt").exists(), "the denied command did not run");
        let statuses: Vec<ToolStatus> = denied
            .iter()
            .filter_map(|e| match &e.kind {
                EventKind::ToolCompleted { status, .. } => Some(*status),
                _ => None,
            })
            .collect();
        assert_eq!(statuses, [ToolStatus::Declined], "pi {}: {}", pi.version(), names(&denied));
        assert_eq!(terminal(&denied).status, TurnStatus::Completed);
        let text = terminal(&denied).result.text.clone().unwrap_or_default();
        assert!(text.contains("Blocked"), "the model saw the denial: {text:?}");
        assert!(text.contains("no shell today, use python"), "pi {}: and its reason: {text:?}", pi.version());
        assert_eq!(requests(&denied).len(), 1, "the reason was asked of nobody: {}", names(&denied));
        pi.finish().await;
    }
}

/// A command the agent runs prints a credential the session gave pi: the tool's output, the
/// model's reply quoting it (streamed in deltas of 16 characters, none of which holds the whole
/// value) and every stored event have it redacted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credential_a_tool_prints_is_redacted_from_events_and_the_store() {
    const TOKEN: &str = "deploy-token-0123456789";
    for cli in clis() {
        let scenario = Scenario::new().shell("echo token=$DEPLOY_TOKEN").quote_tool_result("Tool said: ");
        let pi = Pi::start(cli, scenario).await;
        let session = pi.session(pi.options().env("DEPLOY_TOKEN", TOKEN)).await;
        let (_, events) = pi.run(&session, "show the token", |r| r.kind.is_approval().then(Response::approve)).await;
        let text = terminal(&events).result.text.clone().unwrap_or_default();
        assert!(text.contains("token=[redacted]"), "pi {}: {text:?}", pi.version());
        let last = events.last().expect("events").seq as usize;
        let stored: Vec<_> = pi.harness.subscribe(&session, Replay::Start).await.unwrap().take(last).collect().await;
        assert_eq!(stored.len(), last);
        let stored: Vec<_> = stored.into_iter().map(|e| e.expect("stored event")).collect();
        let json: String = stored.iter().map(|e| serde_json::to_string(&**e).unwrap()).collect();
        assert!(json.contains("token=[redacted]") && !json.contains(TOKEN), "pi {}: {json}", pi.version());
        let streamed = deltas(&stored);
        assert!(streamed.contains("[redacted]"), "pi {}: {streamed:?}", pi.version());
        assert!(!streamed.contains(TOKEN), "pi {}: the deltas together: {streamed:?}", pi.version());
        pi.finish().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_mid_stream_ends_the_turn_within_a_second_and_the_session_goes_on() {
    for cli in clis() {
        let scenario = Scenario::new().stall("Thinking").text("back again");
        let pi = Pi::start(cli, scenario).await;
        let session = pi.session(pi.options()).await;
        let turn = pi.harness.start_turn(&session, "take your time", Default::default()).await.expect("turn");
        let mut stream = pi.harness.stream(&turn, agent_core::Replay::Start, Some(support::IDLE)).await.unwrap();
        while let Some(event) = stream.next().await {
            if matches!(event.expect("event").kind, EventKind::MessageDelta { .. }) {
                break;
            }
        }
        let asked = Instant::now();
        pi.harness.cancel(&turn).await.expect("cancel accepted");
        let mut end = None;
        while let Some(event) = tokio::time::timeout(Duration::from_secs(1), stream.next()).await.expect("ended in 1 s")
        {
            let event = event.expect("event");
            if event.is_terminal() {
                end = Some(event);
                break;
            }
        }
        assert!(asked.elapsed() < Duration::from_secs(1), "pi {}: {:?}", pi.version(), asked.elapsed());
        let end = end.expect("a terminal event");
        assert_eq!(end.kind.terminal_end().map(|e| e.status), Some(TurnStatus::Interrupted), "{:?}", end.kind);
        let (_, next) = pi.run(&session, "still there?", |_| None).await;
        assert_eq!(terminal(&next).status, TurnStatus::Completed, "pi {}: {}", pi.version(), names(&next));
        assert_eq!(terminal(&next).result.text.as_deref(), Some("back again"));
        pi.finish().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_server_500_fails_the_turn_within_5_s_and_a_killed_pi_fails_the_next() {
    for cli in clis() {
        let scenario = Scenario::new().http_error(500, "fake upstream failure").stall("working");
        let pi = Pi::start(cli, scenario).await;
        let session = pi.session(pi.options()).await;
        let asked = Instant::now();
        let (_, failed) = pi.run(&session, "this will fail", |_| None).await;
        assert!(asked.elapsed() < Duration::from_secs(5), "pi {}: {:?}", pi.version(), asked.elapsed());
        let end = terminal(&failed);
        assert_eq!(end.status, TurnStatus::Failed, "pi {}: {}", pi.version(), names(&failed));
        assert!(end.result.reason.as_deref().unwrap_or_default().contains("500"), "{:?}", end.result.reason);

        let turn = pi.harness.start_turn(&session, "work", Default::default()).await.expect("turn");
        let mut stream = pi.harness.stream(&turn, agent_core::Replay::Start, Some(support::IDLE)).await.unwrap();
        while let Some(event) = stream.next().await {
            if matches!(event.expect("event").kind, EventKind::MessageDelta { .. }) {
                break;
            }
        }
        pi.exec.kill_running();
        let mut end = None;
        while let Some(event) = tokio::time::timeout(Duration::from_secs(10), stream.next()).await.expect("ended") {
            let event = event.expect("event");
            if event.is_terminal() {
                end = Some(event);
                break;
            }
        }
        let end = end.expect("a terminal event");
        let end = end.kind.terminal_end().expect("terminal");
        assert_eq!(end.status, TurnStatus::Failed);
        assert!(end.result.exit_status.is_some(), "the exit status is reported: {:?}", end.result);
        assert!(pi.harness.start_turn(&session, "again?", Default::default()).await.is_err());
        pi.finish().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_and_edit_approvals_through_a_request_handler() {
    for cli in clis() {
        let scenario = Scenario::new()
            .write_file("notes.txt", "written by the model\n")
            .edit_file("notes.txt", "written", "edited")
            .text("done")
            .shell("touch handled.txt && echo handled")
            .quote_tool_result("Tool said: ");
        let pi = Pi::start(cli, scenario).await;
        let handler = agent_core::handler::from_fn(|request: agent_core::Request| async move {
            request.kind.is_approval().then(Response::approve)
        });
        let session = pi.session(pi.options().request_handler(handler)).await;
        let (_, events) = pi.run(&session, "write then edit", |_| None).await;
        let asked = requests(&events);
        let kinds: Vec<RequestKind> = asked.iter().map(|r| r.kind).collect();
        assert_eq!(kinds, [RequestKind::FileChangeApproval; 2], "pi {}: {}", pi.version(), names(&events));
        assert_eq!(asked[0].metadata.get("path").and_then(|p| p.as_str()), Some("notes.txt"));
        let text = std::fs::read_to_string(pi.env.workspace().join("notes.txt")).expect("the file was written");
        assert_eq!(text, "edited by the model\n");
        assert_eq!(count(&events, "file_change"), 2, "{}", names(&events));
        assert_eq!(terminal(&events).status, TurnStatus::Completed);

        let (_, events) = pi.run(&session, "run a command", |_| None).await;
        assert_eq!(requests(&events)[0].kind, RequestKind::CommandApproval);
        assert!(pi.env.workspace().join("handled.txt").exists(), "the handler's approval ran the command");
        assert_eq!(terminal(&events).status, TurnStatus::Completed);
        pi.finish().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_is_answered_through_respond() {
    for cli in clis() {
        let scenario = Scenario::new().ask_user("Pick a color", ["red", "blue"]).quote_tool_result("You chose: ");
        let pi = Pi::start(cli, scenario).await;
        let session = pi.session(pi.options()).await;
        let (_, events) =
            pi.run(&session, "ask me", |r| (r.kind == RequestKind::Question).then(|| Response::answer("blue"))).await;
        let asked = requests(&events);
        assert_eq!(asked.len(), 1, "pi {}: {}", pi.version(), names(&events));
        let question = &asked[0].questions[0];
        assert_eq!(question.prompt, "Pick a color");
        let offered: Vec<&str> = question.choices.iter().map(|c| c.label.as_str()).collect();
        assert_eq!(offered, ["red", "blue"]);
        assert_eq!(terminal(&events).status, TurnStatus::Completed);
        let text = terminal(&events).result.text.clone().unwrap_or_default();
        assert!(text.contains("User chose: blue"), "the answer reached the model: {text:?}");
        pi.finish().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_session_resumes_under_its_id_with_its_history() {
    for cli in clis() {
        let scenario = Scenario::new().text("noted").echo("You said: ").text("forked");
        let pi = Pi::start(cli, scenario).await;
        let session = pi.session(pi.options()).await;
        let (_, first) = pi.run(&session, "remember PINEAPPLE", |_| None).await;
        assert_eq!(terminal(&first).status, TurnStatus::Completed);
        pi.harness.stop_session(&session, false).await.expect("stop");

        let resumed = pi.session(pi.options().resume_session(session.id.clone())).await;
        assert_eq!(resumed.id, session.id, "resumed under its own ID");
        let (_, second) = pi.run(&resumed, "what word?", |_| None).await;
        assert_eq!(terminal(&second).result.text.as_deref(), Some("You said: what word?"));
        let requests = pi.server.model_requests();
        let history = requests[1].body.as_ref().expect("json")["messages"].to_string();
        assert!(history.contains("remember PINEAPPLE") && history.contains("noted"), "pi {}: {history}", pi.version());

        let forked = pi.session(pi.options().fork_session(session.id.clone())).await;
        assert_ne!(forked.id, session.id);
        let (_, third) = pi.run(&forked, "and now?", |_| None).await;
        assert_eq!(terminal(&third).status, TurnStatus::Completed);
        let history = pi.server.model_requests()[2].body.as_ref().expect("json")["messages"].to_string();
        assert!(history.contains("PINEAPPLE"), "the fork carries the history: {history}");
        pi.finish().await;
    }
}

/// A session file pi cannot read fails the resume as a resume, not as pi being unavailable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_file_pi_refuses_fails_the_resume() {
    for cli in clis() {
        let pi = Pi::start(cli, Scenario::new().text("noted")).await;
        let (session, conversation, file) = stopped_with_its_file(&pi, "remember this").await;
        std::fs::write(&file, "not a pi session\n").unwrap();
        match pi.harness.start_session("pi", pi.options().resume_session(session.id.clone())).await {
            Err(agent_core::Error::ResumeFailed { reason, .. }) => {
                assert!(reason.contains(&conversation), "pi {}: {reason}", pi.version());
            }
            other => panic!("pi {}: a session file pi refuses must fail the resume, got {other:?}", pi.version()),
        }
        // Pi 0.73.1 rewrites a session file it could not read when asked to resume it.
        std::fs::write(&file, "not a pi session\n").unwrap();
        match pi.harness.start_session("pi", pi.options().fork_session(session.id.clone())).await {
            Err(agent_core::Error::ResumeFailed { mode: agent_core::ConversationMode::Fork, .. }) => {}
            other => panic!("pi {}: a session file pi refuses must fail the fork, got {other:?}", pi.version()),
        }
        pi.finish().await;
    }
}

/// A session file cut to its header (pi opens it, with no messages) fails the resume: going on
/// would be a fresh conversation reported as resumed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_file_cut_to_its_header_fails_the_resume() {
    for cli in clis() {
        let pi = Pi::start(cli, Scenario::new().text("noted")).await;
        let (session, _, file) = stopped_with_its_file(&pi, "remember PINEAPPLE").await;
        let text = std::fs::read_to_string(&file).unwrap();
        std::fs::write(&file, format!("{}\n", text.lines().next().unwrap_or_default())).unwrap();
        match pi.harness.start_session("pi", pi.options().resume_session(session.id.clone())).await {
            Err(agent_core::Error::ResumeFailed { reason, .. }) => {
                assert!(reason.contains("no messages"), "pi {}: {reason}", pi.version());
            }
            other => panic!("pi {}: a session file with no messages must fail the resume, got {other:?}", pi.version()),
        }
        assert!(pi.server.model_requests().len() == 1, "pi {}: no turn ran on a fresh conversation", pi.version());
        pi.finish().await;
    }
}

/// Two live sessions never continue one pi conversation (each would lose the other's turns):
/// a resume of a conversation a live session holds is refused and starts nothing; a fork of it
/// is not, and once the holder stops the resume goes ahead with the history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_a_live_session_holds_is_not_resumed_by_another() {
    for cli in clis() {
        let pi = Pi::start(cli, Scenario::new().text("noted").text("forked").echo("You said: ")).await;
        let holder = pi.session(pi.options()).await;
        pi.run(&holder, "remember PINEAPPLE", |_| None).await;
        let conversation = pi.harness.status(&holder).await.expect("status").provider_session_id.expect("pi's ID");
        let spawned = pi.harness.list_sessions().len();
        match pi.harness.start_session("pi", pi.options().resume_provider_session(&conversation)).await {
            Err(agent_core::Error::ResumeFailed { mode: agent_core::ConversationMode::Resume, reason }) => {
                assert!(
                    reason.contains(&conversation) && reason.contains(holder.id.as_str()),
                    "pi {}: {reason}",
                    pi.version()
                );
            }
            other => panic!("pi {}: a held conversation must not be resumed, got {other:?}", pi.version()),
        }
        assert_eq!(pi.harness.list_sessions().len(), spawned, "pi {}: nothing started", pi.version());

        let forked = pi.session(pi.options().fork_provider_session(&conversation)).await;
        let (_, turn) = pi.run(&forked, "and now?", |_| None).await;
        assert_eq!(terminal(&turn).status, TurnStatus::Completed, "pi {}: {}", pi.version(), names(&turn));

        pi.harness.stop_session(&holder, false).await.expect("stop");
        let resumed = pi.session(pi.options().resume_provider_session(&conversation)).await;
        let (_, second) = pi.run(&resumed, "what word?", |_| None).await;
        assert_eq!(terminal(&second).result.text.as_deref(), Some("You said: what word?"));
        let history = pi.server.model_requests()[2].body.as_ref().expect("json")["messages"].to_string();
        assert!(
            history.contains("remember PINEAPPLE") && !history.contains("and now?"),
            "pi {}: {history}",
            pi.version()
        );
        pi.finish().await;
    }
}

/// A session that ran one turn with `prompt` and was stopped, pi's ID of it and pi's file of it.
async fn stopped_with_its_file(pi: &Pi, prompt: &str) -> (agent_core::SessionRef, String, std::path::PathBuf) {
    let session = pi.session(pi.options()).await;
    pi.run(&session, prompt, |_| None).await;
    let conversation = pi.harness.status(&session).await.expect("status").provider_session_id.expect("pi's ID");
    pi.harness.stop_session(&session, false).await.expect("stop");
    let file = pi.env.find_file(&format!("_{conversation}.jsonl")).expect("pi's session file");
    (session, conversation, file)
}

/// A turn in a session of `options()`, a stop, and a turn in the session resumed with
/// `options()`: pi found the session, and the second turn's model request carries the first.
async fn remembered_across_a_resume(pi: &Pi, options: impl Fn() -> agent_core::SessionOptions, word: &str) {
    let session = pi.session(options()).await;
    let (_, first) = pi.run(&session, &format!("remember {word}"), |_| None).await;
    assert_eq!(terminal(&first).status, TurnStatus::Completed, "{}", names(&first));
    pi.harness.stop_session(&session, false).await.expect("stop");
    let resumed = pi.session(options().resume_session(session.id.clone())).await;
    let (_, second) = pi.run(&resumed, "what word?", |_| None).await;
    assert_eq!(terminal(&second).result.text.as_deref(), Some("You said: what word?"));
    let history = pi.server.model_requests()[1].body.as_ref().expect("json")["messages"].to_string();
    assert!(history.contains(&format!("remember {word}")), "pi {}: {history}", pi.version());
}

/// Pi names a cwd's session directory after the real path: a session whose cwd was given
/// through a symbolic link, with a trailing `/`, resumes all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_whose_cwd_is_a_link_with_a_trailing_slash_resumes() {
    for cli in clis() {
        let pi = Pi::start(cli, Scenario::new().text("noted").echo("You said: ")).await;
        let link = pi.env.workspace().with_extension("link");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(pi.env.workspace(), &link).unwrap();
        let cwd = format!("{}/", link.display());
        remembered_across_a_resume(&pi, || pi.options().cwd(&cwd), "KIWI").await;
        // The link goes with the test's directory.
        pi.finish().await;
    }
}

/// A project's `.pi/settings.json` with a `sessionDir` (relative, so taken from the cwd): pi
/// keeps the session there, and resume finds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_kept_where_pi_settings_say_resumes() {
    for cli in clis() {
        let pi = Pi::start(cli, Scenario::new().text("noted").echo("You said: ")).await;
        let settings = pi.env.workspace().join(".pi");
        std::fs::create_dir_all(&settings).unwrap();
        std::fs::write(settings.join("settings.json"), r#"{"sessionDir": "kept-sessions"}"#).unwrap();
        remembered_across_a_resume(&pi, || pi.options(), "MANGO").await;
        let kept = std::fs::read_dir(pi.env.workspace().join("kept-sessions")).expect("pi used the setting").count();
        assert_eq!(kept, 1, "pi {} keeps one session file there", pi.version());
        pi.finish().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_fails_at_start_session_and_spawns_nothing() {
    for cli in clis() {
        let pi = Pi::start(cli, Scenario::new()).await;
        let mcp = pi.options().mcp_server("files", agent_core::McpServer::stdio("mcp-files", ["--root", "."]));
        match pi.harness.start_session("pi", mcp).await {
            Err(agent_core::Error::Unsupported { capability, .. }) => {
                assert_eq!(capability, agent_core::Capability::PerSessionMcp)
            }
            other => panic!("MCP servers must be refused, got {other:?}"),
        }
        match pi.harness.start_session("pi", pi.options().approval_policy(agent_core::ApprovalPolicy::OnFailure)).await
        {
            Err(agent_core::Error::InvalidOption { option: "approval_policy", .. }) => {}
            other => panic!("an approval policy pi cannot follow must be refused, got {other:?}"),
        }
        let unknown_model = unknown_model_options(&pi, "fake/no-such-model");
        match pi.harness.start_session("pi", unknown_model).await {
            Err(agent_core::Error::InvalidOption { option, reason }) => {
                assert_eq!(option, "model");
                assert!(reason.contains("no-such-model"), "{reason}");
            }
            other => panic!("an unknown model must be refused, got {other:?}"),
        }
        let missing = pi.options().resume_provider_session("01a2260e-0000-7000-8000-000000000000");
        match pi.harness.start_session("pi", missing).await {
            Err(agent_core::Error::ResumeFailed { reason, .. }) => assert!(reason.contains("no session"), "{reason}"),
            other => panic!("a missing session must fail the resume, got {other:?}"),
        }
        // A cwd whose name, as pi's session directory, no file system takes.
        let workspace = pi.options().cwd.expect("the test's cwd");
        let long = workspace.join("a".repeat(120)).join("b".repeat(120)).join("c".repeat(40));
        std::fs::create_dir_all(&long).expect("the long cwd");
        // Pi names the directory after the real path: a short link to the long cwd is as long.
        let link = workspace.join("short");
        std::os::unix::fs::symlink(&long, &link).expect("the link");
        for cwd in [long.clone(), link] {
            let mut options = pi.options();
            options.cwd = Some(cwd.clone());
            match pi.harness.start_session("pi", options).await {
                Err(agent_core::Error::InvalidOption { option, reason }) => {
                    assert_eq!(option, "cwd");
                    assert!(reason.contains("set PiOptions::session_dir"), "{reason}");
                }
                other => panic!("{cwd:?}: a cwd too long for pi's session directory must be refused, got {other:?}"),
            }
        }
        assert!(pi.exec.commands().is_empty(), "nothing was spawned: {:?}", pi.exec.commands().len());
        // A model of a provider pi's models.json does not define is only known to pi: the session
        // fails to start with the model named, and no pi is left running.
        let foreign = unknown_model_options(&pi, "nope/nope");
        let started = pi.harness.start_session("pi", foreign).await;
        let error = started.expect_err("an unknown provider's model must be refused").to_string();
        assert!(error.contains("nope/nope"), "{error}");
        // With a session directory of its own, pi starts in the long cwd.
        let dir = workspace.join("pi-sessions");
        let mut options = pi.options().provider_option(support::pi_options(&pi.cli, &pi.env).session_dir(&dir));
        options.cwd = Some(long);
        let session = pi.session(options).await;
        pi.harness.stop_session(&session, false).await.expect("stopped");
        pi.finish().await;
    }
}

/// Waits on `stream` for the first event `select` takes.
async fn until(stream: &mut agent_core::TurnStream, select: impl Fn(&EventKind) -> bool) {
    while let Some(event) = stream.next().await {
        let event = event.expect("event");
        assert!(!event.is_terminal(), "the turn ended early: {:?}", event.kind);
        if select(&event.kind) {
            return;
        }
    }
    panic!("the turn stream ended");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_during_a_running_bash_tool_ends_the_turn_within_a_second() {
    for cli in clis() {
        let scenario = Scenario::new().shell("sleep 20 && echo slept").text("after the abort");
        let pi = Pi::start(cli, scenario).await;
        let options = pi.options().approval_policy(agent_core::ApprovalPolicy::Never);
        let session = pi.session(options).await;
        let turn = pi.harness.start_turn(&session, "sleep", Default::default()).await.expect("turn");
        let mut stream = pi.harness.stream(&turn, agent_core::Replay::Start, Some(support::IDLE)).await.unwrap();
        until(&mut stream, |k| matches!(k, EventKind::ToolStarted { .. })).await;
        let asked = Instant::now();
        pi.harness.cancel(&turn).await.expect("cancel accepted");
        let mut events = Vec::new();
        while let Some(event) = tokio::time::timeout(Duration::from_secs(1), stream.next()).await.expect("ended in 1 s")
        {
            let event = event.expect("event");
            let done = event.is_terminal();
            events.push(event);
            if done {
                break;
            }
        }
        assert!(asked.elapsed() < Duration::from_secs(1), "pi {}: {:?}", pi.version(), asked.elapsed());
        assert_eq!(terminal(&events).status, TurnStatus::Interrupted, "pi {}: {}", pi.version(), names(&events));
        let (_, next) = pi.run(&session, "still there?", |_| None).await;
        assert_eq!(terminal(&next).result.text.as_deref(), Some("after the abort"), "{}", names(&next));
        pi.finish().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steer_and_follow_up_reach_the_running_turn() {
    for cli in clis() {
        let scenario = Scenario::new()
            .shell("sleep 1 && echo slept")
            .echo("Steered: ")
            .shell("sleep 1 && echo slept")
            .text("tool done")
            .echo("Followed: ");
        let pi = Pi::start(cli, scenario).await;
        for (follow_up, expected) in [(false, "Steered: STEER now"), (true, "Followed: FOLLOW now")] {
            let pi_options = support::pi_options(&pi.cli, &pi.env).steer_as_follow_up(follow_up);
            let options = pi.options().provider_option(pi_options).approval_policy(agent_core::ApprovalPolicy::Never);
            let session = pi.session(options).await;
            let turn = pi.harness.start_turn(&session, "sleep a bit", Default::default()).await.expect("turn");
            let mut stream = pi.harness.stream(&turn, agent_core::Replay::Start, Some(support::IDLE)).await.unwrap();
            until(&mut stream, |k| matches!(k, EventKind::ToolStarted { .. })).await;
            let message = if follow_up { "FOLLOW now" } else { "STEER now" };
            pi.harness.steer(&turn, message).await.expect("steer accepted");
            let events = pi.collect(&turn, |_| None).await;
            assert_eq!(terminal(&events).status, TurnStatus::Completed, "pi {}: {}", pi.version(), names(&events));
            assert_eq!(terminal(&events).result.text.as_deref(), Some(expected), "pi {}", pi.version());
        }
        pi.finish().await;
    }
}

/// Pi keeps a steer it has not delivered for its next run: the turn it was sent to was
/// cancelled, so the next prompt's turn would answer it. A pi with `clear_queue` (0.84.4 and
/// later) drops it; an older one cannot, and the cancelled turn says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steer_a_cancelled_turn_never_took_is_not_the_next_turns_input() {
    for cli in clis() {
        // `clear_queue` came with pi 0.84.4.
        let version: Vec<u64> = cli.version().split('.').map(|n| n.parse().expect("a version")).collect();
        let clears = version >= vec![0, 84, 4];
        let slow = (0..100).map(|n| format!("part {n} "));
        let scenario = Scenario::new().deltas(slow, 50).echo("Echo: ");
        let pi = Pi::start(cli, scenario).await;
        let session = pi.session(pi.options()).await;
        let turn = pi.harness.start_turn(&session, "talk slowly", Default::default()).await.expect("turn");
        let mut stream = pi.harness.stream(&turn, agent_core::Replay::Start, Some(support::IDLE)).await.unwrap();
        until(&mut stream, |k| matches!(k, EventKind::MessageDelta { .. })).await;
        pi.harness.steer(&turn, "STALE STEER").await.expect("steer accepted");
        pi.harness.cancel(&turn).await.expect("cancel accepted");
        let cancelled = pi.collect(&turn, |_| None).await;
        assert_eq!(terminal(&cancelled).status, TurnStatus::Interrupted, "pi {}: {}", pi.version(), names(&cancelled));
        let warned =
            cancelled.iter().any(|e| matches!(&e.kind, EventKind::Warning { message } if message.contains("steer")));
        let (_, next) = pi.run(&session, "next prompt", |_| None).await;
        let own = terminal(&next).result.text.as_deref() == Some("Echo: next prompt");
        let seen = format!("pi {}: {} / next: {}", pi.version(), names(&cancelled), names(&next));
        if clears {
            assert!(own && !warned, "dropped before the abort, nothing to warn of: {seen}");
        } else {
            // Pi 0.73.1 drops it with the abort at some points of a run; when it does not, it is
            // reported.
            assert!(own != warned, "either the steer went with the abort, or it is reported: {seen}");
        }
        pi.finish().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_system_prompt_and_skills_reach_the_model_request() {
    for cli in clis() {
        let pi = Pi::start(cli, Scenario::new().text("ok")).await;
        let skill = pi.env.dir().join("skills/harness-check");
        std::fs::create_dir_all(&skill).unwrap();
        std::fs::write(
            skill.join("SKILL.md"),
            "---\nname: harness-check\ndescription: Checks the harness wiring of skills.\n---\n\nSay CHECKED.\n",
        )
        .unwrap();
        let mut pi_options = support::pi_options(&pi.cli, &pi.env);
        pi_options.args.retain(|a| a != "--model" && a != "fake/fake-model");
        let options = pi
            .env
            .session_options()
            .provider_option(pi_options)
            .model("fake/fake-model")
            .system_prompt("You are the harness wiring check.")
            .skill(agent_core::Skill::new("harness-check", &skill));
        let session = pi.session(options).await;
        let (_, events) = pi.run(&session, "hello", |_| None).await;
        assert_eq!(terminal(&events).status, TurnStatus::Completed, "{}", names(&events));
        let request = &pi.server.model_requests()[0];
        let body = request.body.as_ref().expect("json");
        assert_eq!(body["model"], "fake-model");
        let system = body["messages"][0]["content"].to_string();
        assert!(system.contains("You are the harness wiring check."), "pi {}: {system}", pi.version());
        assert!(system.contains("harness-check"), "pi {}: the skill is listed: {system}", pi.version());
        pi.finish().await;
    }
}

/// A system prompt that happens to name a file of the workspace reaches the model as the text
/// given, not as the file's content (pi reads a `--system-prompt` naming a file).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_system_prompt_naming_a_file_reaches_the_model_as_given() {
    for cli in clis() {
        let pi = Pi::start(cli, Scenario::new().text("ok")).await;
        std::fs::write(pi.env.workspace().join("notes.txt"), "FILE-CONTENT-NOT-FOR-THE-MODEL").unwrap();
        let session = pi.session(pi.options().system_prompt("notes.txt")).await;
        let (_, events) = pi.run(&session, "hello", |_| None).await;
        assert_eq!(terminal(&events).status, TurnStatus::Completed, "{}", names(&events));
        let body = pi.server.model_requests()[0].body.clone().expect("json");
        let system = body["messages"][0]["content"].to_string();
        assert!(system.contains("notes.txt"), "pi {}: {system}", pi.version());
        assert!(!system.contains("FILE-CONTENT"), "pi {}: {system}", pi.version());
        pi.finish().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_auto_retry_after_a_500_keeps_the_turn_open_until_it_recovers() {
    for cli in clis() {
        let pi = Pi::start(cli, Scenario::new().http_error(500, "flaky upstream").text("recovered")).await;
        // Pi's own auto-retry on, quickly: the turn must not end at the failed run's agent_end.
        pi.env.pi_retries(2, 50);
        let session = pi.session(pi.options()).await;
        let (_, events) = pi.run(&session, "try hard", |_| None).await;
        assert_eq!(terminal(&events).status, TurnStatus::Completed, "pi {}: {}", pi.version(), names(&events));
        assert_eq!(terminal(&events).result.text.as_deref(), Some("recovered"));
        let retried = events.iter().any(|e| matches!(e.kind, EventKind::ProviderError { will_retry: Some(true), .. }));
        assert!(retried, "pi {}: the retry is reported: {}", pi.version(), names(&events));
        assert_eq!(pi.server.model_requests().len(), 2);
        pi.finish().await;
    }
}

/// A tool the run pi retried after a 500 wants is asked about, as in any run: the turn is
/// running again once the retry starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_in_a_retried_run_is_asked() {
    for cli in clis() {
        let scenario = Scenario::new()
            .http_error(500, "flaky upstream")
            .shell("touch retried.txt && echo retried-ran")
            .quote_tool_result("Tool said: ");
        let pi = Pi::start(cli, scenario).await;
        pi.env.pi_retries(2, 50);
        let session = pi.session(pi.options()).await;
        let (_, events) = pi.run(&session, "try hard", |r| r.kind.is_approval().then(Response::approve)).await;
        assert_eq!(requests(&events).len(), 1, "pi {}: asked once: {}", pi.version(), names(&events));
        assert!(pi.env.workspace().join("retried.txt").exists(), "pi {}: the approved command ran", pi.version());
        assert_eq!(terminal(&events).status, TurnStatus::Completed, "pi {}: {}", pi.version(), names(&events));
        pi.finish().await;
    }
}

/// A prompt an extension's command takes runs no agent: the turn completes (0.73.1 says nothing
/// of it in the `prompt` reply; a `get_state` after it tells), and the next turn runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_an_extension_command_takes_completes_the_turn() {
    let cli = agent_testkit::Cli::min_supported(agent_testkit::Provider::Pi)
        .unwrap_or_else(|e| panic!("{e}\nrun `cargo xtask clis`"));
    let pi = Pi::start(cli, Scenario::new().echo("You said: ")).await;
    let marker = pi.env.workspace().join("command-ran.txt");
    let extension = format!(
        "import {{ writeFileSync }} from \"node:fs\";\n\
         export default function (pi) {{\n\
           pi.registerCommand(\"mark\", {{ description: \"marks\", handler: async () => {{ writeFileSync({:?}, \"ran\"); }} }});\n\
         }}\n",
        marker.display().to_string()
    );
    let file = pi.env.dir().join("mark.ts");
    std::fs::write(&file, extension).unwrap();
    // Loaded by name: the offline environment keeps pi from discovering extensions.
    let loaded = support::pi_options(&pi.cli, &pi.env).args(["-e".to_owned(), file.display().to_string()]);
    let session = pi.session(pi.env.session_options().provider_option(loaded)).await;
    let (_, events) = pi.run(&session, "/mark", |_| None).await;
    assert_eq!(terminal(&events).status, TurnStatus::Completed, "pi {}: {}", pi.version(), names(&events));
    assert!(marker.exists(), "the command ran: {}", names(&events));
    assert!(pi.server.model_requests().is_empty(), "no agent run");
    let (_, next) = pi.run(&session, "hello", |_| None).await;
    assert_eq!(terminal(&next).result.text.as_deref(), Some("You said: hello"), "{}", names(&next));
    pi.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_responses_api_runs_text_and_tool_turns() {
    for cli in clis() {
        let scenario =
            Scenario::new().deltas(["Hi ", "there"], 0).shell("echo via-responses").quote_tool_result("Tool said: ");
        let server = agent_testkit::FakeModel::start(scenario).await.expect("server");
        let env = agent_testkit::OfflineEnv::builder(&cli, &server)
            .pi_api(agent_testkit::offline::PiApi::Responses)
            .build()
            .expect("env");
        let harness = agent_core::Harness::builder()
            .provider(agent_provider_pi::PiProvider::new())
            .exec(agent_exec::LocalExec::new())
            .store(agent_core::StoreChoice::Disabled)
            .build()
            .expect("harness");
        let options = env
            .session_options()
            .provider_option(support::pi_options(&cli, &env))
            .approval_policy(agent_core::ApprovalPolicy::Never);
        let session = harness.start_session("pi", options).await.expect("session");
        for (prompt, expected) in [("hello", "Hi there"), ("run it", "Tool said: via-responses")] {
            let turn = harness.start_turn(&session, prompt, Default::default()).await.expect("turn");
            let outcome = harness.await_turn(&turn, Some(support::IDLE)).await;
            let outcome = outcome.unwrap_or_else(|e| panic!("pi {}: {e}", cli.version()));
            let text = outcome.result.text.unwrap_or_default();
            assert_eq!(text.trim(), expected, "pi {}", cli.version());
        }
        assert!(server.model_requests().iter().all(|r| r.path.ends_with("/responses")), "the Responses endpoint");
        harness.stop_session(&session, true).await.expect("stop");
        assert!(server.proxy().attempts().is_empty());
    }
}

/// The offline options with `model` instead of the environment's `--model`.
fn unknown_model_options(pi: &Pi, model: &str) -> agent_core::SessionOptions {
    let mut options = support::pi_options(&pi.cli, &pi.env);
    options.args.retain(|a| a != "--model" && a != "fake/fake-model");
    pi.env.session_options().provider_option(options).model(model)
}

/// Cancelling a turn while an approval or a question waits settles pi's open dialog: the turn
/// ends within a second, the request expires, nothing runs, and the session goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_while_an_approval_or_a_question_waits_ends_the_turn_within_a_second() {
    for cli in clis() {
        let scenario = Scenario::new()
            .shell("touch approved.txt")
            .tool_call("ask_user", serde_json::json!({"question": "Pick", "options": ["a", "b"]}))
            .text("after the cancels");
        let pi = Pi::start(cli, scenario).await;
        let session = pi.session(pi.options()).await;
        for prompt in ["run", "ask"] {
            let turn = pi.harness.start_turn(&session, prompt, Default::default()).await.expect("turn");
            let mut stream = pi.harness.stream(&turn, agent_core::Replay::Start, Some(support::IDLE)).await.unwrap();
            until(&mut stream, |k| matches!(k, EventKind::RequestCreated(_))).await;
            let asked = Instant::now();
            pi.harness.cancel(&turn).await.expect("cancel accepted");
            let mut events = Vec::new();
            while let Some(event) = tokio::time::timeout(Duration::from_secs(5), stream.next()).await.expect("ended") {
                let event = event.expect("event");
                let done = event.is_terminal();
                events.push(event);
                if done {
                    break;
                }
            }
            let took = asked.elapsed();
            assert!(took < Duration::from_secs(1), "pi {} ({prompt}): {took:?}", pi.version());
            assert_eq!(terminal(&events).status, TurnStatus::Interrupted, "pi {}: {}", pi.version(), names(&events));
            assert_eq!(count(&events, "request_expired"), 1, "{}", names(&events));
        }
        assert!(!pi.env.workspace().join("approved.txt").exists());
        let (_, next) = pi.run(&session, "still there?", |_| None).await;
        assert_eq!(terminal(&next).result.text.as_deref(), Some("after the cancels"), "{}", names(&next));
        pi.finish().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_free_text_question_takes_text_and_a_cancelled_approval_interrupts_the_turn() {
    for cli in clis() {
        let scenario = Scenario::new()
            .tool_call("ask_user", serde_json::json!({"question": "Your name?"}))
            .quote_tool_result("Heard: ")
            .shell("touch cancelled.txt")
            .text("after the cancel");
        let pi = Pi::start(cli, scenario).await;
        let session = pi.session(pi.options()).await;
        let (_, asked) =
            pi.run(&session, "ask", |r| (r.kind == RequestKind::Question).then(|| Response::answer("Ada"))).await;
        let question = &requests(&asked)[0].questions[0];
        assert!(question.choices.is_empty() && question.allow_other, "a free-text question: {question:?}");
        assert_eq!(terminal(&asked).result.text.as_deref(), Some("Heard: User chose: Ada"), "pi {}", pi.version());

        let (_, cancelled) = pi.run(&session, "run", |r| r.kind.is_approval().then(|| Response::cancel("stop"))).await;
        assert_eq!(terminal(&cancelled).status, TurnStatus::Interrupted, "pi {}: {}", pi.version(), names(&cancelled));
        assert!(!pi.env.workspace().join("cancelled.txt").exists());
        let (_, next) = pi.run(&session, "go on", |_| None).await;
        assert_eq!(terminal(&next).result.text.as_deref(), Some("after the cancel"), "{}", names(&next));
        pi.finish().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_while_pi_waits_to_retry_ends_the_turn_within_a_second() {
    for cli in clis() {
        let pi = Pi::start(cli, Scenario::new().http_error(500, "flaky upstream").text("after the cancel")).await;
        pi.env.pi_retries(3, 20000);
        let session = pi.session(pi.options()).await;
        let turn = pi.harness.start_turn(&session, "try", Default::default()).await.expect("turn");
        let mut stream = pi.harness.stream(&turn, agent_core::Replay::Start, Some(support::IDLE)).await.unwrap();
        until(&mut stream, |k| matches!(k, EventKind::ProviderError { will_retry: Some(true), .. })).await;
        let asked = Instant::now();
        pi.harness.cancel(&turn).await.expect("cancel accepted");
        let mut events = Vec::new();
        while let Some(event) = tokio::time::timeout(Duration::from_secs(1), stream.next()).await.expect("ended in 1 s")
        {
            let event = event.expect("event");
            let done = event.is_terminal();
            events.push(event);
            if done {
                break;
            }
        }
        assert!(asked.elapsed() < Duration::from_secs(1), "pi {}: {:?}", pi.version(), asked.elapsed());
        assert_eq!(terminal(&events).status, TurnStatus::Interrupted, "pi {}: {}", pi.version(), names(&events));
        let (_, next) = pi.run(&session, "again", |_| None).await;
        assert_eq!(
            terminal(&next).result.text.as_deref(),
            Some("after the cancel"),
            "pi {}: {}",
            pi.version(),
            names(&next)
        );
        pi.finish().await;
    }
}

/// pi records a turn's `set_model` in its session file: a session stopped right after such a
/// turn and resumed without a model of its own runs with the model it opened with, not that
/// turn's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_resumed_after_a_turns_model_runs_with_its_own() {
    for cli in clis() {
        let scenario = Scenario::new().text("one").text("two").text("three");
        let pi = Pi::start(cli, scenario).await;
        // No `--model`: pi picks the model it opens with, and a resume reopens on the one its
        // session file names last.
        let mut pi_options = support::pi_options(&pi.cli, &pi.env);
        pi_options.args.retain(|a| a != "--model" && a != "fake/fake-model");
        let unnamed = pi.env.session_options().provider_option(pi_options);
        let session = pi.session(unnamed.clone()).await;
        let (_, first) = pi.run(&session, "first", |_| None).await;
        let options = agent_core::TurnOptions::new().model("fake-resp/fake-model");
        let turn = pi.harness.start_turn(&session, "second", options).await.expect("turn recorded");
        let second = pi.collect(&turn, |_| None).await;
        pi.harness.stop_session(&session, false).await.expect("stop");
        let resumed = pi.session(unnamed.resume_session(session.id.clone())).await;
        let (_, third) = pi.run(&resumed, "third", |_| None).await;
        for events in [&first, &second, &third] {
            assert_eq!(terminal(events).status, TurnStatus::Completed, "pi {}: {}", pi.version(), names(events));
        }
        let paths: Vec<String> = pi.server.model_requests().iter().map(|r| r.path.clone()).collect();
        assert!(paths[1].ends_with("/responses"), "pi {}: the turn's provider: {paths:?}", pi.version());
        assert_eq!(paths[0], paths[2], "pi {}: the session's provider after the resume: {paths:?}", pi.version());
        pi.finish().await;
    }
}

/// A turn's model is set for that turn (`set_model`) and the next turn without one runs with
/// the session's again; a model pi does not know fails the turn with pi's refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turns_model_is_that_turns_only() {
    for cli in clis() {
        let scenario = Scenario::new().text("one").text("two").text("three");
        let pi = Pi::start(cli, scenario).await;
        let session = pi.session(pi.options()).await;
        let (_, first) = pi.run(&session, "first", |_| None).await;
        let options = agent_core::TurnOptions::new().model("fake-resp/fake-model");
        let turn = pi.harness.start_turn(&session, "second", options).await.expect("turn recorded");
        let second = pi.collect(&turn, |_| None).await;
        let (_, third) = pi.run(&session, "third", |_| None).await;
        for events in [&first, &second, &third] {
            assert_eq!(terminal(events).status, TurnStatus::Completed, "pi {}: {}", pi.version(), names(events));
        }
        let paths: Vec<String> = pi.server.model_requests().iter().map(|r| r.path.clone()).collect();
        assert_eq!(paths.len(), 3, "pi {}: {paths:?}", pi.version());
        assert!(paths[1].ends_with("/responses"), "pi {}: the turn's provider: {paths:?}", pi.version());
        assert_eq!(paths[0], paths[2], "pi {}: the session's provider again: {paths:?}", pi.version());
        assert!(paths[0].ends_with("/chat/completions"), "pi {}: {paths:?}", pi.version());

        let options = agent_core::TurnOptions::new().model("fake/no-such-model");
        let turn = pi.harness.start_turn(&session, "fourth", options).await.expect("turn recorded");
        let refused = pi.collect(&turn, |_| None).await;
        let end = terminal(&refused);
        assert_eq!(end.status, TurnStatus::Failed, "pi {}: {}", pi.version(), names(&refused));
        let reason = end.result.reason.clone().unwrap_or_default();
        assert!(reason.contains("no-such-model"), "pi {}: {reason}", pi.version());
        // A pattern no turn can take (a thinking level) is refused before the turn is recorded.
        let options = agent_core::TurnOptions::new().model("fake/fake-model:high");
        match pi.harness.start_turn(&session, "fifth", options).await {
            Err(agent_core::Error::InvalidOption { option: "model", .. }) => {}
            other => panic!("pi {}: expected the model refused, got {other:?}", pi.version()),
        }
        pi.finish().await;
    }
}

/// A reply longer than `max_line_bytes` makes every line that carries it too long (the
/// assistant's `message_end`, `turn_end`, `agent_end`): the turn ends failed, naming the limit,
/// where 1.6.0 reported it completed without its text and 0.73.1 (which ends the turn at
/// `agent_end`) left it running; pi is idle again, and the next turn runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_over_the_line_limit_fails_the_turn_and_the_session_goes_on() {
    for cli in clis() {
        let pi = Pi::start(cli, Scenario::new().text("x".repeat(5000)).text("small again")).await;
        let options = pi.options().provider_option(support::pi_options(&pi.cli, &pi.env).max_line_bytes(4096));
        let session = pi.session(options).await;
        let (_, events) = pi.run(&session, "long please", |_| None).await;
        let end = terminal(&events);
        assert_eq!(end.status, TurnStatus::Failed, "pi {}: {}", pi.version(), names(&events));
        let reason = end.result.reason.clone().unwrap_or_default();
        assert!(reason.contains("4096-byte limit") && reason.contains("reply could not be read"), "{reason}");
        assert!(count(&events, "warning") >= 1, "the dropped lines are warned of: {}", names(&events));

        let (_, next) = pi.run(&session, "short now", |_| None).await;
        assert_eq!(terminal(&next).status, TurnStatus::Completed, "pi {}: {}", pi.version(), names(&next));
        assert_eq!(terminal(&next).result.text.as_deref(), Some("small again"));
        pi.finish().await;
    }
}

/// A model request that overflows the context: pi compacts and continues the run, and the turn
/// ends with what the continued run replied (0.73.1 marks nothing on its failed `agent_end`; its
/// `compaction_end` says whether a run follows).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_context_overflow_pi_compacts_away_keeps_the_turn_open_until_it_recovers() {
    for cli in clis() {
        // The compaction's summary requests (one or two, by version) and the continued run's all
        // get the same reply.
        let scenario = Scenario::new().text("first").context_overflow().text("recovered").text("recovered");
        let pi = Pi::start(cli, scenario.text("recovered")).await;
        pi.env.pi_keep_recent_tokens(1);
        let session = pi.session(pi.options()).await;
        pi.run(&session, "one", |_| None).await;
        let (_, events) = pi.run(&session, "two", |_| None).await;
        let end = terminal(&events);
        assert_eq!(end.status, TurnStatus::Completed, "pi {}: {}: {:?}", pi.version(), names(&events), end.result);
        assert_eq!(end.result.text.as_deref(), Some("recovered"), "pi {}", pi.version());
        let compacted =
            events.iter().any(|e| matches!(&e.kind, EventKind::ProviderEvent { method } if method == "compaction_end"));
        assert!(compacted, "pi {}: the compaction is reported in the turn: {}", pi.version(), names(&events));
        pi.finish().await;
    }
}

/// A pi session that compacts its context after every reply, on a model server where every
/// request after the first (the summaries', the later turns') takes longer (3 s) than the
/// session's turns may wait to be admitted (2 s).
async fn compacting(cli: agent_testkit::Cli) -> (Pi, agent_core::SessionRef) {
    let slow = |scenario: Scenario| scenario.deltas(["slow reply"], 3000);
    let scenario = (0..8).fold(Scenario::new().text("first"), |scenario, _| slow(scenario));
    let pi = Pi::start(cli, scenario).await;
    pi.env.pi_compact_always(1);
    let session = pi.session(pi.options().turn_start_timeout(Duration::from_secs(2))).await;
    (pi, session)
}

/// Pi compacts the context before it runs a prompt when the context is over its threshold,
/// and answers the `prompt` only after that model request: the turn is admitted when the
/// compaction starts, not failed (and the session retired) when the summary takes longer than
/// an admission may wait. 0.73.1 compacts after a turn's end and again for the next prompt;
/// 1.6.0 compacts before the turn ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_pi_compacts_the_context_for_is_admitted_while_it_compacts() {
    for cli in clis() {
        let (pi, session) = compacting(cli).await;
        let (_, first) = pi.run(&session, "one", |_| None).await;
        assert_eq!(terminal(&first).status, TurnStatus::Completed, "pi {}: {}", pi.version(), names(&first));
        let (_, second) = pi.run(&session, "two", |_| None).await;
        let end = terminal(&second);
        assert_eq!(end.status, TurnStatus::Completed, "pi {}: {}: {:?}", pi.version(), names(&second), end.result);
        assert_eq!(end.result.text.as_deref(), Some("slow reply"), "pi {}", pi.version());
        let compactions = [&first, &second]
            .iter()
            .flat_map(|events| events.iter())
            .filter(|e| matches!(&e.kind, EventKind::ProviderEvent { method } if method == "compaction_start"))
            .count();
        assert!(compactions > 0, "pi {}: pi compacted: {} / {}", pi.version(), names(&first), names(&second));
        pi.finish().await;
    }
}

/// A turn cancelled while pi compacts the context ahead of its prompt (0.73.1 and 0.79.10
/// compact for the next prompt; 1.6.0 did before the previous turn ended): pi's `abort` does
/// not stop a compaction, so the run that starts after it is aborted, the turn ends
/// interrupted, and the next turn runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_cancelled_while_pi_compacts_for_it_ends_interrupted() {
    for cli in clis() {
        let (pi, session) = compacting(cli).await;
        pi.run(&session, "one", |_| None).await;
        let turn = pi.harness.start_turn(&session, "two", Default::default()).await.expect("turn");
        let mut stream = pi.harness.stream(&turn, Replay::Start, Some(support::IDLE)).await.unwrap();
        until(&mut stream, |k| matches!(k, EventKind::TurnStarted { .. })).await;
        let asked = Instant::now();
        pi.harness.cancel(&turn).await.expect("cancel accepted");
        let mut end = None;
        while let Some(event) = stream.next().await {
            let event = event.expect("event");
            if event.is_terminal() {
                end = event.kind.terminal_end().cloned();
                break;
            }
        }
        let end = end.expect("the turn ends");
        assert_eq!(end.status, TurnStatus::Interrupted, "pi {}: {:?}", pi.version(), end.result);
        let stop = end.result.details.as_ref().map(|details| details["stopReason"].clone());
        assert_eq!(stop, Some("aborted".into()), "pi {}: the run was aborted, not run out", pi.version());
        assert!(asked.elapsed() < Duration::from_secs(15), "pi {}: {:?}", pi.version(), asked.elapsed());
        let (_, next) = pi.run(&session, "three", |_| None).await;
        assert_eq!(terminal(&next).status, TurnStatus::Completed, "pi {}: {}", pi.version(), names(&next));
        pi.finish().await;
    }
}
