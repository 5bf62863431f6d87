//! Cancellation: asynchronous intent, idempotence, inactive turns, provider outcomes.

use std::time::Duration;

use agent_core::request::RequestSpec;
use agent_core::testing::{CallBehavior, CancelBehavior, Recorded, ScriptedSession};
use agent_core::*;

use crate::common::*;

fn cancels(remote: &ScriptedSession) -> usize {
    remote.commands().iter().filter(|c| matches!(c, Recorded::Cancel { .. })).count()
}

#[tokio::test]
async fn cancel_records_the_intent_and_the_provider_outcome_ends_the_turn() {
    let f = Fixture::new();
    let (session, remote) = f.session(opts()).await;
    let turn = f.admitted_turn(&session, "long").await;
    let mut events = f.harness.subscribe(&turn, Replay::Latest).await.unwrap();
    f.harness.cancel_with_reason(&turn, Some("user pressed stop".into())).await.unwrap();
    let requested = next(&mut events).await;
    assert!(matches!(&requested.kind, EventKind::CancelRequested { reason: Some(r) } if r == "user pressed stop"));
    let terminal = next(&mut events).await;
    assert_eq!(terminal.type_name(), "turn_cancelled");
    assert_eq!(cancels(&remote), 1);
    assert_eq!(f.harness.status(&session).await.unwrap().status, SessionState::Idle);
    let outcome = f.harness.await_turn(&turn, None).await.unwrap_err();
    assert!(matches!(outcome, AwaitError::Ended(ref o) if o.status == TurnStatus::Cancelled), "{outcome:?}");
}

#[tokio::test]
async fn cancelling_twice_is_idempotent_and_sends_one_provider_command() {
    let f = Fixture::new();
    f.control.set_cancel(CancelBehavior::AckOnly);
    let (session, remote) = f.session(opts()).await;
    let turn = f.admitted_turn(&session, "long").await;
    f.harness.cancel(&turn).await.unwrap();
    f.harness.cancel(&turn).await.unwrap();
    let status = f.harness.status(&session).await.unwrap();
    assert_eq!(status.status, SessionState::Cancelling, "cancel is not terminal until the provider says so");
    assert_eq!(status.current_turn.unwrap().status, TurnStatus::Cancelling);
    assert_eq!(cancels(&remote), 1);
    remote.finish(&turn.id, TurnStatus::Interrupted, TurnResult::reason("interrupted")).await;
    let outcome = f.harness.await_turn(&turn, None).await.unwrap_err();
    assert!(matches!(outcome, AwaitError::Ended(ref o) if o.status == TurnStatus::Interrupted), "{outcome:?}");
}

#[tokio::test]
async fn cancelling_an_inactive_turn_is_turn_not_active() {
    let f = Fixture::new();
    let (session, remote) = f.session(opts()).await;
    let turn = f.admitted_turn(&session, "short").await;
    remote.complete(&turn.id, "done").await;
    f.harness.await_turn(&turn, None).await.unwrap();
    let err = f.harness.cancel(&turn).await.unwrap_err();
    assert!(matches!(err, Error::TurnNotActive { ref turn_id } if *turn_id == turn.id), "{err:?}");
    assert_eq!(cancels(&remote), 0);
}

#[tokio::test(start_paused = true)]
async fn a_cancel_during_admission_is_sent_once_the_provider_admits_the_turn() {
    let f = Fixture::new();
    let (session, remote) = f.session(opts()).await;
    f.control.push_admission(CallBehavior::Delay(Duration::from_secs(2)));
    let turn = f.harness.start_turn(&session, "go", TurnOptions::new()).await.unwrap();
    f.harness.cancel(&turn).await.unwrap();
    assert_eq!(cancels(&remote), 0, "nothing to interrupt upstream yet");
    assert_eq!(f.harness.status(&session).await.unwrap().status, SessionState::Cancelling);
    let outcome = f.harness.await_turn(&turn, None).await.unwrap_err();
    assert!(matches!(outcome, AwaitError::Ended(ref o) if o.status == TurnStatus::Cancelled), "{outcome:?}");
    assert_eq!(cancels(&remote), 1);
    let types = drain_types(f.harness.subscribe(&turn, Replay::Start).await.unwrap()).await;
    assert_eq!(types, ["cancel_requested", "turn_started", "turn_cancelled"]);
}

#[tokio::test]
async fn cancelling_expires_pending_requests() {
    let f = Fixture::new();
    f.control.set_cancel(CancelBehavior::AckOnly);
    let (session, remote) = f.session(opts()).await;
    let turn = f.admitted_turn(&session, "work").await;
    let mut events = f.harness.subscribe(&turn, Replay::Latest).await.unwrap();
    remote.request(&turn.id, RequestSpec::new(RequestKind::CommandApproval, "rm -rf?", "r1")).await;
    let request = request_of(&next(&mut events).await);
    f.harness.cancel(&turn).await.unwrap();
    assert_eq!(next(&mut events).await.type_name(), "cancel_requested");
    let expired = next(&mut events).await;
    assert!(matches!(&expired.kind, EventKind::RequestExpired { reason: ExpiryReason::Cancelled, .. }), "{expired:?}");
    let err = f.harness.respond(&request, Response::approve()).await.unwrap_err();
    assert!(matches!(err, Error::RequestExpired { .. }), "{err:?}");
    // New requests while cancelling are not surfaced.
    remote.request(&turn.id, RequestSpec::new(RequestKind::CommandApproval, "again?", "r2")).await;
    remote.finish(&turn.id, TurnStatus::Cancelled, TurnResult::default()).await;
    assert_eq!(next(&mut events).await.type_name(), "turn_cancelled");
}

#[tokio::test]
async fn a_rejected_cancellation_retires_the_session() {
    let f = Fixture::new();
    f.control.set_cancel(CancelBehavior::Reject("no such turn".into()));
    let (session, _) = f.session(opts()).await;
    let turn = f.admitted_turn(&session, "work").await;
    let monitor = f.harness.monitor(&session).await.unwrap();
    f.harness.cancel(&turn).await.unwrap();
    let reason = monitor.await;
    assert!(
        matches!(reason, ExitReason::Retired { ref reason } if reason.contains("cancellation failed")),
        "{reason:?}"
    );
    let outcome = f.harness.await_turn(&turn, None).await.unwrap_err();
    assert!(matches!(outcome, AwaitError::Ended(ref o) if o.status == TurnStatus::Failed), "{outcome:?}");
}

/// A cancel that failed on the transport waits for the provider's report of the loss (the turn's
/// end with the CLI's exit): given within `provider_command_timeout`, it is what ends the turn;
/// without it, the cancel's outcome is unknown and the session retires.
#[tokio::test(start_paused = true)]
async fn a_cancellation_that_failed_on_the_transport_waits_for_the_providers_report() {
    let f = Fixture::new();
    f.control.set_cancel(CancelBehavior::TransportFails("the connection is closed".into()));
    let timeout = Duration::from_secs(4);
    let (session, remote) = f.session(opts().provider_command_timeout(timeout)).await;
    let turn = f.admitted_turn(&session, "reported").await;
    f.harness.cancel(&turn).await.unwrap();
    tokio::time::sleep(timeout - Duration::from_millis(10)).await;
    let mut exited = TurnResult::reason("the CLI exited");
    exited.ended_by = Some(EndCause::TransportLost);
    remote.emit(&turn.id, EventKind::terminal(TurnStatus::Failed, exited)).await;
    let outcome = f.harness.await_turn(&turn, None).await.unwrap_err();
    assert!(
        matches!(outcome, AwaitError::Ended(ref o) if o.result.ended_by == Some(EndCause::TransportLost)),
        "{outcome:?}"
    );
    tokio::time::sleep(timeout).await;
    assert_eq!(f.harness.status(&session).await.unwrap().status, SessionState::Idle, "not retired");

    let turn = f.admitted_turn(&session, "unreported").await;
    let monitor = f.harness.monitor(&session).await.unwrap();
    f.harness.cancel(&turn).await.unwrap();
    let started = tokio::time::Instant::now();
    let reason = monitor.await;
    assert_eq!(started.elapsed(), timeout, "retired once the provider had its time to report");
    assert!(
        matches!(reason, ExitReason::Retired { ref reason } if reason.contains("the connection is closed")),
        "{reason:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_cancellation_that_never_returns_retires_the_session() {
    let f = Fixture::new();
    f.control.set_cancel(CancelBehavior::Hang);
    let (session, _) = f.session(opts().provider_command_timeout(Duration::from_secs(4))).await;
    let turn = f.admitted_turn(&session, "work").await;
    let monitor = f.harness.monitor(&session).await.unwrap();
    f.harness.cancel(&turn).await.unwrap();
    let reason = monitor.await;
    assert!(matches!(reason, ExitReason::Retired { ref reason } if reason.contains("timed out")), "{reason:?}");
}

/// How the turn ended, from its terminal event.
async fn ended_by(f: &Fixture, turn: &Turn) -> (TurnStatus, Option<EndCause>) {
    let outcome = match f.harness.await_turn(turn, None).await {
        Ok(outcome) => outcome,
        Err(AwaitError::Ended(outcome)) => *outcome,
        Err(other) => panic!("the turn did not end: {other:?}"),
    };
    (outcome.status, outcome.result.ended_by)
}

#[tokio::test(start_paused = true)]
async fn the_terminal_event_says_what_ended_the_turn() {
    let f = Fixture::new();
    let (session, remote) = f.session(opts()).await;

    let turn = f.admitted_turn(&session, "finishes").await;
    remote.complete(&turn.id, "done").await;
    assert_eq!(ended_by(&f, &turn).await, (TurnStatus::Completed, Some(EndCause::Provider)));

    let turn = f.admitted_turn(&session, "cancelled").await;
    f.harness.cancel(&turn).await.unwrap();
    assert_eq!(ended_by(&f, &turn).await, (TurnStatus::Cancelled, Some(EndCause::Cancel)));

    f.control.push_admission(CallBehavior::Reject("no".into()));
    let turn = f.harness.start_turn(&session, "rejected", TurnOptions::new()).await.unwrap();
    assert_eq!(ended_by(&f, &turn).await, (TurnStatus::Failed, Some(EndCause::Rejected)));

    let turn = f
        .harness
        .start_turn(&session, "stalls", TurnOptions::new().inactivity_timeout(Duration::from_secs(5)))
        .await
        .unwrap();
    assert_eq!(ended_by(&f, &turn).await, (TurnStatus::Cancelled, Some(EndCause::Stalled)));

    // The provider's report of its CLI's exit, with or without a cancel under way.
    let exited = || {
        let mut result = TurnResult::reason("the CLI exited");
        result.ended_by = Some(EndCause::TransportLost);
        EventKind::terminal(TurnStatus::Failed, result)
    };
    let turn = f.admitted_turn(&session, "exits").await;
    remote.emit(&turn.id, exited()).await;
    assert_eq!(ended_by(&f, &turn).await, (TurnStatus::Failed, Some(EndCause::TransportLost)));
    f.control.set_cancel(CancelBehavior::AckOnly);
    let turn = f.admitted_turn(&session, "exits while cancelled").await;
    f.harness.cancel(&turn).await.unwrap();
    remote.emit(&turn.id, exited()).await;
    assert_eq!(ended_by(&f, &turn).await, (TurnStatus::Failed, Some(EndCause::TransportLost)));
    // A turn that completed before the cancel reached the provider ended by itself.
    let turn = f.admitted_turn(&session, "done first").await;
    f.harness.cancel(&turn).await.unwrap();
    remote.complete(&turn.id, "done").await;
    assert_eq!(ended_by(&f, &turn).await, (TurnStatus::Completed, Some(EndCause::Provider)));
    // So did one that completed after the inactivity watchdog asked to stop it.
    let mut events = f.harness.subscribe(&session, Replay::Latest).await.unwrap();
    let options = TurnOptions::new().inactivity_timeout(Duration::from_secs(5));
    let turn = f.harness.start_turn(&session, "done after all", options).await.unwrap();
    next_of(&mut events, "cancel_requested").await;
    remote.complete(&turn.id, "done").await;
    assert_eq!(ended_by(&f, &turn).await, (TurnStatus::Completed, Some(EndCause::Provider)));
    let outcome = f.harness.await_turn(&turn, None).await.unwrap();
    assert_eq!(outcome.result.reason, None, "not called stalled");
    f.control.set_cancel(CancelBehavior::Finish(TurnStatus::Cancelled));
    // Any other cause a provider names is the runtime's to say.
    let turn = f.admitted_turn(&session, "claims").await;
    let mut claimed = TurnResult::text("done");
    claimed.ended_by = Some(EndCause::HarnessShutdown);
    remote.emit(&turn.id, EventKind::terminal(TurnStatus::Completed, claimed)).await;
    assert_eq!(ended_by(&f, &turn).await, (TurnStatus::Completed, Some(EndCause::Provider)));

    let turn = f.admitted_turn(&session, "forced").await;
    f.harness.stop_session(&session, true).await.unwrap();
    assert_eq!(ended_by(&f, &turn).await, (TurnStatus::Interrupted, Some(EndCause::ForcedStop)));
    // The runtime's own terminal still names the provider's turn, known since the admission.
    let Err(AwaitError::Ended(outcome)) = f.harness.await_turn(&turn, None).await else { panic!("interrupted") };
    assert_eq!(outcome.result.provider_turn_id, Some(format!("p-{}", turn.id)));

    let (session, _) = f.session(opts()).await;
    let turn = f.admitted_turn(&session, "shut down").await;
    let monitor = f.harness.monitor(&session).await.unwrap();
    let store = f.dyn_store();
    drop(f.harness);
    monitor.await;
    let stored = store.fetch_turn(&session.id, &turn.id).await.unwrap().unwrap();
    assert_eq!(stored.result.and_then(|r| r.ended_by), Some(EndCause::HarnessShutdown));
}

#[tokio::test]
async fn await_errors_become_the_one_error_with_a_kind_to_match() {
    async fn text_of(f: &Fixture, turn: &Turn) -> Result<String, Error> {
        // `?` turns an AwaitError into an Error.
        Ok(f.harness.await_turn(turn, None).await?.result.text.unwrap_or_default())
    }
    let f = Fixture::new();
    let (session, _) = f.session(opts()).await;
    let turn = f.admitted_turn(&session, "cancelled").await;
    f.harness.cancel(&turn).await.unwrap();
    let err = text_of(&f, &turn).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::TurnEnded);
    assert!(matches!(err, Error::TurnEnded(ref outcome) if outcome.status == TurnStatus::Cancelled), "{err:?}");
    assert_eq!(err.to_string(), "turn ended cancelled", "statuses read by their snake_case names");
    let err = f.harness.start_turn(&session, "", TurnOptions::new()).await.unwrap_err();
    assert_eq!((err.kind(), err.kind().as_str()), (ErrorKind::InvalidOption, "invalid_option"));
    f.harness.stop_session(&session, true).await.unwrap();
    let err = f.harness.status(&session).await.unwrap_err();
    assert!(err.to_string().ends_with("closed (forced_stop)"), "{err}");
}
