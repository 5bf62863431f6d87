//! Errors at open, and the mapping of SQLite failures to [`StoreError`].

use std::io;
use std::path::PathBuf;

use agent_core::StoreError;
use rusqlite::ErrorCode;

/// Why [`SqliteStore::open`](crate::SqliteStore::open) refused a path. In every case the file at
/// the path is left as it was.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The directory that should hold the database does not exist.
    #[error("cannot create the store {}: directory {} does not exist", path.display(), dir.display())]
    MissingDirectory {
        /// The database path.
        path: PathBuf,
        /// The missing directory.
        dir: PathBuf,
    },
    /// The path names something other than a regular file (a directory, a socket, …).
    #[error("{} is not a regular file", path.display())]
    NotAFile {
        /// The database path.
        path: PathBuf,
    },
    /// The file exists but is not a SQLite database.
    #[error("{} is not a SQLite database", path.display())]
    NotSqlite {
        /// The database path.
        path: PathBuf,
    },
    /// Opened with [`SqliteOptions::create`](crate::SqliteOptions::create) `false`, the path
    /// holds no store yet: no file, an empty one, or a SQLite database without tables.
    #[error("{} holds no agent-harness store (and this open may not make one)", path.display())]
    NoStore {
        /// The database path.
        path: PathBuf,
    },
    /// The file is a SQLite database that holds other tables but no agent-harness store.
    #[error("{} is a SQLite database of another application (it holds no agent-harness store)", path.display())]
    NotAStore {
        /// The database path.
        path: PathBuf,
    },
    /// The store was written by a newer version of this crate.
    #[error(
        "{} has store schema version {found}, but this build of agent-store-sqlite knows versions up to \
         {supported}; open it with a newer build",
        path.display()
    )]
    NewerSchema {
        /// The database path.
        path: PathBuf,
        /// The version in the file.
        found: u32,
        /// The newest version this build knows.
        supported: u32,
    },
    /// The file cannot be written by this process (its permissions, a read-only mount): SQLite
    /// would open it read-only, and every write would fail after the store was taken on.
    #[error(
        "{} cannot be written by this process (its permissions, or a read-only file system); a store must be \
         writable",
        path.display()
    )]
    ReadOnly {
        /// The database path.
        path: PathBuf,
    },
    /// The directory that holds the database cannot be written by this process: SQLite keeps
    /// its `-wal` and `-shm` files beside the database, and cannot open it without them.
    #[error(
        "cannot open the store {}: directory {} cannot be written by this process, and SQLite keeps its -wal and \
         -shm files beside the store",
        path.display(),
        dir.display()
    )]
    ReadOnlyDirectory {
        /// The database path.
        path: PathBuf,
        /// Its directory.
        dir: PathBuf,
    },
    /// Reading or creating the file failed.
    #[error("cannot access {}: {source}", path.display())]
    Io {
        /// The database path.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// SQLite failed while opening, configuring or migrating the database.
    #[error("cannot open the SQLite store {}: {source}", path.display())]
    Sqlite {
        /// The database path.
        path: PathBuf,
        /// SQLite's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The writer thread could not be started.
    #[error("cannot start the store's writer thread: {0}")]
    WriterThread(#[source] io::Error),
}

impl OpenError {
    /// SQLite found the database locked by another connection.
    pub(crate) fn is_busy(&self) -> bool {
        self.sqlite_code() == Some(ErrorCode::DatabaseBusy)
    }

    /// SQLite's error code, for a failure SQLite reported.
    pub(crate) fn sqlite_code(&self) -> Option<ErrorCode> {
        let OpenError::Sqlite { source, .. } = self else { return None };
        source.downcast_ref::<rusqlite::Error>().and_then(rusqlite::Error::sqlite_error_code)
    }
}

/// A store that could not be opened, as a shared store error: [`StoreError::Unavailable`] when
/// another connection held the database locked (retrying may succeed), else
/// [`StoreError::Backend`] holding the [`OpenError`] (to downcast to).
impl From<OpenError> for StoreError {
    fn from(error: OpenError) -> StoreError {
        if error.is_busy() { StoreError::Unavailable(error.to_string()) } else { StoreError::Backend(Box::new(error)) }
    }
}

/// So that `SqliteStore::open(path)?` works in a function returning the harness's `Result`:
/// [`agent_core::Error::Store`] with the [`StoreError`] above.
impl From<OpenError> for agent_core::Error {
    fn from(error: OpenError) -> agent_core::Error {
        agent_core::Error::Store(error.into())
    }
}

/// Maps a SQLite failure to the shared store error a session acts on.
pub(crate) fn store_error(error: &rusqlite::Error) -> StoreError {
    let message = error.to_string();
    match error.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => StoreError::Unavailable(message),
        Some(ErrorCode::ReadOnly | ErrorCode::DiskFull | ErrorCode::PermissionDenied | ErrorCode::CannotOpen) => {
            StoreError::WriteRefused(message)
        }
        Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase) => StoreError::Corrupt(message),
        _ => match error {
            rusqlite::Error::FromSqlConversionFailure(..)
            | rusqlite::Error::IntegralValueOutOfRange(..)
            | rusqlite::Error::InvalidColumnType(..)
            | rusqlite::Error::Utf8Error(..) => StoreError::Corrupt(message),
            _ => StoreError::Backend(message.into()),
        },
    }
}

/// A stored JSON document that does not decode. `what` names the row (see
/// [`snapshot_name`](crate::reader::snapshot_name) and its neighbours), so that a caller knows
/// which one to repair or remove.
pub(crate) fn corrupt_json(what: &str, error: &serde_json::Error) -> StoreError {
    StoreError::Corrupt(format!("stored {what} is not valid: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(code: i32) -> rusqlite::Error {
        rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None)
    }

    #[test]
    fn sqlite_codes_map_to_actionable_store_errors() {
        use rusqlite::ffi;
        assert!(matches!(store_error(&failure(ffi::SQLITE_BUSY)), StoreError::Unavailable(_)));
        assert!(matches!(store_error(&failure(ffi::SQLITE_LOCKED)), StoreError::Unavailable(_)));
        assert!(matches!(store_error(&failure(ffi::SQLITE_READONLY)), StoreError::WriteRefused(_)));
        assert!(matches!(store_error(&failure(ffi::SQLITE_FULL)), StoreError::WriteRefused(_)));
        assert!(matches!(store_error(&failure(ffi::SQLITE_CORRUPT)), StoreError::Corrupt(_)));
        assert!(matches!(store_error(&failure(ffi::SQLITE_NOTADB)), StoreError::Corrupt(_)));
        assert!(matches!(store_error(&failure(ffi::SQLITE_IOERR)), StoreError::Backend(_)));
        assert!(store_error(&failure(ffi::SQLITE_BUSY)).is_retryable());
    }
}
