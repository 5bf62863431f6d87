//! A preset file, read and checked: [`Preset`].

use std::collections::BTreeMap;
use std::fmt;

use agent_core::{Capabilities, Capability, Support};
use agent_provider_kit::version::Version;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::allow::AllowList;
use crate::events::{EventRule, OtherLines};
use crate::matcher::{Framing, Source, When};
use crate::options::{DEFAULT_APPROVAL_TIMEOUT, OptionInfo};
use crate::template::{Condition, Placeholder, Template};

/// The version of the preset file format this crate reads (`"schema_version": 1`).
pub const SCHEMA_VERSION: u32 = 1;

/// The longest stdout line a preset reads by default; longer lines are dropped with a warning.
pub const DEFAULT_MAX_LINE_BYTES: usize = 32 * 1024 * 1024;

/// How the prompt reaches the CLI (without an approval conversation, which always sends it on
/// stdin as its first message).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PromptDelivery {
    /// As the `{prompt}` argument; stdin is closed at once.
    #[default]
    Argv,
    /// Written to stdin, which is then closed.
    Stdin,
}

/// The approval conversations a preset can declare.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ApprovalConversation {
    /// Claude Code's control protocol with `--permission-prompt-tool stdio` and
    /// `--input-format stream-json`: the prompt goes on stdin as a `user` line, each
    /// `can_use_tool` becomes a request, stdin closes after the result line.
    ClaudeControl,
}

/// Whose conversation files a preset's CLI keeps, when they are those of a CLI the harness
/// knows: its turns then take the checks that CLI's native provider makes (see the crate docs'
/// `conversation_files`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ConversationFiles {
    /// Claude Code's transcripts, `<config dir>/projects/<project>/<session ID>.jsonl`.
    Claude,
    /// Pi's session files, named by their session ID.
    Pi,
}

// ----- the file --------------------------------------------------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PresetFile {
    #[allow(dead_code)]
    schema_version: u32,
    id: String,
    #[serde(default)]
    description: Option<String>,
    program: String,
    args: Value,
    #[serde(default)]
    prompt: PromptDelivery,
    framing: Framing,
    #[serde(default)]
    max_line_bytes: Option<usize>,
    #[serde(default)]
    env: EnvFile,
    #[serde(default)]
    auth_env: Vec<String>,
    #[serde(default)]
    auth_args: Vec<String>,
    #[serde(default)]
    reserved_args: Vec<String>,
    #[serde(default)]
    reserved_words: Vec<String>,
    #[serde(default)]
    arg_aliases: BTreeMap<String, String>,
    #[serde(default)]
    version: Option<VersionFile>,
    #[serde(default)]
    success_exit_codes: Option<Vec<i32>>,
    matchers: MatchersFile,
    #[serde(default)]
    events: Vec<Value>,
    #[serde(default)]
    other_lines: OtherLines,
    #[serde(default)]
    capabilities: BTreeMap<String, Support>,
    #[serde(default)]
    approvals: Option<ApprovalsFile>,
    #[serde(default)]
    conversation_files: Option<ConversationFiles>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct EnvFile {
    #[serde(default)]
    set: BTreeMap<String, String>,
    #[serde(default)]
    unset: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct VersionFile {
    args: Vec<String>,
    #[serde(default)]
    contains: Option<String>,
    #[serde(default)]
    min: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MatchersFile {
    #[serde(default)]
    session_id: Vec<Value>,
    result: Vec<Value>,
    #[serde(default)]
    failure: Vec<Value>,
    #[serde(default)]
    retry: Vec<Value>,
    #[serde(default)]
    keep: BTreeMap<String, Vec<Value>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ApprovalsFile {
    conversation: ApprovalConversation,
}

// ----- the checked preset ----------------------------------------------------------------------

/// A rule that finds a value: which lines, and what to take from them.
#[derive(Clone, Debug)]
pub(crate) struct Matcher {
    pub(crate) when: When,
    pub(crate) value: Option<Source>,
    /// Take this kept value instead of one from the line.
    pub(crate) kept: Option<String>,
}

/// The matchers of a preset.
#[derive(Clone, Debug)]
pub(crate) struct Matchers {
    pub(crate) session_id: Vec<Matcher>,
    pub(crate) result: Vec<Matcher>,
    pub(crate) failure: Vec<Matcher>,
    /// Lines saying the CLI retries after a result or failure it reported: that outcome no
    /// longer stands.
    pub(crate) retry: Vec<Matcher>,
    pub(crate) keep: Vec<(String, Vec<Matcher>)>,
}

/// `--version` and what it must print.
#[derive(Clone, Debug)]
pub(crate) struct VersionCheck {
    pub(crate) args: Vec<String>,
    pub(crate) contains: Option<String>,
    pub(crate) min: Option<Version>,
}

/// A checked preset: how to start one CLI for a turn and read what it prints. See the crate
/// docs for the file format. Made by [`PresetCatalog`](crate::PresetCatalog) (shipped presets
/// and a presets directory) or [`Preset::from_json`].
///
/// Loading checks, beyond what the crate docs' description of the format says:
/// - a conversation is continued by a `resume` group that passes `{session_id}`: only such a
///   group makes `resume` possible, a `resume` group without `{session_id}` in any is refused,
///   and `!resume` groups (what a turn passes when it continues nothing) claim nothing;
/// - a `session_id`, `result` or `failure` rule may take a kept value (`"kept": NAME`, a
///   `matchers.keep` name), a `keep` rule may not: every `keep` rule reads a line with the
///   values kept before it, so it would see another's value one line late;
/// - `env.set` may not define bash functions (`BASH_FUNC_<name>%%`, any name with `%`);
/// - a NUL character in `args`, `version.args` or an `env.set` value, which no process could
///   be given.
///
/// An error quotes no value from the file (a key pasted in the wrong field stays out of logs):
/// it names the field and what the field takes.
#[derive(Clone)]
pub struct Preset {
    pub(crate) id: String,
    pub(crate) description: Option<String>,
    pub(crate) origin: String,
    pub(crate) program: String,
    pub(crate) template: Template,
    pub(crate) prompt: PromptDelivery,
    pub(crate) framing: Framing,
    pub(crate) max_line_bytes: usize,
    pub(crate) env_set: BTreeMap<String, String>,
    pub(crate) env_unset: Vec<String>,
    pub(crate) auth_env: Vec<String>,
    pub(crate) auth_args: Vec<String>,
    /// Option names refused among a session's extra arguments in every auth mode.
    pub(crate) reserved_args: Vec<String>,
    /// Words refused as a whole extra argument in every auth mode (a CLI's subcommands).
    pub(crate) reserved_words: Vec<String>,
    /// Other names of the flags the template passes a value with (`-m` for `--model`).
    pub(crate) arg_aliases: BTreeMap<String, String>,
    pub(crate) version: Option<VersionCheck>,
    pub(crate) success_exit_codes: Vec<i32>,
    pub(crate) matchers: Matchers,
    pub(crate) events: Vec<EventRule>,
    pub(crate) other_lines: OtherLines,
    /// With approvals asked (when the preset has a conversation).
    pub(crate) capabilities: Capabilities,
    pub(crate) approvals: Option<ApprovalConversation>,
    pub(crate) conversation_files: Option<ConversationFiles>,
}

/// The capabilities a preset can claim, because the preset's own parts make them possible.
const CLAIMABLE: &[Capability] = &[
    Capability::TokenStreaming,
    Capability::Reasoning,
    Capability::Usage,
    Capability::Approvals,
    Capability::Questions,
    Capability::Cancel,
    Capability::Resume,
    Capability::ModelSelection,
    Capability::SystemPrompt,
];

impl Preset {
    /// Reads and checks a preset file's text. `origin` names it in errors (a path, or
    /// `shipped:<name>.json`); `allow` is the executable allow-list its `program` must be on.
    pub fn from_json(text: &str, origin: &str, allow: &AllowList) -> Result<Preset, crate::PresetError> {
        parse(text, origin, allow).map_err(|problem| crate::PresetError::new(origin, problem))
    }

    /// True when the preset's `auth_env` lists the environment name `name`, by name or by a
    /// `PREFIX*` entry (compared as the kit's guard compares names).
    pub(crate) fn lists_auth_env(&self, name: &str) -> bool {
        let name = agent_provider_kit::auth::normalize_env_name(name);
        self.auth_env.iter().any(|listed| match listed.strip_suffix('*') {
            Some(prefix) => name.starts_with(&agent_provider_kit::auth::normalize_env_name(prefix)),
            None => agent_provider_kit::auth::normalize_env_name(listed) == name,
        })
    }

    /// The names `auth_env` lists that `AuthMode::Subscription` removes from the CLI's inherited
    /// environment: each one listed by name, and this process's names a `PREFIX*` entry covers.
    pub(crate) fn auth_env_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.auth_env.iter().filter(|n| !n.ends_with('*')).cloned().collect();
        if self.auth_env.iter().any(|n| n.ends_with('*')) {
            let host = std::env::vars_os().filter_map(|(name, _)| name.into_string().ok());
            let covered: Vec<String> = host.filter(|name| self.lists_auth_env(name) && !names.contains(name)).collect();
            names.extend(covered);
        }
        names
    }

    /// The preset's ID (`claude-print`); its provider is registered as `preset:<id>`.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// What the preset runs, for people.
    pub fn description(&self) -> Option<&str> {
        self.description.as_deref()
    }

    /// Where it was read from: a file path, or `shipped:<name>.json`.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The program it starts (a bare name or an absolute path).
    pub fn program(&self) -> &str {
        &self.program
    }

    /// The approval conversation it declares, if any.
    pub fn approval_conversation(&self) -> Option<ApprovalConversation> {
        self.approvals
    }

    /// What its sessions can do with approvals asked (see [`PresetProvider`](crate::PresetProvider)'s
    /// capabilities for one session's options).
    pub fn capabilities(&self) -> Capabilities {
        self.capabilities
    }

    /// A description of the preset for discovery: ID, provider, origin, program, capabilities
    /// and the options it takes with their defaults (what `agent-harness presets --json` prints).
    pub fn info(&self) -> PresetInfo {
        PresetInfo {
            id: self.id.clone(),
            provider: crate::provider::provider_id(&self.id),
            description: self.description.clone(),
            origin: self.origin.clone(),
            program: self.program.clone(),
            framing: self.framing,
            approval_conversation: self.approvals,
            resume: self.capabilities.resume.is_available(),
            capabilities: self.capabilities,
            options: self.options(),
        }
    }

    fn options(&self) -> Vec<OptionInfo> {
        let mut options = vec![
            OptionInfo {
                name: "binary",
                default: json!(self.program),
                description: "the program to run instead (must be on the allow-list)",
            },
            OptionInfo { name: "binary_args", default: json!([]), description: "arguments before the preset's own" },
            OptionInfo {
                name: "key",
                default: Value::Null,
                description: "the conversation key (default: the session ID)",
            },
            OptionInfo {
                name: "on_busy",
                default: json!("wait"),
                description: "`wait` or `fail` while another turn of the key runs",
            },
        ];
        if self.template.takes_extra_args() {
            options.push(OptionInfo { name: "args", default: json!([]), description: "extra CLI arguments" });
        }
        if self.template.uses(Placeholder::MaxTurns) {
            options.push(OptionInfo { name: "max_turns", default: Value::Null, description: "the agent's turn limit" });
        }
        if self.approvals.is_some() {
            options.extend([
                OptionInfo {
                    name: "approvals",
                    default: json!("off"),
                    description: "`ask`: each tool use becomes a request",
                },
                OptionInfo {
                    name: "approval_risk",
                    default: Value::Null,
                    description: "the `risk` of approval requests",
                },
                OptionInfo {
                    name: "approval_timeout_ms",
                    default: json!(DEFAULT_APPROVAL_TIMEOUT.as_millis() as u64),
                    description: "how long an approval waits before the tool is denied",
                },
                OptionInfo {
                    name: "approval_audience",
                    default: Value::Null,
                    description: "the `audience` of approval requests",
                },
            ]);
        }
        options
    }

    /// True when the conversation continues with the preset's `resume` arguments (a `resume`
    /// group, which passes `{session_id}`; `!resume` groups do not count).
    pub(crate) fn resumes(&self) -> bool {
        self.template.tests(Condition::Resume)
    }
}

impl fmt::Debug for Preset {
    /// The ID, origin, program and framing; no environment value.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Preset")
            .field("id", &self.id)
            .field("origin", &self.origin)
            .field("program", &self.program)
            .field("framing", &self.framing)
            .field("env", &self.env_set.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// A preset described for discovery; see [`Preset::info`].
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct PresetInfo {
    /// The preset's ID.
    pub id: String,
    /// The provider ID sessions name (`preset:<id>`).
    pub provider: String,
    /// What it runs.
    pub description: Option<String>,
    /// Where it was read from.
    pub origin: String,
    /// The program it starts.
    pub program: String,
    /// How its output is read.
    pub framing: Framing,
    /// Its approval conversation, if any.
    pub approval_conversation: Option<ApprovalConversation>,
    /// Whether a conversation continues across turns (and sessions, by key).
    pub resume: bool,
    /// What its sessions can do (approvals and questions with `approvals: ask`).
    pub capabilities: Capabilities,
    /// The `provider_options` it takes, with their defaults.
    pub options: Vec<OptionInfo>,
}

mod parse;
#[cfg(test)]
pub(crate) mod tests;

use parse::parse;
