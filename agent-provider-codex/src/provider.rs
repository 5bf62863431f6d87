//! [`CodexProvider`]: validation, binary discovery and version check, spawn and handshake.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_core::exec::{Command, EnvSpec, Exec, ExecError};
use agent_core::provider::{OpenContext, OpenConversation, Opened, require_capabilities};
use agent_core::{
    AuthMode, Capabilities, Capability, ConversationMode, DynProvider, Error, EventKind, McpServer, Provider,
    ProviderId, ProviderOptions, Result, SessionOptions, Support,
};
use agent_provider_kit::framing::stderr_note;
use agent_provider_kit::probe::ProbeCache;
use agent_provider_kit::secrets::Secrets;
use agent_provider_kit::skills::{require_skills, skill_file};
use agent_provider_kit::transcript::{MAX_SCANNED, any_line};
use agent_provider_kit::version::{CliProbe, Version};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::connection::{CallError, Connection};
use crate::options::CodexOptions;
use crate::session::{CodexSession, ModelEffort, TurnSettings, adapter_deadline, configured, parse_result};
use crate::version::{CHECK, MIN_SUPPORTED};
use crate::{auth, validate};

/// The ID sessions name this provider by.
pub const PROVIDER_ID: &str = "codex";

/// The Codex provider: runs `codex app-server` through the session's exec and speaks its
/// JSON-RPC protocol. See the crate docs for the mappings.
pub struct CodexProvider {
    id: ProviderId,
    /// `codex --version` results per exec backend, program and program file, so each binary is
    /// probed once.
    versions: ProbeCache<Version>,
}

impl CodexProvider {
    /// A provider registered as [`PROVIDER_ID`].
    pub fn new() -> Self {
        CodexProvider { id: ProviderId::new(PROVIDER_ID), versions: ProbeCache::new() }
    }

    /// What a Codex session with these options can do.
    fn capabilities_for(codex: &CodexOptions) -> Capabilities {
        let native = [
            Capability::TokenStreaming,
            Capability::Reasoning,
            Capability::Approvals,
            Capability::SessionApprovals,
            Capability::McpElicitation,
            Capability::Cancel,
            Capability::Steer,
            Capability::Resume,
            Capability::Fork,
            Capability::PerSessionMcp,
            Capability::Skills,
            Capability::SystemPrompt,
            Capability::ModelSelection,
            Capability::ApprovalPolicy,
            Capability::Sandbox,
            Capability::StructuredInput,
            Capability::Images,
            Capability::Usage,
        ];
        native
            .into_iter()
            .fold(Capabilities::NONE, |caps, cap| caps.with(cap, Support::Native))
            // `item/tool/requestUserInput` is experimental in the 0.171 schema, and outside plan
            // mode it needs a feature codex marks under development.
            .with(Capability::Questions, if codex.questions { Support::Experimental } else { Support::Unsupported })
    }

    fn unavailable(&self, reason: impl Into<String>) -> Error {
        Error::ProviderUnavailable { provider: self.id.clone(), reason: reason.into() }
    }

    /// Runs `codex --version` (once per exec, program and program file) and checks it against
    /// [`MIN_SUPPORTED`]. Every failure names the program and carries the probe's stderr tail.
    async fn check_version(
        &self,
        ctx: &OpenContext,
        program: &OsString,
        env: &EnvSpec,
        deadline: Duration,
    ) -> Result<Version> {
        let command = version_command(program, env, &ctx.options).session(ctx.session_id.clone());
        CHECK.check(&self.id, &self.versions, &ctx.exec, command, deadline, |e| self.spawn_error(e, program)).await
    }

    /// What `open` would find of codex for `options` through `exec`, without starting a session
    /// or refusing an old version: the program, where it resolves and the version it prints
    /// (not cached). For reports such as `agent-harness doctor`.
    pub async fn probe_cli(&self, exec: &dyn Exec, options: &SessionOptions) -> CliProbe {
        let codex = options.provider_options.get::<CodexOptions>().cloned().unwrap_or_default();
        let program = codex.program();
        let command = version_command(&program, &validate::env_spec(options), options);
        CHECK.probe_cli(&self.id, exec, command, |e| self.spawn_error(e, &program)).await
    }

    fn spawn_error(&self, error: ExecError, program: &OsString) -> Error {
        match error {
            ExecError::ProgramNotFound { .. } => self.unavailable(format!(
                "`{}` was not found; install the codex CLI {MIN_SUPPORTED} or newer (`npm install -g @openai/codex`) \
                 or set CodexOptions::binary to its path",
                program.to_string_lossy()
            )),
            ExecError::ProgramNotExecutable { path, searched_path: false, problem, .. } => self.unavailable(format!(
                "the codex CLI path {} {problem}; set CodexOptions::binary to the codex executable \
                 ({MIN_SUPPORTED} or newer)",
                path.display()
            )),
            ExecError::ProgramNotExecutable { path, problem, .. } => self.unavailable(format!(
                "`{}` resolves on PATH to {}, which {problem}; fix it or set CodexOptions::binary to the codex \
                 executable ({MIN_SUPPORTED} or newer)",
                program.to_string_lossy(),
                path.display()
            )),
            ExecError::NotAllowed { resolved } => {
                self.unavailable(format!("{} is not on the exec's executable allow-list", resolved.display()))
            }
            other => Error::Exec(other),
        }
    }

    /// `initialize`, then the `initialized` notification, within `timeout`; a timeout is
    /// reported as the startup `deadline`.
    async fn handshake(
        &self,
        conn: &Connection,
        codex: &CodexOptions,
        timeout: Duration,
        deadline: Duration,
    ) -> Result<()> {
        let init = InitializeParams {
            client_info: ClientInfo {
                name: codex.client_name_or_default(),
                title: "agent-harness",
                version: env!("CARGO_PKG_VERSION"),
            },
            capabilities: InitializeCapabilities { experimental_api: codex.experimental_api },
        };
        let answered = match conn.call("initialize", init, timeout).await {
            Ok(_) => conn.notify("initialized").await,
            Err(error) => Err(error),
        };
        match answered {
            Ok(()) => Ok(()),
            Err(error) => Err(self.startup_error(conn, "initialize", deadline, error).await),
        }
    }

    /// Maps a failed startup call, reporting the exit status and stderr when codex died.
    async fn startup_error(
        &self,
        conn: &Connection,
        operation: &'static str,
        timeout: Duration,
        error: CallError,
    ) -> Error {
        match error {
            CallError::Timeout => Error::Timeout { operation, timeout },
            CallError::Rpc { message, .. } => self.unavailable(format!("codex refused {operation}: {message}")),
            CallError::Closed | CallError::Write(_) => {
                let report = conn.exit_report().await;
                let (how, tail) = (report.how(), stderr_note(report.stderr_tail.as_deref()));
                self.unavailable(format!("codex app-server exited during {operation} ({how}){tail}"))
            }
            CallError::Unexpected { method } => self.unavailable(format!(
                "codex answered `{method}` in an unexpected shape; is it codex {MIN_SUPPORTED}+?"
            )),
        }
    }
}

impl Default for CodexProvider {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for CodexProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CodexProvider").field("id", &self.id).finish_non_exhaustive()
    }
}

impl From<CodexProvider> for DynProvider {
    fn from(provider: CodexProvider) -> Self {
        Arc::new(provider)
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct InitializeParams<'a> {
    client_info: ClientInfo<'a>,
    capabilities: InitializeCapabilities,
}

#[derive(Serialize)]
struct ClientInfo<'a> {
    name: &'a str,
    title: &'a str,
    version: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct InitializeCapabilities {
    experimental_api: bool,
}

/// How the context codex itself adds to a thread as user messages begins: the environment,
/// the user's and the project's instructions, skills, an interrupted turn's marker.
const CONTEXT_OPENINGS: &[&str] = &[
    "<environment_context>",
    "<user_instructions>",
    "# AGENTS.md instructions for ",
    "<INSTRUCTIONS>",
    "<skill>",
    "<turn_aborted>",
];

/// True when a rollout line is part of a turn: an item the model produced (a message, its
/// reasoning, a tool call), or a user message other than the context codex adds (any of its
/// parts not opening as [`CONTEXT_OPENINGS`] do, an image among them).
fn is_turn_content(line: &Value) -> bool {
    let payload = &line["payload"];
    if line["type"] != "response_item" {
        return false;
    }
    match (payload["type"].as_str(), payload["role"].as_str()) {
        (Some("message"), Some("user")) => payload["content"].as_array().is_some_and(|parts| {
            parts.iter().any(|part| match part["text"].as_str() {
                Some(text) => !CONTEXT_OPENINGS.iter().any(|opening| text.trim_start().starts_with(opening)),
                None => true,
            })
        }),
        (Some("message"), role) => role == Some("assistant"),
        (Some(_), _) => true,
        (None, _) => false,
    }
}

/// `codex --version` with the session's environment and cwd.
fn version_command(program: &OsString, env: &EnvSpec, options: &SessionOptions) -> Command {
    let mut command = Command::new(program.clone()).arg("--version");
    command.env = env.clone();
    command.cwd.clone_from(&options.cwd);
    command
}

/// `codex app-server` with the session's `-c` overrides, environment, cwd and stamp.
fn app_server_command(ctx: &OpenContext, codex: &CodexOptions, program: &OsString, env: EnvSpec) -> Command {
    // `CodexOptions::config` values can hold secrets: they go in the thread's `config`, over
    // stdin, never on the command line every local user can read.
    let mut command = Command::new(program.clone()).arg("app-server").session(ctx.session_id.clone());
    if !codex.unbounded_connection_retries {
        command = command.arg("-c").arg("features.unbounded_connection_retries=false");
    }
    if codex.questions {
        // The harness turns the feature on knowingly: codex's warning about it (a `warning` event
        // at every session's start) says nothing the caller can act on.
        command = command
            .arg("-c")
            .arg("features.default_mode_request_user_input=true")
            .arg("-c")
            .arg("suppress_unstable_features_warning=true");
    }
    command.env = env;
    command.cwd.clone_from(&ctx.options.cwd);
    command
}

/// `thread/start`, `thread/resume` and `thread/fork` params.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ThreadParams<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    thread_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    exclude_turns: Option<bool>,
    cwd: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<&'a str>,
    /// Pinned to codex's own login under `AuthMode::Subscription`.
    #[serde(skip_serializing_if = "Option::is_none")]
    model_provider: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    approval_policy: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sandbox: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    developer_instructions: Option<&'a str>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    config: BTreeMap<String, Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ThreadResult {
    thread: ThreadFields,
    /// The model and reasoning effort the thread runs with, which a turn's own override
    /// changes for the turns after it too (codex keeps them).
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    reasoning_effort: Option<String>,
}

/// What open reads of the thread: its ID, and the rollout file it is kept in (`path`, for a
/// resume's check).
#[derive(Deserialize)]
struct ThreadFields {
    id: String,
    #[serde(default)]
    path: Option<std::path::PathBuf>,
}

/// Codex's name for an approval policy (`OnFailure` is refused by validation).
fn approval_policy(policy: agent_core::ApprovalPolicy) -> &'static str {
    match policy {
        agent_core::ApprovalPolicy::Untrusted => "untrusted",
        agent_core::ApprovalPolicy::Never => "never",
        _ => "on-request",
    }
}

fn sandbox_mode(mode: agent_core::SandboxMode) -> &'static str {
    match mode {
        agent_core::SandboxMode::ReadOnly => "read-only",
        agent_core::SandboxMode::WorkspaceWrite => "workspace-write",
        agent_core::SandboxMode::DangerFullAccess => "danger-full-access",
        // A mode this provider does not know gets the tightest, never none.
        _ => "read-only",
    }
}

/// The `config` overrides of a thread: one `mcp_servers.<name>` entry per session MCP server,
/// and the caller's [`CodexOptions::config`] entries (already checked by the auth guard).
fn thread_config(options: &SessionOptions, overrides: BTreeMap<String, Value>) -> BTreeMap<String, Value> {
    let mut config = overrides;
    let servers = options.mcp_servers.iter().filter_map(|(name, server)| {
        let value = match server {
            McpServer::Stdio { command, args, env } => {
                let mut value = json!({ "command": command, "args": args });
                if !env.is_empty() {
                    value["env"] = json!(env);
                }
                value
            }
            McpServer::Http { url, headers } => {
                let mut value = json!({ "url": url });
                if !headers.is_empty() {
                    value["http_headers"] = json!(headers);
                }
                value
            }
            _ => return None,
        };
        Some((format!("mcp_servers.{name}"), value))
    });
    config.extend(servers);
    config
}

fn thread_params<'a>(
    options: &'a SessionOptions,
    conversation: &'a OpenConversation,
    overrides: BTreeMap<String, Value>,
) -> (&'static str, ThreadParams<'a>) {
    let (method, thread_id) = match conversation {
        OpenConversation::Resume { provider_session_id } => ("thread/resume", Some(provider_session_id.as_str())),
        OpenConversation::Fork { provider_session_id } => ("thread/fork", Some(provider_session_id.as_str())),
        _ => ("thread/start", None),
    };
    let params = ThreadParams {
        thread_id,
        exclude_turns: thread_id.map(|_| true),
        cwd: options.cwd.as_ref().map(|p| p.to_string_lossy().into_owned()),
        model: options.model.as_deref(),
        model_provider: (options.auth == AuthMode::Subscription).then_some(auth::PINNED_MODEL_PROVIDER),
        approval_policy: options.approval_policy.map(approval_policy),
        sandbox: options.sandbox.map(sandbox_mode),
        developer_instructions: options.system_prompt.as_deref(),
        config: thread_config(options, overrides),
    };
    (method, params)
}

#[async_trait]
impl Provider for CodexProvider {
    fn id(&self) -> ProviderId {
        self.id.clone()
    }

    fn capabilities(&self, options: &SessionOptions) -> Capabilities {
        Self::capabilities_for(&options.provider_options.get::<CodexOptions>().cloned().unwrap_or_default())
    }

    fn options_from_json(&self, options: &Value, into: &mut ProviderOptions) -> Result<()> {
        crate::options::merge_json(&self.id, options, into)
    }

    fn validate(&self, options: &SessionOptions) -> Result<()> {
        require_capabilities(&self.id, &self.capabilities(options), options)?;
        agent_core::provider::refuse_turn_options::<crate::CodexTurnOptions>(options, "CodexOptions")?;
        let codex = options.provider_options.get::<CodexOptions>().cloned().unwrap_or_default();
        validate::validate(options, &codex)
    }

    async fn open(&self, ctx: OpenContext) -> Result<Opened> {
        let started = Instant::now();
        let options = Arc::clone(&ctx.options);
        let codex = options.provider_options.get::<CodexOptions>().cloned().unwrap_or_default();
        validate::validate(&options, &codex)?;
        // The guard again with the exec it will run on, and codex's own configuration and login.
        auth::GUARD.check(&options, Some(ctx.exec.as_ref()), codex.config.iter().map(|(k, _)| k.as_str()))?;
        auth::check_local_state(&options)?;
        let overrides = validate::config_overrides(&codex)?;
        require_skills(&options, ctx.exec.as_ref(), |skill| skill_file(&skill.path))?;
        let deadline = adapter_deadline(options.startup_timeout);
        let remaining = || deadline.saturating_sub(started.elapsed());
        let env = validate::env_spec(&options);
        let program = codex.program();
        self.check_version(&ctx, &program, &env, deadline).await?;

        let command = app_server_command(&ctx, &codex, &program, env);
        let child = ctx.exec.spawn(command).await.map_err(|e| self.spawn_error(e, &program))?;
        // `CodexOptions::config` values are secrets too, credentials by their key's name.
        let config = validate::string_leaves(&overrides);
        let secrets = Secrets::of_session(&options, |name| auth::GUARD.refuses_env(name))
            .and_env(config.iter().map(|(key, value)| (key, value)));
        let credentials = secrets.clone();
        let conn = Connection::start(child, ctx.sink.clone(), codex.max_line_bytes, secrets)
            .map_err(|_| self.unavailable("the exec backend did not provide the child's stdin, stdout and stderr"))?;
        self.handshake(&conn, &codex, remaining(), deadline).await?;
        // What the session runs with: read from codex for a thread it continues (below).
        let model_overrides: BTreeMap<String, Value> = ["model", "model_reasoning_effort"]
            .into_iter()
            .filter_map(|key| Some((key.to_owned(), overrides.get(key)?.clone())))
            .collect();
        let (method, params) = thread_params(&options, &ctx.conversation, overrides);
        let raw = match conn.call(method, params, remaining()).await {
            Ok(raw) => raw,
            Err(CallError::Rpc { message, .. }) if method != "thread/start" => {
                let (mode, thread) =
                    ctx.conversation.continued().expect("thread/start is the only call for a new conversation");
                // Codex saves a thread at its first turn: one that never ran a turn is unknown.
                let unsaved = if message.contains("no rollout found") {
                    "; codex keeps a thread only once a turn ran in it (a session stopped before its first turn \
                     has none to continue)"
                } else {
                    ""
                };
                return Err(Error::ResumeFailed {
                    mode,
                    reason: format!(
                        "codex could not {method} `{thread}`: {message} (no fresh thread was started){unsaved}"
                    ),
                });
            }
            Err(error) => return Err(self.startup_error(&conn, method, deadline, error).await),
        };
        let Some(ThreadResult { thread: ThreadFields { id: thread_id, path: rollout }, model, reasoning_effort }) =
            parse_result(raw.get())
        else {
            let error = CallError::Unexpected { method: method.to_owned() };
            return Err(self.startup_error(&conn, method, deadline, error).await);
        };
        if let OpenConversation::Resume { provider_session_id: wanted } = &ctx.conversation
            && *wanted != thread_id
        {
            return Err(Error::ResumeFailed {
                mode: ConversationMode::Resume,
                reason: format!("codex resumed thread `{thread_id}` when asked for `{wanted}`"),
            });
        }
        // Codex builds a resumed thread's context from its rollout file, and reports the turns it
        // recorded elsewhere: a rollout that lost its messages (cut, or its lines replaced)
        // would be an empty conversation reported as continued, turns listed and all.
        if let OpenConversation::Resume { provider_session_id } = &ctx.conversation
            && ctx.exec.is_local()
            && let Some(rollout) = rollout
            && any_line(rollout.clone(), MAX_SCANNED, is_turn_content).await == Some(false)
        {
            let reason = format!(
                "codex's rollout of thread `{provider_session_id}` ({}) holds none of its messages: codex would go on \
                 from an empty conversation (no fresh thread was started)",
                rollout.display()
            );
            return Err(Error::ResumeFailed { mode: ConversationMode::Resume, reason });
        }
        conn.state().set_thread(&thread_id);
        // The thread's settings as codex applied them (model, sandbox, approval policy).
        let _ = ctx.sink.emit(None, EventKind::ProviderEvent { method: method.to_owned() }, Some(raw)).await;

        let now = ModelEffort { model, effort: reasoning_effort };
        let settings = match &ctx.conversation {
            OpenConversation::New => TurnSettings::new(now.model, now.effort),
            // Codex continues a thread with its last turn's model and effort, which may have been
            // that turn's own: the session's are read to go back to.
            _ => {
                let cwd = options.cwd.as_ref().map(|p| p.to_string_lossy());
                // Bounded as a command: a codex that leaves the calls unanswered costs no more.
                let timeout = remaining().min(adapter_deadline(options.provider_command_timeout));
                let own = configured(&conn, cwd.as_deref(), options.model.as_deref(), &model_overrides, timeout).await;
                TurnSettings::resumed(own, now)
            }
        };
        let session = CodexSession {
            provider: self.id.clone(),
            conn,
            thread_id: thread_id.clone(),
            skills: options.skills.clone(),
            settings,
            turn_timeout: adapter_deadline(options.turn_start_timeout),
            command_timeout: adapter_deadline(options.provider_command_timeout),
        };
        Ok(Opened::new(Arc::new(session))
            .provider_session_id(thread_id)
            .capabilities(Self::capabilities_for(&codex))
            .credentials(credentials.credentials()))
    }
}

#[cfg(test)]
mod tests {
    use agent_core::{ApprovalPolicy, SandboxMode};

    use super::*;

    #[test]
    fn thread_params_carry_the_session_options() {
        let mut server = McpServer::stdio("mcp-server", ["--flag"]);
        if let McpServer::Stdio { env, .. } = &mut server {
            env.insert("TOKEN".into(), "t".into());
        }
        let options = SessionOptions::new("/work")
            .model("gpt-x")
            .system_prompt("Be brief.")
            .approval_policy(ApprovalPolicy::Untrusted)
            .sandbox(SandboxMode::WorkspaceWrite)
            .mcp_server("files", server)
            .mcp_server("web", McpServer::http("https://mcp.example/x"));
        let overrides = BTreeMap::from([("model_reasoning_effort".to_owned(), json!("high"))]);
        let (method, params) = thread_params(&options, &OpenConversation::New, overrides);
        assert_eq!(method, "thread/start");
        assert_eq!(
            serde_json::to_value(&params).unwrap(),
            json!({
                "cwd": "/work",
                "model": "gpt-x",
                "modelProvider": "openai",
                "approvalPolicy": "untrusted",
                "sandbox": "workspace-write",
                "developerInstructions": "Be brief.",
                "config": {
                    "model_reasoning_effort": "high",
                    "mcp_servers.files": {"command": "mcp-server", "args": ["--flag"], "env": {"TOKEN": "t"}},
                    "mcp_servers.web": {"url": "https://mcp.example/x"},
                },
            }),
            "a subscription session is pinned to codex's own login"
        );
    }

    #[test]
    fn resume_and_fork_name_the_thread() {
        let options = SessionOptions::new("/work").approval_policy(ApprovalPolicy::Never).auth(AuthMode::Inherit);
        let resume = OpenConversation::Resume { provider_session_id: "t-1".into() };
        let (method, params) = thread_params(&options, &resume, BTreeMap::new());
        assert_eq!(method, "thread/resume");
        assert_eq!(
            serde_json::to_value(&params).unwrap(),
            json!({"threadId": "t-1", "excludeTurns": true, "cwd": "/work", "approvalPolicy": "never"})
        );
        let (method, _) =
            thread_params(&options, &OpenConversation::Fork { provider_session_id: "t-1".into() }, BTreeMap::new());
        assert_eq!(method, "thread/fork");
    }

    /// Only what a turn wrote counts: the context codex adds does not (in tags, or the
    /// project's instructions), nor a developer message, a line of another kind or one that is
    /// not JSON; a prompt that opens with a tag of its own does, and so does a tool call.
    #[test]
    fn turn_content_is_what_a_turn_wrote() {
        let message = |role: &str, parts: Value| json!({"type": "response_item", "payload": {"type": "message", "role": role, "content": parts}});
        let text = |t: &str| json!([{"type": "input_text", "text": t}]);
        for line in [
            json!({"type": "session_meta", "payload": {"id": "t"}}),
            message("developer", text("<skills_instructions>")),
            message("user", text("<environment_context>\n  <cwd>/w</cwd>")),
            message("user", text("# AGENTS.md instructions for /w\n\nBe brief.")),
            message("user", json!([{"text": "<user_instructions>"}, {"text": "<environment_context>"}])),
            json!({"type": "event_msg", "payload": {"type": "user_message", "message": "Remember"}}),
        ] {
            assert!(!is_turn_content(&line), "{line}");
        }
        for line in [
            message("user", text("Remember")),
            message("user", text("<task>Fix it</task>")),
            message("user", text("<skills>the ones to use</skills>")),
            message("user", json!([{"text": "<environment_context>"}, {"type": "input_image", "image_url": "data:"}])),
            message("assistant", text("noted")),
            json!({"type": "response_item", "payload": {"type": "function_call", "name": "shell"}}),
        ] {
            assert!(is_turn_content(&line), "{line}");
        }
        let rollout_path = |reply: &str| parse_result::<ThreadResult>(reply).and_then(|r| r.thread.path);
        let reply = json!({"id": 2, "result": {"thread": {"id": "t", "path": "/r.jsonl"}}}).to_string();
        assert_eq!(rollout_path(&reply), Some(std::path::PathBuf::from("/r.jsonl")));
        assert_eq!(rollout_path(r#"{"id":2,"result":{"thread":{"id":"t"}}}"#), None);
    }

    #[test]
    fn capabilities_are_reported_honestly() {
        let provider = CodexProvider::new();
        let caps = provider.capabilities(&SessionOptions::new("/work"));
        assert_eq!(caps.steer, Support::Native);
        assert_eq!(caps.session_approvals, Support::Native);
        assert_eq!(caps.questions, Support::Experimental);
        assert!(Capability::ALL.iter().all(|c| caps.get(*c).is_available()));
        let without = SessionOptions::new("/work").provider_option(CodexOptions::new().questions(false));
        assert_eq!(provider.capabilities(&without).questions, Support::Unsupported);
    }

    #[test]
    fn a_config_merges_its_codex_options_into_those_set_in_code() {
        let provider = CodexProvider::new();
        let config = agent_core::SessionConfig::from_json_value(json!({
            "provider": "codex",
            "provider_options": { "questions": false, "config": { "model_reasoning_effort": "\"high\"" } }
        }))
        .unwrap();
        let base = SessionOptions::new("/work").provider_option(CodexOptions::new().binary("/opt/codex/bin/codex"));
        let options = config.apply_to(&provider, base).unwrap();
        let codex = options.provider_options.get::<CodexOptions>().unwrap();
        assert_eq!(codex.binary.as_deref(), Some(std::path::Path::new("/opt/codex/bin/codex")));
        assert_eq!(codex.config, [("model_reasoning_effort".to_owned(), "\"high\"".to_owned())]);
        assert_eq!(provider.capabilities(&options).questions, Support::Unsupported);

        // Changing one field in code afterwards keeps what the config set.
        let options = options.update_provider_option(|codex: &mut CodexOptions| codex.client_name = Some("app".into()));
        let codex = options.provider_options.get::<CodexOptions>().unwrap();
        assert!(!codex.questions && codex.client_name.as_deref() == Some("app"));
    }
}
