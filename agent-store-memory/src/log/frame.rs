//! How [`EventLog`](super::EventLog) keeps a raw frame small: where a frame and its template
//! agree (the shared start and end, kept as lengths instead of bytes), and where a delta's text
//! lies in its frame, verbatim or escaped (kept as a place instead of the text again).

use agent_core::event::{SharedStr, json_escape};

use super::codec::{Reader, put_str, put_varint};

/// How many bytes `frame` starts and ends with that `template` does too, neither cutting a
/// character of `frame` (nor so of `template`: what comes before a cut is the same in both,
/// and so is whether a character continues past it).
pub(super) fn shared_ends(template: &[u8], frame: &str) -> (usize, usize) {
    let bytes = frame.as_bytes();
    let mut prefix = common_prefix(template, bytes);
    while !frame.is_char_boundary(prefix) {
        prefix -= 1;
    }
    let mut suffix = common_suffix(&template[prefix..], &bytes[prefix..]);
    while !frame.is_char_boundary(bytes.len() - suffix) {
        suffix -= 1;
    }
    (prefix, suffix)
}

/// How many bytes `a` and `b` start with in common, compared eight at a time.
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    let mut n = 0;
    for (x, y) in a.chunks_exact(8).zip(b.chunks_exact(8)) {
        let diff = differing_bits(x, y);
        if diff != 0 {
            return n + (diff.trailing_zeros() / 8) as usize;
        }
        n += 8;
    }
    n + a[n..].iter().zip(&b[n..]).take_while(|(x, y)| x == y).count()
}

/// How many bytes `a` and `b` end with in common, compared eight at a time.
fn common_suffix(a: &[u8], b: &[u8]) -> usize {
    let mut n = 0;
    for (x, y) in a.rchunks_exact(8).zip(b.rchunks_exact(8)) {
        let diff = differing_bits(x, y);
        if diff != 0 {
            return n + (diff.leading_zeros() / 8) as usize;
        }
        n += 8;
    }
    let (a, b) = (&a[..a.len() - n], &b[..b.len() - n]);
    n + a.iter().rev().zip(b.iter().rev()).take_while(|(x, y)| x == y).count()
}

/// The bits in which two eight-byte words differ, the first byte lowest.
fn differing_bits(x: &[u8], y: &[u8]) -> u64 {
    u64::from_le_bytes(x.try_into().expect("8 bytes")) ^ u64::from_le_bytes(y.try_into().expect("8 bytes"))
}

/// How many places starting with its first byte are tried when looking for a text in a frame.
const MAX_CANDIDATES: usize = 16;

/// The last place `text` starts in `raw`, looking at no more than [`MAX_CANDIDATES`] places that
/// start with its first byte (a general substring search costs more to set up than a short
/// delta is worth; a text not found is simply kept).
pub(super) fn find_last(raw: &[u8], text: &[u8]) -> Option<usize> {
    let (&first, _) = text.split_first()?;
    let mut end = (raw.len() + 1).checked_sub(text.len())?;
    for _ in 0..MAX_CANDIDATES {
        let start = memchr::memrchr(first, &raw[..end])?;
        if raw[start..].starts_with(text) {
            return Some(start);
        }
        end = start;
    }
    None
}

/// Where a delta's text is in its frame.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Place {
    /// The bytes of the frame it is, or (`escaped`) the body of the JSON string it decodes from.
    pub(super) range: std::ops::Range<usize>,
    pub(super) escaped: bool,
}

/// Where `text` is in `raw`, so it is not kept twice: verbatim (a delta without escapes, the
/// common case), or as the body of a JSON string starting at `hint` (where the template's text
/// starts: the same field in a frame of the same shape) that decodes to it.
pub(super) fn text_place(text: &SharedStr, raw: &str, hint: Option<usize>) -> Option<Place> {
    if text.lies_in(raw.as_bytes()) {
        // A slice of the frame, as providers make them: where is a subtraction.
        let start = text.as_ptr() as usize - raw.as_ptr() as usize;
        return Some(Place { range: start..start + text.len(), escaped: false });
    }
    // A text the CLI had to escape is not in the frame as it is; nor is one it chose to
    // (`\u00e9`, `\/`), which only the hint finds.
    let plain = !text.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20);
    // The text is near the end of a frame more often than not.
    if plain && let Some(start) = find_last(raw.as_bytes(), text.as_bytes()) {
        return Some(Place { range: start..start + text.len(), escaped: false });
    }
    let start = hint.filter(|&start| raw.is_char_boundary(start))?;
    let end = escaped_end(&raw.as_bytes()[start..], text.as_bytes())?;
    Some(Place { range: start..start + end, escaped: true })
}

/// The length of the JSON string body at the start of `body` (up to its closing quote), if it
/// decodes to exactly `text`.
fn escaped_end(body: &[u8], text: &[u8]) -> Option<usize> {
    let (mut i, mut t) = (0, 0);
    loop {
        // The run up to the next quote or escape is the text's next bytes as they are.
        let run = memchr::memchr2(b'"', b'\\', &body[i..])?;
        if text.get(t..t + run)? != &body[i..i + run] {
            return None;
        }
        (i, t) = (i + run, t + run);
        if body[i] == b'"' {
            return (t == text.len()).then_some(i);
        }
        let (c, len) = json_escape(&body[i..])?;
        let mut utf8 = [0; 4];
        let c = c.encode_utf8(&mut utf8).as_bytes();
        if text.get(t..t + c.len())? != c {
            return None;
        }
        (i, t) = (i + len, t + c.len());
    }
}

/// The text a JSON string body decodes to, one that [`text_place`] placed.
pub(super) fn unescape(body: &str) -> String {
    let bytes = body.as_bytes();
    let mut text = String::with_capacity(body.len());
    let mut i = 0;
    while let Some(offset) = memchr::memchr(b'\\', &bytes[i..]) {
        text.push_str(&body[i..i + offset]);
        let (c, len) = json_escape(&bytes[i + offset..]).expect("a body checked when it was placed");
        text.push(c);
        i += offset + len;
    }
    text.push_str(&body[i..]);
    text
}

/// A delta's text: its place in the frame, or the text itself.
pub(super) fn put_text(out: &mut Vec<u8>, text: &SharedStr, place: Option<&Place>) {
    match place {
        Some(Place { range, escaped }) => {
            let mode = if *escaped { TEXT_ESCAPED } else { TEXT_IN_FRAME };
            put_varint(out, (range.len() as u64) << 2 | mode);
            put_varint(out, range.start as u64);
        }
        None => {
            put_varint(out, (text.len() as u64) << 2 | TEXT_KEPT);
            out.extend_from_slice(text.as_bytes());
        }
    }
}

/// How [`put_text`] kept a text: the low two bits of its first varint.
const TEXT_KEPT: u64 = 0;
const TEXT_IN_FRAME: u64 = 1;
const TEXT_ESCAPED: u64 = 2;

/// `part` as the lengths of the start and end it shares with its template's part (`shared`,
/// from [`shared_ends`]) and the bytes between.
pub(super) fn put_part(out: &mut Vec<u8>, part: &str, (prefix, suffix): (usize, usize)) {
    put_varint(out, prefix as u64);
    put_varint(out, suffix as u64);
    put_str(out, &part[prefix..part.len() - suffix]);
}

/// A delta's text as [`put_text`] wrote it.
pub(super) enum Text<'a> {
    /// Where it is in the event's frame.
    InFrame(Place),
    /// The text itself.
    Kept(&'a str),
}

impl<'a> Reader<'a> {
    /// What [`put_part`] wrote against `template`, appended to `frame`.
    pub(super) fn part(&mut self, template: &str, frame: &mut String) {
        let prefix = usize::try_from(self.varint()).expect("a length that fit in memory");
        let suffix = usize::try_from(self.varint()).expect("a length that fit in memory");
        let middle = self.str();
        frame.reserve(prefix + middle.len() + suffix);
        frame.push_str(&template[..prefix]);
        frame.push_str(middle);
        frame.push_str(&template[template.len() - suffix..]);
    }

    /// What [`put_text`] wrote.
    pub(super) fn text(&mut self) -> Text<'a> {
        let tagged = self.varint();
        let len = usize::try_from(tagged >> 2).expect("a length that fit in memory");
        if tagged & 3 != TEXT_KEPT {
            let offset = usize::try_from(self.varint()).expect("an offset that fit in memory");
            return Text::InFrame(Place { range: offset..offset + len, escaped: tagged & 3 == TEXT_ESCAPED });
        }
        let (s, rest) = self.bytes.split_at(len);
        self.bytes = rest;
        Text::Kept(std::str::from_utf8(s).expect("encoded from a str"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_ends_never_cut_a_character_and_rebuild_the_frame() {
        let rebuild = |template: &str, frame: &str| {
            let (prefix, suffix) = shared_ends(template.as_bytes(), frame);
            assert!(prefix + suffix <= frame.len().min(template.len()), "{template:?} {frame:?}");
            format!(
                "{}{}{}",
                &template[..prefix],
                &frame[prefix..frame.len() - suffix],
                &template[template.len() - suffix..]
            )
        };
        assert_eq!(shared_ends("aé".as_bytes(), "aè"), (1, 0), "é and è share their first byte");
        assert_eq!(shared_ends("日".as_bytes(), "\u{6725}"), (0, 0), "the shared last byte continues a character");
        assert_eq!(shared_ends("xé".as_bytes(), "yé"), (0, 2));
        assert_eq!(shared_ends(b"same", "same"), (4, 0));
        assert_eq!(shared_ends(b"", "new"), (0, 0));
        // Pairs of strings from a small alphabet of one- to four-byte characters.
        let alphabet = ['a', 'b', 'é', 'è', '日', '朥', '\u{1f600}', '\u{1f601}'];
        let mut next = crate::log::tests::xorshift(0x2545_f491_4f6c_dd1d);
        for _ in 0..5_000 {
            let mut word = |n: u64| (0..n).map(|_| alphabet[(next() % 8) as usize]).collect::<String>();
            let (head, tail) = (word(20), word(20));
            let (head, tail) =
                (&head[..head.char_indices().nth(7).unwrap().0], &tail[tail.char_indices().nth(5).unwrap().0..]);
            let (a, b) = (word(3), word(3));
            let (template, frame) = (format!("{head}{a}{tail}"), format!("{head}{b}{tail}"));
            assert_eq!(rebuild(&template, &frame), frame);
            assert_eq!(rebuild(&frame, &template), template);
        }
    }

    #[test]
    fn common_ends_are_counted_past_word_edges() {
        let a = b"0123456789abcdefXYZ";
        for n in 0..a.len() {
            let mut b = a.to_vec();
            b[n] ^= 1;
            assert_eq!(common_prefix(a, &b), n);
            assert_eq!(common_suffix(a, &b), a.len() - 1 - n);
        }
        assert_eq!(common_prefix(b"0123456789", b"01234567"), 8);
        assert_eq!(common_suffix(b"xx0123456789", b"0123456789"), 10);
        assert_eq!(common_suffix(b"", b"abc"), 0);
    }

    #[test]
    fn an_escaped_text_is_placed_where_its_json_string_decodes_to_it() {
        let cases = [
            (r#"a\"b\\c\/d\n\t\r\b\f"#, "a\"b\\c/d\n\t\r\u{8}\u{c}"),
            // Escapes the CLI chose to write: the text itself has none of `"`, `\` or controls.
            (r#"caf\u00e9 \uD83D\ude00 日本"#, "café \u{1f600} 日本"),
            (r#"\u0022"#, "\""),
        ];
        for (body, text) in cases {
            let raw = format!(r#"{{"delta":"{body}","n":1}}"#);
            let place = text_place(&SharedStr::from(text), &raw, Some(10)).expect(body);
            assert_eq!(place, Place { range: 10..10 + body.len(), escaped: true }, "{body}");
            assert_eq!(unescape(&raw[place.range]), text);
        }
        let raw = r#"{"delta":"a\nb","n":"a\nb"}"#;
        let text = SharedStr::from("a\nb");
        assert_eq!(text_place(&text, raw, Some(10)).map(|p| p.range), Some(10..14));
        assert_eq!(text_place(&text, raw, Some(21)).map(|p| p.range), Some(21..25), "wherever the hint says");
        for hint in [None, Some(0), Some(9), Some(11), Some(raw.len()), Some(raw.len() + 1)] {
            assert_eq!(text_place(&text, raw, hint), None, "{hint:?}");
        }
        for text in ["a\nc", "a\n", "a\nbb", "a\\nb"] {
            assert_eq!(text_place(&SharedStr::from(text), raw, Some(10)), None, "{text:?}");
        }
        // Not on a character boundary, and not a string's end in the frame.
        assert_eq!(text_place(&SharedStr::from("\u{e9}\n"), r#"["é\n"]"#, Some(3)), None);
        assert_eq!(text_place(&SharedStr::from("x\n"), r#"["x\n"#, Some(2)), None);
        // A body with what is not a JSON escape: no place.
        for body in [r"\ud83d", r"\x"] {
            let raw = format!(r#"{{"delta":"{body}"}}"#);
            assert_eq!(text_place(&SharedStr::from("?"), &raw, Some(10)), None, "{body}");
        }
    }

    #[test]
    fn a_text_is_found_at_its_last_place_or_kept() {
        assert_eq!(find_last(b"{\"a\":\"xy\",\"b\":\"xy\"}", b"xy"), Some(15));
        assert_eq!(find_last(b"xy", b"xy"), Some(0));
        assert_eq!(find_last(b"x", b"xy"), None);
        assert_eq!(find_last(b"abc", b""), None, "an empty text is kept, not pointed at");
        assert_eq!(find_last(b"say \"hi\"", b"say \"hi\""), Some(0));
        // Past MAX_CANDIDATES places that start like the text, it is kept instead.
        let many = [b"a".repeat(100), b"ab".to_vec()].concat();
        assert_eq!(find_last(&many, b"ab"), Some(100));
        let trap = [b"ab".to_vec(), b"a".repeat(100)].concat();
        assert_eq!(find_last(&trap, b"ab"), None);
    }
}
