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

/// Snapshots save, fetch and replace.
pub async fn snapshots_roundtrip(store: &DynStore) {
    let id = sid("conf-snap");
    assert_eq!(store.fetch_session(&id).await.unwrap(), None, "unknown session must be None");
    let first = snapshot(&id, SessionState::Idle);
    store.save_session(&first).await.unwrap();
    assert_eq!(store.fetch_session(&id).await.unwrap(), Some(first.clone()), "snapshot must round-trip");
    let mut second = first.clone();
    second.status = SessionState::Closed;
    second.provider_session_id = Some("thread-1".into());
    store.save_session(&second).await.unwrap();
    assert_eq!(store.fetch_session(&id).await.unwrap(), Some(second), "save_session must replace");
    store.delete_session(&id).await.unwrap();
}

/// `list_sessions` returns every snapshot ordered by ID.
pub async fn list_is_ordered_by_id(store: &DynStore) {
    let ids = [sid("conf-list-b"), sid("conf-list-a"), sid("conf-list-c")];
    for id in &ids {
        store.save_session(&snapshot(id, SessionState::Idle)).await.unwrap();
    }
    let listed: Vec<SessionId> = store
        .list_sessions()
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .filter(|id| id.as_str().starts_with("conf-list-"))
        .collect();
    assert_eq!(listed, vec![sid("conf-list-a"), sid("conf-list-b"), sid("conf-list-c")], "list must be ordered by id");
    for id in &ids {
        remove_session(store, id).await;
    }
}

/// Deleting a session removes its turns, requests and events; deleting twice is fine.
pub async fn delete_cascades(store: &DynStore) {
    let id = sid("conf-delete");
    store.save_session(&snapshot(&id, SessionState::Closed)).await.unwrap();
    store.save_turn(&turn(&id, "t1", TurnStatus::Completed)).await.unwrap();
    store.save_request(&request(&id, "t1", "r1", RequestStatus::Resolved)).await.unwrap();
    store.append_events(&id, &[event(&id, 1, Some("t1"), "a")]).await.unwrap();
    store.delete_session(&id).await.unwrap();
    assert_eq!(store.fetch_session(&id).await.unwrap(), None);
    assert_eq!(store.fetch_turn(&id, &TurnId::from_string("t1")).await.unwrap(), None, "turns must be deleted");
    assert_eq!(
        store.fetch_request(&id, &RequestId::from_string("r1")).await.unwrap(),
        None,
        "requests must be deleted"
    );
    assert!(store.read_events(&id, &EventQuery::all()).await.unwrap().is_empty(), "events must be deleted");
    assert_eq!(store.latest_seq(&id).await.unwrap(), None);
    store.delete_session(&id).await.expect("deleting an unknown session is Ok");
    // The ID is free again, with no leftovers.
    store.save_session(&snapshot(&id, SessionState::Idle)).await.unwrap();
    assert!(store.list_turns(&id).await.unwrap().is_empty(), "a re-created session starts empty");
    remove_session(store, &id).await;
}

/// Turn, request and event writes for an unknown session fail with `UnknownSession`.
pub async fn children_need_a_session(store: &DynStore) {
    let id = sid("conf-orphan");
    let unknown = |r: Result<(), StoreError>| matches!(r, Err(StoreError::UnknownSession(_)));
    assert!(unknown(store.save_turn(&turn(&id, "t", TurnStatus::Running)).await), "save_turn needs a session");
    assert!(
        unknown(store.save_request(&request(&id, "t", "r", RequestStatus::Pending)).await),
        "save_request needs a session"
    );
    assert!(unknown(store.append_events(&id, &[event(&id, 1, None, "x")]).await), "append needs a session");
    assert_eq!(store.fetch_session(&id).await.unwrap(), None, "a refused write must not create the session");
}

/// Turn and request saves upsert; lists are in creation order.
pub async fn turns_and_requests_upsert(store: &DynStore) {
    let id = sid("conf-records");
    store.save_session(&snapshot(&id, SessionState::Running)).await.unwrap();
    store.save_turn(&turn(&id, "t1", TurnStatus::Running)).await.unwrap();
    store.save_turn(&turn(&id, "t2", TurnStatus::Starting)).await.unwrap();
    store.save_turn(&turn(&id, "t1", TurnStatus::Completed)).await.unwrap();
    let turns = store.list_turns(&id).await.unwrap();
    let listed: Vec<(&str, TurnStatus)> = turns.iter().map(|t| (t.id.as_str(), t.status)).collect();
    assert_eq!(listed, vec![("t1", TurnStatus::Completed), ("t2", TurnStatus::Starting)], "turns must upsert in order");
    let fetched = store.fetch_turn(&id, &TurnId::from_string("t1")).await.unwrap().expect("t1");
    assert_eq!(fetched.result, Some(TurnResult::text("done")), "turn results must round-trip");
    assert!(matches!(fetched.input, TurnInput::Text(ref t) if t == "do it"));

    store.save_request(&request(&id, "t1", "r1", RequestStatus::Pending)).await.unwrap();
    store.save_request(&request(&id, "t1", "r1", RequestStatus::Resolved)).await.unwrap();
    let fetched = store.fetch_request(&id, &RequestId::from_string("r1")).await.unwrap().expect("r1");
    assert_eq!(fetched.status, RequestStatus::Resolved, "requests must upsert");
    assert_eq!(fetched.response, Some(Response::approve()), "the response must be stored");
    assert_eq!(store.list_requests(&id).await.unwrap().len(), 1);
    remove_session(store, &id).await;
}

/// Appends are idempotent per seq, conflicts are refused, order is enforced.
pub async fn append_is_idempotent_and_ordered(store: &DynStore) {
    let id = sid("conf-append");
    store.save_session(&snapshot(&id, SessionState::Running)).await.unwrap();
    let (e1, e2) = (event(&id, 1, None, "a"), event(&id, 2, None, "b"));
    store.append_events(&id, &[Arc::clone(&e1), Arc::clone(&e2)]).await.unwrap();
    store.append_events(&id, &[Arc::clone(&e2)]).await.expect("re-appending an identical event is Ok");
    let conflict = store.append_events(&id, &[event(&id, 2, None, "other")]).await;
    assert!(
        matches!(conflict, Err(StoreError::Conflict(_))),
        "a different event at a used seq must conflict: {conflict:?}"
    );
    assert_eq!(store.latest_seq(&id).await.unwrap(), Some(2));
    let all = store.read_events(&id, &EventQuery::all()).await.unwrap();
    assert_eq!(seqs(&all), vec![1, 2]);
    assert_eq!(*all[0], *e1, "events must round-trip exactly, raw included");
    assert_eq!(all[0].raw.as_ref().map(|r| r.get()), e1.raw.as_ref().map(|r| r.get()));
    remove_session(store, &id).await;
}

/// A `null` where a value may be absent reads back as `null`, not as absent, so an identical
/// event appended again is still identical.
pub async fn explicit_nulls_round_trip(store: &DynStore) {
    let id = sid("conf-nulls");
    store.save_session(&snapshot(&id, SessionState::Running)).await.unwrap();
    store.save_turn(&turn(&id, "t1", TurnStatus::Failed)).await.unwrap();
    let make = |seq: u64, ty: &str, data: serde_json::Value| -> Arc<Event> {
        let json = serde_json::json!({
            "schema_version": SCHEMA_VERSION, "id": EventId::generate(), "seq": seq, "session_id": id,
            "turn_id": "t1", "provider": ProviderId::new("scripted"), "at": Timestamp::now(),
            "type": ty, "data": data,
        });
        Arc::new(serde_json::from_value(json).expect("event json"))
    };
    // Made in code: read from JSON, the nulls would not be there to begin with.
    let mut with_nulls = [
        make(1, "tool_started", serde_json::json!({"item_id": "tool1", "tool": "other", "name": "x"})),
        make(2, "tool_started", serde_json::json!({"item_id": "tool2", "tool": "other", "name": "y"})),
        make(3, "turn_failed", serde_json::json!({"status": "failed", "result": {"reason": "r"}})),
    ];
    match &mut Arc::make_mut(&mut with_nulls[0]).kind {
        EventKind::ToolStarted { input, .. } => *input = Some(serde_json::Value::Null),
        other => panic!("{other:?}"),
    }
    match &mut Arc::make_mut(&mut with_nulls[2]).kind {
        EventKind::TurnFailed(end) => {
            (end.result.error, end.result.details) = (Some(serde_json::Value::Null), Some(serde_json::Value::Null))
        }
        other => panic!("{other:?}"),
    }
    store.append_events(&id, &with_nulls).await.expect("appended");
    let read = store.read_events(&id, &EventQuery::all()).await.unwrap();
    for (read, written) in read.iter().zip(&with_nulls) {
        assert_eq!(**read, **written, "an explicit null reads back as one");
        assert_eq!(serde_json::to_value(&**read).unwrap(), serde_json::to_value(&**written).unwrap());
    }
    store.append_events(&id, &with_nulls).await.expect("the identical events again are Ok");
    remove_session(store, &id).await;
}

/// Seq gaps are allowed.
pub async fn gaps_are_allowed(store: &DynStore) {
    let id = sid("conf-gaps");
    store.save_session(&snapshot(&id, SessionState::Running)).await.unwrap();
    store.append_events(&id, &[event(&id, 1, None, "a"), event(&id, 5, None, "b")]).await.unwrap();
    store.append_events(&id, &[event(&id, 9, None, "c")]).await.unwrap();
    let all = store.read_events(&id, &EventQuery::all()).await.unwrap();
    assert_eq!(seqs(&all), vec![1, 5, 9], "gaps must be kept as they are");
    let below = store.append_events(&id, &[event(&id, 7, None, "late")]).await;
    assert!(
        matches!(below, Err(StoreError::Conflict(_))),
        "a new event below the latest seq must be refused: {below:?}"
    );
    remove_session(store, &id).await;
}

/// Reads filter by `after` (exclusive), turn and limit, ascending.
pub async fn reads_filter_by_seq_turn_and_limit(store: &DynStore) {
    let id = sid("conf-read");
    store.save_session(&snapshot(&id, SessionState::Running)).await.unwrap();
    for name in ["even", "odd"] {
        store.save_turn(&turn(&id, name, TurnStatus::Running)).await.unwrap();
    }
    let events: Vec<_> =
        (1..=10).map(|seq| event(&id, seq, Some(if seq % 2 == 0 { "even" } else { "odd" }), "x")).collect();
    store.append_events(&id, &events).await.unwrap();
    let read = |q: EventQuery| {
        let store = Arc::clone(store);
        let id = id.clone();
        async move { seqs(&store.read_events(&id, &q).await.unwrap()) }
    };
    assert_eq!(read(EventQuery::after(7)).await, vec![8, 9, 10], "after is exclusive");
    assert_eq!(read(EventQuery::after(0).limit(3)).await, vec![1, 2, 3]);
    assert_eq!(read(EventQuery::all().turn(TurnId::from_string("even"))).await, vec![2, 4, 6, 8, 10]);
    assert_eq!(read(EventQuery::after(4).turn(TurnId::from_string("odd")).limit(2)).await, vec![5, 7]);
    assert_eq!(read(EventQuery::after(10)).await, Vec::<u64>::new());
    assert!(read(EventQuery::all().turn(TurnId::from_string("none"))).await.is_empty());
    let other = sid("conf-read-missing");
    assert!(store.read_events(&other, &EventQuery::all()).await.unwrap().is_empty(), "unknown sessions read empty");
    remove_session(store, &id).await;
}

/// [`Store::last_turn_event`](agent_core::store::Store::last_turn_event) is the newest event of
/// the turn asked for, wherever the turn's events lie among other turns' and however many writes
/// brought them.
pub async fn last_turn_event_is_the_turns_newest(store: &DynStore) {
    let id = sid("conf-last-of-turn");
    store.save_session(&snapshot(&id, SessionState::Running)).await.unwrap();
    let last = |turn: &str| {
        let (store, id, turn) = (Arc::clone(store), id.clone(), TurnId::from_string(turn));
        async move { store.last_turn_event(&id, &turn).await.unwrap().map(|e| (e.seq, e.turn_id.clone())) }
    };
    store.save_turn(&turn(&id, "first", TurnStatus::Running)).await.unwrap();
    assert_eq!(last("first").await, None, "a turn without events has none");
    let of = |seq: u64, turn: Option<&str>| event(&id, seq, turn, "x");
    store.append_events(&id, &[of(1, None), of(2, Some("first")), of(3, Some("first"))]).await.unwrap();
    assert_eq!(last("first").await, Some((3, Some(TurnId::from_string("first")))));
    store.save_turn(&turn(&id, "second", TurnStatus::Running)).await.unwrap();
    store.append_events(&id, &[of(4, Some("second")), of(5, Some("first")), of(6, None)]).await.unwrap();
    store.append_events(&id, &[of(7, Some("second")), of(8, Some("second"))]).await.unwrap();
    store.append_events(&id, &[of(9, Some("first")), of(10, None)]).await.unwrap();
    assert_eq!(last("first").await, Some((9, Some(TurnId::from_string("first")))), "turns interleaved");
    assert_eq!(last("second").await, Some((8, Some(TurnId::from_string("second")))));
    assert_eq!(last("unknown").await, None, "an unknown turn has none");
    let other = sid("conf-last-of-turn-missing");
    let missing = store.last_turn_event(&other, &TurnId::from_string("first")).await.unwrap();
    assert!(missing.is_none(), "an unknown session has none: {missing:?}");
    remove_session(store, &id).await;
}

/// A batch with a conflicting event changes nothing.
pub async fn batch_write_is_atomic(store: &DynStore) {
    let id = sid("conf-batch");
    let mut batch = WriteBatch::new(id.clone());
    batch.snapshot = Some(snapshot(&id, SessionState::Idle));
    batch.events = vec![event(&id, 1, None, "ready")];
    store.write(&batch).await.unwrap();

    let mut bad = WriteBatch::new(id.clone());
    let mut changed = snapshot(&id, SessionState::Running);
    changed.provider_session_id = Some("should-not-land".into());
    bad.snapshot = Some(changed);
    bad.turns = vec![turn(&id, "t1", TurnStatus::Starting)];
    bad.events = vec![event(&id, 2, Some("t1"), "a"), event(&id, 1, None, "conflict")];
    let result = store.write(&bad).await;
    assert!(result.is_err(), "a batch with a conflicting event must fail");
    let after = store.fetch_session(&id).await.unwrap().expect("session");
    assert_eq!(after.provider_session_id, None, "a failed batch must not change the snapshot");
    assert_eq!(store.latest_seq(&id).await.unwrap(), Some(1), "a failed batch must not append");
    assert_eq!(
        store.fetch_turn(&id, &TurnId::from_string("t1")).await.unwrap(),
        None,
        "a failed batch must not save turns"
    );
    remove_session(store, &id).await;
}

/// `delete_first` replaces an aggregate in the same write.
pub async fn batch_write_replaces(store: &DynStore) {
    let id = sid("conf-replace");
    store.save_session(&snapshot(&id, SessionState::Closed)).await.unwrap();
    store.save_turn(&turn(&id, "old", TurnStatus::Completed)).await.unwrap();
    store.append_events(&id, &[event(&id, 1, None, "old"), event(&id, 2, None, "old")]).await.unwrap();
    let mut batch = WriteBatch::new(id.clone());
    batch.delete_first = true;
    batch.snapshot = Some(snapshot(&id, SessionState::Idle));
    batch.events = vec![event(&id, 1, None, "new")];
    store.write(&batch).await.unwrap();
    let events = store.read_events(&id, &EventQuery::all()).await.unwrap();
    assert_eq!(seqs(&events), vec![1], "the old journal must be gone");
    assert!(matches!(&events[0].kind, EventKind::MessageDelta { text, .. } if text == "new"));
    assert_eq!(store.fetch_turn(&id, &TurnId::from_string("old")).await.unwrap(), None, "old turns must be gone");
    assert_eq!(store.fetch_session(&id).await.unwrap().map(|s| s.status), Some(SessionState::Idle));
    remove_session(store, &id).await;
}

/// `delete_session` refuses a session whose snapshot is open with `SessionLive` and deletes
/// nothing; closed, abandoned, opening, finalizing and startup-marked snapshots delete; a batch's
/// `delete_first` replaces even an open snapshot.
pub async fn delete_refuses_open_sessions(store: &DynStore) {
    let open = [
        SessionState::Idle,
        SessionState::Starting,
        SessionState::Running,
        SessionState::AwaitingInput,
        SessionState::Cancelling,
        SessionState::Unavailable,
    ];
    for status in open {
        let id = sid(&format!("conf-open-{status}"));
        populated(store, &id, status).await;
        let before = contents(store, &id).await;
        let refused = store.delete_session(&id).await;
        assert!(
            matches!(&refused, Err(StoreError::SessionLive(s)) if *s == id),
            "delete_session must refuse an open ({status}) snapshot with SessionLive naming it: {refused:?}"
        );
        assert_eq!(contents(store, &id).await, before, "a refused delete of a {status} session must delete nothing");
        remove_session(store, &id).await;
    }

    let not_open = [SessionState::Closed, SessionState::Abandoned, SessionState::Opening, SessionState::Finalizing];
    for status in not_open {
        let id = sid(&format!("conf-ended-{status}"));
        populated(store, &id, status).await;
        store.delete_session(&id).await.unwrap_or_else(|e| panic!("a {status} snapshot must delete: {e:?}"));
        assert_eq!(
            contents(store, &id).await,
            Contents { snapshot: None, turns: vec![], requests: vec![], events: vec![] },
            "deleting a {status} session must remove everything under it"
        );
    }

    // A live status whose startup hand-off was never acknowledged: no runtime holds it.
    let id = sid("conf-open-marked");
    populated(store, &id, SessionState::Running).await;
    let mut marked = snapshot(&id, SessionState::Running);
    marked.startup = Some(StartupMarker { attempt_id: "attempt-1".into(), acknowledged: false });
    store.save_session(&marked).await.unwrap();
    store.delete_session(&id).await.unwrap_or_else(|e| panic!("a startup-marked snapshot must delete: {e:?}"));
    assert_eq!(store.fetch_session(&id).await.unwrap(), None, "a startup-marked snapshot must be deleted");

    // The harness's replacement of an open snapshot is deliberate and is not refused.
    let id = sid("conf-open-replaced");
    populated(store, &id, SessionState::Running).await;
    let mut replace = WriteBatch::new(id.clone());
    replace.delete_first = true;
    replace.snapshot = Some(snapshot(&id, SessionState::Finalizing));
    replace.events = vec![event(&id, 1, None, "new")];
    store.write(&replace).await.unwrap_or_else(|e| panic!("delete_first must replace an open snapshot: {e:?}"));
    let replaced = contents(store, &id).await;
    assert_eq!(replaced.snapshot.map(|s| s.status), Some(SessionState::Finalizing), "delete_first must replace");
    assert!(replaced.turns.is_empty() && replaced.requests.is_empty(), "delete_first must drop the old records");
    assert_eq!(seqs(&replaced.events), vec![1], "delete_first must drop the old journal");
    remove_session(store, &id).await;

    store.delete_session(&sid("conf-open-unknown")).await.expect("deleting an unknown session is Ok");
}

/// Event IDs are unique within a session: an ID stored at another seq, or twice in one write, is
/// a `Conflict`; an identical re-append at the same seq stays `Ok`; other sessions may use it.
pub async fn event_ids_are_unique_within_a_session(store: &DynStore) {
    let id = sid("conf-event-ids");
    store.save_session(&snapshot(&id, SessionState::Running)).await.unwrap();
    let first = event(&id, 1, None, "a");
    store.append_events(&id, &[Arc::clone(&first)]).await.unwrap();
    let before = contents(store, &id).await;

    let reused = store.append_events(&id, &[event_with_id(&id, 2, None, "b", &first.id)]).await;
    assert!(
        matches!(reused, Err(StoreError::Conflict(_))),
        "append_events with an event ID stored at another seq must conflict: {reused:?}"
    );
    let mut batch = WriteBatch::new(id.clone());
    batch.events = vec![event(&id, 2, None, "b"), event_with_id(&id, 3, None, "c", &first.id)];
    let reused = store.write(&batch).await;
    assert!(
        matches!(reused, Err(StoreError::Conflict(_))),
        "write with an event ID stored at another seq must conflict: {reused:?}"
    );
    let twice = EventId::generate();
    let pair = [event_with_id(&id, 2, None, "b", &twice), event_with_id(&id, 3, None, "c", &twice)];
    let doubled = store.append_events(&id, &pair).await;
    assert!(
        matches!(doubled, Err(StoreError::Conflict(_))),
        "append_events holding one event ID twice must conflict: {doubled:?}"
    );
    let mut batch = WriteBatch::new(id.clone());
    batch.events = pair.to_vec();
    let doubled = store.write(&batch).await;
    assert!(
        matches!(doubled, Err(StoreError::Conflict(_))),
        "a batch holding one event ID twice must conflict: {doubled:?}"
    );
    let same = event(&id, 2, None, "b");
    let repeated = store.append_events(&id, &[Arc::clone(&same), same]).await;
    assert!(
        matches!(repeated, Err(StoreError::Conflict(_))),
        "append_events holding one event twice must conflict: {repeated:?}"
    );
    assert_eq!(contents(store, &id).await, before, "a refused duplicate event ID must change nothing");

    store.append_events(&id, &[Arc::clone(&first)]).await.expect("an identical re-append at the same seq is Ok");
    let mut batch = WriteBatch::new(id.clone());
    batch.events = vec![Arc::clone(&first), event(&id, 2, None, "b")];
    store.write(&batch).await.expect("a batch re-appending an identical event at its seq is Ok");
    assert_eq!(seqs(&store.read_events(&id, &EventQuery::all()).await.unwrap()), vec![1, 2]);

    let other = sid("conf-event-ids-other");
    store.save_session(&snapshot(&other, SessionState::Running)).await.unwrap();
    store
        .append_events(&other, &[event_with_id(&other, 1, None, "a", &first.id)])
        .await
        .expect("event IDs are unique per session: another session may use the same ID");

    // A replacement drops the old journal, and with it the IDs it used.
    let mut replace = WriteBatch::new(id.clone());
    replace.delete_first = true;
    replace.snapshot = Some(snapshot(&id, SessionState::Idle));
    replace.events = vec![event_with_id(&id, 1, None, "again", &first.id)];
    store.write(&replace).await.expect("after delete_first an old event ID is free again");
    remove_session(store, &id).await;
    remove_session(store, &other).await;
}

/// The runtime names events `<prefix>.<seq>` (one prefix per run of a session); a store that
/// rebuilds such IDs from the seq must still refuse them when repeated.
pub async fn ids_made_in_sequence_are_unique_too(store: &DynStore) {
    ids_in_sequence_are_unique(store, "conf-event-ids-in-sequence", |prefix, seq| {
        EventId::from_string(format!("{prefix}.{seq}"))
    })
    .await;
}

/// [`ids_made_in_sequence_are_unique_too`] with the IDs as the session runtime makes them
/// ([`EventId::in_sequence`]: written in place, with their parts at hand).
pub async fn ids_made_in_place_are_unique_too(store: &DynStore) {
    ids_in_sequence_are_unique(store, "conf-event-ids-in-place", EventId::in_sequence).await;
}

async fn ids_in_sequence_are_unique(store: &DynStore, session: &str, make_id: fn(&str, u64) -> EventId) {
    let id = sid(session);
    store.save_session(&snapshot(&id, SessionState::Running)).await.unwrap();
    let made = |seq: u64, prefix: &str, id_seq: u64| event_with_id(&id, seq, None, "x", &make_id(prefix, id_seq));
    store.append_events(&id, &[made(1, "evt_run1", 1), made(2, "evt_run1", 2)]).await.unwrap();
    let before = contents(store, &id).await;

    let reused = store.append_events(&id, &[made(3, "evt_run1", 1)]).await;
    assert!(matches!(reused, Err(StoreError::Conflict(_))), "the ID of seq 1 reused at seq 3: {reused:?}");
    let twice = store.append_events(&id, &[made(3, "evt_run1", 3), made(4, "evt_run1", 3)]).await;
    assert!(matches!(twice, Err(StoreError::Conflict(_))), "one write using seq 3's ID twice: {twice:?}");
    let custom_first = store.append_events(&id, &[made(3, "evt_run1", 4), made(4, "evt_run1", 4)]).await;
    assert!(
        matches!(custom_first, Err(StoreError::Conflict(_))),
        "seq 4's ID taken earlier in the write: {custom_first:?}"
    );
    assert_eq!(contents(store, &id).await, before, "a refused write changes nothing");

    // A later run of the session uses a prefix of its own; the IDs read back as written.
    let next_run = [made(3, "evt_run2", 3), made(4, "evt_run2", 4)];
    store.append_events(&id, &next_run).await.unwrap();
    let ids: Vec<String> =
        store.read_events(&id, &EventQuery::all()).await.unwrap().iter().map(|e| e.id.to_string()).collect();
    assert_eq!(ids, ["evt_run1.1", "evt_run1.2", "evt_run2.3", "evt_run2.4"]);
    let reused = store.append_events(&id, &[made(5, "evt_run1", 2)]).await;
    assert!(matches!(reused, Err(StoreError::Conflict(_))), "an earlier run's ID reused: {reused:?}");
    // A custom ID shaped like a later event's own: that event may not use it any more.
    store.append_events(&id, &[made(5, "evt_run3", 6)]).await.unwrap();
    let taken = store.append_events(&id, &[made(6, "evt_run3", 6)]).await;
    assert!(matches!(taken, Err(StoreError::Conflict(_))), "seq 6's own ID, taken by seq 5: {taken:?}");
    remove_session(store, &id).await;
}

/// A request, or an event with a `turn_id`, must name a turn the session has a record of
/// (stored earlier or in the same batch), else `UnknownTurn`; events without a turn need none.
pub async fn requests_and_turn_events_need_their_turn(store: &DynStore) {
    let id = sid("conf-turn-refs");
    let other = sid("conf-turn-refs-other");
    store.save_session(&snapshot(&id, SessionState::Running)).await.unwrap();
    store.save_session(&snapshot(&other, SessionState::Running)).await.unwrap();
    // A turn of another session does not count.
    store.save_turn(&turn(&other, "elsewhere", TurnStatus::Running)).await.unwrap();
    let unknown = |result: &Result<(), StoreError>, turn: &str| matches!(result, Err(StoreError::UnknownTurn { session, turn: t }) if *session == id && t.as_str() == turn);
    let before = contents(store, &id).await;

    let saved = store.save_request(&request(&id, "missing", "r1", RequestStatus::Pending)).await;
    assert!(unknown(&saved, "missing"), "save_request of an unknown turn must be UnknownTurn naming it: {saved:?}");
    let saved = store.save_request(&request(&id, "elsewhere", "r1", RequestStatus::Pending)).await;
    assert!(unknown(&saved, "elsewhere"), "a turn of another session must not count: {saved:?}");
    let appended = store.append_events(&id, &[event(&id, 1, None, "a"), event(&id, 2, Some("missing"), "b")]).await;
    assert!(
        unknown(&appended, "missing"),
        "append_events with an unknown turn_id must be UnknownTurn naming it: {appended:?}"
    );
    let mut batch = WriteBatch::new(id.clone());
    batch.requests = vec![request(&id, "missing", "r1", RequestStatus::Pending)];
    let written = store.write(&batch).await;
    assert!(unknown(&written, "missing"), "a batch request of an unknown turn must be UnknownTurn: {written:?}");
    let mut batch = WriteBatch::new(id.clone());
    batch.turns = vec![turn(&id, "t1", TurnStatus::Running)];
    batch.events = vec![event(&id, 1, Some("t1"), "a"), event(&id, 2, Some("missing"), "b")];
    let written = store.write(&batch).await;
    assert!(unknown(&written, "missing"), "a batch event of an unknown turn must be UnknownTurn: {written:?}");
    assert_eq!(contents(store, &id).await, before, "a write refused for an unknown turn must change nothing");

    // The turn in the same batch counts: a batch applies turns before requests and events.
    let mut batch = WriteBatch::new(id.clone());
    batch.events = vec![event(&id, 1, None, "untagged"), event(&id, 2, Some("t1"), "a")];
    batch.requests = vec![request(&id, "t1", "r1", RequestStatus::Pending)];
    batch.turns = vec![turn(&id, "t1", TurnStatus::Running)];
    store.write(&batch).await.expect("a batch holding the turn its request and events name is Ok");
    // And a stored turn counts later.
    store.save_request(&request(&id, "t1", "r2", RequestStatus::Pending)).await.expect("a stored turn counts");
    store.append_events(&id, &[event(&id, 3, Some("t1"), "b")]).await.expect("a stored turn counts");
    store.append_events(&id, &[event(&id, 4, None, "c")]).await.expect("events without a turn need none");

    // A replacement deletes the old turns first: they no longer count.
    let mut replace = WriteBatch::new(id.clone());
    replace.delete_first = true;
    replace.snapshot = Some(snapshot(&id, SessionState::Finalizing));
    replace.events = vec![event(&id, 1, Some("t1"), "stale")];
    let replaced = store.write(&replace).await;
    assert!(unknown(&replaced, "t1"), "after delete_first the old turns must not count: {replaced:?}");
    assert_eq!(store.latest_seq(&id).await.unwrap(), Some(4), "the refused replacement must change nothing");
    remove_session(store, &id).await;
    remove_session(store, &other).await;
}

/// `read_requests` filters by turn and status and returns requests in creation order (an upsert
/// keeps a request's place).
pub async fn requests_are_read_by_turn_and_status(store: &DynStore) {
    let id = sid("conf-request-query");
    store.save_session(&snapshot(&id, SessionState::Running)).await.unwrap();
    for name in ["t1", "t2", "t3"] {
        store.save_turn(&turn(&id, name, TurnStatus::Running)).await.unwrap();
    }
    // Created in this order; r1 is resolved after the others exist.
    let created = [
        ("t1", "r1", RequestStatus::Pending),
        ("t2", "r2", RequestStatus::Resolved),
        ("t1", "r3", RequestStatus::Pending),
        ("t2", "r4", RequestStatus::Pending),
        ("t1", "r5", RequestStatus::Expired),
    ];
    for (turn, request_id, status) in created {
        store.save_request(&request(&id, turn, request_id, status)).await.unwrap();
    }
    store.save_request(&request(&id, "t1", "r1", RequestStatus::Resolved)).await.unwrap();

    let read = |query: RequestQuery| {
        let store = Arc::clone(store);
        let id = id.clone();
        async move {
            let requests = store.read_requests(&id, &query).await.unwrap();
            requests.iter().map(|r| r.id.as_str().to_owned()).collect::<Vec<_>>()
        }
    };
    let t = TurnId::from_string;
    assert_eq!(read(RequestQuery::all()).await, ["r1", "r2", "r3", "r4", "r5"], "all requests, in creation order");
    assert_eq!(
        read(RequestQuery::all().turn(t("t1"))).await,
        ["r1", "r3", "r5"],
        "requests of a turn, in creation order"
    );
    assert_eq!(read(RequestQuery::all().status(RequestStatus::Pending)).await, ["r3", "r4"], "requests by status");
    assert_eq!(
        read(RequestQuery::all().status(RequestStatus::Resolved)).await,
        ["r1", "r2"],
        "requests by their latest status, in creation order"
    );
    assert_eq!(
        read(RequestQuery::all().turn(t("t1")).status(RequestStatus::Pending)).await,
        ["r3"],
        "requests by turn and status"
    );
    assert!(read(RequestQuery::all().turn(t("t3"))).await.is_empty(), "a turn without requests reads empty");
    assert!(read(RequestQuery::all().turn(t("nope"))).await.is_empty(), "an unknown turn reads empty");
    let listed = store.list_requests(&id).await.unwrap();
    let full = store.read_requests(&id, &RequestQuery::all().turn(t("t2"))).await.unwrap();
    assert_eq!(full, vec![listed[1].clone(), listed[3].clone()], "read_requests must return the stored records");
    let missing = store.read_requests(&sid("conf-request-query-missing"), &RequestQuery::all()).await.unwrap();
    assert!(missing.is_empty(), "an unknown session reads empty");
    remove_session(store, &id).await;
}

/// Every refused write changes nothing: a batch refused by any rule — an event ID stored or
/// repeated, an unknown turn, a seq conflict — leaves the snapshot, turns, requests and journal as
/// they were, also when it would have replaced the session first.
pub async fn refused_writes_change_nothing(store: &DynStore) {
    let id = sid("conf-refused");
    populated(store, &id, SessionState::Running).await;
    let stored = store.read_events(&id, &EventQuery::all()).await.unwrap();
    let before = contents(store, &id).await;

    let twice = EventId::generate();
    let ev = |seq: u64, turn: Option<&str>| event(&id, seq, turn, "x");
    let ev_id = |seq: u64, event_id: &EventId| event_with_id(&id, seq, None, "x", event_id);
    /// Whether a write was refused with the error its case expects.
    type Expected = fn(&Result<(), StoreError>) -> bool;
    let conflict: Expected = |r| matches!(r, Err(StoreError::Conflict(_)));
    let unknown_turn: Expected = |r| matches!(r, Err(StoreError::UnknownTurn { .. }));
    // (rule broken, delete_first, the batch's events, the error expected); only the last event
    // breaks the rule.
    let cases: [(&str, bool, Vec<Arc<Event>>, Expected); 7] = [
        (
            "an event ID stored at another seq",
            false,
            vec![ev(3, Some("t2")), ev(4, None), ev_id(5, &stored[0].id)],
            conflict,
        ),
        ("an event ID twice in the batch", false, vec![ev_id(3, &twice), ev(4, None), ev_id(5, &twice)], conflict),
        ("an event ID twice in the batch", true, vec![ev_id(3, &twice), ev(4, None), ev_id(5, &twice)], conflict),
        ("an unknown turn", false, vec![ev(3, Some("t2")), ev(4, None), ev(5, Some("missing"))], unknown_turn),
        ("an unknown turn", true, vec![ev(3, Some("t2")), ev(4, None), ev(5, Some("missing"))], unknown_turn),
        ("a different event at a used seq", false, vec![ev(3, Some("t2")), ev(4, None), ev(2, Some("t1"))], conflict),
        ("a seq below the batch's latest", true, vec![ev(3, Some("t2")), ev(4, None), ev(1, None)], conflict),
    ];
    for (rule, delete_first, events, expected) in cases {
        // Besides its events, each batch carries a changed snapshot, a new turn, an updated
        // turn, a new request and an updated request.
        let mut changed = snapshot(&id, SessionState::AwaitingInput);
        changed.provider_session_id = Some("must-not-land".into());
        let mut batch = WriteBatch::new(id.clone());
        batch.delete_first = delete_first;
        batch.snapshot = Some(changed);
        batch.turns = vec![turn(&id, "t2", TurnStatus::Running), turn(&id, "t1", TurnStatus::Completed)];
        batch.requests =
            vec![request(&id, "t2", "r2", RequestStatus::Pending), request(&id, "t1", "r1", RequestStatus::Resolved)];
        batch.events = events;
        let result = store.write(&batch).await;
        assert!(expected(&result), "a batch with {rule} (delete_first: {delete_first}) must be refused: {result:?}");
        assert_eq!(
            contents(store, &id).await,
            before,
            "a batch refused for {rule} (delete_first: {delete_first}) must change nothing: {result:?}"
        );
    }
    remove_session(store, &id).await;
}

/// [`Store::write_now`](agent_core::Store::write_now), where a store offers it, is the same write
/// as [`Store::write`](agent_core::Store::write): what it commits reads back the same, and a
/// batch it refuses changes nothing. A store that answers `None` (its writes wait) passes.
pub async fn writes_at_once_are_writes(store: &DynStore) {
    let id = sid("conf-write-now");
    let mut batch = WriteBatch::new(id.clone());
    batch.snapshot = Some(snapshot(&id, SessionState::Running));
    batch.turns = vec![turn(&id, "t1", TurnStatus::Running)];
    batch.requests = vec![request(&id, "t1", "r1", RequestStatus::Pending)];
    batch.events = vec![event(&id, 1, None, "ready"), event(&id, 2, Some("t1"), "a")];
    let Some(written) = store.write_now(&batch) else { return };
    written.expect("the batch commits at once");
    let stored = contents(store, &id).await;
    assert_eq!(stored.snapshot, batch.snapshot);
    assert_eq!(stored.turns, batch.turns);
    assert_eq!(stored.requests, batch.requests);
    assert_eq!(stored.events, batch.events);

    let mut bad = WriteBatch::new(id.clone());
    bad.turns = vec![turn(&id, "t2", TurnStatus::Starting)];
    bad.events = vec![event(&id, 3, Some("t2"), "b"), event(&id, 2, None, "conflict")];
    let refused = store.write_now(&bad).expect("answered at once as before");
    assert!(matches!(refused, Err(StoreError::Conflict(_))), "{refused:?}");
    assert_eq!(contents(store, &id).await, stored, "a refused write changes nothing");
    remove_session(store, &id).await;
}

/// [`Store::enqueue`](agent_core::Store::enqueue), where a store offers it: batches queued one
/// after another commit in that order and read back as written; a batch queued with `follows`
/// behind one that fails is refused and changes nothing; one queued without `follows` after it
/// applies. A store that answers `None` passes.
pub async fn queued_writes_commit_in_order(store: &DynStore) {
    let id = sid("conf-enqueue");
    let mut first = WriteBatch::new(id.clone());
    first.snapshot = Some(snapshot(&id, SessionState::Running));
    first.turns = vec![turn(&id, "t1", TurnStatus::Running)];
    first.events = vec![event(&id, 1, None, "ready")];
    let Some(first_commit) = store.enqueue(&first, false) else { return };
    // Queued before the first committed: each depends on the one before it.
    let batches: Vec<WriteBatch> = (2..=4)
        .map(|seq| {
            let mut batch = WriteBatch::new(id.clone());
            batch.events = vec![event(&id, seq, Some("t1"), "x")];
            batch
        })
        .collect();
    let commits: Vec<_> =
        batches.iter().map(|b| store.enqueue(b, true).expect("a store that queued one queues the next")).collect();
    first_commit.await.expect("the first queued batch commits");
    for commit in commits {
        commit.await.expect("a queued batch commits after the one before it");
    }
    let stored = contents(store, &id).await;
    assert_eq!(seqs(&stored.events), vec![1, 2, 3, 4], "queued batches commit in the order they were queued");
    assert_eq!(stored.turns, first.turns);

    // A conflicting batch fails; the one queued behind it must not leave a gap.
    let mut conflicting = WriteBatch::new(id.clone());
    conflicting.events = vec![event(&id, 4, None, "not the stored event")];
    let mut behind = WriteBatch::new(id.clone());
    behind.events = vec![event(&id, 5, Some("t1"), "after the failure")];
    let failed = store.enqueue(&conflicting, true).expect("queued");
    let refused = store.enqueue(&behind, true).expect("queued");
    assert!(matches!(failed.await, Err(StoreError::Conflict(_))), "a used seq with another event is a conflict");
    assert!(refused.await.is_err(), "a batch queued behind a failed one must fail too");
    assert_eq!(contents(store, &id).await, stored, "the refused batches change nothing");
    let after = store.enqueue(&behind, false).expect("queued");
    after.await.expect("a batch that does not follow the failed one applies");
    let stored = contents(store, &id).await;
    assert_eq!(seqs(&stored.events), vec![1, 2, 3, 4, 5]);

    // A batch the store refuses before applying anything (an ID twice in it) counts as failed
    // for what is queued behind it too.
    let twice = EventId::generate();
    let mut repeated = WriteBatch::new(id.clone());
    repeated.events = vec![event_with_id(&id, 6, None, "a", &twice), event_with_id(&id, 7, None, "b", &twice)];
    let mut next = WriteBatch::new(id.clone());
    next.events = vec![event(&id, 8, Some("t1"), "after the refused batch")];
    let refused_first = store.enqueue(&repeated, true).expect("queued");
    let refused_next = store.enqueue(&next, true).expect("queued");
    assert!(matches!(refused_first.await, Err(StoreError::Conflict(_))), "an ID twice in one write is a conflict");
    assert!(refused_next.await.is_err(), "a batch queued behind a refused one must fail too");
    assert_eq!(contents(store, &id).await, stored, "the refused batches change nothing");
    remove_session(store, &id).await;
}

/// A batch with a precondition ([`Expected`]) commits only when the stored snapshot is the
/// expected one, through every way a store takes a write; otherwise it is
/// [`StoreError::Conflict`] and changes nothing — a replacement deletes nothing either.
pub async fn writes_check_their_precondition(store: &DynStore) {
    let id = sid("conf-expect");
    let fresh = |expect: Expected| {
        let mut batch = WriteBatch::new(id.clone());
        batch.delete_first = true;
        batch.snapshot = Some(snapshot(&id, SessionState::Starting));
        batch.events = vec![event(&id, 1, None, "fresh")];
        batch.expect = Some(expect);
        batch
    };
    let refused = |result: Result<(), StoreError>, why: &str| {
        assert!(matches!(result, Err(StoreError::Conflict(_))), "a batch expecting {why} must be refused: {result:?}");
    };

    // Nothing stored: a batch expecting a snapshot is refused, one expecting none commits.
    let absent = snapshot(&id, SessionState::Idle);
    refused(store.write(&fresh(Expected::Snapshot(Box::new(absent)))).await, "a snapshot where none is stored");
    assert_eq!(contents(store, &id).await, Contents::default(), "a refused write stores nothing");
    store.write(&fresh(Expected::Absent)).await.unwrap_or_else(|e| panic!("expecting no snapshot must commit: {e:?}"));
    assert_eq!(seqs(&contents(store, &id).await.events), vec![1], "the batch expecting no snapshot must land");
    remove_session(store, &id).await;

    // Something stored: expecting none, or another snapshot, is refused and deletes nothing.
    populated(store, &id, SessionState::Running).await;
    let stored = contents(store, &id).await;
    let read = stored.snapshot.clone().expect("stored");
    refused(store.write(&fresh(Expected::Absent)).await, "no snapshot where one is stored");
    let mut other = read.clone();
    other.status = SessionState::Closed;
    refused(store.write(&fresh(Expected::Snapshot(Box::new(other.clone())))).await, "another snapshot");
    assert_eq!(contents(store, &id).await, stored, "a refused replacement must change nothing");
    if let Some(now) = store.write_now(&fresh(Expected::Snapshot(Box::new(other.clone())))) {
        refused(now, "another snapshot, written at once");
    }
    if let Some(queued) = store.enqueue(&fresh(Expected::Snapshot(Box::new(other))), false) {
        refused(queued.await, "another snapshot, queued");
    }
    assert_eq!(contents(store, &id).await, stored, "a refused replacement must change nothing");

    // The snapshot as it was read back: the replacement commits.
    store
        .write(&fresh(Expected::stored(Some(read))))
        .await
        .unwrap_or_else(|e| panic!("the read snapshot must commit: {e:?}"));
    let replaced = contents(store, &id).await;
    assert_eq!(replaced.snapshot.map(|s| s.status), Some(SessionState::Starting), "the replacement must land");
    assert_eq!(seqs(&replaced.events), vec![1], "the replacement must drop the old journal");

    // The snapshot as it was written, not read back: a batch expecting it commits, so the written
    // snapshot must read back equal.
    let mut written = snapshot(&id, SessionState::Starting);
    written.startup =
        Some(serde_json::from_value(serde_json::json!({"attempt_id": "a1", "acknowledged": false})).unwrap());
    written.published_seq = Some(1);
    let mut start = WriteBatch::new(id.clone());
    start.snapshot = Some(written.clone());
    store.write(&start).await.unwrap();
    let mut undo = WriteBatch::new(id.clone());
    undo.delete_first = true;
    undo.expect = Some(Expected::Snapshot(Box::new(written)));
    store.write(&undo).await.unwrap_or_else(|e| panic!("the written snapshot must commit: {e:?}"));
    assert_eq!(contents(store, &id).await, Contents::default(), "the delete expecting it must land");
}
