#![doc = include_str!("../README.md")]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod checkpoint;
mod error;
mod events;
mod open;
mod options;
mod reader;
mod rows;
mod schema;
mod sync;
mod v3;
mod writer;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use agent_core::store::{EventQuery, QueuedWrite, RequestQuery, Store, StoreError, WriteBatch};
use agent_core::{Event, Request, RequestId, SessionId, SessionSnapshot, Turn, TurnId};
use async_trait::async_trait;
use tokio::sync::{mpsc, oneshot};

pub use error::OpenError;
pub use options::{DEFAULT_BUSY_TIMEOUT, DEFAULT_WRITE_LOCK_WAIT, SqliteOptions, Synchronous};
pub use schema::SCHEMA_VERSION;

use reader::Readers;
use rows::Prepared;
use writer::{Job, WriterThread};

/// The durable SQLite [`Store`]. Cheap to clone; every clone uses the same writer thread and
/// read connections. See the crate docs for the durability model.
///
/// Dropping the last clone closes the write queue, waits for the queued writes to commit, and
/// closes the database.
#[derive(Clone)]
pub struct SqliteStore {
    shared: Arc<Shared>,
}

/// Fields drop in order: read connections close, the write queue closes, then the writer thread
/// drains it and is joined.
struct Shared {
    path: PathBuf,
    options: SqliteOptions,
    readers: Arc<Readers>,
    jobs: mpsc::Sender<Job>,
    _writer: WriterThread,
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.readers.close();
    }
}

impl SqliteStore {
    /// Opens the store at `path` with the default [`SqliteOptions`], creating the file (mode
    /// `0600`) and its schema if it does not exist.
    ///
    /// Refuses, leaving the file untouched: a path in a missing directory
    /// ([`OpenError::MissingDirectory`]), a file that is not SQLite ([`OpenError::NotSqlite`]),
    /// another application's SQLite database ([`OpenError::NotAStore`]), a store written by a
    /// newer version ([`OpenError::NewerSchema`]), a file this process cannot write
    /// ([`OpenError::ReadOnly`]) or in a directory it cannot write
    /// ([`OpenError::ReadOnlyDirectory`]).
    ///
    /// Opening does blocking file I/O; from async code call it through
    /// `tokio::task::spawn_blocking` if a stall matters: a few milliseconds usually, up to the
    /// open's 5 s wait when another process holds the write lock, and longer when the file
    /// needs a schema migration (moving every event to the version 3 form rewrites the events
    /// table).
    pub fn open(path: impl AsRef<Path>) -> Result<SqliteStore, OpenError> {
        Self::open_with(path, SqliteOptions::default())
    }

    /// Opens the store at `path` with `options`. See [`SqliteStore::open`].
    pub fn open_with(path: impl AsRef<Path>, options: SqliteOptions) -> Result<SqliteStore, OpenError> {
        let path = open::absolute(path.as_ref())?;
        let conn = open::open_writer(&path, &options)?;
        let (jobs, writer) = writer::spawn(conn, &path, &options).map_err(OpenError::WriterThread)?;
        let readers = Arc::new(Readers::new(path.clone(), options.clone()));
        tracing::debug!(path = %path.display(), ?options, "SQLite store opened");
        Ok(SqliteStore { shared: Arc::new(Shared { path, options, readers, jobs, _writer: writer }) })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// The options the store was opened with.
    pub fn options(&self) -> &SqliteOptions {
        &self.shared.options
    }

    /// Makes every later write fail with [`StoreError::WriteRefused`] (`refuse == true`) or
    /// accepts writes again (`false`). Reads keep working.
    ///
    /// It switches the write connection to `PRAGMA query_only`, so a write fails the way it
    /// does on a read-only database file. Use it to freeze the store for maintenance or to
    /// exercise a session's [`StoreFailurePolicy`](agent_core::StoreFailurePolicy). Writes
    /// queued before this call are committed first.
    pub async fn refuse_writes(&self, refuse: bool) -> Result<(), StoreError> {
        let (reply, answer) = oneshot::channel();
        self.send(Job::RefuseWrites(refuse, reply), answer).await
    }

    async fn submit(&self, write: Prepared) -> Result<(), StoreError> {
        let (reply, answer) = oneshot::channel();
        self.send(Job::Write(Box::new(write), reply), answer).await
    }

    /// Hands `write` to the writer thread at once: `None` when its queue is full.
    fn queue(&self, write: Prepared) -> Option<QueuedWrite> {
        let (reply, answer) = oneshot::channel();
        match self.shared.jobs.try_send(Job::Write(Box::new(write), reply)) {
            Ok(()) => Some(Box::pin(async move { answer.await.map_err(|_| writer_stopped())? })),
            Err(mpsc::error::TrySendError::Full(_)) => None,
            Err(mpsc::error::TrySendError::Closed(_)) => Some(Box::pin(std::future::ready(Err(writer_stopped())))),
        }
    }

    async fn send(&self, job: Job, answer: oneshot::Receiver<Result<(), StoreError>>) -> Result<(), StoreError> {
        self.shared.jobs.send(job).await.map_err(|_| writer_stopped())?;
        answer.await.map_err(|_| writer_stopped())?
    }

    async fn read<T, F>(&self, read: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&rusqlite::Connection) -> Result<T, StoreError> + Send + 'static,
    {
        self.shared.readers.run(read).await
    }
}

fn writer_stopped() -> StoreError {
    StoreError::WriteRefused("the store's writer thread has stopped".into())
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.shared.path)
            .field("options", &self.shared.options)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Store for SqliteStore {
    async fn save_session(&self, snapshot: &SessionSnapshot) -> Result<(), StoreError> {
        self.submit(Prepared::snapshot(snapshot)?).await
    }

    async fn fetch_session(&self, id: &SessionId) -> Result<Option<SessionSnapshot>, StoreError> {
        let id = id.clone();
        self.read(move |conn| {
            let what = reader::snapshot_name(id.as_str());
            reader::one(conn, &what, "SELECT snapshot FROM sessions WHERE id = ?1", [id.as_str()])
        })
        .await
    }

    async fn list_sessions(&self) -> Result<Vec<SessionSnapshot>, StoreError> {
        self.read(|conn| reader::all(conn, reader::snapshot_name, "SELECT snapshot, id FROM sessions ORDER BY id", []))
            .await
    }

    /// Refuses an open snapshot ([`SessionSnapshot::is_open`]) with [`StoreError::SessionLive`];
    /// the check and the delete run in the same transaction.
    async fn delete_session(&self, id: &SessionId) -> Result<(), StoreError> {
        self.submit(Prepared::delete(id.clone())).await
    }

    async fn save_turn(&self, turn: &Turn) -> Result<(), StoreError> {
        let mut write = Prepared::new(turn.session_id.clone());
        write.push_turn(turn)?;
        self.submit(write).await
    }

    async fn fetch_turn(&self, session: &SessionId, turn: &TurnId) -> Result<Option<Turn>, StoreError> {
        let (session, turn) = (session.clone(), turn.clone());
        self.read(move |conn| {
            reader::one(
                conn,
                &reader::turn_name(session.as_str(), turn.as_str()),
                "SELECT record FROM turns WHERE session_id = ?1 AND turn_id = ?2 AND record IS NOT NULL",
                [session.as_str(), turn.as_str()],
            )
        })
        .await
    }

    async fn list_turns(&self, session: &SessionId) -> Result<Vec<Turn>, StoreError> {
        let session = session.clone();
        self.read(move |conn| {
            reader::all(
                conn,
                |turn| reader::turn_name(session.as_str(), turn),
                "SELECT record, turn_id FROM turns WHERE session_id = ?1 AND record IS NOT NULL ORDER BY position",
                [session.as_str()],
            )
        })
        .await
    }

    async fn save_request(&self, request: &Request) -> Result<(), StoreError> {
        let mut write = Prepared::new(request.session_id.clone());
        write.push_request(request)?;
        self.submit(write).await
    }

    async fn fetch_request(&self, session: &SessionId, request: &RequestId) -> Result<Option<Request>, StoreError> {
        let (session, request) = (session.clone(), request.clone());
        self.read(move |conn| {
            reader::one(
                conn,
                &reader::request_name(session.as_str(), request.as_str()),
                "SELECT record FROM requests WHERE session_id = ?1 AND request_id = ?2",
                [session.as_str(), request.as_str()],
            )
        })
        .await
    }

    async fn list_requests(&self, session: &SessionId) -> Result<Vec<Request>, StoreError> {
        let session = session.clone();
        self.read(move |conn| {
            reader::all(
                conn,
                |request| reader::request_name(session.as_str(), request),
                "SELECT record, request_id FROM requests WHERE session_id = ?1 ORDER BY position",
                [session.as_str()],
            )
        })
        .await
    }

    /// One indexed query: `requests_by_turn` or `requests_by_status`.
    async fn read_requests(&self, session: &SessionId, query: &RequestQuery) -> Result<Vec<Request>, StoreError> {
        let (session, query) = (session.clone(), query.clone());
        self.read(move |conn| reader::requests(conn, session.as_str(), &query)).await
    }

    async fn append_events(&self, session: &SessionId, events: &[Arc<Event>]) -> Result<(), StoreError> {
        let mut write = Prepared::new(session.clone());
        write.push_events(events)?;
        self.submit(write).await
    }

    async fn read_events(&self, session: &SessionId, query: &EventQuery) -> Result<Vec<Arc<Event>>, StoreError> {
        let (session, query) = (session.clone(), query.clone());
        self.read(move |conn| reader::events(conn, &session, &query)).await
    }

    async fn latest_seq(&self, session: &SessionId) -> Result<Option<u64>, StoreError> {
        let session = session.clone();
        self.read(move |conn| reader::latest_seq(conn, session.as_str())).await
    }

    async fn last_turn_event(&self, session: &SessionId, turn: &TurnId) -> Result<Option<Arc<Event>>, StoreError> {
        let (session, turn) = (session.clone(), turn.clone());
        self.read(move |conn| reader::last_event_of_turn(conn, &session, &turn)).await
    }

    /// Commits the whole batch in one savepoint of the writer's current group transaction:
    /// all of it lands or none of it does, and a failing batch does not affect the other
    /// sessions' batches committed in the same transaction. Returns after `COMMIT`.
    async fn write(&self, batch: &WriteBatch) -> Result<(), StoreError> {
        let Some(session) = &batch.session_id else { return Ok(()) };
        if batch.is_empty() {
            return Ok(());
        }
        self.submit(Prepared::batch(session, batch)?).await
    }

    /// Encodes the batch on the caller's thread and queues it for the writer thread, which
    /// commits writes in the order they were queued; `None` when the queue is full. A batch
    /// queued with `follows` is refused unapplied when the session's write before it failed.
    fn enqueue(&self, batch: &WriteBatch, follows: bool) -> Option<QueuedWrite> {
        let done = |result| -> Option<QueuedWrite> { Some(Box::pin(std::future::ready(result))) };
        let Some(session) = &batch.session_id else { return done(Ok(())) };
        if batch.is_empty() {
            return done(Ok(()));
        }
        // A batch that cannot be encoded still goes through the queue, so that the writer
        // refuses what is queued behind it.
        let write = Prepared::batch(session, batch)
            .unwrap_or_else(|error| Prepared { refused: Some(error), ..Prepared::new(session.clone()) });
        self.queue(Prepared { follows, ..write })
    }
}
