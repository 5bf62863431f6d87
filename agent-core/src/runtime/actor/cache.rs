//! The turn cache: finished turns kept for `await_turn`, the waiters of unfinished ones, and
//! every turn ID the session used.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;

use tokio::sync::oneshot;

use crate::event::Event;
use crate::ids::TurnId;
use crate::options::CacheSize;

/// Bytes of final text and raw JSON the terminal events of a bounded cache keep at most, beside
/// its count: a turn's final text may be as long as a CLI line (16 MiB by default), and a long
/// session's last thousand turns would otherwise keep gigabytes. The newest turn always stays.
const CACHE_BYTES: usize = 32 << 20;

/// What a cached terminal event holds of the CLI's output: its final text and its raw JSON.
fn weight(terminal: &Event) -> usize {
    let text = terminal.kind.terminal_end().and_then(|end| end.result.text.as_ref()).map_or(0, String::len);
    text + terminal.raw.as_ref().map_or(0, |raw| raw.get().len())
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
    /// Finished turns' terminal events (shared with the replay ring and the store's batch): a
    /// turn's end is all `await_turn` needs.
    completed: HashMap<TurnId, Arc<Event>>,
    order: VecDeque<TurnId>,
    limit: CacheSize,
    /// The [`weight`] of the cached terminal events.
    bytes: usize,
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
            bytes: 0,
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
    pub(super) fn insert(&mut self, turn: TurnId, terminal: Arc<Event>) {
        self.bytes += weight(&terminal);
        self.order.push_back(turn.clone());
        if let Some(replaced) = self.completed.insert(turn, terminal) {
            self.bytes -= weight(&replaced);
        }
    }

    pub(super) fn finished(&self, turn: &TurnId, published_seq: u64) -> Finished {
        match self.completed.get(turn) {
            Some(terminal) if terminal.seq <= published_seq => Finished::Published(Arc::clone(terminal)),
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

    /// Drops the oldest finished turns beyond the limit — in turns, or in [`CACHE_BYTES`] but
    /// for the newest — whose terminal events are published; returns their IDs (their requests
    /// go with them).
    pub(super) fn evict(&mut self, published_seq: u64) -> Vec<TurnId> {
        let CacheSize::Bounded(limit) = self.limit else { return Vec::new() };
        let mut evicted = Vec::new();
        while self.order.len() > limit || (self.bytes > CACHE_BYTES && self.order.len() > 1) {
            let Some(oldest) = self.order.front() else { break };
            if self.completed.get(oldest).is_some_and(|terminal| terminal.seq > published_seq) {
                break;
            }
            let oldest = self.order.pop_front().expect("front exists");
            if let Some(terminal) = self.completed.remove(&oldest) {
                self.bytes -= weight(&terminal);
                tracing::trace!(turn_id = %oldest, "completed turn evicted from the cache");
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
    use crate::event::{EventKind, SCHEMA_VERSION};
    use crate::ids::{EventId, ProviderId, SessionId};
    use crate::time::Timestamp;
    use crate::turn::{TurnResult, TurnStatus};

    fn terminal(seq: u64, text: &str) -> Arc<Event> {
        Arc::new(Event {
            schema_version: SCHEMA_VERSION,
            id: EventId::from_string(format!("evt_{seq}")),
            seq,
            session_id: SessionId::new("s1").unwrap(),
            turn_id: Some(TurnId::from_string(format!("t{seq}"))),
            provider: ProviderId::new("p"),
            at: Timestamp::from_unix_micros(0),
            kind: EventKind::terminal(TurnStatus::Completed, TurnResult::text(text)),
            raw: None,
        })
    }

    /// Turns that ended with long final texts are kept by their bytes too, but for the newest;
    /// an unbounded cache keeps them all, as asked.
    #[test]
    fn long_final_texts_are_bounded_by_bytes() {
        let text = "x".repeat(12 << 20);
        for (limit, kept) in [(CacheSize::Bounded(1000), 2), (CacheSize::Unbounded, 5)] {
            let mut cache = TurnCache::new(limit);
            for seq in 1..=5 {
                cache.insert(TurnId::from_string(format!("t{seq}")), terminal(seq, &text));
                cache.evict(seq);
            }
            assert_eq!(cache.order.len(), kept, "{limit:?}");
            assert!(matches!(cache.finished(&TurnId::from_string("t5"), 5), Finished::Published(_)));
        }
        let mut cache = TurnCache::new(CacheSize::Bounded(1000));
        cache.insert(TurnId::from_string("t1"), terminal(1, &"y".repeat(40 << 20)));
        assert!(cache.evict(1).is_empty(), "the newest stays, however long");
        cache.insert(TurnId::from_string("t2"), terminal(2, "short"));
        assert_eq!(cache.evict(1), [TurnId::from_string("t1")]);
        assert_eq!(cache.bytes, 5);
    }

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
