//! One long-lived thread starts every child.
//!
//! Linux delivers the parent-death signal when the *thread* that forked the child exits, not
//! when the process does. Forking from runtime worker or blocking-pool threads, which come and
//! go, would kill children at random; this thread lives as long as the process, so the signal
//! fires exactly when the host dies. The thread also keeps the descriptor slots children are
//! started through (`spawn::Slots`), which only it uses.

use std::io;
use std::sync::Mutex;
use std::sync::mpsc::{self, Sender};

use tokio::sync::oneshot;

use super::spawn::{self, Prepared, Spawned};

/// One spawn request and where its result goes.
struct Job {
    prepared: Prepared,
    reply: oneshot::Sender<io::Result<Spawned>>,
}

/// The spawner thread's queue, started on first use. Unbounded: each job is tiny and the
/// thread serves them as fast as the OS forks.
static SPAWNER: Mutex<Option<Sender<Job>>> = Mutex::new(None);

/// Starts `prepared` on the spawner thread. If the caller stops waiting, the child is killed and
/// reaped there, so a cancelled spawn leaves nothing behind.
pub(super) async fn spawn(prepared: Prepared) -> io::Result<Spawned> {
    let (reply, result) = oneshot::channel();
    queue()?.send(Job { prepared, reply }).map_err(|_| stopped())?;
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
    let mut slots = spawn::Slots::reserve();
    for Job { prepared, reply } in jobs {
        if let Err(Ok(child)) = reply.send(spawn::spawn(&prepared, slots.as_mut())) {
            child.discard();
        }
    }
}

fn stopped() -> io::Error {
    io::Error::other("the agent-exec spawner thread stopped")
}
