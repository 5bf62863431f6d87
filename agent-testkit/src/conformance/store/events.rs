//! Events: appended in seq order, read back exactly and by filter, and their IDs unique in a session.

use super::*;

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
