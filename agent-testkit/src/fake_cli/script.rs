//! Fake CLI scripts: the steps, their JSON Lines form and its checks; [`FakeScript`], the
//! parser and the Rust builder, is in `script/build.rs`.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::jsonl;

mod build;

pub use build::FakeScript;

/// Default size of a [`FakeStep::HugeLine`]: 10 MiB.
pub const DEFAULT_HUGE_LINE_BYTES: usize = 10 * 1024 * 1024;
/// Default size of a [`FakeStep::StderrFlood`]: 1 MiB.
pub const DEFAULT_STDERR_FLOOD_BYTES: usize = 1024 * 1024;
/// The placeholder a paced [`FakeStep::StreamFile`] replaces with the time a line is written.
pub const NOW_NS: &str = "${now_ns}";
/// Smallest [`FakeStep::HugeLine`]: the frame around the padding needs this much.
const MIN_HUGE_LINE_BYTES: usize = 64;

/// How a [`FakeStep::Complete`] ends the turn.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum EndStatus {
    /// A successful turn (Codex `completed`, Claude `result/success`, Pi `agent_end`).
    #[default]
    Completed,
    /// A failed turn: the CLI reports `message` as a model or API error.
    Failed,
    /// An interrupted turn, as if the user had interrupted it.
    Interrupted,
}

/// What a [`FakeStep::Approval`] asks to do.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ApprovalKind {
    /// Run the shell command `command` (Codex `commandExecution`, Claude `Bash`, Pi `bash`).
    #[default]
    Command,
    /// Write `content` to the file `path` (Codex `fileChange`, Claude `Write`, Pi `write`).
    FileChange,
}

/// Which client message a [`FakeStep::Expect`] waits for, in the fake's own protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ExpectKind {
    /// The opening request: Codex `initialize`, Claude `control_request/initialize`, Pi
    /// `get_state`.
    Handshake,
    /// The request that starts a turn: Codex `turn/start`, Claude a `user` message, Pi `prompt`.
    TurnStart,
    /// An interrupt: Codex `turn/interrupt`, Claude `control_request/interrupt`, Pi `abort`
    /// (only reaches the script with [`InterruptMode::Ignore`]).
    Interrupt,
    /// Any message.
    Any,
}

/// What the fake does when its stdin reaches end of file. The default is what the real CLI
/// does, with code 0: Codex and Pi exit at once, Claude finishes the running turn first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum EofAction {
    /// Exit with the given code at once.
    Exit,
    /// Play the running turn (and a turn already asked for) to its end, then exit with the code.
    FinishTurn,
    /// Keep running the script.
    Ignore,
}

/// How the fake answers the client's interrupts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum InterruptMode {
    /// Like the real CLI: acknowledge, end the active turn as interrupted and skip the script
    /// to the next `turn_start`. The default.
    #[default]
    Honor,
    /// Acknowledge, but keep playing the turn (it never ends unless the script ends it).
    AckOnly,
    /// Never answer; the interrupt is queued like any other message for `expect`.
    Ignore,
}

/// How long [`FakeScript::exit_after_the_start`] waits after the handshake: far longer than a
/// client takes to finish a start whose last reply it has read, even on a loaded machine.
pub const AFTER_START_MS: u64 = 300;

/// One step of a fake CLI script. Steps run in order; the fake reads stdin all the time.
///
/// Protocol steps ([`Handshake`](FakeStep::Handshake) to [`Stall`](FakeStep::Stall)) are
/// written once and rendered in each CLI's wire format. Text fields may use `${prompt}` (the
/// text of the turn's prompt), `${answer}` (the last question answer), `${decision}` (the last
/// approval decision: `approved`, `denied` or `cancelled`) and `${tool_output}` (what the last
/// tool returned to the model). Frames of [`Send`](FakeStep::Send) and [`On`](FakeStep::On)
/// may also use `${in.<path>}`: a field of the last expected (or the triggering) client message,
/// e.g. `${in.id}`; a string that is only a placeholder is replaced by the JSON value itself.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "snake_case", deny_unknown_fields)]
#[non_exhaustive]
pub enum FakeStep {
    /// Waits for the client's opening request(s) and answers them: Codex `initialize` then
    /// `thread/start` (or `thread/resume` / `thread/fork`), Claude `control_request/initialize`,
    /// Pi `get_state`. Afterwards the fake also answers the CLI's housekeeping requests.
    Handshake {},
    /// Waits for the client to start a turn and accepts it (Codex `turn/start` answered and
    /// `turn/started`, Claude `system/init`, Pi the `prompt` response and `agent_start`).
    TurnStart {
        /// Codex only: how long after answering `turn/start` the fake announces the turn
        /// (`turn/started`), in milliseconds. Until then it refuses `turn/interrupt` with "no
        /// active turn to interrupt", as codex does between the two.
        #[serde(default, skip_serializing_if = "is_zero")]
        announce_after_ms: u64,
    },
    /// Streams an assistant message, one delta per entry, `delay_ms` before each.
    Deltas {
        /// The text pieces.
        deltas: Vec<String>,
        /// Pause before each delta, in milliseconds.
        #[serde(default)]
        delay_ms: u64,
    },
    /// Ends the turn with its terminal frame (Codex `turn/completed`, Claude `result`, Pi
    /// `agent_end`).
    Complete {
        /// How the turn ends.
        #[serde(default)]
        status: EndStatus,
        /// The final text; default: the text streamed in this turn.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text: Option<String>,
        /// The error message of a failed turn.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// Asks the client to approve a tool call (Codex `requestApproval` server request, Claude
    /// `can_use_tool`, Pi `confirm` UI request) and waits for the answer. Approved: the tool
    /// completes with `output`; denied: it is declined and the turn goes on; cancelled (Codex
    /// `cancel`, Claude deny with `interrupt`): the turn ends interrupted.
    Approval {
        /// What is asked.
        #[serde(default)]
        kind: ApprovalKind,
        /// The command line (for `command`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        command: Option<String>,
        /// The file (for `file_change`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        path: Option<String>,
        /// The new file content (for `file_change`).
        #[serde(default, skip_serializing_if = "String::is_empty")]
        content: String,
        /// What the tool prints when approved.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        output: String,
    },
    /// Asks the user a multiple-choice question (Codex `item/tool/requestUserInput`, Claude
    /// `AskUserQuestion` through `can_use_tool`, Pi `select` UI request) and waits for the
    /// answer, which becomes `${answer}`.
    Question {
        /// The question.
        question: String,
        /// The choices.
        options: Vec<String>,
        /// A short header.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        header: Option<String>,
    },
    /// Keeps the turn open until the client interrupts it.
    Stall {},
    /// Waits for a client message, leaving it unanswered. Messages that do not match stay
    /// queued for later steps.
    Expect {
        /// A protocol message kind.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        kind: Option<ExpectKind>,
        /// Or: a JSON pattern the message must contain (objects match by subset).
        #[serde(default, rename = "match", skip_serializing_if = "Option::is_none")]
        pattern: Option<Value>,
    },
    /// Answers the message the last `expect` took, in the protocol's response format.
    Reply {
        /// The success payload (Codex `result`, Claude `response`, Pi `data`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        result: Option<Value>,
        /// Or: an error message.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// Writes one frame, as given (after placeholder substitution).
    Send {
        /// The JSON frame.
        frame: Value,
    },
    /// From now on, answers every client message that contains `match`: with `reply` or
    /// `error` in the protocol's response format, then the `frames`. At most `times` times.
    On {
        /// The JSON pattern.
        #[serde(rename = "match")]
        pattern: Value,
        /// Success payload of the response.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reply: Option<Value>,
        /// Or: error message of the response.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// Frames written after the response.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        frames: Vec<Value>,
        /// How many messages the rule answers; unlimited when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        times: Option<u32>,
    },
    /// Pauses the script.
    Sleep {
        /// Milliseconds.
        ms: u64,
    },
    /// Exits with `code` after writing what is already queued.
    Exit {
        /// The exit code.
        #[serde(default)]
        code: i32,
    },
    /// Stops answering anything (and ignores stdin EOF) but keeps running until killed.
    Hang {},
    /// Writes a line that is not JSON.
    Garbage {
        /// The line.
        #[serde(default = "default_garbage")]
        text: String,
    },
    /// Writes one valid JSON frame of exactly `bytes` bytes (plus the newline) that the protocol
    /// does not know.
    HugeLine {
        /// Line length.
        #[serde(default = "default_huge_line")]
        bytes: usize,
    },
    /// Writes `text` and a newline to stderr.
    Stderr {
        /// The text.
        text: String,
    },
    /// Writes `bytes` bytes of log lines to stderr as fast as the reader takes them.
    StderrFlood {
        /// How much.
        #[serde(default = "default_stderr_flood")]
        bytes: usize,
    },
    /// Writes the last frame again, `count` times.
    Duplicate {
        /// How many copies.
        #[serde(default = "one")]
        count: u32,
    },
    /// Holds back every frame written from now on until [`Release`](FakeStep::Release).
    Hold {},
    /// Writes the held frames, in reverse order by default (out-of-order frames).
    Release {
        /// Reverse the held frames.
        #[serde(default = "yes")]
        reverse: bool,
    },
    /// Closes the fake's stdin: the client's next writes fail (EPIPE).
    CloseStdin {},
    /// Closes the fake's stdout while it keeps running: the client sees end of file.
    CloseStdout {},
    /// Stops reading stdin for `ms` milliseconds, after the line being read, so the client's
    /// writes back up (a slow reader).
    PauseReading {
        /// Milliseconds.
        ms: u64,
    },
    /// Sets what happens on stdin EOF (default: what the real CLI does, with code 0).
    OnStdinEof {
        /// Exit or ignore.
        action: EofAction,
        /// The exit code for `exit`.
        #[serde(default)]
        code: i32,
    },
    /// Sets how interrupts are answered (default: honor).
    Interrupts {
        /// The mode.
        mode: InterruptMode,
    },
    /// Copies the file at `path` to stdout as it is, in large writes (after the frames queued
    /// before it), for throughput benchmarks: a prepared stream of the protocol's frames, e.g.
    /// from [`crate::streams`]. The bytes are not recorded in the transcript (a note gives the
    /// path and the size). A file that cannot be read makes the fake exit with code 1.
    ///
    /// With `lines_per_second`, it writes one line at a time instead, line `i` at `i /
    /// lines_per_second` seconds after the first, and replaces the first [`NOW_NS`] in each
    /// line with the time of its write (nanoseconds since the Unix epoch), for latency
    /// benchmarks.
    StreamFile {
        /// The file.
        path: PathBuf,
        /// The file holds the turn's terminal frame: once it is copied, the fake counts the
        /// turn as ended (the next step is usually `turn_start`). Default: true.
        #[serde(default = "yes")]
        ends_turn: bool,
        /// Paces and stamps the lines; unset: as fast as the reader takes them.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lines_per_second: Option<u32>,
    },
}

fn default_garbage() -> String {
    "this line is not JSON {".to_owned()
}

fn default_huge_line() -> usize {
    DEFAULT_HUGE_LINE_BYTES
}

fn default_stderr_flood() -> usize {
    DEFAULT_STDERR_FLOOD_BYTES
}

fn one() -> u32 {
    1
}

fn yes() -> bool {
    true
}

impl FakeStep {
    /// Every step name a script may use.
    pub const NAMES: &'static [&'static str] = &[
        "handshake",
        "turn_start",
        "deltas",
        "complete",
        "approval",
        "question",
        "stall",
        "expect",
        "reply",
        "send",
        "on",
        "sleep",
        "exit",
        "hang",
        "garbage",
        "huge_line",
        "stderr",
        "stderr_flood",
        "duplicate",
        "hold",
        "release",
        "close_stdin",
        "close_stdout",
        "pause_reading",
        "on_stdin_eof",
        "interrupts",
        "stream_file",
    ];

    /// The step's name as written in scripts.
    pub fn name(&self) -> &'static str {
        match self {
            FakeStep::Handshake {} => "handshake",
            FakeStep::TurnStart { .. } => "turn_start",
            FakeStep::Deltas { .. } => "deltas",
            FakeStep::Complete { .. } => "complete",
            FakeStep::Approval { .. } => "approval",
            FakeStep::Question { .. } => "question",
            FakeStep::Stall {} => "stall",
            FakeStep::Expect { .. } => "expect",
            FakeStep::Reply { .. } => "reply",
            FakeStep::Send { .. } => "send",
            FakeStep::On { .. } => "on",
            FakeStep::Sleep { .. } => "sleep",
            FakeStep::Exit { .. } => "exit",
            FakeStep::Hang {} => "hang",
            FakeStep::Garbage { .. } => "garbage",
            FakeStep::HugeLine { .. } => "huge_line",
            FakeStep::Stderr { .. } => "stderr",
            FakeStep::StderrFlood { .. } => "stderr_flood",
            FakeStep::Duplicate { .. } => "duplicate",
            FakeStep::Hold {} => "hold",
            FakeStep::Release { .. } => "release",
            FakeStep::CloseStdin {} => "close_stdin",
            FakeStep::CloseStdout {} => "close_stdout",
            FakeStep::PauseReading { .. } => "pause_reading",
            FakeStep::OnStdinEof { .. } => "on_stdin_eof",
            FakeStep::Interrupts { .. } => "interrupts",
            FakeStep::StreamFile { .. } => "stream_file",
        }
    }

    /// Checks what serde cannot: required combinations and value ranges.
    fn check(&self) -> Result<(), String> {
        match self {
            FakeStep::Approval { kind: ApprovalKind::Command, command: None, .. } => {
                Err("a command approval needs `command`".to_owned())
            }
            FakeStep::Approval { kind: ApprovalKind::FileChange, path: None, .. } => {
                Err("a file_change approval needs `path`".to_owned())
            }
            FakeStep::Question { options, .. } if options.is_empty() => Err("options must not be empty".to_owned()),
            FakeStep::Expect { kind, pattern } if kind.is_some() == pattern.is_some() => {
                Err("give exactly one of `kind` and `match`".to_owned())
            }
            FakeStep::Reply { result: Some(_), error: Some(_) } => Err("give `result` or `error`, not both".to_owned()),
            FakeStep::On { reply: Some(_), error: Some(_), .. } => Err("give `reply` or `error`, not both".to_owned()),
            FakeStep::On { reply: None, error: None, frames, .. } if frames.is_empty() => {
                Err("give at least one of `reply`, `error` and `frames`".to_owned())
            }
            FakeStep::On { times: Some(0), .. } => Err("times must be at least 1".to_owned()),
            FakeStep::HugeLine { bytes } if *bytes < MIN_HUGE_LINE_BYTES => {
                Err(format!("bytes must be at least {MIN_HUGE_LINE_BYTES}, found {bytes}"))
            }
            FakeStep::Duplicate { count: 0 } => Err("count must be at least 1".to_owned()),
            FakeStep::Garbage { text } if text.contains('\n') => Err("text must be one line".to_owned()),
            FakeStep::StreamFile { lines_per_second: Some(0), .. } => {
                Err("lines_per_second must be at least 1".to_owned())
            }
            FakeStep::StreamFile { path, .. } if path.as_os_str().is_empty() => {
                Err("path must not be empty".to_owned())
            }
            _ => Ok(()),
        }
    }
}

/// Why a fake CLI script was rejected. Every variant about the script's content names its
/// 1-based line.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FakeScriptError {
    /// The script file could not be read.
    #[error("cannot read script {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A line is not valid JSON.
    #[error("script line {line}: not valid JSON: {source}")]
    Json {
        /// 1-based line number.
        line: usize,
        /// The JSON error.
        source: serde_json::Error,
    },
    /// A line names a step that does not exist.
    #[error("script line {line}: unknown step {step:?}; known steps: {}", FakeStep::NAMES.join(", "))]
    UnknownStep {
        /// 1-based line number.
        line: usize,
        /// The name found.
        step: String,
    },
    /// A line is JSON but not a valid step (no `"step"`, missing or unknown fields, bad values).
    #[error("script line {line}: {message}")]
    InvalidStep {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
}

impl FakeScriptError {
    /// The 1-based script line the error is about, if it is about a line.
    pub fn line(&self) -> Option<usize> {
        match self {
            FakeScriptError::Read { .. } => None,
            FakeScriptError::Json { line, .. }
            | FakeScriptError::UnknownStep { line, .. }
            | FakeScriptError::InvalidStep { line, .. } => Some(*line),
        }
    }
}

impl From<jsonl::LineError> for FakeScriptError {
    fn from(error: jsonl::LineError) -> Self {
        match error {
            jsonl::LineError::Json { line, source } => FakeScriptError::Json { line, source },
            jsonl::LineError::UnknownStep { line, step } => FakeScriptError::UnknownStep { line, step },
            jsonl::LineError::InvalidStep { line, message } => FakeScriptError::InvalidStep { line, message },
        }
    }
}

impl jsonl::ScriptStep for FakeStep {
    const NAMES: &'static [&'static str] = FakeStep::NAMES;

    fn check(&self) -> Result<(), String> {
        FakeStep::check(self)
    }
}

/// Whether a millisecond count is zero (left out of a serialized script).
#[allow(clippy::trivially_copy_pass_by_ref)] // serde's `skip_serializing_if` passes a reference
fn is_zero(ms: &u64) -> bool {
    *ms == 0
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[track_caller]
    fn check_error(script: &str, line: usize, contains: &str) {
        let err = FakeScript::parse(script).unwrap_err();
        assert_eq!(err.line(), Some(line), "{err}");
        let message = err.to_string();
        assert!(message.starts_with(&format!("script line {line}: ")), "{message}");
        assert!(message.contains(contains), "{message:?} does not contain {contains:?}");
    }

    #[test]
    fn every_step_parses_back_from_its_script_form() {
        let script = FakeScript::new()
            .handshake()
            .turn_start()
            .deltas_with_delay(["a", "b"], 5)
            .complete()
            .approval_with_output("touch x", "done")
            .file_change("x.txt", "hi\n")
            .question("Color?", ["red", "blue"])
            .stall()
            .expect(ExpectKind::Interrupt)
            .expect_match(json!({"method": "turn/start"}))
            .reply(json!({}))
            .reply_error("no")
            .send(json!({"method": "x", "params": {"id": "${in.id}"}}))
            .on(json!({"type": "get_state"}), json!({"ok": true}))
            .sleep(10)
            .exit(3)
            .hang()
            .garbage()
            .huge_line(1000)
            .stderr("oops")
            .stderr_flood(2048)
            .duplicate(2)
            .hold()
            .release_reversed()
            .close_stdin()
            .close_stdout()
            .pause_reading(100)
            .exit_on_stdin_eof(4)
            .interrupts(InterruptMode::AckOnly)
            .stream_file("/tmp/stream.jsonl")
            .stream_file_paced("/tmp/stream.jsonl", 100);
        let names: Vec<&str> = script.steps().iter().map(FakeStep::name).collect();
        for name in FakeStep::NAMES {
            assert!(names.contains(name), "no builder test for {name}");
        }
        assert_eq!(FakeScript::parse(&script.to_script()).unwrap(), script);
    }

    #[test]
    fn defaults_fill_optional_fields() {
        let script = FakeScript::parse(
            "{\"step\":\"huge_line\"}\n{\"step\":\"complete\"}\n{\"step\":\"release\"}\n{\"step\":\"exit\"}",
        )
        .unwrap();
        assert_eq!(
            script.steps(),
            [
                FakeStep::HugeLine { bytes: DEFAULT_HUGE_LINE_BYTES },
                FakeStep::Complete { status: EndStatus::Completed, text: None, message: None },
                FakeStep::Release { reverse: true },
                FakeStep::Exit { code: 0 },
            ]
        );
    }

    #[test]
    fn stream_file_takes_a_path_and_ends_the_turn_by_default() {
        let script = FakeScript::parse(
            "{\"step\":\"stream_file\",\"path\":\"target/bench/codex_app.jsonl\"}\n\
             {\"step\":\"stream_file\",\"path\":\"/tmp/part.jsonl\",\"ends_turn\":false}\n\
             {\"step\":\"stream_file\",\"path\":\"/tmp/paced.jsonl\",\"lines_per_second\":10000}",
        )
        .unwrap();
        assert_eq!(
            script.steps(),
            [
                FakeStep::StreamFile {
                    path: PathBuf::from("target/bench/codex_app.jsonl"),
                    ends_turn: true,
                    lines_per_second: None
                },
                FakeStep::StreamFile {
                    path: PathBuf::from("/tmp/part.jsonl"),
                    ends_turn: false,
                    lines_per_second: None
                },
                FakeStep::StreamFile {
                    path: PathBuf::from("/tmp/paced.jsonl"),
                    ends_turn: true,
                    lines_per_second: Some(10_000)
                },
            ]
        );
        assert_eq!(script.steps()[0].name(), "stream_file");
        check_error("{\"step\":\"stream_file\"}", 1, "missing field `path`");
        check_error("{\"step\":\"stream_file\",\"path\":\"\"}", 1, "path must not be empty");
        check_error("{\"step\":\"stream_file\",\"path\":\"x\",\"lines_per_second\":0}", 1, "at least 1");
    }

    #[test]
    fn comments_and_blank_lines_are_skipped_but_counted() {
        check_error("# a turn\n\n{\"step\":\"handshake\"}\n{oops", 4, "not valid JSON");
    }

    #[test]
    fn unknown_steps_name_the_line_and_the_known_steps() {
        check_error(
            "{\"step\":\"handshake\"}\n{\"step\":\"moonwalk\"}",
            2,
            "unknown step \"moonwalk\"; known steps: handshake",
        );
    }

    #[test]
    fn invalid_steps_name_the_line() {
        check_error("[1]", 1, "expected a JSON object");
        check_error("{\"ms\": 3}", 1, "missing \"step\" field");
        check_error("{\"step\": 3}", 1, "\"step\" must be a string");
        check_error("{\"step\":\"sleep\"}", 1, "missing field `ms`");
        check_error("{\"step\":\"handshake\",\"colour\":1}", 1, "unknown field `colour`");
        check_error("{\"step\":\"approval\"}", 1, "needs `command`");
        check_error("{\"step\":\"approval\",\"kind\":\"file_change\"}", 1, "needs `path`");
        check_error("{\"step\":\"question\",\"question\":\"q\",\"options\":[]}", 1, "options must not be empty");
        check_error("{\"step\":\"expect\"}", 1, "exactly one of `kind` and `match`");
        check_error("{\"step\":\"expect\",\"kind\":\"nope\"}", 1, "unknown variant `nope`");
        check_error("{\"step\":\"reply\",\"result\":{},\"error\":\"e\"}", 1, "not both");
        check_error("{\"step\":\"on\",\"match\":{}}", 1, "at least one of");
        check_error("{\"step\":\"huge_line\",\"bytes\":10}", 1, "at least 64");
        check_error("{\"step\":\"duplicate\",\"count\":0}", 1, "at least 1");
    }

    #[test]
    fn unreadable_file_is_a_read_error() {
        let err = FakeScript::from_file("/nonexistent/script.jsonl").unwrap_err();
        assert!(matches!(err, FakeScriptError::Read { .. }));
        assert_eq!(err.line(), None);
    }
}
