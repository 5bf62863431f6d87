//! The orphan reaper: finds stamped processes whose owner is gone and ends their groups.
//!
//! Every child carries `OWNER_MARKER_ENV=<host pid>` and, with a session,
//! `SESSION_MARKER_ENV=<session id>` in its environment, and its descendants inherit both unless
//! they scrub their environment. A stamped process is an orphan when its owner process is dead
//! (or its PID now belongs to a process started after it), or when the owner is this process
//! and its session is not live. A stamp written in another PID namespace (by a harness in a
//! container) is never read: it names its owner by that namespace's PIDs
//! (`OWNER_NAMESPACE_MARKER_ENV`). Linux only: it reads `/proc`.

use agent_core::exec::ExecError;

pub(super) use self::linux::Stamped;

/// Lists the stamped processes that are candidates: owned by this process, or by one that is
/// gone. Reads `/proc` on a blocking thread.
pub(super) async fn scan() -> Result<Vec<Stamped>, ExecError> {
    tokio::task::spawn_blocking(linux::scan)
        .await
        .map_err(|error| ExecError::Backend(format!("the /proc scan failed: {error}")))?
        .map_err(ExecError::Io)
}

pub(super) use self::linux::end;

/// A session (and its harness) whose processes wait for the next scan, when it was asked for
/// (clock ticks since boot), and where to answer.
type Queued = (String, u64, u64, tokio::sync::oneshot::Sender<Result<usize, String>>);

/// Where sessions wait for the scanning thread.
fn ending() -> &'static std::sync::Mutex<std::sync::mpsc::Sender<Queued>> {
    static ENDING: std::sync::OnceLock<std::sync::Mutex<std::sync::mpsc::Sender<Queued>>> = std::sync::OnceLock::new();
    ENDING.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        // A thread of its own, not a task: a task would belong to the runtime of the session
        // that started it, and end with it.
        std::thread::Builder::new()
            .name("agent-exec-session-ends".into())
            .spawn(move || end_queued(&rx))
            .expect("the session-end scanning thread starts");
        std::sync::Mutex::new(tx)
    })
}

/// Ends the processes this process stamped for `session` (see
/// [`Exec::end_session_processes`](agent_core::exec::Exec::end_session_processes)). One thread
/// scans for every session queued while the scan before it ran, so a harness ending a
/// thousand sessions at once reads `/proc` a few times, not a thousand.
///
/// Only processes started by the call (in its clock tick, 10 ms, or before) are ended: a scan
/// that outlives its caller's patience (the runtime frees the session's ID after
/// `startup_finalization_timeout`) must not end the processes of the session's next run under
/// the same ID. (A next run whose CLI starts in the very tick of the call, possible only with a
/// finalization timeout under 10 ms, is not told apart.)
pub(super) async fn end_session(session: &str, harness: u64) -> Result<usize, ExecError> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let asked = linux::now_ticks();
    let queued = ending().lock().unwrap_or_else(std::sync::PoisonError::into_inner).send((
        session.to_owned(),
        harness,
        asked,
        tx,
    ));
    if queued.is_err() {
        return Err(ExecError::Backend("the session process scan is gone".into()));
    }
    match rx.await {
        Ok(result) => result.map_err(ExecError::Backend),
        Err(_) => Err(ExecError::Backend("the session process scan was cancelled".into())),
    }
}

/// The process that registered [`end_ours_at_exit`]'s handler.
static EXITING_OWNER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Makes this process end every process it stamped when it exits — returns from `main`, calls
/// `std::process::exit`, or unwinds out of `main` — without a harness having shut down. The
/// parent-death signal ends the direct children then, but nothing else would end what they
/// started outside their process groups: a session's end queues that scan (see
/// [`end_session`]), and an exit does not wait for the queue. One `/proc` scan at exit, only in
/// a process that ever spawned. (A SIGKILLed process runs nothing: [`scan`] in the next one.)
pub(super) fn end_ours_at_exit() {
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    REGISTERED.call_once(|| {
        EXITING_OWNER.store(std::process::id(), std::sync::atomic::Ordering::Relaxed);
        // SAFETY: `at_exit` is an `extern "C"` function that takes nothing, unwinds nothing
        // (it catches panics) and stays valid for the life of the process.
        if unsafe { libc::atexit(at_exit) } != 0 {
            tracing::warn!("could not register the exit handler that ends this process's stray children");
        }
    });
}

extern "C" fn at_exit() {
    // A copy of this process made by `fork` that exits would run this too; ours exec or `_exit`,
    // but another library's may not, and the processes are not its own.
    if EXITING_OWNER.load(std::sync::atomic::Ordering::Relaxed) != std::process::id() {
        return;
    }
    // Nothing here logs: the main thread's thread-locals are gone by now (a `tracing`
    // subscriber's among them, which would panic), and a logger's lock may be held by a
    // thread that no longer runs.
    let _ = std::panic::catch_unwind(|| {
        if let Ok(stamped) = linux::scan() {
            let ours: Vec<Stamped> = stamped.into_iter().filter(Stamped::is_ours).collect();
            linux::end_with(&ours, |_, _| {});
        }
    });
}

/// Scans for the sessions queued, all those waiting at once, for as long as the process runs.
fn end_queued(queue: &std::sync::mpsc::Receiver<Queued>) {
    while let Ok(first) = queue.recv() {
        let queued: Vec<Queued> = std::iter::once(first).chain(queue.try_iter()).collect();
        match linux::scan() {
            Ok(mut stamped) => {
                for (session, harness, asked, reply) in queued {
                    let (its, rest): (Vec<_>, Vec<_>) =
                        stamped.into_iter().partition(|process| process.is_of_session(&session, harness, asked));
                    stamped = rest;
                    let _ = reply.send(Ok(end(&its)));
                }
            }
            Err(error) => {
                let error = error.to_string();
                for (_, _, _, reply) in queued {
                    let _ = reply.send(Err(error.clone()));
                }
            }
        }
    }
}

mod linux {
    use std::collections::HashSet;
    use std::fs;
    use std::io;

    use agent_core::exec::{HARNESS_MARKER_ENV, OWNER_MARKER_ENV, OWNER_NAMESPACE_MARKER_ENV, SESSION_MARKER_ENV};
    use rustix::process::{Pid, RawPid, Signal};

    use super::super::sys;

    /// Who started a stamped process, as far as liveness goes.
    #[derive(Debug, PartialEq, Eq)]
    enum Owner {
        /// This process.
        Me,
        /// A process that no longer runs.
        Gone,
    }

    /// A stamped process whose owner is this process or gone. Processes of other live owners
    /// are never listed.
    #[derive(Debug)]
    pub(crate) struct Stamped {
        pid: Pid,
        pgid: RawPid,
        owner: Owner,
        /// The PID its stamp names as its owner.
        owner_pid: RawPid,
        session: Option<String>,
        /// The harness of this process that stamped it, if it named one.
        harness: Option<u64>,
        /// Start time in clock ticks since boot.
        start: u64,
    }

    impl Stamped {
        /// Whether this process is one this process stamped for `session` of `harness` and
        /// started by the tick `asked` (one started in a later tick is spared).
        pub(crate) fn is_of_session(&self, session: &str, harness: u64, asked: u64) -> bool {
            self.owner == Owner::Me
                && self.session.as_deref() == Some(session)
                && self.harness == Some(harness)
                && self.start <= asked
        }

        /// Whether the process `owner`, now gone, stamped it for `session` of its harness
        /// `harness`.
        pub(crate) fn is_left_by(&self, session: &str, owner: u32, harness: u64) -> bool {
            self.owner == Owner::Gone
                && u32::try_from(self.owner_pid).is_ok_and(|pid| pid == owner)
                && self.harness == Some(harness)
                && self.session.as_deref() == Some(session)
        }

        /// Whether this process stamped it.
        pub(crate) fn is_ours(&self) -> bool {
            self.owner == Owner::Me
        }

        /// Whether this process must end: its owner is gone, or it is ours and its session
        /// is not live. Our own processes without a session belong to live handles.
        pub(crate) fn is_orphan(&self, is_live: impl FnOnce(&str) -> bool) -> bool {
            match (&self.owner, &self.session) {
                (Owner::Gone, _) => true,
                (Owner::Me, Some(session)) => !is_live(session),
                (Owner::Me, None) => false,
            }
        }
    }

    /// The fields of `/proc/<pid>/stat` the reaper needs.
    #[derive(Debug, PartialEq, Eq)]
    struct Stat {
        ppid: RawPid,
        pgid: RawPid,
        /// Start time in clock ticks since boot.
        start: u64,
    }

    /// Lists stamped processes, skipping this process and its ancestors.
    pub(crate) fn scan() -> io::Result<Vec<Stamped>> {
        let me = std::process::id() as RawPid;
        let spared = ancestors(me);
        let namespace = agent_core::exec::pid_namespace();
        let mut found = Vec::new();
        for entry in fs::read_dir("/proc")? {
            let name = entry?.file_name();
            let parsed = name.to_str().and_then(|name| name.parse::<RawPid>().ok());
            let Some(pid) = parsed.filter(|&pid| pid > 0).and_then(Pid::from_raw) else { continue };
            let raw = pid.as_raw_pid();
            if spared.contains(&raw) {
                continue;
            }
            // Processes that exit or that we may not inspect drop out here.
            let Some(Stamp { owner, session, harness, namespace: stamped_in }) = read_stamp(raw) else { continue };
            // A stamp written in another PID namespace (by a harness in a container) names its
            // owner by that namespace's PIDs, which here are another process or none: never
            // listed. A stamp without one (an older harness's) is judged by where the process
            // runs. What our CLIs started in a namespace of their own (a sandbox) carries our
            // stamp and is listed.
            let foreign = match (namespace, stamped_in) {
                (Some(ours), Some(theirs)) => ours != theirs,
                (Some(ours), None) => agent_core::exec::pid_namespace_of(&raw.to_string()).as_deref() != Some(ours),
                (None, _) => false,
            };
            if foreign {
                continue;
            }
            let Some(stat) = read_stat(raw) else { continue };
            let (owner_pid, owner) = match owner {
                owner if owner == me => (owner, Owner::Me),
                owner if owner_gone(owner, stat.start) => (owner, Owner::Gone),
                _ => continue,
            };
            found.push(Stamped { pid, pgid: stat.pgid, owner, owner_pid, session, harness, start: stat.start });
        }
        Ok(found)
    }

    /// SIGKILLs each orphan's process group (or the orphan alone when it shares the group of
    /// this process or of one of its ancestors), logging each; returns how many orphans were
    /// signalled.
    pub(crate) fn end(orphans: &[Stamped]) -> usize {
        end_with(orphans, |orphan, result| match result {
            Ok(()) => {
                tracing::info!(pid = orphan.pid.as_raw_pid(), pgid = orphan.pgid, session = ?orphan.session, "ended an orphaned child");
            }
            Err(error) => tracing::warn!(pid = orphan.pid.as_raw_pid(), %error, "could not end an orphaned child"),
        })
    }

    /// [`end`], telling `report` how each signal went instead of logging it.
    pub(crate) fn end_with(orphans: &[Stamped], mut report: impl FnMut(&Stamped, io::Result<()>)) -> usize {
        let spared = spared_groups(std::process::id() as RawPid);
        let mut groups = HashSet::new();
        let mut ended = 0;
        for orphan in orphans {
            // A group ID of 0 (no group: a kernel thread) or 1 is never signalled as a group.
            let group = Some(orphan.pgid).filter(|&pgid| pgid > 1 && !spared.contains(&pgid)).and_then(Pid::from_raw);
            let result = match group {
                None => sys::kill(orphan.pid, Signal::KILL),
                Some(pgid) if groups.insert(pgid) => sys::killpg(pgid, Signal::KILL),
                Some(_) => Ok(()),
            };
            ended += usize::from(result.is_ok());
            report(orphan, result);
        }
        ended
    }

    /// This process and its ancestors, which the reaper must never signal even when a crashed
    /// harness stamped them.
    fn ancestors(me: RawPid) -> HashSet<RawPid> {
        let mut spared = HashSet::from([me]);
        let mut pid = me;
        while let Some(stat) = read_stat(pid) {
            if stat.ppid <= 1 || !spared.insert(stat.ppid) {
                break;
            }
            pid = stat.ppid;
        }
        spared
    }

    /// The process groups of this process and its ancestors: a stamped process in one of them
    /// (a crashed harness's helper that a shell, itself our ancestor, leads the group of) is
    /// ended alone, never with its group.
    fn spared_groups(me: RawPid) -> HashSet<RawPid> {
        ancestors(me).into_iter().filter_map(read_stat).map(|stat| stat.pgid).collect()
    }

    /// The owner PID and session stamped into `pid`'s environment.
    /// A process's markers: who started it, for which session of which harness.
    #[derive(Debug, PartialEq, Eq)]
    struct Stamp {
        owner: RawPid,
        session: Option<String>,
        harness: Option<u64>,
        /// The PID namespace the owner's PID is of, where the stamp names it.
        namespace: Option<String>,
    }

    fn read_stamp(pid: RawPid) -> Option<Stamp> {
        let environ = fs::read(format!("/proc/{pid}/environ")).ok()?;
        parse_stamp(&environ)
    }

    fn parse_stamp(environ: &[u8]) -> Option<Stamp> {
        let mut owner = None;
        let mut session = None;
        let mut harness = None;
        let mut namespace = None;
        let value = |text: &'_ str, name: &str| {
            text.strip_prefix(name).and_then(|rest| rest.strip_prefix('=')).map(str::to_owned)
        };
        for entry in environ.split(|&b| b == 0) {
            let text = std::str::from_utf8(entry).unwrap_or_default();
            if let Some(found) = value(text, OWNER_MARKER_ENV) {
                owner = found.parse::<RawPid>().ok();
            } else if let Some(found) = value(text, SESSION_MARKER_ENV) {
                session = Some(found);
            } else if let Some(found) = value(text, HARNESS_MARKER_ENV) {
                harness = found.parse::<u64>().ok();
            } else if let Some(found) = value(text, OWNER_NAMESPACE_MARKER_ENV) {
                namespace = Some(found);
            }
        }
        owner.map(|owner| Stamp { owner, session, harness, namespace })
    }

    /// Now, in the clock ticks since boot `/proc/<pid>/stat` gives start times in.
    pub(crate) fn now_ticks() -> u64 {
        let now = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
        let hz = rustix::param::clock_ticks_per_second();
        (now.tv_sec as u64).saturating_mul(hz) + (now.tv_nsec as u64).saturating_mul(hz) / 1_000_000_000
    }

    /// Whether `owner` is dead, or its PID was reused by a process younger than the child.
    fn owner_gone(owner: RawPid, child_start: u64) -> bool {
        read_stat(owner).is_none_or(|stat| stat.start > child_start)
    }

    fn read_stat(pid: RawPid) -> Option<Stat> {
        parse_stat(&fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
    }

    /// Parses `/proc/<pid>/stat`. The command name is in parentheses and may hold spaces and
    /// parentheses itself, so fields are counted from the last `)`.
    fn parse_stat(stat: &str) -> Option<Stat> {
        let after_name = &stat[stat.rfind(')')? + 1..];
        let fields: Vec<&str> = after_name.split_whitespace().collect();
        // Fields 3 (state) onwards: ppid is field 4, pgrp 5, starttime 22.
        let field = |n: usize| fields.get(n - 3).copied();
        if field(3)? == "Z" || field(3)? == "X" {
            return None;
        }
        Some(Stat { ppid: field(4)?.parse().ok()?, pgid: field(5)?.parse().ok()?, start: field(22)?.parse().ok()? })
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn stat_survives_odd_command_names() {
            let line = "42 (a) b (c)) S 7 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 98765 1000 10";
            assert_eq!(parse_stat(line), Some(Stat { ppid: 7, pgid: 42, start: 98765 }));
            assert_eq!(parse_stat("42 (zombie) Z 7 42 42 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0"), None);
            assert_eq!(parse_stat("garbage"), None);
        }

        #[test]
        fn stamps_need_an_owner() {
            let environ = format!(
                "A=1\0{OWNER_MARKER_ENV}=77\0{SESSION_MARKER_ENV}=s-1\0{HARNESS_MARKER_ENV}=3\0{OWNER_NAMESPACE_MARKER_ENV}=9\0"
            );
            let stamp = Stamp { owner: 77, session: Some("s-1".into()), harness: Some(3), namespace: Some("9".into()) };
            assert_eq!(parse_stamp(environ.as_bytes()), Some(stamp));
            let sessionless = format!("{OWNER_MARKER_ENV}=77\0{OWNER_MARKER_ENV}X=1");
            let bare = Stamp { owner: 77, session: None, harness: None, namespace: None };
            assert_eq!(parse_stamp(sessionless.as_bytes()), Some(bare));
            assert_eq!(parse_stamp(format!("{SESSION_MARKER_ENV}=s-1").as_bytes()), None);
        }

        #[test]
        fn a_session_end_spares_processes_started_since_it_was_asked_for() {
            let me = read_stat(std::process::id() as RawPid).expect("own stat");
            let now = now_ticks();
            assert!(me.start <= now, "start times and now share a clock: {} > {now}", me.start);
            let stamped = |start| Stamped {
                pid: Pid::from_raw(42).expect("pid"),
                pgid: 42,
                owner: Owner::Me,
                owner_pid: 7,
                session: Some("s-1".into()),
                harness: Some(3),
                start,
            };
            assert!(stamped(now - 1).is_of_session("s-1", 3, now) && stamped(now).is_of_session("s-1", 3, now));
            assert!(!stamped(now + 1).is_of_session("s-1", 3, now), "the session's next run, under its ID");
            assert!(!stamped(now - 1).is_of_session("s-2", 3, now) && !stamped(now - 1).is_of_session("s-1", 4, now));
        }

        #[test]
        fn a_dead_run_is_told_by_its_owner_harness_and_session() {
            let left = |owner: Owner| Stamped {
                pid: Pid::from_raw(42).expect("pid"),
                pgid: 42,
                owner,
                owner_pid: 7,
                session: Some("s-1".into()),
                harness: Some(3),
                start: 1,
            };
            assert!(left(Owner::Gone).is_left_by("s-1", 7, 3));
            assert!(!left(Owner::Me).is_left_by("s-1", 7, 3), "a process that runs left nothing");
            let others = [("s-2", 7, 3), ("s-1", 8, 3), ("s-1", 7, 4)];
            assert!(
                others.iter().all(|&(session, owner, harness)| !left(Owner::Gone).is_left_by(session, owner, harness))
            );
        }

        #[test]
        fn this_process_is_alive_and_spared() {
            let me = std::process::id() as RawPid;
            let stat = read_stat(me).expect("own stat");
            assert!(!owner_gone(me, stat.start));
            assert!(owner_gone(me, stat.start - 1), "a younger owner means the PID was reused");
            assert!(ancestors(me).contains(&me));
            let parent = read_stat(me).expect("own stat").ppid;
            let groups = spared_groups(me);
            assert!(groups.contains(&read_stat(me).expect("own stat").pgid));
            if let Some(parent) = read_stat(parent) {
                assert!(groups.contains(&parent.pgid), "the parent's group is spared too");
            }
        }
    }
}
