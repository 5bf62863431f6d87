//! The journal's store side: the records and events that wait for the next write, the writes
//! in flight and what their commit (or failure) publishes.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use futures::FutureExt;
use tracing::Instrument;

use crate::event::Event;
use crate::request::Request;
use crate::runtime::write_batch;
use crate::session::{Durability, SessionSnapshot};
use crate::store::{DynStore, QueuedWrite, StoreError, WriteBatch};
use crate::time::Timestamp;
use crate::turn::Turn;

use super::{
    AfterCommit, FlushStart, Flushed, Journal, MAX_PENDING_BYTES, MAX_PENDING_EVENTS, MAX_QUEUED_WRITES, StoreFailure,
    WriteOutcome, Writing,
};

impl Journal {
    pub(in crate::runtime::actor) fn record_turn(&mut self, turn: &Turn) {
        if self.store.is_some() {
            self.pending.turns.push(turn.clone());
        }
    }

    pub(in crate::runtime::actor) fn record_request(&mut self, request: &Request) {
        if self.store.is_some() {
            self.pending.requests.push(request.clone());
        }
    }

    pub(in crate::runtime::actor) fn record_snapshot(&mut self, snapshot: &SessionSnapshot) {
        if self.store.is_some() {
            self.pending.snapshot = Some(snapshot.clone());
        }
    }

    /// Queues `action` for the next commit, or hands it back when there is no store to wait for.
    pub(in crate::runtime::actor) fn after_commit(&mut self, action: AfterCommit) -> Option<AfterCommit> {
        if self.store.is_some() {
            self.after_commit.push(action);
            None
        } else {
            Some(action)
        }
    }

    /// Starts writing the pending batch: at once when the store can
    /// ([`Store::write_now`](crate::store::Store::write_now)), else queued behind the writes in
    /// flight when the store queues in order ([`Store::enqueue`](crate::store::Store::enqueue)),
    /// else in a task once no write is in flight.
    pub(in crate::runtime::actor) fn start_flush(&mut self) -> FlushStart {
        let Some(store) = self.store.as_ref().filter(|_| !self.pending.is_empty()) else {
            if self.writing.is_empty() {
                return FlushStart::Nothing(std::mem::take(&mut self.after_commit));
            }
            return FlushStart::InFlight;
        };
        let follows = !self.writing.is_empty();
        if follows
            && (self.writing.len() >= MAX_QUEUED_WRITES
                || matches!(self.writing.back(), Some(Writing::Task(_) | Writing::Failed { .. })))
        {
            return FlushStart::InFlight;
        }
        let span = tracing::debug_span!(parent: &self.span, "store_write", events = self.pending.events.len());
        // A panicking store is a failed write, not a lost batch.
        let panicked = || StoreError::Backend("the store panicked during the write".into());
        if !follows {
            // Written where it lies: a store that writes at once gets the pending batch itself,
            // which is then emptied in place (no batch moved or made per write).
            let now = span.in_scope(|| catch_unwind(AssertUnwindSafe(|| store.write_now(&self.pending))));
            let result = match now {
                Ok(Some(result)) => Some(result),
                Err(_) => Some(Err(panicked())),
                Ok(None) => None,
            };
            if let Some(result) = result {
                let events = std::mem::take(&mut self.pending.events);
                self.pending.clear();
                self.pending_bytes = 0;
                let actions = std::mem::take(&mut self.after_commit);
                return FlushStart::Written(self.committed(events, actions, result));
            }
        }
        let store = Arc::clone(store);
        let mut next = WriteBatch::new(self.session.id.clone());
        next.events = std::mem::take(&mut self.spare_events);
        let batch = std::mem::replace(&mut self.pending, next);
        let bytes = std::mem::take(&mut self.pending_bytes);
        let queued = span.in_scope(|| catch_unwind(AssertUnwindSafe(|| store.enqueue(&batch, follows))));
        let commit: QueuedWrite = match queued {
            Ok(Some(commit)) => {
                Box::pin(AssertUnwindSafe(commit).catch_unwind().map(move |r| r.unwrap_or_else(|_| Err(panicked()))))
            }
            Err(_) => {
                let actions = std::mem::take(&mut self.after_commit);
                self.writing.push_back(Writing::Failed { batch, actions, error: panicked() });
                return FlushStart::InFlight;
            }
            Ok(None) if follows => {
                // Not now: the batch waits for the write in flight.
                let next = std::mem::replace(&mut self.pending, batch);
                self.pending_bytes = bytes;
                self.spare_events = next.events;
                return FlushStart::InFlight;
            }
            Ok(None) => {
                let actions = std::mem::take(&mut self.after_commit);
                self.writing.push_back(Writing::Task(tokio::spawn(
                    async move {
                        let result = write_batch(&store, &batch).await;
                        (batch, actions, result)
                    }
                    .instrument(span),
                )));
                return FlushStart::InFlight;
            }
        };
        let actions = std::mem::take(&mut self.after_commit);
        self.writing.push_back(Writing::Queued { batch, actions, commit });
        FlushStart::InFlight
    }

    pub(in crate::runtime::actor) fn is_flushing(&self) -> bool {
        !self.writing.is_empty()
    }

    /// True while a write is in flight and [`MAX_PENDING_EVENTS`] more (or [`MAX_PENDING_BYTES`]
    /// of them) wait for the next one:
    /// the actor stops taking provider messages until the store catches up, so the bounded
    /// sink fills, the provider's reader waits, and the CLI's pipe fills — memory stays bounded
    /// however slow the store is, and the next batch is capped.
    pub(in crate::runtime::actor) fn is_backlogged(&self) -> bool {
        !self.writing.is_empty()
            && (self.pending.events.len() >= MAX_PENDING_EVENTS || self.pending_bytes >= MAX_PENDING_BYTES)
    }

    /// Waits for the oldest write in flight (guard with [`Journal::is_flushing`]). Cancel-safe:
    /// the write stays in flight until it finished.
    pub(in crate::runtime::actor) async fn flushed(&mut self) -> Flushed {
        let result = match self.writing.front_mut().expect("guarded by is_flushing") {
            Writing::Task(handle) => {
                let done = match handle.await {
                    Ok(done) => done,
                    // The write task catches panics and is never aborted, so this is the Tokio
                    // runtime shutting down under the session: nothing is left to publish to.
                    Err(_) => (
                        WriteBatch::default(),
                        Vec::new(),
                        Err(StoreError::Backend("the store write was cancelled".into())),
                    ),
                };
                self.writing.pop_front();
                return done;
            }
            Writing::Queued { commit, .. } => commit.await,
            Writing::Failed { .. } => {
                let Some(Writing::Failed { batch, actions, error }) = self.writing.pop_front() else {
                    unreachable!("the front write failed")
                };
                return (batch, actions, Err(error));
            }
        };
        let Some(Writing::Queued { batch, actions, .. }) = self.writing.pop_front() else {
            unreachable!("the front write was queued")
        };
        (batch, actions, result)
    }

    /// Publishes a committed batch and returns the actions that waited for it; a failed write
    /// degrades the journal to live-only: the batch's and every later event are still published.
    pub(in crate::runtime::actor) fn on_flushed(&mut self, flushed: Flushed) -> WriteOutcome {
        let (batch, actions, result) = flushed;
        self.committed(batch.events, actions, result)
    }

    /// Publishes the `events` of a finished write and returns the `actions` that waited for it;
    /// see [`Journal::on_flushed`].
    fn committed(
        &mut self,
        mut events: Vec<Arc<Event>>,
        actions: Vec<AfterCommit>,
        result: std::result::Result<(), StoreError>,
    ) -> WriteOutcome {
        if let Err(error) = result {
            self.store = None;
            self.durability = Durability::Degraded { reason: error.to_string(), at: Timestamp::now() };
            // The writes queued behind it fail with it (`follows`); their events, and those
            // still pending, are published in order.
            let mut actions = actions;
            for event in events {
                self.publish(event);
            }
            for writing in std::mem::take(&mut self.writing) {
                match writing {
                    Writing::Queued { batch, actions: theirs, .. } | Writing::Failed { batch, actions: theirs, .. } => {
                        actions.extend(theirs);
                        for event in batch.events {
                            self.publish(event);
                        }
                    }
                    // Never behind another write.
                    Writing::Task(handle) => handle.abort(),
                }
            }
            let later = std::mem::replace(&mut self.pending, WriteBatch::new(self.session.id.clone()));
            self.pending_bytes = 0;
            for event in later.events {
                self.publish(event);
            }
            actions.append(&mut self.after_commit);
            return Err(StoreFailure { error, actions });
        }
        for event in events.drain(..) {
            self.publish(event);
        }
        // The emptied vector is the next batch's (see `spare_events`), unless the pending batch
        // still has its own.
        if self.pending.events.capacity() == 0 {
            self.pending.events = events;
        } else {
            self.spare_events = events;
        }
        Ok(actions)
    }

    /// Deletes the session's stored history from the store it was started with (nothing to
    /// delete without one). False when the delete failed or timed out: the history stays,
    /// closed, as after a stop.
    pub(in crate::runtime::actor) async fn discard(&mut self, timeout: std::time::Duration) -> bool {
        let Some(home) = &self.home_store else { return true };
        let mut batch = WriteBatch::new(self.session.id.clone());
        batch.delete_first = true;
        last_write(home, &batch, timeout, "deleting the discarded session's history").await
    }

    /// Offers the final snapshot to the store of a session that degraded, so that its stored
    /// snapshot never reads back as running (its history there stays incomplete, and the
    /// snapshot says so in `durability`).
    pub(in crate::runtime::actor) async fn offer_final_snapshot(
        &mut self,
        snapshot: &SessionSnapshot,
        timeout: std::time::Duration,
    ) {
        let (None, Some(home)) = (&self.store, &self.home_store) else { return };
        let mut batch = WriteBatch::new(self.session.id.clone());
        batch.snapshot = Some(snapshot.clone());
        if last_write(home, &batch, timeout, "storing the final snapshot of a degraded session").await {
            tracing::debug!("final snapshot of a degraded session stored");
        }
    }
}

/// One of a session's last writes, to the store it was started with, bounded by `timeout`;
/// true when it was written. A failure is only logged: the session is ending anyway.
async fn last_write(home: &DynStore, batch: &WriteBatch, timeout: std::time::Duration, what: &str) -> bool {
    match tokio::time::timeout(timeout, write_batch(home, batch)).await {
        Ok(Ok(())) => true,
        Ok(Err(error)) => {
            tracing::warn!(%error, "{what} failed");
            false
        }
        Err(_) => {
            tracing::warn!(?timeout, "{what} timed out");
            false
        }
    }
}
