//! [`PresetProvider`]: one preset as a provider — option checks, the auth guard, the version
//! probe, and opening a session on a keyed conversation.

use std::ffi::OsString;
use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use agent_core::exec::{Command, EnvSpec, Exec, ExecError};
use agent_core::provider::{OpenContext, OpenConversation, Opened, require_capabilities};
use agent_core::{
    Capabilities, Capability, DynProvider, Error, Provider, ProviderId, ProviderOptions, Result, SessionOptions,
    Support,
};
use agent_provider_kit::auth::{AuthGuard, EnvRules};
use agent_provider_kit::framing::stderr_note;
use agent_provider_kit::probe::{self, FileStamp, ProbeCache, ProbeError, ProbeLimits};
use agent_provider_kit::secrets::Secrets;
use agent_provider_kit::version::Version;
use async_trait::async_trait;
use serde_json::Value;

use crate::allow::AllowList;
use crate::conversation::Conversations;
use crate::options::{Approvals, DEFAULT_APPROVAL_TIMEOUT, PresetOptions, merge_json};
use crate::preset::Preset;
use crate::prompt_file::PromptFile;
use crate::session::{PresetSession, RunConfig};
use crate::template::{Placeholder, Values};
use crate::turn::ApprovalMeta;

/// The prefix of every preset provider's ID: `preset:<preset id>`.
pub const PROVIDER_PREFIX: &str = "preset:";

/// Longest `--version` wait, within the startup deadline.
const VERSION_TIMEOUT: Duration = Duration::from_secs(10);

/// The guard every preset applies under `AuthMode::Subscription`: the kit's common rules (any
/// `*_API_KEY`, `*_BASE_URL`, cloud selectors, …); a preset adds its CLI's own names
/// (`auth_env`).
const GUARD: AuthGuard = AuthGuard::new("the preset's CLI", &[EnvRules::COMMON], &[]);

/// The provider ID of preset `id`.
pub(crate) fn provider_id(id: &str) -> String {
    format!("{PROVIDER_PREFIX}{id}")
}

/// One preset as a provider, registered as `preset:<id>`. Made by
/// [`PresetCatalog::provider`](crate::PresetCatalog::provider).
///
/// Every turn runs the preset's CLI once; turns of one conversation key (by default the
/// session) continue one CLI conversation and run one at a time. See the crate docs.
pub struct PresetProvider {
    id: ProviderId,
    preset: Arc<Preset>,
    allow: Arc<AllowList>,
    conversations: Arc<Conversations>,
    versions: ProbeCache<Version>,
}

impl PresetProvider {
    pub(crate) fn new(preset: Arc<Preset>, allow: Arc<AllowList>) -> Self {
        PresetProvider {
            id: ProviderId::new(provider_id(&preset.id)),
            preset,
            allow,
            conversations: Arc::new(Conversations::default()),
            versions: ProbeCache::new(),
        }
    }

    /// The preset this provider runs.
    pub fn preset(&self) -> &Preset {
        &self.preset
    }

    fn unavailable(&self, reason: impl Into<String>) -> Error {
        Error::ProviderUnavailable { provider: self.id.clone(), reason: reason.into() }
    }

    fn capabilities_for(&self, preset_options: &PresetOptions) -> Capabilities {
        let caps = self.preset.capabilities;
        if preset_options.approvals == Approvals::Ask {
            caps
        } else {
            caps.with(Capability::Approvals, Support::Unsupported).with(Capability::Questions, Support::Unsupported)
        }
    }

    /// Option checks that need no exec.
    fn check(&self, options: &SessionOptions, preset_options: &PresetOptions) -> Result<()> {
        let invalid = |option: &'static str, reason: String| Error::InvalidOption { option, reason };
        if options.cwd.is_none() {
            return Err(invalid("cwd", "a preset session runs its CLI in a working directory; set one".into()));
        }
        // They go on the CLI's command line, which cannot carry a NUL.
        for (option, value) in [("model", &options.model), ("system_prompt", &options.system_prompt)] {
            if value.as_deref().is_some_and(|value| value.contains('\0')) {
                return Err(invalid(option, "holds a NUL character, which no command-line argument can carry".into()));
            }
        }
        if preset_options.args.iter().chain(&preset_options.binary_args).any(|arg| arg.contains('\0')) {
            return Err(invalid(
                "provider_options.args",
                "an argument holds a NUL character, which no command-line argument can carry".into(),
            ));
        }
        if let Some(binary) = &preset_options.binary
            && let Err(why) = self.allow.allows(binary)
        {
            return Err(invalid("provider_options.binary", format!("{why}; add it to the preset catalog's AllowList")));
        }
        if !preset_options.args.is_empty() && !self.preset.template.takes_extra_args() {
            return Err(invalid(
                "provider_options.args",
                format!(
                    "preset `{}` takes no extra arguments (its args have no `{{\"insert\": \"extra_args\"}}`)",
                    self.preset.id
                ),
            ));
        }
        // Not among the binary's arguments: those are an interpreter's (`node -r …`).
        if let Some(arg) =
            preset_options.args.iter().find(|arg| self.preset.reserved_args.iter().any(|n| names_option(n, arg)))
        {
            return Err(invalid(
                "provider_options.args",
                format!(
                    "`{}` is reserved by preset `{}` (`reserved_args`): the preset decides which conversation a turn \
                     continues and what output the CLI writes",
                    arg.split('=').next().unwrap_or_default().escape_debug(),
                    self.preset.id
                ),
            ));
        }
        if let Some(word) = preset_options.args.iter().find(|arg| self.preset.reserved_words.contains(arg)) {
            return Err(invalid(
                "provider_options.args",
                format!(
                    "`{}` is reserved by preset `{}` (`reserved_words`): as an argument of its own it makes the CLI \
                     run another command or conversation than the preset's turn",
                    word.escape_debug(),
                    self.preset.id
                ),
            ));
        }
        // A flag the preset passes a value of this session with, given again: the CLI would
        // take one of the two.
        let passed = |value: Placeholder| match value {
            Placeholder::Model => options.model.is_some(),
            Placeholder::SystemPrompt | Placeholder::SystemPromptFile => options.system_prompt.is_some(),
            Placeholder::MaxTurns => preset_options.max_turns.is_some(),
            Placeholder::Prompt | Placeholder::SessionId | Placeholder::Cwd => true,
        };
        if let Some(problem) = repeated_flag(&self.preset, &preset_options.args, passed) {
            return Err(invalid("provider_options.args", problem));
        }
        if preset_options.max_turns.is_some() && !self.preset.template.uses(Placeholder::MaxTurns) {
            return Err(invalid(
                "provider_options.max_turns",
                format!("preset `{}` does not pass `{{max_turns}}`", self.preset.id),
            ));
        }
        if preset_options.max_turns == Some(0) {
            return Err(invalid("provider_options.max_turns", "must be at least 1".into()));
        }
        if preset_options.approvals == Approvals::Ask && self.preset.approvals.is_none() {
            return Err(Error::Unsupported { provider: self.id.clone(), capability: Capability::Approvals });
        }
        if preset_options.key.as_deref().is_some_and(|k| k.trim().is_empty()) {
            return Err(invalid("provider_options.key", "a conversation key must not be empty".into()));
        }
        if preset_options.approval_timeout.is_zero() {
            return Err(invalid("provider_options.approval_timeout", "must be longer than zero".into()));
        }
        // The session's own values on the command line (a turn's prompt and model are checked
        // with the turn): none may pass as an option, or be longer than an argument can be.
        let values = Values {
            model: options.model.as_deref(),
            system_prompt: options.system_prompt.as_deref(),
            approvals: preset_options.approvals == Approvals::Ask,
            ..Values::default()
        };
        if let Some((option, reason)) = self.preset.template.argument_problem(&values) {
            return Err(invalid(option, reason));
        }
        if self.preset.approvals.is_none() {
            // Settings of approvals a preset without an approval conversation never asks.
            let set = [
                ("provider_options.approval_risk", preset_options.approval_risk.is_some()),
                ("provider_options.approval_audience", preset_options.approval_audience.is_some()),
                ("provider_options.approval_timeout", preset_options.approval_timeout != DEFAULT_APPROVAL_TIMEOUT),
            ];
            if let Some((option, _)) = set.into_iter().find(|(_, set)| *set) {
                return Err(invalid(option, format!("preset `{}` has no approval conversation", self.preset.id)));
            }
        }
        self.check_auth(options, None)
    }

    /// The auth guard under `AuthMode::Subscription`: the session's environment (the kit's
    /// rules and the preset's `auth_env`), the preset's own `env.set`, and the exec.
    fn check_auth(&self, options: &SessionOptions, exec: Option<&dyn Exec>) -> Result<()> {
        if !AuthGuard::applies(options) {
            return Ok(());
        }
        GUARD.check(options, exec, std::iter::empty())?;
        let own = |name: &str| self.preset.lists_auth_env(name);
        if let Some(name) = options.env.set.keys().find(|name| own(name)) {
            return Err(GUARD.refusal(format!(
                "the session environment variable `{}` (preset `{}` lists it in `auth_env`)",
                name.escape_debug(),
                self.preset.id
            )));
        }
        let preset_options = PresetOptions::of(options);
        let refused_arg = |arg: &str| self.preset.auth_args.iter().any(|name| names_option(name, arg));
        // The CLI reads the binary's arguments as its command line too.
        let mut every_arg = preset_options.binary_args.iter().chain(&preset_options.args);
        if let Some(arg) = every_arg.find(|arg| refused_arg(arg)) {
            return Err(GUARD.refusal(format!(
                "the extra argument `{}` (preset `{}` lists it in `auth_args`: it can select another model provider, \
                 endpoint or login)",
                arg.split('=').next().unwrap_or_default().escape_debug(),
                self.preset.id
            )));
        }
        if let Some(name) = self.preset.env_set.keys().find(|name| own(name) || GUARD.refuses_env(name)) {
            return Err(GUARD.refusal(format!(
                "preset `{}`'s `env.set.{name}` (an API key, endpoint or cloud-provider setting)",
                self.preset.id
            )));
        }
        Ok(())
    }

    /// The environment of the preset's processes: the preset's, the session's over it, and
    /// under `Subscription` the refused names removed.
    fn env_spec(&self, options: &SessionOptions) -> EnvSpec {
        let mut spec = EnvSpec::default();
        spec.set = self.preset.env_set.iter().map(|(k, v)| (k.into(), v.into())).collect();
        spec.set.retain(|(k, _)| !options.env.set.contains_key(&*k.to_string_lossy()));
        spec.set.extend(options.env.set.iter().map(|(k, v)| (OsString::from(k), OsString::from(v))));
        // The session wins: the preset does not remove a name the session sets.
        let preset_unset = self.preset.env_unset.iter().filter(|name| !options.env.set.contains_key(*name));
        spec.unset = preset_unset.map(Into::into).collect();
        spec.unset.extend(options.env.unset.iter().map(Into::into));
        let own = self.preset.auth_env_names();
        let own: Vec<&str> = own.iter().map(String::as_str).collect();
        spec.unset.extend(GUARD.scrubbed(options, &own));
        spec
    }

    /// Runs the preset's version probe (once per exec, program and program file). A preset
    /// without one has its program looked up instead, where the exec runs on this host, so a
    /// CLI that is missing or cannot run (a directory, a file without an execute bit) fails the
    /// session's start rather than its first turn.
    async fn check_version(&self, ctx: &OpenContext, run: &RunConfig, deadline: Duration) -> Result<()> {
        let Some(check) = &self.preset.version else {
            if !ctx.exec.is_local() {
                return Ok(());
            }
            let mut command = Command::new(run.program.clone());
            command.env = run.env.clone();
            command.cwd = Some(run.cwd.clone());
            let program = run.program.clone();
            let searched_path = Path::new(&run.program).components().count() == 1;
            let error = match FileStamp::of_command(ctx.exec.as_ref(), &command) {
                None => ExecError::ProgramNotFound { program, searched_path },
                Some(stamp) => match stamp.problem() {
                    None => return Ok(()),
                    Some(problem) => ExecError::ProgramNotExecutable {
                        program,
                        path: stamp.path().to_owned(),
                        searched_path,
                        problem: problem.clone(),
                    },
                },
            };
            return Err(self.spawn_error(&error, &run.program));
        };
        let mut command = Command::new(run.program.clone())
            .args(run.leading.iter().chain(&check.args))
            .session(ctx.session_id.clone());
        command.env = run.env.clone();
        command.cwd = Some(run.cwd.clone());
        let stamp = FileStamp::of_command(ctx.exec.as_ref(), &command);
        // The program with its leading arguments: `node` runs many CLIs.
        let key = run.leading.iter().fold(run.program.clone(), |mut key, arg| {
            key.push("\0");
            key.push(arg);
            key
        });
        if self.versions.get(&ctx.exec, &key, stamp.as_ref()).is_some() {
            return Ok(());
        }
        let shown = format!("{} {}", run.program.to_string_lossy(), check.args.join(" "));
        let limits = ProbeLimits::new(deadline.min(VERSION_TIMEOUT));
        let output = match probe::run(ctx.exec.as_ref(), command, limits).await {
            Ok(output) => output,
            Err(ProbeError::Spawn(error)) => return Err(self.spawn_error(&error, &run.program)),
            Err(ProbeError::TimedOut { stderr_tail, .. }) => {
                return Err(self.unavailable(format!(
                    "`{shown}` did not answer within {:?}{}",
                    limits.timeout,
                    stderr_note(stderr_tail.as_deref())
                )));
            }
            Err(other) => return Err(self.unavailable(format!("`{shown}` {other}"))),
        };
        let printed = format!("{}\n{}", output.stdout, output.stderr_tail.as_deref().unwrap_or_default());
        let what = check.contains.as_deref().map_or_else(|| "its version".to_owned(), |c| format!("`{c}`"));
        let version = Version::from_cli_output(&output.stdout)
            .or_else(|| output.stderr_tail.as_deref().and_then(Version::from_cli_output));
        let version = match version {
            Some(version)
                if output.status.success() && check.contains.as_deref().is_none_or(|c| printed.contains(c)) =>
            {
                version
            }
            _ => {
                return Err(self.unavailable(format!(
                    "`{shown}` ({}) did not print {what}; is `{}` the CLI preset `{}` runs?{}",
                    output.status,
                    run.program.to_string_lossy(),
                    self.preset.id,
                    stderr_note(output.stderr_tail.as_deref())
                )));
            }
        };
        if let Some(min) = check.min
            && version < min
        {
            return Err(self.unavailable(format!(
                "{} {version} is older than {min}, the oldest preset `{}` runs; upgrade it or set provider_options.binary",
                run.program.to_string_lossy(),
                self.preset.id
            )));
        }
        self.versions.insert(&ctx.exec, &key, stamp, version);
        Ok(())
    }

    /// A spawn that failed: the CLI is missing or may not run.
    pub(crate) fn spawn_error(&self, error: &ExecError, program: &OsString) -> Error {
        spawn_error(&self.id, &self.preset.id, error, program)
    }
}

/// A spawn that failed, as a definite error: nothing runs.
pub(crate) fn spawn_error(provider: &ProviderId, preset: &str, error: &ExecError, program: &OsString) -> Error {
    let program = program.to_string_lossy();
    let reason = match error {
        ExecError::ProgramNotFound { .. } => {
            format!("`{program}` was not found; install the CLI preset `{preset}` runs, or set provider_options.binary")
        }
        ExecError::ProgramNotExecutable { path, problem, .. } => {
            format!("`{}` {problem}; set provider_options.binary to the CLI preset `{preset}` runs", path.display())
        }
        ExecError::NotAllowed { resolved } => {
            format!("{} is not on the exec's executable allow-list", resolved.display())
        }
        // The CLI is there; its command line is not.
        ExecError::Spawn { source, .. } if source.kind() == std::io::ErrorKind::ArgumentListTooLong => format!(
            "the command line of `{program}` is longer than the system takes ({source}); a prompt this long needs \
             a preset that sends it on stdin (`\"prompt\": \"stdin\"`)"
        ),
        other => format!("`{program}` could not be started: {other}"),
    };
    Error::ProviderUnavailable { provider: provider.clone(), reason }
}

impl fmt::Debug for PresetProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PresetProvider").field("id", &self.id).field("preset", &self.preset).finish_non_exhaustive()
    }
}

impl From<PresetProvider> for DynProvider {
    fn from(provider: PresetProvider) -> Self {
        Arc::new(provider)
    }
}

#[async_trait]
impl Provider for PresetProvider {
    fn id(&self) -> ProviderId {
        self.id.clone()
    }

    fn capabilities(&self, options: &SessionOptions) -> Capabilities {
        self.capabilities_for(&PresetOptions::of(options))
    }

    fn options_from_json(&self, options: &Value, into: &mut ProviderOptions) -> Result<()> {
        merge_json(&self.id, options, into)
    }

    fn validate(&self, options: &SessionOptions) -> Result<()> {
        let preset_options = PresetOptions::of(options);
        require_capabilities(&self.id, &self.capabilities_for(&preset_options), options)?;
        self.check(options, &preset_options)
    }

    async fn open(&self, ctx: OpenContext) -> Result<Opened> {
        let options = Arc::clone(&ctx.options);
        let preset_options = PresetOptions::of(&options);
        let caps = self.capabilities_for(&preset_options);
        require_capabilities(&self.id, &caps, &options)?;
        self.check(&options, &preset_options)?;
        self.check_auth(&options, Some(ctx.exec.as_ref()))?;
        let prompt_file = options.system_prompt.is_some() && self.preset.template.uses(Placeholder::SystemPromptFile);
        if prompt_file && !ctx.exec.is_local() {
            // The file is written where the harness runs; a CLI on another host would be given
            // the path of a file it cannot read, or of another file of its own.
            return Err(Error::InvalidOption {
                option: "system_prompt",
                reason: format!(
                    "preset `{}` passes the system prompt in a file (`{{system_prompt_file}}`), written on this \
                     host; the session's exec runs its processes elsewhere, where the file is not",
                    self.preset.id
                ),
            });
        }
        let run = RunConfig {
            program: preset_options.binary.clone().map_or_else(|| OsString::from(&self.preset.program), Into::into),
            leading: preset_options.binary_args.clone(),
            extra: preset_options.args.clone(),
            env: self.env_spec(&options),
            cwd: options.cwd.clone().expect("checked"),
            model: options.model.clone(),
            system_prompt: options.system_prompt.clone(),
            system_prompt_file: match &options.system_prompt {
                Some(text) if prompt_file => {
                    Some(Arc::new(PromptFile::create(&std::env::temp_dir(), text).map_err(|e| {
                        Error::ProviderUnavailable {
                            provider: self.id.clone(),
                            reason: format!("cannot write the system prompt's file: {e}"),
                        }
                    })?))
                }
                _ => None,
            },
            max_turns: preset_options.max_turns.map(|n| n.to_string()),
            approvals: (preset_options.approvals == Approvals::Ask).then(|| ApprovalMeta {
                risk: preset_options.approval_risk.clone(),
                audience: preset_options.approval_audience.clone(),
                timeout: preset_options.approval_timeout,
            }),
            on_busy: preset_options.on_busy,
            // The preset's own `env.set` values are as secret as the session's.
            secrets: Secrets::of_session(&options, |name| GUARD.refuses_env(name) || self.preset.lists_auth_env(name))
                .and_env(&self.preset.env_set),
        };
        self.check_version(&ctx, &run, options.startup_timeout.saturating_sub(options.startup_timeout / 10)).await?;
        let key = preset_options.key.clone().unwrap_or_else(|| ctx.session_id.to_string());
        let conversation = self.conversations.get(&key);
        match &ctx.conversation {
            OpenConversation::Resume { provider_session_id } => {
                let mut state = conversation.state();
                // The map and this open hold two references; any more are live sessions of the
                // key, whose next turns would silently continue the conversation named here.
                // That holds before they have a conversation too: their first turn would continue
                // this one.
                let shared = Arc::strong_count(&conversation) > 2;
                if shared && state.session_id.as_ref() != Some(provider_session_id) {
                    let current = match &state.session_id {
                        Some(current) => format!("continues conversation `{current}`"),
                        None => "starts a new conversation".to_owned(),
                    };
                    return Err(Error::InvalidOption {
                        option: "conversation",
                        reason: format!(
                            "key `{key}` {current} for its other live sessions; resume `{provider_session_id}` under \
                             another key"
                        ),
                    });
                }
                state.session_id = Some(provider_session_id.clone());
            }
            // A session keyed by its own ID starts its own conversation: an earlier session of
            // that ID (closed, and replaced or run without a store) may have left one under the
            // key, which only `resume_session` continues. A key set on purpose is shared on
            // purpose, and its conversation goes on.
            OpenConversation::New if preset_options.key.is_none() => *conversation.state() = Default::default(),
            OpenConversation::New => {}
            _ => return Err(Error::Unsupported { provider: self.id.clone(), capability: Capability::Fork }),
        }
        let known = conversation.state().session_id.clone();
        let credentials = run.secrets.clone();
        let session = PresetSession::new(
            self.id.clone(),
            Arc::clone(&self.preset),
            run,
            ctx.exec.clone(),
            ctx.sink.clone(),
            ctx.session_id.clone(),
            conversation,
            options.provider_command_timeout.saturating_sub(options.provider_command_timeout / 10),
        );
        let opened = Opened::new(Arc::new(session)).capabilities(caps).credentials(credentials.credentials());
        Ok(match known {
            Some(id) => opened.provider_session_id(id),
            None => opened,
        })
    }
}

/// What is wrong when `args` (a caller's extra arguments) hold a flag `preset` passes a value
/// with (or one of its `arg_aliases`), for a value `passed` says it passes.
pub(crate) fn repeated_flag(preset: &Preset, args: &[String], passed: impl Fn(Placeholder) -> bool) -> Option<String> {
    let flags = preset.template.value_flags();
    let aliases = preset.arg_aliases.iter().filter_map(|(alias, flag)| {
        let (_, value) = flags.iter().find(|(name, _)| name == flag)?;
        Some((alias.as_str(), flag.as_str(), *value))
    });
    // (the name given, the template's flag, the value it passes)
    let names: Vec<(&str, &str, Placeholder)> =
        flags.iter().map(|(flag, value)| (flag.as_str(), flag.as_str(), *value)).chain(aliases).collect();
    // As given or with `=value`: a one-letter flag with its value attached (`-mo3`) is not
    // told apart from a flag of one dash that begins with that letter (Go's `-max-tokens`).
    let (name, flag, value) = args
        .iter()
        .find_map(|arg| names.iter().copied().find(|(name, _, value)| passed(*value) && gives_option(name, arg)))?;
    let given = if name == flag { format!("`{name}`") } else { format!("`{name}` (`{flag}`)") };
    Some(format!(
        "{given} is in preset `{}`'s own command line, before `{{{}}}`: given here too, the CLI would get it twice \
         (the session's options set what the preset passes)",
        preset.id,
        value.name()
    ))
}

/// True when `arg` is the option `name` as given or as `name=value`.
fn gives_option(name: &str, arg: &str) -> bool {
    arg == name || arg.strip_prefix(name).is_some_and(|rest| rest.starts_with('='))
}

/// True when `arg` gives the option `name`: as is, as `name=value`, or, for a short option of
/// one letter (`-c`), with its value attached (`-cfoo`) or in a cluster of one-letter flags
/// (`-pc`, which commander and clap read as `-p -c`). A longer name after one dash (Go's
/// `-model`) is an option of its own: `-modelfile` is another one. For the names a preset
/// refuses (`auth_args`, `reserved_args`), where a false refusal is the cheaper mistake.
pub(crate) fn names_option(name: &str, arg: &str) -> bool {
    let letter = name.strip_prefix('-').filter(|l| l.len() == 1 && l != &"-");
    let single = arg.strip_prefix('-').filter(|rest| !rest.starts_with('-'));
    let in_cluster =
        |letter: &str, flags: &str| flags.bytes().all(|b| b.is_ascii_alphabetic()) && flags.contains(letter);
    gives_option(name, arg)
        || letter.zip(single).is_some_and(|(letter, flags)| flags.starts_with(letter) || in_cluster(letter, flags))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use agent_core::provider::OpenContext;
    use agent_core::{AuthMode, Error, Provider, SessionId, SessionOptions};

    use crate::{AllowList, PresetCatalog, PresetOptions};

    fn provider(id: &str) -> super::PresetProvider {
        let catalog = PresetCatalog::builder(AllowList::shipped()).load();
        catalog.provider(id).expect(id)
    }

    fn subscription(preset: PresetOptions) -> SessionOptions {
        SessionOptions::new(std::env::temp_dir()).auth(AuthMode::Subscription).provider_option(preset)
    }

    /// `{system_prompt_file}` names a file written on this host: a CLI that runs elsewhere would
    /// not find it, so such a session is refused before anything runs.
    #[tokio::test]
    async fn a_system_prompt_file_is_refused_for_an_exec_on_another_host() {
        let pi = provider("pi-print");
        let exec = Arc::new(agent_exec::scripted::ScriptedExec::new());
        let options = SessionOptions::new(std::env::temp_dir()).auth(AuthMode::Inherit).system_prompt("Be brief.");
        let (sink, _sent) = agent_provider_kit::testing::sink();
        let ctx = OpenContext::new(SessionId::generate(), Arc::new(options), exec.clone(), sink);
        let error = pi.open(ctx).await.expect_err("refused");
        assert!(
            matches!(&error, Error::InvalidOption { option: "system_prompt", reason }
                if reason.contains("{system_prompt_file}") && reason.contains("this host")),
            "{error:?}"
        );
        assert!(exec.spawned().is_empty(), "nothing ran");
    }

    #[test]
    fn auth_args_are_refused_among_the_binary_args_too() {
        let codex = provider("codex-exec");
        for preset in [
            PresetOptions::new().args(["-c", "model_provider=\"evil\""]),
            PresetOptions::new().binary_arg("-c").binary_arg("model_providers.evil.base_url=\"http://127.0.0.1:9\""),
            PresetOptions::new().binary_arg("--profile=other"),
        ] {
            let error = codex.validate(&subscription(preset.clone())).unwrap_err().to_string();
            assert!(error.contains("auth_args") && !error.contains("127.0.0.1"), "{error}");
            assert!(codex.validate(&subscription(preset).auth(AuthMode::Inherit)).is_ok());
        }
        assert!(codex.validate(&subscription(PresetOptions::new().binary_arg("--skip-git-repo-check"))).is_ok());
    }

    #[test]
    fn approval_settings_are_refused_by_a_preset_that_asks_no_approvals() {
        let codex = provider("codex-exec");
        for (preset, option) in [
            (PresetOptions::new().approval_risk("high"), "provider_options.approval_risk"),
            (PresetOptions::new().approval_audience("ops"), "provider_options.approval_audience"),
            (PresetOptions::new().approval_timeout(Duration::from_secs(5)), "provider_options.approval_timeout"),
        ] {
            let error = codex.validate(&subscription(preset.clone())).unwrap_err();
            assert!(matches!(error, Error::InvalidOption { option: o, .. } if o == option), "{error:?}");
            // A preset with an approval conversation takes them.
            provider("claude-print").validate(&subscription(preset)).expect("claude-print asks approvals");
        }
    }

    #[test]
    fn max_turns_of_zero_is_refused() {
        let claude = provider("claude-print");
        let error = claude.validate(&subscription(PresetOptions::new().max_turns(0))).unwrap_err();
        assert!(matches!(error, Error::InvalidOption { option: "provider_options.max_turns", .. }), "{error:?}");
        claude.validate(&subscription(PresetOptions::new().max_turns(1))).expect("one turn is a limit");
    }

    #[test]
    fn pi_print_refuses_another_agent_directory_as_pi_does() {
        let pi = provider("pi-print");
        let options = subscription(PresetOptions::new()).env("PI_CODING_AGENT_DIR", "/tmp/other");
        let error = pi.validate(&options).unwrap_err().to_string();
        assert!(error.contains("PI_CODING_AGENT_DIR"), "{error}");
        assert!(pi.validate(&options.auth(AuthMode::Inherit)).is_ok());
    }

    /// The shipped presets refuse the flags that would pick another conversation or output
    /// than the one they read, in every auth mode, and codex's `-m` as `--model` when the
    /// session has a model.
    #[test]
    fn shipped_presets_refuse_their_reserved_flags_and_short_names() {
        let inherit = |preset: PresetOptions| subscription(preset).auth(AuthMode::Inherit);
        for (id, arg) in [
            ("claude-print", "-r"),
            ("claude-print", "--continue"),
            ("claude-print", "--session-id=x"),
            ("claude-print", "--output-format"),
            ("claude-print", "-pc"),
            ("claude-print", "-rabc"),
            ("pi-print", "--no-session"),
            ("pi-print", "-c"),
            ("pi-print", "--session"),
        ] {
            let error = provider(id).validate(&inherit(PresetOptions::new().args([arg]))).unwrap_err();
            assert!(matches!(error, Error::InvalidOption { option: "provider_options.args", .. }), "{id} {arg}");
            assert!(error.to_string().contains("`reserved_args`"), "{error}");
        }
        let codex = provider("codex-exec");
        for args in [["-m", "o3"], ["-m=o3", "--json"], ["--model=o3", "--json"]] {
            let options = inherit(PresetOptions::new().args(args));
            codex.validate(&options).expect("without a model of the session, the model of the arguments");
            let error = codex.validate(&options.model("gpt-5")).unwrap_err().to_string();
            assert!(error.contains("own command line, before `{model}`"), "{error}");
        }
        for (id, arg) in
            [("claude-print", "--append-system-prompt"), ("pi-print", "--session-dir"), ("codex-exec", "--models")]
        {
            provider(id).validate(&inherit(PresetOptions::new().args([arg, "x"]))).expect(arg);
        }
        // An interpreter's own arguments are not the CLI's: node's `-r` preloads a module.
        let node = PresetOptions::new().binary_arg("-r").binary_arg("source-map-support/register");
        provider("claude-print").validate(&inherit(node)).expect("node's -r");
        let error =
            provider("claude-print").validate(&inherit(PresetOptions::new().args(["--no-session-persistence"])));
        assert!(error.unwrap_err().to_string().contains("`reserved_args`"));
        // Codex's subcommands as arguments of their own: `codex exec resume <id>` would continue
        // another conversation. Within a word, or an option's value given with `=`, they pass;
        // as a value of its own (`-C fork`) the word is refused too (which flags take a value is
        // the CLI's to know).
        for args in [&["resume", "019a-other"][..], &["--json", "fork"], &["review"], &["help"], &["-C", "fork"]] {
            let error = codex.validate(&inherit(PresetOptions::new().args(args.iter().copied()))).unwrap_err();
            assert!(error.to_string().contains("`reserved_words`"), "{args:?}: {error}");
        }
        for args in [&["--sandbox=resume"][..], &["--profile-resume"]] {
            codex.validate(&inherit(PresetOptions::new().args(args.iter().copied()))).expect("not a word of its own");
        }
    }
}
