//! Typed options of a [`SqliteStore`](crate::SqliteStore).

use std::time::Duration;

/// How long a connection waits for a lock held by another connection before a call fails with
/// `StoreError::Unavailable`.
pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a write waits for the database's write lock while another connection holds it
/// (another process's transaction, a `VACUUM`) before it fails with `StoreError::Unavailable`.
pub const DEFAULT_WRITE_LOCK_WAIT: Duration = Duration::from_secs(60);

/// When SQLite forces a commit to stable storage (`PRAGMA synchronous`; the store always runs in
/// WAL mode).
///
/// Both settings keep every acknowledged write across a crash of the process (SIGKILL, panic,
/// OOM kill): a write is acknowledged only after `COMMIT` returned, and a committed transaction
/// is in the WAL file, which the next open replays. They differ for a crash of the machine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Synchronous {
    /// `fsync` the WAL at every commit: an acknowledged write also survives a power loss or an
    /// operating-system crash. With group commit the cost is one `fsync` per group of writes,
    /// not per event. The default. The sync runs after `COMMIT`, so other readers may see a
    /// commit before it is durable (see the crate README).
    #[default]
    Full,
    /// `fsync` only at checkpoints: an acknowledged write survives a process crash, but the most
    /// recent commits can roll back after a power loss or an operating-system crash (the database
    /// stays consistent).
    Normal,
}

impl Synchronous {
    pub(crate) fn pragma_value(self) -> &'static str {
        match self {
            Synchronous::Full => "FULL",
            Synchronous::Normal => "NORMAL",
        }
    }
}

/// Options of a [`SqliteStore`](crate::SqliteStore). `SqliteOptions::default()` is what
/// [`SqliteStore::open`](crate::SqliteStore::open) uses.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SqliteOptions {
    /// Commit durability; default [`Synchronous::Full`].
    pub synchronous: Synchronous,
    /// How long a connection waits on another connection's lock; default
    /// [`DEFAULT_BUSY_TIMEOUT`].
    pub busy_timeout: Duration,
    /// How long a write waits for the write lock another connection holds, in waits of
    /// `busy_timeout`, before it fails; default [`DEFAULT_WRITE_LOCK_WAIT`]. A failed write ends
    /// the durability of the sessions it carried (their `StoreFailurePolicy` applies), while a
    /// waiting one only holds them back: their CLIs wait on their output meanwhile.
    pub write_lock_wait: Duration,
    /// Commit the writes queued by many sessions in one transaction (one `fsync` for all of
    /// them); default `true`. With `false` every write commits in a transaction of its own.
    pub group_commit: bool,
    /// Whether opening may make a store: create a missing file, or the store's tables in an
    /// empty one; default `true`. With `false` only a file that holds a store opens (a reader
    /// of what another process stored); anything else is [`OpenError::NoStore`] and left as
    /// it was.
    ///
    /// [`OpenError::NoStore`]: crate::OpenError::NoStore
    pub create: bool,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            synchronous: Synchronous::Full,
            busy_timeout: DEFAULT_BUSY_TIMEOUT,
            write_lock_wait: DEFAULT_WRITE_LOCK_WAIT,
            group_commit: true,
            create: true,
        }
    }
}

impl SqliteOptions {
    /// The default options.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the commit durability.
    pub fn synchronous(mut self, synchronous: Synchronous) -> Self {
        self.synchronous = synchronous;
        self
    }

    /// Sets how long a connection waits on another connection's lock.
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }

    /// Sets how long a write waits for the write lock another connection holds.
    pub fn write_lock_wait(mut self, wait: Duration) -> Self {
        self.write_lock_wait = wait;
        self
    }

    /// Turns group commit on or off.
    pub fn group_commit(mut self, enabled: bool) -> Self {
        self.group_commit = enabled;
        self
    }

    /// Whether opening may make a store (see [`SqliteOptions::create`]).
    pub fn create(mut self, create: bool) -> Self {
        self.create = create;
        self
    }
}
