//! The journal: a session's events from sequencing to delivery.
//!
//! It assigns `seq`, gathers events and records into the pending [`WriteBatch`], writes one
//! batch at a time (so a slow store groups writes naturally), publishes an event — to the replay
//! ring and the live channel — only once the batch holding it committed, and serves replays
//! from the ring. It calls nothing back: it returns what the actor must act on (actions that
//! waited for a commit, a store failure, the terminal events it published).

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use futures::FutureExt;
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;
use tracing::{Instrument, Span};

use crate::error::{Error, Result};
use crate::event::{Event, EventKind, RawJson, SCHEMA_VERSION};
use crate::ids::{EventId, TurnId};
use crate::request::Request;
use crate::runtime::subscription::{Grant, LiveBatch, past_latest};
use crate::runtime::write_batch;
use crate::session::{Durability, ExitReason, SessionRef, SessionSnapshot};
use crate::store::{DynStore, QueuedWrite, StoreError, WriteBatch};
use crate::time::Timestamp;
use crate::turn::Turn;

/// What waits for a batch to commit.
pub(super) enum AfterCommit {
    /// A reply that promises durability. It gets `Err` only when the batch failed and the
    /// session stops over it (`StoreFailurePolicy::Stop`); under `Degrade` the session goes on
    /// live-only and the command did take effect.
    Reply(Box<dyn FnOnce(Result<()>) + Send>),
    /// Provider admission of a turn, which must not start before the turn is checkpointed.
    Admit { turn: TurnId, generation: u64 },
}

/// A finished batch write: the batch (handed back even when the store panicked), the actions
/// that waited for it, and the store's answer.
pub(super) type Flushed = (WriteBatch, Vec<AfterCommit>, std::result::Result<(), StoreError>);

/// A finished write with its events published: the actions that waited for it, or the failure.
pub(super) type WriteOutcome = std::result::Result<Vec<AfterCommit>, StoreFailure>;

/// What [`Journal::start_flush`] did.
pub(super) enum FlushStart {
    /// Nothing to write (or no store): these actions need no commit.
    Nothing(Vec<AfterCommit>),
    /// A write is in flight; [`Journal::flushed`] waits for it.
    InFlight,
    /// The store wrote the pending batch at once and its events are published: what
    /// [`Journal::on_flushed`] returns for a write that finished later.
    Written(WriteOutcome),
}

/// A store write that failed: the session now runs without a store.
pub(super) struct StoreFailure {
    pub(super) error: StoreError,
    /// Every action that waited for a commit that will not come.
    pub(super) actions: Vec<AfterCommit>,
}

/// At most this many events go to live subscribers in one send while sends wait for one of
/// them. The live channel holds `event_buffer_size` sends, so a subscriber never lags sooner than
/// with one event per send, and one that stops reading pins at most this many times the buffer
/// (plus the large sends below).
const LIVE_BATCH: usize = 16;

/// At most this many events go in one send while fewer than [`LIVE_LARGE_QUEUED`] sends wait
/// unread: one hand-over, and so at most one wake-up of a subscriber on another thread, for
/// everything the actor gathered (up to its `LIVE_COALESCE`, 1,024 events), where sends of
/// [`LIVE_BATCH`] woke it once per send (side by side on 1 M deltas with the memory store:
/// context switches halved, the run ~8 % faster).
const LIVE_LARGE_BATCH: usize = 1024;

/// Large sends are made only while fewer sends than this wait unread, so the channel never
/// holds more of them: a subscriber that stops reading pins at most this many large sends
/// beside `event_buffer_size` sends of [`LIVE_BATCH`].
const LIVE_LARGE_QUEUED: usize = 8;

/// Evicted events kept for their allocations: a batch from the provider (at most 256 messages)
/// is sequenced before a store commits and the ring evicts as many, so a batch's worth lets
/// every event of the next reuse one. Only a session whose ring is full keeps any.
const RECYCLED: usize = 256;

/// Events that may wait for the next store write while one is in flight (see
/// [`Journal::is_backlogged`]).
const MAX_PENDING_EVENTS: usize = 2048;

/// Bytes of provider output (the events' raw JSON) that may wait for the next store write while
/// one is in flight: with lines of megabytes, [`MAX_PENDING_EVENTS`] alone would let gigabytes
/// wait.
const MAX_PENDING_BYTES: usize = 16 << 20;

/// Bytes of provider output (the events' raw JSON) the replay ring keeps at most, beside its
/// `event_buffer_size` events: it always keeps the newest event, and no more events of
/// megabytes than fit.
const RING_BYTES: usize = 32 << 20;

/// Writes a store that queues in order ([`Store::enqueue`](crate::store::Store::enqueue)) may
/// have in flight for one session: the next ones are encoded and queued while the oldest
/// commits. Three keep the SQLite writer busy while one write waits for its `fsync` and the
/// next is being encoded (side by side, 1M durable events: two in flight ~15 % faster than one,
/// three ~10 % faster than two, four no faster than three).
const MAX_QUEUED_WRITES: usize = 3;

/// A store write in flight.
// At most three, in a deque that keeps its capacity: boxing the batch would cost an allocation
// per write.
#[allow(clippy::large_enum_variant)]
enum Writing {
    /// [`Store::write`](crate::store::Store::write) in a task of its own: the only write in
    /// flight, since two tasks could reach the store in either order.
    Task(JoinHandle<Flushed>),
    /// Queued by the store behind the writes before it; the batch stays here, so a failure
    /// ahead of it can still publish its events in order.
    Queued { batch: WriteBatch, actions: Vec<AfterCommit>, commit: crate::store::QueuedWrite },
    /// Failed before the store took it (the store panicked while queuing it): nothing is queued
    /// behind it, since the store would not know to refuse what follows.
    Failed { batch: WriteBatch, actions: Vec<AfterCommit>, error: StoreError },
}

pub(super) struct Journal {
    session: SessionRef,
    /// Prefix of this session's event IDs (see [`EventId::in_sequence`]).
    event_prefix: String,
    /// The time of the current wake-up, shared by the events it sequences.
    clock: Option<Timestamp>,
    next_seq: u64,
    published_seq: u64,
    store: Option<DynStore>,
    /// The store the session was started with, even when it degraded.
    home_store: Option<DynStore>,
    durability: Durability,
    pending: WriteBatch,
    /// The raw JSON bytes of the pending batch's events.
    pending_bytes: usize,
    /// The events vector of the last batch that committed in flight, emptied, for the next
    /// batch: a long turn reuses two vectors instead of growing a new one per write (a write made
    /// at once hands its vector straight back to `pending`).
    spare_events: Vec<Arc<Event>>,
    after_commit: Vec<AfterCommit>,
    /// Writes in flight, oldest first; they finish in this order.
    writing: VecDeque<Writing>,
    ring: VecDeque<Arc<Event>>,
    ring_capacity: usize,
    /// The raw JSON bytes of the ring's events.
    ring_bytes: usize,
    /// The turn and seq of the last turn event that left the ring: that turn's events up to the
    /// seq are gone from the ring (turns run one after another, so only the oldest turn in the
    /// ring can have lost some).
    last_evicted: Option<(TurnId, u64)>,
    /// Live delivery to subscribers; created by the first subscription and dropped when the last
    /// one is gone, so an unwatched session holds no channel and spends nothing per event on it.
    live: Option<broadcast::Sender<LiveBatch>>,
    /// Events published since the last live send (see [`Journal::send_live`]).
    live_pending: Vec<Arc<Event>>,
    /// Terminal events published since the actor last asked (they wake waiters).
    terminals: Vec<Arc<Event>>,
    /// Events that left the ring with no other reference, their raw JSON let go: the next
    /// events are written into their allocations (see [`Journal::make`]).
    recycled: Vec<Arc<Event>>,
    span: Span,
}

impl Drop for Journal {
    fn drop(&mut self) {
        // Subscribers get every published event before the channel closes.
        self.send_live();
    }
}

impl Journal {
    pub(super) fn new(
        session: SessionRef,
        store: Option<DynStore>,
        home_store: Option<DynStore>,
        durability: Durability,
        ring_capacity: usize,
        span: Span,
    ) -> Self {
        Journal {
            pending: WriteBatch::new(session.id.clone()),
            pending_bytes: 0,
            spare_events: Vec::new(),
            session,
            event_prefix: EventId::generate().to_string(),
            clock: None,
            next_seq: 1,
            published_seq: 0,
            store,
            home_store,
            durability,
            after_commit: Vec::new(),
            writing: VecDeque::new(),
            ring: VecDeque::new(),
            ring_capacity,
            ring_bytes: 0,
            last_evicted: None,
            live: None,
            live_pending: Vec::new(),
            recycled: Vec::new(),
            terminals: Vec::new(),
            span,
        }
    }

    /// Takes over the events the startup committed.
    pub(super) fn restore(&mut self, events: Vec<Arc<Event>>) {
        for event in events {
            self.next_seq = event.seq + 1;
            self.publish(event);
        }
        self.terminals.clear();
    }

    /// A new actor wake-up: events sequenced from now share a new timestamp.
    pub(super) fn wake(&mut self) {
        self.clock = None;
    }

    pub(super) fn published_seq(&self) -> u64 {
        self.published_seq
    }

    pub(super) fn durability(&self) -> &Durability {
        &self.durability
    }

    /// The store events are committed to (`None` when disabled or degraded).
    pub(super) fn store(&self) -> Option<&DynStore> {
        self.store.as_ref()
    }

    /// Sequences an event. With a store it is published after its batch commits; without one,
    /// at once.
    pub(super) fn emit(&mut self, turn: Option<TurnId>, kind: EventKind, raw: Option<RawJson>) {
        let event = self.make(turn, kind, raw);
        self.sequence(event);
    }

    /// [`Journal::emit`], keeping the event.
    pub(super) fn emit_shared(&mut self, turn: Option<TurnId>, kind: EventKind, raw: Option<RawJson>) -> Arc<Event> {
        let event = self.make(turn, kind, raw);
        self.sequence(Arc::clone(&event));
        event
    }

    fn make(&mut self, turn: Option<TurnId>, kind: EventKind, raw: Option<RawJson>) -> Arc<Event> {
        let seq = self.next_seq;
        self.next_seq += 1;
        let at = *self.clock.get_or_insert_with(Timestamp::now);
        // A streaming turn evicts an event from the ring for every one it makes: writing into
        // the evicted one's allocation saves an allocation and a free (often on another
        // thread) per event, and it names this session and provider already, and has an ID of
        // this session's sequence, whose digits are all that change.
        if let Some(mut spare) = self.recycled.pop()
            && let Some(slot) = Arc::get_mut(&mut spare)
        {
            slot.id.set_in_sequence(&self.event_prefix, seq);
            slot.seq = seq;
            slot.turn_id = turn;
            slot.at = at;
            slot.kind = kind;
            slot.raw = raw;
            return spare;
        }
        Arc::new(Event {
            schema_version: SCHEMA_VERSION,
            id: EventId::in_sequence(&self.event_prefix, seq),
            seq,
            session_id: self.session.id.clone(),
            turn_id: turn,
            provider: self.session.provider.clone(),
            at,
            kind,
            raw,
        })
    }

    /// Keeps `evicted` for [`Journal::make`] when nothing else holds it, up to [`RECYCLED`].
    fn recycle(&mut self, mut evicted: Arc<Event>) {
        if self.recycled.len() < RECYCLED
            && let Some(event) = Arc::get_mut(&mut evicted)
        {
            // The raw JSON may be a slice of a read buffer: let it go now, not when reused.
            event.raw = None;
            // `make` keeps these two when it reuses the event.
            debug_assert!(event.session_id == self.session.id && event.provider == self.session.provider);
            self.recycled.push(evicted);
        }
    }

    fn sequence(&mut self, event: Arc<Event>) {
        if self.store.is_some() {
            self.pending_bytes += event.raw_len();
            self.pending.events.push(event);
        } else {
            self.publish(event);
        }
    }

    fn publish(&mut self, event: Arc<Event>) {
        self.published_seq = event.seq;
        if self.ring.len() == self.ring_capacity {
            self.evict();
        }
        self.ring_bytes += event.raw_len();
        // Events of megabytes: the oldest go until the ring is within its bytes again.
        while self.ring_bytes > RING_BYTES && !self.ring.is_empty() {
            self.evict();
        }
        if event.is_terminal() {
            self.terminals.push(Arc::clone(&event));
        }
        if self.live.is_none() {
            self.ring.push_back(event);
            return;
        }
        // Every reference taken is one more atomic count on a line other threads share: the
        // event is cloned once (for the ring) and moved on.
        self.ring.push_back(Arc::clone(&event));
        self.live_pending.push(event);
    }

    /// Drops the ring's oldest event, remembering how far its turn's events are gone.
    fn evict(&mut self) {
        let Some(evicted) = self.ring.pop_front() else { return };
        self.ring_bytes -= evicted.raw_len();
        if let Some(turn) = &evicted.turn_id {
            match &mut self.last_evicted {
                // The common case, a long turn: no ID clone per eviction.
                Some((last, seq)) if last == turn => *seq = evicted.seq,
                last => *last = Some((turn.clone(), evicted.seq)),
            }
        }
        self.recycle(evicted);
    }

    /// Sends the events published since the last send to live subscribers: in one send (up to
    /// [`LIVE_LARGE_BATCH`]) while they keep up, in sends of [`LIVE_BATCH`] while sends wait for
    /// one of them. The actor calls it before it waits for anything, so nothing published stays
    /// unsent.
    pub(super) fn send_live(&mut self) {
        if self.live_pending.is_empty() {
            return;
        }
        let Some(live) = &self.live else {
            self.live_pending.clear();
            return;
        };
        // Counting the unread sends locks a few of the channel's slots: once per call, not per
        // event, and only when there is more than a small send's worth.
        let size = if self.live_pending.len() > LIVE_BATCH && live.len() < LIVE_LARGE_QUEUED {
            LIVE_LARGE_BATCH
        } else {
            LIVE_BATCH
        };
        let mut gone = false;
        while !gone && !self.live_pending.is_empty() {
            let take = self.live_pending.len().min(size);
            // One allocation per batch of several events, which takes them over (no count
            // changes per event); the pending vector is reused.
            let batch = match take {
                1 => LiveBatch::One(self.live_pending.pop().expect("one event")),
                _ => LiveBatch::Many(self.live_pending.drain(..take).collect()),
            };
            // Once every subscription is gone, the rest are dropped.
            gone = live.send(batch).is_err();
        }
        if gone {
            self.live_pending.clear();
            self.live = None;
        }
    }

    /// How many published events wait for [`send_live`](Journal::send_live).
    pub(super) fn unsent_live(&self) -> usize {
        self.live_pending.len()
    }

    /// True when terminal events were published since the last [`Journal::take_terminals`].
    pub(super) fn has_terminals(&self) -> bool {
        !self.terminals.is_empty()
    }

    /// True when events, records or actions wait for the next write.
    pub(super) fn has_pending(&self) -> bool {
        !self.pending.is_empty() || !self.after_commit.is_empty()
    }

    /// The terminal events published since the last call.
    pub(super) fn take_terminals(&mut self) -> Vec<Arc<Event>> {
        std::mem::take(&mut self.terminals)
    }

    pub(super) fn record_turn(&mut self, turn: &Turn) {
        if self.store.is_some() {
            self.pending.turns.push(turn.clone());
        }
    }

    pub(super) fn record_request(&mut self, request: &Request) {
        if self.store.is_some() {
            self.pending.requests.push(request.clone());
        }
    }

    pub(super) fn record_snapshot(&mut self, snapshot: &SessionSnapshot) {
        if self.store.is_some() {
            self.pending.snapshot = Some(snapshot.clone());
        }
    }

    /// Queues `action` for the next commit, or hands it back when there is no store to wait for.
    pub(super) fn after_commit(&mut self, action: AfterCommit) -> Option<AfterCommit> {
        if self.store.is_some() {
            self.after_commit.push(action);
            None
        } else {
            Some(action)
        }
    }

    /// Starts writing the pending batch: at once when the store can
    /// ([`Store::write_now`](crate::store::Store::write_now)), else queued behind the writes in
    /// flight when the store queues in order ([`Store::enqueue`](crate::store::Store::enqueue)),
    /// else in a task once no write is in flight.
    pub(super) fn start_flush(&mut self) -> FlushStart {
        let Some(store) = self.store.as_ref().filter(|_| !self.pending.is_empty()) else {
            if self.writing.is_empty() {
                return FlushStart::Nothing(std::mem::take(&mut self.after_commit));
            }
            return FlushStart::InFlight;
        };
        let follows = !self.writing.is_empty();
        if follows
            && (self.writing.len() >= MAX_QUEUED_WRITES
                || matches!(self.writing.back(), Some(Writing::Task(_) | Writing::Failed { .. })))
        {
            return FlushStart::InFlight;
        }
        let span = tracing::debug_span!(parent: &self.span, "store_write", events = self.pending.events.len());
        // A panicking store is a failed write, not a lost batch.
        let panicked = || StoreError::Backend("the store panicked during the write".into());
        if !follows {
            // Written where it lies: a store that writes at once gets the pending batch itself,
            // which is then emptied in place (no batch moved or made per write).
            let now = span.in_scope(|| catch_unwind(AssertUnwindSafe(|| store.write_now(&self.pending))));
            let result = match now {
                Ok(Some(result)) => Some(result),
                Err(_) => Some(Err(panicked())),
                Ok(None) => None,
            };
            if let Some(result) = result {
                let events = std::mem::take(&mut self.pending.events);
                self.pending.clear();
                self.pending_bytes = 0;
                let actions = std::mem::take(&mut self.after_commit);
                return FlushStart::Written(self.committed(events, actions, result));
            }
        }
        let store = Arc::clone(store);
        let mut next = WriteBatch::new(self.session.id.clone());
        next.events = std::mem::take(&mut self.spare_events);
        let batch = std::mem::replace(&mut self.pending, next);
        let bytes = std::mem::take(&mut self.pending_bytes);
        let queued = span.in_scope(|| catch_unwind(AssertUnwindSafe(|| store.enqueue(&batch, follows))));
        let commit: QueuedWrite = match queued {
            Ok(Some(commit)) => {
                Box::pin(AssertUnwindSafe(commit).catch_unwind().map(move |r| r.unwrap_or_else(|_| Err(panicked()))))
            }
            Err(_) => {
                let actions = std::mem::take(&mut self.after_commit);
                self.writing.push_back(Writing::Failed { batch, actions, error: panicked() });
                return FlushStart::InFlight;
            }
            Ok(None) if follows => {
                // Not now: the batch waits for the write in flight.
                let next = std::mem::replace(&mut self.pending, batch);
                self.pending_bytes = bytes;
                self.spare_events = next.events;
                return FlushStart::InFlight;
            }
            Ok(None) => {
                let actions = std::mem::take(&mut self.after_commit);
                self.writing.push_back(Writing::Task(tokio::spawn(
                    async move {
                        let result = write_batch(&store, &batch).await;
                        (batch, actions, result)
                    }
                    .instrument(span),
                )));
                return FlushStart::InFlight;
            }
        };
        let actions = std::mem::take(&mut self.after_commit);
        self.writing.push_back(Writing::Queued { batch, actions, commit });
        FlushStart::InFlight
    }

    pub(super) fn is_flushing(&self) -> bool {
        !self.writing.is_empty()
    }

    /// True while a write is in flight and [`MAX_PENDING_EVENTS`] more (or [`MAX_PENDING_BYTES`]
    /// of them) wait for the next one:
    /// the actor stops taking provider messages until the store catches up, so the bounded
    /// sink fills, the provider's reader waits, and the CLI's pipe fills — memory stays bounded
    /// however slow the store is, and the next batch is capped.
    pub(super) fn is_backlogged(&self) -> bool {
        !self.writing.is_empty()
            && (self.pending.events.len() >= MAX_PENDING_EVENTS || self.pending_bytes >= MAX_PENDING_BYTES)
    }

    /// Waits for the oldest write in flight (guard with [`Journal::is_flushing`]). Cancel-safe:
    /// the write stays in flight until it finished.
    pub(super) async fn flushed(&mut self) -> Flushed {
        let result = match self.writing.front_mut().expect("guarded by is_flushing") {
            Writing::Task(handle) => {
                let done = match handle.await {
                    Ok(done) => done,
                    // The write task catches panics and is never aborted, so this is the Tokio
                    // runtime shutting down under the session: nothing is left to publish to.
                    Err(_) => (
                        WriteBatch::default(),
                        Vec::new(),
                        Err(StoreError::Backend("the store write was cancelled".into())),
                    ),
                };
                self.writing.pop_front();
                return done;
            }
            Writing::Queued { commit, .. } => commit.await,
            Writing::Failed { .. } => {
                let Some(Writing::Failed { batch, actions, error }) = self.writing.pop_front() else {
                    unreachable!("the front write failed")
                };
                return (batch, actions, Err(error));
            }
        };
        let Some(Writing::Queued { batch, actions, .. }) = self.writing.pop_front() else {
            unreachable!("the front write was queued")
        };
        (batch, actions, result)
    }

    /// Publishes a committed batch and returns the actions that waited for it; a failed write
    /// degrades the journal to live-only: the batch's and every later event are still published.
    pub(super) fn on_flushed(&mut self, flushed: Flushed) -> WriteOutcome {
        let (batch, actions, result) = flushed;
        self.committed(batch.events, actions, result)
    }

    /// Publishes the `events` of a finished write and returns the `actions` that waited for it;
    /// see [`Journal::on_flushed`].
    fn committed(
        &mut self,
        mut events: Vec<Arc<Event>>,
        actions: Vec<AfterCommit>,
        result: std::result::Result<(), StoreError>,
    ) -> WriteOutcome {
        if let Err(error) = result {
            self.store = None;
            self.durability = Durability::Degraded { reason: error.to_string(), at: Timestamp::now() };
            // The writes queued behind it fail with it (`follows`); their events, and those
            // still pending, are published in order.
            let mut actions = actions;
            for event in events {
                self.publish(event);
            }
            for writing in std::mem::take(&mut self.writing) {
                match writing {
                    Writing::Queued { batch, actions: theirs, .. } | Writing::Failed { batch, actions: theirs, .. } => {
                        actions.extend(theirs);
                        for event in batch.events {
                            self.publish(event);
                        }
                    }
                    // Never behind another write.
                    Writing::Task(handle) => handle.abort(),
                }
            }
            let later = std::mem::replace(&mut self.pending, WriteBatch::new(self.session.id.clone()));
            self.pending_bytes = 0;
            for event in later.events {
                self.publish(event);
            }
            actions.append(&mut self.after_commit);
            return Err(StoreFailure { error, actions });
        }
        for event in events.drain(..) {
            self.publish(event);
        }
        // The emptied vector is the next batch's (see `spare_events`), unless the pending batch
        // still has its own.
        if self.pending.events.capacity() == 0 {
            self.pending.events = events;
        } else {
            self.spare_events = events;
        }
        Ok(actions)
    }

    /// Offers the final snapshot to the store of a session that degraded, so that its stored
    /// snapshot never reads back as running (its history there stays incomplete, and the
    /// snapshot says so in `durability`).
    pub(super) async fn offer_final_snapshot(&mut self, snapshot: &SessionSnapshot, timeout: std::time::Duration) {
        let (None, Some(home)) = (&self.store, &self.home_store) else { return };
        let mut batch = WriteBatch::new(self.session.id.clone());
        batch.snapshot = Some(snapshot.clone());
        match tokio::time::timeout(timeout, write_batch(home, &batch)).await {
            Ok(Ok(())) => tracing::debug!("final snapshot of a degraded session stored"),
            Ok(Err(error)) => tracing::warn!(%error, "the final snapshot could not be stored"),
            Err(_) => tracing::warn!(?timeout, "storing the final snapshot timed out"),
        }
    }

    // ----- replay --------------------------------------------------------------------------

    /// A finished turn's terminal event, if the ring still holds it.
    pub(super) fn ring_terminal(&self, turn: &TurnId) -> Option<&Arc<Event>> {
        self.ring.iter().rev().find(|e| e.is_terminal() && e.turn_id.as_ref() == Some(turn))
    }

    /// A replay-only grant for a turn that finished with `terminal_seq`.
    pub(super) fn grant_finished(
        &self,
        turn: Option<&TurnId>,
        after: Option<u64>,
        exact: bool,
        terminal_seq: u64,
        for_stream: bool,
        exit: watch::Receiver<Option<ExitReason>>,
    ) -> Result<Grant> {
        // Nothing of the finished turn lies after the cursor: an empty subscription, or for a
        // stream (which must end with the terminal event) `ReplayUnavailable`.
        let Some(after) = after.filter(|&after| after < terminal_seq) else {
            if for_stream {
                return Err(Error::ReplayUnavailable {
                    reason: format!(
                        "the turn already finished; its terminal event (seq {terminal_seq}) is not after the cursor"
                    ),
                });
            }
            return Ok(Grant::empty(self.published_seq, exit));
        };
        let buffered = self.buffered(after, terminal_seq, turn);
        let store_replay = match &self.store {
            Some(store) if !self.ring_covers(after) => Some((Arc::clone(store), terminal_seq)),
            _ => None,
        };
        if store_replay.is_none() {
            if !buffered.iter().any(|e| e.seq == terminal_seq) {
                return Err(Error::ReplayUnavailable {
                    reason: format!(
                        "the turn's terminal event (seq {terminal_seq}) is no longer buffered and the session has no store"
                    ),
                });
            }
            self.check_retained(turn, after, exact)?;
        }
        Ok(Grant { rx: None, live_from: terminal_seq, store_replay, buffered, store: None, exit, turn_ended: false })
    }

    /// A grant that replays from `after` (if any) and then follows live events.
    pub(super) fn grant_live(
        &mut self,
        turn: Option<&TurnId>,
        after: Option<u64>,
        exact: bool,
        exit: watch::Receiver<Option<ExitReason>>,
    ) -> Result<Grant> {
        let (buffered, store_replay) = match after {
            None => (Vec::new(), None),
            Some(after) => {
                let store_replay = match &self.store {
                    Some(store) if !self.ring_covers(after) => Some((Arc::clone(store), self.published_seq)),
                    _ => None,
                };
                if store_replay.is_none() {
                    self.check_retained(turn, after, exact)?;
                }
                (self.buffered(after, self.published_seq, turn), store_replay)
            }
        };
        // Sized like the replay buffer: a subscriber that falls further behind catches up from
        // the store, or without one gets `Lagged`.
        let capacity = self.ring_capacity;
        // Published but not yet sent events are in the replay above; the subscription skips them
        // when they arrive live.
        let rx = self.live.get_or_insert_with(|| broadcast::channel(capacity).0).subscribe();
        let store = self.store.clone();
        Ok(Grant {
            rx: Some(rx),
            live_from: self.published_seq,
            store_replay,
            buffered,
            store,
            exit,
            turn_ended: false,
        })
    }

    /// The `seq` of the latest event the session made (0 before any).
    pub(super) fn latest_seq(&self) -> u64 {
        self.next_seq - 1
    }

    /// An exact cursor names an event the session has made: one past its latest event would
    /// skip the live events up to it without a word.
    pub(super) fn check_cursor(&self, after: u64) -> Result<()> {
        let latest = self.latest_seq();
        if after > latest {
            return Err(past_latest(after, latest));
        }
        Ok(())
    }

    /// With no store to replay from, an exact cursor must find every event it asks for in the
    /// ring: a gap is an error, never silent.
    fn check_retained(&self, turn: Option<&TurnId>, after: u64, exact: bool) -> Result<()> {
        if !exact || self.ring_covers(after) {
            return Ok(());
        }
        // Only the oldest turn in the ring can have lost events to eviction.
        let lost = match (turn, &self.last_evicted) {
            (None, _) => true,
            (Some(turn), Some((evicted, seq))) => evicted == turn && *seq > after,
            (Some(_), None) => false,
        };
        if !lost {
            return Ok(());
        }
        let first = self.ring.front().map_or(self.published_seq + 1, |e| e.seq);
        Err(Error::ReplayUnavailable {
            reason: format!(
                "events after seq {after} are no longer buffered (the buffer starts at seq {first}) and the session has no store"
            ),
        })
    }

    /// Whether the ring holds every published event after `after`.
    fn ring_covers(&self, after: u64) -> bool {
        match self.ring.front() {
            Some(first) => first.seq <= after + 1,
            None => after >= self.published_seq,
        }
    }

    fn buffered(&self, after: u64, upto: u64, turn: Option<&TurnId>) -> Vec<Arc<Event>> {
        let start = self.ring.partition_point(|e| e.seq <= after);
        self.ring
            .range(start..)
            .take_while(|e| e.seq <= upto)
            .filter(|e| turn.is_none_or(|t| e.turn_id.as_ref() == Some(t)))
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{ProviderId, SessionId};

    fn journal() -> Journal {
        let session = SessionRef { provider: ProviderId::new("p"), id: SessionId::new("s").unwrap() };
        Journal::new(session, None, None, Durability::Disabled, 1000, Span::none())
    }

    fn publish(journal: &mut Journal, events: usize) {
        for _ in 0..events {
            journal.emit(None, EventKind::MessageDelta { item_id: None, text: "x".into() }, None);
        }
        journal.send_live();
    }

    fn sizes(rx: &mut broadcast::Receiver<LiveBatch>) -> Vec<usize> {
        std::iter::from_fn(|| rx.try_recv().ok()).map(|batch| batch.len()).collect()
    }

    #[test]
    fn live_sends_are_large_while_subscribers_keep_up_and_small_while_sends_wait() {
        let mut journal = journal();
        let (_exit, exit) = watch::channel(None);
        let mut rx = journal.grant_live(None, None, false, exit).unwrap().rx.unwrap();
        // Caught up: what was gathered goes in one send, up to the large size.
        publish(&mut journal, 1000);
        assert_eq!(sizes(&mut rx), [1000]);
        publish(&mut journal, 1500);
        assert_eq!(sizes(&mut rx), [LIVE_LARGE_BATCH, 1500 - LIVE_LARGE_BATCH]);
        // A few events go as one small send, a lone one without a batch.
        publish(&mut journal, 3);
        publish(&mut journal, 1);
        assert_eq!(sizes(&mut rx), [3, 1]);
        // Sends waiting unread: large ones only until LIVE_LARGE_QUEUED of them wait, then small.
        for _ in 0..LIVE_LARGE_QUEUED {
            publish(&mut journal, 100);
        }
        publish(&mut journal, 100);
        let mut expected = vec![100; LIVE_LARGE_QUEUED];
        expected.extend([LIVE_BATCH; 100 / LIVE_BATCH]);
        expected.push(100 % LIVE_BATCH);
        assert_eq!(sizes(&mut rx), expected);
        // Read up again: large sends again.
        publish(&mut journal, 100);
        assert_eq!(sizes(&mut rx), [100]);
        assert_eq!(journal.unsent_live(), 0);
    }

    #[test]
    fn the_ring_keeps_events_of_megabytes_within_its_bytes_and_always_the_newest() {
        let mut journal = journal();
        let line = |bytes: usize| Some(RawJson::parsed(format!("\"{}\"", "x".repeat(bytes - 2))));
        for _ in 0..100 {
            journal.emit(None, EventKind::Warning { message: String::new() }, line(1 << 20));
        }
        assert_eq!(journal.ring.len(), RING_BYTES >> 20, "as many as fit in its bytes, not its 1,000 events");
        assert_eq!(journal.ring.back().map(|e| e.seq), Some(100));
        assert_eq!(journal.ring_bytes, RING_BYTES);
        journal.emit(None, EventKind::Warning { message: String::new() }, line(RING_BYTES + 1));
        assert_eq!(journal.ring.len(), 1, "an event larger than the bound is kept alone");
        journal.emit(None, EventKind::Warning { message: String::new() }, None);
        assert_eq!(journal.ring.len(), 1, "and goes with the next");
        assert_eq!(journal.ring_bytes, 0);
        assert!(!journal.ring_covers(50), "a gap is known, not served");
    }
}
