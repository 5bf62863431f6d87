//! Synthetic CLI output streams for throughput benchmarks: one long assistant message as
//! `deltas` small text deltas, in the shape the real CLIs write it.
//!
//! - [`write_codex_app`]: `codex app-server` notifications — `turn/started`, `item/started`,
//!   `deltas` × `item/agentMessage/delta` (`threadId`, `turnId`, `itemId`, a 40-character
//!   `delta`, `emittedAtMs`), `item/completed`, `turn/completed`.
//! - [`write_codex_exec`]: `codex exec --experimental-json` events — `thread.started`,
//!   `turn.started`, `item.started`, `deltas` × `item.updated` of one agent message (each with a
//!   40-character text), `item.completed`, `turn.completed`. (The real CLI does not stream
//!   agent-message updates this finely; it is a throughput load for SDKs that drive `codex exec`.)
//! - [`write_claude`]: `claude -p --output-format stream-json --include-partial-messages` —
//!   `system/init`, `message_start`, `content_block_start`, `deltas` × `content_block_delta`
//!   `text_delta` stream events (with `session_id` and `uuid`), the `assistant` message,
//!   `content_block_stop`, `message_delta`, `message_stop`, `result`.
//!
//! Every delta text is 40 characters of an English corpus; some contain an escaped `"` or
//! non-ASCII letters, and one in eight ends with an escaped newline. The output is
//! deterministic: the same arguments give the same bytes. The final `assistant` message and
//! `item/completed` carry a short placeholder instead of the concatenated text, so no single
//! line dominates a measurement.
//!
//! The IDs default to the ones the fake CLIs use ([`CodexIds::default`],
//! [`crate::fake_cli::CLAUDE_SESSION_ID`]), so a provider adapter talking to `fake-codex` that
//! plays a stream with [`FakeStep::StreamFile`](crate::fake_cli::FakeStep::StreamFile) routes
//! the generated notifications to the running turn.
//!
//! ```
//! use agent_testkit::streams::{CodexIds, write_codex_app};
//!
//! let mut out = Vec::new();
//! let lines = write_codex_app(&mut out, 3, &CodexIds::default()).unwrap();
//! assert_eq!(lines, 7);
//! assert_eq!(out.iter().filter(|&&b| b == b'\n').count(), 7);
//! ```

use std::io::{self, Write};

use crate::fake_cli::{CLAUDE_SESSION_ID, CODEX_THREAD_ID, NOW_NS, codex_turn_id};

/// The text the deltas are cut from (its `"` are escaped when written).
const CORPUS: &str = "The quick brown fox jumps over the lazy dog while the compiler checks lifetimes, borrows and \
                      traits; tokens stream in as small deltas of roughly forty characters each, sometimes with \
                      \"quotes\" or unicode like caf\u{e9} and na\u{ef}ve. ";

/// Characters per delta.
const DELTA_CHARS: usize = 40;

/// `emittedAtMs` of the first delta; it advances by one every thousand deltas.
const FIRST_EMITTED_MS: u64 = 1_795_934_659_278;

/// Lines a stream has besides its deltas.
pub const CODEX_APP_EXTRA_LINES: u64 = 4;
/// Lines a `codex exec` stream has besides its deltas.
pub const CODEX_EXEC_EXTRA_LINES: u64 = 5;
/// Lines a Claude stream has besides its deltas.
pub const CLAUDE_EXTRA_LINES: u64 = 8;

/// The IDs in a generated `codex app-server` stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodexIds {
    /// `threadId`.
    pub thread: String,
    /// `turnId` (and `turn.id`).
    pub turn: String,
    /// `itemId` of the agent message.
    pub item: String,
}

impl Default for CodexIds {
    /// The thread and first turn of `fake-codex`, and a message item of its own.
    fn default() -> Self {
        CodexIds { thread: CODEX_THREAD_ID.to_owned(), turn: codex_turn_id(1), item: "msg_f4ecdfa3".to_owned() }
    }
}

/// Characters of corpus text in a stamped delta: [`NOW_NS`] becomes 19 digits, then a space.
const STAMPED_TEXT_CHARS: usize = DELTA_CHARS - 20;

/// The delta texts, each already escaped for a JSON string.
struct Deltas {
    corpus: Vec<char>,
    text: String,
    stamped: bool,
}

impl Deltas {
    fn new(stamped: bool) -> Self {
        Deltas { corpus: CORPUS.chars().collect(), text: String::with_capacity(2 * DELTA_CHARS), stamped }
    }

    /// The `i`-th delta, escaped.
    fn get(&mut self, i: u64) -> &str {
        let windows = (self.corpus.len() - DELTA_CHARS) as u64;
        let start = usize::try_from(i.wrapping_mul(7) % windows).unwrap_or(0);
        self.text.clear();
        let chars = if self.stamped {
            self.text.push_str(NOW_NS);
            self.text.push(' ');
            STAMPED_TEXT_CHARS
        } else {
            DELTA_CHARS
        };
        for &c in &self.corpus[start..start + chars] {
            if c == '"' {
                self.text.push('\\');
            }
            self.text.push(c);
        }
        if i.is_multiple_of(8) {
            self.text.push_str("\\n");
        }
        &self.text
    }
}

/// A UUID-shaped string derived from `i` (version 4 and variant bits set).
fn uuid(i: u64) -> String {
    let x = u128::from(i).wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835) ^ 0x1234_5678_9abc_def0;
    let h = format!("{x:032x}");
    format!("{}-{}-4{}-a{}-{}", &h[0..8], &h[8..12], &h[13..16], &h[17..20], &h[20..32])
}

/// Writes a `codex app-server` turn with `deltas` agent-message deltas; returns the number of
/// lines written (`deltas` + [`CODEX_APP_EXTRA_LINES`]).
pub fn write_codex_app(out: &mut impl Write, deltas: u64, ids: &CodexIds) -> io::Result<u64> {
    codex_app(out, deltas, ids, false)
}

/// Like [`write_codex_app`], for latency runs: every delta text starts with [`NOW_NS`] and a
/// space (a paced [`FakeStep::StreamFile`](crate::fake_cli::FakeStep::StreamFile) replaces it
/// with the time the line was written) and has 20 characters of text after it.
pub fn write_codex_app_stamped(out: &mut impl Write, deltas: u64, ids: &CodexIds) -> io::Result<u64> {
    codex_app(out, deltas, ids, true)
}

fn codex_app(out: &mut impl Write, deltas: u64, ids: &CodexIds, stamped: bool) -> io::Result<u64> {
    let mut w = io::BufWriter::with_capacity(1 << 20, out);
    let CodexIds { thread: th, turn: tu, item } = ids;
    writeln!(
        w,
        r#"{{"method":"turn/started","params":{{"threadId":"{th}","turn":{{"id":"{tu}","items":[],"status":"inProgress","error":null}}}}}}"#
    )?;
    writeln!(
        w,
        r#"{{"method":"item/started","params":{{"item":{{"type":"agentMessage","id":"{item}","text":""}},"threadId":"{th}","turnId":"{tu}"}}}}"#
    )?;
    let mut texts = Deltas::new(stamped);
    for i in 0..deltas {
        writeln!(
            w,
            r#"{{"method":"item/agentMessage/delta","params":{{"threadId":"{th}","turnId":"{tu}","itemId":"{item}","delta":"{}"}},"emittedAtMs":{}}}"#,
            texts.get(i),
            FIRST_EMITTED_MS + i / 1000
        )?;
    }
    writeln!(
        w,
        r#"{{"method":"item/completed","params":{{"item":{{"type":"agentMessage","id":"{item}","text":"(elided)"}},"threadId":"{th}","turnId":"{tu}"}}}}"#
    )?;
    writeln!(
        w,
        r#"{{"method":"turn/completed","params":{{"threadId":"{th}","turn":{{"id":"{tu}","items":[],"status":"completed","error":null}}}}}}"#
    )?;
    w.flush()?;
    Ok(deltas + CODEX_APP_EXTRA_LINES)
}

/// Writes a `codex exec --experimental-json` turn with `deltas` agent-message updates; returns
/// the number of lines written (`deltas` + [`CODEX_EXEC_EXTRA_LINES`]).
pub fn write_codex_exec(out: &mut impl Write, deltas: u64) -> io::Result<u64> {
    let mut w = io::BufWriter::with_capacity(1 << 20, out);
    writeln!(w, r#"{{"type":"thread.started","thread_id":"{CODEX_THREAD_ID}"}}"#)?;
    writeln!(w, r#"{{"type":"turn.started"}}"#)?;
    writeln!(w, r#"{{"type":"item.started","item":{{"id":"item_1","type":"agent_message","text":""}}}}"#)?;
    let mut texts = Deltas::new(false);
    for i in 0..deltas {
        writeln!(
            w,
            r#"{{"type":"item.updated","item":{{"id":"item_1","type":"agent_message","text":"{}"}}}}"#,
            texts.get(i)
        )?;
    }
    writeln!(w, r#"{{"type":"item.completed","item":{{"id":"item_1","type":"agent_message","text":"(elided)"}}}}"#)?;
    writeln!(
        w,
        r#"{{"type":"turn.completed","usage":{{"input_tokens":10,"cached_input_tokens":0,"output_tokens":5}}}}"#
    )?;
    w.flush()?;
    Ok(deltas + CODEX_EXEC_EXTRA_LINES)
}

/// Writes a Claude stream-json turn with partial messages, `deltas` text deltas, for session
/// `session_id`; returns the number of lines written (`deltas` + [`CLAUDE_EXTRA_LINES`]).
pub fn write_claude(out: &mut impl Write, deltas: u64, session_id: &str) -> io::Result<u64> {
    let mut w = io::BufWriter::with_capacity(1 << 20, out);
    let sid = session_id;
    let fixed = |k: u64| uuid(u64::MAX - k);
    writeln!(
        w,
        r#"{{"type":"system","subtype":"init","cwd":"/home/user/proj","session_id":"{sid}","tools":["Task","Bash","Edit","Read","Write","WebFetch","WebSearch"],"mcp_servers":[],"model":"claude-opus-4-8","permissionMode":"default","slash_commands":["compact","config","init","review"],"apiKeySource":"none","claude_code_version":"2.1.197","output_style":"default","agents":["general-purpose","Plan"],"skills":[],"plugins":[],"uuid":"{}","fast_mode_state":"off"}}"#,
        fixed(0)
    )?;
    writeln!(
        w,
        r#"{{"type":"stream_event","event":{{"type":"message_start","message":{{"id":"msg_d83fcad810cb4a1c88f9","type":"message","role":"assistant","model":"claude-opus-4-8","content":[],"stop_reason":null,"stop_sequence":null,"usage":{{"input_tokens":1669,"output_tokens":1,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}}}}},"session_id":"{sid}","parent_tool_use_id":null,"uuid":"{}","ttft_ms":11}}"#,
        fixed(1)
    )?;
    writeln!(
        w,
        r#"{{"type":"stream_event","event":{{"type":"content_block_start","index":0,"content_block":{{"type":"text","text":""}}}},"session_id":"{sid}","parent_tool_use_id":null,"uuid":"{}"}}"#,
        fixed(2)
    )?;
    let mut texts = Deltas::new(false);
    for i in 0..deltas {
        writeln!(
            w,
            r#"{{"type":"stream_event","event":{{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","text":"{}"}}}},"session_id":"{sid}","parent_tool_use_id":null,"uuid":"{}"}}"#,
            texts.get(i),
            uuid(i)
        )?;
    }
    writeln!(
        w,
        r#"{{"type":"assistant","message":{{"id":"msg_d83fcad810cb4a1c88f9","type":"message","role":"assistant","model":"claude-opus-4-8","content":[{{"type":"text","text":"(full text elided: {deltas} deltas)"}}],"stop_reason":null,"stop_sequence":null,"usage":{{"input_tokens":1669,"output_tokens":1,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}}},"parent_tool_use_id":null,"session_id":"{sid}","uuid":"{}"}}"#,
        fixed(3)
    )?;
    writeln!(
        w,
        r#"{{"type":"stream_event","event":{{"type":"content_block_stop","index":0}},"session_id":"{sid}","parent_tool_use_id":null,"uuid":"{}"}}"#,
        fixed(4)
    )?;
    writeln!(
        w,
        r#"{{"type":"stream_event","event":{{"type":"message_delta","delta":{{"stop_reason":"end_turn","stop_sequence":null}},"usage":{{"output_tokens":{deltas}}}}},"session_id":"{sid}","parent_tool_use_id":null,"uuid":"{}"}}"#,
        fixed(5)
    )?;
    writeln!(
        w,
        r#"{{"type":"stream_event","event":{{"type":"message_stop"}},"session_id":"{sid}","parent_tool_use_id":null,"uuid":"{}"}}"#,
        fixed(6)
    )?;
    writeln!(
        w,
        r#"{{"type":"result","subtype":"success","is_error":false,"duration_ms":77,"duration_api_ms":25,"num_turns":1,"result":"(elided)","stop_reason":"end_turn","session_id":"{sid}","total_cost_usd":0.005718,"usage":{{"input_tokens":1669,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":{deltas}}},"modelUsage":{{}},"permission_denials":[],"uuid":"{}"}}"#,
        fixed(7)
    )?;
    w.flush()?;
    Ok(deltas + CLAUDE_EXTRA_LINES)
}

/// [`write_claude`] for `fake-claude`'s default session.
pub fn write_claude_default(out: &mut impl Write, deltas: u64) -> io::Result<u64> {
    write_claude(out, deltas, CLAUDE_SESSION_ID)
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    fn lines(bytes: &[u8]) -> Vec<Value> {
        std::str::from_utf8(bytes)
            .expect("UTF-8")
            .lines()
            .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
            .collect()
    }

    #[test]
    fn codex_deltas_belong_to_the_fakes_first_turn() {
        let mut out = Vec::new();
        assert_eq!(write_codex_app(&mut out, 64, &CodexIds::default()).unwrap(), 68);
        let frames = lines(&out);
        assert_eq!(frames.len(), 68);
        let methods: Vec<&str> = frames.iter().map(|f| f["method"].as_str().unwrap()).collect();
        assert_eq!(methods[..2], ["turn/started", "item/started"]);
        assert_eq!(methods[66..], ["item/completed", "turn/completed"]);
        for delta in &frames[2..66] {
            assert_eq!(delta["method"], "item/agentMessage/delta");
            assert_eq!(delta["params"]["threadId"], CODEX_THREAD_ID);
            assert_eq!(delta["params"]["turnId"], "fake-turn-1");
            assert!(delta["emittedAtMs"].is_u64());
        }
        let first = frames[2]["params"]["delta"].as_str().unwrap();
        assert_eq!(first.chars().count(), DELTA_CHARS + 1, "{first:?}");
        assert!(first.ends_with('\n'));
        let texts: Vec<&str> = frames[2..66].iter().map(|f| f["params"]["delta"].as_str().unwrap()).collect();
        assert!(texts.iter().any(|t| t.contains('"')), "{texts:?}");
        assert!(texts.iter().any(|t| !t.is_ascii()), "{texts:?}");
        assert_eq!(frames[67]["params"]["turn"]["status"], "completed");
    }

    #[test]
    fn claude_deltas_are_text_deltas_of_one_session() {
        let mut out = Vec::new();
        assert_eq!(write_claude_default(&mut out, 5).unwrap(), 13);
        let frames = lines(&out);
        assert_eq!(frames.len(), 13);
        assert_eq!(frames[0]["subtype"], "init");
        assert_eq!(frames[12]["type"], "result");
        for frame in &frames {
            assert_eq!(frame["session_id"], CLAUDE_SESSION_ID);
        }
        for delta in &frames[3..8] {
            assert_eq!(delta["event"]["delta"]["type"], "text_delta");
            assert_eq!(delta["uuid"].as_str().unwrap().len(), 36);
        }
    }

    #[test]
    fn stamped_deltas_start_with_the_placeholder() {
        let mut out = Vec::new();
        write_codex_app_stamped(&mut out, 3, &CodexIds::default()).unwrap();
        let frames = lines(&out);
        for delta in &frames[2..5] {
            let text = delta["params"]["delta"].as_str().unwrap();
            let rest = text.strip_prefix("${now_ns} ").unwrap_or_else(|| panic!("{text:?}"));
            assert!(rest.chars().count() >= STAMPED_TEXT_CHARS, "{text:?}");
        }
    }

    #[test]
    fn codex_exec_updates_one_agent_message() {
        let mut out = Vec::new();
        assert_eq!(write_codex_exec(&mut out, 4).unwrap(), 9);
        let frames = lines(&out);
        let types: Vec<&str> = frames.iter().map(|f| f["type"].as_str().unwrap()).collect();
        assert_eq!(types[..3], ["thread.started", "turn.started", "item.started"]);
        assert_eq!(types[3..7], ["item.updated"; 4]);
        assert_eq!(types[7..], ["item.completed", "turn.completed"]);
        assert_eq!(frames[4]["item"]["text"].as_str().unwrap().chars().count(), DELTA_CHARS);
    }

    #[test]
    fn streams_are_deterministic() {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        write_claude_default(&mut a, 50).unwrap();
        write_claude_default(&mut b, 50).unwrap();
        assert_eq!(a, b);
    }
}
