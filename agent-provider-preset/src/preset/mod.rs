//! A preset file, read and checked: [`Preset`].

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use agent_core::{Capabilities, Capability, Support};
use agent_provider_kit::version::Version;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::allow::AllowList;
use crate::error::Problem;
use crate::events::{Emit, EventRule, OtherLines};
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
    pub(crate) version: Option<VersionCheck>,
    pub(crate) success_exit_codes: Vec<i32>,
    pub(crate) matchers: Matchers,
    pub(crate) events: Vec<EventRule>,
    pub(crate) other_lines: OtherLines,
    /// With approvals asked (when the preset has a conversation).
    pub(crate) capabilities: Capabilities,
    pub(crate) approvals: Option<ApprovalConversation>,
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

// ----- parsing ---------------------------------------------------------------------------------

fn parse(text: &str, origin: &str, allow: &AllowList) -> Result<Preset, Problem> {
    // Editors on some systems begin a UTF-8 file with a byte-order mark, which JSON does not
    // take.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let value: Value = serde_json::from_str(text).map_err(|e| Problem::new("", format!("not JSON: {e}")))?;
    let Value::Object(map) = &value else { return Err(Problem::new("", "expected a JSON object")) };
    if let Some(repeated) = agent_core::config::repeated_key(text) {
        let message = format!("the key `{}` is given twice; a preset names each key of an object once", repeated.key);
        return Err(Problem::new(repeated.path, message));
    }
    match map.get("schema_version") {
        None => {
            return Err(Problem::new("schema_version", format!("missing field (this version reads {SCHEMA_VERSION})")));
        }
        Some(v) if v.as_u64() == Some(u64::from(SCHEMA_VERSION)) => {}
        Some(v) => {
            let given = if v.is_u64() { "unsupported version" } else { "not a version number" };
            let message = format!("{given} (this version of agent-provider-preset reads {SCHEMA_VERSION})");
            return Err(Problem::new("schema_version", message));
        }
    }
    let file: PresetFile = serde_path_to_error::deserialize(&value).map_err(|error| {
        let path = error.path().to_string();
        let path = if path == "." { String::new() } else { path };
        // A value in the wrong place may be a secret (an `env` written as `"KEY=sk-…"`): the
        // error says where and what was expected, not what was given.
        Problem::new(path, agent_core::config::without_any_values(&error.into_inner().to_string()))
    })?;
    check_id(&file.id)?;
    check_program(&file.program, allow)?;
    let template = Template::parse(&file.args, "args")?;
    let framing = file.framing;
    let kept = keep_names(&file.matchers);
    if kept.iter().any(String::is_empty) {
        // `when` tests a kept value as `$name`, and `$` alone is no name.
        return Err(Problem::new("matchers.keep", "a kept value needs a name"));
    }
    let matchers = Matchers {
        session_id: matchers(&file.matchers.session_id, framing, "matchers.session_id", Some(&kept))?,
        result: matchers(&file.matchers.result, framing, "matchers.result", Some(&kept))?,
        failure: matchers(&file.matchers.failure, framing, "matchers.failure", Some(&kept))?,
        keep: file
            .matchers
            .keep
            .iter()
            .map(|(name, rules)| Ok((name.clone(), matchers(rules, framing, &format!("matchers.keep.{name}"), None)?)))
            .collect::<Result<_, Problem>>()?,
    };
    if matchers.result.is_empty() {
        return Err(Problem::new("matchers.result", "at least one rule: which line is the result"));
    }
    let events = file
        .events
        .iter()
        .enumerate()
        .map(|(i, rule)| EventRule::parse(rule, framing, &format!("events[{i}]")))
        .collect::<Result<Vec<_>, _>>()?;
    check_prompt(&template, file.prompt, file.approvals.is_some())?;
    if template.tests(Condition::Resume) && matchers.session_id.is_empty() {
        return Err(Problem::new(
            "matchers.session_id",
            "a `resume` group needs a rule that finds the CLI's session ID to continue",
        ));
    }
    if template.mentions(Condition::Approvals) && file.approvals.is_none() {
        return Err(Problem::new("args", "an `approvals` group needs an `approvals` conversation"));
    }
    if file.approvals.is_some() && framing != Framing::Jsonl {
        // Its requests are JSON lines; under `lines` none would be read, and every turn that
        // asks would wait for good.
        return Err(Problem::new("approvals", "an approval conversation needs `\"framing\": \"jsonl\"`"));
    }
    let max_line_bytes = file.max_line_bytes.unwrap_or(DEFAULT_MAX_LINE_BYTES);
    if max_line_bytes == 0 {
        return Err(Problem::new("max_line_bytes", "must be at least 1"));
    }
    for (name, value) in &file.env.set {
        check_env_name(name, &format!("env.set.{name}"))?;
        if chooses_code(name) {
            return Err(Problem::new(
                format!("env.set.{name}"),
                "a preset may not set this variable: it decides which program or code runs, which the executable \
                 allow-list decides (set it in the session's environment if it is meant)",
            ));
        }
        if value.contains('\0') {
            // No environment value can carry one: every turn would fail to start.
            return Err(Problem::new(
                format!("env.set.{name}"),
                "holds a NUL character, which no environment value can carry",
            ));
        }
    }
    for (i, name) in file.env.unset.iter().enumerate() {
        check_env_name(name, &format!("env.unset[{i}]"))?;
    }
    for (i, name) in file.auth_env.iter().enumerate() {
        // `ANTHROPIC_*` lists every name with that prefix.
        let listed = name.strip_suffix('*').unwrap_or(name);
        check_env_name(listed, &format!("auth_env[{i}]"))?;
        if listed.contains('*') {
            return Err(Problem::new(
                format!("auth_env[{i}]"),
                "a `*` may only end a name, as a prefix (`ANTHROPIC_*`)",
            ));
        }
    }
    if let Some(i) = file.auth_args.iter().position(|a| !a.starts_with('-')) {
        return Err(Problem::new(format!("auth_args[{i}]"), "expected an option name (`-c`, `--config`)"));
    }
    check_kept_tests(&matchers, &events)?;
    let version = file
        .version
        .map(|v| {
            let min = v
                .min
                .as_deref()
                .map(|m| m.parse::<Version>().map_err(|_| Problem::new("version.min", "not a version (x.y.z)")))
                .transpose()?;
            if v.args.is_empty() {
                return Err(Problem::new("version.args", "at least one argument (`--version`)"));
            }
            if let Some(i) = v.args.iter().position(|arg| arg.contains('\0')) {
                // The check would fail to start, and every session with it.
                return Err(Problem::new(
                    format!("version.args[{i}]"),
                    "holds a NUL character, which no command-line argument can carry",
                ));
            }
            if v.contains.as_deref().is_some_and(str::is_empty) {
                return Err(Problem::new("version.contains", "an empty text, which every output contains"));
            }
            Ok(VersionCheck { args: v.args, contains: v.contains, min })
        })
        .transpose()?;
    let success_exit_codes = file.success_exit_codes.unwrap_or_else(|| vec![0]);
    if success_exit_codes.is_empty() {
        return Err(Problem::new("success_exit_codes", "at least one exit code"));
    }
    if let Some(i) = success_exit_codes.iter().position(|code| !(0..=255).contains(code)) {
        // A process's exit code is one byte: this one could never match.
        return Err(Problem::new(format!("success_exit_codes[{i}]"), "an exit code is from 0 to 255"));
    }
    let approvals = file.approvals.map(|a| a.conversation);
    let capabilities = capabilities(&template, &matchers, &events, approvals, &file.capabilities)?;
    Ok(Preset {
        id: file.id,
        description: file.description,
        origin: origin.to_owned(),
        program: file.program,
        template,
        prompt: file.prompt,
        framing,
        max_line_bytes,
        env_set: file.env.set,
        env_unset: file.env.unset,
        auth_env: file.auth_env,
        auth_args: file.auth_args,
        version,
        success_exit_codes,
        matchers,
        events,
        other_lines: file.other_lines,
        capabilities,
        approvals,
    })
}

/// Every `$name` a `when` tests names a `matchers.keep` value.
fn check_kept_tests(matchers: &Matchers, events: &[EventRule]) -> Result<(), Problem> {
    let kept: Vec<&str> = matchers.keep.iter().map(|(name, _)| name.as_str()).collect();
    let groups: [(&str, &[Matcher]); 3] =
        [("session_id", &matchers.session_id), ("result", &matchers.result), ("failure", &matchers.failure)];
    let mut whens: Vec<(String, &When)> = groups
        .iter()
        .flat_map(|(group, rules)| {
            rules.iter().enumerate().map(move |(i, r)| (format!("matchers.{group}[{i}].when"), &r.when))
        })
        .collect();
    for (name, rules) in &matchers.keep {
        whens.extend(rules.iter().enumerate().map(|(i, r)| (format!("matchers.keep.{name}[{i}].when"), &r.when)));
    }
    whens.extend(events.iter().enumerate().map(|(i, rule)| (format!("events[{i}].when"), &rule.when)));
    for (i, rule) in events.iter().enumerate() {
        if let Emit::ToolCompleted { failed_when: Some(when), .. } = &rule.emit {
            whens.push((format!("events[{i}].failed_when"), when));
        }
    }
    for (path, when) in whens {
        if let Some(name) = when.kept_names().find(|name| !kept.contains(name)) {
            return Err(Problem::new(format!("{path}.${name}"), format!("no `matchers.keep.{name}` to test")));
        }
    }
    Ok(())
}

fn keep_names(file: &MatchersFile) -> Vec<String> {
    file.keep.keys().cloned().collect()
}

fn check_id(id: &str) -> Result<(), Problem> {
    let valid = !id.is_empty()
        && id.len() <= 64
        && id.chars().next().is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && id.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '_' | '.'));
    if valid {
        Ok(())
    } else {
        Err(Problem::new("id", "not an ID: 1 to 64 of a-z, 0-9, `-`, `_`, `.`, starting with a letter or digit"))
    }
}

fn check_program(program: &str, allow: &AllowList) -> Result<(), Problem> {
    allow.allows(Path::new(program)).map_err(|why| Problem::new("program", why.to_string()))
}

/// Variables through which an interpreter or the C library loads code of the variable's
/// choosing into the program: Node's options (`--require`) and module path, the shells' startup
/// files, Python's, Perl's and Ruby's paths and options, the JVM's agents, glibc's charset
/// modules.
const LOADS_CODE: &[&str] = &[
    "NODE_OPTIONS",
    "NODE_PATH",
    "BASH_ENV",
    "ENV",
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONSTARTUP",
    "PYTHONUSERBASE",
    "PERL5OPT",
    "PERL5LIB",
    "PERLLIB",
    "RUBYOPT",
    "RUBYLIB",
    "JAVA_TOOL_OPTIONS",
    "_JAVA_OPTIONS",
    "JDK_JAVA_OPTIONS",
    "GCONV_PATH",
];

/// Whether setting `name` decides which program or code a spawn runs: `PATH` (where a bare
/// program name is found), the dynamic loader's variables (code loaded into any program),
/// [`LOADS_CODE`], and bash's exported functions: bash defines a function for each
/// `BASH_FUNC_<name>%%` variable it inherits, so a `#!/bin/bash` CLI (or any bash it starts)
/// would run the preset's `date` instead of the command. Every name with `%` is refused too:
/// no ordinary variable has one.
fn chooses_code(name: &str) -> bool {
    let name = name.to_ascii_uppercase();
    name == "PATH"
        || name.starts_with("LD_")
        || name.starts_with("DYLD_")
        || name.starts_with("BASH_FUNC_")
        || name.contains('%')
        || LOADS_CODE.contains(&name.as_str())
}

fn check_env_name(name: &str, path: &str) -> Result<(), Problem> {
    if name.is_empty() || name.contains(['=', '\0']) {
        return Err(Problem::new(path, "not an environment variable name"));
    }
    Ok(())
}

/// Reads the rules of one matcher group at `path`. `kept` names the kept values its rules may
/// take with `"kept"`; `None` for the `keep` rules themselves, which take their value from the
/// line only. Every `keep` rule reads a line with the values kept before that line, so one
/// taking another's value would see it one line late (and one taking its own would change
/// nothing): a `keep` rule's `kept` is refused rather than given that meaning.
fn matchers(rules: &[Value], framing: Framing, path: &str, kept: Option<&[String]>) -> Result<Vec<Matcher>, Problem> {
    rules
        .iter()
        .enumerate()
        .map(|(i, rule)| {
            let at = format!("{path}[{i}]");
            let Value::Object(map) = rule else {
                return Err(Problem::new(at, "expected an object with `when` and `value` (or `kept`)"));
            };
            if let Some(unknown) = map.keys().find(|k| !matches!(k.as_str(), "when" | "value" | "kept")) {
                return Err(Problem::new(
                    format!("{at}.{unknown}"),
                    "unknown field (a matcher has `when`, `value`, `kept`)",
                ));
            }
            let when = match map.get("when") {
                Some(when) => When::parse(when, framing, &format!("{at}.when"))?,
                None => return Err(Problem::new(format!("{at}.when"), "missing field (which lines)")),
            };
            let value =
                map.get("value").map(|v| Source::parse(v, framing, &when, &format!("{at}.value"))).transpose()?;
            let kept_name = match (map.get("kept"), kept) {
                (None, _) => None,
                (Some(_), None) => {
                    return Err(Problem::new(
                        format!("{at}.kept"),
                        "a `keep` rule takes its value from the line (`value`), not from a kept value; `kept` is \
                         for `session_id`, `result` and `failure` rules",
                    ));
                }
                (Some(Value::String(name)), Some(kept)) if kept.contains(name) => Some(name.clone()),
                (Some(Value::String(name)), Some(_)) => {
                    return Err(Problem::new(format!("{at}.kept"), format!("no `matchers.keep.{name}` to take")));
                }
                (Some(_), Some(_)) => {
                    return Err(Problem::new(format!("{at}.kept"), "expected the name of a kept value"));
                }
            };
            if value.is_some() && kept_name.is_some() {
                return Err(Problem::new(at, "`value` or `kept`, not both"));
            }
            Ok(Matcher { when, value, kept: kept_name })
        })
        .collect()
}

/// `{prompt}` must be there exactly once when the prompt goes on the command line, and not at
/// all when it goes on stdin.
fn check_prompt(template: &Template, delivery: PromptDelivery, conversation: bool) -> Result<(), Problem> {
    let mut modes = vec![false];
    if conversation {
        modes.push(true);
    }
    for approvals in modes {
        let (always, conditional) = template.prompt_uses(approvals);
        let on_argv = delivery == PromptDelivery::Argv && !approvals;
        let when =
            if conversation { if approvals { " with approvals asked" } else { " without approvals" } } else { "" };
        if conditional {
            return Err(Problem::new("args", "`{prompt}` is inside a group that may be left out"));
        }
        if on_argv && always != 1 {
            return Err(Problem::new(
                "args",
                format!("`{{prompt}}` must be one argument{when} (found {always}), or set `\"prompt\": \"stdin\"`"),
            ));
        }
        if !on_argv && always != 0 {
            let how = if approvals { "the approval conversation sends it on stdin" } else { "`prompt` is `stdin`" };
            return Err(Problem::new("args", format!("`{{prompt}}` is on the command line{when}, but {how}")));
        }
    }
    Ok(())
}

/// What the preset's parts make possible, with the claims applied.
fn capabilities(
    template: &Template,
    matchers: &Matchers,
    events: &[EventRule],
    approvals: Option<ApprovalConversation>,
    claims: &BTreeMap<String, Support>,
) -> Result<Capabilities, Problem> {
    let emits = |name: &str| events.iter().any(|rule| rule.emit.name() == name);
    let derived = [
        (Capability::TokenStreaming, emits("message_delta").then_some(Support::Native)),
        (Capability::Reasoning, emits("reasoning_delta").then_some(Support::Native)),
        (Capability::Usage, emits("usage").then_some(Support::Native)),
        (Capability::Approvals, approvals.map(|_| Support::Native)),
        (Capability::Questions, approvals.map(|_| Support::Native)),
        // The turn's process is stopped; the CLI has no say.
        (Capability::Cancel, Some(Support::Emulated)),
        (
            Capability::Resume,
            (template.tests(Condition::Resume) && !matchers.session_id.is_empty()).then_some(Support::Native),
        ),
        (Capability::ModelSelection, template.uses(Placeholder::Model).then_some(Support::Native)),
        (
            Capability::SystemPrompt,
            (template.uses(Placeholder::SystemPrompt) || template.uses(Placeholder::SystemPromptFile))
                .then_some(Support::Native),
        ),
    ];
    let mut caps = derived
        .iter()
        .fold(Capabilities::NONE, |caps, (cap, support)| caps.with(*cap, support.unwrap_or(Support::Unsupported)));
    for (name, support) in claims {
        let path = format!("capabilities.{name}");
        let Some(capability) = Capability::ALL.iter().copied().find(|c| c.as_str() == name) else {
            return Err(Problem::new(path, "unknown capability"));
        };
        if !CLAIMABLE.contains(&capability) {
            return Err(Problem::new(
                path,
                "a preset cannot provide this (presets pass a text prompt to one process per turn)",
            ));
        }
        let possible = derived.iter().find(|(c, _)| *c == capability).and_then(|(_, s)| *s).is_some();
        if support.is_available() && !possible {
            let why = match capability {
                Capability::TokenStreaming => "no `events` rule emits `message_delta`",
                Capability::Reasoning => "no `events` rule emits `reasoning_delta`",
                Capability::Usage => "no `events` rule emits `usage`",
                Capability::Approvals | Capability::Questions => "the preset declares no `approvals` conversation",
                Capability::Resume => "no `resume` group passes `{session_id}`",
                Capability::ModelSelection => "no argument uses `{model}`",
                _ => "no argument uses `{system_prompt}` or `{system_prompt_file}`",
            };
            return Err(Problem::new(path, format!("claimed, but {why}")));
        }
        caps = caps.with(capability, *support);
    }
    Ok(caps)
}

#[cfg(test)]
pub(crate) mod tests;
