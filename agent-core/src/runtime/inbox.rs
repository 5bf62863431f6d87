//! The inbox: the bounded queue from a provider's [`Sink`](crate::Sink) to its session actor.
//!
//! A provider's reader parses a whole read of the CLI's output before it waits again, so it
//! hands over its messages in batches ([`SinkBuffer`](crate::provider::SinkBuffer)): a batch goes
//! in under one lock and wakes the actor at most once, and the actor takes everything queued in
//! one swap of two vectors that both keep their capacity — no allocation and no wake-up per
//! message on a streaming turn. Senders wait while [`SINK_CAPACITY`] messages, or
//! [`SINK_BYTES`] of the CLI's output, are queued, so a session that falls behind slows its
//! reader (and the CLI's pipe) instead of growing memory.
//!
//! Order is the order of the sends; a batch stays together.
//!
//! **Where the actor runs.** Tokio runs a task woken from one of its workers next on that same
//! worker, from a slot no other worker can steal, once the waking task yields. A reader that hands
//! over a full batch ([`SINK_BUFFER_CAPACITY`] messages: it parsed them from a read and has more
//! of it to parse) would therefore keep its actor waiting until it next waits on the pipe, and
//! the two would take turns on one core while another sits idle. So when a full batch finds the
//! queue empty on a multi-threaded runtime, the sender spawns an empty task right after waking
//! the actor: the new task takes the slot, the actor moves to the worker's queue, and tokio
//! unparks an idle worker, which steals the actor and runs it beside the reader.
//! Everything else — a batch flushed because the reader is about to wait, a single message, a
//! current-thread runtime — wakes the actor directly: it runs as soon as the reader waits, on
//! the same core, with no hop between threads (the latency path).

use std::collections::VecDeque;
use std::pin::pin;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::runtime::{Handle, RuntimeFlavor};
use tokio::sync::Notify;

use crate::provider::{ProviderMessage, SINK_BUFFER_CAPACITY, SINK_BYTES, SINK_CAPACITY, SinkClosed};

struct Shared {
    state: Mutex<State>,
    /// The receiver waits here for messages (or for the last sender to go).
    readable: Notify,
    /// Senders wait here for room (or for the receiver to go).
    writable: Notify,
}

#[derive(Default)]
struct State {
    queue: VecDeque<ProviderMessage>,
    /// The [`weight`] of the queued messages.
    bytes: usize,
    receiver_gone: bool,
    senders_gone: bool,
}

impl State {
    /// No more may go in: a message count or a byte count at its bound (a message alone always
    /// goes in, however large).
    fn is_full(&self) -> bool {
        self.queue.len() >= SINK_CAPACITY || (self.bytes >= SINK_BYTES && !self.queue.is_empty())
    }
}

/// What a message holds of the CLI's output, as the byte bound counts it: its raw JSON.
fn weight(message: &ProviderMessage) -> usize {
    let raw = match message {
        ProviderMessage::Event { raw, .. }
        | ProviderMessage::Request { raw, .. }
        | ProviderMessage::RequestResolved { raw, .. }
        | ProviderMessage::SessionUpdated { raw, .. } => raw.as_ref(),
        ProviderMessage::TransportDown { .. } => None,
    };
    raw.map_or(0, |raw| raw.get().len())
}

/// What a sender hands over: a batch, or one message (no vector allocated for it).
pub(crate) trait Outgoing {
    fn is_empty(&self) -> bool;
    /// True for a full [`SinkBuffer`](crate::provider::SinkBuffer)'s batch: its reader goes on
    /// parsing instead of waiting.
    fn is_full_batch(&self) -> bool;
    /// The messages' [`weight`].
    fn weight(&self) -> usize;
    /// Moves the messages to the end of `queue`, leaving `self` empty.
    fn move_to(&mut self, queue: &mut VecDeque<ProviderMessage>);
}

impl Outgoing for Vec<ProviderMessage> {
    fn is_empty(&self) -> bool {
        Vec::is_empty(self)
    }

    fn is_full_batch(&self) -> bool {
        self.len() >= SINK_BUFFER_CAPACITY
    }

    fn weight(&self) -> usize {
        self.iter().map(weight).sum()
    }

    fn move_to(&mut self, queue: &mut VecDeque<ProviderMessage>) {
        queue.extend(self.drain(..));
    }
}

impl Outgoing for Option<ProviderMessage> {
    fn is_empty(&self) -> bool {
        self.is_none()
    }

    fn is_full_batch(&self) -> bool {
        false
    }

    fn weight(&self) -> usize {
        self.as_ref().map_or(0, weight)
    }

    fn move_to(&mut self, queue: &mut VecDeque<ProviderMessage>) {
        queue.extend(self.take());
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends `messages` (leaving them empty; a vector keeps its capacity) if there is room.
    /// Returns whether they went in; `Err` once the receiver is gone.
    fn try_append(&self, messages: &mut impl Outgoing) -> Result<bool, SinkClosed> {
        // Counted before the lock, which the receiver may be waiting for.
        let weight = messages.weight();
        let mut state = self.lock();
        if state.receiver_gone {
            return Err(SinkClosed);
        }
        if state.is_full() {
            return Ok(false);
        }
        let was_empty = state.queue.is_empty();
        let full_batch = messages.is_full_batch();
        state.bytes += weight;
        messages.move_to(&mut state.queue);
        drop(state);
        // A non-empty queue has already woken the receiver, or it is reading it now.
        if was_empty {
            if full_batch && beside_is_free() {
                self.wake_beside();
            } else {
                self.readable.notify_one();
            }
        }
        Ok(true)
    }

    /// Wakes the receiver so that an idle worker runs it (see the module docs): woken from this
    /// worker it takes the worker's next-task slot, which other workers cannot steal; a task
    /// spawned right after takes that slot instead, moving the receiver to the worker's queue
    /// and unparking an idle worker, which steals it. The spawned task does nothing.
    fn wake_beside(&self) {
        self.readable.notify_one();
        drop(tokio::spawn(async {}));
    }
}

/// True on a runtime with another worker that could run the actor beside the sender.
fn beside_is_free() -> bool {
    Handle::try_current().is_ok_and(|runtime| {
        runtime.runtime_flavor() == RuntimeFlavor::MultiThread && runtime.metrics().num_workers() > 1
    })
}

/// The sending half, shared by every clone of a [`Sink`](crate::Sink); when the last clone
/// goes, the receiver sees the end.
pub(crate) struct Sender {
    shared: Arc<Shared>,
}

impl Sender {
    /// Queues `messages` in order, waiting for room; leaves them empty (a vector keeps its
    /// capacity). On `Err` the messages are left where they were.
    pub(crate) async fn send_all(&self, messages: &mut impl Outgoing) -> Result<(), SinkClosed> {
        if messages.is_empty() || self.shared.try_append(messages)? {
            return Ok(());
        }
        loop {
            // Registered before the check, so room made after it is not missed.
            let mut room = pin!(self.shared.writable.notified());
            room.as_mut().enable();
            if self.shared.try_append(messages)? {
                return Ok(());
            }
            room.await;
        }
    }

    /// Queues `messages` at once, room or not: for what a dropped buffer still held, so it is
    /// not lost. At most one buffer's worth beyond the capacity.
    pub(crate) fn force_all(&self, messages: &mut Vec<ProviderMessage>) {
        let mut state = self.shared.lock();
        if state.receiver_gone {
            return;
        }
        let was_empty = state.queue.is_empty();
        state.bytes += Outgoing::weight(messages);
        state.queue.extend(messages.drain(..));
        drop(state);
        if was_empty {
            self.shared.readable.notify_one();
        }
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.shared.lock().receiver_gone
    }
}

impl Drop for Sender {
    fn drop(&mut self) {
        self.shared.lock().senders_gone = true;
        self.shared.readable.notify_one();
    }
}

/// The receiving half, owned by the session's startup and then its actor.
pub(crate) struct Inbox {
    shared: Arc<Shared>,
}

/// A new inbox and its sender.
pub(crate) fn channel() -> (Sender, Inbox) {
    let shared =
        Arc::new(Shared { state: Mutex::new(State::default()), readable: Notify::new(), writable: Notify::new() });
    (Sender { shared: Arc::clone(&shared) }, Inbox { shared })
}

impl Inbox {
    /// Moves up to `limit` queued messages to the end of `buf`. Returns how many, and whether
    /// every sender is gone (read under the same lock, so nothing sent before is missed).
    fn take(&self, buf: &mut VecDeque<ProviderMessage>, limit: usize) -> (usize, bool) {
        let mut state = self.shared.lock();
        let n = state.queue.len().min(limit);
        if n == 0 {
            return (0, state.senders_gone);
        }
        let had_no_room = state.is_full();
        if n == state.queue.len() && buf.is_empty() {
            // The common case: hand over the whole queue and keep the caller's emptied vector
            // as the next one.
            std::mem::swap(&mut state.queue, buf);
            state.bytes = 0;
        } else {
            let taken: usize = state.queue.range(..n).map(weight).sum();
            state.bytes -= taken;
            buf.extend(state.queue.drain(..n));
        }
        drop(state);
        if had_no_room {
            self.shared.writable.notify_waiters();
        }
        (n, false)
    }

    /// Waits for messages and moves up to `limit` of them to `buf`. Returns 0 once every sender
    /// is gone and nothing is queued. Cancel-safe: nothing is taken unless it returns.
    pub(crate) async fn recv_many(&mut self, buf: &mut VecDeque<ProviderMessage>, limit: usize) -> usize {
        loop {
            let (n, ended) = self.take(buf, limit);
            if n > 0 || ended {
                return n;
            }
            // A send between the check and this wait leaves a permit: it returns at once.
            self.shared.readable.notified().await;
        }
    }

    /// The next message, waiting for one; `None` once every sender is gone.
    pub(crate) async fn recv(&mut self) -> Option<ProviderMessage> {
        let mut one = VecDeque::with_capacity(1);
        (self.recv_many(&mut one, 1).await > 0).then(|| one.pop_front()).flatten()
    }

    /// True when messages are queued: a take now would not wait.
    pub(crate) fn has_queued(&self) -> bool {
        !self.shared.lock().queue.is_empty()
    }

    /// The next queued message, if any.
    pub(crate) fn try_recv(&mut self) -> Option<ProviderMessage> {
        let mut one = VecDeque::with_capacity(1);
        (self.take(&mut one, 1).0 > 0).then(|| one.pop_front()).flatten()
    }
}

impl std::fmt::Debug for Inbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.shared.lock();
        f.debug_struct("Inbox").field("queued", &state.queue.len()).field("senders_gone", &state.senders_gone).finish()
    }
}

impl Drop for Inbox {
    fn drop(&mut self) {
        let dropped = {
            let mut state = self.shared.lock();
            state.receiver_gone = true;
            std::mem::take(&mut state.queue)
        };
        // Outside the lock: dropping a message may run arbitrary drops.
        drop(dropped);
        self.shared.writable.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{EventKind, RawJson};

    fn delta(text: &str) -> ProviderMessage {
        ProviderMessage::Event {
            turn: None,
            kind: EventKind::MessageDelta { item_id: None, text: text.into() },
            raw: None,
        }
    }

    fn text(message: &ProviderMessage) -> &str {
        match message {
            ProviderMessage::Event { kind: EventKind::MessageDelta { text, .. }, .. } => text,
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn batches_arrive_whole_and_in_order_and_the_vectors_keep_their_capacity() {
        let (tx, mut rx) = channel();
        let mut batch = Vec::with_capacity(8);
        batch.extend([delta("a"), delta("b")]);
        tx.send_all(&mut batch).await.unwrap();
        assert!(batch.is_empty() && batch.capacity() >= 8, "the sender's vector is kept for the next batch");
        batch.push(delta("c"));
        tx.send_all(&mut batch).await.unwrap();
        let mut got = VecDeque::new();
        assert_eq!(rx.recv_many(&mut got, 512).await, 3);
        assert_eq!(got.iter().map(text).collect::<Vec<_>>(), ["a", "b", "c"]);
        // A limit below what is queued takes the oldest first.
        batch.extend([delta("d"), delta("e")]);
        tx.send_all(&mut batch).await.unwrap();
        got.clear();
        assert_eq!(rx.recv_many(&mut got, 1).await, 1);
        assert_eq!(text(&got[0]), "d");
        assert_eq!(text(&rx.try_recv().unwrap()), "e");
        assert!(rx.try_recv().is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_inbox_holds_senders_back_until_the_receiver_takes() {
        let (tx, mut rx) = channel();
        let mut batch: Vec<_> = (0..SINK_CAPACITY).map(|i| delta(&i.to_string())).collect();
        tx.send_all(&mut batch).await.unwrap();
        let sender = tokio::spawn(async move {
            let mut more = vec![delta("late")];
            tx.send_all(&mut more).await.map(|()| tx)
        });
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        assert!(!sender.is_finished(), "no room: the sender waits");
        let mut got = VecDeque::new();
        assert_eq!(rx.recv_many(&mut got, usize::MAX).await, SINK_CAPACITY);
        let tx = sender.await.unwrap().expect("room was made");
        got.clear();
        assert_eq!(rx.recv_many(&mut got, usize::MAX).await, 1);
        assert_eq!(text(&got[0]), "late");
        drop(tx);
        assert_eq!(rx.recv_many(&mut got, usize::MAX).await, 0, "every sender gone: the end");
    }

    /// A message whose raw JSON is `bytes` long.
    fn line_of(bytes: usize) -> ProviderMessage {
        let json = format!("\"{}\"", "x".repeat(bytes - 2));
        ProviderMessage::Event {
            turn: None,
            kind: EventKind::Warning { message: String::new() },
            raw: Some(RawJson::parsed(json)),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn lines_of_megabytes_hold_senders_back_by_their_bytes() {
        let (tx, mut rx) = channel();
        // Larger than the bound, alone: it goes in.
        tx.send_all(&mut Some(line_of(SINK_BYTES + 1))).await.unwrap();
        let tx = Arc::new(tx);
        let sender = tokio::spawn({
            let tx = Arc::clone(&tx);
            async move { tx.send_all(&mut Some(line_of(1 << 20))).await }
        });
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        assert!(!sender.is_finished(), "a queue over its bytes has no room, whatever its count");
        let mut got = VecDeque::new();
        assert_eq!(rx.recv_many(&mut got, 1).await, 1);
        sender.await.unwrap().expect("room was made");
        // Under the bound, lines go in until it is reached.
        tx.send_all(&mut Some(line_of(SINK_BYTES - (1 << 20)))).await.unwrap();
        let sender = tokio::spawn({
            let tx = Arc::clone(&tx);
            async move { tx.send_all(&mut Some(line_of(1 << 20))).await }
        });
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        assert!(!sender.is_finished(), "{SINK_BYTES} bytes queued: no room");
        got.clear();
        assert_eq!(rx.recv_many(&mut got, 1).await, 1, "one taken: the bytes queued go down by its own");
        sender.await.unwrap().expect("room was made");
        got.clear();
        assert_eq!(rx.recv_many(&mut got, usize::MAX).await, 2);
    }

    /// A reader that hands over a full batch goes on parsing without yielding; its actor must
    /// get to the batch meanwhile, on the other worker. Woken directly, the receiver would wait
    /// in the sender's worker until the sender yields, which here it never does.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_full_batch_wakes_the_receiver_on_another_worker_while_its_sender_goes_on() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::time::{Duration, Instant};
        const ROUNDS: usize = 20;
        let (tx, mut rx) = channel();
        let taken = Arc::new(AtomicUsize::new(0));
        let receiver = tokio::spawn({
            let taken = Arc::clone(&taken);
            async move {
                let mut got = VecDeque::new();
                while got.len() < ROUNDS * SINK_BUFFER_CAPACITY {
                    let before = got.len();
                    assert!(rx.recv_many(&mut got, usize::MAX).await > 0, "the sender is still there");
                    taken.fetch_add(got.len() - before, Ordering::SeqCst);
                }
                got
            }
        });
        let sender = tokio::spawn(async move {
            for round in 0..ROUNDS {
                let first = round * SINK_BUFFER_CAPACITY;
                let mut batch: Vec<_> = (first..first + SINK_BUFFER_CAPACITY).map(|i| delta(&i.to_string())).collect();
                tx.send_all(&mut batch).await.unwrap();
                let deadline = Instant::now() + Duration::from_secs(10);
                while taken.load(Ordering::SeqCst) < first + SINK_BUFFER_CAPACITY {
                    assert!(Instant::now() < deadline, "the receiver did not run while its sender went on");
                    std::hint::spin_loop();
                }
            }
            tx
        });
        let tx = sender.await.unwrap();
        let got = receiver.await.unwrap();
        let expected: Vec<String> = (0..ROUNDS * SINK_BUFFER_CAPACITY).map(|i| i.to_string()).collect();
        assert_eq!(got.iter().map(text).collect::<Vec<_>>(), expected, "every message, in order");
        drop(tx);
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_receiver_fails_waiting_and_later_senders() {
        let (tx, rx) = channel();
        let mut batch: Vec<_> = (0..SINK_CAPACITY).map(|_| delta("x")).collect();
        tx.send_all(&mut batch).await.unwrap();
        let tx = Arc::new(tx);
        let waiting = tokio::spawn({
            let tx = Arc::clone(&tx);
            async move { tx.send_all(&mut vec![delta("y")]).await }
        });
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        drop(rx);
        assert_eq!(waiting.await.unwrap(), Err(SinkClosed));
        assert!(tx.is_closed());
        assert_eq!(tx.send_all(&mut vec![delta("z")]).await, Err(SinkClosed));
    }
}
