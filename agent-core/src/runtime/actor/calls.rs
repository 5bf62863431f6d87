//! Slow work the actor hands to short-lived tasks: provider calls (admission, responses,
//! cancellation, steering), request deadlines and request handlers. Each runs bounded by its
//! deadline and comes back to the actor as a [`Done`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use tokio::sync::oneshot;
use tokio::task::{AbortHandle, JoinHandle, JoinSet};
use tracing::{Instrument, Span};

use crate::error::{Error, Result};
use crate::handler::DynRequestHandler;
use crate::ids::{RequestId, TurnId};
use crate::provider::{Admission, ProviderSession, TurnStart};
use crate::request::{Request, Response};
use crate::turn::TurnInput;

/// A finished piece of work.
pub(super) enum Done {
    Admitted {
        turn: TurnId,
        generation: u64,
        result: Result<Admission>,
    },
    Responded {
        request: RequestId,
        result: Result<()>,
    },
    Cancelled {
        turn: TurnId,
        result: Result<()>,
    },
    Steered {
        id: u64,
        turn: TurnId,
        result: Result<()>,
    },
    RequestDeadline {
        request: RequestId,
    },
    /// A request handler answered (`Ok(None)`: it left the request to the caller), or failed.
    Handled {
        request: RequestId,
        result: std::result::Result<Option<Response>, String>,
    },
    /// The provider did not report the loss of the transport a call of `turn` failed on.
    TransportUnreported {
        turn: TurnId,
        reason: String,
    },
}

pub(super) struct Calls {
    provider: Arc<dyn ProviderSession>,
    tasks: JoinSet<Done>,
    /// The admission of the current turn, apart from the rest: a transport loss aborts the
    /// others but waits for this one, whose outcome decides how the turn is told.
    admission: Option<JoinHandle<(TurnId, u64, Result<Admission>)>>,
    /// Admissions aborted and not yet seen to end (each holds the provider session until then).
    aborted: Vec<JoinHandle<(TurnId, u64, Result<Admission>)>>,
    /// Callers of the steers in flight, by steer.
    steering: HashMap<u64, oneshot::Sender<Result<()>>>,
    steer_id: u64,
}

impl Calls {
    pub(super) fn new(provider: Arc<dyn ProviderSession>) -> Self {
        Calls {
            provider,
            tasks: JoinSet::new(),
            admission: None,
            aborted: Vec::new(),
            steering: HashMap::new(),
            steer_id: 0,
        }
    }

    pub(super) fn provider(&self) -> &Arc<dyn ProviderSession> {
        &self.provider
    }

    pub(super) fn admit(&mut self, start: TurnStart, generation: u64, timeout: Duration, span: Span) {
        let provider = Arc::clone(&self.provider);
        let turn = start.id().clone();
        let panicked = (turn.clone(), generation, Err(Error::ProviderPanicked { operation: "turn admission" }));
        let admission = async move {
            let result = bounded("turn admission", timeout, provider.start_turn(start)).await;
            (turn, generation, result)
        };
        self.admission = Some(tokio::spawn(guarded(admission, panicked).instrument(span)));
    }

    pub(super) fn is_admitting(&self) -> bool {
        self.admission.is_some()
    }

    pub(super) fn abort_admission(&mut self) {
        if let Some(admission) = self.admission.take() {
            admission.abort();
            self.aborted.retain(|aborted| !aborted.is_finished());
            self.aborted.push(admission);
        }
    }

    /// Aborts every call and waits until none holds the provider session any more, then drops
    /// it: what the provider owns (its process, its files) goes before the session is reported
    /// ended.
    pub(super) async fn end(mut self) {
        self.abort_admission();
        self.tasks.shutdown().await;
        for aborted in self.aborted.drain(..) {
            let _ = aborted.await;
        }
    }

    pub(super) fn respond(&mut self, request: Request, response: Response, timeout: Duration, parent: &Span) {
        let provider = Arc::clone(&self.provider);
        let span = tracing::info_span!(
            parent: parent,
            "provider_command",
            command = "respond",
            request_id = %request.id,
            kind = %request.kind,
            action = %response.action(),
        );
        let panicked = Done::Responded {
            request: request.id.clone(),
            result: Err(Error::ProviderPanicked { operation: "respond" }),
        };
        let respond = async move {
            let result = bounded("respond", timeout, provider.respond(&request, &response)).await;
            Done::Responded { request: request.id, result }
        };
        self.tasks.spawn(guarded(respond, panicked).instrument(span));
    }

    pub(super) fn cancel(&mut self, turn: TurnId, timeout: Duration, parent: &Span) {
        let provider = Arc::clone(&self.provider);
        let span = tracing::info_span!(parent: parent, "provider_command", command = "cancel", turn_id = %turn);
        let panicked =
            Done::Cancelled { turn: turn.clone(), result: Err(Error::ProviderPanicked { operation: "cancel" }) };
        let cancel = async move {
            let result = bounded("cancel", timeout, provider.cancel(&turn)).await;
            Done::Cancelled { turn, result }
        };
        self.tasks.spawn(guarded(cancel, panicked).instrument(span));
    }

    pub(super) fn steer(
        &mut self,
        turn: TurnId,
        input: TurnInput,
        reply: oneshot::Sender<Result<()>>,
        timeout: Duration,
        parent: &Span,
    ) {
        let provider = Arc::clone(&self.provider);
        let span = tracing::info_span!(parent: parent, "provider_command", command = "steer");
        self.steer_id += 1;
        let id = self.steer_id;
        self.steering.insert(id, reply);
        let panicked =
            Done::Steered { id, turn: turn.clone(), result: Err(Error::ProviderPanicked { operation: "steer" }) };
        let steer = async move {
            let result = bounded("steer", timeout, provider.steer(&turn, &input)).await;
            Done::Steered { id, turn, result }
        };
        self.tasks.spawn(guarded(steer, panicked).instrument(span));
    }

    /// The caller of a finished steer.
    pub(super) fn steer_reply(&mut self, id: u64) -> Option<oneshot::Sender<Result<()>>> {
        self.steering.remove(&id)
    }

    /// Schedules a request's deadline.
    pub(super) fn deadline(&mut self, request: RequestId, timeout: Duration) -> AbortHandle {
        self.tasks.spawn(async move {
            tokio::time::sleep(timeout).await;
            Done::RequestDeadline { request }
        })
    }

    /// Gives the provider `grace` to report the loss of the transport a call of `turn` failed on
    /// (see [`Done::TransportUnreported`]); `reason` is the uncertain outcome otherwise.
    pub(super) fn await_transport_report(&mut self, turn: TurnId, reason: String, grace: Duration) {
        self.tasks.spawn(async move {
            tokio::time::sleep(grace).await;
            Done::TransportUnreported { turn, reason }
        });
    }

    /// Asks the request handler, bounded by `timeout`; a panic or running out is a failure,
    /// which denies the request — but for running out with `deadline_settles`: the request's
    /// own deadline is no later, and its denial settles the request as an expiry (two timers
    /// at one instant must not race for it).
    pub(super) fn handle(
        &mut self,
        handler: DynRequestHandler,
        request: Request,
        timeout: Duration,
        deadline_settles: bool,
        parent: &Span,
    ) {
        let span = tracing::info_span!(parent: parent, "request_handler", request_id = %request.id);
        self.tasks.spawn(
            async move {
                // In a block, so that a `handle` that panics before returning its future is caught
                // as well.
                let call = std::panic::AssertUnwindSafe(async {
                    tokio::time::timeout(timeout, handler.handle(&request)).await
                });
                let result = match call.catch_unwind().await {
                    Ok(Ok(answer)) => Ok(answer),
                    Ok(Err(_)) if deadline_settles => Ok(None),
                    Ok(Err(_)) => Err(format!("the request handler did not answer within {timeout:?}")),
                    Err(_) => Err("the request handler panicked".to_owned()),
                };
                Done::Handled { request: request.id, result }
            }
            .instrument(span),
        );
    }

    /// True while any work runs.
    pub(super) fn is_busy(&self) -> bool {
        self.admission.is_some() || !self.tasks.is_empty()
    }

    /// The next finished piece of work (guard with [`Calls::is_busy`]), the admission first;
    /// `None` for an aborted task (a provider call's task does not end in a panic: see
    /// [`guarded`]).
    pub(super) async fn next(&mut self) -> Option<Done> {
        tokio::select! {
            biased;
            admitted = async { self.admission.as_mut().expect("guarded").await }, if self.admission.is_some() => {
                self.admission = None;
                admitted.ok().map(|(turn, generation, result)| Done::Admitted { turn, generation, result })
            }
            Some(done) = self.tasks.join_next(), if !self.tasks.is_empty() => done.ok(),
        }
    }

    /// Aborts every task but the admission; the steers they were running, to answer.
    pub(super) fn abort_all(&mut self) -> Vec<oneshot::Sender<Result<()>>> {
        self.tasks.abort_all();
        self.steering.drain().map(|(_, reply)| reply).collect()
    }
}

/// Runs a provider call under a deadline; a missed deadline is an uncertain outcome. A panic
/// is one too, caught around the whole task by [`guarded`].
async fn bounded<T>(
    operation: &'static str,
    timeout: Duration,
    call: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    tokio::time::timeout(timeout, call).await.unwrap_or(Err(Error::Timeout { operation, timeout }))
}

/// A provider call's task, `work`, with a panic anywhere in it turned into `panicked`: the
/// result a provider that panicked gives. `work` is an `async` block that makes the call, so a
/// provider method that panics before it returns its future is caught as well as one whose
/// future panics; the actor hears of the call either way and never waits for a result that
/// will not come.
async fn guarded<T>(work: impl std::future::Future<Output = T>, panicked: T) -> T {
    std::panic::AssertUnwindSafe(work).catch_unwind().await.unwrap_or(panicked)
}
