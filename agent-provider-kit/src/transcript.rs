//! Looking through a CLI's conversation file (a JSON-lines transcript or rollout) for a line,
//! before a resume: bounded, off the async threads, and never stuck on a file that is not one.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! use agent_provider_kit::transcript::{MAX_SCANNED, any_line};
//!
//! let file = std::env::temp_dir().join(format!("transcript-doc-{}.jsonl", std::process::id()));
//! std::fs::write(&file, "{\"type\":\"summary\"}\nnot json\n{\"type\":\"user\"}\n").unwrap();
//! let user = |line: &serde_json::Value| line["type"] == "user";
//! assert_eq!(any_line(file.clone(), MAX_SCANNED, user).await, Some(true));
//! let assistant = |line: &serde_json::Value| line["type"] == "assistant";
//! assert_eq!(any_line(file.clone(), MAX_SCANNED, assistant).await, Some(false));
//! std::fs::remove_file(&file).unwrap();
//! # });
//! ```

pub mod claude;
pub mod pi;

use std::io::BufRead;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use serde_json::Value;

/// How much of a conversation file [`any_line`] reads before it gives up undecided: 64 MiB.
pub const MAX_SCANNED: u64 = 64 << 20;

/// Whether a line of `file` is JSON that `matches`: `Some(true)` at the first one (reading
/// stops there), `Some(false)` when the whole file holds none, `None` when that cannot be told:
/// the file is missing, unreadable, not a regular file (a FIFO is never waited on), or has no
/// match in its first `limit` bytes. Lines that are not JSON are skipped. Runs on a blocking
/// thread.
pub async fn any_line(file: PathBuf, limit: u64, matches: impl Fn(&Value) -> bool + Send + 'static) -> Option<bool> {
    tokio::task::spawn_blocking(move || scan(&file, limit, &matches)).await.ok().flatten()
}

fn scan(file: &std::path::Path, limit: u64, matches: &dyn Fn(&Value) -> bool) -> Option<bool> {
    use std::io::Read;
    // Opened without waiting (a FIFO would wait for a writer), then checked to be a file.
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(file)
        .ok()?;
    if !opened.metadata().ok()?.is_file() {
        return None;
    }
    let mut reader = std::io::BufReader::new(opened.take(limit));
    let mut line = Vec::new();
    let mut read = 0;
    loop {
        line.clear();
        let n = reader.read_until(b'\n', &mut line).ok()? as u64;
        if n == 0 {
            // The end of the file, or of what may be read of it.
            return (read < limit).then_some(false);
        }
        read += n;
        if serde_json::from_slice::<Value>(&line).is_ok_and(|entry| matches(&entry)) {
            return Some(true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::private_dir::PrivateDir;

    #[tokio::test]
    async fn a_match_is_found_and_what_cannot_be_told_is_none() {
        let dir = PrivateDir::create(&std::env::temp_dir(), "kit-transcript").unwrap();
        let is_user = |line: &Value| line["type"] == "user";
        let file = dir.write("t.jsonl", "{\"type\":\"meta\"}\n\u{1}garbage\n{\"type\":\"user\"}").unwrap();
        assert_eq!(any_line(file.clone(), MAX_SCANNED, is_user).await, Some(true), "a last line without a newline");
        let none = dir.write("none.jsonl", "{\"type\":\"meta\"}\n").unwrap();
        assert_eq!(any_line(none.clone(), MAX_SCANNED, is_user).await, Some(false));
        // Only the first `limit` bytes are read: past them, undecided.
        assert_eq!(any_line(file.clone(), 20, is_user).await, None);
        assert_eq!(any_line(none, 16, is_user).await, None, "the limit reached exactly is undecided");
        assert_eq!(any_line(dir.path().join("missing"), MAX_SCANNED, is_user).await, None);
        assert_eq!(any_line(dir.path().to_path_buf(), MAX_SCANNED, is_user).await, None, "a directory");
        // A FIFO is not waited on.
        let fifo = dir.path().join("fifo");
        rustix::fs::mkfifoat(rustix::fs::CWD, &fifo, rustix::fs::Mode::from_raw_mode(0o600)).unwrap();
        assert_eq!(any_line(fifo, MAX_SCANNED, is_user).await, None);
    }
}
