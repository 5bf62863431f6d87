//! The persistence contract: session snapshots, turns, requests and the ordered event journal.
//!
//! A session runtime writes through [`Store::write`] with a [`WriteBatch`] that holds every
//! record and event produced since the previous write, so a backend can commit them in one
//! transaction (and batch writes of many sessions together). Events become visible to
//! subscribers only after the batch that holds them was acknowledged.
//!
//! Contract for implementations (checked by the conformance suite in `agent-testkit`):
//! - `append` is idempotent per `(session, seq)`: re-appending an identical event is `Ok`, a
//!   different event with a used seq is [`StoreError::Conflict`], and a seq not above the
//!   session's latest is [`StoreError::Conflict`] too. Gaps are allowed.
//! - Event reads are ascending by seq; `after` is exclusive.
//! - Turn, request and event writes for a session that has no snapshot are
//!   [`StoreError::UnknownSession`].
//! - `delete_session` removes the snapshot and everything under it; deleting an unknown session
//!   is `Ok`.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

use crate::event::Event;
use crate::ids::{RequestId, SessionId, TurnId};
use crate::request::Request;
use crate::session::SessionSnapshot;
use crate::turn::Turn;

/// A shared store.
pub type DynStore = Arc<dyn Store>;

/// Which events to read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EventQuery {
    /// Only events with a greater seq.
    pub after: Option<u64>,
    /// Only events of this turn.
    pub turn: Option<TurnId>,
    /// At most this many.
    pub limit: Option<usize>,
}

impl EventQuery {
    /// All events.
    pub fn all() -> Self {
        Self::default()
    }

    /// Events after `seq`.
    pub fn after(seq: u64) -> Self {
        EventQuery { after: Some(seq), ..Self::default() }
    }

    /// Restricts to one turn.
    pub fn turn(mut self, turn: TurnId) -> Self {
        self.turn = Some(turn);
        self
    }

    /// Limits the count.
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = Some(limit);
        self
    }
}

/// Everything a session produced since its previous write, committed together.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct WriteBatch {
    /// The session.
    pub session_id: Option<SessionId>,
    /// Delete the session's stored aggregate first (ID reuse).
    pub delete_first: bool,
    /// The newest snapshot, if it changed.
    pub snapshot: Option<SessionSnapshot>,
    /// Turns whose records changed.
    pub turns: Vec<Turn>,
    /// Requests whose records changed.
    pub requests: Vec<Request>,
    /// New events, ascending by seq.
    pub events: Vec<Arc<Event>>,
}

impl WriteBatch {
    /// An empty batch for `session_id`.
    pub fn new(session_id: SessionId) -> Self {
        WriteBatch { session_id: Some(session_id), ..Self::default() }
    }

    /// True when there is nothing to write.
    pub fn is_empty(&self) -> bool {
        !self.delete_first
            && self.snapshot.is_none()
            && self.turns.is_empty()
            && self.requests.is_empty()
            && self.events.is_empty()
    }
}

/// Persists sessions. Implementations must be cheap to call concurrently from many sessions.
#[async_trait]
pub trait Store: Send + Sync + fmt::Debug + 'static {
    /// Inserts or replaces a session snapshot.
    async fn save_session(&self, snapshot: &SessionSnapshot) -> Result<(), StoreError>;
    /// A session's snapshot.
    async fn fetch_session(&self, id: &SessionId) -> Result<Option<SessionSnapshot>, StoreError>;
    /// Every stored snapshot, ordered by session ID.
    async fn list_sessions(&self) -> Result<Vec<SessionSnapshot>, StoreError>;
    /// Removes a session with its turns, requests and events.
    async fn delete_session(&self, id: &SessionId) -> Result<(), StoreError>;

    /// Inserts or replaces a turn record.
    async fn save_turn(&self, turn: &Turn) -> Result<(), StoreError>;
    /// One turn.
    async fn fetch_turn(&self, session: &SessionId, turn: &TurnId) -> Result<Option<Turn>, StoreError>;
    /// A session's turns, by creation time.
    async fn list_turns(&self, session: &SessionId) -> Result<Vec<Turn>, StoreError>;

    /// Inserts or replaces a request record (with its final status and response).
    async fn save_request(&self, request: &Request) -> Result<(), StoreError>;
    /// One request.
    async fn fetch_request(&self, session: &SessionId, request: &RequestId) -> Result<Option<Request>, StoreError>;
    /// A session's requests, by creation time.
    async fn list_requests(&self, session: &SessionId) -> Result<Vec<Request>, StoreError>;

    /// Appends events of one session (ascending seq; see the module docs for idempotency).
    async fn append_events(&self, session: &SessionId, events: &[Arc<Event>]) -> Result<(), StoreError>;
    /// Reads events.
    async fn read_events(&self, session: &SessionId, query: &EventQuery) -> Result<Vec<Arc<Event>>, StoreError>;
    /// The highest stored seq of a session.
    async fn latest_seq(&self, session: &SessionId) -> Result<Option<u64>, StoreError>;

    /// Commits a batch. The default applies its parts one by one (delete, snapshot, turns,
    /// requests, events); transactional backends override it to commit atomically.
    async fn write(&self, batch: &WriteBatch) -> Result<(), StoreError> {
        let Some(session) = &batch.session_id else {
            return Ok(());
        };
        if batch.delete_first {
            self.delete_session(session).await?;
        }
        if let Some(snapshot) = &batch.snapshot {
            self.save_session(snapshot).await?;
        }
        for turn in &batch.turns {
            self.save_turn(turn).await?;
        }
        for request in &batch.requests {
            self.save_request(request).await?;
        }
        if !batch.events.is_empty() {
            self.append_events(session, &batch.events).await?;
        }
        Ok(())
    }
}

/// A store failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A write refers to a session that has no snapshot.
    #[error("store has no session `{0}`")]
    UnknownSession(SessionId),
    /// A write conflicts with stored data (a used seq with another event, a seq out of order).
    #[error("store conflict: {0}")]
    Conflict(String),
    /// The backend is temporarily unavailable (busy, locked); retrying may succeed.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The backend refuses writes (read-only file, full disk, closed).
    #[error("store write refused: {0}")]
    WriteRefused(String),
    /// Stored data cannot be decoded.
    #[error("store data corrupt: {0}")]
    Corrupt(String),
    /// Any other backend failure.
    #[error("store backend: {0}")]
    Backend(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl StoreError {
    /// True when retrying later may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, StoreError::Unavailable(_))
    }
}
