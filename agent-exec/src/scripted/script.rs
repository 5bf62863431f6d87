//! What a scripted process does: [`Script`], its [`Step`]s, [`LineMatch`]es and [`Answer`]s.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::rpc;

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

    /// JSON-RPC requests of `method`: JSON object lines whose `method` is `method` and that have
    /// an `id` (so notifications do not match).
    pub fn request(method: impl Into<String>) -> Self {
        let method = method.into();
        LineMatch::predicate(format!("holding a {method:?} request"), move |line| rpc::is_request(line, &method))
    }

    /// JSON-RPC responses to the request with ID `id`: JSON object lines whose `id` is written
    /// as `id` is displayed (`0`, or `"a"` for a string ID, as `serde_json::Value` displays
    /// them) and that have no `method`.
    pub fn response(id: impl fmt::Display) -> Self {
        let id = id.to_string();
        LineMatch::predicate(format!("holding the response to request {id}"), move |line| rpc::is_response(line, &id))
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
    /// Runs the steps built from the line the last `ExpectLine` or `WaitLine` took; fails if
    /// none took a line yet, or the answer cannot be built from it.
    Answer(Answer),
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

/// Builds steps from a stdin line, or says why it cannot.
type Build = Arc<dyn Fn(&str) -> Result<Vec<Step>, String> + Send + Sync>;

/// Steps built from a stdin line that a script step took (see [`Step::Answer`]): made by
/// [`Script::answer`], [`Script::respond`] and [`Script::respond_error`].
#[derive(Clone)]
pub struct Answer {
    description: Arc<str>,
    build: Build,
}

impl Answer {
    /// Answers with the steps `build` returns for the line; `description` says what they are
    /// in failure messages.
    pub fn new(description: impl Into<String>, build: impl Fn(&str) -> Vec<Step> + Send + Sync + 'static) -> Self {
        Answer::fallible(description, move |line| Ok(build(line)))
    }

    fn fallible(
        description: impl Into<String>,
        build: impl Fn(&str) -> Result<Vec<Step>, String> + Send + Sync + 'static,
    ) -> Self {
        Answer { description: description.into().into(), build: Arc::new(build) }
    }

    /// The JSON-RPC response to the request on the line: its `id`, and `field` holding `value`.
    fn response(field: &'static str, value: impl fmt::Display) -> Self {
        let value = value.to_string();
        Answer::fallible(format!("{field} {value}"), move |line| {
            rpc::response(line, field, &value).map(|response| vec![Step::stdout(response)])
        })
    }

    /// The steps for `line`, or why there are none.
    pub(super) fn build(&self, line: &str) -> Result<Vec<Step>, String> {
        (self.build)(line)
    }
}

impl fmt::Debug for Answer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Answer").field(&self.description).finish()
    }
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

    /// Requires the next unanswered stdin line to be a JSON-RPC request of `method` (see
    /// [`LineMatch::request`]).
    pub fn expect_request(self, method: impl Into<String>) -> Self {
        self.expect_line(LineMatch::request(method))
    }

    /// Skips stdin lines until a JSON-RPC request of `method` arrives.
    pub fn wait_request(self, method: impl Into<String>) -> Self {
        self.wait_line(LineMatch::request(method))
    }

    /// Runs the steps `answer` returns for the line the last `expect_line` or `wait_line` took.
    /// The run fails if no line was taken before.
    pub fn answer(self, answer: impl Fn(&str) -> Vec<Step> + Send + Sync + 'static) -> Self {
        self.step(Step::Answer(Answer::new("an answer", answer)))
    }

    /// Answers the JSON-RPC request the last `expect_line` or `wait_line` took: writes
    /// `{"id":<its id>,"result":<result>}`, so the script never guesses which ID the client
    /// chose. `result` is JSON text (a `serde_json::Value` displays as such). The run fails if
    /// no line was taken before or the line has no `id`.
    pub fn respond(self, result: impl fmt::Display) -> Self {
        self.step(Step::Answer(Answer::response("result", result)))
    }

    /// Like [`Script::respond`], with an error: writes `{"id":<its id>,"error":<error>}`.
    pub fn respond_error(self, error: impl fmt::Display) -> Self {
        self.step(Step::Answer(Answer::response("error", error)))
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

    /// Answers every JSON-RPC request of `method` with `{"id":<its id>,"result":<result>}`, as
    /// a rule (see [`Script::on_line`]). `result` is JSON text.
    pub fn on_request(self, method: impl Into<String>, result: impl fmt::Display) -> Self {
        let answer = Answer::response("result", result);
        self.on_line(LineMatch::request(method), move |line| {
            answer.build(line).expect("a line matching a request has an id")
        })
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
