//! A directory only this user can read, for the files a provider hands its CLI (an extension, a
//! system prompt), removed with the value.
//!
//! A process killed outright (SIGKILL, a crash) leaves its directories behind. Each name carries
//! its process's PID, PID namespace and boot (the start of the kernel's boot ID), and the first
//! directory a process makes under a parent with a prefix removes the ones of that prefix whose
//! process no longer runs: same user, same PID namespace and boot (a PID means nothing in
//! another namespace, nor on another host sharing the directory), and no process with that PID
//! in this process's `/proc` (which must be its own namespace's). A PID used again since is taken
//! as still running, so such a directory stays.
//!
//! ```
//! use agent_provider_kit::private_dir::PrivateDir;
//!
//! let dir = PrivateDir::create(&std::env::temp_dir(), "example").unwrap();
//! let file = dir.write("prompt.md", "Be brief.").unwrap();
//! assert_eq!(std::fs::read_to_string(&file).unwrap(), "Be brief.");
//! let path = dir.path().to_path_buf();
//! drop(dir);
//! assert!(!path.exists());
//! ```

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

/// A fresh directory (mode 0700) under a parent; removed, with what it holds, on drop.
#[derive(Debug)]
pub struct PrivateDir {
    dir: PathBuf,
}

impl PrivateDir {
    /// Creates `<parent>/agent-harness-<prefix>-<pid>.<pid namespace>.<boot>-<stamp>-<n>/`, a name no
    /// other process or value uses; the first call for a parent and prefix removes what dead
    /// processes left there (see the module docs).
    pub fn create(parent: &Path, prefix: &str) -> std::io::Result<PrivateDir> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let mut builder = std::fs::DirBuilder::new();
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let owner = match origin() {
            Some(origin) => format!("{}.{origin}", std::process::id()),
            None => std::process::id().to_string(),
        };
        loop {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let dir = parent.join(format!("agent-harness-{prefix}-{owner}-{stamp:x}-{n}"));
            match builder.create(&dir) {
                Ok(()) => {
                    let made = PrivateDir { dir };
                    if first_for(parent, prefix) {
                        remove_left_behind(parent, prefix, &made.dir);
                    }
                    return Ok(made);
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Writes `contents` to a new file `name` in the directory and returns its path.
    pub fn write(&self, name: &str, contents: impl AsRef<[u8]>) -> std::io::Result<PathBuf> {
        let file = self.dir.join(name);
        std::fs::OpenOptions::new().write(true).create_new(true).open(&file)?.write_all(contents.as_ref())?;
        Ok(file)
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// True the first time this process asks for `parent` and `prefix`.
fn first_for(parent: &Path, prefix: &str) -> bool {
    static SEEN: Mutex<BTreeSet<(PathBuf, String)>> = Mutex::new(BTreeSet::new());
    SEEN.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).insert((parent.to_path_buf(), prefix.to_owned()))
}

/// Where this process's PIDs mean something: `<PID namespace>.<boot>`, the inode number of
/// `/proc/self/ns/pid` and the first 8 hex digits of the kernel's boot ID, if both can be read.
fn origin() -> Option<&'static str> {
    static ORIGIN: OnceLock<Option<String>> = OnceLock::new();
    ORIGIN
        .get_or_init(|| {
            let namespace = agent_core::exec::pid_namespace()?;
            let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
            let boot: String = boot.chars().filter(char::is_ascii_hexdigit).take(8).collect();
            (boot.len() == 8).then(|| format!("{namespace}.{boot}"))
        })
        .as_deref()
}

/// True when `/proc` shows this process's PID namespace: `/proc/self` is this process's PID
/// (not so after `unshare --pid` without a new `/proc`, where the PIDs it lists are another
/// namespace's).
fn proc_is_ours() -> bool {
    std::fs::read_link("/proc/self").is_ok_and(|link| link.as_os_str() == std::process::id().to_string().as_str())
}

/// Removes the directories of `prefix` under `parent` that processes of this PID namespace and
/// this user (the owner of `made`, just created) left behind when they died. Best effort: what
/// cannot be read or removed stays.
fn remove_left_behind(parent: &Path, prefix: &str, made: &Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let (Some(origin), Ok(made)) = (origin(), std::fs::metadata(made)) else { return };
        if !proc_is_ours() {
            return;
        }
        let Ok(entries) = std::fs::read_dir(parent) else { return };
        let head = format!("agent-harness-{prefix}-");
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(pid) = name.to_str().and_then(|n| n.strip_prefix(&head)).and_then(|rest| owner_pid(rest, origin))
            else {
                continue;
            };
            let ours = entry.metadata().is_ok_and(|m| m.is_dir() && m.uid() == made.uid());
            let gone = pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists();
            if ours && gone {
                match std::fs::remove_dir_all(entry.path()) {
                    Ok(()) => tracing::debug!(dir = %entry.path().display(), "removed what a dead process left"),
                    Err(error) => {
                        tracing::debug!(dir = %entry.path().display(), %error, "could not remove what a dead process left")
                    }
                }
            }
        }
    }
}

/// The PID in a name's `<pid>.<origin>-<stamp>-<n>` when its origin is `origin`.
fn owner_pid(rest: &str, origin: &str) -> Option<u32> {
    let mut parts = rest.split('-');
    let (owner, stamp, n) = (parts.next()?, parts.next()?, parts.next()?);
    let (pid, its_origin) = owner.split_once('.')?;
    let well_formed = parts.next().is_none()
        && !stamp.is_empty()
        && stamp.bytes().all(|b| b.is_ascii_hexdigit())
        && !n.is_empty()
        && n.bytes().all(|b| b.is_ascii_digit());
    (well_formed && its_origin == origin).then(|| pid.parse().ok()).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_this_user_reads_it_and_a_name_is_written_once() {
        let dir = PrivateDir::create(&std::env::temp_dir(), "kit-test").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(std::fs::metadata(dir.path()).unwrap().permissions().mode() & 0o777, 0o700);
        }
        dir.write("a", "1").unwrap();
        let again = dir.write("a", "2").unwrap_err();
        assert_eq!(again.kind(), std::io::ErrorKind::AlreadyExists);
        let other = PrivateDir::create(&std::env::temp_dir(), "kit-test").unwrap();
        assert_ne!(other.path(), dir.path());
    }

    /// What a dead process of this namespace and boot left is removed by the first directory
    /// made under the parent with its prefix; a running process's, another namespace's or
    /// boot's (another host sharing the directory), another prefix's and any other name's stay.
    #[test]
    fn the_first_directory_removes_what_dead_processes_left() {
        let parent = PrivateDir::create(&std::env::temp_dir(), "kit-reap-parent").unwrap();
        let origin = origin().expect("/proc/self/ns/pid and the boot ID are readable");
        let (namespace, boot) = origin.split_once('.').unwrap();
        // No process has a PID of `pid_max` (PIDs stay below it); PID 1 always runs.
        let pid_max = std::fs::read_to_string("/proc/sys/kernel/pid_max").unwrap();
        let (dead_pid, running_pid): (u32, u32) = (pid_max.trim().parse().unwrap(), 1);
        let left = |name: String| {
            let dir = parent.path().join(name);
            std::fs::create_dir(&dir).unwrap();
            std::fs::write(dir.join("file"), "x").unwrap();
            dir
        };
        let gone = left(format!("agent-harness-reap-{dead_pid}.{origin}-1f-0"));
        let kept = [
            left(format!("agent-harness-reap-{running_pid}.{origin}-1f-0")),
            left(format!("agent-harness-reap-{dead_pid}.1.{boot}-1f-0")),
            left(format!("agent-harness-reap-{dead_pid}.{namespace}.0badb007-1f-0")),
            left(format!("agent-harness-reap-{dead_pid}.{namespace}-1f-0")),
            left(format!("agent-harness-reap-{dead_pid}-1f-0")),
            left(format!("agent-harness-reap-more-{dead_pid}.{origin}-1f-0")),
            left(format!("agent-harness-reap-{dead_pid}.{origin}-1f-0-extra")),
            left(format!("agent-harness-other-{dead_pid}.{origin}-1f-0")),
        ];
        let made = PrivateDir::create(parent.path(), "reap").unwrap();
        assert!(!gone.exists(), "a dead process's directory stays: {}", gone.display());
        for dir in &kept {
            assert!(dir.exists(), "removed: {}", dir.display());
        }
        assert!(made.path().exists());
        // Only the first directory of a parent and prefix looks.
        let later = left(format!("agent-harness-reap-{dead_pid}.{origin}-2f-0"));
        drop(PrivateDir::create(parent.path(), "reap").unwrap());
        assert!(later.exists());
    }
}
