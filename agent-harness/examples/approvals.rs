//! Answer the agent's approvals with a handler: allow test runs, deny every other command, and
//! leave questions to whoever watches the session. Nobody watches in this example, so a
//! question is denied after the session's `request_timeout` instead of holding the turn for good.
//!
//! `cargo run -p agent-harness --example approvals --features codex,local-exec -- /path/to/project`

use agent_harness::execs::local::LocalExec;
use agent_harness::handler::RequestPolicy;
use agent_harness::providers::codex::CodexProvider;
use agent_harness::stores::memory::MemoryStore;
use agent_harness::{ApprovalPolicy, Harness, RequestKind, SessionOptions, TurnOptions};

#[tokio::main]
async fn main() -> agent_harness::Result<()> {
    let cwd = std::fs::canonicalize(std::env::args().nth(1).unwrap_or_else(|| ".".into())).expect("a directory");
    // The handler: ten lines or fewer, answered through the same exactly-once path as `respond`.
    let policy = RequestPolicy::new()
        .approve_commands(["cargo test", "cargo check"])
        .approve_kind(RequestKind::FileChangeApproval)
        .deny_kind(RequestKind::CommandApproval, "only cargo test and cargo check may run");
    let harness = Harness::builder()
        .provider(CodexProvider::new())
        .exec(LocalExec::new())
        .store(MemoryStore::new())
        .request_handler(policy)
        .build()?;
    let options = SessionOptions::new(cwd)
        .approval_policy(ApprovalPolicy::Untrusted)
        .request_timeout(std::time::Duration::from_secs(300));
    let session = harness.start_session("codex", options).await?;
    let turn = harness.start_turn(&session, "Run the tests and fix what fails.", TurnOptions::new()).await?;
    match harness.await_turn(&turn, None).await {
        Ok(outcome) => println!("{}", outcome.result.text.unwrap_or_default()),
        Err(error) => eprintln!("the turn did not complete: {error}"),
    }
    harness.shutdown().await;
    Ok(())
}
