//! The tail of a child's stderr, kept for error reports: the last lines, plain text, bounded.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::io::AsyncRead;
use tokio::task::{AbortHandle, JoinHandle};

use super::{FIRST_STDERR_BUFFER, Line, LineReader};
use crate::secrets::Secrets;

/// `; stderr:` and the tail on the lines after it, or nothing without a tail: the end of an
/// error text that carries a CLI's stderr tail.
pub fn stderr_note(tail: Option<&str>) -> String {
    tail.map(|t| format!("; stderr:\n{t}")).unwrap_or_default()
}

/// Lines of stderr a default [`StderrTail`] keeps.
pub const STDERR_TAIL_LINES: usize = 40;
/// Longest stderr line kept, in characters; the rest of a line is cut and marked with `…`.
pub const STDERR_LINE_CHARS: usize = 500;
/// Longest stderr line worth reading whole, for a [`LineReader`] over stderr; a longer line is
/// skipped (the tail keeps [`STDERR_LINE_CHARS`] of a line anyway).
pub const STDERR_MAX_LINE: usize = 64 * 1024;

/// The last lines of a child's stderr, with terminal colour codes and blank lines removed, for
/// error reports.
#[derive(Clone, Debug)]
pub struct StderrTail {
    lines: VecDeque<String>,
    max_lines: usize,
    /// Replaced in each line before it is kept.
    secrets: Secrets,
}

impl Default for StderrTail {
    /// Keeps [`STDERR_TAIL_LINES`] lines.
    fn default() -> Self {
        StderrTail::new(STDERR_TAIL_LINES)
    }
}

impl StderrTail {
    /// Keeps the last `max_lines` lines (at least one).
    pub fn new(max_lines: usize) -> Self {
        StderrTail { lines: VecDeque::new(), max_lines: max_lines.max(1), secrets: Secrets::default() }
    }

    /// Redacts `secrets` from every line before it is kept (see [`Secrets::redact`]).
    pub fn redacting(mut self, secrets: Secrets) -> Self {
        self.secrets = secrets;
        self
    }

    /// Adds one line (without its newline); invalid UTF-8 is replaced.
    pub fn push(&mut self, line: &[u8]) {
        let text = strip_ansi(&String::from_utf8_lossy(line));
        // Before the cut: a secret cut in two would no longer be found.
        let text = self.secrets.redact(&text);
        let text = text.trim_end();
        if text.is_empty() {
            return;
        }
        let mut kept: String = text.chars().take(STDERR_LINE_CHARS).collect();
        if kept.len() < text.len() {
            kept.push('…');
        }
        if self.lines.len() == self.max_lines {
            self.lines.pop_front();
        }
        self.lines.push_back(kept);
    }

    /// The kept lines joined by newlines; `None` when nothing was kept.
    pub fn text(&self) -> Option<String> {
        (!self.lines.is_empty()).then(|| self.lines.iter().map(String::as_str).collect::<Vec<_>>().join("\n"))
    }

    /// Reads `output` to its end (or its first read error), keeping its last lines. Lines over
    /// [`STDERR_MAX_LINE`] bytes are skipped.
    pub async fn read_to_end(&mut self, output: impl AsyncRead + Unpin) {
        let mut lines = LineReader::new(output, STDERR_MAX_LINE);
        while let Ok(Some(line)) = lines.next_line().await {
            if let Line::Text(bytes) = line {
                self.push(bytes);
            }
        }
    }
}

/// A task that reads a child's stderr to its end in the background, keeping a [`StderrTail`]
/// for the error reports of a connection. Dropping it stops the task.
#[derive(Debug)]
pub struct StderrCollector {
    tail: Arc<Mutex<StderrTail>>,
    task: Mutex<Option<JoinHandle<()>>>,
    abort: AbortHandle,
}

impl StderrCollector {
    /// Starts reading `output` on the current Tokio runtime, keeping its last `max_lines`
    /// lines.
    pub fn spawn(output: impl AsyncRead + Unpin + Send + 'static, max_lines: usize) -> Self {
        Self::spawn_redacting(output, max_lines, Secrets::default())
    }

    /// [`StderrCollector::spawn`], redacting `secrets` from every line kept.
    pub fn spawn_redacting(
        output: impl AsyncRead + Unpin + Send + 'static,
        max_lines: usize,
        secrets: Secrets,
    ) -> Self {
        let tail = Arc::new(Mutex::new(StderrTail::new(max_lines).redacting(secrets)));
        let kept = Arc::clone(&tail);
        let task = tokio::spawn(async move {
            let mut lines = LineReader::with_first_buffer(output, STDERR_MAX_LINE, FIRST_STDERR_BUFFER);
            while let Ok(Some(line)) = lines.next_line().await {
                if let Line::Text(bytes) = line {
                    lock(&kept).push(bytes);
                }
            }
        });
        let abort = task.abort_handle();
        StderrCollector { tail, task: Mutex::new(Some(task)), abort }
    }

    /// The lines kept so far; `None` when there are none.
    pub fn text(&self) -> Option<String> {
        lock(&self.tail).text()
    }

    /// Waits up to `wait` for stderr to end (after the process exited, for the last lines to
    /// arrive), then stops reading. Later calls return at once.
    pub async fn drain(&self, wait: Duration) {
        let task = lock(&self.task).take();
        if let Some(task) = task
            && tokio::time::timeout(wait, task).await.is_err()
        {
            self.abort.abort();
        }
    }

    /// Stops reading now.
    pub fn abort(&self) {
        self.abort.abort();
    }
}

impl Drop for StderrCollector {
    fn drop(&mut self) {
        self.abort.abort();
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Removes ANSI escape sequences (`ESC [ … letter`).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            out.push(c);
            continue;
        }
        if chars.peek() == Some(&'[') {
            chars.next();
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncWriteExt;

    use super::*;

    #[test]
    fn a_stderr_note_ends_an_error_text() {
        assert_eq!(stderr_note(Some("boom\nbang")), "; stderr:\nboom\nbang");
        assert_eq!(stderr_note(None), "");
    }

    #[test]
    fn stderr_tail_is_bounded_and_plain() {
        let mut tail = StderrTail::default();
        assert_eq!(tail.text(), None);
        for i in 0..100 {
            tail.push(format!("\u{1b}[2m2026\u{1b}[0m \u{1b}[31mERROR\u{1b}[0m line {i}").as_bytes());
        }
        let text = tail.text().expect("kept lines");
        assert_eq!(text.lines().count(), STDERR_TAIL_LINES);
        assert!(text.ends_with("2026 ERROR line 99"), "{text}");
        assert!(!text.contains('\u{1b}'));
        tail.push("y".repeat(2000).as_bytes());
        assert!(tail.text().expect("kept lines").ends_with('…'));
        let mut short = StderrTail::new(2);
        for line in ["a", "", "b", "c"] {
            short.push(line.as_bytes());
        }
        assert_eq!(short.text().as_deref(), Some("b\nc"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_collector_keeps_the_tail_and_stops_when_told() {
        let (mut writer, reader) = tokio::io::duplex(64);
        let collector = StderrCollector::spawn(reader, 2);
        writer.write_all(b"a\nb\nc\n").await.expect("writes");
        // Stderr stays open: draining waits its time, then stops reading.
        collector.drain(Duration::from_millis(500)).await;
        assert_eq!(collector.text().as_deref(), Some("b\nc"));
        collector.drain(Duration::from_secs(60)).await;
        let (mut writer, reader) = tokio::io::duplex(64);
        let collector = StderrCollector::spawn(reader, 2);
        writer.write_all(b"last words").await.expect("writes");
        drop(writer);
        collector.drain(Duration::from_secs(60)).await;
        assert_eq!(collector.text().as_deref(), Some("last words"));
    }

    #[tokio::test]
    async fn stderr_tail_reads_a_stream() {
        let mut tail = StderrTail::new(2);
        let input = [b"one\n".to_vec(), vec![b'z'; STDERR_MAX_LINE + 1], b"\ntwo\r\nthree".to_vec()].concat();
        tail.read_to_end(&input[..]).await;
        assert_eq!(tail.text().as_deref(), Some("two\nthree"));
    }
}
