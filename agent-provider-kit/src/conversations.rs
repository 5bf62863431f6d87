//! The CLI conversations the live sessions of this process hold open, so that no two of them
//! continue the same one.
//!
//! Claude Code and pi keep a conversation in a file that each process continuing it appends to.
//! Two processes continuing one conversation each write a branch of their own, and a later
//! resume follows only one of them: the other session's turns are gone although every turn
//! reported completed. A provider whose CLI works that way takes a [`Claim`] on the
//! conversation when a session opens it (before spawning, for a resume) and keeps it for the
//! session's life; a second claim while the first is held is refused with the holding session's
//! ID. The claim is released when the session closes or its value is dropped.
//!
//! Codex refuses a second resume of a loaded thread by itself, and does not claim. The presets
//! share one conversation among the live sessions of a key on purpose (they run one turn at a
//! time, each reading the CLI's file afresh); one whose CLI keeps claude's or pi's files claims
//! the conversation, under the same key as the native provider, for each turn that continues it.
//! Only sessions whose exec runs locally claim (a conversation on another host is another file).
//!
//! Sessions of other processes of this user on this host (two harnesses sharing a store, a
//! service and the `agent-harness` command) are seen too: a claim also holds an exclusive
//! `flock` on a file named after the conversation in `/tmp/agent-harness-conversations-<uid>`
//! (mode 0700, used only while it is this user's alone), with the holder's PID and session
//! written in it; the kernel lets go of it when its process ends, however it ends. The file goes
//! with the claim. The directory is the same for every process of the user whatever its
//! environment says (`TMPDIR` and `XDG_RUNTIME_DIR` differ between a login shell, a service and
//! a cron job); a service with a private `/tmp` (systemd's `PrivateTmp=`) has one of its own.
//! Where the directory or a file in it cannot be used, claims hold within the process only, with
//! a warning.
//!
//! ```
//! use agent_core::SessionId;
//! use agent_provider_kit::conversations::Claim;
//!
//! let first = SessionId::new("first").unwrap();
//! let second = SessionId::new("second").unwrap();
//! let place = std::path::Path::new("/home/me/.claude");
//! let conversation = format!("conversation-{}", std::process::id());
//! let held = Claim::take("claude", place, &conversation, &first).unwrap();
//! let refused = Claim::take("claude", place, &conversation, &second).unwrap_err();
//! assert_eq!(refused.holder, Some(first));
//! drop(held);
//! assert!(Claim::take("claude", place, &conversation, &second).is_ok());
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use agent_core::SessionId;

/// One conversation of one CLI: the CLI's name, where it keeps its conversations (empty when
/// the conversation's ID alone names it), and the conversation's ID.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    cli: &'static str,
    place: PathBuf,
    id: String,
}

impl Key {
    /// The name of the conversation's lock file: the CLI's name and a hash of the rest.
    fn file_name(&self) -> String {
        // FNV-1a, 64 bits: the same in every build, unlike the standard library's hasher.
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        let bytes = self.place.as_os_str().as_encoded_bytes().iter().chain(&[0]).chain(self.id.as_bytes());
        for byte in bytes {
            hash = (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3);
        }
        format!("{}-{hash:016x}.lock", self.cli)
    }
}

/// The conversations held in this process, with the session holding each. Claims and releases
/// of lock files happen under it too, so that two sessions of this process never meet at a file.
static HELD: Mutex<BTreeMap<Key, SessionId>> = Mutex::new(BTreeMap::new());

fn held() -> MutexGuard<'static, BTreeMap<Key, SessionId>> {
    // Every critical section leaves the map whole: a poisoned one is still right.
    HELD.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A conversation a live session holds; released on drop (or by [`Claim::release`]).
#[derive(Debug)]
pub struct Claim {
    key: Option<Key>,
    lock: Option<LockFile>,
}

/// Why a [`Claim`] was refused: another live session, of this process or another one of this
/// user, holds the conversation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claimed {
    /// The session holding it, when known (another process writes it just after locking).
    pub holder: Option<SessionId>,
    /// The process holding it, when it is another one.
    pub process: Option<u32>,
    /// The conversation's ID.
    pub conversation: String,
}

impl fmt::Display for Claimed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "conversation `{}` is open in ", self.conversation)?;
        match (&self.holder, self.process) {
            (Some(holder), None) => write!(f, "live session `{holder}` of this process")?,
            (Some(holder), Some(pid)) => write!(f, "live session `{holder}` of process {pid}")?,
            (None, Some(pid)) => write!(f, "a live session of process {pid}")?,
            (None, None) => write!(f, "a live session of another process")?,
        }
        write!(
            f,
            ", and two sessions continuing one conversation would each lose the other's turns (stop that session \
             first, or fork the conversation)"
        )
    }
}

impl std::error::Error for Claimed {}

impl Claim {
    /// Claims conversation `id` of `cli`, kept under `place` (pass [`real_path`] of the
    /// directory, or an empty path when the ID alone names the conversation), for `session`.
    /// Refused while another session holds it, in this process or another; the same session
    /// claiming again (a later run of it whose earlier one has not let go yet) is refused too.
    pub fn take(cli: &'static str, place: &Path, id: &str, session: &SessionId) -> Result<Claim, Claimed> {
        let key = Key { cli, place: place.to_path_buf(), id: id.to_owned() };
        let mut held = held();
        if let Some(holder) = held.get(&key) {
            return Err(Claimed { holder: Some(holder.clone()), process: None, conversation: key.id });
        }
        let lock = LockFile::take(&key, session)?;
        held.insert(key.clone(), session.clone());
        Ok(Claim { key: Some(key), lock })
    }

    /// Lets the conversation go now (the session's CLI has ended).
    pub fn release(&mut self) {
        if let Some(key) = self.key.take() {
            let mut held = held();
            if let Some(lock) = self.lock.take() {
                lock.release();
            }
            held.remove(&key);
        }
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.release();
    }
}

/// A conversation's lock file, locked (`flock`, exclusive) by this process.
#[derive(Debug)]
struct LockFile {
    path: PathBuf,
    file: File,
}

impl LockFile {
    /// Locks `key`'s file for `session`, or says who holds it; `None` when there is no private
    /// directory to lock in, or the file cannot be used (the claim then holds in this process).
    fn take(key: &Key, session: &SessionId) -> Result<Option<LockFile>, Claimed> {
        let Some(dir) = lock_dir() else { return Ok(None) };
        let path = dir.join(key.file_name());
        // The last holder removes its file while it holds it: a file opened just before that
        // and locked just after is not the one the name stands for any more, so try again.
        for _ in 0..8 {
            let opened = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .mode(0o600)
                .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
                .open(&path);
            let file = match opened {
                Ok(file) => file,
                Err(error) => {
                    tracing::warn!(path = %path.display(), %error, "no conversation lock file; the claim holds in this process only");
                    return Ok(None);
                }
            };
            match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => {}
                Err(rustix::io::Errno::WOULDBLOCK) => return Err(holder_in(file, &key.id)),
                Err(error) => {
                    tracing::warn!(path = %path.display(), %error, "could not lock the conversation's file; the claim holds in this process only");
                    return Ok(None);
                }
            }
            if !names(&path, &file) {
                continue;
            }
            let mut lock = LockFile { path, file };
            let written = lock
                .file
                .set_len(0)
                .and_then(|()| lock.file.write_all(format!("{}\n{session}\n", std::process::id()).as_bytes()));
            if let Err(error) = written {
                tracing::debug!(path = %lock.path.display(), %error, "could not write the conversation's holder");
            }
            return Ok(Some(lock));
        }
        // Each try found the file just removed by a holder that let go: other processes are
        // claiming and releasing it as fast as this one tries. Held, as far as can be told.
        Err(Claimed { holder: None, process: None, conversation: key.id.clone() })
    }

    /// Removes the file, then unlocks it (closing it). Not a file that took its name meanwhile
    /// (one removed under it, by a clean-up of the temp directory, and made again by another
    /// claim), which is another holder's.
    fn release(self) {
        if names(&self.path, &self.file) {
            let _ = std::fs::remove_file(&self.path);
        }
        drop(self.file);
    }
}

/// True when `path` names the open `file` (the same device and inode), not a link or another
/// file.
fn names(path: &Path, file: &File) -> bool {
    let named = std::fs::symlink_metadata(path).ok();
    file.metadata().ok().zip(named).is_some_and(|(open, named)| open.dev() == named.dev() && open.ino() == named.ino())
}

/// Who holds a lock file: the PID and session its holder wrote, as far as they can be read.
fn holder_in(mut file: File, conversation: &str) -> Claimed {
    let mut text = String::new();
    let _ = (&mut file).take(1024).read_to_string(&mut text);
    let mut lines = text.lines();
    let process = lines.next().and_then(|pid| pid.parse().ok());
    let holder = lines.next().and_then(|id| SessionId::new(id).ok());
    Claimed { holder, process, conversation: conversation.to_owned() }
}

/// The directory of the lock files, `/tmp/agent-harness-conversations-<uid>`: made with mode
/// 0700, and used only while it is a directory of this user's that no one else can use (`None`
/// otherwise, with a warning). Looked at for every claim: it may be removed meanwhile.
fn lock_dir() -> Option<PathBuf> {
    let uid = rustix::process::getuid().as_raw();
    let dir = PathBuf::from(format!("/tmp/agent-harness-conversations-{uid}"));
    if let Err(error) = std::fs::DirBuilder::new().mode(0o700).create(&dir)
        && error.kind() != std::io::ErrorKind::AlreadyExists
    {
        tracing::warn!(dir = %dir.display(), %error, "no conversation lock directory; claims hold in this process only");
        return None;
    }
    if !private(&dir, uid) {
        tracing::warn!(
            dir = %dir.display(),
            "the conversation lock directory is not this user's alone; claims hold in this process only"
        );
        return None;
    }
    Some(dir)
}

/// True when `dir` is a directory (not a link to one) of user `uid` that no one else can use.
fn private(dir: &Path, uid: u32) -> bool {
    std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir() && m.uid() == uid && m.mode() & 0o077 == 0)
}

/// `path` with its symbolic links resolved, as the CLI finds it: the path itself when it
/// exists, else its resolved parent with the last component (a file not written yet), else
/// `path` as given.
pub fn real_path(path: &Path) -> PathBuf {
    if let Ok(real) = std::fs::canonicalize(path) {
        return real;
    }
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => {
            std::fs::canonicalize(parent).map_or_else(|_| path.to_path_buf(), |parent| parent.join(name))
        }
        _ => path.to_path_buf(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(id: &str) -> SessionId {
        SessionId::new(id).unwrap()
    }

    #[test]
    fn a_held_conversation_is_refused_to_another_session_until_released() {
        let place = &PathBuf::from(format!("/conversations/held-{}", std::process::id()));
        let mut first = Claim::take("cli", place, "c1", &session("a")).unwrap();
        let refused = Claim::take("cli", place, "c1", &session("b")).unwrap_err();
        assert_eq!(refused, Claimed { holder: Some(session("a")), process: None, conversation: "c1".into() });
        assert!(refused.to_string().contains("live session `a`"), "{refused}");
        // The same session's later run waits for its earlier one to let go, too.
        assert_eq!(Claim::take("cli", place, "c1", &session("a")).unwrap_err().holder, Some(session("a")));
        first.release();
        let second = Claim::take("cli", place, "c1", &session("b")).unwrap();
        drop(first);
        // The earlier claim's drop after its release does not free the later one's.
        assert_eq!(Claim::take("cli", place, "c1", &session("c")).unwrap_err().holder, Some(session("b")));
        drop(second);
        assert!(Claim::take("cli", place, "c1", &session("c")).is_ok());
    }

    /// The lock file is what another process meets: a second lock of it (another open file,
    /// as another process has) is refused with the holder it names, and the file goes with the
    /// lock.
    #[test]
    fn a_locked_file_names_its_holder_and_goes_with_the_lock() {
        let key = Key {
            cli: "cli",
            place: PathBuf::from(format!("/conversations/file-{}", std::process::id())),
            id: "c1".into(),
        };
        let lock = LockFile::take(&key, &session("a")).unwrap().expect("a private lock directory");
        assert!(lock.path.starts_with(lock_dir().unwrap()));
        // A file that took the name meanwhile is another holder's: not removed.
        std::fs::remove_file(&lock.path).unwrap();
        let other = LockFile::take(&key, &session("other")).unwrap().expect("a new file, free");
        let kept = LockFile { path: lock.path.clone(), file: lock.file.try_clone().unwrap() };
        kept.release();
        assert!(other.path.exists(), "the other holder's file stays");
        other.release();
        let lock = LockFile::take(&key, &session("a")).unwrap().expect("free again");
        let text = std::fs::read_to_string(&lock.path).unwrap();
        assert_eq!(text, format!("{}\na\n", std::process::id()));
        let refused = LockFile::take(&key, &session("b")).unwrap_err();
        let expected =
            Claimed { holder: Some(session("a")), process: Some(std::process::id()), conversation: "c1".into() };
        assert_eq!(refused, expected);
        assert!(refused.to_string().contains(&format!("live session `a` of process {}", std::process::id())));
        let path = lock.path.clone();
        lock.release();
        assert!(!path.exists());
        LockFile::take(&key, &session("b")).unwrap().expect("free again").release();
        // The directory is this user's alone.
        let mode = std::fs::metadata(lock_dir().unwrap()).unwrap().mode();
        assert_eq!(mode & 0o077, 0, "{mode:o}");
    }

    #[test]
    fn other_clis_places_and_ids_are_other_conversations() {
        let place = &PathBuf::from(format!("/conversations/other-{}", std::process::id()));
        let _held = Claim::take("cli", place, "c1", &session("a")).unwrap();
        let others = [
            Claim::take("other-cli", place, "c1", &session("b")),
            Claim::take("cli", Path::new("/conversations/elsewhere"), "c1", &session("b")),
            Claim::take("cli", place, "c2", &session("b")),
        ];
        assert!(others.iter().all(Result::is_ok), "{others:?}");
    }

    #[test]
    fn a_real_path_resolves_links_and_a_file_not_written_yet() {
        let dir = std::env::temp_dir().join(format!("agent-harness-kit-real-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("target")).unwrap();
        std::os::unix::fs::symlink(dir.join("target"), dir.join("link")).unwrap();
        let real = std::fs::canonicalize(dir.join("target")).unwrap();
        assert_eq!(real_path(&dir.join("link")), real);
        assert_eq!(real_path(&dir.join("link/new.jsonl")), real.join("new.jsonl"));
        assert_eq!(real_path(Path::new("/no/such/dir/x")), Path::new("/no/such/dir/x"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
