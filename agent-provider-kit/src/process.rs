//! The CLI process behind a provider's connection, and the small helpers around it.
//!
//! [`CliProcess`] owns what every connection holds of its process: the child handle, stdin
//! (written one whole line at a time), the task collecting the stderr tail and the flag that
//! says the harness is closing it. The provider's reader task keeps stdout, and the provider
//! keeps its protocol (correlation, normalizing); only the plumbing is here.
//!
//! ```
//! use agent_provider_kit::process::{encode_line, truncate_message};
//!
//! assert_eq!(encode_line(&serde_json::json!({"id": 1})), b"{\"id\":1}\n");
//! assert_eq!(truncate_message("é".repeat(3), 3), "é…");
//! ```

use std::borrow::Cow;
use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use agent_core::exec::{Child, ChildHandle, ChildOutput, ChildStdin};
use futures::task::AtomicWaker;
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncWriteExt, ReadBuf};
use tokio::sync::Notify;

use crate::framing::{STDERR_TAIL_LINES, StderrCollector};
use crate::rpc::ExitReport;
use crate::secrets::Secrets;

/// A running CLI: its handle, its stdin, the tail of its stderr and whether the harness is
/// closing it. Dropping it stops the stderr task and kills the process.
pub struct CliProcess {
    /// The CLI's name, for error texts (`codex`, `claude`, `pi`, a preset's ID).
    cli: Cow<'static, str>,
    child: Arc<dyn ChildHandle>,
    /// `None` once [`CliProcess::close`] closed it.
    stdin: tokio::sync::Mutex<Option<ChildStdin>>,
    stderr: StderrCollector,
    /// Redacted from stderr here, and from stdout by the reader ([`CliProcess::secrets`]).
    secrets: Secrets,
    closing: AtomicBool,
    /// The task that ends stdout after the exit (see [`EndsAfterExit`]).
    exit_watch: tokio::task::AbortHandle,
}

impl CliProcess {
    /// Takes over a spawned child: keeps its handle and stdin, starts collecting the last
    /// [`STDERR_TAIL_LINES`] lines of its stderr with `secrets` redacted (the session's, see
    /// [`Secrets::of_session`]), and returns its stdout for the reader task, whose line reader
    /// redacts the credentials among them (see [`CliProcess::secrets`]). `None` (the child
    /// killed) when one of the three pipes is missing. `cli` names the CLI in error texts.
    pub fn start(
        cli: impl Into<Cow<'static, str>>,
        child: Child,
        secrets: Secrets,
    ) -> Option<(CliProcess, ChildOutput)> {
        let (Some(stdin), Some(stdout), Some(stderr)) = (child.stdin, child.stdout, child.stderr) else {
            let _ = child.handle.kill();
            return None;
        };
        let (stdout, exit_watch) = EndsAfterExit::new(stdout, Arc::clone(&child.handle));
        let process = CliProcess {
            cli: cli.into(),
            child: child.handle,
            exit_watch,
            stdin: tokio::sync::Mutex::new(Some(stdin)),
            stderr: StderrCollector::spawn_redacting(stderr, STDERR_TAIL_LINES, secrets.clone()),
            secrets,
            closing: AtomicBool::new(false),
        };
        Some((process, Box::new(stdout)))
    }

    /// The CLI's name, as given to [`CliProcess::start`].
    pub fn cli(&self) -> &str {
        &self.cli
    }

    /// The secrets given to [`CliProcess::start`]: the stdout reader redacts their credentials
    /// ([`LineReader::redacting`]).
    ///
    /// [`LineReader::redacting`]: crate::framing::LineReader::redacting
    pub fn secrets(&self) -> &Secrets {
        &self.secrets
    }

    /// The OS process ID, where there is one.
    pub fn id(&self) -> Option<u32> {
        self.child.id()
    }

    /// Writes `line` (a whole line, its `\n` included: see [`encode_line`]) to stdin and flushes
    /// it. Lines from several callers never interleave. Fails with `BrokenPipe` ("`<cli>` stdin
    /// is closed") once [`CliProcess::close`] closed stdin.
    pub async fn write_line(&self, line: &[u8]) -> std::io::Result<()> {
        let mut stdin = self.stdin.lock().await;
        let Some(stdin) = stdin.as_mut() else {
            let message = format!("{} stdin is closed", self.cli);
            return Err(std::io::Error::new(std::io::ErrorKind::BrokenPipe, message));
        };
        stdin.write_all(line).await?;
        stdin.flush().await
    }

    /// Closes stdin (waiting up to `grace` for the close) and leaves the process running: for a
    /// CLI that reads its input to the end before it works or exits. Later writes fail like after
    /// [`CliProcess::close`]; the process is not marked closing.
    pub async fn close_stdin(&self, grace: Duration) {
        if let Some(mut stdin) = self.stdin.lock().await.take() {
            let _ = tokio::time::timeout(grace, stdin.shutdown()).await;
        }
    }

    /// True once [`CliProcess::close`] began: the end of stdout is then expected, not a failure.
    pub fn is_closing(&self) -> bool {
        self.closing.load(Ordering::SeqCst)
    }

    /// Ends the process gently: marks it closing, closes stdin (waiting up to `grace` for the
    /// close), waits up to `grace` for the exit, and when the process has not exited by then
    /// kills it and waits up to `grace` again.
    pub async fn close(&self, grace: Duration) {
        self.closing.store(true, Ordering::SeqCst);
        if let Some(mut stdin) = self.stdin.lock().await.take() {
            let _ = tokio::time::timeout(grace, stdin.shutdown()).await;
        }
        if tokio::time::timeout(grace, self.child.wait()).await.is_err() {
            let _ = self.child.kill();
            let _ = tokio::time::timeout(grace, self.child.wait()).await;
        }
    }

    /// How the process ended, once its stdout closed: waits up to `exit_wait` for the exit
    /// (killing the process then), and up to `stderr_drain` for the rest of its stderr. See
    /// [`ExitReport::collect`].
    pub async fn exit_report(&self, exit_wait: Duration, stderr_drain: Duration) -> ExitReport {
        ExitReport::collect(self.child.as_ref(), &self.stderr, exit_wait, stderr_drain).await
    }

    /// Stops the stderr task and kills the process (and everything it started) at once. A
    /// connection calls it when it is dropped, while its reader task may still hold the process.
    /// Stdout still ends [`STDOUT_AFTER_EXIT`] after the exit, for a reader that goes on to its
    /// end while a process that left the group holds it open.
    pub fn kill(&self) {
        self.stderr.abort();
        let _ = self.child.kill();
    }
}

impl Drop for CliProcess {
    fn drop(&mut self) {
        self.kill();
        self.exit_watch.abort();
    }
}

/// The longest argument Linux passes to a program (`MAX_ARG_STRLEN`, 32 pages, its NUL
/// included): a longer one fails the spawn with "argument list too long", whatever the total.
pub const MAX_ARGUMENT: usize = 128 * 1024 - 1;

/// How long a CLI's stdout is still read after the CLI exited, before it counts as closed.
pub const STDOUT_AFTER_EXIT: Duration = Duration::from_millis(500);

/// A CLI's stdout, which ends at the end of file or at the first read that finds the pipe empty
/// [`STDOUT_AFTER_EXIT`] or more after the CLI exited. The end of file alone is not enough: a process the CLI
/// started in a session or group of its own (`setsid`) escapes the group's kill and holds the
/// pipe open for as long as it runs, and the turn must end all the same. What the pipe still
/// holds is read first: a read that finds data never looks at the exit.
struct EndsAfterExit {
    inner: ChildOutput,
    exit: Arc<ExitSeen>,
}

/// Set by a watcher task [`STDOUT_AFTER_EXIT`] after the CLI's exit. A flag and a waker, so
/// that a read that waits costs a load and a waker registration, not a poll of the exit.
#[derive(Default)]
struct ExitSeen {
    passed: AtomicBool,
    reader: AtomicWaker,
}

impl ExitSeen {
    fn set(&self) {
        self.passed.store(true, Ordering::Release);
        self.reader.wake();
    }

    fn is_set(&self) -> bool {
        self.passed.load(Ordering::Acquire)
    }
}

impl EndsAfterExit {
    /// `inner`, and the task that watches `child` for it.
    fn new(inner: ChildOutput, child: Arc<dyn ChildHandle>) -> (Self, tokio::task::AbortHandle) {
        let exit = Arc::new(ExitSeen::default());
        let seen = Arc::clone(&exit);
        let watcher = tokio::spawn(async move {
            let _ = child.wait().await;
            tokio::time::sleep(STDOUT_AFTER_EXIT).await;
            seen.set();
        });
        (EndsAfterExit { inner, exit }, watcher.abort_handle())
    }
}

impl AsyncRead for EndsAfterExit {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Pending => {}
            ready => return ready,
        }
        if !this.exit.is_set() {
            this.exit.reader.register(cx.waker());
            if !this.exit.is_set() {
                return Poll::Pending;
            }
        }
        tracing::warn!(
            after_exit = ?STDOUT_AFTER_EXIT,
            "the CLI exited but its stdout is still open (held by a process it left behind); treating it as closed"
        );
        Poll::Ready(Ok(()))
    }
}

impl fmt::Debug for CliProcess {
    /// The CLI's name, its process ID and whether it is closing; never what it was sent.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CliProcess")
            .field("cli", &self.cli)
            .field("pid", &self.id())
            .field("closing", &self.is_closing())
            .finish_non_exhaustive()
    }
}

/// `message` as one line of JSON, `\n` included, for [`CliProcess::write_line`]. A message that
/// does not serialize (none of a provider's own types) becomes an empty line.
pub fn encode_line(message: &impl Serialize) -> Vec<u8> {
    let mut line = serde_json::to_vec(message).unwrap_or_default();
    line.push(b'\n');
    line
}

/// `message` cut to at most `max` bytes on a character boundary and marked with `…`, for an
/// error text from a CLI kept in an error (some list every method they know, several KB).
/// Shorter messages come back unchanged.
pub fn truncate_message(mut message: String, max: usize) -> String {
    if message.len() > max {
        let mut end = max;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
        message.push('…');
    }
    message
}

/// Returns once `done()` holds, checking it at once and again each time `notify` wakes its
/// waiters (`Notify::notify_waiters`), with no wake-up lost in between: for a caller waiting
/// until the reader task ends a turn or sees stdout close.
pub async fn wait_until(notify: &Notify, mut done: impl FnMut() -> bool) {
    loop {
        let notified = notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if done() {
            return;
        }
        notified.await;
    }
}

/// Spawns a CLI's stdout reader (the task that turns its lines into events). A reader that
/// panics would leave the running turn waiting for an end nobody reports: its panic is reported
/// as the transport's loss instead (the turn fails, the session becomes unavailable).
pub fn spawn_reader(
    cli: &str,
    sink: agent_core::provider::Sink,
    reader: impl std::future::Future<Output = ()> + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    use futures::FutureExt;
    let cli = cli.to_owned();
    tokio::spawn(async move {
        let Err(panic) = std::panic::AssertUnwindSafe(reader).catch_unwind().await else { return };
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".to_owned());
        tracing::error!(%cli, %what, "the CLI's output reader panicked");
        let reason = format!("{cli}'s output reader failed ({what}); the session cannot go on");
        let _ = sink.transport_down(reason).await;
    })
}

#[cfg(test)]
mod tests {

    /// A reader that panics is reported as the transport's loss, with what it said.
    #[tokio::test]
    async fn a_reader_that_panics_is_reported_as_the_transport_lost() {
        let (sink, mut sent) = agent_core::testing::sink();
        let reader = spawn_reader("mycli", sink, async { panic!("attempt to add with overflow") });
        reader.await.expect("the panic is caught");
        let reported = sent.drain();
        assert_eq!(reported.len(), 1, "{reported:?}");
        let text = format!("{:?}", reported[0]);
        assert!(text.contains("mycli's output reader failed (attempt to add with overflow)"), "{text}");
        let (sink, mut sent) = agent_core::testing::sink();
        spawn_reader("mycli", sink, async {}).await.unwrap();
        assert!(sent.drain().is_empty(), "a reader that ends reports nothing more");
    }
    use std::sync::atomic::AtomicUsize;

    use agent_core::exec::{Command, Exec, ExitStatus};
    use agent_exec::scripted::{LineMatch, Script, ScriptedExec};

    use super::*;

    async fn start(script: Script) -> (ScriptedExec, CliProcess, ChildOutput) {
        let exec = ScriptedExec::new();
        exec.script("cli", script);
        let child = exec.spawn(Command::new("cli")).await.expect("spawns");
        let (process, stdout) = CliProcess::start("cli", child, Secrets::default()).expect("all three pipes");
        (exec, process, stdout)
    }

    #[tokio::test(start_paused = true)]
    async fn lines_reach_stdin_until_close_which_lets_the_cli_exit() {
        let (exec, process, _stdout) =
            start(Script::new().expect_line(LineMatch::exact("one")).wait_eof().exit(0)).await;
        process.write_line(b"one\n").await.expect("written");
        assert!(!process.is_closing());
        process.close(Duration::from_secs(2)).await;
        assert!(process.is_closing());
        let run = exec.last_run().expect("a run");
        assert_eq!(run.stdin_lines(), ["one"]);
        assert!(run.stdin_closed());
        assert_eq!(run.status(), Some(ExitStatus::code(0)));
        assert!(run.signals().is_empty(), "{:?}", run.signals());

        let refused = process.write_line(b"two\n").await.expect_err("stdin is closed");
        assert_eq!(refused.kind(), std::io::ErrorKind::BrokenPipe);
        assert_eq!(refused.to_string(), "cli stdin is closed");
    }

    #[tokio::test(start_paused = true)]
    async fn close_stdin_leaves_the_cli_running_until_it_exits_by_itself() {
        let (exec, process, _stdout) =
            start(Script::new().expect_line(LineMatch::exact("prompt")).wait_eof().exit(0)).await;
        process.write_line(b"prompt\n").await.expect("written");
        process.close_stdin(Duration::from_secs(2)).await;
        assert!(!process.is_closing());
        let refused = process.write_line(b"more\n").await.expect_err("stdin is closed");
        assert_eq!(refused.kind(), std::io::ErrorKind::BrokenPipe);
        let report = process.exit_report(Duration::from_secs(2), Duration::from_millis(100)).await;
        assert_eq!(report.status, Some(ExitStatus::code(0)));
        let run = exec.last_run().expect("a run");
        assert!(run.stdin_closed());
        assert!(run.signals().is_empty(), "not killed: {:?}", run.signals());
    }

    #[tokio::test(start_paused = true)]
    async fn close_kills_a_cli_that_does_not_exit_within_the_grace() {
        let (exec, process, _stdout) = start(Script::new().hang()).await;
        let started = tokio::time::Instant::now();
        process.close(Duration::from_secs(2)).await;
        assert!(started.elapsed() >= Duration::from_secs(2));
        let run = exec.last_run().expect("a run");
        assert!(run.stdin_closed());
        assert!(!run.signals().is_empty(), "killed");
    }

    #[tokio::test(start_paused = true)]
    async fn the_exit_report_has_the_status_and_the_stderr_tail() {
        let (_exec, process, _stdout) = start(Script::new().stderr("cli: out of memory").exit(3)).await;
        let report = process.exit_report(Duration::from_secs(2), Duration::from_millis(500)).await;
        assert_eq!(report.status, Some(ExitStatus::code(3)));
        assert_eq!(report.stderr_tail.as_deref(), Some("cli: out of memory"));
    }

    #[tokio::test(start_paused = true)]
    async fn dropping_the_process_kills_it_and_debug_shows_no_input() {
        let (exec, process, _stdout) = start(Script::new().hang()).await;
        process.write_line(b"{\"secret\":\"sk-123\"}\n").await.expect("written");
        let debug = format!("{process:?}");
        assert!(debug.starts_with("CliProcess { cli: \"cli\", pid: "), "{debug}");
        assert!(debug.ends_with("closing: false, .. }"), "{debug}");
        assert!(!debug.contains("sk-123"), "{debug}");
        drop(process);
        let run = exec.last_run().expect("a run");
        assert!(!run.signals().is_empty(), "killed on drop");
    }

    #[tokio::test(start_paused = true)]
    async fn a_child_without_its_pipes_is_killed() {
        let exec = ScriptedExec::new();
        exec.script("cli", Script::new().hang());
        let mut child = exec.spawn(Command::new("cli")).await.expect("spawns");
        child.stdin = None;
        let handle = Arc::clone(&child.handle);
        assert!(CliProcess::start("cli", child, Secrets::default()).is_none());
        assert!(exec.last_run().is_some_and(|run| !run.signals().is_empty()), "killed: {handle:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn stdout_held_open_after_the_exit_ends_once_it_stays_empty() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};

        let (mut writer, reader) = tokio::io::duplex(64);
        let exit = Arc::new(ExitSeen::default());
        let mut stdout = EndsAfterExit { inner: Box::new(reader), exit: Arc::clone(&exit) };
        let mut buf = [0u8; 16];
        writer.write_all(b"one\n").await.unwrap();
        assert_eq!(stdout.read(&mut buf).await.unwrap(), 4);
        // Nothing to read and the CLI still runs: the read waits, and the exit wakes it.
        let waiting = tokio::spawn(async move {
            let mut buf = [0u8; 16];
            let first = stdout.read(&mut buf).await.unwrap();
            (stdout, first)
        });
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(!waiting.is_finished());
        exit.set();
        let (mut stdout, first) = waiting.await.unwrap();
        assert_eq!(first, 0, "the end of file, though the pipe is open");
        // Written before a read: still read; then the end of file again.
        writer.write_all(b"two\n").await.unwrap();
        assert_eq!(stdout.read(&mut buf).await.unwrap(), 4);
        assert_eq!(&buf[..4], b"two\n");
        assert_eq!(stdout.read(&mut buf).await.unwrap(), 0);
    }

    #[tokio::test]
    async fn a_process_that_escaped_the_group_does_not_keep_stdout_open() {
        use agent_exec::LocalExec;
        use tokio::io::AsyncReadExt;

        // The escaped `sleep` keeps stdout; its PID goes to stderr so the test can end it. The
        // shell waits until it left the group (else the group's kill at the exit ends it).
        let script = "setsid sleep 60 2>/dev/null & echo \"sleeper $!\" >&2; \
                      while [ \"$(cut -d' ' -f6 /proc/$!/stat)\" = \"$(cut -d' ' -f6 /proc/$$/stat)\" ]; do sleep 0.01; done; \
                      echo one; exit 3";
        let child = LocalExec::new().spawn(Command::new("sh").arg("-c").arg(script)).await.expect("spawns");
        let (process, mut stdout) = CliProcess::start("cli", child, Secrets::default()).expect("all three pipes");
        let started = std::time::Instant::now();
        let mut out = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(20), stdout.read_to_end(&mut out)).await;
        let report = process.exit_report(Duration::from_secs(2), Duration::from_millis(500)).await;
        let sleeper = report.stderr_tail.as_deref().and_then(|tail| tail.strip_prefix("sleeper "));
        let sleeper: u32 = sleeper.and_then(|pid| pid.trim().parse().ok()).expect("the sleeper's PID");
        // The process this test's shell started, by the PID it reported.
        let kill = Command::new("kill").arg("-9").arg(sleeper.to_string());
        let killed = LocalExec::new().spawn(kill).await.expect("kill runs").handle.wait().await;
        assert_eq!(killed.ok(), Some(ExitStatus::code(0)), "the sleeper was still there to end");
        read.expect("stdout ends though the sleeper holds it").expect("read");
        assert_eq!(out, b"one\n");
        let took = started.elapsed();
        assert!(took >= STDOUT_AFTER_EXIT && took < Duration::from_secs(20), "{took:?}");
        assert_eq!(report.status, Some(ExitStatus::code(3)));
    }

    /// A reader that goes on after [`CliProcess::kill`] (a cancelled turn reading to the end)
    /// is not held by a process that left the group.
    #[tokio::test]
    async fn a_killed_process_stdout_ends_though_an_escaped_one_holds_it() {
        use agent_exec::LocalExec;
        use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

        let script = "setsid sleep 60 2>/dev/null & \
                      while [ \"$(cut -d' ' -f6 /proc/$!/stat)\" = \"$(cut -d' ' -f6 /proc/$$/stat)\" ]; do sleep 0.01; done; \
                      echo \"sleeper $!\"; while true; do sleep 0.1; done";
        let child = LocalExec::new().spawn(Command::new("sh").arg("-c").arg(script)).await.expect("spawns");
        let (process, stdout) = CliProcess::start("cli", child, Secrets::default()).expect("all three pipes");
        let mut stdout = BufReader::new(stdout);
        let mut first = String::new();
        stdout.read_line(&mut first).await.expect("the sleeper's line");
        let sleeper: u32 = first.trim().strip_prefix("sleeper ").and_then(|pid| pid.parse().ok()).expect("its PID");
        process.kill();
        let mut rest = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(20), stdout.read_to_end(&mut rest)).await;
        // The process this test's shell started, by the PID it reported.
        let kill = Command::new("kill").arg("-9").arg(sleeper.to_string());
        let killed = LocalExec::new().spawn(kill).await.expect("kill runs").handle.wait().await;
        assert_eq!(killed.ok(), Some(ExitStatus::code(0)), "the sleeper was still there to end");
        read.expect("stdout ends after the kill though the sleeper holds it").expect("read");
        assert!(rest.is_empty(), "{rest:?}");
    }

    #[test]
    fn lines_are_json_with_a_newline() {
        assert_eq!(encode_line(&serde_json::json!({"a": "b"})), b"{\"a\":\"b\"}\n");
    }

    #[test]
    fn messages_are_cut_on_a_char_boundary() {
        assert_eq!(truncate_message("short".to_owned(), 500), "short");
        assert_eq!(truncate_message("abcdef".to_owned(), 6), "abcdef");
        assert_eq!(truncate_message("abcdef".to_owned(), 4), "abcd…");
        // `é` is two bytes: a cut inside it moves back to before it.
        assert_eq!(truncate_message("aé".to_owned(), 2), "a…");
    }

    #[tokio::test(start_paused = true)]
    async fn wait_until_returns_once_the_condition_holds_after_a_wake_up() {
        let notify = Arc::new(Notify::new());
        let checks = Arc::new(AtomicUsize::new(0));
        let waiter = tokio::spawn({
            let (notify, checks) = (Arc::clone(&notify), Arc::clone(&checks));
            async move { wait_until(&notify, || checks.fetch_add(1, Ordering::SeqCst) >= 2).await }
        });
        tokio::task::yield_now().await;
        assert_eq!(checks.load(Ordering::SeqCst), 1);
        notify.notify_waiters();
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        notify.notify_waiters();
        waiter.await.expect("returns");
        assert_eq!(checks.load(Ordering::SeqCst), 3);
        // Already true: no wake-up needed.
        wait_until(&notify, || true).await;
    }
}
