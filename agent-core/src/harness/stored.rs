//! What the harness knows of sessions and turns that are not in a live session's memory: ended
//! sessions (this harness's records, then the session's store), stored sessions (listed, read
//! back, purged), and the stored history of turns.

use std::sync::Arc;

use tokio::sync::watch;

use super::{AwaitError, Harness};
use crate::error::{Error, Result};
use crate::event::Event;
use crate::ids::{SessionId, TurnId};
use crate::request::{Request, RequestStatus};
use crate::runtime::subscription::{Grant, past_latest};
use crate::runtime::{Replay, SessionHandle, Subscription};
use crate::session::{ExitReason, SessionRef, SessionSnapshot, SessionState, StoredSession};
use crate::store::{DynStore, EventPager, EventQuery, Expected, StoreError, WriteBatch};
use crate::turn::{Turn, TurnOutcome, TurnStatus};

impl Harness {
    /// Sessions in the default store, each marked live or not (restart reconciliation).
    ///
    /// A snapshot that says a runtime holds the session while none does in this harness (its host
    /// was killed, or its store failed before the final write) reads back as
    /// [`SessionState::Abandoned`](crate::SessionState::Abandoned), with
    /// [`SessionSnapshot::ended`](crate::session::SessionSnapshot::ended) saying what is known.
    pub async fn list_stored_sessions(&self) -> Result<Vec<StoredSession>> {
        match &self.inner.store {
            Some(store) => self.list_stored_sessions_in(store).await,
            None => Ok(Vec::new()),
        }
    }

    /// Sessions in `store`, each marked live or not (see [`Harness::list_stored_sessions`]).
    pub async fn list_stored_sessions_in(&self, store: &DynStore) -> Result<Vec<StoredSession>> {
        let snapshots = store.list_sessions().await?;
        Ok(snapshots
            .into_iter()
            .map(|snapshot| {
                let live = self.inner.registry.get(&snapshot.id).is_some();
                let snapshot = if live { snapshot } else { self.read_back(snapshot) };
                StoredSession { live, session_id: snapshot.id.clone(), snapshot }
            })
            .collect())
    }

    /// Session `id` in `store`, marked live or not and read back as [`Harness::list_stored_sessions`]
    /// reads it (a snapshot whose runtime is gone is abandoned; one another harness sharing the
    /// store runs is as written); `None` when the store holds no snapshot of it.
    pub async fn stored_session_in(&self, store: &DynStore, id: &SessionId) -> Result<Option<StoredSession>> {
        let Some(snapshot) = store.fetch_session(id).await? else { return Ok(None) };
        let live = self.inner.registry.get(id).is_some();
        let snapshot = if live { snapshot } else { self.read_back(snapshot) };
        Ok(Some(StoredSession { live, session_id: id.clone(), snapshot }))
    }

    /// Deletes a stopped session's stored history from its store (the default store, or the
    /// custom store its last run in this harness used). Refuses a live ID, and one its store
    /// holds nothing of ([`Error::SessionNotFound`]) — unless this harness still remembers how
    /// it ended (an earlier purge deleted it and was dropped before it returned): that is
    /// forgotten, and the purge is `Ok`.
    pub async fn purge_session(&self, session: &SessionRef) -> Result<()> {
        match self.inner.store_of(&session.id) {
            Some(store) => self.purge_session_in(&store, session).await,
            None => {
                // Nothing stored: all there is to forget is how the session ended.
                self.refuse_live(&session.id)?;
                if self.inner.registry.exit_reason(&session.id).is_none() {
                    return Err(Error::SessionNotFound { id: session.id.clone() });
                }
                self.inner.forget(&session.id);
                Ok(())
            }
        }
    }

    /// Deletes a stopped session's stored history from `store`. Refuses a live ID, one another
    /// harness sharing the store holds live ([`Error::SessionLiveElsewhere`]), and an ID the
    /// store holds nothing of ([`Error::SessionNotFound`]). A stale snapshot (abandoned by a
    /// killed host) goes too. The delete commits only over the snapshot this call read, so a
    /// harness sharing the store that resumes the session meanwhile keeps it: the purge reads
    /// again and is refused as above. A snapshot that does not decode (damaged, or written by a
    /// newer release; [`StoreError::Corrupt`]) cannot say who holds it: it is purged unless this
    /// harness runs the ID, and unless it is rewritten before the delete commits.
    pub async fn purge_session_in(&self, store: &DynStore, session: &SessionRef) -> Result<()> {
        const ATTEMPTS: usize = 3;
        let id = &session.id;
        let mut conflict = None;
        for _ in 0..ATTEMPTS {
            self.refuse_live(id)?;
            let expect = match store.fetch_session(id).await {
                Ok(stored) => Expected::stored(stored),
                // Damaged, or written by a newer release: it names no holder, and goes as it is.
                Err(StoreError::Corrupt(_)) => Expected::Unreadable,
                Err(error) => return Err(error.into()),
            };
            match &expect {
                Expected::Snapshot(held) if let Some(pid) = self.inner.registry.holder(held) => {
                    return Err(Error::SessionLiveElsewhere { id: id.clone(), pid });
                }
                Expected::Absent if store.latest_seq(id).await?.is_none() => {
                    // Nothing stored, but remembered here: an earlier purge deleted it and its
                    // caller went away before it could forget the session. This one finishes.
                    if self.inner.registry.exit_reason(id).is_some() {
                        self.inner.forget(id);
                        return Ok(());
                    }
                    return Err(Error::SessionNotFound { id: id.clone() });
                }
                _ => {}
            }
            let mut purge = WriteBatch::new(id.clone());
            purge.delete_first = true;
            purge.expect = Some(expect);
            match store.write(&purge).await {
                Ok(()) => {
                    self.inner.forget(id);
                    return Ok(());
                }
                Err(StoreError::Conflict(reason)) => conflict = Some(reason),
                Err(error) => return Err(error.into()),
            }
        }
        let reason = conflict.unwrap_or_default();
        Err(Error::Store(StoreError::Conflict(format!("the session kept changing while it was purged: {reason}"))))
    }

    /// The PID of another harness sharing this session's store that holds it live, if one does
    /// (a store that cannot be read says nothing).
    pub(super) async fn held_elsewhere(&self, id: &SessionId) -> Option<u32> {
        let store = self.inner.store_of(id)?;
        let snapshot = store.fetch_session(id).await.ok()??;
        self.inner.registry.holder(&snapshot)
    }

    fn refuse_live(&self, id: &SessionId) -> Result<()> {
        if self.inner.registry.contains(id) {
            return Err(Error::SessionLive { id: id.clone() });
        }
        Ok(())
    }

    /// The error for a call on a session that is not live: [`Error::SessionLiveElsewhere`] when
    /// another harness sharing its store runs it now (even one this harness ran and stopped),
    /// [`Error::SessionClosed`] with how it ended when this harness or the session's store
    /// knows, [`Error::SessionNotFound`] otherwise (never started, purged, or only an unfinished
    /// startup attempt is stored).
    pub(super) async fn not_live(&self, id: &SessionId) -> Error {
        let not_found = || Error::SessionNotFound { id: id.clone() };
        let closed = |reason| Error::SessionClosed { id: id.clone(), reason };
        let registry = &self.inner.registry;
        let Some(store) = self.inner.store_of(id) else {
            return registry.exit_reason(id).map_or_else(not_found, closed);
        };
        match store.fetch_session(id).await {
            Ok(Some(snapshot)) if let Some(pid) = registry.holder(&snapshot) => {
                Error::SessionLiveElsewhere { id: id.clone(), pid }
            }
            Ok(Some(snapshot)) => self.stored_end(id, snapshot).map_or_else(not_found, closed),
            Ok(None) => registry.exit_reason(id).map_or_else(not_found, closed),
            Err(error) => registry.exit_reason(id).map_or_else(|| Error::Store(error), closed),
        }
    }

    /// How a session not live here ended: what this harness knows of its end, else what its
    /// stored snapshot says as it reads back (see [`Harness::read_back`]).
    fn stored_end(&self, id: &SessionId, snapshot: SessionSnapshot) -> Option<ExitReason> {
        self.inner.registry.ended_with(id, Some(&snapshot)).or_else(|| self.read_back(snapshot).ended)
    }

    /// A stored snapshot as it reads back while its session is not live here: a snapshot that
    /// says a runtime holds it is stale — its end was never recorded — so it reads as abandoned,
    /// with what this harness knows of its end if anything; unless another harness sharing the
    /// store holds it live, when it reads as written. So does one whose startup never completed
    /// (its marker still set: an initial commit that landed after its start failed), unless
    /// the start is still under way, here or in a harness sharing the store.
    pub(super) fn read_back(&self, mut snapshot: SessionSnapshot) -> SessionSnapshot {
        let starting_here = snapshot.startup.is_some() && self.inner.registry.contains(&snapshot.id);
        if snapshot.status.is_live() && !starting_here && self.inner.registry.holder(&snapshot).is_none() {
            let last_status = snapshot.status;
            snapshot.status = SessionState::Abandoned;
            let known = self.inner.registry.ended_with(&snapshot.id, Some(&snapshot));
            snapshot.ended = Some(known.unwrap_or(ExitReason::Abandoned { last_status }));
        } else if snapshot.status == SessionState::Closed && snapshot.ended.is_none() {
            // Written before ends were recorded: a clean close is all that is known.
            snapshot.ended = Some(ExitReason::Closed { reason: crate::session::CloseReason::Stopped });
        }
        snapshot
    }

    /// Replays a session that is not live (stopped, or from before a restart) from its store.
    /// `Replay::Latest` has nothing to follow: the not-live error, like any other operation on a
    /// stopped session. A session another harness sharing the store runs is
    /// [`Error::SessionLiveElsewhere`], but for a turn of it that has ended.
    pub(super) async fn stored_subscription(
        &self,
        session_id: SessionId,
        turn: Option<TurnId>,
        replay: Replay,
        for_stream: bool,
    ) -> Result<Subscription> {
        let store = self.inner.store_of(&session_id);
        let (Some(store), Some(_)) = (store, replay.after()) else {
            return Err(self.not_live(&session_id).await);
        };
        let Some(snapshot) = store.fetch_session(&session_id).await? else {
            return Err(self.not_live(&session_id).await);
        };
        // Another harness sharing the store runs it: what is stored is not the end of it, so a
        // replay that ends there would read as the session's end. A finished turn's is whole.
        let elsewhere = self.inner.registry.holder(&snapshot);
        let latest = store.latest_seq(&session_id).await?.unwrap_or(0);
        if let Replay::After(after) = replay
            && after > latest
        {
            return Err(past_latest(after, latest));
        }
        // How the session ended, as `status` reads it (abandoned by a host that died, closed),
        // for a stream of a turn it left unfinished; `NotLive` where no end is known.
        let ended = self.stored_end(&session_id, snapshot.clone());
        let (_, exit) = watch::channel(Some(ended.unwrap_or(ExitReason::NotLive)));
        let mut turn_ended = false;
        if let Some(turn) = &turn {
            let Some(stored) = store.fetch_turn(&session_id, turn).await? else {
                return Err(Error::TurnNotFound { session_id: session_id.clone(), turn_id: turn.clone() });
            };
            turn_ended = stored.status.is_terminal();
            if let Some(pid) = elsewhere.filter(|_| !stored.status.is_terminal()) {
                return Err(Error::SessionLiveElsewhere { id: session_id.clone(), pid });
            }
            let after = replay.after().unwrap_or(0);
            if turn_ended && ended_by(&store, &session_id, turn, after, for_stream).await? {
                return Ok(Subscription::new(session_id, Some(turn.clone()), Some(after), Grant::empty(after, exit)));
            }
        } else if let Some(pid) = elsewhere {
            return Err(Error::SessionLiveElsewhere { id: session_id.clone(), pid });
        }
        // The session's replay reaches the last event it published, stored or not (a degraded
        // run's are not), or fails saying which are missing; a turn's ends at its terminal.
        let upto = match &turn {
            None => latest.max(snapshot.published_seq.unwrap_or(0)),
            Some(_) => u64::MAX,
        };
        let grant = if turn_ended {
            Grant::stored_turn(Arc::clone(&store), exit)
        } else {
            Grant::stored(Arc::clone(&store), upto, exit)
        };
        Ok(Subscription::new(session_id, turn, replay.after(), grant))
    }

    /// A replay-only grant for a turn the live session no longer holds in memory.
    pub(super) async fn stored_turn_grant(
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
            None => Ok(Grant::empty(0, exit)),
            Some(after) if ended_by(&store, session_id, turn, after, for_stream).await? => {
                Ok(Grant::empty(after, exit))
            }
            Some(_) => Ok(Grant::stored_turn(store, exit)),
        }
    }

    /// The outcome of a turn of a session that is not live, from its store.
    ///
    /// A turn the store holds no end for is as unfinished as the session left it: running in
    /// another harness ([`Error::SessionLiveElsewhere`]), or cut short by the session's end
    /// ([`Error::SessionClosed`] when this harness or the stored snapshot knows it, as `status`
    /// does).
    pub(super) async fn stored_outcome(&self, turn: &Turn) -> Result<TurnOutcome, AwaitError> {
        let id = &turn.session_id;
        let Some(store) = self.inner.store_of(id) else { return Err(self.not_live(id).await.into()) };
        let Some(snapshot) = store.fetch_session(id).await.map_err(Error::from)? else {
            return Err(self.not_live(id).await.into());
        };
        match outcome_in(&store, id, &turn.id).await {
            Err(AwaitError::Failed(Error::ReplayUnavailable { reason })) => {
                if let Some(pid) = self.inner.registry.holder(&snapshot) {
                    return Err(Error::SessionLiveElsewhere { id: id.clone(), pid }.into());
                }
                // How the session ended, as `status` reads it: this harness's record, else the
                // stored snapshot's (an abandoned one included).
                let known = self.inner.registry.ended_with(id, Some(&snapshot));
                let ended = known.or_else(|| self.read_back(snapshot).ended);
                match ended {
                    Some(ended) => Err(Error::SessionClosed { id: id.clone(), reason: ended }.into()),
                    None => Err(Error::ReplayUnavailable { reason }.into()),
                }
            }
            other => other,
        }
    }
}

/// Whether a finished turn's replay from `after` has nothing to give: its terminal event, the
/// last of its events, is not after the cursor. A subscription then ends at once, as for a
/// finished turn the session still holds; a stream, which must end with the terminal event,
/// is [`Error::ReplayUnavailable`]. A turn whose last stored event is not its end goes on to a
/// replay, which reports what is missing.
async fn ended_by(store: &DynStore, session: &SessionId, turn: &TurnId, after: u64, for_stream: bool) -> Result<bool> {
    let Some(last) = store.last_turn_event(session, turn).await? else { return Ok(false) };
    if !last.is_terminal() || last.seq > after {
        return Ok(false);
    }
    if for_stream {
        return Err(Error::ReplayUnavailable {
            reason: format!(
                "the turn already finished; its terminal event (seq {}) is not after the cursor (seq {after})",
                last.seq
            ),
        });
    }
    Ok(true)
}

/// A turn the live session no longer holds and that has no store to look in.
pub(super) fn forgotten(session_id: &SessionId, turn: &TurnId, pruned: bool) -> Error {
    if pruned {
        Error::ReplayUnavailable {
            reason: format!(
                "turn `{turn}` was evicted from the completed-turn cache and no store holds it (the session has \
                 none, or its store stopped taking events)"
            ),
        }
    } else {
        Error::TurnNotFound { session_id: session_id.clone(), turn_id: turn.clone() }
    }
}

/// How `store` says `request` was settled, as the error an answer to it gets; `None` when
/// there is no store or it holds nothing of the request.
pub(super) async fn settled_in(store: Option<&DynStore>, request: &Request) -> Result<Option<Error>> {
    let Some(store) = store else { return Ok(None) };
    Ok(store.fetch_request(&request.session_id, &request.id).await?.as_ref().map(settled_error))
}

/// The error for answering a request the store says was settled.
fn settled_error(request: &Request) -> Error {
    match request.status {
        RequestStatus::Resolved => Error::AlreadyResolved { request_id: request.id.clone() },
        _ => Error::RequestExpired { request_id: request.id.clone() },
    }
}

/// A terminal event as `await_turn`'s result.
pub(super) fn outcome(event: Arc<Event>) -> Result<TurnOutcome, AwaitError> {
    let outcome = TurnOutcome::from_event(event)
        .ok_or_else(|| Error::ReplayUnavailable { reason: "the stored terminal event is not terminal".into() })?;
    match outcome.status {
        TurnStatus::Completed => Ok(outcome),
        _ => Err(AwaitError::Ended(Box::new(outcome))),
    }
}

/// A turn's outcome from its stored terminal event.
pub(super) async fn outcome_in(
    store: &DynStore,
    session: &SessionId,
    turn: &TurnId,
) -> Result<TurnOutcome, AwaitError> {
    match store.fetch_turn(session, turn).await.map_err(Error::from)? {
        None => return Err(Error::TurnNotFound { session_id: session.clone(), turn_id: turn.clone() }.into()),
        Some(stored) if !stored.status.is_terminal() => {
            return Err(Error::ReplayUnavailable {
                reason: format!("turn `{turn}` has no terminal record in the store"),
            }
            .into());
        }
        Some(_) => {}
    }
    // A turn's terminal event is its last; only a store that holds events after it is read
    // through from the start.
    if let Some(last) = store.last_turn_event(session, turn).await.map_err(Error::from)?
        && last.is_terminal()
    {
        return outcome(last);
    }
    let mut after = 0;
    let mut pager = EventPager::new();
    loop {
        let page = EventQuery::after(after).turn(turn.clone()).limit(pager.limit());
        let events = store.read_events(session, &page).await.map_err(Error::from)?;
        pager.after(&events);
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
