//! What holding an event costs: the memory store's target is at most 1.3× the raw frame the
//! event came from, for everything the store keeps for it. Allocations are counted by a global
//! allocator, so this test has a binary of its own.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agent_core::event::RawJson;
use agent_core::store::EventQuery;
use agent_core::store::{Store, WriteBatch};
use agent_core::{Event, EventId, EventKind, ProviderId, SessionId, SessionState, Timestamp, TurnId, TurnStatus};
use agent_store_memory::MemoryStore;
use agent_testkit::conformance::store::{snapshot, turn};

/// The target: bytes held per event, over the raw frame's size.
const MAX_RATIO: f64 = 1.3;
/// What an event may cost beyond its raw frame, whatever its size (a delta's text is found in
/// the frame, not kept twice).
const MAX_OVERHEAD: f64 = 64.0;
const EVENTS: u64 = 10_000; // a multiple of PER_WRITE
/// Events per write, as a busy session's flushes carry them.
const PER_WRITE: usize = 16;
const TEXT: &str = "a token or two of streamed assistant text";

/// Counts the bytes allocated and freed by everything in this test binary.
struct Counting;

static ALLOCATED: AtomicUsize = AtomicUsize::new(0);
static FREED: AtomicUsize = AtomicUsize::new(0);

fn live() -> usize {
    ALLOCATED.load(Ordering::SeqCst) - FREED.load(Ordering::SeqCst)
}

// SAFETY: every call is passed on to the system allocator unchanged; the counters only observe.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATED.fetch_add(layout.size(), Ordering::SeqCst);
        // SAFETY: the caller's guarantees for `layout` hold for the system allocator too.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        FREED.fetch_add(layout.size(), Ordering::SeqCst);
        // SAFETY: `ptr` was allocated by `System` with `layout` (every allocation goes there).
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// A Codex app-server delta line (about 240 bytes, as codex writes them) and a short Claude
/// stream event (about 110 bytes).
fn frames() -> [(&'static str, String); 2] {
    [
        (
            "codex",
            format!(
                r#"{{"method":"item/agentMessage/delta","params":{{"threadId":"0199a213-81c0-7800-8aa1-bbab2a035a53","turnId":"0199a213-81c0-7800-8aa1-bbab2a035a54","itemId":"msg_0123456789abcdef0123456789abcdef","delta":"{TEXT}","emittedAtMs":1764561234567}}}}"#
            ),
        ),
        (
            "claude",
            format!(r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","text":"{TEXT}"}}}}"#),
        ),
    ]
}

/// Holds `EVENTS` deltas of `raw` the way a session writes them and returns the bytes the store
/// keeps per event once the events themselves are gone.
async fn held_per_event(provider: &str, raw: &str) -> f64 {
    let store = MemoryStore::new();
    let id = SessionId::new(format!("footprint-{provider}")).unwrap();
    store.save_session(&snapshot(&id, SessionState::Running)).await.unwrap();
    store.save_turn(&turn(&id, "turn-1", TurnStatus::Running)).await.unwrap();

    // Built as the runtime builds them: shared session, provider and turn IDs, IDs in sequence
    // under the session's prefix, the frame as `raw`.
    let (turn, provider) = (TurnId::from_string("turn-1"), ProviderId::new(provider));
    let prefix = EventId::generate();
    let event = |seq: u64| {
        let kind =
            EventKind::MessageDelta { item_id: Some("msg_0123456789abcdef0123456789abcdef".into()), text: TEXT.into() };
        let event_id = EventId::from_string(format!("{prefix}.{seq}"));
        let raw = RawJson::parsed(raw.to_owned());
        let session = id.clone();
        Event::from_parts(
            event_id,
            seq,
            session,
            Some(turn.clone()),
            provider.clone(),
            Timestamp::now(),
            kind,
            Some(raw),
        )
    };
    let before = live();
    let mut written = Vec::new();
    for first in (1..=EVENTS).step_by(PER_WRITE) {
        let mut batch = WriteBatch::new(id.clone());
        batch.events = (first..first + PER_WRITE as u64).map(|seq| Arc::new(event(seq))).collect();
        store.write(&batch).await.unwrap();
        if first == 1 {
            written = batch.events.clone();
        }
    }
    let held = (live() - before) as f64 / EVENTS as f64;
    // What was written reads back unchanged.
    let read = store.read_events(&id, &EventQuery::default()).await.unwrap();
    assert_eq!(read.len() as u64, EVENTS);
    assert!(written.iter().zip(&read).all(|(w, r)| **w == **r), "events read back as written");
    held
}

#[tokio::test]
async fn the_store_holds_a_streamed_event_in_about_its_raw_size() {
    for (provider, raw) in frames() {
        let held = held_per_event(provider, &raw).await;
        let raw_len = raw.len() as f64;
        let overhead = held - raw_len;
        assert!(
            overhead <= MAX_OVERHEAD,
            "a {provider} delta of {raw_len} raw bytes is held in {held:.0} bytes: {overhead:.0} beyond its frame, \
             above {MAX_OVERHEAD}"
        );
        if provider == "codex" {
            let ratio = held / raw_len;
            assert!(ratio <= MAX_RATIO, "a codex delta of {raw_len} bytes is held in {held:.0} bytes: {ratio:.3}×");
        }
    }
}
