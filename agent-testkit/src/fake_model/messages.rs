//! Anthropic Messages SSE (`POST /v1/messages?beta=true`), as Claude Code reads it.

use serde_json::{Value, json};

use super::plan::{Block, ToolInput};
use super::sse::{Frame, Frames};
use super::wire::{Ctx, USAGE_INPUT_TOKENS, USAGE_OUTPUT_TOKENS, arguments_string};

pub(super) fn render(blocks: &[Block], complete: bool, ctx: &Ctx<'_>) -> Vec<Frame> {
    let mut frames = Frames::default();
    let usage = json!({
        "input_tokens": USAGE_INPUT_TOKENS,
        "output_tokens": 1,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    });
    let message = json!({
        "id": (ctx.ids)("msg"), "type": "message", "role": "assistant", "model": ctx.model,
        "content": [], "stop_reason": null, "stop_sequence": null, "usage": usage,
    });
    frames.event("message_start", &json!({"type": "message_start", "message": message}));
    frames.event("ping", &json!({"type": "ping"}));
    let mut stop_reason = "end_turn";
    for (index, block) in blocks.iter().enumerate() {
        match block {
            Block::Text { deltas, delay } => {
                let start = json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}});
                frames.event("content_block_start", &start);
                for text in deltas {
                    let delta = json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": text}});
                    frames.event_after(*delay, "content_block_delta", &delta);
                }
            }
            Block::Tool(call) => {
                stop_reason = "tool_use";
                let block = json!({"type": "tool_use", "id": (ctx.ids)("toolu"), "name": call.name, "input": {}});
                frames.event(
                    "content_block_start",
                    &json!({"type": "content_block_start", "index": index, "content_block": block}),
                );
                let input = match &call.input {
                    ToolInput::Json(value) => value.to_string(),
                    freeform => json!({"input": arguments_string(freeform)}).to_string(),
                };
                let delta = json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": input}});
                frames.event("content_block_delta", &delta);
            }
        }
        if index + 1 == blocks.len() && !complete {
            return frames.into_vec();
        }
        frames.event("content_block_stop", &json!({"type": "content_block_stop", "index": index}));
    }
    if complete {
        let delta = json!({
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": null},
            "usage": {"output_tokens": USAGE_OUTPUT_TOKENS},
        });
        frames.event("message_delta", &delta);
        frames.event("message_stop", &json!({"type": "message_stop"}));
    }
    frames.into_vec()
}

/// Anthropic error body.
pub(super) fn error_body(status: u16, message: &str) -> Value {
    let kind = match status {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        400..=499 => "invalid_request_error",
        _ => "api_error",
    };
    json!({"type": "error", "error": {"type": kind, "message": message}})
}
