//! Server requests → [`RequestSpec`]s (here), and [`Response`](agent_core::Response)s → the
//! JSON codex expects ([`answer`]).

use agent_core::event::FileChangeEntry;
use agent_core::request::RequestSpec;
use agent_core::{Choice, Question, RequestKind, Scope, TurnId};
use serde_json::{Value, json};

use crate::wire::{self, RpcId, ServerRequest};

mod answer;
#[cfg(test)]
mod tests;

use self::answer::no_dynamic_tools;
pub(crate) use self::answer::{auto_decline, decline_unread, encode};

/// JSON-RPC "method not found", for server requests this client does not serve.
const METHOD_NOT_FOUND: i64 = -32601;
/// JSON-RPC "invalid params", for a known server request whose params did not parse.
pub(super) const INVALID_PARAMS: i64 = -32602;
/// The choice value of codex's `acceptWithExecpolicyAmendment` decision.
pub(crate) const EXECPOLICY_AMENDMENT: &str = "accept_with_execpolicy_amendment";
/// The choice value of codex's `applyNetworkPolicyAmendment` decision.
pub(crate) const NETWORK_POLICY_AMENDMENT: &str = "apply_network_policy_amendment";

/// A server request waiting for the host's response.
#[derive(Clone, Debug)]
pub(crate) struct PendingRequest {
    /// The JSON-RPC ID to answer.
    pub(crate) id: RpcId,
    /// The harness turn it belongs to.
    pub(crate) turn: TurnId,
    /// Sent from another thread than the session's (a subagent's): codex does not settle it
    /// when the turn ends.
    pub(crate) foreign: bool,
    /// What was asked, with what the answer needs.
    pub(crate) kind: PendingKind,
}

/// What a pending request needs to encode its answer.
#[derive(Clone, Debug)]
pub(crate) enum PendingKind {
    /// `item/commandExecution/requestApproval` with the approval scopes codex takes and the
    /// other decisions it offered.
    Command { scopes: Vec<Scope>, offered: Vec<Offered> },
    /// `item/fileChange/requestApproval`.
    FileChange,
    /// `item/permissions/requestApproval` with the requested profile.
    Permissions { requested: Value },
    /// `item/tool/requestUserInput` with its question IDs in order.
    Question { ids: Vec<String> },
    /// `mcpServer/elicitation/request`.
    Elicitation,
    /// `mcpServer/elicitation/request` that is codex's approval of an MCP tool call.
    ToolCall,
    /// The legacy `execCommandApproval` / `applyPatchApproval` (review decisions).
    Legacy,
}

/// A codex decision offered as a [`Choice`]: its value and the exact decision JSON codex listed
/// (with the amendment), sent back as is when it is chosen.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Offered {
    pub(crate) value: String,
    pub(crate) decision: Value,
}

/// What to do with a server request.
#[derive(Debug)]
pub(crate) enum Built {
    /// Ask the host.
    Ask { spec: RequestSpec, kind: PendingKind },
    /// Answer at once (requests this client does not serve), with why for the event log.
    Answer { result: std::result::Result<Value, wire::AnswerError>, note: String },
}

/// Builds the host request for `request`. `changes` finds the file changes of a `fileChange`
/// item announced earlier (the approval itself does not carry them).
pub(crate) fn build(
    id: &RpcId,
    request: ServerRequest,
    changes: impl Fn(&str) -> Option<Vec<FileChangeEntry>>,
) -> Built {
    let provider_ref = id.to_ref();
    match request {
        ServerRequest::CommandApproval(p) => command_approval(provider_ref, p),
        ServerRequest::FileApproval(p) => {
            let item_changes = p.item_id.as_deref().and_then(&changes).unwrap_or_default();
            file_approval(provider_ref, p, item_changes)
        }
        ServerRequest::Permissions(p) => {
            let prompt = p.reason.clone().unwrap_or_else(|| "Grant additional permissions".into());
            let mut spec = RequestSpec::new(RequestKind::Permission, prompt, provider_ref)
                .scopes([Scope::Once, Scope::Session])
                .meta("permissions", p.permissions.clone());
            spec = meta_opt(spec, "item_id", p.item_id);
            spec = meta_opt(spec, "cwd", p.cwd);
            spec = meta_opt(spec, "reason", p.reason);
            Built::Ask { spec, kind: PendingKind::Permissions { requested: p.permissions } }
        }
        ServerRequest::UserInput(p) => {
            let ids = p.questions.iter().map(|q| q.id.clone()).collect();
            let questions: Vec<Question> = p.questions.into_iter().map(question).collect();
            let prompt = questions.first().map(|q| q.prompt.clone()).unwrap_or_else(|| "Answer the agent".into());
            let spec = meta_opt(RequestSpec::new(RequestKind::Question, prompt, provider_ref), "item_id", p.item_id)
                .questions(questions);
            Built::Ask { spec, kind: PendingKind::Question { ids } }
        }
        ServerRequest::Elicitation(p)
            if p.meta.as_ref().is_some_and(|m| m["codex_approval_kind"] == "mcp_tool_call") =>
        {
            // Codex asks to run an MCP tool through the elicitation method: an approval, once.
            let meta = p.meta.unwrap_or_default();
            let tool = meta["tool_name"].as_str().or_else(|| meta["tool_title"].as_str()).map(str::to_owned);
            let prompt = p.message.clone().unwrap_or_else(|| "Run an MCP tool".into());
            let mut spec = RequestSpec::new(RequestKind::Permission, prompt, provider_ref).scopes([Scope::Once]);
            spec = meta_opt(spec, "server_name", p.server_name);
            spec = meta_opt(spec, "tool", tool);
            spec = meta_opt(spec, "tool_description", meta["tool_description"].as_str().map(str::to_owned));
            spec = meta_opt(spec, "input", meta.get("tool_params").cloned());
            Built::Ask { spec, kind: PendingKind::ToolCall }
        }
        ServerRequest::Elicitation(p) => {
            let prompt = p.message.clone().unwrap_or_else(|| "An MCP server asks for input".into());
            let mut spec = RequestSpec::new(RequestKind::McpElicitation, prompt, provider_ref);
            if let Some(schema) = p.requested_schema {
                spec = spec.schema(schema);
            }
            spec = meta_opt(spec, "server_name", p.server_name);
            spec = meta_opt(spec, "mode", p.mode);
            spec = meta_opt(spec, "url", p.url);
            spec = meta_opt(spec, "elicitation_id", p.elicitation_id);
            Built::Ask { spec, kind: PendingKind::Elicitation }
        }
        ServerRequest::LegacyExec(p) => {
            let line = p.command.join(" ");
            let command = match p.command.as_slice() {
                [shell, flag, script] if is_shell(shell) && is_script_flag(flag) => script.clone(),
                _ => line.clone(),
            };
            let mut spec = RequestSpec::new(RequestKind::CommandApproval, format!("Run `{command}`"), provider_ref)
                .scopes([Scope::Once, Scope::Session])
                .meta("command", command.as_str());
            if command != line {
                spec = spec.meta("command_line", line);
            }
            spec = meta_opt(spec, "cwd", p.cwd);
            spec = meta_opt(spec, "reason", p.reason);
            spec = meta_opt(spec, "item_id", p.call_id);
            Built::Ask { spec, kind: PendingKind::Legacy }
        }
        ServerRequest::LegacyPatch(p) => {
            let files = p.file_changes.as_object().map(|m| m.keys().cloned().collect::<Vec<_>>()).unwrap_or_default();
            let mut spec = RequestSpec::new(
                RequestKind::FileChangeApproval,
                format!("Apply changes to {}", files.join(", ")),
                provider_ref,
            )
            .scopes([Scope::Once, Scope::Session])
            .meta("changes", p.file_changes);
            spec = meta_opt(spec, "reason", p.reason);
            spec = meta_opt(spec, "item_id", p.call_id);
            Built::Ask { spec, kind: PendingKind::Legacy }
        }
        ServerRequest::DynamicToolCall { .. } => Built::Answer {
            result: Ok(no_dynamic_tools()),
            note: "codex called a dynamic tool; this client registers none".into(),
        },
        ServerRequest::Unsupported { method, known, .. } => {
            let code = if known && !is_unserved(&method) { INVALID_PARAMS } else { METHOD_NOT_FOUND };
            let message = if code == INVALID_PARAMS {
                format!("agent-harness could not read the params of `{method}`")
            } else {
                format!("agent-harness does not serve `{method}`")
            };
            Built::Answer { result: Err(wire::AnswerError { code, message: message.clone() }), note: message }
        }
    }
}

/// Server requests this client deliberately does not serve.
fn is_unserved(method: &str) -> bool {
    matches!(method, "account/chatgptAuthTokens/refresh" | "attestation/generate")
}

fn meta_opt(spec: RequestSpec, key: &str, value: Option<impl Into<Value>>) -> RequestSpec {
    match value {
        Some(v) => spec.meta(key, v),
        None => spec,
    }
}

fn command_approval(provider_ref: String, p: wire::CommandApproval) -> Built {
    let line = p.command.clone().unwrap_or_default();
    let command = shell_script(&line).unwrap_or_else(|| line.clone());
    let prompt = match p.reason.as_deref().filter(|r| !r.is_empty()) {
        Some(reason) => format!("Run `{command}`: {reason}"),
        None => format!("Run `{command}`"),
    };
    let scopes = command_scopes(&p);
    let (offered, choices, amendments) = command_choices(&p);
    let mut spec = RequestSpec::new(RequestKind::CommandApproval, prompt, provider_ref)
        .scopes(scopes.clone())
        .choices(choices)
        .meta("command", command.as_str());
    if command != line {
        spec = spec.meta("command_line", line);
    }
    for (key, amendment) in amendments {
        spec = spec.meta(key, amendment);
    }
    spec = meta_opt(spec, "cwd", p.cwd);
    spec = meta_opt(spec, "reason", p.reason);
    spec = meta_opt(spec, "item_id", p.item_id);
    spec = meta_opt(spec, "available_decisions", p.available_decisions.map(Value::Array));
    spec = meta_opt(spec, "proposed_execpolicy_amendment", p.proposed_execpolicy_amendment);
    spec = meta_opt(spec, "proposed_network_policy_amendments", p.proposed_network_policy_amendments.map(Value::Array));
    spec = meta_opt(spec, "network_approval_context", p.network_approval_context);
    spec = meta_opt(spec, "command_actions", p.command_actions);
    Built::Ask { spec, kind: PendingKind::Command { scopes, offered } }
}

/// The script of a command codex runs through a shell (`/bin/bash -lc 'cargo test'`): what the
/// agent asked to run, as claude and pi give it, and what a policy matches (`cargo test`).
/// `None` when the line is not one shell, its flag and one shell word that reads without
/// doubt: single quotes, backslash escapes and plain characters; anything else (double quotes,
/// an expansion, a second word) leaves the line as it is.
pub(crate) fn shell_script(line: &str) -> Option<String> {
    let (shell, rest) = line.split_once(' ')?;
    let (flag, word) = rest.split_once(' ')?;
    if !is_shell(shell) || !is_script_flag(flag) {
        return None;
    }
    let (mut script, mut chars) = (String::new(), word.chars());
    while let Some(c) = chars.next() {
        match c {
            '\'' => loop {
                match chars.next()? {
                    '\'' => break,
                    quoted => script.push(quoted),
                }
            },
            '\\' => script.push(chars.next()?),
            c if c.is_ascii_alphanumeric() || "_@%+=:,./-".contains(c) => script.push(c),
            _ => return None,
        }
    }
    (!script.is_empty()).then_some(script)
}

/// A POSIX shell codex may run commands through, by path or name.
fn is_shell(program: &str) -> bool {
    let name = program.rsplit('/').next().unwrap_or(program);
    matches!(name, "bash" | "sh" | "zsh" | "dash" | "ksh")
}

/// The flag before a shell's script: `-c`, or `-lc` for a login shell.
fn is_script_flag(flag: &str) -> bool {
    matches!(flag, "-c" | "-lc")
}

/// The decisions of a command approval beyond accept, decline and cancel, as choices, with the
/// metadata entry (`execpolicy_amendment`, `network_policy_amendment`) of each amendment.
///
/// From `availableDecisions`, or, when codex leaves the list out, what codex itself offers
/// then: the first `allow` network amendment for a network approval, else the proposed
/// execpolicy amendment. A decision offered twice is offered once (the first).
fn command_choices(p: &wire::CommandApproval) -> (Vec<Offered>, Vec<Choice>, Vec<(&'static str, Value)>) {
    let listed = match &p.available_decisions {
        Some(list) => list.clone(),
        None => default_decisions(p),
    };
    let (mut offered, mut choices, mut amendments) = (Vec::new(), Vec::new(), Vec::new());
    for decision in listed {
        let Some((choice, meta)) = amendment_choice(&decision) else { continue };
        if offered.iter().any(|o: &Offered| o.value == choice.value) {
            continue;
        }
        offered.push(Offered { value: choice.value.clone(), decision });
        choices.push(choice);
        amendments.push(meta);
    }
    (offered, choices, amendments)
}

/// What codex offers when `availableDecisions` is absent (its `default_available_decisions`).
fn default_decisions(p: &wire::CommandApproval) -> Vec<Value> {
    if p.network_approval_context.is_some() {
        let allow = p.proposed_network_policy_amendments.iter().flatten().find(|a| a["action"] == "allow");
        return allow
            .map(|a| json!({ "applyNetworkPolicyAmendment": { "network_policy_amendment": a } }))
            .into_iter()
            .collect();
    }
    p.proposed_execpolicy_amendment
        .iter()
        .filter(|a| a.as_array().is_some_and(|words| !words.is_empty()))
        .map(|a| json!({ "acceptWithExecpolicyAmendment": { "execpolicy_amendment": a } }))
        .collect()
}

/// The choice for one listed decision and its amendment's metadata entry; `None` for the plain
/// decisions (`accept`, `decline`, …) and for shapes this client does not know.
fn amendment_choice(decision: &Value) -> Option<(Choice, (&'static str, Value))> {
    if let Some(amendment) = decision.pointer("/acceptWithExecpolicyAmendment/execpolicy_amendment") {
        let words: Vec<&str> = amendment.as_array()?.iter().map(Value::as_str).collect::<Option<_>>()?;
        let prefix = words.join(" ");
        let choice = Choice {
            value: EXECPOLICY_AMENDMENT.into(),
            label: "Approve and allow similar commands".into(),
            description: Some(format!(
                "Run this command and add a rule to codex's execution policy that allows commands starting with \
                 `{prefix}` without asking, in this and later sessions (codex saves it under CODEX_HOME/rules)"
            )),
        };
        return Some((choice, ("execpolicy_amendment", amendment.clone())));
    }
    let amendment = decision.pointer("/applyNetworkPolicyAmendment/network_policy_amendment")?;
    let host = amendment.get("host")?.as_str()?;
    let (label, description) = match amendment.get("action")?.as_str()? {
        "allow" => (
            "Approve and always allow this host",
            format!("Run this command and add a persistent network policy rule that allows connections to `{host}`"),
        ),
        "deny" => (
            "Refuse and always block this host",
            format!("Refuse this command and add a persistent network policy rule that blocks connections to `{host}`"),
        ),
        _ => return None,
    };
    let choice = Choice { value: NETWORK_POLICY_AMENDMENT.into(), label: label.into(), description: Some(description) };
    Some((choice, ("network_policy_amendment", amendment.clone())))
}

/// The approval scopes of a command approval.
///
/// `Once` when `accept` is offered. `Session` when `acceptForSession` is offered, and also for a
/// plain command approval (`kind` `command`, no network context) that offers `accept`: codex
/// 0.171 leaves `acceptForSession` out of `availableDecisions` there but honours it, caching the
/// approval for identical commands for the rest of the session (measured, like `decline`, which
/// is honoured without being listed).
fn command_scopes(p: &wire::CommandApproval) -> Vec<Scope> {
    let listed = |decision: &str| p.available_decisions.as_deref().is_none_or(|list| offers(list, decision));
    let plain_command = p.kind.as_deref().is_none_or(|k| k == "command") && p.network_approval_context.is_none();
    let mut scopes = Vec::new();
    if listed("accept") {
        scopes.push(Scope::Once);
    }
    if listed("acceptForSession") || (plain_command && listed("accept")) {
        scopes.push(Scope::Session);
    }
    scopes
}

fn file_approval(provider_ref: String, p: wire::FileApproval, changes: Vec<FileChangeEntry>) -> Built {
    let paths: Vec<&str> = changes.iter().map(|c| c.path.as_str()).collect();
    let prompt = match (p.reason.as_deref().filter(|r| !r.is_empty()), paths.is_empty()) {
        (Some(reason), _) => reason.to_owned(),
        (None, false) => format!("Apply changes to {}", paths.join(", ")),
        (None, true) => "Apply file changes".to_owned(),
    };
    let diff: String = changes
        .iter()
        .map(|c| format!("*** {} {}\n{}", c.change, c.path, c.diff.as_deref().unwrap_or_default()))
        .collect();
    let mut spec = RequestSpec::new(RequestKind::FileChangeApproval, prompt, provider_ref)
        .scopes([Scope::Once, Scope::Session])
        .meta("changes", serde_json::to_value(&changes).unwrap_or_default())
        .meta("diff", diff);
    spec = meta_opt(spec, "item_id", p.item_id);
    spec = meta_opt(spec, "reason", p.reason);
    spec = meta_opt(spec, "grant_root", p.grant_root);
    Built::Ask { spec, kind: PendingKind::FileChange }
}

fn question(q: wire::UserQuestion) -> Question {
    let choices = q
        .options
        .unwrap_or_default()
        .into_iter()
        .map(|o| Choice { value: o.label.clone(), label: o.label, description: o.description })
        .collect();
    Question {
        id: q.id,
        header: q.header.filter(|h| !h.is_empty()),
        prompt: q.question,
        choices,
        multi_select: false,
        allow_other: q.is_other,
        secret: q.is_secret,
    }
}

fn offers(list: &[Value], decision: &str) -> bool {
    list.iter().any(|d| d.as_str() == Some(decision) || d.get(decision).is_some())
}
