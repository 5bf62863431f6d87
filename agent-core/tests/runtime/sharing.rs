//! Sessions in a store several harnesses share: what one holds live, or is starting, the
//! others neither take over nor replace, and a session whose holder is gone reads as abandoned.

use std::time::Duration;

use agent_core::testing::OpenBehavior;
use agent_core::*;

use crate::common::*;

#[tokio::test]
async fn a_live_session_is_not_taken_over_by_another_harness_sharing_the_store() {
    let f = Fixture::new();
    let (session, remote) = f.session(opts().id("shared")).await;
    assert!(acknowledged(&f, &session).await);

    let (provider, _control) = agent_core::testing::ScriptedProvider::new(PROVIDER);
    let other = Harness::builder().provider(provider).store(StoreChoice::Custom(f.dyn_store())).build().unwrap();
    let pid = std::process::id();
    let elsewhere = |err: Error| {
        assert!(
            matches!(err, Error::SessionLiveElsewhere { ref id, pid: p } if *id == session.id && p == pid),
            "{err:?}"
        );
        assert_eq!(err.kind().as_str(), "session_live_elsewhere");
    };
    elsewhere(other.start_session(PROVIDER, opts().id("shared")).await.unwrap_err());
    elsewhere(other.start_session(PROVIDER, opts().id("shared").reuse(Reuse::Replace)).await.unwrap_err());
    elsewhere(other.start_session(PROVIDER, opts().resume_session(session.id.clone())).await.unwrap_err());
    elsewhere(other.purge_session(&session).await.unwrap_err());
    elsewhere(other.start_turn(&session, "here?", TurnOptions::new()).await.unwrap_err());
    elsewhere(other.stop_session(&session, true).await.unwrap_err());
    let listed = other.list_stored_sessions().await.unwrap();
    let [stored] = &listed[..] else { panic!("{listed:?}") };
    assert_eq!((stored.snapshot.status, stored.live), (SessionState::Idle, false), "live, but not in this harness");
    assert_eq!(stored.snapshot.ended, None);
    assert_eq!(
        f.harness.status(&session).await.unwrap().status,
        SessionState::Idle,
        "the first harness's session runs on"
    );
    let events = f.store.read_events(&session.id, &agent_core::store::EventQuery::all()).await.unwrap();
    assert_eq!(events.first().map(|e| e.type_name()), Some("session_ready"), "its history is untouched");
    assert_eq!(events.len(), 1, "nothing was recorded by the refused attempts");
    // A turn running there ends there: this harness cannot await it.
    let turn = f.admitted_turn(&session, "work").await;
    match other.await_turn(&turn, Some(Duration::from_secs(5))).await.unwrap_err() {
        AwaitError::Failed(err) => elsewhere(err),
        err => panic!("{err:?}"),
    }
    // Its pending request is answered there, not called expired here.
    let mut events = f.harness.subscribe(&turn, Replay::Latest).await.unwrap();
    let spec = agent_core::request::RequestSpec::new(RequestKind::CommandApproval, "Run `ls`?", "approve-ls");
    remote.request(&turn.id, spec).await;
    let request = request_of(&next(&mut events).await);
    elsewhere(other.respond(&request, Response::approve()).await.unwrap_err());
    f.harness.respond(&request, Response::approve()).await.unwrap();
    assert!(matches!(
        other.respond(&request, Response::approve()).await.unwrap_err(),
        Error::SessionLiveElsewhere { .. }
    ));
    // Nor replay it as if what is stored were the end of it: the session and its running turn
    // go on there.
    elsewhere(other.subscribe(&session, Replay::Start).await.map(|_| ()).unwrap_err());
    elsewhere(other.subscribe(&turn, Replay::Start).await.map(|_| ()).unwrap_err());
    elsewhere(other.stream(&turn, Replay::Start, None).await.map(|_| ()).unwrap_err());
    remote.complete(&turn.id, "done").await;
    f.harness.await_turn(&turn, None).await.unwrap();
    // A turn that ended there is whole in the store.
    let mut replayed = other.subscribe(&turn, Replay::Start).await.unwrap();
    let first = tokio::time::timeout(Duration::from_secs(5), replayed.next()).await.unwrap();
    assert_eq!(first.map(|e| e.unwrap().type_name()), Some("turn_started"));

    // Stopped there, it is the other harness's to resume.
    f.harness.stop_session(&session, false).await.unwrap();
    let resumed = other.start_session(PROVIDER, opts().resume_session(session.id.clone())).await.unwrap();
    assert_eq!(resumed, session);
    elsewhere(f.harness.start_session(PROVIDER, opts().resume_session(session.id.clone())).await.unwrap_err());
    // The first harness remembers how its own run ended, but the session runs elsewhere now.
    elsewhere(f.harness.status(&session).await.unwrap_err());
    elsewhere(f.harness.start_turn(&session, "mine again?", TurnOptions::new()).await.unwrap_err());
    elsewhere(f.harness.subscribe(&session, Replay::Latest).await.map(|_| ()).unwrap_err());
}

#[tokio::test]
async fn a_session_whose_recorded_owner_is_gone_reads_as_abandoned_and_resumes() {
    let f = Fixture::new();
    let (session, remote) = f.session(opts().id("orphan")).await;
    assert!(acknowledged(&f, &session).await);
    let turn = f.admitted_turn(&session, "work").await;
    remote.complete(&turn.id, "done").await;
    f.harness.await_turn(&turn, None).await.unwrap();
    let mut snapshot = f.store.fetch_session(&session.id).await.unwrap().unwrap();
    let owner = snapshot.owner.clone().expect("Linux: the run recorded its harness");
    assert_eq!(owner.pid, std::process::id());
    f.harness.shutdown().await;
    // A turn the killed host was running: stored, with no terminal event.
    let mut unfinished = turn.clone();
    unfinished.id = TurnId::generate();
    (unfinished.status, unfinished.finished_at, unfinished.result) = (TurnStatus::Running, None, None);
    f.store.save_turn(&unfinished).await.unwrap();

    // The record a killed host leaves: the session open, its owner a process that is gone.
    let gone: SessionOwner = serde_json::from_value(serde_json::json!({"pid": owner.pid, "started": owner.started + 1,
            "boot_id": owner.boot_id, "harness": owner.harness}))
    .unwrap();
    snapshot.status = SessionState::Running;
    snapshot.ended = None;
    snapshot.owner = Some(Box::new(gone));
    f.store.save_session(&snapshot).await.unwrap();

    let (provider, _control) = agent_core::testing::ScriptedProvider::new(PROVIDER);
    let other = Harness::builder().provider(provider).store(StoreChoice::Custom(f.dyn_store())).build().unwrap();
    let listed = other.list_stored_sessions().await.unwrap();
    assert_eq!(listed[0].snapshot.status, SessionState::Abandoned);
    // The unfinished turn ended with the session, as `status` says.
    let abandoned = |err: &Error| matches!(err, Error::SessionClosed { reason: ExitReason::Abandoned { .. }, .. });
    assert!(abandoned(&other.status(&session).await.unwrap_err()));
    match other.await_turn(&unfinished, None).await.unwrap_err() {
        AwaitError::Failed(err) => assert!(abandoned(&err), "{err:?}"),
        err => panic!("{err:?}"),
    }
    // Its stream replays what is stored, then ends the way `status` says the session did.
    let streamed = other.stream(&unfinished, Replay::Start, None).await.unwrap().collect().await;
    assert!(
        matches!(streamed, Err(StreamError::SessionDown(ExitReason::Abandoned { last_status: SessionState::Running }))),
        "{streamed:?}"
    );
    let resumed = other.start_session(PROVIDER, opts().resume_session(session.id.clone())).await.unwrap();
    assert_eq!(resumed, session);
    let stored = f.store.fetch_session(&session.id).await.unwrap().unwrap();
    assert_ne!(stored.owner.as_ref().map(|o| o.harness), Some(owner.harness), "the new run records its own harness");
}

/// A second harness on the store, its provider opening for `open` (paused clock).
fn slow_harness(f: &Fixture, open: Duration) -> Harness {
    let (provider, control) = agent_core::testing::ScriptedProvider::new(PROVIDER);
    control.set_open(agent_core::testing::OpenBehavior::Delay(open));
    Harness::builder().provider(provider).store(StoreChoice::Custom(f.dyn_store())).build().unwrap()
}

/// Starts `options` on `harness` in a task, and lets it get as far as its provider's open.
async fn opening(harness: &Harness, options: SessionOptions) -> tokio::task::JoinHandle<Result<SessionRef>> {
    let harness = harness.clone();
    let start = tokio::spawn(async move { harness.start_session(PROVIDER, options).await });
    tokio::time::sleep(Duration::from_secs(1)).await;
    start
}

#[tokio::test(start_paused = true)]
async fn a_start_that_another_harness_overtook_while_it_opened_commits_nothing() {
    let f = Fixture::new();
    let (session, _) = f.session(opts().id("raced")).await;
    f.harness.stop_session(&session, false).await.unwrap();
    let slow = slow_harness(&f, Duration::from_secs(5));

    // Both replace the closed session; the first harness opens at once and runs a turn.
    let late = opening(&slow, opts().id("raced").reuse(Reuse::Closed)).await;
    let fast = f.harness.start_session(PROVIDER, opts().id("raced").reuse(Reuse::Closed)).await.unwrap();
    f.control.push_script([agent_core::testing::Frame::complete("mine")]);
    let turn = f.harness.start_turn(&fast, "1", TurnOptions::new()).await.unwrap();
    f.harness.await_turn(&turn, None).await.unwrap();

    let err = late.await.unwrap().unwrap_err();
    assert!(matches!(err, Error::SessionLiveElsewhere { pid, .. } if pid == std::process::id()), "{err:?}");
    let events = f.store.read_events(&session.id, &agent_core::store::EventQuery::all()).await.unwrap();
    let names: Vec<_> = events.iter().map(|e| e.type_name()).collect();
    assert_eq!(names, ["session_ready", "turn_started", "turn_completed"], "the live run's history is whole");
    assert_eq!(f.harness.status(&fast).await.unwrap().status, SessionState::Idle);
}

#[tokio::test(start_paused = true)]
async fn of_two_resumes_at_once_the_second_to_commit_fails_and_runs_nothing() {
    let f = Fixture::new();
    let (session, _) = f.session(opts().id("twice")).await;
    f.harness.stop_session(&session, false).await.unwrap();
    let slow = slow_harness(&f, Duration::from_secs(5));

    let late = opening(&slow, opts().resume_session(session.id.clone())).await;
    f.harness.start_session(PROVIDER, opts().resume_session(session.id.clone())).await.unwrap();
    let err = late.await.unwrap().unwrap_err();
    assert!(matches!(err, Error::SessionLiveElsewhere { .. }), "{err:?}");
    assert!(slow.list_sessions().is_empty(), "nothing runs beside the first");

    // A winner that has already stopped again: its newer history is what the late resume
    // would have overwritten.
    f.harness.stop_session(&session, false).await.unwrap();
    let late = opening(&slow, opts().resume_session(session.id.clone())).await;
    f.harness.start_session(PROVIDER, opts().resume_session(session.id.clone())).await.unwrap();
    f.harness.stop_session(&session, false).await.unwrap();
    let err = late.await.unwrap().unwrap_err();
    assert!(
        matches!(err, Error::ResumeFailed { ref reason, .. } if reason.contains("written by another harness")),
        "{err:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_resume_that_failed_records_nothing_in_a_session_another_harness_replaced() {
    let f = Fixture::new();
    let (session, _) = f.session(opts().id("renewed")).await;
    f.harness.stop_session(&session, false).await.unwrap();
    let (provider, control) = agent_core::testing::ScriptedProvider::new(PROVIDER);
    control.set_open(OpenBehavior::FailAfter(Duration::from_secs(5), "no such conversation".into()));
    let slow = Harness::builder().provider(provider).store(StoreChoice::Custom(f.dyn_store())).build().unwrap();

    // The resume's open fails, late; meanwhile the session is replaced.
    let late = opening(&slow, opts().resume_session(session.id.clone())).await;
    let fresh = f.harness.start_session(PROVIDER, opts().id("renewed").reuse(Reuse::Replace)).await.unwrap();
    let err = late.await.unwrap().unwrap_err();
    assert!(matches!(err, Error::ProviderUnavailable { .. }), "{err:?}");
    // The new run goes past the seqs the old history had used.
    f.control.push_script([agent_core::testing::Frame::complete("mine")]);
    let turn = f.harness.start_turn(&fresh, "1", TurnOptions::new()).await.unwrap();
    f.harness.await_turn(&turn, None).await.unwrap();

    let events = f.store.read_events(&session.id, &agent_core::store::EventQuery::all()).await.unwrap();
    let names: Vec<_> = events.iter().map(|e| e.type_name()).collect();
    assert_eq!(names, ["session_ready", "turn_started", "turn_completed"], "the new run's history is its own");
    assert_eq!(f.harness.status(&fresh).await.unwrap().durability, Durability::Durable);
}

#[tokio::test]
async fn a_harness_reports_the_end_of_a_later_run_another_harness_made_not_its_own() {
    let f = Fixture::new();
    let (session, _) = f.session(opts().id("handed-on")).await;
    f.harness.stop_session(&session, false).await.unwrap();
    let (provider, _control) = agent_core::testing::ScriptedProvider::new(PROVIDER);
    let other = Harness::builder().provider(provider).store(StoreChoice::Custom(f.dyn_store())).build().unwrap();
    let resumed = other.start_session(PROVIDER, opts().resume_session(session.id.clone())).await.unwrap();
    other.stop_session(&resumed, true).await.unwrap();

    let forced = ExitReason::Closed { reason: CloseReason::ForcedStop };
    match f.harness.status(&session).await.unwrap_err() {
        Error::SessionClosed { reason, .. } => assert_eq!(reason, forced, "the later run's end"),
        err => panic!("{err:?}"),
    }
    let ended = f.harness.monitor(&session).await.unwrap().await;
    assert_eq!(ended, forced);
}

#[tokio::test(start_paused = true)]
async fn a_session_purged_while_it_was_being_resumed_is_not_resumed_empty() {
    let f = Fixture::new();
    let (session, _) = f.session(opts().id("purged")).await;
    f.harness.stop_session(&session, false).await.unwrap();
    let slow = slow_harness(&f, Duration::from_secs(5));

    let late = opening(&slow, opts().resume_session(session.id.clone())).await;
    f.harness.purge_session(&session).await.unwrap();
    let err = late.await.unwrap().unwrap_err();
    assert!(matches!(err, Error::ResumeFailed { ref reason, .. } if reason.contains("purged")), "{err:?}");
    assert!(f.store.fetch_session(&session.id).await.unwrap().is_none(), "nothing was committed");
    assert_eq!(f.store.latest_seq(&session.id).await.unwrap(), None);
}

#[tokio::test(start_paused = true)]
async fn an_initial_commit_refused_as_a_conflict_fails_the_start_under_any_policy() {
    let (f, store) = Fixture::controlled();
    store.set(WriteMode::Conflict);
    let err = f.harness.start_session(PROVIDER, opts().id("conflicted")).await.unwrap_err();
    assert!(matches!(err, Error::Store(StoreError::Conflict(_))), "degraded into a running session: {err:?}");
    assert!(f.harness.list_sessions().is_empty());
}

#[tokio::test(start_paused = true)]
async fn the_recheck_before_the_initial_commit_is_bounded_like_the_commit() {
    let (f, store) = Fixture::controlled();
    f.control.set_open(agent_core::testing::OpenBehavior::Delay(Duration::from_secs(5)));
    let options = opts().id("stuck").startup_finalization_timeout(Duration::from_secs(3));
    let start = opening(&f.harness, options).await;
    // The store stops answering reads while the provider opens.
    store.hang_session_reads();
    let err = start.await.unwrap().unwrap_err();
    assert!(matches!(err, Error::StartupFinalizationTimeout { .. }), "{err:?}");
    assert!(f.harness.list_sessions().is_empty());
}

/// A start under way when `shutdown` is called is stopped once live, and `shutdown` waits for
/// it; a start after `shutdown` runs normally.
#[tokio::test(start_paused = true)]
async fn shutdown_also_stops_a_session_whose_start_was_under_way() {
    let f = Fixture::new();
    f.control.set_open(OpenBehavior::Delay(Duration::from_secs(1)));
    let harness = f.harness.clone();
    let starting = tokio::spawn(async move { harness.start_session(PROVIDER, opts().id("late")).await });
    tokio::time::sleep(Duration::from_millis(10)).await;
    f.harness.shutdown().await;
    assert!(f.harness.list_sessions().is_empty(), "shutdown returned with a session live");
    let started = starting.await.unwrap();
    assert!(f.harness.list_sessions().is_empty(), "the start under way ended live: {started:?}");
    if let Ok(session) = started {
        let monitor = f.harness.monitor(&session).await.unwrap();
        let reason = monitor.await;
        assert!(matches!(reason, ExitReason::Closed { reason: CloseReason::HarnessShutdown }), "{reason:?}");
    }

    f.control.set_open(OpenBehavior::Succeed);
    let after = f.harness.start_session(PROVIDER, opts().id("after")).await.unwrap();
    assert_eq!(f.harness.list_sessions(), [after]);
}

/// `stop_session` on a session whose start is under way stops it once live, where it used to
/// return at once and leave it running.
#[tokio::test(start_paused = true)]
async fn stop_session_stops_a_session_whose_start_is_under_way() {
    let f = Fixture::new();
    f.control.set_open(OpenBehavior::Delay(Duration::from_secs(1)));
    let harness = f.harness.clone();
    let starting = tokio::spawn(async move { harness.start_session(PROVIDER, opts().id("early")).await });
    tokio::time::sleep(Duration::from_millis(10)).await;
    let session = SessionRef { provider: ProviderId::new(PROVIDER), id: SessionId::new("early").unwrap() };
    f.harness.stop_session(&session, true).await.expect("stopped");
    assert!(f.harness.list_sessions().is_empty(), "stop_session returned with the session live");
    let started = starting.await.unwrap().expect("the start itself succeeded");
    let monitor = f.harness.monitor(&started).await.unwrap();
    let reason = tokio::time::timeout(Duration::from_secs(60), monitor).await.expect("the session was stopped");
    assert!(matches!(reason, ExitReason::Closed { reason: CloseReason::ForcedStop }), "{reason:?}");
}

/// A run whose startup is committed but not yet acknowledged (its actor's first write still
/// queued) is live: another harness sharing the store that starts the same ID gets
/// `SessionLiveElsewhere` instead of taking it for a startup left unfinished and replacing the
/// run's history.
#[tokio::test(start_paused = true)]
async fn a_startup_not_yet_acknowledged_is_live_to_another_harness() {
    let (f, store) = Fixture::controlled();
    store.set(WriteMode::Queued);
    let session = f.harness.start_session(PROVIDER, opts().id("both")).await.unwrap();
    tokio::task::yield_now().await;
    let stored = store.inner.fetch_session(&session.id).await.unwrap().unwrap();
    assert!(stored.startup.is_some(), "the acknowledgement is still queued: {stored:?}");

    let (provider, _control) = agent_core::testing::ScriptedProvider::new(PROVIDER);
    let other = Harness::builder().provider(provider).store(StoreChoice::Custom(store.clone())).build().unwrap();
    for reuse in [Reuse::Never, Reuse::Replace] {
        let err = other.start_session(PROVIDER, opts().id("both").reuse(reuse)).await.unwrap_err();
        assert!(matches!(err, Error::SessionLiveElsewhere { pid, .. } if pid == std::process::id()), "{err:?}");
    }
    let events = store.inner.read_events(&session.id, &agent_core::store::EventQuery::all()).await.unwrap();
    assert_eq!(events.iter().map(|e| e.type_name()).collect::<Vec<_>>(), ["session_ready"], "kept whole");
    while !store.queued().is_empty() {
        store.release(false).unwrap();
    }
    assert_eq!(f.harness.status(&session).await.unwrap().status, SessionState::Idle);
}
