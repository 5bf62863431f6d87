//! How [`EventLog`](super::EventLog) keeps a raw frame small: where a frame and its template
//! agree (the shared start and end, kept as lengths instead of bytes), and where a delta's text
//! lies in its frame (kept as a place instead of the text again).

use agent_core::event::SharedStr;

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

/// Where `text` is in `raw`, when the frame holds it verbatim (a delta without escapes, the
/// common case), so it is not kept twice.
pub(super) fn text_place(text: &SharedStr, raw: &str) -> Option<std::ops::Range<usize>> {
    let start = if text.lies_in(raw.as_bytes()) {
        // A slice of the frame, as providers make them: where is a subtraction.
        text.as_ptr() as usize - raw.as_ptr() as usize
    } else if text.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20) {
        // Written escaped in a JSON string (a decoded delta, most of those not cut from the
        // frame): not worth looking for.
        return None;
    } else {
        // The text is near the end of a frame more often than not.
        find_last(raw.as_bytes(), text.as_bytes())?
    };
    Some(start..start + text.len())
}

/// A delta's text: its `place` in the frame, or the text itself.
pub(super) fn put_text(out: &mut Vec<u8>, text: &SharedStr, place: Option<std::ops::Range<usize>>) {
    match place {
        Some(place) => {
            put_varint(out, (text.len() as u64) << 1 | 1);
            put_varint(out, place.start as u64);
        }
        None => {
            put_varint(out, (text.len() as u64) << 1);
            out.extend_from_slice(text.as_bytes());
        }
    }
}

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
    InFrame(std::ops::Range<usize>),
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
        let len = usize::try_from(tagged >> 1).expect("a length that fit in memory");
        if tagged & 1 == 1 {
            let offset = usize::try_from(self.varint()).expect("an offset that fit in memory");
            return Text::InFrame(offset..offset + len);
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
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
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
