//! LocalExec containment with real processes: escalation, process groups, drop guards, races,
//! dead stdin, limits, the allow-list, bad input and the orphan reaper.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agent_core::SessionId;
use agent_core::exec::{Command, Exec, ExecError, KillCause, KillPolicy, Limits, ProgramProblem};
use agent_exec::{LimitExceeded, LocalExec};
use agent_testkit::programs::ProgramDir;
use common::{GONE_WITHIN, alive, assert_gone_within, pids, read_line};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn policy(interrupt_grace: Duration, terminate_grace: Duration) -> KillPolicy {
    let mut policy = KillPolicy::default();
    policy.interrupt_grace = interrupt_grace;
    policy.terminate_grace = terminate_grace;
    policy
}

fn short_policy() -> KillPolicy {
    policy(Duration::from_millis(60), Duration::from_millis(60))
}

/// A grace that only bounds the wait for a child that obeys the signal at once.
const BOUND: Duration = Duration::from_secs(5);

fn sh(script: &str) -> Command {
    Command::new("sh").arg("-c").arg(script)
}

/// A shell that starts two background sleepers in its own group and prints their PIDs.
const FORKS_GRANDCHILDREN: &str = "sleep 30 & a=$!; sleep 30 & echo $a $!; wait";

#[tokio::test]
async fn escalation_ends_a_child_that_ignores_sigint_and_sigterm() {
    let exec = LocalExec::new();
    // `exec` keeps the ignored dispositions, so sleep ignores both signals too.
    let command = sh("trap '' INT TERM; echo ready; exec sleep 30").kill_policy(short_policy());
    let mut child = exec.spawn(command).await.expect("spawn");
    assert_eq!(read_line(child.stdout.as_mut().expect("stdout")).await, "ready");
    let pid = child.handle.id().expect("pid");

    let started = Instant::now();
    let status = child.handle.terminate().await.expect("terminate");
    assert!(started.elapsed() >= Duration::from_millis(120), "both graces must pass first: {:?}", started.elapsed());
    assert_eq!((status.signal, status.killed_by), (Some(9), Some(KillCause::Requested)), "{status}");
    assert_gone_within(pid, GONE_WITHIN).await;
}

#[tokio::test]
async fn escalation_sends_sigint_first_then_sigterm() {
    let exec = LocalExec::new();
    // Blocked in the `read` builtin (stdin stays open), the shell runs its trap at once; a
    // foreground child would hold the trap back until that child ends.
    let obeys_int = sh("trap 'exit 3' INT; echo ready; read line").kill_policy(policy(BOUND, BOUND));
    let mut child = exec.spawn(obeys_int).await.expect("spawn");
    assert_eq!(read_line(child.stdout.as_mut().expect("stdout")).await, "ready");
    let status = child.handle.terminate().await.expect("terminate");
    assert_eq!((status.code, status.killed_by), (Some(3), Some(KillCause::Requested)), "SIGINT first: {status}");

    let obeys_term = sh("trap '' INT; trap 'exit 4' TERM; echo ready; read line")
        .kill_policy(policy(Duration::from_millis(60), BOUND));
    let mut child = exec.spawn(obeys_term).await.expect("spawn");
    assert_eq!(read_line(child.stdout.as_mut().expect("stdout")).await, "ready");
    let started = Instant::now();
    let status = child.handle.terminate().await.expect("terminate");
    assert_eq!((status.code, status.killed_by), (Some(4), Some(KillCause::Requested)), "then SIGTERM: {status}");
    assert!(started.elapsed() >= Duration::from_millis(60), "SIGTERM waits for the interrupt grace");
}

#[tokio::test]
async fn kill_leaves_no_grandchildren() {
    let exec = LocalExec::new();
    let mut child = exec.spawn(sh(FORKS_GRANDCHILDREN)).await.expect("spawn");
    let grandchildren = pids(&read_line(child.stdout.as_mut().expect("stdout")).await);
    assert_eq!(grandchildren.len(), 2);
    assert!(grandchildren.iter().all(|&pid| alive(pid)), "the grandchildren must be running first");

    child.handle.kill().expect("kill");
    let status = child.handle.wait().await.expect("wait");
    assert_eq!((status.signal, status.killed_by), (Some(9), Some(KillCause::Requested)), "{status}");
    for pid in grandchildren {
        assert_gone_within(pid, GONE_WITHIN).await;
    }
}

#[tokio::test]
async fn dropping_the_last_handle_kills_the_group() {
    let exec = LocalExec::new();
    let mut child = exec.spawn(sh(FORKS_GRANDCHILDREN)).await.expect("spawn");
    let grandchildren = pids(&read_line(child.stdout.as_mut().expect("stdout")).await);
    let leader = child.handle.id().expect("pid");

    let clone = child.handle.clone();
    drop(child);
    assert!(alive(leader) && clone.try_status().is_none(), "a remaining handle keeps the child");
    drop(clone);
    assert_gone_within(leader, GONE_WITHIN).await;
    for pid in grandchildren {
        assert_gone_within(pid, GONE_WITHIN).await;
    }
}

#[tokio::test]
async fn the_group_is_swept_when_its_leader_exits() {
    let exec = LocalExec::new();
    let mut child = exec.spawn(sh("sleep 30 & echo $!")).await.expect("spawn");
    let grandchild = pids(&read_line(child.stdout.as_mut().expect("stdout")).await)[0];
    let status = child.handle.wait().await.expect("wait");
    assert!(status.success() && status.killed_by.is_none(), "the leader exits on its own: {status}");
    assert_gone_within(grandchild, GONE_WITHIN).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_is_reported_once_when_kill_races_a_natural_exit() {
    let exec = LocalExec::new();
    for round in 0..150 {
        let child = exec.spawn(Command::new("true")).await.expect("spawn");
        match round % 3 {
            0 => {}
            1 => tokio::task::yield_now().await,
            _ => tokio::time::sleep(Duration::from_micros(500)).await,
        }
        let killer = child.handle.clone();
        let (killed, first, second) =
            tokio::join!(tokio::task::spawn_blocking(move || killer.kill()), child.handle.wait(), child.handle.wait());
        killed.expect("kill task").expect("kill");
        let status = first.expect("wait");
        assert_eq!(second.expect("wait"), status, "round {round}: two waits disagree");
        assert_eq!(child.handle.try_status(), Some(status), "round {round}");
        assert_eq!(child.handle.wait().await.expect("wait"), status, "round {round}");
        match (status.code, status.signal) {
            (Some(0), None) => {}
            (None, Some(9)) => assert_eq!(status.killed_by, Some(KillCause::Requested), "round {round}: {status}"),
            _ => panic!("round {round}: unexpected status {status}"),
        }
    }
}

#[tokio::test]
async fn writing_to_a_dead_child_is_an_error() {
    let exec = LocalExec::new();
    // Not waited for: the writes hit the closed pipe itself.
    let mut child = exec.spawn(Command::new("true")).await.expect("spawn");
    let mut stdin = child.stdin.take().expect("stdin");
    let chunk = vec![b'x'; 64 * 1024];
    let mut failed = None;
    for _ in 0..64 {
        if let Err(error) = stdin.write_all(&chunk).await {
            failed = Some(error);
            break;
        }
    }
    let error = failed.expect("writes to a dead child must fail");
    assert_eq!(error.kind(), std::io::ErrorKind::BrokenPipe, "{error}");

    // Waited for: writes fail at once.
    child.handle.wait().await.expect("wait");
    let error = stdin.write_all(b"late\n").await.expect_err("write after wait");
    assert_eq!(error.kind(), std::io::ErrorKind::BrokenPipe, "{error}");
}

#[tokio::test]
async fn a_flooding_child_is_stopped_by_its_line_limit() {
    let exec = LocalExec::new();
    let mut limits = Limits::default();
    limits.max_line_bytes = Some(4096);
    let mut child = exec.spawn(sh("while :; do printf xxxxxxxxxxxxxxxx; done").limits(limits)).await.expect("spawn");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut sink = Vec::new();
    let error = stdout.read_to_end(&mut sink).await.expect_err("the line limit must fail the read");
    assert_eq!(error.kind(), std::io::ErrorKind::InvalidData);
    let limit = error.into_inner().and_then(|e| e.downcast::<LimitExceeded>().ok()).expect("typed error");
    assert_eq!((limit.cause, limit.limit), (KillCause::LineLimit, 4096));
    assert_eq!(sink.len(), 4096, "exactly the bytes within the limit arrive");
    let status = child.handle.wait().await.expect("wait");
    assert_eq!(status.killed_by, Some(KillCause::LineLimit), "{status}");
}

#[tokio::test]
async fn the_wall_clock_limit_ends_the_whole_group() {
    let exec = LocalExec::new();
    let mut limits = Limits::default();
    limits.wall_clock = Some(Duration::from_millis(200));
    let mut child = exec.spawn(sh(FORKS_GRANDCHILDREN).limits(limits)).await.expect("spawn");
    let grandchildren = pids(&read_line(child.stdout.as_mut().expect("stdout")).await);
    let status = child.handle.wait().await.expect("wait");
    assert_eq!(status.killed_by, Some(KillCause::WallClock), "{status}");
    for pid in grandchildren {
        assert_gone_within(pid, GONE_WITHIN).await;
    }
}

/// The first executable `name` on the host's PATH.
fn on_host_path(name: &str) -> PathBuf {
    let path = std::env::var_os("PATH").expect("PATH");
    std::env::split_paths(&path).map(|dir| dir.join(name)).find(|p| p.is_file()).expect("program on PATH")
}

#[tokio::test]
async fn the_allow_list_rejects_unlisted_programs_before_spawning() {
    let exec = LocalExec::builder().allow_executable("sh").build().expect("allow-list");
    let dir = scratch_dir("allow");
    let marker = dir.join("ran");

    let cat = exec.spawn(Command::new("cat")).await.expect_err("cat is not listed");
    let expected = on_host_path("cat").canonicalize().expect("canonical cat");
    match &cat {
        ExecError::NotAllowed { resolved } => assert_eq!(resolved, &expected),
        other => panic!("wrong error: {other:?}"),
    }
    assert!(cat.to_string().contains(&*expected.to_string_lossy()), "the message names the path: {cat}");

    let only_true = LocalExec::builder().allow_executable(on_host_path("true")).build().expect("allow-list");
    let touch = sh(&format!("echo > '{}'", marker.display()));
    assert!(matches!(only_true.spawn(touch.clone()).await, Err(ExecError::NotAllowed { .. })));

    // The listed program runs, by name or by any path that resolves to it.
    let by_name = exec.spawn(touch).await.expect("sh is listed");
    assert!(by_name.handle.wait().await.expect("wait").success());
    assert!(marker.exists(), "the listed program ran");
    let by_path = exec.spawn(Command::new(on_host_path("sh")).args(["-c", "exit 5"])).await.expect("by path");
    assert_eq!(by_path.handle.wait().await.expect("wait").code, Some(5));

    let missing = LocalExec::builder().allow_executable("/nonexistent/agent-exec-tool").build();
    assert!(matches!(missing, Err(ExecError::ProgramNotFound { searched_path: false, .. })), "{missing:?}");
    std::fs::remove_dir_all(dir).expect("cleanup");
}

#[tokio::test]
async fn bad_input_fails_with_specific_errors() {
    let exec = LocalExec::new();
    let missing_dir = Path::new("/nonexistent/agent-exec-cwd");
    let cases: Vec<(Command, String)> = vec![
        (Command::new(""), "EmptyArgv".into()),
        (
            Command::new("agent-exec-no-such-program"),
            r#"ProgramNotFound { program: "agent-exec-no-such-program", searched_path: true }"#.into(),
        ),
        (
            Command::new("bin/agent-exec-no-such-program"),
            r#"ProgramNotFound { program: "bin/agent-exec-no-such-program", searched_path: false }"#.into(),
        ),
        (
            Command::new("true").cwd(missing_dir),
            format!(
                "InvalidCwd {{ cwd: {missing_dir:?}, reason: {:?} }}",
                std::io::Error::from(rustix::io::Errno::NOENT).to_string()
            ),
        ),
        (Command::new("true").env("K=V", "1"), r#"InvalidEnv { key: "K=V", reason: "name contains '='" }"#.into()),
        (
            Command::new("true").env("K\0", "1"),
            r#"InvalidEnv { key: "K\0", reason: "name contains a NUL byte" }"#.into(),
        ),
    ];
    for (command, expected) in cases {
        let error = exec.spawn(command).await.expect_err("must be rejected");
        assert_eq!(format!("{error:?}"), expected);
    }
}

#[tokio::test]
async fn a_program_that_exists_but_cannot_run_says_why() {
    let exec = LocalExec::new();
    let programs = ProgramDir::new("not-runnable");
    let directory = programs.dir("tool-dir");
    let plain = programs.file("tool-plain", 0o644);
    let missing = programs.path().join("missing-tool");
    let dangling = programs.symlink("tool-link", &missing);
    let fifo = programs.path().join("tool-fifo");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo runs");
    assert!(made.success());
    let search = programs.dir("bin");
    let found = search.join("tool");
    std::fs::write(&found, "").expect("write");
    let script = programs.file("tool-script", 0o755);
    std::fs::write(&script, "#! /nonexistent/agent-exec-interpreter -x\necho ran\n").expect("write");
    let interpreter = PathBuf::from("/nonexistent/agent-exec-interpreter");
    let cases: Vec<(Command, &Path, ProgramProblem, &str)> = vec![
        (Command::new(&directory), &directory, ProgramProblem::IsDirectory, "is a directory"),
        (Command::new(&plain), &plain, ProgramProblem::NotExecutable { mode: 0o644 }, "is not executable (mode 0644)"),
        (
            Command::new(&dangling),
            &dangling,
            ProgramProblem::DanglingSymlink { target: missing.clone() },
            "which does not exist",
        ),
        (Command::new(&fifo), &fifo, ProgramProblem::NotRegularFile { kind: "a FIFO" }, "is not a regular file"),
        (
            Command::new(&script),
            &script,
            ProgramProblem::InterpreterNotFound { interpreter },
            "names an interpreter that does not exist: \"/nonexistent/agent-exec-interpreter\"",
        ),
        (
            Command::new("tool").env("PATH", search.as_os_str()),
            &found,
            ProgramProblem::NotExecutable { mode: 0o644 },
            "is not executable (mode 0644)",
        ),
    ];
    for (command, path, problem, text) in cases {
        let searched = !command.program.as_encoded_bytes().contains(&b'/');
        let error = exec.spawn(command).await.expect_err("must be rejected");
        let message = error.to_string();
        assert!(message.contains(&*path.to_string_lossy()), "the error names {}: {message}", path.display());
        assert!(message.contains(text), "the error says `{text}`: {message}");
        match error {
            ExecError::ProgramNotExecutable { path: got, problem: why, searched_path, .. } => {
                assert_eq!((got.as_path(), why, searched_path), (path, problem, searched));
            }
            other => panic!("expected ProgramNotExecutable, got {other:?}"),
        }
    }

    // Like `execvp`, the `PATH` search passes over a match that cannot run for one that can.
    let later = programs.dir("later");
    std::fs::write(later.join("tool"), "#!/bin/sh\necho ran\n").expect("write");
    std::fs::set_permissions(later.join("tool"), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let mut both = search.into_os_string();
    both.push(":");
    both.push(&later);
    let mut child = exec.spawn(Command::new("tool").env("PATH", both)).await.expect("the later match runs");
    assert_eq!(read_line(child.stdout.as_mut().expect("stdout")).await, "ran");
    assert!(child.handle.wait().await.expect("wait").success());
    // The allow-list resolves its entries the same way.
    let refused = LocalExec::builder().allow_executable(&plain).build();
    assert!(matches!(refused, Err(ExecError::ProgramNotExecutable { .. })), "{refused:?}");
}

#[tokio::test]
async fn the_reaper_ends_stamped_children_of_sessions_that_are_not_live() {
    let exec = LocalExec::new();
    let dead = SessionId::new(format!("reap-dead-{}", std::process::id())).expect("id");
    let live = SessionId::new(format!("reap-live-{}", std::process::id())).expect("id");
    let mut orphan = exec.spawn(sh(FORKS_GRANDCHILDREN).session(dead.clone())).await.expect("spawn");
    let orphan_grandchildren = pids(&read_line(orphan.stdout.as_mut().expect("stdout")).await);
    let kept = exec.spawn(Command::new("sleep").arg("30").session(live.clone())).await.expect("spawn");
    // A sleeper still in its `execve` has no environment to read its stamp from yet.
    for &pid in &orphan_grandchildren {
        until_sleeping(pid).await;
    }

    let is_live = |session: &str| session != dead.as_str();
    let ended = exec.reap_orphans(&is_live).await.expect("reap");
    // The shell and its two sleepers carry the dead session; stamped processes of crashed
    // harness processes elsewhere on the machine would be ended too.
    assert!(ended >= 3, "the shell and its two sleepers must be ended, ended {ended}");
    let status = orphan.handle.wait().await.expect("wait");
    assert_eq!(status.signal, Some(9), "{status}");
    for pid in orphan_grandchildren {
        assert_gone_within(pid, GONE_WITHIN).await;
    }
    assert!(kept.handle.try_status().is_none(), "a live session's child is spared");
    assert!(alive(kept.handle.id().expect("pid")));
}

/// A process a session's CLI started outside its process group (`setsid`) survives the group's
/// kill; once the session ended, `end_session_processes` finds it by its stamp and ends it,
/// sparing the processes of other sessions, and of another harness's session of the same ID.
#[tokio::test]
async fn the_processes_a_session_left_outside_its_group_end_with_it() {
    let exec = LocalExec::new();
    let ended_session = SessionId::new(format!("end-ended-{}", std::process::id())).expect("id");
    let other = SessionId::new(format!("end-other-{}", std::process::id())).expect("id");
    let escaping = "setsid sh -c 'echo $$; exec sleep 30' </dev/null 2>/dev/null & wait";
    let mut cli = exec.spawn(sh(escaping).session(ended_session.clone()).harness(7)).await.expect("spawn");
    let escaped = pids(&read_line(cli.stdout.as_mut().expect("stdout")).await);
    for &pid in &escaped {
        until_sleeping(pid).await;
    }
    let kept = exec.spawn(Command::new("sleep").arg("30").session(other.clone()).harness(7)).await.expect("spawn");
    let namesake = exec.spawn(Command::new("sleep").arg("30").session(ended_session.clone()).harness(8));
    let namesake = namesake.await.expect("spawn");
    cli.handle.kill().expect("kill");
    cli.handle.wait().await.expect("wait");
    for &pid in &escaped {
        assert!(alive(pid), "outside the group, {pid} outlives the group's kill");
    }

    let ended = exec.end_session_processes(ended_session.as_str(), 7).await.expect("end");
    assert_eq!(ended, escaped.len(), "the escaped process, and nothing else, is ended");
    for pid in escaped {
        assert_gone_within(pid, GONE_WITHIN).await;
    }
    for (spared, whose) in [(&kept, "another session's"), (&namesake, "another harness's same-named session's")] {
        assert!(spared.handle.try_status().is_none(), "{whose} child is spared");
        assert!(alive(spared.handle.id().expect("pid")), "{whose} child is spared");
    }
    assert_eq!(exec.end_session_processes(ended_session.as_str(), 7).await.expect("end"), 0, "nothing is left");
}

/// The scan for an ended session's processes does not belong to the runtime of the session that
/// asked for it first: with that runtime gone mid-scan, a session of another runtime is still
/// answered (tests and applications run several runtimes).
#[test]
fn the_session_end_scan_outlives_the_runtime_that_asked_first() {
    let runtime = || tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("rt");
    // Asked once, then given up on along with its runtime before anything else ran there.
    let first = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("rt");
    first.block_on(async {
        let exec = LocalExec::new();
        let mut asked = std::pin::pin!(exec.end_session_processes("outlives-first", 1));
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        // Polled once: queued (and, on a busy machine, maybe answered already).
        let _ = asked.as_mut().poll(&mut cx);
    });
    drop(first);

    runtime().block_on(async {
        let exec = LocalExec::new();
        let session = SessionId::new(format!("outlives-second-{}", std::process::id())).expect("id");
        let escaping = "setsid sh -c 'echo $$; exec sleep 30' </dev/null 2>/dev/null & wait";
        let mut cli = exec.spawn(sh(escaping).session(session.clone()).harness(2)).await.expect("spawn");
        let escaped = pids(&read_line(cli.stdout.as_mut().expect("stdout")).await);
        cli.handle.kill().expect("kill");
        cli.handle.wait().await.expect("wait");
        for &pid in &escaped {
            until_sleeping(pid).await;
        }
        let ended = tokio::time::timeout(BOUND, exec.end_session_processes(session.as_str(), 2)).await;
        assert_eq!(ended.expect("answered").expect("ended"), escaped.len());
        for pid in escaped {
            assert_gone_within(pid, GONE_WITHIN).await;
        }
    });
}

/// A child whose runtime is dropped before its supervisor ever ran (a `current_thread`
/// runtime that returned from `block_on(spawn)`) is killed and reaped, and its handle's `wait`
/// on another runtime ends, where the child stayed a zombie and `wait` never returned.
#[test]
fn a_child_whose_runtime_is_dropped_before_its_supervisor_ran_is_reaped() {
    let first = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("rt");
    let child = first.block_on(LocalExec::new().spawn(sh("exec sleep 30"))).expect("spawn");
    drop(first);
    let pid = child.handle.id().expect("a pid");
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("rt");
    runtime.block_on(async {
        let status = tokio::time::timeout(BOUND, child.handle.wait()).await.expect("wait ends").expect("a status");
        assert!(!status.success(), "killed: {status:?}");
        assert_gone_within(pid, GONE_WITHIN).await;
    });
}

/// Waits until `pid` runs `sleep`: while it execs, its environment (its stamp) may not be
/// readable.
async fn until_sleeping(pid: u32) {
    let sleeping = || std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "sleep");
    let deadline = Instant::now() + BOUND;
    while !sleeping() {
        assert!(Instant::now() < deadline, "{pid} never ran sleep");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A fresh directory under the system temp dir.
fn scratch_dir(label: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("agent-exec-test-{}-{label}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}
