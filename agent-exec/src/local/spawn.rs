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
//!
//! The child does not copy the host's descriptor table either. A copy costs the clone time in
//! proportion to the host's open descriptors, and `execve` as much again closing the
//! close-on-exec ones one by one — with a thousand sessions open (three pipes and a pidfd each)
//! that was most of a start. Instead the spawning thread keeps four low descriptor numbers
//! ([`Slots`]); before a clone it places the child's three stdio ends and the report pipe
//! there, the child shares the host's table (`CLONE_FILES`) just long enough to take a private
//! copy of the descriptors up to those slots (`close_range(…, CLOSE_RANGE_UNSHARE)`), moves its
//! stdio into place and closes the rest. So a child starts with exactly its three stdio
//! descriptors, however many the host holds and whether or not they are close-on-exec. Where
//! `close_range` is missing (Linux before 5.9, or a seccomp filter), children are started with
//! a copied table as before.
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
    /// Kills the child's process group, leaving the child to reap.
    pub(super) fn kill(&self) {
        let _ = sys::killpg(self.pid, Signal::KILL);
    }

    /// Kills and reaps a child nobody is waiting for.
    pub(super) fn discard(self) {
        self.kill();
        sys::reap(self.pid);
    }
}

/// Starts `prepared`, through `slots` when there are any. On Linux the child gets SIGKILL when
/// the *calling thread* dies, so call this from a thread that lives as long as the host (see
/// `spawner`), and from that one thread only: the slots are its own.
pub(super) fn spawn(prepared: &Prepared, slots: Option<&mut Slots>) -> io::Result<Spawned> {
    imp::spawn(prepared, slots)
}

pub(super) use imp::Slots;

#[cfg(target_os = "linux")]
mod imp {
    use std::ffi::{CString, OsStr, c_char, c_int, c_uint, c_void};
    use std::io;
    use std::mem::MaybeUninit;
    use std::os::fd::{AsRawFd, OwnedFd, RawFd};
    use std::os::unix::ffi::OsStrExt;
    use std::ptr;

    use rustix::io::{DupFlags, Errno};
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
        /// Whether the child shares the host's descriptor table until it takes its own copy of
        /// the descriptors up to `report` (the highest slot), see [`Slots`].
        unshare: bool,
        /// The host's PID: a child whose parent is already someone else must not start.
        host: libc::pid_t,
    }

    /// Four descriptor numbers the spawning thread keeps for its children, `/dev/null` while
    /// unused: a child's stdin, stdout and stderr ends and its report pipe are placed there
    /// before the clone, so the child can keep them when it drops every descriptor above the
    /// highest slot (the report's) and close every other one below it. Only the thread that
    /// made them may use them, one spawn at a time.
    #[derive(Debug)]
    pub(crate) struct Slots {
        null: OwnedFd,
        /// Ascending; `fds[3]`, the highest, is the report's.
        fds: [OwnedFd; 4],
    }

    impl Slots {
        /// Reserves the slots, or `None` where the kernel cannot unshare a descriptor table
        /// with `close_range`, or under Valgrind (then children copy the host's table, as
        /// `posix_spawn` does).
        pub(crate) fn reserve() -> Option<Slots> {
            if under_valgrind() {
                return None;
            }
            // A range past any open descriptor: closes nothing, and fails only without the
            // system call. Never with CLOSE_RANGE_UNSHARE here: that would give this thread a
            // descriptor table of its own.
            // SAFETY: a plain system call on integers.
            if unsafe { libc::syscall(libc::SYS_close_range, c_uint::MAX, c_uint::MAX, 0 as c_uint) } != 0 {
                return None;
            }
            let null = OwnedFd::from(std::fs::OpenOptions::new().read(true).write(true).open("/dev/null").ok()?);
            let dup = || rustix::io::fcntl_dupfd_cloexec(&null, 3).ok();
            let mut fds = [dup()?, dup()?, dup()?, dup()?];
            fds.sort_by_key(AsRawFd::as_raw_fd);
            Some(Slots { null, fds })
        }

        /// Places `fds` in the slots, in order.
        fn fill(&mut self, fds: [&OwnedFd; 4]) -> io::Result<()> {
            for (fd, slot) in fds.into_iter().zip(&mut self.fds) {
                if let Err(error) = point(slot, fd) {
                    self.clear();
                    return Err(error.into());
                }
            }
            Ok(())
        }

        /// Points every slot at `/dev/null` again, which closes this host's copies of what a
        /// child was given (a copy left here would keep its pipe open).
        fn clear(&mut self) {
            for slot in &mut self.fds {
                // Cannot fail: `slot` is open and ours and `null` is another descriptor, so
                // neither EBADF nor EINVAL; EBUSY and EINTR are retried.
                let _ = point(slot, &self.null);
            }
        }

        pub(super) fn raw(&self) -> [RawFd; 4] {
            self.fds.each_ref().map(AsRawFd::as_raw_fd)
        }
    }

    /// Whether this process runs under Valgrind, which runs a clone only as a new thread or as
    /// a fork and stops the whole program at one that shares the descriptor table and not the
    /// thread (`CLONE_VM | CLONE_VFORK | CLONE_FILES`). It maps its core library into every
    /// program it runs.
    fn under_valgrind() -> bool {
        std::fs::read_to_string("/proc/self/maps").is_ok_and(|maps| maps.contains("/vgpreload_core"))
    }

    /// `dup3(fd, slot, O_CLOEXEC)`: `slot` keeps its number and refers to what `fd` does, in
    /// one step. Retried while Linux answers EBUSY (another thread opening a descriptor at that
    /// moment) or a signal interrupts it.
    fn point(slot: &mut OwnedFd, fd: &OwnedFd) -> rustix::io::Result<()> {
        loop {
            match rustix::io::dup3(fd, slot, DupFlags::CLOEXEC) {
                Err(Errno::BUSY | Errno::INTR) => continue,
                done => return done,
            }
        }
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

    pub(super) fn spawn(prepared: &Prepared, mut slots: Option<&mut Slots>) -> io::Result<Spawned> {
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
        let (stdio, report) = match slots.as_deref_mut() {
            Some(slots) => {
                slots.fill([&child_ends[0], &child_ends[1], &child_ends[2], &report_write])?;
                let [stdin, stdout, stderr, report] = slots.raw();
                ([stdin, stdout, stderr], report)
            }
            None => (child_ends.each_ref().map(AsRawFd::as_raw_fd), report_write.as_raw_fd()),
        };
        let setup = Setup {
            program: program.as_ptr(),
            argv: argv_pointers.as_ptr(),
            envp: env_pointers.as_ptr(),
            cwd: cwd.as_ref().map_or(ptr::null(), |cwd| cwd.as_ptr()),
            stdio,
            report,
            unshare: slots.is_some(),
            host: rustix::process::getpid().as_raw_nonzero().get(),
        };
        let mut stack = vec![0u8; STACK];
        let cloned = clone_child(&setup, &mut stack);
        if let Some(slots) = slots {
            slots.clear();
        }
        let pid = cloned?;
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
            3 => "making its own session and process group",
            0 => "taking its own descriptor table",
            4 => "connecting its stdio",
            7 => "closing the host's descriptors",
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
            let files = if setup.unshare { libc::CLONE_FILES } else { 0 };
            let pid = libc::clone(
                child_main,
                top.cast::<c_void>(),
                libc::CLONE_VM | libc::CLONE_VFORK | files | libc::SIGCHLD,
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

            // Before anything else touches a descriptor: a table of its own, holding only the
            // host's descriptors up to the report's slot (the highest slot). Until then the
            // table is the host's, and nothing here may change it.
            if setup.unshare
                && libc::syscall(
                    libc::SYS_close_range,
                    (setup.report + 1) as c_uint,
                    c_uint::MAX,
                    libc::CLOSE_RANGE_UNSHARE,
                ) != 0
            {
                return report(0);
            }
            // Die with the spawning thread; if the host already died, the parent is someone
            // else now and the program must not start.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) != 0 {
                return report(1);
            }
            if libc::getppid() != setup.host {
                *libc::__errno_location() = libc::ESRCH;
                return report(2);
            }
            // A session of its own, so a group of its own (its ID the child's PID) without the
            // host's controlling terminal: a read of `/dev/tty` (a password prompt, a host key to
            // confirm) fails at once rather than stopping it as a background job of the user's
            // terminal, and nothing it writes there lands in the host's output.
            if libc::setsid() < 0 {
                return report(3);
            }
            for (target, &fd) in setup.stdio.iter().enumerate() {
                if libc::dup2(fd, target as c_int) < 0 {
                    return report(4);
                }
            }
            // With a private table of the descriptors up to the report's slot (the highest),
            // every one of them but stdio and the report — the host's low descriptors and the
            // stdio slots, now copied to 0–2 — closes here.
            if setup.unshare
                && libc::syscall(libc::SYS_close_range, 3 as c_uint, (setup.report - 1) as c_uint, 0 as c_uint) != 0
            {
                return report(7);
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

    /// Nothing to keep: `posix_spawn` copies the host's descriptor table here.
    #[derive(Debug)]
    pub(crate) struct Slots;

    impl Slots {
        pub(crate) fn reserve() -> Option<Slots> {
            None
        }
    }

    pub(super) fn spawn(prepared: &Prepared, _slots: Option<&mut Slots>) -> io::Result<Spawned> {
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

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::io::Read;

    use super::*;

    fn prepared(program: &str, args: &[&str]) -> Prepared {
        Prepared {
            program: program.into(),
            arg0: program.into(),
            args: args.iter().map(OsString::from).collect(),
            env: Vec::new(),
            cwd: None,
        }
    }

    /// Runs `program` to its end with `slots` (or without), returning its stdout and status.
    fn run(program: &str, args: &[&str], slots: Option<&mut Slots>) -> io::Result<(String, std::process::ExitStatus)> {
        let spawned = spawn(&prepared(program, args), slots)?;
        drop(spawned.stdin);
        let mut out = String::new();
        std::fs::File::from(spawned.stdout).read_to_string(&mut out)?;
        Ok((out, sys::reap(spawned.pid).expect("our child")))
    }

    #[test]
    fn children_start_and_fail_alike_with_and_without_slots() {
        let mut slots = Slots::reserve().expect("close_range on this kernel");
        for with_slots in [true, false] {
            let (out, status) =
                run("/bin/sh", &["-c", "echo started"], with_slots.then_some(&mut slots)).expect("spawn sh");
            assert_eq!((out.as_str(), status.success()), ("started\n", true), "slots: {with_slots}");
            let error = run("/nonexistent/program", &[], with_slots.then_some(&mut slots)).expect_err("nothing to run");
            assert_eq!(error.raw_os_error(), Some(libc::ENOENT), "{error}");
        }
        // The slots hold `/dev/null` again between spawns.
        for slot in slots.raw() {
            let path = std::fs::read_link(format!("/proc/self/fd/{slot}")).expect("slot");
            assert_eq!(path, std::path::Path::new("/dev/null"));
        }
    }
}
