//! The store conformance suite against the memory store.

use std::sync::Arc;

use agent_core::store::Store;
use agent_core::{SessionId, SessionState, StoreError};
use agent_store_memory::{MemoryLimits, MemoryStore};
use agent_testkit::conformance::store as suite;

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
