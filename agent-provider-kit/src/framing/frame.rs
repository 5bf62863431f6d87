//! Sorting a line read from a CLI: JSON, blank or garbage, and keeping it as raw JSON.

use agent_core::event::RawJson;

use super::{Bytes, Line};

/// One line of a JSON-lines stream, sorted.
#[derive(Debug)]
pub enum JsonFrame {
    /// A JSON value (surrounding whitespace trimmed).
    Json(RawJson),
    /// An empty or all-whitespace line; JSON-lines writers may emit them, and they mean nothing.
    Blank,
    /// A line that is not UTF-8, of this many bytes.
    NotUtf8 {
        /// Length in bytes.
        len: usize,
    },
    /// A UTF-8 line that is not one JSON value, of this many bytes.
    NotJson {
        /// Length in bytes.
        len: usize,
    },
    /// A line over the reader's cap, of this many bytes; it was dropped unread.
    TooLong {
        /// Length in bytes.
        len: usize,
    },
}

impl JsonFrame {
    /// Sorts one line, checking that a text line is JSON. Copies a JSON line once, into the
    /// owned [`RawJson`]. A provider that parses each line into its own messages anyway should
    /// use [`TextFrame`] instead: its parse is the check, and the line is read once.
    pub fn from_line(line: Line<'_>) -> JsonFrame {
        match TextFrame::from_line(line) {
            TextFrame::Text(text) => match RawJson::from_string(text.to_owned()) {
                Ok(raw) => JsonFrame::Json(raw),
                Err(_) => JsonFrame::NotJson { len: text.len() },
            },
            TextFrame::Blank => JsonFrame::Blank,
            TextFrame::NotUtf8 { len } => JsonFrame::NotUtf8 { len },
            TextFrame::TooLong { len } => JsonFrame::TooLong { len },
        }
    }
}

/// One line of a JSON-lines stream, borrowed and sorted without parsing it: for a provider
/// whose own parse of the text is the JSON check (see [`is_not_json`]), after which the line
/// becomes the event's raw JSON with [`RawJson::parsed`].
#[derive(Debug)]
pub enum TextFrame<'a> {
    /// UTF-8 text, surrounding whitespace trimmed, not empty.
    Text(&'a str),
    /// An empty or all-whitespace line.
    Blank,
    /// A line that is not UTF-8, of this many bytes.
    NotUtf8 {
        /// Length in bytes.
        len: usize,
    },
    /// A line over the reader's cap, of this many bytes; it was dropped unread.
    TooLong {
        /// Length in bytes.
        len: usize,
    },
}

/// `bytes` as text when they are UTF-8. A CLI's lines are nearly always all ASCII, which is
/// checked for much less than the full check costs: the bytes are or-ed together (into vector
/// registers, by the compiler) without a branch per byte or word.
fn utf8(bytes: &[u8]) -> Option<&str> {
    if bytes.iter().fold(0, |all, &b| all | b) < 0x80 {
        // SAFETY: ASCII is UTF-8.
        Some(unsafe { std::str::from_utf8_unchecked(bytes) })
    } else {
        std::str::from_utf8(bytes).ok()
    }
}

impl<'a> TextFrame<'a> {
    /// Sorts one line.
    pub fn from_line(line: Line<'a>) -> TextFrame<'a> {
        let bytes = match line {
            Line::Text(bytes) => bytes,
            Line::TooLong(len) => return TextFrame::TooLong { len },
        };
        let Some(text) = utf8(bytes) else {
            return TextFrame::NotUtf8 { len: bytes.len() };
        };
        match text.trim() {
            "" => TextFrame::Blank,
            text => TextFrame::Text(text),
        }
    }

    /// The text of the line, `None` for a blank line, or the warning for a line that could not
    /// be read, naming `cli` and, for a line over the cap, the reader's `max_line`:
    /// "`<cli>` wrote a stdout line that is not UTF-8 (`<len>` bytes)" or "`<cli>` wrote a stdout
    /// line of `<len>` bytes, over the `<max_line>`-byte limit; dropped".
    pub fn into_text(self, cli: &str, max_line: usize) -> Result<Option<&'a str>, String> {
        match self {
            TextFrame::Text(text) => Ok(Some(text)),
            TextFrame::Blank => Ok(None),
            TextFrame::NotUtf8 { len } => Err(unparsed_line_warning(cli, "UTF-8", len)),
            TextFrame::TooLong { len } => {
                Err(format!("{cli} wrote a stdout line of {len} bytes, over the {max_line}-byte limit; dropped"))
            }
        }
    }

    /// The text of the line; `None` for a blank line, and for one that could not be read,
    /// whose warning (see [`TextFrame::into_text`]) goes to `unreadable`.
    pub fn text(self, cli: &str, max_line: usize, unreadable: impl FnOnce(String)) -> Option<&'a str> {
        self.into_text(cli, max_line).unwrap_or_else(|warning| {
            unreadable(warning);
            None
        })
    }
}

/// `text`, a line a provider has just parsed as JSON, kept as raw JSON: a slice of `chunk` (from
/// [`LineReader::next_line_in_chunk`](super::LineReader::next_line_in_chunk)) when it lies in
/// it, a copy otherwise.
pub fn keep_line(text: &str, chunk: Option<&Bytes>) -> RawJson {
    match chunk {
        Some(chunk) => RawJson::parsed_in(text, chunk),
        None => RawJson::parsed(text.to_owned()),
    }
}

/// The warning for a stdout line of `len` bytes that `cli` wrote and that is not `what` (`"JSON"`,
/// `"a JSON message"`): "`<cli>` wrote a stdout line that is not `<what>` (`<len>` bytes)".
pub fn unparsed_line_warning(cli: &str, what: &str, len: usize) -> String {
    format!("{cli} wrote a stdout line that is not {what} ({len} bytes)")
}

/// True when a `serde_json` error says the text is not JSON at all (a syntax error or an early
/// end), as opposed to JSON of another shape than the type asked for.
pub fn is_not_json(error: &serde_json::Error) -> bool {
    matches!(error.classify(), serde_json::error::Category::Syntax | serde_json::error::Category::Eof)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_is_text_exactly_when_std_says_it_is_utf8() {
        let mut lines: Vec<Vec<u8>> = vec![b"".to_vec(), b"{\"a\":1}".to_vec(), "{\"é\":\"😀\"}".as_bytes().to_vec()];
        // Invalid: a lone continuation byte, a cut sequence, an overlong form, a surrogate, 0xff;
        // each at the start, in the middle and at the end of an ASCII line.
        for bad in [&[0x80u8][..], &[0xe2, 0x82], &[0xc0, 0xaf], &[0xed, 0xa0, 0x80], &[0xff]] {
            for at in [0, 20, 40] {
                let mut line = vec![b'x'; 40];
                line.splice(at..at, bad.iter().copied());
                lines.push(line);
            }
        }
        for line in &lines {
            assert_eq!(utf8(line), std::str::from_utf8(line).ok(), "{line:?}");
        }
    }

    #[test]
    fn unreadable_lines_become_warnings_naming_the_cli() {
        assert_eq!(TextFrame::Text("{}").into_text("pi", 10), Ok(Some("{}")));
        assert_eq!(TextFrame::Blank.into_text("pi", 10), Ok(None));
        assert_eq!(
            TextFrame::NotUtf8 { len: 3 }.into_text("pi", 10),
            Err("pi wrote a stdout line that is not UTF-8 (3 bytes)".to_owned())
        );
        assert_eq!(
            TextFrame::TooLong { len: 12 }.into_text("codex", 10),
            Err("codex wrote a stdout line of 12 bytes, over the 10-byte limit; dropped".to_owned())
        );
        assert_eq!(
            unparsed_line_warning("claude", "a JSON message", 8),
            "claude wrote a stdout line that is not a JSON message (8 bytes)"
        );
    }

    #[track_caller]
    fn frame(line: Line<'_>) -> String {
        match JsonFrame::from_line(line) {
            JsonFrame::Json(raw) => format!("json {}", raw.get()),
            other => format!("{other:?}"),
        }
    }

    #[test]
    fn sorts_json_frames() {
        assert_eq!(frame(Line::Text(b" {\"a\": [1]} \r")), "json {\"a\": [1]}");
        assert_eq!(frame(Line::Text(b"  ")), "Blank");
        assert_eq!(frame(Line::Text(b"")), "Blank");
        assert_eq!(frame(Line::Text(b"\xff{}")), "NotUtf8 { len: 3 }");
        assert_eq!(frame(Line::Text(b"{} {}")), "NotJson { len: 5 }");
        assert_eq!(frame(Line::Text(b"Loading...")), "NotJson { len: 10 }");
        assert_eq!(frame(Line::TooLong(9)), "TooLong { len: 9 }");
    }
}
