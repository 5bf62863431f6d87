//! Request handlers answer requests as they come, through the same exactly-once claim as
//! `respond`.

use std::time::Duration;

use agent_core::handler::{self, RequestPolicy};
use agent_core::request::RequestSpec;
use agent_core::testing::CallBehavior;
use agent_core::*;

use crate::common::*;

fn approval(id: &str, command: &str) -> RequestSpec {
    RequestSpec::new(RequestKind::CommandApproval, format!("Run {command}?"), id).meta("command", command)
}

/// Creates a request on a running turn and returns it as announced, with the turn.
async fn ask(
    f: &Fixture,
    options: SessionOptions,
    spec: RequestSpec,
) -> (agent_core::testing::ScriptedSession, Turn, Request) {
    let (session, remote) = f.session(options).await;
    let turn = f.admitted_turn(&session, "work").await;
    let mut events = f.harness.subscribe(&turn, Replay::Latest).await.unwrap();
    remote.request(&turn.id, spec).await;
    let request = request_of(&next_of(&mut events, "request_created").await);
    (remote, turn, request)
}

/// The request's resolution or expiry, once it happens.
async fn settled(f: &Fixture, turn: &Turn) -> std::sync::Arc<Event> {
    let mut events = f.harness.subscribe(turn, Replay::Start).await.unwrap();
    loop {
        let event = next(&mut events).await;
        if matches!(event.type_name(), "request_resolved" | "request_expired") {
            return event;
        }
    }
}

#[tokio::test]
async fn a_handler_answers_requests_as_they_come() {
    let f = Fixture::with(|b| {
        b.request_handler(handler::from_fn(|request| async move { request.kind.is_approval().then(Response::approve) }))
    });
    let (remote, turn, _) = ask(&f, opts(), approval("a1", "ls")).await;
    let resolved = settled(&f, &turn).await;
    assert!(matches!(&resolved.kind, EventKind::RequestResolved { response, .. } if **response == Response::approve()));
    assert_eq!(remote.responses(), [Response::approve()]);
}

#[tokio::test]
async fn a_session_policy_wins_over_the_harness_handler_and_leaves_what_it_does_not_match() {
    let f = Fixture::with(|b| b.request_handler(handler::from_fn(|_| async { Some(Response::deny("harness")) })));
    let policy = RequestPolicy::new().approve_commands(["cargo test"]);
    let (remote, turn, _) = ask(&f, opts().request_handler(policy.clone()), approval("a1", "cargo test -q")).await;
    settled(&f, &turn).await;
    assert_eq!(remote.responses(), [Response::approve()], "the session's policy answered");

    // Nothing matches: the request waits for the caller.
    let (remote, _, request) = ask(&f, opts().request_handler(policy), approval("a2", "rm -rf /")).await;
    tokio::task::yield_now().await;
    f.harness.respond(&request, Response::deny("no")).await.unwrap();
    assert_eq!(remote.responses(), [Response::deny("no")]);
}

#[tokio::test(start_paused = true)]
async fn a_handler_answer_and_a_concurrent_respond_never_both_reach_the_provider() {
    // The handler answers at once; its delivery takes a second, during which the caller responds.
    let f = Fixture::with(|b| b.request_handler(handler::from_fn(|_| async { Some(Response::approve()) })));
    f.control.push_respond(CallBehavior::Delay(Duration::from_secs(1)));
    let (remote, turn, request) = ask(&f, opts(), approval("a1", "ls")).await;
    tokio::time::sleep(Duration::from_millis(10)).await;
    let err = f.harness.respond(&request, Response::deny("caller")).await.unwrap_err();
    assert!(matches!(err, Error::ResponseInProgress { .. }), "{err:?}");
    settled(&f, &turn).await;
    let err = f.harness.respond(&request, Response::deny("caller")).await.unwrap_err();
    assert!(matches!(err, Error::AlreadyResolved { .. }), "{err:?}");
    assert_eq!(remote.responses(), [Response::approve()], "exactly one answer reached the provider");

    // The other way round: the caller claims first, the handler's late answer is dropped.
    let slow = handler::from_fn(|_| async {
        tokio::time::sleep(Duration::from_secs(5)).await;
        Some(Response::approve())
    });
    let (remote, turn, request) = ask(&f, opts().request_handler(slow), approval("a2", "ls")).await;
    f.harness.respond(&request, Response::deny("caller")).await.unwrap();
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(remote.responses(), [Response::deny("caller")]);
    assert!(f.harness.await_turn(&turn, Some(Duration::from_millis(1))).await.is_err(), "the turn goes on");
}

#[tokio::test(start_paused = true)]
async fn a_handler_that_panics_times_out_or_answers_wrongly_denies_and_the_session_goes_on() {
    let f = Fixture::new();
    let panics = handler::from_fn(|_| async { panic!("handler bug") });
    let (remote, _, _) = ask(&f, opts().request_handler(panics), approval("a1", "ls")).await;
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(matches!(remote.responses()[..], [Response::Deny { .. }]), "{:?}", remote.responses());

    let hangs = handler::from_fn(|_| std::future::pending());
    let (remote, _, _) =
        ask(&f, opts().request_handler(hangs).request_timeout(Duration::from_secs(3)), approval("a2", "ls")).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(matches!(remote.responses()[..], [Response::Deny { .. }]), "{:?}", remote.responses());

    let wrong = handler::from_fn(|_| async { Some(Response::answer("yes")) });
    let (remote, turn, _) = ask(&f, opts().request_handler(wrong), approval("a3", "ls")).await;
    let resolved = settled(&f, &turn).await;
    match &resolved.kind {
        EventKind::RequestResolved { response, .. } => {
            assert!(
                matches!(**response, Response::Deny { reason: Some(ref r) } if r.contains("does not fit")),
                "{response:?}"
            )
        }
        other => panic!("expected a denial, got {other:?}"),
    }
    assert_eq!(remote.responses().len(), 1);
    remote.complete(&turn.id, "done").await;
    f.harness.await_turn(&turn, None).await.expect("the session keeps running");
}

/// A handler still silent at the session's `request_timeout` leaves the request to that
/// deadline, which denies it as an expiry: always `request_expired { timeout }`, never the
/// handler's failure racing it to a `request_resolved`. On the real clock: the handler's limit
/// and the deadline fall on one instant, and only real timers let either fire first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_handler_leaves_the_request_to_its_timeout() {
    let f = Fixture::new();
    for i in 0..20 {
        let hangs = handler::from_fn(|_| std::future::pending());
        let options = opts().request_handler(hangs).request_timeout(Duration::from_millis(20));
        let (remote, turn, _) = ask(&f, options, approval(&format!("a{i}"), "ls")).await;
        let settled = settled(&f, &turn).await;
        assert!(
            matches!(settled.kind, EventKind::RequestExpired { reason: ExpiryReason::Timeout, .. }),
            "run {i}: {:?}",
            settled.kind
        );
        assert_eq!(remote.responses(), [Response::deny("the request timed out")], "run {i}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_handler_answer_the_provider_refuses_becomes_a_denial_not_a_wait() {
    let f = Fixture::with(|b| b.request_handler(handler::from_fn(|_| async { Some(Response::approve()) })));
    f.control.push_respond(CallBehavior::Reject("that decision is not offered".into()));
    let (remote, turn, _) = ask(&f, opts(), approval("a1", "ls")).await;
    let resolved = settled(&f, &turn).await;
    match &resolved.kind {
        EventKind::RequestResolved { response, .. } => assert!(
            matches!(**response, Response::Deny { reason: Some(ref r) } if r.contains("refused the request handler's answer")),
            "{response:?}"
        ),
        other => panic!("expected a denial, got {other:?}"),
    }
    assert!(matches!(remote.responses()[..], [Response::Deny { .. }]), "{:?}", remote.responses());
}

/// A handler whose `handle` panics before it returns its future (a hand-written impl).
#[derive(Debug)]
struct PanicsAtOnce;

impl agent_core::handler::RequestHandler for PanicsAtOnce {
    fn handle<'a, 'b, 'c>(
        &'a self,
        _: &'b Request,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<Response>> + Send + 'c>>
    where
        'a: 'c,
        'b: 'c,
        Self: 'c,
    {
        panic!("a bug before any await")
    }
}

#[tokio::test(start_paused = true)]
async fn a_handler_that_panics_before_its_future_denies_too() {
    let f = Fixture::new();
    let panics: handler::DynRequestHandler = std::sync::Arc::new(PanicsAtOnce);
    let (remote, turn, _) = ask(&f, opts().request_handler(panics), approval("a1", "ls")).await;
    settled(&f, &turn).await;
    assert!(matches!(remote.responses()[..], [Response::Deny { .. }]), "{:?}", remote.responses());
}
