//! Which output lines a rule takes (`when`) and what it takes from them (a JSON pointer or a
//! regex group).
//!
//! A `when` is either a regular expression searched for in the line (both framings; a match
//! anywhere in it takes the line, so a rule anchors it as `^…$` to match the whole line), or,
//! for `jsonl`, an object of JSON pointers and what the value there must be:
//!
//! ```json
//! {"/type": "result", "/is_error": true}                     // equal to this JSON value
//! {"/type": {"matches": "^turn\\.(failed|error)$"}}           // a string matching the regex
//! {"/willRetry": {"not": true}, "/usage": {"exists": true}}   // anything else / present or absent
//! {"/type": "agent_end", "$stop": "error"}                    // `$name`: a value kept from earlier lines
//! ```
//!
//! An object of exactly one key `matches`, `not` or `exists` is an operator; every other value is
//! compared for equality. A key `$name` tests the value `matchers.keep.name` kept last (a string),
//! so a line can be judged by what came before it.

use std::collections::HashMap;

use regex::Regex;
use serde_json::Value;

use crate::error::Problem;

/// How the CLI's stdout is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Framing {
    /// One JSON value per line; lines that are not JSON become warnings.
    Jsonl,
    /// Plain text lines.
    Lines,
}

/// One stdout line as the rules see it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct OutputLine<'a> {
    pub(crate) text: &'a str,
    /// The parsed line (`jsonl` framing, when it is JSON).
    pub(crate) json: Option<&'a Value>,
    /// The values kept from earlier lines.
    pub(crate) kept: &'a HashMap<String, String>,
}

/// What a field test reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Field {
    /// A JSON pointer into the line.
    Pointer(String),
    /// A kept value.
    Kept(String),
}

/// A rule's `when`.
#[derive(Clone, Debug)]
pub(crate) enum When {
    /// A regex searched for in the line.
    Line(Regex),
    /// Tests of JSON fields and kept values (`jsonl`).
    Fields(Vec<(Field, Test)>),
}

/// What the value at one pointer must be.
#[derive(Clone, Debug)]
pub(crate) enum Test {
    Equals(Value),
    Matches(Regex),
    Exists(bool),
    Not(Value),
}

/// A line a rule took, with the regex's captures.
#[derive(Debug)]
pub(crate) struct Hit<'a> {
    line: OutputLine<'a>,
    captures: Option<regex::Captures<'a>>,
}

/// Compiles `pattern` (at `path`).
pub(crate) fn regex(pattern: &str, path: &str) -> Result<Regex, Problem> {
    Regex::new(pattern).map_err(|error| {
        let detail =
            error.to_string().lines().last().unwrap_or_default().trim().trim_start_matches("error: ").to_owned();
        Problem::new(path, format!("invalid regex: {detail}"))
    })
}

impl When {
    /// Parses a `when` at `path`.
    pub(crate) fn parse(value: &Value, framing: Framing, path: &str) -> Result<When, Problem> {
        match value {
            Value::String(pattern) => Ok(When::Line(regex(pattern, path)?)),
            Value::Object(_) if framing == Framing::Lines => {
                Err(Problem::new(path, "field tests need `jsonl` framing; match a `lines` line with a regex string"))
            }
            Value::Object(fields) if fields.is_empty() => Err(Problem::new(path, "an empty test matches every line")),
            Value::Object(fields) => {
                let mut tests = Vec::new();
                for (key, expected) in fields {
                    let at = format!("{path}.{key}");
                    let field = if key.starts_with('/') {
                        Field::Pointer(key.clone())
                    } else if let Some(name) = key.strip_prefix('$').filter(|n| !n.is_empty()) {
                        Field::Kept(name.to_owned())
                    } else {
                        return Err(Problem::new(
                            at,
                            "a field test's key is a JSON pointer such as `/type`, or `$name` for a kept value",
                        ));
                    };
                    tests.push((field, Test::parse(expected, &at)?));
                }
                Ok(When::Fields(tests))
            }
            _ => Err(Problem::new(path, "expected a regex string or an object of JSON-pointer tests")),
        }
    }

    /// The line, when this rule takes it.
    pub(crate) fn hit<'a>(&self, line: OutputLine<'a>) -> Option<Hit<'a>> {
        match self {
            When::Line(regex) => regex.captures(line.text).map(|captures| Hit { line, captures: Some(captures) }),
            When::Fields(tests) => {
                let json = line.json?;
                let holds = tests.iter().all(|(field, test)| match field {
                    Field::Pointer(pointer) => test.holds(json.pointer(pointer)),
                    Field::Kept(name) => test.holds(line.kept.get(name).map(|v| Value::String(v.clone())).as_ref()),
                });
                holds.then_some(Hit { line, captures: None })
            }
        }
    }

    /// The kept values this `when` tests.
    pub(crate) fn kept_names(&self) -> impl Iterator<Item = &str> {
        let fields: &[(Field, Test)] = match self {
            When::Fields(tests) => tests,
            When::Line(_) => &[],
        };
        fields.iter().filter_map(|(field, _)| match field {
            Field::Kept(name) => Some(name.as_str()),
            Field::Pointer(_) => None,
        })
    }

    fn has_group(&self, name: &str) -> bool {
        match self {
            When::Line(regex) => match name.parse::<usize>() {
                Ok(index) => index < regex.captures_len(),
                Err(_) => regex.capture_names().flatten().any(|n| n == name),
            },
            When::Fields(_) => false,
        }
    }
}

impl Test {
    fn parse(value: &Value, path: &str) -> Result<Test, Problem> {
        if let Value::Object(map) = value
            && map.len() == 1
        {
            let (op, operand) = map.iter().next().expect("one entry");
            match op.as_str() {
                "matches" => {
                    let Value::String(pattern) = operand else {
                        return Err(Problem::new(format!("{path}.matches"), "expected a regex string"));
                    };
                    return Ok(Test::Matches(regex(pattern, &format!("{path}.matches"))?));
                }
                "exists" => {
                    let Value::Bool(exists) = operand else {
                        return Err(Problem::new(format!("{path}.exists"), "expected true or false"));
                    };
                    return Ok(Test::Exists(*exists));
                }
                "not" => return Ok(Test::Not(operand.clone())),
                _ => {}
            }
        }
        Ok(Test::Equals(value.clone()))
    }

    fn holds(&self, found: Option<&Value>) -> bool {
        match self {
            Test::Equals(expected) => found == Some(expected),
            Test::Matches(regex) => found.and_then(Value::as_str).is_some_and(|s| regex.is_match(s)),
            Test::Exists(exists) => found.is_some_and(|v| !v.is_null()) == *exists,
            Test::Not(unexpected) => found != Some(unexpected),
        }
    }
}

/// Where a value is taken from on a line a rule took.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    /// A JSON pointer into the line (`jsonl`).
    Pointer(String),
    /// A group of the rule's regex, by name or number (`0` is the whole match).
    Group(String),
}

impl Source {
    /// Parses a value source at `path` for a rule whose `when` is `when`.
    pub(crate) fn parse(value: &Value, framing: Framing, when: &When, path: &str) -> Result<Source, Problem> {
        let Value::String(text) = value else {
            return Err(Problem::new(path, "expected a JSON pointer (`/result`) or a regex group name"));
        };
        if text.starts_with('/') {
            if framing != Framing::Jsonl {
                return Err(Problem::new(path, "a JSON pointer needs `jsonl` framing; name a regex group instead"));
            }
            return Ok(Source::Pointer(text.clone()));
        }
        if when.has_group(text) {
            return Ok(Source::Group(text.clone()));
        }
        // The text is not quoted: a value in the wrong place may be a secret.
        let why = match when {
            When::Line(_) => "not a group of this rule's `when` regex (a name or a number)",
            When::Fields(_) => "not a JSON pointer (one starts with `/`)",
        };
        Err(Problem::new(path, why))
    }

    /// The value as JSON (a group is a JSON string).
    pub(crate) fn json(&self, hit: &Hit<'_>) -> Option<Value> {
        match self {
            Source::Pointer(pointer) => hit.line.json?.pointer(pointer).filter(|v| !v.is_null()).cloned(),
            Source::Group(name) => self.group(hit, name).map(|s| Value::String(s.to_owned())),
        }
    }

    /// The value as text (see [`text_of`]).
    pub(crate) fn text(&self, hit: &Hit<'_>) -> Option<String> {
        match self {
            Source::Pointer(pointer) => hit.line.json?.pointer(pointer).and_then(text_of),
            Source::Group(name) => self.group(hit, name).map(str::to_owned),
        }
    }

    fn group<'a>(&self, hit: &Hit<'a>, name: &str) -> Option<&'a str> {
        let captures = hit.captures.as_ref()?;
        let found = match name.parse::<usize>() {
            Ok(index) => captures.get(index),
            Err(_) => captures.name(name),
        };
        found.map(|m| m.as_str())
    }
}

/// A JSON value as text: a string as it is; an array of content blocks as the `text` of its
/// blocks (or its strings) joined; an object's `text`; a number or boolean written out; `null`
/// as nothing; any other object as JSON.
pub(crate) fn text_of(value: &Value) -> Option<String> {
    match value {
        Value::Null => None,
        Value::String(text) => Some(text.clone()),
        Value::Bool(_) | Value::Number(_) => Some(value.to_string()),
        Value::Array(items) => Some(
            items
                .iter()
                .filter_map(|item| match item {
                    Value::String(text) => Some(text.as_str()),
                    Value::Object(block) => block.get("text").and_then(Value::as_str),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join(""),
        ),
        Value::Object(map) => match map.get("text") {
            Some(Value::String(text)) => Some(text.clone()),
            _ => Some(value.to_string()),
        },
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn json_line(value: &Value) -> String {
        value.to_string()
    }

    fn none() -> HashMap<String, String> {
        HashMap::new()
    }

    #[test]
    fn kept_values_are_tested_by_name() {
        let when = When::parse(&json!({"/type": "end", "$stop": {"not": "error"}}), Framing::Jsonl, "when").unwrap();
        assert_eq!(when.kept_names().collect::<Vec<_>>(), ["stop"]);
        let line = json!({"type": "end"});
        let text = json_line(&line);
        let mut kept = none();
        assert!(when.hit(OutputLine { text: &text, json: Some(&line), kept: &kept }).is_some(), "nothing kept yet");
        kept.insert("stop".into(), "error".into());
        assert!(when.hit(OutputLine { text: &text, json: Some(&line), kept: &kept }).is_none());
        kept.insert("stop".into(), "stop".into());
        assert!(when.hit(OutputLine { text: &text, json: Some(&line), kept: &kept }).is_some());
        assert!(When::parse(&json!({"$": 1}), Framing::Jsonl, "w").is_err());
    }

    #[test]
    fn field_tests_compare_match_and_negate() {
        let when = When::parse(
            &json!({"/type": "result", "/is_error": {"not": true}, "/result": {"matches": "^ok"}, "/gone": {"exists": false}}),
            Framing::Jsonl,
            "when",
        )
        .unwrap();
        let yes = json!({"type": "result", "is_error": false, "result": "ok then"});
        let text = json_line(&yes);
        assert!(when.hit(OutputLine { text: &text, json: Some(&yes), kept: &none() }).is_some());
        for no in [
            json!({"type": "result", "is_error": true, "result": "ok"}),
            json!({"type": "assistant", "result": "ok"}),
            json!({"type": "result", "result": "not ok"}),
            json!({"type": "result", "result": "ok", "gone": 1}),
        ] {
            let text = json_line(&no);
            assert!(when.hit(OutputLine { text: &text, json: Some(&no), kept: &none() }).is_none(), "{no}");
        }
        // Not JSON: field tests never take it.
        assert!(when.hit(OutputLine { text: "ok", json: None, kept: &none() }).is_none());
    }

    #[test]
    fn values_come_from_pointers_or_groups() {
        let when = When::parse(&json!({"/type": "result"}), Framing::Jsonl, "when").unwrap();
        let line = json!({"type": "result", "result": "done", "n": 3, "content": [{"type": "text", "text": "a"}, {"type": "tool_use"}, {"text": "b"}]});
        let text = json_line(&line);
        let kept = none();
        let hit = when.hit(OutputLine { text: &text, json: Some(&line), kept: &kept }).unwrap();
        let source = |s: &str| Source::parse(&json!(s), Framing::Jsonl, &when, "value").unwrap();
        assert_eq!(source("/result").text(&hit).as_deref(), Some("done"));
        assert_eq!(source("/n").text(&hit).as_deref(), Some("3"));
        assert_eq!(source("/content").text(&hit).as_deref(), Some("ab"));
        assert_eq!(source("/missing").text(&hit), None);
        assert_eq!(source("/content/1").json(&hit), Some(json!({"type": "tool_use"})));

        let lines = When::parse(&json!("^RESULT (?P<text>.*)$"), Framing::Lines, "when").unwrap();
        let hit = lines.hit(OutputLine { text: "RESULT all good", json: None, kept: &kept }).unwrap();
        let group = |s: &str| Source::parse(&json!(s), Framing::Lines, &lines, "value").unwrap();
        assert_eq!(group("text").text(&hit).as_deref(), Some("all good"));
        assert_eq!(group("0").text(&hit).as_deref(), Some("RESULT all good"));
        assert!(lines.hit(OutputLine { text: "result all good", json: None, kept: &none() }).is_none());
    }

    #[test]
    fn bad_rules_name_the_field() {
        let problem = When::parse(&json!({"/type": {"matches": "(unclosed"}}), Framing::Jsonl, "m.when").unwrap_err();
        assert_eq!(problem.path, "m.when./type.matches");
        assert_eq!(problem.message, "invalid regex: unclosed group", "the pattern is not quoted");
        let problem = When::parse(&json!("["), Framing::Lines, "m.when").unwrap_err();
        assert_eq!(problem.path, "m.when");
        assert_eq!(When::parse(&json!({"type": "x"}), Framing::Jsonl, "w").unwrap_err().path, "w.type");
        assert!(When::parse(&json!({"/type": "x"}), Framing::Lines, "w").is_err());
        assert!(When::parse(&json!({}), Framing::Jsonl, "w").is_err());
        assert!(When::parse(&json!(1), Framing::Jsonl, "w").is_err());
        let when = When::parse(&json!("^(?P<text>.*)$"), Framing::Lines, "when").unwrap();
        assert!(Source::parse(&json!("txt"), Framing::Lines, &when, "v").unwrap_err().message.contains("not a group"));
        assert!(Source::parse(&json!("/x"), Framing::Lines, &when, "v").is_err());
        assert!(Source::parse(&json!("2"), Framing::Lines, &when, "v").is_err());
        let fields = When::parse(&json!({"/a": 1}), Framing::Jsonl, "when").unwrap();
        assert!(Source::parse(&json!("a"), Framing::Jsonl, &fields, "v").unwrap_err().message.contains("JSON pointer"));
    }

    #[test]
    fn text_of_values() {
        assert_eq!(text_of(&json!(null)), None);
        assert_eq!(text_of(&json!(true)).as_deref(), Some("true"));
        assert_eq!(text_of(&json!(["a", "b"])).as_deref(), Some("ab"));
        assert_eq!(text_of(&json!({"text": "t"})).as_deref(), Some("t"));
        assert_eq!(text_of(&json!({"k": 1})).as_deref(), Some("{\"k\":1}"));
    }
}
