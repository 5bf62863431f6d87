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

/// Reads `stream` through a pipe from `cat` with `mode` (`cat`, `value` or `typed`).
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
            let text = line.trim_end();
            let is_delta = if mode == "value" {
                let value: Value = serde_json::from_str(text).map_err(|e| format!("line {lines}: {e}"))?;
                let is_delta = value.get("method").and_then(Value::as_str) == Some(DELTA_METHOD);
                black_box(value);
                is_delta
            } else {
                let typed: AppLine = serde_json::from_str(text).map_err(|e| format!("line {lines}: {e}"))?;
                let is_delta = typed.method.as_deref() == Some(DELTA_METHOD) && typed.params.is_some();
                black_box(typed);
                is_delta
            };
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
