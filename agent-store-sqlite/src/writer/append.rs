//! Appending a write's events: the checks of the store contract per row, and multi-row inserts.

use agent_core::{StoreError, TurnId};
use rusqlite::{Connection, OptionalExtension, params};

use crate::error::store_error;
use crate::events::{self, Prefix};
use crate::rows::{EventRow, IdForm, Prepared};

/// The most event rows one `INSERT` statement writes.
const CHUNK: usize = 32;

/// The `INSERT` of `n` rows, `n` a power of two up to [`CHUNK`].
fn insert_sql(n: usize) -> &'static str {
    static SQL: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    let all = SQL.get_or_init(|| {
        (0..=CHUNK.trailing_zeros())
            .map(|power| {
                let rows = (0..1usize << power)
                    .map(|row| {
                        let first = row * events::INSERT_COLUMNS;
                        let params: Vec<String> =
                            (1..=events::INSERT_COLUMNS).map(|c| format!("?{}", first + c)).collect();
                        format!("({})", params.join(", "))
                    })
                    .collect::<Vec<_>>()
                    .join(", ");
                format!("{} VALUES {rows}", events::INSERT_INTO)
            })
            .collect()
    });
    &all[n.trailing_zeros() as usize]
}

/// A new event row, checked, with its keys.
struct Pending<'w> {
    row: &'w EventRow,
    turn_key: Option<i64>,
    prefix_key: Option<i64>,
    custom: Option<&'w str>,
}

/// The events of one write being appended, with the keys they are stored under.
pub(super) struct Append<'w> {
    conn: &'w Connection,
    write: &'w Prepared,
    session_key: i64,
    /// `(turn ID, turns.position)` of every turn the write's events may name.
    turns: Vec<(&'w str, i64)>,
    /// The prefixes the write looked up: `None` when the session has not stored it.
    prefixes: Vec<(&'w str, Option<Prefix>)>,
}

impl<'w> Append<'w> {
    /// The append of `write`'s events to the session stored under `session_key`, whose events
    /// may name the `turns` (`(turn ID, turns.position)`).
    pub(super) fn new(conn: &'w Connection, write: &'w Prepared, session_key: i64, turns: Vec<(&'w str, i64)>) -> Self {
        Append { conn, write, session_key, turns, prefixes: Vec::new() }
    }

    /// Appends the events after `latest`: a seq above the latest is inserted (its ID must be new
    /// to the session); a used seq must hold the identical event; a free seq below the latest is
    /// refused. Records the new latest seq.
    pub(super) fn run(mut self, mut latest: i64) -> Result<(), StoreError> {
        let sql = |e: rusqlite::Error| store_error(&e);
        let before = latest;
        // Rows are checked one by one and inserted [`CHUNK`] at a time.
        let mut pending: Vec<Pending<'w>> = Vec::with_capacity(CHUNK.min(self.write.events.len()));
        // Consecutive events almost always name the same turn.
        let mut turn: Option<(&TurnId, i64)> = None;
        let write = self.write;
        for row in &write.events {
            if row.seq <= latest {
                // It may be one of this write's own rows.
                self.insert(&mut pending)?;
                self.check_retry(row, latest)?;
                continue;
            }
            let event = &*row.event;
            let turn_key = match &event.turn_id {
                None => None,
                Some(id) => match turn {
                    Some((last, key)) if last == id => Some(key),
                    _ => {
                        let key = self.turn_key(id)?;
                        turn = Some((id, key));
                        Some(key)
                    }
                },
            };
            let id = event.id.as_str();
            let (prefix_key, custom) = self.id_columns(row, id)?;
            pending.push(Pending { row, turn_key, prefix_key, custom });
            if pending.len() == CHUNK {
                self.insert(&mut pending)?;
            }
            latest = row.seq;
        }
        self.insert(&mut pending)?;
        if latest != before {
            self.conn
                .prepare_cached("UPDATE sessions SET last_seq = ?2 WHERE session_key = ?1")
                .and_then(|mut stmt| stmt.execute(params![self.session_key, latest]))
                .map_err(sql)?;
        }
        Ok(())
    }

    /// Inserts the checked rows, and empties `pending`. One statement inserts up to [`CHUNK`]
    /// rows: SQLite opens the table's and indexes' cursors once per statement, not per row.
    /// The only insert a check before it does not rule out fails on the unique index of custom
    /// IDs; that is answered as the conflict it is.
    fn insert(&self, pending: &mut Vec<Pending<'w>>) -> Result<(), StoreError> {
        let sql = |e: rusqlite::Error| store_error(&e);
        let mut rest = &pending[..];
        while !rest.is_empty() {
            // The largest power of two that fits: a few statement shapes cover any count.
            let n = 1 << (usize::BITS - 1 - rest.len().min(CHUNK).leading_zeros());
            let (rows, next) = rest.split_at(n);
            let mut stmt = self.conn.prepare_cached(insert_sql(n)).map_err(sql)?;
            for (i, p) in rows.iter().enumerate() {
                self.bind(&mut stmt, i * events::INSERT_COLUMNS, p).map_err(sql)?;
            }
            stmt.raw_execute().map_err(|e| self.used_id(rows, &e).unwrap_or_else(|| sql(e)))?;
            rest = next;
        }
        pending.clear();
        Ok(())
    }

    /// Binds one row's columns after the first `offset` parameters.
    fn bind(&self, stmt: &mut rusqlite::CachedStatement<'_>, offset: usize, p: &Pending<'w>) -> rusqlite::Result<()> {
        let (row, event) = (p.row, &*p.row.event);
        let json = &self.write.text[row.json.clone()];
        stmt.raw_bind_parameter(offset + 1, self.session_key)?;
        stmt.raw_bind_parameter(offset + 2, row.seq)?;
        stmt.raw_bind_parameter(offset + 3, p.turn_key)?;
        stmt.raw_bind_parameter(offset + 4, p.prefix_key)?;
        stmt.raw_bind_parameter(offset + 5, p.custom)?;
        if row.document {
            for column in 6..=9 {
                stmt.raw_bind_parameter(offset + column, rusqlite::types::Null)?;
            }
            stmt.raw_bind_parameter(offset + 10, json)?;
            stmt.raw_bind_parameter(offset + 11, rusqlite::types::Null)
        } else {
            stmt.raw_bind_parameter(offset + 6, event.at.unix_micros())?;
            stmt.raw_bind_parameter(offset + 7, event.provider.as_str())?;
            stmt.raw_bind_parameter(offset + 8, json)?;
            stmt.raw_bind_parameter(offset + 9, event.raw.as_ref().map(|raw| raw.get()))?;
            stmt.raw_bind_parameter(offset + 10, rusqlite::types::Null)?;
            stmt.raw_bind_parameter(offset + 11, row.text_at)
        }
    }

    fn turn_key(&self, turn: &TurnId) -> Result<i64, StoreError> {
        match self.turns.iter().find(|(id, _)| *id == turn.as_str()) {
            Some(&(_, key)) => Ok(key),
            // `Prepared` names every turn its events carry; a gap there would be a bug.
            None => Err(StoreError::Backend(format!("turn `{turn}` of an event was not looked up").into())),
        }
    }

    /// The `prefix_key` and `event_id` columns of a new event with the ID `id`, after the checks
    /// that keep IDs unique within the session across both forms. The unique index on custom
    /// IDs refuses a custom ID stored before; an ID made in sequence for a new seq can only be
    /// stored already as a custom ID, and a custom ID shaped like one made in sequence only as
    /// that event's own.
    fn id_columns(&mut self, row: &EventRow, id: &'w str) -> Result<(Option<i64>, Option<&'w str>), StoreError> {
        let sql = |e: rusqlite::Error| store_error(&e);
        match row.id {
            IdForm::Own { prefix } => {
                let prefix = &id[..prefix];
                let stored = match self.prefix(prefix)? {
                    Some(stored) => stored,
                    None => {
                        let stored = events::store_prefix(self.conn, self.session_key, prefix, false).map_err(sql)?;
                        self.remember(prefix, stored);
                        stored
                    }
                };
                if stored.shaped
                    && let Some(at) = self.custom_id_seq(id).map_err(sql)?
                {
                    return Err(self.id_used(row, id, at));
                }
                Ok((Some(stored.key), None))
            }
            IdForm::Custom { shaped: None } => Ok((None, Some(id))),
            IdForm::Custom { shaped: Some((prefix, seq)) } => {
                let prefix = &id[..prefix];
                let stored = self.prefix(prefix)?;
                if let Some(stored) = stored
                    && self.made_at(seq, stored.key).map_err(sql)?
                {
                    return Err(self.id_used(row, id, seq));
                }
                if !stored.is_some_and(|p| p.shaped) {
                    let marked = events::store_prefix(self.conn, self.session_key, prefix, true).map_err(sql)?;
                    self.remember(prefix, marked);
                }
                Ok((None, Some(id)))
            }
        }
    }

    /// The session's prefix `prefix`, looked up once per write.
    fn prefix(&mut self, prefix: &'w str) -> Result<Option<Prefix>, StoreError> {
        // The last one first: a write's events almost always share one prefix.
        if let Some((_, stored)) = self.prefixes.iter().rev().find(|(p, _)| *p == prefix) {
            return Ok(*stored);
        }
        let stored = events::prefix(self.conn, self.session_key, prefix).map_err(|e| store_error(&e))?;
        self.prefixes.push((prefix, stored));
        Ok(stored)
    }

    fn remember(&mut self, prefix: &'w str, stored: Prefix) {
        match self.prefixes.iter_mut().find(|(p, _)| *p == prefix) {
            Some((_, slot)) => *slot = Some(stored),
            None => self.prefixes.push((prefix, Some(stored))),
        }
    }

    /// Whether the event at `seq` has an ID made in sequence with the prefix `prefix_key`.
    fn made_at(&self, seq: i64, prefix_key: i64) -> rusqlite::Result<bool> {
        self.conn
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM events WHERE session_key = ?1 AND seq = ?2 AND prefix_key = ?3)",
            )?
            .query_row(params![self.session_key, seq, prefix_key], |row| row.get(0))
    }

    /// The seq of the event whose custom ID is `id`.
    fn custom_id_seq(&self, id: &str) -> rusqlite::Result<Option<i64>> {
        self.conn
            .prepare_cached("SELECT seq FROM events WHERE session_key = ?1 AND event_id = ?2")?
            .query_row(params![self.session_key, id], |row| row.get(0))
            .optional()
    }

    fn id_used(&self, row: &EventRow, id: &str, at: i64) -> StoreError {
        StoreError::Conflict(format!(
            "event ID `{id}` of seq {} is already stored at seq {at} in session `{}`",
            row.seq, self.write.session
        ))
    }

    /// The conflict behind a failed insert of `rows` when one of their custom IDs is already
    /// stored (the statement inserted none of them).
    fn used_id(&self, rows: &[Pending<'_>], error: &rusqlite::Error) -> Option<StoreError> {
        if error.sqlite_error_code() != Some(rusqlite::ErrorCode::ConstraintViolation) {
            return None;
        }
        rows.iter().find_map(|p| {
            let id = p.custom?;
            let at = self.custom_id_seq(id).ok()??;
            Some(self.id_used(p.row, id, at))
        })
    }

    /// An append at a seq that is not above the latest is fine only as an identical retry.
    fn check_retry(&self, row: &EventRow, latest: i64) -> Result<(), StoreError> {
        let session = &self.write.session;
        match events::at_seq(self.conn, session, self.session_key, row.seq)? {
            None => Err(StoreError::Conflict(format!(
                "seq {} of session `{session}` is not above the latest stored seq {latest}",
                row.seq
            ))),
            Some(stored) if stored == *row.event => Ok(()),
            Some(_) => {
                Err(StoreError::Conflict(format!("seq {} of session `{session}` holds a different event", row.seq)))
            }
        }
    }
}
