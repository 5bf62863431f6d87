//! The store failure policy: `Degrade` keeps the session live, `Stop` ends it.

use agent_core::*;

use crate::common::*;

#[tokio::test]
async fn degrade_keeps_the_session_running_live_only() {
    let store = ControlledStore::new();
    let f = Fixture::with(|b| b.store(StoreChoice::Custom(store.clone())));
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
    let store = ControlledStore::new();
    let f = Fixture::with(|b| b.store(StoreChoice::Custom(store.clone())));
    let (session, remote) = f.session(opts().store_failure(StoreFailurePolicy::Stop)).await;
    let turn = f.admitted_turn(&session, "work").await;
    let mut events = f.harness.subscribe(&session, Replay::Latest).await.unwrap();
    let monitor = f.harness.monitor(&session).unwrap();
    store.set(WriteMode::Fail);
    remote.delta(&turn.id, "x").await;
    assert_eq!(next(&mut events).await.type_name(), "message_delta");
    assert!(matches!(next(&mut events).await.kind, EventKind::StoreFailed { policy: StoreFailurePolicy::Stop, .. }));
    assert_eq!(next(&mut events).await.type_name(), "turn_interrupted");
    assert!(matches!(next(&mut events).await.kind, EventKind::SessionClosed { reason: CloseReason::StoreFailed }));
    assert!(matches!(monitor.await, ExitReason::StoreFailed { ref reason } if reason.contains("read-only")));
    assert!(remote.is_closed());
    assert!(f.harness.list_sessions().is_empty());
}

#[tokio::test]
async fn a_failed_initial_commit_degrades_or_refuses_the_start_by_policy() {
    let store = ControlledStore::new();
    let f = Fixture::with(|b| b.store(StoreChoice::Custom(store.clone())));
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
