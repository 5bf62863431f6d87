//! A subscriber that never reads cannot slow a session, and resumes losslessly.

use agent_core::*;
use futures::StreamExt;

use crate::common::*;

const EVENTS: u64 = 1_000_000;

#[tokio::test]
async fn a_subscriber_that_never_reads_gets_lagged_and_resumes_without_loss() {
    let f = Fixture::new();
    let (session, remote) = f.session(opts()).await;
    let turn = f.admitted_turn(&session, "flood").await;
    let mut idle = f.harness.subscribe(&session, Replay::Latest).await.unwrap();
    let subscribed_at = f.harness.status(&session).await.unwrap().last_seq;

    for i in 0..EVENTS {
        let kind = EventKind::MessageDelta { item_id: None, text: if i % 2 == 0 { "a".into() } else { "b".into() } };
        remote.sink().emit(Some(&turn.id), kind, None).await.unwrap();
    }
    remote.complete(&turn.id, "flooded").await;
    // The session kept going while the subscriber read nothing.
    f.harness.await_turn(&turn, None).await.unwrap();
    let last = f.harness.status(&session).await.unwrap().last_seq;
    assert_eq!(last, subscribed_at + EVENTS + 1);

    let lagged = match idle.next().await {
        Some(Err(lagged)) => lagged,
        other => panic!("expected Lagged first, got {other:?}"),
    };
    assert_eq!(lagged.resume_after, subscribed_at, "nothing was delivered before the lag");
    assert!(idle.next().await.is_none(), "a lagged subscription ends");

    let mut resumed = f.harness.subscribe(&session, Replay::After(lagged.resume_after)).await.unwrap();
    let mut expected = lagged.resume_after + 1;
    while expected <= last {
        let event = resumed.next().await.expect("more events").expect("no lag while replaying");
        assert_eq!(event.seq, expected, "replay is contiguous");
        expected += 1;
    }
}
