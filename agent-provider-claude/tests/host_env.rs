//! Under `AuthMode::Subscription` the environment claude inherits from the host is scrubbed by
//! the same rules as the session's: a key, endpoint or cloud selector exported in the harness's
//! own shell never reaches the CLI.
//!
//! A test binary of its own: it changes this process's environment.

use std::sync::Arc;

use agent_core::exec::Exec;
use agent_core::{Harness, SessionOptions, StoreChoice};
use agent_exec::LocalExec;
use agent_provider_claude::{ClaudeOptions, ClaudeProvider};
use agent_testkit::programs::ProgramDir;

const SECRET: &str = "sk-ant-sekrit-host-0042";

#[tokio::test(flavor = "current_thread")]
async fn a_host_api_key_or_endpoint_never_reaches_claude() {
    let host = [
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
        "ANTHROPIC_AUTH_TOKEN",
        "CLAUDE_CODE_USE_BEDROCK",
        "MY_PROXY_API_KEY",
    ];
    for name in host {
        // SAFETY: this binary's only test changes the environment before anything else in the
        // process reads it (the current-thread runtime starts no other thread).
        unsafe { std::env::set_var(name, SECRET) };
    }
    let dir = ProgramDir::new("claude-host-env");
    // A `claude` that records the environment it got, answers `--version`, and fails to serve.
    let claude = dir.recording_cli("claude", "2.1.197 (Claude Code)");
    let harness = Harness::builder()
        .provider(ClaudeProvider::new())
        .exec(Arc::new(LocalExec::new()) as Arc<dyn Exec>)
        .store(StoreChoice::Disabled)
        .build()
        .expect("harness");
    let home = dir.dir("home");
    let options = SessionOptions::new(dir.path())
        .env("HOME", home.to_string_lossy())
        .provider_option(ClaudeOptions::new().binary(&claude.path));
    assert!(harness.start_session("claude", options).await.is_err(), "this claude cannot serve");

    let seen: Vec<String> = claude.runs().into_iter().map(|run| run.env).collect();
    assert_eq!(seen.len(), 2, "the version probe and claude both ran");
    for env in &seen {
        assert!(env.contains("HOME="), "the dump is the child's environment: {env}");
        assert!(!env.contains(SECRET), "a host credential reached claude:\n{env}");
    }
    assert!(std::env::var("ANTHROPIC_API_KEY").is_ok(), "the harness's own environment is untouched");
}
