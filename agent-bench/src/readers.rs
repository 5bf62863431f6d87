//! The baselines: a pipe from `cat`, discarded or parsed line by line.

use std::hint::black_box;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use serde::Deserialize;
use serde_json::{Value, json};

/// Read buffer, as in the performance anchors' readers.
const BUFFER: usize = 64 * 1024;

pub(crate) const DELTA_METHOD: &str = "item/agentMessage/delta";

/// A Codex app-server line, the fields a consumer of deltas needs (owned strings).
#[derive(Deserialize)]
pub(crate) struct AppLine {
    pub(crate) method: Option<String>,
    pub(crate) params: Option<AppParams>,
}

/// The parameters of an `AppLine`.
#[derive(Deserialize)]
pub(crate) struct AppParams {
    #[serde(rename = "threadId")]
    #[allow(dead_code)] // Parsed to be measured, not read.
    thread_id: Option<String>,
    #[serde(rename = "turnId")]
    #[allow(dead_code)]
    turn_id: Option<String>,
    #[serde(rename = "itemId")]
    #[allow(dead_code)]
    item_id: Option<String>,
    pub(crate) delta: Option<String>,
}

/// A Claude stream-json line (as in the performance anchors' typed reader).
#[derive(Deserialize)]
#[allow(dead_code)] // Parsed to be measured, not read.
struct ClaudeLine {
    #[serde(rename = "type")]
    ty: String,
    subtype: Option<String>,
    session_id: Option<String>,
    uuid: Option<String>,
    event: Option<ClaudeEvent>,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct ClaudeEvent {
    #[serde(rename = "type")]
    ty: String,
    index: Option<u32>,
    delta: Option<ClaudeDelta>,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct ClaudeDelta {
    #[serde(rename = "type")]
    ty: Option<String>,
    text: Option<String>,
}

/// A `codex exec --experimental-json` line.
#[derive(Deserialize)]
#[allow(dead_code)]
struct ExecLine {
    #[serde(rename = "type")]
    ty: String,
    thread_id: Option<String>,
    item: Option<ExecItem>,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct ExecItem {
    id: String,
    #[serde(rename = "type")]
    ty: String,
    text: Option<String>,
}

/// Whether a parsed line is a text delta, in any of the generated formats.
fn value_is_delta(value: &Value) -> bool {
    let field = |v: &Value, name: &str| v.get(name).and_then(Value::as_str).map(str::to_owned);
    field(value, "method").as_deref() == Some(DELTA_METHOD)
        || field(value, "type").as_deref() == Some("item.updated")
        || value.get("event").and_then(|e| field(e, "type")).as_deref() == Some("content_block_delta")
}

/// Parses one line with `mode`; true when it is a text delta.
fn parse(mode: &str, text: &str) -> Result<bool, serde_json::Error> {
    Ok(match mode {
        "value" => {
            let value: Value = serde_json::from_str(text)?;
            let is_delta = value_is_delta(&value);
            black_box(value);
            is_delta
        }
        "typed-claude" => {
            let typed: ClaudeLine = serde_json::from_str(text)?;
            let is_delta = typed.event.as_ref().is_some_and(|e| e.ty == "content_block_delta");
            black_box(typed);
            is_delta
        }
        "typed-codex-exec" => {
            let typed: ExecLine = serde_json::from_str(text)?;
            let is_delta = typed.ty == "item.updated";
            black_box(typed);
            is_delta
        }
        _ => {
            let typed: AppLine = serde_json::from_str(text)?;
            let is_delta = typed.method.as_deref() == Some(DELTA_METHOD) && typed.params.is_some();
            black_box(typed);
            is_delta
        }
    })
}

/// The modes [`run`] takes.
pub(crate) const MODES: &[&str] = &["cat", "value", "typed", "typed-claude", "typed-codex-exec"];

/// Reads `stream` through a pipe from `cat` with `mode` (one of [`MODES`]; `typed` is the
/// Codex app-server struct).
pub(crate) fn run(mode: &str, stream: &Path) -> Result<Value, String> {
    let started = Instant::now();
    let mut cat =
        Command::new("cat").arg(stream).stdout(Stdio::piped()).spawn().map_err(|e| format!("cannot run cat: {e}"))?;
    let pipe = cat.stdout.take().ok_or("cat has no stdout")?;
    let mut reader = BufReader::with_capacity(BUFFER, pipe);
    let (mut lines, mut deltas, mut bytes) = (0u64, 0u64, 0u64);
    if mode == "cat" {
        let mut buf = vec![0u8; BUFFER];
        loop {
            let n = reader.read(&mut buf).map_err(|e| format!("read: {e}"))?;
            if n == 0 {
                break;
            }
            bytes += n as u64;
            lines += buf[..n].iter().filter(|&&b| b == b'\n').count() as u64;
        }
    } else {
        let mut line = String::new();
        loop {
            line.clear();
            let n = reader.read_line(&mut line).map_err(|e| format!("read: {e}"))?;
            if n == 0 {
                break;
            }
            bytes += n as u64;
            lines += 1;
            let is_delta = parse(mode, line.trim_end()).map_err(|e| format!("line {lines}: {e}"))?;
            deltas += u64::from(is_delta);
        }
    }
    let status = cat.wait().map_err(|e| format!("cat: {e}"))?;
    if !status.success() {
        return Err(format!("cat failed: {status}"));
    }
    Ok(json!({
        "consumer": mode, "lines": lines, "deltas": deltas, "bytes": bytes,
        "secs": started.elapsed().as_secs_f64(),
    }))
}
