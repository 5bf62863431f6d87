//! The map from session ID to live actor handle.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::{Error, Result};
use crate::ids::SessionId;
use crate::runtime::SessionHandle;
use crate::session::SessionRef;

enum Slot {
    /// A `start_session` holds the ID while it opens the provider.
    Starting {
        attempt: u64,
    },
    Live {
        attempt: u64,
        handle: SessionHandle,
    },
}

impl Slot {
    fn attempt(&self) -> u64 {
        match self {
            Slot::Starting { attempt } | Slot::Live { attempt, .. } => *attempt,
        }
    }
}

/// Live and starting sessions. A plain mutex: every critical section is a map operation.
pub(crate) struct Registry {
    slots: Mutex<HashMap<SessionId, Slot>>,
    max_sessions: Option<usize>,
    attempts: AtomicU64,
}

impl Registry {
    pub(crate) fn new(max_sessions: Option<usize>) -> Self {
        Registry { slots: Mutex::new(HashMap::new()), max_sessions, attempts: AtomicU64::new(1) }
    }

    fn slots(&self) -> MutexGuard<'_, HashMap<SessionId, Slot>> {
        // A panic while holding this lock leaves the map consistent (single operations).
        self.slots.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Claims `id` for a starting session.
    pub(crate) fn reserve(self: &Arc<Self>, id: &SessionId) -> Result<Reservation> {
        let mut slots = self.slots();
        if slots.contains_key(id) {
            return Err(Error::SessionAlreadyExists { id: id.clone() });
        }
        if let Some(limit) = self.max_sessions
            && slots.len() >= limit
        {
            return Err(Error::CapacityReached { limit });
        }
        let attempt = self.attempts.fetch_add(1, Ordering::Relaxed);
        slots.insert(id.clone(), Slot::Starting { attempt });
        Ok(Reservation { registry: Arc::clone(self), id: id.clone(), attempt, promoted: false })
    }

    pub(crate) fn get(&self, id: &SessionId) -> Option<SessionHandle> {
        match self.slots().get(id) {
            Some(Slot::Live { handle, .. }) => Some(handle.clone()),
            _ => None,
        }
    }

    pub(crate) fn contains(&self, id: &SessionId) -> bool {
        self.slots().contains_key(id)
    }

    pub(crate) fn live(&self) -> Vec<SessionRef> {
        let mut live: Vec<SessionRef> = self
            .slots()
            .values()
            .filter_map(|slot| match slot {
                Slot::Live { handle, .. } => Some(handle.session.clone()),
                Slot::Starting { .. } => None,
            })
            .collect();
        live.sort_by(|a, b| a.id.cmp(&b.id));
        live
    }

    /// Removes `id` if it still belongs to `attempt`.
    pub(crate) fn remove(&self, id: &SessionId, attempt: u64) {
        let mut slots = self.slots();
        if slots.get(id).is_some_and(|slot| slot.attempt() == attempt) {
            slots.remove(id);
        }
    }
}

/// An ID held for a starting session; released on drop unless promoted to live.
pub(crate) struct Reservation {
    registry: Arc<Registry>,
    id: SessionId,
    attempt: u64,
    promoted: bool,
}

impl Reservation {
    pub(crate) fn attempt(&self) -> u64 {
        self.attempt
    }

    pub(crate) fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// Makes the session live; from now on the actor removes it when it ends.
    pub(crate) fn promote(mut self, handle: SessionHandle) {
        let mut slots = self.registry.slots();
        slots.insert(self.id.clone(), Slot::Live { attempt: self.attempt, handle });
        self.promoted = true;
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if !self.promoted {
            self.registry.remove(&self.id, self.attempt);
        }
    }
}
