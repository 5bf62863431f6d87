//! The store conformance suite.
//!
//! Call [`run_all`] with a fresh, empty store. Each check uses its own session IDs, so the
//! checks also pass one by one. Every check panics with a message naming the broken rule.

use std::sync::Arc;

use agent_core::event::SCHEMA_VERSION;
use agent_core::request::{ProviderRef, RequestSpec};
use agent_core::session::StartupMarker;
use agent_core::store::{EventQuery, Expected, WriteBatch};
use agent_core::{
    DynStore, Event, EventId, EventKind, ProviderId, Request, RequestId, RequestKind, RequestQuery, RequestStatus,
    Response, SessionId, SessionSnapshot, SessionState, StoreError, Timestamp, Turn, TurnId, TurnInput, TurnResult,
    TurnStatus,
};

mod events;
mod records;
mod writes;

pub use events::*;
pub use records::*;
pub use writes::*;

/// Runs every check.
pub async fn run_all(store: DynStore) {
    snapshots_roundtrip(&store).await;
    list_is_ordered_by_id(&store).await;
    delete_cascades(&store).await;
    children_need_a_session(&store).await;
    turns_and_requests_upsert(&store).await;
    append_is_idempotent_and_ordered(&store).await;
    explicit_nulls_round_trip(&store).await;
    gaps_are_allowed(&store).await;
    reads_filter_by_seq_turn_and_limit(&store).await;
    last_turn_event_is_the_turns_newest(&store).await;
    batch_write_is_atomic(&store).await;
    batch_write_replaces(&store).await;
    delete_refuses_open_sessions(&store).await;
    event_ids_are_unique_within_a_session(&store).await;
    ids_made_in_sequence_are_unique_too(&store).await;
    ids_made_in_place_are_unique_too(&store).await;
    writes_at_once_are_writes(&store).await;
    queued_writes_commit_in_order(&store).await;
    requests_and_turn_events_need_their_turn(&store).await;
    requests_are_read_by_turn_and_status(&store).await;
    refused_writes_change_nothing(&store).await;
    writes_check_their_precondition(&store).await;
}

fn sid(name: &str) -> SessionId {
    SessionId::new(name).expect("valid id")
}

/// A snapshot for `id`.
pub fn snapshot(id: &SessionId, status: SessionState) -> SessionSnapshot {
    let json = serde_json::json!({
        "id": id, "provider": "scripted", "status": status, "cwd": "/tmp",
        "config_fingerprint": "f", "created_at": Timestamp::now(), "updated_at": Timestamp::now(),
        // A float whose shortest text reads back to another float without a careful parser.
        "metadata": {"project": "conformance", "score": 2.291712365432881e-9},
        "owner": {"pid": 4242, "started": 987654, "boot_id": "b00t", "harness": 3},
    });
    serde_json::from_value(json).expect("snapshot json")
}

/// A turn record.
pub fn turn(session: &SessionId, id: &str, status: TurnStatus) -> Turn {
    let json = serde_json::json!({
        "id": id, "session_id": session, "input": "do it", "status": status,
        "created_at": Timestamp::now(),
    });
    let mut turn: Turn = serde_json::from_value(json).expect("turn json");
    if status.is_terminal() {
        turn.result = Some(TurnResult::text("done"));
    }
    turn
}

/// A request record.
pub fn request(session: &SessionId, turn: &str, id: &str, status: RequestStatus) -> Request {
    let spec = RequestSpec::new(RequestKind::CommandApproval, "run ls?", "7");
    let json = serde_json::json!({
        "id": id, "session_id": session, "turn_id": turn, "kind": spec.kind, "prompt": spec.prompt,
        "scopes": spec.scopes, "status": status, "provider_ref": ProviderRef("7".into()),
        "created_at": Timestamp::now(),
    });
    let mut request: Request = serde_json::from_value(json).expect("request json");
    if status == RequestStatus::Resolved {
        request.response = Some(Response::approve());
    }
    request
}

/// An event of `session` with `seq`.
pub fn event(session: &SessionId, seq: u64, turn: Option<&str>, text: &str) -> Arc<Event> {
    let json = serde_json::json!({
        "schema_version": SCHEMA_VERSION, "id": EventId::generate(), "seq": seq, "session_id": session,
        "turn_id": turn, "provider": ProviderId::new("scripted"), "at": Timestamp::now(),
        "type": "message_delta", "data": {"text": text}, "raw": {"original": text},
    });
    Arc::new(serde_json::from_value(json).expect("event json"))
}

fn seqs(events: &[Arc<Event>]) -> Vec<u64> {
    events.iter().map(|e| e.seq).collect()
}

/// An event like `event(session, seq, turn, text)` but with the ID `id`.
fn event_with_id(session: &SessionId, seq: u64, turn: Option<&str>, text: &str, id: &EventId) -> Arc<Event> {
    let mut event = (*event(session, seq, turn, text)).clone();
    event.id = id.clone();
    Arc::new(event)
}

/// Everything stored under one session.
#[derive(Debug, Default, PartialEq)]
struct Contents {
    snapshot: Option<SessionSnapshot>,
    turns: Vec<Turn>,
    requests: Vec<Request>,
    events: Vec<Arc<Event>>,
}

async fn contents(store: &DynStore, id: &SessionId) -> Contents {
    Contents {
        snapshot: store.fetch_session(id).await.unwrap(),
        turns: store.list_turns(id).await.unwrap(),
        requests: store.list_requests(id).await.unwrap(),
        events: store.read_events(id, &EventQuery::all()).await.unwrap(),
    }
}

/// Stores a session in `status` with a turn `t1`, a request of it and two events.
async fn populated(store: &DynStore, id: &SessionId, status: SessionState) {
    let mut batch = WriteBatch::new(id.clone());
    batch.snapshot = Some(snapshot(id, status));
    batch.turns = vec![turn(id, "t1", TurnStatus::Running)];
    batch.requests = vec![request(id, "t1", "r1", RequestStatus::Pending)];
    batch.events = vec![event(id, 1, None, "ready"), event(id, 2, Some("t1"), "a")];
    store.write(&batch).await.unwrap();
}

/// Deletes a session at the end of a check, closing its snapshot first if it is open (a store
/// refuses to delete an open one).
async fn remove_session(store: &DynStore, id: &SessionId) {
    if let Some(mut snapshot) = store.fetch_session(id).await.unwrap().filter(SessionSnapshot::is_open) {
        snapshot.status = SessionState::Closed;
        store.save_session(&snapshot).await.unwrap();
    }
    store.delete_session(id).await.unwrap();
}
