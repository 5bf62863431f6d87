//! A running local child: its shared state, its handle, its stdin and its supervisor task.
//!
//! The supervisor notices the exit *without* reaping (a pidfd on Linux, `waitid(WNOWAIT)` on a
//! thread elsewhere), so the exited leader stays a zombie that keeps its process-group ID
//! reserved. Under the state lock it then SIGKILLs whatever is left in the group and reaps the
//! leader. Every signal is sent under the same lock and only while the leader is unreaped, so a
//! signal can never reach a recycled process group.

use std::fmt;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use agent_core::exec::{ChildHandle, ExecError, ExitStatus, KillCause, KillPolicy};
use async_trait::async_trait;
use rustix::process::{Pid, Signal as OsSignal};
use tokio::io::AsyncWrite;
use tokio::sync::watch;

use super::sys;
use crate::limits::LimitTarget;
use crate::stop::{self, Signal};

/// What the handle, the streams and the supervisor share about one child.
pub(super) struct Process {
    /// The child's PID, which is also its process-group ID.
    pid: Pid,
    state: Mutex<State>,
    /// Set once the leader is reaped; lets stdin writes fail without taking the lock.
    reaped: AtomicBool,
    /// A stdin write waiting for room in the pipe, woken by the reap: a process the child left
    /// holding the read end may never read, and the write must fail all the same.
    stdin_waker: Mutex<Option<std::task::Waker>>,
    status: watch::Sender<Option<ExitStatus>>,
}

#[derive(Default)]
struct State {
    reaped: bool,
    /// The first reason the harness signalled the child while it was alive.
    cause: Option<KillCause>,
}

impl Process {
    pub(super) fn new(pid: Pid) -> Arc<Self> {
        Arc::new(Process {
            pid,
            state: Mutex::default(),
            reaped: AtomicBool::new(false),
            stdin_waker: Mutex::new(None),
            status: watch::Sender::new(None),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Signals the whole group unless the leader is already reaped. The cause is recorded only
    /// if the leader had not exited on its own first.
    fn signal_group(&self, signal: OsSignal, cause: KillCause) -> Result<(), ExecError> {
        let mut state = self.lock();
        if state.reaped {
            return Ok(());
        }
        if state.cause.is_none() && !sys::exited_unreaped(self.pid, false) {
            state.cause = Some(cause);
        }
        sys::killpg(self.pid, signal)?;
        Ok(())
    }

    /// Sweeps the group and reaps the leader, which must have exited (or be SIGKILLed).
    fn reap(&self) {
        let mut state = self.lock();
        if state.reaped {
            return;
        }
        // The zombie leader still reserves the group ID, so this reaches only our group.
        let _ = sys::killpg(self.pid, OsSignal::KILL);
        let mut status = sys::exit_status(sys::reap(self.pid));
        status.killed_by = state.cause;
        state.reaped = true;
        self.reaped.store(true, Ordering::Release);
        drop(state);
        let waiting = self.stdin_waker.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take();
        if let Some(waker) = waiting {
            waker.wake();
        }
        self.status.send_replace(Some(status));
        tracing::debug!(pid = self.pid.as_raw_pid(), %status, "child reaped");
    }

    /// Kills the group and reaps the leader on a thread of its own, for when no task will.
    pub(super) fn abandon(self: Arc<Self>) {
        let _ = self.signal_group(OsSignal::KILL, KillCause::Requested);
        let reaper = Arc::clone(&self);
        let reap = move || {
            sys::exited_unreaped(reaper.pid, true);
            reaper.reap();
        };
        if let Err(error) = std::thread::Builder::new().name("agent-exec-reap".into()).spawn(reap) {
            // Without a thread the SIGKILLed leader stays a zombie until the host exits.
            tracing::warn!(pid = self.pid.as_raw_pid(), %error, "no thread to reap an abandoned child");
        }
    }

    fn status(&self) -> Option<ExitStatus> {
        *self.status.borrow()
    }
}

impl LimitTarget for Process {
    fn limit_exceeded(&self, cause: KillCause) {
        if let Err(error) = self.signal_group(OsSignal::KILL, cause) {
            tracing::warn!(pid = self.pid.as_raw_pid(), %error, "could not kill a child over its output limit");
        }
    }
}

/// Notices the exit of a child without reaping it.
pub(super) enum ExitWatch {
    /// A pidfd, readable once the child exits.
    #[cfg(target_os = "linux")]
    Pidfd(tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>),
    /// A thread blocked in `waitid(WNOWAIT)`.
    Thread(tokio::sync::oneshot::Receiver<()>),
}

impl ExitWatch {
    pub(super) fn new(pid: Pid) -> io::Result<Self> {
        #[cfg(target_os = "linux")]
        if let Ok(fd) = sys::pidfd_open(pid) {
            // SAFETY: `fd` is a valid pidfd owned by the AsyncFd, which closes it only on drop.
            let fd = unsafe { tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)? };
            return Ok(ExitWatch::Pidfd(fd));
        }
        Self::thread(pid)
    }

    fn thread(pid: Pid) -> io::Result<Self> {
        /// The waiting thread only blocks in one syscall.
        const STACK_BYTES: usize = 64 * 1024;
        let (exited, watch) = tokio::sync::oneshot::channel();
        std::thread::Builder::new().name("agent-exec-wait".into()).stack_size(STACK_BYTES).spawn(move || {
            sys::exited_unreaped(pid, true);
            let _ = exited.send(());
        })?;
        Ok(ExitWatch::Thread(watch))
    }

    /// Resolves once the child has exited; the pidfd is closed when this returns.
    #[cfg_attr(not(target_os = "linux"), allow(unused_variables))]
    async fn exited(self, pid: Pid) {
        match self {
            #[cfg(target_os = "linux")]
            ExitWatch::Pidfd(fd) => {
                if fd.readable().await.is_err() {
                    drop(fd);
                    poll_exit(pid).await;
                }
            }
            ExitWatch::Thread(watch) => {
                let _ = watch.await;
            }
        }
    }
}

/// Checks for the exit now and then, for when neither a pidfd nor a thread can watch it.
#[cfg(target_os = "linux")]
async fn poll_exit(pid: Pid) {
    /// How often to look; only used when the pidfd failed.
    const EXIT_POLL: Duration = Duration::from_millis(20);
    while !sys::exited_unreaped(pid, false) {
        tokio::time::sleep(EXIT_POLL).await;
    }
}

/// Supervises one child: enforces the wall-clock limit, then sweeps and reaps at exit. If the
/// runtime drops this task first, the child is killed and reaped on a thread — also when it
/// drops the task before its first poll (a runtime dropped right after the spawn returned): the
/// guard is made here, not when the task starts.
pub(super) fn supervise(
    process: Arc<Process>,
    exit: ExitWatch,
    wall_clock: Option<Duration>,
) -> impl Future<Output = ()> + Send + 'static {
    let guard = AbandonOnDrop(Some(Arc::clone(&process)));
    async move {
        let exited = exit.exited(process.pid);
        match wall_clock {
            Some(limit) => {
                tokio::pin!(exited);
                if tokio::time::timeout(limit, &mut exited).await.is_err() {
                    process.limit_exceeded(KillCause::WallClock);
                    exited.await;
                }
            }
            None => exited.await,
        }
        process.reap();
        guard.disarm();
    }
}

struct AbandonOnDrop(Option<Arc<Process>>);

impl AbandonOnDrop {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for AbandonOnDrop {
    fn drop(&mut self) {
        if let Some(process) = self.0.take() {
            process.abandon();
        }
    }
}

/// The [`ChildHandle`] of a local child. Dropping it SIGKILLs the child's process group.
pub(super) struct LocalChildHandle {
    process: Arc<Process>,
    policy: KillPolicy,
}

impl LocalChildHandle {
    pub(super) fn new(process: Arc<Process>, policy: KillPolicy) -> Self {
        LocalChildHandle { process, policy }
    }
}

#[async_trait]
impl ChildHandle for LocalChildHandle {
    fn id(&self) -> Option<u32> {
        Some(self.process.pid.as_raw_pid() as u32)
    }

    fn kill(&self) -> Result<(), ExecError> {
        self.process.signal_group(OsSignal::KILL, KillCause::Requested)
    }

    async fn terminate(&self) -> Result<ExitStatus, ExecError> {
        stop::escalate(self, self.policy).await
    }

    async fn wait(&self) -> Result<ExitStatus, ExecError> {
        let stopped = || ExecError::Backend("the process supervisor stopped before the child was reaped".into());
        let mut status = self.process.status.subscribe();
        let status = *status.wait_for(Option::is_some).await.map_err(|_| stopped())?;
        status.ok_or_else(stopped)
    }

    fn try_status(&self) -> Option<ExitStatus> {
        self.process.status()
    }
}

impl Signal for LocalChildHandle {
    fn send_signal(&self, signal: i32) -> Result<(), ExecError> {
        self.process.signal_group(sys::signal(signal)?, KillCause::Requested)
    }
}

impl Drop for LocalChildHandle {
    fn drop(&mut self) {
        if let Err(error) = self.process.signal_group(OsSignal::KILL, KillCause::Requested) {
            tracing::warn!(pid = self.process.pid.as_raw_pid(), %error, "could not kill a dropped child's process group");
        }
    }
}

impl fmt::Debug for LocalChildHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalChildHandle")
            .field("pid", &self.process.pid.as_raw_pid())
            .field("status", &self.process.status())
            .field("policy", &self.policy)
            .finish()
    }
}

/// A child's stdin: the pipe, failing with `BrokenPipe` once the child has been reaped even if a
/// leftover process still holds the read end. Shutting it down closes the pipe, so the child
/// sees end of input.
pub(super) struct Stdin {
    pipe: Option<tokio::process::ChildStdin>,
    process: Arc<Process>,
}

impl Stdin {
    pub(super) fn new(pipe: tokio::process::ChildStdin, process: Arc<Process>) -> Self {
        Stdin { pipe: Some(pipe), process }
    }

    /// The open pipe of a running child.
    fn open_pipe(&mut self) -> io::Result<&mut tokio::process::ChildStdin> {
        if self.process.reaped.load(Ordering::Acquire) {
            return Err(io::Error::new(io::ErrorKind::BrokenPipe, ExecError::Exited));
        }
        self.pipe.as_mut().ok_or_else(|| io::Error::new(io::ErrorKind::BrokenPipe, "stdin was shut down"))
    }
}

impl AsyncWrite for Stdin {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        match Pin::new(this.open_pipe()?).poll_write(cx, buf) {
            Poll::Pending => {
                // Full pipe: the reap wakes this write too (it checks the reap again first).
                let mut waiting = this.process.stdin_waker.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                if !waiting.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    *waiting = Some(cx.waker().clone());
                }
                drop(waiting);
                if this.process.reaped.load(Ordering::Acquire) {
                    return Poll::Ready(Err(io::Error::new(io::ErrorKind::BrokenPipe, ExecError::Exited)));
                }
                Poll::Pending
            }
            ready => ready,
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.pipe.as_mut() {
            Some(pipe) => Pin::new(pipe).poll_flush(cx),
            None => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.pipe = None;
        Poll::Ready(Ok(()))
    }
}
