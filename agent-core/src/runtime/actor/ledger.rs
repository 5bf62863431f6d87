//! The request ledger: the session's requests, the one claim each may hold while a response is
//! delivered, and their deadlines. It decides what a delivery's result means for the request
//! and returns that decision; the actor records, emits and replies.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, RandomState};

use tokio::sync::oneshot;
use tokio::task::AbortHandle;
use tracing::Span;

use crate::error::{Error, Result};
use crate::event::ExpiryReason;
use crate::ids::{RequestId, SessionId, TurnId};
use crate::request::{ProviderRef, Request, RequestStatus, Response};

/// How many requests of turns that left the turn cache the ledger remembers the end of, the
/// newest: a later answer to one of them gets `AlreadyResolved` or `RequestExpired`, and one to
/// an older request `RequestNotFound` unless the session's store holds it. 16 bytes a request,
/// 16 KiB at most a session.
const FORGOTTEN_REQUESTS: usize = 1024;

/// Who answered a request.
pub(super) enum Origin {
    /// `Harness::respond`, waiting for the outcome.
    Caller(oneshot::Sender<Result<()>>),
    /// The session's request handler.
    Handler,
    /// The runtime's own deny after the request's deadline.
    Deadline,
    /// The runtime's own deny after the provider refused the request handler's answer.
    Fallback,
}

struct Claim {
    response: Response,
    origin: Origin,
}

struct Entry {
    request: Request,
    claim: Option<Claim>,
    deadline: Option<AbortHandle>,
    /// The deadline passed while a response was being delivered: if the provider refuses that
    /// response, the deadline's denial is due at once.
    deadline_missed: bool,
    /// The provider resolved the request by itself while a response was being delivered.
    provider_resolved: bool,
    /// A delivery failed with an uncertain outcome: the agent may have the answer, so no other
    /// one is sent (the session retires, or the turn ends as the provider reports).
    delivery_uncertain: bool,
    /// Open from creation until the request is resolved or expires.
    span: Option<Span>,
}

/// What a delivery's result means.
pub(super) enum Settled {
    /// Delivered: the request is resolved (`request` updated, `response` as recorded).
    Resolved { request: Box<Request>, response: Response, origin: Origin },
    /// The runtime's deadline denial was delivered (or definitely refused): expire the request.
    DeadlineExpired,
    /// Delivered, but the request had already expired or its turn ended.
    Late { origin: Origin },
    /// The provider definitely refused the response; the claim is released.
    Refused { error: Error, origin: Origin },
    /// The outcome is unknown: no other answer is sent, and the session retires (on a broken
    /// transport, unless the provider reports the CLI's exit first).
    Uncertain { error: Error, origin: Origin },
}

#[derive(Default)]
pub(super) struct Ledger {
    entries: HashMap<RequestId, Entry>,
    /// Pending requests by the provider's reference, for the provider's own resolutions.
    by_ref: HashMap<ProviderRef, RequestId>,
    /// How the requests of turns that left the turn cache ended, oldest first, at most
    /// [`FORGOTTEN_REQUESTS`]: each as a 64-bit hash of its ID with a key of this session's
    /// (`forgotten_keys`), as the turn cache keeps used turn IDs. An ID never seen is taken for
    /// one of them one time in 2^64 per request kept.
    forgotten: VecDeque<(u64, RequestStatus)>,
    forgotten_keys: RandomState,
}

impl Ledger {
    pub(super) fn insert(&mut self, request: Request, deadline: Option<AbortHandle>, span: Span) {
        self.by_ref.insert(request.provider_ref.clone(), request.id.clone());
        let entry = Entry {
            request,
            claim: None,
            deadline,
            deadline_missed: false,
            provider_resolved: false,
            delivery_uncertain: false,
            span: Some(span),
        };
        self.entries.insert(entry.request.id.clone(), entry);
    }

    /// The pending requests, oldest first.
    pub(super) fn pending(&self) -> Vec<Request> {
        let mut pending: Vec<Request> = self
            .entries
            .values()
            .filter(|e| e.request.status == RequestStatus::Pending)
            .map(|e| e.request.clone())
            .collect();
        pending.sort_by(|a, b| a.created_at.cmp(&b.created_at).then_with(|| a.id.cmp(&b.id)));
        pending
    }

    /// The IDs of `turn`'s pending requests, oldest first.
    pub(super) fn pending_of(&self, turn: &TurnId) -> Vec<RequestId> {
        self.pending().into_iter().filter(|r| &r.turn_id == turn).map(|r| r.id).collect()
    }

    /// The IDs of `turn`'s pending requests nobody is answering, oldest first: a request whose
    /// answer is being delivered is settled by that delivery.
    pub(super) fn open_of(&self, turn: &TurnId) -> Vec<RequestId> {
        self.pending_of(turn).into_iter().filter(|id| self.is_open(id)).collect()
    }

    /// True while an answer to one of `turn`'s requests is being delivered.
    pub(super) fn answering(&self, turn: &TurnId) -> bool {
        self.entries
            .values()
            .any(|e| &e.request.turn_id == turn && e.request.status == RequestStatus::Pending && e.claim.is_some())
    }

    pub(super) fn has_pending(&self, turn: &TurnId) -> bool {
        self.entries.values().any(|e| &e.request.turn_id == turn && e.request.status == RequestStatus::Pending)
    }

    /// Checks that `response` may claim `request_id` now; the request to deliver it to.
    pub(super) fn check(&self, session: &SessionId, request_id: &RequestId, response: &Response) -> Result<Request> {
        let Some(entry) = self.entries.get(request_id) else {
            return Err(match self.forgotten_status(request_id) {
                Some(RequestStatus::Resolved) => Error::AlreadyResolved { request_id: request_id.clone() },
                Some(_) => Error::RequestExpired { request_id: request_id.clone() },
                None => Error::RequestNotFound { session_id: session.clone(), request_id: request_id.clone() },
            });
        };
        match entry.request.status {
            RequestStatus::Resolved => Err(Error::AlreadyResolved { request_id: request_id.clone() }),
            RequestStatus::Expired => Err(Error::RequestExpired { request_id: request_id.clone() }),
            // An uncertain delivery stays in progress: the agent may have that answer.
            RequestStatus::Pending if entry.claim.is_some() || entry.delivery_uncertain => {
                Err(Error::ResponseInProgress { request_id: request_id.clone() })
            }
            RequestStatus::Pending => response.validate_for(&entry.request).map(|()| entry.request.clone()),
        }
    }

    /// Claims a request [`check`](Ledger::check) allowed: at most one delivery at a time.
    pub(super) fn claim(&mut self, request_id: &RequestId, response: Response, origin: Origin) {
        if let Some(entry) = self.entries.get_mut(request_id) {
            entry.claim = Some(Claim { response, origin });
        }
    }

    /// True when `request_id` is pending and nobody is answering it (nor may have answered it:
    /// see `Entry::delivery_uncertain`).
    pub(super) fn is_open(&self, request_id: &RequestId) -> bool {
        self.entries
            .get(request_id)
            .is_some_and(|e| e.request.status == RequestStatus::Pending && e.claim.is_none() && !e.delivery_uncertain)
    }

    pub(super) fn request(&self, request_id: &RequestId) -> Option<&Request> {
        self.entries.get(request_id).map(|e| &e.request)
    }

    /// A deadline passed: nothing more to abort for it. While a response is being delivered,
    /// the deadline is noted as missed instead (see [`Ledger::take_missed_deadline`]).
    pub(super) fn deadline_passed(&mut self, request_id: &RequestId) {
        if let Some(entry) = self.entries.get_mut(request_id) {
            entry.deadline = None;
            entry.deadline_missed = entry.claim.is_some();
        }
    }

    /// True, once, when `request_id` is open again after its deadline passed during a delivery.
    pub(super) fn take_missed_deadline(&mut self, request_id: &RequestId) -> bool {
        let open = self.is_open(request_id);
        self.entries.get_mut(request_id).is_some_and(|entry| open && std::mem::take(&mut entry.deadline_missed))
    }

    /// What the provider's answer to a claimed response means; `turn_live` says whether the
    /// request's turn is still the running one.
    pub(super) fn settle(&mut self, request_id: &RequestId, result: Result<()>, turn_live: bool) -> Option<Settled> {
        let entry = self.entries.get_mut(request_id)?;
        let claim = entry.claim.take()?;
        let live = entry.request.status == RequestStatus::Pending && turn_live;
        Some(match result {
            Ok(()) if !live => Settled::Late { origin: claim.origin },
            Ok(()) if matches!(claim.origin, Origin::Deadline) => Settled::DeadlineExpired,
            Ok(()) => {
                if let Some(deadline) = entry.deadline.take() {
                    deadline.abort();
                }
                // Answers to masked questions and fields reach the provider but are never recorded.
                let recorded = entry.request.recorded(claim.response);
                entry.request.status = RequestStatus::Resolved;
                entry.request.response = Some(recorded.clone());
                self.by_ref.remove(&entry.request.provider_ref);
                if let Some(span) = entry.span.take() {
                    span.in_scope(|| tracing::debug!(action = %recorded.action(), "request resolved"));
                }
                Settled::Resolved { request: Box::new(entry.request.clone()), response: recorded, origin: claim.origin }
            }
            Err(error) if error.is_definite() && matches!(claim.origin, Origin::Deadline) => {
                tracing::warn!(%error, "provider refused the deadline denial; expiring the request locally");
                Settled::DeadlineExpired
            }
            Err(error) if error.is_definite() => Settled::Refused { error, origin: claim.origin },
            Err(error) => {
                entry.delivery_uncertain = true;
                Settled::Uncertain { error, origin: claim.origin }
            }
        })
    }

    /// Expires a pending request; the updated request, to record and announce.
    pub(super) fn expire(&mut self, request_id: &RequestId, reason: ExpiryReason) -> Option<Request> {
        let entry = self.entries.get_mut(request_id)?;
        if entry.request.status != RequestStatus::Pending {
            return None;
        }
        if let Some(deadline) = entry.deadline.take() {
            deadline.abort();
        }
        entry.request.status = RequestStatus::Expired;
        self.by_ref.remove(&entry.request.provider_ref);
        if let Some(span) = entry.span.take() {
            span.in_scope(|| tracing::debug!(?reason, "request expired"));
        }
        entry.request.metadata.insert("expiration_reason".into(), serde_json::to_value(reason).unwrap_or_default());
        Some(entry.request.clone())
    }

    /// The pending request the provider resolved by itself, unless a response of ours is in
    /// flight: its acknowledgement decides the outcome then, and a refusal leaves the
    /// resolution to [`Ledger::take_provider_resolved`].
    pub(super) fn resolved_by_provider(&mut self, provider_ref: &ProviderRef) -> Option<RequestId> {
        let id = self.by_ref.get(provider_ref)?.clone();
        let entry = self.entries.get_mut(&id)?;
        if entry.request.status != RequestStatus::Pending {
            return None;
        }
        if entry.claim.is_some() {
            entry.provider_resolved = true;
            return None;
        }
        Some(id)
    }

    /// True, once, when `request_id` is open again after the provider resolved it during a
    /// delivery it then refused.
    pub(super) fn take_provider_resolved(&mut self, request_id: &RequestId) -> bool {
        let open = self.is_open(request_id);
        self.entries.get_mut(request_id).is_some_and(|entry| open && std::mem::take(&mut entry.provider_resolved))
    }

    /// Drops every claim and deadline (the provider can no longer be reached); the callers
    /// waiting for a delivery, to answer.
    pub(super) fn abandon_claims(&mut self) -> Vec<oneshot::Sender<Result<()>>> {
        let mut waiting = Vec::new();
        for entry in self.entries.values_mut() {
            if let Some(Claim { origin: Origin::Caller(reply), .. }) = entry.claim.take() {
                waiting.push(reply);
            }
            entry.deadline = None;
        }
        waiting
    }

    /// Forgets the requests of a turn that left the turn cache, keeping how each ended (see
    /// [`FORGOTTEN_REQUESTS`]).
    pub(super) fn forget_turn(&mut self, turn: &TurnId) {
        let mut forgotten: Vec<&Request> =
            self.entries.values().map(|e| &e.request).filter(|r| &r.turn_id == turn).collect();
        forgotten.sort_by(|a, b| a.created_at.cmp(&b.created_at).then_with(|| a.id.cmp(&b.id)));
        for request in forgotten {
            // A finished turn's requests are settled; one that is not ended with its turn.
            let status = match request.status {
                RequestStatus::Resolved => RequestStatus::Resolved,
                _ => RequestStatus::Expired,
            };
            if self.forgotten.len() == FORGOTTEN_REQUESTS {
                self.forgotten.pop_front();
            }
            self.forgotten.push_back((self.forgotten_keys.hash_one(request.id.as_str()), status));
        }
        self.entries.retain(|_, e| &e.request.turn_id != turn);
        self.by_ref.retain(|_, id| self.entries.contains_key(id));
    }

    /// How a forgotten request ended, while the ledger keeps it (see [`FORGOTTEN_REQUESTS`]).
    fn forgotten_status(&self, request_id: &RequestId) -> Option<RequestStatus> {
        let hash = self.forgotten_keys.hash_one(request_id.as_str());
        self.forgotten.iter().rev().find(|(kept, _)| *kept == hash).map(|&(_, status)| status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::{RequestKind, Scope};
    use crate::time::Timestamp;

    fn request(turn: &TurnId, n: usize) -> Request {
        Request {
            id: RequestId::generate(),
            session_id: SessionId::new("s").unwrap(),
            turn_id: turn.clone(),
            kind: RequestKind::CommandApproval,
            prompt: "?".into(),
            choices: vec![],
            questions: vec![],
            schema: None,
            scopes: vec![Scope::Once],
            metadata: serde_json::Map::new(),
            status: RequestStatus::Pending,
            provider_ref: ProviderRef(n.to_string()),
            response: None,
            created_at: Timestamp::now(),
            expires_at: None,
        }
    }

    /// Past the bound, the oldest forgotten request is the one no longer told apart.
    #[test]
    fn forgotten_requests_are_kept_up_to_the_bound_the_oldest_going_first() {
        let session = SessionId::new("s").unwrap();
        let mut ledger = Ledger::default();
        let mut ids = Vec::new();
        for n in 0..=FORGOTTEN_REQUESTS {
            let turn = TurnId::generate();
            let request = request(&turn, n);
            ids.push(request.id.clone());
            ledger.insert(request, None, Span::none());
            if n % 2 == 0 {
                ledger.expire(&ids[n], ExpiryReason::TurnEnded);
            } else {
                ledger.claim(&ids[n], Response::approve(), Origin::Handler);
                assert!(matches!(ledger.settle(&ids[n], Ok(()), true), Some(Settled::Resolved { .. })));
            }
            ledger.forget_turn(&turn);
        }
        assert!(ledger.entries.is_empty() && ledger.by_ref.is_empty());
        assert_eq!(ledger.forgotten.len(), FORGOTTEN_REQUESTS);

        let check = |id: &RequestId| ledger.check(&session, id, &Response::approve()).unwrap_err();
        assert!(matches!(check(&ids[0]), Error::RequestNotFound { .. }), "the oldest is gone");
        assert!(matches!(check(&ids[1]), Error::AlreadyResolved { .. }));
        assert!(matches!(check(&ids[2]), Error::RequestExpired { .. }));
        assert!(matches!(check(&ids[FORGOTTEN_REQUESTS]), Error::RequestExpired { .. }), "the newest is kept");
        assert!(matches!(check(&RequestId::generate()), Error::RequestNotFound { .. }));
    }
}
