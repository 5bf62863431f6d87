// `cargo xtask bench`: one `query()` of @anthropic-ai/claude-agent-sdk with partial messages,
// against `fake-claude` ($AGENT_BENCH_FAKE) streaming a prepared turn; prints one JSON line.
import { query } from '@anthropic-ai/claude-agent-sdk';

const started = performance.now();
let messages = 0;
let deltas = 0;
let result = null;
const options = { pathToClaudeCodeExecutable: process.env.AGENT_BENCH_FAKE, includePartialMessages: true };
for await (const message of query({ prompt: 'stream the prepared turn', options })) {
  messages++;
  if (message.type === 'stream_event' && message.event?.type === 'content_block_delta') deltas++;
  else if (message.type === 'result') result = message.subtype;
}
const secs = (performance.now() - started) / 1000;
console.log(JSON.stringify({ consumer: 'ts-claude-agent-sdk', messages, deltas, result, secs }));
