//! The database schema and its forward migrations.
//!
//! `schema_version` holds one row per applied migration; the highest `version` is the schema
//! version of the file. A file whose version is above [`SCHEMA_VERSION`] is refused at open and
//! left untouched. Migrations only move forward, each in the same transaction as its
//! `schema_version` row.

use std::path::Path;

use rusqlite::{Connection, TransactionBehavior};

use crate::error::OpenError;

/// The newest schema version this build reads and writes.
pub const SCHEMA_VERSION: u32 = 4;

/// One step of a migration.
#[derive(Clone, Copy)]
enum Step {
    /// Statements.
    Sql(&'static str),
    /// Work SQL cannot do alone, on the migration's transaction. Its error may name the row
    /// that stopped it.
    Rust(fn(&Connection) -> Result<(), crate::v3::MoveError>),
}

/// `MIGRATIONS[n]` upgrades a database from version `n` to `n + 1`; version 0 is an empty file.
/// A released migration never changes: files in the field were migrated by it.
const MIGRATIONS: [&[Step]; SCHEMA_VERSION as usize] = [
    &[Step::Sql(V1)],
    &[Step::Sql(V2)],
    &[Step::Sql(V3_TABLES), Step::Rust(crate::v3::move_events), Step::Sql(V3_SWAP)],
    &[Step::Sql(V4)],
];

/// Version 1. Records are JSON documents in TEXT columns, written with agent-core's serde forms,
/// so an event's `raw` payload is stored byte for byte. Keys are the columns the store looks up by.
/// `sessions.last_seq` is the highest stored seq of the session's events (0 for none), kept by
/// the writer in the same transaction as the events. Rowid tables throughout: event and record
/// documents can be large, and `position` keeps the creation order of turns and requests (an
/// upsert keeps the row, and so its position).
const V1: &str = "
CREATE TABLE schema_version (
    version    INTEGER PRIMARY KEY,
    applied_at TEXT NOT NULL
);
CREATE TABLE sessions (
    id       TEXT NOT NULL UNIQUE,
    last_seq INTEGER NOT NULL DEFAULT 0,
    snapshot TEXT NOT NULL
);
CREATE TABLE turns (
    position   INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL,
    turn_id    TEXT NOT NULL,
    record     TEXT NOT NULL,
    UNIQUE (session_id, turn_id)
);
CREATE TABLE requests (
    position   INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL,
    request_id TEXT NOT NULL,
    record     TEXT NOT NULL,
    UNIQUE (session_id, request_id)
);
CREATE TABLE events (
    session_id TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    turn_id    TEXT,
    event      TEXT NOT NULL,
    UNIQUE (session_id, seq)
);
CREATE INDEX events_by_turn ON events (session_id, turn_id, seq) WHERE turn_id IS NOT NULL;
";

/// Version 2: event IDs unique within a session, and requests readable by turn and status.
///
/// `events.event_id` is the event's ID; `events_by_id` keeps the pair (ID, session) unique, so the
/// insert itself refuses an ID the session used before, with no lookup per event. The ID leads the
/// key because generated IDs start with their creation time: the events a group commits land
/// together at the end of the index rather than on one page per session, which costs the writer
/// less (measured) than `(session_id, event_id)`.
/// Version 1 accepted an ID twice; backfilling keeps the ID on its first row (rowids grow with
/// seq within a session) and leaves later repeats `NULL` — NULLs are distinct in a unique index —
/// so such a file migrates, every event stays readable, and a new event reusing the ID still
/// conflicts with the first. A document that is not valid JSON is left for the reader to report
/// as corrupt rather than failing the migration (and so the open).
/// `requests.turn_id` and `requests.status` copy the record's fields for `requests_by_turn` and
/// `requests_by_status`; the writer sets them with every upsert.
const V2: &str = "
ALTER TABLE events ADD COLUMN event_id TEXT;
UPDATE events SET event_id = json_extract(event, '$.id') WHERE json_valid(event);
UPDATE events SET event_id = NULL
 WHERE rowid NOT IN (SELECT MIN(rowid) FROM events GROUP BY session_id, event_id);
CREATE UNIQUE INDEX events_by_id ON events (event_id, session_id);
ALTER TABLE requests ADD COLUMN turn_id TEXT NOT NULL DEFAULT '';
ALTER TABLE requests ADD COLUMN status TEXT NOT NULL DEFAULT '';
UPDATE requests
   SET turn_id = coalesce(json_extract(record, '$.turn_id'), ''), status = coalesce(json_extract(record, '$.status'), '')
 WHERE json_valid(record);
CREATE INDEX requests_by_turn ON requests (session_id, turn_id, status);
CREATE INDEX requests_by_status ON requests (session_id, status);
";

/// Version 3: integer keys and compact events (the writer's cost per event).
///
/// `sessions` gains an explicit `session_key INTEGER PRIMARY KEY` (an implicit rowid may change
/// on `VACUUM`; this one is the old rowid), and events name their session by it and their turn by
/// `turns.position`, so the event indexes compare integers, not text. An event is stored in
/// parts (`events.rs`): an ID made in sequence for its own seq (`<prefix>.<seq>`) is a reference
/// to a row of `event_prefixes` — one per prefix, so per run of the session — and only other
/// IDs are kept as text, under a partial unique index. `event_prefixes.shaped` marks a prefix for
/// which a custom ID `<prefix>.<n>` is stored: only then does a new ID made in sequence with that
/// prefix need a lookup among the custom IDs. `turns.record` becomes nullable: a turn that
/// version 1 events name without a record gets a row without one, so those events keep a turn
/// key (and stay readable by turn) while the turn stays unknown to writes.
/// The events are moved by [`crate::v3::move_events`] between these two scripts.
const V3_TABLES: &str = "
CREATE TABLE sessions_v3 (
    session_key INTEGER PRIMARY KEY,
    id          TEXT NOT NULL UNIQUE,
    last_seq    INTEGER NOT NULL DEFAULT 0,
    snapshot    TEXT NOT NULL
);
INSERT INTO sessions_v3 (session_key, id, last_seq, snapshot)
SELECT rowid, id, last_seq, snapshot FROM sessions ORDER BY rowid;
CREATE TABLE turns_v3 (
    position   INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL,
    turn_id    TEXT NOT NULL,
    record     TEXT,
    UNIQUE (session_id, turn_id)
);
INSERT INTO turns_v3 (position, session_id, turn_id, record)
SELECT position, session_id, turn_id, record FROM turns ORDER BY position;
CREATE TABLE event_prefixes (
    prefix_key  INTEGER PRIMARY KEY,
    session_key INTEGER NOT NULL,
    prefix      TEXT NOT NULL,
    shaped      INTEGER NOT NULL DEFAULT 0,
    UNIQUE (session_key, prefix)
);
CREATE TABLE events_v3 (
    session_key INTEGER NOT NULL,
    seq         INTEGER NOT NULL,
    turn_key    INTEGER,
    prefix_key  INTEGER,
    event_id    TEXT,
    at          INTEGER,
    provider    TEXT,
    kind        TEXT,
    raw         TEXT,
    document    TEXT
);
";

/// Version 3, after the events moved: the new tables take the old names, and the indexes are
/// built once over the moved rows.
const V3_SWAP: &str = "
DROP TABLE events;
DROP TABLE turns;
DROP TABLE sessions;
ALTER TABLE sessions_v3 RENAME TO sessions;
ALTER TABLE turns_v3 RENAME TO turns;
ALTER TABLE events_v3 RENAME TO events;
CREATE UNIQUE INDEX events_by_seq ON events (session_key, seq);
CREATE INDEX events_by_turn ON events (turn_key, seq) WHERE turn_key IS NOT NULL;
CREATE UNIQUE INDEX events_by_id ON events (session_key, event_id) WHERE event_id IS NOT NULL;
";

/// Version 4: a delta's text stored once. `events.text_at`, when set, is where the event's text
/// starts in its `raw` payload: the body of a JSON string there, holding neither a quote nor an
/// escape, so it runs to the next `"`; the kind's JSON holds an empty text in its place. Rows
/// written before keep the text in the kind and `text_at` `NULL`.
/// `kind` becomes `kind_json`, since it may now hold a kind without its text: a process of an
/// earlier build still using the file (or any reader of the old column) fails on the missing
/// column instead of reading placed deltas as empty ones.
const V4: &str = "
ALTER TABLE events ADD COLUMN text_at INTEGER;
ALTER TABLE events RENAME COLUMN kind TO kind_json;
";

/// What an opened file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found {
    /// No schema objects at all: a new file.
    Empty,
    /// A store at this schema version.
    Version(u32),
    /// Tables of something else.
    Foreign,
}

/// The tables of a store at versions 1 and 2, and those version 3 adds; a newer version is
/// expected to keep [`LASTING_TABLES`] at least.
const V1_TABLES: &[&str] = &["schema_version", "sessions", "turns", "requests", "events"];
const V3_ADDED_TABLES: &[&str] = &["event_prefixes"];
const LASTING_TABLES: &[&str] = &["schema_version", "sessions", "events"];

/// Reads what the file holds without writing to it. A `schema_version` table alone does not
/// make a store (another application may have one): the store's tables for the version it
/// names must be there too, else the file is [`Found::Foreign`].
pub(crate) fn inspect(conn: &Connection) -> rusqlite::Result<Found> {
    if !has_tables(conn, &["schema_version"])? {
        let objects: i64 = conn.query_row("SELECT COUNT(*) FROM sqlite_master", [], |row| row.get(0))?;
        return Ok(if objects == 0 { Found::Empty } else { Found::Foreign });
    }
    let version: Option<i64> = conn
        .query_row("SELECT MAX(version) FROM schema_version", [], |row| row.get(0))
        .or_else(|error| match error {
            // Not the store's table: its `version` column is missing or holds no integer.
            rusqlite::Error::SqlInputError { .. } | rusqlite::Error::InvalidColumnType(..) => Ok(Some(0)),
            other => Err(other),
        })?;
    let version = version.map_or(0, |v| u32::try_from(v).unwrap_or(u32::MAX));
    let tables_there = match version {
        0 => false,
        1 | 2 => has_tables(conn, V1_TABLES)?,
        3 | 4 => has_tables(conn, V1_TABLES)? && has_tables(conn, V3_ADDED_TABLES)?,
        _ => has_tables(conn, LASTING_TABLES)?,
    };
    Ok(if tables_there { Found::Version(version) } else { Found::Foreign })
}

/// Whether every table of `names` exists.
fn has_tables(conn: &Connection, names: &[&str]) -> rusqlite::Result<bool> {
    let mut statement =
        conn.prepare_cached("SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1)")?;
    for name in names {
        if !statement.query_row([name], |row| row.get::<_, bool>(0))? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Refuses files this build must not write to.
pub(crate) fn check(path: &Path, found: Found) -> Result<u32, OpenError> {
    match found {
        Found::Empty => Ok(0),
        Found::Version(found) if found <= SCHEMA_VERSION => Ok(found),
        Found::Version(found) => {
            Err(OpenError::NewerSchema { path: path.to_owned(), found, supported: SCHEMA_VERSION })
        }
        Found::Foreign => Err(OpenError::NotAStore { path: path.to_owned() }),
    }
}

/// Applies the missing migrations in one write transaction. The version is read again inside
/// it, so two processes opening the same new file migrate it once.
pub(crate) fn migrate(conn: &mut Connection, path: &Path) -> Result<(), OpenError> {
    let sqlite = |source: rusqlite::Error| OpenError::Sqlite { path: path.to_owned(), source: Box::new(source) };
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(sqlite)?;
    let current = check(path, inspect(&tx).map_err(sqlite)?)?;
    for (from, steps) in MIGRATIONS.iter().enumerate().skip(current as usize) {
        for step in *steps {
            match step {
                Step::Sql(sql) => tx.execute_batch(sql).map_err(sqlite)?,
                Step::Rust(run) => {
                    run(&tx).map_err(|source| OpenError::Sqlite { path: path.to_owned(), source: Box::new(source) })?
                }
            }
        }
        tx.execute(
            "INSERT INTO schema_version (version, applied_at) VALUES (?1, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))",
            [from as i64 + 1],
        )
        .map_err(sqlite)?;
        tracing::info!(path = %path.display(), version = from + 1, "store schema migrated");
    }
    tx.commit().map_err(sqlite)
}
