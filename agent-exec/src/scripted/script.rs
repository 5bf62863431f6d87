//! What a scripted process does: [`Script`], its [`Step`]s and [`LineMatch`]es.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Matches a line written to a scripted process's stdin (without its newline).
///
/// A `&str` or `String` converts to [`LineMatch::contains`].
#[derive(Clone)]
pub struct LineMatch {
    description: Arc<str>,
    test: Arc<dyn Fn(&str) -> bool + Send + Sync>,
}

impl LineMatch {
    /// Lines containing `needle`.
    pub fn contains(needle: impl Into<String>) -> Self {
        let needle = needle.into();
        LineMatch::predicate(format!("containing {needle:?}"), move |line| line.contains(needle.as_str()))
    }

    /// Lines equal to `expected`.
    pub fn exact(expected: impl Into<String>) -> Self {
        let expected = expected.into();
        LineMatch::predicate(format!("equal to {expected:?}"), move |line| line == expected)
    }

    /// Any line.
    pub fn any() -> Self {
        LineMatch::predicate("of any content", |_| true)
    }

    /// Lines for which `test` holds; `description` completes "a line ..." in failure messages.
    pub fn predicate(description: impl Into<String>, test: impl Fn(&str) -> bool + Send + Sync + 'static) -> Self {
        LineMatch { description: description.into().into(), test: Arc::new(test) }
    }

    /// Whether `line` matches.
    pub fn matches(&self, line: &str) -> bool {
        (self.test)(line)
    }
}

impl From<&str> for LineMatch {
    fn from(needle: &str) -> Self {
        LineMatch::contains(needle)
    }
}

impl From<String> for LineMatch {
    fn from(needle: String) -> Self {
        LineMatch::contains(needle)
    }
}

impl fmt::Display for LineMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a line {}", self.description)
    }
}

impl fmt::Debug for LineMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("LineMatch").field(&self.description).finish()
    }
}

/// One thing a scripted process does. Steps run in order; stdin lines that arrive meanwhile
/// are answered by the script's rules (see [`Script::on_line`]) or queued for the `ExpectLine`
/// and `WaitLine` steps.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Step {
    /// Writes bytes to stdout (waits while the pipe is full, like a real process).
    Stdout(Vec<u8>),
    /// Writes bytes to stderr.
    Stderr(Vec<u8>),
    /// Sleeps on tokio's clock; rules keep answering stdin meanwhile.
    Sleep(Duration),
    /// Takes the next stdin line; if it does not match, or stdin closes first, the run fails
    /// (see [`EXPECTATION_FAILED_EXIT_CODE`](super::EXPECTATION_FAILED_EXIT_CODE)).
    ExpectLine(LineMatch),
    /// Skips stdin lines until one matches; fails if stdin closes first.
    WaitLine(LineMatch),
    /// Waits until stdin is closed, discarding unanswered lines.
    WaitEof,
    /// Exits with a code.
    Exit(i32),
    /// Ends as if killed by a signal.
    Die(i32),
    /// Runs until a signal ends it.
    Hang,
}

impl Step {
    /// Writes `line` and a newline to stdout.
    pub fn stdout(line: impl Into<String>) -> Self {
        Step::Stdout(with_newline(line.into()))
    }

    /// Writes `line` and a newline to stderr.
    pub fn stderr(line: impl Into<String>) -> Self {
        Step::Stderr(with_newline(line.into()))
    }
}

fn with_newline(line: String) -> Vec<u8> {
    let mut bytes = line.into_bytes();
    bytes.push(b'\n');
    bytes
}

/// Answers a stdin line with steps.
pub(super) type Respond = Arc<dyn Fn(&str) -> Vec<Step> + Send + Sync>;

/// A rule: stdin lines matching `matches` are answered by `respond` instead of being queued.
#[derive(Clone)]
pub(super) struct Rule {
    pub(super) matches: LineMatch,
    pub(super) respond: Respond,
}

/// What a scripted process does, built step by step.
///
/// When the steps run out the process exits with code 0, unless the last step was `exit`,
/// `die` or `hang`. Signals end it with that signal (SIGKILL always, at once), unless the
/// script reacts to the signal with [`Script::on_signal`].
#[derive(Clone, Default)]
pub struct Script {
    pub(super) steps: Vec<Step>,
    pub(super) rules: Vec<Rule>,
    pub(super) reactions: Vec<(i32, Vec<Step>)>,
}

impl Script {
    /// An empty script: the process exits with code 0 at once.
    pub fn new() -> Self {
        Script::default()
    }

    /// Adds a step.
    pub fn step(mut self, step: Step) -> Self {
        self.steps.push(step);
        self
    }

    /// Writes `line` and a newline to stdout.
    pub fn stdout(self, line: impl Into<String>) -> Self {
        self.step(Step::stdout(line))
    }

    /// Writes raw bytes to stdout.
    pub fn stdout_bytes(self, bytes: impl Into<Vec<u8>>) -> Self {
        self.step(Step::Stdout(bytes.into()))
    }

    /// Writes `line` and a newline to stderr.
    pub fn stderr(self, line: impl Into<String>) -> Self {
        self.step(Step::stderr(line))
    }

    /// Sleeps on tokio's clock.
    pub fn sleep(self, duration: Duration) -> Self {
        self.step(Step::Sleep(duration))
    }

    /// Requires the next unanswered stdin line to match.
    pub fn expect_line(self, matches: impl Into<LineMatch>) -> Self {
        self.step(Step::ExpectLine(matches.into()))
    }

    /// Skips stdin lines until one matches.
    pub fn wait_line(self, matches: impl Into<LineMatch>) -> Self {
        self.step(Step::WaitLine(matches.into()))
    }

    /// Waits until stdin is closed.
    pub fn wait_eof(self) -> Self {
        self.step(Step::WaitEof)
    }

    /// Exits with `code`.
    pub fn exit(self, code: i32) -> Self {
        self.step(Step::Exit(code))
    }

    /// Ends as if killed by `signal` (a crash, say).
    pub fn die(self, signal: i32) -> Self {
        self.step(Step::Die(signal))
    }

    /// Runs until a signal ends it.
    pub fn hang(self) -> Self {
        self.step(Step::Hang)
    }

    /// Answers every stdin line that matches with the steps `respond` returns, run at once
    /// (between the script's own steps). The first matching rule wins; answered lines are not
    /// seen by `expect_line` or `wait_line`.
    pub fn on_line(
        mut self,
        matches: impl Into<LineMatch>,
        respond: impl Fn(&str) -> Vec<Step> + Send + Sync + 'static,
    ) -> Self {
        self.rules.push(Rule { matches: matches.into(), respond: Arc::new(respond) });
        self
    }

    /// Answers every stdin line that matches with `line` on stdout.
    pub fn reply(self, matches: impl Into<LineMatch>, line: impl Into<String>) -> Self {
        let line = line.into();
        self.on_line(matches, move |_| vec![Step::stdout(line.clone())])
    }

    /// Copies every stdin line to stdout, like `cat`.
    pub fn echo_lines(self) -> Self {
        self.on_line(LineMatch::any(), |line| vec![Step::stdout(line)])
    }

    /// On `signal` (not SIGKILL), runs `steps` instead of dying; without an `exit` among them
    /// the script carries on where it was.
    pub fn on_signal(mut self, signal: i32, steps: impl IntoIterator<Item = Step>) -> Self {
        self.reactions.push((signal, steps.into_iter().collect()));
        self
    }

    /// Ignores `signal` (not SIGKILL).
    pub fn ignore_signal(self, signal: i32) -> Self {
        self.on_signal(signal, [])
    }
}

impl fmt::Debug for Script {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Script")
            .field("steps", &self.steps)
            .field("rules", &self.rules.iter().map(|rule| &rule.matches).collect::<Vec<_>>())
            .field("reactions", &self.reactions)
            .finish()
    }
}
