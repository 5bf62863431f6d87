//! Records encoded for the writer: JSON is produced by the calling task, so the single writer
//! thread only runs SQL.

use std::collections::HashSet;
use std::sync::Arc;

use agent_core::store::WriteBatch;
use agent_core::{Event, Request, RequestStatus, SessionId, SessionSnapshot, StoreError, Turn, TurnId};

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
    pub(crate) snapshot: Option<String>,
    /// `(turn ID, record)`.
    pub(crate) turns: Vec<(String, String)>,
    pub(crate) requests: Vec<RequestRow>,
    pub(crate) events: Vec<EventRow>,
    /// The turns its requests and events name that it does not write itself; each must be
    /// stored (`StoreError::UnknownTurn`).
    pub(crate) named_turns: Vec<TurnId>,
}

/// One request with its encoded form and the columns it is queried by.
#[derive(Debug)]
pub(crate) struct RequestRow {
    pub(crate) id: String,
    pub(crate) turn_id: TurnId,
    pub(crate) status: String,
    pub(crate) record: String,
}

/// One event with its encoded form.
#[derive(Debug)]
pub(crate) struct EventRow {
    pub(crate) seq: i64,
    pub(crate) turn_id: Option<TurnId>,
    pub(crate) json: String,
    /// Compared with the stored event when the same seq is appended again.
    pub(crate) event: Arc<Event>,
}

impl Prepared {
    pub(crate) fn new(session: SessionId) -> Self {
        Prepared {
            session,
            clear: Clear::Keep,
            snapshot: None,
            turns: Vec::new(),
            requests: Vec::new(),
            events: Vec::new(),
            named_turns: Vec::new(),
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

    /// Refuses an event ID that appears twice among `events` (the writer's unique index catches
    /// an ID stored before, but not an identical event repeated in one write).
    pub(crate) fn push_events(&mut self, events: &[Arc<Event>]) -> Result<(), StoreError> {
        if events.len() > 1 {
            let mut ids = HashSet::with_capacity(events.len());
            if let Some(twice) = events.iter().find(|e| !ids.insert(e.id.as_str())) {
                return Err(StoreError::Conflict(format!(
                    "event ID `{}` appears twice in one write to session `{}`",
                    twice.id, self.session
                )));
            }
        }
        self.events.reserve(events.len());
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
            self.events.push(EventRow {
                seq,
                turn_id: event.turn_id.clone(),
                json: encode(&**event)?,
                event: Arc::clone(event),
            });
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
