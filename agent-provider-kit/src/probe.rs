//! Running a short informational command (`<cli> --version`) and remembering its answer.
//!
//! [`run`] drains both output pipes for as long as the process runs: a CLI that writes a
//! warning to a closed stderr dies of `EPIPE` or `SIGPIPE` before it prints anything useful, and
//! one that fills an unread pipe blocks forever. Stdout is kept up to a byte limit and stderr as
//! a short tail, for error reports. A process that does not exit in time is killed and reaped,
//! so a failed probe leaves nothing running.
//!
//! [`ProbeCache`] keeps one answer per exec backend, program and program file (its size,
//! modification time and inode), so repeated session starts do not run the CLI again, while a
//! CLI upgraded in place is probed afresh.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime};

use agent_core::DynExec;
use agent_core::exec::{ChildHandle, ChildOutput, Command, Exec, ExecError, ExitStatus, ProgramProblem};
use tokio::io::AsyncReadExt;

use crate::framing::StderrTail;
use crate::secrets::Secrets;

/// How long a killed probe may take to be reaped.
const REAP_WAIT: Duration = Duration::from_secs(2);
/// Bytes read from stdout at a time.
const READ_CHUNK: usize = 8 * 1024;

/// Bounds of one probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProbeLimits {
    /// Longest wait for the process to exit and close its pipes.
    pub timeout: Duration,
    /// Stdout bytes kept; the rest is read and dropped.
    pub stdout_bytes: usize,
    /// Stderr lines kept (the last ones).
    pub stderr_lines: usize,
}

impl ProbeLimits {
    /// Limits with this timeout, 4 KiB of stdout and 10 lines of stderr.
    pub fn new(timeout: Duration) -> Self {
        ProbeLimits { timeout, stdout_bytes: 4096, stderr_lines: 10 }
    }

    /// Keeps `bytes` of stdout.
    pub fn stdout_bytes(mut self, bytes: usize) -> Self {
        self.stdout_bytes = bytes;
        self
    }

    /// Keeps the last `lines` lines of stderr.
    pub fn stderr_lines(mut self, lines: usize) -> Self {
        self.stderr_lines = lines;
        self
    }
}

/// What a probe that ran to its exit produced.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProbeOutput {
    /// Stdout (invalid UTF-8 replaced), at most [`ProbeLimits::stdout_bytes`].
    pub stdout: String,
    /// How the process ended.
    pub status: ExitStatus,
    /// The last lines of stderr, colour codes removed; `None` when it wrote nothing.
    pub stderr_tail: Option<String>,
}

/// Why a probe produced no [`ProbeOutput`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProbeError {
    /// The exec did not start it; nothing runs.
    #[error("could not start: {0}")]
    Spawn(#[source] ExecError),
    /// It did not exit within [`ProbeLimits::timeout`]; it was killed and reaped.
    #[error("no answer within {timeout:?}")]
    TimedOut {
        /// The timeout it exceeded.
        timeout: Duration,
        /// What it wrote to stderr until then.
        stderr_tail: Option<String>,
    },
    /// Its exit could not be observed; it was killed.
    #[error("its exit could not be observed: {0}")]
    Wait(#[source] ExecError),
}

/// Runs `command` through `exec` within `limits`. Its stdin is closed at once. The secrets of
/// its environment ([`Secrets::of_command`]) are redacted from what is kept of its output.
pub async fn run(exec: &dyn Exec, command: Command, limits: ProbeLimits) -> Result<ProbeOutput, ProbeError> {
    let secrets = Secrets::of_command(&command);
    let mut child = exec.spawn(command).await.map_err(ProbeError::Spawn)?;
    // Nothing is written to it: it reads end-of-file.
    drop(child.stdin.take());
    let handle = Arc::clone(&child.handle);
    let mut stdout = Vec::new();
    let mut tail = StderrTail::new(limits.stderr_lines).redacting(secrets.clone());
    let (out, err) = (child.stdout.take(), child.stderr.take());
    let finished = tokio::time::timeout(limits.timeout, async {
        let reads = async {
            tokio::join!(read_capped(out, limits.stdout_bytes, &mut stdout), read_tail(err, &mut tail));
        };
        tokio::pin!(reads);
        let exited = tokio::select! {
            status = handle.wait() => Some(status),
            () = &mut reads => None,
        };
        match exited {
            // A process the CLI left in a session of its own (an update check) can hold the
            // pipes open for as long as it runs: after the exit, what they hold is read for a
            // moment, as a CLI's stdout is (`STDOUT_AFTER_EXIT`), not to their end.
            Some(status) => {
                let _ = tokio::time::timeout(crate::process::STDOUT_AFTER_EXIT, &mut reads).await;
                status
            }
            None => handle.wait().await,
        }
    })
    .await;
    match finished {
        Ok(Ok(status)) => {
            let stdout = secrets.redact(&String::from_utf8_lossy(&stdout)).into_owned();
            Ok(ProbeOutput { stdout, status, stderr_tail: tail.text() })
        }
        Ok(Err(error)) => {
            let _ = handle.kill();
            Err(ProbeError::Wait(error))
        }
        Err(_) => {
            stop(handle.as_ref()).await;
            Err(ProbeError::TimedOut { timeout: limits.timeout, stderr_tail: tail.text() })
        }
    }
}

/// Kills the process and waits, briefly, until it is reaped.
async fn stop(handle: &dyn ChildHandle) {
    if let Err(error) = handle.kill() {
        tracing::warn!(%error, pid = ?handle.id(), "could not kill a probe that did not answer");
    }
    if tokio::time::timeout(REAP_WAIT, handle.wait()).await.is_err() {
        tracing::warn!(pid = ?handle.id(), "a killed probe was not reaped within {REAP_WAIT:?}");
    }
}

/// Reads `output` to its end, keeping the first `cap` bytes.
async fn read_capped(output: Option<ChildOutput>, cap: usize, kept: &mut Vec<u8>) {
    let Some(mut output) = output else { return };
    let mut chunk = vec![0; READ_CHUNK];
    loop {
        match output.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let room = cap.saturating_sub(kept.len());
                kept.extend_from_slice(&chunk[..n.min(room)]);
            }
        }
    }
}

/// Reads `output` to its end, keeping its last lines in `tail`.
async fn read_tail(output: Option<ChildOutput>, tail: &mut StderrTail) {
    if let Some(output) = output {
        tail.read_to_end(output).await;
    }
}

/// Which file a program is: size, modification time and (on Unix) device and inode. A CLI
/// replaced or upgraded in place gets a new stamp.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileStamp {
    path: PathBuf,
    len: u64,
    modified: Option<SystemTime>,
    inode: Option<(u64, u64)>,
    problem: Option<ProgramProblem>,
}

impl FileStamp {
    /// The stamp of the file at `path` (symbolic links followed); `None` when it cannot be
    /// read.
    pub fn of_path(path: &Path) -> Option<FileStamp> {
        let metadata = std::fs::metadata(path).ok()?;
        #[cfg(unix)]
        let inode = {
            use std::os::unix::fs::MetadataExt;
            Some((metadata.dev(), metadata.ino()))
        };
        #[cfg(not(unix))]
        let inode = None;
        #[cfg(unix)]
        let problem = ProgramProblem::of_metadata(&metadata);
        #[cfg(not(unix))]
        let problem = None;
        let (len, modified) = (metadata.len(), metadata.modified().ok());
        Some(FileStamp { path: path.to_owned(), len, modified, inode, problem })
    }

    /// The file's path (a program found on `PATH`: where it was found).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What keeps the file from running as a program (a directory, no execute bit), as a spawn
    /// would report it; `None` when it can run.
    pub fn problem(&self) -> Option<&ProgramProblem> {
        self.problem.as_ref()
    }

    /// The stamp of the file `command` would run, when `exec` runs processes on this host:
    /// a program with a path separator is taken relative to the command's directory, a bare
    /// name is looked up on the `PATH` the command gets. `None` for a remote exec or a program
    /// that is not found.
    pub fn of_command(exec: &dyn Exec, command: &Command) -> Option<FileStamp> {
        if !exec.is_local() {
            return None;
        }
        let program = Path::new(&command.program);
        if program.components().count() > 1 || program.is_absolute() {
            let path = match &command.cwd {
                Some(cwd) if program.is_relative() => cwd.join(program),
                _ => program.to_owned(),
            };
            return FileStamp::of_path(&path);
        }
        let search = command_path(command)?;
        // As the local exec searches: empty entries skipped, relative ones taken from the
        // command's directory, and the first file that can run, else the first file found.
        let mut found = std::env::split_paths(&search).filter(|dir| !dir.as_os_str().is_empty()).filter_map(|dir| {
            let candidate = match &command.cwd {
                Some(cwd) if dir.is_relative() => cwd.join(dir).join(program),
                _ => dir.join(program),
            };
            candidate.is_file().then(|| FileStamp::of_path(&candidate)).flatten()
        });
        let first = found.next()?;
        if first.problem.is_none() {
            return Some(first);
        }
        found.find(|stamp| stamp.problem.is_none()).or(Some(first))
    }
}

/// The `PATH` a command runs with.
fn command_path(command: &Command) -> Option<OsString> {
    let env = &command.env;
    let is_path = |name: &OsStr| name == "PATH";
    if env.unset.iter().any(|name| is_path(name)) {
        return None;
    }
    if let Some((_, value)) = env.set.iter().rev().find(|(name, _)| is_path(name)) {
        return Some(value.clone());
    }
    if env.clear && !env.allow.iter().any(|name| is_path(name)) {
        return None;
    }
    std::env::var_os("PATH")
}

/// One remembered answer.
struct Entry<V> {
    exec: Weak<dyn Exec>,
    program: OsString,
    stamp: Option<FileStamp>,
    value: V,
}

/// Probe answers per exec backend, program and [`FileStamp`], so each binary is probed once.
///
/// Entries of exec backends that were dropped are forgotten. Without a stamp (a remote exec, a
/// program not found on this host) an answer is kept per exec and program name.
pub struct ProbeCache<V> {
    entries: Mutex<Vec<Entry<V>>>,
}

impl<V> Default for ProbeCache<V> {
    fn default() -> Self {
        ProbeCache { entries: Mutex::new(Vec::new()) }
    }
}

impl<V> fmt::Debug for ProbeCache<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProbeCache").field("entries", &self.lock().len()).finish()
    }
}

impl<V> ProbeCache<V> {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Entry<V>>> {
        self.entries.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl<V: Clone> ProbeCache<V> {
    /// An empty cache.
    pub fn new() -> Self {
        ProbeCache::default()
    }

    /// The answer remembered for `program` run by `exec` when its file still has `stamp`.
    pub fn get(&self, exec: &DynExec, program: &OsStr, stamp: Option<&FileStamp>) -> Option<V> {
        let mut entries = self.lock();
        entries.retain(|entry| entry.exec.strong_count() > 0);
        let exec = Arc::downgrade(exec);
        entries
            .iter()
            .find(|entry| Weak::ptr_eq(&entry.exec, &exec) && entry.program == program && entry.stamp.as_ref() == stamp)
            .map(|entry| entry.value.clone())
    }

    /// Remembers `value` for `program` run by `exec` with `stamp`, replacing the answer for an
    /// older file.
    pub fn insert(&self, exec: &DynExec, program: &OsStr, stamp: Option<FileStamp>, value: V) {
        let mut entries = self.lock();
        let weak = Arc::downgrade(exec);
        entries.retain(|entry| {
            entry.exec.strong_count() > 0 && !(Weak::ptr_eq(&entry.exec, &weak) && entry.program == program)
        });
        entries.push(Entry { exec: weak, program: program.to_owned(), stamp, value });
    }
}

#[cfg(test)]
mod tests {
    use agent_exec::LocalExec;
    use agent_exec::scripted::ScriptedExec;
    use agent_testkit::programs::ProgramDir;

    use super::*;

    fn limits() -> ProbeLimits {
        ProbeLimits::new(Duration::from_secs(10)).stdout_bytes(64).stderr_lines(3)
    }

    #[tokio::test]
    async fn stdout_is_capped_and_stderr_keeps_its_last_lines() {
        let programs = ProgramDir::new("kit-probe-output");
        let cli = programs.script(
            "cli",
            "i=0; while [ $i -lt 2000 ]; do echo \"warning $i: something long enough to fill a pipe\" >&2; i=$((i+1)); done\n\
             head -c 100000 /dev/zero | tr '\\0' v\nexit 3",
        );
        let output = run(&LocalExec::new(), Command::new(cli), limits()).await.expect("the probe runs");
        assert_eq!(output.stdout, "v".repeat(64));
        assert_eq!(output.status.code, Some(3));
        let tail = output.stderr_tail.expect("a tail");
        assert_eq!(tail.lines().count(), 3);
        assert!(tail.ends_with("warning 1999: something long enough to fill a pipe"), "{tail}");
    }

    /// A CLI that prints the values of its environment in a failed `--version`: what the
    /// probe keeps has them redacted, the values it sets and the host credentials it inherits.
    #[tokio::test]
    async fn the_secrets_of_its_environment_are_redacted_from_its_output() {
        let programs = ProgramDir::new("kit-probe-secrets");
        let cli =
            programs.script("cli", "echo \"bad key $DEPLOY_TOKEN in $WORK_DIR\" >&2\necho \"v $DEPLOY_TOKEN\"\nexit 1");
        let mut command = Command::new(cli);
        command.env.set.push(("DEPLOY_TOKEN".into(), "deploy-token-0123456789".into()));
        command.env.set.push(("WORK_DIR".into(), "/tmp/work-dir-1".into()));
        let output = run(&LocalExec::new(), command, limits()).await.expect("the probe runs");
        assert_eq!(output.stderr_tail.as_deref(), Some("bad key [redacted] in [redacted]"));
        assert_eq!(output.stdout, "v [redacted]\n");
    }

    /// `--version` leaves a helper in a session of its own holding stdout and stderr (an update
    /// check): the probe answers after the CLI's exit all the same.
    #[tokio::test]
    async fn a_helper_holding_the_pipes_after_the_exit_does_not_hold_the_probe() {
        let programs = ProgramDir::new("kit-probe-helper");
        // The helper ends by itself, after the probe's answer is due and before its timeout.
        let cli = programs.script("cli", "echo 'cli 1.2.3'\nsetsid sleep 8 &\nsleep 0.3\nexit 0");
        let started = tokio::time::Instant::now();
        let output = run(&LocalExec::new(), Command::new(cli), limits()).await.expect("the probe runs");
        assert_eq!((output.stdout.as_str(), output.status.code), ("cli 1.2.3\n", Some(0)));
        assert!(started.elapsed() < Duration::from_secs(5), "answered {:?} after the start", started.elapsed());
    }

    #[tokio::test]
    async fn a_probe_past_its_timeout_is_killed_and_reaped() {
        let programs = ProgramDir::new("kit-probe-hang");
        let cli = programs.script("cli", "echo 'still starting' >&2\nexec sleep 60");
        let exec = agent_testkit::recording::RecordingExec::new(Arc::new(LocalExec::new()));
        let limits = ProbeLimits::new(Duration::from_secs(1));
        match run(&exec, Command::new(cli), limits).await {
            Err(ProbeError::TimedOut { stderr_tail, .. }) => assert_eq!(stderr_tail.as_deref(), Some("still starting")),
            other => panic!("expected a timeout, got {other:?}"),
        }
        let [child] = exec.children().try_into().expect("one process");
        let status = child.try_status().expect("reaped before the probe returned");
        assert_eq!(status.signal, Some(9));
    }

    #[tokio::test(start_paused = true)]
    async fn a_spawn_failure_starts_nothing() {
        let exec = ScriptedExec::new();
        let refused = run(&exec, Command::new("cli"), limits()).await;
        assert!(matches!(refused, Err(ProbeError::Spawn(ExecError::ProgramNotFound { .. }))), "{refused:?}");
        assert!(exec.runs().is_empty());
    }

    #[test]
    fn the_cache_is_keyed_by_exec_program_and_file() {
        let programs = ProgramDir::new("kit-probe-cache");
        let cli = programs.script("cli", "echo 1.0.0");
        let exec: DynExec = Arc::new(LocalExec::new());
        let other: DynExec = Arc::new(LocalExec::new());
        let stamp = FileStamp::of_command(exec.as_ref(), &Command::new(cli.clone()));
        assert!(stamp.is_some());
        let cache = ProbeCache::new();
        let program = cli.as_os_str();
        cache.insert(&exec, program, stamp.clone(), 1);
        assert_eq!(cache.get(&exec, program, stamp.as_ref()), Some(1));
        assert_eq!(cache.get(&other, program, stamp.as_ref()), None);
        assert_eq!(cache.get(&exec, OsStr::new("cli"), stamp.as_ref()), None);

        // Replaced in place: a new file, a new answer.
        std::fs::write(&cli, "#!/bin/sh\necho 2.0.0 and more\n").expect("rewrites");
        let newer = FileStamp::of_command(exec.as_ref(), &Command::new(cli.clone()));
        assert_ne!(newer, stamp);
        assert_eq!(cache.get(&exec, program, newer.as_ref()), None);
        cache.insert(&exec, program, newer.clone(), 2);
        assert_eq!(cache.get(&exec, program, newer.as_ref()), Some(2));
        assert_eq!(format!("{cache:?}"), "ProbeCache { entries: 1 }");

        drop(exec);
        assert_eq!(cache.get(&other, program, newer.as_ref()), None);
        assert_eq!(format!("{cache:?}"), "ProbeCache { entries: 0 }");
    }

    #[test]
    fn bare_names_are_found_on_the_command_path() {
        let programs = ProgramDir::new("kit-probe-path");
        let cli = programs.script("some-cli", "echo 1.0.0");
        let dir = cli.parent().expect("a directory").to_owned();
        let exec = LocalExec::new();
        let command = Command::new("some-cli").env("PATH", dir.as_os_str());
        assert_eq!(FileStamp::of_command(&exec, &command), FileStamp::of_path(&cli));
        assert_eq!(FileStamp::of_command(&exec, &Command::new("some-cli").env_remove("PATH")), None);
        assert_eq!(FileStamp::of_command(&ScriptedExec::new(), &command), None);

        // A file that cannot run is passed over for one that can, as the exec passes over it.
        let plain_dir = programs.dir("plain");
        std::fs::write(plain_dir.join("some-cli"), "echo 0.1.0").expect("written");
        let path = std::env::join_paths([&plain_dir, &dir]).expect("a PATH");
        let command = Command::new("some-cli").env("PATH", &path);
        assert_eq!(FileStamp::of_command(&exec, &command), FileStamp::of_path(&cli));
        let only_plain = FileStamp::of_command(&exec, &Command::new("some-cli").env("PATH", &plain_dir));
        let problem = only_plain.as_ref().and_then(FileStamp::problem);
        assert!(matches!(problem, Some(ProgramProblem::NotExecutable { .. })), "{only_plain:?}");

        // A relative entry is taken from the command's directory, an empty one is no directory.
        let (parent, name) = (dir.parent().expect("a parent"), dir.file_name().expect("a name"));
        let relative = Command::new("some-cli").env("PATH", name).cwd(parent);
        assert_eq!(FileStamp::of_command(&exec, &relative), FileStamp::of_path(&cli));
        let empty = Command::new("some-cli").env("PATH", ":").cwd(&dir);
        assert_eq!(FileStamp::of_command(&exec, &empty), None);
    }
}
