//! [`RecordingExec`]: an exec decorator that remembers what it was asked to start and the
//! processes it started, so a test can check that nothing was spawned, or that nothing a
//! provider started outlived it.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use agent_core::exec::{Child, ChildHandle, Command, ExecError};
use agent_core::{DynExec, Exec};

/// Wraps an exec; records every [`Command`] passed to `spawn` (started or refused) and every
/// process started, as a [`Spawned`].
///
/// Made with [`RecordingExec::new`] it keeps each child's [`ChildHandle`], so the children are
/// killed when it is dropped at the latest. Made with [`RecordingExec::without_handles`] it
/// keeps none, so the caller alone decides how long its processes live.
pub struct RecordingExec {
    inner: DynExec,
    keep_handles: bool,
    commands: Mutex<Vec<Command>>,
    spawned: Mutex<Vec<Spawned>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl RecordingExec {
    /// Records the spawns of `inner`, keeping the handle of every child it starts.
    pub fn new(inner: DynExec) -> Self {
        RecordingExec::with(inner, true)
    }

    /// Records the spawns of `inner` without keeping the children's handles: a child lives
    /// exactly as long as the caller keeps its handle (dropping a local child's last handle
    /// kills it), as it would without the recorder. For checking that a provider ends its
    /// processes by itself; [`RecordingExec::children`] then lists only the handles the caller
    /// still holds.
    pub fn without_handles(inner: DynExec) -> Self {
        RecordingExec::with(inner, false)
    }

    fn with(inner: DynExec, keep_handles: bool) -> Self {
        RecordingExec { inner, keep_handles, commands: Mutex::default(), spawned: Mutex::default() }
    }

    /// Every command `spawn` was called with, in order, whether or not it started.
    pub fn commands(&self) -> Vec<Command> {
        lock(&self.commands).clone()
    }

    /// The processes started, in order.
    pub fn spawned(&self) -> Vec<Spawned> {
        lock(&self.spawned).clone()
    }

    /// The handles of the processes started, in order (for an exec made with
    /// [`RecordingExec::without_handles`], those still held elsewhere).
    pub fn children(&self) -> Vec<Arc<dyn ChildHandle>> {
        lock(&self.spawned).iter().filter_map(Spawned::handle).collect()
    }

    /// Kills the most recent child still running with SIGKILL, as if it crashed.
    ///
    /// # Panics
    ///
    /// When no child is running.
    pub fn kill_running(&self) {
        let running = self.children().into_iter().rev().find(|child| child.try_status().is_none());
        let child = running.expect("the provider runs a process through the exec");
        match child.id().and_then(|pid| i32::try_from(pid).ok()) {
            // SAFETY: `kill` only sends a signal; the PID belongs to a child that has not been
            // reaped (`try_status` is `None`), so it cannot have been reused.
            Some(pid) => assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0, "SIGKILL to {pid}"),
            None => child.kill().expect("the exec kills the child"),
        }
    }
}

impl fmt::Debug for RecordingExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecordingExec")
            .field("inner", &self.inner)
            .field("keep_handles", &self.keep_handles)
            .field("commands", &lock(&self.commands).len())
            .field("spawned", &lock(&self.spawned).len())
            .finish()
    }
}

#[async_trait::async_trait]
#[deny(clippy::missing_trait_methods)]
impl Exec for RecordingExec {
    async fn spawn(&self, command: Command) -> Result<Child, ExecError> {
        lock(&self.commands).push(command.clone());
        let child = self.inner.spawn(command.clone()).await?;
        let pid = child.handle.id();
        let handle = if self.keep_handles {
            Handle::Kept(Arc::clone(&child.handle))
        } else {
            Handle::Watched(Arc::downgrade(&child.handle))
        };
        let start_time = pid.and_then(start_time);
        lock(&self.spawned).push(Spawned { command, pid, start_time, handle });
        Ok(child)
    }

    async fn reap_orphans(
        &self,
        is_live: &(dyn for<'s> Fn(&'s str) -> bool + Send + Sync),
    ) -> Result<usize, ExecError> {
        self.inner.reap_orphans(is_live).await
    }

    async fn end_session_processes(&self, session: &str, harness: u64) -> Result<usize, ExecError> {
        self.inner.end_session_processes(session, harness).await
    }

    async fn end_abandoned_processes(&self, session: &str, owner: u32, harness: u64) -> Result<usize, ExecError> {
        self.inner.end_abandoned_processes(session, owner, harness).await
    }

    fn is_local(&self) -> bool {
        self.inner.is_local()
    }
}

/// A process a [`RecordingExec`] started.
#[derive(Clone, Debug)]
pub struct Spawned {
    command: Command,
    pid: Option<u32>,
    /// Field 22 of `/proc/<pid>/stat` when the process was started, which tells it apart from
    /// a later process reusing the PID.
    start_time: Option<u64>,
    handle: Handle,
}

#[derive(Clone, Debug)]
enum Handle {
    Kept(Arc<dyn ChildHandle>),
    Watched(Weak<dyn ChildHandle>),
}

impl Spawned {
    /// The command it was started with.
    pub fn command(&self) -> &Command {
        &self.command
    }

    /// Its program and arguments, joined by spaces (for messages).
    pub fn argv(&self) -> String {
        std::iter::once(&self.command.program)
            .chain(&self.command.args)
            .map(|arg| arg.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Its process ID, when the exec has one (a local exec always does).
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// Its handle, unless the recorder keeps none and no one else holds it any more.
    pub fn handle(&self) -> Option<Arc<dyn ChildHandle>> {
        match &self.handle {
            Handle::Kept(handle) => Some(Arc::clone(handle)),
            Handle::Watched(handle) => handle.upgrade(),
        }
    }

    /// Whether the process is still in `/proc` (an exited one not yet reaped counts): its PID
    /// names a process with the start time it had when it was started, so a later process
    /// reusing the PID does not count. Linux only: false where there is no `/proc`, and for a
    /// process without a PID.
    pub fn is_running(&self) -> bool {
        self.start_time.is_some() && self.pid.and_then(start_time) == self.start_time
    }
}

/// The start time of process `pid` (field 22 of `/proc/<pid>/stat`, in clock ticks since
/// boot), `None` when there is no such process or no `/proc`.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `comm` (field 2) may hold spaces and parentheses; the fields after it are plain.
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use agent_core::exec::ExitStatus;

    use super::*;

    /// Starts "processes" that are this test process, noting when their handle is dropped.
    #[derive(Debug, Default)]
    struct SelfExec {
        dropped: Arc<AtomicBool>,
    }

    #[derive(Debug)]
    struct SelfHandle {
        dropped: Arc<AtomicBool>,
    }

    #[async_trait::async_trait]
    impl ChildHandle for SelfHandle {
        fn id(&self) -> Option<u32> {
            Some(std::process::id())
        }

        fn kill(&self) -> Result<(), ExecError> {
            Ok(())
        }

        async fn wait(&self) -> Result<ExitStatus, ExecError> {
            Ok(ExitStatus::code(0))
        }

        fn try_status(&self) -> Option<ExitStatus> {
            None
        }
    }

    impl Drop for SelfHandle {
        fn drop(&mut self) {
            self.dropped.store(true, Ordering::SeqCst);
        }
    }

    #[async_trait::async_trait]
    impl Exec for SelfExec {
        async fn spawn(&self, command: Command) -> Result<Child, ExecError> {
            if command.program == "refused" {
                return Err(ExecError::Backend("refused".into()));
            }
            Ok(Child::new(None, None, None, Arc::new(SelfHandle { dropped: Arc::clone(&self.dropped) })))
        }
    }

    /// Spawns `refused` (which fails) and `cli --flag` through a recorder over a [`SelfExec`],
    /// drops the child and reports whether its handle was dropped.
    async fn record(make: fn(DynExec) -> RecordingExec) -> (RecordingExec, bool) {
        let inner = SelfExec::default();
        let dropped = Arc::clone(&inner.dropped);
        let exec = make(Arc::new(inner));
        exec.spawn(Command::new("refused")).await.expect_err("refused");
        drop(exec.spawn(Command::new("cli").arg("--flag")).await.expect("spawn"));
        let dropped = dropped.load(Ordering::SeqCst);
        (exec, dropped)
    }

    #[tokio::test]
    async fn it_records_commands_and_started_processes() {
        let (exec, dropped) = record(RecordingExec::new).await;
        let programs: Vec<_> = exec.commands().into_iter().map(|c| c.program).collect();
        assert_eq!(programs, ["refused", "cli"], "refused spawns are recorded too");
        let [spawned] = exec.spawned().try_into().expect("one process started");
        assert_eq!((spawned.argv(), spawned.pid()), ("cli --flag".to_owned(), Some(std::process::id())));
        assert!(!dropped, "the recorder keeps the handle");
        assert_eq!(exec.children().len(), 1);
        if std::path::Path::new("/proc").exists() {
            assert!(spawned.is_running(), "this process is running");
        }
    }

    #[tokio::test]
    async fn without_handles_the_caller_alone_holds_the_child() {
        let (exec, dropped) = record(RecordingExec::without_handles).await;
        assert!(dropped, "dropping the caller's child dropped its only handle");
        assert!(exec.children().is_empty());
        let [spawned] = exec.spawned().try_into().expect("still recorded");
        assert!(spawned.handle().is_none());
        assert_eq!(spawned.pid(), Some(std::process::id()));
    }

    #[test]
    fn a_pid_without_a_process_has_no_start_time() {
        assert_eq!(start_time(u32::MAX), None);
        let own = start_time(std::process::id());
        assert!(own.is_some() || !std::path::Path::new("/proc").exists());
    }
}
