//! Ending the session: stop and close, transport loss, retirement, and the final shutdown.

use futures::FutureExt;
use tokio::sync::oneshot;

use super::Actor;
use super::journal::FlushStart;
use crate::error::{Error, Result};
use crate::event::{EventKind, ExpiryReason};
use crate::session::{CloseReason, Durability, ExitReason, SessionState};
use crate::time::Timestamp;
use crate::turn::{EndCause, TurnResult, TurnStatus};

impl Actor {
    pub(super) fn stop(&mut self, force: bool, discard: bool, reply: oneshot::Sender<Result<()>>) {
        if let Some(current) = &self.current
            && !force
        {
            let _ = reply.send(Err(Error::TurnInProgress { current: Box::new(current.turn.clone()) }));
            return;
        }
        self.discard |= discard;
        self.close(if force { CloseReason::ForcedStop } else { CloseReason::Stopped });
        let _ = reply.send(Ok(()));
    }

    /// Ends the session: interrupts an active turn, records `session_closed`, and exits.
    pub(super) fn close(&mut self, reason: CloseReason) {
        if self.exiting.is_some() || self.state == SessionState::Closed {
            return;
        }
        // Callers of interrupted commands learn of the session's end (`SessionDown`) when their
        // replies are dropped.
        self.watchdog.disarm();
        drop((self.calls.abort_all(), self.ledger.abandon_claims()));
        self.calls.abort_admission();
        self.release_current_streams();
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
        // Session-level streamed text still held goes out before the end.
        self.release_streams(None);
        self.state = SessionState::Closed;
        self.record_snapshot();
        self.journal.emit(None, EventKind::SessionClosed { reason: reason.clone() }, None);
        self.exiting = Some(ExitReason::Closed { reason });
    }

    pub(super) fn transport_down(&mut self, reason: String) {
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
    pub(super) fn report_transport_down(&mut self, reason: String) {
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
    pub(super) fn retire(&mut self, reason: String) {
        if self.exiting.is_some() {
            return;
        }
        tracing::warn!(%reason, "retiring session");
        self.abandon_calls("the session retired");
        self.calls.abort_admission();
        self.release_current_streams();
        if let Some(lost) = self.transport_lost.take() {
            self.journal.emit(None, EventKind::TransportError { reason: lost }, None);
        }
        self.release_held_frames();
        let kind = EventKind::terminal(TurnStatus::Failed, TurnResult::reason(reason.clone()));
        self.finish_current(kind, None, ExpiryReason::TurnEnded, EndCause::Uncertain);
        self.release_streams(None);
        self.state = SessionState::Unavailable;
        self.record_snapshot();
        self.exiting = Some(ExitReason::Retired { reason });
    }

    /// Final flush, provider close, deregistration. Waits on I/O: nothing else runs any more.
    ///
    /// The provider closes beside the final flush, and each is bounded by
    /// `startup_finalization_timeout`: a store that stopped answering neither keeps the CLI
    /// running nor keeps the session from ending.
    pub(super) async fn shutdown(mut self, reason: ExitReason) {
        drop((self.calls.abort_all(), self.ledger.abandon_claims()));
        self.calls.abort_admission();
        let finalize = self.options.startup_finalization_timeout;
        let provider = std::sync::Arc::clone(self.calls.provider());
        let close = tokio::spawn(async move {
            std::panic::AssertUnwindSafe(tokio::time::timeout(finalize, provider.close())).catch_unwind().await
        });
        // The final snapshot records how the session ended.
        self.state = SessionState::Closed;
        self.snapshot.ended = Some(reason.clone());
        self.snapshot.durability = self.journal.durability().clone();
        if matches!(self.snapshot.durability, Durability::Degraded { .. }) {
            self.snapshot.published_seq = Some(self.journal.latest_seq());
        }
        self.record_snapshot();
        if tokio::time::timeout(finalize, self.final_flush()).await.is_err() {
            tracing::warn!(timeout = ?finalize, "the store did not finish the session's last writes in time; not waiting");
        }
        self.settle_deliveries();
        self.journal.send_live();
        // A discarded session's history goes while its ID is still held, so a start under the
        // ID that follows finds nothing of it.
        let discarded = self.discard && self.journal.discard(finalize).await;
        if !discarded {
            self.journal.offer_final_snapshot(&self.snapshot, finalize).await;
        }
        match close.await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(_))) => tracing::warn!(close_timeout = ?finalize, "provider did not close in time; dropping it"),
            Ok(Err(_)) => tracing::error!("the provider panicked while closing; dropping it"),
            Err(_) => tracing::warn!("the provider's close was cancelled (the runtime is shutting down)"),
        }
        // The provider session goes now rather than with the actor, after the session is
        // reported ended: a caller that exits once `stop_session` or `shutdown` returned must
        // not leave what it owns behind.
        if tokio::time::timeout(finalize, self.calls.end()).await.is_err() {
            tracing::warn!(timeout = ?finalize, "a provider call did not end in time after its abort");
        }
        // What the CLI started outside its process group (which its close ended) ends too.
        let ending = async {
            match self.harness {
                Some(harness) => self.exec.end_session_processes(self.session.id.as_str(), harness).await,
                None => Ok(0),
            }
        };
        match tokio::time::timeout(finalize, ending).await {
            Ok(Ok(0)) => {}
            Ok(Ok(ended)) => tracing::info!(ended, "ended processes the session's CLI left outside its process group"),
            Ok(Err(error)) => tracing::warn!(%error, "could not look for processes the session's CLI left"),
            Err(_) => {
                tracing::warn!(timeout = ?finalize, "the look for processes the session's CLI left took too long")
            }
        }
        if self.stale_frames > 0 {
            tracing::debug!(stale_frames = self.stale_frames, "frames for finished turns were dropped");
        }
        tracing::info!(reason = %reason, "session ended");
        if let Some(registry) = self.registry.upgrade() {
            if discarded {
                // Nothing of it is left to say how it ended.
                registry.remove(&self.session.id, self.attempt);
            } else {
                registry.finish(&self.session.id, self.attempt, reason.clone(), self.journal.published_seq());
            }
        }
        let _ = self.exit.send(Some(reason));
        // Dropping the actor drops the live sender (ending subscriptions).
    }

    /// Writes and publishes what is left, in up to three rounds (a write's outcome, such as a
    /// store failure's event, gets a round of its own).
    async fn final_flush(&mut self) {
        for _ in 0..3 {
            self.journal.send_live();
            while self.journal.is_flushing() {
                let flushed = self.journal.flushed().await;
                self.on_flushed(flushed);
            }
            match self.journal.start_flush() {
                FlushStart::Nothing(actions) => {
                    for action in actions {
                        self.run_after_commit(action, None);
                    }
                }
                FlushStart::InFlight => {}
                FlushStart::Written(outcome) => {
                    // What the write's outcome added (a store failure's event) gets its round.
                    self.after_write(outcome);
                    continue;
                }
            }
            if !self.journal.is_flushing() {
                break;
            }
        }
    }
}
