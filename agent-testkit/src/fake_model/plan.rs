//! The wire-neutral form of an answer: what a [`Step`] means for one request, before an endpoint
//! renders it as SSE frames or a JSON error.

use std::time::Duration;

use serde_json::Value;

use super::Wire;
use super::tools;
use crate::scenario::Step;

/// Size of the deltas a `text` step is cut into, in characters.
const TEXT_DELTA_CHARS: usize = 16;

/// The answer to one model request.
#[derive(Debug)]
pub(crate) enum Plan {
    /// A streamed answer made of blocks.
    Stream { blocks: Vec<Block>, end: StreamEnd },
    /// An HTTP error.
    Error { status: u16, message: String, reset_after_s: Option<u64> },
}

/// How a streamed answer ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StreamEnd {
    /// The endpoint's normal terminal frames, then the end of the body.
    Complete,
    /// No terminal frames: keep-alive comments until the client hangs up.
    Stall,
    /// No terminal frames: the connection is dropped.
    Disconnect,
}

/// One output item of a streamed answer.
#[derive(Debug)]
pub(crate) enum Block {
    /// Assistant text, streamed as these deltas with `delay` before each one.
    Text { deltas: Vec<String>, delay: Duration },
    /// A tool call.
    Tool(ToolCall),
}

/// A tool call in wire-neutral form.
#[derive(Debug)]
pub(crate) struct ToolCall {
    pub(crate) name: String,
    pub(crate) input: ToolInput,
}

/// Arguments of a tool call.
#[derive(Debug)]
pub(crate) enum ToolInput {
    /// A JSON object (function tools).
    Json(Value),
    /// Free-form text (Codex custom tools such as `apply_patch`).
    Freeform(String),
}

impl Block {
    pub(crate) fn text(text: &str) -> Block {
        Block::Text { deltas: split_text(text), delay: Duration::ZERO }
    }
}

impl Plan {
    /// What `step` answers to a request of `wire` whose JSON body is `body`.
    pub(crate) fn for_step(step: &Step, wire: Wire, body: &Value) -> Plan {
        let complete = |blocks| Plan::Stream { blocks, end: StreamEnd::Complete };
        match step {
            Step::Text { text } => complete(vec![Block::text(text)]),
            Step::Deltas { deltas, delay_ms } => {
                complete(vec![Block::Text { deltas: deltas.clone(), delay: Duration::from_millis(*delay_ms) }])
            }
            Step::Echo { prefix } => {
                let prompt = wire.latest_user_text(body).unwrap_or_default();
                complete(vec![Block::text(&format!("{prefix}{prompt}"))])
            }
            Step::QuoteToolResult { prefix } => {
                let output = wire.latest_tool_result(body).unwrap_or_else(|| "(no tool result in the request)".into());
                complete(vec![Block::text(&format!("{prefix}{output}"))])
            }
            Step::Shell { .. } | Step::WriteFile { .. } | Step::EditFile { .. } | Step::AskUser { .. } => {
                complete(vec![Block::Tool(tools::call_for(step, &wire.tool_names(body), wire))])
            }
            Step::ToolCall { name, arguments } => {
                let input = match arguments {
                    Value::String(text) => ToolInput::Freeform(text.clone()),
                    other => ToolInput::Json(other.clone()),
                };
                complete(vec![Block::Tool(ToolCall { name: name.clone(), input })])
            }
            Step::Stall { text } => Plan::Stream { blocks: vec![Block::text(text)], end: StreamEnd::Stall },
            Step::Disconnect { text } => Plan::Stream { blocks: vec![Block::text(text)], end: StreamEnd::Disconnect },
            Step::HttpError { status, message, reset_after_s } => {
                Plan::Error { status: *status, message: message.clone(), reset_after_s: *reset_after_s }
            }
        }
    }
}

/// Cuts `text` into deltas of at most [`TEXT_DELTA_CHARS`] characters.
fn split_text(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(TEXT_DELTA_CHARS).map(|chunk| chunk.iter().collect()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_split_on_char_boundaries() {
        let text = "héllo wörld, this is a longer answer";
        let deltas = split_text(text);
        assert!(deltas.len() > 1);
        assert!(deltas.iter().all(|d| d.chars().count() <= TEXT_DELTA_CHARS));
        assert_eq!(deltas.concat(), text);
        assert!(split_text("").is_empty());
    }
}
