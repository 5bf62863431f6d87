//! One `start_session` attempt, run as its own task so a caller that goes away cannot leave a
//! half-started session behind.
//!
//! Phases: plan (the conversation to open and the ID reuse rules, against the store) → provider
//! `open` (both bounded by `startup_timeout`, both dropped at once when the caller goes away) →
//! the initial commit (bounded by `startup_finalization_timeout`) → the hand-off to the caller →
//! the session actor.

use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::FutureExt;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tracing::Span;

use crate::error::{Error, Result};
use crate::event::{Event, EventKind, ExpiryReason, SCHEMA_VERSION};
use crate::exec::DynExec;
use crate::ids::{EventId, SessionId};
use crate::options::{ConversationMode, SessionOptions, StoreFailurePolicy};
use crate::provider::{DynProvider, OpenContext, OpenConversation, Opened, ProviderMessage, ProviderSession, Sink};
use crate::request::RequestStatus;
use crate::runtime::actor::{Actor, ActorParts};
use crate::runtime::inbox::Inbox;
use crate::runtime::owner;
use crate::runtime::registry::{Registry, Reservation};
use crate::runtime::{COMMAND_CAPACITY, SessionHandle, write_batch};
use crate::session::{
    CloseReason, Durability, ExitReason, SessionOwner, SessionRef, SessionSnapshot, SessionState, StartupMarker,
};
use crate::store::{DynStore, Expected, StoreError, WriteBatch};
use crate::time::{Timestamp, deadline_after};
use crate::turn::{TurnResult, TurnStatus};

/// Everything one attempt needs.
mod stored;

use stored::{Plan, conflicted, plan, recheck, record_failed_resume, undo_initial_commit, write_over_commit};

pub(crate) struct Startup {
    pub(crate) session: SessionRef,
    pub(crate) options: Arc<SessionOptions>,
    pub(crate) provider: DynProvider,
    pub(crate) store: Option<DynStore>,
    pub(crate) exec: DynExec,
    pub(crate) reservation: Reservation,
    /// The harness's request handler (the session's own wins).
    pub(crate) request_handler: Option<crate::handler::DynRequestHandler>,
    pub(crate) span: Span,
}

/// How the attempt ended before the hand-off.
enum Abort {
    /// Nobody waits for an answer any more.
    CallerGone,
    /// Answer the caller with this error.
    Failed(Error),
}

impl From<Error> for Abort {
    fn from(error: Error) -> Self {
        Abort::Failed(error)
    }
}

impl Startup {
    /// The session's task: its startup, then its actor. Every way it ends by itself ends what
    /// the CLI left outside its process group; when the task is dropped before that (its
    /// runtime shut down under it), the drop asks for the same.
    pub(crate) fn task(self, caller: oneshot::Sender<Result<SessionRef>>) -> impl Future<Output = ()> + Send {
        let dropped = StraysOnDrop {
            armed: Some((Arc::clone(&self.exec), self.session.id.clone())),
            harness: self.reservation.registry().harness_number(),
        };
        self.run(caller).map(move |()| dropped.disarm())
    }

    async fn run(self, mut caller: oneshot::Sender<Result<SessionRef>>) {
        let Startup { session, options, provider, store, exec, reservation, request_handler, span } = self;
        let request_handler = options.request_handler.clone().or(request_handler);
        let id = session.id.clone();
        let finalize_timeout = options.startup_finalization_timeout;
        let processes = Arc::clone(&exec);
        let harness = reservation.registry().harness_number();

        // Phase 1: plan and open, bounded by `startup_timeout`, abandoned with the caller.
        let deadline = deadline_after(Instant::now(), options.startup_timeout);
        let (sink, mut sink_rx) = Sink::channel();
        let opening = async {
            let plan = tokio::select! {
                biased;
                () = caller.closed() => return Err(Abort::CallerGone),
                planned = tokio::time::timeout_at(deadline, plan(store.as_ref(), &session, &options, reservation.registry())) => {
                    planned.map_err(|_| timed_out(&session, &options))??
                }
            };
            let left_by = plan.left_by.as_deref().filter(|owner| owner::gone_process_of_this_boot(owner));
            if let Some(owner) = left_by {
                // Its own bound: a look that takes too long must not use up the open's time.
                let look = deadline.min(deadline_after(Instant::now(), finalize_timeout));
                tokio::select! {
                    biased;
                    () = caller.closed() => return Err(Abort::CallerGone),
                    () = end_abandoned(&exec, &id, owner, look) => {}
                }
            }
            let approvals = plan.resumed.as_ref().map(|r| r.session_approvals.clone()).unwrap_or_default();
            let ctx = OpenContext::new(id.clone(), Arc::clone(&options), exec, sink)
                .with_conversation(plan.conversation.clone())
                .with_session_approvals(approvals);
            let open = provider.open(ctx);
            tokio::pin!(open);
            // The provider reports through its sink while it opens: keep what it says for the
            // actor, and note a transport that went down under the open.
            let mut early = Vec::new();
            let mut lost = None;
            let opened = loop {
                tokio::select! {
                    biased;
                    () = caller.closed() => return Err(Abort::CallerGone),
                    Some(message) = sink_rx.recv() => note(message, &mut early, &mut lost),
                    opened = &mut open => break opened,
                    () = tokio::time::sleep_until(deadline) => return Err(timed_out(&session, &options).into()),
                }
            };
            while let Some(message) = sink_rx.try_recv() {
                note(message, &mut early, &mut lost);
            }
            Ok((plan, opened, early, lost))
        };
        let (plan, opened, early, lost) = match opening.await {
            Ok(opening) => opening,
            Err(Abort::CallerGone) => {
                // Dropping the open future tore down whatever it had started.
                tracing::info!("caller went away while the provider was opening; startup abandoned");
                end_strays(&processes, &id, harness, finalize_timeout).await;
                return;
            }
            Err(Abort::Failed(error)) => {
                if matches!(error, Error::StartupTimeout { .. }) {
                    tracing::warn!(timeout = ?options.startup_timeout, "provider open timed out; torn down");
                }
                // Release the ID and the store before answering, so an immediate retry finds the
                // ID free and a caller that closes the store next finds nothing holding it.
                end_strays(&processes, &id, harness, finalize_timeout).await;
                drop(reservation);
                drop((store, provider));
                let _ = caller.send(Err(error));
                return;
            }
        };
        let failure = match opened {
            Err(error) => Some((error, None)),
            Ok(opened) => match refuse_opened(&session, &plan, &opened, lost) {
                Some(error) => Some((error, Some(opened.session))),
                None => {
                    let startup = Opening {
                        session,
                        options,
                        provider,
                        store,
                        reservation,
                        span,
                        plan,
                        early,
                        sink_rx,
                        request_handler,
                        exec: processes,
                    };
                    return startup.finish(opened, caller).await;
                }
            },
        };
        let Some((error, runtime)) = failure else { return };
        if let Some(runtime) = runtime {
            close_bounded(runtime.as_ref(), finalize_timeout).await;
        }
        if let (Some(store), Some(resumed)) = (&store, &plan.resumed) {
            record_failed_resume(store, resumed, &plan, &session, &error, finalize_timeout).await;
        }
        end_strays(&processes, &id, harness, finalize_timeout).await;
        drop(reservation);
        drop((store, provider, processes));
        let _ = caller.send(Err(error));
    }
}

/// Ends what the provider's CLI started outside its process group in a start that did not become
/// a session (an open that failed or was abandoned, a session torn down before its hand-off), as
/// an ended session's close does: the open's teardown ended only the CLI's own group.
async fn end_strays(exec: &DynExec, id: &SessionId, harness: u64, timeout: Duration) {
    match tokio::time::timeout(timeout, exec.end_session_processes(id.as_str(), harness)).await {
        Ok(Ok(0)) => {}
        Ok(Ok(ended)) => tracing::info!(ended, "ended processes the failed start's CLI left outside its process group"),
        Ok(Err(error)) => tracing::warn!(%error, "could not look for processes the failed start's CLI left"),
        Err(_) => tracing::warn!(?timeout, "the look for processes the failed start's CLI left took too long"),
    }
}

/// Ends what the stored run of the session this start resumes or replaces left running, when
/// its host, `owner`, is gone (see
/// [`Exec::end_abandoned_processes`](crate::exec::Exec::end_abandoned_processes)), before the
/// session's CLI starts. A look that fails or is not done by `deadline` does not stop the
/// start: it is logged.
async fn end_abandoned(exec: &DynExec, id: &SessionId, owner: &SessionOwner, deadline: Instant) {
    let look = exec.end_abandoned_processes(id.as_str(), owner.pid, owner.harness);
    match tokio::time::timeout_at(deadline, look).await {
        Ok(Ok(0)) => {}
        Ok(Ok(ended)) => tracing::info!(ended, "ended processes a dead host left running for the session"),
        Ok(Err(error)) => tracing::warn!(%error, "could not look for processes a dead host left for the session"),
        Err(_) => {
            tracing::warn!("the look for processes a dead host left for the session took too long; not waited for")
        }
    }
}

/// Asks the exec to end the session's stray processes when dropped armed: the session's task
/// went away without ending by itself. Dropping cannot wait, so the request is only polled
/// once (see [`Exec::end_session_processes`](crate::exec::Exec::end_session_processes)).
struct StraysOnDrop {
    armed: Option<(DynExec, SessionId)>,
    harness: u64,
}

impl StraysOnDrop {
    fn disarm(mut self) {
        self.armed = None;
    }
}

impl Drop for StraysOnDrop {
    fn drop(&mut self) {
        if let Some((exec, id)) = self.armed.take() {
            let ending = exec.end_session_processes(id.as_str(), self.harness);
            let _ = std::pin::pin!(ending).poll(&mut std::task::Context::from_waker(std::task::Waker::noop()));
            tracing::debug!("the session's task was dropped; asked for its stray processes to end");
        }
    }
}

/// Sorts a message the provider sent while opening.
fn note(message: ProviderMessage, early: &mut Vec<ProviderMessage>, lost: &mut Option<String>) {
    match message {
        ProviderMessage::TransportDown { reason } => {
            lost.get_or_insert(reason);
        }
        other => early.push(other),
    }
}

fn timed_out(session: &SessionRef, options: &SessionOptions) -> Error {
    Error::StartupTimeout { provider: session.provider.clone(), timeout: options.startup_timeout }
}

/// Why an opened provider session cannot be handed out, if it cannot.
fn refuse_opened(session: &SessionRef, plan: &Plan, opened: &Opened, lost: Option<String>) -> Option<Error> {
    if let Some(reason) = lost {
        tracing::warn!(%reason, "provider transport went down while opening");
        return Some(Error::ProviderOpenFailed { provider: session.provider.clone(), reason });
    }
    if let OpenConversation::Resume { provider_session_id: wanted } = &plan.conversation
        && opened.provider_session_id.as_deref() != Some(wanted.as_str())
    {
        let got = opened.provider_session_id.as_deref().unwrap_or("none");
        return Some(Error::ResumeFailed {
            mode: ConversationMode::Resume,
            reason: format!("provider `{}` opened conversation `{got}`, not `{wanted}`", session.provider),
        });
    }
    None
}

/// The rest of a startup whose provider opened: the initial commit and the hand-off.
struct Opening {
    session: SessionRef,
    options: Arc<SessionOptions>,
    provider: DynProvider,
    store: Option<DynStore>,
    reservation: Reservation,
    span: Span,
    plan: Plan,
    early: Vec<ProviderMessage>,
    sink_rx: Inbox,
    request_handler: Option<crate::handler::DynRequestHandler>,
    exec: crate::exec::DynExec,
}

impl Opening {
    async fn finish(self, opened: Opened, caller: oneshot::Sender<Result<SessionRef>>) {
        let Opening {
            session,
            options,
            provider,
            store,
            reservation,
            span,
            plan,
            early,
            sink_rx,
            request_handler,
            exec: processes,
        } = self;
        let id = session.id.clone();
        let harness = reservation.registry().harness_number();
        let Opened { session: runtime, provider_session_id, capabilities, credentials, .. } = opened;
        let capabilities = capabilities.unwrap_or_else(|| provider.capabilities(&options));
        let finalize_timeout = options.startup_finalization_timeout;

        // Phase 2: the initial commit, bounded by `startup_finalization_timeout`.
        let now = Timestamp::now();
        let snapshot = match &plan.resumed {
            Some(resumed) => {
                let mut snapshot = resumed.snapshot.clone();
                snapshot.status = SessionState::Idle;
                snapshot.current_turn_id = None;
                snapshot.startup = None;
                snapshot.ended = None;
                snapshot.durability = Durability::Durable;
                snapshot.published_seq = None;
                snapshot.cwd = options.cwd.clone().unwrap_or_default();
                snapshot.model = options.model.clone();
                snapshot.metadata = options.metadata.clone();
                snapshot.config_fingerprint = options.fingerprint(session.provider.as_str());
                snapshot.updated_at = now;
                snapshot
            }
            None => SessionSnapshot {
                id: id.clone(),
                provider: session.provider.clone(),
                status: SessionState::Idle,
                provider_session_id: None,
                current_turn_id: None,
                cwd: options.cwd.clone().unwrap_or_default(),
                model: options.model.clone(),
                metadata: options.metadata.clone(),
                config_fingerprint: options.fingerprint(session.provider.as_str()),
                startup: Some(StartupMarker { attempt_id: EventId::generate().to_string(), acknowledged: false }),
                owner: None,
                ended: None,
                durability: Durability::Durable,
                published_seq: None,
                created_at: now,
                updated_at: now,
            },
        };
        // Written with every run, so a harness sharing the store leaves the session alone.
        let owner = reservation.registry().owner();
        let snapshot = SessionSnapshot { provider_session_id: provider_session_id.clone(), owner, ..snapshot };
        let mut journal = Journal::new(&session, plan.resumed.as_ref().map_or(0, |r| r.latest_seq));
        let mut batch = WriteBatch::new(id.clone());
        if let Some(resumed) = &plan.resumed {
            close_stale(resumed, &mut journal, &mut batch);
        }
        journal.push(None, EventKind::SessionReady { provider_session_id: provider_session_id.clone() });
        match &plan.conversation {
            OpenConversation::New => {}
            OpenConversation::Resume { provider_session_id } => {
                journal.push(None, EventKind::ConversationResumed { provider_session_id: provider_session_id.clone() })
            }
            OpenConversation::Fork { provider_session_id } => journal.push(
                None,
                EventKind::ConversationForked {
                    from_provider_session_id: provider_session_id.clone(),
                    from_session: plan.forked_from.clone(),
                },
            ),
        }
        if let Some(message) = plan.resumed.as_ref().and_then(|r| settings_changed(&r.snapshot, &snapshot)) {
            journal.push(None, EventKind::Warning { message });
        }
        let home_store = store.clone();
        let (store, durability) = match store {
            None => (None, Durability::Disabled),
            Some(store) => {
                // The open took time: what the plan saw of the stored session may be stale.
                let recheck = recheck(&store, &session, &plan, &options, reservation.registry());
                let checked = tokio::time::timeout(finalize_timeout, recheck)
                    .await
                    .unwrap_or(Err(Error::StartupFinalizationTimeout { timeout: finalize_timeout }));
                let expect = match checked {
                    Ok(expect) => expect,
                    Err(error) => {
                        close_bounded(runtime.as_ref(), finalize_timeout).await;
                        end_strays(&processes, &id, harness, finalize_timeout).await;
                        drop(reservation);
                        let _ = caller.send(Err(error));
                        return;
                    }
                };
                // A new session replaces the snapshot it found; a resumed one goes on from it.
                batch.delete_first = plan.resumed.is_none() && matches!(expect, Expected::Snapshot(_));
                // Commits only over what the recheck saw: a harness sharing the store that took
                // the session since then wins, and this start fails.
                batch.expect = Some(expect);
                batch.snapshot = Some(snapshot.clone());
                batch.events = journal.events.clone();
                match tokio::time::timeout(finalize_timeout, write_batch(&store, &batch)).await {
                    Ok(Ok(())) => (Some(store), Durability::Durable),
                    outcome => {
                        // A failed write changed nothing; a timed-out one may have landed: undo it.
                        if outcome.is_err() {
                            undo_initial_commit(&store, &snapshot, plan.resumed.as_ref(), finalize_timeout).await;
                        }
                        let error = match outcome {
                            // Another harness wrote this session meanwhile: never run beside it.
                            Ok(Err(StoreError::Conflict(reason))) => {
                                conflicted(&store, &id, plan.resumed.is_some(), reservation.registry(), reason).await
                            }
                            Ok(Err(error)) => Error::Store(error),
                            _ => Error::StartupFinalizationTimeout { timeout: finalize_timeout },
                        };
                        let degrade = options.store_failure == StoreFailurePolicy::Degrade
                            && matches!(error, Error::Store(ref e) if !matches!(e, StoreError::Conflict(_)));
                        if !degrade {
                            close_bounded(runtime.as_ref(), finalize_timeout).await;
                            end_strays(&processes, &id, harness, finalize_timeout).await;
                            drop(reservation);
                            let _ = caller.send(Err(error));
                            return;
                        }
                        let reason = error.to_string();
                        tracing::error!(%reason, "initial store commit failed; the session runs live-only");
                        let policy = StoreFailurePolicy::Degrade;
                        journal.push(None, EventKind::StoreFailed { reason: reason.clone(), policy });
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
            // Nobody holds the handle: tear down. A new session is taken back (its ID free
            // again, and a store's retention slot with it; should that fail, its unacknowledged
            // startup marker lets the next start reclaim the ID); a resumed one is closed again,
            // its history intact.
            tracing::info!("caller went away during startup; session torn down");
            // Written while the ID is still held, so a retry under it finds what this leaves,
            // not what it is about to take away or close; and only over this commit.
            let reason = ExitReason::Closed { reason: CloseReason::Stopped };
            match (&store, &plan.resumed) {
                (Some(store), None) => undo_initial_commit(store, &snapshot, None, finalize_timeout).await,
                (Some(store), Some(_)) => {
                    let mut closed = snapshot.clone();
                    closed.status = SessionState::Closed;
                    closed.ended = Some(reason.clone());
                    closed.updated_at = Timestamp::now();
                    let mut batch = WriteBatch::new(id.clone());
                    batch.snapshot = Some(closed);
                    batch.events = vec![journal.event(None, EventKind::SessionClosed { reason: CloseReason::Stopped })];
                    write_over_commit(store, &snapshot, batch, finalize_timeout).await;
                }
                (None, _) => {}
            }
            // The provider goes before the ID is free, as at a session's end: a retry under it
            // must not meet the CLI (or its hold on the conversation) still there. One that
            // panics while closing still lets the ID go.
            let closed = std::panic::AssertUnwindSafe(close_bounded(runtime.as_ref(), finalize_timeout));
            if closed.catch_unwind().await.is_err() {
                tracing::error!("the provider panicked while closing; dropping it");
            }
            drop(runtime);
            end_strays(&processes, &id, harness, finalize_timeout).await;
            if let Some(registry) = registry.upgrade() {
                registry.remove(&id, attempt);
            }
            let _ = exit_tx.send(Some(reason));
            return;
        }
        let crash = Crash { registry: registry.clone(), exec: Arc::clone(&processes), harness, finalize_timeout };
        let actor = Actor::new(ActorParts {
            session,
            options,
            provider: runtime,
            capabilities,
            provider_session_id,
            store,
            home_store,
            durability,
            snapshot,
            initial_events: journal.events,
            early_messages: early,
            request_handler,
            commands: commands_rx,
            sink: sink_rx,
            exit: exit_tx,
            registry,
            attempt,
            span,
            exec: processes,
            credentials,
        });
        run_guarded(actor.run(), crash, id, attempt).await;
    }
}

/// What a crashed session's end needs besides its ID.
struct Crash {
    registry: Weak<Registry>,
    /// Where the session's processes run, to end those its CLI left outside its group.
    exec: DynExec,
    harness: u64,
    finalize_timeout: Duration,
}

/// Runs a session's actor. A bug that panics it must not keep the session's ID and its
/// `max_sessions` slot, nor leave what the CLI started outside its process group: the session
/// ends as crashed. Unwinding dropped the provider session (killing its process group) and the
/// exit sender (ending subscriptions and monitors); the processes stamped for the session that
/// still run are ended next, as after a close; a stored snapshot left open reads back as ended
/// with this reason. What the panic said went to the panic hook: it may quote anything, so it
/// goes no further.
///
/// A combinator, not an `async fn`: the actor's future is most of a session's memory, and an
/// `async fn` taking it would keep room for it twice (its argument and the awaited copy).
fn run_guarded(actor: impl Future<Output = ()>, crash: Crash, id: SessionId, attempt: u64) -> impl Future<Output = ()> {
    std::panic::AssertUnwindSafe(actor).catch_unwind().then(move |ended| async move {
        if ended.is_err() {
            let reason = ExitReason::Crashed { reason: "the session's task panicked".into() };
            tracing::error!(%reason, "session ended");
            end_strays(&crash.exec, &id, crash.harness, crash.finalize_timeout).await;
            if let Some(registry) = crash.registry.upgrade() {
                // What the actor published is gone with it; its store has what was committed.
                registry.finish(&id, attempt, reason, 0);
            }
        }
    })
}

/// The events a startup sequences before the actor takes over.
struct Journal {
    session: SessionRef,
    next_seq: u64,
    events: Vec<Arc<Event>>,
}

impl Journal {
    /// A journal continuing after `latest_seq` (0 for a new session).
    fn new(session: &SessionRef, latest_seq: u64) -> Self {
        Journal { session: session.clone(), next_seq: latest_seq + 1, events: Vec::new() }
    }

    fn event(&mut self, turn: Option<crate::ids::TurnId>, kind: EventKind) -> Arc<Event> {
        let seq = self.next_seq;
        self.next_seq += 1;
        Arc::new(Event {
            schema_version: SCHEMA_VERSION,
            id: EventId::generate(),
            seq,
            session_id: self.session.id.clone(),
            turn_id: turn,
            provider: self.session.provider.clone(),
            at: Timestamp::now(),
            kind,
            raw: None,
        })
    }

    fn push(&mut self, turn: Option<crate::ids::TurnId>, kind: EventKind) {
        let event = self.event(turn, kind);
        self.events.push(event);
    }
}

/// What a resume under the session's own ID changed of its last run's settings (`before`, the
/// stored snapshot) in `after`, the new run's: a resume runs with the options given to it, and
/// one that left out the system prompt or a policy the session ran with must not go unnoticed.
/// The model and cwd are named; the rest is known only through the configuration fingerprint.
fn settings_changed(before: &SessionSnapshot, after: &SessionSnapshot) -> Option<String> {
    if before.config_fingerprint == after.config_fingerprint {
        return None;
    }
    let shown = |value: Option<&str>| value.map_or_else(|| "the provider's default".to_owned(), |v| format!("`{v}`"));
    let mut changes = Vec::new();
    if before.model != after.model {
        changes.push(format!("model {} → {}", shown(before.model.as_deref()), shown(after.model.as_deref())));
    }
    if before.cwd != after.cwd {
        changes.push(format!("cwd `{}` → `{}`", before.cwd.display(), after.cwd.display()));
    }
    if changes.is_empty() {
        changes.push(
            "its system prompt, approval policy, sandbox, MCP servers, skills, environment variable names, \
             provider option types or auth mode"
                .to_owned(),
        );
    }
    Some(format!(
        "resumed with other settings than its last run ({}): a resume runs with the options given to it, not the ones \
         the session ran with before",
        changes.join("; ")
    ))
}

/// Ends what a killed host left open in the resumed session, into `batch` and `journal`: its
/// pending requests expire (`session_closed`), then the turn it left running is interrupted.
/// A resume records it whether the conversation then opens or not: that run is over either way.
fn close_stale(resumed: &stored::Resumed, journal: &mut Journal, batch: &mut WriteBatch) {
    for mut request in resumed.stale_requests.iter().cloned() {
        let reason = ExpiryReason::SessionClosed;
        request.status = RequestStatus::Expired;
        request.metadata.insert("expiration_reason".into(), serde_json::to_value(reason).unwrap_or_default());
        let expired = EventKind::RequestExpired { request_id: request.id.clone(), reason };
        journal.push(Some(request.turn_id.clone()), expired);
        batch.requests.push(request);
    }
    if let Some(mut stale) = resumed.stale_turn.clone() {
        let result = TurnResult::reason("the session's runtime ended during the turn");
        stale.status = TurnStatus::Interrupted;
        stale.finished_at = Some(Timestamp::now());
        stale.result = Some(result.clone());
        journal.push(Some(stale.id.clone()), EventKind::terminal(TurnStatus::Interrupted, result));
        batch.turns.push(stale);
    }
}

/// Closes a provider session within `timeout`; dropping it afterwards kills what is left.
pub(crate) async fn close_bounded(runtime: &dyn ProviderSession, timeout: Duration) {
    if tokio::time::timeout(timeout, runtime.close()).await.is_err() {
        tracing::warn!(?timeout, "provider did not close in time; dropping it");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::ProviderId;

    /// A registry holding session `s` live, and the attempt it is live under.
    fn live_session(max_sessions: Option<usize>) -> (Arc<Registry>, SessionId, u64) {
        let registry = Registry::new(max_sessions);
        let id = SessionId::new("s").unwrap();
        let reservation = registry.reserve(&id).unwrap();
        let attempt = reservation.attempt();
        let (tx, _) = mpsc::channel(1);
        let (_, exit) = watch::channel(None);
        let session = SessionRef { provider: ProviderId::new("p"), id: id.clone() };
        reservation.promote(SessionHandle { session, tx, exit, store: None });
        (registry, id, attempt)
    }

    /// An exec that records which sessions' processes it was asked to end.
    #[derive(Debug, Default)]
    struct Ends(std::sync::Mutex<Vec<(String, u64)>>);

    #[async_trait::async_trait]
    impl crate::exec::Exec for Ends {
        async fn spawn(&self, command: crate::exec::Command) -> Result<crate::exec::Child, crate::exec::ExecError> {
            Err(crate::exec::ExecError::ProgramNotFound { program: command.program, searched_path: false })
        }

        async fn end_session_processes(&self, session: &str, harness: u64) -> Result<usize, crate::exec::ExecError> {
            self.0.lock().unwrap().push((session.to_owned(), harness));
            Ok(1)
        }
    }

    fn crash(registry: &Arc<Registry>, exec: &Arc<Ends>) -> Crash {
        let exec: DynExec = exec.clone();
        Crash { registry: Arc::downgrade(registry), exec, harness: 7, finalize_timeout: Duration::from_secs(1) }
    }

    /// The room a future of `function`'s reserves, without calling it.
    fn future_size<A, B, F: Future>(_: fn(A, B) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    /// A live session's task is allocated whole when it is spawned, and its bytes are copied
    /// in: its size is memory every idle session keeps (about 10 KB of the ~31 KiB measured per
    /// idle session). The actor once kept room for itself three times and for its shutdown
    /// inline, which made it 20 KB.
    #[test]
    fn a_session_task_reserves_little_memory() {
        fn actor_size<F: Future>(_: fn(crate::runtime::actor::Actor) -> F) -> usize {
            std::mem::size_of::<F>()
        }
        let actor = std::mem::size_of::<crate::runtime::actor::Actor>();
        let running = actor_size(crate::runtime::actor::Actor::run);
        assert!(running <= actor + 1024, "the running actor takes {running} bytes for its {actor}");
        let task = future_size(Startup::run);
        assert!(task <= 12 * 1024, "a session's task takes {task} bytes");
    }

    #[tokio::test]
    async fn a_panicked_actor_gives_back_its_id_and_slot_and_ends_as_crashed() {
        let (registry, id, attempt) = live_session(Some(1));
        assert!(matches!(registry.reserve(&SessionId::new("t").unwrap()), Err(Error::CapacityReached { limit: 1 })));
        let exec = Arc::new(Ends::default());

        run_guarded(async { panic!("a bug in the actor") }, crash(&registry, &exec), id.clone(), attempt).await;

        // What its CLI left outside its process group is ended too.
        assert_eq!(*exec.0.lock().unwrap(), [("s".to_owned(), 7)]);
        assert!(!registry.contains(&id));
        assert!(
            matches!(registry.exit_reason(&id), Some(ExitReason::Crashed { ref reason }) if reason == "the session's task panicked"),
            "{:?}",
            registry.exit_reason(&id)
        );
        registry.reserve(&SessionId::new("t").unwrap()).expect("the slot is free again");
    }

    #[tokio::test]
    async fn an_actor_that_ends_normally_is_left_to_deregister_itself() {
        let (registry, id, attempt) = live_session(None);

        let exec = Arc::new(Ends::default());

        run_guarded(async {}, crash(&registry, &exec), id.clone(), attempt).await;

        assert!(exec.0.lock().unwrap().is_empty(), "its shutdown ends the session's processes");
        assert!(registry.contains(&id), "only the actor's own shutdown removes it");
        assert_eq!(registry.exit_reason(&id), None);
    }
}
