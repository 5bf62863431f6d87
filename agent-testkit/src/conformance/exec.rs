//! The exec conformance suite.
//!
//! The checks speak in terms of a few programs every Linux has, and each group says which it
//! needs:
//!
//! - [`run_portable`] needs programs that *behave like* `cat` (copies stdin lines to stdout
//!   until stdin closes, then exits 0), `true` (exits 0), `echo` (prints its arguments joined by
//!   spaces and a newline) and `sleep N` (runs N seconds, dying of SIGINT, SIGTERM or SIGKILL).
//!   A real exec runs the real programs; an in-memory exec passes by scripting look-alikes.
//! - [`run_posix`] needs a real `/bin/sh` with `printf`, `pwd`, `kill` and `sleep`, and a real
//!   filesystem (working directories, `PATH` look-ups).
//!
//! Every check panics with a message naming the broken rule, and fails rather than hangs: each
//! one is bounded by [`CHECK_TIMEOUT`] on tokio's clock.

use std::ffi::OsString;
use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use agent_core::exec::{
    ChildOutput, Command, ExecError, ExitStatus, KillCause, KillPolicy, Limits, OWNER_MARKER_ENV, ProgramProblem,
    SESSION_MARKER_ENV,
};
use agent_core::{DynExec, SessionId};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The longest any one check may take before it fails as hung.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(10);

/// A kill policy with short graces, so escalation checks stay fast.
pub fn quick_kill_policy() -> KillPolicy {
    let mut policy = KillPolicy::default();
    policy.interrupt_grace = Duration::from_millis(50);
    policy.terminate_grace = Duration::from_millis(50);
    policy
}

/// Runs every check: the portable ones and the ones that need a real `/bin/sh`.
pub async fn run_all(exec: DynExec) {
    run_portable(exec.clone()).await;
    run_posix(exec).await;
}

/// Runs the checks that need only `cat`, `true`, `echo` and `sleep` look-alikes.
pub async fn run_portable(exec: DynExec) {
    cat_round_trip(&exec).await;
    arguments_are_not_shell_expanded(&exec).await;
    exit_status_is_reported_once(&exec).await;
    kill_is_idempotent(&exec).await;
    terminate_stops_the_process(&exec).await;
    write_after_exit_fails(&exec).await;
    invalid_commands_are_rejected(&exec).await;
    missing_programs_are_rejected(&exec).await;
    wall_clock_limit_kills(&exec).await;
    line_limit_kills(&exec).await;
    stdout_limit_kills(&exec).await;
}

/// Runs the checks that need a real `/bin/sh` and filesystem.
pub async fn run_posix(exec: DynExec) {
    environment_follows_the_spec(&exec).await;
    session_and_owner_are_stamped(&exec).await;
    cwd_is_applied(&exec).await;
    stderr_is_separate(&exec).await;
    exit_codes_and_signals_are_reported(&exec).await;
    stderr_limit_kills(&exec).await;
    program_is_found_on_the_child_path(&exec).await;
    filesystem_problems_are_rejected(&exec).await;
    rejected_commands_spawn_nothing(&exec).await;
}

/// Bounds `check` by [`CHECK_TIMEOUT`].
async fn within<T>(name: &str, check: impl Future<Output = T>) -> T {
    match tokio::time::timeout(CHECK_TIMEOUT, check).await {
        Ok(value) => value,
        Err(_) => panic!("exec conformance: `{name}` did not finish within {CHECK_TIMEOUT:?}"),
    }
}

/// Reads a stream to its end or first error.
async fn read_to_end(stream: &mut ChildOutput) -> (Vec<u8>, Option<io::Error>) {
    let mut bytes = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) => return (bytes, None),
            Ok(n) => bytes.extend_from_slice(&buf[..n]),
            Err(error) => return (bytes, Some(error)),
        }
    }
}

/// What a finished process printed and how it ended.
struct Output {
    stdout: String,
    stderr: String,
    status: ExitStatus,
}

/// Runs `command` with stdin closed and collects both streams and the status.
async fn output(exec: &DynExec, command: Command) -> Output {
    let program = command.program.clone();
    let mut child = exec.spawn(command).await.unwrap_or_else(|error| panic!("spawning {program:?}: {error}"));
    drop(child.stdin.take());
    let mut stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let ((out, out_error), (err, err_error)) = tokio::join!(read_to_end(&mut stdout), read_to_end(&mut stderr));
    assert!(out_error.is_none() && err_error.is_none(), "reading {program:?}: {out_error:?} {err_error:?}");
    let status = child.handle.wait().await.expect("wait");
    Output { stdout: String::from_utf8_lossy(&out).into(), stderr: String::from_utf8_lossy(&err).into(), status }
}

fn limits(build: impl FnOnce(&mut Limits)) -> Limits {
    let mut limits = Limits::default();
    build(&mut limits);
    limits
}

/// Tells whether an error is the expected one.
type ErrorCheck = fn(&ExecError) -> bool;

#[track_caller]
fn assert_rejected(
    result: Result<agent_core::exec::Child, ExecError>,
    expected: impl Fn(&ExecError) -> bool,
    what: &str,
) {
    match result {
        Err(error) if expected(&error) => {}
        Err(error) => panic!("exec conformance: {what}: wrong error {error:?}"),
        Ok(child) => panic!("exec conformance: {what}: spawned {child:?} instead of failing"),
    }
}

/// `cat` gets stdin and gives it back on stdout; shutting stdin down ends it with code 0, and
/// later writes fail.
pub async fn cat_round_trip(exec: &DynExec) {
    within("cat_round_trip", async {
        let mut child = exec.spawn(Command::new("cat")).await.expect("spawn cat");
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(b"hello\nworld\n").await.expect("write to cat");
        stdin.shutdown().await.expect("shutting stdin down closes it");
        assert!(stdin.write_all(b"closed\n").await.is_err(), "writing after shutdown must fail");
        let (out, error) = read_to_end(child.stdout.as_mut().expect("stdout")).await;
        assert!(error.is_none(), "reading cat: {error:?}");
        assert_eq!(String::from_utf8_lossy(&out), "hello\nworld\n", "cat must echo stdin");
        let status = child.handle.wait().await.expect("wait");
        assert!(status.success() && status.killed_by.is_none(), "cat must exit 0 at EOF, got {status}");
    })
    .await;
}

/// Arguments reach the program as given: no shell expands or splits them.
pub async fn arguments_are_not_shell_expanded(exec: &DynExec) {
    within("arguments_are_not_shell_expanded", async {
        let out = output(exec, Command::new("echo").args(["$HOME", "*", "a  b", "'q'"])).await;
        assert_eq!(out.stdout, "$HOME * a  b 'q'\n", "arguments must not go through a shell");
        assert_eq!(out.stderr, "");
        assert!(out.status.success(), "echo must exit 0, got {}", out.status);
    })
    .await;
}

/// The exit status is reaped once: concurrent and repeated waits and `try_status` agree.
pub async fn exit_status_is_reported_once(exec: &DynExec) {
    within("exit_status_is_reported_once", async {
        let child = exec.spawn(Command::new("true")).await.expect("spawn true");
        let handle = child.handle.clone();
        let (a, b, c) = tokio::join!(handle.wait(), handle.wait(), child.handle.wait());
        let status = a.expect("wait");
        assert_eq!(b.expect("wait"), status, "every wait must report the same status");
        assert_eq!(c.expect("wait"), status, "every wait must report the same status");
        assert!(status.success(), "true must exit 0, got {status}");
        assert_eq!(handle.wait().await.expect("wait again"), status, "a later wait must report it again");
        assert_eq!(handle.try_status(), Some(status), "try_status must report it after the exit");
    })
    .await;
}

/// `kill` ends a running process, can be repeated, and is `Ok` after the exit.
pub async fn kill_is_idempotent(exec: &DynExec) {
    within("kill_is_idempotent", async {
        let child = exec.spawn(Command::new("sleep").arg("30")).await.expect("spawn sleep");
        assert_eq!(child.handle.try_status(), None, "a sleeping process has no status yet");
        child.handle.kill().expect("first kill");
        child.handle.kill().expect("second kill");
        let status = child.handle.wait().await.expect("wait");
        assert!(!status.success(), "a killed process must not report success: {status}");
        assert_eq!(status.killed_by, Some(KillCause::Requested), "a kill must show as requested: {status}");
        child.handle.kill().expect("kill after the exit");
        assert_eq!(child.handle.wait().await.expect("wait again"), status);
    })
    .await;
}

/// `terminate` stops a process that obeys SIGINT and reports the requested stop.
pub async fn terminate_stops_the_process(exec: &DynExec) {
    within("terminate_stops_the_process", async {
        let command = Command::new("sleep").arg("30").kill_policy(quick_kill_policy());
        let child = exec.spawn(command).await.expect("spawn sleep");
        let status = child.handle.terminate().await.expect("terminate");
        assert!(!status.success(), "a terminated process must not report success: {status}");
        assert_eq!(status.killed_by, Some(KillCause::Requested), "terminate must show as requested: {status}");
        assert_eq!(child.handle.try_status(), Some(status));
        assert_eq!(child.handle.terminate().await.expect("terminate again"), status, "terminate is idempotent");
    })
    .await;
}

/// Writing to the stdin of a process that has exited is an error, not a panic.
pub async fn write_after_exit_fails(exec: &DynExec) {
    within("write_after_exit_fails", async {
        let mut child = exec.spawn(Command::new("true")).await.expect("spawn true");
        child.handle.wait().await.expect("wait");
        let mut stdin = child.stdin.take().expect("stdin");
        let written = async {
            stdin.write_all(b"too late\n").await?;
            stdin.flush().await
        };
        assert!(written.await.is_err(), "writing to an exited process must fail");
    })
    .await;
}

/// Bad argv and environment fail with their specific errors.
pub async fn invalid_commands_are_rejected(exec: &DynExec) {
    within("invalid_commands_are_rejected", async {
        let cases: Vec<(Command, ErrorCheck, &str)> = vec![
            (Command::new(""), |e| matches!(e, ExecError::EmptyArgv), "empty program"),
            (
                Command::new("true").arg("ok").arg("n\0l"),
                |e| matches!(e, ExecError::InvalidArg { index: 1 }),
                "NUL in arg",
            ),
            (Command::new("true").env("A=B", "1"), |e| matches!(e, ExecError::InvalidEnv { .. }), "'=' in env name"),
            (Command::new("true").env("A\0B", "1"), |e| matches!(e, ExecError::InvalidEnv { .. }), "NUL in env name"),
            (Command::new("true").env("", "1"), |e| matches!(e, ExecError::InvalidEnv { .. }), "empty env name"),
            (
                Command::new("true").env("A", "1\u{0}2"),
                |e| matches!(e, ExecError::InvalidEnv { .. }),
                "NUL in env value",
            ),
            (
                Command::new("true").env_remove("A=B"),
                |e| matches!(e, ExecError::InvalidEnv { .. }),
                "'=' in unset name",
            ),
        ];
        for (command, expected, what) in cases {
            assert_rejected(exec.spawn(command).await, expected, what);
        }
    })
    .await;
}

/// A bare program name that nothing provides fails with `ProgramNotFound` after a `PATH` search.
pub async fn missing_programs_are_rejected(exec: &DynExec) {
    within("missing_programs_are_rejected", async {
        let result = exec.spawn(Command::new("agent-exec-conformance-no-such-program")).await;
        let not_found = |e: &ExecError| matches!(e, ExecError::ProgramNotFound { searched_path: true, .. });
        assert_rejected(result, not_found, "unknown bare program");
    })
    .await;
}

/// A process over its wall-clock limit is killed and says so.
pub async fn wall_clock_limit_kills(exec: &DynExec) {
    within("wall_clock_limit_kills", async {
        let wall = limits(|l| l.wall_clock = Some(Duration::from_millis(100)));
        let child = exec.spawn(Command::new("sleep").arg("30").limits(wall)).await.expect("spawn sleep");
        let status = child.handle.wait().await.expect("wait");
        assert_eq!(status.killed_by, Some(KillCause::WallClock), "the wall clock must end it: {status}");
        assert!(!status.success());
    })
    .await;
}

/// A line over `max_line_bytes` fails the read with `InvalidData` and kills the process.
pub async fn line_limit_kills(exec: &DynExec) {
    within("line_limit_kills", async {
        let line_limit = limits(|l| l.max_line_bytes = Some(16));
        let mut child = exec.spawn(Command::new("cat").limits(line_limit)).await.expect("spawn cat");
        let mut stdin = child.stdin.take().expect("stdin");
        let long = format!("short\n{}\n", "x".repeat(100));
        stdin.write_all(long.as_bytes()).await.expect("write");
        stdin.flush().await.expect("flush");
        let (out, error) = read_to_end(child.stdout.as_mut().expect("stdout")).await;
        let error = error.expect("a line over the limit must fail the read");
        assert_eq!(error.kind(), io::ErrorKind::InvalidData, "line limit errors are InvalidData: {error}");
        assert!(out.starts_with(b"short\n") && out.len() <= 6 + 16, "only bytes within the limit arrive: {out:?}");
        let status = child.handle.wait().await.expect("wait");
        assert_eq!(status.killed_by, Some(KillCause::LineLimit), "the line limit must end it: {status}");
    })
    .await;
}

/// Output over `max_stdout_bytes` ends the stream with an error and kills the process.
pub async fn stdout_limit_kills(exec: &DynExec) {
    within("stdout_limit_kills", async {
        let cap = limits(|l| l.max_stdout_bytes = Some(10));
        let mut child = exec.spawn(Command::new("cat").limits(cap)).await.expect("spawn cat");
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(b"0123456789abcdef\n").await.expect("write");
        stdin.flush().await.expect("flush");
        let (out, error) = read_to_end(child.stdout.as_mut().expect("stdout")).await;
        assert!(error.is_some(), "output over the cap must fail the stream");
        assert_eq!(out, b"0123456789", "exactly the capped bytes arrive");
        let status = child.handle.wait().await.expect("wait");
        assert_eq!(status.killed_by, Some(KillCause::StdoutLimit), "the stdout cap must end it: {status}");
    })
    .await;
}

/// A host variable with a plain name that shells leave alone and the checks do not set.
fn host_variable() -> (String, String) {
    const SKIPPED: [&str; 8] = ["PATH", "PWD", "OLDPWD", "SHLVL", "IFS", "_", "A", "B"];
    std::env::vars()
        .find(|(name, value)| {
            !value.is_empty()
                && !SKIPPED.contains(&name.as_str())
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !name.starts_with(|c: char| c.is_ascii_digit())
        })
        .expect("the exec conformance suite needs one host environment variable, e.g. HOME")
}

/// Variables follow the spec: host variables pass unless cleared, `set` adds, `unset` removes,
/// and `clear` keeps only the allowed host variables.
pub async fn environment_follows_the_spec(exec: &DynExec) {
    within("environment_follows_the_spec", async {
        let (name, value) = host_variable();
        let script = format!(r#"printf '%s|%s|%s' "${{A-unset}}" "${{B-unset}}" "${{{name}-unset}}""#);
        let shell = || Command::new("sh").arg("-c").arg(&script).env("A", "1").env("B", "2").env_remove("B");

        let inherited = output(exec, shell()).await;
        assert_eq!(inherited.stdout, format!("1|unset|{value}"), "host variables pass, set adds, unset removes");
        let cleared = output(exec, shell().env_clear(["PATH"])).await;
        assert_eq!(cleared.stdout, "1|unset|unset", "clear must drop host variables that are not allowed");
        let allowed = output(exec, shell().env_clear(["PATH", name.as_str()])).await;
        assert_eq!(allowed.stdout, format!("1|unset|{value}"), "clear must keep allowed host variables");
    })
    .await;
}

/// Children carry the session and owner markers.
pub async fn session_and_owner_are_stamped(exec: &DynExec) {
    within("session_and_owner_are_stamped", async {
        let script = format!(r#"printf '%s|%s' "${{{SESSION_MARKER_ENV}-none}}" "${OWNER_MARKER_ENV}""#);
        let session = SessionId::new("conformance-stamp").expect("valid id");
        let stamped = output(exec, Command::new("sh").arg("-c").arg(&script).session(session)).await;
        let owner = std::process::id();
        assert_eq!(stamped.stdout, format!("conformance-stamp|{owner}"), "session and owner must be stamped");
        let unstamped = output(exec, Command::new("sh").arg("-c").arg(&script)).await;
        assert_eq!(unstamped.stdout, format!("none|{owner}"), "without a session only the owner is stamped");
    })
    .await;
}

/// The child runs in the requested working directory.
pub async fn cwd_is_applied(exec: &DynExec) {
    within("cwd_is_applied", async {
        let dir = TempDir::new("cwd");
        let out = output(exec, Command::new("sh").args(["-c", "pwd -P"]).cwd(dir.path())).await;
        let expected = dir.path().canonicalize().expect("canonical temp dir");
        assert_eq!(out.stdout.trim_end(), expected.to_string_lossy(), "the child must start in its cwd");
    })
    .await;
}

/// Stdout and stderr are separate streams.
pub async fn stderr_is_separate(exec: &DynExec) {
    within("stderr_is_separate", async {
        let out = output(exec, Command::new("sh").args(["-c", "echo out; echo err >&2"])).await;
        assert_eq!((out.stdout.as_str(), out.stderr.as_str()), ("out\n", "err\n"), "streams must not mix");
    })
    .await;
}

/// Exit codes and terminating signals are reported as such, without a kill cause.
pub async fn exit_codes_and_signals_are_reported(exec: &DynExec) {
    within("exit_codes_and_signals_are_reported", async {
        let exited = output(exec, Command::new("sh").args(["-c", "exit 7"])).await.status;
        assert_eq!((exited.code, exited.signal, exited.killed_by), (Some(7), None, None), "exit 7: {exited}");
        let signalled = output(exec, Command::new("sh").args(["-c", "kill -TERM $$"])).await.status;
        assert_eq!(
            (signalled.code, signalled.signal, signalled.killed_by),
            (None, Some(15), None),
            "a self-inflicted SIGTERM: {signalled}"
        );
    })
    .await;
}

/// Output over `max_stderr_bytes` ends stderr with an error and kills the process.
pub async fn stderr_limit_kills(exec: &DynExec) {
    within("stderr_limit_kills", async {
        let cap = limits(|l| l.max_stderr_bytes = Some(8));
        let command = Command::new("sh").args(["-c", "echo 0123456789abcdef >&2; exec sleep 30"]).limits(cap);
        let mut child = exec.spawn(command).await.expect("spawn sh");
        let (out, error) = read_to_end(child.stderr.as_mut().expect("stderr")).await;
        assert!(error.is_some(), "stderr over the cap must fail the stream");
        assert_eq!(out, b"01234567", "exactly the capped bytes arrive");
        let status = child.handle.wait().await.expect("wait");
        assert_eq!(status.killed_by, Some(KillCause::StderrLimit), "the stderr cap must end it: {status}");
    })
    .await;
}

/// A bare name is looked up on the `PATH` the child will have.
pub async fn program_is_found_on_the_child_path(exec: &DynExec) {
    within("program_is_found_on_the_child_path", async {
        let dir = TempDir::new("path");
        let tool = dir.path().join("agent-exec-conformance-tool");
        std::fs::write(&tool, "#!/bin/sh\necho found-on-path\n").expect("write tool");
        set_executable(&tool);
        let mut search = OsString::from(dir.path());
        search.push(":/usr/bin:/bin");
        let out = output(exec, Command::new("agent-exec-conformance-tool").env("PATH", search)).await;
        assert_eq!(out.stdout, "found-on-path\n", "the child's PATH must be searched");
    })
    .await;
}

/// Unusable working directories, missing program paths and paths that cannot run (a file
/// without execute permission, a directory) fail before spawning, each with its own error.
pub async fn filesystem_problems_are_rejected(exec: &DynExec) {
    within("filesystem_problems_are_rejected", async {
        let dir = TempDir::new("fs");
        let file = dir.path().join("plain-file");
        std::fs::write(&file, "").expect("write file");
        let invalid_cwd = |e: &ExecError| matches!(e, ExecError::InvalidCwd { .. });
        assert_rejected(
            exec.spawn(Command::new("true").cwd(dir.path().join("missing"))).await,
            invalid_cwd,
            "missing cwd",
        );
        assert_rejected(exec.spawn(Command::new("true").cwd(&file)).await, invalid_cwd, "cwd is a file");
        let not_found = |e: &ExecError| matches!(e, ExecError::ProgramNotFound { searched_path: false, .. });
        let relative = Command::new("./agent-exec-no-such-program").cwd(dir.path());
        assert_rejected(exec.spawn(relative).await, not_found, "relative path that does not exist");
        let not_executable = |e: &ExecError| {
            matches!(e, ExecError::ProgramNotExecutable { problem: ProgramProblem::NotExecutable { .. }, .. })
        };
        assert_rejected(exec.spawn(Command::new(&file)).await, not_executable, "a file that is not executable");
        let is_directory =
            |e: &ExecError| matches!(e, ExecError::ProgramNotExecutable { problem: ProgramProblem::IsDirectory, .. });
        assert_rejected(exec.spawn(Command::new(dir.path())).await, is_directory, "a directory");
        let empty_path = |e: &ExecError| matches!(e, ExecError::ProgramNotFound { searched_path: true, .. });
        let unreachable = Command::new("sh").env("PATH", dir.path());
        assert_rejected(exec.spawn(unreachable).await, empty_path, "a name missing from the child's PATH");
    })
    .await;
}

/// A rejected command starts nothing: shells that would leave a file never run, while the same
/// shell with valid input does.
pub async fn rejected_commands_spawn_nothing(exec: &DynExec) {
    within("rejected_commands_spawn_nothing", async {
        let dir = TempDir::new("nothing");
        let touch = |marker: &Path| Command::new("sh").arg("-c").arg(format!("echo > '{}'", marker.display()));
        let rejected_marker = dir.path().join("rejected-ran");
        let rejected = [
            touch(&rejected_marker).cwd(dir.path().join("missing")),
            touch(&rejected_marker).env("A=B", "1"),
            touch(&rejected_marker).env("A\0", "1"),
            touch(&rejected_marker).arg("\0"),
        ];
        for command in rejected {
            assert!(exec.spawn(command).await.is_err(), "the command must be rejected");
        }
        // A whole shell run later, anything the rejected commands had started would be done.
        let probe_marker = dir.path().join("probe-ran");
        let probe = output(exec, touch(&probe_marker)).await;
        assert!(probe.status.success() && probe_marker.exists(), "the probe itself must run: {}", probe.status);
        assert!(!rejected_marker.exists(), "a rejected command must not run");
    })
    .await;
}

fn set_executable(path: &Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    #[cfg(not(unix))]
    let _ = path;
}

/// A directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(label: &str) -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let unique = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("agent-exec-conformance-{}-{label}-{unique}", std::process::id()));
        std::fs::create_dir_all(&path).expect("create temp dir");
        TempDir(path)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
