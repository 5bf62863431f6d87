//! The journal's replay side: what a new subscription gets from the ring, the store or the
//! live channel, and the checks of its cursor.

use std::sync::Arc;

use tokio::sync::watch;

use crate::error::{Error, Result};
use crate::event::Event;
use crate::ids::TurnId;
use crate::runtime::subscription::{Grant, past_latest};
use crate::session::ExitReason;

use super::{Journal, Live};

impl Journal {
    /// A finished turn's terminal event, if the ring still holds it.
    pub(in crate::runtime::actor) fn ring_terminal(&self, turn: &TurnId) -> Option<&Arc<Event>> {
        self.ring.iter().rev().find(|e| e.is_terminal() && e.turn_id.as_ref() == Some(turn))
    }

    /// A replay-only grant for a turn that finished with `terminal_seq`.
    pub(in crate::runtime::actor) fn grant_finished(
        &self,
        turn: Option<&TurnId>,
        after: Option<u64>,
        exact: bool,
        terminal_seq: u64,
        for_stream: bool,
        exit: watch::Receiver<Option<ExitReason>>,
    ) -> Result<Grant> {
        // Nothing of the finished turn lies after the cursor: an empty subscription, or for a
        // stream (which must end with the terminal event) `ReplayUnavailable`.
        let Some(after) = after.filter(|&after| after < terminal_seq) else {
            if for_stream {
                return Err(Error::ReplayUnavailable {
                    reason: format!(
                        "the turn already finished; its terminal event (seq {terminal_seq}) is not after the cursor"
                    ),
                });
            }
            return Ok(Grant::empty(self.published_seq, exit));
        };
        let buffered = self.buffered(after, terminal_seq, turn);
        let store_replay = match &self.store {
            Some(store) if !self.ring_covers(after) => Some((Arc::clone(store), terminal_seq)),
            _ => None,
        };
        if store_replay.is_none() {
            if !buffered.iter().any(|e| e.seq == terminal_seq) {
                return Err(Error::ReplayUnavailable {
                    reason: format!(
                        "the turn's terminal event (seq {terminal_seq}) is no longer buffered and no store holds it (the \
                         session has none, or its store stopped taking events)"
                    ),
                });
            }
            self.check_retained(turn, after, exact)?;
        }
        Ok(Grant { rx: None, live_from: terminal_seq, store_replay, buffered, store: None, exit, turn_ended: false })
    }

    /// A grant that replays from `after` (if any) and then follows live events.
    pub(in crate::runtime::actor) fn grant_live(
        &mut self,
        turn: Option<&TurnId>,
        after: Option<u64>,
        exact: bool,
        exit: watch::Receiver<Option<ExitReason>>,
    ) -> Result<Grant> {
        let (buffered, store_replay) = match after {
            None => (Vec::new(), None),
            Some(after) => {
                let store_replay = match &self.store {
                    Some(store) if !self.ring_covers(after) => Some((Arc::clone(store), self.published_seq)),
                    _ => None,
                };
                if store_replay.is_none() {
                    self.check_retained(turn, after, exact)?;
                }
                (self.buffered(after, self.published_seq, turn), store_replay)
            }
        };
        // Sized like the replay buffer: a subscriber that falls further behind catches up from
        // the store, or without one gets `Lagged`.
        let capacity = self.ring_capacity;
        // Published but not yet sent events are in the replay above; the subscription skips them
        // when they arrive live.
        let rx = self.live.get_or_insert_with(|| Live::new(capacity)).subscribe();
        let store = self.store.clone();
        Ok(Grant {
            rx: Some(rx),
            live_from: self.published_seq,
            store_replay,
            buffered,
            store,
            exit,
            turn_ended: false,
        })
    }

    /// The `seq` of the latest event the session made (0 before any).
    pub(in crate::runtime::actor) fn latest_seq(&self) -> u64 {
        self.next_seq - 1
    }

    /// An exact cursor names an event the session has made: one past its latest event would
    /// skip the live events up to it without a word.
    pub(in crate::runtime::actor) fn check_cursor(&self, after: u64) -> Result<()> {
        let latest = self.latest_seq();
        if after > latest {
            return Err(past_latest(after, latest));
        }
        Ok(())
    }

    /// With no store to replay from, an exact cursor must find every event it asks for in the
    /// ring: a gap is an error, never silent.
    fn check_retained(&self, turn: Option<&TurnId>, after: u64, exact: bool) -> Result<()> {
        if !exact || self.ring_covers(after) {
            return Ok(());
        }
        // Only the oldest turn in the ring can have lost events to eviction.
        let lost = match (turn, &self.last_evicted) {
            (None, _) => true,
            (Some(turn), Some((evicted, seq))) => evicted == turn && *seq > after,
            (Some(_), None) => false,
        };
        if !lost {
            return Ok(());
        }
        let first = self.ring.front().map_or(self.published_seq + 1, |e| e.seq);
        Err(Error::ReplayUnavailable {
            reason: format!(
                "events after seq {after} are no longer buffered (the buffer starts at seq {first}) and no store \
                 holds them (the session has none, or its store stopped taking events)"
            ),
        })
    }

    /// Whether the ring holds every published event after `after`.
    pub(super) fn ring_covers(&self, after: u64) -> bool {
        match self.ring.front() {
            Some(first) => first.seq <= after + 1,
            None => after >= self.published_seq,
        }
    }

    fn buffered(&self, after: u64, upto: u64, turn: Option<&TurnId>) -> Vec<Arc<Event>> {
        let start = self.ring.partition_point(|e| e.seq <= after);
        self.ring
            .range(start..)
            .take_while(|e| e.seq <= upto)
            .filter(|e| turn.is_none_or(|t| e.turn_id.as_ref() == Some(t)))
            .cloned()
            .collect()
    }
}
