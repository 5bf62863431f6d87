//! A host that ignores SIGINT and SIGTERM — any program started in the background of a
//! non-interactive shell (`cmd &`) does — still gets a child that can be asked to stop: the
//! child starts with both at their defaults, so the kill policy's first signal reaches it.
//! Its own binary, because it changes this process's signal dispositions.

mod common;

use std::time::Duration;

use agent_core::exec::{Command, Exec, KillCause, KillPolicy};
use agent_exec::LocalExec;
use common::read_line;
use tokio::io::AsyncReadExt;

/// The `SigIgn:` mask of `/proc/<pid>/status` text, as bits.
fn ignored(status: &str) -> u64 {
    let line = status.lines().find(|l| l.starts_with("SigIgn:")).unwrap_or_else(|| panic!("SigIgn in {status}"));
    u64::from_str_radix(line["SigIgn:".len()..].trim(), 16).expect("hex mask")
}

fn bit(signal: i32) -> u64 {
    1 << (signal - 1)
}

#[tokio::test]
async fn a_host_that_ignores_sigint_and_sigterm_still_gets_a_child_that_obeys_them() {
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: setting a disposition to SIG_IGN installs no handler; this binary's only
        // test runs alone.
        let previous = unsafe { libc::signal(signal, libc::SIG_IGN) };
        assert_ne!(previous, libc::SIG_ERR, "signal {signal}");
    }
    let host = std::fs::read_to_string("/proc/self/status").expect("own status");
    let asks_to_stop = bit(libc::SIGINT) | bit(libc::SIGTERM);
    assert_eq!(ignored(&host) & asks_to_stop, asks_to_stop, "control: the host ignores both");

    let exec = LocalExec::new();
    let mut child = exec.spawn(Command::new("cat").arg("/proc/self/status")).await.expect("spawn cat");
    let mut status = String::new();
    child.stdout.as_mut().expect("stdout").read_to_string(&mut status).await.expect("read");
    assert!(child.handle.wait().await.expect("wait").success());
    assert_eq!(ignored(&status) & asks_to_stop, 0, "SIGINT and SIGTERM are back to default: {status}");
    assert_ne!(ignored(&status) & bit(libc::SIGHUP), 0, "an ignored SIGHUP stays ignored (nohup): {status}");

    // The escalation's first step works: a shell's SIGINT trap runs.
    let mut policy = KillPolicy::default();
    policy.interrupt_grace = Duration::from_secs(5);
    policy.terminate_grace = Duration::from_secs(5);
    let obeys_int = Command::new("sh").arg("-c").arg("trap 'exit 3' INT; echo ready; read line").kill_policy(policy);
    let mut child = exec.spawn(obeys_int).await.expect("spawn");
    assert_eq!(read_line(child.stdout.as_mut().expect("stdout")).await, "ready");
    let status = child.handle.terminate().await.expect("terminate");
    assert_eq!((status.code, status.killed_by), (Some(3), Some(KillCause::Requested)), "SIGINT first: {status}");
}
