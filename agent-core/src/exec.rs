//! The byte-level process contract every provider spawns through.
//!
//! An [`Exec`] starts a program from an argv (never through a shell) with an explicit
//! environment and working directory, and hands back its stdin, stdout and stderr as byte
//! streams plus a [`ChildHandle`] to stop it and learn how it ended. It knows nothing about
//! agent protocols, so one implementation serves every provider: the local one in `agent-exec`,
//! a remote sandbox or SSH backend, or a scripted one in tests.

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::ids::SessionId;

/// A shared exec backend.
pub type DynExec = Arc<dyn Exec>;

/// What [`HarnessBuilder::exec`](crate::HarnessBuilder::exec) and the per-session exec option
/// accept: an exec backend by value, in an `Arc`, or already a [`DynExec`].
pub trait IntoExec {
    /// The shared backend.
    fn into_exec(self) -> DynExec;
}

impl<E: Exec> IntoExec for E {
    fn into_exec(self) -> DynExec {
        Arc::new(self)
    }
}

impl<E: Exec> IntoExec for Arc<E> {
    fn into_exec(self) -> DynExec {
        self
    }
}

impl IntoExec for DynExec {
    fn into_exec(self) -> DynExec {
        self
    }
}

/// The environment variable that stamps every child with the session it belongs to.
pub const SESSION_MARKER_ENV: &str = "AGENT_HARNESS_SESSION";
/// The environment variable that stamps every child with the PID of the harness process that
/// started it, so an orphan reaper can tell whose children are left behind.
pub const OWNER_MARKER_ENV: &str = "AGENT_HARNESS_OWNER_PID";
/// The environment variable that stamps every child with the PID namespace of the harness
/// process that started it (the inode number `/proc/self/ns/pid` names): the PID in
/// [`OWNER_MARKER_ENV`] means that process only to a reader in the same namespace. A host that
/// sees a container's processes must not read their owners' PIDs as its own, while what a CLI
/// started in a sandbox of its own namespace still names its harness. Not set where the
/// namespace cannot be read.
pub const OWNER_NAMESPACE_MARKER_ENV: &str = "AGENT_HARNESS_OWNER_PIDNS";

/// This process's PID namespace, as [`OWNER_NAMESPACE_MARKER_ENV`] carries it (the inode number
/// `/proc/self/ns/pid` names, `pid:[N]`): read once; `None` where it cannot be read.
pub fn pid_namespace() -> Option<&'static str> {
    static NAMESPACE: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    NAMESPACE.get_or_init(|| pid_namespace_of("self")).as_deref()
}

/// The PID namespace of process `pid` (`self` for this one), as [`pid_namespace`] gives it.
pub fn pid_namespace_of(pid: &str) -> Option<String> {
    let link = std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok()?;
    let inode = link.to_str()?.strip_prefix("pid:[")?.strip_suffix(']')?;
    (!inode.is_empty() && inode.bytes().all(|b| b.is_ascii_digit())).then(|| inode.to_owned())
}

/// The environment variable that stamps a child with the harness (within its process) whose
/// session it belongs to ([`Command::harness`]): two harnesses of one process may each run a
/// session of the same ID.
pub const HARNESS_MARKER_ENV: &str = "AGENT_HARNESS_INSTANCE";

/// Starts processes.
#[async_trait]
pub trait Exec: Send + Sync + fmt::Debug + 'static {
    /// Validates `command` and starts it. Validation errors (empty argv, program not found or
    /// not allowed, bad cwd or env) are returned before anything is spawned.
    async fn spawn(&self, command: Command) -> Result<Child, ExecError>;

    /// Ends processes this backend stamped for sessions that are no longer live, returning how
    /// many were ended. `is_live` answers for session IDs of this harness process. Backends
    /// without the means to find such processes return `Ok(0)`.
    async fn reap_orphans(
        &self,
        is_live: &(dyn for<'s> Fn(&'s str) -> bool + Send + Sync),
    ) -> Result<usize, ExecError> {
        let _ = is_live;
        Ok(0)
    }

    /// Ends the processes this backend stamped for `session` of `harness` (see
    /// [`Command::harness`]) that still run once the session ended and its provider closed —
    /// those its CLI started outside its process group (a shell command run with `setsid`, say),
    /// which ending the group missed — returning how many were ended. The runtime calls it once
    /// per ended session. Backends without the means to find such processes return `Ok(0)`;
    /// wrappers forward it.
    ///
    /// When a session's task is dropped before it ended (its runtime shut down under it), the
    /// runtime polls the future once and drops it: a backend should have the work under way
    /// by the end of that first poll (`agent_exec::LocalExec` queues it there for a thread of
    /// its own).
    async fn end_session_processes(&self, session: &str, harness: u64) -> Result<usize, ExecError> {
        let _ = (session, harness);
        Ok(0)
    }

    /// Ends the processes this backend stamped for `session` of harness number `harness` in the
    /// harness process `owner` (a PID), if that process is gone — what a host killed without a
    /// chance to clean up (SIGKILL, an abort) left running for the session, out of reach of the
    /// parent-death signal that ended its CLI — returning how many were ended. Processes of a
    /// live process, and of other runs of a session of the same ID (another store's, say), are
    /// never touched. The runtime calls it before it resumes or replaces a stored session that
    /// another process of this boot ran and that process no longer runs (by its PID and start
    /// time), naming the run's owner as the store recorded it
    /// ([`SessionOwner`](crate::SessionOwner)), so what a dead run started (a server holding a
    /// port, a lock) is gone before the session's CLI starts again. The PID may have been taken
    /// by another process since: a backend tells the owner's processes by what it stamped (a
    /// process started after the owner's PID was taken again was not the dead run's).
    /// Backends without the means to find such processes return `Ok(0)`; wrappers forward it.
    async fn end_abandoned_processes(&self, session: &str, owner: u32, harness: u64) -> Result<usize, ExecError> {
        let _ = (session, owner, harness);
        Ok(0)
    }

    /// True when processes run on this host, with its environment and filesystem. Providers
    /// check a CLI's local configuration and scrub the host environment only for such an exec;
    /// under `AuthMode::Subscription` they refuse one that is not (they cannot verify what it
    /// would run with). The default is `false`, which fails closed; wrappers forward it.
    fn is_local(&self) -> bool {
        false
    }
}

/// How the child's environment is built.
#[derive(Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EnvSpec {
    /// Start from an empty environment instead of the host's.
    pub clear: bool,
    /// With `clear`, host variables copied in anyway (e.g. `PATH`, `HOME`).
    pub allow: Vec<OsString>,
    /// Variables to set (after `clear`/`allow`).
    pub set: Vec<(OsString, OsString)>,
    /// Variables to remove (after `set`).
    pub unset: Vec<OsString>,
}

impl EnvSpec {
    /// The value of `name` in the environment this spec gives a child on this host: the host's
    /// (unless `clear` drops it), then `set`, then `unset`, as a local exec builds it.
    ///
    /// ```
    /// use agent_core::exec::EnvSpec;
    ///
    /// let mut spec = EnvSpec::default();
    /// spec.set.push(("CONFIG_DIR".into(), "/etc/cli".into()));
    /// spec.unset.push("HOME".into());
    /// assert_eq!(spec.value("CONFIG_DIR"), Some("/etc/cli".into()));
    /// assert_eq!(spec.value("HOME"), None);
    /// ```
    pub fn value(&self, name: &str) -> Option<OsString> {
        if self.unset.iter().any(|unset| unset == name) {
            return None;
        }
        if let Some((_, value)) = self.set.iter().rev().find(|(set, _)| set == name) {
            return Some(value.clone());
        }
        if self.clear && !self.allow.iter().any(|allowed| allowed == name) {
            return None;
        }
        std::env::var_os(name)
    }
}

impl fmt::Debug for EnvSpec {
    // Values can be credentials: print names only.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EnvSpec")
            .field("clear", &self.clear)
            .field("allow", &self.allow)
            .field("set", &self.set.iter().map(|(k, _)| k).collect::<Vec<_>>())
            .field("unset", &self.unset)
            .finish()
    }
}

/// Resource limits on one process. A violation ends the process and is reported in its
/// [`ExitStatus::killed_by`]; a line over `max_line_bytes` also fails the read with
/// `io::ErrorKind::InvalidData`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// Longest line on stdout or stderr, in bytes.
    pub max_line_bytes: Option<usize>,
    /// Total stdout bytes.
    pub max_stdout_bytes: Option<u64>,
    /// Total stderr bytes.
    pub max_stderr_bytes: Option<u64>,
    /// Wall-clock lifetime.
    pub wall_clock: Option<Duration>,
}

/// How a graceful stop escalates: SIGINT, then SIGTERM after `interrupt_grace`, then SIGKILL
/// after `terminate_grace`, each sent to the child's whole process group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct KillPolicy {
    /// Wait after SIGINT before SIGTERM.
    pub interrupt_grace: Duration,
    /// Wait after SIGTERM before SIGKILL.
    pub terminate_grace: Duration,
}

impl Default for KillPolicy {
    fn default() -> Self {
        KillPolicy { interrupt_grace: Duration::from_secs(2), terminate_grace: Duration::from_secs(3) }
    }
}

/// What to start.
///
/// Its `Debug` output shows how many arguments there are, not what they say: an argument can
/// carry a credential (a preset's `--api-key`, a URL with a token), and the environment's
/// values are left out the same way (see [`EnvSpec`]).
#[derive(Clone)]
#[non_exhaustive]
pub struct Command {
    /// The program: an absolute path, or a bare name looked up on `PATH`.
    pub program: OsString,
    /// Arguments, without the program.
    pub args: Vec<OsString>,
    /// Environment.
    pub env: EnvSpec,
    /// Working directory; the host's when `None`.
    pub cwd: Option<PathBuf>,
    /// The session the process belongs to; stamped into its environment.
    pub session: Option<SessionId>,
    /// The harness within this process whose session it is, stamped beside the session; the
    /// session runtime sets it on every spawn of its provider.
    pub harness: Option<u64>,
    /// Limits.
    pub limits: Limits,
    /// Stop escalation.
    pub kill_policy: KillPolicy,
}

impl Command {
    /// A command for `program`.
    pub fn new(program: impl Into<OsString>) -> Self {
        Command {
            program: program.into(),
            args: Vec::new(),
            env: EnvSpec::default(),
            cwd: None,
            session: None,
            harness: None,
            limits: Limits::default(),
            kill_policy: KillPolicy::default(),
        }
    }

    /// Stamps the process for the harness number `harness` of this process (see
    /// [`Command::harness`]).
    pub fn harness(mut self, harness: u64) -> Self {
        self.harness = Some(harness);
        self
    }

    /// Adds one argument.
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Adds arguments.
    pub fn args(mut self, args: impl IntoIterator<Item = impl Into<OsString>>) -> Self {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets a variable.
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.set.push((key.into(), value.into()));
        self
    }

    /// Removes a variable.
    pub fn env_remove(mut self, key: impl Into<OsString>) -> Self {
        self.env.unset.push(key.into());
        self
    }

    /// Starts from an empty environment plus the allowed host variables.
    pub fn env_clear(mut self, allow: impl IntoIterator<Item = impl Into<OsString>>) -> Self {
        self.env.clear = true;
        self.env.allow = allow.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the working directory.
    pub fn cwd(mut self, cwd: impl Into<PathBuf>) -> Self {
        self.cwd = Some(cwd.into());
        self
    }

    /// Stamps the session.
    pub fn session(mut self, session: SessionId) -> Self {
        self.session = Some(session);
        self
    }

    /// Sets limits.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Sets the stop escalation.
    pub fn kill_policy(mut self, policy: KillPolicy) -> Self {
        self.kill_policy = policy;
        self
    }
}

impl fmt::Debug for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Command")
            .field("program", &self.program)
            .field("args", &format_args!("[{} arguments]", self.args.len()))
            .field("env", &self.env)
            .field("cwd", &self.cwd)
            .field("session", &self.session)
            .field("harness", &self.harness)
            .field("limits", &self.limits)
            .field("kill_policy", &self.kill_policy)
            .finish()
    }
}

/// A child's stdin.
pub type ChildStdin = Box<dyn AsyncWrite + Send + Unpin>;
/// A child's stdout or stderr.
pub type ChildOutput = Box<dyn AsyncRead + Send + Unpin>;

/// A started process.
#[non_exhaustive]
pub struct Child {
    /// Writes to the child's stdin; writing after it exited is an error, never a panic.
    pub stdin: Option<ChildStdin>,
    /// The child's stdout.
    pub stdout: Option<ChildOutput>,
    /// The child's stderr.
    pub stderr: Option<ChildOutput>,
    /// Control and exit status. Dropping the last handle kills the process group.
    pub handle: Arc<dyn ChildHandle>,
}

impl Child {
    /// Assembles a child from its parts (for exec implementations).
    pub fn new(
        stdin: Option<ChildStdin>,
        stdout: Option<ChildOutput>,
        stderr: Option<ChildOutput>,
        handle: Arc<dyn ChildHandle>,
    ) -> Self {
        Child { stdin, stdout, stderr, handle }
    }
}

impl fmt::Debug for Child {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Child")
            .field("stdin", &self.stdin.is_some())
            .field("stdout", &self.stdout.is_some())
            .field("stderr", &self.stderr.is_some())
            .field("handle", &self.handle)
            .finish()
    }
}

/// Controls a started process.
#[async_trait]
pub trait ChildHandle: Send + Sync + fmt::Debug {
    /// The OS process ID, where there is one.
    fn id(&self) -> Option<u32>;

    /// Kills the process and everything it started, at once (SIGKILL to the group locally).
    /// Idempotent; killing an exited process is `Ok`.
    fn kill(&self) -> Result<(), ExecError>;

    /// Stops the process gracefully with the command's [`KillPolicy`] and waits for its exit.
    async fn terminate(&self) -> Result<ExitStatus, ExecError> {
        self.kill()?;
        self.wait().await
    }

    /// Waits for the exit. The process is reaped once; every call returns the same status.
    async fn wait(&self) -> Result<ExitStatus, ExecError>;

    /// The exit status if the process has exited, without waiting.
    fn try_status(&self) -> Option<ExitStatus>;
}

/// Why the harness ended a process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum KillCause {
    /// `kill()`, `terminate()` or a dropped handle.
    Requested,
    /// The wall-clock limit passed.
    WallClock,
    /// The stdout byte limit was exceeded.
    StdoutLimit,
    /// The stderr byte limit was exceeded.
    StderrLimit,
    /// A line exceeded the line limit.
    LineLimit,
}

/// How a process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ExitStatus {
    /// Exit code, if it exited normally.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<i32>,
    /// Terminating signal, if a signal ended it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// Set when the harness ended it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub killed_by: Option<KillCause>,
}

impl ExitStatus {
    /// A normal exit with `code`.
    pub fn code(code: i32) -> Self {
        ExitStatus { code: Some(code), signal: None, killed_by: None }
    }

    /// An exit by `signal`.
    pub fn signal(signal: i32) -> Self {
        ExitStatus { code: None, signal: Some(signal), killed_by: None }
    }

    /// Records why the harness ended the process.
    pub fn with_cause(mut self, cause: KillCause) -> Self {
        self.killed_by = Some(cause);
        self
    }

    /// True for exit code 0.
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
}

impl fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.code, self.signal) {
            (Some(code), _) => write!(f, "exit code {code}")?,
            (None, Some(signal)) => write!(f, "signal {signal}")?,
            (None, None) => f.write_str("unknown exit")?,
        }
        if let Some(cause) = self.killed_by {
            write!(f, " ({cause:?})")?;
        }
        Ok(())
    }
}

/// Why a process could not be started or controlled.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExecError {
    /// The argv has no program.
    #[error("empty argv: no program to run")]
    EmptyArgv,
    /// The program was not found.
    #[error("program {program:?} not found{}", if *.searched_path { " on PATH" } else { "" })]
    ProgramNotFound {
        /// The program as given.
        program: OsString,
        /// Whether `PATH` was searched (a bare name) or the path was taken as given.
        searched_path: bool,
    },
    /// The program exists but cannot be run: a directory, a file without execute permission, a
    /// dangling symbolic link, …. For a bare name, `path` is the first match on `PATH` (the
    /// search found nothing runnable).
    #[error("program {path:?} {problem}")]
    ProgramNotExecutable {
        /// The program as given.
        program: OsString,
        /// What it resolved to.
        path: PathBuf,
        /// Whether `PATH` was searched (a bare name) or the path was taken as given.
        searched_path: bool,
        /// What is wrong with `path`.
        problem: ProgramProblem,
    },
    /// The program is not on the executable allow-list.
    #[error("program {resolved:?} is not on the executable allow-list")]
    NotAllowed {
        /// The resolved absolute path.
        resolved: PathBuf,
    },
    /// The working directory is unusable.
    #[error("invalid cwd {cwd:?}: {reason}")]
    InvalidCwd {
        /// The directory.
        cwd: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// An environment variable name or value is unusable.
    #[error("invalid environment variable {key:?}: {reason}")]
    InvalidEnv {
        /// The name.
        key: OsString,
        /// What is wrong.
        reason: &'static str,
    },
    /// An argument contains a NUL byte.
    #[error("argument {index} contains a NUL byte")]
    InvalidArg {
        /// Position in `args`.
        index: usize,
    },
    /// The OS refused to start the program.
    #[error("failed to spawn {program:?}: {source}")]
    Spawn {
        /// The program.
        program: OsString,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The process has exited; its pipes are closed.
    #[error("process has exited")]
    Exited,
    /// An I/O error while controlling the process.
    #[error("process I/O: {0}")]
    Io(#[from] std::io::Error),
    /// A backend-specific failure (remote exec).
    #[error("exec backend: {0}")]
    Backend(String),
    /// The harness already runs its configured maximum of provider processes.
    #[error("the harness already runs {limit} provider processes (max_provider_processes)")]
    LimitReached {
        /// The configured limit.
        limit: usize,
    },
}

/// Why a path that exists cannot be run as a program ([`ExecError::ProgramNotExecutable`]). It
/// displays as a predicate of the path: "is a directory".
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProgramProblem {
    /// The path is a directory.
    #[error("is a directory")]
    IsDirectory,
    /// A regular file with no execute permission bit.
    #[error("is not executable (mode {mode:04o})")]
    NotExecutable {
        /// The permission bits (`0o644`).
        mode: u32,
    },
    /// A symbolic link whose target does not exist.
    #[error("is a symbolic link to {target:?}, which does not exist")]
    DanglingSymlink {
        /// The link's target, as stored in the link.
        target: PathBuf,
    },
    /// Neither a regular file nor a directory.
    #[error("is not a regular file ({kind})")]
    NotRegularFile {
        /// What it is: "a FIFO", "a socket", "a character device", "a block device".
        kind: &'static str,
    },
    /// Its metadata could not be read (permission denied on a parent directory, a loop of
    /// symbolic links, …).
    #[error("cannot be inspected: {reason}")]
    Inaccessible {
        /// The OS error.
        reason: String,
    },
    /// A script whose `#!` line names an interpreter that does not exist (the OS refused it
    /// with "not found" though the script is there).
    #[error("names an interpreter that does not exist: {interpreter:?}")]
    InterpreterNotFound {
        /// The interpreter, as the `#!` line names it.
        interpreter: PathBuf,
    },
}

impl ProgramProblem {
    /// What keeps a file with `metadata` (symbolic links followed) from running as a program:
    /// it is a directory, not a regular file, or has no execute bit. `None` when it can run.
    #[cfg(unix)]
    pub fn of_metadata(metadata: &std::fs::Metadata) -> Option<ProgramProblem> {
        use std::os::unix::fs::{FileTypeExt, PermissionsExt};
        let file_type = metadata.file_type();
        let mode = metadata.permissions().mode() & 0o7777;
        if file_type.is_dir() {
            Some(ProgramProblem::IsDirectory)
        } else if !file_type.is_file() {
            let kind = if file_type.is_fifo() {
                "a FIFO"
            } else if file_type.is_socket() {
                "a socket"
            } else if file_type.is_char_device() {
                "a character device"
            } else if file_type.is_block_device() {
                "a block device"
            } else {
                "an unknown kind of file"
            };
            Some(ProgramProblem::NotRegularFile { kind })
        } else if mode & 0o111 == 0 {
            Some(ProgramProblem::NotExecutable { mode })
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_leaves_out_arguments_and_environment_values() {
        let command = Command::new("cli")
            .arg("--api-key")
            .arg("sk-live-0123456789")
            .env("CLI_TOKEN", "tok-9876543210")
            .cwd("/work");
        let printed = format!("{command:?}");
        assert!(!printed.contains("sk-live-0123456789") && !printed.contains("tok-9876543210"), "{printed}");
        assert!(printed.contains("\"cli\"") && printed.contains("[2 arguments]"), "{printed}");
        assert!(printed.contains("CLI_TOKEN") && printed.contains("/work"), "{printed}");
    }
}
