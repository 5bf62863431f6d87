//! Server requests → [`RequestSpec`]s, and [`Response`]s → the JSON codex expects.

use agent_core::event::FileChangeEntry;
use agent_core::request::RequestSpec;
use agent_core::{Answer, Choice, Error, Question, RequestKind, Response, Result, Scope, TurnId};
use serde_json::{Map, Value, json};

use crate::wire::{self, RpcId, ServerRequest};

/// JSON-RPC "method not found", for server requests this client does not serve.
const METHOD_NOT_FOUND: i64 = -32601;
/// JSON-RPC "invalid params", for a known server request whose params did not parse.
const INVALID_PARAMS: i64 = -32602;
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

/// The answer to send for a response, and whether the turn must also be interrupted (a cancel
/// of a request kind codex has no cancel decision for).
#[derive(Debug, PartialEq)]
pub(crate) struct Encoded {
    pub(crate) result: Value,
    pub(crate) interrupt: bool,
}

impl Encoded {
    fn answer(result: Value) -> Self {
        Encoded { result, interrupt: false }
    }
}

/// Encodes `response` for `pending`. Errors are definite: nothing was sent.
pub(crate) fn encode(pending: &PendingRequest, kind: RequestKind, response: &Response) -> Result<Encoded> {
    let mismatch = || Error::ResponseKindMismatch { kind, action: response.action() };
    match (&pending.kind, response) {
        (PendingKind::Command { scopes, .. }, Response::Approve { scope }) => {
            if !scopes.contains(scope) {
                return Err(Error::UnsupportedScope { scope: *scope });
            }
            let decision = if *scope == Scope::Session { "acceptForSession" } else { "accept" };
            Ok(Encoded::answer(json!({ "decision": decision })))
        }
        (PendingKind::FileChange, Response::Approve { scope }) => {
            let decision = if *scope == Scope::Session { "acceptForSession" } else { "accept" };
            Ok(Encoded::answer(json!({ "decision": decision })))
        }
        (PendingKind::Command { offered, .. }, Response::Choose { value }) => {
            match offered.iter().find(|o| o.value == *value) {
                Some(offered) => Ok(Encoded::answer(json!({ "decision": offered.decision }))),
                None => Err(unoffered(value, offered)),
            }
        }
        (_, Response::Choose { value }) => Err(unoffered(value, &[])),
        (PendingKind::Command { .. } | PendingKind::FileChange, Response::Deny { .. }) => {
            Ok(Encoded::answer(json!({ "decision": "decline" })))
        }
        (PendingKind::Command { .. } | PendingKind::FileChange, Response::Cancel { .. }) => {
            Ok(Encoded::answer(json!({ "decision": "cancel" })))
        }
        (PendingKind::Permissions { requested }, Response::Approve { scope }) => {
            let scope = if *scope == Scope::Session { "session" } else { "turn" };
            Ok(Encoded::answer(json!({ "permissions": requested, "scope": scope })))
        }
        (PendingKind::Permissions { .. }, Response::Deny { .. } | Response::Cancel { .. }) => {
            Ok(Encoded { result: json!({ "permissions": {} }), interrupt: matches!(response, Response::Cancel { .. }) })
        }
        (PendingKind::Question { ids }, Response::Answer { answer }) => {
            Ok(Encoded::answer(json!({ "answers": question_answers(ids, answer)? })))
        }
        (PendingKind::Question { ids }, Response::Deny { .. } | Response::Cancel { .. }) => {
            let empty: Map<String, Value> = ids.iter().map(|id| (id.clone(), json!({ "answers": [] }))).collect();
            Ok(Encoded { result: json!({ "answers": empty }), interrupt: matches!(response, Response::Cancel { .. }) })
        }
        (PendingKind::Elicitation, Response::Answer { answer }) => {
            let content = match answer {
                Answer::Content(value) => value.clone(),
                Answer::ByQuestion(map) => Value::Object(
                    map.iter()
                        .map(|(k, v)| {
                            let value = match v.as_slice() {
                                [one] => Value::String(one.clone()),
                                many => json!(many),
                            };
                            (k.clone(), value)
                        })
                        .collect(),
                ),
                _ => return Err(mismatch()),
            };
            Ok(Encoded::answer(json!({ "action": "accept", "content": content })))
        }
        (PendingKind::ToolCall, Response::Approve { scope: Scope::Once }) => {
            Ok(Encoded::answer(json!({ "action": "accept", "content": {} })))
        }
        (PendingKind::ToolCall, Response::Approve { scope }) => Err(Error::UnsupportedScope { scope: *scope }),
        (PendingKind::ToolCall, Response::Deny { .. }) => Ok(Encoded::answer(json!({ "action": "decline" }))),
        (PendingKind::ToolCall, Response::Cancel { .. }) => Ok(Encoded::answer(json!({ "action": "cancel" }))),
        (PendingKind::Elicitation, Response::Deny { .. }) => Ok(Encoded::answer(json!({ "action": "decline" }))),
        (PendingKind::Elicitation, Response::Cancel { .. }) => Ok(Encoded::answer(json!({ "action": "cancel" }))),
        (PendingKind::Legacy, Response::Approve { scope }) => {
            let decision = if *scope == Scope::Session { "approved_for_session" } else { "approved" };
            Ok(Encoded::answer(json!({ "decision": decision })))
        }
        (PendingKind::Legacy, Response::Deny { reason }) => {
            let rejection = reason.clone().unwrap_or_else(|| "denied by the user".into());
            Ok(Encoded::answer(json!({ "decision": { "denied": { "rejection": rejection } } })))
        }
        (PendingKind::Legacy, Response::Cancel { .. }) => Ok(Encoded::answer(json!({ "decision": "abort" }))),
        _ => Err(mismatch()),
    }
}

/// A `Response::Choose` naming a decision the request does not offer.
fn unoffered(value: &str, offered: &[Offered]) -> Error {
    let names: Vec<String> = offered.iter().map(|o| format!("`{}`", o.value)).collect();
    Error::InvalidResponse(if names.is_empty() {
        format!("`{value}` is not a choice of this request: codex offered none")
    } else {
        format!("`{value}` is not a choice of this request; codex offered {}", names.join(", "))
    })
}

fn question_answers(ids: &[String], answer: &Answer) -> Result<Map<String, Value>> {
    let single = |values: Vec<String>| -> Result<Map<String, Value>> {
        match ids {
            [id] => Ok(Map::from_iter([(id.clone(), json!({ "answers": values }))])),
            _ => Err(Error::InvalidResponse(format!(
                "the request has {} questions; answer with a map keyed by question id",
                ids.len()
            ))),
        }
    };
    match answer {
        Answer::Text(text) => single(vec![text.clone()]),
        Answer::Many(values) => single(values.clone()),
        Answer::ByQuestion(map) => {
            if let Some(missing) = ids.iter().find(|id| !map.contains_key(*id)) {
                return Err(Error::MissingAnswer { question_id: missing.clone() });
            }
            Ok(ids.iter().map(|id| (id.clone(), json!({ "answers": map[id] }))).collect())
        }
        _ => Err(Error::InvalidResponse("questions are answered with text".into())),
    }
}

/// The answer to a dynamic tool call: this client registers no tools.
fn no_dynamic_tools() -> Value {
    json!({
        "success": false,
        "contentItems": [{"type": "inputText", "text": "this client registers no dynamic tools"}],
    })
}

/// The answer to a request of `method` whose line was too long to read (only its first bytes,
/// naming it, were): decline, or its closest equivalent, as for a request no turn can take; a
/// JSON-RPC error for a method this provider does not answer.
pub(crate) fn decline_unread(method: &str) -> std::result::Result<Value, wire::AnswerError> {
    let kind = match method {
        "item/commandExecution/requestApproval" => PendingKind::Command { scopes: Vec::new(), offered: Vec::new() },
        "item/fileChange/requestApproval" => PendingKind::FileChange,
        "item/permissions/requestApproval" => PendingKind::Permissions { requested: Value::Null },
        "item/tool/requestUserInput" => PendingKind::Question { ids: Vec::new() },
        "mcpServer/elicitation/request" => PendingKind::Elicitation,
        "execCommandApproval" | "applyPatchApproval" => {
            return Ok(json!({ "decision": { "denied": { "rejection": "the request was too long to read" } } }));
        }
        "item/tool/call" => return Ok(no_dynamic_tools()),
        _ => {
            let message = format!("agent-harness could not read `{method}`: its line was over `max_line_bytes`");
            return Err(wire::AnswerError { code: INVALID_PARAMS, message });
        }
    };
    Ok(auto_decline(&kind))
}

/// The answer sent when a request cannot reach the host (no turn is running): decline, or its
/// closest equivalent.
pub(crate) fn auto_decline(kind: &PendingKind) -> Value {
    match kind {
        PendingKind::Command { .. } | PendingKind::FileChange => json!({ "decision": "decline" }),
        PendingKind::Permissions { .. } => json!({ "permissions": {} }),
        PendingKind::Question { ids } => {
            json!({ "answers": ids.iter().map(|id| (id.clone(), json!({ "answers": [] }))).collect::<Map<_, _>>() })
        }
        PendingKind::Elicitation | PendingKind::ToolCall => json!({ "action": "decline" }),
        PendingKind::Legacy => json!({ "decision": { "denied": { "rejection": "no turn is running" } } }),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn pending(kind: PendingKind) -> PendingRequest {
        PendingRequest { id: RpcId::Num(1), turn: TurnId::from_string("t"), foreign: false, kind }
    }

    fn command(params: Value) -> wire::CommandApproval {
        serde_json::from_value(params).unwrap()
    }

    #[track_caller]
    fn check_scopes(params: Value, expected: &[Scope]) {
        assert_eq!(command_scopes(&command(params)), expected);
    }

    #[test]
    fn command_scopes_follow_what_codex_honours() {
        check_scopes(json!({}), &[Scope::Once, Scope::Session]);
        check_scopes(json!({"availableDecisions": ["accept", "cancel"]}), &[Scope::Once, Scope::Session]);
        check_scopes(json!({"kind": "writeStdin", "availableDecisions": ["accept", "decline"]}), &[Scope::Once]);
        check_scopes(
            json!({"kind": "writeStdin", "availableDecisions": ["accept", "acceptForSession"]}),
            &[Scope::Once, Scope::Session],
        );
        check_scopes(
            json!({"networkApprovalContext": {"host": "x", "protocol": "https"}, "availableDecisions": ["accept"]}),
            &[Scope::Once],
        );
        check_scopes(json!({"availableDecisions": ["decline", "cancel"]}), &[]);
    }

    #[track_caller]
    fn check_choices(params: Value, expected: &[(&str, Value)]) {
        let (offered, choices, _) = command_choices(&command(params));
        let got: Vec<(&str, &Value)> = offered.iter().map(|o| (o.value.as_str(), &o.decision)).collect();
        let expected: Vec<(&str, &Value)> = expected.iter().map(|(v, d)| (*v, d)).collect();
        assert_eq!(got, expected);
        let values: Vec<&str> = choices.iter().map(|c| c.value.as_str()).collect();
        assert_eq!(values, expected.iter().map(|(v, _)| *v).collect::<Vec<_>>());
    }

    #[test]
    fn offered_amendments_become_choices() {
        let execpolicy = json!({"acceptWithExecpolicyAmendment": {"execpolicy_amendment": ["cargo", "test"]}});
        let allow = json!({"host": "crates.io", "action": "allow"});
        let network = json!({"applyNetworkPolicyAmendment": {"network_policy_amendment": allow}});
        check_choices(
            json!({"availableDecisions": ["accept", execpolicy, "cancel"]}),
            &[(EXECPOLICY_AMENDMENT, execpolicy.clone())],
        );
        check_choices(
            json!({"availableDecisions": ["accept", "acceptForSession", network, "cancel"]}),
            &[(NETWORK_POLICY_AMENDMENT, network.clone())],
        );
        // Only what codex lists is offered; a repeat or an unknown shape is not.
        check_choices(json!({"availableDecisions": ["accept", "cancel"], "proposedExecpolicyAmendment": ["ls"]}), &[]);
        check_choices(
            json!({"availableDecisions": [execpolicy, {"acceptWithExecpolicyAmendment": {"execpolicy_amendment": ["x"]}},
                                          {"somethingNew": {}}, {"acceptWithExecpolicyAmendment": {}}]}),
            &[(EXECPOLICY_AMENDMENT, execpolicy.clone())],
        );
        // Without a list, what codex offers by default.
        check_choices(json!({"proposedExecpolicyAmendment": ["cargo", "test"]}), &[(EXECPOLICY_AMENDMENT, execpolicy)]);
        check_choices(
            json!({"networkApprovalContext": {"host": "crates.io", "protocol": "https"}, "proposedExecpolicyAmendment": ["curl"],
                   "proposedNetworkPolicyAmendments": [{"host": "crates.io", "action": "deny"}, allow]}),
            &[(NETWORK_POLICY_AMENDMENT, network)],
        );
        check_choices(json!({"proposedExecpolicyAmendment": []}), &[]);
    }

    #[test]
    fn amendment_choices_say_what_they_allow() {
        let deny = json!({"applyNetworkPolicyAmendment": {"network_policy_amendment": {"host": "evil.test", "action": "deny"}}});
        let (choice, (key, amendment)) = amendment_choice(&deny).expect("a choice");
        assert_eq!(choice.value, NETWORK_POLICY_AMENDMENT);
        assert!(choice.description.as_deref().unwrap().contains("blocks connections to `evil.test`"), "{choice:?}");
        assert_eq!((key, amendment), ("network_policy_amendment", json!({"host": "evil.test", "action": "deny"})));
        let execpolicy = json!({"acceptWithExecpolicyAmendment": {"execpolicy_amendment": ["npm", "run", "lint"]}});
        let (choice, (key, _)) = amendment_choice(&execpolicy).expect("a choice");
        assert!(choice.description.as_deref().unwrap().contains("starting with `npm run lint`"), "{choice:?}");
        assert_eq!(key, "execpolicy_amendment");
        assert!(amendment_choice(&json!("accept")).is_none());
    }

    #[test]
    fn choose_sends_the_offered_decision_as_codex_listed_it() {
        let decision = json!({"acceptWithExecpolicyAmendment": {"execpolicy_amendment": ["cargo", "test"]}});
        let offered = vec![Offered { value: EXECPOLICY_AMENDMENT.into(), decision: decision.clone() }];
        let approval = pending(PendingKind::Command { scopes: vec![Scope::Once], offered });
        let kind = RequestKind::CommandApproval;
        let encoded = encode(&approval, kind, &Response::choose(EXECPOLICY_AMENDMENT)).unwrap();
        assert_eq!(encoded, Encoded { result: json!({"decision": decision}), interrupt: false });
        match encode(&approval, kind, &Response::choose(NETWORK_POLICY_AMENDMENT)) {
            Err(Error::InvalidResponse(message)) => assert!(message.contains("`accept_with_execpolicy_amendment`")),
            other => panic!("expected InvalidResponse, got {other:?}"),
        }
        let file = pending(PendingKind::FileChange);
        let refused = encode(&file, RequestKind::FileChangeApproval, &Response::choose(EXECPOLICY_AMENDMENT));
        assert!(matches!(refused, Err(Error::InvalidResponse(_))), "{refused:?}");
        // Approve keeps its meaning next to the choices.
        assert_eq!(encode(&approval, kind, &Response::approve()).unwrap().result, json!({"decision": "accept"}));
    }

    #[test]
    fn a_shell_wrapped_command_gives_its_script() {
        let cases = [
            (
                "/bin/bash -lc 'touch approved.txt && echo created-file'",
                Some("touch approved.txt && echo created-file"),
            ),
            ("bash -lc ls", Some("ls")),
            ("/bin/zsh -lc 'echo '\\''hi'\\'''", Some("echo 'hi'")),
            ("/bin/sh -c 'a b'\\ c", Some("a b c")),
            ("/bin/bash -lc 'cargo test' extra", None),
            ("/bin/bash -lc \"cargo test\"", None),
            ("/bin/bash -lc $(curl x)", None),
            ("/bin/bash -lc 'unterminated", None),
            ("/bin/bash -lc ''", None),
            ("/bin/bash -lc", None),
            ("/usr/bin/fish -c 'cargo test'", None),
            ("/bin/bash -x 'cargo test'", None),
            ("cargo test -p x", None),
        ];
        for (line, script) in cases {
            assert_eq!(shell_script(line).as_deref(), script, "{line}");
        }
    }

    /// A policy allowing `cargo test` allows it as codex asks for it, through its shell, and
    /// still not what runs more than that.
    #[test]
    fn a_policy_matches_the_script_codex_runs_through_a_shell() {
        let policy = agent_core::handler::RequestPolicy::new().approve_commands(["cargo test"]);
        let decide = |request: ServerRequest| {
            let Built::Ask { spec, .. } = build(&RpcId::Num(1), request, |_| None) else { panic!("asked") };
            let request: agent_core::Request = serde_json::from_value(json!({
                "id": "req_1", "session_id": "s", "turn_id": "t", "kind": spec.kind, "prompt": spec.prompt,
                "scopes": spec.scopes, "metadata": spec.metadata, "status": "pending", "provider_ref": "1",
                "created_at": "2026-01-01T00:00:00Z",
            }))
            .expect("a request");
            (spec.metadata["command"].clone(), policy.decide(&request))
        };
        let modern = |line: &str| {
            let params = json!({"threadId": "th", "turnId": "tu", "itemId": "i", "command": line});
            ServerRequest::CommandApproval(serde_json::from_value(params).unwrap())
        };
        let legacy = |argv: &[&str]| {
            ServerRequest::LegacyExec(serde_json::from_value(json!({"callId": "c", "command": argv})).unwrap())
        };
        let approve = Some(Response::approve());
        assert_eq!(decide(modern("/bin/bash -lc 'cargo test -p x'")), (json!("cargo test -p x"), approve.clone()));
        assert_eq!(decide(legacy(&["/bin/zsh", "-lc", "cargo test"])), (json!("cargo test"), approve));
        assert_eq!(decide(modern("/bin/bash -lc 'cargo test && rm -rf ~'")).1, None);
        assert_eq!(decide(legacy(&["cargo", "test;", "rm"])), (json!("cargo test; rm"), None));
    }

    #[test]
    fn legacy_approvals_use_review_decisions() {
        let legacy = pending(PendingKind::Legacy);
        let kind = RequestKind::CommandApproval;
        let encode = |r: Response| encode(&legacy, kind, &r).unwrap().result;
        assert_eq!(encode(Response::approve()), json!({"decision": "approved"}));
        assert_eq!(encode(Response::approve_with(Scope::Session)), json!({"decision": "approved_for_session"}));
        assert_eq!(encode(Response::deny("too risky")), json!({"decision": {"denied": {"rejection": "too risky"}}}));
        assert_eq!(encode(Response::cancel("stop")), json!({"decision": "abort"}));
    }

    #[test]
    fn elicitations_take_content_or_answers_by_field() {
        let elicitation = pending(PendingKind::Elicitation);
        let by_field = Response::Answer {
            answer: Answer::ByQuestion(BTreeMap::from([
                ("root".to_owned(), vec!["/srv".to_owned()]),
                ("tags".to_owned(), vec!["a".to_owned(), "b".to_owned()]),
            ])),
        };
        let encoded = encode(&elicitation, RequestKind::McpElicitation, &by_field).unwrap();
        assert_eq!(encoded.result, json!({"action": "accept", "content": {"root": "/srv", "tags": ["a", "b"]}}));
        let text = encode(&elicitation, RequestKind::McpElicitation, &Response::answer("x"));
        assert!(matches!(text, Err(Error::ResponseKindMismatch { .. })));
        let cancel = encode(&elicitation, RequestKind::McpElicitation, &Response::cancel("no")).unwrap();
        assert_eq!(cancel, Encoded { result: json!({"action": "cancel"}), interrupt: false });
    }

    /// Codex asks to run an MCP tool through the elicitation method; it is an approval.
    #[test]
    fn an_mcp_tool_call_codex_asks_about_is_an_approval() {
        let params = json!({
            "threadId": "th", "turnId": "tu", "serverName": "echo", "mode": "form",
            "message": "Allow the echo MCP server to run tool \"echo\"?", "requestedSchema": {"type": "object", "properties": {}},
            "_meta": {"codex_approval_kind": "mcp_tool_call", "persist": ["session", "always"],
                      "tool_name": "echo", "tool_params": {"text": "ping"}},
        });
        let request = ServerRequest::Elicitation(serde_json::from_value(params).unwrap());
        let Built::Ask { spec, kind } = build(&RpcId::Num(7), request, |_| None) else { panic!("asked") };
        assert_eq!(spec.kind, RequestKind::Permission);
        assert!(spec.kind.is_approval());
        assert_eq!(spec.scopes, [Scope::Once]);
        assert_eq!(spec.metadata["tool"], "echo");
        assert_eq!(spec.metadata["server_name"], "echo");
        assert_eq!(spec.metadata["input"], json!({"text": "ping"}));
        let call = pending(kind);
        let encode = |response: &Response| encode(&call, RequestKind::Permission, response);
        assert_eq!(encode(&Response::approve()).unwrap().result, json!({"action": "accept", "content": {}}));
        assert_eq!(encode(&Response::deny("no")).unwrap().result, json!({"action": "decline"}));
        assert!(matches!(
            encode(&Response::approve_with(Scope::Session)),
            Err(Error::UnsupportedScope { scope: Scope::Session })
        ));
        assert_eq!(auto_decline(&call.kind), json!({"action": "decline"}));
    }

    #[test]
    fn refusals_are_detected_before_sending() {
        let question = pending(PendingKind::Question { ids: vec!["a".into(), "b".into()] });
        let kind = RequestKind::Question;
        assert!(matches!(encode(&question, kind, &Response::answer("x")), Err(Error::InvalidResponse(_))));
        assert!(matches!(
            encode(&question, kind, &Response::answers([("a", "1")])),
            Err(Error::MissingAnswer { question_id }) if question_id == "b"
        ));
        assert!(matches!(encode(&question, kind, &Response::approve()), Err(Error::ResponseKindMismatch { .. })));
        let once_only = pending(PendingKind::Command { scopes: vec![Scope::Once], offered: Vec::new() });
        assert!(matches!(
            encode(&once_only, RequestKind::CommandApproval, &Response::approve_with(Scope::Session)),
            Err(Error::UnsupportedScope { scope: Scope::Session })
        ));
        let permissions = pending(PendingKind::Permissions { requested: json!({"network": {"enabled": true}}) });
        let cancel = encode(&permissions, RequestKind::Permission, &Response::cancel("no")).unwrap();
        assert_eq!(cancel, Encoded { result: json!({"permissions": {}}), interrupt: true });
    }

    #[test]
    fn requests_without_a_turn_are_declined_in_kind() {
        assert_eq!(auto_decline(&PendingKind::FileChange), json!({"decision": "decline"}));
        // A request too long to read is declined by its method alone.
        assert_eq!(decline_unread("item/fileChange/requestApproval").unwrap(), json!({"decision": "decline"}));
        assert_eq!(decline_unread("item/tool/requestUserInput").unwrap(), json!({"answers": {}}));
        assert_eq!(decline_unread("mcpServer/elicitation/request").unwrap(), json!({"action": "decline"}));
        assert_eq!(decline_unread("item/tool/call").unwrap()["success"], false);
        assert!(decline_unread("applyPatchApproval").unwrap()["decision"]["denied"].is_object());
        assert_eq!(decline_unread("account/somethingNew").unwrap_err().code, INVALID_PARAMS);
        assert_eq!(
            auto_decline(&PendingKind::Question { ids: vec!["q".into()] }),
            json!({"answers": {"q": {"answers": []}}})
        );
        assert_eq!(auto_decline(&PendingKind::Permissions { requested: json!({}) }), json!({"permissions": {}}));
    }
}
