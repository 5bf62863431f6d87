//! The session actor: one task that owns all of a session's state.
//!
//! Everything that changes a session passes through this task in order: caller commands,
//! provider messages, and the results of the slow work it hands to short-lived tasks (provider
//! admission, responses, cancellation, request deadlines). Store writes are pipelined: events
//! and records accumulate in a batch while the previous batch is being written, and events are
//! published to subscribers only once the batch that holds them is committed. The actor itself
//! never waits on I/O except while shutting down.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::FutureExt;
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::task::{AbortHandle, JoinHandle, JoinSet};
use tracing::{Instrument, Span};

use crate::capabilities::Capabilities;
use crate::error::{Error, Result};
use crate::event::{Event, EventKind, ExpiryReason, RawJson, SCHEMA_VERSION};
use crate::ids::{EventId, RequestId, TurnId};
use crate::options::{CacheSize, SessionOptions, StoreFailurePolicy};
use crate::provider::{Admission, ProviderMessage, ProviderSession, TurnStart};
use crate::request::{Request, RequestStatus, Response};
use crate::runtime::registry::Registry;
use crate::runtime::subscription::{Grant, Replay};
use crate::runtime::watchdog::{Fired, Watchdog};
use crate::runtime::{AwaitGrant, Command, Envelope, Lookup, StartTurn, write_batch};
use crate::session::{CloseReason, Durability, ExitReason, SessionRef, SessionSnapshot, SessionState, SessionStatus};
use crate::store::{DynStore, StoreError, WriteBatch};
use crate::time::Timestamp;
use crate::turn::{EndCause, Turn, TurnResult, TurnStatus};

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
    pub(crate) commands: mpsc::Receiver<Envelope>,
    pub(crate) sink: mpsc::Receiver<crate::provider::ProviderMessage>,
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
    /// The provider's admission call is running.
    admitting: bool,
    cancel: CancelState,
    /// Inactivity deadline (see `TurnOptions::inactivity_timeout`), once admitted.
    inactivity: Option<Duration>,
    /// Set when the turn was cancelled for inactivity: the reason it fails with if the provider
    /// does not end it within the cancel deadline.
    stalled: Option<String>,
    /// Provider frames that arrived before admission completed; replayed after `turn_started`.
    deferred: Vec<ProviderMessage>,
    /// The caller's turn options, until admission takes them.
    options: Option<crate::options::TurnOptions>,
    span: Span,
}

struct Claim {
    response: Response,
    /// `None` for the runtime's own deny after a request deadline.
    reply: Option<oneshot::Sender<Result<()>>>,
}

struct RequestEntry {
    request: Request,
    claim: Option<Claim>,
    deadline: Option<AbortHandle>,
    /// Open from creation until the request is resolved or expires.
    span: Option<Span>,
}

struct CompletedTurn {
    turn: Turn,
    terminal: Arc<Event>,
}

enum TaskDone {
    Responded { request: RequestId, result: Result<()> },
    Cancelled { turn: TurnId, result: Result<()> },
    Steered { id: u64, turn: TurnId, result: Result<()> },
    RequestDeadline { request: RequestId },
}

/// What waits for a batch to commit.
enum AfterCommit {
    /// A reply that promises durability. It gets `Err` only when the batch failed and the
    /// session stops over it (`StoreFailurePolicy::Stop`); under `Degrade` the session goes on
    /// live-only and the command did take effect.
    Reply(Box<dyn FnOnce(Result<()>) + Send>),
    /// Provider admission of a turn, which must not start before the turn is checkpointed.
    Admit { turn: TurnId, generation: u64 },
}

/// A batch write in flight; the task always hands the batch back, even when the store panics.
type Flush = JoinHandle<(WriteBatch, Vec<AfterCommit>, std::result::Result<(), StoreError>)>;

pub(crate) struct Actor {
    session: SessionRef,
    options: Arc<SessionOptions>,
    provider: Arc<dyn ProviderSession>,
    capabilities: Capabilities,
    state: SessionState,
    durability: Durability,
    provider_session_id: Option<String>,
    snapshot: SessionSnapshot,

    current: Option<ActiveTurn>,
    generation: u64,
    completed: HashMap<TurnId, CompletedTurn>,
    completed_order: VecDeque<TurnId>,
    pruned: bool,
    requests: HashMap<RequestId, RequestEntry>,
    waiters: HashMap<TurnId, Vec<oneshot::Sender<Arc<Event>>>>,

    store: Option<DynStore>,
    home_store: Option<DynStore>,
    next_seq: u64,
    published_seq: u64,
    pending: WriteBatch,
    after_commit: Vec<AfterCommit>,
    flush: Option<Flush>,
    ring: VecDeque<Arc<Event>>,
    /// The turn and seq of the last turn event that left the ring: that turn's events up to the
    /// seq are gone from the ring (turns run one after another, so only the oldest turn in the
    /// ring can have lost some).
    last_evicted: Option<(TurnId, u64)>,
    /// Every turn ID this session used, so a caller-chosen ID is never reused even after the
    /// turn left the completed-turn cache and the session has no store to ask.
    used_turn_ids: HashSet<TurnId>,
    /// Live delivery to subscribers; created by the first subscription and dropped when the last
    /// one is gone, so an unwatched session holds no channel and spends nothing per event on it.
    live: Option<broadcast::Sender<Arc<Event>>>,

    commands: mpsc::Receiver<Envelope>,
    sink: mpsc::Receiver<ProviderMessage>,
    sink_open: bool,
    early_messages: Vec<ProviderMessage>,
    tasks: JoinSet<TaskDone>,
    /// The provider's admission of the current turn, separate from other commands: a transport
    /// loss aborts those but waits for this one, whose outcome decides how the turn is told.
    admission: Option<JoinHandle<(TurnId, u64, Result<Admission>)>>,
    /// The transport went down while an admission was in flight; reported once it answers.
    transport_lost: Option<String>,
    /// The current turn's inactivity or stall deadline.
    watchdog: Watchdog,
    exit: watch::Sender<Option<ExitReason>>,
    registry: Weak<Registry>,
    attempt: u64,
    exiting: Option<ExitReason>,
    stale_frames: u64,
    /// Replies of steer commands in flight, by task.
    steering: HashMap<u64, oneshot::Sender<Result<()>>>,
    steer_id: u64,
    /// Prefix of this session's event IDs (see [`EventId::in_sequence`]).
    event_prefix: String,
    /// The time of the current wake-up, shared by the events it sequences.
    clock: Option<Timestamp>,
    span: Span,
}

impl Actor {
    pub(crate) fn new(parts: ActorParts) -> Self {
        let mut actor = Actor {
            pending: WriteBatch::new(parts.session.id.clone()),
            session: parts.session,
            options: parts.options,
            provider: parts.provider,
            capabilities: parts.capabilities,
            state: SessionState::Idle,
            durability: parts.durability,
            provider_session_id: parts.provider_session_id,
            snapshot: parts.snapshot,
            current: None,
            generation: 0,
            completed: HashMap::new(),
            completed_order: VecDeque::new(),
            pruned: false,
            requests: HashMap::new(),
            waiters: HashMap::new(),
            store: parts.store,
            home_store: parts.home_store,
            next_seq: 1,
            published_seq: 0,
            after_commit: Vec::new(),
            flush: None,
            ring: VecDeque::new(),
            last_evicted: None,
            used_turn_ids: HashSet::new(),
            live: None,
            commands: parts.commands,
            sink: parts.sink,
            sink_open: true,
            early_messages: parts.early_messages,
            tasks: JoinSet::new(),
            admission: None,
            transport_lost: None,
            watchdog: Watchdog::default(),
            exit: parts.exit,
            registry: parts.registry,
            attempt: parts.attempt,
            exiting: None,
            stale_frames: 0,
            steering: HashMap::new(),
            steer_id: 0,
            event_prefix: EventId::generate().to_string(),
            clock: None,
            span: parts.span,
        };
        for event in parts.initial_events {
            actor.next_seq = event.seq + 1;
            actor.publish(event);
        }
        actor
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
                self.clock = None;
                if let Some(reason) = self.exiting.take() {
                    self.shutdown(reason).await;
                    return;
                }
                self.start_flush();
                tokio::select! {
                    biased;
                    flushed = wait_flush(&mut self.flush), if self.flush.is_some() => {
                        self.flush = None;
                        self.on_flushed(flushed);
                    }
                    admitted = wait_admission(&mut self.admission), if self.admission.is_some() => {
                        self.admission = None;
                        if let Some((turn, generation, result)) = admitted {
                            self.on_admission(turn, generation, result);
                        }
                    }
                    Some(done) = self.tasks.join_next(), if !self.tasks.is_empty() => {
                        if let Ok(done) = done {
                            self.on_task(done);
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
            Command::Respond { request, response, reply } => self.respond(request, response, reply),
            Command::Cancel { turn, reason, reply } => self.cancel(turn, reason, reply),
            Command::Steer { turn, input, reply } => self.steer(turn, input, reply),
            Command::Stop { force, reply } => self.stop(force, reply),
        }
    }

    fn status(&self) -> SessionStatus {
        let mut pending: Vec<Request> = self
            .requests
            .values()
            .filter(|e| e.request.status == RequestStatus::Pending)
            .map(|e| e.request.clone())
            .collect();
        pending.sort_by(|a, b| a.created_at.cmp(&b.created_at).then_with(|| a.id.cmp(&b.id)));
        SessionStatus {
            session: self.session.clone(),
            status: self.state,
            durability: self.durability.clone(),
            provider_session_id: self.provider_session_id.clone(),
            current_turn: self.current.as_ref().map(|c| c.turn.clone()),
            pending_requests: pending,
            last_seq: self.published_seq,
        }
    }

    fn unavailable(&self) -> Error {
        Error::SessionUnavailable {
            id: self.session.id.clone(),
            reason: "the provider transport is down or was retired".into(),
        }
    }

    fn start_turn(
        &mut self,
        mut turn: Turn,
        options: crate::options::TurnOptions,
        reply: oneshot::Sender<Result<Turn>>,
    ) {
        match (self.state, &self.current) {
            (SessionState::Idle, None) => {}
            (SessionState::Unavailable, _) => {
                let _ = reply.send(Err(self.unavailable()));
                return;
            }
            (_, Some(current)) => {
                let _ = reply.send(Err(Error::TurnInProgress { current: Box::new(current.turn.clone()) }));
                return;
            }
            (_, None) => {
                let _ = reply.send(Err(self.unavailable()));
                return;
            }
        }
        if options.id.is_some() && self.used_turn_ids.contains(&turn.id) {
            let _ = reply.send(Err(Error::TurnIdAlreadyUsed { turn_id: turn.id }));
            return;
        }
        if let Some(capability) = self.missing_input_capability(&turn.input) {
            let _ = reply.send(Err(Error::Unsupported { provider: self.session.provider.clone(), capability }));
            return;
        }
        self.generation += 1;
        turn.status = TurnStatus::Starting;
        self.used_turn_ids.insert(turn.id.clone());
        let span = tracing::info_span!(parent: &self.span, "turn", turn_id = %turn.id);
        span.in_scope(|| tracing::debug!("turn recorded"));
        self.current = Some(ActiveTurn {
            turn: turn.clone(),
            generation: self.generation,
            admitted: false,
            admitting: false,
            cancel: CancelState::None,
            inactivity: options.inactivity_timeout.or(self.options.turn_inactivity_timeout),
            stalled: None,
            deferred: Vec::new(),
            options: Some(options),
            span,
        });
        self.state = SessionState::Starting;
        self.record_turn(&turn);
        self.record_snapshot();
        let turn_id = turn.id.clone();
        self.after_commit(AfterCommit::Reply(Box::new(move |committed| {
            let _ = reply.send(committed.map(|()| turn));
        })));
        self.after_commit(AfterCommit::Admit { turn: turn_id, generation: self.generation });
    }

    /// The capability structured input needs that the session lacks, if any.
    fn missing_input_capability(&self, input: &crate::turn::TurnInput) -> Option<crate::capabilities::Capability> {
        use crate::capabilities::Capability;
        use crate::turn::{InputItem, TurnInput};
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
            self.finish_current(
                EventKind::terminal(TurnStatus::Failed, result),
                None,
                ExpiryReason::TurnEnded,
                EndCause::TransportLost,
            );
            return;
        }
        let Some(current) = self.current.as_mut() else { return };
        current.admitting = true;
        let options = current.options.take().unwrap_or_default();
        let start = TurnStart { turn: current.turn.clone(), options };
        let provider = Arc::clone(&self.provider);
        let timeout = self.options.turn_start_timeout;
        let span = tracing::info_span!(parent: &current.span, "provider_command", command = "start_turn");
        self.admission = Some(tokio::spawn(
            async move {
                let result = bounded("turn admission", timeout, provider.start_turn(start)).await;
                (turn_id, generation, result)
            }
            .instrument(span),
        ));
    }

    fn subscribe(&mut self, turn: Option<TurnId>, replay: Replay, for_stream: bool) -> Result<Lookup<Grant>> {
        let after = replay.after();
        // `After(seq)` promises every event after `seq`; `Start` serves what is retained.
        let exact = matches!(replay, Replay::After(_));
        let finished_at = match &turn {
            None => None,
            Some(t) if self.current.as_ref().is_some_and(|c| &c.turn.id == t) => None,
            Some(t) => match self.completed.get(t) {
                // Sequenced but not yet committed: it arrives live.
                Some(done) if done.terminal.seq > self.published_seq => None,
                Some(done) => Some(done.terminal.seq),
                None => match self.ring_terminal(t) {
                    Some(terminal) => Some(terminal.seq),
                    None => return Ok(Lookup::NotHere { pruned: self.pruned, store: self.store.clone() }),
                },
            },
        };
        let exit = self.exit.subscribe();
        if let Some(terminal_seq) = finished_at {
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
                return Ok(Lookup::Found(Grant::empty(self.published_seq, exit)));
            };
            let buffered = self.buffered(after, terminal_seq, turn.as_ref());
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
                self.check_retained(turn.as_ref(), after, exact)?;
            }
            let grant = Grant { rx: None, live_from: terminal_seq, store_replay, buffered, store: None, exit };
            return Ok(Lookup::Found(grant));
        }
        let (buffered, store_replay) = match after {
            None => (Vec::new(), None),
            Some(after) => {
                let store_replay = match &self.store {
                    Some(store) if !self.ring_covers(after) => Some((Arc::clone(store), self.published_seq)),
                    _ => None,
                };
                if store_replay.is_none() {
                    self.check_retained(turn.as_ref(), after, exact)?;
                }
                (self.buffered(after, self.published_seq, turn.as_ref()), store_replay)
            }
        };
        // Sized like the replay buffer: a subscriber that falls further behind catches up from
        // the store, or without one gets `Lagged`.
        let capacity = self.options.event_buffer_size;
        let rx = self.live.get_or_insert_with(|| broadcast::channel(capacity).0).subscribe();
        let store = self.store.clone();
        Ok(Lookup::Found(Grant { rx: Some(rx), live_from: self.published_seq, store_replay, buffered, store, exit }))
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

    /// A finished turn's terminal event, if the ring still holds it.
    fn ring_terminal(&self, turn: &TurnId) -> Option<&Arc<Event>> {
        self.ring.iter().rev().find(|e| e.is_terminal() && e.turn_id.as_ref() == Some(turn))
    }

    fn await_turn(&mut self, turn: TurnId) -> Lookup<AwaitGrant> {
        if self.current.as_ref().is_some_and(|c| c.turn.id == turn) {
            return Lookup::Found(AwaitGrant::Wait(self.waiter(turn)));
        }
        match self.completed.get(&turn) {
            Some(done) if done.terminal.seq <= self.published_seq => {
                Lookup::Found(AwaitGrant::Done(Arc::clone(&done.terminal)))
            }
            Some(_) => Lookup::Found(AwaitGrant::Wait(self.waiter(turn))),
            None => match self.ring_terminal(&turn) {
                Some(terminal) => Lookup::Found(AwaitGrant::Done(Arc::clone(terminal))),
                None => Lookup::NotHere { pruned: self.pruned, store: self.store.clone() },
            },
        }
    }

    fn waiter(&mut self, turn: TurnId) -> oneshot::Receiver<Arc<Event>> {
        let (tx, rx) = oneshot::channel();
        self.waiters.entry(turn).or_default().push(tx);
        rx
    }

    fn respond(&mut self, request_id: RequestId, response: Response, reply: oneshot::Sender<Result<()>>) {
        let Some(entry) = self.requests.get_mut(&request_id) else {
            let _ = reply.send(Err(Error::RequestNotFound { session_id: self.session.id.clone(), request_id }));
            return;
        };
        let error = match entry.request.status {
            RequestStatus::Resolved => Some(Error::AlreadyResolved { request_id: request_id.clone() }),
            RequestStatus::Expired => Some(Error::RequestExpired { request_id: request_id.clone() }),
            RequestStatus::Pending if entry.claim.is_some() => {
                Some(Error::ResponseInProgress { request_id: request_id.clone() })
            }
            RequestStatus::Pending => response.validate_for(&entry.request).err(),
        };
        if let Some(error) = error {
            let _ = reply.send(Err(error));
            return;
        }
        let request = entry.request.clone();
        entry.claim = Some(Claim { response: response.clone(), reply: Some(reply) });
        self.spawn_respond(request, response);
    }

    fn spawn_respond(&mut self, request: Request, response: Response) {
        let provider = Arc::clone(&self.provider);
        let timeout = self.options.provider_command_timeout;
        let span = tracing::info_span!(
            parent: &self.span,
            "provider_command",
            command = "respond",
            request_id = %request.id,
            kind = %request.kind,
            action = %response.action(),
        );
        self.tasks.spawn(
            async move {
                let result = bounded("respond", timeout, provider.respond(&request, &response)).await;
                TaskDone::Responded { request: request.id, result }
            }
            .instrument(span),
        );
    }

    fn cancel(&mut self, turn: TurnId, reason: Option<String>, reply: oneshot::Sender<Result<()>>) {
        let Some(current) = self.current.as_ref().filter(|c| c.turn.id == turn) else {
            let _ = reply.send(Err(Error::TurnNotActive { turn_id: turn }));
            return;
        };
        if !matches!(current.cancel, CancelState::None) {
            let _ = reply.send(Ok(()));
            return;
        }
        self.request_cancel(turn, reason);
        // The intent is acted on whether or not it was stored: a store failure that stops the
        // session interrupts the turn anyway.
        self.after_commit(AfterCommit::Reply(Box::new(move |_| {
            let _ = reply.send(Ok(()));
        })));
    }

    /// Records the intent to cancel the current turn `turn` (which is not cancelling yet) and
    /// schedules the provider's cancel once the turn is admitted.
    fn request_cancel(&mut self, turn: TurnId, reason: Option<String>) {
        let Some(current) = self.current.as_mut().filter(|c| c.turn.id == turn) else { return };
        let admitted = current.admitted;
        current.cancel = if admitted { CancelState::Sent } else { CancelState::Requested };
        current.turn.status = TurnStatus::Cancelling;
        let turn_snapshot = current.turn.clone();
        if admitted {
            self.spawn_cancel(turn.clone());
        }
        self.state = SessionState::Cancelling;
        self.record_turn(&turn_snapshot);
        self.record_snapshot();
        self.emit(Some(turn.clone()), EventKind::CancelRequested { reason }, None);
        self.expire_pending(&turn, ExpiryReason::Cancelled);
    }

    fn steer(&mut self, turn: TurnId, input: crate::turn::TurnInput, reply: oneshot::Sender<Result<()>>) {
        let running =
            self.current.as_ref().filter(|c| c.turn.id == turn && c.admitted && matches!(c.cancel, CancelState::None));
        let Some(current) = running else {
            let _ = reply.send(Err(Error::TurnNotActive { turn_id: turn }));
            return;
        };
        if !self.capabilities.steer.is_available() {
            let provider = self.session.provider.clone();
            let _ =
                reply.send(Err(Error::Unsupported { provider, capability: crate::capabilities::Capability::Steer }));
            return;
        }
        let provider = Arc::clone(&self.provider);
        let timeout = self.options.provider_command_timeout;
        let span = tracing::info_span!(parent: &current.span, "provider_command", command = "steer");
        self.steer_id += 1;
        let id = self.steer_id;
        self.steering.insert(id, reply);
        self.tasks.spawn(
            async move {
                let result = bounded("steer", timeout, provider.steer(&turn, &input)).await;
                TaskDone::Steered { id, turn, result }
            }
            .instrument(span),
        );
    }

    fn spawn_cancel(&mut self, turn: TurnId) {
        let provider = Arc::clone(&self.provider);
        let timeout = self.options.provider_command_timeout;
        let span = tracing::info_span!(parent: &self.span, "provider_command", command = "cancel", turn_id = %turn);
        self.tasks.spawn(
            async move {
                let result = bounded("cancel", timeout, provider.cancel(&turn)).await;
                TaskDone::Cancelled { turn, result }
            }
            .instrument(span),
        );
    }

    fn stop(&mut self, force: bool, reply: oneshot::Sender<Result<()>>) {
        if let Some(current) = &self.current
            && !force
        {
            let _ = reply.send(Err(Error::TurnInProgress { current: Box::new(current.turn.clone()) }));
            return;
        }
        let reason = if force { CloseReason::ForcedStop } else { CloseReason::Stopped };
        self.close(reason);
        let _ = reply.send(Ok(()));
    }

    /// Ends the session: interrupts an active turn, records `session_closed`, and exits.
    fn close(&mut self, reason: CloseReason) {
        if self.exiting.is_some() || self.state == SessionState::Closed {
            return;
        }
        self.tasks.abort_all();
        self.abort_admission();
        self.watchdog.disarm();
        if let Some(lost) = self.transport_lost.take() {
            self.emit(None, EventKind::TransportError { reason: lost }, None);
        }
        if self.current.is_some() {
            let why = match reason {
                CloseReason::ForcedStop => "forced session stop",
                CloseReason::HarnessShutdown => "harness shut down",
                CloseReason::StoreFailed => "store failed",
                _ => "session closed",
            };
            let cause = match reason {
                CloseReason::ForcedStop => EndCause::ForcedStop,
                CloseReason::StoreFailed => EndCause::StoreFailed,
                _ => EndCause::HarnessShutdown,
            };
            self.finish_current(
                EventKind::terminal(TurnStatus::Interrupted, TurnResult::reason(why)),
                None,
                ExpiryReason::SessionClosed,
                cause,
            );
        }
        self.state = SessionState::Closed;
        self.record_snapshot();
        self.emit(None, EventKind::SessionClosed { reason: reason.clone() }, None);
        self.exiting = Some(ExitReason::Closed { reason });
    }

    // ----- task results ------------------------------------------------------------------------

    fn on_task(&mut self, done: TaskDone) {
        match done {
            TaskDone::Responded { request, result } => self.on_responded(request, result),
            TaskDone::Cancelled { turn, result } => {
                let Some(current) = self.current.as_ref().filter(|c| c.turn.id == turn) else { return };
                if let Err(error) = result {
                    let reason = match &current.stalled {
                        Some(stalled) => format!("{stalled}; cancellation failed: {error}"),
                        None => format!("cancellation failed: {error}"),
                    };
                    self.retire(reason);
                }
            }
            TaskDone::Steered { id, turn, result } => {
                let Some(reply) = self.steering.remove(&id) else { return };
                match result {
                    Err(error) if !error.is_definite() => {
                        let reason = format!("steering outcome is uncertain: {error}");
                        let _ = reply.send(Err(error));
                        if self.current.as_ref().is_some_and(|c| c.turn.id == turn) {
                            self.retire(reason);
                        }
                    }
                    result => {
                        let _ = reply.send(result);
                    }
                }
            }
            TaskDone::RequestDeadline { request } => self.on_request_deadline(request),
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
        current.admitting = false;
        match result {
            Ok(admission) => {
                current.admitted = true;
                current.turn.started_at = Some(Timestamp::now());
                let cancel_now = matches!(current.cancel, CancelState::Requested);
                if cancel_now {
                    current.cancel = CancelState::Sent;
                } else {
                    current.turn.status = TurnStatus::Running;
                }
                let turn = current.turn.clone();
                let deferred = std::mem::take(&mut current.deferred);
                let watch = current.inactivity.filter(|_| !cancel_now && lost.is_none());
                if cancel_now {
                    self.spawn_cancel(turn_id.clone());
                } else if lost.is_none() {
                    self.state = SessionState::Running;
                }
                self.record_turn(&turn);
                self.record_snapshot();
                self.emit(
                    Some(turn_id.clone()),
                    EventKind::TurnStarted { provider_turn_id: admission.provider_turn_id },
                    None,
                );
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
                self.finish_current(
                    EventKind::terminal(TurnStatus::Failed, result),
                    None,
                    ExpiryReason::TurnEnded,
                    EndCause::Rejected,
                );
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
            Fired::Inactive { timeout } => {
                if !matches!(current.cancel, CancelState::None) {
                    // Already cancelling: the cancel's own deadline applies.
                    return;
                }
                let waiting = self
                    .requests
                    .values()
                    .any(|e| e.request.turn_id == turn && e.request.status == RequestStatus::Pending);
                if waiting {
                    // The turn waits on the host, not on the provider.
                    self.watchdog.rewatch(timeout);
                    return;
                }
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

    fn on_responded(&mut self, request_id: RequestId, result: Result<()>) {
        let current_turn = self.current.as_ref().map(|c| c.turn.id.clone());
        let Some(entry) = self.requests.get_mut(&request_id) else { return };
        let Some(claim) = entry.claim.take() else { return };
        let live =
            entry.request.status == RequestStatus::Pending && current_turn.as_ref() == Some(&entry.request.turn_id);
        match result {
            Ok(()) if !live => {
                if let Some(reply) = claim.reply {
                    let _ = reply.send(Err(Error::RequestExpired { request_id }));
                }
            }
            Ok(()) => {
                if let Some(deadline) = entry.deadline.take() {
                    deadline.abort();
                }
                let turn = entry.request.turn_id.clone();
                match claim.reply {
                    Some(reply) => {
                        // Answers to masked questions reach the provider but are never recorded.
                        let recorded = if entry.request.has_secret_question() {
                            claim.response.redacted()
                        } else {
                            claim.response
                        };
                        entry.request.status = RequestStatus::Resolved;
                        entry.request.response = Some(recorded.clone());
                        if let Some(span) = entry.span.take() {
                            span.in_scope(|| tracing::debug!(action = %recorded.action(), "request resolved"));
                        }
                        let request = entry.request.clone();
                        self.record_request(&request);
                        self.emit(
                            Some(turn.clone()),
                            EventKind::RequestResolved { request_id, response: Box::new(recorded) },
                            None,
                        );
                        // The provider has the answer: delivery is the fact the caller needs.
                        self.after_commit(AfterCommit::Reply(Box::new(move |_| {
                            let _ = reply.send(Ok(()));
                        })));
                    }
                    None => self.expire_request(&request_id, ExpiryReason::Timeout, None),
                }
                self.after_request_change(&turn);
            }
            Err(error) if error.is_definite() => match claim.reply {
                Some(reply) => {
                    let _ = reply.send(Err(error));
                }
                None => {
                    tracing::warn!(%error, "provider refused the deadline denial; expiring the request locally");
                    let turn = entry.request.turn_id.clone();
                    self.expire_request(&request_id, ExpiryReason::Timeout, None);
                    self.after_request_change(&turn);
                }
            },
            Err(error) => {
                let reason = format!("response delivery is uncertain: {error}");
                if let Some(reply) = claim.reply {
                    let _ = reply.send(Err(error));
                }
                self.retire(reason);
            }
        }
    }

    fn on_request_deadline(&mut self, request_id: RequestId) {
        let Some(entry) = self.requests.get_mut(&request_id) else { return };
        entry.deadline = None;
        if entry.request.status != RequestStatus::Pending || entry.claim.is_some() {
            return;
        }
        let response = Response::deny("the request timed out");
        entry.claim = Some(Claim { response: response.clone(), reply: None });
        let request = entry.request.clone();
        self.spawn_respond(request, response);
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
                let found = self.requests.iter().find(|(_, e)| {
                    e.request.provider_ref == provider_ref && e.request.status == RequestStatus::Pending
                });
                // A response of ours is in flight: its acknowledgement decides the outcome.
                if let Some((id, entry)) = found.filter(|(_, e)| e.claim.is_none()) {
                    let (id, turn) = (id.clone(), entry.request.turn_id.clone());
                    self.expire_request(&id, ExpiryReason::ProviderResolved, raw);
                    self.after_request_change(&turn);
                }
            }
            ProviderMessage::SessionUpdated { provider_session_id, raw } => {
                self.provider_session_id = provider_session_id.clone();
                self.record_snapshot();
                self.emit(None, EventKind::SessionUpdated { provider_session_id }, raw);
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
            None if kind.is_terminal() => {
                tracing::warn!("provider emitted a terminal event without a turn; dropped");
            }
            None => {
                self.emit(None, kind, raw);
            }
            Some(turn) => {
                if self.current.as_ref().is_none_or(|c| c.turn.id != turn) {
                    self.stale_frames += 1;
                    return;
                }
                if kind.is_terminal() {
                    self.finish_current(kind, raw, ExpiryReason::TurnEnded, EndCause::Provider);
                } else {
                    self.emit(Some(turn), kind, raw);
                }
            }
        }
    }

    fn create_request(&mut self, turn: TurnId, spec: crate::request::RequestSpec, raw: Option<RawJson>) {
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
        let deadline = timeout.map(|timeout| {
            let id = request.id.clone();
            self.tasks.spawn(async move {
                tokio::time::sleep(timeout).await;
                TaskDone::RequestDeadline { request: id }
            })
        });
        let parent = self.current.as_ref().map_or(&self.span, |c| &c.span);
        let span = tracing::info_span!(parent: parent, "request", request_id = %request.id, kind = %request.kind);
        span.in_scope(|| tracing::debug!("request created"));
        let entry = RequestEntry { request: request.clone(), claim: None, deadline, span: Some(span) };
        self.requests.insert(request.id.clone(), entry);
        self.record_request(&request);
        if let Some(current) = self.current.as_mut()
            && current.turn.status == TurnStatus::Running
        {
            current.turn.status = TurnStatus::AwaitingInput;
        }
        if self.state == SessionState::Running {
            self.state = SessionState::AwaitingInput;
        }
        self.record_snapshot();
        self.emit(Some(turn), EventKind::RequestCreated(Box::new(request)), raw);
    }

    /// Moves the session between running and awaiting input after a request was settled.
    fn after_request_change(&mut self, turn: &TurnId) {
        let waiting =
            self.requests.values().any(|e| &e.request.turn_id == turn && e.request.status == RequestStatus::Pending);
        if let Some(current) = self.current.as_mut().filter(|c| &c.turn.id == turn) {
            let (turn_status, session_state) = match (&current.cancel, waiting) {
                (CancelState::None, true) => (TurnStatus::AwaitingInput, SessionState::AwaitingInput),
                (CancelState::None, false) => (TurnStatus::Running, SessionState::Running),
                _ => (TurnStatus::Cancelling, SessionState::Cancelling),
            };
            if current.admitted {
                current.turn.status = turn_status;
                if self.state != session_state {
                    self.state = session_state;
                    self.record_snapshot();
                }
            }
        }
    }

    fn expire_request(&mut self, request_id: &RequestId, reason: ExpiryReason, raw: Option<RawJson>) {
        let Some(entry) = self.requests.get_mut(request_id) else { return };
        if entry.request.status != RequestStatus::Pending {
            return;
        }
        if let Some(deadline) = entry.deadline.take() {
            deadline.abort();
        }
        entry.request.status = RequestStatus::Expired;
        if let Some(span) = entry.span.take() {
            span.in_scope(|| tracing::debug!(?reason, "request expired"));
        }
        entry.request.metadata.insert("expiration_reason".into(), serde_json::to_value(reason).unwrap_or_default());
        let request = entry.request.clone();
        self.record_request(&request);
        self.emit(
            Some(request.turn_id.clone()),
            EventKind::RequestExpired { request_id: request_id.clone(), reason },
            raw,
        );
    }

    /// Expires every pending request of `turn`, oldest first.
    fn expire_pending(&mut self, turn: &TurnId, reason: ExpiryReason) {
        let mut pending: Vec<(Timestamp, RequestId)> = self
            .requests
            .values()
            .filter(|e| &e.request.turn_id == turn && e.request.status == RequestStatus::Pending)
            .map(|e| (e.request.created_at, e.request.id.clone()))
            .collect();
        pending.sort();
        for (_, id) in pending {
            self.expire_request(&id, reason, None);
        }
    }

    /// Ends the current turn with a terminal `kind`: pending requests expire first, then the
    /// terminal event is sequenced and the session becomes idle (unless it is going away).
    fn finish_current(&mut self, mut kind: EventKind, raw: Option<RawJson>, expiry: ExpiryReason, cause: EndCause) {
        let Some(mut current) = self.current.take() else { return };
        // The provider ending a turn the caller (or the watchdog) asked to stop is that stop.
        let cause = match (cause, &current.cancel, &current.stalled) {
            (EndCause::Provider | EndCause::Uncertain, _, Some(_)) => EndCause::Stalled,
            (EndCause::Provider, CancelState::Requested | CancelState::Sent, None) => EndCause::Cancel,
            (cause, ..) => cause,
        };
        if let Some(end) = kind.terminal_end_mut() {
            end.result.ended_by = Some(cause);
        }
        self.watchdog.disarm();
        let turn_id = current.turn.id.clone();
        let end = kind.terminal_end().cloned();
        self.expire_pending(&turn_id, expiry);
        let (status, result) = match end {
            Some(end) => (end.status, end.result),
            None => (TurnStatus::Failed, TurnResult::default()),
        };
        current.turn.status = status;
        current.turn.finished_at = Some(Timestamp::now());
        current.turn.result = Some(result);
        let turn = current.turn;
        current.span.in_scope(|| tracing::info!(status = ?status, "turn finished"));
        if matches!(
            self.state,
            SessionState::Starting | SessionState::Running | SessionState::AwaitingInput | SessionState::Cancelling
        ) {
            self.state = SessionState::Idle;
        }
        self.record_turn(&turn);
        self.record_snapshot();
        let terminal = self.emit(Some(turn_id.clone()), kind, raw);
        self.completed.insert(turn_id.clone(), CompletedTurn { turn, terminal });
        self.completed_order.push_back(turn_id);
        self.evict_completed();
    }

    fn evict_completed(&mut self) {
        let limit = match self.options.effective_cache_size() {
            CacheSize::Unbounded => return,
            CacheSize::Bounded(limit) => limit,
        };
        while self.completed_order.len() > limit {
            let Some(oldest) = self.completed_order.front() else { break };
            let unpublished = self.completed.get(oldest).is_some_and(|c| c.terminal.seq > self.published_seq);
            if unpublished {
                break;
            }
            let oldest = self.completed_order.pop_front().expect("front exists");
            if let Some(done) = self.completed.remove(&oldest) {
                tracing::trace!(turn_id = %done.turn.id, "completed turn evicted from the cache");
            }
            self.requests.retain(|_, e| e.request.turn_id != oldest);
            self.pruned = true;
        }
    }

    fn transport_down(&mut self, reason: String) {
        if matches!(self.state, SessionState::Unavailable | SessionState::Closed) || self.exiting.is_some() {
            return;
        }
        tracing::warn!(%reason, "provider transport down");
        self.abort_commands();
        self.watchdog.disarm();
        if self.admission.is_some() {
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
        self.emit(turn, EventKind::TransportError { reason: reason.clone() }, None);
        if self.current.is_some() {
            self.finish_current(
                EventKind::terminal(TurnStatus::Failed, TurnResult::reason(reason)),
                None,
                ExpiryReason::TurnEnded,
                EndCause::TransportLost,
            );
        }
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
        self.emit(Some(turn), EventKind::TurnStarted { provider_turn_id: None }, None);
        for message in held {
            self.on_provider(message);
        }
    }

    /// Stops waiting for a turn admission.
    fn abort_admission(&mut self) {
        if let Some(admission) = self.admission.take() {
            admission.abort();
        }
        if let Some(current) = self.current.as_mut() {
            current.admitting = false;
        }
    }

    /// Gives in-flight provider commands (all but an admission) a definite answer: the session
    /// cannot deliver them.
    fn abort_commands(&mut self) {
        self.tasks.abort_all();
        let id = self.session.id.clone();
        for (_, reply) in self.steering.drain() {
            let _ = reply.send(Err(Error::SessionUnavailable {
                id: id.clone(),
                reason: "the provider transport went down during the steer".into(),
            }));
        }
        for entry in self.requests.values_mut() {
            if let Some(claim) = entry.claim.take()
                && let Some(reply) = claim.reply
            {
                let _ = reply.send(Err(Error::SessionUnavailable {
                    id: id.clone(),
                    reason: "the provider transport went down during the response".into(),
                }));
            }
            entry.deadline = None;
        }
    }

    /// Retires the session after an uncertain provider outcome: the active turn fails, the
    /// session becomes unavailable, and the runtime exits.
    fn retire(&mut self, reason: String) {
        if self.exiting.is_some() {
            return;
        }
        tracing::warn!(%reason, "retiring session");
        self.abort_commands();
        self.abort_admission();
        self.watchdog.disarm();
        if let Some(lost) = self.transport_lost.take() {
            self.emit(None, EventKind::TransportError { reason: lost }, None);
        }
        self.release_held_frames();
        if self.current.is_some() {
            self.finish_current(
                EventKind::terminal(TurnStatus::Failed, TurnResult::reason(reason.clone())),
                None,
                ExpiryReason::TurnEnded,
                EndCause::Uncertain,
            );
        }
        self.state = SessionState::Unavailable;
        self.record_snapshot();
        self.exiting = Some(ExitReason::Retired { reason });
    }

    // ----- journal ------------------------------------------------------------------------------

    /// Sequences an event. With a store it is published after its batch commits; without one,
    /// at once.
    fn emit(&mut self, turn: Option<TurnId>, kind: EventKind, raw: Option<RawJson>) -> Arc<Event> {
        let seq = self.next_seq;
        self.next_seq += 1;
        let at = *self.clock.get_or_insert_with(Timestamp::now);
        let event = Arc::new(Event {
            schema_version: SCHEMA_VERSION,
            id: EventId::in_sequence(&self.event_prefix, seq),
            seq,
            session_id: self.session.id.clone(),
            turn_id: turn,
            provider: self.session.provider.clone(),
            at,
            kind,
            raw,
        });
        if self.store.is_some() {
            self.pending.events.push(Arc::clone(&event));
        } else {
            self.publish(Arc::clone(&event));
        }
        event
    }

    fn publish(&mut self, event: Arc<Event>) {
        self.published_seq = event.seq;
        if self.ring.len() == self.options.event_buffer_size
            && let Some(evicted) = self.ring.pop_front()
            && let Some(turn) = &evicted.turn_id
        {
            match &mut self.last_evicted {
                // The common case, a long turn: no ID clone per eviction.
                Some((last, seq)) if last == turn => *seq = evicted.seq,
                last => *last = Some((turn.clone(), evicted.seq)),
            }
        }
        self.ring.push_back(Arc::clone(&event));
        if event.is_terminal()
            && let Some(turn) = &event.turn_id
        {
            for waiter in self.waiters.remove(turn).unwrap_or_default() {
                let _ = waiter.send(Arc::clone(&event));
            }
        }
        if let Some(live) = &self.live
            && live.send(event).is_err()
        {
            // Every subscription is gone.
            self.live = None;
        }
        if !self.completed_order.is_empty() {
            self.evict_completed();
        }
    }

    fn record_turn(&mut self, turn: &Turn) {
        if self.store.is_some() {
            self.pending.turns.push(turn.clone());
        }
    }

    fn record_request(&mut self, request: &Request) {
        if self.store.is_some() {
            self.pending.requests.push(request.clone());
        }
    }

    fn record_snapshot(&mut self) {
        self.snapshot.status = self.state;
        self.snapshot.provider_session_id = self.provider_session_id.clone();
        self.snapshot.current_turn_id = self.current.as_ref().map(|c| c.turn.id.clone());
        self.snapshot.updated_at = Timestamp::now();
        // The caller acknowledged the hand-off before the actor started.
        self.snapshot.startup = None;
        if self.store.is_some() {
            self.pending.snapshot = Some(self.snapshot.clone());
        }
    }

    fn after_commit(&mut self, action: AfterCommit) {
        if self.store.is_some() {
            self.after_commit.push(action);
        } else {
            self.run_after_commit(action, None);
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

    /// Starts writing the pending batch if no write is in flight.
    fn start_flush(&mut self) {
        if self.flush.is_some() {
            return;
        }
        let Some(store) = self.store.clone() else {
            for action in std::mem::take(&mut self.after_commit) {
                self.run_after_commit(action, None);
            }
            return;
        };
        if self.pending.is_empty() {
            for action in std::mem::take(&mut self.after_commit) {
                self.run_after_commit(action, None);
            }
            return;
        }
        let batch = std::mem::replace(&mut self.pending, WriteBatch::new(self.session.id.clone()));
        let actions = std::mem::take(&mut self.after_commit);
        let span = tracing::debug_span!(parent: &self.span, "store_write", events = batch.events.len());
        self.flush = Some(tokio::spawn(
            async move {
                // A panicking store is a failed write, not a lost batch.
                let result = write_batch(&store, &batch).await;
                (batch, actions, result)
            }
            .instrument(span),
        ));
    }

    fn on_flushed(&mut self, flushed: (WriteBatch, Vec<AfterCommit>, std::result::Result<(), StoreError>)) {
        let (batch, actions, result) = flushed;
        if let Err(error) = result {
            self.store_failed(error, batch, actions);
            return;
        }
        for event in batch.events {
            self.publish(event);
        }
        for action in actions {
            self.run_after_commit(action, None);
        }
    }

    /// A write failed: the batch's events are delivered live, marked by `store_failed`, and the
    /// session continues without a store (`Degrade`) or ends (`Stop`).
    fn store_failed(&mut self, error: StoreError, batch: WriteBatch, actions: Vec<AfterCommit>) {
        let reason = error.to_string();
        let policy = self.options.store_failure;
        tracing::error!(%reason, ?policy, "store write failed");
        self.store = None;
        self.durability = Durability::Degraded { reason: reason.clone(), at: Timestamp::now() };
        let later = std::mem::replace(&mut self.pending, WriteBatch::new(self.session.id.clone()));
        for event in batch.events.into_iter().chain(later.events) {
            self.publish(event);
        }
        let turn = self.current.as_ref().map(|c| c.turn.id.clone());
        self.emit(turn, EventKind::StoreFailed { reason: reason.clone(), policy }, None);
        let later_actions = std::mem::take(&mut self.after_commit);
        let stopping = policy == StoreFailurePolicy::Stop;
        for action in actions.into_iter().chain(later_actions) {
            self.run_after_commit(action, stopping.then_some(&error));
        }
        if stopping && self.exiting.is_none() {
            self.close(CloseReason::StoreFailed);
            self.exiting = Some(ExitReason::StoreFailed { reason });
        }
    }

    /// Final flush, provider close, deregistration. Waits on I/O: nothing else runs any more.
    async fn shutdown(mut self, reason: ExitReason) {
        self.tasks.abort_all();
        self.abort_admission();
        // The final snapshot records how the session ended.
        self.state = SessionState::Closed;
        self.snapshot.ended = Some(reason.clone());
        self.snapshot.durability = self.durability.clone();
        self.record_snapshot();
        for _ in 0..3 {
            if let Some(flush) = self.flush.take() {
                let flushed = wait_flush(&mut Some(flush)).await;
                self.on_flushed(flushed);
            }
            self.start_flush();
            if self.flush.is_none() {
                break;
            }
        }
        let finalize = self.options.startup_finalization_timeout;
        if self.store.is_none()
            && let Some(home) = &self.home_store
        {
            // A session that degraded still offers its end to its store, so that its stored
            // snapshot never reads back as running (its history there stays incomplete, and the
            // snapshot says so in `durability`).
            let mut batch = WriteBatch::new(self.session.id.clone());
            batch.snapshot = Some(self.snapshot.clone());
            match tokio::time::timeout(finalize, write_batch(home, &batch)).await {
                Ok(Ok(())) => tracing::debug!("final snapshot of a degraded session stored"),
                Ok(Err(error)) => tracing::warn!(%error, "the final snapshot could not be stored"),
                Err(_) => tracing::warn!(?finalize, "storing the final snapshot timed out"),
            }
        }
        let closing = self.provider.close();
        if tokio::time::timeout(finalize, closing).await.is_err() {
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

async fn wait_flush(flush: &mut Option<Flush>) -> (WriteBatch, Vec<AfterCommit>, std::result::Result<(), StoreError>) {
    let handle = flush.as_mut().expect("guarded by is_some");
    match handle.await {
        Ok(done) => done,
        // The write task catches panics and is never aborted, so this is the Tokio runtime
        // shutting down under the session: nothing is left to publish to.
        Err(_) => (WriteBatch::default(), Vec::new(), Err(StoreError::Backend("the store write was cancelled".into()))),
    }
}

/// Waits for the admission task; `None` when it was aborted (the turn is handled elsewhere).
async fn wait_admission(
    admission: &mut Option<JoinHandle<(TurnId, u64, Result<Admission>)>>,
) -> Option<(TurnId, u64, Result<Admission>)> {
    let handle = admission.as_mut().expect("guarded by is_some");
    handle.await.ok()
}

/// Runs a provider call under a deadline; a missed deadline is an uncertain outcome.
/// A panic inside the provider is an uncertain outcome too.
async fn bounded<T>(
    operation: &'static str,
    timeout: Duration,
    call: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    match std::panic::AssertUnwindSafe(tokio::time::timeout(timeout, call)).catch_unwind().await {
        Ok(Ok(result)) => result,
        Ok(Err(_)) => Err(Error::Timeout { operation, timeout }),
        Err(_) => Err(Error::ProviderPanicked { operation }),
    }
}
