//! The real pi 1.6.0 (Node 22) and 0.73.1 (Node 20), from `cargo xtask clis`, driven through
//! the public `Harness` API, offline, against the testkit's fake Chat Completions server on
//! 127.0.0.1. Each test runs both versions, one after the other, on one fake server.
//!
//! Every test fails with "run `cargo xtask clis`" when a pinned CLI is not installed.

mod support;

use std::time::{Duration, Instant};

use agent_core::event::ToolStatus;
use agent_core::{EventKind, RequestKind, Response, TurnStatus};
use agent_testkit::Scenario;
use support::{Pi, clis, count, deltas, names, requests, terminal};

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
        let requests = pi.server.model_requests();
        assert_eq!(requests.len(), 3, "one model request per turn");
        let history = requests[2].body.as_ref().expect("json body")["messages"].to_string();
        assert!(history.contains("first question") && history.contains("second answer"), "{history}");
        let status = pi.harness.status(&session).await.expect("status");
        assert!(status.current_turn.is_none());
        pi.finish().await;
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
        assert!(pi.env.workspace().join("approved.txt").exists(), "the approved command ran");
        assert_eq!(terminal(&approved).status, TurnStatus::Completed);
        assert!(terminal(&approved).result.text.as_deref().unwrap_or_default().contains("approved-ran"));

        let (_, denied) =
            pi.run(&session, "run the other", |r| r.kind.is_approval().then(|| Response::deny("no"))).await;
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
