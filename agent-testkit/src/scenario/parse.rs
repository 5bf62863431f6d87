//! The JSON Lines scenario script parser.

use std::path::PathBuf;

use super::Step;
use crate::jsonl;

/// Why a scenario script was rejected. Every variant about the script's content names its
/// 1-based line.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScenarioError {
    /// The script file could not be read.
    #[error("cannot read scenario {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A line is not valid JSON.
    #[error("scenario line {line}: not valid JSON: {source}")]
    Json {
        /// 1-based line number.
        line: usize,
        /// The JSON error.
        source: serde_json::Error,
    },
    /// A line names a step that does not exist.
    #[error("scenario line {line}: unknown step {step:?}; known steps: {}", Step::NAMES.join(", "))]
    UnknownStep {
        /// 1-based line number.
        line: usize,
        /// The name found.
        step: String,
    },
    /// A line is JSON but not a valid step (no `"step"`, missing or unknown fields, bad values).
    #[error("scenario line {line}: {message}")]
    InvalidStep {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
}

impl ScenarioError {
    /// The 1-based script line the error is about, if it is about a line.
    pub fn line(&self) -> Option<usize> {
        match self {
            ScenarioError::Read { .. } => None,
            ScenarioError::Json { line, .. }
            | ScenarioError::UnknownStep { line, .. }
            | ScenarioError::InvalidStep { line, .. } => Some(*line),
        }
    }
}

impl From<jsonl::LineError> for ScenarioError {
    fn from(error: jsonl::LineError) -> Self {
        match error {
            jsonl::LineError::Json { line, source } => ScenarioError::Json { line, source },
            jsonl::LineError::UnknownStep { line, step } => ScenarioError::UnknownStep { line, step },
            jsonl::LineError::InvalidStep { line, message } => ScenarioError::InvalidStep { line, message },
        }
    }
}

pub(super) fn parse(script: &str) -> Result<Vec<Step>, ScenarioError> {
    Ok(jsonl::parse(script)?)
}

impl jsonl::ScriptStep for Step {
    const NAMES: &'static [&'static str] = Step::NAMES;

    fn check(&self) -> Result<(), String> {
        check(self)
    }
}

fn check(step: &Step) -> Result<(), String> {
    match step {
        Step::HttpError { status, .. } if !(400..=599).contains(status) => {
            Err(format!("status must be in 400..=599, found {status}"))
        }
        Step::AskUser { options, .. } if options.is_empty() => Err("options must not be empty".to_owned()),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Scenario;

    #[track_caller]
    fn check_error(script: &str, line: usize, contains: &str) {
        let err = Scenario::parse(script).unwrap_err();
        assert_eq!(err.line(), Some(line), "{err}");
        let message = err.to_string();
        assert!(message.starts_with(&format!("scenario line {line}: ")), "{message}");
        assert!(message.contains(contains), "{message:?} does not contain {contains:?}");
    }

    #[test]
    fn every_step_parses_back_from_its_script_form() {
        let scenario = Scenario::new()
            .text("hello")
            .deltas(["a", "b"], 25)
            .echo("You said: ")
            .shell("echo hi")
            .write_file("/tmp/x.txt", "x\n")
            .edit_file("x.txt", "x", "y")
            .ask_user("Color?", ["red", "blue"])
            .tool_call("custom", serde_json::json!({"k": 1}))
            .quote_tool_result("Tool said: ")
            .stall("thinking")
            .rate_limited(7)
            .disconnect("partial");
        assert_eq!(scenario.steps().len(), Step::NAMES.len());
        for step in scenario.steps() {
            assert!(Step::NAMES.contains(&step.name()));
        }
        assert_eq!(Scenario::parse(&scenario.to_script()).unwrap(), scenario);
    }

    #[test]
    fn defaults_fill_optional_fields() {
        let scenario = Scenario::parse("{\"step\":\"http_error\",\"status\":503}\n{\"step\":\"echo\"}").unwrap();
        assert_eq!(
            scenario.steps(),
            [
                Step::HttpError { status: 503, message: "fake model: scripted error".into(), reset_after_s: None },
                Step::Echo { prefix: String::new() },
            ]
        );
    }

    #[test]
    fn comments_and_blank_lines_are_skipped_but_counted() {
        check_error("# comment\n\n{\"step\":\"text\",\"text\":\"a\"}\n{oops", 4, "not valid JSON");
    }

    #[test]
    fn bad_json_names_the_line() {
        check_error("{\"step\":\"text\",\"text\":\"a\"}\n{\"step\": \"text\", ", 2, "not valid JSON");
    }

    #[test]
    fn unknown_step_names_the_line_and_the_known_steps() {
        check_error(
            "{\"step\":\"text\",\"text\":\"a\"}\n{\"step\":\"dance\"}",
            2,
            "unknown step \"dance\"; known steps: text, deltas",
        );
    }

    #[test]
    fn invalid_steps_name_the_line() {
        check_error("[1, 2]", 1, "expected a JSON object");
        check_error("{\"text\":\"a\"}", 1, "missing \"step\" field");
        check_error("{\"step\": 3}", 1, "\"step\" must be a string");
        check_error("{\"step\":\"text\"}", 1, "missing field `text`");
        check_error("{\"step\":\"text\",\"text\":\"a\",\"colour\":1}", 1, "unknown field `colour`");
        check_error("{\"step\":\"http_error\",\"status\":200}", 1, "status must be in 400..=599");
        check_error("{\"step\":\"ask_user\",\"question\":\"q\",\"options\":[]}", 1, "options must not be empty");
    }

    #[test]
    fn unreadable_file_is_a_read_error() {
        let err = Scenario::from_file("/nonexistent/scenario.jsonl").unwrap_err();
        assert!(matches!(err, ScenarioError::Read { .. }));
        assert_eq!(err.line(), None);
    }
}
