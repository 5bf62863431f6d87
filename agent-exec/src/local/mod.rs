//! [`LocalExec`]: child processes of this host, each contained in its own process group.

#[cfg(target_os = "linux")]
mod orphans;
mod process;
mod resolve;
mod spawn;
mod spawner;
mod sys;

use std::collections::BTreeSet;
use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use agent_core::exec::{Child, Command, Exec, ExecError};
use async_trait::async_trait;

use self::process::{ExitWatch, LocalChildHandle, Process, Stdin};
use self::spawn::{Prepared, Spawned};
use crate::limits::{Stream, limit_output};
use crate::validate::{check_command, child_env};

/// Runs commands as local child processes (Unix only).
///
/// Every child gets its own process group, is killed with its whole group when its last handle
/// is dropped, and on Linux dies with the host process. See the crate docs for the guarantees
/// and their limits.
#[derive(Clone, Default)]
pub struct LocalExec {
    /// Canonical paths of the programs that may run; `None` allows any.
    allowed: Option<Arc<BTreeSet<PathBuf>>>,
}

impl LocalExec {
    /// An exec that runs any program.
    pub fn new() -> Self {
        LocalExec::default()
    }

    /// Starts configuring an exec, e.g. with an executable allow-list.
    pub fn builder() -> LocalExecBuilder {
        LocalExecBuilder::default()
    }

    /// Resolves, checks and prepares `command` without spawning it.
    fn prepare(&self, command: &Command) -> Result<Prepared, ExecError> {
        check_command(command)?;
        let env = child_env(&command.env, command.session.as_ref(), command.harness, std::env::vars_os());
        let cwd = command.cwd.as_deref().map(resolve::check_cwd).transpose()?;
        let resolved = resolve::resolve_program(&command.program, &env, cwd.as_deref())?;
        let program = self.check_allowed(resolved)?;
        Ok(Prepared {
            program,
            arg0: command.program.clone(),
            args: command.args.clone(),
            env: env.into_iter().collect(),
            cwd,
        })
    }

    /// With an allow-list, the program's canonical path must be on it; that path is then what
    /// runs, so what was checked is what executes.
    fn check_allowed(&self, resolved: PathBuf) -> Result<PathBuf, ExecError> {
        let Some(allowed) = &self.allowed else {
            return Ok(resolved);
        };
        let canonical = std::fs::canonicalize(&resolved).unwrap_or(resolved);
        if allowed.contains(&canonical) { Ok(canonical) } else { Err(ExecError::NotAllowed { resolved: canonical }) }
    }
}

#[async_trait]
impl Exec for LocalExec {
    async fn spawn(&self, command: Command) -> Result<Child, ExecError> {
        let prepared = self.prepare(&command)?;
        #[cfg(target_os = "linux")]
        orphans::end_ours_at_exit();
        let path = prepared.program.clone();
        let spawned = spawner::spawn(prepared).await.map_err(|source| {
            // "Not found" for a program that was found: a script's interpreter is missing.
            let problem = (source.kind() == io::ErrorKind::NotFound).then(|| resolve::missing_interpreter(&path));
            match problem.flatten() {
                Some(problem) => ExecError::ProgramNotExecutable {
                    program: command.program.clone(),
                    path,
                    searched_path: !command.program.as_encoded_bytes().contains(&b'/'),
                    problem,
                },
                None => ExecError::Spawn { program: command.program.clone(), source },
            }
        })?;
        let process = Process::new(spawned.pid);
        tracing::debug!(program = ?command.program, pid = spawned.pid.as_raw_nonzero(), session = ?command.session, "child spawned");
        let (stdin, stdout, stderr, exit) = match attach(spawned) {
            Ok(attached) => attached,
            Err(error) => {
                process.abandon();
                return Err(ExecError::Io(error));
            }
        };
        tokio::spawn(process::supervise(Arc::clone(&process), exit, command.limits.wall_clock));

        let limits = &command.limits;
        let stdout = limit_output(stdout, Stream::Stdout, limits, process.clone());
        let stderr = limit_output(stderr, Stream::Stderr, limits, process.clone());
        let stdin = Box::new(Stdin::new(stdin, Arc::clone(&process)));
        let handle = Arc::new(LocalChildHandle::new(process, command.kill_policy));
        Ok(Child::new(Some(stdin), Some(stdout), Some(stderr), handle))
    }

    /// Children run on this host.
    fn is_local(&self) -> bool {
        true
    }

    /// Scans `/proc` for processes stamped by this or a dead harness process and SIGKILLs the
    /// process group of each orphan. Other Unix systems have no such scan and return `Ok(0)`.
    #[cfg(target_os = "linux")]
    async fn reap_orphans(
        &self,
        is_live: &(dyn for<'s> Fn(&'s str) -> bool + Send + Sync),
    ) -> Result<usize, ExecError> {
        let stamped = orphans::scan().await?;
        let orphans: Vec<_> =
            stamped.into_iter().filter(|process| process.is_orphan(|session| is_live(session))).collect();
        Ok(orphans::end(&orphans))
    }

    /// Scans `/proc` for processes this harness process stamped for `session` and SIGKILLs the
    /// process group of each. Sessions that end together share one scan. Other Unix systems
    /// return `Ok(0)`.
    #[cfg(target_os = "linux")]
    async fn end_session_processes(&self, session: &str, harness: u64) -> Result<usize, ExecError> {
        orphans::end_session(session, harness).await
    }

    /// Scans `/proc` for processes stamped for `session` of harness `harness` by the process
    /// `owner`, now gone, and SIGKILLs the process group of each. Other Unix systems return
    /// `Ok(0)`.
    #[cfg(target_os = "linux")]
    async fn end_abandoned_processes(&self, session: &str, owner: u32, harness: u64) -> Result<usize, ExecError> {
        let stamped = orphans::scan().await?;
        let left: Vec<_> = stamped.into_iter().filter(|process| process.is_left_by(session, owner, harness)).collect();
        Ok(orphans::end(&left))
    }
}

/// Registers the child's pipes with the runtime and starts watching for its exit.
fn attach(
    spawned: Spawned,
) -> io::Result<(tokio::process::ChildStdin, tokio::process::ChildStdout, tokio::process::ChildStderr, ExitWatch)> {
    let stdin = tokio::process::ChildStdin::from_std(std::process::ChildStdin::from(spawned.stdin))?;
    let stdout = tokio::process::ChildStdout::from_std(std::process::ChildStdout::from(spawned.stdout))?;
    let stderr = tokio::process::ChildStderr::from_std(std::process::ChildStderr::from(spawned.stderr))?;
    Ok((stdin, stdout, stderr, ExitWatch::new(spawned.pid)?))
}

impl fmt::Debug for LocalExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalExec").field("allowed", &self.allowed.as_deref()).finish()
    }
}

/// Configures a [`LocalExec`].
#[derive(Clone, Debug, Default)]
pub struct LocalExecBuilder {
    allowed: Option<Vec<PathBuf>>,
}

impl LocalExecBuilder {
    /// Adds a program to the executable allow-list; once any is added, only listed programs
    /// run. A bare name is looked up on the host's `PATH` now; the entry is stored as its
    /// canonical path, which is what a spawned program's canonical path is compared with.
    pub fn allow_executable(mut self, program: impl Into<PathBuf>) -> Self {
        self.allowed.get_or_insert_with(Vec::new).push(program.into());
        self
    }

    /// Adds several programs to the executable allow-list.
    pub fn allow_executables(mut self, programs: impl IntoIterator<Item = impl Into<PathBuf>>) -> Self {
        self.allowed.get_or_insert_with(Vec::new).extend(programs.into_iter().map(Into::into));
        self
    }

    /// Builds the exec, resolving the allow-list; an entry that names nothing fails with
    /// [`ExecError::ProgramNotFound`], one that names something that cannot run with
    /// [`ExecError::ProgramNotExecutable`].
    pub fn build(self) -> Result<LocalExec, ExecError> {
        let allowed = match self.allowed {
            Some(entries) => {
                Some(Arc::new(entries.iter().map(|entry| resolve::resolve_allowed(entry)).collect::<Result<_, _>>()?))
            }
            None => None,
        };
        Ok(LocalExec { allowed })
    }
}
