//! [`ClaudeProvider`]: validation, binary discovery and version check, spawn and handshake.

use std::ffi::OsString;
use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agent_core::exec::{Command, EnvSpec, Exec, ExecError};
use agent_core::provider::{OpenContext, OpenConversation, Opened, require_capabilities};
use agent_core::{
    Capabilities, Capability, DynProvider, Error, EventKind, Provider, ProviderId, ProviderOptions, Result,
    SessionOptions, Support,
};
use agent_provider_kit::conversations::{Claim, real_path};
use agent_provider_kit::probe::ProbeCache;
use agent_provider_kit::secrets::Secrets;
use agent_provider_kit::skills::{require_skills, skill_file};
use agent_provider_kit::transcript::claude::{self as transcript, Transcripts};
use agent_provider_kit::version::{CliProbe, Version};
use async_trait::async_trait;
use serde_json::{Value, json};

use crate::connection::{CallError, Connection};
use crate::normalize::Normalizer;
use crate::options::{ClaudeOptions, PermissionMode};
use crate::session::{ClaudeSession, Settings, adapter_deadline};
use crate::validate;
use crate::version::{CHECK, MIN_SUPPORTED};

/// The ID sessions name this provider by.
pub const PROVIDER_ID: &str = "claude";

/// The Claude Code provider: runs `claude -p --input-format stream-json --output-format
/// stream-json` through the session's exec and speaks its control protocol. See the crate docs
/// for the mappings.
pub struct ClaudeProvider {
    id: ProviderId,
    /// `claude --version` results per exec backend, program and program file.
    versions: ProbeCache<Version>,
}

impl ClaudeProvider {
    /// A provider registered as [`PROVIDER_ID`].
    pub fn new() -> Self {
        ClaudeProvider { id: ProviderId::new(PROVIDER_ID), versions: ProbeCache::new() }
    }

    /// What a Claude session with these options can do.
    fn capabilities_for(claude: &ClaudeOptions) -> Capabilities {
        let native = [
            Capability::Reasoning,
            Capability::Questions,
            Capability::Approvals,
            Capability::Cancel,
            Capability::Resume,
            Capability::Fork,
            Capability::PerSessionMcp,
            Capability::SystemPrompt,
            Capability::ModelSelection,
            Capability::ApprovalPolicy,
            Capability::StructuredInput,
            Capability::Images,
            Capability::Usage,
        ];
        native
            .into_iter()
            .fold(Capabilities::NONE, |caps, cap| caps.with(cap, Support::Native))
            // Claude Code has no "allow for this session" answer over stdio: the provider
            // remembers the decision for the tool and input pattern.
            .with(Capability::SessionApprovals, Support::Emulated)
            // Skills are loaded from `--add-dir` directories (which also opens them to the
            // tools), and only in Claude Code's own layout.
            .with(Capability::Skills, Support::Emulated)
            // Deltas come only with `--include-partial-messages`.
            .with(
                Capability::TokenStreaming,
                if claude.include_partial_messages { Support::Native } else { Support::Unsupported },
            )
    }

    fn unavailable(&self, reason: impl Into<String>) -> Error {
        Error::ProviderUnavailable { provider: self.id.clone(), reason: reason.into() }
    }

    /// Sets the session's MCP servers (`mcp_set_servers`), which claude connects before it
    /// answers. A server that did not connect (its program missing, its process gone) leaves
    /// the session running without its tools, as a server of claude's own configuration does;
    /// a `warning` names it and claude's reason, with the session's secrets redacted.
    async fn set_mcp_servers(
        &self,
        conn: &Connection,
        ctx: &OpenContext,
        secrets: &Secrets,
        timeout: Duration,
    ) -> Result<()> {
        let request = json!({"subtype": "mcp_set_servers", "servers": validate::mcp_servers(&ctx.options)});
        let reply = match conn.control(request, timeout).await {
            Ok(reply) => reply.unwrap_or_default(),
            Err(CallError::Timeout) => return Err(Error::Timeout { operation: "claude mcp_set_servers", timeout }),
            Err(CallError::Refused(message)) => {
                let message = secrets.redact(&message).into_owned();
                return Err(self.unavailable(format!("claude refused the session's MCP servers: {message}")));
            }
            Err(_) => {
                // Its stderr may quote what it was sent.
                let report = conn.exit_report().await.to_string();
                let report = secrets.redact(&report);
                return Err(self.unavailable(format!("claude {report} while it set the session's MCP servers")));
            }
        };
        for (name, why) in reply["errors"].as_object().into_iter().flatten() {
            let why = secrets.redact(why.as_str().unwrap_or("no reason given")).into_owned();
            let message = format!("MCP server `{name}` did not connect, so its tools are missing: {why}");
            let _ = ctx.sink.emit(None, EventKind::Warning { message }, None).await;
        }
        Ok(())
    }

    /// Runs `claude --version` (once per exec, program and program file) and checks it against
    /// [`MIN_SUPPORTED`](crate::MIN_SUPPORTED).
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

    /// What `open` would find of claude for `options` through `exec`, without starting a session
    /// or refusing an old version: the program, where it resolves and the version it prints
    /// (not cached). For reports such as `agent-harness doctor`.
    pub async fn probe_cli(&self, exec: &dyn Exec, options: &SessionOptions) -> CliProbe {
        let claude = options.provider_options.get::<ClaudeOptions>().cloned().unwrap_or_default();
        let program = claude.program();
        let command = version_command(&program, &validate::env_spec(options), options);
        CHECK.probe_cli(&self.id, exec, command, |e| self.spawn_error(e, &program)).await
    }

    /// Claims the conversation the session opens (see [`agent_provider_kit::conversations`]):
    /// claude keeps it in `<config dir>/projects/`, appended to by each process continuing it.
    /// Only for a local exec, whose claude shares this host's files.
    fn claim(&self, ctx: &OpenContext, config_dir: Option<&Path>, conversation: &str) -> Result<Option<Claim>> {
        if !ctx.exec.is_local() {
            return Ok(None);
        }
        let place = config_dir.map(real_path).unwrap_or_default();
        Claim::take("claude", &place, conversation, &ctx.session_id).map(Some).map_err(|claimed| {
            match ctx.conversation.continued() {
                Some((mode, _)) => Error::ResumeFailed { mode, reason: claimed.to_string() },
                None => self.unavailable(claimed.to_string()),
            }
        })
    }

    fn spawn_error(&self, error: ExecError, program: &OsString) -> Error {
        match error {
            ExecError::ProgramNotFound { .. } => self.unavailable(format!(
                "`{}` was not found; install Claude Code {MIN_SUPPORTED} or newer \
                 (`npm install -g @anthropic-ai/claude-code`) or set ClaudeOptions::binary to its path",
                program.to_string_lossy()
            )),
            ExecError::ProgramNotExecutable { path, problem, .. } => self.unavailable(format!(
                "the claude CLI at {} {problem}; set ClaudeOptions::binary to the claude executable \
                 ({MIN_SUPPORTED} or newer)",
                path.display()
            )),
            ExecError::NotAllowed { resolved } => {
                self.unavailable(format!("{} is not on the exec's executable allow-list", resolved.display()))
            }
            other => Error::Exec(other),
        }
    }
}

impl Default for ClaudeProvider {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for ClaudeProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClaudeProvider").field("id", &self.id).finish_non_exhaustive()
    }
}

impl From<ClaudeProvider> for DynProvider {
    fn from(provider: ClaudeProvider) -> Self {
        Arc::new(provider)
    }
}

/// `; stderr:` and the tail, for an error report; nothing when stderr was empty.
/// A random version-4 UUID: the session ID of a new (or forked) conversation, chosen here so
/// it is known before the first turn.
/// `claude --version` with the session's environment and cwd.
fn version_command(program: &OsString, env: &EnvSpec, options: &SessionOptions) -> Command {
    let mut command = Command::new(program.clone()).arg("--version");
    command.env = env.clone();
    command.cwd.clone_from(&options.cwd);
    command
}

fn new_session_id() -> Option<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).ok()?;
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    Some(format!("{}-{}-{}-{}-{}", &hex[0..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..32]))
}

/// The arguments of `claude` for a session (without the program).
pub(crate) fn arguments(
    options: &SessionOptions,
    claude: &ClaudeOptions,
    mode: PermissionMode,
    conversation: &OpenConversation,
    session_id: &str,
    skill_roots: &[std::path::PathBuf],
) -> Vec<String> {
    let mut args: Vec<String> = ["-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose"]
        .map(str::to_owned)
        .into();
    if claude.include_partial_messages {
        args.push("--include-partial-messages".into());
    }
    args.extend(["--permission-prompt-tool".into(), "stdio".into()]);
    match conversation {
        OpenConversation::Resume { provider_session_id } => {
            args.extend(["--resume".into(), provider_session_id.clone()]);
        }
        OpenConversation::Fork { provider_session_id } => {
            args.extend(["--resume".into(), provider_session_id.clone(), "--fork-session".into()]);
            args.extend(["--session-id".into(), session_id.to_owned()]);
        }
        _ => args.extend(["--session-id".into(), session_id.to_owned()]),
    }
    if let Some(model) = &options.model {
        args.extend(["--model".into(), model.clone()]);
    }
    args.extend(["--permission-mode".into(), mode.as_str().into()]);
    if claude.allow_dangerously_skip_permissions {
        args.push("--allow-dangerously-skip-permissions".into());
    }
    if let Some(prompt) = &options.system_prompt {
        args.extend(["--system-prompt".into(), prompt.clone()]);
    }
    if let Some(text) = &claude.append_system_prompt {
        args.extend(["--append-system-prompt".into(), text.clone()]);
    }
    if !options.mcp_servers.is_empty() {
        // The session's servers are set over stdin once claude runs; the user's and the
        // project's MCP configurations are not read.
        args.push("--strict-mcp-config".into());
    }
    if !claude.allowed_tools.is_empty() {
        args.extend(["--allowedTools".into(), claude.allowed_tools.join(",")]);
    }
    if !claude.disallowed_tools.is_empty() {
        args.extend(["--disallowedTools".into(), claude.disallowed_tools.join(",")]);
    }
    if let Some(tools) = &claude.tools {
        args.extend(["--tools".into(), tools.join(",")]);
    }
    if let Some(turns) = claude.max_turns {
        args.extend(["--max-turns".into(), turns.to_string()]);
    }
    if let Some(sources) = &claude.setting_sources {
        args.extend(["--setting-sources".into(), sources.join(",")]);
    }
    for dir in claude.add_dirs.iter().chain(skill_roots.iter().filter(|r| !claude.add_dirs.contains(r))) {
        args.extend(["--add-dir".into(), dir.display().to_string()]);
    }
    args.extend(claude.extra_args.iter().cloned());
    args
}

#[async_trait]
impl Provider for ClaudeProvider {
    fn id(&self) -> ProviderId {
        self.id.clone()
    }

    fn capabilities(&self, options: &SessionOptions) -> Capabilities {
        Self::capabilities_for(&options.provider_options.get::<ClaudeOptions>().cloned().unwrap_or_default())
    }

    fn options_from_json(&self, options: &Value, into: &mut ProviderOptions) -> Result<()> {
        crate::options::merge_json(&self.id, options, into)
    }

    fn validate(&self, options: &SessionOptions) -> Result<()> {
        require_capabilities(&self.id, &self.capabilities(options), options)?;
        agent_core::provider::refuse_turn_options::<crate::ClaudeTurnOptions>(options, "ClaudeOptions")?;
        let claude = options.provider_options.get::<ClaudeOptions>().cloned().unwrap_or_default();
        validate::validate(options, &claude)
    }

    async fn open(&self, ctx: OpenContext) -> Result<Opened> {
        let started = Instant::now();
        let options = Arc::clone(&ctx.options);
        let claude = options.provider_options.get::<ClaudeOptions>().cloned().unwrap_or_default();
        validate::validate(&options, &claude)?;
        // The guard again with the exec it will run on.
        crate::auth::GUARD.check(&options, Some(ctx.exec.as_ref()), crate::auth::flag_keys(&claude))?;
        crate::auth::check_local_state(&options)?;
        let mode = validate::permission_mode(&options, &claude)?;
        let deadline = adapter_deadline(options.startup_timeout);
        let remaining = || deadline.saturating_sub(started.elapsed());
        let env = validate::env_spec(&options);
        let program = claude.program();
        self.check_version(&ctx, &program, &env, deadline).await?;

        let session_id = match &ctx.conversation {
            OpenConversation::Resume { provider_session_id } => provider_session_id.clone(),
            _ => new_session_id().ok_or_else(|| self.unavailable("the OS random source failed (a session ID)"))?,
        };
        let skill_roots = validate::skill_roots(&options)?;
        require_skills(&options, ctx.exec.as_ref(), |skill| skill_file(&skill.path))?;
        // Claude's configuration directory in the environment it runs with.
        let config_dir = transcript::config_dir(|name| env.value(name));
        let claim = self.claim(&ctx, config_dir.as_deref(), &session_id)?;
        // What claude keeps of the conversation it continues, read before it runs.
        let transcripts = match (ctx.conversation.continued(), config_dir) {
            (Some((_, continued)), Some(config_dir)) if ctx.exec.is_local() => {
                Transcripts::find(config_dir, options.cwd.clone(), continued).await
            }
            _ => Transcripts::default(),
        };
        if let Some((mode, continued)) = ctx.conversation.continued()
            && let Some(project) = transcripts.messageless().await
        {
            let reason = format!(
                "claude's transcript of conversation `{continued}` (under `projects/{project}` of its configuration \
                 directory) holds none of its messages: claude would go on from an empty conversation (no fresh \
                 conversation was started)"
            );
            return Err(Error::ResumeFailed { mode, reason });
        }
        let args = arguments(&options, &claude, mode, &ctx.conversation, &session_id, &skill_roots);
        let mut command = Command::new(program.clone()).args(args).session(ctx.session_id.clone());
        command.env = env;
        command.cwd.clone_from(&options.cwd);
        let child = ctx.exec.spawn(command).await.map_err(|e| self.spawn_error(e, &program))?;
        let mut normalizer = Normalizer::new(Some(session_id.clone()));
        // Approvals for the session live in the provider: a resumed session's come from the store.
        normalizer.restore_rules(&ctx.session_approvals);
        let secrets = Secrets::of_session(&options, |name| crate::auth::GUARD.refuses_env(name));
        let credentials = secrets.clone();
        let conn = Connection::start(child, ctx.sink.clone(), claude.max_line_bytes, normalizer, secrets)
            .map_err(|_| self.unavailable("the exec backend did not provide the child's stdin, stdout and stderr"))?;
        // `initialize` proves the process is up and speaks the protocol; a resume of a
        // conversation claude cannot find ends the process here ("No conversation found").
        let initialize = json!({"subtype": "initialize", "hooks": null});
        match conn.control(initialize, remaining()).await {
            Ok(_) => {}
            Err(CallError::Timeout) => {
                return Err(Error::Timeout { operation: "claude initialize", timeout: deadline });
            }
            Err(error) => {
                let report = conn.exit_report().await;
                let why = match error {
                    CallError::Refused(message) => format!("claude refused initialize: {message}"),
                    _ => format!("claude {report} during initialize"),
                };
                let stderr = report.stderr_tail.clone().unwrap_or_default();
                return Err(match ctx.conversation.continued() {
                    Some((mode, provider_session_id)) => {
                        // Claude writes a conversation down as its turns run: a session stopped
                        // before its first turn has none to continue, nor one whose host was killed
                        // before claude had written it (seen after a kill during a later turn).
                        let unsaved = if !stderr.contains("No conversation found") {
                            String::new()
                        } else if let Some(project) = transcripts.elsewhere() {
                            format!(
                                "; claude keeps conversations per working directory and finds this one under \
                                 `projects/{project}` of its configuration directory, not under this session's cwd: \
                                 resume it with the cwd it ran in"
                            )
                        } else {
                            "; claude keeps a conversation only once it wrote a turn of it down (a session stopped \
                             before its first turn, or killed before claude saved it, has none to continue)"
                                .to_owned()
                        };
                        Error::ResumeFailed {
                            mode,
                            reason: format!(
                                "claude could not continue conversation `{provider_session_id}`: {} (no fresh conversation was started){unsaved}",
                                if stderr.is_empty() { why } else { stderr }
                            ),
                        }
                    }
                    None => self.unavailable(why),
                });
            }
        }
        if !options.mcp_servers.is_empty() {
            self.set_mcp_servers(&conn, &ctx, &credentials, remaining()).await?;
        }
        let session = ClaudeSession {
            provider: self.id.clone(),
            skills: options.skills.iter().map(|s| s.name.clone()).collect(),
            conn,
            settings: Mutex::new(Settings::new(options.model.clone(), mode)),
            bypass_allowed: claude.allow_dangerously_skip_permissions,
            turn_timeout: adapter_deadline(options.turn_start_timeout),
            command_timeout: adapter_deadline(options.provider_command_timeout),
            claim: Mutex::new(claim),
        };
        Ok(Opened::new(Arc::new(session))
            .provider_session_id(session_id)
            .capabilities(Self::capabilities_for(&claude))
            .credentials(credentials.credentials()))
    }
}

#[cfg(test)]
mod tests {
    use agent_core::McpServer;

    use super::*;

    #[test]
    fn new_sessions_get_their_id_on_the_command_line() {
        let options = SessionOptions::new("/work").model("claude-x").system_prompt("Be brief.");
        let claude = ClaudeOptions::new().allowed_tool("Read").disallowed_tool("WebFetch").tools(["Bash", "Read"]);
        let args = arguments(&options, &claude, PermissionMode::Default, &OpenConversation::New, "sid", &[]);
        let line = args.join(" ");
        assert!(
            line.starts_with(
                "-p --input-format stream-json --output-format stream-json --verbose --include-partial-messages \
             --permission-prompt-tool stdio --session-id sid --model claude-x --permission-mode default \
             --system-prompt Be brief."
            ),
            "{line}"
        );
        assert!(line.contains("--allowedTools Read --disallowedTools WebFetch --tools Bash,Read"), "{line}");
        assert!(!line.contains("--mcp-config") && !line.contains("dangerously"), "{line}");
    }

    #[test]
    fn resume_and_fork_name_the_conversation() {
        let options = SessionOptions::new("/work").mcp_server("echo", McpServer::stdio("python3", ["/e.py"]));
        let resume = OpenConversation::Resume { provider_session_id: "old".into() };
        let args = arguments(&options, &ClaudeOptions::new(), PermissionMode::Default, &resume, "old", &[]);
        let line = args.join(" ");
        assert!(line.contains("--resume old") && !line.contains("--session-id") && !line.contains("--fork"), "{line}");
        assert!(line.contains("--strict-mcp-config"), "{line}");
        let fork = OpenConversation::Fork { provider_session_id: "old".into() };
        let line = arguments(&options, &ClaudeOptions::new(), PermissionMode::Plan, &fork, "new", &["/skills".into()])
            .join(" ");
        assert!(line.contains("--add-dir /skills"), "{line}");
        assert!(line.contains("--resume old --fork-session --session-id new"), "{line}");
        assert!(line.contains("--permission-mode plan"), "{line}");
    }

    #[test]
    fn a_config_merges_its_claude_options_into_those_set_in_code() {
        let provider = ClaudeProvider::new();
        let config = agent_core::SessionConfig::from_json_value(json!({
            "provider": "claude",
            "approval_policy": "never",
            "provider_options": {"permission_mode": "acceptEdits", "max_turns": 4, "include_partial_messages": false},
        }))
        .unwrap();
        let base = SessionOptions::new("/work").provider_option(ClaudeOptions::new().binary("/opt/claude/bin/claude"));
        let options = config.apply_to(&provider, base).unwrap();
        let claude = options.provider_options.get::<ClaudeOptions>().unwrap();
        assert_eq!(claude.binary.as_deref(), Some(std::path::Path::new("/opt/claude/bin/claude")), "kept");
        assert_eq!((claude.permission_mode, claude.max_turns), (Some(PermissionMode::AcceptEdits), Some(4)));
        assert_eq!(provider.capabilities(&options).token_streaming, Support::Unsupported);
        // The explicit mode wins over the policy's.
        assert_eq!(validate::permission_mode(&options, claude).unwrap(), PermissionMode::AcceptEdits);
        let bad = agent_core::SessionConfig::from_json_value(json!({
            "provider": "claude", "provider_options": {"effort": "high"},
        }))
        .unwrap();
        assert!(matches!(bad.apply_to(&provider, SessionOptions::new("/work")), Err(Error::InvalidConfig(_))));
    }

    #[test]
    fn session_ids_are_v4_uuids() {
        let a = new_session_id().unwrap();
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
        assert_ne!(a, new_session_id().unwrap());
    }

    #[test]
    fn capabilities_are_reported_honestly() {
        let caps = ClaudeProvider::new().capabilities(&SessionOptions::new("/work"));
        assert_eq!(caps.session_approvals, Support::Emulated);
        assert_eq!(caps.steer, Support::Unsupported);
        assert_eq!(caps.sandbox, Support::Unsupported);
        assert_eq!(caps.questions, Support::Native);
        assert_eq!(caps.token_streaming, Support::Native);
        let quiet = SessionOptions::new("/work").provider_option(ClaudeOptions::new().include_partial_messages(false));
        assert_eq!(ClaudeProvider::new().capabilities(&quiet).token_streaming, Support::Unsupported);
    }
}
