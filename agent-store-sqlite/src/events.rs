//! The stored form of an event (schema version 4): how a row is written and read back.
//!
//! A row holds the session's integer key, the seq, the turn's integer key (`turns.position`),
//! the ID (a reference to one of the session's `event_prefixes` for an ID made in sequence for
//! its own seq, else the ID's text), the time in microseconds, the provider, the kind's JSON,
//! the `raw` payload byte for byte and, for a delta whose text is stored only in that payload,
//! where the text starts there (`text_at`; the kind's JSON then holds it empty). A row whose
//! `document` is set holds the whole envelope as JSON instead (an event the parts cannot rebuild
//! exactly, or a version 2 document that did not decode, kept for the reader to report).

use agent_core::event::RawJson;
use agent_core::{Event, EventId, EventKind, ProviderId, SessionId, StoreError, Timestamp, TurnId};
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OptionalExtension, Row, params};

use crate::error::{corrupt_json, store_error};
use crate::rows::{delta_text_mut, text_from_place};

/// The columns [`Decoder::decode`] reads, from `events e` joined with the turn and the prefix.
pub(crate) const COLUMNS: &str = "e.seq, e.turn_key, t.turn_id, p.prefix, e.event_id, e.at, e.provider, e.kind_json, e.raw, \
     e.document, e.text_at FROM events e LEFT JOIN turns t ON t.position = e.turn_key \
     LEFT JOIN event_prefixes p ON p.prefix_key = e.prefix_key";

/// What an error calls each of [`COLUMNS`].
const COLUMN_NAMES: [&str; 11] = [
    "seq",
    "turn key",
    "turn ID",
    "ID prefix",
    "ID",
    "time",
    "provider",
    "kind",
    "raw payload",
    "envelope",
    "text place",
];

/// The insert of event rows, without its `VALUES`.
pub(crate) const INSERT_INTO: &str = "INSERT INTO events (session_key, seq, turn_key, prefix_key, event_id, at, provider, kind_json, raw, document, text_at)";

/// The columns of [`INSERT_INTO`].
pub(crate) const INSERT_COLUMNS: usize = 11;

/// Rebuilds the events of one session from rows selected with [`COLUMNS`], sharing the turn
/// and provider IDs of consecutive events as the runtime does.
#[derive(Debug)]
pub(crate) struct Decoder {
    session: SessionId,
    turn: Option<TurnId>,
    provider: Option<ProviderId>,
}

impl Decoder {
    pub(crate) fn new(session: SessionId) -> Self {
        Decoder { session, turn: None, provider: None }
    }

    /// The event of one row. An error names the session and the row's seq, so that a caller
    /// knows which event to repair, or where to read on from.
    pub(crate) fn decode(&mut self, row: &Row<'_>) -> Result<Event, StoreError> {
        let seq: i64 = row.get(0).map_err(|e| store_error(&e))?;
        self.decode_at(row, seq).map_err(|error| match error {
            StoreError::Corrupt(reason) => {
                StoreError::Corrupt(format!("event {seq} of session `{}`: {reason}", self.session))
            }
            other => other,
        })
    }

    fn decode_at(&mut self, row: &Row<'_>, seq: i64) -> Result<Event, StoreError> {
        let sql = |e: rusqlite::Error| store_error(&e);
        if let Some(document) = text(row, 9)? {
            let event: Event = serde_json::from_str(document).map_err(|e| corrupt_json("envelope", &e))?;
            // The row's seq orders and finds the event: a document that says otherwise would
            // come back out of order. (Its session may differ: an event naming another session
            // is stored as it was written.)
            if i64::try_from(event.seq) != Ok(seq) {
                return Err(StoreError::Corrupt(format!("the stored envelope is event {}", event.seq)));
            }
            return Ok(event);
        }
        let seq = u64::try_from(seq).map_err(|_| StoreError::Corrupt(format!("stored seq {seq} is negative")))?;
        let turn_key: Option<i64> = row.get(1).map_err(sql)?;
        let turn_id = match (turn_key, text(row, 2)?) {
            (None, _) => None,
            (Some(_), Some(turn)) => Some(self.turn(turn)),
            (Some(key), None) => {
                return Err(StoreError::Corrupt(format!("it names turn key {key}, which is not stored")));
            }
        };
        let id = match (text(row, 3)?, text(row, 4)?) {
            (Some(prefix), _) => EventId::in_sequence(prefix, seq),
            (None, Some(id)) => EventId::from_string(id),
            (None, None) => return Err(StoreError::Corrupt("it has no stored ID".into())),
        };
        let missing = |what: &str| StoreError::Corrupt(format!("it has no stored {what}"));
        let at: i64 = row.get::<_, Option<i64>>(5).map_err(sql)?.ok_or_else(|| missing("time"))?;
        let provider = self.provider(text(row, 6)?.ok_or_else(|| missing("provider"))?);
        let mut kind: EventKind = serde_json::from_str(text(row, 7)?.ok_or_else(|| missing("kind"))?)
            .map_err(|e| corrupt_json("kind", &e))?;
        let raw = text(row, 8)?
            .map(|raw| RawJson::from_string(raw.to_owned()))
            .transpose()
            .map_err(|e| corrupt_json("raw payload", &e))?;
        if let Some(at) = row.get::<_, Option<i64>>(10).map_err(sql)? {
            let placed = raw.as_ref().and_then(|raw| text_from_place(raw, at));
            match (delta_text_mut(&mut kind), placed) {
                (Some(text), Some(placed)) if text.is_empty() => *text = placed,
                _ => return Err(StoreError::Corrupt(format!("its text is not at {at} of its raw payload"))),
            }
        }
        Ok(Event::from_parts(
            id,
            seq,
            self.session.clone(),
            turn_id,
            provider,
            Timestamp::from_unix_micros(at),
            kind,
            raw,
        ))
    }

    fn turn(&mut self, text: &str) -> TurnId {
        match &self.turn {
            Some(turn) if turn.as_str() == text => turn.clone(),
            _ => self.turn.insert(TurnId::from_string(text)).clone(),
        }
    }

    fn provider(&mut self, text: &str) -> ProviderId {
        match &self.provider {
            Some(provider) if provider.as_str() == text => provider.clone(),
            _ => self.provider.insert(ProviderId::new(text)).clone(),
        }
    }
}

/// A nullable text column, borrowed from the row.
fn text<'r>(row: &'r Row<'_>, column: usize) -> Result<Option<&'r str>, StoreError> {
    match row.get_ref(column).map_err(|e| store_error(&e))? {
        ValueRef::Null => Ok(None),
        ValueRef::Text(bytes) => std::str::from_utf8(bytes)
            .map(Some)
            .map_err(|e| StoreError::Corrupt(format!("its {} is not UTF-8: {e}", COLUMN_NAMES[column]))),
        other => Err(StoreError::Corrupt(format!("its {} has type {:?}", COLUMN_NAMES[column], other.data_type()))),
    }
}

/// The stored event of `session` (key `session_key`) at `seq`.
pub(crate) fn at_seq(
    conn: &Connection,
    session: &SessionId,
    session_key: i64,
    seq: i64,
) -> Result<Option<Event>, StoreError> {
    let sql = format!("SELECT {COLUMNS} WHERE e.session_key = ?1 AND e.seq = ?2");
    let mut stmt = conn.prepare_cached(&sql).map_err(|e| store_error(&e))?;
    let mut rows = stmt.query(params![session_key, seq]).map_err(|e| store_error(&e))?;
    match rows.next().map_err(|e| store_error(&e))? {
        Some(row) => Decoder::new(session.clone()).decode(row).map(Some),
        None => Ok(None),
    }
}

/// A prefix of the session's IDs made in sequence: its key, and whether a custom ID of the
/// session has the form `<prefix>.<seq>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Prefix {
    pub(crate) key: i64,
    pub(crate) shaped: bool,
}

/// The stored prefix `prefix` of the session `session_key`.
pub(crate) fn prefix(conn: &Connection, session_key: i64, prefix: &str) -> rusqlite::Result<Option<Prefix>> {
    conn.prepare_cached("SELECT prefix_key, shaped FROM event_prefixes WHERE session_key = ?1 AND prefix = ?2")?
        .query_row(params![session_key, prefix], |row| Ok(Prefix { key: row.get(0)?, shaped: row.get(1)? }))
        .optional()
}

/// Stores the prefix `prefix` of the session `session_key` if it is not yet, marks it `shaped`
/// if asked (a mark is never removed), and returns it.
pub(crate) fn store_prefix(
    conn: &Connection,
    session_key: i64,
    prefix: &str,
    shaped: bool,
) -> rusqlite::Result<Prefix> {
    conn.prepare_cached(
        "INSERT INTO event_prefixes (session_key, prefix, shaped) VALUES (?1, ?2, ?3)
         ON CONFLICT (session_key, prefix) DO UPDATE SET shaped = max(shaped, excluded.shaped)
         RETURNING prefix_key, shaped",
    )?
    .query_row(params![session_key, prefix, shaped], |row| Ok(Prefix { key: row.get(0)?, shaped: row.get(1)? }))
}
