//! The testkit's provider conformance suite against the Pi provider: with `fake-pi` playing
//! each check's scenario, and with the real pi 1.6.0 and 0.73.1 against the fake Chat
//! Completions server.
//!
//! Pi reports every capability the suite's checks need (`cancel`, and `approvals` and
//! `questions` through the provider's extension), so every check must run. `fake-pi` comes from
//! `cargo build -p agent-testkit --bins`, the real CLIs from `cargo xtask clis`; either missing
//! fails with that command.

mod support;

use std::sync::Arc;

use agent_exec::LocalExec;
use agent_provider_pi::{PiOptions, PiProvider};
use agent_testkit::conformance::provider::{self, FakeCliFixture, OfflineCliFixture};
use agent_testkit::fake_cli::FakeCli;

/// Every check of `provider::run_all`, in its order.
const ALL_CHECKS: [&str; 7] = [
    "text_turn_streams_deltas",
    "two_turns_in_one_session",
    "cancel_mid_turn_keeps_the_session_usable",
    "approval_approve_runs_the_tool",
    "approval_deny_completes_the_turn",
    "question_is_answered_through_respond",
    "process_exit_mid_turn_fails_the_turn",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fake_pi_passes_the_provider_suite() {
    let fixture =
        FakeCliFixture::new(PiProvider::new().into(), Arc::new(LocalExec::new()), FakeCli::Pi, |env, options| {
            options.provider_option(PiOptions::new().binary(env.program()))
        });
    let report = provider::run_all(&fixture).await;
    assert!(report.skipped.is_empty(), "no check may be skipped: {report:?}");
    assert_eq!(report.ran, ALL_CHECKS);
    let transcripts = fixture.transcripts();
    assert!(transcripts.len() >= ALL_CHECKS.len(), "{} sessions", transcripts.len());
    for transcript in transcripts {
        let ready = transcript.iter().find_map(|line| line.msg.as_ref().filter(|m| m["type"] == "get_state"));
        assert!(ready.is_some(), "a session opened without get_state");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_pi_passes_the_provider_suite_on_every_pinned_version() {
    for cli in support::clis() {
        let version = cli.version().to_owned();
        let fixture =
            OfflineCliFixture::new(PiProvider::new().into(), Arc::new(LocalExec::new()), cli, |cli, env, options| {
                options.provider_option(support::pi_options(cli, env))
            });
        let report = provider::run_all(&fixture).await;
        assert!(report.skipped.is_empty(), "pi {version}: no check may be skipped: {report:?}");
        assert_eq!(report.ran, ALL_CHECKS, "pi {version}");
    }
}
