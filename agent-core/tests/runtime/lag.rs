//! A subscriber that never reads cannot slow a session; with a store it catches up by itself,
//! without one it is told exactly where its events were lost — a gap is never silent.

use std::time::Duration;

use agent_core::*;

use crate::common::*;

const EVENTS: u64 = 1_000_000;

async fn flood(remote: &agent_core::testing::ScriptedSession, turn: &Turn, events: u64) {
    send_lines(remote, turn, events, |_| None).await;
}

/// Sends `lines` deltas to a turn, the raw JSON of line `n` from `raw`, and completes it.
async fn send_lines(
    remote: &agent_core::testing::ScriptedSession,
    turn: &Turn,
    lines: u64,
    raw: fn(u64) -> Option<agent_core::event::RawJson>,
) {
    for n in 0..lines {
        let kind = EventKind::MessageDelta { item_id: None, text: if n % 2 == 0 { "a".into() } else { "b".into() } };
        remote.sink().emit(Some(&turn.id), kind, raw(n)).await.unwrap();
    }
    remote.complete(&turn.id, "flooded").await;
}

/// A megabyte of raw JSON.
fn megabyte(n: u64) -> Option<agent_core::event::RawJson> {
    Some(agent_core::event::RawJson::parsed(format!("\"{n}{}\"", "x".repeat((1 << 20) - 12))))
}

/// Sends `lines` to a turn while a subscriber reads nothing, then checks it gets every event
/// in order: the session kept going, and the subscriber caught up from the store.
async fn a_subscriber_that_never_reads_gets_every_line(lines: u64, raw: fn(u64) -> Option<agent_core::event::RawJson>) {
    let f = Fixture::new();
    let (session, remote) = f.session(opts()).await;
    let turn = f.admitted_turn(&session, "flood").await;
    let mut idle = f.harness.subscribe(&session, Replay::Latest).await.unwrap();
    let subscribed_at = f.harness.status(&session).await.unwrap().last_seq;

    send_lines(&remote, &turn, lines, raw).await;
    f.harness.await_turn(&turn, None).await.unwrap();
    let last = f.harness.status(&session).await.unwrap().last_seq;
    assert_eq!(last, subscribed_at + lines + 1);

    for expected in subscribed_at + 1..=last {
        let event = idle.next().await.expect("more events").expect("no lag with a store");
        assert_eq!(event.seq, expected, "delivery is contiguous");
    }
}

#[tokio::test]
async fn a_subscriber_that_never_reads_catches_up_from_the_store_without_loss() {
    a_subscriber_that_never_reads_gets_every_line(EVENTS, |_| None).await;
}

#[tokio::test]
async fn without_a_store_a_lagging_subscriber_learns_where_its_events_were_lost() {
    let f = Fixture::new();
    let (session, remote) = f.session(opts().store(StoreChoice::Disabled).event_buffer_size(64)).await;
    let turn = f.admitted_turn(&session, "flood").await;
    let mut idle = f.harness.subscribe(&session, Replay::Latest).await.unwrap();
    let subscribed_at = f.harness.status(&session).await.unwrap().last_seq;
    flood(&remote, &turn, 10_000).await;
    f.harness.await_turn(&turn, None).await.unwrap();

    let lagged = match idle.next().await {
        Some(Err(SubscriptionError::Lagged(lagged))) => lagged,
        other => panic!("expected Lagged first, got {other:?}"),
    };
    assert_eq!(lagged.resume_after, subscribed_at, "nothing was delivered before the lag");
    assert_eq!(Error::from(SubscriptionError::Lagged(lagged)).kind(), ErrorKind::Lagged);
    assert!(idle.next().await.is_none(), "a lagged subscription ends");

    // Nothing holds the events after the cursor any more: an exact resume is refused...
    let err = f.harness.subscribe(&session, Replay::After(lagged.resume_after)).await.unwrap_err();
    assert!(matches!(err, Error::ReplayUnavailable { .. }), "{err:?}");
    // ...while `Start` serves what the buffer retains.
    let mut retained = f.harness.subscribe(&session, Replay::Start).await.unwrap();
    let first = next(&mut retained).await;
    assert!(first.seq > lagged.resume_after + 1, "the buffer starts later: {}", first.seq);
}

#[tokio::test]
async fn a_turn_stream_that_keeps_reading_survives_a_burst_larger_than_the_buffer() {
    let f = Fixture::new();
    let (session, remote) = f.session(opts().event_buffer_size(8)).await;
    let turn = f.admitted_turn(&session, "burst").await;
    let mut stream = f.harness.stream(&turn, Replay::Start, None).await.unwrap();
    assert_eq!(stream.next().await.unwrap().unwrap().type_name(), "turn_started");
    // The burst is published in one go, while the reader is waiting for its next event.
    flood(&remote, &turn, 20).await;
    let rest = stream.collect().await.expect("the stream recovers from the store by itself");
    assert_eq!(rest.len(), 21, "every delta and the terminal event");
    assert!(rest.windows(2).all(|w| w[1].seq == w[0].seq + 1), "no event is skipped");
    assert_eq!(rest.last().unwrap().type_name(), "turn_completed");
}

#[tokio::test]
async fn a_store_read_that_fails_during_replay_ends_the_subscription_with_an_error() {
    let (f, store) = Fixture::controlled();
    let (session, remote) = f.session(opts().event_buffer_size(4)).await;
    let turn = f.admitted_turn(&session, "work").await;
    flood(&remote, &turn, 10).await;
    f.harness.await_turn(&turn, None).await.unwrap();
    store.fail_reads(true);
    // The buffer no longer covers seq 1, so the replay needs the store, which fails.
    let mut events = f.harness.subscribe(&session, Replay::Start).await.unwrap();
    match tokio::time::timeout(Duration::from_secs(60), events.next()).await.unwrap() {
        Some(Err(SubscriptionError::ReplayFailed { resume_after: 0, reason })) => {
            assert!(reason.contains("could not be read"), "{reason}")
        }
        other => panic!("expected ReplayFailed, got {other:?}"),
    }
    assert!(events.next().await.is_none());
    let err = f.harness.stream(&turn, Replay::Start, None).await.unwrap().collect().await.unwrap_err();
    assert!(matches!(err, StreamError::ReplayFailed { .. }), "{err:?}");
}

/// Floods a turn with `lines` deltas (the raw JSON of line `n` from `raw`) against a store whose
/// writes take a while; returns how many the provider got to send while the first write was in
/// flight, having checked that the store ends up with every one, in seq order.
async fn flood_behind_a_slow_store(lines: u64, raw: fn(u64) -> Option<agent_core::event::RawJson>) -> u64 {
    let (f, store) = Fixture::controlled();
    let (session, remote) = f.session(opts()).await;
    let turn = f.admitted_turn(&session, "flood").await;
    store.set(WriteMode::Slow);
    let sent = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let producer = {
        let (sink, turn, sent) = (remote.sink().clone(), turn.id.clone(), std::sync::Arc::clone(&sent));
        tokio::spawn(async move {
            for n in 0..lines {
                let kind = EventKind::MessageDelta { item_id: None, text: String::new().into() };
                sink.emit(Some(&turn), kind, raw(n)).await.unwrap();
                sent.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        })
    };
    // Less than one (paused-clock) write: the flood runs until the provider has to wait.
    tokio::time::sleep(Duration::from_millis(10)).await;
    let ahead = sent.load(std::sync::atomic::Ordering::SeqCst);

    // Nothing is lost or reordered: the store catches up and holds every event, in seq order.
    producer.await.unwrap();
    remote.complete(&turn.id, "flooded").await;
    f.harness.await_turn(&turn, None).await.unwrap();
    let stored = store.inner.read_events(&session.id, &agent_core::store::EventQuery::default()).await.unwrap();
    let deltas = stored.iter().filter(|e| matches!(e.kind, EventKind::MessageDelta { .. })).count() as u64;
    assert_eq!(deltas, lines, "nothing lost");
    assert!(stored.windows(2).all(|w| w[1].seq == w[0].seq + 1), "contiguous seqs");
    ahead
}

#[tokio::test(start_paused = true)]
async fn a_slow_store_holds_the_provider_back_instead_of_buffering_without_bound() {
    // At most: the batch in flight and the next one (each under 2,048 events plus one sink
    // batch of 512), and the sink's own 4,096 messages.
    const AHEAD: u64 = 2 * (2048 + 512) + 4096;
    let ahead = flood_behind_a_slow_store(100_000, |_| None).await;
    assert!(ahead <= AHEAD, "{ahead} events taken while the first write was in flight");
}

#[tokio::test(start_paused = true)]
async fn a_slow_store_holds_back_a_provider_of_long_lines_by_their_bytes() {
    const LINE: usize = 512 << 10;
    // At most: the batch in flight and the next one (each under 16 MiB plus a line), and the
    // sink's own 16 MiB plus a line — far fewer lines than the counts of events would let in.
    const AHEAD: u64 = (3 * ((16 << 20) / LINE + 1)) as u64;
    let line = |n: u64| Some(agent_core::event::RawJson::parsed(format!("\"{n}{}\"", "x".repeat(LINE - 12))));
    let ahead = flood_behind_a_slow_store(400, line).await;
    assert!(ahead <= AHEAD, "{ahead} lines of {LINE} bytes taken while the first write was in flight");
}

/// A stopped session whose one turn holds more than a page of replay, in a memory store that
/// keeps one session: the next session started evicts it.
async fn stopped_in_a_store_of_one() -> (Fixture, std::sync::Arc<agent_store_memory::MemoryStore>, SessionRef, Turn) {
    let store = std::sync::Arc::new(agent_store_memory::MemoryStore::with_limits(
        agent_store_memory::MemoryLimits::max_sessions(1),
    ));
    let f = Fixture::with(|b| b.store(StoreChoice::Custom(store.clone())));
    let (session, remote) = f.session(opts()).await;
    let turn = f.admitted_turn(&session, "long").await;
    flood(&remote, &turn, 3_000).await;
    f.harness.await_turn(&turn, None).await.unwrap();
    f.harness.stop_session(&session, false).await.unwrap();
    (f, store, session, turn)
}

/// The same for a turn's stream: the store recorded the turn's end, so a stream that cannot
/// reach it says so, where it used to end as if the session had gone down.
#[tokio::test]
async fn a_turn_stream_whose_session_leaves_the_store_midway_fails_saying_so() {
    let (f, store, session, turn) = stopped_in_a_store_of_one().await;
    let mut stream = f.harness.stream(&turn, Replay::Start, None).await.unwrap();
    stream.next().await.expect("an event").expect("no error");
    f.session(opts()).await;
    assert!(store.fetch_session(&session.id).await.unwrap().is_none(), "evicted");
    let error = loop {
        match stream.next().await {
            Some(Ok(event)) => assert!(!event.is_terminal(), "the terminal was read before the eviction"),
            Some(Err(error)) => break error,
            None => panic!("the stream ended without a word"),
        }
    };
    assert!(
        matches!(&error, StreamError::ReplayFailed { reason, .. } if reason.contains("no longer in the store")),
        "{error:?}"
    );
}

#[tokio::test]
async fn a_replay_of_lines_of_megabytes_reads_the_store_in_pages_of_megabytes_not_gigabytes() {
    const LINE: usize = 1 << 20;
    let (f, store) = Fixture::controlled();
    let (session, remote) = f.session(opts()).await;
    let turn = f.admitted_turn(&session, "long lines").await;
    send_lines(&remote, &turn, 100, megabyte).await;
    f.harness.await_turn(&turn, None).await.unwrap();
    f.harness.stop_session(&session, false).await.unwrap();

    let replayed: Vec<_> = f.harness.stream(&turn, Replay::Start, None).await.unwrap().collect().await.unwrap();
    let deltas = replayed.iter().filter(|e| matches!(e.kind, EventKind::MessageDelta { .. })).count();
    assert_eq!(deltas, 100, "the whole turn");
    assert!(store.largest_read() <= 17 * LINE, "a page of {} bytes", store.largest_read());
}

/// A stopped session's replay, read from the store a page at a time, whose session leaves the
/// store meanwhile (evicted by the memory store's limits, or purged): it fails saying what it
/// misses, where it used to end after the pages it had as if they were the whole history.
#[tokio::test]
async fn a_replay_whose_session_leaves_the_store_midway_fails_instead_of_ending_short() {
    let (f, store, session, _) = stopped_in_a_store_of_one().await;
    let latest = store.latest_seq(&session.id).await.unwrap().expect("stored");

    let mut replay = f.harness.subscribe(&session, Replay::Start).await.unwrap();
    assert_eq!(replay.next().await.expect("an event").expect("no error").seq, 1);
    // Another session takes the store's one place.
    f.session(opts()).await;
    assert!(store.fetch_session(&session.id).await.unwrap().is_none(), "evicted");
    let mut seen = 1;
    let error = loop {
        match replay.next().await {
            Some(Ok(event)) => {
                assert_eq!(event.seq, seen + 1, "contiguous while it lasts");
                seen = event.seq;
            }
            Some(Err(error)) => break error,
            None => panic!("the replay ended at seq {seen} of {latest} without a word"),
        }
    };
    assert!(
        matches!(&error, SubscriptionError::ReplayFailed { resume_after, reason }
            if *resume_after == seen && reason.contains(&format!("{}..{latest}", seen + 1))),
        "{error:?}"
    );
}

/// A subscriber that stops reading while lines of megabytes stream is sent past 16 MiB only
/// references the session's buffer holds (so it pins megabytes, not a gigabyte): with a store it
/// reads back what its buffer let go, and gets every event in order.
#[tokio::test]
async fn a_subscriber_that_stops_reading_lines_of_megabytes_reads_back_what_the_buffer_let_go() {
    a_subscriber_that_never_reads_gets_every_line(100, megabyte).await;
}

/// The same without a store: the subscriber learns where its events were lost once it is more
/// than the session's buffer behind in bytes, where the buffer's 1,000 sends would have held
/// every line.
#[tokio::test]
async fn without_a_store_a_subscriber_that_stops_reading_lines_of_megabytes_lags_by_their_bytes() {
    let f = Fixture::new();
    let (session, remote) = f.session(opts().store(StoreChoice::Disabled)).await;
    let turn = f.admitted_turn(&session, "long lines").await;
    let mut idle = f.harness.subscribe(&session, Replay::Latest).await.unwrap();
    let subscribed_at = f.harness.status(&session).await.unwrap().last_seq;
    send_lines(&remote, &turn, 100, megabyte).await;
    f.harness.await_turn(&turn, None).await.unwrap();

    let mut expected = subscribed_at + 1;
    let lagged = loop {
        match idle.next().await {
            Some(Ok(event)) => {
                assert_eq!(event.seq, expected, "delivery is contiguous up to the lag");
                assert!(!event.is_terminal(), "every line was held for the subscriber: it did not lag");
                expected += 1;
            }
            Some(Err(SubscriptionError::Lagged(lagged))) => break lagged,
            other => panic!("expected events, then Lagged; got {other:?}"),
        }
    };
    assert_eq!(lagged.resume_after, expected - 1, "everything up to the cursor was delivered");
    assert!(lagged.resume_after < subscribed_at + 100, "lagged after {}", lagged.resume_after - subscribed_at);
    assert!(idle.next().await.is_none(), "a lagged subscription ends");
}

/// Held events die with the session's buffer when the session ends: a subscriber that had not
/// read them still gets them from the store, and a turn stream its terminal event, where both
/// used to end as if the session had published nothing more.
#[tokio::test]
async fn held_events_a_subscriber_had_not_read_when_the_session_ended_come_from_the_store() {
    let f = Fixture::new();
    let (session, remote) = f.session(opts()).await;
    let turn = f.admitted_turn(&session, "one long line").await;
    let mut idle = f.harness.subscribe(&session, Replay::Latest).await.unwrap();
    let stream = f.harness.stream(&turn, Replay::Latest, None).await.unwrap();
    let subscribed_at = f.harness.status(&session).await.unwrap().last_seq;
    // One line past the channel's bytes, then the turn's end: it goes out held.
    let raw = agent_core::event::RawJson::parsed(format!("\"{}\"", "x".repeat(17 << 20)));
    let kind = EventKind::MessageDelta { item_id: None, text: String::new().into() };
    remote.sink().emit(Some(&turn.id), kind, Some(raw)).await.unwrap();
    let tail = EventKind::MessageDelta { item_id: None, text: "tail".into() };
    remote.emit_raw(Some(&turn.id), tail, r#""tail""#).await;
    remote.complete(&turn.id, "done").await;
    f.harness.await_turn(&turn, None).await.unwrap();
    f.harness.stop_session(&session, false).await.unwrap();
    let last = f.store.latest_seq(&session.id).await.unwrap().expect("stored");

    for expected in subscribed_at + 1..=last {
        let event = idle.next().await.expect("more events").expect("no lag with a store");
        assert_eq!(event.seq, expected, "delivery is contiguous");
    }
    assert!(idle.next().await.is_none());
    let events = stream.collect().await.expect("the turn's end");
    assert_eq!(events.last().unwrap().type_name(), "turn_completed");
}
