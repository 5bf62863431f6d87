//! `await_turn`: race-free waits, the completed-turn cache, the store, and timeouts.

use std::time::Duration;

use agent_core::testing::Frame;
use agent_core::*;

use crate::common::*;

#[tokio::test]
async fn await_before_completion_returns_the_terminal_result() {
    let f = Fixture::new();
    let (session, remote) = f.session(opts()).await;
    let turn = f.admitted_turn(&session, "go").await;
    let harness = f.harness.clone();
    let waiting = tokio::spawn({
        let turn = turn.clone();
        async move { harness.await_turn(&turn, None).await }
    });
    tokio::task::yield_now().await;
    remote.complete(&turn.id, "result text").await;
    let outcome = waiting.await.unwrap().unwrap();
    assert_eq!(outcome.status, TurnStatus::Completed);
    assert_eq!(outcome.result.text.as_deref(), Some("result text"));
    assert_eq!(outcome.event.type_name(), "turn_completed");
}

#[tokio::test]
async fn await_after_completion_reads_the_completed_turn_cache() {
    let f = Fixture::new();
    let (session, _) = f.session(opts()).await;
    f.control.push_script([Frame::complete("cached")]);
    let turn = f.harness.start_turn(&session, "go", TurnOptions::new()).await.unwrap();
    f.harness.await_turn(&turn, None).await.unwrap();
    // Prove the store is not consulted: wipe the session from it. The session is live, so
    // `delete_session` would refuse; a replacement batch (`delete_first`) is never refused.
    let mut wipe = store::WriteBatch::new(session.id.clone());
    wipe.delete_first = true;
    f.dyn_store().write(&wipe).await.unwrap();
    assert_eq!(f.dyn_store().fetch_session(&session.id).await.unwrap(), None, "the store no longer holds it");
    let outcome = f.harness.await_turn(&turn, None).await.unwrap();
    assert_eq!(outcome.result.text.as_deref(), Some("cached"));
}

#[tokio::test]
async fn await_after_cache_eviction_reads_the_store() {
    let f = Fixture::new();
    let (session, _) = f.session(opts().completed_turn_cache_size(CacheSize::Bounded(1))).await;
    f.control.push_script([Frame::complete("first")]);
    let first = f.harness.start_turn(&session, "1", TurnOptions::new()).await.unwrap();
    f.harness.await_turn(&first, None).await.unwrap();
    f.control.push_script([Frame::complete("second")]);
    let second = f.harness.start_turn(&session, "2", TurnOptions::new()).await.unwrap();
    f.harness.await_turn(&second, None).await.unwrap();
    let outcome = f.harness.await_turn(&first, None).await.unwrap();
    assert_eq!(outcome.result.text.as_deref(), Some("first"), "evicted from the cache, found in the store");
}

#[tokio::test]
async fn without_a_store_a_turn_gone_from_cache_and_buffer_is_replay_unavailable_rather_than_a_wait() {
    let f = Fixture::new();
    let options =
        opts().store(StoreChoice::Disabled).completed_turn_cache_size(CacheSize::Bounded(1)).event_buffer_size(4);
    let (session, _) = f.session(options).await;
    f.control.push_script([Frame::complete("first")]);
    let first = f.harness.start_turn(&session, "1", TurnOptions::new()).await.unwrap();
    f.harness.await_turn(&first, None).await.unwrap();
    f.control.push_script([Frame::delta("a"), Frame::delta("b"), Frame::complete("second")]);
    let second = f.harness.start_turn(&session, "2", TurnOptions::new()).await.unwrap();
    f.harness.await_turn(&second, None).await.unwrap();
    let err = f.harness.await_turn(&first, None).await.unwrap_err();
    assert!(matches!(err, AwaitError::Failed(Error::ReplayUnavailable { .. })), "{err:?}");
    let err = f.harness.stream(&first, Replay::Start, None).await.unwrap_err();
    assert!(matches!(err, Error::ReplayUnavailable { .. }), "{err:?}");
}

#[tokio::test]
async fn without_a_store_or_cache_a_finished_turn_is_served_from_the_buffer() {
    let f = Fixture::new();
    let options = opts().store(StoreChoice::Disabled).completed_turn_cache_size(CacheSize::Bounded(0));
    let (session, _) = f.session(options).await;
    f.control.push_script([Frame::delta("Hel"), Frame::delta("lo"), Frame::complete("Hello")]);
    let mut events = f.harness.subscribe(&session, Replay::Latest).await.unwrap();
    let turn = f.harness.start_turn(&session, "go", TurnOptions::new()).await.unwrap();
    next_of(&mut events, "turn_completed").await;

    let outcome = f.harness.await_turn(&turn, None).await.expect("the terminal event is still buffered");
    assert_eq!(outcome.result.text.as_deref(), Some("Hello"));
    let streamed = f.harness.stream(&turn, Replay::Start, None).await.unwrap().collect().await.unwrap();
    let types: Vec<_> = streamed.iter().map(|e| e.type_name()).collect();
    assert_eq!(types, ["turn_started", "message_delta", "message_delta", "turn_completed"]);
    let subscribed = drain_types(f.harness.subscribe(&turn, Replay::Start).await.unwrap()).await;
    assert_eq!(subscribed, types);
}

#[tokio::test(start_paused = true)]
async fn await_times_out_without_stopping_the_turn() {
    let f = Fixture::new();
    let (session, remote) = f.session(opts()).await;
    let turn = f.admitted_turn(&session, "slow").await;
    let err = f.harness.await_turn(&turn, Some(Duration::from_secs(120))).await.unwrap_err();
    assert!(matches!(err, AwaitError::Timeout(d) if d == Duration::from_secs(120)), "{err:?}");
    assert_eq!(f.harness.status(&session).await.unwrap().status, SessionState::Running);
    remote.complete(&turn.id, "eventually").await;
    assert!(f.harness.await_turn(&turn, None).await.is_ok());
}

#[tokio::test]
async fn await_on_a_stopped_session_reads_the_store() {
    let f = Fixture::new();
    let (session, _) = f.session(opts()).await;
    f.control.push_script([Frame::complete("kept")]);
    let turn = f.harness.start_turn(&session, "go", TurnOptions::new()).await.unwrap();
    f.harness.await_turn(&turn, None).await.unwrap();
    f.harness.stop_session(&session, false).await.unwrap();
    let outcome = f.harness.await_turn(&turn, None).await.unwrap();
    assert_eq!(outcome.result.text.as_deref(), Some("kept"));
}

/// A stored turn's outcome is its last event, looked up alone: the turn's other events are
/// not read (here every read of a range of events fails).
#[tokio::test]
async fn await_on_a_stopped_session_reads_only_the_turns_end() {
    let (f, store) = Fixture::controlled();
    let (session, _) = f.session(opts()).await;
    f.control.push_script((0..100).map(|i| Frame::delta(&format!("{i} "))).chain([Frame::complete("kept")]));
    let turn = f.harness.start_turn(&session, "go", TurnOptions::new()).await.unwrap();
    let live = f.harness.await_turn(&turn, None).await.unwrap();
    f.harness.stop_session(&session, false).await.unwrap();
    store.fail_reads(true);
    let stored = f.harness.await_turn(&turn, None).await.unwrap();
    assert_eq!(stored.result.text.as_deref(), Some("kept"));
    assert_eq!(stored.event.seq, live.event.seq, "the terminal event itself");
}

#[tokio::test]
async fn await_on_an_unknown_turn_is_turn_not_found() {
    let f = Fixture::new();
    let (session, _) = f.session(opts()).await;
    let mut turn = f.admitted_turn(&session, "real").await;
    turn.id = TurnId::from_string("made-up");
    let err = f.harness.await_turn(&turn, None).await.unwrap_err();
    assert!(matches!(err, AwaitError::Failed(Error::TurnNotFound { .. })), "{err:?}");
}

#[test]
fn await_reports_session_down_when_the_runtime_goes_away() {
    // The session runs on a runtime that is shut down while a consumer on another one waits.
    let host = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let (f, session, turn) = host.block_on(async {
        let f = Fixture::new();
        let (session, _) = f.session(opts()).await;
        let turn = f.admitted_turn(&session, "go").await;
        (f, session, turn)
    });
    let consumer = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let result = consumer.block_on(async move {
        let harness = f.harness.clone();
        let waiting = tokio::spawn(async move { harness.await_turn(&turn, None).await });
        tokio::task::yield_now().await;
        // Commands are handled in order: once this answers, the wait is registered.
        f.harness.status(&session).await.unwrap();
        host.shutdown_background();
        waiting.await.unwrap()
    });
    assert!(
        matches!(result, Err(AwaitError::Failed(Error::SessionDown { reason: ExitReason::Crashed { .. }, .. }))),
        "{result:?}"
    );
}

#[tokio::test]
async fn a_session_with_its_own_store_keeps_its_history_reachable_after_it_stops() {
    use agent_core::request::RequestSpec;

    let custom: DynStore = std::sync::Arc::new(agent_store_memory::MemoryStore::new());
    let f = Fixture::new();
    let (session, remote) = f.session(opts().store(StoreChoice::Custom(custom.clone()))).await;
    let turn = f.admitted_turn(&session, "work").await;
    let mut events = f.harness.subscribe(&turn, Replay::Latest).await.unwrap();
    remote.request(&turn.id, RequestSpec::new(RequestKind::Confirmation, "Proceed?", "c1")).await;
    let request = request_of(&next(&mut events).await);
    f.harness.respond(&request, Response::approve()).await.unwrap();
    remote.complete(&turn.id, "done").await;
    f.harness.await_turn(&turn, None).await.unwrap();
    f.harness.stop_session(&session, false).await.unwrap();
    assert!(f.dyn_store().fetch_session(&session.id).await.unwrap().is_none(), "not in the default store");

    let outcome = f.harness.await_turn(&turn, None).await.expect("the turn's outcome is in its store");
    assert_eq!(outcome.result.text.as_deref(), Some("done"));
    let err = f.harness.respond(&request, Response::approve()).await.unwrap_err();
    assert!(matches!(err, Error::AlreadyResolved { .. }), "{err:?}");
    let types = drain_types(f.harness.subscribe(&session, Replay::Start).await.unwrap()).await;
    assert_eq!(types.first(), Some(&"session_ready"));
    assert_eq!(types.last(), Some(&"session_closed"));
    let err = f.harness.status(&session).await.unwrap_err();
    assert!(matches!(err, Error::SessionClosed { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn await_racing_a_stop_gets_the_stored_outcome_not_session_down() {
    for i in 0..50 {
        let f = Fixture::new();
        let (session, remote) = f.session(opts().id(format!("race-{i}"))).await;
        let turn = f.admitted_turn(&session, "go").await;
        remote.complete(&turn.id, "done").await;
        f.harness.await_turn(&turn, None).await.unwrap();
        // Queued behind the stop, the await's command finds the session gone.
        let harness = f.harness.clone();
        let stop = tokio::spawn({
            let session = session.clone();
            async move { harness.stop_session(&session, false).await }
        });
        let awaited = f.harness.await_turn(&turn, Some(Duration::from_secs(5))).await;
        stop.await.unwrap().unwrap();
        let outcome = awaited.unwrap_or_else(|e| panic!("run {i}: {e:?}"));
        assert_eq!(outcome.result.text.as_deref(), Some("done"), "run {i}");
    }
}

/// A finished turn the session no longer holds (evicted from the completed-turn cache and the
/// event buffer): two turns, the first's terminal event at seq `terminal`.
async fn evicted_first_turn(f: &Fixture) -> (SessionRef, Turn, u64) {
    let options = opts().event_buffer_size(4).completed_turn_cache_size(CacheSize::Bounded(0));
    let (session, _) = f.session(options).await;
    f.control.push_script([Frame::delta("a"), Frame::delta("b"), Frame::complete("one")]);
    let first = f.harness.start_turn(&session, "1", TurnOptions::new()).await.unwrap();
    let terminal = f.harness.await_turn(&first, None).await.unwrap().event.seq;
    f.control.push_script([Frame::delta("c"), Frame::delta("d"), Frame::delta("e"), Frame::complete("two")]);
    let second = f.harness.start_turn(&session, "2", TurnOptions::new()).await.unwrap();
    f.harness.await_turn(&second, None).await.unwrap();
    (session, first, terminal)
}

/// Streaming a finished turn from at or past its terminal event has nothing to end with,
/// whether the session still holds the turn, keeps it only in its store, or has stopped: the
/// same `ReplayUnavailable` at once, never a wait on the session.
#[tokio::test]
async fn a_stream_past_a_finished_turns_end_is_replay_unavailable_wherever_the_turn_is() {
    let f = Fixture::new();
    let (session, first, terminal) = evicted_first_turn(&f).await;
    let events = f.harness.stream(&first, Replay::After(terminal - 1), Some(Duration::from_secs(5))).await.unwrap();
    let events = tokio::time::timeout(Duration::from_secs(5), events.collect()).await.expect("the stream ends");
    assert_eq!(events.unwrap().last().map(|e| e.seq), Some(terminal), "the terminal event comes from the store");
    for after in [terminal, terminal + 2] {
        let stream = tokio::time::timeout(Duration::from_secs(5), f.harness.stream(&first, Replay::After(after), None));
        let err = stream.await.expect("answered at once").expect_err("nothing to stream");
        assert!(matches!(err, Error::ReplayUnavailable { .. }), "after {after}: {err:?}");
    }
    f.harness.stop_session(&session, false).await.unwrap();
    let err = f.harness.stream(&first, Replay::After(terminal), None).await.expect_err("nothing to stream");
    assert!(matches!(err, Error::ReplayUnavailable { .. }), "stopped: {err:?}");
    let events = f.harness.stream(&first, Replay::Start, None).await.unwrap().collect().await.unwrap();
    assert_eq!(events.last().map(|e| e.seq), Some(terminal), "a stopped session's turn streams from its store");
}

/// Subscribing to a finished turn from at or past its terminal event ends the subscription at
/// once, with nothing and no error, wherever the turn is: the session still holds it, keeps it
/// only in its store, or has stopped. Before that, the terminal event comes last.
#[tokio::test]
async fn a_subscription_past_a_finished_turns_end_ends_empty_wherever_the_turn_is() {
    let f = Fixture::new();
    let (session, first, terminal) = evicted_first_turn(&f).await;
    let seqs = |after: u64| {
        let harness = f.harness.clone();
        let first = first.clone();
        async move {
            let events = harness.subscribe(&first, Replay::After(after)).await.unwrap();
            let events =
                tokio::time::timeout(Duration::from_secs(5), futures::StreamExt::collect::<Vec<_>>(events)).await;
            let events = events.expect("the subscription ends").into_iter();
            events.map(|e| e.map(|e| e.seq)).collect::<Result<Vec<_>, _>>()
        }
    };
    for (place, stopped) in [("evicted", false), ("stopped", true)] {
        if stopped {
            f.harness.stop_session(&session, false).await.unwrap();
        }
        assert_eq!(seqs(terminal - 1).await, Ok(vec![terminal]), "{place}: the terminal event ends it");
        for after in [terminal, terminal + 2] {
            assert_eq!(seqs(after).await, Ok(vec![]), "{place}: after {after}");
        }
    }
}

/// A store that says a turn finished but lacks its terminal event ends the turn's stream with
/// `ReplayFailed` while the session runs, instead of waiting for the session to end.
#[tokio::test]
async fn a_stored_turn_without_its_terminal_event_ends_its_stream_instead_of_waiting() {
    let f = Fixture::new();
    let (session, first, terminal) = evicted_first_turn(&f).await;
    let store = f.dyn_store();
    let mut rewrite = store::WriteBatch::new(session.id.clone());
    rewrite.delete_first = true;
    rewrite.snapshot = store.fetch_session(&session.id).await.unwrap();
    rewrite.turns = store.list_turns(&session.id).await.unwrap();
    let all = store.read_events(&session.id, &store::EventQuery::all()).await.unwrap();
    rewrite.events = all.into_iter().filter(|e| e.seq != terminal).collect();
    store.write(&rewrite).await.unwrap();

    let stream = f.harness.stream(&first, Replay::Start, None).await.unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(5), stream.collect()).await.expect("the stream ends");
    assert!(matches!(ended, Err(StreamError::ReplayFailed { .. })), "{ended:?}");
}

#[tokio::test(start_paused = true)]
async fn the_timeout_bounds_reading_a_stopped_sessions_turn_from_a_slow_store() {
    let (f, store) = Fixture::controlled();
    let (session, remote) = f.session(opts()).await;
    let turn = f.admitted_turn(&session, "go").await;
    remote.complete(&turn.id, "done").await;
    f.harness.await_turn(&turn, None).await.unwrap();
    f.harness.stop_session(&session, false).await.unwrap();
    store.hang_session_reads();
    let started = tokio::time::Instant::now();
    let waited =
        tokio::time::timeout(Duration::from_secs(60), f.harness.await_turn(&turn, Some(Duration::from_secs(2))));
    let err = waited.await.expect("await_turn returns within its timeout").unwrap_err();
    assert!(matches!(err, AwaitError::Timeout(d) if d == Duration::from_secs(2)), "{err:?}");
    assert_eq!(started.elapsed(), Duration::from_secs(2));
}
