//! JSON-RPC over JSON Lines, as far as a script needs it: whether a line is a request of some
//! method or the response to some ID, and the response that carries a request's own ID.
//!
//! Lines are not parsed into values (this crate has no JSON dependency): a small scanner walks
//! the top-level members of an object line and hands out their JSON text as written. Member
//! names are compared as written, so a name spelled with escapes is not found.

/// The JSON text of the top-level member `name` of the object on `line`, as written. `None`
/// when the line is not one JSON object or has no such member.
pub(super) fn member<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let mut scanner = Scanner { text: line, at: 0 };
    scanner.skip_space();
    scanner.eat(b'{')?;
    scanner.skip_space();
    let mut found = None;
    if scanner.eat(b'}').is_none() {
        loop {
            scanner.skip_space();
            let key = scanner.string()?;
            scanner.skip_space();
            scanner.eat(b':')?;
            scanner.skip_space();
            let value = scanner.value()?;
            if found.is_none() && &key[1..key.len() - 1] == name {
                found = Some(value);
            }
            scanner.skip_space();
            if scanner.eat(b'}').is_some() {
                break;
            }
            scanner.eat(b',')?;
        }
    }
    scanner.skip_space();
    if scanner.at == line.len() { found } else { None }
}

/// Whether `line` is a request (it has an `id`) of `method`.
pub(super) fn is_request(line: &str, method: &str) -> bool {
    member(line, "method") == Some(quote(method).as_str()) && member(line, "id").is_some()
}

/// Whether `line` is the response (no `method`) to the request with the ID `id` (JSON text).
pub(super) fn is_response(line: &str, id: &str) -> bool {
    member(line, "id") == Some(id) && member(line, "method").is_none()
}

/// The response to the request on `request`: its `id`, and `field` (`result` or `error`) holding
/// the JSON text `value`.
pub(super) fn response(request: &str, field: &str, value: &str) -> Result<String, String> {
    let id = member(request, "id").ok_or_else(|| format!("cannot answer {request:?}: it has no \"id\""))?;
    Ok(format!("{{\"id\":{id},\"{field}\":{value}}}"))
}

/// `text` as a JSON string.
pub(super) fn quote(text: &str) -> String {
    let mut quoted = String::with_capacity(text.len() + 2);
    quoted.push('"');
    for c in text.chars() {
        match c {
            '"' => quoted.push_str("\\\""),
            '\\' => quoted.push_str("\\\\"),
            c if u32::from(c) < 0x20 => quoted.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}

/// A cursor over a line. It only stops at ASCII bytes, so every slice it hands out is a whole
/// run of UTF-8.
struct Scanner<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Scanner<'a> {
    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek() == Some(byte)).then(|| self.at += 1)
    }

    fn skip_space(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\r' | b'\n')) {
            self.at += 1;
        }
    }

    /// A string, quotes included.
    fn string(&mut self) -> Option<&'a str> {
        let start = self.at;
        self.eat(b'"')?;
        loop {
            match self.peek()? {
                b'"' => {
                    self.at += 1;
                    return Some(&self.text[start..self.at]);
                }
                b'\\' => self.at += 2,
                _ => self.at += 1,
            }
        }
    }

    /// A value: a string, an object or array (brackets balanced, strings skipped), or a scalar
    /// (everything up to the next delimiter).
    fn value(&mut self) -> Option<&'a str> {
        let start = self.at;
        match self.peek()? {
            b'"' => {
                self.string()?;
            }
            b'{' | b'[' => {
                let mut depth = 0_usize;
                loop {
                    match self.peek()? {
                        b'"' => {
                            self.string()?;
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => depth -= 1,
                        _ => {}
                    }
                    self.at += 1;
                    if depth == 0 {
                        break;
                    }
                }
            }
            _ => {
                while !matches!(self.peek(), None | Some(b',' | b'}' | b']' | b' ' | b'\t' | b'\r' | b'\n')) {
                    self.at += 1;
                }
            }
        }
        (self.at > start).then(|| &self.text[start..self.at])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn check(line: &str, name: &str, expected: Option<&str>) {
        assert_eq!(member(line, name), expected, "member {name:?} of {line:?}");
    }

    #[test]
    fn members_are_found_at_the_top_level_only() {
        let line = r#"{"params":{"id":9,"list":[{"id":8}],"s":"}{\"id\":7"},"id":3,"method":"turn/start"}"#;
        check(line, "id", Some("3"));
        check(line, "method", Some(r#""turn/start""#));
        check(line, "params", Some(r#"{"id":9,"list":[{"id":8}],"s":"}{\"id\":7"}"#));
        check(line, "missing", None);
        check(r#" { "id" : "r-1" , "result" : { } } "#, "id", Some(r#""r-1""#));
        check(r#"{"id":null,"result":[1, 2]}"#, "result", Some("[1, 2]"));
        check("{}", "id", None);
        check(r#"{"a\"id":1,"id":2}"#, "id", Some("2"));
        check(r#"{"id":"é","x":true}"#, "id", Some(r#""é""#));
    }

    #[test]
    fn lines_that_are_not_one_object_have_no_members() {
        for line in [
            "",
            "id",
            r#"[{"id":1}]"#,
            r#""id""#,
            r#"{"id":1"#,
            r#"{"id":1} trailing"#,
            r#"{"id":1,}"#,
            r#"{"id":}"#,
            r#"{"id" 1}"#,
            r#"{"id":"open}"#,
            r#"{"id":{"a":1}"#,
        ] {
            check(line, "id", None);
        }
    }

    #[test]
    fn requests_and_responses_are_told_apart() {
        assert!(is_request(r#"{"id":1,"method":"initialize","params":{}}"#, "initialize"));
        assert!(!is_request(r#"{"method":"initialized"}"#, "initialized"), "a notification has no id");
        assert!(!is_request(r#"{"id":1,"method":"initialize/x"}"#, "initialize"));
        assert!(is_response(r#"{"id":0,"result":{"decision":"accept"}}"#, "0"));
        assert!(is_response(r#"{"id":"s1","error":{"code":1}}"#, r#""s1""#));
        assert!(!is_response(r#"{"id":0,"method":"turn/start"}"#, "0"), "a request is no response");
        assert!(!is_response(r#"{"id":10,"result":{}}"#, "1"));
    }

    #[test]
    fn responses_carry_the_request_id_as_written() {
        let answered = |request: &str| response(request, "result", "{}");
        assert_eq!(answered(r#"{"id":7,"method":"turn/interrupt"}"#).unwrap(), r#"{"id":7,"result":{}}"#);
        assert_eq!(answered(r#"{"method":"m","id":"a-1"}"#).unwrap(), r#"{"id":"a-1","result":{}}"#);
        let error = response(r#"{"id":2}"#, "error", r#"{"code":-1,"message":"no"}"#).unwrap();
        assert_eq!(error, r#"{"id":2,"error":{"code":-1,"message":"no"}}"#);
        let refused = answered(r#"{"method":"initialized"}"#).unwrap_err();
        assert_eq!(refused, r#"cannot answer "{\"method\":\"initialized\"}": it has no "id""#);
    }

    #[test]
    fn quoting_escapes_what_json_requires() {
        assert_eq!(quote("turn/start"), r#""turn/start""#);
        assert_eq!(quote("a\"b\\c\n"), r#""a\"b\\c\u000a""#);
    }
}
