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
async fn without_a_store_an_evicted_turn_is_replay_unavailable_rather_than_a_wait() {
    let f = Fixture::new();
    let options = opts().store(StoreChoice::Disabled).completed_turn_cache_size(CacheSize::Bounded(1));
    let (session, _) = f.session(options).await;
    f.control.push_script([Frame::complete("first")]);
    let first = f.harness.start_turn(&session, "1", TurnOptions::new()).await.unwrap();
    f.harness.await_turn(&first, None).await.unwrap();
    f.control.push_script([Frame::complete("second")]);
    let second = f.harness.start_turn(&session, "2", TurnOptions::new()).await.unwrap();
    f.harness.await_turn(&second, None).await.unwrap();
    let err = f.harness.await_turn(&first, None).await.unwrap_err();
    assert!(matches!(err, AwaitError::Failed(Error::ReplayUnavailable { .. })), "{err:?}");
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
    assert!(matches!(result, Err(AwaitError::SessionDown(ExitReason::Crashed { .. }))), "{result:?}");
}
