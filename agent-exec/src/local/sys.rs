//! The process syscalls LocalExec needs, through rustix, with the error handling each call site
//! wants (a vanished process is not an error, an interrupted wait is retried).

use std::io;
use std::os::unix::process::ExitStatusExt;

use agent_core::exec::ExitStatus;
use rustix::io::Errno;
use rustix::process::{Pid, Signal, WaitId, WaitIdOptions, WaitOptions};

/// The signal with number `raw`, e.g. one the shared stop escalation asks for.
pub(super) fn signal(raw: i32) -> io::Result<Signal> {
    Signal::from_named_raw(raw).ok_or_else(|| io::Error::from(Errno::INVAL))
}

/// Sends `signal` to every process of group `pgid`. A group that no longer exists is `Ok`.
pub(super) fn killpg(pgid: Pid, signal: Signal) -> io::Result<()> {
    match rustix::process::kill_process_group(pgid, signal) {
        Err(error) if error != Errno::SRCH => Err(error.into()),
        _ => Ok(()),
    }
}

/// Sends `signal` to the single process `pid`. A process that no longer exists is `Ok`.
#[cfg(target_os = "linux")]
pub(super) fn kill(pid: Pid, signal: Signal) -> io::Result<()> {
    match rustix::process::kill_process(pid, signal) {
        Err(error) if error != Errno::SRCH => Err(error.into()),
        _ => Ok(()),
    }
}

/// Waits for child `pid` to exit without reaping it, so its ID (and its process group's) stays
/// reserved. With `block` false, only looks. Returns whether it has exited; a child that is no
/// longer ours to wait for counts as exited.
pub(super) fn exited_unreaped(pid: Pid, block: bool) -> bool {
    let mut options = WaitIdOptions::EXITED | WaitIdOptions::NOWAIT;
    if !block {
        options |= WaitIdOptions::NOHANG;
    }
    loop {
        match rustix::process::waitid(WaitId::Pid(pid), options) {
            // `None` only with NOHANG: the child is still running.
            Ok(status) => return status.is_some(),
            Err(Errno::INTR) => continue,
            Err(_) => return true,
        }
    }
}

/// Reaps child `pid`, blocking until it has exited. `None` when it was not ours to reap (the
/// host ignores SIGCHLD, or someone else reaped it).
pub(super) fn reap(pid: Pid) -> Option<std::process::ExitStatus> {
    loop {
        match rustix::process::waitpid(Some(pid), WaitOptions::empty()) {
            Ok(Some((_, status))) => return Some(std::process::ExitStatus::from_raw(status.as_raw())),
            Ok(None) => return None,
            Err(Errno::INTR) => continue,
            Err(_) => return None,
        }
    }
}

/// Converts an OS exit status.
pub(super) fn exit_status(status: Option<std::process::ExitStatus>) -> ExitStatus {
    match status {
        Some(status) => match (status.code(), status.signal()) {
            (Some(code), _) => ExitStatus::code(code),
            (None, Some(signal)) => ExitStatus::signal(signal),
            (None, None) => unknown_exit(),
        },
        None => unknown_exit(),
    }
}

/// Neither a code nor a signal: the status was lost because the host ignores SIGCHLD or
/// something else reaped the child.
fn unknown_exit() -> ExitStatus {
    let mut status = ExitStatus::code(0);
    status.code = None;
    status
}

/// A pollable descriptor that becomes readable when process `pid` exits.
#[cfg(target_os = "linux")]
pub(super) fn pidfd_open(pid: Pid) -> io::Result<std::os::fd::OwnedFd> {
    Ok(rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty())?)
}
