//! The testkit's provider conformance suite against the Claude provider: once with
//! `fake-claude` playing each check's scenario, once with each real claude (2.1.332, 2.1.197) against the
//! fake Messages server.
//!
//! Claude reports every capability the suite's checks need (`cancel`, `approvals`,
//! `questions`), so every check must run. `fake-claude` comes from
//! `cargo build -p agent-testkit --bins`, the real CLI from `cargo xtask clis`; either missing
//! fails with that command.

use std::sync::Arc;

use agent_exec::LocalExec;
use agent_provider_claude::{ClaudeOptions, ClaudeProvider};
use agent_testkit::conformance::provider::{self, FakeCliFixture, OfflineCliFixture};
use agent_testkit::fake_cli::FakeCli;
use agent_testkit::{Cli, Provider};

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
async fn fake_claude_passes_the_provider_suite() {
    let fixture = FakeCliFixture::new(
        ClaudeProvider::new().into(),
        Arc::new(LocalExec::new()),
        FakeCli::Claude,
        |env, options| options.provider_option(ClaudeOptions::new().binary(env.program())),
    );
    let report = provider::run_all(&fixture).await;
    assert!(report.skipped.is_empty(), "no check may be skipped: {report:?}");
    assert_eq!(report.ran, ALL_CHECKS);
    // Every check's sessions really ran fake-claude (the initialize request is in each transcript).
    let transcripts = fixture.transcripts();
    assert!(transcripts.len() >= ALL_CHECKS.len(), "{} sessions", transcripts.len());
    for transcript in transcripts {
        let initialize =
            transcript.iter().find_map(|line| line.msg.as_ref().filter(|m| m["request"]["subtype"] == "initialize"));
        assert!(initialize.is_some(), "a session without initialize");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_claude_passes_the_provider_suite_on_every_pinned_version() {
    for cli in Cli::pinned(Provider::Claude).unwrap_or_else(|e| panic!("{e}\nrun `cargo xtask clis`")) {
        let version = cli.version().to_owned();
        let fixture = OfflineCliFixture::new(
            ClaudeProvider::new().into(),
            Arc::new(LocalExec::new()),
            cli,
            |cli, _env, options| options.provider_option(ClaudeOptions::new().binary(cli.program())),
        );
        let report = provider::run_all(&fixture).await;
        assert!(report.skipped.is_empty(), "claude {version}: no check may be skipped: {report:?}");
        assert_eq!(report.ran, ALL_CHECKS, "claude {version}");
    }
}
