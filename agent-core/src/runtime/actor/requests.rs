//! The request path: creating, delivering and settling requests, the glue between the
//! [`ledger`](super::ledger) and the [`calls`](super::calls).

use super::journal::AfterCommit;
use super::ledger::{Origin, Settled};
use super::{Actor, CancelState};
use crate::error::{Error, Result};
use crate::event::{EventKind, ExpiryReason, RawJson};
use crate::ids::{RequestId, TurnId};
use crate::request::{Request, RequestSpec, RequestStatus, Response};
use crate::session::SessionState;
use crate::time::Timestamp;
use crate::turn::TurnStatus;

impl Actor {
    /// Claims `request` for `response` (checked already) and delivers it to the provider.
    pub(super) fn deliver(&mut self, request: Request, response: Response, origin: Origin) {
        // An agent may quote a secret answer back: from now on it is redacted from what the
        // provider reports, as the CLI's credentials are.
        self.learn_secrets(request.secret_values(&response));
        self.ledger.claim(&request.id, response.clone(), origin);
        self.calls.respond(request, response, self.options.provider_command_timeout, &self.span);
    }

    pub(super) fn on_responded(&mut self, request_id: RequestId, result: Result<()>) {
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
                let handler = matches!(origin, Origin::Handler);
                if matches!(origin, Origin::Fallback) {
                    tracing::warn!(%error, "the provider refused the denial of a refused handler answer; left to the caller");
                }
                let reason = format!("the provider refused the request handler's answer: {error}");
                reply_to(origin, Err(error));
                self.after_refusal(&request_id);
                // Nobody else answers a handled request: the agent gets a denial rather than a
                // wait for good.
                if handler
                    && self.ledger.is_open(&request_id)
                    && let Some(request) = self.ledger.request(&request_id).cloned()
                {
                    tracing::warn!(%reason, "denying the request instead");
                    self.deliver(request, Response::deny(reason), Origin::Fallback);
                }
            }
            Settled::Uncertain { error, origin } => {
                let transport = matches!(error, Error::Transport { .. });
                let reason = format!("response delivery is uncertain: {error}");
                reply_to(origin, Err(error));
                match turn.clone().filter(|_| live) {
                    // The CLI is likely gone, and its exit on the way: see `retire_unless_reported`.
                    Some(turn) => self.retire_unless_reported(turn, transport, reason),
                    None => self.retire(reason),
                }
            }
        }
        if let Some(turn) = turn {
            self.after_request_change(&turn);
        }
    }

    /// A request handler answered: its answer claims the request unless a caller's did first.
    pub(super) fn on_handled(&mut self, request_id: RequestId, result: std::result::Result<Option<Response>, String>) {
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

    pub(super) fn create_request(&mut self, turn: TurnId, spec: RequestSpec, mut raw: Option<RawJson>) {
        let now = Timestamp::now();
        let timeout = match (spec.timeout, self.options.request_timeout) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let mut request = Request {
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
        if let Some(learned) = &self.learned {
            learned.redact_request(&mut request, &mut raw);
        }
        let deadline = timeout.map(|timeout| self.calls.deadline(request.id.clone(), timeout));
        let parent = self.current.as_ref().map_or(&self.span, |c| &c.span);
        let span = tracing::info_span!(parent: parent, "request", request_id = %request.id, kind = %request.kind);
        span.in_scope(|| tracing::debug!("request created"));
        if let Some(handler) = self.request_handler.clone() {
            let limit = self.options.request_timeout.unwrap_or(self.options.provider_command_timeout);
            let deadline_settles = timeout.is_some_and(|timeout| timeout <= limit);
            self.calls.handle(handler, request.clone(), limit, deadline_settles, &span);
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
    pub(super) fn after_request_change(&mut self, turn: &TurnId) {
        if !self.state.has_active_turn() {
            return;
        }
        let waiting = self.ledger.has_pending(turn);
        if !waiting {
            // The wait on the host ended: the turn's silence counts from here.
            self.watchdog.activity(1);
        }
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

    pub(super) fn expire_request(&mut self, request_id: &RequestId, reason: ExpiryReason, raw: Option<RawJson>) {
        let Some(request) = self.ledger.expire(request_id, reason) else { return };
        self.journal.record_request(&request);
        let expired = EventKind::RequestExpired { request_id: request_id.clone(), reason };
        self.journal.emit(Some(request.turn_id.clone()), expired, raw);
    }

    /// A refused answer left `request_id` open again: what happened while it was delivered
    /// now applies. The provider resolving it expires it; a deadline that passed meanwhile
    /// denies it; a cancel of its turn expires it.
    fn after_refusal(&mut self, request_id: &RequestId) {
        if self.ledger.take_provider_resolved(request_id) {
            // The provider let go of it meanwhile (its refusal said as much).
            self.expire_request(request_id, ExpiryReason::ProviderResolved, None);
            return;
        }
        if self.ledger.take_missed_deadline(request_id) {
            if let Some(request) = self.ledger.request(request_id).cloned() {
                self.deliver(request, Response::deny("the request timed out"), Origin::Deadline);
            }
            return;
        }
        let cancelling = |turn: &TurnId| {
            self.current.as_ref().is_some_and(|c| &c.turn.id == turn && !matches!(c.cancel, CancelState::None))
        };
        let open = self.ledger.request(request_id).filter(|_| self.ledger.is_open(request_id));
        if open.is_some_and(|request| cancelling(&request.turn_id)) {
            self.expire_request(request_id, ExpiryReason::Cancelled, None);
        }
    }

    /// Expires `turn`'s pending requests that nobody is answering; one being answered is
    /// settled by its delivery (and expired after it only if the provider refuses the answer).
    pub(super) fn expire_open(&mut self, turn: &TurnId, reason: ExpiryReason) {
        for id in self.ledger.open_of(turn) {
            self.expire_request(&id, reason, None);
        }
    }

    /// Expires every pending request of `turn`, oldest first.
    pub(super) fn expire_pending(&mut self, turn: &TurnId, reason: ExpiryReason) {
        for id in self.ledger.pending_of(turn) {
            self.expire_request(&id, reason, None);
        }
    }
}

/// Answers whoever is waiting for a delivery.
fn reply_to(origin: Origin, result: Result<()>) {
    if let Origin::Caller(reply) = origin {
        let _ = reply.send(result);
    }
}
