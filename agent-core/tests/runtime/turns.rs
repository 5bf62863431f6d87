//! Starting turns: admission, rejection, uncertainty, one active turn, call timeouts.

use std::sync::Arc;
use std::time::Duration;

use agent_core::testing::{CallBehavior, Frame, Recorded, ScriptedSession};
use agent_core::*;
use futures::StreamExt;

use crate::common::*;

#[tokio::test]
async fn a_turn_is_recorded_then_admitted_then_completed() {
    let f = Fixture::new();
    let (session, remote) = f.session(opts()).await;
    let mut events = f.harness.subscribe(&session, Replay::Latest).await.unwrap();
    let turn = f
        .harness
        .start_turn(&session, "Implement it", TurnOptions::new().metadata("work_item", "issue-123"))
        .await
        .unwrap();
    assert_eq!(turn.status, TurnStatus::Starting);
    assert_eq!(turn.session_id, session.id);
    assert_eq!(turn.metadata["work_item"], "issue-123");
    let stored = f.dyn_store().fetch_turn(&session.id, &turn.id).await.unwrap();
    assert!(stored.is_some(), "the turn is checkpointed before start_turn returns");

    let started = next(&mut events).await;
    assert!(
        matches!(&started.kind, EventKind::TurnStarted { provider_turn_id: Some(p) } if *p == format!("p-{}", turn.id))
    );
    assert_eq!(started.turn_id.as_ref(), Some(&turn.id));
    assert!(
        matches!(remote.commands()[0], Recorded::StartTurn { ref turn, .. } if *turn == started.turn_id.clone().unwrap())
    );
    assert_eq!(f.harness.status(&session).await.unwrap().current_turn.map(|t| t.status), Some(TurnStatus::Running));

    remote.delta(&turn.id, "done").await;
    remote.complete(&turn.id, "done").await;
    assert_eq!(next(&mut events).await.type_name(), "message_delta");
    let done = next(&mut events).await;
    assert_eq!(done.type_name(), "turn_completed");
    assert!(done.seq > started.seq);
    let status = f.harness.status(&session).await.unwrap();
    assert_eq!(status.status, SessionState::Idle);
    assert!(status.current_turn.is_none());
    let stored = f.dyn_store().fetch_turn(&session.id, &turn.id).await.unwrap().unwrap();
    assert_eq!(stored.status, TurnStatus::Completed);
    assert_eq!(stored.result.and_then(|r| r.text).as_deref(), Some("done"));
}

#[tokio::test]
async fn a_second_turn_while_one_is_active_is_turn_in_progress() {
    let f = Fixture::new();
    let (session, remote) = f.session(opts()).await;
    let first = f.admitted_turn(&session, "first").await;
    let err = f.harness.start_turn(&session, "second", TurnOptions::new()).await.unwrap_err();
    assert!(matches!(err, Error::TurnInProgress { ref current } if current.id == first.id), "{err:?}");
    remote.complete(&first.id, "ok").await;
    f.harness.await_turn(&first, None).await.unwrap();
    f.admitted_turn(&session, "second").await;
}

#[tokio::test]
async fn different_sessions_run_turns_concurrently() {
    let f = Fixture::new();
    let (a, remote_a) = f.session(opts()).await;
    let (b, remote_b) = f.session(opts()).await;
    let turn_a = f.admitted_turn(&a, "a").await;
    let turn_b = f.admitted_turn(&b, "b").await;
    remote_b.complete(&turn_b.id, "b done").await;
    remote_a.complete(&turn_a.id, "a done").await;
    assert_eq!(f.harness.await_turn(&turn_a, None).await.unwrap().result.text.as_deref(), Some("a done"));
    assert_eq!(f.harness.await_turn(&turn_b, None).await.unwrap().result.text.as_deref(), Some("b done"));
}

#[tokio::test]
async fn a_definite_rejection_fails_the_turn_and_leaves_the_session_idle() {
    let f = Fixture::new();
    let (session, _) = f.session(opts()).await;
    f.control.push_admission(CallBehavior::Reject("model not allowed".into()));
    let turn = f.harness.start_turn(&session, "go", TurnOptions::new()).await.unwrap();
    let outcome = f.harness.await_turn(&turn, None).await.unwrap_err();
    match outcome {
        AwaitError::Ended(outcome) => {
            assert_eq!(outcome.status, TurnStatus::Failed);
            assert!(outcome.result.reason.unwrap().contains("model not allowed"));
        }
        other => panic!("expected a failed turn, got {other:?}"),
    }
    assert_eq!(f.harness.status(&session).await.unwrap().status, SessionState::Idle);
    f.admitted_turn(&session, "again").await;
}

#[tokio::test(start_paused = true)]
async fn an_admission_timeout_fails_the_turn_and_retires_the_session() {
    let f = Fixture::new();
    let (session, remote) = f.session(opts().turn_start_timeout(Duration::from_secs(5))).await;
    f.control.push_admission(CallBehavior::Hang);
    let monitor = f.harness.monitor(&session).await.unwrap();
    let mut events = f.harness.subscribe(&session, Replay::Latest).await.unwrap();
    let turn = f.harness.start_turn(&session, "go", TurnOptions::new()).await.unwrap();
    let failed = next(&mut events).await;
    match &failed.kind {
        EventKind::TurnFailed(end) => assert!(end.result.reason.as_deref().unwrap().contains("uncertain"), "{end:?}"),
        other => panic!("expected turn_failed, got {other:?}"),
    }
    assert_eq!(failed.turn_id.as_ref(), Some(&turn.id));
    let reason = monitor.await;
    assert!(matches!(reason, ExitReason::Retired { ref reason } if reason.contains("turn admission")), "{reason:?}");
    assert!(remote.is_closed(), "the provider session was closed");
    let stored = f.dyn_store().fetch_session(&session.id).await.unwrap().unwrap();
    assert_eq!(stored.status, SessionState::Closed);
    assert!(matches!(stored.ended, Some(ExitReason::Retired { .. })), "{:?}", stored.ended);
    assert!(f.harness.list_sessions().is_empty());
}

#[tokio::test]
async fn a_broken_transport_during_admission_is_uncertain_too() {
    let f = Fixture::new();
    let (session, _) = f.session(opts()).await;
    f.control.push_admission(CallBehavior::Break("stdin closed".into()));
    let monitor = f.harness.monitor(&session).await.unwrap();
    let turn = f.harness.start_turn(&session, "go", TurnOptions::new()).await.unwrap();
    assert!(matches!(monitor.await, ExitReason::Retired { .. }));
    let outcome = f.harness.await_turn(&turn, None).await.unwrap_err();
    assert!(matches!(outcome, AwaitError::Ended(ref o) if o.status == TurnStatus::Failed), "{outcome:?}");
}

#[tokio::test(start_paused = true)]
async fn frames_sent_before_admission_completes_are_ordered_after_turn_started() {
    let f = Fixture::new();
    let (session, remote) = f.session(opts()).await;
    f.control.push_admission(CallBehavior::Delay(Duration::from_secs(1)));
    let turn = f.harness.start_turn(&session, "go", TurnOptions::new()).await.unwrap();
    // The provider streams before its admission reply (Codex can do this).
    remote.delta(&turn.id, "early").await;
    remote.complete(&turn.id, "early").await;
    let outcome = f.harness.await_turn(&turn, None).await.unwrap();
    assert_eq!(outcome.result.text.as_deref(), Some("early"));
    let types = drain_types(f.harness.subscribe(&turn, Replay::Start).await.unwrap()).await;
    assert_eq!(types, ["turn_started", "message_delta", "turn_completed"]);
}

#[tokio::test]
async fn frames_for_an_old_turn_are_dropped() {
    let f = Fixture::new();
    let (session, remote) = f.session(opts()).await;
    let first = f.admitted_turn(&session, "one").await;
    remote.complete(&first.id, "one").await;
    f.harness.await_turn(&first, None).await.unwrap();
    let second = f.admitted_turn(&session, "two").await;
    remote.delta(&first.id, "late frame").await;
    remote.complete(&first.id, "late terminal").await;
    remote.complete(&second.id, "two").await;
    f.harness.await_turn(&second, None).await.unwrap();
    let all = drain_types(f.harness.subscribe(&first, Replay::Start).await.unwrap()).await;
    assert_eq!(all, ["turn_started", "turn_completed"], "nothing was added to the finished turn");
}

#[tokio::test]
async fn a_caller_chosen_turn_id_cannot_be_used_twice() {
    let f = Fixture::new();
    let (session, remote) = f.session(opts()).await;
    let id = TurnId::from_string("turn-issue-7");
    let turn = f.harness.start_turn(&session, "one", TurnOptions::new().id(id.clone())).await.unwrap();
    assert_eq!(turn.id, id);
    remote.complete(&id, "ok").await;
    f.harness.await_turn(&turn, None).await.unwrap();
    let err = f.harness.start_turn(&session, "two", TurnOptions::new().id(id.clone())).await.unwrap_err();
    assert!(matches!(err, Error::TurnIdAlreadyUsed { ref turn_id } if *turn_id == id), "{err:?}");
}

#[tokio::test]
async fn empty_input_is_refused() {
    let f = Fixture::new();
    let (session, remote) = f.session(opts()).await;
    let err = f.harness.start_turn(&session, "  ", TurnOptions::new()).await.unwrap_err();
    assert!(matches!(err, Error::InvalidOption { option: "input", .. }), "{err:?}");
    // Structured input whose items say nothing.
    let text = |t: &str| InputItem::Text { text: t.into() };
    for (items, why) in [
        (vec![], "must not be empty"),
        (vec![text(" ")], "item 0 is blank text"),
        (vec![text("look"), InputItem::ImageUrl { url: String::new() }], "item 1 is an image without a URL"),
        (vec![InputItem::Skill { name: " ".into() }], "item 0 is a skill without a name"),
        (vec![text("look"), InputItem::LocalImage { path: "shot.png".into() }], "item 1 is an image whose path"),
    ] {
        let err = f.harness.start_turn(&session, TurnInput::Items(items), TurnOptions::new()).await.unwrap_err();
        assert!(
            matches!(&err, Error::InvalidOption { option: "input", reason } if reason.starts_with(why)),
            "{why}: {err:?}"
        );
    }
    assert!(remote.commands().is_empty());
}

/// A turn's own model needs model selection, as a session's does: a provider without it would
/// run the turn on another model than the one asked for.
#[tokio::test]
async fn a_turns_model_is_refused_by_a_session_without_model_selection() {
    let f = Fixture::new();
    let caps = agent_core::testing::ScriptedProvider::default_capabilities()
        .with(Capability::ModelSelection, agent_core::Support::Unsupported);
    f.control.set_capabilities(caps);
    let (session, remote) = f.session(opts()).await;
    let before = f.harness.status(&session).await.unwrap().last_seq;
    let err = f.harness.start_turn(&session, "go", TurnOptions::new().model("other")).await.unwrap_err();
    assert!(matches!(err, Error::Unsupported { capability: Capability::ModelSelection, .. }), "{err:?}");
    assert_eq!(f.harness.status(&session).await.unwrap().last_seq, before, "no event was recorded");
    assert!(remote.commands().is_empty(), "the provider heard nothing");
}

#[tokio::test]
async fn a_scripted_turn_plays_its_frames() {
    let f = Fixture::new();
    let (session, _) = f.session(opts()).await;
    f.control.push_script([
        Frame::delta("Hel"),
        Frame::Event(EventKind::UsageUpdated(Box::new(Usage::tokens(10, 5))), Some(r#"{"usage":1}"#.into())),
        Frame::complete("Hello"),
    ]);
    let turn = f.harness.start_turn(&session, "hi", TurnOptions::new()).await.unwrap();
    f.harness.await_turn(&turn, None).await.unwrap();
    let mut events = f.harness.subscribe(&turn, Replay::Start).await.unwrap();
    next(&mut events).await;
    next(&mut events).await;
    let usage = next(&mut events).await;
    assert_eq!(usage.raw.as_ref().map(|r| r.get()), Some(r#"{"usage":1}"#), "raw JSON is kept");
}

#[tokio::test]
async fn transport_loss_fails_the_turn_and_makes_the_session_unavailable() {
    let f = Fixture::new();
    let (session, remote) = f.session(opts()).await;
    let turn = f.admitted_turn(&session, "go").await;
    let mut events = f.harness.subscribe(&session, Replay::Latest).await.unwrap();
    remote.transport_down("codex exited with status 1").await;
    let error = next(&mut events).await;
    assert!(matches!(&error.kind, EventKind::TransportError { reason } if reason.contains("status 1")));
    assert_eq!(error.turn_id.as_ref(), Some(&turn.id));
    assert_eq!(next(&mut events).await.type_name(), "turn_failed");
    let status = f.harness.status(&session).await.unwrap();
    assert_eq!(status.status, SessionState::Unavailable);
    let err = f.harness.start_turn(&session, "again", TurnOptions::new()).await.unwrap_err();
    assert!(matches!(err, Error::SessionUnavailable { .. }), "{err:?}");
    assert!(matches!(f.harness.capabilities(&session).await, Err(Error::SessionUnavailable { .. })));
    f.harness.stop_session(&session, false).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_local_call_timeout_returns_the_turn_handle_for_reconciliation() {
    let (f, store) = Fixture::controlled();
    let (session, _) = f.session(opts()).await;
    store.set(WriteMode::Hang);
    let id = TurnId::from_string("reconcile-me");
    let err = f
        .harness
        .start_turn(&session, "go", TurnOptions::new().id(id.clone()).call_timeout(Duration::from_secs(2)))
        .await
        .unwrap_err();
    match err {
        Error::SessionCallTimeout { turn, timeout } => {
            assert_eq!(turn.id, id, "the error keeps the handle");
            assert_eq!(timeout, Duration::from_secs(2));
        }
        other => panic!("expected a call timeout, got {other:?}"),
    }
    // Not proof of rejection: the session did record the turn.
    let status = f.harness.status(&session).await.unwrap();
    assert_eq!(status.current_turn.map(|t| t.id), Some(id));
}

#[tokio::test]
async fn a_crashed_provider_callback_is_uncertain_and_retires_the_session() {
    let f = Fixture::new();
    let (session, _) = f.session(opts()).await;
    f.control.push_admission(CallBehavior::Panic("adapter bug".into()));
    let monitor = f.harness.monitor(&session).await.unwrap();
    let turn = f.harness.start_turn(&session, "go", TurnOptions::new()).await.unwrap();
    let reason = monitor.await;
    assert!(matches!(reason, ExitReason::Retired { ref reason } if reason.contains("panicked")), "{reason:?}");
    let outcome = f.harness.await_turn(&turn, None).await.unwrap_err();
    assert!(matches!(outcome, AwaitError::Ended(ref o) if o.status == TurnStatus::Failed), "{outcome:?}");
}

#[tokio::test]
async fn the_turn_handle_carries_its_input_and_starts_in_starting() {
    let f = Fixture::new();
    let (session, _) = f.session(opts()).await;
    let input = TurnInput::Items(vec![
        InputItem::Text { text: "Describe this".into() },
        InputItem::ImageUrl { url: "data:image/png;base64,AAAA".into() },
    ]);
    let turn = f.harness.start_turn(&session, input.clone(), TurnOptions::new()).await.unwrap();
    assert_eq!(turn.input, input);
    assert_eq!(turn.status, TurnStatus::Starting);
    assert_eq!(turn.input.text(), "Describe this");
}

#[tokio::test]
async fn steering_adds_input_to_a_running_turn_where_the_provider_supports_it() {
    let f = Fixture::new();
    f.control.set_capabilities(
        agent_core::testing::ScriptedProvider::default_capabilities().with(Capability::Steer, Support::Native),
    );
    let (session, remote) = f.session(opts()).await;
    let turn = f.admitted_turn(&session, "start").await;
    f.harness.steer(&turn, "also update the docs").await.unwrap();
    assert!(
        remote.commands().contains(&Recorded::Steer { turn: turn.id.clone(), input: "also update the docs".into() })
    );
    remote.complete(&turn.id, "done").await;
    f.harness.await_turn(&turn, None).await.unwrap();
    let err = f.harness.steer(&turn, "too late").await.unwrap_err();
    assert!(matches!(err, Error::TurnNotActive { .. }), "{err:?}");

    let f = Fixture::new();
    let (session, _) = f.session(opts()).await;
    let turn = f.admitted_turn(&session, "start").await;
    let err = f.harness.steer(&turn, "more").await.unwrap_err();
    assert!(matches!(err, Error::Unsupported { capability: Capability::Steer, .. }), "{err:?}");
}

#[tokio::test]
async fn a_steer_is_refused_input_its_turn_could_not_take() {
    let f = Fixture::new();
    let caps = agent_core::testing::ScriptedProvider::default_capabilities()
        .with(Capability::Steer, Support::Native)
        .with(Capability::Images, Support::Unsupported);
    f.control.set_capabilities(caps);
    let (session, remote) = f.session(opts()).await;
    let turn = f.admitted_turn(&session, "start").await;
    let input = vec![InputItem::Text { text: "and".into() }, InputItem::LocalImage { path: "/tmp/x.png".into() }];
    let err = f.harness.steer(&turn, input).await.unwrap_err();
    assert!(matches!(err, Error::Unsupported { capability: Capability::Images, .. }), "{err:?}");
    // Input `start_turn` refuses is refused here too.
    for input in [TurnInput::from("  "), TurnInput::Items(vec![InputItem::Text { text: " ".into() }])] {
        let err = f.harness.steer(&turn, input).await.unwrap_err();
        assert!(matches!(err, Error::InvalidOption { option: "input", .. }), "{err:?}");
    }
    assert!(!remote.commands().iter().any(|c| matches!(c, Recorded::Steer { .. })), "nothing reached the provider");
}

#[tokio::test(start_paused = true)]
async fn a_transport_loss_before_the_admission_result_keeps_what_the_provider_already_reported() {
    let f = Fixture::new();
    let (session, remote) = f.session(opts()).await;
    f.control.push_admission(CallBehavior::Delay(Duration::from_secs(5)));
    let turn = f.harness.start_turn(&session, "quick", TurnOptions::new()).await.unwrap();
    // A CLI that answers and exits before its admission reply is read.
    remote.delta(&turn.id, "all").await;
    remote.complete(&turn.id, "all done").await;
    remote.transport_down("codex exited (exit code 0)").await;
    let outcome = f.harness.await_turn(&turn, None).await.unwrap();
    assert_eq!(outcome.result.text.as_deref(), Some("all done"), "the provider's own terminal event stands");
    let events = f.harness.subscribe(&session, Replay::After(1)).await.unwrap();
    let types: Vec<_> = events.take(4).map(|e| e.unwrap().type_name()).collect().await;
    assert_eq!(types, ["turn_started", "message_delta", "turn_completed", "transport_error"]);
    assert_eq!(f.harness.status(&session).await.unwrap().status, SessionState::Unavailable);
}

/// A session whose running turn has a steer the provider never answers; returns the pending
/// steer once the session has taken it.
async fn hung_steer(f: &Fixture) -> (SessionRef, ScriptedSession, tokio::task::JoinHandle<Result<()>>) {
    let (session, remote) = f.session(opts()).await;
    let turn = f.admitted_turn(&session, "start").await;
    f.control.push_steer(CallBehavior::Hang);
    let harness = f.harness.clone();
    let steering = tokio::spawn(async move { harness.steer(&turn, "more").await });
    tokio::task::yield_now().await;
    // Commands are handled in order: once this answers, the steer is in flight.
    f.harness.status(&session).await.unwrap();
    (session, remote, steering)
}

#[tokio::test(start_paused = true)]
async fn a_steer_in_flight_gets_a_definite_answer_when_the_transport_goes_down_or_the_session_stops() {
    let f = Fixture::new();
    f.control.set_capabilities(
        agent_core::testing::ScriptedProvider::default_capabilities().with(Capability::Steer, Support::Native),
    );
    let (_, remote, steering) = hung_steer(&f).await;
    remote.transport_down("gone").await;
    let err = steering.await.unwrap().unwrap_err();
    assert!(matches!(err, Error::SessionUnavailable { .. }), "{err:?}");

    let (session, _, steering) = hung_steer(&f).await;
    f.harness.stop_session(&session, true).await.unwrap();
    let err = steering.await.unwrap().unwrap_err();
    assert!(matches!(err, Error::SessionDown { reason: ExitReason::Closed { .. }, .. }), "{err:?}");
}

#[tokio::test]
async fn structured_input_the_provider_cannot_take_is_refused_before_recording() {
    let f = Fixture::new();
    let caps =
        agent_core::testing::ScriptedProvider::default_capabilities().with(Capability::Images, Support::Unsupported);
    f.control.set_capabilities(caps);
    let (session, remote) = f.session(opts()).await;
    let input = vec![InputItem::Text { text: "look".into() }, InputItem::LocalImage { path: "/tmp/x.png".into() }];
    let err = f.harness.start_turn(&session, input, TurnOptions::new()).await.unwrap_err();
    assert!(matches!(err, Error::Unsupported { capability: Capability::Images, .. }), "{err:?}");
    assert!(remote.commands().is_empty());
    assert_eq!(f.harness.status(&session).await.unwrap().status, SessionState::Idle);
}

/// Starts a turn whose admission is in flight when the transport goes down, and returns the
/// event types that follow `subscribe(Latest)` until the session is unavailable.
async fn transport_lost_during_admission(admission: CallBehavior) -> (Vec<Arc<Event>>, SessionState) {
    let f = Fixture::new();
    let (session, remote) = f.session(opts()).await;
    f.control.push_admission(admission);
    let mut events = f.harness.subscribe(&session, Replay::Latest).await.unwrap();
    f.harness.start_turn(&session, "go", TurnOptions::new()).await.unwrap();
    while !remote.commands().iter().any(|c| matches!(c, Recorded::StartTurn { .. })) {
        tokio::task::yield_now().await;
    }
    remote.transport_down("codex exited (exit code 1)").await;
    let mut seen = Vec::new();
    while seen.len() < 3 {
        let event = next(&mut events).await;
        let done = event.type_name() == "transport_error" && seen.iter().any(|e: &Arc<Event>| e.is_terminal());
        seen.push(event);
        if done {
            break;
        }
    }
    (seen, f.harness.status(&session).await.unwrap().status)
}

#[tokio::test(start_paused = true)]
async fn a_transport_lost_while_an_admission_succeeds_is_told_after_turn_started() {
    let (events, status) = transport_lost_during_admission(CallBehavior::Delay(Duration::from_secs(1))).await;
    let types: Vec<_> = events.iter().map(|e| e.type_name()).collect();
    assert_eq!(types, ["turn_started", "transport_error", "turn_failed"]);
    assert_eq!(status, SessionState::Unavailable);
}

#[tokio::test(start_paused = true)]
async fn a_transport_lost_while_an_admission_is_rejected_is_told_after_turn_failed() {
    let rejected = CallBehavior::After(Duration::from_secs(1), Box::new(CallBehavior::Reject("model unknown".into())));
    let (events, status) = transport_lost_during_admission(rejected).await;
    let types: Vec<_> = events.iter().map(|e| e.type_name()).collect();
    assert_eq!(types, ["turn_failed", "transport_error"]);
    match &events[0].kind {
        EventKind::TurnFailed(end) => assert!(end.result.reason.as_deref().unwrap().contains("rejected"), "{end:?}"),
        other => panic!("expected turn_failed, got {other:?}"),
    }
    assert_eq!(status, SessionState::Unavailable);
}

#[tokio::test]
async fn without_a_store_a_caller_chosen_turn_id_is_never_reused_even_after_eviction() {
    let f = Fixture::new();
    let options =
        opts().store(StoreChoice::Disabled).completed_turn_cache_size(CacheSize::Bounded(0)).event_buffer_size(2);
    let (session, _) = f.session(options).await;
    let id = TurnId::new("step-1").unwrap();
    f.control.push_script([Frame::complete("one")]);
    let first = f.harness.start_turn(&session, "1", TurnOptions::new().id(id.clone())).await.unwrap();
    f.harness.await_turn(&first, None).await.unwrap();
    f.control.push_script([Frame::delta("a"), Frame::delta("b"), Frame::complete("two")]);
    let second = f.harness.start_turn(&session, "2", TurnOptions::new()).await.unwrap();
    f.harness.await_turn(&second, None).await.unwrap();
    let err = f.harness.await_turn(&first, None).await.unwrap_err();
    assert!(matches!(err, AwaitError::Failed(Error::ReplayUnavailable { .. })), "its history is gone: {err:?}");
    let err = f.harness.start_turn(&session, "again", TurnOptions::new().id(id)).await.unwrap_err();
    assert!(matches!(err, Error::TurnIdAlreadyUsed { .. }), "{err:?}");
}

#[tokio::test]
async fn malformed_caller_turn_ids_models_and_options_are_refused_and_nothing_is_recorded() {
    let f = Fixture::new();
    let (session, remote) = f.session(opts()).await;
    let before = f.harness.status(&session).await.unwrap().last_seq;
    for bad in ["", "   ", "has space", "tab\there"] {
        let options = TurnOptions::new().id(TurnId::from_string(bad));
        let err = f.harness.start_turn(&session, "go", options).await.unwrap_err();
        assert!(matches!(err, Error::InvalidTurnId { ref id, .. } if id == bad), "{bad:?}: {err:?}");
    }
    // An empty model, as a session's would be.
    for model in ["", "  "] {
        let err = f.harness.start_turn(&session, "go", TurnOptions::new().model(model)).await.unwrap_err();
        assert!(matches!(err, Error::InvalidOption { option: "model", .. }), "{model:?}: {err:?}");
    }
    // A call that may not wait at all.
    let zero = TurnOptions::new().call_timeout(std::time::Duration::ZERO);
    let err = f.harness.start_turn(&session, "go", zero).await.unwrap_err();
    assert!(matches!(err, Error::InvalidOption { option: "call_timeout", .. }), "{err:?}");
    // Options wrapped where no provider looks them up.
    let wrapped = TurnOptions::new().provider_option(std::sync::Arc::new(TurnOptions::new()));
    let err = f.harness.start_turn(&session, "go", wrapped).await.unwrap_err();
    assert!(matches!(err, Error::InvalidOption { option: "provider_options", .. }), "{err:?}");
    assert_eq!(f.harness.status(&session).await.unwrap().last_seq, before, "no event was recorded");
    assert!(f.dyn_store().list_turns(&session.id).await.unwrap().is_empty(), "no turn was stored");
    assert!(remote.commands().is_empty(), "the provider heard nothing");
}
