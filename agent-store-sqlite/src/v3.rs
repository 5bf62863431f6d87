//! The part of the migration to schema version 3 that SQL cannot do alone: moving each version 2
//! event into the compact form, keeping its content identical.
//!
//! Runs inside the migration's transaction, between the statements that create the version 3
//! tables (`sessions_v3`, `turns_v3`, `event_prefixes`, `events_v3`) and those that drop the old
//! ones: a failure anywhere leaves the file at version 2, untouched.

use agent_core::{Event, EventId, SessionId};
use rusqlite::{Connection, OptionalExtension, params};

use crate::events;
use crate::rows::{IdForm, needs_document};

/// Why the events could not be moved: SQLite's error, and the version 2 row it came from when a
/// row's columns would not read (a hand-damaged file: a seq that is not an integer, say), so that
/// the row can be repaired or removed.
#[derive(Debug, thiserror::Error)]
#[error("{}{source}", row.as_ref().map(|row| format!("{row}: ")).unwrap_or_default())]
pub(crate) struct MoveError {
    row: Option<String>,
    #[source]
    source: rusqlite::Error,
}

impl From<rusqlite::Error> for MoveError {
    fn from(source: rusqlite::Error) -> Self {
        MoveError { row: None, source }
    }
}

/// A version 2 event row.
struct OldRow {
    session_id: String,
    session_key: Option<i64>,
    seq: i64,
    turn_id: Option<String>,
    /// `NULL` for a version 1 repeat of an ID (the first row with the ID guards it) or a
    /// document that was not JSON.
    event_id: Option<String>,
    document: String,
}

/// Moves every row of the version 2 `events` table into `events_v3`, session by session in seq
/// order.
///
/// An event whose document decodes, whose columns agree with it, and whose parts rebuild it
/// exactly is stored in parts (read back by `events::Decoder`); any other row keeps its document as it is, so it reads back as it
/// did (or is reported as corrupt as it was). The ID guards uniqueness as version 2's
/// `event_id` column did. A turn named by events without a record gets a `turns_v3` row without
/// one. Events of a session without a snapshot row — no version of the writer stores those —
/// are kept in `events_without_session` with their version 2 columns.
pub(crate) fn move_events(conn: &Connection) -> Result<(), MoveError> {
    let mut read = conn.prepare(
        "SELECT e.session_id, s.session_key, e.seq, e.turn_id, e.event_id, e.event, e.rowid
           FROM events e LEFT JOIN sessions_v3 s ON s.id = e.session_id
          ORDER BY e.session_id, e.seq",
    )?;
    let mut rows = read.query([])?;
    let mut insert = conn.prepare(
        "INSERT INTO events_v3 (session_key, seq, turn_key, prefix_key, event_id, at, provider, kind, raw, document)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    )?;
    let mut turns = TurnKeys::default();
    let (mut moved, mut compact, mut orphaned) = (0u64, 0u64, 0u64);
    while let Some(row) = rows.next()? {
        let old = OldRow::read(row)?;
        let Some(session_key) = old.session_key else {
            keep_without_session(conn, &old)?;
            orphaned += 1;
            continue;
        };
        let turn_key = match &old.turn_id {
            Some(turn) => Some(turns.key(conn, &old.session_id, turn)?),
            None => None,
        };
        let (prefix_key, custom) = match &old.event_id {
            None => (None, None),
            Some(id) => match IdForm::of(&EventId::from_string(id.as_str()), u64::try_from(old.seq).unwrap_or(0)) {
                IdForm::Own { prefix } => {
                    (Some(events::store_prefix(conn, session_key, &id[..prefix], false)?.key), None)
                }
                IdForm::Custom { shaped } => {
                    if let Some((prefix, _)) = shaped {
                        events::store_prefix(conn, session_key, &id[..prefix], true)?;
                    }
                    (None, Some(id.as_str()))
                }
            },
        };
        // In parts, or the version 2 document as it is.
        let parts = in_parts(&old);
        let event = parts.as_ref().map(|(event, _)| event);
        insert.execute(params![
            session_key,
            old.seq,
            turn_key,
            prefix_key,
            custom,
            event.map(|event| event.at.unix_micros()),
            event.map(|event| event.provider.as_str()),
            parts.as_ref().map(|(_, kind)| kind.as_str()),
            event.and_then(|event| event.raw.as_ref()).map(|raw| raw.get()),
            parts.is_none().then_some(old.document.as_str()),
        ])?;
        compact += u64::from(parts.is_some());
        moved += 1;
    }
    if moved + orphaned > 0 {
        tracing::info!(moved, compact, documents = moved - compact, "store events moved to schema version 3");
    }
    if orphaned > 0 {
        tracing::warn!(orphaned, "events of sessions without a snapshot kept in `events_without_session`");
    }
    Ok(())
}

impl OldRow {
    /// The row's columns; an error names the row (its rowid, and its session as far as it
    /// reads).
    fn read(row: &rusqlite::Row<'_>) -> Result<OldRow, MoveError> {
        let read = || -> rusqlite::Result<OldRow> {
            Ok(OldRow {
                session_id: row.get(0)?,
                session_key: row.get(1)?,
                seq: row.get(2)?,
                turn_id: row.get(3)?,
                event_id: row.get(4)?,
                document: row.get(5)?,
            })
        };
        read().map_err(|source| {
            let rowid = row.get::<_, i64>(6).map_or_else(|_| "?".to_owned(), |rowid| rowid.to_string());
            let session = match row.get_ref(0) {
                Ok(rusqlite::types::ValueRef::Text(id)) => format!(" of session `{}`", String::from_utf8_lossy(id)),
                _ => String::new(),
            };
            MoveError { row: Some(format!("moving events to schema version 3, event row {rowid}{session}")), source }
        })
    }
}

/// The event of `old` and its kind's JSON, when the parts rebuild exactly what version 2 read.
fn in_parts(old: &OldRow) -> Option<(Event, String)> {
    let event: Event = serde_json::from_str(&old.document).ok()?;
    let session = SessionId::from_stored(old.session_id.as_str());
    let agrees = old.event_id.as_deref() == Some(event.id.as_str())
        && i64::try_from(event.seq).ok() == Some(old.seq)
        && event.turn_id.as_ref().map(|t| t.as_str()) == old.turn_id.as_deref()
        && !needs_document(&event, &session);
    if !agrees {
        return None;
    }
    if let Some(raw) = &event.raw {
        // What the reader checks.
        agent_core::event::RawJson::from_string(raw.get().to_owned()).ok()?;
    }
    let kind = serde_json::to_string(&event.kind).ok()?;
    // The kind must read back equal (a float, say, that would not).
    let again: agent_core::EventKind = serde_json::from_str(&kind).ok()?;
    (again == event.kind).then_some((event, kind))
}

/// Keeps a row of a session that has no snapshot: not readable through the store (nothing can
/// name its session's key), but not lost.
fn keep_without_session(conn: &Connection, old: &OldRow) -> rusqlite::Result<()> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS events_without_session (
             session_id TEXT NOT NULL, seq INTEGER NOT NULL, turn_id TEXT, event_id TEXT, event TEXT NOT NULL
         )",
    )?;
    conn.prepare_cached(
        "INSERT INTO events_without_session (session_id, seq, turn_id, event_id, event) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![old.session_id, old.seq, old.turn_id, old.event_id, old.document])
    .map(drop)
}

/// `turns_v3.position` by `(session, turn)`, the last one remembered.
#[derive(Default)]
struct TurnKeys {
    last: Option<(String, String, i64)>,
}

impl TurnKeys {
    fn key(&mut self, conn: &Connection, session: &str, turn: &str) -> rusqlite::Result<i64> {
        if let Some((s, t, key)) = &self.last
            && s == session
            && t == turn
        {
            return Ok(*key);
        }
        let found: Option<i64> = conn
            .prepare_cached("SELECT position FROM turns_v3 WHERE session_id = ?1 AND turn_id = ?2")?
            .query_row(params![session, turn], |row| row.get(0))
            .optional()?;
        let key = match found {
            Some(key) => key,
            None => conn
                .prepare_cached(
                    "INSERT INTO turns_v3 (session_id, turn_id, record) VALUES (?1, ?2, NULL) RETURNING position",
                )?
                .query_row(params![session, turn], |row| row.get(0))?,
        };
        self.last = Some((session.to_owned(), turn.to_owned(), key));
        Ok(key)
    }
}
