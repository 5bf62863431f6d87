//! [`PiProvider`]: validation, version check, spawn, readiness and session selection.

use std::ffi::OsString;
use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_core::exec::{Command, EnvSpec, Exec, ExecError};
use agent_core::provider::{OpenContext, OpenConversation, Opened, require_capabilities};
use agent_core::{
    ApprovalPolicy, Capabilities, Capability, ConversationMode, DynProvider, Error, EventKind, Provider, ProviderId,
    ProviderOptions, Result, SessionOptions, Support,
};
use agent_provider_kit::conversations::{Claim, Claimed};
use agent_provider_kit::framing::stderr_note;
use agent_provider_kit::probe::ProbeCache;
use agent_provider_kit::secrets::Secrets;
use agent_provider_kit::skills::require_skills;
use agent_provider_kit::transcript::pi as transcript;
use agent_provider_kit::version::{CliProbe, Version};
use async_trait::async_trait;
use serde_json::{Value, json};

use crate::auth;
use crate::connection::{CallError, Connection};
use crate::extension::ExtensionDir;
use crate::options::PiOptions;
use crate::session::{PiModel, PiSession, adapter_deadline};
use crate::version::{CHECK, CLEAR_QUEUE, MIN_SUPPORTED};

/// The ID sessions name this provider by.
pub const PROVIDER_ID: &str = "pi";

/// The Pi provider: runs `pi --mode rpc` through the session's exec. See the crate docs.
pub struct PiProvider {
    id: ProviderId,
    versions: ProbeCache<Version>,
}

impl PiProvider {
    /// A provider registered as [`PROVIDER_ID`].
    pub fn new() -> Self {
        PiProvider { id: ProviderId::new(PROVIDER_ID), versions: ProbeCache::new() }
    }

    fn capabilities_for(options: &SessionOptions) -> Capabilities {
        let native = [
            Capability::TokenStreaming,
            Capability::Reasoning,
            Capability::Cancel,
            Capability::Steer,
            Capability::Resume,
            Capability::Fork,
            Capability::Skills,
            Capability::SystemPrompt,
            Capability::ModelSelection,
            Capability::Usage,
        ];
        let caps = native.into_iter().fold(Capabilities::NONE, |caps, cap| caps.with(cap, Support::Native));
        // Approvals and questions come from the extension the provider loads; the policy
        // decides whether its gate asks.
        let gate = options.approval_policy != Some(ApprovalPolicy::Never);
        caps.with(Capability::Questions, Support::Emulated)
            .with(Capability::ApprovalPolicy, Support::Emulated)
            .with(Capability::Approvals, if gate { Support::Emulated } else { Support::Unsupported })
    }

    fn unavailable(&self, reason: impl Into<String>) -> Error {
        Error::ProviderUnavailable { provider: self.id.clone(), reason: reason.into() }
    }

    /// Runs `pi --version` (once per exec, program and program file) and checks it against
    /// [`MIN_SUPPORTED`](crate::MIN_SUPPORTED).
    async fn check_version(
        &self,
        ctx: &OpenContext,
        pi: &PiOptions,
        env: &EnvSpec,
        deadline: Duration,
    ) -> Result<Version> {
        let program = pi.program();
        let command = version_command(pi, env, &ctx.options).session(ctx.session_id.clone());
        CHECK.check(&self.id, &self.versions, &ctx.exec, command, deadline, |e| self.spawn_error(e, &program)).await
    }

    /// What `open` would find of pi for `options` through `exec`, without starting a session or
    /// refusing an old version: the program, where it resolves and the version it prints (not
    /// cached). For reports such as `agent-harness doctor`.
    pub async fn probe_cli(&self, exec: &dyn Exec, options: &SessionOptions) -> CliProbe {
        let pi = options.provider_options.get::<PiOptions>().cloned().unwrap_or_default();
        let (program, command) = (pi.program(), version_command(&pi, &env_spec(options), options));
        CHECK.probe_cli(&self.id, exec, command, |e| self.spawn_error(e, &program)).await
    }

    fn spawn_error(&self, error: ExecError, program: &OsString) -> Error {
        match error {
            ExecError::ProgramNotFound { .. } => self.unavailable(format!(
                "`{}` was not found; install pi {MIN_SUPPORTED} or newer or set PiOptions::binary to its path",
                program.to_string_lossy()
            )),
            ExecError::ProgramNotExecutable { path, problem, .. } => {
                self.unavailable(format!("the pi program {} {problem}; set PiOptions::binary", path.display()))
            }
            other => Error::Exec(other),
        }
    }
}

impl Default for PiProvider {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for PiProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PiProvider").field("id", &self.id).finish_non_exhaustive()
    }
}

impl From<PiProvider> for DynProvider {
    fn from(provider: PiProvider) -> Self {
        Arc::new(provider)
    }
}

fn invalid(option: &'static str, reason: impl Into<String>) -> Error {
    Error::InvalidOption { option, reason: reason.into() }
}

/// Pi's agent directory: `$PI_CODING_AGENT_DIR`, else `~/.pi/agent`, in the environment pi
/// runs with (under `Subscription` the host's `PI_CODING_AGENT_DIR` is not pi's).
fn agent_dir(options: &SessionOptions) -> Option<PathBuf> {
    let env = env_spec(options);
    transcript::agent_dir(|name| env.value(name))
}

/// Where pi looks for the sessions of the session's cwd (see [`transcript::session_dirs`]), in
/// the environment pi runs with.
fn session_dirs(options: &SessionOptions, pi: &PiOptions) -> Vec<PathBuf> {
    let env = env_spec(options);
    transcript::session_dirs(|name| env.value(name), options.cwd.as_deref(), pi.session_dir.as_deref())
}

/// Checks the model against `models.json` when it names a provider defined there.
fn check_model(options: &SessionOptions, model: &str) -> Result<()> {
    if model.trim().is_empty() || model.chars().any(|c| c.is_whitespace() || c == '\0') {
        return Err(invalid("model", format!("`{model}` is not a pi model pattern")));
    }
    let Some((provider, id)) = model.split_once('/') else { return Ok(()) };
    let id = id.split(':').next().unwrap_or(id);
    let Some(file) = agent_dir(options).map(|d| d.join("models.json")) else { return Ok(()) };
    let Ok(text) = std::fs::read_to_string(&file) else { return Ok(()) };
    let Ok(models) = serde_json::from_str::<Value>(&text) else { return Ok(()) };
    let Some(defined) = models["providers"][provider]["models"].as_array() else { return Ok(()) };
    if defined.iter().any(|m| m["id"] == id) {
        return Ok(());
    }
    let known: Vec<&str> = defined.iter().filter_map(|m| m["id"].as_str()).collect();
    Err(invalid(
        "model",
        format!("pi provider `{provider}` in {} has no model `{id}` (it has: {})", file.display(), known.join(", ")),
    ))
}

/// Checks what can be checked before spawning.
fn validate(options: &SessionOptions, pi: &PiOptions) -> Result<()> {
    if let Some(model) = &options.model {
        check_model(options, model)?;
    }
    if options.approval_policy == Some(ApprovalPolicy::OnFailure) {
        return Err(invalid(
            "approval_policy",
            "pi has no sandbox whose failures could be asked about: use Untrusted or OnRequest (asked before bash, \
             edit and write) or Never",
        ));
    }
    let api_key = |arg: &str| arg == "--api-key" || arg.starts_with("--api-key=");
    let on_command_line = if pi.args.iter().any(|a| api_key(a)) {
        Some("PiOptions::args")
    } else if pi.binary_args.iter().any(|a| a.to_str().is_some_and(api_key)) {
        Some("PiOptions::binary_args")
    } else {
        None
    };
    if let Some(option) = on_command_line {
        return Err(invalid(
            option,
            "`--api-key` puts a secret on the command line; set the key in the session environment",
        ));
    }
    // What reaches pi's command line: a NUL would end the argument there.
    let nul = |bytes: &[u8]| bytes.contains(&0);
    let with_nul = [
        ("PiOptions::args", pi.args.iter().any(|a| nul(a.as_bytes()))),
        ("PiOptions::binary_args", pi.binary_args.iter().any(|a| nul(a.as_bytes()))),
        ("PiOptions::session_dir", pi.session_dir.as_ref().is_some_and(|d| nul(d.as_os_str().as_bytes()))),
        ("skills", options.skills.iter().any(|s| nul(s.path.as_os_str().as_bytes()))),
    ];
    if let Some((option, _)) = with_nul.iter().find(|(_, found)| *found) {
        return Err(invalid(option, "holds a NUL byte, which cannot reach pi's command line"));
    }
    // Pi resolves a relative directory against the session's cwd, the provider's look-up for a
    // resume against its own: refused rather than looked for in the wrong place.
    if pi.session_dir.as_ref().is_some_and(|d| !d.is_absolute()) {
        return Err(invalid("PiOptions::session_dir", "must be an absolute path"));
    }
    let reserved =
        ["--mode", "--session", "--fork", "--no-session", "--continue", "-c", "--resume", "-r", "--session-dir"];
    if let Some(flag) = pi.args.iter().find(|a| reserved.contains(&a.split('=').next().unwrap_or(a))) {
        return Err(invalid("PiOptions::args", format!("`{flag}` is set by the provider")));
    }
    if options.model.is_some() && pi.args.iter().any(|a| a == "--model" || a.starts_with("--model=")) {
        return Err(invalid("PiOptions::args", "`--model` is given twice: use SessionOptions::model only"));
    }
    if pi.max_line_bytes < 1024 {
        return Err(invalid("PiOptions::max_line_bytes", "must be at least 1024"));
    }
    // Pi names its default session directory after the cwd; a long cwd makes a name no file
    // system takes, and pi fails to start with a stack trace. Only a cwd that long is looked at,
    // as pi names it: its real path (a short link to a long directory is long).
    let real = |cwd: &PathBuf| std::fs::canonicalize(cwd).map_or(cwd.as_os_str().len(), |real| real.as_os_str().len());
    let long_cwd = options.cwd.as_ref().is_some_and(|cwd| real(cwd) > NAME_MAX - 8);
    if pi.session_dir.is_none() && long_cwd {
        let written = session_dirs(options, pi).into_iter().next();
        let name = written.as_ref().and_then(|dir| dir.file_name()).map_or(0, |name| name.len());
        if name > NAME_MAX {
            return Err(invalid(
                "cwd",
                format!(
                    "pi keeps the session in a directory named after the cwd, and that name would be {name} bytes, \
                     over the {NAME_MAX}-byte limit of a file name: set PiOptions::session_dir"
                ),
            ));
        }
    }
    Ok(())
}

/// The longest file name (one path component) the file systems pi runs on take, in bytes.
const NAME_MAX: usize = 255;

/// `pi --version` (after the binary's leading args) with the session's environment and cwd.
fn version_command(pi: &PiOptions, env: &EnvSpec, options: &SessionOptions) -> Command {
    let mut command = Command::new(pi.program());
    command.args.extend(pi.binary_args.iter().cloned());
    command.args.push("--version".into());
    command.env = env.clone();
    command.cwd.clone_from(&options.cwd);
    command
}

fn env_spec(options: &SessionOptions) -> EnvSpec {
    let mut spec = EnvSpec::default();
    spec.set = options.env.set.iter().map(|(k, v)| (k.into(), v.into())).collect();
    spec.unset = options.env.unset.iter().map(Into::into).collect();
    spec.unset.extend(auth::scrubbed(options));
    spec
}

/// The session flags for `conversation`, or why it cannot be opened (nothing spawned).
fn conversation_args(
    options: &SessionOptions,
    pi: &PiOptions,
    conversation: &OpenConversation,
) -> Result<Vec<OsString>> {
    let (flag, mode, id) = match conversation {
        OpenConversation::Resume { provider_session_id } => {
            ("--session", ConversationMode::Resume, provider_session_id)
        }
        OpenConversation::Fork { provider_session_id } => ("--fork", ConversationMode::Fork, provider_session_id),
        _ => {
            return Ok(pi
                .session_dir
                .iter()
                .flat_map(|d| ["--session-dir".into(), d.clone().into_os_string()])
                .collect());
        }
    };
    let dirs = session_dirs(options, pi);
    if dirs.is_empty() {
        return Err(Error::ResumeFailed { mode, reason: "pi's session directory is unknown (no cwd or HOME)".into() });
    }
    let Some(file) = dirs.iter().find_map(|dir| transcript::find_session_file(dir, id)) else {
        let searched = dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ");
        return Err(Error::ResumeFailed {
            mode,
            reason: format!("pi has no session `{id}` in {searched} (no fresh session was started)"),
        });
    };
    let mut args: Vec<OsString> =
        pi.session_dir.iter().flat_map(|d| ["--session-dir".into(), d.clone().into_os_string()]).collect();
    args.extend([flag.into(), file.into_os_string()]);
    Ok(args)
}

/// Claims conversation `id` for the session (see [`agent_provider_kit::conversations`]): pi
/// appends a conversation to its session file from each process continuing it. Pi's session
/// IDs are UUIDs, so the ID alone names the conversation (a copy of its file elsewhere is the
/// same conversation). Only for a local exec, whose pi shares this host's files.
fn claim_conversation(ctx: &OpenContext, id: &str) -> std::result::Result<Option<Claim>, Claimed> {
    if !ctx.exec.is_local() {
        return Ok(None);
    }
    Claim::take("pi", Path::new(""), id, &ctx.session_id).map(Some)
}

/// `pi --mode rpc` with the session's flags; the session's system prompt is in the file
/// `system_prompt` (see [`ExtensionDir::system_prompt`]).
fn rpc_command(
    ctx: &OpenContext,
    pi: &PiOptions,
    extension: &Path,
    system_prompt: Option<&Path>,
    session: Vec<OsString>,
    env: EnvSpec,
) -> Command {
    let options = &ctx.options;
    let mut command = Command::new(pi.program()).session(ctx.session_id.clone());
    let args = &mut command.args;
    args.extend(pi.binary_args.iter().cloned());
    args.extend(["--mode".into(), "rpc".into(), "-e".into(), extension.as_os_str().to_owned()]);
    args.extend(session);
    if let Some(model) = &options.model {
        args.extend(["--model".into(), model.into()]);
    }
    if let Some(file) = system_prompt {
        args.extend(["--system-prompt".into(), file.as_os_str().to_owned()]);
    }
    for skill in &options.skills {
        args.extend(["--skill".into(), skill.path.clone().into_os_string()]);
    }
    args.extend(pi.args.iter().map(OsString::from));
    command.env = env;
    command.cwd.clone_from(&options.cwd);
    command
}

#[async_trait]
impl Provider for PiProvider {
    fn id(&self) -> ProviderId {
        self.id.clone()
    }

    fn capabilities(&self, options: &SessionOptions) -> Capabilities {
        Self::capabilities_for(options)
    }

    fn options_from_json(&self, options: &Value, into: &mut ProviderOptions) -> Result<()> {
        crate::options::merge_json(&self.id, options, into)
    }

    fn validate(&self, options: &SessionOptions) -> Result<()> {
        require_capabilities(&self.id, &self.capabilities(options), options)?;
        let pi = options.provider_options.get::<PiOptions>().cloned().unwrap_or_default();
        auth::GUARD.check(options, None, auth::flag_keys(&pi).iter().map(String::as_str))?;
        validate(options, &pi)
    }

    async fn open(&self, ctx: OpenContext) -> Result<Opened> {
        let started = Instant::now();
        let options = Arc::clone(&ctx.options);
        let pi = options.provider_options.get::<PiOptions>().cloned().unwrap_or_default();
        validate(&options, &pi)?;
        auth::GUARD.check(&options, Some(ctx.exec.as_ref()), auth::flag_keys(&pi).iter().map(String::as_str))?;
        require_skills(&options, ctx.exec.as_ref(), |skill| skill.path.clone())?;
        // A resume or fork target that does not exist fails here, before anything runs.
        let session_args = conversation_args(&options, &pi, &ctx.conversation)?;
        // A resume claims its conversation before pi runs; a new or forked one once pi names it.
        let mut claim = match &ctx.conversation {
            OpenConversation::Resume { provider_session_id } => {
                claim_conversation(&ctx, provider_session_id).map_err(|claimed| Error::ResumeFailed {
                    mode: ConversationMode::Resume,
                    reason: claimed.to_string(),
                })?
            }
            _ => None,
        };
        let deadline = adapter_deadline(options.startup_timeout);
        let remaining = || deadline.saturating_sub(started.elapsed());
        let env = env_spec(&options);
        let version = self.check_version(&ctx, &pi, &env, deadline).await?;

        let gate = options.approval_policy != Some(ApprovalPolicy::Never);
        let extension = ExtensionDir::create(&std::env::temp_dir(), gate)
            .map_err(|e| self.unavailable(format!("cannot write the approval extension: {e}")))?;
        let system_prompt = match &options.system_prompt {
            Some(text) => Some(
                extension
                    .system_prompt(text)
                    .map_err(|e| self.unavailable(format!("cannot write the system prompt's file: {e}")))?,
            ),
            None => None,
        };
        let command = rpc_command(&ctx, &pi, extension.file(), system_prompt.as_deref(), session_args, env);
        let program = command.program.clone();
        let child = ctx.exec.spawn(command).await.map_err(|e| self.spawn_error(e, &program))?;
        let secrets = Secrets::of_session(&options, |name| auth::GUARD.refuses_env(name));
        let credentials = secrets.clone();
        let conn = Connection::start(child, ctx.sink.clone(), pi.max_line_bytes, secrets)
            .map_err(|_| self.unavailable("the exec backend did not provide the child's stdin, stdout and stderr"))?;
        conn.state().set_clears_queue(version >= CLEAR_QUEUE);
        conn.state().set_run_ends(crate::version::run_ends(version));

        // No ready event: `get_state` answers once pi reads its stdin.
        let state = match conn.call(json!({"type": "get_state"}), remaining()).await {
            Ok(Some(state)) => state,
            Ok(None) => return Err(self.unavailable("pi answered get_state without data")),
            Err(CallError::Timeout) => return Err(Error::Timeout { operation: "pi get_state", timeout: deadline }),
            Err(CallError::Refused { message, .. }) => {
                return Err(self.unavailable(format!("pi refused get_state: {message}")));
            }
            Err(_) => {
                let report = conn.exit_report().await;
                let (how, tail) = (report.how(), stderr_note(report.stderr_tail.as_deref()));
                let why = format!("pi exited during startup ({how}){tail}");
                // The session file was found before spawning: pi refusing what it holds says so
                // ("Session file is not a valid pi session", "Cannot fork: source session …");
                // any other exit is pi's own.
                let refused = report
                    .stderr_tail
                    .as_deref()
                    .is_some_and(|t| t.contains("Session file") || t.contains("Cannot fork: source session"));
                return Err(match ctx.conversation.continued() {
                    Some((mode, provider_session_id)) if refused => {
                        let reason = format!(
                            "pi could not open session `{provider_session_id}`: {why} (no fresh session was started)"
                        );
                        Error::ResumeFailed { mode, reason }
                    }
                    _ => self.unavailable(why),
                });
            }
        };
        let Some(session_id) = state["sessionId"].as_str().map(str::to_owned) else {
            return Err(self.unavailable("pi's get_state has no sessionId"));
        };
        if claim.is_none() {
            claim = claim_conversation(&ctx, &session_id).map_err(|claimed| self.unavailable(claimed.to_string()))?;
        }
        if let OpenConversation::Resume { provider_session_id: wanted } = &ctx.conversation
            && *wanted != session_id
        {
            return Err(Error::ResumeFailed {
                mode: ConversationMode::Resume,
                reason: format!("pi opened session `{session_id}` when asked for `{wanted}`"),
            });
        }
        // Pi writes a session's file only once a reply is in it: a continued session that holds
        // no message is one whose file lost its conversation (cut to its header), and going on
        // would be a fresh conversation reported as continued.
        if let Some((mode, provider_session_id)) = ctx.conversation.continued()
            && state["messageCount"].as_u64() == Some(0)
        {
            let reason = format!(
                "pi opened session `{provider_session_id}` with no messages: its session file holds none of the \
                 conversation (no fresh session was started)"
            );
            return Err(Error::ResumeFailed { mode, reason });
        }
        if let Some(wanted) = &options.model {
            let provider = state["model"]["provider"].as_str().unwrap_or_default();
            let id = state["model"]["id"].as_str().unwrap_or_default();
            let base = wanted.split(':').next().unwrap_or(wanted);
            if base != id && base != format!("{provider}/{id}") {
                return Err(invalid("model", format!("pi does not know `{wanted}` (it runs `{provider}/{id}`)")));
            }
        }
        // What the session opened, without the rest of pi's model object (0.73.1 sends the
        // whole models.json entry, which may hold custom headers).
        let opened = json!({
            "sessionId": state["sessionId"], "sessionFile": state["sessionFile"], "sessionName": state["sessionName"],
            "messageCount": state["messageCount"], "thinkingLevel": state["thinkingLevel"],
            "model": {"id": state["model"]["id"], "provider": state["model"]["provider"], "api": state["model"]["api"]},
        });
        let raw =
            agent_core::event::RawJson::from_string(json!({"type": "get_state", "data": opened}).to_string()).ok();
        let _ = ctx.sink.emit(None, EventKind::ProviderEvent { method: "get_state".into() }, raw).await;

        let opened_model = PiModel {
            provider: state["model"]["provider"].as_str().unwrap_or_default().to_owned(),
            id: state["model"]["id"].as_str().unwrap_or_default().to_owned(),
        };
        let session = PiSession {
            provider: self.id.clone(),
            conn,
            turn_timeout: adapter_deadline(options.turn_start_timeout),
            command_timeout: adapter_deadline(options.provider_command_timeout),
            follow_up: pi.steer_as_follow_up,
            _extension: extension,
            model: std::sync::Mutex::new(opened_model.clone()),
            session_model: opened_model,
            claim: std::sync::Mutex::new(claim),
        };
        Ok(Opened::new(Arc::new(session))
            .provider_session_id(session_id)
            .capabilities(Self::capabilities_for(&options))
            .credentials(credentials.credentials()))
    }
}

#[cfg(test)]
mod tests {
    use agent_core::{McpServer, Skill};

    use super::*;

    #[test]
    fn mcp_servers_are_refused_and_capabilities_are_honest() {
        let provider = PiProvider::new();
        let options = SessionOptions::new("/work").mcp_server("files", McpServer::stdio("mcp", ["--x"]));
        match provider.validate(&options) {
            Err(Error::Unsupported { capability, .. }) => assert_eq!(capability, Capability::PerSessionMcp),
            other => panic!("expected Unsupported, got {other:?}"),
        }
        let caps = provider.capabilities(&SessionOptions::new("/work"));
        assert_eq!(caps.approvals, Support::Emulated);
        assert_eq!(caps.questions, Support::Emulated);
        assert_eq!(caps.sandbox, Support::Unsupported);
        let never = SessionOptions::new("/work").approval_policy(ApprovalPolicy::Never);
        assert_eq!(provider.capabilities(&never).approvals, Support::Unsupported);
    }

    /// `--api-key` is refused wherever it would reach pi's command line, under either auth mode.
    #[test]
    fn an_api_key_flag_is_refused_in_args_and_binary_args() {
        let options = SessionOptions::new("/work").auth(agent_core::AuthMode::Inherit);
        for (pi, option) in [
            (PiOptions::new().arg("--api-key").arg("sk-secret"), "PiOptions::args"),
            (PiOptions::new().arg("--api-key=sk-secret"), "PiOptions::args"),
            (PiOptions::new().binary_arg("/opt/pi/cli.js").binary_arg("--api-key=sk-secret"), "PiOptions::binary_args"),
        ] {
            match validate(&options, &pi) {
                Err(Error::InvalidOption { option: refused, reason }) => {
                    assert_eq!(refused, option);
                    assert!(reason.contains("--api-key") && !reason.contains("sk-secret"), "{reason}");
                }
                other => panic!("expected InvalidOption, got {other:?}"),
            }
        }
        assert!(validate(&options, &PiOptions::new().binary_arg("/opt/pi/cli.js")).is_ok());
    }

    /// What would reach pi's command line with a NUL, a relative session directory (pi and the
    /// provider would look for it in different places) and `--session-dir` in args are refused,
    /// each naming its option.
    #[test]
    fn arguments_pi_cannot_take_are_refused_naming_the_option() {
        let options = SessionOptions::new("/work");
        let refused = |options: &SessionOptions, pi: PiOptions| match validate(options, &pi) {
            Err(Error::InvalidOption { option, reason }) => (option, reason),
            other => panic!("expected InvalidOption, got {other:?}"),
        };
        assert_eq!(refused(&options.clone().model("m\0"), PiOptions::new()).0, "model");
        assert_eq!(refused(&options, PiOptions::new().arg("--x\0")).0, "PiOptions::args");
        assert_eq!(refused(&options, PiOptions::new().binary_arg("/opt/pi\0")).0, "PiOptions::binary_args");
        assert_eq!(refused(&options, PiOptions::new().session_dir("/s\0")).0, "PiOptions::session_dir");
        assert_eq!(refused(&options.clone().skill(Skill::new("r", "/skills/r\0")), PiOptions::new()).0, "skills");
        let (option, reason) = refused(&options, PiOptions::new().session_dir("rel-sessions"));
        assert_eq!((option, reason.as_str()), ("PiOptions::session_dir", "must be an absolute path"));
        assert_eq!(refused(&options, PiOptions::new().arg("--session-dir=/x")).0, "PiOptions::args");
        assert!(validate(&options, &PiOptions::new().session_dir("/abs/sessions")).is_ok());
    }

    #[test]
    fn flags_carry_the_session_options() {
        let options = SessionOptions::new("/work")
            .model("fake/fake-model")
            .system_prompt("Be brief.")
            .skill(Skill::new("review", "/skills/review"));
        let (sink, _rx) = agent_provider_kit_testing_sink();
        let ctx = OpenContext::new(agent_core::SessionId::generate(), Arc::new(options), exec(), sink);
        let pi = PiOptions::new().binary("/usr/bin/node").binary_arg("/opt/pi/cli.js").arg("--no-context-files");
        let prompt = Some(Path::new("/tmp/x/system-prompt.md"));
        let command = rpc_command(&ctx, &pi, Path::new("/tmp/x/ext.ts"), prompt, Vec::new(), EnvSpec::default());
        let args: Vec<String> = command.args.iter().map(|a| a.to_string_lossy().into_owned()).collect();
        assert_eq!(
            args,
            [
                "/opt/pi/cli.js",
                "--mode",
                "rpc",
                "-e",
                "/tmp/x/ext.ts",
                "--model",
                "fake/fake-model",
                "--system-prompt",
                "/tmp/x/system-prompt.md",
                "--skill",
                "/skills/review",
                "--no-context-files"
            ]
        );
        assert_eq!(command.program, "/usr/bin/node");
    }

    fn agent_provider_kit_testing_sink() -> (agent_core::Sink, agent_provider_kit::testing::SinkRecorder) {
        agent_provider_kit::testing::sink()
    }

    fn exec() -> agent_core::DynExec {
        Arc::new(agent_exec::scripted::ScriptedExec::new())
    }

    #[test]
    fn resume_needs_the_exact_session_file() {
        let dir = std::env::temp_dir().join(format!("pi-resume-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let id = "01a2260e-41f7-7726-8e16-d519d0d70c4e";
        std::fs::write(dir.join(format!("2026-11-29T06-46-38-328Z_{id}.jsonl")), "{}\n").unwrap();
        let options = SessionOptions::new("/work");
        let pi = PiOptions::new().session_dir(&dir);
        let resume = OpenConversation::Resume { provider_session_id: id.into() };
        let args = conversation_args(&options, &pi, &resume).unwrap();
        assert_eq!(args[2], "--session");
        assert!(args[3].to_string_lossy().ends_with(&format!("_{id}.jsonl")));
        // A prefix of the ID is not the session.
        let partial = OpenConversation::Resume { provider_session_id: id[..8].into() };
        assert!(matches!(conversation_args(&options, &pi, &partial), Err(Error::ResumeFailed { .. })));
        let fork = OpenConversation::Fork { provider_session_id: id.into() };
        assert_eq!(conversation_args(&options, &pi, &fork).unwrap()[2], "--fork");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Pi writes sessions to `$PI_CODING_AGENT_SESSION_DIR` or its settings' `sessionDir` when
    /// set (`~` and relative directories included); resume finds them there.
    #[test]
    fn resume_finds_sessions_where_pi_settings_put_them() {
        let root = std::env::temp_dir().join(format!("pi-session-dirs-test-{}", std::process::id()));
        let (agent, cwd, home) = (root.join("agent"), root.join("project"), root.join("home"));
        for dir in [&agent, &cwd.join(".pi"), &home] {
            std::fs::create_dir_all(dir).unwrap();
        }
        let resume = |id: &str| OpenConversation::Resume { provider_session_id: id.into() };
        let session_in = |dir: &Path, id: &str| {
            std::fs::create_dir_all(dir).unwrap();
            std::fs::write(dir.join(format!("2026-12-03T06-46-38-328Z_{id}.jsonl")), "{}\n").unwrap();
        };
        let options = SessionOptions::new(&cwd)
            .env("PI_CODING_AGENT_DIR", agent.to_string_lossy())
            .env("HOME", home.to_string_lossy())
            .env_remove("PI_CODING_AGENT_SESSION_DIR");
        let found = |options: &SessionOptions, id: &str| {
            let args = conversation_args(options, &PiOptions::new(), &resume(id)).map_err(|e| e.to_string())?;
            Ok::<_, String>(PathBuf::from(&args[1]))
        };

        std::fs::write(agent.join("settings.json"), r#"{"sessionDir": "~/pi-sessions"}"#).unwrap();
        session_in(&home.join("pi-sessions"), "global-1");
        assert!(found(&options, "global-1").unwrap().starts_with(home.join("pi-sessions")));

        std::fs::write(cwd.join(".pi/settings.json"), r#"{"sessionDir": "local-sessions"}"#).unwrap();
        session_in(&cwd.join("local-sessions"), "project-1");
        assert!(found(&options, "project-1").unwrap().starts_with(cwd.join("local-sessions")));
        // Written before the project's setting: still found.
        assert!(found(&options, "global-1").is_ok());

        let from_env = options.clone().env("PI_CODING_AGENT_SESSION_DIR", root.join("env").to_string_lossy());
        session_in(&root.join("env"), "env-1");
        assert!(found(&from_env, "env-1").unwrap().starts_with(root.join("env")));

        let missing = found(&options, "nowhere-1").unwrap_err();
        assert!(missing.contains("no session `nowhere-1`") && missing.contains("local-sessions"), "{missing}");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn unknown_models_of_a_configured_provider_are_refused_before_spawning() {
        let dir = std::env::temp_dir().join(format!("pi-models-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("models.json"), r#"{"providers":{"fake":{"models":[{"id":"fake-model"}]}}}"#).unwrap();
        let options = SessionOptions::new("/work").env("PI_CODING_AGENT_DIR", dir.to_string_lossy());
        assert!(check_model(&options, "fake/fake-model").is_ok());
        assert!(check_model(&options, "fake/fake-model:high").is_ok());
        assert!(matches!(check_model(&options, "fake/nope"), Err(Error::InvalidOption { option: "model", .. })));
        assert!(check_model(&options, "bad model").is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
