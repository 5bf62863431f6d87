//! What holding an event costs: the memory store's target is at most 1.3× the event's JSON size
//! for the event and everything the store keeps for it. Allocations are counted by a global
//! allocator, so this test has a binary of its own.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agent_core::store::{Store, WriteBatch};
use agent_core::{Event, EventId, SessionId, SessionState, Timestamp, TurnStatus};
use agent_store_memory::MemoryStore;
use agent_testkit::conformance::store::{snapshot, turn};

/// The target: bytes held per event, over the event's JSON size.
const MAX_RATIO: f64 = 1.3;
const EVENTS: u64 = 10_000;
/// Events per write, as a busy session's flushes carry them.
const PER_WRITE: usize = 16;
const TEXT: &str = "a token or two of streamed assistant text, as a CLI sends it";

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

/// A streamed `message_delta` with its provider frame as `raw`.
fn delta(session: &SessionId) -> Event {
    let json = serde_json::json!({
        "schema_version": 1, "id": EventId::generate(), "seq": 1, "session_id": session, "turn_id": "turn-1",
        "provider": "claude", "at": Timestamp::now(), "type": "message_delta", "data": {"text": TEXT},
        "raw": {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": TEXT}},
    });
    serde_json::from_value(json).expect("event json")
}

#[tokio::test]
async fn the_store_holds_a_streamed_event_in_at_most_1_3_times_its_json_size() {
    let store = MemoryStore::new();
    let id = SessionId::new("footprint").unwrap();
    store.save_session(&snapshot(&id, SessionState::Running)).await.unwrap();
    store.save_turn(&turn(&id, "turn-1", TurnStatus::Running)).await.unwrap();

    // Built as the runtime builds events: the session, provider and turn IDs are clones of
    // shared `Arc<str>`s; the event ID, text and raw frame are the event's own.
    let template = delta(&id);
    let mut events = Vec::with_capacity(EVENTS as usize);
    let before_events = live();
    for seq in 1..=EVENTS {
        let mut event = template.clone();
        event.seq = seq;
        event.id = EventId::generate();
        events.push(Arc::new(event));
    }
    let event_bytes = live() - before_events;
    let json_bytes: usize = events.iter().map(|e| serde_json::to_string(&**e).unwrap().len()).sum();

    let before_store = live();
    for chunk in events.chunks(PER_WRITE) {
        let mut batch = WriteBatch::new(id.clone());
        batch.events = chunk.to_vec();
        store.write(&batch).await.unwrap();
    }
    let store_bytes = live() - before_store;
    drop(events); // the store's clones keep every event alive

    let per_event = |bytes: usize| bytes as f64 / EVENTS as f64;
    let ratio = (event_bytes + store_bytes) as f64 / json_bytes as f64;
    assert!(
        ratio <= MAX_RATIO,
        "an event of {:.0} JSON bytes is held in {:.0} bytes ({:.0} for the event, {:.1} kept by the store): \
         {ratio:.3}× its JSON size, above the {MAX_RATIO}× target",
        per_event(json_bytes),
        per_event(event_bytes + store_bytes),
        per_event(event_bytes),
        per_event(store_bytes),
    );
    assert_eq!(store.latest_seq(&id).await.unwrap(), Some(EVENTS));
}
