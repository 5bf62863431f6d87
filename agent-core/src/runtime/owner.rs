//! Which harness holds an open session, so that a second harness sharing the store leaves the
//! session alone while the first runs it.
//!
//! Each run's initial commit writes a [`SessionOwner`] into the session's snapshot: this
//! process (its PID, its start time in clock ticks since boot, the kernel's boot ID — what
//! tells a live process from a dead one whose PID was used again) and the harness within it (a
//! number from a process-wide counter). An open snapshot (a live status, the startup hand-off
//! done) whose owner is another harness is believed while that owner runs:
//! - another harness of this process, while it has the session live (its registry, found in a
//!   process-wide table of harnesses);
//! - another process of this host, while a process with that PID and start time runs, in the
//!   same boot (`/proc/<pid>/stat`).
//!
//! A run whose startup is committed but not yet acknowledged (its actor's first write, which
//! clears the marker, is still on its way to the store) is live too: while its harness has the
//! ID (this process), or for [`STARTING_GRACE`] after the commit while its process runs (another
//! process). Taking it for a startup left unfinished, a second harness would replace the run's
//! history under it.
//!
//! Otherwise the snapshot is stale — its host died, or its run ended without recording the end
//! — and reads back as abandoned. A live owner in another process whose session ended without
//! that being recorded (it cannot be asked) keeps the session until that process ends.
//!
//! Linux only: elsewhere, and where `/proc` cannot be read, no owner is written and a snapshot
//! without one is stale whenever this harness does not hold it. The check is per host: two
//! hosts sharing one store file (which SQLite's locking does not support either) see each
//! other's sessions as abandoned. A process in another PID namespace cannot be checked and
//! reads as gone.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use crate::ids::SessionId;
use crate::runtime::registry::Registry;
use crate::session::{SessionOwner, SessionSnapshot};
use crate::time::Timestamp;

/// How long after its commit another process's unacknowledged startup counts as live: its
/// acknowledgement follows at once, so a marker older than this is a startup that failed after
/// its commit, which a later start may replace.
pub(crate) const STARTING_GRACE: Duration = Duration::from_secs(60);

/// The harnesses of this process by number, for the owner check of a session another harness
/// of the same process wrote.
static HARNESSES: Mutex<BTreeMap<u64, Weak<Registry>>> = Mutex::new(BTreeMap::new());

/// Numbers the harnesses of this process.
static NEXT_HARNESS: AtomicU64 = AtomicU64::new(1);

/// A harness's entry in the process-wide table; leaving it on drop.
pub(crate) struct Enrolled {
    harness: u64,
}

impl Enrolled {
    /// Enrolls `registry` (a new harness's, being made) under a fresh number.
    pub(crate) fn new(registry: Weak<Registry>) -> Enrolled {
        let harness = NEXT_HARNESS.fetch_add(1, Ordering::Relaxed);
        harnesses().insert(harness, registry);
        Enrolled { harness }
    }

    /// This harness's number within the process.
    pub(crate) fn number(&self) -> u64 {
        self.harness
    }

    /// The owner a run of this harness writes; `None` where this process cannot be identified.
    pub(crate) fn owner(&self) -> Option<Box<SessionOwner>> {
        let me = this_process()?;
        Some(Box::new(SessionOwner {
            pid: me.pid,
            started: me.started,
            boot_id: me.boot_id.clone(),
            harness: self.harness,
        }))
    }

    /// The PID of another harness that holds `snapshot`'s session live, if one does.
    pub(crate) fn holder(&self, snapshot: &SessionSnapshot) -> Option<u32> {
        // Open, or with its startup not yet acknowledged.
        let owner = snapshot.owner.as_ref().filter(|_| snapshot.status.is_live())?;
        let starting = snapshot.startup.is_some();
        if owner.harness == self.harness && self.is_this_process(owner) {
            // This harness's own run, and it is not live here (the caller checked): stale.
            return None;
        }
        let alive = if self.is_this_process(owner) {
            harness_holds(owner.harness, &snapshot.id)
        } else {
            process_runs(owner) && (!starting || recent(snapshot.updated_at))
        };
        alive.then_some(owner.pid)
    }

    /// True when `snapshot` was written by a run of this harness.
    pub(crate) fn wrote(&self, snapshot: &SessionSnapshot) -> bool {
        snapshot.owner.as_ref().is_some_and(|owner| owner.harness == self.harness && self.is_this_process(owner))
    }

    fn is_this_process(&self, owner: &SessionOwner) -> bool {
        this_process()
            .is_some_and(|me| me.pid == owner.pid && me.started == owner.started && me.boot_id == owner.boot_id)
    }
}

impl Drop for Enrolled {
    fn drop(&mut self) {
        harnesses().remove(&self.harness);
    }
}

fn harnesses() -> std::sync::MutexGuard<'static, BTreeMap<u64, Weak<Registry>>> {
    // Every critical section is one map operation.
    HARNESSES.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Whether `at` is less than [`STARTING_GRACE`] ago.
fn recent(at: Timestamp) -> bool {
    Timestamp::now().unix_micros().saturating_sub(at.unix_micros()) < STARTING_GRACE.as_micros() as i64
}

/// Whether harness number `harness` of this process still has session `id` live.
fn harness_holds(harness: u64, id: &SessionId) -> bool {
    let registry = harnesses().get(&harness).and_then(Weak::upgrade);
    registry.is_some_and(|registry| registry.contains(id))
}

/// Whether any harness of this process holds session `id` (live or starting).
pub(crate) fn any_harness_holds(id: &SessionId) -> bool {
    let registries: Vec<Arc<Registry>> = harnesses().values().filter_map(Weak::upgrade).collect();
    registries.iter().any(|registry| registry.contains(id))
}

/// Whether `owner` is a process of this boot other than this one that no longer runs: only
/// such a process's stamps can be on processes that run now and that nothing will end (this
/// process ends its own with their sessions, a running one its own). The exec checks again
/// (`Exec::end_abandoned_processes` ends nothing of a live owner); this spares it the look.
pub(crate) fn gone_process_of_this_boot(owner: &SessionOwner) -> bool {
    this_process().is_some_and(|me| me.boot_id == owner.boot_id && me.pid != owner.pid) && !process_runs(owner)
}

/// Whether the process `owner` names runs: the same boot, and a process with its PID that
/// started when it did.
fn process_runs(owner: &SessionOwner) -> bool {
    let Some(me) = this_process() else { return false };
    me.boot_id == owner.boot_id && start_time(owner.pid).is_some_and(|started| started == owner.started)
}

/// This process, as an owner.
struct Process {
    pid: u32,
    started: u64,
    boot_id: String,
}

/// Read once; `None` where `/proc` does not tell.
fn this_process() -> Option<&'static Process> {
    static PROCESS: OnceLock<Option<Process>> = OnceLock::new();
    PROCESS
        .get_or_init(|| {
            let pid = std::process::id();
            let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?.trim().to_owned();
            let started = start_time(pid)?;
            (!boot_id.is_empty()).then_some(Process { pid, started, boot_id })
        })
        .as_ref()
}

/// The start time of process `pid` in clock ticks since boot, if it runs.
fn start_time(pid: u32) -> Option<u64> {
    parse_start_time(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Field 22 of `/proc/<pid>/stat`, unless field 3 says the process has exited (`Z`, a zombie
/// its parent has not reaped; `X`, dead). The command name (field 2) is in parentheses and may
/// hold spaces and parentheses itself, so fields are counted after its last `)`.
fn parse_start_time(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_ascii_whitespace();
    if matches!(fields.next()?, "Z" | "X") {
        return None;
    }
    fields.nth(22 - 4)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::ProviderId;
    use crate::session::SessionState;

    fn snapshot(id: &SessionId, owner: Option<Box<SessionOwner>>) -> SessionSnapshot {
        let mut snapshot: SessionSnapshot = serde_json::from_value(serde_json::json!({
            "id": id.as_str(), "provider": "p", "status": "idle", "cwd": "/", "config_fingerprint": "f",
            "created_at": "2026-01-01T00:00:00.000000Z", "updated_at": "2026-01-01T00:00:00.000000Z",
        }))
        .unwrap();
        assert_eq!(snapshot.provider, ProviderId::new("p"));
        snapshot.owner = owner;
        snapshot
    }

    #[test]
    fn reads_the_start_time_after_a_command_name_with_spaces_and_parentheses() {
        let stat = "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(parse_start_time(stat), Some(987654));
        assert_eq!(parse_start_time("4242 (x) S 1 2"), None);
        let zombie = stat.replacen(") S ", ") Z ", 1);
        assert_eq!(parse_start_time(&zombie), None, "exited, not yet reaped: not running");
        assert_eq!(parse_start_time("no parenthesis"), None);
    }

    #[test]
    fn this_process_runs_and_a_pid_with_another_start_time_or_boot_does_not() {
        let me = this_process().expect("Linux: /proc tells who this process is");
        let owner = |started, boot_id: &str| SessionOwner {
            pid: me.pid,
            started,
            boot_id: boot_id.to_owned(),
            harness: u64::MAX,
        };
        assert!(process_runs(&owner(me.started, &me.boot_id)));
        assert!(!process_runs(&owner(me.started + 1, &me.boot_id)), "the PID used again by a later process");
        assert!(!process_runs(&owner(me.started, "another-boot")), "a process of an earlier boot");
        assert!(!process_runs(&SessionOwner { pid: u32::MAX, ..owner(me.started, &me.boot_id) }));
    }

    #[test]
    fn another_harness_of_this_process_holds_a_session_only_while_it_has_it_live() {
        let id = SessionId::new("s").unwrap();
        let mine = Registry::new(None);
        let theirs = Registry::new(None);
        let held = snapshot(&id, theirs.owner());

        assert_eq!(mine.holder(&held), None, "not live in their registry");
        let reservation = theirs.reserve(&id).unwrap();
        assert_eq!(mine.holder(&held), Some(std::process::id()));
        assert_eq!(theirs.holder(&held), None, "a harness never defers to its own record");

        let closed = SessionSnapshot { status: SessionState::Closed, ..held.clone() };
        assert_eq!(mine.holder(&closed), None, "a closed session has no holder");
        let starting = SessionSnapshot {
            startup: Some(crate::session::StartupMarker { attempt_id: "a".into(), acknowledged: false }),
            ..held.clone()
        };
        assert_eq!(mine.holder(&starting), Some(std::process::id()), "a startup not yet acknowledged is live");
        drop(reservation);
        assert_eq!(mine.holder(&held), None);
        assert_eq!(mine.holder(&starting), None, "an unfinished startup is reclaimable once its harness let go");

        let unrelated = Enrolled::new(Weak::new());
        let _again = theirs.reserve(&id).unwrap();
        assert_eq!(mine.holder(&held), Some(std::process::id()));
        drop(_again);
        drop(theirs);
        assert_eq!(mine.holder(&held), None, "a harness that is gone holds nothing");
        assert_eq!(unrelated.holder(&snapshot(&id, None)), None, "no owner recorded: stale");
    }
}
