//! Reads: a small pool of read-only connections used on tokio's blocking threads. In WAL mode a
//! reader sees the last commit before its read began and never blocks the writer.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use agent_core::store::{EventQuery, RequestQuery};
use agent_core::{Event, Request, SessionId, StoreError, TurnId};
use rusqlite::{Connection, OptionalExtension, params};
use serde::de::DeserializeOwned;

use crate::error::{corrupt_json, store_error};
use crate::events::{self, Decoder};
use crate::options::SqliteOptions;

/// Reads that run at once, each on a connection of its own kept open between reads; more wait
/// for one. Not more connections opened and closed for a burst: SQLite keeps the descriptor of
/// a connection closed while another one of this process locks the file (the writer always
/// does) for reuse, so the process's descriptors would follow the largest burst for good.
const MAX_READERS: usize = 8;

/// The read side of a store.
#[derive(Debug)]
pub(crate) struct Readers {
    path: PathBuf,
    options: SqliteOptions,
    idle: Mutex<Vec<Connection>>,
    running: Arc<tokio::sync::Semaphore>,
}

impl Readers {
    pub(crate) fn new(path: PathBuf, options: SqliteOptions) -> Self {
        Readers {
            path,
            options,
            idle: Mutex::new(Vec::new()),
            running: Arc::new(tokio::sync::Semaphore::new(MAX_READERS)),
        }
    }

    fn idle(&self) -> MutexGuard<'_, Vec<Connection>> {
        // The guarded vector is always valid, even after a panic elsewhere.
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `read` on a pooled connection on a blocking thread.
    pub(crate) async fn run<T, F>(self: &Arc<Self>, read: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let this = Arc::clone(self);
        // Held by the read itself, which goes on when its caller stops waiting. Never closed.
        let running = Arc::clone(&self.running).acquire_owned().await.expect("the semaphore is never closed");
        tokio::task::spawn_blocking(move || {
            let conn = match this.idle().pop() {
                Some(conn) => conn,
                None => crate::open::open_reader(&this.path, &this.options).map_err(|e| store_error(&e))?,
            };
            let result = read(&conn);
            this.idle().push(conn);
            drop(running);
            result
        })
        .await
        .map_err(|e| StoreError::Backend(format!("a store read did not finish: {e}").into()))?
    }

    /// Closes the idle connections.
    pub(crate) fn close(&self) {
        self.idle().clear();
    }
}

/// How an error names a stored snapshot.
pub(crate) fn snapshot_name(session: &str) -> String {
    format!("snapshot of session `{session}`")
}

/// How an error names a stored turn.
pub(crate) fn turn_name(session: &str, turn: &str) -> String {
    format!("turn `{turn}` of session `{session}`")
}

/// How an error names a stored request.
pub(crate) fn request_name(session: &str, request: &str) -> String {
    format!("request `{request}` of session `{session}`")
}

fn decode<T: DeserializeOwned>(what: &str, json: &str) -> Result<T, StoreError> {
    serde_json::from_str(json).map_err(|e| corrupt_json(what, &e))
}

/// One JSON document selected by `sql` with `params`; `what` names it in an error.
pub(crate) fn one<T: DeserializeOwned>(
    conn: &Connection,
    what: &str,
    sql: &str,
    params: impl rusqlite::Params,
) -> Result<Option<T>, StoreError> {
    let json: Option<String> = conn
        .prepare_cached(sql)
        .and_then(|mut stmt| stmt.query_row(params, |row| row.get(0)).optional())
        .map_err(|e| store_error(&e))?;
    json.map(|json| decode(what, &json)).transpose()
}

/// Every JSON document selected by `sql` with `params`, in the query's order. `sql` selects
/// the document and then the row's key (an ID), which `what(key)` turns into the row's name in
/// an error: one row that does not decode says which it is.
pub(crate) fn all<T: DeserializeOwned>(
    conn: &Connection,
    what: impl Fn(&str) -> String,
    sql: &str,
    params: impl rusqlite::Params,
) -> Result<Vec<T>, StoreError> {
    let mut stmt = conn.prepare_cached(sql).map_err(|e| store_error(&e))?;
    let mut rows = stmt.query(params).map_err(|e| store_error(&e))?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(|e| store_error(&e))? {
        let json = row.get_ref(0).and_then(|v| Ok(v.as_str()?)).map_err(|e| store_error(&e))?;
        out.push(serde_json::from_str(json).map_err(|e| {
            let key = row.get_ref(1).ok().and_then(|v| v.as_str().ok()).unwrap_or("?");
            corrupt_json(&what(key), &e)
        })?);
    }
    Ok(out)
}

/// Events of `session` matching `query`, ascending by seq. Each is one range of an index:
/// `events_by_seq`, or `events_by_turn` (checked by a test below).
const EVENTS: &str = "WHERE e.session_key = (SELECT session_key FROM sessions WHERE id = ?1) AND e.seq > ?2 \
     ORDER BY e.seq LIMIT ?3";
const EVENTS_OF_TURN: &str = "WHERE e.turn_key = \
     (SELECT position FROM turns WHERE session_id = ?1 AND turn_id = ?2) AND e.seq > ?3 ORDER BY e.seq LIMIT ?4";
/// The newest event of one turn: the end of the same `events_by_turn` range.
const LAST_EVENT_OF_TURN: &str = "WHERE e.turn_key = \
     (SELECT position FROM turns WHERE session_id = ?1 AND turn_id = ?2) ORDER BY e.seq DESC LIMIT 1";

/// Events of `session` matching `query`, ascending by seq.
pub(crate) fn events(
    conn: &Connection,
    session: &SessionId,
    query: &EventQuery,
) -> Result<Vec<Arc<Event>>, StoreError> {
    let after = i64::try_from(query.after.unwrap_or(0)).unwrap_or(i64::MAX);
    // A negative LIMIT is no limit.
    let limit = query.limit.map_or(-1, |l| i64::try_from(l).unwrap_or(i64::MAX));
    let sql = |e: rusqlite::Error| store_error(&e);
    let mut stmt;
    let mut rows = match &query.turn {
        None => {
            stmt = conn.prepare_cached(&format!("SELECT {} {EVENTS}", events::COLUMNS)).map_err(sql)?;
            stmt.query(params![session.as_str(), after, limit])
        }
        Some(turn) => {
            stmt = conn.prepare_cached(&format!("SELECT {} {EVENTS_OF_TURN}", events::COLUMNS)).map_err(sql)?;
            stmt.query(params![session.as_str(), turn.as_str(), after, limit])
        }
    }
    .map_err(sql)?;
    let mut decoder = Decoder::new(session.clone());
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(sql)? {
        out.push(Arc::new(decoder.decode(row)?));
    }
    Ok(out)
}

/// The newest event of `turn` in `session`.
pub(crate) fn last_event_of_turn(
    conn: &Connection,
    session: &SessionId,
    turn: &TurnId,
) -> Result<Option<Arc<Event>>, StoreError> {
    let sql = |e: rusqlite::Error| store_error(&e);
    let mut stmt = conn.prepare_cached(&format!("SELECT {} {LAST_EVENT_OF_TURN}", events::COLUMNS)).map_err(sql)?;
    let mut rows = stmt.query(params![session.as_str(), turn.as_str()]).map_err(sql)?;
    let Some(row) = rows.next().map_err(sql)? else { return Ok(None) };
    Ok(Some(Arc::new(Decoder::new(session.clone()).decode(row)?)))
}

/// The request statements, by filter. Each is a plain equality lookup on an index (checked by a
/// test below), and `ORDER BY position` keeps creation order whatever the index order is.
const REQUESTS: &str = "SELECT record, request_id FROM requests WHERE session_id = ?1 ORDER BY position";
const REQUESTS_OF_TURN: &str =
    "SELECT record, request_id FROM requests WHERE session_id = ?1 AND turn_id = ?2 ORDER BY position";
const REQUESTS_WITH_STATUS: &str =
    "SELECT record, request_id FROM requests WHERE session_id = ?1 AND status = ?2 ORDER BY position";
const REQUESTS_OF_TURN_WITH_STATUS: &str = "SELECT record, request_id FROM requests \
     WHERE session_id = ?1 AND turn_id = ?2 AND status = ?3 ORDER BY position";

/// Requests of `session` matching `query`, in creation order.
pub(crate) fn requests(conn: &Connection, session: &str, query: &RequestQuery) -> Result<Vec<Request>, StoreError> {
    let status = query.status.map(crate::rows::status_name).transpose()?;
    let what = |request: &str| request_name(session, request);
    match (&query.turn, &status) {
        (None, None) => all(conn, what, REQUESTS, params![session]),
        (Some(turn), None) => all(conn, what, REQUESTS_OF_TURN, params![session, turn.as_str()]),
        (None, Some(status)) => all(conn, what, REQUESTS_WITH_STATUS, params![session, status]),
        (Some(turn), Some(status)) => {
            all(conn, what, REQUESTS_OF_TURN_WITH_STATUS, params![session, turn.as_str(), status])
        }
    }
}

/// The highest stored seq of `session`.
pub(crate) fn latest_seq(conn: &Connection, session: &str) -> Result<Option<u64>, StoreError> {
    let latest: Option<i64> = conn
        .prepare_cached("SELECT last_seq FROM sessions WHERE id = ?1")
        .and_then(|mut stmt| stmt.query_row([session], |row| row.get(0)).optional())
        .map_err(|e| store_error(&e))?;
    match latest {
        None | Some(0) => Ok(None),
        Some(seq) => {
            u64::try_from(seq).map(Some).map_err(|_| StoreError::Corrupt(format!("stored seq {seq} is negative")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SQLite's plan for `sql`, one line per step.
    fn plan(conn: &Connection, sql: &str, params: impl rusqlite::Params) -> String {
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let steps = stmt.query_map(params, |row| row.get::<_, String>(3)).unwrap();
        steps.map(Result::unwrap).collect::<Vec<_>>().join("\n")
    }

    /// A burst of reads runs at most [`MAX_READERS`] at once, on as many connections kept for
    /// the next reads: the connections (and their descriptors) do not follow the burst.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_burst_of_reads_runs_on_a_bounded_pool() {
        use std::sync::atomic::{AtomicUsize, Ordering};

        let dir = std::env::temp_dir().join(format!("agent-store-sqlite-burst-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("store.db");
        let writer = crate::open::open_writer(&path, &SqliteOptions::default()).unwrap();
        let readers = Arc::new(Readers::new(path, SqliteOptions::default()));
        let (running, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let reads = (0..64).map(|_| {
            let (running, most) = (Arc::clone(&running), Arc::clone(&most));
            readers.run(move |conn| {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                std::thread::sleep(std::time::Duration::from_millis(5));
                let version: i64 = conn.query_row("SELECT 1", [], |row| row.get(0)).map_err(|e| store_error(&e))?;
                running.fetch_sub(1, Ordering::SeqCst);
                Ok(version)
            })
        });
        let read = futures::future::join_all(reads).await;
        assert!(read.iter().all(|r| matches!(r, Ok(1))), "{read:?}");
        let most = most.load(Ordering::SeqCst);
        assert!(most <= MAX_READERS, "{most} reads ran at once");
        assert!(readers.idle().len() <= MAX_READERS, "{} connections kept", readers.idle().len());
        drop((readers, writer));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn request_and_event_queries_are_index_lookups() {
        let dir = std::env::temp_dir().join(format!("agent-store-sqlite-plan-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let conn = crate::open::open_writer(&dir.join("store.db"), &SqliteOptions::default()).unwrap();
        let cases = [
            (REQUESTS_OF_TURN, plan(&conn, REQUESTS_OF_TURN, params!["s", "t"]), "requests_by_turn"),
            (
                REQUESTS_OF_TURN_WITH_STATUS,
                plan(&conn, REQUESTS_OF_TURN_WITH_STATUS, params!["s", "t", "pending"]),
                "requests_by_turn",
            ),
            (REQUESTS_WITH_STATUS, plan(&conn, REQUESTS_WITH_STATUS, params!["s", "pending"]), "requests_by_status"),
        ];
        let events = format!("SELECT {} {EVENTS}", events::COLUMNS);
        let of_turn = format!("SELECT {} {EVENTS_OF_TURN}", events::COLUMNS);
        let last_of_turn = format!("SELECT {} {LAST_EVENT_OF_TURN}", events::COLUMNS);
        let event_plans = [
            (plan(&conn, &events, params!["s", 0, -1]), "events_by_seq"),
            (plan(&conn, &of_turn, params!["s", "t", 0, -1]), "events_by_turn"),
            (plan(&conn, &last_of_turn, params!["s", "t"]), "events_by_turn"),
        ];
        drop(conn);
        let _ = std::fs::remove_dir_all(&dir);
        for (sql, plan, index) in cases {
            assert!(plan.contains(&format!("USING INDEX {index} (")), "{sql} must look up {index}; plan:\n{plan}");
        }
        for (plan, index) in event_plans {
            assert!(plan.contains(&format!("USING INDEX {index} (")), "events must be read by {index}; plan:\n{plan}");
            assert!(!plan.contains("TEMP B-TREE"), "events must come in index order, not sorted; plan:\n{plan}");
        }
    }
}
