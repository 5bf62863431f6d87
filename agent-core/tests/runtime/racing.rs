//! Harnesses sharing a store that write the same session at once: whatever one of them committed
//! after another read the session, that other one's write does not undo. Each race is set up
//! exactly: the first harness's write is held at the store after every check it makes, the
//! second one acts, then the held write goes on.

use std::time::Duration;

use agent_core::store::EventQuery;

use super::common::*;
use agent_core::*;

/// A second harness on the fixture's controlled store.
fn other_harness(store: &std::sync::Arc<ControlledStore>) -> Harness {
    let (provider, _control) = agent_core::testing::ScriptedProvider::new(PROVIDER);
    Harness::builder().provider(provider).store(StoreChoice::Custom(store.clone())).build().unwrap()
}

/// A harness on a controlled store that ran session `id` and stopped it.
async fn stopped(id: &str) -> (Fixture, std::sync::Arc<ControlledStore>, SessionRef) {
    let (f, store) = Fixture::controlled();
    let (session, _) = f.session(opts().id(id)).await;
    f.harness.stop_session(&session, false).await.unwrap();
    (f, store, session)
}

fn elsewhere(err: &Error, id: &SessionId) -> bool {
    matches!(err, Error::SessionLiveElsewhere { id: i, pid } if i == id && *pid == std::process::id())
}

async fn event_names(store: &ControlledStore, id: &SessionId) -> Vec<&'static str> {
    let events = store.read_events(id, &EventQuery::all()).await.unwrap();
    events.iter().map(|e| e.type_name()).collect()
}

#[tokio::test]
async fn a_start_whose_commit_another_harness_beat_fails_and_replaces_nothing() {
    let (f, store, session) = stopped("beaten").await;
    let other = other_harness(&store);

    // Both replace the closed session; the first one's commit waits at the store.
    store.set(WriteMode::Gated);
    let harness = f.harness.clone();
    let late =
        tokio::spawn(async move { harness.start_session(PROVIDER, opts().id("beaten").reuse(Reuse::Closed)).await });
    store.arrival().await;
    let winner = other.start_session(PROVIDER, opts().id("beaten").reuse(Reuse::Closed)).await.unwrap();
    let stored = store.fetch_session(&session.id).await.unwrap();
    store.open_gate();

    let err = late.await.unwrap().unwrap_err();
    assert!(elsewhere(&err, &session.id), "{err:?}");
    assert!(f.harness.list_sessions().is_empty(), "nothing runs beside the winner");
    assert_eq!(store.fetch_session(&session.id).await.unwrap(), stored, "the winner's snapshot stands");
    assert_eq!(event_names(&store, &session.id).await, ["session_ready"], "the winner's history is whole");
    assert_eq!(other.status(&winner).await.unwrap().status, SessionState::Idle);
}

#[tokio::test]
async fn a_resume_of_a_session_purged_before_its_commit_fails_and_stores_nothing() {
    let (f, store, session) = stopped("gone").await;
    let other = other_harness(&store);

    store.set(WriteMode::Gated);
    let harness = f.harness.clone();
    let resume = opts().resume_session(session.id.clone());
    let late = tokio::spawn(async move { harness.start_session(PROVIDER, resume).await });
    store.arrival().await;
    other.purge_session(&session).await.unwrap();
    store.open_gate();

    let err = late.await.unwrap().unwrap_err();
    assert!(matches!(err, Error::ResumeFailed { ref reason, .. } if reason.contains("purged")), "{err:?}");
    assert!(f.harness.list_sessions().is_empty());
    assert_eq!(store.fetch_session(&session.id).await.unwrap(), None, "the purge stands");
    assert_eq!(store.latest_seq(&session.id).await.unwrap(), None);
}

#[tokio::test]
async fn a_purge_does_not_delete_a_session_another_harness_resumed_before_it_committed() {
    let (f, store, session) = stopped("kept").await;
    // What a killed host leaves: a snapshot that says the session runs, whose owner is unknown.
    let mut stale = store.fetch_session(&session.id).await.unwrap().unwrap();
    stale.status = SessionState::Running;
    stale.owner = None;
    store.save_session(&stale).await.unwrap();
    let other = other_harness(&store);

    store.set(WriteMode::Gated);
    let harness = f.harness.clone();
    let target = session.clone();
    let purge = tokio::spawn(async move { harness.purge_session(&target).await });
    store.arrival().await;
    let resumed = other.start_session(PROVIDER, opts().resume_session(session.id.clone())).await.unwrap();
    store.open_gate();

    let err = purge.await.unwrap().unwrap_err();
    assert!(elsewhere(&err, &session.id), "{err:?}");
    assert_eq!(other.status(&resumed).await.unwrap().status, SessionState::Idle);
    let names = event_names(&store, &session.id).await;
    assert!(names.contains(&"conversation_resumed"), "the resumed history is whole: {names:?}");
    assert!(names.contains(&"session_closed"), "and so is the first run's: {names:?}");
}

#[tokio::test(start_paused = true)]
async fn a_start_whose_commit_timed_out_takes_back_nothing_another_harness_committed() {
    let (f, store) = Fixture::controlled();
    let other = other_harness(&store);

    store.set(WriteMode::Gated);
    let harness = f.harness.clone();
    let options = opts().id("taken").startup_finalization_timeout(Duration::from_secs(2));
    let late = tokio::spawn(async move { harness.start_session(PROVIDER, options).await });
    store.arrival().await;
    // Another harness runs the session and stops it, all while the first one's commit is held.
    let winner = other.start_session(PROVIDER, opts().id("taken")).await.unwrap();
    other.stop_session(&winner, false).await.unwrap();
    let stored = store.fetch_session(&winner.id).await.unwrap();

    // The held commit times out, and the first harness takes back what it may have written.
    let err = late.await.unwrap().unwrap_err();
    assert!(matches!(err, Error::StartupFinalizationTimeout { .. }), "{err:?}");
    assert_eq!(store.fetch_session(&winner.id).await.unwrap(), stored, "the winner's snapshot stands");
    assert_eq!(event_names(&store, &winner.id).await, ["session_ready", "session_closed"], "and its history");
}
