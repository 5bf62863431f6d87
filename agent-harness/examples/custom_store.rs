//! A store of your own: here a wrapper that counts committed events and forwards everything to
//! the memory store. Any `Store` works; the conformance suite in `agent-testkit` checks the
//! contract.
//!
//! `cargo run -p agent-harness --example custom_store --features codex,local-exec -- /path/to/project`

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use agent_harness::event::Event;
use agent_harness::execs::local::LocalExec;
use agent_harness::providers::codex::CodexProvider;
use agent_harness::store::{EventQuery, RequestQuery, Store, StoreError, WriteBatch};
use agent_harness::stores::memory::MemoryStore;
use agent_harness::{
    Harness, Request, RequestId, SessionId, SessionOptions, SessionSnapshot, StoreChoice, Turn, TurnId, TurnOptions,
};
use async_trait::async_trait;

#[derive(Debug, Default)]
struct Counting {
    inner: MemoryStore,
    events: AtomicU64,
}

#[async_trait]
impl Store for Counting {
    async fn save_session(&self, s: &SessionSnapshot) -> Result<(), StoreError> {
        self.inner.save_session(s).await
    }
    async fn fetch_session(&self, id: &SessionId) -> Result<Option<SessionSnapshot>, StoreError> {
        self.inner.fetch_session(id).await
    }
    async fn list_sessions(&self) -> Result<Vec<SessionSnapshot>, StoreError> {
        self.inner.list_sessions().await
    }
    async fn delete_session(&self, id: &SessionId) -> Result<(), StoreError> {
        self.inner.delete_session(id).await
    }
    async fn save_turn(&self, t: &Turn) -> Result<(), StoreError> {
        self.inner.save_turn(t).await
    }
    async fn fetch_turn(&self, s: &SessionId, t: &TurnId) -> Result<Option<Turn>, StoreError> {
        self.inner.fetch_turn(s, t).await
    }
    async fn list_turns(&self, s: &SessionId) -> Result<Vec<Turn>, StoreError> {
        self.inner.list_turns(s).await
    }
    async fn save_request(&self, r: &Request) -> Result<(), StoreError> {
        self.inner.save_request(r).await
    }
    async fn fetch_request(&self, s: &SessionId, r: &RequestId) -> Result<Option<Request>, StoreError> {
        self.inner.fetch_request(s, r).await
    }
    async fn list_requests(&self, s: &SessionId) -> Result<Vec<Request>, StoreError> {
        self.inner.list_requests(s).await
    }
    async fn read_requests(&self, s: &SessionId, q: &RequestQuery) -> Result<Vec<Request>, StoreError> {
        self.inner.read_requests(s, q).await
    }
    async fn append_events(&self, s: &SessionId, e: &[Arc<Event>]) -> Result<(), StoreError> {
        self.inner.append_events(s, e).await
    }
    async fn read_events(&self, s: &SessionId, q: &EventQuery) -> Result<Vec<Arc<Event>>, StoreError> {
        self.inner.read_events(s, q).await
    }
    async fn latest_seq(&self, s: &SessionId) -> Result<Option<u64>, StoreError> {
        self.inner.latest_seq(s).await
    }
    async fn write(&self, batch: &WriteBatch) -> Result<(), StoreError> {
        self.inner.write(batch).await?;
        self.events.fetch_add(batch.events.len() as u64, Ordering::Relaxed);
        Ok(())
    }
}

#[tokio::main]
async fn main() -> agent_harness::Result<()> {
    let cwd = std::fs::canonicalize(std::env::args().nth(1).unwrap_or_else(|| ".".into())).expect("a directory");
    let store = Arc::new(Counting::default());
    let harness = Harness::builder()
        .provider(CodexProvider::new())
        .exec(LocalExec::new())
        .store(StoreChoice::Custom(store.clone()))
        .build()?;
    let session = harness.start_session("codex", SessionOptions::new(cwd)).await?;
    let turn = harness.start_turn(&session, "List the top-level files.", TurnOptions::new()).await?;
    let _ = harness.await_turn(&turn, None).await;
    harness.shutdown().await;
    println!("{} events committed", store.events.load(Ordering::Relaxed));
    Ok(())
}
