//! The [`Harness`]: the provider-neutral entry point.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{mpsc, oneshot, watch};
use tracing::Instrument;

use crate::capabilities::Capabilities;
use crate::error::{Error, Result};
use crate::event::{Event, EventKind, SCHEMA_VERSION};
use crate::exec::{Child, Command as ExecCommand, DynExec, Exec, ExecError};
use crate::ids::{EventId, ProviderId, SessionId, TurnId};
use crate::options::{Reuse, SessionOptions, StoreChoice, StoreFailurePolicy, TurnOptions};
use crate::provider::{DynProvider, OpenContext, Opened, Sink};
use crate::request::{Request, RequestStatus, Response};
use crate::runtime::actor::{Actor, ActorParts};
use crate::runtime::limited::LimitedExec;
use crate::runtime::registry::{Registry, Reservation};
use crate::runtime::subscription::Grant;
use crate::runtime::{
    AwaitGrant, COMMAND_CAPACITY, Command, Lookup, Replay, SessionHandle, Subscription, Target, TurnStream,
};
use crate::runtime::{StartTurn, exit_reason};
use crate::session::{
    Durability, ExitReason, SessionRef, SessionSnapshot, SessionState, SessionStatus, StartupMarker, StoredSession,
};
use crate::store::{DynStore, EventQuery, WriteBatch};
use crate::time::Timestamp;
use crate::turn::{Turn, TurnInput, TurnOutcome, TurnStatus};

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
    registry: Arc<Registry>,
    call_timeout: Duration,
    /// Shared by every session's exec when `max_provider_processes` is set.
    process_limit: Option<(Arc<tokio::sync::Semaphore>, usize)>,
}

/// Builds a [`Harness`].
#[derive(Default)]
pub struct HarnessBuilder {
    providers: Vec<DynProvider>,
    store: Option<StoreChoice>,
    exec: Option<DynExec>,
    max_sessions: Option<usize>,
    max_provider_processes: Option<usize>,
    call_timeout: Option<Duration>,
}

impl HarnessBuilder {
    /// Registers a provider under its [`Provider::id`](crate::Provider::id).
    pub fn provider(mut self, provider: impl Into<DynProvider>) -> Self {
        self.providers.push(provider.into());
        self
    }

    /// Sets the default store: [`StoreChoice::Custom`] with e.g. `agent_store_memory::MemoryStore`,
    /// or [`StoreChoice::Disabled`] for live-only sessions. Required.
    pub fn store(mut self, store: StoreChoice) -> Self {
        self.store = Some(store);
        self
    }

    /// Sets the default exec (e.g. `agent_exec::LocalExec`). Without one, providers that spawn
    /// processes fail at `start_session` with [`ExecError::Backend`].
    pub fn exec(mut self, exec: DynExec) -> Self {
        self.exec = Some(exec);
        self
    }

    /// Bounds the number of live and starting sessions; unlimited by default.
    pub fn max_sessions(mut self, limit: usize) -> Self {
        self.max_sessions = Some(limit);
        self
    }

    /// Bounds how many provider processes (CLIs) run at once across all sessions, whichever exec
    /// they use; unlimited by default. A start beyond it fails with [`ExecError::LimitReached`];
    /// a slot frees when its process exits.
    pub fn max_provider_processes(mut self, limit: usize) -> Self {
        self.max_provider_processes = Some(limit);
        self
    }

    /// Sets the default local deadline of `start_turn` calls.
    pub fn call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = Some(timeout);
        self
    }

    /// Builds the harness.
    pub fn build(self) -> Result<Harness> {
        let store = match self.store {
            None => {
                return Err(Error::InvalidConfig(
                    "no store configured: use HarnessBuilder::store(StoreChoice::Custom(..)) (e.g. \
                     agent_store_memory::MemoryStore) or StoreChoice::Disabled"
                        .into(),
                ));
            }
            Some(StoreChoice::Custom(store)) => Some(store),
            Some(StoreChoice::Disabled) => None,
            Some(StoreChoice::Default) => {
                return Err(Error::InvalidConfig("StoreChoice::Default cannot be the harness default itself".into()));
            }
        };
        if self.max_sessions == Some(0) {
            return Err(Error::InvalidConfig("max_sessions must be positive".into()));
        }
        if self.max_provider_processes == Some(0) {
            return Err(Error::InvalidConfig("max_provider_processes must be positive".into()));
        }
        let mut providers = BTreeMap::new();
        for provider in self.providers {
            let id = provider.id();
            if providers.insert(id.clone(), provider).is_some() {
                return Err(Error::InvalidConfig(format!("provider `{id}` registered twice")));
            }
        }
        Ok(Harness {
            inner: Arc::new(Inner {
                providers,
                store,
                exec: self.exec.unwrap_or_else(|| Arc::new(NoExec)),
                registry: Arc::new(Registry::new(self.max_sessions)),
                call_timeout: self.call_timeout.unwrap_or(DEFAULT_CALL_TIMEOUT),
                process_limit: self
                    .max_provider_processes
                    .map(|limit| (Arc::new(tokio::sync::Semaphore::new(limit)), limit)),
            }),
        })
    }
}

impl fmt::Debug for HarnessBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HarnessBuilder")
            .field("providers", &self.providers.iter().map(|p| p.id()).collect::<Vec<_>>())
            .field("store", &self.store)
            .field("max_sessions", &self.max_sessions)
            .field("max_provider_processes", &self.max_provider_processes)
            .finish_non_exhaustive()
    }
}

/// Why awaiting a turn did not produce a completed outcome.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AwaitError {
    /// The turn ended without completing: failed, cancelled or interrupted.
    #[error("turn ended {:?}", .0.status)]
    Ended(Box<TurnOutcome>),
    /// The wait timed out; the turn keeps running.
    #[error("timed out after {0:?} waiting for the turn")]
    Timeout(Duration),
    /// The session ended before the turn did.
    #[error("session went down: {0}")]
    SessionDown(ExitReason),
    /// The turn cannot be awaited (unknown turn, replay unavailable, store error, …).
    #[error(transparent)]
    Failed(#[from] Error),
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

    fn live(&self, id: &SessionId) -> Result<SessionHandle> {
        self.inner.registry.get(id).ok_or_else(|| Error::SessionNotFound { id: id.clone() })
    }

    /// Opens a session on `provider` and returns its handle once the provider is ready.
    ///
    /// ID rules: a live ID gives [`Error::SessionAlreadyExists`]; an ID the store retains gives
    /// [`Error::SessionIdAlreadyUsed`] unless `options.reuse` allows replacing it; a snapshot
    /// whose startup was never acknowledged is reclaimed automatically. Independent starts run
    /// concurrently. `startup_timeout` bounds the provider open (a hung open is torn down);
    /// `startup_finalization_timeout` bounds the initial store commit and cleanup.
    pub async fn start_session(&self, provider: impl Into<ProviderId>, options: SessionOptions) -> Result<SessionRef> {
        let provider_id = provider.into();
        let provider = self.inner.providers.get(&provider_id).cloned().ok_or_else(|| Error::UnknownProvider {
            provider: provider_id.clone(),
            registered: self.inner.providers.keys().map(|p| p.as_str()).collect::<Vec<_>>().join(", "),
        })?;
        let id = options.validate()?.unwrap_or_else(SessionId::generate);
        provider.validate(&options)?;
        let store = match &options.store {
            StoreChoice::Default => self.inner.store.clone(),
            StoreChoice::Disabled => None,
            StoreChoice::Custom(store) => Some(Arc::clone(store)),
        };
        let mut exec = options.exec.clone().unwrap_or_else(|| Arc::clone(&self.inner.exec));
        if let Some((permits, limit)) = &self.inner.process_limit {
            exec = LimitedExec::wrap(exec, Arc::clone(permits), *limit);
        }
        let reservation = self.inner.registry.reserve(&id)?;
        let span = tracing::info_span!("session", session_id = %id, provider = %provider_id);
        let (tx, rx) = oneshot::channel();
        let startup = Startup {
            session: SessionRef { provider: provider_id, id: id.clone() },
            options: Arc::new(options),
            provider,
            store,
            exec,
            reservation,
            span: span.clone(),
        };
        tokio::spawn(startup.run(tx).instrument(span));
        rx.await.map_err(|_| Error::SessionDown {
            id,
            reason: ExitReason::Crashed { reason: "session startup ended unexpectedly".into() },
        })?
    }

    /// A live session's status.
    pub async fn status(&self, session: &SessionRef) -> Result<SessionStatus> {
        self.live(&session.id)?.call(Command::Status).await
    }

    /// A live session's capabilities.
    pub async fn capabilities(&self, session: &SessionRef) -> Result<Capabilities> {
        self.live(&session.id)?.call(Command::Capabilities).await?
    }

    /// Live sessions, by ID.
    pub fn list_sessions(&self) -> Vec<SessionRef> {
        self.inner.registry.live()
    }

    /// Sessions in the default store, each marked live or not (restart reconciliation).
    pub async fn list_stored_sessions(&self) -> Result<Vec<StoredSession>> {
        match &self.inner.store {
            Some(store) => self.list_stored_sessions_in(store).await,
            None => Ok(Vec::new()),
        }
    }

    /// Sessions in `store`, each marked live or not.
    pub async fn list_stored_sessions_in(&self, store: &DynStore) -> Result<Vec<StoredSession>> {
        let snapshots = store.list_sessions().await?;
        Ok(snapshots
            .into_iter()
            .map(|snapshot| StoredSession {
                live: self.inner.registry.get(&snapshot.id).is_some(),
                session_id: snapshot.id.clone(),
                snapshot,
            })
            .collect())
    }

    /// Deletes a stopped session's stored history from the default store. Refuses a live ID.
    pub async fn purge_session(&self, session: &SessionRef) -> Result<()> {
        match &self.inner.store {
            Some(store) => self.purge_session_in(store, session).await,
            None => self.refuse_live(&session.id),
        }
    }

    /// Deletes a stopped session's stored history from `store`. Refuses a live ID.
    pub async fn purge_session_in(&self, store: &DynStore, session: &SessionRef) -> Result<()> {
        self.refuse_live(&session.id)?;
        store.delete_session(&session.id).await?;
        Ok(())
    }

    fn refuse_live(&self, id: &SessionId) -> Result<()> {
        if self.inner.registry.contains(id) {
            return Err(Error::SessionLive { id: id.clone() });
        }
        Ok(())
    }

    /// Records a turn and schedules its admission; returns once it is recorded (and committed
    /// to the store). `turn_started` means the provider accepted it; a rejection or admission
    /// timeout arrives as `turn_failed`. Another active turn gives [`Error::TurnInProgress`].
    pub async fn start_turn(
        &self,
        session: &SessionRef,
        input: impl Into<TurnInput>,
        options: TurnOptions,
    ) -> Result<Turn> {
        let handle = self.live(&session.id)?;
        let input = input.into();
        if input.is_empty() {
            return Err(Error::invalid("input", "must not be empty"));
        }
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
    /// a restart) replays from the default store with `Replay::Start` / `Replay::After` and the
    /// subscription ends after the stored events.
    pub async fn subscribe(&self, target: impl Into<Target>, replay: Replay) -> Result<Subscription> {
        self.subscribe_inner(target.into(), replay, false).await
    }

    async fn subscribe_inner(&self, target: Target, replay: Replay, for_stream: bool) -> Result<Subscription> {
        let session_id = target.session_id().clone();
        let turn = target.turn_id().cloned();
        let Some(handle) = self.inner.registry.get(&session_id) else {
            return self.stored_subscription(session_id, turn, replay).await;
        };
        let answer = handle.call(|reply| Command::Subscribe { turn: turn.clone(), replay, for_stream, reply }).await;
        let lookup = match answer {
            Ok(lookup) => lookup?,
            // The session ended between the lookup and the call: replay what it stored.
            Err(Error::SessionNotFound { .. } | Error::SessionDown { .. }) => {
                handle.exit_reason().await;
                return self.stored_subscription(session_id, turn, replay).await;
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

    /// Replays a session that is not live (stopped, or from before a restart) from the default
    /// store. `Replay::Latest` has nothing to follow: `SessionNotFound`, like any other operation
    /// on a stopped session.
    async fn stored_subscription(
        &self,
        session_id: SessionId,
        turn: Option<TurnId>,
        replay: Replay,
    ) -> Result<Subscription> {
        let not_found = || Error::SessionNotFound { id: session_id.clone() };
        let (Some(store), Some(_)) = (&self.inner.store, replay.after()) else {
            return Err(not_found());
        };
        if store.fetch_session(&session_id).await?.is_none() {
            return Err(not_found());
        }
        if let Some(turn) = &turn
            && store.fetch_turn(&session_id, turn).await?.is_none()
        {
            return Err(Error::TurnNotFound { session_id: session_id.clone(), turn_id: turn.clone() });
        }
        let (_, exit) = watch::channel(Some(ExitReason::NotLive));
        let grant = Grant {
            rx: None,
            live_from: u64::MAX,
            store_replay: Some((Arc::clone(store), u64::MAX)),
            buffered: Vec::new(),
            exit,
        };
        Ok(Subscription::new(session_id, turn, replay.after(), grant))
    }

    /// A replay-only grant for a turn the live session no longer holds in memory.
    async fn stored_turn_grant(
        &self,
        handle: &SessionHandle,
        store: Option<DynStore>,
        turn: &TurnId,
        replay: Replay,
        for_stream: bool,
        pruned: bool,
    ) -> Result<Grant> {
        let session_id = &handle.session.id;
        let Some(store) = store else {
            return Err(forgotten(session_id, turn, pruned));
        };
        let Some(stored) = store.fetch_turn(session_id, turn).await? else {
            return Err(Error::TurnNotFound { session_id: session_id.clone(), turn_id: turn.clone() });
        };
        if !stored.status.is_terminal() {
            return Err(Error::ReplayUnavailable {
                reason: format!("turn `{turn}` has no terminal record in the store"),
            });
        }
        let exit = handle.exit.clone();
        match replay.after() {
            None if for_stream => Err(Error::ReplayUnavailable {
                reason: "the turn already finished; `Replay::Latest` cannot include its terminal event".into(),
            }),
            None => Ok(Grant { rx: None, live_from: 0, store_replay: None, buffered: Vec::new(), exit }),
            Some(_) => Ok(Grant {
                rx: None,
                live_from: u64::MAX,
                store_replay: Some((store, u64::MAX)),
                buffered: Vec::new(),
                exit,
            }),
        }
    }

    /// The events of one turn up to and including its terminal event.
    ///
    /// With `Replay::Start` it works after the turn already finished, as long as the terminal
    /// event is still in the store or buffer; `Replay::Latest` on a finished turn is
    /// [`Error::ReplayUnavailable`]. `idle_timeout` bounds the wait for each event.
    pub async fn stream(&self, turn: &Turn, replay: Replay, idle_timeout: Option<Duration>) -> Result<TurnStream> {
        let subscription = self.subscribe_inner(Target::Turn(turn.turn_ref()), replay, true).await?;
        Ok(TurnStream::new(subscription, idle_timeout))
    }

    /// Waits for a turn's terminal event, without racing it: the terminal state is read and the
    /// wait registered in one step inside the session. Finished turns come from the session's
    /// completed-turn cache, then from the store. `timeout` bounds the wait (not the turn).
    pub async fn await_turn(&self, turn: &Turn, timeout: Option<Duration>) -> Result<TurnOutcome, AwaitError> {
        let Some(handle) = self.inner.registry.get(&turn.session_id) else {
            // A stopped session: its history may still be in the default store.
            let store = self.inner.store.clone();
            return match store {
                Some(store) if store.fetch_turn(&turn.session_id, &turn.id).await.map_err(Error::from)?.is_some() => {
                    outcome_from_store(&store, &turn.session_id, &turn.id).await
                }
                _ => Err(Error::SessionNotFound { id: turn.session_id.clone() }.into()),
            };
        };
        let lookup = handle.call(|reply| Command::Await { turn: turn.id.clone(), reply }).await?;
        let exit = handle.exit.clone();
        drop(handle);
        let event = match lookup {
            Lookup::Found(AwaitGrant::Done(event)) => event,
            Lookup::Found(AwaitGrant::Wait(rx)) => {
                let waited = match timeout {
                    None => Ok(rx.await),
                    Some(limit) => tokio::time::timeout(limit, rx).await,
                };
                match waited {
                    Err(_) => return Err(AwaitError::Timeout(timeout.unwrap_or_default())),
                    Ok(Err(_)) => return Err(AwaitError::SessionDown(exit_reason(exit).await)),
                    Ok(Ok(event)) => event,
                }
            }
            Lookup::NotHere { pruned, store } => {
                let Some(store) = store else {
                    return Err(forgotten(&turn.session_id, &turn.id, pruned).into());
                };
                return match store.fetch_turn(&turn.session_id, &turn.id).await.map_err(Error::from)? {
                    None => {
                        Err(Error::TurnNotFound { session_id: turn.session_id.clone(), turn_id: turn.id.clone() }
                            .into())
                    }
                    Some(stored) if !stored.status.is_terminal() => Err(Error::ReplayUnavailable {
                        reason: format!("turn `{}` has no terminal record in the store", turn.id),
                    }
                    .into()),
                    Some(_) => outcome_from_store(&store, &turn.session_id, &turn.id).await,
                };
            }
        };
        outcome(event)
    }

    /// Answers a request exactly once. Concurrent answers get [`Error::ResponseInProgress`],
    /// later ones [`Error::AlreadyResolved`], answers after expiry [`Error::RequestExpired`]. A
    /// response that does not fit the request is refused before anything is sent.
    pub async fn respond(&self, request: &Request, response: Response) -> Result<()> {
        let Some(handle) = self.inner.registry.get(&request.session_id) else {
            if let Some(store) = &self.inner.store
                && let Some(stored) = store.fetch_request(&request.session_id, &request.id).await?
            {
                return Err(settled_error(&stored));
            }
            return Err(Error::SessionNotFound { id: request.session_id.clone() });
        };
        let request_id = request.id.clone();
        match handle.call(|reply| Command::Respond { request: request_id, response, reply }).await? {
            // Not held by the live session: the store may know how it was settled.
            Err(Error::RequestNotFound { session_id, request_id }) => {
                if let Some(store) = &handle.store
                    && let Some(stored) = store.fetch_request(&session_id, &request_id).await?
                {
                    return Err(settled_error(&stored));
                }
                Err(Error::RequestNotFound { session_id, request_id })
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
        let handle = self.live(&turn.session_id)?;
        handle.call(|reply| Command::Cancel { turn: turn.id.clone(), reason, reply }).await?
    }

    /// Adds input to the running turn (providers with the `steer` capability). Returns once the
    /// provider accepted it; an unadmitted, cancelling or finished turn is [`Error::TurnNotActive`].
    pub async fn steer(&self, turn: &Turn, input: impl Into<TurnInput>) -> Result<()> {
        let handle = self.live(&turn.session_id)?;
        let input = input.into();
        if input.is_empty() {
            return Err(Error::invalid("input", "must not be empty"));
        }
        handle.call(|reply| Command::Steer { turn: turn.id.clone(), input, reply }).await?
    }

    /// Stops a session. An active turn gives [`Error::TurnInProgress`] unless `force`, which
    /// interrupts it (`turn_interrupted`), expires its requests and kills the provider without
    /// waiting for the provider to acknowledge. Returns after the session has fully ended;
    /// stopping a session that is not live is `Ok`. History stays in the store.
    pub async fn stop_session(&self, session: &SessionRef, force: bool) -> Result<()> {
        let Some(handle) = self.inner.registry.get(&session.id) else {
            return Ok(());
        };
        match handle.call(|reply| Command::Stop { force, reply }).await {
            Ok(Ok(())) | Err(_) => {}
            Ok(Err(error)) => return Err(error),
        }
        handle.exit_reason().await;
        Ok(())
    }

    /// A future that resolves with the reason when the session ends.
    pub fn monitor(&self, session: &SessionRef) -> Result<SessionMonitor> {
        // Hold only the exit signal: a monitor must not keep the session's command channel open.
        let exit = self.live(&session.id)?.exit;
        Ok(SessionMonitor { inner: Box::pin(async move { exit_reason(exit).await }) })
    }

    /// Ends processes stamped for sessions that are no longer live (see
    /// [`Exec::reap_orphans`]); call it once at start-up to clean up after a crashed host.
    pub async fn reap_orphans(&self) -> Result<usize> {
        let registry = Arc::clone(&self.inner.registry);
        let is_live = move |id: &str| registry.get(&SessionId::from_stored(id)).is_some();
        Ok(self.inner.exec.reap_orphans(&is_live).await?)
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

fn forgotten(session_id: &SessionId, turn: &TurnId, pruned: bool) -> Error {
    if pruned {
        Error::ReplayUnavailable {
            reason: format!("turn `{turn}` was evicted from the completed-turn cache and the session has no store"),
        }
    } else {
        Error::TurnNotFound { session_id: session_id.clone(), turn_id: turn.clone() }
    }
}

fn settled_error(request: &Request) -> Error {
    match request.status {
        RequestStatus::Resolved => Error::AlreadyResolved { request_id: request.id.clone() },
        _ => Error::RequestExpired { request_id: request.id.clone() },
    }
}

fn outcome(event: Arc<Event>) -> Result<TurnOutcome, AwaitError> {
    let outcome = TurnOutcome::from_event(event)
        .ok_or_else(|| Error::ReplayUnavailable { reason: "the stored terminal event is not terminal".into() })?;
    match outcome.status {
        TurnStatus::Completed => Ok(outcome),
        _ => Err(AwaitError::Ended(Box::new(outcome))),
    }
}

async fn outcome_from_store(store: &DynStore, session: &SessionId, turn: &TurnId) -> Result<TurnOutcome, AwaitError> {
    let mut after = 0;
    loop {
        let page = EventQuery::after(after).turn(turn.clone()).limit(crate::runtime::subscription::REPLAY_PAGE);
        let events = store.read_events(session, &page).await.map_err(Error::from)?;
        let Some(last) = events.last() else {
            return Err(Error::ReplayUnavailable {
                reason: format!("the store has no terminal event for turn `{turn}`"),
            }
            .into());
        };
        after = last.seq;
        if let Some(terminal) = events.into_iter().find(|e| e.is_terminal()) {
            return outcome(terminal);
        }
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

/// The exec used when none is configured: every spawn fails with a message saying what to add.
#[derive(Debug)]
struct NoExec;

#[async_trait]
impl Exec for NoExec {
    async fn spawn(&self, _command: ExecCommand) -> Result<Child, ExecError> {
        Err(ExecError::Backend(
            "no exec configured: add one with HarnessBuilder::exec (e.g. agent_exec::LocalExec)".into(),
        ))
    }
}

/// One `start_session` attempt, run as its own task so a caller that goes away cannot leave a
/// half-started session behind.
struct Startup {
    session: SessionRef,
    options: Arc<SessionOptions>,
    provider: DynProvider,
    store: Option<DynStore>,
    exec: DynExec,
    reservation: Reservation,
    span: tracing::Span,
}

impl Startup {
    async fn run(self, caller: oneshot::Sender<Result<SessionRef>>) {
        let Startup { session, options, provider, store, exec, reservation, span } = self;
        let id = session.id.clone();

        // Phase 1: the reuse check and the provider open, bounded by `startup_timeout`.
        let (sink, sink_rx) = Sink::channel();
        let open = async {
            let replace = match &store {
                Some(store) => check_reuse(store, &id, options.reuse).await?,
                None => false,
            };
            let ctx = OpenContext::new(id.clone(), Arc::clone(&options), exec, sink);
            let opened = provider.open(ctx).await?;
            Ok::<_, Error>((replace, opened))
        };
        let (replace, opened) = match tokio::time::timeout(options.startup_timeout, open).await {
            Ok(Ok(opened)) => opened,
            Ok(Err(error)) => {
                // Release the ID before answering, so an immediate retry finds it free.
                drop(reservation);
                let _ = caller.send(Err(error));
                return;
            }
            Err(_) => {
                tracing::warn!(timeout = ?options.startup_timeout, "provider open timed out; torn down");
                drop(reservation);
                let _ = caller.send(Err(Error::StartupTimeout {
                    provider: session.provider.clone(),
                    timeout: options.startup_timeout,
                }));
                return;
            }
        };
        let Opened { session: runtime, provider_session_id, capabilities, .. } = opened;
        let capabilities = capabilities.unwrap_or_else(|| provider.capabilities(&options));

        // Phase 2: the initial commit, bounded by `startup_finalization_timeout`.
        let now = Timestamp::now();
        let snapshot = SessionSnapshot {
            id: id.clone(),
            provider: session.provider.clone(),
            status: SessionState::Idle,
            provider_session_id: provider_session_id.clone(),
            current_turn_id: None,
            cwd: options.cwd.clone().unwrap_or_default(),
            model: options.model.clone(),
            metadata: options.metadata.clone(),
            config_fingerprint: options.fingerprint(session.provider.as_str()),
            startup: Some(StartupMarker { attempt_id: EventId::generate().to_string(), acknowledged: false }),
            ended: None,
            durability: Durability::Durable,
            created_at: now,
            updated_at: now,
        };
        let ready = Arc::new(Event {
            schema_version: SCHEMA_VERSION,
            id: EventId::generate(),
            seq: 1,
            session_id: id.clone(),
            turn_id: None,
            provider: session.provider.clone(),
            at: now,
            kind: EventKind::SessionReady { provider_session_id: provider_session_id.clone() },
            raw: None,
        });
        let finalize_timeout = options.startup_finalization_timeout;
        let mut initial_events = vec![Arc::clone(&ready)];
        let (store, durability) = match store {
            None => (None, Durability::Disabled),
            Some(store) => {
                let mut batch = WriteBatch::new(id.clone());
                batch.delete_first = replace;
                batch.snapshot = Some(snapshot.clone());
                batch.events.push(Arc::clone(&ready));
                match tokio::time::timeout(finalize_timeout, store.write(&batch)).await {
                    Ok(Ok(())) => (Some(store), Durability::Durable),
                    outcome => {
                        // Undo what part of the write landed; the caller gets a clean slate.
                        let _ = tokio::time::timeout(finalize_timeout, store.delete_session(&id)).await;
                        let error = match outcome {
                            Ok(Err(error)) => Error::Store(error),
                            _ => Error::StartupFinalizationTimeout { timeout: finalize_timeout },
                        };
                        let degrade =
                            options.store_failure == StoreFailurePolicy::Degrade && matches!(error, Error::Store(_));
                        if !degrade {
                            close_bounded(runtime.as_ref(), finalize_timeout).await;
                            drop(reservation);
                            let _ = caller.send(Err(error));
                            return;
                        }
                        let reason = error.to_string();
                        tracing::error!(%reason, "initial store commit failed; the session runs live-only");
                        initial_events.push(Arc::new(Event {
                            schema_version: SCHEMA_VERSION,
                            id: EventId::generate(),
                            seq: 2,
                            session_id: id.clone(),
                            turn_id: None,
                            provider: session.provider.clone(),
                            at: Timestamp::now(),
                            kind: EventKind::StoreFailed {
                                reason: reason.clone(),
                                policy: StoreFailurePolicy::Degrade,
                            },
                            raw: None,
                        }));
                        (None, Durability::Degraded { reason, at: Timestamp::now() })
                    }
                }
            }
        };

        // Phase 3: the hand-off. The session is live once the caller holds its handle.
        let (commands_tx, commands_rx) = mpsc::channel(COMMAND_CAPACITY);
        let (exit_tx, exit_rx) = watch::channel(None);
        let handle = SessionHandle { session: session.clone(), tx: commands_tx, exit: exit_rx, store: store.clone() };
        let registry = Arc::downgrade(reservation.registry());
        let attempt = reservation.attempt();
        reservation.promote(handle);
        if caller.send(Ok(session.clone())).is_err() {
            // Nobody holds the handle: tear down. The stored snapshot keeps its unacknowledged
            // startup marker, so the ID is reclaimed by the next start.
            tracing::info!("caller went away during startup; session torn down");
            if let Some(registry) = registry.upgrade() {
                registry.remove(&id, attempt);
            }
            close_bounded(runtime.as_ref(), finalize_timeout).await;
            let _ = exit_tx.send(Some(ExitReason::Closed { reason: crate::session::CloseReason::Stopped }));
            return;
        }
        let actor = Actor::new(ActorParts {
            session,
            options,
            provider: runtime,
            capabilities,
            provider_session_id,
            store,
            durability,
            snapshot,
            initial_events,
            commands: commands_rx,
            sink: sink_rx,
            exit: exit_tx,
            registry,
            attempt,
            span,
        });
        actor.run().await;
    }
}

/// Applies the ID reuse rules against the stored snapshot. `Ok(true)` means the stored
/// aggregate is replaced (deleted in the same commit as the new snapshot).
async fn check_reuse(store: &DynStore, id: &SessionId, reuse: Reuse) -> Result<bool> {
    let Some(snapshot) = store.fetch_session(id).await? else {
        return Ok(false);
    };
    let abandoned =
        snapshot.startup.is_some() || matches!(snapshot.status, SessionState::Opening | SessionState::Finalizing);
    let replace =
        abandoned || reuse == Reuse::Replace || (reuse == Reuse::Closed && snapshot.status == SessionState::Closed);
    if replace {
        tracing::info!(status = %snapshot.status, abandoned, "replacing stored session");
        Ok(true)
    } else {
        Err(Error::SessionIdAlreadyUsed { id: id.clone(), status: snapshot.status })
    }
}

async fn close_bounded(runtime: &dyn crate::provider::ProviderSession, timeout: Duration) {
    if tokio::time::timeout(timeout, runtime.close()).await.is_err() {
        tracing::warn!(?timeout, "provider did not close in time; dropping it");
    }
}
