//! Thin, safe wrappers over the process syscalls LocalExec needs.

use std::io;
use std::os::unix::process::ExitStatusExt;

use agent_core::exec::ExitStatus;
use libc::pid_t;

/// Sends `signal` to every process of group `pgid`. A group that no longer exists is `Ok`.
pub(super) fn killpg(pgid: pid_t, signal: i32) -> io::Result<()> {
    // SAFETY: killpg takes plain integers and touches no memory of ours.
    if unsafe { libc::killpg(pgid, signal) } == 0 {
        return Ok(());
    }
    match io::Error::last_os_error() {
        error if error.raw_os_error() == Some(libc::ESRCH) => Ok(()),
        error => Err(error),
    }
}

/// Sends `signal` to the single process `pid`. A process that no longer exists is `Ok`.
#[cfg(target_os = "linux")]
pub(super) fn kill(pid: pid_t, signal: i32) -> io::Result<()> {
    // SAFETY: kill takes plain integers and touches no memory of ours.
    if unsafe { libc::kill(pid, signal) } == 0 {
        return Ok(());
    }
    match io::Error::last_os_error() {
        error if error.raw_os_error() == Some(libc::ESRCH) => Ok(()),
        error => Err(error),
    }
}

/// Waits for child `pid` to exit without reaping it, so its ID (and its process group's) stays
/// reserved. With `block` false, only looks. Returns whether it has exited; a child that is no
/// longer ours to wait for counts as exited.
pub(super) fn exited_unreaped(pid: pid_t, block: bool) -> bool {
    let flags = libc::WEXITED | libc::WNOWAIT | if block { 0 } else { libc::WNOHANG };
    loop {
        // SAFETY: an all-zero siginfo_t is a valid value for waitid to fill in.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `info` is a valid, writable siginfo_t for the duration of the call.
        if unsafe { libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, flags) } == 0 {
            // SAFETY: waitid succeeded, so `info` holds a SIGCHLD siginfo whose pid field is
            // set (zero when WNOHANG found nothing).
            return unsafe { info.si_pid() } != 0;
        }
        if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return true;
        }
    }
}

/// Reaps child `pid`, blocking until it has exited. `None` when it was not ours to reap (the
/// host ignores SIGCHLD, or someone else reaped it).
pub(super) fn reap(pid: pid_t) -> Option<std::process::ExitStatus> {
    let mut raw = 0;
    loop {
        // SAFETY: `raw` is a valid, writable int for the duration of the call.
        if unsafe { libc::waitpid(pid, &mut raw, 0) } == pid {
            return Some(std::process::ExitStatus::from_raw(raw));
        }
        if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return None;
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
pub(super) fn pidfd_open(pid: pid_t) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;

    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the syscall returned a fresh descriptor that nothing else owns.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) })
}

/// Makes the child get SIGKILL when the thread that forks it dies, and refuse to start if the
/// host already died between fork and this check.
#[cfg(target_os = "linux")]
pub(super) fn die_with_host(command: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;

    let host = std::process::id() as pid_t;
    let arm = move || {
        // SAFETY: prctl(PR_SET_PDEATHSIG) takes integers only; it is async-signal-safe.
        if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) } == -1 {
            return Err(io::Error::last_os_error());
        }
        // The host may have died before prctl armed the signal: then the child was already
        // re-parented and must not start.
        // SAFETY: getppid has no preconditions and is async-signal-safe.
        if unsafe { libc::getppid() } != host {
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
        Ok(())
    };
    // SAFETY: the closure runs in the forked child before exec and only calls the
    // async-signal-safe functions prctl and getppid; it allocates nothing.
    unsafe {
        command.pre_exec(arm);
    }
}

/// Parent-death signals do not exist here; containment relies on the process group.
#[cfg(not(target_os = "linux"))]
pub(super) fn die_with_host(_command: &mut std::process::Command) {}
