//! The store failure policy: `Degrade` keeps the session live, `Stop` ends it.

use std::sync::Arc;
use std::time::Duration;

use agent_core::*;

use crate::common::*;

#[tokio::test]
async fn degrade_keeps_the_session_running_live_only() {
    let (f, store) = Fixture::controlled();
    let (session, remote) = f.session(opts()).await;
    let turn = f.admitted_turn(&session, "work").await;
    let mut events = f.harness.subscribe(&session, Replay::Latest).await.unwrap();
    store.set(WriteMode::Fail);
    remote.delta(&turn.id, "not durable").await;
    assert_eq!(next(&mut events).await.type_name(), "message_delta", "the failed batch is still delivered");
    let failed = next(&mut events).await;
    match &failed.kind {
        EventKind::StoreFailed { reason, policy } => {
            assert!(reason.contains("read-only"));
            assert_eq!(*policy, StoreFailurePolicy::Degrade);
        }
        other => panic!("expected store_failed, got {other:?}"),
    }
    assert!(matches!(f.harness.status(&session).await.unwrap().durability, Durability::Degraded { .. }));
    // The session goes on without the store.
    store.set(WriteMode::Normal);
    remote.complete(&turn.id, "done").await;
    assert_eq!(f.harness.await_turn(&turn, None).await.unwrap().result.text.as_deref(), Some("done"));
    let stored = store.read_events(&session.id, &Default::default()).await.unwrap();
    assert!(stored.iter().all(|e| e.type_name() != "turn_completed"), "nothing is written after degrading");
    f.admitted_turn(&session, "next").await;
}

#[tokio::test]
async fn stop_ends_the_session_cleanly() {
    let (f, store) = Fixture::controlled();
    let (session, remote) = f.session(opts().store_failure(StoreFailurePolicy::Stop)).await;
    let turn = f.admitted_turn(&session, "work").await;
    let mut events = f.harness.subscribe(&session, Replay::Latest).await.unwrap();
    let monitor = f.harness.monitor(&session).await.unwrap();
    store.set(WriteMode::Fail);
    remote.delta(&turn.id, "x").await;
    assert_eq!(next(&mut events).await.type_name(), "message_delta");
    assert!(matches!(next(&mut events).await.kind, EventKind::StoreFailed { policy: StoreFailurePolicy::Stop, .. }));
    assert_eq!(next(&mut events).await.type_name(), "turn_interrupted");
    assert!(matches!(next(&mut events).await.kind, EventKind::SessionClosed { reason: CloseReason::StoreFailed }));
    assert!(matches!(monitor.await, ExitReason::StoreFailed { ref reason } if reason.contains("read-only")));
    assert!(remote.is_closed());
    assert!(f.harness.list_sessions().is_empty());
    // Asked afterwards, the turn the store never saw end is the closed session's, as `status` says.
    store.set(WriteMode::Normal);
    let err = f.harness.await_turn(&turn, None).await.unwrap_err();
    assert!(
        matches!(err, AwaitError::Failed(Error::SessionClosed { reason: ExitReason::StoreFailed { .. }, .. })),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_failed_initial_commit_degrades_or_refuses_the_start_by_policy() {
    let (f, store) = Fixture::controlled();
    store.set(WriteMode::Fail);
    let (session, _) = f.session(opts().id("degraded-start")).await;
    let status = f.harness.status(&session).await.unwrap();
    assert!(matches!(status.durability, Durability::Degraded { .. }), "{status:?}");
    let types = drain_types_until(f.harness.subscribe(&session, Replay::Start).await.unwrap(), 2).await;
    assert_eq!(types, ["session_ready", "store_failed"]);

    let err = f
        .harness
        .start_session(PROVIDER, opts().id("refused-start").store_failure(StoreFailurePolicy::Stop))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Store(StoreError::WriteRefused(_))), "{err:?}");
    assert!(f.harness.list_sessions().iter().all(|s| s.id.as_str() != "refused-start"));
}

async fn drain_types_until(mut events: Subscription, n: usize) -> Vec<&'static str> {
    let mut types = Vec::new();
    for _ in 0..n {
        types.push(next(&mut events).await.type_name());
    }
    types
}

#[tokio::test]
async fn under_stop_a_turn_whose_checkpoint_fails_is_refused_with_the_store_error() {
    let (f, store) = Fixture::controlled();
    let (session, remote) = f.session(opts().store_failure(StoreFailurePolicy::Stop)).await;
    let monitor = f.harness.monitor(&session).await.unwrap();
    store.set(WriteMode::Fail);
    let err = f.harness.start_turn(&session, "work", TurnOptions::new()).await.unwrap_err();
    assert!(matches!(err, Error::Store(StoreError::WriteRefused(_))), "{err:?}");
    assert!(matches!(monitor.await, ExitReason::StoreFailed { .. }));
    assert!(
        !remote.commands().iter().any(|c| matches!(c, agent_core::testing::Recorded::StartTurn { .. })),
        "a turn that was never checkpointed is never admitted"
    );
}

#[tokio::test]
async fn under_degrade_a_turn_whose_checkpoint_fails_runs_live_only() {
    let (f, store) = Fixture::controlled();
    let (session, remote) = f.session(opts()).await;
    store.set(WriteMode::Fail);
    let turn = f.harness.start_turn(&session, "work", TurnOptions::new()).await.unwrap();
    remote.complete(&turn.id, "done").await;
    assert_eq!(f.harness.await_turn(&turn, None).await.unwrap().result.text.as_deref(), Some("done"));
    assert!(matches!(f.harness.status(&session).await.unwrap().durability, Durability::Degraded { .. }));
}

#[tokio::test]
async fn a_store_that_panics_is_a_store_failure_and_loses_no_event_or_reply() {
    let (f, store) = Fixture::controlled();
    let (session, remote) = f.session(opts()).await;
    let turn = f.admitted_turn(&session, "work").await;
    let mut events = f.harness.subscribe(&session, Replay::Latest).await.unwrap();
    store.set(WriteMode::Panic);
    remote.delta(&turn.id, "kept").await;
    let delta = next(&mut events).await;
    assert_eq!(delta.type_name(), "message_delta", "the panicked batch's event is still published");
    let failed = next(&mut events).await;
    assert!(
        matches!(&failed.kind, EventKind::StoreFailed { reason, policy: StoreFailurePolicy::Degrade } if reason.contains("panicked")),
        "{failed:?}"
    );
    assert_eq!(failed.seq, delta.seq + 1, "no seq is skipped");
    // Replies still come: the session went on live-only.
    f.harness.cancel(&turn).await.unwrap();
    let outcome = f.harness.await_turn(&turn, None).await.unwrap_err();
    assert!(matches!(outcome, AwaitError::Ended(ref o) if o.status == TurnStatus::Cancelled), "{outcome:?}");

    store.set(WriteMode::Normal);
    let (stopping, _) = f.session(opts().store_failure(StoreFailurePolicy::Stop)).await;
    let monitor = f.harness.monitor(&stopping).await.unwrap();
    store.set(WriteMode::Panic);
    let err = f.harness.start_turn(&stopping, "work", TurnOptions::new()).await.unwrap_err();
    assert!(matches!(err, Error::Store(StoreError::Backend(_))), "{err:?}");
    assert!(matches!(monitor.await, ExitReason::StoreFailed { ref reason } if reason.contains("panicked")));
}

#[tokio::test]
async fn a_degraded_session_records_its_end_when_the_store_is_back() {
    let (f, store) = Fixture::controlled();
    let (session, remote) = f.session(opts()).await;
    let turn = f.admitted_turn(&session, "work").await;
    store.set(WriteMode::Fail);
    remote.complete(&turn.id, "done").await;
    f.harness.await_turn(&turn, None).await.unwrap();
    store.set(WriteMode::Normal);
    f.harness.stop_session(&session, false).await.unwrap();
    let stored = store.fetch_session(&session.id).await.unwrap().unwrap();
    assert_eq!(stored.status, SessionState::Closed, "never left reading as running");
    assert_eq!(stored.ended, Some(ExitReason::Closed { reason: CloseReason::Stopped }));
    assert!(matches!(stored.durability, Durability::Degraded { .. }), "the history is marked incomplete");
    // Subscribers saw events the store never got; a resume goes on after them.
    let stored_latest = store.latest_seq(&session.id).await.unwrap().unwrap();
    let published = stored.published_seq.expect("the final snapshot says how far the session published");
    assert!(published > stored_latest, "the turn's end and the close were live-only: {published} > {stored_latest}");
    // A replay across the live-only stretch says what it misses rather than jump it, before the
    // resume and after it.
    let missing = format!("events {}..{published} are", stored_latest + 1);
    let across = |item: Option<Result<Arc<Event>, SubscriptionError>>| match item {
        Some(Err(SubscriptionError::ReplayFailed { resume_after, reason })) => {
            assert_eq!(resume_after, stored_latest);
            assert!(reason.contains(&missing), "{reason}");
        }
        other => panic!("expected the replay to fail at the missing events, got {other:?}"),
    };
    let mut stopped = f.harness.subscribe(&session, Replay::After(stored_latest - 1)).await.unwrap();
    assert_eq!(next(&mut stopped).await.seq, stored_latest);
    across(stopped.next().await);
    let resumed = f.harness.start_session(PROVIDER, opts().resume_session(session.id.clone())).await.unwrap();
    let mut events = f.harness.subscribe(&resumed, Replay::After(stored_latest)).await.unwrap();
    across(events.next().await);
    // After them, the resumed run goes on.
    let mut events = f.harness.subscribe(&resumed, Replay::After(published)).await.unwrap();
    let first = next(&mut events).await;
    assert_eq!((first.seq, first.type_name()), (published + 1, "session_ready"));
}

#[tokio::test]
async fn a_degraded_session_whose_store_stays_down_reads_back_as_abandoned() {
    let (f, store) = Fixture::controlled();
    let (session, remote) = f.session(opts()).await;
    let turn = f.admitted_turn(&session, "work").await;
    store.set(WriteMode::Fail);
    remote.complete(&turn.id, "done").await;
    f.harness.await_turn(&turn, None).await.unwrap();
    f.harness.stop_session(&session, false).await.unwrap();
    let listed = f.harness.list_stored_sessions().await.unwrap();
    let stored = listed.iter().find(|s| s.session_id == session.id).expect("listed");
    assert_eq!(stored.snapshot.status, SessionState::Abandoned, "not `running`: {stored:?}");
    assert_eq!(stored.snapshot.ended, Some(ExitReason::Closed { reason: CloseReason::Stopped }), "what is known");
}

/// The same session resumed in the harness that ran it, once the store is back: it goes on
/// after the last seq its subscribers saw, though its final snapshot, which says how far it
/// published, never reached the store — no seq names two events.
#[tokio::test]
async fn a_session_whose_store_stayed_down_to_its_end_resumes_after_what_it_published() {
    let (f, store) = Fixture::controlled();
    let (session, remote) = f.session(opts()).await;
    let mut watching = f.harness.subscribe(&session, Replay::Start).await.unwrap();
    let turn = f.admitted_turn(&session, "work").await;
    store.set(WriteMode::Fail);
    remote.complete(&turn.id, "done").await;
    f.harness.await_turn(&turn, None).await.unwrap();
    f.harness.stop_session(&session, false).await.unwrap();
    let mut published = 0;
    while let Some(Ok(event)) = watching.next().await {
        published = event.seq;
    }
    store.set(WriteMode::Normal);
    let stored_latest = store.latest_seq(&session.id).await.unwrap().unwrap();
    assert!(published > stored_latest, "the turn's end and the close were live-only");

    let resumed = f.harness.start_session(PROVIDER, opts().resume_session(session.id.clone())).await.unwrap();
    let latest = f.harness.status(&resumed).await.unwrap().last_seq;
    assert!(latest > published, "the resumed run's events come after {published}, its latest is {latest}");
    let mut events = f.harness.subscribe(&resumed, Replay::After(published)).await.unwrap();
    // The turn's end never reached the store: the resume closes it there first.
    let first = next(&mut events).await;
    assert_eq!((first.seq, first.type_name()), (published + 1, "turn_interrupted"));
    assert_eq!(next(&mut events).await.type_name(), "session_ready");
}

/// A store that stops answering mid-turn keeps neither a forced stop nor the harness's shutdown
/// waiting, nor the provider running: the provider closes beside the last writes, each bounded
/// by `startup_finalization_timeout`.
#[tokio::test(start_paused = true)]
async fn a_store_that_stops_answering_keeps_no_stop_waiting_and_no_provider_running() {
    let finalize = Duration::from_secs(2);
    for forced in [true, false] {
        let (f, store) = Fixture::controlled();
        let (session, remote) = f.session(opts().startup_finalization_timeout(finalize)).await;
        let turn = f.admitted_turn(&session, "work").await;
        store.set(WriteMode::Hang);
        remote.delta(&turn.id, "x").await;
        let began = tokio::time::Instant::now();
        let stop = async {
            if forced {
                f.harness.stop_session(&session, true).await.unwrap();
            } else {
                f.harness.shutdown().await;
            }
        };
        tokio::time::timeout(finalize * 10, stop).await.unwrap_or_else(|_| panic!("forced {forced}: still stopping"));
        assert!(began.elapsed() <= finalize * 2, "forced {forced}: ended after {:?}", began.elapsed());
        assert!(remote.is_closed(), "forced {forced}: the provider was closed");
        assert!(f.harness.list_sessions().is_empty(), "forced {forced}");
    }
}
