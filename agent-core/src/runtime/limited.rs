//! The bound on how many processes a harness's sessions run at once
//! (`HarnessBuilder::max_provider_processes`), applied by its session exec
//! ([`SessionExec`](super::session_exec::SessionExec)).

use std::fmt;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::exec::{Child, ChildHandle, Command, Exec, ExecError, ExitStatus};

/// At most `limit` processes running at once, among all the spawns made through it (it is
/// shared by the session execs of one harness): a spawn beyond that fails at once with
/// [`ExecError::LimitReached`] rather than queueing a session's start.
#[derive(Clone)]
pub(crate) struct ProcessLimit {
    permits: Arc<Semaphore>,
    limit: usize,
}

impl ProcessLimit {
    pub(crate) fn new(limit: usize) -> ProcessLimit {
        ProcessLimit { permits: Arc::new(Semaphore::new(limit)), limit }
    }

    /// Spawns `command` through `exec` if a slot is free; the child's handle gives it back
    /// once the process has exited (or the handle is gone).
    pub(crate) async fn spawn(&self, exec: &dyn Exec, command: Command) -> Result<Child, ExecError> {
        let permit =
            Arc::clone(&self.permits).try_acquire_owned().map_err(|_| ExecError::LimitReached { limit: self.limit })?;
        let mut child = exec.spawn(command).await?;
        child.handle = Arc::new(Limited { inner: child.handle, permit: Mutex::new(Some(permit)) });
        Ok(child)
    }
}

impl fmt::Debug for ProcessLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProcessLimit")
            .field("limit", &self.limit)
            .field("available", &self.permits.available_permits())
            .finish()
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
        let limit = ProcessLimit::new(2);
        let first = limit.spawn(&Fake, Command::new("cli")).await.unwrap();
        let second = limit.spawn(&Fake, Command::new("cli")).await.unwrap();
        let refused = limit.clone().spawn(&Fake, Command::new("cli")).await.unwrap_err();
        assert!(matches!(refused, ExecError::LimitReached { limit: 2 }), "a clone shares the slots: {refused:?}");
        assert!(crate::Error::from(refused).is_retryable(), "a slot frees when a process exits");

        first.handle.kill().unwrap();
        first.handle.wait().await.unwrap();
        let third = limit.spawn(&Fake, Command::new("cli")).await.expect("the exited process freed its slot");

        drop(second);
        limit.spawn(&Fake, Command::new("cli")).await.expect("a dropped handle frees its slot");
        drop(third);
    }
}
