//! Records encoded for the writer: JSON is produced by the calling task, so the single writer
//! thread only runs SQL.
//!
//! An event is stored in parts (schema version 3): its kind as JSON, its `raw` payload byte for
//! byte, its time as an integer, its ID either as a reference to the session's prefix (an ID
//! made in sequence for its own seq, `<prefix>.<seq>`) or as text. The envelope is rebuilt on
//! read. An event the parts cannot hold exactly — another session's ID in the envelope, another
//! envelope version — is stored as its whole JSON document instead. A delta's text that lies in
//! its raw payload as it is (no escapes) is stored once, as its place there (schema version 4).

use std::collections::HashSet;
use std::ops::Range;
use std::sync::Arc;

use agent_core::event::{RawJson, SCHEMA_VERSION, SharedStr};
use agent_core::store::{Expected, WriteBatch};
use agent_core::{
    Event, EventId, EventKind, Request, RequestStatus, SessionId, SessionSnapshot, StoreError, Turn, TurnId,
};

/// What a write does with the session's stored aggregate before its records are applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Clear {
    /// Nothing: the records are added to it.
    Keep,
    /// Delete it whatever its state: a batch's `delete_first`, the harness's deliberate
    /// replacement.
    Replace,
    /// Delete it unless its snapshot is open (`Store::delete_session`).
    Delete,
}

/// One write, ready for the writer thread: everything in it commits or nothing does.
#[derive(Debug)]
pub(crate) struct Prepared {
    pub(crate) session: SessionId,
    pub(crate) clear: Clear,
    /// The batch's precondition on the stored snapshot, checked in the write's transaction.
    pub(crate) expect: Option<Expected>,
    pub(crate) snapshot: Option<String>,
    /// `(turn ID, record)`.
    pub(crate) turns: Vec<(String, String)>,
    pub(crate) requests: Vec<RequestRow>,
    pub(crate) events: Vec<EventRow>,
    /// The JSON of every event's kind (or whole document), back to back: one allocation per
    /// write rather than one per event. Each [`EventRow`] names its range.
    pub(crate) text: String,
    /// The turns its requests and events name that it does not write itself; each must be
    /// stored (`StoreError::UnknownTurn`).
    pub(crate) named_turns: Vec<TurnId>,
    /// Queued while the session's previous write was in flight (`Store::enqueue`): refused,
    /// unapplied, when that write failed.
    pub(crate) follows: bool,
    /// Why the batch could not be encoded: the writer answers with it without applying
    /// anything, so that a write queued behind it is refused in order (`Store::enqueue`).
    pub(crate) refused: Option<StoreError>,
}

/// One request with its encoded form and the columns it is queried by.
#[derive(Debug)]
pub(crate) struct RequestRow {
    pub(crate) id: String,
    pub(crate) turn_id: TurnId,
    pub(crate) status: String,
    pub(crate) record: String,
}

/// One event, encoded: the event itself (its text fields are bound from it), and its kind's JSON
/// or its whole document in [`Prepared::text`].
#[derive(Debug)]
pub(crate) struct EventRow {
    pub(crate) seq: i64,
    pub(crate) id: IdForm,
    /// Where the JSON is in [`Prepared::text`].
    pub(crate) json: Range<usize>,
    /// `json` is the whole envelope (`document` column) rather than the kind (`kind` column).
    pub(crate) document: bool,
    /// Where the delta's text starts in the raw payload, when the kind's JSON holds it empty
    /// (see [`text_place`]).
    pub(crate) text_at: Option<i64>,
    /// Bound field by field, and compared with the stored event when a seq is appended again.
    pub(crate) event: Arc<Event>,
}

/// How an event's ID is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IdForm {
    /// `<prefix>.<seq>` for the event's own seq, stored as a reference to the prefix;
    /// `id[..prefix]` is the prefix.
    Own { prefix: usize },
    /// Any other ID, stored as text. `shaped` is `Some((prefix, seq))` when its text is
    /// `<prefix>.<seq>` for another seq (`id[..prefix]` being the prefix): the ID the event at
    /// that seq would have if it was made in sequence with that prefix.
    Custom { shaped: Option<(usize, i64)> },
}

impl IdForm {
    /// How `id`, the ID of the event with `seq`, is stored. An ID the runtime made has its parts
    /// at hand; any other is parsed, so that the form depends on the text only.
    pub(crate) fn of(id: &EventId, seq: u64) -> IdForm {
        let (prefix, named) = match id.sequence() {
            Some((prefix, named)) => (prefix.len(), Some(named)),
            None => match id.as_str().rsplit_once('.') {
                Some((prefix, digits)) => (prefix.len(), parse_seq(digits)),
                None => return IdForm::Custom { shaped: None },
            },
        };
        match named {
            Some(named) if named == seq => IdForm::Own { prefix },
            // A seq beyond the stored range names no event.
            Some(named) => IdForm::Custom { shaped: i64::try_from(named).ok().map(|named| (prefix, named)) },
            None => IdForm::Custom { shaped: None },
        }
    }
}

/// A seq written in decimal without leading zeros, as `EventId::in_sequence` writes it.
pub(crate) fn parse_seq(digits: &str) -> Option<u64> {
    let canonical = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits.len() == 1 || !digits.starts_with('0'));
    if canonical { digits.parse().ok() } else { None }
}

/// The text of a delta kind.
pub(crate) fn delta_text(kind: &EventKind) -> Option<&SharedStr> {
    match kind {
        EventKind::MessageDelta { text, .. }
        | EventKind::ReasoningDelta { text, .. }
        | EventKind::CommandOutputDelta { text, .. } => Some(text),
        _ => None,
    }
}

/// The text of a delta kind, to fill in.
pub(crate) fn delta_text_mut(kind: &mut EventKind) -> Option<&mut SharedStr> {
    match kind {
        EventKind::MessageDelta { text, .. }
        | EventKind::ReasoningDelta { text, .. }
        | EventKind::CommandOutputDelta { text, .. } => Some(text),
        _ => None,
    }
}

/// Where a delta's text starts in `raw`, when it is stored there only: the text is a slice of
/// the payload (as providers cut a text written without escapes), not empty, with a quote on
/// either side and none or a backslash in it — the whole body of a JSON string — so the reader
/// takes it back as the bytes from that place to the next quote ([`text_from_place`]). Any
/// other text stays in the kind's JSON.
pub(crate) fn text_place(kind: &EventKind, raw: Option<&RawJson>) -> Option<i64> {
    let (text, raw) = (delta_text(kind)?, raw?.get());
    if text.is_empty() || !text.lies_in(raw.as_bytes()) {
        return None;
    }
    let start = text.as_ptr() as usize - raw.as_ptr() as usize;
    let quoted = |at: Option<usize>| at.and_then(|at| raw.as_bytes().get(at)) == Some(&b'"');
    let string = quoted(start.checked_sub(1)) && quoted(Some(start + text.len()));
    let plain = !text.bytes().any(|b| b == b'"' || b == b'\\');
    if string && plain { i64::try_from(start).ok() } else { None }
}

/// The text [`text_place`] placed at `at` in `raw`: a slice of the payload, not a copy. `None`
/// where `at` cannot be such a place (not just after a quote, or before one).
pub(crate) fn text_from_place(raw: &RawJson, at: i64) -> Option<SharedStr> {
    let at = usize::try_from(at).ok()?;
    let after_quote = at.checked_sub(1).and_then(|before| raw.get().as_bytes().get(before)) == Some(&b'"');
    let body = raw.get().get(at..).filter(|_| after_quote)?;
    let end = body.bytes().position(|b| b == b'"').filter(|&end| end > 0)?;
    Some(raw.share(&body[..end]))
}

/// True when `event` is stored as its whole document rather than in parts: the parts rebuild an
/// envelope of the current version naming the session the event is stored under.
pub(crate) fn needs_document(event: &Event, session: &SessionId) -> bool {
    event.schema_version != SCHEMA_VERSION || event.session_id != *session
}

impl Prepared {
    pub(crate) fn new(session: SessionId) -> Self {
        Prepared {
            session,
            clear: Clear::Keep,
            expect: None,
            snapshot: None,
            turns: Vec::new(),
            requests: Vec::new(),
            events: Vec::new(),
            text: String::new(),
            named_turns: Vec::new(),
            follows: false,
            refused: None,
        }
    }

    /// True when the write touches records under the session (which must then exist).
    pub(crate) fn has_children(&self) -> bool {
        !(self.turns.is_empty() && self.requests.is_empty() && self.events.is_empty())
    }

    pub(crate) fn batch(session: &SessionId, batch: &WriteBatch) -> Result<Self, StoreError> {
        let mut prepared = Prepared::new(session.clone());
        if batch.delete_first {
            prepared.clear = Clear::Replace;
        }
        prepared.expect.clone_from(&batch.expect);
        if let Some(snapshot) = &batch.snapshot {
            prepared.snapshot = Some(encode(snapshot)?);
        }
        for turn in &batch.turns {
            prepared.push_turn(turn)?;
        }
        for request in &batch.requests {
            prepared.push_request(request)?;
        }
        prepared.push_events(&batch.events)?;
        Ok(prepared)
    }

    /// `Store::delete_session`.
    pub(crate) fn delete(session: SessionId) -> Self {
        Prepared { clear: Clear::Delete, ..Prepared::new(session) }
    }

    pub(crate) fn snapshot(snapshot: &SessionSnapshot) -> Result<Self, StoreError> {
        let mut prepared = Prepared::new(snapshot.id.clone());
        prepared.snapshot = Some(encode(snapshot)?);
        Ok(prepared)
    }

    pub(crate) fn push_turn(&mut self, turn: &Turn) -> Result<(), StoreError> {
        self.turns.push((turn.id.to_string(), encode(turn)?));
        Ok(())
    }

    /// Records that the write names `turn`: unless it writes that turn itself, the writer checks
    /// that the turn is stored. Turns must be pushed before the requests and events naming them.
    fn name_turn(&mut self, turn: &TurnId) {
        let written = self.turns.iter().any(|(id, _)| id == turn.as_str());
        if !written && !self.named_turns.contains(turn) {
            self.named_turns.push(turn.clone());
        }
    }

    pub(crate) fn push_request(&mut self, request: &Request) -> Result<(), StoreError> {
        self.name_turn(&request.turn_id);
        self.requests.push(RequestRow {
            id: request.id.to_string(),
            turn_id: request.turn_id.clone(),
            status: status_name(request.status)?,
            record: encode(request)?,
        });
        Ok(())
    }

    /// Encodes `events`. Refuses an event ID that appears twice among them (the writer catches
    /// an ID stored before, but not one repeated in one write).
    pub(crate) fn push_events(&mut self, events: &[Arc<Event>]) -> Result<(), StoreError> {
        self.events.reserve(events.len());
        let mut json = std::mem::take(&mut self.text).into_bytes();
        // Most of a write is small kinds (deltas): a guess that saves most regrowth.
        json.reserve(events.len() * 96);
        // IDs made in sequence for their own, increasing seqs cannot repeat; anything else is
        // checked by its text below.
        let mut distinct = true;
        let mut previous: Option<i64> = None;
        // Consecutive events almost always name the same turn.
        let mut named: Option<&TurnId> = None;
        for event in events {
            if let Some(turn) = &event.turn_id
                && named != Some(turn)
            {
                self.name_turn(turn);
                named = Some(turn);
            }
            let seq = i64::try_from(event.seq)
                .map_err(|_| StoreError::Conflict(format!("seq {} is beyond the stored range", event.seq)))?;
            let id = IdForm::of(&event.id, event.seq);
            distinct &= matches!(id, IdForm::Own { .. }) && previous.is_none_or(|p| p < seq);
            previous = Some(seq);
            let document = needs_document(event, &self.session);
            let place = if document { None } else { text_place(&event.kind, event.raw.as_ref()) };
            if place.is_none() {
                // A kind's JSON is about as long as its raw payload (a text kept in it is in
                // both): room made once for an event of megabytes, where doubling would take
                // twice that.
                json.reserve(event.raw.as_ref().map_or(0, |raw| raw.get().len()) + 128);
            }
            let start = json.len();
            let written = if document {
                serde_json::to_writer(&mut json, &**event)
            } else {
                // The raw payload is stored as it is; check it is JSON, as serializing the
                // envelope does.
                if let Some(raw) = &event.raw {
                    raw.as_raw_value().map_err(|e| StoreError::Backend(Box::new(e)))?;
                }
                match place {
                    Some(_) => {
                        let mut kind = event.kind.clone();
                        if let Some(text) = delta_text_mut(&mut kind) {
                            *text = SharedStr::default();
                        }
                        serde_json::to_writer(&mut json, &kind)
                    }
                    None => serde_json::to_writer(&mut json, &event.kind),
                }
            };
            written.map_err(|e| StoreError::Backend(Box::new(e)))?;
            self.events.push(EventRow {
                seq,
                id,
                json: start..json.len(),
                document,
                text_at: place,
                event: Arc::clone(event),
            });
        }
        // serde_json writes UTF-8; the check is one pass over the buffer.
        self.text = String::from_utf8(json).map_err(|e| StoreError::Backend(Box::new(e)))?;
        if !distinct && events.len() > 1 {
            let mut ids = HashSet::with_capacity(events.len());
            if let Some(twice) = events.iter().find(|e| !ids.insert(e.id.as_str())) {
                return Err(StoreError::Conflict(format!(
                    "event ID `{}` appears twice in one write to session `{}`",
                    twice.id, self.session
                )));
            }
        }
        Ok(())
    }
}

/// The name a request status is stored and queried under: its serde form, as in the record.
pub(crate) fn status_name(status: RequestStatus) -> Result<String, StoreError> {
    match serde_json::to_value(status) {
        Ok(serde_json::Value::String(name)) => Ok(name),
        other => Err(StoreError::Backend(format!("request status {status:?} has no stored name: {other:?}").into())),
    }
}

fn encode<T: serde::Serialize + ?Sized>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::Backend(Box::new(e)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An event of megabytes is encoded into room made for it once, not into a buffer doubled
    /// up to twice its size.
    #[test]
    fn a_large_event_is_encoded_without_doubling() {
        let text = "x".repeat(4 << 20);
        let raw = format!(r#"{{"method":"item/agentMessage/delta","params":{{"delta":"{text}"}}}}"#);
        let json = format!(
            r#"{{"schema_version":1,"id":"evt_1","seq":1,"session_id":"s","turn_id":null,"provider":"codex","at":"2026-01-01T00:00:00Z","type":"message_delta","data":{{"text":"{text}"}},"raw":{raw}}}"#
        );
        let event: Arc<Event> = Arc::new(serde_json::from_str(&json).expect("an event"));
        let mut prepared = Prepared::new(SessionId::new("s").unwrap());
        prepared.push_events(&[event]).expect("encodes");
        let kind = prepared.events[0].json.len();
        assert!(kind > text.len(), "the kind holds the text");
        assert!(prepared.text.capacity() <= raw.len() + 256, "{} for {kind}", prepared.text.capacity());
    }

    #[test]
    fn an_id_is_stored_by_prefix_exactly_when_its_text_is_made_for_its_own_seq() {
        let own = |prefix: usize| IdForm::Own { prefix };
        let custom = |shaped: Option<(usize, i64)>| IdForm::Custom { shaped };
        let cases = [
            (EventId::in_sequence("evt_a", 7), 7, own(5)),
            (EventId::from_string("evt_a.7"), 7, own(5)),
            (EventId::in_sequence("evt_a", 7), 8, custom(Some((5, 7)))),
            (EventId::from_string("evt_a.7"), 8, custom(Some((5, 7)))),
            (EventId::from_string("a.b.12"), 12, own(3)),
            (EventId::from_string(".3"), 3, own(0)),
            (EventId::from_string("evt_a.07"), 7, custom(None)),
            (EventId::from_string("evt_a.0"), 0, own(5)),
            (EventId::from_string("evt_a.-7"), 7, custom(None)),
            (EventId::from_string("evt_a.7 "), 7, custom(None)),
            (EventId::from_string("evt_a."), 7, custom(None)),
            (EventId::from_string("evt_01ABC"), 1, custom(None)),
            (EventId::from_string(format!("p.{}", u64::MAX)), 1, custom(None)),
            (EventId::in_sequence(&"x".repeat(80), 9), 9, own(80)),
        ];
        for (id, seq, form) in cases {
            assert_eq!(IdForm::of(&id, seq), form, "{id} at seq {seq}");
        }
    }
}
