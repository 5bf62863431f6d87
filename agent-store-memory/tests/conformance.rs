//! The store conformance suite against the memory store.

use std::sync::Arc;

use agent_core::store::{DynStore, EventQuery, Store};
use agent_core::{Event, Request, RequestId, SessionId, SessionSnapshot, SessionState, StoreError, Turn, TurnId};
use agent_store_memory::{MemoryLimits, MemoryStore};
use agent_testkit::conformance::store as suite;
use async_trait::async_trait;

#[tokio::test]
async fn memory_store_passes_the_store_conformance_suite() {
    suite::run_all(Arc::new(MemoryStore::new())).await;
}

#[tokio::test]
async fn session_limit_evicts_the_oldest_closed_session_and_refuses_when_none_is_closed() {
    let store = MemoryStore::with_limits(MemoryLimits::max_sessions(2));
    let (a, b, c) = (SessionId::new("a").unwrap(), SessionId::new("b").unwrap(), SessionId::new("c").unwrap());
    store.save_session(&suite::snapshot(&a, SessionState::Closed)).await.unwrap();
    store.save_session(&suite::snapshot(&b, SessionState::Idle)).await.unwrap();
    store.save_session(&suite::snapshot(&c, SessionState::Idle)).await.unwrap();
    assert_eq!(store.fetch_session(&a).await.unwrap(), None, "the closed session is evicted");
    assert!(store.fetch_session(&c).await.unwrap().is_some());
    let d = SessionId::new("d").unwrap();
    let refused = store.save_session(&suite::snapshot(&d, SessionState::Idle)).await;
    assert!(matches!(refused, Err(StoreError::WriteRefused(_))), "{refused:?}");
    assert_eq!(store.list_sessions().await.unwrap().len(), 2);
}

/// The memory store with what the trait provides left to the trait: [`Store::last_turn_event`]
/// as a store without an index by turn answers it, and [`Store::write`]. The session named by
/// `.1`, if any, has a snapshot that does not decode (`fetch_session` says `Corrupt`).
#[derive(Debug, Default)]
struct Provided(MemoryStore, Option<SessionId>);

#[async_trait]
impl Store for Provided {
    async fn save_session(&self, snapshot: &SessionSnapshot) -> Result<(), StoreError> {
        self.0.save_session(snapshot).await
    }
    async fn fetch_session(&self, id: &SessionId) -> Result<Option<SessionSnapshot>, StoreError> {
        if self.1.as_ref() == Some(id) {
            return Err(StoreError::Corrupt(format!("snapshot of session `{id}`: damaged")));
        }
        self.0.fetch_session(id).await
    }
    async fn list_sessions(&self) -> Result<Vec<SessionSnapshot>, StoreError> {
        self.0.list_sessions().await
    }
    async fn delete_session(&self, id: &SessionId) -> Result<(), StoreError> {
        self.0.delete_session(id).await
    }
    async fn save_turn(&self, turn: &Turn) -> Result<(), StoreError> {
        self.0.save_turn(turn).await
    }
    async fn fetch_turn(&self, session: &SessionId, turn: &TurnId) -> Result<Option<Turn>, StoreError> {
        self.0.fetch_turn(session, turn).await
    }
    async fn list_turns(&self, session: &SessionId) -> Result<Vec<Turn>, StoreError> {
        self.0.list_turns(session).await
    }
    async fn save_request(&self, request: &Request) -> Result<(), StoreError> {
        self.0.save_request(request).await
    }
    async fn fetch_request(&self, session: &SessionId, request: &RequestId) -> Result<Option<Request>, StoreError> {
        self.0.fetch_request(session, request).await
    }
    async fn list_requests(&self, session: &SessionId) -> Result<Vec<Request>, StoreError> {
        self.0.list_requests(session).await
    }
    async fn append_events(&self, session: &SessionId, events: &[Arc<Event>]) -> Result<(), StoreError> {
        self.0.append_events(session, events).await
    }
    async fn read_events(&self, session: &SessionId, query: &EventQuery) -> Result<Vec<Arc<Event>>, StoreError> {
        self.0.read_events(session, query).await
    }
    async fn latest_seq(&self, session: &SessionId) -> Result<Option<u64>, StoreError> {
        self.0.latest_seq(session).await
    }
}

#[tokio::test]
async fn the_provided_last_turn_event_passes_its_check() {
    let store: DynStore = Arc::new(Provided::default());
    suite::last_turn_event_is_the_turns_newest(&store).await;
}

/// A purge of a snapshot that does not decode, through the provided `write` (as a store that
/// does not override it commits one): the session is deleted, not only reported purged.
#[tokio::test]
async fn the_provided_write_purges_a_snapshot_that_does_not_decode() {
    let bad = SessionId::new("bad").unwrap();
    let store = Provided(MemoryStore::new(), Some(bad.clone()));
    store.save_session(&suite::snapshot(&bad, SessionState::Closed)).await.unwrap();
    let mut purge = agent_core::store::WriteBatch::new(bad.clone());
    purge.delete_first = true;
    purge.expect = Some(agent_core::store::Expected::Unreadable);
    store.write(&purge).await.expect("the purge commits");
    assert_eq!(store.0.fetch_session(&bad).await.unwrap(), None, "the session is gone");
}
