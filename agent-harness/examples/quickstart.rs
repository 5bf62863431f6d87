//! Start a Codex session, run one turn, print the answer.
//!
//! `cargo run -p agent-harness --example quickstart --features codex,local-exec -- /path/to/project`

use agent_harness::execs::local::LocalExec;
use agent_harness::providers::codex::CodexProvider;
use agent_harness::stores::memory::MemoryStore;
use agent_harness::{Harness, SessionOptions, TurnOptions};

#[tokio::main]
async fn main() -> agent_harness::Result<()> {
    let cwd = std::env::args().nth(1).unwrap_or_else(|| ".".into());
    let cwd = std::fs::canonicalize(cwd).expect("a project directory");
    let harness =
        Harness::builder().provider(CodexProvider::new()).exec(LocalExec::new()).store(MemoryStore::new()).build()?;
    let session = harness.start_session("codex", SessionOptions::new(cwd).id("quickstart")).await?;
    let turn = harness.start_turn(&session, "Summarise this project in one paragraph.", TurnOptions::new()).await?;
    let outcome = harness.await_turn(&turn, None).await?;
    println!("{}", outcome.result.text.unwrap_or_default());
    harness.shutdown().await;
    Ok(())
}
