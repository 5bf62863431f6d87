//! Starting, inspecting, stopping and purging sessions; the ID rules.

use std::time::Duration;

use agent_core::testing::{OpenBehavior, Recorded};
use agent_core::*;
use futures::StreamExt;

use crate::common::*;

#[tokio::test]
async fn start_session_returns_a_stable_ref_and_an_idle_durable_status() {
    let f = Fixture::new();
    let (session, _) = f.session(opts().id("issue-123-implementation").metadata("project", "p")).await;
    assert_eq!(session.id.as_str(), "issue-123-implementation");
    assert_eq!(session.provider.as_str(), PROVIDER);
    let status = f.harness.status(&session).await.unwrap();
    assert_eq!(status.status, SessionState::Idle);
    assert_eq!(status.durability, Durability::Durable);
    assert_eq!(status.provider_session_id.as_deref(), Some("scripted-issue-123-implementation"));
    assert!(status.current_turn.is_none() && status.pending_requests.is_empty());
    assert_eq!(f.harness.list_sessions(), vec![session.clone()]);
    // The generated ID form.
    let (generated, _) = f.session(opts()).await;
    assert!(generated.id.as_str().starts_with("ses_"), "{}", generated.id);
}

#[tokio::test]
async fn session_ready_is_the_first_stored_event() {
    let f = Fixture::new();
    let (session, _) = f.session(opts()).await;
    let mut events = f.harness.subscribe(&session, Replay::Start).await.unwrap();
    let ready = next(&mut events).await;
    assert_eq!(ready.seq, 1);
    assert!(matches!(&ready.kind, EventKind::SessionReady { provider_session_id: Some(_) }));
    let stored = f.dyn_store().read_events(&session.id, &Default::default()).await.unwrap();
    assert_eq!(stored.len(), 1, "session_ready is committed before the caller gets the handle");
}

#[tokio::test]
async fn a_live_id_cannot_be_started_twice() {
    let f = Fixture::new();
    f.session(opts().id("dup")).await;
    let err = f.harness.start_session(PROVIDER, opts().id("dup")).await.unwrap_err();
    assert!(matches!(err, Error::SessionAlreadyExists { ref id } if id.as_str() == "dup"), "{err:?}");
}

#[tokio::test]
async fn a_stopped_id_is_retained_and_cannot_be_reused_by_default() {
    let f = Fixture::new();
    let (session, _) = f.session(opts().id("kept")).await;
    f.harness.stop_session(&session, false).await.unwrap();
    let err = f.harness.start_session(PROVIDER, opts().id("kept")).await.unwrap_err();
    assert!(
        matches!(err, Error::SessionIdAlreadyUsed { ref id, status: SessionState::Closed } if id.as_str() == "kept"),
        "{err:?}"
    );
}

#[tokio::test]
async fn reuse_closed_replaces_a_cleanly_closed_session_and_its_history() {
    let f = Fixture::new();
    let (session, _) = f.session(opts().id("again")).await;
    let turn = f.admitted_turn(&session, "first").await;
    f.control.session(&session.id).await.complete(&turn.id, "done").await;
    f.harness.await_turn(&turn, None).await.unwrap();
    f.harness.stop_session(&session, false).await.unwrap();

    let (again, _) = f.session(opts().id("again").reuse(Reuse::Closed)).await;
    assert_eq!(again.id, session.id);
    let store = f.dyn_store();
    assert!(store.fetch_turn(&session.id, &turn.id).await.unwrap().is_none(), "old history is gone");
    let events = store.read_events(&session.id, &Default::default()).await.unwrap();
    assert_eq!(events.len(), 1, "only the new session_ready remains");
}

#[tokio::test]
async fn reuse_closed_refuses_a_session_that_did_not_close_cleanly_but_replace_takes_it() {
    let f = Fixture::new();
    // A stored aggregate left `idle` (its process died without closing it).
    let mut snapshot = agent_testkit_snapshot("stale");
    snapshot.status = SessionState::Idle;
    f.dyn_store().save_session(&snapshot).await.unwrap();

    let err = f.harness.start_session(PROVIDER, opts().id("stale").reuse(Reuse::Closed)).await.unwrap_err();
    assert!(matches!(err, Error::SessionIdAlreadyUsed { status: SessionState::Abandoned, .. }), "{err:?}");
    let (session, _) = f.session(opts().id("stale").reuse(Reuse::Replace)).await;
    assert_eq!(session.id.as_str(), "stale");
    let listed = f.harness.list_stored_sessions().await.unwrap();
    assert!(listed.iter().any(|s| s.session_id == session.id && s.live && s.snapshot.status == SessionState::Idle));
}

#[tokio::test]
async fn an_unacknowledged_startup_snapshot_is_reclaimed_whatever_the_reuse_mode() {
    let f = Fixture::new();
    let mut snapshot = agent_testkit_snapshot("abandoned");
    snapshot.status = SessionState::Idle; // its final write reached idle
    snapshot.startup =
        Some(serde_json::from_value(serde_json::json!({"attempt_id": "a1", "acknowledged": false})).unwrap());
    f.dyn_store().save_session(&snapshot).await.unwrap();
    let (session, _) = f.session(opts().id("abandoned")).await;
    assert_eq!(session.id.as_str(), "abandoned");
}

#[tokio::test(start_paused = true)]
async fn a_caller_that_stops_waiting_for_a_hung_open_drops_it_and_frees_the_id() {
    let f = Fixture::new();
    f.control.set_open(OpenBehavior::Hang);
    let harness = f.harness.clone();
    let start = tokio::spawn(async move { harness.start_session(PROVIDER, opts().id("gone")).await });
    while f.control.conversations().is_empty() {
        tokio::task::yield_now().await;
    }
    let abandoned_at = tokio::time::Instant::now();
    start.abort();
    while f.control.abandoned_opens() == 0 {
        tokio::task::yield_now().await;
    }
    assert_eq!(abandoned_at.elapsed(), Duration::ZERO, "the open is dropped at once, not at startup_timeout");
    f.control.set_open(OpenBehavior::Succeed);
    f.session(opts().id("gone")).await;
}

#[tokio::test(start_paused = true)]
async fn a_caller_that_goes_away_during_the_initial_commit_leaves_nothing_stored() {
    let (f, store) = Fixture::controlled();
    store.set(WriteMode::Slow);
    // A CLI that takes its time to exit.
    f.control.set_close_delay(Duration::from_millis(500));
    let harness = f.harness.clone();
    let start = tokio::spawn(async move { harness.start_session(PROVIDER, opts().id("gone")).await });
    // The provider opened; the initial commit is under way.
    let remote = f.control.session(&SessionId::new("gone").unwrap()).await;
    start.abort();
    // The startup finishes in the background, finds nobody to hand the session to, tears down;
    // the ID is free only once the provider closed, so a retry under it never meets the CLI
    // still there (nor its hold on the conversation).
    while !remote.is_closed() {
        match f.harness.start_session(PROVIDER, opts().id("gone")).await {
            Err(Error::SessionAlreadyExists { .. }) => {}
            other => panic!("the ID came free while the provider was still closing: {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    while !f.harness.list_sessions().is_empty() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // Taken back before the ID was freed.
    let id = SessionId::new("gone").unwrap();
    assert_eq!(store.fetch_session(&id).await.unwrap(), None, "the new session was taken back");
    assert_eq!(store.latest_seq(&id).await.unwrap(), None);
    store.set(WriteMode::Normal);
    f.session(opts().id("gone")).await;
}

/// A provider that panics while a start its caller abandoned is torn down still lets the ID go.
#[tokio::test(start_paused = true)]
async fn a_provider_that_panics_closing_an_abandoned_start_still_frees_the_id() {
    let (f, store) = Fixture::controlled();
    store.set(WriteMode::Slow);
    f.control.set_close_panics();
    let harness = f.harness.clone();
    let start = tokio::spawn(async move { harness.start_session(PROVIDER, opts().id("panicky")).await });
    f.control.session(&SessionId::new("panicky").unwrap()).await;
    start.abort();
    store.set(WriteMode::Normal);
    let aborted = tokio::time::Instant::now();
    loop {
        match f.harness.start_session(PROVIDER, opts().id("panicky")).await {
            Ok(_) => break,
            Err(Error::SessionAlreadyExists { .. }) => {}
            Err(other) => panic!("{other:?}"),
        }
        assert!(aborted.elapsed() < Duration::from_secs(600), "the ID never came free");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A caller whose `start_session` future is dropped after the session was handed to it but
/// before it read it (a `select!` whose other branch won) leaves no live session nobody holds:
/// the session is torn down and taken back, as when the caller went away earlier.
#[tokio::test(start_paused = true)]
async fn a_caller_that_drops_the_started_session_unread_leaves_nothing_running() {
    let (f, store) = Fixture::controlled();
    let mut start = Box::pin(f.harness.start_session(PROVIDER, opts().id("unread")));
    assert!(futures::poll!(start.as_mut()).is_pending(), "the start runs in its own task");
    let remote = f.control.session(&SessionId::new("unread").unwrap()).await;
    // The startup hands the session over; the future that would read it is never polled again.
    while f.harness.list_sessions().is_empty() {
        tokio::task::yield_now().await;
    }
    for _ in 0..16 {
        tokio::task::yield_now().await;
    }
    drop(start);
    let dropped = tokio::time::Instant::now();
    while !(remote.is_closed() && f.harness.list_sessions().is_empty()) {
        assert!(dropped.elapsed() < Duration::from_secs(600), "the session nobody holds still runs");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let id = SessionId::new("unread").unwrap();
    assert_eq!(store.fetch_session(&id).await.unwrap(), None, "the new session was taken back");
    f.session(opts().id("unread")).await;
}

/// A caller that retries under the same ID after dropping its start unread waits while the
/// session is torn down (`SessionAlreadyExists`), then starts afresh: the history is deleted
/// before the ID is free, so the retry never finds a closed session it must refuse
/// (`SessionIdAlreadyUsed`, which reads as final).
#[tokio::test(start_paused = true)]
async fn a_retry_after_a_start_dropped_unread_finds_the_id_free_and_nothing_stored() {
    let (f, store) = Fixture::controlled();
    let mut start = Box::pin(f.harness.start_session(PROVIDER, opts().id("again")));
    assert!(futures::poll!(start.as_mut()).is_pending(), "the start runs in its own task");
    while f.harness.list_sessions().is_empty() {
        tokio::task::yield_now().await;
    }
    for _ in 0..16 {
        tokio::task::yield_now().await;
    }
    // Slow writes: the teardown's writes take a while, and the retry comes at once.
    store.set(WriteMode::Slow);
    drop(start);
    let (mut waited, dropped) = (0, tokio::time::Instant::now());
    let session = loop {
        match f.harness.start_session(PROVIDER, opts().id("again")).await {
            Ok(session) => break session,
            Err(Error::SessionAlreadyExists { .. }) => waited += 1,
            Err(other) => panic!("the retry after {waited} waits: {other:?}"),
        }
        assert!(dropped.elapsed() < Duration::from_secs(600), "the ID never came free");
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    assert!(waited > 0, "the retry came while the first session was still live");
    let events = store.read_events(&session.id, &agent_core::store::EventQuery::all()).await.unwrap();
    let names: Vec<_> = events.iter().map(|e| e.type_name()).collect();
    assert_eq!(names, ["session_ready"], "the retry's history is its own");
}

#[tokio::test(start_paused = true)]
async fn a_caller_that_goes_away_during_a_resumes_commit_leaves_the_session_closed_and_whole() {
    let (f, store) = Fixture::controlled();
    let (session, _) = f.session(opts().id("back")).await;
    f.harness.stop_session(&session, false).await.unwrap();
    store.set(WriteMode::Gated);
    let harness = f.harness.clone();
    let resume = opts().resume_session(session.id.clone());
    let start = tokio::spawn(async move { harness.start_session(PROVIDER, resume).await });
    // The provider opened; the initial commit is under way.
    store.arrival().await;
    start.abort();
    store.open_gate();
    // The startup finishes in the background, finds nobody to hand the session to, tears down.
    let remote = f.control.session(&session.id).await;
    while !(remote.is_closed() && f.harness.list_sessions().is_empty()) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Closed again before the ID was freed (and so before the provider was closed), whole.
    let stored = store.fetch_session(&session.id).await.unwrap().expect("kept");
    assert_eq!(stored.status, SessionState::Closed);
    let events = store.read_events(&session.id, &agent_core::store::EventQuery::all()).await.unwrap();
    let names: Vec<_> = events.iter().map(|e| e.type_name()).collect();
    assert_eq!(names, ["session_ready", "session_closed", "session_ready", "conversation_resumed", "session_closed"]);
    f.session(opts().resume_session(session.id.clone())).await;
}

#[tokio::test]
async fn the_handoff_is_acknowledged_in_the_store_without_waiting_for_a_turn() {
    let f = Fixture::new();
    let (session, _) = f.session(opts().id("ack")).await;
    assert!(acknowledged(&f, &session).await, "the startup marker is cleared once the caller holds the session");
}

#[tokio::test]
async fn with_the_store_disabled_an_id_is_reusable_once_stopped() {
    let f = Fixture::new();
    let (session, _) = f.session(opts().id("ephemeral").store(StoreChoice::Disabled)).await;
    assert_eq!(f.harness.status(&session).await.unwrap().durability, Durability::Disabled);
    let err = f.harness.start_session(PROVIDER, opts().id("ephemeral").store(StoreChoice::Disabled)).await.unwrap_err();
    assert!(matches!(err, Error::SessionAlreadyExists { .. }), "{err:?}");
    f.harness.stop_session(&session, false).await.unwrap();
    f.session(opts().id("ephemeral").store(StoreChoice::Disabled)).await;
    assert!(f.dyn_store().fetch_session(&session.id).await.unwrap().is_none(), "nothing was stored");
}

#[tokio::test(start_paused = true)]
async fn independent_handshakes_run_concurrently() {
    let f = Fixture::new();
    f.control.set_open(OpenBehavior::Delay(Duration::from_secs(10)));
    let started = tokio::time::Instant::now();
    let (a, b) = tokio::join!(
        f.harness.start_session(PROVIDER, opts().id("slow-a")),
        f.harness.start_session(PROVIDER, opts().id("slow-b")),
    );
    a.unwrap();
    b.unwrap();
    assert_eq!(started.elapsed(), Duration::from_secs(10), "two 10 s opens overlap instead of queueing");
}

#[tokio::test(start_paused = true)]
async fn startup_timeout_removes_a_hung_provider_open() {
    let f = Fixture::new();
    f.control.set_open(OpenBehavior::Hang);
    let started = tokio::time::Instant::now();
    let err =
        f.harness.start_session(PROVIDER, opts().id("hung").startup_timeout(Duration::from_secs(3))).await.unwrap_err();
    assert!(matches!(err, Error::StartupTimeout { timeout, .. } if timeout == Duration::from_secs(3)), "{err:?}");
    assert_eq!(started.elapsed(), Duration::from_secs(3));
    assert_eq!(f.control.abandoned_opens(), 1, "the hung open was dropped");
    assert!(f.harness.list_sessions().is_empty());
    assert!(f.dyn_store().fetch_session(&SessionId::new("hung").unwrap()).await.unwrap().is_none());
    // The ID is free again.
    f.control.set_open(OpenBehavior::Succeed);
    f.session(opts().id("hung")).await;
}

#[tokio::test]
async fn a_failed_open_reports_the_provider_error_and_frees_the_id() {
    let f = Fixture::new();
    f.control.set_open(OpenBehavior::Fail("codex not found; run `cargo xtask clis`".into()));
    let err = f.harness.start_session(PROVIDER, opts().id("fails")).await.unwrap_err();
    assert!(matches!(err, Error::ProviderUnavailable { ref reason, .. } if reason.contains("xtask")), "{err:?}");
    f.control.set_open(OpenBehavior::Succeed);
    f.session(opts().id("fails")).await;
}

#[tokio::test]
async fn capacity_limit_refuses_sessions_beyond_max_sessions() {
    let f = Fixture::with(|b| b.max_sessions(2));
    let (a, _) = f.session(opts()).await;
    f.session(opts()).await;
    let err = f.harness.start_session(PROVIDER, opts()).await.unwrap_err();
    assert!(matches!(err, Error::CapacityReached { limit: 2 }), "{err:?}");
    f.harness.stop_session(&a, false).await.unwrap();
    f.session(opts()).await;
}

#[test]
fn a_harness_with_limits_or_deadlines_of_zero_is_not_built() {
    let builder = || Harness::builder().store(StoreChoice::Disabled);
    for (built, what) in [
        (builder().max_sessions(0).build(), "max_sessions"),
        (builder().max_provider_processes(0).build(), "max_provider_processes"),
        (builder().call_timeout(std::time::Duration::ZERO).build(), "call_timeout"),
    ] {
        match built {
            Err(Error::InvalidConfig(reason)) => assert!(reason.starts_with(what), "{reason}"),
            other => panic!("{what}: {other:?}"),
        }
    }
}

#[tokio::test]
async fn bad_input_to_start_session_gets_a_specific_error_and_starts_nothing() {
    let f = Fixture::new();
    let err = f.harness.start_session("nope", opts()).await.unwrap_err();
    assert!(matches!(err, Error::UnknownProvider { ref registered, .. } if registered == PROVIDER), "{err:?}");
    let cases: Vec<(SessionOptions, &str)> = vec![
        (SessionOptions::default(), "cwd"),
        (SessionOptions::new("relative/path"), "cwd"),
        (SessionOptions::new("/no/such/dir/anywhere"), "cwd"),
        (opts().event_buffer_size(0), "event_buffer_size"),
        (opts().startup_timeout(Duration::ZERO), "startup_timeout"),
        (opts().provider_command_timeout(Duration::ZERO), "provider_command_timeout"),
    ];
    for (options, option) in cases {
        let err = f.harness.start_session(PROVIDER, options).await.unwrap_err();
        assert!(matches!(err, Error::InvalidOption { option: o, .. } if o == option), "{option}: {err:?}");
    }
    let err = f.harness.start_session(PROVIDER, opts().id("white space")).await.unwrap_err();
    assert!(matches!(err, Error::InvalidSessionId { .. }), "{err:?}");
    assert!(f.harness.list_sessions().is_empty());
    assert!(f.dyn_store().list_sessions().await.unwrap().is_empty(), "nothing was stored");
}

#[tokio::test]
async fn options_the_provider_cannot_honour_fail_before_opening() {
    let f = Fixture::new();
    f.control.set_capabilities(Capabilities::NONE.with(Capability::TokenStreaming, Support::Native));
    let err = f
        .harness
        .start_session(PROVIDER, opts().mcp_server("tools", McpServer::stdio("tool-server", ["--stdio"])))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Unsupported { capability: Capability::PerSessionMcp, .. }), "{err:?}");
    assert_eq!(f.control.abandoned_opens(), 0);
    assert!(f.harness.list_sessions().is_empty());
}

#[tokio::test]
async fn capabilities_are_reported_per_session() {
    let f = Fixture::new();
    let (session, _) = f.session(opts()).await;
    let caps = f.harness.capabilities(&session).await.unwrap();
    assert_eq!(caps.questions, Support::Native);
    assert_eq!(caps.fork, Support::Unsupported);
    assert!(caps.questions.is_available() && !caps.steer.is_available());
}

#[tokio::test]
async fn stop_is_idempotent_and_later_operations_find_no_session() {
    let f = Fixture::new();
    let (session, remote) = f.session(opts()).await;
    let mut events = f.harness.subscribe(&session, Replay::Latest).await.unwrap();
    let monitor = f.harness.monitor(&session).await.unwrap();
    f.harness.stop_session(&session, false).await.unwrap();
    let closed = next(&mut events).await;
    assert!(matches!(&closed.kind, EventKind::SessionClosed { reason: CloseReason::Stopped }));
    assert_eq!(monitor.await, ExitReason::Closed { reason: CloseReason::Stopped });
    assert!(remote.commands().contains(&Recorded::Close), "the provider was closed");
    assert!(events.next_is_end().await, "the subscription ends with the session");
    f.harness.stop_session(&session, false).await.expect("stopping again is Ok");
    let stopped = ExitReason::Closed { reason: CloseReason::Stopped };
    let closed = |r: Result<(), Error>| matches!(r, Err(Error::SessionClosed { reason, .. }) if reason == stopped);
    assert!(closed(f.harness.status(&session).await.map(drop)), "status says the session is closed and why");
    assert!(closed(f.harness.start_turn(&session, "x", TurnOptions::new()).await.map(drop)));
    assert!(closed(f.harness.capabilities(&session).await.map(drop)));
    assert_eq!(f.harness.monitor(&session).await.unwrap().await, stopped, "a monitor of an ended session resolves");
    let stored = f.dyn_store().fetch_session(&session.id).await.unwrap().unwrap();
    assert_eq!(stored.status, SessionState::Closed, "history is retained");
    assert_eq!(stored.ended, Some(stopped.clone()), "the snapshot records how it ended");

    // Another harness on the same store knows only what the store says.
    let (provider, _) = agent_core::testing::ScriptedProvider::new(PROVIDER);
    let other = Harness::builder().provider(provider).store(StoreChoice::Custom(f.dyn_store())).build().unwrap();
    let err = other.status(&session).await.unwrap_err();
    assert!(matches!(err, Error::SessionClosed { ref reason, .. } if *reason == stopped), "{err:?}");
    let unknown = SessionRef { provider: session.provider.clone(), id: SessionId::new("never-started").unwrap() };
    assert!(matches!(other.status(&unknown).await, Err(Error::SessionNotFound { .. })));
    assert!(matches!(other.monitor(&unknown).await, Err(Error::SessionNotFound { .. })));
}

#[tokio::test(start_paused = true)]
async fn without_a_store_the_harness_remembers_how_a_session_ended() {
    let f = Fixture::new();
    let options = opts().store(StoreChoice::Disabled).turn_start_timeout(Duration::from_secs(5));
    let (session, _) = f.session(options).await;
    f.control.push_admission(agent_core::testing::CallBehavior::Hang);
    let monitor = f.harness.monitor(&session).await.unwrap();
    f.harness.start_turn(&session, "stuck", TurnOptions::new()).await.unwrap();
    // The admission never answers: its outcome is uncertain and the session retires.
    assert!(matches!(monitor.await, ExitReason::Retired { .. }));
    for err in [
        f.harness.start_turn(&session, "again", TurnOptions::new()).await.map(drop).unwrap_err(),
        f.harness.status(&session).await.map(drop).unwrap_err(),
    ] {
        assert!(matches!(err, Error::SessionClosed { reason: ExitReason::Retired { .. }, .. }), "{err:?}");
    }
    assert!(matches!(f.harness.monitor(&session).await.unwrap().await, ExitReason::Retired { .. }));
}

#[tokio::test]
async fn stop_without_force_refuses_an_active_turn_and_force_interrupts_it() {
    let f = Fixture::new();
    let (session, remote) = f.session(opts()).await;
    let turn = f.admitted_turn(&session, "long work").await;
    let err = f.harness.stop_session(&session, false).await.unwrap_err();
    assert!(matches!(err, Error::TurnInProgress { ref current } if current.id == turn.id), "{err:?}");
    assert_eq!(f.harness.status(&session).await.unwrap().status, SessionState::Running);

    let mut events = f.harness.subscribe(&session, Replay::Latest).await.unwrap();
    let monitor = f.harness.monitor(&session).await.unwrap();
    f.harness.stop_session(&session, true).await.unwrap();
    let interrupted = next(&mut events).await;
    match &interrupted.kind {
        EventKind::TurnInterrupted(end) => assert_eq!(end.result.reason.as_deref(), Some("forced session stop")),
        other => panic!("expected turn_interrupted, got {other:?}"),
    }
    assert!(matches!(next(&mut events).await.kind, EventKind::SessionClosed { reason: CloseReason::ForcedStop }));
    assert_eq!(monitor.await, ExitReason::Closed { reason: CloseReason::ForcedStop });
    assert!(
        !remote.commands().iter().any(|c| matches!(c, Recorded::Cancel { .. })),
        "forced stop does not wait for a provider cancel"
    );
    let outcome = f.harness.await_turn(&turn, None).await.unwrap_err();
    assert!(matches!(outcome, AwaitError::Ended(ref o) if o.status == TurnStatus::Interrupted), "{outcome:?}");
}

#[tokio::test]
async fn purge_refuses_a_live_session_and_removes_a_stopped_one() {
    let f = Fixture::new();
    let (session, _) = f.session(opts().id("purge-me")).await;
    let err = f.harness.purge_session(&session).await.unwrap_err();
    assert!(matches!(err, Error::SessionLive { .. }), "{err:?}");
    f.harness.stop_session(&session, false).await.unwrap();
    let listed = f.harness.list_stored_sessions().await.unwrap();
    assert!(listed.iter().any(|s| s.session_id == session.id && !s.live));
    f.harness.purge_session(&session).await.unwrap();
    assert!(f.harness.list_stored_sessions().await.unwrap().is_empty());
    f.session(opts().id("purge-me")).await;
}

/// A purge whose caller went away after the store deleted the history (the store's answer
/// never came back) leaves this harness remembering the session; the next purge finishes the
/// job instead of saying the session was never there.
#[tokio::test(start_paused = true)]
async fn a_purge_dropped_after_its_delete_committed_is_finished_by_the_next() {
    let (f, store) = Fixture::controlled();
    let (session, _) = f.session(opts().id("half-purged")).await;
    f.harness.stop_session(&session, false).await.unwrap();
    store.set(WriteMode::LostAnswer);
    let dropped = tokio::time::timeout(Duration::from_secs(5), f.harness.purge_session(&session)).await;
    assert!(dropped.is_err(), "the purge waits for an answer that never comes");
    assert_eq!(store.fetch_session(&session.id).await.unwrap(), None, "the delete committed");

    f.harness.purge_session(&session).await.unwrap();
    let err = f.harness.status(&session).await.unwrap_err();
    assert!(matches!(err, Error::SessionNotFound { .. }), "{err:?}");
    let err = f.harness.purge_session(&session).await.unwrap_err();
    assert!(matches!(err, Error::SessionNotFound { .. }), "{err:?}");
}

#[tokio::test]
async fn dropping_the_harness_closes_its_sessions() {
    let f = Fixture::new();
    let (session, remote) = f.session(opts()).await;
    let monitor = f.harness.monitor(&session).await.unwrap();
    drop(f.harness);
    assert_eq!(monitor.await, ExitReason::Closed { reason: CloseReason::HarnessShutdown });
    assert!(remote.is_closed());
}

/// A stored snapshot as another process would have left it.
fn agent_testkit_snapshot(id: &str) -> SessionSnapshot {
    let json = serde_json::json!({
        "id": id, "provider": PROVIDER, "status": "closed", "cwd": "/tmp", "config_fingerprint": "f",
        "created_at": Timestamp::now(), "updated_at": Timestamp::now(),
    });
    serde_json::from_value(json).unwrap()
}

#[tokio::test(start_paused = true)]
async fn startup_finalization_timeout_bounds_the_initial_commit() {
    let (f, store) = Fixture::controlled();
    store.set(WriteMode::Hang);
    let started = tokio::time::Instant::now();
    let err = f
        .harness
        .start_session(PROVIDER, opts().id("slow-store").startup_finalization_timeout(Duration::from_secs(2)))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::StartupFinalizationTimeout { timeout } if timeout == Duration::from_secs(2)),
        "{err:?}"
    );
    assert!(started.elapsed() >= Duration::from_secs(2));
    let remote = f.control.session(&SessionId::new("slow-store").unwrap()).await;
    assert!(remote.is_closed(), "the opened provider was closed again");
    assert!(f.harness.list_sessions().is_empty());
    store.set(WriteMode::Normal);
    f.session(opts().id("slow-store")).await;
}

#[tokio::test(start_paused = true)]
async fn an_initial_commit_that_landed_after_its_timeout_is_taken_back() {
    let (f, store) = Fixture::controlled();
    store.set(WriteMode::LostAnswer);
    let options = opts().id("landed").startup_finalization_timeout(Duration::from_secs(2));
    let err = f.harness.start_session(PROVIDER, options).await.unwrap_err();
    assert!(matches!(err, Error::StartupFinalizationTimeout { .. }), "{err:?}");
    let id = SessionId::new("landed").unwrap();
    assert_eq!(store.fetch_session(&id).await.unwrap(), None, "the commit was taken back");
    assert_eq!(store.latest_seq(&id).await.unwrap(), None);
}

/// An initial commit still queued when its start gave up (the undo found nothing to take back)
/// lands later, its startup marker set: listed, it reads as abandoned, not as an idle session
/// that nothing runs and that never ended; a start of it under way here reads as written.
#[tokio::test(start_paused = true)]
async fn an_unacknowledged_startup_snapshot_nobody_holds_reads_back_abandoned() {
    let (f, store) = Fixture::controlled();
    let mut snapshot = agent_testkit_snapshot("late");
    snapshot.status = SessionState::Idle;
    snapshot.startup =
        Some(serde_json::from_value(serde_json::json!({"attempt_id": "a1", "acknowledged": false})).unwrap());
    store.save_session(&snapshot).await.unwrap();
    let listed = f.harness.list_stored_sessions().await.unwrap();
    let [stored] = &listed[..] else { panic!("{listed:?}") };
    assert_eq!(stored.snapshot.status, SessionState::Abandoned, "{stored:?}");
    assert_eq!(stored.snapshot.ended, Some(ExitReason::Abandoned { last_status: SessionState::Idle }));
    assert!(!stored.live);

    // Its own start, holding the ID while its initial commit waits at the store.
    store.set(WriteMode::Gated);
    let harness = f.harness.clone();
    let start = tokio::spawn(async move { harness.start_session(PROVIDER, opts().id("late")).await });
    store.arrival().await;
    let listed = f.harness.list_stored_sessions().await.unwrap();
    assert_eq!(listed[0].snapshot.status, SessionState::Idle, "a start under way is not abandoned: {listed:?}");
    store.open_gate();
    start.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_resume_whose_commit_landed_after_its_timeout_leaves_the_stored_session_as_it_was() {
    let (f, store) = Fixture::controlled();
    let (session, _) = f.session(opts().id("put-back")).await;
    f.harness.stop_session(&session, false).await.unwrap();
    let before = store.fetch_session(&session.id).await.unwrap();
    store.set(WriteMode::LostAnswer);
    let options = opts().resume_session(session.id.clone()).startup_finalization_timeout(Duration::from_secs(2));
    let err = f.harness.start_session(PROVIDER, options).await.unwrap_err();
    assert!(matches!(err, Error::StartupFinalizationTimeout { .. }), "{err:?}");
    assert_eq!(store.fetch_session(&session.id).await.unwrap(), before, "the snapshot was put back");
    f.session(opts().resume_session(session.id.clone())).await;
}

#[tokio::test]
async fn a_custom_store_is_named_again_to_list_and_purge_a_stopped_session() {
    let custom: DynStore = std::sync::Arc::new(agent_store_memory::MemoryStore::new());
    let f = Fixture::new();
    let (session, _) = f.session(opts().id("custom").store(StoreChoice::Custom(custom.clone()))).await;
    f.harness.stop_session(&session, false).await.unwrap();
    assert!(f.harness.list_stored_sessions().await.unwrap().is_empty(), "not in the default store");
    let listed = f.harness.list_stored_sessions_in(&custom).await.unwrap();
    assert_eq!(listed.iter().map(|s| s.session_id.as_str()).collect::<Vec<_>>(), ["custom"]);
    f.harness.purge_session_in(&custom, &session).await.unwrap();
    assert!(custom.fetch_session(&session.id).await.unwrap().is_none());
}

#[tokio::test(start_paused = true)]
async fn a_forced_stop_kills_a_hung_admission_and_expires_pending_requests() {
    use agent_core::request::RequestSpec;
    use agent_core::testing::CallBehavior;

    let f = Fixture::new();
    let (session, _) = f.session(opts()).await;
    f.control.push_admission(CallBehavior::Hang);
    let turn = f.harness.start_turn(&session, "never admitted", TurnOptions::new()).await.unwrap();
    assert_eq!(f.harness.status(&session).await.unwrap().status, SessionState::Starting);
    f.harness.stop_session(&session, true).await.unwrap();
    let outcome = f.harness.await_turn(&turn, None).await.unwrap_err();
    assert!(matches!(outcome, AwaitError::Ended(ref o) if o.status == TurnStatus::Interrupted), "{outcome:?}");

    let (session, remote) = f.session(opts()).await;
    let turn = f.admitted_turn(&session, "asks").await;
    let mut events = f.harness.subscribe(&turn, Replay::Latest).await.unwrap();
    remote.request(&turn.id, RequestSpec::new(RequestKind::Confirmation, "Proceed?", "c1")).await;
    let request = request_of(&next(&mut events).await);
    f.harness.stop_session(&session, true).await.unwrap();
    let expired = next(&mut events).await;
    assert!(
        matches!(&expired.kind, EventKind::RequestExpired { reason: ExpiryReason::SessionClosed, .. }),
        "{expired:?}"
    );
    assert_eq!(next(&mut events).await.type_name(), "turn_interrupted");
    let err = f.harness.respond(&request, Response::approve()).await.unwrap_err();
    assert!(matches!(err, Error::RequestExpired { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_start_releases_its_id_before_answering() {
    let f = Fixture::new();
    for _ in 0..50 {
        f.control.set_open(OpenBehavior::Fail("not yet".into()));
        assert!(f.harness.start_session(PROVIDER, opts().id("retry")).await.is_err());
        f.control.set_open(OpenBehavior::Succeed);
        let session = f.harness.start_session(PROVIDER, opts().id("retry").reuse(Reuse::Closed)).await.unwrap();
        f.harness.stop_session(&session, false).await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn a_transport_lost_while_opening_fails_the_start_and_frees_the_id() {
    let f = Fixture::new();
    f.control.set_open(OpenBehavior::LoseTransport("codex exited (exit code 1)".into()));
    let id = SessionId::new("flaky").unwrap();
    let err = f.harness.start_session(PROVIDER, opts().id("flaky")).await.unwrap_err();
    assert!(matches!(err, Error::ProviderOpenFailed { ref reason, .. } if reason.contains("exit code 1")), "{err:?}");
    let remote = f.control.session(&id).await;
    let closes = remote.commands().iter().filter(|c| **c == Recorded::Close).count();
    assert_eq!(closes, 1, "the opened provider session is closed exactly once");
    assert!(f.harness.list_sessions().is_empty());
    assert!(f.dyn_store().fetch_session(&id).await.unwrap().is_none(), "nothing was stored");
    f.control.set_open(OpenBehavior::Succeed);
    let (session, _) = f.session(opts().id("flaky")).await;
    assert_eq!(f.harness.status(&session).await.unwrap().status, SessionState::Idle);
}

#[tokio::test]
async fn a_stale_snapshot_reads_back_as_abandoned_and_can_be_purged() {
    let f = Fixture::new();
    // What a killed host leaves: a snapshot that says a turn is running.
    let mut snapshot = agent_testkit_snapshot("killed");
    snapshot.status = SessionState::Running;
    f.dyn_store().save_session(&snapshot).await.unwrap();
    let listed = f.harness.list_stored_sessions().await.unwrap();
    let stored = listed.iter().find(|s| s.session_id.as_str() == "killed").expect("listed");
    assert!(!stored.live);
    assert_eq!(stored.snapshot.status, SessionState::Abandoned, "never read back as running");
    assert_eq!(stored.snapshot.ended, Some(ExitReason::Abandoned { last_status: SessionState::Running }));
    let session = SessionRef { provider: PROVIDER.into(), id: snapshot.id.clone() };
    let err = f.harness.status(&session).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::SessionClosed { reason: ExitReason::Abandoned { last_status: SessionState::Running }, .. }
        ),
        "{err:?}"
    );
    f.harness.purge_session(&session).await.unwrap();
    assert!(f.dyn_store().fetch_session(&session.id).await.unwrap().is_none());
}

#[tokio::test]
async fn shutdown_stops_every_session_and_waits_for_them() {
    let f = Fixture::new();
    let (idle, idle_remote) = f.session(opts()).await;
    let (busy, _) = f.session(opts()).await;
    let turn = f.admitted_turn(&busy, "long work").await;
    f.harness.shutdown().await;
    assert!(f.harness.list_sessions().is_empty(), "every session ended before shutdown returned");
    assert!(idle_remote.is_closed());
    let outcome = f.harness.await_turn(&turn, None).await.unwrap_err();
    assert!(
        matches!(outcome, AwaitError::Ended(ref o) if o.result.ended_by == Some(EndCause::HarnessShutdown)),
        "{outcome:?}"
    );
    let reason = f.harness.monitor(&idle).await.unwrap().await;
    assert_eq!(reason, ExitReason::Closed { reason: CloseReason::HarnessShutdown });
    // The harness itself goes on.
    f.session(opts()).await;
}

#[tokio::test]
async fn a_failed_start_leaves_the_last_runs_history_where_it_was() {
    let f = Fixture::new();
    let (session, remote) = f.session(opts().id("kept")).await;
    let turn = f.admitted_turn(&session, "first run").await;
    remote.complete(&turn.id, "done").await;
    f.harness.await_turn(&turn, None).await.unwrap();
    f.harness.stop_session(&session, false).await.unwrap();

    // The same ID again, with a store of its own, but the provider cannot open.
    let other: DynStore = std::sync::Arc::new(agent_store_memory::MemoryStore::new());
    f.control.set_open(OpenBehavior::Fail("cannot open".into()));
    let err = f.harness.start_session(PROVIDER, opts().id("kept").store(StoreChoice::Custom(other))).await.unwrap_err();
    assert!(matches!(err, Error::ProviderOpenFailed { .. } | Error::ProviderUnavailable { .. }), "{err:?}");

    let outcome = f.harness.await_turn(&turn, None).await.unwrap();
    assert_eq!(outcome.result.text.as_deref(), Some("done"));
    let replayed: Vec<_> = f.harness.subscribe(&session, Replay::Start).await.unwrap().collect().await;
    assert!(replayed.len() >= 4, "the first run's events, from the default store: {replayed:?}");
    f.harness.purge_session(&session).await.unwrap();
    assert!(f.store.fetch_session(&session.id).await.unwrap().is_none(), "purged where it was written");
}

#[tokio::test]
async fn each_run_of_an_id_is_found_in_the_store_it_wrote_to() {
    let f = Fixture::new();
    let custom: DynStore = std::sync::Arc::new(agent_store_memory::MemoryStore::new());
    let (first, _) = f.session(opts().id("twice").store(StoreChoice::Custom(custom.clone()))).await;
    f.harness.stop_session(&first, false).await.unwrap();

    // The second run uses the default store.
    let (second, remote) = f.session(opts().id("twice")).await;
    let turn = f.admitted_turn(&second, "second run").await;
    remote.complete(&turn.id, "second").await;
    f.harness.await_turn(&turn, None).await.unwrap();
    f.harness.stop_session(&second, false).await.unwrap();

    let outcome = f.harness.await_turn(&turn, None).await.unwrap();
    assert_eq!(outcome.result.text.as_deref(), Some("second"));
    let replayed: Vec<_> =
        f.harness.subscribe(&second, Replay::Start).await.unwrap().map(|e| e.unwrap().turn_id.clone()).collect().await;
    assert!(replayed.contains(&Some(turn.id.clone())), "the second run's history: {replayed:?}");
    f.harness.purge_session(&second).await.unwrap();
    assert!(f.store.fetch_session(&second.id).await.unwrap().is_none(), "the second run is purged");
    assert!(custom.fetch_session(&first.id).await.unwrap().is_some(), "the first run is left alone");

    // A third run without a store: nothing of it is stored, and nothing older is offered as its.
    let (third, _) = f.session(opts().id("twice").store(StoreChoice::Disabled)).await;
    f.harness.stop_session(&third, false).await.unwrap();
    let err = f.harness.subscribe(&third, Replay::Start).await.unwrap_err();
    assert!(matches!(err, Error::SessionClosed { .. }), "{err:?}");
}

#[tokio::test]
async fn purging_an_id_that_holds_nothing_is_not_found() {
    let f = Fixture::new();
    let never = SessionRef { provider: ProviderId::new(PROVIDER), id: SessionId::new("never-started").unwrap() };
    let err = f.harness.purge_session(&never).await.unwrap_err();
    assert!(matches!(err, Error::SessionNotFound { ref id } if id == &never.id), "{err:?}");
    let err = f.harness.purge_session_in(&f.dyn_store(), &never).await.unwrap_err();
    assert!(matches!(err, Error::SessionNotFound { .. }), "{err:?}");

    // Without a store, a session that ran here is forgotten; a second purge finds nothing.
    let (session, _) = f.session(opts().id("no-store").store(StoreChoice::Disabled)).await;
    f.harness.stop_session(&session, false).await.unwrap();
    f.harness.purge_session(&session).await.unwrap();
    let err = f.harness.purge_session(&session).await.unwrap_err();
    assert!(matches!(err, Error::SessionNotFound { .. }), "{err:?}");
}

#[tokio::test]
async fn an_event_buffer_beyond_the_maximum_is_refused() {
    let f = Fixture::new();
    for size in [options::MAX_EVENT_BUFFER_SIZE + 1, usize::MAX] {
        let err = f.harness.start_session(PROVIDER, opts().id("big").event_buffer_size(size)).await.unwrap_err();
        assert!(matches!(err, Error::InvalidOption { option, .. } if option == "event_buffer_size"), "{err:?}");
    }
    assert!(f.harness.list_sessions().is_empty());
    let (session, _) = f.session(opts().id("big").event_buffer_size(options::MAX_EVENT_BUFFER_SIZE)).await;
    f.harness.subscribe(&session, Replay::Latest).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn timeouts_of_duration_max_mean_no_limit() {
    let f = Fixture::new();
    let options = opts()
        .startup_timeout(Duration::MAX)
        .turn_start_timeout(Duration::MAX)
        .provider_command_timeout(Duration::MAX)
        .turn_inactivity_timeout(Duration::MAX);
    let (session, remote) = f.session(options).await;
    let turn = f.admitted_turn(&session, "no limits").await;
    tokio::time::sleep(Duration::from_secs(86_400 * 365)).await;
    assert_eq!(f.harness.status(&session).await.unwrap().current_turn.map(|t| t.id), Some(turn.id.clone()));
    remote.complete(&turn.id, "still here").await;
    let outcome = f.harness.await_turn(&turn, None).await.unwrap();
    assert_eq!(outcome.result.text.as_deref(), Some("still here"));
    let turn =
        f.harness.start_turn(&session, "per turn", TurnOptions::new().inactivity_timeout(Duration::MAX)).await.unwrap();
    assert_eq!(f.harness.status(&session).await.unwrap().current_turn.map(|t| t.id), Some(turn.id));
}
