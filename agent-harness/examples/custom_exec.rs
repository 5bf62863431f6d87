//! An exec of your own: here one that logs every command before handing it to `LocalExec`. A
//! remote exec (SSH, a sandbox) implements the same byte-level trait; it must say it is not
//! local, and then needs `AuthMode::Inherit` (the auth guard only verifies this host).
//!
//! `cargo run -p agent-harness --example custom_exec --features codex,local-exec -- /path/to/project`

use agent_harness::exec::{Child, Command, Exec, ExecError};
use agent_harness::execs::local::LocalExec;
use agent_harness::providers::codex::CodexProvider;
use agent_harness::stores::memory::MemoryStore;
use agent_harness::{Harness, SessionOptions, TurnOptions};
use async_trait::async_trait;

#[derive(Debug, Default)]
struct Logged(LocalExec);

#[async_trait]
impl Exec for Logged {
    async fn spawn(&self, command: Command) -> Result<Child, ExecError> {
        eprintln!("spawning {:?} {:?}", command.program, command.args);
        self.0.spawn(command).await
    }

    async fn reap_orphans(
        &self,
        is_live: &(dyn for<'s> Fn(&'s str) -> bool + Send + Sync),
    ) -> Result<usize, ExecError> {
        self.0.reap_orphans(is_live).await
    }

    async fn end_session_processes(&self, session: &str, harness: u64) -> Result<usize, ExecError> {
        self.0.end_session_processes(session, harness).await
    }

    async fn end_abandoned_processes(&self, session: &str, owner: u32, harness: u64) -> Result<usize, ExecError> {
        self.0.end_abandoned_processes(session, owner, harness).await
    }

    fn is_local(&self) -> bool {
        self.0.is_local()
    }
}

#[tokio::main]
async fn main() -> agent_harness::Result<()> {
    let cwd = std::fs::canonicalize(std::env::args().nth(1).unwrap_or_else(|| ".".into())).expect("a directory");
    let harness =
        Harness::builder().provider(CodexProvider::new()).exec(Logged::default()).store(MemoryStore::new()).build()?;
    let session = harness.start_session("codex", SessionOptions::new(cwd)).await?;
    let turn = harness.start_turn(&session, "Say hello.", TurnOptions::new()).await?;
    println!("{}", harness.await_turn(&turn, None).await?.result.text.unwrap_or_default());
    harness.shutdown().await;
    Ok(())
}
