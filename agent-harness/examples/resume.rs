//! Continue a stopped session under its own ID with the durable SQLite store: the provider
//! conversation and the stored history go on where they stopped.
//!
//! `cargo run -p agent-harness --example resume --features codex,local-exec,sqlite -- /path/to/project`

use agent_harness::execs::local::LocalExec;
use agent_harness::providers::codex::CodexProvider;
use agent_harness::stores::sqlite::SqliteStore;
use agent_harness::{Harness, Replay, SessionId, SessionOptions, TurnOptions};

#[tokio::main]
async fn main() -> agent_harness::Result<()> {
    let cwd = std::fs::canonicalize(std::env::args().nth(1).unwrap_or_else(|| ".".into())).expect("a directory");
    let store = SqliteStore::open(cwd.join(".agent-harness.db")).expect("a database file");
    let harness = Harness::builder().provider(CodexProvider::new()).exec(LocalExec::new()).store(store).build()?;
    let id = SessionId::new("long-running-job")?;
    // The first run starts the session; every later run resumes it.
    let stored = harness.list_stored_sessions().await?.into_iter().any(|s| s.session_id == id);
    let options = SessionOptions::new(&cwd);
    let options = if stored { options.resume_session(id) } else { options.id(id.as_str()) };
    let session = harness.start_session("codex", options).await?;
    let turn =
        harness.start_turn(&session, "What did we do so far? Then take the next step.", TurnOptions::new()).await?;
    harness.await_turn(&turn, None).await?;
    let mut history = harness.subscribe(&session, Replay::Start).await?;
    let last = harness.status(&session).await?.last_seq;
    while let Some(Ok(event)) = history.next().await {
        println!("{:>5} {}", event.seq, event.type_name());
        if event.seq == last {
            break;
        }
    }
    harness.stop_session(&session, false).await
}
