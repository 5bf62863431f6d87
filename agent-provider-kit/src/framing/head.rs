//! Reading the first bytes of a line too long to keep ([`LineReader::too_long_head`]): the keys
//! of a JSON object as far as the bytes go, so a provider can tell what a dropped line was — a
//! turn's end, say, and whose.
//!
//! ```
//! use agent_provider_kit::framing::head::{find_key, object_at, string_at};
//!
//! let head = br#"{"method":"turn/completed","params":{"threadId":"th-1","turn":{"items":[{"id":"m","text":"xx"#;
//! let root = head.strip_prefix(b"{").unwrap();
//! assert_eq!(string_at(root, find_key(root, "method").unwrap()), Some("turn/completed"));
//! let params = object_at(root, find_key(root, "params").unwrap()).unwrap();
//! assert_eq!(string_at(params, find_key(params, "threadId").unwrap()), Some("th-1"));
//! let turn = object_at(params, find_key(params, "turn").unwrap()).unwrap();
//! // The turn's own `id` is past the head; an item's is not the turn's.
//! assert_eq!(find_key(turn, "id"), None);
//! ```
//!
//! [`LineReader::too_long_head`]: super::LineReader::too_long_head

/// Where the value of `key` starts among the members of the JSON object whose body (after its
/// `{`) `object` begins, as far as the bytes go: nested values and strings (escapes included)
/// are skipped over, so only the object's own keys match. `None` when the key is not among the
/// members the bytes hold, or the object ends first.
pub fn find_key(object: &[u8], key: &str) -> Option<usize> {
    let (mut i, mut depth) = (0, 0usize);
    while i < object.len() {
        match object[i] {
            b'"' => {
                let end = string_end(object, i + 1)?;
                let after = object[end + 1..].iter().position(|b| !b.is_ascii_whitespace())? + end + 1;
                if depth == 0 && object[after] == b':' && &object[i + 1..end] == key.as_bytes() {
                    return Some(object[after + 1..].iter().position(|b| !b.is_ascii_whitespace())? + after + 1);
                }
                i = end + 1;
                continue;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth = depth.checked_sub(1)?,
            _ => {}
        }
        i += 1;
    }
    None
}

/// The index of the quote that ends the JSON string whose body starts at `start`.
fn string_end(bytes: &[u8], start: usize) -> Option<usize> {
    let mut i = start;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'"' => return Some(i),
            _ => i += 1,
        }
    }
    None
}

/// The JSON string at `at` in `bytes` (where [`find_key`] says a value starts), when the bytes
/// hold all of it and it has no escapes (as CLIs write IDs and type names).
pub fn string_at(bytes: &[u8], at: usize) -> Option<&str> {
    let body = bytes.get(at..)?.strip_prefix(b"\"")?;
    let end = string_end(body, 0)?;
    std::str::from_utf8(&body[..end]).ok().filter(|text| !text.contains('\\'))
}

/// The JSON integer at `at` in `bytes` (where [`find_key`] says a value starts), when the bytes
/// hold all of it (a delimiter follows its digits) and it fits an `i64`: a JSON-RPC `id`.
pub fn integer_at(bytes: &[u8], at: usize) -> Option<i64> {
    let rest = bytes.get(at..)?;
    let sign = usize::from(rest.first() == Some(&b'-'));
    let digits = rest[sign..].iter().take_while(|b| b.is_ascii_digit()).count();
    let end = sign + digits;
    // Digits up to the head's end may be the beginning of a longer number.
    if digits == 0 || !matches!(rest.get(end), Some(b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')) {
        return None;
    }
    std::str::from_utf8(&rest[..end]).ok()?.parse().ok()
}

/// The body (after its `{`) of the JSON object at `at` in `bytes`, for [`find_key`].
pub fn object_at(bytes: &[u8], at: usize) -> Option<&[u8]> {
    bytes.get(at..)?.strip_prefix(b"{")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_are_read_only_when_the_head_holds_them_whole() {
        let root = &br#""id":42,"method":"m","n":-7}"#[..];
        assert_eq!(integer_at(root, find_key(root, "id").unwrap()), Some(42));
        assert_eq!(integer_at(root, find_key(root, "n").unwrap()), Some(-7));
        assert_eq!(integer_at(root, find_key(root, "method").unwrap()), None, "a string");
        let cut = &br#""id":4"#[..];
        assert_eq!(integer_at(cut, find_key(cut, "id").unwrap()), None, "it may go on past the head");
        let huge = &br#""id":99999999999999999999,"#[..];
        assert_eq!(integer_at(huge, find_key(huge, "id").unwrap()), None);
    }

    fn ids(head: &str) -> Option<(&str, &str)> {
        let root = head.as_bytes().strip_prefix(b"{")?;
        let params = object_at(root, find_key(root, "params")?)?;
        let turn = object_at(params, find_key(params, "turn")?)?;
        Some((string_at(params, find_key(params, "threadId")?)?, string_at(turn, find_key(turn, "id")?)?))
    }

    /// A codex `turn/completed` head names its thread and turn in codex's own key order, in any
    /// other, and past nested values and escaped strings; not by a key of a nested object, nor
    /// one the head cuts off.
    #[test]
    fn keys_are_found_in_any_order_past_nested_values_and_escapes() {
        let codex = r#"{"method":"turn/completed","params":{"threadId":"th-1","turn":{"id":"tu-1","items":[{"type":"agentMessage","id":"m","text":"xxx"#;
        assert_eq!(ids(codex), Some(("th-1", "tu-1")));
        let sorted = r#"{"method":"turn/completed","params":{"threadId":"th-1","turn":{"durationMs":1,"error":{"id":"no","m":"a \"}\" b"},"id":"tu-1","items":[{"id":"m"#;
        assert_eq!(ids(sorted), Some(("th-1", "tu-1")));
        let spaced = r#"{ "method" : "turn/completed", "params" : { "turn" : { "items" : [ { "id" : "m" } ], "id" : "tu-1" }, "threadId" : "th-1" } }"#;
        assert_eq!(ids(spaced), Some(("th-1", "tu-1")));
        let cut = r#"{"method":"turn/completed","params":{"threadId":"th-1","turn":{"items":[{"type":"agentMessage","id":"m","text":"xx"#;
        assert_eq!(ids(cut), None, "an item's ID is not the turn's");
        let escaped = r#"{"method":"turn/completed","params":{"threadId":"th\"1","turn":{"id":"tu-1"}}}"#;
        assert_eq!(ids(escaped), None, "an ID with an escape is not read");
    }
}
