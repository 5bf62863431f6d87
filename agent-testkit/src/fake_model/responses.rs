//! OpenAI Responses SSE (`POST …/responses`), as Codex and Pi's `openai-responses` read it.

use serde_json::{Map, Value, json};

use super::plan::{Block, ToolInput};
use super::sse::{Frame, Frames};
use super::wire::{Ctx, USAGE_INPUT_TOKENS, USAGE_OUTPUT_TOKENS, arguments_string};

/// Numbers each event with `sequence_number`, as the real API does.
struct Events {
    frames: Frames,
    sequence: u64,
}

impl Events {
    fn emit(&mut self, delay: std::time::Duration, mut event: Value) {
        if let Value::Object(map) = &mut event {
            map.insert("sequence_number".into(), self.sequence.into());
        }
        self.sequence += 1;
        let name = event["type"].as_str().unwrap_or_default().to_owned();
        self.frames.event_after(delay, &name, &event);
    }

    fn now(&mut self, event: Value) {
        self.emit(std::time::Duration::ZERO, event);
    }
}

pub(super) fn render(blocks: &[Block], complete: bool, ctx: &Ctx<'_>) -> Vec<Frame> {
    let response_id = (ctx.ids)("resp");
    let mut events = Events { frames: Frames::default(), sequence: 0 };
    let response = |status: &str, output: Vec<Value>| json!({"id": response_id, "object": "response", "created_at": 0, "model": ctx.model, "status": status, "output": output});
    events.now(json!({"type": "response.created", "response": response("in_progress", Vec::new())}));
    let mut done = Vec::new();
    for (output_index, block) in blocks.iter().enumerate() {
        let last = output_index + 1 == blocks.len();
        match block {
            Block::Text { deltas, delay } => {
                let id = (ctx.ids)("msg");
                let item =
                    json!({"type": "message", "role": "assistant", "id": id, "status": "in_progress", "content": []});
                events.now(json!({"type": "response.output_item.added", "output_index": output_index, "item": item}));
                let part = json!({"type": "output_text", "text": "", "annotations": []});
                events.now(json!({"type": "response.content_part.added", "item_id": id, "output_index": output_index, "content_index": 0, "part": part}));
                for delta in deltas {
                    events.emit(
                        *delay,
                        json!({"type": "response.output_text.delta", "item_id": id, "output_index": output_index, "content_index": 0, "delta": delta}),
                    );
                }
                if last && !complete {
                    break;
                }
                let text = deltas.concat();
                events.now(json!({"type": "response.output_text.done", "item_id": id, "output_index": output_index, "content_index": 0, "text": text}));
                let part = json!({"type": "output_text", "text": text, "annotations": []});
                events.now(json!({"type": "response.content_part.done", "item_id": id, "output_index": output_index, "content_index": 0, "part": part}));
                let item =
                    json!({"type": "message", "role": "assistant", "id": id, "status": "completed", "content": [part]});
                events.now(json!({"type": "response.output_item.done", "output_index": output_index, "item": item}));
                done.push(item);
            }
            Block::Tool(call) => {
                let call_id = (ctx.ids)("call");
                let mut item = Map::new();
                item.insert("call_id".into(), call_id.clone().into());
                item.insert("name".into(), call.name.clone().into());
                let (kind, field) = match call.input {
                    ToolInput::Json(_) => ("function_call", "arguments"),
                    ToolInput::Freeform(_) => ("custom_tool_call", "input"),
                };
                item.insert("type".into(), kind.into());
                item.insert("id".into(), (ctx.ids)(if kind == "function_call" { "fc" } else { "ctc" }).into());
                let mut added = item.clone();
                added.insert(field.into(), "".into());
                added.insert("status".into(), "in_progress".into());
                events.now(json!({"type": "response.output_item.added", "output_index": output_index, "item": added}));
                let arguments = arguments_string(&call.input);
                if kind == "function_call" {
                    let item_id = item["id"].clone();
                    events.now(json!({"type": "response.function_call_arguments.delta", "item_id": item_id, "output_index": output_index, "delta": arguments}));
                    events.now(json!({"type": "response.function_call_arguments.done", "item_id": item_id, "output_index": output_index, "arguments": arguments}));
                }
                item.insert(field.into(), arguments.into());
                item.insert("status".into(), "completed".into());
                events.now(json!({"type": "response.output_item.done", "output_index": output_index, "item": item}));
                done.push(Value::Object(item));
            }
        }
    }
    if complete {
        let mut finished = response("completed", done);
        finished["usage"] = json!({
            "input_tokens": USAGE_INPUT_TOKENS,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": USAGE_OUTPUT_TOKENS,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": USAGE_INPUT_TOKENS + USAGE_OUTPUT_TOKENS,
        });
        events.now(json!({"type": "response.completed", "response": finished}));
    }
    events.frames.into_vec()
}

/// OpenAI error body (also used for Chat Completions).
pub(super) fn error_body(status: u16, message: &str) -> Value {
    let kind = match status {
        401 => "invalid_api_key",
        403 => "permission_denied",
        404 => "not_found",
        429 => "rate_limit_exceeded",
        400..=499 => "invalid_request_error",
        _ => "server_error",
    };
    json!({"error": {"message": message, "type": kind, "code": kind, "param": null}})
}
