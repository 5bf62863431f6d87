//! The requests codex sends and waits on (approvals, questions, elicitations, the legacy
//! approvals), parsed by method into tolerant private types like the rest of the wire format.

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use super::{Ids, params};

/// `item/commandExecution/requestApproval`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CommandApproval {
    #[serde(flatten)]
    pub(crate) ids: Ids,
    #[serde(default)]
    pub(crate) kind: Option<String>,
    #[serde(default)]
    pub(crate) item_id: Option<String>,
    #[serde(default)]
    pub(crate) command: Option<String>,
    #[serde(default)]
    pub(crate) cwd: Option<String>,
    #[serde(default)]
    pub(crate) reason: Option<String>,
    #[serde(default)]
    pub(crate) available_decisions: Option<Vec<Value>>,
    #[serde(default)]
    pub(crate) proposed_execpolicy_amendment: Option<Value>,
    #[serde(default)]
    pub(crate) proposed_network_policy_amendments: Option<Vec<Value>>,
    #[serde(default)]
    pub(crate) network_approval_context: Option<Value>,
    #[serde(default)]
    pub(crate) command_actions: Option<Value>,
}

/// `item/fileChange/requestApproval`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FileApproval {
    #[serde(flatten)]
    pub(crate) ids: Ids,
    #[serde(default)]
    pub(crate) item_id: Option<String>,
    #[serde(default)]
    pub(crate) reason: Option<String>,
    #[serde(default)]
    pub(crate) grant_root: Option<String>,
}

/// `item/permissions/requestApproval`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PermissionsApproval {
    #[serde(flatten)]
    pub(crate) ids: Ids,
    #[serde(default)]
    pub(crate) item_id: Option<String>,
    #[serde(default)]
    pub(crate) cwd: Option<String>,
    #[serde(default)]
    pub(crate) reason: Option<String>,
    #[serde(default)]
    pub(crate) permissions: Value,
}

/// `item/tool/requestUserInput`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct UserInput {
    #[serde(flatten)]
    pub(crate) ids: Ids,
    #[serde(default)]
    pub(crate) item_id: Option<String>,
    pub(crate) questions: Vec<UserQuestion>,
}

/// One question of `item/tool/requestUserInput`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct UserQuestion {
    pub(crate) id: String,
    #[serde(default)]
    pub(crate) header: Option<String>,
    #[serde(default)]
    pub(crate) question: String,
    #[serde(default)]
    pub(crate) options: Option<Vec<UserOption>>,
    #[serde(default)]
    pub(crate) is_other: bool,
    #[serde(default)]
    pub(crate) is_secret: bool,
}

/// One offered answer.
#[derive(Debug, Deserialize)]
pub(crate) struct UserOption {
    pub(crate) label: String,
    #[serde(default)]
    pub(crate) description: Option<String>,
}

/// `mcpServer/elicitation/request`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Elicitation {
    #[serde(flatten)]
    pub(crate) ids: Ids,
    #[serde(default)]
    pub(crate) server_name: Option<String>,
    #[serde(default)]
    pub(crate) message: Option<String>,
    #[serde(default)]
    pub(crate) mode: Option<String>,
    #[serde(default)]
    pub(crate) requested_schema: Option<Value>,
    #[serde(default)]
    pub(crate) url: Option<String>,
    #[serde(default)]
    pub(crate) elicitation_id: Option<String>,
    /// Codex's own marks: `codex_approval_kind: "mcp_tool_call"` makes the elicitation codex's
    /// approval of an MCP tool call (`tool_name`, `tool_params`, `tool_description`).
    #[serde(default, rename = "_meta")]
    pub(crate) meta: Option<Value>,
}

/// The legacy `execCommandApproval`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct LegacyExec {
    #[serde(default)]
    pub(crate) call_id: Option<String>,
    #[serde(default)]
    pub(crate) command: Vec<String>,
    #[serde(default)]
    pub(crate) cwd: Option<String>,
    #[serde(default)]
    pub(crate) reason: Option<String>,
}

/// The legacy `applyPatchApproval`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct LegacyPatch {
    #[serde(default)]
    pub(crate) call_id: Option<String>,
    #[serde(default)]
    pub(crate) file_changes: Value,
    #[serde(default)]
    pub(crate) reason: Option<String>,
}

/// A request from codex, parsed by method.
#[derive(Debug)]
pub(crate) enum ServerRequest {
    CommandApproval(CommandApproval),
    FileApproval(FileApproval),
    Permissions(PermissionsApproval),
    UserInput(UserInput),
    Elicitation(Elicitation),
    LegacyExec(LegacyExec),
    LegacyPatch(LegacyPatch),
    /// `item/tool/call`: a dynamic tool, which this client never registers.
    DynamicToolCall {
        ids: Ids,
    },
    /// A method this client does not answer (or whose params did not fit).
    Unsupported {
        method: String,
        ids: Ids,
        known: bool,
    },
}

/// Server requests codex 0.171.0 declares.
pub(super) const KNOWN_REQUESTS: &[&str] = &[
    "account/chatgptAuthTokens/refresh",
    "applyPatchApproval",
    "attestation/generate",
    "execCommandApproval",
    "item/commandExecution/requestApproval",
    "item/fileChange/requestApproval",
    "item/permissions/requestApproval",
    "item/tool/call",
    "item/tool/requestUserInput",
    "mcpServer/elicitation/request",
];

impl ServerRequest {
    pub(super) fn parse(method: &str, raw: Option<&RawValue>) -> ServerRequest {
        let parsed = match method {
            "item/commandExecution/requestApproval" => params(raw).map(ServerRequest::CommandApproval),
            "item/fileChange/requestApproval" => params(raw).map(ServerRequest::FileApproval),
            "item/permissions/requestApproval" => params(raw).map(ServerRequest::Permissions),
            "item/tool/requestUserInput" => params(raw).map(ServerRequest::UserInput),
            "mcpServer/elicitation/request" => params(raw).map(ServerRequest::Elicitation),
            "execCommandApproval" => params(raw).map(ServerRequest::LegacyExec),
            "applyPatchApproval" => params(raw).map(ServerRequest::LegacyPatch),
            "item/tool/call" => Some(ServerRequest::DynamicToolCall { ids: params(raw).unwrap_or_default() }),
            _ => None,
        };
        parsed.unwrap_or_else(|| ServerRequest::Unsupported {
            method: method.to_owned(),
            ids: params(raw).unwrap_or_default(),
            known: KNOWN_REQUESTS.binary_search(&method).is_ok(),
        })
    }

    /// The thread and turn the request names (legacy requests name neither).
    pub(crate) fn ids(&self) -> Ids {
        match self {
            ServerRequest::CommandApproval(p) => p.ids.clone(),
            ServerRequest::FileApproval(p) => p.ids.clone(),
            ServerRequest::Permissions(p) => p.ids.clone(),
            ServerRequest::UserInput(p) => p.ids.clone(),
            ServerRequest::Elicitation(p) => p.ids.clone(),
            ServerRequest::DynamicToolCall { ids } | ServerRequest::Unsupported { ids, .. } => ids.clone(),
            ServerRequest::LegacyExec(_) | ServerRequest::LegacyPatch(_) => Ids::default(),
        }
    }
}
