//! The JSON Lines step-script format shared by fake-model scenarios and fake-CLI scripts: one
//! `{"step": "<name>", …}` object per line, blank lines and `#` comments skipped (but counted in
//! line numbers), every error naming its 1-based line.

use serde::de::DeserializeOwned;
use serde_json::Value;

/// A step type a script can hold.
pub(crate) trait ScriptStep: DeserializeOwned {
    /// The step names, for "unknown step" errors.
    const NAMES: &'static [&'static str];

    /// Checks values serde cannot (ranges, required combinations).
    fn check(&self) -> Result<(), String>;
}

/// What is wrong with one line.
#[derive(Debug)]
pub(crate) enum LineError {
    /// Not JSON.
    Json { line: usize, source: serde_json::Error },
    /// A `"step"` name that does not exist.
    UnknownStep { line: usize, step: String },
    /// JSON, but not a valid step.
    InvalidStep { line: usize, message: String },
}

/// Parses every step of `script`, stopping at the first bad line.
pub(crate) fn parse<S: ScriptStep>(script: &str) -> Result<Vec<S>, LineError> {
    script
        .lines()
        .enumerate()
        .map(|(index, text)| (index + 1, text.trim()))
        .filter(|(_, text)| !text.is_empty() && !text.starts_with('#'))
        .map(|(line, text)| parse_line(line, text))
        .collect()
}

fn parse_line<S: ScriptStep>(line: usize, text: &str) -> Result<S, LineError> {
    let value: Value = serde_json::from_str(text).map_err(|source| LineError::Json { line, source })?;
    let invalid = |message: String| LineError::InvalidStep { line, message };
    let Some(object) = value.as_object() else {
        return Err(invalid(format!("expected a JSON object with a \"step\" field, found {}", kind(&value))));
    };
    let name = match object.get("step") {
        Some(Value::String(name)) => name,
        Some(other) => return Err(invalid(format!("\"step\" must be a string, found {}", kind(other)))),
        None => return Err(invalid("missing \"step\" field".to_owned())),
    };
    if !S::NAMES.contains(&name.as_str()) {
        return Err(LineError::UnknownStep { line, step: name.clone() });
    }
    let step = S::deserialize(&value).map_err(|e| invalid(format!("step {name:?}: {e}")))?;
    step.check().map_err(|message| invalid(format!("step {name:?}: {message}")))?;
    Ok(step)
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
