//! The [`Harness`]: the provider-neutral entry point.

mod builder;
mod stored;
mod telemetry;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::oneshot;
use tracing::Instrument;

use crate::capabilities::Capabilities;
use crate::error::{Error, Result};
use crate::exec::{Child, Command as ExecCommand, DynExec, Exec, ExecError};
use crate::handler::DynRequestHandler;
use crate::ids::{ProviderId, SessionId, TurnId};
use crate::options::{Conversation, ConversationSource, SessionOptions, StoreChoice, TurnOptions};
use crate::provider::{DynProvider, require_capabilities};
use crate::request::{Request, Response};
use crate::runtime::limited::ProcessLimit;
use crate::runtime::registry::Registry;
use crate::runtime::session_exec::SessionExec;
use crate::runtime::startup::Startup;
use crate::runtime::{AwaitGrant, Command, Lookup, Replay, SessionHandle, Subscription, Target, TurnStream};
use crate::runtime::{StartTurn, exit_reason};
use crate::session::{ExitReason, SessionRef, SessionStatus};
use crate::store::{DynStore, Store};
use crate::time::Timestamp;
use crate::turn::{Turn, TurnInput, TurnOutcome, TurnStatus};

pub use self::builder::HarnessBuilder;
use self::stored::{forgotten, outcome, settled_in};
use self::telemetry::Cmd;

/// Default local deadline of a `start_turn` call (not of the turn).
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs agent sessions. Cheap to clone; every clone drives the same sessions.
///
/// Dropping the last clone ends every live session (their provider processes are killed).
#[derive(Clone)]
pub struct Harness {
    inner: Arc<Inner>,
}

struct Inner {
    providers: BTreeMap<ProviderId, DynProvider>,
    store: Option<DynStore>,
    exec: DynExec,
    /// `exec` as sessions spawn through it: limited (`max_provider_processes`) and stamped with
    /// this harness. Made once, so a session's exec stays the same value from one start to the
    /// next (the CLIs' version probes are cached per exec).
    session_exec: DynExec,
    registry: Arc<Registry>,
    call_timeout: Duration,
    /// Shared by every session's exec when `max_provider_processes` is set.
    process_limit: Option<ProcessLimit>,
    /// Answers the requests of sessions that have no handler of their own.
    request_handler: Option<DynRequestHandler>,
    /// Where the last run of each session started with a store choice of its own (a custom
    /// store, or none) wrote its history, so it stays reachable after the run stops. Sessions
    /// not here ran with the default store.
    session_stores: Mutex<HashMap<SessionId, RunStore>>,
    /// The session execs made for `SessionOptions::exec` overrides, by override: one value
    /// while any session spawns through it, as for `session_exec`.
    override_execs: Mutex<Vec<MadeExec>>,
}

/// Where a session's last run kept its history, when not in the default store.
#[derive(Clone)]
enum RunStore {
    /// A custom store. Weak: a store the caller dropped is not kept alive for this.
    Custom(Weak<dyn Store>),
    /// No store: the run kept nothing.
    Disabled,
}

impl RunStore {
    /// How a run with `choice` is remembered; `None` for the default store.
    fn of(choice: &StoreChoice) -> Option<RunStore> {
        match choice {
            StoreChoice::Default => None,
            StoreChoice::Disabled => Some(RunStore::Disabled),
            StoreChoice::Custom(store) => Some(RunStore::Custom(Arc::downgrade(store))),
        }
    }
}

/// A session exec made for an override exec: (the override, what sessions spawn through).
type MadeExec = (std::sync::Weak<dyn Exec>, std::sync::Weak<dyn Exec>);

impl Inner {
    /// The session exec for an override `exec` (see `override_execs`).
    fn override_exec(&self, exec: &DynExec) -> DynExec {
        let mut made = self.override_execs.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        made.retain(|(_, wrapper)| wrapper.strong_count() > 0);
        let key = Arc::downgrade(exec);
        if let Some(wrapper) = made.iter().find(|(of, _)| of.ptr_eq(&key)).and_then(|(_, wrapper)| wrapper.upgrade()) {
            return wrapper;
        }
        let wrapper = SessionExec::wrap(Arc::clone(exec), self.registry.harness_number(), self.process_limit.clone());
        made.push((key, Arc::downgrade(&wrapper)));
        wrapper
    }

    fn session_stores(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, RunStore>> {
        // Every critical section is a single map operation.
        self.session_stores.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records where a run that started keeps its history; the run before it is forgotten. So
    /// are runs in a custom store since dropped, and store-less runs this harness no longer
    /// knows of (neither live nor among its recently ended ones), which hold nothing to find.
    fn remember_store(&self, id: &SessionId, run: Option<RunStore>) {
        let mut stores = self.session_stores();
        match run {
            Some(run) => {
                stores.retain(|_, run| !matches!(run, RunStore::Custom(store) if store.strong_count() == 0));
                self.registry.retain_known(&mut stores, |run| !matches!(run, RunStore::Disabled));
                stores.insert(id.clone(), run);
            }
            None => {
                stores.remove(id);
            }
        }
    }

    /// The store holding a session's history: the one its last run in this harness wrote to
    /// (a custom store, or none), or the default store.
    fn store_of(&self, id: &SessionId) -> Option<DynStore> {
        match self.session_stores().get(id) {
            Some(RunStore::Custom(store)) => store.upgrade(),
            Some(RunStore::Disabled) => None,
            None => self.store.clone(),
        }
    }

    /// Forgets a purged session.
    fn forget(&self, id: &SessionId) {
        self.session_stores().remove(id);
        self.registry.forget(id);
    }
}

/// Why awaiting a turn did not produce a completed outcome. Converts into [`Error`], so `?`
/// works across both.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AwaitError {
    /// The turn ended without completing: failed, cancelled or interrupted.
    #[error("turn ended {}", .0.status)]
    Ended(Box<TurnOutcome>),
    /// The wait timed out; the turn keeps running.
    #[error("timed out after {0:?} waiting for the turn")]
    Timeout(Duration),
    /// The turn cannot be awaited (unknown turn, replay unavailable, store error, the session
    /// went down: [`Error::SessionDown`], …).
    #[error(transparent)]
    Failed(#[from] Error),
}

impl From<AwaitError> for Error {
    fn from(error: AwaitError) -> Self {
        match error {
            AwaitError::Ended(outcome) => Error::TurnEnded(outcome),
            AwaitError::Timeout(timeout) => Error::WaitTimeout { timeout },
            AwaitError::Failed(error) => error,
        }
    }
}

impl AwaitError {
    /// The kind of the [`Error`] this becomes.
    pub fn kind(&self) -> crate::ErrorKind {
        match self {
            AwaitError::Ended(_) => crate::ErrorKind::TurnEnded,
            AwaitError::Timeout(_) => crate::ErrorKind::WaitTimeout,
            AwaitError::Failed(error) => error.kind(),
        }
    }
}

impl Harness {
    /// A builder.
    pub fn builder() -> HarnessBuilder {
        HarnessBuilder::default()
    }

    /// The registered provider IDs.
    pub fn providers(&self) -> Vec<ProviderId> {
        self.inner.providers.keys().cloned().collect()
    }

    /// The provider registered under `id`, or [`Error::UnknownProvider`].
    pub(crate) fn registered_provider(&self, id: &ProviderId) -> Result<DynProvider> {
        self.inner.providers.get(id).cloned().ok_or_else(|| Error::UnknownProvider {
            provider: id.clone(),
            registered: self.inner.providers.keys().map(|p| p.as_str()).collect::<Vec<_>>().join(", "),
        })
    }

    /// The live session's handle, or an error saying what became of it: closed (and why) when
    /// this harness or the session's store knows it ended, not found otherwise.
    async fn live(&self, id: &SessionId) -> Result<SessionHandle> {
        match self.inner.registry.get(id) {
            Some(handle) => Ok(handle),
            None => Err(self.not_live(id).await),
        }
    }

    /// Opens a session on `provider` and returns its handle once the provider is ready.
    ///
    /// ID rules: a live ID gives [`Error::SessionAlreadyExists`]; an ID the store retains gives
    /// [`Error::SessionIdAlreadyUsed`] unless `options.reuse` allows replacing it; a snapshot
    /// whose startup was never acknowledged is reclaimed automatically. Independent starts run
    /// concurrently. `startup_timeout` bounds the provider open (a hung open is torn down, and so
    /// is the open of a caller that stops waiting); `startup_finalization_timeout` bounds the
    /// initial store commit and cleanup. A provider whose transport goes down while it opens
    /// fails the start with [`Error::ProviderOpenFailed`].
    ///
    /// [`SessionOptions::conversation`] resumes or forks an earlier conversation; resuming a
    /// stopped session under its own ID continues its stored history. A conversation that cannot
    /// be continued fails the start with [`Error::ResumeFailed`] — never a fresh one instead.
    pub async fn start_session(&self, provider: impl Into<ProviderId>, options: SessionOptions) -> Result<SessionRef> {
        let provider_id = provider.into();
        let command = telemetry::command_span(Cmd::StartSession, &provider_id, None);
        let started = self.start_session_inner(provider_id, options, &command);
        telemetry::traced(command.clone(), started).await
    }

    async fn start_session_inner(
        &self,
        provider_id: ProviderId,
        options: SessionOptions,
        command: &tracing::Span,
    ) -> Result<SessionRef> {
        let provider = self.inner.providers.get(&provider_id).cloned().ok_or_else(|| Error::UnknownProvider {
            provider: provider_id.clone(),
            registered: self.inner.providers.keys().map(|p| p.as_str()).collect::<Vec<_>>().join(", "),
        })?;
        let id = options.validate()?.unwrap_or_else(SessionId::generate);
        command.record("session_id", tracing::field::display(&id));
        provider.validate(&options)?;
        require_capabilities(&provider_id, &provider.capabilities(&options), &options)?;
        let store = match &options.store {
            StoreChoice::Default => self.inner.store.clone(),
            StoreChoice::Disabled => None,
            StoreChoice::Custom(store) => Some(Arc::clone(store)),
        };
        let exec = match &options.exec {
            Some(exec) => self.inner.override_exec(exec),
            None => Arc::clone(&self.inner.session_exec),
        };
        let reservation = self.inner.registry.reserve(&id)?;
        // The session outlives this call: its span is a root that follows from the command.
        let span = tracing::info_span!(parent: None, "session", session_id = %id, provider = %provider_id);
        span.follows_from(command);
        let run_store = RunStore::of(&options.store);
        let new_session = !matches!(options.conversation, Conversation::Resume(ConversationSource::Session(_)));
        let (tx, rx) = oneshot::channel();
        let startup = Startup {
            session: SessionRef { provider: provider_id, id: id.clone() },
            options: Arc::new(options),
            provider,
            store,
            exec,
            reservation,
            request_handler: self.inner.request_handler.clone(),
            span: span.clone(),
        };
        tokio::spawn(startup.task(tx).instrument(span));
        let mut answer = Unread { rx: Some(rx), harness: self.clone(), run_store: run_store.clone(), new_session };
        let started = answer.rx.as_mut().expect("set above").await;
        answer.rx = None;
        let started = started.map_err(|_| Error::SessionDown {
            id: id.clone(),
            reason: ExitReason::Crashed { reason: "session startup ended unexpectedly".into() },
        })?;
        // A start that failed leaves the previous run's history where it was.
        if started.is_ok() {
            self.inner.remember_store(&id, run_store);
        }
        started
    }

    /// A live session's status. A session that ended gives [`Error::SessionClosed`] with how it
    /// ended (when this harness or its store knows), otherwise [`Error::SessionNotFound`].
    pub async fn status(&self, session: &SessionRef) -> Result<SessionStatus> {
        self.live(&session.id).await?.call(Command::Status).await
    }

    /// A live session's capabilities.
    pub async fn capabilities(&self, session: &SessionRef) -> Result<Capabilities> {
        self.live(&session.id).await?.call(Command::Capabilities).await?
    }

    /// Live sessions, by ID.
    pub fn list_sessions(&self) -> Vec<SessionRef> {
        self.inner.registry.live()
    }

    /// Records a turn and schedules its admission; returns once it is recorded (and committed
    /// to the store). `turn_started` means the provider accepted it; a rejection or admission
    /// timeout arrives as `turn_failed`. Another active turn gives [`Error::TurnInProgress`].
    /// Input or options the session cannot take are refused before anything is recorded
    /// ([`Error::InvalidOption`], [`Error::Unsupported`]; see
    /// [`ProviderSession::validate_turn`](crate::provider::ProviderSession::validate_turn)).
    ///
    /// A caller-chosen turn ID ([`TurnOptions::id`]) follows the session ID rules
    /// ([`Error::InvalidTurnId`]) and may be used once per session ([`Error::TurnIdAlreadyUsed`]).
    /// Under [`StoreFailurePolicy::Stop`](crate::StoreFailurePolicy::Stop) a turn whose record
    /// cannot be committed is refused with the store's error (the session then closes).
    pub async fn start_turn(
        &self,
        session: &SessionRef,
        input: impl Into<TurnInput>,
        options: TurnOptions,
    ) -> Result<Turn> {
        let command = telemetry::command_span(Cmd::StartTurn, &session.provider, Some(&session.id));
        telemetry::traced(command, self.start_turn_inner(session, input.into(), options)).await
    }

    async fn start_turn_inner(&self, session: &SessionRef, input: TurnInput, options: TurnOptions) -> Result<Turn> {
        if let Some(problem) = input.problem() {
            return Err(Error::invalid("input", problem));
        }
        if let Some(id) = &options.id
            && let Some(reason) = TurnId::problem(id.as_str())
        {
            return Err(Error::InvalidTurnId { id: crate::ids::refused_id(id.to_string()), reason });
        }
        if let Some(timeout) = options.inactivity_timeout
            && timeout.is_zero()
        {
            return Err(Error::invalid("inactivity_timeout", "must be positive"));
        }
        // A call that may not wait at all reports every turn's fate as unknown.
        if options.call_timeout.is_some_and(|t| t.is_zero()) {
            return Err(Error::invalid("call_timeout", "must be positive"));
        }
        // As a session's model: an empty one would reach the CLI as a model named "".
        if options.model.as_deref().is_some_and(|m| m.trim().is_empty()) {
            return Err(Error::invalid("model", "must not be empty when set"));
        }
        options.provider_options.check_types()?;
        let handle = self.live(&session.id).await?;
        let now = Timestamp::now();
        let turn = Turn {
            id: options.id.clone().unwrap_or_else(TurnId::generate),
            session_id: session.id.clone(),
            input,
            status: TurnStatus::Starting,
            metadata: options.metadata.clone(),
            created_at: now,
            started_at: None,
            finished_at: None,
            result: None,
        };
        let call_timeout = options.call_timeout.unwrap_or(self.inner.call_timeout);
        let call = async {
            if let (Some(id), Some(store)) = (&options.id, &handle.store)
                && store.fetch_turn(&session.id, id).await?.is_some()
            {
                return Err(Error::TurnIdAlreadyUsed { turn_id: id.clone() });
            }
            let turn = turn.clone();
            handle.call(|reply| Command::StartTurn(Box::new(StartTurn { turn, options, reply }))).await?
        };
        match tokio::time::timeout(call_timeout, call).await {
            Ok(result) => result,
            Err(_) => Err(Error::SessionCallTimeout { turn: Box::new(turn), timeout: call_timeout }),
        }
    }

    /// Subscribes to a session or a turn. See [`Replay`] for where it starts and
    /// [`Subscription`] for delivery and lag. A session that is not live (stopped, or from before
    /// a restart) replays from its store with `Replay::Start` / `Replay::After` and the
    /// subscription ends after the stored events; one that another harness sharing the store
    /// runs is [`Error::SessionLiveElsewhere`], but for a turn of it that has ended. A finished
    /// turn's subscription from at or past its terminal event ends at once with nothing, wherever
    /// the turn is kept (use [`Harness::stream`] to be told instead).
    pub async fn subscribe(&self, target: impl Into<Target>, replay: Replay) -> Result<Subscription> {
        self.subscribe_inner(target.into(), replay, false).await
    }

    async fn subscribe_inner(&self, target: Target, replay: Replay, for_stream: bool) -> Result<Subscription> {
        let session_id = target.session_id().clone();
        let turn = target.turn_id().cloned();
        let Some(handle) = self.inner.registry.get(&session_id) else {
            return self.stored_subscription(session_id, turn, replay, for_stream).await;
        };
        let answer = handle.call(|reply| Command::Subscribe { turn: turn.clone(), replay, for_stream, reply }).await;
        let lookup = match answer {
            Ok(lookup) => lookup?,
            // The session ended between the lookup and the call: replay what it stored.
            Err(Error::SessionNotFound { .. } | Error::SessionDown { .. }) => {
                handle.exit_reason().await;
                return self.stored_subscription(session_id, turn, replay, for_stream).await;
            }
            Err(error) => return Err(error),
        };
        let grant = match lookup {
            Lookup::Found(grant) => grant,
            Lookup::NotHere { pruned, store } => {
                let turn = turn.clone().expect("session subscriptions are always found");
                self.stored_turn_grant(&handle, store, &turn, replay, for_stream, pruned).await?
            }
        };
        Ok(Subscription::new(session_id, turn, replay.after(), grant))
    }

    /// The events of one turn up to and including its terminal event.
    ///
    /// With `Replay::Start` it works after the turn already finished, as long as the terminal
    /// event is still in the store or buffer; `Replay::Latest` on a finished turn, or a cursor at
    /// or past its terminal event, is [`Error::ReplayUnavailable`]. `idle_timeout` bounds the wait
    /// for each event. A reader that falls behind live events catches up from the store by itself.
    pub async fn stream(&self, turn: &Turn, replay: Replay, idle_timeout: Option<Duration>) -> Result<TurnStream> {
        let subscription = self.subscribe_inner(Target::Turn(turn.turn_ref()), replay, true).await?;
        Ok(TurnStream::new(subscription, idle_timeout))
    }

    /// Waits for a turn's terminal event, without racing it: the terminal state is read and the
    /// wait registered in one step inside the session. Finished turns come from the session's
    /// completed-turn cache, its event buffer, then its store. `timeout` bounds the wait (not the
    /// turn). A turn the store holds no end for, of a session that is not live here, is
    /// [`Error::SessionLiveElsewhere`] while another harness runs it, and [`Error::SessionClosed`]
    /// when this harness saw the session end.
    pub async fn await_turn(&self, turn: &Turn, timeout: Option<Duration>) -> Result<TurnOutcome, AwaitError> {
        match timeout {
            None => self.await_outcome(turn).await,
            // Reading the end from a slow store counts as waiting too.
            Some(limit) => {
                tokio::time::timeout(limit, self.await_outcome(turn)).await.unwrap_or(Err(AwaitError::Timeout(limit)))
            }
        }
    }

    async fn await_outcome(&self, turn: &Turn) -> Result<TurnOutcome, AwaitError> {
        let Some(handle) = self.inner.registry.get(&turn.session_id) else {
            return self.stored_outcome(turn).await;
        };
        let lookup = match handle.call(|reply| Command::Await { turn: turn.id.clone(), reply }).await {
            Ok(lookup) => lookup,
            // The session ended between the lookup and the call: what it stored decides.
            Err(Error::SessionNotFound { .. } | Error::SessionDown { .. }) => {
                handle.exit_reason().await;
                return self.stored_outcome(turn).await;
            }
            Err(error) => return Err(error.into()),
        };
        let exit = handle.exit.clone();
        drop(handle);
        let event = match lookup {
            Lookup::Found(AwaitGrant::Done(event)) => event,
            Lookup::Found(AwaitGrant::Wait(rx)) => {
                match rx.await {
                    Err(_) => {
                        // The session ended first: its store may hold the turn's end all the same.
                        let reason = exit_reason(exit).await;
                        return match self.stored_outcome(turn).await {
                            Ok(outcome) => Ok(outcome),
                            Err(AwaitError::Ended(outcome)) => Err(AwaitError::Ended(outcome)),
                            Err(_) => Err(Error::SessionDown { id: turn.session_id.clone(), reason }.into()),
                        };
                    }
                    Ok(event) => event,
                }
            }
            Lookup::NotHere { pruned, store } => {
                let Some(store) = store else {
                    return Err(forgotten(&turn.session_id, &turn.id, pruned).into());
                };
                return stored::outcome_in(&store, &turn.session_id, &turn.id).await;
            }
        };
        outcome(event)
    }

    /// Answers a request exactly once. Concurrent answers get [`Error::ResponseInProgress`],
    /// later ones [`Error::AlreadyResolved`], answers after expiry [`Error::RequestExpired`]. A
    /// live session tells these apart for the requests of the turns it keeps
    /// ([`SessionOptions::completed_turn_cache_size`]) and of the 1,024 requests of turns it let
    /// go of last; for an older request it asks its store, and without one (or when the store
    /// does not hold it) the answer is [`Error::RequestNotFound`]. A response that does not fit
    /// the request is refused before anything is sent. A request of a session another harness
    /// sharing the store runs is answered there ([`Error::SessionLiveElsewhere`] here),
    /// whatever the store says of it.
    pub async fn respond(&self, request: &Request, response: Response) -> Result<()> {
        let command = telemetry::command_span(Cmd::Respond, &self.provider_of(&request.session_id), None);
        command.record("session_id", tracing::field::display(&request.session_id));
        command.record("request_id", tracing::field::display(&request.id));
        telemetry::traced(command, self.respond_inner(request, response)).await
    }

    async fn respond_inner(&self, request: &Request, response: Response) -> Result<()> {
        let Some(handle) = self.inner.registry.get(&request.session_id) else {
            // Live in another harness sharing the store: its request may well be pending there,
            // and only that harness can answer it.
            let not_live = self.not_live(&request.session_id).await;
            if matches!(not_live, Error::SessionLiveElsewhere { .. }) {
                return Err(not_live);
            }
            let store = self.inner.store_of(&request.session_id);
            if let Some(settled) = settled_in(store.as_ref(), request).await? {
                return Err(settled);
            }
            return Err(not_live);
        };
        let request_id = request.id.clone();
        let answer = match handle.call(|reply| Command::Respond { request: request_id, response, reply }).await {
            Ok(answer) => answer,
            // The session went down with the call in flight: once it has ended, the store says
            // how the request was settled (expired with the session), as for an ended session.
            Err(error @ (Error::SessionNotFound { .. } | Error::SessionDown { .. })) => {
                let exit = handle.exit_reason().await;
                if let Some(settled) = settled_in(handle.store.as_ref(), request).await? {
                    return Err(settled);
                }
                // Without a store: a session that ended in order expired its pending requests
                // (this one among them: the answer never reached it); a crashed one is unknown.
                return Err(match exit {
                    ExitReason::Crashed { .. } => error,
                    _ => Error::RequestExpired { request_id: request.id.clone() },
                });
            }
            Err(error) => return Err(error),
        };
        match answer {
            // Not held by the live session: the store may know how it was settled.
            Err(error @ Error::RequestNotFound { .. }) => {
                Err(settled_in(handle.store.as_ref(), request).await?.unwrap_or(error))
            }
            result => result,
        }
    }

    /// Requests cancellation of an active turn. `Ok` means the intent was recorded and at most
    /// one provider command scheduled; the terminal event is the outcome. Repeating it while
    /// cancelling is `Ok`; an inactive turn gives [`Error::TurnNotActive`].
    pub async fn cancel(&self, turn: &Turn) -> Result<()> {
        self.cancel_with_reason(turn, None).await
    }

    /// [`Harness::cancel`] with a reason recorded in `cancel_requested`.
    pub async fn cancel_with_reason(&self, turn: &Turn, reason: Option<String>) -> Result<()> {
        let provider = self.provider_of(&turn.session_id);
        let command = telemetry::command_span(Cmd::Cancel, &provider, Some(&turn.session_id));
        command.record("turn_id", tracing::field::display(&turn.id));
        let cancel = async {
            let handle = self.live(&turn.session_id).await?;
            handle.call(|reply| Command::Cancel { turn: turn.id.clone(), reason, reply }).await?
        };
        telemetry::traced(command, cancel).await
    }

    /// Adds input to the running turn (providers with the `steer` capability). Returns once the
    /// provider accepted it; an unadmitted, cancelling or finished turn is [`Error::TurnNotActive`].
    /// Input a turn of the session could not take (images, skills, structured items the
    /// provider lacks) is [`Error::Unsupported`], as for [`Harness::start_turn`].
    pub async fn steer(&self, turn: &Turn, input: impl Into<TurnInput>) -> Result<()> {
        let provider = self.provider_of(&turn.session_id);
        let command = telemetry::command_span(Cmd::Steer, &provider, Some(&turn.session_id));
        command.record("turn_id", tracing::field::display(&turn.id));
        let input = input.into();
        let steer = async {
            if let Some(problem) = input.problem() {
                return Err(Error::invalid("input", problem));
            }
            let handle = self.live(&turn.session_id).await?;
            handle.call(|reply| Command::Steer { turn: turn.id.clone(), input, reply }).await?
        };
        telemetry::traced(command, steer).await
    }

    /// Stops a session. An active turn gives [`Error::TurnInProgress`] unless `force`, which
    /// interrupts it (`turn_interrupted`) without waiting for the provider to acknowledge a
    /// cancellation, and expires its requests. Either way the provider then closes as
    /// [`ProviderSession::close`](crate::provider::ProviderSession::close) says: the Codex,
    /// Claude and Pi providers close the CLI's stdin and kill its process group if it has not
    /// exited within 2 s; a preset kills its running turn's process. Returns after the session
    /// has fully ended; stopping a session that is not live is `Ok`, unless another harness
    /// sharing the store runs it ([`Error::SessionLiveElsewhere`]: it is not stopped). A
    /// session whose start is under way in this harness is stopped once it is live (its
    /// `start_session` may still return it), or not at all if its start fails. History stays
    /// in the store.
    pub async fn stop_session(&self, session: &SessionRef, force: bool) -> Result<()> {
        self.stop_inner(session, force, false).await
    }

    /// [`Harness::stop_session`], deleting the session's stored history as it ends when
    /// `discard` (see [`Command::Stop`]).
    async fn stop_inner(&self, session: &SessionRef, force: bool, discard: bool) -> Result<()> {
        let command = telemetry::command_span(Cmd::StopSession, &session.provider, Some(&session.id));
        command.record("force", force);
        let stop = async {
            let registry = &self.inner.registry;
            let live = loop {
                let changed = registry.changed().notified();
                tokio::pin!(changed);
                changed.as_mut().enable();
                match registry.get(&session.id) {
                    Some(handle) => break Some(handle),
                    // Starting: wait until it is live or gone.
                    None if registry.contains(&session.id) => changed.await,
                    None => break None,
                }
            };
            let Some(handle) = live else {
                // Not live here: stopped already (stopping is idempotent), or another harness
                // sharing the store runs it, which this one cannot stop.
                return match self.held_elsewhere(&session.id).await {
                    Some(pid) => Err(Error::SessionLiveElsewhere { id: session.id.clone(), pid }),
                    None => Ok(()),
                };
            };
            match handle.call(|reply| Command::Stop { force, discard, reply }).await {
                Ok(Ok(())) | Err(_) => {}
                Ok(Err(error)) => return Err(error),
            }
            handle.exit_reason().await;
            Ok(())
        };
        telemetry::traced(command, stop).await
    }

    /// Stops every live session — an active turn is interrupted (`ended_by: harness_shutdown`),
    /// its requests expire, its provider is closed — and waits until all of them have ended. A
    /// session whose start was under way when `shutdown` was called is stopped too, once it is
    /// live (its `start_session` may still return it). Sessions started afterwards run normally.
    /// Dropping the last `Harness` clone stops the live sessions without waiting.
    pub async fn shutdown(&self) {
        let registry = &self.inner.registry;
        let cutoff = registry.next_attempt();
        loop {
            let changed = registry.changed().notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let (live, starting) = registry.before(cutoff);
            for handle in &live {
                let envelope = crate::runtime::Envelope { command: Command::Shutdown, span: tracing::Span::current() };
                let _ = handle.tx.send(envelope).await;
            }
            for handle in live {
                handle.exit_reason().await;
            }
            if !starting {
                return;
            }
            changed.await;
        }
    }

    /// A future that resolves with the reason when the session ends. For a session that already
    /// ended it resolves at once with how it ended, when this harness or the session's store
    /// knows; an unknown session is [`Error::SessionNotFound`].
    pub async fn monitor(&self, session: &SessionRef) -> Result<SessionMonitor> {
        // Hold only the exit signal: a monitor must not keep the session's command channel open.
        if let Some(handle) = self.inner.registry.get(&session.id) {
            let exit = handle.exit;
            return Ok(SessionMonitor { inner: Box::pin(async move { exit_reason(exit).await }) });
        }
        match self.not_live(&session.id).await {
            Error::SessionClosed { reason, .. } => Ok(SessionMonitor { inner: Box::pin(async move { reason }) }),
            error => Err(error),
        }
    }

    /// Ends processes stamped for sessions that are no longer live (see
    /// [`Exec::reap_orphans`]); call it once at start-up to clean up after a crashed host. A
    /// session live in any harness of this process counts as live: another harness's sessions
    /// keep their processes.
    pub async fn reap_orphans(&self) -> Result<usize> {
        let is_live = |id: &str| crate::runtime::owner::any_harness_holds(&SessionId::from_stored(id));
        Ok(self.inner.exec.reap_orphans(&is_live).await?)
    }

    /// The provider a session runs on, for telemetry (`unknown` for a session not live here).
    fn provider_of(&self, id: &SessionId) -> ProviderId {
        self.inner.registry.get(id).map_or_else(|| ProviderId::new("unknown"), |h| h.session.provider)
    }
}

impl fmt::Debug for Harness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Harness")
            .field("providers", &self.inner.providers.keys().collect::<Vec<_>>())
            .field("store", &self.inner.store)
            .field("exec", &self.inner.exec)
            .field("live_sessions", &self.inner.registry.live().len())
            .finish()
    }
}

/// Resolves with the reason when a session ends. See [`Harness::monitor`].
pub struct SessionMonitor {
    inner: Pin<Box<dyn Future<Output = ExitReason> + Send>>,
}

impl Future for SessionMonitor {
    type Output = ExitReason;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<ExitReason> {
        self.inner.as_mut().poll(cx)
    }
}

impl fmt::Debug for SessionMonitor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionMonitor").finish_non_exhaustive()
    }
}

/// The answer of a start whose caller may stop waiting for it. The startup tears a session
/// down when its caller is gone before the hand-off; a caller whose future is dropped after the
/// session was handed over but before it read it (a `select!` whose other branch won) leaves it
/// here, live and out of anyone's reach: it is stopped, and a new one's history deleted, as the
/// startup takes back what it stored (a resumed session keeps its history, closed). The delete
/// is the session's own last write, while its ID is still held: a retry under the ID waits
/// (`SessionAlreadyExists`) and then finds nothing, never a closed session that refuses it.
struct Unread {
    /// Taken once the answer is read.
    rx: Option<oneshot::Receiver<Result<SessionRef>>>,
    harness: Harness,
    run_store: Option<RunStore>,
    new_session: bool,
}

impl Drop for Unread {
    fn drop(&mut self) {
        let Some(mut rx) = self.rx.take() else { return };
        rx.close();
        let Ok(Ok(session)) = rx.try_recv() else { return };
        // Without a runtime the harness's own end stops it.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let (harness, new_session) = (self.harness.clone(), self.new_session);
        harness.inner.remember_store(&session.id, self.run_store.take());
        runtime.spawn(async move {
            tracing::info!(session_id = %session.id, "caller went away before it read its started session; stopping it");
            if let Err(error) = harness.stop_inner(&session, true, new_session).await {
                tracing::warn!(session_id = %session.id, %error, "could not stop a session nobody read");
            }
        });
    }
}

/// The exec used when none is configured: every spawn fails with a message saying what to add.
#[derive(Debug)]
struct NoExec;

#[async_trait]
impl Exec for NoExec {
    async fn spawn(&self, _command: ExecCommand) -> Result<Child, ExecError> {
        Err(ExecError::Backend(
            "no exec configured: add one with HarnessBuilder::exec (e.g. LocalExec, agent_harness::execs::local)"
                .into(),
        ))
    }

    /// Local, though it runs nothing anywhere: the auth guard refuses an exec that is not
    /// (`AuthMode::Subscription`), and a harness built without an exec would be told to weaken
    /// its auth mode rather than that it lacks an exec, which its first spawn says.
    fn is_local(&self) -> bool {
        true
    }
}

#[cfg(all(test, feature = "testing"))]
mod tests {
    use super::*;
    use crate::runtime::registry::ENDED_RECORDS;
    use crate::testing::ScriptedProvider;

    /// Where store-less runs kept nothing is remembered only for the sessions the harness still
    /// knows of: a service starting sessions without a store for good holds a bounded map.
    #[tokio::test]
    async fn store_less_runs_are_remembered_only_while_the_harness_knows_them() {
        let (provider, _control) = ScriptedProvider::new("scripted");
        let harness = Harness::builder().provider(provider).store(StoreChoice::Disabled).build().unwrap();
        for _ in 0..ENDED_RECORDS + 64 {
            let options = SessionOptions::new(std::env::temp_dir()).store(StoreChoice::Disabled);
            let session = harness.start_session("scripted", options).await.unwrap();
            harness.stop_session(&session, false).await.unwrap();
        }
        let remembered = harness.inner.session_stores().len();
        assert!(remembered <= ENDED_RECORDS + 1, "{remembered} runs remembered");
    }
}
