//! The single writer: a dedicated thread that owns the write connection and commits queued
//! writes of many sessions together (group commit).
//!
//! Each write runs inside its own `SAVEPOINT` within the group's transaction, so a write that
//! fails (a conflict, an unknown session) is rolled back alone and the others still commit. A
//! write is acknowledged only after `COMMIT` returned and, with `Synchronous::Full`, after the
//! sync thread synced the WAL ([`crate::sync`]). Writes are applied in the order they were
//! queued; one queued behind a failed write of its session (`Prepared::follows`) is refused
//! unapplied.

use std::collections::HashSet;
use std::path::Path;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use agent_core::{SessionId, SessionSnapshot, StoreError};
use rusqlite::{Connection, ErrorCode, OptionalExtension, params};
use tokio::sync::{mpsc, oneshot};

use crate::checkpoint::Checkpointer;
use crate::error::{corrupt_json, store_error};
use crate::options::{SqliteOptions, Synchronous};
use crate::rows::{Clear, Prepared};
use crate::sync::Syncer;

mod append;

use append::Append;

/// Writes waiting for the writer thread. When full, a write waits for room: back-pressure on
/// the sessions' flush tasks, which already accumulate new events in their next batch.
const WRITE_QUEUE_CAPACITY: usize = 1024;

/// The most writes committed in one transaction; the rest of the queue forms the next group.
const MAX_GROUP_WRITES: usize = 512;

/// What a write is answered with.
pub(crate) type Reply = oneshot::Sender<Result<(), StoreError>>;

/// A message to the writer thread.
#[derive(Debug)]
pub(crate) enum Job {
    /// Commit this write.
    Write(Box<Prepared>, Reply),
    /// Switch the connection to refusing writes (`PRAGMA query_only`), or back.
    RefuseWrites(bool, Reply),
}

/// Joins the writer thread when dropped, after the job queue closed and drained.
#[derive(Debug)]
pub(crate) struct WriterThread(Option<JoinHandle<()>>);

impl Drop for WriterThread {
    fn drop(&mut self) {
        if let Some(thread) = self.0.take()
            && thread.join().is_err()
        {
            tracing::error!("the SQLite store's writer thread panicked");
        }
    }
}

/// Starts the writer thread on `conn`, the write connection to `path`.
pub(crate) fn spawn(
    conn: Connection,
    path: &Path,
    options: &SqliteOptions,
) -> std::io::Result<(mpsc::Sender<Job>, WriterThread)> {
    let (tx, rx) = mpsc::channel(WRITE_QUEUE_CAPACITY);
    let max_group = if options.group_commit { MAX_GROUP_WRITES } else { 1 };
    let (path, options) = (path.to_owned(), options.clone());
    let thread = std::thread::Builder::new()
        .name("agent-store-sqlite-writer".into())
        .spawn(move || run(conn, &path, &options, rx, max_group))?;
    Ok((tx, WriterThread(Some(thread))))
}

/// Receives jobs until every sender is gone, then stops the checkpoint thread and closes the
/// connection (which checkpoints the WAL when it is the last one).
fn run(mut conn: Connection, path: &Path, options: &SqliteOptions, mut rx: mpsc::Receiver<Job>, max_group: usize) {
    let checkpointer = Checkpointer::start(&mut conn, path, options);
    let syncer = sync_apart(&conn, options);
    let mut file = FileIdentity::of(path);
    let mut group: Vec<(Box<Prepared>, Reply)> = Vec::with_capacity(max_group);
    let mut failed = Failed::default();
    let mut lock = LockWait { wait: options.write_lock_wait, ran_out: false };
    let mut next = rx.blocking_recv();
    while let Some(job) = next.take() {
        match job {
            Job::RefuseWrites(refuse, reply) => {
                let result = conn.pragma_update(None, "query_only", refuse).map_err(|e| store_error(&e));
                let _ = reply.send(result);
            }
            Job::Write(write, reply) => {
                group.push((write, reply));
                // Take what else is queued; a control job ends the group and runs after it.
                while group.len() < max_group {
                    match rx.try_recv() {
                        Ok(Job::Write(write, reply)) => group.push((write, reply)),
                        Ok(control) => {
                            next = Some(control);
                            break;
                        }
                        Err(_) => break,
                    }
                }
                commit_group(&conn, &mut group, &mut failed, syncer.as_ref(), &mut file, &mut lock);
            }
        }
        if next.is_none() {
            next = rx.blocking_recv();
        }
    }
    // Answers what waits for a sync first.
    drop(syncer);
    drop(checkpointer);
    drop(conn);
}

/// With [`Synchronous::Full`], the WAL synced by a thread of its own rather than inside `COMMIT`
/// (see [`crate::sync`]): the writer's connection switches to `NORMAL`. `None` keeps SQLite's own
/// sync at commit.
fn sync_apart(conn: &Connection, options: &SqliteOptions) -> Option<Syncer> {
    if options.synchronous != Synchronous::Full {
        return None;
    }
    // The database's name as SQLite resolved it: its WAL is that name with `-wal`.
    let database = conn.path().filter(|path| !path.is_empty())?;
    let syncer = Syncer::start(Path::new(database))?;
    match conn.pragma_update(None, "synchronous", Synchronous::Normal.pragma_value()) {
        Ok(()) => Some(syncer),
        Err(error) => {
            tracing::warn!(%error, "the WAL cannot be synced apart; SQLite syncs it at commit");
            None
        }
    }
}

/// The sessions whose latest write failed: a write queued behind it (`Prepared::follows`) is
/// refused without being applied, so a failed write never leaves a gap in a journal.
#[derive(Debug, Default)]
struct Failed(HashSet<SessionId>);

impl Failed {
    /// Why `write` must not be applied, if it must not: it follows a failed write, or it could
    /// not be encoded.
    fn refusal(&self, write: &Prepared) -> Option<StoreError> {
        if write.follows && self.0.contains(&write.session) {
            return Some(StoreError::WriteRefused(format!(
                "the write of session `{}` queued before this one failed, so this one was not applied",
                write.session
            )));
        }
        write.refused.as_ref().map(StoreError::replicate)
    }

    fn record(&mut self, session: &SessionId, ok: bool) {
        if ok {
            self.0.remove(session);
        } else if !self.0.contains(session) {
            self.0.insert(session.clone());
        }
    }
}

/// The database file the writer opened and its write-ahead log, checked before every group:
/// SQLite in WAL mode goes on committing to a file that was deleted (or renamed, or replaced by
/// another) while open — the database, or the `-wal` file every commit goes to first — and
/// those writes are gone once the connection closes or the process dies. From the first time
/// either path no longer names the file the connection has open, every write is refused.
struct FileIdentity {
    path: std::path::PathBuf,
    wal: std::path::PathBuf,
    /// Device and inode at open; `None` when they could not be read then (nothing is checked).
    opened: Option<(u64, u64)>,
    /// The WAL's, from the first time it was seen (SQLite makes it at the first transaction
    /// and keeps it while a connection is open).
    wal_seen: Option<(u64, u64)>,
    gone: Option<&'static str>,
}

impl FileIdentity {
    fn of(path: &Path) -> Self {
        let wal = crate::open::side_file(path, "-wal");
        let wal_seen = Self::identity(&wal);
        FileIdentity { path: path.to_owned(), wal, opened: Self::identity(path), wal_seen, gone: None }
    }

    fn identity(path: &Path) -> Option<(u64, u64)> {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
    }

    /// Why no write may be committed any more, if a file is gone.
    fn refusal(&mut self) -> Option<StoreError> {
        let opened = self.opened?;
        if self.gone.is_none() {
            if Self::identity(&self.path) != Some(opened) {
                self.gone = Some("database file");
            } else {
                let wal = Self::identity(&self.wal);
                match self.wal_seen {
                    Some(seen) if wal != Some(seen) => self.gone = Some("write-ahead log"),
                    Some(_) => {}
                    None => self.wal_seen = wal,
                }
            }
        }
        self.gone.map(|what| {
            StoreError::WriteRefused(format!(
                "the {what} of {} was deleted or replaced while open: nothing more is written to it",
                self.path.display()
            ))
        })
    }
}

/// Commits a group and answers every write in it: at once, or with a `syncer` once the WAL is
/// synced.
fn commit_group(
    conn: &Connection,
    group: &mut Vec<(Box<Prepared>, Reply)>,
    failed: &mut Failed,
    syncer: Option<&Syncer>,
    file: &mut FileIdentity,
    lock: &mut LockWait,
) {
    let results = match file.refusal().or_else(|| syncer.and_then(Syncer::refusal)) {
        Some(refused) => group.iter().map(|_| Err(refused.replicate())).collect(),
        None => run_group(conn, group, failed, lock),
    };
    for ((write, _), result) in group.iter().zip(&results) {
        failed.record(&write.session, result.is_ok());
    }
    let answers = group.drain(..).map(|(_, reply)| reply).zip(results);
    match syncer {
        Some(syncer) => syncer.answer_after_sync(answers.collect()),
        None => {
            for (reply, result) in answers {
                // A caller that went away no longer needs the answer.
                let _ = reply.send(result);
            }
        }
    }
}

/// Runs the group's transaction. Returns one result per write. `failed` is updated as the
/// writes apply, so a write refused or failed in the group refuses the one queued behind it.
fn run_group(
    conn: &Connection,
    group: &[(Box<Prepared>, Reply)],
    failed: &mut Failed,
    lock: &mut LockWait,
) -> Vec<Result<(), StoreError>> {
    let every = |error: &StoreError| group.iter().map(|_| Err(error.replicate())).collect();
    if let Err(error) = begin(conn, lock) {
        return every(&store_error(&error));
    }
    let mut results = Vec::with_capacity(group.len());
    for (write, _) in group {
        if let Some(refused) = failed.refusal(write) {
            failed.record(&write.session, false);
            results.push(Err(refused));
            continue;
        }
        match apply_isolated(conn, write) {
            Ok(result) => {
                failed.record(&write.session, result.is_ok());
                results.push(result);
            }
            Err(error) => {
                // The transaction itself is lost: nothing of the group is stored.
                rollback(conn);
                return every(&error);
            }
        }
    }
    if let Err(error) = exec(conn, "COMMIT") {
        let error = store_error(&error);
        rollback(conn);
        return results.into_iter().map(|r| r.and_then(|()| Err(error.replicate()))).collect();
    }
    results
}

/// How long a group waits for the write lock another connection holds
/// ([`SqliteOptions::write_lock_wait`]): once a wait ran out, the groups after it fail at the
/// busy timeout until one gets the lock again — a lock held for good costs one wait, not one
/// per queued group (dropping the store waits for the writer).
pub(crate) struct LockWait {
    wait: Duration,
    ran_out: bool,
}

/// Begins a group's transaction, taking the write lock: while another connection holds it past
/// the busy timeout, tries again within the [`LockWait`]. Nothing is applied before, so the
/// group waits whole; the writes queued behind it wait too.
fn begin(conn: &Connection, lock: &mut LockWait) -> rusqlite::Result<()> {
    let wait = if lock.ran_out { Duration::ZERO } else { lock.wait };
    let deadline = Instant::now() + wait;
    let mut warned = false;
    loop {
        match exec(conn, "BEGIN IMMEDIATE") {
            Err(error)
                if matches!(error.sqlite_error_code(), Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)) =>
            {
                if Instant::now() >= deadline {
                    lock.ran_out = true;
                    return Err(error);
                }
                if !std::mem::replace(&mut warned, true) {
                    tracing::warn!(?wait, "another connection holds the store's write lock; writes wait for it");
                }
                std::thread::sleep(LOCK_RETRY);
            }
            begun => {
                lock.ran_out &= begun.is_err();
                return begun;
            }
        }
    }
}

impl LockWait {
    /// No wait beyond the busy timeout.
    #[cfg(test)]
    fn none() -> Self {
        LockWait { wait: Duration::ZERO, ran_out: false }
    }
}

/// The pause between tries for the write lock, beside the busy timeout each try waits.
const LOCK_RETRY: Duration = Duration::from_millis(10);

fn rollback(conn: &Connection) {
    if !conn.is_autocommit()
        && let Err(error) = conn.execute_batch("ROLLBACK")
    {
        tracing::error!(%error, "rolling back a failed store transaction failed");
    }
}

/// Applies one write inside a savepoint, so that on failure it is undone alone. The outer `Err`
/// means the group's transaction is lost: SQLite rolled it back (an I/O error, a full disk) or
/// the savepoint statements failed.
fn apply_isolated(conn: &Connection, write: &Prepared) -> Result<Result<(), StoreError>, StoreError> {
    let sql = |e: rusqlite::Error| store_error(&e);
    exec(conn, "SAVEPOINT write").map_err(sql)?;
    match apply(conn, write) {
        Ok(()) => {
            exec(conn, "RELEASE write").map_err(sql)?;
            Ok(Ok(()))
        }
        Err(error) if conn.is_autocommit() => Err(error),
        Err(error) => {
            exec(conn, "ROLLBACK TO write").and_then(|()| exec(conn, "RELEASE write")).map_err(sql)?;
            Ok(Err(error))
        }
    }
}

/// Runs a statement without parameters through the statement cache.
fn exec(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(drop)
}

/// Applies a write's parts in the order of the `Store::write` contract.
fn apply(conn: &Connection, write: &Prepared) -> Result<(), StoreError> {
    let sql = |e: rusqlite::Error| store_error(&e);
    let session = write.session.as_str();
    if let Some(expect) = &write.expect {
        expect.check_read(&write.session, &stored_snapshot(conn, write))?;
    }
    match write.clear {
        Clear::Keep => {}
        Clear::Replace => delete_session(conn, session).map_err(sql)?,
        Clear::Delete => {
            refuse_open(conn, write)?;
            delete_session(conn, session).map_err(sql)?;
        }
    }
    if let Some(snapshot) = &write.snapshot {
        conn.prepare_cached(
            "INSERT INTO sessions (id, snapshot) VALUES (?1, ?2)
             ON CONFLICT (id) DO UPDATE SET snapshot = excluded.snapshot",
        )
        .and_then(|mut stmt| stmt.execute(params![session, snapshot]))
        .map_err(sql)?;
    }
    if !write.has_children() {
        return Ok(());
    }
    // One lookup tells whether the session exists, its key, and where its journal ends.
    let stored: Option<(i64, i64)> = conn
        .prepare_cached("SELECT session_key, last_seq FROM sessions WHERE id = ?1")
        .and_then(|mut stmt| stmt.query_row([session], |row| Ok((row.get(0)?, row.get(1)?))).optional())
        .map_err(sql)?;
    let Some((session_key, latest)) = stored else {
        return Err(StoreError::UnknownSession(write.session.clone()));
    };
    let mut turns = named_turns(conn, write)?;
    if !write.turns.is_empty() {
        let mut stmt = conn
            .prepare_cached(
                "INSERT INTO turns (session_id, turn_id, record) VALUES (?1, ?2, ?3)
                 ON CONFLICT (session_id, turn_id) DO UPDATE SET record = excluded.record
                 RETURNING position",
            )
            .map_err(sql)?;
        for (id, record) in &write.turns {
            let position: i64 = stmt.query_row(params![session, id, record], |row| row.get(0)).map_err(sql)?;
            turns.push((id.as_str(), position));
        }
    }
    if !write.requests.is_empty() {
        let mut stmt = conn
            .prepare_cached(
                "INSERT INTO requests (session_id, request_id, turn_id, status, record) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (session_id, request_id) DO UPDATE
                 SET turn_id = excluded.turn_id, status = excluded.status, record = excluded.record",
            )
            .map_err(sql)?;
        for row in &write.requests {
            stmt.execute(params![session, row.id, row.turn_id.as_str(), row.status, row.record]).map_err(sql)?;
        }
    }
    if !write.events.is_empty() {
        Append::new(conn, write, session_key, turns).run(latest)?;
    }
    Ok(())
}

/// The turns the write names without writing them, with their keys. Refuses a turn the
/// session has no record of: one indexed lookup per turn the write names without writing it (a
/// streaming write names one), not one per event. A turn known only from version 1 events has a
/// row without a record, which does not count.
fn named_turns<'w>(conn: &Connection, write: &'w Prepared) -> Result<Vec<(&'w str, i64)>, StoreError> {
    let mut turns = Vec::with_capacity(write.named_turns.len() + write.turns.len());
    if write.named_turns.is_empty() {
        return Ok(turns);
    }
    let mut stmt = conn
        .prepare_cached("SELECT position FROM turns WHERE session_id = ?1 AND turn_id = ?2 AND record IS NOT NULL")
        .map_err(|e| store_error(&e))?;
    for turn in &write.named_turns {
        let position: Option<i64> = stmt
            .query_row(params![write.session.as_str(), turn.as_str()], |row| row.get(0))
            .optional()
            .map_err(|e| store_error(&e))?;
        let Some(position) = position else {
            return Err(StoreError::UnknownTurn { session: write.session.clone(), turn: turn.clone() });
        };
        turns.push((turn.as_str(), position));
    }
    Ok(turns)
}

/// `delete_session` leaves a session alone while its snapshot says a runtime may hold it.
fn refuse_open(conn: &Connection, write: &Prepared) -> Result<(), StoreError> {
    if stored_snapshot(conn, write)?.is_some_and(|snapshot| snapshot.is_open()) {
        return Err(StoreError::SessionLive(write.session.clone()));
    }
    Ok(())
}

/// The snapshot stored for the write's session.
fn stored_snapshot(conn: &Connection, write: &Prepared) -> Result<Option<SessionSnapshot>, StoreError> {
    let stored: Option<String> = conn
        .prepare_cached("SELECT snapshot FROM sessions WHERE id = ?1")
        .and_then(|mut stmt| stmt.query_row([write.session.as_str()], |row| row.get(0)).optional())
        .map_err(|e| store_error(&e))?;
    let what = || crate::reader::snapshot_name(write.session.as_str());
    stored.map(|json| serde_json::from_str(&json).map_err(|e| corrupt_json(&what(), &e))).transpose()
}

fn delete_session(conn: &Connection, session: &str) -> rusqlite::Result<()> {
    let key: Option<i64> = conn
        .prepare_cached("SELECT session_key FROM sessions WHERE id = ?1")?
        .query_row([session], |row| row.get(0))
        .optional()?;
    if let Some(key) = key {
        for sql in ["DELETE FROM events WHERE session_key = ?1", "DELETE FROM event_prefixes WHERE session_key = ?1"] {
            conn.prepare_cached(sql)?.execute([key])?;
        }
    }
    for sql in [
        "DELETE FROM requests WHERE session_id = ?1",
        "DELETE FROM turns WHERE session_id = ?1",
        "DELETE FROM sessions WHERE id = ?1",
    ] {
        conn.prepare_cached(sql)?.execute([session])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
