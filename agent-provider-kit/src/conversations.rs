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
//! Codex refuses a second resume of a loaded thread by itself, and the presets share one
//! conversation among the live sessions of a key on purpose (they run one turn at a time, each
//! reading the CLI's file afresh): neither claims. Claims cover the sessions of this process,
//! and only those whose exec runs locally (a conversation on another host is another file):
//! two processes, such as two harnesses sharing a store, do not see each other's.
//!
//! ```
//! use agent_core::SessionId;
//! use agent_provider_kit::conversations::Claim;
//!
//! let first = SessionId::new("first").unwrap();
//! let second = SessionId::new("second").unwrap();
//! let place = std::path::Path::new("/home/me/.claude");
//! let held = Claim::take("claude", place, "conversation-1", &first).unwrap();
//! let refused = Claim::take("claude", place, "conversation-1", &second).unwrap_err();
//! assert_eq!(refused.holder, first);
//! drop(held);
//! assert!(Claim::take("claude", place, "conversation-1", &second).is_ok());
//! ```

use std::collections::BTreeMap;
use std::fmt;
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

/// The conversations held, with the session holding each.
static HELD: Mutex<BTreeMap<Key, SessionId>> = Mutex::new(BTreeMap::new());

fn held() -> MutexGuard<'static, BTreeMap<Key, SessionId>> {
    // Every critical section is one map operation: a poisoned map is still whole.
    HELD.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A conversation a live session holds; released on drop (or by [`Claim::release`]).
#[derive(Debug)]
pub struct Claim {
    key: Option<Key>,
}

/// Why a [`Claim`] was refused: another live session of this process holds the conversation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claimed {
    /// The session holding it.
    pub holder: SessionId,
    /// The conversation's ID.
    pub conversation: String,
}

impl fmt::Display for Claimed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "conversation `{}` is open in live session `{}` of this process, and two sessions continuing one \
             conversation would each lose the other's turns (stop that session first, or fork the conversation)",
            self.conversation, self.holder
        )
    }
}

impl std::error::Error for Claimed {}

impl Claim {
    /// Claims conversation `id` of `cli`, kept under `place` (pass [`real_path`] of the
    /// directory, or an empty path when the ID alone names the conversation), for `session`.
    /// Refused while another session holds it; the same session claiming again (a later run of
    /// it whose earlier one has not let go yet) is refused too.
    pub fn take(cli: &'static str, place: &Path, id: &str, session: &SessionId) -> Result<Claim, Claimed> {
        let key = Key { cli, place: place.to_path_buf(), id: id.to_owned() };
        let mut held = held();
        if let Some(holder) = held.get(&key) {
            return Err(Claimed { holder: holder.clone(), conversation: key.id });
        }
        held.insert(key.clone(), session.clone());
        Ok(Claim { key: Some(key) })
    }

    /// Lets the conversation go now (the session's CLI has ended).
    pub fn release(&mut self) {
        if let Some(key) = self.key.take() {
            held().remove(&key);
        }
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.release();
    }
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
        let place = Path::new("/conversations/held");
        let mut first = Claim::take("cli", place, "c1", &session("a")).unwrap();
        let refused = Claim::take("cli", place, "c1", &session("b")).unwrap_err();
        assert_eq!(refused, Claimed { holder: session("a"), conversation: "c1".into() });
        assert!(refused.to_string().contains("live session `a`"), "{refused}");
        // The same session's later run waits for its earlier one to let go, too.
        assert_eq!(Claim::take("cli", place, "c1", &session("a")).unwrap_err().holder, session("a"));
        first.release();
        let second = Claim::take("cli", place, "c1", &session("b")).unwrap();
        drop(first);
        // The earlier claim's drop after its release does not free the later one's.
        assert_eq!(Claim::take("cli", place, "c1", &session("c")).unwrap_err().holder, session("b"));
        drop(second);
        assert!(Claim::take("cli", place, "c1", &session("c")).is_ok());
    }

    #[test]
    fn other_clis_places_and_ids_are_other_conversations() {
        let place = Path::new("/conversations/other");
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
