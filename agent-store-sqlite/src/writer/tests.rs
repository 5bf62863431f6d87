use agent_core::{SessionId, SessionState, TurnStatus};
use agent_testkit::conformance::store::{event, snapshot, turn};

use super::*;

fn sid(id: &str) -> SessionId {
    SessionId::new(id).unwrap()
}

fn new_session(id: &SessionId, seqs: std::ops::RangeInclusive<u64>) -> Box<Prepared> {
    let mut write = Prepared::snapshot(&snapshot(id, SessionState::Running)).unwrap();
    let events: Vec<_> = seqs.map(|seq| event(id, seq, None, "x")).collect();
    write.push_events(&events).unwrap();
    Box::new(write)
}

fn count(conn: &Connection, sql: &str, session: &SessionId) -> i64 {
    conn.query_row(sql, [session.as_str()], |r| r.get(0)).unwrap()
}

/// A write connection on a new file in a directory of its own, removed on drop.
struct Scratch {
    dir: std::path::PathBuf,
    conn: Option<Connection>,
}

impl Scratch {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("agent-store-sqlite-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let conn = crate::open::open_writer(&dir.join("store.db"), &SqliteOptions::default()).unwrap();
        Scratch { dir, conn: Some(conn) }
    }

    fn conn(&self) -> &Connection {
        self.conn.as_ref().expect("open until drop")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        drop(self.conn.take());
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Commits `writes` as one group and returns each write's answer.
fn commit(conn: &Connection, writes: impl IntoIterator<Item = Box<Prepared>>) -> Vec<Result<(), StoreError>> {
    commit_after(conn, writes, &mut Failed::default())
}

/// [`commit`] with the writer's record of failed sessions.
fn commit_after(
    conn: &Connection,
    writes: impl IntoIterator<Item = Box<Prepared>>,
    failed: &mut Failed,
) -> Vec<Result<(), StoreError>> {
    let (mut group, mut answers) = (Vec::new(), Vec::new());
    for write in writes {
        let (reply, answer) = oneshot::channel();
        group.push((write, reply));
        answers.push(answer);
    }
    let path = Path::new(conn.path().expect("a file"));
    commit_group(conn, &mut group, failed, None, &mut FileIdentity::of(path), &mut LockWait::none());
    answers.into_iter().map(|mut a| a.try_recv().expect("every write is answered")).collect()
}

/// Commits `write` alone, checking `file` first as the writer does; its answer.
fn commit_checked(conn: &Connection, write: Box<Prepared>, file: &mut FileIdentity) -> Result<(), StoreError> {
    let (reply, mut answer) = oneshot::channel();
    commit_group(conn, &mut vec![(write, reply)], &mut Failed::default(), None, file, &mut LockWait::none());
    answer.try_recv().expect("answered")
}

#[test]
fn writes_are_refused_once_the_file_was_deleted_or_replaced() {
    for replace in [false, true] {
        let scratch = Scratch::new(if replace { "replaced" } else { "deleted" });
        let path = scratch.dir.join("store.db");
        let mut file = FileIdentity::of(&path);
        let answer = |write, file: &mut FileIdentity| commit_checked(scratch.conn(), write, file);
        let a = sid("a");
        answer(new_session(&a, 1..=2), &mut file).expect("written while the file is there");
        std::fs::remove_file(&path).unwrap();
        if replace {
            std::fs::write(&path, b"another file").unwrap();
        }
        for seqs in [3..=4, 5..=6] {
            let refused = answer(events_write(&a, seqs, true), &mut file);
            assert!(
                matches!(&refused, Err(StoreError::WriteRefused(why)) if why.contains("was deleted or replaced while open")),
                "{refused:?}"
            );
        }
        assert_eq!(stored_seqs(scratch.conn(), &a), [1, 2], "nothing after the deletion was applied");
    }
}

/// A commit goes to the WAL first: one deleted while open takes every later commit with it
/// when the process dies, though the database file is still there.
#[test]
fn writes_are_refused_once_the_wal_was_deleted() {
    let scratch = Scratch::new("wal-deleted");
    let path = scratch.dir.join("store.db");
    let mut file = FileIdentity::of(&path);
    let answer = |write, file: &mut FileIdentity| commit_checked(scratch.conn(), write, file);
    let a = sid("a");
    answer(new_session(&a, 1..=2), &mut file).expect("written while the WAL is there");
    answer(events_write(&a, 3..=4, true), &mut file).expect("and again");
    std::fs::remove_file(crate::open::side_file(&path, "-wal")).expect("the WAL exists once something was committed");
    let refused = answer(events_write(&a, 5..=6, true), &mut file);
    assert!(matches!(&refused, Err(StoreError::WriteRefused(why)) if why.contains("write-ahead log")), "{refused:?}");
    assert_eq!(stored_seqs(scratch.conn(), &a), [1, 2, 3, 4], "nothing after the deletion was applied");
}

fn stored_seqs(conn: &Connection, session: &SessionId) -> Vec<i64> {
    let mut stmt = conn
        .prepare(
            "SELECT seq FROM events WHERE session_key = (SELECT session_key FROM sessions WHERE id = ?1) ORDER BY seq",
        )
        .unwrap();
    stmt.query_map([session.as_str()], |r| r.get(0)).unwrap().map(Result::unwrap).collect()
}

fn events_write(session: &SessionId, seqs: std::ops::RangeInclusive<u64>, follows: bool) -> Box<Prepared> {
    let mut write = Prepared::new(session.clone());
    let events: Vec<_> = seqs.map(|seq| event(session, seq, None, "y")).collect();
    write.push_events(&events).unwrap();
    write.follows = follows;
    Box::new(write)
}

#[test]
fn with_full_the_wal_is_synced_apart_and_the_connection_runs_normal() {
    let scratch = Scratch::new("sync-apart");
    let conn = scratch.conn();
    let synchronous = || conn.query_row("PRAGMA synchronous", [], |r| r.get::<_, i64>(0)).unwrap();
    assert_eq!(synchronous(), 2, "FULL as opened");
    assert!(sync_apart(conn, &SqliteOptions::default()).is_some());
    assert_eq!(synchronous(), 1, "NORMAL: the sync thread syncs the WAL before each answer");
    let normal = SqliteOptions::default().synchronous(Synchronous::Normal);
    assert!(sync_apart(conn, &normal).is_none(), "nothing to sync with Normal");

    // Through a symbolic link to the directory: the WAL is found where SQLite put it.
    let link = std::env::temp_dir().join(format!("agent-store-sqlite-sync-link-{}", std::process::id()));
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&scratch.dir, &link).unwrap();
    let linked = crate::open::open_writer(&link.join("linked.db"), &SqliteOptions::default()).unwrap();
    let found = sync_apart(&linked, &SqliteOptions::default()).is_some();
    drop(linked);
    let _ = std::fs::remove_file(&link);
    assert!(found, "the WAL of a database opened through a link is synced apart too");
}

#[test]
fn a_write_queued_behind_a_failed_one_is_refused_unapplied_in_the_same_group_or_the_next() {
    let scratch = Scratch::new("follows");
    let conn = scratch.conn();
    let (a, b) = (sid("a"), sid("b"));
    let mut failed = Failed::default();
    let setup = commit_after(conn, [new_session(&a, 1..=1), new_session(&b, 1..=1)], &mut failed);
    assert!(setup.iter().all(Result::is_ok), "{setup:?}");

    // `a`: seq 1 again with another event fails; the write queued behind it is refused.
    // `b`: a write behind a successful one applies.
    let mut conflicting = Prepared::new(a.clone());
    conflicting.push_events(&[event(&a, 1, None, "different")]).unwrap();
    let results = commit_after(
        conn,
        [Box::new(conflicting), events_write(&a, 2..=3, true), events_write(&b, 2..=2, true)],
        &mut failed,
    );
    assert!(matches!(results[0], Err(StoreError::Conflict(_))), "{results:?}");
    assert!(matches!(&results[1], Err(StoreError::WriteRefused(m)) if m.contains("queued before")), "{results:?}");
    assert!(results[2].is_ok(), "{results:?}");
    // The next group: still refused while it follows; a write that does not follow applies,
    // and the session's writes apply again after it.
    let results = commit_after(conn, [events_write(&a, 4..=4, true)], &mut failed);
    assert!(matches!(results[0], Err(StoreError::WriteRefused(_))), "{results:?}");
    assert_eq!(stored_seqs(conn, &a), [1], "no refused event was stored");
    let results = commit_after(conn, [events_write(&a, 5..=5, false), events_write(&a, 6..=6, true)], &mut failed);
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(stored_seqs(conn, &a), [1, 5, 6]);
    assert_eq!(stored_seqs(conn, &b), [1, 2]);
}

#[test]
fn a_failing_write_rolls_back_alone_and_the_rest_of_its_group_commits() {
    let scratch = Scratch::new("group");
    let conn = scratch.conn();
    let (a, b, c) = (sid("a"), sid("b"), sid("c"));
    let setup = commit(conn, [new_session(&a, 1..=1)]);
    assert!(matches!(setup[..], [Ok(())]), "{setup:?}");

    // One group: a new session, a write conflicting with `a` (with a turn that must not
    // land), another new session, and a write for a session that does not exist.
    let mut conflicting = Prepared::new(a.clone());
    conflicting.push_turn(&turn(&a, "t1", TurnStatus::Running)).unwrap();
    conflicting.push_events(&[event(&a, 2, Some("t1"), "ok"), event(&a, 1, None, "different")]).unwrap();
    let mut orphan = Prepared::new(sid("nobody"));
    orphan.push_events(&[event(&sid("nobody"), 1, None, "x")]).unwrap();
    let results =
        commit(conn, [new_session(&b, 1..=3), Box::new(conflicting), new_session(&c, 1..=2), Box::new(orphan)]);
    assert!(results[0].is_ok() && results[2].is_ok(), "{results:?}");
    assert!(matches!(results[1], Err(StoreError::Conflict(_))), "{results:?}");
    assert!(matches!(results[3], Err(StoreError::UnknownSession(_))), "{results:?}");

    assert!(conn.is_autocommit(), "the group transaction is committed");
    assert_eq!(
        count(
            conn,
            "SELECT COUNT(*) FROM events WHERE session_key = (SELECT session_key FROM sessions WHERE id = ?1)",
            &b
        ),
        3
    );
    assert_eq!(
        count(
            conn,
            "SELECT COUNT(*) FROM events WHERE session_key = (SELECT session_key FROM sessions WHERE id = ?1)",
            &c
        ),
        2
    );
    assert_eq!(
        count(
            conn,
            "SELECT MAX(seq) FROM events WHERE session_key = (SELECT session_key FROM sessions WHERE id = ?1)",
            &a
        ),
        1,
        "no event of the failed write"
    );
    assert_eq!(count(conn, "SELECT COUNT(*) FROM turns WHERE session_id = ?1", &a), 0, "no turn of the failed write");
}

#[test]
fn writes_refused_for_a_used_event_id_an_unknown_turn_or_an_open_session_roll_back_alone() {
    let scratch = Scratch::new("rules");
    let conn = scratch.conn();
    let (a, b, c) = (sid("a"), sid("b"), sid("c"));
    let setup = commit(conn, [new_session(&a, 1..=1)]);
    assert!(matches!(setup[..], [Ok(())]), "{setup:?}");
    let stored_id: String = conn
        .query_row("SELECT event_id FROM events JOIN sessions USING (session_key) WHERE id = 'a'", [], |r| r.get(0))
        .unwrap();

    // Each refused write of `a` brings a turn and a valid event first, which must not land.
    let mut reused = Prepared::new(a.clone());
    reused.push_turn(&turn(&a, "t1", TurnStatus::Running)).unwrap();
    let mut again = (*event(&a, 3, None, "again")).clone();
    again.id = agent_core::EventId::from_string(stored_id.as_str());
    reused.push_events(&[event(&a, 2, Some("t1"), "ok"), std::sync::Arc::new(again)]).unwrap();
    let mut unknown = Prepared::new(a.clone());
    unknown.push_turn(&turn(&a, "t1", TurnStatus::Running)).unwrap();
    unknown.push_events(&[event(&a, 2, Some("t1"), "ok"), event(&a, 3, Some("missing"), "x")]).unwrap();
    let delete = Prepared::delete(a.clone());
    let results = commit(
        conn,
        [new_session(&b, 1..=2), Box::new(reused), Box::new(unknown), Box::new(delete), new_session(&c, 1..=2)],
    );
    assert!(results[0].is_ok() && results[4].is_ok(), "{results:?}");
    assert!(matches!(results[1], Err(StoreError::Conflict(_))), "{results:?}");
    assert!(matches!(&results[2], Err(StoreError::UnknownTurn { turn, .. }) if turn.as_str() == "missing"));
    assert!(matches!(&results[3], Err(StoreError::SessionLive(id)) if *id == a), "{results:?}");

    assert!(conn.is_autocommit(), "the group transaction is committed");
    for (id, events) in [(&a, 1), (&b, 2), (&c, 2)] {
        assert_eq!(
            count(
                conn,
                "SELECT COUNT(*) FROM events WHERE session_key = (SELECT session_key FROM sessions WHERE id = ?1)",
                id
            ),
            events,
            "{id}"
        );
    }
    assert_eq!(count(conn, "SELECT COUNT(*) FROM turns WHERE session_id = ?1", &a), 0, "no turn of a refused write");
    assert_eq!(count(conn, "SELECT COUNT(*) FROM sessions WHERE id = ?1", &a), 1, "the open session is kept");
}

#[test]
fn a_full_disk_refuses_the_whole_group_and_the_writer_recovers() {
    let scratch = Scratch::new("full");
    let conn = scratch.conn();
    let pages: i64 = conn.query_row("PRAGMA page_count", [], |r| r.get(0)).unwrap();
    // The database may not grow by more than two pages: as good as a full disk.
    conn.pragma_update(None, "max_page_count", pages + 2).unwrap();
    let big = |id: &SessionId| {
        let mut write = Prepared::snapshot(&snapshot(id, SessionState::Running)).unwrap();
        write.push_events(&[event(id, 1, None, &"x".repeat(64 * 1024))]).unwrap();
        Box::new(write)
    };
    let (a, b) = (sid("a"), sid("b"));
    let results = commit(conn, [new_session(&a, 1..=1), big(&b)]);
    // SQLite rolls the whole transaction back on a full disk: the group fails together.
    assert!(results.iter().all(|r| matches!(r, Err(StoreError::WriteRefused(_)))), "{results:?}");
    assert!(conn.is_autocommit(), "no transaction is left open");
    for id in [&a, &b] {
        assert_eq!(count(conn, "SELECT COUNT(*) FROM sessions WHERE id = ?1", id), 0, "nothing of the group");
    }

    conn.pragma_update(None, "max_page_count", i64::from(u32::MAX)).unwrap();
    let results = commit(conn, [new_session(&a, 1..=1), big(&b)]);
    assert!(results.iter().all(Result::is_ok), "{results:?}");
}
