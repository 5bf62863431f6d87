//! Crash test: a helper process appends events from several sessions under load and prints each
//! acknowledged `(session, seq)`; it is SIGKILLed at a random point, twenty times. After every
//! kill the database must pass `PRAGMA integrity_check` without repair and hold every
//! acknowledged event, with no gap below the latest stored seq of each session.
//!
//! The helper is this test binary itself, started again with [`HELPER_ENV`] naming the database.
//! Set `AGENT_STORE_SQLITE_CRASH_SEED` to replay a run with another seed.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agent_core::store::{EventQuery, Store, WriteBatch};
use agent_core::{SessionId, SessionState, TurnStatus};
use agent_store_sqlite::SqliteStore;
use agent_testkit::conformance::store::{event, snapshot, turn};
use common::TempDir;

const TEST_NAME: &str = "sigkilled_writer_loses_no_acknowledged_event";
/// Set in the helper process to the database path.
const HELPER_ENV: &str = "AGENT_STORE_SQLITE_CRASH_HELPER";
const SEED_ENV: &str = "AGENT_STORE_SQLITE_CRASH_SEED";
const DEFAULT_SEED: u64 = 0x5EED_CAFE_F00D_0001;
const KILLS: usize = 20;
/// Sessions writing concurrently in the helper.
const SESSIONS: usize = 6;
/// The kill comes this long after the helper starts, in milliseconds.
const DELAY_MS: std::ops::RangeInclusive<u64> = 20..=300;

/// A small deterministic generator (xorshift64).
struct XorShift(u64);

impl XorShift {
    fn new(seed: u64) -> Self {
        XorShift(seed.max(1))
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn in_range(&mut self, range: std::ops::RangeInclusive<u64>) -> u64 {
        range.start() + self.next() % (range.end() - range.start() + 1)
    }
}

fn session_id(n: usize) -> SessionId {
    SessionId::new(format!("crash-{n}")).expect("valid id")
}

fn main() {
    if let Ok(path) = std::env::var(HELPER_ENV) {
        helper(Path::new(&path));
        return;
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--list") {
        println!("{TEST_NAME}: test");
        return;
    }
    if args.iter().any(|a| !a.starts_with('-') && !TEST_NAME.contains(a.as_str())) {
        println!("\nrunning 0 tests\n");
        return;
    }
    println!("\nrunning 1 test");
    let started = Instant::now();
    crash_test();
    println!("test {TEST_NAME} ... ok");
    println!("\ntest result: ok. 1 passed; 0 failed; finished in {:.2}s\n", started.elapsed().as_secs_f64());
}

/// Appends events from every session until killed, printing `ack <session> <seq>` for each
/// event once its write returned.
fn helper(path: &Path) {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let store = Arc::new(SqliteStore::open(path).expect("helper opens the store"));
        let out = Arc::new(Mutex::new(std::io::stdout()));
        let mut tasks = tokio::task::JoinSet::new();
        for n in 0..SESSIONS {
            tasks.spawn(append_forever(Arc::clone(&store), Arc::clone(&out), n));
        }
        while let Some(done) = tasks.join_next().await {
            done.expect("a session task failed");
        }
    });
}

async fn append_forever(store: Arc<SqliteStore>, out: Arc<Mutex<std::io::Stdout>>, n: usize) {
    let id = session_id(n);
    let mut rng = XorShift::new(u64::from(std::process::id()) << 8 | n as u64);
    let mut next = store.latest_seq(&id).await.expect("latest seq").unwrap_or(0) + 1;
    let filler = "x".repeat(2048);
    loop {
        let count = rng.in_range(1..=16);
        let mut batch = WriteBatch::new(id.clone());
        if next == 1 || rng.in_range(0..=3) == 0 {
            batch.snapshot = Some(snapshot(&id, SessionState::Running));
        }
        if next == 1 {
            // The events name this turn; its record must be stored first.
            batch.turns = vec![turn(&id, "turn-1", TurnStatus::Running)];
        }
        batch.events = (next..next + count)
            .map(|seq| {
                // Some events span several pages, so commits write many WAL frames.
                let text = &filler[..rng.in_range(1..=2048) as usize];
                event(&id, seq, Some("turn-1"), text)
            })
            .collect();
        store.write(&batch).await.expect("the helper's write is acknowledged");
        let mut out = out.lock().unwrap_or_else(|p| p.into_inner());
        for seq in next..next + count {
            writeln!(out, "ack {id} {seq}").expect("stdout");
        }
        out.flush().expect("stdout");
        next += count;
    }
}

fn crash_test() {
    let seed = std::env::var(SEED_ENV).ok().and_then(|s| s.parse().ok()).unwrap_or(DEFAULT_SEED);
    let mut rng = XorShift::new(seed);
    let dir = TempDir::new("crash");
    let path = dir.path().join("store.db");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    // The highest acknowledged seq per session over all runs.
    let mut acked: BTreeMap<String, u64> = BTreeMap::new();
    for round in 1..=KILLS {
        let delay = Duration::from_millis(rng.in_range(DELAY_MS));
        let acks = run_and_kill(&path, delay);
        // Within a run a session's acknowledged seqs are consecutive; a new run may start above
        // the previous acknowledged seq (a commit whose acknowledgement the kill cut off).
        let mut this_run: BTreeMap<String, u64> = BTreeMap::new();
        for (session, seq) in acks {
            let latest = acked.entry(session.clone()).or_insert(0);
            match this_run.insert(session.clone(), seq) {
                Some(previous) => assert_eq!(seq, previous + 1, "seed {seed} round {round}: {session} skipped a seq"),
                None => assert!(seq > *latest, "seed {seed} round {round}: {session} acknowledged seq {seq} twice"),
            }
            *latest = seq;
        }
        runtime.block_on(verify(&path, &acked, seed, round));
    }
    let highest: u64 = acked.values().sum();
    assert!(highest >= 1_000, "seed {seed}: only {highest} events were acknowledged; the helper was not under load");
    println!("{KILLS} kills; sessions reached {highest} acknowledged events in total (seed {seed})");
}

/// Starts the helper, kills it with SIGKILL after `delay`, and returns what it acknowledged.
fn run_and_kill(path: &Path, delay: Duration) -> Vec<(String, u64)> {
    let mut child = Command::new(std::env::current_exe().expect("test binary path"))
        .env(HELPER_ENV, path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the helper");
    let stdout = child.stdout.take().expect("piped stdout");
    let reader = std::thread::spawn(move || {
        let mut acks = Vec::new();
        let mut lines = BufReader::new(stdout);
        let mut line = String::new();
        // A line cut by the kill has no newline and is not counted.
        while lines.read_line(&mut line).expect("read helper output") > 0 {
            if let Some(ack) = line.strip_suffix('\n').and_then(parse_ack) {
                acks.push(ack);
            }
            line.clear();
        }
        acks
    });
    std::thread::sleep(delay);
    child.kill().expect("SIGKILL the helper");
    let status = child.wait().expect("reap the helper");
    assert_eq!(status.signal(), Some(9), "the helper must die by SIGKILL, not exit by itself: {status}");
    reader.join().expect("output reader")
}

fn parse_ack(line: &str) -> Option<(String, u64)> {
    let mut parts = line.split(' ');
    match (parts.next(), parts.next(), parts.next().and_then(|s| s.parse().ok()), parts.next()) {
        (Some("ack"), Some(session), Some(seq), None) => Some((session.to_owned(), seq)),
        _ => None,
    }
}

async fn verify(path: &Path, acked: &BTreeMap<String, u64>, seed: u64, round: usize) {
    let conn = rusqlite::Connection::open(path).expect("open after the kill");
    let check: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0)).expect("integrity_check");
    assert_eq!(check, "ok", "seed {seed} round {round}: integrity_check after the kill");
    let store = SqliteStore::open(path).expect("the store opens after the kill");
    for n in 0..SESSIONS {
        let id = session_id(n);
        let acked = acked.get(id.as_str()).copied().unwrap_or(0);
        // Seqs are unique per session, so `count == max` with `min == 1` means no gap.
        let (count, min, max): (i64, Option<i64>, Option<i64>) = conn
            .query_row(
                "SELECT COUNT(*), MIN(seq), MAX(seq) FROM events
                  WHERE session_key = (SELECT session_key FROM sessions WHERE id = ?1)",
                [id.as_str()],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .expect("count events");
        assert!(count == 0 || (min == Some(1) && max == Some(count)), "seed {seed} round {round}: {id} has a gap");
        let latest = store.latest_seq(&id).await.expect("latest seq").unwrap_or(0);
        assert!(latest >= acked, "seed {seed} round {round}: {id} holds seq {latest} but {acked} was acknowledged");
        // The acknowledged tail decodes through the store, in order.
        let tail = store.read_events(&id, &EventQuery::after(acked.saturating_sub(64))).await.expect("read events");
        let seqs: Vec<u64> = tail.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, (acked.saturating_sub(64) + 1..=latest).collect::<Vec<_>>(), "{id}: tail");
        if acked > 0 {
            assert!(store.fetch_session(&id).await.expect("fetch").is_some(), "{id}: the snapshot is stored");
        }
    }
}
