//! The SQLite store under a `Harness`: restart reconciliation, replay from the file, the ID
//! reuse rules on stored sessions, and both store-failure policies.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use agent_core::store::{EventQuery, Store};
use agent_core::testing::{Frame, ScriptedControl, ScriptedProvider};
use agent_core::{
    CloseReason, Durability, Error, Event, EventKind, ExitReason, Harness, Replay, Reuse, SessionOptions, SessionRef,
    SessionState, StoreChoice, StoreFailurePolicy, Subscription, TurnOptions, TurnStatus,
};
use agent_store_sqlite::SqliteStore;
use common::TempDir;
use futures::StreamExt;

/// Bounds every wait for something the runtime does on its own.
const WAIT: Duration = Duration::from_secs(10);

fn harness(store: &SqliteStore) -> (Harness, ScriptedControl) {
    let (provider, control) = ScriptedProvider::new("scripted");
    let harness = Harness::builder()
        .provider(provider)
        .store(StoreChoice::Custom(Arc::new(store.clone())))
        .build()
        .expect("harness");
    (harness, control)
}

fn options(cwd: &Path, id: &str) -> SessionOptions {
    SessionOptions::new(cwd).id(id)
}

/// The next event that `matches`, skipping others.
async fn next_matching(events: &mut Subscription, matches: impl Fn(&Event) -> bool) -> Arc<Event> {
    let wait = async {
        loop {
            match events.next().await {
                Some(Ok(event)) if matches(&event) => return event,
                Some(Ok(_)) => {}
                Some(Err(lagged)) => panic!("subscription lagged: {lagged:?}"),
                None => panic!("the subscription ended before the expected event"),
            }
        }
    };
    tokio::time::timeout(WAIT, wait).await.expect("the expected event arrives")
}

fn delta_text(events: &[Arc<Event>]) -> String {
    agent_testkit::events::delta_texts(events).concat()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_harness_restarted_on_the_same_file_sees_its_sessions_stored_and_applies_reuse_rules() {
    let dir = TempDir::new("restart");
    let path = dir.path().join("store.db");
    let cwd = dir.path();

    // First life. `done` runs a turn and is stopped cleanly; a small event buffer makes the
    // replay below come from the database rather than memory.
    let store = SqliteStore::open(&path).expect("open");
    let (first, control) = harness(&store);
    let done = first.start_session("scripted", options(cwd, "done").event_buffer_size(2)).await.unwrap();
    control.push_script([Frame::delta("Hel"), Frame::delta("lo"), Frame::complete("Hello")]);
    let turn = first.start_turn(&done, "Say hello", TurnOptions::new()).await.unwrap();
    let outcome = first.await_turn(&turn, Some(WAIT)).await.expect("the turn completes");
    let last_seq = first.status(&done).await.unwrap().last_seq;
    let mut replay = first.subscribe(&done, Replay::Start).await.unwrap();
    let mut replayed = Vec::new();
    while replayed.last().is_none_or(|e: &Arc<Event>| e.seq < last_seq) {
        replayed.push(next_matching(&mut replay, |_| true).await);
    }
    let seqs: Vec<u64> = replayed.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=last_seq).collect::<Vec<_>>(), "Replay::Start replays the whole journal from the file");
    assert_eq!(delta_text(&replayed), "Hello");
    drop(replay);
    first.stop_session(&done, false).await.unwrap();

    // `crashed` is left mid-turn as a host crash leaves it: its last writes never reach the file.
    let crashed = first.start_session("scripted", options(cwd, "crashed")).await.unwrap();
    control.push_script([Frame::delta("partial")]);
    let running = first.start_turn(&crashed, "Work", TurnOptions::new()).await.unwrap();
    let mut events = first.subscribe(&crashed, Replay::Start).await.unwrap();
    next_matching(&mut events, |e| matches!(e.kind, EventKind::MessageDelta { .. })).await;
    store.refuse_writes(true).await.unwrap();
    first.stop_session(&crashed, true).await.unwrap();
    drop((events, first, store));

    // Second life on the same file.
    let store = SqliteStore::open(&path).expect("reopen");
    let (second, _control) = harness(&store);
    assert!(second.list_sessions().is_empty(), "nothing is live after a restart");
    let stored = second.list_stored_sessions().await.unwrap();
    let listed: Vec<(&str, SessionState, bool)> =
        stored.iter().map(|s| (s.session_id.as_str(), s.snapshot.status, s.live)).collect();
    // A snapshot a killed host left `running` reads back as abandoned, never as running.
    assert_eq!(listed, [("crashed", SessionState::Abandoned, false), ("done", SessionState::Closed, false)]);
    let crashed_end = &stored[0].snapshot.ended;
    assert_eq!(crashed_end, &Some(ExitReason::Abandoned { last_status: SessionState::Running }));

    // The stored journals replay through the harness, as a reconciling orchestrator reads them.
    let history: Vec<Arc<Event>> =
        second.subscribe(&done, Replay::Start).await.unwrap().map(|e| e.expect("no lag")).collect().await;
    let direct = store.read_events(&done.id, &EventQuery::all()).await.unwrap();
    assert_eq!(history, direct, "the replay is the stored journal");
    let seqs: Vec<u64> = history.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=history.len() as u64).collect::<Vec<_>>());
    assert!(matches!(history[0].kind, EventKind::SessionReady { .. }));
    assert!(matches!(history.last().unwrap().kind, EventKind::SessionClosed { reason: CloseReason::Stopped }));
    assert_eq!(delta_text(&history), "Hello");
    let from_store = second.await_turn(&turn, Some(WAIT)).await.expect("a stopped session's turn awaits from the file");
    assert_eq!(from_store.result.text.as_deref(), Some("Hello"));
    assert_eq!(from_store.event.seq, outcome.event.seq);
    let partial = store.read_events(&crashed.id, &EventQuery::all()).await.unwrap();
    assert!(matches!(&partial.last().unwrap().kind, EventKind::MessageDelta { text, .. } if text == "partial"));
    let stored_turn = store.fetch_turn(&crashed.id, &running.id).await.unwrap().expect("the turn record");
    assert_eq!(stored_turn.status, TurnStatus::Running, "the crashed turn never finished");

    // Reuse rules on stored IDs.
    let never = second.start_session("scripted", options(cwd, "done")).await;
    assert!(matches!(never, Err(Error::SessionIdAlreadyUsed { status: SessionState::Closed, .. })), "{never:?}");
    let not_closed = second.start_session("scripted", options(cwd, "crashed").reuse(Reuse::Closed)).await;
    assert!(
        matches!(not_closed, Err(Error::SessionIdAlreadyUsed { status: SessionState::Abandoned, .. })),
        "{not_closed:?}"
    );
    let reused = second.start_session("scripted", options(cwd, "done").reuse(Reuse::Closed)).await.unwrap();
    let replaced = second.start_session("scripted", options(cwd, "crashed").reuse(Reuse::Replace)).await.unwrap();
    let fresh = store.read_events(&reused.id, &EventQuery::all()).await.unwrap();
    assert_eq!(fresh.len(), 1, "the old journal is gone: {fresh:?}");
    assert!(matches!(fresh[0].kind, EventKind::SessionReady { .. }));
    assert_eq!(store.fetch_turn(&done.id, &turn.id).await.unwrap(), None, "the old turns are gone");
    let live: Vec<bool> = second.list_stored_sessions().await.unwrap().iter().map(|s| s.live).collect();
    assert_eq!(live, [true, true]);
    for session in [&reused, &replaced] {
        second.stop_session(session, false).await.unwrap();
    }
}

/// A replay from the file that meets a row it cannot read (damaged, or written by a newer
/// release) delivers every event before it, then fails naming the row, with `resume_after` the
/// last event delivered — where it used to fail its whole first page with `resume_after: 0`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_delivers_the_events_before_a_row_it_cannot_read() {
    let dir = TempDir::new("damaged-row");
    let path = dir.path().join("store.db");
    let store = SqliteStore::open(&path).expect("open");
    let (harness, control) = harness(&store);
    let session = harness.start_session("scripted", options(dir.path(), "s").event_buffer_size(2)).await.unwrap();
    control.push_script([Frame::delta("a"), Frame::delta("b"), Frame::delta("c"), Frame::complete("abc")]);
    let turn = harness.start_turn(&session, "Work", TurnOptions::new()).await.unwrap();
    harness.await_turn(&turn, Some(WAIT)).await.expect("the turn completes");
    harness.stop_session(&session, false).await.unwrap();
    let stored = store.read_events(&session.id, &EventQuery::all()).await.unwrap();
    let bad = stored.iter().find(|e| matches!(&e.kind, EventKind::MessageDelta { text, .. } if text == "a")).unwrap();
    let damage = rusqlite::Connection::open(&path).unwrap();
    let changed = damage
        .execute(
            "UPDATE events SET kind_json = '{\"type\":\"future_kind\",\"data\":{}}' WHERE seq = ?1",
            [bad.seq as i64],
        )
        .unwrap();
    assert_eq!(changed, 1);

    let mut replay = harness.subscribe(&session, Replay::After(0)).await.unwrap();
    let mut delivered = Vec::new();
    let failure = loop {
        match tokio::time::timeout(WAIT, replay.next()).await.expect("the replay goes on") {
            Some(Ok(event)) => delivered.push(event.seq),
            Some(Err(failure)) => break failure,
            None => panic!("the replay ended without a word after {delivered:?}"),
        }
    };
    assert_eq!(delivered, (1..bad.seq).collect::<Vec<_>>(), "every event before the bad row");
    match failure {
        agent_core::SubscriptionError::ReplayFailed { resume_after, reason } => {
            assert_eq!(resume_after, bad.seq - 1);
            assert!(reason.contains(&format!("event {} of session `s`", bad.seq)), "{reason}");
        }
        other => panic!("expected ReplayFailed, got {other:?}"),
    }
    assert!(replay.next().await.is_none(), "the subscription ends with its failure");
}

/// A snapshot this build cannot read (damaged, or written by a newer release) is named by the
/// listing's error, and `purge_session` removes it with all the session holds, where it used to
/// fail on the same error and leave the store unlistable. The other sessions stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_that_does_not_decode_can_be_purged() {
    let dir = TempDir::new("damaged-snapshot");
    let path = dir.path().join("store.db");
    let store = SqliteStore::open(&path).expect("open");
    let (harness, control) = harness(&store);
    let mut sessions = Vec::new();
    for id in ["bad", "good"] {
        let session = harness.start_session("scripted", options(dir.path(), id)).await.unwrap();
        control.push_script([Frame::delta("a"), Frame::complete("a")]);
        let turn = harness.start_turn(&session, "Work", TurnOptions::new()).await.unwrap();
        harness.await_turn(&turn, Some(WAIT)).await.expect("the turn completes");
        harness.stop_session(&session, false).await.unwrap();
        sessions.push(session);
    }
    let damage = rusqlite::Connection::open(&path).unwrap();
    let changed = damage
        .execute("UPDATE sessions SET snapshot = json_set(snapshot, '$.status', 'paused') WHERE id = 'bad'", [])
        .unwrap();
    assert_eq!(changed, 1);

    let listed = harness.list_stored_sessions().await.expect_err("a snapshot does not decode");
    assert!(listed.to_string().contains("snapshot of session `bad`"), "{listed}");
    harness.purge_session(&sessions[0]).await.expect("the unreadable session is purged");
    let stored = harness.list_stored_sessions().await.expect("the store lists again");
    let ids: Vec<&str> = stored.iter().map(|s| s.session_id.as_str()).collect();
    assert_eq!(ids, ["good"]);
    assert_eq!(store.latest_seq(&sessions[0].id).await.unwrap(), None, "its events went too");
    assert!(store.list_turns(&sessions[0].id).await.unwrap().is_empty(), "and its turns");
    assert!(store.latest_seq(&sessions[1].id).await.unwrap().is_some(), "the other session's events stay");
    match harness.purge_session(&sessions[0]).await {
        Err(Error::SessionNotFound { id }) => assert_eq!(id, sessions[0].id),
        other => panic!("a second purge finds nothing, got {other:?}"),
    }
}

/// A session on a fresh store with a running turn whose first event is committed.
async fn running_session(
    dir: &TempDir,
    policy: StoreFailurePolicy,
) -> (SqliteStore, Harness, SessionRef, agent_core::Turn, agent_core::testing::ScriptedSession, Subscription) {
    let store = SqliteStore::open(dir.path().join("store.db")).expect("open");
    let (harness, control) = harness(&store);
    let session = harness.start_session("scripted", options(dir.path(), "s").store_failure(policy)).await.unwrap();
    let scripted = control.session(&session.id).await;
    let turn = harness.start_turn(&session, "Work", TurnOptions::new()).await.unwrap();
    let mut events = harness.subscribe(&session, Replay::Start).await.unwrap();
    scripted.delta(&turn.id, "before").await;
    next_matching(&mut events, |e| matches!(&e.kind, EventKind::MessageDelta { text, .. } if text == "before")).await;
    (store, harness, session, turn, scripted, events)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_store_under_degrade_keeps_the_session_live_and_degraded() {
    let dir = TempDir::new("degrade");
    let (store, harness, session, turn, scripted, mut events) =
        running_session(&dir, StoreFailurePolicy::Degrade).await;
    assert_eq!(harness.status(&session).await.unwrap().durability, Durability::Durable);

    store.refuse_writes(true).await.unwrap();
    scripted.delta(&turn.id, "after").await;
    let failed = next_matching(&mut events, |e| matches!(e.kind, EventKind::StoreFailed { .. })).await;
    assert!(
        matches!(&failed.kind, EventKind::StoreFailed { policy: StoreFailurePolicy::Degrade, reason } if reason.contains("readonly")),
        "{failed:?}"
    );
    let status = harness.status(&session).await.unwrap();
    assert!(matches!(status.durability, Durability::Degraded { .. }), "{:?}", status.durability);
    assert_eq!(status.status, SessionState::Running, "the session stays live");

    // It keeps working live-only: the turn finishes and a subscriber sees it.
    scripted.complete(&turn.id, "done").await;
    let outcome = harness.await_turn(&turn, Some(WAIT)).await.expect("the turn completes");
    assert_eq!(outcome.result.text.as_deref(), Some("done"));
    assert_eq!(harness.list_sessions(), std::slice::from_ref(&session));
    let stored = store.read_events(&session.id, &EventQuery::all()).await.unwrap();
    assert!(matches!(&stored.last().unwrap().kind, EventKind::MessageDelta { text, .. } if text == "before"));
    harness.stop_session(&session, false).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_store_under_stop_ends_the_session_cleanly() {
    let dir = TempDir::new("stop");
    let (store, harness, session, turn, scripted, mut events) = running_session(&dir, StoreFailurePolicy::Stop).await;
    let monitor = harness.monitor(&session).await.unwrap();

    store.refuse_writes(true).await.unwrap();
    scripted.delta(&turn.id, "after").await;
    let failed = next_matching(&mut events, |e| matches!(e.kind, EventKind::StoreFailed { .. })).await;
    assert!(matches!(failed.kind, EventKind::StoreFailed { policy: StoreFailurePolicy::Stop, .. }), "{failed:?}");
    let closed = next_matching(&mut events, |e| matches!(e.kind, EventKind::SessionClosed { .. })).await;
    assert!(matches!(closed.kind, EventKind::SessionClosed { reason: CloseReason::StoreFailed }), "{closed:?}");
    let exit = tokio::time::timeout(WAIT, monitor).await.expect("the session ends");
    assert!(matches!(exit, ExitReason::StoreFailed { .. }), "{exit:?}");
    assert!(harness.list_sessions().is_empty(), "the session is no longer live");
    let stored_turn = store.fetch_turn(&session.id, &turn.id).await.unwrap().expect("turn record");
    assert_eq!(stored_turn.status, TurnStatus::Running, "nothing after the failure reached the file");
}
