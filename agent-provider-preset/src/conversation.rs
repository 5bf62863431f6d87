//! Keyed conversations: the CLI session each key continues, its turn count, and the gate that
//! lets one turn per key run at a time.
//!
//! One registry per provider (per preset), shared by its sessions. Entries are kept while a
//! session holds them, and the idle ones are trimmed to [`KEPT_IDLE`] (least recently used
//! first): what must outlive the process is in the session's store (its provider session ID),
//! from which a resumed session continues the conversation.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// Idle conversations (no session holds them) kept in memory.
pub(crate) const KEPT_IDLE: usize = 1024;

/// What the provider knows of one conversation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct State {
    /// The CLI's session ID, once a turn printed it (or a resume named it).
    pub(crate) session_id: Option<String>,
    /// Turns run in this conversation through this provider.
    pub(crate) turns: u64,
}

/// One conversation key.
#[derive(Debug)]
pub(crate) struct Conversation {
    pub(crate) key: String,
    /// Held by the turn that runs; a turn of the same key waits for it or fails.
    pub(crate) gate: Arc<tokio::sync::Mutex<()>>,
    state: Mutex<State>,
}

impl Conversation {
    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The conversations of one provider, by key.
#[derive(Debug, Default)]
pub(crate) struct Conversations {
    map: Mutex<Entries>,
}

#[derive(Debug, Default)]
struct Entries {
    by_key: HashMap<String, (Arc<Conversation>, u64)>,
    /// Bumped on each use, to trim the least recently used first.
    clock: u64,
}

impl Conversations {
    /// The conversation `key`, made on first use.
    pub(crate) fn get(&self, key: &str) -> Arc<Conversation> {
        let mut entries = self.map.lock().unwrap_or_else(|p| p.into_inner());
        entries.clock += 1;
        let now = entries.clock;
        if let Some((conversation, used)) = entries.by_key.get_mut(key) {
            *used = now;
            return Arc::clone(conversation);
        }
        let conversation = Arc::new(Conversation {
            key: key.to_owned(),
            gate: Arc::new(tokio::sync::Mutex::new(())),
            state: Mutex::new(State::default()),
        });
        entries.by_key.insert(key.to_owned(), (Arc::clone(&conversation), now));
        entries.trim();
        conversation
    }

    /// How many conversations are kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(|p| p.into_inner()).by_key.len()
    }
}

impl Entries {
    fn trim(&mut self) {
        let mut idle: Vec<(u64, String)> = self
            .by_key
            .iter()
            .filter(|(_, (conversation, _))| Arc::strong_count(conversation) == 1)
            .map(|(key, (_, used))| (*used, key.clone()))
            .collect();
        if idle.len() <= KEPT_IDLE {
            return;
        }
        idle.sort();
        for (_, key) in idle.iter().take(idle.len() - KEPT_IDLE) {
            self.by_key.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_one_conversation_and_idle_ones_are_trimmed() {
        let conversations = Conversations::default();
        let held = conversations.get("held");
        held.state().session_id = Some("s1".into());
        assert_eq!(conversations.get("held").state().session_id.as_deref(), Some("s1"));
        assert!(Arc::ptr_eq(&held, &conversations.get("held")));
        for n in 0..KEPT_IDLE + 10 {
            drop(conversations.get(&format!("idle-{n}")));
        }
        // The held one, the idle ones kept, and the last one made (not idle when it was made).
        assert_eq!(conversations.len(), 1 + KEPT_IDLE + 1);
        assert_eq!(conversations.get("held").state().session_id.as_deref(), Some("s1"));
        assert!(conversations.get("idle-0").state().session_id.is_none(), "the oldest idle one went first");
    }
}
