//! The session actor: one task that owns all of a session's state.
//!
//! Everything that changes a session passes through this task in order: caller commands,
//! provider messages, and the results of the slow work it hands to short-lived tasks. The actor
//! drives four parts, each owning one job and returning what happened instead of calling back:
//!
//! - [`journal`]: `seq`, the pending batch and its commit, the replay ring, live delivery;
//! - [`ledger`]: requests, the one claim each may hold, their deadlines;
//! - [`cache`]: finished turns, waiters, the turn IDs used;
//! - [`calls`]: provider calls, deadlines and request handlers running in tasks;
//!
//! plus the [`Watchdog`] of the running turn. The actor itself never waits on I/O except while
//! shutting down.

mod cache;
mod calls;
mod journal;
mod ledger;

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tracing::{Instrument, Span};

use self::cache::{Finished, TurnCache};
use self::calls::{Calls, Done};
use self::journal::{AfterCommit, Journal};
use self::ledger::{Ledger, Origin, Settled};
use crate::capabilities::{Capabilities, Capability};
use crate::error::{Error, Result};
use crate::event::{Event, EventKind, ExpiryReason, RawJson};
use crate::handler::DynRequestHandler;
use crate::ids::{RequestId, TurnId};
use crate::options::{SessionOptions, StoreFailurePolicy, TurnOptions};
use crate::provider::{Admission, ProviderMessage, ProviderSession, TurnStart};
use crate::request::{Request, RequestSpec, RequestStatus, Response};
use crate::runtime::registry::Registry;
use crate::runtime::subscription::{Grant, Replay};
use crate::runtime::watchdog::{Fired, Watchdog};
use crate::runtime::{AwaitGrant, Command, Envelope, Lookup, StartTurn};
use crate::session::{CloseReason, Durability, ExitReason, SessionRef, SessionSnapshot, SessionState, SessionStatus};
use crate::store::{DynStore, StoreError};
use crate::time::Timestamp;
use crate::turn::{EndCause, InputItem, Turn, TurnInput, TurnResult, TurnStatus};

/// Provider messages taken from the sink per actor wake-up.
const SINK_BATCH: usize = 512;

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
    pub(crate) sink: mpsc::Receiver<ProviderMessage>,
    pub(crate) exit: watch::Sender<Option<ExitReason>>,
    pub(crate) registry: Weak<Registry>,
    pub(crate) attempt: u64,
    pub(crate) span: Span,
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
    ledger: Ledger,
    cache: TurnCache,
    calls: Calls,
    watchdog: Watchdog,
    request_handler: Option<DynRequestHandler>,

    commands: mpsc::Receiver<Envelope>,
    sink: mpsc::Receiver<ProviderMessage>,
    sink_open: bool,
    early_messages: Vec<ProviderMessage>,
    /// The transport went down while an admission was in flight; reported once it answers.
    transport_lost: Option<String>,
    exit: watch::Sender<Option<ExitReason>>,
    registry: Weak<Registry>,
    attempt: u64,
    exiting: Option<ExitReason>,
    stale_frames: u64,
    span: Span,
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
            ledger: Ledger::default(),
            calls: Calls::new(parts.provider),
            watchdog: Watchdog::default(),
            request_handler: parts.request_handler,
            commands: parts.commands,
            sink: parts.sink,
            sink_open: true,
            early_messages: parts.early_messages,
            transport_lost: None,
            exit: parts.exit,
            registry: parts.registry,
            attempt: parts.attempt,
            exiting: None,
            stale_frames: 0,
            span: parts.span,
        }
    }

    /// Runs the actor until the session ends.
    pub(crate) async fn run(mut self) {
        let span = self.span.clone();
        async move {
            tracing::debug!("session runtime started");
            for message in std::mem::take(&mut self.early_messages) {
                self.on_provider(message);
            }
            let mut buf = Vec::with_capacity(SINK_BATCH);
            loop {
                self.settle_deliveries();
                self.journal.wake();
                if let Some(reason) = self.exiting.take() {
                    self.shutdown(reason).await;
                    return;
                }
                for action in self.journal.start_flush() {
                    self.run_after_commit(action, None);
                }
                tokio::select! {
                    biased;
                    flushed = self.journal.flushed(), if self.journal.is_flushing() => self.on_flushed(flushed),
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
                    n = self.sink.recv_many(&mut buf, SINK_BATCH), if self.sink_open => {
                        if n == 0 {
                            self.sink_open = false;
                            if !matches!(self.state, SessionState::Unavailable | SessionState::Closed) {
                                self.transport_down("the provider runtime ended".into());
                            }
                        }
                        self.watchdog.activity(buf.len());
                        for message in buf.drain(..) {
                            self.on_provider(message);
                        }
                    }
                }
            }
        }
        .instrument(span)
        .await
    }

    /// Wakes the waiters of the terminal events published since the last wake-up, and lets the
    /// cache forget the turns beyond its bound (their requests go with them).
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
            Command::Stop { force, reply } => self.stop(force, reply),
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

    fn start_turn(&mut self, mut turn: Turn, options: TurnOptions, reply: oneshot::Sender<Result<Turn>>) {
        let refusal = match (self.state, &self.current) {
            (_, Some(current)) => Some(Error::TurnInProgress { current: Box::new(current.turn.clone()) }),
            (SessionState::Idle, None) => None,
            _ => Some(self.unavailable()),
        };
        let refusal = refusal
            .or_else(|| {
                (options.id.is_some() && self.cache.used(&turn.id))
                    .then(|| Error::TurnIdAlreadyUsed { turn_id: turn.id.clone() })
            })
            .or_else(|| {
                let capability = self.missing_input_capability(&turn.input)?;
                Some(Error::Unsupported { provider: self.session.provider.clone(), capability })
            });
        if let Some(error) = refusal {
            let _ = reply.send(Err(error));
            return;
        }
        self.generation += 1;
        turn.status = TurnStatus::Starting;
        self.cache.use_id(&turn.id);
        let span = tracing::info_span!(parent: &self.span, "turn", turn_id = %turn.id);
        span.in_scope(|| tracing::debug!("turn recorded"));
        self.current = Some(ActiveTurn {
            turn: turn.clone(),
            generation: self.generation,
            admitted: false,
            cancel: CancelState::None,
            inactivity: options.inactivity_timeout.or(self.options.turn_inactivity_timeout),
            stalled: None,
            deferred: Vec::new(),
            options: Some(options),
            span,
        });
        self.state = SessionState::Starting;
        self.journal.record_turn(&turn);
        self.record_snapshot();
        let turn_id = turn.id.clone();
        self.after_commit(AfterCommit::Reply(Box::new(move |committed| {
            let _ = reply.send(committed.map(|()| turn));
        })));
        self.after_commit(AfterCommit::Admit { turn: turn_id, generation: self.generation });
    }

    /// The capability structured input needs that the session lacks, if any.
    fn missing_input_capability(&self, input: &TurnInput) -> Option<Capability> {
        let TurnInput::Items(items) = input else { return None };
        let needs = items.iter().map(|item| match item {
            InputItem::LocalImage { .. } | InputItem::ImageUrl { .. } => Capability::Images,
            InputItem::Skill { .. } => Capability::Skills,
            _ => Capability::StructuredInput,
        });
        std::iter::once(Capability::StructuredInput)
            .chain(needs)
            .find(|&capability| !self.capabilities.get(capability).is_available())
    }

    fn admit(&mut self, turn_id: TurnId, generation: u64) {
        if !self.current.as_ref().is_some_and(|c| c.turn.id == turn_id && c.generation == generation) {
            return;
        }
        if self.state == SessionState::Unavailable {
            // The transport went down before the turn reached the provider: it ended with it.
            let result = TurnResult::reason("the provider transport went down before the turn was admitted");
            let kind = EventKind::terminal(TurnStatus::Failed, result);
            self.finish_current(kind, None, ExpiryReason::TurnEnded, EndCause::TransportLost);
            return;
        }
        let Some(current) = self.current.as_mut() else { return };
        let start = TurnStart { turn: current.turn.clone(), options: current.options.take().unwrap_or_default() };
        let span = tracing::info_span!(parent: &current.span, "provider_command", command = "start_turn");
        self.calls.admit(start, generation, self.options.turn_start_timeout, span);
    }

    fn subscribe(&mut self, turn: Option<TurnId>, replay: Replay, for_stream: bool) -> Result<Lookup<Grant>> {
        let after = replay.after();
        // `After(seq)` promises every event after `seq`; `Start` serves what is retained.
        let exact = matches!(replay, Replay::After(_));
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

    fn await_turn(&mut self, turn: TurnId) -> Lookup<AwaitGrant> {
        if self.current.as_ref().is_some_and(|c| c.turn.id == turn) {
            return Lookup::Found(AwaitGrant::Wait(self.cache.waiter(turn)));
        }
        match self.cache.finished(&turn, self.journal.published_seq()) {
            Finished::Published(terminal) => Lookup::Found(AwaitGrant::Done(terminal)),
            Finished::Unpublished => Lookup::Found(AwaitGrant::Wait(self.cache.waiter(turn))),
            Finished::Unknown => match self.journal.ring_terminal(&turn) {
                Some(terminal) => Lookup::Found(AwaitGrant::Done(Arc::clone(terminal))),
                None => Lookup::NotHere { pruned: self.cache.pruned(), store: self.journal.store().cloned() },
            },
        }
    }

    fn cancel(&mut self, turn: TurnId, reason: Option<String>, reply: oneshot::Sender<Result<()>>) {
        let Some(current) = self.current.as_ref().filter(|c| c.turn.id == turn) else {
            let _ = reply.send(Err(Error::TurnNotActive { turn_id: turn }));
            return;
        };
        if matches!(current.cancel, CancelState::None) {
            self.request_cancel(turn, reason);
        }
        // The intent is acted on whether or not it was stored: a store failure that stops the
        // session interrupts the turn anyway.
        self.after_commit(AfterCommit::Reply(Box::new(move |_| {
            let _ = reply.send(Ok(()));
        })));
    }

    /// Records the intent to cancel the current turn `turn` (which is not cancelling yet) and
    /// calls the provider's cancel once the turn is admitted.
    fn request_cancel(&mut self, turn: TurnId, reason: Option<String>) {
        let Some(current) = self.current.as_mut().filter(|c| c.turn.id == turn) else { return };
        current.cancel = if current.admitted { CancelState::Sent } else { CancelState::Requested };
        current.turn.status = TurnStatus::Cancelling;
        if current.admitted {
            self.calls.cancel(turn.clone(), self.options.provider_command_timeout, &current.span);
        }
        let snapshot = current.turn.clone();
        self.state = SessionState::Cancelling;
        self.journal.record_turn(&snapshot);
        self.record_snapshot();
        self.journal.emit(Some(turn.clone()), EventKind::CancelRequested { reason }, None);
        self.expire_pending(&turn, ExpiryReason::Cancelled);
    }

    fn steer(&mut self, turn: TurnId, input: TurnInput, reply: oneshot::Sender<Result<()>>) {
        let running =
            self.current.as_ref().filter(|c| c.turn.id == turn && c.admitted && matches!(c.cancel, CancelState::None));
        let Some(current) = running else {
            let _ = reply.send(Err(Error::TurnNotActive { turn_id: turn }));
            return;
        };
        if !self.capabilities.steer.is_available() {
            let provider = self.session.provider.clone();
            let _ = reply.send(Err(Error::Unsupported { provider, capability: Capability::Steer }));
            return;
        }
        self.calls.steer(turn, input, reply, self.options.provider_command_timeout, &current.span);
    }

    fn stop(&mut self, force: bool, reply: oneshot::Sender<Result<()>>) {
        if let Some(current) = &self.current
            && !force
        {
            let _ = reply.send(Err(Error::TurnInProgress { current: Box::new(current.turn.clone()) }));
            return;
        }
        self.close(if force { CloseReason::ForcedStop } else { CloseReason::Stopped });
        let _ = reply.send(Ok(()));
    }

    /// Ends the session: interrupts an active turn, records `session_closed`, and exits.
    fn close(&mut self, reason: CloseReason) {
        if self.exiting.is_some() || self.state == SessionState::Closed {
            return;
        }
        // Callers of interrupted commands learn of the session's end (`SessionDown`) when their
        // replies are dropped.
        self.watchdog.disarm();
        drop((self.calls.abort_all(), self.ledger.abandon_claims()));
        self.calls.abort_admission();
        if let Some(lost) = self.transport_lost.take() {
            self.journal.emit(None, EventKind::TransportError { reason: lost }, None);
        }
        if self.current.is_some() {
            let (why, cause) = match reason {
                CloseReason::ForcedStop => ("forced session stop", EndCause::ForcedStop),
                CloseReason::StoreFailed => ("store failed", EndCause::StoreFailed),
                CloseReason::HarnessShutdown => ("harness shut down", EndCause::HarnessShutdown),
                _ => ("session closed", EndCause::HarnessShutdown),
            };
            let kind = EventKind::terminal(TurnStatus::Interrupted, TurnResult::reason(why));
            self.finish_current(kind, None, ExpiryReason::SessionClosed, cause);
        }
        self.state = SessionState::Closed;
        self.record_snapshot();
        self.journal.emit(None, EventKind::SessionClosed { reason: reason.clone() }, None);
        self.exiting = Some(ExitReason::Closed { reason });
    }

    // ----- results of slow work -----------------------------------------------------------------

    fn on_done(&mut self, done: Done) {
        match done {
            Done::Admitted { turn, generation, result } => self.on_admission(turn, generation, result),
            Done::Responded { request, result } => self.on_responded(request, result),
            Done::Cancelled { turn, result } => {
                let Some(current) = self.current.as_ref().filter(|c| c.turn.id == turn) else { return };
                if let Err(error) = result {
                    let reason = match &current.stalled {
                        Some(stalled) => format!("{stalled}; cancellation failed: {error}"),
                        None => format!("cancellation failed: {error}"),
                    };
                    self.retire(reason);
                }
            }
            Done::Steered { id, turn, result } => {
                let Some(reply) = self.calls.steer_reply(id) else { return };
                let uncertain = result.as_ref().err().filter(|e| !e.is_definite()).map(|e| e.to_string());
                let _ = reply.send(result);
                if let Some(error) = uncertain
                    && self.current.as_ref().is_some_and(|c| c.turn.id == turn)
                {
                    self.retire(format!("steering outcome is uncertain: {error}"));
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

    fn on_admission(&mut self, turn_id: TurnId, generation: u64, result: Result<Admission>) {
        // A transport that went down while the admission ran is reported after its outcome.
        let lost = self.transport_lost.take();
        let Some(current) = self.current.as_mut().filter(|c| c.turn.id == turn_id && c.generation == generation) else {
            if let Some(reason) = lost {
                self.report_transport_down(reason);
            }
            return;
        };
        match result {
            Ok(admission) => {
                current.admitted = true;
                current.turn.started_at = Some(Timestamp::now());
                let cancel_now = matches!(current.cancel, CancelState::Requested);
                if cancel_now {
                    current.cancel = CancelState::Sent;
                    self.calls.cancel(turn_id.clone(), self.options.provider_command_timeout, &current.span);
                } else {
                    current.turn.status = TurnStatus::Running;
                    if lost.is_none() {
                        self.state = SessionState::Running;
                    }
                }
                let (turn, deferred) = (current.turn.clone(), std::mem::take(&mut current.deferred));
                let watch = current.inactivity.filter(|_| !cancel_now && lost.is_none());
                self.journal.record_turn(&turn);
                self.record_snapshot();
                let started = EventKind::TurnStarted { provider_turn_id: admission.provider_turn_id };
                self.journal.emit(Some(turn_id.clone()), started, None);
                for message in deferred {
                    self.on_provider(message);
                }
                if let Some(timeout) = watch
                    && self.current.as_ref().is_some_and(|c| c.turn.id == turn_id)
                {
                    self.watchdog.watch(timeout);
                }
            }
            Err(error) if error.is_definite() => {
                current.deferred.clear();
                let result = TurnResult::reason(format!("provider rejected the turn: {error}"));
                let kind = EventKind::terminal(TurnStatus::Failed, result);
                self.finish_current(kind, None, ExpiryReason::TurnEnded, EndCause::Rejected);
            }
            // The transport is gone: the admission's uncertainty is the transport's loss, told
            // below with the frames the provider already sent.
            Err(_) if lost.is_some() => {}
            Err(error) => self.retire(format!("turn admission outcome is uncertain: {error}")),
        }
        if let Some(reason) = lost {
            self.report_transport_down(reason);
        }
    }

    /// The current turn's watchdog fired: cancel a turn that went silent, or fail one whose
    /// cancel the provider did not complete.
    fn on_watchdog(&mut self) {
        let Some(fired) = self.watchdog.fired() else { return };
        let Some(current) = self.current.as_mut() else { return };
        let turn = current.turn.id.clone();
        match fired {
            // Already cancelling: the cancel's own deadline applies.
            Fired::Inactive { .. } if !matches!(current.cancel, CancelState::None) => {}
            // Waiting on the host, not on the provider.
            Fired::Inactive { timeout } if self.ledger.has_pending(&turn) => self.watchdog.rewatch(timeout),
            Fired::Inactive { timeout } => {
                let reason = format!("stalled: no provider activity for {timeout:?}");
                current.span.in_scope(|| tracing::warn!(%reason, "cancelling a stalled turn"));
                current.stalled = Some(reason.clone());
                self.request_cancel(turn, Some(reason));
                self.watchdog.stall(self.options.provider_command_timeout);
            }
            Fired::Stalled => {
                let stalled = current.stalled.clone().unwrap_or_else(|| "stalled".into());
                let deadline = self.options.provider_command_timeout;
                self.retire(format!("{stalled}; the provider did not end the turn within {deadline:?} of the cancel"));
            }
        }
    }

    // ----- requests ------------------------------------------------------------------------

    /// Claims `request` for `response` (checked already) and delivers it to the provider.
    fn deliver(&mut self, request: Request, response: Response, origin: Origin) {
        self.ledger.claim(&request.id, response.clone(), origin);
        self.calls.respond(request, response, self.options.provider_command_timeout, &self.span);
    }

    fn on_responded(&mut self, request_id: RequestId, result: Result<()>) {
        let turn_live = |turn: &TurnId| self.current.as_ref().is_some_and(|c| &c.turn.id == turn);
        let turn = self.ledger.request(&request_id).map(|r| r.turn_id.clone());
        let live = turn.as_ref().is_some_and(turn_live);
        let Some(settled) = self.ledger.settle(&request_id, result, live) else { return };
        match settled {
            Settled::Late { origin } => reply_to(origin, Err(Error::RequestExpired { request_id })),
            Settled::DeadlineExpired => self.expire_request(&request_id, ExpiryReason::Timeout, None),
            Settled::Resolved { request, response, origin } => {
                self.journal.record_request(&request);
                let resolved = EventKind::RequestResolved { request_id, response: Box::new(response) };
                self.journal.emit(Some(request.turn_id.clone()), resolved, None);
                if let Origin::Caller(reply) = origin {
                    // The provider has the answer: delivery is the fact the caller needs.
                    self.after_commit(AfterCommit::Reply(Box::new(move |_| {
                        let _ = reply.send(Ok(()));
                    })));
                }
            }
            Settled::Refused { error, origin } => {
                if matches!(origin, Origin::Handler) {
                    tracing::warn!(%error, "the provider refused the request handler's answer; left to the caller");
                }
                reply_to(origin, Err(error));
            }
            Settled::Uncertain { error, origin } => {
                let reason = format!("response delivery is uncertain: {error}");
                reply_to(origin, Err(error));
                self.retire(reason);
            }
        }
        if let Some(turn) = turn {
            self.after_request_change(&turn);
        }
    }

    /// A request handler answered: its answer claims the request unless a caller's did first.
    fn on_handled(&mut self, request_id: RequestId, result: std::result::Result<Option<Response>, String>) {
        if !self.ledger.is_open(&request_id) {
            return;
        }
        let response = match result {
            Ok(None) => return,
            Ok(Some(response)) => response,
            Err(failure) => {
                tracing::warn!(%failure, %request_id, "request handler failed; denying the request");
                Response::deny(failure)
            }
        };
        let response = match self.ledger.check(&self.session.id, &request_id, &response) {
            Ok(_) => response,
            Err(error) => {
                tracing::warn!(%error, %request_id, "request handler's answer does not fit; denying the request");
                Response::deny(format!("the request handler's answer does not fit the request: {error}"))
            }
        };
        if let Some(request) = self.ledger.request(&request_id).cloned() {
            self.deliver(request, response, Origin::Handler);
        }
    }

    fn create_request(&mut self, turn: TurnId, spec: RequestSpec, raw: Option<RawJson>) {
        let now = Timestamp::now();
        let timeout = match (spec.timeout, self.options.request_timeout) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let request = Request {
            id: RequestId::generate(),
            session_id: self.session.id.clone(),
            turn_id: turn.clone(),
            kind: spec.kind,
            prompt: spec.prompt,
            choices: spec.choices,
            questions: spec.questions,
            schema: spec.schema,
            scopes: spec.scopes,
            metadata: spec.metadata,
            status: RequestStatus::Pending,
            provider_ref: spec.provider_ref,
            response: None,
            created_at: now,
            expires_at: timeout.map(|t| now.saturating_add(t)),
        };
        let deadline = timeout.map(|timeout| self.calls.deadline(request.id.clone(), timeout));
        let parent = self.current.as_ref().map_or(&self.span, |c| &c.span);
        let span = tracing::info_span!(parent: parent, "request", request_id = %request.id, kind = %request.kind);
        span.in_scope(|| tracing::debug!("request created"));
        if let Some(handler) = self.request_handler.clone() {
            let deadline = self.options.request_timeout.unwrap_or(self.options.provider_command_timeout);
            self.calls.handle(handler, request.clone(), deadline, &span);
        }
        self.ledger.insert(request.clone(), deadline, span);
        self.journal.record_request(&request);
        if let Some(current) = self.current.as_mut()
            && current.turn.status == TurnStatus::Running
        {
            current.turn.status = TurnStatus::AwaitingInput;
        }
        if self.state == SessionState::Running {
            self.state = SessionState::AwaitingInput;
        }
        self.record_snapshot();
        self.journal.emit(Some(turn), EventKind::RequestCreated(Box::new(request)), raw);
    }

    /// Moves the session between running and awaiting input after a request was settled.
    fn after_request_change(&mut self, turn: &TurnId) {
        if !self.state.has_active_turn() {
            return;
        }
        let waiting = self.ledger.has_pending(turn);
        let Some(current) = self.current.as_mut().filter(|c| &c.turn.id == turn && c.admitted) else { return };
        let (turn_status, session_state) = match (&current.cancel, waiting) {
            (CancelState::None, true) => (TurnStatus::AwaitingInput, SessionState::AwaitingInput),
            (CancelState::None, false) => (TurnStatus::Running, SessionState::Running),
            _ => (TurnStatus::Cancelling, SessionState::Cancelling),
        };
        current.turn.status = turn_status;
        if self.state != session_state {
            self.state = session_state;
            self.record_snapshot();
        }
    }

    fn expire_request(&mut self, request_id: &RequestId, reason: ExpiryReason, raw: Option<RawJson>) {
        let Some(request) = self.ledger.expire(request_id, reason) else { return };
        self.journal.record_request(&request);
        let expired = EventKind::RequestExpired { request_id: request_id.clone(), reason };
        self.journal.emit(Some(request.turn_id.clone()), expired, raw);
    }

    /// Expires every pending request of `turn`, oldest first.
    fn expire_pending(&mut self, turn: &TurnId, reason: ExpiryReason) {
        for id in self.ledger.pending_of(turn) {
            self.expire_request(&id, reason, None);
        }
    }

    // ----- provider messages -------------------------------------------------------------------

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
            ProviderMessage::RequestResolved { provider_ref, raw } => {
                if let Some(id) = self.ledger.resolved_by_provider(&provider_ref) {
                    let turn = self.ledger.request(&id).map(|r| r.turn_id.clone());
                    self.expire_request(&id, ExpiryReason::ProviderResolved, raw);
                    if let Some(turn) = turn {
                        self.after_request_change(&turn);
                    }
                }
            }
            ProviderMessage::SessionUpdated { provider_session_id, raw } => {
                self.provider_session_id = provider_session_id.clone();
                self.record_snapshot();
                self.journal.emit(None, EventKind::SessionUpdated { provider_session_id }, raw);
            }
            ProviderMessage::TransportDown { reason } => self.transport_down(reason),
        }
    }

    fn on_provider_event(&mut self, turn: Option<TurnId>, kind: EventKind, raw: Option<RawJson>) {
        if is_reserved(&kind) {
            tracing::warn!(kind = kind.type_name(), "provider emitted a reserved event kind; dropped");
            return;
        }
        match turn {
            None if kind.is_terminal() => tracing::warn!("provider emitted a terminal event without a turn; dropped"),
            None => {
                self.journal.emit(None, kind, raw);
            }
            Some(turn) if self.current.as_ref().is_none_or(|c| c.turn.id != turn) => self.stale_frames += 1,
            Some(_) if kind.is_terminal() => {
                self.finish_current(kind, raw, ExpiryReason::TurnEnded, EndCause::Provider)
            }
            Some(turn) => {
                self.journal.emit(Some(turn), kind, raw);
            }
        }
    }

    // ----- endings -------------------------------------------------------------------------

    /// Ends the current turn with a terminal `kind`: pending requests expire first, then the
    /// terminal event is sequenced and the session becomes idle (unless it is going away).
    fn finish_current(&mut self, mut kind: EventKind, raw: Option<RawJson>, expiry: ExpiryReason, cause: EndCause) {
        let Some(current) = self.current.as_ref() else { return };
        // The provider ending a turn the caller (or the watchdog) asked to stop is that stop.
        let cause = match (cause, &current.cancel, &current.stalled) {
            (EndCause::Provider | EndCause::Uncertain, _, Some(_)) => EndCause::Stalled,
            (EndCause::Provider, CancelState::Requested | CancelState::Sent, None) => EndCause::Cancel,
            (cause, ..) => cause,
        };
        let Some(mut current) = self.current.take() else { return };
        let turn_id = current.turn.id.clone();
        self.expire_pending(&turn_id, expiry);
        self.watchdog.disarm();
        let end = kind.terminal_end_mut().map(|end| {
            end.result.ended_by = Some(cause);
            end.clone()
        });
        let (status, result) = end.map_or((TurnStatus::Failed, TurnResult::default()), |end| (end.status, end.result));
        current.turn.status = status;
        current.turn.finished_at = Some(Timestamp::now());
        current.turn.result = Some(result);
        current.span.in_scope(|| tracing::info!(status = ?status, "turn finished"));
        if self.state.has_active_turn() {
            self.state = SessionState::Idle;
        }
        self.journal.record_turn(&current.turn);
        self.record_snapshot();
        let terminal = self.journal.emit(Some(turn_id), kind, raw);
        self.cache.insert(current.turn, terminal);
    }

    fn transport_down(&mut self, reason: String) {
        if matches!(self.state, SessionState::Unavailable | SessionState::Closed) || self.exiting.is_some() {
            return;
        }
        tracing::warn!(%reason, "provider transport down");
        self.abandon_calls("the provider transport went down");
        if self.calls.is_admitting() {
            // The admission in flight keeps running (bounded by `turn_start_timeout`): whether
            // the provider admitted the turn decides how its end is told.
            self.transport_lost = Some(reason);
            self.state = SessionState::Unavailable;
            self.record_snapshot();
            return;
        }
        self.report_transport_down(reason);
    }

    /// Records a transport loss: `transport_error`, then the active turn fails.
    fn report_transport_down(&mut self, reason: String) {
        self.release_held_frames();
        let turn = self.current.as_ref().map(|c| c.turn.id.clone());
        self.journal.emit(turn, EventKind::TransportError { reason: reason.clone() }, None);
        let kind = EventKind::terminal(TurnStatus::Failed, TurnResult::reason(reason));
        self.finish_current(kind, None, ExpiryReason::TurnEnded, EndCause::TransportLost);
        self.state = SessionState::Unavailable;
        self.record_snapshot();
    }

    /// When the transport goes away (or the session retires) before the admission result arrived,
    /// the frames the provider already sent for the turn are the best record of what it did: the
    /// turn counts as started and they are replayed, so a terminal event among them ends it as
    /// the provider said.
    fn release_held_frames(&mut self) {
        let Some(current) = self.current.as_mut().filter(|c| !c.admitted && !c.deferred.is_empty()) else {
            return;
        };
        current.admitted = true;
        current.turn.started_at = Some(Timestamp::now());
        let turn = current.turn.id.clone();
        let held = std::mem::take(&mut current.deferred);
        self.journal.emit(Some(turn), EventKind::TurnStarted { provider_turn_id: None }, None);
        for message in held {
            self.on_provider(message);
        }
    }

    /// Aborts the provider calls in flight (all but an admission) and gives their callers a
    /// definite answer: the session cannot deliver them.
    fn abandon_calls(&mut self, why: &str) {
        self.watchdog.disarm();
        let unavailable = || Error::SessionUnavailable { id: self.session.id.clone(), reason: why.to_owned() };
        for reply in self.calls.abort_all() {
            let _ = reply.send(Err(unavailable()));
        }
        for reply in self.ledger.abandon_claims() {
            let _ = reply.send(Err(unavailable()));
        }
    }

    /// Retires the session after an uncertain provider outcome: the active turn fails, the
    /// session becomes unavailable, and the runtime exits.
    fn retire(&mut self, reason: String) {
        if self.exiting.is_some() {
            return;
        }
        tracing::warn!(%reason, "retiring session");
        self.abandon_calls("the session retired");
        self.calls.abort_admission();
        if let Some(lost) = self.transport_lost.take() {
            self.journal.emit(None, EventKind::TransportError { reason: lost }, None);
        }
        self.release_held_frames();
        let kind = EventKind::terminal(TurnStatus::Failed, TurnResult::reason(reason.clone()));
        self.finish_current(kind, None, ExpiryReason::TurnEnded, EndCause::Uncertain);
        self.state = SessionState::Unavailable;
        self.record_snapshot();
        self.exiting = Some(ExitReason::Retired { reason });
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

    /// A write finished: run what waited for it, or, when it failed, go on live-only (`Degrade`)
    /// or end the session (`Stop`) — the failed batch's events are delivered either way.
    fn on_flushed(&mut self, flushed: journal::Flushed) {
        let failure = match self.journal.on_flushed(flushed) {
            Ok(actions) => {
                for action in actions {
                    self.run_after_commit(action, None);
                }
                return;
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
    }

    /// Final flush, provider close, deregistration. Waits on I/O: nothing else runs any more.
    async fn shutdown(mut self, reason: ExitReason) {
        drop((self.calls.abort_all(), self.ledger.abandon_claims()));
        self.calls.abort_admission();
        // The final snapshot records how the session ended.
        self.state = SessionState::Closed;
        self.snapshot.ended = Some(reason.clone());
        self.snapshot.durability = self.journal.durability().clone();
        self.record_snapshot();
        for _ in 0..3 {
            if self.journal.is_flushing() {
                let flushed = self.journal.flushed().await;
                self.on_flushed(flushed);
            }
            for action in self.journal.start_flush() {
                self.run_after_commit(action, None);
            }
            if !self.journal.is_flushing() {
                break;
            }
        }
        self.settle_deliveries();
        let finalize = self.options.startup_finalization_timeout;
        self.journal.offer_final_snapshot(&self.snapshot, finalize).await;
        if tokio::time::timeout(finalize, self.calls.provider().close()).await.is_err() {
            tracing::warn!(close_timeout = ?finalize, "provider did not close in time; dropping it");
        }
        if self.stale_frames > 0 {
            tracing::debug!(stale_frames = self.stale_frames, "frames for finished turns were dropped");
        }
        tracing::info!(reason = %reason, "session ended");
        if let Some(registry) = self.registry.upgrade() {
            registry.finish(&self.session.id, self.attempt, reason.clone());
        }
        let _ = self.exit.send(Some(reason));
        // Dropping the actor drops the provider session (killing its processes) and the live
        // sender (ending subscriptions).
    }
}

/// Answers whoever is waiting for a delivery.
fn reply_to(origin: Origin, result: Result<()>) {
    if let Origin::Caller(reply) = origin {
        let _ = reply.send(result);
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
