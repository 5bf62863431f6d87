//! How LocalExec starts a child: what the child inherits, and a start that fails after every
//! check passed. One test per concern in its own binary, so no other test's children are around
//! when this one looks for leftovers.

mod common;

use std::os::unix::fs::PermissionsExt;

use agent_core::exec::{Command, Exec, ExecError};
use agent_exec::LocalExec;
use agent_testkit::programs::ProgramDir;
use tokio::io::AsyncReadExt;

/// The `Sig…` mask line `name` of `/proc/<pid>/status` text, as bits.
fn mask(status: &str, name: &str) -> u64 {
    let line = status.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("{name} in {status}"));
    u64::from_str_radix(line[name.len()..].trim(), 16).expect("hex mask")
}

/// PIDs of this process's children that are zombies (exited, never reaped).
fn zombie_children() -> Vec<u32> {
    let me = std::process::id().to_string();
    let mut zombies = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        let Some(end) = stat.rfind(')') else { continue };
        let fields: Vec<&str> = stat[end + 1..].split_whitespace().collect();
        if fields.get(1) == Some(&me.as_str()) && fields.first() == Some(&"Z") {
            zombies.push(entry.file_name().to_string_lossy().parse().unwrap_or(0));
        }
    }
    zombies
}

#[tokio::test]
async fn a_child_gets_default_sigpipe_no_blocked_signals_and_a_failed_exec_is_reported_and_reaped() {
    const SIGPIPE_BIT: u64 = 1 << (13 - 1);
    let exec = LocalExec::new();

    // The Rust runtime ignores SIGPIPE in this host; the child must not inherit that.
    let host = std::fs::read_to_string("/proc/self/status").expect("own status");
    assert_ne!(mask(&host, "SigIgn:") & SIGPIPE_BIT, 0, "control: the test host ignores SIGPIPE");
    let mut child = exec.spawn(Command::new("cat").arg("/proc/self/status")).await.expect("spawn cat");
    let mut status = String::new();
    child.stdout.as_mut().expect("stdout").read_to_string(&mut status).await.expect("read");
    assert!(child.handle.wait().await.expect("wait").success());
    assert_eq!(mask(&status, "SigIgn:") & SIGPIPE_BIT, 0, "SIGPIPE is back to default: {status}");
    assert_eq!(mask(&status, "SigBlk:"), 0, "nothing blocked: {status}");

    // Every check passes (a regular, executable file), and then the kernel refuses the format.
    let programs = ProgramDir::new("spawning");
    let garbage = programs.file("not-a-program", 0o755);
    std::fs::write(&garbage, b"\x01\x02 neither ELF nor a script\n").expect("write");
    std::fs::set_permissions(&garbage, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let error = exec.spawn(Command::new(&garbage)).await.expect_err("the kernel refuses it");
    match &error {
        ExecError::Spawn { source, .. } => assert_eq!(source.raw_os_error(), Some(8), "ENOEXEC: {error}"),
        other => panic!("expected Spawn, got {other:?}"),
    }
    assert_eq!(zombie_children(), Vec::<u32>::new(), "the failed child was reaped");

    // And the next start works.
    let child = exec.spawn(Command::new("true")).await.expect("spawn true");
    assert!(child.handle.wait().await.expect("wait").success());
}
