//! Behaviour beyond the shared suite: persistence across reopen, error mapping, concurrency.

mod common;

use std::sync::Arc;
use std::time::Duration;

use agent_core::event::{RawJson, SharedStr};
use agent_core::store::{EventQuery, Store, WriteBatch};
use agent_core::{Event, EventKind, RequestStatus, SessionId, SessionState, StoreError, TurnId, TurnStatus};
use agent_store_sqlite::{SqliteOptions, SqliteStore};
use agent_testkit::conformance::store::{event, request, snapshot, turn};
use common::TempDir;

fn sid(id: &str) -> SessionId {
    SessionId::new(id).expect("valid id")
}

/// An event whose raw JSON has irregular spacing and escapes that re-serializing would change.
fn raw_event(session: &SessionId, seq: u64, raw: &str) -> Arc<Event> {
    let json = format!(
        r#"{{"schema_version":1,"id":"evt_{seq}","seq":{seq},"session_id":"{session}","turn_id":null,"provider":"codex","at":"2026-01-01T00:00:00.000001Z","type":"provider_event","data":{{"method":"x/y"}},"raw":{raw}}}"#
    );
    Arc::new(serde_json::from_str(&json).expect("event json"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_and_their_raw_bytes_survive_a_reopen() {
    let dir = TempDir::new("reopen");
    let path = dir.path().join("store.db");
    let id = sid("s-reopen");
    let raw = r#"{ "method" : "x/y",  "params":{"list":[1, 2 ,3], "text":"caf\u00e9 \"q\""} }"#;
    {
        let store = SqliteStore::open(&path).unwrap();
        let mut batch = WriteBatch::new(id.clone());
        batch.snapshot = Some(snapshot(&id, SessionState::Idle));
        batch.turns = vec![turn(&id, "t1", TurnStatus::Running)];
        batch.events = vec![raw_event(&id, 1, raw), event(&id, 2, Some("t1"), "hello")];
        store.write(&batch).await.unwrap();
    }
    let store = SqliteStore::open(&path).unwrap();
    let events = store.read_events(&id, &EventQuery::all()).await.unwrap();
    assert_eq!(events.len(), 2);
    assert_eq!(events[0].raw.as_ref().map(|r| r.get()), Some(raw), "raw must be kept byte for byte");
    assert_eq!(store.latest_seq(&id).await.unwrap(), Some(2));
    assert_eq!(store.fetch_session(&id).await.unwrap().map(|s| s.status), Some(SessionState::Idle));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_writes_fail_as_write_refused_while_reads_go_on() {
    let dir = TempDir::new("refuse");
    let store = SqliteStore::open(dir.path().join("store.db")).unwrap();
    let id = sid("s-refuse");
    store.save_session(&snapshot(&id, SessionState::Idle)).await.unwrap();
    store.refuse_writes(true).await.unwrap();
    let refused = store.append_events(&id, &[event(&id, 1, None, "a")]).await;
    assert!(matches!(refused, Err(StoreError::WriteRefused(_))), "{refused:?}");
    assert!(store.fetch_session(&id).await.unwrap().is_some(), "reads keep working");
    assert_eq!(store.latest_seq(&id).await.unwrap(), None, "the refused write changed nothing");
    store.refuse_writes(false).await.unwrap();
    store.append_events(&id, &[event(&id, 1, None, "a")]).await.expect("writes are accepted again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_lock_held_elsewhere_past_the_wait_makes_writes_unavailable_and_retryable() {
    let dir = TempDir::new("busy");
    let path = dir.path().join("store.db");
    let options = SqliteOptions::new().busy_timeout(Duration::from_millis(50)).write_lock_wait(Duration::ZERO);
    let store = SqliteStore::open_with(&path, options).unwrap();
    let id = sid("s-busy");
    let other = rusqlite::Connection::open(&path).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let busy = store.save_session(&snapshot(&id, SessionState::Idle)).await;
    assert!(matches!(&busy, Err(StoreError::Unavailable(_))), "{busy:?}");
    assert!(busy.unwrap_err().is_retryable());
    other.execute_batch("COMMIT").unwrap();
    store.save_session(&snapshot(&id, SessionState::Idle)).await.expect("the retry succeeds");
}

/// A write lock another connection holds for longer than the busy timeout (a maintenance
/// transaction, a `VACUUM`) holds writes back, within `write_lock_wait`, instead of failing
/// them: a failed write would end the durability of the sessions it carried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_waits_out_a_lock_held_elsewhere_for_longer_than_the_busy_timeout() {
    let dir = TempDir::new("busy-wait");
    let path = dir.path().join("store.db");
    let options = SqliteOptions::new().busy_timeout(Duration::from_millis(20)).write_lock_wait(Duration::from_secs(30));
    let store = SqliteStore::open_with(&path, options).unwrap();
    let id = sid("s-busy-wait");
    let other = rusqlite::Connection::open(&path).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let released = std::thread::spawn(move || {
        // Ten busy timeouts.
        std::thread::sleep(Duration::from_millis(200));
        other.execute_batch("COMMIT").unwrap();
    });
    let started = std::time::Instant::now();
    store.save_session(&snapshot(&id, SessionState::Idle)).await.expect("the write waited for the lock");
    assert!(started.elapsed() >= Duration::from_millis(150), "it did wait: {:?}", started.elapsed());
    released.join().unwrap();
    assert_eq!(store.fetch_session(&id).await.unwrap().map(|s| s.status), Some(SessionState::Idle));
}

/// A lock held for good costs one wait, not one per queued write: after a wait ran out, writes
/// fail at the busy timeout until one gets the lock again, and then wait again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_held_for_good_costs_one_wait() {
    let dir = TempDir::new("busy-once");
    let path = dir.path().join("store.db");
    let wait = Duration::from_secs(2);
    let options = SqliteOptions::new().busy_timeout(Duration::from_millis(20)).write_lock_wait(wait);
    let store = SqliteStore::open_with(&path, options).unwrap();
    let id = sid("s-busy-once");
    let other = rusqlite::Connection::open(&path).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let timed = async || {
        let started = std::time::Instant::now();
        let result = store.save_session(&snapshot(&id, SessionState::Idle)).await;
        (result, started.elapsed())
    };
    let (first, waited) = timed().await;
    assert!(matches!(first, Err(StoreError::Unavailable(_))), "{first:?}");
    assert!(waited >= wait, "the first write waited: {waited:?}");
    let (second, waited) = timed().await;
    assert!(matches!(second, Err(StoreError::Unavailable(_))), "{second:?}");
    assert!(waited < wait / 2, "the next one did not wait again: {waited:?}");
    other.execute_batch("COMMIT").unwrap();
    timed().await.0.expect("the lock is free");
    // Got once more, a lock held elsewhere is waited for again.
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let (again, waited) = timed().await;
    assert!(matches!(again, Err(StoreError::Unavailable(_))), "{again:?}");
    assert!(waited >= wait, "waited again: {waited:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undecodable_stored_json_is_reported_as_corrupt() {
    let dir = TempDir::new("corrupt");
    let path = dir.path().join("store.db");
    let store = SqliteStore::open(&path).unwrap();
    let id = sid("s-corrupt");
    store.save_session(&snapshot(&id, SessionState::Idle)).await.unwrap();
    store.append_events(&id, &[event(&id, 1, None, "a")]).await.unwrap();
    let other = rusqlite::Connection::open(&path).unwrap();
    other
        .execute(
            "UPDATE events SET kind_json = '{\"seq\": 1' WHERE session_key = (SELECT session_key FROM sessions WHERE id = ?1)",
            [id.as_str()],
        )
        .unwrap();
    other.execute("UPDATE sessions SET snapshot = '[]' WHERE id = ?1", [id.as_str()]).unwrap();
    let events = store.read_events(&id, &EventQuery::all()).await;
    assert!(matches!(events, Err(StoreError::Corrupt(_))), "{events:?}");
    let snapshot = store.fetch_session(&id).await;
    assert!(matches!(snapshot, Err(StoreError::Corrupt(_))), "{snapshot:?}");
    let retry = store.append_events(&id, &[event(&id, 1, None, "a")]).await;
    assert!(matches!(retry, Err(StoreError::Corrupt(_))), "a retry compared with a corrupt event: {retry:?}");
}

/// A row this build cannot read (damaged, or written by a newer release) is named in the error:
/// the session, and the turn, request or event seq, so a caller knows which one to repair.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_that_does_not_decode_is_named_in_the_error() {
    let dir = TempDir::new("named");
    let path = dir.path().join("store.db");
    let store = SqliteStore::open(&path).unwrap();
    let (a, b) = (sid("a"), sid("b"));
    let mut batch = WriteBatch::new(a.clone());
    batch.snapshot = Some(snapshot(&a, SessionState::Idle));
    batch.turns = vec![turn(&a, "t1", TurnStatus::Completed), turn(&a, "t2", TurnStatus::Completed)];
    batch.requests = vec![request(&a, "t1", "r1", RequestStatus::Resolved)];
    batch.events = (1..=4).map(|seq| event(&a, seq, None, "x")).collect();
    store.write(&batch).await.unwrap();
    store.save_session(&snapshot(&b, SessionState::Idle)).await.unwrap();
    let other = rusqlite::Connection::open(&path).unwrap();
    let damage = |sql: &str| assert_eq!(other.execute(sql, []).unwrap(), 1, "{sql}");
    damage("UPDATE sessions SET snapshot = json_set(snapshot, '$.status', 'paused') WHERE id = 'b'");
    damage("UPDATE turns SET record = json_set(record, '$.status', 'later') WHERE turn_id = 't2'");
    damage("UPDATE requests SET record = '[]' WHERE request_id = 'r1'");
    damage("UPDATE events SET kind_json = '{\"type\":\"future_kind\",\"data\":{}}' WHERE seq = 3");
    let elsewhere = serde_json::to_string(&*event(&a, 99, None, "x")).unwrap();
    other.execute("UPDATE events SET document = ?1 WHERE seq = 2", [elsewhere]).unwrap();

    let corrupt = |result: Result<(), StoreError>, names: &str| match result {
        Err(StoreError::Corrupt(reason)) => assert!(reason.contains(names), "{names:?} not in {reason:?}"),
        other => panic!("expected Corrupt naming {names:?}, got {other:?}"),
    };
    corrupt(store.list_sessions().await.map(drop), "snapshot of session `b`");
    corrupt(store.fetch_session(&b).await.map(drop), "snapshot of session `b`");
    assert!(store.fetch_session(&a).await.unwrap().is_some(), "the other sessions still read");
    corrupt(store.list_turns(&a).await.map(drop), "turn `t2` of session `a`");
    corrupt(store.fetch_turn(&a, &TurnId::new("t2").unwrap()).await.map(drop), "turn `t2` of session `a`");
    corrupt(store.list_requests(&a).await.map(drop), "request `r1` of session `a`");
    corrupt(store.read_events(&a, &EventQuery::after(2)).await.map(drop), "event 3 of session `a`");
    // A whole envelope kept in a row of another seq would come back out of order.
    corrupt(store.read_events(&a, &EventQuery::all()).await.map(drop), "event 2 of session `a`");
    let past = store.read_events(&a, &EventQuery::after(3)).await.unwrap();
    assert_eq!(past.iter().map(|e| e.seq).collect::<Vec<_>>(), [4], "the rows after it still read");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_read_transaction_does_not_block_the_writer() {
    let dir = TempDir::new("readers");
    let path = dir.path().join("store.db");
    let store = SqliteStore::open(&path).unwrap();
    let id = sid("s-readers");
    store.save_session(&snapshot(&id, SessionState::Idle)).await.unwrap();
    store.append_events(&id, &[event(&id, 1, None, "a")]).await.unwrap();

    let reader = rusqlite::Connection::open(&path).unwrap();
    reader.execute_batch("BEGIN").unwrap();
    let count = || reader.query_row("SELECT COUNT(*) FROM events", [], |r| r.get::<_, i64>(0)).unwrap();
    assert_eq!(count(), 1);
    let second = [event(&id, 2, None, "b")];
    let write = store.append_events(&id, &second);
    tokio::time::timeout(Duration::from_secs(5), write).await.expect("the writer is not blocked").unwrap();
    assert_eq!(count(), 1, "the open read transaction keeps its snapshot");
    assert_eq!(store.latest_seq(&id).await.unwrap(), Some(2), "new reads see the commit");
    reader.execute_batch("COMMIT").unwrap();
    assert_eq!(count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_sessions_commit_beside_conflicting_batches() {
    const SESSIONS: usize = 24;
    const BATCHES: u64 = 20;
    const PER_BATCH: u64 = 5;
    let dir = TempDir::new("concurrent");
    let store = Arc::new(SqliteStore::open(dir.path().join("store.db")).unwrap());
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..SESSIONS {
        let store = Arc::clone(&store);
        tasks.spawn(async move {
            let id = sid(&format!("s-{n:02}"));
            let mut conflicts = 0;
            for b in 0..BATCHES {
                let mut batch = WriteBatch::new(id.clone());
                if b == 0 {
                    batch.snapshot = Some(snapshot(&id, SessionState::Running));
                }
                let first = b * PER_BATCH + 1;
                batch.events = (first..first + PER_BATCH).map(|seq| event(&id, seq, None, "x")).collect();
                store.write(&batch).await.expect("a valid batch commits");
                // Every few batches a stale write from the same session, which must fail alone.
                if b % 4 == 3 {
                    let mut stale = WriteBatch::new(id.clone());
                    stale.events = vec![event(&id, first, None, "different")];
                    let result = store.write(&stale).await;
                    assert!(matches!(result, Err(StoreError::Conflict(_))), "{result:?}");
                    conflicts += 1;
                }
            }
            (id, conflicts)
        });
    }
    while let Some(done) = tasks.join_next().await {
        let (id, conflicts) = done.unwrap();
        assert_eq!(conflicts, BATCHES / 4);
        let events = store.read_events(&id, &EventQuery::all()).await.unwrap();
        let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, (1..=BATCHES * PER_BATCH).collect::<Vec<_>>(), "{id}: every committed event, in order");
        assert!(
            events.iter().all(|e| matches!(&e.kind, agent_core::EventKind::MessageDelta { text, .. } if text == "x"))
        );
    }
}

/// A delta's text that its raw payload holds as it is (a slice of the payload, as providers cut
/// a text written without escapes, with a quote after it) is stored once, as its place in the
/// payload, and read back as a slice of the payload read back. Any other text stays in the
/// kind's JSON. A place that does not hold the text reads as corrupt, naming the event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delta_text_in_its_raw_payload_is_stored_once() {
    let dir = TempDir::new("text-once");
    let path = dir.path().join("store.db");
    let store = SqliteStore::open(&path).unwrap();
    let id = sid("s-text");
    store.save_session(&snapshot(&id, SessionState::Idle)).await.unwrap();
    let delta = |seq: u64, body: &str, text: &str| -> Arc<Event> {
        let raw = RawJson::parsed(format!(
            r#"{{"method":"item/agentMessage/delta","params":{{"delta":"{body}"}},"n":{seq}}}"#
        ));
        let text = match raw.get().find(text) {
            Some(start) if !text.is_empty() => raw.share(&raw.get()[start..start + text.len()]),
            _ => SharedStr::from(text),
        };
        let mut event = (*event(&id, seq, None, "x")).clone();
        event.kind = EventKind::MessageDelta { item_id: Some("msg_1".into()), text };
        event.raw = Some(raw);
        Arc::new(event)
    };
    let written = vec![
        delta(1, "plain words", "plain words"),
        delta(2, r#"say \"hi\""#, "say \"hi\""),
        delta(3, r"tab\tx", r"tab\tx"),
        delta(4, "plain words", "plain"),
        delta(5, "", ""),
        delta(6, "plain words", "words"),
    ];
    store.append_events(&id, &written).await.unwrap();

    let other = rusqlite::Connection::open(&path).unwrap();
    let rows: Vec<(i64, String, Option<i64>)> = other
        .prepare("SELECT seq, kind_json, text_at FROM events ORDER BY seq")
        .unwrap()
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let placed: Vec<i64> = rows.iter().filter(|(_, _, at)| at.is_some()).map(|(seq, _, _)| *seq).collect();
    assert_eq!(placed, [1], "only a whole string body as it is in the payload is placed: {rows:?}");
    assert!(!rows[0].1.contains("plain"), "the placed text is not in the kind too: {}", rows[0].1);
    assert!(rows[1].1.contains(r#"say \"hi\""#), "an escaped text stays in the kind: {}", rows[1].1);

    let read = store.read_events(&id, &EventQuery::all()).await.unwrap();
    assert_eq!(read, written);
    let EventKind::MessageDelta { text, .. } = &read[0].kind else { panic!("a delta: {:?}", read[0].kind) };
    assert!(text.lies_in(read[0].raw.as_ref().unwrap().get().as_bytes()), "read back as a slice of the payload");

    // A place off the string's first byte (on its quotes, inside it, past the payload), or on a
    // row whose kind still holds its text.
    let at = rows[0].2.unwrap();
    let damaged =
        [at - 1, at + 1, at + 11, 4000].map(|wrong| (format!("UPDATE events SET text_at = {wrong} WHERE seq = 1"), 1));
    for (sql, seq) in damaged.into_iter().chain([("UPDATE events SET text_at = 5 WHERE seq = 2".to_owned(), 2)]) {
        assert_eq!(other.execute(&sql, []).unwrap(), 1);
        let read = store.read_events(&id, &EventQuery::after(seq - 1)).await;
        match read {
            Err(StoreError::Corrupt(reason)) => {
                assert!(reason.contains(&format!("event {seq} of session `s-text`")), "{reason}");
            }
            other => panic!("{sql}: a place without its text must read as corrupt: {other:?}"),
        }
    }
    // The kind's column is renamed with the format: a process of an earlier build still using
    // the file, or a reader of the old column, fails instead of reading placed texts as empty.
    let old_column = other.prepare("SELECT kind FROM events").map(drop);
    assert!(old_column.is_err_and(|e| e.to_string().contains("no such column")), "the old `kind` column is gone");
}
