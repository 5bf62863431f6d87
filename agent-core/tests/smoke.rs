//! A first end-to-end check of the runtime with the scripted provider.

use std::sync::Arc;

use agent_core::testing::{Frame, ScriptedProvider};
use agent_core::*;
use agent_store_memory::MemoryStore;
use futures::StreamExt;

#[tokio::test]
async fn a_turn_completes_and_replays() {
    let (provider, control) = ScriptedProvider::new("scripted");
    let harness =
        Harness::builder().provider(provider).store(StoreChoice::Custom(Arc::new(MemoryStore::new()))).build().unwrap();
    let session = harness.start_session("scripted", SessionOptions::new(std::env::temp_dir())).await.unwrap();
    control.push_script([Frame::delta("a"), Frame::delta("b"), Frame::complete("ab")]);
    let turn = harness.start_turn(&session, "go", TurnOptions::new()).await.unwrap();
    let outcome = harness.await_turn(&turn, None).await.unwrap();
    assert_eq!(outcome.result.text.as_deref(), Some("ab"));
    let events: Vec<_> = harness.subscribe(&turn, Replay::Start).await.unwrap().collect().await;
    let types: Vec<_> = events.iter().map(|e| e.as_ref().unwrap().type_name()).collect();
    assert_eq!(types, ["turn_started", "message_delta", "message_delta", "turn_completed"]);
    harness.stop_session(&session, false).await.unwrap();
    assert!(harness.list_sessions().is_empty());
}
