//! Redacting credentials from stdout lines (see [`crate::secrets`]).

use memchr::memmem::Finder;

use crate::secrets::{REDACTED, Secrets};

/// The credentials a [`LineReader`](super::LineReader) replaces in the lines it hands out, each
/// as it would appear in a line: as is, and escaped as in a JSON string when that differs (a
/// `"` or `\` in it).
#[derive(Debug)]
pub(super) struct Redactor {
    /// Longest first, so that a credential holding another is replaced whole.
    finders: Vec<Finder<'static>>,
    /// Where a redacted line is built.
    scratch: Vec<u8>,
}

impl Redactor {
    /// `None` when `secrets` has no credential: a reader then searches nothing.
    pub(super) fn new(secrets: &Secrets) -> Option<Redactor> {
        let mut patterns: Vec<Vec<u8>> = Vec::new();
        for credential in secrets.credentials() {
            patterns.push(credential.as_bytes().to_vec());
            let escaped = serde_json::to_string(credential).expect("a string serializes");
            let escaped = &escaped.as_bytes()[1..escaped.len() - 1];
            if escaped != credential.as_bytes() {
                patterns.push(escaped.to_vec());
            }
        }
        if patterns.is_empty() {
            return None;
        }
        patterns.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        patterns.dedup();
        let finders = patterns.iter().map(|p| Finder::new(p).into_owned()).collect();
        Some(Redactor { finders, scratch: Vec::new() })
    }

    /// True when `line` holds a credential.
    pub(super) fn finds(&self, line: &[u8]) -> bool {
        self.finders.iter().any(|finder| finder.find(line).is_some())
    }

    /// `line` with every credential replaced by [`REDACTED`], into `out` (cleared first).
    pub(super) fn redact_into(&mut self, line: &[u8], out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(line);
        for finder in &self.finders {
            if finder.find(out).is_none() {
                continue;
            }
            self.scratch.clear();
            let mut last = 0;
            for at in finder.find_iter(out) {
                self.scratch.extend_from_slice(&out[last..at]);
                self.scratch.extend_from_slice(REDACTED.as_bytes());
                last = at + finder.needle().len();
            }
            self.scratch.extend_from_slice(&out[last..]);
            std::mem::swap(out, &mut self.scratch);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_replaced_as_is_and_as_json_escapes_them() {
        let secrets = Secrets::new(["sk-abc-12345".to_owned(), r#"pa"ss\word"#.to_owned(), "short".to_owned()]);
        let mut redactor = Redactor::new(&secrets).expect("credentials");
        let line = br#"{"text":"sk-abc-12345 and sk-abc-12345x, pa\"ss\\word, short"}"#;
        assert!(redactor.finds(line));
        let mut out = Vec::new();
        redactor.redact_into(line, &mut out);
        assert_eq!(out, br#"{"text":"[redacted] and [redacted]x, [redacted], short"}"#);
        assert!(!redactor.finds(b"sk-abc-1234 nothing"));
        assert!(Redactor::new(&Secrets::default()).is_none());
    }
}
