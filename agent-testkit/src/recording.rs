//! [`RecordingExec`]: an exec decorator that remembers what it was asked to start and the
//! processes it started, so a test can check that nothing was spawned, or that nothing a
//! provider started outlived it.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use agent_core::exec::{Child, ChildHandle, Command, ExecError};
use agent_core::{DynExec, Exec};

/// Wraps an exec; records every [`Command`] passed to `spawn` (started or refused) and the
/// [`ChildHandle`] of every process started. It keeps the handles, so the children are killed
/// when it is dropped at the latest.
pub struct RecordingExec {
    inner: DynExec,
    commands: Mutex<Vec<Command>>,
    children: Mutex<Vec<Arc<dyn ChildHandle>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl RecordingExec {
    /// Records the spawns of `inner`.
    pub fn new(inner: DynExec) -> Self {
        RecordingExec { inner, commands: Mutex::default(), children: Mutex::default() }
    }

    /// Every command `spawn` was called with, in order, whether or not it started.
    pub fn commands(&self) -> Vec<Command> {
        lock(&self.commands).clone()
    }

    /// The handles of the processes started, in order.
    pub fn children(&self) -> Vec<Arc<dyn ChildHandle>> {
        lock(&self.children).clone()
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
            .field("commands", &lock(&self.commands).len())
            .field("children", &lock(&self.children).len())
            .finish()
    }
}

#[async_trait::async_trait]
#[deny(clippy::missing_trait_methods)]
impl Exec for RecordingExec {
    async fn spawn(&self, command: Command) -> Result<Child, ExecError> {
        lock(&self.commands).push(command.clone());
        let child = self.inner.spawn(command).await?;
        lock(&self.children).push(Arc::clone(&child.handle));
        Ok(child)
    }

    async fn reap_orphans(
        &self,
        is_live: &(dyn for<'s> Fn(&'s str) -> bool + Send + Sync),
    ) -> Result<usize, ExecError> {
        self.inner.reap_orphans(is_live).await
    }

    fn is_local(&self) -> bool {
        self.inner.is_local()
    }
}
