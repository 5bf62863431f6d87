//! Subscriptions: replay from a store or the session's buffer, then live events.

use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use futures::stream::BoxStream;
use tokio::sync::{broadcast, watch};

use crate::event::Event;
use crate::ids::{SessionId, TurnId};
use crate::session::{ExitReason, SessionRef};
use crate::store::{DynStore, EventQuery};
use crate::turn::{Turn, TurnRef};

/// Events read from a store per replay page.
pub(crate) const REPLAY_PAGE: usize = 1024;

/// Where a subscription starts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Replay {
    /// Only events published after subscribing (the default for `subscribe`).
    #[default]
    Latest,
    /// Every retained event, then live.
    Start,
    /// Events with a greater seq, then live.
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

/// The subscriber fell more than the session's buffer behind live events and was cut off.
///
/// Nothing was skipped silently: every event up to `resume_after` was delivered (or filtered
/// out by the turn filter). Subscribe again with `Replay::After(resume_after)` to continue
/// without loss, as long as a store retains the events.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("subscriber lagged; resume after seq {resume_after}")]
pub struct Lagged {
    /// The last seq this subscription observed.
    pub resume_after: u64,
}

/// What the session actor hands a new subscription.
pub(crate) struct Grant {
    /// Live events with seq greater than `live_from`; `None` for a finished turn.
    pub(crate) rx: Option<broadcast::Receiver<Arc<Event>>>,
    /// The last published seq when the grant was made.
    pub(crate) live_from: u64,
    /// Replay from the store for `(after, live_from]`, if the buffer does not cover it.
    pub(crate) store_replay: Option<(DynStore, u64)>,
    /// Buffered events to replay (already filtered to `(after, live_from]` and the turn).
    pub(crate) buffered: Vec<Arc<Event>>,
    /// The exit reason channel, for `stream`'s session-down error.
    pub(crate) exit: watch::Receiver<Option<ExitReason>>,
}

struct State {
    session_id: SessionId,
    turn: Option<TurnId>,
    replay: VecDeque<Arc<Event>>,
    store_replay: Option<(DynStore, u64)>,
    fallback: Vec<Arc<Event>>,
    live_from: u64,
    rx: Option<broadcast::Receiver<Arc<Event>>>,
    last_seen: u64,
    done: bool,
}

impl State {
    fn matches(&self, event: &Event) -> bool {
        match &self.turn {
            None => true,
            Some(turn) => event.turn_id.as_ref() == Some(turn),
        }
    }

    /// Marks the end after a turn-scoped subscription saw its terminal event.
    fn deliver(&mut self, event: Arc<Event>) -> Option<Result<Arc<Event>, Lagged>> {
        if self.turn.is_some() && event.is_terminal() {
            self.done = true;
        }
        Some(Ok(event))
    }

    async fn next(&mut self) -> Option<Result<Arc<Event>, Lagged>> {
        loop {
            if self.done {
                return None;
            }
            if let Some(event) = self.replay.pop_front() {
                self.last_seen = self.last_seen.max(event.seq);
                if self.matches(&event) {
                    return self.deliver(event);
                }
                continue;
            }
            if let Some((store, upto)) = self.store_replay.take() {
                self.load_page(store, upto).await;
                continue;
            }
            let Some(rx) = self.rx.as_mut() else {
                // A finished turn: replay only.
                self.done = true;
                return None;
            };
            match rx.recv().await {
                Ok(event) => {
                    if event.seq <= self.last_seen {
                        continue;
                    }
                    self.last_seen = event.seq;
                    if self.matches(&event) {
                        return self.deliver(event);
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    self.done = true;
                    return Some(Err(Lagged { resume_after: self.last_seen }));
                }
                Err(broadcast::error::RecvError::Closed) => {
                    self.done = true;
                    return None;
                }
            }
        }
    }

    /// Reads the next page of `(last_seen, upto]` from the store, or falls back to the buffer.
    async fn load_page(&mut self, store: DynStore, upto: u64) {
        if self.last_seen >= upto {
            return;
        }
        let mut query = EventQuery::after(self.last_seen).limit(REPLAY_PAGE);
        query.turn = self.turn.clone();
        match store.read_events(&self.session_id, &query).await {
            Ok(events) => {
                let full_page = events.len() == REPLAY_PAGE;
                let mut reached = false;
                for event in events {
                    if event.seq > upto {
                        reached = true;
                        break;
                    }
                    self.replay.push_back(event);
                }
                if let Some(last) = self.replay.back() {
                    reached |= last.seq >= upto;
                }
                if full_page && !reached {
                    self.store_replay = Some((store, upto));
                } else {
                    // The store is done; the buffer may hold what it skipped (events of a
                    // degraded stretch were never stored).
                    let last = self.replay.back().map_or(self.last_seen, |e| e.seq);
                    let rest = std::mem::take(&mut self.fallback);
                    self.replay.extend(rest.into_iter().filter(|e| e.seq > last));
                }
            }
            Err(error) => {
                tracing::warn!(%error, session_id = %self.session_id, "replay read failed; using the session buffer");
                let after = self.last_seen;
                let rest = std::mem::take(&mut self.fallback);
                self.replay.extend(rest.into_iter().filter(|e| e.seq > after));
            }
        }
        // Live events start after `live_from`; anything the store returned beyond it is dropped
        // by the seq check when live events arrive.
        let _ = self.live_from;
    }
}

/// A stream of a session's (or a turn's) events: the requested replay, then live events.
///
/// Items are `Ok(event)` in strictly increasing `seq`, or one final `Err(Lagged)` when the
/// subscriber fell too far behind. The stream ends when the session ends or, for a turn
/// subscription, after the turn's terminal event. Dropping it unsubscribes; it never slows the
/// session.
pub struct Subscription {
    session_id: SessionId,
    turn: Option<TurnId>,
    exit: watch::Receiver<Option<ExitReason>>,
    inner: BoxStream<'static, Result<Arc<Event>, Lagged>>,
}

impl Subscription {
    pub(crate) fn new(session_id: SessionId, turn: Option<TurnId>, after: Option<u64>, grant: Grant) -> Self {
        let state = State {
            session_id: session_id.clone(),
            turn: turn.clone(),
            replay: VecDeque::new(),
            store_replay: grant.store_replay,
            fallback: Vec::new(),
            live_from: grant.live_from,
            rx: grant.rx,
            last_seen: after.unwrap_or(grant.live_from),
            done: false,
        };
        let mut state = state;
        if state.store_replay.is_some() {
            state.fallback = grant.buffered;
        } else {
            state.replay = grant.buffered.into();
        }
        let inner = Box::pin(futures::stream::unfold(state, |mut state| async move {
            let item = state.next().await?;
            Some((item, state))
        }));
        Subscription { session_id, turn, exit: grant.exit, inner }
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
    type Item = Result<Arc<Event>, Lagged>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
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
    /// The consumer fell behind; resume with `Replay::After(resume_after)`.
    #[error(transparent)]
    Lagged(#[from] Lagged),
}

/// The events of one turn up to and including its terminal event (see `Harness::stream`).
pub struct TurnStream {
    subscription: Subscription,
    idle_timeout: Option<Duration>,
    finished: bool,
}

impl TurnStream {
    pub(crate) fn new(subscription: Subscription, idle_timeout: Option<Duration>) -> Self {
        TurnStream { subscription, idle_timeout, finished: false }
    }

    /// The next event; `None` after the terminal event or an error.
    pub async fn next(&mut self) -> Option<Result<Arc<Event>, StreamError>> {
        use futures::StreamExt;
        if self.finished {
            return None;
        }
        let item = match self.idle_timeout {
            None => self.subscription.next().await,
            Some(limit) => match tokio::time::timeout(limit, self.subscription.next()).await {
                Ok(item) => item,
                Err(_) => {
                    self.finished = true;
                    return Some(Err(StreamError::IdleTimeout(limit)));
                }
            },
        };
        match item {
            Some(Ok(event)) => {
                if event.is_terminal() {
                    self.finished = true;
                }
                Some(Ok(event))
            }
            Some(Err(lagged)) => {
                self.finished = true;
                Some(Err(StreamError::Lagged(lagged)))
            }
            None => {
                self.finished = true;
                Some(Err(StreamError::SessionDown(self.subscription.wait_exit().await)))
            }
        }
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

impl fmt::Debug for TurnStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TurnStream")
            .field("subscription", &self.subscription)
            .field("idle_timeout", &self.idle_timeout)
            .field("finished", &self.finished)
            .finish()
    }
}
