//! Subscriptions: replay from a store or the session's buffer, then live events.

use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use futures::stream::BoxStream;
use tokio::sync::{broadcast, watch};
use tokio_util::sync::ReusableBoxFuture;

use crate::event::Event;
use crate::ids::{SessionId, TurnId};
use crate::session::{ExitReason, SessionRef};
use crate::store::{DynStore, EventPager, EventQuery, StoreError};
use crate::turn::{Turn, TurnRef};

/// Where a subscription starts.
///
/// `Start` replays what is retained: everything when the session has a store, otherwise what
/// its bounded buffer still holds. `After(seq)` is exact: it replays every event after `seq` or
/// fails with [`Error::ReplayUnavailable`](crate::Error::ReplayUnavailable) — a gap is never
/// silent, and neither is a `seq` past the session's latest event.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Replay {
    /// Only events published after subscribing (the default for `subscribe`).
    #[default]
    Latest,
    /// Every retained event, then live.
    Start,
    /// Every event with a greater seq, then live.
    After(u64),
}

impl Replay {
    pub(crate) fn after(self) -> Option<u64> {
        match self {
            Replay::Latest => None,
            Replay::Start => Some(0),
            Replay::After(seq) => Some(seq),
        }
    }
}

/// The error for `Replay::After(after)` past a session's latest event: the live events up to
/// it would be skipped without a word.
pub(crate) fn past_latest(after: u64, latest: u64) -> crate::Error {
    crate::Error::ReplayUnavailable { reason: format!("seq {after} is past the session's latest event (seq {latest})") }
}

/// What to subscribe to: a whole session or one turn.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// Every event of a session.
    Session(SessionId),
    /// Only events of one turn; the subscription ends after the turn's terminal event.
    Turn(TurnRef),
}

impl Target {
    pub(crate) fn session_id(&self) -> &SessionId {
        match self {
            Target::Session(id) => id,
            Target::Turn(turn) => &turn.session_id,
        }
    }

    pub(crate) fn turn_id(&self) -> Option<&TurnId> {
        match self {
            Target::Session(_) => None,
            Target::Turn(turn) => Some(&turn.id),
        }
    }
}

impl From<&SessionRef> for Target {
    fn from(s: &SessionRef) -> Self {
        Target::Session(s.id.clone())
    }
}

impl From<&Turn> for Target {
    fn from(t: &Turn) -> Self {
        Target::Turn(t.turn_ref())
    }
}

impl From<TurnRef> for Target {
    fn from(t: TurnRef) -> Self {
        Target::Turn(t)
    }
}

/// The subscriber fell more than the session's buffer behind live events, and the events it
/// missed cannot be replayed (the session has no store, or its store stopped taking events).
///
/// Everything up to `resume_after` was delivered (or filtered out by the turn filter); the
/// events after it are lost to this subscription. With a working store a subscription never
/// lags: it catches up from the store by itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("subscriber lagged; events after seq {resume_after} are no longer available")]
pub struct Lagged {
    /// The last seq this subscription observed.
    pub resume_after: u64,
}

/// Why a subscription ended before its session or turn did. Everything up to
/// [`SubscriptionError::resume_after`] was delivered; nothing after it was skipped silently.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SubscriptionError {
    /// The subscriber fell behind and the missed events cannot be replayed.
    #[error(transparent)]
    Lagged(#[from] Lagged),
    /// Reading the events to replay failed (a store error, or events that are in neither the
    /// store nor the session's buffer).
    #[error("replay stopped after seq {resume_after}: {reason}")]
    ReplayFailed {
        /// The last seq delivered; `Replay::After(resume_after)` continues from there once the
        /// source works again.
        resume_after: u64,
        /// What failed.
        reason: String,
    },
}

impl SubscriptionError {
    /// The last seq this subscription delivered (or filtered out).
    pub fn resume_after(&self) -> u64 {
        match self {
            SubscriptionError::Lagged(lagged) => lagged.resume_after,
            SubscriptionError::ReplayFailed { resume_after, .. } => *resume_after,
        }
    }
}

/// What live subscribers receive in one send: events in seq order, published together.
#[derive(Clone, Debug)]
pub(crate) enum LiveBatch {
    /// A lone event, sent without a batch's allocation.
    One(Arc<Event>),
    Many(Arc<[Arc<Event>]>),
    /// Events sent while the channel held its bytes unread, alive only while the session's
    /// replay ring keeps them.
    Held(Arc<[Weak<Event>]>),
}

impl LiveBatch {
    pub(crate) fn len(&self) -> usize {
        match self {
            LiveBatch::One(_) => 1,
            LiveBatch::Many(events) => events.len(),
            LiveBatch::Held(events) => events.len(),
        }
    }

    /// The event at `i`; `None` when it was held and the ring let it go.
    pub(crate) fn get(&self, i: usize) -> Option<Arc<Event>> {
        match self {
            LiveBatch::One(event) => Some(Arc::clone(event)),
            LiveBatch::Many(events) => Some(Arc::clone(&events[i])),
            LiveBatch::Held(events) => events[i].upgrade(),
        }
    }
}

/// What the session actor hands a new subscription.
pub(crate) struct Grant {
    /// Live events with seq greater than `live_from`; `None` for a finished turn.
    pub(crate) rx: Option<broadcast::Receiver<LiveBatch>>,
    /// The last published seq when the grant was made: replay covers everything up to it.
    pub(crate) live_from: u64,
    /// Replay from the store for `(after, upto]`, if the buffer does not cover it.
    pub(crate) store_replay: Option<(DynStore, u64)>,
    /// Buffered events to replay (already filtered to `(after, live_from]` and the turn).
    pub(crate) buffered: Vec<Arc<Event>>,
    /// The session's store while it takes every event: where a lagging subscriber catches up.
    pub(crate) store: Option<DynStore>,
    /// The exit reason channel, for `stream`'s session-down error.
    pub(crate) exit: watch::Receiver<Option<ExitReason>>,
    /// The store replay is of a turn the store records as ended: it must reach its terminal
    /// event, or say why not.
    pub(crate) turn_ended: bool,
}

impl Grant {
    /// Nothing to replay and nothing live: a finished turn with nothing after the cursor.
    pub(crate) fn empty(live_from: u64, exit: watch::Receiver<Option<ExitReason>>) -> Self {
        Grant { rx: None, live_from, store_replay: None, buffered: Vec::new(), store: None, exit, turn_ended: false }
    }

    /// Replay everything after the cursor from `store` through `upto` (`u64::MAX`: whatever the
    /// store holds), then end: a session no runtime here holds.
    pub(crate) fn stored(store: DynStore, upto: u64, exit: watch::Receiver<Option<ExitReason>>) -> Self {
        Grant {
            rx: None,
            live_from: u64::MAX,
            store_replay: Some((store, upto)),
            buffered: Vec::new(),
            store: None,
            exit,
            turn_ended: false,
        }
    }

    /// [`Grant::stored`] for a turn the store records as ended, through its terminal event.
    pub(crate) fn stored_turn(store: DynStore, exit: watch::Receiver<Option<ExitReason>>) -> Self {
        Grant { turn_ended: true, ..Grant::stored(store, u64::MAX, exit) }
    }
}

/// What [`State::step`] found.
enum Step {
    /// The next item (`None`: the end).
    Item(Option<Result<Arc<Event>, SubscriptionError>>),
    /// A page must be read from the store.
    Read(StoreRead),
    /// Nothing is queued live: wait for the next batch.
    Recv,
}

/// A store read in progress: `(after, upto]`, one page at a time.
struct StoreRead {
    store: DynStore,
    upto: u64,
    /// Filling a gap after a lag: every seq must be there (reads are not turn-filtered), and
    /// `then` (the live event that revealed the gap) follows.
    gap: Option<Arc<Event>>,
}

struct State {
    session_id: SessionId,
    turn: Option<TurnId>,
    replay: VecDeque<Arc<Event>>,
    reading: Option<StoreRead>,
    /// Buffered events after what the store returns (a degraded stretch was never stored).
    fallback: Vec<Arc<Event>>,
    /// Everything up to this seq is covered by the grant's replay.
    live_from: u64,
    rx: Option<broadcast::Receiver<LiveBatch>>,
    /// The live batch being delivered, and the position of its next event.
    live: Option<(LiveBatch, usize)>,
    store: Option<DynStore>,
    last_seen: u64,
    pager: EventPager,
    /// See [`Grant::turn_ended`].
    turn_ended: bool,
    /// The error to end with once the replay queue is delivered.
    failed: Option<SubscriptionError>,
    done: bool,
}

impl State {
    /// Nothing more is delivered. What the subscription held to deliver goes with it: a held
    /// receiver would keep the session's live channel, and the batches in its slots, allocated
    /// for as long as the ended subscription is kept.
    fn end(&mut self) {
        self.done = true;
        self.rx = None;
        self.live = None;
        self.store = None;
        self.reading = None;
        self.replay = VecDeque::new();
        self.fallback = Vec::new();
    }

    fn matches(&self, event: &Event) -> bool {
        match &self.turn {
            None => true,
            Some(turn) => event.turn_id.as_ref() == Some(turn),
        }
    }

    /// Marks the end after a turn-scoped subscription saw its terminal event.
    fn deliver(&mut self, event: Arc<Event>) -> Option<Result<Arc<Event>, SubscriptionError>> {
        if self.turn.is_some() && event.is_terminal() {
            self.end();
        }
        Some(Ok(event))
    }

    /// Everything [`State::next`] can do without waiting: the next item, or what to wait for.
    fn step(&mut self) -> Step {
        loop {
            if self.done {
                return Step::Item(None);
            }
            if let Some(event) = self.replay.pop_front() {
                self.last_seen = self.last_seen.max(event.seq);
                if self.matches(&event) {
                    return Step::Item(self.deliver(event));
                }
                continue;
            }
            if let Some(error) = self.failed.take() {
                self.end();
                return Step::Item(Some(Err(error)));
            }
            if let Some(read) = self.reading.take() {
                return Step::Read(read);
            }
            // The replay is delivered: it covered everything up to `live_from`, including
            // events of other turns a turn filter skipped.
            if self.live_from != u64::MAX {
                self.last_seen = self.last_seen.max(self.live_from);
            }
            let Some(rx) = self.rx.as_mut() else {
                // A finished turn or a stopped session: replay only.
                self.end();
                return Step::Item(None);
            };
            let event = match self.live.take() {
                Some((batch, next)) => {
                    let event = batch.get(next);
                    if next + 1 < batch.len() {
                        self.live = Some((batch, next + 1));
                    }
                    // Held, and let go by the ring: this subscriber fell more than the session
                    // buffers behind. The ring lets the oldest go first and always keeps the
                    // newest, so a later event reveals the gap, as after a lag of the channel.
                    let Some(event) = event else { continue };
                    event
                }
                None => match rx.try_recv() {
                    Ok(batch) => {
                        self.live = Some((batch, 0));
                        continue;
                    }
                    Err(broadcast::error::TryRecvError::Empty) => return Step::Recv,
                    // The channel moved past this subscriber. With a store, the next live event
                    // reveals the gap, which is read back; without one the missed events are gone.
                    Err(broadcast::error::TryRecvError::Lagged(_)) if self.store.is_some() => continue,
                    Err(broadcast::error::TryRecvError::Lagged(_)) => return Step::Item(self.lagged()),
                    Err(broadcast::error::TryRecvError::Closed) => {
                        self.end();
                        return Step::Item(None);
                    }
                },
            };
            if event.seq <= self.last_seen {
                continue;
            }
            if event.seq > self.last_seen + 1 {
                // Events were missed after a lag: fill the gap from the store first.
                match self.store.clone() {
                    Some(store) => {
                        let upto = event.seq - 1;
                        self.reading = Some(StoreRead { store, upto, gap: Some(event) });
                        continue;
                    }
                    None => return Step::Item(self.lagged()),
                }
            }
            self.last_seen = event.seq;
            if self.matches(&event) {
                return Step::Item(self.deliver(event));
            }
        }
    }

    /// The next item, waiting for it. `nothing_queued`: a [`State::step`] just returned
    /// [`Step::Recv`], so the first look can go straight to the wait.
    async fn next(&mut self, mut nothing_queued: bool) -> Option<Result<Arc<Event>, SubscriptionError>> {
        loop {
            let step = if std::mem::take(&mut nothing_queued) { Step::Recv } else { self.step() };
            match step {
                Step::Item(item) => return item,
                Step::Read(read) => self.read_page(read).await,
                Step::Recv => {
                    let Some(rx) = self.rx.as_mut() else { continue };
                    match rx.recv().await {
                        Ok(batch) => self.live = Some((batch, 0)),
                        // Sorted out by the next step, as a `try_recv` would have seen it.
                        Err(broadcast::error::RecvError::Lagged(_)) if self.store.is_some() => {}
                        Err(broadcast::error::RecvError::Lagged(_)) => return self.lagged(),
                        Err(broadcast::error::RecvError::Closed) => {
                            self.end();
                            return None;
                        }
                    }
                }
            }
        }
    }

    fn lagged(&mut self) -> Option<Result<Arc<Event>, SubscriptionError>> {
        self.end();
        Some(Err(Lagged { resume_after: self.last_seen }.into()))
    }

    /// Reads the next page of `(last_seen, upto]` from the store into the replay queue.
    async fn read_page(&mut self, read: StoreRead) {
        if self.last_seen >= read.upto {
            self.finish_read(read);
            return;
        }
        let limit = self.pager.limit();
        let mut query = EventQuery::after(self.last_seen).limit(limit);
        if read.gap.is_none() {
            query.turn = self.turn.clone();
        }
        let events = match read.store.read_events(&self.session_id, &query).await {
            Ok(events) => events,
            // A row the store cannot read (damaged, or from a newer release) fails its whole
            // page: the events before it are read one at a time, so that they are delivered
            // and the failure's `resume_after` is the last one that reads.
            Err(StoreError::Corrupt(_)) if limit > 1 => {
                self.pager.one_at_a_time();
                self.reading = Some(read);
                return;
            }
            Err(error) => {
                tracing::warn!(%error, session_id = %self.session_id, "replay read failed");
                let reason = format!("the store could not be read: {error}");
                self.failed = Some(SubscriptionError::ReplayFailed { resume_after: self.last_seen, reason });
                return;
            }
        };
        let full_page = events.len() == limit;
        self.pager.after(&events);
        let mut last = self.last_seen;
        let mut reached = false;
        for event in events {
            if event.seq > read.upto {
                reached = true;
                break;
            }
            if read.gap.is_some() && event.seq != last + 1 {
                // The store is missing events the session published: they are gone.
                self.failed = Some(Lagged { resume_after: last }.into());
                return;
            }
            if self.turn.is_none() && event.seq != last + 1 {
                // A session's events have no holes, but for those published while its store
                // failed (a degraded run, then resumed): a replay does not jump them silently.
                self.failed = Some(SubscriptionError::ReplayFailed {
                    resume_after: last,
                    reason: format!("events {}..{} are not in the store", last + 1, event.seq - 1),
                });
                return;
            }
            last = event.seq;
            self.replay.push_back(event);
        }
        reached |= last >= read.upto;
        if full_page && !reached {
            self.reading = Some(read);
        } else {
            self.finish_read_after(read, last);
        }
    }

    fn finish_read(&mut self, read: StoreRead) {
        let last = self.last_seen;
        self.finish_read_after(read, last);
    }

    /// The store has nothing more up to `read.upto`; `last` is the last seq it returned.
    fn finish_read_after(&mut self, read: StoreRead, last: u64) {
        match read.gap {
            Some(_) if last < read.upto => {
                // The store stopped taking events (the session degraded): the rest is gone.
                self.failed = Some(Lagged { resume_after: last }.into());
            }
            Some(live) => self.replay.push_back(live),
            None => {
                // The buffer may hold what the store lacks (a degraded stretch was never
                // stored); it must continue the store's events without a hole.
                let rest = std::mem::take(&mut self.fallback);
                let mut rest = rest.into_iter().filter(|e| e.seq > last).peekable();
                if let Some(first) = rest.peek()
                    && self.turn.is_none()
                    && first.seq > last + 1
                {
                    let reason = format!(
                        "events {}..{} are in neither the store nor the session's buffer",
                        last + 1,
                        first.seq - 1
                    );
                    self.failed = Some(SubscriptionError::ReplayFailed { resume_after: last, reason });
                    return;
                }
                self.replay.extend(rest);
                // A session's replay reaches what it is known to hold, or says why not: the
                // session was purged or evicted from the store while it was read, or its last
                // events were published while the store failed.
                let end = self.replay.back().map_or(last, |e| e.seq).max(last);
                if self.turn_ended && !self.replay.iter().any(|e| e.is_terminal()) {
                    // The store recorded the turn's end, and no longer holds it: the session was
                    // purged or evicted while it was read.
                    let reason = format!("the turn's events after {end} are no longer in the store");
                    self.failed = Some(SubscriptionError::ReplayFailed { resume_after: end, reason });
                    return;
                }
                if self.turn.is_none() && read.upto != u64::MAX && end < read.upto {
                    let reason =
                        format!("events {}..{} are in neither the store nor the session's buffer", end + 1, read.upto);
                    self.failed = Some(SubscriptionError::ReplayFailed { resume_after: end, reason });
                }
            }
        }
    }
}

/// A stream of a session's (or a turn's) events: the requested replay, then live events.
///
/// Items are `Ok(event)` in strictly increasing `seq`, or one final `Err` when the subscription
/// cannot go on without a gap ([`SubscriptionError`]). A subscriber that falls behind live
/// events catches up from the session's store by itself; only without a store (or when the
/// store stopped taking events) does it end with [`Lagged`]. The stream ends when the session
/// ends or, for a turn subscription, after the turn's terminal event. Dropping it unsubscribes;
/// it never slows the session.
pub struct Subscription {
    session_id: SessionId,
    turn: Option<TurnId>,
    exit: watch::Receiver<Option<ExitReason>>,
    /// The state, while no wait holds it.
    state: Option<Box<State>>,
    /// The wait for a live batch or a store page, which holds the state until it is done; one
    /// allocation, reused by every wait.
    wait: Option<ReusableBoxFuture<'static, (Item, Box<State>)>>,
    /// Whether `wait` is in progress.
    waiting: bool,
    /// Whether the grant replays without following live events (a finished turn's).
    replay_only: bool,
}

type Item = Option<Result<Arc<Event>, SubscriptionError>>;

/// What a subscription waits on when nothing is at hand (always the same future type, so its
/// allocation is reused).
async fn wait_for_next(mut state: Box<State>, nothing_queued: bool) -> (Item, Box<State>) {
    let item = state.next(nothing_queued).await;
    (item, state)
}

impl Subscription {
    pub(crate) fn new(session_id: SessionId, turn: Option<TurnId>, after: Option<u64>, grant: Grant) -> Self {
        let replay_only = grant.rx.is_none();
        let mut state = State {
            session_id: session_id.clone(),
            turn: turn.clone(),
            replay: VecDeque::new(),
            reading: grant.store_replay.map(|(store, upto)| StoreRead { store, upto, gap: None }),
            fallback: Vec::new(),
            live_from: grant.live_from,
            rx: grant.rx,
            live: None,
            store: grant.store,
            last_seen: after.unwrap_or(grant.live_from),
            pager: EventPager::new(),
            turn_ended: grant.turn_ended,
            failed: None,
            done: false,
        };
        if state.reading.is_some() {
            state.fallback = grant.buffered;
        } else {
            state.replay = grant.buffered.into();
        }
        let state = Some(Box::new(state));
        Subscription { session_id, turn, exit: grant.exit, state, wait: None, waiting: false, replay_only }
    }

    /// The session this subscription belongs to.
    pub fn session_id(&self) -> &SessionId {
        &self.session_id
    }

    /// The turn filter, if any.
    pub fn turn_id(&self) -> Option<&TurnId> {
        self.turn.as_ref()
    }

    /// The session's exit reason, once it has ended.
    pub fn exit_reason(&self) -> Option<ExitReason> {
        self.exit.borrow().clone()
    }

    /// The next event, or why the subscription ends; `None` once it has ended. The stream's
    /// `next`, without importing a `StreamExt`.
    pub async fn next(&mut self) -> Option<Result<Arc<Event>, SubscriptionError>> {
        futures::StreamExt::next(self).await
    }

    /// A replay of a finished turn that ended without its terminal event while the session still
    /// runs (its store lacks the end): the error to end a turn stream with, where waiting for the
    /// session's exit would wait for good.
    fn replay_short(&self) -> Option<StreamError> {
        if !self.replay_only || self.exit.borrow().is_some() {
            return None;
        }
        let resume_after = self.state.as_ref().map_or(0, |state| state.last_seen);
        let reason = "the turn's stored events end without its terminal event".to_owned();
        Some(StreamError::ReplayFailed { resume_after, reason })
    }

    /// Waits (briefly) for the exit reason after the stream ended because the session went down.
    pub(crate) async fn wait_exit(&mut self) -> ExitReason {
        let waited = self.exit.wait_for(Option::is_some).await.ok().and_then(|r| r.clone());
        waited.or_else(|| self.exit.borrow().clone()).unwrap_or_else(crashed)
    }
}

fn crashed() -> ExitReason {
    ExitReason::Crashed { reason: "session runtime ended without a reason".into() }
}

impl Stream for Subscription {
    type Item = Result<Arc<Event>, SubscriptionError>;

    /// Events already at hand (the live batch received, the replay queue) are returned without
    /// a future; only a wait for the next batch or a store page builds one.
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if this.waiting
                && let Some(wait) = this.wait.as_mut()
            {
                let (item, state) = std::task::ready!(wait.poll(cx));
                this.waiting = false;
                this.state = Some(state);
                return Poll::Ready(item);
            }
            let Some(state) = this.state.as_mut() else { return Poll::Ready(None) };
            match state.step() {
                Step::Item(item) => return Poll::Ready(item),
                wait => {
                    let nothing_queued = match wait {
                        Step::Read(read) => {
                            // `next` takes it again.
                            state.reading = Some(read);
                            false
                        }
                        _ => true,
                    };
                    let next = wait_for_next(this.state.take().expect("checked above"), nothing_queued);
                    match this.wait.as_mut() {
                        Some(wait) => wait.set(next),
                        None => this.wait = Some(ReusableBoxFuture::new(next)),
                    }
                    this.waiting = true;
                }
            }
        }
    }
}

impl fmt::Debug for Subscription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subscription")
            .field("session_id", &self.session_id)
            .field("turn", &self.turn)
            .finish_non_exhaustive()
    }
}

/// Why a [`TurnStream`] ended early.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StreamError {
    /// No event arrived within the idle timeout. The turn keeps running.
    #[error("no event within {0:?}")]
    IdleTimeout(Duration),
    /// The session ended before the turn's terminal event.
    #[error("session went down: {0}")]
    SessionDown(ExitReason),
    /// The consumer fell behind and the missed events cannot be replayed (no store).
    #[error(transparent)]
    Lagged(#[from] Lagged),
    /// Replaying the turn's events failed (see [`SubscriptionError::ReplayFailed`]).
    #[error("replay stopped after seq {resume_after}: {reason}")]
    ReplayFailed {
        /// The last seq delivered.
        resume_after: u64,
        /// What failed.
        reason: String,
    },
}

impl From<SubscriptionError> for StreamError {
    fn from(error: SubscriptionError) -> Self {
        match error {
            SubscriptionError::Lagged(lagged) => StreamError::Lagged(lagged),
            SubscriptionError::ReplayFailed { resume_after, reason } => {
                StreamError::ReplayFailed { resume_after, reason }
            }
        }
    }
}

/// The events of one turn up to and including its terminal event (see `Harness::stream`).
///
/// A [`Stream`] of `Result<Arc<Event>, StreamError>`: it ends after the terminal event, or after
/// one error (an idle timeout, the session going down without the turn ending, or a gap that
/// cannot be replayed). [`TurnStream::next`] and [`TurnStream::collect`] are shortcuts.
pub struct TurnStream {
    idle_timeout: Option<Duration>,
    inner: BoxStream<'static, Result<Arc<Event>, StreamError>>,
}

impl TurnStream {
    pub(crate) fn new(subscription: Subscription, idle_timeout: Option<Duration>) -> Self {
        let inner = Box::pin(futures::stream::unfold(Some(subscription), move |state| async move {
            let mut subscription = state?;
            let item = match idle_timeout {
                None => subscription.next().await,
                Some(limit) => match tokio::time::timeout(limit, subscription.next()).await {
                    Ok(item) => item,
                    Err(_) => return Some((Err(StreamError::IdleTimeout(limit)), None)),
                },
            };
            match item {
                Some(Ok(event)) => {
                    let more = !event.is_terminal();
                    Some((Ok(event), more.then_some(subscription)))
                }
                Some(Err(error)) => Some((Err(error.into()), None)),
                None if let Some(error) = subscription.replay_short() => Some((Err(error), None)),
                None => {
                    let reason = subscription.wait_exit().await;
                    Some((Err(StreamError::SessionDown(reason)), None))
                }
            }
        }));
        TurnStream { idle_timeout, inner }
    }

    /// The next event; `None` after the terminal event or an error.
    pub async fn next(&mut self) -> Option<Result<Arc<Event>, StreamError>> {
        futures::StreamExt::next(self).await
    }

    /// Collects every remaining event; stops at the terminal event or the first error.
    pub async fn collect(mut self) -> Result<Vec<Arc<Event>>, StreamError> {
        let mut events = Vec::new();
        while let Some(item) = self.next().await {
            events.push(item?);
        }
        Ok(events)
    }
}

impl Stream for TurnStream {
    type Item = Result<Arc<Event>, StreamError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

impl fmt::Debug for TurnStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TurnStream").field("idle_timeout", &self.idle_timeout).finish_non_exhaustive()
    }
}
