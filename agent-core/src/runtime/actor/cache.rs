//! The turn cache: finished turns kept for `await_turn`, the waiters of unfinished ones, and
//! every turn ID the session used.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;

use tokio::sync::oneshot;

use crate::event::Event;
use crate::ids::TurnId;
use crate::options::CacheSize;
use crate::turn::Turn;

struct CompletedTurn {
    turn: Turn,
    terminal: Arc<Event>,
}

/// What the cache knows of a turn that is not the current one.
pub(super) enum Finished {
    /// Its terminal event is published.
    Published(Arc<Event>),
    /// It ended but its terminal event waits for its batch to commit.
    Unpublished,
    /// Not in the cache.
    Unknown,
}

pub(super) struct TurnCache {
    completed: HashMap<TurnId, CompletedTurn>,
    order: VecDeque<TurnId>,
    limit: CacheSize,
    /// Set once a turn was evicted: a store-less session can no longer tell "never existed"
    /// from "forgotten".
    pruned: bool,
    /// Every turn ID the session used, so a caller-chosen ID is never reused even after the
    /// turn left the cache and the session has no store to ask: as a 64-bit hash with a key of
    /// this session's (`used_keys`), 8 bytes a turn where the ID took a hundred. A fresh ID
    /// would be refused as used one time in 2^64 per turn before it.
    used: HashSet<u64>,
    used_keys: RandomState,
    waiters: HashMap<TurnId, Vec<oneshot::Sender<Arc<Event>>>>,
}

impl TurnCache {
    pub(super) fn new(limit: CacheSize) -> Self {
        TurnCache {
            completed: HashMap::new(),
            order: VecDeque::new(),
            limit,
            pruned: false,
            used: HashSet::new(),
            used_keys: RandomState::new(),
            waiters: HashMap::new(),
        }
    }

    pub(super) fn pruned(&self) -> bool {
        self.pruned
    }

    /// Records that the session uses `turn`; `false` when it used it before.
    pub(super) fn use_id(&mut self, turn: &TurnId) -> bool {
        self.used.insert(self.used_keys.hash_one(turn.as_str()))
    }

    pub(super) fn used(&self, turn: &TurnId) -> bool {
        self.used.contains(&self.used_keys.hash_one(turn.as_str()))
    }

    /// Keeps a turn that just finished with `terminal` (sequenced, maybe not yet published).
    pub(super) fn insert(&mut self, turn: Turn, terminal: Arc<Event>) {
        self.order.push_back(turn.id.clone());
        self.completed.insert(turn.id.clone(), CompletedTurn { turn, terminal });
    }

    pub(super) fn finished(&self, turn: &TurnId, published_seq: u64) -> Finished {
        match self.completed.get(turn) {
            Some(done) if done.terminal.seq <= published_seq => Finished::Published(Arc::clone(&done.terminal)),
            Some(_) => Finished::Unpublished,
            None => Finished::Unknown,
        }
    }

    /// A receiver of `turn`'s terminal event, once published. The waiters whose callers went
    /// away (an `await_turn` that timed out, a `select!` that took another branch) go first:
    /// a caller polling a long turn would otherwise add one for every try until it ends.
    pub(super) fn waiter(&mut self, turn: TurnId) -> oneshot::Receiver<Arc<Event>> {
        let (tx, rx) = oneshot::channel();
        let waiters = self.waiters.entry(turn).or_default();
        waiters.retain(|waiter| !waiter.is_closed());
        waiters.push(tx);
        rx
    }

    /// Wakes the waiters of a published terminal event.
    pub(super) fn notify(&mut self, terminal: &Arc<Event>) {
        if let Some(turn) = &terminal.turn_id {
            for waiter in self.waiters.remove(turn).unwrap_or_default() {
                let _ = waiter.send(Arc::clone(terminal));
            }
        }
    }

    /// Drops the oldest finished turns beyond the limit whose terminal events are published;
    /// returns their IDs (their requests go with them).
    pub(super) fn evict(&mut self, published_seq: u64) -> Vec<TurnId> {
        let CacheSize::Bounded(limit) = self.limit else { return Vec::new() };
        let mut evicted = Vec::new();
        while self.order.len() > limit {
            let Some(oldest) = self.order.front() else { break };
            if self.completed.get(oldest).is_some_and(|c| c.terminal.seq > published_seq) {
                break;
            }
            let oldest = self.order.pop_front().expect("front exists");
            if let Some(done) = self.completed.remove(&oldest) {
                tracing::trace!(turn_id = %done.turn.id, "completed turn evicted from the cache");
            }
            self.pruned = true;
            evicted.push(oldest);
        }
        evicted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiters_that_went_away_are_not_kept() {
        let mut cache = TurnCache::new(CacheSize::Unbounded);
        let turn = TurnId::from_string("t1");
        let kept = cache.waiter(turn.clone());
        for _ in 0..1000 {
            drop(cache.waiter(turn.clone()));
        }
        assert_eq!(cache.waiters[&turn].len(), 2, "the waiter kept, and the last one dropped");
        drop(kept);
        drop(cache.waiter(turn.clone()));
        assert_eq!(cache.waiters[&turn].len(), 1);
    }
}
