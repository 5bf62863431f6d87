//! JSON patterns (`match`) and placeholders (`${name}`, `${in.path}`) of fake CLI scripts.

use serde_json::Value;

/// True when `value` contains `pattern`: objects match by subset (every key of the pattern is
/// present with a matching value), everything else by equality.
pub(super) fn matches(pattern: &Value, value: &Value) -> bool {
    match (pattern, value) {
        (Value::Object(pattern), Value::Object(value)) => {
            pattern.iter().all(|(key, p)| value.get(key).is_some_and(|v| matches(p, v)))
        }
        _ => pattern == value,
    }
}

/// Looks up a placeholder name; `None` leaves the placeholder as written.
pub(super) trait Lookup {
    /// The value of `name` (`prompt`, `in.id`, ...).
    fn lookup(&self, name: &str) -> Option<Value>;
}

impl<F: Fn(&str) -> Option<Value>> Lookup for F {
    fn lookup(&self, name: &str) -> Option<Value> {
        self(name)
    }
}

/// The value at a dotted `path` (`params.threadId`, `input.0.text`) inside `value`.
pub(super) fn path<'v>(value: &'v Value, path: &str) -> Option<&'v Value> {
    path.split('.').filter(|segment| !segment.is_empty()).try_fold(value, |value, segment| match value {
        Value::Object(map) => map.get(segment),
        Value::Array(items) => segment.parse::<usize>().ok().and_then(|index| items.get(index)),
        _ => None,
    })
}

/// Replaces placeholders in every string of `value`. A string that is exactly one placeholder
/// becomes the looked-up JSON value; placeholders inside longer strings become text.
pub(super) fn render(value: &Value, vars: &dyn Lookup) -> Value {
    match value {
        Value::String(text) => render_string(text, vars),
        Value::Array(items) => Value::Array(items.iter().map(|item| render(item, vars)).collect()),
        Value::Object(map) => Value::Object(map.iter().map(|(k, v)| (k.clone(), render(v, vars))).collect()),
        other => other.clone(),
    }
}

fn render_string(text: &str, vars: &dyn Lookup) -> Value {
    if let Some(name) = text.strip_prefix("${").and_then(|rest| rest.strip_suffix('}'))
        && !name.contains("${")
        && let Some(value) = vars.lookup(name)
    {
        return value;
    }
    Value::String(render_text(text, vars))
}

/// Replaces placeholders in `text` with the text of their values.
pub(super) fn render_text(text: &str, vars: &dyn Lookup) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let found = after.find('}').and_then(|end| vars.lookup(&after[..end]).map(|value| (value, end)));
        match found {
            Some((Value::String(text), end)) => {
                out.push_str(&text);
                rest = &after[end + 1..];
            }
            Some((value, end)) => {
                out.push_str(&value.to_string());
                rest = &after[end + 1..];
            }
            None => {
                out.push_str("${");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn vars(name: &str) -> Option<Value> {
        match name {
            "answer" => Some(json!("blue")),
            "in.id" => Some(json!(7)),
            _ => None,
        }
    }

    #[test]
    fn patterns_match_by_subset() {
        let message = json!({"id": 1, "method": "turn/start", "params": {"threadId": "t", "input": [1]}});
        assert!(matches(&json!({"method": "turn/start"}), &message));
        assert!(matches(&json!({"params": {"threadId": "t"}}), &message));
        assert!(!matches(&json!({"params": {"threadId": "u"}}), &message));
        assert!(!matches(&json!({"missing": null}), &message));
        assert!(matches(&json!({"params": {"input": [1]}}), &message));
    }

    #[test]
    fn placeholders_become_values_or_text() {
        let frame = json!({"id": "${in.id}", "text": "You chose ${answer}.", "keep": "${unknown}", "n": 3});
        assert_eq!(render(&frame, &vars), json!({"id": 7, "text": "You chose blue.", "keep": "${unknown}", "n": 3}));
        assert_eq!(render_text("${answer}${answer} ${", &vars), "blueblue ${");
    }

    #[test]
    fn paths_walk_objects_and_arrays() {
        let value = json!({"params": {"input": [{"text": "hi"}]}});
        assert_eq!(path(&value, "params.input.0.text"), Some(&json!("hi")));
        assert_eq!(path(&value, "params.input.1"), None);
        assert_eq!(path(&value, ""), Some(&value));
    }
}
