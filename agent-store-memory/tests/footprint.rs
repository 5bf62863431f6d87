//! What holding an event costs: the memory store's target is at most 1.3× the raw frame the
//! event came from, for everything the store keeps for it; a streamed delta is held in little
//! more than its text. Allocations are counted by a global
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
/// What a streamed delta may cost beyond its text, whatever its frame's size: a frame is kept as
/// its difference from the last one kept whole.
const MAX_BEYOND_TEXT: f64 = 64.0;
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

/// A Codex app-server delta line (about 250 bytes, as codex writes them) and a Claude stream
/// event (about 230 bytes), each with a text, a time or a line ID that change from line to
/// line; `{text}`, `{at}` and `{uuid}` mark where.
fn frames() -> [(&'static str, &'static str); 2] {
    [
        (
            "codex",
            r#"{"method":"item/agentMessage/delta","params":{"threadId":"0199a213-81c0-7800-8aa1-bbab2a035a53","turnId":"0199a213-81c0-7800-8aa1-bbab2a035a54","itemId":"msg_0123456789abcdef0123456789abcdef","delta":"{text}","emittedAtMs":{at}}}"#,
        ),
        (
            "claude",
            r#"{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"{text}"}},"session_id":"4f7e2a61-0c1b-4d52-9a3e-6b8f0d2c9e17","parent_tool_use_id":null,"uuid":"{uuid}"}"#,
        ),
    ]
}

/// The `seq`th line of `frame`: a text of its own (a window into [`TEXT`] that moves along it,
/// every third one with a quote and a newline the CLI escaped), a time that moves every few
/// lines, a line ID of its own. Returns the line, where the text is written in it, and the text
/// decoded when it differs from what is written.
fn line(frame: &str, seq: u64) -> (String, std::ops::Range<usize>, Option<String>) {
    let from = (seq as usize * 7) % TEXT.len();
    let text = format!("{}{}", &TEXT[from..], &TEXT[..from]);
    let (written, decoded) = if seq.is_multiple_of(3) {
        (format!(r#"{text} \"quoted\"\n"#), Some(format!("{text} \"quoted\"\n")))
    } else {
        (text, None)
    };
    let uuid = format!("9e3779b9-7f4a-4c15-a1a8-{:012x}", seq.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 16);
    let line = frame.replace("{at}", &(1_764_561_234_567 + seq / 3).to_string()).replace("{uuid}", &uuid);
    let start = line.find("{text}").expect("a frame has a text");
    (line.replacen("{text}", &written, 1), start..start + written.len(), decoded)
}

/// Holds `EVENTS` deltas of `frame` the way a session writes them and returns the bytes the
/// store keeps per event once the events themselves are gone, and the frames' mean size.
async fn held_per_event(provider: &str, frame: &str) -> (f64, f64) {
    let store = MemoryStore::new();
    let id = SessionId::new(format!("footprint-{provider}")).unwrap();
    store.save_session(&snapshot(&id, SessionState::Running)).await.unwrap();
    store.save_turn(&turn(&id, "turn-1", TurnStatus::Running)).await.unwrap();

    // Built as the runtime builds them: shared session, provider and turn IDs, IDs in sequence
    // under the session's prefix, the frame as `raw`.
    let (turn, provider) = (TurnId::from_string("turn-1"), ProviderId::new(provider));
    let prefix = EventId::generate();
    let mut raw_bytes = 0;
    let mut event = |seq: u64| {
        // A text without escapes is cut from the frame, as providers cut it; the others are
        // decoded.
        let (line, text, decoded) = line(frame, seq);
        raw_bytes += line.len();
        let raw = RawJson::parsed(line);
        let text = decoded.map_or_else(|| raw.share(&raw.get()[text]), Into::into);
        let kind = EventKind::MessageDelta { item_id: Some("msg_0123456789abcdef0123456789abcdef".into()), text };
        let event_id = EventId::from_string(format!("{prefix}.{seq}"));
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
    let raw_len = raw_bytes as f64 / EVENTS as f64;
    // What was written reads back unchanged.
    let read = store.read_events(&id, &EventQuery::default()).await.unwrap();
    assert_eq!(read.len() as u64, EVENTS);
    assert!(written.iter().zip(&read).all(|(w, r)| **w == **r), "events read back as written");
    (held, raw_len)
}

#[tokio::test]
async fn the_store_holds_a_streamed_event_in_less_than_its_raw_size() {
    for (provider, frame) in frames() {
        let (held, raw_len) = held_per_event(provider, frame).await;
        let text_len = line(frame, EVENTS / 2).1.len() as f64;
        eprintln!("{provider}: {raw_len:.0}-byte frames held in {held:.1} bytes each");
        assert!(held <= raw_len * MAX_RATIO, "a {provider} delta of {raw_len:.0} raw bytes is held in {held:.0} bytes");
        // Kept as what it does not share with the last frame kept whole: its text (once, as
        // written, for an escaped one), the digits that changed, a few lengths and the header.
        let beyond_text = held - text_len;
        assert!(
            beyond_text <= MAX_BEYOND_TEXT,
            "a {provider} delta of {raw_len:.0} raw bytes is held in {held:.0} bytes: {beyond_text:.0} beyond its text"
        );
    }
}
