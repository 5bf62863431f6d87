//! Reading the last bytes of a line too long to keep ([`LineReader::too_long_tail`]): the
//! members of the line's JSON object, read back from its closing brace as far as the bytes go,
//! for what its head cannot tell (a CLI that writes a message's `type` after its text).
//!
//! ```
//! use agent_provider_kit::framing::head::string_at;
//! use agent_provider_kit::framing::tail::find_root_key;
//!
//! let tail = br#"xxxx","usage":{"type":"tokens","n":1},"type":"result","uuid":"u-1"}"#;
//! assert_eq!(string_at(tail, find_root_key(tail, "type").unwrap()), Some("result"));
//! assert_eq!(find_root_key(tail, "n"), None, "not the line's own");
//! ```
//!
//! [`LineReader::too_long_tail`]: super::LineReader::too_long_tail

/// Where the value of the line's own member `key` starts in `tail`, the last bytes of a line
/// holding one JSON object: the members are read back from the object's closing brace, nested
/// values and strings (escapes included) skipped, so only the object's own keys match. `None`
/// when the key is not among the members the bytes hold, or the bytes do not end the object.
pub fn find_root_key(tail: &[u8], key: &str) -> Option<usize> {
    let end = tail.iter().rposition(|b| !b.is_ascii_whitespace())?;
    if tail[end] != b'}' {
        return None;
    }
    // Depth 1: among the root object's members.
    let (mut i, mut depth) = (end, 1usize);
    while i > 0 {
        i -= 1;
        match tail[i] {
            b'"' => {
                let open = string_start(tail, i)?;
                let after = tail[i + 1..].iter().position(|b| !b.is_ascii_whitespace())? + i + 1;
                if depth == 1 && tail[after] == b':' && &tail[open + 1..i] == key.as_bytes() {
                    return Some(tail[after + 1..].iter().position(|b| !b.is_ascii_whitespace())? + after + 1);
                }
                i = open;
            }
            b'}' | b']' => depth += 1,
            b'{' | b'[' => {
                depth -= 1;
                if depth == 0 {
                    return None;
                }
            }
            _ => {}
        }
    }
    None
}

/// The index of the quote that opens the JSON string whose closing quote is at `close`: the
/// nearest quote before it not escaped (an even number of backslashes before it).
fn string_start(bytes: &[u8], close: usize) -> Option<usize> {
    let mut i = close;
    while i > 0 {
        i -= 1;
        if bytes[i] == b'"' {
            let backslashes = bytes[..i].iter().rev().take_while(|b| **b == b'\\').count();
            if backslashes % 2 == 0 {
                return Some(i);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framing::head::string_at;

    fn root_string<'a>(tail: &'a [u8], key: &str) -> Option<&'a str> {
        string_at(tail, find_root_key(tail, key)?)
    }

    /// Claude 2.1.332's result line writes its `type` after the reply's text.
    #[test]
    fn the_type_after_a_long_text_is_found() {
        let line = br#"{"duration_api_ms":19,"is_error":false,"result":"a \"quoted\" reply ending in \\","ttft_ms":85,"type":"result","modelUsage":{"m":{"type":"x"}},"uuid":"c2"}  "#;
        assert_eq!(root_string(line, "type"), Some("result"));
        assert_eq!(root_string(line, "uuid"), Some("c2"));
        assert_eq!(root_string(&line[40..], "type"), Some("result"), "from inside the text");
        assert_eq!(root_string(line, "m"), None, "a nested key is not the line's");
    }

    #[test]
    fn bytes_that_do_not_end_an_object_or_start_in_a_string_find_nothing() {
        assert_eq!(find_root_key(br#""type":"result""#, "type"), None, "no closing brace");
        assert_eq!(find_root_key(br#"xx","type""#, "type"), None);
        // The key's string starts before the bytes: its opening quote is not there.
        assert_eq!(find_root_key(br#"ype":"result"}"#, "type"), None);
        assert_eq!(find_root_key(br#"{"a":1}"#, "type"), None, "the object's opening brace ends the search");
        assert_eq!(find_root_key(b"", "type"), None);
    }
}
