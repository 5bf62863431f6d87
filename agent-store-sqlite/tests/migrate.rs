//! Forward migration: a file written by schema version 1 opens, migrates once, keeps every
//! record, and follows the rules of the current version from then on.

mod common;

use std::path::Path;
use std::sync::Arc;

use agent_core::store::{EventQuery, Store};
use agent_core::{
    Event, RequestQuery, RequestStatus, SessionId, SessionSnapshot, SessionState, StoreError, TurnId, TurnStatus,
};
use agent_store_sqlite::{SCHEMA_VERSION, SqliteStore};
use agent_testkit::conformance::store::{event, request, snapshot, turn};
use common::TempDir;
use rusqlite::{Connection, params};

/// Schema version 1 as released (`schema.rs`); a migration never changes once released, so
/// neither does this copy.
const V1: &str = "
CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL);
CREATE TABLE sessions (id TEXT NOT NULL UNIQUE, last_seq INTEGER NOT NULL DEFAULT 0, snapshot TEXT NOT NULL);
CREATE TABLE turns (
    position INTEGER PRIMARY KEY, session_id TEXT NOT NULL, turn_id TEXT NOT NULL, record TEXT NOT NULL,
    UNIQUE (session_id, turn_id)
);
CREATE TABLE requests (
    position INTEGER PRIMARY KEY, session_id TEXT NOT NULL, request_id TEXT NOT NULL, record TEXT NOT NULL,
    UNIQUE (session_id, request_id)
);
CREATE TABLE events (
    session_id TEXT NOT NULL, seq INTEGER NOT NULL, turn_id TEXT, event TEXT NOT NULL,
    UNIQUE (session_id, seq)
);
CREATE INDEX events_by_turn ON events (session_id, turn_id, seq) WHERE turn_id IS NOT NULL;
INSERT INTO schema_version (version, applied_at) VALUES (1, '2026-01-01T00:00:00.000Z');
";

fn sid(id: &str) -> SessionId {
    SessionId::new(id).expect("valid id")
}

fn json<T: serde::Serialize + ?Sized>(value: &T) -> String {
    serde_json::to_string(value).expect("encode")
}

/// Writes rows the way the version 1 writer did.
struct V1File(Connection);

impl V1File {
    fn create(path: &Path) -> Self {
        let conn = Connection::open(path).expect("create");
        conn.execute_batch(V1).expect("version 1 schema");
        V1File(conn)
    }

    fn session(&self, snapshot: &SessionSnapshot, last_seq: i64) {
        self.0
            .execute(
                "INSERT INTO sessions (id, last_seq, snapshot) VALUES (?1, ?2, ?3)",
                params![snapshot.id.as_str(), last_seq, json(snapshot)],
            )
            .unwrap();
    }

    fn turn(&self, session: &SessionId, id: &str) {
        self.0
            .execute(
                "INSERT INTO turns (session_id, turn_id, record) VALUES (?1, ?2, ?3)",
                params![session.as_str(), id, json(&turn(session, id, TurnStatus::Running))],
            )
            .unwrap();
    }

    fn request(&self, session: &SessionId, turn: &str, id: &str, status: RequestStatus) {
        self.0
            .execute(
                "INSERT INTO requests (session_id, request_id, record) VALUES (?1, ?2, ?3)",
                params![session.as_str(), id, json(&request(session, turn, id, status))],
            )
            .unwrap();
    }

    fn event(&self, event: &Event, document: Option<&str>) {
        let document = document.map_or_else(|| json(event), str::to_owned);
        self.0
            .execute(
                "INSERT INTO events (session_id, seq, turn_id, event) VALUES (?1, ?2, ?3, ?4)",
                params![
                    event.session_id.as_str(),
                    i64::try_from(event.seq).unwrap(),
                    event.turn_id.as_ref().map(|t| t.as_str()),
                    document
                ],
            )
            .unwrap();
    }
}

fn schema_versions(path: &Path) -> Vec<u32> {
    let conn = Connection::open(path).unwrap();
    let mut stmt = conn.prepare("SELECT version FROM schema_version ORDER BY version").unwrap();
    stmt.query_map([], |r| r.get(0)).unwrap().map(Result::unwrap).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_1_file_migrates_keeps_its_records_and_follows_the_current_rules() {
    let dir = TempDir::new("migrate-v1");
    let path = dir.path().join("store.db");
    let (open, closed, corrupt) = (sid("legacy-open"), sid("legacy-closed"), sid("legacy-corrupt"));

    // What version 1 accepted: an event ID stored twice, an event of a turn with no record.
    let first = event(&open, 1, None, "ready");
    let tagged = event(&open, 2, Some("t1"), "a");
    let mut repeat = (*event(&open, 3, Some("t1"), "b")).clone();
    repeat.id = tagged.id.clone();
    let repeat = Arc::new(repeat);
    let orphan = event(&open, 4, Some("gone"), "c");
    let legacy = vec![Arc::clone(&first), Arc::clone(&tagged), Arc::clone(&repeat), Arc::clone(&orphan)];
    {
        let file = V1File::create(&path);
        file.session(&snapshot(&open, SessionState::Running), 4);
        file.turn(&open, "t1");
        file.turn(&open, "t2");
        file.request(&open, "t1", "r1", RequestStatus::Resolved);
        file.request(&open, "t2", "r2", RequestStatus::Pending);
        file.request(&open, "t1", "r3", RequestStatus::Pending);
        for event in &legacy {
            file.event(event, None);
        }
        file.session(&snapshot(&closed, SessionState::Closed), 1);
        file.event(&event(&closed, 1, None, "done"), None);
        file.session(&snapshot(&corrupt, SessionState::Closed), 1);
        file.event(&event(&corrupt, 1, None, "lost"), Some("{\"seq\": 1"));
    }

    let store = SqliteStore::open(&path).expect("a version 1 file opens and migrates");
    assert_eq!(schema_versions(&path), (1..=SCHEMA_VERSION).collect::<Vec<_>>(), "every migration is recorded once");

    // Every record is kept, the repeated ID included.
    assert_eq!(store.read_events(&open, &EventQuery::all()).await.unwrap(), legacy, "the journal is kept");
    assert_eq!(store.latest_seq(&open).await.unwrap(), Some(4));
    let turn_events = store.read_events(&open, &EventQuery::all().turn(TurnId::from_string("t1"))).await.unwrap();
    assert_eq!(turn_events, vec![tagged.clone(), repeat.clone()]);
    assert_eq!(store.list_turns(&open).await.unwrap().len(), 2);
    let ids = |requests: Vec<agent_core::Request>| requests.into_iter().map(|r| r.id.to_string()).collect::<Vec<_>>();
    assert_eq!(ids(store.list_requests(&open).await.unwrap()), ["r1", "r2", "r3"]);
    let pending_of_t1 = RequestQuery::all().turn(TurnId::from_string("t1")).status(RequestStatus::Pending);
    assert_eq!(ids(store.read_requests(&open, &pending_of_t1).await.unwrap()), ["r3"], "request columns backfilled");
    assert_eq!(
        ids(store.read_requests(&open, &RequestQuery::all().status(RequestStatus::Pending)).await.unwrap()),
        ["r2", "r3"]
    );
    let unreadable = store.read_events(&corrupt, &EventQuery::all()).await;
    assert!(matches!(unreadable, Err(StoreError::Corrupt(_))), "a corrupt document stays reported: {unreadable:?}");

    // The current rules hold for the migrated data.
    for (used, name) in [(&first, "a backfilled ID"), (&tagged, "an ID stored twice by version 1")] {
        let mut again = (*event(&open, 5, None, "d")).clone();
        again.id = used.id.clone();
        let reused = store.append_events(&open, &[Arc::new(again)]).await;
        assert!(matches!(reused, Err(StoreError::Conflict(_))), "{name} must stay unique: {reused:?}");
    }
    let orphaned = store.append_events(&open, &[event(&open, 5, Some("gone"), "d")]).await;
    assert!(
        matches!(&orphaned, Err(StoreError::UnknownTurn { turn, .. }) if turn.as_str() == "gone"),
        "a turn with no record stays unknown, though version 1 stored an event of it: {orphaned:?}"
    );
    let refused = store.delete_session(&open).await;
    assert!(matches!(refused, Err(StoreError::SessionLive(_))), "{refused:?}");
    store.append_events(&open, &[event(&open, 5, Some("t2"), "d")]).await.expect("a new event appends");
    store.save_request(&request(&open, "t2", "r2", RequestStatus::Resolved)).await.unwrap();
    assert_eq!(
        ids(store.read_requests(&open, &RequestQuery::all().status(RequestStatus::Pending)).await.unwrap()),
        ["r3"],
        "an upsert keeps the request columns current"
    );
    store.delete_session(&closed).await.expect("a closed legacy session deletes");
    drop(store);

    // Opening again migrates nothing more and finds everything.
    let store = SqliteStore::open(&path).expect("reopen");
    assert_eq!(schema_versions(&path), (1..=SCHEMA_VERSION).collect::<Vec<_>>());
    assert_eq!(store.latest_seq(&open).await.unwrap(), Some(5));
    assert_eq!(store.fetch_session(&closed).await.unwrap(), None);
}

/// A row the migration cannot read (a hand-damaged seq that is not an integer) stops it, and the
/// error names the row, so it can be repaired or removed; the file stays at its version.
#[test]
fn a_row_that_stops_the_migration_is_named_and_the_file_is_left_as_it_was() {
    let dir = TempDir::new("migrate-damaged");
    let path = dir.path().join("store.db");
    let id = sid("legacy-damaged");
    let file = V1File::create(&path);
    file.session(&snapshot(&id, SessionState::Idle), 2);
    for seq in 1..=2 {
        file.event(&event(&id, seq, None, "x"), None);
    }
    let damaged = file.0.execute("UPDATE events SET seq = 'two' WHERE seq = 2", []).unwrap();
    assert_eq!(damaged, 1);
    let rowid: i64 = file.0.query_row("SELECT rowid FROM events WHERE seq = 'two'", [], |r| r.get(0)).unwrap();
    drop(file);

    let error = SqliteStore::open(&path).expect_err("the damaged row stops the migration");
    let message = error.to_string();
    assert!(
        message.contains(&format!("event row {rowid} of session `legacy-damaged`")) && message.contains("seq"),
        "{message}"
    );
    assert_eq!(schema_versions(&path), [1], "the migration is rolled back");
}
