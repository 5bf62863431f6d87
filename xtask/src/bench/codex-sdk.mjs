// `cargo xtask bench`: one `runStreamed()` of @openai/codex-sdk (which drives `codex exec
// --experimental-json`) against `fake-codex` ($AGENT_BENCH_FAKE) copying a prepared turn to its
// stdout; prints one JSON line.
import { Codex } from '@openai/codex-sdk';

const started = performance.now();
let events = 0;
let deltas = 0;
let last = null;
const thread = new Codex({ codexPathOverride: process.env.AGENT_BENCH_FAKE }).startThread({ skipGitRepoCheck: true });
const { events: stream } = await thread.runStreamed('stream the prepared turn');
for await (const event of stream) {
  events++;
  if (event.type === 'item.updated') deltas++;
  last = event.type;
}
const secs = (performance.now() - started) / 1000;
console.log(JSON.stringify({ consumer: 'ts-codex-sdk', events, deltas, result: last, secs }));
