//! A validating JSON scanner for the lines a provider reads most: a fast path beside serde.
//!
//! A streamed delta is most of what a busy CLI writes, and every one has the same small shape.
//! `serde_json` parses it through its visitor machinery (a map access, a key seed and a field
//! match per key); [`Scanner`] walks the same bytes by hand: keys compared as slices, strings
//! borrowed where they need no unescaping, every value it skips checked as it goes. It takes
//! only what it is sure of: any answer of `None` means "not here" — the line is not JSON, or is
//! JSON this scanner leaves to serde (an escaped key, a lone surrogate, nesting deeper than
//! [`MAX_DEPTH`]) — and the caller parses the line with `serde_json`, which says which.
//!
//! What it accepts is JSON (RFC 8259) and its strings decode as `serde_json` decodes them, so
//! a caller that scanned a whole line with it can keep the line as
//! [`RawJson`](agent_core::event::RawJson) without another check. It works on `&str`: the
//! caller has checked the line is UTF-8.
//!
//! ```
//! use agent_provider_kit::scan::Scanner;
//!
//! let line = r#"{"method":"delta","params":{"text":"a\nb","n":[1,2.5e3,null]}}"#;
//! let mut s = Scanner::new(line);
//! s.begin_object().unwrap();
//! assert_eq!(s.next_key(), Some(Some("method")));
//! assert_eq!(s.string().as_deref(), Some("delta"));
//! assert_eq!(s.next_key(), Some(Some("params")));
//! s.begin_object().unwrap();
//! assert_eq!(s.next_key(), Some(Some("text")));
//! assert_eq!(s.string().as_deref(), Some("a\nb"));
//! assert_eq!(s.next_key(), Some(Some("n")));
//! s.skip_value().unwrap();
//! assert_eq!(s.next_key(), Some(None)); // the end of `params`
//! assert_eq!(s.next_key(), Some(None)); // the end of the line's object
//! assert!(s.end().is_some());
//! ```

use std::borrow::Cow;

use agent_core::event::json_escape;

/// Deepest nesting [`Scanner::skip_value`] follows (as `serde_json`'s default recursion limit).
pub const MAX_DEPTH: usize = 128;

/// A cursor over one JSON text. See the [module docs](self).
#[derive(Debug, Clone)]
pub struct Scanner<'a> {
    text: &'a str,
    pos: usize,
    /// How many objects entered with [`begin_object`](Scanner::begin_object) are not closed.
    open: u32,
    /// Bit `n`: a field was read in the `n`th open object (so a comma comes before the next).
    seen: u64,
}

/// How many objects [`Scanner::begin_object`] may have open at once.
const MAX_OPEN: u32 = u64::BITS;

impl<'a> Scanner<'a> {
    /// A scanner at the start of `text`.
    pub fn new(text: &'a str) -> Scanner<'a> {
        Scanner { text, pos: 0, open: 0, seen: 0 }
    }

    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    fn peek(&self) -> Option<u8> {
        self.bytes().get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    /// Consumes `byte` after any whitespace.
    fn eat(&mut self, byte: u8) -> Option<()> {
        self.skip_ws();
        (self.peek()? == byte).then(|| self.pos += 1)
    }

    /// Enters the object that comes next (the line's, or a field's value); up to 64 at once.
    pub fn begin_object(&mut self) -> Option<()> {
        if self.open == MAX_OPEN {
            return None;
        }
        self.eat(b'{')?;
        self.seen &= !(1 << self.open);
        self.open += 1;
        Some(())
    }

    /// The next key of the innermost open object (its value is next), or `Some(None)` at its
    /// end, which closes it. `None` for a key with escapes (left to serde) or bad syntax.
    pub fn next_key(&mut self) -> Option<Option<&'a str>> {
        let innermost = 1u64 << self.open.checked_sub(1)?;
        let seen = self.seen & innermost != 0;
        self.skip_ws();
        match self.peek()? {
            b'}' => {
                self.pos += 1;
                self.open -= 1;
                return Some(None);
            }
            b',' if seen => self.pos += 1,
            _ if seen => return None,
            _ => {}
        }
        self.seen |= innermost;
        self.eat(b'"')?;
        let key = match self.string_body()? {
            Cow::Borrowed(key) => key,
            Cow::Owned(_) => return None,
        };
        self.eat(b':')?;
        Some(Some(key))
    }

    /// Whether the next key of the innermost open object is `key`, written as is and without
    /// whitespace around it (as a CLI writes its own frames); if so it is taken as
    /// [`next_key`](Scanner::next_key) would take it, its value next. `false` takes nothing —
    /// the key may still be `key` written otherwise, which `next_key` reads. A reader that knows
    /// the order its CLI writes fields in asks this first and compares one slice per field.
    /// `key` must not need escaping.
    pub fn key_is(&mut self, key: &str) -> bool {
        debug_assert!(!key.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20), "{key:?} needs escaping");
        let Some(depth) = self.open.checked_sub(1) else { return false };
        let innermost = 1u64 << depth;
        let comma = usize::from(self.seen & innermost != 0);
        let key = key.as_bytes();
        // `,"key":` (the comma when a field came before), in place.
        let Some(token) = self.bytes().get(self.pos..self.pos + comma + key.len() + 3) else { return false };
        let (open, rest) = token.split_at(comma + 1);
        let (name, close) = rest.split_at(key.len());
        let taken = open[comma] == b'"' && (comma == 0 || open[0] == b',') && close == b"\":" && same_short(name, key);
        if taken {
            self.pos += token.len();
            self.seen |= innermost;
        }
        taken
    }

    /// [`next_key`](Scanner::next_key), trying first (with [`key_is`](Scanner::key_is)) the key
    /// `order[*next]`, the one a CLI that writes its fields in `order` writes next; `*next`
    /// moves on when it is. The key is the same either way.
    pub fn next_key_in(&mut self, order: &[&'static str], next: &mut usize) -> Option<Option<&'a str>> {
        if let Some(&key) = order.get(*next)
            && self.key_is(key)
        {
            *next += 1;
            return Some(Some(key));
        }
        self.next_key()
    }

    /// A string value: borrowed from the text when it has no escapes, decoded otherwise.
    pub fn string(&mut self) -> Option<Cow<'a, str>> {
        self.eat(b'"')?;
        self.string_body()
    }

    /// A string value, as [`Scanner::string`], decoding one with escapes into `scratch` (emptied
    /// first) instead of a new `String`: for the text a reader copies anyway (into a
    /// [`TextArena`](agent_core::event::TextArena)), one buffer serves every line, where a `String` per
    /// escaped text cost an allocation and a free per line.
    ///
    /// ```
    /// use agent_provider_kit::scan::Scanner;
    ///
    /// let mut scratch = String::new();
    /// assert_eq!(Scanner::new(r#""plain""#).string_in(&mut scratch), Some("plain"));
    /// assert!(scratch.is_empty(), "borrowed from the text");
    /// assert_eq!(Scanner::new(r#""line\nbreak""#).string_in(&mut scratch), Some("line\nbreak"));
    /// assert_eq!(scratch, "line\nbreak");
    /// ```
    pub fn string_in<'s>(&mut self, scratch: &'s mut String) -> Option<&'s str>
    where
        'a: 's,
    {
        self.eat(b'"')?;
        match self.plain_body()? {
            Ok(body) => Some(body),
            Err(plain) => {
                scratch.clear();
                scratch.push_str(plain);
                self.decode_rest(scratch)?;
                Some(scratch)
            }
        }
    }

    /// A string or `null` (`Some(None)`).
    pub fn string_or_null(&mut self) -> Option<Option<Cow<'a, str>>> {
        self.skip_ws();
        if self.peek()? == b'n' {
            return self.literal(b"null").map(|()| None);
        }
        self.string().map(Some)
    }

    /// Skips the value that comes next, checking it.
    pub fn skip_value(&mut self) -> Option<()> {
        self.skip(0)
    }

    /// Checks that only whitespace is left and every object entered was closed.
    pub fn end(&mut self) -> Option<()> {
        self.skip_ws();
        (self.pos == self.text.len() && self.open == 0).then_some(())
    }

    fn skip(&mut self, depth: usize) -> Option<()> {
        self.skip_ws();
        match self.peek()? {
            b'"' => {
                self.pos += 1;
                self.skip_string()
            }
            b'{' | b'[' if depth >= MAX_DEPTH => None,
            b'{' => {
                self.pos += 1;
                if self.closes(b'}') {
                    return Some(());
                }
                loop {
                    self.eat(b'"')?;
                    self.skip_string()?;
                    self.eat(b':')?;
                    self.skip(depth + 1)?;
                    if self.after_item(b'}')? {
                        return Some(());
                    }
                }
            }
            b'[' => {
                self.pos += 1;
                if self.closes(b']') {
                    return Some(());
                }
                loop {
                    self.skip(depth + 1)?;
                    if self.after_item(b']')? {
                        return Some(());
                    }
                }
            }
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    /// Consumes `close` if it comes next (an empty container).
    fn closes(&mut self, close: u8) -> bool {
        self.skip_ws();
        let closed = self.peek() == Some(close);
        if closed {
            self.pos += 1;
        }
        closed
    }

    /// After a container's item: `Some(true)` at its `close`, `Some(false)` past a comma.
    fn after_item(&mut self, close: u8) -> Option<bool> {
        self.skip_ws();
        let next = self.peek()?;
        if next != b',' && next != close {
            return None;
        }
        self.pos += 1;
        Some(next == close)
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        self.bytes()[self.pos..].starts_with(word).then(|| self.pos += word.len())
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`
    fn number(&mut self) -> Option<()> {
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek()? {
            b'0' => self.pos += 1,
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            self.some_digits()?;
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            self.some_digits()?;
        }
        Some(())
    }

    fn digits(&mut self) {
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
    }

    fn some_digits(&mut self) -> Option<()> {
        let start = self.pos;
        self.digits();
        (self.pos > start).then_some(())
    }

    /// Where the next `"`, `\` or control character is, from `self.pos`.
    fn next_special(&self) -> Option<usize> {
        let bytes = self.bytes();
        let mut i = self.pos;
        #[cfg(target_arch = "x86_64")]
        if let Some(at) = wide::next_special(bytes, &mut i) {
            return Some(at);
        }
        // Eight bytes at a time: a word with none of the three is skipped whole.
        const ONES: u64 = 0x0101_0101_0101_0101;
        const HIGH: u64 = 0x8080_8080_8080_8080;
        while let Some(word) = bytes.get(i..i + 8) {
            let w = u64::from_le_bytes(word.try_into().expect("eight bytes"));
            let quote = w ^ (ONES * u64::from(b'"'));
            let backslash = w ^ (ONES * u64::from(b'\\'));
            // A byte is zero in `quote` or `backslash`, or below 0x20 in `w`, exactly where
            // these have its high bit set — for the word's first such byte: a borrow runs only
            // upwards from one, so bytes after it may be misreported, never one before.
            let found = (quote.wrapping_sub(ONES) & !quote
                | backslash.wrapping_sub(ONES) & !backslash
                | w.wrapping_sub(ONES * 0x20) & !w)
                & HIGH;
            if found != 0 {
                return Some(i + (found.trailing_zeros() / 8) as usize);
            }
            i += 8;
        }
        bytes[i..].iter().position(|&b| b == b'"' || b == b'\\' || b < 0x20).map(|at| i + at)
    }

    /// The rest of a string whose opening quote was consumed.
    fn string_body(&mut self) -> Option<Cow<'a, str>> {
        match self.plain_body()? {
            Ok(body) => Some(Cow::Borrowed(body)),
            Err(plain) => {
                let mut owned = String::with_capacity(plain.len() + 16);
                owned.push_str(plain);
                self.decode_rest(&mut owned)?;
                Some(Cow::Owned(owned))
            }
        }
    }

    /// The rest of a string whose opening quote was consumed, when it has no escape: `Ok` with
    /// its body (the closing quote consumed). Otherwise `Err` with the part before its first
    /// escape (or control character), where the scanner stops for [`Scanner::decode_rest`].
    #[inline]
    fn plain_body(&mut self) -> Option<Result<&'a str, &'a str>> {
        let start = self.pos;
        let at = self.next_special()?;
        if self.bytes()[at] == b'"' {
            self.pos = at + 1;
            return Some(Ok(&self.text[start..at]));
        }
        self.pos = at;
        Some(Err(&self.text[start..at]))
    }

    /// Decodes the rest of a string, from its first escape (or control character) at `pos` to
    /// its closing quote, onto `out`.
    fn decode_rest(&mut self, out: &mut String) -> Option<()> {
        loop {
            match self.bytes()[self.pos] {
                b'"' => {
                    self.pos += 1;
                    return Some(());
                }
                b'\\' => {
                    self.pos += 1;
                    out.push(self.escape()?);
                }
                // A control character: not allowed in a JSON string.
                _ => return None,
            }
            let from = self.pos;
            let at = self.next_special()?;
            out.push_str(&self.text[from..at]);
            self.pos = at;
        }
    }

    /// Skips the rest of a string whose opening quote was consumed, checking its escapes.
    fn skip_string(&mut self) -> Option<()> {
        loop {
            self.pos = self.next_special()?;
            match self.bytes()[self.pos] {
                b'"' => {
                    self.pos += 1;
                    return Some(());
                }
                b'\\' => {
                    self.pos += 1;
                    self.escape()?;
                }
                _ => return None,
            }
        }
    }

    /// The character an escape (after its `\`) stands for.
    fn escape(&mut self) -> Option<char> {
        let (c, len) = json_escape(&self.bytes()[self.pos - 1..])?;
        self.pos += len - 1;
        Some(c)
    }
}

/// Sixteen bytes at a time with SSE2, which every x86-64 processor has.
#[cfg(target_arch = "x86_64")]
mod wide {
    use std::arch::x86_64::{
        _mm_cmpeq_epi8, _mm_loadu_si128, _mm_min_epu8, _mm_movemask_epi8, _mm_or_si128, _mm_set1_epi8,
    };

    /// Where the first `"`, `\` or control character at or after `*from` is, while sixteen bytes
    /// are left to look at; `None` with `*from` where fewer are left (none of the three before).
    #[inline]
    pub(super) fn next_special(bytes: &[u8], from: &mut usize) -> Option<usize> {
        // SAFETY: SSE2 is part of the x86-64 baseline, so every processor this runs on has it.
        let (quote, backslash, last_control) =
            unsafe { (_mm_set1_epi8(b'"' as i8), _mm_set1_epi8(b'\\' as i8), _mm_set1_epi8(0x1f)) };
        while let Some(block) = bytes.get(*from..*from + 16) {
            // SAFETY: SSE2 as above; `block` is sixteen readable bytes, and the load has no
            // alignment requirement. A byte at most 0x1f is its own minimum with 0x1f.
            let mask = unsafe {
                let v = _mm_loadu_si128(block.as_ptr().cast());
                let control = _mm_cmpeq_epi8(_mm_min_epu8(v, last_control), v);
                let quotes = _mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash));
                _mm_movemask_epi8(_mm_or_si128(quotes, control)) as u32
            };
            if mask != 0 {
                return Some(*from + mask.trailing_zeros() as usize);
            }
            *from += 16;
        }
        None
    }
}

/// `a == b` for two slices of the same length, compared a word at a time: for the short keys a
/// reader matches per field this is a few instructions where a `memcmp` call costs a call and
/// its dispatch.
#[inline]
fn same_short(a: &[u8], b: &[u8]) -> bool {
    fn word(bytes: &[u8], at: usize) -> u64 {
        u64::from_le_bytes(bytes[at..at + 8].try_into().expect("eight bytes"))
    }
    fn half(bytes: &[u8], at: usize) -> u32 {
        u32::from_le_bytes(bytes[at..at + 4].try_into().expect("four bytes"))
    }
    let len = a.len();
    if len != b.len() {
        return false;
    }
    match len {
        // Words from the front, and the last word (overlapping the one before it).
        8.. => (0..len / 8).all(|i| word(a, i * 8) == word(b, i * 8)) && word(a, len - 8) == word(b, len - 8),
        4..8 => half(a, 0) == half(b, 0) && half(a, len - 4) == half(b, len - 4),
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_slices_compare_as_slices_do() {
        let text = b"threadId:turnId,itemId delta method params";
        for len in 0..=text.len() {
            let a = &text[..len];
            // Equal bytes elsewhere, not the same slice.
            let copy = a.to_vec();
            assert!(same_short(a, &copy), "{len}");
            for at in 0..len {
                let mut b = a.to_vec();
                b[at] ^= 0x20;
                assert!(!same_short(a, &b), "{len} bytes, differing at {at}");
            }
            assert!(!same_short(a, &text[..len.saturating_sub(1)]) || len == 0, "{len}");
        }
    }

    /// Scans `text` as one value to its end.
    fn valid(text: &str) -> bool {
        let mut s = Scanner::new(text);
        s.skip_value().is_some() && s.end().is_some()
    }

    #[test]
    fn what_it_accepts_serde_accepts_and_decodes_alike() {
        let cases = [
            r#"{}"#,
            r#" { "a" : 1 , "b":[ ] ,"c":{ }} "#,
            r#"{"a":-0.5e+10,"b":0,"c":1E3,"d":[true,false,null]}"#,
            r#"{"s":"\"\\\/\b\f\n\r\t\u00e9\u20AC\ud83d\ude00","t":"plain é €"}"#,
            r#"[[[[]]],{"x":[{"y":"z"}]}]"#,
            r#""just a string""#,
            "123",
        ];
        for case in cases {
            assert!(valid(case), "{case}");
            let parsed: serde_json::Value = serde_json::from_str(case).unwrap();
            if let serde_json::Value::Object(map) = parsed {
                let mut s = Scanner::new(case);
                s.begin_object().unwrap();
                while let Some(key) = s.next_key().unwrap() {
                    match &map[key] {
                        serde_json::Value::String(expected) => assert_eq!(s.string().unwrap(), *expected),
                        _ => s.skip_value().unwrap(),
                    }
                }
                s.end().unwrap();
            }
        }
    }

    #[test]
    fn it_rejects_what_serde_rejects() {
        let cases = [
            "",
            " ",
            "{",
            "{\"a\":1",
            "{\"a\" 1}",
            "{\"a\":1,}",
            "{,\"a\":1}",
            "{\"a\":1 \"b\":2}",
            "{\"a\":01}",
            "{\"a\":1.}",
            "{\"a\":.5}",
            "{\"a\":1e}",
            "{\"a\":-}",
            "{\"a\":+1}",
            "{\"a\":tru}",
            "{\"a\":nul}",
            "{\"a\":\"unterminated}",
            "{\"a\":\"tab\there\"}",
            "{\"a\":\"bad \\x escape\"}",
            "{\"a\":\"\\u12\"}",
            "{\"a\":\"\\u12g4\"}",
            "[1,]",
            "[1 2]",
            "{} {}",
            "{}x",
            "{'a':1}",
        ];
        for case in cases {
            assert!(!valid(case), "{case:?}");
            assert!(serde_json::from_str::<serde::de::IgnoredAny>(case).is_err(), "serde takes {case:?}");
        }
        // Its own refusals that serde may take are only ever left to serde.
        for case in [r#""\udc00""#, r#""\ud800""#, r#""\ud800\u0041""#] {
            assert!(!valid(case), "{case:?}");
        }
        let deep = "[".repeat(MAX_DEPTH + 1) + &"]".repeat(MAX_DEPTH + 1);
        assert!(!valid(&deep));
        let fits = "[".repeat(MAX_DEPTH) + &"]".repeat(MAX_DEPTH);
        assert!(valid(&fits));
    }

    #[test]
    fn keys_with_escapes_and_strings_with_control_characters_are_left_to_serde() {
        let mut s = Scanner::new(r#"{"\u0069d":1}"#);
        s.begin_object().unwrap();
        assert_eq!(s.next_key(), None);

        let mut s = Scanner::new("{\"a\":\"x\u{1}y\"}");
        s.begin_object().unwrap();
        assert_eq!(s.next_key(), Some(Some("a")));
        assert_eq!(s.string(), None);
    }

    #[test]
    fn strings_are_borrowed_unless_escaped_wherever_the_special_byte_falls() {
        // Lengths around the eight- and sixteen-byte steps, the special byte at every place.
        for len in 0..40 {
            let body = "x".repeat(len);
            let text = format!("\"{body}\"");
            let mut s = Scanner::new(&text);
            assert!(matches!(s.string(), Some(Cow::Borrowed(b)) if b == body), "{text}");
            for at in 0..len {
                // Bytes above 0x7f (and DEL) are none of the special ones.
                let plain = format!("{}\u{7f}é{}", &body[..at], &body[at..]);
                let quoted = format!("\"{plain}\"");
                assert!(matches!(Scanner::new(&quoted).string(), Some(Cow::Borrowed(b)) if b == plain), "{quoted}");
                let escaped = format!("\"{}\\n{}\"", &body[..at], &body[at..]);
                let mut s = Scanner::new(&escaped);
                let expected = format!("{}\n{}", &body[..at], &body[at..]);
                assert!(matches!(s.string(), Some(Cow::Owned(o)) if o == expected), "{escaped}");
                let mut scratch = String::from("left from the last line");
                assert_eq!(Scanner::new(&escaped).string_in(&mut scratch), Some(&*expected), "{escaped}");
                let control = format!("\"{}\u{1f}{}\"", &body[..at], &body[at..]);
                assert_eq!(Scanner::new(&control).string(), None, "{control:?}");
                assert_eq!(Scanner::new(&control).string_in(&mut scratch), None, "{control:?}");
            }
        }
    }

    /// Every string of `text` decoded in order, by the scanner (`None` where it gives up): by
    /// [`Scanner::string`], or with `scratch` by [`Scanner::string_in`] into it.
    fn strings(text: &str, mut scratch: Option<&mut String>) -> Option<Vec<String>> {
        fn walk(s: &mut Scanner<'_>, out: &mut Vec<String>, scratch: &mut Option<&mut String>) -> Option<()> {
            s.skip_ws();
            match s.peek()? {
                b'"' => out.push(match scratch {
                    Some(scratch) => s.string_in(scratch)?.to_owned(),
                    None => s.string()?.into_owned(),
                }),
                b'{' => {
                    s.begin_object()?;
                    while let Some(key) = s.next_key()? {
                        out.push(key.to_owned());
                        walk(s, out, scratch)?;
                    }
                }
                _ => s.skip_value()?,
            }
            Some(())
        }
        let mut s = Scanner::new(text);
        let mut out = Vec::new();
        walk(&mut s, &mut out, &mut scratch)?;
        s.end().map(|()| out)
    }

    /// The keys and string values serde decodes from `value`, not looking into arrays (which
    /// [`strings`] skips).
    fn serde_strings(value: &serde_json::Value, out: &mut Vec<String>) {
        match value {
            serde_json::Value::String(s) => out.push(s.clone()),
            serde_json::Value::Object(map) => {
                for (key, value) in map {
                    out.push(key.clone());
                    if !matches!(value, serde_json::Value::Array(_)) {
                        serde_strings(value, out);
                    }
                }
            }
            _ => {}
        }
    }

    #[test]
    fn mutated_lines_are_accepted_exactly_when_serde_accepts_them() {
        let seeds = [
            r#"{"method":"item/agentMessage/delta","params":{"threadId":"t-1","turnId":"u","itemId":"m","delta":"a \"q\" \n é \u00e9"},"emittedAtMs":1795934659278}"#,
            r#"{"a":[1,-2.5e-3,true,false,null,{"b":"c"}],"d":{"e":{}},"f":"\t\\"}"#,
        ];
        let alphabet = b"{}[]\",:\\ 0123456789eE.+-tfnulrabx\n\t";
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let (mut accepted, mut rejected) = (0, 0);
        for round in 0..20_000 {
            let seed = seeds[round % seeds.len()];
            let mut bytes = seed.as_bytes().to_vec();
            for _ in 0..1 + next() % 3 {
                let at = (next() % bytes.len() as u64) as usize;
                match next() % 3 {
                    0 => bytes[at] = alphabet[(next() % alphabet.len() as u64) as usize],
                    1 => drop(bytes.remove(at)),
                    _ => bytes.insert(at, alphabet[(next() % alphabet.len() as u64) as usize]),
                }
            }
            let Ok(text) = std::str::from_utf8(&bytes) else { continue };
            // Whether it is JSON, as serde checks a line it skips (no number range check).
            let by_serde = serde_json::from_str::<serde::de::IgnoredAny>(text);
            let mut scratch = String::new();
            assert_eq!(strings(text, None), strings(text, Some(&mut scratch)), "{text}");
            match (strings(text, None), by_serde) {
                (Some(ours), Ok(_)) => {
                    accepted += 1;
                    let Ok(value) = serde_json::from_str::<serde_json::Value>(text) else { continue };
                    let mut theirs = Vec::new();
                    serde_strings(&value, &mut theirs);
                    let mut ours_sorted = ours.clone();
                    ours_sorted.sort();
                    theirs.sort();
                    // Serde's map keeps the last of duplicate keys; compare what both keep.
                    for s in &theirs {
                        assert!(ours_sorted.binary_search(s).is_ok(), "{text}: {s:?} missing from {ours:?}");
                    }
                }
                (None, Err(_)) => rejected += 1,
                (Some(_), Err(error)) => panic!("scanned {text:?}, which serde rejects: {error}"),
                (None, Ok(_)) => {
                    // Left to serde: only what the scanner does not take by design.
                    assert!(text.contains("\\u") || text.contains("\\"), "gave up on {text:?}");
                }
            }
        }
        assert!(accepted > 1_000 && rejected > 1_000, "accepted {accepted}, rejected {rejected}");
    }

    #[test]
    fn an_object_must_be_closed_before_the_end() {
        let mut s = Scanner::new(r#"{"a":{"b":1}}"#);
        s.begin_object().unwrap();
        assert_eq!(s.next_key(), Some(Some("a")));
        s.begin_object().unwrap();
        assert_eq!(s.next_key(), Some(Some("b")));
        s.skip_value().unwrap();
        assert_eq!(s.next_key(), Some(None));
        assert_eq!(s.end(), None, "the outer object is still open");
        assert_eq!(s.next_key(), Some(None));
        assert_eq!(s.end(), Some(()));
        assert_eq!(s.next_key(), None, "no object is open");
    }

    #[test]
    fn a_key_written_as_is_is_taken_with_one_comparison_and_anything_else_left_to_next_key() {
        let line = r#"{"a":1,"b":{"c":"x"} ,"d":2,"e" :3,"f\u0067":4,"hh":5}"#;
        let mut s = Scanner::new(line);
        assert!(!s.key_is("a"), "no object is open");
        s.begin_object().unwrap();
        assert!(!s.key_is("b"), "another key");
        assert!(!s.key_is("a1"), "a longer key");
        assert!(s.key_is("a"));
        s.skip_value().unwrap();
        assert!(s.key_is("b"), "after a comma");
        s.begin_object().unwrap();
        assert!(s.key_is("c"), "first in an inner object");
        assert_eq!(s.string().as_deref(), Some("x"));
        assert!(!s.key_is("d"), "the inner object ends first");
        assert_eq!(s.next_key(), Some(None));
        assert!(!s.key_is("d"), "whitespace before the comma");
        assert_eq!(s.next_key(), Some(Some("d")));
        s.skip_value().unwrap();
        assert!(!s.key_is("e"), "whitespace before the colon");
        assert_eq!(s.next_key(), Some(Some("e")));
        s.skip_value().unwrap();
        assert!(!s.key_is("fg"), "an escaped key");
        assert_eq!(s.next_key(), None, "left to serde");
        let mut s = Scanner::new(r#"{"hh":5}"#);
        s.begin_object().unwrap();
        assert!(!s.key_is("h"), "a prefix of the key");
        assert!(s.key_is("hh"));
        s.skip_value().unwrap();
        assert_eq!(s.next_key(), Some(None));
        assert_eq!(s.end(), Some(()));
        // In order, out of order, past the order's end: the same keys as `next_key` reads.
        let line = r#"{"a":1,"c":2,"b":3,"d":4}"#;
        let (mut s, mut next) = (Scanner::new(line), 0);
        s.begin_object().unwrap();
        let mut keys = Vec::new();
        while let Some(key) = s.next_key_in(&["a", "b", "c"], &mut next).unwrap() {
            keys.push(key);
            s.skip_value().unwrap();
        }
        assert_eq!(keys, ["a", "c", "b", "d"]);
        assert_eq!(next, 2, "`a`, then `b` once it was the next in the order");
    }
}
