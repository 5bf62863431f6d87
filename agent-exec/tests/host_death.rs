//! A host process killed with SIGKILL: its child dies with it (Linux parent-death signal), and
//! grandchildren, which that signal does not reach, are found by their session stamp and ended
//! by the orphan reaper. A host that exits without ending its sessions ends what they started
//! itself.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};

use agent_core::exec::Exec;
use agent_exec::LocalExec;
use common::{GONE_WITHIN, alive, assert_gone_within, gone_within, pids};

/// Held by the tests that end dead hosts' processes: a reap ends every one, and would end the
/// processes another test of this file counts on finding.
static REAPING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Starts the helper host and returns it with the PIDs it printed.
fn start_host(args: &[&str]) -> (Child, Vec<u32>) {
    let mut host = std::process::Command::new(env!("CARGO_BIN_EXE_exec-host-helper"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start exec-host-helper");
    let mut line = String::new();
    BufReader::new(host.stdout.take().expect("stdout")).read_line(&mut line).expect("read pids");
    let pids = pids(&line);
    assert!(!pids.is_empty() && pids.iter().all(|&pid| alive(pid)), "the helper's children must run: {line:?}");
    (host, pids)
}

/// SIGKILLs the host and reaps it.
fn kill_host(mut host: Child) {
    host.kill().expect("SIGKILL the host");
    host.wait().expect("reap the host");
}

#[tokio::test]
async fn a_sigkilled_host_leaves_no_child_alive() {
    let (host, children) = start_host(&["child"]);
    kill_host(host);
    assert_gone_within(children[0], GONE_WITHIN).await;
}

#[tokio::test]
async fn grandchildren_of_a_sigkilled_host_are_reaped_by_their_stamp() {
    let _reaping = REAPING.lock().await;
    let session = format!("host-death-{}", std::process::id());
    let (host, children) = start_host(&["grandchild", &session]);
    let (child, grandchild) = (children[0], children[1]);
    kill_host(host);
    assert_gone_within(child, GONE_WITHIN).await;
    assert!(alive(grandchild), "the parent-death signal reaches direct children only");

    let ended = LocalExec::new().reap_orphans(&|_: &str| true).await.expect("reap");
    assert!(ended >= 1, "the orphaned grandchild must be found, ended {ended}");
    assert_gone_within(grandchild, GONE_WITHIN).await;
}

/// What a SIGKILLed host left running for a session is ended for that session (as its resume
/// asks), and for no other; this process's own processes of the session are spared.
#[tokio::test]
async fn what_a_sigkilled_host_left_for_a_session_is_ended_for_that_session_only() {
    let _reaping = REAPING.lock().await;
    let session = format!("host-death-left-{}", std::process::id());
    let (host, children) = start_host(&["grandchild", &session]);
    let (child, grandchild) = (children[0], children[1]);
    let host_pid = host.id();
    kill_host(host);
    assert_gone_within(child, GONE_WITHIN).await;
    let exec = LocalExec::new();
    let id = agent_core::SessionId::new(session.clone()).expect("id");
    let ours = exec.spawn(agent_core::exec::Command::new("sleep").arg("30").session(id)).await.expect("spawn");

    // The helper stamps its sessions' processes as harness number 1.
    for (other, owner, harness) in
        [(&*format!("{session}-other"), host_pid, 1), (&session, host_pid + 1, 1), (&session, host_pid, 2)]
    {
        let ended = exec.end_abandoned_processes(other, owner, harness).await.expect("look");
        assert_eq!(ended, 0, "the look for another run ends nothing of this one: {other} {owner} {harness}");
    }
    assert!(alive(grandchild));
    let ended = exec.end_abandoned_processes(&session, host_pid, 1).await.expect("look");
    assert!(ended >= 1, "the dead host's grandchild must be found, ended {ended}");
    assert_gone_within(grandchild, GONE_WITHIN).await;
    assert!(ours.handle.try_status().is_none(), "a live process's child of the session is spared");
    ours.handle.kill().expect("kill");
}

/// A host that calls `std::process::exit`, or returns from `main` without ending its child,
/// leaves nothing running: what the child started in a session of its own, which neither the
/// parent-death signal nor the child's group reaches, is ended by the host's exit handler.
#[tokio::test]
async fn a_host_that_exits_without_ending_its_sessions_leaves_nothing_running() {
    for how in ["exit", "return"] {
        let session = format!("host-exit-{how}-{}", std::process::id());
        let (mut host, children) = start_host(&["escaped", &session, how]);
        let (child, escaped) = (children[0], children[1]);
        drop(host.stdin.take());
        assert!(host.wait().expect("the host exits").success(), "{how}");
        assert_gone_within(child, GONE_WITHIN).await;
        let ended = gone_within(escaped, GONE_WITHIN).await;
        if !ended {
            let _ = std::process::Command::new("kill").args(["-KILL", &escaped.to_string()]).status();
        }
        assert!(ended, "{how}: the child's setsid process outlived the host");
    }
}

/// What `unshare` with user and PID namespaces needs, for the tests that make a namespace.
const UNSHARE: &str = "`unshare` (util-linux) with unprivileged user namespaces: apt-get install util-linux, and \
                       sysctl user.max_user_namespaces=15000 where they are off";

/// The first child of `parent` whose environment holds `marker`, once it runs.
async fn stamped_child(parent: u32, marker: &str) -> u32 {
    let children = format!("/proc/{parent}/task/{parent}/children");
    for _ in 0..200 {
        let child = std::fs::read_to_string(&children).ok().and_then(|text| pids(&text).first().copied());
        let environ = child.and_then(|pid| std::fs::read(format!("/proc/{pid}/environ")).ok());
        if let Some(pid) =
            child.filter(|_| environ.is_some_and(|env| env.windows(marker.len()).any(|w| w == marker.as_bytes())))
        {
            return pid;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("no stamped process runs in the new PID namespace under {parent}: {UNSHARE}");
}

/// A process of another PID namespace whose stamp was written there (by a harness in a
/// container, on this kernel) is never ended: its owner's PID is of that namespace, and here
/// is another process or none, though its owner may well run.
#[tokio::test]
async fn a_process_stamped_in_another_pid_namespace_is_never_reaped() {
    use agent_core::exec::{HARNESS_MARKER_ENV, OWNER_MARKER_ENV, OWNER_NAMESPACE_MARKER_ENV, SESSION_MARKER_ENV};
    let _reaping = REAPING.lock().await;
    let session = format!("host-death-namespace-{}", std::process::id());
    // No process has this PID here: read as this namespace's, the stamp's owner is gone.
    let owner = u32::try_from(i32::MAX - 1).expect("pid");
    let exec = LocalExec::new();
    // Stamped as an older harness does, without its namespace, and with it: a namespace that is
    // not this one.
    for namespace in [None, Some("1")] {
        let mut stamp = vec![
            format!("{OWNER_MARKER_ENV}={owner}"),
            format!("{SESSION_MARKER_ENV}={session}"),
            format!("{HARNESS_MARKER_ENV}=1"),
        ];
        stamp.extend(namespace.map(|n| format!("{OWNER_NAMESPACE_MARKER_ENV}={n}")));
        let mut outer = std::process::Command::new("unshare")
            .args(["--user", "--map-root-user", "--pid", "--fork", "env", "-u", OWNER_NAMESPACE_MARKER_ENV])
            .args(&stamp)
            .args(["sleep", "60"])
            .spawn()
            .expect(UNSHARE);
        let inner = stamped_child(outer.id(), &session).await;

        assert_eq!(exec.end_abandoned_processes(&session, owner, 1).await.expect("look"), 0, "{namespace:?}");
        exec.reap_orphans(&|_: &str| true).await.expect("reap");
        assert!(alive(inner), "{namespace:?}: the other namespace's process is spared");
        outer.kill().expect("end unshare");
        let _ = std::process::Command::new("kill").args(["-KILL", &inner.to_string()]).status();
        outer.wait().expect("reap unshare");
        assert_gone_within(inner, GONE_WITHIN).await;
    }
}

/// What a session's CLI started in a PID namespace of its own (a tool's sandbox) and out of
/// its process group carries this process's stamp: it ends with the session like any other.
#[tokio::test]
async fn what_a_cli_started_in_a_pid_namespace_of_its_own_ends_with_its_session() {
    let _reaping = REAPING.lock().await;
    let session = agent_core::SessionId::new(format!("host-death-sandbox-{}", std::process::id())).expect("id");
    let exec = LocalExec::new();
    let sandbox = agent_core::exec::Command::new("unshare")
        .args(["--user", "--map-root-user", "--pid", "--fork", "setsid", "sleep", "60"])
        .session(session.clone())
        .harness(5);
    let cli = exec.spawn(sandbox).await.expect(UNSHARE);
    let inner = stamped_child(cli.handle.id().expect("pid"), session.as_str()).await;
    // Out of the group once `setsid` made way for `sleep`.
    for _ in 0..200 {
        if std::fs::read_to_string(format!("/proc/{inner}/comm")).is_ok_and(|comm| comm.trim() == "sleep") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    cli.handle.kill().expect("the group's kill");
    cli.handle.wait().await.expect("wait");
    assert!(alive(inner), "in a session of its own, the sandbox outlives the group's kill");

    let ended = exec.end_session_processes(session.as_str(), 5).await.expect("end");
    assert!(ended >= 1, "the sandboxed process is found by its stamp, ended {ended}");
    assert_gone_within(inner, GONE_WITHIN).await;
}
