//! [`SharedStr`]: immutable text that can share the buffer it was read from.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Immutable UTF-8 text, cheap to clone, that can be a slice of a larger buffer: what a streamed
/// delta's text is.
///
/// A provider reads its CLI's output many lines at a time; a delta whose text the CLI wrote
/// without escapes is the same bytes as part of the line, so [`SharedStr::in_chunk`] keeps it as
/// a slice of the read buffer the line lies in (as [`RawJson::parsed_in`] keeps the line) instead
/// of a copy. Everything else (`From<String>`, `From<&str>`) owns its text.
///
/// It dereferences to `str`, compares, hashes and orders as its text, and serializes as a JSON
/// string. A slice keeps its whole buffer alive: a store or cache that holds text for long
/// should copy it ([`SharedStr::to_owned_text`]) or keep it beside the raw line it was cut from.
///
/// [`RawJson::parsed_in`]: crate::event::RawJson::parsed_in
#[derive(Clone, Default)]
pub struct SharedStr(
    /// UTF-8, whichever constructor made it; never changed.
    bytes::Bytes,
);

impl SharedStr {
    /// Empty text (no allocation).
    pub const fn new() -> SharedStr {
        SharedStr(bytes::Bytes::new())
    }

    /// Text of `'static` data (no allocation).
    pub const fn from_static(text: &'static str) -> SharedStr {
        SharedStr(bytes::Bytes::from_static(text.as_bytes()))
    }

    /// `text` as a slice of `chunk` when it lies in it — no copy; the chunk is freed when the last
    /// slice of it is — and as a copy otherwise (no chunk, or text decoded from escapes).
    pub fn in_chunk(text: &str, chunk: Option<&bytes::Bytes>) -> SharedStr {
        SharedStr::slice_of(text, chunk).unwrap_or_else(|| SharedStr::from(text))
    }

    /// `text` as a slice of `chunk`, if it lies in it.
    fn slice_of(text: &str, chunk: Option<&bytes::Bytes>) -> Option<SharedStr> {
        chunk.filter(|chunk| lies_in(text.as_bytes(), chunk)).map(|chunk| SharedStr(chunk.slice_ref(text.as_bytes())))
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        // SAFETY: every constructor keeps UTF-8 — a `String`, a `&str` copied, or a `&str`'s
        // own bytes sliced from the buffer they lie in — and the bytes are never changed.
        unsafe { std::str::from_utf8_unchecked(&self.0) }
    }

    /// The same text in a buffer of its own: what to keep for long when `self` may be a slice
    /// of a larger buffer.
    pub fn to_owned_text(&self) -> SharedStr {
        SharedStr(bytes::Bytes::copy_from_slice(&self.0))
    }

    /// True when `self` is a slice of `buffer`'s bytes (not a copy of them).
    pub fn lies_in(&self, buffer: &[u8]) -> bool {
        lies_in(&self.0, buffer)
    }
}

/// Where a provider keeps the texts it decoded from escapes, so that each is a slice of a shared
/// buffer instead of an allocation of its own.
///
/// A delta whose text the CLI wrote with escapes cannot be a slice of the line: its decoded text
/// is a copy. Copied into its own allocation, it is freed by whichever thread drops the event
/// last — usually not the reader's, which makes the allocator's cross-thread path the dearest
/// part of such a delta. [`TextArena::keep`] copies it instead into the free end of a buffer of
/// [`TextArena::CHUNK`] bytes and hands out a slice of it. A new buffer is started when the
/// text does not fit in what is left; a buffer is freed when the arena has moved on (or is
/// dropped) and the last slice of it is. Like a slice of a read buffer, a text kept for long
/// pins its whole buffer: copy it ([`SharedStr::to_owned_text`]) to keep it alone.
///
/// ```
/// use agent_core::event::TextArena;
///
/// let mut arena = TextArena::new();
/// let first = arena.keep("line\nbreak", None);
/// let second = arena.keep("tab\there", None);
/// assert_eq!((&*first, &*second), ("line\nbreak", "tab\there"));
/// ```
#[derive(Debug, Default)]
pub struct TextArena {
    spare: bytes::BytesMut,
}

impl TextArena {
    /// The size of each buffer; a longer text gets a buffer of its own size.
    pub const CHUNK: usize = 8 * 1024;

    /// An arena without a buffer yet (no allocation until the first copy).
    pub fn new() -> TextArena {
        TextArena { spare: bytes::BytesMut::new() }
    }

    /// `text` as a slice of `chunk` when it lies in it (as [`SharedStr::in_chunk`]), and as a
    /// copy in the arena's buffer otherwise.
    pub fn keep(&mut self, text: &str, chunk: Option<&bytes::Bytes>) -> SharedStr {
        if let Some(sliced) = SharedStr::slice_of(text, chunk) {
            return sliced;
        }
        if text.is_empty() {
            return SharedStr::new();
        }
        if self.spare.capacity() - self.spare.len() < text.len() {
            self.spare = bytes::BytesMut::with_capacity(Self::CHUNK.max(text.len()));
        }
        self.spare.extend_from_slice(text.as_bytes());
        SharedStr(self.spare.split().freeze())
    }
}

/// The character the JSON string escape at the start of `escape` stands for (`escape` starts
/// with its `\`), and how many bytes the escape takes: 2, 6 (`\uXXXX`) or 12 (a surrogate
/// pair, two `\u` escapes). `None` for what JSON does not allow, a lone surrogate among them.
///
/// ```
/// use agent_core::event::json_escape;
///
/// assert_eq!(json_escape(br#"\n and more"#), Some(('\n', 2)));
/// assert_eq!(json_escape(br#"\u00e9"#), Some(('é', 6)));
/// assert_eq!(json_escape(br#"\ud83d\ude00"#), Some(('\u{1f600}', 12)));
/// assert_eq!(json_escape(br#"\ud83d"#), None);
/// ```
#[inline]
pub fn json_escape(escape: &[u8]) -> Option<(char, usize)> {
    let c = match *escape.get(1)? {
        b'"' => '"',
        b'\\' => '\\',
        b'/' => '/',
        b'b' => '\u{8}',
        b'f' => '\u{c}',
        b'n' => '\n',
        b'r' => '\r',
        b't' => '\t',
        b'u' => {
            let unit = hex4(escape.get(2..6)?)?;
            if !(0xd800..0xe000).contains(&unit) {
                return Some((char::from_u32(unit)?, 6));
            }
            // A high surrogate, with its low half as the next escape.
            let low = escape.get(6..8).filter(|&u| u == b"\\u").and_then(|_| hex4(escape.get(8..12)?))?;
            if unit >= 0xdc00 || !(0xdc00..0xe000).contains(&low) {
                return None;
            }
            return Some((char::from_u32(0x10000 + ((unit - 0xd800) << 10) + (low - 0xdc00))?, 12));
        }
        _ => return None,
    };
    Some((c, 2))
}

/// The value of four hex digits.
fn hex4(digits: &[u8]) -> Option<u32> {
    digits.iter().try_fold(0, |value, &d| {
        let nibble = match d {
            b'0'..=b'9' => d - b'0',
            b'a'..=b'f' => d - b'a' + 10,
            b'A'..=b'F' => d - b'A' + 10,
            _ => return None,
        };
        Some(value << 4 | u32::from(nibble))
    })
}

/// True when `part` is (a non-empty) part of `whole`'s memory.
pub(crate) fn lies_in(part: &[u8], whole: &[u8]) -> bool {
    let whole = whole.as_ptr_range();
    let part_range = part.as_ptr_range();
    !part.is_empty() && whole.start <= part_range.start && part_range.end <= whole.end
}

impl Deref for SharedStr {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for SharedStr {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl Borrow<str> for SharedStr {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl From<String> for SharedStr {
    fn from(text: String) -> Self {
        // A boxed slice becomes `Bytes` without a copy or a second allocation.
        SharedStr(bytes::Bytes::from(text.into_boxed_str().into_boxed_bytes()))
    }
}

impl From<&str> for SharedStr {
    fn from(text: &str) -> Self {
        SharedStr(bytes::Bytes::copy_from_slice(text.as_bytes()))
    }
}

impl From<&String> for SharedStr {
    fn from(text: &String) -> Self {
        SharedStr::from(text.as_str())
    }
}

impl From<SharedStr> for String {
    fn from(text: SharedStr) -> Self {
        text.as_str().to_owned()
    }
}

impl PartialEq for SharedStr {
    fn eq(&self, other: &SharedStr) -> bool {
        self.0 == other.0
    }
}

impl Eq for SharedStr {}

impl PartialEq<str> for SharedStr {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for SharedStr {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for SharedStr {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<SharedStr> for str {
    fn eq(&self, other: &SharedStr) -> bool {
        self == other.as_str()
    }
}

impl PartialEq<SharedStr> for &str {
    fn eq(&self, other: &SharedStr) -> bool {
        *self == other.as_str()
    }
}

impl PartialEq<SharedStr> for String {
    fn eq(&self, other: &SharedStr) -> bool {
        self == other.as_str()
    }
}

impl PartialOrd for SharedStr {
    fn partial_cmp(&self, other: &SharedStr) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for SharedStr {
    fn cmp(&self, other: &SharedStr) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl Hash for SharedStr {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // As `str` hashes, so that `Borrow<str>` lookups find it.
        self.as_str().hash(state)
    }
}

impl fmt::Debug for SharedStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for SharedStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for SharedStr {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for SharedStr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(SharedStr::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_escapes_decode_to_their_character_and_nothing_else_does() {
        let good: [(&[u8], char, usize); 12] = [
            (br#"\""#, '"', 2),
            (br"\\", '\\', 2),
            (br"\/", '/', 2),
            (br"\b", '\u{8}', 2),
            (br"\f", '\u{c}', 2),
            (br"\n", '\n', 2),
            (br"\r", '\r', 2),
            (br"\t", '\t', 2),
            (br"\u00E9 after", 'é', 6),
            (br"\u0000", '\0', 6),
            (br"\ud83d\ude00", '\u{1f600}', 12),
            (br"\uDBFF\uDFFF", '\u{10ffff}', 12),
        ];
        for (escape, c, len) in good {
            assert_eq!(json_escape(escape), Some((c, len)), "{}", String::from_utf8_lossy(escape));
        }
        let bad: [&[u8]; 10] = [
            br"\ud83d",
            br"\ud83d\u0041",
            br"\ude00",
            br"\ud83dx\ude00",
            br"\ud83d\ud83d",
            br"\x",
            br"\u12",
            br"\u00G0",
            br"\",
            b"",
        ];
        for escape in bad {
            assert_eq!(json_escape(escape), None, "{}", String::from_utf8_lossy(escape));
        }
    }

    #[test]
    fn text_in_its_chunk_is_a_slice_and_elsewhere_a_copy() {
        let chunk = bytes::Bytes::from_static(br#"{"delta":"Hel"}"#);
        let line = std::str::from_utf8(&chunk).unwrap();
        let sliced = SharedStr::in_chunk(&line[10..13], Some(&chunk));
        assert_eq!(sliced, "Hel");
        assert!(sliced.lies_in(&chunk));

        let decoded = String::from("Hel");
        let copied = SharedStr::in_chunk(&decoded, Some(&chunk));
        assert_eq!(copied, "Hel");
        assert!(!copied.lies_in(&chunk));
        assert!(!SharedStr::in_chunk(&line[10..13], None).lies_in(&chunk));
        assert!(!sliced.to_owned_text().lies_in(&chunk));
        assert_eq!(sliced, copied);
    }

    #[test]
    fn an_arena_slices_text_in_its_chunk_and_packs_copies_into_one_buffer() {
        let chunk = bytes::Bytes::from_static(br#"{"delta":"Hel"}"#);
        let line = std::str::from_utf8(&chunk).unwrap();
        let mut arena = TextArena::new();
        let sliced = arena.keep(&line[10..13], Some(&chunk));
        assert!(sliced.lies_in(&chunk));

        let first = arena.keep("a\"b", Some(&chunk));
        let second = arena.keep("c\nd", None);
        assert_eq!((&*first, &*second), ("a\"b", "c\nd"));
        assert!(!first.lies_in(&chunk));
        // Both in one buffer, one after the other.
        assert_eq!(first.as_ptr().wrapping_add(first.len()), second.as_ptr());
        assert!(arena.keep("", None).is_empty());
    }

    #[test]
    fn a_full_arena_starts_a_new_buffer_and_keeps_what_it_handed_out() {
        let mut arena = TextArena::new();
        let piece = "x".repeat(TextArena::CHUNK / 4 + 1);
        let kept: Vec<SharedStr> = (0..4).map(|_| arena.keep(&piece, None)).collect();
        // Three fit in a buffer; the fourth starts the next one.
        assert_eq!(kept[1].as_ptr(), kept[0].as_ptr().wrapping_add(piece.len()));
        assert_ne!(kept[3].as_ptr(), kept[2].as_ptr().wrapping_add(piece.len()));
        assert!(kept.iter().all(|text| *text == *piece));

        // A text longer than a buffer gets one of its own size.
        let long = "y".repeat(TextArena::CHUNK * 2);
        assert_eq!(arena.keep(&long, None), long);
        let after = arena.keep("z", None);
        assert_eq!(after, "z");
        assert!(kept.iter().all(|text| *text == *piece));
    }

    #[test]
    fn serializes_and_compares_as_its_text() {
        let text = SharedStr::from("a\"b");
        assert_eq!(serde_json::to_string(&text).unwrap(), r#""a\"b""#);
        let back: SharedStr = serde_json::from_str(r#""a\"b""#).unwrap();
        assert_eq!(back, text);
        assert_eq!(format!("{text:?}"), format!("{:?}", "a\"b"));
        let mut set = std::collections::HashSet::new();
        set.insert(text.clone());
        assert!(set.contains("a\"b"));
        assert!(SharedStr::new().is_empty());
    }
}
