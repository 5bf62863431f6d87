//! Under `AuthMode::Subscription` the environment codex inherits from the host is scrubbed by
//! the same rules as the session's: a key or endpoint exported in the harness's own shell never
//! reaches the CLI.
//!
//! A test binary of its own: it changes this process's environment.

mod support;

use agent_core::SessionOptions;
use agent_provider_codex::CodexOptions;
use agent_testkit::programs::ProgramDir;

const SECRET: &str = "sk-sekrit-host-0042";

#[tokio::test(flavor = "current_thread")]
async fn a_host_api_key_or_endpoint_never_reaches_codex() {
    let host = ["AZURE_OPENAI_API_KEY", "OPENAI_API_KEY", "MY_GATEWAY_BASE_URL", "AWS_SECRET_ACCESS_KEY"];
    for name in host {
        // SAFETY: this binary's only test changes the environment before anything else in the
        // process reads it (the current-thread runtime starts no other thread).
        unsafe { std::env::set_var(name, SECRET) };
    }
    let dir = ProgramDir::new("host-env");
    // A `codex` that records the environment it got, answers `--version`, and fails to serve.
    let codex = dir.recording_cli("codex", "codex-cli 0.171.0");
    let home = dir.dir("codex-home");
    let (harness, _exec) = support::recording_harness();
    let options = SessionOptions::new(dir.path())
        .env("CODEX_HOME", home.to_string_lossy())
        .provider_option(CodexOptions::new().binary(&codex.path));
    assert!(harness.start_session("codex", options).await.is_err(), "this codex cannot serve");

    let seen: Vec<String> = codex.runs().into_iter().map(|run| run.env).collect();
    assert_eq!(seen.len(), 2, "the version probe and the app-server both ran");
    for env in &seen {
        assert!(env.contains("CODEX_HOME="), "the dump is the child's environment: {env}");
        assert!(!env.contains(SECRET), "a host credential reached codex:\n{env}");
    }
    assert!(std::env::var("AZURE_OPENAI_API_KEY").is_ok(), "the harness's own environment is untouched");
}
