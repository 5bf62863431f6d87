//! [`SessionConfig`]: a session described as data.
//!
//! The serde form of everything a session needs that is not a live object (an exec, a store, a
//! request handler): what a CLI reads from a file, a preset ships and a gateway receives. It
//! parses strictly: unknown fields are refused, and every error is an [`Error::InvalidConfig`]
//! that starts with the path of the field at fault, from the top of the config
//! (`mcp_servers.files.args[1]: invalid type: an integer, expected a string at line 6 column 52`),
//! and says what was expected without quoting the value it was given, which may be a secret — a
//! token may be all digits (see [`without_any_values`]).
//! Provider options stay JSON until the provider reads them with
//! [`Provider::options_from_json`], so each provider owns its own form.
//!
//! JSON conventions:
//! - Durations are whole milliseconds in fields named `*_ms` (`"startup_timeout_ms": 30000`).
//!   Zero is refused, as by [`SessionOptions::validate`].
//! - A field left out takes the [`SessionOptions`] default; serializing leaves unset fields out,
//!   so a parsed config writes back the JSON it came from (up to order and whitespace).
//! - Enum values are snake_case strings (`"on_request"`, `"workspace_write"`).
//!
//! The JSON Schema is checked in at `agent-core/schema/session-config.schema.json`. With the
//! `schemars` feature, the config and the types it holds implement `schemars::JsonSchema`, and
//! `SessionConfig::json_schema` generates that file's contents.

use std::collections::BTreeMap;
use std::fmt;
use std::num::{NonZeroU64, NonZeroUsize};
use std::path::PathBuf;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::harness::Harness;
use crate::ids::{ProviderId, SessionId};
use crate::options::{
    ApprovalPolicy, AuthMode, CacheSize, Conversation, ConversationSource, Env, McpServer, Reuse, SandboxMode,
    SessionOptions, Skill, StoreFailurePolicy,
};
use crate::provider::Provider;
use crate::session::SessionRef;

/// A session as data: the provider, the [`SessionOptions`] that are not live objects, and the
/// provider's own options as JSON. See the [module docs](self) for the JSON conventions.
///
/// Start one with [`Harness::start_session_from_config`](crate::Harness::start_session_from_config),
/// or turn it into options with [`SessionConfig::into_options`] to add an exec, a store or a
/// request handler first. `Debug` shows no environment value, MCP argument, environment or
/// header value, metadata value, system prompt or provider option value.
///
/// ```
/// use agent_core::{ApprovalPolicy, ErrorKind, McpServer, SessionConfig};
///
/// let config = SessionConfig::from_json_str(
///     r#"{
///         "provider": "codex",
///         "id": "review-42",
///         "cwd": "/srv/repo",
///         "model": "gpt-5-codex",
///         "approval_policy": "on_request",
///         "mcp_servers": {
///             "files": { "transport": "stdio", "command": "mcp-files", "args": ["--root", "/srv/repo"] },
///             "docs": { "transport": "http", "url": "https://docs.example/mcp" }
///         },
///         "env": { "set": { "RUST_LOG": "warn" }, "unset": ["OPENAI_API_KEY"] },
///         "conversation": { "mode": "resume", "from": { "session": "review-42" } },
///         "turn_inactivity_timeout_ms": 300000,
///         "metadata": { "ticket": 42 },
///         "provider_options": { "questions": false }
///     }"#,
/// )?;
/// assert_eq!(config.approval_policy, Some(ApprovalPolicy::OnRequest));
/// assert!(matches!(config.mcp_servers["docs"], McpServer::Http { .. }));
///
/// // Errors name the field's path.
/// let error = SessionConfig::from_json_str(
///     r#"{ "provider": "codex", "mcp_servers": { "files": { "transport": "stdio", "command": "x", "args": ["a", 1] } } }"#,
/// )
/// .unwrap_err();
/// assert_eq!(error.kind(), ErrorKind::InvalidConfig);
/// assert!(error.to_string().contains("mcp_servers.files.args[1]: invalid type: an integer"), "{error}");
///
/// // They say what was expected, not what was given (a key pasted in the wrong field).
/// let error = SessionConfig::from_json_str(r#"{ "provider": "codex", "auth": "sk-live-0123" }"#).unwrap_err();
/// assert!(error.to_string().contains("auth: unknown value, expected `subscription` or `inherit`"), "{error}");
/// assert!(!error.to_string().contains("sk-live"), "{error}");
/// # Ok::<(), agent_core::Error>(())
/// ```
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[cfg_attr(
    feature = "schemars",
    schemars(
        title = "SessionConfig",
        description = "An agent-harness session as data: the provider, the session options that are not live \
                       objects, and the provider's own options. Durations are milliseconds in `*_ms` fields; a \
                       field left out takes its default."
    )
)]
#[non_exhaustive]
pub struct SessionConfig {
    /// The provider the session runs on: `codex`, `claude`, `pi` or a preset's ID.
    pub provider: ProviderId,
    /// The session ID; generated when left out. 1 to 128 ASCII letters, digits and `-_.:@`, other
    /// than `.` and `..`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<SessionId>,
    /// The agent's working directory; absolute, and an existing directory when the session
    /// starts. Required by then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
    /// The provider's model name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Codex developer instructions, Claude system prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// When the agent must ask before acting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_policy: Option<ApprovalPolicy>,
    /// How far the agent's commands may reach.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxMode>,
    /// Session-scoped MCP servers by name. Argument, environment and header values may be
    /// secrets: they are never logged or stored.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        serialize_with = "forms::mcp_servers::serialize",
        deserialize_with = "forms::mcp_servers::deserialize"
    )]
    #[cfg_attr(feature = "schemars", schemars(with = "BTreeMap<String, forms::McpServerForm>"))]
    pub mcp_servers: BTreeMap<String, McpServer>,
    /// Skills the provider makes available.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        serialize_with = "forms::skills::serialize",
        deserialize_with = "forms::skills::deserialize"
    )]
    #[cfg_attr(feature = "schemars", schemars(with = "Vec<forms::SkillForm>"))]
    pub skills: Vec<Skill>,
    /// Environment changes for the provider process. Values may be secrets: they are never
    /// logged or stored.
    #[serde(
        default,
        skip_serializing_if = "Env::is_empty",
        serialize_with = "forms::env::serialize",
        deserialize_with = "forms::env::deserialize"
    )]
    #[cfg_attr(feature = "schemars", schemars(with = "forms::EnvForm"))]
    pub env: Env,
    /// How the provider CLI authenticates; default `subscription`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<AuthMode>,
    /// Which provider conversation the session opens; default a new one. Set (even to `new`),
    /// it replaces the options' conversation in [`SessionConfig::apply_to`].
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "forms::conversation::serialize",
        deserialize_with = "forms::conversation::deserialize"
    )]
    #[cfg_attr(feature = "schemars", schemars(with = "Option<forms::ConversationForm>"))]
    pub conversation: Option<Conversation>,
    /// Caller-owned metadata, stored in the session's snapshot (no secrets).
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub metadata: serde_json::Map<String, Value>,
    /// In-memory replay buffer size, in events; default 1000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_buffer_size: Option<NonZeroUsize>,
    /// How many completed turns a live session keeps: a number (0 turns the cache off) or
    /// `"unbounded"`; default the event buffer size.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "forms::cache_size::serialize",
        deserialize_with = "forms::cache_size::deserialize"
    )]
    #[cfg_attr(feature = "schemars", schemars(with = "Option<forms::CacheSizeForm>"))]
    pub completed_turn_cache_size: Option<CacheSize>,
    /// Provider opening deadline, in milliseconds; default 30000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_timeout_ms: Option<NonZeroU64>,
    /// Initial store commit, cleanup and hand-off deadline, in milliseconds; default 5000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_finalization_timeout_ms: Option<NonZeroU64>,
    /// Provider turn-admission deadline, in milliseconds; default 30000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_start_timeout_ms: Option<NonZeroU64>,
    /// Response and cancellation watchdog, in milliseconds; default 30000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_command_timeout_ms: Option<NonZeroU64>,
    /// Deadline for answering a request, in milliseconds; the provider is told to deny it
    /// afterwards. Default none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_timeout_ms: Option<NonZeroU64>,
    /// How long a running turn may go without provider activity (while no request is pending)
    /// before it is cancelled as stalled, in milliseconds. Default none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_inactivity_timeout_ms: Option<NonZeroU64>,
    /// What the session does when a store write fails; default `degrade`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_failure: Option<StoreFailurePolicy>,
    /// Whether the session may replace a stored, non-live session with the same ID; default
    /// `never`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reuse: Option<Reuse>,
    /// The provider's own options, read by the provider (its `options_from_json`); each provider
    /// documents its form, and one that takes none accepts only `null` or `{}`. Values may be
    /// secrets: they are never logged.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub provider_options: Value,
}

impl SessionConfig {
    /// A config for `provider` with every other field left out (their defaults).
    pub fn new(provider: impl Into<ProviderId>) -> Self {
        SessionConfig {
            provider: provider.into(),
            id: None,
            cwd: None,
            model: None,
            system_prompt: None,
            approval_policy: None,
            sandbox: None,
            mcp_servers: BTreeMap::new(),
            skills: Vec::new(),
            env: Env::default(),
            auth: None,
            conversation: None,
            metadata: serde_json::Map::new(),
            event_buffer_size: None,
            completed_turn_cache_size: None,
            startup_timeout_ms: None,
            startup_finalization_timeout_ms: None,
            turn_start_timeout_ms: None,
            provider_command_timeout_ms: None,
            request_timeout_ms: None,
            turn_inactivity_timeout_ms: None,
            store_failure: None,
            reuse: None,
            provider_options: Value::Null,
        }
    }

    /// Parses a config from JSON text. Errors are [`Error::InvalidConfig`] starting with the
    /// path of the field at fault (and ending with the line and column); a key given twice in
    /// one object is refused too (see [`repeated_key`]).
    pub fn from_json_str(json: &str) -> Result<Self> {
        if !json.trim_start().starts_with('{') {
            // Not an object (serde would read a struct from an array): say what it is instead.
            let value: Value = serde_json::from_str(json).map_err(|e| Error::InvalidConfig(e.to_string()))?;
            return Err(not_an_object("", &value));
        }
        if let Some(repeated) = repeated_key(json) {
            // A map would keep the last of the two without a word.
            return Err(Error::InvalidConfig(repeated.to_string()));
        }
        let mut deserializer = serde_json::Deserializer::from_str(json);
        let config = serde_path_to_error::deserialize(&mut deserializer).map_err(|e| at_path("", e))?;
        deserializer.end().map_err(|e| Error::InvalidConfig(e.to_string()))?;
        Ok(config)
    }

    /// Parses a config from a JSON value. Errors are [`Error::InvalidConfig`] starting with the
    /// path of the field at fault.
    pub fn from_json_value(json: Value) -> Result<Self> {
        if !json.is_object() {
            return Err(not_an_object("", &json));
        }
        serde_path_to_error::deserialize(json).map_err(|e| at_path("", e))
    }

    /// The [`SessionOptions`] this config describes, for `provider` (which must be the provider
    /// the config names): [`SessionConfig::apply_to`] on [`SessionOptions::default`].
    pub fn into_options(self, provider: &dyn Provider) -> Result<SessionOptions> {
        self.apply_to(provider, SessionOptions::default())
    }

    /// Layers this config over `options`, for `provider` (which must be the provider the config
    /// names), and returns the result. Use it to add what a config cannot hold (an exec, a
    /// store, a request handler) or to start from settings made in code.
    ///
    /// Each field the config sets replaces the option's value; a field it leaves out keeps it.
    /// Maps and lists add to what `options` holds, like the builder methods: MCP servers and
    /// metadata entries by name (the config's entry wins), skills, and the variables of `env`.
    /// The provider reads [`SessionConfig::provider_options`] with
    /// [`Provider::options_from_json`], which merges them into the typed options already there:
    /// a config that sets one Codex option keeps a `binary` set in code.
    ///
    /// Errors ([`Error::InvalidConfig`], from a config for another provider or provider options
    /// the provider does not take) come before any field is applied. Nothing is validated
    /// beyond the config's own form and the provider's options; [`SessionOptions::validate`]
    /// runs when the session starts.
    pub fn apply_to(self, provider: &dyn Provider, mut options: SessionOptions) -> Result<SessionOptions> {
        // Every field is named: a new one does not compile until it reaches the options.
        let SessionConfig {
            provider: provider_id,
            id,
            cwd,
            model,
            system_prompt,
            approval_policy,
            sandbox,
            mcp_servers,
            skills,
            env,
            auth,
            conversation,
            metadata,
            event_buffer_size,
            completed_turn_cache_size,
            startup_timeout_ms,
            startup_finalization_timeout_ms,
            turn_start_timeout_ms,
            provider_command_timeout_ms,
            request_timeout_ms,
            turn_inactivity_timeout_ms,
            store_failure,
            reuse,
            provider_options,
        } = self;
        if provider.id() != provider_id {
            return Err(Error::InvalidConfig(format!(
                "provider: the config is for provider `{provider_id}`, not `{}`",
                provider.id()
            )));
        }
        // The only step that can fail after the check above; it leaves the options unchanged on
        // error (the `options_from_json` contract).
        provider.options_from_json(&provider_options, &mut options.provider_options)?;
        let millis = |ms: NonZeroU64| Duration::from_millis(ms.get());
        fn set<T>(field: &mut T, value: Option<T>) {
            if let Some(value) = value {
                *field = value;
            }
        }
        fn set_some<T>(field: &mut Option<T>, value: Option<T>) {
            if value.is_some() {
                *field = value;
            }
        }
        set_some(&mut options.id, id.map(|id| id.as_str().to_owned()));
        set_some(&mut options.cwd, cwd);
        set_some(&mut options.model, model);
        set_some(&mut options.system_prompt, system_prompt);
        set_some(&mut options.approval_policy, approval_policy);
        set_some(&mut options.sandbox, sandbox);
        options.mcp_servers.extend(mcp_servers);
        options.skills.extend(skills);
        // The config's word on a name replaces the options' (a name it sets is no longer removed,
        // one it removes no longer set); a name it both sets and removes stays in both, which
        // validation refuses.
        options.env.unset.retain(|name| !env.set.contains_key(name));
        for name in env.unset.iter().filter(|name| !env.set.contains_key(*name)) {
            options.env.set.remove(name);
        }
        options.env.set.extend(env.set);
        for name in env.unset {
            if !options.env.unset.contains(&name) {
                options.env.unset.push(name);
            }
        }
        set(&mut options.auth, auth);
        set(&mut options.conversation, conversation);
        options.metadata.extend(metadata);
        set(&mut options.event_buffer_size, event_buffer_size.map(NonZeroUsize::get));
        set_some(&mut options.completed_turn_cache_size, completed_turn_cache_size);
        set(&mut options.startup_timeout, startup_timeout_ms.map(millis));
        set(&mut options.startup_finalization_timeout, startup_finalization_timeout_ms.map(millis));
        set(&mut options.turn_start_timeout, turn_start_timeout_ms.map(millis));
        set(&mut options.provider_command_timeout, provider_command_timeout_ms.map(millis));
        set_some(&mut options.request_timeout, request_timeout_ms.map(millis));
        set_some(&mut options.turn_inactivity_timeout, turn_inactivity_timeout_ms.map(millis));
        set(&mut options.store_failure, store_failure);
        set(&mut options.reuse, reuse);
        Ok(options)
    }
}

impl Harness {
    /// Starts the session `config` describes: looks up its provider, has it read the
    /// config's provider options, and starts the session as [`Harness::start_session`] does.
    ///
    /// An unregistered provider is [`Error::UnknownProvider`]; provider options the provider
    /// does not take are [`Error::InvalidConfig`] naming the field. Either way no session is
    /// started. To add an exec, a store or a request handler, build the options with
    /// [`SessionConfig::apply_to`] and call [`Harness::start_session`].
    pub async fn start_session_from_config(&self, config: SessionConfig) -> Result<SessionRef> {
        let provider_id = config.provider.clone();
        let provider = self.registered_provider(&provider_id)?;
        let options = config.into_options(provider.as_ref())?;
        self.start_session(provider_id, options).await
    }
}

#[cfg(feature = "schemars")]
impl SessionConfig {
    /// The JSON Schema (draft 2020-12) of the config, as checked in at
    /// `agent-core/schema/session-config.schema.json`. It describes what parses: fields that may
    /// be left out are not required.
    pub fn json_schema() -> Value {
        schemars::generate::SchemaSettings::draft2020_12()
            .for_deserialize()
            .into_generator()
            .into_root_schema_for::<SessionConfig>()
            .to_value()
    }
}

impl fmt::Debug for SessionConfig {
    // Every field is named here (the destructuring fails to compile when one is added), so each
    // new field is a decision: values that can hold secrets (environment values, MCP arguments,
    // environment and header values, metadata values, the system prompt, provider option
    // values) never appear, only names and sizes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let SessionConfig {
            provider,
            id,
            cwd,
            model,
            system_prompt,
            approval_policy,
            sandbox,
            mcp_servers,
            skills,
            env,
            auth,
            conversation,
            metadata,
            event_buffer_size,
            completed_turn_cache_size,
            startup_timeout_ms,
            startup_finalization_timeout_ms,
            turn_start_timeout_ms,
            provider_command_timeout_ms,
            request_timeout_ms,
            turn_inactivity_timeout_ms,
            store_failure,
            reuse,
            provider_options,
        } = self;
        f.debug_struct("SessionConfig")
            .field("provider", provider)
            .field("id", id)
            .field("cwd", cwd)
            .field("model", model)
            .field("system_prompt_bytes", &system_prompt.as_ref().map(String::len))
            .field("approval_policy", approval_policy)
            .field("sandbox", sandbox)
            .field("mcp_servers", mcp_servers)
            .field("skills", skills)
            .field("env", env)
            .field("auth", auth)
            .field("conversation", conversation)
            .field("metadata_keys", &metadata.keys().collect::<Vec<_>>())
            .field("event_buffer_size", event_buffer_size)
            .field("completed_turn_cache_size", completed_turn_cache_size)
            .field("startup_timeout_ms", startup_timeout_ms)
            .field("startup_finalization_timeout_ms", startup_finalization_timeout_ms)
            .field("turn_start_timeout_ms", turn_start_timeout_ms)
            .field("provider_command_timeout_ms", provider_command_timeout_ms)
            .field("request_timeout_ms", request_timeout_ms)
            .field("turn_inactivity_timeout_ms", turn_inactivity_timeout_ms)
            .field("store_failure", store_failure)
            .field("reuse", reuse)
            .field("provider_options_keys", &provider_options.as_object().map(|o| o.keys().collect::<Vec<_>>()))
            .finish_non_exhaustive()
    }
}

/// Reads a provider's options from the JSON of [`SessionConfig::provider_options`] as `T`, for
/// implementations of [`Provider::options_from_json`]. Errors are [`Error::InvalidConfig`]
/// starting with the field's path from `provider_options` and naming the provider, without the
/// values the options held ([`without_any_values`]):
/// `provider_options.max_line_bytes: invalid type: a string, expected usize (provider `codex`)`.
///
/// Give `T` `#[serde(deny_unknown_fields)]`, so options meant for another provider are refused
/// rather than ignored.
///
/// Anything but a JSON object is refused (serde would read some structs from an array).
pub fn provider_options_from_json<T: DeserializeOwned>(provider: &ProviderId, options: &Value) -> Result<T> {
    if !options.is_object() {
        return Err(match not_an_object("provider_options", options) {
            Error::InvalidConfig(message) => Error::InvalidConfig(format!("{message} (provider `{provider}`)")),
            other => other,
        });
    }
    serde_path_to_error::deserialize(options).map_err(|error| match at_path("provider_options", error) {
        Error::InvalidConfig(message) => Error::InvalidConfig(format!("{message} (provider `{provider}`)")),
        other => other,
    })
}

/// The error for a JSON value at `path` that should have been an object.
fn not_an_object(path: &str, found: &Value) -> Error {
    let found = match found {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    };
    match path {
        "" => Error::InvalidConfig(format!("expected a JSON object, found {found}")),
        path => Error::InvalidConfig(format!("{path}: expected a JSON object, found {found}")),
    }
}

/// True for provider options that say nothing: `null` or `{}`.
pub(crate) fn is_empty_options(options: &Value) -> bool {
    options.is_null() || options.as_object().is_some_and(serde_json::Map::is_empty)
}

/// A parse error as [`Error::InvalidConfig`], prefixed with its path below `root`.
fn at_path(root: &str, error: serde_path_to_error::Error<serde_json::Error>) -> Error {
    let path = error.path().to_string();
    let inner = error.into_inner();
    let path = match (root, path.as_str()) {
        // `?`: serde_path_to_error knows no path (the JSON text itself is malformed).
        (root, "." | "?") => root.to_owned(),
        ("", path) => path.to_owned(),
        (root, path) if path.starts_with('[') => format!("{root}{path}"),
        (root, path) => format!("{root}.{path}"),
    };
    let message = without_any_values(&inner.to_string());
    if path.is_empty() { Error::InvalidConfig(message) } else { Error::InvalidConfig(format!("{path}: {message}")) }
}

/// A serde error message without the values it quotes from the input, which may be secrets (a
/// key in the wrong place), keeping what was expected: the `Display` of a `serde_json` error
/// (or any serde error) as it can be shown or logged.
///
/// - `invalid type: string "sk-…", expected …` becomes `invalid type: a string, expected …`
///   (and `invalid value: string …` likewise);
/// - ``unknown variant `sk-…`, expected `subscription` or `inherit` `` becomes
///   ``unknown value, expected `subscription` or `inherit` ``.
///
/// Field names (``unknown field `modle` ``), numbers, booleans and the position in the text stay:
/// they come from the input's keys and shape, not from its string values.
///
/// ```
/// use agent_core::config::without_values;
///
/// assert_eq!(
///     without_values("unknown variant `sk-live-0123`, expected `subscription` or `inherit` at line 1 column 30"),
///     "unknown value, expected `subscription` or `inherit` at line 1 column 30",
/// );
/// assert_eq!(
///     without_values(r#"invalid type: string "KEY=sk-live-0123", expected struct EnvForm"#),
///     "invalid type: a string, expected struct EnvForm",
/// );
/// ```
pub fn without_values(message: &str) -> String {
    strip_values(message, false)
}

/// [`without_values`], numbers too: for a text that promises to quote nothing of its input (a
/// token may be all digits).
///
/// ```
/// use agent_core::config::without_any_values;
///
/// assert_eq!(
///     without_any_values("env.set.TOKEN: invalid type: integer `12345678`, expected a string"),
///     "env.set.TOKEN: invalid type: an integer, expected a string",
/// );
/// ```
pub fn without_any_values(message: &str) -> String {
    strip_values(message, true)
}

fn strip_values(message: &str, numbers: bool) -> String {
    const STRING: &str = "string \"";
    const VARIANT: &str = "unknown variant `";
    const INTEGER: &str = "integer `";
    const FLOAT: &str = "floating point `";
    let markers: &[&str] = if numbers { &[STRING, VARIANT, INTEGER, FLOAT] } else { &[STRING, VARIANT] };
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    // Whichever value comes first: a string value may hold the other markers' words.
    while let Some((at, marker)) = markers.iter().filter_map(|&marker| Some((rest.find(marker)?, marker))).min() {
        out.push_str(&rest[..at]);
        let value = &rest[at + marker.len()..];
        let (said, after) = match marker {
            STRING => ("a string", after_debug_string(value)),
            VARIANT => ("unknown value", after_variant(value)),
            // Digits, a sign, a point or an exponent up to the closing backtick.
            INTEGER => ("an integer", value.find('`').map_or("", |end| &value[end + 1..])),
            _ => ("a number", value.find('`').map_or("", |end| &value[end + 1..])),
        };
        out.push_str(said);
        rest = after;
    }
    out.push_str(rest);
    out
}

/// What follows a `Debug`-escaped string whose opening `"` is already read: the first `"` not
/// escaped closes it. Nothing when it is not closed.
fn after_debug_string(quoted: &str) -> &str {
    let mut escaped = false;
    let end = quoted.char_indices().find(|&(_, c)| {
        let closes = c == '"' && !escaped;
        escaped = c == '\\' && !escaped;
        closes
    });
    end.map_or("", |(i, _)| &quoted[i + 1..])
}

/// What follows the value of serde's ``unknown variant `{value}`, …`` whose opening backtick is
/// already read, from the `,` on. The value is written as it is (a backtick in it is not
/// escaped), so its end is the last place the rest of serde's message could start: what
/// follows the value is a static list of variant names and the position, which cannot hold
/// either ending. Nothing when neither is there.
fn after_variant(quoted: &str) -> &str {
    ["`, expected ", "`, there are no variants"]
        .iter()
        .filter_map(|ending| quoted.rfind(ending))
        .max()
        .map_or("", |at| &quoted[at + 1..])
}

mod forms;
mod repeated;

#[cfg(feature = "schemars")]
mod schemas;

pub use repeated::{RepeatedKey, repeated_key};

#[cfg(test)]
mod tests;
