//! Typed session and turn options.
//!
//! Options are plain structs with chainable setters (`SessionOptions::new(cwd).model("m")`).
//! They are validated by [`SessionOptions::validate`], which `start_session` calls before
//! anything is spawned or stored; every problem is an [`Error::InvalidOption`] naming the option.

use std::any::{Any, TypeId};
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::exec::DynExec;
use crate::ids::{SessionId, TurnId};
use crate::store::{DynStore, Store};

mod conversation;
mod environment;
mod validate;

pub use conversation::{
    Conversation, ConversationMode, ConversationSource, MAX_PROVIDER_CONVERSATION_ID, provider_conversation_problem,
};
pub(crate) use environment::Shown;
pub use environment::{Env, McpServer, Skill};

/// Default `event_buffer_size`.
pub const DEFAULT_EVENT_BUFFER_SIZE: usize = 1000;
/// Largest `event_buffer_size`: the live channel of a session's subscribers is allocated at
/// that size when the first one subscribes.
pub const MAX_EVENT_BUFFER_SIZE: usize = 1 << 20;
/// Default `startup_timeout`.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// Default `startup_finalization_timeout`.
pub const DEFAULT_STARTUP_FINALIZATION_TIMEOUT: Duration = Duration::from_secs(5);
/// Default `turn_start_timeout`.
pub const DEFAULT_TURN_START_TIMEOUT: Duration = Duration::from_secs(30);
/// Default `provider_command_timeout`.
pub const DEFAULT_PROVIDER_COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// When the agent must ask before acting. Providers map it to their native policy
/// (Codex `approvalPolicy`, Claude `permission_mode`, …).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ApprovalPolicy {
    /// Ask for anything not known to be safe.
    Untrusted,
    /// Ask only when a sandboxed action fails.
    OnFailure,
    /// The agent decides when to ask.
    OnRequest,
    /// Never ask; refused actions fail.
    Never,
}

/// How far the agent's commands may reach.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SandboxMode {
    /// Read anywhere, write nowhere.
    ReadOnly,
    /// Write inside the working directory.
    WorkspaceWrite,
    /// No sandbox.
    DangerFullAccess,
}

/// Typed provider-specific options: a map from type to value.
///
/// Each provider crate defines its own options struct and reads it with [`ProviderOptions::get`];
/// other providers ignore it. `Debug` prints only type names, so option structs may hold secrets.
#[derive(Clone, Default)]
pub struct ProviderOptions {
    map: HashMap<TypeId, (&'static str, Arc<dyn Any + Send + Sync>)>,
}

impl ProviderOptions {
    /// Inserts (or replaces) the value of type `T`.
    pub fn insert<T: Any + Send + Sync>(&mut self, value: T) {
        self.map.insert(TypeId::of::<T>(), (std::any::type_name::<T>(), Arc::new(value)));
    }

    /// Changes the value of type `T` in place, starting from `T::default()` when none is set:
    /// settings made earlier (by a preset, a config or the caller) are kept unless `change`
    /// overwrites them. A value shared with a clone of these options is copied first, so the
    /// clone does not change.
    ///
    /// ```
    /// # use agent_core::ProviderOptions;
    /// #[derive(Clone, Debug, Default, PartialEq)]
    /// struct Extras { profile: Option<&'static str>, verbose: bool }
    ///
    /// let mut options = ProviderOptions::default();
    /// options.update(|e: &mut Extras| e.profile = Some("work"));
    /// options.update(|e: &mut Extras| e.verbose = true);
    /// assert_eq!(options.get::<Extras>(), Some(&Extras { profile: Some("work"), verbose: true }));
    /// ```
    pub fn update<T: Any + Send + Sync + Clone + Default>(&mut self, change: impl FnOnce(&mut T)) {
        let (_, value) =
            self.map.entry(TypeId::of::<T>()).or_insert_with(|| (std::any::type_name::<T>(), Arc::new(T::default())));
        if let Some(unique) = Arc::get_mut(value).and_then(|v| v.downcast_mut::<T>()) {
            change(unique);
            return;
        }
        // Keyed by `TypeId::of::<T>()`, so the value is a `T`.
        let mut copy = value.downcast_ref::<T>().cloned().unwrap_or_default();
        change(&mut copy);
        *value = Arc::new(copy);
    }

    /// The value of type `T`, if set.
    pub fn get<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.map.get(&TypeId::of::<T>()).and_then(|(_, v)| v.downcast_ref())
    }

    /// True when no options are set.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Names of the option types that are set.
    pub fn type_names(&self) -> Vec<&'static str> {
        let mut names: Vec<_> = self.map.values().map(|(n, _)| *n).collect();
        names.sort_unstable();
        names
    }

    /// Refuses a value no provider reads: one of a type from the standard library (an
    /// `Arc<CodexOptions>`, a `Box` or `Option` of options, a `String`), a primitive or a
    /// reference. Providers look their options up by their exact type, so such a value would be
    /// ignored without a word — a wrapped `CodexOptions` runs the CLI with none of its settings.
    pub(crate) fn check_types(&self) -> Result<()> {
        let Some(name) = self.type_names().into_iter().find(|name| is_no_options_type(name)) else { return Ok(()) };
        let reason = format!(
            "a `{name}` is no provider's options type: set a provider's options value itself \
             (CodexOptions, ClaudeOptions, …), not wrapped in an Arc, Box or Option"
        );
        Err(Error::InvalidOption { option: "provider_options", reason })
    }
}

/// Whether values of the type named `name` (as `std::any::type_name` names it) can be no
/// provider's options: the standard library's types, primitives, references, tuples, slices.
fn is_no_options_type(name: &str) -> bool {
    ["alloc::", "core::", "std::"].iter().any(|std| name.starts_with(std))
        || name.starts_with(['&', '(', '[', '*'])
        || !name.contains("::")
}

impl fmt::Debug for ProviderOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.type_names()).finish()
    }
}

/// What a session does when a store write fails.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StoreFailurePolicy {
    /// Keep running live-only: durability becomes degraded and a `store_failed` event is published.
    ///
    /// A session whose initial commit failed this way recorded no owner in the store, so another
    /// harness sharing the store does not see it run and may start or resume the same ID beside
    /// it; harnesses that share a store choose [`StoreFailurePolicy::Stop`] to rule that out.
    #[default]
    Degrade,
    /// End the session: the active turn fails, `session_closed` is published and the provider closed.
    Stop,
}

/// Which store a session uses.
#[derive(Clone, Default)]
#[non_exhaustive]
pub enum StoreChoice {
    /// The harness's default store.
    #[default]
    Default,
    /// No store: history lives only in the session's bounded buffers, and the ID can be reused
    /// once the session stops.
    Disabled,
    /// A specific store.
    Custom(DynStore),
}

impl fmt::Debug for StoreChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreChoice::Default => f.write_str("Default"),
            StoreChoice::Disabled => f.write_str("Disabled"),
            StoreChoice::Custom(store) => f.debug_tuple("Custom").field(store).finish(),
        }
    }
}

/// A store by value: `StoreChoice::Custom` of it, so `builder.store(MemoryStore::new())` reads
/// as what it does.
impl<S: Store> From<S> for StoreChoice {
    fn from(store: S) -> Self {
        StoreChoice::Custom(Arc::new(store))
    }
}

/// A store already shared: `StoreChoice::Custom` of it.
impl<S: Store> From<Arc<S>> for StoreChoice {
    fn from(store: Arc<S>) -> Self {
        StoreChoice::Custom(store)
    }
}

impl From<DynStore> for StoreChoice {
    fn from(store: DynStore) -> Self {
        StoreChoice::Custom(store)
    }
}

/// Whether `start_session` may replace a stored, non-live session with the same ID.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Reuse {
    /// Never: a stored ID gives [`Error::SessionIdAlreadyUsed`].
    #[default]
    Never,
    /// Destructively replace a cleanly closed session.
    Closed,
    /// Destructively replace any non-live stored session (after inspecting it).
    Replace,
}

/// How the provider CLI authenticates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum AuthMode {
    /// Use the CLI's saved subscription login; refuse API keys, base-URL and cloud-provider
    /// overrides in the session environment.
    #[default]
    Subscription,
    /// Pass the environment through as given (API keys, custom endpoints, remote exec).
    Inherit,
}

/// How many completed turns a live session keeps for `await_turn`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CacheSize {
    /// At most this many (0 disables the cache), and at most 32 MiB of their final texts and
    /// raw JSON but for the newest turn: a turn whose end left the cache is awaited from the
    /// store.
    Bounded(usize),
    /// Keep every completed turn for the session's life.
    Unbounded,
}

/// Options of one session. See the crate docs for each option's meaning and default.
#[derive(Clone)]
#[non_exhaustive]
pub struct SessionOptions {
    /// Caller-selected logical session ID; generated when `None`.
    pub id: Option<String>,
    /// Working directory visible to the agent; absolute, existing, and UTF-8 text (the snapshot
    /// and events record it as JSON). Required.
    pub cwd: Option<PathBuf>,
    /// Provider model name.
    pub model: Option<String>,
    /// Codex developer instructions / Claude system prompt.
    pub system_prompt: Option<String>,
    /// Approval policy.
    pub approval_policy: Option<ApprovalPolicy>,
    /// Sandbox mode.
    pub sandbox: Option<SandboxMode>,
    /// Session-scoped MCP servers by name.
    pub mcp_servers: BTreeMap<String, McpServer>,
    /// Skills.
    pub skills: Vec<Skill>,
    /// Environment changes for the provider process.
    pub env: Env,
    /// Provider-specific typed options.
    pub provider_options: ProviderOptions,
    /// Caller-owned metadata, stored in the snapshot (no secrets).
    pub metadata: serde_json::Map<String, Value>,
    /// In-memory replay buffer size (events); default 1000, from 1 to
    /// [`MAX_EVENT_BUFFER_SIZE`]. The buffer also keeps at most 32 MiB of the provider's
    /// output (the events' raw JSON; always the newest event), so a stream of lines of
    /// megabytes keeps fewer events. A live subscriber that falls this many sends behind (a send
    /// carries one event or more) catches up from the store (without one, it ends with
    /// `Lagged`); while one leaves more than 16 MiB of raw JSON unread, subscribers can be only
    /// as far behind as this buffer holds.
    pub event_buffer_size: usize,
    /// Completed-turn cache size; defaults to the event buffer size.
    pub completed_turn_cache_size: Option<CacheSize>,
    /// Provider opening deadline; default 30 s.
    pub startup_timeout: Duration,
    /// Initial store commit / cleanup / hand-off deadline; default 5 s.
    pub startup_finalization_timeout: Duration,
    /// Provider turn-admission deadline; default 30 s.
    pub turn_start_timeout: Duration,
    /// Response and cancellation watchdog; default 30 s.
    pub provider_command_timeout: Duration,
    /// Deadline for answering a request; the provider is told to deny it afterwards. Default none.
    pub request_timeout: Option<Duration>,
    /// How long a running turn may go without any provider activity (while no request is
    /// pending) before it is cancelled as stalled; default none. See
    /// [`TurnOptions::inactivity_timeout`].
    pub turn_inactivity_timeout: Option<Duration>,
    /// Which provider conversation to open; default a new one.
    pub conversation: Conversation,
    /// Store failure policy; default [`StoreFailurePolicy::Degrade`].
    pub store_failure: StoreFailurePolicy,
    /// Store choice; default the harness's store.
    pub store: StoreChoice,
    /// ID reuse rule; default [`Reuse::Never`].
    pub reuse: Reuse,
    /// Authentication mode; default [`AuthMode::Subscription`].
    pub auth: AuthMode,
    /// Where the provider process runs; default the harness's exec.
    pub exec: Option<DynExec>,
    /// Answers this session's requests as they come; default the harness's handler, if any.
    pub request_handler: Option<crate::handler::DynRequestHandler>,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            id: None,
            cwd: None,
            model: None,
            system_prompt: None,
            approval_policy: None,
            sandbox: None,
            mcp_servers: BTreeMap::new(),
            skills: Vec::new(),
            env: Env::default(),
            provider_options: ProviderOptions::default(),
            metadata: serde_json::Map::new(),
            event_buffer_size: DEFAULT_EVENT_BUFFER_SIZE,
            completed_turn_cache_size: None,
            startup_timeout: DEFAULT_STARTUP_TIMEOUT,
            startup_finalization_timeout: DEFAULT_STARTUP_FINALIZATION_TIMEOUT,
            turn_start_timeout: DEFAULT_TURN_START_TIMEOUT,
            provider_command_timeout: DEFAULT_PROVIDER_COMMAND_TIMEOUT,
            request_timeout: None,
            turn_inactivity_timeout: None,
            conversation: Conversation::New,
            store_failure: StoreFailurePolicy::Degrade,
            store: StoreChoice::Default,
            reuse: Reuse::Never,
            auth: AuthMode::Subscription,
            exec: None,
            request_handler: None,
        }
    }
}

macro_rules! setters {
    ($($(#[$doc:meta])* $name:ident($($v:ident: $ty:ty),+) => |$this:ident| $body:expr;)*) => {
        $(
            $(#[$doc])*
            pub fn $name(mut self, $($v: $ty),+) -> Self {
                let $this = &mut self;
                $body;
                self
            }
        )*
    };
}

impl SessionOptions {
    /// Options for a session working in `cwd`.
    pub fn new(cwd: impl Into<PathBuf>) -> Self {
        SessionOptions { cwd: Some(cwd.into()), ..SessionOptions::default() }
    }

    setters! {
        /// Sets the logical session ID.
        id(v: impl Into<String>) => |o| o.id = Some(v.into());
        /// Sets the working directory.
        cwd(v: impl Into<PathBuf>) => |o| o.cwd = Some(v.into());
        /// Sets the model.
        model(v: impl Into<String>) => |o| o.model = Some(v.into());
        /// Sets the system prompt.
        system_prompt(v: impl Into<String>) => |o| o.system_prompt = Some(v.into());
        /// Sets the approval policy.
        approval_policy(v: ApprovalPolicy) => |o| o.approval_policy = Some(v);
        /// Sets the sandbox mode.
        sandbox(v: SandboxMode) => |o| o.sandbox = Some(v);
        /// Adds an MCP server.
        mcp_server(name: impl Into<String>, server: McpServer) => |o| { o.mcp_servers.insert(name.into(), server); };
        /// Adds a skill.
        skill(v: Skill) => |o| o.skills.push(v);
        /// Sets an environment variable for the provider process (taking back an earlier
        /// `env_remove` of it).
        env(key: impl Into<String>, value: impl Into<String>) => |o| { o.env = std::mem::take(&mut o.env).set(key, value); };
        /// Removes an inherited environment variable (taking back an earlier `env` of it).
        env_remove(v: impl Into<String>) => |o| { o.env = std::mem::take(&mut o.env).unset(v); };
        /// Adds a typed provider option.
        provider_option(v: impl Any + Send + Sync) => |o| o.provider_options.insert(v);
        /// Adds a metadata entry.
        metadata(key: impl Into<String>, value: impl Into<Value>) => |o| { o.metadata.insert(key.into(), value.into()); };
        /// Sets the replay buffer size.
        event_buffer_size(v: usize) => |o| o.event_buffer_size = v;
        /// Sets the completed-turn cache size.
        completed_turn_cache_size(v: CacheSize) => |o| o.completed_turn_cache_size = Some(v);
        /// Sets the provider opening deadline.
        startup_timeout(v: Duration) => |o| o.startup_timeout = v;
        /// Sets the startup finalization deadline.
        startup_finalization_timeout(v: Duration) => |o| o.startup_finalization_timeout = v;
        /// Sets the turn admission deadline.
        turn_start_timeout(v: Duration) => |o| o.turn_start_timeout = v;
        /// Sets the provider command deadline.
        provider_command_timeout(v: Duration) => |o| o.provider_command_timeout = v;
        /// Sets the request answer deadline.
        request_timeout(v: Duration) => |o| o.request_timeout = Some(v);
        /// Cancels a running turn that shows no provider activity for this long.
        turn_inactivity_timeout(v: Duration) => |o| o.turn_inactivity_timeout = Some(v);
        /// Chooses the provider conversation to open.
        conversation(v: Conversation) => |o| o.conversation = v;
        /// Continues the stopped session `id` under its own ID: the provider conversation recorded
        /// in its snapshot, and its stored history.
        resume_session(id: SessionId) => |o| {
            o.id = Some(id.as_str().to_owned());
            o.conversation = Conversation::Resume(ConversationSource::Session(id));
        };
        /// Continues a provider conversation by the provider's own ID, in a new session.
        resume_provider_session(v: impl Into<String>) => |o| o.conversation = Conversation::Resume(ConversationSource::Provider(v.into()));
        /// Branches the conversation of the stored session `id` into this new session.
        fork_session(id: SessionId) => |o| o.conversation = Conversation::Fork(ConversationSource::Session(id));
        /// Branches a provider conversation by the provider's own ID into this new session.
        fork_provider_session(v: impl Into<String>) => |o| o.conversation = Conversation::Fork(ConversationSource::Provider(v.into()));
        /// Sets the store failure policy.
        store_failure(v: StoreFailurePolicy) => |o| o.store_failure = v;
        /// Chooses the store.
        store(v: impl Into<StoreChoice>) => |o| o.store = v.into();
        /// Sets the ID reuse rule.
        reuse(v: Reuse) => |o| o.reuse = v;
        /// Sets the authentication mode.
        auth(v: AuthMode) => |o| o.auth = v;
        /// Runs the provider process through this exec.
        exec(v: impl crate::exec::IntoExec) => |o| o.exec = Some(v.into_exec());
        /// Answers this session's requests with `handler` (see [`crate::handler`]).
        request_handler(v: impl Into<crate::handler::DynRequestHandler>) => |o| o.request_handler = Some(v.into());
    }

    /// Sets environment variables for the provider process, like repeated
    /// [`env`](SessionOptions::env) calls.
    pub fn envs<K: Into<String>, V: Into<String>>(mut self, vars: impl IntoIterator<Item = (K, V)>) -> Self {
        self.env.set.extend(vars.into_iter().map(|(key, value)| (key.into(), value.into())));
        self
    }

    /// Changes the typed provider option `T` in place (from `T::default()` when unset), keeping
    /// what was set before; [`provider_option`](SessionOptions::provider_option) replaces it
    /// whole. See [`ProviderOptions::update`].
    pub fn update_provider_option<T: Any + Send + Sync + Clone + Default>(
        mut self,
        change: impl FnOnce(&mut T),
    ) -> Self {
        self.provider_options.update(change);
        self
    }

    /// The completed-turn cache size in effect.
    pub fn effective_cache_size(&self) -> CacheSize {
        self.completed_turn_cache_size.unwrap_or(CacheSize::Bounded(self.event_buffer_size))
    }

    /// A digest of the configuration for drift detection (not cryptographic).
    ///
    /// Covers cwd, model, system prompt, policies, MCP server names and commands, skills, env
    /// keys, provider option types and the provider. Secret values (env values, MCP env and
    /// headers) are not part of it.
    pub fn fingerprint(&self, provider: &str) -> String {
        let mut h = Fnv128::default();
        let mut field = |name: &str, value: &str| {
            h.write(name.as_bytes());
            h.write(&[0]);
            h.write(value.as_bytes());
            h.write(&[0xff]);
        };
        field("provider", provider);
        field("cwd", &self.cwd.as_ref().map(|p| p.display().to_string()).unwrap_or_default());
        field("model", self.model.as_deref().unwrap_or(""));
        field("system_prompt", self.system_prompt.as_deref().unwrap_or(""));
        field("approval_policy", &format!("{:?}", self.approval_policy));
        field("sandbox", &format!("{:?}", self.sandbox));
        for (name, server) in &self.mcp_servers {
            let shape = match server {
                McpServer::Stdio { command, args, env } => {
                    format!("stdio {command} {args:?} {:?}", env.keys().collect::<Vec<_>>())
                }
                McpServer::Http { url, headers } => {
                    format!("http {url} {:?}", headers.keys().collect::<Vec<_>>())
                }
            };
            field(name, &shape);
        }
        for skill in &self.skills {
            field("skill", &format!("{} {}", skill.name, skill.path.display()));
        }
        for key in self.env.set.keys() {
            field("env", key);
        }
        for key in &self.env.unset {
            field("env_unset", key);
        }
        for name in self.provider_options.type_names() {
            field("provider_option", name);
        }
        field("auth", &format!("{:?}", self.auth));
        h.hex()
    }
}

impl fmt::Debug for SessionOptions {
    // Every field is named here (the destructuring fails to compile when one is added), so each
    // new field is a decision: values that can hold secrets — environment values, MCP arguments,
    // headers, metadata values, the system prompt, provider option contents — never appear.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let SessionOptions {
            id,
            cwd,
            model,
            system_prompt,
            approval_policy,
            sandbox,
            mcp_servers,
            skills,
            env,
            provider_options,
            metadata,
            event_buffer_size,
            completed_turn_cache_size,
            startup_timeout,
            startup_finalization_timeout,
            turn_start_timeout,
            provider_command_timeout,
            request_timeout,
            turn_inactivity_timeout,
            conversation,
            store_failure,
            store,
            reuse,
            auth,
            exec,
            request_handler,
        } = self;
        f.debug_struct("SessionOptions")
            .field("id", id)
            .field("cwd", cwd)
            .field("model", model)
            .field("system_prompt_bytes", &system_prompt.as_ref().map(|p| p.len()))
            .field("approval_policy", approval_policy)
            .field("sandbox", sandbox)
            .field("mcp_servers", mcp_servers)
            .field("skills", skills)
            .field("env", env)
            .field("provider_options", provider_options)
            .field("metadata_keys", &metadata.keys().collect::<Vec<_>>())
            .field("event_buffer_size", event_buffer_size)
            .field("completed_turn_cache_size", completed_turn_cache_size)
            .field("startup_timeout", startup_timeout)
            .field("startup_finalization_timeout", startup_finalization_timeout)
            .field("turn_start_timeout", turn_start_timeout)
            .field("provider_command_timeout", provider_command_timeout)
            .field("request_timeout", request_timeout)
            .field("turn_inactivity_timeout", turn_inactivity_timeout)
            .field("conversation", conversation)
            .field("store_failure", store_failure)
            .field("store", store)
            .field("reuse", reuse)
            .field("auth", auth)
            .field("exec", exec)
            .field("request_handler", request_handler)
            .finish()
    }
}

/// Options of one turn.
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct TurnOptions {
    /// Caller-selected turn ID; must not have been used in the session.
    pub id: Option<TurnId>,
    /// Caller-owned metadata kept on the turn.
    pub metadata: serde_json::Map<String, Value>,
    /// Per-turn model override.
    pub model: Option<String>,
    /// Provider-specific per-turn options.
    pub provider_options: ProviderOptions,
    /// Local deadline for the call itself (not the turn). On expiry the call returns
    /// [`Error::SessionCallTimeout`] holding the turn. Default 30 s.
    pub call_timeout: Option<Duration>,
    /// How long the running turn may go without any provider activity while no request is
    /// pending (counted from the provider's last message or the answer to its last pending
    /// request); overrides [`SessionOptions::turn_inactivity_timeout`]. On expiry the turn is
    /// cancelled (`cancel_requested` with a `stalled` reason); if the provider does not end it
    /// within `provider_command_timeout`, it fails as stalled and the session retires.
    pub inactivity_timeout: Option<Duration>,
}

impl TurnOptions {
    /// Default turn options.
    pub fn new() -> Self {
        Self::default()
    }

    setters! {
        /// Sets the turn ID.
        id(v: TurnId) => |o| o.id = Some(v);
        /// Adds a metadata entry.
        metadata(key: impl Into<String>, value: impl Into<Value>) => |o| { o.metadata.insert(key.into(), value.into()); };
        /// Overrides the model for this turn.
        model(v: impl Into<String>) => |o| o.model = Some(v.into());
        /// Adds a typed provider option.
        provider_option(v: impl Any + Send + Sync) => |o| o.provider_options.insert(v);
        /// Sets the local call deadline.
        call_timeout(v: Duration) => |o| o.call_timeout = Some(v);
        /// Sets the turn's inactivity deadline.
        inactivity_timeout(v: Duration) => |o| o.inactivity_timeout = Some(v);
    }
}

impl fmt::Debug for TurnOptions {
    // As for `SessionOptions`: every field named, no metadata value shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let TurnOptions { id, metadata, model, provider_options, call_timeout, inactivity_timeout } = self;
        f.debug_struct("TurnOptions")
            .field("id", id)
            .field("metadata_keys", &metadata.keys().collect::<Vec<_>>())
            .field("model", model)
            .field("provider_options", provider_options)
            .field("call_timeout", call_timeout)
            .field("inactivity_timeout", inactivity_timeout)
            .finish()
    }
}

/// 128-bit FNV-1a, for the configuration fingerprint.
#[derive(Clone, Copy)]
struct Fnv128(u128);

impl Default for Fnv128 {
    fn default() -> Self {
        Fnv128(0x6c62_272e_07bb_0142_62b8_2175_6295_c58d)
    }
}

impl Fnv128 {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= b as u128;
            self.0 = self.0.wrapping_mul(0x0000_0000_0100_0000_0000_0000_0000_013b);
        }
    }

    fn hex(self) -> String {
        format!("{:032x}", self.0)
    }
}

#[cfg(test)]
mod tests;
