//! The testkit's provider conformance checks against the shipped presets on the real CLIs
//! (from `cargo xtask clis`), offline: `claude-print` with approvals asked runs every check
//! that applies to a preset, `codex-exec` and `pi-print` the ones their capabilities allow.
//!
//! Left out on purpose:
//! - `process_exit_mid_turn_fails_the_turn` requires that a session whose CLI died takes no new
//!   turn, while a preset runs one process per turn: a CLI death fails that turn and the next
//!   turn starts a new process (`user_preset.rs` tests that);
//! - `cancel_mid_turn_keeps_the_session_usable` for `codex-exec`: without token streaming the
//!   check cancels at `turn_started`, which for a process per turn comes before codex has asked
//!   the model anything, so the scenario's stalled answer goes to the next turn and stalls it.

mod support;

use std::sync::Arc;

use agent_exec::LocalExec;
use agent_provider_preset::{Approvals, PresetCatalog};
use agent_testkit::conformance::provider::{self, OfflineCliFixture, Outcome};
use agent_testkit::{Cli, OfflineEnv, Provider};
use support::{allow, cli, preset_options};

fn fixture(
    preset: &str,
    cli: Cli,
    approvals: Approvals,
) -> OfflineCliFixture<impl Fn(&Cli, &OfflineEnv, agent_core::SessionOptions) -> agent_core::SessionOptions + Send + Sync>
{
    let catalog = PresetCatalog::builder(allow(&cli)).load();
    let provider = catalog.provider(preset).expect("a shipped preset");
    OfflineCliFixture::new(provider.into(), Arc::new(LocalExec::new()), cli, move |cli, env, options| {
        options.provider_option(preset_options(cli, env).approvals(approvals))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_print_passes_the_checks_that_apply_to_a_preset() {
    let fixture = fixture("claude-print", cli(Provider::Claude), Approvals::Ask);
    let outcomes = [
        provider::text_turn_streams_deltas(&fixture).await,
        provider::two_turns_in_one_session(&fixture).await,
        provider::cancel_mid_turn_keeps_the_session_usable(&fixture).await,
        provider::approval_approve_runs_the_tool(&fixture).await,
        provider::approval_deny_completes_the_turn(&fixture).await,
        provider::question_is_answered_through_respond(&fixture).await,
    ];
    assert!(outcomes.iter().all(|o| *o == Outcome::Ran), "no check may be skipped: {outcomes:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_exec_and_pi_print_pass_their_checks() {
    let codex = fixture("codex-exec", cli(Provider::Codex), Approvals::Off);
    let pi = fixture("pi-print", cli(Provider::Pi), Approvals::Off);
    let outcomes = [
        provider::text_turn_streams_deltas(&codex).await,
        provider::two_turns_in_one_session(&codex).await,
        provider::text_turn_streams_deltas(&pi).await,
        provider::two_turns_in_one_session(&pi).await,
        provider::cancel_mid_turn_keeps_the_session_usable(&pi).await,
    ];
    assert!(outcomes.iter().all(|o| *o == Outcome::Ran), "{outcomes:?}");
}
