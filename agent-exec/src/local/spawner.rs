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

/// What the spawner thread does.
enum Job {
    /// Start a child and send it where the caller waits.
    Spawn { prepared: Prepared, reply: oneshot::Sender<io::Result<Unclaimed>> },
    /// Kill and reap a child its caller never took.
    Discard(Spawned),
}

/// A started child on its way to its caller. Dropped unclaimed — the caller stopped waiting
/// after the reply was sent, so the reply was dropped unread — it is killed and reaped on the
/// spawner thread.
pub(super) struct Unclaimed(Option<Spawned>);

impl Unclaimed {
    /// The child, now the caller's.
    fn claim(mut self) -> Spawned {
        self.0.take().expect("an unclaimed child is claimed once")
    }
}

impl Drop for Unclaimed {
    fn drop(&mut self) {
        let Some(child) = self.0.take() else { return };
        // Killed here at once: queued behind other spawns, the child would run on meanwhile,
        // long enough to start what leaves its group. Its PID stays its own until reaped.
        child.kill();
        // Reaped off the dropping thread (a runtime worker): the reap waits for the exit.
        let Ok(queue) = queue() else { return child.discard() };
        if let Err(mpsc::SendError(Job::Discard(child))) = queue.send(Job::Discard(child)) {
            child.discard();
        }
    }
}

/// The spawner thread's queue, started on first use. Unbounded: each job is tiny and the
/// thread serves them as fast as the OS forks.
static SPAWNER: Mutex<Option<Sender<Job>>> = Mutex::new(None);

/// Starts `prepared` on the spawner thread. If the caller stops waiting, before or after the
/// child started, the child is killed and reaped there, so a cancelled spawn leaves nothing
/// behind.
pub(super) async fn spawn(prepared: Prepared) -> io::Result<Spawned> {
    let (reply, result) = oneshot::channel();
    queue()?.send(Job::Spawn { prepared, reply }).map_err(|_| stopped())?;
    result.await.map_err(|_| stopped())?.map(Unclaimed::claim)
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
    for job in jobs {
        match job {
            Job::Spawn { prepared, reply } => {
                if reply.is_closed() {
                    // The caller stopped waiting before its turn came: nothing to start.
                    continue;
                }
                let started = spawn::spawn(&prepared, slots.as_mut()).map(|child| Unclaimed(Some(child)));
                if let Err(Ok(unclaimed)) = reply.send(started) {
                    unclaimed.claim().discard();
                }
            }
            Job::Discard(child) => child.discard(),
        }
    }
}

fn stopped() -> io::Error {
    io::Error::other("the agent-exec spawner thread stopped")
}
