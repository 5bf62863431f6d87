//! Snapshots, turns and requests: saved, read back, listed, deleted, and tied to their session and turn.

use super::*;

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
