//! The three model APIs: which requests they are, what they carry, how answers look.

use serde_json::Value;

use super::plan::{Block, StreamEnd, ToolInput};
use super::sse::Frame;
use super::{chat, messages, responses};

/// Usage numbers every answer reports.
pub(crate) const USAGE_INPUT_TOKENS: u64 = 10;
/// See [`USAGE_INPUT_TOKENS`].
pub(crate) const USAGE_OUTPUT_TOKENS: u64 = 5;

/// A model API.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wire {
    /// OpenAI Responses: `POST …/responses`.
    Responses,
    /// Anthropic Messages: `POST …/messages` (`?beta=true` allowed).
    Messages,
    /// OpenAI Chat Completions: `POST …/chat/completions`.
    ChatCompletions,
}

/// Context for rendering one answer.
pub(crate) struct Ctx<'a> {
    /// The `model` of the request (echoed back).
    pub(crate) model: &'a str,
    /// Source of unique ids.
    pub(crate) ids: &'a dyn Fn(&str) -> String,
}

impl Wire {
    /// The text of the latest user message.
    pub(crate) fn latest_user_text(self, body: &Value) -> Option<String> {
        match self {
            Wire::Responses => {
                let input = body.get("input")?;
                if let Value::String(text) = input {
                    return Some(text.clone());
                }
                input
                    .as_array()?
                    .iter()
                    .rev()
                    .find(|item| role(item) == Some("user"))
                    .map(|item| content_text(item.get("content")))
            }
            Wire::Messages => messages_of(body).rev().filter(|m| role(m) == Some("user")).find_map(|m| {
                let text = match m.get("content") {
                    Some(Value::String(text)) => text.clone(),
                    Some(Value::Array(blocks)) => blocks
                        .iter()
                        .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
                        .filter_map(|b| b.get("text").and_then(Value::as_str))
                        .filter(|t| !t.trim_start().starts_with("<system-reminder>"))
                        .collect::<Vec<_>>()
                        .join("\n"),
                    _ => String::new(),
                };
                (!text.is_empty()).then_some(text)
            }),
            Wire::ChatCompletions => {
                messages_of(body).rev().find(|m| role(m) == Some("user")).map(|m| content_text(m.get("content")))
            }
        }
    }

    /// The output of the latest tool result in the request.
    pub(crate) fn latest_tool_result(self, body: &Value) -> Option<String> {
        match self {
            Wire::Responses => body.get("input")?.as_array()?.iter().rev().find_map(|item| {
                let kind = item.get("type").and_then(Value::as_str)?;
                matches!(kind, "function_call_output" | "custom_tool_call_output")
                    .then(|| content_text(item.get("output")))
            }),
            Wire::Messages => messages_of(body).rev().filter(|m| role(m) == Some("user")).find_map(|m| {
                m.get("content")?
                    .as_array()?
                    .iter()
                    .rev()
                    .find(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
                    .map(|b| content_text(b.get("content")))
            }),
            Wire::ChatCompletions => {
                messages_of(body).rev().find(|m| role(m) == Some("tool")).map(|m| content_text(m.get("content")))
            }
        }
    }

    /// The names of the tools the request advertises.
    pub(crate) fn tool_names(self, body: &Value) -> Vec<String> {
        let Some(tools) = body.get("tools").and_then(Value::as_array) else { return Vec::new() };
        tools
            .iter()
            .filter_map(|tool| {
                let name = match self {
                    Wire::ChatCompletions => tool.get("function").and_then(|f| f.get("name")),
                    Wire::Responses | Wire::Messages => tool.get("name"),
                };
                name.or_else(|| tool.get("type")).and_then(Value::as_str).map(str::to_owned)
            })
            .collect()
    }

    /// SSE frames of a streamed answer.
    pub(crate) fn render(self, blocks: &[Block], end: StreamEnd, ctx: &Ctx<'_>) -> Vec<Frame> {
        let complete = end == StreamEnd::Complete;
        match self {
            Wire::Responses => responses::render(blocks, complete, ctx),
            Wire::Messages => messages::render(blocks, complete, ctx),
            Wire::ChatCompletions => chat::render(blocks, complete, ctx),
        }
    }

    /// The JSON body of an error answer.
    pub(crate) fn error_body(self, status: u16, message: &str) -> Value {
        match self {
            Wire::Messages => messages::error_body(status, message),
            Wire::Responses | Wire::ChatCompletions => responses::error_body(status, message),
        }
    }

    /// Headers telling when a rate limit resets, `reset_after_s` seconds from now.
    pub(crate) fn reset_headers(self, reset_after_s: u64) -> Vec<(&'static str, String)> {
        let mut headers = vec![("retry-after", reset_after_s.to_string())];
        match self {
            Wire::Messages => {
                let at = rfc3339_after(reset_after_s);
                headers.push(("anthropic-ratelimit-requests-remaining", "0".to_owned()));
                headers.push(("anthropic-ratelimit-requests-reset", at.clone()));
                headers.push(("anthropic-ratelimit-tokens-reset", at));
            }
            Wire::Responses | Wire::ChatCompletions => {
                headers.push(("x-ratelimit-remaining-requests", "0".to_owned()));
                headers.push(("x-ratelimit-reset-requests", format!("{reset_after_s}s")));
                headers.push(("x-ratelimit-reset-tokens", format!("{reset_after_s}s")));
            }
        }
        headers
    }
}

/// Tool arguments as the JSON string function tools carry.
pub(crate) fn arguments_string(input: &ToolInput) -> String {
    match input {
        ToolInput::Json(value) => value.to_string(),
        ToolInput::Freeform(text) => text.clone(),
    }
}

fn role(item: &Value) -> Option<&str> {
    item.get("role").and_then(Value::as_str)
}

fn messages_of(body: &Value) -> impl DoubleEndedIterator<Item = &Value> {
    body.get("messages").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default().iter()
}

/// The text of a content value: a string, or the `text` / `output` of each part.
fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|part| match part {
                Value::String(text) => Some(text.as_str()),
                other => other.get("text").or_else(|| other.get("output")).and_then(Value::as_str),
            })
            .collect::<Vec<_>>()
            .join(""),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

/// UTC time `seconds` from now as RFC 3339 (`2026-11-29T08:00:00Z`).
fn rfc3339_after(seconds: u64) -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let total = now.as_secs() + seconds;
    let (days, rem) = (total / 86_400, total % 86_400);
    let (year, month, day) = civil_from_days(days);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian calendar.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(20_786), (2026, 11, 29));
    }

    #[test]
    fn claude_user_text_skips_reminders_and_later_system_messages() {
        let body = json!({"messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "<system-reminder>date</system-reminder>"},
                {"type": "text", "text": "Say hello"}
            ]},
            {"role": "system", "content": "Available agent types"}
        ]});
        assert_eq!(Wire::Messages.latest_user_text(&body).as_deref(), Some("Say hello"));
    }

    #[test]
    fn tool_results_per_wire() {
        let responses = json!({"input": [
            {"type": "function_call", "call_id": "c"},
            {"type": "function_call_output", "call_id": "c", "output": "hi\n"}
        ]});
        assert_eq!(Wire::Responses.latest_tool_result(&responses).as_deref(), Some("hi\n"));
        let messages = json!({"messages": [{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": "done"}]}
        ]}]});
        assert_eq!(Wire::Messages.latest_tool_result(&messages).as_deref(), Some("done"));
        let chat = json!({"messages": [{"role": "user", "content": "x"}, {"role": "tool", "content": "out"}]});
        assert_eq!(Wire::ChatCompletions.latest_tool_result(&chat).as_deref(), Some("out"));
        assert_eq!(Wire::ChatCompletions.latest_tool_result(&json!({})), None);
    }
}
