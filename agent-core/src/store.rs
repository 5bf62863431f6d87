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
//! - Event IDs are unique within a session: an event whose ID is already stored at another seq
//!   is [`StoreError::Conflict`].
//! - Event reads are ascending by seq; `after` is exclusive.
//! - Turn, request and event writes for a session that has no snapshot are
//!   [`StoreError::UnknownSession`]; a request, or an event with a `turn_id`, whose turn has no
//!   record (stored earlier or in the same batch) is [`StoreError::UnknownTurn`].
//! - `delete_session` removes the snapshot and everything under it; deleting an unknown session
//!   is `Ok`. A session whose snapshot is open ([`SessionSnapshot::is_open`]: a runtime may hold
//!   it) is refused with [`StoreError::SessionLive`] and nothing is deleted. A batch's
//!   `delete_first` is the harness's deliberate replacement and is not refused.
//! - Failed writes change nothing: a batch lands whole or not at all.
//! - A batch with an [`Expected`] precondition commits only if the stored snapshot is what it
//!   expects, checked in the same transaction as the write; otherwise it is
//!   [`StoreError::Conflict`] and nothing changes. This is how harnesses sharing a store never
//!   both take one session: each commits its start expecting what it saw.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

use crate::event::Event;
use crate::ids::{RequestId, SessionId, TurnId};
use crate::request::{Request, RequestStatus};
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

/// Events read from a store per page, at most, by [`EventPager`].
pub const EVENT_PAGE: usize = 1024;

/// Bytes of provider output (the events' raw JSON) an [`EventPager`] page aims at: pages of
/// events of megabytes hold fewer events.
pub const EVENT_PAGE_BYTES: usize = 16 << 20;

/// Sizes the pages of a long read of events ([`EventQuery::limit`]) by what the events weigh:
/// small at first, growing fourfold to [`EVENT_PAGE`] events while pages are light, and
/// shrinking to what [`EVENT_PAGE_BYTES`] holds when events are heavy — a page of 1,024 events
/// of megabytes would be gigabytes at once. Replays read the store this way.
///
/// ```
/// use agent_core::store::{EventPager, EventQuery};
///
/// let mut pager = EventPager::new();
/// let query = EventQuery::after(0).limit(pager.limit());
/// # let page: Vec<std::sync::Arc<agent_core::Event>> = Vec::new();
/// // ... read `query`'s page from the store, then:
/// pager.after(&page);
/// assert!(pager.limit() > query.limit.unwrap());
/// ```
#[derive(Clone, Copy, Debug)]
pub struct EventPager {
    limit: usize,
}

impl Default for EventPager {
    fn default() -> Self {
        EventPager::new()
    }
}

impl EventPager {
    /// A pager at its first, small page.
    pub fn new() -> Self {
        EventPager { limit: 4 }
    }

    /// How many events to ask for next.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Asks for one event next (the pages after it grow again).
    pub(crate) fn one_at_a_time(&mut self) {
        self.limit = 1;
    }

    /// Sizes the next page after `page`, the one read with [`EventPager::limit`].
    pub fn after(&mut self, page: &[Arc<Event>]) {
        let bytes: usize = page.iter().map(|e| e.raw_len()).sum();
        self.limit = if bytes > EVENT_PAGE_BYTES / 2 {
            (page.len() * EVENT_PAGE_BYTES / bytes).clamp(1, EVENT_PAGE)
        } else {
            (self.limit * 4).min(EVENT_PAGE)
        };
    }
}

/// Which requests to read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RequestQuery {
    /// Only requests of this turn.
    pub turn: Option<TurnId>,
    /// Only requests with this status.
    pub status: Option<RequestStatus>,
}

impl RequestQuery {
    /// All requests.
    pub fn all() -> Self {
        Self::default()
    }

    /// Restricts to one turn.
    pub fn turn(mut self, turn: TurnId) -> Self {
        self.turn = Some(turn);
        self
    }

    /// Restricts to one status.
    pub fn status(mut self, status: RequestStatus) -> Self {
        self.status = Some(status);
        self
    }

    /// True when `request` matches.
    pub fn matches(&self, request: &Request) -> bool {
        self.turn.as_ref().is_none_or(|t| &request.turn_id == t) && self.status.is_none_or(|s| request.status == s)
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
    /// What the stored snapshot must be for the batch to commit (compare and swap); `None`
    /// writes whatever is stored.
    pub expect: Option<Expected>,
}

/// The stored snapshot a [`WriteBatch`] expects when it commits.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Expected {
    /// No snapshot is stored for the session.
    Absent,
    /// This snapshot is stored, equal field by field (as it was read back from the store).
    Snapshot(Box<SessionSnapshot>),
    /// A snapshot is stored that does not decode (reading it fails with
    /// [`StoreError::Corrupt`]): what a purge of a damaged session expects.
    Unreadable,
}

impl Expected {
    /// The precondition for what [`Store::fetch_session`] returned: `Absent` for `None`.
    pub fn stored(snapshot: Option<SessionSnapshot>) -> Self {
        snapshot.map_or(Expected::Absent, |s| Expected::Snapshot(Box::new(s)))
    }

    /// Checks the snapshot stored for `session` now: [`StoreError::Conflict`] when it is not the
    /// expected one.
    pub fn check(&self, session: &SessionId, stored: Option<&SessionSnapshot>) -> Result<(), StoreError> {
        let why = match (self, stored) {
            (Expected::Absent, None) => return Ok(()),
            (Expected::Snapshot(expected), Some(stored)) if **expected == *stored => return Ok(()),
            (Expected::Absent, Some(_)) => "is stored, where none was expected",
            (Expected::Snapshot(_) | Expected::Unreadable, None) => "is no longer stored",
            (Expected::Snapshot(_), Some(_)) => "changed since it was read",
            (Expected::Unreadable, Some(_)) => "was rewritten since it could not be read",
        };
        Err(StoreError::Conflict(format!("the snapshot of session `{session}` {why}")))
    }

    /// Checks what reading the snapshot stored for `session` gave: a snapshot that does not
    /// decode ([`StoreError::Corrupt`]) is what [`Expected::Unreadable`] expects and fails any
    /// other expectation with its error; a read is checked as [`Expected::check`] does.
    pub fn check_read(
        &self,
        session: &SessionId,
        read: &Result<Option<SessionSnapshot>, StoreError>,
    ) -> Result<(), StoreError> {
        match read {
            Ok(stored) => self.check(session, stored.as_ref()),
            Err(StoreError::Corrupt(_)) if *self == Expected::Unreadable => Ok(()),
            Err(error) => Err(error.replicate()),
        }
    }
}

impl WriteBatch {
    /// An empty batch for `session_id`.
    pub fn new(session_id: SessionId) -> Self {
        WriteBatch { session_id: Some(session_id), ..Self::default() }
    }

    /// Empties the batch for the same session, keeping its vectors' capacity.
    pub(crate) fn clear(&mut self) {
        let WriteBatch { session_id: _, delete_first, snapshot, turns, requests, events, expect } = self;
        *delete_first = false;
        *expect = None;
        *snapshot = None;
        turns.clear();
        requests.clear();
        events.clear();
    }

    /// True when there is nothing to write (a precondition alone writes nothing).
    pub fn is_empty(&self) -> bool {
        !self.delete_first
            && self.snapshot.is_none()
            && self.turns.is_empty()
            && self.requests.is_empty()
            && self.events.is_empty()
    }
}

/// A write queued by [`Store::enqueue`]: resolves with the outcome once the batch committed.
pub type QueuedWrite = std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), StoreError>> + Send + 'static>>;

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
    /// A session's requests matching `query`, by creation time. The default filters
    /// [`Store::list_requests`]; indexed backends override it.
    async fn read_requests(&self, session: &SessionId, query: &RequestQuery) -> Result<Vec<Request>, StoreError> {
        let mut requests = self.list_requests(session).await?;
        requests.retain(|r| query.matches(r));
        Ok(requests)
    }

    /// Appends events of one session (ascending seq; see the module docs for idempotency).
    async fn append_events(&self, session: &SessionId, events: &[Arc<Event>]) -> Result<(), StoreError>;
    /// Reads events.
    async fn read_events(&self, session: &SessionId, query: &EventQuery) -> Result<Vec<Arc<Event>>, StoreError>;
    /// The highest stored seq of a session.
    async fn latest_seq(&self, session: &SessionId) -> Result<Option<u64>, StoreError>;
    /// The newest stored event of one turn (a finished turn's terminal event), `None` when the
    /// store holds none. The default reads the turn's events a page at a time; a backend that
    /// indexes events by turn overrides it with one lookup.
    async fn last_turn_event(&self, session: &SessionId, turn: &TurnId) -> Result<Option<Arc<Event>>, StoreError> {
        let (mut after, mut pager, mut last) = (0, EventPager::new(), None);
        loop {
            let page =
                self.read_events(session, &EventQuery::after(after).turn(turn.clone()).limit(pager.limit())).await?;
            pager.after(&page);
            let Some(newest) = page.last() else { return Ok(last) };
            after = newest.seq;
            last = page.into_iter().next_back();
        }
    }

    /// Commits a batch at once, for a backend whose writes never wait (an in-memory store):
    /// `Some` with the outcome [`Store::write`] would have had, or `None` (the default) when
    /// the write must wait. The session runtime tries it first on its own task, which saves a
    /// task and a boxed future per write; it must not block.
    fn write_now(&self, batch: &WriteBatch) -> Option<Result<(), StoreError>> {
        let _ = batch;
        None
    }

    /// Queues a batch to commit after the writes queued before it, for a backend that commits
    /// through one ordered queue (a single writer): `Some` with a future that resolves once the
    /// batch committed, or `None` (the default) when the backend cannot queue in order or not
    /// right now. The session runtime then keeps one write in flight and waits for it before the
    /// next; with a queue it keeps up to three, so the backend starts the next write while the
    /// session's previous one is still committing.
    ///
    /// The contract: batches of a session queued one after another commit in the order they
    /// were queued. With `follows` the session queued the batch while its previous write was
    /// still in flight; if that previous write fails, this one must fail too without being
    /// applied (it would leave a gap in the session's journal) — also when the previous one
    /// failed before it was applied (it could not be encoded). The call must not block: encode
    /// and hand over, nothing more.
    fn enqueue(&self, batch: &WriteBatch, follows: bool) -> Option<QueuedWrite> {
        let _ = (batch, follows);
        None
    }

    /// Commits a batch. The default checks its precondition, then applies its parts one by one
    /// (delete, snapshot, turns, requests, events); transactional backends override it to
    /// commit atomically, the precondition included.
    async fn write(&self, batch: &WriteBatch) -> Result<(), StoreError> {
        let Some(session) = &batch.session_id else {
            return Ok(());
        };
        let unreadable = batch.expect == Some(Expected::Unreadable);
        if let Some(expect) = &batch.expect {
            expect.check_read(session, &self.fetch_session(session).await)?;
        }
        if batch.delete_first {
            // A deliberate replacement: mark a stale open snapshot ended so the delete rule lets
            // it go (one that cannot be read was expected so, and goes as it is).
            let stale = if unreadable { None } else { self.fetch_session(session).await? };
            if let Some(mut stale) = stale.filter(SessionSnapshot::is_open) {
                stale.status = crate::session::SessionState::Abandoned;
                self.save_session(&stale).await?;
            }
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
    /// A request or event refers to a turn the session has no record of.
    #[error("store has no turn `{turn}` in session `{session}`")]
    UnknownTurn {
        /// The session.
        session: SessionId,
        /// The turn that has no record.
        turn: TurnId,
    },
    /// The session's snapshot is open (a runtime may hold it), so it cannot be deleted; stop it,
    /// or purge it through the harness, which reconciles a stale one.
    #[error("session `{0}` is open in the store; stop it or use Harness::purge_session")]
    SessionLive(SessionId),
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
    /// The same failure again, for another caller of the same write (a backend's source error is
    /// kept as its message).
    pub fn replicate(&self) -> StoreError {
        match self {
            StoreError::UnknownSession(id) => StoreError::UnknownSession(id.clone()),
            StoreError::UnknownTurn { session, turn } => {
                StoreError::UnknownTurn { session: session.clone(), turn: turn.clone() }
            }
            StoreError::SessionLive(id) => StoreError::SessionLive(id.clone()),
            StoreError::Conflict(m) => StoreError::Conflict(m.clone()),
            StoreError::Unavailable(m) => StoreError::Unavailable(m.clone()),
            StoreError::WriteRefused(m) => StoreError::WriteRefused(m.clone()),
            StoreError::Corrupt(m) => StoreError::Corrupt(m.clone()),
            StoreError::Backend(source) => StoreError::Backend(source.to_string().into()),
        }
    }

    /// True when retrying later may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, StoreError::Unavailable(_))
    }
}
