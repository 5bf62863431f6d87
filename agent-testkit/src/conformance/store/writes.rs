//! Batched writes: atomic, replacing, refused without a change, at once, queued in order, and checked against their precondition.

use super::*;

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
    refused(store.write(&fresh(Expected::Unreadable)).await, "an unreadable snapshot where none is stored");
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
    // A purge of a snapshot that did not decode, after it was rewritten readable.
    refused(store.write(&fresh(Expected::Unreadable)).await, "an unreadable snapshot where one reads");
    if let Some(now) = store.write_now(&fresh(Expected::Unreadable)) {
        refused(now, "an unreadable snapshot where one reads, written at once");
    }
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
