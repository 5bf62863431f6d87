//! A scripted process: the state it shares with its handle and stdin, and the task that plays
//! its script.

use std::collections::{BTreeMap, VecDeque};
use std::ffi::OsString;
use std::fmt;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use agent_core::exec::{Child, ChildHandle, Command, ExecError, ExitStatus, KillCause, KillPolicy, Limits};
use async_trait::async_trait;
use tokio::io::{AsyncWrite, AsyncWriteExt, DuplexStream};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use super::EXPECTATION_FAILED_EXIT_CODE;
use super::script::{Rule, Script, Step};
use crate::limits::{LimitTarget, Stream, limit_output};
use crate::stop::{self, SIGKILL, Signal};

/// Bytes a scripted stdout or stderr holds before the script's next write waits for the test
/// to read, like a pipe buffer.
const PIPE_CAPACITY: usize = 64 * 1024;

/// What the handle, stdin, the streams and the player share about one run.
pub(super) struct RunShared {
    command: Command,
    env: BTreeMap<OsString, OsString>,
    state: Mutex<RunState>,
    /// Wakes the player: a stdin line, stdin closed, or a signal.
    events: Notify,
    /// Wakes the run task for SIGKILL.
    killed: Notify,
    status: watch::Sender<Option<ExitStatus>>,
}

#[derive(Default)]
struct RunState {
    stdin: Vec<u8>,
    /// Bytes after the last newline.
    partial: Vec<u8>,
    /// Complete lines the player has not taken yet.
    lines: VecDeque<String>,
    stdin_closed: bool,
    eof_taken: bool,
    /// Signals the player has not handled yet (never SIGKILL).
    signals: VecDeque<i32>,
    received: Vec<i32>,
    sigkill: bool,
    cause: Option<KillCause>,
    exited: bool,
    failures: Vec<String>,
}

/// Something the player must handle.
enum Event {
    Line(String),
    Eof,
    Signal(i32),
}

impl RunShared {
    pub(super) fn new(command: Command, env: BTreeMap<OsString, OsString>) -> Arc<Self> {
        Arc::new(RunShared {
            command,
            env,
            state: Mutex::default(),
            events: Notify::new(),
            killed: Notify::new(),
            status: watch::Sender::new(None),
        })
    }

    fn lock(&self) -> MutexGuard<'_, RunState> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(super) fn command(&self) -> &Command {
        &self.command
    }

    pub(super) fn env(&self) -> &BTreeMap<OsString, OsString> {
        &self.env
    }

    pub(super) fn stdin(&self) -> Vec<u8> {
        self.lock().stdin.clone()
    }

    pub(super) fn stdin_closed(&self) -> bool {
        self.lock().stdin_closed
    }

    pub(super) fn signals(&self) -> Vec<i32> {
        self.lock().received.clone()
    }

    pub(super) fn failures(&self) -> Vec<String> {
        self.lock().failures.clone()
    }

    pub(super) fn status(&self) -> Option<ExitStatus> {
        *self.status.borrow()
    }

    /// Waits for the status; `None` only if the sender is gone, which `self` prevents.
    pub(super) async fn wait(&self) -> Option<ExitStatus> {
        let mut status = self.status.subscribe();
        status.wait_for(Option::is_some).await.ok().and_then(|status| *status)
    }

    /// Sends a signal on behalf of the harness.
    fn signal(&self, signal: i32, cause: KillCause) {
        let mut state = self.lock();
        if state.exited || state.sigkill {
            return;
        }
        state.cause.get_or_insert(cause);
        state.received.push(signal);
        if signal == SIGKILL {
            state.sigkill = true;
            drop(state);
            self.killed.notify_one();
        } else {
            state.signals.push_back(signal);
            drop(state);
            self.events.notify_one();
        }
    }

    fn write_stdin(&self, bytes: &[u8]) -> io::Result<usize> {
        let mut state = self.lock();
        if state.exited || state.stdin_closed {
            return Err(io::Error::new(io::ErrorKind::BrokenPipe, ExecError::Exited));
        }
        state.stdin.extend_from_slice(bytes);
        state.partial.extend_from_slice(bytes);
        while let Some(end) = state.partial.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = state.partial.drain(..=end).collect();
            state.lines.push_back(String::from_utf8_lossy(&line[..end]).into_owned());
        }
        drop(state);
        self.events.notify_one();
        Ok(bytes.len())
    }

    /// Closes stdin; a trailing partial line is delivered as a line.
    fn close_stdin(&self) {
        let mut state = self.lock();
        if state.stdin_closed {
            return;
        }
        state.stdin_closed = true;
        if !state.partial.is_empty() {
            let rest = std::mem::take(&mut state.partial);
            state.lines.push_back(String::from_utf8_lossy(&rest).into_owned());
        }
        drop(state);
        self.events.notify_one();
    }

    fn take_event(&self) -> Option<Event> {
        let mut state = self.lock();
        if let Some(signal) = state.signals.pop_front() {
            return Some(Event::Signal(signal));
        }
        if let Some(line) = state.lines.pop_front() {
            return Some(Event::Line(line));
        }
        if state.stdin_closed && !state.eof_taken {
            state.eof_taken = true;
            return Some(Event::Eof);
        }
        None
    }

    /// The next event for the player. Cancel-safe: an event is taken only when returned.
    async fn next_event(&self) -> Event {
        loop {
            if let Some(event) = self.take_event() {
                return event;
            }
            self.events.notified().await;
        }
    }

    async fn sigkilled(&self) {
        while !self.lock().sigkill {
            self.killed.notified().await;
        }
    }

    fn fail(&self, failure: String) {
        tracing::error!(program = ?self.command.program, %failure, "scripted process expectation failed");
        self.lock().failures.push(failure);
    }

    fn finish(&self, status: ExitStatus) {
        let mut state = self.lock();
        state.exited = true;
        let mut status = status;
        status.killed_by = state.cause;
        drop(state);
        self.status.send_replace(Some(status));
    }
}

impl LimitTarget for RunShared {
    fn limit_exceeded(&self, cause: KillCause) {
        self.signal(SIGKILL, cause);
    }
}

/// Starts playing `script` and hands out the child.
pub(super) fn start(script: Script, run: Arc<RunShared>, limits: &Limits, policy: KillPolicy) -> Child {
    let (stdout_writer, stdout) = tokio::io::duplex(PIPE_CAPACITY);
    let (stderr_writer, stderr) = tokio::io::duplex(PIPE_CAPACITY);
    let player = Player {
        run: Arc::clone(&run),
        pending: script.steps.into_iter().map(Pending::Step).collect(),
        rules: script.rules,
        reactions: script.reactions,
        unanswered: VecDeque::new(),
        taken: None,
        eof: false,
        stdout: stdout_writer,
        stderr: stderr_writer,
    };
    tokio::spawn(run_process(player, Arc::clone(&run), limits.wall_clock));
    let stdout = limit_output(stdout, Stream::Stdout, limits, run.clone());
    let stderr = limit_output(stderr, Stream::Stderr, limits, run.clone());
    let stdin = Box::new(ScriptedStdin { run: Arc::clone(&run) });
    Child::new(Some(stdin), Some(stdout), Some(stderr), Arc::new(ScriptedHandle { run, policy }))
}

/// Plays the script until it ends, SIGKILL arrives or the wall clock runs out; the output
/// streams close before the status is published, as with a real process.
async fn run_process(mut player: Player, run: Arc<RunShared>, wall_clock: Option<Duration>) {
    let wall_clock = async {
        match wall_clock {
            Some(limit) => tokio::time::sleep(limit).await,
            None => std::future::pending().await,
        }
    };
    let status = tokio::select! {
        biased;
        () = run.sigkilled() => ExitStatus::signal(SIGKILL),
        () = wall_clock => {
            run.signal(SIGKILL, KillCause::WallClock);
            ExitStatus::signal(SIGKILL)
        }
        status = player.play() => status,
    };
    drop(player);
    run.finish(status);
}

/// A step in progress; sleeps remember their deadline when a rule interrupts them.
enum Pending {
    Step(Step),
    SleepUntil(Instant),
}

struct Player {
    run: Arc<RunShared>,
    pending: VecDeque<Pending>,
    rules: Vec<Rule>,
    reactions: Vec<(i32, Vec<Step>)>,
    /// Stdin lines no rule answered, for `ExpectLine` and `WaitLine`.
    unanswered: VecDeque<String>,
    /// The line the last `ExpectLine` or `WaitLine` took, for `Answer`.
    taken: Option<String>,
    eof: bool,
    stdout: DuplexStream,
    stderr: DuplexStream,
}

impl Player {
    async fn play(&mut self) -> ExitStatus {
        loop {
            let Some(next) = self.pending.pop_front() else {
                return ExitStatus::code(0);
            };
            let ended = match next {
                Pending::Step(step) => self.perform(step).await,
                Pending::SleepUntil(deadline) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(deadline) => None,
                        event = self.run.next_event() => {
                            self.pending.push_front(Pending::SleepUntil(deadline));
                            self.handle(event)
                        }
                    }
                }
            };
            if let Some(status) = ended {
                return status;
            }
        }
    }

    /// Performs one step; `Some` when the process ends.
    async fn perform(&mut self, step: Step) -> Option<ExitStatus> {
        match step {
            // A reader that went away is ignored, as by a CLI that ignores SIGPIPE.
            Step::Stdout(bytes) => {
                let _ = self.stdout.write_all(&bytes).await;
                None
            }
            Step::Stderr(bytes) => {
                let _ = self.stderr.write_all(&bytes).await;
                None
            }
            Step::Sleep(duration) => {
                self.pending.push_front(Pending::SleepUntil(Instant::now() + duration));
                None
            }
            Step::ExpectLine(matches) => match self.unanswered.pop_front() {
                Some(line) if matches.matches(&line) => {
                    self.taken = Some(line);
                    None
                }
                Some(line) => Some(self.fail(format!("expected {matches}, got {line:?}")).await),
                None => self.wait_for_input(Step::ExpectLine(matches)).await,
            },
            Step::WaitLine(matches) => {
                while let Some(line) = self.unanswered.pop_front() {
                    if matches.matches(&line) {
                        self.taken = Some(line);
                        return None;
                    }
                }
                self.wait_for_input(Step::WaitLine(matches)).await
            }
            Step::Answer(answer) => {
                let built = match &self.taken {
                    Some(line) => answer.build(line),
                    None => Err(format!("no line was taken before {answer:?}")),
                };
                match built {
                    Ok(steps) => {
                        self.run_first(steps);
                        None
                    }
                    Err(failure) => Some(self.fail(failure).await),
                }
            }
            Step::WaitEof => {
                self.unanswered.clear();
                if self.eof { None } else { self.wait_for_input(Step::WaitEof).await }
            }
            Step::Exit(code) => Some(ExitStatus::code(code)),
            Step::Die(signal) => Some(ExitStatus::signal(signal)),
            Step::Hang => {
                self.pending.push_front(Pending::Step(Step::Hang));
                let event = self.run.next_event().await;
                self.handle(event)
            }
        }
    }

    /// Puts a step that needs stdin back and handles the next event; a step still waiting at
    /// end of input fails.
    async fn wait_for_input(&mut self, step: Step) -> Option<ExitStatus> {
        if self.eof {
            return Some(self.fail(format!("stdin closed while waiting for {}", describe(&step))).await);
        }
        self.pending.push_front(Pending::Step(step));
        let event = self.run.next_event().await;
        self.handle(event)
    }

    fn handle(&mut self, event: Event) -> Option<ExitStatus> {
        match event {
            Event::Line(line) => {
                match self.rules.iter().find(|rule| rule.matches.matches(&line)) {
                    Some(rule) => self.run_first((rule.respond)(&line)),
                    None => self.unanswered.push_back(line),
                }
                None
            }
            Event::Eof => {
                self.eof = true;
                None
            }
            Event::Signal(signal) => match self.reactions.iter().find(|(s, _)| *s == signal) {
                Some((_, steps)) => {
                    self.run_first(steps.clone());
                    None
                }
                None => Some(ExitStatus::signal(signal)),
            },
        }
    }

    /// Schedules `steps` ahead of everything pending.
    fn run_first(&mut self, steps: Vec<Step>) {
        for step in steps.into_iter().rev() {
            self.pending.push_front(Pending::Step(step));
        }
    }

    async fn fail(&mut self, failure: String) -> ExitStatus {
        // Best effort: a full stderr must not block the failure.
        let message = format!("scripted process: {failure}\n");
        tokio::select! {
            biased;
            _ = self.stderr.write_all(message.as_bytes()) => {}
            () = std::future::ready(()) => {}
        }
        self.run.fail(failure);
        ExitStatus::code(EXPECTATION_FAILED_EXIT_CODE)
    }
}

fn describe(step: &Step) -> String {
    match step {
        Step::ExpectLine(matches) | Step::WaitLine(matches) => matches.to_string(),
        Step::WaitEof => "end of input".into(),
        other => format!("{other:?}"),
    }
}

/// The stdin of a scripted process: records writes and feeds lines to the player.
struct ScriptedStdin {
    run: Arc<RunShared>,
}

impl AsyncWrite for ScriptedStdin {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Poll::Ready(self.run.write_stdin(buf))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.run.close_stdin();
        Poll::Ready(Ok(()))
    }
}

impl Drop for ScriptedStdin {
    fn drop(&mut self) {
        self.run.close_stdin();
    }
}

/// The handle of a scripted process. Dropping it kills the process, as with a real one.
struct ScriptedHandle {
    run: Arc<RunShared>,
    policy: KillPolicy,
}

#[async_trait]
impl ChildHandle for ScriptedHandle {
    fn id(&self) -> Option<u32> {
        None
    }

    fn kill(&self) -> Result<(), ExecError> {
        self.run.signal(SIGKILL, KillCause::Requested);
        Ok(())
    }

    async fn terminate(&self) -> Result<ExitStatus, ExecError> {
        stop::escalate(self, self.policy).await
    }

    async fn wait(&self) -> Result<ExitStatus, ExecError> {
        self.run.wait().await.ok_or_else(|| ExecError::Backend("the scripted process vanished".into()))
    }

    fn try_status(&self) -> Option<ExitStatus> {
        self.run.status()
    }
}

impl Signal for ScriptedHandle {
    fn send_signal(&self, signal: i32) -> Result<(), ExecError> {
        self.run.signal(signal, KillCause::Requested);
        Ok(())
    }
}

impl Drop for ScriptedHandle {
    fn drop(&mut self) {
        self.run.signal(SIGKILL, KillCause::Requested);
    }
}

impl fmt::Debug for ScriptedHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScriptedHandle")
            .field("program", &self.run.command.program)
            .field("status", &self.run.status())
            .finish_non_exhaustive()
    }
}
