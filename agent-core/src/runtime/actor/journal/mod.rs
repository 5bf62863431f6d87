//! The journal: a session's events from sequencing to delivery.
//!
//! It assigns `seq`, gathers events and records into the pending [`WriteBatch`], writes one
//! batch at a time (so a slow store groups writes naturally), publishes an event — to the replay
//! ring and the live channel — only once the batch holding it committed, and serves replays
//! from the ring. It calls nothing back: it returns what the actor must act on (actions that
//! waited for a commit, a store failure, the terminal events it published).
//!
//! This module sequences and publishes; [`writes`] is the store side, [`replay`] what a new
//! subscription is granted, [`live`] the channel live subscribers follow.

use std::collections::VecDeque;
use std::sync::Arc;

use tokio::task::JoinHandle;
use tracing::Span;

use crate::error::Result;
use crate::event::{Event, EventKind, RawJson, SCHEMA_VERSION};
use crate::ids::{EventId, TurnId};
use crate::session::{Durability, SessionRef};
use crate::store::{DynStore, StoreError, WriteBatch};
use crate::time::Timestamp;

mod live;
mod replay;
mod writes;

use live::Live;

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
    live: Option<Live>,
    /// Events published since the last live send (see [`Journal::send_live`]).
    live_pending: Vec<Arc<Event>>,
    /// The raw JSON bytes of `live_pending`.
    live_pending_bytes: usize,
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
        // Held events die with the ring: the newest, sent again and held, shows a subscriber
        // that has not read them yet that they are gone, as a later event would have.
        if let Some(live) = &mut self.live
            && let Some(newest) = self.ring.back()
        {
            live.send_last(newest);
        }
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
            live_pending_bytes: 0,
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
        let bytes = event.raw_len();
        if self.ring.len() == self.ring_capacity {
            self.evict();
        }
        self.ring_bytes += bytes;
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
        self.live_pending_bytes += bytes;
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

    /// Sends the events published since the last send to live subscribers (see [`Live::send`]).
    /// The actor calls it before it waits for anything, so nothing published stays unsent.
    pub(super) fn send_live(&mut self) {
        if self.live_pending.is_empty() {
            return;
        }
        let bytes = std::mem::take(&mut self.live_pending_bytes);
        let Some(live) = &mut self.live else {
            self.live_pending.clear();
            return;
        };
        if !live.send(&mut self.live_pending, bytes) {
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
}

#[cfg(test)]
mod tests {
    use tokio::sync::{broadcast, watch};

    use super::live::{LIVE_BATCH, LIVE_BYTES, LIVE_LARGE_BATCH, LIVE_LARGE_QUEUED};
    use super::*;
    use crate::ids::{ProviderId, SessionId};
    use crate::runtime::subscription::LiveBatch;

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

    fn megabyte_lines(journal: &mut Journal, lines: usize) -> Vec<std::sync::Weak<Event>> {
        let line = || Some(RawJson::parsed(format!("\"{}\"", "x".repeat((1 << 20) - 2))));
        (0..lines)
            .map(|_| {
                let event = journal.emit_shared(None, EventKind::Warning { message: String::new() }, line());
                journal.send_live();
                Arc::downgrade(&event)
            })
            .collect()
    }

    #[test]
    fn a_subscriber_that_stops_reading_pins_the_live_channel_s_bytes_not_its_sends() {
        let mut journal = journal();
        let (_exit, exit) = watch::channel(None);
        let mut rx = journal.grant_live(None, None, false, exit).unwrap().rx.unwrap();
        let lines = 100;
        let events = megabyte_lines(&mut journal, lines);
        let alive = events.iter().filter(|e| e.strong_count() > 0).count();
        let (ring, channel) = (RING_BYTES >> 20, LIVE_BYTES >> 20);
        assert_eq!(alive, ring + channel, "the ring's newest and the channel's oldest, not all {lines}");

        // The subscriber reads on: the oldest sends hold their events, then come references to
        // events gone (it must read them back), then those the ring still holds.
        let mut got = Vec::new();
        while let Ok(batch) = rx.try_recv() {
            got.extend((0..batch.len()).map(|i| batch.get(i).map(|e| e.seq)));
        }
        assert_eq!(got.len(), lines, "one send per line");
        let held = got.iter().take_while(|seq| seq.is_some()).count();
        assert_eq!(held, channel);
        let gone = got[held..].iter().take_while(|seq| seq.is_none()).count();
        assert_eq!(gone, lines - channel - ring);
        assert!(got[held + gone..].iter().all(Option::is_some), "the ring's events are alive");

        // Caught up, its sends hold their events again.
        megabyte_lines(&mut journal, 3);
        let batch = rx.try_recv().unwrap();
        assert!(matches!(batch, LiveBatch::One(_)), "{batch:?}");

        // Held events die with the journal: its newest is sent again, strongly, so a subscriber
        // sees that it missed them.
        megabyte_lines(&mut journal, LIVE_BYTES >> 20);
        let newest = journal.published_seq();
        drop(journal);
        let sends: Vec<_> = std::iter::from_fn(|| rx.try_recv().ok()).collect();
        assert!(matches!(sends.last(), Some(LiveBatch::One(e)) if e.seq == newest), "{sends:?}");
        assert!(sends.iter().any(|batch| matches!(batch, LiveBatch::Held(_)) && batch.get(0).is_none()));
    }

    /// Events without raw JSON hold none of the bytes bounded: they are never held.
    #[test]
    fn events_without_raw_json_are_never_held() {
        let mut journal = journal();
        let (_exit, exit) = watch::channel(None);
        let mut rx = journal.grant_live(None, None, false, exit).unwrap().rx.unwrap();
        let line = |bytes: usize| Some(RawJson::parsed(format!("\"{}\"", "x".repeat(bytes - 2))));
        for raw in [line(LIVE_BYTES + 2), line(10), None] {
            journal.emit(None, EventKind::Warning { message: String::new() }, raw);
            journal.send_live();
        }
        let sends: Vec<_> = std::iter::from_fn(|| rx.try_recv().ok()).collect();
        assert!(matches!(&sends[..], [LiveBatch::One(_), LiveBatch::Held(_), LiveBatch::One(_)]), "{sends:?}");
    }

    #[test]
    fn a_send_larger_than_the_channel_s_bytes_holds_its_events_when_nothing_is_unread() {
        let mut journal = journal();
        let (_exit, exit) = watch::channel(None);
        let mut rx = journal.grant_live(None, None, false, exit).unwrap().rx.unwrap();
        let line = || Some(RawJson::parsed(format!("\"{}\"", "x".repeat(LIVE_BYTES))));
        journal.emit(None, EventKind::Warning { message: String::new() }, line());
        journal.send_live();
        assert!(matches!(rx.try_recv().unwrap(), LiveBatch::One(_)));
        journal.emit(None, EventKind::Warning { message: String::new() }, line());
        journal.emit(None, EventKind::Warning { message: String::new() }, line());
        journal.send_live();
        let batch = rx.try_recv().unwrap();
        assert!(matches!(batch, LiveBatch::Many(_)), "{batch:?}");
    }
}
