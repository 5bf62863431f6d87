//! WAL checkpoints away from the writer thread.
//!
//! A checkpoint copies the pages committed to the WAL back into the database file and syncs it:
//! 32 MiB took the writer about 190 ms, during which no write could commit. Here a thread of
//! its own, on a connection of its own, runs passive checkpoints (they take no write lock: the
//! writer keeps committing meanwhile) whenever the writer's WAL hook reports that
//! [`BACKGROUND_PAGES`] more pages were committed. The writer still checkpoints itself once the
//! WAL holds [`WRITER_PAGES`] pages, which bounds the WAL as before; by then the background
//! passes have copied all but the last few commits, so its checkpoint is short, and the next
//! write transaction starts the WAL over from its beginning (SQLite restarts a WAL only when
//! every frame in it was copied back).

use std::ffi::c_int;
use std::path::Path;
use std::sync::mpsc;
use std::thread::JoinHandle;

use rusqlite::Connection;
use rusqlite::config::DbConfig;
use rusqlite::wal::CheckpointMode;

use crate::options::SqliteOptions;

/// WAL pages (4 KiB each) committed since the last request after which the writer asks for a
/// background checkpoint.
const BACKGROUND_PAGES: c_int = 1024;

/// WAL pages after which the writer checkpoints itself after a commit, until the WAL starts
/// over: the bound on the WAL's size (32 MiB), as SQLite's `wal_autocheckpoint` was.
pub(crate) const WRITER_PAGES: c_int = 8192;

/// The checkpointer thread; stopped and joined when dropped (before the writer closes its
/// connection, so that the writer's close is the last one and removes the WAL).
#[derive(Debug)]
pub(crate) struct Checkpointer {
    requests: mpsc::SyncSender<Job>,
    thread: Option<JoinHandle<()>>,
}

impl Checkpointer {
    /// Starts the thread with a connection to `path`, and registers the WAL hook on the writer's
    /// connection `writer` (it replaces `wal_autocheckpoint`). Without a connection or a thread
    /// the writer checkpoints alone at [`WRITER_PAGES`], as `wal_autocheckpoint` did.
    pub(crate) fn start(writer: &mut Connection, path: &Path, options: &SqliteOptions) -> Checkpointer {
        let (requests, received) = mpsc::sync_channel::<Job>(1);
        let thread = connect(path, options).and_then(|conn| {
            std::thread::Builder::new()
                .name("agent-store-sqlite-checkpoint".into())
                .spawn(move || run(&conn, &received))
                .map_err(|e| tracing::warn!(error = %e, "no checkpoint thread; the writer checkpoints alone"))
                .ok()
        });
        let background = thread.as_ref().map(|_| requests.clone());
        let mut requested: c_int = 0;
        let hook = move |wal: &mut rusqlite::hooks::Wal, pages: c_int| {
            if pages < requested {
                // The WAL started over.
                requested = 0;
            }
            if pages >= WRITER_PAGES {
                // Busy while a background pass runs: the next commit tries again.
                if let Err(error) = wal.checkpoint_v2(CheckpointMode::PASSIVE)
                    && error.sqlite_error_code() != Some(rusqlite::ErrorCode::DatabaseBusy)
                {
                    tracing::warn!(%error, "WAL checkpoint failed");
                }
            } else if let Some(background) = &background
                && pages - requested >= BACKGROUND_PAGES
            {
                // A full channel holds a request already.
                let _ = background.try_send(Job::Checkpoint);
                requested = pages;
            }
            Ok(())
        };
        if let Err(error) = writer.wal_hook(Some(hook)) {
            tracing::warn!(%error, "no WAL hook; SQLite's automatic checkpoints stay on");
        }
        Checkpointer { requests, thread }
    }
}

/// What the checkpoint thread is asked to do.
#[derive(Debug, Clone, Copy)]
enum Job {
    /// A passive checkpoint.
    Checkpoint,
    /// Stop: the writer is closing. (The WAL hook keeps a sender while the writer's connection
    /// is open, so the channel does not close by itself first.)
    Stop,
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        let Some(thread) = self.thread.take() else { return };
        // Waits for a pending request to be taken; fails only if the thread is gone.
        let _ = self.requests.send(Job::Stop);
        if thread.join().is_err() {
            tracing::error!("the SQLite store's checkpoint thread panicked");
        }
    }
}

/// The checkpoint connection. Closing it never checkpoints: the writer's close does.
fn connect(path: &Path, options: &SqliteOptions) -> Option<Connection> {
    let conn = crate::open::connect(path, options)
        .and_then(|conn| conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true).map(|_| conn))
        // A connection finds the WAL only when it first reads the database: until then a
        // checkpoint on it does nothing (it answers as if the database were not in WAL mode).
        .and_then(|conn| conn.query_row("SELECT count(*) FROM sqlite_schema", [], |_| Ok(())).map(|()| conn));
    conn.map_err(|e| tracing::warn!(error = %e, "no checkpoint connection; the writer checkpoints alone")).ok()
}

/// Runs a passive checkpoint per request until asked to stop (or the writer's side is gone).
fn run(conn: &Connection, requests: &mpsc::Receiver<Job>) {
    while let Ok(Job::Checkpoint) = requests.recv() {
        match conn.wal_checkpoint_v2(None::<&str>, CheckpointMode::PASSIVE) {
            Ok(_) => {}
            // The writer's own checkpoint is running.
            Err(error) if error.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy) => {}
            Err(error) => tracing::warn!(%error, "background WAL checkpoint failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    /// A store file in a directory of its own, removed on drop.
    struct Scratch(std::path::PathBuf);

    impl Scratch {
        fn new(name: &str) -> Self {
            let dir = std::env::temp_dir().join(format!("agent-store-sqlite-checkpoint-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            Scratch(dir)
        }

        fn db(&self) -> std::path::PathBuf {
            self.0.join("store.db")
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// Commits about `pages` WAL pages of new rows in one transaction.
    fn fill(conn: &Connection, pages: usize) {
        conn.execute_batch("CREATE TABLE IF NOT EXISTS filler (data BLOB); BEGIN").unwrap();
        let mut stmt = conn.prepare("INSERT INTO filler (data) VALUES (zeroblob(3000))").unwrap();
        for _ in 0..pages {
            stmt.execute([]).unwrap();
        }
        conn.execute_batch("COMMIT").unwrap();
    }

    #[test]
    fn the_checkpoint_connection_finds_the_wal() {
        let scratch = Scratch::new("connect");
        let options = SqliteOptions::default();
        let writer = crate::open::open_writer(&scratch.db(), &options).unwrap();
        fill(&writer, 16);
        let conn = connect(&scratch.db(), &options).expect("a checkpoint connection");
        // (busy, frames in the WAL, frames copied back): -1 would mean it did not see the WAL.
        let (log, copied) = conn.wal_checkpoint_v2(None::<&str>, CheckpointMode::PASSIVE).unwrap();
        assert!(log > 0, "the checkpoint saw {log} WAL frames");
        assert_eq!(copied, log, "a passive checkpoint with no reader copies every frame");
    }

    #[test]
    fn the_thread_copies_the_wal_back_before_the_writer_has_to() {
        let scratch = Scratch::new("thread");
        let options = SqliteOptions::default();
        let mut writer = crate::open::open_writer(&scratch.db(), &options).unwrap();
        let checkpointer = Checkpointer::start(&mut writer, &scratch.db(), &options);
        let before = std::fs::metadata(scratch.db()).unwrap().len();
        // Past the background threshold, far below the writer's own.
        fill(&writer, BACKGROUND_PAGES as usize + 64);
        // Only a checkpoint writes the rows into the database file itself.
        let wanted = before + u64::try_from(BACKGROUND_PAGES).unwrap() * 2048;
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut size = before;
        while size < wanted && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
            size = std::fs::metadata(scratch.db()).unwrap().len();
        }
        assert!(size >= wanted, "the database file is {size} bytes (was {before}): no background checkpoint ran");
        drop(checkpointer);
    }
}
