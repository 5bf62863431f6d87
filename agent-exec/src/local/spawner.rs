//! One long-lived thread forks every child.
//!
//! Linux delivers the parent-death signal when the *thread* that forked the child exits, not
//! when the process does. Forking from runtime worker or blocking-pool threads, which come and
//! go, would kill children at random; this thread lives as long as the process, so the signal
//! fires exactly when the host dies.

use std::io;
use std::process::{Child, Command};
use std::sync::Mutex;
use std::sync::mpsc::{self, Sender};

use rustix::process::{Pid, Signal};
use tokio::sync::oneshot;

use super::sys;

/// One fork request and where its result goes.
struct Job {
    command: Command,
    reply: oneshot::Sender<io::Result<Child>>,
}

/// The spawner thread's queue, started on first use. Unbounded: each job is tiny and the
/// thread serves them as fast as the OS forks.
static SPAWNER: Mutex<Option<Sender<Job>>> = Mutex::new(None);

/// Forks `command` on the spawner thread. If the caller stops waiting, the child is killed and
/// reaped there, so a cancelled spawn leaves nothing behind.
pub(super) async fn spawn(command: Command) -> io::Result<Child> {
    let (reply, result) = oneshot::channel();
    queue()?.send(Job { command, reply }).map_err(|_| stopped())?;
    result.await.map_err(|_| stopped())?
}

fn queue() -> io::Result<Sender<Job>> {
    let mut spawner = SPAWNER.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(sender) = spawner.as_ref() {
        return Ok(sender.clone());
    }
    let (sender, jobs) = mpsc::channel::<Job>();
    std::thread::Builder::new().name("agent-exec-spawner".into()).spawn(move || serve(jobs))?;
    *spawner = Some(sender.clone());
    Ok(sender)
}

fn serve(jobs: mpsc::Receiver<Job>) {
    for Job { mut command, reply } in jobs {
        if let Err(Ok(child)) = reply.send(command.spawn()) {
            discard(child);
        }
    }
}

/// Kills and reaps a child nobody is waiting for.
fn discard(child: Child) {
    let pid = Pid::from_child(&child);
    let _ = sys::killpg(pid, Signal::KILL);
    sys::reap(pid);
}

fn stopped() -> io::Error {
    io::Error::other("the agent-exec spawner thread stopped")
}
