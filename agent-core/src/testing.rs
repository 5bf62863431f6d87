//! A scripted provider for testing the runtime and orchestration code without any CLI.
//!
//! [`ScriptedProvider`] opens sessions instantly (or hangs, or fails, as configured) and
//! records every command the runtime sends it. Each session is driven from the test through a
//! [`ScriptedSession`]: emit events, create requests, finish turns, break the transport. Turns
//! can also play a queued script of [`Frame`]s as soon as they are admitted.
//!
//! ```
//! # use agent_core::testing::{Frame, ScriptedProvider};
//! # use agent_core::*;
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<()> {
//! let (provider, control) = ScriptedProvider::new("scripted");
//! let harness = Harness::builder().provider(provider).store(StoreChoice::Disabled).build()?;
//! control.push_script([Frame::delta("Hel"), Frame::delta("lo"), Frame::complete("Hello")]);
//! let session = harness.start_session("scripted", SessionOptions::new(std::env::temp_dir())).await?;
//! let turn = harness.start_turn(&session, "Say hello", TurnOptions::new()).await?;
//! let outcome = harness.await_turn(&turn, None).await.expect("completed");
//! assert_eq!(outcome.result.text.as_deref(), Some("Hello"));
//! # Ok(()) }
//! ```

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Notify;

use crate::capabilities::{Capabilities, Capability, Support};
use crate::error::{Error, Result};
use crate::event::{EventKind, RawJson};
use crate::ids::{ProviderId, SessionId, TurnId};
use crate::options::SessionOptions;
use crate::provider::{
    Admission, DynProvider, OpenContext, OpenConversation, Opened, Provider, ProviderSession, Sink, TurnStart,
};
use crate::request::{ProviderRef, Request, RequestSpec, Response};
use crate::turn::{TurnInput, TurnResult, TurnStatus};

/// How `open` behaves.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum OpenBehavior {
    /// Opens at once.
    Succeed,
    /// Opens after a delay.
    Delay(Duration),
    /// Never returns (until dropped by the startup timeout).
    Hang,
    /// Fails with a provider error.
    Fail(String),
    /// Fails with a provider error after a delay.
    FailAfter(Duration, String),
    /// Reports the transport down through the sink while opening, then opens anyway.
    LoseTransport(String),
    /// Opens a new conversation whatever was asked (a CLI that silently starts fresh).
    IgnoreConversation,
}

/// How a provider command (`start_turn`, `respond`) behaves.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CallBehavior {
    /// Accepts.
    Accept,
    /// Accepts after a delay.
    Delay(Duration),
    /// Definitely rejects.
    Reject(String),
    /// Fails with a broken transport (an uncertain outcome).
    Break(String),
    /// Never returns.
    Hang,
    /// Panics (a crashed provider callback).
    Panic(String),
    /// Waits, then behaves as the inner behavior.
    After(Duration, Box<CallBehavior>),
}

/// How `cancel` behaves.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CancelBehavior {
    /// Acknowledges, then ends the turn with this status.
    Finish(TurnStatus),
    /// Acknowledges and does nothing else.
    AckOnly,
    /// Definitely rejects.
    Reject(String),
    /// Never returns.
    Hang,
    /// Fails as a call does whose transport went down (`Error::Transport` with this reason),
    /// without the provider reporting the loss.
    TransportFails(String),
}

/// One step of a turn script.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Frame {
    /// Emits an event for the turn, with optional raw JSON.
    Event(EventKind, Option<String>),
    /// Creates a request.
    Request(RequestSpec),
    /// Waits until the runtime delivered a response for this provider reference.
    WaitResponse(String),
    /// Sleeps (use with tokio's paused clock).
    Sleep(Duration),
    /// Ends the turn.
    Finish(TurnStatus, TurnResult),
    /// Reports the transport down.
    TransportDown(String),
}

impl Frame {
    /// A `message_delta`.
    pub fn delta(text: &str) -> Frame {
        Frame::Event(EventKind::MessageDelta { item_id: None, text: text.into() }, None)
    }

    /// A `turn_completed` with final text.
    pub fn complete(text: &str) -> Frame {
        Frame::Finish(TurnStatus::Completed, TurnResult::text(text))
    }
}

/// A command the runtime sent to a scripted session.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Recorded {
    /// `start_turn`.
    StartTurn {
        /// The turn.
        turn: TurnId,
        /// Its input.
        input: TurnInput,
    },
    /// `respond`.
    Respond {
        /// The request.
        request: Box<Request>,
        /// The response.
        response: Response,
    },
    /// `steer`.
    Steer {
        /// The turn.
        turn: TurnId,
        /// The added input.
        input: TurnInput,
    },
    /// `cancel`.
    Cancel {
        /// The turn.
        turn: TurnId,
    },
    /// `close`.
    Close,
}

#[derive(Debug)]
struct Config {
    open: OpenBehavior,
    admission: VecDeque<CallBehavior>,
    respond: VecDeque<CallBehavior>,
    steer: VecDeque<CallBehavior>,
    cancel: CancelBehavior,
    scripts: VecDeque<Vec<Frame>>,
    capabilities: Capabilities,
    credentials: Vec<String>,
    /// How long a session's `close` takes (a CLI that takes its time to exit).
    close_delay: std::time::Duration,
    /// A session's `close` panics (after its delay).
    close_panics: bool,
}

#[derive(Debug)]
struct Shared {
    config: Mutex<Config>,
    sessions: Mutex<HashMap<SessionId, Arc<SessionInner>>>,
    /// The conversation each open was asked for, in order.
    conversations: Mutex<Vec<(SessionId, OpenConversation)>>,
    opened: Notify,
    abandoned_opens: AtomicUsize,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A provider whose sessions are driven by the test. Create it with [`ScriptedProvider::new`].
#[derive(Clone, Debug)]
pub struct ScriptedProvider {
    id: ProviderId,
    shared: Arc<Shared>,
}

/// Configures a [`ScriptedProvider`] and reaches its sessions.
#[derive(Clone, Debug)]
pub struct ScriptedControl {
    shared: Arc<Shared>,
}

impl ScriptedProvider {
    /// A provider registered as `id`, and its control handle.
    // The provider is only useful together with its control handle, so `new` returns both.
    #[allow(clippy::new_ret_no_self)]
    pub fn new(id: &str) -> (DynProvider, ScriptedControl) {
        let shared = Arc::new(Shared {
            config: Mutex::new(Config {
                open: OpenBehavior::Succeed,
                admission: VecDeque::new(),
                respond: VecDeque::new(),
                steer: VecDeque::new(),
                cancel: CancelBehavior::Finish(TurnStatus::Cancelled),
                scripts: VecDeque::new(),
                capabilities: Self::default_capabilities(),
                credentials: Vec::new(),
                close_delay: std::time::Duration::ZERO,
                close_panics: false,
            }),
            sessions: Mutex::new(HashMap::new()),
            conversations: Mutex::new(Vec::new()),
            opened: Notify::new(),
            abandoned_opens: AtomicUsize::new(0),
        });
        let provider = ScriptedProvider { id: ProviderId::new(id), shared: Arc::clone(&shared) };
        (Arc::new(provider), ScriptedControl { shared })
    }

    /// What scripted sessions report by default: everything native except fork and steer.
    pub fn default_capabilities() -> Capabilities {
        let mut caps = Capabilities::NONE;
        for &cap in Capability::ALL {
            caps = caps.with(cap, Support::Native);
        }
        caps.with(Capability::Fork, Support::Unsupported).with(Capability::Steer, Support::Unsupported)
    }
}

impl ScriptedControl {
    /// Sets how the next opens behave.
    pub fn set_open(&self, behavior: OpenBehavior) {
        lock(&self.shared.config).open = behavior;
    }

    /// Queues the admission behavior of the next turn (default: accept).
    pub fn push_admission(&self, behavior: CallBehavior) {
        lock(&self.shared.config).admission.push_back(behavior);
    }

    /// Queues the behavior of the next `respond` (default: accept).
    pub fn push_respond(&self, behavior: CallBehavior) {
        lock(&self.shared.config).respond.push_back(behavior);
    }

    /// Queues the behavior of the next `steer` (default: accept).
    pub fn push_steer(&self, behavior: CallBehavior) {
        lock(&self.shared.config).steer.push_back(behavior);
    }

    /// Sets how `cancel` behaves (default: acknowledge, then `turn_cancelled`).
    pub fn set_cancel(&self, behavior: CancelBehavior) {
        lock(&self.shared.config).cancel = behavior;
    }

    /// Makes each session's `close` take `delay` before it is done (a CLI slow to exit).
    pub fn set_close_delay(&self, delay: std::time::Duration) {
        lock(&self.shared.config).close_delay = delay;
    }

    /// Makes each session's `close` panic (a provider bug).
    pub fn set_close_panics(&self) {
        lock(&self.shared.config).close_panics = true;
    }

    /// Queues a script the next admitted turn plays.
    pub fn push_script(&self, frames: impl IntoIterator<Item = Frame>) {
        lock(&self.shared.config).scripts.push_back(frames.into_iter().collect());
    }

    /// Sets the capabilities reported for new sessions.
    pub fn set_capabilities(&self, capabilities: Capabilities) {
        lock(&self.shared.config).capabilities = capabilities;
    }

    /// Sets the credentials new sessions report (see [`Opened::credentials`]).
    pub fn set_credentials(&self, credentials: impl IntoIterator<Item = impl Into<String>>) {
        lock(&self.shared.config).credentials = credentials.into_iter().map(Into::into).collect();
    }

    /// The scripted session opened for `id`, waiting for it to open.
    pub async fn session(&self, id: &SessionId) -> ScriptedSession {
        loop {
            let notified = self.shared.opened.notified();
            if let Some(inner) = lock(&self.shared.sessions).get(id) {
                return ScriptedSession { inner: Arc::clone(inner) };
            }
            notified.await;
        }
    }

    /// How many opens were dropped before finishing (e.g. by the startup timeout).
    pub fn abandoned_opens(&self) -> usize {
        self.shared.abandoned_opens.load(Ordering::SeqCst)
    }

    /// The conversation each open was asked for, in order.
    pub fn conversations(&self) -> Vec<(SessionId, OpenConversation)> {
        lock(&self.shared.conversations).clone()
    }
}

#[async_trait]
impl Provider for ScriptedProvider {
    fn id(&self) -> ProviderId {
        self.id.clone()
    }

    fn capabilities(&self, _options: &SessionOptions) -> Capabilities {
        lock(&self.shared.config).capabilities
    }

    async fn open(&self, ctx: OpenContext) -> Result<Opened> {
        struct Abandon<'a>(&'a AtomicUsize, bool);
        impl Drop for Abandon<'_> {
            fn drop(&mut self) {
                if !self.1 {
                    self.0.fetch_add(1, Ordering::SeqCst);
                }
            }
        }
        let mut guard = Abandon(&self.shared.abandoned_opens, false);
        let (behavior, credentials) = {
            let config = lock(&self.shared.config);
            (config.open.clone(), config.credentials.clone())
        };
        lock(&self.shared.conversations).push((ctx.session_id.clone(), ctx.conversation.clone()));
        let mut conversation = ctx.conversation.clone();
        let fresh = if behavior == OpenBehavior::IgnoreConversation { "-fresh" } else { "" };
        match behavior {
            OpenBehavior::Succeed => {}
            OpenBehavior::Delay(d) => tokio::time::sleep(d).await,
            OpenBehavior::Hang => futures::future::pending::<()>().await,
            OpenBehavior::Fail(reason) => {
                guard.1 = true;
                return Err(Error::ProviderUnavailable { provider: self.id.clone(), reason });
            }
            OpenBehavior::FailAfter(delay, reason) => {
                tokio::time::sleep(delay).await;
                guard.1 = true;
                return Err(Error::ProviderUnavailable { provider: self.id.clone(), reason });
            }
            OpenBehavior::LoseTransport(reason) => {
                let _ = ctx.sink.transport_down(reason).await;
            }
            OpenBehavior::IgnoreConversation => conversation = OpenConversation::New,
        }
        guard.1 = true;
        let inner = Arc::new(SessionInner {
            id: ctx.session_id.clone(),
            provider: self.id.clone(),
            sink: ctx.sink,
            shared: Arc::clone(&self.shared),
            log: Mutex::new(Vec::new()),
            responded: Notify::new(),
            closed: AtomicBool::new(false),
        });
        lock(&self.shared.sessions).insert(ctx.session_id.clone(), Arc::clone(&inner));
        self.shared.opened.notify_waiters();
        // A resumed conversation keeps its ID; a new or forked one gets a fresh one.
        let provider_session_id = match conversation {
            OpenConversation::Resume { provider_session_id } => provider_session_id,
            OpenConversation::Fork { provider_session_id } => format!("{provider_session_id}-fork"),
            _ => format!("scripted-{}{fresh}", ctx.session_id),
        };
        Ok(Opened::new(Arc::new(RuntimeHandle(inner)))
            .provider_session_id(provider_session_id)
            .credentials(credentials))
    }
}

#[derive(Debug)]
struct SessionInner {
    id: SessionId,
    provider: ProviderId,
    sink: Sink,
    shared: Arc<Shared>,
    log: Mutex<Vec<Recorded>>,
    responded: Notify,
    closed: AtomicBool,
}

impl SessionInner {
    async fn call(&self, behavior: Option<CallBehavior>) -> Result<()> {
        let mut behavior = behavior.unwrap_or(CallBehavior::Accept);
        while let CallBehavior::After(delay, then) = behavior {
            tokio::time::sleep(delay).await;
            behavior = *then;
        }
        match behavior {
            CallBehavior::Accept => Ok(()),
            CallBehavior::Delay(d) => {
                tokio::time::sleep(d).await;
                Ok(())
            }
            CallBehavior::Reject(reason) => Err(Error::ProviderRejected { provider: self.provider.clone(), reason }),
            CallBehavior::Break(reason) => Err(Error::Transport { provider: self.provider.clone(), reason }),
            CallBehavior::Hang => futures::future::pending().await,
            CallBehavior::Panic(message) => panic!("{message}"),
            CallBehavior::After(..) => unreachable!("unwrapped above"),
        }
    }

    fn responded_to(&self, provider_ref: &str) -> bool {
        lock(&self.log)
            .iter()
            .any(|r| matches!(r, Recorded::Respond { request, .. } if request.provider_ref.0 == provider_ref))
    }

    async fn play(self: Arc<Self>, turn: TurnId, frames: Vec<Frame>) {
        for frame in frames {
            let sent = match frame {
                Frame::Event(kind, raw) => self.sink.emit(Some(&turn), kind, raw.map(raw_json)).await,
                Frame::Request(spec) => self.sink.request(&turn, spec, None).await,
                Frame::WaitResponse(provider_ref) => {
                    loop {
                        let notified = self.responded.notified();
                        if self.responded_to(&provider_ref) {
                            break;
                        }
                        notified.await;
                    }
                    Ok(())
                }
                Frame::Sleep(d) => {
                    tokio::time::sleep(d).await;
                    Ok(())
                }
                Frame::Finish(status, result) => {
                    self.sink.emit(Some(&turn), EventKind::terminal(status, result), None).await
                }
                Frame::TransportDown(reason) => self.sink.transport_down(reason).await,
            };
            if sent.is_err() {
                return;
            }
        }
    }
}

fn raw_json(text: String) -> RawJson {
    RawJson::from_string(text).expect("scripted raw frames must be valid JSON")
}

#[derive(Debug)]
struct RuntimeHandle(Arc<SessionInner>);

#[async_trait]
impl ProviderSession for RuntimeHandle {
    async fn start_turn(&self, turn: TurnStart) -> Result<Admission> {
        let inner = &self.0;
        lock(&inner.log).push(Recorded::StartTurn { turn: turn.id().clone(), input: turn.input().clone() });
        let (behavior, script) = {
            let mut config = lock(&inner.shared.config);
            (config.admission.pop_front(), config.scripts.pop_front())
        };
        inner.call(behavior).await?;
        if let Some(frames) = script {
            tokio::spawn(Arc::clone(inner).play(turn.id().clone(), frames));
        }
        Ok(Admission::with_provider_turn_id(format!("p-{}", turn.id())))
    }

    async fn respond(&self, request: &Request, response: &Response) -> Result<()> {
        let inner = &self.0;
        let behavior = lock(&inner.shared.config).respond.pop_front();
        inner.call(behavior).await?;
        lock(&inner.log).push(Recorded::Respond { request: Box::new(request.clone()), response: response.clone() });
        inner.responded.notify_waiters();
        Ok(())
    }

    async fn steer(&self, turn: &TurnId, input: &TurnInput) -> Result<()> {
        let inner = &self.0;
        lock(&inner.log).push(Recorded::Steer { turn: turn.clone(), input: input.clone() });
        let behavior = lock(&inner.shared.config).steer.pop_front();
        inner.call(behavior).await
    }

    async fn cancel(&self, turn: &TurnId) -> Result<()> {
        let inner = &self.0;
        lock(&inner.log).push(Recorded::Cancel { turn: turn.clone() });
        let behavior = lock(&inner.shared.config).cancel.clone();
        match behavior {
            CancelBehavior::Finish(status) => {
                let sink = inner.sink.clone();
                let turn = turn.clone();
                tokio::spawn(async move {
                    let result = TurnResult::reason("cancelled by request");
                    let _ = sink.emit(Some(&turn), EventKind::terminal(status, result), None).await;
                });
                Ok(())
            }
            CancelBehavior::AckOnly => Ok(()),
            CancelBehavior::Reject(reason) => Err(Error::ProviderRejected { provider: inner.provider.clone(), reason }),
            CancelBehavior::Hang => futures::future::pending().await,
            CancelBehavior::TransportFails(reason) => {
                Err(Error::Transport { provider: inner.provider.clone(), reason })
            }
        }
    }

    async fn close(&self) {
        lock(&self.0.log).push(Recorded::Close);
        let (delay, panics) = {
            let config = lock(&self.0.shared.config);
            (config.close_delay, config.close_panics)
        };
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        assert!(!panics, "the scripted session's close panics, as told");
        self.0.closed.store(true, Ordering::SeqCst);
    }
}

/// The test's side of one scripted session.
#[derive(Clone, Debug)]
pub struct ScriptedSession {
    inner: Arc<SessionInner>,
}

impl ScriptedSession {
    /// The session ID.
    pub fn id(&self) -> &SessionId {
        &self.inner.id
    }

    /// The sink, for emitting anything.
    pub fn sink(&self) -> &Sink {
        &self.inner.sink
    }

    /// Emits an event for `turn`.
    pub async fn emit(&self, turn: &TurnId, kind: EventKind) {
        let _ = self.inner.sink.emit(Some(turn), kind, None).await;
    }

    /// Emits an event with raw provider JSON.
    pub async fn emit_raw(&self, turn: Option<&TurnId>, kind: EventKind, raw: &str) {
        let _ = self.inner.sink.emit(turn, kind, Some(raw_json(raw.to_owned()))).await;
    }

    /// Emits a `message_delta`.
    pub async fn delta(&self, turn: &TurnId, text: &str) {
        self.emit(turn, EventKind::MessageDelta { item_id: None, text: text.into() }).await;
    }

    /// Creates a request for `turn`.
    pub async fn request(&self, turn: &TurnId, spec: RequestSpec) {
        let _ = self.inner.sink.request(turn, spec, None).await;
    }

    /// Reports that the provider resolved a request by itself.
    pub async fn request_resolved(&self, provider_ref: &str) {
        let _ = self.inner.sink.request_resolved(ProviderRef(provider_ref.into()), None).await;
    }

    /// Ends `turn` with `status`.
    pub async fn finish(&self, turn: &TurnId, status: TurnStatus, result: TurnResult) {
        self.emit(turn, EventKind::terminal(status, result)).await;
    }

    /// Completes `turn` with final text.
    pub async fn complete(&self, turn: &TurnId, text: &str) {
        self.finish(turn, TurnStatus::Completed, TurnResult::text(text)).await;
    }

    /// Reports the transport down.
    pub async fn transport_down(&self, reason: &str) {
        let _ = self.inner.sink.transport_down(reason).await;
    }

    /// Reports a new provider session ID.
    pub async fn session_updated(&self, provider_session_id: &str) {
        let _ = self.inner.sink.session_updated(Some(provider_session_id.into()), None).await;
    }

    /// Every command recorded so far.
    pub fn commands(&self) -> Vec<Recorded> {
        lock(&self.inner.log).clone()
    }

    /// The responses delivered so far.
    pub fn responses(&self) -> Vec<Response> {
        self.commands()
            .into_iter()
            .filter_map(|r| match r {
                Recorded::Respond { response, .. } => Some(response),
                _ => None,
            })
            .collect()
    }

    /// True once the runtime closed the session.
    pub fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::SeqCst)
    }
}

/// A [`Sink`] attached to no session runtime, and the [`SinkRecorder`] that receives what is
/// sent into it: unit tests of a provider's reader and normalizer without a `Harness`.
///
/// ```
/// # use agent_core::testing::{Sent, sink};
/// # use agent_core::{EventKind, TurnId};
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let (sink, mut sent) = sink();
/// let turn = TurnId::from_string("turn-1");
/// sink.emit(Some(&turn), EventKind::MessageDelta { item_id: None, text: "Hi".into() }, None).await.unwrap();
/// match sent.try_next() {
///     Some(Sent::Event { turn: Some(t), kind: EventKind::MessageDelta { text, .. }, .. }) => {
///         assert_eq!((t, text.as_str()), (turn, "Hi"))
///     }
///     other => panic!("{other:?}"),
/// }
/// drop(sent);
/// assert!(sink.is_closed(), "a dropped recorder closes the sink, like a runtime that went away");
/// # }
/// ```
pub fn sink() -> (Sink, SinkRecorder) {
    let (sink, rx) = Sink::channel();
    (sink, SinkRecorder { rx })
}

/// What a provider sent into a [`sink()`], in order.
#[derive(Debug)]
pub struct SinkRecorder {
    rx: crate::runtime::inbox::Inbox,
}

/// One message a provider sent into its [`Sink`].
#[derive(Debug)]
#[non_exhaustive]
pub enum Sent {
    /// [`Sink::emit`].
    Event {
        /// The turn, if any.
        turn: Option<TurnId>,
        /// What happened.
        kind: EventKind,
        /// The frame it came from.
        raw: Option<RawJson>,
    },
    /// [`Sink::request`].
    Request {
        /// The turn.
        turn: TurnId,
        /// The request.
        spec: Box<RequestSpec>,
        /// The frame it came from.
        raw: Option<RawJson>,
    },
    /// [`Sink::request_resolved`].
    RequestResolved {
        /// The provider's reference to the request.
        provider_ref: ProviderRef,
        /// The frame it came from.
        raw: Option<RawJson>,
    },
    /// [`Sink::session_updated`].
    SessionUpdated {
        /// The provider's session ID.
        provider_session_id: Option<String>,
        /// The frame it came from.
        raw: Option<RawJson>,
    },
    /// [`Sink::transport_down`].
    TransportDown {
        /// Why.
        reason: String,
    },
}

impl SinkRecorder {
    /// The next message already sent, if any.
    pub fn try_next(&mut self) -> Option<Sent> {
        self.rx.try_recv().map(Sent::from)
    }

    /// Waits for the next message; `None` once every clone of the sink is dropped.
    pub async fn next(&mut self) -> Option<Sent> {
        self.rx.recv().await.map(Sent::from)
    }

    /// Every message sent so far.
    pub fn drain(&mut self) -> Vec<Sent> {
        std::iter::from_fn(|| self.try_next()).collect()
    }
}

impl From<crate::provider::ProviderMessage> for Sent {
    fn from(message: crate::provider::ProviderMessage) -> Self {
        use crate::provider::ProviderMessage as M;
        match message {
            M::Event { turn, kind, raw } => Sent::Event { turn, kind, raw },
            M::Request { turn, spec, raw } => Sent::Request { turn, spec, raw },
            M::RequestResolved { provider_ref, raw } => Sent::RequestResolved { provider_ref, raw },
            M::SessionUpdated { provider_session_id, raw } => Sent::SessionUpdated { provider_session_id, raw },
            M::TransportDown { reason } => Sent::TransportDown { reason },
        }
    }
}
