//! From a preset file's text to a checked [`Preset`]: the file read, and every check its parts
//! get before a session can use it.

use std::collections::BTreeMap;
use std::path::Path;

use agent_core::{Capabilities, Capability, Support};
use agent_provider_kit::version::Version;
use serde_json::Value;

use super::{
    ApprovalConversation, CLAIMABLE, DEFAULT_MAX_LINE_BYTES, Matcher, Matchers, MatchersFile, Preset, PresetFile,
    PromptDelivery, SCHEMA_VERSION, VersionCheck,
};
use crate::allow::AllowList;
use crate::error::Problem;
use crate::events::{Emit, EventRule};
use crate::matcher::{Framing, Source, When};
use crate::template::{Condition, Placeholder, Template};

pub(super) fn parse(text: &str, origin: &str, allow: &AllowList) -> Result<Preset, Problem> {
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
        let path = if path == "." { String::new() } else { error_path(path) };
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
        retry: matchers(&file.matchers.retry, framing, "matchers.retry", Some(&kept))?,
        keep: file
            .matchers
            .keep
            .iter()
            .map(|(name, rules)| Ok((name.clone(), matchers(rules, framing, &format!("matchers.keep.{name}"), None)?)))
            .collect::<Result<_, Problem>>()?,
    };
    if let Some(i) = matchers.retry.iter().position(|rule| rule.value.is_some() || rule.kept.is_some()) {
        return Err(Problem::new(format!("matchers.retry[{i}]"), "a retry rule has only `when` (which lines)"));
    }
    if !matchers.retry.is_empty() && file.approvals.is_some() {
        // Its stdin closes at the first result or failure line, for good.
        return Err(Problem::new("matchers.retry", "an approval conversation ends at the first result or failure"));
    }
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
    if file.conversation_files.is_some() && !template.tests(Condition::Resume) {
        // Its checks are made before a turn continues a conversation, which this one never does.
        return Err(Problem::new("conversation_files", "needs a `resume` group: the checks are made before a resume"));
    }
    if template.mentions(Condition::Approvals) && file.approvals.is_none() {
        return Err(Problem::new("args", "an `approvals` group needs an `approvals` conversation"));
    }
    if file.approvals.is_some() && !template.mentions(Condition::Approvals) {
        // Asked, the prompt goes on stdin as the conversation's first message; the CLI must be
        // told so (and told otherwise when approvals are not asked).
        return Err(Problem::new(
            "approvals",
            "an approval conversation needs `approvals` groups in `args`: the CLI's flags for it, and where the \
             prompt goes without it",
        ));
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
        if !is_env_name(name) {
            // Not named in the path: a key such as `OPENAI_API_KEY=sk-…` is a secret pasted in.
            return Err(Problem::new(
                "env.set",
                "a key is not an environment variable name (it is empty, or holds `=` or a NUL)",
            ));
        }
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
    for (field, names) in [("auth_args", &file.auth_args), ("reserved_args", &file.reserved_args)] {
        if let Some(i) = names.iter().position(|a| !is_option_name(a)) {
            return Err(Problem::new(format!("{field}[{i}]"), "expected an option name (`-c`, `--config`)"));
        }
    }
    if let Some(i) = file.reserved_words.iter().position(|w| w.is_empty() || w.starts_with('-')) {
        return Err(Problem::new(format!("reserved_words[{i}]"), "expected a word that is not an option (`resume`)"));
    }
    let value_flags = template.value_flags();
    for (alias, flag) in &file.arg_aliases {
        if !is_option_name(alias) {
            // Not named in the path: a key such as `--api-key=sk-…` holds a value.
            return Err(Problem::new("arg_aliases", "a key is not an option name (`-m`)"));
        }
        if !value_flags.iter().any(|(name, _)| name == flag) {
            return Err(Problem::new(
                format!("arg_aliases.{alias}"),
                "expected a flag `args` passes a placeholder's value with (`--model` of `\"--model\", \"{model}\"`)",
            ));
        }
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
        reserved_args: file.reserved_args,
        reserved_words: file.reserved_words,
        arg_aliases: file.arg_aliases,
        version,
        success_exit_codes,
        matchers,
        events,
        other_lines: file.other_lines,
        capabilities,
        approvals,
        conversation_files: file.conversation_files,
    })
}

/// Every `$name` a `when` tests names a `matchers.keep` value.
fn check_kept_tests(matchers: &Matchers, events: &[EventRule]) -> Result<(), Problem> {
    let kept: Vec<&str> = matchers.keep.iter().map(|(name, _)| name.as_str()).collect();
    let groups: [(&str, &[Matcher]); 4] = [
        ("session_id", &matchers.session_id),
        ("result", &matchers.result),
        ("failure", &matchers.failure),
        ("retry", &matchers.retry),
    ];
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

/// A name a process environment can hold: not empty, no `=`, no NUL.
fn is_env_name(name: &str) -> bool {
    !name.is_empty() && !name.contains(['=', '\0'])
}

fn check_env_name(name: &str, path: &str) -> Result<(), Problem> {
    if !is_env_name(name) {
        return Err(Problem::new(path, "not an environment variable name"));
    }
    Ok(())
}

/// The field path of a deserialization error, without a key of `env.set` that is no variable
/// name or one of `arg_aliases` that is no option name: such a key (`KEY=value` pasted in) may
/// hold a secret.
fn error_path(path: String) -> String {
    if let Some(key) = path.strip_prefix("env.set.")
        && !is_env_name(key)
    {
        return "env.set".to_owned();
    }
    if let Some(key) = path.strip_prefix("arg_aliases.")
        && !is_option_name(key)
    {
        return "arg_aliases".to_owned();
    }
    path
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
                (Some(Value::String(_)), Some(_)) => {
                    return Err(Problem::new(format!("{at}.kept"), "names no `matchers.keep` value"));
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
        let derived_support = derived.iter().find(|(c, _)| *c == capability).and_then(|(_, s)| *s);
        if *support == Support::Native && derived_support.is_some_and(|derived| derived != Support::Native) {
            // A claim may lower what the parts give, never raise it.
            return Err(Problem::new(
                path,
                "claimed native, but the preset provides it emulated (it stops the turn's process)",
            ));
        }
        let possible = derived_support.is_some();
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

/// An option name: `-c` or `--config`, nothing after it (no `=value`, no space).
fn is_option_name(name: &str) -> bool {
    name.len() > 1
        && name.starts_with('-')
        && name != "--"
        && !name.contains(|c: char| c == '=' || c.is_whitespace() || c == '\0')
}
