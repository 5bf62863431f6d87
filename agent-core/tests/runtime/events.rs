//! Subscriptions, replay, turn filtering and streams.

use std::time::Duration;

use agent_core::testing::Frame;
use agent_core::*;
use futures::StreamExt;

use crate::common::*;

async fn two_turns(f: &Fixture, session: &SessionRef) -> (Turn, Turn) {
    f.control.push_script([Frame::delta("1a"), Frame::delta("1b"), Frame::complete("one")]);
    let one = f.harness.start_turn(session, "one", TurnOptions::new()).await.unwrap();
    f.harness.await_turn(&one, None).await.unwrap();
    f.control.push_script([Frame::delta("2a"), Frame::complete("two")]);
    let two = f.harness.start_turn(session, "two", TurnOptions::new()).await.unwrap();
    f.harness.await_turn(&two, None).await.unwrap();
    (one, two)
}

#[tokio::test]
async fn seq_is_strictly_increasing_and_start_replays_everything_then_continues_live() {
    let f = Fixture::new();
    let (session, remote) = f.session(opts()).await;
    two_turns(&f, &session).await;
    let mut events = f.harness.subscribe(&session, Replay::Start).await.unwrap();
    let mut seqs = Vec::new();
    for _ in 0..8 {
        seqs.push(next(&mut events).await.seq);
    }
    assert_eq!(seqs, (1..=8).collect::<Vec<_>>(), "session_ready, then turns of 4 and 3 events");
    // Then live.
    let three = f.admitted_turn(&session, "three").await;
    assert_eq!(next(&mut events).await.type_name(), "turn_started");
    remote.complete(&three.id, "3").await;
    let terminal = next(&mut events).await;
    assert_eq!(terminal.seq, 10);
    assert!(terminal.is_terminal());
}

#[tokio::test]
async fn after_replays_only_greater_seqs_and_latest_replays_nothing() {
    let f = Fixture::new();
    let (session, remote) = f.session(opts()).await;
    two_turns(&f, &session).await;
    let mut after = f.harness.subscribe(&session, Replay::After(6)).await.unwrap();
    assert_eq!(next(&mut after).await.seq, 7);
    let mut latest = f.harness.subscribe(&session, Replay::Latest).await.unwrap();
    let three = f.admitted_turn(&session, "three").await;
    let first_live = next(&mut latest).await;
    assert_eq!(first_live.seq, 9, "latest starts with the first event after subscribing");
    remote.complete(&three.id, "3").await;
}

#[tokio::test]
async fn session_events_and_other_turns_are_filtered_from_a_turn_subscription() {
    let f = Fixture::new();
    let (session, _) = f.session(opts()).await;
    let (one, two) = two_turns(&f, &session).await;
    let events: Vec<_> = f.harness.subscribe(&one, Replay::Start).await.unwrap().collect().await;
    assert!(events.iter().all(|e| e.as_ref().unwrap().turn_id.as_ref() == Some(&one.id)));
    assert_eq!(events.len(), 4, "turn_started, 2 deltas, turn_completed — and the stream ends there");
    let types = drain_types(f.harness.subscribe(&two, Replay::Start).await.unwrap()).await;
    assert_eq!(types, ["turn_started", "message_delta", "turn_completed"]);
}

#[tokio::test]
async fn a_stream_created_after_a_fast_turn_finished_still_yields_its_events_and_ends() {
    let f = Fixture::new();
    let (session, _) = f.session(opts()).await;
    f.control.push_script([Frame::delta("fast"), Frame::complete("fast")]);
    let turn = f.harness.start_turn(&session, "quick", TurnOptions::new()).await.unwrap();
    f.harness.await_turn(&turn, None).await.unwrap();
    let events =
        f.harness.stream(&turn, Replay::Start, Some(Duration::from_secs(30))).await.unwrap().collect().await.unwrap();
    let types: Vec<_> = events.iter().map(|e| e.type_name()).collect();
    assert_eq!(types, ["turn_started", "message_delta", "turn_completed"]);
}

#[tokio::test]
async fn latest_on_an_already_finished_turn_is_replay_unavailable_for_a_stream() {
    let f = Fixture::new();
    let (session, _) = f.session(opts()).await;
    f.control.push_script([Frame::complete("done")]);
    let turn = f.harness.start_turn(&session, "quick", TurnOptions::new()).await.unwrap();
    f.harness.await_turn(&turn, None).await.unwrap();
    let err = f.harness.stream(&turn, Replay::Latest, None).await.unwrap_err();
    assert!(matches!(err, Error::ReplayUnavailable { .. }), "{err:?}");
    // A plain subscription is allowed; it simply has nothing to deliver.
    let events = f.harness.subscribe(&turn, Replay::Latest).await.unwrap();
    assert!(drain_types(events).await.is_empty());
}

#[tokio::test]
async fn a_stream_of_a_running_turn_follows_it_live_to_its_terminal_event() {
    let f = Fixture::new();
    let (session, remote) = f.session(opts()).await;
    let turn = f.admitted_turn(&session, "go").await;
    let mut stream = f.harness.stream(&turn, Replay::Latest, None).await.unwrap();
    remote.delta(&turn.id, "x").await;
    remote.complete(&turn.id, "x").await;
    assert_eq!(stream.next().await.unwrap().unwrap().type_name(), "message_delta");
    assert_eq!(stream.next().await.unwrap().unwrap().type_name(), "turn_completed");
    assert!(stream.next().await.is_none());
}

#[tokio::test(start_paused = true)]
async fn an_idle_stream_times_out_without_stopping_the_turn() {
    let f = Fixture::new();
    let (session, remote) = f.session(opts()).await;
    let turn = f.admitted_turn(&session, "slow").await;
    let mut stream = f.harness.stream(&turn, Replay::Latest, Some(Duration::from_secs(5))).await.unwrap();
    let started = tokio::time::Instant::now();
    let item = stream.next().await.unwrap();
    assert!(matches!(item, Err(StreamError::IdleTimeout(d)) if d == Duration::from_secs(5)), "{item:?}");
    assert_eq!(started.elapsed(), Duration::from_secs(5));
    // `?` turns it into the one public error, whose kind a program matches.
    let error: Error = item.expect_err("timed out").into();
    assert_eq!(error.kind(), ErrorKind::IdleTimeout);
    assert_eq!(f.harness.status(&session).await.unwrap().status, SessionState::Running);
    remote.complete(&turn.id, "late").await;
    assert!(f.harness.await_turn(&turn, None).await.is_ok());
}

#[test]
fn a_stream_reports_session_down_when_the_runtime_goes_away_mid_turn() {
    // The session's runtime lives on a Tokio runtime that shuts down under the consumer.
    let host = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let f = host.block_on(async { Fixture::new() });
    let (stream, turn_id) = host.block_on(async {
        let (session, _) = f.session(opts()).await;
        let turn = f.admitted_turn(&session, "go").await;
        (f.harness.stream(&turn, Replay::Latest, None).await.unwrap(), turn.id)
    });
    drop(host);
    let consumer = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let item = consumer.block_on(async move {
        let mut stream = stream;
        stream.next().await
    });
    match item {
        Some(Err(StreamError::SessionDown(reason))) => {
            assert!(matches!(reason, ExitReason::Crashed { .. }), "{reason:?}");
            let error = Error::from(StreamError::SessionDown(reason));
            assert_eq!(error.kind(), ErrorKind::SessionDown, "one kind for a session that went down");
        }
        other => panic!("expected session down for turn {turn_id}, got {other:?}"),
    }
}

#[tokio::test]
async fn replay_reads_the_store_when_the_buffer_no_longer_holds_the_events() {
    let f = Fixture::new();
    let (session, _) = f.session(opts().event_buffer_size(2)).await;
    let (one, _) = two_turns(&f, &session).await;
    let all = f.harness.subscribe(&session, Replay::Start).await.unwrap();
    let seqs: Vec<u64> = all.take(8).map(|e| e.unwrap().seq).collect().await;
    assert_eq!(seqs, (1..=8).collect::<Vec<_>>(), "nothing lost although the buffer holds 2 events");
    let types = drain_types(f.harness.stream_subscription(&one).await).await;
    assert_eq!(types, ["turn_started", "message_delta", "message_delta", "turn_completed"]);
}

#[tokio::test]
async fn without_a_store_replay_uses_the_bounded_buffer() {
    let f = Fixture::new();
    let (session, _) = f.session(opts().store(StoreChoice::Disabled).event_buffer_size(3)).await;
    let (one, two) = two_turns(&f, &session).await;
    let seqs: Vec<u64> =
        f.harness.subscribe(&session, Replay::Start).await.unwrap().take(3).map(|e| e.unwrap().seq).collect().await;
    assert_eq!(seqs, [6, 7, 8], "only the last three events are retained");
    let err = f.harness.stream(&one, Replay::Start, None).await.unwrap_err();
    assert!(matches!(err, Error::ReplayUnavailable { .. }), "the first turn's terminal event is gone: {err:?}");
    let types = drain_types(f.harness.subscribe(&two, Replay::Start).await.unwrap()).await;
    assert_eq!(types, ["turn_started", "message_delta", "turn_completed"]);
}

#[tokio::test]
async fn an_unknown_turn_is_turn_not_found() {
    let f = Fixture::new();
    let (session, _) = f.session(opts()).await;
    let target = Target::Turn(TurnRef { session_id: session.id.clone(), id: TurnId::from_string("nope") });
    let err = f.harness.subscribe(target, Replay::Start).await.unwrap_err();
    assert!(matches!(err, Error::TurnNotFound { .. }), "{err:?}");
}

trait StreamSubscription {
    async fn stream_subscription(&self, turn: &Turn) -> Subscription;
}

impl StreamSubscription for Harness {
    async fn stream_subscription(&self, turn: &Turn) -> Subscription {
        self.subscribe(turn, Replay::Start).await.unwrap()
    }
}

#[tokio::test]
async fn a_stopped_session_replays_from_the_store() {
    let f = Fixture::new();
    let (session, _) = f.session(opts()).await;
    let (one, _) = two_turns(&f, &session).await;
    f.harness.stop_session(&session, false).await.unwrap();
    let seqs: Vec<u64> =
        f.harness.subscribe(&session, Replay::After(2)).await.unwrap().map(|e| e.unwrap().seq).collect().await;
    assert_eq!(seqs, (3..=9).collect::<Vec<_>>(), "everything stored, through session_closed, then the end");
    let types = f.harness.stream(&one, Replay::Start, None).await.unwrap().collect().await.unwrap();
    assert_eq!(
        types.iter().map(|e| e.type_name()).collect::<Vec<_>>(),
        ["turn_started", "message_delta", "message_delta", "turn_completed"]
    );
    let err = f.harness.subscribe(&session, Replay::Latest).await.unwrap_err();
    assert!(matches!(err, Error::SessionClosed { .. }), "nothing live to follow: {err:?}");
    let unknown = Target::Session(SessionId::new("never-existed").unwrap());
    assert!(matches!(f.harness.subscribe(unknown, Replay::Start).await, Err(Error::SessionNotFound { .. })));
}

#[tokio::test]
async fn a_turn_stream_is_a_stream_that_ends_after_the_terminal_event() {
    let f = Fixture::new();
    let (session, _) = f.session(opts()).await;
    f.control.push_script([Frame::delta("a"), Frame::complete("a")]);
    let turn = f.harness.start_turn(&session, "go", TurnOptions::new()).await.unwrap();
    let stream = f.harness.stream(&turn, Replay::Start, None).await.unwrap();
    let types: Vec<&str> = StreamExt::map(stream, |e| e.expect("no error").type_name()).collect().await;
    assert_eq!(types, ["turn_started", "message_delta", "turn_completed"]);
}

/// The buffer's evicted events lend their allocations to the next ones only when nothing else
/// holds them: an event a subscriber keeps stays as it was, while many turns go through a
/// small buffer.
#[tokio::test]
async fn an_event_a_subscriber_holds_is_never_rewritten() {
    let f = Fixture::new();
    let (session, _) = f.session(opts().store(StoreChoice::Disabled).event_buffer_size(2)).await;
    let mut events = f.harness.subscribe(&session, Replay::Latest).await.unwrap();
    let mut held = None;
    let mut seen = Vec::new();
    for i in 0..4 {
        f.control.push_script([Frame::delta(&format!("delta {i}")), Frame::complete("done")]);
        let turn = f.harness.start_turn(&session, "go", TurnOptions::new()).await.unwrap();
        loop {
            let event = next(&mut events).await;
            seen.push(event.seq);
            let end = event.is_terminal();
            if held.is_none() {
                held = Some((event, turn.id.clone()));
            }
            if end {
                break;
            }
        }
    }
    assert_eq!(seen, (2..=13).collect::<Vec<_>>(), "every event once, in order");
    let (held, first_turn) = held.expect("an event");
    assert_eq!((held.seq, held.type_name()), (2, "turn_started"));
    assert_eq!(held.turn_id.as_ref(), Some(&first_turn));
}

#[tokio::test]
async fn a_cursor_past_the_latest_event_is_refused_not_followed() {
    for store in [true, false] {
        let f = Fixture::new();
        let options = if store { opts() } else { opts().store(StoreChoice::Disabled) };
        let (session, remote) = f.session(options).await;
        let latest = f.harness.status(&session).await.unwrap().last_seq;
        for after in [latest + 1, latest + 1000, u64::MAX] {
            let err = f.harness.subscribe(&session, Replay::After(after)).await.unwrap_err();
            let expected = format!("seq {after} is past the session's latest event (seq {latest})");
            assert!(matches!(err, Error::ReplayUnavailable { ref reason } if *reason == expected), "{err:?}");
        }
        // The latest event itself is a valid cursor, and what follows it arrives.
        let mut events = f.harness.subscribe(&session, Replay::After(latest)).await.unwrap();
        let turn = f.admitted_turn(&session, "after the cursor").await;
        assert_eq!(next(&mut events).await.seq, latest + 1);
        remote.complete(&turn.id, "done").await;
        f.harness.await_turn(&turn, None).await.unwrap();
        let turn_err = f.harness.subscribe(&turn, Replay::After(u64::MAX)).await.unwrap_err();
        assert!(matches!(turn_err, Error::ReplayUnavailable { .. }), "{turn_err:?}");
        if store {
            // Stopped: the stored history is checked the same way.
            f.harness.stop_session(&session, false).await.unwrap();
            let last = f.store.latest_seq(&session.id).await.unwrap().unwrap();
            let err = f.harness.subscribe(&session, Replay::After(last + 1)).await.unwrap_err();
            assert!(matches!(err, Error::ReplayUnavailable { .. }), "{err:?}");
            let replayed: Vec<_> =
                f.harness.subscribe(&session, Replay::After(last - 1)).await.unwrap().collect().await;
            assert_eq!(replayed.len(), 1);
        }
    }
}

/// A subscription that has ended holds nothing of the session: kept after its end, it keeps
/// neither the events it delivered nor the session's store (nor its live channel) allocated.
#[tokio::test]
async fn an_ended_subscription_lets_go_of_what_it_delivered() {
    let f = Fixture::new();
    let (session, _) = f.session(opts()).await;
    let store = f.dyn_store();
    let mut events = f.harness.subscribe(&session, Replay::Latest).await.unwrap();
    f.control.push_script([Frame::delta("held?"), Frame::complete("done")]);
    let turn = f.harness.start_turn(&session, "go", TurnOptions::new()).await.unwrap();
    f.harness.await_turn(&turn, None).await.unwrap();
    f.harness.stop_session(&session, false).await.unwrap();
    let mut delivered = Vec::new();
    while let Some(event) = events.next().await {
        delivered.push(std::sync::Arc::downgrade(&event.unwrap()));
    }
    assert!(delivered.len() >= 3, "the turn's events were delivered: {}", delivered.len());
    assert!(events.next().await.is_none(), "ended");
    let held = delivered.iter().filter(|event| event.strong_count() > 0).count();
    assert_eq!(held, 0, "the ended subscription, still kept, holds {held} events");
    let kept = std::sync::Arc::strong_count(&store);
    drop(events);
    assert_eq!(std::sync::Arc::strong_count(&store), kept, "the ended subscription held the store");
}
