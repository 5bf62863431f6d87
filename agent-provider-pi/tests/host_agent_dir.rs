//! Under `AuthMode::Subscription` pi does not inherit the host's `PI_CODING_AGENT_DIR` (an agent
//! directory holds logins and keys): a resume looks for the session where the pi it starts
//! keeps it, under the session's own `HOME`, not in the host's agent directory.
//!
//! A test binary of its own: it changes this process's environment.

use std::sync::Arc;

use agent_core::exec::Exec;
use agent_core::{AuthMode, Error, Harness, SessionOptions, StoreChoice};
use agent_exec::LocalExec;
use agent_provider_pi::{PiOptions, PiProvider};
use agent_testkit::programs::ProgramDir;

const SESSION: &str = "01a2260e-41f7-7000-8000-000000000042";

#[tokio::test(flavor = "current_thread")]
async fn a_resume_under_subscription_looks_where_pi_keeps_its_sessions() {
    let dir = ProgramDir::new("pi-host-agent-dir");
    let host_agent = dir.dir("host-agent");
    // SAFETY: this binary's only test changes the environment before anything else in the
    // process reads it (the current-thread runtime starts no other thread).
    unsafe { std::env::set_var("PI_CODING_AGENT_DIR", &host_agent) };
    let home = dir.dir("home");
    let work = dir.dir("work");
    let real = std::fs::canonicalize(&work).unwrap();
    let name = real.to_string_lossy().trim_start_matches('/').replace('/', "-");
    let sessions = home.join(".pi/agent/sessions").join(format!("--{name}--"));
    std::fs::create_dir_all(&sessions).unwrap();
    let file = sessions.join(format!("2026-12-05T08-00-00-000Z_{SESSION}.jsonl"));
    let message = r#"{"type":"message","id":"a1","parentId":null,"message":{"role":"user","content":"hi"}}"#;
    std::fs::write(&file, format!("{{\"type\":\"session\",\"version\":3,\"id\":\"{SESSION}\"}}\n{message}\n")).unwrap();
    // A pi that answers `--version`, records its runs and cannot serve.
    let pi = dir.recording_cli("pi", "1.6.0");
    let harness = Harness::builder()
        .provider(PiProvider::new())
        .exec(Arc::new(LocalExec::new()) as Arc<dyn Exec>)
        .store(StoreChoice::Disabled)
        .build()
        .expect("harness");
    let options = SessionOptions::new(&work)
        .env("HOME", home.to_string_lossy())
        .auth(AuthMode::Subscription)
        .provider_option(PiOptions::new().binary(&pi.path))
        .resume_provider_session(SESSION);
    match harness.start_session("pi", options).await {
        Err(Error::ResumeFailed { reason, .. }) => panic!("the session was looked for elsewhere: {reason}"),
        Err(_) => {}
        Ok(_) => panic!("this pi cannot serve"),
    }
    let runs = pi.runs();
    let session = runs.iter().find(|run| run.args.first().is_none_or(|arg| arg != "--version"));
    let args = &session.expect("pi ran for the session").args;
    let file = file.to_string_lossy();
    assert!(args.windows(2).any(|w| w == ["--session", &*file]), "{args:?}");
}
