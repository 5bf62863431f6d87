//! OpenAI Chat Completions SSE (`POST …/chat/completions`), as Pi's `openai-completions` reads it.

use serde_json::{Value, json};

use super::plan::Block;
use super::sse::{Frame, Frames};
use super::wire::{Ctx, USAGE_INPUT_TOKENS, USAGE_OUTPUT_TOKENS, arguments_string};

pub(super) fn render(blocks: &[Block], complete: bool, ctx: &Ctx<'_>) -> Vec<Frame> {
    let id = (ctx.ids)("chatcmpl");
    let chunk = |delta: Value, finish: Value| {
        json!({
            "id": id, "object": "chat.completion.chunk", "created": 0, "model": ctx.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        })
    };
    let mut frames = Frames::default();
    let zero = std::time::Duration::ZERO;
    frames.data_after(zero, &chunk(json!({"role": "assistant", "content": ""}), Value::Null).to_string());
    let mut finish = "stop";
    let mut tool_index = 0;
    for block in blocks {
        match block {
            Block::Text { deltas, delay } => {
                for text in deltas {
                    frames.data_after(*delay, &chunk(json!({"content": text}), Value::Null).to_string());
                }
            }
            Block::Tool(call) => {
                finish = "tool_calls";
                let start = json!({"tool_calls": [{
                    "index": tool_index, "id": (ctx.ids)("call"), "type": "function",
                    "function": {"name": call.name, "arguments": ""},
                }]});
                frames.data_after(zero, &chunk(start, Value::Null).to_string());
                let arguments = json!({"tool_calls": [{"index": tool_index, "function": {"arguments": arguments_string(&call.input)}}]});
                frames.data_after(zero, &chunk(arguments, Value::Null).to_string());
                tool_index += 1;
            }
        }
    }
    if complete {
        frames.data_after(zero, &chunk(json!({}), finish.into()).to_string());
        let usage = json!({
            "id": id, "object": "chat.completion.chunk", "created": 0, "model": ctx.model, "choices": [],
            "usage": {
                "prompt_tokens": USAGE_INPUT_TOKENS,
                "completion_tokens": USAGE_OUTPUT_TOKENS,
                "total_tokens": USAGE_INPUT_TOKENS + USAGE_OUTPUT_TOKENS,
            },
        });
        frames.data_after(zero, &usage.to_string());
        frames.data_after(zero, "[DONE]");
    }
    frames.into_vec()
}
