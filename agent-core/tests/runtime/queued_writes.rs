//! A store that queues writes in order (`Store::enqueue`): the session keeps up to three in
//! flight, publishes their events in seq order as each commits, and a failure ahead of queued
//! writes loses and reorders nothing.

use agent_core::*;

use crate::common::*;

/// Lets the session's tasks run until `done` holds (paused clock: nothing else advances).
async fn settle(done: impl Fn() -> bool) {
    for _ in 0..1000 {
        if done() {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("the session never reached the expected state");
}

fn delta_text(event: &Event) -> &str {
    match &event.kind {
        EventKind::MessageDelta { text, .. } => text,
        other => panic!("expected message_delta, got {other:?}"),
    }
}

/// A session with a running turn and a subscriber, on a store that now queues its writes.
struct Queueing {
    f: Fixture,
    store: std::sync::Arc<ControlledStore>,
    session: SessionRef,
    remote: agent_core::testing::ScriptedSession,
    turn: Turn,
    events: Subscription,
    /// How many events the store held when it started queuing.
    stored_before: usize,
}

impl Queueing {
    async fn start() -> Self {
        let (f, store) = Fixture::controlled();
        let (session, remote) = f.session(opts()).await;
        let turn = f.admitted_turn(&session, "work").await;
        let events = f.harness.subscribe(&session, Replay::Latest).await.unwrap();
        let stored_before = store.read_events(&session.id, &Default::default()).await.unwrap().len();
        store.set(WriteMode::Queued);
        Queueing { f, store, session, remote, turn, events, stored_before }
    }
}

#[tokio::test]
async fn three_writes_are_in_flight_and_each_publishes_in_order_when_it_commits() {
    let Queueing { f, store, session, remote, turn, mut events, stored_before: _ } = Queueing::start().await;
    for (i, text) in ["a", "b", "c", "d"].into_iter().enumerate() {
        remote.delta(&turn.id, text).await;
        settle(|| store.queued().len() == (i + 1).min(3)).await;
    }
    let queued = store.queued();
    assert_eq!(queued.iter().map(|q| q.2).collect::<Vec<_>>(), [false, true, true], "{queued:?}");
    assert!(queued.windows(2).all(|w| w[1].0 == w[0].1 + 1), "queued in seq order: {queued:?}");
    // Nothing is published before it committed.
    assert!(futures::FutureExt::now_or_never(next(&mut events)).is_none());

    store.release(false).unwrap();
    assert_eq!(delta_text(&*next(&mut events).await), "a");
    // A slot opened: the fourth delta is queued behind the other two.
    settle(|| store.queued().len() == 3).await;
    for expected in ["b", "c", "d"] {
        store.release(false).unwrap();
        assert_eq!(delta_text(&*next(&mut events).await), expected);
    }
    store.set(WriteMode::Normal);
    remote.complete(&turn.id, "done").await;
    assert_eq!(f.harness.await_turn(&turn, None).await.unwrap().result.text.as_deref(), Some("done"));
    let stored = store.read_events(&session.id, &Default::default()).await.unwrap();
    let texts: Vec<_> = stored.iter().filter(|e| e.type_name() == "message_delta").map(|e| delta_text(e)).collect();
    assert_eq!(texts, ["a", "b", "c", "d"], "every delta stored once, in order");
    assert!(stored.windows(2).all(|w| w[1].seq == w[0].seq + 1), "no gap in the stored journal");
}

#[tokio::test]
async fn a_failed_write_ahead_of_queued_ones_degrades_and_publishes_every_event_in_order() {
    let Queueing { f, store, session, remote, turn, mut events, stored_before } = Queueing::start().await;
    for (i, text) in ["a", "b", "c"].into_iter().enumerate() {
        remote.delta(&turn.id, text).await;
        settle(|| store.queued().len() == i + 1).await;
    }
    remote.delta(&turn.id, "d").await;
    // The actor takes `d` into its pending batch (the test runtime has one thread: yielding
    // runs it), where it waits for a slot.
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
    assert_eq!(store.queued().len(), 3);
    assert!(store.release(true).is_err());
    for expected in ["a", "b", "c", "d"] {
        assert_eq!(delta_text(&*next(&mut events).await), expected, "every event delivered, in order");
    }
    assert!(matches!(next(&mut events).await.kind, EventKind::StoreFailed { policy: StoreFailurePolicy::Degrade, .. }));
    assert!(matches!(f.harness.status(&session).await.unwrap().durability, Durability::Degraded { .. }));
    // The writes queued behind the failed one follow it, so the store refuses them unapplied.
    assert!(store.release(false).is_err() && store.release(false).is_err());
    assert_eq!(store.read_events(&session.id, &Default::default()).await.unwrap().len(), stored_before, "no gap");
    // Live-only from now on: nothing more is queued.
    remote.complete(&turn.id, "done").await;
    assert_eq!(f.harness.await_turn(&turn, None).await.unwrap().result.text.as_deref(), Some("done"));
    assert!(store.queued().is_empty());
}

#[tokio::test]
async fn nothing_is_queued_behind_a_write_the_store_panicked_on() {
    let Queueing { f: _harness, store, session, remote, turn, mut events, stored_before } = Queueing::start().await;
    remote.delta(&turn.id, "a").await;
    settle(|| store.queued().len() == 1).await;
    store.panic_next_enqueue();
    remote.delta(&turn.id, "b").await;
    settle(|| store.enqueue_calls() == 2).await;
    remote.delta(&turn.id, "c").await;
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
    // The store could not refuse what followed the write it panicked on, so nothing was queued.
    assert_eq!(store.enqueue_calls(), 2, "nothing queued behind the failed write");
    store.release(false).unwrap();
    for expected in ["a", "b", "c"] {
        assert_eq!(delta_text(&*next(&mut events).await), expected, "every event delivered, in order");
    }
    match next(&mut events).await.kind.clone() {
        EventKind::StoreFailed { reason, .. } => assert!(reason.contains("panicked"), "{reason}"),
        other => panic!("expected store_failed, got {other:?}"),
    }
    let stored = store.read_events(&session.id, &Default::default()).await.unwrap();
    assert_eq!(stored.len(), stored_before + 1, "only the write before the failure is stored");
    assert_eq!(delta_text(stored.last().unwrap()), "a");
}
