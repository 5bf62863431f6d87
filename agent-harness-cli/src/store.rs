//! `--store memory|sqlite:PATH`: parsed first, opened only once every other input checked out,
//! so a bad command line writes nothing.

use std::path::PathBuf;
use std::sync::Arc;

use agent_harness::stores::memory::MemoryStore;
use agent_harness::stores::sqlite::{SqliteOptions, SqliteStore};
use agent_harness::{DynStore, Store};

use crate::exit::{Failure, one_line};

/// Where a command keeps or reads events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum StoreSpec {
    /// In memory, gone with the command.
    Memory,
    /// A SQLite file.
    Sqlite(PathBuf),
}

impl StoreSpec {
    /// Parses `memory` or `sqlite:PATH`.
    pub(crate) fn parse(text: &str) -> Result<StoreSpec, Failure> {
        match text {
            "memory" => Ok(StoreSpec::Memory),
            _ => match text.strip_prefix("sqlite:") {
                Some("") => Err(Failure::usage("--store sqlite: needs a path (sqlite:PATH)")),
                Some(path) => Ok(StoreSpec::Sqlite(PathBuf::from(path))),
                // The value may be a URL with a password in it: it is not repeated.
                None => Err(Failure::usage("--store: expected `memory` or `sqlite:PATH`")),
            },
        }
    }

    /// Parses a store that must be a SQLite database that exists (for reading a history): an
    /// empty file or another kind of file is refused before it is opened, which would make it
    /// a database.
    pub(crate) fn existing_sqlite(text: &str) -> Result<PathBuf, Failure> {
        let path = match StoreSpec::parse(text)? {
            StoreSpec::Sqlite(path) => path,
            StoreSpec::Memory => {
                return Err(Failure::usage("--store memory holds nothing after a run ends: use sqlite:PATH"));
            }
        };
        let cannot = |why: &str| Failure::usage(format!("--store: cannot open {}: {why}", path.display()));
        if path.is_dir() {
            return Err(cannot("a directory, not a SQLite database"));
        }
        if path.exists() && !path.is_file() {
            // Opening a FIFO would wait for a writer.
            return Err(cannot("not a regular file"));
        }
        let mut header = [0u8; SQLITE_HEADER.len()];
        match std::fs::File::open(&path).and_then(|mut file| std::io::Read::read_exact(&mut file, &mut header)) {
            Ok(()) if header == *SQLITE_HEADER => Ok(path),
            Ok(()) => Err(cannot("not a SQLite database")),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Err(cannot("no such file")),
            Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => {
                Err(cannot("not a SQLite database (too short, or empty)"))
            }
            Err(error) => Err(cannot(&one_line(&error.to_string()))),
        }
    }

    /// The SQLite file opening will create, if it is not a database yet (missing, or empty): a
    /// run whose session never starts puts it back as it was, so bad input leaves nothing
    /// behind.
    pub(crate) fn new_file(&self) -> Option<NewFile> {
        match self {
            StoreSpec::Sqlite(path) if !path.exists() => Some(NewFile { path: path.clone(), was_empty: false }),
            StoreSpec::Sqlite(path) if path.metadata().is_ok_and(|m| m.is_file() && m.len() == 0) => {
                Some(NewFile { path: path.clone(), was_empty: true })
            }
            _ => None,
        }
    }

    /// Opens the store (creating a SQLite file that does not exist yet), and for a SQLite file
    /// the run's [`Hold`] on it, kept until the run ends.
    pub(crate) fn open(&self) -> Result<(DynStore, Option<Hold>), Failure> {
        let path = match self {
            StoreSpec::Memory => return Ok((Arc::new(MemoryStore::new()), None)),
            StoreSpec::Sqlite(path) => path,
        };
        // Twice at most: a failed run may remove the file it made between this open and the
        // hold (see `NewFile::undo`); the second open makes it again.
        for _ in 0..2 {
            let store = open_sqlite(path, true)?;
            if let Some(hold) = Hold::take(path) {
                return Ok((store, Some(hold)));
            }
        }
        Err(Failure::usage(format!("--store: {} was removed while this run opened it", path.display())))
    }
}

/// A run's shared `flock` on its SQLite file, beside SQLite's own (`fcntl`) locks, which it
/// does not touch. A run that fails before its session started removes a file it made only
/// when it can lock the file exclusively: no other run holds it.
#[derive(Debug)]
pub(crate) struct Hold(#[allow(dead_code)] std::fs::File);

impl Hold {
    /// A shared lock on the file at `path`; `None` when that file is no longer the one at
    /// `path` once locked (removed meanwhile). A file system without `flock` gives a hold that
    /// locks nothing.
    fn take(path: &std::path::Path) -> Option<Hold> {
        use std::os::unix::fs::MetadataExt;
        let file = std::fs::File::open(path).ok()?;
        if rustix::fs::flock(&file, rustix::fs::FlockOperation::LockShared).is_err() {
            return Some(Hold(file));
        }
        let (held, now) = (file.metadata().ok()?, std::fs::metadata(path).ok()?);
        (held.dev() == now.dev() && held.ino() == now.ino()).then_some(Hold(file))
    }
}

/// Opens the SQLite store at `path`; without `create`, only a file that holds a store opens.
pub(crate) fn open_sqlite(path: &std::path::Path, create: bool) -> Result<DynStore, Failure> {
    match SqliteStore::open_with(path, SqliteOptions::new().create(create)) {
        Ok(store) => Ok(Arc::new(store)),
        Err(error) => Err(Failure::usage(one_line(&format!("--store: cannot open {}: {error}", path.display())))),
    }
}

/// The first 16 bytes of every SQLite database file.
const SQLITE_HEADER: &[u8; 16] = b"SQLite format 3\0";

/// A SQLite file a run made a database of: missing before, or empty.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NewFile {
    path: PathBuf,
    was_empty: bool,
}

impl NewFile {
    /// Puts the file back as it was (the store must be closed; `hold` is this run's): removed,
    /// or emptied (keeping its permissions), and its WAL companions removed — unless another
    /// run, started on the same path after this one made the file, is using it: it holds the
    /// file (its [`Hold`]), or the file holds a session by now.
    pub(crate) async fn undo(&self, hold: Option<Hold>) {
        drop(hold);
        let Ok(file) = std::fs::File::open(&self.path) else { return };
        // Held until the file is gone: a run that opens it meanwhile waits for its hold, then
        // finds the file removed and makes it again.
        let locked = rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive);
        if locked == Err(rustix::io::Errno::WOULDBLOCK) || self.holds_sessions().await {
            return;
        }
        if self.was_empty {
            let _ = std::fs::OpenOptions::new().write(true).truncate(true).open(&self.path);
            remove_companions(&self.path);
        } else {
            remove_sqlite(&self.path);
        }
    }

    /// Whether the database holds any session (or cannot be read, which leaves it alone too).
    async fn holds_sessions(&self) -> bool {
        match SqliteStore::open(&self.path) {
            Ok(store) => store.list_sessions().await.map_or(true, |sessions| !sessions.is_empty()),
            Err(_) => true,
        }
    }
}

/// Removes the SQLite file at `path` and its WAL companions (the store must be closed).
fn remove_sqlite(path: &std::path::Path) {
    let _ = std::fs::remove_file(path);
    remove_companions(path);
}

/// Removes the WAL, shared-memory and journal files beside the SQLite file at `path`.
fn remove_companions(path: &std::path::Path) {
    for suffix in ["-wal", "-shm", "-journal"] {
        let mut companion = path.as_os_str().to_owned();
        companion.push(suffix);
        let _ = std::fs::remove_file(companion);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_memory_and_sqlite_and_names_the_rest() {
        assert_eq!(StoreSpec::parse("memory").unwrap(), StoreSpec::Memory);
        assert_eq!(StoreSpec::parse("sqlite:/tmp/x.db").unwrap(), StoreSpec::Sqlite("/tmp/x.db".into()));
        assert!(StoreSpec::parse("sqlite:").unwrap_err().message.contains("needs a path"));
        assert!(StoreSpec::parse("postgres://x").unwrap_err().message.contains("expected `memory`"));
    }
}
