//! The map from session ID to live actor handle.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::{Error, Result};
use crate::ids::SessionId;
use crate::runtime::SessionHandle;
use crate::runtime::owner::Enrolled;
use crate::session::{ExitReason, SessionOwner, SessionRef, SessionSnapshot};

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

/// How many ended sessions the registry remembers the exit reason of, so that calls on a
/// session that just stopped can say how it ended even without a store. The oldest record is
/// forgotten first; beyond it, the store's snapshot is the record.
pub(crate) const ENDED_RECORDS: usize = 1024;

/// Exit reasons of recently ended sessions, oldest first.
#[derive(Default)]
struct Ended {
    order: VecDeque<(SessionId, u64)>,
    reasons: HashMap<SessionId, Exit>,
}

/// How a run of a session ended.
struct Exit {
    attempt: u64,
    reason: ExitReason,
    /// The last seq its subscribers were given: a store that failed may hold less.
    published_seq: u64,
}

/// Live and starting sessions. A plain mutex: every critical section is a map operation.
pub(crate) struct Registry {
    slots: Mutex<HashMap<SessionId, Slot>>,
    ended: Mutex<Ended>,
    max_sessions: Option<usize>,
    attempts: AtomicU64,
    /// Woken when a session becomes live or leaves the registry (see [`Registry::before`]).
    changed: tokio::sync::Notify,
    /// This harness in the process-wide table of harnesses (see [`owner`](super::owner)).
    enrolled: Enrolled,
}

impl Registry {
    /// A new harness's registry, enrolled as a possible owner of sessions.
    pub(crate) fn new(max_sessions: Option<usize>) -> Arc<Self> {
        Arc::new_cyclic(|registry| Registry {
            slots: Mutex::new(HashMap::new()),
            ended: Mutex::default(),
            max_sessions,
            attempts: AtomicU64::new(1),
            changed: tokio::sync::Notify::new(),
            enrolled: Enrolled::new(registry.clone()),
        })
    }

    /// This harness's number within the process (stamped on its sessions' processes).
    pub(crate) fn harness_number(&self) -> u64 {
        self.enrolled.number()
    }

    /// The owner this harness writes into the snapshots of the sessions it runs.
    pub(crate) fn owner(&self) -> Option<Box<SessionOwner>> {
        self.enrolled.owner()
    }

    /// The PID of another harness that holds `snapshot`'s session live, if one does.
    pub(crate) fn holder(&self, snapshot: &SessionSnapshot) -> Option<u32> {
        self.enrolled.holder(snapshot)
    }

    /// How a session that is not live here ended, given what its store holds: this harness's
    /// record, unless the stored snapshot is another harness's (a later run of the session,
    /// which ended after this harness's); `None` when neither knows.
    pub(crate) fn ended_with(&self, id: &SessionId, stored: Option<&SessionSnapshot>) -> Option<ExitReason> {
        match stored {
            Some(snapshot) if snapshot.owner.is_some() && !self.enrolled.wrote(snapshot) => None,
            _ => self.exit_reason(id),
        }
    }

    fn ended(&self) -> MutexGuard<'_, Ended> {
        self.ended.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Removes a live `id` that belongs to `attempt` and remembers how it ended, and the last
    /// seq it published (0 when unknown).
    pub(crate) fn finish(&self, id: &SessionId, attempt: u64, reason: ExitReason, published_seq: u64) {
        self.remove(id, attempt);
        let mut ended = self.ended();
        ended.reasons.insert(id.clone(), Exit { attempt, reason, published_seq });
        ended.order.push_back((id.clone(), attempt));
        while ended.order.len() > ENDED_RECORDS {
            let Some((oldest, attempt)) = ended.order.pop_front() else { break };
            // A later run of the same ID keeps its own record.
            if ended.reasons.get(&oldest).is_some_and(|exit| exit.attempt == attempt) {
                ended.reasons.remove(&oldest);
            }
        }
    }

    /// How `id` ended, if it ended recently in this harness and is not live again.
    pub(crate) fn exit_reason(&self, id: &SessionId) -> Option<ExitReason> {
        if self.contains(id) {
            return None;
        }
        self.ended().reasons.get(id).map(|exit| exit.reason.clone())
    }

    /// The last seq this harness's run of `id` published, when `stored` is that run's snapshot:
    /// a run whose store failed may have given subscribers events its store never got, and a
    /// resume must not give their seqs to other events (0 when this harness does not know).
    pub(crate) fn published_seq(&self, id: &SessionId, stored: &SessionSnapshot) -> u64 {
        if stored.owner.is_some() && !self.enrolled.wrote(stored) {
            return 0;
        }
        self.ended().reasons.get(id).map_or(0, |exit| exit.published_seq)
    }

    /// Keeps the entries of `map` that `keep` keeps, and those of IDs live or among the
    /// recently ended sessions (one look at each under one lock of each).
    pub(crate) fn retain_known<T>(&self, map: &mut HashMap<SessionId, T>, keep: impl Fn(&T) -> bool) {
        let (slots, ended) = (self.slots(), self.ended());
        map.retain(|id, value| keep(value) || slots.contains_key(id) || ended.reasons.contains_key(id));
    }

    /// Forgets how `id` ended (its history was purged).
    pub(crate) fn forget(&self, id: &SessionId) {
        self.ended().reasons.remove(id);
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
            self.changed.notify_waiters();
        }
    }

    /// The attempt number the next start will get: the starts begun so far have lower ones.
    pub(crate) fn next_attempt(&self) -> u64 {
        self.attempts.load(Ordering::Relaxed)
    }

    /// The live sessions whose starts began before attempt `cutoff`, and whether any such start
    /// is still under way (enable a [`Registry::changed`] wait before looking, so that no change
    /// in between is missed).
    pub(crate) fn before(&self, cutoff: u64) -> (Vec<SessionHandle>, bool) {
        let slots = self.slots();
        let mut starting = false;
        let mut live = Vec::new();
        for slot in slots.values().filter(|slot| slot.attempt() < cutoff) {
            match slot {
                Slot::Starting { .. } => starting = true,
                Slot::Live { handle, .. } => live.push(handle.clone()),
            }
        }
        (live, starting)
    }

    /// Woken when a session becomes live or leaves the registry.
    pub(crate) fn changed(&self) -> &tokio::sync::Notify {
        &self.changed
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
        self.registry.changed.notify_waiters();
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if !self.promoted {
            self.registry.remove(&self.id, self.attempt);
        }
    }
}
