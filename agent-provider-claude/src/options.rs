//! Claude-specific session and turn options, read from the typed provider-option slots.

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;

use agent_core::config::provider_options_from_json;
use agent_core::{ProviderId, ProviderOptions, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The program run when [`ClaudeOptions::binary`] is not set: `claude`, looked up on `PATH`.
pub const DEFAULT_PROGRAM: &str = "claude";

/// Longest stdout line the provider accepts by default; longer lines are dropped with a
/// `warning` event.
pub const DEFAULT_MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// Claude Code's permission modes (`--permission-mode`, `set_permission_mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub enum PermissionMode {
    /// Ask for anything not known to be safe (`default`).
    Default,
    /// Allow file edits in the working directories without asking (`acceptEdits`).
    AcceptEdits,
    /// Plan only, no changes (`plan`).
    Plan,
    /// Never ask: what is not pre-approved is denied (`dontAsk`).
    DontAsk,
    /// Let the CLI's classifier decide (`auto`).
    Auto,
    /// Run everything without asking (`bypassPermissions`); needs
    /// [`ClaudeOptions::allow_dangerously_skip_permissions`].
    BypassPermissions,
}

impl PermissionMode {
    /// Claude Code's name of the mode.
    pub fn as_str(self) -> &'static str {
        match self {
            PermissionMode::Default => "default",
            PermissionMode::AcceptEdits => "acceptEdits",
            PermissionMode::Plan => "plan",
            PermissionMode::DontAsk => "dontAsk",
            PermissionMode::Auto => "auto",
            PermissionMode::BypassPermissions => "bypassPermissions",
        }
    }
}

/// Claude Code options of one session. Set with
/// [`SessionOptions::provider_option`](agent_core::SessionOptions::provider_option), or change
/// some fields with
/// [`SessionOptions::update_provider_option`](agent_core::SessionOptions::update_provider_option).
///
/// In a [`SessionConfig`](agent_core::SessionConfig), `provider_options` holds them as JSON,
/// merged into those already set (fields given replace, fields left out keep their value);
/// unknown fields are refused:
///
/// ```json
/// {
///     "binary": "/opt/claude/bin/claude",
///     "permission_mode": "acceptEdits",
///     "allowed_tools": ["Read", "Bash(git status:*)"],
///     "disallowed_tools": ["WebFetch"],
///     "tools": ["Bash", "Read", "Edit"],
///     "append_system_prompt": "Prefer small diffs.",
///     "max_turns": 20,
///     "include_partial_messages": true,
///     "setting_sources": ["project"],
///     "add_dirs": ["/srv/shared"],
///     "allow_dangerously_skip_permissions": false,
///     "extra_args": [],
///     "max_line_bytes": 16777216
/// }
/// ```
#[derive(Clone, PartialEq)]
#[non_exhaustive]
pub struct ClaudeOptions {
    /// The `claude` executable: an absolute path or a bare name looked up on `PATH`. Default
    /// [`DEFAULT_PROGRAM`]. The npm package's native binary is
    /// `node_modules/@anthropic-ai/claude-code-linux-x64/claude` (spawned directly, no Node).
    pub binary: Option<PathBuf>,
    /// `--permission-mode`; it wins over `SessionOptions::approval_policy`.
    pub permission_mode: Option<PermissionMode>,
    /// The explicit opt-in to `bypassPermissions` and to `--dangerously-…` flags in
    /// [`ClaudeOptions::extra_args`]; without it they are refused at `start_session`.
    pub allow_dangerously_skip_permissions: bool,
    /// `--allowedTools`: rules allowed without asking (`Read`, `Bash(git status:*)`).
    pub allowed_tools: Vec<String>,
    /// `--disallowedTools`: rules always denied.
    pub disallowed_tools: Vec<String>,
    /// `--tools`: the built-in tools available (`None`: the CLI's default set).
    pub tools: Option<Vec<String>>,
    /// `--append-system-prompt`: text added to Claude Code's own system prompt (while
    /// `SessionOptions::system_prompt` replaces it).
    pub append_system_prompt: Option<String>,
    /// `--max-turns`.
    pub max_turns: Option<u32>,
    /// `--include-partial-messages` (default on): stream `message_delta`s.
    pub include_partial_messages: bool,
    /// `--setting-sources` (`user`, `project`, `local`); `None`: the CLI's default.
    pub setting_sources: Option<Vec<String>>,
    /// `--add-dir`: more directories the tools may use.
    pub add_dirs: Vec<PathBuf>,
    /// More command-line arguments, after the provider's own.
    pub extra_args: Vec<String>,
    /// Longest stdout line accepted; default [`DEFAULT_MAX_LINE_BYTES`].
    pub max_line_bytes: usize,
}

impl Default for ClaudeOptions {
    fn default() -> Self {
        ClaudeOptions {
            binary: None,
            permission_mode: None,
            allow_dangerously_skip_permissions: false,
            allowed_tools: Vec::new(),
            disallowed_tools: Vec::new(),
            tools: None,
            append_system_prompt: None,
            max_turns: None,
            include_partial_messages: true,
            setting_sources: None,
            add_dirs: Vec::new(),
            extra_args: Vec::new(),
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
        }
    }
}

impl ClaudeOptions {
    /// Default options: `claude` on `PATH`.
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs this executable.
    pub fn binary(mut self, path: impl Into<PathBuf>) -> Self {
        self.binary = Some(path.into());
        self
    }

    /// Sets the permission mode.
    pub fn permission_mode(mut self, mode: PermissionMode) -> Self {
        self.permission_mode = Some(mode);
        self
    }

    /// Opts into `bypassPermissions` and `--dangerously-…` flags.
    pub fn allow_dangerously_skip_permissions(mut self, allow: bool) -> Self {
        self.allow_dangerously_skip_permissions = allow;
        self
    }

    /// Adds an allowed tool rule.
    pub fn allowed_tool(mut self, rule: impl Into<String>) -> Self {
        self.allowed_tools.push(rule.into());
        self
    }

    /// Adds a disallowed tool rule.
    pub fn disallowed_tool(mut self, rule: impl Into<String>) -> Self {
        self.disallowed_tools.push(rule.into());
        self
    }

    /// Sets the available built-in tools.
    pub fn tools<I, S>(mut self, tools: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.tools = Some(tools.into_iter().map(Into::into).collect());
        self
    }

    /// Sets the text appended to the system prompt.
    pub fn append_system_prompt(mut self, text: impl Into<String>) -> Self {
        self.append_system_prompt = Some(text.into());
        self
    }

    /// Sets `--max-turns`.
    pub fn max_turns(mut self, turns: u32) -> Self {
        self.max_turns = Some(turns);
        self
    }

    /// Streams partial messages (deltas) or not.
    pub fn include_partial_messages(mut self, enabled: bool) -> Self {
        self.include_partial_messages = enabled;
        self
    }

    /// Sets `--setting-sources`.
    pub fn setting_sources<I, S>(mut self, sources: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.setting_sources = Some(sources.into_iter().map(Into::into).collect());
        self
    }

    /// Adds an `--add-dir`.
    pub fn add_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.add_dirs.push(dir.into());
        self
    }

    /// Adds a command-line argument.
    pub fn extra_arg(mut self, arg: impl Into<String>) -> Self {
        self.extra_args.push(arg.into());
        self
    }

    /// Sets the longest accepted stdout line.
    pub fn max_line_bytes(mut self, bytes: usize) -> Self {
        self.max_line_bytes = bytes;
        self
    }

    /// The program to spawn.
    pub(crate) fn program(&self) -> OsString {
        self.binary.as_ref().map_or_else(|| OsString::from(DEFAULT_PROGRAM), |p| p.clone().into_os_string())
    }
}

impl fmt::Debug for ClaudeOptions {
    // Every field is named (the destructuring fails to compile when one is added), so a new one
    // is a decision. Extra arguments can carry tokens: only their count is shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ClaudeOptions {
            binary,
            permission_mode,
            allow_dangerously_skip_permissions,
            allowed_tools,
            disallowed_tools,
            tools,
            append_system_prompt,
            max_turns,
            include_partial_messages,
            setting_sources,
            add_dirs,
            extra_args,
            max_line_bytes,
        } = self;
        f.debug_struct("ClaudeOptions")
            .field("binary", binary)
            .field("permission_mode", permission_mode)
            .field("allow_dangerously_skip_permissions", allow_dangerously_skip_permissions)
            .field("allowed_tools", allowed_tools)
            .field("disallowed_tools", disallowed_tools)
            .field("tools", tools)
            .field("append_system_prompt", &append_system_prompt.as_ref().map(String::len))
            .field("max_turns", max_turns)
            .field("include_partial_messages", include_partial_messages)
            .field("setting_sources", setting_sources)
            .field("add_dirs", add_dirs)
            .field("extra_args", &extra_args.len())
            .field("max_line_bytes", max_line_bytes)
            .finish()
    }
}

/// Claude options of one turn. Set with
/// [`TurnOptions::provider_option`](agent_core::TurnOptions::provider_option). The model of a
/// turn is the core `TurnOptions::model`.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct ClaudeTurnOptions {
    /// The permission mode of this turn (`set_permission_mode` before it); the next turn
    /// without one runs with the session's mode again.
    pub permission_mode: Option<PermissionMode>,
}

impl ClaudeTurnOptions {
    /// No overrides.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets this turn's permission mode.
    pub fn permission_mode(mut self, mode: PermissionMode) -> Self {
        self.permission_mode = Some(mode);
        self
    }
}

/// The JSON form of [`ClaudeOptions`]: every field optional, so only the fields given change.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ClaudeOptionsJson {
    binary: Option<PathBuf>,
    permission_mode: Option<PermissionMode>,
    allow_dangerously_skip_permissions: Option<bool>,
    allowed_tools: Option<Vec<String>>,
    disallowed_tools: Option<Vec<String>>,
    tools: Option<Vec<String>>,
    append_system_prompt: Option<String>,
    max_turns: Option<u32>,
    include_partial_messages: Option<bool>,
    setting_sources: Option<Vec<String>>,
    add_dirs: Option<Vec<PathBuf>>,
    extra_args: Option<Vec<String>>,
    max_line_bytes: Option<usize>,
}

/// Reads Claude options from a config's `provider_options` and merges them into `into`; on
/// error `into` is unchanged. `null` and `{}` change nothing.
pub(crate) fn merge_json(provider: &ProviderId, options: &Value, into: &mut ProviderOptions) -> Result<()> {
    if options.is_null() {
        return Ok(());
    }
    let ClaudeOptionsJson {
        binary,
        permission_mode,
        allow_dangerously_skip_permissions,
        allowed_tools,
        disallowed_tools,
        tools,
        append_system_prompt,
        max_turns,
        include_partial_messages,
        setting_sources,
        add_dirs,
        extra_args,
        max_line_bytes,
    } = provider_options_from_json(provider, options)?;
    into.update(|claude: &mut ClaudeOptions| {
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
        set_some(&mut claude.binary, binary);
        set_some(&mut claude.permission_mode, permission_mode);
        set(&mut claude.allow_dangerously_skip_permissions, allow_dangerously_skip_permissions);
        set(&mut claude.allowed_tools, allowed_tools);
        set(&mut claude.disallowed_tools, disallowed_tools);
        set_some(&mut claude.tools, tools);
        set_some(&mut claude.append_system_prompt, append_system_prompt);
        set_some(&mut claude.max_turns, max_turns);
        set(&mut claude.include_partial_messages, include_partial_messages);
        set_some(&mut claude.setting_sources, setting_sources);
        set(&mut claude.add_dirs, add_dirs);
        set(&mut claude.extra_args, extra_args);
        set(&mut claude.max_line_bytes, max_line_bytes);
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn merged(json: Value) -> Result<ClaudeOptions> {
        let mut options = ProviderOptions::default();
        options.insert(ClaudeOptions::new().binary("/opt/claude").allowed_tool("Read"));
        merge_json(&ProviderId::new("claude"), &json, &mut options)?;
        Ok(options.get::<ClaudeOptions>().cloned().unwrap_or_default())
    }

    #[test]
    fn json_options_merge_into_those_set_before() {
        let claude = merged(json!({"permission_mode": "acceptEdits", "max_turns": 3, "tools": ["Bash"]})).unwrap();
        assert_eq!(claude.binary, Some(PathBuf::from("/opt/claude")), "kept");
        assert_eq!(claude.allowed_tools, ["Read"], "kept");
        assert_eq!(claude.permission_mode, Some(PermissionMode::AcceptEdits));
        assert_eq!(claude.max_turns, Some(3));
        assert_eq!(claude.tools, Some(vec!["Bash".to_owned()]));
        assert_eq!(merged(json!({})).unwrap(), ClaudeOptions::new().binary("/opt/claude").allowed_tool("Read"));
    }

    #[test]
    fn bad_json_options_are_refused_by_path() {
        for (json, starts) in [
            (json!({"binaryy": "/x"}), "provider_options.binaryy: unknown field `binaryy`"),
            (
                json!({"permission_mode": "yolo"}),
                "provider_options.permission_mode: unknown value, expected one of `default`",
            ),
            (json!({"questions": true}), "provider_options.questions: unknown field `questions`"),
        ] {
            match merged(json) {
                Err(agent_core::Error::InvalidConfig(message)) => assert!(message.starts_with(starts), "{message}"),
                other => panic!("expected InvalidConfig, got {other:?}"),
            }
        }
    }

    #[test]
    fn debug_hides_extra_arguments() {
        let text = format!("{:?}", ClaudeOptions::new().extra_arg("--token=sekrit"));
        assert!(!text.contains("sekrit"), "{text}");
    }
}
