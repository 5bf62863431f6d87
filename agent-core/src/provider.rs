//! The provider contract: how a CLI adapter plugs into the session runtime.
//!
//! A [`Provider`] validates options and opens a [`ProviderSession`] through the injected
//! [`Exec`](crate::exec::Exec). The session runtime calls the provider session's methods from
//! short-lived tasks (never from the session actor itself) and bounds each call with the
//! session's timeouts. The provider reports everything it observes through its [`Sink`]:
//! normalized events with their raw JSON, requests, independent request resolutions, identity
//! updates, and transport loss. The runtime assigns sequence numbers, persists, and publishes.
//!
//! Rules for implementations:
//! - `start_turn`, `respond` and `cancel` return once the provider *accepted* the command;
//!   outcomes arrive as events. Return a definite error ([`crate::Error::is_definite`]) only when
//!   the provider certainly did nothing; a timeout or broken pipe is uncertain and retires the
//!   session.
//! - Every turn ends with exactly one terminal event ([`EventKind::terminal`]); a process exit
//!   without one is reported as `turn_failed` with the exit status and stderr tail, followed by
//!   [`Sink::transport_down`].
//! - Dropping the provider session must end its processes (kill-on-drop).

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

use crate::capabilities::{Capabilities, Capability, Support};
use crate::error::{Error, Result};
use crate::event::{EventKind, RawJson};
use crate::exec::DynExec;
use crate::ids::{ProviderId, SessionId, TurnId};
use crate::options::{ConversationMode, ProviderOptions, SessionOptions, TurnOptions};
use crate::request::{ProviderRef, Request, RequestSpec, Response};
use crate::runtime::inbox;
use crate::turn::{Turn, TurnInput};

/// A shared provider.
pub type DynProvider = Arc<dyn Provider>;

/// A provider adapter (one per CLI or preset).
#[async_trait]
pub trait Provider: Send + Sync + fmt::Debug + 'static {
    /// The ID sessions name it by.
    fn id(&self) -> ProviderId;

    /// What sessions of this provider can do with `options`, before anything is spawned.
    fn capabilities(&self, options: &SessionOptions) -> Capabilities;

    /// Checks options this provider cannot honour. Runs before anything is spawned or stored.
    ///
    /// The default refuses options that need a capability the provider reports unsupported
    /// (see [`require_capabilities`]).
    fn validate(&self, options: &SessionOptions) -> Result<()> {
        require_capabilities(&self.id(), &self.capabilities(options), options)
    }

    /// Reads this provider's options from JSON (a [`SessionConfig`](crate::SessionConfig)'s `provider_options`) into
    /// `into`, merging them with what is already there: fields the JSON leaves out keep their
    /// value (see [`ProviderOptions::update`]).
    ///
    /// Errors are [`Error::InvalidConfig`] starting with the path from `provider_options`
    /// ([`provider_options_from_json`](crate::config::provider_options_from_json) formats them),
    /// and leave `into` unchanged. Options meant for another provider are an error, never
    /// ignored. The default takes no options: `null` and `{}` are accepted and change nothing;
    /// anything else is refused.
    fn options_from_json(&self, options: &serde_json::Value, into: &mut ProviderOptions) -> Result<()> {
        let _ = into;
        if crate::config::is_empty_options(options) {
            return Ok(());
        }
        Err(Error::InvalidConfig(format!("provider_options: provider `{}` takes no options from JSON", self.id())))
    }

    /// Opens a provider session: spawn the CLI through `ctx.exec`, complete the handshake, and
    /// return once it can take a turn. Dropping the returned future must clean up everything it
    /// started (the runtime drops it when `startup_timeout` passes).
    async fn open(&self, ctx: OpenContext) -> Result<Opened>;
}

/// Refuses options that need a capability `caps` marks unsupported.
pub fn require_capabilities(provider: &ProviderId, caps: &Capabilities, options: &SessionOptions) -> Result<()> {
    let needs = [
        (options.system_prompt.is_some(), Capability::SystemPrompt),
        (options.model.is_some(), Capability::ModelSelection),
        (options.approval_policy.is_some(), Capability::ApprovalPolicy),
        (options.sandbox.is_some(), Capability::Sandbox),
        (!options.mcp_servers.is_empty(), Capability::PerSessionMcp),
        (!options.skills.is_empty(), Capability::Skills),
    ];
    let conversation = match options.conversation.mode() {
        Some(crate::options::ConversationMode::Resume) => (true, Capability::Resume),
        Some(crate::options::ConversationMode::Fork) => (true, Capability::Fork),
        None => (false, Capability::Resume),
    };
    let needs = needs.into_iter().chain([conversation]);
    match needs.into_iter().find(|(needed, cap)| *needed && caps.get(*cap) == Support::Unsupported) {
        Some((_, capability)) => Err(Error::Unsupported { provider: provider.clone(), capability }),
        None => Ok(()),
    }
}

/// The name of the type `T` without its path (`CodexOptions`).
fn short_type_name<T>() -> &'static str {
    std::any::type_name::<T>().rsplit("::").next().unwrap_or_default()
}

/// Refuses a turn given `T`, a provider's session options type, which a turn cannot change,
/// instead of ignoring it (for [`ProviderSession::validate_turn`]). `instead` names the
/// provider's per-turn options type, where it has one. Option types of other providers pass:
/// a caller may set options for several providers at once.
pub fn refuse_session_options<T: std::any::Any + Send + Sync>(turn: &TurnOptions, instead: Option<&str>) -> Result<()> {
    if turn.provider_options.get::<T>().is_none() {
        return Ok(());
    }
    let name = short_type_name::<T>();
    let turn_options = match instead {
        Some(turn_type) => format!("a turn takes {turn_type}"),
        None => "the provider takes no per-turn options".to_owned(),
    };
    let reason = format!("{name} apply to the whole session and are set when it starts; {turn_options}");
    Err(Error::InvalidOption { option: "provider_options", reason })
}

/// Refuses a session given `T`, a provider's per-turn options type, which the session would
/// ignore (for [`Provider::validate`]); `session_type` names the provider's session options
/// type. As for [`refuse_session_options`], other providers' types pass.
pub fn refuse_turn_options<T: std::any::Any + Send + Sync>(options: &SessionOptions, session_type: &str) -> Result<()> {
    if options.provider_options.get::<T>().is_none() {
        return Ok(());
    }
    let name = short_type_name::<T>();
    let reason = format!("{name} apply to one turn and are set on its TurnOptions; a session takes {session_type}");
    Err(Error::InvalidOption { option: "provider_options", reason })
}

/// The provider conversation a session opens, resolved by the runtime from
/// [`SessionOptions::conversation`](crate::SessionOptions::conversation) (a stored session named
/// as the source is looked up in the store; its recorded provider session ID is used).
///
/// Rules for providers: on `Resume`, open that exact conversation and report its ID in
/// [`Opened::provider_session_id`] — the runtime refuses a session that reports another one
/// (never a silently fresh conversation); when the CLI cannot continue it, fail `open` (ideally
/// with [`Error::ResumeFailed`]). On `Fork`, report the new conversation's ID.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum OpenConversation {
    /// A new conversation.
    #[default]
    New,
    /// Continue this provider conversation.
    Resume {
        /// The provider's conversation ID.
        provider_session_id: String,
    },
    /// Branch this provider conversation into a new one.
    Fork {
        /// The provider's conversation ID.
        provider_session_id: String,
    },
}

impl OpenConversation {
    /// The provider conversation this one resumes or forks, and which of the two; `None` for a
    /// new conversation.
    pub fn continued(&self) -> Option<(ConversationMode, &str)> {
        match self {
            OpenConversation::New => None,
            OpenConversation::Resume { provider_session_id } => Some((ConversationMode::Resume, provider_session_id)),
            OpenConversation::Fork { provider_session_id } => Some((ConversationMode::Fork, provider_session_id)),
        }
    }
}

/// What [`Provider::open`] gets.
#[non_exhaustive]
pub struct OpenContext {
    /// The session being opened.
    pub session_id: SessionId,
    /// Validated options.
    pub options: Arc<SessionOptions>,
    /// Where to spawn processes.
    pub exec: DynExec,
    /// Where to report what the provider observes.
    pub sink: Sink,
    /// Which provider conversation to open.
    pub conversation: OpenConversation,
    /// On a resume of the session under its own ID: the requests it approved for the whole
    /// session ([`Scope::Session`](crate::Scope::Session)), oldest first, read from the store.
    /// A provider that keeps such approvals in its CLI's process, or emulates them, restores
    /// them from these; they are never more than the session's own answers.
    pub session_approvals: Vec<crate::request::Request>,
}

impl OpenContext {
    /// Assembles a context for a new conversation (the runtime does this; tests of providers
    /// may too).
    pub fn new(session_id: SessionId, options: Arc<SessionOptions>, exec: DynExec, sink: Sink) -> Self {
        OpenContext {
            session_id,
            options,
            exec,
            sink,
            conversation: OpenConversation::New,
            session_approvals: Vec::new(),
        }
    }

    /// Hands the session's earlier approvals for the session (see
    /// [`OpenContext::session_approvals`]).
    pub fn with_session_approvals(mut self, approvals: Vec<crate::request::Request>) -> Self {
        self.session_approvals = approvals;
        self
    }

    /// Opens `conversation` instead of a new one.
    pub fn with_conversation(mut self, conversation: OpenConversation) -> Self {
        self.conversation = conversation;
        self
    }
}

impl fmt::Debug for OpenContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenContext")
            .field("session_id", &self.session_id)
            .field("options", &self.options)
            .field("exec", &self.exec)
            .field("conversation", &self.conversation)
            .field("session_approvals", &self.session_approvals.len())
            .finish_non_exhaustive()
    }
}

/// A successfully opened provider session.
#[non_exhaustive]
pub struct Opened {
    /// The runtime to send commands to.
    pub session: Arc<dyn ProviderSession>,
    /// The provider's own session/thread ID, if known at open.
    pub provider_session_id: Option<String>,
    /// Capabilities of this session, if they differ from [`Provider::capabilities`].
    pub capabilities: Option<Capabilities>,
    /// The credentials the runtime keeps out of streamed text (see [`Opened::credentials`]).
    pub credentials: Vec<String>,
}

impl Opened {
    /// An opened session.
    pub fn new(session: Arc<dyn ProviderSession>) -> Self {
        Opened { session, provider_session_id: None, capabilities: None, credentials: Vec::new() }
    }

    /// Sets the provider session ID.
    pub fn provider_session_id(mut self, id: impl Into<String>) -> Self {
        self.provider_session_id = Some(id.into());
        self
    }

    /// Overrides the capabilities.
    pub fn capabilities(mut self, capabilities: Capabilities) -> Self {
        self.capabilities = Some(capabilities);
        self
    }

    /// The credentials the session's CLI was given, which the runtime keeps out of the deltas
    /// it publishes (`message_delta`, `reasoning_delta`, `command_output_delta`, `tool_progress`).
    ///
    /// A provider that redacts credentials from each line it reads still lets through a key a
    /// model quotes, streamed as deltas of a few characters each. The runtime reads each item's
    /// deltas as one text: once a stream's end is more than three bytes of a credential's
    /// beginning, it holds the rest back until it knows; a key that completes becomes
    /// [`REDACTED`](crate::REDACTED), and held text that is none is published with the stream's
    /// next delta, or before the item's whole message or the tool's completion, or the end of
    /// the turn (or of the session, for a session's own deltas); nothing else in between ends a
    /// stream. A delta it changed carries no `raw` (the line holds the piece it took out); one
    /// held back whole is not published.
    pub fn credentials(mut self, credentials: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.credentials.extend(credentials.into_iter().map(Into::into));
        self
    }
}

impl fmt::Debug for Opened {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Opened")
            .field("session", &self.session)
            .field("provider_session_id", &self.provider_session_id)
            .field("credentials", &self.credentials.len())
            .finish_non_exhaustive()
    }
}

/// A turn handed to the provider for admission.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct TurnStart {
    /// The recorded turn (ID, input, metadata).
    pub turn: Turn,
    /// The caller's turn options.
    pub options: TurnOptions,
}

impl TurnStart {
    /// The turn's ID.
    pub fn id(&self) -> &TurnId {
        &self.turn.id
    }

    /// The turn's input.
    pub fn input(&self) -> &TurnInput {
        &self.turn.input
    }
}

/// What the provider says when it admits a turn.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Admission {
    /// The provider's own turn ID, if it has one.
    pub provider_turn_id: Option<String>,
}

impl Admission {
    /// Admission with a provider turn ID.
    pub fn with_provider_turn_id(id: impl Into<String>) -> Self {
        Admission { provider_turn_id: Some(id.into()) }
    }
}

/// One open provider session.
#[async_trait]
pub trait ProviderSession: Send + Sync + fmt::Debug + 'static {
    /// Checks a turn this session cannot take: its options (a provider's session options type,
    /// see [`refuse_session_options`]; a setting the session did not opt in to) and its input
    /// (an item the CLI cannot carry). Runs in [`Harness::start_turn`](crate::Harness::start_turn)
    /// before the turn is recorded, so a refusal leaves the session as it was; quick and
    /// without I/O, as it runs on the session's task. The default accepts every turn.
    fn validate_turn(&self, options: &TurnOptions, input: &TurnInput) -> Result<()> {
        let _ = (options, input);
        Ok(())
    }

    /// Admits a turn. Returns when the provider accepted (or refused) it.
    async fn start_turn(&self, turn: TurnStart) -> Result<Admission>;

    /// Delivers a response to a pending request. The request has already been checked with
    /// [`Response::validate_for`]; providers add their own checks (e.g. offered decisions).
    async fn respond(&self, request: &Request, response: &Response) -> Result<()>;

    /// Asks the provider to stop the turn. The outcome arrives as a terminal event: from
    /// `Ok`, the provider has `provider_command_timeout` to send it, after which the runtime
    /// fails the turn and retires the session.
    async fn cancel(&self, turn: &TurnId) -> Result<()>;

    /// Adds input to the active turn. The runtime calls it only when the session reports the
    /// `steer` capability, so the default (a definite refusal) is for providers without it.
    async fn steer(&self, turn: &TurnId, input: &TurnInput) -> Result<()> {
        let _ = (turn, input);
        Err(Error::Unsupported { provider: ProviderId::new("provider"), capability: Capability::Steer })
    }

    /// Closes the session gracefully (the runtime bounds this call). Processes must also end
    /// when the value is dropped.
    async fn close(&self);
}

/// What a provider reports; the runtime turns it into events and state.
// `Event` is the hot variant (every CLI frame): boxing it would add an allocation per frame.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum ProviderMessage {
    Event { turn: Option<TurnId>, kind: EventKind, raw: Option<RawJson> },
    Request { turn: TurnId, spec: Box<RequestSpec>, raw: Option<RawJson> },
    RequestResolved { provider_ref: ProviderRef, raw: Option<RawJson> },
    SessionUpdated { provider_session_id: Option<String>, raw: Option<RawJson> },
    TransportDown { reason: String },
}

/// The session runtime went away; the provider should stop reading and exit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the session runtime is gone")]
pub struct SinkClosed;

/// How a provider reports to its session runtime. Cheap to clone.
///
/// Sends wait when the runtime is [`SINK_CAPACITY`] messages (or [`SINK_BYTES`]) behind, which
/// slows the provider's reader (and so the CLI's pipe) instead of growing memory; subscribers
/// never cause this wait.
/// A reader that parses many lines per read of the CLI's output reports through a
/// [`SinkBuffer`] instead, which hands them over together.
#[derive(Clone)]
pub struct Sink {
    tx: Arc<inbox::Sender>,
}

/// How many provider messages may wait for the session runtime before [`Sink`] sends wait.
pub const SINK_CAPACITY: usize = 4096;

/// How many bytes of the CLI's output (the messages' raw JSON) may wait for the session runtime
/// before [`Sink`] sends wait; a message larger than this goes when it would wait alone.
pub const SINK_BYTES: usize = 16 << 20;

/// The most messages a [`SinkBuffer`] holds before it sends them by itself.
pub const SINK_BUFFER_CAPACITY: usize = 256;

impl Sink {
    pub(crate) fn channel() -> (Sink, inbox::Inbox) {
        let (tx, rx) = inbox::channel();
        (Sink { tx: Arc::new(tx) }, rx)
    }

    async fn send(&self, message: ProviderMessage) -> Result<(), SinkClosed> {
        self.tx.send_all(&mut Some(message)).await
    }

    /// Reports an event. `turn` is the harness turn it belongs to (`None` for session events);
    /// events for a turn that is no longer current are dropped. Terminal kinds end the turn.
    /// Core lifecycle kinds (`session_ready`, `turn_started`, `request_*`, `cancel_requested`,
    /// `store_failed`, `session_closed`) are reserved to the runtime and dropped with a warning.
    pub async fn emit(&self, turn: Option<&TurnId>, kind: EventKind, raw: Option<RawJson>) -> Result<(), SinkClosed> {
        self.send(ProviderMessage::Event { turn: turn.cloned(), kind, raw }).await
    }

    /// Reports a request the agent is blocked on.
    pub async fn request(&self, turn: &TurnId, spec: RequestSpec, raw: Option<RawJson>) -> Result<(), SinkClosed> {
        self.send(ProviderMessage::Request { turn: turn.clone(), spec: Box::new(spec), raw }).await
    }

    /// Reports that the provider resolved a request by itself; it expires.
    pub async fn request_resolved(&self, provider_ref: ProviderRef, raw: Option<RawJson>) -> Result<(), SinkClosed> {
        self.send(ProviderMessage::RequestResolved { provider_ref, raw }).await
    }

    /// Reports a new provider session/thread ID.
    pub async fn session_updated(
        &self,
        provider_session_id: Option<String>,
        raw: Option<RawJson>,
    ) -> Result<(), SinkClosed> {
        self.send(ProviderMessage::SessionUpdated { provider_session_id, raw }).await
    }

    /// Reports that the transport is gone (the CLI exited or its pipes broke). An active turn
    /// fails and the session becomes unavailable. Send the turn's terminal event first when the
    /// provider can say more (exit status, stderr tail).
    pub async fn transport_down(&self, reason: impl Into<String>) -> Result<(), SinkClosed> {
        self.send(ProviderMessage::TransportDown { reason: reason.into() }).await
    }

    /// True once the runtime is gone.
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    /// A buffer that gathers messages and hands them to the runtime together.
    pub fn buffer(&self) -> SinkBuffer {
        SinkBuffer { sink: self.clone(), pending: Vec::new() }
    }
}

impl fmt::Debug for Sink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sink").field("closed", &self.tx.is_closed()).finish()
    }
}

/// A [`Sink`] that gathers messages and sends them together: what a provider's reader uses.
///
/// A CLI's pipe is read many lines at a time. Sending each line's event on its own wakes the
/// session runtime for every line; a reader that pushes into a buffer and calls
/// [`flush`](SinkBuffer::flush) before it waits for the next read hands over the whole read at
/// once — one wake-up and no allocation per line. The buffer sends by itself when it holds
/// [`SINK_BUFFER_CAPACITY`] messages, so it never grows beyond that, and what a dropped buffer
/// still holds is sent too (nothing is lost; order is kept).
///
/// Flush before waiting on anything (the next read, a reply): a message left in the buffer is
/// not seen by the runtime until then. [`agent_provider_kit`'s line reader] flushes for the
/// reader loops built on it. Messages sent through the [`Sink`] itself (or another buffer)
/// are ordered only by when each is flushed.
///
/// [`agent_provider_kit`'s line reader]: https://docs.rs/agent-provider-kit
pub struct SinkBuffer {
    sink: Sink,
    /// Grows as the reads need and keeps its capacity across flushes: a streaming session's
    /// reaches [`SINK_BUFFER_CAPACITY`] once, an idle one's stays at the few messages of its
    /// handshake instead of reserving 256 (~29 KB) for the session's life.
    pending: Vec<ProviderMessage>,
}

impl SinkBuffer {
    async fn push(&mut self, message: ProviderMessage) -> Result<(), SinkClosed> {
        self.pending.push(message);
        if self.pending.len() >= SINK_BUFFER_CAPACITY {
            return self.flush().await;
        }
        Ok(())
    }

    /// Gathers an event (see [`Sink::emit`]). The turn is taken by value: a reader has it at
    /// hand, and a clone would be one more atomic count per event on a line the runtime shares.
    pub async fn emit(
        &mut self,
        turn: Option<TurnId>,
        kind: EventKind,
        raw: Option<RawJson>,
    ) -> Result<(), SinkClosed> {
        self.push(ProviderMessage::Event { turn, kind, raw }).await
    }

    /// Gathers a request (see [`Sink::request`]).
    pub async fn request(&mut self, turn: TurnId, spec: RequestSpec, raw: Option<RawJson>) -> Result<(), SinkClosed> {
        self.push(ProviderMessage::Request { turn, spec: Box::new(spec), raw }).await
    }

    /// Gathers a provider's own resolution of a request (see [`Sink::request_resolved`]).
    pub async fn request_resolved(
        &mut self,
        provider_ref: ProviderRef,
        raw: Option<RawJson>,
    ) -> Result<(), SinkClosed> {
        self.push(ProviderMessage::RequestResolved { provider_ref, raw }).await
    }

    /// Gathers a new provider session ID (see [`Sink::session_updated`]).
    pub async fn session_updated(
        &mut self,
        provider_session_id: Option<String>,
        raw: Option<RawJson>,
    ) -> Result<(), SinkClosed> {
        self.push(ProviderMessage::SessionUpdated { provider_session_id, raw }).await
    }

    /// Gathers the transport's loss (see [`Sink::transport_down`]) and sends everything.
    pub async fn transport_down(&mut self, reason: impl Into<String>) -> Result<(), SinkClosed> {
        self.pending.push(ProviderMessage::TransportDown { reason: reason.into() });
        self.flush().await
    }

    /// Sends what the buffer holds, in order, waiting while the runtime is
    /// [`SINK_CAPACITY`] messages (or [`SINK_BYTES`]) behind.
    pub async fn flush(&mut self) -> Result<(), SinkClosed> {
        let sent = self.sink.tx.send_all(&mut self.pending).await;
        if sent.is_err() {
            // Nobody will read them.
            self.pending.clear();
        }
        sent
    }

    /// Messages gathered and not yet sent.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// True when nothing waits to be sent.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// The sink it sends to.
    pub fn sink(&self) -> &Sink {
        &self.sink
    }
}

impl Drop for SinkBuffer {
    fn drop(&mut self) {
        self.sink.tx.force_all(&mut self.pending);
    }
}

impl fmt::Debug for SinkBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SinkBuffer").field("pending", &self.pending.len()).field("sink", &self.sink).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default)]
    struct SessionOnly;
    #[derive(Debug, Default)]
    struct OtherProviders;

    #[test]
    fn a_session_options_type_given_to_a_turn_is_refused_and_others_pass() {
        let mut turn = TurnOptions::new().provider_option(OtherProviders);
        assert!(refuse_session_options::<SessionOnly>(&turn, None).is_ok());
        turn.provider_options.insert(SessionOnly);
        let with_turn_type = refuse_session_options::<SessionOnly>(&turn, Some("TurnOnly")).unwrap_err();
        match with_turn_type {
            Error::InvalidOption { option: "provider_options", reason } => {
                assert!(
                    reason.starts_with("SessionOnly apply") && reason.ends_with("a turn takes TurnOnly"),
                    "{reason}"
                )
            }
            other => panic!("{other:?}"),
        }
        let none = refuse_session_options::<SessionOnly>(&turn, None).unwrap_err().to_string();
        assert!(none.contains("takes no per-turn options"), "{none}");
    }

    #[test]
    fn a_turn_options_type_given_to_a_session_is_refused_and_others_pass() {
        let mut session = SessionOptions::new(std::env::temp_dir()).provider_option(OtherProviders);
        assert!(refuse_turn_options::<SessionOnly>(&session, "Whole").is_ok());
        session.provider_options.insert(SessionOnly);
        match refuse_turn_options::<SessionOnly>(&session, "Whole").unwrap_err() {
            Error::InvalidOption { option: "provider_options", reason } => assert_eq!(
                reason,
                "SessionOnly apply to one turn and are set on its TurnOptions; a session takes Whole"
            ),
            other => panic!("{other:?}"),
        }
    }
}
