//! Scenarios: what a fake model server answers, one [`Step`] per model request.
//!
//! A scenario is built in Rust with [`Scenario`]'s builder methods or parsed from a script
//! ([`Scenario::parse`], [`Scenario::from_file`]): JSON Lines, one step object per line, the
//! step named by its `"step"` field. Blank lines and lines starting with `#` are skipped.
//!
//! ```
//! use agent_testkit::scenario::{Scenario, Step};
//!
//! let script = r#"
//! ## run a command, then answer with what it printed
//! {"step": "shell", "command": "echo hi"}
//! {"step": "quote_tool_result", "prefix": "Tool said: "}
//! "#;
//! let parsed = Scenario::parse(script).unwrap();
//! let built = Scenario::new().shell("echo hi").quote_tool_result("Tool said: ");
//! assert_eq!(parsed, built);
//! assert_eq!(parsed.steps()[0], Step::Shell { command: "echo hi".into() });
//! ```

mod parse;

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use parse::ScenarioError;

/// One scripted answer to one model request.
///
/// Tool steps name an abstract tool; the server renders it as the tool the requesting CLI
/// advertised (Codex `exec_command` / `apply_patch` / `request_user_input`, Claude `Bash` /
/// `Write` / `Edit` / `AskUserQuestion`, Pi `bash` / `write` / `edit` / `ask_user`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "snake_case", deny_unknown_fields)]
#[non_exhaustive]
pub enum Step {
    /// Answer with `text`, streamed in small deltas.
    Text {
        /// The whole answer.
        text: String,
    },
    /// Stream exactly these deltas, waiting `delay_ms` before each one.
    Deltas {
        /// The text deltas, in order.
        deltas: Vec<String>,
        /// Pause before each delta, in milliseconds.
        #[serde(default)]
        delay_ms: u64,
    },
    /// Answer with `prefix` followed by the text of the latest user message.
    Echo {
        /// Text before the echoed prompt.
        #[serde(default)]
        prefix: String,
    },
    /// Call the shell tool with `command`.
    Shell {
        /// The command line.
        command: String,
    },
    /// Create (or overwrite) the file `path` with `content`.
    WriteFile {
        /// File path; Claude's `Write` needs an absolute path.
        path: String,
        /// The whole new content.
        content: String,
    },
    /// Replace the text `old` with `new` in the file `path` (Codex: `apply_patch` update, so
    /// `old` and `new` are whole lines).
    EditFile {
        /// File path; Claude's `Edit` needs an absolute path.
        path: String,
        /// Text to replace.
        old: String,
        /// Replacement.
        new: String,
    },
    /// Ask the user a multiple-choice question through the CLI's question tool.
    AskUser {
        /// The question.
        question: String,
        /// The choices.
        options: Vec<String>,
    },
    /// Call any tool by its exact name.
    ToolCall {
        /// Tool name as the CLI advertises it.
        name: String,
        /// JSON arguments.
        arguments: Value,
    },
    /// Answer with `prefix` followed by the output of the latest tool result in the request.
    QuoteToolResult {
        /// Text before the quoted output.
        #[serde(default)]
        prefix: String,
    },
    /// Start an answer with `text`, then send only keep-alive comments until the client hangs up.
    Stall {
        /// The text sent before going quiet.
        #[serde(default)]
        text: String,
    },
    /// Answer with an HTTP error in the endpoint's error format.
    HttpError {
        /// HTTP status, 400..=599.
        status: u16,
        /// Error message.
        #[serde(default = "default_error_message")]
        message: String,
        /// For 429 (or any status): seconds until the limit resets, sent as `retry-after` and
        /// the provider's rate-limit reset headers.
        #[serde(default)]
        reset_after_s: Option<u64>,
    },
    /// Start streaming `text`, then drop the connection before the stream completes.
    Disconnect {
        /// The text sent before the connection drops.
        #[serde(default)]
        text: String,
    },
}

fn default_error_message() -> String {
    "fake model: scripted error".to_owned()
}

impl Step {
    /// The step's name as written in scripts (`"text"`, `"shell"`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            Step::Text { .. } => "text",
            Step::Deltas { .. } => "deltas",
            Step::Echo { .. } => "echo",
            Step::Shell { .. } => "shell",
            Step::WriteFile { .. } => "write_file",
            Step::EditFile { .. } => "edit_file",
            Step::AskUser { .. } => "ask_user",
            Step::ToolCall { .. } => "tool_call",
            Step::QuoteToolResult { .. } => "quote_tool_result",
            Step::Stall { .. } => "stall",
            Step::HttpError { .. } => "http_error",
            Step::Disconnect { .. } => "disconnect",
        }
    }

    /// Every step name a script may use.
    pub const NAMES: &'static [&'static str] = &[
        "text",
        "deltas",
        "echo",
        "shell",
        "write_file",
        "edit_file",
        "ask_user",
        "tool_call",
        "quote_tool_result",
        "stall",
        "http_error",
        "disconnect",
    ];
}

/// An ordered list of [`Step`]s: the n-th model request gets the n-th step.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Scenario {
    steps: Vec<Step>,
}

impl Scenario {
    /// An empty scenario.
    pub fn new() -> Self {
        Scenario::default()
    }

    /// Parses a JSON Lines script (see the module docs).
    pub fn parse(script: &str) -> Result<Self, ScenarioError> {
        parse::parse(script).map(|steps| Scenario { steps })
    }

    /// Reads and parses a script file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, ScenarioError> {
        let path = path.as_ref();
        let script =
            std::fs::read_to_string(path).map_err(|source| ScenarioError::Read { path: path.to_path_buf(), source })?;
        Scenario::parse(&script)
    }

    /// The steps, in order.
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// The script form: one JSON object per line; [`Scenario::parse`] reads it back.
    pub fn to_script(&self) -> String {
        self.steps.iter().map(|step| serde_json::to_string(step).unwrap_or_default() + "\n").collect()
    }

    /// Appends a step.
    pub fn step(mut self, step: Step) -> Self {
        self.steps.push(step);
        self
    }

    /// Appends [`Step::Text`].
    pub fn text(self, text: impl Into<String>) -> Self {
        self.step(Step::Text { text: text.into() })
    }

    /// Appends [`Step::Deltas`].
    pub fn deltas<I, S>(self, deltas: I, delay_ms: u64) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.step(Step::Deltas { deltas: deltas.into_iter().map(Into::into).collect(), delay_ms })
    }

    /// Appends [`Step::Echo`].
    pub fn echo(self, prefix: impl Into<String>) -> Self {
        self.step(Step::Echo { prefix: prefix.into() })
    }

    /// Appends [`Step::Shell`].
    pub fn shell(self, command: impl Into<String>) -> Self {
        self.step(Step::Shell { command: command.into() })
    }

    /// Appends [`Step::WriteFile`].
    pub fn write_file(self, path: impl Into<String>, content: impl Into<String>) -> Self {
        self.step(Step::WriteFile { path: path.into(), content: content.into() })
    }

    /// Appends [`Step::EditFile`].
    pub fn edit_file(self, path: impl Into<String>, old: impl Into<String>, new: impl Into<String>) -> Self {
        self.step(Step::EditFile { path: path.into(), old: old.into(), new: new.into() })
    }

    /// Appends [`Step::AskUser`].
    pub fn ask_user<I, S>(self, question: impl Into<String>, options: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.step(Step::AskUser { question: question.into(), options: options.into_iter().map(Into::into).collect() })
    }

    /// Appends [`Step::ToolCall`].
    pub fn tool_call(self, name: impl Into<String>, arguments: Value) -> Self {
        self.step(Step::ToolCall { name: name.into(), arguments })
    }

    /// Appends [`Step::QuoteToolResult`].
    pub fn quote_tool_result(self, prefix: impl Into<String>) -> Self {
        self.step(Step::QuoteToolResult { prefix: prefix.into() })
    }

    /// Appends [`Step::Stall`].
    pub fn stall(self, text: impl Into<String>) -> Self {
        self.step(Step::Stall { text: text.into() })
    }

    /// Appends [`Step::HttpError`] without a reset time.
    pub fn http_error(self, status: u16, message: impl Into<String>) -> Self {
        self.step(Step::HttpError { status, message: message.into(), reset_after_s: None })
    }

    /// Appends a 400 [`Step::HttpError`] saying the request overflowed the model's context
    /// window, in words the CLIs recognise as such (pi then compacts its context).
    pub fn context_overflow(self) -> Self {
        let message =
            "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.";
        self.http_error(400, message)
    }

    /// Appends a 429 [`Step::HttpError`] whose limit resets after `reset_after_s` seconds.
    pub fn rate_limited(self, reset_after_s: u64) -> Self {
        self.step(Step::HttpError {
            status: 429,
            message: "fake model: rate limited".to_owned(),
            reset_after_s: Some(reset_after_s),
        })
    }

    /// Appends [`Step::Disconnect`].
    pub fn disconnect(self, text: impl Into<String>) -> Self {
        self.step(Step::Disconnect { text: text.into() })
    }
}

impl FromIterator<Step> for Scenario {
    fn from_iter<I: IntoIterator<Item = Step>>(iter: I) -> Self {
        Scenario { steps: iter.into_iter().collect() }
    }
}

impl IntoIterator for Scenario {
    type Item = Step;
    type IntoIter = std::vec::IntoIter<Step>;

    fn into_iter(self) -> Self::IntoIter {
        self.steps.into_iter()
    }
}
