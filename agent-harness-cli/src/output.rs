//! Stdout, written by a thread of its own. The command's loop hands over what to write and goes
//! on, so a reader that stops reading (a pipe nobody drains, a terminal on hold) never holds up
//! its signals or `--timeout`: the write that waits is the thread's. What waits to be written is
//! bounded: while [`QUEUED`] writes wait, the loop takes no more events ([`full`], [`room`]).
//!
//! A write that fails (the reader went away) is kept: every later write and [`flushed`] return
//! it, and nothing more is written.

use std::io::{self, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::Notify;

/// Writes that may wait before the loop stops taking events: enough for a burst of deltas, and
/// a few MiB at most for events of the usual size.
pub(crate) const QUEUED: usize = 256;

/// How long output that waits to be written is waited for once a command ended on a signal, a
/// timeout or a lost session: the reader may have stopped reading.
pub(crate) const STALLED: Duration = Duration::from_secs(2);

/// The writing thread, started by the first write.
struct Output {
    sender: Sender<Vec<u8>>,
    /// Writes handed over and not yet written.
    queued: AtomicUsize,
    /// Told after each write, and when a write failed.
    written: Notify,
    /// The first failed write's kind and message.
    failed: Mutex<Option<(io::ErrorKind, String)>>,
}

fn output() -> &'static Output {
    static OUTPUT: OnceLock<Output> = OnceLock::new();
    OUTPUT.get_or_init(|| {
        let (sender, chunks) = channel::<Vec<u8>>();
        // Not a Tokio blocking task: a write that never returns must not hold up the runtime's
        // shutdown. The process exits without waiting for it.
        std::thread::spawn(move || {
            let output = output();
            for chunk in chunks {
                let mut out = io::stdout().lock();
                let written = out.write_all(&chunk).and_then(|()| out.flush());
                drop(out);
                if let Err(error) = written {
                    *lock(&output.failed) = Some((error.kind(), error.to_string()));
                    output.written.notify_waiters();
                    output.written.notify_one();
                    return;
                }
                output.queued.fetch_sub(1, Ordering::AcqRel);
                output.written.notify_one();
            }
        });
        Output { sender, queued: AtomicUsize::new(0), written: Notify::new(), failed: Mutex::new(None) }
    })
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Each guarded value is whole at every point: a panic elsewhere leaves nothing half-done.
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// The failed write, if one failed.
fn failure() -> Option<io::Error> {
    lock(&output().failed).as_ref().map(|(kind, message)| io::Error::new(*kind, message.clone()))
}

/// Hands `bytes` to the writing thread; an error is an earlier write's failure.
pub(crate) fn write(bytes: Vec<u8>) -> io::Result<()> {
    let output = output();
    if let Some(error) = failure() {
        return Err(error);
    }
    output.queued.fetch_add(1, Ordering::AcqRel);
    if output.sender.send(bytes).is_err() {
        // The thread ended on a failed write after the look above.
        return Err(failure().unwrap_or_else(|| io::Error::from(io::ErrorKind::BrokenPipe)));
    }
    Ok(())
}

/// Writes waiting to be written.
pub(crate) fn pending() -> usize {
    output().queued.load(Ordering::Acquire)
}

/// True while the loop should take no more events: [`QUEUED`] writes wait and none failed.
pub(crate) fn full() -> bool {
    pending() >= QUEUED && failure().is_none()
}

/// Resolves once the loop may take events again (see [`full`]).
pub(crate) async fn room() {
    while full() {
        wait_for_a_write(|| !full()).await;
    }
}

/// Resolves once everything handed over was written, with the failure if a write failed.
pub(crate) async fn flushed() -> io::Result<()> {
    loop {
        if let Some(error) = failure() {
            return Err(error);
        }
        if pending() == 0 {
            return Ok(());
        }
        wait_for_a_write(|| pending() == 0 || failure().is_some()).await;
    }
}

/// Waits for the next write or failure, unless `done` already holds once the wait is set up
/// (so a write between the caller's look and the wait is not missed).
async fn wait_for_a_write(done: impl Fn() -> bool) {
    let written = output().written.notified();
    tokio::pin!(written);
    written.as_mut().enable();
    if !done() {
        written.await;
    }
}
