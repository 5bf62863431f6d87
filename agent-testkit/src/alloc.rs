//! A global allocator that counts allocations, for allocation-budget tests.
//!
//! A test binary installs it with `#[global_allocator]` and reads [`allocations`] around the
//! path it measures; every thread is counted.
//!
//! ```no_run
//! use agent_testkit::alloc::{Counting, allocations};
//!
//! #[global_allocator]
//! static GLOBAL: Counting = Counting;
//!
//! let before = allocations();
//! let text = String::from("counted");
//! assert!(allocations() > before);
//! # drop(text);
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

/// The system allocator, counting every allocation and reallocation (not deallocations).
#[derive(Debug)]
pub struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

/// Allocations (and reallocations) so far, on every thread, while [`Counting`] is the global
/// allocator; always 0 otherwise.
pub fn allocations() -> u64 {
    ALLOCATIONS.load(Ordering::Relaxed)
}

// SAFETY: every call is forwarded unchanged to the system allocator; the counter is an atomic.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded with the caller's pointer, layout and size.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's pointer and layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// The allocation budget of a streamed delta, line to subscriber: the target every provider's
/// event path is held to.
pub const DELTA_BUDGET: f64 = 4.0;
/// Deltas in the turn [`assert_delta_budget`] measures, and how many of them warm the path up
/// before counting starts.
const DELTAS: u64 = 20_000;
const WARM_UP: u64 = 2_000;

/// Checks a provider's event path against [`DELTA_BUDGET`]: `provider` runs the fake `cli`
/// (pointed at by `configure`, given the fake's environment and its session options) through
/// `exec`, with `store`, for a turn of 20,000 40-character deltas, and every thread's
/// allocations are counted from the 2,000th delta to the last, divided by the deltas between.
/// Prints the figure; panics above the budget.
///
/// The test binary must install [`Counting`] as its global allocator, and should hold nothing
/// else: other tests' allocations would be counted.
pub async fn assert_delta_budget(
    provider: agent_core::DynProvider,
    exec: agent_core::DynExec,
    store: agent_core::DynStore,
    cli: crate::fake_cli::FakeCli,
    configure: impl FnOnce(&crate::fake_cli::FakeCliEnv, agent_core::SessionOptions) -> agent_core::SessionOptions,
) {
    use crate::fake_cli::{FakeCliEnv, FakeScript};

    let deltas = (0..DELTAS).map(|i| format!("{i:08} the quick brown fox jumps ov"));
    let script = FakeScript::new().handshake().turn_start().deltas(deltas).complete();
    let env = FakeCliEnv::new(cli, &script).unwrap_or_else(|e| panic!("{e}"));
    let name = provider.id();
    let harness = agent_core::Harness::builder()
        .provider(provider)
        .exec(exec)
        .store(agent_core::StoreChoice::Custom(store))
        .build()
        .expect("harness");
    let options = configure(&env, env.session_options());
    let per_delta = per_streamed_delta(&harness, name.as_str(), options, DELTAS, WARM_UP).await;
    println!("{per_delta:.2} allocations per streamed delta");
    assert!(per_delta <= DELTA_BUDGET, "{per_delta:.2} allocations per streamed delta; the budget is {DELTA_BUDGET}");
}

/// Allocations per streamed delta through `harness`: starts a `provider` session with
/// `options` (a fake CLI whose turn streams exactly `deltas` message deltas, then completes),
/// subscribes, runs the turn, and counts every thread's allocations from the `warm_up`-th delta
/// to the last, divided by the deltas in between. Panics unless every delta arrives and the
/// turn completes.
///
/// The session's event buffer is set to hold the whole turn: a subscriber that falls behind
/// catches up from the store, which allocates by the batch and would make the count depend on
/// the machine's load.
async fn per_streamed_delta(
    harness: &agent_core::Harness,
    provider: &str,
    options: agent_core::SessionOptions,
    deltas: u64,
    warm_up: u64,
) -> f64 {
    use agent_core::{EventKind, Replay, TurnOptions};

    let options = options.event_buffer_size(usize::try_from(deltas).unwrap_or(usize::MAX).saturating_add(64));
    let session = harness.start_session(provider, options).await.expect("session starts");
    let mut events = harness.subscribe(&session, Replay::Latest).await.expect("subscribe");
    let turn = harness.start_turn(&session, "stream", TurnOptions::new()).await.expect("turn");
    let (mut seen, mut counted_from, mut counted) = (0u64, 0u64, 0u64);
    while let Some(event) = events.next().await {
        let event = event.expect("the subscriber keeps up");
        match &event.kind {
            EventKind::MessageDelta { .. } => {
                seen += 1;
                if seen == warm_up {
                    counted_from = allocations();
                } else if seen == deltas {
                    counted = allocations() - counted_from;
                }
            }
            kind if kind.is_terminal() => break,
            _ => {}
        }
    }
    assert_eq!(seen, deltas, "every delta arrived");
    harness.await_turn(&turn, None).await.expect("the turn completed");
    counted as f64 / (deltas - warm_up) as f64
}
