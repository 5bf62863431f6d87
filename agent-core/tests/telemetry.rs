//! The tracing contract: one span per public command, with provider, session, outcome and
//! duration (see the crate docs).
//!
//! A test binary of its own: tracing caches per-callsite interest process-wide, so a capturing
//! subscriber only sees every span reliably when no other test hits the same callsites
//! concurrently.

#[path = "runtime/common.rs"]
#[allow(dead_code)]
mod common;

use agent_core::request::RequestSpec;
use agent_core::*;

use common::*;

/// The lines that close a span named `name`.
fn closed(captured: &Captured, name: &str) -> Vec<String> {
    let text = captured.text();
    text.lines().filter(|l| l.contains(&format!(" {name}{{")) && l.contains("close")).map(str::to_owned).collect()
}

#[track_caller]
fn check(lines: &[String], fields: &[&str]) {
    assert_eq!(lines.len(), 1, "one span: {lines:#?}");
    for field in fields {
        assert!(lines[0].contains(field), "missing {field}: {}", lines[0]);
    }
    assert!(lines[0].contains("duration_us="), "{}", lines[0]);
}

#[tokio::test]
async fn every_public_command_has_a_span_with_its_outcome() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let f = Fixture::new();
    let (session, remote) = f.session(opts().id("traced")).await;
    let turn = f.admitted_turn(&session, "go").await;
    let mut events = f.harness.subscribe(&turn, Replay::Latest).await.unwrap();
    remote.request(&turn.id, RequestSpec::new(RequestKind::Confirmation, "Proceed?", "c1")).await;
    let request = request_of(&next(&mut events).await);
    f.harness.respond(&request, Response::approve()).await.unwrap();
    let err = f.harness.steer(&turn, "more").await.unwrap_err();
    assert!(matches!(err, Error::Unsupported { .. }));
    f.harness.cancel(&turn).await.unwrap();
    f.harness.await_turn(&turn, None).await.unwrap_err();
    let err = f.harness.stop_session(&session, false).await;
    assert!(err.is_ok());

    let ids = ["provider=scripted", "session_id=traced"];
    check(&closed(&captured, "start_session"), &[&ids[..], &["outcome=\"ok\""]].concat());
    check(&closed(&captured, "start_turn"), &[&ids[..], &["outcome=\"ok\""]].concat());
    check(&closed(&captured, "respond"), &[&ids[..], &["outcome=\"ok\"", "request_id="]].concat());
    check(&closed(&captured, "steer"), &[&ids[..], &["outcome=\"unsupported\"", "error="]].concat());
    check(&closed(&captured, "cancel"), &[&ids[..], &["outcome=\"ok\"", "turn_id="]].concat());
    check(&closed(&captured, "stop_session"), &[&ids[..], &["outcome=\"ok\"", "force=false"]].concat());
}
