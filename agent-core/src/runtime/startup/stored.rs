//! The store's side of a start: what it holds of the session (the conversation to open, the
//! ID reuse rules, a resumed session's history), the recheck just before the initial commit and
//! what that commit expects, and the records a failed start leaves.

use std::time::Duration;

use super::Journal;
use crate::error::{Error, Result};
use crate::event::EventKind;
use crate::ids::SessionId;
use crate::options::{Conversation, ConversationMode, ConversationSource, Reuse, SessionOptions};
use crate::provider::OpenConversation;
use crate::request::{RequestStatus, Scope};
use crate::runtime::registry::Registry;
use crate::runtime::write_batch;
use crate::session::{SessionOwner, SessionRef, SessionSnapshot, SessionState};
use crate::store::{DynStore, Expected, RequestQuery, StoreError, WriteBatch};

/// What the store says about the session before anything is opened. (Whether the initial
/// commit replaces a stored aggregate is decided again just before it: see [`recheck`].)
pub(super) struct Plan {
    pub(super) conversation: OpenConversation,
    /// Resuming a stored session under its own ID: its history continues.
    pub(super) resumed: Option<Resumed>,
    /// The stored session a fork branches from, when named by session.
    pub(super) forked_from: Option<SessionId>,
    /// Who ran the stored run of this ID that the start resumes or replaces: when that host is
    /// gone, what it left running for the session is ended before the CLI starts (a host
    /// killed even while it closed the session may have left some).
    pub(super) left_by: Option<Box<SessionOwner>>,
}

pub(super) struct Resumed {
    pub(super) snapshot: SessionSnapshot,
    pub(super) latest_seq: u64,
    /// Its requests approved for the whole session, for the provider to restore.
    pub(super) session_approvals: Vec<crate::request::Request>,
    /// The turn the stored snapshot was left running (a killed host), to be recorded interrupted.
    pub(super) stale_turn: Option<crate::turn::Turn>,
    /// Requests left pending by that host, to be recorded expired before it.
    pub(super) stale_requests: Vec<crate::request::Request>,
}

/// Resolves the conversation to open and applies the ID reuse rules.
pub(super) async fn plan(
    store: Option<&DynStore>,
    session: &SessionRef,
    options: &SessionOptions,
    registry: &Registry,
) -> Result<Plan> {
    let id = &session.id;
    // The reuse rules refuse an ID before anything is spawned; `recheck` applies them again.
    let reuse = || replaces(store, id, options.reuse, registry);
    let plan = |conversation, left_by| Plan { conversation, resumed: None, forked_from: None, left_by };
    match &options.conversation {
        Conversation::New => {
            let left_by = reuse().await?;
            Ok(plan(OpenConversation::New, left_by))
        }
        Conversation::Resume(ConversationSource::Provider(provider_session_id)) => {
            let left_by = reuse().await?;
            Ok(plan(OpenConversation::Resume { provider_session_id: provider_session_id.clone() }, left_by))
        }
        Conversation::Fork(ConversationSource::Provider(provider_session_id)) => {
            let left_by = reuse().await?;
            Ok(plan(OpenConversation::Fork { provider_session_id: provider_session_id.clone() }, left_by))
        }
        Conversation::Resume(ConversationSource::Session(source)) => {
            // `SessionOptions::validate` made sure `source` is this session's own ID.
            let store = needs_store(store, ConversationMode::Resume)?;
            let (snapshot, provider_session_id) =
                stored_source(store, session, source, ConversationMode::Resume).await?;
            if let Some(pid) = registry.holder(&snapshot) {
                return Err(Error::SessionLiveElsewhere { id: id.clone(), pid });
            }
            // A degraded run published past what the store holds: its seqs are taken. Its final
            // snapshot says how far, unless the store failed for that too; this harness's record
            // of the run does.
            let published = snapshot.published_seq.unwrap_or(0).max(registry.published_seq(id, &snapshot));
            let latest_seq = store.latest_seq(id).await?.unwrap_or(0).max(published);
            let stale_turn = match &snapshot.current_turn_id {
                Some(turn) => store.fetch_turn(id, turn).await?.filter(|t| !t.status.is_terminal()),
                None => None,
            };
            let session_approvals = store
                .read_requests(id, &RequestQuery::all().status(RequestStatus::Resolved))
                .await?
                .into_iter()
                .filter(|r| r.response.as_ref().is_some_and(|r| r.scope() == Some(Scope::Session)))
                .collect();
            let stale_requests = store.read_requests(id, &RequestQuery::all().status(RequestStatus::Pending)).await?;
            Ok(Plan {
                conversation: OpenConversation::Resume { provider_session_id },
                left_by: snapshot.owner.clone(),
                resumed: Some(Resumed { snapshot, latest_seq, stale_turn, stale_requests, session_approvals }),
                forked_from: None,
            })
        }
        Conversation::Fork(ConversationSource::Session(source)) => {
            let store = needs_store(store, ConversationMode::Fork)?;
            let (_, provider_session_id) = stored_source(store, session, source, ConversationMode::Fork).await?;
            let left_by = reuse().await?;
            Ok(Plan {
                conversation: OpenConversation::Fork { provider_session_id },
                resumed: None,
                forked_from: Some(source.clone()),
                left_by,
            })
        }
    }
}

/// Applies the ID reuse rules ([`check_reuse`]) for a start that does not continue the stored
/// session; returns who ran the stored run it replaces.
async fn replaces(
    store: Option<&DynStore>,
    id: &SessionId,
    reuse: Reuse,
    registry: &Registry,
) -> Result<Option<Box<SessionOwner>>> {
    let Some(store) = store else { return Ok(None) };
    Ok(match check_reuse(store, id, reuse, registry).await? {
        Expected::Snapshot(replaced) => replaced.owner,
        Expected::Absent | Expected::Unreadable => None,
    })
}

fn needs_store(store: Option<&DynStore>, mode: ConversationMode) -> Result<&DynStore> {
    store.ok_or_else(|| Error::invalid("conversation", format!("to {mode} a stored session the session needs a store")))
}

/// The stored snapshot of a session to resume or fork from, and its provider conversation.
async fn stored_source(
    store: &DynStore,
    session: &SessionRef,
    source: &SessionId,
    mode: ConversationMode,
) -> Result<(SessionSnapshot, String)> {
    let failed = |reason: String| Error::ResumeFailed { mode, reason };
    let Some(snapshot) = store.fetch_session(source).await? else {
        return Err(failed(format!("the store has no session `{source}`")));
    };
    if snapshot.provider != session.provider {
        return Err(failed(format!(
            "session `{source}` ran on provider `{}`, not `{}`",
            snapshot.provider, session.provider
        )));
    }
    let Some(provider_session_id) = snapshot.provider_session_id.clone() else {
        return Err(failed(format!("session `{source}` has no provider conversation recorded")));
    };
    if let Some(problem) = crate::options::provider_conversation_problem(&provider_session_id) {
        return Err(failed(format!("session `{source}` records a provider conversation ID that {problem}")));
    }
    Ok((snapshot, provider_session_id))
}

/// Applies the ID reuse rules against the stored snapshot. Returns what the initial commit
/// expects to find stored: nothing, or the snapshot it replaces (the stored aggregate is deleted
/// in the same commit as the new snapshot is written).
///
/// The caller holds the ID's reservation, so a snapshot that says a runtime holds it is stale
/// (its host died) and reads back as abandoned — unless another harness sharing the store
/// holds it live ([`Error::SessionLiveElsewhere`], whatever `reuse` says).
pub(super) async fn check_reuse(
    store: &DynStore,
    id: &SessionId,
    reuse: Reuse,
    registry: &Registry,
) -> Result<Expected> {
    let Some(snapshot) = store.fetch_session(id).await? else {
        return Ok(Expected::Absent);
    };
    if let Some(pid) = registry.holder(&snapshot) {
        return Err(Error::SessionLiveElsewhere { id: id.clone(), pid });
    }
    let unacknowledged =
        snapshot.startup.is_some() || matches!(snapshot.status, SessionState::Opening | SessionState::Finalizing);
    let status = if snapshot.is_open() { SessionState::Abandoned } else { snapshot.status };
    let replace =
        unacknowledged || reuse == Reuse::Replace || (reuse == Reuse::Closed && status == SessionState::Closed);
    if replace {
        tracing::info!(%status, unacknowledged, "replacing stored session");
        Ok(Expected::Snapshot(Box::new(snapshot)))
    } else {
        Err(Error::SessionIdAlreadyUsed { id: id.clone(), status })
    }
}

/// Checks the stored session again just before the initial commit, against another harness
/// sharing the store that started, resumed or purged it while the provider opened: one that
/// holds it live → [`Error::SessionLiveElsewhere`]; a resumed session that changed (purged,
/// or resumed and written elsewhere) → [`Error::ResumeFailed`]; otherwise the reuse rules
/// again, against what is stored now. Returns what the commit expects to find stored, which the
/// store checks in the commit's own transaction.
pub(super) async fn recheck(
    store: &DynStore,
    session: &SessionRef,
    plan: &Plan,
    options: &SessionOptions,
    registry: &Registry,
) -> Result<Expected> {
    let id = &session.id;
    let Some(resumed) = &plan.resumed else {
        return check_reuse(store, id, options.reuse, registry).await;
    };
    let stored = store.fetch_session(id).await?;
    if let Some(pid) = stored.as_ref().and_then(|snapshot| registry.holder(snapshot)) {
        return Err(Error::SessionLiveElsewhere { id: id.clone(), pid });
    }
    let unchanged = stored.as_ref().is_some_and(|snapshot| {
        snapshot.updated_at == resumed.snapshot.updated_at && snapshot.owner == resumed.snapshot.owner
    });
    if !unchanged {
        let what = if stored.is_none() { "purged" } else { "written by another harness" };
        return Err(Error::ResumeFailed {
            mode: ConversationMode::Resume,
            reason: format!("session `{id}` was {what} while it was being resumed; nothing was committed"),
        });
    }
    Ok(Expected::stored(stored))
}

/// The error for an initial commit the store refused as a conflict: another harness sharing the
/// store wrote the session since the recheck. [`Error::SessionLiveElsewhere`] when it holds it
/// live; [`Error::ResumeFailed`] for a resume (the session it resumed is gone or moved on);
/// [`StoreError::Conflict`] otherwise.
pub(super) async fn conflicted(
    store: &DynStore,
    id: &SessionId,
    resuming: bool,
    registry: &Registry,
    reason: String,
) -> Error {
    match store.fetch_session(id).await {
        Ok(Some(snapshot)) if let Some(pid) = registry.holder(&snapshot) => {
            Error::SessionLiveElsewhere { id: id.clone(), pid }
        }
        _ if resuming => Error::ResumeFailed {
            mode: ConversationMode::Resume,
            reason: format!(
                "session `{id}` was purged or written by another harness while it was being resumed; \
                 nothing was committed ({reason})"
            ),
        },
        _ => Error::Store(StoreError::Conflict(reason)),
    }
}

/// Records in a stored session's history that resuming it failed, after ending what a killed
/// host left open in it as a resume that opens does (its pending requests expire, its running
/// turn is interrupted: that run is over either way) — only over the snapshot the resume read:
/// a session another harness resumed, replaced or purged meanwhile is not this one's to write
/// (a record appended to a replaced session's history would take a seq its new run has yet to
/// reach).
pub(super) async fn record_failed_resume(
    store: &DynStore,
    resumed: &Resumed,
    plan: &Plan,
    session: &SessionRef,
    error: &Error,
    timeout: Duration,
) {
    let provider_session_id = match &plan.conversation {
        OpenConversation::Resume { provider_session_id } => Some(provider_session_id.clone()),
        _ => None,
    };
    let mut journal = Journal::new(session, resumed.latest_seq);
    let mut batch = WriteBatch::new(session.id.clone());
    super::close_stale(resumed, &mut journal, &mut batch);
    let kind = EventKind::ConversationFailed {
        mode: ConversationMode::Resume,
        provider_session_id,
        reason: error.to_string(),
    };
    journal.push(None, kind);
    batch.events = std::mem::take(&mut journal.events);
    batch.expect = Some(Expected::Snapshot(Box::new(resumed.snapshot.clone())));
    match tokio::time::timeout(timeout, write_batch(store, &batch)).await {
        Ok(Ok(())) => {}
        Ok(Err(StoreError::Conflict(reason))) => {
            tracing::info!(%reason, "the session changed meanwhile; the failed resume is not recorded")
        }
        Ok(Err(error)) => tracing::warn!(%error, "could not record the failed resume"),
        Err(_) => tracing::warn!(?timeout, "recording the failed resume timed out"),
    }
}

/// Takes back an initial commit whose outcome is unknown (it timed out, or nobody took the
/// session), only while what is stored is that commit (see [`write_over_commit`]): a commit that
/// never landed leaves whatever another harness sharing the store wrote since, which is not this
/// start's to delete or overwrite.
pub(super) async fn undo_initial_commit(
    store: &DynStore,
    committed: &SessionSnapshot,
    resumed: Option<&Resumed>,
    timeout: Duration,
) {
    let mut undo = WriteBatch::new(committed.id.clone());
    match resumed {
        // The stored session goes back to how it was; its history stays.
        Some(resumed) => undo.snapshot = Some(resumed.snapshot.clone()),
        // The whole aggregate goes; the next start would reclaim it anyway (its startup marker).
        None => undo.delete_first = true,
    }
    write_over_commit(store, committed, undo, timeout).await;
}

/// Writes `batch` over the initial commit `committed`, only while the stored snapshot is that
/// commit — written by this harness (its owner, when it records one) at the commit's time, for
/// the same startup attempt — and over the snapshot as read back (a store may encode it its own
/// way).
pub(super) async fn write_over_commit(
    store: &DynStore,
    committed: &SessionSnapshot,
    mut batch: WriteBatch,
    timeout: Duration,
) {
    let attempt = |snapshot: &SessionSnapshot| snapshot.startup.as_ref().map(|marker| marker.attempt_id.clone());
    let is_commit = |stored: &SessionSnapshot| {
        stored.owner == committed.owner
            && stored.updated_at == committed.updated_at
            && attempt(stored) == attempt(committed)
    };
    let write = async {
        let Some(stored) = store.fetch_session(&committed.id).await?.filter(is_commit) else { return Ok(false) };
        batch.expect = Some(Expected::Snapshot(Box::new(stored)));
        write_batch(store, &batch).await.map(|()| true)
    };
    match tokio::time::timeout(timeout, write).await {
        Ok(Ok(true)) => {}
        Ok(Ok(false)) => tracing::info!("the initial commit is not what is stored; left as it is"),
        Ok(Err(StoreError::Conflict(reason))) => {
            tracing::info!(%reason, "the session changed as the initial commit was written over; left as it is")
        }
        _ => tracing::warn!("could not write over the initial commit; the next start reclaims it"),
    }
}
