//! Questions and approvals: exactly-once responses, validation, expiry.

use std::time::Duration;

use agent_core::request::{ProviderRef, RequestSpec};
use agent_core::testing::{CallBehavior, Recorded, ScriptedSession};
use agent_core::*;

use crate::common::*;

fn approval(provider_ref: &str) -> RequestSpec {
    RequestSpec::new(RequestKind::CommandApproval, "Run `touch x`?", provider_ref).meta("command", "touch x")
}

fn questions(provider_ref: &str) -> RequestSpec {
    RequestSpec::new(RequestKind::Question, "Which database?", provider_ref).questions([
        Question::new("database", "Which database?").with_choices([Choice::new("Postgres"), Choice::new("SQLite")]),
        Question::new("region", "Which region?"),
    ])
}

/// A running turn with one pending request; returns the request.
async fn pending(f: &Fixture, session: &SessionRef, remote: &ScriptedSession, spec: RequestSpec) -> (Turn, Request) {
    let turn = f.admitted_turn(session, "work").await;
    let mut events = f.harness.subscribe(&turn, Replay::Latest).await.unwrap();
    remote.request(&turn.id, spec).await;
    let request = request_of(&next_of(&mut events, "request_created").await);
    (turn, request)
}

#[tokio::test]
async fn a_question_is_answered_once_and_the_turn_resumes() {
    let f = Fixture::new();
    let (session, remote) = f.session(opts()).await;
    let (turn, request) = pending(
        &f,
        &session,
        &remote,
        RequestSpec::new(RequestKind::Question, "Which database?", "q1")
            .questions([Question::new("database", "Which database?")]),
    )
    .await;
    assert_eq!(request.kind, RequestKind::Question);
    assert_eq!(request.status, RequestStatus::Pending);
    assert_eq!(request.session_id, session.id);
    assert_eq!(request.turn_id, turn.id);
    let status = f.harness.status(&session).await.unwrap();
    assert_eq!(status.status, SessionState::AwaitingInput);
    assert_eq!(status.pending_requests.iter().map(|r| &r.id).collect::<Vec<_>>(), [&request.id]);

    let mut events = f.harness.subscribe(&turn, Replay::Latest).await.unwrap();
    f.harness.respond(&request, Response::answer("Postgres")).await.unwrap();
    let resolved = next(&mut events).await;
    assert!(matches!(&resolved.kind, EventKind::RequestResolved { request_id, .. } if *request_id == request.id));
    assert_eq!(remote.responses(), [Response::answer("Postgres")]);
    let status = f.harness.status(&session).await.unwrap();
    assert_eq!(status.status, SessionState::Running);
    assert!(status.pending_requests.is_empty());
    let stored = f.dyn_store().fetch_request(&session.id, &request.id).await.unwrap().unwrap();
    assert_eq!(stored.status, RequestStatus::Resolved);
    assert_eq!(stored.response, Some(Response::answer("Postgres")));

    let again = f.harness.respond(&request, Response::answer("SQLite")).await.unwrap_err();
    assert!(matches!(again, Error::AlreadyResolved { .. }), "{again:?}");
    assert_eq!(remote.responses().len(), 1, "the provider saw one answer");
}

#[tokio::test]
async fn several_questions_are_answered_with_a_map_keyed_by_question_id() {
    let f = Fixture::new();
    let (session, remote) = f.session(opts()).await;
    let (_, request) = pending(&f, &session, &remote, questions("q2")).await;
    assert_eq!(request.questions.iter().map(|q| q.id.as_str()).collect::<Vec<_>>(), ["database", "region"]);
    assert_eq!(request.questions[0].choices.len(), 2);

    let missing = f.harness.respond(&request, Response::answers([("database", "Postgres")])).await.unwrap_err();
    assert!(matches!(missing, Error::MissingAnswer { ref question_id } if question_id == "region"), "{missing:?}");
    let scalar = f.harness.respond(&request, Response::answer("Postgres")).await.unwrap_err();
    assert!(matches!(scalar, Error::InvalidResponse(_)), "{scalar:?}");
    assert!(remote.responses().is_empty(), "nothing reached the provider");
    assert_eq!(f.harness.status(&session).await.unwrap().pending_requests.len(), 1, "still pending");

    let answers = Response::answers([("database", "Postgres"), ("region", "us-east-1")]);
    f.harness.respond(&request, answers.clone()).await.unwrap();
    assert_eq!(remote.responses(), [answers]);
}

#[tokio::test]
async fn a_response_of_the_wrong_kind_is_refused_and_changes_nothing() {
    let f = Fixture::new();
    let (session, remote) = f.session(opts()).await;
    let (_, request) = pending(&f, &session, &remote, approval("a1")).await;
    let err = f.harness.respond(&request, Response::answer("yes")).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::ResponseKindMismatch {
                kind: RequestKind::CommandApproval,
                action: agent_core::request::ResponseAction::Answer
            }
        ),
        "{err:?}"
    );
    let err = f.harness.respond(&request, Response::approve_with(Scope::Session)).await.unwrap_err();
    assert!(matches!(err, Error::UnsupportedScope { scope: Scope::Session }), "{err:?}");
    assert!(remote.responses().is_empty());
    f.harness.respond(&request, Response::approve()).await.unwrap();
    assert_eq!(remote.responses(), [Response::approve()]);
}

#[tokio::test(start_paused = true)]
async fn concurrent_responses_have_exactly_one_winner() {
    let f = Fixture::new();
    let (session, remote) = f.session(opts()).await;
    let (_, request) = pending(&f, &session, &remote, approval("a2")).await;
    f.control.push_respond(CallBehavior::Delay(Duration::from_secs(1)));
    let (a, b) = tokio::join!(
        f.harness.respond(&request, Response::approve()),
        f.harness.respond(&request, Response::deny("no")),
    );
    let results = [a, b];
    assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 1, "{results:?}");
    assert!(results.iter().any(|r| matches!(r, Err(Error::ResponseInProgress { .. }))), "{results:?}");
    assert_eq!(remote.responses().len(), 1, "the provider got exactly one answer");
    let later = f.harness.respond(&request, Response::approve()).await.unwrap_err();
    assert!(matches!(later, Error::AlreadyResolved { .. }), "{later:?}");
}

#[tokio::test]
async fn a_response_after_the_turn_ended_is_expired() {
    let f = Fixture::new();
    let (session, remote) = f.session(opts()).await;
    let (turn, request) = pending(&f, &session, &remote, approval("a3")).await;
    let mut events = f.harness.subscribe(&turn, Replay::Latest).await.unwrap();
    remote.complete(&turn.id, "finished without asking again").await;
    let expired = next(&mut events).await;
    assert!(matches!(&expired.kind, EventKind::RequestExpired { reason: ExpiryReason::TurnEnded, .. }), "{expired:?}");
    assert!(next(&mut events).await.is_terminal(), "requests expire before the terminal event");
    let err = f.harness.respond(&request, Response::approve()).await.unwrap_err();
    assert!(matches!(err, Error::RequestExpired { .. }), "{err:?}");
    let stored = f.dyn_store().fetch_request(&session.id, &request.id).await.unwrap().unwrap();
    assert_eq!(stored.status, RequestStatus::Expired);
}

#[tokio::test]
async fn answering_a_request_through_another_session_is_refused() {
    let f = Fixture::new();
    let (session, remote) = f.session(opts()).await;
    let (other, _) = f.session(opts()).await;
    let (_, request) = pending(&f, &session, &remote, approval("a4")).await;
    let mut forged = request.clone();
    forged.session_id = other.id.clone();
    let err = f.harness.respond(&forged, Response::approve()).await.unwrap_err();
    assert!(matches!(err, Error::RequestNotFound { ref session_id, .. } if *session_id == other.id), "{err:?}");
    assert!(remote.responses().is_empty());
    f.harness.respond(&request, Response::approve()).await.unwrap();
}

#[tokio::test]
async fn a_definite_provider_rejection_releases_the_claim_for_a_retry() {
    let f = Fixture::new();
    let (session, remote) = f.session(opts()).await;
    let (_, request) = pending(&f, &session, &remote, approval("a5")).await;
    f.control.push_respond(CallBehavior::Reject("decision not offered".into()));
    let err = f.harness.respond(&request, Response::approve()).await.unwrap_err();
    assert!(matches!(err, Error::ProviderRejected { .. }), "{err:?}");
    assert_eq!(f.harness.status(&session).await.unwrap().pending_requests.len(), 1);
    f.harness.respond(&request, Response::deny("no")).await.unwrap();
    assert_eq!(remote.responses(), [Response::deny("no")]);
}

/// An answer whose delivery failed because the CLI exited: the provider's report of the exit
/// ends the turn (with how the CLI exited), and the session is not retired as if the answer's
/// fate were unknown.
#[tokio::test(start_paused = true)]
async fn an_answer_the_cli_exit_cut_short_ends_the_turn_as_the_provider_reports() {
    let f = Fixture::new();
    let timeout = Duration::from_secs(4);
    let (session, remote) =
        f.session(opts().provider_command_timeout(timeout).request_timeout(Duration::from_secs(1))).await;
    let (turn, request) = pending(&f, &session, &remote, approval("a7")).await;
    f.control.push_respond(CallBehavior::Break("broken pipe".into()));
    let err = f.harness.respond(&request, Response::approve()).await.unwrap_err();
    assert!(matches!(err, Error::Transport { .. }), "{err:?}");
    // The agent may have that answer: no other one goes out, by the caller or the deadline.
    let again = f.harness.respond(&request, Response::deny("no")).await.unwrap_err();
    assert!(matches!(again, Error::ResponseInProgress { .. }), "{again:?}");
    tokio::time::sleep(timeout - Duration::from_millis(10)).await;
    assert_eq!(remote.responses(), [], "no other answer went out after the uncertain one");
    let mut exited = TurnResult::reason("the CLI exited with status 3");
    exited.ended_by = Some(EndCause::TransportLost);
    remote.emit(&turn.id, EventKind::terminal(TurnStatus::Failed, exited)).await;
    let outcome = f.harness.await_turn(&turn, None).await.unwrap_err();
    assert!(
        matches!(outcome, AwaitError::Ended(ref o) if o.result.ended_by == Some(EndCause::TransportLost)
            && o.result.reason.as_deref() == Some("the CLI exited with status 3")),
        "{outcome:?}"
    );
    let expired = f.harness.status(&session).await.unwrap();
    assert!(expired.pending_requests.is_empty(), "the unanswered request ended with its turn");
    tokio::time::sleep(timeout).await;
    assert_eq!(f.harness.status(&session).await.unwrap().status, SessionState::Idle, "not retired");
}

/// An answer whose delivery failed on the transport, and no word from the provider after it
/// within `provider_command_timeout`: whether the agent has it is unknown, and the session
/// retires.
#[tokio::test(start_paused = true)]
async fn an_uncertain_response_retires_the_session() {
    let f = Fixture::new();
    let timeout = Duration::from_secs(4);
    let (session, remote) = f.session(opts().provider_command_timeout(timeout)).await;
    let (turn, request) = pending(&f, &session, &remote, approval("a6")).await;
    f.control.push_respond(CallBehavior::Break("broken pipe".into()));
    let monitor = f.harness.monitor(&session).await.unwrap();
    let err = f.harness.respond(&request, Response::approve()).await.unwrap_err();
    assert!(matches!(err, Error::Transport { .. }), "{err:?}");
    let started = tokio::time::Instant::now();
    assert!(matches!(monitor.await, ExitReason::Retired { ref reason } if reason.contains("uncertain")));
    assert_eq!(started.elapsed(), timeout, "retired once the provider had its time to report");
    let outcome = f.harness.await_turn(&turn, None).await.unwrap_err();
    assert!(matches!(outcome, AwaitError::Ended(ref o) if o.status == TurnStatus::Failed), "{outcome:?}");
}

#[tokio::test(start_paused = true)]
async fn a_response_that_never_returns_times_out_and_retires_the_session() {
    let f = Fixture::new();
    let (session, remote) = f.session(opts().provider_command_timeout(Duration::from_secs(7))).await;
    let (_, request) = pending(&f, &session, &remote, approval("a7")).await;
    f.control.push_respond(CallBehavior::Hang);
    let monitor = f.harness.monitor(&session).await.unwrap();
    let started = tokio::time::Instant::now();
    let err = f.harness.respond(&request, Response::approve()).await.unwrap_err();
    assert!(matches!(err, Error::Timeout { operation: "respond", .. }), "{err:?}");
    assert_eq!(started.elapsed(), Duration::from_secs(7));
    assert!(matches!(monitor.await, ExitReason::Retired { .. }));
}

#[tokio::test(start_paused = true)]
async fn an_unanswered_request_times_out_the_provider_is_told_no_and_later_answers_are_expired() {
    let f = Fixture::new();
    let (session, remote) = f.session(opts().request_timeout(Duration::from_secs(60))).await;
    let (turn, request) = pending(&f, &session, &remote, approval("a8")).await;
    assert!(request.expires_at.is_some());
    let mut events = f.harness.subscribe(&turn, Replay::Latest).await.unwrap();
    let expired = next(&mut events).await;
    assert!(matches!(&expired.kind, EventKind::RequestExpired { reason: ExpiryReason::Timeout, .. }), "{expired:?}");
    assert_eq!(remote.responses(), [Response::deny("the request timed out")], "no answer means deny");
    let err = f.harness.respond(&request, Response::approve()).await.unwrap_err();
    assert!(matches!(err, Error::RequestExpired { .. }), "{err:?}");
    assert_eq!(f.harness.status(&session).await.unwrap().status, SessionState::Running);
}

#[tokio::test]
async fn a_request_the_provider_resolves_by_itself_expires() {
    let f = Fixture::new();
    let (session, remote) = f.session(opts()).await;
    let (turn, request) = pending(&f, &session, &remote, approval("a9")).await;
    let mut events = f.harness.subscribe(&turn, Replay::Latest).await.unwrap();
    remote.request_resolved("a9").await;
    let expired = next(&mut events).await;
    assert!(matches!(&expired.kind, EventKind::RequestExpired { reason: ExpiryReason::ProviderResolved, .. }));
    let err = f.harness.respond(&request, Response::approve()).await.unwrap_err();
    assert!(matches!(err, Error::RequestExpired { .. }), "{err:?}");
    assert_eq!(request.provider_ref, ProviderRef("a9".into()));
}

#[tokio::test]
async fn answers_to_a_stopped_session_come_from_the_store() {
    let f = Fixture::new();
    let (session, remote) = f.session(opts()).await;
    let (_, request) = pending(&f, &session, &remote, approval("a10")).await;
    f.harness.respond(&request, Response::approve()).await.unwrap();
    f.harness.stop_session(&session, true).await.unwrap();
    let err = f.harness.respond(&request, Response::approve()).await.unwrap_err();
    assert!(matches!(err, Error::AlreadyResolved { .. }), "{err:?}");
    assert!(remote.commands().iter().filter(|c| matches!(c, Recorded::Respond { .. })).count() == 1);
}

/// Without a store as with one, an answer in flight when a forced stop ends the session is
/// told the request expired with it (as `request_expired` says), not that the session is down.
#[tokio::test(start_paused = true)]
async fn an_answer_in_flight_at_a_forced_stop_is_expired_without_a_store_too() {
    for store in [true, false] {
        let f = Fixture::new();
        let options = if store { opts() } else { opts().store(StoreChoice::Disabled) };
        let (session, remote) = f.session(options).await;
        let (turn, request) = pending(&f, &session, &remote, approval("a12")).await;
        let mut events = f.harness.subscribe(&turn, Replay::Latest).await.unwrap();
        f.control.push_respond(CallBehavior::Delay(Duration::from_secs(10)));
        let harness = f.harness.clone();
        let answering = request.clone();
        let answer = tokio::spawn(async move { harness.respond(&answering, Response::approve()).await });
        tokio::time::sleep(Duration::from_secs(1)).await;
        f.harness.stop_session(&session, true).await.unwrap();
        let err = answer.await.unwrap().unwrap_err();
        assert!(matches!(err, Error::RequestExpired { .. }), "store {store}: {err:?}");
        assert_eq!(next(&mut events).await.type_name(), "request_expired", "store {store}");
    }
}

#[tokio::test]
async fn a_cancel_response_is_delivered_as_such() {
    let f = Fixture::new();
    let (session, remote) = f.session(opts()).await;
    let (_, request) = pending(&f, &session, &remote, approval("a11")).await;
    f.harness.respond(&request, Response::cancel("Stop this operation")).await.unwrap();
    assert_eq!(remote.responses(), [Response::cancel("Stop this operation")]);
}

#[tokio::test(start_paused = true)]
async fn an_answer_the_agent_acts_on_before_its_delivery_is_acknowledged_still_resolves() {
    // The CLI reads the answer and ends the turn while the delivery's acknowledgement is still on
    // its way to the session runtime (a busy machine): the request was answered, not expired.
    let f = Fixture::new();
    f.control.push_respond(CallBehavior::Delay(Duration::from_secs(1)));
    let (session, remote) = f.session(opts()).await;
    let (turn, request) = pending(&f, &session, &remote, approval("a7")).await;
    let mut events = f.harness.subscribe(&turn, Replay::Latest).await.unwrap();
    let harness = f.harness.clone();
    let answered = request.clone();
    let respond = tokio::spawn(async move { harness.respond(&answered, Response::approve()).await });
    tokio::time::sleep(Duration::from_millis(10)).await;
    remote.complete(&turn.id, "ran it").await;

    respond.await.unwrap().expect("the answer was delivered");
    assert_eq!(remote.responses(), [Response::approve()]);
    let resolved = next(&mut events).await;
    assert!(matches!(&resolved.kind, EventKind::RequestResolved { .. }), "{resolved:?}");
    let terminal = next(&mut events).await;
    assert_eq!(terminal.type_name(), "turn_completed", "the terminal event follows the resolution");
    let stored = f.dyn_store().fetch_request(&session.id, &request.id).await.unwrap().unwrap();
    assert_eq!(stored.status, RequestStatus::Resolved);
    assert!(f.harness.await_turn(&turn, None).await.is_ok());
}

#[tokio::test(start_paused = true)]
async fn a_deadline_that_passes_during_a_refused_answer_still_denies_the_request() {
    let f = Fixture::new();
    let (session, remote) = f.session(opts().request_timeout(Duration::from_secs(10))).await;
    let (turn, request) = pending(&f, &session, &remote, approval("a20")).await;
    let mut events = f.harness.subscribe(&turn, Replay::Latest).await.unwrap();
    // The provider takes 15 s to refuse the answer; the 10 s deadline passes meanwhile.
    f.control.push_respond(CallBehavior::After(Duration::from_secs(15), Box::new(CallBehavior::Reject("no".into()))));
    let err = f.harness.respond(&request, Response::approve()).await.unwrap_err();
    assert!(matches!(err, Error::ProviderRejected { .. }), "{err:?}");
    let expired = next_of(&mut events, "request_expired").await;
    assert!(matches!(&expired.kind, EventKind::RequestExpired { reason: ExpiryReason::Timeout, .. }), "{expired:?}");
    assert_eq!(remote.responses(), [Response::deny("the request timed out")], "no answer means deny");
    assert!(f.harness.status(&session).await.unwrap().pending_requests.is_empty());
    let stored = f.dyn_store().fetch_request(&session.id, &request.id).await.unwrap().unwrap();
    assert_eq!(stored.status, RequestStatus::Expired);
}

#[tokio::test(start_paused = true)]
async fn a_request_the_provider_resolved_during_a_refused_answer_is_not_left_pending() {
    let f = Fixture::new();
    let (session, remote) = f.session(opts()).await;
    let (turn, request) = pending(&f, &session, &remote, approval("a22")).await;
    let mut events = f.harness.subscribe(&turn, Replay::Latest).await.unwrap();
    // The CLI resolves the request itself while our answer is on its way, then refuses it.
    f.control.push_respond(CallBehavior::After(Duration::from_secs(1), Box::new(CallBehavior::Reject("gone".into()))));
    let answering = tokio::spawn({
        let (harness, request) = (f.harness.clone(), request.clone());
        async move { harness.respond(&request, Response::approve()).await }
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    remote.request_resolved("a22").await;
    assert!(answering.await.unwrap().is_err(), "the answer was refused");
    let expired = next_of(&mut events, "request_expired").await;
    assert!(
        matches!(&expired.kind, EventKind::RequestExpired { reason: ExpiryReason::ProviderResolved, .. }),
        "{expired:?}"
    );
    assert!(f.harness.status(&session).await.unwrap().pending_requests.is_empty());
    let stored = f.dyn_store().fetch_request(&session.id, &request.id).await.unwrap().unwrap();
    assert_eq!(stored.status, RequestStatus::Expired);
}

/// Answers a pending approval while the provider takes `delivery` over it and cancels the
/// turn meanwhile: the answer's result, the turn's event types, the stored request and what
/// the provider received.
async fn answer_during_a_cancel(delivery: CallBehavior) -> (Result<()>, Vec<&'static str>, Request, Vec<Response>) {
    let f = Fixture::new();
    let (session, remote) = f.session(opts()).await;
    let (turn, request) = pending(&f, &session, &remote, approval("a21")).await;
    let events = f.harness.subscribe(&turn, Replay::Latest).await.unwrap();
    f.control.push_respond(delivery);
    let answering = tokio::spawn({
        let (harness, request) = (f.harness.clone(), request.clone());
        async move { harness.respond(&request, Response::approve()).await }
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    f.harness.cancel(&turn).await.unwrap();
    let answered = answering.await.unwrap();
    let types = drain_types(events).await;
    let stored = f.dyn_store().fetch_request(&session.id, &request.id).await.unwrap().unwrap();
    (answered, types, stored, remote.responses())
}

#[tokio::test(start_paused = true)]
async fn an_answer_being_delivered_when_its_turn_is_cancelled_is_recorded_as_delivered() {
    let (answered, types, stored, received) =
        answer_during_a_cancel(CallBehavior::Delay(Duration::from_millis(100))).await;
    answered.expect("the answer reached the provider");
    assert_eq!(received, [Response::approve()]);
    assert!(types.contains(&"request_resolved") && !types.contains(&"request_expired"), "{types:?}");
    assert_eq!(stored.status, RequestStatus::Resolved);
}

#[tokio::test(start_paused = true)]
async fn an_answer_refused_after_its_turn_was_cancelled_expires_the_request() {
    let refused = CallBehavior::After(Duration::from_millis(100), Box::new(CallBehavior::Reject("no".into())));
    let (answered, types, stored, received) = answer_during_a_cancel(refused).await;
    assert!(matches!(answered, Err(Error::ProviderRejected { .. })), "{answered:?}");
    assert!(received.is_empty());
    assert!(types.contains(&"request_expired") && !types.contains(&"request_resolved"), "{types:?}");
    assert_eq!(stored.status, RequestStatus::Expired);
    assert_eq!(stored.metadata.get("expiration_reason"), Some(&serde_json::json!("cancelled")));
}

/// An answer that reaches a session already shutting down (its final write in flight) is told
/// what the session settled the request as, as an answer after the session ended is — not that
/// the session went down.
#[tokio::test]
async fn an_answer_sent_while_the_session_shuts_down_finds_the_request_expired() {
    let (f, store) = Fixture::controlled();
    let (session, remote) = f.session(opts()).await;
    let (_, request) = pending(&f, &session, &remote, approval("a-down")).await;

    // The forced stop expires the request; the shutdown's final write waits at the store.
    store.set(WriteMode::Gated);
    let harness = f.harness.clone();
    let stopping = session.clone();
    let stop = tokio::spawn(async move { harness.stop_session(&stopping, true).await });
    store.arrival().await;
    let harness = f.harness.clone();
    let answered = request.clone();
    let answer = tokio::spawn(async move { harness.respond(&answered, Response::approve()).await });
    tokio::task::yield_now().await;
    store.open_gate();

    let err = answer.await.unwrap().unwrap_err();
    assert!(matches!(err, Error::RequestExpired { ref request_id } if *request_id == request.id), "{err:?}");
    stop.await.unwrap().unwrap();
    assert!(remote.responses().is_empty(), "nothing reached the provider");
}

/// A forced stop while the turn's end waits for an answer's delivery ends the session there:
/// what the provider sent after that end (the end itself, a session-level warning, a new
/// provider session ID) is not recorded after `session_closed`, which stays the last event.
#[tokio::test(start_paused = true)]
async fn a_forced_stop_while_the_turns_end_waits_for_an_answer_leaves_session_closed_last() {
    let f = Fixture::new();
    let (session, remote) = f.session(opts()).await;
    let events = f.harness.subscribe(&session, Replay::Start).await.unwrap();
    let (turn, request) = pending(&f, &session, &remote, approval("a-parked")).await;
    f.control.push_respond(CallBehavior::Delay(Duration::from_secs(10)));
    let answering = tokio::spawn({
        let (harness, request) = (f.harness.clone(), request.clone());
        async move { harness.respond(&request, Response::approve()).await }
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    // The turn's end waits for the delivery, and what follows it waits behind it.
    remote.complete(&turn.id, "ran it").await;
    let _ = remote.sink().emit(None, EventKind::Warning { message: "running low".into() }, None).await;
    remote.session_updated("scripted-renamed").await;
    tokio::time::sleep(Duration::from_millis(10)).await;
    f.harness.stop_session(&session, true).await.unwrap();
    let _ = answering.await.unwrap();

    let types = drain_types(events).await;
    assert_eq!(types.last(), Some(&"session_closed"), "{types:?}");
    assert_eq!(types.iter().filter(|t| **t == "session_closed").count(), 1, "{types:?}");
    let stored = f.dyn_store().read_events(&session.id, &agent_core::store::EventQuery::all()).await.unwrap();
    assert_eq!(stored.last().map(|e| e.type_name()), Some("session_closed"), "{stored:?}");
}

/// A session without a store forgets a turn's requests with the turn (here at once: it keeps no
/// finished turns); an answer to one of them is still told how the request ended.
#[tokio::test]
async fn an_answer_to_a_forgotten_request_is_told_how_it_ended() {
    let f = Fixture::new();
    let options = opts().store(StoreChoice::Disabled).completed_turn_cache_size(CacheSize::Bounded(0));
    let (session, remote) = f.session(options).await;

    let (turn, expired) = pending(&f, &session, &remote, approval("a-forgotten")).await;
    remote.complete(&turn.id, "finished without the answer").await;
    assert!(f.harness.await_turn(&turn, None).await.is_ok());
    let err = f.harness.respond(&expired, Response::approve()).await.unwrap_err();
    assert!(matches!(err, Error::RequestExpired { ref request_id } if *request_id == expired.id), "{err:?}");

    let (turn, resolved) = pending(&f, &session, &remote, approval("a-answered")).await;
    f.harness.respond(&resolved, Response::approve()).await.unwrap();
    remote.complete(&turn.id, "ran it").await;
    assert!(f.harness.await_turn(&turn, None).await.is_ok());
    let err = f.harness.respond(&resolved, Response::deny("too late")).await.unwrap_err();
    assert!(matches!(err, Error::AlreadyResolved { ref request_id } if *request_id == resolved.id), "{err:?}");
    assert_eq!(remote.responses(), [Response::approve()], "the provider saw one answer");

    let mut unknown = expired.clone();
    unknown.id = RequestId::generate();
    let err = f.harness.respond(&unknown, Response::approve()).await.unwrap_err();
    assert!(matches!(err, Error::RequestNotFound { .. }), "{err:?}");
}
