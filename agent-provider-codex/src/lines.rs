//! Reading a child's output one line at a time, with a cap on line length, and keeping the tail
//! of its stderr.

use std::collections::VecDeque;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

/// Capacity of the buffered readers on the child's pipes.
const READ_BUFFER: usize = 64 * 1024;

/// One line of output.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Line {
    /// A complete line, without its newline.
    Text(Vec<u8>),
    /// A line longer than the cap; its bytes were skipped.
    TooLong(usize),
}

/// Splits a byte stream into lines of at most `max` bytes.
#[derive(Debug)]
pub(crate) struct LineReader<R> {
    inner: BufReader<R>,
    max: usize,
}

impl<R: AsyncRead + Unpin> LineReader<R> {
    pub(crate) fn new(inner: R, max: usize) -> Self {
        LineReader { inner: BufReader::with_capacity(READ_BUFFER, inner), max }
    }

    /// The next line, or `None` at the end of the stream. A final line without a newline is
    /// returned as a line. Not cancel-safe: drive it from one task.
    pub(crate) async fn next_line(&mut self) -> std::io::Result<Option<Line>> {
        let mut line = Vec::new();
        let mut skipped = 0usize;
        loop {
            let available = self.inner.fill_buf().await?;
            if available.is_empty() {
                return Ok(match (skipped, line.is_empty()) {
                    (0, true) => None,
                    (0, false) => Some(Line::Text(line)),
                    (n, _) => Some(Line::TooLong(n)),
                });
            }
            let (chunk, consumed, done) = match memchr::memchr(b'\n', available) {
                Some(i) => (&available[..i], i + 1, true),
                None => (available, available.len(), false),
            };
            if skipped == 0 && line.len() + chunk.len() <= self.max {
                line.extend_from_slice(chunk);
            } else {
                skipped += line.len() + chunk.len();
                line = Vec::new();
            }
            self.inner.consume(consumed);
            if done {
                return Ok(Some(if skipped == 0 { Line::Text(line) } else { Line::TooLong(skipped) }));
            }
        }
    }
}

/// Lines of stderr kept for a failure report.
pub(crate) const STDERR_TAIL_LINES: usize = 40;
/// Longest stderr line kept; the rest of a line is cut.
const STDERR_LINE_CHARS: usize = 500;

/// The last lines of a child's stderr, with terminal colour codes removed.
#[derive(Debug)]
pub(crate) struct StderrTail {
    lines: VecDeque<String>,
    max_lines: usize,
}

impl Default for StderrTail {
    /// Keeps [`STDERR_TAIL_LINES`] lines.
    fn default() -> Self {
        StderrTail::new(STDERR_TAIL_LINES)
    }
}

impl StderrTail {
    /// Keeps the last `max_lines` lines (at least one).
    pub(crate) fn new(max_lines: usize) -> Self {
        StderrTail { lines: VecDeque::new(), max_lines: max_lines.max(1) }
    }

    pub(crate) fn push(&mut self, line: &[u8]) {
        let text = strip_ansi(&String::from_utf8_lossy(line));
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

    /// The kept lines joined by newlines; `None` when stderr was empty.
    pub(crate) fn text(&self) -> Option<String> {
        (!self.lines.is_empty()).then(|| self.lines.iter().map(String::as_str).collect::<Vec<_>>().join("\n"))
    }
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
    use super::*;

    async fn lines(input: &[u8], max: usize) -> Vec<Line> {
        let mut reader = LineReader::new(input, max);
        let mut out = Vec::new();
        while let Some(line) = reader.next_line().await.unwrap() {
            out.push(line);
        }
        out
    }

    fn text(s: &str) -> Line {
        Line::Text(s.as_bytes().to_vec())
    }

    #[tokio::test]
    async fn splits_lines_and_keeps_a_final_partial_line() {
        assert_eq!(lines(b"a\n\nbc\nd", 10).await, vec![text("a"), text(""), text("bc"), text("d")]);
        assert_eq!(lines(b"", 10).await, Vec::<Line>::new());
    }

    #[tokio::test]
    async fn skips_overlong_lines_and_continues() {
        assert_eq!(lines(b"0123456789abc\nok\n", 10).await, vec![Line::TooLong(13), text("ok")]);
        assert_eq!(lines(b"0123456789", 10).await, vec![text("0123456789")]);
        let big = [vec![b'x'; 200_000], b"\nafter\n".to_vec()].concat();
        assert_eq!(lines(&big, 1024).await, vec![Line::TooLong(200_000), text("after")]);
    }

    #[test]
    fn stderr_tail_is_bounded_and_plain() {
        let mut tail = StderrTail::default();
        assert_eq!(tail.text(), None);
        for i in 0..100 {
            tail.push(format!("\u{1b}[2m2026\u{1b}[0m \u{1b}[31mERROR\u{1b}[0m line {i}").as_bytes());
        }
        let text = tail.text().unwrap();
        assert_eq!(text.lines().count(), STDERR_TAIL_LINES);
        assert!(text.ends_with("2026 ERROR line 99"), "{text}");
        assert!(!text.contains('\u{1b}'));
        tail.push("y".repeat(2000).as_bytes());
        assert!(tail.text().unwrap().ends_with('…'));
        let mut short = StderrTail::new(2);
        for line in ["a", "b", "c"] {
            short.push(line.as_bytes());
        }
        assert_eq!(short.text().as_deref(), Some("b\nc"));
    }
}
