//! What the normalizer reads out of pi's values: tool kinds, texts and usage.

use agent_core::event::{ToolKind, Usage};
use serde_json::Value;

pub(super) fn tool_kind(name: &str) -> ToolKind {
    match name {
        "bash" => ToolKind::Command,
        "edit" | "write" => ToolKind::FileChange,
        _ => ToolKind::Other,
    }
}

/// The text parts of a content array (or a plain string), joined.
pub(super) fn text_of(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => {
            parts.iter().filter(|p| p["type"] == "text").filter_map(|p| p["text"].as_str()).collect::<Vec<_>>().join("")
        }
        _ => String::new(),
    }
}

/// Pi's message usage: `input`, `output`, `cacheRead`, `cacheWrite`, `totalTokens`, `cost.total`.
pub(super) fn usage_of(usage: &Value) -> Option<Usage> {
    let input = usage["input"].as_u64()?;
    let output = usage["output"].as_u64().unwrap_or(0);
    let mut result = Usage::tokens(input, output);
    result.cached_input_tokens = usage["cacheRead"].as_u64();
    result.reasoning_tokens = usage["reasoning"].as_u64();
    if let Some(total) = usage["totalTokens"].as_u64() {
        result.total_tokens = Some(total);
    }
    result.cost_usd = usage["cost"]["total"].as_f64();
    Some(result)
}

/// `get_session_stats`' `tokens` (`input`, `output`, `cacheRead`, `cacheWrite`, `total`) and
/// `cost`.
pub(super) fn stats_usage(tokens: &Value, cost: &Value) -> Option<Usage> {
    let mut usage = Usage::tokens(tokens["input"].as_u64()?, tokens["output"].as_u64().unwrap_or(0));
    usage.cached_input_tokens = tokens["cacheRead"].as_u64();
    if let Some(total) = tokens["total"].as_u64() {
        usage.total_tokens = Some(total);
    }
    usage.cost_usd = cost.as_f64();
    Some(usage)
}

pub(super) fn add_usage(total: &mut Usage, add: &Usage) {
    fn sum(a: &mut Option<u64>, b: Option<u64>) {
        if let Some(b) = b {
            *a = Some(a.unwrap_or(0) + b);
        }
    }
    sum(&mut total.input_tokens, add.input_tokens);
    sum(&mut total.cached_input_tokens, add.cached_input_tokens);
    sum(&mut total.output_tokens, add.output_tokens);
    sum(&mut total.reasoning_tokens, add.reasoning_tokens);
    sum(&mut total.total_tokens, add.total_tokens);
    if let Some(cost) = add.cost_usd {
        total.cost_usd = Some(total.cost_usd.unwrap_or(0.0) + cost);
    }
}
