//! An [`Exec`] decorator that bounds how many processes run at once
//! (`HarnessBuilder::max_provider_processes`).

use std::fmt;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::exec::{Child, ChildHandle, Command, DynExec, Exec, ExecError, ExitStatus};

/// Spawns through `inner` while fewer than `limit` of its processes are running; a spawn beyond
/// that fails at once with [`ExecError::LimitReached`] rather than queueing a session's start.
pub(crate) struct LimitedExec {
    inner: DynExec,
    permits: Arc<Semaphore>,
    limit: usize,
}

impl LimitedExec {
    /// Wraps `inner`; every exec wrapped with the same `permits` shares the limit.
    pub(crate) fn wrap(inner: DynExec, permits: Arc<Semaphore>, limit: usize) -> DynExec {
        Arc::new(LimitedExec { inner, permits, limit })
    }
}

impl fmt::Debug for LimitedExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LimitedExec")
            .field("inner", &self.inner)
            .field("limit", &self.limit)
            .field("available", &self.permits.available_permits())
            .finish()
    }
}

#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl Exec for LimitedExec {
    async fn spawn(&self, command: Command) -> Result<Child, ExecError> {
        let permit =
            Arc::clone(&self.permits).try_acquire_owned().map_err(|_| ExecError::LimitReached { limit: self.limit })?;
        let mut child = self.inner.spawn(command).await?;
        child.handle = Arc::new(Limited { inner: child.handle, permit: Mutex::new(Some(permit)) });
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

    fn is_local(&self) -> bool {
        self.inner.is_local()
    }
}

/// A child handle that gives its slot back once the process has exited (or the handle is gone).
struct Limited {
    inner: Arc<dyn ChildHandle>,
    permit: Mutex<Option<OwnedSemaphorePermit>>,
}

impl Limited {
    fn release(&self) {
        self.permit.lock().unwrap_or_else(|p| p.into_inner()).take();
    }
}

impl fmt::Debug for Limited {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.inner, f)
    }
}

#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl ChildHandle for Limited {
    fn id(&self) -> Option<u32> {
        self.inner.id()
    }

    fn kill(&self) -> Result<(), ExecError> {
        self.inner.kill()
    }

    async fn terminate(&self) -> Result<ExitStatus, ExecError> {
        let status = self.inner.terminate().await;
        self.release();
        status
    }

    async fn wait(&self) -> Result<ExitStatus, ExecError> {
        let status = self.inner.wait().await;
        self.release();
        status
    }

    fn try_status(&self) -> Option<ExitStatus> {
        let status = self.inner.try_status();
        if status.is_some() {
            self.release();
        }
        status
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    /// An exec whose children exit when told to.
    #[derive(Debug)]
    struct Fake;

    #[derive(Debug, Default)]
    struct FakeChild {
        exited: AtomicBool,
        done: tokio::sync::Notify,
    }

    #[async_trait]
    impl ChildHandle for FakeChild {
        fn id(&self) -> Option<u32> {
            None
        }
        fn kill(&self) -> Result<(), ExecError> {
            self.exited.store(true, Ordering::SeqCst);
            self.done.notify_waiters();
            Ok(())
        }
        async fn wait(&self) -> Result<ExitStatus, ExecError> {
            while !self.exited.load(Ordering::SeqCst) {
                let notified = self.done.notified();
                if self.exited.load(Ordering::SeqCst) {
                    break;
                }
                notified.await;
            }
            Ok(ExitStatus::signal(9))
        }
        fn try_status(&self) -> Option<ExitStatus> {
            self.exited.load(Ordering::SeqCst).then(|| ExitStatus::signal(9))
        }
    }

    #[async_trait]
    impl Exec for Fake {
        async fn spawn(&self, _command: Command) -> Result<Child, ExecError> {
            Ok(Child::new(None, None, None, Arc::new(FakeChild::default())))
        }
    }

    #[tokio::test]
    async fn a_slot_is_taken_per_running_process_and_freed_by_its_exit() {
        let exec = LimitedExec::wrap(Arc::new(Fake), Arc::new(Semaphore::new(2)), 2);
        let first = exec.spawn(Command::new("cli")).await.unwrap();
        let second = exec.spawn(Command::new("cli")).await.unwrap();
        let refused = exec.spawn(Command::new("cli")).await.unwrap_err();
        assert!(matches!(refused, ExecError::LimitReached { limit: 2 }), "{refused:?}");

        first.handle.kill().unwrap();
        first.handle.wait().await.unwrap();
        let third = exec.spawn(Command::new("cli")).await.expect("the exited process freed its slot");

        drop(second);
        exec.spawn(Command::new("cli")).await.expect("a dropped handle frees its slot");
        drop(third);
    }
}
