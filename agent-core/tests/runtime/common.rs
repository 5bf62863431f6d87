//! Shared fixtures: a harness with the scripted provider and a memory store.

use std::sync::Arc;
use std::time::Duration;

use agent_core::store::{EventQuery, QueuedWrite, RequestQuery, Store, WriteBatch};
use agent_core::testing::{ScriptedControl, ScriptedProvider, ScriptedSession};
use agent_core::*;
use agent_store_memory::MemoryStore;
use futures::StreamExt;

pub(crate) const PROVIDER: &str = "scripted";

pub(crate) struct Fixture {
    pub(crate) harness: Harness,
    pub(crate) control: ScriptedControl,
    pub(crate) store: Arc<MemoryStore>,
}

impl Fixture {
    /// A harness with the scripted provider and a fresh memory store.
    pub(crate) fn new() -> Self {
        Self::with(|b| b)
    }

    pub(crate) fn with(configure: impl FnOnce(HarnessBuilder) -> HarnessBuilder) -> Self {
        let (provider, control) = ScriptedProvider::new(PROVIDER);
        let store = Arc::new(MemoryStore::new());
        let builder = Harness::builder().provider(provider).store(StoreChoice::Custom(store.clone()));
        Fixture { harness: configure(builder).build().expect("harness"), control, store }
    }

    /// A harness whose store's writes and reads the test can make fail.
    pub(crate) fn controlled() -> (Self, Arc<ControlledStore>) {
        let store = ControlledStore::new();
        let f = Self::with(|b| b.store(StoreChoice::Custom(store.clone())));
        (f, store)
    }

    pub(crate) fn dyn_store(&self) -> DynStore {
        self.store.clone()
    }

    /// Starts a session and returns it with its scripted side.
    pub(crate) async fn session(&self, options: SessionOptions) -> (SessionRef, ScriptedSession) {
        let session = self.harness.start_session(PROVIDER, options).await.expect("start_session");
        let remote = self.control.session(&session.id).await;
        (session, remote)
    }

    /// Starts a turn and waits until the provider admitted it.
    pub(crate) async fn admitted_turn(&self, session: &SessionRef, input: &str) -> Turn {
        let mut events = self.harness.subscribe(session, Replay::Latest).await.expect("subscribe");
        let turn = self.harness.start_turn(session, input, TurnOptions::new()).await.expect("start_turn");
        next_of(&mut events, "turn_started").await;
        turn
    }
}

pub(crate) fn opts() -> SessionOptions {
    SessionOptions::new(std::env::temp_dir())
}

/// The next event of the subscription (fails after a generous paused-clock timeout).
pub(crate) async fn next(events: &mut Subscription) -> Arc<Event> {
    match tokio::time::timeout(Duration::from_secs(600), events.next()).await {
        Ok(Some(Ok(event))) => event,
        other => panic!("expected an event, got {other:?}"),
    }
}

/// Skips to the next event of type `kind`.
pub(crate) async fn next_of(events: &mut Subscription, kind: &str) -> Arc<Event> {
    loop {
        let event = next(events).await;
        if event.type_name() == kind {
            return event;
        }
    }
}

/// The type names of every event of the subscription until it ends.
pub(crate) async fn drain_types(events: Subscription) -> Vec<&'static str> {
    events.map(|e| e.expect("no lag").type_name()).collect().await
}

pub(crate) fn request_of(event: &Arc<Event>) -> Request {
    match &event.kind {
        EventKind::RequestCreated(request) => (**request).clone(),
        other => panic!("expected request_created, got {other:?}"),
    }
}

/// What a [`ControlledStore`] does with writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WriteMode {
    Normal,
    Fail,
    /// Refuses writes as conflicting with what another writer stored.
    Conflict,
    Hang,
    Panic,
    /// Writes after a short (paused-clock) delay.
    Slow,
    /// Queues writes in order ([`Store::enqueue`]) until the test releases them
    /// ([`ControlledStore::release`]).
    Queued,
    /// Holds the next `write` (the mode goes back to `Normal` as it arrives) until the test
    /// opens the gate ([`ControlledStore::arrival`], [`ControlledStore::open_gate`]).
    Gated,
    /// Commits the next `write` but never answers it (the mode goes back to `Normal` as it
    /// arrives): a write whose outcome the caller cannot know.
    LostAnswer,
}

/// A write queued in [`WriteMode::Queued`].
#[derive(Debug)]
pub(crate) struct QueuedBatch {
    pub(crate) batch: WriteBatch,
    pub(crate) follows: bool,
    answer: tokio::sync::oneshot::Sender<Result<(), StoreError>>,
}

/// A memory store whose writes can be made to fail or hang.
#[derive(Debug)]
pub(crate) struct ControlledStore {
    pub(crate) inner: MemoryStore,
    mode: std::sync::Mutex<WriteMode>,
    fail_reads: std::sync::atomic::AtomicBool,
    /// `fetch_session` never answers.
    hang_session_reads: std::sync::atomic::AtomicBool,
    queued: std::sync::Mutex<(std::collections::VecDeque<QueuedBatch>, bool)>,
    /// The next `enqueue` panics (in [`WriteMode::Queued`]).
    panic_next_enqueue: std::sync::atomic::AtomicBool,
    enqueue_calls: std::sync::atomic::AtomicUsize,
    /// The most raw JSON one `read_events` returned, in bytes.
    largest_read: std::sync::atomic::AtomicUsize,
    /// A write held in [`WriteMode::Gated`] arrived; the gate opened.
    gate: (tokio::sync::Notify, tokio::sync::Notify),
}

impl ControlledStore {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(ControlledStore {
            inner: MemoryStore::new(),
            mode: std::sync::Mutex::new(WriteMode::Normal),
            fail_reads: Default::default(),
            hang_session_reads: Default::default(),
            queued: Default::default(),
            panic_next_enqueue: Default::default(),
            enqueue_calls: Default::default(),
            largest_read: Default::default(),
            gate: Default::default(),
        })
    }

    /// Waits until a write is held at the gate ([`WriteMode::Gated`]).
    pub(crate) async fn arrival(&self) {
        self.gate.0.notified().await;
    }

    /// Lets the write held at the gate go on.
    pub(crate) fn open_gate(&self) {
        self.gate.1.notify_one();
    }

    /// Makes `fetch_session` hang from now on.
    pub(crate) fn hang_session_reads(&self) {
        self.hang_session_reads.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    pub(crate) fn set(&self, mode: WriteMode) {
        *self.mode.lock().unwrap() = mode;
    }

    /// `(first seq, last seq, follows)` of each write queued and not yet released.
    pub(crate) fn queued(&self) -> Vec<(u64, u64, bool)> {
        let queued = self.queued.lock().unwrap();
        let seqs = |b: &WriteBatch| (b.events.first().map_or(0, |e| e.seq), b.events.last().map_or(0, |e| e.seq));
        queued.0.iter().map(|q| (seqs(&q.batch).0, seqs(&q.batch).1, q.follows)).collect()
    }

    /// Commits the oldest queued write, or fails it (`fail`); a write that follows a failed one
    /// is refused unapplied, as the contract of `Store::enqueue` says. Returns its outcome.
    pub(crate) fn release(&self, fail: bool) -> Result<(), StoreError> {
        let mut queued = self.queued.lock().unwrap();
        let write = queued.0.pop_front().expect("a queued write");
        let result = if fail || (write.follows && queued.1) {
            Err(StoreError::WriteRefused("the queued write failed".into()))
        } else {
            self.inner.write_now(&write.batch).expect("the memory store writes at once")
        };
        queued.1 = result.is_err();
        let _ = write.answer.send(result.as_ref().map_err(StoreError::replicate).copied());
        result
    }

    /// Makes the next `enqueue` panic.
    pub(crate) fn panic_next_enqueue(&self) {
        self.panic_next_enqueue.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// How many times `enqueue` was called in [`WriteMode::Queued`].
    pub(crate) fn enqueue_calls(&self) -> usize {
        self.enqueue_calls.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The most raw JSON one `read_events` returned, in bytes.
    pub(crate) fn largest_read(&self) -> usize {
        self.largest_read.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Makes event reads fail (or work again).
    pub(crate) fn fail_reads(&self, fail: bool) {
        self.fail_reads.store(fail, std::sync::atomic::Ordering::SeqCst);
    }
}

#[async_trait::async_trait]
#[deny(clippy::missing_trait_methods)]
impl Store for ControlledStore {
    async fn save_session(&self, s: &SessionSnapshot) -> Result<(), StoreError> {
        self.inner.save_session(s).await
    }
    async fn fetch_session(&self, id: &SessionId) -> Result<Option<SessionSnapshot>, StoreError> {
        if self.hang_session_reads.load(std::sync::atomic::Ordering::SeqCst) {
            futures::future::pending::<()>().await;
        }
        self.inner.fetch_session(id).await
    }
    async fn list_sessions(&self) -> Result<Vec<SessionSnapshot>, StoreError> {
        self.inner.list_sessions().await
    }
    async fn delete_session(&self, id: &SessionId) -> Result<(), StoreError> {
        self.inner.delete_session(id).await
    }
    async fn save_turn(&self, t: &Turn) -> Result<(), StoreError> {
        self.inner.save_turn(t).await
    }
    async fn fetch_turn(&self, s: &SessionId, t: &TurnId) -> Result<Option<Turn>, StoreError> {
        self.inner.fetch_turn(s, t).await
    }
    async fn list_turns(&self, s: &SessionId) -> Result<Vec<Turn>, StoreError> {
        self.inner.list_turns(s).await
    }
    async fn save_request(&self, r: &Request) -> Result<(), StoreError> {
        self.inner.save_request(r).await
    }
    async fn fetch_request(&self, s: &SessionId, r: &RequestId) -> Result<Option<Request>, StoreError> {
        self.inner.fetch_request(s, r).await
    }
    async fn list_requests(&self, s: &SessionId) -> Result<Vec<Request>, StoreError> {
        self.inner.list_requests(s).await
    }
    async fn read_requests(&self, s: &SessionId, q: &RequestQuery) -> Result<Vec<Request>, StoreError> {
        self.inner.read_requests(s, q).await
    }
    async fn append_events(&self, s: &SessionId, e: &[Arc<Event>]) -> Result<(), StoreError> {
        self.inner.append_events(s, e).await
    }
    async fn read_events(&self, s: &SessionId, q: &EventQuery) -> Result<Vec<Arc<Event>>, StoreError> {
        if self.fail_reads.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(StoreError::Unavailable("the disk went away".into()));
        }
        let events = self.inner.read_events(s, q).await?;
        let bytes = events.iter().map(|e| e.raw.as_ref().map_or(0, |raw| raw.get().len())).sum();
        self.largest_read.fetch_max(bytes, std::sync::atomic::Ordering::SeqCst);
        Ok(events)
    }
    async fn latest_seq(&self, s: &SessionId) -> Result<Option<u64>, StoreError> {
        self.inner.latest_seq(s).await
    }
    /// Not failed by `fail_reads`, which fails the reads of ranges of events only.
    async fn last_turn_event(&self, s: &SessionId, t: &TurnId) -> Result<Option<Arc<Event>>, StoreError> {
        self.inner.last_turn_event(s, t).await
    }
    /// At once when the mode needs no waiting; hanging and slow writes go through `write`.
    fn write_now(&self, batch: &WriteBatch) -> Option<Result<(), StoreError>> {
        let mode = *self.mode.lock().unwrap();
        match mode {
            WriteMode::Normal => self.inner.write_now(batch),
            WriteMode::Fail => Some(Err(StoreError::WriteRefused("disk is read-only".into()))),
            WriteMode::Conflict => Some(Err(StoreError::Conflict("seq 1 holds a different event".into()))),
            WriteMode::Panic => panic!("store bug"),
            WriteMode::Hang | WriteMode::Slow | WriteMode::Queued | WriteMode::Gated | WriteMode::LostAnswer => None,
        }
    }
    fn enqueue(&self, batch: &WriteBatch, follows: bool) -> Option<QueuedWrite> {
        if *self.mode.lock().unwrap() != WriteMode::Queued {
            return None;
        }
        self.enqueue_calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if self.panic_next_enqueue.swap(false, std::sync::atomic::Ordering::SeqCst) {
            panic!("store bug while queuing");
        }
        let (answer, answered) = tokio::sync::oneshot::channel();
        self.queued.lock().unwrap().0.push_back(QueuedBatch { batch: batch.clone(), follows, answer });
        Some(Box::pin(
            async move { answered.await.unwrap_or_else(|_| Err(StoreError::WriteRefused("dropped".into()))) },
        ))
    }
    async fn write(&self, batch: &WriteBatch) -> Result<(), StoreError> {
        let mode = *self.mode.lock().unwrap();
        match mode {
            WriteMode::Normal | WriteMode::Queued => self.inner.write(batch).await,
            WriteMode::Fail => Err(StoreError::WriteRefused("disk is read-only".into())),
            WriteMode::Conflict => Err(StoreError::Conflict("seq 1 holds a different event".into())),
            WriteMode::Hang => futures::future::pending().await,
            WriteMode::Panic => panic!("store bug"),
            WriteMode::Slow => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                self.inner.write(batch).await
            }
            WriteMode::Gated => {
                self.set(WriteMode::Normal);
                self.gate.0.notify_one();
                self.gate.1.notified().await;
                self.inner.write(batch).await
            }
            WriteMode::LostAnswer => {
                self.set(WriteMode::Normal);
                self.inner.write(batch).await.expect("the held-back write commits");
                futures::future::pending().await
            }
        }
    }
}

/// A writer that keeps what a tracing subscriber prints, for the test binaries that read traces
/// (`secrets`, `telemetry`); the runtime binary has no use for it.
#[allow(dead_code)]
#[derive(Clone, Default)]
pub(crate) struct Captured(pub(crate) Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[allow(dead_code)]
impl Captured {
    /// Everything printed so far.
    pub(crate) fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

/// Waits (a bounded number of yields) until the stored snapshot of `session` no longer has its
/// startup marker, and says whether it got there.
pub(crate) async fn acknowledged(f: &Fixture, session: &SessionRef) -> bool {
    for _ in 0..1000 {
        if f.store.fetch_session(&session.id).await.unwrap().is_some_and(|s| s.startup.is_none()) {
            return true;
        }
        tokio::task::yield_now().await;
    }
    false
}

/// Reads a subscription to its end.
pub(crate) trait SubscriptionExt {
    async fn next_is_end(&mut self) -> bool;
}

impl SubscriptionExt for Subscription {
    async fn next_is_end(&mut self) -> bool {
        loop {
            match tokio::time::timeout(Duration::from_secs(60), self.next()).await {
                Ok(None) => return true,
                Ok(Some(Ok(_))) => continue,
                _ => return false,
            }
        }
    }
}
