//! Redacting credentials from stdout lines (see [`crate::secrets`]).

use memchr::memmem::Finder;

use crate::secrets::{REDACTED, Secrets};

/// The credentials a [`LineReader`](super::LineReader) replaces in the lines it hands out, each
/// as it would appear in a line: as is, and in each way a JSON encoder escapes it in a string
/// when that differs (see [`escapes`]).
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
            patterns.extend(escapes(credential).into_iter().map(String::into_bytes));
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

/// How one JSON encoder writes a string's characters where it escapes more than `"`, `\` and
/// the control characters every encoder escapes.
struct Encoder {
    /// Characters written as `\uXXXX` (UTF-16 units).
    unicode: fn(char) -> bool,
    /// `/` written as `\/`.
    slash: bool,
    /// Hex in capitals, and `"` as `\u0022`.
    upper: bool,
}

/// The encoders [`escapes`] writes a credential as: serde's and Node's (`"`, `\` and control
/// characters only: `\n`, `\u001b`), PHP's `json_encode` (`/`, U+2028, U+2029 and, by default,
/// every character beyond ASCII), Go's `encoding/json` (HTML-safe: `<`, `>`, `&`, U+2028,
/// U+2029), Python's `json.dumps` (by default every character outside `' '..='~'`), Java's Gson
/// (HTML-safe: `<`, `>`, `&`, `=`, `'`, U+2028, U+2029) and .NET's `System.Text.Json` (every
/// character outside ASCII's printable ones, `<`, `>`, `&`, `'`, `+`, `` ` ``, and `"`, in
/// capitals: `\u002B`, `\u001B`).
const ENCODERS: &[Encoder] = &[
    Encoder { unicode: |_| false, slash: false, upper: false },
    Encoder { unicode: |c| !c.is_ascii(), slash: true, upper: false },
    Encoder { unicode: |c| matches!(c, '\u{2028}' | '\u{2029}'), slash: true, upper: false },
    Encoder { unicode: |c| matches!(c, '<' | '>' | '&' | '\u{2028}' | '\u{2029}'), slash: false, upper: false },
    Encoder { unicode: |c| !c.is_ascii() || c == '\x7f', slash: false, upper: false },
    Encoder {
        unicode: |c| matches!(c, '<' | '>' | '&' | '=' | '\'' | '\u{2028}' | '\u{2029}'),
        slash: false,
        upper: false,
    },
    Encoder {
        unicode: |c| !c.is_ascii() || matches!(c, '\x7f' | '<' | '>' | '&' | '\'' | '+' | '`' | '"'),
        slash: false,
        upper: true,
    },
];

/// `credential` as each of [`ENCODERS`] writes it inside a JSON string, where that differs from
/// it. A preset's CLI may be written in any language, and a credential with such a character (a
/// password with `&`, a base64 key ending in `=`) would otherwise reach events after the parse
/// decoded it.
fn escapes(credential: &str) -> Vec<String> {
    let written = |encoder: &Encoder| {
        let mut out = String::with_capacity(credential.len() + 8);
        let unicode = |out: &mut String, c: char| {
            for unit in c.encode_utf16(&mut [0u16; 2]) {
                out.push_str(&if encoder.upper { format!("\\u{unit:04X}") } else { format!("\\u{unit:04x}") });
            }
        };
        for c in credential.chars() {
            match c {
                '"' if encoder.upper => unicode(&mut out, c),
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '/' if encoder.slash => out.push_str("\\/"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                c if c < ' ' || (encoder.unicode)(c) => unicode(&mut out, c),
                c => out.push(c),
            }
        }
        out
    };
    let mut escapes: Vec<String> = ENCODERS.iter().map(written).collect();
    escapes.retain(|escaped| escaped != credential);
    escapes.sort();
    escapes.dedup();
    escapes
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

    /// PHP escapes `/`, Go and Gson `<`, `>` and `&` (Gson `=` too), Python every character
    /// beyond ASCII, .NET those and more in upper-case hex: a password with one of them is
    /// found in the lines of a CLI written in any of those.
    #[test]
    fn credentials_are_replaced_as_each_kind_of_encoder_escapes_them() {
        let password = "p&ss/w<rd>é😀";
        assert_eq!(
            escapes(password),
            [
                r"p&ss/w<rd>\u00e9\ud83d\ude00",
                r"p&ss\/w<rd>\u00e9\ud83d\ude00",
                r"p&ss\/w<rd>é😀",
                r"p\u0026ss/w\u003Crd\u003E\u00E9\uD83D\uDE00",
                r"p\u0026ss/w\u003crd\u003eé😀",
            ]
        );
        assert!(escapes("sk-plain-0123456789").is_empty());
        assert_eq!(
            escapes("sk+base64/key=="),
            [r"sk+base64/key\u003d\u003d", r"sk+base64\/key==", r"sk\u002Bbase64/key=="]
        );
        assert_eq!(escapes("pa\"ss\\word\n"), [r#"pa\"ss\\word\n"#, r"pa\u0022ss\\word\n"]);
        // Control characters as every encoder writes them, DEL as Python and .NET do, U+2028
        // as PHP does even when told to leave what is beyond ASCII.
        assert_eq!(
            escapes("ab\x1bc\x7fd\u{2028}/"),
            [
                "ab\\u001Bc\\u007Fd\\u2028/",
                "ab\\u001bc\\u007fd\\u2028/",
                "ab\\u001bc\u{7f}d\\u2028/",
                "ab\\u001bc\u{7f}d\\u2028\\/",
                "ab\\u001bc\u{7f}d\u{2028}/",
            ]
        );
        let secrets = Secrets::new([password.to_owned()]);
        let mut redactor = Redactor::new(&secrets).expect("credentials");
        for line in [
            r#"{"out":"DB_PASSWORD=p\u0026ss/w\u003crd\u003eé😀\n"}"#,
            r#"{"out":"DB_PASSWORD=p&ss/w<rd>\u00e9\ud83d\ude00\n"}"#,
            r#"{"out":"DB_PASSWORD=p&ss\/w<rd>é😀\n"}"#,
            r#"{"out":"DB_PASSWORD=p&ss\/w<rd>\u00e9\ud83d\ude00\n"}"#,
            r#"{"out":"DB_PASSWORD=p\u0026ss/w\u003Crd\u003E\u00E9\uD83D\uDE00\n"}"#,
        ] {
            let mut out = Vec::new();
            redactor.redact_into(line.as_bytes(), &mut out);
            assert_eq!(out, br#"{"out":"DB_PASSWORD=[redacted]\n"}"#, "{line}");
        }
    }
}
