//! Opening the database: the private file, the checks that leave foreign files untouched, the
//! connection settings.

use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use rusqlite::config::DbConfig;
use rusqlite::{Connection, ErrorCode, OpenFlags};

use crate::error::OpenError;
use crate::options::SqliteOptions;
use crate::schema;

/// Permissions of a database the store creates: owner read and write only. SQLite gives its WAL
/// and shared-memory files the same permissions.
pub(crate) const FILE_MODE: u32 = 0o600;

/// Prepared statements each connection keeps compiled.
const STATEMENT_CACHE: usize = 64;

/// Page cache of the write connection, in KiB: the hot index pages of every active session stay
/// in memory instead of being read back from the file. 4 MiB holds those of about a hundred
/// sessions streaming at once; a larger cache did not write faster (measured with one session
/// streaming a million events) and cost its size in resident memory.
const WRITER_CACHE_KIB: i64 = 4 * 1024;

/// WAL pages (4 KiB each) after which a commit checkpoints the WAL into the database, while the
/// database is opened and migrated (the writer thread then hands checkpoints to
/// [`crate::checkpoint`], with the same bound). Larger than SQLite's default of 1000 so that index
/// pages rewritten by every group commit are copied to the database once per checkpoint rather
/// than every few commits.
const WAL_AUTOCHECKPOINT_PAGES: i64 = crate::checkpoint::WRITER_PAGES as i64;

/// The size the WAL file is truncated back to after a checkpoint, in bytes.
const WAL_SIZE_LIMIT: i64 = 64 * 1024 * 1024;

/// Opens the write connection: creates the file if needed, refuses what is not a store of a
/// known version, switches to WAL and migrates. Nothing is written to a refused file.
///
/// Two connections that read a new (empty) database and then both go on to write it deadlock
/// on SQLite's lock upgrade, which SQLite answers at once with `SQLITE_BUSY`, without waiting
/// on the busy handler: the open that lost is tried again, within the busy timeout, and then
/// finds the store the other made.
pub(crate) fn open_writer(path: &Path, options: &SqliteOptions) -> Result<Connection, OpenError> {
    let deadline = std::time::Instant::now() + options.busy_timeout;
    loop {
        match open_writer_once(path, options) {
            Err(error) if error.is_busy() && std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            // SQLite says only that it cannot open the file, or that it is read-only.
            Err(error)
                if matches!(error.sqlite_code(), Some(ErrorCode::CannotOpen | ErrorCode::ReadOnly))
                    && !writable(directory(path)) =>
            {
                return Err(OpenError::ReadOnlyDirectory { path: path.to_owned(), dir: directory(path).to_owned() });
            }
            // The file itself, in a directory this process may write (its mode, its owner).
            Err(error) if error.sqlite_code() == Some(ErrorCode::CannotOpen) && !writable(path) => {
                return Err(OpenError::ReadOnly { path: path.to_owned() });
            }
            opened => return opened,
        }
    }
}

/// The directory that holds `path`.
fn directory(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

/// Whether this process may write `path` — create files in a directory, write a file — (its
/// permissions, a read-only mount, an immutable file), as the kernel answers `access(2)`.
fn writable(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(path) = std::ffi::CString::new(path.as_os_str().as_bytes()) else { return true };
    // SAFETY: `path` is a NUL-terminated string that lives across the call, which only reads it.
    unsafe { libc::access(path.as_ptr(), libc::W_OK) == 0 }
}

fn open_writer_once(path: &Path, options: &SqliteOptions) -> Result<Connection, OpenError> {
    prepare_file(path, options.create)?;
    let wal_existed = side_file(path, "-wal").exists();
    let mut conn = connect(path, options).map_err(|e| classify(path, e))?;
    let sqlite = |source: rusqlite::Error| OpenError::Sqlite { path: path.to_owned(), source: Box::new(source) };
    // SQLite opens a file it may not write read-only, without a word; nothing is written to it.
    if conn.is_readonly(rusqlite::MAIN_DB).map_err(sqlite)? {
        return Err(OpenError::ReadOnly { path: path.to_owned() });
    }
    // Until the file is known to be a store of a known version, closing this connection must
    // not checkpoint a WAL left by another writer into it.
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true).map_err(sqlite)?;
    // One read transaction, so that the looks `inspect` takes see one schema: read one by one,
    // another opener's migration committing between them made a new store look foreign.
    let found = conn.transaction().and_then(|tx| {
        let found = schema::inspect(&tx)?;
        tx.commit()?;
        Ok(found)
    });
    let checked = found.map_err(|e| classify(path, e)).and_then(|found| match found {
        schema::Found::Empty if !options.create => Err(OpenError::NoStore { path: path.to_owned() }),
        found => schema::check(path, found),
    });
    if let Err(error) = checked {
        if !wal_existed {
            // The WAL is this connection's own and empty: a normal close removes it and the
            // shared-memory file without writing to the database.
            let _ = conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, false);
        }
        return Err(error);
    }
    let mode: String = conn.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0)).map_err(sqlite)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(OpenError::Sqlite {
            path: path.to_owned(),
            source: format!("the file system does not support WAL mode (journal_mode is {mode})").into(),
        });
    }
    conn.pragma_update(None, "synchronous", options.synchronous.pragma_value()).map_err(sqlite)?;
    conn.pragma_update(None, "cache_size", -WRITER_CACHE_KIB).map_err(sqlite)?;
    // Savepoint journals stay in memory.
    conn.pragma_update(None, "temp_store", "MEMORY").map_err(sqlite)?;
    conn.pragma_update(None, "wal_autocheckpoint", WAL_AUTOCHECKPOINT_PAGES).map_err(sqlite)?;
    conn.pragma_update(None, "journal_size_limit", WAL_SIZE_LIMIT).map_err(sqlite)?;
    schema::migrate(&mut conn, path)?;
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, false).map_err(sqlite)?;
    Ok(conn)
}

/// Opens a read connection to an existing store; it refuses writes.
pub(crate) fn open_reader(path: &Path, options: &SqliteOptions) -> rusqlite::Result<Connection> {
    let conn = connect(path, options)?;
    conn.pragma_update(None, "query_only", true)?;
    Ok(conn)
}

pub(crate) fn connect(path: &Path, options: &SqliteOptions) -> rusqlite::Result<Connection> {
    // No SQLITE_OPEN_CREATE: the file was created (private) before, or already existed.
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags)?;
    conn.busy_timeout(options.busy_timeout)?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    Ok(conn)
}

fn classify(path: &Path, error: rusqlite::Error) -> OpenError {
    match error.sqlite_error_code() {
        Some(ErrorCode::NotADatabase) => OpenError::NotSqlite { path: path.to_owned() },
        _ => OpenError::Sqlite { path: path.to_owned(), source: Box::new(error) },
    }
}

/// Creates the file with [`FILE_MODE`] if it does not exist; otherwise checks that it is a
/// regular file (an empty one counts as a new store). Whether it is a SQLite database is for
/// SQLite to read: a descriptor of the file opened and closed here would drop every POSIX lock
/// this process holds on it — those of a store already open on it included, which would let
/// another process take itself for the last one and remove the WAL that store writes.
fn prepare_file(path: &Path, create: bool) -> Result<(), OpenError> {
    let dir = directory(path);
    let io_error = |source: io::Error| OpenError::Io { path: path.to_owned(), source };
    match fs::metadata(dir) {
        Ok(metadata) if metadata.is_dir() => {}
        Ok(_) => return Err(OpenError::MissingDirectory { path: path.to_owned(), dir: dir.to_owned() }),
        Err(e) if matches!(e.kind(), io::ErrorKind::NotFound | io::ErrorKind::NotADirectory) => {
            return Err(OpenError::MissingDirectory { path: path.to_owned(), dir: dir.to_owned() });
        }
        // There, but not for this process (a parent it may not search): said as it is.
        Err(e) => return Err(io_error(e)),
    }
    if create {
        match OpenOptions::new().read(true).write(true).create_new(true).mode(FILE_MODE).open(path) {
            Ok(_) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            // Its mode, its owner, or a file system mounted read-only.
            Err(e)
                if matches!(e.kind(), io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem)
                    && !writable(dir) =>
            {
                return Err(OpenError::ReadOnlyDirectory { path: path.to_owned(), dir: dir.to_owned() });
            }
            Err(e) => return Err(io_error(e)),
        }
    }
    let metadata = match fs::metadata(path) {
        Ok(metadata) => metadata,
        // A link to nothing is not a file a store can be made in, even by an open that may.
        Err(e) if e.kind() == io::ErrorKind::NotFound && fs::symlink_metadata(path).is_ok() => {
            return Err(OpenError::NotAFile { path: path.to_owned() });
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(OpenError::NoStore { path: path.to_owned() }),
        Err(e) => return Err(io_error(e)),
    };
    if !metadata.is_file() {
        return Err(OpenError::NotAFile { path: path.to_owned() });
    }
    if metadata.len() == 0 && !create {
        return Err(OpenError::NoStore { path: path.to_owned() });
    }
    Ok(())
}

/// `path` with `suffix` appended to its file name (SQLite's `-wal` and `-shm` files).
pub(crate) fn side_file(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// The path as given, made absolute against the current directory so later connections do not
/// depend on it.
pub(crate) fn absolute(path: &Path) -> Result<PathBuf, OpenError> {
    std::path::absolute(path).map_err(|source| OpenError::Io { path: path.to_owned(), source })
}
