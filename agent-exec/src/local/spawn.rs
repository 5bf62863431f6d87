//! Starting one child without copying the host.
//!
//! A plain `fork` copies the host's page tables and write-protects all of its memory, so its cost
//! grows with the host: tens of milliseconds per child in a harness holding a few hundred MiB
//! (a full memory store), paid again in copy-on-write faults afterwards. `std` avoids it with
//! `posix_spawn`, but only when no `pre_exec` hook is set, and the parent-death signal needs one.
//!
//! On Linux this module does what glibc's `posix_spawn` does, plus that signal:
//! `clone(CLONE_VM | CLONE_VFORK)` runs the child on a small stack of its own in the host's
//! memory while the spawning thread waits; the child makes system calls only — it allocates
//! nothing and takes no lock — then `execve`s. Everything it needs (C strings, pointer arrays,
//! descriptors) is built before the clone. A failure before the `execve` is reported through a
//! close-on-exec pipe as the `errno`, and the child is reaped before the error is returned.
//! Elsewhere `std::process::Command` (which uses `posix_spawn`) starts the child, without the
//! parent-death signal.

use std::ffi::OsString;
use std::io;
use std::os::fd::OwnedFd;
use std::path::PathBuf;

use rustix::process::{Pid, Signal};

use super::sys;

/// A child ready to start: every check has passed and every path is resolved.
#[derive(Debug)]
pub(super) struct Prepared {
    /// The program's resolved path: what runs.
    pub(super) program: PathBuf,
    /// `argv[0]`, as the caller named the program.
    pub(super) arg0: OsString,
    pub(super) args: Vec<OsString>,
    /// The child's whole environment.
    pub(super) env: Vec<(OsString, OsString)>,
    pub(super) cwd: Option<PathBuf>,
}

/// A started child: the leader of its own process group, with piped stdio.
#[derive(Debug)]
pub(super) struct Spawned {
    pub(super) pid: Pid,
    pub(super) stdin: OwnedFd,
    pub(super) stdout: OwnedFd,
    pub(super) stderr: OwnedFd,
}

impl Spawned {
    /// Kills and reaps a child nobody is waiting for.
    pub(super) fn discard(self) {
        let _ = sys::killpg(self.pid, Signal::KILL);
        sys::reap(self.pid);
    }
}

/// Starts `prepared`. On Linux the child gets SIGKILL when the *calling thread* dies, so call
/// this from a thread that lives as long as the host (see `spawner`).
pub(super) fn spawn(prepared: &Prepared) -> io::Result<Spawned> {
    imp::spawn(prepared)
}

#[cfg(target_os = "linux")]
mod imp {
    use std::ffi::{CString, OsStr, c_char, c_int, c_void};
    use std::io;
    use std::mem::MaybeUninit;
    use std::os::fd::{AsRawFd, OwnedFd, RawFd};
    use std::os::unix::ffi::OsStrExt;
    use std::ptr;

    use rustix::io::Errno;
    use rustix::pipe::PipeFlags;
    use rustix::process::Pid;

    use super::{Prepared, Spawned};
    use crate::local::sys;

    /// The child's stack: it only makes system calls through thin libc wrappers.
    const STACK: usize = 64 * 1024;
    /// Signals are numbered below this on Linux.
    const NSIG: c_int = 65;
    /// The step number the child reports when `execve` itself failed.
    const EXEC: u32 = 6;

    /// What the child reads, all built before the clone. Pointers into the parent's memory,
    /// which the child shares and which stays put while the spawning thread waits.
    struct Setup {
        program: *const c_char,
        argv: *const *const c_char,
        envp: *const *const c_char,
        /// Null to stay in the host's directory.
        cwd: *const c_char,
        /// Descriptors (all ≥ 3) to become the child's 0, 1 and 2.
        stdio: [RawFd; 3],
        /// The write end of the close-on-exec error pipe.
        report: RawFd,
        /// The host's PID: a child whose parent is already someone else must not start.
        host: libc::pid_t,
    }

    fn c_string(value: &OsStr) -> io::Result<CString> {
        CString::new(value.as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
    }

    fn pointers(strings: &[CString]) -> Vec<*const c_char> {
        strings.iter().map(|s| s.as_ptr()).chain(std::iter::once(ptr::null())).collect()
    }

    /// A close-on-exec pipe: (read end, write end).
    fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
        Ok(rustix::pipe::pipe_with(PipeFlags::CLOEXEC)?)
    }

    /// The same descriptor moved to 3 or above, so placing the child's 0–2 in order cannot
    /// overwrite one of them (only possible when the host runs with a closed stdio stream).
    fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
        if fd.as_raw_fd() > 2 { Ok(fd) } else { Ok(rustix::io::fcntl_dupfd_cloexec(&fd, 3)?) }
    }

    pub(super) fn spawn(prepared: &Prepared) -> io::Result<Spawned> {
        let program = c_string(prepared.program.as_os_str())?;
        let mut argv = vec![c_string(&prepared.arg0)?];
        for arg in &prepared.args {
            argv.push(c_string(arg)?);
        }
        let mut env = Vec::with_capacity(prepared.env.len());
        for (key, value) in &prepared.env {
            let mut entry = Vec::with_capacity(key.len() + value.len() + 1);
            entry.extend_from_slice(key.as_bytes());
            entry.push(b'=');
            entry.extend_from_slice(value.as_bytes());
            env.push(CString::new(entry).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?);
        }
        let cwd = prepared.cwd.as_deref().map(|cwd| c_string(cwd.as_os_str())).transpose()?;
        let argv_pointers = pointers(&argv);
        let env_pointers = pointers(&env);

        let (stdin_child, stdin) = pipe()?;
        let (stdout, stdout_child) = pipe()?;
        let (stderr, stderr_child) = pipe()?;
        let (report_read, report_write) = pipe()?;
        let child_ends = [above_stdio(stdin_child)?, above_stdio(stdout_child)?, above_stdio(stderr_child)?];
        let setup = Setup {
            program: program.as_ptr(),
            argv: argv_pointers.as_ptr(),
            envp: env_pointers.as_ptr(),
            cwd: cwd.as_ref().map_or(ptr::null(), |cwd| cwd.as_ptr()),
            stdio: [child_ends[0].as_raw_fd(), child_ends[1].as_raw_fd(), child_ends[2].as_raw_fd()],
            report: report_write.as_raw_fd(),
            host: rustix::process::getpid().as_raw_nonzero().get(),
        };
        let mut stack = vec![0u8; STACK];
        let pid = clone_child(&setup, &mut stack)?;
        drop(child_ends);
        drop(report_write);

        // Eight bytes (errno, then the step) when the child failed before `execve`; none (the
        // pipe closed by the exec) when it runs the program.
        let mut report = [0u8; 8];
        let mut filled = 0;
        while filled < report.len() {
            match rustix::io::read(&report_read, &mut report[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(Errno::INTR) => continue,
                Err(error) => {
                    fail(pid);
                    return Err(error.into());
                }
            }
        }
        if filled == 0 {
            return Ok(Spawned { pid, stdin, stdout, stderr });
        }
        sys::reap(pid);
        let error = io::Error::from_raw_os_error(i32::from_ne_bytes([report[0], report[1], report[2], report[3]]));
        let step = match u32::from_ne_bytes([report[4], report[5], report[6], report[7]]) {
            // The program itself: the error as the OS gave it, for callers that match on it.
            EXEC => return Err(error),
            1 => "arming the parent-death signal",
            2 => "checking the host is still its parent",
            3 => "making its own process group",
            4 => "connecting its stdio",
            _ => "entering its working directory",
        };
        Err(io::Error::new(error.kind(), format!("the child failed before exec, {step}: {error}")))
    }

    /// Runs the child up to its `execve` (or its failure) while this thread waits.
    fn clone_child(setup: &Setup, stack: &mut [u8]) -> io::Result<Pid> {
        // SAFETY: the stack top stays inside `stack`, which outlives the child's use of it: with
        // CLONE_VFORK this thread is suspended until the child has exec'd or exited. `setup`
        // and everything it points to live on this thread's stack frame or heap, unchanged
        // until then. All signals are blocked across the clone so no handler of the host runs
        // on the child's stack in the shared memory; the child resets every handler to the
        // default before it unblocks them. The mask is restored in the parent right after.
        unsafe {
            let top = stack.as_mut_ptr().add(stack.len());
            let top = top.sub(top as usize % 16);
            let mut all = MaybeUninit::<libc::sigset_t>::uninit();
            libc::sigfillset(all.as_mut_ptr());
            let mut previous = MaybeUninit::<libc::sigset_t>::uninit();
            libc::pthread_sigmask(libc::SIG_SETMASK, all.as_ptr(), previous.as_mut_ptr());
            let pid = libc::clone(
                child_main,
                top.cast::<c_void>(),
                libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
                ptr::from_ref(setup).cast_mut().cast::<c_void>(),
            );
            let clone_error = io::Error::last_os_error();
            libc::pthread_sigmask(libc::SIG_SETMASK, previous.as_ptr(), ptr::null_mut());
            match Pid::from_raw(pid) {
                Some(pid) if pid.as_raw_nonzero().get() > 0 => Ok(pid),
                _ => Err(clone_error),
            }
        }
    }

    /// Kills and reaps a child whose start could not be confirmed.
    fn fail(pid: Pid) {
        let _ = sys::killpg(pid, rustix::process::Signal::KILL);
        sys::reap(pid);
    }

    /// The child, from the clone to its `execve`. Only async-signal-safe system calls; on a
    /// failure it writes `errno` and the failing step to the report pipe and exits with 127.
    extern "C" fn child_main(arg: *mut c_void) -> c_int {
        // SAFETY: `arg` is the `Setup` the suspended parent passed, valid until this exec's or
        // exits. Every call below is a thin wrapper over one system call on values prepared
        // by the parent.
        unsafe {
            let setup = &*arg.cast::<Setup>();
            let report = |step: u32| -> c_int {
                let errno = *libc::__errno_location();
                let mut message = [0u8; 8];
                message[..4].copy_from_slice(&errno.to_ne_bytes());
                message[4..].copy_from_slice(&step.to_ne_bytes());
                libc::write(setup.report, message.as_ptr().cast::<c_void>(), message.len());
                libc::_exit(127)
            };
            // The host's handlers must not run here (the child shares its memory), and the
            // program gets default dispositions for everything the host handled; SIGPIPE too,
            // which the Rust runtime ignores, and SIGINT and SIGTERM, which a host started in
            // the background of a shell ignores: they are how a kill policy asks the program to
            // stop, and an ignored one cannot even be trapped by a shell.
            for signal in 1..NSIG {
                let mut current = MaybeUninit::<libc::sigaction>::zeroed();
                if libc::sigaction(signal, ptr::null(), current.as_mut_ptr()) != 0 {
                    continue;
                }
                let handler = (*current.as_ptr()).sa_sigaction;
                let handled = handler != libc::SIG_DFL && handler != libc::SIG_IGN;
                let asks_to_stop = signal == libc::SIGINT || signal == libc::SIGTERM;
                if handled || signal == libc::SIGPIPE || asks_to_stop {
                    let default = MaybeUninit::<libc::sigaction>::zeroed();
                    libc::sigaction(signal, default.as_ptr(), ptr::null_mut());
                }
            }
            let mut none = MaybeUninit::<libc::sigset_t>::uninit();
            libc::sigemptyset(none.as_mut_ptr());
            libc::pthread_sigmask(libc::SIG_SETMASK, none.as_ptr(), ptr::null_mut());

            // Die with the spawning thread; if the host already died, the parent is someone
            // else now and the program must not start.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) != 0 {
                return report(1);
            }
            if libc::getppid() != setup.host {
                *libc::__errno_location() = libc::ESRCH;
                return report(2);
            }
            if libc::setpgid(0, 0) != 0 {
                return report(3);
            }
            for (target, &fd) in setup.stdio.iter().enumerate() {
                if libc::dup2(fd, target as c_int) < 0 {
                    return report(4);
                }
            }
            if !setup.cwd.is_null() && libc::chdir(setup.cwd) != 0 {
                return report(5);
            }
            libc::execve(setup.program, setup.argv, setup.envp);
            report(EXEC)
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use std::io;
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};

    use rustix::process::Pid;

    use super::{Prepared, Spawned};

    pub(super) fn spawn(prepared: &Prepared) -> io::Result<Spawned> {
        let mut command = Command::new(&prepared.program);
        command
            .arg0(&prepared.arg0)
            .args(&prepared.args)
            .env_clear()
            .envs(prepared.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        if let Some(cwd) = &prepared.cwd {
            command.current_dir(cwd);
        }
        let mut child = command.spawn()?;
        let missing = || io::Error::other("a piped stdio stream is missing");
        Ok(Spawned {
            pid: Pid::from_child(&child),
            stdin: child.stdin.take().ok_or_else(missing)?.into(),
            stdout: child.stdout.take().ok_or_else(missing)?.into(),
            stderr: child.stderr.take().ok_or_else(missing)?.into(),
        })
    }
}
