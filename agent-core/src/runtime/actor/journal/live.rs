//! The live channel: how published events reach a session's subscribers, bounded in sends and
//! in bytes.
//!
//! A subscriber that stops reading pins what the channel holds for it. In sends that is at most
//! the channel's capacity; in bytes the channel keeps account of the raw JSON of the sends it
//! may still hold, and past [`LIVE_BYTES`] it sends weak references instead, which only the
//! replay ring keeps alive (events without raw JSON always go strongly: they hold none of these
//! bytes). A subscriber that reaches one the ring let go has fallen behind by more than the ring
//! holds: it skips it, and the next event it gets shows the gap, which it reads back from the
//! store, or without one ends with `Lagged`, as when the channel itself moved past it. The ring
//! always keeps its newest event, and when the journal goes, that event is sent once more,
//! strongly ([`Live::send_last`]), so there always is a next event.

use std::collections::VecDeque;
use std::sync::Arc;

use tokio::sync::broadcast;

use crate::event::Event;
use crate::runtime::subscription::LiveBatch;

/// At most this many events go to live subscribers in one send while sends wait for one of
/// them. The live channel holds `event_buffer_size` sends, so a subscriber never lags sooner than
/// with one event per send, and one that stops reading pins at most this many times the buffer
/// (plus the large sends below), and at most [`LIVE_BYTES`] of their raw JSON.
pub(super) const LIVE_BATCH: usize = 16;

/// At most this many events go in one send while fewer than [`LIVE_LARGE_QUEUED`] sends wait
/// unread: one hand-over, and so at most one wake-up of a subscriber on another thread, for
/// everything the actor gathered (up to its `LIVE_COALESCE`, 1,024 events), where sends of
/// [`LIVE_BATCH`] woke it once per send (side by side on 1 M deltas with the memory store:
/// context switches halved, the run ~8 % faster).
pub(super) const LIVE_LARGE_BATCH: usize = 1024;

/// Large sends are made only while fewer sends than this wait unread, so the channel never
/// holds more of them: a subscriber that stops reading pins at most this many large sends
/// beside `event_buffer_size` sends of [`LIVE_BATCH`].
pub(super) const LIVE_LARGE_QUEUED: usize = 8;

/// Bytes of provider output (the events' raw JSON) the live channel holds unread at most, beside
/// the send that found it empty: with lines of megabytes, `event_buffer_size` sends of
/// [`LIVE_BATCH`] events would be gigabytes pinned by one subscriber that stopped reading. Past
/// it, sends hold the events weakly (see the module docs).
pub(super) const LIVE_BYTES: usize = 16 << 20;

/// The sending side of a session's live channel; created by the first subscription and dropped
/// when the last one is gone.
pub(super) struct Live {
    tx: broadcast::Sender<LiveBatch>,
    /// How many sends the channel holds: its capacity, rounded up to a power of two as Tokio
    /// rounds it.
    slots: usize,
    /// The raw bytes of each send the channel may still hold, oldest first (none for a send of
    /// weak references).
    sent: VecDeque<usize>,
    /// Their sum.
    sent_bytes: usize,
    /// Whether a send held its events weakly.
    held: bool,
}

impl Live {
    pub(super) fn new(capacity: usize) -> Self {
        Live {
            tx: broadcast::channel(capacity).0,
            slots: capacity.next_power_of_two(),
            sent: VecDeque::new(),
            sent_bytes: 0,
            held: false,
        }
    }

    pub(super) fn subscribe(&self) -> broadcast::Receiver<LiveBatch> {
        self.tx.subscribe()
    }

    /// Sends `pending` (published events in seq order, `bytes` of raw JSON), emptying it: in
    /// one send (up to [`LIVE_LARGE_BATCH`]) while subscribers keep up, in sends of
    /// [`LIVE_BATCH`] while sends wait for one of them. False once every subscription is gone.
    pub(super) fn send(&mut self, pending: &mut Vec<Arc<Event>>, mut bytes: usize) -> bool {
        // Counting the unread sends locks a few of the channel's slots: once per call, not per
        // event, and only when there is more than a small send's worth.
        let size =
            if pending.len() > LIVE_BATCH && self.tx.len() < LIVE_LARGE_QUEUED { LIVE_LARGE_BATCH } else { LIVE_BATCH };
        while !pending.is_empty() {
            let take = pending.len().min(size);
            let send_bytes =
                if take == pending.len() { bytes } else { pending[..take].iter().map(|e| e.raw_len()).sum() };
            bytes -= send_bytes;
            let batch = if self.has_room(send_bytes) {
                self.record(send_bytes);
                // One allocation per batch of several events, which takes them over (no count
                // changes per event); the pending vector is reused.
                match take {
                    1 => LiveBatch::One(pending.pop().expect("one event")),
                    _ => LiveBatch::Many(pending.drain(..take).collect()),
                }
            } else {
                self.record(0);
                self.held = true;
                LiveBatch::Held(pending.drain(..take).map(|event| Arc::downgrade(&event)).collect())
            };
            if self.tx.send(batch).is_err() {
                // Every subscription is gone: the rest are dropped.
                pending.clear();
                return false;
            }
        }
        true
    }

    /// Sends `newest`, the ring's newest event, again when the channel may hold held events
    /// that die with the ring: the journal is going away.
    pub(super) fn send_last(&mut self, newest: &Arc<Event>) {
        if self.held {
            let _ = self.tx.send(LiveBatch::One(Arc::clone(newest)));
        }
    }

    /// Whether a send of `bytes` may hold its events: it fits beside what the channel holds
    /// unread, or nothing is unread. Events without raw JSON always may: they hold none of the
    /// bytes bounded here, and a subscriber sees through them what it missed.
    fn has_room(&mut self, bytes: usize) -> bool {
        if bytes == 0 || self.sent_bytes + bytes <= LIVE_BYTES {
            return true;
        }
        // Forget the sends every subscriber has read (the channel dropped them).
        let unread = self.tx.len();
        while self.sent.len() > unread {
            self.sent_bytes -= self.sent.pop_front().expect("counted above");
        }
        self.sent_bytes == 0 || self.sent_bytes + bytes <= LIVE_BYTES
    }

    fn record(&mut self, bytes: usize) {
        // The oldest send's slot is overwritten by this one.
        if self.sent.len() == self.slots
            && let Some(oldest) = self.sent.pop_front()
        {
            self.sent_bytes -= oldest;
        }
        self.sent.push_back(bytes);
        self.sent_bytes += bytes;
    }
}
