//! `Synchronous::Full` with the WAL's `fsync` off the writer thread.
//!
//! SQLite's own `synchronous = FULL` syncs the WAL inside `COMMIT`, so the writer thread waits for
//! the disk before it can start the next group. Instead the writer's connection runs with
//! `synchronous = NORMAL` (SQLite then syncs only around checkpoints) and hands each committed
//! group's answers to this thread, which syncs the WAL file (`fdatasync` on a descriptor of its
//! own: the kernel flushes the file's pages whichever descriptor wrote them) and only then
//! answers the writes. A write is still acknowledged only once its commit is on stable storage;
//! the writer meanwhile applies the next group, and one sync covers every group committed before
//! it started.
//!
//! A failed sync leaves the state of the disk unknown (Linux may drop the dirty pages it could
//! not write), so it is fatal for the store: every write waiting for it and every later one is
//! refused with [`StoreError::WriteRefused`] until the store is opened again.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;

use agent_core::StoreError;

use crate::writer::Reply;

/// Committed writes waiting for the sync: each write's answer and its outcome so far.
pub(crate) type Answers = Vec<(Reply, Result<(), StoreError>)>;

/// The sync thread; joined when dropped, after it answered everything handed to it.
#[derive(Debug)]
pub(crate) struct Syncer {
    answers: Option<mpsc::Sender<Answers>>,
    failed: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Syncer {
    /// Starts the thread on the WAL of the database SQLite knows as `database` (its full path,
    /// `sqlite3_db_filename`); `None` (the writer's connection then keeps SQLite's own `FULL`)
    /// when the WAL file cannot be opened.
    pub(crate) fn start(database: &Path) -> Option<Syncer> {
        let wal = wal_file(database)
            .map_err(|e| tracing::warn!(error = %e, "the WAL cannot be synced apart; SQLite syncs it at commit"))
            .ok()?;
        let (answers, received) = mpsc::channel::<Answers>();
        let failed = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&failed);
        let thread = std::thread::Builder::new()
            .name("agent-store-sqlite-sync".into())
            .spawn(move || run(&wal, &received, &flag))
            .map_err(|e| tracing::warn!(error = %e, "no sync thread; SQLite syncs the WAL at commit"))
            .ok()?;
        Some(Syncer { answers: Some(answers), failed, thread: Some(thread) })
    }

    /// Answers `answers` once the WAL is synced.
    pub(crate) fn answer_after_sync(&self, answers: Answers) {
        if let Some(sender) = &self.answers
            && let Err(mpsc::SendError(answers)) = sender.send(answers)
        {
            // The thread is gone (it panicked): nothing can be promised durable.
            for (reply, _) in answers {
                let _ = reply.send(Err(sync_failed("the sync thread stopped")));
            }
        }
    }

    /// Why every write is refused from now on, once a sync failed.
    pub(crate) fn refusal(&self) -> Option<StoreError> {
        self.failed.load(Ordering::Acquire).then(|| sync_failed("an earlier sync of the WAL failed"))
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        drop(self.answers.take());
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!("the SQLite store's sync thread panicked");
        }
    }
}

/// The WAL file SQLite writes beside the database: its name with `-wal` appended, which exists
/// once the writer's connection is in WAL mode.
fn wal_file(database: &Path) -> std::io::Result<File> {
    let mut wal = database.as_os_str().to_owned();
    wal.push("-wal");
    File::options().write(true).open(wal)
}

fn sync_failed(why: &str) -> StoreError {
    StoreError::WriteRefused(format!("{why}; the store refuses writes until it is opened again"))
}

/// Syncs once for everything handed over meanwhile, then answers it, until the writer is gone.
fn run(wal: &File, answers: &mpsc::Receiver<Answers>, failed: &AtomicBool) {
    while let Ok(mut waiting) = answers.recv() {
        while let Ok(more) = answers.try_recv() {
            waiting.extend(more);
        }
        let synced = if failed.load(Ordering::Acquire) {
            Err(sync_failed("an earlier sync of the WAL failed"))
        } else if waiting.iter().any(|(_, result)| result.is_ok()) {
            wal.sync_data().map_err(|error| {
                tracing::error!(%error, "syncing the WAL failed; the store refuses writes from now on");
                failed.store(true, Ordering::Release);
                sync_failed(&format!("syncing the WAL failed: {error}"))
            })
        } else {
            Ok(())
        };
        for (reply, result) in waiting {
            let result = match (&synced, result) {
                (Ok(()), result) | (Err(_), result @ Err(_)) => result,
                (Err(error), Ok(())) => Err(error.replicate()),
            };
            // A caller that went away no longer needs the answer.
            let _ = reply.send(result);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::OwnedFd;

    use tokio::sync::oneshot;

    use super::*;

    type Answered = oneshot::Receiver<Result<(), StoreError>>;

    /// A write's answer waiting for the sync with `result`, and where it arrives.
    fn answer(result: Result<(), StoreError>) -> ((Reply, Result<(), StoreError>), Answered) {
        let (reply, answered) = oneshot::channel();
        ((reply, result), answered)
    }

    /// A descriptor `fdatasync` refuses (`EINVAL` on a pipe).
    fn unsyncable() -> File {
        let (read, _write) = std::io::pipe().unwrap();
        File::from(OwnedFd::from(read))
    }

    #[test]
    fn writes_are_answered_after_the_sync_with_their_own_outcome() {
        let dir = std::env::temp_dir().join(format!("agent-store-sqlite-sync-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("store.db"), b"").unwrap();
        std::fs::write(dir.join("store.db-wal"), b"frames").unwrap();
        let syncer = Syncer::start(&dir.join("store.db")).expect("the WAL file opens");
        let (ok, ok_answer) = answer(Ok(()));
        let (conflict, conflict_answer) = answer(Err(StoreError::Conflict("seq 1 is used".into())));
        syncer.answer_after_sync(vec![ok, conflict]);
        drop(syncer);
        assert!(matches!(ok_answer.blocking_recv().unwrap(), Ok(())));
        assert!(matches!(conflict_answer.blocking_recv().unwrap(), Err(StoreError::Conflict(_))));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_failed_sync_refuses_what_waited_for_it_and_every_later_write() {
        let (sender, received) = mpsc::channel();
        let failed = Arc::new(AtomicBool::new(false));
        let syncer = Syncer { answers: Some(sender), failed: Arc::clone(&failed), thread: None };
        let (first, first_answer) = answer(Ok(()));
        syncer.answer_after_sync(vec![first]);
        let (second, second_answer) = answer(Ok(()));
        syncer.answer_after_sync(vec![second]);
        let sent = syncer.answers.clone().unwrap();
        drop(syncer);
        drop(sent);
        run(&unsyncable(), &received, &failed);
        for answered in [first_answer, second_answer] {
            match answered.blocking_recv().unwrap() {
                Err(StoreError::WriteRefused(message)) => {
                    assert!(message.contains("syncing the WAL failed"), "{message}")
                }
                other => panic!("expected a refusal, got {other:?}"),
            }
        }
        assert!(failed.load(Ordering::Acquire));
        let after = Syncer { answers: None, failed, thread: None };
        assert!(matches!(after.refusal(), Some(StoreError::WriteRefused(m)) if m.contains("opened again")));
    }
}
