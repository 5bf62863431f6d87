//! Codex's wire values as the harness's: tools, statuses, file changes, reasoning, usage.

use agent_core::Usage;
use agent_core::event::{FileChangeEntry, ToolKind, ToolStatus};
use serde_json::{Value, json};

use crate::wire::{self, Item, Tokens};

/// The tool kind, name and input of a tool item other than commands and file changes.
pub(super) fn tool_of(item: &Item) -> Option<(ToolKind, String, Value)> {
    let named = |default: &str| item.tool.clone().unwrap_or_else(|| default.to_owned());
    match item.kind.as_str() {
        "mcpToolCall" => Some((
            ToolKind::Mcp,
            named("mcp"),
            json!({ "server": item.server, "tool": item.tool, "arguments": item.arguments }),
        )),
        "dynamicToolCall" => {
            Some((ToolKind::Other, named("dynamic_tool"), item.arguments.clone().unwrap_or(Value::Null)))
        }
        "collabAgentToolCall" => Some((ToolKind::Other, named("collab_agent"), Value::Null)),
        "webSearch" => Some((ToolKind::Web, "web_search".into(), json!({ "query": item.query }))),
        "imageView" => Some((ToolKind::Other, "view_image".into(), json!({ "path": item.path }))),
        "imageGeneration" => Some((ToolKind::Other, "image_generation".into(), Value::Null)),
        _ => None,
    }
}

/// A completed item's status, and whether codex wrote one this provider knows (the schema's
/// `completed`, `failed`, `declined`, and a subagent call's `interrupted`; none at all for items
/// without one). An unknown status reads as completed, and the caller says so.
pub(super) fn tool_status(status: Option<&str>) -> (ToolStatus, bool) {
    match status {
        Some("failed") => (ToolStatus::Failed, true),
        Some("declined") => (ToolStatus::Declined, true),
        Some("interrupted") => (ToolStatus::Interrupted, true),
        None | Some("completed") => (ToolStatus::Completed, true),
        Some(_) => (ToolStatus::Completed, false),
    }
}

pub(super) fn step_status(status: &str) -> String {
    match status {
        "inProgress" => "in_progress".into(),
        other => other.to_owned(),
    }
}

pub(super) fn change_entry(change: wire::Change) -> FileChangeEntry {
    let kind = if change.kind.kind.is_empty() { "update".to_owned() } else { change.kind.kind };
    let change_kind = match (&*kind, &change.kind.move_path) {
        ("update", Some(_)) => "move".to_owned(),
        _ => kind,
    };
    FileChangeEntry { path: change.path, change: change_kind, diff: change.diff }
}

pub(super) fn reasoning_text(item: &Item) -> String {
    let strings = |v: Option<&Value>| -> Vec<String> {
        v.and_then(Value::as_array)
            .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_owned)).collect())
            .unwrap_or_default()
    };
    let summary = item.summary.as_ref().map(|s| s.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect());
    let mut parts: Vec<String> = summary.unwrap_or_default();
    parts.extend(strings(item.content.as_ref()));
    parts.join("\n")
}

pub(super) fn usage(tokens: Tokens) -> Usage {
    let mut usage = Usage::default();
    usage.input_tokens = Some(tokens.input_tokens);
    usage.cached_input_tokens = Some(tokens.cached_input_tokens);
    usage.output_tokens = Some(tokens.output_tokens);
    usage.reasoning_tokens = Some(tokens.reasoning_output_tokens);
    usage.total_tokens = Some(tokens.total_tokens);
    usage
}

/// `codexErrorInfo` as a code: the string itself, or the single key of the object form.
pub(super) fn error_code(info: &Value) -> Option<String> {
    match info {
        Value::String(s) => Some(s.clone()),
        Value::Object(map) => map.keys().next().cloned(),
        _ => None,
    }
}
