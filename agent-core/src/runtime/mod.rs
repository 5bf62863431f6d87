//! The session runtime: one actor task per session, its handle, and subscriptions.

pub(crate) mod actor;
pub(crate) mod inbox;
pub(crate) mod limited;
pub(crate) mod owner;
pub(crate) mod registry;
pub(crate) mod session_exec;
pub(crate) mod startup;
pub(crate) mod subscription;
pub(crate) mod watchdog;

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, watch};
use tracing::Span;

use crate::capabilities::Capabilities;
use crate::error::{Error, Result};
use crate::event::Event;
use crate::ids::{RequestId, TurnId};
use crate::options::TurnOptions;
use crate::request::Response;
use crate::session::{ExitReason, SessionRef, SessionStatus};
use crate::store::{DynStore, StoreError};
use crate::turn::Turn;

pub use subscription::{Lagged, Replay, StreamError, Subscription, SubscriptionError, Target, TurnStream};

/// How many commands may wait for a session actor before callers wait to send. Commands are
/// cheap for the actor (slow work runs in tasks), so a full queue means a burst of callers.
pub(crate) const COMMAND_CAPACITY: usize = 64;

/// Commits a batch; a store that panics has failed the write (the batch is not lost with it).
pub(crate) async fn write_batch(store: &DynStore, batch: &crate::store::WriteBatch) -> Result<(), StoreError> {
    use futures::FutureExt;
    match std::panic::AssertUnwindSafe(store.write(batch)).catch_unwind().await {
        Ok(result) => result,
        Err(_) => Err(StoreError::Backend("the store panicked during the write".into())),
    }
}

/// A command and the caller's span, so the actor's work is traced under the caller.
pub(crate) struct Envelope {
    pub(crate) command: Command,
    pub(crate) span: Span,
}

pub(crate) enum Command {
    Status(oneshot::Sender<SessionStatus>),
    Capabilities(oneshot::Sender<Result<Capabilities>>),
    StartTurn(Box<StartTurn>),
    Subscribe {
        turn: Option<TurnId>,
        replay: Replay,
        for_stream: bool,
        reply: oneshot::Sender<Result<Lookup<subscription::Grant>>>,
    },
    Await {
        turn: TurnId,
        reply: oneshot::Sender<Lookup<AwaitGrant>>,
    },
    Respond {
        request: RequestId,
        response: Response,
        reply: oneshot::Sender<Result<()>>,
    },
    Cancel {
        turn: TurnId,
        reason: Option<String>,
        reply: oneshot::Sender<Result<()>>,
    },
    Steer {
        turn: TurnId,
        input: crate::turn::TurnInput,
        reply: oneshot::Sender<Result<()>>,
    },
    Stop {
        force: bool,
        /// Delete the session's stored history once it ended, before its ID is free again (a
        /// new session whose starter went away without reading it).
        discard: bool,
        reply: oneshot::Sender<Result<()>>,
    },
    /// The harness shuts down: close whatever is running.
    Shutdown,
}

pub(crate) struct StartTurn {
    pub(crate) turn: Turn,
    pub(crate) options: TurnOptions,
    pub(crate) reply: oneshot::Sender<Result<Turn>>,
}

/// An answer about a turn the actor may no longer hold in memory.
pub(crate) enum Lookup<T> {
    Found(T),
    /// Not current and not cached: the harness consults the store. `pruned` says the cache has
    /// evicted turns, so a store-less session cannot tell "never existed" from "forgotten".
    NotHere {
        pruned: bool,
        store: Option<DynStore>,
    },
}

pub(crate) enum AwaitGrant {
    Done(Arc<Event>),
    Wait(oneshot::Receiver<Arc<Event>>),
}

/// The harness's handle to a live session actor.
#[derive(Clone)]
pub(crate) struct SessionHandle {
    pub(crate) session: SessionRef,
    pub(crate) tx: mpsc::Sender<Envelope>,
    pub(crate) exit: watch::Receiver<Option<ExitReason>>,
    /// The store the session started with (for lookups of turns it no longer holds).
    pub(crate) store: Option<DynStore>,
}

impl SessionHandle {
    /// Sends a command and waits for its reply. An actor that is already gone reads as
    /// `SessionNotFound`; one that ends before answering as `SessionDown` with its exit reason.
    pub(crate) async fn call<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> Command) -> Result<T> {
        let (reply, rx) = oneshot::channel();
        let envelope = Envelope { command: make(reply), span: Span::current() };
        if self.tx.send(envelope).await.is_err() {
            return Err(self.not_found());
        }
        match rx.await {
            Ok(answer) => Ok(answer),
            Err(_) => Err(Error::SessionDown { id: self.session.id.clone(), reason: self.exit_reason().await }),
        }
    }

    pub(crate) fn not_found(&self) -> Error {
        Error::SessionNotFound { id: self.session.id.clone() }
    }

    /// The exit reason once the actor has ended (waits for it).
    pub(crate) async fn exit_reason(&self) -> ExitReason {
        exit_reason(self.exit.clone()).await
    }
}

/// Waits for a session's exit reason; a runtime that vanished without one (its Tokio runtime
/// shut down, or it panicked) reads as [`ExitReason::Crashed`].
pub(crate) async fn exit_reason(mut exit: watch::Receiver<Option<ExitReason>>) -> ExitReason {
    let waited = exit.wait_for(Option::is_some).await.ok().and_then(|r| r.clone());
    waited
        .or_else(|| exit.borrow().clone())
        .unwrap_or_else(|| ExitReason::Crashed { reason: "session runtime ended without a reason".into() })
}
