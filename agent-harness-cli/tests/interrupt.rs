//! Signals to `agent-harness run` against the testkit's fake codex. The second Ctrl-C: the fake
//! is scripted to ignore `turn/interrupt`, so the first SIGINT cannot end the turn and only the
//! second can. SIGHUP (the terminal went away) is handled like the first.

use std::process::Stdio;
use std::time::{Duration, Instant};

use agent_testkit::fake_cli::{FakeCli, FakeCliEnv, FakeScript, InterruptMode};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};

/// How long the first SIGINT is left to work before the second: well past a cancel that the
/// fake would honour, and well short of the run's own 10 s grace.
const BETWEEN: Duration = Duration::from_millis(1500);

fn send(child: &tokio::process::Child, signal: libc::c_int) {
    let pid = child.id().expect("running") as libc::pid_t;
    // SAFETY: sending a signal to the child this test spawned and still holds.
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
}

fn sigint(child: &tokio::process::Child) {
    send(child, libc::SIGINT);
}

/// `agent-harness run --json` of one turn on the fake codex running `script`.
fn run(env: &FakeCliEnv) -> tokio::process::Child {
    run_with(env, &[])
}

/// [`run`] with `args` before the prompt.
fn run_with(env: &FakeCliEnv, args: &[&str]) -> tokio::process::Child {
    let program = env.program().display().to_string();
    tokio::process::Command::new(env!("CARGO_BIN_EXE_agent-harness"))
        .args(["run", "--json", "--auth", "inherit", "--provider", "codex", "--cli-path", &program])
        .args(args)
        .arg("go")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(env.vars())
        .current_dir(env.workspace())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_sigint_stops_a_turn_whose_cli_ignores_the_interrupt() {
    let script =
        FakeScript::new().handshake().interrupts(InterruptMode::Ignore).turn_start().deltas(["working"]).stall();
    let env = FakeCliEnv::new(FakeCli::Codex, &script).unwrap_or_else(|e| panic!("{e}"));
    let mut child = run(&env);
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut seen: Vec<Value> = Vec::new();
    let next = |line: Option<String>| line.map(|l| serde_json::from_str::<Value>(&l).expect("a JSON event"));
    tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(event) = next(lines.next_line().await.expect("read")) {
            let delta = event["type"] == "message_delta";
            seen.push(event);
            if delta {
                return;
            }
        }
        panic!("no delta: {seen:?}");
    })
    .await
    .expect("the turn streams");

    sigint(&child);
    // The first one is a cancel: recorded, and the turn goes on (the fake ignores it).
    let first = tokio::time::timeout(BETWEEN, async {
        while let Some(event) = next(lines.next_line().await.expect("read")) {
            seen.push(event);
        }
    })
    .await;
    assert!(first.is_err(), "the run ended on the first SIGINT: {seen:?}");
    assert!(seen.iter().any(|e| e["type"] == "cancel_requested"), "{seen:?}");
    assert!(!seen.iter().any(|e| e["type"].as_str().is_some_and(|t| t.starts_with("turn_") && t != "turn_started")));

    let second = Instant::now();
    sigint(&child);
    while let Some(event) = next(lines.next_line().await.expect("read")) {
        seen.push(event);
    }
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait()).await.expect("exits").expect("status");
    let took = second.elapsed();
    assert_eq!(status.code(), Some(2), "{seen:?}");
    assert!(took < Duration::from_secs(5), "the second SIGINT stopped the run at once, not the grace: {took:?}");
    let ends: Vec<&str> = seen.iter().filter_map(|e| e["type"].as_str()).filter(|t| t.starts_with("turn_")).collect();
    assert_eq!(ends, ["turn_started", "turn_interrupted"], "a forced stop interrupts the turn: {seen:?}");
    assert!(seen.iter().any(|e| e["type"] == "session_closed"), "{seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sighup_cancels_the_turn_and_shuts_the_harness_down() {
    let script = FakeScript::new().handshake().turn_start().deltas(["working"]).stall();
    let env = FakeCliEnv::new(FakeCli::Codex, &script).unwrap_or_else(|e| panic!("{e}"));
    let mut child = run(&env);
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut seen: Vec<Value> = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = lines.next_line().await.expect("read") {
            let event: Value = serde_json::from_str(&line).expect("a JSON event");
            let delta = event["type"] == "message_delta";
            seen.push(event);
            if delta {
                send(&child, libc::SIGHUP);
            }
        }
    })
    .await
    .expect("the run ends");
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait()).await.expect("exits").expect("status");
    assert_eq!(status.code(), Some(2), "cancelled, not killed by the signal: {seen:?}");
    let cancel = seen.iter().find(|e| e["type"] == "cancel_requested").expect("a cancel");
    assert!(cancel.to_string().contains("SIGHUP"), "{cancel}");
    let ends: Vec<&str> = seen.iter().filter_map(|e| e["type"].as_str()).filter(|t| t.starts_with("turn_")).collect();
    assert_eq!(ends, ["turn_started", "turn_interrupted"], "{seen:?}");
    assert!(seen.iter().any(|e| e["type"] == "session_closed"), "{seen:?}");
}

/// `agent-harness run --json` on the fake codex with a SQLite store, with `args` before the prompt.
fn run_stored(env: &FakeCliEnv, db: &std::path::Path, args: &[&str]) -> tokio::process::Child {
    let store = format!("sqlite:{}", db.display());
    run_with(env, &[&["--store", store.as_str()], args].concat())
}

/// Reads `child`'s JSON events until one of type `kind`; returns what it read.
async fn events_until(child: &mut tokio::process::Child, kind: &str) -> Vec<Value> {
    let mut lines = BufReader::new(child.stdout.as_mut().expect("stdout")).lines();
    let mut seen = Vec::new();
    let found = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = lines.next_line().await.expect("read") {
            let event: Value = serde_json::from_str(&line).expect("a JSON event");
            let done = event["type"] == kind;
            seen.push(event);
            if done {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(found, Ok(true), "no {kind}: {seen:?}");
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_running_in_another_process_is_not_resumed_until_that_process_is_gone() {
    let script = FakeScript::new().handshake().turn_start().deltas(["working"]).stall();
    let env = FakeCliEnv::new(FakeCli::Codex, &script).unwrap_or_else(|e| panic!("{e}"));
    let db = env.workspace().join("shared.db");
    let mut first = run_stored(&env, &db, &["--session-id", "held"]);
    events_until(&mut first, "message_delta").await;

    // A second process sharing the file: refused, with the holder's PID, and nothing spawned.
    let second = run_stored(&env, &db, &["--resume", "held"]);
    let output =
        tokio::time::timeout(Duration::from_secs(30), second.wait_with_output()).await.expect("exits").unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let holder = first.id().expect("running");
    assert!(stderr.contains(&format!("is live in another harness (process {holder})")), "{stderr}");
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(output.stdout.is_empty(), "no event: {}", String::from_utf8_lossy(&output.stdout));

    // Nor is it purged, --force or not: the store names its running process.
    for force in [&[][..], &["--force"][..]] {
        let output =
            harness_cli(&[&["purge", "--store", &format!("sqlite:{}", db.display()), "held"], force].concat()).await;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains(&format!("is live in another harness (process {holder})")), "{stderr}");
    }

    // The holder killed outright: its session is abandoned, and resuming it works.
    send(&first, libc::SIGKILL);
    tokio::time::timeout(Duration::from_secs(30), first.wait()).await.expect("exits").expect("status");
    // Its events end where it was killed: following them does not wait for a session nobody runs.
    let store = format!("sqlite:{}", db.display());
    let followed = harness_cli(&["events", "--json", "--follow", "--store", &store, "held"]).await;
    assert_eq!(followed.status.code(), Some(0), "{}", String::from_utf8_lossy(&followed.stderr));
    assert!(String::from_utf8_lossy(&followed.stdout).contains("message_delta"));
    let mut third = run_stored(&env, &db, &["--resume", "held"]);
    let seen = events_until(&mut third, "message_delta").await;
    assert!(seen.iter().any(|e| e["type"] == "conversation_resumed"), "{seen:?}");
    assert!(
        seen.iter().any(|e| e["type"] == "turn_interrupted"),
        "the turn the killed run left open is closed: {seen:?}"
    );

    // Killed in turn, the session is abandoned again: purged without --force.
    send(&third, libc::SIGKILL);
    tokio::time::timeout(Duration::from_secs(30), third.wait()).await.expect("exits").expect("status");
    let output = harness_cli(&["purge", "--store", &format!("sqlite:{}", db.display()), "held"]).await;
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
}

/// `agent-harness ARGS`, to its end.
async fn harness_cli(args: &[&str]) -> std::process::Output {
    let command = tokio::process::Command::new(env!("CARGO_BIN_EXE_agent-harness"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(Duration::from_secs(30), command).await.expect("ends").expect("runs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_run_leaves_the_database_it_made_when_another_run_wrote_to_it() {
    use agent_harness::stores::sqlite::SqliteStore;
    use agent_harness::{SessionId, SessionState, Store};

    // The fake dies during the handshake, after a while: the run fails having made the file.
    let script = FakeScript::new().sleep(1500).exit(3);
    let env = FakeCliEnv::new(FakeCli::Codex, &script).unwrap_or_else(|e| panic!("{e}"));
    let db = env.workspace().join("new.db");
    let failing = run_stored(&env, &db, &["--session-id", "b"]);
    let made = tokio::time::timeout(Duration::from_secs(30), async {
        while !db.exists() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(made.is_ok(), "the run made {}", db.display());
    // Meanwhile another run keeps a session in it, and the file open.
    let other = SqliteStore::open(&db).expect("the new database opens");
    let held = SessionId::new("a").unwrap();
    other.save_session(&agent_testkit::conformance::store::snapshot(&held, SessionState::Idle)).await.unwrap();

    let output =
        tokio::time::timeout(Duration::from_secs(30), failing.wait_with_output()).await.expect("exits").unwrap();
    assert_ne!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(db.exists(), "the failed run removed a database another run uses");
    drop(other);
    let reopened = SqliteStore::open(&db).expect("still a store");
    assert!(reopened.fetch_session(&held).await.unwrap().is_some(), "the other run's session is kept");
}

/// A second run on the same new file, still opening its CLI (no session written yet) when the
/// first fails: the failed run leaves the file, and the second run's session is stored in it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_run_leaves_the_database_it_made_while_another_run_is_opening_on_it() {
    use agent_harness::stores::sqlite::SqliteStore;
    use agent_harness::{SessionId, Store};

    let failing_env = FakeCliEnv::new(FakeCli::Codex, &FakeScript::new().sleep(1000).exit(3)).unwrap();
    let db = failing_env.workspace().join("shared.db");
    let failing = run_stored(&failing_env, &db, &["--session-id", "first"]);
    let made = tokio::time::timeout(Duration::from_secs(30), async {
        while !db.exists() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(made.is_ok(), "the run made {}", db.display());
    // Its CLI answers only after the first run failed.
    let slow = FakeScript::new().sleep(2500).handshake().turn_start().deltas(["hello"]).complete();
    let slow_env = FakeCliEnv::new(FakeCli::Codex, &slow).unwrap();
    let opening = run_stored(&slow_env, &db, &["--session-id", "second"]);

    let failed =
        tokio::time::timeout(Duration::from_secs(30), failing.wait_with_output()).await.expect("exits").unwrap();
    assert_ne!(failed.status.code(), Some(0), "{}", String::from_utf8_lossy(&failed.stderr));
    assert!(db.exists(), "the failed run removed a database another run holds");
    let done = tokio::time::timeout(Duration::from_secs(30), opening.wait_with_output()).await.expect("exits").unwrap();
    let stderr = String::from_utf8_lossy(&done.stderr);
    assert_eq!(done.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("store failed"), "{stderr}");
    let stored = SqliteStore::open(&db).expect("still a store");
    assert!(stored.fetch_session(&SessionId::new("second").unwrap()).await.unwrap().is_some(), "its session is kept");
}

/// A stored snapshot this build cannot read (damaged, or written by a newer release): `sessions`
/// fails naming it, and `purge` removes it with `--force` only, as it cannot tell whether
/// another process runs the session. The other session stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_that_does_not_decode_is_purged_with_force() {
    let script = FakeScript::new().handshake().turn_start().deltas(["hello"]).complete();
    let env = FakeCliEnv::new(FakeCli::Codex, &script).unwrap_or_else(|e| panic!("{e}"));
    let db = env.workspace().join("damaged.db");
    for id in ["bad", "good"] {
        let run = run_stored(&env, &db, &["--session-id", id]);
        let done = tokio::time::timeout(Duration::from_secs(30), run.wait_with_output()).await.expect("exits").unwrap();
        assert_eq!(done.status.code(), Some(0), "{}", String::from_utf8_lossy(&done.stderr));
    }
    let damage = rusqlite::Connection::open(&db).unwrap();
    let sql = "UPDATE sessions SET snapshot = json_set(snapshot, '$.status', 'paused') WHERE id = 'bad'";
    assert_eq!(damage.execute(sql, []).unwrap(), 1);
    let store = format!("sqlite:{}", db.display());

    let listed = harness_cli(&["sessions", "--store", &store]).await;
    let stderr = String::from_utf8_lossy(&listed.stderr);
    assert_eq!(listed.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("snapshot of session `bad`"), "{stderr}");
    let refused = harness_cli(&["purge", "--store", &store, "bad"]).await;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("cannot be read") && stderr.contains("--force"), "{stderr}");
    let purged = harness_cli(&["purge", "--store", &store, "bad", "--force"]).await;
    assert_eq!(purged.status.code(), Some(0), "{}", String::from_utf8_lossy(&purged.stderr));

    let listed = harness_cli(&["sessions", "--store", &store]).await;
    assert_eq!(listed.status.code(), Some(0), "{}", String::from_utf8_lossy(&listed.stderr));
    let ids: Vec<&str> =
        std::str::from_utf8(&listed.stdout).unwrap().lines().map(|row| row.split('\t').next().unwrap()).collect();
    assert_eq!(ids, ["good"]);
}

/// Waits until the pipe behind `stdout`, which this test holds and never reads, is full: from
/// then on every write of the command's waits. Full is within an eighth of its capacity: each
/// page of the pipe takes whole writes (an event's line each), so the pages are not filled to
/// the byte.
async fn until_full(stdout: &tokio::process::ChildStdout) {
    use std::os::fd::AsRawFd;
    let fd = stdout.as_raw_fd();
    // SAFETY: fcntl and ioctl on a descriptor this test holds open, into a local integer.
    let capacity = unsafe { libc::fcntl(fd, libc::F_GETPIPE_SZ) };
    assert!(capacity > 0, "F_GETPIPE_SZ: {}", std::io::Error::last_os_error());
    let full = async {
        loop {
            let mut held: libc::c_int = 0;
            // SAFETY: as above.
            assert_eq!(unsafe { libc::ioctl(fd, libc::FIONREAD, &mut held) }, 0);
            if held >= capacity - capacity / 8 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), full).await.expect("the pipe fills");
}

/// `agent-harness run --json` streaming 20,000 deltas from a fake codex that then stalls, with
/// `args`, its stdout held open and never read until the run exits; the exit status and stderr.
async fn run_unread(
    args: &[&str],
    while_running: impl AsyncFnOnce(&tokio::process::Child, &tokio::process::ChildStdout),
) -> (Option<i32>, String) {
    let deltas = (0..20_000).map(|n| format!("delta {n} ")).collect::<Vec<_>>();
    let script = FakeScript::new().handshake().turn_start().deltas(deltas).stall();
    let env = FakeCliEnv::new(FakeCli::Codex, &script).unwrap_or_else(|e| panic!("{e}"));
    let mut child = run_with(&env, args);
    let stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    while_running(&child, &stdout).await;
    let status = tokio::time::timeout(Duration::from_secs(40), child.wait())
        .await
        .expect("the run ends although nobody reads its stdout")
        .expect("status");
    let mut said = Vec::new();
    tokio::io::AsyncReadExt::read_to_end(&mut stderr, &mut said).await.expect("stderr");
    (status.code(), String::from_utf8_lossy(&said).into_owned())
}

/// A run whose stdout nobody reads: the pipe fills, and the loop that answers signals and
/// `--timeout` must not wait on it. `--timeout` ends the run within its bound (SECS + 12 s) with
/// exit 3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdout_nobody_reads_does_not_hold_up_the_timeout() {
    let started = Instant::now();
    let (code, stderr) = run_unread(&["--timeout", "2"], async |_, _| {}).await;
    assert_eq!(code, Some(3), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(2 + 12 + 3), "took {:?}", started.elapsed());
}

/// The same with no `--timeout`: SIGTERM cancels the turn and the run ends with exit 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdout_nobody_reads_does_not_hold_up_a_signal() {
    let (code, stderr) = run_unread(&[], async |child, stdout| {
        until_full(stdout).await;
        send(child, libc::SIGTERM);
    })
    .await;
    assert_eq!(code, Some(2), "{stderr}");
}

/// `events --follow` whose stdout nobody reads: Ctrl-C still ends it (exit 0), where the write
/// it waited on used to hold up the signal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_follow_with_a_stdout_nobody_reads_ends_on_ctrl_c() {
    let deltas = (0..20_000).map(|n| format!("delta {n} ")).collect::<Vec<_>>();
    let script = FakeScript::new().handshake().turn_start().deltas(deltas).stall();
    let env = FakeCliEnv::new(FakeCli::Codex, &script).unwrap_or_else(|e| panic!("{e}"));
    let db = env.workspace().join("follow.db");
    let mut running = run_stored(&env, &db, &["--session-id", "s"]);
    events_until(&mut running, "message_delta").await;
    let store = format!("sqlite:{}", db.display());
    let mut follow = tokio::process::Command::new(env!("CARGO_BIN_EXE_agent-harness"))
        .args(["events", "--json", "--follow", "--store", &store, "s"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn");
    let unread = follow.stdout.take().expect("stdout");
    until_full(&unread).await;
    sigint(&follow);
    let status = tokio::time::timeout(Duration::from_secs(20), follow.wait())
        .await
        .expect("Ctrl-C ends the follow although nobody reads its stdout")
        .expect("status");
    assert_eq!(status.code(), Some(0));
    send(&running, libc::SIGINT);
    send(&running, libc::SIGINT);
    let ended = tokio::time::timeout(Duration::from_secs(30), running.wait()).await.expect("the run ends");
    assert_eq!(ended.expect("status").code(), Some(2));
}

/// A CLI that hangs in its handshake past `startup_timeout`, or exits during it: the CLI cannot
/// be brought up, exit 69 (where the hang used to exit 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cli_that_hangs_or_exits_during_its_start_exits_69() {
    for (script, says) in [
        (FakeScript::new().stall(), "initialize timed out"),
        (FakeScript::new().sleep(200).exit(3), "the session did not start"),
    ] {
        let env = FakeCliEnv::new(FakeCli::Codex, &script).unwrap_or_else(|e| panic!("{e}"));
        let config = env.workspace().join("config.json");
        std::fs::write(&config, r#"{"provider": "codex", "startup_timeout_ms": 1000}"#).unwrap();
        let child = run_with(&env, &["--config", &config.display().to_string()]);
        let output =
            tokio::time::timeout(Duration::from_secs(30), child.wait_with_output()).await.expect("exits").unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(69), "{stderr}");
        assert!(stderr.contains(says), "{stderr}");
    }
}
