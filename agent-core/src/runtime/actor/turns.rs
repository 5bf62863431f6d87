//! The turn path: starting, admitting, cancelling, steering and ending the current turn.

use std::sync::Arc;

use tokio::sync::oneshot;

use super::cache::Finished;
use super::journal::AfterCommit;
use super::{ActiveTurn, Actor, CancelState};
use crate::capabilities::{Capability, Support};
use crate::error::{Error, Result};
use crate::event::{EventKind, ExpiryReason, RawJson};
use crate::ids::TurnId;
use crate::options::TurnOptions;
use crate::provider::{Admission, TurnStart};
use crate::runtime::watchdog::Fired;
use crate::runtime::{AwaitGrant, Lookup};
use crate::session::SessionState;
use crate::time::Timestamp;
use crate::turn::{EndCause, InputItem, Turn, TurnInput, TurnResult, TurnStatus};

impl Actor {
    pub(super) fn start_turn(&mut self, mut turn: Turn, options: TurnOptions, reply: oneshot::Sender<Result<Turn>>) {
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
            })
            .or_else(|| {
                // A turn's own model needs the session's model selection, as a session's does.
                let unsupported = self.capabilities.get(Capability::ModelSelection) == Support::Unsupported;
                (options.model.is_some() && unsupported).then(|| Error::Unsupported {
                    provider: self.session.provider.clone(),
                    capability: Capability::ModelSelection,
                })
            })
            .or_else(|| self.calls.provider().validate_turn(&options, &turn.input).err());
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
            provider_turn_id: None,
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

    pub(super) fn admit(&mut self, turn_id: TurnId, generation: u64) {
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

    pub(super) fn await_turn(&mut self, turn: TurnId) -> Lookup<AwaitGrant> {
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

    pub(super) fn cancel(&mut self, turn: TurnId, reason: Option<String>, reply: oneshot::Sender<Result<()>>) {
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
        self.expire_open(&turn, ExpiryReason::Cancelled);
    }

    pub(super) fn steer(&mut self, turn: TurnId, input: TurnInput, reply: oneshot::Sender<Result<()>>) {
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
        // What a turn could not take as its input, a steer cannot either.
        if let Some(capability) = self.missing_input_capability(&input) {
            let _ = reply.send(Err(Error::Unsupported { provider: self.session.provider.clone(), capability }));
            return;
        }
        self.calls.steer(turn, input, reply, self.options.provider_command_timeout, &current.span);
    }

    pub(super) fn on_admission(&mut self, turn_id: TurnId, generation: u64, result: Result<Admission>) {
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
                current.provider_turn_id.clone_from(&admission.provider_turn_id);
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
    pub(super) fn on_watchdog(&mut self) {
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
                let deadline = self.options.provider_command_timeout;
                let reason = match &current.stalled {
                    Some(stalled) => {
                        format!("{stalled}; the provider did not end the turn within {deadline:?} of the cancel")
                    }
                    None => format!(
                        "cancelled, but the provider did not end the turn within {deadline:?} of taking the cancel"
                    ),
                };
                self.retire(reason);
            }
        }
    }

    /// Publishes the running turn's held streamed text before what ends the turn.
    pub(super) fn release_current_streams(&mut self) {
        if let Some(turn) = self.current.as_ref().map(|c| c.turn.id.clone()) {
            self.release_streams(Some(&turn));
        }
    }

    /// Publishes the streamed text held for `turn` (`None`: the session's own), which ends.
    pub(super) fn release_streams(&mut self, turn: Option<&TurnId>) {
        for released in self.streams.as_mut().map(|s| s.end_turn(turn)).unwrap_or_default() {
            self.journal.emit(turn.cloned(), released, None);
        }
    }

    /// Ends the current turn with a terminal `kind`: pending requests expire first, then the
    /// terminal event is sequenced and the session becomes idle (unless it is going away).
    pub(super) fn finish_current(
        &mut self,
        mut kind: EventKind,
        raw: Option<RawJson>,
        expiry: ExpiryReason,
        cause: EndCause,
    ) {
        let Some(current) = self.current.as_ref() else { return };
        let end = kind.terminal_end();
        // A provider may say its CLI went away (the one cause it can tell apart itself).
        let exited = end.is_some_and(|end| end.result.ended_by == Some(EndCause::TransportLost));
        let completed = end.is_some_and(|end| end.status == TurnStatus::Completed);
        // The provider ending a turn the caller (or the watchdog) asked to stop is that stop —
        // unless the turn completed first, or the CLI went away.
        let cause = match (cause, &current.cancel, &current.stalled) {
            (EndCause::Provider | EndCause::Uncertain, _, Some(_)) if !completed => EndCause::Stalled,
            (EndCause::Provider, ..) if exited => EndCause::TransportLost,
            (EndCause::Provider, CancelState::Requested | CancelState::Sent, None) if !completed => EndCause::Cancel,
            (cause, ..) => cause,
        };
        let Some(mut current) = self.current.take() else { return };
        let turn_id = current.turn.id.clone();
        // Streamed text held back as a credential's possible beginning goes out before the end.
        self.release_streams(Some(&turn_id));
        self.expire_pending(&turn_id, expiry);
        self.watchdog.disarm();
        let end = kind.terminal_end_mut().map(|end| {
            end.result.ended_by = Some(cause);
            // The provider ended what the watchdog cancelled, saying only that it was stopped.
            if let (EndCause::Stalled, Some(stalled)) = (cause, &current.stalled) {
                end.result.reason = Some(match end.result.reason.take().filter(|said| !said.is_empty()) {
                    Some(said) if !said.starts_with(stalled.as_str()) => format!("{stalled}; {said}"),
                    said => said.unwrap_or_else(|| stalled.clone()),
                });
            }
            if end.result.provider_turn_id.is_none() {
                end.result.provider_turn_id = current.provider_turn_id.take();
            }
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
        let terminal = self.journal.emit_shared(Some(turn_id), kind, raw);
        self.cache.insert(current.turn.id, terminal);
    }
}
