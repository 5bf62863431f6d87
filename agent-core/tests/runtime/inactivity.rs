//! The per-turn inactivity deadline: a turn whose provider goes silent is cancelled, and fails
//! as stalled if the provider does not end it within the cancel deadline. Off by default.

use std::time::Duration;

use agent_core::request::RequestSpec;
use agent_core::testing::{CancelBehavior, Recorded};
use agent_core::*;
use tokio::time::Instant;

use crate::common::*;

const SILENCE: Duration = Duration::from_secs(30);

fn cancels(remote: &agent_core::testing::ScriptedSession) -> usize {
    remote.commands().iter().filter(|c| matches!(c, Recorded::Cancel { .. })).count()
}

#[tokio::test(start_paused = true)]
async fn a_silent_turn_is_cancelled_as_stalled() {
    let f = Fixture::new();
    let (session, remote) = f.session(opts().turn_inactivity_timeout(SILENCE)).await;
    let mut events = f.harness.subscribe(&session, Replay::Latest).await.unwrap();
    let turn = f.harness.start_turn(&session, "go", TurnOptions::new()).await.unwrap();
    next_of(&mut events, "turn_started").await;
    let started = Instant::now();
    let cancel = next(&mut events).await;
    assert_eq!(started.elapsed(), SILENCE);
    match &cancel.kind {
        EventKind::CancelRequested { reason: Some(reason) } => assert!(reason.starts_with("stalled"), "{reason}"),
        other => panic!("expected cancel_requested, got {other:?}"),
    }
    assert_eq!(cancels(&remote), 1, "the provider was asked to cancel");
    // The scripted provider ends a cancelled turn: its terminal event is the outcome.
    let outcome = f.harness.await_turn(&turn, None).await.unwrap_err();
    assert!(matches!(outcome, AwaitError::Ended(ref o) if o.status == TurnStatus::Cancelled), "{outcome:?}");
    // Its reason says why it was stopped, before what the provider said.
    let AwaitError::Ended(outcome) = outcome else { unreachable!() };
    assert_eq!(outcome.result.ended_by, Some(EndCause::Stalled));
    let reason = outcome.result.reason.unwrap_or_default();
    assert!(reason.starts_with("stalled: no provider activity for"), "{reason}");
    assert_eq!(f.harness.status(&session).await.unwrap().status, SessionState::Idle);
}

#[tokio::test(start_paused = true)]
async fn a_stalled_turn_the_provider_does_not_end_fails_as_stalled_and_retires_the_session() {
    let f = Fixture::new();
    f.control.set_cancel(CancelBehavior::AckOnly);
    let (session, _) = f.session(opts().provider_command_timeout(Duration::from_secs(10))).await;
    let monitor = f.harness.monitor(&session).await.unwrap();
    // The turn's own deadline (the session has none).
    let options = TurnOptions::new().inactivity_timeout(SILENCE);
    let turn = f.harness.start_turn(&session, "go", options).await.unwrap();
    let started = Instant::now();
    let outcome = f.harness.await_turn(&turn, None).await.unwrap_err();
    match outcome {
        AwaitError::Ended(outcome) => {
            assert_eq!(outcome.status, TurnStatus::Failed);
            let reason = outcome.result.reason.unwrap();
            assert!(reason.starts_with("stalled"), "{reason}");
        }
        other => panic!("expected a failed turn, got {other:?}"),
    }
    assert_eq!(started.elapsed(), SILENCE + Duration::from_secs(10), "the inactivity, then the cancel deadline");
    assert!(matches!(monitor.await, ExitReason::Retired { ref reason } if reason.starts_with("stalled")));
}

#[tokio::test(start_paused = true)]
async fn a_silent_turn_is_not_watched_by_default() {
    let f = Fixture::new();
    let (session, remote) = f.session(opts()).await;
    let turn = f.admitted_turn(&session, "go").await;
    let outcome = f.harness.await_turn(&turn, Some(Duration::from_secs(3600))).await;
    assert!(matches!(outcome, Err(AwaitError::Timeout(_))), "{outcome:?}");
    assert_eq!(cancels(&remote), 0);
    assert_eq!(f.harness.status(&session).await.unwrap().status, SessionState::Running);
}

#[tokio::test(start_paused = true)]
async fn provider_activity_and_pending_requests_keep_a_turn_alive() {
    let f = Fixture::new();
    let (session, remote) = f.session(opts().turn_inactivity_timeout(SILENCE)).await;
    let turn = f.admitted_turn(&session, "go").await;
    let mut events = f.harness.subscribe(&turn, Replay::Latest).await.unwrap();
    // A delta every 20 s for two minutes: never 30 s of silence.
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_secs(20)).await;
        remote.delta(&turn.id, ".").await;
    }
    // Waiting on the host for ten minutes is not a stall either.
    remote.request(&turn.id, RequestSpec::new(RequestKind::Confirmation, "Proceed?", "c1")).await;
    let request = loop {
        let event = next(&mut events).await;
        if event.type_name() == "request_created" {
            break request_of(&event);
        }
    };
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert_eq!(cancels(&remote), 0, "no cancel while active or waiting on the host");
    f.harness.respond(&request, Response::approve()).await.unwrap();
    remote.complete(&turn.id, "done").await;
    assert_eq!(f.harness.await_turn(&turn, None).await.unwrap().result.text.as_deref(), Some("done"));
}

/// The silence is counted from the host's answer, not from the watchdog's last look during the
/// wait: a CLI that runs the approved tool without a word has the whole timeout.
#[tokio::test(start_paused = true)]
async fn the_silence_after_an_answer_is_counted_from_the_answer() {
    let f = Fixture::new();
    let (session, remote) = f.session(opts().turn_inactivity_timeout(SILENCE)).await;
    let turn = f.admitted_turn(&session, "go").await;
    let mut events = f.harness.subscribe(&turn, Replay::Latest).await.unwrap();
    remote.request(&turn.id, RequestSpec::new(RequestKind::CommandApproval, "Run?", "r1")).await;
    let request = next_of(&mut events, "request_created").await;
    // Answered a second before the watchdog's second look.
    tokio::time::sleep(SILENCE * 2 - Duration::from_secs(1)).await;
    f.harness.respond(&request_of(&request), Response::approve()).await.unwrap();
    let answered = Instant::now();
    let cancel = next_of(&mut events, "cancel_requested").await;
    assert_eq!(answered.elapsed(), SILENCE, "cancelled {:?} after the answer", answered.elapsed());
    assert!(matches!(cancel.kind, EventKind::CancelRequested { reason: Some(ref r) } if r.starts_with("stalled")));
    assert_eq!(cancels(&remote), 1);
}

#[tokio::test]
async fn a_zero_inactivity_timeout_is_refused() {
    let f = Fixture::new();
    let err = f.harness.start_session(PROVIDER, opts().turn_inactivity_timeout(Duration::ZERO)).await.unwrap_err();
    assert!(matches!(err, Error::InvalidOption { option: "turn_inactivity_timeout", .. }), "{err:?}");
    let (session, _) = f.session(opts()).await;
    let err =
        f.harness.start_turn(&session, "go", TurnOptions::new().inactivity_timeout(Duration::ZERO)).await.unwrap_err();
    assert!(matches!(err, Error::InvalidOption { option: "inactivity_timeout", .. }), "{err:?}");
}

/// A provider that takes a caller's cancel and never ends the turn does not leave it cancelling
/// for good: it has `provider_command_timeout` from taking the cancel, then the turn fails and
/// the session retires, as for a stalled turn.
#[tokio::test(start_paused = true)]
async fn a_cancel_the_provider_took_but_never_acted_on_fails_the_turn_in_time() {
    let f = Fixture::new();
    f.control.set_cancel(CancelBehavior::AckOnly);
    let (session, _) = f.session(opts().provider_command_timeout(Duration::from_secs(10))).await;
    let monitor = f.harness.monitor(&session).await.unwrap();
    let turn = f.admitted_turn(&session, "go").await;
    let started = Instant::now();
    f.harness.cancel(&turn).await.unwrap();
    assert_eq!(f.harness.status(&session).await.unwrap().status, SessionState::Cancelling);
    match f.harness.await_turn(&turn, Some(Duration::from_secs(60))).await.unwrap_err() {
        AwaitError::Ended(outcome) => {
            assert_eq!(outcome.status, TurnStatus::Failed);
            let reason = outcome.result.reason.unwrap_or_default();
            assert!(reason.contains("did not end the turn within 10s of taking the cancel"), "{reason}");
        }
        other => panic!("expected a failed turn, got {other:?}"),
    }
    assert_eq!(started.elapsed(), Duration::from_secs(10), "the cancel's deadline");
    assert!(matches!(monitor.await, ExitReason::Retired { ref reason } if reason.starts_with("cancelled")));
}
