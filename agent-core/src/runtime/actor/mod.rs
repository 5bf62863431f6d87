//! The session actor: one task that owns all of a session's state.
//!
//! Everything that changes a session passes through this task in order: caller commands,
//! provider messages, and the results of the slow work it hands to short-lived tasks. The actor
//! drives five parts, each owning one job and returning what happened instead of calling back:
//!
//! - [`journal`]: `seq`, the pending batch and its commit, the replay ring, live delivery;
//! - [`ledger`]: requests, the one claim each may hold, their deadlines;
//! - [`cache`]: finished turns, waiters, the turn IDs used;
//! - [`calls`]: provider calls, deadlines and request handlers running in tasks;
//! - [`streams`]: the credentials kept out of streamed deltas;
//!
//! plus the [`Watchdog`] of the running turn. The actor itself never waits on I/O except while
//! shutting down.
//!
//! Its own paths read in their own files, each an `impl Actor` block over the same state:
//!
//! - [`turns`]: starting, admitting, cancelling, steering and ending the current turn;
//! - [`requests`]: creating, delivering and settling requests, between the ledger and the calls;
//! - [`closing`]: stop and close, transport loss, retirement, the final shutdown.

mod cache;
mod calls;
mod closing;
mod journal;
mod ledger;
mod requests;
mod streams;
mod turns;

use std::collections::VecDeque;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tracing::{Instrument, Span};

use self::cache::{Finished, TurnCache};
use self::calls::{Calls, Done};
use self::journal::{AfterCommit, FlushStart, Journal, WriteOutcome};
use self::ledger::{Ledger, Origin};
use self::streams::{Learned, StreamRedactor};
use crate::capabilities::Capabilities;
use crate::error::{Error, Result};
use crate::event::{Event, EventKind, ExpiryReason, RawJson};
use crate::exec::DynExec;
use crate::handler::DynRequestHandler;
use crate::ids::TurnId;
use crate::options::{SessionOptions, StoreFailurePolicy, TurnOptions};
use crate::provider::{ProviderMessage, ProviderSession};
use crate::request::Response;
use crate::runtime::inbox::Inbox;
use crate::runtime::registry::Registry;
use crate::runtime::subscription::{Grant, Replay};
use crate::runtime::watchdog::Watchdog;
use crate::runtime::{Command, Envelope, Lookup, StartTurn};
use crate::session::{CloseReason, Durability, ExitReason, SessionRef, SessionSnapshot, SessionState, SessionStatus};
use crate::store::{DynStore, StoreError};
use crate::time::Timestamp;
use crate::turn::{EndCause, Turn};

/// Provider messages taken from the sink per actor wake-up: a bound on what one wake-up adds to
/// the pending batch (see [`Journal::is_backlogged`]).
const SINK_BATCH: usize = 512;

/// Published events the actor gathers for live subscribers while the provider's messages keep
/// queueing, before it sends them anyway.
const LIVE_COALESCE: usize = 1024;

/// Everything the startup sequence hands the actor.
pub(crate) struct ActorParts {
    pub(crate) session: SessionRef,
    pub(crate) options: Arc<SessionOptions>,
    pub(crate) provider: Arc<dyn ProviderSession>,
    pub(crate) capabilities: Capabilities,
    pub(crate) provider_session_id: Option<String>,
    /// The store events are committed to; `None` when disabled or degraded at startup.
    pub(crate) store: Option<DynStore>,
    /// The store the session was started with, even when it degraded: the final snapshot is
    /// still offered to it, so a stopped session never reads back as running.
    pub(crate) home_store: Option<DynStore>,
    pub(crate) durability: Durability,
    pub(crate) snapshot: SessionSnapshot,
    /// Events already committed (and, for a degraded start, not stored) during startup.
    pub(crate) initial_events: Vec<Arc<Event>>,
    /// What the provider reported while it was opening, handled before anything else.
    pub(crate) early_messages: Vec<ProviderMessage>,
    /// Answers requests as they come (the session's, else the harness's).
    pub(crate) request_handler: Option<DynRequestHandler>,
    pub(crate) commands: mpsc::Receiver<Envelope>,
    pub(crate) sink: Inbox,
    pub(crate) exit: watch::Sender<Option<ExitReason>>,
    pub(crate) registry: Weak<Registry>,
    pub(crate) attempt: u64,
    pub(crate) span: Span,
    /// The exec the provider spawns through: asked for the processes left once the session ended.
    pub(crate) exec: DynExec,
    /// The credentials kept out of streamed deltas (see [`Opened::credentials`]).
    ///
    /// [`Opened::credentials`]: crate::provider::Opened::credentials
    pub(crate) credentials: Vec<String>,
}

enum CancelState {
    None,
    /// Asked while admission was pending; sent once the provider admits the turn.
    Requested,
    Sent,
}

struct ActiveTurn {
    turn: Turn,
    generation: u64,
    admitted: bool,
    /// The provider's ID of the turn, from its admission: a terminal the runtime makes (a forced
    /// stop, a lost transport) carries it too.
    provider_turn_id: Option<String>,
    cancel: CancelState,
    /// Inactivity deadline (see `TurnOptions::inactivity_timeout`), once admitted.
    inactivity: Option<Duration>,
    /// Set when the turn was cancelled for inactivity: the reason it fails with if the provider
    /// does not end it within the cancel deadline.
    stalled: Option<String>,
    /// Provider frames that arrived before admission completed; replayed after `turn_started`.
    deferred: Vec<ProviderMessage>,
    /// The caller's turn options, until admission takes them.
    options: Option<TurnOptions>,
    span: Span,
}

pub(crate) struct Actor {
    session: SessionRef,
    options: Arc<SessionOptions>,
    capabilities: Capabilities,
    state: SessionState,
    provider_session_id: Option<String>,
    snapshot: SessionSnapshot,
    current: Option<ActiveTurn>,
    generation: u64,

    journal: Journal,
    /// Holds back streamed text that may be a credential's beginning; `None` without credentials
    /// (boxed: a session without any keeps one pointer for it).
    streams: Option<Box<StreamRedactor>>,
    /// The secret answers given to the session's requests, redacted from every event the
    /// provider reports after them (see [`Actor::learn_secrets`]); `None` until one is given.
    learned: Option<Box<Learned>>,
    ledger: Ledger,
    cache: TurnCache,
    calls: Calls,
    watchdog: Watchdog,
    request_handler: Option<DynRequestHandler>,

    commands: mpsc::Receiver<Envelope>,
    sink: Inbox,
    sink_open: bool,
    early_messages: Vec<ProviderMessage>,
    /// Provider messages from a turn's terminal event on, held while an answer to one of that
    /// turn's requests is still being delivered (see [`Actor::take_provider`]); dropped when the
    /// session ends meanwhile.
    parked: VecDeque<ProviderMessage>,
    /// The transport went down while an admission was in flight; reported once it answers.
    transport_lost: Option<String>,
    exit: watch::Sender<Option<ExitReason>>,
    registry: Weak<Registry>,
    attempt: u64,
    exiting: Option<ExitReason>,
    /// Delete the stored history as the session ends (see [`Command::Stop`]).
    discard: bool,
    stale_frames: u64,
    span: Span,
    /// What the provider spawns through (see [`ActorParts::exec`]).
    exec: DynExec,
    /// The harness's number in this process, which stamped the provider's processes (kept: the
    /// harness may be gone when the session ends).
    harness: Option<u64>,
}

impl Actor {
    pub(crate) fn new(parts: ActorParts) -> Self {
        let ring = parts.options.event_buffer_size;
        let mut journal = Journal::new(
            parts.session.clone(),
            parts.store,
            parts.home_store,
            parts.durability,
            ring,
            parts.span.clone(),
        );
        journal.restore(parts.initial_events);
        let harness = parts.registry.upgrade().map(|registry| registry.harness_number());
        Actor {
            cache: TurnCache::new(parts.options.effective_cache_size()),
            session: parts.session,
            options: parts.options,
            capabilities: parts.capabilities,
            state: SessionState::Idle,
            provider_session_id: parts.provider_session_id,
            snapshot: parts.snapshot,
            current: None,
            generation: 0,
            journal,
            streams: StreamRedactor::new(&parts.credentials).map(Box::new),
            learned: None,
            ledger: Ledger::default(),
            calls: Calls::new(parts.provider),
            watchdog: Watchdog::default(),
            request_handler: parts.request_handler,
            commands: parts.commands,
            sink: parts.sink,
            sink_open: true,
            early_messages: parts.early_messages,
            parked: VecDeque::new(),
            transport_lost: None,
            exit: parts.exit,
            registry: parts.registry,
            attempt: parts.attempt,
            exiting: None,
            discard: false,
            stale_frames: 0,
            span: parts.span,
            exec: parts.exec,
            harness,
        }
    }

    /// Runs the actor until the session ends.
    ///
    /// Not an `async fn`: this future is most of a session's memory, and an `async fn` would keep
    /// room for the actor three times (its argument, its local and the block's capture).
    pub(crate) fn run(mut self) -> impl Future<Output = ()> + Send + 'static {
        let span = self.span.clone();
        async move {
            tracing::debug!("session runtime started");
            // The caller holds the handle: the startup is acknowledged at once, so that another
            // harness sharing the store no longer takes this live session for a startup that
            // was left unfinished (and replaces it).
            if self.snapshot.startup.is_some() {
                self.record_snapshot();
            }
            for message in std::mem::take(&mut self.early_messages) {
                self.on_provider(message);
            }
            // Swapped with the inbox's queue when it takes the whole queue: both keep their
            // capacity.
            let mut buf = VecDeque::new();
            loop {
                // A session that is ending replays nothing that waited: its end (`session_closed`,
                // or a retired turn's failure) is the last thing it records.
                if self.exiting.is_none() {
                    self.unpark();
                }
                self.settle_deliveries();
                self.journal.wake();
                if let Some(reason) = self.exiting.take() {
                    // Boxed: it runs once, and kept in place it would more than double the
                    // room every live session's task reserves.
                    Box::pin(self.shutdown(reason)).await;
                    return;
                }
                match self.journal.start_flush() {
                    FlushStart::Nothing(actions) => {
                        for action in actions {
                            self.run_after_commit(action, None);
                        }
                    }
                    FlushStart::InFlight => {}
                    FlushStart::Written(outcome) => {
                        // Published now; what it woke (waiters, parked messages, actions that
                        // emitted more) is settled on the next pass. A streamed event wakes
                        // nothing: its write goes straight on to the live send below, one pass
                        // per wake-up.
                        if self.after_write(outcome) || self.settles_after_publishing() {
                            continue;
                        }
                    }
                }
                // Live subscribers get what was published before the actor waits — or, while the
                // provider's messages queue faster than they are taken (the next take will not
                // wait), once enough has gathered: fewer, larger hand-overs to a subscriber on
                // another thread, each of which may have to wake it.
                if !(self.takes_provider_messages() && self.sink.has_queued())
                    || self.journal.unsent_live() >= LIVE_COALESCE
                {
                    self.journal.send_live();
                }
                tokio::select! {
                    biased;
                    flushed = self.journal.flushed(), if self.journal.is_flushing() => {
                        self.on_flushed(flushed);
                    }
                    done = self.calls.next(), if self.calls.is_busy() => {
                        if let Some(done) = done {
                            self.on_done(done);
                        }
                    }
                    () = self.watchdog.expired(), if self.watchdog.is_armed() => self.on_watchdog(),
                    command = self.commands.recv() => match command {
                        Some(envelope) => {
                            let _enter = envelope.span.enter();
                            self.on_command(envelope.command);
                        }
                        None => self.close(CloseReason::HarnessShutdown),
                    },
                    n = self.sink.recv_many(&mut buf, SINK_BATCH), if self.takes_provider_messages() => {
                        if n == 0 {
                            self.sink_open = false;
                            if !matches!(self.state, SessionState::Unavailable | SessionState::Closed) {
                                self.transport_down("the provider runtime ended".into());
                            }
                        }
                        self.watchdog.activity(buf.len());
                        for message in buf.drain(..) {
                            self.take_provider(message);
                        }
                    }
                }
            }
        }
        .instrument(span)
    }

    /// Wakes the waiters of the terminal events published since the last wake-up, and lets the
    /// cache forget the turns beyond its bound (their requests go with them; the ledger keeps how
    /// the last of them ended, see [`Ledger::forget_turn`]).
    fn settle_deliveries(&mut self) {
        for terminal in self.journal.take_terminals() {
            self.cache.notify(&terminal);
        }
        for turn in self.cache.evict(self.journal.published_seq()) {
            self.ledger.forget_turn(&turn);
        }
    }

    // ----- commands --------------------------------------------------------------------------

    fn on_command(&mut self, command: Command) {
        match command {
            Command::Status(reply) => {
                let _ = reply.send(self.status());
            }
            Command::Capabilities(reply) => {
                let result = match self.state {
                    SessionState::Unavailable => Err(self.unavailable()),
                    _ => Ok(self.capabilities),
                };
                let _ = reply.send(result);
            }
            Command::StartTurn(start) => {
                let StartTurn { turn, options, reply } = *start;
                self.start_turn(turn, options, reply)
            }
            Command::Subscribe { turn, replay, for_stream, reply } => {
                let _ = reply.send(self.subscribe(turn, replay, for_stream));
            }
            Command::Await { turn, reply } => {
                let _ = reply.send(self.await_turn(turn));
            }
            Command::Respond { request, response, reply } => {
                match self.ledger.check(&self.session.id, &request, &response) {
                    Ok(request) => self.deliver(request, response, Origin::Caller(reply)),
                    Err(error) => {
                        let _ = reply.send(Err(error));
                    }
                }
            }
            Command::Cancel { turn, reason, reply } => self.cancel(turn, reason, reply),
            Command::Steer { turn, input, reply } => self.steer(turn, input, reply),
            Command::Stop { force, discard, reply } => self.stop(force, discard, reply),
            Command::Shutdown => self.close(CloseReason::HarnessShutdown),
        }
    }

    fn status(&self) -> SessionStatus {
        SessionStatus {
            session: self.session.clone(),
            status: self.state,
            durability: self.journal.durability().clone(),
            provider_session_id: self.provider_session_id.clone(),
            current_turn: self.current.as_ref().map(|c| c.turn.clone()),
            pending_requests: self.ledger.pending(),
            last_seq: self.journal.published_seq(),
        }
    }

    fn unavailable(&self) -> Error {
        Error::SessionUnavailable {
            id: self.session.id.clone(),
            reason: "the provider transport is down or was retired".into(),
        }
    }

    fn subscribe(&mut self, turn: Option<TurnId>, replay: Replay, for_stream: bool) -> Result<Lookup<Grant>> {
        let after = replay.after();
        // `After(seq)` promises every event after `seq`; `Start` serves what is retained.
        let exact = matches!(replay, Replay::After(_));
        if let Replay::After(seq) = replay {
            self.journal.check_cursor(seq)?;
        }
        let exit = self.exit.subscribe();
        let finished_at = match &turn {
            Some(t) if self.current.as_ref().is_none_or(|c| &c.turn.id != t) => {
                match self.cache.finished(t, self.journal.published_seq()) {
                    Finished::Published(terminal) => Some(terminal.seq),
                    // Sequenced but not yet committed: it arrives live.
                    Finished::Unpublished => None,
                    Finished::Unknown => match self.journal.ring_terminal(t) {
                        Some(terminal) => Some(terminal.seq),
                        None => {
                            let store = self.journal.store().cloned();
                            return Ok(Lookup::NotHere { pruned: self.cache.pruned(), store });
                        }
                    },
                }
            }
            _ => None,
        };
        let grant = match finished_at {
            Some(terminal_seq) => {
                self.journal.grant_finished(turn.as_ref(), after, exact, terminal_seq, for_stream, exit)?
            }
            None => self.journal.grant_live(turn.as_ref(), after, exact, exit)?,
        };
        Ok(Lookup::Found(grant))
    }

    // ----- results of slow work -----------------------------------------------------------------

    fn on_done(&mut self, done: Done) {
        match done {
            Done::Admitted { turn, generation, result } => self.on_admission(turn, generation, result),
            Done::Responded { request, result } => self.on_responded(request, result),
            Done::Cancelled { turn, result } => {
                let Some(current) = self.current.as_ref().filter(|c| c.turn.id == turn) else { return };
                match result {
                    Err(error) => {
                        let reason = match &current.stalled {
                            Some(stalled) => format!("{stalled}; cancellation failed: {error}"),
                            None => format!("cancellation failed: {error}"),
                        };
                        self.retire_unless_reported(turn, matches!(error, Error::Transport { .. }), reason);
                    }
                    // Taken, and the turn runs on: the provider has as long as a command to end
                    // it (a stalled turn's deadline is running already).
                    Ok(()) if current.stalled.is_none() => self.watchdog.stall(self.options.provider_command_timeout),
                    Ok(()) => {}
                }
            }
            Done::Steered { id, turn, result } => {
                let Some(reply) = self.calls.steer_reply(id) else { return };
                let uncertain = result.as_ref().err().filter(|e| !e.is_definite()).map(|e| {
                    let transport = matches!(e, Error::Transport { .. });
                    (transport, format!("steering outcome is uncertain: {e}"))
                });
                let _ = reply.send(result);
                if let Some((transport, reason)) = uncertain
                    && self.current.as_ref().is_some_and(|c| c.turn.id == turn)
                {
                    self.retire_unless_reported(turn, transport, reason);
                }
            }
            Done::TransportUnreported { turn, reason } => {
                if self.current.as_ref().is_some_and(|c| c.turn.id == turn) {
                    self.retire(reason);
                }
            }
            Done::RequestDeadline { request } => {
                self.ledger.deadline_passed(&request);
                if let Some(pending) = self.ledger.request(&request).filter(|_| self.ledger.is_open(&request)) {
                    let pending = pending.clone();
                    self.deliver(pending, Response::deny("the request timed out"), Origin::Deadline);
                }
            }
            Done::Handled { request, result } => self.on_handled(request, result),
        }
    }

    /// A call of the current turn `turn` (a cancel, a steer, the delivery of an answer) failed
    /// with an uncertain outcome. When it failed on the `transport` (`Error::Transport`), the
    /// CLI is likely gone and the provider's own report of that — the turn's end with the CLI's
    /// exit status and stderr, then the transport's loss — is on its way through the sink,
    /// behind the call's failure: it gets `provider_command_timeout` to arrive before the
    /// outcome counts as uncertain and the session retires.
    fn retire_unless_reported(&mut self, turn: TurnId, transport: bool, reason: String) {
        if transport {
            tracing::debug!(%reason, "a call failed on the transport; waiting for the provider's report");
            self.calls.await_transport_report(turn, reason, self.options.provider_command_timeout);
        } else {
            self.retire(reason);
        }
    }

    // ----- provider messages -------------------------------------------------------------------

    /// Handles `message` unless it must wait. A CLI can act on an answer and end the turn
    /// before the acknowledgement of that answer's delivery reaches the actor (the delivery runs
    /// in a task; the machine may be busy). Handled in arrival order, the terminal event would
    /// expire a request that was in fact answered, and the caller would hear `RequestExpired`
    /// for an answer the agent used. So a terminal event for a turn with an answer in flight,
    /// and everything after it, waits until the delivery settles — bounded by the delivery's
    /// own deadline — and the sink is not read meanwhile. A session that ends meanwhile drops
    /// what waits (see [`Actor::run`]).
    fn take_provider(&mut self, message: ProviderMessage) {
        if self.parked.is_empty() && !self.must_wait(&message) {
            self.on_provider(message);
        } else {
            self.parked.push_back(message);
        }
    }

    /// Whether the run loop reads the sink now: not while messages are parked, nor while the
    /// store is a full batch behind (backpressure, see [`Journal::is_backlogged`]).
    fn takes_provider_messages(&self) -> bool {
        self.sink_open && self.parked.is_empty() && !self.journal.is_backlogged()
    }

    fn must_wait(&self, message: &ProviderMessage) -> bool {
        match message {
            ProviderMessage::Event { turn: Some(turn), kind, .. } if kind.is_terminal() => self.ledger.answering(turn),
            _ => false,
        }
    }

    /// Handles the parked messages once nothing holds them any more.
    fn unpark(&mut self) {
        while let Some(message) = self.parked.pop_front() {
            if self.must_wait(&message) {
                self.parked.push_front(message);
                return;
            }
            self.on_provider(message);
        }
    }

    fn on_provider(&mut self, message: ProviderMessage) {
        if let Some(current) = self.current.as_mut().filter(|c| !c.admitted) {
            let for_current = match &message {
                ProviderMessage::Event { turn: Some(t), .. } | ProviderMessage::Request { turn: t, .. } => {
                    *t == current.turn.id
                }
                _ => false,
            };
            if for_current {
                current.deferred.push(message);
                return;
            }
        }
        match message {
            ProviderMessage::Event { turn, kind, raw } => self.on_provider_event(turn, kind, raw),
            ProviderMessage::Request { turn, spec, raw } => {
                let accepting =
                    self.current.as_ref().is_some_and(|c| c.turn.id == turn && matches!(c.cancel, CancelState::None));
                if !accepting {
                    self.stale_frames += 1;
                    tracing::debug!(%turn, "dropped a request for a turn that is not running");
                    return;
                }
                self.create_request(turn, *spec, raw);
            }
            ProviderMessage::RequestResolved { provider_ref, mut raw } => {
                if let Some(learned) = &self.learned {
                    learned.drop_raw(&mut raw);
                }
                if let Some(id) = self.ledger.resolved_by_provider(&provider_ref) {
                    let turn = self.ledger.request(&id).map(|r| r.turn_id.clone());
                    self.expire_request(&id, ExpiryReason::ProviderResolved, raw);
                    if let Some(turn) = turn {
                        self.after_request_change(&turn);
                    }
                }
            }
            ProviderMessage::SessionUpdated { provider_session_id, mut raw } => {
                if let Some(learned) = &self.learned {
                    learned.drop_raw(&mut raw);
                }
                self.provider_session_id = provider_session_id.clone();
                self.record_snapshot();
                self.journal.emit(None, EventKind::SessionUpdated { provider_session_id }, raw);
            }
            ProviderMessage::TransportDown { reason } => self.transport_down(reason),
        }
    }

    /// Redacts `values` (secret answers, see [`Request::secret_values`]) from every event the
    /// provider reports from now on, streamed deltas included.
    ///
    /// [`Request::secret_values`]: crate::request::Request::secret_values
    fn learn_secrets(&mut self, values: Vec<String>) {
        if values.is_empty() {
            return;
        }
        match self.streams.as_mut() {
            Some(streams) => streams.learn(&values),
            None => self.streams = StreamRedactor::new(&values).map(Box::new),
        }
        self.learned.get_or_insert_default().add(&values);
    }

    fn on_provider_event(&mut self, turn: Option<TurnId>, mut kind: EventKind, mut raw: Option<RawJson>) {
        if is_reserved(&kind) {
            tracing::warn!(kind = kind.type_name(), "provider emitted a reserved event kind; dropped");
            return;
        }
        if let Some(learned) = &self.learned {
            learned.redact(&mut kind, &mut raw);
        }
        match turn {
            None if kind.is_terminal() => tracing::warn!("provider emitted a terminal event without a turn; dropped"),
            Some(turn) if self.current.as_ref().is_none_or(|c| c.turn.id != turn) => self.stale_frames += 1,
            Some(_) if kind.is_terminal() => {
                self.finish_current(kind, raw, ExpiryReason::TurnEnded, EndCause::Provider)
            }
            turn => {
                let Some(streams) = self.streams.as_mut() else {
                    self.journal.emit(turn, kind, raw);
                    return;
                };
                for released in streams.ended_by(turn.as_ref(), &kind) {
                    self.journal.emit(turn.clone(), released, None);
                }
                if let Some((kind, raw)) = streams.delta(turn.as_ref(), kind, raw) {
                    self.journal.emit(turn, kind, raw);
                }
            }
        }
    }

    // ----- persistence ---------------------------------------------------------------------

    fn record_snapshot(&mut self) {
        self.snapshot.status = self.state;
        self.snapshot.provider_session_id = self.provider_session_id.clone();
        self.snapshot.current_turn_id = self.current.as_ref().map(|c| c.turn.id.clone());
        self.snapshot.updated_at = Timestamp::now();
        // The caller acknowledged the hand-off before the actor started.
        self.snapshot.startup = None;
        self.journal.record_snapshot(&self.snapshot);
    }

    fn after_commit(&mut self, action: AfterCommit) {
        if let Some(now) = self.journal.after_commit(action) {
            self.run_after_commit(now, None);
        }
    }

    /// Runs what waited for a commit; `failed` is the store error when the session stops over it.
    fn run_after_commit(&mut self, action: AfterCommit, failed: Option<&StoreError>) {
        match (action, failed) {
            (AfterCommit::Reply(reply), None) => reply(Ok(())),
            (AfterCommit::Reply(reply), Some(error)) => reply(Err(Error::Store(error.replicate()))),
            (AfterCommit::Admit { turn, generation }, None) => self.admit(turn, generation),
            // The session is stopping: the turn is interrupted without reaching the provider.
            (AfterCommit::Admit { .. }, Some(_)) => {}
        }
    }

    /// Whether what was just published needs another pass of the run loop before it waits:
    /// terminal events to settle (waiters, cache eviction), parked messages, events or actions
    /// waiting for the next write, or the end of the session.
    fn settles_after_publishing(&self) -> bool {
        self.journal.has_terminals() || self.journal.has_pending() || !self.parked.is_empty() || self.exiting.is_some()
    }

    /// A write in flight finished: see [`Actor::after_write`].
    fn on_flushed(&mut self, flushed: journal::Flushed) -> bool {
        let outcome = self.journal.on_flushed(flushed);
        self.after_write(outcome)
    }

    /// A write finished and its events are published: run what waited for it, or, when it
    /// failed, go on live-only (`Degrade`) or end the session (`Stop`) — the failed batch's
    /// events are delivered either way. Returns whether it ran any action or failed (either may
    /// have changed anything).
    fn after_write(&mut self, outcome: WriteOutcome) -> bool {
        let failure = match outcome {
            Ok(actions) => {
                let acted = !actions.is_empty();
                for action in actions {
                    self.run_after_commit(action, None);
                }
                return acted;
            }
            Err(failure) => failure,
        };
        let reason = failure.error.to_string();
        let policy = self.options.store_failure;
        tracing::error!(%reason, ?policy, "store write failed");
        let turn = self.current.as_ref().map(|c| c.turn.id.clone());
        self.journal.emit(turn, EventKind::StoreFailed { reason: reason.clone(), policy }, None);
        let stopping = policy == StoreFailurePolicy::Stop;
        for action in failure.actions {
            self.run_after_commit(action, stopping.then_some(&failure.error));
        }
        if stopping && self.exiting.is_none() {
            self.close(CloseReason::StoreFailed);
            self.exiting = Some(ExitReason::StoreFailed { reason });
        }
        true
    }
}

/// Drops core lifecycle kinds a provider must not emit itself.
fn is_reserved(kind: &EventKind) -> bool {
    matches!(
        kind,
        EventKind::SessionReady { .. }
            | EventKind::SessionUpdated { .. }
            | EventKind::TurnStarted { .. }
            | EventKind::RequestCreated(_)
            | EventKind::RequestResolved { .. }
            | EventKind::RequestExpired { .. }
            | EventKind::CancelRequested { .. }
            | EventKind::StoreFailed { .. }
            | EventKind::SessionClosed { .. }
            | EventKind::TransportError { .. }
            | EventKind::ConversationResumed { .. }
            | EventKind::ConversationForked { .. }
            | EventKind::ConversationFailed { .. }
    )
}
