//! `--store memory|sqlite:PATH`: parsed first, opened only once every other input checked out,
//! so a bad command line writes nothing.

use std::path::PathBuf;
use std::sync::Arc;

use agent_harness::DynStore;
use agent_harness::stores::memory::MemoryStore;
use agent_harness::stores::sqlite::SqliteStore;

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
                None => Err(Failure::usage(format!("--store `{text}`: expected `memory` or `sqlite:PATH`"))),
            },
        }
    }

    /// Parses a store that must be a SQLite file that exists (for reading a history).
    pub(crate) fn existing_sqlite(text: &str) -> Result<PathBuf, Failure> {
        match StoreSpec::parse(text)? {
            StoreSpec::Sqlite(path) if path.is_file() => Ok(path),
            StoreSpec::Sqlite(path) => {
                Err(Failure::usage(format!("--store: cannot open {}: no such file", path.display())))
            }
            StoreSpec::Memory => Err(Failure::usage("--store memory holds nothing after a run ends: use sqlite:PATH")),
        }
    }

    /// The SQLite file opening will create, if it does not exist yet: a run whose session never
    /// starts removes it again, so bad input leaves nothing behind.
    pub(crate) fn new_file(&self) -> Option<PathBuf> {
        match self {
            StoreSpec::Sqlite(path) if !path.exists() => Some(path.clone()),
            _ => None,
        }
    }

    /// Opens the store (creating a SQLite file that does not exist yet).
    pub(crate) fn open(&self) -> Result<DynStore, Failure> {
        match self {
            StoreSpec::Memory => Ok(Arc::new(MemoryStore::new())),
            StoreSpec::Sqlite(path) => open_sqlite(path),
        }
    }
}

/// Opens the SQLite store at `path`.
pub(crate) fn open_sqlite(path: &std::path::Path) -> Result<DynStore, Failure> {
    match SqliteStore::open(path) {
        Ok(store) => Ok(Arc::new(store)),
        Err(error) => Err(Failure::usage(one_line(&format!("--store: cannot open {}: {error}", path.display())))),
    }
}

/// Removes the SQLite file at `path` and its WAL companions (the store must be closed).
pub(crate) fn remove_sqlite(path: &std::path::Path) {
    let _ = std::fs::remove_file(path);
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
