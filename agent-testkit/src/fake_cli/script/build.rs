//! [`FakeScript`]: a script as a value — read from its JSON Lines form, made from a model
//! scenario, or built step by step in Rust.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{
    AFTER_START_MS, ApprovalKind, EndStatus, EofAction, ExpectKind, FakeScriptError, FakeStep, InterruptMode,
    default_garbage,
};
use crate::jsonl;
use crate::scenario::{Scenario, Step};

/// A fake CLI script: the steps a `fake-codex`, `fake-claude` or `fake-pi` plays.
///
/// ```
/// use agent_testkit::fake_cli::FakeScript;
///
/// let script = FakeScript::new().handshake().turn_start().deltas(["Hel", "lo"]).complete();
/// assert_eq!(FakeScript::parse(&script.to_script()).unwrap(), script);
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FakeScript {
    steps: Vec<FakeStep>,
}

impl FakeScript {
    /// An empty script: the fake answers nothing and exits when stdin closes.
    pub fn new() -> Self {
        FakeScript::default()
    }

    /// Parses a JSON Lines script: one step object per line; blank lines and lines starting
    /// with `#` are skipped (and counted).
    pub fn parse(script: &str) -> Result<Self, FakeScriptError> {
        Ok(FakeScript { steps: jsonl::parse(script)? })
    }

    /// Reads and parses a script file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, FakeScriptError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|source| FakeScriptError::Read { path: path.to_path_buf(), source })?;
        FakeScript::parse(&text)
    }

    /// The script a fake CLI plays to behave like the real CLI talking to a fake model server
    /// that serves `scenario`: a handshake, then one turn per model answer that ends without a
    /// tool call.
    ///
    /// Mapping: `text` / `deltas` / `echo` / `quote_tool_result` stream their text (`echo` uses
    /// `${prompt}`, `quote_tool_result` `${tool_output}`) and complete the turn; `shell` and
    /// `tool_call` become command approvals, `write_file` / `edit_file` file-change approvals,
    /// `ask_user` a question; `stall` streams its text and waits for an interrupt;
    /// `http_error` and `disconnect` fail the turn.
    pub fn from_scenario(scenario: &Scenario) -> Self {
        let mut script = FakeScript::new().handshake();
        let mut in_turn = false;
        for step in scenario.steps() {
            if !in_turn {
                script = script.turn_start();
            }
            let (next, ends_turn) = script.scenario_step(step);
            script = next;
            in_turn = !ends_turn;
        }
        if in_turn { script.complete() } else { script }
    }

    /// Appends the fake CLI's rendering of one model answer; true when it ends the turn.
    fn scenario_step(self, step: &Step) -> (Self, bool) {
        let with_text = |script: FakeScript, text: &str| {
            if text.is_empty() { script } else { script.deltas([text]) }
        };
        match step {
            Step::Text { text } => (self.deltas([text.as_str()]).complete(), true),
            Step::Deltas { deltas, delay_ms } => {
                (self.step(FakeStep::Deltas { deltas: deltas.clone(), delay_ms: *delay_ms }).complete(), true)
            }
            Step::Echo { prefix } => (self.deltas([format!("{prefix}${{prompt}}")]).complete(), true),
            Step::QuoteToolResult { prefix } => (self.deltas([format!("{prefix}${{tool_output}}")]).complete(), true),
            Step::Shell { command } => (self.approval(command.as_str()), false),
            Step::ToolCall { name, arguments } => (self.approval(format!("{name} {arguments}")), false),
            Step::WriteFile { path, content } => (self.file_change(path.as_str(), content.as_str()), false),
            Step::EditFile { path, new, .. } => (self.file_change(path.as_str(), new.as_str()), false),
            Step::AskUser { question, options } => (self.question(question.as_str(), options.iter().cloned()), false),
            Step::Stall { text } => (with_text(self, text).stall(), true),
            Step::HttpError { status, message, .. } => (self.fail(format!("{status} {message}")), true),
            Step::Disconnect { text } => (with_text(self, text).fail("stream disconnected before completion"), true),
        }
    }

    /// The steps, in order.
    pub fn steps(&self) -> &[FakeStep] {
        &self.steps
    }

    /// The script form: one JSON object per line; [`FakeScript::parse`] reads it back.
    pub fn to_script(&self) -> String {
        self.steps.iter().map(|step| serde_json::to_string(step).unwrap_or_default() + "\n").collect()
    }

    /// Appends a step.
    pub fn step(mut self, step: FakeStep) -> Self {
        self.steps.push(step);
        self
    }

    /// Appends [`FakeStep::Handshake`].
    pub fn handshake(self) -> Self {
        self.step(FakeStep::Handshake {})
    }

    /// Appends [`FakeStep::TurnStart`].
    pub fn turn_start(self) -> Self {
        self.step(FakeStep::TurnStart { announce_after_ms: 0 })
    }

    /// Appends [`FakeStep::TurnStart`] announcing the turn (Codex `turn/started`) `ms`
    /// milliseconds after answering its start; interrupts in between are refused.
    pub fn turn_start_announced_after(self, ms: u64) -> Self {
        self.step(FakeStep::TurnStart { announce_after_ms: ms })
    }

    /// Appends [`FakeStep::Deltas`] without delay.
    pub fn deltas<I, S>(self, deltas: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.deltas_with_delay(deltas, 0)
    }

    /// Appends [`FakeStep::Deltas`] waiting `delay_ms` before each delta.
    pub fn deltas_with_delay<I, S>(self, deltas: I, delay_ms: u64) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.step(FakeStep::Deltas { deltas: deltas.into_iter().map(Into::into).collect(), delay_ms })
    }

    /// Appends a completed [`FakeStep::Complete`] whose text is what the turn streamed.
    pub fn complete(self) -> Self {
        self.step(FakeStep::Complete { status: EndStatus::Completed, text: None, message: None })
    }

    /// Appends a failed [`FakeStep::Complete`] with an error message.
    pub fn fail(self, message: impl Into<String>) -> Self {
        self.step(FakeStep::Complete { status: EndStatus::Failed, text: None, message: Some(message.into()) })
    }

    /// Appends an interrupted [`FakeStep::Complete`].
    pub fn interrupted(self) -> Self {
        self.step(FakeStep::Complete { status: EndStatus::Interrupted, text: None, message: None })
    }

    /// Appends a whole turn: [`FakeStep::TurnStart`], the text as one delta, and completion.
    pub fn turn(self, text: impl Into<String>) -> Self {
        self.turn_start().deltas([text.into()]).complete()
    }

    /// Appends a command [`FakeStep::Approval`] whose tool prints nothing.
    pub fn approval(self, command: impl Into<String>) -> Self {
        self.approval_with_output(command, "")
    }

    /// Appends a command [`FakeStep::Approval`] whose tool prints `output` when approved.
    pub fn approval_with_output(self, command: impl Into<String>, output: impl Into<String>) -> Self {
        self.step(FakeStep::Approval {
            kind: ApprovalKind::Command,
            command: Some(command.into()),
            path: None,
            content: String::new(),
            output: output.into(),
        })
    }

    /// Appends a file-change [`FakeStep::Approval`].
    pub fn file_change(self, path: impl Into<String>, content: impl Into<String>) -> Self {
        self.step(FakeStep::Approval {
            kind: ApprovalKind::FileChange,
            command: None,
            path: Some(path.into()),
            content: content.into(),
            output: String::new(),
        })
    }

    /// Appends [`FakeStep::Question`].
    pub fn question<I, S>(self, question: impl Into<String>, options: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.step(FakeStep::Question {
            question: question.into(),
            options: options.into_iter().map(Into::into).collect(),
            header: None,
        })
    }

    /// Appends [`FakeStep::Stall`].
    pub fn stall(self) -> Self {
        self.step(FakeStep::Stall {})
    }

    /// Appends [`FakeStep::Expect`] for a protocol message kind.
    pub fn expect(self, kind: ExpectKind) -> Self {
        self.step(FakeStep::Expect { kind: Some(kind), pattern: None })
    }

    /// Appends [`FakeStep::Expect`] for a JSON pattern.
    pub fn expect_match(self, pattern: Value) -> Self {
        self.step(FakeStep::Expect { kind: None, pattern: Some(pattern) })
    }

    /// Appends a successful [`FakeStep::Reply`].
    pub fn reply(self, result: Value) -> Self {
        self.step(FakeStep::Reply { result: Some(result), error: None })
    }

    /// Appends an error [`FakeStep::Reply`].
    pub fn reply_error(self, message: impl Into<String>) -> Self {
        self.step(FakeStep::Reply { result: None, error: Some(message.into()) })
    }

    /// Appends [`FakeStep::Send`].
    pub fn send(self, frame: Value) -> Self {
        self.step(FakeStep::Send { frame })
    }

    /// Appends an [`FakeStep::On`] rule that answers matching messages with `reply`.
    pub fn on(self, pattern: Value, reply: Value) -> Self {
        self.step(FakeStep::On { pattern, reply: Some(reply), error: None, frames: Vec::new(), times: None })
    }

    /// Appends [`FakeStep::Sleep`].
    pub fn sleep(self, ms: u64) -> Self {
        self.step(FakeStep::Sleep { ms })
    }

    /// Appends [`FakeStep::Exit`].
    pub fn exit(self, code: i32) -> Self {
        self.step(FakeStep::Exit { code })
    }

    /// Appends a pause of [`AFTER_START_MS`] and [`FakeStep::Exit`]: after a handshake, an
    /// exit that comes once the client has handed out the session. Without the pause the exit
    /// races the end of the client's start — a harness that sees the transport go down before
    /// its start is finished fails the start instead, by design — so a test of the session's
    /// reaction would assert one of two outcomes.
    pub fn exit_after_the_start(self, code: i32) -> Self {
        self.sleep(AFTER_START_MS).exit(code)
    }

    /// Appends [`FakeStep::Hang`].
    pub fn hang(self) -> Self {
        self.step(FakeStep::Hang {})
    }

    /// Appends [`FakeStep::Garbage`] with the default line.
    pub fn garbage(self) -> Self {
        self.step(FakeStep::Garbage { text: default_garbage() })
    }

    /// Appends [`FakeStep::HugeLine`].
    pub fn huge_line(self, bytes: usize) -> Self {
        self.step(FakeStep::HugeLine { bytes })
    }

    /// Appends [`FakeStep::Stderr`].
    pub fn stderr(self, text: impl Into<String>) -> Self {
        self.step(FakeStep::Stderr { text: text.into() })
    }

    /// Appends [`FakeStep::StderrFlood`].
    pub fn stderr_flood(self, bytes: usize) -> Self {
        self.step(FakeStep::StderrFlood { bytes })
    }

    /// Appends [`FakeStep::Duplicate`].
    pub fn duplicate(self, count: u32) -> Self {
        self.step(FakeStep::Duplicate { count })
    }

    /// Appends [`FakeStep::Hold`].
    pub fn hold(self) -> Self {
        self.step(FakeStep::Hold {})
    }

    /// Appends [`FakeStep::Release`], reversing the held frames.
    pub fn release_reversed(self) -> Self {
        self.step(FakeStep::Release { reverse: true })
    }

    /// Appends [`FakeStep::CloseStdin`].
    pub fn close_stdin(self) -> Self {
        self.step(FakeStep::CloseStdin {})
    }

    /// Appends [`FakeStep::CloseStdout`].
    pub fn close_stdout(self) -> Self {
        self.step(FakeStep::CloseStdout {})
    }

    /// Appends [`FakeStep::PauseReading`].
    pub fn pause_reading(self, ms: u64) -> Self {
        self.step(FakeStep::PauseReading { ms })
    }

    /// Appends [`FakeStep::OnStdinEof`]: exit with `code`.
    pub fn exit_on_stdin_eof(self, code: i32) -> Self {
        self.step(FakeStep::OnStdinEof { action: EofAction::Exit, code })
    }

    /// Appends [`FakeStep::OnStdinEof`]: keep running.
    pub fn ignore_stdin_eof(self) -> Self {
        self.step(FakeStep::OnStdinEof { action: EofAction::Ignore, code: 0 })
    }

    /// Appends [`FakeStep::Interrupts`].
    pub fn interrupts(self, mode: InterruptMode) -> Self {
        self.step(FakeStep::Interrupts { mode })
    }

    /// Appends [`FakeStep::StreamFile`] for a file that ends the turn.
    pub fn stream_file(self, path: impl Into<PathBuf>) -> Self {
        self.step(FakeStep::StreamFile { path: path.into(), ends_turn: true, lines_per_second: None })
    }

    /// Appends a paced, stamped [`FakeStep::StreamFile`] for a file that ends the turn.
    pub fn stream_file_paced(self, path: impl Into<PathBuf>, lines_per_second: u32) -> Self {
        self.step(FakeStep::StreamFile { path: path.into(), ends_turn: true, lines_per_second: Some(lines_per_second) })
    }
}

impl FromIterator<FakeStep> for FakeScript {
    fn from_iter<I: IntoIterator<Item = FakeStep>>(iter: I) -> Self {
        FakeScript { steps: iter.into_iter().collect() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scenario_becomes_turns() {
        let scenario = Scenario::new()
            .shell("touch x")
            .quote_tool_result("Tool said: ")
            .stall("thinking")
            .echo("You said: ")
            .ask_user("Color?", ["red"]);
        let script = FakeScript::from_scenario(&scenario);
        let expected = FakeScript::new()
            .handshake()
            .turn_start()
            .approval("touch x")
            .deltas(["Tool said: ${tool_output}"])
            .complete()
            .turn_start()
            .deltas(["thinking"])
            .stall()
            .turn_start()
            .deltas(["You said: ${prompt}"])
            .complete()
            .turn_start()
            .question("Color?", ["red"])
            .complete();
        assert_eq!(script, expected);
    }
}
